//! The listener and the serving of each connection.
//!
//! One listener: TCP, TLS over TCP (when `[tls]` is configured there is no plaintext
//! port), or a Unix stream socket. Each connection is served by hyper-util's auto builder
//! (HTTP/1.1 with keep-alive, or HTTP/2; over TLS the protocol is the one ALPN chose),
//! with the request's [`PeerAddr`] and [`Tls`] in its extensions.
//!
//! Limits ([`ConnLimits`]):
//! - the request head: HTTP/1 `max_buf_size` and HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`
//!   are `max_header_bytes`. Beyond it an HTTP/1 request gets `431 Request Header Fields
//!   Too Large` and the connection is closed; an HTTP/2 request gets a 431 on its stream
//!   (hyper/h2 do both; the tests check them). HTTP/1's buffer cannot be below 8192
//!   bytes (hyper's minimum), so a smaller `max_header_bytes` means 8192 there.
//! - a TLS handshake must finish within `handshake_timeout`; an HTTP/1 request head
//!   (including the wait for the next one on an idle keep-alive connection) within
//!   `header_read_timeout`; a plaintext connection must send its first byte within
//!   `header_read_timeout` too.
//! - at most `max_connections` connections at once: at the limit the server stops
//!   accepting until one ends (further clients wait in the kernel's backlog rather than
//!   being refused).
//!
//! Shutdown: when the `shutdown` future resolves the listener is closed, each connection
//! is told to finish (HTTP/1 closes after its response in flight, HTTP/2 sends GOAWAY),
//! and those still open after `drain` are dropped.
//!
//! Accept errors (EMFILE, ENFILE, ECONNABORTED...) are logged and accepting resumes
//! after a short pause: never a busy loop, never the end of the server.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use http::{HeaderValue, Request};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

use super::config::{HttpConfig, Listen};
use super::tls::TlsReloader;

/// The peer's address, in each request's extensions (`None` on a Unix socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub Option<SocketAddr>);

/// Whether the request came over TLS terminated here, in each request's extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tls(pub bool);

/// Per-connection limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Largest request head (HTTP/1 request line and headers; HTTP/2 header list).
    pub max_header_bytes: usize,
    /// Longest TLS handshake.
    pub handshake_timeout: Duration,
    /// Longest wait for an HTTP/1 request head (and for a plaintext connection's first byte).
    pub header_read_timeout: Duration,
    /// How long open connections may finish after shutdown begins.
    pub drain: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 1024,
            max_header_bytes: super::config::DEFAULT_MAX_HEADER_BYTES,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            drain: Duration::from_secs(10),
        }
    }
}

impl ConnLimits {
    /// The defaults with the configuration's `max_header_bytes`.
    pub fn from_config(config: &HttpConfig) -> ConnLimits {
        ConnLimits {
            max_header_bytes: config.max_header_bytes,
            ..ConnLimits::default()
        }
    }
}

/// `Strict-Transport-Security: max-age=N; includeSubDomains` (the router sends it).
pub fn hsts_header(max_age: u64) -> HeaderValue {
    HeaderValue::try_from(format!("max-age={max_age}; includeSubDomains"))
        .expect("digits and ASCII are a valid header value")
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Bind `listen`. A Unix socket path left by an earlier run is removed first, but only
    /// if it is a socket nobody answers on (anything else there is an error, as is a live
    /// server); the new socket is made mode 0660 (owner and group may connect) once bound.
    /// Until that chmod the umask applies, so keep the socket's directory private if the
    /// umask is looser than that.
    pub fn bind(listen: &Listen) -> io::Result<Listener> {
        match listen {
            Listen::Tcp(addr) => {
                let std = std::net::TcpListener::bind(addr)?;
                std.set_nonblocking(true)?;
                Ok(Listener::Tcp(TcpListener::from_std(std)?))
            }
            Listen::Unix(path) => {
                remove_stale_socket(path)?;
                let listener = UnixListener::bind(path)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
                Ok(Listener::Unix(listener))
            }
        }
    }

    /// Where it listens (a TCP port of 0 resolved).
    pub fn local_addr(&self) -> io::Result<Listen> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(Listen::Tcp),
            Listener::Unix(l) => {
                let addr = l.local_addr()?;
                addr.as_pathname()
                    .map(|p| Listen::Unix(p.to_path_buf()))
                    .ok_or_else(|| io::Error::other("an unnamed Unix socket"))
            }
        }
    }

    async fn accept(&self) -> io::Result<Accepted> {
        match self {
            Listener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                // Responses are written whole; no need to wait for more.
                let _ = stream.set_nodelay(true);
                Ok(Accepted::Tcp(stream, peer))
            }
            Listener::Unix(l) => Ok(Accepted::Unix(l.accept().await?.0)),
        }
    }
}

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a socket", path.display()),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("{}: another server is listening there", path.display()),
        )),
        Err(_) => std::fs::remove_file(path),
    }
}

enum Accepted {
    Tcp(TcpStream, SocketAddr),
    Unix(UnixStream),
}

/// The connection builders: auto-detected (plaintext), and one per ALPN protocol.
#[derive(Clone)]
struct Builders {
    auto: auto::Builder<TokioExecutor>,
    h1: auto::Builder<TokioExecutor>,
    h2: auto::Builder<TokioExecutor>,
}

impl Builders {
    fn new(limits: &ConnLimits) -> Builders {
        let mut b = auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            .header_read_timeout(limits.header_read_timeout)
            .max_buf_size(limits.max_header_bytes.max(8192));
        b.http2()
            .timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Duration::from_secs(60))
            .keep_alive_timeout(Duration::from_secs(20));
        Builders {
            h1: b.clone().http1_only(),
            h2: b.clone().http2_only(),
            auto: b,
        }
    }
}

/// What every connection task shares.
#[derive(Clone)]
struct Shared {
    app: Router,
    builders: Builders,
    limits: ConnLimits,
    shutdown: watch::Receiver<bool>,
}

/// Serve `app` on `listener` until `shutdown` resolves, then drain (see the module docs).
/// With `tls`, every connection is TLS, each handshake with the reloader's configuration
/// of the moment (a reload applies to new connections). Returns once every connection
/// has ended or been dropped; accept errors do not end it.
pub async fn serve(
    listener: Listener,
    tls: Option<Arc<TlsReloader>>,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let (stop, stopped) = watch::channel(false);
    let shared = Shared {
        app,
        builders: Builders::new(&limits),
        limits,
        shutdown: stopped,
    };
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    'serve: loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let accepted = loop {
            tokio::select! {
                () = &mut shutdown => break 'serve,
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => break accepted,
            }
        };
        let accepted = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed; retrying shortly");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let shared = shared.clone();
        let acceptor = tls
            .as_ref()
            .map(|t| tokio_rustls::TlsAcceptor::from(t.current()));
        connections.spawn(async move {
            match accepted {
                Accepted::Tcp(stream, peer) => {
                    connection(stream, Some(peer), acceptor, shared).await;
                }
                Accepted::Unix(stream) => connection(stream, None, acceptor, shared).await,
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let open = connections.len();
    if open > 0 {
        tracing::info!(
            connections = open,
            "shutting down: letting open connections finish"
        );
    }
    let drained = tokio::time::timeout(limits.drain, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::info!(
            connections = connections.len(),
            "shutdown: dropping connections still open"
        );
        connections.shutdown().await;
    }
    Ok(())
}

/// Resolves once shutdown has begun (or `serve` is gone).
async fn stopping(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|&stop| stop).await;
}

/// A stream that can say when it has bytes to read (the plaintext first-byte timeout).
trait Readable {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send;
}

impl Readable for TcpStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        TcpStream::readable(self)
    }
}

impl Readable for UnixStream {
    fn readable(&self) -> impl Future<Output = io::Result<()>> + Send {
        UnixStream::readable(self)
    }
}

async fn connection<S>(
    stream: S,
    peer: Option<SocketAddr>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    shared: Shared,
) where
    S: AsyncRead + AsyncWrite + Readable + Unpin + Send + 'static,
{
    let mut shutdown = shared.shutdown.clone();
    let Some(acceptor) = acceptor else {
        let first_byte = tokio::time::timeout(shared.limits.header_read_timeout, stream.readable());
        tokio::select! {
            waited = first_byte => match waited {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return tracing::debug!(?peer, error = %e, "connection failed"),
                Err(_) => return tracing::debug!(?peer, "connection idle from the start; closed"),
            },
            () = stopping(&mut shutdown) => return,
        }
        let builder = shared.builders.auto.clone();
        return serve_http(&builder, stream, peer, false, shared).await;
    };
    let handshake = tokio::time::timeout(shared.limits.handshake_timeout, acceptor.accept(stream));
    let stream = tokio::select! {
        done = handshake => match done {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return tracing::debug!(?peer, error = %e, "TLS handshake failed"),
            Err(_) => return tracing::debug!(?peer, "TLS handshake timed out"),
        },
        () = stopping(&mut shutdown) => return,
    };
    let builder = match stream.get_ref().1.alpn_protocol() {
        Some(b"h2") => shared.builders.h2.clone(),
        Some(b"http/1.1") => shared.builders.h1.clone(),
        _ => shared.builders.auto.clone(),
    };
    serve_http(&builder, stream, peer, true, shared).await;
}

async fn serve_http<S>(
    builder: &auto::Builder<TokioExecutor>,
    stream: S,
    peer: Option<SocketAddr>,
    tls: bool,
    shared: Shared,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = shared
        .app
        .map_request(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(PeerAddr(peer));
            request.extensions_mut().insert(Tls(tls));
            request
        });
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let mut shutdown = shared.shutdown;
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stopping(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(?peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::tls::tests::TestCa;
    use axum::routing::get;
    use axum::Extension;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers `/` with what the listener told it; `/wait` after `release` is notified.
    fn app(release: Arc<tokio::sync::Notify>) -> Router {
        Router::new()
            .route(
                "/",
                get(
                    |Extension(peer): Extension<PeerAddr>,
                     Extension(tls): Extension<Tls>,
                     request: Request<axum::body::Body>| async move {
                        format!(
                            "peer={:?} tls={} version={:?}",
                            peer.0.map(|a| a.ip()),
                            tls.0,
                            request.version()
                        )
                    },
                ),
            )
            .route(
                "/wait",
                get(move || async move {
                    release.notified().await;
                    "released"
                }),
            )
    }

    struct Server {
        addr: Listen,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<io::Result<()>>,
        release: Arc<tokio::sync::Notify>,
    }

    impl Server {
        fn start(listen: &Listen, tls: Option<Arc<TlsReloader>>, limits: ConnLimits) -> Server {
            let listener = Listener::bind(listen).unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let release = Arc::new(tokio::sync::Notify::new());
            let task = tokio::spawn(serve(listener, tls, app(release.clone()), limits, async {
                let _ = stopped.await;
            }));
            Server {
                addr,
                stop: Some(stop),
                task,
                release,
            }
        }

        fn tcp(&self) -> SocketAddr {
            match self.addr {
                Listen::Tcp(addr) => addr,
                Listen::Unix(_) => panic!("a Unix listener"),
            }
        }

        /// Begin shutdown and wait for `serve` to end.
        async fn stop(mut self) {
            self.stop.take().unwrap().send(()).unwrap();
            self.task.await.unwrap().unwrap();
        }
    }

    fn loopback() -> Listen {
        Listen::Tcp("127.0.0.1:0".parse().unwrap())
    }

    fn client(ca: &TestCa, alpn: &[&[u8]], server: SocketAddr) -> reqwest::Client {
        reqwest::Client::builder()
            .use_preconfigured_tls(ca.client_config(alpn))
            .resolve("localhost", server)
            .build()
            .unwrap()
    }

    /// Write `request` and read until the peer closes (or `until` appears).
    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
        stream: &mut S,
        request: &[u8],
        until: Option<&str>,
    ) -> String {
        stream.write_all(request).await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if until.is_some_and(|u| String::from_utf8_lossy(&got).contains(u)) {
                break;
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    const GET_CLOSE: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

    fn tls_server(dir: &Path, ca: &TestCa, limits: ConnLimits) -> (Server, Arc<TlsReloader>) {
        let (files, _) = ca.write_leaf(dir, "leaf one");
        let reloader = Arc::new(TlsReloader::load(&files).unwrap());
        (
            Server::start(&loopback(), Some(reloader.clone()), limits),
            reloader,
        )
    }

    #[tokio::test]
    async fn tls_negotiates_h2_and_http1_and_tells_the_handler() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (server, _) = tls_server(dir.path(), &ca, ConnLimits::default());
        let url = format!("https://localhost:{}/", server.tcp().port());

        let h2 = client(&ca, &[b"h2", b"http/1.1"], server.tcp());
        let response = h2.get(&url).send().await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        let body = response.text().await.unwrap();
        assert_eq!(
            body, "peer=Some(127.0.0.1) tls=true version=HTTP/2.0",
            "{body}"
        );

        let h1 = client(&ca, &[b"http/1.1"], server.tcp());
        let response = h1.get(&url).send().await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_11);
        let body = response.text().await.unwrap();
        assert_eq!(body, "peer=Some(127.0.0.1) tls=true version=HTTP/1.1");
        server.stop().await;
    }

    #[tokio::test]
    async fn a_client_not_trusting_the_ca_fails() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (server, _) = tls_server(dir.path(), &ca, ConnLimits::default());
        let other = TestCa::new("another CA");
        let e = client(&other, &[b"http/1.1"], server.tcp())
            .get(format!("https://localhost:{}/", server.tcp().port()))
            .send()
            .await
            .unwrap_err();
        assert!(e.is_connect(), "{e:?}");
        server.stop().await;
    }

    #[tokio::test]
    async fn plain_http_to_the_tls_port_gets_no_http_answer() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (server, _) = tls_server(dir.path(), &ca, ConnLimits::default());
        let mut stream = TcpStream::connect(server.tcp()).await.unwrap();
        let got = exchange(&mut stream, GET_CLOSE, None).await;
        assert!(!got.contains("HTTP/1.1"), "{got:?}");
        server.stop().await;
    }

    async fn served_leaf(ca: &TestCa, server: SocketAddr) -> Vec<u8> {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(ca.client_config(&[])));
        let tcp = TcpStream::connect(server).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector.connect(name, tcp).await.unwrap();
        tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }

    #[tokio::test]
    async fn a_reload_applies_to_new_connections_and_a_bad_one_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (files, first) = ca.write_leaf(dir.path(), "leaf one");
        let reloader = Arc::new(TlsReloader::load(&files).unwrap());
        let server = Server::start(&loopback(), Some(reloader.clone()), ConnLimits::default());
        assert_eq!(served_leaf(&ca, server.tcp()).await, first.to_vec());

        let (_, second) = ca.write_leaf(dir.path(), "leaf two");
        assert_ne!(first, second);
        reloader.reload().unwrap();
        assert_eq!(served_leaf(&ca, server.tcp()).await, second.to_vec());

        std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\ngarbage\n").unwrap();
        let e = reloader.reload().unwrap_err();
        assert!(
            matches!(e, crate::http::tls::TlsError::NoKey { .. }),
            "{e:?}"
        );
        assert_eq!(served_leaf(&ca, server.tcp()).await, second.to_vec());
        server.stop().await;
    }

    #[tokio::test]
    async fn sighup_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (files, _) = ca.write_leaf(dir.path(), "leaf one");
        let reloader = Arc::new(TlsReloader::load(&files).unwrap());
        let before = reloader.current();
        let _task = reloader.clone().spawn_sighup_reload();
        ca.write_leaf(dir.path(), "leaf two");
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
        // Wait for the reload task to swap the config (the deadline only ends a hang).
        let swapped = async {
            while Arc::ptr_eq(&before, &reloader.current()) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), swapped)
            .await
            .expect("SIGHUP reloaded the certificate");
    }

    #[tokio::test]
    async fn an_oversized_request_head_is_refused() {
        let limits = ConnLimits {
            max_header_bytes: 16 << 10,
            ..ConnLimits::default()
        };
        // HTTP/1: 431, then the connection is closed.
        let server = Server::start(&loopback(), None, limits);
        let big = "a".repeat(32 << 10);
        let mut stream = TcpStream::connect(server.tcp()).await.unwrap();
        let request = format!("GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: {big}\r\n\r\n");
        let got = exchange(&mut stream, request.as_bytes(), None).await;
        assert!(
            got.starts_with("HTTP/1.1 431 Request Header Fields Too Large"),
            "{got:?}"
        );
        // A head within the limit is served.
        let small = "a".repeat(8 << 10);
        let mut stream = TcpStream::connect(server.tcp()).await.unwrap();
        let request = format!(
            "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Small: {small}\r\n\r\n"
        );
        let got = exchange(&mut stream, request.as_bytes(), None).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");
        server.stop().await;

        // HTTP/2 (over TLS): a 431 on the stream.
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("test CA");
        let (server, _) = tls_server(dir.path(), &ca, limits);
        let h2 = client(&ca, &[b"h2"], server.tcp());
        let url = format!("https://localhost:{}/", server.tcp().port());
        let response = h2.get(&url).header("x-big", &big).send().await;
        match response {
            Ok(r) => assert_eq!(
                r.status(),
                http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
            ),
            Err(e) => panic!("HTTP/2 oversized head: {e:?}"),
        }
        let response = h2.get(&url).header("x-small", &small).send().await.unwrap();
        assert_eq!(response.status(), http::StatusCode::OK);
        server.stop().await;
    }

    #[tokio::test]
    async fn a_unix_socket_serves_and_replaces_only_a_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcp.sock");
        let listen = Listen::Unix(path.clone());
        let server = Server::start(&listen, None, ConnLimits::default());
        assert_eq!(server.addr, listen);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o660);

        let mut stream = UnixStream::connect(&path).await.unwrap();
        let got = exchange(&mut stream, GET_CLOSE, None).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");
        assert!(
            got.ends_with("peer=None tls=false version=HTTP/1.1"),
            "{got:?}"
        );

        // A live server is not displaced.
        let e = Listener::bind(&listen).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
        server.stop().await;

        // The socket file left behind is replaced.
        assert!(path.exists());
        let server = Server::start(&listen, None, ConnLimits::default());
        let mut stream = UnixStream::connect(&path).await.unwrap();
        assert!(exchange(&mut stream, GET_CLOSE, None)
            .await
            .starts_with("HTTP/1.1 200"));
        server.stop().await;

        // Anything else there is left alone.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "not a socket").unwrap();
        let e = Listener::bind(&listen).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
    }

    #[tokio::test]
    async fn shutdown_lets_a_request_in_flight_finish_and_ends_serve() {
        let server = Server::start(&loopback(), None, ConnLimits::default());
        // An idle keep-alive connection does not hold shutdown up.
        let mut idle = TcpStream::connect(server.tcp()).await.unwrap();
        let got = exchange(
            &mut idle,
            b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
            Some("version=HTTP/1.1"),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");

        let mut busy = TcpStream::connect(server.tcp()).await.unwrap();
        busy.write_all(b"GET /wait HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        let release = server.release.clone();
        let addr = server.tcp();
        let stopped = tokio::spawn(server.stop());
        // The listener closes (new connections are refused)...
        while TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
        // ... the request in flight gets its answer, then the connection closes.
        release.notify_one();
        let got = exchange(&mut busy, b"", None).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");
        assert!(got.ends_with("released"), "{got:?}");
        stopped.await.unwrap();
    }

    #[tokio::test]
    async fn after_the_drain_a_stuck_request_is_dropped() {
        let limits = ConnLimits {
            drain: Duration::from_millis(50),
            ..ConnLimits::default()
        };
        let server = Server::start(&loopback(), None, limits);
        let mut busy = TcpStream::connect(server.tcp()).await.unwrap();
        busy.write_all(b"GET /wait HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .unwrap();
        // Never released: serve ends anyway, and the connection with it.
        server.stop().await;
        let got = exchange(&mut busy, b"", None).await;
        assert!(!got.contains("released"), "{got:?}");
    }

    #[tokio::test]
    async fn beyond_max_connections_a_client_waits_for_a_slot() {
        let limits = ConnLimits {
            max_connections: 1,
            ..ConnLimits::default()
        };
        let server = Server::start(&loopback(), None, limits);
        let mut first = TcpStream::connect(server.tcp()).await.unwrap();
        let keep_alive = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
        let got = exchange(&mut first, keep_alive, Some("version=HTTP/1.1")).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");

        // The first connection holds the only slot: the second is not served...
        let mut second = TcpStream::connect(server.tcp()).await.unwrap();
        second.write_all(GET_CLOSE).await.unwrap();
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(200), second.read(&mut byte)).await;
        assert!(early.is_err(), "served beyond max_connections: {early:?}");
        // ... until the first ends.
        drop(first);
        let got = exchange(&mut second, b"", None).await;
        assert!(got.starts_with("HTTP/1.1 200"), "{got:?}");
        server.stop().await;
    }

    #[test]
    fn hsts_header_value() {
        assert_eq!(hsts_header(300), "max-age=300; includeSubDomains");
    }
}
