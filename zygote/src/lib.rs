//! `libvivarium_zygote.so`: the zygote's per-job setup (`vivariumd::sandbox::zygote`),
//! exported for its interpreter, which loads it with `ctypes.PyDLL` (the GIL stays held
//! during each call, so no other Python code runs while a call forks or unshares).

use std::os::fd::{FromRawFd, OwnedFd};
use vivariumd::sandbox::zygote::{self, Forked};

mod arena;

#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena;

/// In the zygote, for each request: fork the job's init into a new pid namespace; init
/// prepares the sandbox, forks the payload and supervises it without returning. Returns
/// the init's pid in the zygote, a negative errno there if no child could be made, and
/// 0 in the job's payload once every layer is in place (the interpreter then runs
/// `PyOS_AfterFork_Child`, as `os.fork` would, and the job). `plan` is the job's encoded
/// plan (cleared in init once decoded); `fds` its stdin, stdout, stderr, status pipe
/// and cgroup files, owned by init from the fork on (the zygote closes its copies).
///
/// # Safety
/// `plan` must point to `len` writable bytes nothing else uses during the call, and
/// `fds` to `nfds` ints that are open descriptors nothing else in the child owns.
#[no_mangle]
pub unsafe extern "C" fn vivarium_zygote_fork_job(
    plan: *mut u8,
    len: usize,
    fds: *const i32,
    nfds: usize,
) -> i32 {
    // SAFETY: the caller passes a live, writable buffer of `len` bytes (the zygote's
    // request buffer, which no Python code touches during the call).
    let plan = unsafe { std::slice::from_raw_parts_mut(plan, len) };
    // SAFETY: the caller passes an array of `nfds` ints (a ctypes array).
    let raw = unsafe { std::slice::from_raw_parts(fds, nfds) };
    let in_init = || {
        // Before init's first allocation: the rest of this job's Rust code allocates in
        // pages of its own rather than in the heap it shares with the zygote.
        arena::start();
        raw.iter()
            // SAFETY: each is an open fd received by SCM_RIGHTS, which in this child
            // nothing else owns (the interpreter's ints for them are never used here).
            .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect()
    };
    match zygote::fork_job(plan, in_init) {
        Ok(Forked::Zygote(init)) => init,
        Ok(Forked::Payload) => 0,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
    }
}
