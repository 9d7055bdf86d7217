//! Test fixtures: fake cgroup trees on a temp dir that behave like cgroupfs where the code
//! depends on it. The kernel pre-creates a cgroup's interface files on mkdir and drops them on
//! rmdir; `files::make_dir` / `files::remove_dir` call the hooks below in test builds, which do
//! the same on any non-cgroup filesystem (and nothing on a real cgroupfs).
//!
//! What cannot be mimicked (a write to `cgroup.procs` moving a process, `cgroup.kill`) is
//! covered by the kernel tests.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};

use super::files::parse_controller_list;
use super::Controller;

fn is_cgroupfs(path: &Path) -> bool {
    statfs(path).is_ok_and(|s| {
        s.filesystem_type() == CGROUP_SUPER_MAGIC || s.filesystem_type() == CGROUP2_SUPER_MAGIC
    })
}

/// Files a v1 root has but its children do not.
const V1_ROOT_ONLY: [&str; 2] = ["cgroup.sane_behavior", "release_agent"];
/// Files that start empty in a new cgroup instead of copying the parent.
const PER_CGROUP: [&str; 3] = ["cgroup.procs", "tasks", "cgroup.threads"];

pub(super) fn on_mkdir(dir: &Path) {
    if is_cgroupfs(dir) {
        return;
    }
    let parent = dir.parent().expect("fixture cgroup has a parent");
    if parent.join("cgroup.subtree_control").exists() {
        let enabled = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap();
        write_files(dir, &v2_files(&parse_controller_list(&enabled)));
    } else {
        // v1: a child gets its parent's files, with inherited defaults.
        let mut files = snapshot(parent);
        files.retain(|name, _| !V1_ROOT_ONLY.contains(&name.as_str()));
        for name in PER_CGROUP {
            if let Some(content) = files.get_mut(name) {
                content.clear();
            }
        }
        write_files(dir, &files);
    }
}

pub(super) fn before_rmdir(dir: &Path) {
    if is_cgroupfs(dir) || !dir.is_dir() {
        return;
    }
    for name in snapshot(dir).keys() {
        fs::remove_file(dir.join(name)).unwrap();
    }
}

/// Every regular file of `dir` with its content.
pub(super) fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .unwrap()
        .map(Result::unwrap)
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            let name = e.file_name().into_string().unwrap();
            (name, fs::read_to_string(e.path()).unwrap())
        })
        .collect()
}

pub(super) fn write_files(dir: &Path, files: &BTreeMap<String, String>) {
    for (name, content) in files {
        fs::write(dir.join(name), content).unwrap();
    }
}

/// `(name, content)` pairs to a map, for whole-map expectations.
pub(super) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn v1_controller_files(controller: Controller) -> &'static [(&'static str, &'static str)] {
    const UNLIMITED: &str = "9223372036854771712\n";
    match controller {
        Controller::Memory => &[
            ("memory.limit_in_bytes", UNLIMITED),
            ("memory.memsw.limit_in_bytes", UNLIMITED),
            ("memory.swappiness", "60\n"),
            ("memory.use_hierarchy", "1\n"),
            ("memory.max_usage_in_bytes", "0\n"),
            ("memory.failcnt", "0\n"),
            ("memory.memsw.failcnt", "0\n"),
            (
                "memory.oom_control",
                "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
            ),
        ],
        Controller::Pids => &[
            ("pids.max", "max\n"),
            ("pids.current", "0\n"),
            ("pids.events", "max 0\n"),
        ],
        Controller::Cpu => &[
            ("cpu.cfs_period_us", "100000\n"),
            ("cpu.cfs_quota_us", "-1\n"),
            ("cpu.shares", "1024\n"),
        ],
        Controller::Cpuacct => &[("cpuacct.usage", "0\n")],
    }
}

/// A fake v1 mount under `dir` per hierarchy (controllers co-mounted within one slice), named
/// like the kernel's mount points (`cpu,cpuacct`). Returns the `v1_at` argument.
pub(super) fn v1_tree(dir: &Path, hierarchies: &[&[Controller]]) -> Vec<(Controller, PathBuf)> {
    let mut mounts = Vec::new();
    for controllers in hierarchies {
        let names: Vec<&str> = controllers.iter().map(|c| c.as_str()).collect();
        let mount = dir.join(names.join(","));
        fs::create_dir(&mount).unwrap();
        let mut files = map(&[
            ("cgroup.procs", "1\n"),
            ("tasks", "1\n"),
            ("cgroup.clone_children", "0\n"),
            ("notify_on_release", "0\n"),
            ("cgroup.sane_behavior", "0\n"),
            ("release_agent", ""),
        ]);
        for c in controllers.iter() {
            files.extend(map(v1_controller_files(*c)));
            mounts.push((*c, mount.clone()));
        }
        write_files(&mount, &files);
    }
    mounts
}

/// The interface files of a new v2 cgroup whose parent enabled `enabled`.
pub(super) fn v2_files(enabled: &[&str]) -> BTreeMap<String, String> {
    let mut files = map(&[
        ("cgroup.procs", ""),
        ("cgroup.threads", ""),
        ("cgroup.controllers", ""),
        ("cgroup.subtree_control", ""),
        ("cgroup.events", "populated 0\nfrozen 0\n"),
        ("cgroup.kill", ""),
        ("cgroup.type", "domain\n"),
        ("cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"),
    ]);
    let mut controllers = Vec::new();
    for name in ["cpu", "memory", "pids"] {
        if !enabled.contains(&name) {
            continue;
        }
        controllers.push(name);
        files.extend(map(match name {
            "cpu" => &[("cpu.max", "max 100000\n"), ("cpu.weight", "100\n")],
            "memory" => &[
                ("memory.max", "max\n"),
                ("memory.current", "0\n"),
                ("memory.peak", "0\n"),
                ("memory.swap.max", "max\n"),
                ("memory.oom.group", "0\n"),
                (
                    "memory.events",
                    "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
                ),
            ],
            _ => &[("pids.max", "max\n"), ("pids.events", "max 0\n")],
        }));
    }
    files.insert(
        "cgroup.controllers".into(),
        format!("{}\n", controllers.join(" ")),
    );
    files
}

/// A fake delegated v2 root offering `available` to its children.
pub(super) fn v2_root(dir: &Path, available: &[&str]) -> PathBuf {
    let root = dir.join("vivarium.service");
    fs::create_dir(&root).unwrap();
    let mut files = v2_files(available);
    files.insert(
        "cgroup.controllers".into(),
        format!("{}\n", available.join(" ")),
    );
    write_files(&root, &files);
    root
}
