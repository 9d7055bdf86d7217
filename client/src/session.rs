//! Sessions (protocol 6): what to open ([`SessionSpec`]), what to run in one ([`Cell`]),
//! the handle that streams a cell's events ([`CellHandle`]), the requests on sessions, and
//! how a session's end and a cell's outcome read in words and exit codes.
//!
//! A session outlives the connection that opened it: its [`SessionHandle`] names it on
//! any connection of the same uid. A cell runs like a job (one at a time per connection,
//! its output streamed, its stdin sent against credit, `Cancel` interrupts it) through
//! the same streaming core.

use std::fmt::Write as _;

use tokio::io::AsyncRead;
use vivarium_proto::{
    ArtifactsReport, CellOutcome, CellStatus, Event, ExecCell, ExecCellFiles, OpenSession, Outputs,
    Request, RunCell, SessionEndReason, SessionEnded, SessionHandle, SessionInfo,
    SessionLimitOverrides, SessionOpened,
};

use crate::artifacts::{Artifact, Assembled, Assembler, ARTIFACTS_PROTOCOL};
use crate::conn::unexpected;
use crate::exchange::{code_frames, Canceller, Exchange};
use crate::files::{self, Frames, InputFileData};
use crate::outcome::{format_bytes, format_ms, EXIT_CANCELLED, EXIT_OOM, EXIT_TIMEOUT};
use crate::{Client, ClientError, Result, Stream, EXIT_SESSION_ENDED};

/// The protocol version that brought sessions.
pub const SESSION_PROTOCOL: u32 = 6;

/// A session to open: the profile, the packages of its environment, tighter limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSpec {
    /// Profile name; `default` unless set. Its `[session]` table must enable sessions.
    pub profile: String,
    /// PEP 508 requirement strings installed into the session's environment first.
    pub packages: Vec<String>,
    /// Tighter than the profile's `[session]` limits; `None` keeps the profile's.
    pub limits: SessionLimitOverrides,
}

impl Default for SessionSpec {
    fn default() -> SessionSpec {
        SessionSpec::new()
    }
}

impl SessionSpec {
    /// A session under the `default` profile with its limits.
    pub fn new() -> SessionSpec {
        SessionSpec {
            profile: "default".into(),
            packages: Vec::new(),
            limits: SessionLimitOverrides::default(),
        }
    }

    pub fn profile(mut self, profile: impl Into<String>) -> SessionSpec {
        self.profile = profile.into();
        self
    }

    /// Add a PEP 508 requirement (e.g. `numpy>=2`).
    pub fn package(mut self, requirement: impl Into<String>) -> SessionSpec {
        self.packages.push(requirement.into());
        self
    }

    pub fn limits(mut self, limits: SessionLimitOverrides) -> SessionSpec {
        self.limits = limits;
        self
    }

    /// End the session after this long without a cell.
    pub fn idle_ttl_ms(mut self, ms: u64) -> SessionSpec {
        self.limits.idle_ttl_ms = Some(ms);
        self
    }

    /// End the session this long after it opened, whatever it does.
    pub fn lifetime_ms(mut self, ms: u64) -> SessionSpec {
        self.limits.lifetime_ms = Some(ms);
        self
    }

    /// Each cell's wall limit.
    pub fn cell_wall_ms(mut self, ms: u64) -> SessionSpec {
        self.limits.cell_wall_ms = Some(ms);
        self
    }

    /// CPU time over the whole session.
    pub fn cpu_ms(mut self, ms: u64) -> SessionSpec {
        self.limits.cpu_ms = Some(ms);
        self
    }

    pub fn memory_bytes(mut self, bytes: u64) -> SessionSpec {
        self.limits.memory_bytes = Some(bytes);
        self
    }

    pub fn pids(mut self, pids: u32) -> SessionSpec {
        self.limits.pids = Some(pids);
        self
    }

    /// Each cell's stdout and stderr cap.
    pub fn output_bytes(mut self, bytes: u64) -> SessionSpec {
        self.limits.output_bytes = Some(bytes);
        self
    }
}

/// One cell to run in a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub session: SessionHandle,
    /// The cell's source; a `String`, so it is UTF-8 as the daemon requires.
    pub code: String,
    /// A tighter wall limit than the session's `cell_wall_ms`.
    pub wall_ms: Option<u64>,
    /// Files placed under the session's `/work` before the cell runs, replacing a regular
    /// file at the same path (protocol 7+, see [`crate::FILES_PROTOCOL`]).
    pub files: Vec<InputFileData>,
    /// What to return as artifacts (protocol 8+): as for a job, but only the files that
    /// are new or changed since the session's previous collection.
    pub outputs: Outputs,
}

impl Cell {
    pub fn new(session: SessionHandle, code: impl Into<String>) -> Cell {
        Cell {
            session,
            code: code.into(),
            wall_ms: None,
            files: Vec::new(),
            outputs: Outputs::Default,
        }
    }

    /// What to return as artifacts (see [`Outputs`]).
    pub fn outputs(mut self, outputs: Outputs) -> Cell {
        self.outputs = outputs;
        self
    }

    /// Return the files that match `pattern` instead of the default `out/**`; repeatable.
    pub fn output(mut self, pattern: impl Into<String>) -> Cell {
        match &mut self.outputs {
            Outputs::Patterns(p) => p.push(pattern.into()),
            other => *other = Outputs::Patterns(vec![pattern.into()]),
        }
        self
    }

    pub fn wall_ms(mut self, ms: u64) -> Cell {
        self.wall_ms = Some(ms);
        self
    }

    /// Add an input file: `data` at `path` under `/work`, mode `0o644`. Needs a
    /// protocol-7 daemon.
    pub fn file(mut self, path: impl Into<String>, data: impl Into<Vec<u8>>) -> Cell {
        self.files.push(InputFileData::new(path, data));
        self
    }

    /// Add an input file with permission bits `mode` (at most `0o644`).
    pub fn file_mode(
        mut self,
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        mode: u32,
    ) -> Cell {
        self.files.push(InputFileData::new(path, data).mode(mode));
        self
    }
}

/// The frames that run `cell` on a daemon of protocol `version`: one `ExecCell`
/// (`ExecCellFiles` with input files, `RunCell` from protocol 8 when it wants artifacts),
/// then `CodeChunk`s when the code does not fit inline, then the files' `FileChunk`s.
pub(crate) fn exec_frames(cell: &Cell, stdin: bool, version: u32) -> Result<Frames<'_>> {
    let exec = |code| ExecCell {
        session: cell.session.clone(),
        code,
        stdin,
        wall_ms: cell.wall_ms,
    };
    let plain = |code| Request::ExecCell(Box::new(exec(code)));
    // (The default outputs need no `SubmitJob`: see `Client::submit`.)
    let artifacts = version >= ARTIFACTS_PROTOCOL && cell.outputs != Outputs::Default;
    if cell.files.is_empty() && !artifacts {
        return Ok(Frames::plain(code_frames(cell.code.as_bytes(), plain)?));
    }
    let described = files::describe(&cell.files)?;
    let head = code_frames(cell.code.as_bytes(), |code| {
        if artifacts {
            Request::RunCell(Box::new(RunCell {
                cell: exec(code),
                files: described.clone(),
                outputs: cell.outputs.clone(),
            }))
        } else {
            Request::ExecCellFiles(Box::new(ExecCellFiles {
                cell: exec(code),
                files: described.clone(),
            }))
        }
    })
    .map_err(|e| {
        let fits_without = code_frames(cell.code.as_bytes(), plain).is_ok();
        files::head_error(&described, e, fits_without)
    })?;
    Ok(Frames {
        head,
        files: cell.files.iter().map(|f| f.data.as_slice()).collect(),
    })
}

/// One event of a running cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellEvent {
    /// Output bytes, in order within a stream.
    Output(Stream, Vec<u8>),
    /// Protocol 8+: a file the cell made or changed (after its output).
    Artifact(Box<Artifact>),
    /// Protocol 8+: the end of the artifacts, right before `Finished`.
    Artifacts(Box<ArtifactsReport>),
    /// The last event: how the cell ended (its value, its exception, or the session's end).
    Finished(Box<CellOutcome>),
}

/// What [`Client::exec_cell_collect`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedCell {
    pub outcome: CellOutcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The files the cell made or changed (protocol 8+), in path order.
    pub artifacts: Vec<Artifact>,
    pub artifacts_report: Option<ArtifactsReport>,
}

/// A running cell. Await [`CellHandle::next_event`] until it returns `Finished` (or an
/// error); the cell's stdin, if any, is streamed meanwhile.
///
/// Dropping the handle before the cell has ended closes the connection, which interrupts
/// the cell (the session lives on); the [`Client`] is then unusable.
pub struct CellHandle<'c> {
    core: Exchange<'c>,
    session: SessionHandle,
    artifacts: Assembler,
}

impl<'c> CellHandle<'c> {
    /// The session the cell runs in.
    pub fn session(&self) -> &SessionHandle {
        &self.session
    }

    /// The next event; `Ok(None)` once the cell has ended. A refusal
    /// (`Refused(SessionNotFound | SessionBusy | ...)`) or an ended session
    /// ([`ClientError::SessionExpired`]) ends the cell; the connection stays usable.
    ///
    /// Cancel-safe, as [`crate::JobHandle::next_event`].
    pub async fn next_event(&mut self) -> Result<Option<CellEvent>> {
        if !self.core.running()? {
            return Ok(None);
        }
        let event = loop {
            match self.core.recv().await.and_then(|e| self.artifacts.take(e)) {
                Ok(Assembled::Partial) => continue,
                Ok(Assembled::Other(e)) => break Ok(e),
                Ok(Assembled::Artifact(a)) => return self.settle(Ok(CellEvent::Artifact(a))),
                Ok(Assembled::Report(r)) => return self.settle(Ok(CellEvent::Artifacts(r))),
                Err(e) => break Err(e),
            }
        };
        let event = match event {
            Ok(Event::Stdout(bytes)) => Ok(CellEvent::Output(Stream::Stdout, bytes)),
            Ok(Event::Stderr(bytes)) => Ok(CellEvent::Output(Stream::Stderr, bytes)),
            Ok(Event::CellFinished(outcome)) if outcome.session == self.session => {
                Ok(CellEvent::Finished(outcome))
            }
            Ok(Event::CellFinished(outcome)) => Err(ClientError::Protocol(format!(
                "the cell's outcome is for session {}, not {}",
                outcome.session, self.session
            ))),
            Ok(Event::Error(e)) => Err(ClientError::Refused(e)),
            Ok(Event::SessionExpired(ended)) => Err(ClientError::SessionExpired(ended)),
            Ok(other) => Err(unexpected("output, CellFinished or Error", &other)),
            Err(e) => Err(e),
        };
        self.settle(event)
    }

    fn settle(&mut self, event: Result<CellEvent>) -> Result<Option<CellEvent>> {
        self.core
            .settle(event, |e| matches!(e, CellEvent::Finished(_)))
            .map(Some)
    }

    /// Interrupt the cell (`Cancel` on this connection): KeyboardInterrupt lands in it and
    /// its `Finished` (status `Interrupted`) still follows; the session keeps its state.
    /// Returns whether it was sent (false once the cell has ended). As for a job, the send
    /// can wait behind unread stdin: keep reading events meanwhile.
    pub async fn interrupt(&self) -> Result<bool> {
        self.core.cancel().await
    }

    /// A cloneable, `'static` way to interrupt this cell from another task.
    pub fn interrupter(&self) -> Canceller {
        self.core.canceller()
    }
}

impl std::fmt::Debug for CellHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellHandle")
            .field("session", &self.session)
            .field("phase", &self.core.phase)
            .field("stdin", &self.core.stdin_open())
            .finish()
    }
}

impl Client {
    /// Refuse, before sending anything, when the daemon speaks no sessions.
    async fn require_sessions(&mut self) -> Result<()> {
        let version = self.hello().await?.version;
        if version < SESSION_PROTOCOL {
            return Err(ClientError::SessionsUnsupported { version });
        }
        Ok(())
    }

    /// Open a session. Its packages, if any, are installed first (which can take a while).
    pub async fn open_session(&mut self, spec: &SessionSpec) -> Result<SessionOpened> {
        self.require_sessions().await?;
        let request = Request::OpenSession(Box::new(OpenSession {
            profile: spec.profile.clone(),
            limits: spec.limits.clone(),
            packages: spec.packages.clone(),
        }));
        self.ask(&request, "SessionOpened", |event| match event {
            Event::SessionOpened(opened) => Ok(Some(*opened)),
            // The environment's report, before the session is opened: `info.packages`
            // names the same set.
            Event::Packages(_) => Ok(None),
            other => Err(other),
        })
        .await
    }

    /// Run `cell`; events then come from [`CellHandle::next_event`]. With `stdin`, the
    /// cell's stdin is streamed from it against the daemon's credit and closed at its end;
    /// without, the cell reads EOF.
    pub async fn exec_cell<'c, R>(
        &'c mut self,
        cell: &Cell,
        stdin: Option<R>,
    ) -> Result<CellHandle<'c>>
    where
        R: AsyncRead + Unpin + Send + 'c,
    {
        // As for a job: only outputs other than the default need the daemon's version.
        let version = if cell.outputs != Outputs::Default {
            self.hello().await?.version
        } else {
            ARTIFACTS_PROTOCOL - 1
        };
        // Built first: a broken file rule needs no round trip to be reported.
        let frames = exec_frames(cell, stdin.is_some(), version);
        if frames.is_ok() {
            self.require_sessions().await?;
            if !cell.files.is_empty() {
                self.require_files().await?;
            }
        }
        let core = crate::exchange::start(&mut self.conn, frames, stdin).await?;
        Ok(CellHandle {
            core,
            session: cell.session.clone(),
            artifacts: Assembler::default(),
        })
    }

    /// Run `cell` with `stdin` (or none) and collect its outcome and all its output.
    pub async fn exec_cell_collect(
        &mut self,
        cell: &Cell,
        stdin: Option<&[u8]>,
    ) -> Result<CollectedCell> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let (mut artifacts, mut artifacts_report) = (Vec::new(), None);
        let mut handle = self.exec_cell(cell, stdin).await?;
        while let Some(event) = handle.next_event().await? {
            match event {
                CellEvent::Output(Stream::Stdout, bytes) => stdout.extend_from_slice(&bytes),
                CellEvent::Output(Stream::Stderr, bytes) => stderr.extend_from_slice(&bytes),
                CellEvent::Artifact(a) => artifacts.push(*a),
                CellEvent::Artifacts(r) => artifacts_report = Some(*r),
                CellEvent::Finished(outcome) => {
                    return Ok(CollectedCell {
                        outcome: *outcome,
                        stdout,
                        stderr,
                        artifacts,
                        artifacts_report,
                    })
                }
            }
        }
        Err(ClientError::Protocol(
            "cell ended without an outcome".into(),
        ))
    }

    /// Interrupt the cell running in `session`, from any connection of its uid (the
    /// cell's own connection can use [`CellHandle::interrupt`]). Done when the daemon
    /// acknowledges; the cell's outcome goes to its own connection.
    pub async fn interrupt_cell(&mut self, session: &SessionHandle) -> Result<()> {
        self.require_sessions().await?;
        let request = Request::InterruptCell(session.clone());
        self.ask(&request, "SessionAck", |event| match event {
            Event::SessionAck => Ok(Some(())),
            other => Err(other),
        })
        .await
    }

    /// End `session`; returns how it ended (its totals). A session that had ended
    /// already is [`ClientError::SessionExpired`].
    pub async fn close_session(&mut self, session: &SessionHandle) -> Result<SessionEnded> {
        self.require_sessions().await?;
        let request = Request::CloseSession(session.clone());
        self.ask(&request, "SessionClosed", |event| match event {
            Event::SessionClosed(ended) => Ok(Some(*ended)),
            other => Err(other),
        })
        .await
    }

    /// The caller's open sessions.
    pub async fn list_sessions(&mut self) -> Result<Vec<SessionInfo>> {
        self.require_sessions().await?;
        self.ask(&Request::ListSessions, "Sessions", |event| match event {
            Event::Sessions(sessions) => Ok(Some(sessions)),
            other => Err(other),
        })
        .await
    }
}

/// Why a session ended, as a clause: `it was idle for longer than its TTL`.
pub fn end_reason_text(reason: SessionEndReason) -> &'static str {
    match reason {
        SessionEndReason::Closed => "it was closed",
        SessionEndReason::IdleTimeout => "it was idle for longer than its TTL",
        SessionEndReason::Lifetime => "it reached the end of its lifetime",
        SessionEndReason::CpuBudget => "it used up its CPU budget",
        SessionEndReason::Memory => "it ran out of memory (the kernel's OOM killer ended it)",
        SessionEndReason::Unresponsive => {
            "a cell did not stop within its grace after an interrupt, so the session was killed"
        }
        SessionEndReason::Exited => "its interpreter exited",
        SessionEndReason::Seccomp => "it made a syscall the seccomp filter kills on",
        SessionEndReason::IdleMemory => {
            "the daemon ended it to keep idle sessions within their memory budget"
        }
        SessionEndReason::DaemonRestarted => "the daemon restarted: every session ended",
        SessionEndReason::SandboxError => "its sandbox failed",
        SessionEndReason::LinkFailed => {
            "its control link failed after an interrupt, so it was ended rather than trusted"
        }
    }
}

/// One line on a session's end: `session vs_.. ended 5.0s ago: it was idle for longer
/// than its TTL (3 cells, 1.2s of cpu, peak memory 40M, age 10m00s)`.
pub fn describe_end(ended: &SessionEnded) -> String {
    let mut line = format!("session {} ended", ended.handle);
    if ended.ended_ms_ago > 0 {
        let _ = write!(line, " {} ago", format_duration(ended.ended_ms_ago));
    }
    let _ = write!(line, ": {}", end_reason_text(ended.reason));
    if !ended.detail.is_empty() {
        let _ = write!(line, ": {}", ended.detail);
    }
    let _ = write!(
        line,
        " ({} cell{}, {} of cpu, peak memory {}, age {})",
        ended.cells,
        if ended.cells == 1 { "" } else { "s" },
        format_ms(ended.cpu_ms),
        format_bytes(ended.peak_memory_bytes),
        format_duration(ended.age_ms)
    );
    line
}

/// [`ClientError::SessionExpired`]'s message: the end, and how to go on.
pub fn expired_message(ended: &SessionEnded) -> String {
    format!(
        "{}; its state is gone: open a new session to start again",
        describe_end(ended)
    )
}

/// A duration for people: `850ms`, `12.3s`, `5m12s`, `2h05m`.
pub fn format_duration(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0 => format!("{ms}ms"),
        1..60 => format_ms(ms),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// The exit code `viv exec` exits with for a cell: 0 when it ran to its end, 1 when it
/// raised, 130 interrupted, 124 past its wall limit, 121 stopped by the memory guard, and
/// [`EXIT_SESSION_ENDED`] when the session ended during it.
pub fn cell_exit_code(outcome: &CellOutcome) -> i32 {
    match outcome.status {
        CellStatus::Ok => 0,
        CellStatus::Exception(_) => 1,
        CellStatus::Interrupted => EXIT_CANCELLED,
        CellStatus::Timeout => EXIT_TIMEOUT,
        CellStatus::MemoryGuard => EXIT_OOM,
        CellStatus::SessionEnded(_) => EXIT_SESSION_ENDED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::{decode, Code};

    fn handle() -> SessionHandle {
        SessionHandle(format!("vs_{}", "ab".repeat(32)))
    }

    fn ended(reason: SessionEndReason) -> SessionEnded {
        SessionEnded {
            handle: handle(),
            reason,
            detail: String::new(),
            ended_ms_ago: 5_000,
            cells: 3,
            cpu_ms: 1_200,
            peak_memory_bytes: 40 << 20,
            age_ms: 600_000,
        }
    }

    #[test]
    fn a_small_cell_is_one_frame_and_a_large_one_is_chunked() {
        let cell = Cell::new(handle(), "x = 1").wall_ms(900);
        let frames = exec_frames(&cell, true, 7).unwrap().all();
        assert_eq!(
            frames
                .iter()
                .map(|f| decode(f).unwrap())
                .collect::<Vec<Request>>(),
            vec![Request::ExecCell(Box::new(ExecCell {
                session: handle(),
                code: Code::Inline(b"x = 1".to_vec()),
                stdin: true,
                wall_ms: Some(900),
            }))]
        );
        let big = Cell::new(handle(), "#".repeat(200_000));
        let frames = exec_frames(&big, false, 7).unwrap().all();
        assert!(frames.len() > 1);
        assert!(matches!(
            decode(&frames[0]).unwrap(),
            Request::ExecCell(c) if c.code == Code::Chunked { len: 200_000 }
        ));
    }

    #[test]
    fn a_cell_with_files_sends_them_after_its_code() {
        let big = vec![0x5au8; 100_000];
        let cell = Cell::new(handle(), "#".repeat(70_000))
            .file("in/a.bin", big.clone())
            .file_mode("b.txt", "hi", 0o600);
        let frames: Vec<Request> = exec_frames(&cell, false, 7)
            .unwrap()
            .all()
            .iter()
            .map(|f| decode(f).unwrap())
            .collect();
        let Request::ExecCellFiles(head) = &frames[0] else {
            panic!("first frame is {:?}", frames[0]);
        };
        assert_eq!(head.cell.code, Code::Chunked { len: 70_000 });
        assert_eq!(head.cell.session, handle());
        assert_eq!(
            head.files
                .iter()
                .map(|f| (f.path.as_str(), f.mode, f.len))
                .collect::<Vec<_>>(),
            [("in/a.bin", 0, 100_000), ("b.txt", 0o600, 2)]
        );
        let (mut code, mut data) = (Vec::new(), Vec::new());
        for frame in &frames[1..] {
            match frame {
                Request::CodeChunk(p) if data.is_empty() => code.extend_from_slice(p),
                Request::FileChunk(p) => data.extend_from_slice(p),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(code, cell.code.as_bytes());
        let mut want = big;
        want.extend_from_slice(b"hi");
        assert_eq!(data, want);
        let bad = Cell::new(handle(), "x").file("a/../b", "");
        assert!(matches!(
            exec_frames(&bad, false, 7).map(|f| f.all()),
            Err(ClientError::InvalidInputFiles(_))
        ));
    }

    #[test]
    fn the_expiry_says_why_and_how_to_go_on() {
        let text = expired_message(&ended(SessionEndReason::IdleTimeout));
        assert_eq!(
            text,
            format!(
                "session {} ended 5.0s ago: it was idle for longer than its TTL (3 cells, 1.2s \
                 of cpu, peak memory 40M, age 10m00s); its state is gone: open a new session \
                 to start again",
                handle()
            )
        );
        let mut e = ended(SessionEndReason::Exited);
        e.detail = "exit status 3".into();
        e.ended_ms_ago = 0;
        e.cells = 1;
        assert!(
            describe_end(&e).contains(" ended: its interpreter exited: exit status 3 (1 cell,"),
            "{}",
            describe_end(&e)
        );
        assert_eq!(
            end_reason_text(SessionEndReason::DaemonRestarted),
            "the daemon restarted: every session ended"
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(format_duration(850), "850ms");
        assert_eq!(format_duration(12_345), "12.3s");
        assert_eq!(format_duration(312_000), "5m12s");
        assert_eq!(format_duration(7_500_000), "2h05m");
    }

    #[test]
    fn spec_builder_sets_the_overrides() {
        let spec = SessionSpec::new()
            .profile("p")
            .package("numpy")
            .idle_ttl_ms(1)
            .lifetime_ms(2)
            .memory_bytes(3);
        assert_eq!(spec.profile, "p");
        assert_eq!(spec.packages, ["numpy"]);
        assert_eq!(
            spec.limits,
            SessionLimitOverrides {
                idle_ttl_ms: Some(1),
                lifetime_ms: Some(2),
                memory_bytes: Some(3),
                ..Default::default()
            }
        );
    }
}
