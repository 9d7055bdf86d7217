//! Where the daemon's socket is.
//!
//! Precedence, applied by callers: a command-line flag, then `VIVARIUM_SOCKET`, then (for the
//! daemon only) its config file, then the default: the system socket for root, the per-user
//! runtime directory otherwise (as systemd user services lay it out).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Environment variable naming the daemon socket.
pub const SOCKET_ENV: &str = "VIVARIUM_SOCKET";

/// The system daemon's socket (euid 0).
const SYSTEM_SOCKET: &str = "/run/vivarium/vivariumd.sock";

/// The socket file name inside a per-user runtime directory.
const USER_SOCKET: &str = "vivarium/vivariumd.sock";

/// The effective uid of this process, read without `unsafe`: `/proc/self` is owned by the
/// process's effective uid. Without `/proc`, returns `u32::MAX`, which counts as "not root".
pub fn effective_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX)
}

/// The default socket for this process: `/run/vivarium/vivariumd.sock` as root, else
/// `$XDG_RUNTIME_DIR/vivarium/vivariumd.sock` (fallback `/run/user/<uid>/...`).
pub fn default_socket_path() -> PathBuf {
    socket_path_from(
        None,
        None,
        effective_uid(),
        std::env::var_os("XDG_RUNTIME_DIR"),
    )
}

/// `flag`, else `$VIVARIUM_SOCKET`, else [`default_socket_path`].
pub fn resolve_socket_path(flag: Option<PathBuf>) -> PathBuf {
    socket_path_from(
        flag,
        std::env::var_os(SOCKET_ENV),
        effective_uid(),
        std::env::var_os("XDG_RUNTIME_DIR"),
    )
}

/// The pure form of [`resolve_socket_path`], with the environment passed in.
///
/// Empty values count as unset; a relative `XDG_RUNTIME_DIR` is ignored, as the XDG base
/// directory spec requires it to be absolute.
pub fn socket_path_from(
    flag: Option<PathBuf>,
    env_socket: Option<OsString>,
    euid: u32,
    xdg_runtime_dir: Option<OsString>,
) -> PathBuf {
    if let Some(flag) = flag.filter(|p| !p.as_os_str().is_empty()) {
        return flag;
    }
    if let Some(env) = env_socket.filter(|v| !v.is_empty()) {
        return PathBuf::from(env);
    }
    if euid == 0 {
        return PathBuf::from(SYSTEM_SOCKET);
    }
    match xdg_runtime_dir.filter(|d| Path::new(d).is_absolute()) {
        Some(dir) => Path::new(&dir).join(USER_SOCKET),
        None => Path::new("/run/user")
            .join(euid.to_string())
            .join(USER_SOCKET),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn flag_beats_env_beats_default() {
        assert_eq!(
            socket_path_from(Some("/f.sock".into()), os("/e.sock"), 0, os("/x")),
            PathBuf::from("/f.sock")
        );
        assert_eq!(
            socket_path_from(None, os("/e.sock"), 1000, os("/x")),
            PathBuf::from("/e.sock")
        );
    }

    #[test]
    fn root_gets_the_system_socket() {
        assert_eq!(
            socket_path_from(None, None, 0, os("/run/user/0")),
            PathBuf::from("/run/vivarium/vivariumd.sock")
        );
    }

    #[test]
    fn users_get_their_runtime_dir() {
        assert_eq!(
            socket_path_from(None, None, 1000, os("/run/user/1000")),
            PathBuf::from("/run/user/1000/vivarium/vivariumd.sock")
        );
        assert_eq!(
            socket_path_from(None, None, 1000, None),
            PathBuf::from("/run/user/1000/vivarium/vivariumd.sock")
        );
    }

    #[test]
    fn empty_and_relative_values_are_ignored() {
        assert_eq!(
            socket_path_from(Some(PathBuf::new()), os(""), 1000, os("relative/dir")),
            PathBuf::from("/run/user/1000/vivarium/vivariumd.sock")
        );
        assert_eq!(
            socket_path_from(None, os(""), 0, None),
            PathBuf::from("/run/vivarium/vivariumd.sock")
        );
    }

    #[test]
    fn effective_uid_matches_proc() {
        // Whatever we run as, /proc/self/status's Uid line has the euid second.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        let euid: u32 = uid_line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert_eq!(effective_uid(), euid);
    }
}
