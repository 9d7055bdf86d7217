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
//!   `unshare(CLONE_NEWPID)`, then `vfork` ([`sys::vfork_fork_exec`]): the child, pid 1
//!   of the new pid namespace, shares the zygote's memory; it forks the payload (the
//!   job's only copy of the zygote) and execs the init program ([`INIT_FD`]), so the
//!   job's init costs no copy and the payload is its child. The zygote resumes at the
//!   exec and sends init's pidfd to the spawner.
//! - Z2, init ([`crate::zygote_init`]) moves itself into the job's cgroup, makes itself
//!   non-dumpable, makes the job's time, mount, network, IPC, UTS and cgroup
//!   namespaces, mounts the job's fresh tmpfs mounts, procfs and masks over the
//!   zygote's and its own cgroup read-only at /sys/fs/cgroup, sets the hostname; Z3, it
//!   maps the payload's user namespace and stays as its reaper (the same code as a cold
//!   job's init: `init::supervise`).
//! - Z4, the payload (the copy that returns to the interpreter) moves itself into the
//!   job's cgroup, joins init's namespaces (`setns` on init's pidfd) once init has made
//!   them, sets the rlimits, unshares a user namespace of its own, whose maps init
//!   writes (uid and gid 1000 to the ids of the job's id slot in the zygote's
//!   namespace, `plan::ZYGOTE_JOB_IDS`: the payload's host uid is its own, neither
//!   init's nor another job's), then the same steps as a cold payload (P1-P7): setsid,
//!   stdio, every other fd closed, cwd, capabilities and ids, no_new_privs, Landlock,
//!   seccomp. Then it returns to the interpreter, which reads the job from stdin as a
//!   warm sandbox does.
//!
//! [`serve`] is called through the zygote library (crate `vivarium-zygote`); it is here
//! so that the job's setup is the same code as a cold job's.

use crate::confine::{confine, Confine, OtherFds, Privileges};
use crate::init::Prepared;
use crate::plan::{JobPlan, MountStep, PlanKind, WARM_BOOTSTRAP, ZYGOTE_JOB_IDS};
use crate::report::{encode, Failure, PayloadMsg};
use crate::sys;
use crate::{rlimit, SetupError, Step};
use nix::sched::CloneFlags;
use nix::sys::socket::MsgFlags;
use nix::unistd::Pid;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

/// The zygote's control socket (SOCK_SEQPACKET to the spawner) inside its interpreter.
pub const CTL_FD: i32 = 3;
/// The zygote library, open for the interpreter to load (`/proc/self/fd/4`).
pub const LIB_FD: i32 = 4;
/// The init program of the zygote's jobs (`vivarium-zygote-init`, [`crate::zygote_init`]),
/// open for the zygote to exec in each job's init.
pub const INIT_FD: i32 = 5;

/// The zygote's `-c` program: the warm bootstrap's functions, then the zygote's loop.
pub const ZYGOTE_BOOTSTRAP: &str = concat!(
    "_vivarium_zygote = True\n",
    include_str!("figures_hook.py"),
    "_VIVARIUM_INPUTS_PY = r'''",
    include_str!("inputs.py"),
    "'''\n",
    include_str!("warm_bootstrap.py"),
    include_str!("zygote_bootstrap.py")
);

/// The file name of the zygote library (a `cdylib`), looked for next to the daemon's
/// binary, then in `../lib/vivarium/`.
pub const LIBRARY_NAME: &str = "libvivarium_zygote.so";
/// The file name of the zygote jobs' init program, looked for as the library is.
pub const INIT_NAME: &str = "vivarium-zygote-init";

/// Where the file `name` ([`LIBRARY_NAME`], [`INIT_NAME`]) is for a daemon whose binary
/// is `exe`, if it is there.
pub fn find_library(exe: &std::path::Path, name: &str) -> Option<std::path::PathBuf> {
    let dir = exe.parent()?;
    [dir.join(name), dir.join("../lib/vivarium").join(name)]
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
    /// `PyOS_AfterFork_Child` (the interpreter's own repairs, the child hooks), in each
    /// job's payload once its job has come, just before [`serve`] returns there.
    pub after_child: extern "C" fn(),
    /// Called first thing in each job's payload, before its first allocation.
    pub in_payload: fn(),
}

/// How [`serve`] ended in this process.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// The spawner hung up (or retired the zygote): the zygote exits.
    SpawnerGone,
    /// This is a job's payload with every layer in place, the daemon told so, and the
    /// job come on stdin (or stdin closed): the interpreter runs the job.
    Payload,
}

/// Fds a request may carry: stdin, stdout, stderr, the status pipe, the outputs link, and one cgroup file
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
    // Neither the control socket nor the init program goes into a job's init (the vfork
    // child execs it with only the job's fds; the payload closes them).
    for fd in [ctl.as_raw_fd(), INIT_FD] {
        sys::set_cloexec(fd, true)?;
    }
    let mut inits: Vec<(libc::pid_t, OwnedFd)> = Vec::new();
    // The poll set, kept from one request to the next: every page the zygote writes to
    // after a fork is copied (its live payloads share it), and a malloc and free per
    // request write to chunk headers and free lists on pages of their own.
    let mut polled: Vec<libc::pollfd> = Vec::new();
    loop {
        polled.clear();
        polled.extend(
            std::iter::once(ctl.as_raw_fd())
                .chain(inits.iter().map(|(_, pidfd)| pidfd.as_raw_fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }),
        );
        // SAFETY: `polled` is `polled.len()` initialized pollfd structs, each an fd that
        // stays open during the call (the control socket, the pidfds in `inits`).
        #[allow(unsafe_code)]
        let polls = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) };
        if polls < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let mut ended = polled[1..].iter().map(|p| p.revents != 0);
        inits.retain(|&(pid, _)| {
            let gone = ended.next() == Some(true);
            if gone {
                let flags = nix::sys::wait::WaitPidFlag::WNOHANG;
                let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), Some(flags));
            }
            !gone
        });
        if polled[0].revents == 0 {
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
        let forked = fork_job(&mut buf[..len], fds, hooks.in_payload);
        let init = match forked {
            Ok(Forked::Payload) => {
                // The pidfds here are the zygote's numbers, closed in the payload's setup.
                std::mem::forget(inits);
                ready_then_wait_for_job();
                // Here, not through ctypes once returned: a call from the interpreter
                // writes to more of the zygote's pages (each one copied) than this.
                (hooks.after_child)();
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

/// In a job's payload, every layer in place: the ready byte (one NUL on stderr, which
/// the daemon reads before it lists the sandbox as ready), then a wait here, in Rust,
/// until the job's header comes on stdin (or the daemon closes it: the bootstrap then
/// reads EOF and exits). The interpreter runs again only then: a ready sandbox that
/// waits in the interpreter has already written (and so copied from the zygote, page by
/// page) the state its after-fork repairs, the `random` reseed and the bootstrap's own
/// lines touch, ~0.4 MiB of private memory per idle forked sandbox; waiting here, it
/// holds only the pages its setup wrote. (The same work is done once the job comes, as
/// part of that job.)
fn ready_then_wait_for_job() {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let (stdin, stderr) = (sys::stdio(0), sys::stdio(2));
    // (Any other error: no daemon to tell; the bootstrap then finds stdin closed.)
    while let Err(nix::errno::Errno::EINTR) = nix::unistd::write(stderr, b"\0") {}
    let mut fds = [PollFd::new(stdin, PollFlags::POLLIN)];
    // POLLIN, or POLLHUP/POLLERR (always reported): either way the bootstrap reads next.
    while let Err(nix::errno::Errno::EINTR) = poll(&mut fds, PollTimeout::NONE) {}
}

/// What [`fork_job`] returned in this process.
enum Forked {
    /// The zygote: the job's init has this pid.
    Zygote(libc::pid_t),
    /// The job's payload, every layer in place: the interpreter runs the job.
    Payload,
}

/// In the zygote, for each request (step Z1): the job's init, pid 1 of a new pid
/// namespace, is a `vfork` child that forks the payload, the job's one copy of the
/// zygote, and then execs the init program ([`INIT_FD`], [`crate::zygote_init`]), so
/// init costs no copy and the payload is its child. Returns the init's pid in the
/// zygote, and returns in the payload once its setup is done (step Z4,
/// [`job_payload`]).
///
/// `plan` goes to init on a pipe (and stays in the payload's copy of the buffer, which
/// it clears); `fds` are the job's stdin, stdout, stderr, status pipe, outputs link and
/// cgroup files;
/// `in_payload` is called first thing in the payload, before its first allocation (the
/// zygote library switches its arena on there). An `Err` is the zygote's: no job runs.
fn fork_job(plan: &mut [u8], fds: Vec<OwnedFd>, in_payload: fn()) -> std::io::Result<Forked> {
    if fds.len() < 6 {
        return Err(std::io::Error::other(
            "a request needs stdio, status, outputs and cgroup fds",
        ));
    }
    let io = |e: SetupError| std::io::Error::other(e.to_string());
    // The plan for init: its length, then its bytes, all in the pipe before init exists.
    // The write end does not block: a pipe the kernel made smaller than the plan (a user
    // over `pipe-user-pages-soft` gets two pages) fails the request instead of hanging
    // the zygote, which is the pipe's only reader until init exists.
    let (plan_r, plan_w) = pipe().map_err(io)?;
    nix::fcntl::fcntl(
        &plan_w,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    )?;
    let framed = 4 + plan.len();
    if framed > 1 << 16 {
        nix::fcntl::fcntl(&plan_w, nix::fcntl::FcntlArg::F_SETPIPE_SZ(framed as i32))?;
    }
    let mut w = std::fs::File::from(plan_w);
    w.write_all(&(plan.len() as u32).to_le_bytes())?;
    w.write_all(plan)?;
    drop(w);
    // Init and payload talk on a stream of their own (`InitLink`).
    let (link_init, link_payload) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::Stream,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )?;
    // Init's fds, open across its exec and named in its argv: the status pipe, the plan,
    // its end of the link, the outputs link, the cgroup files. Every other fd of the zygote is
    // close-on-exec (its control socket and the init program: `serve`; received fds
    // and pipes: made so).
    // (On the stack, as init's argv below: no allocation in the zygote per request.)
    let mut init_fds = [0i32; INIT_FDS];
    let count = 4 + fds.len() - 5;
    let too_many = || std::io::Error::other("too many fds for a job's init");
    let slots = init_fds.get_mut(..count).ok_or_else(too_many)?;
    let fixed = [
        fds[3].as_raw_fd(),
        plan_r.as_raw_fd(),
        link_init.as_raw_fd(),
    ];
    let cgroup_files = fds[4..].iter().map(|f| f.as_raw_fd());
    for (slot, fd) in slots.iter_mut().zip(fixed.into_iter().chain(cgroup_files)) {
        *slot = fd;
    }
    let init_fds = &init_fds[..count];
    for &fd in init_fds {
        sys::set_cloexec(fd, false)?;
    }
    let mut strings = [0u8; ARGV_BYTES];
    let mut starts = [0usize; 1 + INIT_FDS];
    let argc = init_argv(&mut strings, &mut starts, init_fds)?;
    let mut argv = [std::ptr::null::<libc::c_char>(); 2 + INIT_FDS];
    for (arg, &start) in argv.iter_mut().zip(&starts[..argc]) {
        *arg = strings[start..].as_ptr().cast();
    }
    let argv = &argv[..=argc]; // NULL-terminated
    let envp = [std::ptr::null()];
    new_pid_namespace()?;
    let mask = sys::block_all_signals()?;
    // SAFETY: INIT_FD is the init program, open for the zygote's life; `argv` and `envp`
    // are NULL-terminated and outlive the call; every signal is blocked; the zygote is
    // single-threaded: its bootstrap keeps the preloads' thread pools at one and refuses
    // to serve unless /proc/self/task lists one thread (zygote_bootstrap.py), and
    // `serve` starts none.
    #[allow(unsafe_code)]
    let forked = unsafe { sys::vfork_fork_exec(BorrowedFd::borrow_raw(INIT_FD), argv, &envp) };
    match forked {
        Ok(sys::VforkForked::Grandchild) => {
            drop((plan_r, link_init));
            job_payload(plan, fds, link_payload, in_payload);
            Ok(Forked::Payload)
        }
        Ok(sys::VforkForked::Caller(init)) => {
            let _ = sys::restore_mask(&mask);
            Ok(Forked::Zygote(init))
        }
        Err(e) => {
            let _ = sys::restore_mask(&mask);
            Err(e)
        }
    }
}

/// The most fds a job's init is given: status, plan, link, outputs, and the cgroup files
/// (a request's fds but stdio and status).
const INIT_FDS: usize = 4 + REQUEST_FDS - 5;
/// Room for init's argv strings: its name and a number of at most 10 digits per fd,
/// each NUL-terminated.
const ARGV_BYTES: usize = crate::zygote_init::ARGV0.len() + 1 + 11 * INIT_FDS;

/// Init's argv ([`crate::zygote_init::ARGV0`], then `fds` in decimal), NUL-terminated
/// strings in `strings`, where each starts at `starts[i]`. Returns how many there are.
fn init_argv(strings: &mut [u8], starts: &mut [usize], fds: &[i32]) -> std::io::Result<usize> {
    use std::io::Write;
    let mut cursor = std::io::Cursor::new(strings);
    let mut argc = 0;
    for fd in std::iter::once(None).chain(fds.iter().map(Some)) {
        let start =
            (starts.get_mut(argc)).ok_or_else(|| std::io::Error::other("init's argv is full"))?;
        *start = cursor.position() as usize;
        match fd {
            None => cursor.write_all(crate::zygote_init::ARGV0.as_bytes())?,
            Some(fd) => write!(cursor, "{fd}")?,
        }
        cursor.write_all(&[0])?;
        argc += 1;
    }
    Ok(argc)
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

/// The uid and gid, in the zygote's user namespace, that a job's own
/// [`SANDBOX_UID`]/[`SANDBOX_GID`] map to: its id slot's (never the zygote's own 1000,
/// which every job would share). Fails closed for a plan without a slot.
pub(crate) fn job_ids(plan: &JobPlan) -> Result<u32, SetupError> {
    (plan.kind.forked_slot())
        .and_then(|slot| ZYGOTE_JOB_IDS.checked_add(slot))
        .ok_or(SetupError::Other {
            step: Step::Ids,
            detail: "a zygote job's plan has no id slot".into(),
        })
}

/// Step Z4, in the payload (the vfork child's fork, pid 2 of the job's pid namespace,
/// init's child). Returns when every layer is in place; on failure reports it to init
/// on the link and exits.
fn job_payload(plan: &mut [u8], fds: Vec<OwnedFd>, link: OwnedFd, in_payload: fn()) {
    in_payload();
    std::panic::set_hook(Box::new(|_| sys::exit_now(123)));
    // SIGCHLD at its default action and no signal blocked, whatever the zygote's
    // preloads left there (the job's processes inherit both).
    if sys::reset_sigchld_and_mask().is_err() {
        sys::exit_now(122);
    }
    // Nothing of the zygote's stays open in the job.
    drop(OWN_PID_NS.lock().unwrap_or_else(|p| p.into_inner()).take());
    let mut fds = fds.into_iter();
    let (Some(stdin), Some(stdout), Some(stderr), Some(status), Some(outputs)) =
        (fds.next(), fds.next(), fds.next(), fds.next(), fds.next())
    else {
        sys::exit_now(122)
    };
    // (Init reports on the status pipe, and collects the outputs; the payload reports
    // to init.)
    drop((status, outputs));
    let attach: Vec<OwnedFd> = fds.collect();
    // Only the job's fds stay open (and 0-2, the zygote's /dev/null and the daemon's
    // log, so that no new fd takes those numbers): nothing else the zygote holds, its
    // control socket (fd 3) and the init program included.
    let keep: Vec<u32> = [&stdin, &stdout, &stderr, &link]
        .into_iter()
        .chain(&attach)
        .map(|f| f.as_raw_fd())
        .chain([0, 1, 2])
        .map(|fd| fd as u32)
        .collect();
    // SAFETY: the payload is a fresh fork of the zygote and goes on with `keep` alone:
    // the zygote's objects for the others (its control socket, the pidfds of other
    // inits, forgotten by `serve`) are never used in it.
    #[allow(unsafe_code)]
    let closed = unsafe { sys::close_all_except(&keep) };
    let result = match closed {
        Ok(()) => payload(plan, [stdin, stdout, stderr], attach, &link),
        Err(e) => Err(SetupError::io(Step::CloseRange, "/".as_ref(), &e)),
    };
    if let Err(e) = result {
        let msg = encode(&PayloadMsg::Failed(Failure::from(&e)));
        let _ = nix::unistd::write(&link, &msg);
        sys::exit_now(127);
    }
}

/// What the payload does with the zygote's capabilities before it drops them: the
/// job's cgroup, init's namespaces, its rlimits, its own user namespace (mapped by
/// init), then the cold payload's confinement.
fn payload(
    encoded: &mut [u8],
    stdio: [OwnedFd; 3],
    attach: Vec<OwnedFd>,
    link: &OwnedFd,
) -> Result<(), SetupError> {
    let (plan, prepared) = decode(encoded)?;
    // The cgroup first, so that everything below is charged to the job; then check that
    // every hierarchy the spawner opened now lists us in the job's cgroup (fail closed:
    // a job never runs in the zygote's). Before the cgroup namespace, whose view would
    // name the job's cgroup `/`.
    crate::init::attach_self(&attach, &format!("job-{}", plan.job_id))?;
    drop(attach);
    // Init's namespaces, once it has made them and their mounts (`InitLink::Ready`).
    let mut byte = [0u8; 1];
    if nix::unistd::read(link, &mut byte) != Ok(1) {
        return Err(SetupError::Other {
            step: Step::JoinNamespaces,
            detail: "the job's init ended before making its namespaces".into(),
        });
    }
    join_init(&plan)?;
    rlimit::apply(&plan.rlimits)?;
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| SetupError::errno(Step::UnshareUser, e))?;
    let pid = nix::unistd::getpid().as_raw();
    nix::unistd::write(link, &encode(&PayloadMsg::UserNs { pid }))
        .map_err(|e| SetupError::errno(Step::Sync, e))?;
    if nix::unistd::read(link, &mut byte) != Ok(1) {
        return Err(SetupError::Other {
            step: Step::UidMap,
            detail: "init did not map the payload's user namespace".into(),
        });
    }
    // This job's own user namespace: its limits, as a cold job's init sets them.
    crate::init::set_user_ns_limits(false)?;
    // The confinement, the same steps as a cold payload's (`confine`: P1-P6), without
    // the execve: no execve will close the other fds, so they go now. The interpreter's
    // own signal handlers (SIGINT's) stay.
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
        report: link,
    });
    // `CloseNow` closed the stdio originals' numbers (their copies are on 0-2): never
    // close them again, whatever took those numbers since.
    std::mem::forget(stdio);
    confined
}

/// The payload joins init's mount, network, IPC, UTS and cgroup namespaces (and its
/// time namespace, where the plan has one), all at once through a pidfd: init is its
/// parent, pid 1 of its pid namespace. They belong to the zygote's user namespace, in
/// which the payload still holds every capability.
fn join_init(plan: &JobPlan) -> Result<(), SetupError> {
    let err = |e: std::io::Error| SetupError::io(Step::JoinNamespaces, "pid 1".as_ref(), &e);
    let init = sys::pidfd_open(1).map_err(err)?;
    let mut flags = libc::CLONE_NEWNS
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if plan.time_ns {
        flags |= libc::CLONE_NEWTIME;
    }
    sys::setns_pidfd(init.as_fd(), flags).map_err(err)
}

/// The job's plan out of the request's bytes (cleared once decoded: nothing of the plan
/// stays in memory the job's processes keep), with its exec data.
pub(crate) fn decode(encoded: &mut [u8]) -> Result<(JobPlan, Prepared), SetupError> {
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
    Ok((plan, prepared))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Init's argv, as exec'd: its name, then each fd in decimal, each NUL-terminated,
    /// each string's start recorded; more fds than there is room for is an error, not a
    /// truncated argv.
    #[test]
    fn init_argv_names_each_fd() {
        let mut strings = [0u8; ARGV_BYTES];
        let mut starts = [0usize; 1 + INIT_FDS];
        let argc = init_argv(&mut strings, &mut starts, &[8, 14, 1_000_000_007]).unwrap();
        assert_eq!(argc, 4);
        let args: Vec<&str> = (starts[..argc].iter())
            .map(|&at| {
                let s = std::ffi::CStr::from_bytes_until_nul(&strings[at..]).unwrap();
                s.to_str().unwrap()
            })
            .collect();
        assert_eq!(args, ["vivarium-init", "8", "14", "1000000007"]);
        // The widest fds, as many as init can be given, fit.
        let widest = [i32::MAX; INIT_FDS];
        assert_eq!(
            init_argv(&mut strings, &mut starts, &widest).unwrap(),
            1 + INIT_FDS
        );
        let more = [1; INIT_FDS + 1];
        assert!(init_argv(&mut strings, &mut starts, &more).is_err());
        let mut small = [0u8; 16];
        assert!(init_argv(&mut small, &mut starts, &[1, 2, 3]).is_err());
    }
}
