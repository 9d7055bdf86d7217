//! Two jobs running at the same time cannot reach each other: job A plants files in
//! /work, /tmp and /dev/shm, binds an abstract unix socket, creates SysV shared memory and a
//! message queue under a known key, and waits; job B, started once A is ready (a host-side
//! barrier), looks for all of it by name and tries to signal A. A then checks that its
//! things are intact and that no signal arrived. A's own checks (it sees its socket, its
//! IPC objects, its files) show that each of B's "not found" is evidence, not a broken probe.
#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use vivarium_e2e::proto::{Outcome, Reason};
use vivarium_e2e::{
    default_profile_with, describe, evidence, require_root, Daemon, DaemonOpts, Job, JobEvent,
    JobHandle, Stream,
};

/// Job A: argv name, key. Plants its things, proves it can reach them itself, prints one
/// JSON line with `ready`, then waits for a line on stdin and reports what is left.
const PLANTER: &str = r#"
import ctypes, errno, json, os, signal, socket, sys

name, key = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_RMID = 0o1000, 0

def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

got = []
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, lambda n, f: got.append(n))
secret = f"A's secret {os.urandom(8).hex()}"
for d in ("/work", "/tmp", "/dev/shm"):
    with open(f"{d}/{name}", "w") as f:
        f.write(secret)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("\0" + name)
srv.listen(8)
me = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
me.connect("\0" + name)
me.close()
shm = libc.shmget(key, 4096, IPC_CREAT | 0o666)
shm_err = None if shm >= 0 else err()
msq = libc.msgget(key, IPC_CREAT | 0o666)
msq_err = None if msq >= 0 else err()
print(json.dumps({"ready": True, "self_connect": "ok", "shm": shm_err or "created",
                  "msq": msq_err or "created"}), flush=True)

sys.stdin.readline()
files = {}
for d in ("/work", "/tmp", "/dev/shm"):
    with open(f"{d}/{name}") as f:
        files[d] = f.read() == secret
print(json.dumps({
    "files_intact": files,
    "shm_still_mine": shm < 0 or libc.shmget(key, 0, 0) == shm,
    "msq_still_mine": msq < 0 or libc.msgget(key, 0) == msq,
    "signals": got,
}), flush=True)
"#;

/// Job B: argv A's name, the key, A's host pid. Looks for A's things and tries to signal it.
const SEEKER: &str = r#"
import ctypes, errno, json, os, signal, socket, sys

name, key, host_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)

def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))

def errno_of(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))

pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
cmdlines = []
for p in pids:
    if p == os.getpid():
        continue  # B's own argv names A
    try:
        with open(f"/proc/{p}/cmdline", "rb") as f:
            cmdlines.append(f.read().replace(b"\0", b" ").decode())
    except OSError:
        pass
found = {d: os.path.exists(f"{d}/{name}") for d in ("/work", "/tmp", "/dev/shm")}
listed = {d: sorted(e for e in os.listdir(d) if e != "main.py") for d in ("/work", "/tmp", "/dev/shm")}
# B's own files of the same name must not land on A's.
for d in ("/work", "/tmp", "/dev/shm"):
    with open(f"{d}/{name}", "w") as f:
        f.write("B was here")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
connect = errno_of(lambda: s.connect("\0" + name))
shm = libc.shmget(key, 0, 0)
shm = "found" if shm >= 0 else err()
msq = libc.msgget(key, 0)
msq = "found" if msq >= 0 else err()
print(json.dumps({
    "pids": pids,
    "me": os.getpid(),
    "sees_a": any(name in c for c in cmdlines),
    "found": found,
    "listed": listed,
    "connect": connect,
    "shm": shm,
    "msq": msq,
    "kill_host_pid": errno_of(lambda: os.kill(host_pid, signal.SIGUSR1)),
    "kill_probe_host_pid": errno_of(lambda: os.kill(host_pid, 0)),
    "kill_everyone": errno_of(lambda: os.kill(-1, 0)),
}), flush=True)
"#;

/// The test profile that lets jobs use SysV IPC: the default seccomp policy plus shm*/msg*,
/// so that the IPC namespace, not seccomp, is what keeps the jobs apart.
fn ipc_profile() -> (String, String) {
    let policy = vivarium_e2e::workspace_dir().join("profiles/seccomp/default.json");
    let mut json: Value =
        serde_json::from_str(&std::fs::read_to_string(policy).expect("seccomp policy"))
            .expect("seccomp policy is JSON");
    let rules = json["allowlist"]["filter"]
        .as_array_mut()
        .expect("allowlist.filter");
    for call in [
        "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
    ] {
        rules.push(json!({"syscall": call, "comment": "test only: SysV IPC for cross_job.rs"}));
    }
    let toml = default_profile_with(&[("seccomp", "seccomp = \"seccomp/ipc-test.toml\"")]);
    (json.to_string(), toml)
}

/// A's stdout up to its ready line, parsed (30 s at most).
async fn until_ready(handle: &mut JobHandle<'_>) -> Value {
    let mut seen = Vec::new();
    let wait = async {
        loop {
            match handle.next_event().await.expect("job events") {
                Some(JobEvent::Output(Stream::Stdout, b)) => {
                    seen.extend_from_slice(&b);
                    if seen.ends_with(b"\n") {
                        return last_json(&seen);
                    }
                }
                Some(JobEvent::Finished(o)) => panic!("A ended before it was ready: {o:#?}"),
                Some(_) => {}
                None => panic!("A ended before it was ready"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("A was not ready within 30 s")
}

/// The rest of a job's stdout and its outcome.
async fn rest(handle: &mut JobHandle<'_>) -> (Vec<u8>, Outcome) {
    let mut stdout = Vec::new();
    let wait = async {
        loop {
            match handle.next_event().await.expect("job events") {
                Some(JobEvent::Output(Stream::Stdout, b)) => stdout.extend_from_slice(&b),
                Some(JobEvent::Finished(o)) => return *o,
                Some(_) => {}
                None => panic!("the job ended without an outcome"),
            }
        }
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("no outcome within 30 s");
    (stdout, outcome)
}

fn last_json(stdout: &[u8]) -> Value {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line in {text}"))
}

/// Run A, then B beside it, then let A check. Returns (A's ready line, B's evidence,
/// A's final report).
async fn a_then_b(daemon: &Daemon, profile: &str) -> (Value, Value, Value) {
    let name = format!("vivarium-xjob-{}", std::process::id());
    let key = "1193046"; // 0x123456
    let (mut tell_a, a_stdin) = tokio::io::duplex(64);
    let mut a_client = daemon.client().await;
    let a_job = Job::new(PLANTER)
        .profile(profile)
        .args([name.as_str(), key])
        .wall_ms(20_000);
    let mut a = a_client.submit(&a_job, Some(a_stdin)).await.unwrap();
    let ready = until_ready(&mut a).await;
    assert_eq!(ready["ready"], true, "{ready}");
    // A's payload: the only interpreter without a child that is an interpreter or a
    // forked job's init (a zygote is an interpreter too, with such children).
    let procs = daemon.job_processes();
    let parent = |p: &vivarium_e2e::Proc| p.is_python() || p.is_zygote_init();
    let ready_pids: Vec<_> = (procs.iter())
        .filter(|p| p.is_python() && !procs.iter().any(|c| c.ppid == p.pid && parent(c)))
        .collect();
    assert_eq!(ready_pids.len(), 1, "A's payload: {procs:?}");
    let a_host_pid = ready_pids[0].pid.to_string();
    // Forked: its parent is a forked job's init, whose parent is the zygote.
    let forked = procs.iter().any(|p| {
        p.pid == ready_pids[0].ppid
            && p.is_zygote_init()
            && procs.iter().any(|z| z.pid == p.ppid && z.is_python())
    });
    assert_eq!(
        forked,
        profile == "zygote",
        "A forked from a zygote: {procs:?}"
    );

    let b_job = Job::new(SEEKER)
        .profile(profile)
        .args([name.as_str(), key, a_host_pid.as_str()]);
    let b = daemon.run_job(&b_job).await;
    assert_eq!(b.outcome.reason, Reason::Ok, "{}", describe(&b));

    tell_a.write_all(b"check\n").await.unwrap();
    tell_a.flush().await.unwrap();
    let (a_out, a_outcome) = rest(&mut a).await;
    assert_eq!(
        a_outcome.reason,
        Reason::Ok,
        "{a_outcome:#?}\n{}",
        String::from_utf8_lossy(&a_out)
    );
    (ready, evidence(&b), last_json(&a_out))
}

fn assert_apart(b: &Value, a_after: &Value) {
    // B's pid namespace holds init and B itself (init may be hidden by /proc's mount
    // options); nothing else.
    let me = b["me"].as_u64().expect("B's pid");
    let pids: Vec<u64> = b["pids"]
        .as_array()
        .expect("pids")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert!(
        pids.contains(&me) && pids.iter().all(|p| *p == 1 || *p == me),
        "{b}"
    );
    assert_eq!(b["sees_a"], false, "{b}");
    let none = json!({"/work": false, "/tmp": false, "/dev/shm": false});
    assert_eq!(b["found"], none, "{b}");
    let empty = json!({"/work": [], "/tmp": [], "/dev/shm": []});
    assert_eq!(b["listed"], empty, "{b}");
    // Another network namespace has no such name; Landlock's scope (ABI 6) would say EPERM.
    assert!(
        ["ECONNREFUSED", "EPERM"].contains(&b["connect"].as_str().unwrap_or("")),
        "{b}"
    );
    assert_eq!(
        (
            &b["kill_host_pid"],
            &b["kill_probe_host_pid"],
            &b["kill_everyone"]
        ),
        (&json!("ESRCH"), &json!("ESRCH"), &json!("ESRCH")),
        "{b}"
    );
    let intact = json!({"/work": true, "/tmp": true, "/dev/shm": true});
    assert_eq!(a_after["files_intact"], intact, "{a_after}");
    assert_eq!(a_after["signals"], json!([]), "{a_after}");
    assert_eq!(
        (&a_after["shm_still_mine"], &a_after["msq_still_mine"]),
        (&json!(true), &json!(true)),
        "{a_after}"
    );
}

/// Under the default profile: processes, files, /dev/shm, abstract sockets and signals are
/// out of reach, and SysV IPC is not even callable (seccomp: ENOSYS for both jobs).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_jobs_cannot_reach_each_other() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    apart_without_sysv_ipc(&daemon, "default").await;
}

/// A and B apart, and SysV IPC not callable by either (seccomp: ENOSYS).
async fn apart_without_sysv_ipc(daemon: &Daemon, profile: &str) {
    let (a, b, a_after) = a_then_b(daemon, profile).await;
    assert_eq!(
        (&a["shm"], &a["msq"]),
        (&json!("ENOSYS"), &json!("ENOSYS")),
        "{a}"
    );
    assert_apart(&b, &a_after);
    assert_eq!(
        (&b["shm"], &b["msq"]),
        (&json!("ENOSYS"), &json!("ENOSYS")),
        "{b}"
    );
}

/// The same for two jobs forked from one zygote (sharing its preloaded interpreter, each
/// with its own namespaces, cgroup, Landlock and seccomp).
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_jobs_of_one_zygote_cannot_reach_each_other() {
    if !require_root() {
        return;
    }
    let text = format!(
        "{}\n[warm]\nzygote = true\npool = 0\n",
        default_profile_with(&[])
    );
    let daemon = Daemon::start(DaemonOpts::default().profile("zygote", &text));
    apart_without_sysv_ipc(&daemon, "zygote").await;
}

/// With SysV IPC allowed by a test-only seccomp policy, A creates a shared memory segment
/// and a message queue under a known key, and B, under the same key, finds neither: the
/// IPC namespace keeps them apart on its own.
#[tokio::test(flavor = "multi_thread")]
async fn sysv_ipc_is_per_job_even_where_seccomp_allows_it() {
    if !require_root() {
        return;
    }
    let (policy, toml) = ipc_profile();
    // The profiles directory is a copy: the policy goes in as `seccomp/ipc-test.toml`
    // (profiles are loaded only from the top level, so it is not taken for a profile).
    let daemon = Daemon::start(
        DaemonOpts::default()
            .profile("seccomp/ipc-test", &policy)
            .profile("ipc-test", &toml),
    );
    let mut client = daemon.client().await;
    let planted = client
        .run_collect(
            &Job::new(
                "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
                 print(libc.shmget(42, 4096, 0o1000 | 0o600) >= 0)",
            )
            .profile("ipc-test"),
            None,
        )
        .await
        .expect("a job under the ipc-test profile");
    assert_eq!(planted.stdout, b"True\n", "{}", describe(&planted));
    let (a, b, a_after) = a_then_b(&daemon, "ipc-test").await;
    assert_eq!(
        (&a["shm"], &a["msq"]),
        (&json!("created"), &json!("created")),
        "{a}"
    );
    assert_apart(&b, &a_after);
    assert_eq!(
        (&b["shm"], &b["msq"]),
        (&json!("ENOENT"), &json!("ENOENT")),
        "{b}"
    );
}
