use super::*;
use landlock::ABI;

/// This machine's layout: v1 controllers under /sys/fs/cgroup/<ctrl>, cgroup2 at unified.
const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

/// A pure v2 host, with an optional field before the separator.
const UNIFIED: &str = "\
25 22 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
26 22 0:5 / /proc rw,nosuid shared:12 - proc proc rw
";

#[test]
fn hybrid_mounts() {
    let mounts = parse_cgroup_mounts(HYBRID);
    assert_eq!(
        mounts,
        CgroupMounts {
            v1: vec![
                (vec!["cpu".into()], "/sys/fs/cgroup/cpu".into()),
                (vec!["cpuacct".into()], "/sys/fs/cgroup/cpuacct".into()),
                (vec!["memory".into()], "/sys/fs/cgroup/memory".into()),
                (vec!["pids".into()], "/sys/fs/cgroup/pids".into()),
            ],
            v2: Some("/sys/fs/cgroup/unified".into()),
        }
    );
    let c = cgroup_check(Some(HYBRID), |m| {
        assert_eq!(m, "/sys/fs/cgroup/unified");
        Some("hugetlb\n".into())
    });
    assert_eq!(c.mark, Mark::Ok);
    assert_eq!(
        c.detail,
        "hybrid (v1 controllers + cgroup2); v1: cpu cpuacct memory pids; \
         cgroup2 at /sys/fs/cgroup/unified (controllers: hugetlb)"
    );
}

#[test]
fn unified_mounts() {
    let ok = cgroup_check(Some(UNIFIED), |_| {
        Some("cpuset cpu io memory pids\n".into())
    });
    assert_eq!(ok.mark, Mark::Ok);
    assert!(ok.detail.starts_with("unified (v2 only)"), "{}", ok.detail);
    let short = cgroup_check(Some(UNIFIED), |_| Some("memory\n".into()));
    assert_eq!(short.mark, Mark::Missing);
    assert!(
        short.detail.ends_with("missing: pids cpu"),
        "{}",
        short.detail
    );
    assert_eq!(cgroup_check(Some(""), |_| None).mark, Mark::Missing);
}

#[test]
fn mount_points_are_unescaped() {
    assert_eq!(unescape_octal(r"/a\040b\134c"), r"/a b\c");
    assert_eq!(unescape_octal(r"/trailing\04"), r"/trailing\04");
}

#[test]
fn kernel_versions() {
    assert_eq!(kernel_version("6.18.44-fc-v595\n"), Some((6, 18)));
    assert_eq!(kernel_version("5.4.0-150-generic"), Some((5, 4)));
    assert_eq!(kernel_version("garbage"), None);
    assert_eq!(kernel_check(Some("6.18.44-fc-v595\n")).mark, Mark::Ok);
    let old = kernel_check(Some("5.2.1"));
    assert_eq!(old.mark, Mark::Missing);
    assert_eq!(
        old.detail,
        "5.2.1 (clone3 + pidfd: no; CLONE_INTO_CGROUP: no)"
    );
    assert!(kernel_check(Some("5.4.0"))
        .detail
        .ends_with("(clone3 + pidfd: yes; CLONE_INTO_CGROUP: no)"));
}

#[test]
fn user_namespaces() {
    assert_eq!(userns_check(Some("96365\n"), None, None).mark, Mark::Ok);
    assert_eq!(userns_check(Some("0\n"), None, None).mark, Mark::Missing);
    assert_eq!(userns_check(None, None, None).mark, Mark::Missing);
    assert_eq!(userns_check(Some("10"), Some("0\n"), None).mark, Mark::Warn);
    assert_eq!(
        userns_check(Some("10"), Some("1\n"), Some("1\n")).mark,
        Mark::Warn
    );
    assert_eq!(
        userns_check(Some("10"), Some("1\n"), Some("0\n")).mark,
        Mark::Ok
    );
}

#[test]
fn seccomp() {
    let status = "Name:\tviv\nSeccomp:\t0\nSeccomp_filters:\t0\n";
    let all = "kill_process kill_thread trap errno user_notif trace log allow\n";
    assert_eq!(seccomp_check(Some(status), Some(all)).mark, Mark::Ok);
    assert_eq!(
        seccomp_check(Some("Name:\tviv\n"), Some(all)).mark,
        Mark::Missing
    );
    assert_eq!(seccomp_check(Some(status), None).mark, Mark::Missing);
    let old = seccomp_check(Some(status), Some("kill trap errno trace allow"));
    assert_eq!(old.mark, Mark::Missing);
    assert!(
        old.detail.ends_with("missing: kill_process"),
        "{}",
        old.detail
    );
    let nested = seccomp_check(Some("Seccomp:\t2\n"), Some(all));
    assert!(nested
        .detail
        .contains("already runs under a seccomp filter"));
}

#[test]
fn landlock_statuses() {
    let available = |abi, kernel_abi| {
        landlock_check(Ok(LandlockStatus::Available {
            effective_abi: abi,
            kernel_abi,
        }))
    };
    assert_eq!(available(ABI::V7, None).detail, "ABI 7");
    assert_eq!(available(ABI::V10, Some(12)).detail, "ABI 12");
    assert_eq!(
        landlock_check(Ok(LandlockStatus::NotEnabled)).mark,
        Mark::Missing
    );
    assert_eq!(
        landlock_check(Ok(LandlockStatus::NotImplemented)).mark,
        Mark::Missing
    );
}

/// The probe must not restrict this process: no_new_privs stays as it was.
#[test]
fn landlock_probe_has_no_side_effect() {
    let nnp = || {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("NoNewPrivs:").map(|v| v.trim().to_owned()))
    };
    let before = nnp();
    let status = landlock_status().expect("probe");
    assert_eq!(nnp(), before);
    // Print it so CI logs show what the host offers.
    eprintln!("landlock on this host: {status:?}");
}
