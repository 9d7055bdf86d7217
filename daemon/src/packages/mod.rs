//! PyPI packages for jobs: a job names PEP 508 requirements (or a PEP 723 block in its
//! code); the server resolves and installs them with a pinned `uv` into a new virtual
//! environment, inside a sandbox of its own (the install phase), caches that
//! environment, and binds it read-only into the job's sandbox (the run phase).
//!
//! - [`spec`]: requirement parsing, PEP 723, allow/deny lists.
//! - [`cache`]: the on-disk environment cache (keys, completion, checksum, LRU).
//! - [`install`]: the install sandbox and the reading of uv's errors.
//! - [`Manager`]: in-flight deduplication and the glue the job task calls.

pub mod cache;
pub mod install;
pub mod spec;

use serde::Deserialize;
use std::path::{Path, PathBuf};
use vivarium_proto::ErrorCode;

pub use install::Manager;

/// Where a job's environment is mounted (read-only), and built, inside the sandbox.
/// Fixed, so that the paths uv writes into the environment hold in both phases.
pub const ENV_PATH: &str = "/env";

/// The `[packages]` section of a profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PackagesSection {
    /// Whether jobs of this profile may ask for packages.
    pub enabled: bool,
    /// The package index (PEP 503 simple API), e.g. `https://pypi.org/simple`. The
    /// install sandbox may open TCP connections to this URL's port (and 53 for DNS)
    /// only. Unset: no index, no network at all (a wheelhouse alone).
    pub index_url: Option<String>,
    /// A local directory of wheels (uv's `--find-links`), bound read-only into the
    /// install sandbox: for hosts without network.
    pub find_links: Option<PathBuf>,
    /// If non-empty, only these projects (PEP 503-normalized names) may be asked for.
    /// Dependencies pulled in by them are not checked.
    pub allow: Vec<String>,
    /// These projects may never be asked for.
    pub deny: Vec<String>,
    /// Largest environment (bytes on disk); the install also gets this much scratch
    /// space for uv's cache.
    pub max_env_bytes: u64,
    /// Wall-clock limit of the install phase.
    pub install_timeout_ms: u64,
}

impl Default for PackagesSection {
    fn default() -> Self {
        PackagesSection {
            enabled: false,
            index_url: None,
            find_links: None,
            allow: Vec::new(),
            deny: Vec::new(),
            max_env_bytes: 1 << 30,
            install_timeout_ms: 300_000,
        }
    }
}

impl PackagesSection {
    /// Profile validation of the section: `Err((field, problem))`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if let Some(url) = &self.index_url {
            index_port(url).map_err(|e| ("packages.index_url", e))?;
        }
        if let Some(dir) = &self.find_links {
            if !dir.is_absolute() || dir.components().any(|c| c.as_os_str() == "..") {
                return Err((
                    "packages.find_links",
                    format!("{} must be absolute without '..'", dir.display()),
                ));
            }
        }
        if self.enabled && self.index_url.is_none() && self.find_links.is_none() {
            return Err((
                "packages.enabled",
                "needs packages.index_url or packages.find_links".into(),
            ));
        }
        if !(1 << 20..=64 << 30).contains(&self.max_env_bytes) {
            return Err(("packages.max_env_bytes", "must be 1 MiB ..= 64 GiB".into()));
        }
        if !(1000..=3_600_000).contains(&self.install_timeout_ms) {
            return Err((
                "packages.install_timeout_ms",
                "must be 1000 ..= 3600000".into(),
            ));
        }
        for name in self.allow.iter().chain(&self.deny) {
            if spec::normalize_name(name).is_empty() {
                return Err(("packages.allow", format!("invalid project name {name:?}")));
            }
        }
        Ok(())
    }
}

/// The TCP port of an index URL (http or https only, with a host).
pub fn index_port(url: &str) -> Result<u16, String> {
    let u = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(format!("{url:?} must be an http(s) URL with a host"));
    }
    u.port_or_known_default()
        .ok_or_else(|| format!("{url:?} has no port"))
}

/// A typed package failure: the wire error code, the project concerned (when one is),
/// and a message for humans that names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PackageError {
    pub code: ErrorCode,
    pub package: Option<String>,
    pub message: String,
}

impl PackageError {
    pub fn new(code: ErrorCode, package: Option<&str>, message: String) -> Self {
        PackageError {
            code,
            package: package.map(str::to_owned),
            message,
        }
    }
}

/// In the spawner, before the clone: give a package install's build directories to the
/// payload's host ids (uid 1000 inside the job in id slot `slot`). A rootless daemon's
/// jobs already are the daemon's own user.
pub fn own_dirs(dirs: &[PathBuf], rootless: bool, id_base: u32, slot: u32) -> std::io::Result<()> {
    if rootless {
        return Ok(());
    }
    let host = id_base + 2 * slot + 1;
    for dir in dirs {
        // Not following symlinks: the server just created this directory itself.
        std::os::unix::fs::lchown(dir, Some(host), Some(host))?;
    }
    Ok(())
}

/// Sum of file sizes (st_blocks-based disk usage) beneath `dir`, not following links.
pub fn disk_usage(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_validation() {
        let ok = |s: PackagesSection| s.validate();
        assert!(ok(PackagesSection::default()).is_ok());
        #[track_caller]
        fn field(s: PackagesSection) -> &'static str {
            let dbg = format!("{s:?}");
            s.validate().expect_err(&dbg).0
        }
        assert_eq!(
            field(PackagesSection {
                enabled: true,
                ..Default::default()
            }),
            "packages.enabled"
        );
        for bad in [
            "ftp://x/simple",
            "pypi.org/simple",
            "file:///srv/simple",
            "not a url",
        ] {
            let s = PackagesSection {
                index_url: Some(bad.into()),
                ..Default::default()
            };
            assert_eq!(field(s), "packages.index_url", "{bad}");
        }
        let s = PackagesSection {
            find_links: Some("wheels".into()),
            ..Default::default()
        };
        assert_eq!(field(s), "packages.find_links");
        let s = PackagesSection {
            max_env_bytes: 10,
            ..Default::default()
        };
        assert_eq!(field(s), "packages.max_env_bytes");
        let s = PackagesSection {
            install_timeout_ms: 0,
            ..Default::default()
        };
        assert_eq!(field(s), "packages.install_timeout_ms");
    }

    #[test]
    fn index_ports() {
        assert_eq!(index_port("https://pypi.org/simple"), Ok(443));
        assert_eq!(index_port("http://127.0.0.1:9/simple"), Ok(9));
        assert_eq!(index_port("http://mirror.local/simple"), Ok(80));
    }
}
