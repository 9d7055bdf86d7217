//! rlimit layer: per-process limits that back up the cgroup limits.

use super::plan::RlimitPlan;
use super::SetupError;
use nix::sys::resource::{setrlimit, Resource};

/// No core dumps; a cap on open files and on the size of any file written.
pub fn apply(plan: &RlimitPlan) -> Result<(), SetupError> {
    for (step, res, value) in [
        ("rlimit-core", Resource::RLIMIT_CORE, 0),
        ("rlimit-nofile", Resource::RLIMIT_NOFILE, plan.nofile),
        ("rlimit-fsize", Resource::RLIMIT_FSIZE, plan.fsize),
    ] {
        setrlimit(res, value, value).map_err(|e| SetupError::errno(step, e))?;
    }
    Ok(())
}
