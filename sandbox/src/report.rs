//! Messages from a job's processes back to the spawner: length-prefixed bincode on
//! pipes, each message written with one `write` (below PIPE_BUF, so atomic).

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use vivarium_proto::LandlockStatus;

/// Payload -> init, on the close-on-exec pipe: EOF after `Landlock` means execve worked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PayloadMsg {
    Landlock(LandlockStatus),
    Failed(Failure),
    /// A zygote job's payload has unshared its user namespace: init writes its maps.
    UserNs {
        pid: i32,
    },
}

/// Init -> spawner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum InitMsg {
    /// The payload exec'd the interpreter under every layer.
    Running { landlock: LandlockStatus },
    /// A setup step failed; the code never ran.
    Failed(Failure),
    /// The payload ended. `disk_full`: a job tmpfs was out of space or inodes.
    Exited { status: WaitStatus, disk_full: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub step: String,
    pub detail: String,
    pub errno: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitStatus {
    Code(i32),
    Signal(i32),
}

impl From<&crate::SetupError> for Failure {
    fn from(e: &crate::SetupError) -> Self {
        let errno = match e {
            crate::SetupError::Sys { source, .. } => source.raw_os_error().unwrap_or(0),
            crate::SetupError::Other { .. } => 0,
        };
        // Keep the message well under PIPE_BUF and the 4 KiB frame limit: a long path
        // in the detail must not make the whole report undecodable.
        let mut detail = e.to_string();
        if detail.len() > 1024 {
            let mut cut = 1024;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
            detail.push_str("...");
        }
        Failure {
            step: e.step().as_str().to_owned(),
            detail,
            errno,
        }
    }
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<4096>()
}

/// Encode one message with a 2-byte length prefix.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let body = bincode::serde::encode_to_vec(msg, config()).unwrap_or_default();
    let mut out = (body.len() as u16).to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Split complete messages off the front of `buf`.
pub fn decode_all<T: DeserializeOwned>(buf: &mut Vec<u8>) -> Vec<T> {
    let mut out = Vec::new();
    while buf.len() >= 2 {
        let len = u16::from_le_bytes([buf[0], buf[1]]) as usize;
        if buf.len() < 2 + len {
            break;
        }
        if let Ok((msg, _)) = bincode::serde::decode_from_slice(&buf[2..2 + len], config()) {
            out.push(msg);
        }
        buf.drain(..2 + len);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_failure_still_fits_in_one_message() {
        let long = std::path::PathBuf::from(format!("/{}", "é".repeat(4000)));
        let err = crate::SetupError::io(
            crate::Step::Mkdir,
            &long,
            &std::io::Error::from_raw_os_error(libc::ENAMETOOLONG),
        );
        let msg = InitMsg::Failed(Failure::from(&err));
        let mut bytes = encode(&msg);
        assert!(bytes.len() < 2048, "{}", bytes.len());
        assert_eq!(decode_all::<InitMsg>(&mut bytes), vec![msg]);
    }

    #[test]
    fn messages_split_across_reads() {
        let a = InitMsg::Running {
            landlock: LandlockStatus::FullyEnforced,
        };
        let b = InitMsg::Exited {
            status: WaitStatus::Signal(9),
            disk_full: true,
        };
        let mut bytes = encode(&a);
        bytes.extend(encode(&b));
        let mut buf = bytes[..3].to_vec();
        assert!(decode_all::<InitMsg>(&mut buf).is_empty());
        buf.extend_from_slice(&bytes[3..]);
        assert_eq!(decode_all::<InitMsg>(&mut buf), vec![a, b]);
        assert!(buf.is_empty());
    }
}
