//! The payload's confinement: ONE sequence of steps, run by a cold job's payload before its
//! execve (`init::payload`) and by a zygote-forked job's payload before it returns to the
//! interpreter (`zygote::payload`), so that a reorder or a new layer cannot reach one path
//! and miss the other. What differs between the two is data ([`Confine`]), not steps.
//!
//! | step | what | why here |
//! | --- | --- | --- |
//! | P1 | `setsid`; signals back to their defaults and none blocked (cold only) | the job's own session (no terminal, no job-control signals from the daemon's); a cold payload's dispositions are the daemon's inherited ones until reset, a forked one's are the interpreter's own (its SIGINT handler included), kept |
//! | P2 | stdio onto 0-2, extra fds onto 3.., every other fd closed: at the execve (close-on-exec, cold) or now (forked: no execve will) | nothing of init's, the spawner's or the zygote's reaches the job's code |
//! | P3 | `chdir("/work")` | the job's working directory, on its tmpfs |
//! | P4 | every capability dropped, securebits locked, uid and gid 1000 (not for a zygote's own start, which keeps its capabilities to make each job's namespaces); a forked payload is made dumpable again, as a cold payload is after its execve | what the job runs as |
//! | P5 | `no_new_privs`, Landlock, seccomp last | seccomp refuses what setup used (mount, landlock_*, seccomp itself); its last allowed setup call is the report's write (and, cold, the execve) |
//! | P6 | report the Landlock status to init | only now that every layer is in place: a payload that dies earlier is a setup failure, never "running" |

use crate::plan::LandlockPlan;
use crate::report::{encode, PayloadMsg};
use crate::{landlock, sys, SetupError, Step};
use seccompiler::BpfProgram;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use vivarium_proto::LandlockStatus;

/// What happens to the fds the payload holds besides stdio, the extras and the report
/// pipe (step P2).
pub(crate) enum OtherFds {
    /// Close-on-exec from the first number past the extras: closed by the execve (a cold
    /// payload, which runs on init's memory and must not close what init owns).
    CloseOnExec,
    /// Closed now, all but 0-2 and the report pipe (a forked payload: no execve follows).
    CloseNow,
    /// Left as they are (a test-only plan without `Layers::close_fds`).
    Keep,
}

/// What the job runs as (step P4).
pub(crate) enum Privileges {
    /// Every capability dropped and the ids set; `rootless`: the only id mapped is 1000
    /// and setgroups is denied in the namespace. `dumpable_again`: a forked payload,
    /// made non-dumpable by leaving uid 0 (a cold one becomes dumpable at its execve).
    Drop {
        rootless: bool,
        dumpable_again: bool,
    },
    /// Kept: a zygote's own start, or a test-only plan without `Layers::drop_caps`.
    Keep,
}

/// The data of one payload's confinement.
pub(crate) struct Confine<'a> {
    pub stdio: [BorrowedFd<'a>; 3],
    /// Placed on fds 3, 4, ... (a zygote's control socket and library).
    pub extra: &'a [OwnedFd],
    /// Reset every signal to its default and clear the mask (step P1).
    pub reset_signals: bool,
    pub other_fds: OtherFds,
    pub privileges: Privileges,
    /// The Landlock plan and the kernel's ABI; `None`: not applied (a zygote's own start,
    /// or a test-only plan without `Layers::landlock`), reported as not enforced.
    pub landlock: Option<(&'a LandlockPlan, u32)>,
    /// The seccomp filters, in installation order (empty only in a test-only plan).
    pub filters: &'a [BpfProgram],
    /// The pipe to init the report goes to (step P6).
    pub report: &'a OwnedFd,
}

/// Steps P1 to P6 (see the module's table). On success every layer is in place and
/// reported; the caller then execs (cold) or returns to the interpreter (forked).
pub(crate) fn confine(c: Confine<'_>) -> Result<(), SetupError> {
    // P1
    nix::unistd::setsid().map_err(|e| SetupError::errno(Step::Setsid, e))?;
    if c.reset_signals {
        sys::reset_signals().map_err(|e| SetupError::io(Step::Signals, "/".as_ref(), &e))?;
    }
    // P2
    for (target, fd) in c.stdio.iter().enumerate() {
        sys::dup_onto(fd.as_fd(), target as i32)
            .map_err(|e| SetupError::io(Step::Dup2, "stdio".as_ref(), &e))?;
    }
    for (i, fd) in c.extra.iter().enumerate() {
        sys::dup_onto(fd.as_fd(), 3 + i as i32)
            .map_err(|e| SetupError::io(Step::Dup2, "extra".as_ref(), &e))?;
    }
    match c.other_fds {
        OtherFds::CloseOnExec => sys::cloexec_from(3 + c.extra.len() as u32)
            .map_err(|e| SetupError::io(Step::CloseRange, "/".as_ref(), &e))?,
        OtherFds::CloseNow => {
            // SAFETY: the caller's contract for `CloseNow` (a forked payload): it goes on
            // with 0-2 and the report pipe alone, and forgets, never closes, what it
            // owned of the others (`zygote::payload`).
            #[allow(unsafe_code)]
            let closed = unsafe { sys::close_all_except(&[0, 1, 2, c.report.as_raw_fd() as u32]) };
            closed.map_err(|e| SetupError::io(Step::CloseRange, "/".as_ref(), &e))?;
        }
        OtherFds::Keep => {}
    }
    // P3
    nix::unistd::chdir("/work").map_err(|e| SetupError::errno(Step::Chdir, e))?;
    // P4
    if let Privileges::Drop {
        rootless,
        dumpable_again,
    } = c.privileges
    {
        crate::init::drop_privileges(rootless)?;
        if dumpable_again {
            // Its own children may read its /proc entries, as a cold payload's may after
            // its execve. Init stays non-dumpable, and its host uid is not the job's.
            sys::set_dumpable(true)
                .map_err(|e| SetupError::io(Step::Dumpable, "/".as_ref(), &e))?;
        }
    }
    // P5
    sys::set_no_new_privs().map_err(|e| SetupError::io(Step::NoNewPrivs, "/".as_ref(), &e))?;
    let status = match c.landlock {
        Some((plan, kernel_abi)) => landlock::apply(plan, kernel_abi)?,
        None => LandlockStatus::NotEnforced,
    };
    // (Encoded before seccomp: nothing after the filters but the write, and the execve.)
    let report = encode(&PayloadMsg::Landlock(status));
    for filter in c.filters {
        seccompiler::apply_filter(filter).map_err(|e| SetupError::Other {
            step: Step::Seccomp,
            detail: e.to_string(),
        })?;
    }
    // P6 (write is on the allowlist).
    nix::unistd::write(c.report, &report).map_err(|e| SetupError::errno(Step::Report, e))?;
    Ok(())
}
