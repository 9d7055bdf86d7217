//! A raw protocol connection: arbitrary datagrams out, decoded events in, no client-side
//! checks, so the daemon's own handling of bad input can be observed.

use std::path::Path;
use std::time::Duration;

use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{
    decode, encode, Event, Hello, HelloAck, Request, MAX_FRAME, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};

/// How long to wait for the daemon's answer to one datagram.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RawConn {
    sock: UnixSeqpacket,
    buf: Vec<u8>,
    /// Whether [`RawConn::recv_opt`] returns the artifact events (`Artifact`,
    /// `ArtifactChunk`, `Artifacts`) that every job and cell of a protocol-8 connection
    /// ends with; tests of other things skip them ([`RawConn::seeing_artifacts`]).
    artifacts: bool,
}

impl RawConn {
    pub async fn connect(path: &Path) -> RawConn {
        let sock = UnixSeqpacket::connect(path)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        RawConn {
            sock,
            buf: vec![0; MAX_FRAME * 2],
            artifacts: false,
        }
    }

    /// This connection's [`RawConn::recv_opt`] returns the artifact events too.
    pub fn seeing_artifacts(mut self) -> RawConn {
        self.artifacts = true;
        self
    }

    /// A connection made as `uid` (its SO_PEERCRED), by a thread of its own that takes
    /// that effective uid for itself alone (the `setresuid` syscall is per thread; libc's
    /// wrapper would change every thread of the test) and ends with it.
    pub async fn connect_as(path: &Path, uid: u32) -> RawConn {
        use rustix::net::{
            connect, socket_with, AddressFamily, SocketAddrUnix, SocketFlags, SocketType,
        };
        let path = path.to_owned();
        let fd = std::thread::spawn(move || {
            let as_uid = rustix::thread::Uid::from_raw(uid);
            rustix::thread::set_thread_res_uid(None, Some(as_uid), None)
                .expect("take the uid for this thread");
            let fd = socket_with(
                AddressFamily::UNIX,
                SocketType::SEQPACKET,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
                None,
            )
            .expect("socket");
            connect(&fd, &SocketAddrUnix::new(&path).expect("socket path"))
                .expect("connect as another uid");
            fd
        })
        .join()
        .expect("the connecting thread");
        RawConn {
            sock: UnixSeqpacket::try_from(fd).expect("a seqpacket socket"),
            buf: vec![0; MAX_FRAME * 2],
            artifacts: false,
        }
    }

    pub fn socket(&self) -> &UnixSeqpacket {
        &self.sock
    }

    /// Send one datagram exactly as given.
    pub async fn send_bytes(&self, bytes: &[u8]) {
        let sent = self.sock.send(bytes).await.expect("send datagram");
        assert_eq!(sent, bytes.len(), "datagram sent in part");
    }

    pub async fn send(&self, req: &Request) {
        self.send_bytes(&encode(req).expect("encode request")).await;
    }

    /// The next event, or `None` when the daemon closed the connection. Panics on a
    /// timeout or an undecodable event. Skips the artifact events unless
    /// [`RawConn::seeing_artifacts`].
    pub async fn recv_opt(&mut self) -> Option<Event> {
        loop {
            let n = tokio::time::timeout(ANSWER_TIMEOUT, self.sock.recv(&mut self.buf))
                .await
                .expect("the daemon did not answer within 10 s")
                .expect("recv");
            if n == 0 {
                return None;
            }
            let event = decode(&self.buf[..n]).expect("the daemon sent an undecodable event");
            let artifact = matches!(
                event,
                Event::Artifact(_) | Event::ArtifactChunk(_) | Event::Artifacts(_)
            );
            if !artifact || self.artifacts {
                return Some(event);
            }
        }
    }

    /// The next event; panics if the connection closed.
    pub async fn recv(&mut self) -> Event {
        self.recv_opt()
            .await
            .expect("the daemon closed the connection")
    }

    /// The daemon refused this connection: its first event is `Error{code}` whose message
    /// names `needle`, and then the connection is closed.
    pub async fn expect_refused(&mut self, code: vivarium_proto::ErrorCode, needle: &str) {
        match self.recv().await {
            Event::Error(e) if e.code == code => {
                assert!(e.message.contains(needle), "{e:?} does not name {needle}")
            }
            other => panic!("expected {code:?}, got {other:?}"),
        }
        assert!(
            self.recv_opt().await.is_none(),
            "the refused connection stays open"
        );
    }

    /// A connection whose hello was answered, trying again while the daemon says `Busy`
    /// (up to ~10 s): a place given up, such as the harness's readiness probe (a connect
    /// and a close), is free only once the daemon has seen the close, however fast or
    /// slow the machine is. Panics on any other answer.
    pub async fn admitted(path: &Path) -> RawConn {
        for _ in 0..100 {
            let mut c = RawConn::connect(path).await;
            c.send(&hello_request()).await;
            match c.recv().await {
                Event::HelloAck(_) => return c,
                Event::Error(e) if e.code == vivarium_proto::ErrorCode::Busy => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                other => panic!("expected HelloAck, got {other:?}"),
            }
        }
        panic!("the daemon said Busy for 10 s");
    }

    /// Whether a new connection's hello is answered within ~5 s of tries (a place given
    /// up is free once the daemon has seen the close).
    pub async fn served_again(path: &Path) -> bool {
        for _ in 0..50 {
            let mut c = RawConn::connect(path).await;
            c.send(&hello_request()).await;
            if matches!(c.recv().await, Event::HelloAck(_)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Hello for versions `min..=max` (an older client); returns the ack.
    pub async fn hello_versions(&mut self, min: u32, max: u32) -> HelloAck {
        self.send(&Request::Hello(Hello {
            min_version: min,
            max_version: max,
            client: "vivarium-e2e/raw".into(),
        }))
        .await;
        match self.recv().await {
            Event::HelloAck(ack) => ack,
            other => panic!("expected HelloAck, got {other:?}"),
        }
    }

    /// Hello with this build's version range; returns the ack.
    pub async fn hello(&mut self) -> HelloAck {
        self.send(&hello_request()).await;
        match self.recv().await {
            Event::HelloAck(ack) => ack,
            other => panic!("expected HelloAck, got {other:?}"),
        }
    }
}

/// A hello with this build's version range.
fn hello_request() -> Request {
    Request::Hello(Hello {
        min_version: MIN_PROTOCOL_VERSION,
        max_version: PROTOCOL_VERSION,
        client: "vivarium-e2e/raw".into(),
    })
}
