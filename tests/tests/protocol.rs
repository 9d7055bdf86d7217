//! The daemon against bad clients: raw frames it must refuse with the right code while the
//! connection (and the daemon) goes on; who may connect at all; and how long a connection
//! keeps its place without using it.
#![forbid(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::process::Command;

use vivarium_e2e::proto::{
    encode, Code, ErrorCode, Event, Hello, JobSpec, LimitOverrides, Reason, Request, SandboxStart,
    WireError, MAX_FRAME, PROTOCOL_VERSION,
};
use vivarium_e2e::{
    bin, describe, describe_output, require_root, run_with_stdin, Daemon, DaemonOpts, RawConn,
};

const NOBODY: u32 = 65534;

fn error_code(event: &Event) -> Option<ErrorCode> {
    match event {
        Event::Error(WireError { code, .. }) => Some(*code),
        _ => None,
    }
}

fn submit(code: Code) -> Request {
    Request::Submit(JobSpec {
        profile: "default".into(),
        code,
        args: vec![],
        stdin: false,
        limits: LimitOverrides::default(),
    })
}

fn hello() -> Vec<u8> {
    encode(&Request::Hello(Hello {
        min_version: 1,
        max_version: PROTOCOL_VERSION,
        client: "vivarium-e2e".into(),
    }))
    .unwrap()
}

/// Send `frame` and return the code of the error it got (None if it got no error).
async fn answer(conn: &mut RawConn, frame: &[u8]) -> Option<ErrorCode> {
    conn.send_bytes(frame).await;
    error_code(&conn.recv().await)
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_frames_get_typed_errors_and_the_connection_goes_on() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::connect(daemon.socket()).await;
    let mut truncated_hello = hello();
    truncated_hello.truncate(truncated_hello.len() - 2);
    let mut trailing = hello();
    trailing.push(0);
    // Variant 1 (Submit), then a profile string claiming 2^40 bytes.
    let mut huge_claim = vec![1u8, 0xfd];
    huge_claim.extend_from_slice(&(1u64 << 40).to_le_bytes());
    let oversize = vec![0u8; MAX_FRAME + 100];

    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"\xff\xfe\xfd\xfc garbage".to_vec()),
        ("truncated", truncated_hello),
        ("trailing byte", trailing),
        ("huge claimed length", huge_claim),
        ("oversize", oversize),
        (
            "submit before hello",
            encode(&submit(Code::Inline(b"print(1)".to_vec()))).unwrap(),
        ),
        ("cancel before hello", encode(&Request::Cancel).unwrap()),
    ];
    let mut got = Vec::new();
    for (name, frame) in &cases {
        got.push((*name, answer(&mut conn, frame).await));
    }
    use ErrorCode::*;
    assert_eq!(
        got,
        vec![
            ("garbage", Some(MalformedFrame)),
            ("truncated", Some(MalformedFrame)),
            ("trailing byte", Some(MalformedFrame)),
            ("huge claimed length", Some(MalformedFrame)),
            ("oversize", Some(OversizeFrame)),
            ("submit before hello", Some(UnexpectedMessage)),
            ("cancel before hello", Some(UnexpectedMessage)),
        ]
    );
    // After all that, the same connection still says hello and runs a job.
    let ack = conn.hello().await;
    assert_eq!((ack.version, ack.peer_uid), (PROTOCOL_VERSION, 0));
    conn.send(&submit(Code::Inline(b"print('alive')".to_vec())))
        .await;
    let mut stdout = Vec::new();
    loop {
        match conn.recv().await {
            Event::Started { .. } | Event::Sandbox(_) => {}
            Event::Stdout(bytes) => stdout.extend(bytes),
            Event::Finished(outcome) => {
                assert_eq!(outcome.reason, Reason::Ok, "{outcome:#?}");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(stdout, b"alive\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn hello_rules() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::connect(daemon.socket()).await;
    let future = encode(&Request::Hello(Hello {
        min_version: PROTOCOL_VERSION + 1,
        max_version: PROTOCOL_VERSION + 5,
        client: "from the future".into(),
    }))
    .unwrap();
    assert_eq!(
        answer(&mut conn, &future).await,
        Some(ErrorCode::UnsupportedVersion)
    );
    // After UnsupportedVersion the client may try again; a second hello is unexpected.
    conn.hello().await;
    assert_eq!(
        answer(&mut conn, &hello()).await,
        Some(ErrorCode::UnexpectedMessage)
    );
    // A code chunk with no chunked submit open.
    let chunk = encode(&Request::CodeChunk(b"x".to_vec())).unwrap();
    assert_eq!(
        answer(&mut conn, &chunk).await,
        Some(ErrorCode::UnexpectedMessage)
    );
    conn.send(&Request::ListProfiles).await;
    match conn.recv().await {
        Event::Profiles(list) => {
            let names: Vec<&str> = list.iter().map(|p| p.name.as_str()).collect();
            assert!(names.contains(&"default"), "{names:?}");
        }
        other => panic!("expected Profiles, got {other:?}"),
    }
    // Protocol 4: what each profile offers. This daemon has no uv: no profile's jobs can
    // have packages, and each says why.
    conn.send(&Request::ListProfileFeatures).await;
    match conn.recv().await {
        Event::ProfileFeatures(list) => {
            let default = list.iter().find(|f| f.name == "default").expect("default");
            let why = default.packages_unavailable.as_deref().unwrap_or_default();
            assert!(why.contains("uv"), "{list:?}");
            assert!(
                list.iter()
                    .all(|f| f.packages_unavailable.is_some() && !f.packages_from_index),
                "{list:?}"
            );
        }
        other => panic!("expected ProfileFeatures, got {other:?}"),
    }
    // A version-3 connection does not know the request.
    let mut old = RawConn::connect(daemon.socket()).await;
    old.send(&Request::Hello(Hello {
        min_version: 1,
        max_version: 3,
        client: "v3".into(),
    }))
    .await;
    assert!(matches!(old.recv().await, Event::HelloAck(a) if a.version == 3));
    old.send(&Request::ListProfileFeatures).await;
    assert!(matches!(old.recv().await, Event::Error(e) if e.code == ErrorCode::UnexpectedMessage));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_submissions_are_refused_and_the_daemon_lives_on() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::connect(daemon.socket()).await;
    conn.hello().await;
    let unknown_profile = Request::Submit(JobSpec {
        profile: "no-such-profile".into(),
        code: Code::Inline(b"print(1)".to_vec()),
        args: vec![],
        stdin: false,
        limits: LimitOverrides::default(),
    });
    let nul_arg = Request::Submit(JobSpec {
        profile: "default".into(),
        code: Code::Inline(b"print(1)".to_vec()),
        args: vec!["a\0b".into()],
        stdin: false,
        limits: LimitOverrides::default(),
    });
    let cases: Vec<(&str, Request)> = vec![
        ("unknown profile", unknown_profile),
        (
            "non-UTF-8 code",
            submit(Code::Inline(b"print('\xff\xfe')".to_vec())),
        ),
        ("NUL in an argument", nul_arg),
    ];
    let mut got = Vec::new();
    for (name, req) in &cases {
        got.push((*name, answer(&mut conn, &encode(req).unwrap()).await));
    }
    use ErrorCode::*;
    assert_eq!(
        got,
        vec![
            ("unknown profile", Some(UnknownProfile)),
            ("non-UTF-8 code", Some(InvalidCode)),
            ("NUL in an argument", Some(InvalidCode)),
        ]
    );
    // A chunked submit whose chunks are not UTF-8 either.
    conn.send(&submit(Code::Chunked { len: 4 })).await;
    let chunk = encode(&Request::CodeChunk(b"\xff\xff\xff\xff".to_vec())).unwrap();
    assert_eq!(answer(&mut conn, &chunk).await, Some(InvalidCode));
    // A chunked submit past max_code_bytes is refused and the connection closed.
    conn.send(&submit(Code::Chunked { len: 1 << 40 })).await;
    assert_eq!(error_code(&conn.recv().await), Some(CodeTooLarge));
    assert_eq!(conn.recv_opt().await, None, "connection left open");
    // Another client still gets its job run.
    let done = daemon.run("print('fine')").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert_eq!(done.stdout, b"fine\n");
}

/// `viv run -` (script on stdin) as `uid`/`gid` with no supplementary groups.
fn viv_as(daemon: &Daemon, uid: u32, gid: u32) -> std::process::Output {
    let mut cmd = daemon.viv_command();
    cmd.uid(uid).gid(gid).args(["run", "-"]);
    run_with_stdin(&mut cmd, b"print('admitted')")
}

fn assert_admitted(out: &std::process::Output) {
    assert_eq!(out.status.code(), Some(0), "{}", describe_output(out));
    assert_eq!(out.stdout, b"admitted\n", "{}", describe_output(out));
}

/// Refused: viv failed with 125 and the job never ran. (That viv also says why is
/// `strangers_are_told_they_are_not_admitted`.)
fn assert_refused(out: &std::process::Output) {
    assert_eq!(out.status.code(), Some(125), "{}", describe_output(out));
    assert!(out.stdout.is_empty(), "{}", describe_output(out));
}

/// How many connections the daemon has turned away so far.
fn refusals_logged(daemon: &Daemon) -> usize {
    daemon.log().matches("peer not admitted").count()
}

#[tokio::test(flavor = "multi_thread")]
async fn strangers_are_not_admitted() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().socket_mode("0666"));
    assert_refused(&viv_as(&daemon, NOBODY, NOBODY));
    assert_eq!(refusals_logged(&daemon), 1);
    // Root is always admitted.
    let mut root = daemon.viv_command();
    root.args(["run", "-"]);
    assert_admitted(&run_with_stdin(&mut root, b"print('admitted')"));
}

/// docs/protocol.md: a peer that is not admitted gets `Error{NotAuthorized}` as the answer
/// to its hello. The daemon must not close the connection in a way that loses that answer
/// (a close with the client's unread hello queued resets the connection), so every try
/// must show the refusal, not `Connection reset by peer` or `Broken pipe`.
#[tokio::test(flavor = "multi_thread")]
async fn strangers_are_told_they_are_not_admitted() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().socket_mode("0666"));
    let mut messages = Vec::new();
    for _ in 0..10 {
        let out = viv_as(&daemon, NOBODY, NOBODY);
        assert_refused(&out);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        if !(stderr.contains("uid 65534 is not admitted") && stderr.contains("NotAuthorized")) {
            messages.push(stderr);
        }
    }
    assert_eq!(messages, Vec::<String>::new(), "tries that did not say why");
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_uids_are_admitted() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().socket_mode("0666").allow_uid(NOBODY));
    assert_admitted(&viv_as(&daemon, NOBODY, NOBODY));
}

/// `max_connections_per_uid`: root, holding its two places, is told `Busy` for a third
/// connection while another uid is still served; a place root gives up is taken again.
#[tokio::test(flavor = "multi_thread")]
async fn connections_per_uid_are_capped() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(
        DaemonOpts::default()
            .socket_mode("0666")
            .allow_uid(NOBODY)
            .config_line("max_connections_per_uid = 2"),
    );
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(RawConn::admitted(daemon.socket()).await);
    }
    let mut third = RawConn::connect(daemon.socket()).await;
    third.send_bytes(&hello()).await;
    third
        .expect_refused(ErrorCode::Busy, "max_connections_per_uid")
        .await;
    assert_admitted(&viv_as(&daemon, NOBODY, NOBODY));
    drop(open.pop());
    let served = RawConn::served_again(daemon.socket()).await;
    assert!(served, "the place root gave up was not taken again");
}

/// By default one uid may hold a quarter of `max_connections` (here 8, so 2): root, holding
/// two, is told `Busy` for a third while another uid is still served. (The default was no
/// per-uid limit: one uid could take every place.)
#[tokio::test(flavor = "multi_thread")]
async fn one_uid_gets_a_quarter_of_the_places_by_default() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(
        DaemonOpts::default()
            .socket_mode("0666")
            .allow_uid(NOBODY)
            .config_line("max_connections = 8"),
    );
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(RawConn::admitted(daemon.socket()).await);
    }
    let mut third = RawConn::connect(daemon.socket()).await;
    third.send_bytes(&hello()).await;
    third
        .expect_refused(ErrorCode::Busy, "uid 0 has 2 connections open")
        .await;
    assert_admitted(&viv_as(&daemon, NOBODY, NOBODY));
}

/// The attack of issue 17: one admitted uid (per-uid cap off) takes every connection place
/// by connecting and never completing a hello, so every other client gets `Busy`. With
/// `hello_timeout_ms`, each such connection is told `Busy` (naming the setting) and closed;
/// a failed hello (`UnsupportedVersion`) does not stop the clock; then another uid is
/// served. A connection that did say hello keeps its place past that deadline.
#[tokio::test(flavor = "multi_thread")]
async fn connections_that_never_say_hello_lose_their_place() {
    if !require_root() {
        return;
    }
    const PLACES: usize = 16;
    let daemon = Daemon::start(
        DaemonOpts::default()
            .socket_mode("0666")
            .allow_uid(NOBODY)
            .config_line(&format!("max_connections = {PLACES}"))
            .config_line("max_connections_per_uid = 0")
            .config_line("hello_timeout_ms = 2000"),
    );
    let mut honest = RawConn::connect(daemon.socket()).await;
    honest.hello().await;
    let mut silent = Vec::new();
    for _ in 1..PLACES - 1 {
        silent.push(RawConn::connect(daemon.socket()).await);
    }
    // One more that tries a hello the daemon cannot take, and then says nothing.
    let mut stubborn = RawConn::connect(daemon.socket()).await;
    let future = encode(&Request::Hello(Hello {
        min_version: PROTOCOL_VERSION + 1,
        max_version: PROTOCOL_VERSION + 5,
        client: "from the future".into(),
    }))
    .unwrap();
    assert_eq!(
        answer(&mut stubborn, &future).await,
        Some(ErrorCode::UnsupportedVersion)
    );
    silent.push(stubborn);
    // Every place is taken (well within the 2 s).
    let mut over = RawConn::connect(daemon.socket()).await;
    over.send_bytes(&hello()).await;
    over.expect_refused(ErrorCode::Busy, "max_connections")
        .await;
    for c in &mut silent {
        c.expect_refused(ErrorCode::Busy, "hello_timeout_ms").await;
    }
    assert_admitted(&viv_as(&daemon, NOBODY, NOBODY));
    let logged = daemon
        .log()
        .matches("no hello within hello_timeout_ms")
        .count();
    assert_eq!(logged, PLACES - 1, "{}", daemon.log());
    // The connection that said hello first is older than the deadline and still served.
    honest
        .send(&submit(Code::Inline(b"print('still here')".to_vec())))
        .await;
    assert_eq!(
        run_to_end(&mut honest).await,
        (Reason::Ok, b"still here\n".to_vec())
    );
}

/// Idle connections lose their place too: with `idle_timeout_secs = 2`, connections past
/// their hello that hold every place with no job (one of them in the middle of a chunked
/// submit) are told `Busy` (naming the setting) and closed, and another uid is then
/// served. A connection whose job runs for twice that is never idle: its job ends `Ok`,
/// and only after it does the idle clock starts for that connection too.
#[tokio::test(flavor = "multi_thread")]
async fn idle_connections_lose_their_place_but_not_while_a_job_runs() {
    if !require_root() {
        return;
    }
    const PLACES: usize = 8;
    let daemon = Daemon::start(
        DaemonOpts::default()
            .socket_mode("0666")
            .allow_uid(NOBODY)
            .config_line(&format!("max_connections = {PLACES}"))
            .config_line("max_connections_per_uid = 0")
            .config_line("idle_timeout_secs = 2"),
    );
    let mut working = RawConn::connect(daemon.socket()).await;
    working.hello().await;
    working
        .send(&submit(Code::Inline(
            b"import time\ntime.sleep(4)\nprint('slept')".to_vec(),
        )))
        .await;
    let mut idle = Vec::new();
    for _ in 1..PLACES - 1 {
        let mut c = RawConn::connect(daemon.socket()).await;
        c.hello().await;
        idle.push(c);
    }
    // A chunked submit that stops halfway is idle from its last chunk.
    let mut half = RawConn::connect(daemon.socket()).await;
    half.hello().await;
    half.send(&submit(Code::Chunked { len: 1000 })).await;
    half.send(&Request::CodeChunk(b"print(1)\n".to_vec())).await;
    idle.push(half);
    let mut over = RawConn::connect(daemon.socket()).await;
    over.send_bytes(&hello()).await;
    over.expect_refused(ErrorCode::Busy, "max_connections")
        .await;
    for c in &mut idle {
        c.expect_refused(ErrorCode::Busy, "idle_timeout_secs").await;
    }
    assert_admitted(&viv_as(&daemon, NOBODY, NOBODY));
    assert_eq!(
        run_to_end(&mut working).await,
        (Reason::Ok, b"slept\n".to_vec())
    );
    working
        .expect_refused(ErrorCode::Busy, "idle_timeout_secs")
        .await;
    let logged = daemon.log().matches("idle for idle_timeout_secs").count();
    assert_eq!(logged, PLACES, "{}", daemon.log());
}

/// A job's stdout and reason, from its events on a raw connection.
async fn run_to_end(c: &mut RawConn) -> (Reason, Vec<u8>) {
    let mut stdout = Vec::new();
    loop {
        match c.recv().await {
            Event::Started { .. } | Event::Sandbox(_) | Event::Queued { .. } => {}
            Event::Stdout(b) => stdout.extend_from_slice(&b),
            Event::Finished(o) => return (o.reason, stdout),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The socket file's mode is the first gate: with 0660 root:root, an allowed uid still
/// cannot connect.
#[tokio::test(flavor = "multi_thread")]
async fn socket_mode_is_the_first_gate() {
    if !require_root() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let daemon = Daemon::start(DaemonOpts::default().socket_mode("0660").allow_uid(NOBODY));
    let mode = std::fs::metadata(daemon.socket())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o660);
    let out = viv_as(&daemon, NOBODY, NOBODY);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{}", describe_output(&out));
    assert!(
        stderr.contains("cannot connect") && stderr.contains("ermission denied"),
        "{}",
        describe_output(&out)
    );
}

/// Admission by a supplementary group (SO_PEERGROUPS), not only the primary gid: nobody
/// with primary gid 65534 and supplementary group 4242 gets in through allow_groups = 4242,
/// and without that group stays out.
#[tokio::test(flavor = "multi_thread")]
async fn supplementary_groups_are_admitted() {
    if !require_root() {
        return;
    }
    let Some(setpriv) = find_in_path("setpriv") else {
        if std::env::var("VIVARIUM_REQUIRE_ROOT").as_deref() == Ok("1") {
            panic!("setpriv (util-linux) is missing, and CI must run this test");
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP supplementary_groups_are_admitted: needs setpriv (util-linux)"
        );
        return;
    };
    let daemon = Daemon::start(
        DaemonOpts::default()
            .socket_mode("0666")
            .allow_group("4242"),
    );
    let viv_with_groups = |groups: &[&str]| {
        let mut cmd = Command::new(&setpriv);
        cmd.args(["--reuid", "65534", "--regid", "65534"])
            .args(groups)
            .arg("--")
            .arg(bin("viv"))
            .arg("--socket")
            .arg(daemon.socket())
            .args(["run", "-"])
            .env_remove("VIVARIUM_SOCKET");
        run_with_stdin(&mut cmd, b"print('admitted')")
    };
    assert_admitted(&viv_with_groups(&["--groups", "4242"]));
    assert_eq!(refusals_logged(&daemon), 0);
    assert_refused(&viv_with_groups(&["--clear-groups"]));
    assert_eq!(refusals_logged(&daemon), 1);
}

fn find_in_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(name))
        .find(|p| p.is_file())
}

/// `Event::Sandbox` (protocol 5) comes right after `Started`, on a version-5 connection
/// only: a version-4 client, which could not decode it, never gets it.
#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_event_follows_started_on_version_5_only() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    for version in [4, 5] {
        let mut conn = RawConn::connect(daemon.socket()).await;
        conn.send(&Request::Hello(Hello {
            min_version: version,
            max_version: version,
            client: "vivarium-e2e".into(),
        }))
        .await;
        assert!(matches!(conn.recv().await, Event::HelloAck(a) if a.version == version));
        conn.send(&submit(Code::Inline(b"print('hi')".to_vec())))
            .await;
        let mut kinds = Vec::new();
        loop {
            let event = conn.recv().await;
            // (Output may come in more than one frame.)
            if kinds.last() != Some(&event.kind()) {
                kinds.push(event.kind());
            }
            match event {
                Event::Sandbox(start) => assert_eq!(start, SandboxStart::Cold, "v{version}"),
                Event::Finished(o) => {
                    assert_eq!(o.reason, Reason::Ok, "v{version}: {o:#?}");
                    break;
                }
                _ => {}
            }
        }
        let want: &[&str] = if version == 5 {
            &["Started", "Sandbox", "Stdout", "Finished"]
        } else {
            &["Started", "Stdout", "Finished"]
        };
        assert_eq!(kinds, want, "v{version}");
    }
}
