//! Sessions (#19) with the real daemon: one sandbox whose interpreter keeps its state
//! between cells; handles bound to their uid; lifetimes and limits that end a session
//! with a typed reason; interrupts that keep the state; nothing left behind.
//!
//! These speak the protocol directly ([`RawConn`]), so that what the daemon sends is
//! seen exactly; the client library's and `viv`'s session commands have tests of their
//! own. Needs root (VIVARIUM_REQUIRE_ROOT=1 in CI fails them loudly without it).
#![forbid(unsafe_code)]

use std::time::Duration;

use vivarium_e2e::proto::{
    CellOutcome, CellStatus, Code, ErrorCode, Event, ExecCell, OpenSession, Request,
    SessionEndReason, SessionEnded, SessionHandle, SessionInfo, SessionLimitOverrides,
    SessionOpened,
};
use vivarium_e2e::RawConn;
use vivarium_e2e::{default_profile_with, require_root, wait_until, Daemon, DaemonOpts};

const NOBODY: u32 = 65534;

/// What a cell sent back: its output and its end.
#[derive(Debug)]
struct Cell {
    stdout: String,
    stderr: String,
    outcome: CellOutcome,
}

impl Cell {
    fn ok(&self) -> &Self {
        assert_eq!(self.outcome.status, CellStatus::Ok, "{self:#?}");
        self
    }
}

/// One connection that speaks sessions.
struct Conn(RawConn);

impl Conn {
    async fn new(daemon: &Daemon) -> Conn {
        Conn(RawConn::admitted(daemon.socket()).await)
    }

    async fn as_uid(daemon: &Daemon, uid: u32) -> Conn {
        let mut c = RawConn::connect_as(daemon.socket(), uid).await;
        c.hello().await;
        Conn(c)
    }

    async fn open_with(&mut self, profile: &str, limits: SessionLimitOverrides) -> Event {
        self.0
            .send(&Request::OpenSession(Box::new(OpenSession {
                profile: profile.into(),
                limits,
                packages: Vec::new(),
            })))
            .await;
        self.0.recv().await
    }

    async fn open(&mut self, limits: SessionLimitOverrides) -> SessionOpened {
        match self.open_with("default", limits).await {
            Event::SessionOpened(o) => *o,
            other => panic!("expected SessionOpened, got {other:?}"),
        }
    }

    /// Run a cell and collect everything up to its end (`Err`: the event that ended it
    /// instead of `CellFinished`).
    async fn try_exec(
        &mut self,
        h: &SessionHandle,
        code: &str,
        wall_ms: Option<u64>,
    ) -> Result<Cell, Event> {
        self.0
            .send(&Request::ExecCell(Box::new(ExecCell {
                session: h.clone(),
                code: Code::Inline(code.as_bytes().to_vec()),
                stdin: false,
                wall_ms,
            })))
            .await;
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        loop {
            match self.0.recv().await {
                Event::Stdout(b) => stdout.extend(b),
                Event::Stderr(b) => stderr.extend(b),
                Event::CellFinished(o) => {
                    return Ok(Cell {
                        stdout: String::from_utf8_lossy(&stdout).into_owned(),
                        stderr: String::from_utf8_lossy(&stderr).into_owned(),
                        outcome: *o,
                    })
                }
                other => return Err(other),
            }
        }
    }

    async fn exec(&mut self, h: &SessionHandle, code: &str) -> Cell {
        self.try_exec(h, code, None)
            .await
            .unwrap_or_else(|e| panic!("cell {code:?}: {e:?}"))
    }

    async fn ask(&mut self, req: Request) -> Event {
        self.0.send(&req).await;
        self.0.recv().await
    }

    async fn list(&mut self) -> Vec<SessionInfo> {
        match self.ask(Request::ListSessions).await {
            Event::Sessions(s) => s,
            other => panic!("expected Sessions, got {other:?}"),
        }
    }

    async fn close(&mut self, h: &SessionHandle) -> SessionEnded {
        match self.ask(Request::CloseSession(h.clone())).await {
            Event::SessionClosed(e) => *e,
            other => panic!("expected SessionClosed, got {other:?}"),
        }
    }
}

fn expired(e: &Event) -> &SessionEnded {
    match e {
        Event::SessionExpired(e) => e,
        other => panic!("expected SessionExpired, got {other:?}"),
    }
}

fn not_found(e: &Event) -> String {
    match e {
        Event::Error(w) if w.code == ErrorCode::SessionNotFound => w.message.clone(),
        other => panic!("expected SessionNotFound, got {other:?}"),
    }
}

fn limits() -> SessionLimitOverrides {
    SessionLimitOverrides::default()
}

fn daemon(opts: DaemonOpts) -> Daemon {
    Daemon::start(opts.socket_mode("0666").allow_uid(NOBODY))
}

/// A random handle of the right shape, which no session has.
fn random_handle() -> SessionHandle {
    SessionHandle(format!("vs_{}", "ab".repeat(32)))
}

#[tokio::test(flavor = "multi_thread")]
async fn state_imports_and_files_persist_and_the_last_expression_is_shown() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let s = c.open(limits()).await;
    let h = &s.info.handle;
    assert!(h.0.starts_with("vs_") && h.0.len() == 67, "{h}");
    let first = c
        .exec(
            h,
            "import json\nx = 41\ndef f(): return x + 1\n_ = open('/work/kept', 'w').write('yes')",
        )
        .await;
    first.ok();
    assert_eq!(first.outcome.cell, 1);
    assert_eq!(first.outcome.value, None, "a statement shows nothing");
    let second = c.exec(h, "x += 1\nprint(json.dumps({'x': x}))\nf()").await;
    second.ok();
    assert_eq!(second.stdout, "{\"x\": 42}\n");
    assert_eq!(second.outcome.value.as_deref(), Some("43"));
    assert_eq!(second.outcome.cell, 2);
    let third = c.exec(h, "open('/work/kept').read()").await;
    assert_eq!(third.ok().outcome.value.as_deref(), Some("'yes'"));
    let quiet = c.exec(h, "x;  # a trailing semicolon shows nothing").await;
    assert_eq!(quiet.ok().outcome.value, None);
    let none = c.exec(h, "print('p')").await;
    assert_eq!(
        (none.stdout.as_str(), none.outcome.value.clone()),
        ("p\n", None)
    );
    // An exception keeps the session: its traceback starts in the cell's own code.
    let bad = c
        .exec(h, "y = 1\ndef g():\n    raise ValueError('no good')\ng()")
        .await;
    match &bad.outcome.status {
        CellStatus::Exception(e) => {
            assert_eq!(e.type_name, "ValueError");
            assert_eq!(e.message, "no good");
            assert!(e.traceback.contains("<cell 6>"), "{}", e.traceback);
            assert!(
                e.traceback.contains("raise ValueError('no good')"),
                "{}",
                e.traceback
            );
            assert!(!e.traceback.contains("bootstrap"), "{}", e.traceback);
        }
        other => panic!("expected an exception, got {other:?}"),
    }
    let after = c.exec(h, "(x, y)").await;
    assert_eq!(after.ok().outcome.value.as_deref(), Some("(42, 1)"));
    let syntax = c.exec(h, "def (").await;
    assert!(
        matches!(&syntax.outcome.status, CellStatus::Exception(e) if e.type_name == "SyntaxError"),
        "{syntax:?}"
    );
    // sys.exit() in a cell is an exception, not the end of the session.
    let exit = c.exec(h, "import sys; sys.exit(3)").await;
    assert!(
        matches!(&exit.outcome.status, CellStatus::Exception(e) if e.type_name == "SystemExit"),
        "{exit:?}"
    );
    assert_eq!(
        c.exec(h, "x").await.ok().outcome.value.as_deref(),
        Some("42")
    );
    let listed = c.list().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].handle, *h);
    assert_eq!(listed[0].cells, 10);
    assert!(
        listed[0].memory_bytes > 0 && listed[0].peak_memory_bytes >= listed[0].memory_bytes,
        "{listed:?}"
    );
    let ended = c.close(h).await;
    assert_eq!(ended.reason, SessionEndReason::Closed);
    assert_eq!(ended.cells, 10);
    // Closed: a late call is told so, typed.
    let late = c.try_exec(h, "x", None).await.unwrap_err();
    assert_eq!(expired(&late).reason, SessionEndReason::Closed);
    assert!(c.list().await.is_empty());
}

/// Another uid cannot use, list, interrupt or close a session: for it the handle does
/// not exist, with the same answer as a handle that never did.
#[tokio::test(flavor = "multi_thread")]
async fn another_uid_cannot_see_or_touch_a_session() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut owner = Conn::new(&d).await;
    let h = owner.open(limits()).await.info.handle;
    owner.exec(&h, "secret = 7").await.ok();
    let mut other = Conn::as_uid(&d, NOBODY).await;
    let random = random_handle();
    for req in [
        |h: &SessionHandle| Request::InterruptCell(h.clone()),
        |h: &SessionHandle| Request::CloseSession(h.clone()),
    ] {
        let theirs = not_found(&other.ask(req(&h)).await);
        let never = not_found(&other.ask(req(&random)).await);
        assert_eq!(theirs, never);
    }
    let theirs = not_found(&other.try_exec(&h, "secret", None).await.unwrap_err());
    let never = not_found(&other.try_exec(&random, "secret", None).await.unwrap_err());
    assert_eq!(theirs, never);
    assert!(
        other.list().await.is_empty(),
        "another uid lists the session"
    );
    // Its own session is its own; the owner's still works and kept its state.
    let mine = other.open(limits()).await.info.handle;
    assert_eq!(other.list().await.len(), 1);
    assert_eq!(
        owner.exec(&h, "secret").await.ok().outcome.value.as_deref(),
        Some("7")
    );
    assert_eq!(
        owner.list().await.len(),
        1,
        "root lists another uid's session"
    );
    other.close(&mine).await;
    owner.close(&h).await;
}

/// A runaway cell past its wall limit is interrupted and the session keeps its state;
/// `InterruptCell` from another connection does the same to a sleeping cell; a cell that
/// ignores SIGINT ends the session, which says why.
#[tokio::test(flavor = "multi_thread")]
async fn interrupts_keep_the_state_and_a_cell_that_ignores_them_ends_the_session() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let h = c
        .open(SessionLimitOverrides {
            cell_wall_ms: Some(20_000),
            ..limits()
        })
        .await
        .info
        .handle;
    c.exec(&h, "kept = [1, 2, 3]").await.ok();
    let spin = c.try_exec(&h, "while True: pass", Some(500)).await.unwrap();
    assert_eq!(spin.outcome.status, CellStatus::Timeout, "{spin:?}");
    assert_eq!(
        c.exec(&h, "kept").await.ok().outcome.value.as_deref(),
        Some("[1, 2, 3]")
    );
    // From a second connection, while the first waits for its cell.
    let mut other = Conn::new(&d).await;
    let sleeper = tokio::spawn({
        let h = h.clone();
        async move {
            let mut c = c;
            let cell = c
                .try_exec(
                    &h,
                    "import time; print('asleep', flush=True); time.sleep(60)",
                    None,
                )
                .await;
            (c, cell)
        }
    });
    let listed = wait_until_running(&mut other, &h).await;
    assert!(listed, "the cell never ran");
    assert_eq!(
        other.ask(Request::InterruptCell(h.clone())).await,
        Event::SessionAck
    );
    let (mut c, cell) = sleeper.await.unwrap();
    let cell = cell.unwrap();
    assert_eq!(cell.outcome.status, CellStatus::Interrupted, "{cell:?}");
    assert_eq!(cell.stdout, "asleep\n");
    assert_eq!(
        c.exec(&h, "len(kept)").await.ok().outcome.value.as_deref(),
        Some("3")
    );
    // A cell that ignores SIGINT: killed after the grace period, and it says so.
    let stubborn = c
        .try_exec(&h, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: time.sleep(0.01)", Some(300))
        .await
        .unwrap();
    match &stubborn.outcome.status {
        CellStatus::SessionEnded(e) => {
            assert_eq!(e.reason, SessionEndReason::Unresponsive, "{e:?}");
            assert!(e.detail.contains("did not stop"), "{e:?}");
        }
        other => panic!("expected the session to end, got {other:?}"),
    }
    let late = c.try_exec(&h, "kept", None).await.unwrap_err();
    assert_eq!(expired(&late).reason, SessionEndReason::Unresponsive);
}

/// Whether the session shows a running cell within a few seconds.
async fn wait_until_running(c: &mut Conn, h: &SessionHandle) -> bool {
    for _ in 0..200 {
        if c.list().await.iter().any(|s| s.handle == *h && s.running) {
            // Running by the daemon's account; give the cell its first line.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// The idle TTL and the lifetime end a session; later calls get the typed expiry.
#[tokio::test(flavor = "multi_thread")]
async fn idle_ttl_and_lifetime_end_a_session_with_a_typed_expiry() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let idle = c
        .open(SessionLimitOverrides {
            idle_ttl_ms: Some(700),
            ..limits()
        })
        .await
        .info;
    assert_eq!(idle.expires_by, SessionEndReason::IdleTimeout);
    assert!(idle.expires_in_ms <= 700, "{idle:?}");
    let lifetime = c
        .open(SessionLimitOverrides {
            lifetime_ms: Some(1500),
            ..limits()
        })
        .await
        .info;
    assert_eq!(lifetime.expires_by, SessionEndReason::Lifetime);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let late = c
        .try_exec(&idle.handle, "1", None)
        .await
        .expect_err("the idle session still runs");
    let e = expired(&late);
    assert_eq!(e.reason, SessionEndReason::IdleTimeout, "{e:?}");
    assert!(e.detail.contains("idle"), "{e:?}");
    // Cells keep the other one alive past any idle time, never past its lifetime.
    let mut last = None;
    for _ in 0..100 {
        match c.try_exec(&lifetime.handle, "1", None).await {
            Ok(cell) if matches!(cell.outcome.status, CellStatus::Ok) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Ok(cell) => {
                last = Some(format!("{:?}", cell.outcome.status));
                break;
            }
            Err(e) => {
                assert_eq!(expired(&e).reason, SessionEndReason::Lifetime, "{e:?}");
                last = Some("expired".into());
                break;
            }
        }
    }
    assert!(last.is_some(), "the session outlived its lifetime");
    let after = c.try_exec(&lifetime.handle, "1", None).await.unwrap_err();
    assert_eq!(expired(&after).reason, SessionEndReason::Lifetime);
}

/// A cell that grows toward the session's memory limit is interrupted by the guard and
/// the session survives with its state; one that allocates it all at once is OOM-killed
/// and the session says so.
#[tokio::test(flavor = "multi_thread")]
async fn the_memory_guard_interrupts_a_growing_cell_and_the_session_survives() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let s = c
        .open(SessionLimitOverrides {
            memory_bytes: Some(256 << 20),
            ..limits()
        })
        .await
        .info;
    assert!(s.limits.memory_guard_bytes > 0 && s.limits.memory_guard_bytes < 256 << 20);
    let h = &s.handle;
    c.exec(h, "kept = 'state'\nchunks = []").await.ok();
    // 1 MiB at a time: the guard's interrupt lands long before the limit.
    let grow = c
        .try_exec(
            h,
            "while True:\n    chunks.append(bytearray(1 << 20))",
            None,
        )
        .await
        .unwrap();
    assert_eq!(grow.outcome.status, CellStatus::MemoryGuard, "{grow:?}");
    assert!(grow.outcome.peak_memory_bytes < 256 << 20, "{grow:?}");
    let back = c
        .exec(h, "n = len(chunks); chunks.clear(); (kept, n > 10)")
        .await;
    assert_eq!(back.ok().outcome.value.as_deref(), Some("('state', True)"));
    // All at once, far past the limit: no interrupt can land inside one allocation.
    let big = c.try_exec(h, "x = bytearray(1 << 30)", None).await;
    match big {
        Ok(cell) => match &cell.outcome.status {
            // Refused by the allocator (MemoryError) rather than OOM-killed: the
            // session goes on.
            CellStatus::Exception(e) => assert_eq!(e.type_name, "MemoryError", "{cell:?}"),
            CellStatus::SessionEnded(e) => assert_eq!(e.reason, SessionEndReason::Memory, "{e:?}"),
            other => panic!("{other:?}"),
        },
        Err(e) => panic!("{e:?}"),
    }
}

/// `max_sessions_per_uid` and `max_sessions` are refused with `Busy`, and a closed
/// session gives its place back.
#[tokio::test(flavor = "multi_thread")]
async fn session_limits_per_uid_and_per_daemon_are_busy() {
    if !require_root() {
        return;
    }
    let d = daemon(
        DaemonOpts::default()
            .config_line("max_sessions = 3")
            .config_line("max_sessions_per_uid = 2"),
    );
    let mut c = Conn::new(&d).await;
    let a = c.open(limits()).await.info.handle;
    let _b = c.open(limits()).await.info.handle;
    match c.open_with("default", limits()).await {
        Event::Error(e) if e.code == ErrorCode::Busy => {
            assert!(e.message.contains("max_sessions_per_uid"), "{e:?}")
        }
        other => panic!("{other:?}"),
    }
    let mut other = Conn::as_uid(&d, NOBODY).await;
    let _n = other.open(limits()).await.info.handle;
    match other.open_with("default", limits()).await {
        Event::Error(e) if e.code == ErrorCode::Busy => {
            assert!(e.message.contains("max_sessions"), "{e:?}")
        }
        other => panic!("{other:?}"),
    }
    c.close(&a).await;
    other.open(limits()).await;
}

/// A session's sandbox is an ordinary one: its cells see what a cold job sees, and two
/// sessions cannot see or signal each other.
#[tokio::test(flavor = "multi_thread")]
async fn a_cell_sees_what_a_cold_job_sees_and_sessions_are_apart() {
    if !require_root() {
        return;
    }
    let (_canary_dir, canary) = vivarium_e2e::plant_canary("session canary");
    let d = daemon(DaemonOpts::default().profile("coldcopy", &default_profile_with(&[])));
    let mut c = Conn::new(&d).await;
    let port = "47613";
    for (name, args) in vivarium_e2e::isolation_probes(&canary, port) {
        // Each probe in a session of its own: what one probe leaves (an fd, a process)
        // is, rightly, still there for the next cell of the same session.
        let probe_session = c.open(limits()).await.info.handle;
        let mut code = format!("import sys\nsys.argv = ['probe', *{args:?}]\n");
        code.push_str(&vivarium_e2e::probe(name));
        let cell = c.exec(&probe_session, &code).await;
        c.close(&probe_session).await;
        let job = d
            .run_job(
                &vivarium_e2e::Job::new(vivarium_e2e::probe(name))
                    .profile("coldcopy")
                    .args(args.clone()),
            )
            .await;
        let ours: serde_json::Value = serde_json::from_str(cell.stdout.trim())
            .unwrap_or_else(|e| panic!("{name}: {e}: {cell:?}"));
        let ours = vivarium_e2e::normalize_evidence(&without_link(ours));
        let cold = vivarium_e2e::normalize_evidence(&vivarium_e2e::evidence(&job));
        assert_eq!(
            ours, cold,
            "probe {name}: a session's cell and a cold job differ"
        );
    }
    // Two sessions: neither sees the other's processes nor can signal them. One starts
    // a process; the other's /proc shows only its own interpreter, and every other pid
    // it tries to signal does not exist for it.
    let a = c.open(limits()).await.info.handle;
    let b = c.open(limits()).await.info.handle;
    c.exec(
        &a,
        "import subprocess\np = subprocess.Popen(['sleep', '600'])",
    )
    .await
    .ok();
    let seen = c
        .exec(&b, "import os\nmine = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n\
                   def lookup(pid):\n    try:\n        os.kill(pid, 0)\n        return 'signalled'\n    except ProcessLookupError:\n        return 'none'\n\
                   own = {int(t) for t in os.listdir('/proc/self/task')}\nothers = {lookup(pid) for pid in range(2, 200) if pid not in own}\n(mine == [os.getpid()], sorted(others))")
        .await;
    assert_eq!(
        seen.ok().outcome.value.as_deref(),
        Some("(True, ['none'])"),
        "{seen:?}"
    );
    let alive = c.exec(&a, "p.poll() is None").await;
    assert_eq!(alive.ok().outcome.value.as_deref(), Some("True"));
    c.close(&a).await;
    c.close(&b).await;
}

/// A cell's evidence without the session's control link: the one fd a cell has that a
/// job does not (a socket; docs/ARCHITECTURE.md, "Sessions", what a cell can tell).
fn without_link(mut v: serde_json::Value) -> serde_json::Value {
    let mut link = Vec::new();
    if let Some(targets) = v.get_mut("fd_targets").and_then(|t| t.as_object_mut()) {
        link = targets
            .iter()
            .filter(|(_, t)| t.as_str().is_some_and(|t| t.starts_with("socket:[")))
            .map(|(fd, _)| fd.clone())
            .collect();
        assert_eq!(link.len(), 1, "one control link: {targets:?}");
        targets.remove(&link[0]);
    }
    if let Some(fds) = v.get_mut("fds").and_then(|f| f.as_array_mut()) {
        fds.retain(|fd| link.iter().all(|l| fd.as_i64() != l.parse().ok()));
    }
    v
}

/// Closing, SIGTERM and kill -9 of the daemon leave no process, cgroup, mount or state
/// file; after a restart an earlier handle is told `DaemonRestarted`.
#[tokio::test(flavor = "multi_thread")]
async fn every_end_leaves_nothing_and_a_restart_is_told() {
    if !require_root() {
        return;
    }
    let mut d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let before = d.settled_snapshot();
    let h = c.open(limits()).await.info.handle;
    c.exec(&h, "import threading, time\nt = threading.Thread(target=time.sleep, args=(600,), daemon=True); t.start()").await.ok();
    c.close(&h).await;
    d.assert_no_leaks(&before);
    // SIGTERM with a session open (and a cell running).
    let h = c.open(limits()).await.info.handle;
    drop(c);
    assert!(
        d.terminate().is_some_and(|s| s.success()),
        "SIGTERM with a session open"
    );
    let clean = || {
        d.job_processes().is_empty()
            && d.cgroup_leftovers().is_empty()
            && d.state_leftovers().is_empty()
    };
    assert!(
        wait_until(Duration::from_secs(5), clean),
        "after SIGTERM: processes {:?}, cgroups {:?}, state {:?}",
        d.job_processes(),
        d.cgroup_leftovers(),
        d.state_leftovers()
    );
    d.restart().expect("restart after SIGTERM");
    let mut c = Conn::new(&d).await;
    let told = c.try_exec(&h, "1", None).await.unwrap_err();
    assert_eq!(
        expired(&told).reason,
        SessionEndReason::DaemonRestarted,
        "{told:?}"
    );
    // Another uid is not told even that.
    let mut other = Conn::as_uid(&d, NOBODY).await;
    not_found(&other.try_exec(&h, "1", None).await.unwrap_err());
    // kill -9 of the daemon: its sandboxes die with it.
    let h2 = c.open(limits()).await.info.handle;
    c.exec(&h2, "x = 1").await.ok();
    drop((c, other));
    d.kill_hard();
    assert!(
        wait_until(Duration::from_secs(10), || d.job_processes().is_empty()),
        "session processes outlived a killed daemon: {:?}",
        d.job_processes()
    );
    // What a crash leaves in the cgroup subtree, the next daemon reaps; and the session
    // it had is told as restarted.
    d.restart().expect("restart after kill -9");
    assert_eq!(d.cgroup_leftovers(), Vec::<std::path::PathBuf>::new());
    assert!(d.state_leftovers().is_empty(), "{:?}", d.state_leftovers());
    let mut c = Conn::new(&d).await;
    let told = c.try_exec(&h2, "x", None).await.unwrap_err();
    assert_eq!(
        expired(&told).reason,
        SessionEndReason::DaemonRestarted,
        "{told:?}"
    );
}

/// 500 sessions opened and closed: the daemon's fds and memory stay flat.
#[tokio::test(flavor = "multi_thread")]
async fn five_hundred_sessions_leave_fds_and_memory_flat() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    // A first round, so that lazily made things (the tokio runtime's threads, the
    // allocator's arenas) exist before the count.
    for _ in 0..20 {
        let h = c.open(limits()).await.info.handle;
        c.exec(&h, "x = 1").await.ok();
        c.close(&h).await;
    }
    let before = d.settled_snapshot();
    let rss_before = rss_kib(d.pid());
    for _ in 0..500 {
        let h = c.open(limits()).await.info.handle;
        c.exec(&h, "x = 1").await.ok();
        c.close(&h).await;
    }
    d.assert_no_leaks(&before);
    // Each ended session keeps a tombstone of a few hundred bytes (by design, bounded):
    // 500 of them are far below this.
    let grown = rss_kib(d.pid()).saturating_sub(rss_before);
    assert!(
        grown < 8 * 1024,
        "the daemon grew by {grown} KiB over 500 sessions"
    );
}

/// A process's resident set, in KiB.
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// A cell's stdin streams against credit as a job's does; each stream is capped per
/// cell and the session goes on past the cap; a second cell while one runs is
/// `SessionBusy`.
#[tokio::test(flavor = "multi_thread")]
async fn cell_stdin_output_caps_and_one_cell_at_a_time() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let h = c
        .open(SessionLimitOverrides {
            output_bytes: Some(1000),
            ..limits()
        })
        .await
        .info
        .handle;
    c.0.send(&Request::ExecCell(Box::new(ExecCell {
        session: h.clone(),
        code: Code::Inline(
            b"import sys\ndata = sys.stdin.read()\nprint(len(data), file=sys.stderr)\ndata.upper()"
                .to_vec(),
        ),
        stdin: true,
        wall_ms: None,
    })))
    .await;
    match c.0.recv().await {
        Event::StdinCredit(n) => assert!(n >= 10),
        other => panic!("expected the first credit, got {other:?}"),
    }
    c.0.send(&Request::Stdin(b"hello ".to_vec())).await;
    c.0.send(&Request::Stdin(b"world".to_vec())).await;
    c.0.send(&Request::StdinEof).await;
    let mut stderr = Vec::new();
    let outcome = loop {
        match c.0.recv().await {
            Event::Stderr(b) => stderr.extend(b),
            Event::StdinCredit(_) | Event::Stdout(_) => {}
            Event::CellFinished(o) => break *o,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(outcome.status, CellStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.value.as_deref(), Some("'HELLO WORLD'"));
    assert_eq!(String::from_utf8_lossy(&stderr), "11\n");
    // Past the cap: cut and flagged, and the session goes on.
    let big = c
        .exec(
            &h,
            "import sys\nprint('x' * 5000)\nprint('e' * 3000, file=sys.stderr)\n",
        )
        .await;
    big.ok();
    assert_eq!(
        (big.stdout.len(), big.stderr.len()),
        (1000, 1000),
        "{big:?}"
    );
    assert!(big.outcome.stdout_truncated && big.outcome.stderr_truncated);
    assert_eq!(
        (big.outcome.stdout_bytes, big.outcome.stderr_bytes),
        (5001, 3001)
    );
    assert_eq!(
        c.exec(&h, "len(data)").await.ok().outcome.value.as_deref(),
        Some("11")
    );
    // One cell at a time: a second connection's cell while the first sleeps.
    let mut other = Conn::new(&d).await;
    let sleeper = tokio::spawn({
        let h = h.clone();
        async move {
            let mut c = c;
            let cell = c
                .try_exec(&h, "import time; time.sleep(1.5); 'slept'", None)
                .await;
            (c, cell)
        }
    });
    assert!(wait_until_running(&mut other, &h).await);
    match other.try_exec(&h, "1", None).await {
        Err(Event::Error(e)) => assert_eq!(e.code, ErrorCode::SessionBusy, "{e:?}"),
        other => panic!("expected SessionBusy, got {other:?}"),
    }
    let (mut c, slept) = sleeper.await.unwrap();
    assert_eq!(slept.unwrap().outcome.value.as_deref(), Some("'slept'"));
    c.close(&h).await;
}

/// The CPU budget over all cells, and an interpreter that exits, end a session with
/// their own reasons.
#[tokio::test(flavor = "multi_thread")]
async fn the_cpu_budget_and_an_exit_end_a_session_with_their_reasons() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = Conn::new(&d).await;
    let h = c
        .open(SessionLimitOverrides {
            cpu_ms: Some(300),
            ..limits()
        })
        .await
        .info
        .handle;
    let spin = c.try_exec(&h, "while True: pass", None).await.unwrap();
    match &spin.outcome.status {
        CellStatus::SessionEnded(e) => assert_eq!(e.reason, SessionEndReason::CpuBudget, "{e:?}"),
        other => panic!("{other:?}"),
    }
    let h = c.open(limits()).await.info.handle;
    let exit = c
        .try_exec(&h, "import os; os._exit(3)", None)
        .await
        .unwrap();
    match &exit.outcome.status {
        CellStatus::SessionEnded(e) => {
            assert_eq!(e.reason, SessionEndReason::Exited, "{e:?}");
            assert!(e.detail.contains("status 3"), "{e:?}");
        }
        other => panic!("{other:?}"),
    }
    let late = c.try_exec(&h, "1", None).await.unwrap_err();
    assert_eq!(expired(&late).reason, SessionEndReason::Exited);
}

/// With warm pools (as shipped), a session of the shipped default profile comes from its
/// session pool: no interpreter starts for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_of_the_shipped_default_comes_from_its_pool() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default().warm_pools());
    let mut c = Conn::new(&d).await;
    let first = c.open(limits()).await;
    assert!(
        matches!(
            first.sandbox,
            vivarium_e2e::proto::SandboxStart::Ready { .. }
        ),
        "{first:?}"
    );
    // Tighter memory than the pool's: built for it.
    let own = c
        .open(SessionLimitOverrides {
            memory_bytes: Some(128 << 20),
            ..limits()
        })
        .await;
    assert_eq!(
        own.sandbox,
        vivarium_e2e::proto::SandboxStart::Cold,
        "{own:?}"
    );
    assert_eq!(
        c.exec(&first.info.handle, "1 + 1")
            .await
            .ok()
            .outcome
            .value
            .as_deref(),
        Some("2")
    );
    c.close(&first.info.handle).await;
    c.close(&own.info.handle).await;
}

/// A connection that negotiated an older version is refused sessions, typed.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_client_is_refused_sessions() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let mut c = RawConn::connect(d.socket()).await;
    c.send(&Request::Hello(vivarium_e2e::proto::Hello {
        min_version: 1,
        max_version: 5,
        client: "old".into(),
    }))
    .await;
    assert!(matches!(c.recv().await, Event::HelloAck(a) if a.version == 5));
    c.send(&Request::ListSessions).await;
    match c.recv().await {
        Event::Error(e) => {
            assert_eq!(e.code, ErrorCode::UnexpectedMessage);
            assert!(e.message.contains("version 6"), "{e:?}");
        }
        other => panic!("{other:?}"),
    }
}

/// `viv session new`, `viv exec`, `viv session ls` and `viv session close` against the real
/// daemon: the handle, values, exit statuses, and the typed expiry once closed.
#[tokio::test(flavor = "multi_thread")]
async fn the_viv_session_commands_drive_a_real_session() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default());
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_owned();
    let new = d.viv(&["session", "new"], b"");
    assert!(
        new.status.success(),
        "{}",
        vivarium_e2e::describe_output(&new)
    );
    let h = text(&new.stdout);
    assert!(h.starts_with("vs_"), "{h}");
    let set = d.viv(&["exec", &h, "-"], b"x = 20\nprint('set')\n");
    assert_eq!(
        (set.status.code(), text(&set.stdout)),
        (Some(0), "set".into()),
        "{}",
        vivarium_e2e::describe_output(&set)
    );
    let get = d.viv(&["exec", &h, "-"], b"x * 2 + 2\n");
    assert_eq!(
        (get.status.code(), text(&get.stdout)),
        (Some(0), "42".into()),
        "{}",
        vivarium_e2e::describe_output(&get)
    );
    let bad = d.viv(&["exec", &h, "-"], b"1 / 0\n");
    assert_eq!(
        bad.status.code(),
        Some(1),
        "{}",
        vivarium_e2e::describe_output(&bad)
    );
    assert!(
        text(&bad.stderr).contains("ZeroDivisionError"),
        "{}",
        vivarium_e2e::describe_output(&bad)
    );
    let ls = d.viv(&["session", "ls", "--json"], b"");
    assert!(
        ls.status.success(),
        "{}",
        vivarium_e2e::describe_output(&ls)
    );
    let listed: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert!(listed.to_string().contains(&h), "{listed}");
    let close = d.viv(&["session", "close", &h], b"");
    assert!(
        close.status.success(),
        "{}",
        vivarium_e2e::describe_output(&close)
    );
    let late = d.viv(&["exec", &h, "-"], b"x\n");
    assert_eq!(
        late.status.code(),
        Some(120),
        "{}",
        vivarium_e2e::describe_output(&late)
    );
    assert!(
        text(&late.stderr).contains("closed"),
        "{}",
        vivarium_e2e::describe_output(&late)
    );
    // `viv repl` over a pipe: one session for the whole input, a block, the values.
    let repl = d.viv(
        &["repl"],
        b"def f(n):\n    return n * 2\n\nx = f(20)\nx + 2\nimport sys; sys.exit(3)\nx\n",
    );
    let shown = vivarium_e2e::describe_output(&repl);
    assert!(repl.status.success(), "{shown}");
    assert!(text(&repl.stdout).contains("42"), "{shown}");
    assert!(text(&repl.stdout).contains("40"), "{shown}");
    assert!(text(&repl.stderr).contains("SystemExit"), "{shown}");
    let ls = d.viv(&["session", "ls", "--json"], b"");
    assert_eq!(
        text(&ls.stdout),
        "[]",
        "the repl's session outlived it: {}",
        vivarium_e2e::describe_output(&ls)
    );
}

/// A profile's `warm.preload` modules are imported in its ready session sandboxes before
/// a session takes one; and idle sessions past `max_idle_session_bytes` are ended, the
/// longest idle first, with their own reason.
#[tokio::test(flavor = "multi_thread")]
async fn preloads_come_with_pooled_sessions_and_idle_memory_is_bounded() {
    if !require_root() {
        return;
    }
    let pre =
        default_profile_with(&[]) + "\n[warm]\npreload = [\"decimal\"]\n\n[session]\npool = 1\n";
    let d = daemon(
        DaemonOpts::default()
            .warm_pools()
            .profile("pre", &pre)
            .config_line("max_idle_session_bytes = 1"),
    );
    let mut c = Conn::new(&d).await;
    // The first open makes the (unkept) pool; wait for its sandbox, then take it.
    let first = match c.open_with("pre", limits()).await {
        Event::SessionOpened(o) => *o,
        other => panic!("{other:?}"),
    };
    let mut pooled = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        match c.open_with("pre", limits()).await {
            Event::SessionOpened(o)
                if matches!(o.sandbox, vivarium_e2e::proto::SandboxStart::Ready { .. }) =>
            {
                pooled = Some(*o);
                break;
            }
            Event::SessionOpened(o) => {
                c.close(&o.info.handle).await;
            }
            other => panic!("{other:?}"),
        }
    }
    let pooled = pooled.expect("no session came from the pool");
    let cell = c
        .exec(&pooled.info.handle, "import sys; 'decimal' in sys.modules")
        .await;
    assert_eq!(cell.ok().outcome.value.as_deref(), Some("True"));
    // After that cell, with a budget of one byte, every idle session but none running is
    // over it: the other one (idle longest) is ended as IdleMemory.
    let late = c.try_exec(&first.info.handle, "1", None).await.unwrap_err();
    assert_eq!(
        expired(&late).reason,
        SessionEndReason::IdleMemory,
        "{late:?}"
    );
}

/// A tombstone answers for `session_tombstone_secs`; after that the handle is unknown.
#[tokio::test(flavor = "multi_thread")]
async fn a_tombstone_answers_for_its_time_then_the_handle_is_unknown() {
    if !require_root() {
        return;
    }
    let d = daemon(DaemonOpts::default().config_line("session_tombstone_secs = 1"));
    let mut c = Conn::new(&d).await;
    let h = c.open(limits()).await.info.handle;
    c.close(&h).await;
    let soon = c.ask(Request::CloseSession(h.clone())).await;
    assert_eq!(expired(&soon).reason, SessionEndReason::Closed);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    not_found(&c.ask(Request::CloseSession(h.clone())).await);
}
