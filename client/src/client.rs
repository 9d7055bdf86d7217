//! The connection: hello, profile listing, and the one-call ways to run a job.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncRead;
use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{
    decode, encode, Event, Hello, HelloAck, Outcome, ProfileInfo, Request, MAX_FRAME,
    MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};

use crate::job::{Job, JobEvent, JobHandle, Stream};
use crate::{default_client_name, ClientError, Result};

/// Where the conversation on a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnState {
    /// No request outstanding: the next one may start.
    Ready,
    /// A request (or a job) is in flight. Seeing this at the start of a new request means the
    /// previous one was interrupted (its future dropped) and the stream is out of step.
    Busy,
    /// Shut down after an error; only reconnecting helps.
    Broken,
}

/// One connection to `vivariumd`, past the hello.
#[derive(Debug)]
pub struct Client {
    /// Shared so that a [`crate::Canceller`] can send `Cancel` while another task awaits
    /// events; cancellers hold it weakly so that dropping the client still closes the socket.
    pub(crate) sock: Arc<UnixSeqpacket>,
    /// Receive buffer of `MAX_FRAME + 1` bytes: a datagram that fills it was truncated.
    pub(crate) buf: Vec<u8>,
    pub(crate) state: ConnState,
    /// `None` until the hello's answer has been read (with the first request's events).
    pub(crate) hello: Option<HelloAck>,
}

/// What [`Client::run_collect`] returns: the outcome and every output byte, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The job's package environment, if it asked for packages.
    pub packages: Option<vivarium_proto::PackagesReport>,
}

impl Client {
    /// Connect to the daemon at `path` and send the hello, announcing this library as
    /// `viv/<version>`. The daemon's answer is read with the first request's (one round
    /// trip fewer per connection): a refused hello surfaces there, or from
    /// [`Client::hello`].
    pub async fn connect(path: impl AsRef<Path>) -> Result<Client> {
        Self::connect_as(path, &default_client_name()).await
    }

    /// Like [`Client::connect`], announcing `client_name` (e.g. `vivarium-mcp/0.1.0`) in the
    /// hello for the daemon's logs.
    pub async fn connect_as(path: impl AsRef<Path>, client_name: &str) -> Result<Client> {
        let path = path.as_ref();
        let sock = connect_socket(path)
            .await
            .map_err(|source| ClientError::Connect {
                path: path.to_path_buf(),
                source,
            })?;
        let sock = Arc::new(sock);
        send(
            &sock,
            &Request::Hello(Hello {
                min_version: MIN_PROTOCOL_VERSION,
                max_version: PROTOCOL_VERSION,
                client: client_name.to_owned(),
            }),
        )
        .await?;
        Ok(Client {
            sock,
            buf: vec![0; MAX_FRAME + 1],
            state: ConnState::Ready,
            hello: None,
        })
    }

    /// The daemon's answer to the hello: negotiated version, daemon name, and the uid it
    /// saw (read now if no request has read it yet).
    pub async fn hello(&mut self) -> Result<&HelloAck> {
        if self.hello.is_none() {
            self.begin()?;
            // (On failure the connection is broken: settle is not for this one.)
            self.await_hello().await?;
            self.state = ConnState::Ready;
        }
        Ok(self.hello.as_ref().expect("await_hello stored the ack"))
    }

    /// Read the hello's answer if it is still to come: it precedes every other event.
    pub(crate) async fn await_hello(&mut self) -> Result<()> {
        if self.hello.is_some() {
            return Ok(());
        }
        let ack = async {
            let ack = match recv_event(&self.sock, &mut self.buf).await? {
                Event::HelloAck(ack) => ack,
                Event::Error(e) => return Err(ClientError::Refused(e)),
                other => return Err(unexpected("a hello ack", &other)),
            };
            if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&ack.version) {
                return Err(ClientError::Protocol(format!(
                    "daemon picked protocol version {}, outside the offered {MIN_PROTOCOL_VERSION}..={PROTOCOL_VERSION}",
                    ack.version
                )));
            }
            Ok(ack)
        }
        .await;
        match ack {
            Ok(ack) => {
                self.hello = Some(ack);
                Ok(())
            }
            Err(e) => {
                // Nothing more can be asked on a connection without a hello.
                self.break_conn();
                Err(e)
            }
        }
    }

    /// The profiles the daemon knows, each with whether this host can enforce it.
    pub async fn list_profiles(&mut self) -> Result<Vec<ProfileInfo>> {
        self.begin()?;
        let result = async {
            send(&self.sock, &Request::ListProfiles).await?;
            self.await_hello().await?;
            match recv_event(&self.sock, &mut self.buf).await? {
                Event::Profiles(profiles) => Ok(profiles),
                Event::Error(e) => Err(ClientError::Refused(e)),
                other => Err(unexpected("the profile list", &other)),
            }
        }
        .await;
        self.settle(result)
    }

    /// Submit `job`; events then come from [`JobHandle::next_event`]. With `stdin`, the job's
    /// stdin is streamed from it (while events are awaited) and closed at its end; without,
    /// the job's stdin is empty.
    pub async fn submit<'c, R>(&'c mut self, job: &Job, stdin: Option<R>) -> Result<JobHandle<'c>>
    where
        R: AsyncRead + Unpin + Send + 'c,
    {
        if !job.packages.is_empty() {
            // Only version 2 takes packages: this request waits for the hello's answer.
            let version = self.hello().await?.version;
            if version < 2 {
                return Err(ClientError::Protocol(format!(
                    "packages need protocol version 2; the daemon speaks {version}"
                )));
            }
        }
        self.begin()?;
        let frames = match crate::job::submit_frames(job, stdin.is_some()) {
            Ok(frames) => frames,
            Err(e) => {
                // Nothing was sent: the connection is still in step.
                self.state = ConnState::Ready;
                return Err(e.into());
            }
        };
        for frame in &frames {
            if let Err(e) = send_frame(&self.sock, frame).await {
                // The daemon may have refused the job and closed before taking every chunk:
                // its reason beats our EPIPE.
                let e = self.refusal_after_send_error().await.unwrap_or(e);
                self.break_conn();
                return Err(e);
            }
        }
        Ok(JobHandle::new(self, stdin))
    }

    /// Run `job` to its end, handing each output chunk to `on_output` as it arrives.
    /// Returns the outcome; a refused job is `Err(ClientError::Refused(..))`.
    pub async fn run<R>(
        &mut self,
        job: &Job,
        stdin: Option<R>,
        mut on_output: impl FnMut(Stream, &[u8]),
    ) -> Result<Outcome>
    where
        R: AsyncRead + Unpin + Send,
    {
        let mut handle = self.submit(job, stdin).await?;
        while let Some(event) = handle.next_event().await? {
            match event {
                JobEvent::Output(stream, bytes) => on_output(stream, &bytes),
                JobEvent::Finished(outcome) => return Ok(*outcome),
                JobEvent::Queued { .. } | JobEvent::Started { .. } => {}
            }
        }
        Err(ClientError::Protocol("job ended without an outcome".into()))
    }

    /// Run `job` with `stdin` (or empty stdin) and collect the outcome and all its output.
    pub async fn run_collect(&mut self, job: &Job, stdin: Option<&[u8]>) -> Result<Collected> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut handle = self.submit(job, stdin).await?;
        while let Some(event) = handle.next_event().await? {
            match event {
                JobEvent::Output(Stream::Stdout, bytes) => stdout.extend_from_slice(&bytes),
                JobEvent::Output(Stream::Stderr, bytes) => stderr.extend_from_slice(&bytes),
                JobEvent::Finished(outcome) => {
                    return Ok(Collected {
                        outcome: *outcome,
                        stdout,
                        stderr,
                        packages: handle.packages().cloned(),
                    })
                }
                JobEvent::Queued { .. } | JobEvent::Started { .. } => {}
            }
        }
        Err(ClientError::Protocol("job ended without an outcome".into()))
    }

    /// Start a request: refuse if the connection is out of step.
    fn begin(&mut self) -> Result<()> {
        match self.state {
            ConnState::Ready => {
                self.state = ConnState::Busy;
                Ok(())
            }
            ConnState::Busy => {
                // The previous request's future was dropped mid-way; a job may still run.
                // Closing the socket makes the daemon kill it.
                self.break_conn();
                Err(ClientError::Unusable)
            }
            ConnState::Broken => Err(ClientError::Unusable),
        }
    }

    /// End a request: refusals leave the connection in step, other errors break it.
    pub(crate) fn settle<T>(&mut self, result: Result<T>) -> Result<T> {
        match &result {
            // (A refused hello has broken the connection: it stays so.)
            Ok(_) | Err(ClientError::Refused(_)) if !matches!(self.state, ConnState::Broken) => {
                self.state = ConnState::Ready
            }
            Ok(_) | Err(ClientError::Refused(_)) => {}
            Err(_) => self.break_conn(),
        }
        result
    }

    /// Close the connection (the daemon kills any running job) and refuse further use.
    pub(crate) fn break_conn(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.state = ConnState::Broken;
    }

    /// After a failed send, look briefly for an `Error` event that explains it.
    async fn refusal_after_send_error(&mut self) -> Option<ClientError> {
        let grace = Duration::from_millis(200);
        match tokio::time::timeout(grace, recv_event(&self.sock, &mut self.buf)).await {
            Ok(Ok(Event::Error(e))) => Some(ClientError::Refused(e)),
            _ => None,
        }
    }
}

/// Encode and send one request as one datagram.
pub(crate) async fn send(sock: &UnixSeqpacket, req: &Request) -> Result<()> {
    send_frame(sock, &encode(req)?).await
}

/// Send one encoded frame. Cancel-safe: a seqpacket datagram goes out whole or not at all.
pub(crate) async fn send_frame(sock: &UnixSeqpacket, frame: &[u8]) -> Result<()> {
    let sent = sock.send(frame).await?;
    if sent != frame.len() {
        return Err(ClientError::Protocol(format!(
            "sent {sent} of {} bytes of a datagram",
            frame.len()
        )));
    }
    Ok(())
}

/// Receive and decode one event. Cancel-safe: a datagram is received whole or not at all.
/// `buf` is `MAX_FRAME + 1` bytes long, so a longer (truncated) datagram fills it and is
/// refused by [`decode`] as oversize.
pub(crate) async fn recv_event(sock: &UnixSeqpacket, buf: &mut [u8]) -> Result<Event> {
    debug_assert!(buf.len() > MAX_FRAME);
    let n = sock.recv(buf).await?;
    if n == 0 {
        // We never receive empty datagrams from the daemon: zero bytes is end-of-stream.
        return Err(ClientError::Disconnected);
    }
    Ok(decode(&buf[..n])?)
}

/// A protocol error for an event that makes no sense where it came.
pub(crate) fn unexpected(wanted: &str, got: &Event) -> ClientError {
    let kind = match got {
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
    };
    ClientError::Protocol(format!("expected {wanted}, got {kind}"))
}

/// Connect a SOCK_SEQPACKET socket to `path`. A non-blocking connect to a unix socket
/// either completes at once or, when the listen queue is full, fails with EAGAIN, which
/// tokio-seqpacket 0.8 mistakes for "in progress", handing back a socket that was never
/// connected. So: one non-blocking attempt here (the common case, no thread involved),
/// and on EAGAIN a blocking connect on a blocking thread, which waits for room instead.
async fn connect_socket(path: &Path) -> std::io::Result<UnixSeqpacket> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let addr = UnixAddr::new(path)?;
    let fd = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    match connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr) {
        Ok(()) => return UnixSeqpacket::try_from(fd),
        Err(nix::Error::EAGAIN) => {}
        Err(e) => return Err(e.into()),
    }
    drop(fd);
    let path = path.to_path_buf();
    let fd = tokio::task::spawn_blocking(move || -> std::io::Result<std::os::fd::OwnedFd> {
        let fd = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        let addr = UnixAddr::new(&path)?;
        connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &addr)?;
        nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        Ok(fd)
    })
    .await
    .map_err(std::io::Error::other)??;
    UnixSeqpacket::try_from(fd)
}
