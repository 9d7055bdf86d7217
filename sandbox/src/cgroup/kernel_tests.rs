//! Tests against the real kernel: they need root and v1 memory, pids, cpu and cpuacct
//! hierarchies (the development machine). Elsewhere they print why they skip and pass, unless
//! `VIVARIUM_REQUIRE_CGROUP_V1=1` declares the machine has them: then a skip is a failure.
//!
//! Each test works in its own `vivarium-test-<pid>-<tag>` subtree at the root of each
//! hierarchy and removes it at the end, also on panic. Payloads move themselves into the job
//! cgroup between fork and exec (`pre_exec` + `enter_self`), as the spawner's children will.

use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::{Cgroups, JobCgroup, Limits, Version};

const REQUIRE_ENV: &str = "VIVARIUM_REQUIRE_CGROUP_V1";
const PYTHON: &str = "/usr/bin/python3";
const SIGKILL: i32 = libc::SIGKILL;

/// The test's subtree; dropping it kills and removes everything under it.
struct Subtree(Cgroups);

impl Drop for Subtree {
    fn drop(&mut self) {
        if let Err(e) = self.0.remove_subtree() {
            eprintln!("cgroup test cleanup failed: {e:?}");
        }
    }
}

fn real_v1(tag: &str) -> Option<Subtree> {
    let skip = |why: String| {
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{REQUIRE_ENV}=1 but the cgroup v1 kernel test cannot run: {why}"
        );
        eprintln!(
            "SKIPPED cgroup v1 kernel test {tag}: {why} (set {REQUIRE_ENV}=1 to fail instead)"
        );
        None
    };
    if !nix::unistd::geteuid().is_root() {
        return skip("not root".into());
    }
    let subtree = format!("vivarium-test-{}-{tag}", std::process::id());
    let cg = match Cgroups::detect(&subtree) {
        Ok(cg) if cg.version() == Version::V1 => cg,
        Ok(_) => return skip("the host has cgroup v2, not v1 memory/pids/cpu/cpuacct".into()),
        Err(e) => return skip(format!("no usable cgroup hierarchy: {e}")),
    };
    let guard = Subtree(cg);
    guard.0.setup().expect("setup of the test subtree");
    Some(guard)
}

/// Run `cmd` to completion with the child moving itself into `job` before exec.
fn run_in(job: &Arc<JobCgroup>, cmd: &mut Command) -> Output {
    enter_before_exec(job, cmd);
    cmd.output().expect("spawn payload")
}

#[allow(unsafe_code)]
fn enter_before_exec(job: &Arc<JobCgroup>, cmd: &mut Command) {
    let job = Arc::clone(job);
    // SAFETY: the closure runs in the forked child before exec. enter_self only opens and
    // writes files through paths built before the fork (no allocation, no locks) on success.
    unsafe {
        cmd.pre_exec(move || job.enter_self().map_err(std::io::Error::other));
    }
}

fn python(code: &str) -> Command {
    let mut cmd = Command::new(PYTHON);
    cmd.args(["-I", "-S", "-c", code]);
    cmd
}

/// Take the job back from the `Arc` once no `Command` holds it, and remove it.
fn remove(job: Arc<JobCgroup>) {
    let job = Arc::try_unwrap(job).expect("no Command still holds the job");
    let paths: Vec<_> = job.paths().into_iter().map(|p| p.to_path_buf()).collect();
    job.kill_all().unwrap();
    job.remove().unwrap();
    for p in paths {
        assert!(!p.exists(), "{} still exists", p.display());
    }
}

#[test]
fn kernel_v1_memory_limit_oom_kills_the_job() {
    let Some(sub) = real_v1("oom") else { return };
    let limits = Limits {
        memory_bytes: 64 << 20,
        pids: 64,
        cpu_quota_us: None,
        cpu_period_us: 100_000,
    };
    let job = Arc::new(sub.0.create_job("oom", &limits).unwrap());
    let out = run_in(
        &job,
        &mut python("b = bytearray(200*1024*1024); b[::4096] = b'x'*len(b[::4096])"),
    );
    assert_eq!(out.status.signal(), Some(SIGKILL), "{out:?}");
    let stats = job.stats().unwrap();
    eprintln!("oom job stats: {stats:?}");
    assert!(stats.oom_kills >= 1, "{stats:?}");
    // memory_limit_hits is not asserted: this kernel leaves v1 failcnt at 0 (see v1 stats).
    assert!(stats.peak_memory_bytes > 32 << 20 && stats.peak_memory_bytes <= 64 << 20);
    remove(job);
}

#[test]
fn kernel_v1_pids_limit_refuses_forks() {
    let Some(sub) = real_v1("pids") else { return };
    let limits = Limits {
        memory_bytes: 256 << 20,
        pids: 5,
        cpu_quota_us: None,
        cpu_period_us: 100_000,
    };
    let job = Arc::new(sub.0.create_job("pids", &limits).unwrap());
    let code = "\
import os, time
kids, refused = [], 0
for _ in range(20):
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(0.5)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print(len(kids), refused)
";
    let out = run_in(&job, &mut python(code));
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The payload itself is one of the 5 tasks: 4 children fit, 16 forks see EAGAIN.
    assert_eq!(stdout.trim(), "4 16");
    let stats = job.stats().unwrap();
    assert!(stats.pids_limit_hits >= 1, "{stats:?}");
    remove(job);
}

#[test]
fn kernel_v1_cpu_quota_throttles_and_usage_is_counted() {
    let Some(sub) = real_v1("cpu") else { return };
    let limits = Limits {
        memory_bytes: 256 << 20,
        pids: 16,
        cpu_quota_us: Some(20_000),
        cpu_period_us: 100_000,
    };
    let job = Arc::new(sub.0.create_job("cpu", &limits).unwrap());
    let started = Instant::now();
    // Spin for one second of wall time; at 20% of a CPU that is ~0.2 s of CPU time.
    let out = run_in(
        &job,
        &mut python("import time\nt = time.monotonic() + 1\nwhile time.monotonic() < t: pass"),
    );
    let wall = started.elapsed();
    assert!(out.status.success(), "{out:?}");
    let usage = Duration::from_nanos(job.cpu_usage_ns().unwrap());
    eprintln!("cpu job: wall {wall:?}, cpu {usage:?} (quota 20%)");
    assert!(usage > Duration::from_millis(100), "{usage:?}");
    assert!(
        usage < Duration::from_millis(500),
        "{usage:?} is not throttled"
    );
    assert_eq!(job.stats().unwrap().cpu_usage_ns, usage.as_nanos() as u64);
    remove(job);
}

#[test]
fn kernel_v1_kill_all_and_reap_stale() {
    let Some(sub) = real_v1("kill") else { return };
    let limits = Limits {
        memory_bytes: 64 << 20,
        pids: 16,
        cpu_quota_us: None,
        cpu_period_us: 100_000,
    };
    let job = Arc::new(sub.0.create_job("kill", &limits).unwrap());
    let mut cmd = Command::new("/bin/sleep");
    cmd.arg("30").stdin(Stdio::null());
    enter_before_exec(&job, &mut cmd);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    job.kill_all().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(SIGKILL));
    remove(job);

    // A job left by a crashed daemon, with a live process in it.
    let stale = Arc::new(sub.0.create_job("stale", &limits).unwrap());
    let mut cmd = Command::new("/bin/sleep");
    cmd.arg("30").stdin(Stdio::null());
    enter_before_exec(&stale, &mut cmd);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let paths: Vec<_> = stale.paths().into_iter().map(|p| p.to_path_buf()).collect();
    drop(stale);
    assert_eq!(sub.0.reap_stale().unwrap(), 1);
    assert_eq!(child.wait().unwrap().signal(), Some(SIGKILL));
    assert!(paths.iter().all(|p| !p.exists()));
}

#[test]
fn kernel_v1_kill_and_remove_sweeps_only_a_cgroup_the_kernel_keeps() {
    let Some(sub) = real_v1("sweep") else { return };
    let limits = Limits {
        memory_bytes: 64 << 20,
        pids: 16,
        cpu_quota_us: Some(50_000),
        cpu_period_us: 100_000,
    };
    // Nothing in it (the usual end of a job): one rmdir per hierarchy.
    let empty = sub.0.create_job("empty", &limits).unwrap();
    let paths: Vec<_> = empty.paths().into_iter().map(|p| p.to_path_buf()).collect();
    assert_eq!(paths.len(), 4);
    empty.kill_and_remove().unwrap();
    assert!(paths.iter().all(|p| !p.exists()));

    // A live process in every hierarchy: the kernel refuses the rmdir (EBUSY), the sweep
    // kills it, and the directories go once it has left.
    let job = Arc::new(sub.0.create_job("busy", &limits).unwrap());
    let mut cmd = Command::new("/bin/sleep");
    cmd.arg("30").stdin(Stdio::null());
    enter_before_exec(&job, &mut cmd);
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let job = Arc::try_unwrap(job).expect("no Command still holds the job");
    let paths: Vec<_> = job.paths().into_iter().map(|p| p.to_path_buf()).collect();
    for p in &paths {
        let procs = std::fs::read_to_string(p.join("cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), child.id().to_string(), "{}", p.display());
    }
    job.kill_and_remove().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(SIGKILL));
    assert!(paths.iter().all(|p| !p.exists()));
}

/// Not asserted: prints the costs for the performance notes (`cargo test -- --nocapture`).
#[test]
fn kernel_v1_timings() {
    let Some(sub) = real_v1("timing") else { return };
    let limits = Limits {
        memory_bytes: 64 << 20,
        pids: 16,
        cpu_quota_us: Some(50_000),
        cpu_period_us: 100_000,
    };
    let mut create_remove = Vec::new();
    for i in 0..50 {
        let t = Instant::now();
        let job = sub.0.create_job(&format!("t{i}"), &limits).unwrap();
        job.remove().unwrap();
        create_remove.push(t.elapsed());
    }

    // What the spawner does with each job's cgroup, less the job: make it with its limits,
    // open the attach files, open the counters, read them, remove it. Thread CPU time.
    let cpu_now = || {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).unwrap();
        Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
    };
    let mut lifecycle = Vec::new();
    for i in 0..200 {
        let t = cpu_now();
        let mut job = sub.0.create_job(&format!("l{i}"), &limits).unwrap();
        drop(job.attach_files().unwrap());
        job.open_counters();
        job.stats().unwrap();
        job.kill_and_remove().unwrap();
        lifecycle.push(cpu_now() - t);
    }

    // enter_self timed inside the child, at low load (50 ms between attaches).
    let job = Arc::new(sub.0.create_job("enter", &limits).unwrap());
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let w: Arc<OwnedFd> = Arc::new(w);
    let mut enter = Vec::new();
    for _ in 0..20 {
        thread::sleep(Duration::from_millis(50));
        let mut cmd = Command::new("/bin/true");
        let (job, w) = (Arc::clone(&job), Arc::clone(&w));
        #[allow(unsafe_code)]
        // SAFETY: runs in the forked child; Instant, enter_self and write(2) do not allocate.
        unsafe {
            cmd.pre_exec(move || {
                let t = Instant::now();
                job.enter_self().map_err(std::io::Error::other)?;
                let ns = t.elapsed().as_nanos() as u64;
                nix::unistd::write(&*w, &ns.to_ne_bytes())?;
                Ok(())
            });
        }
        assert!(cmd.status().unwrap().success());
        let mut buf = [0u8; 8];
        assert_eq!(nix::unistd::read(&r, &mut buf).unwrap(), 8);
        enter.push(Duration::from_nanos(u64::from_ne_bytes(buf)));
    }

    // For comparison, the parent writing a running child's pid into cgroup.procs.
    let mut parent_attach = Vec::new();
    for _ in 0..10 {
        thread::sleep(Duration::from_millis(50));
        let mut child = Command::new("/bin/sleep").arg("5").spawn().unwrap();
        let t = Instant::now();
        for dir in job.paths() {
            super::files::write_value(&dir.join("cgroup.procs"), &child.id().to_string()).unwrap();
        }
        parent_attach.push(t.elapsed());
        child.kill().unwrap();
        child.wait().unwrap();
    }
    remove(job);

    let summary = |name: &str, mut v: Vec<Duration>| {
        v.sort();
        eprintln!(
            "TIMING {name}: n={} min {:?} median {:?} max {:?}",
            v.len(),
            v[0],
            v[v.len() / 2],
            v[v.len() - 1]
        );
    };
    summary(
        "create_job+remove (v1: 4 hierarchies, all limits)",
        create_remove,
    );
    summary(
        "a job's cgroup in the spawner, thread CPU (create_job, attach_files, \
         open_counters, stats, kill_and_remove)",
        lifecycle,
    );
    summary("enter_self in the forked child", enter);
    summary("parent writes child pid to cgroup.procs", parent_attach);
}

/// cgroup2 for real. On the hybrid development machine it has no controllers (v1 owns them), so
/// this covers the controller-free half of v2: moving the daemon's processes into the leaf,
/// refusing jobs without memory/pids, `cgroup.kill` and removal. Needs root and a cgroup2 mount;
/// `VIVARIUM_REQUIRE_CGROUP2=1` turns a skip into a failure.
#[test]
fn kernel_v2_setup_moves_processes_and_reap_kills() {
    let required = std::env::var("VIVARIUM_REQUIRE_CGROUP2").as_deref() == Ok("1");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = super::detect::parse_mountinfo(&mountinfo)
        .into_iter()
        .find(|m| m.fs_type == "cgroup2");
    let why = match (&mount, nix::unistd::geteuid().is_root()) {
        (_, false) => "not root",
        (None, _) => "no cgroup2 mount",
        (Some(_), true) => "",
    };
    if !why.is_empty() {
        assert!(!required, "VIVARIUM_REQUIRE_CGROUP2=1 but {why}");
        eprintln!("SKIPPED cgroup2 kernel test: {why}");
        return;
    }
    let root = mount
        .unwrap()
        .mount_point
        .join(format!("vivarium-test-{}-v2", std::process::id()));
    std::fs::create_dir(&root).unwrap();
    let cg = Cgroups::v2_at(root.clone());
    let guard = DeleteV2Root(root.clone());

    // Another daemon process (the tokio main) already lives in the delegated root.
    let mut other = Command::new("/bin/sleep");
    other.arg("30");
    let root_procs = super::files::c_path(&root.join("cgroup.procs"));
    #[allow(unsafe_code)]
    // SAFETY: runs in the forked child; attach_self opens and writes a prebuilt path.
    unsafe {
        other.pre_exec(move || {
            super::files::attach_self(&root_procs).map_err(std::io::Error::other)
        });
    }
    let mut other = other.spawn().unwrap();

    // setup() in a forked child, which then execs cat to show where it ended up.
    let mut probe = Command::new("/bin/cat");
    probe.arg("/proc/self/cgroup");
    let setup_cg = cg.clone();
    #[allow(unsafe_code)]
    // SAFETY: runs in the forked child of a multi-threaded test; setup allocates, which glibc's
    // fork handlers make safe, and it takes no lock another thread could hold.
    unsafe {
        probe.pre_exec(move || setup_cg.setup().map_err(std::io::Error::other));
    }
    let out = probe.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let leaf = format!("0::/{}/daemon", root.file_name().unwrap().to_str().unwrap());
    let own = String::from_utf8_lossy(&out.stdout);
    assert!(own.lines().any(|l| l.ends_with(&leaf)), "{own}");
    let others = std::fs::read_to_string(format!("/proc/{}/cgroup", other.id())).unwrap();
    assert!(others.lines().any(|l| l.ends_with(&leaf)), "{others}");
    assert_eq!(
        std::fs::read_to_string(root.join("cgroup.procs")).unwrap(),
        ""
    );

    let limits = Limits {
        memory_bytes: 64 << 20,
        pids: 16,
        cpu_quota_us: None,
        cpu_period_us: 100_000,
    };
    if cg.controllers().contains(&super::Controller::Memory) {
        cg.create_job("j", &limits).unwrap().remove().unwrap();
    } else {
        assert!(matches!(
            cg.create_job("j", &limits),
            Err(super::CgroupError::MissingController { .. })
        ));
        assert!(!root.join("j").exists());
    }

    // A stale job with a live process: reap_stale kills it through cgroup.kill.
    let stale = root.join("stale");
    std::fs::create_dir(&stale).unwrap();
    let stale_procs = super::files::c_path(&stale.join("cgroup.procs"));
    let mut victim = Command::new("/bin/sleep");
    victim.arg("30");
    #[allow(unsafe_code)]
    // SAFETY: as above, a prebuilt path and one write.
    unsafe {
        victim.pre_exec(move || {
            super::files::attach_self(&stale_procs).map_err(std::io::Error::other)
        });
    }
    let mut victim = victim.spawn().unwrap();
    assert_eq!(cg.reap_stale().unwrap(), 1);
    assert_eq!(victim.wait().unwrap().signal(), Some(SIGKILL));
    assert!(!stale.exists());

    other.kill().unwrap();
    other.wait().unwrap();
    drop(guard);
    assert!(!root.exists());
}

/// Removes a real v2 test root, its jobs and its leaf (processes must be gone).
struct DeleteV2Root(std::path::PathBuf);

impl Drop for DeleteV2Root {
    fn drop(&mut self) {
        let _ = Cgroups::v2_at(self.0.clone()).reap_stale();
        // Only the test's own children can be in the leaf (never the test process itself,
        // setup runs in a forked child); kill them so a failed test leaves nothing behind.
        let leaf = std::fs::read_to_string(self.0.join("daemon/cgroup.procs")).unwrap_or_default();
        for pid in super::files::parse_pids(&leaf) {
            if pid != std::process::id() as i32 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        if let Err(e) = super::files::remove_tree(&self.0) {
            eprintln!("cgroup2 test cleanup failed: {e:?}");
        }
    }
}
