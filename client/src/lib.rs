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
//! Cancellation: [`JobHandle::cancel`] (or a [`Canceller`] from [`JobHandle::canceller`],
//! usable from another task) sends `Cancel`; the job's `Finished` event still follows.
//! Dropping a [`JobHandle`] before its job has ended closes the connection, which makes the
//! daemon kill the job; the [`Client`] must then be replaced by a new connection.
#![forbid(unsafe_code)]

mod client;
mod conn;
mod job;
mod outcome;
mod socket_path;

use std::path::PathBuf;

pub use client::{Client, Collected};
pub use job::{Canceller, Job, JobEvent, JobHandle, Stream};
pub use outcome::{
    exit_code_for, format_bytes, format_ms, is_abnormal, limit_name, summary_line, verbose_report,
    EXIT_CANCELLED, EXIT_OOM, EXIT_OUTPUT_LIMIT, EXIT_PIDS, EXIT_REFUSED, EXIT_TIMEOUT,
};
pub use socket_path::{
    default_socket_path, effective_uid, resolve_socket_path, socket_path_from, SOCKET_ENV,
};
/// The wire crate, re-exported so users need not depend on it separately.
pub use vivarium_proto as proto;
pub use vivarium_proto::{LimitOverrides, Outcome, ProfileInfo};

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
