//! The job sandbox: a pure plan ([`plan`]) executed in the job's processes ([`init`]),
//! one module per isolation layer.

pub mod caps;
pub mod init;
pub mod landlock;
pub mod mount;
pub mod report;
pub mod rlimit;
pub mod timens;
pub mod weaken;
pub mod zygote;

use std::path::Path;

/// A sandbox setup step that failed, reported from the child to the spawner.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{step} {path}: {source}")]
    Sys {
        step: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{step}: {detail}")]
    Other { step: &'static str, detail: String },
}

impl SetupError {
    pub fn io(step: &'static str, path: &Path, e: &std::io::Error) -> Self {
        SetupError::Sys {
            step,
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    pub fn nix(step: &'static str, path: &Path, e: nix::Error) -> Self {
        SetupError::Sys {
            step,
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e as i32),
        }
    }

    pub fn errno(step: &'static str, e: nix::Error) -> Self {
        Self::nix(step, Path::new(""), e)
    }

    pub fn step(&self) -> &'static str {
        match self {
            SetupError::Sys { step, .. } | SetupError::Other { step, .. } => step,
        }
    }
}
