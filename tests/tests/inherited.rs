//! What a job inherits from how the daemon was started: nothing. A daemon started as a
//! shell's background job (as `scripts/try.sh` does) has SIGINT and SIGQUIT ignored, and
//! ignored and blocked signals survive execve; before, every job then had them ignored,
//! Python installed no SIGINT handler and `KeyboardInterrupt` never happened.

use vivarium_e2e::proto::Reason;
use vivarium_e2e::{describe, evidence, require_root, Daemon, DaemonOpts, Job};

/// Starts the daemon with SIGINT and SIGQUIT ignored and SIGUSR1 and SIGUSR2 blocked.
const IGNORING_WRAPPER: &str = "import os, signal, sys\n\
signal.signal(signal.SIGINT, signal.SIG_IGN)\n\
signal.signal(signal.SIGQUIT, signal.SIG_IGN)\n\
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGUSR2})\n\
os.execv(sys.argv[1], sys.argv[1:])\n";

/// The job's view: its dispositions and mask from /proc, Python's SIGINT handler, and
/// a child's (subprocess) view of SIGINT.
const PROBE: &str = r#"
import json, signal, subprocess, sys
def status(field, path="/proc/self/status"):
    for line in open(path):
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
child = subprocess.run(
    [sys.executable, "-c", "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"],
    capture_output=True, text=True,
).stdout.strip()
ignored = status("SigIgn")
print(json.dumps({
    "sigint_handler_is_default_int_handler": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "sigint_ignored": bool(ignored & (1 << (signal.SIGINT - 1))),
    "sigquit_ignored": bool(ignored & (1 << (signal.SIGQUIT - 1))),
    "blocked": status("SigBlk"),
    "child_sigint_handler": child,
}))
"#;

async fn check(daemon: &Daemon, profile: &str) {
    let c = daemon.run_job(&Job::new(PROBE).profile(profile)).await;
    assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
    let ev = evidence(&c);
    assert_eq!(
        ev,
        serde_json::json!({
            "sigint_handler_is_default_int_handler": true,
            "sigint_ignored": false,
            "sigquit_ignored": false,
            "blocked": 0,
            "child_sigint_handler": "True",
        }),
        "profile {profile}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_do_not_inherit_the_daemons_ignored_or_blocked_signals() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().exec_prefix(&[
        "/usr/bin/python3",
        "-c",
        IGNORING_WRAPPER,
    ]));
    // The wrapper did its part: the daemon itself still ignores SIGQUIT and blocks
    // SIGUSR1 (SIGINT it handles itself).
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let mask = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap()
    };
    assert_ne!(mask("SigIgn:") & (1 << (libc::SIGQUIT - 1)), 0, "{status}");
    assert_ne!(mask("SigBlk:") & (1 << (libc::SIGUSR1 - 1)), 0, "{status}");
    check(&daemon, "default").await;
    check(&daemon, "zygote").await;
    // A KeyboardInterrupt really happens: the job signals itself.
    let code = "import os, signal\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n    import time; time.sleep(5)\n    print('no interrupt')\nexcept KeyboardInterrupt:\n    print('interrupted')\n";
    let c = daemon.run_job(&Job::new(code)).await;
    assert_eq!(
        String::from_utf8_lossy(&c.stdout),
        "interrupted\n",
        "{}",
        describe(&c)
    );
}

/// Issue 17, point 6: a zygote-forked job's /proc/self/environ is the zygote's exec-time
/// environment, which held the numeric libraries' thread settings and
/// VIVARIUM_ZYGOTE_ENV (the bootstrap removed them from os.environ only). Now the
/// zygote sets those in os.environ itself: a forked job's environment block names
/// exactly what a cold job's does. Checked on a profile without thread hints (none of
/// those variables is the plan's) and on the shipped ones (where they are, and both
/// kinds of job have them alike).
#[tokio::test(flavor = "multi_thread")]
async fn a_zygote_jobs_environment_is_a_cold_jobs() {
    if !require_root() {
        return;
    }
    let plain = vivarium_e2e::default_profile_with(&[("thread_hints", "thread_hints = false")]);
    let plain_zygote = format!("{plain}\n[warm]\nzygote = true\npool = 2\nidle_secs = 600\n");
    let daemon = Daemon::start(
        DaemonOpts::default()
            .warm_pools()
            .profile("plain", &plain)
            .profile("plainzygote", &plain_zygote),
    );
    let code = "import json, os\n\
                block = open('/proc/self/environ', 'rb').read().split(b'\\0')\n\
                names = sorted(e.split(b'=', 1)[0].decode() for e in block if e)\n\
                import sys\n\
                forked = any(a.startswith('_vivarium_zygote') for a in sys.orig_argv)\n\
                print(json.dumps({'block': names, 'environ': sorted(os.environ), 'forked': forked}))\n";
    for (cold, zygote, hints) in [("plain", "plainzygote", false), ("default", "zygote", true)] {
        let mut seen = Vec::new();
        for profile in [cold, zygote] {
            let c = daemon.run_job(&Job::new(code).profile(profile)).await;
            assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
            let mut ev = evidence(&c);
            // The comparison is with a job that really was forked from the zygote.
            assert_eq!(ev["forked"], profile == zygote, "{profile}: {ev}");
            ev.as_object_mut().unwrap().remove("forked");
            let has = |k: &str, name: &str| ev[k].as_array().unwrap().iter().any(|n| n == name);
            for k in ["block", "environ"] {
                assert!(!has(k, "VIVARIUM_ZYGOTE_ENV"), "{profile}: {ev}");
                for name in ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"] {
                    assert_eq!(has(k, name), hints, "{profile}: {name} in {k}: {ev}");
                }
            }
            seen.push(ev);
        }
        assert_eq!(
            seen[0], seen[1],
            "cold and forked environments differ ({cold})"
        );
    }
}

/// Issue 17, point 12 (the hints): thread pools are told the job's CPU quota, where the
/// profile says so (`limits.thread_hints`, on in the shipped profiles): `cpu_cores`
/// rounded up, never over what `[env]` sets itself.
#[tokio::test(flavor = "multi_thread")]
async fn thread_pools_are_told_the_quota() {
    if !require_root() {
        return;
    }
    use vivarium_e2e::default_profile_with;
    let two = default_profile_with(&[("cpu_cores", "cpu_cores = 1.5")]);
    let own = default_profile_with(&[("LANG", "LANG = \"C.UTF-8\"\nOMP_NUM_THREADS = \"3\"")]);
    let off = default_profile_with(&[("thread_hints", "thread_hints = false")]);
    let daemon = Daemon::start(
        DaemonOpts::default()
            .profile("two", &two)
            .profile("own", &own)
            .profile("off", &off),
    );
    let code = "import os\nprint(os.environ.get('OMP_NUM_THREADS'), os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('POLARS_MAX_THREADS'))\n";
    for (profile, want) in [
        ("default", "1 1 1\n"),
        ("zygote", "1 1 1\n"),
        ("two", "2 2 2\n"),
        ("own", "3 1 1\n"),
        ("off", "None None None\n"),
    ] {
        let c = daemon.run_job(&Job::new(code).profile(profile)).await;
        assert_eq!(
            String::from_utf8_lossy(&c.stdout),
            want,
            "{profile}: {}",
            describe(&c)
        );
    }
}
