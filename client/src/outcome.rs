//! Turning an [`Outcome`] into an exit code and into words.

use std::fmt::Write as _;

use vivarium_proto::{ExitStatus, LandlockStatus, LimitKind, Outcome, Reason};

/// Wall-clock or CPU limit reached (as `timeout(1)` does).
pub const EXIT_TIMEOUT: i32 = 124;
/// The job ran out of memory.
pub const EXIT_OOM: i32 = 121;
/// The pids limit stopped the job.
pub const EXIT_PIDS: i32 = 122;
/// The job's output exceeded its cap.
pub const EXIT_OUTPUT_LIMIT: i32 = 123;
/// The sandbox could not be built, the daemon refused the job, or `viv` itself failed
/// (as `timeout(1)` and `docker run` use 125).
pub const EXIT_REFUSED: i32 = 125;
/// The session has ended (`viv exec`, `viv repl`): it expired before the cell, or ended
/// during it; its state is gone.
pub const EXIT_SESSION_ENDED: i32 = 120;
/// Cancelled (ctrl-c): 128 + SIGINT.
pub const EXIT_CANCELLED: i32 = 130;

/// SIGSYS, the signal a seccomp `KILL_PROCESS` action delivers.
const SIGSYS: i32 = 31;

/// The exit code `viv run` exits with for `outcome`: the script's own status when it exited,
/// `128 + N` when a signal killed it, and a distinct code per limit otherwise.
pub fn exit_code_for(outcome: &Outcome) -> i32 {
    match outcome.reason {
        Reason::Ok => 0,
        Reason::Error => match outcome.exit {
            ExitStatus::Code(code) if code != 0 => code,
            ExitStatus::Signal(sig) => 128 + sig,
            // "Error" with nothing to show for it must still read as a failure.
            ExitStatus::Code(_) | ExitStatus::NotStarted => 1,
        },
        Reason::Timeout | Reason::CpuLimit => EXIT_TIMEOUT,
        Reason::Oom => EXIT_OOM,
        Reason::Pids => EXIT_PIDS,
        Reason::OutputLimit => EXIT_OUTPUT_LIMIT,
        Reason::SandboxError => EXIT_REFUSED,
        Reason::Cancelled => EXIT_CANCELLED,
        Reason::Seccomp => 128 + SIGSYS,
        Reason::Signal => match outcome.exit {
            ExitStatus::Signal(sig) => 128 + sig,
            // A signal death the daemon could not attribute: report SIGKILL.
            _ => 128 + 9,
        },
    }
}

/// Whether `viv run` should say a word about this outcome on stderr: anything but a plain
/// exit (zero or not), or output that was cut short.
pub fn is_abnormal(outcome: &Outcome) -> bool {
    !matches!(outcome.reason, Reason::Ok | Reason::Error)
        || outcome.stdout_truncated
        || outcome.stderr_truncated
}

/// One line such as `job 42 ended: timeout after 2.0s (limit hit: wall)`.
pub fn summary_line(outcome: &Outcome) -> String {
    let usage = &outcome.usage;
    let mut line = format!("job {} ended: ", outcome.job_id);
    let mut detail_used = false;
    match outcome.reason {
        Reason::Ok => line.push_str("exited with status 0"),
        Reason::Error => line.push_str(&describe_exit(outcome.exit)),
        Reason::Timeout => {
            let _ = write!(line, "timeout after {}", format_ms(usage.wall_ms));
        }
        Reason::CpuLimit => {
            let _ = write!(line, "cpu limit after {} of cpu", format_ms(usage.cpu_ms));
        }
        Reason::Oom => {
            let _ = write!(
                line,
                "out of memory (peak {})",
                format_bytes(usage.peak_memory_bytes)
            );
        }
        Reason::Pids => line.push_str("process limit reached"),
        Reason::OutputLimit => line.push_str("output limit exceeded"),
        Reason::Signal => line.push_str(&describe_exit(outcome.exit)),
        Reason::Seccomp => line.push_str("killed by seccomp (SIGSYS: a forbidden syscall)"),
        Reason::Cancelled => line.push_str("cancelled"),
        Reason::SandboxError => {
            line.push_str("sandbox error");
            if !outcome.detail.is_empty() {
                let _ = write!(line, ": {}", outcome.detail);
                detail_used = true;
            }
        }
    }
    if !outcome.limits_hit.is_empty() {
        let hit: Vec<&str> = outcome.limits_hit.iter().map(|l| limit_name(*l)).collect();
        let _ = write!(line, " (limit hit: {})", hit.join(", "));
    }
    for (truncated, name, bytes) in [
        (outcome.stdout_truncated, "stdout", usage.stdout_bytes),
        (outcome.stderr_truncated, "stderr", usage.stderr_bytes),
    ] {
        if truncated {
            let _ = write!(line, "; {name} truncated at {}", format_bytes(bytes));
        }
    }
    if !detail_used && !outcome.detail.is_empty() {
        let _ = write!(line, "; {}", outcome.detail);
    }
    line
}

/// Everything in the outcome, one `key: value` per line, for `viv run -v`.
pub fn verbose_report(outcome: &Outcome) -> String {
    let u = &outcome.usage;
    let iso = &outcome.isolation;
    let none_if_empty = |v: &[String]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join(", ")
        }
    };
    let landlock = match iso.landlock {
        None => "not applied".to_owned(),
        Some(status) => format!(
            "abi {}, {}",
            iso.landlock_abi,
            match status {
                LandlockStatus::FullyEnforced => "fully enforced",
                LandlockStatus::PartiallyEnforced => "partially enforced",
                LandlockStatus::NotEnforced => "not enforced",
            }
        ),
    };
    let cgroup = match iso.cgroup {
        None => "none",
        Some(vivarium_proto::CgroupVersion::V1) => "v1",
        Some(vivarium_proto::CgroupVersion::V2) => "v2",
    };
    let limits: Vec<&str> = outcome.limits_hit.iter().map(|l| limit_name(*l)).collect();
    let mut out = String::new();
    let mut kv = |k: &str, v: String| {
        let _ = writeln!(out, "{k:>16}: {v}");
    };
    kv(
        "job",
        format!("{} (profile {})", outcome.job_id, outcome.profile),
    );
    kv("reason", format!("{:?}", outcome.reason));
    kv("exit", describe_exit(outcome.exit));
    kv("exit code", exit_code_for(outcome).to_string());
    kv(
        "limits hit",
        none_if_empty(&limits.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
    );
    kv("wall", format!("{} ms", u.wall_ms));
    kv("cpu", format!("{} ms", u.cpu_ms));
    kv("peak memory", format_bytes(u.peak_memory_bytes));
    kv(
        "stdout",
        format!(
            "{} bytes{}",
            u.stdout_bytes,
            if outcome.stdout_truncated {
                " (truncated)"
            } else {
                ""
            }
        ),
    );
    kv(
        "stderr",
        format!(
            "{} bytes{}",
            u.stderr_bytes,
            if outcome.stderr_truncated {
                " (truncated)"
            } else {
                ""
            }
        ),
    );
    kv("namespaces", none_if_empty(&iso.namespaces));
    kv("uid/gid", format!("{}/{}", iso.uid, iso.gid));
    kv("no_new_privs", iso.no_new_privs.to_string());
    kv("caps dropped", iso.capabilities_dropped.to_string());
    kv("landlock", landlock);
    kv("seccomp filters", iso.seccomp_filters.to_string());
    kv("cgroup", cgroup.to_owned());
    kv("not enforced", none_if_empty(&iso.not_enforced));
    if !outcome.detail.is_empty() {
        kv("detail", outcome.detail.clone());
    }
    out
}

fn describe_exit(exit: ExitStatus) -> String {
    match exit {
        ExitStatus::Code(code) => format!("exited with status {code}"),
        ExitStatus::Signal(sig) => match signal_name(sig) {
            Some(name) => format!("killed by signal {sig} ({name})"),
            None => format!("killed by signal {sig}"),
        },
        ExitStatus::NotStarted => "never started".to_owned(),
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        _ => return None,
    })
}

/// The stable lower-case name of a limit (`wall`, `cpu`, `memory`, ...).
pub fn limit_name(limit: LimitKind) -> &'static str {
    match limit {
        LimitKind::Wall => "wall",
        LimitKind::Cpu => "cpu",
        LimitKind::Memory => "memory",
        LimitKind::Pids => "pids",
        LimitKind::Stdout => "stdout",
        LimitKind::Stderr => "stderr",
        LimitKind::Disk => "disk",
    }
}

/// Milliseconds as seconds with one decimal: `2000` -> `2.0s`.
pub fn format_ms(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// Bytes in binary units, exact where possible: `67108864` -> `64M`, `1536` -> `1.5K`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (suffix, unit) in UNITS {
        if bytes >= unit {
            return if bytes % unit == 0 {
                format!("{}{suffix}", bytes / unit)
            } else {
                format!("{:.1}{suffix}", bytes as f64 / unit as f64)
            };
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::{Isolation, Usage};

    fn outcome(reason: Reason, exit: ExitStatus) -> Outcome {
        Outcome {
            job_id: 42,
            profile: "default".into(),
            reason,
            exit,
            limits_hit: vec![],
            usage: Usage::default(),
            stdout_truncated: false,
            stderr_truncated: false,
            isolation: Isolation::default(),
            detail: String::new(),
        }
    }

    #[test]
    fn exit_codes() {
        use ExitStatus::*;
        let cases = [
            (Reason::Ok, Code(0), 0),
            (Reason::Error, Code(3), 3),
            (Reason::Error, Code(0), 1),
            (Reason::Error, Signal(6), 134),
            (Reason::Error, NotStarted, 1),
            (Reason::Timeout, Signal(9), 124),
            (Reason::CpuLimit, Signal(9), 124),
            (Reason::Oom, Signal(9), 121),
            (Reason::Pids, Code(1), 122),
            (Reason::OutputLimit, Signal(9), 123),
            (Reason::SandboxError, NotStarted, 125),
            (Reason::Cancelled, Signal(9), 130),
            (Reason::Signal, Signal(11), 139),
            (Reason::Signal, Code(1), 137),
            (Reason::Seccomp, Signal(31), 159),
        ];
        for (reason, exit, want) in cases {
            assert_eq!(
                exit_code_for(&outcome(reason, exit)),
                want,
                "{reason:?} {exit:?}"
            );
        }
    }

    #[test]
    fn timeout_summary() {
        let mut o = outcome(Reason::Timeout, ExitStatus::Signal(9));
        o.usage.wall_ms = 2000;
        o.limits_hit = vec![LimitKind::Wall];
        assert!(is_abnormal(&o));
        assert_eq!(
            summary_line(&o),
            "job 42 ended: timeout after 2.0s (limit hit: wall)"
        );
    }

    #[test]
    fn sandbox_error_summary_carries_the_detail_once() {
        let mut o = outcome(Reason::SandboxError, ExitStatus::NotStarted);
        o.detail = "pivot_root: EPERM".into();
        assert_eq!(
            summary_line(&o),
            "job 42 ended: sandbox error: pivot_root: EPERM"
        );
    }

    #[test]
    fn plain_exits_are_not_abnormal_but_truncation_is() {
        let mut o = outcome(Reason::Error, ExitStatus::Code(1));
        assert!(!is_abnormal(&o));
        assert!(!is_abnormal(&outcome(Reason::Ok, ExitStatus::Code(0))));
        o.stdout_truncated = true;
        o.usage.stdout_bytes = 1 << 20;
        o.limits_hit = vec![LimitKind::Stdout];
        assert!(is_abnormal(&o));
        assert_eq!(
            summary_line(&o),
            "job 42 ended: exited with status 1 (limit hit: stdout); stdout truncated at 1M"
        );
    }

    #[test]
    fn signal_summary_names_the_signal() {
        let o = outcome(Reason::Signal, ExitStatus::Signal(11));
        assert_eq!(
            summary_line(&o),
            "job 42 ended: killed by signal 11 (SIGSEGV)"
        );
    }

    #[test]
    fn verbose_report_lists_isolation() {
        let mut o = outcome(Reason::Ok, ExitStatus::Code(0));
        o.isolation.namespaces = vec!["user".into(), "pid".into()];
        o.isolation.landlock_abi = 6;
        o.isolation.landlock = Some(LandlockStatus::FullyEnforced);
        o.isolation.seccomp_filters = 2;
        o.isolation.cgroup = Some(vivarium_proto::CgroupVersion::V1);
        let report = verbose_report(&o);
        for want in [
            "namespaces: user, pid",
            "landlock: abi 6, fully enforced",
            "seccomp filters: 2",
            "cgroup: v1",
            "not enforced: none",
            "exit code: 0",
        ] {
            assert!(report.contains(want), "{want:?} missing from\n{report}");
        }
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(format_bytes(0), "0B");
        assert_eq!(format_bytes(1023), "1023B");
        assert_eq!(format_bytes(1536), "1.5K");
        assert_eq!(format_bytes(64 << 20), "64M");
        assert_eq!(format_bytes(1 << 30), "1G");
        assert_eq!(format_ms(2000), "2.0s");
        assert_eq!(format_ms(2345), "2.3s");
    }
}
