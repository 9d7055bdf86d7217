//! The warm path: per profile, a pool of sandboxes built ahead of time, each with its
//! interpreter already started and waiting for one job on stdin.
//!
//! A warm sandbox is an ordinary job sandbox (same plan, same spawner, same setup order:
//! namespaces, read-only root, capabilities, Landlock, seccomp, cgroup), whose payload
//! runs the profile's interpreter with `-c WARM_BOOTSTRAP` instead of a script. It runs
//! nothing but our bootstrap until a job is delivered; it then runs that one job and
//! ends with it. Deadlines and CPU accounting start when the job is delivered (`Arm`).
//!
//! A pool's size adapts: it starts at the profile's `warm.pool` (its floor), grows by one
//! for each job that finds it empty or takes its last sandbox, up to `warm.pool_max`, and
//! steps back down by one per `warm.shrink_secs` in which no job found it empty. A
//! `warm.keep` pool (the shipped default's) is built before the daemon serves and kept
//! however long no job comes; any other exists from the first job that asks for its
//! profile (that job runs cold) and is emptied after `warm.idle_secs` without one.
//!
//! One maintainer task keeps the pools: it builds one sandbox at a time, only while no
//! job waits in the queue (so refilling never holds back a cold job) and, while jobs
//! run, only for a pool at most half full (below half while a job that took one of its
//! sandboxes runs: the refill its take asked for waits until that job's outcome is sent,
//! so it does not slow that job); it stops at the pool's size and at
//! `max_ready_sandboxes` (and `max_concurrent_jobs`: the spawner's id slots are sized for
//! running jobs, twice over) sandboxes in all, and throws away sandboxes of a profile
//! replaced by a reload.

use super::{ActiveProfile, Daemon};
use crate::policy::plan;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, Notify};
use vivarium_proto::LandlockStatus;
use vivarium_sandbox::ipc::{FromSpawner, KillCause};
use vivarium_sandbox::plan::WARM_BOOTSTRAP;

/// What a pool holds: sandboxes for one job each, or for sessions (the session
/// bootstrap's cell loop, with a control link for stdin: docs/ARCHITECTURE.md,
/// "Sessions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Job,
    Session,
}

/// A pool: a profile's sandboxes of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub profile: String,
    pub kind: Kind,
}

impl PoolKey {
    pub fn job(profile: &str) -> PoolKey {
        PoolKey {
            profile: profile.to_owned(),
            kind: Kind::Job,
        }
    }

    pub fn session(profile: &str) -> PoolKey {
        PoolKey {
            profile: profile.to_owned(),
            kind: Kind::Session,
        }
    }

    /// The pool's floor and cap for `active` (`[warm]`'s, or `[session]`'s).
    fn floor_and_cap(&self, active: &ActiveProfile) -> (u32, u32) {
        let f = &active.profile.file;
        match self.kind {
            Kind::Job => (f.warm.pool, f.warm.pool_cap()),
            Kind::Session => (f.session.pool, f.session.pool_cap()),
        }
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Job => f.write_str(&self.profile),
            Kind::Session => write!(f, "{} (sessions)", self.profile),
        }
    }
}

/// A sandbox ready for one job (or one session).
pub struct WarmSandbox {
    pub job_id: u64,
    pub events: mpsc::UnboundedReceiver<FromSpawner>,
    /// Write end of the job's stdin: the job header first, then the job's own stdin.
    /// A session's: the daemon's end of its control link.
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Our end of its init's outputs link (see `job::Launched::outputs`).
    pub outputs: OwnedFd,
    pub landlock: LandlockStatus,
    /// The profile's `warm.packages` environment, in use (not evictable) while the
    /// sandbox lives.
    pub env: Option<super::packages::Ready>,
    /// Forked from the profile's zygote (else built by a cold start).
    pub forked: bool,
    /// Taken from a pool (else built, or forked, for the job that has it).
    pub was_ready: bool,
    /// Set when taken from a pool: the pool defers its refill until this is dropped
    /// (the job that took the sandbox is over), see [`Taker`].
    pub taker: Option<Taker>,
    active: Arc<ActiveProfile>,
}

/// A job that took a ready sandbox from a pool and has not finished yet. While one is
/// alive, its pool refills only once it has fallen below half of its size: a refill is a
/// whole cold sandbox build (~10-20 ms of CPU, and the spawner's attention), which on a
/// small machine would compete with the very job whose take caused it. Dropping it (after
/// the job's outcome is sent) wakes the maintainer.
pub struct Taker {
    pools: Arc<Mutex<HashMap<PoolKey, Pool>>>,
    wake: Arc<Notify>,
    name: PoolKey,
}

impl Drop for Taker {
    fn drop(&mut self) {
        if let Some(pool) = self
            .pools
            .lock()
            .expect("warm pools lock")
            .get_mut(&self.name)
        {
            pool.takers = pool.takers.saturating_sub(1);
        }
        self.wake.notify_one();
    }
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
    /// The size the pool is kept at now: its floor (`warm.pool`), grown by jobs that
    /// found it empty, up to `warm.pool_max`.
    size: usize,
    /// When `size` last grew or stepped down.
    resized: Instant,
    /// The maintainer is building a sandbox for this pool, of this activation.
    building: Option<Arc<ActiveProfile>>,
    /// A job that found the pool empty while that build was under way waits for it here
    /// (one job per build): the build is further along than a cold start would be.
    claim: Option<oneshot::Sender<WarmSandbox>>,
    /// Jobs running in sandboxes taken from this pool ([`Taker`]s alive).
    takers: usize,
}

impl Pool {
    fn new(floor: u32) -> Pool {
        Pool {
            ready: Vec::new(),
            last_demand: Instant::now(),
            size: floor as usize,
            resized: Instant::now(),
            building: None,
            claim: None,
            takers: 0,
        }
    }

    /// The sandboxes this pool of `active` should hold now: its size, which first steps
    /// one down towards the floor if `shrink_secs` have passed since it last changed;
    /// none once idle for `idle_secs` (unless kept).
    fn target(&mut self, key: &PoolKey, active: &ActiveProfile) -> usize {
        let w = &active.profile.file.warm;
        let (floor, cap) = key.floor_and_cap(active);
        let floor = floor as usize;
        self.size = self.size.clamp(floor, cap as usize);
        if self.size > floor && self.resized.elapsed() >= Duration::from_secs(w.shrink_secs) {
            self.size -= 1;
            self.resized = Instant::now();
        }
        let idle = self.last_demand.elapsed() > Duration::from_secs(w.idle_secs);
        if idle && !w.keep {
            0
        } else {
            self.size
        }
    }
}

#[derive(Default)]
pub struct WarmPools {
    /// The warm bootstrap compiled ahead, per interpreter.
    pub code: super::warm_code::WarmCode,
    pools: Arc<Mutex<HashMap<PoolKey, Pool>>>,
    wake: Arc<Notify>,
    /// Builds that failed (for [`prefill`], which stops waiting for a pool that cannot
    /// be built).
    failures: std::sync::atomic::AtomicU64,
}

/// What the pools hold now, per pool: `(ready, size)`.
pub type PoolSizes = Vec<(PoolKey, usize, usize)>;

/// What [`WarmPools::take`] found.
pub enum Take {
    Ready(Box<WarmSandbox>),
    /// None ready, but one is being built for the pool: it is this job's when done
    /// (the sender is dropped if the build fails).
    Building(oneshot::Receiver<WarmSandbox>),
    None,
}

impl Take {
    /// The sandbox, waiting at most `within` for one under way (past that, or if its
    /// build failed, none: the job starts another way, and a sandbox finished later
    /// joins the pool).
    pub async fn sandbox(self, within: Duration) -> Option<WarmSandbox> {
        match self {
            Take::Ready(w) => Some(*w),
            Take::Building(rx) => tokio::time::timeout(within, rx).await.ok()?.ok(),
            Take::None => None,
        }
    }
}

impl WarmPools {
    /// A ready sandbox of this profile (as activated now), or the one being built for
    /// it if no other job waits for that. Counts as demand either way, so an emptied
    /// pool refills, and one found empty grows.
    pub fn take(&self, name: &PoolKey, active: &Arc<ActiveProfile>) -> Take {
        let (floor, cap) = name.floor_and_cap(active);
        let mut pools = self.pools.lock().expect("warm pools lock");
        let pool = pools
            .entry(name.clone())
            .or_insert_with(|| Pool::new(floor));
        pool.last_demand = Instant::now();
        let mut found = None;
        while let Some(mut w) = pool.ready.pop() {
            if Arc::ptr_eq(&w.active, active) && !w.is_dead() {
                w.was_ready = true;
                pool.takers += 1;
                w.taker = Some(Taker {
                    pools: self.pools.clone(),
                    wake: self.wake.clone(),
                    name: name.clone(),
                });
                found = Some(w);
                break;
            }
            // Stale (reloaded profile) or dead: dropping closes its stdin and it exits.
        }
        // Demand beyond what the pool holds: it grows (a burst), up to its cap.
        if pool.ready.is_empty() && pool.size < cap as usize {
            pool.size += 1;
            pool.resized = Instant::now();
        }
        let take = match found {
            Some(w) => Take::Ready(Box::new(w)),
            None if pool.claim.as_ref().is_none_or(|c| c.is_closed())
                && pool
                    .building
                    .as_ref()
                    .is_some_and(|b| Arc::ptr_eq(b, active)) =>
            {
                let (tx, rx) = oneshot::channel();
                pool.claim = Some(tx);
                Take::Building(rx)
            }
            None => Take::None,
        };
        drop(pools);
        self.wake.notify_one();
        take
    }

    /// A job ended: a pool may refill now.
    pub fn nudge(&self) {
        self.wake.notify_one();
    }

    /// Each pool's ready sandboxes and size, by profile name (for the status line and
    /// tests).
    pub fn sizes(&self) -> PoolSizes {
        let pools = self.pools.lock().expect("warm pools lock");
        let mut sizes: PoolSizes = pools
            .iter()
            .map(|(name, p)| (name.clone(), p.ready.len(), p.size))
            .collect();
        sizes.sort();
        sizes
    }
}

/// The most sandboxes all pools may hold ready at once.
fn ready_limit(daemon: &Daemon) -> usize {
    daemon
        .live()
        .config
        .max_ready_sandboxes
        .min(daemon.config.max_concurrent_jobs)
}

/// Whether `active` keeps this pool built before the daemon serves and while it is
/// idle (`warm.keep`, for its job pool and its session pool alike).
fn kept(daemon: &Daemon, key: &PoolKey, active: &ActiveProfile) -> bool {
    let f = &active.profile.file;
    let floor = key.floor_and_cap(active).0;
    let enabled = key.kind == Kind::Job || f.session.enabled;
    f.warm.keep
        && floor > 0
        && enabled
        && active.disabled.is_none()
        && daemon.facts.cgroup.is_some()
}

/// Every pool a profile may keep.
fn pool_keys(name: &str) -> [PoolKey; 2] {
    [PoolKey::job(name), PoolKey::session(name)]
}

/// Wait (at most `within`) until every `warm.keep` pool holds its floor, so that the
/// first jobs after a start take the fast path; returns early if a build fails (the
/// maintainer retries it later, logged).
pub async fn prefill(daemon: &Arc<Daemon>, within: Duration) {
    let failures = || {
        daemon
            .warm
            .failures
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    let failed_before = failures();
    let deadline = Instant::now() + within;
    let started = Instant::now();
    loop {
        let live = daemon.live();
        let limit = ready_limit(daemon);
        let mut wanted = 0;
        let mut have = 0;
        {
            let pools = daemon.warm.pools.lock().expect("warm pools lock");
            for (name, active) in &live.profiles {
                for key in pool_keys(name).iter().filter(|k| kept(daemon, k, active)) {
                    wanted += key.floor_and_cap(active).0 as usize;
                    have += pools.get(key).map_or(0, |p| p.ready.len());
                }
            }
        }
        let wanted = wanted.min(limit);
        if have >= wanted {
            if wanted > 0 {
                tracing::info!(
                    sandboxes = have,
                    ms = started.elapsed().as_millis() as u64,
                    "warm pools ready"
                );
            }
            return;
        }
        if failures() != failed_before || Instant::now() >= deadline {
            tracing::warn!(ready = have, wanted, "serving before the warm pools are full (see the warnings above); their jobs start cold until they are");
            return;
        }
        daemon.warm.wake.notify_one();
        tokio::time::sleep(Duration::from_millis(2)).await;
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
    if daemon.facts.cgroup.is_none() {
        return false;
    }
    if !warm.zygote && (warm.pool == 0 || daemon.live().config.max_ready_sandboxes == 0) {
        return false; // no warm path for this profile
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
    let mut backoff: HashMap<PoolKey, Instant> = HashMap::new();
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
async fn tend(daemon: &Arc<Daemon>, backoff: &mut HashMap<PoolKey, Instant>) -> bool {
    let live = daemon.live();
    let draining = daemon.jobs.is_draining();
    let limit = ready_limit(daemon);
    let mut doomed = Vec::new();
    let mut wanted: Option<(PoolKey, Arc<ActiveProfile>)> = None;
    {
        let mut pools = daemon.warm.pools.lock().expect("warm pools lock");
        // Kept pools exist from the start (and from the reload that made them).
        for (name, active) in &live.profiles {
            for key in pool_keys(name) {
                if kept(daemon, &key, active) && !pools.contains_key(&key) {
                    let floor = key.floor_and_cap(active).0;
                    pools.insert(key, Pool::new(floor));
                }
            }
        }
        let mut kept_total = 0;
        let mut targets = Vec::new();
        for (name, pool) in pools.iter_mut() {
            let active = live
                .profiles
                .get(&name.profile)
                .filter(|a| a.disabled.is_none());
            let target = match active {
                Some(a) if !draining && daemon.facts.cgroup.is_some() => pool.target(name, a),
                _ => 0,
            };
            targets.push((name.clone(), target));
            // Drop the stale, the dead, and the surplus.
            let mut keep = Vec::new();
            for mut w in pool.ready.drain(..) {
                let current = active.is_some_and(|a| Arc::ptr_eq(&w.active, a));
                if w.is_dead() {
                    // Its interpreter ended before any job (a failing `warm.preload`
                    // import, say): build no more of them for a while.
                    tracing::warn!(pool = %name, sandbox = w.job_id, "a warm sandbox ended before its job; check the profile's warm.preload; retrying in 5 s");
                    backoff.insert(name.clone(), Instant::now() + Duration::from_secs(5));
                } else if current && keep.len() < target && kept_total < limit {
                    kept_total += 1;
                    keep.push(w);
                } else {
                    doomed.push(w);
                }
            }
            pool.ready = keep;
        }
        for (name, target) in targets {
            let (Some(pool), Some(active)) = (
                pools.get(&name),
                live.profiles
                    .get(&name.profile)
                    .filter(|a| a.disabled.is_none()),
            ) else {
                continue;
            };
            // While jobs run, refill only a pool down to half: a sandbox build shares the
            // spawner and the CPUs with the running jobs, so it waits for a quiet moment
            // unless the pool is running low. While a job that took one of this pool's
            // sandboxes runs, only a pool below half: that job's take is what asked for
            // this build, and the build would slow that very job (see `Taker`).
            let quiet = if pool.takers > 0 {
                pool.ready.len() * 2 < target
            } else {
                daemon.jobs.counts().0 == 0 || pool.ready.len() * 2 <= target
            };
            if wanted.is_none()
                && pool.ready.len() < target
                && quiet
                && kept_total < limit
                && daemon.queued.load(std::sync::atomic::Ordering::SeqCst) == 0
                && backoff.get(&name).is_none_or(|t| Instant::now() >= *t)
            {
                wanted = Some((name, active.clone()));
            }
        }
    }
    for w in doomed {
        daemon.spawner.kill(w.job_id, KillCause::Shutdown).await;
    }
    let Some((name, active)) = wanted else {
        return false;
    };
    let mark = |building: Option<Arc<ActiveProfile>>| {
        let mut pools = daemon.warm.pools.lock().expect("warm pools lock");
        let pool = pools.get_mut(&name)?;
        pool.building = building;
        pool.claim.take()
    };
    mark(Some(active.clone()));
    let built = match name.kind {
        Kind::Job => build(daemon, &active, &active.profile.default_limits()).await,
        Kind::Session => build_session(daemon, &active).await,
    };
    // A job waiting for this build gets it; else (or if that job has gone) the pool.
    let claim = mark(None);
    match built {
        Ok(mut w) => {
            w.was_ready = true;
            let unclaimed = match claim {
                Some(tx) => tx.send(w).err(),
                None => Some(w),
            };
            if let Some(w) = unclaimed {
                let mut pools = daemon.warm.pools.lock().expect("warm pools lock");
                if let Some(pool) = pools.get_mut(&name) {
                    pool.ready.push(w);
                }
            }
            backoff.remove(&name);
            true
        }
        Err(why) => {
            daemon
                .warm
                .failures
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // A profile whose sandbox cannot start now is retried later, not in a loop.
            tracing::warn!(pool = %name, error = %vivarium_proto::error_chain(&why), "warm sandbox failed; retrying in 5 s");
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
    #[error("the session's control link")]
    Link(#[source] std::io::Error),
    #[error("the profile's session limits: {0}")]
    Limits(String),
}

/// How long an interpreter may take to start and preload before it counts as failed.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Read the bootstrap's stderr up to its ready byte and hand the pipe back for the job.
/// Text before the byte (warnings printed by a preload import) is logged; an end of file
/// before it is the interpreter's failure, reported with that text.
pub(super) async fn await_ready(err_r: OwnedFd) -> Result<OwnedFd, WarmError> {
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
    // A cold-built sandbox without packages runs the bootstrap compiled ahead for its
    // interpreter, if it could be (warm_code.rs): the loader as its program, the code
    // first on its stdin. (A zygote compiles its own once; an environment's interpreter
    // may be another file than the host path says.)
    let code = if plan.kind.zygote().is_none() && env.is_none() {
        let interpreter = std::path::PathBuf::from(&plan.argv[0]);
        let code = daemon
            .warm
            .code
            .stdin_for(&interpreter, WARM_BOOTSTRAP)
            .await;
        if code.is_some() {
            plan::use_warm_loader(&mut plan);
        }
        code
    } else {
        None
    };
    // The script memfd stays empty: the bootstrap writes the job's code itself.
    let l = super::job::launch(daemon, &plan, b"").await?;
    if let Some(code) = code {
        if let Err(e) = write_all_soon(&l.stdin, &code).await {
            daemon.spawner.kill(job_id, KillCause::Shutdown).await;
            return Err(WarmError::Pipe(e));
        }
    }
    let forked = plan.kind.zygote().is_some();
    let launched = super::job::LaunchedWith {
        events: l.events,
        stdout: l.stdout,
        stderr: l.stderr,
        outputs: l.outputs,
    };
    until_ready(daemon, active, job_id, launched, l.stdin, env, forked).await
}

/// Build one session sandbox with the profile's own session limits (a session pool's).
async fn build_session(
    daemon: &Arc<Daemon>,
    active: &Arc<ActiveProfile>,
) -> Result<WarmSandbox, WarmError> {
    let limits = active
        .profile
        .session_limits(&Default::default())
        .map_err(|e| WarmError::Limits(e.to_string()))?;
    let limits = active.profile.session_sandbox_limits(&limits);
    // The profile's `warm.packages`, as for its job pool: a session asking for exactly
    // those takes one of these.
    let env = if active.profile.warm_packages.is_empty() {
        None
    } else {
        let reqs = &active.profile.warm_packages;
        let ready = super::packages::for_job(daemon, active, reqs, &Notify::new())
            .await
            .map_err(WarmError::Packages)?;
        Some(ready)
    };
    build_session_with(daemon, active, &limits, env).await
}

/// Build one session sandbox: the session bootstrap's plan (`build_session`), its stdin
/// the sandbox's end of a control link, whose other end is the returned `stdin`; with
/// `env`, the session's package environment.
pub(super) async fn build_session_with(
    daemon: &Arc<Daemon>,
    active: &Arc<ActiveProfile>,
    limits: &crate::profile::JobLimits,
    env: Option<super::packages::Ready>,
) -> Result<WarmSandbox, WarmError> {
    let job_id = daemon
        .next_job
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut plan = plan::build_session(
        job_id,
        &active.profile,
        limits,
        active.seccomp.clone(),
        daemon.facts.job_cgroups(),
    );
    if let Some(ready) = &env {
        crate::packages::install::use_env(&mut plan, &ready.entry.env());
    }
    let (ours, theirs) = super::cell_link::fd_pair().map_err(WarmError::Link)?;
    let launched = super::job::launch_with_stdin(daemon, &plan, b"", theirs).await?;
    until_ready(daemon, active, job_id, launched, ours, env, false).await
}

/// Write `bytes` into a fresh sandbox's empty stdin pipe: at once (it fits, see
/// `warm_code::MAX_CODE`), or as the loader reads it if the pipe was made smaller (a user
/// over `pipe-user-pages-soft`), within the ready timeout.
async fn write_all_soon(fd: &OwnedFd, mut bytes: &[u8]) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    let give_up = Instant::now() + READY_TIMEOUT;
    while !bytes.is_empty() {
        match nix::unistd::write(fd, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(nix::errno::Errno::EAGAIN) if Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(1)).await
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Wait until a launched warm sandbox's interpreter has started and said it is ready.
async fn until_ready(
    daemon: &Arc<Daemon>,
    active: &Arc<ActiveProfile>,
    job_id: u64,
    launched: super::job::LaunchedWith,
    stdin: OwnedFd,
    env: Option<super::packages::Ready>,
    forked: bool,
) -> Result<WarmSandbox, WarmError> {
    let super::job::LaunchedWith {
        mut events,
        stdout,
        stderr,
        outputs,
    } = launched;
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
        forked,
        was_ready: false,
        taker: None,
        job_id,
        events,
        stdin,
        stdout,
        stderr,
        outputs,
        landlock,
        env,
        active: active.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that took a ready sandbox holds its pool's refill back until it is over:
    /// dropping its `Taker` gives the pool back its count and wakes the maintainer.
    #[tokio::test]
    async fn a_takers_end_releases_its_pools_refill_and_wakes_the_maintainer() {
        let pools = WarmPools::default();
        let mut pool = Pool::new(2);
        pool.takers = 1;
        pools
            .pools
            .lock()
            .unwrap()
            .insert(PoolKey::job("default"), pool);
        let taker = Taker {
            pools: pools.pools.clone(),
            wake: pools.wake.clone(),
            name: PoolKey::job("default"),
        };
        let woken = pools.wake.notified();
        drop(taker);
        woken.await;
        assert_eq!(
            pools.pools.lock().unwrap()[&PoolKey::job("default")].takers,
            0
        );
    }
}
