//! Seccomp layer: a default-deny syscall allowlist for the payload, installed last, right
//! before `execve(python3)`.
//!
//! # Policy file
//!
//! The policy is a JSON file (`profiles/seccomp/default.json`) in seccompiler's JSON format
//! (<https://github.com/rust-vmm/seccompiler/blob/main/docs/json_format.md>) with exactly four
//! named filters and a mandatory `comment` on every rule naming the CPython/glibc path that
//! needs it. seccompiler's parser rejects unknown top-level keys and filter fields, so the
//! file cannot carry free-form documentation; this comment is that documentation.
//!
//! | filter              | match action    | mismatch action  | content                                   |
//! |---------------------|-----------------|------------------|-------------------------------------------|
//! | `allowlist`         | `allow`         | `errno` ENOSYS   | every syscall CPython may make, no args   |
//! | `deny`              | `errno` EPERM   | `allow`          | dangerous syscalls; argument checks       |
//! | `deny_socket_local` | `errno` EPERM   | `allow`          | `socket` families other than AF_UNIX      |
//! | `deny_socket_inet`  | `errno` EPERM   | `allow`          | families other than AF_UNIX/INET/INET6    |
//!
//! `allow_inet` (profiles with network) picks `deny_socket_inet` instead of
//! `deny_socket_local`; everything else is shared. AF_NETLINK, AF_PACKET and AF_VSOCK are
//! refused in both (glibc's `getaddrinfo` tolerates the refused NETLINK_ROUTE probe and
//! assumes both address families are configured). `socketpair` is AF_UNIX-only in both.
//!
//! Unknown syscalls get ENOSYS, not EPERM, because glibc falls back to an older syscall only
//! on ENOSYS: `clone3` -> `clone` (pthread_create, posix_spawn), `faccessat2` -> `faccessat`,
//! `statx` -> `fstatat`. `clone3` must stay unknown: its flags live behind a pointer that BPF
//! cannot read, so the namespace-flag check below could not apply to it. glibc 2.36 does not
//! remember the ENOSYS: every pthread_create tries `clone3` first, then `clone` (one wasted
//! syscall per thread); fork() and vfork() use `clone`/`vfork` directly. Syscalls the
//! sandbox refuses on purpose get EPERM instead: "it exists, you may not", which stops
//! fallbacks and reads like any container runtime's answer.
//!
//! One exception the policy cannot change: the kernel runs `uretprobe` (x86_64 nr 335) and
//! `uprobe` (336) without consulting any seccomp filter (`seccomp_uprobe_exception` in
//! kernel/seccomp.c; for uretprobe since Linux 6.14 and 6.12 stable, for uprobe since the
//! syscall exists), so a job reaches them although the allowlist does not list them. They
//! are what the trampolines the kernel maps for uprobes call (uretprobe when a probed
//! function returns, uprobe at an optimized probe site); called from anywhere else the
//! kernel refuses them itself (uprobe: ENXIO; uretprobe: SIGILL), and a job can attach no
//! uprobe of its own (`perf_event_open` and `bpf` are refused, tracefs is not in its root).
//! docs/SECURITY.md ("What the filter cannot see") says what is left.
//!
//! Argument checks (all in `deny`, all returning EPERM): `clone` with any of
//! CLONE_NEW{NS,CGROUP,UTS,IPC,USER,PID,NET} (qword, flags is `unsigned long`); `ioctl`
//! requests other than TCGETS, TCGETS2, TIOCGWINSZ, FIONREAD, FIONBIO, FIOCLEX and FIONCLEX
//! (so TIOCSTI and TIOCLINUX are refused); `personality` other than the 0xffffffff query;
//! `socketpair` families other than AF_UNIX; `fadvise64` with POSIX_FADV_DONTNEED and
//! `preadv2`/`pwritev2` with RWF_NOWAIT or RWF_DONTCACHE (the page-cache side channel:
//! evicting a host file's pages, and telling cached from uncached; docs/SECURITY.md, "The
//! page cache"; those three now run the filter on each call instead of the kernel's
//! per-number cache, which costs CPython nothing: its I/O uses `read`, `pread64` and
//! `preadv`). Arguments the kernel declares `int` or `unsigned int` are compared as
//! dword: the kernel ignores the upper half, so a qword check can be bypassed by setting
//! high bits (CVE-2019-10063, TIOCSTI | 1 << 32 in Flatpak).
//!
//! # Why several filters, and in which order
//!
//! A seccompiler filter has one match action and one mismatch action, so "allow these,
//! EPERM those, ENOSYS for the rest" takes stacked filters. The kernel runs every installed
//! filter, most recently installed first, and keeps the first-seen result of the highest
//! precedence, data included (seccomp(2), "Filter return values"; `seccomp_run_filters` in
//! kernel/seccomp.c compares `ACTION_ONLY(cur) < ACTION_ONLY(ret)` strictly while walking
//! `f->prev`). Precedence: KILL_PROCESS > KILL_THREAD > TRAP > ERRNO > USER_NOTIF > TRACE >
//! LOG > ALLOW, and all ERRNO values share one precedence whatever their errno.
//!
//! So two filters answering ERRNO with different errnos would make the result depend on
//! installation order. This module rules that out instead of relying on it: the `allowlist`
//! filter is compiled as the file's allowlist plus every syscall a deny filter names
//! unconditionally (added here, in code, so the file lists each syscall once, under the
//! verdict it gets). Every syscall then gets at most one ERRNO verdict across all filters
//! (checked by a unit test over every syscall number), and the result is simply the most
//! restrictive one:
//!
//! | syscall                          | deny filters | allowlist    | result       |
//! |----------------------------------|--------------|--------------|--------------|
//! | allowlisted (`read`)             | ALLOW        | ALLOW        | ALLOW        |
//! | denied (`ptrace`)                | ERRNO(EPERM) | ALLOW        | EPERM        |
//! | `socket(AF_INET)`, local profile | ERRNO(EPERM) | ALLOW        | EPERM        |
//! | unknown (`clone3`, nr 1000)      | ALLOW        | ERRNO(ENOSYS)| ENOSYS       |
//! | x32 (nr \| 0x4000_0000)          | ALLOW        | ERRNO(ENOSYS)| ENOSYS       |
//! | i386 (`int 0x80`)                | KILL_PROCESS | KILL_PROCESS | KILL_PROCESS |
//!
//! Order still matters for installing a stack: each `seccomp(2)` call must itself pass the
//! filters already installed. The deny filters allow it, the allowlist does not list
//! `seccomp`, so the stack is `[deny, deny_socket_*, allowlist]`, installed in that order.
//! Installing the allowlist first would make the second `seccomp(2)` call fail with ENOSYS
//! unless `seccomp` itself were allowlisted.
//!
//! # One filter installed, with the stack's verdicts
//!
//! The stack above is the reference semantics; what [`compile`] returns, and [`apply`]
//! installs, is normally ONE filter built from it by `merge.rs`: the stack's verdict for
//! every syscall number, found by evaluating the three filters, behind a binary search on
//! the number, with a copy of the one filter that checks arguments (compiled with only its
//! argument rules) for the few numbers that have such rules (`clone`, `ioctl`,
//! `personality`, `socket`, `socketpair`, `fadvise64`, `preadv2`, `pwritev2`). A unit test
//! compares the two for every syscall number (native and x32)
//! and the argument values the rules look at. A policy the merge cannot handle keeps the
//! stack (equally strict, slower to install). [`apply`] and any consumer of
//! [`SeccompProgram::to_wire`] install the filters in the order given.
//!
//! seccompiler prefixes every filter with an architecture check that returns KILL_PROCESS
//! for any `seccomp_data.arch` other than the target's, which covers the i386 ABI reached
//! through `int 0x80` from a 64-bit process. It does not check the x32 bit: x32 syscalls
//! carry `AUDIT_ARCH_X86_64` with `nr | 0x4000_0000`, which is why this layer is allowlist
//! only; those numbers match no allowlist rule and get ENOSYS.
//!
//! Cost: seccompiler emits a linear chain (about five instructions per syscall; the compiled
//! allowlist is about 1,400), but since Linux 5.11 the kernel caches per syscall number
//! whether every installed filter allows it without looking at arguments, so unconditionally
//! allowed syscalls (`read`, `futex`, ...) skip BPF. Installing a filter makes the kernel
//! precompute that cache by emulating the filter for every syscall number, so the cost grows
//! with the length of the path to each number's verdict. Measured here (kernel 6.18): the
//! three stacked filters took about 1 ms to install (traced: 0.6 + 0.1 + 0.9 ms), the merged
//! filter (about 360 instructions then, about 400 with the page-cache checks, not traced
//! again; about ten to most verdicts) 0.2-0.45 ms traced; a cached
//! syscall costs ~70 ns more (the seccomp syscall-entry path).
//!
//! [`compile`] validates the policy (sections, actions, comments, argument widths, no
//! syscall both allowed and denied, no `clone3`/`io_uring_*` in the allowlist) and compiles it
//! once per profile; [`apply`] only issues syscalls, so it is safe between fork and exec.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use seccompiler::{BpfProgram, TargetArch};
use serde::{Deserialize, Serialize};

/// Errno returned for syscalls the allowlist does not know.
const ENOSYS: u32 = libc::ENOSYS as u32;
/// Errno returned for syscalls and arguments refused on purpose.
const EPERM: u32 = libc::EPERM as u32;

/// Kernel limit on the instructions of all filters attached to a task, each filter counting
/// four extra (`MAX_INSNS_PER_PATH` in kernel/seccomp.c).
const MAX_INSNS_PER_PATH: usize = 32_768;

/// Syscalls that must never be allowlisted, whatever the policy file says.
const NEVER_ALLOWED: &[(&str, &str)] = &[
    (
        "clone3",
        "flags sit behind a pointer the filter cannot read; ENOSYS makes glibc use clone",
    ),
    ("io_uring_setup", "io_uring operations bypass seccomp"),
    ("io_uring_enter", "io_uring operations bypass seccomp"),
    ("io_uring_register", "io_uring operations bypass seccomp"),
];

/// Compiled filters, in installation order. Built once per profile at daemon start (or per
/// job, cheaply cloned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeccompProgram {
    filters: Vec<BpfProgram>,
}

impl SeccompProgram {
    /// Number of filters [`apply`] installs.
    pub fn filter_count(&self) -> u32 {
        u32::try_from(self.filters.len()).unwrap_or(u32::MAX)
    }

    /// Total BPF instructions over all filters.
    pub fn instruction_count(&self) -> usize {
        self.filters.iter().map(Vec::len).sum()
    }

    /// The filters, in installation order.
    pub fn filters(&self) -> &[BpfProgram] {
        &self.filters
    }

    /// The filters as plain `(code, jt, jf, k)` tuples, in installation order, for sending
    /// to the spawner.
    pub fn to_wire(&self) -> Vec<Vec<(u16, u8, u8, u32)>> {
        self.filters
            .iter()
            .map(|f| f.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
            .collect()
    }

    /// Inverse of [`SeccompProgram::to_wire`]. Call before fork: it allocates.
    pub fn from_wire(wire: &[Vec<(u16, u8, u8, u32)>]) -> Self {
        let filters = wire
            .iter()
            .map(|f| {
                f.iter()
                    .map(|&(code, jt, jf, k)| seccompiler::sock_filter { code, jt, jf, k })
                    .collect()
            })
            .collect();
        Self { filters }
    }
}

/// Errors of the seccomp layer.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum SeccompError {
    #[error("cannot read seccomp policy {path:?}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("seccomp policy does not parse")]
    Parse {
        #[source]
        source: serde_json::Error,
    },
    #[error("seccomp filter `{filter}` must have match action {expected_match} and mismatch action {expected_mismatch}")]
    UnexpectedActions {
        filter: &'static str,
        expected_match: &'static str,
        expected_mismatch: &'static str,
    },
    #[error("seccomp rule for `{syscall}` in filter `{filter}` has no comment")]
    MissingComment {
        filter: &'static str,
        syscall: String,
    },
    #[error(
        "seccomp rule for `{syscall}` in filter `{filter}` compares argument {index} out of range"
    )]
    ArgumentOutOfRange {
        filter: &'static str,
        syscall: String,
        index: u8,
    },
    #[error("seccomp filter `{filter}` has an unconditional rule for `{syscall}` next to another rule for it")]
    DuplicateRule {
        filter: &'static str,
        syscall: String,
    },
    #[error("seccomp allowlist rule for `{syscall}` has argument conditions; argument checks belong in a deny filter")]
    ConditionalAllow { syscall: String },
    #[error("`{syscall}` is both allowlisted and unconditionally denied")]
    AllowedAndDenied { syscall: String },
    #[error("a deny filter checks arguments of `{syscall}`, which a zygote needs whole")]
    ZygoteConditional { syscall: String },
    #[error(
        "filter `{filter}` checks arguments of `{syscall}`, which the allowlist does not list"
    )]
    CheckedButNotAllowed {
        filter: &'static str,
        syscall: String,
    },
    #[error("`{syscall}` must never be allowlisted: {reason}")]
    NeverAllowed {
        syscall: &'static str,
        reason: &'static str,
    },
    #[error("host architecture {arch} has no seccomp support here")]
    UnsupportedArch {
        arch: &'static str,
        #[source]
        source: seccompiler::BackendError,
    },
    #[error("cannot compile seccomp policy")]
    Compile {
        #[source]
        source: seccompiler::Error,
    },
    #[error("seccomp program has {instructions} instructions, over the kernel limit of {limit}")]
    TooLong { instructions: usize, limit: usize },
    #[error("cannot install seccomp filter {index}")]
    Install {
        index: usize,
        #[source]
        source: seccompiler::Error,
    },
}

impl SeccompError {
    /// The OS error behind an [`SeccompError::Install`] failure, for reporting as
    /// `(step, errno)` from a child that must not allocate.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Install {
                source: seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e),
                ..
            } => e.raw_os_error(),
            Self::Read { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// Parses, validates and compiles a policy for the host architecture (x86_64 is the only one
/// the shipped policy names syscalls for).
pub fn compile(policy_json: &[u8], allow_inet: bool) -> Result<SeccompProgram, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|source| {
        SeccompError::UnsupportedArch {
            arch: std::env::consts::ARCH,
            source,
        }
    })?;
    compile_for_arch(policy_json, allow_inet, arch)
}

/// A profile's policy, compiled: the built-in one's bytes, or the file at its
/// `seccomp_path`.
pub fn load_for(
    profile: &crate::profile::Profile,
    allow_inet: bool,
) -> Result<SeccompProgram, SeccompError> {
    compile(&policy_of(profile)?, allow_inet)
}

/// [`load_for`] split for a zygote ([`compile_zygote`]).
pub fn load_zygote_for(
    profile: &crate::profile::Profile,
    allow_inet: bool,
) -> Result<ZygoteSeccomp, SeccompError> {
    compile_zygote(&policy_of(profile)?, allow_inet)
}

/// A profile's policy text: built in, or read from its `seccomp_path`.
fn policy_of(
    profile: &crate::profile::Profile,
) -> Result<std::borrow::Cow<'static, [u8]>, SeccompError> {
    match profile.seccomp_builtin {
        Some(json) => Ok(json.into()),
        None => read(&profile.seccomp_path).map(Into::into),
    }
}

fn read(path: &Path) -> Result<Vec<u8>, SeccompError> {
    std::fs::read(path).map_err(|source| SeccompError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the policy at `path` and [`compile`]s it.
pub fn load(path: &Path, allow_inet: bool) -> Result<SeccompProgram, SeccompError> {
    compile(&read(path)?, allow_inet)
}

/// Installs every filter, in order, on the calling thread. Called in a forked child right
/// before `execve`, after no_new_privs is set (`seccompiler::apply_filter` sets it again,
/// which is harmless). Does not allocate: the programs were built by [`compile`] and the
/// error path carries only an index and an OS error code.
pub fn apply(program: &SeccompProgram) -> Result<(), SeccompError> {
    for (index, filter) in program.filters.iter().enumerate() {
        seccompiler::apply_filter(filter)
            .map_err(|source| SeccompError::Install { index, source })?;
    }
    Ok(())
}

/// Syscalls a zygote and each job's setup in its children need beyond a job's policy
/// (`vivarium_sandbox::zygote`): namespaces and mounts, the hostname, dropping
/// capabilities, Landlock, and installing one more filter.
pub const ZYGOTE_EXTRAS: &[&str] = &[
    "unshare",
    "setns",
    "mount",
    "umount2",
    "sethostname",
    "capset",
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "seccomp",
];

/// ioctl requests a forked job's init makes (it brings up `lo` in the job's own network
/// namespace, `NetworkPlan::Loopback`) that a policy's conditional ioctl deny rule
/// refuses: the zygote's copy of that rule lets them through, and each job's "refused"
/// filter refuses them again (EPERM, the policy's verdict).
pub const ZYGOTE_IOCTLS: &[(u64, &str)] = &[
    (
        libc::SIOCGIFFLAGS,
        "SIOCGIFFLAGS: a forked job's init reads lo's flags",
    ),
    (
        libc::SIOCSIFFLAGS,
        "SIOCSIFFLAGS: a forked job's init brings lo up",
    ),
];

/// A policy split for a zygote (see `vivarium_sandbox::zygote`): `zygote` is the policy
/// with [`ZYGOTE_EXTRAS`] allowed, installed once in the zygote (its jobs inherit it,
/// compiled and JIT-ed once); `job` is what each job adds: two small filters that give
/// the extras the verdicts the policy gives them (EPERM for those a deny filter refuses,
/// ENOSYS for the others). A job's verdicts under both are exactly the policy's
/// (checked over every syscall by the tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZygoteSeccomp {
    pub zygote: SeccompProgram,
    pub job: SeccompProgram,
}

/// [`compile`], split for a zygote.
pub fn compile_zygote(policy_json: &[u8], allow_inet: bool) -> Result<ZygoteSeccomp, SeccompError> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|source| {
        SeccompError::UnsupportedArch {
            arch: std::env::consts::ARCH,
            source,
        }
    })?;
    compile_zygote_for_arch(policy_json, allow_inet, arch)
}

/// [`compile_zygote`] with an explicit target architecture.
pub(crate) fn compile_zygote_for_arch(
    policy_json: &[u8],
    allow_inet: bool,
    arch: TargetArch,
) -> Result<ZygoteSeccomp, SeccompError> {
    let policy = parse(policy_json)?;
    let allowed = policy.allowlist.names();
    let extras: Vec<&str> = (ZYGOTE_EXTRAS.iter().copied())
        .filter(|s| !allowed.contains(s))
        .collect();
    let denied = |name: &str| {
        (policy.deny_filters().iter())
            .flat_map(|(_, f)| &f.filter)
            .find(|r| r.syscall == name)
    };
    let rule = |name: &str, comment: &str| RuleSpec {
        syscall: name.to_owned(),
        comment: comment.to_owned(),
        args: None,
    };
    let mut refused = Vec::new();
    let mut unknown = Vec::new();
    for &name in &extras {
        match denied(name) {
            Some(r) if r.args.is_some() => {
                return Err(SeccompError::ZygoteConditional {
                    syscall: name.to_owned(),
                })
            }
            Some(_) => refused.push(rule(name, "refused by the policy's deny filter")),
            None => unknown.push(rule(name, "not on the policy's allowlist")),
        }
    }
    // The zygote: the extras on the allowlist and off the deny filters.
    let mut zygote_policy = PolicyFile {
        allowlist: policy.allowlist.clone(),
        deny: policy.deny.clone(),
        deny_socket_local: policy.deny_socket_local.clone(),
        deny_socket_inet: policy.deny_socket_inet.clone(),
    };
    for &name in &extras {
        zygote_policy
            .allowlist
            .filter
            .push(rule(name, "a zygote's own"));
    }
    // ioctl stays conditional: the zygote's deny rule also spares ZYGOTE_IOCTLS (a rule
    // matches when all its conditions hold), each job's refuses them again (one rule
    // per request: rules of a filter match when any does). A policy that allows ioctl
    // outright needs neither; one that does not allow it refuses it to the job's init,
    // which then fails closed.
    let ioctl_rule =
        (zygote_policy.deny.filter.iter_mut()).find(|r| r.syscall == "ioctl" && r.args.is_some());
    if let Some(rule) = ioctl_rule {
        for &(request, comment) in ZYGOTE_IOCTLS {
            let cond = |op| ArgSpec {
                index: 1,
                width: ArgWidth::Dword,
                op,
                val: request,
                comment: Some(comment.to_owned()),
            };
            if let Some(args) = rule.args.as_mut() {
                args.push(cond(CmpOp::Ne));
            }
            refused.push(RuleSpec {
                syscall: "ioctl".into(),
                comment: comment.to_owned(),
                args: Some(vec![cond(CmpOp::Eq)]),
            });
        }
    }
    for f in [
        &mut zygote_policy.deny,
        &mut zygote_policy.deny_socket_local,
        &mut zygote_policy.deny_socket_inet,
    ] {
        f.filter.retain(|r| !extras.contains(&r.syscall.as_str()));
    }
    let zygote = program_of(&zygote_policy, allow_inet, arch)?;
    // Each job: the extras' verdicts back.
    let mut sections: BTreeMap<&str, FilterSpec> = BTreeMap::new();
    let spec = |filter: Vec<RuleSpec>, errno| FilterSpec {
        mismatch_action: Action::Allow,
        match_action: Action::Errno(errno),
        filter,
    };
    let mut order = Vec::new();
    if !refused.is_empty() {
        sections.insert("refused", spec(refused, EPERM));
        order.push("refused");
    }
    if !unknown.is_empty() {
        sections.insert("unknown", spec(unknown, ENOSYS));
        order.push("unknown");
    }
    let json = serde_json::to_vec(&sections).map_err(|source| SeccompError::Parse { source })?;
    let mut compiled = seccompiler::compile_from_json(json.as_slice(), arch)
        .map_err(|source| SeccompError::Compile { source })?;
    let job = SeccompProgram {
        filters: order.iter().filter_map(|n| compiled.remove(*n)).collect(),
    };
    Ok(ZygoteSeccomp { zygote, job })
}

/// [`compile`] with an explicit target architecture.
pub(crate) fn compile_for_arch(
    policy_json: &[u8],
    allow_inet: bool,
    arch: TargetArch,
) -> Result<SeccompProgram, SeccompError> {
    let policy = parse(policy_json)?;
    program_of(&policy, allow_inet, arch)
}

fn parse(policy_json: &[u8]) -> Result<PolicyFile, SeccompError> {
    let policy: PolicyFile =
        serde_json::from_slice(policy_json).map_err(|source| SeccompError::Parse { source })?;
    policy.validate()?;
    Ok(policy)
}

/// The program installed for a policy (validated, or a zygote's, derived from a
/// validated one): one merged filter with the stack's verdicts when the stack allows it
/// (merge.rs), else the stack.
fn program_of(
    policy: &PolicyFile,
    allow_inet: bool,
    arch: TargetArch,
) -> Result<SeccompProgram, SeccompError> {
    let filters = compile_stack_of(policy, allow_inet, arch, false)?;
    // The same stack with only the argument-checking rules in the deny filters: what the
    // merged program copies in for the numbers that have such rules.
    let checks = compile_stack_of(policy, allow_inet, arch, true)?;
    let filters = match merge::merge(&filters, &checks) {
        Some(merged) => vec![merged],
        None => filters,
    };
    let instructions: usize = filters.iter().map(|f| f.len() + 4).sum();
    if instructions > MAX_INSNS_PER_PATH {
        return Err(SeccompError::TooLong {
            instructions,
            limit: MAX_INSNS_PER_PATH,
        });
    }
    Ok(SeccompProgram { filters })
}

/// The policy as seccompiler's stacked filters, in installation order: the reference
/// semantics that the merged program reproduces. With `checks_only`, the deny filters keep
/// only their rules with argument conditions.
fn compile_stack_of(
    policy: &PolicyFile,
    allow_inet: bool,
    arch: TargetArch,
    checks_only: bool,
) -> Result<Vec<BpfProgram>, SeccompError> {
    let (socket_name, socket_filter) = if allow_inet {
        ("deny_socket_inet", &policy.deny_socket_inet)
    } else {
        ("deny_socket_local", &policy.deny_socket_local)
    };
    let deny = [("deny", &policy.deny), (socket_name, socket_filter)];
    let allowlist = policy.allowlist.with_denied_names(deny.map(|(_, f)| f));
    let checks = deny.map(|(name, f)| (name, f.checks_only()));
    let deny = if checks_only {
        [(checks[0].0, &checks[0].1), (checks[1].0, &checks[1].1)]
    } else {
        deny
    };

    // Installation order: the deny filters first, the allowlist last (see module docs).
    let mut sections: BTreeMap<&str, &FilterSpec> = deny.into_iter().collect();
    sections.insert("allowlist", &allowlist);
    let order = ["deny", socket_name, "allowlist"];

    // Serializing these plain structs cannot fail in practice; the error is kept, not unwrapped.
    let json = serde_json::to_vec(&sections).map_err(|source| SeccompError::Parse { source })?;
    let mut compiled = seccompiler::compile_from_json(json.as_slice(), arch)
        .map_err(|source| SeccompError::Compile { source })?;
    let filters: Vec<BpfProgram> = order
        .iter()
        .filter_map(|name| compiled.remove(*name))
        .collect();
    debug_assert_eq!(filters.len(), order.len());
    Ok(filters)
}

/// The policy file: seccompiler's JSON format restricted to the four filters this layer
/// installs and to the actions it expects. Unknown, missing or duplicate keys fail to parse.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    allowlist: FilterSpec,
    deny: FilterSpec,
    deny_socket_local: FilterSpec,
    deny_socket_inet: FilterSpec,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterSpec {
    mismatch_action: Action,
    match_action: Action,
    filter: Vec<RuleSpec>,
}

/// The two seccompiler actions a policy may use, in seccompiler's JSON spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Action {
    Allow,
    Errno(u32),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    syscall: String,
    comment: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    args: Option<Vec<ArgSpec>>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgSpec {
    index: u8,
    #[serde(rename = "type")]
    width: ArgWidth,
    op: CmpOp,
    val: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ArgWidth {
    Dword,
    Qword,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum CmpOp {
    Eq,
    Ge,
    Gt,
    Le,
    Lt,
    MaskedEq(u64),
    Ne,
}

impl PolicyFile {
    fn deny_filters(&self) -> [(&'static str, &FilterSpec); 3] {
        [
            ("deny", &self.deny),
            ("deny_socket_local", &self.deny_socket_local),
            ("deny_socket_inet", &self.deny_socket_inet),
        ]
    }

    fn validate(&self) -> Result<(), SeccompError> {
        self.allowlist.validate(
            "allowlist",
            Action::Allow,
            Action::Errno(ENOSYS),
            ("allow", "errno ENOSYS"),
        )?;
        for (name, filter) in self.deny_filters() {
            filter.validate(
                name,
                Action::Errno(EPERM),
                Action::Allow,
                ("errno EPERM", "allow"),
            )?;
        }

        let allowed = self.allowlist.names();
        if let Some(rule) = self.allowlist.filter.iter().find(|r| r.args.is_some()) {
            return Err(SeccompError::ConditionalAllow {
                syscall: rule.syscall.clone(),
            });
        }
        if let Some(&(syscall, reason)) = NEVER_ALLOWED.iter().find(|(s, _)| allowed.contains(s)) {
            return Err(SeccompError::NeverAllowed { syscall, reason });
        }
        for (name, filter) in self.deny_filters() {
            for rule in &filter.filter {
                let listed = allowed.contains(rule.syscall.as_str());
                match (&rule.args, listed) {
                    (None, true) => {
                        return Err(SeccompError::AllowedAndDenied {
                            syscall: rule.syscall.clone(),
                        })
                    }
                    (Some(_), false) => {
                        return Err(SeccompError::CheckedButNotAllowed {
                            filter: name,
                            syscall: rule.syscall.clone(),
                        })
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

impl FilterSpec {
    fn names(&self) -> BTreeSet<&str> {
        self.filter.iter().map(|r| r.syscall.as_str()).collect()
    }

    fn validate(
        &self,
        name: &'static str,
        expected_match: Action,
        expected_mismatch: Action,
        (match_text, mismatch_text): (&'static str, &'static str),
    ) -> Result<(), SeccompError> {
        if self.match_action != expected_match || self.mismatch_action != expected_mismatch {
            return Err(SeccompError::UnexpectedActions {
                filter: name,
                expected_match: match_text,
                expected_mismatch: mismatch_text,
            });
        }
        // seccompiler merges rules per syscall: an unconditional rule next to a conditional
        // one would silently become conditional only, so both orders are refused.
        let mut seen: BTreeMap<&str, bool> = BTreeMap::new();
        for rule in &self.filter {
            if rule.comment.trim().is_empty() {
                return Err(SeccompError::MissingComment {
                    filter: name,
                    syscall: rule.syscall.clone(),
                });
            }
            let conditional = rule.args.is_some();
            if let Some(&before) = seen.get(rule.syscall.as_str()) {
                if !(before && conditional) {
                    return Err(SeccompError::DuplicateRule {
                        filter: name,
                        syscall: rule.syscall.clone(),
                    });
                }
            }
            seen.insert(&rule.syscall, conditional);
            for arg in rule.args.iter().flatten() {
                let mask = match arg.op {
                    CmpOp::MaskedEq(mask) => mask,
                    _ => 0,
                };
                let too_wide = arg.width == ArgWidth::Dword
                    && (arg.val > u64::from(u32::MAX) || mask > u64::from(u32::MAX));
                if arg.index > 5 || too_wide {
                    return Err(SeccompError::ArgumentOutOfRange {
                        filter: name,
                        syscall: rule.syscall.clone(),
                        index: arg.index,
                    });
                }
            }
        }
        Ok(())
    }

    /// The rules with argument conditions only.
    fn checks_only(&self) -> Self {
        let mut out = self.clone();
        out.filter.retain(|r| r.args.is_some());
        out
    }

    /// This allowlist plus every syscall the given deny filters refuse unconditionally, so that
    /// a refused syscall meets ALLOW here and EPERM there instead of two different errnos.
    fn with_denied_names<'a>(&self, deny: impl IntoIterator<Item = &'a FilterSpec>) -> Self {
        let mut out = self.clone();
        for rule in deny.into_iter().flat_map(|f| &f.filter) {
            if rule.args.is_none() {
                out.filter.push(RuleSpec {
                    syscall: rule.syscall.clone(),
                    comment: "refused with EPERM by a deny filter".to_owned(),
                    args: None,
                });
            }
        }
        out
    }
}

mod merge;

#[cfg(test)]
mod tests;
