//! The warm path with sandboxes forked from a zygote: every case of the warm path
//! (warm/cases.rs), and what is the zygote's own.
#![forbid(unsafe_code)]

const ZYGOTE: bool = true;

include!("warm/cases.rs");

/// A submitted job's outcome (its output is not kept).
async fn outcome(handle: &mut vivarium_e2e::JobHandle<'_>) -> vivarium_e2e::proto::Outcome {
    loop {
        match handle.next_event().await.expect("events") {
            Some(vivarium_e2e::JobEvent::Finished(o)) => return *o,
            Some(_) => {}
            None => panic!("no outcome"),
        }
    }
}

/// The zygote (an interpreter whose parent is not one), a forked job's init (its child,
/// the init program) and the job's payload (the init's child), while one job runs.
fn zygote_family(daemon: &Daemon) -> Option<(i32, i32, i32)> {
    let procs = daemon.job_processes();
    let payload = *payloads_in(&procs).first()?;
    let parent = |pid: i32| procs.iter().find(|p| p.pid == pid).map(|p| p.ppid);
    let init = parent(payload)?;
    Some((parent(init)?, init, payload))
}

fn host_ids(pid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn namespaces(pid: i32) -> Vec<String> {
    ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"]
        .iter()
        .map(|ns| {
            std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
                .map(|l| l.display().to_string())
                .unwrap_or_else(|e| panic!("{pid} {ns}: {e}"))
        })
        .collect()
}

/// Seen from the host while a job runs: the job's payload has every namespace of its own
/// (none is the zygote's), its own cgroup (not the zygote's), and a host uid that is
/// neither the zygote's nor its init's.
#[tokio::test(flavor = "multi_thread")]
async fn a_forked_job_has_its_own_namespaces_cgroup_and_host_uid() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let mut client = daemon.client().await;
    let job = Job::new(format!("{WARM_MARK}import time\ntime.sleep(3)\n")).profile("hot");
    let mut handle = client.submit(&job, None::<&[u8]>).await.expect("submit");
    let family = wait_until(Duration::from_secs(10), || zygote_family(&daemon).is_some());
    assert!(family, "no forked job seen: {:?}", daemon.job_processes());
    let (zygote, init, payload) = zygote_family(&daemon).unwrap();
    let (z_ns, i_ns, p_ns) = (namespaces(zygote), namespaces(init), namespaces(payload));
    for (k, ns) in p_ns.iter().enumerate() {
        assert_ne!(ns, &z_ns[k], "the payload shares the zygote's {ns}");
    }
    // init has the job's namespaces but the user namespace (the payload's is its own).
    assert_eq!(p_ns[1..], i_ns[1..]);
    assert_ne!(p_ns[0], i_ns[0]);
    let (z_ids, p_ids) = (host_ids(zygote), host_ids(payload));
    assert_ne!(z_ids, p_ids);
    assert_eq!(z_ids, host_ids(init));
    let cgroup = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let (z_cg, p_cg) = (cgroup(zygote), cgroup(payload));
    assert!(z_cg.contains("/zygote-"), "{z_cg}");
    assert!(p_cg.contains("/job-") && !p_cg.contains("zygote"), "{p_cg}");
    let done = outcome(&mut handle).await;
    assert_eq!(done.reason, Reason::Ok, "{done:#?}");
}

/// Seen from the host while a job runs: the job's payload is the zygote's one copy and
/// its init is not a copy at all. The zygote's address space maps the zygote library
/// and so does the payload's (a copy of it); the init's maps neither that nor the
/// interpreter, its program is the init program, and its address space is a fraction
/// of the zygote's. The payload is the init's child: pid 1 is its parent inside.
#[tokio::test(flavor = "multi_thread")]
async fn a_forked_jobs_init_is_not_a_copy_of_the_zygote() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let mut client = daemon.client().await;
    let code = format!("{WARM_MARK}import os, sys, time\nprint(os.getppid(), os.getpid())\nsys.stdout.flush()\ntime.sleep(3)\n");
    let job = Job::new(code).profile("hot");
    let mut handle = client.submit(&job, None::<&[u8]>).await.expect("submit");
    let family = wait_until(Duration::from_secs(10), || zygote_family(&daemon).is_some());
    assert!(family, "no forked job seen: {:?}", daemon.job_processes());
    let (zygote, init, payload) = zygote_family(&daemon).unwrap();
    let maps = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe = |pid: i32| std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let library = "libvivarium_zygote.so";
    assert!(maps(zygote).contains(library), "{}", maps(zygote));
    assert!(
        maps(payload).contains(library),
        "the payload is no copy of the zygote"
    );
    let init_maps = maps(init);
    assert!(!init_maps.contains(library), "init is a copy: {init_maps}");
    assert!(
        !init_maps.contains("python"),
        "init maps the interpreter: {init_maps}"
    );
    assert_eq!(exe(zygote), exe(payload));
    let init_exe = exe(init);
    assert!(
        init_exe.ends_with("vivarium-zygote-init"),
        "init runs {}",
        init_exe.display()
    );
    let vm_size = |pid: i32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let (z_size, i_size) = (vm_size(zygote), vm_size(init));
    assert!(i_size * 2 < z_size, "init {i_size} kB, zygote {z_size} kB");
    // Inside: the payload is pid 2, its parent pid 1 (init).
    let mut out = Vec::new();
    let done = loop {
        match handle.next_event().await.expect("events") {
            Some(vivarium_e2e::JobEvent::Output(vivarium_e2e::Stream::Stdout, b)) => {
                out.extend_from_slice(&b)
            }
            Some(vivarium_e2e::JobEvent::Finished(o)) => break *o,
            Some(_) => {}
            None => panic!("no outcome"),
        }
    };
    assert_eq!(done.reason, Reason::Ok, "{done:#?}");
    let out = String::from_utf8_lossy(&out);
    assert_eq!(out.lines().nth(1), Some("1 2"), "{out}");
}

/// A zygote that dies (here: SIGKILL from the host) takes its running jobs with it, each
/// reported with an outcome; jobs still run (cold) until a new zygote serves, and
/// nothing is left over.
#[tokio::test(flavor = "multi_thread")]
async fn a_dead_zygote_ends_its_jobs_and_is_replaced() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let before = daemon.settled_snapshot();
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let mut client = daemon.client().await;
    let job = Job::new(format!("{WARM_MARK}import time\ntime.sleep(20)\n")).profile("hot");
    let mut handle = client.submit(&job, None::<&[u8]>).await.expect("submit");
    assert!(wait_until(Duration::from_secs(10), || zygote_family(
        &daemon
    )
    .is_some()));
    let (zygote, _, _) = zygote_family(&daemon).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(zygote),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill the zygote");
    let started = std::time::Instant::now();
    let done = outcome(&mut handle).await;
    assert!(started.elapsed() < Duration::from_secs(10), "{done:#?}");
    assert_ne!(done.reason, Reason::Ok, "{done:#?}");
    assert!(wait_until(
        Duration::from_secs(10),
        || !vivarium_e2e::alive(zygote)
    ));
    // Meanwhile (a zygote that ended on its own is not restarted for 10 s) warm
    // sandboxes start cold; then a new zygote serves again.
    let mut forked = false;
    for _ in 0..40 {
        let next = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
        assert_eq!(next.outcome.reason, Reason::Ok, "{}", describe(&next));
        if ran_warm(&next) {
            forked = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(forked, "no new zygote: {}", daemon.log());
    // A short idle time ends the new zygote; then nothing of either is left.
    drop(handle);
    drop(client);
    let text = warm_profile(0, 1);
    std::fs::write(daemon.profiles_dir().join("hot.toml"), text).unwrap();
    daemon.signal(nix::sys::signal::Signal::SIGHUP);
    daemon.assert_no_leaks(&before);
}

/// Whatever job starts the zygote (here one with a 4-process limit), the zygote's own
/// cgroup has the profile's limits: a job cannot shrink the process all jobs fork from.
#[tokio::test(flavor = "multi_thread")]
async fn the_zygote_keeps_the_profiles_limits_whatever_job_starts_it() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let first = daemon
        .run_job(&Job::new(WARM_MARK).profile("hot").pids(4))
        .await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let dirs: Vec<_> = daemon
        .cgroup_subtree_dirs()
        .into_iter()
        .filter(|d| d.to_string_lossy().contains("/pids/"))
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("zygote-"))
        })
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let max = std::fs::read_to_string(dirs[0].join("pids.max")).unwrap();
    assert_eq!(max.trim(), "64", "{}", dirs[0].display());
}

/// A job whose sandbox dies at once (a memory limit far below what an interpreter
/// needs) fails on its own: the zygote and the jobs it is running carry on.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_dies_at_birth_leaves_the_zygote_and_its_jobs_alone() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let mut client = daemon.client().await;
    let long = Job::new(format!(
        "{WARM_MARK}import time\ntime.sleep(2)\nprint('done')\n"
    ))
    .profile("hot");
    let mut handle = client.submit(&long, None::<&[u8]>).await.expect("submit");
    assert!(wait_until(Duration::from_secs(10), || zygote_family(
        &daemon
    )
    .is_some()));
    let (zygote, _, _) = zygote_family(&daemon).unwrap();
    for _ in 0..3 {
        let tiny = daemon
            .run_job(&Job::new(WARM_MARK).profile("hot").memory_bytes(256 << 10))
            .await;
        assert_ne!(tiny.outcome.reason, Reason::Ok, "{}", describe(&tiny));
    }
    let done = outcome(&mut handle).await;
    assert_eq!(done.reason, Reason::Ok, "{done:#?}");
    assert!(vivarium_e2e::alive(zygote), "the zygote died");
    let next = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&next), "{}", describe(&next));
    // Every init the zygote forked, the ones that died at birth included, is reaped
    // once it ends (the zygote waits on their pidfds): no zombie stays behind.
    let children = || {
        (daemon.job_processes().into_iter())
            .filter(|p| p.ppid == zygote)
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(5), || children() == 0),
        "{} children of the zygote left",
        children()
    );
}

/// Whether `pid` is one of `procs` and an interpreter.
fn is_python(procs: &[vivarium_e2e::Proc], pid: i32) -> bool {
    procs
        .iter()
        .any(|p| p.pid == pid && p.comm.starts_with("python"))
}

/// The idle zygote's interpreter: a Python process whose parent is not one.
fn idle_zygote(daemon: &Daemon) -> Option<i32> {
    let procs = daemon.job_processes();
    let mut zygotes = procs
        .iter()
        .filter(|p| is_python(&procs, p.pid) && !is_python(&procs, p.ppid));
    let zygote = zygotes.next()?.pid;
    zygotes.next().is_none().then_some(zygote)
}

/// Job cgroups in the daemon's subtree (the zygote's own is not one).
fn job_cgroups(daemon: &Daemon) -> Vec<std::path::PathBuf> {
    let job = |d: &std::path::PathBuf| {
        d.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("job-"))
    };
    daemon.cgroup_leftovers().into_iter().filter(job).collect()
}

/// A zygote that stops answering holds up only the request it was asked: the spawner
/// does not wait for the answer, so a cold job submitted meanwhile runs at once (while
/// the unanswered request's cgroup still exists); the request is then given up ("did
/// not answer"), its job starts cold, and the stopped zygote is ended.
#[tokio::test(flavor = "multi_thread")]
async fn a_zygote_that_does_not_answer_holds_up_no_other_job() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let before = daemon.settled_snapshot();
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    assert!(wait_until(Duration::from_secs(10), || idle_zygote(&daemon)
        .is_some()
        && job_cgroups(&daemon).is_empty()));
    let zygote = idle_zygote(&daemon).unwrap();
    use nix::sys::signal::{kill, Signal};
    kill(nix::unistd::Pid::from_raw(zygote), Signal::SIGSTOP).expect("stop the zygote");
    let asked = {
        let mut client = daemon.client().await;
        tokio::spawn(async move {
            client
                .run_collect(&Job::new(WARM_MARK).profile("hot"), None)
                .await
        })
    };
    // The request is out once its sandbox's cgroup exists (made, then asked for).
    let mut request = Vec::new();
    assert!(wait_until(Duration::from_secs(10), || {
        request = job_cgroups(&daemon);
        !request.is_empty()
    }));
    let cold = daemon.run("print('cold')").await;
    assert_eq!(cold.stdout, b"cold\n", "{}", describe(&cold));
    assert!(
        request.iter().all(|d| d.exists()),
        "the cold job ran only once the stopped zygote's request was given up"
    );
    let asked = asked.await.expect("task").expect("an outcome");
    assert_eq!(asked.outcome.reason, Reason::Ok, "{}", describe(&asked));
    assert!(!ran_warm(&asked), "{}", describe(&asked));
    assert!(
        daemon.log().contains("the zygote did not answer"),
        "{}",
        daemon.log()
    );
    assert!(request.iter().all(|d| !d.exists()), "{request:?}");
    // Given up, and without a job: the stopped zygote is ended.
    assert!(wait_until(
        Duration::from_secs(10),
        || !vivarium_e2e::alive(zygote)
    ));
    // A short idle time ends any new zygote; then nothing of either is left.
    let text = warm_profile(0, 1);
    std::fs::write(daemon.profiles_dir().join("hot.toml"), text).unwrap();
    daemon.signal(Signal::SIGHUP);
    daemon.assert_no_leaks(&before);
}

/// Every forked job's payload, seen from the host (an interpreter whose parent, the job's
/// init, `vivarium-init`, is a child of an interpreter, the zygote).
fn forked_payloads(daemon: &Daemon) -> Vec<i32> {
    payloads_in(&daemon.job_processes())
}

/// [`forked_payloads`] among `procs` (one snapshot of the daemon's processes).
fn payloads_in(procs: &[vivarium_e2e::Proc]) -> Vec<i32> {
    let python = |pid: i32| is_python(procs, pid);
    let find = |pid: i32| procs.iter().find(|q| q.pid == pid);
    (procs.iter())
        .filter(|p| p.is_python())
        .filter(|p| find(p.ppid).is_some_and(|init| init.is_zygote_init() && python(init.ppid)))
        .map(|p| p.pid)
        .collect()
}

/// Holds fds in flight on a unix socket until the kernel refuses more (the sender's
/// per-user budget, `user->unix_inflight` against RLIMIT_NOFILE, is full), then waits.
const HOLD_IN_FLIGHT: &str = r#"
import errno, os, socket, time
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.setblocking(False)
r, w = os.pipe()
sent, stopped = 0, None
try:
    while sent < 1_000_000:
        socket.send_fds(a, [b"x"], [r] * 250)
        sent += 250
except OSError as e:
    stopped = errno.errorcode.get(e.errno, str(e.errno))
print("held", sent, stopped, flush=True)
time.sleep(60)
"#;

/// Passes one fd over a unix socket and says how that went.
const PASS_ONE_FD: &str = r#"
import errno, os, socket
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
r, w = os.pipe()
try:
    socket.send_fds(a, [b"x"], [r])
    msg, fds, _, _ = socket.recv_fds(b, 1, 1)
    print("passed", len(fds))
except OSError as e:
    print("refused", errno.errorcode.get(e.errno, str(e.errno)))
"#;

/// Issue 17, point 3: forked jobs used to share one host uid (the zygote's 1000), so
/// per-user kernel budgets were shared between them: one job holding fds in flight made
/// every other forked job's fd passing fail with ETOOMANYREFS. Each forked job now runs
/// as host ids of its own (its id slot's): seen from the host, two running payloads and
/// the zygote have three different uids, and the second job passes an fd while the
/// first holds its whole budget in flight (positive evidence: the first one's sends
/// stopped at ETOOMANYREFS).
#[tokio::test(flavor = "multi_thread")]
async fn forked_jobs_have_host_ids_and_fd_budgets_of_their_own() {
    if !require_root() {
        return;
    }
    let daemon = start(0, 300);
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let mut client = daemon.client().await;
    let holder = Job::new(format!("{WARM_MARK}{HOLD_IN_FLIGHT}")).profile("hot");
    let mut handle = client.submit(&holder, None::<&[u8]>).await.expect("submit");
    let held = vivarium_e2e::stdout_line(&mut handle, "held").await;
    assert!(held.ends_with("ETOOMANYREFS"), "{held}");
    let mut second_client = daemon.client().await;
    let sleeper = Job::new(format!("{WARM_MARK}import time\ntime.sleep(60)\n")).profile("hot");
    let _sleeping = second_client
        .submit(&sleeper, None::<&[u8]>)
        .await
        .expect("submit");
    assert!(
        wait_until(Duration::from_secs(10), || forked_payloads(&daemon).len()
            == 2),
        "two forked jobs were not seen: {:?}",
        daemon.job_processes()
    );
    let payloads = forked_payloads(&daemon);
    let (zygote, _, _) = zygote_family(&daemon).expect("a zygote");
    let ids: Vec<String> = payloads.iter().map(|&p| host_ids(p)).collect();
    assert_ne!(ids[0], ids[1], "two forked jobs share host ids");
    assert!(!ids.contains(&host_ids(zygote)), "{ids:?}");
    let passer = daemon
        .run_job(&Job::new(format!("{WARM_MARK}{PASS_ONE_FD}")).profile("hot"))
        .await;
    assert!(ran_warm(&passer), "{}", describe(&passer));
    let said = String::from_utf8_lossy(&passer.stdout).into_owned();
    assert!(said.contains("passed 1"), "{}", describe(&passer));
    drop(handle);
    drop(client);
}

/// A ready forked sandbox waits for its job in the zygote library, not in the
/// interpreter (which has not run since the fork, and so has copied none of the
/// zygote's pages its after-fork work would write): its payload sits in `poll` on
/// stdin, not in the bootstrap's `read`; and the job it then gets runs as any other.
#[cfg(target_arch = "x86_64")]
#[tokio::test(flavor = "multi_thread")]
async fn a_ready_forked_sandbox_waits_in_the_library() {
    if !require_root() {
        return;
    }
    let daemon = start(2, 300);
    let first = daemon.run_job(&Job::new(WARM_MARK).profile("hot")).await;
    assert!(ran_warm(&first), "{}", describe(&first));
    let ready = || payloads_in(&daemon.job_processes());
    assert!(
        wait_until(Duration::from_secs(20), || ready().len() >= 2),
        "no ready forked sandboxes: {:?}",
        daemon.job_processes()
    );
    // The syscall each waits in (x86_64: read 0, poll 7, ppoll 271).
    let waits_in = |pid: i32| -> Option<i64> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
        s.split_whitespace().next()?.parse().ok()
    };
    for pid in ready() {
        let mut call = None;
        // (Until its setup is done it may be elsewhere: a moment after the ready byte.)
        wait_until(Duration::from_secs(5), || {
            call = waits_in(pid);
            matches!(call, Some(7 | 271))
        });
        assert!(
            matches!(call, Some(7 | 271)),
            "ready payload {pid} waits in syscall {call:?}, not poll"
        );
    }
    let next = daemon
        .run_job(&Job::new(format!("{WARM_MARK}print(6 * 7)\n")).profile("hot"))
        .await;
    assert!(ran_warm(&next), "{}", describe(&next));
    assert_eq!(String::from_utf8_lossy(&next.stdout), "ZYGOTE\n42\n");
}
