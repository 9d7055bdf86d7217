//! The connection itself: the transport (a SOCK_SEQPACKET socket, one frame per
//! datagram), the hello, and where the conversation stands. [`crate::Client`] asks its
//! requests over it and [`crate::JobHandle`] reads a job's events from it; neither
//! imports the other's internals.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{
    decode, encode, Event, Hello, HelloAck, Request, MAX_FRAME, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};

use crate::{ClientError, Result};

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

/// One connection to `vivariumd`, its hello sent.
#[derive(Debug)]
pub(crate) struct Conn {
    /// Shared so that a [`crate::Canceller`] can send `Cancel` while another task awaits
    /// events; cancellers hold it weakly so that dropping the client still closes the socket.
    pub(crate) sock: Arc<UnixSeqpacket>,
    /// Receive buffer of `MAX_FRAME + 1` bytes: a datagram that fills it was truncated.
    pub(crate) buf: Vec<u8>,
    pub(crate) state: ConnState,
    /// `None` until the hello's answer has been read (with the first request's events).
    pub(crate) hello: Option<HelloAck>,
}

impl Conn {
    /// Connect to the daemon at `path` and send the hello announcing `client_name`; its
    /// answer is read with the first request's events ([`Conn::await_hello`]).
    pub(crate) async fn open(path: &Path, client_name: &str) -> Result<Conn> {
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
        Ok(Conn {
            sock,
            buf: vec![0; MAX_FRAME + 1],
            state: ConnState::Ready,
            hello: None,
        })
    }

    /// Read the hello's answer if it is still to come: it precedes every other event.
    pub(crate) async fn await_hello(&mut self) -> Result<()> {
        if self.hello.is_some() {
            return Ok(());
        }
        let ack = async {
            let ack = match self.recv().await? {
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

    /// The next event on this connection.
    pub(crate) async fn recv(&mut self) -> Result<Event> {
        recv_event(&self.sock, &mut self.buf).await
    }

    /// Start a request: refuse if the connection is out of step.
    pub(crate) fn begin(&mut self) -> Result<()> {
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

    /// End a request: the daemon's answers (a refusal, a session's expiry) leave the
    /// connection in step, other errors break it.
    pub(crate) fn settle<T>(&mut self, result: Result<T>) -> Result<T> {
        match &result {
            Err(e) if !e.keeps_connection() => self.break_conn(),
            // (A refused hello has broken the connection: it stays so.)
            _ if matches!(self.state, ConnState::Broken) => {}
            _ => self.state = ConnState::Ready,
        }
        result
    }

    /// Close the connection (the daemon kills any running job) and refuse further use.
    pub(crate) fn break_conn(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.state = ConnState::Broken;
    }

    /// After a failed send, look briefly for an `Error` event that explains it.
    pub(crate) async fn refusal_after_send_error(&mut self) -> Option<ClientError> {
        let grace = Duration::from_millis(200);
        match tokio::time::timeout(grace, self.recv()).await {
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
    ClientError::Protocol(format!("expected {wanted}, got {}", got.kind()))
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
