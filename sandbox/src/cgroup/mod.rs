//! The cgroup layer: the daemon's cgroup subtree, one cgroup per job, limits, stats, kill, rmdir.
//!
//! Two backends behind one API:
//! - v1 (hybrid hosts, like the development machine): a dedicated `<subtree>` (default
//!   `vivarium`) at the root of the memory, pids, cpu and cpuacct hierarchies, with a `spawner`
//!   home for the spawner and one directory per job. Never inside a cgroup we did not create.
//!   Attaching is done by the process itself writing `0` to `tasks` (~0.25 ms for all four
//!   hierarchies), never by a parent writing a child's pid (5-17 ms at low load: the
//!   whole-process move waits for an RCU grace period; performance notes, "cgroup v1 attach trap").
//! - v2 (pure cgroup2 hosts): the daemon's delegated cgroup (systemd `Delegate=yes`). The daemon
//!   moves into a `daemon` leaf first, because a cgroup with processes cannot enable
//!   `cgroup.subtree_control` ("no internal processes", EBUSY). Jobs are attached at clone time
//!   with `CLONE_INTO_CGROUP` through [`JobCgroup::dir_fd`].
//!
//! Every function takes its roots as data (`v1_at`, `v2_at`), so the logic is tested on temp
//! dirs; `detect` only reads `/proc/self/mountinfo` and `/proc/self/cgroup` to find them.
//! Kernel reference: Documentation/admin-guide/cgroup-v1/*.rst and cgroup-v2.rst.

mod detect;
mod error;
mod files;
mod v1;
mod v2;

#[cfg(test)]
mod fixture;
#[cfg(test)]
mod kernel_tests;

use std::fmt;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use error::{CgroupError, UnknownName};

/// Names of the daemon's own cgroups; job names may not take them.
const V1_HOME: &str = "spawner";
const V2_LEAF: &str = "daemon";

/// Which cgroup API the host gives us.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Version {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "v1" | "1" => Ok(Version::V1),
            "v2" | "2" => Ok(Version::V2),
            _ => Err(UnknownName(s.to_owned())),
        }
    }
}

/// The controllers the daemon uses. On v2, `Cpuacct` stands for the `usage_usec` line of the
/// core `cpu.stat`, which every v2 cgroup has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
    Cpuacct,
}

impl Controller {
    pub const ALL: [Controller; 4] = [
        Controller::Memory,
        Controller::Pids,
        Controller::Cpu,
        Controller::Cpuacct,
    ];

    /// The kernel's name, as in mount options, `cgroup.controllers` and `/proc/self/cgroup`.
    pub fn as_str(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
            Controller::Cpuacct => "cpuacct",
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Controller {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Controller::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownName(s.to_owned()))
    }
}

/// Per-job limits. Memory and pids are always enforced; CPU only with a quota.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// RAM limit; swap is disabled for the job (memsw / memory.swap.max).
    pub memory_bytes: u64,
    /// Maximum number of tasks (processes and threads).
    pub pids: u32,
    /// CPU time allowed per period; `None` leaves the CPU unthrottled.
    pub cpu_quota_us: Option<u64>,
    pub cpu_period_us: u64,
}

impl Limits {
    /// The kernel accepts periods of 1 ms..1 s and quotas of at least 1 ms.
    const PERIOD_US: std::ops::RangeInclusive<u64> = 1_000..=1_000_000;
    const MIN_QUOTA_US: u64 = 1_000;

    pub fn validate(&self) -> Result<(), CgroupError> {
        let reason = if self.memory_bytes == 0 {
            "memory_bytes must be positive"
        } else if self.pids == 0 {
            "pids must be positive"
        } else if !Self::PERIOD_US.contains(&self.cpu_period_us) {
            "cpu_period_us must be within 1000..=1000000"
        } else if self.cpu_quota_us.is_some_and(|q| q < Self::MIN_QUOTA_US) {
            "cpu_quota_us must be at least 1000"
        } else {
            return Ok(());
        };
        Err(CgroupError::InvalidLimits { reason })
    }
}

/// What a job used and which limits it ran into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub cpu_usage_ns: u64,
    pub peak_memory_bytes: u64,
    pub oom_kills: u64,
    /// Forks refused by pids.max.
    pub pids_limit_hits: u64,
    /// v2 memory.events `max`, v1 memory.failcnt + memory.memsw.failcnt: times usage hit the
    /// limit (reclaim or OOM). Stays 0 on recent v1 kernels (see `v1::Job::stats`).
    pub memory_limit_hits: u64,
}

/// One filesystem of a job's read-only view of its own cgroup ([`Cgroups::job_view`]):
/// mounted at `path` inside the job, in its cgroup namespace, as `fstype` (`cgroup` or
/// `cgroup2`) with mount `data` (v1: the hierarchy's controllers, e.g. `cpu,cpuacct`);
/// `aliases` are links beside it (`/sys/fs/cgroup/cpu -> cpu,cpuacct`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ViewMount {
    pub path: PathBuf,
    pub fstype: String,
    pub data: String,
    pub aliases: Vec<String>,
}

/// The daemon's cgroup subtree.
#[derive(Clone, Debug)]
pub struct Cgroups {
    backend: Backend,
}

#[derive(Clone, Debug)]
enum Backend {
    V1(v1::V1),
    V2(v2::V2),
}

impl Cgroups {
    /// Find the hierarchies from `/proc/self/mountinfo` (and, for v2, our own cgroup from
    /// `/proc/self/cgroup`): v1 when memory, pids, cpu and cpuacct all have a v1 hierarchy
    /// (hybrid hosts), otherwise v2 when our cgroup2 cgroup offers memory, pids and cpu.
    /// `subtree` names the v1 subtree; on v2 the delegated root is the process's own cgroup
    /// (or its parent, when the process already sits in the `daemon` leaf).
    pub fn detect(subtree: &str) -> Result<Self, CgroupError> {
        let mountinfo = files::read_string(Path::new("/proc/self/mountinfo"))?;
        let own = files::read_string(Path::new("/proc/self/cgroup"))?;
        let found = detect::choose(&detect::parse_mountinfo(&mountinfo), &own, |dir| {
            std::fs::read_to_string(dir.join("cgroup.controllers")).ok()
        })?;
        Ok(match found {
            detect::Found::V1(mounts) => Self::v1_at(&mounts, subtree),
            detect::Found::V2(root) => Self::v2_at(root),
        })
    }

    /// v1 with explicit hierarchy roots; co-mounted controllers (`cpu,cpuacct`) share a path.
    pub fn v1_at(controller_mounts: &[(Controller, PathBuf)], subtree: &str) -> Self {
        Self {
            backend: Backend::V1(v1::V1::new(controller_mounts, subtree)),
        }
    }

    /// v2 with an explicit delegated cgroup directory.
    pub fn v2_at(delegated_root: PathBuf) -> Self {
        Self {
            backend: Backend::V2(v2::V2::new(delegated_root)),
        }
    }

    /// What a job is shown of its own cgroup, from the host's `/proc/self/mountinfo`
    /// (see `detect::job_view`).
    pub fn job_view(&self) -> Result<Vec<ViewMount>, CgroupError> {
        let mountinfo = files::read_string(Path::new("/proc/self/mountinfo"))?;
        Ok(detect::job_view(
            &detect::parse_mountinfo(&mountinfo),
            self.version(),
        ))
    }

    pub fn version(&self) -> Version {
        match &self.backend {
            Backend::V1(_) => Version::V1,
            Backend::V2(_) => Version::V2,
        }
    }

    /// The controllers jobs can use, sorted. A profile asking for a limit whose controller is
    /// missing must be refused (fail closed).
    pub fn controllers(&self) -> Vec<Controller> {
        match &self.backend {
            Backend::V1(b) => b.controllers(),
            Backend::V2(b) => b.controllers(),
        }
    }

    /// Create the daemon's cgroups (idempotent). v1: `<subtree>` and `<subtree>/spawner` in each
    /// hierarchy. v2: move every process of the delegated root (the daemon's) into `daemon`,
    /// then enable memory, pids and cpu for children.
    pub fn setup(&self) -> Result<(), CgroupError> {
        match &self.backend {
            Backend::V1(b) => b.setup(),
            Backend::V2(b) => b.setup(),
        }
    }

    /// v1: move the calling thread (the single-threaded spawner) into `<subtree>/spawner`;
    /// the [`Home`] knows where it came from. v2: nothing to do, `setup` already moved the
    /// daemon into its leaf.
    pub fn enter_home(&self) -> Result<Home, CgroupError> {
        match &self.backend {
            Backend::V1(b) => b.enter_home().map(|origins| Home { origins }),
            Backend::V2(_) => Ok(Home::default()),
        }
    }

    /// Create a job cgroup with `limits` applied. Fails if it already exists, if a needed
    /// controller is missing, or on any write; a half-made cgroup is removed again.
    pub fn create_job(&self, name: &str, limits: &Limits) -> Result<JobCgroup, CgroupError> {
        validate_name(name, true)?;
        limits.validate()?;
        let backend = match &self.backend {
            Backend::V1(b) => JobBackend::V1(b.create_job(name, limits)?),
            Backend::V2(b) => JobBackend::V2(b.create_job(name, limits)?),
        };
        Ok(JobCgroup {
            name: name.to_owned(),
            backend,
        })
    }

    /// Kill and remove job cgroups a previous daemon left behind; returns how many (counting
    /// each job once, not once per v1 hierarchy). Call at startup, before creating jobs.
    pub fn reap_stale(&self) -> Result<usize, CgroupError> {
        match &self.backend {
            Backend::V1(b) => b.reap_stale(),
            Backend::V2(b) => b.reap_stale(),
        }
    }

    /// Reap every job, then on v1 remove `spawner` and the subtree (the caller must not be in
    /// them). On v2 the `daemon` leaf stays: the daemon lives in it.
    pub fn remove_subtree(&self) -> Result<(), CgroupError> {
        match &self.backend {
            Backend::V1(b) => b.remove_subtree(),
            Backend::V2(b) => b.reap_stale().map(drop),
        }
    }
}

/// Where the spawner was before [`Cgroups::enter_home`] (v1: its `tasks` file in each
/// hierarchy), so that it can leave its home and remove the whole subtree at shutdown.
#[derive(Debug, Default)]
pub struct Home {
    origins: Vec<std::ffi::CString>,
}

impl Home {
    /// Move the calling thread back to the cgroups it came from (v2: nothing to do).
    pub fn leave(&self) -> Result<(), CgroupError> {
        self.origins.iter().try_for_each(|t| files::attach_self(t))
    }
}

/// One job's cgroup (one directory per v1 hierarchy, or one v2 directory).
#[derive(Debug)]
pub struct JobCgroup {
    name: String,
    backend: JobBackend,
}

#[derive(Debug)]
enum JobBackend {
    V1(v1::Job),
    V2(v2::Job),
}

impl JobCgroup {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's directories, one per v1 hierarchy or the single v2 one.
    pub fn paths(&self) -> Vec<&Path> {
        match &self.backend {
            JobBackend::V1(j) => j.paths(),
            JobBackend::V2(j) => vec![j.path()],
        }
    }

    /// Move the calling thread in by writing `0` to `tasks` (v1) or the calling process via
    /// `cgroup.procs` (v2). Does not allocate on success, so a freshly forked child may call it.
    /// On v1, call it from a single-threaded process only: `tasks` moves one thread.
    pub fn enter_self(&self) -> Result<(), CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.enter_self(),
            JobBackend::V2(j) => j.enter_self(),
        }
    }

    /// The files a process writes `0` to in order to move itself in (v1: `tasks` of each
    /// hierarchy; v2: `cgroup.procs`), opened for writing here, by the spawner: the
    /// kernel checks the opener's credentials, so a job's init in a user namespace can
    /// attach itself with them (a zygote's child, which the spawner did not clone).
    pub fn attach_files(&self) -> Result<Vec<std::os::fd::OwnedFd>, CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.attach_files(),
            JobBackend::V2(j) => j.attach_files(),
        }
    }

    /// v2: the job directory opened `O_RDONLY | O_DIRECTORY | O_CLOEXEC`, for clone3's
    /// `CLONE_INTO_CGROUP`. `None` on v1.
    pub fn dir_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.backend {
            JobBackend::V1(_) => None,
            JobBackend::V2(j) => Some(j.dir_fd()),
        }
    }

    /// CPU time used by the job so far, in nanoseconds; one small read, fine to poll.
    pub fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.cpu_usage_ns(),
            JobBackend::V2(j) => j.cpu_usage_ns(),
        }
    }

    /// The memory the job's cgroup holds now (v2 `memory.current`, v1
    /// `memory.usage_in_bytes`); one small read, fine to poll.
    pub fn memory_bytes(&self) -> Result<u64, CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.memory_bytes(),
            JobBackend::V2(j) => j.memory_bytes(),
        }
    }

    /// Set v2 `memory.high` (`None`: `max`, no throttling): past it the kernel reclaims
    /// and slows the cgroup's allocations down, short of the OOM killer. v1 has no such
    /// knob: returns false, and the caller's polling alone stands guard.
    pub fn set_memory_high(&self, bytes: Option<u64>) -> Result<bool, CgroupError> {
        match &self.backend {
            JobBackend::V1(_) => Ok(false),
            JobBackend::V2(j) => j.set_memory_high(bytes).map(|()| true),
        }
    }

    /// Hold the job's memory at `bytes` (cgroup v1's stand-in for `memory.high`, see
    /// `v1::Job::hold_memory`): an eventfd readable once a task is held there, and the
    /// limit to restore. `None` on v2, which has `memory.high` itself.
    pub fn hold_memory(&self, bytes: u64) -> Result<Option<(OwnedFd, u64)>, CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.hold_memory(bytes).map(Some),
            JobBackend::V2(_) => Ok(None),
        }
    }

    /// Undo [`JobCgroup::hold_memory`], with the limit it returned.
    pub fn release_memory(&self, limit: u64) -> Result<(), CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.release_memory(limit),
            JobBackend::V2(_) => Ok(()),
        }
    }

    /// Open the counter files [`JobCgroup::stats`] reads, so that the end of the job
    /// reads them without opening each: call it while the job runs (after its start).
    pub fn open_counters(&mut self) {
        match &mut self.backend {
            JobBackend::V1(j) => j.open_counters(),
            JobBackend::V2(j) => j.open_counters(),
        }
    }

    pub fn stats(&self) -> Result<Stats, CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.stats(),
            JobBackend::V2(j) => j.stats(),
        }
    }

    /// SIGKILL everything in the job: v2 `cgroup.kill`; v1 (or v2 before 5.14) SIGKILL every pid
    /// in `cgroup.procs` until it reads empty (bounded). Does not wait for the exits.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        match &self.backend {
            JobBackend::V1(j) => j.kill_all(),
            JobBackend::V2(j) => j.kill_all(),
        }
    }

    /// rmdir the job's directories, retrying EBUSY while dying tasks leave. Kill first.
    pub fn remove(self) -> Result<(), CgroupError> {
        match self.backend {
            JobBackend::V1(j) => j.remove(),
            JobBackend::V2(j) => j.remove(),
        }
    }

    /// [`JobCgroup::kill_all`], then [`JobCgroup::remove`], at the cost of one `rmdir` per
    /// directory when the job's processes are gone (the usual end: its init died, and its pid
    /// namespace with it). The kernel removes only a cgroup without tasks (and, on v2,
    /// without child cgroups), so a directory whose first `rmdir` succeeds had nothing left
    /// to kill; one it refuses is swept (`kill_all`'s loop) and removed with retries.
    /// Kill errors are not reported: a directory that cannot be emptied fails its removal.
    pub fn kill_and_remove(self) -> Result<(), CgroupError> {
        match self.backend {
            JobBackend::V1(j) => j.kill_and_remove(),
            JobBackend::V2(j) => j.kill_and_remove(),
        }
    }
}

/// A job name or subtree component: `[A-Za-z0-9_.-]{1,64}`, not starting with a dot. Job names
/// (`job == true`) may not take the daemon's own names.
fn validate_name(name: &str, job: bool) -> Result<(), CgroupError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        && !(job && (name == V1_HOME || name == V2_LEAF));
    if ok {
        Ok(())
    } else {
        Err(CgroupError::InvalidName {
            name: name.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_display_and_from_str() {
        for v in [Version::V1, Version::V2] {
            assert_eq!(v.to_string().parse::<Version>(), Ok(v));
        }
        for c in Controller::ALL {
            assert_eq!(c.to_string().parse::<Controller>(), Ok(c));
        }
        assert_eq!(
            "cpu,cpuacct".parse::<Controller>(),
            Err(UnknownName("cpu,cpuacct".into()))
        );
    }

    #[test]
    fn job_names_are_plain_and_unreserved() {
        for good in ["job-1", "a", "J_2.x", &"x".repeat(64)] {
            assert!(validate_name(good, true).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "a b",
            "spawner",
            "daemon",
            &"x".repeat(65),
        ] {
            assert!(
                matches!(validate_name(bad, true), Err(CgroupError::InvalidName { ref name }) if name == bad),
                "{bad}"
            );
        }
        assert!(validate_name("daemon", false).is_ok());
    }

    #[test]
    fn limits_are_validated() {
        let ok = Limits {
            memory_bytes: 64 << 20,
            pids: 16,
            cpu_quota_us: Some(50_000),
            cpu_period_us: 100_000,
        };
        assert!(ok.validate().is_ok());
        let reason = |l: Limits| match l.validate() {
            Err(CgroupError::InvalidLimits { reason }) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reason(Limits {
                memory_bytes: 0,
                ..ok
            }),
            "memory_bytes must be positive"
        );
        assert_eq!(reason(Limits { pids: 0, ..ok }), "pids must be positive");
        assert_eq!(
            reason(Limits {
                cpu_period_us: 999,
                ..ok
            }),
            "cpu_period_us must be within 1000..=1000000"
        );
        assert_eq!(
            reason(Limits {
                cpu_quota_us: Some(10),
                ..ok
            }),
            "cpu_quota_us must be at least 1000"
        );
    }
}
