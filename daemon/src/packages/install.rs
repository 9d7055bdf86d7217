//! The install phase: resolve and install a job's requirements with `uv` into a new
//! virtual environment, in a sandbox of its own, built by the same spawner machinery as
//! a job (its own user, mount, pid, net, ipc, uts and cgroup namespaces; unprivileged
//! uid; capabilities dropped; Landlock; seccomp; cgroup limits) with these differences:
//!
//! - the payload is a small driver (`driver.py`, run by the profile's interpreter) that
//!   runs `uv venv` and `uv pip install --only-binary :all:`, then compiles bytecode with
//!   the base interpreter under `-I -S`, and reads the resolved set from the
//!   `.dist-info` directories. No code of any package runs (docs/ARCHITECTURE.md, "No
//!   package code at install time");
//! - the environment is built on a tmpfs at [`ENV_PATH`] inside the sandbox, capped at
//!   `max_env_bytes` and `max_env_inodes` as the writes happen; uv's cache is the
//!   sandbox's `/tmp`, capped the same. Nothing the install writes reaches the host's
//!   disk until the sandbox has ended: then the server copies the tree out
//!   ([`super::tree::copy_tree`], through an fd the spawner took at `Running`), counting
//!   apparent bytes and inodes against the same caps, into the cache;
//! - network: with an index, a network namespace of its own with `lo` up, whose only
//!   way out is the daemon's egress proxy on `127.0.0.1:EGRESS_PORT` ([`crate::egress`]),
//!   allowing the index's host and port and the profile's `allow_hosts` alone (DNS is
//!   the proxy's; nothing inside resolves a name); Landlock allows TCP connect to that
//!   port only. With a wheelhouse alone, a fresh empty network namespace;
//! - limits of its own: `install_timeout_ms` wall clock, memory for both tmpfs mounts
//!   plus 768 MiB, 256 processes, 1024 fds, a file-size limit of `max_env_bytes`.
//!
//! The server plans and runs that sandbox (`server::packages`: the `Manager`,
//! `install_plan`, `run_sandbox`); this module holds what needs no server: the driver
//! and its paths, the judging of a finished install ([`judge`]), the classification of
//! uv's errors ([`classify`]), and the plan change of a job that uses an environment
//! ([`use_env`]).

use super::tree::TreeError;
use super::{PackageError, PackagesSection, ENV_PATH};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use vivarium_proto::ErrorCode;
use vivarium_sandbox::ipc::{JobReport, KillCause};
use vivarium_sandbox::plan::{JobPlan, MountStep};

/// Where uv's directory and the wheelhouse are bound inside the install sandbox.
pub const UV_DIR: &str = "/uv";
pub const WHEELHOUSE: &str = "/wheelhouse";
/// The install driver, run as the sandbox's `/work/main.py`.
pub const DRIVER: &str = include_str!("driver.py");
/// How much of uv's output the server keeps (for error messages).
pub const OUTPUT_CAP: usize = 256 * 1024;
/// Memory of the install besides its two tmpfs mounts (uv, the driver, compileall).
pub const INSTALL_MEMORY_EXTRA: u64 = 768 << 20;
/// Deepest directory nesting copied out of an install (site-packages trees are ~10).
pub const MAX_ENV_DEPTH: usize = 64;
/// What a finished install sandbox left: its report, output, and the environment's
/// directory (an fd to the sandbox's tmpfs, alive after the sandbox).
pub struct Ran {
    pub report: JobReport,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub env: Result<OwnedFd, ExportError>,
}

/// Why an install's environment directory did not come out of its sandbox.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("the sandbox never ran")]
    NeverRan,
    /// The spawner's own words (they cross the link as text).
    #[error("{0}")]
    Spawner(String),
    #[error("no directory fd came")]
    NoFd,
}

/// The driver's last stdout line.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum DriverResult {
    Done {
        resolved: Vec<String>,
        python_version: String,
        platform: String,
    },
    Failed {
        failed: DriverFailure,
    },
}

#[derive(serde::Deserialize)]
struct DriverFailure {
    step: String,
    returncode: i32,
    #[serde(default)]
    space: HashMap<String, Option<Space>>,
}

#[derive(serde::Deserialize, Clone, Copy)]
struct Space {
    bytes_free: u64,
    inodes_free: u64,
}

/// What a finished install sandbox means: the resolved set and Python version, or the
/// failure with its real cause (a limit named with its value, a signal, uv's error).
pub fn judge(
    ran: &Ran,
    names: &[&str],
    section: &PackagesSection,
    plan: &JobPlan,
) -> Result<(Vec<String>, String), PackageError> {
    let report = &ran.report;
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let failed = |m: String| PackageError::new(ErrorCode::InstallFailed, None, m);
    if let Some(f) = &report.failure {
        return Err(failed(format!(
            "the install sandbox failed at {}: {}",
            f.step, f.detail
        )));
    }
    match report.killed {
        Some(KillCause::Timeout | KillCause::CpuLimit) => {
            return Err(PackageError::new(
                ErrorCode::InstallTimeout,
                None,
                format!(
                    "installing {} took longer than the profile's install_timeout_ms ({} ms)",
                    names.join(", "),
                    section.install_timeout_ms
                ),
            ))
        }
        Some(cause) => return Err(failed(format!("the install was stopped ({cause:?})"))),
        None => {}
    }
    if report.oom_kills > 0 {
        return Err(failed(format!(
            "installing {} ran out of memory: the install's limit is {} bytes (2 x max_env_bytes for its tmpfs mounts + {} MiB)",
            names.join(", "),
            plan.cgroup.memory_bytes,
            INSTALL_MEMORY_EXTRA >> 20
        )));
    }
    let text = String::from_utf8_lossy(&ran.stdout);
    let result = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<DriverResult>(l).ok());
    let ok = matches!(
        report.exit,
        Some(vivarium_sandbox::report::WaitStatus::Code(0))
    );
    match result {
        Some(DriverResult::Done {
            resolved,
            python_version,
            platform,
        }) if ok => {
            let mut resolved: Vec<String> = resolved
                .iter()
                .filter_map(|r| {
                    let (name, version) = r.split_once("==")?;
                    Some(format!(
                        "{}=={}",
                        super::spec::normalize_name(name),
                        version.trim()
                    ))
                })
                .collect();
            resolved.sort();
            resolved.dedup();
            Ok((resolved, format!("{python_version} ({platform})")))
        }
        Some(DriverResult::Failed { failed: f }) => Err(step_failure(&f, &stderr, names, section)),
        _ => Err(failed(format!(
            "the install driver reported nothing ({:?}): {}",
            report.exit,
            tail(&stderr)
        ))),
    }
}

/// A driver step that failed: the limit it ran into, the signal that killed it, or
/// uv's own error.
fn step_failure(
    f: &DriverFailure,
    stderr: &str,
    names: &[&str],
    section: &PackagesSection,
) -> PackageError {
    let what = names.join(", ");
    let too_large = |m: String| PackageError::new(ErrorCode::EnvironmentTooLarge, None, m);
    if f.returncode == -libc::SIGXFSZ {
        return too_large(format!(
            "installing {what}: {} wrote a file larger than the install's file-size limit ({} bytes, the profile's max_env_bytes)",
            f.step, section.max_env_bytes
        ));
    }
    if f.returncode < 0 {
        return PackageError::new(
            ErrorCode::InstallFailed,
            None,
            format!(
                "installing {what}: the {} step was killed by signal {}: {}",
                f.step,
                -f.returncode,
                tail(stderr)
            ),
        );
    }
    let full = stderr.contains("No space left on device") || stderr.contains("os error 28");
    if full {
        return out_of_space(f, stderr, &what, section);
    }
    classify(stderr, names, section)
}

/// Which tmpfs of the install ran out (the environment, or uv's cache in /tmp), and of
/// what. The free space the driver measured after the failure is not enough on its own:
/// uv removes its half-extracted files before it exits, so a cache that ran out of
/// inodes has them back by then. uv's error names the path it failed on and the
/// operation: creating an empty file or directory needs no block, only an inode.
fn out_of_space(
    f: &DriverFailure,
    stderr: &str,
    what: &str,
    section: &PackagesSection,
) -> PackageError {
    let line = stderr
        .lines()
        .find(|l| l.contains("No space left on device") || l.contains("os error 28"))
        .unwrap_or("");
    let path = line.split('`').nth(1).unwrap_or("");
    let creating = [
        "failed to create file",
        "failed to create directory",
        "create_dir",
    ]
    .iter()
    .any(|op| line.contains(op));
    let space = |p: &str| f.space.get(p).copied().flatten();
    // The path uv names; without one, the cache if it is visibly full.
    let cache_full = space("/tmp").is_some_and(|s| s.inodes_free == 0 || s.bytes_free == 0);
    let in_cache = path.starts_with("/tmp") || (!path.starts_with(ENV_PATH) && cache_full);
    let (place, name) = if in_cache {
        ("/tmp", "uv's download cache (/tmp)")
    } else {
        (ENV_PATH, "the environment")
    };
    let inodes =
        space(place).is_some_and(|s| s.inodes_free == 0 || (creating && s.bytes_free >= 64 << 10));
    let message = if inodes {
        format!(
            "installing {what} needs more than the profile's max_env_inodes ({}) files in {name}",
            section.max_env_inodes
        )
    } else {
        format!(
            "installing {what} needs more than the profile's max_env_bytes ({} bytes) in {name}",
            section.max_env_bytes
        )
    };
    PackageError::new(ErrorCode::EnvironmentTooLarge, None, message)
}

/// A copy out of the install that crossed a limit, or met what an environment never
/// holds.
pub fn copy_error(e: &TreeError, names: &[&str], section: &PackagesSection) -> PackageError {
    let what = names.join(", ");
    match e {
        TreeError::TooLarge { .. } => PackageError::new(
            ErrorCode::EnvironmentTooLarge,
            None,
            format!(
                "the environment for {what} is larger than the profile's max_env_bytes ({} bytes, apparent size: sparse files count in full)",
                section.max_env_bytes
            ),
        ),
        TreeError::TooManyInodes { .. } => PackageError::new(
            ErrorCode::EnvironmentTooLarge,
            None,
            format!(
                "the environment for {what} holds more than the profile's max_env_inodes ({}) files",
                section.max_env_inodes
            ),
        ),
        other => PackageError::new(
            ErrorCode::InstallFailed,
            None,
            format!(
                "the environment for {what} was refused: {}",
                vivarium_proto::error_chain(other)
            ),
        ),
    }
}

fn too_large(names: &[&str], section: &PackagesSection) -> PackageError {
    PackageError::new(
        ErrorCode::EnvironmentTooLarge,
        None,
        format!(
            "installing {} needs more than the profile's max_env_bytes ({} bytes)",
            names.join(", "),
            section.max_env_bytes
        ),
    )
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("Using Python"))
        .collect();
    let start = lines.len().saturating_sub(8);
    let mut t = lines[start..].join("\n");
    if t.len() > 2000 {
        let mut cut = t.len() - 2000;
        while !t.is_char_boundary(cut) {
            cut += 1;
        }
        t = t[cut..].to_owned();
    }
    t
}

/// Turn uv's error output into a typed error naming the package.
pub fn classify(stderr: &str, names: &[&str], section: &PackagesSection) -> PackageError {
    static RES: std::sync::OnceLock<[regex::Regex; 6]> = std::sync::OnceLock::new();
    let [not_found, no_version, no_wheels, wheels_required, you_require, only_available] =
        RES.get_or_init(|| {
        [
            r"Because ([A-Za-z0-9._-]+) was not found in the (?:package registry|provided package locations)",
            r"there is no version of ([A-Za-z0-9._-]+)",
            r"([A-Za-z0-9._-]+)(?:==\S+)? has no usable wheels",
            r"Wheels are required for `([A-Za-z0-9._-]+)`",
            r"you require ([A-Za-z0-9._-]+)",
            r"Because only ([A-Za-z0-9._-]+?)[<>=!~]\S* (?:is|are) available and you require ([A-Za-z0-9._-]+?)[<>=!~ ,]",
        ]
        .map(|r| regex::Regex::new(r).expect("uv error patterns compile"))
    });
    let cause = tail(stderr);
    let first = |re: &regex::Regex| re.captures(stderr).map(|c| c[1].to_owned());
    let err = |code, pkg: Option<String>, msg: String| PackageError {
        code,
        package: pkg,
        message: msg,
    };
    if stderr.contains("No space left on device") || stderr.contains("Disk quota exceeded") {
        return too_large(names, section);
    }
    let unreachable = [
        "Failed to fetch",
        "error sending request",
        "tcp connect error",
        "dns error",
        "Connection refused",
        "Network is unreachable",
        "operation timed out",
    ];
    if unreachable.iter().any(|p| stderr.contains(p)) && !stderr.contains("No solution found") {
        let index = section.index_url.as_deref().unwrap_or("(none)");
        return err(
            ErrorCode::IndexUnreachable,
            names.first().map(|s| s.to_string()),
            format!("the package index {index} could not be reached: {cause}"),
        );
    }
    if stderr.contains("No solution found") {
        if let Some(p) = first(no_wheels).or_else(|| first(wheels_required)) {
            return err(
                ErrorCode::NoCompatibleWheel,
                Some(p.clone()),
                format!("{p}: no wheel for this platform (source distributions are never built): {cause}"),
            );
        }
        if let Some(p) = first(not_found) {
            return err(
                ErrorCode::PackageNotFound,
                Some(p.clone()),
                format!("{p}: not found on the index or in the wheelhouse"),
            );
        }
        // "Because only x==1.0 is available and you require x>=2": the project exists,
        // but no version of it satisfies what was asked.
        let unmatched = only_available
            .captures(stderr)
            .filter(|c| c[1] == c[2])
            .map(|c| c[1].to_owned());
        if let Some(p) = first(no_version).or(unmatched) {
            return err(
                ErrorCode::PackageNotFound,
                Some(p.clone()),
                format!("{p}: no version matches the requirement: {cause}"),
            );
        }
        let p = first(you_require).or_else(|| names.first().map(|s| s.to_string()));
        return err(
            ErrorCode::ResolutionConflict,
            p,
            format!("the requirements conflict: {cause}"),
        );
    }
    err(
        ErrorCode::InstallFailed,
        None,
        format!("installing {} failed: {cause}", names.join(", ")),
    )
}

/// The job plan of a job that uses `env`: the environment bound read-only at
/// [`ENV_PATH`], and its `bin/python` (a symlink to the profile's interpreter, so
/// `pyvenv.cfg` makes `site` add its site-packages, also under `-I`) as argv[0].
pub fn use_env(plan: &mut JobPlan, env: &Path) {
    let at = plan
        .mounts
        .iter()
        .position(|m| matches!(m, MountStep::File { .. }))
        .unwrap_or(0);
    plan.mounts.insert(
        at,
        MountStep::BindRo {
            source: env.to_owned(),
            path: ENV_PATH.into(),
        },
    );
    let python = format!("{ENV_PATH}/bin/python");
    plan.interpreter = PathBuf::from(&python);
    if let Some(a0) = plan.argv.first_mut() {
        *a0 = python;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> PackagesSection {
        PackagesSection {
            enabled: true,
            index_url: Some("http://127.0.0.1:9/simple".into()),
            ..Default::default()
        }
    }

    /// Failures name their real cause and the limit with its value.
    #[test]
    fn driver_failures_name_the_limit() {
        let s = PackagesSection {
            enabled: true,
            find_links: Some("/w".into()),
            max_env_bytes: 16 << 20,
            max_env_inodes: 4_000,
            ..Default::default()
        };
        let failure = |rc: i32, env: (u64, u64), tmp: (u64, u64)| DriverFailure {
            step: "install".into(),
            returncode: rc,
            space: [
                (
                    ENV_PATH.to_owned(),
                    Some(Space {
                        bytes_free: env.0,
                        inodes_free: env.1,
                    }),
                ),
                (
                    "/tmp".to_owned(),
                    Some(Space {
                        bytes_free: tmp.0,
                        inodes_free: tmp.1,
                    }),
                ),
            ]
            .into_iter()
            .collect(),
        };
        let enospc =
            "error: Failed to install: x.whl\n  Caused by: No space left on device (os error 28)\n";
        let e = step_failure(
            &failure(2, (1 << 20, 0), (8 << 20, 100)),
            enospc,
            &["x"],
            &s,
        );
        assert_eq!(e.code, ErrorCode::EnvironmentTooLarge);
        assert!(
            e.message.contains("max_env_inodes (4000)") && e.message.contains("the environment"),
            "{e}"
        );
        let e = step_failure(&failure(2, (8 << 20, 9), (0, 100)), enospc, &["x"], &s);
        assert!(
            e.message.contains("max_env_bytes (16777216 bytes)") && e.message.contains("/tmp"),
            "{e}"
        );
        // uv's own words (0.13): its cache ran out of inodes, and it removed the partial
        // extraction before exiting, so the inodes were back when the driver looked.
        let uv = "error: Failed to download `vivmany==1.0`\n  cause: Failed to extract archive: /wheelhouse/vivmany-1.0-py3-none-any.whl\n  cause: I/O operation failed during extraction\n  cause: failed to create file `/tmp/uv-cache/.tmpgCyGs8/vivmany/f1931.txt`: No space left on device (os error 28)\n";
        let e = step_failure(
            &failure(2, (8 << 20, 3_900), (8 << 20, 3_990)),
            uv,
            &["vivmany"],
            &s,
        );
        assert!(
            e.message.contains("max_env_inodes (4000)") && e.message.contains("/tmp"),
            "{e}"
        );
        let uv = "error: Failed to install: big.whl\n  cause: failed to write to file `/env/lib/python3.11/site-packages/big/blob.bin`: No space left on device (os error 28)\n";
        let e = step_failure(
            &failure(2, (4096, 3_900), (8 << 20, 3_990)),
            uv,
            &["big"],
            &s,
        );
        assert!(
            e.message
                .contains("max_env_bytes (16777216 bytes) in the environment"),
            "{e}"
        );
        let e = step_failure(
            &failure(-libc::SIGXFSZ, (8 << 20, 9), (8 << 20, 9)),
            "",
            &["duckdb"],
            &s,
        );
        assert_eq!(e.code, ErrorCode::EnvironmentTooLarge);
        assert!(e.message.contains("file-size limit (16777216 bytes"), "{e}");
        let e = step_failure(&failure(-libc::SIGSEGV, (1, 1), (1, 1)), "", &["x"], &s);
        assert_eq!(e.code, ErrorCode::InstallFailed);
        assert!(e.message.contains("signal 11"), "{e}");
        let e = copy_error(&TreeError::TooLarge { limit: 16 << 20 }, &["x"], &s);
        assert!(e.message.contains("sparse files count"), "{e}");
        let e = copy_error(&TreeError::TooManyInodes { limit: 4000 }, &["x"], &s);
        assert!(e.message.contains("max_env_inodes (4000)"), "{e}");
    }

    #[test]
    fn uv_errors_are_classified() {
        let s = section();
        let cases = [
            ("error: No solution found when resolving dependencies\n  cause: Because nosuchpkg was not found in the provided package locations and you require nosuchpkg, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("nosuchpkg")),
            ("error: No solution found when resolving dependencies\n  cause: Because nosuchpkg was not found in the package registry and you require nosuchpkg, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("nosuchpkg")),
            ("error: No solution found when resolving dependencies\n  cause: Because there is no version of vivtiny==3 and you require vivtiny==3, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("vivtiny")),
            ("error: No solution found when resolving dependencies\n  cause: Because all versions of vivneeds depend on vivdep==1.0 and you require vivneeds, we can conclude that you require vivdep==1.0.\n         And because you require vivdep==2.0, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::ResolutionConflict, Some("vivneeds")),
            ("error: No solution found when resolving dependencies\n  cause: Because vivsdist==1.0 has no usable wheels and only vivsdist==1.0 is available, we can conclude that all versions of vivsdist cannot be used.\n\nhint: Wheels are required for `vivsdist` because building from source is disabled for all packages (i.e., with `--no-build`)\n", ErrorCode::NoCompatibleWheel, Some("vivsdist")),
            ("error: Request failed after 3 retries in 4.9s\n  cause: Failed to fetch: http://127.0.0.1:9/simple/x/\n  cause: error sending request for url (http://127.0.0.1:9/simple/x/)\n  cause: client error (Connect)\n  cause: tcp connect error\n  cause: Connection refused (os error 111)\n", ErrorCode::IndexUnreachable, Some("x")),
            ("error: Failed to install: x.whl\n  Caused by: No space left on device (os error 28)\n", ErrorCode::EnvironmentTooLarge, None),
            ("error: No solution found when resolving dependencies\n  cause: Because only vivtiny==1.0 is available and you require vivtiny>=2, we can conclude that your requirements are unsatisfiable.\n", ErrorCode::PackageNotFound, Some("vivtiny")),
            ("error: something new\n", ErrorCode::InstallFailed, None),
        ];
        for (stderr, code, pkg) in cases {
            let e = classify(stderr, &["x"], &s);
            assert_eq!((e.code, e.package.as_deref()), (code, pkg), "{stderr}");
            if let Some(p) = pkg {
                assert!(e.message.contains(p), "{}", e.message);
            }
        }
    }
}
