//! Rootless mode: `vivariumd` run by an ordinary user (uid 65534 here, via setpriv)
//! with unprivileged user namespaces and no delegated cgroup (this host is cgroup v1,
//! so no user can have one). Profiles that need cgroup limits are refused with a
//! message that says how to get delegation; the `rootless` profile runs with rlimits
//! standing in for cgroup limits and says so in every outcome; every other layer holds.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use vivarium_client::proto::{ErrorCode, Reason};
use vivarium_client::{Client, ClientError, Collected, Job};
use vivarium_e2e::{bin, describe, evidence, probe, require_root, wait_until, workspace_dir};

const USER: u32 = 65534;

/// A daemon started as `USER` in a temp dir that user owns.
struct UserDaemon {
    child: Child,
    dir: tempfile::TempDir,
}

impl UserDaemon {
    fn start() -> UserDaemon {
        let dir = tempfile::Builder::new()
            .prefix("vivarium-rootless-")
            .tempdir()
            .expect("temp dir");
        nix::unistd::chown(dir.path(), Some(USER.into()), Some(USER.into())).expect("chown");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let config = dir.path().join("vivariumd.toml");
        std::fs::write(
            &config,
            format!(
                "socket = {:?}\nstate_dir = {:?}\nprofiles_dir = {:?}\n",
                dir.path().join("vivariumd.sock"),
                dir.path().join("state"),
                workspace_dir().join("profiles"),
            ),
        )
        .expect("write config");
        let log = std::fs::File::create(dir.path().join("vivariumd.log")).expect("log");
        nix::unistd::chown(&config, Some(USER.into()), None).expect("chown config");
        let child = Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "--",
            ])
            .arg(bin("vivariumd"))
            .arg("--config")
            .arg(&config)
            .env("XDG_RUNTIME_DIR", dir.path())
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("setpriv vivariumd");
        let daemon = UserDaemon { child, dir };
        let up = wait_until(Duration::from_secs(10), || daemon.socket().exists());
        assert!(up, "the rootless daemon did not start:\n{}", daemon.log());
        daemon
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("vivariumd.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("vivariumd.log")).unwrap_or_default()
    }

    async fn run(&self, job: Job) -> Result<Collected, ClientError> {
        // Root is always admitted, so the test drives the user's daemon directly.
        let mut client = Client::connect(self.socket()).await?;
        client.run_collect(&job, None).await
    }
}

impl Drop for UserDaemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- rootless daemon log ---\n{}", self.log());
        }
    }
}

fn in_rootless(code: &str) -> Job {
    Job::new(code).profile("rootless")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_users_daemon_refuses_cgroup_profiles_and_says_how_to_get_delegation() {
    if !require_root() {
        return;
    }
    let daemon = UserDaemon::start();
    let mut client = Client::connect(daemon.socket()).await.expect("connect");
    let profiles = client.list_profiles().await.expect("profiles");
    for p in &profiles {
        let why = p.disabled.as_deref();
        match p.name.as_str() {
            "default" | "compat" | "warm" | "zygote" | "offline" => {
                let why = why.unwrap_or_else(|| panic!("{} is enabled: {p:?}", p.name));
                assert!(why.contains("Delegate=yes"), "{why}");
                assert!(why.contains("no usable cgroup"), "{why}");
            }
            "rootless" => assert_eq!(why, None, "{p:?}"),
            other => panic!("unexpected profile {other}"),
        }
    }
    let refused = daemon
        .run(Job::new("print(1)"))
        .await
        .expect_err("the default profile needs cgroups");
    assert_eq!(refused.refusal_code(), Some(ErrorCode::ProfileDisabled));
}

#[tokio::test(flavor = "multi_thread")]
async fn rootless_jobs_keep_every_other_layer_and_say_what_is_weaker() {
    if !require_root() {
        return;
    }
    let daemon = UserDaemon::start();
    let done = daemon
        .run(in_rootless(&probe("identity")))
        .await
        .expect("run");
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let ev = evidence(&done);
    assert_eq!(ev["uid"], 1000);
    assert_eq!(ev["gid"], 1000);
    for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(ev["status"][key], "0000000000000000", "{key}: {ev:#}");
    }
    assert_eq!(ev["status"]["NoNewPrivs"], "1");
    assert_eq!(ev["status"]["Seccomp"], "2");
    // The only id inside is 1000, mapped onto the daemon user's own uid.
    assert_eq!(ev["uid_map"], serde_json::json!([["1000", "65534", "1"]]));

    let iso = &done.outcome.isolation;
    assert_eq!(
        iso.landlock,
        Some(vivarium_client::proto::LandlockStatus::FullyEnforced)
    );
    assert_eq!(iso.seccomp_filters, 1);
    assert_eq!(iso.cgroup, None);
    assert_eq!(iso.namespaces.len(), 7);
    assert!(
        iso.not_enforced.iter().any(|n| n.contains("rlimits only")),
        "{:?}",
        iso.not_enforced
    );

    // Host files stay out of reach and the read-only root stays read-only.
    let code = r#"
import errno, json
def attempt(f):
    try:
        f(); return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print(json.dumps({
    "shadow": attempt(lambda: open("/etc/shadow").read()),
    "write_usr": attempt(lambda: open("/usr/lib/python3.11/os.py", "a")),
    "write_work": attempt(lambda: open("/work/x", "w").write("x")),
}))
"#;
    let done = daemon.run(in_rootless(code)).await.expect("run");
    let ev = evidence(&done);
    assert_eq!(ev["shadow"], "ENOENT", "{ev}");
    assert!(
        matches!(ev["write_usr"].as_str(), Some("EROFS" | "EACCES")),
        "{ev}"
    );
    assert_eq!(ev["write_work"], "ok", "{ev}");
}

/// A rootless job's network namespace is one of its own (`CLONE_NEWNET`: no spare can be
/// made without root), and its init brings `lo` up before the payload drops every
/// capability: the private loopback works, the host's listener is not reached, no route
/// leads out, and the job cannot take `lo` down again.
#[tokio::test(flavor = "multi_thread")]
async fn a_rootless_job_has_its_private_loopback() {
    if !require_root() {
        return;
    }
    let host = std::net::TcpListener::bind("127.0.0.1:0").expect("host listener");
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let daemon = UserDaemon::start();
    let code = format!(
        r#"
import errno, fcntl, json, socket, struct
def err(f):
    try:
        return f()
    except OSError as e:
        return errno.errorcode[e.errno]
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname(), timeout=5); a, _ = s.accept()
c.sendall(b"lo"); echoed = a.recv(2).decode()
def route():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("192.0.2.1", 9))
    return "route via " + u.getsockname()[0]
def down():
    fcntl.ioctl(c, 0x8914, struct.pack("16sH", b"lo", 0)); return "done"
print(json.dumps({{"echoed": echoed, "host": err(lambda: socket.create_connection(("127.0.0.1", {port}), timeout=5) and "connected"), "route": err(route), "down": err(down)}}))
"#
    );
    let done = daemon.run(in_rootless(&code)).await.expect("run");
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    assert_eq!(
        evidence(&done),
        serde_json::json!({"echoed": "lo", "host": "ECONNREFUSED", "route": "ENETUNREACH", "down": "EPERM"})
    );
    match host.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a rootless job reached the host's listener: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rlimits_stand_in_for_cgroup_limits() {
    if !require_root() {
        return;
    }
    let daemon = UserDaemon::start();
    // Memory: RLIMIT_AS makes the allocation fail inside Python.
    let balloon = "b = bytearray(300 * 1024 * 1024)\nprint('allocated')";
    let done = daemon
        .run(in_rootless(balloon).memory_bytes(64 << 20))
        .await
        .expect("run");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("MemoryError"), "{}", describe(&done));
    assert!(!String::from_utf8_lossy(&done.stdout).contains("allocated"));

    // CPU: RLIMIT_CPU's SIGXCPU is reported as the CPU limit.
    let done = daemon
        .run(in_rootless("while True: pass").cpu_ms(1000))
        .await
        .expect("run");
    assert_eq!(done.outcome.reason, Reason::CpuLimit, "{}", describe(&done));
    assert!(done.outcome.usage.wall_ms < 5000, "{}", describe(&done));

    // Processes: RLIMIT_NPROC (per user namespace) refuses the fork.
    let forks = "import os\nn = 0\ntry:\n    for _ in range(50):\n        if os.fork() == 0:\n            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('refused after', n, e.errno)\n";
    let done = daemon.run(in_rootless(forks).pids(8)).await.expect("run");
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(stdout.contains("refused after"), "{}", describe(&done));
    assert!(
        stdout.trim_end().ends_with(" 11"),
        "EAGAIN expected: {}",
        describe(&done)
    );
}

#[test]
fn the_user_daemon_leaves_nothing_behind() {
    if !require_root() {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut daemon = UserDaemon::start();
    let done = runtime
        .block_on(daemon.run(in_rootless("import time; time.sleep(0.2)")))
        .expect("run");
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
    let pid = nix::unistd::Pid::from_raw(daemon.child.id() as i32);
    // A job left sleeping while the daemon stops.
    let sock = daemon.socket();
    let sleeper = runtime.spawn(async move {
        let mut client = Client::connect(sock).await.expect("connect");
        client
            .run_collect(&in_rootless("import time; time.sleep(60)"), None)
            .await
    });
    assert!(wait_until(Duration::from_secs(10), || descendants(
        pid.as_raw()
    )
    .len()
        >= 3));
    let family = descendants(pid.as_raw());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = daemon.child.wait().expect("wait");
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    let _ = runtime.block_on(sleeper);
    let alive: Vec<i32> = family
        .into_iter()
        .filter(|p| Path::new(&format!("/proc/{p}")).exists())
        .collect();
    assert!(alive.is_empty(), "left behind: {alive:?}");
    assert!(!Path::new(&daemon.socket()).exists(), "socket left behind");
}

/// Every process whose parent chain leads to `root` (the spawner, the jobs' inits and
/// payloads).
fn descendants(root: i32) -> Vec<i32> {
    let parent = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let pids: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.into_iter()
        .filter(|&p| {
            let mut cur = p;
            for _ in 0..64 {
                match parent(cur) {
                    Some(pp) if pp == root => return true,
                    Some(pp) if pp > 1 => cur = pp,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}
