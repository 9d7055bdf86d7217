//! A job: what to run ([`Job`]), and the handle that streams its events ([`JobHandle`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{
    encode, Code, Event, FrameError, JobSpec, LimitOverrides, Outcome, PackagesReport, Request,
    SandboxStart, SubmitWith, MAX_PAYLOAD_CHUNK,
};

use crate::conn::{recv_event, send, send_frame, unexpected, Conn, ConnState};
use crate::{ClientError, Result};

/// Scripts up to this size go inline in the `Submit` frame; larger ones follow in
/// `CodeChunk` frames. The margin leaves room for the profile name, arguments and limits.
pub(crate) const INLINE_CODE_MAX: usize = MAX_PAYLOAD_CHUNK - 1024;

/// A Python job to submit: the script, its arguments, the profile and tighter limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Profile name; `default` unless set.
    pub profile: String,
    /// The Python source. A `String`, so it is UTF-8 as the daemon requires.
    pub code: String,
    /// `sys.argv[1:]`.
    pub args: Vec<String>,
    /// Per-job limits; `None` keeps the profile's value, and none may exceed it.
    pub limits: LimitOverrides,
    /// PyPI packages (PEP 508 requirement strings) to install into the job's
    /// environment first; needs a protocol-2 daemon and a profile that allows packages.
    /// A PEP 723 `# /// script` block in the code is read by the daemon as well.
    pub packages: Vec<String>,
}

impl Job {
    /// A job running `code` under the `default` profile with its limits.
    pub fn new(code: impl Into<String>) -> Job {
        Job {
            profile: "default".into(),
            code: code.into(),
            args: Vec::new(),
            limits: LimitOverrides::default(),
            packages: Vec::new(),
        }
    }

    /// Add a PEP 508 requirement (e.g. `numpy>=2`).
    pub fn package(mut self, requirement: impl Into<String>) -> Job {
        self.packages.push(requirement.into());
        self
    }

    pub fn profile(mut self, profile: impl Into<String>) -> Job {
        self.profile = profile.into();
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Job {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Job {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn limits(mut self, limits: LimitOverrides) -> Job {
        self.limits = limits;
        self
    }

    pub fn wall_ms(mut self, ms: u64) -> Job {
        self.limits.wall_ms = Some(ms);
        self
    }

    pub fn cpu_ms(mut self, ms: u64) -> Job {
        self.limits.cpu_ms = Some(ms);
        self
    }

    pub fn memory_bytes(mut self, bytes: u64) -> Job {
        self.limits.memory_bytes = Some(bytes);
        self
    }

    pub fn pids(mut self, pids: u32) -> Job {
        self.limits.pids = Some(pids);
        self
    }

    pub fn output_bytes(mut self, bytes: u64) -> Job {
        self.limits.output_bytes = Some(bytes);
        self
    }
}

/// The frames that submit `job`: one `Submit`, then `CodeChunk`s when the code does not fit
/// inline. Every frame is at most `MAX_FRAME` bytes.
pub(crate) fn submit_frames(job: &Job, stdin: bool) -> Result<Vec<Vec<u8>>, FrameError> {
    let code = job.code.as_bytes();
    let spec = |code| {
        let spec = JobSpec {
            profile: job.profile.clone(),
            code,
            args: job.args.clone(),
            stdin,
            limits: job.limits.clone(),
        };
        if job.packages.is_empty() {
            Request::Submit(spec)
        } else {
            Request::SubmitWith(Box::new(SubmitWith {
                spec,
                packages: job.packages.clone(),
            }))
        }
    };
    if code.len() <= INLINE_CODE_MAX {
        match encode(&spec(Code::Inline(code.to_vec()))) {
            Ok(frame) => return Ok(vec![frame]),
            // Long arguments crowd the code out of the frame: send it chunked instead.
            Err(FrameError::Oversize { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let len = code.len() as u64;
    let mut frames = vec![encode(&spec(Code::Chunked { len }))?];
    for piece in code.chunks(MAX_PAYLOAD_CHUNK) {
        frames.push(encode(&Request::CodeChunk(piece.to_vec()))?);
    }
    Ok(frames)
}

/// Which output stream a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One event of a submitted job, in the order the daemon sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEvent {
    /// Waiting for a free slot; 0 is next.
    Queued { position: u32 },
    /// The daemon is building the sandbox for the job.
    Started { job_id: u64, profile: String },
    /// Output bytes, in order within a stream (stdout and stderr are forwarded
    /// independently, so their relative order is not guaranteed).
    Output(Stream, Vec<u8>),
    /// The last event: how the job ended.
    Finished(Box<Outcome>),
}

/// Where a handle's job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// Finished or refused; the connection is free for the next request.
    Ended,
    /// An error broke the connection; the daemon kills the job.
    Failed,
}

/// A submitted job. Await [`JobHandle::next_event`] until it returns `Finished` (or a
/// refusal); the job's stdin, if any, is streamed meanwhile.
///
/// Dropping the handle before the job has ended closes the connection, which makes the
/// daemon kill the job; the [`crate::Client`] is then unusable.
pub struct JobHandle<'c> {
    conn: &'c mut Conn,
    stdin: Option<StdinPump<'c>>,
    job_id: Option<u64>,
    phase: Phase,
    /// True while a `Cancel` would still reach this job; shared with [`Canceller`]s.
    active: Arc<AtomicBool>,
    /// Set by the first cancel: no more stdin is sent (the daemon reads a connection no
    /// faster than its job reads stdin, so stdin would hold the `Cancel` up).
    cancelling: Arc<AtomicBool>,
    /// The job's package environment, once the daemon has reported it.
    packages: Option<PackagesReport>,
    /// How the job's sandbox was made (protocol 5+), once the daemon has said.
    sandbox: Option<SandboxStart>,
}

impl<'c> JobHandle<'c> {
    pub(crate) fn new<R>(conn: &'c mut Conn, stdin: Option<R>) -> JobHandle<'c>
    where
        R: AsyncRead + Unpin + Send + 'c,
    {
        JobHandle {
            conn,
            stdin: stdin.map(|r| StdinPump::new(Box::new(r))),
            job_id: None,
            phase: Phase::Running,
            active: Arc::new(AtomicBool::new(true)),
            cancelling: Arc::new(AtomicBool::new(false)),
            packages: None,
            sandbox: None,
        }
    }

    /// How the job's sandbox was made: built for it, taken ready from a pool, or forked
    /// from a zygote; known after `Started` from a protocol-5 daemon.
    pub fn sandbox(&self) -> Option<SandboxStart> {
        self.sandbox
    }

    /// The job's package environment (resolved set, whether it came from the cache), if
    /// it asked for packages; known before `Started`.
    pub fn packages(&self) -> Option<&PackagesReport> {
        self.packages.as_ref()
    }

    /// The daemon's job id, once `Started` has arrived.
    pub fn job_id(&self) -> Option<u64> {
        self.job_id
    }

    /// The next event; `Ok(None)` once the job has ended. A refusal (`Event::Error`) ends the
    /// job and is returned as `Err(ClientError::Refused(..))`; the connection stays usable.
    ///
    /// Cancel-safe: it can be a branch of `tokio::select!` (e.g. against ctrl-c) without
    /// losing events or stdin bytes.
    pub async fn next_event(&mut self) -> Result<Option<JobEvent>> {
        match self.phase {
            Phase::Running => {}
            Phase::Ended => return Ok(None),
            Phase::Failed => return Err(ClientError::Unusable),
        }
        match self.next_event_inner().await {
            Ok(event) => {
                if matches!(event, JobEvent::Finished(_)) {
                    self.end(Phase::Ended);
                }
                Ok(Some(event))
            }
            Err(e) => {
                self.end(match e {
                    ClientError::Refused(_) => Phase::Ended,
                    _ => Phase::Failed,
                });
                Err(e)
            }
        }
    }

    /// Ask the daemon to kill the job; its `Finished` (reason `Cancelled`) still follows.
    /// Returns whether a `Cancel` was sent (false once the job has ended). The job's stdin
    /// is not sent any further. The send waits behind stdin the job has not read yet
    /// (stdin is flow-controlled, docs/protocol.md): keep reading events meanwhile (for
    /// instance with a [`Canceller`] in another task), or a job blocked on its output can
    /// hold it up.
    pub async fn cancel(&self) -> Result<bool> {
        cancel(&self.active, &self.cancelling, &self.conn.sock).await
    }

    /// A cloneable, `'static` way to cancel this job from another task. It does not keep the
    /// connection open, and does nothing once this job has ended.
    pub fn canceller(&self) -> Canceller {
        Canceller {
            sock: Arc::downgrade(&self.conn.sock),
            active: Arc::clone(&self.active),
            cancelling: Arc::clone(&self.cancelling),
        }
    }

    async fn next_event_inner(&mut self) -> Result<JobEvent> {
        // The hello's answer, if this connection's first request was this job.
        self.conn.await_hello().await?;
        let conn = &mut *self.conn;
        // Protocol 3+: stdin goes against the daemon's credit.
        if let Some(pump) = self.stdin.as_mut().filter(|p| p.credit.is_none()) {
            if conn.hello.as_ref().is_some_and(|ack| ack.version >= 3) {
                pump.credit = Some(0);
            }
        }
        let event = loop {
            let pumping = !self.cancelling.load(Ordering::SeqCst);
            let event = match self.stdin.as_mut().filter(|p| pumping && p.ready()) {
                Some(pump) => tokio::select! {
                    event = recv_event(&conn.sock, &mut conn.buf) => event?,
                    step = pump.step(&conn.sock) => { step?; continue; }
                },
                None => recv_event(&conn.sock, &mut conn.buf).await?,
            };
            match event {
                Event::StdinCredit(n) => {
                    if let Some(c) = self.stdin.as_mut().and_then(|p| p.credit.as_mut()) {
                        *c = c.saturating_add(n);
                    }
                }
                // Reported before `Started`; kept on the handle rather than an event.
                Event::Packages(report) if self.job_id.is_none() && self.packages.is_none() => {
                    self.packages = Some(report);
                }
                // Right after `Started`; kept on the handle as well.
                Event::Sandbox(start) if self.job_id.is_some() && self.sandbox.is_none() => {
                    self.sandbox = Some(start);
                }
                other => break other,
            }
        };
        let started = self.job_id.is_some();
        match event {
            Event::Queued { position } if !started => Ok(JobEvent::Queued { position }),
            Event::Started { job_id, profile } if !started => {
                self.job_id = Some(job_id);
                Ok(JobEvent::Started { job_id, profile })
            }
            Event::Stdout(bytes) if started => Ok(JobEvent::Output(Stream::Stdout, bytes)),
            Event::Stderr(bytes) if started => Ok(JobEvent::Output(Stream::Stderr, bytes)),
            Event::Finished(outcome) => match self.job_id {
                Some(id) if id != outcome.job_id => Err(ClientError::Protocol(format!(
                    "outcome is for job {}, not job {id}",
                    outcome.job_id
                ))),
                _ => Ok(JobEvent::Finished(outcome)),
            },
            Event::Error(e) => Err(ClientError::Refused(e)),
            other if started => Err(unexpected("output, Finished or Error", &other)),
            other => Err(unexpected("Queued, Started, Finished or Error", &other)),
        }
    }

    fn end(&mut self, phase: Phase) {
        self.phase = phase;
        self.active.store(false, Ordering::SeqCst);
        self.stdin = None;
        match phase {
            // (A refused hello has broken the connection: it stays so.)
            Phase::Ended if !matches!(self.conn.state, ConnState::Broken) => {
                self.conn.state = ConnState::Ready
            }
            Phase::Ended => {}
            Phase::Failed => self.conn.break_conn(),
            Phase::Running => {}
        }
    }
}

impl Drop for JobHandle<'_> {
    fn drop(&mut self) {
        if self.phase == Phase::Running {
            // Abandoned mid-job: closing the socket is the one way to stop the job that
            // cannot race with its events.
            self.end(Phase::Failed);
        }
    }
}

impl std::fmt::Debug for JobHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("job_id", &self.job_id)
            .field("phase", &self.phase)
            .field("stdin", &self.stdin.as_ref().map(|p| p.finished))
            .finish()
    }
}

/// Cancels one job from anywhere (see [`JobHandle::canceller`]).
#[derive(Debug, Clone)]
pub struct Canceller {
    sock: Weak<UnixSeqpacket>,
    active: Arc<AtomicBool>,
    cancelling: Arc<AtomicBool>,
}

impl Canceller {
    /// Send `Cancel` if the job is still running; returns whether it was sent.
    pub async fn cancel(&self) -> Result<bool> {
        match self.sock.upgrade() {
            Some(sock) => cancel(&self.active, &self.cancelling, &sock).await,
            None => Ok(false),
        }
    }
}

async fn cancel(
    active: &AtomicBool,
    cancelling: &AtomicBool,
    sock: &UnixSeqpacket,
) -> Result<bool> {
    if !active.load(Ordering::SeqCst) {
        return Ok(false);
    }
    cancelling.store(true, Ordering::SeqCst);
    send(sock, &Request::Cancel).await?;
    Ok(true)
}

/// Streams a reader to the daemon as `Stdin` frames, then `StdinEof`.
///
/// `step` is cancel-safe, so it can race `recv` in a `select!`: a chunk that has been read
/// but not yet sent waits in `pending` for the next step.
struct StdinPump<'r> {
    reader: Box<dyn AsyncRead + Unpin + Send + 'r>,
    chunk: Vec<u8>,
    pending: Option<Vec<u8>>,
    eof: bool,
    finished: bool,
    /// Protocol 3+: stdin bytes the daemon will still take (`StdinCredit`); `None`: an
    /// older daemon, which takes stdin without credit.
    credit: Option<u64>,
}

impl<'r> StdinPump<'r> {
    fn new(reader: Box<dyn AsyncRead + Unpin + Send + 'r>) -> StdinPump<'r> {
        StdinPump {
            reader,
            chunk: vec![0; MAX_PAYLOAD_CHUNK],
            pending: None,
            eof: false,
            finished: false,
            credit: None,
        }
    }

    /// Whether a step can make progress: a frame is waiting, or there is credit to read.
    fn ready(&self) -> bool {
        !self.finished && (self.pending.is_some() || self.credit.is_none_or(|c| c > 0))
    }

    async fn step(&mut self, sock: &UnixSeqpacket) -> Result<()> {
        if self.pending.is_none() {
            let room = self
                .credit
                .map_or(self.chunk.len(), |c| self.chunk.len().min(c as usize));
            let n = self
                .reader
                .read(&mut self.chunk[..room])
                .await
                .map_err(|source| ClientError::Stdin { source })?;
            if let Some(c) = self.credit.as_mut() {
                *c -= n as u64;
            }
            let request = if n == 0 {
                self.eof = true;
                Request::StdinEof
            } else {
                Request::Stdin(self.chunk[..n].to_vec())
            };
            self.pending = Some(encode(&request)?);
        }
        if let Some(frame) = &self.pending {
            send_frame(sock, frame).await?;
            self.pending = None;
            self.finished = self.eof;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::{decode, MAX_FRAME};

    fn decode_all(frames: &[Vec<u8>]) -> Vec<Request> {
        frames
            .iter()
            .map(|f| {
                assert!(f.len() <= MAX_FRAME, "frame of {} bytes", f.len());
                decode(f).unwrap()
            })
            .collect()
    }

    #[test]
    fn small_code_goes_inline() {
        let job = Job::new("print(1)").arg("x").wall_ms(5);
        let frames = decode_all(&submit_frames(&job, true).unwrap());
        assert_eq!(
            frames,
            vec![Request::Submit(JobSpec {
                profile: "default".into(),
                code: Code::Inline(b"print(1)".to_vec()),
                args: vec!["x".into()],
                stdin: true,
                limits: LimitOverrides {
                    wall_ms: Some(5),
                    ..Default::default()
                },
            })]
        );
    }

    #[test]
    fn large_code_is_chunked_and_reassembles_exactly() {
        // 300 KiB of varied text, so a misplaced chunk would not reassemble equal.
        let code: String = (0..)
            .map(|i| format!("x{i} = {i}  # line {i}\n"))
            .take_while({
                let mut total = 0;
                move |line: &String| {
                    total += line.len();
                    total <= 300 * 1024
                }
            })
            .collect();
        assert!(code.len() > 299 * 1024);
        let job = Job::new(code.clone()).profile("p");
        let frames = decode_all(&submit_frames(&job, false).unwrap());
        let Request::Submit(spec) = &frames[0] else {
            panic!("first frame is {:?}", frames[0]);
        };
        assert_eq!(
            spec.code,
            Code::Chunked {
                len: code.len() as u64
            }
        );
        assert_eq!(spec.profile, "p");
        let mut reassembled = Vec::new();
        for frame in &frames[1..] {
            let Request::CodeChunk(piece) = frame else {
                panic!("expected a code chunk, got {frame:?}");
            };
            assert!(!piece.is_empty() && piece.len() <= MAX_PAYLOAD_CHUNK);
            reassembled.extend_from_slice(piece);
        }
        assert_eq!(reassembled, code.as_bytes());
        assert_eq!(frames.len(), 1 + code.len().div_ceil(MAX_PAYLOAD_CHUNK));
    }

    #[test]
    fn code_at_the_inline_limit_still_fits() {
        let job = Job::new("#".repeat(INLINE_CODE_MAX)).profile("x".repeat(200));
        let frames = submit_frames(&job, false).unwrap();
        assert_eq!(frames.len(), 1);
        assert!(frames[0].len() <= MAX_FRAME);
    }

    #[test]
    fn long_arguments_push_the_code_into_chunks() {
        let job = Job::new("#".repeat(INLINE_CODE_MAX)).args(vec!["a".repeat(2000)]);
        let frames = decode_all(&submit_frames(&job, false).unwrap());
        assert_eq!(frames.len(), 2);
        assert!(
            matches!(&frames[0], Request::Submit(s) if s.code == Code::Chunked { len: INLINE_CODE_MAX as u64 })
        );
    }

    #[test]
    fn arguments_that_cannot_fit_any_frame_are_an_error() {
        let job = Job::new("pass").args(vec!["a".repeat(MAX_FRAME)]);
        assert!(matches!(
            submit_frames(&job, false),
            Err(FrameError::Oversize { .. })
        ));
    }
}
