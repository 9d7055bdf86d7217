//! Artifacts (#20, protocol 8) with the real daemon: the regular files a job or a cell
//! leaves under `/work` that its outputs name, collected inside the sandbox as the job's
//! user when it ends, on every kind of sandbox (cold, ready from a pool, forked from a
//! zygote) and in a session (only what a cell made or changed). Links, FIFOs and
//! devices are listed with their kind and never opened; the caps hold exactly.
//!
//! Needs root (VIVARIUM_REQUIRE_ROOT=1 in CI fails them loudly without it).
#![forbid(unsafe_code)]

use vivarium_client::proto::{
    ArtifactsReport, ArtifactsStatus, ErrorCode, Outputs, Reason, SandboxStart, SkipKind,
};
use vivarium_client::{Artifact, Cell, Collected, Job, SessionSpec};
use vivarium_e2e::{default_profile_with, require_root, Daemon, DaemonOpts};

fn sha256_hex(data: &[u8]) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args([
            "-c",
            "import sys, hashlib; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn report(done: &Collected) -> &ArtifactsReport {
    done.artifacts_report
        .as_ref()
        .unwrap_or_else(|| panic!("no artifacts report: {done:#?}"))
}

fn find<'a>(done: &'a Collected, path: &str) -> &'a Artifact {
    done.artifacts
        .iter()
        .find(|a| a.path() == path)
        .unwrap_or_else(|| panic!("no artifact {path}: {:#?}", paths(done)))
}

fn paths(done: &Collected) -> Vec<&str> {
    done.artifacts.iter().map(|a| a.path()).collect()
}

fn kind(done: &Collected) -> &'static str {
    match done.sandbox {
        Some(SandboxStart::Cold) => "cold",
        Some(SandboxStart::Ready { .. }) => "ready",
        Some(SandboxStart::Forked { .. }) => "forked",
        None => "unknown",
    }
}

/// A PNG (1x1, from Python's zlib), a CSV, a binary file, a nested file, a file outside
/// `out/`, and an empty file.
const MAKE_OUTPUTS: &str = r#"
import os, struct, zlib
os.makedirs("out/sub/deeper", exist_ok=True)
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
open("out/plot.png", "wb").write(png)
open("out/data.csv", "w").write("a,b\n1,2\n")
open("out/sub/deeper/blob.bin", "wb").write(bytes(range(256)) * 10)
open("out/empty", "wb").close()
open("elsewhere.txt", "w").write("not asked for")
print("made")
"#;

fn check_outputs(done: &Collected) {
    assert_eq!(done.outcome.reason, Reason::Ok, "{done:#?}");
    let r = report(done);
    assert_eq!(r.status, ArtifactsStatus::Collected, "{r:#?}");
    assert_eq!(
        paths(done),
        vec![
            "out/data.csv",
            "out/empty",
            "out/plot.png",
            "out/sub/deeper/blob.bin"
        ]
    );
    let png = find(done, "out/plot.png");
    assert_eq!(png.media_type(), "image/png");
    assert!(png.data.starts_with(b"\x89PNG"));
    assert_eq!(png.header.sha256, sha256_hex(&png.data));
    let csv = find(done, "out/data.csv");
    assert_eq!(csv.data, b"a,b\n1,2\n");
    assert_eq!(csv.media_type(), "text/plain; charset=utf-8");
    let blob = find(done, "out/sub/deeper/blob.bin");
    assert_eq!(blob.data.len(), 2560);
    assert_eq!(blob.header.size, 2560);
    assert_eq!(blob.media_type(), "application/octet-stream");
    assert_eq!(find(done, "out/empty").data.len(), 0);
    assert_eq!(r.returned, 4);
    assert_eq!(
        r.returned_bytes,
        done.artifacts
            .iter()
            .map(|a| a.data.len() as u64)
            .sum::<u64>()
    );
    assert!(
        r.skipped.is_empty() && r.omitted == 0 && !r.incomplete(),
        "{r:#?}"
    );
}

#[tokio::test]
async fn outputs_come_back_from_a_cold_a_ready_and_a_forked_sandbox() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(
        DaemonOpts::default()
            .warm_pools()
            .profile("cold", &default_profile_with(&[])),
    );
    for (profile, want) in [("cold", "cold"), ("default", "ready"), ("zygote", "forked")] {
        let done = daemon
            .run_job(&Job::new(MAKE_OUTPUTS).profile(profile))
            .await;
        assert_eq!(kind(&done), want, "profile {profile}: {done:#?}");
        check_outputs(&done);
    }
    // Patterns of its own: only what they match (and never a directory itself).
    let job = Job::new(MAKE_OUTPUTS).output("*.txt").output("out/sub");
    let done = daemon.run_job(&job).await;
    assert_eq!(paths(&done), vec!["elsewhere.txt"], "{done:#?}");
    // None: no collection and no report.
    let done = daemon
        .run_job(&Job::new(MAKE_OUTPUTS).outputs(Outputs::None))
        .await;
    assert!(
        done.artifacts.is_empty() && done.artifacts_report.is_none(),
        "{done:#?}"
    );
}

#[tokio::test]
async fn links_fifos_and_devices_are_listed_never_opened() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().warm_pools());
    let code = r#"
import os, stat, errno
os.makedirs("out", exist_ok=True)
os.symlink("/etc/shadow", "out/shadow")
os.symlink("../secret.txt", "out/inside-link")
open("secret.txt", "w").write("the job's own")
os.mkfifo("out/fifo")
try:
    os.mknod("out/null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    print("mknod made")
except OSError as e:
    print("mknod", errno.errorcode[e.errno])
import socket
s = socket.socket(socket.AF_UNIX)
s.bind("out/sock")
open("out/real.txt", "w").write("ok")
"#;
    for profile in ["default", "zygote"] {
        let done = daemon.run_job(&Job::new(code).profile(profile)).await;
        assert_eq!(done.outcome.reason, Reason::Ok, "{done:#?}");
        let out = String::from_utf8_lossy(&done.stdout);
        // The job cannot make a device node: positive evidence of the refusal.
        assert!(out.contains("mknod EPERM"), "{out}");
        assert_eq!(paths(&done), vec!["out/real.txt"], "{done:#?}");
        let r = report(&done);
        let skipped: Vec<(&str, SkipKind)> = r
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.kind))
            .collect();
        assert_eq!(
            skipped,
            vec![
                ("out/fifo", SkipKind::Fifo),
                ("out/inside-link", SkipKind::Symlink),
                ("out/shadow", SkipKind::Symlink),
                ("out/sock", SkipKind::Socket),
            ],
            "{r:#?}"
        );
        // A symlink's size is its target's length, never the target's content.
        let shadow = r.skipped.iter().find(|s| s.path == "out/shadow").unwrap();
        assert_eq!(shadow.size, "/etc/shadow".len() as u64);
        assert!(r.incomplete());
    }
}

#[tokio::test]
async fn the_caps_hold_exactly_and_say_what_was_left_out() {
    if !require_root() {
        return;
    }
    let profile = default_profile_with(&[]).replace(
        "\n[network]",
        "\n[files]\nmax_output_files = 100\nmax_output_file_bytes = 1000\nmax_output_bytes = 2500\n\n[network]",
    );
    let daemon = Daemon::start(DaemonOpts::default().profile("capped", &profile));
    // Exactly at the per-file cap is returned; one byte over is listed, not read.
    let code = r#"
import os
os.makedirs("out", exist_ok=True)
open("out/a-at-cap", "wb").write(b"a" * 1000)
open("out/b-over-cap", "wb").write(b"b" * 1001)
open("out/c-at-cap", "wb").write(b"c" * 1000)
open("out/d-over-total", "wb").write(b"d" * 600)
open("out/e-fits", "wb").write(b"e" * 500)
"#;
    let done = daemon.run_job(&Job::new(code).profile("capped")).await;
    assert_eq!(
        paths(&done),
        vec!["out/a-at-cap", "out/c-at-cap", "out/e-fits"],
        "{done:#?}"
    );
    assert_eq!(find(&done, "out/a-at-cap").data, vec![b'a'; 1000]);
    let r = report(&done);
    let skipped: Vec<(&str, SkipKind, u64)> = r
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), s.kind, s.size))
        .collect();
    assert_eq!(
        skipped,
        vec![
            ("out/b-over-cap", SkipKind::TooLarge, 1001),
            ("out/d-over-total", SkipKind::OverTotal, 600),
        ]
    );
    assert_eq!(
        (r.max_files, r.max_file_bytes, r.max_total_bytes),
        (100, 1000, 2500)
    );
    // 1000 files: the first 100 (in path order) come back, the rest are counted.
    let code = r#"
import os
os.makedirs("out", exist_ok=True)
for i in range(1000):
    open("out/f%04d" % i, "w").write("x")
"#;
    let done = daemon.run_job(&Job::new(code).profile("capped")).await;
    assert_eq!(done.artifacts.len(), 100, "{:#?}", done.artifacts_report);
    assert_eq!(done.artifacts[0].path(), "out/f0000");
    assert_eq!(done.artifacts[99].path(), "out/f0099");
    let r = report(&done);
    assert_eq!(r.omitted, 900, "{r:#?}");
    assert!(r.incomplete());
}

#[tokio::test]
async fn a_killed_job_says_its_artifacts_were_not_collected() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().warm_pools());
    let code = "import os, time\nos.makedirs('out')\nopen('out/x', 'w').write('x')\ntime.sleep(60)";
    let done = daemon.run_job(&Job::new(code).wall_ms(1500)).await;
    assert_eq!(done.outcome.reason, Reason::Timeout, "{done:#?}");
    assert!(done.artifacts.is_empty());
    match &report(&done).status {
        ArtifactsStatus::NotCollected(why) => assert!(why.contains("killed"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A job that fails on its own still returns what it made.
    let code = "import os\nos.makedirs('out')\nopen('out/x', 'w').write('x')\nraise SystemExit(3)";
    let done = daemon.run_job(&Job::new(code)).await;
    assert_eq!(done.outcome.reason, Reason::Error);
    assert_eq!(paths(&done), vec!["out/x"]);
}

#[tokio::test]
async fn a_bad_pattern_is_refused_and_nothing_runs() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    for bad in ["/etc/shadow", "../x", "out/../../etc", "a\0b", ""] {
        let job = Job::new("open('/work/ran', 'w')").output(bad);
        let err = daemon.try_run(&job, None).await.expect_err(bad);
        assert_eq!(
            err.refusal_code(),
            Some(ErrorCode::InvalidOutputPattern),
            "{bad:?}: {err}"
        );
    }
    // The connection and the daemon go on.
    let done = daemon.run("print('fine')").await;
    assert_eq!(done.stdout, b"fine\n");
}

#[tokio::test]
async fn a_cell_returns_what_it_made_or_changed() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let opened = client.open_session(&SessionSpec::new()).await.unwrap();
    let h = opened.info.handle;
    let run = |code: &str| Cell::new(h.clone(), code);
    let first = client
        .exec_cell_collect(
            &run("import os\nos.makedirs('out')\nopen('out/a.txt','w').write('one')"),
            None,
        )
        .await
        .unwrap();
    let names = |c: &vivarium_client::CollectedCell| -> Vec<String> {
        c.artifacts.iter().map(|a| a.path().to_owned()).collect()
    };
    assert_eq!(names(&first), vec!["out/a.txt"], "{first:#?}");
    // The second cell: its new file comes back, the unchanged one does not.
    let second = client
        .exec_cell_collect(&run("open('out/b.txt','w').write('two')"), None)
        .await
        .unwrap();
    assert_eq!(names(&second), vec!["out/b.txt"], "{second:#?}");
    assert_eq!(second.artifacts[0].data, b"two");
    let third = client
        .exec_cell_collect(&run("open('out/a.txt','w').write('one, changed')"), None)
        .await
        .unwrap();
    assert_eq!(names(&third), vec!["out/a.txt"], "{third:#?}");
    assert_eq!(third.artifacts[0].data, b"one, changed");
    let fourth = client.exec_cell_collect(&run("x = 1"), None).await.unwrap();
    assert!(fourth.artifacts.is_empty(), "{fourth:#?}");
    assert_eq!(
        fourth.artifacts_report.as_ref().map(|r| &r.status),
        Some(&ArtifactsStatus::Collected)
    );
    client.close_session(&h).await.unwrap();
}

#[tokio::test]
async fn a_version_7_connection_gets_no_artifacts_and_cannot_ask() {
    use vivarium_e2e::proto::{Code, Event, JobSpec, Request, SubmitFiles, SubmitJob};
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut conn = vivarium_e2e::RawConn::connect(daemon.socket())
        .await
        .seeing_artifacts();
    assert_eq!(conn.hello_versions(1, 7).await.version, 7);
    let spec = JobSpec {
        profile: "default".into(),
        code: Code::Inline(MAKE_OUTPUTS.as_bytes().to_vec()),
        args: Vec::new(),
        stdin: false,
        limits: Default::default(),
    };
    conn.send(&Request::SubmitJob(Box::new(SubmitJob {
        spec: spec.clone(),
        packages: Vec::new(),
        files: Vec::new(),
        outputs: Outputs::Default,
    })))
    .await;
    match conn.recv().await {
        Event::Error(e) if e.code == ErrorCode::UnexpectedMessage => {
            assert!(e.message.contains("version 8"), "{e:?}")
        }
        other => panic!("{other:?}"),
    }
    // Its jobs run as before: no artifact event comes, whatever is in out/.
    conn.send(&Request::SubmitFiles(Box::new(SubmitFiles {
        spec,
        packages: Vec::new(),
        files: Vec::new(),
    })))
    .await;
    loop {
        match conn.recv().await {
            Event::Finished(o) => {
                assert_eq!(o.reason, Reason::Ok, "{o:?}");
                break;
            }
            e @ (Event::Artifact(_) | Event::ArtifactChunk(_) | Event::Artifacts(_)) => {
                panic!("a version-7 connection got {e:?}")
            }
            _ => {}
        }
    }
    // On a version-8 connection the same plain request asks for the default outputs.
    let mut conn = vivarium_e2e::RawConn::connect(daemon.socket())
        .await
        .seeing_artifacts();
    assert_eq!(conn.hello_versions(1, 8).await.version, 8);
    conn.send(&Request::Submit(JobSpec {
        profile: "default".into(),
        code: Code::Inline(MAKE_OUTPUTS.as_bytes().to_vec()),
        args: Vec::new(),
        stdin: false,
        limits: Default::default(),
    }))
    .await;
    let mut headers = Vec::new();
    loop {
        match conn.recv().await {
            Event::Artifact(h) => headers.push(h.path.clone()),
            Event::Artifacts(r) => assert_eq!(r.returned, 4, "{r:?}"),
            Event::Finished(_) => break,
            _ => {}
        }
    }
    assert_eq!(
        headers,
        vec![
            "out/data.csv",
            "out/empty",
            "out/plot.png",
            "out/sub/deeper/blob.bin"
        ]
    );
}
