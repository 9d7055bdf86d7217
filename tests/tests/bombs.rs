//! Resource bombs: each ends with its own reason inside its limit, while a normal job
//! submitted at the same moment completes `Ok` within a few seconds and the host stays
//! responsive; afterwards nothing of the bomb is left (processes, cgroups, mounts, fds).
#![forbid(unsafe_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use vivarium_e2e::proto::{ExitStatus, LimitKind, Reason};
use vivarium_e2e::{
    assert_ended, describe, evidence, probe, produced_at_most, require_root, Collected, Daemon,
    DaemonOpts, Job,
};

const MIB: u64 = 1 << 20;
/// How long the bystander job (and a host `true`) may take while a bomb goes off.
const RESPONSIVE: Duration = Duration::from_secs(5);
const BYSTANDER: &str = "print(sum(range(1000)))";

/// Run `bomb` and, at the same moment, a normal job on another connection. Asserts that the
/// normal job ends `Ok` within [`RESPONSIVE`], that a host process still starts promptly,
/// and that the bomb left nothing behind; returns what the bomb did.
async fn detonate(bomb: Job) -> Collected {
    let daemon = Daemon::start(DaemonOpts::default());
    assert_eq!(daemon.run("print('warm')").await.outcome.reason, Reason::Ok);
    let before = daemon.settled_snapshot();
    let bystander = async {
        let asked = Instant::now();
        let done = daemon.run(BYSTANDER).await;
        let job_took = asked.elapsed();
        let asked = Instant::now();
        let host = Command::new("true").status().expect("spawn true");
        (done, job_took, host.success(), asked.elapsed())
    };
    let (done, (normal, job_took, host_ok, host_took)) =
        tokio::join!(daemon.run_job(&bomb), bystander);
    eprintln!(
        "{}: bomb {:?} in {} ms; bystander job {job_took:?}, host `true` {host_took:?}",
        vivarium_e2e::test_name(),
        done.outcome.reason,
        done.outcome.usage.wall_ms
    );
    assert_eq!(
        (normal.outcome.reason, normal.stdout.as_slice()),
        (Reason::Ok, &b"499500\n"[..]),
        "the bystander job failed beside the bomb\n{}",
        describe(&normal)
    );
    assert!(job_took < RESPONSIVE, "bystander job took {job_took:?}");
    assert!(
        host_ok && host_took < RESPONSIVE,
        "host `true` took {host_took:?}"
    );
    daemon.assert_no_leaks(&before);
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_bomb_ends_as_pids() {
    if !require_root() {
        return;
    }
    let done = detonate(Job::new(probe("bomb_fork")).pids(32).wall_ms(10_000)).await;
    assert_ended(&done, Reason::Pids, ExitStatus::Code(1), LimitKind::Pids);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("BlockingIOError"), "{}", describe(&done));
    assert!(done.outcome.usage.wall_ms < 10_000, "{}", describe(&done));
}

#[tokio::test(flavor = "multi_thread")]
async fn thread_bomb_ends_as_pids() {
    if !require_root() {
        return;
    }
    let done = detonate(Job::new(probe("bomb_threads")).pids(32).wall_ms(10_000)).await;
    assert_ended(&done, Reason::Pids, ExitStatus::Code(1), LimitKind::Pids);
    // Init and the main thread are tasks too: at most 30 more fit under 32.
    let threads = evidence(&done)["threads"].as_u64().unwrap();
    assert!((20..=30).contains(&threads), "{threads} threads");
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert!(stderr.contains("can't start new thread"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_gib_balloon_is_an_oom_kill() {
    if !require_root() {
        return;
    }
    let job = Job::new(probe("bomb_memory"))
        .arg((10 << 10).to_string())
        .memory_bytes(128 * MIB)
        .wall_ms(10_000);
    let done = detonate(job).await;
    assert_ended(&done, Reason::Oom, ExitStatus::Signal(9), LimitKind::Memory);
    let allocated = evidence(&done)["allocated_mib"].as_u64().unwrap();
    assert!(allocated < 128, "allocated {allocated} MiB under 128 MiB");
    assert!(done.outcome.usage.peak_memory_bytes <= 128 * MIB);
    assert!(done.outcome.usage.wall_ms < 10_000, "{}", describe(&done));
}

#[tokio::test(flavor = "multi_thread")]
async fn filling_tmp_is_enospc_and_a_disk_limit() {
    if !require_root() {
        return;
    }
    let done = detonate(Job::new(probe("bomb_disk")).args(["/tmp", "bytes"])).await;
    assert_ended(&done, Reason::Ok, ExitStatus::Code(0), LimitKind::Disk);
    let ev = evidence(&done);
    assert_eq!(
        (&ev["error"], &ev["size"]),
        (&json!("ENOSPC"), &json!(64 * MIB)),
        "{ev}"
    );
    assert!(ev["written"].as_u64().unwrap() <= 64 * MIB, "{ev}");
    assert_eq!(ev["free_blocks"], 0, "{ev}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausting_inodes_is_enospc_and_a_disk_limit() {
    if !require_root() {
        return;
    }
    let done = detonate(Job::new(probe("bomb_disk")).args(["/tmp", "inodes"])).await;
    assert_ended(&done, Reason::Ok, ExitStatus::Code(0), LimitKind::Disk);
    let ev = evidence(&done);
    assert_eq!(
        (&ev["error"], &ev["free_inodes"]),
        (&json!("ENOSPC"), &json!(0)),
        "{ev}"
    );
    // 4096 inodes, one of them the directory itself.
    let files = ev["files"].as_u64().unwrap();
    assert!((4000..4096).contains(&files), "{ev}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fd_exhaustion_is_emfile_at_the_rlimit() {
    if !require_root() {
        return;
    }
    let done = detonate(Job::new(probe("bomb_fds"))).await;
    assert_eq!(
        (done.outcome.reason, done.outcome.exit),
        (Reason::Ok, ExitStatus::Code(0)),
        "{}",
        describe(&done)
    );
    let ev = evidence(&done);
    assert_eq!(
        (
            &ev["limit"],
            &ev["error"],
            &ev["pipe_error"],
            &ev["raise_error"],
            &ev["limit_after"]
        ),
        (
            &json!([256, 256]),
            &json!("EMFILE"),
            &json!("EMFILE"),
            &json!("ValueError"),
            &json!([256, 256])
        ),
        "{ev}"
    );
    // stdio and whatever the interpreter keeps open take a few of the 256.
    let opened = ev["opened"].as_u64().unwrap();
    assert!((240..=253).contains(&opened), "{ev}");
}

#[tokio::test(flavor = "multi_thread")]
async fn cpu_spin_ends_at_the_cpu_limit() {
    if !require_root() {
        return;
    }
    let job = Job::new(probe("bomb_spin"))
        .arg("3")
        .cpu_ms(1000)
        .wall_ms(10_000);
    let done = detonate(job).await;
    assert_ended(
        &done,
        Reason::CpuLimit,
        ExitStatus::Signal(9),
        LimitKind::Cpu,
    );
    let usage = &done.outcome.usage;
    assert!(
        (1000..1500).contains(&usage.cpu_ms),
        "cpu_ms {}",
        usage.cpu_ms
    );
    assert!(usage.wall_ms < 5000, "wall_ms {}", usage.wall_ms);
}

#[tokio::test(flavor = "multi_thread")]
async fn sleeping_forever_ends_at_the_wall_limit() {
    if !require_root() {
        return;
    }
    let done = detonate(Job::new("import time\ntime.sleep(10**9)").wall_ms(2000)).await;
    assert_ended(
        &done,
        Reason::Timeout,
        ExitStatus::Signal(9),
        LimitKind::Wall,
    );
    let wall = done.outcome.usage.wall_ms;
    assert!((2000..4000).contains(&wall), "wall_ms {wall}");
}

/// A 10 GiB flood (`args`: the probe's mode, then its options) under the default 1 MiB
/// cap: killed at the cap with at most [`produced_at_most`] bytes read from either
/// stream (whatever the machine's speed), long before it could write 10 GiB.
async fn flood(args: &[&str], hit: LimitKind) -> Collected {
    let (mode, options) = args.split_first().expect("a mode");
    let args = [*mode, "10"].into_iter().chain(options.iter().copied());
    let done = detonate(Job::new(probe("bomb_flood")).args(args)).await;
    assert_ended(&done, Reason::OutputLimit, ExitStatus::Signal(9), hit);
    let usage = &done.outcome.usage;
    let bound = produced_at_most(MIB);
    eprintln!(
        "{}: stdout_bytes {}, stderr_bytes {}, bound {bound}",
        vivarium_e2e::test_name(),
        usage.stdout_bytes,
        usage.stderr_bytes
    );
    for (stream, produced) in [
        ("stdout", usage.stdout_bytes),
        ("stderr", usage.stderr_bytes),
    ] {
        assert!(
            produced <= bound,
            "{produced} bytes read from {stream}, more than cap + chunk + pipe-max-size = {bound}: \
             the job was not stopped at the cap"
        );
    }
    assert!(usage.wall_ms < 5000, "wall_ms {}", usage.wall_ms);
    done
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_gib_on_stdout_is_killed_at_the_cap() {
    if !require_root() {
        return;
    }
    let done = flood(&["stdout"], LimitKind::Stdout).await;
    assert!(done.outcome.stdout_truncated && !done.outcome.stderr_truncated);
    assert_eq!(done.stdout, vec![b'y'; MIB as usize]);
    assert!(done.stderr.is_empty(), "{}", describe(&done));
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_gib_on_stderr_is_killed_at_the_cap() {
    if !require_root() {
        return;
    }
    let done = flood(&["stderr"], LimitKind::Stderr).await;
    assert!(done.outcome.stderr_truncated && !done.outcome.stdout_truncated);
    assert_eq!(done.stderr, vec![b'y'; MIB as usize]);
    assert!(done.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn one_endless_line_is_killed_at_the_cap() {
    if !require_root() {
        return;
    }
    let done = flood(&["line"], LimitKind::Stdout).await;
    assert!(done.outcome.stdout_truncated);
    assert_eq!(done.stdout, vec![b'x'; MIB as usize]);
}

/// A flood through pipes the job enlarged to 1 MiB (F_SETPIPE_SZ): the most the daemon
/// reads is still bounded by the pipe's maximum capacity, not by the machine's speed.
#[tokio::test(flavor = "multi_thread")]
async fn ten_gib_through_an_enlarged_pipe_is_killed_at_the_cap() {
    if !require_root() {
        return;
    }
    let done = flood(&["stdout", "bigpipe"], LimitKind::Stdout).await;
    assert_eq!(
        evidence(&done)["pipe_size"],
        json!({"1": MIB}),
        "{}",
        describe(&done)
    );
    assert!(done.outcome.stdout_truncated && !done.outcome.stderr_truncated);
    assert_eq!(done.stdout.len() as u64, MIB);
    assert!(done.stderr.is_empty(), "{}", describe(&done));
}

/// Both streams flooded in turn, both pipes enlarged: the stream past its cap stops being
/// read while the other is still drained, and the job is killed rather than left blocked.
#[tokio::test(flavor = "multi_thread")]
async fn ten_gib_on_both_streams_is_killed_at_the_cap() {
    if !require_root() {
        return;
    }
    let done = flood(&["both", "bigpipe"], LimitKind::Stdout).await;
    assert_eq!(
        evidence(&done)["pipe_size"],
        json!({"1": MIB, "2": MIB}),
        "{}",
        describe(&done)
    );
    assert!(done.outcome.stdout_truncated, "{}", describe(&done));
    assert_eq!(done.stdout.len() as u64, MIB);
    assert!(done.stderr.len() as u64 <= MIB);
}
