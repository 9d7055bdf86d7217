//! The daemon against hostile and careless clients, and against faults of its own parts:
//! idle and silent clients, a client that stops reading, a thousand connections at once, clients vanishing mid-stream, memory and fds
//! flat across 2,000 jobs, a job that ignores SIGTERM, and a crash of the privileged
//! spawner. (The codec's property tests are next to it, in `proto/tests/codec.rs`; the
//! cargo-fuzz targets for the decoder and the submit validation are in `fuzz/`;
//! malformed, truncated and oversize frames are in `protocol.rs`.)
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_seqpacket::UnixSeqpacket;
use vivarium_e2e::proto::{
    decode, encode, Code, ErrorCode, Event, ExitStatus, Hello, JobSpec, LimitKind, LimitOverrides,
    Reason, Request, WireError, MAX_PAYLOAD_CHUNK, PROTOCOL_VERSION,
};
use vivarium_e2e::{
    alive, describe, finish, require_root, wait_for_stdout, wait_until, ClientError, Daemon,
    DaemonOpts, Job, RawConn, SLEEPER,
};

const NO_STDIN: Option<&[u8]> = None;

/// The same through the real client and daemon: a job with 5000 short arguments (55 KB,
/// under the daemon's 64 KiB argument limit) reaches the job (it was refused as a
/// malformed frame).
#[tokio::test(flavor = "multi_thread")]
async fn many_short_arguments_reach_the_job() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new("import sys\nprint(len(sys.argv) - 1)").args(vec!["a".repeat(10); 5000]);
    match daemon.try_run(&job, None).await {
        Ok(done) => assert_eq!(done.stdout, b"5000\n", "{}", describe(&done)),
        Err(e) => panic!("refused: {e:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Slow, silent and vanishing clients.
// ---------------------------------------------------------------------------------------

fn hello_frame() -> Vec<u8> {
    encode(&Request::Hello(Hello {
        min_version: 1,
        max_version: PROTOCOL_VERSION,
        client: "vivarium-e2e/robustness".into(),
    }))
    .unwrap()
}

fn submit(code: &str, limits: LimitOverrides, stdin: bool) -> Request {
    Request::Submit(JobSpec {
        profile: "default".into(),
        code: Code::Inline(code.as_bytes().to_vec()),
        args: vec![],
        stdin,
        limits,
    })
}

/// Run a normal job and require `Ok` within `within`.
async fn prompt_job(daemon: &Daemon, within: Duration) -> Duration {
    let asked = Instant::now();
    let done = tokio::time::timeout(within, daemon.run("print('served')"))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "a normal job did not finish within {within:?}\n{}",
                daemon.log()
            )
        });
    assert_eq!(
        (done.outcome.reason, done.stdout.as_slice()),
        (Reason::Ok, &b"served\n"[..]),
        "{}",
        describe(&done)
    );
    asked.elapsed()
}

/// Clients that connect and say nothing, say hello and nothing more, or start a chunked
/// submit and never finish it, cost the daemon nothing but their fds: others are served.
/// (Until the hello or idle timeout takes their places back: see `protocol.rs`.)
#[tokio::test(flavor = "multi_thread")]
async fn idle_and_half_finished_clients_do_not_stall_others() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let before = daemon.settled_snapshot();
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(
            UnixSeqpacket::connect(daemon.socket())
                .await
                .expect("connect"),
        );
    }
    let mut idle = Vec::new();
    for _ in 0..20 {
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        idle.push(c);
    }
    let mut half = RawConn::connect(daemon.socket()).await;
    half.hello().await;
    half.send(&Request::Submit(JobSpec {
        profile: "default".into(),
        code: Code::Chunked { len: 1000 },
        args: vec![],
        stdin: false,
        limits: LimitOverrides::default(),
    }))
    .await;
    half.send(&Request::CodeChunk(b"print(1)\n".to_vec())).await;
    // A hello split over several datagrams is not a hello: each piece is refused, the
    // connection stays open.
    let mut split = RawConn::connect(daemon.socket()).await;
    for piece in hello_frame().chunks(3) {
        split.send_bytes(piece).await;
        match split.recv().await {
            Event::Error(WireError {
                code: ErrorCode::MalformedFrame,
                ..
            }) => {}
            other => panic!("a piece of a hello got {other:?}"),
        }
    }
    split.hello().await;

    let took = prompt_job(&daemon, Duration::from_secs(5)).await;
    eprintln!("a job beside 122 idle or half-finished clients took {took:?}");
    drop((silent, idle, half, split));
    daemon.assert_no_leaks(&before);
}

/// A client that submits a chatty job and then never reads: its job still ends at its
/// wall limit, and the daemon's only job slot is free again for the next client, although
/// the stuck client's output (and its outcome) cannot be delivered until it reads.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_stops_reading_keeps_no_slot() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().slots(1, 4));
    let mut stuck = RawConn::connect(daemon.socket()).await;
    stuck.hello().await;
    let chatty = "import os\nwhile True:\n    os.write(1, b'z' * 65536)\n";
    let limits = LimitOverrides {
        wall_ms: Some(2000),
        ..Default::default()
    };
    stuck.send(&submit(chatty, limits, false)).await;
    // Its wall limit passes while nobody reads.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let job_gone = wait_until(Duration::from_secs(5), || daemon.job_processes().is_empty());
    assert!(job_gone, "the job outlived its wall limit");
    prompt_job(&daemon, Duration::from_secs(10)).await;
    // The stuck client reads at last: its output up to the socket's capacity, then the
    // outcome.
    let mut stdout = 0usize;
    let outcome = loop {
        match stuck.recv().await {
            Event::Started { .. } | Event::Sandbox(_) => {}
            Event::Stdout(b) => stdout += b.len(),
            Event::Finished(o) => break o,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(
        (outcome.reason, outcome.exit),
        (Reason::Timeout, ExitStatus::Signal(9)),
        "{outcome:#?}"
    );
    assert!(stdout > 0 && stdout as u64 <= outcome.usage.stdout_bytes);
}

/// Clients that go away at every stage: right after submitting, while their job streams
/// output, in the middle of a chunked submit, while stdin is flowing. Their jobs die and
/// nothing is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn clients_vanishing_mid_stream_leave_nothing() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let before = daemon.settled_snapshot();
    let streaming = "import sys, time\nwhile True:\n    print('y' * 1000)\n    time.sleep(0.002)\n";
    for round in 0..5 {
        // Gone right after the submit, before Started could arrive.
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        c.send(&submit(SLEEPER, LimitOverrides::default(), false))
            .await;
        drop(c);

        // Gone while output streams.
        let mut client = daemon.client().await;
        let mut job = client.submit(&Job::new(streaming), NO_STDIN).await.unwrap();
        wait_for_stdout(&mut job, "yyyy").await;
        drop(job);
        drop(client);

        // Gone halfway through a chunked submit.
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        c.send(&Request::Submit(JobSpec {
            profile: "default".into(),
            code: Code::Chunked { len: 100_000 },
            args: vec![],
            stdin: false,
            limits: LimitOverrides::default(),
        }))
        .await;
        c.send(&Request::CodeChunk(vec![b'#'; 50_000])).await;
        drop(c);

        // Gone while stdin flows into a job that echoes it.
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        let echo = "import sys\nfor line in sys.stdin:\n    print(len(line), flush=True)\n";
        c.send(&submit(echo, LimitOverrides::default(), true)).await;
        for _ in 0..20 {
            c.send(&Request::Stdin(vec![b'q'; 10_000])).await;
        }
        c.send(&Request::Stdin(b"\n".to_vec())).await;
        loop {
            match c.recv().await {
                Event::Stdout(_) => break,
                // (Queued: the killed jobs of the rounds before may still hold slots.)
                Event::Started { .. }
                | Event::Sandbox(_)
                | Event::StdinCredit(_)
                | Event::Queued { .. } => {}
                other => panic!("round {round}: unexpected {other:?}"),
            }
        }
        drop(c);
    }
    daemon.assert_no_leaks(&before);
    prompt_job(&daemon, Duration::from_secs(5)).await;
}

/// Raise this process's soft fd limit to at least `want` if it can (the daemon inherits
/// it): the hard limit too when allowed (CAP_SYS_RESOURCE), else up to the hard limit.
fn raise_nofile(want: u64) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    if soft >= want {
        return;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, want, hard.max(want)).is_err() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(want), hard);
    }
}

/// The soft and hard `Max open files` of `pid`.
fn nofile_of(pid: i32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or("");
    let f: Vec<&str> = line.split_whitespace().collect();
    (
        f.get(3).unwrap_or(&"?").to_string(),
        f.get(4).unwrap_or(&"?").to_string(),
    )
}

/// A blocking connect (it waits while the listener's backlog is full), then a tokio socket.
/// `UnixSeqpacket::connect` cannot be used for a burst: tokio-seqpacket 0.8 takes the
/// EAGAIN of a full unix backlog for "in progress" and returns a socket that was never
/// connected (the first send fails with ENOTCONN).
fn connect_blocking(path: &std::path::Path) -> UnixSeqpacket {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    let addr = UnixAddr::new(path).expect("socket path");
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr).expect("connect");
    fcntl(&fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("O_NONBLOCK");
    UnixSeqpacket::try_from(fd).expect("register the socket with tokio")
}

/// Open `n` connections at once, each saying hello; returns them once every hello is
/// acknowledged.
async fn connect_many(daemon: &Daemon, n: usize) -> Vec<UnixSeqpacket> {
    let path = daemon.socket().to_owned();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                let sock = tokio::task::spawn_blocking(move || connect_blocking(&path))
                    .await
                    .expect("connect task");
                sock.send(&hello_frame()).await.expect("send hello");
                let mut buf = vec![0u8; 1024];
                let got = tokio::time::timeout(Duration::from_secs(30), sock.recv(&mut buf))
                    .await
                    .expect("no HelloAck within 30 s")
                    .expect("recv");
                match decode::<Event>(&buf[..got]) {
                    Ok(Event::HelloAck(_)) => sock,
                    other => panic!("expected HelloAck, got {other:?}"),
                }
            })
        })
        .collect();
    let mut socks = Vec::with_capacity(n);
    for t in tasks {
        socks.push(t.await.expect("connection task"));
    }
    socks
}

/// A thousand clients connect and say hello at once while a job runs; every hello is
/// answered, the job ends `Ok`, and a new job runs while all thousand are still open.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_simultaneous_connections() {
    if !require_root() {
        return;
    }
    raise_nofile(4096);
    // One uid holds all thousand: past the default per-uid cap (a quarter).
    let daemon = Daemon::start(DaemonOpts::default().config_line("max_connections_per_uid = 0"));
    let (soft, hard) = nofile_of(daemon.pid());
    eprintln!("daemon RLIMIT_NOFILE: soft {soft}, hard {hard}");
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let before = daemon.settled_snapshot();
    let mut client = daemon.client().await;
    let sleeper = "import time\ntime.sleep(1)\nprint('slept')";
    let mut job = client.submit(&Job::new(sleeper), NO_STDIN).await.unwrap();
    let asked = Instant::now();
    let socks = connect_many(&daemon, 1000).await;
    eprintln!("1000 hellos acknowledged in {:?}", asked.elapsed());
    let outcome = finish(&mut job).await.expect("the job beside 1000 clients");
    assert_eq!(outcome.reason, Reason::Ok, "{outcome:#?}");
    let took = prompt_job(&daemon, Duration::from_secs(10)).await;
    eprintln!("a job with 1000 clients connected took {took:?}");
    drop(job);
    drop(client);
    drop(socks);
    daemon.assert_no_leaks(&before);
}

/// Started under systemd's default fd limit (soft 1024, `LimitNOFILE=1024:524288`), the
/// daemon still serves a thousand idle clients and runs jobs beside them: it raises its
/// soft limit to the hard one. (With the inherited 1024, 1000 connections left about 10
/// free fds: one job, 7 fds for the code memfd and three pipes, fit; four at once failed
/// with "pipe: EMFILE".)
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_connections_under_systemds_default_fd_limit() {
    if !require_root() {
        return;
    }
    raise_nofile(4096);
    let daemon = Arc::new(Daemon::start(
        DaemonOpts::default()
            .exec_prefix(&["prlimit", "--nofile=1024:"])
            .config_line("max_connections_per_uid = 0"),
    ));
    let (soft, hard) = nofile_of(daemon.pid());
    eprintln!("daemon RLIMIT_NOFILE under prlimit: soft {soft}, hard {hard}");
    let socks = connect_many(&daemon, 1000).await;
    let jobs: Vec<_> = (0..4)
        .map(|_| {
            let daemon = Arc::clone(&daemon);
            tokio::spawn(async move { prompt_job(&daemon, Duration::from_secs(10)).await })
        })
        .collect();
    for j in jobs {
        j.await
            .expect("a job beside 1000 clients, started under a 1024 fd limit");
    }
    drop(socks);
}

/// Daemon and spawner: resident memory (KiB) from /proc/<pid>/status.
fn vm_rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// `jobs` minimal jobs over 8 workers; each worker opens a fresh connection every 25 jobs.
async fn run_many(daemon: &Arc<Daemon>, jobs: usize) {
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let daemon = Arc::clone(daemon);
            tokio::spawn(async move {
                let mut client = daemon.client().await;
                for (i, _) in (w..jobs).step_by(8).enumerate() {
                    if i > 0 && i % 25 == 0 {
                        client = daemon.client().await;
                    }
                    let done = tokio::time::timeout(
                        Duration::from_secs(60),
                        client.run_collect(&Job::new("pass"), None),
                    )
                    .await
                    .expect("a minimal job took a minute")
                    .expect("a minimal job was refused");
                    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
                }
            })
        })
        .collect();
    for w in workers {
        w.await.expect("worker");
    }
}

/// 2,000 jobs: the daemon's and the spawner's open fds are the same before and after, and
/// their resident memory grows by less than 8 MiB each (after a warm-up that lets the
/// allocator and tokio reach their steady state).
#[tokio::test(flavor = "multi_thread")]
async fn memory_and_fds_stay_flat_over_2000_jobs() {
    if !require_root() {
        return;
    }
    let daemon = Arc::new(Daemon::start(DaemonOpts::default()));
    run_many(&daemon, 200).await;
    let before = daemon.settled_snapshot();
    let spawner = daemon.spawner_pid().expect("spawner");
    let rss_before = (vm_rss_kib(daemon.pid()), vm_rss_kib(spawner));
    let started = Instant::now();
    run_many(&daemon, 2000).await;
    let took = started.elapsed();
    let after = daemon.settled_snapshot();
    let rss_after = (vm_rss_kib(daemon.pid()), vm_rss_kib(spawner));
    let drift = |a: u64, b: u64| b as i64 - a as i64;
    eprintln!(
        "2000 jobs in {took:?} ({:.1} jobs/s); fds daemon {} -> {}, spawner {} -> {}; \
         VmRSS daemon {} -> {} KiB ({:+} KiB), spawner {} -> {} KiB ({:+} KiB)",
        2000.0 / took.as_secs_f64(),
        before.daemon_fds,
        after.daemon_fds,
        before.spawner_fds,
        after.spawner_fds,
        rss_before.0,
        rss_after.0,
        drift(rss_before.0, rss_after.0),
        rss_before.1,
        rss_after.1,
        drift(rss_before.1, rss_after.1),
    );
    daemon.assert_no_leaks(&before);
    assert!(
        drift(rss_before.0, rss_after.0) < 8 * 1024,
        "daemon VmRSS grew from {} to {} KiB",
        rss_before.0,
        rss_after.0
    );
    assert!(
        drift(rss_before.1, rss_after.1) < 8 * 1024,
        "spawner VmRSS grew from {} to {} KiB",
        rss_before.1,
        rss_after.1
    );
}

// ---------------------------------------------------------------------------------------
// Faults.
// ---------------------------------------------------------------------------------------

/// A job that ignores every catchable signal, in a process and in a detached grandchild,
/// still ends at its wall deadline, and none of its processes survives.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_ignores_sigterm_dies_at_its_deadline() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let code = "import os, signal, time\n\
                for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):\n    \
                signal.signal(s, signal.SIG_IGN)\n\
                if os.fork() == 0:\n    os.setsid()\n    \
                if os.fork() == 0:\n        time.sleep(3600)\n    os._exit(0)\n\
                print('ignoring', flush=True)\n\
                while True:\n    time.sleep(1)\n";
    let mut client = daemon.client().await;
    let mut job = client
        .submit(&Job::new(code).wall_ms(2000), NO_STDIN)
        .await
        .unwrap();
    wait_for_stdout(&mut job, "ignoring").await;
    let pids: Vec<i32> = daemon.job_processes().iter().map(|p| p.pid).collect();
    assert!(
        pids.len() >= 3,
        "init, the script and its grandchild: {pids:?}"
    );
    let outcome = finish(&mut job).await.expect("an outcome");
    assert_eq!(
        (outcome.reason, outcome.exit),
        (Reason::Timeout, ExitStatus::Signal(9)),
        "{outcome:#?}"
    );
    assert!(outcome.limits_hit.contains(&LimitKind::Wall));
    assert!(
        (2000..4000).contains(&outcome.usage.wall_ms),
        "{}",
        outcome.usage.wall_ms
    );
    assert!(
        wait_until(Duration::from_secs(2), || pids.iter().all(|p| !alive(*p))),
        "survived the deadline: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
}

/// SIGKILL to the privileged spawner: the running job's client gets an error (not a hang),
/// a queued job's client too, no job process survives, and the daemon exits non-zero for
/// its supervisor to restart it; the restarted daemon reaps what was left and runs jobs.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_spawner_is_reported_and_stops_the_daemon() {
    if !require_root() {
        return;
    }
    let mut daemon = Daemon::start(DaemonOpts::default().slots(1, 4));
    let mut running_client = daemon.client().await;
    let mut running = running_client
        .submit(&Job::new(SLEEPER), NO_STDIN)
        .await
        .unwrap();
    wait_for_stdout(&mut running, "ready").await;
    let mut queued_client = daemon.client().await;
    let mut queued = queued_client
        .submit(&Job::new("print('never')"), NO_STDIN)
        .await
        .unwrap();
    let mut pids: Vec<i32> = daemon.job_processes().iter().map(|p| p.pid).collect();
    assert!(!pids.is_empty());
    let spawner = daemon.spawner_pid().expect("spawner");
    pids.push(spawner);

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(spawner),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the spawner");
    let asked = Instant::now();
    // The running job's client hears an Internal error or sees the connection close.
    let running_end = tokio::time::timeout(Duration::from_secs(10), finish(&mut running))
        .await
        .expect("the running job's client hung after the spawner died");
    match &running_end {
        Err(ClientError::Refused(e)) => assert_eq!(e.code, ErrorCode::Internal, "{e:?}"),
        Err(ClientError::Disconnected) => {}
        other => panic!("running job after the spawner died: {other:?}"),
    }
    let queued_end = tokio::time::timeout(Duration::from_secs(10), finish(&mut queued))
        .await
        .expect("the queued job's client hung after the spawner died");
    assert!(
        !matches!(&queued_end, Ok(o) if o.reason == Reason::Ok),
        "a queued job ran without a spawner: {queued_end:?}"
    );
    eprintln!(
        "spawner killed: running job {running_end:?}, queued job {queued_end:?}, after {:?}",
        asked.elapsed()
    );
    let status = daemon
        .terminate()
        .expect("the daemon did not stop within 10 s of its spawner's death");
    assert!(
        !status.success(),
        "the daemon exited 0 after losing its spawner"
    );
    assert!(
        daemon.log().contains("spawner"),
        "the log does not name the cause:\n{}",
        daemon.log()
    );
    let gone = wait_until(Duration::from_secs(2), || pids.iter().all(|p| !alive(*p)));
    assert!(
        gone,
        "outlived the spawner: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
    drop((running, queued));
    drop((running_client, queued_client));
    daemon.restart().expect("a new daemon after the crash");
    assert_eq!(daemon.cgroup_leftovers(), Vec::<std::path::PathBuf>::new());
    prompt_job(&daemon, Duration::from_secs(10)).await;
}

/// The client library itself under a burst: 500 `Client::connect`s at once (far past the
/// daemon's listen backlog of 128) all complete their hello. A non-blocking connect would
/// see EAGAIN on a full listen queue, which tokio-seqpacket takes for "in progress".
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_library_clients_all_connect() {
    if !require_root() {
        return;
    }
    raise_nofile(4096);
    let daemon = Daemon::start(DaemonOpts::default().config_line("max_connections_per_uid = 0"));
    let path = daemon.socket().to_owned();
    let tasks: Vec<_> = (0..500)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                let mut client = vivarium_client::Client::connect(&path).await?;
                client.hello().await?;
                Ok::<_, vivarium_client::ClientError>(client)
            })
        })
        .collect();
    let mut clients = Vec::new();
    for t in tasks {
        clients.push(t.await.expect("task").expect("connect + hello"));
    }
    assert_eq!(clients.len(), 500);
}

// ---------------------------------------------------------------------------------------
// What clients can make the daemon hold: stdin is flow-controlled, scripts share one
// budget (`max_code_bytes_total`), connections are capped (`max_connections`).
// ---------------------------------------------------------------------------------------

/// A started job's stdout and reason, from its events on a raw connection.
async fn run_to_end(c: &mut RawConn) -> (Reason, Vec<u8>) {
    let mut stdout = Vec::new();
    loop {
        match c.recv().await {
            Event::Started { .. } | Event::Sandbox(_) => {}
            Event::Stdout(b) => stdout.extend_from_slice(&b),
            Event::Finished(o) => return (o.reason, stdout),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// 48 MiB of stdin for a job that sleeps before it reads: the daemon does not buffer it
/// (it stops reading the connection once 8 MiB wait for the job, and the client's sends
/// wait), and the job still reads every byte.
#[tokio::test(flavor = "multi_thread")]
async fn stdin_is_flow_controlled_not_buffered() {
    if !require_root() {
        return;
    }
    const STDIN: usize = 48 << 20;
    let daemon = Daemon::start(DaemonOpts::default());
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let rss_before = vm_rss_kib(daemon.pid());
    let stdin = vec![b'f'; STDIN];
    let code = "import sys, time\ntime.sleep(4)\nprint(len(sys.stdin.buffer.read()))";
    let peak = std::sync::atomic::AtomicU64::new(rss_before);
    let sample = async {
        let until = Instant::now() + Duration::from_millis(3500);
        while Instant::now() < until {
            peak.fetch_max(
                vm_rss_kib(daemon.pid()),
                std::sync::atomic::Ordering::Relaxed,
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let job = Job::new(code);
    let (done, ()) = tokio::join!(daemon.run_job_stdin(&job, Some(&stdin)), sample);
    assert_eq!(
        (
            done.outcome.reason,
            String::from_utf8_lossy(&done.stdout).trim()
        ),
        (Reason::Ok, STDIN.to_string().as_str()),
        "{}",
        describe(&done)
    );
    let grew = peak.into_inner().saturating_sub(rss_before);
    eprintln!("daemon VmRSS {rss_before} KiB, +{grew} KiB at most while 48 MiB of stdin waited");
    // 8 MiB may wait for the job; the pipe and the socket hold a little more.
    assert!(
        grew < 16 << 10,
        "the daemon's VmRSS grew by {grew} KiB while the job slept"
    );
}

/// A client that hangs up while its job has not read its stdin (so the daemon is not
/// reading the connection): the daemon notices anyway and the job dies, as on any
/// disconnect, long before its wall limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_gone_behind_unread_stdin_ends_its_job() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let before = daemon.settled_snapshot();
    let mut c = RawConn::connect(daemon.socket()).await;
    c.hello().await;
    let limits = LimitOverrides {
        wall_ms: Some(30_000),
        ..Default::default()
    };
    c.send(&submit("import time\ntime.sleep(60)", limits, true))
        .await;
    // This client ignores its credit (as a protocol 1-2 client has none): the daemon's
    // own flow control is what holds it.
    loop {
        match c.recv().await {
            Event::Started { .. } => break,
            Event::StdinCredit(n) => assert_eq!(n, 8 << 20, "the first credit"),
            other => panic!("expected Started, got {other:?}"),
        }
    }
    // Send until the daemon stops taking it.
    let mut sent = 0usize;
    let frame = Request::Stdin(vec![b'u'; MAX_PAYLOAD_CHUNK]);
    while tokio::time::timeout(Duration::from_millis(500), c.send(&frame))
        .await
        .is_ok()
    {
        sent += MAX_PAYLOAD_CHUNK;
        assert!(
            sent < 64 << 20,
            "the daemon took {sent} bytes of unread stdin"
        );
    }
    eprintln!(
        "the daemon stopped reading after {} KiB of stdin",
        sent >> 10
    );
    assert!(
        !daemon.job_processes().is_empty(),
        "the job should still be running"
    );
    let gone = Instant::now();
    drop(c);
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .job_processes()
            .is_empty()),
        "the job outlived its client behind unread stdin\n{}",
        daemon.log()
    );
    eprintln!("job gone {:?} after its client", gone.elapsed());
    daemon.assert_no_leaks(&before);
}

/// Protocol 3 stdin credit on the wire: the first 8 MiB when the job is accepted, then
/// exactly what the job read, all before `Finished`; a version-2 connection gets none.
#[tokio::test(flavor = "multi_thread")]
async fn stdin_credit_is_given_back_as_the_job_reads() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let code = "import sys\nprint(len(sys.stdin.buffer.read()))";
    for version in [2, 3] {
        let mut c = RawConn::connect(daemon.socket()).await;
        c.send(&Request::Hello(Hello {
            min_version: 1,
            max_version: version,
            client: "vivarium-e2e/credit".into(),
        }))
        .await;
        match c.recv().await {
            Event::HelloAck(ack) => assert_eq!(ack.version, version),
            other => panic!("expected HelloAck, got {other:?}"),
        }
        c.send(&submit(code, LimitOverrides::default(), true)).await;
        const SENT: usize = 1 << 20;
        for part in vec![b's'; SENT].chunks(MAX_PAYLOAD_CHUNK) {
            c.send(&Request::Stdin(part.to_vec())).await;
        }
        c.send(&Request::StdinEof).await;
        let (mut credits, mut stdout) = (Vec::new(), Vec::new());
        let outcome = loop {
            match c.recv().await {
                Event::StdinCredit(n) => credits.push(n),
                Event::Stdout(b) => stdout.extend_from_slice(&b),
                Event::Started { .. } | Event::Sandbox(_) => {}
                Event::Finished(o) => break o,
                other => panic!("v{version}: unexpected {other:?}"),
            }
        };
        assert_eq!(
            (outcome.reason, String::from_utf8_lossy(&stdout).trim()),
            (Reason::Ok, SENT.to_string().as_str()),
            "v{version}"
        );
        if version == 2 {
            assert!(credits.is_empty(), "a version-2 client got {credits:?}");
        } else {
            assert_eq!(credits.first(), Some(&(8 << 20)), "{credits:?}");
            assert_eq!(credits[1..].iter().sum::<u64>(), SENT as u64, "{credits:?}");
        }
        // Nothing follows `Finished`: the next request's answer comes first.
        c.send(&Request::ListProfiles).await;
        assert!(matches!(c.recv().await, Event::Profiles(_)), "v{version}");
    }
}

/// A cancel behind stdin the job does not read: the daemon has stopped reading the
/// connection (8 MiB wait for the job), yet the client library's `Cancel` gets through at
/// once (it keeps its socket short, and the daemon reads a few frames ahead), and the job
/// ends `Cancelled` long before its wall limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_behind_unread_stdin_gets_through() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let job = Job::new("import time\ntime.sleep(60)").limits(LimitOverrides {
        wall_ms: Some(30_000),
        ..Default::default()
    });
    let stdin = std::io::Cursor::new(vec![b'c'; 32 << 20]);
    let mut handle = client.submit(&job, Some(stdin)).await.expect("submit");
    // Drive the job (which pumps its stdin) for a while: far more than 8 MiB is offered.
    let mut started = false;
    let until = Instant::now() + Duration::from_millis(2000);
    while Instant::now() < until {
        match tokio::time::timeout(Duration::from_millis(200), handle.next_event()).await {
            Ok(Ok(Some(vivarium_e2e::JobEvent::Started { .. }))) => started = true,
            Ok(other) => panic!("unexpected {other:?}"),
            Err(_) => {}
        }
    }
    assert!(started, "the job did not start");
    let asked = Instant::now();
    let sent = tokio::time::timeout(Duration::from_secs(2), handle.cancel()).await;
    assert!(
        matches!(sent, Ok(Ok(true))),
        "the cancel was not sent: {sent:?}"
    );
    let outcome = tokio::time::timeout(Duration::from_secs(5), finish(&mut handle))
        .await
        .expect("no outcome within 5 s of the cancel")
        .expect("outcome");
    eprintln!("cancelled behind unread stdin in {:?}", asked.elapsed());
    assert_eq!(outcome.reason, Reason::Cancelled, "{outcome:#?}");
}

/// Scripts held at once are bounded by `max_code_bytes_total`, counted as the buffers that
/// hold their bytes grow: with two chunked submits holding the whole 2 MiB budget (each has
/// sent all but one byte of its 1 MiB, and its buffer has room for the whole), a third's
/// first chunk gets `Busy`; the rest of its chunks are read and dropped and its
/// connection stays usable. An inline job gets `Busy` too, and runs once one of the two
/// goes away (and with it its share).
#[tokio::test(flavor = "multi_thread")]
async fn scripts_held_at_once_are_bounded() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(
        DaemonOpts::default()
            .config_line("max_code_bytes = 1048576")
            .config_line("max_code_bytes_total = 2097152"),
    );
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let chunked = |len: usize| {
        Request::Submit(JobSpec {
            profile: "default".into(),
            code: Code::Chunked { len: len as u64 },
            args: vec![],
            stdin: false,
            limits: LimitOverrides::default(),
        })
    };
    let mut holders = Vec::new();
    for _ in 0..2 {
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        c.send(&chunked(1 << 20)).await;
        // All but one byte of its script (its buffer, and its charge, is the whole MiB).
        let mut left = (1 << 20) - 1;
        while left > 0 {
            let n = left.min(MAX_PAYLOAD_CHUNK);
            c.send(&Request::CodeChunk(vec![b'#'; n])).await;
            left -= n;
        }
        // A round trip: the daemon has taken the chunks sent before it.
        c.send(&Request::ListProfiles).await;
        assert!(matches!(c.recv().await, Event::Profiles(_)));
        holders.push(c);
    }
    let busy = |event: Event| match event {
        Event::Error(WireError {
            code: ErrorCode::Busy,
            message,
        }) => assert!(message.contains("max_code_bytes_total"), "{message}"),
        other => panic!("expected Busy, got {other:?}"),
    };
    let code = b"print('third')\n# "
        .iter()
        .copied()
        .chain(std::iter::repeat_n(b'#', 150_000));
    let code: Vec<u8> = code.collect();
    let mut third = RawConn::connect(daemon.socket()).await;
    third.hello().await;
    third.send(&chunked(code.len())).await;
    for part in code.chunks(MAX_PAYLOAD_CHUNK) {
        third.send(&Request::CodeChunk(part.to_vec())).await;
    }
    busy(third.recv().await);
    // The connection goes on: an inline job is refused for the same reason...
    third
        .send(&submit("print('small')", LimitOverrides::default(), false))
        .await;
    busy(third.recv().await);
    // ...and runs once a holder's share is back.
    drop(holders.pop());
    let mut ran = false;
    for _ in 0..50 {
        third
            .send(&submit("print('small')", LimitOverrides::default(), false))
            .await;
        match third.recv().await {
            Event::Error(WireError {
                code: ErrorCode::Busy,
                ..
            }) => tokio::time::sleep(Duration::from_millis(100)).await,
            Event::Started { .. } => {
                ran = true;
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(
        ran,
        "the freed share of max_code_bytes_total did not come back"
    );
    let mut stdout = Vec::new();
    let outcome = loop {
        match third.recv().await {
            Event::Sandbox(_) => {}
            Event::Stdout(b) => stdout.extend_from_slice(&b),
            Event::Finished(o) => break o,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!((outcome.reason, stdout), (Reason::Ok, b"small\n".to_vec()));
}

/// Past `max_connections` a new connection is answered `Busy` and closed; the open ones
/// are served as before, and a place freed is taken again.
#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_cap_are_refused() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(
        DaemonOpts::default()
            .config_line("max_connections = 4")
            .config_line("max_connections_per_uid = 4"),
    );
    let mut open = Vec::new();
    for _ in 0..4 {
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        open.push(c);
    }
    let mut fifth = RawConn::connect(daemon.socket()).await;
    fifth.send_bytes(&hello_frame()).await;
    fifth
        .expect_refused(ErrorCode::Busy, "max_connections")
        .await;
    // The open connections still work.
    let c = &mut open[0];
    c.send(&submit(
        "print('still served')",
        LimitOverrides::default(),
        false,
    ))
    .await;
    assert_eq!(
        run_to_end(c).await,
        (Reason::Ok, b"still served\n".to_vec())
    );
    drop(open.pop());
    let served = RawConn::served_again(daemon.socket()).await;
    assert!(served, "the freed connection place was not taken again");
}

/// A field of `/proc/<pid>/status` in KiB (`VmSize`, `VmData`, `VmRSS`).
fn status_kib(pid: i32, field: &str) -> u64 {
    let prefix = format!("{field}:");
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Announcing a chunked script reserves nothing: the daemon's buffer grows as the bytes
/// arrive, within what they charge to `max_code_bytes_total`. 512 connections, each
/// announcing a script of `max_code_bytes` (16 MiB) and sending its first 64 KiB, leave
/// the daemon's virtual size and data segment (VmSize, VmData) within 1 GiB of where they
/// were; reserving every announced length at the first chunk took VmSize from 145 MiB to
/// 8.3 GiB (RSS stayed low: the pages were never touched, which a host with strict
/// overcommit does not allow). Then one of them sends the rest, and its job runs.
#[tokio::test(flavor = "multi_thread")]
async fn announced_scripts_are_not_reserved_up_front() {
    if !require_root() {
        return;
    }
    const CONNECTIONS: usize = 512;
    const ANNOUNCED: usize = 16 << 20;
    const BOUND_KIB: u64 = 1 << 20;
    raise_nofile(4096);
    // One uid opens them all: the per-uid cap is not what this test is about.
    let daemon = Daemon::start(DaemonOpts::default().config_line("max_connections_per_uid = 0"));
    prompt_job(&daemon, Duration::from_secs(10)).await;
    let pid = daemon.pid();
    let before = (status_kib(pid, "VmSize"), status_kib(pid, "VmData"));
    let mut script = b"print('whole')\n#".to_vec();
    script.resize(ANNOUNCED, b'#');
    let mut chunks = script.chunks(MAX_PAYLOAD_CHUNK);
    let first = chunks.next().expect("a first chunk").to_vec();
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        c.send(&Request::Submit(JobSpec {
            profile: "default".into(),
            code: Code::Chunked {
                len: ANNOUNCED as u64,
            },
            args: vec![],
            stdin: false,
            limits: LimitOverrides::default(),
        }))
        .await;
        c.send(&Request::CodeChunk(first.clone())).await;
        // A round trip: the daemon has taken the chunk sent before it.
        c.send(&Request::ListProfiles).await;
        assert!(matches!(c.recv().await, Event::Profiles(_)));
        conns.push(c);
    }
    let after = (status_kib(pid, "VmSize"), status_kib(pid, "VmData"));
    eprintln!(
        "{CONNECTIONS} connections announcing {ANNOUNCED} bytes each: VmSize {} -> {} KiB, \
         VmData {} -> {} KiB, VmRSS {} KiB",
        before.0,
        after.0,
        before.1,
        after.1,
        status_kib(pid, "VmRSS")
    );
    assert!(
        after.0.saturating_sub(before.0) < BOUND_KIB
            && after.1.saturating_sub(before.1) < BOUND_KIB,
        "the announced lengths were reserved: VmSize {} -> {} KiB, VmData {} -> {} KiB",
        before.0,
        after.0,
        before.1,
        after.1
    );
    // The buffer that grows as the bytes arrive still makes a whole script.
    let c = &mut conns[0];
    for chunk in chunks {
        c.send(&Request::CodeChunk(chunk.to_vec())).await;
    }
    assert_eq!(run_to_end(c).await, (Reason::Ok, b"whole\n".to_vec()));
}
