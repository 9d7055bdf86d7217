//! The streaming core shared by a job ([`crate::JobHandle`]) and a session's cell
//! ([`crate::CellHandle`]): the request's frames go out, then its events are read while
//! its stdin, if any, is streamed against the daemon's credit; `Cancel` can be sent from
//! anywhere meanwhile. What the events mean is the handle's business.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{encode, Code, Event, FrameError, Request, MAX_PAYLOAD_CHUNK};

use crate::conn::{recv_event, send, send_frame, Conn, ConnState};
use crate::files::Frames;
use crate::{ClientError, Result};

/// Code up to this size goes inline in the request's first frame; larger code follows in
/// `CodeChunk` frames. The margin leaves room for the rest of the request (profile name,
/// arguments, limits, a session handle).
pub(crate) const INLINE_CODE_MAX: usize = MAX_PAYLOAD_CHUNK - 1024;

/// The frames of a request that carries `code`: `head` with the code inline, or `head`
/// announcing [`Code::Chunked`] followed by `CodeChunk`s when it does not fit. Every frame
/// is at most `MAX_FRAME` bytes.
pub(crate) fn code_frames(
    code: &[u8],
    head: impl Fn(Code) -> Request,
) -> Result<Vec<Vec<u8>>, FrameError> {
    if code.len() <= INLINE_CODE_MAX {
        match encode(&head(Code::Inline(code.to_vec()))) {
            Ok(frame) => return Ok(vec![frame]),
            // The rest of the request crowds the code out of the frame: send it chunked.
            Err(FrameError::Oversize { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let len = code.len() as u64;
    let mut frames = vec![encode(&head(Code::Chunked { len }))?];
    for piece in code.chunks(MAX_PAYLOAD_CHUNK) {
        frames.push(encode(&Request::CodeChunk(piece.to_vec()))?);
    }
    Ok(frames)
}

/// Start a streaming request on `conn`: send its `frames` (built by the caller, who
/// passes the build's result so that a request that cannot be built leaves the
/// connection in step), then the input files' `FileChunk`s if any, and return the core
/// that reads its events.
pub(crate) async fn start<'c, R>(
    conn: &'c mut Conn,
    frames: Result<Frames<'_>>,
    stdin: Option<R>,
) -> Result<Exchange<'c>>
where
    R: AsyncRead + Unpin + Send + 'c,
{
    conn.begin()?;
    let frames = match frames {
        Ok(frames) => frames,
        Err(e) => {
            // Nothing was sent: the connection is still in step.
            conn.state = ConnState::Ready;
            return Err(e);
        }
    };
    let sent = async {
        for frame in &frames.head {
            send_frame(&conn.sock, frame).await?;
        }
        for frame in frames.file_frames() {
            send_frame(&conn.sock, &frame?).await?;
        }
        Ok::<(), ClientError>(())
    }
    .await;
    if let Err(e) = sent {
        // The daemon may have refused the request and closed before taking every
        // chunk: its reason beats our EPIPE.
        let e = conn.refusal_after_send_error().await.unwrap_or(e);
        conn.break_conn();
        return Err(e);
    }
    Ok(Exchange::new(conn, stdin))
}

/// Where a streaming request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// Over (its last event came, or it was refused); the connection is free for the next
    /// request.
    Ended,
    /// An error broke the connection; the daemon kills what ran.
    Failed,
}

/// One streaming request in flight on a connection.
pub(crate) struct Exchange<'c> {
    pub(crate) conn: &'c mut Conn,
    stdin: Option<StdinPump<'c>>,
    pub(crate) phase: Phase,
    /// True while a `Cancel` would still reach this request; shared with [`Canceller`]s.
    active: Arc<AtomicBool>,
    /// Set by the first cancel: no more stdin is sent (the daemon reads a connection no
    /// faster than the sandbox reads stdin, so stdin would hold the `Cancel` up).
    cancelling: Arc<AtomicBool>,
}

impl<'c> Exchange<'c> {
    fn new<R>(conn: &'c mut Conn, stdin: Option<R>) -> Exchange<'c>
    where
        R: AsyncRead + Unpin + Send + 'c,
    {
        Exchange {
            conn,
            stdin: stdin.map(|r| StdinPump::new(Box::new(r))),
            phase: Phase::Running,
            active: Arc::new(AtomicBool::new(true)),
            cancelling: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether events are still due: `Ok(false)` once the request is over, `Unusable`
    /// once it broke the connection.
    pub(crate) fn running(&self) -> Result<bool> {
        match self.phase {
            Phase::Running => Ok(true),
            Phase::Ended => Ok(false),
            Phase::Failed => Err(ClientError::Unusable),
        }
    }

    /// Record what the handle made of the next event: `last` ends the request, and an
    /// error ends it too (leaving the connection usable when the daemon answered, as for a
    /// refusal, and breaking it otherwise).
    pub(crate) fn settle<T>(&mut self, result: Result<T>, last: impl Fn(&T) -> bool) -> Result<T> {
        match &result {
            Ok(event) if last(event) => self.end(Phase::Ended),
            Ok(_) => {}
            Err(e) if e.keeps_connection() => self.end(Phase::Ended),
            Err(_) => self.end(Phase::Failed),
        }
        result
    }

    /// The next event that is not flow control. The hello's answer is read first (if this
    /// was the connection's first request), stdin is streamed while waiting, and
    /// `StdinCredit` is absorbed. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Result<Event> {
        self.conn.await_hello().await?;
        let conn = &mut *self.conn;
        // Protocol 3+: stdin goes against the daemon's credit.
        if let Some(pump) = self.stdin.as_mut().filter(|p| p.credit.is_none()) {
            if conn.hello.as_ref().is_some_and(|ack| ack.version >= 3) {
                pump.credit = Some(0);
            }
        }
        loop {
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
                other => return Ok(other),
            }
        }
    }

    /// Send `Cancel` if the request still runs; see [`crate::JobHandle::cancel`].
    pub(crate) async fn cancel(&self) -> Result<bool> {
        cancel(&self.active, &self.cancelling, &self.conn.sock).await
    }

    pub(crate) fn canceller(&self) -> Canceller {
        Canceller {
            sock: Arc::downgrade(&self.conn.sock),
            active: Arc::clone(&self.active),
            cancelling: Arc::clone(&self.cancelling),
        }
    }

    /// Whether stdin is still being streamed (for `Debug`).
    pub(crate) fn stdin_open(&self) -> Option<bool> {
        self.stdin.as_ref().map(|p| !p.finished)
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

impl Drop for Exchange<'_> {
    fn drop(&mut self) {
        if self.phase == Phase::Running {
            // Abandoned midway: closing the socket is the one way to stop what runs that
            // cannot race with its events.
            self.end(Phase::Failed);
        }
    }
}

/// Cancels one job, or interrupts one cell, from anywhere (see
/// [`crate::JobHandle::canceller`], [`crate::CellHandle::interrupter`]).
#[derive(Debug, Clone)]
pub struct Canceller {
    sock: Weak<UnixSeqpacket>,
    active: Arc<AtomicBool>,
    cancelling: Arc<AtomicBool>,
}

impl Canceller {
    /// Send `Cancel` if the job (or cell) is still running; returns whether it was sent.
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
