//! The HTTP frontend's configuration file (TOML), checked as a whole before anything
//! listens: a setting that cannot be honoured is an error, never a silent default.
//! docs/deployment.md documents every key.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

/// Where the frontend listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    /// A Unix stream socket (the tokenless mode's other safe place, or behind a proxy).
    Unix(PathBuf),
}

impl Listen {
    /// `host:port`, `[v6]:port`, or `unix:/path`.
    pub fn parse(s: &str) -> Result<Listen, ConfigError> {
        if let Some(path) = s.strip_prefix("unix:") {
            if !path.starts_with('/') {
                return Err(ConfigError::Invalid(format!(
                    "listen `{s}`: a Unix socket path must be absolute"
                )));
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        s.parse().map(Listen::Tcp).map_err(|_| {
            ConfigError::Invalid(format!(
                "listen `{s}`: expected ADDRESS:PORT (for example 127.0.0.1:8080 or [::]:8443) or unix:/path"
            ))
        })
    }

    /// Loopback or a Unix socket: the only places a tokenless server may listen.
    pub fn is_local(&self) -> bool {
        match self {
            Listen::Tcp(addr) => addr.ip().is_loopback(),
            Listen::Unix(_) => true,
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A configuration that cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `ADDRESS:PORT` or `unix:/path`; `--http` overrides it.
    pub listen: Option<String>,
    /// The canonical resource identifier (RFC 8707/9728): the URL clients connect to,
    /// whose path is the MCP endpoint, e.g. `https://mcp.example.com/mcp`.
    pub resource: Option<Url>,
    /// `Host` values accepted (`name` or `name:port`). Default: the resource's authority.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// `Origin` values accepted when a request carries one (`scheme://host:port`).
    /// Default: the resource's origin only.
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Origins that get CORS headers (browser clients); CORS is off unless set. Each is
    /// also an allowed origin.
    #[serde(default)]
    pub cors_origins: Vec<String>,
    /// Largest request body, bytes (413 beyond).
    pub max_body_bytes: Option<usize>,
    /// Largest request head (request line and headers), bytes (431 beyond).
    pub max_header_bytes: Option<usize>,
    /// Serve without authorization: every caller is one anonymous principal. Allowed only
    /// on loopback or a Unix socket, and said at start.
    #[serde(default)]
    pub insecure_no_auth: bool,
    /// Daemon session handles (`vs_...`) handed over in `session_id`. Off over HTTP: every
    /// principal shares this process's uid at the daemon, so a handle would cross them.
    #[serde(default)]
    pub allow_daemon_handles: bool,
    pub tls: Option<TlsConfig>,
    pub proxy: Option<ProxyConfig>,
    pub auth: Option<AuthConfig>,
    #[serde(default)]
    pub scopes: ScopeConfig,
    #[serde(default)]
    pub limits: PrincipalLimits,
    #[serde(default)]
    pub audit: AuditConfig,
    #[serde(default)]
    pub tasks: TasksConfig,
}

/// Certificate and key files (PEM), reloaded on SIGHUP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `Strict-Transport-Security: max-age=...` on every response (seconds).
    #[serde(default = "default_hsts")]
    pub hsts_max_age: u64,
}

fn default_hsts() -> u64 {
    31_536_000
}

/// Behind a reverse proxy that terminates TLS.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Peer addresses (CIDR) whose `X-Forwarded-For`/`-Proto`/`-Host` are believed;
    /// from any other peer those headers are ignored (and the request is judged by what
    /// it is: plain HTTP from that peer).
    pub trusted: Vec<ipnet::IpNet>,
    /// Send `Strict-Transport-Security` (the proxy serves HTTPS); seconds, 0 for none.
    #[serde(default = "default_hsts")]
    pub hsts_max_age: u64,
}

impl ProxyConfig {
    pub fn trusts(&self, peer: IpAddr) -> bool {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, IpAddr::V4),
            v4 => v4,
        };
        self.trusted.iter().any(|net| net.contains(&peer))
    }
}

/// How access tokens are checked (crate::http::token).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Authorization servers listed in the protected-resource metadata (issuer URLs).
    pub authorization_servers: Vec<Url>,
    /// The `iss` a JWT must carry. Default: the first authorization server, as written.
    pub issuer: Option<String>,
    /// Where the issuer's keys are. Default: discovered from its metadata
    /// (`/.well-known/oauth-authorization-server`, then `openid-configuration`).
    pub jwks_uri: Option<Url>,
    /// Asymmetric algorithms accepted (RS256, RS384, RS512, PS256, PS384, PS512, ES256,
    /// ES384, EdDSA). `none` and HS* are refused at load.
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    /// The JWT `typ` header required (RFC 9068 `at+jwt`; `application/at+jwt` is the
    /// same). `"any"` accepts an issuer that does not set it (or sets `JWT`).
    #[serde(default = "default_typ")]
    pub typ: String,
    /// Clock skew allowed on `exp` and `nbf`, seconds.
    #[serde(default = "default_leeway")]
    pub leeway_seconds: u64,
    /// How long fetched keys are used before they are fetched again, seconds.
    #[serde(default = "default_jwks_cache")]
    pub jwks_cache_seconds: u64,
    /// At most one fetch per this many seconds on an unknown `kid`.
    #[serde(default = "default_jwks_min_refresh")]
    pub jwks_min_refresh_seconds: u64,
    /// Extra CA certificates (PEM) trusted when fetching metadata, keys and introspection
    /// (a private authorization server). The web PKI roots are trusted as well.
    pub ca_file: Option<PathBuf>,
    /// Opaque tokens: RFC 7662 introspection.
    pub introspection: Option<IntrospectionConfig>,
}

fn default_algorithms() -> Vec<String> {
    vec!["RS256".into(), "ES256".into()]
}
fn default_typ() -> String {
    "at+jwt".into()
}
fn default_leeway() -> u64 {
    30
}
fn default_jwks_cache() -> u64 {
    300
}
fn default_jwks_min_refresh() -> u64 {
    30
}

/// RFC 7662 token introspection, for tokens that are not JWTs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    pub endpoint: Url,
    pub client_id: String,
    /// A file holding the client secret (never the secret in this file).
    pub client_secret_file: PathBuf,
    /// Longest an answer is reused (never past the token's `exp`), seconds.
    #[serde(default = "default_introspection_cache")]
    pub cache_seconds: u64,
}

fn default_introspection_cache() -> u64 {
    60
}

/// The scope each capability needs.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ScopeConfig {
    /// `run_python` without a session, `resources/read` of its artifacts, tasks.
    pub run: String,
    /// `run_python` with `session_id`, `close_session`, `list_sessions`.
    pub sessions: String,
    /// `run_python` with `packages`.
    pub packages: String,
}

impl Default for ScopeConfig {
    fn default() -> Self {
        ScopeConfig {
            run: "vivarium:run".into(),
            sessions: "vivarium:sessions".into(),
            packages: "vivarium:packages".into(),
        }
    }
}

impl ScopeConfig {
    /// Every scope, for `scopes_supported`.
    pub fn all(&self) -> Vec<String> {
        let mut all = vec![
            self.run.clone(),
            self.sessions.clone(),
            self.packages.clone(),
        ];
        all.dedup();
        all
    }
}

/// Limits per principal (the instance-wide ones of the command line hold as well).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct PrincipalLimits {
    /// `run_python` calls in any 60 s window (0: unlimited).
    pub calls_per_minute: u32,
    /// Calls running at once.
    pub concurrent_jobs: usize,
    /// Calls waiting for one of this principal's slots.
    pub queued_calls: usize,
    /// Sessions open at once.
    pub sessions: usize,
    /// Tasks kept (running or holding a result) at once.
    pub tasks: usize,
}

impl Default for PrincipalLimits {
    fn default() -> Self {
        PrincipalLimits {
            calls_per_minute: 60,
            concurrent_jobs: 2,
            queued_calls: 8,
            sessions: 4,
            tasks: 16,
        }
    }
}

/// The audit log: one JSON line per call.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuditConfig {
    /// A file (appended, created 0600), or none for the log on stderr (target `audit`).
    pub file: Option<PathBuf>,
    /// Also record the code of each call (off: the code is untrusted and may be secret).
    pub code: bool,
}

/// The Tasks extension (`io.modelcontextprotocol/tasks`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TasksConfig {
    /// A call whose `timeout_seconds` is above this becomes a task, for a client that
    /// declared the extension (a call can also ask for one explicitly).
    pub threshold_seconds: f64,
    /// How long a finished task's result is kept, seconds.
    pub result_ttl_seconds: u64,
}

impl Default for TasksConfig {
    fn default() -> Self {
        TasksConfig {
            threshold_seconds: 60.0,
            result_ttl_seconds: 3600,
        }
    }
}

/// The configuration as served: checked, defaults filled.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub listen: Listen,
    /// The canonical resource URI, exactly as the metadata states it.
    pub resource: Url,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub cors_origins: Vec<String>,
    pub max_body_bytes: usize,
    pub max_header_bytes: usize,
    pub insecure_no_auth: bool,
    pub allow_daemon_handles: bool,
    pub tls: Option<TlsConfig>,
    pub proxy: Option<ProxyConfig>,
    pub auth: Option<AuthConfig>,
    pub scopes: ScopeConfig,
    pub limits: PrincipalLimits,
    pub audit: AuditConfig,
    pub tasks: TasksConfig,
}

pub const DEFAULT_MAX_BODY_BYTES: usize = 4 << 20;
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 << 10;

impl HttpConfig {
    /// Read and check `path`; `listen` overrides the file's.
    pub fn load(path: Option<&Path>, listen: Option<&str>) -> Result<HttpConfig, ConfigError> {
        let file = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                toml::from_str::<FileConfig>(&text).map_err(|e| ConfigError::Parse {
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?
            }
            None => toml::from_str::<FileConfig>("").expect("an empty file is a valid config"),
        };
        HttpConfig::check(file, listen)
    }

    /// Check a parsed file; `listen` overrides its `listen`.
    pub fn check(file: FileConfig, listen: Option<&str>) -> Result<HttpConfig, ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        let Some(listen) = listen.map(str::to_string).or(file.listen.clone()) else {
            return invalid("no address to listen on: pass --http ADDR or set `listen`".into());
        };
        let listen = Listen::parse(&listen)?;
        if file.tls.is_some() && file.proxy.is_some() {
            return invalid(
                "`tls` and `proxy` exclude each other: this server terminates TLS itself, or a \
                 proxy in front of it does"
                    .into(),
            );
        }
        let secure_transport = file.tls.is_some() || file.proxy.is_some();
        if file.insecure_no_auth {
            if file.auth.is_some() {
                return invalid("`insecure_no_auth` and `[auth]` exclude each other".into());
            }
            if !listen.is_local() {
                return invalid(format!(
                    "`insecure_no_auth` serves code execution to anyone who can connect: it is \
                     allowed only on loopback or a Unix socket, not on {listen}"
                ));
            }
        } else if file.auth.is_none() {
            return invalid(
                "authorization is required over HTTP: configure `[auth]` (an authorization \
                 server) or, on loopback or a Unix socket only, set `insecure_no_auth = true`"
                    .into(),
            );
        }
        let resource = match (file.resource.clone(), &listen) {
            (Some(r), _) => r,
            (None, Listen::Tcp(addr)) if file.insecure_no_auth => {
                Url::parse(&format!("http://{addr}/mcp")).expect("a socket address is a host")
            }
            (None, Listen::Unix(_)) if file.insecure_no_auth => {
                Url::parse("http://localhost/mcp").expect("valid")
            }
            (None, _) => {
                return invalid(
                    "`resource` is required with `[auth]`: the URL clients connect to (for \
                     example https://mcp.example.com/mcp), which tokens must name as audience"
                        .into(),
                )
            }
        };
        if resource.fragment().is_some() || resource.query().is_some() {
            return invalid(format!(
                "resource `{resource}`: no query or fragment (RFC 8707)"
            ));
        }
        match resource.scheme() {
            "https" => {
                if !secure_transport {
                    return invalid(format!(
                        "resource `{resource}` is https, but neither `[tls]` nor `[proxy]` is \
                         configured"
                    ));
                }
            }
            "http" => {
                if secure_transport {
                    return invalid(format!(
                        "resource `{resource}` is http while TLS is configured: it must be https"
                    ));
                }
                if file.auth.is_some() && !listen.is_local() {
                    return invalid(format!(
                        "bearer tokens over plain HTTP on {listen}: configure `[tls]` (or \
                         `[proxy]` behind a TLS-terminating proxy), or listen on loopback"
                    ));
                }
            }
            other => return invalid(format!("resource `{resource}`: scheme {other}")),
        }
        if resource.host_str().is_none() {
            return invalid(format!("resource `{resource}` has no host"));
        }
        let authority = authority_of(&resource);
        let allowed_hosts = if file.allowed_hosts.is_empty() {
            let mut hosts = vec![authority.clone()];
            if resource.port().is_none() {
                // A client may send the default port explicitly.
                hosts.push(format!(
                    "{}:{}",
                    resource.host_str().expect("checked"),
                    resource.port_or_known_default().expect("http(s)")
                ));
            }
            hosts
        } else {
            file.allowed_hosts.clone()
        };
        let mut allowed_origins = if file.allowed_origins.is_empty() {
            vec![resource.origin().ascii_serialization()]
        } else {
            file.allowed_origins.clone()
        };
        // A CORS origin is one whose requests are accepted.
        for origin in &file.cors_origins {
            if !allowed_origins.contains(origin) {
                allowed_origins.push(origin.clone());
            }
        }
        if let Some(auth) = &file.auth {
            if auth.authorization_servers.is_empty() {
                return invalid("`[auth] authorization_servers` lists none".into());
            }
            for alg in &auth.algorithms {
                let known = [
                    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
                ];
                if !known.contains(&alg.as_str()) {
                    return invalid(format!(
                        "`[auth] algorithms`: `{alg}` is not an accepted asymmetric algorithm \
                         (one of {})",
                        known.join(", ")
                    ));
                }
            }
            if auth.algorithms.is_empty() {
                return invalid("`[auth] algorithms` lists none".into());
            }
        }
        let scopes = file.scopes.clone();
        for (name, s) in [
            ("run", &scopes.run),
            ("sessions", &scopes.sessions),
            ("packages", &scopes.packages),
        ] {
            if s.is_empty() || s.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\') {
                return invalid(format!(
                    "`[scopes] {name}` = `{s}`: a scope is one non-empty token (no spaces, quotes or backslashes)"
                ));
            }
        }
        let limits = file.limits;
        if limits.concurrent_jobs == 0 {
            return invalid("`[limits] concurrent_jobs` must be at least 1".into());
        }
        if !(file.tasks.threshold_seconds.is_finite() && file.tasks.threshold_seconds >= 0.0) {
            return invalid("`[tasks] threshold_seconds` must be a number >= 0".into());
        }
        Ok(HttpConfig {
            listen,
            resource,
            allowed_hosts,
            allowed_origins,
            cors_origins: file.cors_origins,
            max_body_bytes: file.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY_BYTES),
            max_header_bytes: file.max_header_bytes.unwrap_or(DEFAULT_MAX_HEADER_BYTES),
            insecure_no_auth: file.insecure_no_auth,
            allow_daemon_handles: file.allow_daemon_handles,
            tls: file.tls,
            proxy: file.proxy,
            auth: file.auth,
            scopes,
            limits,
            audit: file.audit,
            tasks: file.tasks,
        })
    }

    /// The HSTS max-age to send, if any.
    pub fn hsts_max_age(&self) -> Option<u64> {
        match (&self.tls, &self.proxy) {
            (Some(tls), _) => Some(tls.hsts_max_age),
            (None, Some(proxy)) if proxy.hsts_max_age > 0 => Some(proxy.hsts_max_age),
            _ => None,
        }
        .filter(|&age| age > 0)
    }

    /// The MCP endpoint's path (the resource's).
    pub fn endpoint_path(&self) -> &str {
        match self.resource.path() {
            "" => "/",
            p => p,
        }
    }

    pub fn leeway(&self) -> Duration {
        Duration::from_secs(self.auth.as_ref().map_or(0, |a| a.leeway_seconds))
    }
}

/// `host` or `host:port` as a client's `Host` header names `url` (the port only when it
/// is not the scheme's default).
pub fn authority_of(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(toml_text: &str, listen: Option<&str>) -> Result<HttpConfig, ConfigError> {
        HttpConfig::check(toml::from_str(toml_text).unwrap(), listen)
    }

    const AUTH: &str = "[auth]\nauthorization_servers = [\"https://as.example\"]\n";

    #[test]
    fn authorization_is_required() {
        let e = check("", Some("127.0.0.1:8080")).unwrap_err().to_string();
        assert!(e.contains("authorization is required"), "{e}");
    }

    #[test]
    fn tokenless_only_on_loopback_or_unix() {
        let c = check("insecure_no_auth = true", Some("127.0.0.1:8080")).unwrap();
        assert_eq!(c.resource.as_str(), "http://127.0.0.1:8080/mcp");
        assert!(check("insecure_no_auth = true", Some("unix:/run/x.sock")).is_ok());
        let e = check("insecure_no_auth = true", Some("0.0.0.0:8080"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only on loopback"), "{e}");
        let e = check("insecure_no_auth = true", Some("[::]:8080"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only on loopback"), "{e}");
    }

    #[test]
    fn tokens_never_over_plain_http_off_loopback() {
        let text = format!("resource = \"http://mcp.example/mcp\"\n{AUTH}");
        let e = check(&text, Some("0.0.0.0:80")).unwrap_err().to_string();
        assert!(e.contains("plain HTTP"), "{e}");
        assert!(check(&text, Some("127.0.0.1:8080")).is_ok());
        let text = format!("resource = \"https://mcp.example/mcp\"\n{AUTH}");
        let e = check(&text, Some("0.0.0.0:443")).unwrap_err().to_string();
        assert!(e.contains("neither `[tls]` nor `[proxy]`"), "{e}");
    }

    #[test]
    fn defaults_come_from_the_resource() {
        let text = format!(
            "resource = \"https://mcp.example/mcp\"\n{AUTH}[tls]\ncert = \"/c\"\nkey = \"/k\"\n"
        );
        let c = check(&text, Some("0.0.0.0:443")).unwrap();
        assert_eq!(c.allowed_hosts, ["mcp.example", "mcp.example:443"]);
        assert_eq!(c.allowed_origins, ["https://mcp.example"]);
        assert_eq!(c.endpoint_path(), "/mcp");
        assert_eq!(c.hsts_max_age(), Some(31_536_000));
        assert_eq!(c.scopes, ScopeConfig::default());
    }

    #[test]
    fn symmetric_and_none_algorithms_are_refused() {
        for alg in ["HS256", "none", "hs512"] {
            let text =
                format!("resource = \"http://127.0.0.1:1/mcp\"\n{AUTH}algorithms = [\"{alg}\"]\n");
            let e = check(&text, Some("127.0.0.1:1")).unwrap_err().to_string();
            assert!(e.contains("not an accepted asymmetric algorithm"), "{e}");
        }
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = toml::from_str::<FileConfig>("listn = \"x\"").unwrap_err();
        assert!(e.to_string().contains("unknown field"), "{e}");
    }

    #[test]
    fn proxies_are_trusted_by_address() {
        let p: ProxyConfig = toml::from_str("trusted = [\"10.0.0.0/8\", \"::1/128\"]").unwrap();
        assert!(p.trusts("10.1.2.3".parse().unwrap()));
        assert!(p.trusts("::ffff:10.1.2.3".parse().unwrap()));
        assert!(p.trusts("::1".parse().unwrap()));
        assert!(!p.trusts("127.0.0.1".parse().unwrap()));
    }
}
