//! Wire types and framing for the Vivarium protocol.
//!
//! One message is one `SOCK_SEQPACKET` datagram holding one bincode-encoded value
//! (`Request` from client to daemon, `Event` from daemon to client). See
//! `docs/protocol.md` for the conversation.
//!
//! Evolution rules (bincode carries no field names and encodes enum variants by index):
//! - enum variants are only ever appended, never reordered or removed;
//! - any change to a struct's fields bumps [`PROTOCOL_VERSION`], negotiated in the hello;
//! - no serde `flatten`, `tag`, `untagged` or `skip_serializing_if` on these types.
#![forbid(unsafe_code)]

pub mod files;
mod frame;
mod types;

pub use frame::{decode, encode, FrameError, MAX_FRAME, MAX_PAYLOAD_CHUNK};
pub use types::*;

/// Render an error with its whole `source()` chain, `": "` between the links: what the
/// edges of every program here (the daemon's log and stderr, `viv`, the MCP server)
/// print. An error should put its cause either in its own message or in `source()`,
/// never both, or the cause is printed twice.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The protocol version this build speaks. Bump on any change to a wire struct.
///
/// 2 added `Request::SubmitWith`, `Event::Packages` and the package error codes (all
/// appended; no existing struct changed), and PEP 723 inline metadata is read from the
/// code of jobs submitted on a version-2 connection. Version-1 peers are still served
/// exactly as before.
///
/// 3 added `Event::StdinCredit`: stdin is sent against credit, so that a client never
/// has more unread stdin on the connection than the daemon will queue, and a `Cancel`
/// is never stuck behind it. Older peers are served as before (their stdin is
/// flow-controlled by the daemon not reading).
///
/// 4 added `Request::ListProfileFeatures` and `Event::ProfileFeatures` (appended; no
/// existing struct changed): whether each profile's jobs can have packages.
///
/// 5 added `Event::Sandbox` (appended), sent to version-5 peers after `Started`: whether
/// the job's sandbox was built for it, taken ready from a pool, or forked from a zygote.
///
/// 6 added sessions (appended): `Request::{OpenSession, ExecCell, InterruptCell,
/// CloseSession, ListSessions}`, `Event::{SessionOpened, CellFinished, Sessions,
/// SessionClosed, SessionExpired, SessionAck}` and error codes 23-25.
///
/// 7 added input files (appended): `Request::{SubmitFiles, ExecCellFiles, FileChunk}` and
/// `ErrorCode::InvalidInputFile`.
///
/// 8 added artifacts (appended): `Request::{SubmitJob, RunCell}` and
/// `Event::{Artifact, ArtifactChunk, Artifacts}`. A connection at 7 or below never gets
/// them (its jobs return no artifacts).
pub const PROTOCOL_VERSION: u32 = 8;

/// The oldest protocol version this build still speaks.
pub const MIN_PROTOCOL_VERSION: u32 = 1;

/// Pick the highest version both sides speak, if any.
pub fn negotiate(client_min: u32, client_max: u32) -> Option<u32> {
    let hi = client_max.min(PROTOCOL_VERSION);
    let lo = client_min.max(MIN_PROTOCOL_VERSION);
    (lo <= hi).then_some(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte payloads are `serde_bytes` (one copy to decode) and must stay exactly
    /// what a `Vec<u8>` sequence encodes to, which every earlier peer sends and expects.
    #[test]
    fn byte_payloads_encode_as_a_sequence_of_u8_did() {
        #[derive(serde::Serialize)]
        #[allow(dead_code)]
        enum OldRequest {
            Hello(Hello),
            Submit(JobSpec),
            CodeChunk(Vec<u8>),
            Stdin(Vec<u8>),
        }
        #[derive(serde::Serialize)]
        #[allow(dead_code)]
        enum OldCode {
            Inline(Vec<u8>),
        }
        #[derive(serde::Serialize)]
        #[allow(dead_code)]
        enum OldEvent {
            HelloAck(HelloAck),
            Queued { position: u32 },
            Started { job_id: u64, profile: String },
            Stdout(Vec<u8>),
            Stderr(Vec<u8>),
        }
        let old = |v: &dyn erased::Ser| v.bytes();
        for data in [
            vec![],
            vec![7u8],
            (0..=255u8).cycle().take(MAX_PAYLOAD_CHUNK).collect(),
        ] {
            assert_eq!(
                encode(&Request::CodeChunk(data.clone())).unwrap(),
                old(&OldRequest::CodeChunk(data.clone()))
            );
            assert_eq!(
                encode(&Request::Stdin(data.clone())).unwrap(),
                old(&OldRequest::Stdin(data.clone()))
            );
            assert_eq!(
                encode(&Event::Stdout(data.clone())).unwrap(),
                old(&OldEvent::Stdout(data.clone()))
            );
            assert_eq!(
                encode(&Event::Stderr(data.clone())).unwrap(),
                old(&OldEvent::Stderr(data.clone()))
            );
            assert_eq!(
                bincode::serde::encode_to_vec(
                    Code::Inline(data.clone()),
                    bincode::config::standard()
                )
                .unwrap(),
                old(&OldCode::Inline(data.clone()))
            );
            let frame = encode(&Request::FileChunk(data.clone())).unwrap();
            assert_eq!(decode::<Request>(&frame).unwrap(), Request::FileChunk(data));
        }
    }

    /// The old types' encoding, as `encode` did it (the same bincode configuration).
    mod erased {
        pub trait Ser {
            fn bytes(&self) -> Vec<u8>;
        }
        impl<T: serde::Serialize> Ser for T {
            fn bytes(&self) -> Vec<u8> {
                bincode::serde::encode_to_vec(self, bincode::config::standard()).unwrap()
            }
        }
    }

    #[test]
    fn negotiation_picks_highest_common_version() {
        assert_eq!(negotiate(1, 1), Some(1));
        assert_eq!(negotiate(1, 2), Some(2));
        assert_eq!(negotiate(2, 2), Some(2));
        assert_eq!(negotiate(1, 99), Some(PROTOCOL_VERSION));
        assert_eq!(negotiate(PROTOCOL_VERSION + 1, PROTOCOL_VERSION + 5), None);
        assert_eq!(negotiate(0, 0), None);
        assert_eq!(negotiate(3, 2), None);
    }

    #[test]
    fn error_chain_joins_every_cause() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer {0}")]
        struct Outer(u8, #[source] Middle);
        #[derive(Debug, thiserror::Error)]
        #[error("middle")]
        struct Middle(#[source] std::io::Error);
        let e = Outer(
            1,
            Middle(std::io::Error::from(std::io::ErrorKind::NotFound)),
        );
        assert_eq!(error_chain(&e), "outer 1: middle: entity not found");
        let alone = std::io::Error::other("no cause");
        assert_eq!(error_chain(&alone), "no cause");
    }
}
