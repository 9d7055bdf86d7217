//! Size-limited bincode framing: one value per datagram.

use serde::{de::DeserializeOwned, Serialize};

/// Largest datagram either side sends or accepts. Receivers read into `MAX_FRAME + 1`
/// bytes so that a longer datagram (which the kernel truncates) is detected.
pub const MAX_FRAME: usize = 64 * 1024;

/// Largest byte payload (code chunk, stdin or output chunk) carried in one frame,
/// leaving room for the enum tag and length prefix.
pub const MAX_PAYLOAD_CHUNK: usize = MAX_FRAME - 64;

/// Why a frame could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    Oversize { len: usize, max: usize },
    #[error("malformed frame")]
    Malformed {
        #[source]
        source: bincode::error::DecodeError,
    },
    #[error("frame has {extra} trailing bytes after the message")]
    TrailingBytes { extra: usize },
    #[error("message could not be encoded")]
    Encode {
        #[source]
        source: bincode::error::EncodeError,
    },
}

/// What one frame may allocate when decoded. bincode checks every claimed length against
/// this limit *before* allocating, which is what keeps a 9-byte frame claiming a 1 TiB
/// string from aborting the process. The limit counts in-memory sizes (a `String` costs
/// 24 bytes however short), so it is a multiple of the wire limit: a frame that fits in
/// `MAX_FRAME` bytes, e.g. thousands of one-byte arguments, must still decode.
const DECODE_LIMIT: usize = 32 * MAX_FRAME;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Encode one message into a frame, refusing anything larger than [`MAX_FRAME`].
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let buf = bincode::serde::encode_to_vec(msg, config())
        .map_err(|source| FrameError::Encode { source })?;
    if buf.len() > MAX_FRAME {
        return Err(FrameError::Oversize {
            len: buf.len(),
            max: MAX_FRAME,
        });
    }
    Ok(buf)
}

/// Decode exactly one message from a frame: oversize frames, malformed bytes and
/// trailing bytes are all errors.
pub fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, FrameError> {
    if frame.len() > MAX_FRAME {
        return Err(FrameError::Oversize {
            len: frame.len(),
            max: MAX_FRAME,
        });
    }
    let (msg, used) = bincode::serde::decode_from_slice(frame, config())
        .map_err(|source| FrameError::Malformed { source })?;
    if used != frame.len() {
        return Err(FrameError::TrailingBytes {
            extra: frame.len() - used,
        });
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Code, JobSpec, LimitOverrides, Request};
    use proptest::prelude::*;

    fn spec(code: Vec<u8>) -> Request {
        Request::Submit(JobSpec {
            profile: "default".into(),
            code: Code::Inline(code),
            args: vec!["a".into()],
            stdin: false,
            limits: LimitOverrides::default(),
        })
    }

    #[test]
    fn round_trip() {
        let msg = spec(b"print(1)".to_vec());
        let back: Request = decode(&encode(&msg).unwrap()).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn huge_claimed_length_is_an_error_not_an_abort() {
        // Variant 1 (Submit), then a string length prefix claiming 2^40 bytes.
        let mut frame = vec![1u8, 0xfd];
        frame.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(matches!(
            decode::<Request>(&frame),
            Err(FrameError::Malformed { .. })
        ));
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut frame = encode(&Request::Cancel).unwrap();
        frame.push(0);
        assert!(matches!(
            decode::<Request>(&frame),
            Err(FrameError::TrailingBytes { extra: 1 })
        ));
    }

    #[test]
    fn oversize_is_refused_both_ways() {
        assert!(matches!(
            encode(&spec(vec![0; MAX_FRAME])),
            Err(FrameError::Oversize { .. })
        ));
        assert!(matches!(
            decode::<Request>(&vec![0; MAX_FRAME + 1]),
            Err(FrameError::Oversize { .. })
        ));
    }

    #[test]
    fn a_full_payload_chunk_fits_in_a_frame() {
        let frame = encode(&Request::Stdin(vec![0xff; MAX_PAYLOAD_CHUNK])).unwrap();
        assert!(frame.len() <= MAX_FRAME);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<Request>(&bytes);
            let _ = decode::<crate::Event>(&bytes);
        }
    }
}
