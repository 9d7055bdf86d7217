//! The zygote library's allocator: the system allocator in the zygote itself, a bump
//! arena of fresh pages in each job's init and payload.
//!
//! A job's init and payload are forks of the zygote, so its heap is shared with them
//! copy-on-write. glibc's `malloc` and `free` write to chunk headers and free lists spread
//! over that heap, and every first write to a shared page copies it: the job's setup
//! (decoding the plan, building paths, the Landlock ruleset...) cost a few hundred page
//! copies per job, in init and again in the payload. In the arena, allocations are
//! contiguous in pages no one shares, and freeing is a no-op: the processes that use it
//! are short-lived, and what they allocate is bounded by the plan (a full arena falls
//! back to the system allocator). The zygote never switches the arena on: its own calls
//! (the request loop, [`crate::vivarium_zygote_serve`]) go to the system allocator, as
//! does every allocation made before [`start`] in a process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Address space reserved for the arena (pages are only used when touched).
const SIZE: usize = 8 << 20;

/// The arena: `[BASE, END)`, bump pointer `NEXT`. 0 while off. A payload forked from an
/// init inherits the init's arena and keeps bumping in its own copy (past the init's
/// last allocation, so mostly into pages neither has touched).
static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicUsize = AtomicUsize::new(0);

pub struct Arena;

/// Switch the arena on in this process (a job's init, before its first allocation).
/// Without the mapping (ENOMEM), allocations stay with the system allocator.
pub fn start() {
    if BASE.load(Ordering::Acquire) != 0 {
        return;
    }
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return;
    }
    let base = p as usize;
    NEXT.store(base, Ordering::Relaxed);
    END.store(base + SIZE, Ordering::Relaxed);
    BASE.store(base, Ordering::Release);
}

fn in_arena(ptr: *mut u8) -> bool {
    let base = BASE.load(Ordering::Acquire);
    base != 0 && (base..END.load(Ordering::Relaxed)).contains(&(ptr as usize))
}

fn bump(layout: Layout) -> *mut u8 {
    if BASE.load(Ordering::Acquire) == 0 {
        return std::ptr::null_mut();
    }
    let end = END.load(Ordering::Relaxed);
    let mut next = NEXT.load(Ordering::Relaxed);
    loop {
        let start = next.next_multiple_of(layout.align());
        let Some(stop) = start.checked_add(layout.size()).filter(|&s| s <= end) else {
            return std::ptr::null_mut();
        };
        match NEXT.compare_exchange_weak(next, stop, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return start as *mut u8,
            Err(seen) => next = seen,
        }
    }
}

// SAFETY: every pointer returned is either the system allocator's, or a distinct range of
// the arena (bumped atomically) of the layout's size and alignment; the arena is never
// unmapped. `dealloc`/`realloc` tell the two kinds apart by address.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = bump(layout);
        if !p.is_null() {
            return p;
        }
        // SAFETY: forwarded with the caller's layout (non-zero size, per GlobalAlloc).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = bump(layout);
        if !p.is_null() {
            // Past the bump pointer nothing was ever handed out, so this is zero
            // already; cleared anyway rather than rest on that. SAFETY: `p` is a fresh range of `layout.size()` writable bytes.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
            return p;
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !in_arena(ptr) {
            // SAFETY: not the arena's, so the system allocator's, with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !in_arena(ptr) {
            // SAFETY: the system allocator's block, with the caller's layout and size.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: the caller guarantees `new_size` is valid for `layout.align()`.
        let grown = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as in `alloc`.
        let p = unsafe { self.alloc(grown) };
        if !p.is_null() {
            // SAFETY: both ranges are valid for `layout.size()` bytes and do not overlap
            // (the new one was just allocated).
            unsafe { std::ptr::copy_nonoverlapping(ptr, p, layout.size()) };
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_serves_aligned_distinct_blocks_and_falls_back_when_off_or_full() {
        // Off (this test process never called start): the system allocator's.
        let layout = Layout::from_size_align(24, 8).unwrap();
        assert!(bump(layout).is_null());
        start();
        let a = bump(Layout::from_size_align(3, 1).unwrap());
        let b = bump(Layout::from_size_align(64, 64).unwrap());
        assert!(in_arena(a) && in_arena(b));
        assert_eq!(b as usize % 64, 0);
        assert!(b as usize >= a as usize + 3);
        assert!(bump(Layout::from_size_align(SIZE, 8).unwrap()).is_null());
        // SAFETY: a layout of non-zero size; the block is the arena's or the system's.
        unsafe {
            let big = Layout::from_size_align(16, 8).unwrap();
            let p = Arena.alloc(big);
            p.write_bytes(7, 16);
            let q = Arena.realloc(p, big, 4096);
            assert_eq!(*q.add(15), 7);
            Arena.dealloc(q, Layout::from_size_align(4096, 8).unwrap());
        }
    }
}
