//! Messages exchanged between clients and `vivariumd`.
//!
//! Variants are appended only; see the crate docs for the evolution rules.

use serde::{Deserialize, Serialize};

/// Client -> daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Must be the first message of every connection.
    Hello(Hello),
    /// Submit a job. At most one job runs per connection at a time.
    Submit(JobSpec),
    /// A piece of the script when the spec said [`Code::Chunked`].
    CodeChunk(Vec<u8>),
    /// Bytes for the job's stdin (only when the spec set `stdin`).
    Stdin(Vec<u8>),
    /// Close the job's stdin.
    StdinEof,
    /// Kill the running job; its outcome still arrives, with reason `Cancelled`.
    Cancel,
    /// Ask which profiles exist and whether each can be enforced here.
    ListProfiles,
    /// Protocol 2+: submit a job that names PyPI packages to install into its
    /// environment first (PEP 508 requirement strings). A plain `Submit` on a version-2
    /// connection still reads PEP 723 inline metadata from the code.
    SubmitWith(Box<SubmitWith>),
    /// Protocol 4+: ask what each profile offers beyond [`ProfileInfo`] (whether its jobs
    /// can have packages); answered with [`Event::ProfileFeatures`].
    ListProfileFeatures,
}

/// A job plus the packages it needs (protocol 2+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitWith {
    pub spec: JobSpec,
    /// PEP 508 requirement strings, e.g. `numpy>=2`; added to any PEP 723 block.
    pub packages: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub min_version: u32,
    pub max_version: u32,
    /// Free-form client name for the daemon's logs.
    pub client: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Profile name, e.g. `default`.
    pub profile: String,
    /// The Python source (must be UTF-8).
    pub code: Code,
    /// `sys.argv[1:]` for the script.
    pub args: Vec<String>,
    /// Whether stdin is streamed with `Request::Stdin`; if false, stdin is empty.
    pub stdin: bool,
    /// Tighter limits than the profile's; never looser.
    pub limits: LimitOverrides,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Code {
    /// The whole script in the submit frame.
    Inline(Vec<u8>),
    /// The script follows in `CodeChunk` frames adding up to `len` bytes.
    Chunked { len: u64 },
}

/// Per-job limits; `None` keeps the profile's value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitOverrides {
    pub wall_ms: Option<u64>,
    pub cpu_ms: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u32>,
    pub output_bytes: Option<u64>,
}

/// Daemon -> client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    HelloAck(HelloAck),
    /// The job waits for a free slot; `position` 0 is next.
    Queued {
        position: u32,
    },
    /// The sandbox is being built for the job.
    Started {
        job_id: u64,
        profile: String,
    },
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The job is over; the last event for it.
    Finished(Box<Outcome>),
    /// The request was refused. For a submitted job this ends it.
    Error(WireError),
    Profiles(Vec<ProfileInfo>),
    /// Protocol 2+: the job's package environment is ready (sent before `Started`, only
    /// for a job that asked for packages).
    Packages(PackagesReport),
    /// Protocol 3+: the daemon takes this many more bytes of the job's stdin. A job with
    /// `stdin` gets a first credit when it is accepted, and more as the job reads; a
    /// client sends no more than it was given (docs/protocol.md, "Stdin").
    StdinCredit(u64),
    /// Protocol 4+: the answer to [`Request::ListProfileFeatures`], one per profile.
    ProfileFeatures(Vec<ProfileFeatures>),
    /// Protocol 5+: how the job's sandbox came to be (sent right after `Started`).
    Sandbox(SandboxStart),
}

/// How a job's sandbox was made (`Event::Sandbox`). Every kind has the same layers
/// (docs/ARCHITECTURE.md, "The warm path" and "The zygote"); they differ in cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SandboxStart {
    /// Built for this job: a sandbox and an interpreter started after it arrived.
    Cold,
    /// Taken from the profile's pool: built ahead by a cold start (`sandbox_id`), its
    /// interpreter waiting for one job.
    Ready { sandbox_id: u64 },
    /// Forked from the profile's zygote, ahead (`ready`) or for this job.
    Forked { sandbox_id: u64, ready: bool },
}

impl Event {
    /// The variant's name, for messages about an event that came where it makes no sense.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::HelloAck(_) => "HelloAck",
            Event::Queued { .. } => "Queued",
            Event::Started { .. } => "Started",
            Event::Stdout(_) => "Stdout",
            Event::Stderr(_) => "Stderr",
            Event::Finished(_) => "Finished",
            Event::Error(_) => "Error",
            Event::Profiles(_) => "Profiles",
            Event::Packages(_) => "Packages",
            Event::StdinCredit(_) => "StdinCredit",
            Event::ProfileFeatures(_) => "ProfileFeatures",
            Event::Sandbox(_) => "Sandbox",
        }
    }
}

/// The environment a job's packages were installed into.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackagesReport {
    /// The requirements as asked (explicit ones first, then PEP 723), normalized.
    pub requested: Vec<String>,
    /// Every installed distribution as `name==version`, sorted by name.
    pub resolved: Vec<String>,
    /// The environment already existed (no install ran for this job).
    pub from_cache: bool,
    /// Time spent resolving and installing (0 on a cache hit).
    pub install_ms: u64,
    /// The environment's size on disk.
    pub env_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelloAck {
    pub version: u32,
    pub daemon: String,
    /// The uid the daemon saw on the connection.
    pub peer_uid: u32,
}

/// Stable error codes; text in `message` is for humans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Undecodable bytes, truncated or trailing data.
    MalformedFrame,
    /// A datagram larger than the frame limit.
    OversizeFrame,
    /// No protocol version in common.
    UnsupportedVersion,
    /// The peer's uid/groups are not admitted.
    NotAuthorized,
    /// A message that makes no sense now (e.g. Submit before Hello).
    UnexpectedMessage,
    UnknownProfile,
    /// The profile exists but this host cannot enforce it.
    ProfileDisabled,
    /// The code is not valid UTF-8.
    InvalidCode,
    /// A requested limit is zero or looser than the profile allows.
    LimitOutOfRange,
    /// Every job slot and queue place is taken.
    Busy,
    /// The sandbox could not be built; the job never ran.
    SandboxFailed,
    Internal,
    ShuttingDown,
    /// The script (or its arguments) exceeds the size limit.
    CodeTooLarge,
    /// Protocol 2+: a requirement string or the PEP 723 block is invalid.
    InvalidRequirement,
    /// Protocol 2+: the profile allows no packages, or not this project (allow/deny).
    PackageNotAllowed,
    /// Protocol 2+: no such project (or no version matching) on the index/wheelhouse.
    PackageNotFound,
    /// Protocol 2+: the project has no wheel for this platform (sdist only); sdists are
    /// never built.
    NoCompatibleWheel,
    /// Protocol 2+: the requirements conflict.
    ResolutionConflict,
    /// Protocol 2+: the package index could not be reached.
    IndexUnreachable,
    /// Protocol 2+: the environment exceeds the profile's `max_env_bytes`.
    EnvironmentTooLarge,
    /// Protocol 2+: the install ran past the profile's `install_timeout_ms`.
    InstallTimeout,
    /// Protocol 2+: the install failed for another reason (the message says why).
    InstallFailed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub code: ErrorCode,
    pub message: String,
}

/// Why the job ended. When several apply: `SandboxError` (a setup step failed) first;
/// then the daemon's own kill (`Cancelled`, `Timeout`, `CpuLimit`, `OutputLimit`,
/// whichever happened first); then kernel evidence (`Oom`, `Seccomp`, `Pids`); then
/// `Signal`, `Error`, `Ok` (see `docs/protocol.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// Exit status 0.
    Ok,
    /// Non-zero exit status with no limit to explain it.
    Error,
    /// The wall-clock limit was reached and the job was killed.
    Timeout,
    /// The job's total CPU time (all its processes) reached the limit.
    CpuLimit,
    /// The kernel OOM-killed a process of the job (cgroup oom_kill counter).
    Oom,
    /// The pids limit refused a fork and the job then failed.
    Pids,
    /// An output stream exceeded its cap and the profile says kill.
    OutputLimit,
    /// Killed by a signal no limit explains.
    Signal,
    /// Died of SIGSYS: a syscall the seccomp filter kills on.
    Seccomp,
    /// A client cancel or disconnect killed the job.
    Cancelled,
    /// The sandbox failed to build; the code never ran.
    SandboxError,
}

/// A limit reached during the run, whether or not it ended the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LimitKind {
    Wall,
    Cpu,
    Memory,
    Pids,
    Stdout,
    Stderr,
    /// The /work, /tmp or /dev/shm tmpfs ran out of space or inodes.
    Disk,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExitStatus {
    Code(i32),
    Signal(i32),
    /// The payload never started (sandbox error, refused job).
    NotStarted,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub peak_memory_bytes: u64,
    /// What the job wrote to the stream, past the cap included. Under
    /// `on_output_limit = "kill"` the daemon stops reading at the cap, so this is at most
    /// the cap + one `MAX_PAYLOAD_CHUNK` read + the pipe's capacity.
    pub stdout_bytes: u64,
    /// As `stdout_bytes`, for stderr.
    pub stderr_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub job_id: u64,
    pub profile: String,
    pub reason: Reason,
    pub exit: ExitStatus,
    pub limits_hit: Vec<LimitKind>,
    pub usage: Usage,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub isolation: Isolation,
    /// Human detail, e.g. the failed sandbox step and errno.
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LandlockStatus {
    FullyEnforced,
    PartiallyEnforced,
    NotEnforced,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The isolation that was actually in force for the job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Isolation {
    /// e.g. `["user", "mount", "pid", "net", "ipc", "uts", "cgroup"]`.
    pub namespaces: Vec<String>,
    pub uid: u32,
    pub gid: u32,
    pub no_new_privs: bool,
    pub capabilities_dropped: bool,
    /// The Landlock ABI used, and what the kernel reported on restrict_self.
    pub landlock_abi: u32,
    pub landlock: Option<LandlockStatus>,
    /// Number of stacked seccomp filters installed (0: none).
    pub seccomp_filters: u32,
    pub cgroup: Option<CgroupVersion>,
    /// Protections this profile knowingly does not enforce on this host.
    pub not_enforced: Vec<String>,
}

/// A profile as the daemon sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileInfo {
    pub name: String,
    pub description: String,
    /// Why it is disabled, if it is.
    pub disabled: Option<String>,
    pub network: bool,
    pub max: MaxLimits,
    pub not_enforced: Vec<String>,
}

/// Protocol 4+: what a profile offers beyond [`ProfileInfo`] (a separate message, so that
/// `ProfileInfo` stays as older peers decode it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileFeatures {
    /// The profile's name, as in [`ProfileInfo`].
    pub name: String,
    /// Why a job on this profile cannot ask for packages (the daemon has no `uv`, the
    /// profile allows none, or this host cannot confine its installs); `None` when it can.
    pub packages_unavailable: Option<String>,
    /// Whether package installs fetch from an index over the network (`index_url`), not
    /// only from a local wheelhouse.
    pub packages_from_index: bool,
    /// The version of the profile's interpreter as its file name gives it (`3.11` for
    /// `/usr/bin/python3` -> `python3.11`), `None` when the name does not say.
    pub python: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MaxLimits {
    pub wall_ms: u64,
    pub cpu_ms: u64,
    pub memory_bytes: u64,
    pub pids: u32,
    pub output_bytes: u64,
}
