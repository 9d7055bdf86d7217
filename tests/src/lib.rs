//! The end-to-end harness: start a real `vivariumd` on a private socket, run jobs through
//! the client library or the real `viv` binary, and look for anything a job or the daemon
//! left behind on the host.
//!
//! Every test starts its own [`Daemon`] (a few hundred milliseconds), with its own socket,
//! state directory and cgroup subtree, so tests are independent and run in parallel.
//! Evidence from inside the sandbox comes from probe scripts (`tests/probes/*.py`) that print
//! one JSON line; see [`evidence`].
//!
//! Sandbox tests need root. [`require_root`] skips them loudly when not root, and fails
//! them when `VIVARIUM_REQUIRE_ROOT=1` says the environment is supposed to be root (CI).
#![forbid(unsafe_code)]

mod daemon;
pub mod http;
mod leaks;
mod raw;

pub use daemon::{default_profile_with, shipped_default_with, Daemon, DaemonOpts};
pub use leaks::{alive, descendants, host_cgroup_version, host_cgroup_view, Proc, Snapshot};
pub use raw::RawConn;
pub use vivarium_client::{
    proto, Client, ClientError, Collected, Job, JobEvent, JobHandle, SessionSpec, Stream,
};

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long any single job may take before the harness gives up on the daemon.
/// The host-global /proc files the daemon masks (`plan::proc_masks`), where the host has
/// them: written out here, so that a mask dropped from the daemon fails the tests.
pub const MASKED_PROC_FILES: &[&str] = &[
    "/proc/cmdline",
    "/proc/config.gz",
    "/proc/partitions",
    "/proc/diskstats",
    "/proc/loadavg",
    "/proc/pressure/cpu",
    "/proc/pressure/io",
    "/proc/pressure/memory",
    "/proc/pressure/irq",
    "/proc/iomem",
    "/proc/ioports",
    "/proc/devices",
    "/proc/consoles",
    "/proc/sys/kernel/core_pattern",
];

pub const JOB_TIMEOUT: Duration = Duration::from_secs(60);

/// The workspace root (the parent of this crate).
pub fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Where `vivariumd` and `viv` are: `$VIVARIUM_BIN_DIR`, else `$CARGO_TARGET_DIR/debug`,
/// else `<workspace>/target/debug`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VIVARIUM_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| {
            if t.is_relative() {
                workspace_dir().join(t)
            } else {
                t
            }
        })
        .unwrap_or_else(|| workspace_dir().join("target"));
    target.join("debug")
}

/// The path of one of the workspace's binaries; panics if it has not been built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} does not exist: run `cargo build --workspace` first (or set VIVARIUM_BIN_DIR)",
        path.display()
    );
    path
}

/// The most a job's output stream can produce under `on_output_limit = "kill"` with
/// `cap` bytes, however fast the job writes: the daemon stops reading at the first read
/// past the cap (one chunk, at most `MAX_PAYLOAD_CHUNK`), the job's next write blocks on
/// the full pipe, and what it left there is read after the kill: at most the pipe's
/// capacity, which an unprivileged job can raise (F_SETPIPE_SZ) to
/// `/proc/sys/fs/pipe-max-size`, read here from the host.
pub fn produced_at_most(cap: u64) -> u64 {
    let max_pipe: u64 = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .expect("/proc/sys/fs/pipe-max-size")
        .trim()
        .parse()
        .expect("pipe-max-size is a number");
    cap + proto::MAX_PAYLOAD_CHUNK as u64 + max_pipe
}

/// The name libtest gave the current test's thread (the test's path).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_owned()
}

/// Whether this sandbox test can run: true as root. Otherwise it prints a SKIP line and
/// returns false, unless `VIVARIUM_REQUIRE_ROOT=1`, in which case it panics: CI declares
/// that it runs as root, so a skip there would hide a broken setup.
pub fn require_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    let name = test_name();
    if std::env::var("VIVARIUM_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("{name}: needs root, and VIVARIUM_REQUIRE_ROOT=1 says this run is root");
    }
    // Straight to fd 2: libtest captures `eprintln!` of passing tests, and a skip must show.
    let _ = writeln!(
        std::io::stderr(),
        "SKIP {name}: needs root (CI sets VIVARIUM_REQUIRE_ROOT=1)"
    );
    false
}

/// A host file holding `contents` that no job may read, in a fresh directory under
/// /var/tmp (a real host filesystem, unlike the test's tmpfs); gone with the `TempDir`.
pub fn plant_canary(contents: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("vivarium-canary-")
        .tempdir_in("/var/tmp")
        .expect("canary dir");
    let file = dir.path().join("secret.txt");
    std::fs::write(&file, contents).expect("write canary");
    (dir, file)
}

/// The shipped unit's `CapabilityBoundingSet=` as a `setpriv --bounding-set` argument.
pub fn unit_bounding_set() -> String {
    let unit = std::fs::read_to_string(workspace_dir().join("dist/systemd/vivariumd.service"))
        .expect("the service unit");
    let caps: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit sets CapabilityBoundingSet=")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    format!("-all,{}", caps.join(","))
}

/// A probe script from `tests/probes/`, by file stem.
pub fn probe(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("probes")
        .join(format!("{name}.py"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read probe {}: {e}", path.display()))
}

/// Everything about a finished job, for assertion messages.
pub fn describe(c: &Collected) -> String {
    format!(
        "outcome: {:#?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        c.outcome,
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr)
    )
}

/// The probe's evidence: the last stdout line that is a JSON object. Panics, showing the
/// whole job, if there is none.
pub fn evidence(c: &Collected) -> serde_json::Value {
    let text = String::from_utf8_lossy(&c.stdout);
    text.lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("the probe printed no JSON evidence\n{}", describe(c)))
}

/// The isolation probes whose evidence a warm (or forked) job must share with a cold one,
/// with their arguments: `canary`, a host file the `secrets` probe must not read, and
/// `port`, a host listener the `network` probe must not reach.
pub fn isolation_probes(canary: &Path, port: &str) -> Vec<(&'static str, Vec<String>)> {
    let none = Vec::new;
    vec![
        ("identity", none()),
        ("environment", none()),
        ("fs_writes", none()),
        ("procs", none()),
        ("seccomp", none()),
        ("storage", none()),
        ("secrets", vec![canary.display().to_string()]),
        ("network", vec![port.to_owned()]),
    ]
}

/// Replace what legitimately differs between two sandboxes (namespace and pipe inode
/// numbers, the per-job host ids) so that evidence can be compared as a whole.
pub fn normalize_evidence(v: &Value) -> Value {
    match v {
        Value::String(s) => {
            let mut out = String::new();
            let mut rest = s.as_str();
            while let Some(open) = rest.find('[') {
                let close = rest[open..].find(']').map(|c| open + c);
                match close {
                    Some(c) if rest[open + 1..c].chars().all(|ch| ch.is_ascii_digit()) => {
                        out.push_str(&rest[..open]);
                        out.push_str("[N]");
                        rest = &rest[c + 1..];
                    }
                    _ => {
                        out.push_str(&rest[..=open]);
                        rest = &rest[open + 1..];
                    }
                }
            }
            out.push_str(rest);
            match out.parse::<u64>() {
                Ok(n) if n > 65_535 => Value::String("HOST-ID".into()),
                _ => Value::String(out),
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(normalize_evidence).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| (k.clone(), normalize_evidence(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Poll `cond` every 20 ms until it holds or `timeout` passes; returns whether it held.
/// Whether `pid` is a session's interpreter (its command line carries the session
/// bootstrap, `sandbox/src/session_bootstrap.py`).
pub fn is_session_sandbox(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let mark = vivarium_sandbox::plan::SESSION_BOOTSTRAP.as_bytes();
        let head = &mark[..mark.len().min(64)];
        c.windows(head.len()).any(|w| w == head)
    })
}

pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A script that prints `ready` and then sleeps for a minute.
pub const SLEEPER: &str = "import time\nprint('ready', flush=True)\ntime.sleep(60)\n";

/// Await the job's events until its stdout contains `needle` (30 s at most); panics if the
/// job ends first.
pub async fn wait_for_stdout(handle: &mut JobHandle<'_>, needle: &str) {
    read_stdout_until(handle, needle, |text| text.contains(needle).then_some(())).await
}

/// The first whole line (without its newline) of the job's stdout that starts with
/// `prefix`, once it has arrived (30 s at most); panics if the job ends first.
pub async fn stdout_line(handle: &mut JobHandle<'_>, prefix: &str) -> String {
    read_stdout_until(handle, prefix, |text| {
        text.split_inclusive('\n')
            .find(|l| l.starts_with(prefix) && l.ends_with('\n'))
            .map(|l| l.trim_end_matches('\n').to_owned())
    })
    .await
}

/// Read the job's events until `found` answers for its stdout so far (30 s at most);
/// panics, naming `what`, if the job ends first.
async fn read_stdout_until<T>(
    handle: &mut JobHandle<'_>,
    what: &str,
    found: impl Fn(&str) -> Option<T>,
) -> T {
    let mut seen = Vec::new();
    let wait = async {
        loop {
            match handle.next_event().await {
                Ok(Some(JobEvent::Output(Stream::Stdout, bytes))) => {
                    seen.extend_from_slice(&bytes);
                    if let Some(v) = found(&String::from_utf8_lossy(&seen)) {
                        return v;
                    }
                }
                Ok(Some(JobEvent::Finished(outcome))) => {
                    panic!("the job ended before printing {what:?}: {outcome:#?}")
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!("the job was over before printing {what:?}"),
                Err(e) => panic!("waiting for {what:?}: {e:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .unwrap_or_else(|_| panic!("no {what:?} on stdout within 30 s"))
}

/// Await the job's `Finished` (at most [`JOB_TIMEOUT`]).
pub async fn finish(handle: &mut JobHandle<'_>) -> Result<proto::Outcome, ClientError> {
    let wait = async {
        loop {
            match handle.next_event().await? {
                Some(JobEvent::Finished(outcome)) => return Ok(*outcome),
                Some(_) => {}
                None => return Err(ClientError::Disconnected),
            }
        }
    };
    tokio::time::timeout(JOB_TIMEOUT, wait)
        .await
        .expect("no outcome within the job timeout")
}

/// Spawn `cmd` with `stdin` written to it and collect its output (stdout, stderr piped).
pub fn run_with_stdin(cmd: &mut Command, stdin: &[u8]) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {cmd:?}: {e}"));
    let mut pipe = child.stdin.take().expect("stdin pipe");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // The job may end without reading its stdin: EPIPE is fine.
        let _ = pipe.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait for child");
    let _ = writer.join();
    out
}

/// A command's output, for assertion messages.
pub fn describe_output(out: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Assert that a job ended with `reason` and `exit`, and that `hit` is among its limits hit.
pub fn assert_ended(
    done: &Collected,
    reason: proto::Reason,
    exit: proto::ExitStatus,
    hit: proto::LimitKind,
) {
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (reason, exit),
        "{}",
        describe(done)
    );
    assert!(
        done.outcome.limits_hit.contains(&hit),
        "limits_hit lacks {hit:?}\n{}",
        describe(done)
    );
}
