//! PyPI packages for jobs: a job names PEP 508 requirements (or a PEP 723 block in its
//! code); the server resolves and installs them with a pinned `uv` into a new virtual
//! environment, inside a sandbox of its own (the install phase), caches that
//! environment, and binds it read-only into the job's sandbox (the run phase).
//!
//! - [`spec`]: requirement parsing, PEP 723, allow/deny lists.
//! - [`cache`]: the on-disk environment cache (keys, completion, checksum, LRU).
//! - [`install`]: the install sandbox's driver, the judging of its result and the
//!   reading of uv's errors.
//! - [`tree`]: the bounded copy of a built environment out of its sandbox, and the
//!   apparent-size accounting of environments.
//!
//! Running installs against the daemon (the `Manager`: in-flight deduplication, the
//! install sandbox's plan and its run through the spawner, the glue the job task calls)
//! is the server's, in `server::packages`. This module imports no other module of
//! vivariumd: `profile` uses it for its `[packages]` section, requirement parsing and
//! `host:port` entries, never the other way round.

pub mod cache;
pub mod install;
pub mod spec;
pub mod tree;

use serde::Deserialize;
use std::path::PathBuf;
use vivarium_proto::ErrorCode;

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
    /// install sandbox reaches it only through the daemon's egress proxy, which allows
    /// this URL's host and port and `allow_hosts` alone. Unset: no index, no network at
    /// all (a wheelhouse alone).
    pub index_url: Option<String>,
    /// Further `host` or `host:port` (443 when no port is given) the install may reach
    /// through the proxy: where the index's links point (PyPI's files live on
    /// `files.pythonhosted.org`).
    pub allow_hosts: Vec<String>,
    /// A local directory of wheels (uv's `--find-links`), bound read-only into the
    /// install sandbox: for hosts without network.
    pub find_links: Option<PathBuf>,
    /// If non-empty, only these projects (PEP 503-normalized names) may be asked for.
    /// Dependencies pulled in by them are not checked.
    pub allow: Vec<String>,
    /// These projects may never be asked for.
    pub deny: Vec<String>,
    /// Largest environment, in apparent bytes (a sparse file counts by its size). The
    /// environment is built on a tmpfs of this size inside the install sandbox, and the
    /// install also gets this much scratch space for uv's cache, and a file-size limit
    /// of this much.
    pub max_env_bytes: u64,
    /// Most files, directories and links in an environment (the same tmpfs's inode
    /// cap; uv's cache gets as many).
    pub max_env_inodes: u64,
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
            allow_hosts: Vec::new(),
            max_env_bytes: 1 << 30,
            max_env_inodes: 200_000,
            install_timeout_ms: 300_000,
        }
    }
}

impl PackagesSection {
    /// Profile validation of the section: `Err((field, problem))`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if let Some(url) = &self.index_url {
            index_port(url).map_err(|e| ("packages.index_url", vivarium_proto::error_chain(&e)))?;
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
        if !(1000..=10_000_000).contains(&self.max_env_inodes) {
            return Err((
                "packages.max_env_inodes",
                "must be 1000 ..= 10000000".into(),
            ));
        }
        for host in &self.allow_hosts {
            host_port(host)
                .map_err(|e| ("packages.allow_hosts", vivarium_proto::error_chain(&e)))?;
        }
        if !self.allow_hosts.is_empty() && self.index_url.is_none() {
            return Err((
                "packages.allow_hosts",
                "needs packages.index_url (without an index the install has no network)".into(),
            ));
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

/// Why an index URL, or a `host` / `host:port` entry (`packages.allow_hosts`,
/// `network.egress`), is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("{url:?} is not a URL")]
    NotAUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("{url:?} must be an http(s) URL with a host")]
    NotHttp { url: String },
    #[error("{url:?} must not carry credentials")]
    Credentials { url: String },
    #[error("{url:?} has no port")]
    NoPort { url: String },
    /// `text`: the URL or the entry.
    #[error("{text:?} has no host")]
    NoHost { text: String },
    #[error("{entry:?} is not a host or host:port")]
    NotAHost {
        entry: String,
        #[source]
        source: url::ParseError,
    },
    #[error("{entry:?} must be a host or host:port alone")]
    NotAlone { entry: String },
}

/// The TCP port of an index URL (http or https only, with a host).
pub fn index_port(url: &str) -> Result<u16, AddressError> {
    index_host(url).map(|(_, port)| port)
}

/// The host and TCP port of an index URL (http or https only, with a host, no
/// credentials: the proxy would refuse them, and they would end up in logs).
pub fn index_host(url: &str) -> Result<(String, u16), AddressError> {
    let url_text = || url.to_owned();
    let u = url::Url::parse(url).map_err(|source| AddressError::NotAUrl {
        url: url_text(),
        source,
    })?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(AddressError::NotHttp { url: url_text() });
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(AddressError::Credentials { url: url_text() });
    }
    let port = u
        .port_or_known_default()
        .ok_or_else(|| AddressError::NoPort { url: url_text() })?;
    let host = match u.host() {
        Some(url::Host::Ipv6(a)) => a.to_string(),
        Some(h) => h.to_string(),
        None => return Err(AddressError::NoHost { text: url_text() }),
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// An `allow_hosts` entry: `host` (port 443) or `host:port`, `[v6]:port` for IPv6.
pub fn host_port(entry: &str) -> Result<(String, u16), AddressError> {
    let u =
        url::Url::parse(&format!("https://{entry}")).map_err(|source| AddressError::NotAHost {
            entry: entry.to_owned(),
            source,
        })?;
    let plain = u.path() == "/" && u.query().is_none() && u.fragment().is_none();
    if !plain || !u.username().is_empty() || u.password().is_some() || entry.contains('/') {
        return Err(AddressError::NotAlone {
            entry: entry.to_owned(),
        });
    }
    let host = match u.host() {
        Some(url::Host::Ipv6(a)) => a.to_string(),
        Some(h) => h.to_string(),
        None => {
            return Err(AddressError::NoHost {
                text: entry.to_owned(),
            })
        }
    };
    Ok((host.to_ascii_lowercase(), u.port().unwrap_or(443)))
}

impl PackagesSection {
    /// Where the install may go through the egress proxy: the index's host and port,
    /// then `allow_hosts`. Empty without an index.
    pub fn egress_allow(&self) -> Vec<(String, u16)> {
        let Some(url) = &self.index_url else {
            return Vec::new();
        };
        let mut out: Vec<(String, u16)> = index_host(url).into_iter().collect();
        for h in &self.allow_hosts {
            if let Ok(hp) = host_port(h) {
                if !out.contains(&hp) {
                    out.push(hp);
                }
            }
        }
        out
    }
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
    fn egress_hosts_are_the_index_and_allow_hosts() {
        let s = PackagesSection {
            enabled: true,
            index_url: Some("https://PyPI.org/simple".into()),
            allow_hosts: vec![
                "files.pythonhosted.org".into(),
                "mirror.example:8443".into(),
                "pypi.org".into(),
            ],
            ..Default::default()
        };
        assert!(s.validate().is_ok());
        assert_eq!(
            s.egress_allow(),
            [
                ("pypi.org".to_owned(), 443),
                ("files.pythonhosted.org".to_owned(), 443),
                ("mirror.example".to_owned(), 8443)
            ]
        );
        assert_eq!(host_port("[::1]:9"), Ok(("::1".to_owned(), 9)));
        for bad in ["", "a/b", "user@host", "host:0x", "https://h", "h:99999"] {
            let s = PackagesSection {
                allow_hosts: vec![bad.into()],
                ..s.clone()
            };
            assert_eq!(
                s.validate().expect_err(bad).0,
                "packages.allow_hosts",
                "{bad}"
            );
        }
        let no_index = PackagesSection {
            enabled: true,
            index_url: None,
            find_links: Some("/srv/w".into()),
            allow_hosts: vec!["x.example".into()],
            ..Default::default()
        };
        assert_eq!(no_index.validate().unwrap_err().0, "packages.allow_hosts");
        assert!(no_index.egress_allow().is_empty());
        let creds = PackagesSection {
            index_url: Some("https://u:p@pypi.org/simple".into()),
            ..Default::default()
        };
        assert_eq!(creds.validate().unwrap_err().0, "packages.index_url");
    }

    #[test]
    fn index_ports() {
        assert_eq!(index_port("https://pypi.org/simple"), Ok(443));
        assert_eq!(index_port("http://127.0.0.1:9/simple"), Ok(9));
        assert_eq!(index_port("http://mirror.local/simple"), Ok(80));
    }
}
