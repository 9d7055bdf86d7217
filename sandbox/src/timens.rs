//! A time namespace per job whose clocks start near zero (`CLOCK_MONOTONIC`,
//! `CLOCK_BOOTTIME` and `/proc/uptime`), so that a job does not learn the host's uptime.
//!
//! A time namespace takes its offsets before the first process enters it, and only a
//! new child enters it (`unshare(CLONE_NEWTIME)` makes the caller's *children's*
//! namespace). A `CLONE_VM` child cannot enter another time namespace (EINVAL), so a
//! job's init, which starts its payload with `CLONE_VM | CLONE_VFORK`, cannot make one
//! for its payload: the spawner makes it for init instead, just before the clone3
//! (S3t in docs/ARCHITECTURE.md), and returns its own children's namespace to its own
//! right after. A zygote's forked job makes its own in its init, which forks (not
//! vforks) the payload.

use std::io;

const OFFSETS: &str = "/proc/self/timens_offsets";

/// Make the caller's children's time namespace a new one whose monotonic and boot
/// clocks read less than a second when it is made. Needs CAP_SYS_ADMIN and
/// CAP_SYS_TIME over the caller's user namespace.
pub fn unshare_near_zero() -> io::Result<()> {
    use nix::time::{clock_gettime, ClockId};
    // (nix has no name for CLONE_NEWTIME.)
    nix::sched::unshare(nix::sched::CloneFlags::from_bits_retain(
        libc::CLONE_NEWTIME,
    ))?;
    // The new namespace starts with the caller's offsets (from the host's clocks); the
    // clocks are read in the caller's namespace, so taking their whole seconds off
    // those offsets leaves each new clock at the fraction of a second.
    let current = std::fs::read_to_string(OFFSETS)?;
    let mono = clock_gettime(ClockId::CLOCK_MONOTONIC)?;
    let boot = clock_gettime(ClockId::CLOCK_BOOTTIME)?;
    let offset = |clock: &str| -> io::Result<(i64, i64)> {
        current
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                (f.next()? == clock).then_some(())?;
                Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
            })
            .ok_or_else(|| io::Error::other(format!("{OFFSETS} has no {clock} line")))
    };
    let (mono_s, mono_ns) = offset("monotonic")?;
    let (boot_s, boot_ns) = offset("boottime")?;
    std::fs::write(
        OFFSETS,
        format!(
            "monotonic {} {mono_ns}\nboottime {} {boot_ns}\n",
            mono_s - mono.tv_sec(),
            boot_s - boot.tv_sec()
        ),
    )
}

/// Whether this kernel has time namespaces (Linux 5.6, `CONFIG_TIME_NS`).
pub fn available() -> bool {
    std::path::Path::new("/proc/self/ns/time").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (it changes the caller's children's namespace): a grandchild
    /// sees clocks under a second old while the host's have run for much longer.
    #[test]
    fn a_child_in_the_new_namespace_starts_near_zero() {
        if !nix::unistd::geteuid().is_root() || !available() {
            eprintln!("SKIP a_child_in_the_new_namespace_starts_near_zero: needs root and time namespaces");
            if std::env::var("VIVARIUM_REQUIRE_ROOT").as_deref() == Ok("1") {
                panic!("VIVARIUM_REQUIRE_ROOT=1: this test must run");
            }
            return;
        }
        let host = std::fs::read_to_string("/proc/uptime").unwrap();
        let host_up: f64 = host.split_whitespace().next().unwrap().parse().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        // The test harness has other threads, but the child and grandchild only make
        // syscalls, allocate (glibc's fork makes malloc safe in the child) and exit:
        // they take no stdio or Rust lock.
        #[allow(unsafe_code)]
        // SAFETY: as just said.
        let forked = unsafe { crate::sys::fork() }.unwrap();
        match forked {
            None => {
                let ok = unshare_near_zero().is_ok();
                #[allow(unsafe_code)]
                // SAFETY: as for the child's fork above.
                let grandchild = unsafe { crate::sys::fork() };
                match grandchild {
                    Ok(None) => {
                        let up = std::fs::read_to_string("/proc/uptime").unwrap_or_default();
                        let line = format!("{ok} {up}");
                        let _ = nix::unistd::write(&w, line.as_bytes());
                        crate::sys::exit_now(0);
                    }
                    Ok(Some(child)) => {
                        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
                        crate::sys::exit_now(0);
                    }
                    Err(_) => crate::sys::exit_now(1),
                }
            }
            Some(child) => {
                drop(w);
                let mut out = String::new();
                use std::io::Read;
                std::fs::File::from(r).read_to_string(&mut out).unwrap();
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
                let mut f = out.split_whitespace();
                assert_eq!(f.next(), Some("true"), "{out}");
                let up: f64 = f.next().unwrap().parse().unwrap();
                assert!(up < 2.0, "the child's uptime is {up} s: {out}");
                assert!(host_up > up, "host {host_up}, child {up}");
            }
        }
    }
}
