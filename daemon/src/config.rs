//! The daemon's own configuration (`--config PATH`, TOML, unknown keys are errors).

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Listening socket path; `--socket` and `VIVARIUM_SOCKET` override it.
    pub socket: Option<PathBuf>,
    /// Socket file mode (octal in TOML as a string, e.g. "0660").
    pub socket_mode: String,
    /// Group owning the socket file (name), so members can connect.
    pub socket_group: Option<String>,
    /// Uids admitted besides root (0 is always admitted) and the daemon's own uid.
    pub allow_uids: Vec<u32>,
    /// Groups (names or numeric gids) whose members are admitted, checked against the
    /// peer's primary gid (SO_PEERCRED) and supplementary groups (SO_PEERGROUPS).
    pub allow_groups: Vec<String>,
    /// Jobs that run at once.
    pub max_concurrent_jobs: usize,
    /// Jobs that may wait for a slot; beyond that a submit gets `Busy`.
    pub max_queued_jobs: usize,
    /// Directory of `*.toml` profiles.
    pub profiles_dir: PathBuf,
    /// Name of the cgroup subtree the daemon creates and owns.
    pub cgroup_subtree: String,
    /// Runtime state (the empty directory each sandbox root is built on).
    pub state_dir: Option<PathBuf>,
    /// First host uid/gid of the per-job id ranges (root daemon only): job slot `s`
    /// maps uid 0 and 1000 inside to `id_base + 2s` and `id_base + 2s + 1` for a cold
    /// job, uid 1000 to `id_base + 2 × slots + s` for a job forked from a zygote.
    pub id_base: u32,
    /// Largest script accepted, in bytes.
    pub max_code_bytes: u64,
    /// All scripts the daemon holds at once (arriving in chunks, queued or running),
    /// in bytes: past it a submit gets `Busy`. Bounds what clients can make the daemon
    /// buffer; at least `max_code_bytes`.
    pub max_code_bytes_total: u64,
    /// Client connections open at once; past it a new connection gets `Busy` and is
    /// closed. Each costs the daemon a 64 KiB receive buffer.
    pub max_connections: usize,
    /// Of those, the most one uid may have open; 0 is no per-uid limit. Unset, a quarter
    /// of `max_connections` (see [`Config::connections_per_uid`]).
    pub max_connections_per_uid: Option<usize>,
    /// How long a new connection may take to complete its hello, in milliseconds; past
    /// it the daemon answers `Busy` and closes it. Counted from accept.
    pub hello_timeout_ms: u64,
    /// How long a connection with no job may go without a frame before the daemon
    /// answers `Busy` and closes it, in seconds; 0 never. A connection whose job is
    /// queued or running is never idle.
    pub idle_timeout_secs: u64,
    /// Jobs (running or queued) one uid may have at once; 0 is no per-uid limit.
    pub max_jobs_per_uid: usize,
    /// On SIGTERM, how long running jobs may go on before they are killed.
    pub shutdown_grace_ms: u64,
    /// Socket-activated only: exit after this long with no connection and no job
    /// (systemd starts the daemon again on the next connection); 0 never exits.
    pub idle_exit_secs: u64,
    /// Log lines: `human` (with timestamps), `journald` (no timestamps: the journal adds
    /// its own) or `json` (one object per line).
    pub log_format: LogFormat,
    /// The `uv` binary used to install job packages (a pinned release, see
    /// `scripts/install-uv.sh`). Unset: no profile may install packages.
    pub uv: Option<PathBuf>,
    /// Where installed package environments are cached (survives restarts).
    pub package_cache_dir: PathBuf,
    /// Size cap of that cache (apparent bytes); least-recently-used environments are
    /// evicted past it.
    pub package_cache_max_bytes: u64,
    /// Inode cap of that cache (files, directories and links), evicted like the bytes.
    pub package_cache_max_inodes: u64,
    /// Sandboxes kept ready (built ahead, waiting for one job) over all profiles' warm
    /// pools: the bound on what the warm path holds while idle (each cold-built one is
    /// ~3 MiB of private memory and two processes; docs/PERFORMANCE.md). Never more than
    /// `max_concurrent_jobs`. 0: none, every job of a pool profile starts cold (a
    /// zygote profile still forks each job's sandbox when it comes).
    pub max_ready_sandboxes: usize,
    /// Sessions open at once over all uids; past it an open gets `Busy`. Each holds a
    /// sandbox (two processes and its memory) for as long as it lives.
    pub max_sessions: usize,
    /// Sessions one uid may have open at once; past it an open gets `Busy`.
    pub max_sessions_per_uid: usize,
    /// Memory (bytes, cgroup usage) that idle sessions may hold together: past it the
    /// longest-idle sessions are ended (`IdleMemory`) until the rest fit.
    pub max_idle_session_bytes: u64,
    /// How long an ended session's tombstone answers a late call with why it ended
    /// (`SessionExpired`) before its handle is simply unknown.
    pub session_tombstone_secs: u64,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Journald,
    Json,
}

/// Read when neither `--config` nor a socket-activated unit names another file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/vivarium/vivariumd.toml";

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: None,
            socket_mode: "0660".into(),
            socket_group: None,
            allow_uids: Vec::new(),
            allow_groups: Vec::new(),
            max_concurrent_jobs: 8,
            max_queued_jobs: 64,
            profiles_dir: PathBuf::from("/etc/vivarium/profiles"),
            cgroup_subtree: "vivarium".into(),
            state_dir: None,
            id_base: 0x5000_0000,
            max_code_bytes: 16 << 20,
            max_code_bytes_total: 256 << 20,
            max_connections: 1024,
            max_connections_per_uid: None,
            hello_timeout_ms: 5000,
            idle_timeout_secs: 300,
            max_jobs_per_uid: 0,
            shutdown_grace_ms: 5000,
            idle_exit_secs: 0,
            log_format: LogFormat::Human,
            uv: None,
            package_cache_dir: PathBuf::from("/var/cache/vivarium/packages"),
            package_cache_max_bytes: 8 << 30,
            package_cache_max_inodes: 4_000_000,
            max_ready_sandboxes: 16,
            max_sessions: 32,
            max_sessions_per_uid: 8,
            max_idle_session_bytes: 4 << 30,
            session_tombstone_secs: 24 * 3600,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config {path} is invalid")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("config: {field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
}

impl Config {
    /// The config file to read: `--config`, else [`DEFAULT_CONFIG_PATH`] if it exists,
    /// else none (built-in defaults).
    pub fn default_path(flag: Option<PathBuf>) -> Option<PathBuf> {
        flag.or_else(|| {
            let p = PathBuf::from(DEFAULT_CONFIG_PATH);
            p.is_file().then_some(p)
        })
    }

    /// The settings that only take effect at start; a reload that changes them says so.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        let mut check = |name, differs: bool| {
            if differs {
                changed.push(name);
            }
        };
        check("socket", self.socket != new.socket);
        check("socket_mode", self.socket_mode != new.socket_mode);
        check("socket_group", self.socket_group != new.socket_group);
        check(
            "max_concurrent_jobs",
            self.max_concurrent_jobs != new.max_concurrent_jobs,
        );
        check(
            "max_code_bytes_total",
            self.max_code_bytes_total != new.max_code_bytes_total,
        );
        check("max_sessions", self.max_sessions != new.max_sessions);
        check("cgroup_subtree", self.cgroup_subtree != new.cgroup_subtree);
        check("state_dir", self.state_dir != new.state_dir);
        check("id_base", self.id_base != new.id_base);
        check("log_format", self.log_format != new.log_format);
        check("uv", self.uv != new.uv);
        check(
            "package_cache_dir",
            self.package_cache_dir != new.package_cache_dir,
        );
        changed
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let cfg: Config = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        // Relative profile directories are relative to the config file.
        let mut cfg = cfg;
        if cfg.profiles_dir.is_relative() {
            if let Some(dir) = path.parent() {
                cfg.profiles_dir = dir.join(&cfg.profiles_dir);
            }
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, problem: &str| ConfigError::Invalid {
            field,
            problem: problem.to_owned(),
        };
        self.socket_mode_bits()?;
        if self.max_concurrent_jobs == 0 || self.max_concurrent_jobs > 4096 {
            return Err(bad("max_concurrent_jobs", "must be 1..=4096"));
        }
        if self.max_sessions > 4096 {
            return Err(bad("max_sessions", "must be at most 4096"));
        }
        if self.max_queued_jobs > 65536 {
            return Err(bad("max_queued_jobs", "must be at most 65536"));
        }
        if self.max_jobs_per_uid > 65536 {
            return Err(bad(
                "max_jobs_per_uid",
                "must be at most 65536 (0 is no limit)",
            ));
        }
        if self.max_code_bytes == 0 || self.max_code_bytes > 1 << 32 {
            return Err(bad("max_code_bytes", "must be 1..=4 GiB"));
        }
        let most = (1u64 << 40).min(tokio::sync::Semaphore::MAX_PERMITS as u64);
        if self.max_code_bytes_total < self.max_code_bytes || self.max_code_bytes_total > most {
            return Err(bad(
                "max_code_bytes_total",
                "must be at least max_code_bytes and at most 1 TiB",
            ));
        }
        if self.max_connections == 0 || self.max_connections > 65536 {
            return Err(bad("max_connections", "must be 1..=65536"));
        }
        if self
            .max_connections_per_uid
            .is_some_and(|n| n > self.max_connections)
        {
            return Err(bad(
                "max_connections_per_uid",
                "must be at most max_connections (0 is no limit)",
            ));
        }
        if self.hello_timeout_ms == 0 || self.hello_timeout_ms > 600_000 {
            return Err(bad("hello_timeout_ms", "must be 1..=600000 (10 minutes)"));
        }
        if self.idle_timeout_secs > 30 * 86_400 {
            return Err(bad(
                "idle_timeout_secs",
                "must be at most 30 days (0 never)",
            ));
        }
        if self.shutdown_grace_ms > 3_600_000 {
            return Err(bad("shutdown_grace_ms", "must be at most one hour"));
        }
        if self.idle_exit_secs > 30 * 86_400 {
            return Err(bad(
                "idle_exit_secs",
                "must be at most 30 days (0 never exits)",
            ));
        }
        let name = &self.cgroup_subtree;
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(bad("cgroup_subtree", "must be a plain directory name"));
        }
        // Every job slot uses three host ids (a cold job's pair, a zygote-forked job's
        // one, see `spawner::zygote_id_map`): the whole range must fit below u32::MAX
        // (a wrap would map a job onto low host ids such as root's).
        if self.id_base < 65536
            || self
                .id_base
                .checked_add(3 * self.id_slots())
                .is_none_or(|end| end == u32::MAX)
        {
            return Err(bad(
                "id_base",
                "must be at least 65536 and leave room for 3 ids per job slot below 2^32-1",
            ));
        }
        Ok(())
    }

    /// The most connections one uid may have open, 0 for no limit: the configured
    /// `max_connections_per_uid`, else a quarter of `max_connections` (at least 1), so
    /// that one uid cannot take every place while a single user still has hundreds.
    pub fn connections_per_uid(&self) -> usize {
        self.max_connections_per_uid
            .unwrap_or((self.max_connections / 4).max(1))
    }

    /// Host id slots: one per running job, plus spares for jobs whose init is still
    /// exiting after their outcome was sent, and one per session (each holds its
    /// sandbox's slot for as long as it lives).
    pub fn id_slots(&self) -> u32 {
        self.max_concurrent_jobs as u32 * 2 + self.max_sessions as u32 + 16
    }

    pub fn socket_mode_bits(&self) -> Result<u32, ConfigError> {
        u32::from_str_radix(self.socket_mode.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or(ConfigError::Invalid {
                field: "socket_mode",
                problem: format!("{:?} is not an octal mode", self.socket_mode),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_errors() {
        let err = toml::from_str::<Config>("sockett = \"/x\"").unwrap_err();
        assert!(err.to_string().contains("sockett"), "{err}");
    }

    #[test]
    fn defaults_validate_and_modes_parse() {
        let cfg = Config::default();
        cfg.validate().unwrap();
        assert_eq!(cfg.socket_mode_bits().unwrap(), 0o660);
        let cfg: Config = toml::from_str("socket_mode = \"0999\"").unwrap();
        assert!(matches!(
            cfg.validate(),
            Err(ConfigError::Invalid {
                field: "socket_mode",
                ..
            })
        ));
    }

    #[test]
    fn deployment_fields_parse_and_validate() {
        let cfg: Config = toml::from_str(
            "log_format = \"json\"\nshutdown_grace_ms = 2500\nidle_exit_secs = 60\nmax_jobs_per_uid = 2\n",
        )
        .unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.log_format, LogFormat::Json);
        assert_eq!(
            (
                cfg.shutdown_grace_ms,
                cfg.idle_exit_secs,
                cfg.max_jobs_per_uid
            ),
            (2500, 60, 2)
        );
        let err = toml::from_str::<Config>("log_format = \"xml\"").unwrap_err();
        assert!(err.to_string().contains("xml"), "{err}");
        let cfg: Config = toml::from_str("shutdown_grace_ms = 99999999").unwrap();
        assert!(matches!(
            cfg.validate(),
            Err(ConfigError::Invalid {
                field: "shutdown_grace_ms",
                ..
            })
        ));
    }

    #[test]
    fn buffering_bounds_validate() {
        let invalid = |text: &str| match toml::from_str::<Config>(text).unwrap().validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(invalid("max_connections = 0"), "max_connections");
        assert_eq!(invalid("max_connections = 65537"), "max_connections");
        assert_eq!(
            invalid("max_connections = 4\nmax_connections_per_uid = 5"),
            "max_connections_per_uid"
        );
        assert_eq!(invalid("max_code_bytes = 0"), "max_code_bytes");
        // The total must hold at least one script of the largest size.
        assert_eq!(
            invalid("max_code_bytes = 2048\nmax_code_bytes_total = 1024"),
            "max_code_bytes_total"
        );
        let cfg: Config = toml::from_str(
            "max_code_bytes = 2048\nmax_code_bytes_total = 2048\nmax_connections = 1",
        )
        .unwrap();
        cfg.validate().unwrap();
        let mut reloaded = cfg.clone();
        reloaded.max_connections = 9;
        assert!(cfg.restart_only_changes(&reloaded).is_empty());
        reloaded.max_code_bytes_total = 4096;
        assert_eq!(
            cfg.restart_only_changes(&reloaded),
            ["max_code_bytes_total"]
        );
    }

    #[test]
    fn connection_places_are_bounded_per_uid_and_in_time_by_default() {
        let parse = |text: &str| toml::from_str::<Config>(text).unwrap();
        let invalid = |text: &str| match parse(text).validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{text}: {other:?}"),
        };
        let cfg = Config::default();
        assert_eq!(
            (
                cfg.connections_per_uid(),
                cfg.hello_timeout_ms,
                cfg.idle_timeout_secs
            ),
            (256, 5000, 300)
        );
        // Unset, the per-uid cap follows max_connections (a quarter, at least one);
        // set, it is what it says, and 0 is still no limit.
        let per_uid = |text: &str| {
            let cfg = parse(text);
            cfg.validate().unwrap();
            cfg.connections_per_uid()
        };
        assert_eq!(per_uid("max_connections = 64"), 16);
        assert_eq!(per_uid("max_connections = 3"), 1);
        assert_eq!(per_uid("max_connections_per_uid = 0"), 0);
        assert_eq!(
            per_uid("max_connections = 4\nmax_connections_per_uid = 4"),
            4
        );
        assert_eq!(invalid("hello_timeout_ms = 0"), "hello_timeout_ms");
        assert_eq!(invalid("hello_timeout_ms = 600001"), "hello_timeout_ms");
        assert_eq!(invalid("idle_timeout_secs = 2592001"), "idle_timeout_secs");
        let cfg = parse("hello_timeout_ms = 250\nidle_timeout_secs = 0");
        cfg.validate().unwrap();
        // All three are read as connections come and go: a reload changes them.
        let mut reloaded = cfg.clone();
        reloaded.hello_timeout_ms = 9000;
        reloaded.idle_timeout_secs = 60;
        reloaded.max_connections_per_uid = Some(7);
        assert!(cfg.restart_only_changes(&reloaded).is_empty());
    }

    #[test]
    fn restart_only_changes_are_named() {
        let old = Config::default();
        let mut new = old.clone();
        new.allow_uids.push(1000);
        new.max_queued_jobs = 3;
        assert!(old.restart_only_changes(&new).is_empty());
        new.cgroup_subtree = "other".into();
        new.max_concurrent_jobs = 2;
        assert_eq!(
            old.restart_only_changes(&new),
            ["max_concurrent_jobs", "cgroup_subtree"]
        );
    }

    #[test]
    fn the_default_path_is_used_only_without_a_flag() {
        let flag = PathBuf::from("/x/y.toml");
        assert_eq!(Config::default_path(Some(flag.clone())), Some(flag));
        let implicit = Config::default_path(None);
        assert_eq!(implicit.is_some(), Path::new(DEFAULT_CONFIG_PATH).is_file());
    }
}
