//! Per-user kernel budgets that every job's user namespace charges up the chain to its
//! creator, the host's uid 0 (issue 17, point 2): before, one job queued 96,361 pending
//! signals and every root process on the host got EAGAIN from `tgkill(SIGRTMIN)` and
//! `timer_create` while it held them. Each job now has its own share of each budget; the
//! probe fills every one of them from inside and reports where the kernel stopped it.

use vivarium_e2e::proto::Reason;
use vivarium_e2e::{describe, evidence, require_root, Daemon, DaemonOpts, Job};

const PROBE: &str = r#"
import ctypes, errno, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
out = {}

def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

# Pending real-time signals: block one, queue it with tgkill (kill() never fails with
# EAGAIN, it drops the excess) until the kernel refuses.
import threading
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
queued = 0
try:
    while queued < 200_000:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
        queued += 1
    out["sigpending"] = {"queued": queued, "stopped": None}
except OSError as e:
    out["sigpending"] = {"queued": queued, "stopped": errno.errorcode[e.errno]}
for line in open("/proc/self/status"):
    if line.startswith("SigQ:"):
        out["sigpending"]["SigQ"] = line.split()[1]

# inotify instances, until the kernel refuses (seccomp refuses inotify_init1 today:
# the job's user namespace limit stands behind it).
fds = []
while len(fds) < 1000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        out["inotify"] = {"instances": len(fds), "stopped": err()}
        break
    fds.append(fd)
else:
    out["inotify"] = {"instances": len(fds), "stopped": None}
for fd in fds:
    os.close(fd)

# Locked memory: 2 MiB, more than the job's share.
buf = ctypes.create_string_buffer(2 << 20)
r = libc.mlock(buf, len(buf))
out["mlock_2m"] = "locked" if r == 0 else err()

# The job's own user-namespace limits and rlimits, as the kernel shows them.
out["userns"] = {n: int(open("/proc/sys/user/" + n).read()) for n in ("max_inotify_instances", "max_inotify_watches", "max_user_namespaces", "max_mnt_namespaces")}
limits = {}
for line in open("/proc/self/limits"):
    for name in ("Max pending signals", "Max msgqueue size", "Max locked memory"):
        if line.startswith(name):
            limits[name] = int(line[len(name):].split()[0])
out["limits"] = limits
print(json.dumps(out))
"#;

async fn check(daemon: &Daemon, profile: &str) {
    let c = daemon.run_job(&Job::new(PROBE).profile(profile)).await;
    assert_eq!(c.outcome.reason, Reason::Ok, "{}", describe(&c));
    let ev = evidence(&c);
    // The queue stops at the job's share (1024), well short of the host's ~96,000.
    let sig = &ev["sigpending"];
    assert_eq!(sig["stopped"], "EAGAIN", "{profile}: {ev}");
    let queued = sig["queued"].as_u64().unwrap();
    assert!(queued <= 1024, "{profile}: {ev}");
    assert!(
        sig["SigQ"].as_str().is_some_and(|q| q.ends_with("/1024")),
        "{profile}: {ev}"
    );
    // inotify and mlock: refused by seccomp (ENOSYS), or by the job's limits.
    let inotify = &ev["inotify"];
    assert!(
        matches!(
            inotify["stopped"].as_str(),
            Some("EMFILE" | "ENOSPC" | "ENOSYS")
        ),
        "{profile}: {ev}"
    );
    assert!(
        inotify["instances"].as_u64().unwrap() <= 8,
        "{profile}: {ev}"
    );
    assert!(
        matches!(ev["mlock_2m"].as_str(), Some("ENOMEM" | "EPERM" | "ENOSYS")),
        "{profile}: {ev}"
    );
    assert_eq!(ev["userns"]["max_inotify_instances"], 8, "{profile}: {ev}");
    assert_eq!(ev["userns"]["max_inotify_watches"], 8192, "{profile}: {ev}");
    assert_eq!(ev["userns"]["max_user_namespaces"], 0, "{profile}: {ev}");
    assert_eq!(ev["userns"]["max_mnt_namespaces"], 0, "{profile}: {ev}");
    assert_eq!(
        ev["limits"],
        serde_json::json!({
            "Max pending signals": 1024,
            "Max msgqueue size": 65536,
            "Max locked memory": 1048576,
        }),
        "{profile}: {ev}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_holds_only_its_own_share_of_the_per_user_budgets() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    check(&daemon, "default").await;
    check(&daemon, "zygote").await;
}
