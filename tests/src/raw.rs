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
}

impl RawConn {
    pub async fn connect(path: &Path) -> RawConn {
        let sock = UnixSeqpacket::connect(path)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", path.display()));
        RawConn {
            sock,
            buf: vec![0; MAX_FRAME * 2],
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
    /// timeout or an undecodable event.
    pub async fn recv_opt(&mut self) -> Option<Event> {
        let n = tokio::time::timeout(ANSWER_TIMEOUT, self.sock.recv(&mut self.buf))
            .await
            .expect("the daemon did not answer within 10 s")
            .expect("recv");
        if n == 0 {
            return None;
        }
        Some(decode(&self.buf[..n]).expect("the daemon sent an undecodable event"))
    }

    /// The next event; panics if the connection closed.
    pub async fn recv(&mut self) -> Event {
        self.recv_opt()
            .await
            .expect("the daemon closed the connection")
    }

    /// Hello with this build's version range; returns the ack.
    pub async fn hello(&mut self) -> HelloAck {
        self.send(&Request::Hello(Hello {
            min_version: MIN_PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            client: "vivarium-e2e/raw".into(),
        }))
        .await;
        match self.recv().await {
            Event::HelloAck(ack) => ack,
            other => panic!("expected HelloAck, got {other:?}"),
        }
    }
}
