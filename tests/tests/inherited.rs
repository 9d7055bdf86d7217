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
/// exactly what a cold job's does.
#[tokio::test(flavor = "multi_thread")]
async fn a_zygote_jobs_environment_is_a_cold_jobs() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let code = "import json, os\n\
                block = open('/proc/self/environ', 'rb').read().split(b'\\0')\n\
                names = sorted(e.split(b'=', 1)[0].decode() for e in block if e)\n\
                import sys\n\
                forked = any(a.startswith('_vivarium_zygote') for a in sys.orig_argv)\n\
                print(json.dumps({'block': names, 'environ': sorted(os.environ), 'forked': forked}))\n";
    let mut seen = Vec::new();
    for profile in ["default", "zygote"] {
        let c = daemon.run_job(&Job::new(code).profile(profile)).await;
        assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
        let mut ev = evidence(&c);
        // The comparison is with a job that really was forked from the zygote.
        assert_eq!(ev["forked"], profile == "zygote", "{profile}: {ev}");
        ev.as_object_mut().unwrap().remove("forked");
        for name in [
            "OPENBLAS_NUM_THREADS",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "VIVARIUM_ZYGOTE_ENV",
        ] {
            for k in ["block", "environ"] {
                assert!(
                    !ev[k].as_array().unwrap().iter().any(|n| n == name),
                    "{profile}: {name} in {k}: {ev}"
                );
            }
        }
        seen.push(ev);
    }
    assert_eq!(seen[0], seen[1], "cold and forked environments differ");
}
