//! The cgroup layer's errors: context in fields, the cause in `#[source]`, never in the message.

use std::path::PathBuf;

use super::Controller;

/// A name that is not a known [`Version`](super::Version) or [`Controller`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown cgroup name {0:?}")]
pub struct UnknownName(pub String);

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {value:?} to {}", path.display())]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("missing or malformed {key:?} in {}", path.display())]
    Parse { path: PathBuf, key: &'static str },
    #[error("cannot create cgroup {}", path.display())]
    Mkdir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot remove cgroup {}", path.display())]
    Rmdir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open cgroup directory {}", path.display())]
    OpenDir {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot move the calling task in through {}", path.display())]
    Attach {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot kill pid {pid} listed in {}", path.display())]
    Kill {
        path: PathBuf,
        pid: i32,
        #[source]
        source: nix::Error,
    },
    #[error("{} still lists processes after {attempts} attempts", path.display())]
    StillPopulated { path: PathBuf, attempts: u32 },
    #[error("cgroup controller {controller} is not available")]
    MissingController { controller: Controller },
    #[error("no usable cgroup hierarchy: v1 lacks {v1_missing:?}, v2 lacks {v2_missing:?}")]
    NoUsableHierarchy {
        v1_missing: Vec<Controller>,
        v2_missing: Vec<Controller>,
    },
    #[error("the process runs in the cgroup2 root, which cannot be delegated to jobs")]
    RootCgroup,
    #[error("invalid cgroup name {name:?}")]
    InvalidName { name: String },
    #[error("invalid limits: {reason}")]
    InvalidLimits { reason: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_keep_the_cause_out_of_the_message() {
        let err = CgroupError::Write {
            path: "/sys/fs/cgroup/x/pids.max".into(),
            value: "5".into(),
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        assert_eq!(
            err.to_string(),
            "cannot write \"5\" to /sys/fs/cgroup/x/pids.max"
        );
        assert!(std::error::Error::source(&err).is_some());
    }
}
