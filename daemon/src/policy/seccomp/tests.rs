//! Unit tests evaluate the compiled BPF with a small cBPF interpreter that reproduces the
//! kernel's filter combination; live tests run `/usr/bin/python3` under the filters and
//! assert on what the probe prints (errno values, OK markers), never on exit codes alone.
//! None of them needs root.

use super::*;
use seccompiler::sock_filter;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Command, Output, Stdio};

const POLICY_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../profiles/seccomp/default.json"
);
const PYTHON: &str = "/usr/bin/python3";

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const X32_SYSCALL_BIT: i64 = 0x4000_0000;
const CLONE_NS_FLAGS: [i32; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

fn policy_json() -> Vec<u8> {
    std::fs::read(POLICY_PATH).expect("read shipped seccomp policy")
}

fn program(allow_inet: bool) -> SeccompProgram {
    compile(&policy_json(), allow_inet).expect("compile shipped seccomp policy")
}

/// The stacked seccompiler filters the merged program is built from.
fn stack(allow_inet: bool) -> Vec<BpfProgram> {
    let policy = parse(&policy_json()).expect("parse the shipped policy");
    compile_stack_of(&policy, allow_inet, TargetArch::x86_64, false).expect("compile the stack")
}

// ---- a cBPF interpreter for the instructions seccompiler emits -------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Allow,
    Errno(u32),
    KillProcess,
    Other(u32),
}

impl From<u32> for Verdict {
    fn from(ret: u32) -> Self {
        match ret & libc::SECCOMP_RET_ACTION_FULL {
            libc::SECCOMP_RET_ALLOW => Self::Allow,
            libc::SECCOMP_RET_ERRNO => Self::Errno(ret & libc::SECCOMP_RET_DATA),
            libc::SECCOMP_RET_KILL_PROCESS => Self::KillProcess,
            _ => Self::Other(ret),
        }
    }
}

/// `struct seccomp_data` as the kernel lays it out.
fn seccomp_data(arch: u32, nr: i64, args: [u64; 6]) -> [u8; 64] {
    let mut data = [0u8; 64];
    data[0..4].copy_from_slice(&(nr as i32).to_le_bytes());
    data[4..8].copy_from_slice(&arch.to_le_bytes());
    for (i, arg) in args.iter().enumerate() {
        data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
    }
    data
}

fn run_filter(filter: &[sock_filter], data: &[u8; 64]) -> u32 {
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let insn = &filter[pc];
        pc += 1;
        let k = insn.k;
        let jump = |cond: bool| usize::from(if cond { insn.jt } else { insn.jf });
        match insn.code {
            0x20 => {
                let at = k as usize;
                acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            }
            0x54 => acc &= k,
            0x05 => pc += k as usize,
            0x15 => pc += jump(acc == k),
            0x25 => pc += jump(acc > k),
            0x35 => pc += jump(acc >= k),
            0x06 => return k,
            code => panic!("unexpected BPF opcode {code:#x}"),
        }
    }
}

/// `seccomp_run_filters`: most recently installed first, strictly lower action wins.
fn kernel_result(filters: &[&BpfProgram], data: &[u8; 64]) -> Verdict {
    let action = |ret: u32| (ret & libc::SECCOMP_RET_ACTION_FULL) as i32;
    let mut ret = libc::SECCOMP_RET_ALLOW;
    for filter in filters.iter().rev() {
        let cur = run_filter(filter, data);
        if action(cur) < action(ret) {
            ret = cur;
        }
    }
    Verdict::from(ret)
}

fn verdict(program: &SeccompProgram, nr: i64, args: [u64; 6]) -> Verdict {
    let filters: Vec<&BpfProgram> = program.filters.iter().collect();
    kernel_result(&filters, &seccomp_data(AUDIT_ARCH_X86_64, nr, args))
}

fn arg0(value: u64) -> [u64; 6] {
    [value, 0, 0, 0, 0, 0]
}

fn ioctl_args(request: u64) -> [u64; 6] {
    [0, request, 0, 0, 0, 0]
}

// ---- compile and validation ------------------------------------------------------------

#[test]
fn shipped_policy_compiles_in_both_modes() {
    for allow_inet in [false, true] {
        let program = program(allow_inet);
        // The shipped policy merges into one filter (merge.rs).
        assert_eq!(program.filter_count(), 1);
        assert_eq!(stack(allow_inet).len(), 3);
        assert!(program.filters.iter().all(|f| f.len() < 4096));
        assert!(program.instruction_count() + 12 <= MAX_INSNS_PER_PATH);
    }
    assert_ne!(program(false), program(true));
}

#[test]
fn wire_form_round_trips() {
    let program = program(true);
    let wire = program.to_wire();
    assert_eq!(wire.len(), program.filters().len());
    assert_eq!(SeccompProgram::from_wire(&wire), program);
}

#[test]
fn load_reads_the_file_and_reports_the_path() {
    let program = load(Path::new(POLICY_PATH), false).unwrap();
    assert_eq!(program, self::program(false));
    let missing = Path::new("/nonexistent/vivarium-seccomp.json");
    match load(missing, false) {
        Err(SeccompError::Read { path, .. }) => assert_eq!(path, missing),
        other => panic!("expected a read error, got {other:?}"),
    }
}

/// Applies `edit` to the shipped policy and returns what `compile` says about it.
fn compile_edited(edit: impl FnOnce(&mut serde_json::Value)) -> SeccompError {
    let mut value: serde_json::Value = serde_json::from_slice(&policy_json()).unwrap();
    edit(&mut value);
    compile(&serde_json::to_vec(&value).unwrap(), false).unwrap_err()
}

fn push_rule(value: &mut serde_json::Value, filter: &str, rule: serde_json::Value) {
    value[filter]["filter"].as_array_mut().unwrap().push(rule);
}

#[test]
fn validation_rejects_broken_policies() {
    use serde_json::json;
    let err = compile_edited(|v| v["extra"] = v["deny"].clone());
    assert!(matches!(err, SeccompError::Parse { .. }), "{err:?}");
    let err = compile_edited(|v| {
        v.as_object_mut().unwrap().remove("deny_socket_inet");
    });
    assert!(matches!(err, SeccompError::Parse { .. }), "{err:?}");
    let err = compile_edited(|v| push_rule(v, "allowlist", json!({"syscall": "read"})));
    assert!(matches!(err, SeccompError::Parse { .. }), "{err:?}");
    let err = compile_edited(|v| v["allowlist"]["mismatch_action"] = json!("kill_process"));
    assert!(matches!(err, SeccompError::Parse { .. }), "{err:?}");

    let err = compile_edited(|v| v["allowlist"]["mismatch_action"] = json!({"errno": 1}));
    assert!(
        matches!(
            err,
            SeccompError::UnexpectedActions {
                filter: "allowlist",
                ..
            }
        ),
        "{err:?}"
    );
    let err = compile_edited(|v| v["deny"]["match_action"] = json!({"errno": 38}));
    assert!(
        matches!(err, SeccompError::UnexpectedActions { filter: "deny", .. }),
        "{err:?}"
    );
    let err = compile_edited(|v| {
        push_rule(
            v,
            "allowlist",
            json!({"syscall": "seccomp", "comment": " "}),
        )
    });
    assert!(
        matches!(err, SeccompError::MissingComment { .. }),
        "{err:?}"
    );
    let err = compile_edited(|v| {
        push_rule(
            v,
            "allowlist",
            json!({"syscall": "read", "comment": "again"}),
        )
    });
    assert!(matches!(err, SeccompError::DuplicateRule { .. }), "{err:?}");
    let err = compile_edited(|v| {
        push_rule(
            v,
            "deny",
            json!({"syscall": "ioctl", "comment": "all of it"}),
        )
    });
    assert!(matches!(err, SeccompError::DuplicateRule { .. }), "{err:?}");
    let err = compile_edited(|v| {
        push_rule(
            v,
            "allowlist",
            json!({"syscall": "clone3", "comment": "threads"}),
        )
    });
    assert!(
        matches!(
            err,
            SeccompError::NeverAllowed {
                syscall: "clone3",
                ..
            }
        ),
        "{err:?}"
    );
    let err = compile_edited(|v| {
        push_rule(
            v,
            "allowlist",
            json!({"syscall": "ptrace", "comment": "gdb"}),
        )
    });
    assert!(
        matches!(err, SeccompError::AllowedAndDenied { .. }),
        "{err:?}"
    );
    let cond = json!([{"index": 0, "type": "dword", "op": "eq", "val": 1}]);
    let err = compile_edited(|v| {
        push_rule(
            v,
            "allowlist",
            json!({"syscall": "seccomp", "comment": "c", "args": cond}),
        )
    });
    assert!(
        matches!(err, SeccompError::ConditionalAllow { .. }),
        "{err:?}"
    );
    let err = compile_edited(|v| {
        push_rule(
            v,
            "deny",
            json!({"syscall": "tee", "comment": "c", "args": cond}),
        )
    });
    assert!(
        matches!(err, SeccompError::CheckedButNotAllowed { .. }),
        "{err:?}"
    );
    let wide = json!([{"index": 1, "type": "dword", "op": "ne", "val": 1u64 << 32}]);
    let err = compile_edited(|v| {
        push_rule(
            v,
            "deny",
            json!({"syscall": "fcntl", "comment": "c", "args": wide}),
        )
    });
    assert!(
        matches!(err, SeccompError::ArgumentOutOfRange { .. }),
        "{err:?}"
    );
    let err = compile_edited(|v| {
        push_rule(
            v,
            "allowlist",
            json!({"syscall": "no_such_call", "comment": "c"}),
        )
    });
    assert!(matches!(err, SeccompError::Compile { .. }), "{err:?}");
}

#[test]
fn error_messages_are_lowercase_without_period() {
    let err = compile(b"{", false).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(char::is_lowercase) && !msg.ends_with('.'),
        "{msg}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

// ---- verdicts of the compiled program ---------------------------------------------------

#[test]
fn verdicts_follow_the_design() {
    use Verdict::*;
    let enosys = Errno(ENOSYS);
    let eperm = Errno(EPERM);
    let local = program(false);
    let inet = program(true);
    let tiocsti = libc::TIOCSTI;
    let tcgets = libc::TCGETS;
    let cases: &[(&str, i64, [u64; 6], Verdict, Verdict)] = &[
        ("read", libc::SYS_read, [0; 6], Allow, Allow),
        ("rseq", libc::SYS_rseq, [0; 6], Allow, Allow),
        ("unknown 1000", 1000, [0; 6], enosys, enosys),
        ("clone3", libc::SYS_clone3, [0; 6], enosys, enosys),
        (
            "x32 getpid",
            X32_SYSCALL_BIT | libc::SYS_getpid,
            [0; 6],
            enosys,
            enosys,
        ),
        (
            "x32 ptrace",
            X32_SYSCALL_BIT | libc::SYS_ptrace,
            [0; 6],
            enosys,
            enosys,
        ),
        ("ptrace", libc::SYS_ptrace, [0; 6], eperm, eperm),
        ("add_key", libc::SYS_add_key, [0; 6], eperm, eperm),
        ("socket unix", libc::SYS_socket, arg0(1), Allow, Allow),
        ("socket inet", libc::SYS_socket, arg0(2), eperm, Allow),
        ("socket inet6", libc::SYS_socket, arg0(10), eperm, Allow),
        (
            "socket inet hi",
            libc::SYS_socket,
            arg0(2 | 1 << 32),
            eperm,
            Allow,
        ),
        ("socket netlink", libc::SYS_socket, arg0(16), eperm, eperm),
        ("socket packet", libc::SYS_socket, arg0(17), eperm, eperm),
        ("socket vsock", libc::SYS_socket, arg0(40), eperm, eperm),
        (
            "socketpair unix",
            libc::SYS_socketpair,
            arg0(1),
            Allow,
            Allow,
        ),
        (
            "socketpair inet",
            libc::SYS_socketpair,
            arg0(2),
            eperm,
            eperm,
        ),
        (
            "ioctl TCGETS",
            libc::SYS_ioctl,
            ioctl_args(tcgets),
            Allow,
            Allow,
        ),
        (
            "ioctl TCGETS hi",
            libc::SYS_ioctl,
            ioctl_args(tcgets | 1 << 32),
            Allow,
            Allow,
        ),
        (
            "ioctl TIOCSTI",
            libc::SYS_ioctl,
            ioctl_args(tiocsti),
            eperm,
            eperm,
        ),
        (
            "ioctl TIOCSTI hi",
            libc::SYS_ioctl,
            ioctl_args(tiocsti | 1 << 32),
            eperm,
            eperm,
        ),
        ("ioctl 0", libc::SYS_ioctl, ioctl_args(0), eperm, eperm),
        (
            "fork via clone",
            libc::SYS_clone,
            arg0(libc::SIGCHLD as u64),
            Allow,
            Allow,
        ),
        (
            "thread via clone",
            libc::SYS_clone,
            arg0(0x3d0f00),
            Allow,
            Allow,
        ),
        (
            "personality query",
            libc::SYS_personality,
            arg0(0xffff_ffff),
            Allow,
            Allow,
        ),
        (
            "personality set",
            libc::SYS_personality,
            arg0(0x0040000),
            eperm,
            eperm,
        ),
    ];
    for (name, nr, args, want_local, want_inet) in cases {
        assert_eq!(verdict(&local, *nr, *args), *want_local, "{name} (local)");
        assert_eq!(verdict(&inet, *nr, *args), *want_inet, "{name} (inet)");
    }
    for flag in CLONE_NS_FLAGS {
        let flags = (flag | libc::SIGCHLD) as u64;
        assert_eq!(
            verdict(&local, libc::SYS_clone, arg0(flags)),
            eperm,
            "{flag:#x}"
        );
    }
}

/// The syscalls the issue names must be refused with EPERM, not merely be unknown.
#[test]
fn named_dangerous_syscalls_get_eperm() {
    #[rustfmt::skip]
        let named = [
            libc::SYS_ptrace, libc::SYS_process_vm_readv, libc::SYS_process_vm_writev,
            libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key, libc::SYS_bpf,
            libc::SYS_perf_event_open, libc::SYS_userfaultfd, libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter, libc::SYS_io_uring_register, libc::SYS_mount,
            libc::SYS_umount2, libc::SYS_pivot_root, libc::SYS_move_mount, libc::SYS_open_tree,
            libc::SYS_fsopen, libc::SYS_fsconfig, libc::SYS_fsmount, libc::SYS_fspick,
            libc::SYS_mount_setattr, libc::SYS_unshare, libc::SYS_setns, libc::SYS_kexec_load,
            libc::SYS_kexec_file_load, libc::SYS_init_module, libc::SYS_finit_module,
            libc::SYS_delete_module, libc::SYS_reboot, libc::SYS_swapon, libc::SYS_swapoff,
            libc::SYS_acct, libc::SYS_settimeofday, libc::SYS_clock_settime,
            libc::SYS_clock_adjtime, libc::SYS_adjtimex, libc::SYS_syslog, libc::SYS_chroot,
            libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_quotactl, libc::SYS_lookup_dcookie,
            libc::SYS_open_by_handle_at, libc::SYS_name_to_handle_at, libc::SYS_nfsservctl,
            libc::SYS_vhangup, libc::SYS_sethostname, libc::SYS_setdomainname,
            libc::SYS_uselib, libc::SYS_ustat, libc::SYS_sysfs, libc::SYS__sysctl,
            // create_module, get_kernel_syms, query_module (no libc constants)
            174, 177, 178, libc::SYS_kcmp, libc::SYS_pidfd_getfd, libc::SYS_mbind,
            libc::SYS_set_mempolicy, libc::SYS_move_pages, libc::SYS_migrate_pages,
            libc::SYS_fanotify_init, libc::SYS_modify_ldt,
        ];
    for allow_inet in [false, true] {
        let program = program(allow_inet);
        for nr in named {
            assert_eq!(
                verdict(&program, nr, [0; 6]),
                Verdict::Errno(EPERM),
                "nr {nr}"
            );
        }
    }
}

/// x86_64 numbers libc 0.2 does not name.
const SYS_CACHESTAT: i64 = 451;
const SYS_URETPROBE: i64 = 335;
const SYS_UPROBE: i64 = 336;

/// `fadvise64(fd, offset, len, advice)`: advice is argument 3.
fn fadvise_args(advice: u64) -> [u64; 6] {
    [3, 0, 4096, advice, 0, 0]
}

/// `preadv2`/`pwritev2(fd, iov, iovcnt, pos_l, pos_h, flags)`: flags is argument 5.
fn rwf_args(flags: u64) -> [u64; 6] {
    [3, 0, 1, 0, 0, flags]
}

/// The argument values the page-cache rules look at, for the tests that compare
/// programs over every syscall number.
fn page_cache_samples() -> Vec<[u64; 6]> {
    let dontneed = libc::POSIX_FADV_DONTNEED as u64;
    let nowait = libc::RWF_NOWAIT as u64;
    let dontcache = libc::RWF_DONTCACHE as u64;
    [
        dontneed,
        dontneed | 1 << 32,
        libc::POSIX_FADV_WILLNEED as u64,
    ]
    .map(fadvise_args)
    .into_iter()
    .chain([nowait, dontcache, nowait | 1 << 32, libc::RWF_HIPRI as u64].map(rwf_args))
    .collect()
}

/// The page-cache side channel (docs/SECURITY.md, "The page cache"): the advice that
/// evicts a host file's pages through a read-only fd and the read flags that tell (or let
/// a timed read tell, again and again) cached from uncached pages get EPERM; every other
/// value reaches the kernel. advice and flags are `int` in the kernel, so high bits do not
/// hide a refused value (dword comparison). mincore, cachestat and readahead are not
/// allowlisted; madvise is not argument-checked (the kernel itself pages out only files
/// the caller could write; see the policy's comment on it).
#[test]
fn page_cache_eviction_and_residency_arguments_are_refused() {
    use Verdict::*;
    let eperm = Errno(EPERM);
    let enosys = Errno(ENOSYS);
    let fadvise: [(&str, u64, Verdict); 8] = [
        ("NORMAL", libc::POSIX_FADV_NORMAL as u64, Allow),
        ("RANDOM", libc::POSIX_FADV_RANDOM as u64, Allow),
        ("SEQUENTIAL", libc::POSIX_FADV_SEQUENTIAL as u64, Allow),
        ("WILLNEED", libc::POSIX_FADV_WILLNEED as u64, Allow),
        ("DONTNEED", libc::POSIX_FADV_DONTNEED as u64, eperm),
        ("NOREUSE", libc::POSIX_FADV_NOREUSE as u64, Allow),
        (
            "DONTNEED hi",
            libc::POSIX_FADV_DONTNEED as u64 | 1 << 32,
            eperm,
        ),
        ("unknown 99", 99, Allow),
    ];
    let rwf = |f: i32| f as u64;
    let flags: [(&str, u64, Verdict); 12] = [
        ("0", 0, Allow),
        ("HIPRI", rwf(libc::RWF_HIPRI), Allow),
        ("DSYNC", rwf(libc::RWF_DSYNC), Allow),
        ("SYNC", rwf(libc::RWF_SYNC), Allow),
        ("NOWAIT", rwf(libc::RWF_NOWAIT), eperm),
        ("APPEND", rwf(libc::RWF_APPEND), Allow),
        ("NOAPPEND", rwf(libc::RWF_NOAPPEND), Allow),
        ("ATOMIC", rwf(libc::RWF_ATOMIC), Allow),
        ("DONTCACHE", rwf(libc::RWF_DONTCACHE), eperm),
        (
            "NOWAIT|DSYNC",
            rwf(libc::RWF_NOWAIT | libc::RWF_DSYNC),
            eperm,
        ),
        (
            "DONTCACHE|HIPRI",
            rwf(libc::RWF_DONTCACHE | libc::RWF_HIPRI),
            eperm,
        ),
        ("NOWAIT hi", rwf(libc::RWF_NOWAIT) | 1 << 32, eperm),
    ];
    for allow_inet in [false, true] {
        let program = program(allow_inet);
        for (name, advice, want) in fadvise {
            let got = verdict(&program, libc::SYS_fadvise64, fadvise_args(advice));
            assert_eq!(got, want, "fadvise64 {name} (allow_inet {allow_inet})");
        }
        for nr in [libc::SYS_preadv2, libc::SYS_pwritev2] {
            for (name, value, want) in flags {
                let got = verdict(&program, nr, rwf_args(value));
                assert_eq!(got, want, "nr {nr} flags {name} (allow_inet {allow_inet})");
            }
        }
        for nr in [libc::SYS_mincore, SYS_CACHESTAT, libc::SYS_readahead] {
            assert_eq!(verdict(&program, nr, [0; 6]), enosys, "nr {nr}");
        }
        for advice in [
            libc::MADV_DONTNEED,
            libc::MADV_WILLNEED,
            libc::MADV_COLD,
            libc::MADV_PAGEOUT,
        ] {
            let args = [0, 4096, advice as u64, 0, 0, 0];
            assert_eq!(verdict(&program, libc::SYS_madvise, args), Allow);
        }
    }
}

/// What the policy says about uprobe and uretprobe: unknown, ENOSYS. The kernel never
/// asks it (`seccomp_uprobe_exception`): see `uprobe_syscalls_skip_the_filter`.
#[test]
fn uprobe_syscalls_are_unknown_to_the_policy() {
    for allow_inet in [false, true] {
        let program = program(allow_inet);
        for nr in [SYS_URETPROBE, SYS_UPROBE] {
            assert_eq!(verdict(&program, nr, [0; 6]), Verdict::Errno(ENOSYS));
        }
    }
}

/// No syscall meets two different ERRNO verdicts, so the combined result never depends on
/// the kernel's tie-break between equal actions, and any installation order gives the same
/// verdicts. Checked for every syscall number (native and x32) and the argument values
/// the rules look at.
#[test]
fn verdicts_do_not_depend_on_filter_order() {
    let arg_samples: Vec<[u64; 6]> = [0, 1, 2, 10, 16, 0xffff_ffff, 0x0040000]
        .into_iter()
        .chain(CLONE_NS_FLAGS.iter().map(|f| *f as u64))
        .map(arg0)
        .chain([libc::TCGETS, libc::TIOCSTI, libc::FIONREAD].map(ioctl_args))
        .chain(page_cache_samples())
        .collect();
    for allow_inet in [false, true] {
        let stack = stack(allow_inet);
        let [a, b, c] = [&stack[0], &stack[1], &stack[2]];
        let orders = [
            [a, b, c],
            [a, c, b],
            [b, a, c],
            [b, c, a],
            [c, a, b],
            [c, b, a],
        ];
        for nr in (0..1024).chain((0..1024).map(|n| n | X32_SYSCALL_BIT)) {
            for args in &arg_samples {
                let data = seccomp_data(AUDIT_ARCH_X86_64, nr, *args);
                let errnos: BTreeSet<u32> = stack
                    .iter()
                    .filter_map(|f| match Verdict::from(run_filter(f, &data)) {
                        Verdict::Errno(errno) => Some(errno),
                        _ => None,
                    })
                    .collect();
                assert!(errnos.len() <= 1, "nr {nr:#x} {args:?}: {errnos:?}");
                let first = kernel_result(&orders[0], &data);
                for order in &orders[1..] {
                    assert_eq!(kernel_result(order, &data), first, "nr {nr:#x} {args:?}");
                }
            }
        }
    }
}

/// A job forked from a zygote runs under the zygote's filters plus its own two small
/// ones: for every syscall number (and the argument samples that matter), the verdict is
/// the policy's, and the zygote itself gets every extra it needs.
#[test]
fn a_zygote_job_gets_exactly_the_policy_verdicts() {
    let arg_samples: Vec<[u64; 6]> = [0, 1, 2, 10, 16, 0xffff_ffff, 0x0040000]
        .into_iter()
        .chain(CLONE_NS_FLAGS.iter().map(|f| *f as u64))
        .chain([libc::PR_SET_SECCOMP as u64, libc::PR_CAPBSET_DROP as u64])
        .map(arg0)
        .chain(
            [
                libc::TCGETS,
                libc::TIOCSTI,
                libc::FIONREAD,
                libc::SIOCGIFFLAGS,
                libc::SIOCSIFFLAGS,
            ]
            .map(ioctl_args),
        )
        .chain(page_cache_samples())
        .collect();
    for allow_inet in [false, true] {
        let policy = program(allow_inet);
        let split = compile_zygote(&policy_json(), allow_inet).expect("zygote split");
        assert_eq!(split.job.filter_count(), 2);
        // (Two small filters: the extras' verdicts, and the zygote's two ioctls.)
        assert!(
            split.job.instruction_count() < 96,
            "{}",
            split.job.instruction_count()
        );
        let mut job: Vec<&BpfProgram> = split.zygote.filters.iter().collect();
        job.extend(&split.job.filters);
        let zygote: Vec<&BpfProgram> = split.zygote.filters.iter().collect();
        let expected: Vec<&BpfProgram> = policy.filters.iter().collect();
        for nr in (0..1024).chain((0..1024).map(|n| n | X32_SYSCALL_BIT)) {
            for args in &arg_samples {
                let data = seccomp_data(AUDIT_ARCH_X86_64, nr, *args);
                assert_eq!(
                    kernel_result(&job, &data),
                    kernel_result(&expected, &data),
                    "nr {nr:#x} {args:?}"
                );
            }
        }
        let numbers = [
            ("unshare", libc::SYS_unshare),
            ("setns", libc::SYS_setns),
            ("mount", libc::SYS_mount),
            ("umount2", libc::SYS_umount2),
            ("sethostname", libc::SYS_sethostname),
            ("capset", libc::SYS_capset),
            ("landlock_create_ruleset", libc::SYS_landlock_create_ruleset),
            ("landlock_add_rule", libc::SYS_landlock_add_rule),
            ("landlock_restrict_self", libc::SYS_landlock_restrict_self),
            ("seccomp", libc::SYS_seccomp),
        ];
        assert_eq!(numbers.map(|(n, _)| n).as_slice(), ZYGOTE_EXTRAS);
        for (name, nr) in numbers {
            let data = seccomp_data(AUDIT_ARCH_X86_64, nr, [0; 6]);
            assert_eq!(kernel_result(&zygote, &data), Verdict::Allow, "{name}");
            assert_ne!(kernel_result(&job, &data), Verdict::Allow, "{name}");
        }
        // The ioctls a forked job's init brings `lo` up with: the zygote's, not the job's.
        for (request, _) in ZYGOTE_IOCTLS {
            let data = seccomp_data(AUDIT_ARCH_X86_64, libc::SYS_ioctl, ioctl_args(*request));
            assert_eq!(
                kernel_result(&zygote, &data),
                Verdict::Allow,
                "{request:#x}"
            );
            let policy_verdict = kernel_result(&expected, &data);
            assert_eq!(policy_verdict, Verdict::Errno(libc::EPERM as u32));
            assert_eq!(kernel_result(&job, &data), policy_verdict, "{request:#x}");
        }
        let clone_newns = arg0(libc::CLONE_NEWNS as u64);
        let data = seccomp_data(AUDIT_ARCH_X86_64, libc::SYS_clone, clone_newns);
        assert_eq!(
            kernel_result(&zygote, &data),
            Verdict::Errno(libc::EPERM as u32)
        );
    }
}

/// The merged program answers exactly as the stack it was built from, for every syscall
/// number around the ones the policy names (native and x32), the edges of the number
/// space, and the argument values the rules look at.
#[test]
fn merged_program_gives_the_stacks_verdicts() {
    let arg_samples: Vec<[u64; 6]> = [0, 1, 2, 10, 16, 0xffff_ffff, 0x0040000, 1 << 32]
        .into_iter()
        .chain(CLONE_NS_FLAGS.iter().map(|f| *f as u64))
        .chain(
            CLONE_NS_FLAGS
                .iter()
                .map(|f| *f as u64 | libc::SIGCHLD as u64),
        )
        .map(arg0)
        .chain(
            [
                libc::TCGETS,
                libc::TIOCSTI,
                libc::TIOCSTI | (1 << 32),
                libc::FIONREAD,
                libc::TIOCGWINSZ,
                libc::TIOCLINUX,
            ]
            .map(ioctl_args),
        )
        .chain(
            [
                libc::AF_UNIX,
                libc::AF_INET,
                libc::AF_INET6,
                libc::AF_NETLINK,
            ]
            .map(|f| arg0(f as u64)),
        )
        .chain(page_cache_samples())
        .collect();
    let numbers: Vec<i64> = (0..2048)
        .chain((0..2048).map(|n| n | X32_SYSCALL_BIT))
        .chain([
            0x3fff_ffff,
            0x7fff_ffff,
            0x8000_0000,
            0xc000_003e,
            0xffff_fffe,
            0xffff_ffff,
            -1,
        ])
        .collect();
    for allow_inet in [false, true] {
        let stack = stack(allow_inet);
        let stack: Vec<&BpfProgram> = stack.iter().collect();
        let program = program(allow_inet);
        let merged = [&program.filters[0]];
        for arch in [AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, 0] {
            for &nr in &numbers {
                for args in &arg_samples {
                    let data = seccomp_data(arch, nr, *args);
                    assert_eq!(
                        kernel_result(&merged, &data),
                        kernel_result(&stack, &data),
                        "arch {arch:#x} nr {nr:#x} {args:?} (allow_inet {allow_inet})"
                    );
                }
            }
        }
        // Most numbers are decided in a handful of instructions, not a walk down a chain.
        assert!(program.instruction_count() < stack.iter().map(|f| f.len()).sum::<usize>());
    }
}

#[test]
fn foreign_architecture_is_killed_in_every_filter() {
    let program = program(false);
    for nr in [libc::SYS_read, 20, 1000] {
        let data = seccomp_data(AUDIT_ARCH_I386, nr, [0; 6]);
        for filter in &program.filters {
            assert_eq!(
                Verdict::from(run_filter(filter, &data)),
                Verdict::KillProcess
            );
        }
    }
}

// ---- live: python3 under the filters ----------------------------------------------------

/// Runs `python3 -I -S -c code` with `program` installed right before exec (or without a
/// filter, as the control run).
#[allow(
    unsafe_code,
    reason = "CommandExt::pre_exec is unsafe; see the SAFETY comment"
)]
fn run_python(program: Option<&SeccompProgram>, code: &str, stdin: &[u8]) -> Output {
    let mut cmd = Command::new(PYTHON);
    cmd.args(["-I", "-S", "-c", code])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(program) = program {
        let program = program.clone();
        // SAFETY: the closure runs in the forked child before exec and only issues
        // prctl(2) and seccomp(2) on data compiled before the fork; neither it nor the
        // error path allocates or takes locks, so it is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_no_new_privs()?;
                apply(&program).map_err(|e| {
                    std::io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(libc::EINVAL))
                })
            });
        }
    }
    let mut child = cmd.spawn().expect("spawn python3");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout_of(out),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Set in CI where the control runs below are known to be meaningful: a skip then fails.
const REQUIRE_CONTROL_ENV: &str = "VIVARIUM_TEST_REQUIRE_SECCOMP_CONTROL";

fn skip_or_fail(test: &str, reason: &str) {
    assert!(
        std::env::var_os(REQUIRE_CONTROL_ENV).is_none(),
        "{test}: {reason}, and {REQUIRE_CONTROL_ENV} is set"
    );
    // Straight to fd 2: libtest captures eprintln! output of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "{test}: SKIPPING control assertions: {reason}"
    );
}

/// Control runs (python3 without our filter) show the kernel's own answer, which proves
/// that a filtered EPERM/ENOSYS came from this policy. They say nothing when the test
/// process is itself confined (a container runtime's seccomp filter) or traced.
fn control_runs_apply(test: &str) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("0")
            .to_owned()
    };
    let (mode, tracer) = (field("Seccomp:"), field("TracerPid:"));
    if mode != "0" {
        skip_or_fail(
            test,
            &format!("the test process runs under seccomp mode {mode}"),
        );
        return false;
    }
    if tracer != "0" {
        skip_or_fail(test, &format!("the test process is traced by pid {tracer}"));
        return false;
    }
    true
}

/// Probe prelude: `sc(name, nr, *args)` prints `name ret errno`.
const PRELUDE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(name, nr, *args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *args)
    e = ctypes.get_errno()
    if r == 0 and name.startswith("clone"):
        os._exit(0)
    print(name, r, e if r == -1 else 0, flush=True)
"#;

/// Parses `name ret errno` lines.
fn results(out: &Output) -> BTreeMap<String, (i64, i32)> {
    stdout_of(out)
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let name = parts.next()?.to_owned();
            let ret = parts.next()?.parse().ok()?;
            let errno = parts.next()?.parse().ok()?;
            Some((name, (ret, errno)))
        })
        .collect()
}

fn probe(program: Option<&SeccompProgram>, body: &str) -> BTreeMap<String, (i64, i32)> {
    let out = run_python(program, &format!("{PRELUDE}\n{body}"), b"");
    assert_success(&out);
    results(&out)
}

/// Probe lines for the refused syscalls, with arguments that are harmless if a filter
/// were missing (as root too): invalid commands, zero lengths, nonexistent paths.
fn denied_probe() -> String {
    format!(
        r#"
sc("ptrace", {ptrace}, 0, 0, 0, 0)
sc("process_vm_readv", {pvr}, os.getpid(), 0, 0, 0, 0, 0)
sc("kcmp", {kcmp}, os.getpid(), os.getpid(), 0, 0, 0)
sc("pidfd_getfd", {pidfd_getfd}, -1, 0, 0)
sc("add_key", {add_key}, ctypes.c_char_p(b"vivarium-bogus"), 0, 0, 0, 0)
sc("keyctl", {keyctl}, 9999, 0, 0, 0, 0)
sc("request_key", {request_key}, ctypes.c_char_p(b"vivarium-bogus"), 0, 0, 0)
sc("bpf", {bpf}, 9999, 0, 0)
sc("perf_event_open", {perf}, 0, 0, -1, -1, 0)
sc("userfaultfd", {uffd}, 0xffffffff)
sc("io_uring_setup", {uring}, 1, 0)
sc("unshare_newuser", {unshare}, {newuser})
sc("unshare_none", {unshare}, 0)
sc("setns", {setns}, -1, 0)
sc("mount", {mount}, 0, 0, 0, 0, 0)
sc("umount2", {umount2}, ctypes.c_char_p(b"/nonexistent-vivarium"), 0)
sc("pivot_root", {pivot_root}, ctypes.c_char_p(b"/nonexistent-vivarium"), ctypes.c_char_p(b"/nonexistent-vivarium"))
sc("chroot", {chroot}, ctypes.c_char_p(b"/nonexistent-vivarium"))
sc("open_by_handle_at", {obha}, -1, 0, 0)
sc("syslog", {syslog}, 10, 0, 0)
sc("settimeofday", {settimeofday}, 0, 0)
sc("personality_set", {personality}, 0x0040000)
sc("personality_query", {personality}, 0xffffffff)
sc("mbind", {mbind}, 0, 0, 0, 0, 0, 0)
sc("fanotify_init", {fanotify_init}, 0xffffffff, 0)
sc("modify_ldt", {modify_ldt}, 0, 0, 0)
"#,
        ptrace = libc::SYS_ptrace,
        pvr = libc::SYS_process_vm_readv,
        kcmp = libc::SYS_kcmp,
        pidfd_getfd = libc::SYS_pidfd_getfd,
        add_key = libc::SYS_add_key,
        keyctl = libc::SYS_keyctl,
        request_key = libc::SYS_request_key,
        bpf = libc::SYS_bpf,
        perf = libc::SYS_perf_event_open,
        uffd = libc::SYS_userfaultfd,
        uring = libc::SYS_io_uring_setup,
        unshare = libc::SYS_unshare,
        newuser = libc::CLONE_NEWUSER,
        setns = libc::SYS_setns,
        mount = libc::SYS_mount,
        umount2 = libc::SYS_umount2,
        pivot_root = libc::SYS_pivot_root,
        chroot = libc::SYS_chroot,
        obha = libc::SYS_open_by_handle_at,
        syslog = libc::SYS_syslog,
        settimeofday = libc::SYS_settimeofday,
        personality = libc::SYS_personality,
        mbind = libc::SYS_mbind,
        fanotify_init = libc::SYS_fanotify_init,
        modify_ldt = libc::SYS_modify_ldt,
    )
}

#[test]
fn refused_syscalls_return_eperm() {
    let program = program(false);
    let got = probe(Some(&program), &denied_probe());
    #[rustfmt::skip]
        let refused = [
            "ptrace", "process_vm_readv", "kcmp", "pidfd_getfd", "add_key", "keyctl",
            "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
            "unshare_newuser", "unshare_none", "setns", "mount", "umount2", "pivot_root",
            "chroot", "open_by_handle_at", "syslog", "settimeofday", "personality_set",
            "mbind", "fanotify_init", "modify_ldt",
        ];
    for name in refused {
        assert_eq!(got.get(name), Some(&(-1, libc::EPERM)), "{name}: {got:?}");
    }
    // The persona query passes; the kernel answers with the current persona.
    assert_eq!(got.get("personality_query"), Some(&(0, 0)), "{got:?}");

    // Control run without the filter: the same calls get the kernel's own answers, so
    // the EPERMs above come from the filter (uid-independent cases only).
    if !control_runs_apply("refused_syscalls_return_eperm") {
        return;
    }
    let control = probe(None, &denied_probe());
    assert_eq!(control["ptrace"], (0, 0), "{control:?}");
    assert_eq!(control["process_vm_readv"], (0, 0), "{control:?}");
    assert_eq!(control["unshare_none"], (0, 0), "{control:?}");
    assert_eq!(control["personality_set"], (0, 0), "{control:?}");
    assert_eq!(control["chroot"], (-1, libc::ENOENT), "{control:?}");
    assert_eq!(control["keyctl"], (-1, libc::EOPNOTSUPP), "{control:?}");
}

#[test]
fn unknown_syscalls_return_enosys() {
    let body = format!(
        r#"
sc("nr1000", 1000)
sc("clone3", {clone3}, 0, 0)
sc("x32_getpid", {x32_getpid})
sc("landlock_create_ruleset", {landlock}, 0, 0, 1)
sc("seccomp", {seccomp}, 2, 0, 0)
"#,
        clone3 = libc::SYS_clone3,
        x32_getpid = X32_SYSCALL_BIT | libc::SYS_getpid,
        landlock = libc::SYS_landlock_create_ruleset,
        seccomp = libc::SYS_seccomp,
    );
    let got = probe(Some(&program(false)), &body);
    for name in [
        "nr1000",
        "clone3",
        "x32_getpid",
        "landlock_create_ruleset",
        "seccomp",
    ] {
        assert_eq!(got.get(name), Some(&(-1, libc::ENOSYS)), "{name}: {got:?}");
    }
    // Control: clone3 and landlock exist on this kernel, so ENOSYS above is the filter's.
    // (x32 is usually compiled out, so its control is ENOSYS too; the BPF-level test
    // `verdicts_follow_the_design` covers it independently of kernel config.)
    if !control_runs_apply("unknown_syscalls_return_enosys") {
        return;
    }
    let control = probe(None, &body);
    assert_eq!(control["clone3"], (-1, libc::EINVAL), "{control:?}");
    assert_ne!(
        control["landlock_create_ruleset"].1,
        libc::ENOSYS,
        "{control:?}"
    );
}

/// The page-cache rules on a real host file, read-only (the interpreter itself, whose
/// first page is mapped by this very process, so not even the control run evicts
/// anything): the refused values get EPERM, the others the kernel's own answer, and
/// CPython's wrappers still work.
#[test]
fn page_cache_calls_are_refused_ordinary_ones_work() {
    let body = format!(
        r#"
import tempfile
fd = os.open("{python}", os.O_RDONLY)
buf = ctypes.create_string_buffer(4096)
iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 4096)
for name, advice in [("NORMAL", 0), ("RANDOM", 1), ("SEQUENTIAL", 2), ("WILLNEED", 3),
                     ("DONTNEED", 4), ("NOREUSE", 5)]:
    sc("fadvise_" + name, {fadvise}, fd, 0, 4096, advice)
flags = [("0", 0), ("HIPRI", 1), ("NOWAIT", 8), ("DONTCACHE", 0x80), ("NOWAIT_hi", 8 | 1 << 32)]
for name, value in flags:
    sc("preadv2_" + name, {preadv2}, fd, iov, 1, 0, 0, value)
with tempfile.TemporaryFile() as f:
    for name, value in flags + [("DSYNC", 2)]:
        sc("pwritev2_" + name, {pwritev2}, f.fileno(), iov, 1, 0, 0, value)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
os.posix_fadvise(fd, 0, 4096, os.POSIX_FADV_WILLNEED)
assert os.preadv(fd, [bytearray(16)], 0, os.RWF_HIPRI) == 16
with open("{python}", "rb") as f:
    assert f.read(4) == b"\x7fELF"
print("wrappers", 0, 0)
"#,
        python = PYTHON,
        fadvise = libc::SYS_fadvise64,
        preadv2 = libc::SYS_preadv2,
        pwritev2 = libc::SYS_pwritev2,
    );
    let got = probe(Some(&program(false)), &body);
    let refused = [
        "fadvise_DONTNEED",
        "preadv2_NOWAIT",
        "preadv2_DONTCACHE",
        "preadv2_NOWAIT_hi",
        "pwritev2_NOWAIT",
        "pwritev2_DONTCACHE",
        "pwritev2_NOWAIT_hi",
    ];
    for name in refused {
        assert_eq!(got.get(name), Some(&(-1, libc::EPERM)), "{name}: {got:?}");
    }
    for name in ["NORMAL", "RANDOM", "SEQUENTIAL", "WILLNEED", "NOREUSE"] {
        let name = format!("fadvise_{name}");
        assert_eq!(got.get(&name), Some(&(0, 0)), "{name}: {got:?}");
    }
    for name in [
        "preadv2_0",
        "preadv2_HIPRI",
        "pwritev2_0",
        "pwritev2_HIPRI",
        "pwritev2_DSYNC",
    ] {
        assert_eq!(got.get(name), Some(&(4096, 0)), "{name}: {got:?}");
    }
    assert_eq!(got.get("wrappers"), Some(&(0, 0)), "{got:?}");
    // Control: the kernel itself accepts every refused value here (DONTNEED returns 0,
    // NOWAIT reads the cached page or says EAGAIN, DONTCACHE reads it or is unsupported),
    // so each EPERM above is the filter's.
    if !control_runs_apply("page_cache_calls_are_refused_ordinary_ones_work") {
        return;
    }
    let control = probe(None, &body);
    assert_eq!(control["fadvise_DONTNEED"], (0, 0), "{control:?}");
    for name in refused {
        assert_ne!(control[name], (-1, libc::EPERM), "{name}: {control:?}");
    }
}

/// The kernel runs uprobe and uretprobe past every seccomp filter
/// (`seccomp_uprobe_exception` in kernel/seccomp.c): under the filter they answer exactly
/// as without it, although the policy does not list them (ENOSYS). Outside a uprobe
/// trampoline the kernel refuses both itself: uprobe with ENXIO, uretprobe by SIGILL.
#[test]
fn uprobe_syscalls_skip_the_filter() {
    let body = format!(
        r#"
import resource
sc("uprobe", {uprobe})
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long({uretprobe}))
    os._exit(100 + ctypes.get_errno() if r == -1 else 99)
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    print("uretprobe_signal", os.WTERMSIG(status), 0)
else:
    print("uretprobe_exit", os.WEXITSTATUS(status), 0)
"#,
        uprobe = SYS_UPROBE,
        uretprobe = SYS_URETPROBE,
    );
    let control = probe(None, &body);
    let got = probe(Some(&program(false)), &body);
    let enosys_exit = (100 + i64::from(libc::ENOSYS), 0);
    if control.get("uprobe") == Some(&(-1, libc::ENOSYS)) {
        let _ = writeln!(
            std::io::stderr(),
            "uprobe_syscalls_skip_the_filter: SKIPPING uprobe: this kernel has no such syscall"
        );
    } else {
        assert_eq!(control["uprobe"], (-1, libc::ENXIO), "{control:?}");
        assert_eq!(got.get("uprobe"), Some(&(-1, libc::ENXIO)), "{got:?}");
    }
    if control.get("uretprobe_exit") == Some(&enosys_exit) {
        let _ = writeln!(
            std::io::stderr(),
            "uprobe_syscalls_skip_the_filter: SKIPPING uretprobe: this kernel has no such syscall"
        );
    } else {
        let sigill = (i64::from(libc::SIGILL), 0);
        assert_eq!(
            control.get("uretprobe_signal"),
            Some(&sigill),
            "{control:?}"
        );
        assert_eq!(got.get("uretprobe_signal"), Some(&sigill), "{got:?}");
    }
}

#[test]
fn clone_with_namespace_flags_is_refused_plain_clone_is_not() {
    let mut body = String::new();
    for flag in CLONE_NS_FLAGS {
        body.push_str(&format!(
            "sc('clone_{flag:#x}', {nr}, {flags}, 0, 0, 0, 0)\n",
            nr = libc::SYS_clone,
            flags = flag | libc::SIGCHLD,
        ));
    }
    body.push_str(&format!(
        "sc('clone_plain', {nr}, {sigchld}, 0, 0, 0, 0)\nos.wait()\n",
        nr = libc::SYS_clone,
        sigchld = libc::SIGCHLD,
    ));
    let got = probe(Some(&program(false)), &body);
    for flag in CLONE_NS_FLAGS {
        let name = format!("clone_{flag:#x}");
        assert_eq!(got.get(&name), Some(&(-1, libc::EPERM)), "{name}: {got:?}");
    }
    let (pid, errno) = got["clone_plain"];
    assert!(pid > 0 && errno == 0, "{got:?}");
}

const SOCKET_PROBE: &str = r#"
import socket
def try_socket(name, family, kind=socket.SOCK_STREAM):
    try:
        socket.socket(family, kind).close()
        print(name, 0, 0)
    except OSError as e:
        print(name, -1, e.errno)
def try_pair(name, family):
    try:
        a, b = socket.socketpair(family)
        a.sendall(b"x"); assert b.recv(1) == b"x"
        print(name, 0, 0)
    except OSError as e:
        print(name, -1, e.errno)
try_socket("unix", socket.AF_UNIX)
try_socket("inet", socket.AF_INET)
try_socket("inet6", socket.AF_INET6)
try_socket("netlink", socket.AF_NETLINK, socket.SOCK_RAW)
try_socket("packet", socket.AF_PACKET, socket.SOCK_RAW)
try_socket("vsock", socket.AF_VSOCK)
try_pair("pair_unix", socket.AF_UNIX)
try_pair("pair_inet", socket.AF_INET)
"#;

#[test]
fn socket_families_without_network() {
    let got = probe(Some(&program(false)), SOCKET_PROBE);
    assert_eq!(got["unix"], (0, 0), "{got:?}");
    assert_eq!(got["pair_unix"], (0, 0), "{got:?}");
    for name in ["inet", "inet6", "netlink", "packet", "vsock", "pair_inet"] {
        assert_eq!(got.get(name), Some(&(-1, libc::EPERM)), "{name}: {got:?}");
    }
}

#[test]
fn socket_families_with_network() {
    let got = probe(Some(&program(true)), SOCKET_PROBE);
    for name in ["unix", "inet", "inet6", "pair_unix"] {
        assert_eq!(got.get(name), Some(&(0, 0)), "{name}: {got:?}");
    }
    for name in ["netlink", "packet", "vsock", "pair_inet"] {
        assert_eq!(got.get(name), Some(&(-1, libc::EPERM)), "{name}: {got:?}");
    }
    // Loopback TCP and name resolution work with AF_NETLINK refused: glibc's
    // getaddrinfo probes NETLINK_ROUTE to sort results and tolerates the refusal.
    let body = r#"
import socket, threading
srv = socket.create_server(("127.0.0.1", 0))
port = srv.getsockname()[1]
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(4)); c.close()
t = threading.Thread(target=serve); t.start()
with socket.create_connection(("127.0.0.1", port)) as c:
    c.sendall(b"ping"); assert c.recv(4) == b"ping"
t.join()
print("tcp_loopback", 0, 0)
infos = socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)
assert infos, infos
print("getaddrinfo", len(infos), 0)
"#;
    let got = probe(Some(&program(true)), body);
    assert_eq!(got["tcp_loopback"], (0, 0), "{got:?}");
    assert!(got["getaddrinfo"].0 >= 1, "{got:?}");
}

#[test]
fn ioctl_requests_are_restricted() {
    let body = format!(
        r#"
import fcntl, array, tempfile
r, w = os.pipe()
os.write(w, b"abc")
sc("TIOCSTI", {ioctl}, r, {tiocsti}, ctypes.c_char_p(b"x"))
sc("TIOCSTI_hi", {ioctl}, r, {tiocsti} | (1 << 32), ctypes.c_char_p(b"x"))
sc("TCGETS", {ioctl}, r, {tcgets}, ctypes.create_string_buffer(64))
sc("TCGETS_hi", {ioctl}, r, {tcgets} | (1 << 32), ctypes.create_string_buffer(64))
n = ctypes.c_int(-1)
sc("FIONREAD", {ioctl}, r, {fionread}, ctypes.byref(n))
print("FIONREAD_value", n.value, 0)
print("isatty", int(os.isatty(r)), 0)
os.set_inheritable(r, True); os.set_inheritable(r, False)
print("set_inheritable", 0, 0)
with tempfile.TemporaryFile() as f:
    sc("FS_IOC_GETFLAGS", {ioctl}, f.fileno(), 0x80086601, ctypes.create_string_buffer(8))
"#,
        ioctl = libc::SYS_ioctl,
        tiocsti = libc::TIOCSTI,
        tcgets = libc::TCGETS,
        fionread = libc::FIONREAD,
    );
    let got = probe(Some(&program(false)), &body);
    assert_eq!(got["TIOCSTI"], (-1, libc::EPERM), "{got:?}");
    assert_eq!(got["TIOCSTI_hi"], (-1, libc::EPERM), "{got:?}");
    assert_eq!(got["FS_IOC_GETFLAGS"], (-1, libc::EPERM), "{got:?}");
    // Allowed requests reach the kernel, which answers for a pipe.
    assert_eq!(got["TCGETS"], (-1, libc::ENOTTY), "{got:?}");
    assert_eq!(got["TCGETS_hi"], (-1, libc::ENOTTY), "{got:?}");
    assert_eq!(got["FIONREAD"], (0, 0), "{got:?}");
    assert_eq!(got["FIONREAD_value"], (3, 0), "{got:?}");
    assert_eq!(got["isatty"], (0, 0), "{got:?}");
    assert_eq!(got["set_inheritable"], (0, 0), "{got:?}");
    // Control: without the filter TIOCSTI on a pipe is ENOTTY, not EPERM.
    if control_runs_apply("ioctl_requests_are_restricted") {
        let control = probe(None, &body);
        assert_eq!(control["TIOCSTI"], (-1, libc::ENOTTY), "{control:?}");
    }
}

#[test]
fn i386_syscall_via_int80_kills_the_process() {
    // mov eax, 20 (getpid in the i386 table); int 0x80; ret
    let code = r#"
import ctypes, mmap, os, resource
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
m = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))
fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("before", flush=True)
print("int80", fn(), os.getpid(), flush=True)
"#;
    // Control: the kernel runs the i386 getpid and returns our pid. Without IA32
    // emulation (ia32_emulation=0) int 0x80 faults before seccomp ever sees it.
    let control = run_python(None, code, b"");
    if let Some(signal) = control.status.signal() {
        skip_or_fail(
            "i386_syscall_via_int80_kills_the_process",
            &format!("int 0x80 dies with signal {signal} without a filter: no IA32 emulation"),
        );
        return;
    }
    assert_success(&control);
    let line = stdout_of(&control)
        .lines()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert!(
        fields.len() == 3 && fields[1] == fields[2],
        "control: {line}"
    );

    let out = run_python(Some(&program(false)), code, b"");
    assert_eq!(out.status.signal(), Some(libc::SIGSYS), "{out:?}");
    assert_eq!(stdout_of(&out), "before\n");
}

/// CPython workloads the sandbox exists for. Pool workers map builtins so the spawn and
/// forkserver start methods work with `-c` (they cannot import functions from `-c` code).
const WORKLOADS: &str = r#"
import os, sys, threading, multiprocessing as mp, subprocess, tempfile, sqlite3, asyncio
import json, re, math, decimal, time, signal, mmap, socket, fcntl, shutil, ctypes, select
def ok(name): print("OK", name, flush=True)

out = []
ts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
assert sorted(out) == list(range(8)); ok("threads")
import concurrent.futures as cf
with cf.ThreadPoolExecutor(4) as ex: assert list(ex.map(abs, [-1, -2])) == [1, 2]
ok("thread-pool")

for method in ("fork", None, "spawn", "forkserver"):
    ctx = mp.get_context(method)
    with ctx.Pool(2) as p: assert p.map(abs, [-1, -2, -3]) == [1, 2, 3]
    ok("mp-" + (method or "default"))
ctx = mp.get_context("fork")
q = ctx.Queue(); pr = ctx.Process(target=q.put, args=(42,)); pr.start()
assert q.get() == 42; pr.join(); assert pr.exitcode == 0; ok("mp-process-queue")
lock = ctx.Lock(); sem = ctx.Semaphore(2); ev = ctx.Event(); lock.acquire(); lock.release()
v = ctx.Value("i", 0); arr = ctx.Array("d", 4); ok("mp-sync-primitives")
with cf.ProcessPoolExecutor(2) as ex: assert list(ex.map(abs, [-4])) == [4]
ok("process-pool")

pid = os.fork()
if pid == 0: os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7; ok("os-fork")
r = subprocess.run([sys.executable, "-I", "-S", "-c", "print(6*7)"], capture_output=True, text=True, check=True)
assert r.stdout == "42\n"; ok("subprocess-python")
r = subprocess.run([sys.executable, "-I", "-S", "-c", "import sys; print(sys.stdin.read()[::-1])"],
                   input="abc", capture_output=True, text=True, check=True)
assert r.stdout == "cba\n"; ok("subprocess-stdin")
r = subprocess.run([sys.executable, "-I", "-S", "-c", "import os; print(os.getsid(0) == os.getpid())"],
                   start_new_session=True, capture_output=True, text=True, check=True)
assert r.stdout == "True\n"; ok("subprocess-setsid")
pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", "pass"], os.environ)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0; ok("posix-spawn")

with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "f")
    with open(p, "w") as f: f.write("x")
    os.rename(p, p + "2"); os.chmod(p + "2", 0o600); os.utime(p + "2")
    shutil.copy2(p + "2", p + "3"); shutil.copytree(d, d + "-tree"); shutil.rmtree(d + "-tree")
    os.symlink(p + "3", p + "4"); os.readlink(p + "4"); os.link(p + "3", p + "5")
    os.mkfifo(os.path.join(d, "fifo")); os.statvfs(d); list(os.scandir(d))
    with tempfile.NamedTemporaryFile(dir=d) as f: f.write(b"y"); f.flush(); os.fsync(f.fileno())
    ok("tempfile")
    db = sqlite3.connect(os.path.join(d, "t.db"))
    db.execute("create table t(x)"); db.executemany("insert into t values(?)", [(i,) for i in range(100)])
    db.commit(); assert db.execute("select sum(x) from t").fetchone()[0] == 4950; db.close()
    db = sqlite3.connect(os.path.join(d, "w.db")); db.execute("pragma journal_mode=wal")
    db.execute("create table t(x)"); db.execute("insert into t values(1)"); db.commit()
    db2 = sqlite3.connect(os.path.join(d, "w.db")); assert db2.execute("select x from t").fetchone() == (1,)
    db2.close(); db.close(); ok("sqlite3")
    with open(os.path.join(d, "lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX); fcntl.flock(f, fcntl.LOCK_UN)
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB); fcntl.lockf(f, fcntl.LOCK_UN)
    ok("file-locks")

async def amain():
    a, b = socket.socketpair()
    a.setblocking(False); b.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(a, b"ping")
    data = await loop.sock_recv(b, 4)
    await asyncio.sleep(0.01)
    v = await loop.run_in_executor(None, abs, -3)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-I", "-S", "-c", "print(1)",
                                                stdout=asyncio.subprocess.PIPE)
    o, _ = await proc.communicate()
    a.close(); b.close()
    return data, v, o, proc.returncode
assert asyncio.run(amain()) == (b"ping", 3, b"1\n", 0); ok("asyncio")
ep = select.epoll(); efd = os.eventfd(0); ep.register(efd, select.EPOLLIN); os.eventfd_write(efd, 1)
assert ep.poll(1) == [(efd, select.EPOLLIN)]; ep.close(); os.close(efd); ok("epoll-eventfd")

assert sys.stdin.read() == "hello stdin\n"; ok("stdin")
json.loads(json.dumps({"a": [1, 2.5]})); assert re.match(r"(a+)+b", "aab")
assert math.isclose(math.sqrt(2) ** 2, 2); assert str(decimal.Decimal(1) / decimal.Decimal(8)) == "0.125"
ok("json-re-math-decimal")
assert len(os.urandom(32)) == 32; import secrets, random; secrets.token_hex(8); random.random()
ok("urandom")
t = time.monotonic(); time.sleep(0.02); assert time.monotonic() - t >= 0.02
time.time(); time.process_time(); time.thread_time(); time.localtime(); ok("sleep-and-clocks")
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1)); os.kill(os.getpid(), signal.SIGUSR1)
signal.setitimer(signal.ITIMER_REAL, 0.01); signal.signal(signal.SIGALRM, lambda *a: got.append(2))
time.sleep(0.2); signal.alarm(0); signal.pthread_sigmask(signal.SIG_BLOCK, [])
assert got == [1, 2], got; import faulthandler; faulthandler.enable(); ok("signals")
m = mmap.mmap(-1, 1 << 20); m[0:3] = b"abc"; m.flush(); m.close()
with tempfile.TemporaryFile() as f:
    f.write(b"z" * 4096); f.flush(); m = mmap.mmap(f.fileno(), 4096); assert m[0:1] == b"z"; m.close()
ok("mmap")
assert ctypes.CDLL(None).getpid() == os.getpid(); ok("ctypes")
import resource, platform, uuid, locale, hashlib, zlib, lzma, bz2, pickle, ssl, csv, datetime
resource.getrlimit(resource.RLIMIT_NOFILE); resource.getrusage(resource.RUSAGE_SELF)
platform.platform(); uuid.uuid4(); os.cpu_count(); os.sched_getaffinity(0); os.getloadavg()
os.nice(0); os.uname(); os.times(); os.getgroups(); os.get_terminal_size if True else 0
ok("stdlib")
print("ALL OK")
"#;

#[rustfmt::skip]
    const WORKLOAD_MARKERS: &[&str] = &[
        "threads", "thread-pool", "mp-fork", "mp-default", "mp-spawn", "mp-forkserver",
        "mp-process-queue", "mp-sync-primitives", "process-pool", "os-fork",
        "subprocess-python", "subprocess-stdin", "subprocess-setsid", "posix-spawn",
        "tempfile", "sqlite3", "file-locks", "asyncio", "epoll-eventfd", "stdin",
        "json-re-math-decimal", "urandom", "sleep-and-clocks", "signals", "mmap", "ctypes",
        "stdlib",
    ];

fn assert_workloads(program: Option<&SeccompProgram>) {
    let out = run_python(program, WORKLOADS, b"hello stdin\n");
    assert_success(&out);
    let stdout = stdout_of(&out);
    for marker in WORKLOAD_MARKERS {
        assert!(
            stdout.lines().any(|l| l == format!("OK {marker}")),
            "missing {marker}:\n{stdout}"
        );
    }
    assert!(stdout.ends_with("ALL OK\n"), "{stdout}");
}

#[test]
fn cpython_workloads_run_under_the_filter() {
    assert_workloads(Some(&program(false)));
}

#[test]
fn cpython_workloads_run_under_the_network_filter() {
    assert_workloads(Some(&program(true)));
}

#[test]
fn workload_probe_passes_without_a_filter() {
    // Keeps the probe honest: a failure here is a probe bug, not a policy gap.
    assert_workloads(None);
}
