//! Real MCP clients over Streamable HTTP against `vivarium-mcp --http` and the real
//! daemon, with tokens from the test issuer:
//!
//! - the official TypeScript SDK's client (`@modelcontextprotocol/sdk`,
//!   `StreamableHTTPClientTransport` with a bearer header): connect, tools/list, and a
//!   `run_python` call that prints 42;
//! - the MCP Inspector's CLI mode (`@modelcontextprotocol/inspector-cli`): one
//!   `tools/call` of `run_python`.
//!
//! Both are pinned by mcp-frontend/tests/clients/http-node/package-lock.json (`npm ci`
//! there). Without its node_modules the test skips loudly, or fails when
//! `VIVARIUM_REQUIRE_NODE_CLIENTS=1` (CI). A fetch wrapper preloaded into each client
//! (log_fetch.mjs) logs the protocol revision it negotiated and sent; the test prints it.
//!
//! Needs root (the daemon does).
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use vivarium_e2e::http::*;
use vivarium_e2e::{require_root, test_name, workspace_dir, Daemon, DaemonOpts};

fn node_dir() -> PathBuf {
    workspace_dir().join("mcp-frontend/tests/clients/http-node")
}

/// Whether the pinned Node clients are installed; a loud skip, or a failure under
/// `VIVARIUM_REQUIRE_NODE_CLIENTS=1`.
fn require_node_clients() -> bool {
    let dir = node_dir();
    let installed = dir.join("node_modules/@modelcontextprotocol/sdk").is_dir()
        && dir
            .join("node_modules/@modelcontextprotocol/inspector-cli")
            .is_dir();
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if installed && node {
        return true;
    }
    let why = if node {
        format!("{} has no node_modules (run `npm ci` there)", dir.display())
    } else {
        "node is not on PATH".to_string()
    };
    let name = test_name();
    if std::env::var("VIVARIUM_REQUIRE_NODE_CLIENTS").as_deref() == Ok("1") {
        panic!("{name}: {why}, and VIVARIUM_REQUIRE_NODE_CLIENTS=1 says they are installed");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {name}: {why} (CI sets VIVARIUM_REQUIRE_NODE_CLIENTS=1)"
    );
    false
}

/// Run `cmd` to its end, killed after `limit`.
fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let status = child.wait().unwrap();
            let stderr = String::from_utf8_lossy(&err.join().unwrap()).to_string();
            panic!("{cmd:?} did not finish in {limit:?} ({status}):\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn node_env(cmd: &mut Command, token: &str) {
    cmd.current_dir(node_dir())
        .env("MCP_TOKEN", token)
        .env(
            "NODE_OPTIONS",
            format!("--import {}", node_dir().join("log_fetch.mjs").display()),
        )
        // No update checks, no telemetry, nothing but the server under test.
        .env("NO_UPDATE_NOTIFIER", "1")
        .env("NODE_NO_WARNINGS", "1");
}

/// The fetch wrapper's lines: what the client sent and what it negotiated.
fn exchange_log(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.starts_with("mcp-http: "))
        .map(str::to_string)
        .collect()
}

fn negotiated(log: &[String]) -> Option<String> {
    log.iter().find_map(|l| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix("negotiated="))
            .map(str::to_string)
    })
}

/// The text blocks of a `CallToolResult`.
fn texts(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_and_the_inspector_cli_run_python_over_http() {
    if !require_root() || !require_node_clients() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, ""));
    let limit = Duration::from_secs(90);

    // The TypeScript SDK client.
    let token = issuer.token(&resource, "ts-sdk");
    let mut cmd = Command::new("node");
    cmd.arg("sdk_client.mjs").arg(&frontend.url);
    node_env(&mut cmd, &token);
    let out = tokio::task::spawn_blocking(move || run_bounded(cmd, limit))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the SDK client failed ({}):\n{stdout}\n{stderr}\n{}",
        out.status,
        frontend.log()
    );
    let report: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line from the SDK client:\n{stdout}\n{stderr}"));
    let log = exchange_log(&stderr);
    eprintln!(
        "TypeScript SDK {} (offers {}): negotiated {}, session id {}\n  {}",
        report["sdk_version"],
        report["offered_protocol_version"],
        report["negotiated_protocol_version"],
        report["session_id"],
        log.join("\n  ")
    );
    assert!(
        report["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|n| n == "run_python")),
        "{report}"
    );
    let result = &report["result"];
    assert_ne!(result["isError"], true, "{report}");
    assert!(texts(result).contains("42"), "{report}");
    assert_eq!(
        report["negotiated_protocol_version"].as_str(),
        negotiated(&log).as_deref(),
        "{log:?}"
    );
    // Stateless: no protocol session was handed out.
    assert!(report["session_id"].is_null(), "{report}");
    assert!(
        log.iter().all(|l| l.contains("mcp-session-id=(none)")),
        "{log:?}"
    );

    // The Inspector's CLI mode.
    let token = issuer.token(&resource, "inspector");
    let mut cmd = Command::new("sh");
    cmd.arg("inspector_cli.sh").arg(&frontend.url);
    node_env(&mut cmd, &token);
    let out = tokio::task::spawn_blocking(move || run_bounded(cmd, limit))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Inspector CLI failed ({}):\n{stdout}\n{stderr}\n{}",
        out.status,
        frontend.log()
    );
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("the Inspector printed no JSON ({e}):\n{stdout}\n{stderr}"));
    let log = exchange_log(&stderr);
    let version = std::fs::read_to_string(
        node_dir().join("node_modules/@modelcontextprotocol/inspector-cli/package.json"),
    )
    .ok()
    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
    .map(|p| p["version"].clone())
    .unwrap_or_default();
    eprintln!(
        "Inspector CLI {version}: negotiated {}\n  {}",
        negotiated(&log).unwrap_or_else(|| "(not seen)".into()),
        log.join("\n  ")
    );
    assert_ne!(result["isError"], true, "{result}");
    assert!(texts(&result).contains("42"), "{result}");
    assert!(negotiated(&log).is_some(), "{log:?}");

    // Both calls ran as their principals.
    let audit = frontend.audit();
    for sub in ["ts-sdk", "inspector"] {
        assert!(
            audit
                .iter()
                .any(|r| r["event"] == "tools/call" && r["sub"] == sub && r["outcome"] == "ok"),
            "{sub}: {audit:?}"
        );
    }
}
