//! One client connection: hello, authorization, requests, and at most one running job.
//! Every bad input gets a typed error and the connection (and the daemon) goes on.

use super::artifacts;
use super::auth::Peer;
use super::inputs::{self, Inputs};
use super::job::{self, JobRequest};
use super::Daemon;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{
    decode, encode, negotiate, Code, ErrorCode, Event, HelloAck, InputFile, JobSpec, Outputs,
    Request, WireError, MAX_FRAME,
};

/// Arguments may not add up to more than this (execve has its own, larger, limit).
const MAX_ARGS_BYTES: usize = 64 * 1024;
/// Stdin bytes accepted for one job; past this the job's stdin is closed (it reads EOF).
const MAX_STDIN_BYTES: u64 = 64 << 20;
/// Stdin bytes waiting for a job to read them, at most. Past it (or past
/// [`STDIN_QUEUED_TOTAL`] for all jobs) the connection is not read until the job reads
/// (or ends): the client's sends wait, and nothing is lost.
const STDIN_QUEUED_PER_JOB: usize = 8 << 20;
/// The same for all jobs together (see `Daemon::stdin_budget`).
pub const STDIN_QUEUED_TOTAL: usize = 256 << 20;
/// While a connection is not read (stdin flow control), how often it is checked for a
/// client that has hung up (its job is then cancelled, as on any disconnect).
const HANGUP_CHECK: Duration = Duration::from_millis(50);

/// How long a refused connection is read from after its error was sent (see [`refuse`]).
pub const UNADMITTED_DRAIN: Duration = Duration::from_secs(2);
/// The same for a connection past `max_connections`: shorter, as many may come at once.
pub const BUSY_DRAIN: Duration = Duration::from_millis(250);

/// Send one error and end the connection. Closing with unread data would reset it, and
/// the client would read the reset instead of why: what it sent (its hello, and the
/// request it may have sent right behind it) is read and dropped until it hangs up, for
/// at most `drain`. The buffer is one byte: a longer datagram is cut (SOCK_SEQPACKET).
pub async fn refuse(sock: &UnixSeqpacket, code: ErrorCode, message: String, drain: Duration) {
    send_error(sock, code, message).await;
    let mut sink = [0u8; 1];
    let drained = async { while matches!(sock.recv(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(drain, drained).await;
}

pub async fn send(sock: &UnixSeqpacket, event: &Event) -> bool {
    match encode(event) {
        Ok(frame) => sock.send(&frame).await.is_ok(),
        Err(e) => {
            tracing::error!(error = %e, "event did not encode");
            false
        }
    }
}

pub async fn send_error(sock: &UnixSeqpacket, code: ErrorCode, message: impl Into<String>) -> bool {
    send(
        sock,
        &Event::Error(WireError {
            code,
            message: message.into(),
        }),
    )
    .await
}

pub fn identify(sock: &UnixSeqpacket) -> std::io::Result<Peer> {
    let cred = sock.peer_cred()?;
    let groups = vivarium_sandbox::sys::peer_groups(std::os::fd::AsFd::as_fd(sock))?;
    Ok(Peer {
        uid: cred.uid(),
        gid: cred.gid(),
        groups,
    })
}

struct Running {
    /// Set by the job task just before its last event (`Finished` or `Error`): a client
    /// may then submit again before the task has fully returned.
    over: Arc<AtomicBool>,
    stdin: Option<StdinSender>,
    stdin_bytes: u64,
    cancel: Arc<Notify>,
    done: tokio::task::JoinHandle<()>,
    /// The script's share of `max_code_bytes_total`, given back when the job is over.
    _code: OwnedSemaphorePermit,
}

/// A job whose code is still arriving in chunks.
/// What a submission asks for in packages, before checking.
struct PackageAsk {
    explicit: Vec<String>,
    /// Read the code's PEP 723 `script` block (protocol 2+).
    inline: bool,
}

impl PackageAsk {
    fn check(
        &self,
        active: &super::ActiveProfile,
        code: &[u8],
    ) -> Result<Vec<crate::packages::spec::Req>, crate::packages::PackageError> {
        use crate::packages::spec;
        let inline = if self.inline {
            spec::inline_metadata(&String::from_utf8_lossy(code))?
        } else {
            None
        };
        if self.explicit.is_empty() && inline.as_ref().is_none_or(|d| d.is_empty()) {
            return Ok(Vec::new());
        }
        let section = &active.profile.file.packages;
        let policy = spec::NamePolicy {
            allow: &section.allow,
            deny: &section.deny,
        };
        let reqs = spec::requirements(&self.explicit, inline.as_deref(), &policy)?;
        if !section.enabled {
            return Err(crate::packages::PackageError::new(
                ErrorCode::PackageNotAllowed,
                None,
                format!("profile {:?} does not allow packages", active.profile.name),
            ));
        }
        Ok(reqs)
    }
}

/// What a connection's code is for: a job, or a session's cell; with its input files
/// (protocol 7), whose bytes follow the code.
enum Submission {
    Job(JobSpec, PackageAsk, Vec<InputFile>, Outputs),
    Cell(vivarium_proto::ExecCell, Vec<InputFile>, Outputs),
}

impl Submission {
    /// The submission a request makes (one of `Submit`, `SubmitWith`, `SubmitFiles`,
    /// `ExecCell`, `ExecCellFiles`) on a connection of `version`.
    fn from_request(req: Request, version: u32) -> Submission {
        let ask = |explicit| PackageAsk {
            explicit,
            inline: true,
        };
        // From protocol 8 a request that says nothing of outputs asks for the default
        // (a client need not wait for the hello's answer to choose its request); before,
        // it never gets artifacts.
        let default = || {
            if version >= 8 {
                Outputs::Default
            } else {
                Outputs::None
            }
        };
        match req {
            // PEP 723 blocks are read for version-2 clients only: a version-1 client's
            // job runs exactly as it always did.
            Request::Submit(spec) => Submission::Job(
                spec,
                PackageAsk {
                    explicit: Vec::new(),
                    inline: version >= 2,
                },
                Vec::new(),
                default(),
            ),
            Request::SubmitWith(w) => {
                Submission::Job(w.spec, ask(w.packages), Vec::new(), default())
            }
            Request::SubmitFiles(w) => {
                let w = *w;
                Submission::Job(w.spec, ask(w.packages), w.files, default())
            }
            // Protocol 8: the artifacts.
            Request::SubmitJob(w) => {
                let w = *w;
                Submission::Job(w.spec, ask(w.packages), w.files, w.outputs)
            }
            Request::ExecCell(cell) => Submission::Cell(*cell, Vec::new(), default()),
            Request::ExecCellFiles(c) => Submission::Cell(c.cell, c.files, default()),
            Request::RunCell(c) => {
                let c = *c;
                Submission::Cell(c.cell, c.files, c.outputs)
            }
            _ => unreachable!("only the submissions are passed here"),
        }
    }

    fn code(&self) -> &Code {
        match self {
            Submission::Job(spec, ..) => &spec.code,
            Submission::Cell(cell, ..) => &cell.code,
        }
    }

    fn files(&self) -> &[InputFile] {
        match self {
            Submission::Job(_, _, files, _) | Submission::Cell(_, files, _) => files,
        }
    }
}

/// A piece of a submission in flight: of its code (`CodeChunk`) or of its input files
/// (`FileChunk`), which come after the whole code.
enum Chunk {
    Code(Vec<u8>),
    Files(Vec<u8>),
}

/// A submission whose code or input files are still coming.
struct Receiving {
    what: Submission,
    /// The code: chunks so far (`Code::Chunked`), or all of it (`Code::Inline`).
    code: Vec<u8>,
    /// Bytes of code announced; for inline code, its length.
    code_len: usize,
    /// The input files' bytes so far, and all they announce.
    files: Vec<u8>,
    files_len: usize,
    /// Cancelled before it was complete: the rest is read and dropped.
    cancelled: bool,
    /// Refused (`Busy`, or input files that break a rule) before it was complete: the
    /// rest is read and dropped (its error was the answer).
    refused: bool,
    /// Bytes received (kept unless refused).
    got_code: usize,
    got_files: usize,
    /// What `code` and `files` may hold (their capacity), out of `max_code_bytes_total`.
    permit: Option<OwnedSemaphorePermit>,
}

impl Receiving {
    fn complete(&self) -> bool {
        self.got_code == self.code_len && self.got_files == self.files_len
    }

    /// Take `more` bytes of script out of the daemon's `max_code_bytes_total`; false
    /// when other jobs' scripts hold too much of it.
    fn charge(&mut self, daemon: &Daemon, more: usize) -> bool {
        let Some(p) = code_permit(daemon, more) else {
            return false;
        };
        match self.permit.as_mut() {
            Some(held) => held.merge(p),
            None => self.permit = Some(p),
        }
        true
    }

    /// Make room in `code` (or `files`) for `more` bytes, charging the room to
    /// `max_code_bytes_total` before it is allocated; false when other jobs' scripts
    /// hold too much of it. The announced length is a claim, not a reservation
    /// (reserving it at the first chunk let 512 connections announcing 16 MiB each take
    /// the daemon's virtual size to 8.3 GiB, which a host with strict overcommit
    /// refuses). The buffer doubles, never past the announced length, so a script in
    /// 64 KiB chunks is copied a few times rather than once per chunk; where the doubled
    /// room does not fit, the room this chunk needs is tried, so that `Busy` comes only
    /// when the bytes themselves do not fit.
    fn make_room(&mut self, daemon: &Daemon, more: usize, files: bool) -> bool {
        let (len, cap, announced) = if files {
            (self.files.len(), self.files.capacity(), self.files_len)
        } else {
            (self.code.len(), self.code.capacity(), self.code_len)
        };
        let need = len + more;
        if need <= cap {
            return true;
        }
        let doubled = (2 * cap).min(announced).max(need);
        let room = if self.charge(daemon, doubled - cap) {
            doubled
        } else if doubled > need && self.charge(daemon, need - cap) {
            need
        } else {
            return false;
        };
        let buf = if files {
            &mut self.files
        } else {
            &mut self.code
        };
        buf.reserve_exact(room - len);
        true
    }
}

/// A complete script, its input files, and their share of `max_code_bytes_total`.
struct Script {
    code: Vec<u8>,
    inputs: Inputs,
    permit: OwnedSemaphorePermit,
}

/// `len` bytes of script out of the daemon's `max_code_bytes_total` (an empty script
/// takes one), or `None` when other jobs' scripts hold too much of it.
pub fn code_permit(daemon: &Daemon, len: usize) -> Option<OwnedSemaphorePermit> {
    let n = u32::try_from(len.max(1)).ok()?;
    daemon.code_budget.clone().try_acquire_many_owned(n).ok()
}

/// Stdin for a job: each chunk carries its share of the job's and the daemon's queued
/// stdin bytes, given back when the job's feeder has written it (or dropped it).
pub struct StdinChunk {
    pub data: Vec<u8>,
    _queued: [OwnedSemaphorePermit; 2],
}

struct StdinSender {
    tx: mpsc::UnboundedSender<StdinChunk>,
    /// [`STDIN_QUEUED_PER_JOB`] bytes.
    job: Arc<Semaphore>,
}

/// The `Busy` answer to a script that does not fit in `max_code_bytes_total`.
fn code_budget_full(daemon: &Daemon, len: usize) -> String {
    format!(
        "the daemon holds too much of other jobs' code to take {len} more bytes (max_code_bytes_total = {}); try again later",
        daemon.config.max_code_bytes_total
    )
}

/// What became of a stdin frame.
enum Backpressure {
    Queued,
    /// The job no longer reads stdin (it closed it, or its task ended).
    JobStdinGone,
    JobOver,
    ClientGone,
}

/// Queue `data` for the job's stdin: at once if the job's and the daemon's queued stdin
/// have room for it, else (flow control) without reading the connection until they do,
/// the job is over, or the client hangs up. A protocol-3 client waits here only when all
/// jobs together hold the daemon-wide stdin budget (its own credit keeps it within the
/// job's); an older client's `Cancel` behind this waits with it.
async fn queue_stdin(
    daemon: &Daemon,
    sock: &UnixSeqpacket,
    r: &mut Running,
    data: Vec<u8>,
) -> Backpressure {
    let Some(stdin) = r.stdin.as_ref() else {
        return Backpressure::JobStdinGone;
    };
    let n = data.len().max(1) as u32;
    let take = |sem: &Arc<Semaphore>| sem.clone().try_acquire_many_owned(n).ok();
    let queued = match (take(&stdin.job), take(&daemon.stdin_budget)) {
        (Some(job), Some(all)) => [job, all],
        _ => {
            let wait = async {
                let job = stdin.job.clone().acquire_many_owned(n).await;
                let all = daemon.stdin_budget.clone().acquire_many_owned(n).await;
                job.ok().zip(all.ok())
            };
            tokio::select! {
                permits = wait => match permits {
                    Some((job, all)) => [job, all],
                    None => return Backpressure::JobStdinGone,
                },
                _ = &mut r.done => return Backpressure::JobOver,
                () = hung_up(sock) => return Backpressure::ClientGone,
            }
        }
    };
    match stdin.tx.send(StdinChunk {
        data,
        _queued: queued,
    }) {
        Ok(()) => Backpressure::Queued,
        Err(_) => Backpressure::JobStdinGone,
    }
}

/// Resolves once the client has closed its end. Polled with `poll(2)` (no data is
/// read, and tokio's readiness for the socket is left as it is).
async fn hung_up(sock: &UnixSeqpacket) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        tokio::time::sleep(HANGUP_CHECK).await;
        let mut fds = [PollFd::new(
            std::os::fd::AsFd::as_fd(sock),
            PollFlags::empty(),
        )];
        if poll(&mut fds, PollTimeout::ZERO).is_ok()
            && fds[0]
                .revents()
                .is_some_and(|r| r.contains(PollFlags::POLLHUP))
        {
            return;
        }
    }
}

/// How a connection holds its place without using it.
#[derive(Debug, Clone, Copy)]
enum Unused {
    /// No successful hello within `hello_timeout_ms` of accept.
    NoHello(Duration),
    /// No job, and no frame for `idle_timeout_secs`.
    Idle(Duration),
}

/// When a connection that holds a place without using it loses it: first the hello's
/// deadline (from accept; frames that are not a successful hello do not move it), then
/// the idle one (from the last frame, or the end of the last job). Without these, one
/// admitted uid held all 1,024 places by connecting and never saying hello.
struct Expiry {
    at: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// What the deadline is for; `None`: there is none (`idle_timeout_secs = 0`).
    unused: Option<Unused>,
}

impl Expiry {
    fn hello(daemon: &Daemon) -> Expiry {
        let within = Duration::from_millis(daemon.live().config.hello_timeout_ms);
        Expiry {
            at: Box::pin(tokio::time::sleep(within)),
            unused: Some(Unused::NoHello(within)),
        }
    }

    /// The connection did something (a frame after its hello, or its job ended): idle
    /// from now, for the `idle_timeout_secs` of the config as it is now.
    fn active(&mut self, daemon: &Daemon) {
        let secs = daemon.live().config.idle_timeout_secs;
        self.unused = (secs > 0).then(|| Unused::Idle(Duration::from_secs(secs)));
        if let Some(Unused::Idle(after)) = self.unused {
            self.at.as_mut().reset(tokio::time::Instant::now() + after);
        }
    }
}

/// Tell the client why its place is taken back (`Busy`: it may connect again) and close.
async fn expire(sock: &UnixSeqpacket, peer: &Peer, unused: Unused) {
    let why = match unused {
        Unused::NoHello(within) => {
            let ms = within.as_millis();
            tracing::warn!(
                uid = peer.uid,
                ms,
                "connection closed: no hello within hello_timeout_ms"
            );
            format!("no hello within {ms} ms of connecting (hello_timeout_ms); connection closed")
        }
        Unused::Idle(after) => {
            let secs = after.as_secs();
            tracing::info!(
                uid = peer.uid,
                secs,
                "connection closed: idle for idle_timeout_secs"
            );
            format!("no job and no request for {secs} s (idle_timeout_secs); connection closed, connect again")
        }
    };
    refuse(sock, ErrorCode::Busy, why, BUSY_DRAIN).await;
}

/// Serve an admitted peer's connection (the accept loop has identified and admitted it).
pub async fn serve(daemon: Arc<Daemon>, sock: UnixSeqpacket, peer: Peer) {
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; MAX_FRAME + 1];
    let mut version = None;
    let mut running: Option<Running> = None;
    let mut receiving: Option<Receiving> = None;
    let mut expiry = Expiry::hello(&daemon);
    loop {
        // A connection whose job is queued or running is never idle.
        let may_expire = running.is_none() && expiry.unused.is_some();
        let job_done = async {
            match running.as_mut() {
                Some(r) => {
                    let _ = (&mut r.done).await;
                }
                None => std::future::pending().await,
            }
        };
        let n = tokio::select! {
            // In this order: a frame already queued is read before the deadline is
            // taken for having passed.
            biased;
            () = job_done => {
                running = None;
                expiry.active(&daemon);
                continue;
            }
            n = sock.recv(&mut buf) => n,
            () = expiry.at.as_mut(), if may_expire => {
                if let Some(unused) = expiry.unused {
                    expire(&sock, &peer, unused).await;
                }
                break;
            }
        };
        let n = match n {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if version.is_some() {
            expiry.active(&daemon);
        }
        if n > MAX_FRAME {
            send_error(
                &sock,
                ErrorCode::OversizeFrame,
                format!("frames are limited to {MAX_FRAME} bytes"),
            )
            .await;
            continue;
        }
        let req: Request = match decode(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                send_error(&sock, ErrorCode::MalformedFrame, crate::error_chain(&e)).await;
                continue;
            }
        };
        match (req, version) {
            (Request::Hello(h), None) => match negotiate(h.min_version, h.max_version) {
                Some(v) => {
                    version = Some(v);
                    expiry.active(&daemon);
                    let ack = HelloAck {
                        version: v,
                        daemon: format!("vivariumd/{}", env!("CARGO_PKG_VERSION")),
                        peer_uid: peer.uid,
                    };
                    send(&sock, &Event::HelloAck(ack)).await;
                }
                None => {
                    send_error(
                        &sock,
                        ErrorCode::UnsupportedVersion,
                        format!(
                            "client speaks {}..={}, daemon {}..={}",
                            h.min_version,
                            h.max_version,
                            vivarium_proto::MIN_PROTOCOL_VERSION,
                            vivarium_proto::PROTOCOL_VERSION
                        ),
                    )
                    .await;
                }
            },
            (_, None) => {
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "the first message must be Hello",
                )
                .await;
            }
            (Request::Hello(_), Some(_)) => {
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "hello was already done",
                )
                .await;
            }
            (Request::ListProfiles, Some(_)) => {
                let infos = daemon.live().profiles.values().map(|p| p.info()).collect();
                send(&sock, &Event::Profiles(infos)).await;
            }
            (Request::ListProfileFeatures, Some(v)) if v < 4 => {
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "ListProfileFeatures needs protocol version 4",
                )
                .await;
            }
            (Request::ListProfileFeatures, Some(_)) => {
                let features = daemon
                    .live()
                    .profiles
                    .values()
                    .map(|p| p.features(&daemon))
                    .collect();
                send(&sock, &Event::ProfileFeatures(features)).await;
            }
            (Request::SubmitWith(w), Some(1)) => {
                let _ = w;
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "SubmitWith needs protocol version 2",
                )
                .await;
            }
            (Request::SubmitJob(_) | Request::RunCell(_), Some(v)) if v < 8 => {
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "artifacts need protocol version 8",
                )
                .await;
            }
            (
                Request::SubmitFiles(_) | Request::ExecCellFiles(_) | Request::FileChunk(_),
                Some(v),
            ) if v < 7 => {
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "input files need protocol version 7",
                )
                .await;
            }
            (Request::Stdin(data), Some(_)) => {
                // Stdin, StdinEof and Cancel carry no job id and may cross `Finished` in
                // flight: with no job to take them they are dropped without a reply, so
                // that no stray error answers the client's next request.
                let Some(r) = running.as_mut().filter(|r| r.stdin.is_some()) else {
                    continue;
                };
                r.stdin_bytes += data.len() as u64;
                if r.stdin_bytes > MAX_STDIN_BYTES {
                    // No error event: an error would end the job for the client while it
                    // still runs. The job reads EOF instead.
                    tracing::warn!("stdin over {MAX_STDIN_BYTES} bytes; closing the job's stdin");
                    r.stdin = None;
                    continue;
                }
                match queue_stdin(&daemon, &sock, r, data).await {
                    Backpressure::Queued => {}
                    Backpressure::JobStdinGone => r.stdin = None,
                    Backpressure::JobOver => {
                        running = None;
                        expiry.active(&daemon);
                    }
                    Backpressure::ClientGone => break,
                }
            }
            (Request::StdinEof, Some(_)) => {
                if let Some(r) = running.as_mut() {
                    r.stdin = None;
                }
            }
            (
                Request::OpenSession(_)
                | Request::ExecCell(_)
                | Request::InterruptCell(_)
                | Request::CloseSession(_)
                | Request::ListSessions,
                Some(v),
            ) if v < 6 => {
                send_error(
                    &sock,
                    ErrorCode::UnexpectedMessage,
                    "sessions need protocol version 6",
                )
                .await;
            }
            (Request::OpenSession(open), Some(_)) => {
                // Answered before the next frame is read: opening builds a sandbox (a
                // few ms from a pool, more with packages), as a submit's start does.
                super::sessions::open(&daemon, &sock, peer.uid, *open).await;
            }
            (Request::InterruptCell(handle), Some(_)) => {
                super::sessions::interrupt(&daemon, &sock, peer.uid, &handle).await;
            }
            (Request::CloseSession(handle), Some(_)) => {
                super::sessions::close(&daemon, &sock, peer.uid, &handle).await;
            }
            (Request::ListSessions, Some(_)) => {
                super::sessions::list(&daemon, &sock, peer.uid).await;
            }
            (
                req @ (Request::Submit(_)
                | Request::SubmitWith(_)
                | Request::SubmitFiles(_)
                | Request::SubmitJob(_)
                | Request::ExecCell(_)
                | Request::ExecCellFiles(_)
                | Request::RunCell(_)),
                Some(v),
            ) => {
                let what = Submission::from_request(req, v);
                if !submit(&daemon, &sock, &peer, v, what, &mut running, &mut receiving).await {
                    break;
                }
            }
            (req @ (Request::CodeChunk(_) | Request::FileChunk(_)), Some(v)) => {
                let chunk = match req {
                    Request::CodeChunk(c) => Chunk::Code(c),
                    Request::FileChunk(c) => Chunk::Files(c),
                    _ => unreachable!("matched above"),
                };
                let (d, p) = (&daemon, &peer);
                if !on_chunk(d, &sock, p, v, chunk, &mut running, &mut receiving).await {
                    break;
                }
            }
            (Request::Cancel, Some(_)) => {
                if let Some(r) = &running {
                    r.cancel.notify_one();
                }
                if let Some(r) = receiving.as_mut() {
                    // What came so far is dropped (and given back); the rest is read
                    // and dropped as it comes.
                    r.cancelled = true;
                    r.code = Vec::new();
                    r.files = Vec::new();
                    r.permit = None;
                }
            }
        }
    }
    // Disconnect: the client's job dies with its connection.
    if let Some(r) = running {
        r.cancel.notify_one();
        let _ = r.done.await;
    }
}

/// A complete `Submit`/`SubmitWith`/`SubmitFiles`/`ExecCell`/`ExecCellFiles`: refused
/// if a job or cell runs on the connection; started now if its code is inline and it
/// has no file bytes to come, else its code and files are awaited in `CodeChunk` and
/// `FileChunk` frames. Input files are checked against the profile first, before any
/// of their bytes is read: a broken rule is answered at once and the bytes that follow
/// are dropped. False: the connection must close (chunks announced past the limit
/// cannot be told apart from the next request).
async fn submit(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    peer: &Peer,
    version: u32,
    what: Submission,
    running: &mut Option<Running>,
    receiving: &mut Option<Receiving>,
) -> bool {
    if let Some(r) = running.take_if(|r| r.over.load(Ordering::SeqCst)) {
        let _ = r.done.await;
    }
    if running.is_some() || receiving.is_some() {
        let msg = "a job or cell is already running on this connection";
        send_error(sock, ErrorCode::UnexpectedMessage, msg).await;
        return true;
    }
    let max_code_bytes = daemon.live().config.max_code_bytes;
    let (inline, code_len) = match what.code() {
        Code::Inline(code) => (Some(code.clone()), code.len()),
        &Code::Chunked { len } => {
            if len > max_code_bytes {
                let msg = format!("code of {len} bytes exceeds the {max_code_bytes}-byte limit");
                send_error(sock, ErrorCode::CodeTooLarge, msg).await;
                return false;
            }
            (None, len as usize)
        }
    };
    let files_len = inputs::announced(what.files());
    // Files are held whole until the job starts, within the daemon's budget for code.
    let most = daemon.config.max_code_bytes_total;
    if files_len > most {
        let msg = format!(
            "input files of {files_len} bytes together exceed what the daemon holds for a submission ({most} bytes)"
        );
        send_error(sock, ErrorCode::InvalidInputFile, msg).await;
        return false;
    }
    let refused = !files_allowed(daemon, sock, peer, &what).await;
    if let (Some(code), false, 0) = (&inline, refused, files_len) {
        let Some(permit) = code_permit(daemon, code.len()) else {
            let why = code_budget_full(daemon, code.len());
            send_error(sock, ErrorCode::Busy, why).await;
            return true;
        };
        let inputs = Inputs {
            files: what.files().to_vec(),
            bytes: Vec::new(),
        };
        let script = Script {
            code: code.clone(),
            inputs,
            permit,
        };
        *running = start_submission(daemon, sock, peer, version, what, script).await;
        return true;
    }
    let mut r = Receiving {
        what,
        code: Vec::new(),
        code_len,
        files: Vec::new(),
        files_len: files_len as usize,
        cancelled: false,
        refused,
        got_code: 0,
        got_files: 0,
        permit: None,
    };
    if let Some(code) = inline {
        r.got_code = code.len();
        if !r.refused {
            match code_permit(daemon, code.len()) {
                Some(p) => {
                    r.permit = Some(p);
                    r.code = code;
                }
                None => {
                    let why = code_budget_full(daemon, code.len());
                    send_error(sock, ErrorCode::Busy, why).await;
                    r.refused = true;
                }
            }
        }
    }
    if r.complete() && r.refused {
        return true; // (its error was the answer; nothing more is coming)
    }
    *receiving = Some(r);
    true
}

/// Whether a submission's input files keep the path rules and its profile's `[files]`
/// bounds; if not, the answer has been sent. A cell's profile is its session's: a cell
/// with files for a session that does not exist (or not for this uid) gets that answer
/// now, so that no byte of its files is held.
async fn files_allowed(
    daemon: &Daemon,
    sock: &UnixSeqpacket,
    peer: &Peer,
    what: &Submission,
) -> bool {
    let files = what.files();
    if files.is_empty() {
        return true;
    }
    let (profile, script) = match what {
        Submission::Job(spec, ..) => (spec.profile.clone(), true),
        Submission::Cell(cell, ..) => {
            let sessions = &daemon.sessions;
            match sessions
                .profile_or_answer(sock, &cell.session, peer.uid)
                .await
            {
                Some(p) => (p, false),
                None => return false,
            }
        }
    };
    let live = daemon.live();
    let Some(active) = live.profiles.get(&profile) else {
        send_error(
            sock,
            ErrorCode::UnknownProfile,
            unknown_profile(&live, &profile),
        )
        .await;
        return false;
    };
    match active.profile.check_input_files(files, script) {
        Ok(()) => true,
        Err(msg) => {
            send_error(sock, ErrorCode::InvalidInputFile, msg).await;
            false
        }
    }
}

/// The `UnknownProfile` answer: the name asked for, and the profiles there are.
pub(super) fn unknown_profile(live: &super::Live, name: &str) -> String {
    let known: Vec<_> = live.profiles.keys().cloned().collect();
    format!("no profile {name:?} (known: {})", known.join(", "))
}

/// A `CodeChunk` or `FileChunk` for the submission being received; once it is
/// complete, it starts (or gets the answer its refusal or cancel calls for). False: the
/// connection must close.
async fn on_chunk(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    peer: &Peer,
    version: u32,
    chunk: Chunk,
    running: &mut Option<Running>,
    receiving: &mut Option<Receiving>,
) -> bool {
    let Some(mut r) = receiving.take() else {
        send_error(
            sock,
            ErrorCode::UnexpectedMessage,
            "no chunked submit is in progress",
        )
        .await;
        return true;
    };
    let (data, files) = match chunk {
        Chunk::Code(d) => (d, false),
        Chunk::Files(d) => (d, true),
    };
    if files && r.got_code < r.code_len {
        send_error(
            sock,
            ErrorCode::UnexpectedMessage,
            "a file chunk came before the whole code",
        )
        .await;
        return false;
    }
    let past = if files {
        r.got_files + data.len() > r.files_len
    } else {
        r.got_code + data.len() > r.code_len
    };
    if past {
        let (code, what) = if files {
            (
                ErrorCode::InvalidInputFile,
                "file chunks exceed the files' announced length",
            )
        } else {
            (
                ErrorCode::CodeTooLarge,
                "code chunks exceed the announced length",
            )
        };
        send_error(sock, code, what).await;
        return false;
    }
    if files {
        r.got_files += data.len();
    } else {
        r.got_code += data.len();
    }
    let keep = !(r.refused || r.cancelled);
    if keep && !r.make_room(daemon, data.len(), files) {
        // The rest is read and dropped, so that the connection stays usable.
        let total = r.code_len + r.files_len;
        send_error(sock, ErrorCode::Busy, code_budget_full(daemon, total)).await;
        r.refused = true;
        r.code = Vec::new();
        r.files = Vec::new();
        r.permit = None;
    }
    if !(r.refused || r.cancelled) {
        // Within the room made (and charged) above: no allocation here.
        if files {
            r.files.extend_from_slice(&data);
        } else {
            r.code.extend_from_slice(&data);
        }
    }
    if !r.complete() {
        *receiving = Some(r);
        return true;
    }
    if r.refused {
        // Its error was the answer.
    } else if r.cancelled && matches!(r.what, Submission::Cell(..)) {
        // A cell that never reached its session: nothing ran, nothing changed.
        send_error(
            sock,
            ErrorCode::UnexpectedMessage,
            "the cell was cancelled before its code was complete; it did not run",
        )
        .await;
    } else if r.cancelled {
        let job_id = daemon.next_job.fetch_add(1, Ordering::Relaxed);
        let outcome = super::outcome::not_started(
            job_id,
            match &r.what {
                Submission::Job(spec, ..) => &spec.profile,
                Submission::Cell(..) => "",
            },
            vivarium_proto::Reason::Cancelled,
            "cancelled before the code was complete",
        );
        send(sock, &Event::Finished(Box::new(outcome))).await;
    } else {
        // An empty script has held nothing yet: it takes its one byte now.
        match r.permit.take().or_else(|| code_permit(daemon, 0)) {
            Some(permit) => {
                let inputs = Inputs {
                    files: r.what.files().to_vec(),
                    bytes: r.files,
                };
                let script = Script {
                    code: r.code,
                    inputs,
                    permit,
                };
                *running = start_submission(daemon, sock, peer, version, r.what, script).await;
            }
            None => {
                let why = code_budget_full(daemon, 0);
                send_error(sock, ErrorCode::Busy, why).await;
            }
        }
    }
    true
}

async fn start_submission(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    peer: &Peer,
    version: u32,
    what: Submission,
    script: Script,
) -> Option<Running> {
    match what {
        Submission::Job(spec, ask, _, outputs) => {
            start(daemon, sock, peer, version, spec, script, ask, outputs).await
        }
        Submission::Cell(cell, _, outputs) => {
            start_cell(daemon, sock, peer, version, cell, script, outputs).await
        }
    }
}

/// A session's explicit requirements, checked against its profile as a job's are.
pub fn check_packages(
    active: &super::ActiveProfile,
    explicit: &[String],
) -> Result<Vec<crate::packages::spec::Req>, crate::packages::PackageError> {
    let ask = PackageAsk {
        explicit: explicit.to_vec(),
        inline: false,
    };
    ask.check(active, b"")
}

/// Validate a complete cell and hand it to its session; on refusal, answer with the
/// typed error and return `None`.
async fn start_cell(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    peer: &Peer,
    version: u32,
    cell: vivarium_proto::ExecCell,
    script: Script,
    outputs: Outputs,
) -> Option<Running> {
    let Script {
        code,
        inputs,
        permit: code_permit,
    } = script;
    let outputs = match artifacts::wanted(outputs) {
        Ok(w) => w,
        Err(e) => {
            send_error(sock, ErrorCode::InvalidOutputPattern, e.to_string()).await;
            return None;
        }
    };
    if let Err(e) = std::str::from_utf8(&code) {
        send_error(
            sock,
            ErrorCode::InvalidCode,
            format!("code is not valid UTF-8 ({e})"),
        )
        .await;
        return None;
    }
    if cell.wall_ms == Some(0) {
        send_error(
            sock,
            ErrorCode::LimitOutOfRange,
            "wall_ms = 0 is out of range",
        )
        .await;
        return None;
    }
    let cancel = Arc::new(Notify::new());
    let (stdin_tx, stdin_rx) = if cell.stdin {
        let (tx, rx) = mpsc::unbounded_channel();
        let job = Arc::new(Semaphore::new(STDIN_QUEUED_PER_JOB));
        (Some(StdinSender { tx, job }), Some(rx))
    } else {
        (None, None)
    };
    let credits = stdin_tx.is_some() && version >= 3;
    if credits {
        send(sock, &Event::StdinCredit(STDIN_QUEUED_PER_JOB as u64)).await;
    }
    let over = Arc::new(AtomicBool::new(false));
    let req = super::sessions::ExecRequest {
        code,
        inputs,
        outputs,
        wall_ms: cell.wall_ms,
        stdin: stdin_rx,
        credits,
        sock: sock.clone(),
        cancel: cancel.clone(),
    };
    let done = tokio::spawn(super::sessions::exec(
        daemon.clone(),
        peer.uid,
        cell.session,
        req,
        over.clone(),
    ));
    Some(Running {
        over,
        stdin: stdin_tx,
        stdin_bytes: 0,
        cancel,
        done,
        _code: code_permit,
    })
}

/// Validate a complete submission and start its job task; on refusal, answer with the
/// typed error and return `None`.
#[allow(clippy::too_many_arguments)]
async fn start(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    peer: &Peer,
    version: u32,
    spec: JobSpec,
    script: Script,
    ask: PackageAsk,
    outputs: Outputs,
) -> Option<Running> {
    let Script {
        code,
        inputs,
        permit: code_permit,
    } = script;
    let refuse = |code: ErrorCode, msg: String| async move {
        send_error(sock, code, msg).await;
        None
    };
    // The profile as it is now: a later reload does not change this job.
    let live = daemon.live();
    let Some(active) = live.profiles.get(&spec.profile).cloned() else {
        return refuse(
            ErrorCode::UnknownProfile,
            unknown_profile(&live, &spec.profile),
        )
        .await;
    };
    if let Some(why) = &active.disabled {
        return refuse(
            ErrorCode::ProfileDisabled,
            format!("profile {:?} cannot be enforced here: {why}", spec.profile),
        )
        .await;
    }
    let limits = match active.profile.job_limits(&spec.limits) {
        Ok(l) => l,
        Err(e) => return refuse(ErrorCode::LimitOutOfRange, e.to_string()).await,
    };
    if code.len() as u64 > live.config.max_code_bytes {
        return refuse(
            ErrorCode::CodeTooLarge,
            format!(
                "code of {} bytes exceeds the {}-byte limit",
                code.len(),
                live.config.max_code_bytes
            ),
        )
        .await;
    }
    if let Err(e) = std::str::from_utf8(&code) {
        return refuse(
            ErrorCode::InvalidCode,
            format!("code is not valid UTF-8 ({e})"),
        )
        .await;
    }
    if spec.args.iter().any(|a| a.contains('\0')) {
        return refuse(
            ErrorCode::InvalidCode,
            "an argument contains a NUL byte".into(),
        )
        .await;
    }
    if spec.args.iter().map(|a| a.len() + 1).sum::<usize>() > MAX_ARGS_BYTES {
        return refuse(
            ErrorCode::CodeTooLarge,
            format!("arguments exceed {MAX_ARGS_BYTES} bytes"),
        )
        .await;
    }
    let packages = match ask.check(&active, &code) {
        Ok(p) => p,
        Err(e) => return refuse(e.code, e.message).await,
    };
    let outputs = match artifacts::wanted(outputs) {
        Ok(w) => w,
        Err(e) => return refuse(ErrorCode::InvalidOutputPattern, e.to_string()).await,
    };
    let cancel = Arc::new(Notify::new());
    let (stdin_tx, stdin_rx) = if spec.stdin {
        let (tx, rx) = mpsc::unbounded_channel();
        let job = Arc::new(Semaphore::new(STDIN_QUEUED_PER_JOB));
        (Some(StdinSender { tx, job }), Some(rx))
    } else {
        (None, None)
    };
    let request = JobRequest {
        profile: spec.profile,
        args: spec.args,
        code,
        inputs,
        limits,
        uid: peer.uid,
        active,
        packages,
        credits: stdin_tx.is_some() && version >= 3,
        sandbox_event: version >= 5,
        outputs,
    };
    if request.credits {
        // What the job's stdin queue holds; more follows as the job reads.
        send(sock, &Event::StdinCredit(STDIN_QUEUED_PER_JOB as u64)).await;
    }
    let over = Arc::new(AtomicBool::new(false));
    let done = tokio::spawn(job::run(
        daemon.clone(),
        sock.clone(),
        request,
        stdin_rx,
        cancel.clone(),
        over.clone(),
    ));
    Some(Running {
        over,
        stdin: stdin_tx,
        stdin_bytes: 0,
        cancel,
        done,
        _code: code_permit,
    })
}
