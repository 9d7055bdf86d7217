//! Sandbox profiles: strict TOML files in the profiles directory, validated once at
//! daemon start into [`Profile`]. See `docs/profiles.md`.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use vivarium_proto::{LimitOverrides, MaxLimits};

/// A profile exactly as written in TOML.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    #[serde(default)]
    pub description: String,
    pub python: PythonSection,
    pub limits: LimitsSection,
    pub filesystem: FilesystemSection,
    #[serde(default)]
    pub network: NetworkSection,
    pub security: SecuritySection,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub warm: WarmSection,
    /// PyPI packages a job may ask for (`docs/profiles.md`); absent: none.
    #[serde(default)]
    pub packages: crate::packages::PackagesSection,
    /// Sessions: one sandbox whose interpreter keeps its state between cells
    /// (docs/ARCHITECTURE.md, "Sessions").
    #[serde(default)]
    pub session: SessionSection,
    /// Input files a job or cell may bring under `/work` (docs/profiles.md, `[files]`).
    #[serde(default)]
    pub files: FilesSection,
}

/// What input files a job or a cell may carry (protocol 7+). Every bound is checked by
/// the daemon before any of the job runs; a broken one is `InvalidInputFile`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSection {
    /// Files per job or cell (0: none allowed).
    #[serde(default = "default_max_input_files")]
    pub max_input_files: u32,
    /// Bytes per file.
    #[serde(default = "default_max_input_file_bytes")]
    pub max_input_file_bytes: u64,
    /// Bytes of all files of one job or cell together; below `filesystem.work_size_bytes`
    /// (the `/work` tmpfs must hold them and the script). Absent: 32 MiB, or half of
    /// `/work` where that is less ([`Profile::max_input_bytes`]).
    #[serde(default)]
    pub max_input_bytes: Option<u64>,
    /// Artifacts (protocol 8+): files returned per job or cell; past it the rest are
    /// counted as omitted.
    #[serde(default = "default_max_output_files")]
    pub max_output_files: u32,
    /// Bytes per artifact: a larger file is listed as too large, never read.
    #[serde(default = "default_max_output_file_bytes")]
    pub max_output_file_bytes: u64,
    /// Bytes of one job's or cell's artifacts together: a file that would take them past
    /// it is listed as over the total, never read.
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
}

/// The most input files a profile may allow per job (their paths travel in the plan).
pub const MAX_INPUT_FILES: u32 = 1000;
/// The most artifacts a profile may allow per job or cell.
pub const MAX_OUTPUT_FILES: u32 = 10_000;
/// The most bytes of artifacts a profile may allow per job or cell (the daemon holds
/// them in memory while it sends them).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

fn default_max_output_files() -> u32 {
    100
}
fn default_max_output_file_bytes() -> u64 {
    16 << 20
}
fn default_max_output_bytes() -> u64 {
    32 << 20
}

fn default_max_input_files() -> u32 {
    100
}
fn default_max_input_file_bytes() -> u64 {
    16 << 20
}

impl Default for FilesSection {
    fn default() -> Self {
        FilesSection {
            max_input_files: default_max_input_files(),
            max_input_file_bytes: default_max_input_file_bytes(),
            max_input_bytes: None,
            max_output_files: default_max_output_files(),
            max_output_file_bytes: default_max_output_file_bytes(),
            max_output_bytes: default_max_output_bytes(),
        }
    }
}

/// A profile's sessions: their lifetimes and limits, which a client may only tighten.
/// Absent fields take the profile's job limits (`cell_wall_ms`, `memory_bytes`, `pids`,
/// `output_bytes`) or the defaults below.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSection {
    /// Whether this profile serves sessions at all.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// A session with no cell for this long ends (`IdleTimeout`).
    #[serde(default = "default_session_idle_ttl_secs")]
    pub idle_ttl_secs: u64,
    /// A session ends this long after it opened (`Lifetime`).
    #[serde(default = "default_session_lifetime_secs")]
    pub lifetime_secs: u64,
    /// Each cell's wall limit; absent: `limits.wall_ms`.
    #[serde(default)]
    pub cell_wall_ms: Option<u64>,
    /// CPU time over the whole session (every cell, and whatever runs between them);
    /// absent: ten times `limits.cpu_ms`.
    #[serde(default)]
    pub cpu_ms: Option<u64>,
    /// The session's memory (its cgroup); absent: `limits.memory_bytes`.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Its tasks; absent: `limits.pids`.
    #[serde(default)]
    pub pids: Option<u32>,
    /// Each cell's output cap per stream; absent: `limits.output_bytes`.
    #[serde(default)]
    pub output_bytes: Option<u64>,
    /// The memory guard, as a fraction of `memory_bytes`: a cell that takes the session's
    /// memory past it is interrupted (KeyboardInterrupt) so that the session keeps its
    /// state instead of meeting the OOM killer; on cgroup v2 it is also `memory.high`,
    /// which slows the allocation down meanwhile. 0 turns the guard off.
    #[serde(default = "default_session_memory_guard")]
    pub memory_guard: f64,
    /// How long an interrupted cell has to stop before the session is killed.
    #[serde(default = "default_session_interrupt_grace_ms")]
    pub interrupt_grace_ms: u64,
    /// Session sandboxes kept ready (built ahead, their interpreter waiting for cells),
    /// so that opening a session starts no interpreter; grows under demand up to
    /// `pool_max`, as `[warm]`'s pool does.
    #[serde(default)]
    pub pool: u32,
    #[serde(default)]
    pub pool_max: Option<u32>,
}

fn default_true() -> bool {
    true
}
fn default_session_idle_ttl_secs() -> u64 {
    600
}
fn default_session_lifetime_secs() -> u64 {
    3600
}
fn default_session_memory_guard() -> f64 {
    0.9
}
fn default_session_interrupt_grace_ms() -> u64 {
    2000
}

impl Default for SessionSection {
    fn default() -> Self {
        SessionSection {
            enabled: true,
            idle_ttl_secs: default_session_idle_ttl_secs(),
            lifetime_secs: default_session_lifetime_secs(),
            cell_wall_ms: None,
            cpu_ms: None,
            memory_bytes: None,
            pids: None,
            output_bytes: None,
            memory_guard: default_session_memory_guard(),
            interrupt_grace_ms: default_session_interrupt_grace_ms(),
            pool: 0,
            pool_max: None,
        }
    }
}

impl SessionSection {
    /// The session pool's cap under demand (`pool_max`, or `pool`).
    pub fn pool_cap(&self) -> u32 {
        self.pool_max.unwrap_or(self.pool).max(self.pool)
    }
}

/// The warm path: sandboxes built and interpreters started ahead of time, each of which
/// then runs exactly one job (see docs/ARCHITECTURE.md, "The warm path").
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmSection {
    /// Ready sandboxes kept for this profile when it is idle (the pool's floor); 0 and
    /// no `zygote` turns the warm path off.
    #[serde(default)]
    pub pool: u32,
    /// The most a burst grows the pool to: each job that finds the pool empty (or takes
    /// its last sandbox) raises the pool's size by one, up to this; absent: `pool`.
    #[serde(default)]
    pub pool_max: Option<u32>,
    /// Each `shrink_secs` in which no job found the pool empty, a grown pool's size
    /// steps one down towards `pool` (its surplus sandboxes are retired).
    #[serde(default = "default_warm_shrink_secs")]
    pub shrink_secs: u64,
    /// With no job taken for this long, the pool is emptied (refilled on the next job);
    /// not with `keep`.
    #[serde(default = "default_warm_idle_secs")]
    pub idle_secs: u64,
    /// Build the pool's floor when the daemon starts (and after a reload), before it
    /// serves, and keep it however long no job comes: the shipped `default` profile's
    /// fast path. Without it a pool exists from the first job that asks (which runs
    /// cold) until `idle_secs` without one.
    #[serde(default)]
    pub keep: bool,
    /// Modules each warm interpreter imports before it waits for its job (for example
    /// `json`, or `numpy` from the profile's packages), so that the job's own import of
    /// them is a dictionary lookup.
    #[serde(default)]
    pub preload: Vec<String>,
    /// PEP 508 requirements installed (as for a job) into the environment of every warm
    /// sandbox of this profile; a job asking for exactly this set takes one.
    #[serde(default)]
    pub packages: Vec<String>,
    /// Build this profile's warm sandboxes by forking a zygote: one interpreter per
    /// profile that has started and preloaded once, from which each job's sandbox is
    /// forked and given its own namespaces, cgroup, Landlock and seccomp (see
    /// docs/ARCHITECTURE.md, "The zygote"). A job that finds no ready sandbox then gets
    /// a freshly forked one instead of a cold start.
    #[serde(default)]
    pub zygote: bool,
}

fn default_warm_idle_secs() -> u64 {
    300
}

fn default_warm_shrink_secs() -> u64 {
    30
}

impl WarmSection {
    /// The pool's cap under a burst (`pool_max`, or `pool`).
    pub fn pool_cap(&self) -> u32 {
        self.pool_max.unwrap_or(self.pool).max(self.pool)
    }
}

impl Default for WarmSection {
    fn default() -> Self {
        WarmSection {
            pool: 0,
            pool_max: None,
            shrink_secs: default_warm_shrink_secs(),
            idle_secs: default_warm_idle_secs(),
            keep: false,
            preload: Vec::new(),
            packages: Vec::new(),
            zygote: false,
        }
    }
}

/// The largest `warm.pool` a profile may ask for.
pub const MAX_WARM_POOL: u32 = 64;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonSection {
    /// Absolute path of the interpreter binary (never a shell shim).
    pub interpreter: PathBuf,
    /// Flags before the script path, e.g. `["-I"]`.
    #[serde(default)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub memory_bytes: u64,
    pub pids: u32,
    /// CPU bandwidth in cores (cgroup cpu.max / cfs quota); 0 means unthrottled.
    #[serde(default)]
    pub cpu_cores: f64,
    /// Tell thread pools the quota: the job's environment gets `OMP_NUM_THREADS` and the
    /// like (`plan::THREAD_HINTS`) set to `cpu_cores` rounded up, unless `[env]` sets
    /// them. Without a quota (`cpu_cores = 0`), nothing is set.
    #[serde(default)]
    pub thread_hints: bool,
    /// Per-stream cap on stdout and on stderr.
    pub output_bytes: u64,
    #[serde(default)]
    pub on_output_limit: OutputPolicy,
    pub nofile: u64,
    pub fsize_bytes: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputPolicy {
    /// Kill the job when a stream exceeds its cap.
    #[default]
    Kill,
    /// Keep running; drop the rest of that stream.
    Truncate,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSection {
    /// Host paths bound read-only at the same path (symlinks are recreated as symlinks).
    pub ro_binds: Vec<PathBuf>,
    /// Like `ro_binds`, but skipped when absent on the host.
    #[serde(default)]
    pub ro_binds_optional: Vec<PathBuf>,
    pub work_size_bytes: u64,
    pub work_inodes: u64,
    pub tmp_size_bytes: u64,
    pub tmp_inodes: u64,
    pub shm_size_bytes: u64,
}

/// What a job's network namespace holds (`network = "loopback"` or `"none"`, or
/// `[network] mode = ...`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// A private loopback, as `docker --network none`: `lo` up in the job's own network
    /// namespace, IPv4/IPv6 sockets allowed for it. Nothing routes off the namespace and
    /// the host's loopback is another namespace's.
    #[default]
    Loopback,
    /// No network at all: `lo` down, and seccomp refuses IPv4/IPv6 sockets (EPERM).
    None,
}

/// The `network` key: a mode alone (`network = "none"`) or a table.
#[derive(Debug, Clone, Default)]
pub struct NetworkSection {
    /// Reserved: only `false` is supported (direct network access does not exist).
    pub enabled: bool,
    pub mode: NetworkMode,
    /// `host` (port 443) or `host:port` a job may reach, through the daemon's egress
    /// proxy alone (`crate::egress`), in a network namespace of its own with `lo` up and
    /// nothing else. Empty: no way out.
    pub egress: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NetworkTable {
    #[serde(default)]
    enabled: bool,
    #[serde(default)]
    mode: NetworkMode,
    #[serde(default)]
    egress: Vec<String>,
}

impl<'de> Deserialize<'de> for NetworkSection {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = NetworkSection;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(r#""loopback", "none" or a [network] table"#)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let mode = NetworkMode::deserialize(serde::de::value::StrDeserializer::new(v))?;
                Ok(NetworkSection {
                    mode,
                    ..NetworkSection::default()
                })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let t =
                    NetworkTable::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(NetworkSection {
                    enabled: t.enabled,
                    mode: t.mode,
                    egress: t.egress,
                })
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl NetworkSection {
    /// The egress proxy's allow-list (entries are checked at validation).
    pub fn egress_allow(&self) -> Vec<(String, u16)> {
        let mut out: Vec<(String, u16)> = Vec::new();
        for hp in self
            .egress
            .iter()
            .filter_map(|h| crate::packages::host_port(h).ok())
        {
            if !out.contains(&hp) {
                out.push(hp);
            }
        }
        out
    }

    /// Whether the job's seccomp policy allows IPv4/IPv6 sockets (on its own loopback,
    /// or to the proxy there).
    pub fn inet(&self) -> bool {
        self.enabled || !self.egress.is_empty() || self.mode == NetworkMode::Loopback
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecuritySection {
    /// Seccomp policy, relative to the profiles directory.
    pub seccomp: PathBuf,
    /// The Landlock ABI the profile is written for; rules of later ABIs are not used.
    pub landlock_abi: u8,
    /// The lowest kernel Landlock ABI this profile accepts. Below `landlock_abi`, the
    /// missing features are listed in every outcome's `not_enforced`.
    pub landlock_min_abi: u8,
    /// cgroup controllers the profile's limits need.
    pub cgroup_controllers: Vec<String>,
}

/// A validated, ready-to-use profile.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub file: ProfileFile,
    pub seccomp_path: PathBuf,
    /// A built-in profile's seccomp policy ([`builtin`]): read from the binary, not from
    /// `seccomp_path` (which then only names it).
    pub seccomp_builtin: Option<&'static [u8]>,
    /// `warm.packages`, parsed, sorted by canonical text and deduplicated.
    pub warm_packages: Vec<crate::packages::spec::Req>,
}

/// Effective per-job limits: the profile's, tightened by the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub memory_bytes: u64,
    pub pids: u32,
    pub output_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read profile {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("profile {path} is invalid")]
    Parse {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("profile {name}: {field}: {problem}")]
    Invalid {
        name: String,
        field: &'static str,
        problem: String,
    },
}

/// A job limit that is zero or looser than the profile allows.
#[derive(Debug, thiserror::Error)]
#[error("{field} = {requested} is out of range (1..={max})")]
pub struct LimitError {
    pub field: &'static str,
    pub requested: u64,
    pub max: u64,
}

impl Profile {
    /// What one job's or cell's artifacts may hold (`[files]`).
    pub fn output_caps(&self) -> vivarium_sandbox::outputs::OutputCaps {
        let f = &self.file.files;
        vivarium_sandbox::outputs::OutputCaps {
            max_files: f.max_output_files,
            max_file_bytes: f.max_output_file_bytes,
            max_total_bytes: f.max_output_bytes,
        }
    }

    /// Bytes that one job's or cell's input files may hold together.
    pub fn max_input_bytes(&self) -> u64 {
        let f = &self.file;
        f.files
            .max_input_bytes
            .unwrap_or((32 << 20u64).min(f.filesystem.work_size_bytes / 2))
    }

    /// Check a job's or cell's input files against the path rules and this profile's
    /// `[files]` bounds; the message names the file that breaks one (`InvalidInputFile`).
    pub fn check_input_files(
        &self,
        files: &[vivarium_proto::InputFile],
        script: bool,
    ) -> Result<(), String> {
        let f = &self.file.files;
        if files.len() > f.max_input_files as usize {
            return Err(format!(
                "{} input files, and profile {:?} allows at most {} (files.max_input_files)",
                files.len(),
                self.name,
                f.max_input_files
            ));
        }
        vivarium_proto::files::check_input_files(files).map_err(|e| e.to_string())?;
        let mut total = 0u64;
        for file in files {
            if file.len > f.max_input_file_bytes {
                return Err(format!(
                    "input file {:?} is {} bytes, and profile {:?} allows at most {} per file (files.max_input_file_bytes)",
                    file.path, file.len, self.name, f.max_input_file_bytes
                ));
            }
            if script && (file.path == "main.py") {
                return Err(format!(
                    "input file {:?}: /work/main.py is the job's script",
                    file.path
                ));
            }
            total = total.saturating_add(file.len);
            if total > self.max_input_bytes() {
                return Err(format!(
                    "input file {:?} takes the files past {} bytes together, the most profile {:?} allows (files.max_input_bytes)",
                    file.path,
                    self.max_input_bytes(),
                    self.name
                ));
            }
        }
        Ok(())
    }

    /// Parse and validate `<dir>/<name>.toml`.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_owned(),
            source,
        })?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file: ProfileFile = toml::from_str(&text).map_err(|source| ProfileError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::validate(name, file, dir)
    }

    pub fn validate(name: String, file: ProfileFile, dir: &Path) -> Result<Self, ProfileError> {
        let bad = |field: &'static str, problem: String| ProfileError::Invalid {
            name: name.clone(),
            field,
            problem,
        };
        let py = &file.python.interpreter;
        if !py.is_absolute() {
            return Err(bad("python.interpreter", "must be an absolute path".into()));
        }
        if is_script(py) {
            return Err(bad(
                "python.interpreter",
                format!(
                    "{} is a script (a shim?), not an interpreter binary",
                    py.display()
                ),
            ));
        }
        let l = &file.limits;
        for (field, v) in [
            ("limits.wall_ms", l.wall_ms),
            ("limits.cpu_ms", l.cpu_ms),
            ("limits.memory_bytes", l.memory_bytes),
            ("limits.pids", u64::from(l.pids)),
            ("limits.output_bytes", l.output_bytes),
            ("limits.nofile", l.nofile),
            ("limits.fsize_bytes", l.fsize_bytes),
            (
                "filesystem.work_size_bytes",
                file.filesystem.work_size_bytes,
            ),
            ("filesystem.work_inodes", file.filesystem.work_inodes),
            ("filesystem.tmp_size_bytes", file.filesystem.tmp_size_bytes),
            ("filesystem.tmp_inodes", file.filesystem.tmp_inodes),
            ("filesystem.shm_size_bytes", file.filesystem.shm_size_bytes),
        ] {
            if v == 0 {
                return Err(bad(field, "must be greater than 0".into()));
            }
        }
        if l.memory_bytes < 16 << 20 {
            return Err(bad("limits.memory_bytes", "must be at least 16 MiB".into()));
        }
        if l.pids < 2 {
            return Err(bad("limits.pids", "must be at least 2".into()));
        }
        if !(0.0..=1024.0).contains(&l.cpu_cores) || l.cpu_cores.is_nan() {
            return Err(bad("limits.cpu_cores", "must be between 0 and 1024".into()));
        }
        for p in file
            .filesystem
            .ro_binds
            .iter()
            .chain(&file.filesystem.ro_binds_optional)
        {
            if !p.is_absolute() || p.components().any(|c| c.as_os_str() == "..") {
                return Err(bad(
                    "filesystem.ro_binds",
                    format!("{} must be absolute without '..'", p.display()),
                ));
            }
            // Neither inside nor above a path the sandbox builds (binding /etc would
            // hide the generated /etc/passwd).
            if RESERVED
                .iter()
                .any(|r| p.starts_with(r) || Path::new(r).starts_with(p))
            {
                return Err(bad(
                    "filesystem.ro_binds",
                    format!("{} overlaps a path the sandbox builds itself", p.display()),
                ));
            }
        }
        let fs = &file.files;
        if fs.max_input_files > MAX_INPUT_FILES {
            return Err(bad(
                "files.max_input_files",
                format!("must be at most {MAX_INPUT_FILES}"),
            ));
        }
        if fs.max_input_file_bytes > file.limits.fsize_bytes {
            return Err(bad(
                "files.max_input_file_bytes",
                format!(
                    "must be at most limits.fsize_bytes ({}): a warm sandbox or a session writes its files under that limit",
                    file.limits.fsize_bytes
                ),
            ));
        }
        if fs
            .max_input_bytes
            .is_some_and(|b| b >= file.filesystem.work_size_bytes)
        {
            return Err(bad(
                "files.max_input_bytes",
                format!(
                    "must be below filesystem.work_size_bytes ({}): /work holds the files and the script",
                    file.filesystem.work_size_bytes
                ),
            ));
        }
        if fs.max_output_files > MAX_OUTPUT_FILES {
            return Err(bad(
                "files.max_output_files",
                format!("must be at most {MAX_OUTPUT_FILES}"),
            ));
        }
        if fs.max_output_bytes > MAX_OUTPUT_BYTES {
            return Err(bad(
                "files.max_output_bytes",
                format!("must be at most {MAX_OUTPUT_BYTES}"),
            ));
        }
        if fs.max_output_file_bytes > fs.max_output_bytes {
            return Err(bad(
                "files.max_output_file_bytes",
                format!(
                    "must be at most files.max_output_bytes ({})",
                    fs.max_output_bytes
                ),
            ));
        }
        let ss = &file.session;
        for (field, v) in [
            ("session.idle_ttl_secs", Some(ss.idle_ttl_secs)),
            ("session.lifetime_secs", Some(ss.lifetime_secs)),
            ("session.cell_wall_ms", ss.cell_wall_ms),
            ("session.cpu_ms", ss.cpu_ms),
            ("session.memory_bytes", ss.memory_bytes),
            ("session.pids", ss.pids.map(u64::from)),
            ("session.output_bytes", ss.output_bytes),
            ("session.interrupt_grace_ms", Some(ss.interrupt_grace_ms)),
        ] {
            if v == Some(0) {
                return Err(bad(field, "must be positive".into()));
            }
        }
        if !(0.0..1.0).contains(&ss.memory_guard) {
            return Err(bad(
                "session.memory_guard",
                "must be at least 0 (off) and below 1 (a fraction of the memory limit)".into(),
            ));
        }
        if ss.pool > MAX_WARM_POOL || ss.pool_cap() > MAX_WARM_POOL {
            return Err(bad(
                "session.pool",
                format!("pool and pool_max must be at most {MAX_WARM_POOL}"),
            ));
        }
        if file.warm.pool > MAX_WARM_POOL {
            return Err(bad("warm.pool", format!("must be at most {MAX_WARM_POOL}")));
        }
        if let Some(max) = file.warm.pool_max {
            if max < file.warm.pool || max > MAX_WARM_POOL {
                return Err(bad(
                    "warm.pool_max",
                    format!("must be between warm.pool and {MAX_WARM_POOL}"),
                ));
            }
        }
        if (file.warm.pool > 0 || file.warm.zygote) && file.warm.idle_secs == 0 {
            return Err(bad("warm.idle_secs", "must be greater than 0".into()));
        }
        if file.warm.shrink_secs == 0 {
            return Err(bad("warm.shrink_secs", "must be greater than 0".into()));
        }
        if file.warm.keep && file.warm.pool == 0 {
            return Err(bad("warm.keep", "needs a warm.pool to keep".into()));
        }
        for m in &file.warm.preload {
            let dotted = m.split('.').all(|part| {
                part.chars()
                    .next()
                    .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                    && part.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
            });
            if !dotted {
                return Err(bad(
                    "warm.preload",
                    format!("{m:?} is not a module name (dotted identifiers)"),
                ));
            }
        }
        if file.network.enabled {
            return Err(bad(
                "network.enabled",
                "direct network access is not supported; only false (see network.egress)".into(),
            ));
        }
        if file.network.mode == NetworkMode::None && !file.network.egress.is_empty() {
            return Err(bad(
                "network.egress",
                "needs a loopback (the proxy listens on the job's own 127.0.0.1): not with mode \"none\"".into(),
            ));
        }
        for host in &file.network.egress {
            crate::packages::host_port(host)
                .map_err(|e| bad("network.egress", vivarium_proto::error_chain(&e)))?;
        }
        if !file.network.egress.is_empty() {
            if file.security.landlock_abi < 4 {
                return Err(bad(
                    "network.egress",
                    "needs security.landlock_abi >= 4 (TCP connect to the proxy's port alone)"
                        .into(),
                ));
            }
            if file.warm.pool > 0 || file.warm.zygote {
                return Err(bad(
                    "network.egress",
                    "is for cold jobs only: not with warm.pool or warm.zygote".into(),
                ));
            }
        }
        let s = &file.security;
        if !(1..=7).contains(&s.landlock_abi) {
            return Err(bad("security.landlock_abi", "must be 1..=7".into()));
        }
        if s.landlock_min_abi == 0 || s.landlock_min_abi > s.landlock_abi {
            return Err(bad(
                "security.landlock_min_abi",
                "must be 1..=security.landlock_abi".into(),
            ));
        }
        for c in &s.cgroup_controllers {
            if !["memory", "pids", "cpu"].contains(&c.as_str()) {
                return Err(bad(
                    "security.cgroup_controllers",
                    format!("unknown controller {c:?} (memory, pids, cpu)"),
                ));
            }
        }
        for (k, v) in &file.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(bad("env", format!("invalid variable {k:?}")));
            }
        }
        if file.python.args.iter().any(|a| a.contains('\0')) {
            return Err(bad("python.args", "an argument contains a NUL byte".into()));
        }
        if py.as_os_str().as_encoded_bytes().contains(&0)
            || !file.filesystem.ro_binds.iter().any(|b| py.starts_with(b))
        {
            return Err(bad(
                "python.interpreter",
                format!("{} is not under any of filesystem.ro_binds", py.display()),
            ));
        }
        file.packages
            .validate()
            .map_err(|(field, problem)| bad(field, problem))?;
        if !file.warm.packages.is_empty() && !file.packages.enabled {
            return Err(bad(
                "warm.packages",
                "needs [packages] enabled = true".into(),
            ));
        }
        let mut warm_packages = file
            .warm
            .packages
            .iter()
            .map(|r| crate::packages::spec::parse_requirement(r))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad("warm.packages", e.message))?;
        warm_packages.sort_by(|a, b| a.text.cmp(&b.text));
        warm_packages.dedup();
        let seccomp_path = dir.join(&s.seccomp);
        Ok(Profile {
            name,
            file,
            seccomp_path,
            seccomp_builtin: None,
            warm_packages,
        })
    }

    pub fn max_limits(&self) -> MaxLimits {
        let l = &self.file.limits;
        MaxLimits {
            wall_ms: l.wall_ms,
            cpu_ms: l.cpu_ms,
            memory_bytes: l.memory_bytes,
            pids: l.pids,
            output_bytes: l.output_bytes,
        }
    }

    /// The profile's own limits (a job without overrides).
    pub fn default_limits(&self) -> JobLimits {
        let m = self.max_limits();
        JobLimits {
            wall_ms: m.wall_ms,
            cpu_ms: m.cpu_ms,
            memory_bytes: m.memory_bytes,
            pids: m.pids,
            output_bytes: m.output_bytes,
        }
    }

    /// A session's limits: the profile's `[session]` values (or its job limits where
    /// that section says nothing), tightened by the request's overrides.
    pub fn session_limits(
        &self,
        o: &vivarium_proto::SessionLimitOverrides,
    ) -> Result<vivarium_proto::SessionLimits, LimitError> {
        let s = &self.file.session;
        let l = &self.file.limits;
        let memory = s.memory_bytes.unwrap_or(l.memory_bytes);
        let pick = |field, req: Option<u64>, max: u64| match req {
            None => Ok(max),
            Some(v) if v >= 1 && v <= max => Ok(v),
            Some(v) => Err(LimitError {
                field,
                requested: v,
                max,
            }),
        };
        let memory_bytes = pick("memory_bytes", o.memory_bytes, memory)?;
        Ok(vivarium_proto::SessionLimits {
            idle_ttl_ms: pick("idle_ttl_ms", o.idle_ttl_ms, s.idle_ttl_secs * 1000)?,
            lifetime_ms: pick("lifetime_ms", o.lifetime_ms, s.lifetime_secs * 1000)?,
            cell_wall_ms: pick("cell_wall_ms", o.cell_wall_ms, self.session_cell_wall_ms())?,
            cpu_ms: pick("cpu_ms", o.cpu_ms, s.cpu_ms.unwrap_or(l.cpu_ms * 10))?,
            memory_bytes,
            memory_guard_bytes: (memory_bytes as f64 * s.memory_guard) as u64,
            pids: pick(
                "pids",
                o.pids.map(u64::from),
                u64::from(s.pids.unwrap_or(l.pids)),
            )? as u32,
            output_bytes: pick(
                "output_bytes",
                o.output_bytes,
                s.output_bytes.unwrap_or(l.output_bytes),
            )?,
            interrupt_grace_ms: s.interrupt_grace_ms,
        })
    }

    fn session_cell_wall_ms(&self) -> u64 {
        self.file
            .session
            .cell_wall_ms
            .unwrap_or(self.file.limits.wall_ms)
    }

    /// The limits a session's sandbox is built with (its cgroup's memory and pids; the
    /// wall and CPU limits are the session's own, armed when it opens).
    pub fn session_sandbox_limits(&self, s: &vivarium_proto::SessionLimits) -> JobLimits {
        JobLimits {
            wall_ms: s.lifetime_ms,
            cpu_ms: s.cpu_ms,
            memory_bytes: s.memory_bytes,
            pids: s.pids,
            output_bytes: s.output_bytes,
        }
    }

    /// Apply a job's overrides: each may only tighten the profile's value.
    pub fn job_limits(&self, o: &LimitOverrides) -> Result<JobLimits, LimitError> {
        let m = self.max_limits();
        let pick = |field, req: Option<u64>, max: u64| match req {
            None => Ok(max),
            Some(v) if v >= 1 && v <= max => Ok(v),
            Some(v) => Err(LimitError {
                field,
                requested: v,
                max,
            }),
        };
        Ok(JobLimits {
            wall_ms: pick("wall_ms", o.wall_ms, m.wall_ms)?,
            cpu_ms: pick("cpu_ms", o.cpu_ms, m.cpu_ms)?,
            memory_bytes: pick("memory_bytes", o.memory_bytes, m.memory_bytes)?,
            pids: pick("pids", o.pids.map(u64::from), u64::from(m.pids))? as u32,
            output_bytes: pick("output_bytes", o.output_bytes, m.output_bytes)?,
        })
    }
}

/// Paths the sandbox builds itself; a profile may not bind over them.
const RESERVED: &[&str] = &[
    "/proc",
    "/dev",
    "/work",
    "/tmp",
    "/etc/passwd",
    "/etc/group",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
];

fn is_script(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 2];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .map(|()| &head == b"#!")
        .unwrap_or(false)
}

/// The shipped profiles (`profiles/`), built into the binary: what a daemon serves when
/// the default profiles directory does not exist, as on a fresh machine. A unit test
/// checks that this list is every shipped profile.
const BUILTIN: &[(&str, &str)] = &[
    ("compat", include_str!("../../profiles/compat.toml")),
    ("default", include_str!("../../profiles/default.toml")),
    ("offline", include_str!("../../profiles/offline.toml")),
    ("rootless", include_str!("../../profiles/rootless.toml")),
    ("warm", include_str!("../../profiles/warm.toml")),
    ("zygote", include_str!("../../profiles/zygote.toml")),
];
/// The seccomp policies the built-in profiles name, by their relative path.
const BUILTIN_SECCOMP: &[(&str, &[u8])] = &[(
    "seccomp/default.json",
    include_bytes!("../../profiles/seccomp/default.json"),
)];
/// Where the built-in profiles say they come from (their `seccomp_path`s are beneath it).
pub const BUILTIN_DIR: &str = "(built into vivariumd)";

/// The built-in profiles, validated like a directory's.
pub fn builtin() -> Result<Vec<Profile>, ProfileError> {
    let dir = Path::new(BUILTIN_DIR);
    BUILTIN
        .iter()
        .map(|(name, text)| {
            let path = dir.join(format!("{name}.toml"));
            let file: ProfileFile = toml::from_str(text).map_err(|source| ProfileError::Parse {
                path: path.clone(),
                source: Box::new(source),
            })?;
            let seccomp = file.security.seccomp.clone();
            let mut profile = Profile::validate((*name).to_owned(), file, dir)?;
            let json = BUILTIN_SECCOMP
                .iter()
                .find(|(p, _)| Path::new(p) == seccomp);
            profile.seccomp_builtin =
                Some(json.map(|(_, j)| *j).ok_or_else(|| ProfileError::Invalid {
                    name: (*name).to_owned(),
                    field: "security.seccomp",
                    problem: format!("{} is not built in", seccomp.display()),
                })?);
            Ok(profile)
        })
        .collect()
}

/// Load every `*.toml` in `dir`, sorted by name. A file that fails validation is an
/// error: a broken profile is never silently dropped.
pub fn load_dir(dir: &Path) -> Result<Vec<Profile>, ProfileError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ProfileError::Read {
        path: dir.to_owned(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    paths.iter().map(|p| Profile::load(p)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles")
    }

    /// The built-in profiles are exactly the shipped directory's, parsed the same way, with
    /// the same seccomp policy bytes.
    #[test]
    fn the_built_in_profiles_are_the_shipped_ones() {
        let shipped = load_dir(&shipped_dir()).unwrap();
        let built_in = builtin().unwrap();
        let names = |ps: &[Profile]| ps.iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&built_in), names(&shipped));
        for (b, s) in built_in.iter().zip(&shipped) {
            assert_eq!(
                format!("{:?}", b.file),
                format!("{:?}", s.file),
                "{}",
                b.name
            );
            assert_eq!(
                b.seccomp_builtin.unwrap(),
                std::fs::read(&s.seccomp_path).unwrap(),
                "{}",
                b.name
            );
            assert!(
                b.seccomp_path.starts_with(BUILTIN_DIR),
                "{:?}",
                b.seccomp_path
            );
        }
    }

    #[test]
    fn shipped_profiles_validate() {
        let profiles = load_dir(&shipped_dir()).unwrap();
        let names: Vec<_> = profiles.iter().map(|p| p.name.as_str()).collect();
        assert!(names.contains(&"default"), "{names:?}");
        assert!(names.contains(&"compat"), "{names:?}");
    }

    fn parse(text: &str) -> Result<Profile, ProfileError> {
        let file: ProfileFile = toml::from_str(text).map_err(|source| ProfileError::Parse {
            path: "t.toml".into(),
            source: Box::new(source),
        })?;
        Profile::validate("t".into(), file, &shipped_dir())
    }

    fn default_text() -> String {
        std::fs::read_to_string(shipped_dir().join("default.toml")).unwrap()
    }

    #[test]
    fn unknown_field_is_rejected_with_its_name() {
        let text = default_text().replace("[limits]", "[limits]\nmemroy_bytes = 5");
        let err = parse(&text).unwrap_err();
        let msg = format!("{:#}", anyhow::Error::from(err));
        assert!(msg.contains("memroy_bytes"), "{msg}");
    }

    #[test]
    fn invalid_values_name_the_field() {
        let text = default_text().replace("pids = 64", "pids = 0");
        match parse(&text).unwrap_err() {
            ProfileError::Invalid { field, .. } => assert_eq!(field, "limits.pids"),
            e => panic!("{e:?}"),
        }
        let text = default_text().replace("/usr/bin/python3\"", "python3\"");
        match parse(&text).unwrap_err() {
            ProfileError::Invalid { field, .. } => assert_eq!(field, "python.interpreter"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn warm_pool_is_bounded_and_off_without_a_section() {
        let text = default_text();
        let bare = &text[..text.find("[warm]").expect("default.toml has [warm]")];
        let off = parse(bare).unwrap().file.warm;
        assert_eq!((off.pool, off.pool_cap(), off.keep), (0, 0, false));
        let ok = parse(&format!("{bare}\n[warm]\npool = 3\n"))
            .unwrap()
            .file
            .warm;
        assert_eq!(
            (ok.pool, ok.pool_cap(), ok.idle_secs, ok.shrink_secs),
            (3, 3, 300, 30)
        );
        let grown = parse(&format!(
            "{bare}\n[warm]\npool = 1\npool_max = 4\nkeep = true\n"
        ));
        assert_eq!(grown.unwrap().file.warm.pool_cap(), 4);
        for (extra, field) in [
            ("pool = 65", "warm.pool"),
            ("pool = 2\npool_max = 1", "warm.pool_max"),
            ("pool = 2\npool_max = 65", "warm.pool_max"),
            ("pool = 2\nshrink_secs = 0", "warm.shrink_secs"),
            ("keep = true", "warm.keep"),
            ("pool = 1\npreload = [\"os; import x\"]", "warm.preload"),
            ("pool = 1\npreload = [\"\"]", "warm.preload"),
            ("pool = 1\npackages = [\"numpy >>= 1\"]", "warm.packages"),
            ("pool = 1\nidle_secs = 0", "warm.idle_secs"),
        ] {
            match parse(&format!("{bare}\n[warm]\n{extra}\n")).unwrap_err() {
                ProfileError::Invalid { field: f, .. } => assert_eq!(f, field),
                e => panic!("{e:?}"),
            }
        }
        let err = parse(&format!("{bare}\n[warm]\nsize = 2\n")).unwrap_err();
        assert!(matches!(err, ProfileError::Parse { .. }), "{err:?}");
    }

    /// `network` is a mode alone or a table; the default is a private loopback; a mode
    /// that does not exist and `none` with egress are refused, naming the key.
    #[test]
    fn network_is_a_mode_or_a_table() {
        let table = |body: &str| {
            let text = default_text();
            let start = text.find("[network]").unwrap();
            let end = text.find("[security]").unwrap();
            format!("{}{body}{}", &text[..start], &text[end..])
        };
        let mode = |text: &str| parse(text).map(|p| p.file.network.mode);
        assert_eq!(mode(&default_text()).unwrap(), NetworkMode::Loopback);
        assert_eq!(mode(&table("")).unwrap(), NetworkMode::Loopback, "absent");
        assert_eq!(
            mode(&format!("network = \"none\"\n{}", table(""))).unwrap(),
            NetworkMode::None
        );
        assert_eq!(
            mode(&table("[network]\nmode = \"none\"\n")).unwrap(),
            NetworkMode::None
        );
        let offline = load_dir(&shipped_dir()).unwrap();
        let offline = offline.iter().find(|p| p.name == "offline").unwrap();
        assert_eq!(offline.file.network.mode, NetworkMode::None);
        assert!(!offline.file.network.inet());
        assert!(parse(&default_text()).unwrap().file.network.inet());
        for bad in ["network = \"host\"\n", "[network]\nmode = \"bridge\"\n"] {
            let text = if bad.starts_with('[') {
                table(bad)
            } else {
                format!("{bad}{}", table(""))
            };
            let msg = format!("{:#}", anyhow::Error::from(parse(&text).unwrap_err()));
            assert!(msg.contains("loopback") && msg.contains("none"), "{msg}");
        }
        let both = table("[network]\nmode = \"none\"\negress = [\"example.org\"]\n");
        match parse(&both).unwrap_err() {
            ProfileError::Invalid { field, .. } => assert_eq!(field, "network.egress"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn binds_may_not_cover_what_the_sandbox_builds() {
        for bind in ["/etc", "/", "/proc/sys", "/dev"] {
            let text = default_text().replace(
                "ro_binds = [\"/usr\",",
                &format!("ro_binds = [\"{bind}\", \"/usr\","),
            );
            match parse(&text).unwrap_err() {
                ProfileError::Invalid { field, .. } => {
                    assert_eq!(field, "filesystem.ro_binds", "{bind}")
                }
                e => panic!("{bind}: {e:?}"),
            }
        }
    }

    #[test]
    fn the_interpreter_must_be_inside_the_sandbox() {
        let text = default_text().replace("ro_binds = [\"/usr\", ", "ro_binds = [");
        match parse(&text).unwrap_err() {
            ProfileError::Invalid { field, .. } => assert_eq!(field, "python.interpreter"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn shell_shims_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shim = dir.path().join("python3");
        std::fs::write(&shim, "#!/usr/bin/env bash\nexec python3.11 \"$@\"\n").unwrap();
        let text = default_text().replace("/usr/bin/python3", shim.to_str().unwrap());
        assert!(matches!(
            parse(&text),
            Err(ProfileError::Invalid {
                field: "python.interpreter",
                ..
            })
        ));
    }

    /// `[files]`: bounds that /work and the file-size limit can hold, and input files
    /// checked against them with the file named.
    #[test]
    fn files_bounds_are_checked_and_enforced() {
        let with = |extra: &str| parse(&format!("{}\n[files]\n{extra}\n", default_text()));
        assert!(with("max_input_files = 1001").is_err());
        assert!(with("max_input_bytes = 67108864").is_err()); // = work_size_bytes
        assert!(with("max_input_file_bytes = 67108865").is_err()); // > fsize_bytes
        assert!(with("max_output_files = 10001").is_err());
        assert!(with("max_output_bytes = 1073741825").is_err());
        assert!(with("max_output_bytes = 10\nmax_output_file_bytes = 11").is_err());
        let caps = with("max_output_files = 3\nmax_output_file_bytes = 5\nmax_output_bytes = 9")
            .unwrap()
            .output_caps();
        assert_eq!(
            (caps.max_files, caps.max_file_bytes, caps.max_total_bytes),
            (3, 5, 9)
        );
        let shipped = parse(&default_text()).unwrap().output_caps();
        assert_eq!(
            (
                shipped.max_files,
                shipped.max_file_bytes,
                shipped.max_total_bytes
            ),
            (100, 16 << 20, 32 << 20)
        );
        let p =
            with("max_input_files = 2\nmax_input_file_bytes = 10\nmax_input_bytes = 15").unwrap();
        let file = |path: &str, len: u64| vivarium_proto::InputFile {
            path: path.into(),
            mode: 0,
            len,
        };
        assert!(p
            .check_input_files(&[file("a", 10), file("b", 5)], true)
            .is_ok());
        let e = p.check_input_files(&[file("a", 11)], true).unwrap_err();
        assert!(
            e.contains("\"a\"") && e.contains("max_input_file_bytes"),
            "{e}"
        );
        let e = p
            .check_input_files(&[file("a", 10), file("b", 6)], true)
            .unwrap_err();
        assert!(e.contains("\"b\"") && e.contains("max_input_bytes"), "{e}");
        let e = p
            .check_input_files(&[file("a", 1), file("b", 1), file("c", 1)], true)
            .unwrap_err();
        assert!(e.contains("max_input_files"), "{e}");
        assert!(p.check_input_files(&[file("main.py", 1)], true).is_err());
        assert!(p.check_input_files(&[file("main.py", 1)], false).is_ok());
        // Half of /work when that is less than 32 MiB.
        let small = parse(&default_text().replace(
            "work_size_bytes = 67_108_864",
            "work_size_bytes = 1_048_576",
        ))
        .unwrap();
        assert_eq!(small.max_input_bytes(), 512 << 10);
    }

    #[test]
    fn jobs_may_tighten_but_not_loosen() {
        let p = parse(&default_text()).unwrap();
        let max = p.max_limits();
        let tight = p
            .job_limits(&LimitOverrides {
                wall_ms: Some(1000),
                memory_bytes: Some(64 << 20),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            tight,
            JobLimits {
                wall_ms: 1000,
                cpu_ms: max.cpu_ms,
                memory_bytes: 64 << 20,
                pids: max.pids,
                output_bytes: max.output_bytes,
            }
        );
        let err = p
            .job_limits(&LimitOverrides {
                memory_bytes: Some(max.memory_bytes + 1),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err.field, "memory_bytes");
        assert!(p
            .job_limits(&LimitOverrides {
                pids: Some(0),
                ..Default::default()
            })
            .is_err());
    }

    /// A session's limits: `[session]` (or the job limits where it says nothing),
    /// tightened by the request, never loosened; the memory guard follows the memory.
    #[test]
    fn sessions_may_tighten_but_not_loosen() {
        use vivarium_proto::SessionLimitOverrides as O;
        // The shipped default without its own [session] (the file's last section).
        let base = default_text()
            .split("\n[session]")
            .next()
            .unwrap()
            .to_owned();
        let text = base.clone() + "\n[session]\nidle_ttl_secs = 60\nmemory_guard = 0.5\n";
        let p = parse(&text).unwrap();
        let own = p.session_limits(&O::default()).unwrap();
        assert_eq!(own.idle_ttl_ms, 60_000);
        assert_eq!(own.lifetime_ms, 3_600_000);
        assert_eq!(own.cell_wall_ms, p.file.limits.wall_ms);
        assert_eq!(own.cpu_ms, p.file.limits.cpu_ms * 10);
        assert_eq!(own.memory_bytes, p.file.limits.memory_bytes);
        assert_eq!(own.memory_guard_bytes, p.file.limits.memory_bytes / 2);
        let tight = p
            .session_limits(&O {
                idle_ttl_ms: Some(1000),
                memory_bytes: Some(64 << 20),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(
            (tight.idle_ttl_ms, tight.memory_guard_bytes),
            (1000, 32 << 20)
        );
        for loose in [
            O {
                idle_ttl_ms: Some(60_001),
                ..Default::default()
            },
            O {
                lifetime_ms: Some(3_600_001),
                ..Default::default()
            },
            O {
                memory_bytes: Some(own.memory_bytes + 1),
                ..Default::default()
            },
            O {
                cpu_ms: Some(0),
                ..Default::default()
            },
        ] {
            assert!(p.session_limits(&loose).is_err(), "{loose:?}");
        }
        for bad in [
            "memory_guard = 1.0",
            "memory_guard = -0.1",
            "idle_ttl_secs = 0",
            "pool = 65",
        ] {
            let text = base.clone() + "\n[session]\n" + bad + "\n";
            assert!(parse(&text).is_err(), "{bad}");
        }
    }
}
