//! `libvivarium_zygote.so`: the zygote's request loop and each job's setup
//! (`vivarium_sandbox::zygote`), exported for its interpreter, which loads it with
//! `ctypes.PyDLL` (the GIL stays held during the call, so no other Python code runs
//! while it forks or unshares).

use std::os::fd::BorrowedFd;
use vivarium_sandbox::zygote::{self, Hooks, Served};

mod arena;

#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena;

/// The zygote's request loop ([`zygote::serve`]) on its control socket `ctl`, with the
/// request buffer `buf` (`len` bytes) and the interpreter's `PyOS_BeforeFork`,
/// `PyOS_AfterFork_Parent` and `PyOS_AfterFork_Child`. Returns 0 in the zygote when the
/// spawner has hung up, 1 in a job's payload once every layer is in place, the job has
/// come and `PyOS_AfterFork_Child` has run (as `os.fork` would run it: the interpreter
/// then runs the job), and a negative errno if the loop failed. Each job's init never
/// returns: it supervises its payload, then exits.
///
/// # Safety
/// `ctl` must be an open socket for the whole call, `buf` must point to `len` writable
/// bytes that nothing else uses during the call, the caller must hold the GIL (a
/// `ctypes.PyDLL` call), and the three hooks must be the interpreter's functions of
/// those names (or null).
#[no_mangle]
pub unsafe extern "C" fn vivarium_zygote_serve(
    ctl: i32,
    buf: *mut u8,
    len: usize,
    before_fork: Option<extern "C" fn()>,
    after_parent: Option<extern "C" fn()>,
    after_child: Option<extern "C" fn()>,
) -> i32 {
    let (Some(before_fork), Some(after_parent), Some(after_child)) =
        (before_fork, after_parent, after_child)
    else {
        return -libc::EINVAL;
    };
    // SAFETY: the caller's buffer, live and unshared for the call.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf, len) };
    // SAFETY: the caller keeps `ctl` open for the call.
    let ctl = unsafe { BorrowedFd::borrow_raw(ctl) };
    let hooks = Hooks {
        before_fork,
        after_parent,
        after_child,
        // Before the payload's first allocation: the rest of the job's Rust code
        // allocates in pages of its own rather than in the heap it shares with the
        // zygote.
        in_payload: arena::start,
    };
    match zygote::serve(ctl, buf, &hooks) {
        Ok(Served::SpawnerGone) => 0,
        Ok(Served::Payload) => 1,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
    }
}
