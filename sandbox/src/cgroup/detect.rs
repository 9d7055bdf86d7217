//! Finding the cgroup hierarchies: pure parsers for `/proc/self/mountinfo` and
//! `/proc/self/cgroup`, and the v1-or-v2 choice. See proc_pid_mountinfo(5) and cgroups(7).

use std::path::{Path, PathBuf};

use super::files::parse_controller_list;
use super::{CgroupError, Controller, Version, ViewMount, V2_LEAF};

/// The fields of one mountinfo line that cgroup detection needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    /// The path inside the filesystem that is mounted (field 4), `/` unless bind or cgroupns.
    pub root: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
    /// Per-superblock options; for cgroup v1 they name the hierarchy's controllers.
    pub super_options: Vec<String>,
}

/// Parse mountinfo text; lines that do not have the documented shape are skipped.
pub fn parse_mountinfo(content: &str) -> Vec<MountInfo> {
    content.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MountInfo> {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
    let (left, right) = line.split_once(" - ")?;
    let mut left = left.split(' ');
    let root = unescape(left.nth(3)?);
    let mount_point = PathBuf::from(unescape(left.next()?));
    let mut right = right.split(' ');
    let fs_type = right.next()?.to_owned();
    let _source = right.next()?;
    let super_options = right.next()?.split(',').map(str::to_owned).collect();
    Some(MountInfo {
        root,
        mount_point,
        fs_type,
        super_options,
    })
}

/// Undo the kernel's octal escapes of space, tab, newline and backslash (`\040` ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The v1 hierarchy root of each controller (first mount wins; co-mounted controllers share it).
pub fn v1_mounts(mounts: &[MountInfo]) -> Vec<(Controller, PathBuf)> {
    Controller::ALL
        .into_iter()
        .filter_map(|c| {
            mounts
                .iter()
                .find(|m| m.fs_type == "cgroup" && m.super_options.iter().any(|o| o == c.as_str()))
                .map(|m| (c, m.mount_point.clone()))
        })
        .collect()
}

/// The process's own cgroup2 directory: the cgroup2 mount plus the `0::` path of
/// `/proc/self/cgroup`, made relative to the mount's root. `None` without cgroup2.
pub fn v2_own_dir(mounts: &[MountInfo], proc_self_cgroup: &str) -> Option<PathBuf> {
    let mount = mounts.iter().find(|m| m.fs_type == "cgroup2")?;
    let own = proc_self_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?;
    let relative = own
        .strip_prefix(mount.root.as_str())
        .filter(|_| mount.root != "/")
        .unwrap_or(own)
        .trim_start_matches('/');
    Some(mount.mount_point.join(relative))
}

/// Where a job's own cgroup appears inside it (`/sys/fs/cgroup`, as container runtimes
/// mount it), given the host's mounts. v1: one read-only mount per hierarchy that holds
/// one of our controllers (co-mounted ones once), at the host mount directory's name,
/// with the hierarchy's own option set (the kernel mounts an existing hierarchy only
/// with exactly its controllers) and a link for each of its controllers named
/// otherwise (`cpu -> cpu,cpuacct`). v2: the cgroup2 filesystem at `/sys/fs/cgroup`.
/// Mounted in the job's cgroup namespace, each shows the job's cgroup as its root.
pub fn job_view(mounts: &[MountInfo], version: Version) -> Vec<ViewMount> {
    let base = Path::new("/sys/fs/cgroup");
    if version == Version::V2 {
        return vec![ViewMount {
            path: base.to_path_buf(),
            fstype: "cgroup2".into(),
            data: String::new(),
            aliases: Vec::new(),
        }];
    }
    let mut out: Vec<ViewMount> = Vec::new();
    for (_, point) in v1_mounts(mounts) {
        let Some(name) = point.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let path = base.join(name);
        if out.iter().any(|v| v.path == path) {
            continue;
        }
        let Some(mount) = mounts.iter().find(|m| m.mount_point == point) else {
            continue;
        };
        // The superblock's options less the mount's access mode (ours is read-only)
        // and a release agent (refused outside the initial user namespace).
        let data: Vec<&str> = (mount.super_options.iter())
            .map(String::as_str)
            .filter(|o| !matches!(*o, "rw" | "ro") && !o.starts_with("release_agent="))
            .collect();
        let aliases = (data.iter())
            .filter(|o| o.parse::<Controller>().is_ok() && **o != name)
            .map(|o| o.to_string())
            .collect();
        out.push(ViewMount {
            path,
            fstype: "cgroup".into(),
            data: data.join(","),
            aliases,
        });
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    V1(Vec<(Controller, PathBuf)>),
    /// The delegated root.
    V2(PathBuf),
}

/// v1 when all four controllers have a v1 hierarchy, else v2 when the process's cgroup2
/// cgroup offers memory, pids and cpu (`read_controllers` reads its `cgroup.controllers`).
pub(super) fn choose(
    mounts: &[MountInfo],
    proc_self_cgroup: &str,
    read_controllers: impl Fn(&Path) -> Option<String>,
) -> Result<Found, CgroupError> {
    let v1 = v1_mounts(mounts);
    let v1_missing: Vec<Controller> = Controller::ALL
        .into_iter()
        .filter(|c| !v1.iter().any(|(have, _)| have == c))
        .collect();
    if v1_missing.is_empty() {
        return Ok(Found::V1(v1));
    }

    let needed = [Controller::Memory, Controller::Pids, Controller::Cpu];
    let Some(own) = v2_own_dir(mounts, proc_self_cgroup) else {
        return Err(CgroupError::NoUsableHierarchy {
            v1_missing,
            v2_missing: needed.to_vec(),
        });
    };
    let root_of_mount = mounts
        .iter()
        .find(|m| m.fs_type == "cgroup2")
        .is_some_and(|m| m.mount_point == own);
    if root_of_mount {
        return Err(CgroupError::RootCgroup);
    }
    // A restarted spawner may already sit in our leaf: the delegated root is its parent.
    let root = match (own.file_name(), own.parent()) {
        (Some(leaf), Some(parent)) if leaf == V2_LEAF => parent.to_path_buf(),
        _ => own,
    };
    let available = read_controllers(&root).unwrap_or_default();
    let available = parse_controller_list(&available);
    let v2_missing: Vec<Controller> = needed
        .into_iter()
        .filter(|c| !available.contains(&c.as_str()))
        .collect();
    if v2_missing.is_empty() {
        Ok(Found::V2(root))
    } else {
        Err(CgroupError::NoUsableHierarchy {
            v1_missing,
            v2_missing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine: hybrid, separate cpu and cpuacct hierarchies, cgroup2 with no controllers.
    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str = "4:memory:/process_api/73fbe2dbdf6da27968c35f0a39e5e0d7\n0::/\n";

    /// Ubuntu 20.04 style systemd hybrid: cpu and cpuacct co-mounted, optional fields present.
    const COMOUNTED: &str = "\
25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
30 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu,cpuacct
31 25 0:28 / /sys/fs/cgroup/cpuset rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpuset
33 25 0:30 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory
35 25 0:32 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,pids
";

    /// Pure v2 (Fedora, Debian 12, Ubuntu 22.04+), daemon started by systemd with Delegate=yes.
    const PURE_V2: &str = "\
22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const PURE_V2_CGROUP: &str = "0::/system.slice/vivarium.service\n";

    fn controllers_full(_: &Path) -> Option<String> {
        Some("cpuset cpu io memory pids\n".into())
    }

    #[test]
    fn hybrid_machine_uses_v1_with_separate_cpu_and_cpuacct() {
        let mounts = parse_mountinfo(HYBRID);
        assert_eq!(mounts.len(), 9);
        assert_eq!(
            mounts[1],
            MountInfo {
                root: "/".into(),
                mount_point: "/sys/fs/cgroup/cpu".into(),
                fs_type: "cgroup".into(),
                super_options: vec!["rw".into(), "cpu".into()],
            }
        );
        assert_eq!(
            choose(&mounts, HYBRID_CGROUP, |_| None).unwrap(),
            Found::V1(vec![
                (Controller::Memory, "/sys/fs/cgroup/memory".into()),
                (Controller::Pids, "/sys/fs/cgroup/pids".into()),
                (Controller::Cpu, "/sys/fs/cgroup/cpu".into()),
                (Controller::Cpuacct, "/sys/fs/cgroup/cpuacct".into()),
            ])
        );
    }

    #[test]
    fn comounted_cpu_cpuacct_share_one_root() {
        let mounts = parse_mountinfo(COMOUNTED);
        assert_eq!(
            v1_mounts(&mounts),
            vec![
                (Controller::Memory, "/sys/fs/cgroup/memory".into()),
                (Controller::Pids, "/sys/fs/cgroup/pids".into()),
                (Controller::Cpu, "/sys/fs/cgroup/cpu,cpuacct".into()),
                (Controller::Cpuacct, "/sys/fs/cgroup/cpu,cpuacct".into()),
            ]
        );
    }

    #[test]
    fn pure_v2_uses_the_own_delegated_cgroup() {
        let mounts = parse_mountinfo(PURE_V2);
        let root = PathBuf::from("/sys/fs/cgroup/system.slice/vivarium.service");
        assert_eq!(
            choose(&mounts, PURE_V2_CGROUP, controllers_full).unwrap(),
            Found::V2(root.clone())
        );
        // Already moved into the leaf by an earlier setup: the root is the parent.
        let in_leaf = "0::/system.slice/vivarium.service/daemon\n";
        assert_eq!(
            choose(&mounts, in_leaf, controllers_full).unwrap(),
            Found::V2(root)
        );
    }

    #[test]
    fn v2_without_controllers_or_in_the_root_is_refused() {
        let mounts = parse_mountinfo(PURE_V2);
        let err = choose(&mounts, PURE_V2_CGROUP, |_| Some("cpu memory\n".into())).unwrap_err();
        assert!(
            matches!(err, CgroupError::NoUsableHierarchy { ref v1_missing, ref v2_missing }
            if v1_missing.len() == 4 && *v2_missing == [Controller::Pids])
        );
        assert!(matches!(
            choose(&mounts, "0::/\n", controllers_full),
            Err(CgroupError::RootCgroup)
        ));
        // No cgroup2 line at all (cgroup v1 only, pids missing).
        let v1_only = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        assert!(matches!(
            choose(&parse_mountinfo(v1_only), "4:memory:/\n", controllers_full),
            Err(CgroupError::NoUsableHierarchy { ref v2_missing, .. }) if v2_missing.len() == 3
        ));
    }

    #[test]
    fn a_jobs_view_has_one_mount_per_hierarchy_of_ours() {
        let view = |path: &str, data: &str, aliases: &[&str]| ViewMount {
            path: path.into(),
            fstype: "cgroup".into(),
            data: data.into(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
        };
        // This machine: separate hierarchies, no links; cpuset and the others not ours.
        assert_eq!(
            job_view(&parse_mountinfo(HYBRID), Version::V1),
            vec![
                view("/sys/fs/cgroup/memory", "memory", &[]),
                view("/sys/fs/cgroup/pids", "pids", &[]),
                view("/sys/fs/cgroup/cpu", "cpu", &[]),
                view("/sys/fs/cgroup/cpuacct", "cpuacct", &[]),
            ]
        );
        // Co-mounted: one mount with the hierarchy's whole set, a link per controller.
        assert_eq!(
            job_view(&parse_mountinfo(COMOUNTED), Version::V1),
            vec![
                view("/sys/fs/cgroup/memory", "memory", &[]),
                view("/sys/fs/cgroup/pids", "pids", &[]),
                view(
                    "/sys/fs/cgroup/cpu,cpuacct",
                    "cpu,cpuacct",
                    &["cpu", "cpuacct"]
                ),
            ]
        );
        let agent = "1 0 0:32 / /cg/memory rw - cgroup cgroup rw,xattr,memory,release_agent=/x\n";
        assert_eq!(
            job_view(&parse_mountinfo(agent), Version::V1),
            vec![view("/sys/fs/cgroup/memory", "xattr,memory", &[])]
        );
        assert_eq!(
            job_view(&parse_mountinfo(PURE_V2), Version::V2),
            vec![ViewMount {
                path: "/sys/fs/cgroup".into(),
                fstype: "cgroup2".into(),
                data: String::new(),
                aliases: vec![],
            }]
        );
    }

    #[test]
    fn cgroup_namespace_mount_roots_and_escapes() {
        // Inside a container with a bind-mounted (not namespaced) cgroup2: mount root is the
        // container's cgroup, /proc/self/cgroup shows the full path.
        let line = "1 0 0:30 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let own = "0::/docker/abc/app\n";
        assert_eq!(
            v2_own_dir(&parse_mountinfo(line), own),
            Some(PathBuf::from("/sys/fs/cgroup/app"))
        );
        let spaced = "1 0 0:30 / /mnt/my\\040cg rw - cgroup cgroup rw,pids\n";
        assert_eq!(
            parse_mountinfo(spaced)[0].mount_point,
            PathBuf::from("/mnt/my cg")
        );
        assert_eq!(unescape("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape("trailing\\04"), "trailing\\04");
        assert!(parse_mountinfo("garbage line\n\n").is_empty());
    }
}
