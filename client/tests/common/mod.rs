//! A scripted fake daemon on a real SOCK_SEQPACKET socket in a temp dir, shared by the
//! library and CLI tests.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;

use tokio::task::JoinHandle;
use tokio_seqpacket::{UnixSeqpacket, UnixSeqpacketListener};
use vivarium_client::proto::{
    decode, encode, CellException, CellOutcome, CellStatus, Code, ErrorCode, Event, ExecCell,
    ExecCellFiles, ExitStatus, HelloAck, InputFile, Isolation, JobSpec, Outcome, Reason, Request,
    SandboxStart, SessionEndReason, SessionEnded, SessionHandle, SessionInfo, SessionLimits,
    SessionOpened, SubmitFiles, Usage, WireError, MAX_FRAME, MAX_PAYLOAD_CHUNK, PROTOCOL_VERSION,
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
        self.ack_hello_version(PROTOCOL_VERSION).await;
    }

    /// Answer the hello as a daemon that speaks only up to `version`.
    pub async fn ack_hello_version(&mut self, version: u32) {
        self.send(Event::HelloAck(HelloAck {
            version,
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
        let code = self.code(&spec.code).await;
        if spec.stdin {
            // As vivariumd on protocol 3: the stdin credit of a job's queue.
            self.send(Event::StdinCredit(STDIN_CREDIT)).await;
        }
        (spec, code)
    }

    /// Read an `ExecCell` and, for chunked code, its chunks; give the first stdin credit
    /// when it has stdin, as for a job.
    pub async fn exec_cell(&mut self) -> (ExecCell, Vec<u8>) {
        let cell = match self.recv().await {
            Some(Request::ExecCell(cell)) => *cell,
            other => panic!("expected ExecCell, got {other:?}"),
        };
        let code = self.code(&cell.code).await;
        if cell.stdin {
            self.send(Event::StdinCredit(STDIN_CREDIT)).await;
        }
        (cell, code)
    }

    /// Read a `SubmitFiles`, its code chunks and its files' bytes; return the request,
    /// the code and each file's bytes.
    pub async fn submit_files(&mut self) -> (SubmitFiles, Vec<u8>, Vec<Vec<u8>>) {
        let head = match self.recv().await {
            Some(Request::SubmitFiles(head)) => *head,
            other => panic!("expected SubmitFiles, got {other:?}"),
        };
        let code = self.code(&head.spec.code).await;
        let files = self.file_bytes(&head.files).await;
        if head.spec.stdin {
            self.send(Event::StdinCredit(STDIN_CREDIT)).await;
        }
        (head, code, files)
    }

    /// As [`Conn::submit_files`] for an `ExecCellFiles`.
    pub async fn exec_cell_files(&mut self) -> (ExecCellFiles, Vec<u8>, Vec<Vec<u8>>) {
        let head = match self.recv().await {
            Some(Request::ExecCellFiles(head)) => *head,
            other => panic!("expected ExecCellFiles, got {other:?}"),
        };
        let code = self.code(&head.cell.code).await;
        let files = self.file_bytes(&head.files).await;
        if head.cell.stdin {
            self.send(Event::StdinCredit(STDIN_CREDIT)).await;
        }
        (head, code, files)
    }

    /// The `FileChunk`s of `files`, split back into each file's bytes.
    async fn file_bytes(&mut self, files: &[InputFile]) -> Vec<Vec<u8>> {
        let total: u64 = files.iter().map(|f| f.len).sum();
        let mut data = Vec::new();
        while (data.len() as u64) < total {
            match self.recv().await {
                Some(Request::FileChunk(piece)) => {
                    assert!(!piece.is_empty() && piece.len() <= MAX_PAYLOAD_CHUNK);
                    data.extend_from_slice(&piece);
                }
                other => panic!("expected a file chunk, got {other:?}"),
            }
        }
        assert_eq!(data.len() as u64, total);
        let mut rest = data.as_slice();
        files
            .iter()
            .map(|f| {
                let (this, more) = rest.split_at(f.len as usize);
                rest = more;
                this.to_vec()
            })
            .collect()
    }

    /// Read `Stdin` frames up to `StdinEof`; return the bytes.
    pub async fn read_stdin(&mut self) -> Vec<u8> {
        let mut input = Vec::new();
        loop {
            match self.recv().await {
                Some(Request::Stdin(bytes)) => input.extend_from_slice(&bytes),
                Some(Request::StdinEof) => return input,
                other => panic!("expected stdin, got {other:?}"),
            }
        }
    }

    /// As [`Conn::read_stdin`], giving credit `step` bytes at a time, the next only once
    /// the last is used up, and checking that no frame goes past it.
    pub async fn read_stdin_in_credits(&mut self, step: u64) -> Vec<u8> {
        let mut credit = step;
        self.send(Event::StdinCredit(credit)).await;
        let mut input = Vec::new();
        loop {
            match self.recv().await {
                Some(Request::Stdin(bytes)) => {
                    assert!(
                        bytes.len() as u64 <= credit,
                        "{} bytes past the credit",
                        bytes.len()
                    );
                    credit -= bytes.len() as u64;
                    input.extend_from_slice(&bytes);
                    if credit == 0 {
                        credit = step;
                        self.send(Event::StdinCredit(credit)).await;
                    }
                }
                Some(Request::StdinEof) => return input,
                other => panic!("expected stdin, got {other:?}"),
            }
        }
    }

    /// The code of a request: inline, or read from its `CodeChunk`s.
    async fn code(&mut self, code: &Code) -> Vec<u8> {
        match code {
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
        }
    }
}

/// A well-formed session handle (`vs_` and 64 hex digits), different per `n`.
pub fn handle(n: u8) -> SessionHandle {
    SessionHandle(format!("vs_{}", format!("{n:02x}").repeat(32)))
}

pub fn session_info(handle: SessionHandle) -> SessionInfo {
    SessionInfo {
        handle,
        profile: "default".into(),
        sandbox_id: 17,
        limits: SessionLimits {
            idle_ttl_ms: 600_000,
            lifetime_ms: 3_600_000,
            cell_wall_ms: 30_000,
            cpu_ms: 600_000,
            memory_bytes: 512 << 20,
            memory_guard_bytes: 480 << 20,
            pids: 64,
            output_bytes: 1 << 20,
            interrupt_grace_ms: 2_000,
        },
        age_ms: 125_000,
        idle_ms: 5_000,
        expires_at_unix_ms: 1_800_000_000_000,
        expires_in_ms: 595_000,
        expires_by: SessionEndReason::IdleTimeout,
        memory_bytes: 30 << 20,
        peak_memory_bytes: 45 << 20,
        cells: 4,
        cpu_ms: 1_500,
        running: false,
        packages: vec![],
    }
}

pub fn session_opened(handle: SessionHandle) -> Event {
    Event::SessionOpened(Box::new(SessionOpened {
        info: session_info(handle),
        sandbox: SandboxStart::Ready { sandbox_id: 17 },
    }))
}

pub fn cell_outcome(session: SessionHandle, cell: u64, status: CellStatus) -> Box<CellOutcome> {
    Box::new(CellOutcome {
        session,
        cell,
        status,
        value: None,
        value_truncated: false,
        wall_ms: 3,
        cpu_ms: 2,
        memory_bytes: 30 << 20,
        peak_memory_bytes: 45 << 20,
        stdout_bytes: 0,
        stderr_bytes: 0,
        stdout_truncated: false,
        stderr_truncated: false,
        expires_at_unix_ms: 1_800_000_000_000,
        expires_in_ms: 600_000,
    })
}

/// Cell `cell` of session 1 raised ZeroDivisionError.
pub fn zero_division(cell: u64) -> Box<CellOutcome> {
    let exception = CellException {
        type_name: "ZeroDivisionError".into(),
        message: "division by zero".into(),
        traceback: format!(
            "Traceback (most recent call last):\n  File \"<cell {cell}>\", line 1, in \
             <module>\nZeroDivisionError: division by zero\n"
        ),
        traceback_truncated: false,
    };
    cell_outcome(handle(1), cell, CellStatus::Exception(exception))
}

pub fn session_ended(handle: SessionHandle, reason: SessionEndReason) -> Box<SessionEnded> {
    Box::new(SessionEnded {
        handle,
        reason,
        detail: String::new(),
        ended_ms_ago: 2_000,
        cells: 4,
        cpu_ms: 1_500,
        peak_memory_bytes: 45 << 20,
        age_ms: 725_000,
    })
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
