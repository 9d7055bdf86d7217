//! Client library for `vivariumd`: connect, list profiles, submit a Python job, stream its
//! output, cancel it, and read its [`Outcome`].
//!
//! One [`Client`] is one `SOCK_SEQPACKET` connection to the daemon; each datagram is one
//! frame of [`vivarium_proto`]. A connection runs at most one job at a time and can be reused
//! for the next job once the previous one has ended.
//!
//! ```no_run
//! # async fn demo() -> Result<(), vivarium_client::ClientError> {
//! use vivarium_client::{resolve_socket_path, Client, Job};
//!
//! let mut client = Client::connect(resolve_socket_path(None)).await?;
//! let job = Job::new("print('hello')").wall_ms(2_000);
//! let done = client.run_collect(&job, None).await?;
//! assert_eq!(done.stdout, b"hello\n");
//! # Ok(()) }
//! ```
//!
//! Sessions (protocol 6): [`Client::open_session`] starts an interpreter that keeps its
//! state between cells; [`Client::exec_cell`] (or [`Client::exec_cell_collect`]) runs one
//! cell in it, [`Client::list_sessions`], [`Client::interrupt_cell`] and
//! [`Client::close_session`] manage them. A session is named by its [`SessionHandle`] and
//! outlives the connection that opened it; once it has ended, every request naming it
//! fails with [`ClientError::SessionExpired`], which says why.
//!
//! ```no_run
//! # async fn demo() -> Result<(), vivarium_client::ClientError> {
//! use vivarium_client::{resolve_socket_path, Cell, Client, SessionSpec};
//!
//! let mut client = Client::connect(resolve_socket_path(None)).await?;
//! let opened = client.open_session(&SessionSpec::new().idle_ttl_ms(600_000)).await?;
//! let handle = opened.info.handle;
//! client.exec_cell_collect(&Cell::new(handle.clone(), "x = 6 * 7"), None).await?;
//! let done = client.exec_cell_collect(&Cell::new(handle.clone(), "x"), None).await?;
//! assert_eq!(done.outcome.value.as_deref(), Some("42"));
//! client.close_session(&handle).await?;
//! # Ok(()) }
//! ```
//!
//! Input files (protocol 7, [`FILES_PROTOCOL`]): [`Job::file`] and [`Cell::file`] put bytes
//! under the sandbox's `/work` before the code runs. Their paths and modes are checked
//! against [`proto::files`]'s rules before anything is sent
//! ([`ClientError::InvalidInputFiles`]); the daemon's own refusal (a size or count limit
//! of the profile) is `Refused` with [`proto::ErrorCode::InvalidInputFile`].
//!
//! Artifacts (protocol 8, [`ARTIFACTS_PROTOCOL`]): a job or cell returns the regular files
//! its outputs name ([`Job::output`], [`proto::Outputs`]; by default everything under
//! `/work/out`, plus the matplotlib figures it showed or left open) as
//! [`JobEvent::Artifact`]s, then a [`proto::ArtifactsReport`] of what matched and was not
//! returned (links, FIFOs, devices, files over the caps). A cell returns only what is new
//! or changed since its session's previous collection.
//!
//! Cancellation: [`JobHandle::cancel`] (or a [`Canceller`] from [`JobHandle::canceller`],
//! usable from another task) sends `Cancel`; the job's `Finished` event still follows.
//! Dropping a [`JobHandle`] before its job has ended closes the connection, which makes the
//! daemon kill the job; the [`Client`] must then be replaced by a new connection.
#![forbid(unsafe_code)]

mod artifacts;
mod client;
mod conn;
mod exchange;
mod files;
mod job;
mod outcome;
mod session;
mod socket_path;

use std::path::PathBuf;

pub use artifacts::{safe_join, Artifact, ARTIFACTS_PROTOCOL};
pub use client::{Client, Collected};
pub use exchange::Canceller;
pub use files::{InputFileData, FILES_PROTOCOL};
pub use job::{Job, JobEvent, JobHandle, Stream};
pub use outcome::{
    exit_code_for, format_bytes, format_ms, is_abnormal, limit_name, summary_line, verbose_report,
    EXIT_CANCELLED, EXIT_OOM, EXIT_OUTPUT_LIMIT, EXIT_PIDS, EXIT_REFUSED, EXIT_SESSION_ENDED,
    EXIT_TIMEOUT,
};
pub use session::{
    cell_exit_code, describe_end, end_reason_text, expired_message, format_duration, Cell,
    CellEvent, CellHandle, CollectedCell, SessionSpec, SESSION_PROTOCOL,
};
pub use socket_path::{
    default_socket_path, effective_uid, resolve_socket_path, socket_path_from, SOCKET_ENV,
};
/// The wire crate, re-exported so users need not depend on it separately.
pub use vivarium_proto as proto;
pub use vivarium_proto::{
    CellOutcome, CellStatus, LimitOverrides, Outcome, ProfileInfo, SessionEnded, SessionHandle,
    SessionInfo, SessionLimitOverrides, SessionOpened,
};

/// Everything that can go wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The socket could not be connected (daemon not running, wrong path, no permission).
    #[error("cannot connect to the daemon at {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The daemon said no: its stable error code and human message.
    #[error("the daemon refused the request: {} ({:?})", .0.message, .0.code)]
    Refused(proto::WireError),
    /// The daemon sent something the protocol does not allow at this point.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The daemon closed the connection while an answer was still due.
    #[error("the daemon closed the connection")]
    Disconnected,
    /// An earlier request on this connection was interrupted, so the conversation is out of
    /// step; connect again.
    #[error("the connection is unusable after an interrupted request or error; reconnect")]
    Unusable,
    /// The session named has ended (its state is gone): why and when, from the daemon's
    /// tombstone. A session that never existed, or is another uid's, is
    /// `Refused(SessionNotFound)` instead.
    #[error("{}", session::expired_message(.0))]
    SessionExpired(Box<proto::SessionEnded>),
    /// The daemon speaks a protocol older than sessions ([`SESSION_PROTOCOL`]); nothing
    /// was sent.
    #[error("sessions need protocol version {SESSION_PROTOCOL}; the daemon speaks {version}: upgrade vivariumd")]
    SessionsUnsupported { version: u32 },
    /// The daemon speaks a protocol older than input files ([`FILES_PROTOCOL`]); nothing
    /// was sent.
    #[error("input files need protocol version {FILES_PROTOCOL}; the daemon speaks {version}: upgrade vivariumd")]
    FilesUnsupported { version: u32 },
    /// An input file breaks a rule of [`proto::files`] (its path or mode, or it clashes
    /// with another); the message names it. Nothing was sent.
    #[error("{0}")]
    InvalidInputFiles(proto::files::InputFilesError),
    /// The input files' paths do not fit in the request's first frame (at most
    /// [`proto::MAX_FRAME`] bytes, with the rest of the request); nothing was sent.
    #[error("{files} input files with {paths_bytes} bytes of paths do not fit in one request (a frame of {} bytes): send fewer files, or shorter paths", proto::MAX_FRAME)]
    TooManyInputFiles { files: usize, paths_bytes: usize },
    /// Reading the job's stdin source failed; the job was abandoned (and so killed).
    #[error("cannot read the job's stdin")]
    Stdin {
        #[source]
        source: std::io::Error,
    },
    /// Socket I/O failed.
    #[error("socket i/o failed")]
    Io(#[from] std::io::Error),
    /// A frame could not be encoded or decoded.
    #[error("bad frame")]
    Frame(#[from] proto::FrameError),
}

impl ClientError {
    /// The daemon's error code when the daemon refused, `None` otherwise.
    pub fn refusal_code(&self) -> Option<proto::ErrorCode> {
        match self {
            ClientError::Refused(e) => Some(e.code),
            _ => None,
        }
    }

    /// How the session ended, when the request named one that has.
    pub fn session_ended(&self) -> Option<&proto::SessionEnded> {
        match self {
            ClientError::SessionExpired(ended) => Some(ended),
            _ => None,
        }
    }

    /// Whether the daemon answered (a refusal, an expired session) or nothing was sent, so
    /// the conversation is still in step and the connection usable.
    pub(crate) fn keeps_connection(&self) -> bool {
        matches!(
            self,
            ClientError::Refused(_)
                | ClientError::SessionExpired(_)
                | ClientError::SessionsUnsupported { .. }
                | ClientError::FilesUnsupported { .. }
                | ClientError::InvalidInputFiles(_)
                | ClientError::TooManyInputFiles { .. }
        )
    }
}

/// `Result` with [`ClientError`].
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// The name this library announces in the hello, e.g. `viv/0.1.0`.
pub fn default_client_name() -> String {
    format!("viv/{}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::{ErrorCode, WireError};

    #[test]
    fn refusal_code_only_for_refusals() {
        let refused = ClientError::Refused(WireError {
            code: ErrorCode::Busy,
            message: "all slots taken".into(),
        });
        assert_eq!(refused.refusal_code(), Some(ErrorCode::Busy));
        assert_eq!(
            refused.to_string(),
            "the daemon refused the request: all slots taken (Busy)"
        );
        assert_eq!(ClientError::Disconnected.refusal_code(), None);
    }

    /// The futures a server spawns onto a multi-threaded runtime must be `Send`.
    #[allow(dead_code)]
    fn futures_are_send(client: &mut Client, job: &Job) {
        fn is_send<T: Send>(_: T) {}
        is_send(client.run_collect(job, Some(b"stdin")));
        is_send(client.list_profiles());
    }

    #[test]
    fn client_name_carries_the_version() {
        assert!(default_client_name().starts_with("viv/"));
    }
}
