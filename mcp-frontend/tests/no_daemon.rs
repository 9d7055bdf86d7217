//! Without a daemon (no root needed): the server still starts, lists its tool, answers the
//! first call with how to start a daemon, keeps stdout to JSON-RPC, and exits on stdin EOF.
//! Plain JSON-RPC over the pipes, so it runs anywhere.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[test]
fn without_a_daemon_the_first_call_says_how_to_start_one() {
    let socket = "/nonexistent/vivarium-mcp-test/vivariumd.sock";
    let mut child = Command::new(env!("CARGO_BIN_EXE_vivarium-mcp"))
        .args(["--socket", socket])
        .env_remove("VIVARIUM_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn vivarium-mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut send = |msg: Value| {
        writeln!(stdin, "{msg}").expect("write");
        stdin.flush().expect("flush");
    };
    let mut recv = || {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("read");
        serde_json::from_str::<Value>(&line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"))
    };

    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "no-daemon-test", "version": "0"}}}),
    );
    let init = recv();
    let info = &init["result"]["serverInfo"];
    assert_eq!(info["name"], "vivarium-mcp", "{init}");
    assert_eq!(info["title"], "Vivarium: sandboxed Python", "{init}");
    assert!(
        info["description"]
            .as_str()
            .is_some_and(|d| d.contains("sandbox")),
        "{init}"
    );
    assert!(
        info["websiteUrl"]
            .as_str()
            .is_some_and(|w| w.starts_with("https://")),
        "{init}"
    );
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = recv();
    let tool = &list["result"]["tools"][0];
    assert_eq!(tool["name"], "run_python", "{list}");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["run_python", "close_session", "list_sessions"],
        "{list}"
    );
    assert_eq!(
        tool["annotations"],
        json!({"title": "Run Python in a sandbox", "readOnlyHint": false,
               "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}),
        "{tool}"
    );
    assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");

    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": "print(1)"}}}));
    let call = recv();
    assert_eq!(call["result"]["isError"], true, "{call}");
    let text = call["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("sudo vivariumd --profiles"), "{text}");
    assert!(text.contains(socket), "{text}");

    send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"cod": "typo"}}}));
    let bad = recv();
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert!(bad["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("unknown field `cod`")));

    // Sessions: an id this server never minted is "no such session" with no daemon
    // needed; opening one needs the daemon, and says how to start it.
    let alias = "mcp_00112233445566778899aabbccddeeff";
    send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": {"name": "close_session", "arguments": {"session_id": alias}}}));
    let unknown = recv();
    assert_eq!(unknown["result"]["isError"], true, "{unknown}");
    assert!(unknown["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("no such session") && t.contains(alias)));
    send(json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": "x = 1", "session_id": "new"}}}));
    let open = recv();
    assert_eq!(open["result"]["isError"], true, "{open}");
    assert!(open["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("sudo vivariumd --profiles")));
    send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": "list_sessions", "arguments": {}}}));
    let list = recv();
    assert_eq!(list["result"]["isError"], false, "{list}");
    assert_eq!(
        list["result"]["structuredContent"]["sessions"],
        json!([]),
        "{list}"
    );

    drop(stdin);
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "{status}");
            break;
        }
        if t0.elapsed() > Duration::from_secs(3) {
            let _ = child.kill();
            panic!("vivarium-mcp did not exit within 3 s of stdin EOF");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).expect("read rest");
    for line in rest.lines() {
        serde_json::from_str::<Value>(line).expect("stdout carries JSON-RPC only");
    }
}

/// A connection that ends before `initialize` is a normal end: an immediate EOF, or a
/// 2026-07-28 client that only asks `server/discover`. Exit 0, nothing on stderr.
#[test]
fn a_connection_without_initialize_ends_cleanly() {
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {
    "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "discover-only", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}
    }}});
    for input in [String::new(), format!("{discover}\n")] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vivarium-mcp"))
            .args(["--socket", "/nonexistent/vivarium-mcp-test/vivariumd.sock"])
            .env_remove("VIVARIUM_SOCKET")
            .env("VIVARIUM_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn vivarium-mcp");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).expect("write");
        drop(stdin);
        let out = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The startup log says what happened: nobody listens there (#21.12).
        let startup: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("/nonexistent/vivarium-mcp-test"))
            .collect();
        assert!(
            startup.len() == 1 && startup[0].contains("no daemon is listening"),
            "{startup:?}"
        );
        let stderr: Vec<&str> = stderr
            .lines()
            // The startup warning about the missing daemon is expected.
            .filter(|l| !l.contains("/nonexistent/vivarium-mcp-test"))
            .collect();
        assert!(out.status.success(), "{input:?}: {} {stderr:?}", out.status);
        assert!(stderr.is_empty(), "{input:?}: {stderr:?}");
        if !input.is_empty() {
            let answer: Value =
                serde_json::from_str(stdout.lines().next().expect("an answer")).expect("JSON");
            assert_eq!(answer["id"], 1, "{answer}");
            assert!(answer.get("result").is_some(), "{answer}");
        }
    }
}
