//! rlimit layer: per-process limits that back up the cgroup limits.

use crate::plan::RlimitPlan;
use crate::{SetupError, Step};
use nix::sys::resource::{setrlimit, Resource};

/// No core dumps; a cap on open files and on the size of any file written; the job's
/// share of the per-user budgets charged to the creator of its user namespace (queued
/// signals, POSIX message queue bytes, locked memory).
pub fn apply(plan: &RlimitPlan) -> Result<(), SetupError> {
    for (step, res, value) in [
        (Step::RlimitCore, Resource::RLIMIT_CORE, 0),
        (Step::RlimitNofile, Resource::RLIMIT_NOFILE, plan.nofile),
        (Step::RlimitFsize, Resource::RLIMIT_FSIZE, plan.fsize),
        (
            Step::RlimitSigpending,
            Resource::RLIMIT_SIGPENDING,
            plan.sigpending,
        ),
        (
            Step::RlimitMsgqueue,
            Resource::RLIMIT_MSGQUEUE,
            plan.msgqueue,
        ),
        (Step::RlimitMemlock, Resource::RLIMIT_MEMLOCK, plan.memlock),
    ] {
        setrlimit(res, value, value).map_err(|e| SetupError::errno(step, e))?;
    }
    if let Some(f) = plan.fallback {
        // RLIMIT_CPU: SIGXCPU at the soft limit (reported as the CPU limit), SIGKILL a
        // second later for a process that ignores it.
        for (step, res, soft, hard) in [
            (
                Step::RlimitAs,
                Resource::RLIMIT_AS,
                f.address_space,
                f.address_space,
            ),
            (
                Step::RlimitCpu,
                Resource::RLIMIT_CPU,
                f.cpu_seconds,
                f.cpu_seconds + 1,
            ),
            (Step::RlimitNproc, Resource::RLIMIT_NPROC, f.nproc, f.nproc),
        ] {
            setrlimit(res, soft, hard).map_err(|e| SetupError::errno(step, e))?;
        }
    }
    Ok(())
}
