//! A job discovers its own limits where container-aware libraries look (issue 17, point
//! 12): its own cgroup, read-only at /sys/fs/cgroup, in its cgroup namespace (v2:
//! `memory.max`, `cpu.max`; v1: `memory/memory.limit_in_bytes`, `cpu/cpu.cfs_quota_us`).
//! The view is the job's cgroup and nothing else: no sibling job's cgroup, no host path,
//! no process but the job's own; and nothing in it can be changed.

use std::time::Duration;

use serde_json::Value;
use vivarium_e2e::proto::{CgroupVersion, Reason};
use vivarium_e2e::{describe, evidence, require_root, Daemon, DaemonOpts, Job};

/// Tighter than the profiles' 512 MiB, so the value seen is the job's own.
const MEMORY: u64 = 256 << 20;

const PROBE: &str = r#"
import errno, json, os, sys
base = "/sys/fs/cgroup"
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return "error: " + errno.errorcode[e.errno]
def err(call):
    try:
        call()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out = {"zygote": any(a.startswith("_vivarium_zygote") for a in sys.orig_argv)}
out["entries"] = sorted(os.listdir(base))
v2 = os.path.exists(base + "/cgroup.controllers")
out["v2"] = v2
# The mounts of the view: the cgroup2 root, or one directory per v1 hierarchy (links
# beside them name co-mounted controllers).
roots = [base] if v2 else sorted(
    os.path.join(base, e) for e in out["entries"]
    if not os.path.islink(os.path.join(base, e)))
mem = base if v2 else base + "/memory"
cpu = base if v2 else base + "/cpu"
if v2:
    limit = mem + "/memory.max"
    out["cpu"] = read(cpu + "/cpu.max")
else:
    limit = mem + "/memory.limit_in_bytes"
    out["cpu"] = read(cpu + "/cpu.cfs_quota_us") + " " + read(cpu + "/cpu.cfs_period_us")
out["memory"] = read(limit)
out["mounts"] = {r: os.path.ismount(r) for r in roots}
out["read_only"] = {r: bool(os.statvfs(r).f_flag & os.ST_RDONLY) for r in roots}
out["mkdir"] = err(lambda: os.mkdir(mem + "/escape"))
def write():
    with open(limit, "w") as f:
        f.write("max\n")
out["write"] = err(write)
out["after"] = read(limit)
subdirs = []
for r in roots:
    for dirpath, dirnames, _ in os.walk(r):
        subdirs += [os.path.join(dirpath, d) for d in dirnames]
out["subdirs"] = subdirs
out["procs"] = {r: read(r + "/cgroup.procs").split() for r in roots}
out["pid"] = os.getpid()
out["self_cgroup"] = read("/proc/self/cgroup").splitlines()
# Field 4 of mountinfo: the mounted cgroup as seen from the job's namespace.
out["mount_roots"] = {
    l.split()[4]: l.split()[3] for l in open("/proc/self/mountinfo")
    if l.split()[4].startswith(base)}
print(json.dumps(out))
"#;

async fn view(daemon: &Daemon, profile: &str) -> (Value, Option<CgroupVersion>) {
    let job = Job::new(PROBE).profile(profile).memory_bytes(MEMORY);
    let c = daemon.run_job(&job).await;
    assert_eq!(c.outcome.reason, Reason::Ok, "{profile}: {}", describe(&c));
    (evidence(&c), c.outcome.isolation.cgroup)
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

fn check(profile: &str, ev: &Value, version: Option<CgroupVersion>) {
    let v2 = ev["v2"].as_bool().unwrap();
    assert_eq!(
        version,
        Some(if v2 {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        }),
        "{profile}: {ev}"
    );
    if std::env::var("VIVARIUM_REQUIRE_CGROUP_V1").as_deref() == Ok("1") {
        assert!(!v2, "{profile}: CI declares cgroup v1: {ev}");
    }
    // The job's own limits: its memory (tightened), one core of quota.
    assert_eq!(ev["memory"], MEMORY.to_string(), "{profile}: {ev}");
    assert_eq!(ev["cpu"], "100000 100000", "{profile}: {ev}");
    let entries = strs(&ev["entries"]);
    if !v2 {
        for c in ["memory", "pids", "cpu", "cpuacct"] {
            assert!(entries.contains(&c), "{profile}: no {c}: {entries:?}");
        }
    }
    // Read-only: every mount says so, a new cgroup is refused with EROFS, and the
    // limit cannot be raised (EROFS, or EACCES where permissions are checked first).
    let mounts = ev["mounts"].as_object().unwrap();
    assert!(!mounts.is_empty(), "{profile}: {ev}");
    assert!(mounts.values().all(|m| m == true), "{profile}: {ev}");
    let read_only = ev["read_only"].as_object().unwrap();
    assert!(read_only.values().all(|r| r == true), "{profile}: {ev}");
    assert_eq!(ev["mkdir"], "EROFS", "{profile}: {ev}");
    assert!(
        matches!(ev["write"].as_str(), Some("EROFS" | "EACCES")),
        "{profile}: {ev}"
    );
    assert_eq!(ev["after"], ev["memory"], "{profile}: {ev}");
    // Only its own cgroup: no cgroup beneath it (no sibling job's, no daemon's), every
    // mount rooted at the job's own cgroup, and no process but the job's: its init
    // (pid 1 of the job's pid namespace) and the probe itself.
    assert_eq!(ev["subdirs"], Value::Array(vec![]), "{profile}: {ev}");
    let roots = ev["mount_roots"].as_object().unwrap();
    assert_eq!(roots.len(), mounts.len(), "{profile}: {ev}");
    assert!(roots.values().all(|r| r == "/"), "{profile}: {ev}");
    for line in strs(&ev["self_cgroup"]) {
        // Our hierarchies show the namespace's root; others (not mounted) may not.
        let path = line.splitn(3, ':').nth(2).unwrap();
        let ours = line.starts_with("0::")
            || ["memory", "pids", "cpu", "cpuacct"]
                .iter()
                .any(|c| line.split(':').nth(1).unwrap().split(',').any(|x| x == *c));
        if ours {
            assert_eq!(path, "/", "{profile}: {line}");
        }
        assert!(
            !line.contains("vivarium") && !line.contains("job-"),
            "{profile}: {line}"
        );
    }
    let pid = ev["pid"].to_string();
    for (root, procs) in ev["procs"].as_object().unwrap() {
        let procs = strs(procs);
        assert!(
            procs.contains(&pid.as_str()),
            "{profile}: {root}: {procs:?}"
        );
        assert!(
            procs.iter().all(|p| *p == "1" || *p == pid),
            "{profile}: {root}: {procs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_reads_its_own_limits_from_a_read_only_sys_fs_cgroup() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    // Two at once: each sees only itself, never the other's cgroup.
    let (a, b) = tokio::join!(view(&daemon, "default"), view(&daemon, "default"));
    for (ev, version) in [a, b] {
        check("default", &ev, version);
    }
}

/// A job forked from a zygote mounts its view itself, in the cgroup namespace it makes
/// after joining its cgroup (the zygote's own root has only the empty mount points).
#[tokio::test(flavor = "multi_thread")]
async fn a_zygote_jobs_view_is_its_own_cgroup_not_the_zygotes() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    // The first job starts the zygote; the next ones are forked from it.
    let mut forked = None;
    for _ in 0..20 {
        let (ev, version) = view(&daemon, "zygote").await;
        // A cold start (the zygote not up yet) must show the same.
        check("zygote", &ev, version);
        if ev["zygote"] == true {
            forked = Some(ev);
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(forked.is_some(), "no job was forked from the zygote");
}
