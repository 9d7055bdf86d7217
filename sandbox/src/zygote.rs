//! The zygote: one interpreter per profile that has started and preloaded once, from
//! which each job's sandbox is forked (docs/ARCHITECTURE.md, "The zygote").
//!
//! The zygote itself is started by the spawner like any sandbox (every namespace, the
//! read-only root, pivot_root, a cgroup) except that its interpreter stays uid 0 of its
//! own user namespace with its capabilities there, and gets neither Landlock nor
//! seccomp: it must make each job's namespaces and mounts. It runs only our bootstrap
//! and the profile's preloads, never a job's code, and holds no secret (a job is a
//! copy of it). For each job it gets a plan and fds on its control socket, and (steps
//! Z1-Z4 of the crate's setup table):
//!
//! - Z1, the zygote (its request loop, [`serve`], in Rust: one call from its interpreter):
//!   `unshare(CLONE_NEWPID)` then fork, so the child is pid 1 of a pid namespace of its
//!   own; it sends the child's pidfd to the spawner. The child is the job's init, and
//!   runs no Python:
//! - Z2, init moves itself into the job's cgroup (writing `0` to the `tasks`/`cgroup.procs`
//!   files the spawner opened: a single-threaded process moving itself is the cheap
//!   attach), makes itself non-dumpable, unshares mount, network, IPC, UTS and cgroup
//!   namespaces, mounts the job's fresh tmpfs mounts, procfs and masks over the
//!   zygote's and its own cgroup read-only at /sys/fs/cgroup, sets the hostname and
//!   the rlimits; Z3, it forks the payload and stays as its reaper (the same code as
//!   a cold job's init: `init::supervise`).
//! - Z4, the payload (init's fork, the one copy that returns to the interpreter) unshares
//!   a user namespace of its own, whose maps init writes (uid and gid 1000 to the ids
//!   of the job's id slot in the zygote's namespace, `plan::ZYGOTE_JOB_IDS`: the
//!   payload's host uid is its own, neither init's nor another job's), then the same
//!   steps as a cold payload (P1-P7): setsid, stdio, every other fd closed, cwd,
//!   capabilities and ids, no_new_privs, Landlock, seccomp. Then it returns to the
//!   interpreter, which reads the job from stdin as a warm sandbox does.
//!
//! [`serve`] is called through the zygote library (crate `vivarium-zygote`); it is here
//! so that the job's setup is the same code as a cold job's.

use crate::confine::{confine, Confine, OtherFds, Privileges};
use crate::init::{supervise, Prepared};
use crate::plan::{
    JobPlan, MountStep, PlanKind, SANDBOX_GID, SANDBOX_UID, WARM_BOOTSTRAP, ZYGOTE_JOB_IDS,
};
use crate::report::{encode, Failure, InitMsg, PayloadMsg};
use crate::sys;
use crate::{mount, rlimit, SetupError, Step};
use nix::sched::CloneFlags;
use nix::sys::socket::MsgFlags;
use nix::unistd::Pid;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// The zygote's control socket (SOCK_SEQPACKET to the spawner) inside its interpreter.
pub const CTL_FD: i32 = 3;
/// The zygote library, open for the interpreter to load (`/proc/self/fd/4`).
pub const LIB_FD: i32 = 4;

/// The zygote's `-c` program: the warm bootstrap's functions, then the zygote's loop.
pub const ZYGOTE_BOOTSTRAP: &str = concat!(
    "_vivarium_zygote = True\n",
    include_str!("warm_bootstrap.py"),
    include_str!("zygote_bootstrap.py")
);

/// The file name of the zygote library (a `cdylib`), looked for next to the daemon's
/// binary, then in `../lib/vivarium/`.
pub const LIBRARY_NAME: &str = "libvivarium_zygote.so";

/// Where the zygote library is for a daemon whose binary is `exe`, if it is there.
pub fn find_library(exe: &std::path::Path) -> Option<std::path::PathBuf> {
    let dir = exe.parent()?;
    [
        dir.join(LIBRARY_NAME),
        dir.join("../lib/vivarium").join(LIBRARY_NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The plan that starts the zygote for `warm`, a warm sandbox's plan: the same
/// sandbox, with the zygote's program in place of the warm bootstrap.
pub fn zygote_plan(warm: &JobPlan, job_id: u64) -> JobPlan {
    let mut plan = warm.clone();
    plan.job_id = job_id;
    for arg in &mut plan.argv {
        if arg == WARM_BOOTSTRAP {
            ZYGOTE_BOOTSTRAP.clone_into(arg);
        }
    }
    // Numeric libraries are kept single-threaded by the bootstrap itself, which sets
    // their variables in os.environ before the preloads and removes them in each job:
    // nothing beyond the plan's own environment is in the zygote's exec-time
    // environment, which every forked job's /proc/self/environ shows.
    // The zygote's own root has no tmpfs mounts (empty directories in their places,
    // for its jobs' fresh ones: nothing to unmount per job) and no masks; its procfs
    // is the fully visible one that lets each job mount its own.
    plan.mounts = (plan.mounts.into_iter())
        .filter_map(|m| match m {
            MountStep::Tmpfs { path, .. } => Some(MountStep::Dir { path }),
            MountStep::Mask { .. } => None,
            other => Some(other),
        })
        .collect();
    if let PlanKind::Warm { zygote: Some(z) } = std::mem::replace(&mut plan.kind, PlanKind::Zygote)
    {
        plan.seccomp = z.seccomp;
        plan.cgroup = z.cgroup;
    }
    // The zygote keeps the view's mount points (empty) for its jobs, each of which
    // mounts its own cgroup there: the zygote's own would lie beneath every job's.
    plan.cgroup_view.clear();
    plan
}

/// What init hands to itself and to the payload across the payload's fork.
struct JobState {
    plan: JobPlan,
    prepared: Prepared,
    status: std::fs::File,
    stdio: [OwnedFd; 3],
    /// payload -> init: "my user namespace exists" (one byte).
    userns: (OwnedFd, OwnedFd),
    /// init -> payload: "your maps are written" (one byte).
    mapped: (OwnedFd, OwnedFd),
    /// payload -> init: [`PayloadMsg`]s; EOF after the report.
    exec: (OwnedFd, OwnedFd),
}

fn fail(status: &std::fs::File, e: &SetupError) -> ! {
    let mut w = status;
    let _ = w.write_all(&encode(&InitMsg::Failed(Failure::from(e))));
    sys::exit_now(121)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SetupError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SetupError::errno(Step::Pipe, e))
}

/// What the interpreter does around a fork (`os.fork`'s brackets), for the forks
/// [`serve`] makes, and the zygote library's part in each job's init.
pub struct Hooks {
    /// `PyOS_BeforeFork` (the import lock, the before-fork hooks), in the zygote.
    pub before_fork: extern "C" fn(),
    /// `PyOS_AfterFork_Parent`, in the zygote.
    pub after_parent: extern "C" fn(),
    /// Called first thing in each job's init, before its first allocation.
    pub in_init: fn(),
}

/// How [`serve`] ended in this process.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// The spawner hung up (or retired the zygote): the zygote exits.
    SpawnerGone,
    /// This is a job's payload with every layer in place: the interpreter runs the job.
    Payload,
}

/// Fds a request may carry: stdin, stdout, stderr, the status pipe, and one cgroup file
/// per hierarchy.
const REQUEST_FDS: usize = 16;

/// The zygote's request loop, run by its interpreter once it is ready (one call: no
/// Python runs in the zygote between requests, and so none writes to pages the zygote
/// shares with its jobs). For each request on `ctl` (a plan in `buf`, then fds):
/// `fork_job` between the interpreter's fork hooks, then the answer, `ok` with the
/// init's pidfd or `error: ...`, and the request's bytes cleared. Ended inits are
/// reaped when their pidfds (kept here) turn readable, so SIGCHLD needs no handler:
/// it keeps its default action, and an init that ends at once is a zombie with a pidfd
/// until then. Returns in the zygote when the spawner hangs up, and in each job's
/// payload; an `Err` is the loop's own (poll or receive), the zygote's end.
pub fn serve(ctl: BorrowedFd<'_>, buf: &mut [u8], hooks: &Hooks) -> std::io::Result<Served> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut inits: Vec<(libc::pid_t, OwnedFd)> = Vec::new();
    loop {
        let mut fds: Vec<PollFd<'_>> = std::iter::once(ctl)
            .chain(inits.iter().map(|(_, pidfd)| pidfd.as_fd()))
            .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
            .collect();
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let ready: Vec<bool> = (fds.iter())
            .map(|p| p.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let mut ended = ready[1..].iter();
        inits.retain(|&(pid, _)| {
            let gone = ended.next() == Some(&true);
            if gone {
                let flags = nix::sys::wait::WaitPidFlag::WNOHANG;
                let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), Some(flags));
            }
            !gone
        });
        if !ready[0] {
            continue;
        }
        let (len, fds) = match sys::recv_with_up_to::<REQUEST_FDS>(ctl, buf, MsgFlags::empty()) {
            Ok((0, _)) => return Ok(Served::SpawnerGone),
            Ok(request) => request,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                answer(
                    ctl,
                    Err(std::io::Error::other("request truncated (fds or bytes)")),
                );
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        (hooks.before_fork)();
        let forked = fork_job(&mut buf[..len], move || {
            (hooks.in_init)();
            fds
        });
        let init = match forked {
            Ok(Forked::Payload) => {
                // The pidfds here are the zygote's numbers, closed in init long since.
                std::mem::forget(inits);
                return Ok(Served::Payload);
            }
            Ok(Forked::Zygote(pid)) => sys::pidfd_open(pid).map(|pidfd| (pid, pidfd)),
            Err(e) => Err(e),
        };
        (hooks.after_parent)();
        buf[..len].fill(0);
        match init {
            Ok((pid, pidfd)) => {
                answer(ctl, Ok(pidfd.as_fd()));
                inits.push((pid, pidfd));
            }
            Err(e) => answer(ctl, Err(e)),
        }
    }
}

/// The zygote's answer to a request: `ok` with the init's pidfd, or why not.
fn answer(ctl: BorrowedFd<'_>, result: std::io::Result<BorrowedFd<'_>>) {
    // A failed send is the spawner's end, which the next receive sees.
    let _ = match result {
        Ok(pidfd) => sys::send_with_fds(ctl, b"ok", &[pidfd]),
        Err(e) => {
            let mut text = format!("error: {e}");
            text.truncate(200);
            sys::send_with_fds(ctl, text.as_bytes(), &[])
        }
    };
}

/// What [`fork_job`] returned in this process.
enum Forked {
    /// The zygote: the job's init has this pid.
    Zygote(libc::pid_t),
    /// The job's payload, every layer in place: the interpreter runs the job.
    Payload,
}

/// In the zygote, for each request: fork the job's init into a new pid namespace
/// (step Z1). Returns the init's pid in the zygote, and returns in the payload once its
/// setup is done; init's own copy never returns (steps Z2 and Z3: [`job_prepare`], the
/// payload's fork, [`job_init`]). Init runs no Python: whatever the interpreter did in
/// it wrote to pages it shares with the zygote, each first write a page copy.
///
/// `plan` is as for [`job_prepare`]; `in_init` is called first thing in init, before
/// its first allocation, and returns the job's fds (as for [`job_prepare`]): the
/// zygote library switches its arena on there, and owns the fds from then on (the
/// zygote closes its own copies). An `Err` is the zygote's: no child exists.
fn fork_job(plan: &mut [u8], in_init: impl FnOnce() -> Vec<OwnedFd>) -> std::io::Result<Forked> {
    new_pid_namespace()?;
    // SAFETY: the zygote is single-threaded: its bootstrap keeps the preloads' thread
    // pools at one and refuses to serve unless /proc/self/task lists one thread
    // (zygote_bootstrap.py), and `serve` starts none.
    #[allow(unsafe_code)]
    let forked = unsafe { sys::fork() }?;
    if let Some(init) = forked {
        return Ok(Forked::Zygote(init));
    }
    // The job's init, pid 1 of the new pid namespace.
    if sys::reset_sigchld_and_mask().is_err() {
        sys::exit_now(122);
    }
    let state = job_prepare(plan, in_init());
    // SAFETY: init is the zygote's fork, single-threaded like it.
    #[allow(unsafe_code)]
    let forked = unsafe { sys::fork() };
    match forked {
        Ok(Some(payload)) => job_init(state, payload),
        Ok(None) => {
            job_payload(state);
            Ok(Forked::Payload)
        }
        Err(e) => fail(
            &state.status,
            &SetupError::io(Step::Fork, "payload".as_ref(), &e),
        ),
    }
}

/// In the zygote, before each fork: the next child is pid 1 of a new pid namespace.
/// (`unshare(CLONE_NEWPID)` is refused while the namespace for children already differs
/// from the caller's own, as it does after the previous job's: it is reset first, with
/// `setns` to the zygote's own pid namespace.)
fn new_pid_namespace() -> std::io::Result<()> {
    let mut own = OWN_PID_NS.lock().unwrap_or_else(|p| p.into_inner());
    let fd = match own.as_ref() {
        Some(fd) => fd,
        None => own.insert(std::fs::File::open("/proc/self/ns/pid")?.into()),
    };
    nix::sched::setns(fd, CloneFlags::CLONE_NEWPID)?;
    nix::sched::unshare(CloneFlags::CLONE_NEWPID).map_err(std::io::Error::from)
}

/// The zygote's own pid namespace (for [`new_pid_namespace`]); closed in each child.
static OWN_PID_NS: Mutex<Option<OwnedFd>> = Mutex::new(None);

/// Step Z2, in the job's init (the zygote's fresh child). `plan`: the job's encoded plan,
/// cleared once decoded (the buffer is the zygote's request buffer: nothing of the plan
/// stays in memory the payload inherits). `fds`: the job's stdin, stdout and stderr,
/// the status pipe's write end, then the cgroup files to write `0` to. On failure
/// reports `Failed` on the status pipe and exits.
fn job_prepare(plan: &mut [u8], fds: Vec<OwnedFd>) -> JobState {
    std::panic::set_hook(Box::new(|_| sys::exit_now(123)));
    // Nothing of the zygote's stays open in the job.
    drop(OWN_PID_NS.lock().unwrap_or_else(|p| p.into_inner()).take());
    let mut fds = fds.into_iter();
    let (Some(stdin), Some(stdout), Some(stderr), Some(status)) =
        (fds.next(), fds.next(), fds.next(), fds.next())
    else {
        sys::exit_now(122)
    };
    let status = std::fs::File::from(status);
    let attach: Vec<OwnedFd> = fds.collect();
    // Only the job's fds stay open (and 0-2, the zygote's /dev/null and the daemon's
    // log, so that no new fd takes those numbers): nothing else the zygote holds, its
    // control socket (fd 3) included.
    let keep: Vec<u32> = [&stdin, &stdout, &stderr]
        .into_iter()
        .chain(&attach)
        .map(|f| f.as_raw_fd())
        .chain([status.as_raw_fd(), 0, 1, 2])
        .map(|fd| fd as u32)
        .collect();
    // SAFETY: init is a fresh fork of the zygote and goes on with `keep` alone (the job's
    // fds, its status pipe, 0-2): the zygote's objects for the others (its control
    // socket, the library's fd) are never used in it.
    #[allow(unsafe_code)]
    let closed = unsafe { sys::close_all_except(&keep) };
    if closed.is_err() {
        fail(
            &status,
            &SetupError::Other {
                step: Step::CloseRange,
                detail: "cannot close the zygote's fds".into(),
            },
        );
    }
    let state = prepare(plan, &attach).and_then(|(plan, prepared)| {
        Ok(JobState {
            plan,
            prepared,
            status: status
                .try_clone()
                .map_err(|e| SetupError::io(Step::Dup, "status".as_ref(), &e))?,
            stdio: [stdin, stdout, stderr],
            userns: pipe()?,
            mapped: pipe()?,
            exec: pipe()?,
        })
    });
    match state {
        Ok(state) => state,
        Err(e) => fail(&status, &e),
    }
}

fn prepare(encoded: &mut [u8], attach: &[OwnedFd]) -> Result<(JobPlan, Prepared), SetupError> {
    let plan: Option<JobPlan> = crate::ipc::decode(encoded);
    encoded.fill(0);
    let plan = plan.ok_or(SetupError::Other {
        step: Step::ZygotePlan,
        detail: "the job's plan does not decode".into(),
    })?;
    let prepared = Prepared::new(&plan).map_err(|e| SetupError::Other {
        step: Step::Prepare,
        detail: e.to_string(),
    })?;
    // The cgroup first, so that everything below is charged to the job; then check that
    // every hierarchy the spawner opened now lists us in the job's cgroup (fail closed:
    // a job never runs in the zygote's).
    crate::init::attach_self(attach, &format!("job-{}", plan.job_id))?;
    // The payload's host uid differs from ours, and we stay out of its reach anyway.
    sys::set_dumpable(false).map_err(|e| SetupError::io(Step::Dumpable, "/".as_ref(), &e))?;
    // A time namespace of its own, clocks near zero, for the payload this init forks
    // (a fork, not a CLONE_VM child: it may enter another time namespace).
    if plan.time_ns {
        crate::timens::unshare_near_zero()
            .map_err(|e| SetupError::io(Step::TimeNs, "/proc/self/timens_offsets".as_ref(), &e))?;
    }
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP
        | CloneFlags::CLONE_NEWNET;
    nix::sched::unshare(flags).map_err(|e| SetupError::errno(Step::Unshare, e))?;
    // The job's private loopback, in the network namespace just made (ours: the zygote's
    // user namespace owns it; the payload's own user namespace gets no say over it).
    if plan.network.loopback() {
        sys::loopback_up().map_err(|e| SetupError::io(Step::Loopback, "lo".as_ref(), &e))?;
    }
    // The job's fresh mounts belong to the ids its payload's uid and gid map to.
    let ids = job_ids(&plan)?;
    mount::populate_fresh(
        &plan.mounts,
        (ids, ids),
        mount::FreshProc::Zygote,
        &plan.layers,
    )?;
    // The job's own cgroup, read-only, in the cgroup namespace just made (rooted at the
    // job's cgroup, which we joined first); on the zygote's empty mount points.
    mount::cgroup_view(&plan.cgroup_view)?;
    nix::unistd::sethostname(&plan.hostname)
        .map_err(|e| SetupError::errno(Step::Sethostname, e))?;
    rlimit::apply(&plan.rlimits)?;
    Ok((plan, prepared))
}

/// The uid and gid, in the zygote's user namespace, that a job's own
/// [`SANDBOX_UID`]/[`SANDBOX_GID`] map to: its id slot's (never the zygote's own 1000,
/// which every job would share). Fails closed for a plan without a slot.
fn job_ids(plan: &JobPlan) -> Result<u32, SetupError> {
    (plan.kind.forked_slot())
        .and_then(|slot| ZYGOTE_JOB_IDS.checked_add(slot))
        .ok_or(SetupError::Other {
            step: Step::Ids,
            detail: "a zygote job's plan has no id slot".into(),
        })
}

/// Step Z3, in init once it has forked the payload (`payload`, pid 2): write
/// the payload's maps, then supervise it like a cold job's init. Never returns.
fn job_init(state: JobState, payload: i32) -> ! {
    let JobState {
        plan,
        status,
        stdio,
        userns: (userns_r, userns_w),
        mapped: (mapped_r, mapped_w),
        exec: (exec_r, exec_w),
        ..
    } = state;
    drop((stdio, userns_w, mapped_r, exec_w));
    // (Checked in `prepare`, before the payload existed.)
    let ids = job_ids(&plan).unwrap_or_else(|e| fail(&status, &e));
    let payload = Pid::from_raw(payload);
    let mut byte = [0u8; 1];
    // EOF instead of the byte: the payload failed before its user namespace existed
    // (its report is on the exec pipe).
    if std::fs::File::from(userns_r).read(&mut byte).ok() == Some(1) {
        let maps = || -> std::io::Result<()> {
            std::fs::write(
                format!("/proc/{payload}/uid_map"),
                format!("{SANDBOX_UID} {ids} 1\n"),
            )?;
            std::fs::write(
                format!("/proc/{payload}/gid_map"),
                format!("{SANDBOX_GID} {ids} 1\n"),
            )
        };
        if let Err(e) = maps() {
            let _ = nix::sys::signal::kill(payload, nix::sys::signal::Signal::SIGKILL);
            fail(&status, &SetupError::io(Step::UidMap, "/proc".as_ref(), &e));
        }
        let _ = std::fs::File::from(mapped_w).write_all(&[1]);
    } else {
        drop(mapped_w);
    }
    match supervise(payload, exec_r, &status, Pid::from_raw(-1)) {
        Ok(()) => sys::exit_now(0),
        Err(e) => fail(&status, &e),
    }
}

/// Step Z4, in the payload (init's fork). Returns when every layer is in place; on
/// failure reports it to init and exits.
fn job_payload(state: JobState) {
    let JobState {
        plan,
        prepared,
        status,
        stdio,
        userns: (userns_r, userns_w),
        mapped: (mapped_r, mapped_w),
        exec: (exec_r, exec_w),
    } = state;
    drop((status, userns_r, mapped_w, exec_r));
    match payload(&plan, &prepared, stdio, userns_w, mapped_r, &exec_w) {
        Ok(()) => {}
        Err(e) => {
            let msg = encode(&PayloadMsg::Failed(Failure::from(&e)));
            let _ = nix::unistd::write(&exec_w, &msg);
            sys::exit_now(127);
        }
    }
}

fn payload(
    plan: &JobPlan,
    prepared: &Prepared,
    stdio: [OwnedFd; 3],
    userns_w: OwnedFd,
    mapped_r: OwnedFd,
    exec_w: &OwnedFd,
) -> Result<(), SetupError> {
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| SetupError::errno(Step::UnshareUser, e))?;
    std::fs::File::from(userns_w)
        .write_all(&[1])
        .map_err(|e| SetupError::io(Step::Sync, "pipe".as_ref(), &e))?;
    let mut byte = [0u8; 1];
    if std::fs::File::from(mapped_r).read(&mut byte).ok() != Some(1) {
        return Err(SetupError::Other {
            step: Step::UidMap,
            detail: "init did not map the payload's user namespace".into(),
        });
    }
    // This job's own user namespace: its limits, as a cold job's init sets them.
    crate::init::set_user_ns_limits(false)?;
    // The confinement, the same steps as a cold payload's (`confine`: P1-P6), without
    // the execve: no execve will close the other fds, so they go now. The interpreter's
    // own signal handlers (SIGINT's) stay; init reset SIGCHLD and the mask.
    let confined = confine(Confine {
        stdio: [stdio[0].as_fd(), stdio[1].as_fd(), stdio[2].as_fd()],
        extra: &[],
        reset_signals: false,
        other_fds: OtherFds::CloseNow,
        privileges: Privileges::Drop {
            rootless: false,
            dumpable_again: true,
        },
        landlock: Some((&plan.landlock, sys::landlock_abi())),
        filters: &prepared.filters,
        report: exec_w,
    });
    // `CloseNow` closed the stdio originals' numbers (their copies are on 0-2): never
    // close them again, whatever took those numbers since.
    std::mem::forget(stdio);
    confined
}
