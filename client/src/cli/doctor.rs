//! `viv doctor`: what this kernel offers for sandboxing, checked locally from /proc and the
//! Landlock syscall, then whether the daemon answers and which of its profiles are enabled.
//!
//! The parsers are pure functions over file contents so they can be tested on samples.

use std::path::Path;

use landlock::{LandlockStatus, RestrictSelf};

use super::{error_chain, profiles, start_daemon_hint};

/// The result of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Ok,
    Warn,
    Missing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Check {
    mark: Mark,
    name: &'static str,
    detail: String,
}

fn check(mark: Mark, name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        mark,
        name,
        detail: detail.into(),
    }
}

fn print(c: &Check) {
    let mark = match c.mark {
        Mark::Ok => "ok",
        Mark::Warn => "warn",
        Mark::Missing => "no",
    };
    println!("{mark:<5}{:<16}{}", c.name, c.detail);
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

pub(crate) async fn doctor(socket: &Path, verbose: bool) -> i32 {
    let checks = [
        kernel_check(read("/proc/sys/kernel/osrelease").as_deref()),
        userns_check(
            read("/proc/sys/user/max_user_namespaces").as_deref(),
            read("/proc/sys/kernel/unprivileged_userns_clone").as_deref(),
            read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref(),
        ),
        seccomp_check(
            read("/proc/self/status").as_deref(),
            read("/proc/sys/kernel/seccomp/actions_avail").as_deref(),
        ),
        landlock_check(landlock_status()),
        cgroup_check(read("/proc/self/mountinfo").as_deref(), |mount| {
            read(&format!("{mount}/cgroup.controllers"))
        }),
    ];
    for c in &checks {
        print(c);
    }

    match profiles::fetch(socket).await {
        Ok(list) => {
            let enabled = list.iter().filter(|p| p.disabled.is_none()).count();
            print(&check(
                if enabled > 0 { Mark::Ok } else { Mark::Missing },
                "daemon",
                format!(
                    "reachable at {}; {enabled} of {} profiles enabled",
                    socket.display(),
                    list.len()
                ),
            ));
            for p in &list {
                let mark = if p.disabled.is_none() {
                    Mark::Ok
                } else {
                    Mark::Missing
                };
                print(&check(
                    mark,
                    "profile",
                    format!("{}: {}", p.name, profiles::status(p)),
                ));
                if verbose && !p.not_enforced.is_empty() {
                    println!("{:21}not enforced: {}", "", p.not_enforced.join(", "));
                }
            }
            if enabled > 0 {
                0
            } else {
                1
            }
        }
        Err(e) => {
            print(&check(Mark::Missing, "daemon", error_chain(&e)));
            if matches!(e, vivarium_client::ClientError::Connect { .. }) {
                for line in start_daemon_hint() {
                    println!("{:21}{line}", "");
                }
            }
            1
        }
    }
}

/// `major.minor` from a release string such as `6.18.44-fc-v595`.
fn kernel_version(osrelease: &str) -> Option<(u32, u32)> {
    let mut parts = osrelease.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// clone3 and pidfd_open arrived in 5.3, CLONE_INTO_CGROUP in 5.7.
fn kernel_check(osrelease: Option<&str>) -> Check {
    let Some(release) = osrelease.map(str::trim) else {
        return check(
            Mark::Warn,
            "kernel",
            "cannot read /proc/sys/kernel/osrelease",
        );
    };
    let Some(version) = kernel_version(release) else {
        return check(
            Mark::Warn,
            "kernel",
            format!("{release}: version not understood"),
        );
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    check(
        if version >= (5, 3) {
            Mark::Ok
        } else {
            Mark::Missing
        },
        "kernel",
        format!(
            "{release} (clone3 + pidfd: {}; CLONE_INTO_CGROUP: {})",
            yes_no(version >= (5, 3)),
            yes_no(version >= (5, 7))
        ),
    )
}

fn userns_check(max: Option<&str>, unpriv_clone: Option<&str>, apparmor: Option<&str>) -> Check {
    let Some(max) = max.and_then(|m| m.trim().parse::<u64>().ok()) else {
        return check(
            Mark::Missing,
            "user namespaces",
            "no /proc/sys/user/max_user_namespaces (kernel without CONFIG_USER_NS?)",
        );
    };
    if max == 0 {
        return check(
            Mark::Missing,
            "user namespaces",
            "disabled (user.max_user_namespaces = 0)",
        );
    }
    let mut detail = format!("available (max_user_namespaces = {max})");
    let mut mark = Mark::Ok;
    // Both only restrict unprivileged users: a root daemon is unaffected, a rootless one fails.
    if unpriv_clone.map(str::trim) == Some("0") {
        mark = Mark::Warn;
        detail.push_str("; unprivileged_userns_clone = 0: only a root daemon can sandbox");
    }
    if apparmor.map(str::trim) == Some("1") {
        mark = Mark::Warn;
        detail.push_str(
            "; apparmor_restrict_unprivileged_userns = 1: only a root daemon can sandbox",
        );
    }
    check(mark, "user namespaces", detail)
}

fn seccomp_check(status: Option<&str>, actions: Option<&str>) -> Check {
    let mode = status.and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Seccomp:"))
            .map(|v| v.trim().to_owned())
    });
    let Some(mode) = mode else {
        return check(
            Mark::Missing,
            "seccomp",
            "no Seccomp line in /proc/self/status (CONFIG_SECCOMP off)",
        );
    };
    let Some(actions) = actions else {
        return check(
            Mark::Missing,
            "seccomp",
            "no /proc/sys/kernel/seccomp/actions_avail (filter mode unsupported)",
        );
    };
    let actions: Vec<&str> = actions.split_whitespace().collect();
    let missing: Vec<&str> = ["kill_process", "errno"]
        .into_iter()
        .filter(|a| !actions.contains(a))
        .collect();
    let mut detail = format!("filters supported; actions: {}", actions.join(" "));
    if mode == "2" {
        detail.push_str("; note: viv itself already runs under a seccomp filter");
    }
    if missing.is_empty() {
        check(Mark::Ok, "seccomp", detail)
    } else {
        check(
            Mark::Missing,
            "seccomp",
            format!("{detail}; missing: {}", missing.join(", ")),
        )
    }
}

/// Landlock support of the running kernel, learned without restricting anything: a
/// `RestrictSelf` with no flags and `no_new_privs(false)` reports the kernel status and
/// skips both the prctl and the restrict_self syscall (landlock 0.4.8
/// `restrict_self.rs`: "Skips the restrict_self syscall if no flags are enforceable").
fn landlock_status() -> Result<LandlockStatus, String> {
    RestrictSelf::default()
        .no_new_privs(false)
        .apply()
        .map(|status| status.landlock)
        .map_err(|e| e.to_string())
}

fn landlock_check(status: Result<LandlockStatus, String>) -> Check {
    match status {
        Ok(LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        }) => {
            let abi = kernel_abi.unwrap_or(effective_abi as i32);
            check(Mark::Ok, "landlock", format!("ABI {abi}"))
        }
        Ok(LandlockStatus::NotEnabled) => check(
            Mark::Missing,
            "landlock",
            "built in but not enabled at boot (add landlock to the lsm= kernel parameter)",
        ),
        Ok(LandlockStatus::NotImplemented) => check(
            Mark::Missing,
            "landlock",
            "not in this kernel (needs 5.13+ with CONFIG_SECURITY_LANDLOCK)",
        ),
        Err(e) => check(Mark::Warn, "landlock", format!("probe failed: {e}")),
    }
}

/// The cgroup mounts found in a mountinfo file.
#[derive(Debug, Default, PartialEq, Eq)]
struct CgroupMounts {
    /// v1 hierarchies: (controllers, mount point); named hierarchies like `name=systemd`
    /// carry no controller and are left out.
    v1: Vec<(Vec<String>, String)>,
    /// The cgroup2 mount point, if any.
    v2: Option<String>,
}

const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "blkio",
    "perf_event",
    "net_prio",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
];

/// Parse `/proc/self/mountinfo` lines: `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...]
/// - FSTYPE SOURCE SUPEROPTS` (proc(5)).
fn parse_cgroup_mounts(mountinfo: &str) -> CgroupMounts {
    let mut mounts = CgroupMounts::default();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(mount_point) = left.split(' ').nth(4) else {
            continue;
        };
        let mut right = right.split(' ');
        let (fstype, super_opts) = (right.next(), right.nth(1).unwrap_or(""));
        let mount_point = unescape_octal(mount_point);
        match fstype {
            Some("cgroup2") if mounts.v2.is_none() => mounts.v2 = Some(mount_point),
            Some("cgroup") => {
                let controllers: Vec<String> = super_opts
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(str::to_owned)
                    .collect();
                if !controllers.is_empty() {
                    mounts.v1.push((controllers, mount_point));
                }
            }
            _ => {}
        }
    }
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The daemon needs memory, pids and cpu control, from v1 hierarchies or the cgroup2 root.
fn cgroup_check(
    mountinfo: Option<&str>,
    read_controllers: impl Fn(&str) -> Option<String>,
) -> Check {
    let Some(mountinfo) = mountinfo else {
        return check(Mark::Warn, "cgroups", "cannot read /proc/self/mountinfo");
    };
    let mounts = parse_cgroup_mounts(mountinfo);
    let v1: Vec<&str> = mounts
        .v1
        .iter()
        .flat_map(|(c, _)| c.iter().map(String::as_str))
        .collect();
    let v2_controllers: Option<String> = mounts
        .v2
        .as_deref()
        .map(|m| read_controllers(m).unwrap_or_default().trim().to_owned());
    let layout = match (v1.is_empty(), &mounts.v2) {
        (true, Some(_)) => "unified (v2 only)",
        (false, Some(_)) => "hybrid (v1 controllers + cgroup2)",
        (false, None) => "legacy (v1 only)",
        (true, None) => return check(Mark::Missing, "cgroups", "no cgroup filesystem mounted"),
    };
    let mut detail = layout.to_owned();
    if !v1.is_empty() {
        detail.push_str(&format!("; v1: {}", v1.join(" ")));
    }
    if let (Some(mount), Some(controllers)) = (&mounts.v2, &v2_controllers) {
        let shown = if controllers.is_empty() {
            "none"
        } else {
            controllers
        };
        detail.push_str(&format!("; cgroup2 at {mount} (controllers: {shown})"));
    }
    let needed = ["memory", "pids", "cpu"];
    let v2_list: Vec<&str> = v2_controllers
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let missing: Vec<&str> = needed
        .into_iter()
        .filter(|c| !v1.contains(c) && !v2_list.contains(c))
        .collect();
    if missing.is_empty() {
        check(Mark::Ok, "cgroups", detail)
    } else {
        check(
            Mark::Missing,
            "cgroups",
            format!("{detail}; missing: {}", missing.join(" ")),
        )
    }
}

#[cfg(test)]
#[path = "doctor_tests.rs"]
mod tests;
