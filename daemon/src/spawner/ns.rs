//! The namespaces of a cold job's clone, on the spawner's side: which ones `clone3`
//! makes ([`clone_flags`], a pure function of the plan), and the one way the spawner
//! goes into a namespace of a job's around that clone and comes back ([`NsGuard`]).

use nix::sched::CloneFlags;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use vivarium_sandbox::plan::Namespaces;
use vivarium_sandbox::sys;

/// The `clone3` flags of a cold job's init (S3): a new user, mount and IPC namespace
/// always, and the plan's others; never `CLONE_NEWCGROUP` when `late` (cgroup v1: init
/// makes that namespace itself once it is in the job's cgroup, I9), nor `CLONE_NEWNET`
/// when `in_netns` (the spawner has joined the job's network namespace for the clone: a
/// spare, or an egress one).
pub(super) fn clone_flags(ns: &Namespaces, late: bool, in_netns: bool) -> libc::c_int {
    let when = |on: bool, flag: libc::c_int| if on { flag } else { 0 };
    libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWIPC
        | when(ns.pid, libc::CLONE_NEWPID)
        | when(ns.net && !in_netns, libc::CLONE_NEWNET)
        | when(ns.uts, libc::CLONE_NEWUTS)
        | when(ns.cgroup && !late, libc::CLONE_NEWCGROUP)
}

/// Which of the spawner's namespaces a guard stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NsKind {
    /// Its network namespace (a job's spare or egress one; the spares being made).
    Net,
    /// Its mount namespace (a mount template's).
    Mount,
    /// Its children's time namespace (a job's, made by `timens::unshare_near_zero`).
    Time,
}

impl NsKind {
    fn flags(self) -> CloneFlags {
        match self {
            NsKind::Net => CloneFlags::CLONE_NEWNET,
            NsKind::Mount => CloneFlags::CLONE_NEWNS,
            NsKind::Time => CloneFlags::from_bits_retain(libc::CLONE_NEWTIME),
        }
    }

    fn name(self) -> &'static str {
        match self {
            NsKind::Net => "network",
            NsKind::Mount => "mount",
            NsKind::Time => "time",
        }
    }
}

/// The spawner away from one of its own namespaces (`home`), in a job's, from just
/// before the job's clone to just after: [`NsGuard::leave`] returns to `home`. If it
/// cannot, every later job would share this namespace: the child just made is killed
/// and the spawner exits (fail closed). Dropped without `leave` (an error before any
/// child existed), it returns all the same. A cloned child never drops it: it runs the
/// job's init, which never returns, in the namespaces it was born in.
pub(super) struct NsGuard<'a> {
    home: BorrowedFd<'a>,
    kind: NsKind,
    back: bool,
}

impl<'a> NsGuard<'a> {
    /// Join `target` (of `kind`); `Err`: the spawner is still at home.
    pub(super) fn enter(home: &'a OwnedFd, kind: NsKind, target: &OwnedFd) -> nix::Result<Self> {
        nix::sched::setns(target, kind.flags())?;
        Ok(NsGuard::away(home, kind))
    }

    /// The spawner has left `home` already (an `unshare`): this brings it back.
    pub(super) fn away(home: &'a OwnedFd, kind: NsKind) -> Self {
        NsGuard {
            home: home.as_fd(),
            kind,
            back: false,
        }
    }

    /// Back to the spawner's own namespace, or kill `child` (the pidfd of the child just
    /// made, if any) and exit.
    pub(super) fn leave(mut self, child: Option<&OwnedFd>) {
        self.go_home(child);
    }

    fn go_home(&mut self, child: Option<&OwnedFd>) {
        if std::mem::replace(&mut self.back, true) {
            return;
        }
        if let Err(e) = nix::sched::setns(self.home, self.kind.flags()) {
            if let Some(pidfd) = child {
                let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
            }
            super::log::log_error!("cannot return to its {} namespace: {e}", self.kind.name());
            sys::exit_now(1);
        }
    }
}

impl Drop for NsGuard<'_> {
    fn drop(&mut self) {
        self.go_home(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_sandbox::plan::Layers;

    const FULL: Namespaces = Layers::FULL.namespaces;

    #[test]
    fn a_production_plan_gets_every_namespace() {
        let flags = clone_flags(&FULL, false, false);
        for (flag, name) in [
            (libc::CLONE_NEWUSER, "user"),
            (libc::CLONE_NEWNS, "mount"),
            (libc::CLONE_NEWIPC, "ipc"),
            (libc::CLONE_NEWPID, "pid"),
            (libc::CLONE_NEWNET, "net"),
            (libc::CLONE_NEWUTS, "uts"),
            (libc::CLONE_NEWCGROUP, "cgroup"),
        ] {
            assert_ne!(flags & flag, 0, "{name}");
        }
        // Nothing else: the pidfd and the cgroup are sys::clone3's, the time
        // namespace is the spawner's children's (S3t).
        assert_eq!(
            flags
                & !(libc::CLONE_NEWUSER
                    | libc::CLONE_NEWNS
                    | libc::CLONE_NEWIPC
                    | libc::CLONE_NEWPID
                    | libc::CLONE_NEWNET
                    | libc::CLONE_NEWUTS
                    | libc::CLONE_NEWCGROUP),
            0
        );
    }

    #[test]
    fn late_cgroups_and_a_joined_network_namespace_leave_their_flags_out() {
        let all = clone_flags(&FULL, false, false);
        assert_eq!(
            clone_flags(&FULL, true, false),
            all & !libc::CLONE_NEWCGROUP
        );
        assert_eq!(clone_flags(&FULL, false, true), all & !libc::CLONE_NEWNET);
        assert_eq!(
            clone_flags(&FULL, true, true),
            all & !(libc::CLONE_NEWCGROUP | libc::CLONE_NEWNET)
        );
    }

    /// A test-only plan's missing namespaces are missing from the clone; user, mount and
    /// IPC namespaces are never left out.
    #[test]
    fn a_plan_without_a_namespace_is_cloned_without_it() {
        let off = |f: fn(&mut Namespaces)| {
            let mut ns = FULL;
            f(&mut ns);
            clone_flags(&ns, false, false)
        };
        let all = clone_flags(&FULL, false, false);
        assert_eq!(off(|n| n.pid = false), all & !libc::CLONE_NEWPID);
        assert_eq!(off(|n| n.net = false), all & !libc::CLONE_NEWNET);
        assert_eq!(off(|n| n.uts = false), all & !libc::CLONE_NEWUTS);
        assert_eq!(off(|n| n.cgroup = false), all & !libc::CLONE_NEWCGROUP);
        // (Not the clone's: where the network and time namespaces come from.)
        assert_eq!(off(|n| n.net_spare = false), all);
        assert_eq!(off(|n| n.time = false), all);
        let none = Namespaces {
            pid: false,
            net: false,
            net_spare: false,
            uts: false,
            cgroup: false,
            time: false,
        };
        assert_eq!(
            clone_flags(&none, false, false),
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWIPC
        );
    }
}
