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
    CodeChunk(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Bytes for the job's stdin (only when the spec set `stdin`).
    Stdin(#[serde(with = "serde_bytes")] Vec<u8>),
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
    /// Protocol 6+: open a session (one sandbox whose interpreter keeps its state between
    /// cells); answered with [`Event::SessionOpened`] (after [`Event::Packages`] when it
    /// has packages) or an error. Sessions outlive the connection that opened them.
    OpenSession(Box<OpenSession>),
    /// Protocol 6+: run one cell in a session. Its output streams as `Stdout`/`Stderr`
    /// and it ends with [`Event::CellFinished`]; like a job, at most one per connection
    /// at a time, and `Cancel` on this connection interrupts it. With `stdin`, the cell's
    /// stdin follows as `Stdin`/`StdinEof` frames against credit, as for a job.
    ExecCell(Box<ExecCell>),
    /// Protocol 6+: interrupt the cell running in a session (from any connection of the
    /// session's uid); answered with [`Event::SessionAck`].
    InterruptCell(SessionHandle),
    /// Protocol 6+: end a session; answered with [`Event::SessionClosed`].
    CloseSession(SessionHandle),
    /// Protocol 6+: the caller's own sessions; answered with [`Event::Sessions`].
    ListSessions,
    /// Protocol 7+: a job with input files placed under `/work` before its code runs
    /// (and packages, as `SubmitWith`). Each file's bytes follow in [`Request::FileChunk`]
    /// frames, in the order of `files`, after any `CodeChunk`s.
    SubmitFiles(Box<SubmitFiles>),
    /// Protocol 7+: a cell with input files placed under the session's `/work` before it
    /// runs (replacing a regular file at the same path); their bytes follow as for
    /// `SubmitFiles`.
    ExecCellFiles(Box<ExecCellFiles>),
    /// Protocol 7+: a piece of the input files' bytes (the files of the last
    /// `SubmitFiles`/`ExecCellFiles`, one after the other, each `InputFile::len` long).
    FileChunk(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Protocol 8+: a job that says what to return as artifacts (and may have packages
    /// and input files, as `SubmitFiles`; its files' bytes follow the same way). Before
    /// its `Finished`, the daemon sends each artifact ([`Event::Artifact`] and its
    /// [`Event::ArtifactChunk`]s) and then [`Event::Artifacts`].
    SubmitJob(Box<SubmitJob>),
    /// Protocol 8+: a cell that says what to return, as `SubmitJob` for a job: the
    /// artifacts come before its `CellFinished`.
    RunCell(Box<RunCell>),
}

/// What a job or cell returns as artifacts (protocol 8+; docs/protocol.md, "Artifacts").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outputs {
    /// Every regular file under `/work/out`, and the figures captured
    /// (`/work/out/figure-N.png`).
    #[default]
    Default,
    /// The regular files under `/work` that match any of these patterns (`/`-separated,
    /// relative to `/work`; `**` is any number of components, `*` and `?` match within
    /// one), and the figures captured. At most 64 patterns, 4096 bytes together.
    Patterns(Vec<String>),
    /// Nothing: no collection and no figure capture.
    None,
}

/// A job with its outputs (protocol 8+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitJob {
    pub spec: JobSpec,
    /// PEP 508 requirement strings, as in [`SubmitWith`].
    pub packages: Vec<String>,
    /// Input files, as in [`SubmitFiles`] (their bytes follow in `FileChunk` frames).
    pub files: Vec<InputFile>,
    pub outputs: Outputs,
}

/// A cell with its outputs (protocol 8+). In a session only the files that are new or
/// changed since the session's previous collection are returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCell {
    pub cell: ExecCell,
    pub files: Vec<InputFile>,
    pub outputs: Outputs,
}

/// One input file (protocol 7+). The daemon refuses the whole job or cell, before any of
/// it runs, with [`ErrorCode::InvalidInputFile`] naming the file if any rule is broken
/// (docs/protocol.md, "Input files").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Relative to `/work`, `/`-separated, UTF-8 (already normalized: no empty, `.` or
    /// `..` component, no leading `/`, no NUL).
    pub path: String,
    /// Permission bits, at most `0o644` (0 means `0o644`).
    pub mode: u32,
    /// The file's size; its bytes come in `FileChunk` frames.
    pub len: u64,
}

/// A job with input files (protocol 7+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitFiles {
    pub spec: JobSpec,
    /// PEP 508 requirement strings, as in [`SubmitWith`].
    pub packages: Vec<String>,
    pub files: Vec<InputFile>,
}

/// A cell with input files (protocol 7+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecCellFiles {
    pub cell: ExecCell,
    pub files: Vec<InputFile>,
}

/// An opaque session handle, as the daemon made it (`vs_` and 64 hex digits: 128 random
/// bits, the daemon instance and a tag binding it to its uid). Anything else is refused
/// as not found.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionHandle(pub String);

impl std::fmt::Display for SessionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a session is opened with (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenSession {
    pub profile: String,
    /// Tighter than the profile's `[session]` limits; never looser.
    pub limits: SessionLimitOverrides,
    /// PEP 508 requirement strings for the session's environment (as `SubmitWith`).
    pub packages: Vec<String>,
}

/// Per-session limits; `None` keeps the profile's `[session]` value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLimitOverrides {
    /// The session ends after this long without a cell.
    pub idle_ttl_ms: Option<u64>,
    /// The session ends this long after it opened, whatever it does.
    pub lifetime_ms: Option<u64>,
    /// Each cell's wall limit (a cell may ask for less).
    pub cell_wall_ms: Option<u64>,
    /// CPU time over the whole session, all cells and whatever runs between them.
    pub cpu_ms: Option<u64>,
    /// The session's memory (its cgroup, for everything it holds).
    pub memory_bytes: Option<u64>,
    pub pids: Option<u32>,
    /// Each cell's stdout and stderr cap.
    pub output_bytes: Option<u64>,
}

/// A session's limits as in force (protocol 6+).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLimits {
    pub idle_ttl_ms: u64,
    pub lifetime_ms: u64,
    pub cell_wall_ms: u64,
    pub cpu_ms: u64,
    pub memory_bytes: u64,
    /// Where the memory guard interrupts a cell (cgroup v2 `memory.high`); 0: no guard.
    pub memory_guard_bytes: u64,
    pub pids: u32,
    pub output_bytes: u64,
    /// How long a cell has to stop after its interrupt before the session is killed.
    pub interrupt_grace_ms: u64,
}

/// One cell (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecCell {
    pub session: SessionHandle,
    /// The cell's source (UTF-8), inline or in `CodeChunk` frames.
    pub code: Code,
    /// Whether stdin follows as `Stdin` frames; if false, the cell reads EOF.
    pub stdin: bool,
    /// A tighter wall limit for this cell than the session's `cell_wall_ms`.
    pub wall_ms: Option<u64>,
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
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
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
    Stdout(#[serde(with = "serde_bytes")] Vec<u8>),
    Stderr(#[serde(with = "serde_bytes")] Vec<u8>),
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
    /// Protocol 6+: the session is open.
    SessionOpened(Box<SessionOpened>),
    /// Protocol 6+: the cell is over (the last event for an `ExecCell`).
    CellFinished(Box<CellOutcome>),
    /// Protocol 6+: the answer to `ListSessions`: the caller's open sessions.
    Sessions(Vec<SessionInfo>),
    /// Protocol 6+: the answer to `CloseSession`: the session is over, as it ended.
    SessionClosed(Box<SessionEnded>),
    /// Protocol 6+: the answer to any request naming a session that has ended: why and
    /// when (a typed expiry, rather than "not found"). A session that never existed, or
    /// is another uid's, is `Error(SessionNotFound)` instead.
    SessionExpired(Box<SessionEnded>),
    /// Protocol 6+: the request about a session was done (`InterruptCell`).
    SessionAck,
    /// Protocol 8+: an artifact of a `SubmitJob` job or a `RunCell` cell; its bytes follow
    /// in `ArtifactChunk` frames adding up to `size` (none for an empty file).
    Artifact(Box<ArtifactHeader>),
    /// Protocol 8+: a piece of the last `Artifact`'s bytes.
    ArtifactChunk(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Protocol 8+: the end of the artifacts (sent for every `SubmitJob` and `RunCell`
    /// that ran, right before its `Finished` or `CellFinished`): what was not returned,
    /// and why.
    Artifacts(Box<ArtifactsReport>),
}

/// An artifact's description (protocol 8+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactHeader {
    /// Relative to `/work`, `/`-separated. A name that is not UTF-8 is decoded lossily
    /// (U+FFFD), and `path_lossy` says so.
    pub path: String,
    pub path_lossy: bool,
    pub size: u64,
    /// SHA-256 of the bytes, lowercase hex, computed by the daemon.
    pub sha256: String,
    /// Sniffed by the daemon from the first bytes, never from the name: `image/png`,
    /// `image/jpeg`, `image/gif`, `image/webp`, `image/svg+xml`, `application/pdf`,
    /// `application/zip`, `application/gzip`, `text/plain; charset=utf-8` (any
    /// other UTF-8 without NUL: CSV, JSON, ...), or `application/octet-stream`.
    pub media_type: String,
}

/// Why a matching entry was not returned (protocol 8+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipKind {
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    /// Larger than the profile's `max_output_file_bytes` (never read).
    TooLarge,
    /// It would take the artifacts past `max_output_bytes` (never read).
    OverTotal,
    /// It could not be opened or read as the job's user (`errno` says why).
    Unreadable,
    /// It was replaced between its listing and its opening.
    Changed,
}

impl SkipKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipKind::Symlink => "symlink",
            SkipKind::Fifo => "fifo",
            SkipKind::Socket => "socket",
            SkipKind::CharDevice => "char device",
            SkipKind::BlockDevice => "block device",
            SkipKind::TooLarge => "too large",
            SkipKind::OverTotal => "over the total",
            SkipKind::Unreadable => "unreadable",
            SkipKind::Changed => "changed while collected",
        }
    }
}

/// A matching entry that was not returned (protocol 8+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedArtifact {
    pub path: String,
    pub path_lossy: bool,
    pub kind: SkipKind,
    /// Its size as listed (a symlink: the length of its target), never its content.
    pub size: u64,
    /// For `Unreadable`.
    pub errno: Option<u32>,
}

/// Whether the artifacts could be collected at all (protocol 8+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArtifactsStatus {
    /// The collection ran (what it returned and skipped is in the report).
    Collected,
    /// The job asked for no outputs (`Outputs::None`).
    NotRequested,
    /// There was nothing to collect from: the job was killed (timeout, cancel, a
    /// limit) or its sandbox failed before the collection ran, or the collector's
    /// answer was refused as malformed. The message says which.
    NotCollected(String),
}

/// The end of a job's or cell's artifacts (protocol 8+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactsReport {
    pub status: ArtifactsStatus,
    /// How many `Artifact`s were sent, and their bytes.
    pub returned: u32,
    pub returned_bytes: u64,
    /// Matching entries that were not returned, in path order (at most 10 000).
    pub skipped: Vec<SkippedArtifact>,
    /// Matching entries not even listed: files past `max_output_files`, skipped entries
    /// past the list's bound.
    pub omitted: u64,
    /// The walk stopped at its bound of directory entries: there may be more.
    pub walk_limit: bool,
    /// A directory deeper than 32 levels or a path longer than 4096 bytes was left out.
    pub depth_limit: bool,
    /// The caps that applied (the profile's `[files]`).
    pub max_files: u32,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

impl ArtifactsReport {
    /// A report with nothing returned, with `status`.
    pub fn empty(status: ArtifactsStatus) -> ArtifactsReport {
        ArtifactsReport {
            status,
            returned: 0,
            returned_bytes: 0,
            skipped: Vec::new(),
            omitted: 0,
            walk_limit: false,
            depth_limit: false,
            max_files: 0,
            max_file_bytes: 0,
            max_total_bytes: 0,
        }
    }

    /// Whether anything that matched was left out (skipped, omitted, or a walk bound).
    pub fn incomplete(&self) -> bool {
        !self.skipped.is_empty() || self.omitted > 0 || self.walk_limit || self.depth_limit
    }
}

/// The answer to `OpenSession` (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOpened {
    pub info: SessionInfo,
    /// How its sandbox was made: `Ready` when it came from the profile's session pool.
    pub sandbox: SandboxStart,
}

/// A session as it is now (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub handle: SessionHandle,
    pub profile: String,
    /// The session's sandbox (as in `Started`/`SandboxStart`).
    pub sandbox_id: u64,
    pub limits: SessionLimits,
    pub age_ms: u64,
    /// Since its last cell ended (0 while a cell runs).
    pub idle_ms: u64,
    /// When it ends if no cell comes: the sooner of its idle and lifetime ends, as Unix
    /// time in milliseconds.
    pub expires_at_unix_ms: u64,
    /// The same, from now.
    pub expires_in_ms: u64,
    /// What ends it then: `IdleTimeout` or `Lifetime`.
    pub expires_by: SessionEndReason,
    pub memory_bytes: u64,
    pub peak_memory_bytes: u64,
    pub cells: u64,
    pub cpu_ms: u64,
    pub running: bool,
    /// The packages of its environment (`name==version`), if it has one.
    pub packages: Vec<String>,
}

/// Why a session ended (protocol 6+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionEndReason {
    /// `CloseSession`.
    Closed,
    /// No cell for `idle_ttl_ms`.
    IdleTimeout,
    /// `lifetime_ms` passed.
    Lifetime,
    /// The session used its whole CPU budget (`cpu_ms`).
    CpuBudget,
    /// The kernel's OOM killer ended it: the memory limit was reached (the guard, if
    /// any, could not stop the cell in time).
    Memory,
    /// A cell did not stop within `interrupt_grace_ms` of its interrupt (it ignored
    /// SIGINT, or was in a call that does not return to Python): the session was killed.
    Unresponsive,
    /// The interpreter exited (`os._exit`, a crash, a signal): `detail` says how.
    Exited,
    /// A syscall the seccomp filter kills on.
    Seccomp,
    /// The daemon ended it to keep idle sessions within `max_idle_session_bytes`.
    IdleMemory,
    /// The daemon shut down or was restarted: no session survives it.
    DaemonRestarted,
    /// Its sandbox failed; `detail` says where.
    SandboxError,
    /// An interrupted cell's session could not be told apart from a broken one (its
    /// control link failed): ended rather than trusted.
    LinkFailed,
}

/// A session's end (protocol 6+), also kept as its tombstone for a while.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEnded {
    pub handle: SessionHandle,
    pub reason: SessionEndReason,
    pub detail: String,
    /// How long ago it ended (0 when just now).
    pub ended_ms_ago: u64,
    pub cells: u64,
    pub cpu_ms: u64,
    pub peak_memory_bytes: u64,
    pub age_ms: u64,
}

/// How a cell ended (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellStatus {
    /// It ran to its end.
    Ok,
    /// It raised; the session goes on.
    Exception(CellException),
    /// `InterruptCell` (or `Cancel`, or its client went away): KeyboardInterrupt landed
    /// and the state is kept.
    Interrupted,
    /// Its wall limit passed: KeyboardInterrupt landed and the state is kept.
    Timeout,
    /// The session's memory reached its guard: the cell was interrupted before the
    /// memory limit, and the state is kept.
    MemoryGuard,
    /// The session ended during the cell (the state is gone).
    SessionEnded(Box<SessionEnded>),
}

/// An exception a cell raised (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellException {
    /// e.g. `ValueError`, `json.decoder.JSONDecodeError`.
    pub type_name: String,
    pub message: String,
    /// Formatted by `traceback`, starting in the cell's code (`<cell N>`); bounded.
    pub traceback: String,
    pub traceback_truncated: bool,
}

/// A cell's end (protocol 6+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellOutcome {
    pub session: SessionHandle,
    /// 1 for the session's first cell.
    pub cell: u64,
    pub status: CellStatus,
    /// The `repr` of the cell's last expression, as IPython shows it (none for a
    /// statement, a `None` value, or a trailing `;`); bounded.
    pub value: Option<String>,
    pub value_truncated: bool,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    /// The session's memory at the cell's end, and its peak so far.
    pub memory_bytes: u64,
    pub peak_memory_bytes: u64,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// When the session ends if no cell follows (as `SessionInfo`); 0 once ended.
    pub expires_at_unix_ms: u64,
    pub expires_in_ms: u64,
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
            Event::SessionOpened(_) => "SessionOpened",
            Event::CellFinished(_) => "CellFinished",
            Event::Sessions(_) => "Sessions",
            Event::SessionClosed(_) => "SessionClosed",
            Event::SessionExpired(_) => "SessionExpired",
            Event::SessionAck => "SessionAck",
            Event::Artifact(_) => "Artifact",
            Event::ArtifactChunk(_) => "ArtifactChunk",
            Event::Artifacts(_) => "Artifacts",
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
    /// Protocol 6+: no such session for this uid (never existed, or another uid's: the
    /// same answer either way). An ended session is `Event::SessionExpired` instead.
    SessionNotFound,
    /// Protocol 6+: the session runs a cell already (one cell at a time).
    SessionBusy,
    /// Protocol 6+: the profile has no sessions (`[session] enabled = false`).
    SessionsDisabled,
    /// Protocol 7+: an input file breaks a rule (its path, mode, size, or the count or
    /// total of the files); the message names the file. Nothing of the job ran.
    InvalidInputFile,
    /// Protocol 8+: an output pattern breaks a rule (docs/protocol.md, "Artifacts"); the
    /// message names it. Nothing of the job ran.
    InvalidOutputPattern,
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
