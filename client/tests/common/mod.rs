//! A scripted fake daemon on a real SOCK_SEQPACKET socket in a temp dir, shared by the
//! library and CLI tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;

use tokio::task::JoinHandle;
use tokio_seqpacket::{UnixSeqpacket, UnixSeqpacketListener};
use vivarium_client::proto::{
    decode, encode, Code, ErrorCode, Event, ExitStatus, HelloAck, Isolation, JobSpec, Outcome,
    Reason, Request, Usage, WireError, MAX_FRAME, PROTOCOL_VERSION,
};

/// The daemon side of one connection.
pub struct Conn {
    pub sock: UnixSeqpacket,
    buf: Vec<u8>,
}

impl Conn {
    /// The next request, or `None` when the client closed the connection.
    pub async fn recv(&mut self) -> Option<Request> {
        let n = self.sock.recv(&mut self.buf).await.unwrap();
        (n > 0).then(|| decode(&self.buf[..n]).unwrap())
    }

    pub async fn send(&self, event: Event) {
        self.sock.send(&encode(&event).unwrap()).await.unwrap();
    }

    pub async fn hello(&mut self) {
        self.read_hello().await;
        self.ack_hello().await;
    }

    /// Read the client's hello (and check it), without answering.
    pub async fn read_hello(&mut self) {
        match self.recv().await {
            Some(Request::Hello(h)) => {
                assert!(h.min_version <= PROTOCOL_VERSION && h.max_version >= PROTOCOL_VERSION);
                assert!(h.client.starts_with("viv/"), "{}", h.client);
            }
            other => panic!("expected hello, got {other:?}"),
        }
    }

    /// Answer the hello as `fake/0`.
    pub async fn ack_hello(&mut self) {
        self.send(Event::HelloAck(HelloAck {
            version: PROTOCOL_VERSION,
            daemon: "fake/0".into(),
            peer_uid: 1000,
        }))
        .await;
    }

    /// Read a submit and, for chunked code, its chunks; return the spec and the code.
    pub async fn submit(&mut self) -> (JobSpec, Vec<u8>) {
        let spec = match self.recv().await {
            Some(Request::Submit(spec)) => spec,
            other => panic!("expected submit, got {other:?}"),
        };
        let code = match &spec.code {
            Code::Inline(code) => code.clone(),
            Code::Chunked { len } => {
                let mut code = Vec::new();
                while (code.len() as u64) < *len {
                    match self.recv().await {
                        Some(Request::CodeChunk(piece)) => code.extend_from_slice(&piece),
                        other => panic!("expected a code chunk, got {other:?}"),
                    }
                }
                assert_eq!(code.len() as u64, *len);
                code
            }
        };
        if spec.stdin {
            // As vivariumd on protocol 3: the stdin credit of a job's queue.
            self.send(Event::StdinCredit(STDIN_CREDIT)).await;
        }
        (spec, code)
    }
}

/// The first stdin credit the fake gives (the daemon's per-job stdin queue).
pub const STDIN_CREDIT: u64 = 8 << 20;

/// Serve one connection with `script`; the returned task fails if the script panics.
pub fn serve<F, Fut>(script: F) -> (tempfile::TempDir, PathBuf, JoinHandle<()>)
where
    F: FnOnce(Conn) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sock");
    let mut listener = UnixSeqpacketListener::bind(&path).unwrap();
    let task = tokio::spawn(async move {
        let sock = listener.accept().await.unwrap();
        script(Conn {
            sock,
            buf: vec![0; MAX_FRAME + 1],
        })
        .await;
    });
    (dir, path, task)
}

pub fn outcome(job_id: u64, reason: Reason, exit: ExitStatus) -> Box<Outcome> {
    Box::new(Outcome {
        job_id,
        profile: "default".into(),
        reason,
        exit,
        limits_hit: vec![],
        usage: Usage {
            wall_ms: 12,
            ..Usage::default()
        },
        stdout_truncated: false,
        stderr_truncated: false,
        isolation: Isolation::default(),
        detail: String::new(),
    })
}

pub fn refusal(code: ErrorCode) -> Event {
    Event::Error(WireError {
        code,
        message: "no".into(),
    })
}
