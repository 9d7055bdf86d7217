//! Turn the evidence about an ended job into its [`Outcome`]. Pure, so the precedence
//! is unit-tested.
//!
//! Precedence when several reasons apply (first wins):
//! 1. `SandboxError`: a setup step failed, the code never ran (a kill during setup
//!    is reported as that kill, not as a sandbox error).
//! 2. What the daemon itself did, which is certain: `Cancelled`, `Timeout`, `CpuLimit`,
//!    `OutputLimit` (a kill for a shutdown counts as `Cancelled`).
//! 3. Kernel evidence: `Oom` (the cgroup's oom_kill counter rose and the payload died
//!    of SIGKILL), `Seccomp` (the payload died of SIGSYS), `Pids` (the pids limit
//!    refused a fork and the payload then failed).
//! 4. `Signal` (any other death by signal), `Error` (non-zero exit), `Ok`.

use vivarium_proto::{ExitStatus, Isolation, LimitKind, Outcome, Reason, Usage};
use vivarium_sandbox::ipc::{JobReport, KillCause};
use vivarium_sandbox::report::WaitStatus;

/// What the server itself observed about the output streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamFacts {
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

pub fn decide(report: &JobReport, streams: StreamFacts) -> (Reason, ExitStatus, Vec<LimitKind>) {
    let exit = match report.exit {
        Some(WaitStatus::Code(c)) => ExitStatus::Code(c),
        Some(WaitStatus::Signal(s)) => ExitStatus::Signal(s),
        // Killed from outside before init could report: the payload died with the
        // pid namespace, of SIGKILL.
        None if report.failure.is_none() && report.landlock.is_some() => {
            ExitStatus::Signal(libc::SIGKILL)
        }
        None => ExitStatus::NotStarted,
    };
    let mut hit = Vec::new();
    match report.killed {
        Some(KillCause::Timeout) => hit.push(LimitKind::Wall),
        Some(KillCause::CpuLimit) => hit.push(LimitKind::Cpu),
        _ => {}
    }
    // SIGXCPU only comes from RLIMIT_CPU, the per-process stand-in for the cgroup CPU
    // limit when the daemon has no cgroup.
    let xcpu = exit == ExitStatus::Signal(libc::SIGXCPU);
    if xcpu && report.killed.is_none() {
        hit.push(LimitKind::Cpu);
    }
    if report.oom_kills > 0 || report.memory_limit_hits > 0 {
        hit.push(LimitKind::Memory);
    }
    if report.pids_limit_hits > 0 {
        hit.push(LimitKind::Pids);
    }
    if streams.stdout_truncated {
        hit.push(LimitKind::Stdout);
    }
    if streams.stderr_truncated {
        hit.push(LimitKind::Stderr);
    }
    if report.disk_full {
        hit.push(LimitKind::Disk);
    }
    let failed = !matches!(exit, ExitStatus::Code(0));
    let reason = if report.failure.is_some() {
        Reason::SandboxError
    } else if let Some(cause) = report.killed {
        match cause {
            KillCause::Cancelled | KillCause::Shutdown => Reason::Cancelled,
            KillCause::Timeout => Reason::Timeout,
            KillCause::CpuLimit => Reason::CpuLimit,
            KillCause::OutputLimit => Reason::OutputLimit,
        }
    } else if exit == ExitStatus::NotStarted {
        Reason::SandboxError
    } else if report.oom_kills > 0 && exit == ExitStatus::Signal(libc::SIGKILL) {
        Reason::Oom
    } else if xcpu {
        Reason::CpuLimit
    } else if exit == ExitStatus::Signal(libc::SIGSYS) {
        Reason::Seccomp
    } else if report.pids_limit_hits > 0 && failed {
        Reason::Pids
    } else {
        match exit {
            ExitStatus::Signal(_) => Reason::Signal,
            ExitStatus::Code(0) => Reason::Ok,
            _ => Reason::Error,
        }
    };
    (reason, exit, hit)
}

/// The outcome of a job that ended before its sandbox was started (cancelled while
/// queued or while its code was still arriving).
pub fn not_started(job_id: u64, profile: &str, reason: Reason, detail: &str) -> Outcome {
    Outcome {
        job_id,
        profile: profile.to_owned(),
        reason,
        exit: ExitStatus::NotStarted,
        limits_hit: Vec::new(),
        usage: Usage::default(),
        stdout_truncated: false,
        stderr_truncated: false,
        isolation: Isolation::default(),
        detail: detail.to_owned(),
    }
}

pub fn outcome(
    job_id: u64,
    profile: &str,
    report: &JobReport,
    streams: StreamFacts,
    isolation: Isolation,
) -> Outcome {
    let (reason, exit, limits_hit) = decide(report, streams);
    let detail = match (&report.failure, reason) {
        (Some(f), _) => format!("sandbox setup failed at {}: {}", f.step, f.detail),
        (None, Reason::Oom) => "the kernel OOM-killed a process at the memory limit".into(),
        (None, Reason::Pids) => "the pids limit refused a fork".into(),
        (None, Reason::Seccomp) => "killed by seccomp (SIGSYS)".into(),
        _ => String::new(),
    };
    Outcome {
        job_id,
        profile: profile.to_owned(),
        reason,
        exit,
        limits_hit,
        usage: Usage {
            wall_ms: report.wall_ms,
            cpu_ms: report.cpu_ms,
            peak_memory_bytes: report.peak_memory_bytes,
            stdout_bytes: streams.stdout_bytes,
            stderr_bytes: streams.stderr_bytes,
        },
        stdout_truncated: streams.stdout_truncated,
        stderr_truncated: streams.stderr_truncated,
        isolation,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::LandlockStatus;
    use vivarium_sandbox::report::Failure;

    fn ran(exit: WaitStatus) -> JobReport {
        JobReport {
            exit: Some(exit),
            landlock: Some(LandlockStatus::FullyEnforced),
            ..Default::default()
        }
    }

    fn reason(r: &JobReport) -> Reason {
        decide(r, StreamFacts::default()).0
    }

    #[test]
    fn plain_exits() {
        assert_eq!(reason(&ran(WaitStatus::Code(0))), Reason::Ok);
        assert_eq!(reason(&ran(WaitStatus::Code(3))), Reason::Error);
        assert_eq!(reason(&ran(WaitStatus::Signal(15))), Reason::Signal);
        assert_eq!(reason(&ran(WaitStatus::Signal(31))), Reason::Seccomp);
    }

    #[test]
    fn oom_needs_the_counter_not_exit_137() {
        let mut r = ran(WaitStatus::Signal(9));
        assert_eq!(reason(&r), Reason::Signal);
        r.oom_kills = 1;
        assert_eq!(
            decide(&r, StreamFacts::default()),
            (Reason::Oom, ExitStatus::Signal(9), vec![LimitKind::Memory])
        );
        // exit(137) is a plain error even with the counter up.
        let mut r = ran(WaitStatus::Code(137));
        r.oom_kills = 1;
        assert_eq!(reason(&r), Reason::Error);
    }

    #[test]
    fn pids_counts_only_when_the_job_failed() {
        let mut r = ran(WaitStatus::Code(1));
        r.pids_limit_hits = 3;
        assert_eq!(reason(&r), Reason::Pids);
        let mut r = ran(WaitStatus::Code(0));
        r.pids_limit_hits = 3;
        assert_eq!(
            decide(&r, StreamFacts::default()),
            (Reason::Ok, ExitStatus::Code(0), vec![LimitKind::Pids])
        );
    }

    #[test]
    fn daemon_kills_win_over_kernel_evidence() {
        let mut r = ran(WaitStatus::Signal(9));
        r.oom_kills = 1;
        r.killed = Some(KillCause::Timeout);
        assert_eq!(
            decide(&r, StreamFacts::default()),
            (
                Reason::Timeout,
                ExitStatus::Signal(9),
                vec![LimitKind::Wall, LimitKind::Memory]
            )
        );
        r.killed = Some(KillCause::Cancelled);
        assert_eq!(reason(&r), Reason::Cancelled);
    }

    #[test]
    fn killed_before_init_reported_is_sigkill() {
        let r = JobReport {
            landlock: Some(LandlockStatus::FullyEnforced),
            killed: Some(KillCause::CpuLimit),
            ..Default::default()
        };
        assert_eq!(
            decide(&r, StreamFacts::default()),
            (
                Reason::CpuLimit,
                ExitStatus::Signal(9),
                vec![LimitKind::Cpu]
            )
        );
    }

    #[test]
    fn a_cancel_during_setup_is_a_cancel() {
        let r = JobReport {
            killed: Some(KillCause::Cancelled),
            ..Default::default()
        };
        assert_eq!(
            decide(&r, StreamFacts::default()),
            (Reason::Cancelled, ExitStatus::NotStarted, vec![])
        );
    }

    #[test]
    fn sigxcpu_from_the_rlimit_fallback_is_the_cpu_limit() {
        assert_eq!(
            decide(
                &ran(WaitStatus::Signal(libc::SIGXCPU)),
                StreamFacts::default()
            ),
            (
                Reason::CpuLimit,
                ExitStatus::Signal(libc::SIGXCPU),
                vec![LimitKind::Cpu]
            )
        );
    }

    #[test]
    fn setup_failure_wins() {
        let r = JobReport {
            failure: Some(Failure {
                step: "pivot_root".into(),
                detail: "EPERM".into(),
                errno: 1,
            }),
            killed: Some(KillCause::Timeout),
            ..Default::default()
        };
        assert_eq!(reason(&r), Reason::SandboxError);
    }

    #[test]
    fn truncation_and_disk_are_limits_hit() {
        let mut r = ran(WaitStatus::Code(0));
        r.disk_full = true;
        let streams = StreamFacts {
            stdout_truncated: true,
            ..Default::default()
        };
        assert_eq!(
            decide(&r, streams),
            (
                Reason::Ok,
                ExitStatus::Code(0),
                vec![LimitKind::Stdout, LimitKind::Disk]
            )
        );
    }
}
