//! One job from slot to outcome: queue, plan, hand to the spawner, stream output with
//! caps, forward stdin, honour cancel, and report.

use super::conn::{send, send_error};
use super::lifecycle::Refusal;
use super::outcome::{self, StreamFacts};
use super::{ActiveProfile, Daemon};
use crate::policy::weaken::Layer;
use crate::profile::{JobLimits, OutputPolicy};
use nix::fcntl::OFlag;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch, Notify};
use tokio_seqpacket::UnixSeqpacket;
use tracing::Instrument;
use vivarium_proto::{ErrorCode, Event, Isolation, Reason, SandboxStart, MAX_PAYLOAD_CHUNK};
use vivarium_sandbox::ipc::{FromSpawner, JobReport, KillCause};
use vivarium_sandbox::plan;

pub struct JobRequest {
    pub profile: String,
    pub args: Vec<String>,
    pub code: Vec<u8>,
    /// Input files, placed under `/work` before the code runs.
    pub inputs: super::inputs::Inputs,
    pub limits: JobLimits,
    pub uid: u32,
    /// The profile as activated when the job was submitted (a reload does not change it).
    pub active: Arc<ActiveProfile>,
    /// Checked requirements (explicit and PEP 723); empty: no package environment.
    pub packages: Vec<crate::packages::spec::Req>,
    /// Protocol 3+: the client sends stdin against credit; each chunk written to the job
    /// gives its bytes back as `StdinCredit`.
    pub credits: bool,
    /// Protocol 5+: the client is told how the job's sandbox was made (`Event::Sandbox`).
    pub sandbox_event: bool,
    /// Protocol 8+: what to return as artifacts; `None`: nothing (and no `Artifacts`).
    pub outputs: Option<super::artifacts::Wanted>,
}

/// The longest a job waits for the sandbox being built for its empty pool (a build is
/// tens of milliseconds; past this the machine is overloaded, and the job starts cold).
const CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

pub async fn run(
    daemon: Arc<Daemon>,
    sock: Arc<UnixSeqpacket>,
    mut req: JobRequest,
    stdin: Option<mpsc::UnboundedReceiver<super::conn::StdinChunk>>,
    cancel: Arc<Notify>,
    over: Arc<AtomicBool>,
) {
    let job_id = daemon.next_job.fetch_add(1, Ordering::Relaxed);
    let span = tracing::info_span!("job", job_id, profile = %req.profile, uid = req.uid);
    async move {
        // Admission: not while draining, and within the uid's quota.
        let per_uid = daemon.live().config.max_jobs_per_uid;
        let _admission = match daemon.jobs.admit(req.uid, per_uid) {
            Ok(a) => a,
            Err(refusal) => {
                over.store(true, Ordering::SeqCst);
                let (code, msg) = match refusal {
                    Refusal::Draining => (ErrorCode::ShuttingDown, "the daemon is shutting down; retry later".to_owned()),
                    Refusal::Quota(n) => (ErrorCode::Busy, format!("uid {} already has {n} jobs running or queued (max_jobs_per_uid); retry later", req.uid)),
                };
                send_error(&sock, code, msg).await;
                return;
            }
        };
        // A slot, or a place in the queue, or Busy.
        let permit = match daemon.slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let position = daemon.queued.fetch_add(1, Ordering::SeqCst);
                if position >= daemon.live().config.max_queued_jobs {
                    daemon.queued.fetch_sub(1, Ordering::SeqCst);
                    over.store(true, Ordering::SeqCst);
                    send_error(&sock, ErrorCode::Busy, format!("all {} job slots and {} queue places are taken; retry later", daemon.config.max_concurrent_jobs, daemon.live().config.max_queued_jobs)).await;
                    return;
                }
                send(&sock, &Event::Queued { position: position as u32 }).await;
                let acquired = tokio::select! {
                    p = daemon.slots.clone().acquire_owned() => Ok(p.ok()),
                    () = cancel.notified() => Err("cancelled while queued"),
                    () = daemon.jobs.draining() => Err("cancelled while queued: the daemon is shutting down"),
                };
                daemon.queued.fetch_sub(1, Ordering::SeqCst);
                match acquired {
                    Ok(Some(p)) => p,
                    Ok(None) | Err(_) => {
                        over.store(true, Ordering::SeqCst);
                        let why = acquired.err().unwrap_or("cancelled while queued");
                        let outcome = outcome::not_started(job_id, &req.profile, Reason::Cancelled, why);
                        send(&sock, &Event::Finished(Box::new(outcome))).await;
                        return;
                    }
                }
            }
        };
        // A warm sandbox, if one fits (it brings its packages, if any, installed).
        let warm = if super::warm::eligible(&daemon, &req.active, &req.limits, &req.packages) {
            let own = req.active.profile.default_limits();
            let pooled = req.limits.memory_bytes == own.memory_bytes && req.limits.pids == own.pids;
            let taken = if pooled {
                daemon.warm.take(&super::warm::PoolKey::job(&req.profile), &req.active).sandbox(CLAIM_WAIT).await
            } else {
                None
            };
            match taken {
                // None ready (or other limits): with a zygote, fork one for this job now (a
                // few ms) rather than start cold.
                None if req.active.profile.file.warm.zygote => super::warm::build(&daemon, &req.active, &req.limits)
                    .await
                    .inspect_err(|why| tracing::warn!(error = %vivarium_proto::error_chain(why), "no sandbox from the zygote; starting cold"))
                    .ok(),
                found => found,
            }
        } else {
            None
        };
        // Held until the outcome is sent: the pool the sandbox came from refills after.
        let mut warm = warm;
        let _taker = warm.as_mut().and_then(|w| w.taker.take());
        // The install phase, holding the job's slot: its own sandbox, before the run.
        let env = if let Some(report) = warm.as_ref().and_then(|w| w.packages_report()) {
            send(&sock, &Event::Packages(report)).await;
            None
        } else if req.packages.is_empty() || warm.is_some() {
            None
        } else {
            match super::packages::for_job(&daemon, &req.active, &req.packages, &cancel).await {
                Ok(ready) => {
                    send(&sock, &Event::Packages(ready.report())).await;
                    Some(ready)
                }
                Err(e) => {
                    over.store(true, Ordering::SeqCst);
                    tracing::info!(code = ?e.code, package = ?e.package, error = %e.message, "packages refused");
                    send_error(&sock, e.code, e.message).await;
                    return;
                }
            }
        };
        let env_dir = env.as_ref().map(|r| r.entry.env());
        // The input files' bytes go into the sandbox's header or memfd, and are dropped
        // once copied there (not held for the whole job).
        let inputs = std::mem::take(&mut req.inputs);
        let result = execute(&daemon, &sock, job_id, &req, inputs, stdin, &cancel, permit, env_dir.as_deref(), warm).await;
        drop(env);
        over.store(true, Ordering::SeqCst);
        match result {
            Ok(outcome) => {
                tracing::info!(reason = ?outcome.reason, exit = ?outcome.exit, wall_ms = outcome.usage.wall_ms, "job finished");
                send(&sock, &Event::Finished(Box::new(outcome))).await;
            }
            Err(e) => {
                let msg = vivarium_proto::error_chain(&e);
                tracing::error!(error = %msg, "job failed before it started");
                send_error(&sock, ErrorCode::Internal, msg).await;
            }
        }
        // The job is over for its client: a pool may refill now (a build started before
        // the outcome went out would compete with sending it).
        daemon.warm.nudge();
    }
    .instrument(span)
    .await
}

/// Why a sandbox could not be handed to the spawner.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LaunchError {
    #[error("pipe")]
    Pipe(#[source] nix::Error),
    #[error("memfd")]
    Memfd(#[source] nix::Error),
    #[error("memfd write")]
    MemfdWrite(#[source] std::io::Error),
    #[error("memfd seal")]
    MemfdSeal(#[source] nix::Error),
    #[error("memfd seek")]
    MemfdSeek(#[source] nix::Error),
    #[error(transparent)]
    Spawner(#[from] super::spawner_client::SpawnerError),
}

/// Why a job failed before it started (its client gets an internal error).
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error("pipe")]
    Pipe(#[source] std::io::Error),
    #[error("the spawner went away")]
    SpawnerGone,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), LaunchError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(LaunchError::Pipe)
}

/// A sandbox in the spawner's hands: its messages, and our ends of its stdio pipes.
pub(crate) struct Launched {
    pub events: mpsc::UnboundedReceiver<FromSpawner>,
    /// Write end of the sandbox's stdin (dropping it gives EOF).
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Our end of the outputs link: a collection request written here before the job
    /// can end makes its init collect its artifacts (`collect_for_job`).
    pub outputs: OwnedFd,
}

/// Hand `plan` to the spawner with `code` in a sealed memfd and fresh stdio pipes: the
/// one way a job, a warm sandbox or a package install gets its sandbox.
pub(crate) async fn launch(
    daemon: &Daemon,
    plan: &plan::JobPlan,
    code: &[u8],
) -> Result<Launched, LaunchError> {
    launch_parts(daemon, plan, &[code], None).await
}

/// [`launch`] with the memfd's bytes in `parts`, one after the other (a cold job's
/// code, then its input files' bytes).
async fn launch_parts(
    daemon: &Daemon,
    plan: &plan::JobPlan,
    code: &[&[u8]],
    outputs: Option<&[u8]>,
) -> Result<Launched, LaunchError> {
    let (in_r, in_w) = pipe()?;
    let l = spawn_with(daemon, plan, code, in_r, outputs).await?;
    Ok(Launched {
        events: l.events,
        stdin: in_w,
        stdout: l.stdout,
        stderr: l.stderr,
        outputs: l.outputs,
    })
}

/// A sandbox in the spawner's hands whose stdin is the caller's (a session's control
/// link): its messages and our ends of its stdout and stderr pipes and outputs link.
pub(crate) struct LaunchedWith {
    pub events: mpsc::UnboundedReceiver<FromSpawner>,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub outputs: OwnedFd,
}

/// [`launch`], with `stdin` for the sandbox's stdin.
pub(crate) async fn launch_with_stdin(
    daemon: &Daemon,
    plan: &plan::JobPlan,
    code: &[u8],
    stdin: OwnedFd,
) -> Result<LaunchedWith, LaunchError> {
    spawn_with(daemon, plan, &[code], stdin, None).await
}

/// Hand `plan` to the spawner; with `outputs`, a collection request written on the
/// outputs link before the sandbox exists (so it is there when the job ends).
async fn spawn_with(
    daemon: &Daemon,
    plan: &plan::JobPlan,
    code: &[&[u8]],
    in_r: OwnedFd,
    outputs_request: Option<&[u8]>,
) -> Result<LaunchedWith, LaunchError> {
    let code = code_memfd(code)?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (outputs, init_outputs) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(LaunchError::Pipe)?;
    if let Some(request) = outputs_request {
        write_request(&outputs, request).map_err(LaunchError::MemfdWrite)?;
    }
    let fds = [
        code.as_fd(),
        in_r.as_fd(),
        out_w.as_fd(),
        err_w.as_fd(),
        init_outputs.as_fd(),
    ];
    let events = daemon.spawner.spawn(plan, fds).await?;
    // The spawner has its copies now; ours would keep the pipes open forever.
    drop((code, in_r, out_w, err_w, init_outputs));
    Ok(LaunchedWith {
        events,
        stdout: out_r,
        stderr: err_r,
        outputs,
    })
}

/// Write a collection request (`artifacts::request_bytes`) on an outputs link, framed
/// with its length; it fits the socket's buffer (at most a few KiB), so it never blocks.
pub(super) fn write_request(link: &OwnedFd, request: &[u8]) -> std::io::Result<()> {
    let mut framed = (request.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(request);
    let n = nix::sys::socket::send(
        std::os::fd::AsRawFd::as_raw_fd(link),
        &framed,
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    )?;
    if n != framed.len() {
        return Err(std::io::Error::other(
            "the collection request was cut short",
        ));
    }
    Ok(())
}

/// Read a job's bundle from its outputs link until init shuts it (at most `most` bytes
/// and one more: a longer bundle is refused whole). Returns the bytes.
fn read_bundle(link: OwnedFd, most: u64) -> tokio::task::JoinHandle<std::io::Result<Vec<u8>>> {
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let std = std::os::unix::net::UnixStream::from(link);
        std.set_nonblocking(true)?;
        let mut stream = tokio::net::UnixStream::from_std(std)?;
        let mut bundle = Vec::new();
        loop {
            // Straight into the bundle's spare room, which is never zeroed (most jobs
            // leave nothing: a zeroed buffer per job was a cost of every job).
            bundle.reserve(64 * 1024);
            let n = match stream.read_buf(&mut bundle).await {
                // (A killed init that had not read the request resets the link.)
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
                n => n?,
            };
            if n == 0 {
                return Ok(bundle);
            }
            if bundle.len() as u64 > most {
                return Ok(bundle); // (refused by the parser; init gets EPIPE)
            }
        }
    })
}

/// The longest the server waits, after a job's end, for its init to finish writing the
/// artifacts (a collection reads at most the profile's caps from a tmpfs: milliseconds).
const COLLECT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Once the job is over: wait for its bundle, parse it, send the artifacts and the
/// report (before the outcome).
async fn send_artifacts(
    sock: &UnixSeqpacket,
    wanted: super::artifacts::Wanted,
    caps: vivarium_sandbox::outputs::OutputCaps,
    bundle: tokio::task::JoinHandle<std::io::Result<Vec<u8>>>,
    killed: Option<KillCause>,
) {
    use vivarium_proto::ArtifactsStatus;
    let got = match tokio::time::timeout(COLLECT_WAIT, bundle).await {
        Ok(Ok(Ok(b))) => Ok(b),
        Ok(Ok(Err(e))) => Err(format!("reading the artifacts failed: {e}")),
        Ok(Err(_)) => Err("reading the artifacts failed".to_owned()),
        Err(_) => Err(format!(
            "the sandbox did not finish collecting the artifacts within {} s",
            COLLECT_WAIT.as_secs()
        )),
    };
    let collected = match got {
        Ok(b) if b.is_empty() => Err(ArtifactsStatus::NotCollected(match killed {
            Some(cause) => format!(
                "the job was killed ({}) before its artifacts were collected",
                kill_cause_text(cause)
            ),
            None => "the sandbox ended before its artifacts were collected".to_owned(),
        })),
        Ok(b) => super::artifacts::parse_off_thread(b, wanted, caps)
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "an output bundle was refused");
                ArtifactsStatus::NotCollected(format!("the sandbox's answer was refused: {e}"))
            }),
        Err(why) => Err(ArtifactsStatus::NotCollected(why)),
    };
    super::artifacts::send(sock, collected, &caps).await;
}

fn kill_cause_text(cause: KillCause) -> &'static str {
    match cause {
        KillCause::Timeout => "wall-clock limit",
        KillCause::CpuLimit => "CPU limit",
        KillCause::OutputLimit => "output limit",
        KillCause::Cancelled => "cancelled",
        KillCause::Shutdown => "the daemon is shutting down",
    }
}

/// A pipe that is to carry `bytes` (a job's input files ahead of its stdin) made
/// larger than its 64 KiB, up to 1 MiB (the kernel's `pipe-max-size` default): each
/// 64 KiB otherwise costs a wake-up of the reader and one of the writer, which made
/// most of a 10 MB file's time (bench/files.py). Best effort: the data goes through
/// either way.
pub(super) fn widen_pipe(fd: &OwnedFd, bytes: usize) {
    const MOST: usize = 1 << 20;
    if bytes > 64 * 1024 {
        let size = bytes.min(MOST).next_power_of_two().min(MOST) as i32;
        let _ = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETPIPE_SZ(size));
    }
}

/// The script in a sealed memfd: the spawner and the job's init can read it but
/// nobody can change it.
fn code_memfd(code: &[&[u8]]) -> Result<OwnedFd, LaunchError> {
    use nix::sys::memfd::{memfd_create, MFdFlags};
    use std::io::Write;
    let fd = memfd_create(
        "vivarium-code",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(LaunchError::Memfd)?;
    let mut file = std::fs::File::from(fd);
    for part in code {
        file.write_all(part).map_err(LaunchError::MemfdWrite)?;
    }
    let fd = OwnedFd::from(file);
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    fcntl(
        &fd,
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_SEAL,
        ),
    )
    .map_err(LaunchError::MemfdSeal)?;
    nix::unistd::lseek(&fd, 0, nix::unistd::Whence::SeekSet).map_err(LaunchError::MemfdSeek)?;
    Ok(fd)
}

fn receiver(fd: OwnedFd) -> Result<tokio::net::unix::pipe::Receiver, JobError> {
    tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(JobError::Pipe)
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    job_id: u64,
    req: &JobRequest,
    inputs: super::inputs::Inputs,
    stdin: Option<mpsc::UnboundedReceiver<super::conn::StdinChunk>>,
    cancel: &Arc<Notify>,
    permit: tokio::sync::OwnedSemaphorePermit,
    env: Option<&std::path::Path>,
    warm: Option<super::warm::WarmSandbox>,
) -> Result<vivarium_proto::Outcome, JobError> {
    let active = &req.active;
    // `Started` (with a warm sandbox's own id: it was built before this job came), and
    // from protocol 5 how the sandbox was made.
    let mut started = vec![Event::Started {
        job_id: warm.as_ref().map_or(job_id, |w| w.job_id),
        profile: req.profile.clone(),
    }];
    if req.sandbox_event {
        started.push(Event::Sandbox(match &warm {
            None => SandboxStart::Cold,
            Some(w) if w.forked => SandboxStart::Forked {
                sandbox_id: w.job_id,
                ready: w.was_ready,
            },
            Some(w) => SandboxStart::Ready {
                sandbox_id: w.job_id,
            },
        }));
    }
    // A warm sandbox's environment stays in use (not evictable) until the job is over.
    let mut _warm_env = None;
    let caps = active.profile.output_caps();
    let request = req
        .outputs
        .as_ref()
        .map(|w| super::artifacts::request_bytes(w, &caps));
    let mut outputs_link = None;
    let (job_id, mut events, stdin_prefix, in_w, out_r, err_r, mut landlock) = match warm {
        Some(w) => {
            _warm_env = w.env;
            // The collection request first: it is on the link before the job can end.
            if let Some(request) = &request {
                match write_request(&w.outputs, request) {
                    Ok(()) => outputs_link = Some(w.outputs),
                    Err(e) => tracing::warn!(error = %e, "no collection request"),
                }
            }
            // The sandbox exists already: its deadlines start now, with the delivery.
            tracing::debug!(sandbox = w.job_id, "warm sandbox");
            daemon
                .spawner
                .arm(w.job_id, req.limits.wall_ms, req.limits.cpu_ms)
                .await;
            // The header (and code) goes into the interpreter's empty stdin pipe here,
            // as much as fits without blocking (the rest is the stdin task's), not from
            // the stdin task: that task starts on another worker thread, a wake-up later.
            // The events follow: the job starts before the client reads them (its output
            // cannot overtake them: the pumps start below).
            let files = inputs.plan();
            let mut header = plan::warm_header(&req.args, &req.code, &files, &inputs.bytes);
            drop(inputs);
            widen_pipe(&w.stdin, header.len());
            let written =
                nix::fcntl::fcntl(&w.stdin, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
                    .and_then(|_| nix::unistd::write(&w.stdin, &header))
                    .unwrap_or(0);
            header.drain(..written);
            for event in &started {
                send(sock, event).await;
            }
            let landlock = Some(w.landlock);
            (
                w.job_id, w.events, header, w.stdin, w.stdout, w.stderr, landlock,
            )
        }
        None => {
            for event in &started {
                send(sock, event).await;
            }
            let mut plan = crate::policy::plan::build(
                job_id,
                &active.profile,
                &req.limits,
                &req.args,
                active.seccomp.clone(),
                daemon.facts.job_cgroups(),
            );
            if let Some(env) = env {
                crate::packages::install::use_env(&mut plan, env);
            }
            // The input files' bytes follow the code in the memfd (init places them).
            plan.inputs = inputs.plan();
            let l = launch_parts(
                daemon,
                &plan,
                &[&req.code, &inputs.bytes],
                request.as_deref(),
            )
            .await?;
            drop(inputs);
            if request.is_some() {
                outputs_link = Some(l.outputs);
            }
            (
                job_id,
                l.events,
                Vec::new(),
                l.stdin,
                l.stdout,
                l.stderr,
                None,
            )
        }
    };
    // Past the drain's grace period a job that only now reached the spawner is killed.
    let (_running, late) = daemon.jobs.running(job_id);
    if late {
        daemon.spawner.kill(job_id, KillCause::Shutdown).await;
    }

    let kill_on_cap = active.profile.file.limits.on_output_limit == OutputPolicy::Kill;
    let over_cap = Arc::new(Notify::new());
    // Told to the pumps once the spawner reports the job over (or if this returns early).
    let (job_ended, ended) = watch::channel(false);
    let cap = Cap {
        bytes: req.limits.output_bytes,
        past: if kill_on_cap {
            PastCap::Stop
        } else {
            PastCap::Discard
        },
        over: over_cap.clone(),
        ended,
    };
    let bundle = outputs_link.map(|l| read_bundle(l, super::artifacts::max_bundle_len(&caps)));
    let out = tokio::spawn(pump(receiver(out_r)?, sock.clone(), true, cap.clone()));
    let err = tokio::spawn(pump(receiver(err_r)?, sock.clone(), false, cap));
    let credits = req.credits.then(|| sock.clone());
    let stdin_task = tokio::spawn(feed_stdin(in_w, stdin_prefix, stdin, credits));

    let mut killed = late;
    // A profile with `network.egress`: its proxy, for as long as the job runs.
    let mut _proxy = None;
    let report: JobReport = loop {
        tokio::select! {
            msg = events.recv() => match msg {
                Some(FromSpawner::Running { landlock: l, .. }) => landlock = Some(l),
                Some(FromSpawner::Egress { listener, .. }) => {
                    let policy = crate::egress::EgressPolicy::new(
                        active.profile.file.network.egress_allow(),
                    );
                    match crate::egress::start(listener.take(), policy, job_id) {
                        Ok(task) => _proxy = Some(task),
                        Err(e) => {
                            // Its only way out is missing: the job runs with none (the
                            // proxy's port refuses), and the log says why.
                            tracing::error!(error = %e, "egress proxy not started");
                        }
                    }
                }
                Some(FromSpawner::Finished { report, .. }) => break *report,
                Some(_) => {}
                None => return Err(JobError::SpawnerGone),
            },
            () = cancel.notified(), if !killed => {
                killed = true;
                daemon.spawner.kill(job_id, KillCause::Cancelled).await;
            }
            () = over_cap.notified(), if !killed && kill_on_cap => {
                killed = true;
                daemon.spawner.kill(job_id, KillCause::OutputLimit).await;
            }
        }
    };
    // A pump stopped at its cap may read what is left in its pipe now.
    let _ = job_ended.send(true);
    stdin_task.abort();
    // Its last credit event, if any, must go out before `Finished`.
    let _ = stdin_task.await;
    // Every process of the job is gone, so the pipes reach EOF promptly. Free the slot
    // first all the same: a pump blocked on a client that stops reading would otherwise
    // hold it for as long as that client likes.
    drop(permit);
    let (stdout_bytes, stdout_truncated) = out.await.unwrap_or((0, false));
    let (stderr_bytes, stderr_truncated) = err.await.unwrap_or((0, false));
    let streams = StreamFacts {
        stdout_bytes,
        stderr_bytes,
        stdout_truncated,
        stderr_truncated,
    };
    let sec = &active.profile.file.security;
    // (A test-only weakened daemon reports what it left out: crate::policy::weaken.)
    let weak = &daemon.facts.weakened;
    let keeps_root = weak.drops(Layer::Caps) && !daemon.facts.rootless;
    let isolation = Isolation {
        namespaces: [
            ("user", None),
            ("mount", None),
            ("pid", Some(Layer::PidNs)),
            ("net", Some(Layer::NetNs)),
            ("ipc", None),
            ("uts", Some(Layer::UtsNs)),
            ("cgroup", Some(Layer::CgroupNs)),
        ]
        .into_iter()
        .filter(|(_, layer)| !layer.is_some_and(|l| weak.drops(l)))
        .map(|(ns, _)| ns.to_owned())
        // As the spawner made it (a root daemon, a kernel with time namespaces).
        .chain(report.time_namespace.then(|| "time".to_owned()))
        .collect(),
        uid: if keeps_root { 0 } else { plan::SANDBOX_UID },
        gid: if keeps_root { 0 } else { plan::SANDBOX_GID },
        no_new_privs: report.landlock.is_some(),
        capabilities_dropped: report.landlock.is_some() && !weak.drops(Layer::Caps),
        landlock_abi: u32::from(sec.landlock_abi).min(daemon.facts.landlock_abi),
        landlock: report.landlock.or(landlock),
        seccomp_filters: if report.landlock.is_some() && !weak.drops(Layer::Seccomp) {
            // (A job forked from a zygote has the zygote's filters and two of its own.)
            report.seccomp_filters.unwrap_or(active.seccomp_filters)
        } else {
            0
        },
        cgroup: report.cgroup,
        not_enforced: active.not_enforced.clone(),
    };
    match (&req.outputs, bundle) {
        (Some(wanted), Some(bundle)) => {
            send_artifacts(sock, wanted.clone(), caps, bundle, report.killed).await;
        }
        (Some(_), None) => {
            let why = vivarium_proto::ArtifactsStatus::NotCollected(
                "the sandbox could not be asked for its artifacts".into(),
            );
            super::artifacts::send(sock, Err(why), &caps).await;
        }
        (None, _) => {}
    }
    Ok(outcome::outcome(
        job_id,
        &req.profile,
        &report,
        streams,
        isolation,
    ))
}

/// What a stream's pump does once the job has written past the stream's cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PastCap {
    /// `on_output_limit = "kill"`: stop reading, so that the job's next write blocks on
    /// the full pipe until the kill lands; what it left in the pipe is read once it has
    /// ended. How much it produces then does not depend on how fast it writes.
    Stop,
    /// `on_output_limit = "truncate"`: the job runs on, so go on reading (and dropping)
    /// for as long as it writes, or it would block for good.
    Discard,
}

/// A stream's cap and what its pump needs to honour it (the same for both streams).
#[derive(Clone)]
struct Cap {
    bytes: u64,
    past: PastCap,
    /// Notified (once per stream) when a stream passes `bytes`.
    over: Arc<Notify>,
    /// Becomes `true` when the spawner reports the job over; a dropped sender means the
    /// same (`execute` gave up on the job).
    ended: watch::Receiver<bool>,
}

/// Forward one output stream, at most `cap.bytes` of it; returns (bytes read from the
/// job, truncated). Past the cap, with [`PastCap::Stop`], nothing more is read until the
/// job has ended, then only what it left in the pipe, so a job reaching the cap has at
/// most `cap + MAX_PAYLOAD_CHUNK + the pipe's capacity` bytes read from it however fast
/// it writes (a job can enlarge its pipe, F_SETPIPE_SZ, only up to
/// `/proc/sys/fs/pipe-max-size`: pipe(7)). The read end stays open meanwhile: the writer
/// blocks, where a closed one would kill it with SIGPIPE before the OutputLimit kill.
async fn pump(
    mut pipe: tokio::net::unix::pipe::Receiver,
    sock: Arc<UnixSeqpacket>,
    stdout: bool,
    mut cap: Cap,
) -> (u64, bool) {
    // Read into spare room, never zeroed: most jobs write little or nothing, and a
    // zeroed chunk per stream was a cost of every job.
    let mut buf = Vec::with_capacity(MAX_PAYLOAD_CHUNK);
    let mut total = 0u64;
    let mut client_gone = false;
    loop {
        buf.clear();
        let n = match pipe.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let room = cap.bytes.saturating_sub(total) as usize;
        let was_over = total > cap.bytes;
        total += n as u64;
        if room > 0 && !client_gone {
            let chunk = buf[..n.min(room)].to_vec();
            let event = if stdout {
                Event::Stdout(chunk)
            } else {
                Event::Stderr(chunk)
            };
            client_gone = !send(&sock, &event).await;
        }
        if !was_over && total > cap.bytes {
            cap.over.notify_one();
            if cap.past == PastCap::Stop {
                let _ = cap.ended.wait_for(|ended| *ended).await;
                total += drain_left(&mut pipe).await;
                break;
            }
        }
    }
    (total, total > cap.bytes)
}

/// Read (and drop) what an ended job left in `pipe`: up to EOF, at most the pipe's
/// capacity (F_GETPIPE_SZ, fcntl(2)). The job's processes, the pipe's only writers, are
/// gone by now, so the pipe holds all there is and EOF follows it; the bound is for a
/// writer that outlived its job all the same. Returns the bytes read.
async fn drain_left(pipe: &mut tokio::net::unix::pipe::Receiver) -> u64 {
    use nix::fcntl::{fcntl, FcntlArg};
    let mut buf = vec![0u8; MAX_PAYLOAD_CHUNK];
    // (It cannot fail on a pipe; pipe-max-size's default, should it.)
    let capacity = fcntl(pipe.as_fd(), FcntlArg::F_GETPIPE_SZ)
        .map_or(1 << 20, |c| u64::try_from(c).unwrap_or(0));
    let mut drained = 0u64;
    while drained < capacity {
        let want = buf.len().min((capacity - drained) as usize);
        match pipe.read(&mut buf[..want]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n as u64,
        }
    }
    drained
}

/// Write `prefix` (what did not fit of a warm sandbox's job header), then the job's
/// stdin; closing the write end at the end gives the job EOF.
pub(super) async fn feed_stdin(
    fd: OwnedFd,
    prefix: Vec<u8>,
    stdin: Option<mpsc::UnboundedReceiver<super::conn::StdinChunk>>,
    credits: Option<Arc<UnixSeqpacket>>,
) {
    if prefix.is_empty() && stdin.is_none() {
        return; // dropping the write end: the job reads EOF
    }
    let Ok(mut pipe) = tokio::net::unix::pipe::Sender::from_owned_fd(fd) else {
        return;
    };
    if pipe.write_all(&prefix).await.is_err() {
        return;
    }
    let Some(mut rx) = stdin else {
        return;
    };
    while let Some(chunk) = rx.recv().await {
        // The chunk's share of the queued stdin is given back once it is written.
        if pipe.write_all(&chunk.data).await.is_err() {
            break;
        }
        if let Some(sock) = &credits {
            let written = chunk.data.len() as u64;
            drop(chunk);
            send(sock, &Event::StdinCredit(written)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command, Stdio};
    use vivarium_proto::{decode, MAX_FRAME};

    /// `cmd` started with the write end of a fresh pipe as its stdout (it stands for the
    /// job), and our read end, ready for a pump. (`cmd` is consumed: it holds a copy of
    /// the write end, and the pipe reaches EOF only once that is closed too.)
    fn writer_into_pipe(mut cmd: Command) -> (tokio::net::unix::pipe::Receiver, Child) {
        let (r, w) = pipe().unwrap();
        let child = cmd
            .stdout(Stdio::from(w))
            .spawn()
            .expect("spawn the writer");
        (receiver(r).unwrap(), child)
    }

    fn cap(bytes: u64, past: PastCap) -> (Cap, watch::Sender<bool>) {
        let (job_ended, ended) = watch::channel(false);
        let over = Arc::new(Notify::new());
        (
            Cap {
                bytes,
                past,
                over,
                ended,
            },
            job_ended,
        )
    }

    /// What the client was sent: the bytes of every `Stdout` event until the pump is gone.
    async fn forwarded(client: &UnixSeqpacket) -> usize {
        let mut buf = vec![0u8; MAX_FRAME + 1];
        let mut bytes = 0;
        while let Ok(n @ 1..) = client.recv(&mut buf).await {
            match decode::<Event>(&buf[..n]).unwrap() {
                Event::Stdout(chunk) => bytes += chunk.len(),
                other => panic!("unexpected {other:?}"),
            }
        }
        bytes
    }

    /// `yes` writes as fast as the machine lets it: past the cap the pump reads nothing
    /// more until the job has ended, so it is left blocked on the full pipe, and what
    /// the pump reads in all is bounded by the pipe, not by the writer's speed.
    #[tokio::test]
    async fn past_the_cap_a_killed_stream_is_read_no_further_than_its_pipe() {
        let (pipe, mut writer) = writer_into_pipe(Command::new("yes"));
        let capacity = nix::fcntl::fcntl(pipe.as_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ);
        let capacity = u64::try_from(capacity.unwrap()).unwrap();
        let (sock, client) = UnixSeqpacket::pair().unwrap();
        let (cap, job_ended) = cap(1000, PastCap::Stop);
        let over = cap.over.clone();
        let pump = tokio::spawn(pump(pipe, Arc::new(sock), true, cap));
        over.notified().await;
        // It waits for the job's end however long that takes (the kill, in the daemon).
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(
            !pump.is_finished(),
            "the pump returned before the job ended"
        );
        writer.kill().unwrap();
        writer.wait().unwrap();
        job_ended.send(true).unwrap();
        let (read, truncated) = pump.await.unwrap();
        let bound = 1000 + MAX_PAYLOAD_CHUNK as u64 + capacity;
        assert!(truncated && read > 1000, "{read} bytes read");
        assert!(read <= bound, "{read} bytes read, more than {bound}");
        assert_eq!(forwarded(&client).await, 1000);
    }

    /// With `truncate` the job runs on: the pump reads to the end of everything it
    /// writes (far more than the pipe holds), without being told the job has ended.
    #[tokio::test]
    async fn past_the_cap_a_truncated_stream_is_read_to_its_end() {
        let total: u64 = 4 << 20;
        let mut head = Command::new("head");
        head.args(["-c", &total.to_string(), "/dev/zero"]);
        let (pipe, mut writer) = writer_into_pipe(head);
        let (sock, client) = UnixSeqpacket::pair().unwrap();
        let (cap, _job_ended) = cap(1000, PastCap::Discard);
        let pump = tokio::spawn(pump(pipe, Arc::new(sock), true, cap));
        assert_eq!(pump.await.unwrap(), (total, true));
        assert!(writer.wait().unwrap().success());
        assert_eq!(forwarded(&client).await, 1000);
    }
}
