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

/// Start `cmd`, send it SIGINT once `ready` fires, and wait for it.
async fn ctrl_c_when(mut cmd: Command, ready: tokio::sync::oneshot::Receiver<()>) -> Output {
    let child = cmd.stdin(Stdio::null()).spawn().unwrap();
    ready.await.unwrap();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
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
        let input = c.read_stdin().await;
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
    cmd.arg(&file);
    let out = ctrl_c_when(cmd, rx).await;
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

// Sessions: `viv session new|ls|close`, `viv exec`, `viv repl`.

use common::{cell_outcome, handle, session_ended, session_info, session_opened, zero_division};
use vivarium_client::proto::{CellStatus, SessionEndReason};

fn handle_arg(n: u8) -> String {
    handle(n).0
}

/// `viv exec HANDLE(1) [extra] FILE` with `code` in FILE, against a fake daemon that reads
/// the cell (checking its code) and answers with `events`.
async fn exec_answered(extra: &[&str], code: &'static str, events: Vec<Event>) -> Output {
    let (dir, path, daemon) = serve(move |mut c| async move {
        c.hello().await;
        let (cell, got) = c.exec_cell().await;
        assert_eq!(cell.session, handle(1));
        assert_eq!(text(&got), code);
        for event in events {
            c.send(event).await;
        }
    });
    let mut cmd = viv(&path, &["exec"]);
    cmd.args(extra)
        .arg(handle_arg(1))
        .arg(script(dir.path(), code));
    let out = run(cmd, None).await;
    daemon.await.unwrap();
    out
}

fn finished_with(status: CellStatus, value: Option<&str>) -> Event {
    let mut done = cell_outcome(handle(1), 2, status);
    done.value = value.map(Into::into);
    Event::CellFinished(done)
}

/// The cell's output streams, then its value is printed as a REPL would.
#[tokio::test]
async fn exec_streams_the_output_and_prints_the_value() {
    let events = vec![
        Event::Stdout(b"out\n".to_vec()),
        Event::Stderr(b"err\n".to_vec()),
        finished_with(CellStatus::Ok, Some("42")),
    ];
    let out = exec_answered(&[], "print('out'); 6 * 7", events).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "out\n42\n");
    assert_eq!(text(&out.stderr), "err\n");
}

#[tokio::test]
async fn an_exception_exits_1_with_its_traceback_on_stderr() {
    let events = vec![Event::CellFinished(zero_division(1))];
    let out = exec_answered(&[], "1/0", events).await;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(text(&out.stderr).starts_with("Traceback (most recent call last):\n"));
    assert!(text(&out.stderr).ends_with("ZeroDivisionError: division by zero\n"));
}

#[tokio::test]
async fn a_timed_out_cell_exits_124_and_says_the_state_is_kept() {
    let events = vec![finished_with(CellStatus::Timeout, None)];
    let out = exec_answered(&[], "while True: pass", events).await;
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(text(&out.stderr).contains("cell 2 timed out"), "{out:?}");
    assert!(text(&out.stderr).contains("state is kept"), "{out:?}");
}

/// An ended session has its own exit code, and the message says why and what to do.
#[tokio::test]
async fn an_expired_session_exits_120_and_says_why() {
    for json in [false, true] {
        let ended = session_ended(handle(1), SessionEndReason::IdleTimeout);
        let extra: &[&str] = if json { &["--json"] } else { &[] };
        let out = exec_answered(extra, "x", vec![Event::SessionExpired(ended)]).await;
        assert_eq!(out.status.code(), Some(120), "{out:?}");
        assert!(
            text(&out.stderr).contains("idle for longer than its TTL"),
            "{out:?}"
        );
        assert!(text(&out.stderr).contains("open a new session"), "{out:?}");
        if json {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["exit_code"], 120);
            assert_eq!(v["error"]["code"], serde_json::Value::Null);
            assert_eq!(v["session_ended"]["reason"], "IdleTimeout");
        }
    }
}

#[tokio::test]
async fn an_unknown_session_exits_125() {
    let events = vec![refusal(ErrorCode::SessionNotFound)];
    let out = exec_answered(&[], "x", events).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(text(&out.stderr).contains("SessionNotFound"), "{out:?}");
}

#[tokio::test]
async fn exec_json_prints_the_cell_outcome() {
    let events = vec![
        Event::Stdout(b"a\n".to_vec()),
        finished_with(CellStatus::Ok, Some("'v'")),
    ];
    let out = exec_answered(&["--json"], "print('a'); 'v'", events).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["session"], handle_arg(1));
    assert_eq!(v["cell"], 2);
    assert_eq!(v["status"], "Ok");
    assert_eq!(v["value"], "'v'");
    assert_eq!(v["stdout"], "a\n");
    assert_eq!(v["exit_code"], 0);
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn session_new_prints_the_handle_and_sends_the_limits() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let Some(Request::OpenSession(open)) = c.recv().await else {
            panic!("expected OpenSession")
        };
        assert_eq!(open.profile, "data");
        assert_eq!(open.packages, ["numpy>=2", "pandas"]);
        assert_eq!(open.limits.idle_ttl_ms, Some(60_000));
        assert_eq!(open.limits.lifetime_ms, Some(600_000));
        assert_eq!(open.limits.memory_bytes, Some(256 << 20));
        assert_eq!(open.limits.cell_wall_ms, Some(5_000));
        assert_eq!(open.limits.cpu_ms, None);
        c.send(session_opened(handle(1))).await;
    });
    let args = [
        "session",
        "new",
        "--profile",
        "data",
        "--with",
        "numpy>=2",
        "--with",
        "pandas",
        "--ttl",
        "60",
        "--lifetime",
        "600",
        "--memory",
        "256M",
        "--cell-timeout",
        "5",
    ];
    let out = run(viv(&path, &args), None).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), format!("{}\n", handle_arg(1)));
    assert!(
        text(&out.stderr).contains("ends after 10m00s idle"),
        "{out:?}"
    );
    daemon.await.unwrap();
}

#[tokio::test]
async fn session_new_json_prints_the_session_info() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(session_opened(handle(1))).await;
    });
    let out = run(viv(&path, &["session", "new", "--json"]), None).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["handle"], handle_arg(1));
    assert_eq!(v["profile"], "default");
    assert_eq!(v["limits"]["idle_ttl_ms"], 600_000);
    assert_eq!(v["expires_by"], "IdleTimeout");
    assert_eq!(v["sandbox"]["Ready"]["sandbox_id"], 17);
    assert!(out.stderr.is_empty(), "{out:?}");
    daemon.await.unwrap();
}

#[tokio::test]
async fn session_new_on_a_profile_without_sessions_exits_125() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(refusal(ErrorCode::SessionsDisabled)).await;
    });
    let out = run(viv(&path, &["session", "new", "--json"]), None).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "SessionsDisabled");
    assert_eq!(v["exit_code"], 125);
    daemon.await.unwrap();
}

/// `viv exec H -`: the code from stdin; `--stdin FILE` for the cell's stdin, `--wall`.
#[tokio::test]
async fn exec_reads_code_from_stdin_and_sends_the_cells_stdin() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (cell, code) = c.exec_cell().await;
        assert_eq!(code, b"import sys; sys.stdin.read()\n");
        assert!(cell.stdin);
        assert_eq!(cell.wall_ms, Some(1_500));
        let input = c.read_stdin().await;
        let mut done = cell_outcome(handle(1), 1, CellStatus::Ok);
        done.value = Some(format!("{:?}", text(&input)));
        c.send(Event::CellFinished(done)).await;
    });
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "hello").unwrap();
    let mut cmd = viv(&path, &["exec", "--wall", "1.5", "--stdin"]);
    cmd.arg(&input).args([&handle_arg(1), "-"]);
    let out = run(cmd, Some(b"import sys; sys.stdin.read()\n".to_vec())).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "\"hello\"\n");
    daemon.await.unwrap();
}

#[tokio::test]
async fn ctrl_c_interrupts_the_cell_and_exits_130() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        c.exec_cell().await;
        tx.send(()).unwrap();
        assert_eq!(c.recv().await, Some(Request::Cancel));
        c.send(Event::CellFinished(cell_outcome(
            handle(1),
            2,
            CellStatus::Interrupted,
        )))
        .await;
    });
    let file = script(dir.path(), "while True: pass");
    let mut cmd = viv(&path, &["exec", &handle_arg(1)]);
    cmd.arg(&file);
    let out = ctrl_c_when(cmd, rx).await;
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(
        text(&out.stderr).contains("interrupting the cell"),
        "{out:?}"
    );
    assert!(text(&out.stderr).contains("cell 2 interrupted"), "{out:?}");
    daemon.await.unwrap();
}

#[tokio::test]
async fn session_ls_prints_a_table_or_json() {
    for json in [false, true] {
        let (_dir, path, daemon) = serve(|mut c| async move {
            c.hello().await;
            assert_eq!(c.recv().await, Some(Request::ListSessions));
            let mut busy = session_info(handle(2));
            busy.running = true;
            busy.expires_by = SessionEndReason::Lifetime;
            c.send(Event::Sessions(vec![session_info(handle(1)), busy]))
                .await;
        });
        let args: &[&str] = if json {
            &["session", "ls", "--json"]
        } else {
            &["session", "ls"]
        };
        let out = run(viv(&path, args), None).await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        if json {
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v[0]["handle"], handle_arg(1));
            assert_eq!(v[1]["running"], true);
        } else {
            let (h1, h2) = (handle_arg(1), handle_arg(2));
            let pad = " ".repeat(h1.len() - "HANDLE".len());
            assert_eq!(
                text(&out.stdout),
                format!(
                    "HANDLE{pad}  PROFILE  AGE    IDLE     EXPIRES IN        MEMORY   CELLS  CPU\n\
                     {h1}  default  2m05s  5.0s     9m55s (idle)      30M/45M  4      1.5s\n\
                     {h2}  default  2m05s  running  9m55s (lifetime)  30M/45M  4      1.5s\n"
                )
            );
        }
        daemon.await.unwrap();
    }
}

#[tokio::test]
async fn session_close_prints_how_it_ended() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert_eq!(c.recv().await, Some(Request::CloseSession(handle(1))));
        let mut ended = session_ended(handle(1), SessionEndReason::Closed);
        ended.ended_ms_ago = 0;
        c.send(Event::SessionClosed(ended)).await;
    });
    let out = run(viv(&path, &["session", "close", &handle_arg(1)]), None).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        format!(
            "session {} ended: it was closed (4 cells, 1.5s of cpu, peak memory 45M, age 12m05s)\n",
            handle_arg(1)
        )
    );
    daemon.await.unwrap();
}

/// The REPL over a pipe: each complete block is one cell (an indented block ends with an
/// empty line), values are printed, and end of input closes the session.
#[tokio::test]
async fn the_repl_runs_blocks_as_cells_and_closes_the_session_at_eof() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(session_opened(handle(1))).await;
        let cells: [&[u8]; 3] = [b"x = 1\n", b"def f():\n    return x + 1\n\n", b"f()\n"];
        for (i, want) in cells.into_iter().enumerate() {
            let (cell, code) = c.exec_cell().await;
            assert_eq!(cell.session, handle(1));
            assert_eq!(text(&code), text(want));
            let mut done = cell_outcome(handle(1), i as u64 + 1, CellStatus::Ok);
            done.value = (i == 2).then(|| "2".into());
            c.send(Event::CellFinished(done)).await;
        }
        assert_eq!(c.recv().await, Some(Request::CloseSession(handle(1))));
        let mut ended = session_ended(handle(1), SessionEndReason::Closed);
        ended.ended_ms_ago = 0;
        c.send(Event::SessionClosed(ended)).await;
    });
    let mut cmd = viv(&path, &["repl"]);
    cmd.env("XDG_STATE_HOME", dir.path());
    let input = b"x = 1\ndef f():\n    return x + 1\n\nf()\n".to_vec();
    let out = run(cmd, Some(input)).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains('2'), "{out:?}");
    assert!(text(&out.stderr).contains("it was closed"), "{out:?}");
    let history = std::fs::read_to_string(dir.path().join("vivarium/repl_history")).unwrap();
    assert!(history.contains("f()"), "{history}");
    daemon.await.unwrap();
}

/// Ctrl-c while a REPL cell runs interrupts the cell, and the session goes on: the next
/// cell runs in it.
#[tokio::test]
async fn ctrl_c_in_the_repl_interrupts_the_cell_and_the_session_goes_on() {
    let (running_tx, running_rx) = tokio::sync::oneshot::channel();
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(session_opened(handle(1))).await;
        let (_, code) = c.exec_cell().await;
        assert_eq!(code, b"while True: pass\n");
        running_tx.send(()).unwrap();
        assert_eq!(c.recv().await, Some(Request::Cancel));
        c.send(finished_with(CellStatus::Interrupted, None)).await;
        let (_, code) = c.exec_cell().await;
        assert_eq!(code, b"1 + 1\n");
        c.send(finished_with(CellStatus::Ok, Some("2"))).await;
        assert_eq!(c.recv().await, Some(Request::CloseSession(handle(1))));
        let ended = session_ended(handle(1), SessionEndReason::Closed);
        c.send(Event::SessionClosed(ended)).await;
    });
    let state = tempfile::tempdir().unwrap();
    let mut cmd = viv(&path, &["repl"]);
    cmd.env("XDG_STATE_HOME", state.path())
        .stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"while True: pass\n").unwrap();
    running_rx.await.unwrap();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || {
        stdin.write_all(b"1 + 1\n").unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stderr).contains("cell 2 interrupted"), "{out:?}");
    assert!(text(&out.stdout).contains('2'), "{out:?}");
    daemon.await.unwrap();
}

/// A session that ends under the REPL (here: out of memory during a cell) ends it, with
/// the reason and its own exit code.
#[tokio::test]
async fn the_repl_says_why_its_session_ended_and_exits_120() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(session_opened(handle(1))).await;
        c.exec_cell().await;
        let ended = session_ended(handle(1), SessionEndReason::Memory);
        c.send(finished_with(CellStatus::SessionEnded(ended), None))
            .await;
        // No CloseSession: the session is gone.
        assert_eq!(c.recv().await, None);
    });
    let state = tempfile::tempdir().unwrap();
    let mut cmd = viv(&path, &["repl"]);
    cmd.env("XDG_STATE_HOME", state.path());
    let out = run(
        cmd,
        Some(b"x = bytearray(10**10)\nprint('never')\n".to_vec()),
    )
    .await;
    assert_eq!(out.status.code(), Some(120), "{out:?}");
    assert!(text(&out.stderr).contains("ran out of memory"), "{out:?}");
    assert!(text(&out.stderr).contains("open a new session"), "{out:?}");
    daemon.await.unwrap();
}

// Input files: `--file LOCAL[:DEST]`.

/// `viv run --file`: the files go with the job (DEST defaulting to the file name); the
/// daemon's `InvalidInputFile` refusal is printed and exits 125.
#[tokio::test]
async fn run_sends_the_files_and_a_refused_file_exits_125() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (head, code, files) = c.submit_files().await;
        assert_eq!(code, b"pass");
        let paths: Vec<_> = head.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["data.csv", "in/b.bin"]);
        assert_eq!(files, [b"a,b\n1,2\n".to_vec(), vec![7u8; 100_000]]);
        c.send(Event::Error(vivarium_client::proto::WireError {
            code: ErrorCode::InvalidInputFile,
            message: "input file \"in/b.bin\" is larger than the profile's 64K".into(),
        }))
        .await;
    });
    let csv = dir.path().join("data.csv");
    std::fs::write(&csv, "a,b\n1,2\n").unwrap();
    let bin = dir.path().join("b.bin");
    std::fs::write(&bin, vec![7u8; 100_000]).unwrap();
    let mut cmd = viv(&path, &["run", "--no-stdin", "--file"]);
    cmd.arg(&csv)
        .arg("--file")
        .arg(format!("{}:in/b.bin", bin.display()))
        .arg(script(dir.path(), "pass"));
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("in/b.bin") && err.contains("InvalidInputFile"),
        "{err}"
    );
    daemon.await.unwrap();
}

/// A LOCAL that is no regular file, or a DEST twice, is an error before anything is sent.
#[tokio::test]
async fn a_bad_local_file_exits_125_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let code = script(dir.path(), "pass");
    let sock = dir.path().join("none.sock");
    let mut cmd = viv(&sock, &["run", "--no-stdin", "--file"]);
    cmd.arg(dir.path()).arg(&code);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("is not a regular file"), "{err}");
    assert!(!err.contains("cannot connect"), "{err}");
    let mut cmd = viv(&sock, &["run", "--no-stdin", "--file"]);
    cmd.arg(format!("{}:x", code.display()))
        .arg("--file")
        .arg(format!("{}:x", code.display()))
        .arg(&code);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        text(&out.stderr).contains("\"x\" is given twice"),
        "{out:?}"
    );
}

/// `viv exec H FILE --file`: the cell's files.
#[tokio::test]
async fn exec_sends_the_cells_files() {
    let (dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        let (head, code, files) = c.exec_cell_files().await;
        assert_eq!(head.cell.session, handle(1));
        assert_eq!(code, b"open('notes.txt').read()");
        assert_eq!(head.files[0].path, "notes.txt");
        assert_eq!(files, [b"hi".to_vec()]);
        let mut done = cell_outcome(handle(1), 1, CellStatus::Ok);
        done.value = Some("'hi'".into());
        c.send(Event::CellFinished(done)).await;
    });
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "hi").unwrap();
    let mut cmd = viv(&path, &["exec"]);
    cmd.arg(handle_arg(1))
        .arg(script(dir.path(), "open('notes.txt').read()"))
        .arg("--file")
        .arg(&notes);
    let out = run(cmd, None).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "'hi'\n");
    daemon.await.unwrap();
}
