//! The typed protocol between the server and the privileged spawner, over a
//! SOCK_SEQPACKET socketpair. `Spawn` carries five fds by SCM_RIGHTS: the sealed code
//! memfd, the job's stdin, stdout and stderr pipe ends, and init's end of the outputs
//! link.

use crate::plan::JobPlan;
use crate::report::{Failure, WaitStatus};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use vivarium_proto::{CgroupVersion, LandlockStatus};

/// The spawner is started as `vivariumd <SPAWNER_ARG>` with the link on this fd.
pub const SPAWNER_ARG: &str = "__spawner";
pub const LINK_FD: i32 = 3;
/// Link frames are small: plans carry no code (that travels in a memfd).
pub const MAX_LINK_FRAME: usize = 256 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SpawnerConfig {
    pub state_dir: PathBuf,
    pub cgroup_subtree: String,
    pub id_base: u32,
    pub max_jobs: u32,
    /// The daemon runs as an ordinary user: single-id maps, and cgroups only where a
    /// delegated subtree is usable.
    pub rootless: bool,
    /// The server builds test-only plans (`Layers::weakened`: the attack suite's binary,
    /// `vivariumd::policy::weaken`): the spawner refuses to start without
    /// `VIVARIUM_TEST_WEAKENED=1`, and refuses such plans unless this is set. Set by the
    /// server itself, never by a client.
    pub weakened: bool,
}

/// The variable without which a spawner refuses a weakened configuration (and the test
/// binary refuses to start): [`SpawnerConfig::weakened`].
pub const TEST_WEAKENED_ENV: &str = "VIVARIUM_TEST_WEAKENED";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToSpawner {
    /// First message: set up the cgroup tree and report `Ready`.
    Init(SpawnerConfig),
    /// Start a job (with 4 fds attached).
    Spawn(Box<JobPlan>),
    /// A warm job's code has been delivered: its deadlines (and CPU accounting) start now.
    Arm {
        job_id: u64,
        wall_ms: u64,
        cpu_ms: u64,
    },
    /// Kill a job; `Finished` follows.
    Kill { job_id: u64, cause: KillCause },
    /// Kill every job, clean up, exit.
    Shutdown,
    /// The profiles were reloaded: every zygote ends once it has no running job (new
    /// ones start for the new activations). Appended: older variants keep their tags.
    ZygotesStale,
    /// What a job uses now (a session's, between and after cells): answered with
    /// `FromSpawner::Stats` on the job's route.
    Stats { job_id: u64 },
    /// A session's memory guard: with `bytes` > 0, set cgroup v2 `memory.high` to it and,
    /// while `watch` (a cell runs), stand guard: on v1 the kernel holds the job at
    /// `bytes` (its limit lowered to it, the OOM killer off, an eventfd on the OOM event);
    /// on v2 its usage is sampled. Once reached (once per watch): the hold released,
    /// `FromSpawner::MemoryHigh` sent, then SIGINT to the job's interpreter.
    Guard {
        job_id: u64,
        bytes: u64,
        watch: bool,
    },
}

/// What a job's cgroup says it uses now (`ToSpawner::Stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveStats {
    /// CPU time since the job was armed (a warm sandbox's start-up is not counted).
    pub cpu_ms: u64,
    pub memory_bytes: u64,
    pub peak_memory_bytes: u64,
    pub oom_kills: u64,
}

/// Why the spawner killed a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KillCause {
    Timeout,
    CpuLimit,
    OutputLimit,
    Cancelled,
    Shutdown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum FromSpawner {
    Ready {
        /// `None`: no cgroup is usable (rootless without delegation); `cgroup_problem`
        /// says why.
        cgroup: Option<CgroupVersion>,
        controllers: Vec<String>,
        cgroup_problem: Option<String>,
        landlock_abi: u32,
        /// What each job is shown of its own cgroup (`JobPlan::cgroup_view`); empty
        /// without cgroups.
        cgroup_view: Vec<crate::cgroup::ViewMount>,
    },
    InitFailed(String),
    /// The payload exec'd the interpreter.
    Running {
        job_id: u64,
        landlock: LandlockStatus,
    },
    Finished {
        job_id: u64,
        report: Box<JobReport>,
    },
    /// A job with `NetworkPlan::Egress`: the listener on `127.0.0.1:EGRESS_PORT` in its
    /// network namespace, attached (SCM_RIGHTS). Sent right after the clone, before any
    /// other message about the job. Appended: older variants keep their tags.
    Egress {
        job_id: u64,
        #[serde(skip)]
        listener: Passed,
    },
    /// A job with `JobPlan::export`: an open directory fd (attached) to that path in the
    /// sandbox, taken once the payload runs; or why it could not be opened.
    Exported {
        job_id: u64,
        error: Option<String>,
        #[serde(skip)]
        dir: Passed,
    },
    /// One of the spawner's own log lines, for the server's `tracing` (so every line the
    /// daemon writes has the configured `log_format`). May come at any time, before
    /// `Ready` too. Appended: older variants keep their tags.
    Log {
        level: LogLevel,
        message: String,
    },
    /// The answer to `ToSpawner::Stats` (all zero for a job without a cgroup, or one
    /// that is gone). Appended: older variants keep their tags.
    Stats {
        job_id: u64,
        stats: LiveStats,
    },
    /// A watched job's memory reached its guard (`ToSpawner::Guard`).
    MemoryHigh {
        job_id: u64,
        memory_bytes: u64,
    },
}

/// The level of a [`FromSpawner::Log`] line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LogLevel {
    Error,
    Warn,
}

impl FromSpawner {
    /// How many fds travel with this message.
    pub fn fds_expected(&self) -> usize {
        match self {
            FromSpawner::Egress { .. } => 1,
            FromSpawner::Exported { error: None, .. } => 1,
            _ => 0,
        }
    }

    /// Attach the fds received with this message (in order).
    pub fn attach(&mut self, fds: Vec<std::os::fd::OwnedFd>) {
        let mut fds = fds.into_iter();
        match self {
            FromSpawner::Egress { listener, .. } => *listener = Passed::new(fds.next()),
            FromSpawner::Exported { dir, .. } => *dir = Passed::new(fds.next()),
            _ => {}
        }
    }
}

/// An fd that travelled beside a link message (SCM_RIGHTS), not in its bytes. The
/// receiver takes it once ([`Passed::take`]); a clone shares it.
#[derive(Debug, Clone, Default)]
pub struct Passed(Option<std::sync::Arc<std::sync::Mutex<Option<std::os::fd::OwnedFd>>>>);

impl Passed {
    pub fn new(fd: Option<std::os::fd::OwnedFd>) -> Passed {
        Passed(fd.map(|fd| std::sync::Arc::new(std::sync::Mutex::new(Some(fd)))))
    }

    /// The fd, if it came and nobody took it yet.
    pub fn take(&self) -> Option<std::os::fd::OwnedFd> {
        self.0
            .as_ref()
            .and_then(|m| m.lock().unwrap_or_else(|e| e.into_inner()).take())
    }
}

/// What the spawner knows about an ended job: evidence, not conclusions (the server
/// turns it into an `Outcome`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReport {
    /// The payload's wait status, if init saw it end.
    pub exit: Option<WaitStatus>,
    /// A sandbox step that failed; the code never ran.
    pub failure: Option<Failure>,
    pub killed: Option<KillCause>,
    pub landlock: Option<LandlockStatus>,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub peak_memory_bytes: u64,
    pub oom_kills: u64,
    pub pids_limit_hits: u64,
    pub memory_limit_hits: u64,
    pub disk_full: bool,
    pub cgroup: Option<CgroupVersion>,
    /// The seccomp filters installed when they are not the profile's own count (a job
    /// forked from a zygote).
    #[serde(default)]
    pub seccomp_filters: Option<u32>,
    /// The job had a time namespace of its own (clocks near zero).
    #[serde(default)]
    pub time_namespace: bool,
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_LINK_FRAME>()
}

pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(msg, config()).expect("link messages always encode")
}

pub fn decode<T: serde::de::DeserializeOwned>(buf: &[u8]) -> Option<T> {
    match bincode::serde::decode_from_slice(buf, config()) {
        Ok((msg, used)) if used == buf.len() => Some(msg),
        _ => None,
    }
}
