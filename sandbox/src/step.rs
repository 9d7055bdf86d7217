//! The names of the sandbox setup's steps: what a [`crate::SetupError`] says failed, and
//! what `report::Failure::step` carries to the spawner and on to the job's outcome
//! (`sandbox setup failed at <step>: ...`). [`Step::as_str`] is that wire name: changing
//! one changes what clients see.
//!
//! Grouped by where in the setup each happens: a job's init (a cold job's, and a zygote
//! job's where the code is shared), the mounts, the payload's confinement, the zygote.
//! A name used in more than one place is listed once, where a cold job meets it first.

/// Declares [`Step`] with each variant's wire name, so that [`Step::ALL`] and
/// [`Step::as_str`] cannot miss a variant.
macro_rules! steps {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// A sandbox setup step, named in a setup failure's report.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Step {
            $($(#[$doc])* $variant,)*
        }

        impl Step {
            /// Every step, in the order declared (roughly the setup's).
            pub const ALL: &'static [Step] = &[$(Step::$variant,)*];

            /// The step's name as reported (`report::Failure::step`): kebab-case, or a
            /// kernel interface's own name (`pivot_root`, `uid_map`, ...).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Step::$variant => $name,)*
                }
            }
        }
    };
}

steps! {
    // A job's init (`init`; the zygote job's init shares the cgroup join, the user
    // namespace limits, the loopback, the hostname and the rlimits).
    /// Write `2` to `/proc/sys/vm/memfd_noexec` (no executable memfds in the job).
    MemfdNoexec = "memfd_noexec",
    /// Drop the supplementary groups (init before becoming root inside; the payload
    /// before taking the unprivileged ids).
    Setgroups = "setgroups",
    /// Init becomes gid 0 of the job's user namespace.
    SetresgidRoot = "setresgid-root",
    /// Init becomes uid 0 of the job's user namespace.
    SetresuidRoot = "setresuid-root",
    /// Arm init's parent-death signal (SIGKILL when the spawner dies).
    Pdeathsig = "pdeathsig",
    /// Move into the job's cgroup and check that every hierarchy lists it (a cold init
    /// on cgroup v1, a zygote job's init).
    CgroupAttach = "cgroup-attach",
    /// cgroup v1: the job's cgroup namespace, made once init is in the job's cgroup.
    UnshareCgroup = "unshare-cgroup",
    /// Set the job user namespace's limits in `/proc/sys/user`.
    UsernsLimits = "userns-limits",
    /// Bring up the job's private loopback interface.
    Loopback = "loopback",
    /// Set the job's hostname in its UTS namespace.
    Sethostname = "sethostname",
    /// Read the job's script from its memfd.
    ReadCode = "read-code",
    /// Set RLIMIT_CORE (no core dumps).
    RlimitCore = "rlimit-core",
    /// Set RLIMIT_NOFILE.
    RlimitNofile = "rlimit-nofile",
    /// Set RLIMIT_FSIZE.
    RlimitFsize = "rlimit-fsize",
    /// Set RLIMIT_SIGPENDING.
    RlimitSigpending = "rlimit-sigpending",
    /// Set RLIMIT_MSGQUEUE.
    RlimitMsgqueue = "rlimit-msgqueue",
    /// Set RLIMIT_MEMLOCK.
    RlimitMemlock = "rlimit-memlock",
    /// Set RLIMIT_AS (a stand-in for the memory limit when the daemon has no cgroup).
    RlimitAs = "rlimit-as",
    /// Set RLIMIT_CPU (a stand-in for the CPU limit when the daemon has no cgroup).
    RlimitCpu = "rlimit-cpu",
    /// Set RLIMIT_NPROC (a stand-in for the pids limit when the daemon has no cgroup).
    RlimitNproc = "rlimit-nproc",
    /// Make a pipe (init's report pipe from the payload; a zygote job's pipes).
    Pipe = "pipe",
    /// Duplicate an fd (init's extra fds above the payload's numbers; a zygote job's
    /// status pipe).
    Dup = "dup",
    /// Start a cold job's payload (the vfork-style clone).
    Clone = "clone",
    /// Test-only plan: init takes the unprivileged gid after the fork.
    WeakInitSetresgid = "weak-init-setresgid",
    /// Test-only plan: init takes the unprivileged uid after the fork.
    WeakInitSetresuid = "weak-init-setresuid",
    /// Test-only plan: init is made dumpable again.
    WeakInitDumpable = "weak-init-dumpable",
    /// Test-only plan: init re-arms its parent-death signal after its id change.
    WeakInitPdeathsig = "weak-init-pdeathsig",
    /// Test-only plan without a pid namespace: init becomes the job's child subreaper.
    WeakSubreaper = "weak-subreaper",
    /// The payload died before reporting its Landlock status.
    Payload = "payload",

    // The mounts (`mount`): a cold job's root, a mount template, the per-job mounts in
    // a fresh copy of a zygote's or a template's namespace, the script.
    /// Make every mount of the namespace private (recursively).
    MakeRprivate = "make-rprivate",
    /// Mount a tmpfs (the anchor, the root, a job's scratch mount).
    Tmpfs = "tmpfs",
    /// Change directory (into the anchor or the root, to `/`, the payload's `/work`).
    Chdir = "chdir",
    /// Make a directory (and its parents) in the new root.
    Mkdir = "mkdir",
    /// Make an empty file as a mount point.
    Create = "create",
    /// Read a bind source's mount flags (the ones a remount must keep).
    Statvfs = "statvfs",
    /// Bind a host directory or file (or resolve a template's bind source).
    Bind = "bind",
    /// Remount a bind read-only.
    RemountRo = "remount-ro",
    /// Read `/proc/self/mountinfo` (a template's covered-source check).
    Read = "read",
    /// A template's bind source has mounts beneath it: the job is built on the spot.
    Template = "template",
    /// Make a symlink in the new root.
    Symlink = "symlink",
    /// Write a file in the new root, or a mask's source file.
    Write = "write",
    /// Give a scratch tmpfs or the script to the job's ids.
    Chown = "chown",
    /// Bind one file (a device node or a mask).
    BindFile = "bind-file",
    /// Remount a file bind with its flags.
    RemountFile = "remount-file",
    /// Mount a procfs for the job's pid namespace (or: no tmpfs to mount it aside in).
    Proc = "proc",
    /// Test-only plan: bind the host's `/proc`.
    WeakBindProc = "weak-bind-proc",
    /// Test-only plan: make an exposed host file's mount point.
    WeakCreate = "weak-create",
    /// Test-only plan: bind a host path writable.
    WeakExpose = "weak-expose",
    /// Remount the new root read-only.
    RemountRootRo = "remount-root-ro",
    /// `pivot_root` into the new root.
    PivotRoot = "pivot_root",
    /// Detach the old root after the pivot.
    UmountOldRoot = "umount-old-root",
    /// Detach the procfs a fresh job namespace copied from the zygote's.
    Umount = "umount",
    /// Move the job's new procfs into place.
    MoveProc = "move-proc",
    /// Remove the directory the new procfs was mounted aside in.
    Rmdir = "rmdir",
    /// No tmpfs to write a mask's source file in, before the mask.
    Mask = "mask",
    /// Unlink a mask's source file once bound.
    Unlink = "unlink",
    /// Mount the job's own cgroup read-only at `/sys/fs/cgroup`.
    CgroupView = "cgroup-view",
    /// Create the job's script file.
    CreateScript = "create-script",
    /// Write the job's code into its script file.
    WriteScript = "write-script",
    /// Place an input file under `/work` (protocol 7 `SubmitFiles`; `crate::inputs`).
    InputFile = "input-file",

    // The payload's confinement (`confine`, steps P1 to P6; `init::drop_privileges`,
    // `caps`, `landlock`), then a cold payload's execve.
    /// P1: the payload's own session.
    Setsid = "setsid",
    /// P1: every signal back to its default, none blocked.
    Signals = "signals",
    /// P2: stdio onto 0-2, the extra fds onto 3...
    Dup2 = "dup2",
    /// P2: every other fd close-on-exec or closed (also the zygote's fds in a job's init).
    CloseRange = "close_range",
    /// P4: empty the bounding capability set.
    CapsBounding = "caps-bounding",
    /// P4: empty the ambient capability set.
    CapsAmbient = "caps-ambient",
    /// P4: empty the inheritable capability set.
    CapsInheritable = "caps-inheritable",
    /// P4: lock the securebits.
    Securebits = "securebits",
    /// P4: take the unprivileged gid.
    Setresgid = "setresgid",
    /// P4: take the unprivileged uid.
    Setresuid = "setresuid",
    /// P4: empty the effective capability set.
    CapsEffective = "caps-effective",
    /// P4: empty the permitted capability set.
    CapsPermitted = "caps-permitted",
    /// P4: check that no capability is left.
    CapsVerify = "caps-verify",
    /// Set the dumpable flag (a forked payload made dumpable again; a zygote job's
    /// init made non-dumpable).
    Dumpable = "dumpable",
    /// P5: set no_new_privs.
    NoNewPrivs = "no_new_privs",
    /// P5: Landlock's filesystem rights.
    LandlockFs = "landlock-fs",
    /// P5: Landlock's TCP rights.
    LandlockNet = "landlock-net",
    /// P5: Landlock's scoping (abstract unix sockets, signals).
    LandlockScope = "landlock-scope",
    /// P5: create the Landlock ruleset.
    LandlockCreate = "landlock-create",
    /// P5: open a path for a Landlock rule.
    LandlockPath = "landlock-path",
    /// P5: add a Landlock path rule.
    LandlockRule = "landlock-rule",
    /// P5: add a Landlock TCP connect rule.
    LandlockNetRule = "landlock-net-rule",
    /// P5: enforce the Landlock ruleset.
    LandlockRestrict = "landlock-restrict",
    /// P5: install a seccomp filter.
    Seccomp = "seccomp",
    /// P6: report the Landlock status to init.
    Report = "report",
    /// A cold payload's execve of the interpreter.
    Execve = "execve",

    // The zygote (`zygote`): a job's init, forked from the zygote, and its payload.
    /// Fork a zygote job's payload.
    Fork = "fork",
    /// Decode the job's plan sent to the zygote.
    ZygotePlan = "zygote-plan",
    /// Prepare the job's exec data (argv, environment, filters) from its plan.
    Prepare = "prepare",
    /// A time namespace, clocks near zero, for the job's payload.
    TimeNs = "time-ns",
    /// The job's mount, IPC, UTS, cgroup and network namespaces.
    Unshare = "unshare",
    /// The job's id slot in the zygote's user namespace.
    Ids = "ids",
    /// Write the payload's uid and gid maps (init), or wait for them (the payload).
    UidMap = "uid_map",
    /// The payload's own user namespace.
    UnshareUser = "unshare-user",
    /// Tell init that the payload's user namespace exists.
    Sync = "sync",
    /// The payload joins the namespaces its init made (or init ended first).
    JoinNamespaces = "join-namespaces",
    /// A zygote job's init reads its plan (from the zygote, on a pipe).
    InitPlan = "init-plan",
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Step;
    use std::collections::HashSet;

    /// The names that are a kernel interface's own (a syscall, a sysctl, a prctl, a
    /// procfs file), kept with their underscores.
    const KERNEL_NAMES: &[&str] = &[
        "memfd_noexec",
        "pivot_root",
        "close_range",
        "no_new_privs",
        "uid_map",
    ];

    #[test]
    fn every_name_is_unique_and_kebab_case() {
        let mut seen = HashSet::new();
        for step in Step::ALL {
            let name = step.as_str();
            assert!(seen.insert(name), "{name} names two steps");
            let words = name.split('-');
            for word in words {
                assert!(!word.is_empty(), "{name}: empty word");
                assert!(
                    word.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                    "{name}: not kebab-case"
                );
                assert!(
                    !word.contains('_') || KERNEL_NAMES.contains(&name),
                    "{name}: '_' only in a kernel interface's own name"
                );
            }
            assert!(name.as_bytes()[0].is_ascii_lowercase(), "{name}");
            assert_eq!(step.to_string(), name);
        }
        assert_eq!(seen.len(), Step::ALL.len());
    }

    #[test]
    fn names_are_as_reported_before() {
        for (step, name) in [
            (Step::Proc, "proc"),
            (Step::Bind, "bind"),
            (Step::RemountRootRo, "remount-root-ro"),
            (Step::PivotRoot, "pivot_root"),
            (Step::SetresuidRoot, "setresuid-root"),
            (Step::CgroupAttach, "cgroup-attach"),
            (Step::RlimitNofile, "rlimit-nofile"),
            (Step::CapsVerify, "caps-verify"),
            (Step::LandlockNetRule, "landlock-net-rule"),
            (Step::Seccomp, "seccomp"),
            (Step::UidMap, "uid_map"),
            (Step::ZygotePlan, "zygote-plan"),
        ] {
            assert_eq!(step.as_str(), name);
        }
    }

    #[test]
    fn a_setup_error_shows_its_step() {
        let e = crate::SetupError::nix(Step::RemountRo, "/usr".as_ref(), nix::Error::EPERM);
        assert_eq!(e.step(), Step::RemountRo);
        assert!(e.to_string().starts_with("remount-ro /usr: "), "{e}");
        let e = crate::SetupError::Other {
            step: Step::Seccomp,
            detail: "bad filter".into(),
        };
        assert_eq!(e.to_string(), "seccomp: bad filter");
        let f = crate::report::Failure::from(&e);
        assert_eq!((f.step.as_str(), f.errno), ("seccomp", 0));
    }
}
