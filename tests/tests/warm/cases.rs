// The warm path's cases, shared by tests/tests/warm.rs (sandboxes built by a cold start)
// and tests/tests/zygote.rs (sandboxes forked from a zygote), which define `ZYGOTE`.
//
// Every test shows first that its jobs really ran warm (the interpreter was started
// with the bootstrap's `-c`, which a cold job never is; a zygote's bootstrap starts
// with `_vivarium_zygote`), then what must hold: the same isolation as a cold job
// (probe evidence compared field by field), a script's semantics (argv, `__main__`,
// stdin, tracebacks, exit codes), no trace of one job in the next, deadlines counted
// from delivery, and an emptied pool leaving nothing behind.

use std::time::Duration;

use serde_json::Value;
use vivarium_e2e::proto::{ExitStatus, Reason, SandboxStart};
use vivarium_e2e::{
    default_profile_with, describe, evidence, normalize_evidence, probe, require_root, wait_until, Collected, Daemon,
    DaemonOpts, Job,
};

/// A profile as `default`, keeping `pool` warm sandboxes, emptied after `idle_secs`.
fn warm_profile(pool: u32, idle_secs: u64) -> String {
    format!(
        "{}\n[warm]\npool = {pool}\nidle_secs = {idle_secs}\nzygote = {ZYGOTE}\n",
        default_profile_with(&[])
    )
}

/// What a job prints first about where it ran: `ZYGOTE` (forked from a zygote, whose
/// `-c` program starts with `_vivarium_zygote`), `WARM` (a warm sandbox started cold:
/// its interpreter's real command line holds the bootstrap's `-c`) or `COLD`.
const WARM_MARK: &str = "import sys; print('ZYGOTE' if any(a.startswith('_vivarium_zygote') for a in sys.orig_argv) else 'COLD' if '/work/main.py' in sys.orig_argv else 'WARM')\n";
/// The mark of a job of the profile under test.
const EXPECTED_MARK: &str = if ZYGOTE { "ZYGOTE" } else { "WARM" };

fn ran_warm(done: &Collected) -> bool {
    String::from_utf8_lossy(&done.stdout).lines().next() == Some(EXPECTED_MARK)
}

/// Interpreters of the daemon's jobs, sandboxes waiting included. A zygote is an
/// interpreter too, but not a sandbox: only interpreters without a child that is an
/// interpreter or a forked job's init count (a forked sandbox's payload, or a
/// cold-started one).
fn pythons(daemon: &Daemon) -> usize {
    let procs = daemon.job_processes();
    let parent = |p: &vivarium_e2e::Proc| p.is_python() || p.is_zygote_init();
    procs
        .iter()
        .filter(|p| p.is_python() && !procs.iter().any(|c| c.ppid == p.pid && parent(c)))
        .count()
}

/// Ask for `profile` once (that job runs cold and creates the pool), then wait until
/// `pool` sandboxes are ready.
async fn fill(daemon: &Daemon, profile: &str, pool: usize) {
    let first = daemon.run_job(&Job::new(WARM_MARK).profile(profile)).await;
    assert_eq!(first.outcome.reason, Reason::Ok, "{}", describe(&first));
    assert!(
        wait_until(Duration::from_secs(20), || pythons(daemon) >= pool),
        "the pool never filled: {:?}",
        daemon.job_processes()
    );
}

/// A daemon keeping warm pools, whose `default` is the shipped default's policy without
/// its fast path: the cold reference the cases compare `hot` with.
fn cold_default() -> DaemonOpts {
    DaemonOpts::default()
        .warm_pools()
        .profile("default", &default_profile_with(&[]))
}

fn start(pool: u32, idle_secs: u64) -> Daemon {
    Daemon::start(cold_default().profile("hot", &warm_profile(pool, idle_secs)))
}

/// The expected differences: the order of the mount table, and a job forked from a
/// zygote has a user namespace nested in the zygote's, whose maps map uid and gid 1000
/// only, to its id slot's ids in the zygote's namespace (`plan::ZYGOTE_JOB_IDS` + slot,
/// above 65535 like a host id; a cold job's namespace maps its root and 1000 to host
/// ids). Those maps are checked here and left out of the comparison.
fn comparable(mut v: Value, forked: bool) -> Value {
    if let (true, Value::Object(o)) = (ZYGOTE, &mut v) {
        // A forked job's fresh mounts replace the zygote's: same mounts, listed in
        // another order (the mount table lists by age). A cold job's table also lists
        // its mount template's procfs, locked under its own (a forked job's replaced
        // the zygote's): the same mount points.
        if let Some(Value::Array(mounts)) = o.get_mut("mounts") {
            mounts.sort_by_key(|m| m.to_string());
            mounts.dedup();
        }
        for key in ["uid_map", "gid_map"] {
            if let (Some(map), true) = (o.remove(key), forked) {
                assert_eq!(map, serde_json::json!([["1000", "HOST-ID", "1"]]), "{key}");
            }
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_job_is_isolated_exactly_like_a_cold_one() {
    if !require_root() {
        return;
    }
    let (_canary_dir, canary) = vivarium_e2e::plant_canary("canary-secret-warm");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind host listener");
    let port = listener.local_addr().unwrap().port().to_string();
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    for (name, args) in vivarium_e2e::isolation_probes(&canary, &port) {
        let cold = daemon
            .run_job(&Job::new(probe(name)).args(args.clone()))
            .await;
        // The probe's own output is JSON; the mark goes to stderr so stdout stays parseable.
        let code = format!("{}{}", WARM_MARK.replace("')\n", "', file=sys.stderr)\n"), probe(name));
        let warm = daemon
            .run_job(&Job::new(code).profile("hot").args(args))
            .await;
        assert_eq!(
            String::from_utf8_lossy(&warm.stderr).lines().next(),
            Some(EXPECTED_MARK),
            "{name}: {}",
            describe(&warm)
        );
        assert_eq!(cold.sandbox, Some(SandboxStart::Cold), "{name}");
        assert!(
            matches!(
                warm.sandbox,
                Some(SandboxStart::Ready { .. } | SandboxStart::Forked { ready: true, .. })
            ),
            "{name}: {:?}",
            warm.sandbox
        );
        assert_eq!(
            cold.outcome.reason,
            warm.outcome.reason,
            "{name}: {}",
            describe(&warm)
        );
        assert_eq!(
            comparable(normalize_evidence(&evidence(&cold)), false),
            comparable(normalize_evidence(&evidence(&warm)), true),
            "{name}: a warm job's evidence differs from a cold one's"
        );
        // A forked job reports what it has: the zygote's filter (the policy plus what a
        // zygote needs) and its own two (which give those extras the policy's verdicts
        // back; the evidence above shows the same answers).
        let mut isolation = warm.outcome.isolation.clone();
        if ZYGOTE {
            let cold_filters = cold.outcome.isolation.seccomp_filters;
            assert_eq!(isolation.seccomp_filters, cold_filters + 2, "{name}");
            isolation.seccomp_filters = cold_filters;
        }
        assert_eq!(cold.outcome.isolation, isolation, "{name}");
        assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_job_runs_like_a_script() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    let code = format!(
        "{WARM_MARK}import sys\nprint(sys.argv, __name__, __file__)\nprint(repr(sys.stdin.read()))\n\
         print(len(open(__file__).read().splitlines()))\nsys.exit(3)\n"
    );
    let done = daemon
        .run_job_stdin(
            &Job::new(code).profile("hot").args(["a b", "ü"]),
            Some(b"in\nput"),
        )
        .await;
    assert!(ran_warm(&done), "{}", describe(&done));
    assert_eq!(
        done.outcome.exit,
        ExitStatus::Code(3),
        "{}",
        describe(&done)
    );
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        format!("{EXPECTED_MARK}\n['/work/main.py', 'a b', 'ü'] __main__ /work/main.py\n'in\\nput'\n6\n")
    );

    // An uncaught exception: the traceback starts in the job's code, exit status 1.
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    let code = format!("{WARM_MARK}def f():\n    1/0\nf()\n");
    let done = daemon.run_job(&Job::new(code).profile("hot")).await;
    assert!(ran_warm(&done), "{}", describe(&done));
    assert_eq!(done.outcome.exit, ExitStatus::Code(1));
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(
        err.starts_with(
            "Traceback (most recent call last):\n  File \"/work/main.py\", line 4, in <module>\n"
        ),
        "{err}"
    );
    assert!(
        err.ends_with("ZeroDivisionError: division by zero\n"),
        "{err}"
    );
    assert!(
        !err.contains("<string>") && !err.contains("vivarium"),
        "{err}"
    );

    // A syntax error is reported as for a script: no traceback header, exit status 1.
    let done = daemon.run_job(&Job::new("x = (\n").profile("hot")).await;
    assert_eq!(done.outcome.exit, ExitStatus::Code(1));
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(
        err.starts_with("  File \"/work/main.py\", line 1\n"),
        "{err}"
    );
    assert!(err.contains("SyntaxError"), "{err}");
}

/// Job A leaves files, an environment variable and a background process behind; the next
/// warm job sees none of them, and no warm sandbox is ever used twice.
#[tokio::test(flavor = "multi_thread")]
async fn nothing_of_one_warm_job_reaches_the_next() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    let a = format!(
        "{WARM_MARK}import os, subprocess\n\
         for d in ('/work', '/tmp', '/dev/shm'):\n    open(d + '/left-by-a', 'w').write('a')\n\
         os.environ['LEFT_BY_A'] = '1'\n\
         subprocess.Popen(['/usr/bin/python3', '-c', 'import time; time.sleep(60)'], start_new_session=True)\n\
         print(os.getpid())\n"
    );
    let done_a = daemon.run_job(&Job::new(a).profile("hot")).await;
    assert!(ran_warm(&done_a), "{}", describe(&done_a));
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    let b = format!(
        "{WARM_MARK}import os, json\n\
         print(json.dumps({{'files': [os.path.exists(d + '/left-by-a') for d in ('/work', '/tmp', '/dev/shm')],\n\
         'env': 'LEFT_BY_A' in os.environ,\n\
         'procs': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}}))\n"
    );
    let done_b = daemon.run_job(&Job::new(b).profile("hot")).await;
    assert!(ran_warm(&done_b), "{}", describe(&done_b));
    assert_ne!(done_a.outcome.job_id, done_b.outcome.job_id);
    let line = String::from_utf8_lossy(&done_b.stdout)
        .lines()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let ev: Value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("{}", describe(&done_b)));
    assert_eq!(
        ev["files"],
        serde_json::json!([false, false, false]),
        "{ev}"
    );
    assert_eq!(ev["env"], false, "{ev}");
    // Only B's own interpreter in its pid namespace (init is hidden by hidepid).
    assert_eq!(ev["procs"].as_array().map(Vec::len), Some(1), "{ev}");
}

/// Wall and CPU limits count from the delivery of the code, not from the sandbox's birth,
/// and are enforced on warm jobs as on cold ones.
#[tokio::test(flavor = "multi_thread")]
async fn deadlines_start_when_the_code_is_delivered() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    // The sandboxes have been waiting for longer than this job's wall limit.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let code = format!("{WARM_MARK}import time\ntime.sleep(0.5)\n");
    let done = daemon
        .run_job(&Job::new(code).profile("hot").wall_ms(1200))
        .await;
    assert!(ran_warm(&done), "{}", describe(&done));
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let u = &done.outcome.usage;
    assert!((500..1200).contains(&u.wall_ms), "{u:?}");
    // The interpreter's start-up is not the job's CPU time.
    assert!(u.cpu_ms < 100, "{u:?}");

    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    let spin = format!("{WARM_MARK}while True:\n    pass\n");
    let done = daemon
        .run_job(&Job::new(spin.clone()).profile("hot").wall_ms(800))
        .await;
    assert!(ran_warm(&done), "{}", describe(&done));
    assert_eq!(done.outcome.reason, Reason::Timeout, "{}", describe(&done));
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    let done = daemon
        .run_job(&Job::new(spin).profile("hot").cpu_ms(300))
        .await;
    assert!(ran_warm(&done), "{}", describe(&done));
    assert_eq!(done.outcome.reason, Reason::CpuLimit, "{}", describe(&done));
}

/// A job that tightens its memory or process limit cannot use a sandbox built with the
/// profile's: without a zygote it runs cold; with one, a sandbox is forked for it with
/// its own limits. Either way its limits hold (an OOM kill at 64 MiB; forks refused at 8
/// tasks).
#[tokio::test(flavor = "multi_thread")]
async fn tighter_memory_or_pids_run_with_their_own_limits() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    let balloon = format!(
        "{WARM_MARK}import sys\nsys.stdout.flush()\nchunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n"
    );
    let done = daemon
        .run_job(&Job::new(balloon).profile("hot").memory_bytes(64 << 20))
        .await;
    assert_eq!(done.outcome.reason, Reason::Oom, "{}", describe(&done));
    assert_eq!(ran_warm(&done), ZYGOTE, "{}", describe(&done));
    let forks = format!(
        "{WARM_MARK}import os, time\nrefused = 0\nfor _ in range(16):\n    try:\n        if os.fork() == 0:\n            time.sleep(2)\n            os._exit(0)\n    except BlockingIOError:\n        refused += 1\nprint('refused', refused > 0)\n"
    );
    let done = daemon.run_job(&Job::new(forks).profile("hot").pids(8)).await;
    assert_eq!(ran_warm(&done), ZYGOTE, "{}", describe(&done));
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("refused True"),
        "{}",
        describe(&done)
    );
}

/// With no demand for `idle_secs`, the pool is emptied: no process, cgroup, mount or fd of
/// any sandbox is left; the next job refills it.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_pool_empties_and_leaves_nothing() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 1);
    let before = daemon.settled_snapshot();
    fill(&daemon, "hot", 2).await;
    daemon.assert_no_leaks(&before);
    // Without a zygote the job runs cold; with one, a zygote is started again for it
    // (nothing of the old one is left: checked above).
    let done = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert_eq!(
        ran_warm(&done),
        ZYGOTE,
        "the pool was emptied: {}",
        describe(&done)
    );
    assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    let done = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&done), "refilled: {}", describe(&done));
    daemon.assert_no_leaks(&before);
}

/// `warm.preload` modules are imported before the job arrives: the job finds them in
/// `sys.modules` before importing anything, which a cold job of the same profile does not.
#[tokio::test(flavor = "multi_thread")]
async fn preloaded_modules_are_imported_before_the_job() {
    if !require_root() {
        return;
    }
    let text = format!(
        "{}\n[warm]\nzygote = {ZYGOTE}\npool = 2\npreload = [\"json\", \"xml.dom.minidom\"]\n",
        default_profile_with(&[])
    );
    let daemon = Daemon::start(cold_default().profile("hot", &text));
    fill(&daemon, "hot", 2).await;
    let code = format!(
        "{WARM_MARK}import sys\nprint(sorted(m for m in ('json', 'xml.dom.minidom') if m in sys.modules))\n"
    );
    let done = daemon.run_job(&Job::new(code.clone()).profile("hot")).await;
    assert!(ran_warm(&done), "{}", describe(&done));
    assert_eq!(
        String::from_utf8_lossy(&done.stdout),
        format!("{EXPECTED_MARK}\n['json', 'xml.dom.minidom']\n")
    );
    let cold = daemon.run_job(&Job::new(code)).await;
    assert_eq!(String::from_utf8_lossy(&cold.stdout), "COLD\n[]\n");
}

/// A preload that cannot be imported ends each warm sandbox before it is ready: the daemon
/// logs the interpreter's error, backs off instead of rebuilding in a loop, and jobs still run (cold).
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_preload_is_reported_and_jobs_run_cold() {
    if !require_root() {
        return;
    }
    let text = format!(
        "{}\n[warm]\nzygote = {ZYGOTE}\npool = 2\npreload = [\"no_such_module_vivarium\"]\n",
        default_profile_with(&[])
    );
    let daemon = Daemon::start(cold_default().profile("hot", &text));
    let done = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert!(
        wait_until(Duration::from_secs(20), || daemon
            .log()
            .contains("No module named 'no_such_module_vivarium'")),
        "{}",
        daemon.log()
    );
    let done = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert!(!ran_warm(&done), "{}", describe(&done));
}

/// A reload that changes a warm profile retires the sandboxes built from the old one: the
/// next warm job runs in a sandbox of the new profile.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_retires_sandboxes_of_the_old_profile() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    let code = format!("{WARM_MARK}import os\nprint(os.environ['LANG'])\n");
    let before = daemon.run_job(&Job::new(code.clone()).profile("hot")).await;
    assert!(ran_warm(&before), "{}", describe(&before));
    assert_eq!(
        String::from_utf8_lossy(&before.stdout),
        format!("{EXPECTED_MARK}\nC.UTF-8\n")
    );

    let text = warm_profile(2, 300).replace("LANG = \"C.UTF-8\"", "LANG = \"C\"");
    assert!(text.contains("LANG = \"C\""));
    std::fs::write(daemon.profiles_dir().join("hot.toml"), text).unwrap();
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || daemon
            .log()
            .contains("reloaded config and profiles")),
        "{}",
        daemon.log()
    );
    // The first job after the reload meets an empty pool for the new profile (cold), then
    // the pool refills from it.
    let mut saw_warm = false;
    for _ in 0..20 {
        let done = daemon.run_job(&Job::new(code.clone()).profile("hot")).await;
        let out = String::from_utf8_lossy(&done.stdout).into_owned();
        assert!(
            out.ends_with("\nC\n"),
            "a job ran under the old profile: {out}"
        );
        if ran_warm(&done) {
            saw_warm = true;
            break;
        }
        assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
    }
    assert!(saw_warm, "no warm job after the reload");
}

/// A warm job ends as a script does: threads are joined, atexit handlers run, streams are
/// flushed, and `sys.exit`'s argument becomes the status (or a message and 1); the
/// output and status of each script below are the same warm and cold.
#[tokio::test(flavor = "multi_thread")]
async fn a_warm_job_ends_like_a_script() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    fill(&daemon, "hot", 2).await;
    let scripts = [
        "import atexit, threading, time\n\
         atexit.register(lambda: print('atexit ran'))\n\
         def late():\n    time.sleep(0.2)\n    print('thread done')\n\
         threading.Thread(target=late).start()\nprint('main done')\n",
        "import sys\nsys.stdout.write('no newline')\n",
        "import sys\nsys.exit('bye')\n",
        "import sys\nsys.exit(300)\n",
        "import sys\nsys.exit(None)\n",
        "import weakref\nclass C: pass\nc = C()\nweakref.finalize(c, print, 'finalized')\n",
        "raise ValueError('x')\n",
    ];
    for script in scripts {
        let code = format!("{WARM_MARK}{script}");
        let cold = daemon.run_job(&Job::new(code.clone())).await;
        assert!(wait_until(Duration::from_secs(20), || pythons(&daemon) >= 2));
        let warm = daemon.run_job(&Job::new(code).profile("hot")).await;
        assert!(ran_warm(&warm), "{}", describe(&warm));
        let rest = |c: &Collected| {
            let out = String::from_utf8_lossy(&c.stdout).into_owned();
            out.split_once('\n')
                .map(|(_, r)| r.to_owned())
                .unwrap_or_default()
        };
        assert_eq!(rest(&warm), rest(&cold), "{script}");
        assert_eq!(warm.stderr, cold.stderr, "{script}: {}", describe(&warm));
        assert_eq!(warm.outcome.exit, cold.outcome.exit, "{script}");
    }
}
