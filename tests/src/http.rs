//! The HTTP frontend's test kit (`vivarium-mcp --http`, tests/mcp_http*.rs): a test
//! issuer on loopback (RFC 8414 metadata and a JWKS of an EC P-256 key made here) that
//! signs valid and forged tokens, a running frontend with its audit log, JSON-RPC over
//! HTTP, and a test CA for TLS.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use crate::{bin, Daemon};

pub const SCOPES: &str = "vivarium:run vivarium:sessions vivarium:packages";

/// A signing key and its JWK.
pub struct Key {
    pub kid: String,
    pub encoding: EncodingKey,
    pub jwk: Value,
    pub public_pem: String,
}

impl Key {
    pub fn new(kid: &str) -> Key {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = pair.public_key_raw();
        assert_eq!(raw.len(), 65, "an uncompressed P-256 point");
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": B64.encode(&raw[1..33]), "y": B64.encode(&raw[33..65]),
        });
        Key {
            kid: kid.into(),
            encoding: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
            jwk,
            public_pem: pair.public_key_pem(),
        }
    }
}

/// The test's authorization server: RFC 8414 metadata and a JWKS (one key).
pub struct Issuer {
    pub url: String,
    pub key: Key,
    /// Not in the JWKS.
    pub stranger: Key,
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl Issuer {
    pub async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let key = Key::new("k1");
        let jwks = json!({ "keys": [key.jwk.clone()] });
        let metadata = json!({
            "issuer": url,
            "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
        });
        let app = axum::Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                axum::routing::get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/jwks",
                axum::routing::get(move || async move { axum::Json(jwks) }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Issuer {
            url,
            key,
            stranger: Key::new("k2"),
        }
    }

    pub fn claims(&self, resource: &str, sub: &str) -> Value {
        let t = now();
        json!({
            "iss": self.url, "aud": resource, "sub": sub, "client_id": "test-client",
            "scope": SCOPES, "iat": t, "nbf": t - 5, "exp": t + 600, "jti": format!("{sub}-{t}"),
        })
    }

    pub fn sign_with(&self, key: &Key, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
    }

    pub fn sign(&self, claims: &Value) -> String {
        self.sign_with(&self.key, claims)
    }

    pub fn token(&self, resource: &str, sub: &str) -> String {
        self.sign(&self.claims(resource, sub))
    }
}

/// A reqwest client (its rustls needs a provider: ring, as the frontend's).
pub fn plain_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().build().unwrap()
}

/// A free loopback port (bound and released: the resource URL must name it up front).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `vivarium-mcp --http`, killed on drop.
pub struct Frontend {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub url: String,
    pub addr: SocketAddr,
}

impl Frontend {
    /// Start it on `addr` with `config` (TOML, without `listen`) for `daemon`.
    pub fn start(daemon: &Daemon, addr: SocketAddr, config: &str) -> Frontend {
        Frontend::try_start(daemon.socket(), addr, config).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_start(socket: &Path, addr: SocketAddr, config: &str) -> Result<Frontend, String> {
        Frontend::try_start_with_args(socket, addr, config, &[])
    }

    /// [`Frontend::start`] with extra command-line arguments (e.g. the instance-wide
    /// `--max-calls-per-minute 0`).
    pub fn start_with_args(
        daemon: &Daemon,
        addr: SocketAddr,
        config: &str,
        args: &[&str],
    ) -> Frontend {
        Frontend::try_start_with_args(daemon.socket(), addr, config, args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn try_start_with_args(
        socket: &Path,
        addr: SocketAddr,
        config: &str,
        args: &[&str],
    ) -> Result<Frontend, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp-http.toml");
        let audit = dir.path().join("audit.jsonl");
        let text = format!(
            "listen = \"{addr}\"\n{config}\n[audit]\nfile = {:?}\n",
            audit.display().to_string()
        );
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new(bin("vivarium-mcp"))
            .arg("--socket")
            .arg(socket)
            .arg("--http-config")
            .arg(&path)
            .args(args)
            .env("VIVARIUM_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = dir.path().join("stderr.log");
        let log_path = log.clone();
        std::thread::spawn(move || {
            let mut out = std::fs::File::create(&log_path).unwrap();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                use std::io::Write;
                let _ = writeln!(out, "{line}");
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        let ready = rx.recv_timeout(Duration::from_secs(20)).is_ok();
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "vivarium-mcp did not start:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            ));
        }
        Ok(Frontend {
            child,
            dir,
            url: format!("http://{addr}/mcp"),
            addr,
        })
    }

    pub fn audit(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }
}

impl Drop for Frontend {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn auth_config(issuer: &Issuer, resource: &str, extra: &str) -> String {
    format!(
        "resource = \"{resource}\"\n{extra}\n[auth]\nauthorization_servers = [\"{}\"]\nalgorithms = [\"ES256\"]\njwks_min_refresh_seconds = 1\n",
        issuer.url
    )
}

/// A JSON-RPC message (protocol 2025-06-18, stateless: no initialize needed).
pub fn rpc(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params })
}

pub fn run_python(arguments: Value) -> Value {
    rpc(
        "tools/call",
        json!({ "name": "run_python", "arguments": arguments }),
    )
}

pub struct Answer {
    pub status: u16,
    pub challenge: Option<String>,
    pub hsts: Option<String>,
    pub body: Value,
}

pub async fn post(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
    headers: &[(&str, &str)],
) -> Answer {
    post_as(client, url, token, body, Some("2025-06-18"), headers).await
}

/// [`post`] at protocol `version` (the `MCP-Protocol-Version` header; none for `None`).
pub async fn post_as(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
    version: Option<&str>,
    headers: &[(&str, &str)],
) -> Answer {
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(body);
    if let Some(version) = version {
        request = request.header("mcp-protocol-version", version);
    }
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let response = request.send().await.expect("the request is answered");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let challenge = header("www-authenticate");
    let hsts = header("strict-transport-security");
    let content_type = header("content-type");
    let text = response.text().await.unwrap_or_default();
    let body = response_message(text, content_type.as_deref());
    Answer {
        status,
        challenge,
        hsts,
        body,
    }
}

/// The JSON-RPC response in the body of an MCP HTTP answer: the JSON itself, or, for an
/// event stream, its last `data:` message with an `id` (progress notifications come
/// before it). A body that is not JSON is kept as a string.
pub fn response_message(text: String, content_type: Option<&str>) -> Value {
    if content_type.is_some_and(|c| c.starts_with("text/event-stream")) {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .rfind(|v| v.get("id").is_some())
            .unwrap_or(Value::Null)
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }
}

/// The text blocks of a tool result (`result`), joined; `None` without content.
pub fn content_text(result: &Value) -> Option<String> {
    result["content"].as_array().map(|c| {
        c.iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// The text of a tool result.
pub fn result_text(answer: &Answer) -> String {
    content_text(&answer.body["result"]).unwrap_or_else(|| answer.body.to_string())
}

pub fn last_job_id(frontend: &Frontend) -> u64 {
    frontend
        .audit()
        .iter()
        .rev()
        .find_map(|r| r["job_id"].as_u64())
        .expect("an audited job")
}

pub fn test_ca(dir: &Path) -> (PathBuf, PathBuf, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    std::fs::write(&cert, leaf.pem()).unwrap();
    std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
    (cert, key, ca.pem())
}

pub fn tls_client(ca_pem: &str) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    let der = rustls_pem_certs(ca_pem);
    for cert in der {
        roots.add(cert).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(config)
        .build()
        .unwrap()
}

pub fn rustls_pem_certs(pem: &str) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.unwrap())
        .collect()
}

/// The TCP ports `pid` listens on.
pub fn listening_ports(pid: u32) -> Vec<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().to_string();
            l.strip_prefix("socket:[")
                .map(|s| s.trim_end_matches(']').to_string())
        })
        .collect();
    let mut ports = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, ..., st (0A = LISTEN), ..., inode
            if f.len() > 9 && f[3] == "0A" && inodes.iter().any(|i| i == f[9]) {
                let port = f[1].rsplit(':').next().unwrap();
                ports.push(u16::from_str_radix(port, 16).unwrap());
            }
        }
    }
    ports
}
