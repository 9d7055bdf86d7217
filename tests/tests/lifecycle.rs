//! Jobs start, queue, get cancelled, lose their client, and end without leaving anything
//! behind; the daemon shuts down clean.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use vivarium_e2e::proto::{ErrorCode, ExitStatus, Reason};
use vivarium_e2e::{
    alive, describe, finish, probe, require_root, wait_for_stdout, wait_until, Daemon, DaemonOpts,
    Job, JobEvent, SLEEPER,
};

const NO_STDIN: Option<&[u8]> = None;

#[tokio::test(flavor = "multi_thread")]
async fn cancel_kills_a_running_job_promptly() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let mut job = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut job, "ready").await;
    assert!(!daemon.job_processes().is_empty(), "the job is not running");
    // The leak checks can see a job's cgroups (one per hierarchy) while it runs.
    assert!(!daemon.cgroup_leftovers().is_empty(), "no job cgroup found");
    let asked = Instant::now();
    assert!(job.cancel().await.unwrap(), "cancel was not sent");
    let outcome = finish(&mut job).await.expect("outcome after cancel");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(
        (outcome.reason, outcome.exit),
        (Reason::Cancelled, ExitStatus::Signal(9)),
        "{outcome:#?}"
    );
    assert!(
        wait_until(Duration::from_secs(2), || daemon.job_processes().is_empty()
            && daemon.cgroup_leftovers().is_empty()),
        "left behind: {:?} {:?}",
        daemon.job_processes(),
        daemon.cgroup_leftovers()
    );
    drop(job);
    // The connection is free for the next job.
    let done = client.run_collect(&Job::new("print(1)"), None).await;
    assert_eq!(done.expect("next job").outcome.reason, Reason::Ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn disconnect_kills_the_job() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let mut job = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut job, "ready").await;
    assert!(!daemon.job_processes().is_empty(), "the job is not running");
    drop(job);
    drop(client);
    assert!(
        wait_until(Duration::from_secs(2), || daemon.job_processes().is_empty()),
        "still running 2 s after the client went away: {:?}",
        daemon.job_processes()
    );
    assert_eq!(daemon.run("print(1)").await.outcome.reason, Reason::Ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn eight_jobs_run_at_once() {
    if !require_root() {
        return;
    }
    let daemon = Arc::new(Daemon::start(DaemonOpts::default()));
    let started = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let daemon = Arc::clone(&daemon);
            tokio::spawn(async move {
                let code = format!("import time\ntime.sleep(1)\nprint({i})");
                let done = daemon.run(&code).await;
                assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
                String::from_utf8(done.stdout).unwrap()
            })
        })
        .collect();
    let mut outputs = Vec::new();
    for t in tasks {
        outputs.push(t.await.expect("task"));
    }
    let want: Vec<String> = (0..8).map(|i| format!("{i}\n")).collect();
    assert_eq!(outputs, want);
    // One at a time would take 8 s.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_slot_and_no_queue_place_is_busy() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().slots(1, 0));
    let mut first = daemon.client().await;
    let mut running = first.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut running, "ready").await;
    let refused = daemon.try_run(&Job::new("print(1)"), None).await;
    assert_eq!(
        refused.as_ref().err().and_then(|e| e.refusal_code()),
        Some(ErrorCode::Busy),
        "{refused:?}"
    );
    running.cancel().await.unwrap();
    finish(&mut running).await.unwrap();
    // The slot is free again.
    assert_eq!(daemon.run("print(1)").await.outcome.reason, Reason::Ok);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_job_runs_when_the_slot_frees() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().slots(1, 1));
    let mut first = daemon.client().await;
    let sleeper = "import time\nprint('ready', flush=True)\ntime.sleep(1)\n";
    let mut running = first.submit(&Job::new(sleeper), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut running, "ready").await;

    let mut second = daemon.client().await;
    let mut queued = second
        .submit(&Job::new("print('second')"), NO_STDIN)
        .await
        .unwrap();
    let event = queued.next_event().await.unwrap();
    assert_eq!(event, Some(JobEvent::Queued { position: 0 }));
    // The queue's one place is taken.
    let refused = daemon.try_run(&Job::new("print(3)"), None).await;
    assert_eq!(
        refused.as_ref().err().and_then(|e| e.refusal_code()),
        Some(ErrorCode::Busy),
        "{refused:?}"
    );
    let mut events = Vec::new();
    while let Some(event) = queued.next_event().await.unwrap() {
        events.push(event);
    }
    assert!(
        matches!(events.first(), Some(JobEvent::Started { .. })),
        "{events:?}"
    );
    match events.last() {
        Some(JobEvent::Finished(o)) => assert_eq!(o.reason, Reason::Ok, "{o:#?}"),
        other => panic!("ended with {other:?}"),
    }
    assert_eq!(finish(&mut running).await.unwrap().reason, Reason::Ok);
}

/// A queued job that is cancelled leaves the queue and ends like any cancelled job, with
/// `Finished{Cancelled}` (`JobHandle::cancel`'s contract; `NotStarted`: it never ran); a
/// queued job whose client goes away leaves the queue too, so its place is free.
#[tokio::test(flavor = "multi_thread")]
async fn queued_jobs_leave_the_queue_on_cancel_and_disconnect() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().slots(1, 1));
    let mut first = daemon.client().await;
    let mut running = first.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut running, "ready").await;

    let mut second = daemon.client().await;
    let mut queued = second
        .submit(&Job::new("print(2)"), NO_STDIN)
        .await
        .unwrap();
    assert_eq!(
        queued.next_event().await.unwrap(),
        Some(JobEvent::Queued { position: 0 })
    );
    queued.cancel().await.unwrap();
    let outcome = finish(&mut queued)
        .await
        .expect("an outcome for the queued job");
    assert_eq!(
        (outcome.reason, outcome.exit),
        (Reason::Cancelled, ExitStatus::NotStarted),
        "{outcome:#?}"
    );
    drop(queued);

    let mut third = daemon.client().await;
    let mut queued = third.submit(&Job::new("print(3)"), NO_STDIN).await.unwrap();
    assert_eq!(
        queued.next_event().await.unwrap(),
        Some(JobEvent::Queued { position: 0 }),
        "the cancelled job still holds its queue place"
    );
    drop(queued);
    drop(third);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut fourth = daemon.client().await;
    let mut queued = fourth
        .submit(&Job::new("print(4)"), NO_STDIN)
        .await
        .unwrap();
    assert_eq!(
        queued.next_event().await.unwrap(),
        Some(JobEvent::Queued { position: 0 }),
        "the disconnected job still holds its queue place"
    );
    running.cancel().await.unwrap();
    finish(&mut running).await.unwrap();
    assert_eq!(finish(&mut queued).await.unwrap().reason, Reason::Ok);
}

/// docs/protocol.md lists this as a known deviation: a `Submit` right after `Finished`
/// can get a spurious `UnexpectedMessage`. Quick jobs back to back on one connection.
#[tokio::test(flavor = "multi_thread")]
async fn a_reused_connection_takes_the_next_job_right_after_finished() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let mut failures = Vec::new();
    for i in 0..40 {
        match client.run_collect(&Job::new("pass"), None).await {
            Ok(done) => assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done)),
            Err(e) => failures.push((i, e.refusal_code(), e.to_string())),
        }
    }
    assert_eq!(failures, vec![], "submits refused on a free connection");
}

/// The same after `Busy`: the refused connection may submit again at once and must hear
/// `Busy` again, not a spurious `UnexpectedMessage`.
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_connection_may_retry_at_once() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().slots(1, 0));
    let mut first = daemon.client().await;
    let mut running = first.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut running, "ready").await;
    let mut client = daemon.client().await;
    let mut codes = Vec::new();
    for _ in 0..20 {
        let refused = client.run_collect(&Job::new("pass"), None).await;
        codes.push(refused.err().and_then(|e| e.refusal_code()));
    }
    assert_eq!(codes, vec![Some(ErrorCode::Busy); 20]);
    running.cancel().await.unwrap();
    finish(&mut running).await.unwrap();
}

/// A state directory the job's init cannot reach (its parent is 0700 and owned by host
/// root, who is unmapped in the job's user namespace) must be caught when the daemon
/// starts, not turn every job into a sandbox error.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_state_dir_is_refused_at_startup_not_per_job() {
    if !require_root() {
        return;
    }
    match Daemon::try_start(DaemonOpts::default().state_parent_mode(0o700)) {
        Err(log) => assert!(log.contains("state"), "refused, but not clearly:\n{log}"),
        Ok(daemon) => {
            let done = daemon.run("print('hi')").await;
            assert_eq!(
                done.outcome.reason,
                Reason::Ok,
                "the daemon started, yet cannot run a job:\n{}",
                describe(&done)
            );
        }
    }
}

/// A job whose cgroup cannot be made (its name taken, here by a directory the test made
/// in the last hierarchy, so the others are made and must be removed again) ends as a
/// sandbox error naming the cgroup, its code never runs, its init (cloned before the
/// cgroup is made, on v1) is gone with everything else of it, and the next job runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_job_whose_cgroup_cannot_be_made_fails_alone_and_leaves_nothing() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let first = daemon.run("pass").await;
    assert_eq!(first.outcome.reason, Reason::Ok);
    let before = daemon.settled_snapshot();
    let taken = daemon
        .cgroup_subtree_dirs()
        .last()
        .expect("a hierarchy")
        .join(format!("job-{}", first.outcome.job_id + 1));
    std::fs::create_dir(&taken).expect("take the next job's cgroup name");
    let refused = daemon.run("print('ran')").await;
    std::fs::remove_dir(&taken).expect("the test's own directory, left as it was");
    assert_eq!(
        refused.outcome.job_id,
        first.outcome.job_id + 1,
        "the job meant to meet the taken name"
    );
    assert_eq!(
        refused.outcome.reason,
        Reason::SandboxError,
        "{:#?}",
        refused.outcome
    );
    assert!(
        refused.outcome.detail.contains("cgroup"),
        "{}",
        refused.outcome.detail
    );
    assert!(refused.stdout.is_empty(), "the code ran");
    daemon.assert_no_leaks(&before);
    let next = daemon.run("print(1)").await;
    assert_eq!(
        (next.outcome.reason, next.stdout.as_slice()),
        (Reason::Ok, &b"1\n"[..])
    );
}

/// One hundred jobs of every kind, then nothing left: no process, no cgroup, no host
/// mount, no fd in the daemon or the spawner, no file in the state directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_jobs_leave_nothing_behind() {
    if !require_root() {
        return;
    }
    let daemon = Arc::new(Daemon::start(DaemonOpts::default()));
    assert_eq!(daemon.run("print('warm')").await.outcome.reason, Reason::Ok);
    let before = daemon.settled_snapshot();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let daemon = Arc::clone(&daemon);
            tokio::spawn(async move {
                let mut got = Vec::new();
                for j in (w..100).step_by(4) {
                    got.push((j, one_job(&daemon, j % 10).await));
                }
                got
            })
        })
        .collect();
    let mut got = Vec::new();
    for w in workers {
        got.extend(w.await.expect("worker"));
    }
    got.sort_by_key(|(j, _)| *j);
    let want: Vec<(usize, Option<Reason>)> = (0..100).map(|j| (j, expected(j % 10))).collect();
    assert_eq!(got, want);
    daemon.assert_no_leaks(&before);
    assert_eq!(
        daemon.run("print('still')").await.outcome.reason,
        Reason::Ok
    );
}

fn expected(kind: usize) -> Option<Reason> {
    Some(match kind {
        0 | 5 => Reason::Ok,
        1 | 2 => Reason::Error,
        3 => Reason::Timeout,
        4 => Reason::OutputLimit,
        6 => Reason::Cancelled,
        7 => return None,
        8 => Reason::Seccomp,
        _ => Reason::Oom,
    })
}

/// Run one job of `kind`; the reason it ended with (`None`: abandoned, no outcome).
async fn one_job(daemon: &Daemon, kind: usize) -> Option<Reason> {
    let job = match kind {
        0 => Job::new("print('ok')"),
        1 => Job::new("import sys; sys.exit(2)"),
        2 => Job::new("raise ValueError('no')"),
        3 => Job::new("while True: pass").wall_ms(300),
        4 => Job::new(probe("flood"))
            .args(["stdout", "10000", "10"])
            .output_bytes(100),
        // An orphan that would outlive its parent: it dies with the pid namespace.
        5 => Job::new("import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('parent')"),
        6 | 7 => {
            let mut client = daemon.client().await;
            let mut handle = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
            wait_for_stdout(&mut handle, "ready").await;
            if kind == 7 {
                return None; // dropping the handle and client disconnects
            }
            // `handle.cancel()` would make this future !Send (JobHandle is !Sync).
            handle.canceller().cancel().await.unwrap();
            return Some(finish(&mut handle).await.unwrap().reason);
        }
        8 => Job::new(probe("int80")),
        _ => Job::new(probe("memory")).arg("100").memory_bytes(32 << 20),
    };
    Some(daemon.run_job(&job).await.outcome.reason)
}

/// SIGTERM stops the daemon within 10 s: running jobs die, the socket and the cgroup
/// subtree are removed.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_shuts_down_clean() {
    if !require_root() {
        return;
    }
    let mut daemon = Daemon::start(DaemonOpts::default());
    assert_eq!(daemon.run("print(1)").await.outcome.reason, Reason::Ok);
    let mut client = daemon.client().await;
    let mut job = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut job, "ready").await;
    let job_pids: Vec<i32> = daemon.job_processes().iter().map(|p| p.pid).collect();
    assert!(!job_pids.is_empty());
    let spawner = daemon.spawner_pid().expect("spawner");

    let status = daemon
        .terminate()
        .expect("the daemon ignored SIGTERM for 10 s");
    assert!(status.success(), "exit status {status}\n{}", daemon.log());
    // The client hears Finished(Cancelled) or sees the connection close.
    match finish(&mut job).await {
        Ok(outcome) => assert_eq!(outcome.reason, Reason::Cancelled, "{outcome:#?}"),
        Err(e) => assert!(
            matches!(e, vivarium_e2e::ClientError::Disconnected),
            "{e:?}"
        ),
    }
    let gone = |pid: &i32| !alive(*pid);
    assert!(
        wait_until(Duration::from_secs(2), || job_pids.iter().all(gone)
            && gone(&spawner)),
        "job processes {job_pids:?} or spawner {spawner} outlived the daemon"
    );
    assert!(!daemon.socket().exists(), "socket file left behind");
    assert_eq!(
        daemon.cgroup_subtree_dirs(),
        Vec::<std::path::PathBuf>::new()
    );
}

/// ctrl-c on `viv run` cancels the job and exits 130; a reader that goes away
/// (`viv run x.py | head -1`) cancels it too, and viv exits 141 like a process killed
/// by SIGPIPE.
#[tokio::test(flavor = "multi_thread")]
async fn viv_cancels_on_ctrl_c_and_on_a_closed_pipe() {
    if !require_root() {
        return;
    }
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    let daemon = Daemon::start(DaemonOpts::default());
    let spawn = |code: &str| {
        let mut child = daemon
            .viv_command()
            .args(["run", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn viv");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(code.as_bytes())
            .unwrap();
        child
    };

    let mut viv = spawn(SLEEPER);
    let mut line = String::new();
    BufReader::new(viv.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "ready\n");
    let asked = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(viv.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = viv.wait().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    let mut stderr = String::new();
    viv.stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");

    let chatter = "import time\nwhile True:\n    print('line', flush=True)\n    time.sleep(0.01)\n";
    let mut viv = spawn(chatter);
    let mut out = viv.stdout.take().unwrap();
    let mut first = [0u8; 5];
    out.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"line\n");
    drop(out);
    let status = viv.wait().unwrap();
    assert_eq!(status.code(), Some(141));
    assert!(
        wait_until(Duration::from_secs(2), || daemon.job_processes().is_empty()),
        "{:?}",
        daemon.job_processes()
    );
}

/// Start a daemon with a running sleeper, then SIGKILL the daemon. Returns the daemon and
/// the host pids of the job's processes and of the spawner.
async fn crash_with_a_running_job() -> (Daemon, Vec<i32>) {
    let mut daemon = Daemon::start(DaemonOpts::default());
    let mut client = daemon.client().await;
    let mut job = client.submit(&Job::new(SLEEPER), NO_STDIN).await.unwrap();
    wait_for_stdout(&mut job, "ready").await;
    let mut pids: Vec<i32> = daemon.job_processes().iter().map(|p| p.pid).collect();
    assert!(!pids.is_empty());
    pids.push(daemon.spawner_pid().expect("spawner"));
    assert!(!daemon.cgroup_leftovers().is_empty());
    daemon.kill_hard();
    assert!(
        finish(&mut job).await.is_err(),
        "an outcome from a dead daemon"
    );
    (daemon, pids)
}

/// `/proc/<pid>/stat` of those of `pids` still alive.
fn still_alive(pids: &[i32]) -> Vec<String> {
    pids.iter()
        .filter(|p| alive(**p))
        .map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default())
        .collect()
}

/// A daemon killed with SIGKILL takes its spawner and its jobs with it (parent-death
/// signals), rather than leaving them running with no one to enforce their wall clock.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_daemon_takes_its_jobs_with_it() {
    if !require_root() {
        return;
    }
    let (_daemon, pids) = crash_with_a_running_job().await;
    let gone = wait_until(Duration::from_secs(2), || still_alive(&pids).is_empty());
    assert!(
        gone,
        "outlived the daemon's SIGKILL: {:?}",
        still_alive(&pids)
    );
}

/// A new daemon on a crashed one's config takes over the stale socket and reaps whatever
/// the crash left in its cgroup subtree, processes included.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_daemon_reaps_what_a_crash_left() {
    if !require_root() {
        return;
    }
    let (mut daemon, pids) = crash_with_a_running_job().await;
    daemon.restart().expect("a new daemon on the old socket");
    assert_eq!(daemon.cgroup_leftovers(), Vec::<std::path::PathBuf>::new());
    let gone = wait_until(Duration::from_secs(2), || still_alive(&pids).is_empty());
    assert!(gone, "survived the restart: {:?}", still_alive(&pids));
    assert!(
        daemon.state_leftovers().is_empty(),
        "{:?}",
        daemon.state_leftovers()
    );
    let done = daemon.run("print('again')").await;
    assert_eq!(done.outcome.reason, Reason::Ok, "{}", describe(&done));
}
