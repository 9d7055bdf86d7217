//! Test-only weakening: isolation layers a job is built without, so that the attack
//! suite (`tests/tests/attack_probes.rs`) can show that each escape probe's detector
//! reports ESCAPED once the layer that stops it is gone.
//!
//! It is a transform of the plan ([`Weakening::apply`]), applied by the server to every
//! plan it sends to the spawner (`server::spawner_client`): cold, warm, install, and so
//! every zygote's (made from a warm plan, and none is: a weakened warm plan loses its
//! zygote part). The sandbox crate only executes plan fields
//! (`vivarium_sandbox::plan::Layers`, the mount plan, the seccomp filters) and never sees
//! a [`Weakening`].
//!
//! Production can never reach it:
//! - a [`Weakening`] is a plain parameter of `vivariumd::entry::main`; no config file,
//!   profile or client request has a field that sets it (those parsers deny unknown
//!   fields, which a test in `vivariumd::entry` checks), and the `vivariumd` binary passes
//!   [`Weakening::none`];
//! - only the test-only binary `vivariumd-weakened` (crate `vivarium-e2e`, under
//!   `tests/`) passes a non-empty one, taken from its command line, and only when
//!   [`TEST_ENV`]`=1` is set;
//! - a weakened plan says so (`Layers::weakened`), and so does the server's own
//!   `SpawnerConfig::weakened`: the spawner refuses to start with the latter without
//!   that variable, and refuses a weakened plan without the latter;
//! - every outcome of a weakened daemon lists each dropped layer in its `not_enforced`
//!   ([`Weakening::describe`]), so it can never pass for a full sandbox.

use std::collections::BTreeSet;
use std::path::PathBuf;
use vivarium_sandbox::plan::{JobPlan, MountStep, PlanKind};

/// The variable without which a weakened spawner refuses to start.
pub const TEST_ENV: &str = vivarium_sandbox::ipc::TEST_WEAKENED_ENV;

/// One layer that a weakened daemon leaves out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    pub source: PathBuf,
    pub target: PathBuf,
    pub writable: bool,
}

/// The layers a job is built without. Empty in production.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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

    /// Rewrite `plan` to leave out what this weakening drops (nothing at all for
    /// [`Weakening::none`]), and mark it `weakened`: the sandbox then simply executes it.
    pub fn apply(&self, plan: &mut JobPlan) {
        if self.is_empty() {
            return;
        }
        let l = &mut plan.layers;
        l.weakened = true;
        for layer in &self.layers {
            match layer {
                Layer::PidNs => {
                    l.namespaces.pid = false;
                    // A new procfs needs a pid namespace: the host's is bound instead.
                    for step in &mut plan.mounts {
                        if let MountStep::Proc { path } = step {
                            *step = MountStep::HostProc {
                                path: std::mem::take(path),
                            };
                        }
                    }
                }
                Layer::NetNs => l.namespaces.net = false,
                Layer::NetNsOwner => l.namespaces.net_spare = false,
                Layer::UtsNs => l.namespaces.uts = false,
                Layer::CgroupNs => {
                    l.namespaces.cgroup = false;
                    // The view would show the host's hierarchy.
                    plan.cgroup_view.clear();
                }
                Layer::TimeNs => l.namespaces.time = false,
                Layer::Landlock => l.landlock = false,
                Layer::Seccomp => plan.seccomp.clear(),
                Layer::Caps => l.drop_caps = false,
                Layer::InitRoot => l.init_root = false,
                Layer::Hidepid => l.hidepid = false,
                Layer::MemfdNoexec => l.memfd_noexec = false,
                Layer::BootIdMask => plan.mounts.retain(|m| !matches!(m, MountStep::Mask { .. })),
                Layer::CloseFds => l.close_fds = false,
                Layer::ReadOnlyRoot => l.read_only_root = false,
                Layer::NoexecScratch => l.noexec_scratch = false,
                Layer::NamespaceLimits => l.namespace_limits = false,
            }
        }
        // The exposed paths, last on the root (their mount points made on it); no cgroup
        // view beneath one (the decoy is what the probe looks at there).
        for e in &self.exposed {
            plan.mounts.push(MountStep::Expose {
                source: e.source.clone(),
                path: e.target.clone(),
                writable: e.writable,
            });
            plan.cgroup_view.retain(|m| !m.path.starts_with(&e.target));
        }
        // A zygote-forked job's setup is the full sandbox's: a weakened warm sandbox
        // always starts cold (its plan has no zygote part).
        if let PlanKind::Warm { zygote } = &mut plan.kind {
            *zygote = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::load_dir;
    use vivarium_sandbox::cgroup::ViewMount;
    use vivarium_sandbox::plan::{Layers, ZygoteSeccompWire};

    fn view(path: &str) -> ViewMount {
        ViewMount {
            path: path.into(),
            fstype: "cgroup".into(),
            data: "memory".into(),
            aliases: vec![],
        }
    }

    /// A production plan of the default profile (warm: with a zygote part), with seccomp
    /// filters and a cgroup view.
    fn production(warm: bool) -> JobPlan {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        let mut p = (load_dir(&dir).unwrap().into_iter())
            .find(|p| p.name == "default")
            .unwrap();
        p.file.warm.zygote = true;
        let limits = p.default_limits();
        let views = [view("/sys/fs/cgroup/memory"), view("/sys/fs/cgroup/pids")];
        let seccomp = vec![vec![(6, 0, 0, 0x7fff_0000)]];
        let plan = if warm {
            let z = ZygoteSeccompWire {
                zygote: seccomp.clone(),
                job: seccomp.clone(),
            };
            super::super::plan::build_warm(4, &p, &limits, seccomp, Some(&z), Some(&views))
        } else {
            super::super::plan::build(4, &p, &limits, &[], seccomp, Some(&views))
        };
        assert_eq!(plan.layers, Layers::FULL);
        plan
    }

    fn weakening(layers: &[Layer], exposed: &[&str]) -> Weakening {
        let names: Vec<String> = layers.iter().map(|l| l.name().to_owned()).collect();
        let exposed: Vec<String> = exposed.iter().map(|e| e.to_string()).collect();
        Weakening::parse(&names, &exposed).unwrap()
    }

    #[test]
    fn no_weakening_leaves_every_plan_as_it_is() {
        for warm in [false, true] {
            let full = production(warm);
            let mut plan = full.clone();
            Weakening::none().apply(&mut plan);
            assert_eq!(plan, full);
        }
    }

    /// Each layer switches off exactly its own part of the plan (and marks it weakened).
    #[test]
    fn each_layer_is_off_in_the_transformed_plan_and_nothing_else_changes() {
        let full = production(false);
        for layer in Layer::ALL {
            let w = Weakening {
                layers: [layer].into(),
                exposed: vec![],
            };
            let mut got = full.clone();
            w.apply(&mut got);
            let mut want = full.clone();
            want.layers.weakened = true;
            let l = &mut want.layers;
            match layer {
                Layer::PidNs => {
                    l.namespaces.pid = false;
                    let at = (want.mounts.iter())
                        .position(|m| matches!(m, MountStep::Proc { .. }))
                        .unwrap();
                    want.mounts[at] = MountStep::HostProc {
                        path: "/proc".into(),
                    };
                }
                Layer::NetNs => l.namespaces.net = false,
                Layer::NetNsOwner => l.namespaces.net_spare = false,
                Layer::UtsNs => l.namespaces.uts = false,
                Layer::CgroupNs => {
                    l.namespaces.cgroup = false;
                    want.cgroup_view.clear();
                }
                Layer::TimeNs => l.namespaces.time = false,
                Layer::Landlock => l.landlock = false,
                Layer::Seccomp => want.seccomp.clear(),
                Layer::Caps => l.drop_caps = false,
                Layer::InitRoot => l.init_root = false,
                Layer::Hidepid => l.hidepid = false,
                Layer::MemfdNoexec => l.memfd_noexec = false,
                Layer::BootIdMask => want.mounts.retain(|m| !matches!(m, MountStep::Mask { .. })),
                Layer::CloseFds => l.close_fds = false,
                Layer::ReadOnlyRoot => l.read_only_root = false,
                Layer::NoexecScratch => l.noexec_scratch = false,
                Layer::NamespaceLimits => l.namespace_limits = false,
            }
            assert_eq!(got, want, "{layer:?}");
            assert_ne!(got.layers, Layers::FULL, "{layer:?}");
        }
        // The plain facts each layer's probe relies on.
        let off = |layers: &[Layer]| {
            let mut plan = full.clone();
            weakening(layers, &[]).apply(&mut plan);
            plan
        };
        let pid = off(&[Layer::PidNs]);
        assert!(!pid.layers.namespaces.pid && !pid.layers.memfd_noexec);
        assert!(!pid
            .mounts
            .iter()
            .any(|m| matches!(m, MountStep::Proc { .. })));
        assert!(off(&[Layer::Seccomp]).seccomp.is_empty());
        assert!(!full.seccomp.is_empty());
        let masks = |p: &JobPlan| {
            (p.mounts.iter())
                .filter(|m| matches!(m, MountStep::Mask { .. }))
                .count()
        };
        assert!(masks(&full) > 0);
        assert_eq!(masks(&off(&[Layer::BootIdMask])), 0);
        assert!(off(&[Layer::CgroupNs]).cgroup_view.is_empty());
    }

    #[test]
    fn exposures_are_bound_last_and_no_cgroup_view_lies_beneath_one() {
        let full = production(false);
        let mut plan = full.clone();
        weakening(&[], &["/d:/sys/fs/cgroup/pids", "/c:/etc/shadow:rw"]).apply(&mut plan);
        assert!(plan.layers.weakened);
        assert_eq!(
            plan.mounts[full.mounts.len()..],
            [
                MountStep::Expose {
                    source: "/d".into(),
                    path: "/sys/fs/cgroup/pids".into(),
                    writable: false
                },
                MountStep::Expose {
                    source: "/c".into(),
                    path: "/etc/shadow".into(),
                    writable: true
                },
            ]
        );
        assert_eq!(plan.cgroup_view, vec![view("/sys/fs/cgroup/memory")]);
        let mut plan = full.clone();
        weakening(&[], &["/d:/sys:rw"]).apply(&mut plan);
        assert_eq!(plan.cgroup_view, vec![]);
        // Any other weakening keeps the whole view.
        let mut plan = full.clone();
        weakening(&[Layer::Landlock], &[]).apply(&mut plan);
        assert_eq!(plan.cgroup_view, full.cgroup_view);
    }

    /// A weakened warm plan is never forked from a zygote (whose jobs' setup is always
    /// the full one): it loses its zygote part and starts cold.
    #[test]
    fn a_weakened_warm_plan_has_no_zygote() {
        let full = production(true);
        assert!(full.kind.zygote().is_some());
        let mut plan = full.clone();
        weakening(&[Layer::Landlock], &[]).apply(&mut plan);
        assert_eq!(plan.kind, PlanKind::Warm { zygote: None });
    }

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
    fn production_weakening_is_empty() {
        assert!(Weakening::none().is_empty());
        assert!(Weakening::none().describe().is_empty());
    }
}
