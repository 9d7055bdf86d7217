//! vivarium-sandbox: what a Vivarium job's processes run, and the messages they exchange.
//!
//! The job sandbox: a pure plan ([`plan`], computed from a profile by `vivariumd`) executed
//! in the job's processes ([`init`], or a zygote's [`zygote`]), one module per isolation
//! layer ([`mount`], [`landlock`], [`caps`], [`rlimit`], [`timens`], [`cgroup`]; seccomp
//! filters are compiled by `vivariumd` and installed by [`init`]), the raw syscalls
//! ([`sys`]), the messages between the server, the spawner and a job's processes
//! ([`ipc`], [`report`]), and the names of the setup's steps in a failure's report
//! ([`step`]). What the setup applies is the plan's data alone: the attack suite's
//! test-only weakening is a transform of the plan in `vivariumd`, which this crate never
//! sees.
//!
//! Used by `vivariumd` (the single-threaded spawner and the server that talks to it) and
//! by the zygote library (`vivarium-zygote`), so it has no tokio, no tracing and no
//! dependency on `vivariumd`. See `docs/ARCHITECTURE.md`.
#![deny(unsafe_code)]

pub mod caps;
pub mod cgroup;
mod confine;
pub mod init;
pub mod ipc;
pub mod landlock;
pub mod mount;
pub mod plan;
pub mod report;
pub mod rlimit;
pub mod step;
#[allow(unsafe_code)]
pub mod sys;
pub mod timens;
pub mod zygote;

use std::path::Path;
pub use step::Step;

/// A sandbox setup step that failed, reported from the child to the spawner (as a
/// [`report::Failure`], named by [`Step::as_str`]).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{step} {path}: {source}")]
    Sys {
        step: Step,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{step}: {detail}")]
    Other { step: Step, detail: String },
}

impl SetupError {
    pub fn io(step: Step, path: &Path, e: &std::io::Error) -> Self {
        SetupError::Sys {
            step,
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    pub fn nix(step: Step, path: &Path, e: nix::Error) -> Self {
        SetupError::Sys {
            step,
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e as i32),
        }
    }

    pub fn errno(step: Step, e: nix::Error) -> Self {
        Self::nix(step, Path::new(""), e)
    }

    pub fn step(&self) -> Step {
        match self {
            SetupError::Sys { step, .. } | SetupError::Other { step, .. } => *step,
        }
    }
}
