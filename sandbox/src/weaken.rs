//! Test-only weakening: isolation layers a job is built without, so that the attack
//! suite (`tests/tests/attack_probes.rs`) can show that each escape probe's detector
//! reports ESCAPED once the layer that stops it is gone.
//!
//! Production can never reach it:
//! - a [`Weakening`] is a plain parameter of `vivariumd::entry::main`; no config file,
//!   profile or client request has a field that sets it (those parsers deny unknown
//!   fields, which a test in `vivariumd::entry` checks), and the `vivariumd` binary passes
//!   [`Weakening::none`];
//! - only the test-only binary `vivariumd-weakened` (crate `vivarium-e2e`, under
//!   `tests/`) passes a non-empty one, taken from its command line, and only when
//!   `VIVARIUM_TEST_WEAKENED=1` is set;
//! - it travels to the spawner in the server's own [`SpawnerConfig`] over the private
//!   socketpair, and the spawner refuses a non-empty one without that variable;
//! - every outcome of a weakened daemon lists each dropped layer in its `not_enforced`
//!   ([`Weakening::describe`]), so it can never pass for a full sandbox.
//!
//! [`SpawnerConfig`]: crate::ipc::SpawnerConfig

use crate::cgroup::ViewMount;
use crate::mount::{at, bind_ro, mkdir_p};
use crate::plan::{MountStep, SANDBOX_GID, SANDBOX_UID};
use crate::SetupError;
use nix::mount::{mount, MsFlags};
use nix::unistd::{Gid, Uid};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The variable without which a weakened spawner refuses to start.
pub const TEST_ENV: &str = "VIVARIUM_TEST_WEAKENED";

/// One layer that a weakened daemon leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Layer {
    /// No new pid namespace: the job shares the host's, and sees the host's /proc
    /// (implies [`Layer::MemfdNoexec`]: that sysctl is per pid namespace).
    PidNs,
    /// No new network namespace: the job shares the host's (loopback included).
    NetNs,
    /// The job's network namespace is made by its own `clone3` (`CLONE_NEWNET`), inside
    /// the job's user namespace, instead of being a spare made ahead by the spawner and
    /// owned by the host's user namespace: the job's uid 0 then holds capabilities over
    /// it (CAP_NET_RAW, CAP_NET_ADMIN), as with `caps` the payload does too.
    NetNsOwner,
    /// No new UTS namespace (and no hostname of its own).
    UtsNs,
    /// No new cgroup namespace: /proc/self/cgroup shows host paths.
    CgroupNs,
    /// No Landlock ruleset.
    Landlock,
    /// No seccomp filter at all (not even the architecture check).
    Seccomp,
    /// The payload keeps uid 0 of the job's user namespace and every capability it holds
    /// there (never any in the host's user namespace).
    Caps,
    /// The job's init drops to the payload's uid (and stays dumpable) once the payload
    /// is forked, instead of staying uid 0 inside.
    InitRoot,
    /// /proc without hidepid=invisible.
    Hidepid,
    /// vm.memfd_noexec is left at the host's value.
    MemfdNoexec,
    /// The host's boot id is not masked.
    BootIdMask,
    /// Inherited fds are neither closed by init nor made close-on-exec.
    CloseFds,
    /// The job's root tmpfs stays writable.
    ReadOnlyRoot,
    /// /work, /tmp and /dev/shm are mounted without noexec.
    NoexecScratch,
    /// The job's user namespace keeps the kernel's namespace limits (it may make
    /// namespaces of every kind, as far as seccomp lets it).
    NamespaceLimits,
    /// No time namespace of its own: the job's monotonic and boot clocks are the host's.
    TimeNs,
}

impl Layer {
    pub const ALL: [Layer; 17] = [
        Layer::PidNs,
        Layer::NetNs,
        Layer::NetNsOwner,
        Layer::UtsNs,
        Layer::CgroupNs,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::Caps,
        Layer::InitRoot,
        Layer::Hidepid,
        Layer::MemfdNoexec,
        Layer::BootIdMask,
        Layer::CloseFds,
        Layer::ReadOnlyRoot,
        Layer::NoexecScratch,
        Layer::NamespaceLimits,
        Layer::TimeNs,
    ];

    /// The name used on the test binary's command line and in the attack manifest.
    pub fn name(self) -> &'static str {
        match self {
            Layer::PidNs => "pid-ns",
            Layer::NetNs => "net-ns",
            Layer::NetNsOwner => "net-ns-owner",
            Layer::UtsNs => "uts-ns",
            Layer::CgroupNs => "cgroup-ns",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Caps => "caps",
            Layer::InitRoot => "init-root",
            Layer::Hidepid => "hidepid",
            Layer::MemfdNoexec => "memfd-noexec",
            Layer::BootIdMask => "boot-id-mask",
            Layer::CloseFds => "close-fds",
            Layer::ReadOnlyRoot => "read-only-root",
            Layer::NoexecScratch => "noexec-scratch",
            Layer::NamespaceLimits => "namespace-limits",
            Layer::TimeNs => "time-ns",
        }
    }

    pub fn from_name(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// A host path (planted by the test: a decoy or a canary) bound into the job's root at
/// `target`: the minimal root switched off for that one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exposure {
    pub source: PathBuf,
    pub target: PathBuf,
    pub writable: bool,
}

/// The layers a job is built without. Empty in production.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weakening {
    pub layers: BTreeSet<Layer>,
    pub exposed: Vec<Exposure>,
}

impl Weakening {
    /// The full sandbox: what `vivariumd` always passes.
    pub fn none() -> Weakening {
        Weakening::default()
    }

    pub fn is_empty(&self) -> bool {
        self.layers.is_empty() && self.exposed.is_empty()
    }

    pub fn drops(&self, layer: Layer) -> bool {
        self.layers.contains(&layer)
    }

    /// One `not_enforced` line per dropped layer and exposed path.
    pub fn describe(&self) -> Vec<String> {
        let layers = self
            .layers
            .iter()
            .map(|l| format!("TEST-ONLY WEAKENING: {} switched off", l.name()));
        let exposed = self.exposed.iter().map(|e| {
            format!(
                "TEST-ONLY WEAKENING: minimal root: host {} exposed at {}{}",
                e.source.display(),
                e.target.display(),
                if e.writable { " (writable)" } else { "" }
            )
        });
        layers.chain(exposed).collect()
    }

    /// Parse the test binary's `--weaken a,b` and `--expose SRC:TARGET[:rw]` values.
    pub fn parse(layers: &[String], exposed: &[String]) -> Result<Weakening, String> {
        let mut w = Weakening::none();
        for name in layers
            .iter()
            .flat_map(|l| l.split(','))
            .filter(|n| !n.is_empty())
        {
            let layer = Layer::from_name(name).ok_or_else(|| format!("unknown layer {name:?}"))?;
            w.layers.insert(layer);
        }
        // vm.memfd_noexec is per pid namespace: without one of its own, setting it would
        // change the host's, so it goes with the pid namespace.
        if w.drops(Layer::PidNs) {
            w.layers.insert(Layer::MemfdNoexec);
        }
        for e in exposed {
            let mut parts = e.split(':');
            let (Some(source), Some(target)) = (parts.next(), parts.next()) else {
                return Err(format!("--expose {e:?}: want SOURCE:TARGET[:rw]"));
            };
            let writable = match parts.next() {
                None => false,
                Some("rw") => true,
                Some(other) => return Err(format!("--expose {e:?}: unknown mode {other:?}")),
            };
            if !source.starts_with('/') || !target.starts_with('/') || parts.next().is_some() {
                return Err(format!("--expose {e:?}: absolute SOURCE:TARGET[:rw] only"));
            }
            w.exposed.push(Exposure {
                source: source.into(),
                target: target.into(),
                writable,
            });
        }
        Ok(w)
    }
}

const NONE: Option<&str> = None;

/// The part of a job's cgroup view (`JobPlan::cgroup_view`) a weakened job still gets:
/// none without a cgroup namespace (it would show the host's hierarchy), and none beneath
/// an exposed host path (the decoy is what the probe looks at there; the view's mount
/// points are gone under it).
pub(crate) fn cgroup_view(w: &Weakening, view: &[ViewMount]) -> Vec<ViewMount> {
    if w.drops(Layer::CgroupNs) {
        return Vec::new();
    }
    (view.iter())
        .filter(|m| !w.exposed.iter().any(|e| m.path.starts_with(&e.target)))
        .cloned()
        .collect()
}

/// In the job's init, in the new root (the working directory), before the mount plan
/// runs: the plan's steps that a weakening leaves, the host's /proc bound in place of a
/// procfs of its own when there is no pid namespace (a new procfs needs one).
pub(crate) fn before_populate(
    w: &Weakening,
    steps: &[MountStep],
) -> Result<Vec<MountStep>, SetupError> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            MountStep::Proc { path } if w.drops(Layer::PidNs) => {
                let target = at(Path::new("."), path);
                mkdir_p(&target)?;
                mount(
                    Some("/proc"),
                    &target,
                    NONE,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    NONE,
                )
                .map_err(|e| SetupError::nix("weak-bind-proc", &target, e))?;
            }
            MountStep::Mask { .. } if w.drops(Layer::BootIdMask) => {}
            other => out.push(other.clone()),
        }
    }
    Ok(out)
}

/// After the mount plan, before pivot_root: the remaining mount weakenings.
pub(crate) fn after_populate(w: &Weakening, steps: &[MountStep]) -> Result<(), SetupError> {
    let root = Path::new(".");
    let keep = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    for step in steps {
        match step {
            MountStep::Proc { path } if w.drops(Layer::Hidepid) && !w.drops(Layer::PidNs) => {
                let target = at(root, path);
                mount(
                    NONE,
                    &target,
                    NONE,
                    MsFlags::MS_REMOUNT | keep | MsFlags::MS_NOEXEC,
                    Some("hidepid=0"),
                )
                .map_err(|e| SetupError::nix("weak-hidepid", &target, e))?;
            }
            MountStep::Tmpfs { path, .. } if w.drops(Layer::NoexecScratch) => {
                let target = at(root, path);
                mount(
                    NONE,
                    &target,
                    NONE,
                    MsFlags::MS_REMOUNT | MsFlags::MS_BIND | keep,
                    NONE,
                )
                .map_err(|e| SetupError::nix("weak-exec-scratch", &target, e))?;
            }
            _ => {}
        }
    }
    if w.exposed.is_empty() && !w.drops(Layer::ReadOnlyRoot) {
        return Ok(());
    }
    let remount_root = |flags: MsFlags| {
        mount(
            NONE,
            root,
            NONE,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | keep | flags,
            NONE,
        )
        .map_err(|e| SetupError::nix("weak-remount-root", root, e))
    };
    remount_root(MsFlags::empty())?;
    for e in &w.exposed {
        let target = at(root, &e.target);
        if std::fs::symlink_metadata(&target).is_err() {
            if e.source.is_dir() {
                mkdir_p(&target)?;
            } else {
                if let Some(parent) = target.parent() {
                    mkdir_p(parent)?;
                }
                std::fs::File::create(&target)
                    .map_err(|err| SetupError::io("weak-create", &target, &err))?;
            }
        }
        if e.writable {
            mount(Some(&e.source), &target, NONE, MsFlags::MS_BIND, NONE)
                .map_err(|err| SetupError::nix("weak-expose", &target, err))?;
        } else {
            bind_ro(&e.source, &target, MsFlags::MS_NODEV)?;
        }
    }
    if w.drops(Layer::ReadOnlyRoot) {
        Ok(())
    } else {
        remount_root(MsFlags::MS_RDONLY)
    }
}

/// In the job's init, once the payload is forked.
pub(crate) fn init_after_fork(w: &Weakening) -> Result<(), SetupError> {
    if w.drops(Layer::InitRoot) {
        let (gid, uid) = (Gid::from_raw(SANDBOX_GID), Uid::from_raw(SANDBOX_UID));
        nix::unistd::setresgid(gid, gid, gid)
            .map_err(|e| SetupError::errno("weak-init-setresgid", e))?;
        nix::unistd::setresuid(uid, uid, uid)
            .map_err(|e| SetupError::errno("weak-init-setresuid", e))?;
        nix::sys::prctl::set_dumpable(true)
            .map_err(|e| SetupError::errno("weak-init-dumpable", e))?;
        // (The credential change cleared the parent-death signal.)
        crate::sys::set_parent_death_signal(libc::SIGKILL)
            .map_err(|e| SetupError::io("weak-init-pdeathsig", "/".as_ref(), &e))?;
    }
    if w.drops(Layer::PidNs) {
        // Not a pid namespace's init: take the job's orphans explicitly.
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| SetupError::errno("weak-subreaper", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_parse() {
        for l in Layer::ALL {
            assert_eq!(Layer::from_name(l.name()), Some(l));
        }
        let w = Weakening::parse(
            &["pid-ns,landlock".into()],
            &["/var/tmp/x:/etc/shadow".into(), "/a:/b:rw".into()],
        )
        .unwrap();
        assert!(w.drops(Layer::PidNs) && w.drops(Layer::Landlock) && !w.drops(Layer::Caps));
        assert_eq!(w.exposed.len(), 2);
        assert!(w.exposed[1].writable && !w.exposed[0].writable);
        // The pid namespace takes memfd_noexec with it (a per-pid-namespace sysctl).
        assert!(w.drops(Layer::MemfdNoexec));
        assert_eq!(w.describe().len(), 5);
        // Each refusal says what was wrong with what.
        let refused = |layers: &[&str], exposes: &[&str]| {
            let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            Weakening::parse(&own(layers), &own(exposes)).expect_err("refused")
        };
        assert_eq!(refused(&["nope"], &[]), "unknown layer \"nope\"");
        assert_eq!(
            refused(&[], &["rel:/x"]),
            "--expose \"rel:/x\": absolute SOURCE:TARGET[:rw] only"
        );
        assert_eq!(
            refused(&[], &["/a:/b:rx"]),
            "--expose \"/a:/b:rx\": unknown mode \"rx\""
        );
        assert_eq!(
            refused(&[], &["/a"]),
            "--expose \"/a\": want SOURCE:TARGET[:rw]"
        );
    }

    #[test]
    fn a_weakened_job_gets_no_cgroup_view_without_its_namespace_or_beneath_an_exposure() {
        let view = |path: &str| ViewMount {
            path: path.into(),
            fstype: "cgroup".into(),
            data: "memory".into(),
            aliases: vec![],
        };
        let full = vec![view("/sys/fs/cgroup/memory"), view("/sys/fs/cgroup/pids")];
        let layers = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let w = Weakening::parse(&layers(&["landlock"]), &[]).unwrap();
        assert_eq!(cgroup_view(&w, &full), full);
        let w = Weakening::parse(&layers(&["cgroup-ns"]), &[]).unwrap();
        assert_eq!(cgroup_view(&w, &full), vec![]);
        let w = Weakening::parse(&[], &["/d:/sys/fs/cgroup/pids".into()]).unwrap();
        assert_eq!(cgroup_view(&w, &full), vec![view("/sys/fs/cgroup/memory")]);
        let w = Weakening::parse(&[], &["/d:/sys:rw".into()]).unwrap();
        assert_eq!(cgroup_view(&w, &full), vec![]);
    }

    #[test]
    fn production_weakening_is_empty() {
        assert!(Weakening::none().is_empty());
        assert!(Weakening::none().describe().is_empty());
    }
}
