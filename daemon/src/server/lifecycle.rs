//! The daemon's life after startup: serve until SIGTERM/SIGINT (or idleness, when
//! socket-activated), reload on SIGHUP, report STATUS= to systemd, and drain on the
//! way out.
//!
//! Drain order, and why: stop accepting first (systemd queues new connections on its
//! copy of an activated socket, and starts us again), then refuse new submits and
//! cancel queued jobs (they never started, so they cost nothing to end), then give
//! running jobs `shutdown_grace_ms` to finish on their own, then kill the rest through
//! the spawner and wait for their outcomes to go out. The caller then stops the spawner
//! and removes the socket and cgroup subtree.

use super::activation::{notify, NotifyState};
use super::{activate, resolve_groups, Daemon, Live};
use crate::config::{Config, ConfigError};
use crate::profile::{self, ProfileError};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;
use vivarium_sandbox::ipc::KillCause;

/// Where the config and profiles come from, so that SIGHUP can read them again.
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// The config file; `None` is the built-in defaults.
    pub path: Option<PathBuf>,
    /// `--profiles`, which overrides the config's `profiles_dir`.
    pub profiles_dir: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("loading profiles from {dir}")]
    Profiles {
        dir: PathBuf,
        #[source]
        source: ProfileError,
    },
    #[error("no profiles in {dir}")]
    NoProfiles { dir: PathBuf },
    #[error("config: allow_groups: {0}")]
    Groups(super::UnknownGroup),
    #[error("no profile can be enforced on this host: {0}")]
    NoneEnabled(String),
}

/// A config with its profiles and resolved groups, not yet activated.
pub struct Loaded {
    pub config: Config,
    pub profiles: Vec<profile::Profile>,
    pub allowed_gids: Vec<u32>,
}

impl ConfigSource {
    pub fn load_config(&self) -> Result<Config, LoadError> {
        let mut config = match &self.path {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        if let Some(dir) = &self.profiles_dir {
            config.profiles_dir = dir.clone();
        }
        Ok(config)
    }

    /// Read the config file and every profile, as at startup. Where the profiles
    /// directory is the default one and does not exist (a fresh machine), the profiles
    /// built into the binary are served, and the log says so; a directory named by
    /// `--profiles` or `profiles_dir` must exist.
    pub fn load(&self) -> Result<Loaded, LoadError> {
        let config = self.load_config()?;
        let dir = config.profiles_dir.clone();
        let default = self.profiles_dir.is_none() && dir == Config::default().profiles_dir;
        let profiles = load_profiles(&dir, default)?;
        if profiles.is_empty() {
            return Err(LoadError::NoProfiles { dir });
        }
        let allowed_gids = resolve_groups(&config.allow_groups).map_err(LoadError::Groups)?;
        Ok(Loaded {
            config,
            profiles,
            allowed_gids,
        })
    }
}

/// The profiles in `dir`; or, where `dir` is the default one (`default`) and does not
/// exist, the ones built into the binary, said so in the log.
fn load_profiles(dir: &Path, default: bool) -> Result<Vec<profile::Profile>, LoadError> {
    if default && !dir.exists() {
        let profiles = profile::builtin().map_err(|source| LoadError::Profiles {
            dir: profile::BUILTIN_DIR.into(),
            source,
        })?;
        tracing::info!(
            dir = %dir.display(),
            profiles = ?profiles.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            "no profiles directory: serving the profiles built into vivariumd"
        );
        return Ok(profiles);
    }
    profile::load_dir(dir).map_err(|source| LoadError::Profiles {
        dir: dir.to_owned(),
        source,
    })
}

/// Jobs in flight, for drain, per-uid quotas, idleness and STATUS=.
pub struct JobBook {
    inner: Mutex<BookInner>,
    /// Set once, when the drain starts: queued jobs are cancelled, submits refused.
    draining: watch::Sender<bool>,
}

#[derive(Default)]
struct BookInner {
    /// Jobs between admission and their last event, queued or running.
    active: usize,
    per_uid: HashMap<u32, usize>,
    /// Jobs the spawner has been asked to start and that have not finished.
    running: BTreeSet<u64>,
    /// Past the grace period: a job that reaches the spawner now is killed at once.
    killing: bool,
    /// When `active` and the connection count last were both zero.
    idle_since: Option<Instant>,
}

/// Why a job was not admitted.
pub enum Refusal {
    Draining,
    Quota(usize),
}

/// Held by a job task from admission to its last event.
pub struct Admission<'a> {
    book: &'a JobBook,
    uid: u32,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let mut b = self.book.lock();
        b.active -= 1;
        if let Some(n) = b.per_uid.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                b.per_uid.remove(&self.uid);
            }
        }
    }
}

/// Held while the spawner runs a job.
pub struct RunningJob<'a> {
    book: &'a JobBook,
    job_id: u64,
}

impl Drop for RunningJob<'_> {
    fn drop(&mut self) {
        self.book.lock().running.remove(&self.job_id);
    }
}

impl Default for JobBook {
    fn default() -> Self {
        JobBook {
            inner: Mutex::new(BookInner {
                idle_since: Some(Instant::now()),
                ..BookInner::default()
            }),
            draining: watch::Sender::new(false),
        }
    }
}

impl JobBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, BookInner> {
        self.inner.lock().expect("job book lock")
    }

    /// Admit a job for `uid`, which may have at most `per_uid` (0: any number) at once.
    pub fn admit(&self, uid: u32, per_uid: usize) -> Result<Admission<'_>, Refusal> {
        if *self.draining.borrow() {
            return Err(Refusal::Draining);
        }
        let mut b = self.lock();
        let mine = b.per_uid.entry(uid).or_insert(0);
        if per_uid > 0 && *mine >= per_uid {
            return Err(Refusal::Quota(per_uid));
        }
        *mine += 1;
        b.active += 1;
        b.idle_since = None;
        Ok(Admission { book: self, uid })
    }

    /// Record that the spawner was asked to run `job_id`. The bool says the drain's
    /// grace period is already over: the caller kills the job at once.
    pub fn running(&self, job_id: u64) -> (RunningJob<'_>, bool) {
        let mut b = self.lock();
        b.running.insert(job_id);
        (RunningJob { book: self, job_id }, b.killing)
    }

    /// Resolves when the drain starts.
    pub async fn draining(&self) {
        let mut rx = self.draining.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    /// (jobs running, jobs admitted in all).
    pub fn counts(&self) -> (usize, usize) {
        let b = self.lock();
        (b.running.len(), b.active)
    }
}

/// The signals the daemon acts on, registered at startup (before READY=1: an
/// unhandled SIGHUP would kill the process).
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Why the daemon stopped serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Signal,
    Idle,
    SpawnerGone,
}

/// How the daemon runs: the config source for reloads, and whether the listener came
/// from the service manager (idle exit only makes sense then).
pub struct RunOpts {
    pub source: ConfigSource,
    pub activated: bool,
}

/// Serve `listener` until a stop signal, spawner death or idleness; drain; return why.
/// Sends READY=1 first: the caller has the spawner (and with it the cgroup tree) and
/// the listener up.
pub async fn run(
    daemon: Arc<Daemon>,
    listener: tokio_seqpacket::UnixSeqpacketListener,
    mut signals: Signals,
    opts: RunOpts,
) -> Stop {
    if !opts.activated && daemon.live().config.idle_exit_secs > 0 {
        tracing::info!("idle_exit_secs applies only to a socket-activated daemon; ignored");
    }
    let first = status_line(&daemon);
    notify(&[NotifyState::Ready, NotifyState::Status(&first)]);
    let status = tokio::spawn(report_status(daemon.clone(), first));
    let mut stop = Stop::Signal;
    let wait = async {
        stop = wait_for_stop(&daemon, &mut signals, &opts).await;
    };
    super::serve(daemon.clone(), listener, wait).await;
    if stop != Stop::SpawnerGone {
        let why = match stop {
            Stop::Idle => "idle",
            _ => "stop requested",
        };
        drain(&daemon, why, &mut signals).await;
    }
    status.abort();
    stop
}

async fn wait_for_stop(daemon: &Arc<Daemon>, signals: &mut Signals, opts: &RunOpts) -> Stop {
    let gone = daemon.spawner.gone.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            // In this order: a spawner that died before a stop signal came is why the
            // daemon stops (non-zero), even when both are seen in the same poll.
            biased;
            () = gone.notified() => return Stop::SpawnerGone,
            _ = signals.term.recv() => return Stop::Signal,
            _ = signals.int.recv() => return Stop::Signal,
            _ = signals.hup.recv() => {
                if reload(daemon, &opts.source) {
                    // Every profile is a new activation: the zygotes of the old ones end
                    // (each once its running jobs have).
                    daemon.spawner.zygotes_stale().await;
                }
            }
            _ = tick.tick(), if opts.activated => {
                let idle = daemon.live().config.idle_exit_secs;
                if idle > 0 && idle_for(daemon) >= Duration::from_secs(idle) {
                    tracing::info!(idle_exit_secs = idle, "idle; exiting (systemd restarts on the next connection)");
                    return Stop::Idle;
                }
            }
        }
    }
}

/// How long the daemon has had neither a connection, nor a job, nor an open session (an
/// exit would end every session: they wait for their own idle TTL instead).
fn idle_for(daemon: &Daemon) -> Duration {
    let busy = daemon.connections.load(Ordering::SeqCst) > 0 || daemon.sessions.open_count() > 0;
    let mut b = daemon.jobs.lock();
    if busy || b.active > 0 {
        b.idle_since = None;
        return Duration::ZERO;
    }
    b.idle_since.get_or_insert_with(Instant::now).elapsed()
}

/// Re-read the config and profiles. A failure keeps everything as it was, logs why,
/// and shows in STATUS= until a reload succeeds. Running and queued jobs keep the
/// profile they were admitted with.
pub fn reload(daemon: &Daemon, source: &ConfigSource) -> bool {
    let mut states = vec![NotifyState::Reloading];
    states.extend(NotifyState::monotonic_usec_now().ok());
    notify(&states);
    let reloaded = match try_reload(daemon, source) {
        Ok(names) => {
            tracing::info!(profiles = ?names, "reloaded config and profiles");
            *daemon.reload_error.lock().expect("reload error lock") = None;
            true
        }
        Err(e) => {
            let why = crate::error_chain(&e);
            tracing::error!(error = %why, "reload failed; keeping the previous config and profiles");
            *daemon.reload_error.lock().expect("reload error lock") = Some(why);
            false
        }
    };
    notify(&[
        NotifyState::Ready,
        NotifyState::Status(&status_line(daemon)),
    ]);
    reloaded
}

fn try_reload(daemon: &Daemon, source: &ConfigSource) -> Result<Vec<String>, LoadError> {
    let loaded = source.load()?;
    let profiles: std::collections::BTreeMap<_, _> = loaded
        .profiles
        .into_iter()
        .map(|p| (p.name.clone(), Arc::new(activate(p, &daemon.facts))))
        .collect();
    if profiles.values().all(|p| p.disabled.is_some()) {
        let why: Vec<_> = profiles
            .iter()
            .map(|(n, p)| format!("{n}: {}", p.disabled.as_deref().unwrap_or_default()))
            .collect();
        return Err(LoadError::NoneEnabled(why.join("; ")));
    }
    // The script budget is the one the daemon started with: a larger script than it
    // holds could never run (every submit of one would get `Busy`).
    if loaded.config.max_code_bytes > daemon.config.max_code_bytes_total {
        return Err(LoadError::Config(ConfigError::Invalid {
            field: "max_code_bytes",
            problem: format!(
                "must be at most the running daemon's max_code_bytes_total ({}; that one changes on restart only)",
                daemon.config.max_code_bytes_total
            ),
        }));
    }
    for field in daemon.config.restart_only_changes(&loaded.config) {
        tracing::warn!(
            field,
            "changed in the config; takes effect only after a restart"
        );
    }
    for (name, p) in &profiles {
        if let Some(why) = &p.disabled {
            tracing::warn!(profile = %name, "profile disabled: {why}");
        }
    }
    let names = profiles.keys().cloned().collect();
    daemon.replace_live(Live {
        config: loaded.config,
        profiles,
        allowed_gids: loaded.allowed_gids,
    });
    Ok(names)
}

fn status_line(daemon: &Daemon) -> String {
    let (running, active) = daemon.jobs.counts();
    let queued = daemon.queued.load(Ordering::SeqCst);
    let mut s = format!("{running} jobs running, {queued} queued");
    if active > running + queued {
        // Admitted and between queue and spawner (or sending their outcome).
        s.push_str(&format!(
            ", {} starting or ending",
            active - running - queued
        ));
    }
    let ready: usize = daemon.warm.sizes().iter().map(|(_, ready, _)| ready).sum();
    if ready > 0 {
        s.push_str(&format!(", {ready} sandboxes ready"));
    }
    let sessions = daemon.sessions.open_count();
    if sessions > 0 {
        s.push_str(&format!(", {sessions} sessions open"));
    }
    if daemon.jobs.is_draining() {
        s = format!("draining: {s}");
    }
    if let Some(why) = daemon
        .reload_error
        .lock()
        .expect("reload error lock")
        .as_ref()
    {
        s.push_str(&format!("; last reload failed, old config kept: {why}"));
    }
    s
}

/// Keep STATUS= current: send it whenever it changes (checked every 500 ms).
async fn report_status(daemon: Arc<Daemon>, mut last: String) {
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tick.tick().await;
        let now = status_line(&daemon);
        if now != last {
            notify(&[NotifyState::Status(&now)]);
            last = now;
        }
    }
}

/// Stop admitting, cancel the queue, let running jobs finish within the grace period
/// (or until a second stop signal), then kill the rest and wait for their outcomes to
/// be sent.
async fn drain(daemon: &Daemon, why: &str, signals: &mut Signals) {
    let grace = Duration::from_millis(daemon.live().config.shutdown_grace_ms);
    daemon.jobs.draining.send_replace(true);
    // No session survives the daemon: each ends now, as `DaemonRestarted` (a cell that
    // runs gets that as its outcome).
    daemon.sessions.end_all();
    let (running, active) = daemon.jobs.counts();
    tracing::info!(
        why,
        running,
        admitted = active,
        grace_ms = grace.as_millis() as u64,
        "draining"
    );
    notify(&[
        NotifyState::Stopping,
        NotifyState::Status(&status_line(daemon)),
    ]);
    // A second SIGTERM or SIGINT cuts the grace period short.
    let finished = tokio::select! {
        done = wait_idle(daemon, grace) => done,
        _ = signals.term.recv() => false,
        _ = signals.int.recv() => false,
    };
    if finished {
        wait_sessions(daemon).await;
        return;
    }
    let doomed: Vec<u64> = {
        let mut b = daemon.jobs.lock();
        b.killing = true;
        b.running.iter().copied().collect()
    };
    tracing::warn!(jobs = ?doomed, "grace period over; killing the jobs still running");
    for job_id in doomed {
        daemon.spawner.kill(job_id, KillCause::Shutdown).await;
    }
    if !wait_idle(daemon, Duration::from_secs(5)).await {
        tracing::warn!("jobs still reporting 5 s after the kill; stopping the spawner anyway");
    }
    wait_sessions(daemon).await;
}

/// Wait (a few seconds at most) until every session has ended and left its tombstone.
async fn wait_sessions(daemon: &Daemon) {
    let end = tokio::time::Instant::now() + Duration::from_secs(5);
    while daemon.sessions.open_count() > 0 && tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait up to `limit` for every admitted job to be over; true if they all are.
async fn wait_idle(daemon: &Daemon, limit: Duration) -> bool {
    let end = tokio::time::Instant::now() + limit;
    loop {
        if daemon.jobs.counts().1 == 0 {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_count_per_uid_and_free_on_drop() {
        let book = JobBook::default();
        let a = book.admit(1000, 2).ok().unwrap();
        let _b = book.admit(1000, 2).ok().unwrap();
        assert!(matches!(book.admit(1000, 2), Err(Refusal::Quota(2))));
        let _other = book.admit(1001, 2).ok().unwrap();
        assert_eq!(book.counts(), (0, 3));
        drop(a);
        assert!(book.admit(1000, 2).is_ok());
        assert_eq!(book.counts(), (0, 2));
        let _any = book.admit(7, 0).ok().unwrap();
    }

    #[test]
    fn draining_refuses_and_late_jobs_are_killed() {
        let book = JobBook::default();
        let (r, kill) = book.running(5);
        assert!(!kill);
        assert_eq!(book.counts().0, 1);
        drop(r);
        assert_eq!(book.counts().0, 0);
        book.draining.send_replace(true);
        assert!(matches!(book.admit(1, 0), Err(Refusal::Draining)));
        book.lock().killing = true;
        assert!(book.running(6).1);
    }

    #[test]
    fn a_bad_source_names_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("vivariumd.toml");
        std::fs::write(&cfg, "max_queued_jobs = [").unwrap();
        let source = ConfigSource {
            path: Some(cfg.clone()),
            profiles_dir: None,
        };
        let err = crate::error_chain(&source.load().err().unwrap());
        assert!(err.contains(&cfg.display().to_string()), "{err}");
        std::fs::write(&cfg, "profiles_dir = \"empty\"\n").unwrap();
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        let err = crate::error_chain(&source.load().err().unwrap());
        assert!(err.contains("no profiles in"), "{err}");
    }

    /// A fresh machine (the default profiles directory missing) gets the built-in
    /// profiles; a directory someone named must exist.
    #[test]
    fn a_missing_default_profiles_directory_means_the_built_in_profiles() {
        let missing = tempfile::tempdir().unwrap().path().join("profiles");
        let names: Vec<String> = load_profiles(&missing, true)
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert!(names.iter().any(|n| n == "default"), "{names:?}");
        let err = crate::error_chain(&load_profiles(&missing, false).err().unwrap());
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }
}
