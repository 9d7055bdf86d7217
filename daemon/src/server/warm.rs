//! The warm path: per profile, a small pool of sandboxes built ahead of time, each with
//! its interpreter already started and waiting for one job on stdin.
//!
//! A warm sandbox is an ordinary job sandbox (same plan, same spawner, same setup order:
//! namespaces, read-only root, capabilities, Landlock, seccomp, cgroup), whose payload
//! runs the profile's interpreter with `-c WARM_BOOTSTRAP` instead of a script. It runs
//! nothing but our bootstrap until a job is delivered; it then runs that one job and
//! ends with it. Deadlines and CPU accounting start when the job is delivered (`Arm`).
//!
//! A pool exists from the first job that asks for its profile (that job runs cold), so
//! a daemon whose clients never use a warm profile never builds a warm sandbox.
//! One maintainer task keeps the pools: it builds one sandbox at a time, only while no
//! job waits in the queue (so refilling never holds back a cold job) and, while jobs
//! run, only for a pool at most half full, stops at the
//! profile's `warm.pool` and at `max_concurrent_jobs` sandboxes in all (the spawner's id
//! slots are sized for running jobs, twice over), empties a pool after `warm.idle_secs`
//! without demand, and throws away sandboxes of a profile replaced by a reload.

use super::{ActiveProfile, Daemon};
use crate::policy::plan;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use vivarium_proto::LandlockStatus;
use vivarium_sandbox::ipc::{FromSpawner, KillCause};

/// A sandbox ready for one job.
pub struct WarmSandbox {
    pub job_id: u64,
    pub events: mpsc::UnboundedReceiver<FromSpawner>,
    /// Write end of the job's stdin: the job header first, then the job's own stdin.
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub landlock: LandlockStatus,
    /// The profile's `warm.packages` environment, in use (not evictable) while the
    /// sandbox lives.
    pub env: Option<super::packages::Ready>,
    active: Arc<ActiveProfile>,
}

impl WarmSandbox {
    /// The packages report a job taking this sandbox gets: its environment was ready
    /// before the job (nothing was installed for it).
    pub fn packages_report(&self) -> Option<vivarium_proto::PackagesReport> {
        self.env.as_ref().map(|ready| {
            let mut report = ready.report();
            report.from_cache = true;
            report.install_ms = 0;
            report
        })
    }

    /// Ended while waiting (killed, or its interpreter failed)?
    fn is_dead(&mut self) -> bool {
        loop {
            match self.events.try_recv() {
                Ok(FromSpawner::Finished { .. }) => return true,
                Ok(_) => continue,
                Err(mpsc::error::TryRecvError::Empty) => return false,
                Err(mpsc::error::TryRecvError::Disconnected) => return true,
            }
        }
    }
}

struct Pool {
    ready: Vec<WarmSandbox>,
    last_demand: Instant,
}

#[derive(Default)]
pub struct WarmPools {
    pools: Mutex<HashMap<String, Pool>>,
    wake: Notify,
}

impl WarmPools {
    /// A ready sandbox of this profile (as activated now), if any. Counts as demand
    /// either way, so an emptied pool refills.
    pub fn take(&self, name: &str, active: &Arc<ActiveProfile>) -> Option<WarmSandbox> {
        let mut pools = self.pools.lock().expect("warm pools lock");
        let pool = pools.entry(name.to_owned()).or_insert_with(|| Pool {
            ready: Vec::new(),
            last_demand: Instant::now(),
        });
        pool.last_demand = Instant::now();
        let mut found = None;
        while let Some(mut w) = pool.ready.pop() {
            if Arc::ptr_eq(&w.active, active) && !w.is_dead() {
                found = Some(w);
                break;
            }
            // Stale (reloaded profile) or dead: dropping closes its stdin and it exits.
        }
        drop(pools);
        self.wake.notify_one();
        found
    }

    /// A job ended: a pool may refill now.
    pub fn nudge(&self) {
        self.wake.notify_one();
    }
}

/// Whether a job can run in a warm sandbox: the profile keeps a pool or a zygote,
/// cgroups carry its limits (a warm sandbox's rlimit stand-ins would count the
/// interpreter's start-up), and, without a zygote, the job's memory and process limits
/// are the profile's own (a pool's sandboxes were built with them; wall, CPU and output
/// limits are applied at delivery; a zygote forks a sandbox with the job's own).
/// A job with packages takes one only if it asks for exactly the profile's
/// `warm.packages` (compared as normalized requirements).
pub fn eligible(
    daemon: &Daemon,
    active: &ActiveProfile,
    limits: &crate::profile::JobLimits,
    packages: &[crate::packages::spec::Req],
) -> bool {
    let warm = &active.profile.file.warm;
    if (warm.pool == 0 && !warm.zygote) || daemon.facts.cgroup.is_none() {
        return false; // the common case: no warm path for this profile
    }
    let own = active.profile.default_limits();
    let mut asked: Vec<&str> = packages.iter().map(|r| r.text.as_str()).collect();
    asked.sort_unstable();
    asked.dedup();
    let offered = active.profile.warm_packages.iter().map(|r| r.text.as_str());
    (warm.zygote || (limits.memory_bytes == own.memory_bytes && limits.pids == own.pids))
        && asked.into_iter().eq(offered)
}

/// The maintainer task (one per daemon).
pub async fn maintain(daemon: Arc<Daemon>) {
    let mut backoff: HashMap<String, Instant> = HashMap::new();
    loop {
        let built = tend(&daemon, &mut backoff).await;
        if !built {
            tokio::select! {
                () = daemon.warm.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    }
}

/// One pass over every pool. Returns whether a sandbox was built (then run again soon).
async fn tend(daemon: &Arc<Daemon>, backoff: &mut HashMap<String, Instant>) -> bool {
    let live = daemon.live();
    let draining = daemon.jobs.is_draining();
    let mut doomed = Vec::new();
    let mut wanted: Option<(String, Arc<ActiveProfile>)> = None;
    {
        let mut pools = daemon.warm.pools.lock().expect("warm pools lock");
        let mut total: usize = pools.values().map(|p| p.ready.len()).sum();
        for (name, pool) in pools.iter_mut() {
            let active = live.profiles.get(name).filter(|a| a.disabled.is_none());
            let target = match active {
                Some(a) if !draining && daemon.facts.cgroup.is_some() => {
                    let w = &a.profile.file.warm;
                    let idle = pool.last_demand.elapsed() > Duration::from_secs(w.idle_secs);
                    if idle {
                        0
                    } else {
                        w.pool as usize
                    }
                }
                _ => 0,
            };
            // Drop the stale, the dead, and the surplus.
            let mut keep = Vec::new();
            for mut w in pool.ready.drain(..) {
                let current = active.is_some_and(|a| Arc::ptr_eq(&w.active, a));
                if w.is_dead() {
                    // Its interpreter ended before any job (a failing `warm.preload`
                    // import, say): build no more of them for a while.
                    tracing::warn!(profile = %name, sandbox = w.job_id, "a warm sandbox ended before its job; check the profile's warm.preload; retrying in 5 s");
                    backoff.insert(name.clone(), Instant::now() + Duration::from_secs(5));
                    total -= 1;
                } else if current && keep.len() < target {
                    keep.push(w);
                } else {
                    total -= 1;
                    doomed.push(w);
                }
            }
            pool.ready = keep;
            // While jobs run, refill only a pool down to half: a sandbox build shares the
            // spawner and the CPUs with the running jobs, so it waits for a quiet moment
            // unless the pool is running low.
            let quiet = daemon.jobs.counts().0 == 0 || pool.ready.len() * 2 <= target;
            if wanted.is_none()
                && pool.ready.len() < target
                && quiet
                && total < daemon.config.max_concurrent_jobs
                && daemon.queued.load(std::sync::atomic::Ordering::SeqCst) == 0
                && backoff.get(name).is_none_or(|t| Instant::now() >= *t)
            {
                wanted = active.map(|a| (name.clone(), a.clone()));
            }
        }
    }
    for w in doomed {
        daemon.spawner.kill(w.job_id, KillCause::Shutdown).await;
    }
    let Some((name, active)) = wanted else {
        return false;
    };
    match build(daemon, &active, &active.profile.default_limits()).await {
        Ok(w) => {
            let mut pools = daemon.warm.pools.lock().expect("warm pools lock");
            if let Some(pool) = pools.get_mut(&name) {
                pool.ready.push(w);
            }
            backoff.remove(&name);
            true
        }
        Err(why) => {
            // A profile whose sandbox cannot start now is retried later, not in a loop.
            tracing::warn!(profile = %name, error = %vivarium_proto::error_chain(&why), "warm sandbox failed; retrying in 5 s");
            backoff.insert(name, Instant::now() + Duration::from_secs(5));
            false
        }
    }
}

/// Why a warm sandbox could not be built, or its interpreter did not become ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WarmError {
    #[error("pipe")]
    Pipe(#[source] std::io::Error),
    /// `output`: what the interpreter wrote before it ended (a preload's traceback).
    #[error("the interpreter ended before it was ready: {output}")]
    EndedEarly { output: String },
    #[error("reading the sandbox's stderr")]
    Read(#[source] std::io::Error),
    #[error("the interpreter was not ready within {} s", .timeout.as_secs())]
    NotReady { timeout: Duration },
    #[error("warm.packages")]
    Packages(#[source] crate::packages::PackageError),
    #[error(transparent)]
    Launch(#[from] super::job::LaunchError),
    #[error("sandbox setup failed at {}: {}", .0.step, .0.detail)]
    Setup(vivarium_sandbox::report::Failure),
    #[error("the sandbox ended before its interpreter started")]
    EndedBeforeStart,
    #[error("the spawner went away")]
    SpawnerGone,
}

/// How long an interpreter may take to start and preload before it counts as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Read the bootstrap's stderr up to its ready byte and hand the pipe back for the job.
/// Text before the byte (warnings printed by a preload import) is logged; an end of file
/// before it is the interpreter's failure, reported with that text.
async fn await_ready(err_r: OwnedFd) -> Result<OwnedFd, WarmError> {
    use tokio::io::AsyncReadExt;
    let mut rx = tokio::net::unix::pipe::Receiver::from_owned_fd(err_r).map_err(WarmError::Pipe)?;
    let mut before = Vec::new();
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        // One byte at a time: nothing past the ready byte may be consumed here.
        let mut byte = [0u8; 1];
        match tokio::time::timeout_at(deadline, rx.read(&mut byte)).await {
            Ok(Ok(1)) if byte[0] == 0 => break,
            Ok(Ok(1)) => {
                if before.len() < 4096 {
                    before.push(byte[0]);
                }
            }
            Ok(Ok(_)) => {
                return Err(WarmError::EndedEarly {
                    output: String::from_utf8_lossy(&before).trim_end().to_owned(),
                })
            }
            Ok(Err(e)) => return Err(WarmError::Read(e)),
            Err(_) => {
                return Err(WarmError::NotReady {
                    timeout: READY_TIMEOUT,
                })
            }
        }
    }
    if !before.is_empty() {
        tracing::warn!(output = %String::from_utf8_lossy(&before).trim_end(), "a warm interpreter wrote this while starting");
    }
    rx.into_nonblocking_fd().map_err(WarmError::Pipe)
}

/// Build one warm sandbox and wait until its interpreter has been exec'd.
/// (`limits`: the profile's own for a pool; a job's own for a sandbox forked for it.)
pub(super) async fn build(
    daemon: &Arc<Daemon>,
    active: &Arc<ActiveProfile>,
    limits: &crate::profile::JobLimits,
) -> Result<WarmSandbox, WarmError> {
    let job_id = daemon
        .next_job
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut plan = plan::build_warm(
        job_id,
        &active.profile,
        limits,
        active.seccomp.clone(),
        active.zygote_seccomp.as_ref(),
        daemon.facts.job_cgroups(),
    );
    // The profile's warm packages: installed (or found in the cache) as for a job.
    let env = if active.profile.warm_packages.is_empty() {
        None
    } else {
        let reqs = &active.profile.warm_packages;
        let ready = super::packages::for_job(daemon, active, reqs, &Notify::new())
            .await
            .map_err(WarmError::Packages)?;
        if plan.kind.zygote().is_some() {
            // A zygote imports its preload with every capability of its user namespace
            // and no Landlock: only from the environment this daemon built for this
            // profile's own request (docs/ARCHITECTURE.md, "What a zygote trusts").
            if let Ok(m) = &daemon.packages {
                m.check_built_for(active, reqs, &ready.entry)
                    .map_err(WarmError::Packages)?;
            }
        }
        crate::packages::install::use_env(&mut plan, &ready.entry.env());
        Some(ready)
    };
    if let vivarium_sandbox::plan::PlanKind::Warm { zygote: Some(z) } = &mut plan.kind {
        // One zygote per profile activation and package environment (a rebuilt
        // environment at the same path is another: its directory's inode and ctime).
        use std::hash::{Hash, Hasher};
        use std::os::unix::fs::MetadataExt;
        let env_dir = env.as_ref().map(|r| r.entry.env());
        let env_id = env_dir
            .as_ref()
            .and_then(|d| std::fs::metadata(d).ok())
            .map(|m| (m.ino(), m.ctime(), m.ctime_nsec()));
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (active.generation, env_dir, env_id).hash(&mut h);
        z.key = h.finish();
        z.generation = active.generation;
    }
    // The script memfd stays empty: the bootstrap writes the job's code itself.
    let super::job::Launched {
        mut events,
        stdin,
        stdout,
        stderr,
    } = super::job::launch(daemon, &plan, b"").await?;
    let landlock = loop {
        match events.recv().await {
            Some(FromSpawner::Running { landlock, .. }) => break landlock,
            Some(FromSpawner::Finished { report, .. }) => {
                return Err(match report.failure {
                    Some(f) => WarmError::Setup(f),
                    None => WarmError::EndedBeforeStart,
                })
            }
            Some(_) => continue,
            None => return Err(WarmError::SpawnerGone),
        }
    };
    // The bootstrap says it is waiting with one NUL byte on stderr; anything else is its
    // failure (a traceback from a preload import, say), reported here.
    let stderr = match await_ready(stderr).await {
        Ok(fd) => fd,
        Err(why) => {
            daemon.spawner.kill(job_id, KillCause::Shutdown).await;
            return Err(why);
        }
    };
    tracing::debug!(job_id, profile = %active.profile.name, "warm sandbox ready");
    Ok(WarmSandbox {
        job_id,
        events,
        stdin,
        stdout,
        stderr,
        landlock,
        env,
        active: active.clone(),
    })
}
