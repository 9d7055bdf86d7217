//! Input files (#20, protocol 7) with the real daemon: files placed under `/work` before
//! the code runs, on every kind of sandbox (cold, ready from a pool, forked from a
//! zygote) and in a session's persistent `/work`; every broken rule a typed error that
//! names the file, with nothing of the job run and the connection still in step.
//!
//! These speak the protocol directly ([`RawConn`]), so that what the daemon sends is seen
//! exactly. Needs root (VIVARIUM_REQUIRE_ROOT=1 in CI fails them loudly without it).
#![forbid(unsafe_code)]

use vivarium_e2e::proto::{
    CellOutcome, CellStatus, Code, ErrorCode, Event, ExecCell, ExecCellFiles, InputFile, JobSpec,
    LimitOverrides, OpenSession, Outcome, Reason, Request, SandboxStart, SessionHandle,
    SessionLimitOverrides, SubmitFiles, WireError, MAX_PAYLOAD_CHUNK,
};
use vivarium_e2e::RawConn;
use vivarium_e2e::{default_profile_with, require_root, Daemon, DaemonOpts};

/// A file to send: its path, mode and bytes.
struct F<'a>(&'a str, u32, Vec<u8>);

fn f<'a>(path: &'a str, data: &[u8]) -> F<'a> {
    F(path, 0, data.to_vec())
}

/// The frames that follow a `SubmitFiles`/`ExecCellFiles`: every file's bytes, one
/// after the other, in chunks (which may span files).
async fn send_file_bytes(conn: &RawConn, files: &[F<'_>]) {
    let all: Vec<u8> = files.iter().flat_map(|f| f.2.iter().copied()).collect();
    for piece in all.chunks(MAX_PAYLOAD_CHUNK) {
        conn.send(&Request::FileChunk(piece.to_vec())).await;
    }
}

fn input_files(files: &[F<'_>]) -> Vec<InputFile> {
    files
        .iter()
        .map(|f| InputFile {
            path: f.0.into(),
            mode: f.1,
            len: f.2.len() as u64,
        })
        .collect()
}

/// What came back for a job: its output, how its sandbox was made, and its outcome (or
/// the error that refused it).
#[derive(Debug)]
struct Ran {
    stdout: String,
    stderr: String,
    sandbox: Option<SandboxStart>,
    started: bool,
    end: Result<Outcome, WireError>,
}

impl Ran {
    fn ok(&self) -> &Self {
        match &self.end {
            Ok(o) if o.reason == Reason::Ok => self,
            _ => panic!("expected a job that ran to its end: {self:#?}"),
        }
    }

    fn refused(&self, code: ErrorCode) -> &WireError {
        match &self.end {
            Err(e) if e.code == code && !self.started => e,
            _ => panic!("expected {code:?} before anything started: {self:#?}"),
        }
    }
}

async fn submit(conn: &mut RawConn, profile: &str, code: &str, files: &[F<'_>]) -> Ran {
    let spec = JobSpec {
        profile: profile.into(),
        code: Code::Inline(code.as_bytes().to_vec()),
        args: Vec::new(),
        stdin: false,
        limits: LimitOverrides::default(),
    };
    conn.send(&Request::SubmitFiles(Box::new(SubmitFiles {
        spec,
        packages: Vec::new(),
        files: input_files(files),
    })))
    .await;
    send_file_bytes(conn, files).await;
    collect(conn).await
}

async fn collect(conn: &mut RawConn) -> Ran {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let (mut sandbox, mut started) = (None, false);
    loop {
        match conn.recv().await {
            Event::Stdout(b) => stdout.extend(b),
            Event::Stderr(b) => stderr.extend(b),
            Event::Started { .. } => started = true,
            Event::Sandbox(s) => sandbox = Some(s),
            Event::StdinCredit(_) | Event::Queued { .. } => {}
            Event::Finished(o) => {
                return Ran {
                    stdout: String::from_utf8_lossy(&stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                    sandbox,
                    started,
                    end: Ok(*o),
                }
            }
            Event::Error(e) => {
                return Ran {
                    stdout: String::from_utf8_lossy(&stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                    sandbox,
                    started,
                    end: Err(e),
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A job that prints what it finds of its inputs: content, mode, owner, and the
/// directories made for them.
const READ_INPUTS: &str = r#"
import os, hashlib
for p in ["data.csv", "sub/dir/notes.txt", "empty", "big.bin"]:
    st = os.stat(p)
    print(p, oct(st.st_mode & 0o7777), st.st_uid, st.st_gid, st.st_size,
          hashlib.sha256(open(p, "rb").read()).hexdigest()[:16])
d = os.stat("sub/dir")
print("dir", oct(d.st_mode & 0o7777), d.st_uid)
import csv
print(sum(int(r["n"]) for r in csv.DictReader(open("data.csv"))))
"#;

/// Deterministic bytes that do not compress (so a bug that drops or repeats a chunk
/// shows in the hash).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn sha16(data: &[u8]) -> String {
    // Python's hashlib inside the sandbox is the reference; here the same through the
    // host's interpreter (Debian's, never a shim).
    use std::io::Write;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn sample_inputs(big: &[u8]) -> Vec<F<'_>> {
    vec![
        f("data.csv", b"name,n\na,1\nb,2\nc,39\n"),
        F("sub/dir/notes.txt", 0o600, "héllo\n".as_bytes().to_vec()),
        F("empty", 0o444, Vec::new()),
        f("big.bin", big),
    ]
}

fn check_inputs(ran: &Ran, big: &[u8]) {
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{ran:#?}");
    assert_eq!(
        lines[0],
        format!(
            "data.csv 0o644 1000 1000 20 {}",
            sha16(b"name,n\na,1\nb,2\nc,39\n")
        )
    );
    assert_eq!(
        lines[1],
        format!(
            "sub/dir/notes.txt 0o600 1000 1000 7 {}",
            sha16("héllo\n".as_bytes())
        )
    );
    assert_eq!(lines[2], format!("empty 0o444 1000 1000 0 {}", sha16(b"")));
    assert_eq!(
        lines[3],
        format!("big.bin 0o644 1000 1000 {} {}", big.len(), sha16(big))
    );
    assert_eq!(lines[4], "dir 0o755 1000");
    assert_eq!(lines[5], "42");
}

#[tokio::test]
async fn inputs_land_in_work_on_a_cold_a_ready_and_a_forked_sandbox() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(
        DaemonOpts::default()
            .warm_pools()
            .profile("cold", &default_profile_with(&[])),
    );
    // Three chunks and more: the file's bytes span FileChunk frames.
    let big = noise(3 * MAX_PAYLOAD_CHUNK + 12345);
    let mut conn = RawConn::admitted(daemon.socket()).await;
    for (profile, want) in [("cold", "cold"), ("default", "ready"), ("zygote", "forked")] {
        let ran = submit(&mut conn, profile, READ_INPUTS, &sample_inputs(&big)).await;
        ran.ok();
        let kind = match ran.sandbox {
            Some(SandboxStart::Cold) => "cold",
            Some(SandboxStart::Ready { .. }) => "ready",
            Some(SandboxStart::Forked { .. }) => "forked",
            None => "unknown",
        };
        assert_eq!(kind, want, "profile {profile}: {ran:#?}");
        check_inputs(&ran, &big);
    }
    // Without files the same connection submits as before.
    conn.send(&Request::Submit(JobSpec {
        profile: "default".into(),
        code: Code::Inline(b"import os; print(sorted(os.listdir('.')))".to_vec()),
        args: Vec::new(),
        stdin: false,
        limits: LimitOverrides::default(),
    }))
    .await;
    let ran = collect(&mut conn).await;
    ran.ok();
    assert_eq!(ran.stdout.trim(), "['main.py']", "{ran:#?}");
}

#[tokio::test]
async fn every_broken_rule_is_refused_naming_the_file_and_nothing_runs() {
    if !require_root() {
        return;
    }
    // Small bounds, so that "too large" and "too many" are cheap to reach.
    let small = default_profile_with(&[])
        + "\n[files]\nmax_input_files = 3\nmax_input_file_bytes = 1000\nmax_input_bytes = 1500\n";
    let daemon = Daemon::start(DaemonOpts::default().profile("small", &small));
    let mut conn = RawConn::admitted(daemon.socket()).await;
    // The job would leave a mark on stdout; a refused one never starts.
    let code = "print('ran')";
    let kb = vec![b'x'; 1000];
    let cases: Vec<(Vec<F<'_>>, &str)> = vec![
        (vec![f("../escape", b"x")], "../escape"),
        (vec![f("a/../../escape", b"x")], "a/../../escape"),
        (vec![f("/etc/shadow", b"x")], "/etc/shadow"),
        (vec![f("a\0b", b"x")], "a\\0b"),
        (vec![f("a//b", b"x")], "a//b"),
        (vec![f("./a", b"x")], "./a"),
        (vec![f("", b"x")], "\"\""),
        (vec![F("run.sh", 0o755, b"x".to_vec())], "run.sh"),
        (vec![F("suid", 0o4644, b"x".to_vec())], "suid"),
        (vec![f("main.py", b"x")], "main.py"),
        (vec![f("twice", b"x"), f("twice", b"y")], "twice"),
        (vec![f("d", b"x"), f("d/e", b"y")], "d/e"),
        (vec![f("one-over", &[b'x'; 1001])], "one-over"),
        (vec![f("a", &kb), f("b", &kb)], "\"b\""),
        (
            vec![f("1", b"x"), f("2", b"x"), f("3", b"x"), f("4", b"x")],
            "4 input files",
        ),
    ];
    for (files, names) in &cases {
        let ran = submit(&mut conn, "small", code, files).await;
        let e = ran.refused(ErrorCode::InvalidInputFile);
        assert!(e.message.contains(names), "{names}: {e:?}");
        assert!(ran.stdout.is_empty() && ran.stderr.is_empty(), "{ran:#?}");
    }
    // Exactly at the caps is allowed: 1000 bytes in one file, 1500 together, 3 files.
    let at = [f("a", &kb), f("b", &[b'y'; 499]), f("c", b"z")];
    let ran = submit(
        &mut conn,
        "small",
        "import os; print(os.path.getsize('a') + os.path.getsize('b') + os.path.getsize('c'))",
        &at,
    )
    .await;
    ran.ok();
    assert_eq!(ran.stdout.trim(), "1500");
    // An unknown profile with files is refused as such, before the files are read.
    let ran = submit(&mut conn, "no-such-profile", code, &[f("a", b"x")]).await;
    ran.refused(ErrorCode::UnknownProfile);
    // After all of that (refused files' bytes read and dropped), the connection is in
    // step: the next job runs.
    let ran = submit(&mut conn, "small", code, &[]).await;
    ran.ok();
    assert_eq!(ran.stdout.trim(), "ran");
}

#[tokio::test]
async fn more_file_bytes_than_announced_close_the_connection() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::admitted(daemon.socket()).await;
    let spec = JobSpec {
        profile: "default".into(),
        code: Code::Inline(b"print('ran')".to_vec()),
        args: Vec::new(),
        stdin: false,
        limits: LimitOverrides::default(),
    };
    conn.send(&Request::SubmitFiles(Box::new(SubmitFiles {
        spec,
        packages: Vec::new(),
        files: input_files(&[f("a", b"xy")]),
    })))
    .await;
    conn.send(&Request::FileChunk(b"xyz".to_vec())).await;
    match conn.recv().await {
        Event::Error(e) => assert_eq!(e.code, ErrorCode::InvalidInputFile, "{e:?}"),
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(conn.recv_opt().await.is_none(), "the connection stays open");
    // A FileChunk with nothing announced is an error, and the connection goes on.
    let mut conn = RawConn::admitted(daemon.socket()).await;
    conn.send(&Request::FileChunk(b"x".to_vec())).await;
    match conn.recv().await {
        Event::Error(e) => assert_eq!(e.code, ErrorCode::UnexpectedMessage, "{e:?}"),
        other => panic!("expected an error, got {other:?}"),
    }
    let ran = submit(&mut conn, "default", "print('ran')", &[]).await;
    assert_eq!(ran.ok().stdout.trim(), "ran");
}

/// A cell with files, and what came back.
async fn cell(
    conn: &mut RawConn,
    h: &SessionHandle,
    code: &str,
    files: &[F<'_>],
) -> (String, CellOutcome) {
    let cell = ExecCell {
        session: h.clone(),
        code: Code::Inline(code.as_bytes().to_vec()),
        stdin: false,
        wall_ms: None,
    };
    if files.is_empty() {
        conn.send(&Request::ExecCell(Box::new(cell))).await;
    } else {
        conn.send(&Request::ExecCellFiles(Box::new(ExecCellFiles {
            cell,
            files: input_files(files),
        })))
        .await;
        send_file_bytes(conn, files).await;
    }
    let mut stdout = Vec::new();
    loop {
        match conn.recv().await {
            Event::Stdout(b) => stdout.extend(b),
            Event::Stderr(_) | Event::StdinCredit(_) => {}
            Event::CellFinished(o) => return (String::from_utf8_lossy(&stdout).into_owned(), *o),
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn input_error(o: &CellOutcome) -> String {
    match &o.status {
        CellStatus::Exception(e) if e.type_name == "vivarium.InputFileError" => e.message.clone(),
        other => panic!("expected vivarium.InputFileError, got {other:?}"),
    }
}

#[tokio::test]
async fn a_sessions_files_persist_are_replaced_and_never_go_through_a_link() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::admitted(daemon.socket()).await;
    conn.send(&Request::OpenSession(Box::new(OpenSession {
        profile: "default".into(),
        limits: SessionLimitOverrides::default(),
        packages: Vec::new(),
    })))
    .await;
    let h = match conn.recv().await {
        Event::SessionOpened(o) => o.info.handle.clone(),
        other => panic!("expected SessionOpened, got {other:?}"),
    };
    let (out, o) = cell(
        &mut conn,
        &h,
        "print(open('data.csv').read(), end='')",
        &[f("data.csv", b"v1\n")],
    )
    .await;
    assert_eq!((o.status.clone(), out.as_str()), (CellStatus::Ok, "v1\n"));
    // The next cell, without files, still has it; then a new version replaces it.
    let (out, _) = cell(&mut conn, &h, "print(open('data.csv').read(), end='')", &[]).await;
    assert_eq!(out, "v1\n");
    let (out, _) = cell(
        &mut conn,
        &h,
        "print(open('data.csv').read(), end='')",
        &[f("data.csv", b"v2\n")],
    )
    .await;
    assert_eq!(out, "v2\n");
    // Things a cell left in /work that a file must not go through or replace.
    let (_, o) = cell(
        &mut conn,
        &h,
        "import os\nos.symlink('/etc/passwd', 'link')\nos.symlink('/tmp', 'dirlink')\nos.mkfifo('fifo')\nos.link('data.csv', 'hard')\nopen('/tmp/keep', 'w').write('keep')",
        &[],
    )
    .await;
    assert_eq!(o.status, CellStatus::Ok, "{o:?}");
    for (path, why) in [
        ("link", "link"),
        ("dirlink/keep", "dirlink/keep"),
        ("fifo", "fifo"),
        ("data.csv/x", "data.csv/x"),
    ] {
        let (out, o) = cell(
            &mut conn,
            &h,
            "ran = True\nprint('ran')",
            &[f(path, b"evil")],
        )
        .await;
        let msg = input_error(&o);
        assert!(msg.contains(why), "{path}: {msg}");
        assert!(out.is_empty(), "{path}: the cell ran: {out}");
    }
    // A regular file with another link to it is replaced (the name now has a file of
    // its own), not written through: data.csv keeps its bytes. A read-only file sent
    // earlier can be sent again.
    let (out, o) = cell(
        &mut conn,
        &h,
        "print(open('hard').read(), end='')",
        &[f("hard", b"new")],
    )
    .await;
    assert_eq!(
        (o.status.clone(), out.as_str()),
        (CellStatus::Ok, "new"),
        "{o:?}"
    );
    let ro = [F("ro.txt", 0o444, b"one".to_vec())];
    let (_, o) = cell(&mut conn, &h, "pass", &ro).await;
    assert_eq!(o.status, CellStatus::Ok, "{o:?}");
    let ro = [F("ro.txt", 0o444, b"two".to_vec())];
    let (out, o) = cell(&mut conn, &h, "import os\nprint(open('ro.txt').read(), oct(os.stat('ro.txt').st_mode & 0o777), sorted(n for n in os.listdir('.') if n.startswith('.vivarium')))", &ro).await;
    assert_eq!(
        (o.status.clone(), out.trim()),
        (CellStatus::Ok, "two 0o444 []"),
        "{o:?}"
    );
    // Nothing went through: the link's target, the file behind the directory link and
    // the hard-linked file are as they were, and no cell's code ran.
    let (out, o) = cell(
        &mut conn,
        &h,
        "import os\nprint('ran' in globals(), open('/tmp/keep').read(), open('data.csv').read().strip(), os.readlink('link'), open('/etc/passwd').read().count('evil'))",
        &[],
    )
    .await;
    assert_eq!(o.status, CellStatus::Ok, "{o:?}");
    assert_eq!(out.trim(), "False keep v2 /etc/passwd 0");
    // A broken rule is refused by the daemon, as for a job; the session goes on.
    conn.send(&Request::ExecCellFiles(Box::new(ExecCellFiles {
        cell: ExecCell {
            session: h.clone(),
            code: Code::Inline(b"print('ran')".to_vec()),
            stdin: false,
            wall_ms: None,
        },
        files: input_files(&[f("../up", b"x")]),
    })))
    .await;
    send_file_bytes(&conn, &[f("../up", b"x")]).await;
    match conn.recv().await {
        Event::Error(e) => {
            assert_eq!(e.code, ErrorCode::InvalidInputFile, "{e:?}");
            assert!(e.message.contains("../up"), "{e:?}");
        }
        other => panic!("expected InvalidInputFile, got {other:?}"),
    }
    let (out, _) = cell(&mut conn, &h, "print(open('data.csv').read(), end='')", &[]).await;
    assert_eq!(out, "v2\n");
    conn.send(&Request::CloseSession(h.clone())).await;
    assert!(matches!(conn.recv().await, Event::SessionClosed(_)));
}

#[tokio::test]
async fn a_version_6_connection_cannot_send_files() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::connect(daemon.socket()).await;
    conn.hello_versions(1, 6).await;
    let ran = submit(&mut conn, "default", "print('ran')", &[f("a", b"x")]).await;
    ran.refused(ErrorCode::UnexpectedMessage);
}

#[test]
fn viv_run_and_exec_send_files() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("sales.csv");
    std::fs::write(&csv, "region,amount\nnorth,3\nsouth,4\n").unwrap();
    let script = dir.path().join("sum.py");
    std::fs::write(
        &script,
        "import csv\nrows = list(csv.DictReader(open('in/sales.csv')))\nprint(sum(int(r['amount']) for r in rows), open('sales.csv').read().count('\\n'))\n",
    )
    .unwrap();
    let csv_arg = csv.to_str().unwrap();
    let dest = format!("{csv_arg}:in/sales.csv");
    let out = daemon.viv(
        &[
            "run",
            "--file",
            &dest,
            "--file",
            csv_arg,
            script.to_str().unwrap(),
        ],
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        vivarium_e2e::describe_output(&out)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7 3");
    // A path the daemon refuses: viv says which file, and the job does not run.
    let out = daemon.viv(
        &[
            "run",
            "--file",
            &format!("{csv_arg}:../x"),
            script.to_str().unwrap(),
        ],
        b"",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("../x"), "{err}");
    assert!(out.stdout.is_empty());
    // A session: the file sent with one cell is there for the next.
    let out = daemon.viv(&["session", "new"], b"");
    assert!(
        out.status.success(),
        "{}",
        vivarium_e2e::describe_output(&out)
    );
    let handle = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let out = daemon.viv(
        &["exec", &handle, "--file", csv_arg, "-"],
        b"n = len(open('sales.csv').read())\nprint(n)\n",
    );
    assert!(
        out.status.success(),
        "{}",
        vivarium_e2e::describe_output(&out)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "30");
    let out = daemon.viv(
        &["exec", &handle, "-"],
        b"print(n, open('sales.csv').read().splitlines()[1])\n",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "30 north,3");
    let out = daemon.viv(&["session", "close", &handle], b"");
    assert!(
        out.status.success(),
        "{}",
        vivarium_e2e::describe_output(&out)
    );
}

#[tokio::test]
async fn a_cell_for_no_session_holds_no_file_bytes() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = RawConn::admitted(daemon.socket()).await;
    let nowhere = SessionHandle(format!("vs_{}", "cd".repeat(32)));
    let big = [f("big.bin", &noise(4 * MAX_PAYLOAD_CHUNK))];
    conn.send(&Request::ExecCellFiles(Box::new(ExecCellFiles {
        cell: ExecCell {
            session: nowhere,
            code: Code::Inline(b"print('ran')".to_vec()),
            stdin: false,
            wall_ms: None,
        },
        files: input_files(&big),
    })))
    .await;
    // Answered at the head, before any file byte is taken; the bytes that follow are
    // dropped and the connection stays in step.
    match conn.recv().await {
        Event::Error(e) => assert_eq!(e.code, ErrorCode::SessionNotFound, "{e:?}"),
        other => panic!("expected SessionNotFound, got {other:?}"),
    }
    send_file_bytes(&conn, &big).await;
    let ran = submit(&mut conn, "default", "print('ran')", &[]).await;
    assert_eq!(ran.ok().stdout.trim(), "ran");
}
