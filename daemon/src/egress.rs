//! Egress proxy: the only way out of a sandbox whose network namespace has nothing but
//! `lo`.
//!
//! The privileged helper binds a TCP listener to `127.0.0.1:PORT` inside the sandbox's
//! namespace and hands the fd to the server, which runs [`serve`] on it from the host's
//! namespace. Inside, the payload (uv, say) is given `HTTPS_PROXY`/`HTTP_PROXY` pointing
//! at that port. Nothing inside can resolve a name or reach an address: every outbound
//! byte goes through here, and only to a `(host, port)` on the job's [`EgressPolicy`].
//!
//! One request per client connection, of two shapes:
//! - `CONNECT host:port` opens a TCP tunnel (for HTTPS: TLS runs end to end, so the
//!   proxy never sees plaintext and needs no certificate);
//! - `GET`/`HEAD` with an absolute-form `http://` URI is forwarded once, in origin-form
//!   with `Connection: close` (plain-HTTP indexes); the response is relayed until the
//!   upstream closes.
//!
//! Threat model: every byte from the client is attacker-controlled (the sandbox runs
//! arbitrary code). Hence:
//! - the allow-list is checked on the host and port the client *named*, before any DNS,
//!   so a refused name never reaches a resolver and a refused port is never dialled;
//!   names are limited to `[A-Za-z0-9.-]` and IP literals must parse, so nothing odd
//!   reaches `getaddrinfo` or the upstream's request line;
//! - the request head is bounded (16 KiB, 64 headers) and must arrive within one
//!   deadline for the whole head, not per read, so a slow client cannot hold a slot;
//! - connections are capped; past the cap a client gets a 503 and is closed (a second
//!   cap of the same size bounds those answers; past both the socket is just dropped);
//! - a relay with no bytes either way for the idle timeout is closed;
//! - no request body is forwarded (an index fetch has none), which rules out request
//!   smuggling through `Content-Length`/`Transfer-Encoding` disagreements;
//! - hop-by-hop and proxy headers are stripped, so nothing meant for the proxy (or
//!   smuggled as such) reaches the upstream;
//! - logs carry the job, the validated host and port and the reason, never header
//!   values or bodies (they can hold credentials, and are attacker-chosen text).
//!
//! Not defended against: a name on the allow-list that resolves somewhere unexpected.
//! Resolved addresses are not filtered (connections leave from the host's namespace,
//! where loopback is the host's), so an allow-list must only name hosts whose DNS the
//! operator trusts.

use std::collections::HashSet;
use std::io::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{timeout, Instant};

/// Largest request head read; uv's are well under 2 KiB.
const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// After an error (or a relayed) response, the client's unread bytes are drained for a
/// moment before closing: closing with unread data sends a RST, and a RST can make the
/// client drop the response it has not read yet.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;
/// Pause after a failed `accept` (e.g. out of fds), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Timeouts are capped so that adding one to an `Instant` cannot overflow.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
/// Headers of the proxy hop only (any `Proxy-*` too), or that the rewrite replaces.
const HOP_HEADERS: [&str; 8] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "transfer-encoding",
    "host",
    "content-length",
];

/// Where a job may connect, and the limits of its proxy.
#[derive(Debug, Clone)]
pub struct EgressPolicy {
    allow: HashSet<(String, u16)>,
    max_connections: usize,
    header_timeout: Duration,
    connect_timeout: Duration,
    idle_timeout: Duration,
}

impl EgressPolicy {
    /// Hosts are matched ASCII-case-insensitively, a trailing dot ignored; IPv6 literals
    /// without brackets. IP literals are compared as addresses (`0:0::1` is `::1`). An
    /// entry that is no valid host, or has port 0, is dropped with a warning: no request
    /// could match it.
    pub fn new(allow: impl IntoIterator<Item = (String, u16)>) -> EgressPolicy {
        let mut set = HashSet::new();
        for (raw, port) in allow {
            match policy_host(&raw) {
                Some(host) if port != 0 => drop(set.insert((host, port))),
                _ => {
                    tracing::warn!(host = %raw.escape_debug(), port, "egress allow-list entry ignored")
                }
            }
        }
        EgressPolicy {
            allow: set,
            max_connections: 32,
            header_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(120),
        }
    }

    pub fn allows(&self, host: &str, port: u16) -> bool {
        policy_host(host).is_some_and(|host| self.allows_normalized(host, port))
    }

    fn allows_normalized(&self, host: String, port: u16) -> bool {
        port != 0 && self.allow.contains(&(host, port))
    }

    /// Connections served at once (default 32, at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Deadline for the whole request head (default 10 s, at most a day).
    pub fn header_timeout(mut self, d: Duration) -> Self {
        self.header_timeout = d.min(MAX_TIMEOUT);
        self
    }

    /// Deadline for resolving and connecting to an upstream (default 15 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d.min(MAX_TIMEOUT);
        self
    }

    /// A relay with no bytes either way for this long is closed (default 120 s).
    pub fn idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d.min(MAX_TIMEOUT);
        self
    }
}

/// Counters of one proxy, readable while it runs. Every accepted connection counts in
/// `accepted`, then in at most one of `allowed` (relayed to an upstream) and `refused`
/// (answered with an error status, for any reason, over-capacity included).
#[derive(Debug, Default)]
pub struct EgressStats {
    pub accepted: AtomicU64,
    pub allowed: AtomicU64,
    pub refused: AtomicU64,
    /// Of `refused`: answered 503 (or dropped) because the connection cap was reached.
    pub over_capacity: AtomicU64,
    /// Bytes sent to upstreams (request heads and tunnelled bytes).
    pub bytes_up: AtomicU64,
    /// Bytes relayed from upstreams to clients.
    pub bytes_down: AtomicU64,
}

fn bump(counter: &AtomicU64, n: usize) {
    counter.fetch_add(n as u64, Ordering::Relaxed);
}

/// Why a request got an error response instead of an upstream. Hosts in it were
/// validated, so its text is safe in logs and in the response body.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{}:{port} is not on the allow-list", show_host(.host))]
    NotAllowed { host: String, port: u16 },
    #[error("malformed request: {0}")]
    Malformed(&'static str),
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("request head too large")]
    HeaderTooLarge,
    #[error("request head not received in time")]
    HeadTimeout,
    #[error("cannot reach {}:{port}", show_host(.host))]
    UpstreamUnreachable {
        host: String,
        port: u16,
        #[source]
        source: io::Error,
    },
    #[error("timed out connecting to {}:{port}", show_host(.host))]
    UpstreamTimeout { host: String, port: u16 },
    #[error("too many connections")]
    Busy,
}

impl Refusal {
    fn status(&self) -> &'static str {
        match self {
            Refusal::NotAllowed { .. } => "403 Forbidden",
            Refusal::Malformed(_) => "400 Bad Request",
            Refusal::MethodNotAllowed => "405 Method Not Allowed",
            Refusal::HeaderTooLarge => "431 Request Header Fields Too Large",
            Refusal::HeadTimeout => "408 Request Timeout",
            Refusal::UpstreamUnreachable { .. } => "502 Bad Gateway",
            Refusal::UpstreamTimeout { .. } => "504 Gateway Timeout",
            Refusal::Busy => "503 Service Unavailable",
        }
    }

    /// The target, where the request got far enough to name one.
    fn target(&self) -> (&str, u16) {
        match self {
            Refusal::NotAllowed { host, port }
            | Refusal::UpstreamUnreachable { host, port, .. }
            | Refusal::UpstreamTimeout { host, port } => (host, *port),
            _ => ("-", 0),
        }
    }
}

fn show_host(host: &str) -> String {
    match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_owned(),
    }
}

/// A validated upstream the client named.
#[derive(Debug)]
struct Target {
    /// Lowercase name without trailing dot, or an IP literal in canonical form.
    host: String,
    port: u16,
    /// The client wrote the port (so it belongs in the `Host` header).
    explicit_port: bool,
}

/// A proxy serving one sandbox on its own task; dropping this ends it and every
/// connection it started.
pub struct Serving {
    task: tokio::task::JoinHandle<()>,
    pub stats: Arc<EgressStats>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serve the listener the spawner made in a sandbox's network namespace
/// (`FromSpawner::Egress`) on a task of its own, for as long as the result is kept.
pub fn start(
    listener: Option<std::os::fd::OwnedFd>,
    policy: EgressPolicy,
    job_id: u64,
) -> std::io::Result<Serving> {
    let fd = listener.ok_or_else(|| std::io::Error::other("no listener came with it"))?;
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(std)?;
    let stats = Arc::new(EgressStats::default());
    let task = tokio::spawn(serve(listener, Arc::new(policy), stats.clone(), job_id));
    Ok(Serving { task, stats })
}

/// Serve until the returned future is dropped; dropping it ends every connection it
/// started (their tasks live in a `JoinSet` owned by this future).
pub async fn serve(
    listener: TcpListener,
    policy: Arc<EgressPolicy>,
    stats: Arc<EgressStats>,
    job_id: u64,
) {
    let slots = Arc::new(Semaphore::new(policy.max_connections));
    // 503 answers get their own budget: they are short, but a flood of connections must
    // not become an unbounded number of tasks.
    let refusals = Arc::new(Semaphore::new(policy.max_connections));
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let mut client = match accepted {
                    Ok((client, _)) => client,
                    Err(e) => {
                        tracing::warn!(job_id, error = %e, "egress accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        continue;
                    }
                };
                bump(&stats.accepted, 1);
                if let Ok(permit) = slots.clone().try_acquire_owned() {
                    let (policy, stats) = (policy.clone(), stats.clone());
                    tasks.spawn(async move {
                        handle(client, &policy, &stats, job_id).await;
                        drop(permit);
                    });
                    continue;
                }
                bump(&stats.refused, 1);
                bump(&stats.over_capacity, 1);
                let reason = Refusal::Busy;
                tracing::info!(job_id, host = "-", port = 0, %reason, "egress refused");
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tasks.spawn(async move {
                        respond_error(&mut client, &reason).await;
                        drop(permit);
                    });
                }
            }
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if done.as_ref().is_err_and(|e| e.is_panic()) {
                    tracing::error!(job_id, "egress connection task panicked");
                }
            }
        }
    }
}

async fn handle(mut client: TcpStream, policy: &EgressPolicy, stats: &EgressStats, job_id: u64) {
    // Latency matters more than segment count for TLS handshakes through a tunnel.
    let _ = client.set_nodelay(true);
    let Err(reason) = run(&mut client, policy, stats, job_id).await else {
        return;
    };
    bump(&stats.refused, 1);
    let (host, port) = reason.target();
    let cause = std::error::Error::source(&reason).map(|e| e.to_string());
    tracing::info!(job_id, host, port, %reason, cause, "egress refused");
    respond_error(&mut client, &reason).await;
}

/// One client connection: `Ok` once relayed (or when the client left before sending
/// anything), `Err` for a refusal still to be answered.
async fn run(
    client: &mut TcpStream,
    policy: &EgressPolicy,
    stats: &EgressStats,
    job_id: u64,
) -> Result<(), Refusal> {
    let Some((head, buf)) = read_head(client, policy.header_timeout).await? else {
        return Ok(());
    };
    // `path`: `None` for a tunnel, the origin-form path for a forwarded request.
    let (target, path) = match head.method.as_str() {
        "CONNECT" => (parse_authority(&head.target, None)?, None),
        "GET" | "HEAD" => {
            let (target, path) = parse_absolute(&head.target)?;
            refuse_body(&head.headers)?;
            (target, Some(path))
        }
        _ => return Err(Refusal::MethodNotAllowed),
    };
    let (host, port) = (target.host.clone(), target.port);
    if !policy.allows_normalized(host.clone(), port) {
        return Err(Refusal::NotAllowed { host, port });
    }
    let upstream = connect(&target, policy.connect_timeout).await?;
    bump(&stats.allowed, 1);
    tracing::debug!(job_id, host, port, method = head.method, "egress allowed");
    let idle = match path {
        None => {
            if client.write_all(ESTABLISHED).await.is_err() {
                return Ok(());
            }
            // Bytes the client pipelined after the head (a TLS ClientHello, typically)
            // belong to the tunnel.
            relay(client, upstream, &buf[head.len..], true, policy, stats).await
        }
        Some(path) => {
            let request = origin_request(&head, &target, path);
            let idle = relay(client, upstream, &request, false, policy, stats).await;
            linger(client).await;
            idle
        }
    };
    if idle {
        tracing::debug!(job_id, host, port, "egress relay idle, closed");
    }
    Ok(())
}

/// Send `first` upstream, then relay the upstream's bytes to the client (and, for a
/// tunnel, the client's to the upstream) until EOF or the idle timeout. True if idle.
async fn relay(
    client: &mut TcpStream,
    mut upstream: TcpStream,
    first: &[u8],
    tunnel: bool,
    policy: &EgressPolicy,
    stats: &EgressStats,
) -> bool {
    let meter = Meter::new(stats);
    let work = async {
        upstream.write_all(first).await?;
        bump(&stats.bytes_up, first.len());
        let mut client = Metered(client, &meter);
        match tunnel {
            true => tokio::io::copy_bidirectional(&mut client, &mut upstream)
                .await
                .map(drop),
            false => tokio::io::copy(&mut upstream, &mut client).await.map(drop),
        }
    };
    tokio::select! {
        _ = work => false,
        _ = meter.idle(policy.idle_timeout) => true,
    }
}

/// An owned copy of the parsed head (the parse borrows the buffer).
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    /// Length of the head in the buffer; what follows was pipelined.
    len: usize,
}

/// Read one request head under one deadline. `Ok(None)`: the client closed without
/// sending a byte (nothing to answer).
async fn read_head(
    client: &mut TcpStream,
    limit: Duration,
) -> Result<Option<(Head, Vec<u8>)>, Refusal> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let deadline = Instant::now() + limit;
    loop {
        let read = tokio::time::timeout_at(deadline, client.read(&mut buf[filled..]));
        filled += match read.await {
            Err(_) => return Err(Refusal::HeadTimeout),
            Ok(Err(_) | Ok(0)) if filled == 0 => return Ok(None),
            Ok(Err(_) | Ok(0)) => return Err(Refusal::Malformed("connection closed mid-head")),
            Ok(Ok(n)) => n,
        };
        // Parsing from the start on each read is bounded: 16 KiB a parse, and the reads
        // by the deadline.
        if let Some(head) = parse_head(&buf[..filled])? {
            buf.truncate(filled);
            return Ok(Some((head, buf)));
        }
        if filled == MAX_HEAD {
            return Err(Refusal::HeaderTooLarge);
        }
    }
}

fn parse_head(buf: &[u8]) -> Result<Option<Head>, Refusal> {
    const BAD: Refusal = Refusal::Malformed("not an http/1 request head");
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::HeaderTooLarge),
        Err(_) => return Err(BAD),
    };
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Err(BAD);
    };
    let headers = req.headers.iter();
    Ok(Some(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        headers: headers
            .map(|h| (h.name.to_owned(), h.value.to_owned()))
            .collect(),
        len,
    }))
}

/// `host[:port]` or `[v6][:port]`. `default_port`: the port when none is written; `None`
/// makes the port mandatory (CONNECT never implies 443).
fn parse_authority(s: &str, default_port: Option<u16>) -> Result<Target, Refusal> {
    const BAD: Refusal = Refusal::Malformed("bad authority");
    if s.contains('@') {
        return Err(Refusal::Malformed("userinfo in the target"));
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or(BAD)?;
        let v6: Ipv6Addr = v6.parse().map_err(|_| BAD)?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':').ok_or(BAD)?),
        };
        (v6.to_string(), port)
    } else {
        let (host, port) = match s.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        };
        (
            normalize_name(host).ok_or(Refusal::Malformed("bad host"))?,
            port,
        )
    };
    let (port, explicit_port) = match port {
        Some(p) => (parse_port(p).ok_or(Refusal::Malformed("bad port"))?, true),
        None => (
            default_port.ok_or(Refusal::Malformed("port missing"))?,
            false,
        ),
    };
    Ok(Target {
        host,
        port,
        explicit_port,
    })
}

fn parse_port(s: &str) -> Option<u16> {
    // `u16::from_str` would take a leading `+`; only plain digits are a port.
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|&p| p != 0)
}

/// `http://authority[/path][?query]` into the target and the origin-form path.
fn parse_absolute(uri: &str) -> Result<(Target, &str), Refusal> {
    if uri.starts_with('/') || uri == "*" {
        return Err(Refusal::Malformed(
            "origin-form target; a proxy needs an absolute uri",
        ));
    }
    let (scheme, rest) = uri
        .split_once("://")
        .ok_or(Refusal::Malformed("bad target"))?;
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(Refusal::Malformed(
            "only http:// is proxied; https goes by CONNECT",
        ));
    }
    // The path goes verbatim into the upstream's request line: printable ASCII only
    // (httparse already excludes spaces and controls, but lets bytes >= 0x80 through).
    if !rest.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Refusal::Malformed("bad target"));
    }
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    Ok((parse_authority(authority, Some(80))?, path))
}

fn refuse_body(headers: &[(String, Vec<u8>)]) -> Result<(), Refusal> {
    const BODY: Refusal = Refusal::Malformed("request bodies are not proxied");
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(BODY);
        }
        if name.eq_ignore_ascii_case("content-length") {
            let v = value.trim_ascii();
            if v.is_empty() || !v.iter().all(|b| b.is_ascii_digit()) {
                return Err(Refusal::Malformed("bad content-length"));
            }
            if v.iter().any(|&b| b != b'0') {
                return Err(BODY);
            }
        }
    }
    Ok(())
}

/// The request the upstream gets: origin-form, our `Host`, the client's end-to-end
/// headers, `Connection: close`. Names are httparse tokens and values hold no CR/LF, so
/// copying them cannot split the head.
fn origin_request(head: &Head, target: &Target, path: &str) -> Vec<u8> {
    let slash = if path.starts_with('/') { "" } else { "/" };
    let host = show_host(&target.host);
    let port = match target.explicit_port {
        true => format!(":{}", target.port),
        false => String::new(),
    };
    // Headers named in the client's Connection header are hop-by-hop too.
    let mut hop: Vec<String> = HOP_HEADERS.map(String::from).to_vec();
    for (name, value) in &head.headers {
        if name.eq_ignore_ascii_case("connection") {
            let tokens = String::from_utf8_lossy(value).to_ascii_lowercase();
            hop.extend(tokens.split(',').map(|t| t.trim().to_owned()));
        }
    }
    let mut out = Vec::with_capacity(MAX_HEAD);
    let _ = write!(
        out,
        "{} {slash}{path} HTTP/1.1\r\nHost: {host}{port}\r\n",
        head.method
    );
    for (name, value) in &head.headers {
        let name_lc = name.to_ascii_lowercase();
        if name_lc.starts_with("proxy-") || hop.contains(&name_lc) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// Resolve (names only: a literal never reaches a resolver) and connect, trying each
/// address in turn, under one deadline.
async fn connect(target: &Target, limit: Duration) -> Result<TcpStream, Refusal> {
    let (host, port) = (target.host.clone(), target.port);
    let attempt = async {
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect(),
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "name has no address");
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    };
    match timeout(limit, attempt).await {
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Ok(Err(source)) => Err(Refusal::UpstreamUnreachable { host, port, source }),
        Err(_) => Err(Refusal::UpstreamTimeout { host, port }),
    }
}

/// Answer an error and close.
async fn respond_error(client: &mut TcpStream, reason: &Refusal) {
    let body = format!("vivarium egress: {reason}\n");
    let allow = match reason {
        Refusal::MethodNotAllowed => "Allow: CONNECT, GET, HEAD\r\n",
        _ => "",
    };
    let (status, len) = (reason.status(), body.len());
    let response = format!(
        "HTTP/1.1 {status}\r\n{allow}Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {len}\r\nConnection: close\r\n\r\n{body}"
    );
    if timeout(LINGER, client.write_all(response.as_bytes()))
        .await
        .is_ok()
    {
        linger(client).await;
    }
}

/// Half-close, then drain what the client still sends for a moment, so our response
/// is not cut short by a RST (see [`LINGER`]).
async fn linger(client: &mut TcpStream) {
    let _ = timeout(LINGER, client.shutdown()).await;
    let drain = async {
        let (mut sink, mut total) = ([0u8; 4096], 0);
        while total < LINGER_BYTES {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    };
    let _ = timeout(LINGER, drain).await;
}

/// Last activity of one relay, and where its byte counts go.
struct Meter<'a> {
    start: Instant,
    last_ms: AtomicU64,
    stats: &'a EgressStats,
}

impl<'a> Meter<'a> {
    fn new(stats: &'a EgressStats) -> Self {
        let (start, last_ms) = (Instant::now(), AtomicU64::new(0));
        Meter {
            start,
            last_ms,
            stats,
        }
    }

    fn touch(&self, counter: &AtomicU64, n: usize) {
        bump(counter, n);
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once `limit` has passed with no activity.
    async fn idle(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = self.start + last + limit;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// The client side of a relay: its reads are bytes going up, its writes bytes coming
/// down, so this one wrapper sees the activity of both directions.
struct Metered<'a, 'm, S>(&'a mut S, &'a Meter<'m>);

impl<S: AsyncRead + Unpin> AsyncRead for Metered<'_, '_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let Metered(inner, meter) = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut **inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            meter.touch(&meter.stats.bytes_up, n);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<'_, '_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let Metered(inner, meter) = self.get_mut();
        let poll = Pin::new(&mut **inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n @ 1..)) = poll {
            meter.touch(&meter.stats.bytes_down, n);
        }
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_shutdown(cx)
    }
}

/// A host name as written (not an IPv6 literal): lowercase, no trailing dot, or `None`.
fn normalize_name(raw: &str) -> Option<String> {
    let name = raw.strip_suffix('.').unwrap_or(raw);
    let name_char = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'-';
    let bad_label = |l: &str| l.is_empty() || l.len() > 63;
    if name.len() > 253 || !name.bytes().all(name_char) || name.split('.').any(bad_label) {
        return None;
    }
    // A last label starting with a digit is an IPv4 literal to every URL parser and to
    // `getaddrinfo` (which also reads `127.1` and `0x7f.1`): it must be a plain dotted
    // quad, so what is checked is what is dialled.
    let last = name.rsplit('.').next()?;
    if last.starts_with(|c: char| c.is_ascii_digit()) {
        return name.parse::<Ipv4Addr>().ok().map(|ip| ip.to_string());
    }
    Some(name.to_ascii_lowercase())
}

/// A host as an allow-list writes it: IPv6 literals without brackets.
fn policy_host(raw: &str) -> Option<String> {
    match raw.contains(':') {
        true => raw.parse::<Ipv6Addr>().ok().map(|ip| ip.to_string()),
        false => normalize_name(raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::task::JoinHandle;

    /// Upper bound on any single step, so a broken proxy fails a test instead of hanging.
    const T: Duration = Duration::from_secs(5);

    struct Proxy {
        addr: SocketAddr,
        stats: Arc<EgressStats>,
        task: JoinHandle<()>,
    }

    impl Drop for Proxy {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    async fn proxy(policy: EgressPolicy) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(EgressStats::default());
        let task = tokio::spawn(serve(listener, Arc::new(policy), stats.clone(), 7));
        Proxy { addr, stats, task }
    }

    fn allow(host: &str, port: u16) -> EgressPolicy {
        EgressPolicy::new([(host.to_owned(), port)])
    }

    fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// A loopback echo server; each connection echoes until EOF, then closes.
    async fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    /// A listener nobody accepts on: a connection to it would sit in its queue.
    async fn planted() -> (TcpListener, u16) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        (l, port)
    }

    async fn never_dialled(l: &TcpListener) {
        let got = timeout(Duration::from_millis(200), l.accept()).await;
        assert!(got.is_err(), "the proxy connected to a refused target");
    }

    /// A loopback HTTP server for one request: hands back the request head it got and
    /// answers `response`.
    async fn http_upstream(
        response: &'static [u8],
    ) -> (u16, tokio::sync::oneshot::Receiver<String>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut b).await.unwrap();
                assert!(n > 0, "upstream saw EOF mid-head");
                head.extend_from_slice(&b[..n]);
            }
            let _ = tx.send(String::from_utf8(head).unwrap());
            s.write_all(response).await.unwrap();
        });
        (port, rx)
    }

    /// Send `request` through the proxy, read the whole answer.
    async fn exchange(p: &Proxy, request: &[u8]) -> String {
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        c.write_all(request).await.unwrap();
        let mut out = Vec::new();
        timeout(T, c.read_to_end(&mut out))
            .await
            .expect("proxy did not close")
            .unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    async fn read_n(c: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        timeout(T, c.read_exact(&mut buf))
            .await
            .expect("short read")
            .unwrap();
        buf
    }

    async fn at_eof(c: &mut TcpStream) -> bool {
        let mut b = [0u8; 64];
        matches!(timeout(T, c.read(&mut b)).await, Ok(Ok(0)) | Ok(Err(_)))
    }

    /// An error response of ours: status line, framing headers, body.
    fn assert_error(resp: &str, status: &str, body_has: &str) {
        assert!(resp.starts_with(&format!("HTTP/1.1 {status} ")), "{resp}");
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("\r\nConnection: close"), "{resp}");
        assert!(
            head.contains(&format!("\r\nContent-Length: {}", body.len())),
            "{resp}"
        );
        assert!(
            body.starts_with("vivarium egress: ") && body.contains(body_has),
            "{resp}"
        );
    }

    fn connect_req(authority: &str) -> Vec<u8> {
        format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").into_bytes()
    }

    #[tokio::test]
    async fn connect_tunnels_both_ways_with_pipelined_bytes() {
        let port = echo().await;
        let p = proxy(allow("127.0.0.1", port)).await;
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        let mut req = connect_req(&format!("127.0.0.1:{port}"));
        req.extend_from_slice(b"early");
        c.write_all(&req).await.unwrap();
        let want = [ESTABLISHED, b"early"].concat();
        assert_eq!(read_n(&mut c, want.len()).await, want);
        c.write_all(b"later").await.unwrap();
        assert_eq!(read_n(&mut c, 5).await, b"later");
        c.shutdown().await.unwrap();
        assert!(at_eof(&mut c).await);
        assert_eq!((get(&p.stats.allowed), get(&p.stats.refused)), (1, 0));
        assert_eq!(get(&p.stats.bytes_up), 10);
        assert!(get(&p.stats.bytes_down) >= 10);
    }

    #[tokio::test]
    async fn connect_to_port_not_allowed_is_403_and_never_dialled() {
        let port = echo().await;
        let (planted, other) = planted().await;
        let p = proxy(allow("127.0.0.1", port)).await;
        let resp = exchange(&p, &connect_req(&format!("127.0.0.1:{other}"))).await;
        assert_error(
            &resp,
            "403",
            &format!("127.0.0.1:{other} is not on the allow-list"),
        );
        never_dialled(&planted).await;
        assert_eq!((get(&p.stats.allowed), get(&p.stats.refused)), (0, 1));
    }

    #[tokio::test]
    async fn name_allowed_only_on_another_port_is_403() {
        let port = echo().await;
        let (planted, other) = planted().await;
        let p = proxy(allow("localhost", port)).await;
        let resp = exchange(&p, &connect_req(&format!("localhost:{other}"))).await;
        assert_error(
            &resp,
            "403",
            &format!("localhost:{other} is not on the allow-list"),
        );
        never_dialled(&planted).await;
        // The address it resolves to is not allowed either: the check is on the name.
        let resp = exchange(&p, &connect_req(&format!("127.0.0.1:{port}"))).await;
        assert_error(&resp, "403", "not on the allow-list");
    }

    #[tokio::test]
    async fn connect_to_an_ipv6_literal() {
        let Ok(l) = TcpListener::bind("[::1]:0").await else {
            eprintln!("no IPv6 loopback here; skipping");
            return;
        };
        let port = l.local_addr().unwrap().port();
        let p = proxy(allow("0:0::1", port)).await;
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        c.write_all(&connect_req(&format!("[::1]:{port}")))
            .await
            .unwrap();
        let (mut up, _) = timeout(T, l.accept()).await.unwrap().unwrap();
        assert_eq!(read_n(&mut c, ESTABLISHED.len()).await, ESTABLISHED);
        up.write_all(b"v6").await.unwrap();
        assert_eq!(read_n(&mut c, 2).await, b"v6");
        let resp = exchange(&p, &connect_req(&format!("[::1]:{}", port ^ 1))).await;
        assert_error(
            &resp,
            "403",
            &format!("[::1]:{} is not on the allow-list", port ^ 1),
        );
    }

    #[tokio::test]
    async fn host_match_ignores_case_and_trailing_dot() {
        let port = echo().await;
        let p = proxy(allow("LocalHost.", port)).await;
        for name in ["LOCALHOST", "localhost.", "localHost"] {
            let mut c = TcpStream::connect(p.addr).await.unwrap();
            c.write_all(&connect_req(&format!("{name}:{port}")))
                .await
                .unwrap();
            assert_eq!(
                read_n(&mut c, ESTABLISHED.len()).await,
                ESTABLISHED,
                "{name}"
            );
            c.write_all(b"x").await.unwrap();
            assert_eq!(read_n(&mut c, 1).await, b"x");
        }
        assert_eq!(get(&p.stats.allowed), 3);
    }

    #[tokio::test]
    async fn connect_refusals_of_bad_targets() {
        let (planted, port) = planted().await;
        let p = proxy(allow("127.0.0.1", port).max_connections(4)).await;
        for authority in [
            "127.0.0.1".to_owned(), // no port: 443 is never implied
            "127.0.0.1:0".to_owned(),
            format!("127.0.0.1:+{port}"),
            format!("user@127.0.0.1:{port}"),
            format!("127.1:{port}"),
            format!("0x7f.0.0.1:{port}"),
            format!(":{port}"),
            format!("exa_mple.com:{port}"),
            format!("a..b:{port}"),
            format!("[127.0.0.1]:{port}"),
            format!("http://127.0.0.1:{port}/"),
        ] {
            let resp = exchange(&p, &connect_req(&authority)).await;
            assert_error(&resp, "400", "malformed request");
        }
        never_dialled(&planted).await;
        assert_eq!((get(&p.stats.allowed), get(&p.stats.refused)), (0, 11));
    }

    #[tokio::test]
    async fn get_absolute_form_is_rewritten_and_relayed() {
        const RESPONSE: &[u8] =
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
        let (port, seen) = http_upstream(RESPONSE).await;
        let p = proxy(allow("localhost", port)).await;
        let req = format!(
            "GET http://LocalHost:{port}/simple/pkg/?x=1 HTTP/1.1\r\n\
             Host: elsewhere.example\r\n\
             Proxy-Connection: keep-alive\r\n\
             Proxy-Authorization: Basic c2VjcmV0\r\n\
             Connection: keep-alive, X-Drop\r\n\
             X-Drop: 1\r\n\
             Keep-Alive: 300\r\n\
             TE: trailers\r\n\
             Accept: text/html\r\n\
             User-Agent: uv/0.5\r\n\r\n"
        );
        let resp = exchange(&p, req.as_bytes()).await;
        assert_eq!(resp.as_bytes(), RESPONSE);
        let head = timeout(T, seen).await.unwrap().unwrap();
        assert!(
            head.starts_with("GET /simple/pkg/?x=1 HTTP/1.1\r\n"),
            "{head}"
        );
        let lower = head.to_ascii_lowercase();
        assert_eq!(lower.matches("\r\nhost:").count(), 1, "{head}");
        assert!(
            head.contains(&format!("\r\nHost: localhost:{port}\r\n")),
            "{head}"
        );
        assert!(head.ends_with("\r\nConnection: close\r\n\r\n"), "{head}");
        assert_eq!(lower.matches("\r\nconnection:").count(), 1, "{head}");
        for gone in [
            "proxy-",
            "x-drop",
            "keep-alive",
            "te:",
            "secret",
            "c2vjcmv0",
        ] {
            assert!(!lower.contains(gone), "{gone} forwarded: {head}");
        }
        assert!(
            head.contains("\r\nAccept: text/html\r\n")
                && head.contains("\r\nUser-Agent: uv/0.5\r\n")
        );
        assert_eq!((get(&p.stats.allowed), get(&p.stats.refused)), (1, 0));
        assert_eq!(get(&p.stats.bytes_down), RESPONSE.len() as u64);
    }

    #[tokio::test]
    async fn head_works_and_an_empty_path_is_slash() {
        const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        let (port, seen) = http_upstream(RESPONSE).await;
        let p = proxy(allow("127.0.0.1", port)).await;
        let req = format!("HEAD http://127.0.0.1:{port} HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(exchange(&p, req.as_bytes()).await.as_bytes(), RESPONSE);
        let head = timeout(T, seen).await.unwrap().unwrap();
        assert!(
            head.starts_with(&format!("HEAD / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n")),
            "{head}"
        );
        assert!(
            !head.to_ascii_lowercase().contains("content-length"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn plain_http_port_defaults_to_80() {
        let p = proxy(allow("localhost", 8080)).await;
        let resp = exchange(&p, b"GET http://localhost/x HTTP/1.1\r\n\r\n").await;
        assert_error(&resp, "403", "localhost:80 is not on the allow-list");
    }

    #[tokio::test]
    async fn other_methods_are_405() {
        let (planted, port) = planted().await;
        let p = proxy(allow("127.0.0.1", port)).await;
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "get"] {
            let req =
                format!("{method} http://127.0.0.1:{port}/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
            let resp = exchange(&p, req.as_bytes()).await;
            assert_error(&resp, "405", "method not allowed");
            assert!(resp.contains("\r\nAllow: CONNECT, GET, HEAD\r\n"));
        }
        never_dialled(&planted).await;
    }

    #[tokio::test]
    async fn bad_get_requests_are_400() {
        let (planted, port) = planted().await;
        let p = proxy(allow("127.0.0.1", port)).await;
        for req in [
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"),
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 1\r\n\r\n"),
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nContent-Length: -0\r\n\r\n"),
            "GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_owned(),
            format!("GET http://user:pw@127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
            format!("GET https://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
            format!("GET ftp://127.0.0.1:{port}/ HTTP/1.1\r\n\r\n"),
            format!("GET http://127.0.0.1:{port}\\@evil/ HTTP/1.1\r\n\r\n"),
            "GET http:///x HTTP/1.1\r\n\r\n".to_owned(),
            "GET * HTTP/1.1\r\n\r\n".to_owned(),
        ] {
            let resp = exchange(&p, req.as_bytes()).await;
            assert_error(&resp, "400", "malformed request");
        }
        never_dialled(&planted).await;
        assert_eq!(get(&p.stats.refused), 11);
    }

    #[tokio::test]
    async fn oversized_heads_are_431() {
        let p = proxy(allow("127.0.0.1", 1)).await;
        let mut big = b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX-Big: ".to_vec();
        big.resize(big.len() + 20_000, b'a');
        big.extend_from_slice(b"\r\n\r\n");
        assert_error(&exchange(&p, &big).await, "431", "too large");
        let mut many = b"GET http://127.0.0.1:1/ HTTP/1.1\r\n".to_vec();
        for i in 0..65 {
            many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_error(&exchange(&p, &many).await, "431", "too large");
    }

    #[tokio::test]
    async fn garbage_is_400() {
        let p = proxy(allow("127.0.0.1", 1)).await;
        // A TLS ClientHello sent straight at the proxy, and binary noise.
        for junk in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
            b"\x00\xff\r\n\r\n",
            b"GET\r\n\r\n",
        ] {
            assert_error(&exchange(&p, junk).await, "400", "malformed request");
        }
        assert_error(
            &exchange(&p, b"GET http://127.0.0.1:1/ HTTP/2.0\r\n\r\n").await,
            "400",
            "malformed",
        );
    }

    #[tokio::test]
    async fn client_gone_without_a_byte_is_not_answered() {
        let p = proxy(allow("127.0.0.1", 1)).await;
        drop(TcpStream::connect(p.addr).await.unwrap());
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        c.shutdown().await.unwrap();
        let mut out = Vec::new();
        timeout(T, c.read_to_end(&mut out)).await.unwrap().unwrap();
        assert!(out.is_empty());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!((get(&p.stats.accepted), get(&p.stats.refused)), (2, 0));
    }

    #[tokio::test]
    async fn upstream_refused_is_502() {
        let (l, port) = planted().await;
        drop(l);
        let p = proxy(allow("localhost", port)).await;
        let resp = exchange(&p, &connect_req(&format!("localhost:{port}"))).await;
        assert_error(&resp, "502", &format!("cannot reach localhost:{port}"));
        let resp = exchange(
            &p,
            format!("GET http://localhost:{port}/ HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
        assert_error(&resp, "502", "cannot reach");
        assert_eq!((get(&p.stats.allowed), get(&p.stats.refused)), (0, 2));
    }

    #[tokio::test]
    async fn upstream_connect_timeout_is_504() {
        // A loopback listener whose accept queue is full drops further SYNs, so a
        // connect to it hangs.
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let full = sock.listen(0).unwrap();
        let port = full.local_addr().unwrap().port();
        let mut fillers = Vec::new();
        let mut hung = false;
        for _ in 0..64 {
            match timeout(
                Duration::from_millis(300),
                TcpStream::connect(("127.0.0.1", port)),
            )
            .await
            {
                Ok(Ok(s)) => fillers.push(s),
                _ => {
                    hung = true;
                    break;
                }
            }
        }
        assert!(hung, "could not fill a listen queue on this kernel");
        let p = proxy(allow("127.0.0.1", port).connect_timeout(Duration::from_millis(300))).await;
        let resp = exchange(&p, &connect_req(&format!("127.0.0.1:{port}"))).await;
        assert_error(&resp, "504", "timed out connecting to 127.0.0.1");
    }

    #[tokio::test]
    async fn slow_head_is_408() {
        let p = proxy(allow("127.0.0.1", 1).header_timeout(Duration::from_millis(200))).await;
        let started = Instant::now();
        let resp = exchange(&p, b"GET http://127.0.0.1:1/ HTT").await;
        assert_error(&resp, "408", "not received in time");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn idle_tunnel_is_closed() {
        let port = echo().await;
        let p = proxy(allow("127.0.0.1", port).idle_timeout(Duration::from_millis(600))).await;
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        c.write_all(&connect_req(&format!("127.0.0.1:{port}")))
            .await
            .unwrap();
        assert_eq!(read_n(&mut c, ESTABLISHED.len()).await, ESTABLISHED);
        // Activity postpones the deadline.
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            c.write_all(b"k").await.unwrap();
            assert_eq!(read_n(&mut c, 1).await, b"k");
        }
        let quiet = Instant::now();
        assert!(at_eof(&mut c).await);
        assert!(quiet.elapsed() >= Duration::from_millis(500));
    }

    #[tokio::test]
    async fn connection_cap_answers_503_and_frees_slots() {
        let port = echo().await;
        let p = proxy(allow("127.0.0.1", port).max_connections(1)).await;
        let mut first = TcpStream::connect(p.addr).await.unwrap();
        first
            .write_all(&connect_req(&format!("127.0.0.1:{port}")))
            .await
            .unwrap();
        assert_eq!(read_n(&mut first, ESTABLISHED.len()).await, ESTABLISHED);
        let resp = exchange(&p, &connect_req(&format!("127.0.0.1:{port}"))).await;
        assert_error(&resp, "503", "too many connections");
        assert_eq!((get(&p.stats.over_capacity), get(&p.stats.refused)), (1, 1));
        drop(first);
        let deadline = Instant::now() + T;
        loop {
            let mut c = TcpStream::connect(p.addr).await.unwrap();
            c.write_all(&connect_req(&format!("127.0.0.1:{port}")))
                .await
                .unwrap();
            let mut got = vec![0u8; ESTABLISHED.len()];
            let _ = timeout(T, c.read_exact(&mut got)).await;
            if got == ESTABLISHED {
                break;
            }
            assert!(Instant::now() < deadline, "the slot was never freed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(get(&p.stats.allowed), 2);
    }

    #[tokio::test]
    async fn dropping_serve_closes_open_tunnels() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let p = proxy(allow("127.0.0.1", port)).await;
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        c.write_all(&connect_req(&format!("127.0.0.1:{port}")))
            .await
            .unwrap();
        let (mut up, _) = timeout(T, l.accept()).await.unwrap().unwrap();
        assert_eq!(read_n(&mut c, ESTABLISHED.len()).await, ESTABLISHED);
        p.task.abort();
        assert!(at_eof(&mut up).await, "upstream still open");
        assert!(at_eof(&mut c).await, "client still open");
    }

    #[test]
    fn policy_matching() {
        let policy = EgressPolicy::new([
            ("PyPI.org.".to_owned(), 443),
            ("::1".to_owned(), 8443),
            ("192.0.2.1".to_owned(), 80),
            ("bad host".to_owned(), 443),
            ("[::2]".to_owned(), 443),
            ("zero.example".to_owned(), 0),
        ]);
        assert!(policy.allows("pypi.org", 443));
        assert!(policy.allows("PYPI.ORG.", 443));
        assert!(!policy.allows("pypi.org", 80));
        assert!(!policy.allows("pypi.org..", 443));
        assert!(!policy.allows("files.pythonhosted.org", 443));
        assert!(!policy.allows("evil.pypi.org", 443));
        assert!(policy.allows("0:0::1", 8443));
        assert!(!policy.allows("[::1]", 8443));
        assert!(policy.allows("192.0.2.1", 80));
        assert!(!policy.allows("192.0.2.01", 80));
        assert!(!policy.allows("bad host", 443));
        assert!(!policy.allows("::2", 443));
        assert!(!policy.allows("zero.example", 0));
        assert_eq!(policy.allow.len(), 3);
    }

    #[test]
    fn authority_parsing() {
        let t = parse_authority("[0:0::1]:443", None).unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.explicit_port),
            ("::1", 443, true)
        );
        let t = parse_authority("Example.COM", Some(80)).unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.explicit_port),
            ("example.com", 80, false)
        );
        for bad in [
            "[::1]",
            "[::1]443",
            "[fe80::1%eth0]:1",
            "[::1]:",
            "::1:443",
            "a:65536",
            "a:00000001",
            "a:",
            "-",
            ".",
            "a.b.",
            "",
            ":1",
            "a.1:1",
            "1.2.3.4.5:1",
        ] {
            assert!(parse_authority(bad, None).is_err(), "{bad}");
        }
        assert!(
            parse_authority("-a-.example:1", None).is_ok(),
            "dashes are name characters"
        );
    }

    #[test]
    fn origin_request_rewrites() {
        let head = |target: &str, extra: &str| {
            let raw = format!(
                "GET {target} HTTP/1.1\r\nConnection: A, b\r\nA: 1\r\nB: 2\r\nC: 3\r\n{extra}\r\n"
            );
            parse_head(raw.as_bytes()).unwrap().unwrap()
        };
        let h = head("HTTP://[::1]:8080?q#frag", "Proxy-Foo: x\r\n");
        let (t, path) = parse_absolute(&h.target).unwrap();
        let req = String::from_utf8(origin_request(&h, &t, path)).unwrap();
        assert_eq!(
            req,
            "GET /?q HTTP/1.1\r\nHost: [::1]:8080\r\nC: 3\r\nConnection: close\r\n\r\n"
        );
        let h = head("http://h.example", "");
        let (t, path) = parse_absolute(&h.target).unwrap();
        let req = String::from_utf8(origin_request(&h, &t, path)).unwrap();
        assert!(
            req.starts_with("GET / HTTP/1.1\r\nHost: h.example\r\n"),
            "{req}"
        );
    }
}
