//! systemd integration: adopt a socket-activated listener (`sd_listen_fds(3)`) and tell
//! the service manager how the daemon is doing (`sd_notify(3)`).
//!
//! Both are no-ops outside systemd: with no `LISTEN_FDS` the daemon binds its own path,
//! and with no `NOTIFY_SOCKET` notifications go nowhere.

use nix::sys::socket::{getsockname, getsockopt, sockopt, SockType, UnixAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

pub use sd_notify::NotifyState;

#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    #[error("invalid LISTEN_FDS/LISTEN_PID from the service manager")]
    Env(#[source] std::io::Error),
    #[error("the service manager passed {count} sockets; vivariumd listens on exactly one")]
    Count { count: usize },
    #[error("passed socket (fd {fd}) is unusable")]
    Fd {
        fd: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("passed socket (fd {fd}) is not {wanted}")]
    Kind { fd: i32, wanted: &'static str },
}

/// The socket passed by the service manager, if this process was socket-activated.
/// Unsets `LISTEN_FDS`, `LISTEN_PID` and `LISTEN_FDNAMES` so that no child believes it
/// was activated too. Call it while the process is single-threaded (before the spawner
/// starts and before the runtime exists); the descriptor is close-on-exec afterwards,
/// so the spawner does not inherit it.
pub fn take_listen_fd() -> Result<Option<OwnedFd>, ActivationError> {
    let fds: Vec<i32> = sd_notify::listen_fds()
        .map_err(ActivationError::Env)?
        .collect();
    for var in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    match fds.as_slice() {
        [] => Ok(None),
        // SAFETY: called once, at startup, before anything in the daemon could have
        // wrapped the descriptor systemd passed (and the variables naming it are gone).
        #[allow(unsafe_code)]
        [fd] => unsafe { vivarium_sandbox::sys::adopt_inherited_fd(*fd) }
            .map(Some)
            .map_err(|source| ActivationError::Fd { fd: *fd, source }),
        _ => Err(ActivationError::Count { count: fds.len() }),
    }
}

/// Check that `fd` is a listening `AF_UNIX` `SOCK_SEQPACKET` socket, make it
/// non-blocking (systemd passes it blocking, and a blocking accept would park a tokio
/// worker), and wrap it. Returns the listener and the path it is bound to. Must run
/// inside the tokio runtime.
pub fn listener_from_fd(
    fd: OwnedFd,
) -> Result<(tokio_seqpacket::UnixSeqpacketListener, Option<PathBuf>), ActivationError> {
    let raw = fd.as_raw_fd();
    let io = |e: nix::Error| ActivationError::Fd {
        fd: raw,
        source: e.into(),
    };
    let addr = getsockname::<UnixAddr>(raw).map_err(|_| ActivationError::Kind {
        fd: raw,
        wanted: "an AF_UNIX socket",
    })?;
    if getsockopt(&fd, sockopt::SockType).map_err(io)? != SockType::SeqPacket {
        return Err(ActivationError::Kind {
            fd: raw,
            wanted: "SOCK_SEQPACKET (use ListenSequentialPacket=)",
        });
    }
    if !getsockopt(&fd, sockopt::AcceptConn).map_err(io)? {
        return Err(ActivationError::Kind {
            fd: raw,
            wanted: "listening (Accept=no)",
        });
    }
    let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).map_err(io)?;
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(io)?;
    let listener = tokio_seqpacket::UnixSeqpacketListener::try_from(fd)
        .map_err(|source| ActivationError::Fd { fd: raw, source })?;
    Ok((listener, addr.path().map(PathBuf::from)))
}

/// Send `states` to the service manager, if there is one. Failure is logged, not
/// fatal: the daemon works the same without a manager listening.
pub fn notify(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{bind, listen, socket, AddressFamily, Backlog, SockFlag};

    fn unix_socket(kind: SockType, path: &std::path::Path, listening: bool) -> OwnedFd {
        let fd = socket(AddressFamily::Unix, kind, SockFlag::SOCK_CLOEXEC, None).unwrap();
        bind(fd.as_raw_fd(), &UnixAddr::new(path).unwrap()).unwrap();
        if listening {
            listen(&fd, Backlog::new(8).unwrap()).unwrap();
        }
        fd
    }

    #[tokio::test]
    async fn a_listening_seqpacket_socket_is_adopted_non_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let fd = unix_socket(SockType::SeqPacket, &path, true);
        let (listener, bound) = listener_from_fd(fd).unwrap();
        assert_eq!(bound.as_deref(), Some(path.as_path()));
        let flags = nix::fcntl::fcntl(&listener, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        assert!(nix::fcntl::OFlag::from_bits_retain(flags).contains(nix::fcntl::OFlag::O_NONBLOCK));
        let client = tokio_seqpacket::UnixSeqpacket::connect(&path)
            .await
            .unwrap();
        let mut listener = listener;
        let server = listener.accept().await.unwrap();
        client.send(b"hi").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(server.recv(&mut buf).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn wrong_kinds_of_socket_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let stream = unix_socket(SockType::Stream, &dir.path().join("a"), true);
        let err = listener_from_fd(stream).unwrap_err();
        assert!(err.to_string().contains("SOCK_SEQPACKET"), "{err}");
        let idle = unix_socket(SockType::SeqPacket, &dir.path().join("b"), false);
        let err = listener_from_fd(idle).unwrap_err();
        assert!(err.to_string().contains("listening"), "{err}");
        let inet = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        let err = listener_from_fd(inet).unwrap_err();
        assert!(err.to_string().contains("AF_UNIX"), "{err}");
    }
}
