//! The raw syscalls that no crate wraps (clone3, pidfd_send_signal, close_range,
//! SO_PEERGROUPS, a few prctls). Every other module is `deny(unsafe_code)` (the crate root
//! allows it for this one).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `struct clone_args` from `linux/sched.h` (version 2, 88 bytes).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// What `clone3` returned in the caller.
pub enum Forked {
    /// We are the new process.
    Child,
    /// We are the parent; the child's pid and a pidfd for it.
    Parent { pid: libc::pid_t, pidfd: OwnedFd },
}

/// `clone3` without `CLONE_VM`: fork semantics (the child gets a copy of the address
/// space and continues from here) plus namespace flags, a pidfd, and optionally
/// `CLONE_INTO_CGROUP`.
///
/// # Safety
///
/// The caller must be single-threaded (the spawner is), so that the child does not
/// inherit locks (the allocator's, stdio's) held by threads that do not exist in it; the
/// child then owns a copy of everything the caller owned.
pub unsafe fn clone3(
    namespaces: libc::c_int,
    cgroup: Option<BorrowedFd<'_>>,
) -> io::Result<Forked> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: (namespaces as u64) | libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut RawFd as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..Default::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= 0x200000000; // CLONE_INTO_CGROUP (linux 5.7)
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a valid, fully initialised clone_args whose pidfd pointer refers
    // to a live local; without CLONE_VM or a stack the child runs on a copy of our
    // address space, exactly like fork(2).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            pid: pid as libc::pid_t,
            // SAFETY: CLONE_PIDFD stored a fresh fd that nothing else owns.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
        }),
    }
}

/// Send a signal through a pidfd (no pid-reuse race).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid pidfd, a null siginfo and zero flags are what the syscall accepts.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Mark every fd from `first` up as close-on-exec (linux 5.11 `CLOSE_RANGE_CLOEXEC`):
/// they stay usable until execve and are gone after it.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes fd flags; no memory is touched.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, CLOSE_RANGE_CLOEXEC) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The supplementary groups of a unix socket's peer (`SO_PEERGROUPS`, linux 4.13).
pub fn peer_groups(sock: BorrowedFd<'_>) -> io::Result<Vec<libc::gid_t>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a live buffer of exactly `len` bytes.
        let ret = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let count = len as usize / std::mem::size_of::<libc::gid_t>();
        if ret == 0 {
            groups.truncate(count);
            return Ok(groups);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ERANGE) && count > groups.len() {
            groups.resize(count, 0);
            continue;
        }
        return Err(err);
    }
}

fn prctl(option: libc::c_int, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: the prctl options used here take integer arguments only.
    let ret = unsafe {
        libc::prctl(
            option,
            arg,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Ask the kernel to send `sig` to us when our parent dies.
pub fn set_parent_death_signal(sig: libc::c_int) -> io::Result<()> {
    prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong)
}

pub fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1)
}

/// PR_SET_DUMPABLE: whether processes of the same uid may ptrace this one or read its
/// /proc entries (hidepid=invisible hides a non-dumpable process from them).
pub fn set_dumpable(on: bool) -> io::Result<()> {
    prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(on))
}

/// Lock the securebits so that uid 0 inside never regains capabilities (NOROOT), no
/// capability survives a uid change (KEEP_CAPS off, locked) and ambient capabilities
/// cannot be raised. NO_SETUID_FIXUP stays off so setresuid clears the permitted set.
pub fn lock_securebits() -> io::Result<()> {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
    const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    prctl(
        libc::PR_SET_SECUREBITS,
        SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED
            | SECBIT_NO_CAP_AMBIENT_RAISE
            | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
    )
}

/// Run `child` in a new process that shares the caller's memory until it calls execve
/// or exits: `clone(CLONE_VM | CLONE_VFORK)` on a stack of its own, as glibc's
/// posix_spawn does. The caller is suspended meanwhile. Unlike fork, no page tables are
/// copied, nothing is copied on write, and the exec has no copy to tear down. Returns
/// the child's pid once it has exec'd or exited.
///
/// Credentials, capabilities, Landlock, seccomp, the fd table and the working directory
/// are the child's own (no CLONE_FILES, CLONE_FS or CLONE_THREAD).
///
/// # Safety
///
/// `child` runs on the caller's memory: it must end in execve or [`exit_now`] and must
/// not drop or move anything the caller owns (it may allocate and free its own). The
/// caller must be single-threaded and have no signal handler that could run in the
/// child before its exec (the spawner and the job's init install none; Rust's stack
/// overflow handler only resets itself).
pub unsafe fn vfork_run(
    child: &mut dyn FnMut() -> std::convert::Infallible,
) -> io::Result<libc::pid_t> {
    const STACK: usize = 1 << 20;
    const GUARD: usize = 64 << 10;
    #[allow(unreachable_code)] // (`child` never returns)
    extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the `&mut dyn FnMut` below, alive while the caller waits.
        #[allow(unsafe_code)]
        let child = unsafe { &mut *(arg as *mut &mut dyn FnMut() -> std::convert::Infallible) };
        match child() {}
    }
    // SAFETY: a private anonymous mapping of our own, unmapped below; its lowest pages
    // are a guard, so an overflow faults instead of writing over the caller's memory.
    #[allow(unsafe_code)]
    unsafe {
        let stack = libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let guarded = libc::mprotect(stack, GUARD, libc::PROT_NONE);
        let mut obj: &mut dyn FnMut() -> std::convert::Infallible = child;
        let pid = if guarded == 0 {
            libc::clone(
                trampoline,
                stack.cast::<u8>().add(STACK).cast(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                (&mut obj as *mut &mut dyn FnMut() -> std::convert::Infallible).cast(),
            )
        } else {
            -1
        };
        let err = io::Error::last_os_error();
        libc::munmap(stack, STACK);
        if pid < 0 {
            Err(err)
        } else {
            Ok(pid)
        }
    }
}

/// What [`vfork_fork_exec`] returned in this process.
pub enum VforkForked {
    /// The caller, resumed: its vfork child (pid here) has exec'd `exe`.
    Caller(libc::pid_t),
    /// The vfork child's own fork, a copy of the caller's memory and the exec'd
    /// process's child, returning here as the caller would.
    Grandchild,
}

/// What the vfork child reads (and writes back on failure) in the caller's memory.
#[cfg(target_arch = "x86_64")]
#[repr(C)]
struct ExecArgs {
    fd: i64,
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Set by the child on failure: 1, its fork failed (errno in the caller's TLS,
    /// which the child shares); 2, its execveat failed, with `errno`.
    failed: i32,
    errno: i32,
}

/// `vfork(2)`, then in the vfork child glibc's `fork(3)` and `execveat(exe, "",
/// AT_EMPTY_PATH)`: the exec'd process costs no copy of the caller's address space, and
/// its one child, the grandchild, is the only copy, which returns here
/// ([`VforkForked::Grandchild`]) on a copy of the caller's stack, so it goes on as the
/// caller would after a fork. The caller resumes when its child has exec'd (or failed:
/// then the child has exited, and the error says which step failed).
///
/// Written in assembly (x86_64): a `vfork` child runs on the caller's stack frame, so
/// compiled code between the `vfork` and the exec could spill into slots the caller
/// still uses (Rust cannot mark a function `returns_twice`). Here the child only calls
/// `fork` (its frames go below the stack pointer, which `asm!` without `nostack` may
/// use) and makes two syscalls, from registers and from `ExecArgs`, which is in the
/// caller's frame. Both returns of the block look like a call's return to the compiler
/// (`clobber_abi("C")`): in the caller with the child's pid, in the grandchild with 0.
///
/// # Safety
///
/// The caller must be single-threaded with every signal blocked (no handler may run in
/// the child, which shares its memory); `argv` and `envp` must be NULL-terminated
/// arrays of NUL-terminated strings that live across the call. The grandchild holds a
/// copy of everything the caller owns (as after `fork`), and the exec'd process gets
/// the caller's fds that are not close-on-exec.
#[cfg(target_arch = "x86_64")]
pub unsafe fn vfork_fork_exec(
    exe: BorrowedFd<'_>,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> io::Result<VforkForked> {
    assert!(argv.last().is_some_and(|p| p.is_null()));
    assert!(envp.last().is_some_and(|p| p.is_null()));
    let mut args = ExecArgs {
        fd: i64::from(exe.as_raw_fd()),
        path: c"".as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        failed: 0,
        errno: 0,
    };
    let fork: unsafe extern "C" fn() -> libc::pid_t = libc::fork;
    let ret: i64;
    // SAFETY: see the function's doc. The child reads `args` (alive in this frame, which
    // it never writes), calls `fork` with the stack aligned for a call, and ends in
    // execveat or exit_group; the grandchild and the resumed caller both leave the block
    // with the callee-saved registers as they entered it.
    unsafe {
        std::arch::asm!(
            // clone(CLONE_VM | CLONE_VFORK | SIGCHLD, 0, ...): vfork(2).
            "mov eax, 56",
            "syscall",
            "test rax, rax",
            "jnz 2f",
            // The vfork child, on the caller's memory: fork the grandchild.
            "call r13",
            "test eax, eax",
            "jz 2f",
            "js 3f",
            // execveat(fd, "", argv, envp, AT_EMPTY_PATH)
            "mov rdi, qword ptr [r12]",
            "mov rsi, qword ptr [r12 + 8]",
            "mov rdx, qword ptr [r12 + 16]",
            "mov r10, qword ptr [r12 + 24]",
            "mov r8d, 0x1000",
            "mov eax, 322",
            "syscall",
            "neg eax",
            "mov dword ptr [r12 + 36], eax",
            "mov dword ptr [r12 + 32], 2",
            "jmp 4f",
            "3:",
            "mov dword ptr [r12 + 32], 1",
            "4:",
            // exit_group(127)
            "mov edi, 127",
            "mov eax, 231",
            "syscall",
            "ud2",
            "2:",
            in("r12") &mut args as *mut ExecArgs,
            in("r13") fork,
            inout("rdi") (libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD) as u64 => _,
            in("rsi") 0u64,
            in("rdx") 0u64,
            in("r10") 0u64,
            in("r8") 0u64,
            lateout("rax") ret,
            clobber_abi("C"),
        );
    }
    match ret {
        0 => Ok(VforkForked::Grandchild),
        r if r < 0 => Err(io::Error::from_raw_os_error(-r as i32)),
        pid => {
            let pid = pid as libc::pid_t;
            // (Read through a volatile pointer: the child wrote it behind the compiler's
            // back.)
            // SAFETY: `args` is alive; the child, gone, no longer writes it.
            let (failed, errno) = unsafe {
                (
                    std::ptr::read_volatile(&args.failed),
                    std::ptr::read_volatile(&args.errno),
                )
            };
            if failed == 0 {
                return Ok(VforkForked::Caller(pid));
            }
            let err = match failed {
                1 => io::Error::other(format!(
                    "fork in the vfork child: {}",
                    io::Error::last_os_error()
                )),
                _ => io::Error::from_raw_os_error(errno),
            };
            // The child has exited (a zombie until reaped, here); its grandchild, if
            // any, died with the child's pid namespace or is reparented and killed.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            Err(err)
        }
    }
}

/// [`vfork_fork_exec`] elsewhere than on x86_64: not written yet, so a zygote's requests
/// fail (and its jobs start cold).
///
/// # Safety
///
/// As on x86_64.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn vfork_fork_exec(
    _exe: BorrowedFd<'_>,
    _argv: &[*const libc::c_char],
    _envp: &[*const libc::c_char],
) -> io::Result<VforkForked> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Block every signal, returning the previous mask (for [`restore_mask`]).
pub fn block_all_signals() -> io::Result<nix::sys::signal::SigSet> {
    use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    sigprocmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut old),
    )?;
    Ok(old)
}

/// Set the signal mask back to `mask`.
pub fn restore_mask(mask: &nix::sys::signal::SigSet) -> io::Result<()> {
    use nix::sys::signal::{sigprocmask, SigmaskHow};
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(mask), None)?;
    Ok(())
}

/// `setns(2)` into several of `pidfd`'s process's namespaces at once (linux 5.8).
pub fn setns_pidfd(pidfd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: setns takes an fd and an integer; no memory is involved.
    if unsafe { libc::setns(pidfd.as_raw_fd(), flags) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set close-on-exec on `fd` (`on`) or clear it.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    let flags = if on { libc::FD_CLOEXEC } else { 0 };
    // SAFETY: F_SETFD takes an int argument; no memory is involved.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set this process's name (`PR_SET_NAME`, its `comm`).
pub fn set_name(name: &std::ffi::CStr) -> io::Result<()> {
    prctl(libc::PR_SET_NAME, name.as_ptr() as libc::c_ulong)
}

/// `fork(2)` through glibc (its fork handlers run, and the child's thread descriptor
/// gets its own tid, which a raw `clone` would leave at the parent's: `raise` in the
/// child would signal the parent). `Ok(Some(child))` in the parent, `Ok(None)` in the
/// child. For the zygote and the job's init it forks, both single-threaded: the zygote's
/// bootstrap checks that it has one thread before it serves.
///
/// # Safety
///
/// The caller must be single-threaded, or the child must make only calls that take no
/// lock another thread may hold (glibc's fork makes malloc safe in the child; stdio and
/// Rust's own locks are not), until it execs or exits.
pub unsafe fn fork() -> io::Result<Option<libc::pid_t>> {
    // SAFETY: the caller's contract above: the child's copy holds no lock it will need
    // that a thread missing from it took; both sides go on with memory each owns.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        child => Ok(Some(child)),
    }
}

/// In the job's init, just forked from the zygote's interpreter: SIGCHLD at its default
/// action and no signal blocked, whatever the zygote's preloads left there (init
/// supervises the payload with `waitpid`, and the payload inherits both).
pub fn reset_sigchld_and_mask() -> io::Result<()> {
    use nix::sys::signal::{sigprocmask, SigHandler, SigSet, SigmaskHow, Signal};
    // SAFETY: SIG_DFL installs no handler, so no code of ours can run on a signal.
    unsafe { nix::sys::signal::signal(Signal::SIGCHLD, SigHandler::SigDfl) }?;
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// Every signal at its default action and none blocked: what a fresh process gets from
/// the kernel, whatever the daemon inherited from how it was started (a shell's
/// background job ignores SIGINT and SIGQUIT, and an ignored signal stays ignored
/// across execve, as a blocked one stays blocked). SIGKILL and SIGSTOP cannot be changed,
/// and the C library's reserved real-time signals refuse it (EINVAL): both are skipped.
pub fn reset_signals() -> io::Result<()> {
    use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow};
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: an all-zero sigaction is SIG_DFL with an empty mask and no flags:
        // no handler of ours is installed, so no code can run on a signal.
        let dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `dfl` is a valid sigaction for the duration of the call; the old
        // action is not asked for.
        let r = unsafe { libc::sigaction(sig, &dfl, std::ptr::null_mut()) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(e);
            }
        }
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    Ok(())
}

/// `pidfd_open(2)`: a pidfd for `pid` (a zombie has one too, until it is reaped).
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: a plain syscall with two integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Exit immediately without running atexit handlers or flushing stdio buffers that
/// belong to the parent's copy of the address space.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust state.
    unsafe { libc::_exit(code) }
}

/// Duplicate `fd` onto `target` (dup2), clearing close-on-exec on the copy.
pub fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    if fd.as_raw_fd() == target {
        // dup2 would be a no-op and leave FD_CLOEXEC as it is: clear it explicitly.
        let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD)?;
        let mut flags = nix::fcntl::FdFlag::from_bits_truncate(flags);
        flags.remove(nix::fcntl::FdFlag::FD_CLOEXEC);
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(flags))?;
        return Ok(());
    }
    // SAFETY: dup2 onto a fixed fd number; both are plain integers and the kernel
    // closes whatever `target` was atomically.
    let ret = unsafe { libc::dup2(fd.as_raw_fd(), target) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A close-on-exec duplicate of `fd` numbered `min` or above (F_DUPFD_CLOEXEC): moves
/// a descriptor out of the way of fixed numbers that are about to be dup2'd onto.
pub fn dup_at_least(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes an int argument and returns a new descriptor.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

/// execve with prepared, NUL-terminated argv and envp. Returns only on failure.
pub fn execve(
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> io::Error {
    debug_assert!(argv.last().is_some_and(|p| p.is_null()));
    debug_assert!(envp.last().is_some_and(|p| p.is_null()));
    // SAFETY: `path` is NUL terminated; argv and envp are NULL-terminated arrays of
    // pointers into CStrings that the caller keeps alive across this call.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

/// The kernel's Landlock ABI version (0 when Landlock is unavailable).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attr and size 0 and the VERSION flag, the syscall only
    // returns the ABI number and reads no memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(ret).unwrap_or(0)
}

/// Close every fd except those in `keep` (close_range over the gaps, linux 5.9).
///
/// # Safety
///
/// Every open fd not in `keep` must be owned by nothing the caller will use again (an
/// `OwnedFd`, a `File` or a socket object for it would later close or use a number that
/// may by then name another file): true in a freshly cloned or forked child, which only
/// goes on with the fds it keeps.
pub unsafe fn close_all_except(keep: &[u32]) -> io::Result<()> {
    let mut keep = keep.to_vec();
    keep.sort_unstable();
    let mut first = 0u32;
    for &k in keep.iter().chain(std::iter::once(&u32::MAX)) {
        if k > first {
            let last = k - 1;
            // SAFETY: closing fds the caller does not keep; no memory is involved and
            // the caller (a freshly cloned child) owns no Rust objects for them that
            // it will use again.
            let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
            if ret == -1 {
                return Err(io::Error::last_os_error());
            }
        }
        first = k.saturating_add(1);
        if k == u32::MAX {
            break;
        }
    }
    Ok(())
}

/// Start `exe args...` with `fd` as its fd 3 (and nothing else inherited besides stdio).
pub fn spawn_with_fd3(
    exe: &std::path::Path,
    args: &[&str],
    fd: OwnedFd,
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let raw = fd.as_raw_fd();
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args).stdin(std::process::Stdio::null());
    // SAFETY: the closure runs between fork and exec and only calls dup2/fcntl, which
    // are async-signal-safe; `raw` stays open in the parent until spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if raw == 3 {
                let flags = libc::fcntl(3, libc::F_GETFD);
                if flags == -1 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(raw, 3) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn();
    drop(fd);
    child
}

/// Take ownership of a descriptor this process was given at exec (socket activation's
/// `sd_listen_fds(3)`, the spawner's link on fd 3). Fails with EBADF if it is not open.
///
/// # Safety
///
/// Nothing else in the process may own `fd`: call it once per descriptor, at startup,
/// before anything could have wrapped or closed it.
pub unsafe fn adopt_inherited_fd(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_GETFD only inspects the descriptor table; it fails with EBADF if `fd`
    // is not open, so we never wrap a closed number.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open (checked above), and the caller's contract makes the OwnedFd
    // its sole owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bring the loopback interface of the caller's network namespace up
/// (`SIOCGIFFLAGS`/`SIOCSIFFLAGS` on `lo`, see netdevice(7)); needs CAP_NET_ADMIN over
/// that namespace unless `lo` is up already (then it changes nothing).
pub fn loopback_up() -> io::Result<()> {
    use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value (empty name, no flags).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `sock` is an open socket; `req` is a valid, NUL-terminated ifreq that
    // outlives the call; SIOCGIFFLAGS writes only `ifr_ifru.ifru_flags` in it.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) } == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just filled the flags member of the union (SIOCGIFFLAGS).
    unsafe {
        if req.ifr_ifru.ifru_flags & libc::IFF_UP as libc::c_short != 0 {
            return Ok(());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: as above; SIOCSIFFLAGS only reads `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is an open descriptor (F_GETFD succeeds).
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags; no memory is involved and an
    // unused number just yields EBADF.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// Send `bytes` as one datagram on a SOCK_SEQPACKET socket with `fds` attached
/// (SCM_RIGHTS).
pub fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() {
        &[]
    } else {
        &[ControlMessage::ScmRights(&raw)]
    };
    sendmsg::<()>(
        sock.as_raw_fd(),
        &[io::IoSlice::new(bytes)],
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

/// Receive one datagram into `buf` with up to 8 fds attached (SCM_RIGHTS, close-on-exec),
/// with `flags` (`MSG_DONTWAIT`, say). Returns its length (0: end of stream) and the fds;
/// a datagram or fd list that did not fit is `InvalidData` (its fds are closed).
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: nix::sys::socket::MsgFlags,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    recv_with_up_to::<8>(sock, buf, flags)
}

/// [`recv_with_fds`] with room for up to `N` fds.
pub fn recv_with_up_to<const N: usize>(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: nix::sys::socket::MsgFlags,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut cmsg = nix::cmsg_space!([RawFd; N]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC | flags,
    )?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: SCM_RIGHTS gave us fresh fds that nothing else owns.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg
        .flags
        .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "datagram or its fds truncated",
        ));
    }
    Ok((msg.bytes, fds))
}

/// One of the standard fds (0, 1 or 2), borrowed. Only for a process whose standard
/// fds stay open for its whole life, as a job's payload's do (they are the job's stdio).
pub fn stdio(fd: RawFd) -> BorrowedFd<'static> {
    assert!((0..=2).contains(&fd), "fd {fd} is not a standard one");
    // SAFETY: the caller's standard fds are open for the rest of the process (above).
    #[allow(unsafe_code)]
    unsafe {
        BorrowedFd::borrow_raw(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// `vfork_fork_exec` in a test process: the grandchild (which only reports its parent
    /// and exits: the harness has other threads) is the exec'd process's child, and the
    /// caller gets that process's pid once it has exec'd.
    #[test]
    fn the_grandchild_of_vfork_fork_exec_is_the_exec_d_processs_child() {
        use std::ffi::CString;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let sleep = std::fs::File::open("/bin/sleep").unwrap();
        let args: Vec<CString> = ["sleep", "30"].map(|a| CString::new(a).unwrap()).into();
        let argv: Vec<*const libc::c_char> = (args.iter().map(|a| a.as_ptr()))
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp = [std::ptr::null()];
        let mask = block_all_signals().unwrap();
        // SAFETY: the grandchild takes no lock (getppid, write, _exit); argv and envp
        // are NULL-terminated and alive; every signal is blocked.
        let forked = unsafe { vfork_fork_exec(sleep.as_fd(), &argv, &envp) };
        match forked {
            Ok(VforkForked::Grandchild) => {
                let ppid = nix::unistd::getppid().as_raw();
                let _ = nix::unistd::write(&w, &ppid.to_le_bytes());
                exit_now(0)
            }
            Ok(VforkForked::Caller(pid)) => {
                restore_mask(&mask).unwrap();
                drop(w);
                let mut buf = [0u8; 4];
                assert_eq!(nix::unistd::read(&r, &mut buf), Ok(4));
                assert_eq!(i32::from_le_bytes(buf), pid, "the grandchild's parent");
                let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
                assert!(exe.ends_with("sleep"), "{}", exe.display());
                let pid = nix::unistd::Pid::from_raw(pid);
                nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// A failed exec in the vfork child is the caller's error (with its errno), and the
    /// child is reaped.
    #[test]
    fn a_failed_exec_in_vfork_fork_exec_is_the_callers_error() {
        let not_exe = std::fs::File::open("/dev/null").unwrap();
        let argv = [c"x".as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null()];
        let mask = block_all_signals().unwrap();
        // SAFETY: as above; the grandchild only exits.
        let forked = unsafe { vfork_fork_exec(not_exe.as_fd(), &argv, &envp) };
        match forked {
            Ok(VforkForked::Grandchild) => exit_now(0),
            Ok(VforkForked::Caller(pid)) => panic!("/dev/null ran as {pid}"),
            Err(e) => {
                restore_mask(&mask).unwrap();
                assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
            }
        }
    }

    /// The child runs on the caller's memory, and the caller waits until it has exec'd
    /// or exited; its fd table is its own.
    #[test]
    fn vfork_run_shares_memory_until_the_child_is_gone() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let seen = std::cell::Cell::new(0u32);
        let mut child = || {
            seen.set(7);
            // Closing in the child leaves the caller's copy open.
            let _ = nix::unistd::close(r.as_raw_fd());
            exit_now(3)
        };
        // SAFETY: the child only sets a Cell it was lent, closes an fd number and
        // exits: it takes no lock and touches nothing the harness's other threads use
        // (they run meanwhile, the test thread is suspended), and no signal handler of
        // this process runs Rust code.
        let pid = unsafe { vfork_run(&mut child) }.unwrap();
        assert_eq!(
            seen.get(),
            7,
            "the caller resumed before the child was done"
        );
        nix::unistd::write(&w, b"x").expect("the caller's read end is still open");
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 3)
        );
        drop(r);
    }
}
