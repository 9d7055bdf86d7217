//! cgroup v2: jobs are children of the daemon's delegated cgroup, next to the `daemon` leaf.
//!
//! Layout: `<root>/daemon` (every process of the daemon) and `<root>/<job>`. The leaf exists
//! because of the "no internal processes" rule: a cgroup that has processes cannot enable
//! controllers for its children (`cgroup.subtree_control` write fails with EBUSY).
//! Kernel docs: Documentation/admin-guide/cgroup-v2.rst.

use std::ffi::CString;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::files::{
    self, attach_self, c_path, make_dir, parse_controller_list, read_string, Base, Dir,
};
use super::{CgroupError, Controller, Limits, Stats, V2_LEAF};

/// Controllers enabled for the jobs, in `cgroup.subtree_control` syntax order.
const WANTED: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

/// Rounds of moving the root's remaining processes into the leaf (a process may fork while we
/// move its parent; the fork lands in the root and needs another round).
const MOVE_ROUNDS: u32 = 10;

#[derive(Clone, Debug)]
pub(super) struct V2 {
    root: PathBuf,
    /// The root, opened once: jobs are made, opened and removed relative to it.
    base: Base,
}

impl V2 {
    pub(super) fn new(root: PathBuf) -> Self {
        Self {
            base: Base::new(root.clone()),
            root,
        }
    }

    /// What the parent lets this cgroup hand to its children (`cgroup.controllers`), plus
    /// `Cpuacct`, which is the core `cpu.stat` every cgroup has.
    pub(super) fn controllers(&self) -> Vec<Controller> {
        let available = read_string(&self.root.join("cgroup.controllers")).unwrap_or_default();
        let available = parse_controller_list(&available);
        let mut have: Vec<Controller> = WANTED
            .into_iter()
            .filter(|c| available.contains(&c.as_str()))
            .collect();
        have.push(Controller::Cpuacct);
        have.sort();
        have
    }

    pub(super) fn setup(&self) -> Result<(), CgroupError> {
        let leaf = self.root.join(V2_LEAF);
        make_dir(&leaf, true)?;
        let leaf_procs = leaf.join("cgroup.procs");
        // "0" moves the writer's whole process; then whatever else lives in the root (the
        // tokio process when the spawner runs this).
        attach_self(&c_path(&leaf_procs))?;
        self.move_others(&leaf_procs)?;

        let available = read_string(&self.root.join("cgroup.controllers"))?;
        let available = parse_controller_list(&available);
        let enable: Vec<String> = WANTED
            .into_iter()
            .filter(|c| available.contains(&c.as_str()))
            .map(|c| format!("+{c}"))
            .collect();
        if !enable.is_empty() {
            // One write for all: the kernel applies the whole list or none of it.
            files::write_value(&self.root.join("cgroup.subtree_control"), &enable.join(" "))?;
        }
        // Held for the spawner's life, from its start: jobs are made relative to it.
        self.base.dir()?;
        Ok(())
    }

    fn move_others(&self, leaf_procs: &Path) -> Result<(), CgroupError> {
        let root_procs = self.root.join("cgroup.procs");
        for _ in 0..MOVE_ROUNDS {
            let pids = files::parse_pids(&read_string(&root_procs)?);
            if pids.is_empty() {
                return Ok(());
            }
            for pid in pids {
                match files::write_value(leaf_procs, &pid.to_string()) {
                    // Exited in the meantime.
                    Err(CgroupError::Write { source, .. })
                        if source.raw_os_error() == Some(libc::ESRCH) => {}
                    other => other?,
                }
            }
        }
        Err(CgroupError::StillPopulated {
            path: root_procs,
            attempts: MOVE_ROUNDS,
        })
    }

    pub(super) fn create_job(&self, name: &str, limits: &Limits) -> Result<Job, CgroupError> {
        let root = self.base.dir()?;
        root.mkdir(name)?;
        let made = (|| {
            // O_RDONLY, not O_PATH: clone3 takes it for CLONE_INTO_CGROUP.
            let dir = root.open_child(name, OFlag::O_RDONLY)?;
            write_limits(&dir, limits)?;
            Ok(Job {
                procs: c_path(&dir.path().join("cgroup.procs")),
                cpu_stat: dir.path().join("cpu.stat"),
                counters: files::Counters::default(),
                root: Arc::clone(root),
                name: name.to_owned(),
                dir,
            })
        })();
        if made.is_err() {
            drop(root.rmdir(name));
        }
        made
    }

    /// Every child of the root except the `daemon` leaf and names no job can have (a leading
    /// dot) is a job of an earlier daemon. systemd puts `.control` in a delegated unit's
    /// cgroup for `ExecReload=` and other control processes (found by the VM tier); it is
    /// systemd's, never killed or removed here.
    pub(super) fn reap_stale(&self) -> Result<usize, CgroupError> {
        let mut reaped = 0;
        for dir in files::subdirs(&self.root)? {
            if dir
                .file_name()
                .is_some_and(|n| n == V2_LEAF || n.as_encoded_bytes().starts_with(b"."))
            {
                continue;
            }
            kill(&dir)?;
            files::remove_tree(&dir)?;
            reaped += 1;
        }
        Ok(reaped)
    }
}

fn write_limits(dir: &Dir, limits: &Limits) -> Result<(), CgroupError> {
    let memory = limits.memory_bytes.to_string();
    let pids = limits.pids.to_string();
    let cpu = limits
        .cpu_quota_us
        .map(|quota| format!("{quota} {}", limits.cpu_period_us));
    // Every controller the limits need, opened before anything is written: a missing file
    // is a missing controller (fail closed).
    let require = |file: &'static str, value: &str, controller| {
        dir.open_file(file, OFlag::O_WRONLY | OFlag::O_TRUNC)
            .map_err(|e| match e {
                Errno::ENOENT => CgroupError::MissingController { controller },
                e => dir.write_error(file, value, e.into()),
            })
            .map(|fd| (file, fd))
    };
    let memory_max = require("memory.max", &memory, Controller::Memory)?;
    let pids_max = require("pids.max", &pids, Controller::Pids)?;
    let cpu_max = match &cpu {
        Some(value) => Some((require("cpu.max", value, Controller::Cpu)?, value)),
        None => None,
    };
    let write = |(file, fd): (&'static str, OwnedFd), value: &str| {
        files::write_fd(fd, value).map_err(|e| dir.write_error(file, value, e))
    };

    write(memory_max, &memory)?;
    // No swap for jobs; the file exists only with swap accounting (CONFIG_MEMCG_SWAP).
    dir.write_if_present("memory.swap.max", "0")?;
    // On OOM kill the whole job, not one process the job's init might survive.
    dir.write("memory.oom.group", "1")?;
    write(pids_max, &pids)?;
    if let Some((cpu_max, value)) = cpu_max {
        write(cpu_max, value)?;
    }
    Ok(())
}

/// SIGKILL everything in `dir` and below: `cgroup.kill` (5.14+) is one atomic write; older
/// kernels get the v1-style loop, per cgroup.
fn kill(dir: &Path) -> Result<(), CgroupError> {
    let kill_file = dir.join("cgroup.kill");
    if kill_file.exists() {
        return files::write_value(&kill_file, "1");
    }
    for child in files::subdirs(dir)? {
        kill(&child)?;
    }
    files::kill_procs(&dir.join("cgroup.procs"))
}

#[derive(Debug)]
pub(super) struct Job {
    /// The delegated root, which holds the job's directory as `name`.
    root: Arc<Dir>,
    name: String,
    /// The job's directory, opened `O_RDONLY` (clone3 takes it); its files are opened
    /// relative to it.
    dir: Dir,
    procs: CString,
    cpu_stat: PathBuf,
    counters: files::Counters,
}

impl Job {
    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(super) fn dir_fd(&self) -> BorrowedFd<'_> {
        self.dir.fd()
    }

    pub(super) fn enter_self(&self) -> Result<(), CgroupError> {
        attach_self(&self.procs)
    }

    /// `cgroup.procs`, opened for writing (see `JobCgroup::attach_files`).
    pub(super) fn attach_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        let fd = (self.dir.open_file("cgroup.procs", OFlag::O_WRONLY)).map_err(|source| {
            CgroupError::Attach {
                path: self.path().join("cgroup.procs"),
                source,
            }
        })?;
        Ok(vec![fd])
    }

    pub(super) fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        Ok(self
            .counters
            .read_key(&self.cpu_stat, "usage_usec")?
            .saturating_mul(1000))
    }

    /// Open the files `stats` reads (see [`files::Counters`]).
    pub(super) fn open_counters(&mut self) {
        let files = [
            "memory.events",
            "memory.peak",
            "memory.current",
            "pids.events",
            "cpu.stat",
        ]
        .map(|f| (&self.dir, f.to_owned()));
        self.counters = files::Counters::open(files);
    }

    pub(super) fn memory_bytes(&self) -> Result<u64, CgroupError> {
        self.counters.read_u64(&self.path().join("memory.current"))
    }

    pub(super) fn set_memory_high(&self, bytes: Option<u64>) -> Result<(), CgroupError> {
        let value = bytes.map_or_else(|| "max".to_owned(), |b| b.to_string());
        self.dir.write("memory.high", &value)
    }

    pub(super) fn stats(&self) -> Result<Stats, CgroupError> {
        let c = &self.counters;
        let dir = self.path();
        let events = dir.join("memory.events");
        // memory.peak arrived in 5.19; before it the best is the current usage.
        let peak = dir.join("memory.peak");
        let peak = if c.exists(&peak) {
            peak
        } else {
            dir.join("memory.current")
        };
        Ok(Stats {
            cpu_usage_ns: self.cpu_usage_ns()?,
            peak_memory_bytes: c.read_u64(&peak)?,
            oom_kills: c.read_key(&events, "oom_kill")?,
            pids_limit_hits: c.read_key(&dir.join("pids.events"), "max")?,
            memory_limit_hits: c.read_key(&events, "max")?,
        })
    }

    pub(super) fn kill_all(&self) -> Result<(), CgroupError> {
        kill(self.path())
    }

    pub(super) fn remove(self) -> Result<(), CgroupError> {
        let Job { dir, .. } = self;
        let path = dir.path().to_path_buf();
        drop(dir);
        files::remove_tree(&path)
    }

    /// [`Job::kill_all`] then [`Job::remove`], without either when a first `rmdir`
    /// succeeds: the kernel removes only a cgroup without tasks and without children.
    pub(super) fn kill_and_remove(self) -> Result<(), CgroupError> {
        let Job {
            root, name, dir, ..
        } = self;
        let path = dir.path().to_path_buf();
        drop(dir);
        if root.try_rmdir(&name).is_ok() {
            return Ok(());
        }
        let _ = kill(&path);
        files::remove_tree(&path)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;

    use super::super::fixture::{map, snapshot, v2_files, v2_root};
    use super::super::{CgroupError, Cgroups, Controller, Limits, Stats, Version};
    use Controller::{Cpu, Cpuacct, Memory, Pids};

    const LIMITS: Limits = Limits {
        memory_bytes: 64 << 20,
        pids: 5,
        cpu_quota_us: Some(50_000),
        cpu_period_us: 100_000,
    };

    #[test]
    fn setup_moves_the_daemon_into_its_leaf_then_enables_controllers() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path(), &["cpuset", "cpu", "io", "memory", "pids"]);
        let before = snapshot(&root);
        let cg = Cgroups::v2_at(root.clone());
        assert_eq!(cg.version(), Version::V2);
        assert_eq!(cg.controllers(), vec![Memory, Pids, Cpu, Cpuacct]);
        cg.setup().unwrap();

        let mut expected_root = before;
        expected_root.insert("cgroup.subtree_control".into(), "+memory +pids +cpu".into());
        assert_eq!(snapshot(&root), expected_root);
        // The leaf was made before anything was enabled, so it has no controller files.
        let mut expected_leaf = v2_files(&[]);
        expected_leaf.insert("cgroup.procs".into(), "0".into());
        assert_eq!(snapshot(&root.join("daemon")), expected_leaf);
        cg.enter_home().unwrap(); // nothing to do on v2
    }

    #[test]
    fn setup_moves_other_processes_and_gives_up_if_they_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path(), &["memory", "pids"]);
        // A fixture's cgroup.procs never empties, like a process that keeps forking.
        fs::write(root.join("cgroup.procs"), "4242\n4243\n").unwrap();
        let err = Cgroups::v2_at(root.clone()).setup().unwrap_err();
        assert!(
            matches!(err, CgroupError::StillPopulated { ref path, attempts: 10 }
            if *path == root.join("cgroup.procs"))
        );
        assert_eq!(
            fs::read_to_string(root.join("daemon/cgroup.procs")).unwrap(),
            "4243"
        );
        // Controllers are not enabled while the root still has processes.
        assert_eq!(
            fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            ""
        );
    }

    #[test]
    fn create_job_writes_exactly_the_limits_and_opens_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path(), &["cpu", "memory", "pids"]);
        let cg = Cgroups::v2_at(root.clone());
        cg.setup().unwrap();
        let job = cg.create_job("job-1", &LIMITS).unwrap();
        let dir = root.join("job-1");
        assert_eq!(job.paths(), vec![dir.as_path()]);

        let mut expected = v2_files(&["cpu", "memory", "pids"]);
        expected.extend(map(&[
            ("memory.max", "67108864"),
            ("memory.swap.max", "0"),
            ("memory.oom.group", "1"),
            ("pids.max", "5"),
            ("cpu.max", "50000 100000"),
        ]));
        assert_eq!(snapshot(&dir), expected);

        let fd = job.dir_fd().expect("v2 has a directory fd");
        let fd_meta = fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        assert_eq!(fd_meta.ino(), fs::metadata(&dir).unwrap().ino());

        job.enter_self().unwrap();
        assert_eq!(fs::read_to_string(dir.join("cgroup.procs")).unwrap(), "0");
        job.kill_all().unwrap();
        assert_eq!(fs::read_to_string(dir.join("cgroup.kill")).unwrap(), "1");
        job.remove().unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn no_quota_leaves_cpu_max_and_missing_controllers_fail_closed() {
        let tmp = tempfile::tempdir().unwrap();
        // No cpu offered, and no swap accounting.
        let root = v2_root(tmp.path(), &["memory", "pids"]);
        let cg = Cgroups::v2_at(root.clone());
        cg.setup().unwrap();
        assert_eq!(cg.controllers(), vec![Memory, Pids, Cpuacct]);
        assert_eq!(
            fs::read_to_string(root.join("cgroup.subtree_control")).unwrap(),
            "+memory +pids"
        );
        assert!(matches!(
            cg.create_job("j", &LIMITS),
            Err(CgroupError::MissingController { controller: Cpu })
        ));
        assert!(!root.join("j").exists());

        let limits = Limits {
            cpu_quota_us: None,
            ..LIMITS
        };
        let job = cg.create_job("j", &limits).unwrap();
        let mut expected = v2_files(&["memory", "pids"]);
        expected.extend(map(&[
            ("memory.max", "67108864"),
            ("memory.swap.max", "0"),
            ("memory.oom.group", "1"),
            ("pids.max", "5"),
        ]));
        assert_eq!(snapshot(&root.join("j")), expected);
        job.remove().unwrap();

        // Nothing enabled at all: memory is the first thing missing.
        let bare_parent = tmp.path().join("bare");
        fs::create_dir(&bare_parent).unwrap();
        let bare = v2_root(&bare_parent, &[]);
        let cg = Cgroups::v2_at(bare);
        cg.setup().unwrap();
        assert!(matches!(
            cg.create_job("j", &limits),
            Err(CgroupError::MissingController { controller: Memory })
        ));
    }

    #[test]
    fn stats_come_from_the_v2_files() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path(), &["cpu", "memory", "pids"]);
        let cg = Cgroups::v2_at(root.clone());
        cg.setup().unwrap();
        let mut job = cg.create_job("s", &LIMITS).unwrap();
        let put = |f: &str, v: &str| fs::write(root.join("s").join(f), v).unwrap();
        put(
            "cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 3\n",
        );
        put("memory.peak", "70000000\n");
        put("memory.current", "123\n");
        put(
            "memory.events",
            "low 0\nhigh 0\nmax 31\noom 1\noom_kill 2\noom_group_kill 1\n",
        );
        put("pids.events", "max 7\n");
        let expected = Stats {
            cpu_usage_ns: 1_500_000,
            peak_memory_bytes: 70_000_000,
            oom_kills: 2,
            pids_limit_hits: 7,
            memory_limit_hits: 31,
        };
        assert_eq!(job.stats().unwrap(), expected);
        assert_eq!(job.cpu_usage_ns().unwrap(), 1_500_000);
        // Opened once, the files are read again from the start at every call.
        job.open_counters();
        put("pids.events", "max 8\n");
        put("cpu.stat", "usage_usec 2500\n");
        let stats = job.stats().unwrap();
        assert_eq!((stats.pids_limit_hits, stats.cpu_usage_ns), (8, 2_500_000));
        put("pids.events", "max 7\n");
        put("cpu.stat", "usage_usec 1500\n");
        // Before 5.19 there is no memory.peak: fall back to memory.current.
        job = cg.create_job("t", &LIMITS).unwrap();
        let put = |f: &str, v: &str| fs::write(root.join("t").join(f), v).unwrap();
        put("cpu.stat", "usage_usec 1500\n");
        put("memory.current", "123\n");
        put("memory.events", "max 31\noom_kill 2\n");
        put("pids.events", "max 7\n");
        fs::remove_file(root.join("t/memory.peak")).unwrap();
        job.open_counters();
        assert_eq!(
            job.stats().unwrap(),
            Stats {
                peak_memory_bytes: 123,
                ..expected
            }
        );
        job.remove().unwrap();
    }

    #[test]
    fn kill_and_remove_takes_one_rmdir_or_kills_and_removes_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path(), &["cpu", "memory", "pids"]);
        let cg = Cgroups::v2_at(root.clone());
        cg.setup().unwrap();
        let job = cg.create_job("a", &LIMITS).unwrap();
        assert_eq!(job.attach_files().unwrap().len(), 1);
        job.kill_and_remove().unwrap();
        assert!(!root.join("a").exists());
        // A cgroup the job made below its own keeps the first rmdir from succeeding.
        let job = cg.create_job("b", &LIMITS).unwrap();
        fs::create_dir(root.join("b/inner")).unwrap();
        fs::write(root.join("b/inner/cgroup.kill"), "").unwrap();
        job.kill_and_remove().unwrap();
        assert!(!root.join("b").exists());
        assert!(root.join("daemon").is_dir());
    }

    #[test]
    fn reap_stale_kills_and_removes_jobs_but_not_the_leaf() {
        let tmp = tempfile::tempdir().unwrap();
        let root = v2_root(tmp.path(), &["cpu", "memory", "pids"]);
        let cg = Cgroups::v2_at(root.clone());
        cg.setup().unwrap();
        let limits = Limits {
            cpu_quota_us: None,
            ..LIMITS
        };
        for name in ["a", "b", "c"] {
            drop(cg.create_job(name, &limits).unwrap());
        }
        // A cgroup the job made below its own (possible with nsdelegate).
        fs::create_dir(root.join("c/inner")).unwrap();
        // systemd's cgroup for ExecReload= in a delegated unit: not ours, left alone.
        fs::create_dir(root.join(".control")).unwrap();
        fs::write(root.join(".control/cgroup.kill"), "").unwrap();
        assert_eq!(cg.reap_stale().unwrap(), 3);
        let mut left: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .collect();
        left.sort();
        assert_eq!(left, [root.join(".control"), root.join("daemon")]);
        assert_eq!(
            fs::read_to_string(root.join(".control/cgroup.kill")).unwrap(),
            ""
        );
        cg.remove_subtree().unwrap();
        assert!(root.join("daemon").is_dir());
        assert!(root.join(".control").is_dir());
    }
}
