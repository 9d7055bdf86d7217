//! cgroup v1: one directory per hierarchy for every cgroup of ours, under `<mount>/<subtree>`.
//!
//! Layout, in each of the memory, pids, cpu and cpuacct hierarchies (co-mounted ones once):
//! `<mount>/<subtree>/spawner` (the spawner's home) and `<mount>/<subtree>/<job>`.
//! Kernel docs: Documentation/admin-guide/cgroup-v1/{memory,pids,cpuacct}.rst,
//! scheduler/sched-bwc.rst for cpu.cfs_*.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::OFlag;

use super::files::{self, attach_self, c_path, make_dir, read_u64, remove_dir, Base, Dir};
use super::{validate_name, CgroupError, Controller, Limits, Stats, V1_HOME};

#[derive(Clone, Debug)]
struct Hierarchy {
    controllers: Vec<Controller>,
    mount: PathBuf,
    /// `<mount>/<subtree>`, opened once: jobs are made and opened relative to it.
    base: Base,
}

#[derive(Clone, Debug)]
pub(super) struct V1 {
    hierarchies: Vec<Hierarchy>,
    subtree: String,
}

impl V1 {
    pub(super) fn new(mounts: &[(Controller, PathBuf)], subtree: &str) -> Self {
        let mut hierarchies: Vec<Hierarchy> = Vec::new();
        for (controller, mount) in mounts {
            match hierarchies.iter_mut().find(|h| h.mount == *mount) {
                Some(h) if !h.controllers.contains(controller) => h.controllers.push(*controller),
                Some(_) => {}
                None => hierarchies.push(Hierarchy {
                    controllers: vec![*controller],
                    mount: mount.clone(),
                    base: Base::new(mount.join(subtree)),
                }),
            }
        }
        Self {
            hierarchies,
            subtree: subtree.to_owned(),
        }
    }

    fn base(&self, h: &Hierarchy) -> PathBuf {
        h.base.path().to_path_buf()
    }

    /// The index of the hierarchy that holds `controller`.
    fn hierarchy(&self, controller: Controller) -> Result<usize, CgroupError> {
        self.hierarchies
            .iter()
            .position(|h| h.controllers.contains(&controller))
            .ok_or(CgroupError::MissingController { controller })
    }

    pub(super) fn controllers(&self) -> Vec<Controller> {
        let mut all: Vec<Controller> = self
            .hierarchies
            .iter()
            .flat_map(|h| h.controllers.iter().copied())
            .collect();
        all.sort();
        all
    }

    pub(super) fn setup(&self) -> Result<(), CgroupError> {
        validate_name(&self.subtree, false)?;
        for h in &self.hierarchies {
            let base = self.base(h);
            make_dir(&base, true)?;
            if h.controllers.contains(&Controller::Memory) {
                enable_memory_hierarchy(&base);
            }
            make_dir(&base.join(V1_HOME), true)?;
            // Held for the spawner's life, from its start: jobs are made relative to it.
            h.base.dir()?;
        }
        Ok(())
    }

    /// Move the calling thread into `<subtree>/spawner` of every hierarchy; returns the
    /// `tasks` files of the cgroups it was in (as far as `/proc/self/cgroup` names them
    /// under a hierarchy's mount), to come back to before the subtree is removed.
    pub(super) fn enter_home(&self) -> Result<Vec<CString>, CgroupError> {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut origins = Vec::with_capacity(self.hierarchies.len());
        for h in &self.hierarchies {
            origins.extend(origin(h, &own).map(|dir| c_path(&dir.join("tasks"))));
            attach_self(&c_path(&self.base(h).join(V1_HOME).join("tasks")))?;
        }
        Ok(origins)
    }

    pub(super) fn create_job(&self, name: &str, limits: &Limits) -> Result<Job, CgroupError> {
        // Fail closed before touching the filesystem.
        let memory = self.hierarchy(Controller::Memory)?;
        let pids = self.hierarchy(Controller::Pids)?;
        let cpu = match limits.cpu_quota_us {
            Some(_) => Some(self.hierarchy(Controller::Cpu)?),
            None => None,
        };
        let bases = (self.hierarchies.iter())
            .map(|h| h.base.dir().cloned())
            .collect::<Result<Vec<_>, _>>()?;

        let mut job = Job {
            name: name.to_owned(),
            bases: Vec::with_capacity(bases.len()),
            dirs: Vec::with_capacity(bases.len()),
            tasks: Vec::with_capacity(bases.len()),
            memory,
            pids,
            cpuacct: self.hierarchy(Controller::Cpuacct).ok(),
            counters: files::Counters::default(),
        };
        for base in bases {
            if let Err(e) = base.mkdir(name) {
                drop(job.remove());
                return Err(e);
            }
            let dir = base.path().join(name);
            job.tasks.push(c_path(&dir.join("tasks")));
            job.dirs.push(dir);
            job.bases.push(base);
        }
        if let Err(e) = job.write_limits(limits, cpu) {
            drop(job.remove());
            return Err(e);
        }
        Ok(job)
    }

    /// Every directory under the subtree except `spawner` is a job of an earlier daemon.
    pub(super) fn reap_stale(&self) -> Result<usize, CgroupError> {
        let mut names = Vec::new();
        for h in &self.hierarchies {
            for dir in files::subdirs(&self.base(h))? {
                if dir.file_name().is_some_and(|n| n == V1_HOME) {
                    continue;
                }
                kill_tree(&dir)?;
                files::remove_tree(&dir)?;
                if let Some(name) = dir.file_name() {
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_owned());
                    }
                }
            }
        }
        Ok(names.len())
    }

    pub(super) fn remove_subtree(&self) -> Result<(), CgroupError> {
        self.reap_stale()?;
        for h in &self.hierarchies {
            let base = self.base(h);
            remove_dir(&base.join(V1_HOME))?;
            remove_dir(&base)?;
        }
        Ok(())
    }
}

/// The directory of `h` that `/proc/self/cgroup` (its text) places the caller in: the line
/// whose controller list is exactly the hierarchy's, its path under the hierarchy's mount.
fn origin(h: &Hierarchy, proc_self_cgroup: &str) -> Option<PathBuf> {
    proc_self_cgroup.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, names, path) = (fields.next()?, fields.next()?, fields.next()?);
        let mut names: Vec<&str> = names.split(',').collect();
        let mut want: Vec<&str> = h.controllers.iter().map(|c| c.as_str()).collect();
        names.retain(|n| Controller::ALL.iter().any(|c| c.as_str() == *n));
        names.sort_unstable();
        want.sort_unstable();
        (names == want && path.starts_with('/') && !path.contains("/../"))
            .then(|| h.mount.join(path.trim_start_matches('/')))
    })
}

/// Hierarchical accounting makes the subtree's usage the sum of its jobs. Kernels since 5.16
/// always have it (writing 0 fails with EINVAL); older ones can only switch it on while the
/// cgroup has no children, which is why this runs before `spawner` is created. Not needed for
/// the jobs' own limits, so a refusal is ignored, not fatal (memory.use_hierarchy stays 0;
/// the spawner, which runs this, has no log subscriber of its own).
fn enable_memory_hierarchy(base: &Path) {
    let file = base.join("memory.use_hierarchy");
    if read_u64(&file).is_ok_and(|v| v == 0) {
        let _ = files::write_value(&file, "1");
    }
}

/// SIGKILL the processes of `dir` and of every cgroup below it.
fn kill_tree(dir: &Path) -> Result<(), CgroupError> {
    for child in files::subdirs(dir)? {
        kill_tree(&child)?;
    }
    files::kill_procs(&dir.join("cgroup.procs"))
}

#[derive(Debug)]
pub(super) struct Job {
    name: String,
    /// The subtree directory of each hierarchy the job has a directory in, in hierarchy
    /// order: the job's files are `<name>/<file>` relative to them.
    bases: Vec<Arc<Dir>>,
    /// `<subtree>/<name>` of each hierarchy, in the same order.
    dirs: Vec<PathBuf>,
    /// `<dir>/tasks` of each directory, ready for an allocation-free `enter_self`.
    tasks: Vec<CString>,
    /// Indices into `bases` and `dirs`.
    memory: usize,
    pids: usize,
    cpuacct: Option<usize>,
    counters: files::Counters,
}

impl Job {
    /// `<name>/<file>`, relative to a hierarchy's subtree directory.
    fn rel(&self, file: &str) -> String {
        format!("{}/{file}", self.name)
    }

    fn write_limits(&self, limits: &Limits, cpu: Option<usize>) -> Result<(), CgroupError> {
        let memory = limits.memory_bytes.to_string();
        let mem = &self.bases[self.memory];
        // A new cgroup starts unlimited and memsw must stay >= the memory limit: memory first.
        mem.write(&self.rel("memory.limit_in_bytes"), &memory)?;
        // memsw (memory + swap) exists with swap accounting; the same value means no swap.
        mem.write_if_present(&self.rel("memory.memsw.limit_in_bytes"), &memory)?;
        // Reclaim page cache instead of swapping anonymous memory. Covered by memsw where it
        // exists, so not worth failing a job over (nor a log line: the spawner has none).
        let _ = mem.write_if_present(&self.rel("memory.swappiness"), "0");
        let pids = &self.bases[self.pids];
        pids.write(&self.rel("pids.max"), &limits.pids.to_string())?;
        if let (Some(cpu), Some(quota)) = (cpu, limits.cpu_quota_us) {
            // The period first: the kernel checks quota/period against the parent's bandwidth.
            let cpu = &self.bases[cpu];
            let period = limits.cpu_period_us.to_string();
            cpu.write(&self.rel("cpu.cfs_period_us"), &period)?;
            cpu.write(&self.rel("cpu.cfs_quota_us"), &quota.to_string())?;
        }
        Ok(())
    }

    pub(super) fn paths(&self) -> Vec<&Path> {
        self.dirs.iter().map(PathBuf::as_path).collect()
    }

    pub(super) fn enter_self(&self) -> Result<(), CgroupError> {
        self.tasks.iter().try_for_each(|t| attach_self(t))
    }

    /// Each directory's `tasks`, opened for writing (see `JobCgroup::attach_files`).
    pub(super) fn attach_files(&self) -> Result<Vec<OwnedFd>, CgroupError> {
        let rel = self.rel("tasks");
        (self.bases.iter())
            .map(|base| {
                base.open_file(&rel, OFlag::O_WRONLY)
                    .map_err(|source| CgroupError::Attach {
                        path: base.path().join(&rel),
                        source,
                    })
            })
            .collect()
    }

    fn cpuacct(&self) -> Result<&Path, CgroupError> {
        self.cpuacct
            .map(|i| self.dirs[i].as_path())
            .ok_or(CgroupError::MissingController {
                controller: Controller::Cpuacct,
            })
    }

    pub(super) fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        self.counters
            .read_u64(&self.cpuacct()?.join("cpuacct.usage"))
    }

    /// Open the files `stats` reads (see [`files::Counters`]).
    pub(super) fn open_counters(&mut self) {
        let memory = |f: &str| (&*self.bases[self.memory], self.rel(f));
        let mut files = vec![
            memory("memory.max_usage_in_bytes"),
            memory("memory.usage_in_bytes"),
            memory("memory.oom_control"),
            memory("memory.failcnt"),
            memory("memory.memsw.failcnt"),
            (&*self.bases[self.pids], self.rel("pids.events")),
        ];
        files.extend((self.cpuacct).map(|i| (&*self.bases[i], self.rel("cpuacct.usage"))));
        self.counters = files::Counters::open(files);
    }

    /// cgroup v1's stand-in for `memory.high` (a session's memory guard): the limit
    /// lowered to `bytes` with the cgroup's OOM killer off, so that a task reaching it
    /// waits in the kernel instead of dying, and an eventfd the kernel signals when one
    /// does (`cgroup.event_control` on `memory.oom_control`). Returns the eventfd and the
    /// limit it replaced ([`Job::release_memory`] puts it back).
    pub(super) fn hold_memory(&self, bytes: u64) -> Result<(OwnedFd, u64), CgroupError> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        use std::os::fd::{AsFd, AsRawFd};
        let mem = &self.bases[self.memory];
        let dir = &self.dirs[self.memory];
        let limit = self.counters.read_u64(&dir.join("memory.limit_in_bytes"))?;
        let io = |file: &str, e: nix::Error| CgroupError::Read {
            path: dir.join(file),
            source: e.into(),
        };
        let efd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| io("eventfd", e))?;
        let oom = mem
            .open_file(&self.rel("memory.oom_control"), OFlag::O_RDONLY)
            .map_err(|e| io("memory.oom_control", e))?;
        let event = format!("{} {}", efd.as_fd().as_raw_fd(), oom.as_raw_fd());
        mem.write(&self.rel("cgroup.event_control"), &event)?;
        mem.write(&self.rel("memory.oom_control"), "1")?;
        if let Err(e) = mem.write(&self.rel("memory.limit_in_bytes"), &bytes.to_string()) {
            // (Usage above `bytes` already: EBUSY. No hold, the OOM killer back on.)
            let _ = mem.write(&self.rel("memory.oom_control"), "0");
            return Err(e);
        }
        Ok((OwnedFd::from(efd), limit))
    }

    /// Undo [`Job::hold_memory`]: the limit back to `limit` (a task held at the guard
    /// goes on), then the OOM killer on.
    pub(super) fn release_memory(&self, limit: u64) -> Result<(), CgroupError> {
        let mem = &self.bases[self.memory];
        mem.write(&self.rel("memory.limit_in_bytes"), &limit.to_string())?;
        mem.write(&self.rel("memory.oom_control"), "0")
    }

    pub(super) fn memory_bytes(&self) -> Result<u64, CgroupError> {
        self.counters
            .read_u64(&self.dirs[self.memory].join("memory.usage_in_bytes"))
    }

    pub(super) fn stats(&self) -> Result<Stats, CgroupError> {
        // A charge is tried against memsw first, then memory, and fails at one of the two, so
        // the hits are the sum. Kernel surprise: recent kernels (seen on 6.18) count failcnt
        // only for the memory counter (`track_failcnt`), and with memsw == limit it is memsw
        // that fails, so on such hosts this stays 0 even after an OOM kill.
        let c = &self.counters;
        let memory = &self.dirs[self.memory];
        let memsw_failcnt = memory.join("memory.memsw.failcnt");
        let memsw_hits = if c.exists(&memsw_failcnt) {
            c.read_u64(&memsw_failcnt)?
        } else {
            0
        };
        Ok(Stats {
            cpu_usage_ns: self.cpu_usage_ns()?,
            peak_memory_bytes: c.read_u64(&memory.join("memory.max_usage_in_bytes"))?,
            oom_kills: c.read_key(&memory.join("memory.oom_control"), "oom_kill")?,
            pids_limit_hits: c.read_key(&self.dirs[self.pids].join("pids.events"), "max")?,
            memory_limit_hits: c
                .read_u64(&memory.join("memory.failcnt"))?
                .saturating_add(memsw_hits),
        })
    }

    pub(super) fn kill_all(&self) -> Result<(), CgroupError> {
        // A task may have entered some hierarchies and not others: sweep each.
        self.dirs
            .iter()
            .try_for_each(|d| files::kill_procs(&d.join("cgroup.procs")))
    }

    pub(super) fn remove(self) -> Result<(), CgroupError> {
        // Try every directory even if one fails, and report the first failure.
        let mut first = Ok(());
        for base in &self.bases {
            let result = base.rmdir(&self.name);
            if first.is_ok() {
                first = result;
            }
        }
        first
    }

    /// [`Job::kill_all`] then [`Job::remove`], per hierarchy, without reading `cgroup.procs`
    /// when there is nothing to kill: the kernel removes only a cgroup without tasks, so a
    /// first `rmdir` that succeeds proves it empty. One the kernel refuses (EBUSY) is swept
    /// and removed as by the two.
    pub(super) fn kill_and_remove(self) -> Result<(), CgroupError> {
        let mut first = Ok(());
        for (base, dir) in self.bases.iter().zip(&self.dirs) {
            if base.try_rmdir(&self.name).is_ok() {
                continue;
            }
            let _ = files::kill_procs(&dir.join("cgroup.procs"));
            let result = base.rmdir(&self.name);
            if first.is_ok() {
                first = result;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::fs;

    use super::super::files;
    use super::super::fixture::{map, snapshot, v1_tree};
    use super::super::{CgroupError, Cgroups, Controller, Limits, Stats};
    use super::{origin, Base, Hierarchy};
    use Controller::{Cpu, Cpuacct, Memory, Pids};

    const LIMITS: Limits = Limits {
        memory_bytes: 64 << 20,
        pids: 5,
        cpu_quota_us: Some(50_000),
        cpu_period_us: 100_000,
    };
    const NO_CPU: Limits = Limits {
        cpu_quota_us: None,
        ..LIMITS
    };

    /// The files a fresh job gets from the fixture's v1 root, with `changes` applied.
    fn fresh_with(root: &std::path::Path, changes: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut files = snapshot(root);
        files.remove("cgroup.sane_behavior");
        files.remove("release_agent");
        files.insert("cgroup.procs".into(), String::new());
        files.insert("tasks".into(), String::new());
        files.extend(map(changes));
        files
    }

    #[test]
    fn setup_and_create_job_write_exactly_the_limits() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Pids], &[Cpu], &[Cpuacct]]);
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        assert_eq!(cg.controllers(), vec![Memory, Pids, Cpu, Cpuacct]);
        cg.setup().unwrap();
        cg.setup().unwrap(); // idempotent
        let job = cg.create_job("job-1", &LIMITS).unwrap();

        let root = |c: &str| tmp.path().join(c);
        let dir = |c: &str| root(c).join("vivarium/job-1");
        assert_eq!(
            job.paths(),
            ["memory", "pids", "cpu", "cpuacct"].map(dir).to_vec()
        );
        assert_eq!(
            snapshot(&dir("memory")),
            fresh_with(
                &root("memory"),
                &[
                    ("memory.limit_in_bytes", "67108864"),
                    ("memory.memsw.limit_in_bytes", "67108864"),
                    ("memory.swappiness", "0"),
                ]
            )
        );
        assert_eq!(
            snapshot(&dir("pids")),
            fresh_with(&root("pids"), &[("pids.max", "5")])
        );
        assert_eq!(
            snapshot(&dir("cpu")),
            fresh_with(
                &root("cpu"),
                &[
                    ("cpu.cfs_period_us", "100000"),
                    ("cpu.cfs_quota_us", "50000")
                ]
            )
        );
        assert_eq!(snapshot(&dir("cpuacct")), fresh_with(&root("cpuacct"), &[]));
        assert!(job.dir_fd().is_none());

        // enter_self / enter_home write "0" to every hierarchy's tasks file.
        job.enter_self().unwrap();
        cg.enter_home().unwrap();
        for c in ["memory", "pids", "cpu", "cpuacct"] {
            assert_eq!(fs::read_to_string(dir(c).join("tasks")).unwrap(), "0");
            let home = root(c).join("vivarium/spawner/tasks");
            assert_eq!(fs::read_to_string(home).unwrap(), "0");
        }

        job.kill_all().unwrap(); // empty cgroup.procs: nothing to kill
        job.remove().unwrap();
        for c in ["memory", "pids", "cpu", "cpuacct"] {
            assert!(!dir(c).exists());
        }
        cg.remove_subtree().unwrap();
        for c in ["memory", "pids", "cpu", "cpuacct"] {
            assert!(!root(c).join("vivarium").exists());
        }
    }

    #[test]
    fn kill_and_remove_removes_the_job_in_every_hierarchy() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Pids], &[Cpu], &[Cpuacct]]);
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        cg.setup().unwrap();
        let job = cg.create_job("j", &LIMITS).unwrap();
        let paths: Vec<_> = job.paths().into_iter().map(|p| p.to_path_buf()).collect();
        assert_eq!(paths.len(), 4);
        job.kill_and_remove().unwrap();
        assert!(paths.iter().all(|p| !p.exists()));
        // The subtree fds stay valid for the next job.
        let job = cg.create_job("j", &LIMITS).unwrap();
        assert_eq!(job.attach_files().unwrap().len(), 4);
        job.kill_and_remove().unwrap();
        cg.remove_subtree().unwrap();
        for c in ["memory", "pids", "cpu", "cpuacct"] {
            assert!(!tmp.path().join(c).join("vivarium").exists());
        }
    }

    #[test]
    fn comounted_cpu_cpuacct_is_one_directory_and_no_quota_leaves_cpu_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Pids], &[Cpu, Cpuacct]]);
        let cg = Cgroups::v1_at(&mounts, "viv");
        cg.setup().unwrap();
        let job = cg.create_job("j", &NO_CPU).unwrap();
        let cpu_root = tmp.path().join("cpu,cpuacct");
        assert_eq!(job.paths().len(), 3);
        assert_eq!(
            snapshot(&cpu_root.join("viv/j")),
            fresh_with(&cpu_root, &[])
        );
        fs::write(cpu_root.join("viv/j/cpuacct.usage"), "123456789\n").unwrap();
        assert_eq!(job.cpu_usage_ns().unwrap(), 123_456_789);
        job.remove().unwrap();
        cg.remove_subtree().unwrap();
    }

    #[test]
    fn stats_come_from_the_v1_files() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Pids], &[Cpu, Cpuacct]]);
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        cg.setup().unwrap();
        let mut job = cg.create_job("s", &LIMITS).unwrap();
        let put = |c: &str, f: &str, v: &str| {
            fs::write(tmp.path().join(c).join("vivarium/s").join(f), v).unwrap()
        };
        put("cpu,cpuacct", "cpuacct.usage", "2000000000\n");
        put("memory", "memory.max_usage_in_bytes", "67108864\n");
        put(
            "memory",
            "memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        );
        put("memory", "memory.failcnt", "2544\n");
        put("memory", "memory.memsw.failcnt", "6\n");
        put("pids", "pids.events", "max 15\n");
        assert_eq!(
            job.stats().unwrap(),
            Stats {
                cpu_usage_ns: 2_000_000_000,
                peak_memory_bytes: 64 << 20,
                oom_kills: 1,
                pids_limit_hits: 15,
                memory_limit_hits: 2550,
            }
        );
        // Opened once, the files are read again from the start at every call.
        job.open_counters();
        put("pids", "pids.events", "max 16\n");
        put("cpu,cpuacct", "cpuacct.usage", "2500000000\n");
        let stats = job.stats().unwrap();
        assert_eq!(
            (stats.pids_limit_hits, stats.cpu_usage_ns),
            (16, 2_500_000_000)
        );
        put("pids", "pids.events", "garbage\n");
        assert!(matches!(
            job.stats(),
            Err(CgroupError::Parse { key: "max", .. })
        ));
        job.remove().unwrap();
        cg.remove_subtree().unwrap();
    }

    #[test]
    fn missing_controllers_fail_before_anything_is_created() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Cpuacct]]);
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        cg.setup().unwrap();
        assert!(matches!(
            cg.create_job("j", &LIMITS),
            Err(CgroupError::MissingController { controller: Pids })
        ));
        assert!(!tmp.path().join("memory/vivarium/j").exists());

        let mounts = v1_tree(tmp.path(), &[&[Memory, Pids]]);
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        cg.setup().unwrap();
        assert!(matches!(
            cg.create_job("j", &LIMITS),
            Err(CgroupError::MissingController { controller: Cpu })
        ));
        let job = cg.create_job("j", &NO_CPU).unwrap();
        // A name in use is refused, not reused.
        assert!(matches!(
            cg.create_job("j", &NO_CPU),
            Err(CgroupError::Mkdir { .. })
        ));
        assert!(matches!(
            job.cpu_usage_ns(),
            Err(CgroupError::MissingController {
                controller: Cpuacct
            })
        ));
        job.remove().unwrap();
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Pids], &[Cpu, Cpuacct]]);
        // No memsw (no swap accounting): not written; no pids.max: the write fails.
        fs::remove_file(tmp.path().join("memory/memory.memsw.limit_in_bytes")).unwrap();
        fs::remove_file(tmp.path().join("pids/pids.max")).unwrap();
        // An old kernel with flat memory accounting: setup switches it on.
        fs::write(tmp.path().join("memory/memory.use_hierarchy"), "0\n").unwrap();
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        cg.setup().unwrap();
        assert_eq!(
            fs::read_to_string(tmp.path().join("memory/vivarium/memory.use_hierarchy")).unwrap(),
            "1"
        );
        let err = cg.create_job("j", &LIMITS).unwrap_err();
        assert!(matches!(err, CgroupError::Write { ref path, ref value, .. }
            if path.ends_with("pids/vivarium/j/pids.max") && value == "5"));
        for c in ["memory", "pids", "cpu,cpuacct"] {
            assert!(!tmp.path().join(c).join("vivarium/j").exists(), "{c}");
        }
    }

    #[test]
    fn reap_stale_removes_every_job_but_keeps_the_spawner_home() {
        let tmp = tempfile::tempdir().unwrap();
        let mounts = v1_tree(tmp.path(), &[&[Memory], &[Pids], &[Cpu, Cpuacct]]);
        let cg = Cgroups::v1_at(&mounts, "vivarium");
        cg.setup().unwrap();
        for name in ["old-1", "old-2"] {
            drop(cg.create_job(name, &LIMITS).unwrap()); // no Drop: as if the daemon crashed
        }
        assert_eq!(cg.reap_stale().unwrap(), 2);
        assert_eq!(cg.reap_stale().unwrap(), 0);
        for c in ["memory", "pids", "cpu,cpuacct"] {
            let left = files::subdirs(&tmp.path().join(c).join("vivarium")).unwrap();
            assert_eq!(left, [tmp.path().join(c).join("vivarium/spawner")]);
        }
        cg.remove_subtree().unwrap();
    }

    #[test]
    fn the_spawners_origin_is_its_line_with_exactly_the_hierarchys_controllers() {
        let cpu = Hierarchy {
            controllers: vec![Cpu, Cpuacct],
            mount: "/sys/fs/cgroup/cpu,cpuacct".into(),
            base: Base::new("/sys/fs/cgroup/cpu,cpuacct/viv".into()),
        };
        let memory = Hierarchy {
            controllers: vec![Memory],
            mount: "/sys/fs/cgroup/memory".into(),
            base: Base::new("/sys/fs/cgroup/memory/viv".into()),
        };
        let text = "12:pids:/user.slice\n5:cpuacct,cpu:/system.slice/x.service\n\
                    4:memory:/\n1:name=systemd:/init.scope\n0::/\n";
        assert_eq!(
            origin(&cpu, text),
            Some("/sys/fs/cgroup/cpu,cpuacct/system.slice/x.service".into())
        );
        assert_eq!(origin(&memory, text), Some("/sys/fs/cgroup/memory/".into()));
        let odd = Hierarchy {
            controllers: vec![Memory, Pids],
            mount: "/m".into(),
            base: Base::new("/m/viv".into()),
        };
        assert_eq!(
            origin(&odd, text),
            None,
            "no line has exactly memory and pids"
        );
        assert_eq!(origin(&memory, "4:memory:/a/../../etc\n"), None);
    }
}
