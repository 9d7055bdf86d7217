//! The two processes of a job: its init (pid 1 of the job's pid namespace, our code)
//! and the payload (which becomes `python3`).
//!
//! The setup order is the crate's table (`crate`'s doc, "The setup order"): init runs
//! steps I1 to I14, the payload P1 to P7, and the comments below carry those numbers.
//!
//! What the setup applies is the plan's data ([`crate::plan::Layers`]): all of it in
//! every plan the daemon builds, less only in the attack suite's test-only plans.

use crate::confine::{confine, Confine, OtherFds, Privileges};
use crate::plan::{JobPlan, SANDBOX_GID, SANDBOX_UID, SCRIPT_PATH};
use crate::report::{encode, Failure, InitMsg, PayloadMsg, WaitStatus};
use crate::sys;
use crate::{caps, mount, rlimit, SetupError, Step};
use nix::sys::socket::MsgFlags;
use nix::sys::wait::{waitpid, WaitStatus as NixWait};
use nix::unistd::{Gid, Pid, Uid};
use seccompiler::BpfProgram;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;

/// Everything prepared before the clone, so the child only executes.
pub struct Prepared {
    pub exe: CString,
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    pub filters: Vec<BpfProgram>,
}

#[derive(Debug, thiserror::Error)]
#[error("job plan has a NUL byte in an argument or environment variable")]
pub struct NulError;

impl Prepared {
    pub fn new(plan: &JobPlan) -> Result<Self, NulError> {
        let c = |s: &str| CString::new(s).map_err(|_| NulError);
        Ok(Prepared {
            exe: c(&plan.interpreter.to_string_lossy())?,
            argv: plan.argv.iter().map(|a| c(a)).collect::<Result<_, _>>()?,
            envp: plan
                .env
                .iter()
                .map(|(k, v)| c(&format!("{k}={v}")))
                .collect::<Result<_, _>>()?,
            filters: plan
                .seccomp
                .iter()
                .map(|f| {
                    f.iter()
                        .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
                        .collect()
                })
                .collect(),
        })
    }
}

/// The fds a job's init owns, received from the spawner.
pub struct InitFds {
    /// Read end: one byte when the maps are in place (and, on v2, the cgroup); EOF
    /// means abort.
    pub sync: OwnedFd,
    /// Write end: [`InitMsg`]s for the spawner.
    pub status: OwnedFd,
    /// Sealed memfd with the script.
    pub code: OwnedFd,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// Init's end of the outputs link (a stream socket): the server's collection
    /// request, and the bundle init writes back at the job's end
    /// ([`crate::outputs::collect_for_job`]).
    pub outputs: OwnedFd,
    /// Handed to the payload as fds 3, 4, ...: a zygote's control socket and library.
    pub extra: Vec<OwnedFd>,
    /// cgroup v1: where the spawner sends the job cgroup's `tasks` files once it has
    /// made them (init was cloned before, in the spawner's own cgroup).
    pub attach: Option<OwnedFd>,
}

pub struct InitArgs<'a> {
    pub plan: &'a JobPlan,
    pub prepared: &'a Prepared,
    pub new_root: PathBuf,
    /// Cloned from a mount template (`spawner::template`): the read-only root is in
    /// place (locked), only the job's own mounts are made.
    pub on_template: bool,
    pub kernel_landlock_abi: u32,
    /// The daemon is an ordinary user: the job's user namespace maps only uid/gid 1000
    /// (to the daemon's own ids), so there is no uid 0 inside to switch to.
    pub rootless: bool,
    pub fds: InitFds,
}

fn send(status: &std::fs::File, msg: &InitMsg) {
    let mut w = status;
    let _ = w.write_all(&encode(msg));
}

/// Entry point of the cloned child. Never returns.
pub fn run(args: InitArgs<'_>) -> ! {
    // I1. pid 1 of a pid namespace ignores its own fatal signals: a panic that aborted
    // would spin forever. Exit instead.
    std::panic::set_hook(Box::new(|_| sys::exit_now(123)));
    // Only our own fds survive into the job; the spawner's others (its link to the
    // server, other jobs' pipes) are closed here. 0-2 stay open (the daemon's
    // stdin and log) so that new fds never take those numbers.
    let fds = &args.fds;
    let keep = [
        &fds.sync,
        &fds.status,
        &fds.code,
        &fds.stdin,
        &fds.stdout,
        &fds.stderr,
        &fds.outputs,
    ]
    .into_iter()
    .chain(&fds.extra)
    .chain(&fds.attach)
    .map(|f| f.as_raw_fd() as u32)
    .collect::<Vec<_>>();
    if args.plan.layers.close_fds {
        // SAFETY: init is a fresh clone of the spawner and goes on with `keep` and stdio
        // alone; the spawner's objects for the other fds (its link, other jobs' pipes)
        // are never used in it.
        #[allow(unsafe_code)]
        let closed = unsafe { sys::close_all_except(&[&keep[..], &[0, 1, 2]].concat()) };
        if closed.is_err() {
            sys::exit_now(120);
        }
    }
    let InitArgs {
        plan,
        prepared,
        new_root,
        on_template,
        kernel_landlock_abi,
        rootless,
        fds,
    } = args;
    let status = std::fs::File::from(fds.status);
    let fds = ChildFds {
        sync: fds.sync,
        code: fds.code,
        stdin: fds.stdin,
        stdout: fds.stdout,
        stderr: fds.stderr,
        outputs: fds.outputs,
        extra: fds.extra,
        attach: fds.attach,
    };
    let root = match on_template {
        true => Root::Template,
        false => Root::Build(new_root),
    };
    match init(
        plan,
        prepared,
        root,
        (kernel_landlock_abi, rootless),
        fds,
        &status,
    ) {
        Ok(()) => sys::exit_now(0),
        Err(e) => {
            send(&status, &InitMsg::Failed(Failure::from(&e)));
            sys::exit_now(121)
        }
    }
}

struct ChildFds {
    sync: OwnedFd,
    code: OwnedFd,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    outputs: OwnedFd,
    extra: Vec<OwnedFd>,
    attach: Option<OwnedFd>,
}

/// Where a job's root comes from.
enum Root {
    /// Built here on a tmpfs mounted on this path (in the job's mount namespace).
    Build(PathBuf),
    /// Already in place: this mount namespace is a copy of a mount template.
    Template,
}

fn init(
    plan: &JobPlan,
    prepared: &Prepared,
    root: Root,
    (kernel_landlock_abi, rootless): (u32, bool),
    mut fds: ChildFds,
    status: &std::fs::File,
) -> Result<(), SetupError> {
    // I2. Wait for the maps (the cgroup: cloned into it on v2, joined in I9 on v1).
    let mut go = [0u8; 1];
    let mut sync = std::fs::File::from(fds.sync);
    if sync.read(&mut go).ok() != Some(1) {
        sys::exit_now(122);
    }

    // I3. memfds must not be executable (noexec on /work, /tmp and /dev/shm would
    // otherwise be bypassed with execveat on a memfd). The sysctl is per pid
    // namespace (Linux 6.3+) and acts on the writer's own, which is the job's; its
    // file is writable only by the host's uid 0, which init still is here. Where the
    // kernel lacks it, or the daemon is not root, the outcome's not_enforced says so.
    if !rootless && plan.layers.memfd_noexec {
        set_memfd_noexec()?;
    }

    // I4. Step onto a scratch mount while our filesystem uid is still the daemon's;
    // I5. then become root of the job's user namespace (I7, I8: build the root, pivot).
    if let Root::Build(new_root) = &root {
        mount::enter_anchor(new_root)?;
    }
    if !rootless {
        nix::unistd::setgroups(&[]).map_err(|e| SetupError::errno(Step::Setgroups, e))?;
        nix::unistd::setresgid(Gid::from_raw(0), Gid::from_raw(0), Gid::from_raw(0))
            .map_err(|e| SetupError::errno(Step::SetresgidRoot, e))?;
        nix::unistd::setresuid(Uid::from_raw(0), Uid::from_raw(0), Uid::from_raw(0))
            .map_err(|e| SetupError::errno(Step::SetresuidRoot, e))?;
    }
    // (Rootless: init already is uid 1000 inside, the only id mapped, with every
    // capability in its own user namespace.)
    // I6. Die with the spawner. The kernel clears the parent-death signal on every
    // credential change, so it is set after init's last one; the spawner keeps the
    // sync pipe's write end for the job's lifetime, so a hang-up there means it died
    // before the signal was armed.
    sys::set_parent_death_signal(libc::SIGKILL)
        .map_err(|e| SetupError::io(Step::Pdeathsig, "/".as_ref(), &e))?;
    let mut lifeline = [nix::poll::PollFd::new(
        sync.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let _ = nix::poll::poll(&mut lifeline, nix::poll::PollTimeout::ZERO);
    if lifeline[0]
        .revents()
        .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLHUP))
    {
        sys::exit_now(122);
    }
    drop(sync);
    let owner = (SANDBOX_UID, SANDBOX_GID);
    // I7 and I8: the root built here and pivoted into; I7t: on a template's copy, only the
    // job's own mounts.
    match root {
        Root::Template => mount::populate_fresh(
            &plan.mounts,
            owner,
            mount::FreshProc::Template,
            &plan.layers,
        )?,
        Root::Build(_) => {
            mount::enter_root()?;
            mount::populate(&plan.mounts, owner, &plan.layers)?;
            mount::pivot()?;
        }
    }

    // I9. cgroup v1: into the job's cgroup, which the spawner made while we built the
    //     root; only then the cgroup namespace, rooted there. (v2: cloned into it, with
    //     the namespace.) Before the script is written: its tmpfs pages are the job's.
    if let Some(sock) = fds.attach.take() {
        join_late_cgroup(&sock)?;
        if plan.layers.namespaces.cgroup {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
                .map_err(|e| SetupError::errno(Step::UnshareCgroup, e))?;
        }
    }

    // I10. The job's own cgroup, read-only at /sys/fs/cgroup: now that the root is in
    //     place and the job's cgroup namespace exists (its root is the job's cgroup).
    //     (A plan without that namespace has no view: it would show the host's.)
    mount::cgroup_view(&plan.cgroup_view)?;

    // I11. The job's own user namespace limits (its inotify budget; no namespaces for a
    // job, which seccomp refuses anyway): after init's own last namespace, in that user
    // namespace (the sysctl acts on the writer's), where init holds CAP_SYS_RESOURCE;
    // lowered for good (the payload never holds it).
    set_user_ns_limits(plan.kind.is_zygote() || !plan.layers.namespace_limits)?;

    // I12. The job's private loopback (`NetworkPlan::Loopback`): already up in the spawner's
    // spare namespace (which belongs to the host's user namespace: nothing here could
    // change it), brought up here in one of the job's own (`CLONE_NEWNET`: rootless, or
    // no spare). Fail closed: the plan asked for it.
    if plan.network.loopback() {
        sys::loopback_up().map_err(|e| SetupError::io(Step::Loopback, "lo".as_ref(), &e))?;
    }

    // I13. Hostname, the script, rlimits (inherited by the payload).
    if plan.layers.namespaces.uts {
        nix::unistd::sethostname(&plan.hostname)
            .map_err(|e| SetupError::errno(Step::Sethostname, e))?;
    }
    // Sized from the memfd's length: a cold job's input files follow its code there,
    // and growing the buffer by doubling copied them twice over.
    let mut code_file = std::fs::File::from(fds.code);
    let size = code_file.metadata().map_or(0, |m| m.len() as usize);
    let mut code = Vec::with_capacity(size);
    code_file
        .read_to_end(&mut code)
        .map_err(|e| SetupError::io(Step::ReadCode, "memfd".as_ref(), &e))?;
    if !plan.kind.is_zygote() {
        // (A zygote's program is its `-c`; its /work is a read-only empty directory.)
        // The memfd holds the script, then the input files' bytes (a cold job's).
        let files: u64 = plan.inputs.iter().map(|f| f.len).sum();
        let split = (code.len() as u64)
            .checked_sub(files)
            .ok_or(SetupError::Other {
                step: Step::InputFile,
                detail: format!(
                    "the files need {files} bytes, the code memfd holds {}",
                    code.len()
                ),
            })? as usize;
        let (script, inputs) = code.split_at(split);
        mount::write_script(SCRIPT_PATH.as_ref(), script, owner)?;
        if !plan.inputs.is_empty() {
            crate::inputs::place("/work".as_ref(), &plan.inputs, inputs, owner)?;
        }
    }
    drop(code);
    rlimit::apply(&plan.rlimits)?;

    // I14. Fork the payload; stay as its reaper.
    let (exec_r, mut exec_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| SetupError::errno(Step::Pipe, e))?;
    if !fds.extra.is_empty() {
        // The payload dup2s the extra fds onto 3, 4, ...: nothing it still needs may
        // have those numbers.
        let high = |fd: &OwnedFd| {
            sys::dup_at_least(fd.as_fd(), 64)
                .map_err(|e| SetupError::io(Step::Dup, "extra".as_ref(), &e))
        };
        exec_w = high(&exec_w)?;
        fds.extra = fds.extra.iter().map(high).collect::<Result<_, _>>()?;
    }
    // The payload runs on init's memory until its execve (see `sys::vfork_run`): it only
    // borrows what init owns and ends in execve or `exit_now`.
    let stdio = [fds.stdin.as_fd(), fds.stdout.as_fd(), fds.stderr.as_fd()];
    let layers = (kernel_landlock_abi, rootless);
    let mut child = || {
        let err = match payload(&stdio, &fds.extra, plan, prepared, layers, &exec_w) {
            Ok(never) => match never {},
            Err(e) => e,
        };
        let msg = encode(&PayloadMsg::Failed(Failure::from(&err)));
        let _ = nix::unistd::write(&exec_w, &msg);
        sys::exit_now(127)
    };
    // SAFETY: init is single-threaded and installs no signal handler; `child` ends in
    // execve or exit_now, and moves or drops nothing of init's (it borrows the plan and
    // the fds, and allocates only its own).
    #[allow(unsafe_code)]
    let forked = unsafe { sys::vfork_run(&mut child) };
    let payload =
        Pid::from_raw(forked.map_err(|e| SetupError::io(Step::Clone, "payload".as_ref(), &e))?);
    // The payload has the only copies of stdio that matter: EOF reaches the server
    // as soon as the job's processes are gone.
    drop((fds.stdin, fds.stdout, fds.stderr, fds.extra, exec_w));
    after_fork(&plan.layers)?;
    // (Without a pid namespace of its own, a test-only plan, kill(-1) would reach beyond
    // the job: only the payload's process group is killed then.)
    let everyone = if plan.layers.namespaces.pid {
        Pid::from_raw(-1)
    } else {
        Pid::from_raw(-payload.as_raw())
    };
    supervise(payload, exec_r, status, everyone)?;
    // The job's artifacts, as its user, once nothing of it runs (a plan without its own
    // pid namespace, test-only, may leave processes of the job behind: no collection).
    if plan.layers.namespaces.pid {
        crate::outputs::collect_for_job(&fds.outputs, owner);
    }
    Ok(())
}

/// In init, once the payload is forked: what a plan with fewer layers asks of it (a
/// test-only plan; nothing for the full sandbox).
fn after_fork(layers: &crate::plan::Layers) -> Result<(), SetupError> {
    if !layers.init_root {
        let (gid, uid) = (Gid::from_raw(SANDBOX_GID), Uid::from_raw(SANDBOX_UID));
        nix::unistd::setresgid(gid, gid, gid)
            .map_err(|e| SetupError::errno(Step::WeakInitSetresgid, e))?;
        nix::unistd::setresuid(uid, uid, uid)
            .map_err(|e| SetupError::errno(Step::WeakInitSetresuid, e))?;
        nix::sys::prctl::set_dumpable(true)
            .map_err(|e| SetupError::errno(Step::WeakInitDumpable, e))?;
        // (The credential change cleared the parent-death signal.)
        sys::set_parent_death_signal(libc::SIGKILL)
            .map_err(|e| SetupError::io(Step::WeakInitPdeathsig, "/".as_ref(), &e))?;
    }
    if !layers.namespaces.pid {
        // Not a pid namespace's init: take the job's orphans explicitly.
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| SetupError::errno(Step::WeakSubreaper, e))?;
    }
    Ok(())
}

/// Init's part once the payload is forked: relay the payload's setup report (`Running`
/// or `Failed`), reap until the payload ends, then end and reap whatever it left
/// (`everyone`: -1, or the payload's process group) and report `Exited`. Shared by a
/// cold job's init and a zygote job's (`crate::zygote`). (The caller collects the job's
/// artifacts after: the spawner has the job's report by then, so its wall time and
/// deadlines are the job's alone.)
pub(crate) fn supervise(
    payload: Pid,
    exec_r: OwnedFd,
    status: &std::fs::File,
    everyone: Pid,
) -> Result<(), SetupError> {
    let mut buf = Vec::new();
    let _ = std::fs::File::from(exec_r).read_to_end(&mut buf);
    let mut landlock = None;
    for msg in crate::report::decode_all::<PayloadMsg>(&mut buf) {
        match msg {
            PayloadMsg::Landlock(s) => landlock = Some(s),
            // (A zygote job's init takes this one before it supervises.)
            PayloadMsg::UserNs { .. } => {}
            PayloadMsg::Failed(f) => {
                send(status, &InitMsg::Failed(f));
                let _ = waitpid(payload, None);
                sys::exit_now(121);
            }
        }
    }
    let Some(landlock) = landlock else {
        return Err(SetupError::Other {
            step: Step::Payload,
            detail: "payload died before reporting".into(),
        });
    };
    send(status, &InitMsg::Running { landlock });

    let exit = reap_until(payload);
    // The job is over: end whatever it left running (kill(-1) from a pid namespace's
    // init reaches every other process in it) and reap it all, so that when the
    // spawner hears `Exited`, only this process is left.
    let _ = nix::sys::signal::kill(everyone, nix::sys::signal::Signal::SIGKILL);
    while !matches!(waitpid(Pid::from_raw(-1), None), Err(nix::Error::ECHILD)) {}
    let disk_full = ["/work", "/tmp", "/dev/shm"].iter().any(|p| {
        nix::sys::statvfs::statvfs(*p)
            .map(|s| s.blocks_available() == 0 || s.files_available() == 0)
            .unwrap_or(false)
    });
    send(
        status,
        &InitMsg::Exited {
            status: exit,
            disk_full,
        },
    );
    Ok(())
}

/// cgroup v1: the spawner sends `ok <name>` and the job cgroup's `tasks` files (one per
/// hierarchy, opened by the spawner: the kernel checks the opener's credentials, and we
/// are no longer the host's uid 0). Write `0` to each (a single-threaded process moving
/// itself: the cheap attach), then check that every hierarchy lists us in the job's
/// cgroup. Anything else (`error`, a hang-up) ends the job here: it never runs outside.
fn join_late_cgroup(sock: &OwnedFd) -> Result<(), SetupError> {
    let mut buf = [0u8; 256];
    let (n, files) = sys::recv_with_fds(sock.as_fd(), &mut buf, MsgFlags::empty())
        .map_err(|e| SetupError::io(Step::CgroupAttach, "spawner".as_ref(), &e))?;
    let text = String::from_utf8_lossy(&buf[..n]);
    let Some(name) = text.strip_prefix("ok ") else {
        return Err(SetupError::Other {
            step: Step::CgroupAttach,
            detail: format!("the spawner made no cgroup: {text:?}"),
        });
    };
    attach_self(&files, name)
}

/// Move this (single-threaded) process into the job's cgroup `name` by writing `0` to
/// each of its `files` (`tasks` on v1, `cgroup.procs` on v2, opened by the spawner), then
/// check that `/proc/self/cgroup` lists `name` in as many hierarchies. Fails closed: no
/// file, a refused write or a missing hierarchy is an error. Shared by a cold job's init
/// on v1 and a zygote job's init.
pub(crate) fn attach_self(files: &[OwnedFd], name: &str) -> Result<(), SetupError> {
    if files.is_empty() {
        return Err(SetupError::Other {
            step: Step::CgroupAttach,
            detail: "no cgroup file came with the job".into(),
        });
    }
    for file in files {
        nix::unistd::write(file, b"0").map_err(|e| SetupError::errno(Step::CgroupAttach, e))?;
    }
    let own = format!("/{name}");
    let listed = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| SetupError::io(Step::CgroupAttach, "/proc/self/cgroup".as_ref(), &e))?;
    let joined = listed.lines().filter(|l| l.ends_with(own.as_str())).count();
    if joined < files.len() {
        return Err(SetupError::Other {
            step: Step::CgroupAttach,
            detail: format!("in {joined} of {} job cgroups: {listed}", files.len()),
        });
    }
    Ok(())
}

const MEMFD_NOEXEC: &str = "/proc/sys/vm/memfd_noexec";

/// `/proc/sys/user/<name>` of the caller's user namespace (the sysctl acts on the
/// writer's). `keep_namespaces`: a zygote keeps its namespace limits (it makes each
/// forked job's), and so does a plan without `namespace_limits` (test-only).
pub(super) fn set_user_ns_limits(keep_namespaces: bool) -> Result<(), SetupError> {
    let zero = crate::plan::NO_NAMESPACES.iter().map(|n| (*n, 0));
    let namespaces: Vec<(&str, u64)> = if keep_namespaces {
        Vec::new()
    } else {
        zero.collect()
    };
    for (name, value) in crate::plan::USER_NS_LIMITS
        .iter()
        .copied()
        .chain(namespaces)
    {
        let path = std::path::Path::new("/proc/sys/user").join(name);
        std::fs::write(&path, format!("{value}\n"))
            .map_err(|e| SetupError::io(Step::UsernsLimits, &path, &e))?;
    }
    Ok(())
}

fn set_memfd_noexec() -> Result<(), SetupError> {
    if !std::path::Path::new(MEMFD_NOEXEC).exists() {
        return Ok(());
    }
    // 2: every memfd is created non-executable and sealed so; MFD_EXEC is refused.
    std::fs::write(MEMFD_NOEXEC, "2")
        .map_err(|e| SetupError::io(Step::MemfdNoexec, MEMFD_NOEXEC.as_ref(), &e))
}

/// Reap every child (orphans re-parent to us) until `payload` itself has ended.
fn reap_until(payload: Pid) -> WaitStatus {
    loop {
        match waitpid(Pid::from_raw(-1), None) {
            Ok(NixWait::Exited(pid, code)) if pid == payload => return WaitStatus::Code(code),
            Ok(NixWait::Signaled(pid, sig, _)) if pid == payload => {
                return WaitStatus::Signal(sig as i32)
            }
            Ok(_) | Err(nix::Error::EINTR) => continue,
            Err(_) => return WaitStatus::Code(255),
        }
    }
}

/// The payload's half of the setup order (steps 5 to 8). Returns only on failure.
fn payload(
    stdio: &[std::os::fd::BorrowedFd<'_>; 3],
    extra: &[OwnedFd],
    plan: &JobPlan,
    prepared: &Prepared,
    (kernel_landlock_abi, rootless): (u32, bool),
    exec_w: &OwnedFd,
) -> Result<std::convert::Infallible, SetupError> {
    // The exec's vectors first: nothing is allocated once the filters are in place.
    let argv: Vec<*const libc::c_char> = prepared
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = prepared
        .envp
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // P1-P6. The confinement, the same steps as a forked payload's (`confine`).
    //    A zygote's own start keeps its capabilities in this user namespace, and gets
    //    neither Landlock nor seccomp: it makes each job's namespaces and mounts, and
    //    every job drops them and applies both layers.
    confine(Confine {
        stdio: *stdio,
        extra,
        // Not the daemon's inherited dispositions and mask.
        reset_signals: true,
        other_fds: if plan.layers.close_fds {
            OtherFds::CloseOnExec
        } else {
            OtherFds::Keep
        },
        privileges: if !plan.layers.drop_caps || plan.kind.is_zygote() {
            Privileges::Keep
        } else {
            Privileges::Drop {
                rootless,
                dumpable_again: false,
            }
        },
        landlock: (plan.layers.landlock && !plan.kind.is_zygote())
            .then_some((&plan.landlock, kernel_landlock_abi)),
        // (Empty only in a test-only plan.)
        filters: &prepared.filters,
        report: exec_w,
    })?;

    // P7. execve; seccomp must allow it (it is the last syscall of our setup).
    let err = sys::execve(&prepared.exe, &argv, &envp);
    Err(SetupError::io(Step::Execve, &plan.interpreter, &err))
}

/// Step P4: every capability gone, securebits locked, the unprivileged ids.
pub(crate) fn drop_privileges(rootless: bool) -> Result<(), SetupError> {
    caps::drop_bounding_ambient_inheritable()?;
    sys::lock_securebits().map_err(|e| SetupError::io(Step::Securebits, "/".as_ref(), &e))?;
    if !rootless {
        // (A rootless job's namespace has setgroups denied and no other group.)
        nix::unistd::setgroups(&[]).map_err(|e| SetupError::errno(Step::Setgroups, e))?;
    }
    let (gid, uid) = (Gid::from_raw(SANDBOX_GID), Uid::from_raw(SANDBOX_UID));
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| SetupError::errno(Step::Setresgid, e))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| SetupError::errno(Step::Setresuid, e))?;
    // Leaving uid 0 cleared the permitted and effective sets; a rootless payload was
    // uid 1000 all along and still holds them (in its own namespace): clear them.
    caps::drop_permitted_effective()?;
    caps::verify_none_left()?;
    Ok(())
}
