//! The setup plan: everything a job's sandbox needs, computed from profile + job before
//! the clone (by `vivariumd::policy::plan`), as plain data. The child only executes it.

use crate::cgroup::ViewMount;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Inside the sandbox, the payload runs as this uid and gid.
pub const SANDBOX_UID: u32 = 1000;
pub const SANDBOX_GID: u32 = 1000;
/// Where the script is written inside the sandbox.
pub const SCRIPT_PATH: &str = "/work/main.py";
pub const HOSTNAME: &str = "vivarium";
/// A job's share of the per-user kernel budgets that every job's user namespace charges
/// to its creator, the host's uid 0 (Linux counts them per user namespace and again at
/// each level above). Sized so that `max_concurrent_jobs` jobs at their caps stay far
/// below the host's per-user defaults (a root shell's RLIMIT_SIGPENDING is ~96,000 on a
/// 24 GiB machine, `fs.inotify.max_user_instances` 128): before, one job queued 96,361
/// signals, and every root process on the host got EAGAIN from `timer_create`.
pub const SIGPENDING: u64 = 1024;
pub const MSGQUEUE_BYTES: u64 = 64 << 10;
pub const MEMLOCK_BYTES: u64 = 1 << 20;
/// The job's own user namespace limits (`/proc/sys/user/*`, written by init in that
/// namespace): inotify instances and watches. A job makes no namespace at all (seccomp
/// refuses it) and gets a limit of 0 for each kind, a zygote keeps the default (it makes
/// every forked job's).
pub const USER_NS_LIMITS: &[(&str, u64)] =
    &[("max_inotify_instances", 8), ("max_inotify_watches", 8192)];
pub const NO_NAMESPACES: &[&str] = &[
    "max_cgroup_namespaces",
    "max_ipc_namespaces",
    "max_mnt_namespaces",
    "max_net_namespaces",
    "max_pid_namespaces",
    "max_time_namespaces",
    "max_user_namespaces",
    "max_uts_namespaces",
];

/// The first of the ids in a zygote's user namespace that its forked jobs run as: the
/// job holding id slot `s` maps its uid and gid [`SANDBOX_UID`]/[`SANDBOX_GID`] to
/// `ZYGOTE_JOB_IDS + s` there, which the zygote's own map sends to the host id
/// `id_base + 2 × slots + s` (`vivariumd::spawner::zygote_id_map`). So no two running jobs, cold or
/// forked, share a host uid, and per-user kernel budgets (in-flight fds, for one) are
/// each job's own.
pub const ZYGOTE_JOB_IDS: u32 = 100_000;

/// The egress proxy's port on the loopback of a sandbox with [`NetworkPlan::Egress`] (its
/// own network namespace: no other listener can hold it).
pub const EGRESS_PORT: u16 = 3128;

/// A job's network namespace, always a fresh one (owned by the host's user namespace
/// when the spawner makes it, see `vivariumd::spawner::SpareNet`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkPlan {
    /// Nothing but a down `lo` (profile `network = "none"`, installs from a wheelhouse).
    None,
    /// `lo` up and nothing else: a private loopback (profile `network = "loopback"`).
    Loopback,
    /// `lo` up, and the daemon's egress proxy as the only way out (`vivariumd::egress`): the
    /// spawner makes the namespace, binds a listener on `127.0.0.1:`[`EGRESS_PORT`] in it
    /// and hands that listener to the server (`FromSpawner::Egress`). Profiles with
    /// `network.egress`, package installs from an index.
    Egress,
}

impl NetworkPlan {
    /// Whether `lo` is up in the job's namespace.
    pub fn loopback(self) -> bool {
        self != NetworkPlan::None
    }
}

/// One step of building the new root. Paths are as seen inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MountStep {
    /// A tmpfs with size and inode caps, owned by the sandbox uid.
    Tmpfs {
        path: PathBuf,
        size: u64,
        inodes: u64,
        mode: u32,
    },
    /// A read-only bind of a host path at `path`.
    BindRo { source: PathBuf, path: PathBuf },
    /// A symlink (recreating a host symlink such as `/bin -> usr/bin`).
    Symlink { link: PathBuf, path: PathBuf },
    /// A regular file with fixed contents on the (read-only) root.
    File { path: PathBuf, contents: String },
    /// A host device node bound onto an empty file (mknod is not allowed in a userns).
    Device { source: PathBuf, path: PathBuf },
    /// A fresh procfs for the job's pid namespace.
    Proc { path: PathBuf },
    /// A read-only file with `contents` bound over `path` (a host-global value under
    /// /proc that would otherwise leak, such as the boot id).
    Mask { path: PathBuf, contents: String },
    /// An empty directory on the read-only root: where a zygote's jobs mount their
    /// tmpfs (a zygote has none of its own).
    Dir { path: PathBuf },
    /// The host's /proc, bound (recursively) in place of a procfs of the job's own: only
    /// in a plan without a pid namespace ([`Namespaces::pid`]; a new procfs needs one),
    /// which only the attack suite's test-only weakening makes.
    HostProc { path: PathBuf },
    /// A host path bound at `path` (read-only unless `writable`), its mount point made
    /// on the root: the minimal root switched off for that one path (only the attack
    /// suite's test-only weakening plans one, for a decoy or a canary it planted).
    Expose {
        source: PathBuf,
        path: PathBuf,
        writable: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlimitPlan {
    pub nofile: u64,
    pub fsize: u64,
    /// Queued signals ([`SIGPENDING`]), POSIX message queue bytes ([`MSGQUEUE_BYTES`])
    /// and locked memory ([`MEMLOCK_BYTES`]): per-user kernel budgets that are charged
    /// up the user-namespace chain to its creator (host root, for every job).
    pub sigpending: u64,
    pub msgqueue: u64,
    pub memlock: u64,
    /// Per-process stand-ins for the cgroup limits when the daemon has no cgroup
    /// (rootless without delegation): address space, CPU seconds, processes.
    pub fallback: Option<RlimitFallback>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RlimitFallback {
    pub address_space: u64,
    pub cpu_seconds: u64,
    pub nproc: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// The ABI the profile is written for.
    pub abi: u8,
    /// The lowest kernel ABI accepted (below `abi` is best effort, reported).
    pub min_abi: u8,
    /// Read beneath these.
    pub read_dirs: Vec<PathBuf>,
    /// Execute beneath these: the read-only binds of host directories (the interpreter
    /// and its libraries), nowhere else.
    pub exec_dirs: Vec<PathBuf>,
    /// Full access beneath these (the job's tmpfs mounts).
    pub write_dirs: Vec<PathBuf>,
    /// Read and write (not create) on these files.
    pub write_files: Vec<PathBuf>,
    /// TCP ports the payload may connect to (package installs from an index only;
    /// needs ABI 4). Empty: every TCP connect and bind is denied.
    #[serde(default)]
    pub tcp_connect: Vec<u16>,
    /// Landlock handles no TCP right at all (ignoring `tcp_connect`): a private loopback
    /// (`NetworkPlan::Loopback`), whose every address is the job's own; Landlock's TCP
    /// rules are per port and could not say "this namespace's loopback only".
    #[serde(default)]
    pub tcp_any: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupPlan {
    pub memory_bytes: u64,
    pub pids: u32,
    /// CFS quota per period; `None` = unthrottled.
    pub cpu_quota_us: Option<u64>,
    pub cpu_period_us: u64,
}

/// The namespaces a job's init is born in besides its user, mount and IPC namespaces,
/// which every job has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespaces {
    pub pid: bool,
    pub net: bool,
    /// The network namespace may be one the spawner made ahead (a spare, owned by the
    /// host's user namespace: nothing in the job has a capability over it); `false`: the
    /// job's own clone makes it (`CLONE_NEWNET`, owned by the job's user namespace).
    pub net_spare: bool,
    pub uts: bool,
    pub cgroup: bool,
    /// A time namespace of its own, its clocks near zero, where the daemon can make one
    /// (a root daemon on a kernel with time namespaces).
    pub time: bool,
}

/// What the job's setup applies besides what is data of its own (the mount plan, the
/// seccomp filters, the cgroup). Every plan the daemon builds has all of it
/// ([`Layers::FULL`]); only the attack suite's test-only weakening
/// (`vivariumd::policy::weaken`) switches some off, and marks the plan `weakened`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layers {
    pub namespaces: Namespaces,
    /// The payload applies [`JobPlan::landlock`] (never a zygote's own start).
    pub landlock: bool,
    /// The payload drops every capability and becomes uid and gid [`SANDBOX_UID`]
    /// (`false`: it keeps uid 0 of the job's user namespace and its capabilities there).
    pub drop_caps: bool,
    /// Init stays uid 0 of the job's user namespace (and non-dumpable) once the payload
    /// is forked; `false`: it drops to the payload's ids and is dumpable.
    pub init_root: bool,
    /// The job's procfs is mounted `hidepid=invisible`.
    pub hidepid: bool,
    /// `vm.memfd_noexec = 2` in the job's pid namespace (a root daemon only).
    pub memfd_noexec: bool,
    /// Init closes every fd the clone copied, the payload marks the rest close-on-exec.
    pub close_fds: bool,
    /// The root is remounted read-only once the mount plan has run.
    pub read_only_root: bool,
    /// The job's tmpfs mounts (/work, /tmp, /dev/shm) are noexec.
    pub noexec_scratch: bool,
    /// The job's user namespace may make no namespace of any kind ([`NO_NAMESPACES`]).
    pub namespace_limits: bool,
    /// Something is switched off: a test-only plan. The spawner refuses one unless it
    /// was started for the attack suite (`VIVARIUM_TEST_WEAKENED=1`), and never forks
    /// one from a zygote or copies its root from a mount template.
    pub weakened: bool,
}

impl Layers {
    /// The full sandbox: what every plan the daemon builds gets.
    pub const FULL: Layers = Layers {
        namespaces: Namespaces {
            pid: true,
            net: true,
            net_spare: true,
            uts: true,
            cgroup: true,
            time: true,
        },
        landlock: true,
        drop_caps: true,
        init_root: true,
        hidepid: true,
        memfd_noexec: true,
        close_fds: true,
        read_only_root: true,
        noexec_scratch: true,
        namespace_limits: true,
        weakened: false,
    };
}

/// One job's sandbox, ready to execute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPlan {
    pub job_id: u64,
    pub hostname: String,
    pub mounts: Vec<MountStep>,
    pub interpreter: PathBuf,
    /// Complete argv, `argv[0]` first.
    pub argv: Vec<String>,
    /// The complete environment: nothing is inherited.
    pub env: Vec<(String, String)>,
    pub rlimits: RlimitPlan,
    pub landlock: LandlockPlan,
    /// Compiled seccomp filters in installation order (`(code, jt, jf, k)`).
    pub seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    pub cgroup: CgroupPlan,
    /// The job's own cgroup, read-only where container-aware libraries look for their
    /// limits (`/sys/fs/cgroup`): mounted by init once the job's cgroup namespace exists
    /// (its mount points are `MountStep::Dir`s of `mounts`). Empty without cgroups.
    #[serde(default)]
    pub cgroup_view: Vec<ViewMount>,
    pub wall_ms: u64,
    pub cpu_ms: u64,
    /// What the sandbox is for: a one-shot job, a warm sandbox, a zygote, an install.
    pub kind: PlanKind,
    /// What the job's (always fresh) network namespace holds.
    pub network: NetworkPlan,
    /// Set by the spawner, not the server: the job gets a time namespace of its own
    /// (`crate::timens`). A zygote-forked job's init makes it, and fails without it.
    #[serde(default)]
    pub time_ns: bool,
    /// What the setup applies: [`Layers::FULL`] but in the attack suite.
    pub layers: Layers,
    /// A cold job's input files, placed under `/work` by init after the script (I13);
    /// their bytes follow the code in the code memfd, in this order. (A warm sandbox's
    /// come with its job, on stdin: [`warm_header`].)
    #[serde(default)]
    pub inputs: Vec<InputPlan>,
}

/// One input file of a cold job: its path under `/work` (checked by the server:
/// relative, normalized, no NUL), its mode (at most 0644) and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputPlan {
    pub path: String,
    pub mode: u32,
    pub len: u64,
}

/// What a plan's sandbox is for. One field instead of several flags, so that the
/// combinations that cannot be (a zygote with an export, an id slot of a zygote's on a
/// cold job, a zygote plan on a one-shot job) cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanKind {
    /// A cold one-shot job: the script is `/work/main.py`, its deadlines start at the
    /// clone.
    Job,
    /// A warm sandbox: the interpreter starts now and waits for its job on stdin; the
    /// deadlines start when the spawner is told the job has been delivered (`Arm`).
    /// `zygote`: the spawner may build it by forking the profile's zygote (see
    /// `crate::zygote`) instead of a cold start; `None`: always a cold start.
    Warm { zygote: Option<ZygotePlan> },
    /// A warm sandbox forked from a zygote (set by the spawner, from a `Warm` plan whose
    /// zygote part it has taken): its id slot, which gives it ids of its own
    /// ([`ZYGOTE_JOB_IDS`]).
    Forked { slot: u32 },
    /// Starts a zygote (`crate::zygote::zygote_plan`, in the spawner): its interpreter
    /// keeps its capabilities in the sandbox's user namespace and gets neither Landlock
    /// nor seccomp (it builds each job's namespaces and mounts; every job applies both
    /// layers itself), and it gets the spawner's control socket and the zygote library
    /// as fds 3 and 4.
    Zygote,
    /// A package install: a one-shot job whose directory `export` (its path inside) the
    /// server gets an open fd to once the payload runs (`FromSpawner::Exported`): the
    /// environment, built on a capped tmpfs there and copied out after the sandbox has
    /// ended.
    Install { export: PathBuf },
    // (Room for `Session`: a sandbox that serves several jobs in turn.)
}

impl PlanKind {
    /// A sandbox that waits for its job (a warm one, forked or not, or a zygote): it has
    /// no deadline until `Arm`.
    pub fn waits_for_arm(&self) -> bool {
        matches!(
            self,
            PlanKind::Warm { .. } | PlanKind::Forked { .. } | PlanKind::Zygote
        )
    }

    pub fn is_zygote(&self) -> bool {
        *self == PlanKind::Zygote
    }

    /// The zygote part of a warm plan that may be forked from one.
    pub fn zygote(&self) -> Option<&ZygotePlan> {
        match self {
            PlanKind::Warm { zygote } => zygote.as_ref(),
            _ => None,
        }
    }

    /// The id slot of a job forked from a zygote.
    pub fn forked_slot(&self) -> Option<u32> {
        match self {
            PlanKind::Forked { slot } => Some(*slot),
            _ => None,
        }
    }

    /// The directory an install exports.
    pub fn export(&self) -> Option<&PathBuf> {
        match self {
            PlanKind::Install { export } => Some(export),
            _ => None,
        }
    }
}

/// How a profile's zygote is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZygotePlan {
    /// Which zygote: plans with the same key come from the same one (the server's
    /// profile activation and package environment).
    pub key: u64,
    /// The profile's name and activation: a zygote of an older activation of the same
    /// profile is replaced (it ends once its running jobs have).
    pub profile: String,
    pub generation: u64,
    /// The zygote's own cgroup limits: the profile's (never a job's own).
    pub cgroup: CgroupPlan,
    /// The zygote ends after this long without a job.
    pub idle_secs: u64,
    /// The zygote's seccomp filters (the policy with what a zygote needs besides, see
    /// `vivariumd::policy::seccomp::ZygoteSeccomp`): its jobs inherit them.
    pub seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    /// What each forked job installs on top, to get exactly the policy's verdicts.
    pub job_seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
}

/// A profile's seccomp policy split for its zygote, in wire form
/// (`vivariumd::policy::seccomp::ZygoteSeccomp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZygoteSeccompWire {
    pub zygote: Vec<Vec<(u16, u8, u8, u32)>>,
    pub job: Vec<Vec<(u16, u8, u8, u32)>>,
}

/// The warm sandbox's `-c` program: read one job from stdin (the header of
/// [`warm_header`]), write it to [`SCRIPT_PATH`], run it as `__main__`.
pub const WARM_BOOTSTRAP: &str = concat!(
    include_str!("figures_hook.py"),
    // The input files' code as a string, compiled by a job that has files (INPUTS_PY:
    // concat! takes literals only).
    "_VIVARIUM_INPUTS_PY = r'''",
    include_str!("inputs.py"),
    "'''\n",
    include_str!("warm_bootstrap.py")
);
/// A cold-built warm sandbox's `-c` program when the daemon has compiled
/// [`WARM_BOOTSTRAP`] ahead for its interpreter: it reads that code object first on
/// stdin (`u32` length, the magic number, `marshal`), checks the magic number and runs
/// it (`warm_loader.py`).
pub const WARM_LOADER: &str = include_str!("warm_loader.py");
/// A cold job's `-c` program, followed by [`SCRIPT_PATH`] and the job's arguments: the
/// figures hook, then the script run as `python3 <flags> /work/main.py` runs it
/// (`cold_stub.py`).
pub const COLD_PROGRAM: &str = concat!(
    include_str!("figures_hook.py"),
    include_str!("cold_stub.py")
);

/// The figures hook (`figures_hook.py`): first on `sys.meta_path` in every program
/// above, it makes matplotlib's default backend `vivarium_figures`.
pub const FIGURES_HOOK: &str = include_str!("figures_hook.py");

/// matplotlib's backend in the sandbox (`figures.py`): Agg, and every figure shown or
/// left open saved as `/work/out/figure-N.png`. A file on the read-only root, at
/// [`FIGURES_PATH`].
pub const FIGURES_PY: &str = include_str!("figures.py");
pub const FIGURES_PATH: &str = "/etc/vivarium/vivarium_figures.py";

/// The session bootstrap: a cell loop over the control link on fd 0, in one persistent
/// `__main__` (docs/ARCHITECTURE.md, "Sessions"). It is run in parts, as
/// [`session_program`] says.
pub const SESSION_BOOTSTRAP: &str = include_str!("session_bootstrap.py");

/// How the warm bootstrap and the cell loop place input files (`inputs.py`).
const INPUTS_PY: &str = include_str!("inputs.py");
/// How the cell loop collects a cell's outputs (`outputs.py`).
pub const OUTPUTS_PY: &str = include_str!("outputs.py");

/// Where [`SESSION_BOOTSTRAP`] is cut into the parts its stub compiles one at a time.
const SESSION_PART: &str = "\n#: part\n";

/// The session bootstrap's arguments after the interpreter's flags: `-c` and the stub
/// (the file up to its first part line), the input files' code (`inputs.py`, compiled
/// when a cell first has files), the outputs' (`outputs.py`, compiled when a cell first
/// asks for its outputs), each part as an argument of its own, then `--`;
/// the profile's preload modules follow. (One 20 KB `-c` program left the compiler's
/// peak in the interpreter's heap: ~0.8 MiB more private memory per idle session.)
pub fn session_program() -> Vec<String> {
    let mut parts = SESSION_BOOTSTRAP.split(SESSION_PART);
    let stub = parts.next().unwrap_or_default();
    // The input files' code (shared with the warm bootstrap), as a string the loop
    // compiles at its first cell with files; then the parts.
    let mut argv = vec![
        "-c".to_string(),
        stub.to_string(),
        INPUTS_PY.to_string(),
        OUTPUTS_PY.to_string(),
        // The first part: the figures hook, before the preloads.
        FIGURES_HOOK.to_string(),
    ];
    argv.extend(parts.map(str::to_string));
    argv.push("--".into());
    argv
}

/// A job as a warm sandbox reads it on stdin, before the job's own stdin: `u32` argc,
/// each argument as `u32` length + bytes, then `u32` length + the code, then the input
/// files ([`input_stream`]: `u32` count, then each file), little endian.
pub fn warm_header(args: &[String], code: &[u8], files: &[InputPlan], bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(code.len() + bytes.len() + 64);
    out.extend_from_slice(&(args.len() as u32).to_le_bytes());
    for item in args.iter().map(|a| a.as_bytes()).chain([code]) {
        out.extend_from_slice(&(item.len() as u32).to_le_bytes());
        out.extend_from_slice(item);
    }
    out.extend_from_slice(&(files.len() as u32).to_le_bytes());
    input_stream(&mut out, files, bytes);
    out
}

/// Input files as a warm sandbox's bootstrap and a session's cell loop read them
/// (`inputs.py`): per file `u32` path length, the path, `u32` mode, `u64` length, the
/// bytes (its share of `bytes`, which holds them one after the other).
pub fn input_stream(out: &mut Vec<u8>, files: &[InputPlan], mut bytes: &[u8]) {
    for f in files {
        let (data, rest) = bytes.split_at((f.len as usize).min(bytes.len()));
        bytes = rest;
        out.extend_from_slice(&(f.path.len() as u32).to_le_bytes());
        out.extend_from_slice(f.path.as_bytes());
        out.extend_from_slice(&f.mode.to_le_bytes());
        out.extend_from_slice(&f.len.to_le_bytes());
        out.extend_from_slice(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_header_is_length_prefixed() {
        let h = warm_header(&["a".into(), "bc".into()], b"print(1)", &[], b"");
        let mut want = vec![
            2, 0, 0, 0, 1, 0, 0, 0, b'a', 2, 0, 0, 0, b'b', b'c', 8, 0, 0, 0,
        ];
        want.extend_from_slice(b"print(1)");
        want.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(h, want);
        let files = [
            InputPlan {
                path: "d/x".into(),
                mode: 0o600,
                len: 2,
            },
            InputPlan {
                path: "e".into(),
                mode: 0,
                len: 0,
            },
        ];
        let h = warm_header(&[], b"", &files, b"hi");
        let mut want = vec![0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0];
        want.extend_from_slice(&[3, 0, 0, 0, b'd', b'/', b'x', 0x80, 0x01, 0, 0]);
        want.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0, b'h', b'i']);
        want.extend_from_slice(&[1, 0, 0, 0, b'e', 0, 0, 0, 0]);
        want.extend_from_slice(&[0; 8]);
        assert_eq!(h, want);
    }

    #[test]
    fn the_session_bootstrap_runs_in_small_parts() {
        let argv = session_program();
        assert_eq!(argv[0], "-c");
        assert!(argv[1].starts_with("# Vivarium's session sandbox"));
        assert!(argv[1].contains("def _vivarium_parts(argv):"));
        assert_eq!(argv.last().map(String::as_str), Some("--"));
        assert_eq!(
            argv[2], INPUTS_PY,
            "the input files' code, compiled when used"
        );
        assert_eq!(argv[3], OUTPUTS_PY, "the outputs' code, compiled when used");
        let parts = &argv[4..argv.len() - 1];
        // The memory an idle session keeps depends on the largest part (the compiler's
        // peak): keep each one small.
        assert!(parts.len() >= 8, "{} parts", parts.len());
        for part in parts {
            assert!(
                part.len() <= 4 * 1024,
                "a part of {} bytes:\n{part}",
                part.len()
            );
            assert!(!part.contains(SESSION_PART));
        }
        assert!(parts.last().unwrap().contains("while True:"));
    }
}
