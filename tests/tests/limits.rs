//! Every limit ends (or marks) the job with its own reason, through the library and
//! through `viv`'s exit codes.
#![forbid(unsafe_code)]

use std::sync::Arc;

use serde_json::json;
use vivarium_e2e::proto::{ErrorCode, ExitStatus, LimitKind, Reason};
use vivarium_e2e::{
    assert_ended, default_profile_with, describe, describe_output, evidence, probe,
    produced_at_most, require_root, Daemon, DaemonOpts, Job,
};

const MIB: u64 = 1 << 20;

#[tokio::test(flavor = "multi_thread")]
async fn wall_clock_limit() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon
        .run_job(&Job::new("while True: pass").wall_ms(1000))
        .await;
    assert_ended(
        &done,
        Reason::Timeout,
        ExitStatus::Signal(9),
        LimitKind::Wall,
    );
    let wall = done.outcome.usage.wall_ms;
    assert!((1000..5000).contains(&wall), "wall_ms {wall}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cpu_limit_counts_every_process() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new(probe("cpu")).arg("4").cpu_ms(500).wall_ms(10_000);
    let done = daemon.run_job(&job).await;
    assert_ended(
        &done,
        Reason::CpuLimit,
        ExitStatus::Signal(9),
        LimitKind::Cpu,
    );
    let usage = &done.outcome.usage;
    assert!(usage.cpu_ms >= 500, "cpu_ms {}", usage.cpu_ms);
    assert!(usage.wall_ms < 5000, "wall_ms {}", usage.wall_ms);
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_limit_is_an_oom_kill() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new(probe("memory"))
        .arg("200")
        .memory_bytes(64 * MIB)
        .wall_ms(15_000);
    let done = daemon.run_job(&job).await;
    assert_ended(&done, Reason::Oom, ExitStatus::Signal(9), LimitKind::Memory);
    let allocated = evidence(&done)["allocated_mib"].as_u64().unwrap();
    assert!(
        allocated < 64,
        "allocated {allocated} MiB under a 64 MiB limit"
    );
    let peak = done.outcome.usage.peak_memory_bytes;
    assert!(
        (32 * MIB..=64 * MIB).contains(&peak),
        "peak_memory_bytes {peak}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pids_limit_refuses_forks_and_a_failing_job_is_reason_pids() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new(probe("pids"))
        .args(["50", "strict"])
        .pids(8)
        .wall_ms(15_000);
    let done = daemon.run_job(&job).await;
    assert_ended(&done, Reason::Pids, ExitStatus::Code(1), LimitKind::Pids);
    let ev = evidence(&done);
    assert_eq!(ev["errnos"], json!(["EAGAIN"]), "{ev}");
    // init and the script count too: at most 6 children fit under 8.
    assert!(ev["forked"].as_u64().unwrap() <= 6, "{ev}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pids_limit_hit_by_a_job_that_copes_is_ok_but_recorded() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new(probe("pids"))
        .args(["50", "lenient"])
        .pids(8)
        .wall_ms(15_000);
    let done = daemon.run_job(&job).await;
    assert_ended(&done, Reason::Ok, ExitStatus::Code(0), LimitKind::Pids);
    assert!(evidence(&done)["failed"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn stdout_limit_kills_and_truncates_exactly() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new(probe("flood"))
        .args(["stdout", "100000", "10"])
        .output_bytes(1000)
        .wall_ms(15_000);
    let done = daemon.run_job(&job).await;
    assert_ended(
        &done,
        Reason::OutputLimit,
        ExitStatus::Signal(9),
        LimitKind::Stdout,
    );
    assert!(done.outcome.stdout_truncated && !done.outcome.stderr_truncated);
    assert_eq!(done.stdout, vec![b'x'; 1000]);
    assert!(done.outcome.usage.stdout_bytes > 1000);
    assert!(done.outcome.usage.wall_ms < 5000, "not killed at the cap");
}

#[tokio::test(flavor = "multi_thread")]
async fn stderr_has_its_own_cap() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let job = Job::new(probe("flood"))
        .args(["stderr", "5000", "10"])
        .output_bytes(1000)
        .wall_ms(15_000);
    let done = daemon.run_job(&job).await;
    assert_ended(
        &done,
        Reason::OutputLimit,
        ExitStatus::Signal(9),
        LimitKind::Stderr,
    );
    assert!(done.outcome.stderr_truncated && !done.outcome.stdout_truncated);
    assert_eq!(done.stderr, vec![b'x'; 1000]);
    assert!(done.stdout.is_empty());
}

/// A profile with `on_output_limit = "truncate"` keeps the job running and drops the rest:
/// the daemon goes on reading past the cap, so a job writing more than the pipe could
/// ever hold (more than the kill policy would let it produce) is not left blocked.
#[tokio::test(flavor = "multi_thread")]
async fn truncate_policy_keeps_the_job_running() {
    if !require_root() {
        return;
    }
    let profile = default_profile_with(&[("on_output_limit", "on_output_limit = \"truncate\"")]);
    let daemon = Daemon::start(DaemonOpts::default().profile("truncating", &profile));
    let written = produced_at_most(1000) + MIB;
    let job = Job::new(probe("flood"))
        .profile("truncating")
        .args(["stdout", &written.to_string(), "0.2"])
        .output_bytes(1000);
    let done = daemon.run_job(&job).await;
    assert_ended(&done, Reason::Ok, ExitStatus::Code(0), LimitKind::Stdout);
    assert!(done.outcome.stdout_truncated);
    assert_eq!(done.stdout, vec![b'x'; 1000]);
    assert_eq!(done.stderr, b"done\n", "the job ran on past the cap");
    assert_eq!(done.outcome.usage.stdout_bytes, written);
}

/// `int 0x80` enters the kernel with the i386 syscall table; the filter must kill on the
/// foreign architecture rather than check its numbers against the x86_64 allowlist.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_syscall_abi_is_killed_by_seccomp() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run(&probe("int80")).await;
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (Reason::Seccomp, ExitStatus::Signal(31)),
        "{}",
        describe(&done)
    );
    assert_eq!(evidence(&done), json!({"stage": "calling int 0x80"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn death_by_a_plain_signal() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon
        .run("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
        .await;
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (Reason::Signal, ExitStatus::Signal(15)),
        "{}",
        describe(&done)
    );
    assert!(done.outcome.limits_hit.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_work_dir_is_a_disk_limit() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let done = daemon.run_job(&Job::new(probe("disk")).arg("100")).await;
    assert_ended(&done, Reason::Ok, ExitStatus::Code(0), LimitKind::Disk);
    let ev = evidence(&done);
    assert_eq!(ev["error"], "ENOSPC", "{ev}");
    assert_eq!(ev["size"], 64 * MIB, "{ev}");
    assert!(ev["written"].as_u64().unwrap() < 64 * MIB, "{ev}");
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_looser_than_the_profile_are_refused() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let profiles = client.list_profiles().await.expect("profiles");
    let max = profiles
        .iter()
        .find(|p| p.name == "default")
        .expect("default profile")
        .max
        .clone();
    let cases = [
        ("wall", Job::new("pass").wall_ms(max.wall_ms + 1)),
        ("cpu", Job::new("pass").cpu_ms(max.cpu_ms + 1)),
        (
            "memory",
            Job::new("pass").memory_bytes(max.memory_bytes + 1),
        ),
        ("pids", Job::new("pass").pids(max.pids + 1)),
        (
            "output",
            Job::new("pass").output_bytes(max.output_bytes + 1),
        ),
        ("zero wall", Job::new("pass").wall_ms(0)),
        ("zero memory", Job::new("pass").memory_bytes(0)),
        ("zero pids", Job::new("pass").pids(0)),
    ];
    let mut got = Vec::new();
    for (name, job) in &cases {
        let code = match client.run_collect(job, None).await {
            Ok(done) => panic!("{name}: accepted\n{}", describe(&done)),
            Err(e) => e.refusal_code(),
        };
        got.push((*name, code));
    }
    let want: Vec<_> = cases
        .iter()
        .map(|(name, _)| (*name, Some(ErrorCode::LimitOutOfRange)))
        .collect();
    assert_eq!(got, want);
    // Refusals leave the connection usable; limits at the maximum are fine.
    let at_max = Job::new("print('ok')")
        .wall_ms(max.wall_ms)
        .memory_bytes(max.memory_bytes)
        .pids(max.pids);
    let done = client.run_collect(&at_max, None).await.expect("job at max");
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
}

/// `viv run`'s exit code names the reason: 124 time, 121 memory, 122 pids, 123 output,
/// 128+N signal, 159 seccomp, 125 refused, else the script's own.
#[tokio::test(flavor = "multi_thread")]
async fn viv_exit_codes() {
    if !require_root() {
        return;
    }
    let daemon = Arc::new(Daemon::start(DaemonOpts::default()));
    let flood = probe("flood");
    let cases: Vec<(&str, Vec<&str>, String, i32)> = vec![
        ("ok", vec![], "print('hi')".into(), 0),
        ("own code", vec![], "import sys; sys.exit(7)".into(), 7),
        (
            "wall",
            vec!["--timeout", "1"],
            "while True: pass".into(),
            124,
        ),
        (
            "cpu",
            vec!["--cpu", "0.5", "--timeout", "10", "-", "2"],
            probe("cpu"),
            124,
        ),
        (
            "memory",
            vec!["--memory", "64M", "--timeout", "15", "-", "200"],
            probe("memory"),
            121,
        ),
        (
            "pids",
            vec!["--pids", "8", "-", "50", "strict"],
            probe("pids"),
            122,
        ),
        (
            "output",
            vec!["--output", "1000", "-", "stdout", "100000", "10"],
            flood,
            123,
        ),
        (
            "signal",
            vec![],
            "import os, signal; os.kill(os.getpid(), signal.SIGTERM)".into(),
            143,
        ),
        ("seccomp", vec![], probe("int80"), 159),
        (
            "unknown profile",
            vec!["--profile", "no-such-profile"],
            "print(1)".into(),
            125,
        ),
    ];
    let mut threads = Vec::new();
    for (name, opts, code, want) in cases {
        let daemon = Arc::clone(&daemon);
        threads.push(std::thread::spawn(move || {
            let mut args = vec!["run"];
            args.extend(&opts);
            if !opts.contains(&"-") {
                args.push("-");
            }
            let out = daemon.viv(&args, code.as_bytes());
            let got = out.status.code().unwrap_or(-1);
            if got != want {
                eprintln!("viv {name}: {}", describe_output(&out));
            }
            if name == "unknown profile" {
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(stderr.contains("no-such-profile"), "{stderr}");
            }
            (name, got)
        }));
    }
    let got: Vec<(&str, i32)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let want = vec![
        ("ok", 0),
        ("own code", 7),
        ("wall", 124),
        ("cpu", 124),
        ("memory", 121),
        ("pids", 122),
        ("output", 123),
        ("signal", 143),
        ("seccomp", 159),
        ("unknown profile", 125),
    ];
    assert_eq!(got, want);
}
