//! Deployment: socket activation and sd_notify (READY=1, STATUS=, STOPPING=1), drain on
//! SIGTERM, reload on SIGHUP, idle exit, per-uid quotas, and the shipped systemd units.
//!
//! PID 1 here is not systemd: activation runs under `systemd-socket-activate --seqpacket`
//! and the notifications go to a datagram socket the test binds.
#![forbid(unsafe_code)]

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use vivarium_e2e::proto::{ErrorCode, ExitStatus, Reason};
use vivarium_e2e::{
    alive, bin, default_profile_with, describe, describe_output, finish, probe, require_root,
    wait_for_stdout, wait_until, workspace_dir, Client, Daemon, DaemonOpts, Job, JobEvent,
    SessionSpec, SLEEPER,
};

const NO_STDIN: Option<&[u8]> = None;

/// A job that prints `ready`, sleeps `secs` and prints `done`.
fn napper(secs: f64) -> Job {
    Job::new(format!(
        "import time\nprint('ready', flush=True)\ntime.sleep({secs})\nprint('done')\n"
    ))
}

/// Whether `tool` is on PATH; if not, a loud skip, or a failure when CI says it runs as
/// root on a full toolset (`VIVARIUM_REQUIRE_ROOT=1`).
fn require_tool(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return true;
    }
    let name = vivarium_e2e::test_name();
    if std::env::var("VIVARIUM_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("{name}: needs {tool} (install the systemd package)");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {name}: {tool} is not installed");
    false
}

/// The test's end of `NOTIFY_SOCKET`: every datagram the daemon sends, kept in order.
struct Notifications {
    sock: UnixDatagram,
    path: PathBuf,
    _dir: tempfile::TempDir,
    seen: Vec<String>,
}

impl Notifications {
    fn bind() -> Notifications {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).expect("bind the notify socket");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        Notifications {
            sock,
            path,
            _dir: dir,
            seen: Vec::new(),
        }
    }

    /// Read until a message contains `needle` (10 s at most); returns that message.
    fn wait_for(&mut self, needle: &str) -> String {
        let end = Instant::now() + Duration::from_secs(10);
        let mut buf = vec![0u8; 4096];
        while Instant::now() < end {
            if let Ok(n) = self.sock.recv(&mut buf) {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                self.seen.push(msg.clone());
                if msg.contains(needle) {
                    return msg;
                }
            }
        }
        panic!(
            "no {needle:?} notification within 10 s; saw {:?}",
            self.seen
        );
    }
}

/// The daemon under `systemd-socket-activate`: it gets the socket as fd 3, says READY=1
/// once it serves, runs a job through the activated socket, keeps STATUS= current and
/// leaves the socket file to its owner (systemd) when it stops.
#[tokio::test(flavor = "multi_thread")]
async fn socket_activated_daemon_notifies_ready_and_runs_a_job() {
    if !require_root() || !require_tool("systemd-socket-activate") {
        return;
    }
    let mut notes = Notifications::bind();
    let mut daemon = Daemon::start(
        DaemonOpts::default()
            .socket_activated()
            .notify_socket(&notes.path),
    );
    let ready = notes.wait_for("READY=1");
    assert!(ready.contains("STATUS=0 jobs running, 0 queued"), "{ready}");
    let log = daemon.log();
    assert!(
        log.contains("listening on the socket passed by the service manager"),
        "{log}"
    );

    let done = daemon.run("print('through the activated socket')").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert_eq!(done.stdout, b"through the activated socket\n");

    let mut client = daemon.client().await;
    let mut job = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut job, "ready").await;
    notes.wait_for("STATUS=1 jobs running, 0 queued");
    job.cancel().await.unwrap();
    finish(&mut job).await.unwrap();
    notes.wait_for("STATUS=0 jobs running, 0 queued");

    daemon.signal(Signal::SIGTERM);
    notes.wait_for("STOPPING=1");
    let status = daemon.terminate().expect("the daemon ignored SIGTERM");
    assert!(status.success(), "{status}\n{}", daemon.log());
    assert!(
        daemon.socket().exists(),
        "the daemon removed a socket it did not bind"
    );
    assert_eq!(daemon.cgroup_subtree_dirs(), Vec::<PathBuf>::new());
}

/// Socket-activated with `idle_exit_secs = 2`: no connection and no job for that long and
/// the daemon exits cleanly (systemd would start it again on the next connection).
#[tokio::test(flavor = "multi_thread")]
async fn socket_activated_daemon_exits_when_idle() {
    if !require_root() || !require_tool("systemd-socket-activate") {
        return;
    }
    let mut notes = Notifications::bind();
    let mut daemon = Daemon::start(
        DaemonOpts::default()
            .socket_activated()
            .notify_socket(&notes.path)
            .config_line("idle_exit_secs = 2"),
    );
    notes.wait_for("READY=1");
    // Busy: a connection with a job keeps it alive past the idle time.
    let started = Instant::now();
    let done = daemon.run_job(&napper(2.5)).await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert!(daemon.exited().is_none(), "exited while busy");
    let exited = wait_until(Duration::from_secs(6), || daemon.exited().is_some());
    assert!(
        exited,
        "still running 6 s after its last job\n{}",
        daemon.log()
    );
    assert!(started.elapsed() >= Duration::from_millis(4500));
    assert!(daemon.exited().unwrap().success(), "{}", daemon.log());
    assert!(daemon.log().contains("idle; exiting"), "{}", daemon.log());
    assert_eq!(daemon.cgroup_subtree_dirs(), Vec::<PathBuf>::new());
}

/// An open session keeps a socket-activated daemon from its idle exit (which would end
/// the session): it exits once the session's own idle TTL has ended it, and then
/// `idle_exit_secs` later.
#[tokio::test(flavor = "multi_thread")]
async fn an_open_session_keeps_a_socket_activated_daemon_up() {
    if !require_root() || !require_tool("systemd-socket-activate") {
        return;
    }
    let mut daemon = Daemon::start(
        DaemonOpts::default()
            .socket_activated()
            .config_line("idle_exit_secs = 1"),
    );
    let opened = Instant::now();
    {
        let mut client = daemon.client().await;
        client
            .open_session(&SessionSpec::new().idle_ttl_ms(3000))
            .await
            .expect("open a session");
    }
    // No connection and no job from here: only the session.
    std::thread::sleep(Duration::from_millis(2000));
    assert!(
        daemon.exited().is_none(),
        "exited with a session open\n{}",
        daemon.log()
    );
    let exited = wait_until(Duration::from_secs(10), || daemon.exited().is_some());
    assert!(
        exited,
        "still running after the session ended\n{}",
        daemon.log()
    );
    assert!(opened.elapsed() >= Duration::from_millis(3000));
    assert!(
        daemon.log().contains("reason=IdleTimeout"),
        "{}",
        daemon.log()
    );
}

/// SIGTERM drains: the listener closes, a queued job is cancelled, a job that ends
/// within `shutdown_grace_ms` finishes normally, one that does not is killed when the
/// grace period ends, and nothing is left: processes, cgroups, state, socket.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_within_the_grace_period_then_kills() {
    if !require_root() {
        return;
    }
    const GRACE: Duration = Duration::from_millis(3000);
    let mut daemon = Daemon::start(
        DaemonOpts::default()
            .slots(2, 4)
            .config_line(&format!("shutdown_grace_ms = {}", GRACE.as_millis())),
    );
    let mut short_client = daemon.client().await;
    let mut long_client = daemon.client().await;
    let mut queued_client = daemon.client().await;
    let mut short = short_client.submit(&napper(1.0), NO_STDIN).await.unwrap();
    let mut long = long_client
        .submit(&Job::new(SLEEPER), NO_STDIN)
        .await
        .unwrap();
    wait_for_stdout(&mut short, "ready").await;
    wait_for_stdout(&mut long, "ready").await;
    let mut queued = queued_client
        .submit(&Job::new("print('never')"), NO_STDIN)
        .await
        .unwrap();
    match queued.next_event().await {
        Ok(Some(JobEvent::Queued { .. })) => {}
        other => panic!("expected Queued, got {other:?}"),
    }
    let job_pids: Vec<i32> = daemon.job_processes().iter().map(|p| p.pid).collect();
    let spawner = daemon.spawner_pid().expect("spawner");

    let asked = Instant::now();
    daemon.signal(Signal::SIGTERM);
    // The queued job never starts.
    let q = finish(&mut queued).await.expect("queued job's outcome");
    assert_eq!(q.reason, Reason::Cancelled, "{q:#?}");
    // No new connection is accepted while draining.
    let mut refused = false;
    for _ in 0..100 {
        let hello = async {
            let mut client = Client::connect(daemon.socket()).await?;
            client.hello().await.map(|_| ())
        };
        if hello.await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the listener still accepts during the drain");
    let (short_out, long_out) = tokio::join!(
        async {
            let o = finish(&mut short).await;
            (o, asked.elapsed())
        },
        async {
            let o = finish(&mut long).await;
            (o, asked.elapsed())
        }
    );
    let (short_out, short_at) = short_out;
    let short_out = short_out.expect("short job's outcome");
    assert_eq!(
        (short_out.reason, short_out.exit),
        (Reason::Ok, ExitStatus::Code(0)),
        "{short_out:#?}"
    );
    assert!(short_at < GRACE, "short job ended at {short_at:?}");
    let (long_out, long_at) = long_out;
    let long_out = long_out.expect("long job's outcome");
    assert_eq!(
        (long_out.reason, long_out.exit),
        (Reason::Cancelled, ExitStatus::Signal(9)),
        "{long_out:#?}"
    );
    assert!(
        long_at >= GRACE - Duration::from_millis(100) && long_at < GRACE + Duration::from_secs(3),
        "long job killed at {long_at:?}, grace {GRACE:?}"
    );
    drop((short, long, queued));

    let status = daemon.terminate().expect("the daemon did not exit");
    assert!(status.success(), "{status}\n{}", daemon.log());
    let gone = |pid: &i32| !alive(*pid);
    assert!(
        wait_until(Duration::from_secs(2), || job_pids.iter().all(gone)
            && gone(&spawner)),
        "job processes {job_pids:?} or spawner {spawner} outlived the daemon"
    );
    assert!(!daemon.socket().exists(), "socket file left behind");
    assert_eq!(daemon.cgroup_subtree_dirs(), Vec::<PathBuf>::new());
    assert!(
        daemon.state_leftovers().is_empty(),
        "{:?}",
        daemon.state_leftovers()
    );
    let log = daemon.log();
    assert!(log.contains("grace period over"), "{log}");
}

/// `viv profiles` names, one per line.
fn profile_names(daemon: &Daemon) -> Vec<String> {
    let out = daemon.viv(&["profiles"], b"");
    assert!(out.status.success(), "{}", describe_output(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn wait_for_profiles(daemon: &Daemon, want: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut names = Vec::new();
    let ok = wait_until(Duration::from_secs(5), || {
        names = profile_names(daemon);
        want(&names)
    });
    assert!(ok, "profiles now: {names:?}\n{}", daemon.log());
    names
}

/// A good SIGHUP: a new profile appears, a removed one is gone for new jobs while the
/// job already running on it finishes with it, and a reloaded quota applies.
#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_profiles_and_config() {
    if !require_root() {
        return;
    }
    let mut notes = Notifications::bind();
    let daemon = Daemon::start(
        DaemonOpts::default()
            .profile("doomed", &default_profile_with(&[]))
            .notify_socket(&notes.path),
    );
    notes.wait_for("READY=1");
    let names = profile_names(&daemon);
    assert!(names.contains(&"doomed".to_owned()), "{names:?}");

    let mut client = daemon.client().await;
    let mut job = client
        .submit(&napper(1.5).profile("doomed"), NO_STDIN)
        .await
        .unwrap();
    wait_for_stdout(&mut job, "ready").await;

    let dir = daemon.profiles_dir().to_owned();
    std::fs::remove_file(dir.join("doomed.toml")).unwrap();
    std::fs::write(dir.join("added.toml"), default_profile_with(&[])).unwrap();
    let mut config = std::fs::read_to_string(daemon.config_path()).unwrap();
    config.push_str("max_jobs_per_uid = 1\n");
    std::fs::write(daemon.config_path(), config).unwrap();
    daemon.signal(Signal::SIGHUP);
    notes.wait_for("RELOADING=1");

    let names = wait_for_profiles(&daemon, |n| {
        n.contains(&"added".to_owned()) && !n.contains(&"doomed".to_owned())
    });
    assert!(names.contains(&"default".to_owned()), "{names:?}");
    // The reloaded quota: this uid already has the running job.
    let refused = daemon.try_run(&Job::new("print(1)"), None).await;
    let err = refused.expect_err("a second job past max_jobs_per_uid = 1");
    assert_eq!(err.refusal_code(), Some(ErrorCode::Busy), "{err:?}");
    assert!(err.to_string().contains("max_jobs_per_uid"), "{err}");
    // The running job kept its (now removed) profile.
    let outcome = finish(&mut job).await.unwrap();
    assert_eq!(outcome.reason, Reason::Ok, "{outcome:#?}");
    assert_eq!(outcome.profile, "doomed");
    drop(job);
    let refused = daemon
        .try_run(&Job::new("print(1)").profile("doomed"), None)
        .await;
    assert_eq!(
        refused.err().and_then(|e| e.refusal_code()),
        Some(ErrorCode::UnknownProfile)
    );
    let done = daemon
        .run_job(&Job::new("print('new')").profile("added"))
        .await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert!(daemon.log().contains("reloaded config and profiles"));
}

/// A bad SIGHUP (a broken profile, then a config with an unknown key) keeps the old
/// profiles and config, logs why naming the error, and says so in STATUS= until a
/// good reload.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_sighup_reload_keeps_the_old_profiles_and_says_why() {
    if !require_root() {
        return;
    }
    let mut notes = Notifications::bind();
    let daemon = Daemon::start(
        DaemonOpts::default()
            .profile("extra", &default_profile_with(&[]))
            .notify_socket(&notes.path),
    );
    notes.wait_for("READY=1");
    let before = profile_names(&daemon);
    let dir = daemon.profiles_dir().to_owned();
    std::fs::write(dir.join("broken.toml"), "[limits\nwall_ms = 1\n").unwrap();
    daemon.signal(Signal::SIGHUP);
    let status = notes.wait_for("last reload failed");
    assert!(status.contains("broken.toml"), "{status}");
    assert!(
        wait_until(Duration::from_secs(5), || daemon
            .log()
            .lines()
            .any(|l| l.contains("reload failed") && l.contains("broken.toml"))),
        "no log line names the broken file\n{}",
        daemon.log()
    );
    assert_eq!(profile_names(&daemon), before);
    let done = daemon.run_job(&Job::new("print(2)").profile("extra")).await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));

    // A config with an unknown key: refused the same way.
    std::fs::remove_file(dir.join("broken.toml")).unwrap();
    let good_config = std::fs::read_to_string(daemon.config_path()).unwrap();
    std::fs::write(
        daemon.config_path(),
        format!("{good_config}max_jobs_per_uidd = 1\n"),
    )
    .unwrap();
    daemon.signal(Signal::SIGHUP);
    let status = notes.wait_for("max_jobs_per_uidd");
    assert!(status.contains("last reload failed"), "{status}");
    assert_eq!(profile_names(&daemon), before);

    // A config valid on its own whose scripts could never fit in the script budget the
    // daemon runs with (`max_code_bytes_total` changes on restart only).
    std::fs::write(
        daemon.config_path(),
        format!("{good_config}max_code_bytes = 536870912\nmax_code_bytes_total = 1073741824\n"),
    )
    .unwrap();
    daemon.signal(Signal::SIGHUP);
    let status = notes.wait_for("max_code_bytes");
    assert!(status.contains("last reload failed"), "{status}");
    assert_eq!(profile_names(&daemon), before);

    // Fixed: the next reload succeeds and STATUS= drops the complaint.
    std::fs::write(daemon.config_path(), good_config).unwrap();
    daemon.signal(Signal::SIGHUP);
    let status = notes.wait_for("READY=1");
    assert!(!status.contains("reload failed"), "{status}");
    assert_eq!(profile_names(&daemon), before);
}

/// The shipped units pass `systemd-analyze verify` with no complaint (with ExecStart
/// pointed at the built binary, which verify requires to exist), and the install script
/// parses.
#[test]
fn shipped_systemd_units_verify() {
    if !require_tool("systemd-analyze") {
        return;
    }
    let daemon = bin("vivariumd");
    let daemon = daemon.to_str().unwrap();
    let mcp = bin("vivarium-mcp");
    let mcp = mcp.to_str().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let units = workspace_dir().join("dist/systemd");
    let system = copy_units(
        &units,
        &tmp.path().join("system"),
        &[
            ("/usr/local/bin/vivariumd", daemon),
            ("/usr/local/bin/vivarium-mcp", mcp),
        ],
    );
    // vivariumd.service, vivariumd.socket and vivarium-mcp-http.service.
    assert_eq!(system.len(), 3, "{system:?}");
    verify(&system, false, tmp.path());
    let user = copy_units(
        &units.join("user"),
        &tmp.path().join("user"),
        &[("%h/.cargo/bin/vivariumd", daemon)],
    );
    assert_eq!(user.len(), 2, "{user:?}");
    verify(&user, true, tmp.path());

    // The example config is valid (with a group that exists here).
    let example = std::fs::read_to_string(workspace_dir().join("dist/vivariumd.toml")).unwrap();
    let example = example.replace("allow_groups = [\"vivarium\"]", "allow_groups = [\"root\"]");
    let config = tmp.path().join("vivariumd.toml");
    std::fs::write(&config, example).unwrap();
    let out = Command::new(bin("vivariumd"))
        .arg("--config")
        .arg(&config)
        .arg("--profiles")
        .arg(workspace_dir().join("profiles"))
        .arg("--check")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe_output(&out));

    let script = workspace_dir().join("dist/install.sh");
    let out = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe_output(&out));
}

/// Copy the `.service` and `.socket` files of `from` into `to`, with each `(exec, by)`
/// of `execs` replaced (each service must name one of the `exec`s).
fn copy_units(from: &Path, to: &Path, execs: &[(&str, &str)]) -> Vec<PathBuf> {
    std::fs::create_dir_all(to).unwrap();
    let mut copies = Vec::new();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        if !(name.ends_with(".service") || name.ends_with(".socket")) {
            continue;
        }
        let mut text = std::fs::read_to_string(&path).unwrap();
        if name.ends_with(".service") {
            assert!(
                execs.iter().any(|(exec, _)| text.contains(exec)),
                "{} should start one of {execs:?}",
                path.display()
            );
        }
        for (exec, by) in execs {
            text = text.replace(exec, by);
        }
        let copy = to.join(&name);
        std::fs::write(&copy, text).unwrap();
        copies.push(copy);
    }
    copies.sort();
    copies
}

/// `systemd-analyze [--user] verify`: it must succeed and print nothing (it reports
/// some problems, e.g. an unknown key, only as a message).
fn verify(units: &[PathBuf], user: bool, scratch: &Path) {
    let mut cmd = Command::new("systemd-analyze");
    if user {
        // A user manager needs a runtime directory even to verify.
        let runtime = scratch.join("xdg-runtime");
        std::fs::create_dir_all(&runtime).unwrap();
        std::fs::set_permissions(
            &runtime,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        cmd.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
    }
    let out = cmd
        .arg("verify")
        .arg("--man=no")
        .args(units)
        .env("SYSTEMD_LOG_LEVEL", "notice")
        .output()
        .expect("run systemd-analyze");
    assert!(
        out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
        "systemd-analyze verify {units:?}:\n{}",
        describe_output(&out)
    );
}

/// Each line of a JSON log with its parsed object; panics, showing the log, on a line
/// that is not one JSON object.
fn json_lines(log: &str) -> impl Iterator<Item = (&str, serde_json::Value)> + '_ {
    log.lines().map(move |line| {
        let v = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n--- log ---\n{log}"));
        (line, v)
    })
}

/// `log_format = "json"`: every line the daemon writes is one JSON object, including the
/// job's span fields.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_per_line() {
    if !require_root() {
        return;
    }
    let mut daemon = Daemon::start(DaemonOpts::default().config_line("log_format = \"json\""));
    let done = daemon.run("print(1)").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let status = daemon.terminate().expect("the daemon did not exit");
    assert!(status.success(), "{status}");
    let log = daemon.log();
    let mut finished = false;
    for (line, v) in json_lines(&log) {
        if v["fields"]["message"] == "job finished" {
            assert_eq!(v["span"]["profile"], "default", "{line}");
            finished = true;
        }
    }
    assert!(finished, "no `job finished` line\n{log}");
}

/// `log_format = "json"` holds for the spawner's own lines too: they travel over the link
/// to the server's subscriber. A daemon binary without the zygote library next to it makes
/// the spawner say so at start (a warning it writes itself, before `Ready`).
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_include_the_spawners_own_lines() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("vivariumd");
    std::fs::copy(bin("vivariumd"), &lone).unwrap();
    let mut opts = DaemonOpts::default().config_line("log_format = \"json\"");
    opts.binary = Some((lone, Vec::new()));
    let mut daemon = Daemon::start(opts);
    let done = daemon.run("print(1)").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let status = daemon.terminate().expect("the daemon did not exit");
    assert!(status.success(), "{status}");
    let log = daemon.log();
    let mut spawner_line = false;
    for (line, v) in json_lines(&log) {
        if v["target"] == "vivariumd::spawner" {
            let message = v["fields"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("not found next to the daemon's binary"),
                "{line}"
            );
            assert_eq!(v["level"], "WARN", "{line}");
            spawner_line = true;
        }
    }
    assert!(spawner_line, "no line from the spawner\n{log}");
}

/// The service's `CapabilityBoundingSet=` is enough: a daemon started under
/// `setpriv --bounding-set` with exactly that set runs jobs with every layer in force and
/// enforces a cgroup limit.
#[tokio::test(flavor = "multi_thread")]
async fn the_units_capability_bounding_set_is_enough() {
    if !require_root() || !require_tool("setpriv") {
        return;
    }
    let set = vivarium_e2e::unit_bounding_set();
    let daemon =
        Daemon::start(DaemonOpts::default().exec_prefix(&["setpriv", "--bounding-set", &set]));
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
        .unwrap();
    assert_eq!(
        bounding.count_ones() as usize,
        set.matches('+').count(),
        "{set}: CapBnd {bounding:x}"
    );

    let done = daemon.run("print('ok')").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let iso = &done.outcome.isolation;
    assert!(iso.no_new_privs && iso.capabilities_dropped, "{iso:#?}");
    assert!(
        iso.landlock.is_some() && iso.seccomp_filters > 0,
        "{iso:#?}"
    );
    let hog = Job::new(probe("memory"))
        .arg("200")
        .memory_bytes(64 << 20)
        .wall_ms(15_000);
    let done = daemon.run_job(&hog).await;
    assert_eq!(done.outcome.reason, Reason::Oom, "{}", describe(&done));
}

/// A second SIGTERM during the drain cuts the grace period short: the running job is
/// killed at once and the daemon exits clean.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_sigterm_ends_the_grace_period() {
    if !require_root() {
        return;
    }
    let mut daemon = Daemon::start(DaemonOpts::default().config_line("shutdown_grace_ms = 60000"));
    let mut client = daemon.client().await;
    let mut job = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut job, "ready").await;
    daemon.signal(Signal::SIGTERM);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(daemon.exited().is_none(), "did not wait for the job");
    let asked = Instant::now();
    daemon.signal(Signal::SIGTERM);
    let outcome = finish(&mut job).await.expect("outcome");
    assert_eq!(outcome.reason, Reason::Cancelled, "{outcome:#?}");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
    drop(job);
    let status = daemon.terminate().expect("the daemon did not exit");
    assert!(status.success(), "{status}\n{}", daemon.log());
    assert_eq!(daemon.cgroup_subtree_dirs(), Vec::<PathBuf>::new());
}

/// A mount beneath a read-only bind source is locked in each job's user namespace, so the
/// non-recursive bind of `/usr` fails with EINVAL. systemd's `ProtectKernelModules=` puts
/// one on `/usr/lib/modules` (the VM tier found every job failing that way; the unit no
/// longer sets it). The daemon refuses the job with an error that names the mount and the
/// cause, and never runs it with less: here a tmpfs on `/usr/local` in the daemon's own
/// (private) mount namespace.
#[tokio::test(flavor = "multi_thread")]
async fn a_mount_beneath_a_bind_source_is_a_clear_sandbox_error() {
    if !require_root() || !require_tool("unshare") {
        return;
    }
    let daemon = in_private_mount_ns("mount -t tmpfs vivarium-test /usr/local");
    let done = daemon.run("print('ran')").await;
    assert_eq!(
        done.outcome.reason,
        Reason::SandboxError,
        "{}",
        describe(&done)
    );
    assert_eq!(
        done.outcome.exit,
        ExitStatus::NotStarted,
        "{}",
        describe(&done)
    );
    assert!(done.stdout.is_empty(), "{}", describe(&done));
    let detail = &done.outcome.detail;
    assert!(
        detail.contains("cannot bind /usr read-only: mounts beneath it (/usr/local)")
            && detail.contains("ProtectKernelModules="),
        "{detail}"
    );
    // The mount stayed in the daemon's namespace.
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host.contains("vivarium-test"), "{host}");
}

/// A daemon in its own private mount namespace, prepared by the shell command `setup`
/// (what systemd's sandboxing options do to a unit's namespace).
fn in_private_mount_ns(setup: &str) -> Daemon {
    let script = format!("{setup} && exec \"$@\"");
    Daemon::start(DaemonOpts::default().exec_prefix(&[
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        &script,
        "sh",
    ]))
}

/// Under `PrivateDevices=yes` plus `ProtectSystem=strict` the unit's `/dev` is read-only.
/// In a job's user namespace that flag is locked, so the device binds must keep it (the VM
/// tier found every job failing with EPERM at `remount-file ./dev/null`). The job runs,
/// and the devices work: a read-only mount does not stop writes to a device node.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_dev_still_gives_jobs_their_devices() {
    if !require_root() || !require_tool("unshare") {
        return;
    }
    let daemon = in_private_mount_ns("mount -o remount,bind,ro /dev");
    let code = "\
import os
with open('/dev/null', 'w') as f:
    f.write('x' * 100)
with open('/dev/zero', 'rb') as f:
    assert f.read(4) == bytes(4)
print('devices ok', len(os.urandom(8)))
";
    let done = daemon.run(code).await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert_eq!(
        String::from_utf8_lossy(&done.stdout).trim(),
        "devices ok 8",
        "{}",
        describe(&done)
    );
    // The remount stayed in the daemon's namespace.
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dev = host.lines().find(|l| l.split(' ').nth(4) == Some("/dev"));
    assert!(
        dev.is_some_and(|l| l.split(' ').nth(5).is_some_and(|o| o.starts_with("rw"))),
        "{dev:?}"
    );
}
