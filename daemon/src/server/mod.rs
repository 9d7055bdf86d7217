//! The unprivileged half of the daemon: the tokio server that parses untrusted client
//! bytes, queues jobs, streams output, and turns evidence into outcomes. It owns no
//! privileged step; those are the spawner's.

pub mod activation;
mod artifacts;
mod auth;
pub use auth::{resolve_groups, UnknownGroup};
pub(crate) mod cell_link;
mod conn;
mod inputs;
pub(crate) mod job;
pub mod lifecycle;
pub mod outcome;
pub mod packages;
pub mod sessions;
pub mod spawner_client;
pub mod warm;
mod warm_code;

use crate::config::Config;
use crate::policy::seccomp;
use crate::profile::Profile;
use spawner_client::{HostFacts, SpawnerClient};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Semaphore;
use vivarium_proto::ErrorCode;
use vivarium_proto::{CgroupVersion, ProfileFeatures, ProfileInfo};
use vivarium_sandbox::landlock::missing_features;

/// A profile with what this host can do for it.
pub struct ActiveProfile {
    pub profile: Profile,
    /// Why the profile cannot be enforced here (jobs asking for it are refused).
    pub disabled: Option<String>,
    pub seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    pub seccomp_filters: u32,
    /// The policy split for the profile's zygote (`warm.zygote` only).
    pub zygote_seccomp: Option<vivarium_sandbox::plan::ZygoteSeccompWire>,
    /// Unique per activation: a reloaded profile is a new generation (and gets a new
    /// zygote).
    pub generation: u64,
    pub not_enforced: Vec<String>,
}

impl ActiveProfile {
    pub fn info(&self) -> ProfileInfo {
        ProfileInfo {
            name: self.profile.name.clone(),
            description: self.profile.file.description.clone(),
            disabled: self.disabled.clone(),
            network: self.profile.file.network.enabled,
            max: self.profile.max_limits(),
            not_enforced: self.not_enforced.clone(),
        }
    }
}

impl ActiveProfile {
    /// What the profile offers beyond [`ProfileInfo`] (protocol 4+): whether its jobs
    /// can have packages here, by the checks a job asking for them would meet.
    pub fn features(&self, daemon: &Daemon) -> ProfileFeatures {
        let section = &self.profile.file.packages;
        let packages_unavailable = if !section.enabled {
            Some(format!(
                "profile {:?} does not allow packages",
                self.profile.name
            ))
        } else if let Some(why) = &self.disabled {
            Some(format!("the profile is disabled: {why}"))
        } else if let Err(why) = &daemon.packages {
            Some(crate::error_chain(why))
        } else {
            packages::check_enforceable(self, daemon.facts.landlock_abi, daemon.facts.rootless)
                .err()
                .map(|e| e.message)
        };
        ProfileFeatures {
            name: self.profile.name.clone(),
            packages_from_index: packages_unavailable.is_none() && section.index_url.is_some(),
            packages_unavailable,
            python: python_version(&self.profile.file.python.interpreter),
        }
    }
}

/// The interpreter's version as its file name says it, links resolved (`/usr/bin/python3`
/// -> `python3.11`: `3.11`). Read from the name, never by running the interpreter.
fn python_version(interpreter: &std::path::Path) -> Option<String> {
    let real = std::fs::canonicalize(interpreter).unwrap_or_else(|_| interpreter.to_owned());
    let name = real.file_name()?.to_str()?;
    let version = name.strip_prefix("python")?;
    let mut parts = version.split('.');
    let major = parts
        .next()
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))?;
    let minor = parts
        .next()
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))?;
    (parts.next().is_none()).then(|| format!("{major}.{minor}"))
}

/// Decide, once at start, whether this host can enforce `profile` and how.
pub fn activate(profile: Profile, facts: &HostFacts) -> ActiveProfile {
    let sec = &profile.file.security;
    let mut problems = Vec::new();
    if facts.landlock_abi < u32::from(sec.landlock_min_abi) {
        problems.push(format!(
            "needs Landlock ABI {} but the kernel offers {}",
            sec.landlock_min_abi, facts.landlock_abi
        ));
    }
    for c in &sec.cgroup_controllers {
        let have = facts.controllers.iter().any(|h| h == c);
        // On v1, CPU accounting lives in the separate cpuacct controller.
        let acct = c != "cpu"
            || facts.cgroup == Some(CgroupVersion::V2)
            || facts.controllers.iter().any(|h| h == "cpuacct");
        if facts.cgroup.is_none() {
            problems.push(format!(
                "needs the {c} cgroup controller, but this daemon has no usable cgroup ({}); \
                 run it as root, or as a systemd user service with Delegate=yes on a cgroup v2 \
                 host, or use a profile whose limits are rlimits only (cgroup_controllers = [])",
                facts.cgroup_problem.as_deref().unwrap_or("none found")
            ));
            break;
        } else if !have || !acct {
            problems.push(format!(
                "needs the {c} cgroup controller, which is not available"
            ));
        }
    }
    if !profile.file.python.interpreter.is_file() {
        problems.push(format!(
            "interpreter {} does not exist",
            profile.file.python.interpreter.display()
        ));
    }
    if !profile.file.network.egress.is_empty() {
        if facts.rootless {
            problems.push(
                "network.egress needs a root daemon (the job's network namespace and its egress proxy are made in the host's user namespace)".into(),
            );
        }
        if facts.landlock_abi < 4 {
            problems.push(format!(
                "network.egress needs Landlock ABI 4 (TCP rules) but the kernel offers {}",
                facts.landlock_abi
            ));
        }
    }
    let (filters, count) = match seccomp::load_for(&profile, profile.file.network.inet()) {
        Ok(p) => (p.to_wire(), p.filter_count()),
        Err(e) => {
            problems.push(format!("seccomp policy: {}", crate::error_chain(&e)));
            (Vec::new(), 0)
        }
    };
    if count == 0 && problems.is_empty() {
        problems.push("seccomp policy compiled to no filter".into());
    }
    let zygote_seccomp = if profile.file.warm.zygote {
        match seccomp::load_zygote_for(&profile, profile.file.network.inet()) {
            Ok(z) => Some(vivarium_sandbox::plan::ZygoteSeccompWire {
                zygote: z.zygote.to_wire(),
                job: z.job.to_wire(),
            }),
            Err(e) => {
                problems.push(format!(
                    "seccomp policy for a zygote: {}",
                    crate::error_chain(&e)
                ));
                None
            }
        }
    } else {
        None
    };
    let mut not_enforced = missing_features(sec.landlock_abi, facts.landlock_abi);
    if facts.rootless {
        not_enforced.push("non-executable memfds (vm.memfd_noexec needs a root daemon)".into());
    } else if !std::path::Path::new("/proc/sys/vm/memfd_noexec").exists() {
        not_enforced.push("non-executable memfds (vm.memfd_noexec, Linux 6.3)".into());
    }
    if facts.rootless || !vivarium_sandbox::timens::available() {
        not_enforced.push(
            "a time namespace per job: the monotonic and boot clocks and /proc/uptime are the host's (needs a root daemon and Linux 5.6)".into(),
        );
    }
    if facts.cgroup.is_none() {
        not_enforced.push(
            "cgroup limits: memory, processes and CPU time are limited per process by \
             rlimits only (RLIMIT_AS, RLIMIT_NPROC, RLIMIT_CPU); no OOM or pids evidence"
                .into(),
        );
    }
    if facts.rootless {
        not_enforced.push("per-job host uid: every job runs as the daemon user's uid".into());
        not_enforced.push(
            "supplementary groups: a rootless job keeps the daemon user's (setgroups is \
             denied in a single-id user namespace)"
                .into(),
        );
    }
    // A test-only weakened daemon (crate::policy::weaken) says so in every outcome.
    not_enforced.extend(facts.weakened.describe());
    ActiveProfile {
        disabled: (!problems.is_empty()).then(|| problems.join("; ")),
        profile,
        seccomp: filters,
        seccomp_filters: count,
        zygote_seccomp,
        generation: {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        },
        not_enforced,
    }
}

/// What SIGHUP replaces: the config as last (re)loaded, the profiles activated from it
/// and its resolved groups. A job holds the `Arc<ActiveProfile>` it was admitted with,
/// so a reload never changes a job that is queued or running.
pub struct Live {
    pub config: Config,
    pub profiles: BTreeMap<String, Arc<ActiveProfile>>,
    pub allowed_gids: Vec<u32>,
}

/// Shared server state.
pub struct Daemon {
    /// The config the daemon started with: the settings that only take effect at start
    /// (socket, state dir, cgroup subtree, id base, slots). Reloadable settings are read
    /// from [`Daemon::live`].
    pub config: Config,
    live: RwLock<Arc<Live>>,
    pub facts: HostFacts,
    pub spawner: SpawnerClient,
    pub slots: Arc<Semaphore>,
    pub queued: AtomicUsize,
    pub next_job: AtomicU64,
    pub own_uid: u32,
    /// Jobs in flight (drain, quotas, idleness, STATUS=).
    pub jobs: lifecycle::JobBook,
    /// Open client connections (idleness, `max_connections`).
    pub connections: AtomicUsize,
    /// Open connections per peer uid (`max_connections_per_uid`).
    connections_per_uid: Mutex<std::collections::HashMap<u32, usize>>,
    /// Connections being refused for `max_connections` (see [`refuse_connection`]).
    refusing: AtomicUsize,
    /// The scripts the daemon holds (arriving, queued or running), in bytes out of
    /// `max_code_bytes_total` (see [`conn::code_permit`]).
    pub code_budget: Arc<Semaphore>,
    /// Stdin waiting for jobs to read it, in bytes out of [`conn::STDIN_QUEUED_TOTAL`].
    pub stdin_budget: Arc<Semaphore>,
    /// Why the last SIGHUP reload failed, until one succeeds.
    pub reload_error: Mutex<Option<String>>,
    /// Warm sandboxes, per profile (kept by [`warm::maintain`]).
    pub warm: warm::WarmPools,
    /// Package installs and their cache, or why there are none (no `uv` configured,
    /// or it or the cache directory is unusable).
    pub packages: Result<Arc<packages::Manager>, packages::ManagerError>,
    /// Open sessions and the tombstones of ended ones.
    pub sessions: sessions::Sessions,
}

impl Daemon {
    pub fn new(
        config: Config,
        profiles: Vec<Profile>,
        facts: HostFacts,
        spawner: SpawnerClient,
        allowed_gids: Vec<u32>,
    ) -> Self {
        let profiles = profiles
            .into_iter()
            .map(|p| (p.name.clone(), Arc::new(activate(p, &facts))))
            .collect();
        let live = Live {
            config: config.clone(),
            profiles,
            allowed_gids,
        };
        let packages = match &config.uv {
            None => Err(packages::ManagerError::NotConfigured),
            Some(uv) => packages::Manager::new(
                uv,
                &config.package_cache_dir,
                config.package_cache_max_bytes,
                config.package_cache_max_inodes,
            )
            .map(Arc::new),
        };
        match &packages {
            Ok(m) => {
                tracing::info!(uv = m.uv_version(), cache = %config.package_cache_dir.display(), "packages enabled")
            }
            Err(why) => tracing::info!(why = %crate::error_chain(why), "packages disabled"),
        }
        let state_dir = config
            .state_dir
            .clone()
            .unwrap_or_else(|| crate::spawner::default_state_dir(nix::unistd::geteuid().is_root()));
        Daemon {
            packages,
            slots: Arc::new(Semaphore::new(config.max_concurrent_jobs)),
            code_budget: Arc::new(Semaphore::new(config.max_code_bytes_total as usize)),
            stdin_budget: Arc::new(Semaphore::new(conn::STDIN_QUEUED_TOTAL)),
            config,
            live: RwLock::new(Arc::new(live)),
            facts,
            spawner,
            queued: AtomicUsize::new(0),
            next_job: AtomicU64::new(1),
            own_uid: nix::unistd::geteuid().as_raw(),
            jobs: lifecycle::JobBook::default(),
            connections: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
            connections_per_uid: Mutex::default(),
            reload_error: Mutex::new(None),
            warm: warm::WarmPools::default(),
            sessions: sessions::Sessions::new(&state_dir),
        }
    }

    /// The current reloadable settings and profiles.
    pub fn live(&self) -> Arc<Live> {
        self.live.read().expect("live lock").clone()
    }

    pub fn replace_live(&self, live: Live) {
        *self.live.write().expect("live lock") = Arc::new(live);
    }

    pub fn enabled_profiles(&self) -> usize {
        self.live()
            .profiles
            .values()
            .filter(|p| p.disabled.is_none())
            .count()
    }
}

/// Counts a connection (in all, and for its peer's uid) for as long as its task runs.
struct ConnectionGuard(Arc<Daemon>, u32);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
        let mut per_uid = self.0.connections_per_uid.lock().expect("connections lock");
        if let Some(n) = per_uid.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                per_uid.remove(&self.1);
            }
        }
    }
}

/// Connections past `max_connections` being told so at once, at most (each holds an fd
/// for up to [`conn::BUSY_DRAIN`]); past this, further ones are closed unanswered.
const MAX_REFUSING: usize = 64;

/// Answer a connection that is not served (not admitted, or past `max_connections`)
/// with one error and close it, without taking a connection place for it.
fn refuse_connection(
    daemon: &Arc<Daemon>,
    sock: tokio_seqpacket::UnixSeqpacket,
    code: vivarium_proto::ErrorCode,
    message: String,
    drain: std::time::Duration,
) {
    if daemon.refusing.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSING {
        daemon.refusing.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!(
            ?code,
            "connection closed unanswered: {MAX_REFUSING} others are being refused"
        );
        return;
    }
    let daemon = daemon.clone();
    tokio::spawn(async move {
        conn::refuse(&sock, code, message, drain).await;
        daemon.refusing.fetch_sub(1, Ordering::SeqCst);
    });
}

/// Accept connections until `stop` resolves.
pub async fn serve(
    daemon: Arc<Daemon>,
    mut listener: tokio_seqpacket::UnixSeqpacketListener,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(sock) => {
                    let peer = match conn::identify(&sock) {
                        Ok(p) => p,
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot identify peer");
                            continue;
                        }
                    };
                    let live = daemon.live();
                    if !auth::admitted(&peer, daemon.own_uid, &live.config.allow_uids, &live.allowed_gids) {
                        // Refused before it is counted: peers that are not admitted take
                        // no connection place from those that are.
                        tracing::warn!(uid = peer.uid, gid = peer.gid, "peer not admitted");
                        let why = format!("uid {} is not admitted", peer.uid);
                        refuse_connection(&daemon, sock, ErrorCode::NotAuthorized, why, conn::UNADMITTED_DRAIN);
                        continue;
                    }
                    let max = live.config.max_connections;
                    if daemon.connections.load(Ordering::SeqCst) >= max {
                        tracing::warn!(max, "connection refused: max_connections reached");
                        let why = format!("the daemon has {max} connections open (max_connections); try again later");
                        refuse_connection(&daemon, sock, ErrorCode::Busy, why, conn::BUSY_DRAIN);
                        continue;
                    }
                    let per_uid = live.config.connections_per_uid();
                    let taken = {
                        let mut counts = daemon.connections_per_uid.lock().expect("connections lock");
                        let n = counts.entry(peer.uid).or_default();
                        let room = per_uid == 0 || *n < per_uid;
                        if room {
                            *n += 1;
                        }
                        room
                    };
                    if !taken {
                        tracing::warn!(uid = peer.uid, per_uid, "connection refused: max_connections_per_uid reached");
                        let why = format!("uid {} has {per_uid} connections open (max_connections_per_uid); try again later", peer.uid);
                        refuse_connection(&daemon, sock, ErrorCode::Busy, why, conn::BUSY_DRAIN);
                        continue;
                    }
                    daemon.connections.fetch_add(1, Ordering::SeqCst);
                    let guard = ConnectionGuard(daemon.clone(), peer.uid);
                    tokio::spawn(async move {
                        conn::serve(guard.0.clone(), sock, peer).await;
                        drop(guard);
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Bind the listening socket: parent dir, stale socket removal, mode and group.
pub fn bind(
    path: &std::path::Path,
    mode: u32,
    group: Option<u32>,
) -> std::io::Result<tokio_seqpacket::UnixSeqpacketListener> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            // A live daemon answers; a stale socket file refuses.
            let probe = nix::sys::socket::socket(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                None,
            )?;
            let addr = nix::sys::socket::UnixAddr::new(path)?;
            if nix::sys::socket::connect(std::os::fd::AsRawFd::as_raw_fd(&probe), &addr).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("another daemon is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(_) => {}
    }
    // Bind under a temporary name, set mode and group, then rename into place: the
    // path never names a socket with the umask's permissions, not even for a moment.
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let listener = tokio_seqpacket::UnixSeqpacketListener::bind_with_backlog(&tmp, 128)?;
    let finish = || -> std::io::Result<()> {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        if let Some(gid) = group {
            nix::unistd::chown(&tmp, None, Some(nix::unistd::Gid::from_raw(gid)))?;
        }
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = finish() {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Socket path precedence: flag, `VIVARIUM_SOCKET`, config, default.
pub fn socket_path(flag: Option<PathBuf>, config: &Config, root: bool) -> PathBuf {
    flag.or_else(|| std::env::var_os("VIVARIUM_SOCKET").map(PathBuf::from))
        .or_else(|| config.socket.clone())
        .unwrap_or_else(|| {
            config
                .state_dir
                .clone()
                .unwrap_or_else(|| crate::spawner::default_state_dir(root))
                .join("vivariumd.sock")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped(name: &str) -> Profile {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        crate::profile::load_dir(&dir)
            .unwrap()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap()
    }

    fn facts(landlock_abi: u32, controllers: &[&str]) -> HostFacts {
        HostFacts {
            cgroup: Some(CgroupVersion::V1),
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            cgroup_problem: None,
            landlock_abi,
            cgroup_view: Vec::new(),
            rootless: false,
            weakened: Default::default(),
        }
    }

    const ALL: &[&str] = &["memory", "pids", "cpu", "cpuacct"];

    #[test]
    fn both_profiles_enabled_on_a_current_kernel() {
        for name in ["default", "compat", "rootless", "offline"] {
            let a = activate(shipped(name), &facts(7, ALL));
            assert_eq!(a.disabled, None, "{name}");
            assert!(a.not_enforced.is_empty(), "{name}: {:?}", a.not_enforced);
            assert!(a.seccomp_filters >= 1);
        }
    }

    #[test]
    fn an_older_kernel_disables_default_and_compat_says_what_it_lacks() {
        let default = activate(shipped("default"), &facts(2, ALL));
        let why = default.disabled.expect("default needs ABI 6");
        assert!(why.contains("Landlock ABI 6"), "{why}");
        let compat = activate(shipped("compat"), &facts(2, ALL));
        assert_eq!(compat.disabled, None);
        assert_eq!(compat.not_enforced, missing_features(6, 2));
        assert_eq!(compat.info().not_enforced.len(), 4);
    }

    #[test]
    fn without_a_cgroup_only_rlimit_profiles_run_and_say_so() {
        let facts = HostFacts {
            cgroup: None,
            controllers: Vec::new(),
            cgroup_problem: Some("cannot create cgroup: EACCES".into()),
            landlock_abi: 7,
            cgroup_view: Vec::new(),
            rootless: true,
            weakened: Default::default(),
        };
        let default = activate(shipped("default"), &facts);
        let why = default.disabled.expect("default needs cgroups");
        assert!(
            why.contains("Delegate=yes") && why.contains("EACCES"),
            "{why}"
        );
        let rootless = activate(shipped("rootless"), &facts);
        assert_eq!(rootless.disabled, None);
        assert_eq!(
            rootless.not_enforced,
            vec![
                "non-executable memfds (vm.memfd_noexec needs a root daemon)".to_owned(),
                "a time namespace per job: the monotonic and boot clocks and /proc/uptime are \
                 the host's (needs a root daemon and Linux 5.6)"
                    .to_owned(),
                "cgroup limits: memory, processes and CPU time are limited per process by \
                 rlimits only (RLIMIT_AS, RLIMIT_NPROC, RLIMIT_CPU); no OOM or pids evidence"
                    .to_owned(),
                "per-job host uid: every job runs as the daemon user's uid".to_owned(),
                "supplementary groups: a rootless job keeps the daemon user's (setgroups is \
                 denied in a single-id user namespace)"
                    .to_owned(),
            ]
        );
    }

    #[test]
    fn a_weakened_spawner_is_named_in_every_profile_and_production_has_none() {
        use crate::policy::weaken::{Layer, Weakening};
        let mut w = Weakening::none();
        w.layers.insert(Layer::PidNs);
        let mut weak = facts(7, ALL);
        weak.weakened = w;
        for name in ["default", "compat"] {
            let a = activate(shipped(name), &weak);
            assert_eq!(a.disabled, None);
            assert_eq!(
                a.info().not_enforced,
                vec!["TEST-ONLY WEAKENING: pid-ns switched off".to_owned()]
            );
            let full = activate(shipped(name), &facts(7, ALL));
            assert!(!full.not_enforced.iter().any(|n| n.contains("WEAKENING")));
        }
    }

    #[test]
    fn missing_controllers_disable_with_a_reason() {
        let a = activate(shipped("default"), &facts(7, &["memory", "cpu", "cpuacct"]));
        let why = a.disabled.unwrap();
        assert!(why.contains("pids cgroup controller"), "{why}");
    }

    #[test]
    fn the_python_version_comes_from_the_interpreters_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("python3.11");
        std::fs::write(&real, b"").unwrap();
        let link = dir.path().join("python3");
        std::os::unix::fs::symlink("python3.11", &link).unwrap();
        assert_eq!(python_version(&link).as_deref(), Some("3.11"));
        assert_eq!(python_version(&real).as_deref(), Some("3.11"));
        let others = tempfile::tempdir().unwrap();
        for name in [
            "python3",
            "python",
            "python3.11d",
            "python3.x",
            "pypy3.10",
            "python3.11.2",
        ] {
            let other = others.path().join(name);
            std::fs::write(&other, b"").unwrap();
            assert_eq!(python_version(&other), None, "{name}");
        }
    }
}
