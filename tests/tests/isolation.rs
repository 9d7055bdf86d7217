//! What a job can see and do, asserted from inside the sandbox with probe scripts.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::time::Duration;

use serde_json::{json, Value};
use vivarium_e2e::proto::{CgroupVersion, LandlockStatus, Reason};
use vivarium_e2e::{
    default_profile_with, describe, evidence, host_cgroup_version, host_cgroup_view, probe,
    require_root, wait_until, Daemon, DaemonOpts, Job,
};

/// Run a probe under the default profile, insisting that it exited 0.
async fn run_probe(daemon: &Daemon, name: &str, args: &[&str]) -> Value {
    let done = daemon
        .run_job(&Job::new(probe(name)).args(args.iter().copied()))
        .await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    evidence(&done)
}

#[tokio::test(flavor = "multi_thread")]
async fn payload_is_unprivileged_and_confined() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "identity", &[]).await;
    let zero = "0000000000000000";
    assert_eq!(
        (
            &ev["uid"],
            &ev["euid"],
            &ev["gid"],
            &ev["egid"],
            &ev["groups"]
        ),
        (
            &json!(1000),
            &json!(1000),
            &json!(1000),
            &json!(1000),
            &json!([])
        ),
        "{ev:#}"
    );
    assert_eq!(
        ev["status"],
        json!({
            "CapInh": zero, "CapPrm": zero, "CapEff": zero, "CapBnd": zero, "CapAmb": zero,
            "NoNewPrivs": "1", "Seccomp": "2",
        }),
        "{ev:#}"
    );
    assert_eq!(ev["hostname"], "vivarium");
    assert_eq!(ev["nodename"], "vivarium");
    assert_eq!(ev["cwd"], "/work");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_namespace_is_new_and_host_root_is_unmapped() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "identity", &[]).await;
    for ns in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        let host = std::fs::read_link(format!("/proc/self/ns/{ns}")).expect("host ns link");
        let job = ev["ns"][ns].as_str().expect("ns link in evidence");
        assert!(job.starts_with(&format!("{ns}:[")), "{ns}: {job}");
        assert_ne!(
            job,
            host.to_str().unwrap(),
            "the job shares the host's {ns} namespace"
        );
    }
    // The cgroup namespace is rooted at the job's own cgroup: every hierarchy shows `/`
    // (on v1, init joins its cgroup after the clone and only then makes the namespace).
    let cgroups = ev["cgroup"].as_array().expect("cgroup lines");
    assert!(!cgroups.is_empty());
    for line in cgroups {
        assert_eq!(
            line[2], "/",
            "the job sees a cgroup path outside its own: {cgroups:?}"
        );
    }
    // `inside outside count` lines: uid 1000 is mapped, and no inside id is host root.
    for map in ["uid_map", "gid_map"] {
        let lines = ev[map].as_array().expect("map lines");
        assert!(
            lines.iter().any(|l| l[0] == "1000" && l[2] == "1"),
            "{map}: {lines:?}"
        );
        for l in lines {
            assert_ne!(l[1], "0", "{map} maps host id 0: {lines:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn environment_is_built_from_nothing_and_only_stdio_is_open() {
    if !require_root() {
        return;
    }
    let canary = ("VIVARIUM_TEST_CANARY", "secret123");
    let daemon = Daemon::start(DaemonOpts::default().env(canary.0, canary.1));
    let ev = run_probe(&daemon, "environment", &[]).await;
    let env = ev["env"].as_object().expect("env object");
    assert!(
        !env.contains_key(canary.0),
        "daemon variable leaked: {env:?}"
    );
    for (k, v) in env {
        assert!(
            !v.as_str().unwrap_or("").contains(canary.1),
            "{k} carries the daemon's secret"
        );
    }
    assert_eq!(env.get("HOME"), Some(&json!("/work")));
    assert_eq!(env.get("TMPDIR"), Some(&json!("/tmp")));
    assert_eq!(
        env.get("PATH"),
        Some(&json!("/usr/local/bin:/usr/bin:/bin"))
    );
    // Nothing of the daemon's (or cargo's) environment: only the plan's and the profile's.
    let known: BTreeSet<&str> = [
        "PATH",
        "HOME",
        "TMPDIR",
        "USER",
        "LANG",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
        // limits.thread_hints (plan::THREAD_HINTS)
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "POLARS_MAX_THREADS",
        // matplotlib's defaults (plan::environment)
        "MPLBACKEND",
        "MATPLOTLIBRC",
        "MPLCONFIGDIR",
    ]
    .into();
    let unknown: Vec<&String> = env.keys().filter(|k| !known.contains(k.as_str())).collect();
    assert!(unknown.is_empty(), "inherited variables: {unknown:?}");
    assert_eq!(
        ev["fds"],
        json!([0, 1, 2]),
        "only stdio may be open: {}",
        ev["fd_targets"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn host_secrets_are_out_of_reach() {
    if !require_root() {
        return;
    }
    let (_canary_dir, canary) = vivarium_e2e::plant_canary("canary-secret-7f3a");
    let canary_path = canary.to_str().unwrap();
    let daemon = Daemon::start(DaemonOpts::default().env("VIVARIUM_TEST_CANARY", "secret123"));
    let ev = run_probe(&daemon, "secrets", &[canary_path]).await;
    let enoent_or_eacces = |v: &Value| matches!(v["errno"].as_str(), Some("ENOENT" | "EACCES"));
    for key in ["shadow", "root_dir", "canary", "canary_dir"] {
        assert!(enoent_or_eacces(&ev[key]), "{key}: {}\n{ev:#}", ev[key]);
    }
    // The job's init is a copy of the daemon's spawner: its environment holds the daemon's.
    // /proc is mounted hidepid=invisible, so init (uid 0 inside) is not even visible.
    for key in ["init_environ", "init_mem"] {
        assert!(
            matches!(
                ev[key]["errno"].as_str(),
                Some("ENOENT" | "EACCES" | "EPERM")
            ),
            "{key}: {}",
            ev[key]
        );
    }
    assert!(!ev.to_string().contains("canary-secret-7f3a"));
    assert!(!ev.to_string().contains("secret123"));
    assert_eq!(
        ev["dev"],
        json!([
            "fd", "full", "null", "random", "shm", "stderr", "stdin", "stdout", "urandom", "zero"
        ])
    );
    let etc: BTreeSet<String> = serde_json::from_value(ev["etc"].clone()).unwrap();
    for must_not in ["shadow", "gshadow", "sudoers", "ssh", "machine-id"] {
        assert!(
            !etc.contains(must_not),
            "/etc/{must_not} is visible: {etc:?}"
        );
    }
    let top: BTreeSet<String> = serde_json::from_value(ev["top"].clone()).unwrap();
    for must_not in ["root", "home", "var", "srv", "boot", "mnt", "run"] {
        assert!(!top.contains(must_not), "/{must_not} is visible: {top:?}");
    }
    // Of /sys, only the job's own cgroup (tests/tests/cgroup_view.rs).
    assert_eq!(ev["sys"], json!({"ok": ["fs"]}), "{}", ev["sys"]);
    assert_eq!(ev["sys_fs"], json!({"ok": ["cgroup"]}), "{}", ev["sys_fs"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn system_paths_are_read_only_and_scratch_space_is_writable() {
    if !require_root() {
        return;
    }
    let os_py = "/usr/lib/python3.11/os.py";
    let before = std::fs::read(os_py).expect("host os.py");
    let passwd_before = std::fs::read("/etc/passwd").expect("host passwd");
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "fs_writes", &[]).await;
    assert_eq!(
        std::fs::read(os_py).unwrap(),
        before,
        "the host's os.py changed"
    );
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd_before);
    for (path, result) in ev["blocked"].as_object().unwrap() {
        assert!(
            matches!(result["errno"].as_str(), Some("EROFS" | "EACCES" | "EPERM")),
            "writing {path} was not refused: {result}"
        );
    }
    for (path, result) in ev["allowed"].as_object().unwrap() {
        assert_eq!(result, &json!({"ok": true}), "{path}");
    }
    assert_eq!(
        ev["exec"],
        json!({
            "/work": {"errno": "EACCES"},
            "/tmp": {"errno": "EACCES"},
            "/dev/shm": {"errno": "EACCES"},
        })
    );
    assert_eq!(
        ev["devices"],
        json!({
            "null_write": {"ok": 100},
            "null_read": {"ok": ""},
            "zero_read": {"ok": "0000000000000000"},
            "urandom_len": {"ok": 16},
            "full_write": {"errno": "ENOSPC"},
        })
    );
}

/// /proc/self/comm belongs to the payload and is writable by unix permissions: only the
/// Landlock ruleset (write access beneath /work, /tmp and /dev/shm only) refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn landlock_refuses_writes_unix_permissions_allow() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "fs_writes", &[]).await;
    assert_eq!(
        ev["landlock"],
        json!({"/proc/self/comm": {"errno": "EACCES"}})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn host_loopback_is_unreachable() {
    if !require_root() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind host listener");
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "network", &[&port]).await;
    // The job's 127.0.0.1 is its own loopback's, where nobody listens.
    let errno = ev["tcp_connect"]["errno"].as_str();
    assert!(
        matches!(errno, Some("ECONNREFUSED")),
        "connect to the host's 127.0.0.1:{port}: {}",
        ev["tcp_connect"]
    );
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the host listener saw a connection: {other:?}"),
    }
    assert_eq!(ev["unix_socketpair"], json!({"ok": "ping"}));
    // A fresh network namespace has loopback only (if netlink is allowed to say so).
    let interfaces = &ev["interfaces"];
    assert!(
        interfaces["ok"] == json!(["lo"])
            || matches!(
                interfaces["errno"].as_str(),
                Some("EPERM" | "EAFNOSUPPORT" | "ENOSYS")
            ),
        "{interfaces}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn host_processes_are_invisible() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "procs", &[]).await;
    let procs = ev["procs"].as_object().expect("procs");
    let pids: Vec<u32> = procs.keys().map(|p| p.parse().unwrap()).collect();
    assert!(pids.iter().all(|p| *p < 10), "pids: {pids:?}");
    assert!(!pids.contains(&std::process::id()));
    assert_eq!(
        ev["self"],
        json!(2),
        "the payload is the second process of its pid ns"
    );
    assert_eq!(ev["ppid"], json!(1));
    // Only the script itself: the job's init (pid 1, uid 0 inside) is hidden by the
    // hidepid=invisible procfs, the host's processes by the pid namespace.
    let pids: Vec<&str> = procs.keys().map(String::as_str).collect();
    assert_eq!(pids, ["2"], "{procs:?}");
    assert_eq!(procs["2"], "python3");
}

#[tokio::test(flavor = "multi_thread")]
async fn mount_table_holds_only_the_plan() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "procs", &[]).await;
    let mounts: Vec<String> = serde_json::from_value(ev["mounts"].clone()).unwrap();
    let mut want = vec!["/", "/usr"];
    // The profile's optional binds appear when the host has them (and they are not symlinks).
    for optional in [
        "/etc/ld.so.cache",
        "/etc/localtime",
        "/etc/ssl",
        "/etc/python3.11",
        "/etc/fonts",
    ] {
        if std::fs::symlink_metadata(optional).is_ok_and(|m| !m.file_type().is_symlink()) {
            want.push(optional);
        }
    }
    // The root comes from the plan's mount template (see "Mount templates" in
    // docs/ARCHITECTURE.md): its shared part first, with the template's procfs; then the
    // job's own mounts, its procfs on top of the template's.
    want.extend([
        "/proc",
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/work",
        "/tmp",
        "/proc",
        "/proc/sys/kernel/random/boot_id",
    ]);
    // The masks of host-global /proc files (docs/SECURITY.md), where the host has them.
    for masked in vivarium_e2e::MASKED_PROC_FILES.iter().copied() {
        if std::path::Path::new(masked).exists() {
            want.push(masked);
        }
    }
    want.push("/dev/shm");
    // Last, once the job's cgroup namespace exists: its own cgroup, read-only.
    let view = host_cgroup_view();
    want.extend(view.iter().map(String::as_str));
    assert_eq!(mounts, want);
    // Every mount is nosuid; the writable ones are also noexec; the rest is read-only.
    let options = ev["options"].as_object().unwrap();
    for (mount, opts) in options {
        let opts: Vec<&str> = opts
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(opts.contains(&"nosuid"), "{mount}: {opts:?}");
        if view.contains(mount) {
            for flag in ["ro", "nodev", "noexec"] {
                assert!(opts.contains(&flag), "{mount}: {opts:?}");
            }
        }
        let writable = ["/work", "/tmp", "/dev/shm", "/proc"].contains(&mount.as_str())
            || mount.starts_with("/dev/");
        if writable {
            assert!(opts.contains(&"noexec"), "{mount}: {opts:?}");
        } else {
            assert!(opts.contains(&"ro"), "{mount} is writable: {opts:?}");
        }
    }
}

/// A cold job's root is a copy of its plan's mount template: owned by the host's root
/// (the overflow uid inside), read-only, shared by jobs that see nothing of each other;
/// a replaced host file gets a new template, so the next job sees the new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_cold_jobs_root_comes_from_a_template_that_follows_the_host() {
    if !require_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("vivarium-template-")
        .tempdir_in("/var/tmp") // (/tmp and /work are the sandbox's own)
        .unwrap();
    let data = dir.path().join("data");
    std::fs::write(&data, "first").unwrap();
    let profile = default_profile_with(&[(
        "ro_binds_optional",
        &format!("ro_binds_optional = [\"/etc/ld.so.cache\", {data:?}]"),
    )]);
    let daemon = Daemon::start(DaemonOpts::default().profile("default", &profile));
    let code = format!(
        r#"
import json, os
print(json.dumps({{
    "root_uid": os.stat("/").st_uid,
    "etc_uid": os.stat("/etc/passwd").st_uid,
    "data": open({data:?}).read(),
    "work": sorted(os.listdir("/work")),
    "boot_id": open("/proc/sys/kernel/random/boot_id").read(),
    "procs": sorted(p for p in os.listdir("/proc") if p.isdigit()),
}}))
open("/work/left-behind", "w").write("x")
try:
    open("/made-by-a-job", "w")
    print(json.dumps({{"root_write": "ok"}}))
except OSError as e:
    print(json.dumps({{"root_write": e.errno}}))
"#
    );
    let run = |code: String| {
        let daemon = &daemon;
        async move {
            let done = daemon.run(&code).await;
            assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
            let text = String::from_utf8_lossy(&done.stdout).into_owned();
            let mut lines = text.lines();
            let seen: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
            let wrote: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
            (seen, wrote)
        }
    };
    let (first, wrote) = run(code.clone()).await;
    assert_eq!(first["root_uid"], 65534, "{first:#}");
    assert_eq!(first["etc_uid"], 65534, "{first:#}");
    assert_eq!(first["data"], "first");
    assert_eq!(first["work"], json!(["main.py"]));
    assert_eq!(
        wrote["root_write"],
        libc::EROFS,
        "the shared root is read-only"
    );
    // Replaced the way ldconfig replaces /etc/ld.so.cache: a new file renamed over it.
    let fresh = dir.path().join("data.new");
    std::fs::write(&fresh, "second").unwrap();
    std::fs::rename(&fresh, &data).unwrap();
    let (second, _) = run(code).await;
    assert_eq!(second["data"], "second", "{second:#}");
    assert_eq!(
        second["work"],
        json!(["main.py"]),
        "a job's /work is its own"
    );
    assert_ne!(
        first["boot_id"], second["boot_id"],
        "each job has its own masks"
    );
    assert_eq!(
        second["procs"], first["procs"],
        "only the job's own processes"
    );
    // Nothing of the templates (their builders, their mounts) is left on the host.
    assert_eq!(daemon.suspicious_mounts(), Vec::<String>::new());
    assert!(
        wait_until(Duration::from_secs(2), || daemon.job_processes().is_empty()),
        "{:?}",
        daemon.job_processes()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn outcome_reports_the_isolation_in_force() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run("print('hi')").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let iso = &done.outcome.isolation;
    assert_eq!(
        iso.namespaces,
        ["user", "mount", "pid", "net", "ipc", "uts", "cgroup", "time"]
    );
    assert_eq!((iso.uid, iso.gid), (1000, 1000));
    assert!(iso.no_new_privs && iso.capabilities_dropped, "{iso:?}");
    assert_eq!(iso.landlock, Some(LandlockStatus::FullyEnforced));
    assert_eq!(iso.landlock_abi, 6);
    assert!(iso.seccomp_filters >= 1, "{iso:?}");
    assert_eq!(iso.cgroup, Some(host_cgroup_version()));
    if std::env::var("VIVARIUM_REQUIRE_CGROUP_V1").as_deref() == Ok("1") {
        assert_eq!(iso.cgroup, Some(CgroupVersion::V1), "CI declares cgroup v1");
    }
    assert!(iso.not_enforced.is_empty(), "{iso:?}");
}

/// Syscalls, arguments and socket families CPython never needs. Without the filters each
/// gives another answer (success, EFAULT, EINVAL, ENOTTY...), so these errnos are the
/// filters' own: EPERM for what the policy refuses on purpose, ENOSYS for what it does not
/// know (glibc falls back to an older syscall only on ENOSYS).
#[tokio::test(flavor = "multi_thread")]
async fn seccomp_refuses_what_python_never_needs() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let ev = run_probe(&daemon, "seccomp", &[]).await;
    // With `network = "none"` no family but AF_UNIX; with a private loopback also
    // AF_INET and AF_INET6 (on the job's own `lo`, tests/tests/loopback.rs).
    let offline = daemon
        .run_job(&Job::new(probe("seccomp")).profile("offline"))
        .await;
    assert_eq!(offline.outcome.reason, Reason::Ok, "{}", describe(&offline));
    let offline = evidence(&offline);
    let offline_sockets = offline["sockets"].as_object().unwrap();
    for (family, result) in offline_sockets.iter().filter(|(f, _)| *f != "AF_UNIX") {
        assert!(
            matches!(result.as_str(), Some("EPERM" | "EAFNOSUPPORT")),
            "offline: socket {family}: {result}"
        );
    }
    let refused = |v: &Value| matches!(v.as_str(), Some("EPERM" | "ENOSYS"));
    let mut allowed = Vec::new();
    for group in ["syscalls", "namespaces", "arguments"] {
        for (name, result) in ev[group].as_object().unwrap() {
            if !refused(result) {
                allowed.push(format!("{group}.{name}: {result}"));
            }
        }
    }
    let sockets = ev["sockets"].as_object().unwrap();
    let own_loopback = ["AF_UNIX", "AF_INET", "AF_INET6", "AF_INET_UDP"];
    for (family, result) in sockets
        .iter()
        .filter(|(f, _)| !own_loopback.contains(&f.as_str()))
    {
        if !matches!(
            result.as_str(),
            Some("EPERM" | "EACCES" | "EAFNOSUPPORT" | "ENOSYS")
        ) {
            allowed.push(format!("socket {family}: {result}"));
        }
    }
    assert_eq!(
        allowed,
        Vec::<String>::new(),
        "not refused by seccomp\n{ev:#}"
    );
    assert_eq!(ev["unknown"], json!({"clone3": "ENOSYS"}));
    for family in own_loopback {
        assert_eq!(sockets[family], "created", "{family}");
    }
}
