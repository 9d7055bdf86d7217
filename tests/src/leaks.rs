//! What a job could leave behind on the host, read from /proc, /sys/fs/cgroup and the state
//! directory.

use std::path::{Path, PathBuf};
use vivarium_proto::CgroupVersion;

/// One host process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
}

impl Proc {
    /// An interpreter: a job's payload, a cold-started sandbox, or a zygote.
    pub fn is_python(&self) -> bool {
        self.comm.starts_with("python")
    }

    /// A zygote-forked job's init (`vivarium-zygote-init`, which names itself so).
    pub fn is_zygote_init(&self) -> bool {
        self.comm == "vivarium-init"
    }
}

/// What must be the same before and after a batch of jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub daemon_fds: usize,
    pub spawner_fds: usize,
    /// Host mounts that look like the sandbox's (see `suspicious_mounts`).
    pub mounts: Vec<String>,
}

/// `/proc/<pid>/stat`: the comm is in parentheses and may itself contain spaces and
/// parentheses, so the fields after it are found from the last `)`.
fn read_stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_owned();
    let mut rest = text[close + 1..].split_whitespace();
    let _state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some(Proc { pid, ppid, comm })
}

/// Whether `pid` is a live process (a zombie awaiting its reaper is not).
pub fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| {
            t.rfind(')')
                .and_then(|i| t[i + 1..].split_whitespace().next().map(|s| s != "Z"))
        })
        .unwrap_or(false)
}

/// Every process on the host.
pub fn all_procs() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(read_stat)
        .collect()
}

/// The direct children of `pid`.
pub fn children(pid: i32) -> Vec<Proc> {
    all_procs().into_iter().filter(|p| p.ppid == pid).collect()
}

/// Every process whose parent chain leads to `root` (not `root` itself).
pub fn descendants(root: i32) -> Vec<Proc> {
    let procs = all_procs();
    let mut found = Vec::new();
    let mut frontier = vec![root];
    while let Some(parent) = frontier.pop() {
        for p in procs.iter().filter(|p| p.ppid == parent) {
            frontier.push(p.pid);
            found.push(p.clone());
        }
    }
    found
}

/// `/proc/<pid>/cmdline` as arguments.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The fds `pid` has open, with what they point to.
pub fn fd_list(pid: i32) -> Vec<(String, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut fds: Vec<(String, String)> = dir
        .filter_map(|e| {
            let e = e.ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                target.display().to_string(),
            ))
        })
        .collect();
    fds.sort_by_key(|(fd, _)| fd.parse::<u32>().unwrap_or(u32::MAX));
    fds
}

pub fn fd_count(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The spawner's fds, split into its mount templates (other mount namespaces than its
/// own: a cache of up to 8, kept across jobs by design, see "Mount templates" in
/// docs/ARCHITECTURE.md) and everything else.
pub fn spawner_fd_counts(pid: i32) -> (usize, usize) {
    let own = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return (0, 0);
    };
    let (mut other, mut templates) = (0, 0);
    for entry in dir.flatten() {
        let link = std::fs::read_link(entry.path()).ok();
        let is_mnt = link
            .as_ref()
            .is_some_and(|l| l.to_string_lossy().starts_with("mnt:["));
        if is_mnt && link != own {
            templates += 1;
        } else {
            other += 1;
        }
    }
    (other, templates)
}

/// The cgroup hierarchies a subtree may live in: the v1 controllers the daemon uses, and
/// the v2 roots (pure v2 at /sys/fs/cgroup, hybrid at /sys/fs/cgroup/unified).
fn hierarchies() -> Vec<PathBuf> {
    ["memory", "pids", "cpu", "cpuacct", "unified", ""]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c))
        .collect()
}

/// Cgroups the daemon keeps for itself inside its subtree.
const OWN_CGROUPS: [&str; 2] = ["spawner", "daemon"];

pub fn subtree_dirs(subtree: &str) -> Vec<PathBuf> {
    hierarchies()
        .into_iter()
        .map(|h| h.join(subtree))
        .filter(|p| p.is_dir())
        .collect()
}

pub fn cgroup_leftovers(subtree: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in subtree_dirs(subtree) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir && !OWN_CGROUPS.iter().any(|o| name == *o) {
                out.push(e.path());
            }
        }
    }
    out
}

/// Everything in the state dir but an empty `root` directory.
pub fn state_leftovers(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        if e.file_name() == "session.key" && path.is_file() {
            // The daemon's own, for as long as it is installed: the key its session
            // handles are tagged with (docs/ARCHITECTURE.md, "Sessions"), not a job's.
            continue;
        }
        if e.file_name() == "root" && path.is_dir() {
            if let Ok(inner) = std::fs::read_dir(&path) {
                out.extend(inner.flatten().map(|i| i.path()));
            }
        } else {
            out.push(path);
        }
    }
    out
}

/// Mounts in `pid`'s mount namespace that look like the sandbox's: below `dir`, or tmpfs
/// mounts with the sizes and inode counts the sandbox uses.
pub fn suspicious_mounts(pid: i32, dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    let dir = dir.display().to_string();
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| {
            let sandboxy_tmpfs = l.contains(" - tmpfs ")
                && (l.contains("nr_inodes=4096")
                    || l.contains("nr_inodes=256")
                    || l.contains("size=65536k")
                    || l.contains("size=16384k,nr_inodes=1024"));
            // The sandbox's own paths, had a mount escaped into the host's namespace.
            let point = l.split(' ').nth(4).unwrap_or("");
            let sandbox_path = ["/work", "/tmp", "/dev/shm", "/proc"]
                .iter()
                .any(|p| point.starts_with(&format!("{p}/")))
                || point == "/work";
            l.contains(&dir) || sandboxy_tmpfs || sandbox_path
        })
        // The mount id and parent id change with every mount; compare the rest.
        .map(|l| l.splitn(3, ' ').nth(2).unwrap_or(l).to_owned())
        .collect();
    out.sort();
    out
}

/// The cgroup version jobs get on this host: v1 when the memory controller is mounted as a
/// v1 hierarchy (hybrid hosts), else v2.
pub fn host_cgroup_version() -> CgroupVersion {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let v1_memory = text.lines().any(|l| {
        let Some((_, post)) = l.split_once(" - ") else {
            return false;
        };
        let mut f = post.split_whitespace();
        f.next() == Some("cgroup")
            && f.nth(1)
                .is_some_and(|opts| opts.split(',').any(|o| o == "memory"))
    });
    if v1_memory {
        CgroupVersion::V1
    } else {
        CgroupVersion::V2
    }
}

/// Where a job sees its own cgroup (docs/ARCHITECTURE.md, "Cgroups"), from the host's
/// mounts: `/sys/fs/cgroup` on v2; on v1 one mount per hierarchy holding memory, pids,
/// cpu or cpuacct, named as the host's mount directory (`/sys/fs/cgroup/cpu,cpuacct`).
pub fn host_cgroup_view() -> Vec<String> {
    if host_cgroup_version() == CgroupVersion::V2 {
        return vec!["/sys/fs/cgroup".into()];
    }
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let hierarchies: Vec<(&str, Vec<&str>)> = text
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let mut f = post.split_whitespace();
            (f.next() == Some("cgroup")).then_some(())?;
            Some((pre.split(' ').nth(4)?, f.nth(1)?.split(',').collect()))
        })
        .collect();
    let mut view: Vec<String> = Vec::new();
    for controller in ["memory", "pids", "cpu", "cpuacct"] {
        let found = hierarchies.iter().find(|(_, o)| o.contains(&controller));
        if let Some(name) = found.and_then(|(point, _)| point.rsplit('/').next()) {
            let path = format!("/sys/fs/cgroup/{name}");
            if !view.contains(&path) {
                view.push(path);
            }
        }
    }
    view
}

/// Last-resort cleanup after the daemon is gone: SIGKILL whatever still runs in the
/// daemon's own cgroup subtree (only this test's daemon ever used that name) and remove
/// the subtree. Returns what it had to do, for the log.
pub fn scrub_subtree(subtree: &str) -> Vec<String> {
    use nix::sys::signal::{kill, Signal};
    let mut done = Vec::new();
    for base in subtree_dirs(subtree) {
        let mut dirs = Vec::new();
        collect_dirs(&base, &mut dirs);
        // Deepest first, so children are removed before their parents.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs {
            for _ in 0..50 {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = procs.lines().filter_map(|l| l.parse().ok()).collect();
                if pids.is_empty() {
                    break;
                }
                for pid in &pids {
                    let _ = kill(nix::unistd::Pid::from_raw(*pid), Signal::SIGKILL);
                }
                done.push(format!("killed {pids:?} in {}", dir.display()));
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if std::fs::remove_dir(&dir).is_ok() {
                done.push(format!("removed {}", dir.display()));
            }
        }
    }
    done
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}
