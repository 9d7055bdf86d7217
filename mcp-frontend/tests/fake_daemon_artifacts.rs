//! Artifacts through the real `vivarium-mcp` binary, from a scripted fake daemon (no root):
//! the daemon's protocol-8 events (`Artifact`, `ArtifactChunk`, `Artifacts`) become image
//! content, captions, resource links and `structuredContent.artifacts`, and
//! `resources/read` serves the original bytes; a URI of another instance is refused with
//! a not-found error saying why. Plain JSON-RPC over the pipes.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use base64::Engine;
use serde_json::{json, Value};
use tokio_seqpacket::{UnixSeqpacket, UnixSeqpacketListener};
use vivarium_proto::{
    decode, encode, ArtifactHeader, ArtifactsReport, ArtifactsStatus, Event, ExitStatus, HelloAck,
    Isolation, Outcome, Reason, Request, SkipKind, SkippedArtifact, Usage, MAX_FRAME,
    MAX_PAYLOAD_CHUNK, PROTOCOL_VERSION,
};

/// A 3000x2000 PNG: larger than the image budget.
fn wide_png() -> Vec<u8> {
    let image = image::RgbImage::from_fn(3000, 2000, |x, _| image::Rgb([(x % 256) as u8, 9, 9]));
    let mut out = Vec::new();
    image::DynamicImage::ImageRgb8(image)
        .write_to(&mut std::io::Cursor::new(&mut out), image::ImageFormat::Png)
        .unwrap();
    out
}

fn header(path: &str, data: &[u8], media_type: &str) -> ArtifactHeader {
    ArtifactHeader {
        path: path.into(),
        path_lossy: false,
        size: data.len() as u64,
        sha256: "cd".repeat(32),
        media_type: media_type.into(),
    }
}

async fn send(sock: &UnixSeqpacket, event: Event) {
    sock.send(&encode(&event).unwrap()).await.unwrap();
}

/// One connection: the hello, then a job (a plain `Submit`, which on protocol 8 asks for
/// the default outputs, or a `SubmitJob`) answered with output, two artifacts and the
/// report; anything else (the profile list) is answered by closing.
async fn serve(sock: UnixSeqpacket, png: Vec<u8>) {
    let mut buf = vec![0u8; MAX_FRAME];
    let n = sock.recv(&mut buf).await.unwrap();
    let Ok(Request::Hello(_)) = decode::<Request>(&buf[..n]) else {
        return;
    };
    let ack = HelloAck {
        version: PROTOCOL_VERSION,
        daemon: "fake/0".into(),
        peer_uid: 0,
    };
    send(&sock, Event::HelloAck(ack)).await;
    let n = sock.recv(&mut buf).await.unwrap_or(0);
    let profile = match decode::<Request>(&buf[..n]) {
        Ok(Request::Submit(spec)) => spec.profile,
        Ok(Request::SubmitJob(job)) => job.spec.profile,
        _ => return,
    };
    send(
        &sock,
        Event::Started {
            job_id: 1,
            profile: profile.clone(),
        },
    )
    .await;
    send(&sock, Event::Stdout(b"wrote\n".to_vec())).await;
    let csv = b"x,y\n1,2\n".to_vec();
    for (h, data) in [
        (header("out/wide.png", &png, "image/png"), &png),
        (
            header("out/data.csv", &csv, "text/plain; charset=utf-8"),
            &csv,
        ),
    ] {
        send(&sock, Event::Artifact(Box::new(h))).await;
        for piece in data.chunks(MAX_PAYLOAD_CHUNK) {
            send(&sock, Event::ArtifactChunk(piece.to_vec())).await;
        }
    }
    let report = ArtifactsReport {
        status: ArtifactsStatus::Collected,
        returned: 2,
        returned_bytes: (png.len() + csv.len()) as u64,
        skipped: vec![SkippedArtifact {
            path: "out/shadow".into(),
            path_lossy: false,
            kind: SkipKind::Symlink,
            size: 11,
            errno: None,
        }],
        omitted: 0,
        walk_limit: false,
        depth_limit: false,
        max_files: 1000,
        max_file_bytes: 16 << 20,
        max_total_bytes: 64 << 20,
    };
    send(&sock, Event::Artifacts(Box::new(report))).await;
    let outcome = Outcome {
        job_id: 1,
        profile,
        reason: Reason::Ok,
        exit: ExitStatus::Code(0),
        limits_hit: vec![],
        usage: Usage {
            wall_ms: 5,
            cpu_ms: 4,
            peak_memory_bytes: 1 << 20,
            stdout_bytes: 6,
            stderr_bytes: 0,
        },
        stdout_truncated: false,
        stderr_truncated: false,
        isolation: Isolation::default(),
        detail: String::new(),
    };
    send(&sock, Event::Finished(Box::new(outcome))).await;
    // Hold the connection until the client closes it.
    let _ = sock.recv(&mut buf).await;
}

fn fake_daemon(socket: &Path, png: Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = rt.block_on(async { UnixSeqpacketListener::bind(socket).unwrap() });
    std::thread::spawn(move || {
        rt.block_on(async move {
            let mut listener = listener;
            loop {
                let Ok(sock) = listener.accept().await else {
                    return;
                };
                tokio::spawn(serve(sock, png.clone()));
            }
        })
    });
}

#[test]
fn artifacts_come_back_as_images_links_and_structured_content_and_are_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("fake.sock");
    let png = wide_png();
    fake_daemon(&socket, png.clone());

    let mut child = Command::new(env!("CARGO_BIN_EXE_vivarium-mcp"))
        .arg("--socket")
        .arg(&socket)
        .args(["--artifact-ttl", "600"])
        .env_remove("VIVARIUM_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn vivarium-mcp");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |msg: Value| {
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    };
    // The answer to request `id` (notifications in between are skipped).
    let mut answer = |id: u64| loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "stdout closed");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            break (v, line.len());
        }
    };

    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "fake-daemon-artifacts", "version": "0"}}}),
    );
    let (init, _) = answer(1);
    assert!(
        init["result"]["capabilities"]["resources"].is_object(),
        "{init}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "run_python", "arguments": {"code": "print('wrote')"}}}),
    );
    let (call, bytes) = answer(2);
    assert!(bytes < 1 << 20, "{bytes} bytes");
    let result = &call["result"];
    assert_eq!(result["isError"], false, "{call}");
    let content = result["content"].as_array().unwrap();
    let texts: String = content
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        texts.contains("Image 1: out/wide.png (1313x875 px, downscaled from 3000x2000"),
        "{texts}"
    );
    assert!(
        texts.contains("File out/data.csv (8 bytes):\nx,y\n1,2\n"),
        "{texts}"
    );
    assert!(
        texts.contains("Skipped, not returned: out/shadow (symlink, 11 bytes)"),
        "{texts}"
    );
    assert!(texts.contains("for 10 minutes"), "{texts}");
    let image = content
        .iter()
        .find(|c| c["type"] == "image")
        .expect("an image");
    assert_eq!(image["mimeType"], "image/png");
    let shown = base64::engine::general_purpose::STANDARD
        .decode(image["data"].as_str().unwrap())
        .unwrap();
    let shown = image::load_from_memory(&shown).unwrap();
    assert_eq!((shown.width(), shown.height()), (1313, 875));
    let links: Vec<&Value> = content
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .collect();
    assert_eq!(links.len(), 2, "{content:?}");
    let files = result["structuredContent"]["artifacts"]["files"]
        .as_array()
        .unwrap();
    assert_eq!(files[0]["shown_as"], "downscaled");
    assert_eq!(files[1]["shown_as"], "inlined");
    let uri = files[0]["uri"].as_str().unwrap().to_string();
    assert!(links.iter().any(|l| l["uri"] == uri.as_str()));

    send(json!({"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": uri}}));
    let (read, _) = answer(3);
    let blob = read["result"]["contents"][0]["blob"]
        .as_str()
        .expect("a blob");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(blob)
            .unwrap(),
        png,
        "the original, whole"
    );
    assert_eq!(read["result"]["contents"][0]["mimeType"], "image/png");

    let csv_uri = files[1]["uri"].as_str().unwrap();
    send(
        json!({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": csv_uri}}),
    );
    let (read, _) = answer(4);
    assert_eq!(
        read["result"]["contents"][0]["text"], "x,y\n1,2\n",
        "{read}"
    );

    // Another instance's id in the same shape: not served, and why.
    let instance = uri.split('/').nth(2).unwrap();
    let foreign = uri.replace(instance, &"0".repeat(32));
    send(
        json!({"jsonrpc": "2.0", "id": 5, "method": "resources/read", "params": {"uri": foreign}}),
    );
    let (refused, _) = answer(5);
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert_eq!(
        refused["error"]["data"]["reason"], "other_instance",
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("another vivarium-mcp instance"),
        "{refused}"
    );

    send(json!({"jsonrpc": "2.0", "id": 6, "method": "resources/list"}));
    let (listed, _) = answer(6);
    assert_eq!(
        listed["result"]["resources"].as_array().unwrap().len(),
        2,
        "{listed}"
    );

    send(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}));
    let (tools, _) = answer(7);
    validate(
        &tools["result"]["tools"][0]["outputSchema"],
        &result["structuredContent"],
    );

    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Check `value` against the JSON Schema `schema` with Python's `jsonschema` (as the MCP
/// SDK does), when a Python with it is there (`$VIVARIUM_MCP_PYTHON`); a loud skip else,
/// a failure with `VIVARIUM_REQUIRE_MCP_SDK=1`.
fn validate(schema: &Value, value: &Value) {
    let python = std::env::var("VIVARIUM_MCP_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import json, sys, jsonschema\n\
                  schema, value = json.load(sys.stdin)\n\
                  jsonschema.Draft202012Validator(schema).validate(value)\n\
                  print('valid')\n";
    let child = Command::new(&python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return skip_validation(&python);
    };
    let input = serde_json::to_vec(&json!([schema, value])).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named 'jsonschema'") {
        return skip_validation(&python);
    }
    assert!(
        out.status.success() && out.stdout.starts_with(b"valid"),
        "structuredContent does not match the outputSchema:\n{stderr}"
    );
}

fn skip_validation(python: &str) {
    let why = format!("no jsonschema in {python}: the output schema check does not run");
    if std::env::var("VIVARIUM_REQUIRE_MCP_SDK").as_deref() == Ok("1") {
        panic!("{why}, and VIVARIUM_REQUIRE_MCP_SDK=1 says it must run");
    }
    eprintln!("SKIPPED: {why} (set VIVARIUM_MCP_PYTHON)");
}
