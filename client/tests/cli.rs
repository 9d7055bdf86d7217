//! The `viv` binary against the scripted fake daemon: streaming, exit codes, `--json`,
//! stdin forwarding, limits, and ctrl-c.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{outcome, refusal, serve, Conn};
use vivarium_client::proto::{
    ErrorCode, Event, ExitStatus, LimitKind, Reason, Request, MAX_PAYLOAD_CHUNK,
};

fn viv(socket: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_viv"));
    cmd.args(args)
        .env("VIVARIUM_SOCKET", socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Run `viv` off the async runtime (the fake daemon lives on it), feeding `stdin`.
async fn run(mut cmd: Command, stdin: Option<Vec<u8>>) -> Output {
    tokio::task::spawn_blocking(move || {
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().unwrap();
        if let Some(bytes) = stdin {
            child.stdin.take().unwrap().write_all(&bytes).unwrap();
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn script(dir: &Path, code: &str) -> PathBuf {
    let path = dir.join("job.py");
    std::fs::write(&path, code).unwrap();
    path
}

async fn started(c: &Conn, job_id: u64) {
    c.send(Event::Started {
        job_id,
        profile: "default".into(),
    })
    .await;
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[tokio::test]
async fn streams_output_and_exits_with_the_script_status() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (spec, code) = c.submit().await;
        assert_eq!(code, b"import sys; sys.exit(3)");
        assert_eq!(spec.args, ["-x", "--json"]);
        assert!(!spec.stdin);
        started(&c, 4).await;
        c.send(Event::Stdout(b"out\n".to_vec())).await;
        c.send(Event::Stderr(b"err\n".to_vec())).await;
        c.send(Event::Finished(outcome(
            4,
            Reason::Error,
            ExitStatus::Code(3),
        )))
        .await;
        assert_eq!(c.recv().await, None);
    });
    let file = script(dir.path(), "import sys; sys.exit(3)");
    let file = file.to_str().unwrap();
    let out = run(
        viv(&path, &["run", "--no-stdin", file, "-x", "--json"]),
        None,
    )
    .await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(text(&out.stdout), "out\n");
    // A plain non-zero exit is the script's business: no summary line.
    assert_eq!(text(&out.stderr), "err\n");
    daemon.await.unwrap();
}

#[tokio::test]
async fn timeout_exits_124_with_a_summary_and_sends_limits() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (spec, _) = c.submit().await;
        assert_eq!(spec.profile, "small");
        assert_eq!(spec.limits.wall_ms, Some(2000));
        assert_eq!(spec.limits.cpu_ms, Some(500));
        assert_eq!(spec.limits.memory_bytes, Some(64 << 20));
        assert_eq!(spec.limits.pids, Some(8));
        assert_eq!(spec.limits.output_bytes, Some(1 << 20));
        started(&c, 7).await;
        let mut o = outcome(7, Reason::Timeout, ExitStatus::Signal(9));
        o.usage.wall_ms = 2000;
        o.limits_hit = vec![LimitKind::Wall];
        c.send(Event::Finished(o)).await;
    });
    let file = script(dir.path(), "while True: pass");
    let args = [
        "run",
        "--no-stdin",
        "--profile",
        "small",
        "--timeout",
        "2",
        "--cpu",
        "0.5",
        "--memory",
        "64M",
        "--pids",
        "8",
        "--output",
        "1M",
    ];
    let mut cmd = viv(&path, &args);
    cmd.arg(&file);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert_eq!(
        text(&out.stderr),
        "viv: job 7 ended: timeout after 2.0s (limit hit: wall)\n"
    );
    daemon.await.unwrap();
}

#[tokio::test]
async fn json_mode_prints_one_object() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        started(&c, 8).await;
        c.send(Event::Stdout(b"a\xffb".to_vec())).await;
        c.send(Event::Stderr(b"e".to_vec())).await;
        c.send(Event::Finished(outcome(8, Reason::Ok, ExitStatus::Code(0))))
            .await;
    });
    let file = script(dir.path(), "pass");
    let mut cmd = viv(&path, &["run", "--json", "--no-stdin"]);
    cmd.arg(&file);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["job_id"], 8);
    assert_eq!(v["reason"], "Ok");
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["stdout"], "a\u{fffd}b");
    assert_eq!(v["stderr"], "e");
    assert!(out.stderr.is_empty(), "{out:?}");
    daemon.await.unwrap();
}

#[tokio::test]
async fn refusal_exits_125() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        c.send(refusal(ErrorCode::Busy)).await;
    });
    let file = script(dir.path(), "pass");
    let mut cmd = viv(&path, &["run", "--no-stdin"]);
    cmd.arg(&file);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(text(&out.stderr).contains("refused"), "{out:?}");
    assert!(text(&out.stderr).contains("Busy"), "{out:?}");
    daemon.await.unwrap();
}

/// viv's stdin is a pipe, so it is forwarded to the job and closed.
#[tokio::test]
async fn piped_stdin_is_forwarded() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (spec, _) = c.submit().await;
        assert!(spec.stdin);
        started(&c, 2).await;
        let mut input = Vec::new();
        loop {
            match c.recv().await {
                Some(Request::Stdin(bytes)) => input.extend_from_slice(&bytes),
                Some(Request::StdinEof) => break,
                other => panic!("expected stdin, got {other:?}"),
            }
        }
        for piece in input.chunks(MAX_PAYLOAD_CHUNK) {
            c.send(Event::Stdout(piece.to_vec())).await;
        }
        c.send(Event::Finished(outcome(2, Reason::Ok, ExitStatus::Code(0))))
            .await;
    });
    let file = script(dir.path(), "import sys; print(sys.stdin.read())");
    let input: Vec<u8> = (0..300_000u32).map(|i| (i % 200) as u8).collect();
    let mut cmd = viv(&path, &["run"]);
    cmd.arg(&file);
    let out = run(cmd, Some(input.clone())).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout, input);
    daemon.await.unwrap();
}

/// `viv run -`: the code comes from stdin and the job's stdin is empty.
#[tokio::test]
async fn code_from_stdin() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (spec, code) = c.submit().await;
        assert_eq!(code, b"print('piped')\n");
        assert!(!spec.stdin);
        started(&c, 1).await;
        c.send(Event::Finished(outcome(1, Reason::Ok, ExitStatus::Code(0))))
            .await;
    });
    let out = run(
        viv(&path, &["run", "-"]),
        Some(b"print('piped')\n".to_vec()),
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    daemon.await.unwrap();
}

#[tokio::test]
async fn ctrl_c_cancels_the_job() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        started(&c, 6).await;
        tx.send(()).unwrap();
        assert_eq!(c.recv().await, Some(Request::Cancel));
        c.send(Event::Finished(outcome(
            6,
            Reason::Cancelled,
            ExitStatus::Signal(9),
        )))
        .await;
    });
    let file = script(dir.path(), "while True: pass");
    let mut cmd = viv(&path, &["run", "--no-stdin"]);
    cmd.arg(&file).stdin(Stdio::null());
    let child = cmd.spawn().unwrap();
    rx.await.unwrap();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(text(&out.stderr).contains("cancelling"), "{out:?}");
    assert!(
        text(&out.stderr).contains("job 6 ended: cancelled"),
        "{out:?}"
    );
    daemon.await.unwrap();
}

#[tokio::test]
async fn missing_daemon_exits_125_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let file = script(dir.path(), "pass");
    let mut cmd = viv(&dir.path().join("none.sock"), &["run", "--no-stdin"]);
    cmd.arg(&file);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(text(&out.stderr).contains("vivariumd"), "{out:?}");
}

/// `viv run gen.py | head`: once our stdout reader is gone, the job is cancelled and viv
/// exits as SIGPIPE would have it, quietly.
#[tokio::test]
async fn closed_stdout_cancels_the_job() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.submit().await;
        started(&c, 11).await;
        c.send(Event::Stdout(b"line\n".to_vec())).await;
        assert_eq!(c.recv().await, Some(Request::Cancel));
        c.send(Event::Finished(outcome(
            11,
            Reason::Cancelled,
            ExitStatus::Signal(9),
        )))
        .await;
    });
    let file = script(dir.path(), "while True: print('line')");
    let mut cmd = viv(&path, &["run", "--no-stdin"]);
    cmd.arg(&file).stdin(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    drop(child.stdout.take());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(141), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    daemon.await.unwrap();
}
