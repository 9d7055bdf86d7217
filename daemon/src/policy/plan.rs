//! The plan builder: a job's [`JobPlan`] computed from its profile and limits before the
//! clone (host paths are read here, so that the child never decides). The plan's types
//! are `vivarium_sandbox::plan`'s; the child only executes them.

use crate::profile::{JobLimits, NetworkMode, Profile};
use std::path::{Path, PathBuf};
use vivarium_sandbox::cgroup::ViewMount;
use vivarium_sandbox::plan::{
    CgroupPlan, JobPlan, LandlockPlan, Layers, MountStep, NetworkPlan, PlanKind, RlimitFallback,
    RlimitPlan, ZygotePlan, ZygoteSeccompWire, EGRESS_PORT, HOSTNAME, MEMLOCK_BYTES,
    MSGQUEUE_BYTES, SCRIPT_PATH, SIGPENDING, WARM_BOOTSTRAP, WARM_LOADER,
};

/// The minimal /etc the sandbox gets (besides the profile's optional binds).
fn etc_files() -> Vec<MountStep> {
    let file = |path: &str, contents: &str| MountStep::File {
        path: path.into(),
        contents: contents.into(),
    };
    vec![
        file(
            "/etc/passwd",
            "root:x:0:0:root:/:/usr/sbin/nologin\n\
             sandbox:x:1000:1000:sandbox:/work:/usr/sbin/nologin\n\
             nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        ),
        file(
            "/etc/group",
            "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
        ),
        file("/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n"),
        file("/etc/hostname", "vivarium\n"),
        file("/etc/resolv.conf", ""),
        file(MATPLOTLIBRC_PATH, MATPLOTLIBRC),
        // matplotlib's backend in the sandbox (figures_hook.py picks it).
        file(
            vivarium_sandbox::plan::FIGURES_PATH,
            vivarium_sandbox::plan::FIGURES_PY,
        ),
    ]
}

/// Where the sandbox's matplotlib defaults are ([`environment`] names it).
const MATPLOTLIBRC_PATH: &str = "/etc/matplotlibrc";

/// matplotlib's defaults in the sandbox (issue 20): no display, so Agg (named, not found
/// by probing each GUI toolkit); figures sized for a model's context: the default 6.4 x
/// 4.8 in at 150 dpi is 960 x 720 px, 0.69 megapixels, within the 1568 px long side and
/// 1.15 megapixels that vision models take without scaling down.
const MATPLOTLIBRC: &str = "\
# Vivarium's matplotlib defaults (docs/profiles.md, \"The environment\").
backend: Agg
figure.dpi: 150
savefig.dpi: figure
";

/// Host paths are read here (`symlink_metadata`) so that the child never decides.
pub fn mounts(profile: &Profile) -> Vec<MountStep> {
    mounts_in(Path::new("/"), profile)
}

/// [`mounts`] with the host's root at `host` (`/`; a fake one in tests): the profile's
/// binds are looked up, and bound from, beneath it.
fn mounts_in(host: &Path, profile: &Profile) -> Vec<MountStep> {
    let fs = &profile.file.filesystem;
    let mut steps = Vec::new();
    let binds = fs.ro_binds.iter().map(|p| (p, true));
    let optional = fs.ro_binds_optional.iter().map(|p| (p, false));
    for (path, required) in binds.chain(optional) {
        let source = host.join(path.strip_prefix("/").unwrap_or(path));
        match std::fs::symlink_metadata(&source) {
            Ok(meta) if meta.file_type().is_symlink() => match std::fs::read_link(&source) {
                Ok(link) => steps.push(MountStep::Symlink {
                    link,
                    path: path.clone(),
                }),
                Err(_) => continue,
            },
            Ok(_) => steps.push(MountStep::BindRo {
                source,
                path: path.clone(),
            }),
            // A missing required bind fails in the child with a clear step name.
            Err(_) if required => steps.push(MountStep::BindRo {
                source,
                path: path.clone(),
            }),
            Err(_) => {}
        }
    }
    steps.extend(etc_files());
    let tmpfs = |path: &str, size, inodes| MountStep::Tmpfs {
        path: path.into(),
        size,
        inodes,
        mode: 0o700,
    };
    steps.push(tmpfs("/work", fs.work_size_bytes, fs.work_inodes));
    steps.push(tmpfs("/tmp", fs.tmp_size_bytes, fs.tmp_inodes));
    steps.push(MountStep::Proc {
        path: "/proc".into(),
    });
    // The boot id is global (not per namespace): each job sees a fresh random one, in
    // the kernel's format (a version 4 UUID, then a newline). Made here, not read from
    // /proc/sys/kernel/random/uuid: a lookup in /proc/sys waits on the lock that every
    // new network namespace holds while it registers its sysctls (~0.3 ms of the
    // server's CPU per job while zygote jobs run on the other CPU, `perf record`).
    steps.push(MountStep::Mask {
        path: "/proc/sys/kernel/random/boot_id".into(),
        contents: format!("{}\n", uuid::Uuid::new_v4()),
    });
    steps.extend(proc_masks());
    for dev in ["null", "zero", "full", "random", "urandom"] {
        steps.push(MountStep::Device {
            source: Path::new("/dev").join(dev),
            path: Path::new("/dev").join(dev),
        });
    }
    for (name, link) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        steps.push(MountStep::Symlink {
            link: link.into(),
            path: Path::new("/dev").join(name),
        });
    }
    steps.push(tmpfs("/dev/shm", fs.shm_size_bytes, 1024));
    steps
}

/// Host-global facts under /proc that a job has no need of, masked with neutral
/// contents (docs/SECURITY.md lists what stays visible, and why): the kernel command
/// line and configuration, disks and partitions, the host's load and pressure, its
/// physical memory map, device majors, consoles, the core-dump handler. Only files the
/// host's procfs has (the job's is of the same kernel); looked up once.
fn proc_masks() -> Vec<MountStep> {
    static MASKS: std::sync::OnceLock<Vec<MountStep>> = std::sync::OnceLock::new();
    MASKS
        .get_or_init(|| {
            const PRESSURE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
            [
                ("/proc/cmdline", "\n"),
                ("/proc/config.gz", ""),
                ("/proc/partitions", "major minor  #blocks  name\n\n"),
                ("/proc/diskstats", ""),
                ("/proc/loadavg", "0.00 0.00 0.00 1/1 1\n"),
                ("/proc/pressure/cpu", PRESSURE),
                ("/proc/pressure/io", PRESSURE),
                ("/proc/pressure/memory", PRESSURE),
                (
                    "/proc/pressure/irq",
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                ),
                ("/proc/iomem", ""),
                ("/proc/ioports", ""),
                (
                    "/proc/devices",
                    "Character devices:\n  1 mem\n\nBlock devices:\n",
                ),
                ("/proc/consoles", ""),
                ("/proc/sys/kernel/core_pattern", "core\n"),
            ]
            .into_iter()
            .filter(|(path, _)| Path::new(path).exists())
            .map(|(path, contents)| MountStep::Mask {
                path: path.into(),
                contents: contents.into(),
            })
            .collect()
        })
        .clone()
}

/// The variables that size the common thread pools (OpenMP, OpenBLAS, MKL, numexpr,
/// Rayon, Polars), set by `limits.thread_hints`: `os.cpu_count()` and the libraries'
/// own detection see the host's CPUs, not the job's quota.
pub const THREAD_HINTS: &[&str] = &[
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "POLARS_MAX_THREADS",
];

/// The environment, built from nothing.
pub fn environment(profile: &Profile) -> Vec<(String, String)> {
    let mut env = vec![
        ("PATH".to_owned(), "/usr/local/bin:/usr/bin:/bin".to_owned()),
        ("HOME".to_owned(), "/work".to_owned()),
        ("TMPDIR".to_owned(), "/tmp".to_owned()),
        ("USER".to_owned(), "sandbox".to_owned()),
        // matplotlib: its defaults (Agg, figure size), and a config and font cache
        // directory on /tmp (it makes it), so that /work holds only what the job made.
        ("MPLBACKEND".to_owned(), "Agg".to_owned()),
        ("MATPLOTLIBRC".to_owned(), MATPLOTLIBRC_PATH.to_owned()),
        ("MPLCONFIGDIR".to_owned(), "/tmp/matplotlib".to_owned()),
    ];
    let limits = &profile.file.limits;
    if limits.thread_hints && limits.cpu_cores > 0.0 {
        let threads = (limits.cpu_cores.ceil() as u64).max(1).to_string();
        for var in THREAD_HINTS {
            env.push(((*var).to_owned(), threads.clone()));
        }
    }
    for (k, v) in &profile.file.env {
        env.retain(|(key, _)| key != k);
        env.push((k.clone(), v.clone()));
    }
    env
}

pub fn cgroup(profile: &Profile, limits: &JobLimits) -> CgroupPlan {
    const PERIOD_US: u64 = 100_000;
    let cores = profile.file.limits.cpu_cores;
    CgroupPlan {
        memory_bytes: limits.memory_bytes,
        pids: limits.pids,
        cpu_quota_us: (cores > 0.0).then(|| ((cores * PERIOD_US as f64) as u64).max(1000)),
        cpu_period_us: PERIOD_US,
    }
}

/// The mount points of a job's cgroup view (on the read-only root) and its links.
fn cgroup_view_steps(view: &[ViewMount]) -> Vec<MountStep> {
    let mut steps = Vec::new();
    for m in view {
        steps.push(MountStep::Dir {
            path: m.path.clone(),
        });
        let (Some(parent), Some(name)) = (m.path.parent(), m.path.file_name()) else {
            continue;
        };
        for alias in &m.aliases {
            steps.push(MountStep::Symlink {
                link: name.into(),
                path: parent.join(alias),
            });
        }
    }
    steps
}

/// The directories bound read-only from the host: the only places where Landlock
/// allows execution.
fn exec_dirs(mounts: &[MountStep]) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::BindRo { source, path } if source.is_dir() => Some(path.clone()),
            _ => None,
        })
        .collect()
}

/// Build the plan for one job.
pub fn build(
    job_id: u64,
    profile: &Profile,
    limits: &JobLimits,
    args: &[String],
    seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    cgroups: Option<&[ViewMount]>,
) -> JobPlan {
    build_in(
        Path::new("/"),
        job_id,
        profile,
        limits,
        args,
        seccomp,
        cgroups,
    )
}

/// [`build`] with the host's root at `host` (see [`mounts_in`]).
#[allow(clippy::too_many_arguments)]
fn build_in(
    host: &Path,
    job_id: u64,
    profile: &Profile,
    limits: &JobLimits,
    args: &[String],
    seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    cgroups: Option<&[ViewMount]>,
) -> JobPlan {
    let py = &profile.file.python;
    // `python3 <flags> -c COLD_PROGRAM /work/main.py <args>`: the script as run directly,
    // with the figures hook first (vivarium_sandbox::plan::COLD_PROGRAM).
    let mut argv = vec![py.interpreter.to_string_lossy().into_owned()];
    argv.extend(py.args.iter().cloned());
    argv.push("-c".to_owned());
    argv.push(vivarium_sandbox::plan::COLD_PROGRAM.to_owned());
    argv.push(SCRIPT_PATH.to_owned());
    argv.extend(args.iter().cloned());
    let sec = &profile.file.security;
    let without_cgroup = cgroups.is_none();
    let cgroup_view = cgroups.unwrap_or_default().to_vec();
    let mut mounts = mounts_in(host, profile);
    mounts.extend(cgroup_view_steps(&cgroup_view));
    let mut env = environment(profile);
    let egress = !profile.file.network.egress.is_empty();
    let network = match profile.file.network.mode {
        _ if egress => NetworkPlan::Egress,
        NetworkMode::Loopback => NetworkPlan::Loopback,
        NetworkMode::None => NetworkPlan::None,
    };
    if egress {
        // The proxy on the namespace's own loopback is the only way out; programs that
        // honour the usual variables use it as they are.
        let proxy = format!("http://127.0.0.1:{EGRESS_PORT}");
        for k in [
            "HTTPS_PROXY",
            "HTTP_PROXY",
            "ALL_PROXY",
            "https_proxy",
            "http_proxy",
        ] {
            env.retain(|(key, _)| key != k);
            env.push((k.into(), proxy.clone()));
        }
    }
    JobPlan {
        job_id,
        hostname: HOSTNAME.into(),
        landlock: LandlockPlan {
            abi: sec.landlock_abi,
            min_abi: sec.landlock_min_abi,
            read_dirs: vec!["/".into()],
            exec_dirs: exec_dirs(&mounts),
            write_dirs: vec!["/work".into(), "/tmp".into(), "/dev/shm".into()],
            write_files: vec!["/dev/null".into(), "/dev/zero".into(), "/dev/full".into()],
            tcp_connect: if egress {
                vec![EGRESS_PORT]
            } else {
                Vec::new()
            },
            // Landlock's TCP rules name ports, not addresses: in a namespace whose only
            // interface is the job's own loopback they could only forbid ports of it.
            tcp_any: network == NetworkPlan::Loopback,
        },
        mounts,
        interpreter: py.interpreter.clone(),
        argv,
        env,
        rlimits: RlimitPlan {
            nofile: profile.file.limits.nofile,
            fsize: profile.file.limits.fsize_bytes,
            sigpending: SIGPENDING,
            msgqueue: MSGQUEUE_BYTES,
            memlock: MEMLOCK_BYTES,
            fallback: without_cgroup.then(|| RlimitFallback {
                address_space: limits.memory_bytes,
                cpu_seconds: limits.cpu_ms.div_ceil(1000),
                // RLIMIT_NPROC is counted per user namespace: it bounds the job's own
                // processes (and threads) as uid 1000 inside.
                nproc: u64::from(limits.pids),
            }),
        },
        seccomp,
        cgroup: cgroup(profile, limits),
        cgroup_view,
        wall_ms: limits.wall_ms,
        cpu_ms: limits.cpu_ms,
        kind: PlanKind::Job,
        network,
        time_ns: false,
        layers: Layers::FULL,
        inputs: Vec::new(),
    }
}

/// Build the plan of a warm sandbox for `profile` with `limits` (the profile's own for
/// a pool; a job's own for a sandbox forked from a zygote for that job), and the
/// interpreter started with the profile's flags and [`WARM_BOOTSTRAP`] in place of a
/// script.
pub fn build_warm(
    job_id: u64,
    profile: &Profile,
    limits: &JobLimits,
    seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    zygote_seccomp: Option<&ZygoteSeccompWire>,
    cgroups: Option<&[ViewMount]>,
) -> JobPlan {
    let mut plan = build(job_id, profile, limits, &[], seccomp, cgroups);
    // `-c COLD_PROGRAM /work/main.py` becomes `-c WARM_BOOTSTRAP`.
    plan.argv.truncate(plan.argv.len() - 2);
    plan.argv.push(WARM_BOOTSTRAP.into());
    // The modules to import before waiting: the bootstrap's own argv.
    plan.argv.extend(profile.file.warm.preload.iter().cloned());
    let warm = &profile.file.warm;
    let zygote = zygote_seccomp.filter(|_| warm.zygote).map(|z| ZygotePlan {
        key: 0,
        profile: profile.name.clone(),
        generation: 0,
        cgroup: cgroup(profile, &profile.default_limits()),
        idle_secs: warm.idle_secs,
        seccomp: z.zygote.clone(),
        job_seccomp: z.job.clone(),
    });
    plan.kind = PlanKind::Warm { zygote };
    plan
}

/// `plan`, a cold-built warm sandbox's, with [`WARM_LOADER`] as its program instead of
/// the warm bootstrap's source: the sandbox then reads the bootstrap compiled ahead on
/// its stdin (`server/warm_code.rs`).
pub fn use_warm_loader(plan: &mut JobPlan) {
    for arg in &mut plan.argv {
        if arg == WARM_BOOTSTRAP {
            WARM_LOADER.clone_into(arg);
        }
    }
}

/// The plan of a session's sandbox: a cold-built warm sandbox (never forked from a
/// zygote: a session is one sandbox built as a cold job's), whose program is the session
/// bootstrap's cell loop rather than the one-job warm bootstrap. `limits` carry the
/// session's memory and pids (its cgroup), lifetime and CPU budget.
pub fn build_session(
    job_id: u64,
    profile: &Profile,
    limits: &JobLimits,
    seccomp: Vec<Vec<(u16, u8, u8, u32)>>,
    cgroups: Option<&[ViewMount]>,
) -> JobPlan {
    let mut plan = build_warm(job_id, profile, limits, seccomp, None, cgroups);
    let program = plan
        .argv
        .iter()
        .position(|a| a == vivarium_sandbox::plan::WARM_BOOTSTRAP)
        .expect("a warm plan runs the warm bootstrap");
    // `-c WARM_BOOTSTRAP` becomes the session bootstrap's `-c STUB PART... --`.
    plan.argv.splice(
        program - 1..=program,
        vivarium_sandbox::plan::session_program(),
    );
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::load_dir;

    #[test]
    fn matplotlib_gets_agg_a_config_dir_on_tmp_and_figures_within_a_models_budget() {
        let env = environment(&default_profile());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MPLBACKEND"), Some("Agg"));
        assert_eq!(get("MPLCONFIGDIR"), Some("/tmp/matplotlib"));
        assert_eq!(get("MATPLOTLIBRC"), Some(MATPLOTLIBRC_PATH));
        let rc = etc_files()
            .into_iter()
            .find_map(|m| match m {
                MountStep::File { path, contents } if path == Path::new(MATPLOTLIBRC_PATH) => {
                    Some(contents)
                }
                _ => None,
            })
            .expect("/etc/matplotlibrc");
        let dpi: f64 = rc
            .lines()
            .find_map(|l| l.strip_prefix("figure.dpi:"))
            .expect("figure.dpi")
            .trim()
            .parse()
            .unwrap();
        // matplotlib's default figure is 6.4 x 4.8 inches.
        let (w, h) = (6.4 * dpi, 4.8 * dpi);
        assert!(w <= 1568.0 && w * h <= 1_150_000.0, "{w} x {h}");
        assert!(rc.contains("backend: Agg"));
    }

    fn default_profile() -> Profile {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        load_dir(&dir)
            .unwrap()
            .into_iter()
            .find(|p| p.name == "default")
            .unwrap()
    }

    #[test]
    fn a_warm_plan_is_the_cold_plan_with_the_bootstrap_for_a_script() {
        let p = default_profile();
        let cold = build(
            9,
            &p,
            &p.default_limits(),
            &[],
            vec![vec![(6, 0, 0, 0)]],
            Some(&[]),
        );
        let warm = build_warm(
            9,
            &p,
            &p.default_limits(),
            vec![vec![(6, 0, 0, 0)]],
            None,
            Some(&[]),
        );
        assert_eq!(warm.kind, PlanKind::Warm { zygote: None });
        assert_eq!(cold.kind, PlanKind::Job);
        assert_eq!(
            warm.argv,
            vec!["/usr/bin/python3", "-I", "-u", "-c", WARM_BOOTSTRAP]
        );
        // Everything else (mounts aside from the per-job boot id, Landlock, seccomp,
        // limits) is the same plan.
        let strip = |mut plan: JobPlan| {
            plan.argv.clear();
            plan.kind = PlanKind::Job;
            plan.mounts.retain(|m| !matches!(m, MountStep::Mask { .. }));
            plan
        };
        assert_eq!(strip(warm), strip(cold));
    }

    /// Every host-global /proc file the host has is masked, under the procfs (so a
    /// mount template can hold the plan), and none more than once.
    #[test]
    fn host_facts_under_proc_are_masked() {
        let masks: Vec<PathBuf> = mounts(&default_profile())
            .into_iter()
            .filter_map(|m| match m {
                MountStep::Mask { path, .. } => Some(path),
                _ => None,
            })
            .collect();
        for path in [
            "/proc/cmdline",
            "/proc/partitions",
            "/proc/diskstats",
            "/proc/loadavg",
        ] {
            assert!(masks.contains(&PathBuf::from(path)), "{path}: {masks:?}");
        }
        for path in [
            "/proc/pressure/cpu",
            "/proc/config.gz",
            "/proc/sys/kernel/core_pattern",
        ] {
            assert_eq!(
                masks.contains(&PathBuf::from(path)),
                Path::new(path).exists(),
                "{path}"
            );
        }
        let mut unique = masks.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), masks.len(), "{masks:?}");
        assert!(masks.iter().all(|m| m.starts_with("/proc/")));
    }

    #[test]
    fn each_plan_masks_the_boot_id_with_a_fresh_uuid_in_the_kernels_format() {
        let p = default_profile();
        let boot_id = |steps: Vec<MountStep>| {
            let masks: Vec<String> = steps
                .into_iter()
                .filter_map(|m| match m {
                    MountStep::Mask { path, contents }
                        if path == Path::new("/proc/sys/kernel/random/boot_id") =>
                    {
                        Some(contents)
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(masks.len(), 1, "{masks:?}");
            masks.into_iter().next().unwrap()
        };
        let (a, b) = (boot_id(mounts(&p)), boot_id(mounts(&p)));
        assert_ne!(a, b);
        let host = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
        for id in [&a, &b] {
            // As the kernel writes one: 36 lowercase hex digits and hyphens, version 4
            // and the RFC 4122 variant, then a newline; never the host's.
            let line = id.strip_suffix('\n').expect("ends in a newline");
            let groups: Vec<&str> = line.split('-').collect();
            assert_eq!(
                groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
                [8, 4, 4, 4, 12]
            );
            assert!(line
                .chars()
                .all(|c| c == '-' || matches!(c, '0'..='9' | 'a'..='f')));
            assert!(groups[2].starts_with('4'), "{line}");
            assert!(
                matches!(groups[3].as_bytes()[0], b'8'..=b'9' | b'a'..=b'b'),
                "{line}"
            );
            assert_ne!(*id, host);
        }
    }

    /// A host root of this layout (`dir/` a directory, `file` a file, `link -> target`
    /// a symlink) in a temporary directory: the plan tests do not depend on the file
    /// layout of the distribution they run on.
    fn fake_root(layout: &[&str]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for entry in layout {
            let at = |p: &str| root.path().join(p);
            if let Some((link, target)) = entry.split_once(" -> ") {
                std::fs::create_dir_all(at(link).parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(target, at(link)).unwrap();
            } else if let Some(dir) = entry.strip_suffix('/') {
                std::fs::create_dir_all(at(dir)).unwrap();
            } else {
                std::fs::create_dir_all(at(entry).parent().unwrap()).unwrap();
                std::fs::write(at(entry), "").unwrap();
            }
        }
        root
    }

    /// A merged /usr (Debian 12, Fedora, Arch): the top-level directories are links.
    const MERGED_USR: &[&str] = &[
        "usr/bin/",
        "usr/lib/",
        "usr/lib64/",
        "usr/sbin/",
        "bin -> usr/bin",
        "lib -> usr/lib",
        "lib64 -> usr/lib64",
        "sbin -> usr/sbin",
        "etc/ld.so.cache",
        "etc/localtime -> /usr/share/zoneinfo/Etc/UTC",
        "etc/ssl/",
        "etc/fonts/",
    ];

    #[test]
    fn plan_for_the_default_profile() {
        let p = default_profile();
        let host = fake_root(MERGED_USR);
        // The optional binds of directories the host has (fontconfig's /etc/fonts;
        // not /etc/python3.11 here) get Execute like any directory bind; files and
        // symlinks do not.
        let exec_dirs: Vec<PathBuf> = ["/usr", "/etc/ssl", "/etc/fonts"].map(PathBuf::from).into();
        let limits = p.job_limits(&Default::default()).unwrap();
        let args = ["x".to_owned()];
        let plan = build_in(host.path(), 7, &p, &limits, &args, vec![], Some(&[]));
        assert_eq!(
            plan.argv,
            vec![
                "/usr/bin/python3",
                "-I",
                "-u",
                "-c",
                vivarium_sandbox::plan::COLD_PROGRAM,
                "/work/main.py",
                "x"
            ]
        );
        assert_eq!(
            plan.env,
            vec![
                ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
                ("HOME".into(), "/work".into()),
                ("TMPDIR".into(), "/tmp".into()),
                ("USER".into(), "sandbox".into()),
                ("MPLBACKEND".into(), "Agg".into()),
                ("MATPLOTLIBRC".into(), "/etc/matplotlibrc".into()),
                ("MPLCONFIGDIR".into(), "/tmp/matplotlib".into()),
                // limits.thread_hints, with cpu_cores = 1.0
                ("OMP_NUM_THREADS".into(), "1".into()),
                ("OPENBLAS_NUM_THREADS".into(), "1".into()),
                ("MKL_NUM_THREADS".into(), "1".into()),
                ("NUMEXPR_NUM_THREADS".into(), "1".into()),
                ("RAYON_NUM_THREADS".into(), "1".into()),
                ("POLARS_MAX_THREADS".into(), "1".into()),
                ("LANG".into(), "C.UTF-8".into()),
            ]
        );
        assert_eq!(
            plan.cgroup,
            CgroupPlan {
                memory_bytes: 512 << 20,
                pids: 64,
                cpu_quota_us: Some(100_000),
                cpu_period_us: 100_000,
            }
        );
        assert_eq!(
            plan.landlock,
            LandlockPlan {
                abi: 6,
                min_abi: 6,
                read_dirs: vec!["/".into()],
                exec_dirs,
                write_dirs: vec!["/work".into(), "/tmp".into(), "/dev/shm".into()],
                write_files: vec!["/dev/null".into(), "/dev/zero".into(), "/dev/full".into()],
                tcp_connect: vec![],
                // The default profile's private loopback: Landlock handles no TCP.
                tcp_any: true,
            }
        );
        assert_eq!(plan.network, NetworkPlan::Loopback);
        assert_eq!(plan.kind, PlanKind::Job);
        assert_eq!(plan.layers, Layers::FULL);
        // The same profile on a host without a merged /usr: its directories are bound
        // (and may execute), whatever the layout.
        let split = fake_root(&["usr/", "bin/", "lib/", "lib64/", "sbin/", "etc/ssl/"]);
        let plan = build_in(split.path(), 7, &p, &limits, &[], vec![], Some(&[]));
        let want: Vec<PathBuf> = ["/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc/ssl"]
            .map(PathBuf::from)
            .into();
        assert_eq!(plan.landlock.exec_dirs, want);
        // The production plan binds from the host's own root.
        let plan = build(7, &p, &limits, &[], vec![], Some(&[]));
        assert!(plan.mounts.contains(&MountStep::BindRo {
            source: "/usr".into(),
            path: "/usr".into()
        }));
    }

    /// The host's cgroup view reaches the plan as data for init, with its mount points
    /// (and links) as steps of the read-only root; without cgroups there is no view and
    /// the rlimit stand-ins take the limits' place.
    #[test]
    fn a_jobs_cgroup_view_is_planned_on_the_read_only_root() {
        let p = default_profile();
        let limits = p.default_limits();
        let view = vec![
            ViewMount {
                path: "/sys/fs/cgroup/memory".into(),
                fstype: "cgroup".into(),
                data: "memory".into(),
                aliases: vec![],
            },
            ViewMount {
                path: "/sys/fs/cgroup/cpu,cpuacct".into(),
                fstype: "cgroup".into(),
                data: "cpu,cpuacct".into(),
                aliases: vec!["cpu".into(), "cpuacct".into()],
            },
        ];
        let with = build(3, &p, &limits, &[], vec![], Some(&view));
        let without = build(3, &p, &limits, &[], vec![], Some(&[]));
        assert_eq!(with.cgroup_view, view);
        assert_eq!(
            with.mounts[without.mounts.len()..],
            [
                MountStep::Dir {
                    path: "/sys/fs/cgroup/memory".into()
                },
                MountStep::Dir {
                    path: "/sys/fs/cgroup/cpu,cpuacct".into()
                },
                MountStep::Symlink {
                    link: "cpu,cpuacct".into(),
                    path: "/sys/fs/cgroup/cpu".into()
                },
                MountStep::Symlink {
                    link: "cpu,cpuacct".into(),
                    path: "/sys/fs/cgroup/cpuacct".into()
                },
            ]
        );
        // v2: one mount point, the cgroup2 root itself.
        let v2 = [ViewMount {
            path: "/sys/fs/cgroup".into(),
            fstype: "cgroup2".into(),
            data: String::new(),
            aliases: vec![],
        }];
        let plan = build(3, &p, &limits, &[], vec![], Some(&v2));
        assert_eq!(
            plan.mounts.last(),
            Some(&MountStep::Dir {
                path: "/sys/fs/cgroup".into()
            })
        );
        assert!(plan.rlimits.fallback.is_none());
        // No cgroups: nothing under /sys, and the rlimit fallback.
        let none = build(3, &p, &limits, &[], vec![], None);
        assert!(none.cgroup_view.is_empty());
        let under_sys = |m: &MountStep| match m {
            MountStep::Dir { path } | MountStep::Symlink { path, .. } => path.starts_with("/sys"),
            _ => false,
        };
        assert!(!none.mounts.iter().any(under_sys));
        assert!(none.rlimits.fallback.is_some());
        // A warm plan carries the same view.
        let warm = build_warm(3, &p, &limits, vec![], None, Some(&view));
        assert_eq!(warm.cgroup_view, view);
    }

    #[test]
    fn merged_usr_symlinks_are_recreated_and_sandbox_paths_built() {
        let p = default_profile();
        let host = fake_root(MERGED_USR);
        let steps = mounts_in(host.path(), &p);
        // A merged /usr: /bin is a symlink, /usr a directory.
        assert!(steps.contains(&MountStep::Symlink {
            link: "usr/bin".into(),
            path: "/bin".into()
        }));
        assert!(steps.contains(&MountStep::BindRo {
            source: host.path().join("usr"),
            path: "/usr".into()
        }));
        // A missing optional bind is left out (a missing required one fails in the
        // child, with its step's name).
        let at = |path: &str| {
            (steps.iter()).any(|s| matches!(s, MountStep::BindRo { path: p, .. } | MountStep::Symlink { path: p, .. } if p == Path::new(path)))
        };
        assert!(at("/etc/ld.so.cache") && at("/etc/localtime") && !at("/etc/python3.11"));
        let tmpfs: Vec<_> = steps
            .iter()
            .filter_map(|s| match s {
                MountStep::Tmpfs { path, .. } => Some(path.to_str().unwrap()),
                _ => None,
            })
            .collect();
        assert_eq!(tmpfs, vec!["/work", "/tmp", "/dev/shm"]);
        let proc_at = steps
            .iter()
            .position(|s| matches!(s, MountStep::Proc { .. }));
        let dev_at = steps
            .iter()
            .position(|s| matches!(s, MountStep::Device { .. }));
        assert!(proc_at < dev_at);
    }
}
