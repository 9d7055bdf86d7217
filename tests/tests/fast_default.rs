//! The shipped default profile's fast path (#23): its jobs come from sandboxes built
//! ahead of time by a cold start (`[warm]` with `keep`), built before the daemon serves;
//! the pool grows under a burst and shrinks back; a job the pool cannot serve runs cold;
//! a reload retires every ready sandbox; and thousands of fast-path jobs leave nothing.
//! Every job here is shown to come from where it should by the daemon's own account
//! (`Event::Sandbox`), and warm jobs also by their interpreter's command line.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use vivarium_e2e::proto::{Reason, SandboxStart};
use vivarium_e2e::{
    alive, default_profile_with, describe, describe_output, evidence, is_session_sandbox,
    normalize_evidence, probe, require_root, shipped_default_with, wait_until, Collected, Daemon,
    DaemonOpts, Job,
};

/// Printed first by a job: `WARM` if its interpreter was started with the warm
/// bootstrap's `-c` (a sandbox built ahead), `COLD` if it runs its script file.
const MARK: &str =
    "import sys; print('COLD' if '/work/main.py' in sys.orig_argv else 'WARM', file=sys.stderr)\n";

fn mark(c: &Collected) -> Option<String> {
    String::from_utf8_lossy(&c.stderr)
        .lines()
        .next()
        .map(str::to_owned)
}

/// The job ran cold, by the daemon's account and its interpreter's.
fn assert_cold(c: &Collected) {
    assert_eq!(c.sandbox, Some(SandboxStart::Cold), "{}", describe(c));
    assert_eq!(mark(c).as_deref(), Some("COLD"), "{}", describe(c));
}

fn ready(c: &Collected) -> bool {
    matches!(c.sandbox, Some(SandboxStart::Ready { .. }))
}

/// The daemon's live job interpreters (ready sandboxes, and jobs while they run; not the
/// shipped default's ready session sandbox, which its `[session] pool` keeps beside them).
fn pythons(daemon: &Daemon) -> Vec<i32> {
    daemon
        .job_processes()
        .into_iter()
        .filter(|p| p.comm.starts_with("python") && alive(p.pid) && !is_session_sandbox(p.pid))
        .map(|p| p.pid)
        .collect()
}

/// The shipped default's floor (`warm.pool`).
const FLOOR: usize = 2;

/// A daemon as shipped (warm pools kept), with the shipped default profile (its
/// `shrink_secs` replaced when given), and `coldcopy`: the same policy without the fast
/// path.
fn start(shrink_secs: Option<u64>) -> Daemon {
    let mut opts = DaemonOpts::default()
        .warm_pools()
        .profile("coldcopy", &default_profile_with(&[]));
    if let Some(secs) = shrink_secs {
        let line = format!("shrink_secs = {secs}");
        opts = opts.profile("default", &shipped_default_with(&[("shrink_secs", &line)]));
    }
    Daemon::start(opts)
}

/// From its first job on, the shipped default serves from ready sandboxes (the daemon
/// built them before it listened), and a job from one is isolated exactly like a cold
/// job of the same policy: the isolation probes' evidence compared field by field, and
/// the outcome's isolation report.
#[tokio::test(flavor = "multi_thread")]
async fn the_default_profile_serves_from_ready_sandboxes_isolated_like_cold_jobs() {
    if !require_root() {
        return;
    }
    let (_canary_dir, canary) = vivarium_e2e::plant_canary("canary-secret-fast-default");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind host listener");
    let port = listener.local_addr().unwrap().port().to_string();
    let daemon = start(None);
    assert!(
        daemon.log().contains("warm pools ready"),
        "{}",
        daemon.log()
    );
    // `viv run` with no profile, as the README's first command runs it.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hello.py");
    std::fs::write(&script, format!("{MARK}print('hi')\n")).unwrap();
    let out = daemon.viv(&["run", "-v", script.to_str().unwrap()], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", describe_output(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert!(stderr.lines().any(|l| l == "WARM"), "{stderr}");
    assert!(
        stderr.contains("viv: sandbox: ready, built ahead by a cold start"),
        "{stderr}"
    );
    let first = daemon.run(&format!("{MARK}print('hi')\n")).await;
    assert!(ready(&first), "{:?}\n{}", first.sandbox, describe(&first));
    assert_eq!(
        mark(&first).as_deref(),
        Some("WARM"),
        "{}",
        describe(&first)
    );
    for (name, args) in vivarium_e2e::isolation_probes(&canary, &port) {
        let cold = daemon
            .run_job(&Job::new(probe(name)).profile("coldcopy").args(args.clone()))
            .await;
        assert_eq!(cold.sandbox, Some(SandboxStart::Cold), "{name}");
        assert!(
            wait_until(Duration::from_secs(20), || pythons(&daemon).len() >= FLOOR),
            "{name}: the pool did not refill"
        );
        let fast = daemon
            .run_job(&Job::new(format!("{MARK}{}", probe(name))).args(args))
            .await;
        assert!(ready(&fast), "{name}: {:?}", fast.sandbox);
        assert_eq!(mark(&fast).as_deref(), Some("WARM"), "{name}");
        assert_eq!(
            cold.outcome.reason,
            fast.outcome.reason,
            "{name}: {}",
            describe(&fast)
        );
        assert_eq!(
            normalize_evidence(&evidence(&cold)),
            normalize_evidence(&evidence(&fast)),
            "{name}: the fast path's evidence differs from the cold path's"
        );
        assert_eq!(cold.outcome.isolation, fast.outcome.isolation, "{name}");
    }
}

/// A burst of 50 jobs at once (8 run, the rest queue): every one succeeds, the pool grows
/// past its floor afterwards (jobs found it empty), then steps back down to the floor
/// and stays there.
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_50_jobs_succeeds_and_the_pool_returns_to_its_idle_size() {
    if !require_root() {
        return;
    }
    let daemon = Arc::new(start(Some(2)));
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon)
        .len()
        == FLOOR));
    let mut jobs = tokio::task::JoinSet::new();
    for i in 0..50u32 {
        let daemon = daemon.clone();
        jobs.spawn(async move {
            let job = Job::new(format!("{MARK}print({i} * 2)\n"));
            (i, daemon.run_job(&job).await)
        });
    }
    let mut from_pool = 0;
    while let Some(joined) = jobs.join_next().await {
        let (i, done) = joined.expect("job task");
        assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
        assert_eq!(
            String::from_utf8_lossy(&done.stdout),
            format!("{}\n", i * 2)
        );
        let warm = mark(&done).as_deref() == Some("WARM");
        assert_eq!(
            warm,
            ready(&done),
            "{:?}\n{}",
            done.sandbox,
            describe(&done)
        );
        from_pool += usize::from(warm);
    }
    assert!(
        from_pool >= FLOOR,
        "only {from_pool} of 50 jobs came from the pool"
    );
    // Grown (up to warm.pool_max), then back to the floor, one step per shrink_secs.
    let mut most = 0;
    let grown = wait_until(Duration::from_secs(30), || {
        most = most.max(pythons(&daemon).len());
        most > FLOOR
    });
    assert!(grown, "the pool never grew past {FLOOR} after the burst");
    let shrunk = wait_until(Duration::from_secs(60), || pythons(&daemon).len() == FLOOR);
    assert!(
        shrunk,
        "the pool did not shrink back: {:?}",
        daemon.job_processes()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        pythons(&daemon).len(),
        FLOOR,
        "{:?}",
        daemon.job_processes()
    );
    let after = daemon.run(&format!("{MARK}pass\n")).await;
    assert!(ready(&after), "{:?}", after.sandbox);
}

/// The pool's sandboxes were built with the profile's memory and process limits: a job
/// that tightens either runs cold (and its limit holds); one that tightens only its wall
/// or CPU time (applied when the job is delivered) still takes a ready sandbox.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_with_tighter_memory_or_pids_runs_cold() {
    if !require_root() {
        return;
    }
    let daemon = start(None);
    let balloon = format!(
        "{MARK}import sys\nsys.stderr.flush()\nchunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"
    );
    let done = daemon
        .run_job(&Job::new(balloon).memory_bytes(64 << 20))
        .await;
    assert_cold(&done);
    assert_eq!(done.outcome.reason, Reason::Oom, "{}", describe(&done));
    let done = daemon
        .run_job(&Job::new(format!("{MARK}pass\n")).pids(8))
        .await;
    assert_cold(&done);
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon)
        .len()
        >= FLOOR));
    let done = daemon
        .run_job(&Job::new(format!("{MARK}pass\n")).wall_ms(5_000))
        .await;
    assert!(ready(&done), "{:?}\n{}", done.sandbox, describe(&done));
    assert_eq!(mark(&done).as_deref(), Some("WARM"));
}

/// A reload (SIGHUP) makes every profile a new activation: every sandbox built for the
/// old one is retired (its interpreter gone), the floor is built again from the new
/// profile, and the next job takes one of the new ones and runs under the new profile.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_retires_every_ready_sandbox() {
    if !require_root() {
        return;
    }
    let daemon = start(None);
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon)
        .len()
        == FLOOR));
    let old = pythons(&daemon);
    let text = shipped_default_with(&[("LANG", "LANG = \"C\"")]);
    std::fs::write(daemon.profiles_dir().join("default.toml"), text).unwrap();
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .contains("reloaded config and profiles")),
        "{}",
        daemon.log()
    );
    let renewed = wait_until(Duration::from_secs(20), || {
        let now = pythons(&daemon);
        old.iter().all(|pid| !alive(*pid)) && now.len() == FLOOR
    });
    assert!(renewed, "old {old:?}, now {:?}", daemon.job_processes());
    let done = daemon
        .run(&format!("{MARK}import os\nprint(os.environ['LANG'])\n"))
        .await;
    assert!(ready(&done), "{:?}", done.sandbox);
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        "C\n",
        "{}",
        describe(&done)
    );
}

/// 2,000 jobs from ready sandboxes, then the pool retired (a reload to
/// `max_ready_sandboxes = 0`): no process, cgroup, mount, state file or fd of any of
/// them is left, against a snapshot taken before the pool existed.
#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_fast_path_jobs_leave_nothing_behind() {
    if !require_root() {
        return;
    }
    // Started with no pool (the harness's max_ready_sandboxes = 0), for the snapshot.
    let daemon = Daemon::start(DaemonOpts::default());
    let before = daemon.settled_snapshot();
    let config = std::fs::read_to_string(daemon.config_path()).unwrap();
    let set = |n: usize| {
        let text = config.replace(
            "max_ready_sandboxes = 0\n",
            &format!("max_ready_sandboxes = {n}\n"),
        );
        assert_ne!(n == 0, text.contains("max_ready_sandboxes = 16"));
        std::fs::write(daemon.config_path(), text).unwrap();
        let reloads = daemon.log().matches("reloaded config and profiles").count();
        daemon.signal(nix::sys::signal::Signal::SIGHUP);
        assert!(wait_until(Duration::from_secs(10), || daemon
            .log()
            .matches("reloaded config and profiles")
            .count()
            > reloads));
    };
    set(16);
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon)
        .len()
        >= FLOOR));
    let (mut fast, mut cold) = (0, 0);
    while fast < 2000 {
        let done = daemon.run("pass\n").await;
        assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
        if ready(&done) {
            fast += 1;
        } else {
            cold += 1;
            // A sequential client finds a sandbox ready or being built for it.
            assert!(cold <= 20, "{cold} jobs ran cold beside {fast} fast ones");
        }
    }
    set(0);
    daemon.assert_no_leaks(&before);
}

/// A ready sandbox of the shipped default runs the warm bootstrap compiled ahead by the
/// daemon (the small loader as its `-c` program, the code object on its stdin:
/// daemon/src/server/warm_code.rs), and its job behaves as a script run directly: a
/// traceback that names `/work/main.py` and the line, exit status 1, the output before
/// it kept.
#[tokio::test(flavor = "multi_thread")]
async fn ready_sandboxes_run_the_bootstrap_compiled_ahead() {
    if !require_root() {
        return;
    }
    let daemon = start(None);
    let code = "import sys\n\
        print(any(a.startswith(\"# Vivarium's warm sandbox, from its bootstrap compiled ahead\") for a in sys.orig_argv))\n\
        print(__name__, __file__, sys.argv)\n\
        raise ValueError('boom')\n";
    let done = daemon.run(code).await;
    assert!(ready(&done), "{:?}\n{}", done.sandbox, describe(&done));
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        "True\n__main__ /work/main.py ['/work/main.py']\n",
        "{}",
        describe(&done)
    );
    assert_eq!(done.outcome.reason, Reason::Error, "{}", describe(&done));
    assert_eq!(
        done.outcome.exit,
        vivarium_e2e::proto::ExitStatus::Code(1),
        "{}",
        describe(&done)
    );
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(
        stderr.contains("File \"/work/main.py\", line 4, in <module>")
            && stderr.ends_with("ValueError: boom\n")
            && !stderr.contains("<string>"),
        "{stderr}"
    );
}
