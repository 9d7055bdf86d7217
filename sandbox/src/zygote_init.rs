//! A zygote job's init: a small program of its own (`vivarium-zygote-init`, from the
//! `vivarium-zygote` package), exec'd by the zygote's `vfork` child once that child has
//! forked the job's payload (`crate::zygote`, step Z1). So init is pid 1 of the job's
//! pid namespace and the payload's parent, yet costs no copy of the zygote's address
//! space: the payload is the job's only copy.
//!
//! Steps Z2 and Z3 of the crate's setup table: init moves itself into the job's cgroup,
//! makes itself non-dumpable, makes the job's time namespace (and enters it), the mount,
//! network, IPC, UTS and cgroup namespaces, brings `lo` up, mounts the job's fresh
//! tmpfs, procfs, masks and cgroup view, sets the hostname, and says so on the link;
//! the payload joins them (Z4). Then init writes the payload's uid and gid maps and
//! supervises it as a cold job's init does (`init::supervise`).
//!
//! Its argv names its fds (it is exec'd with only those and 0-2): the status pipe, the
//! plan pipe, its end of the link to the payload, its end of the outputs link
//! ([`crate::outputs::collect_for_job`]), then the job cgroup's files.

use crate::plan::{JobPlan, SANDBOX_GID, SANDBOX_UID};
use crate::report::{encode, Failure, InitMsg, PayloadMsg};
use crate::{mount, sys, SetupError, Step};
use nix::sched::CloneFlags;
use nix::unistd::Pid;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Init's `argv[0]` (and its name, `comm`).
pub const ARGV0: &str = "vivarium-init";

fn fail(status: &std::fs::File, e: &SetupError) -> ! {
    let mut w = status;
    let _ = w.write_all(&encode(&InitMsg::Failed(Failure::from(e))));
    sys::exit_now(121)
}

/// The init program's `main`: `args` is its argv (without `argv[0]`). Never returns.
pub fn main(args: &[String]) -> ! {
    // Pid 1 ignores its own fatal signals: a panic that aborted would spin.
    std::panic::set_hook(Box::new(|_| sys::exit_now(123)));
    // The zygote's vfork child blocked every signal; SIGCHLD must be at its default
    // action for `waitpid` (exec keeps an ignored one ignored).
    if sys::reset_sigchld_and_mask().is_err() {
        sys::exit_now(122);
    }
    let _ = sys::set_name(c"vivarium-init");
    let fds: Option<Vec<i32>> = args.iter().map(|a| a.parse().ok()).collect();
    let Some(fds) = fds.filter(|f| f.len() >= 5) else {
        sys::exit_now(122)
    };
    let mut keep: Vec<u32> = fds.iter().map(|&fd| fd as u32).collect();
    keep.extend([0, 1, 2]);
    // SAFETY: a fresh exec: nothing owns any fd yet; every fd but 0-2 and ours goes.
    #[allow(unsafe_code)]
    let closed = unsafe { sys::close_all_except(&keep) };
    if closed.is_err() {
        sys::exit_now(120);
    }
    let mut owned = Vec::with_capacity(fds.len());
    for &fd in &fds {
        // SAFETY: each number is an fd the zygote opened for this process, named once
        // in argv (distinct: they were open at once in the zygote), adopted once.
        #[allow(unsafe_code)]
        match unsafe { sys::adopt_inherited_fd(fd) } {
            Ok(fd) => owned.push(fd),
            Err(_) => sys::exit_now(122),
        }
    }
    let mut owned = owned.into_iter();
    let (Some(status), Some(plan), Some(link), Some(outputs)) =
        (owned.next(), owned.next(), owned.next(), owned.next())
    else {
        sys::exit_now(122)
    };
    let status = std::fs::File::from(status);
    let attach: Vec<OwnedFd> = owned.collect();
    match run(plan, link, &outputs, &attach, &status) {
        Ok(()) => sys::exit_now(0),
        Err(e) => fail(&status, &e),
    }
}

fn run(
    plan: OwnedFd,
    link: OwnedFd,
    outputs: &OwnedFd,
    attach: &[OwnedFd],
    status: &std::fs::File,
) -> Result<(), SetupError> {
    let plan = read_plan(plan)?;
    prepare(&plan, attach)?;
    // Z3. The namespaces and mounts exist: the payload joins them.
    send(&link, &[1]).map_err(|e| SetupError::errno(Step::Sync, e))?;
    // Its user namespace, then its maps (uid and gid 1000 to the job's id slot's ids).
    let ids = crate::zygote::job_ids(&plan)?;
    let Some(msg) = read_msg(&link) else {
        // The payload ended without a word: `supervise` says so.
        return crate::init::supervise(Pid::from_raw(-1), link, status, Pid::from_raw(-1));
    };
    let payload = match msg {
        PayloadMsg::UserNs { pid } => Pid::from_raw(pid),
        PayloadMsg::Failed(f) => {
            let mut w = status;
            let _ = w.write_all(&encode(&InitMsg::Failed(f)));
            let _ = nix::sys::wait::waitpid(Pid::from_raw(-1), None);
            sys::exit_now(121);
        }
        PayloadMsg::Landlock(_) => {
            return Err(SetupError::Other {
                step: Step::Sync,
                detail: "the payload reported before its user namespace".into(),
            })
        }
    };
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
        return Err(SetupError::io(Step::UidMap, "/proc".as_ref(), &e));
    }
    send(&link, &[1]).map_err(|e| SetupError::errno(Step::Sync, e))?;
    crate::init::supervise(payload, link, status, Pid::from_raw(-1))?;
    // The job's artifacts, as the ids its payload's uid and gid map to here.
    crate::outputs::collect_for_job(outputs, (ids, ids));
    Ok(())
}

/// Z2: init's own setup, in the order of the crate's table.
fn prepare(plan: &JobPlan, attach: &[OwnedFd]) -> Result<(), SetupError> {
    // The cgroup first, so that everything below is charged to the job; then check that
    // every hierarchy the spawner opened now lists us in the job's cgroup (fail closed).
    crate::init::attach_self(attach, &format!("job-{}", plan.job_id))?;
    // The payload's host uid differs from ours, and we stay out of its reach anyway.
    sys::set_dumpable(false).map_err(|e| SetupError::io(Step::Dumpable, "/".as_ref(), &e))?;
    // A time namespace, clocks near zero, entered by init itself so that the payload
    // joins it with the others (through init's pidfd).
    if plan.time_ns {
        let path = "/proc/self/timens_offsets";
        let e = |e: std::io::Error| SetupError::io(Step::TimeNs, path.as_ref(), &e);
        crate::timens::unshare_near_zero().map_err(e)?;
        let ns = std::fs::File::open("/proc/self/ns/time_for_children").map_err(e)?;
        nix::sched::setns(ns, CloneFlags::from_bits_retain(libc::CLONE_NEWTIME))
            .map_err(|err| e(err.into()))?;
    }
    let flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP
        | CloneFlags::CLONE_NEWNET;
    nix::sched::unshare(flags).map_err(|e| SetupError::errno(Step::Unshare, e))?;
    // The job's private loopback, in the network namespace just made (the zygote's user
    // namespace owns it; the payload's own user namespace gets no say over it).
    if plan.network.loopback() {
        sys::loopback_up().map_err(|e| SetupError::io(Step::Loopback, "lo".as_ref(), &e))?;
    }
    // The job's fresh mounts belong to the ids its payload's uid and gid map to.
    let ids = crate::zygote::job_ids(plan)?;
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
    Ok(())
}

/// The plan from the zygote: its length (4 bytes, little-endian), then its bytes.
fn read_plan(fd: OwnedFd) -> Result<JobPlan, SetupError> {
    let err = |e: std::io::Error| SetupError::io(Step::InitPlan, "pipe".as_ref(), &e);
    let mut pipe = std::fs::File::from(fd);
    let mut len = [0u8; 4];
    pipe.read_exact(&mut len).map_err(err)?;
    let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
    pipe.read_exact(&mut bytes).map_err(err)?;
    crate::ipc::decode(&bytes).ok_or(SetupError::Other {
        step: Step::ZygotePlan,
        detail: "the job's plan does not decode".into(),
    })
}

/// One framed message from the payload (`report::encode`), or `None` at its end.
fn read_msg(link: &OwnedFd) -> Option<PayloadMsg> {
    let mut sock = std::fs::File::from(link.as_fd().try_clone_to_owned().ok()?);
    let mut len = [0u8; 2];
    sock.read_exact(&mut len).ok()?;
    let mut buf = len.to_vec();
    buf.resize(2 + u16::from_le_bytes(len) as usize, 0);
    sock.read_exact(&mut buf[2..]).ok()?;
    crate::report::decode_all(&mut buf).into_iter().next()
}

/// Write on the link; a payload that is gone is not a signal (`MSG_NOSIGNAL`).
fn send(link: &OwnedFd, bytes: &[u8]) -> nix::Result<()> {
    use nix::sys::socket::{send, MsgFlags};
    send(link.as_raw_fd(), bytes, MsgFlags::MSG_NOSIGNAL).map(|_| ())
}
