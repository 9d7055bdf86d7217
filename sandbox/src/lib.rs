//! vivarium-sandbox: what a Vivarium job's processes run, and the messages they exchange.
//!
//! The job sandbox: a pure plan ([`plan`], computed from a profile by `vivariumd`) executed
//! in the job's processes ([`init`], or a zygote's [`zygote`] and [`zygote_init`]), one module per isolation
//! layer ([`mount`], [`landlock`], [`caps`], [`rlimit`], [`timens`], [`cgroup`]; seccomp
//! filters are compiled by `vivariumd` and installed by [`init`]), the raw syscalls
//! ([`sys`]), the messages between the server, the spawner and a job's processes
//! ([`ipc`], [`report`]), and the names of the setup's steps in a failure's report
//! ([`step`]). What the setup applies is the plan's data alone: the attack suite's
//! test-only weakening is a transform of the plan in `vivariumd`, which this crate never
//! sees.
//!
//! Used by `vivariumd` (the single-threaded spawner and the server that talks to it) and
//! by the zygote library (`vivarium-zygote`), so it has no tokio, no tracing and no
//! dependency on `vivariumd`. See `docs/ARCHITECTURE.md`.
//!
//! # The setup order
//!
//! Every step of a job's setup, in order, with the one numbering that the code comments
//! and `docs/ARCHITECTURE.md` ("Setup order, and why", which gives each step's reason)
//! use. A step marked (v1), (v2), (root), (egress) happens only there.
//!
//! **The spawner** (`vivariumd::spawner::Spawner::build_job`, its steps in turn):
//!
//! | # | step | where |
//! | --- | --- | --- |
//! | S1 | take an id slot (the host ids of the job's user namespace); (v2) the job's cgroup with its limits | `build_job`, `start_in_slot` |
//! | S2 | the `sync` and `status` pipes; (v1) the `attach` socket pair | `Pipes::new` |
//! | S3 | the clone flags, a pure function of the plan's namespaces (`spawner::ns::clone_flags`); (root) join the spare network namespace of the plan's kind (`NetworkPlan`, made ahead: `SpareNet`); `clone3` with a pidfd (and (v2) `CLONE_INTO_CGROUP`); the spawner is in the job's namespaces (S3, S3e, S3t, S3a) only around it (`spawner::ns::NsGuard`: back, or kill the child and exit) | `clone_init` |
//! | S3e | (egress) instead: a network namespace made now, `lo` up, the proxy's listener bound in it; right after the clone the listener goes to the server | `clone_init`, `send_egress` |
//! | S3t | (root) the children's time namespace, clocks near zero ([`timens`]) | `clone_init` |
//! | S3a | (root, a full plan) join the mount template of the plan | `clone_init`, `spawner::template` |
//! | S4 | write `uid_map` and `gid_map`, then the go byte on `sync` | `write_id_maps` |
//! | S5 | (v1) the job's cgroup with its limits; its `tasks` files to init on `attach` | `late_cgroup` |
//!
//! **Init**, pid 1 of the job's pid namespace ([`init::run`]):
//!
//! | # | step | where |
//! | --- | --- | --- |
//! | I1 | a panic hook that exits; close every fd but its own and 0-2 | `init::run` |
//! | I2 | wait for the go byte (the maps exist) | `init::init` |
//! | I3 | (root) `vm.memfd_noexec = 2` for the job's pid namespace | `set_memfd_noexec` |
//! | I4 | `--make-rprivate /`; the anchor tmpfs, entered | [`mount::enter_anchor`] |
//! | I5 | (root) become uid 0 of the job's user namespace | `init::init` |
//! | I6 | `PR_SET_PDEATHSIG(SIGKILL)` (after the last credential change), then the lifeline check | `init::init` |
//! | I7 | the root tmpfs, the mount plan, the root remounted read-only | [`mount::enter_root`], [`mount::populate`] |
//! | I8 | `pivot_root`, the old root detached | [`mount::pivot`] |
//! | I7t | on a mount template's copy (S3a), instead of I4, I7 and I8: only the job's own mounts | [`mount::populate_fresh`] |
//! | I9 | (v1) join the job's cgroup (waiting for S5), check it, then the cgroup namespace | `join_late_cgroup` |
//! | I10 | the job's own cgroup, read-only at `/sys/fs/cgroup` | [`mount::cgroup_view`] |
//! | I11 | the user namespace's limits (inotify; no namespaces) | `set_user_ns_limits` |
//! | I12 | (loopback, egress) `lo` up | [`sys::loopback_up`] |
//! | I13 | hostname, the script at `/work/main.py`, rlimits | [`rlimit::apply`] |
//! | I14 | start the payload (`CLONE_VM \| CLONE_VFORK`), relay its report, reap, kill the rest, report the exit | [`sys::vfork_run`], `init::supervise` |
//!
//! **The payload** (`confine`, the same function for a cold payload and a forked one):
//!
//! | # | step | where |
//! | --- | --- | --- |
//! | P1 | `setsid`; (cold) every signal to its default, none blocked | `confine` |
//! | P2 | stdio onto 0-2, the extra fds onto 3.., every other fd closed at the execve (cold) or now (forked) | `confine` |
//! | P3 | `chdir("/work")` | `confine` |
//! | P4 | capabilities: bounding, ambient, inheritable cleared, securebits locked, groups, gid and uid 1000, permitted and effective cleared, checked empty; (forked) dumpable again | [`caps`], `init::drop_privileges` |
//! | P5 | `no_new_privs`, Landlock, seccomp (last) | [`landlock`], `confine` |
//! | P6 | report the Landlock status to init | `confine` |
//! | P7 | (cold) `execve` of the interpreter; (forked) return to the interpreter | `init::payload`, [`zygote`] |
//!
//! **A zygote-forked job** ([`zygote`]; the zygote itself was started by S1-S5, I1-I14 and
//! P1-P7 with its plan's differences):
//!
//! | # | step | where |
//! | --- | --- | --- |
//! | Z1 | the zygote: back to its own pid namespace, `unshare(CLONE_NEWPID)`; the plan on a pipe for init, a socket pair for init and payload; every signal blocked, `vfork`: the child (pid 1 of the new namespace, on the zygote's memory) forks the payload, the one copy, and execs the init program (fd 5); the zygote resumes at that exec and sends init's pidfd to the spawner | `zygote::fork_job`, [`sys::vfork_fork_exec`] |
//! | Z2 | the job's init (`vivarium-zygote-init`): signals, its fds, into the job's cgroup and checked, non-dumpable, its time namespace (entered), mount/net/ipc/uts/cgroup namespaces, `lo` (as I12), fresh mounts and masks, cgroup view (as I10), hostname; then "ready" to the payload | [`zygote_init`] |
//! | Z3 | init writes the payload's maps once it has its user namespace, then supervises (as I14) | `zygote_init::run`, `init::supervise` |
//! | Z4 | the payload: signals, every fd but the job's closed, into the job's cgroup and checked; on "ready" `setns` into init's namespaces (its pidfd: pid 1, its parent), rlimits, `unshare(CLONE_NEWUSER)` (its own ids, `plan::ZYGOTE_JOB_IDS`), its user namespace limits (as I11), then P1-P7 | `zygote::job_payload` |
#![deny(unsafe_code)]

pub mod caps;
pub mod cgroup;
mod confine;
pub mod init;
pub mod inputs;
pub mod ipc;
pub mod landlock;
pub mod mount;
pub mod outputs;
pub mod plan;
pub mod report;
pub mod rlimit;
pub mod step;
#[allow(unsafe_code)]
pub mod sys;
pub mod timens;
pub mod zygote;
pub mod zygote_init;

use std::path::Path;
pub use step::Step;

/// A sandbox setup step that failed, reported from the child to the spawner (as a
/// [`report::Failure`], named by [`Step::as_str`]).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{step} {path}: {source}")]
    Sys {
        step: Step,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{step}: {detail}")]
    Other { step: Step, detail: String },
}

impl SetupError {
    pub fn io(step: Step, path: &Path, e: &std::io::Error) -> Self {
        SetupError::Sys {
            step,
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    pub fn nix(step: Step, path: &Path, e: nix::Error) -> Self {
        SetupError::Sys {
            step,
            path: path.display().to_string(),
            source: std::io::Error::from_raw_os_error(e as i32),
        }
    }

    pub fn errno(step: Step, e: nix::Error) -> Self {
        Self::nix(step, Path::new(""), e)
    }

    pub fn step(&self) -> Step {
        match self {
            SetupError::Sys { step, .. } | SetupError::Other { step, .. } => *step,
        }
    }
}
