//! `libvivarium_zygote.so`: the zygote's per-job setup (`vivariumd::sandbox::zygote`),
//! exported for its interpreter, which loads it with `ctypes.PyDLL` (the GIL stays held
//! during each call, so no other Python code runs while a call forks or unshares).

use std::os::fd::{FromRawFd, OwnedFd};
use vivariumd::sandbox::zygote;

mod arena;

#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena;

/// `unshare(CLONE_NEWPID)` in the zygote before each fork. Returns 0 or an errno.
#[no_mangle]
pub extern "C" fn vivarium_zygote_new_pid_ns() -> i32 {
    match zygote::new_pid_namespace() {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc_eio()),
    }
}

fn libc_eio() -> i32 {
    5
}

/// In the zygote's fresh child: the job's init prepares the sandbox. `plan` is the job's
/// encoded plan (cleared here once decoded); `fds` its stdin, stdout, stderr, status
/// pipe and cgroup files, all owned from now on by this call. Returns on success; exits
/// on failure.
///
/// # Safety
/// `plan` must point to `len` writable bytes nothing else uses during the call, and
/// `fds` to `nfds` ints that are open descriptors nothing else owns.
#[no_mangle]
pub unsafe extern "C" fn vivarium_zygote_job_prepare(
    plan: *mut u8,
    len: usize,
    fds: *const i32,
    nfds: usize,
) {
    // Before the first allocation: the rest of this job's Rust code allocates in pages
    // of its own rather than in the heap it shares with the zygote.
    arena::start();
    // SAFETY: the caller passes a live, writable buffer of `len` bytes (the zygote's
    // request buffer, which no Python code touches during the call).
    let plan = unsafe { std::slice::from_raw_parts_mut(plan, len) };
    // SAFETY: the caller passes an array of `nfds` ints (a ctypes array).
    let raw = unsafe { std::slice::from_raw_parts(fds, nfds) };
    let fds = raw
        .iter()
        // SAFETY: each is an open fd received by SCM_RIGHTS and owned by nothing else
        // (the interpreter holds them as plain ints).
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    zygote::job_prepare(plan, fds);
}

/// In the job's init after the payload's fork: never returns.
#[no_mangle]
pub extern "C" fn vivarium_zygote_job_init(payload: i32) {
    zygote::job_init(payload)
}

/// In the payload: returns with every layer in place; exits on failure.
#[no_mangle]
pub extern "C" fn vivarium_zygote_job_payload() {
    zygote::job_payload()
}
