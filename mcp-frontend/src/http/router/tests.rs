use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use tower::ServiceExt;

use super::*;
use crate::http::config::{FileConfig, HttpConfig};
use crate::principal::PrincipalKey;

/// Tokens: `all` (every scope), `run` (only vivarium:run), `bad` (invalid), `down` (the
/// authorization server is unreachable).
struct Fake;

impl Authenticator for Fake {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Principal, AuthFailure>> + Send + 'a>> {
        Box::pin(async move {
            let scopes: &[&str] = match token {
                "all" => &["vivarium:run", "vivarium:sessions", "vivarium:packages"],
                "run" => &["vivarium:run"],
                "down" => return Err(AuthFailure::Unavailable("connection refused".into())),
                _ => return Err(AuthFailure::Invalid("signature \"invalid\"".into())),
            };
            Ok(Principal {
                key: PrincipalKey::new("https://as.example", "alice"),
                client_id: Some("c1".into()),
                scopes: scopes
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<BTreeSet<_>>(),
            })
        })
    }
}

/// What reached the MCP service (counted), answering with what it saw.
#[derive(Clone)]
struct Inner(Arc<AtomicUsize>);

impl tower::Service<Request> for Inner {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        let principal = req.extensions().get::<Principal>().cloned();
        let info = req.extensions().get::<RequestInfo>().cloned();
        let has_token = req.headers().contains_key(header::AUTHORIZATION);
        Box::pin(async move {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            Ok(axum::Json(json!({
                "sub": principal.map(|p| p.key.subject().to_string()),
                "peer": info.and_then(|i| i.peer).map(|p| p.to_string()),
                "token_seen": has_token,
                "body_len": body.len(),
            }))
            .into_response())
        })
    }
}

fn config(extra: &str) -> HttpConfig {
    let text = format!(
        "resource = \"https://mcp.example/mcp\"\nmax_body_bytes = 4096\n{extra}\n[auth]\nauthorization_servers = [\"https://as.example\"]\n"
    );
    let file: FileConfig = toml::from_str(&text).unwrap();
    HttpConfig::check(file, Some("0.0.0.0:443")).unwrap()
}

const TLS: &str = "[tls]\ncert = \"/c\"\nkey = \"/k\"\n";

fn app(config: &HttpConfig) -> (Router, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let audit = Arc::new(Audit::open(None, false).unwrap());
    let r = router(
        config,
        Access::Tokens(Arc::new(Fake)),
        audit,
        Inner(hits.clone()),
    );
    (r, hits)
}

fn post(token: Option<&str>, body: Value) -> http::request::Builder {
    let mut b = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header(header::HOST, "mcp.example")
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let _ = body;
    b
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

async fn send(app: &Router, req: Request) -> (StatusCode, HeaderMap, Value) {
    let response = app.clone().oneshot(req).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    (status, headers, value)
}

fn with_peer(mut req: Request, ip: &str) -> Request {
    req.extensions_mut()
        .insert(PeerAddr(Some(std::net::SocketAddr::new(
            ip.parse().unwrap(),
            40000,
        ))));
    req
}

fn request(token: Option<&str>, body: Value) -> Request {
    let bytes = serde_json::to_vec(&body).unwrap();
    with_peer(
        post(token, body).body(Body::from(bytes)).unwrap(),
        "192.0.2.7",
    )
}

fn www_authenticate(headers: &HeaderMap) -> String {
    headers
        .get(header::WWW_AUTHENTICATE)
        .expect("a challenge")
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn metadata_is_served_at_both_paths() {
    let (app, hits) = app(&config(TLS));
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let req = Request::get(path)
            .header(header::HOST, "mcp.example")
            .body(Body::empty())
            .unwrap();
        let (status, headers, body) = send(&app, req).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(body["resource"], "https://mcp.example/mcp");
        assert_eq!(body["authorization_servers"], json!(["https://as.example"]));
        assert_eq!(
            body["scopes_supported"],
            json!(["vivarium:run", "vivarium:sessions", "vivarium:packages"])
        );
        assert_eq!(body["bearer_methods_supported"], json!(["header"]));
        assert!(headers
            .get(header::STRICT_TRANSPORT_SECURITY)
            .is_some_and(|v| v.to_str().unwrap().starts_with("max-age=31536000")));
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn no_token_gets_the_challenge_and_never_reaches_mcp() {
    let (app, hits) = app(&config(TLS));
    let (status, headers, _) = send(&app, request(None, call("run_python", json!({})))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let c = www_authenticate(&headers);
    assert!(
        c.starts_with(
            "Bearer resource_metadata=\"https://mcp.example/.well-known/oauth-protected-resource/mcp\""
        ),
        "{c}"
    );
    assert!(
        c.contains("scope=\"vivarium:run vivarium:sessions vivarium:packages\""),
        "{c}"
    );
    assert!(!c.contains("error="), "{c}");
    for (token, status) in [
        ("bad", StatusCode::UNAUTHORIZED),
        ("down", StatusCode::SERVICE_UNAVAILABLE),
    ] {
        let (got, headers, _) = send(&app, request(Some(token), json!({}))).await;
        assert_eq!(got, status, "{token}");
        if status == StatusCode::UNAUTHORIZED {
            let c = www_authenticate(&headers);
            assert!(c.contains("error=\"invalid_token\""), "{c}");
            // The description is cleaned of quotes.
            assert!(c.contains("error_description=\"signature invalid\""), "{c}");
        }
    }
    // Not Bearer, two headers, and an empty token are malformed requests.
    for auth in ["Basic YTpi", "Bearer ", "Bearer a b"] {
        let req = with_peer(
            Request::post("/mcp")
                .header(header::HOST, "mcp.example")
                .header(header::AUTHORIZATION, auth)
                .body(Body::empty())
                .unwrap(),
            "192.0.2.7",
        );
        let (status, _, _) = send(&app, req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{auth}");
    }
    let req = with_peer(
        Request::post("/mcp")
            .header(header::HOST, "mcp.example")
            .header(header::AUTHORIZATION, "Bearer all")
            .header(header::AUTHORIZATION, "Bearer all")
            .body(Body::empty())
            .unwrap(),
        "192.0.2.7",
    );
    assert_eq!(send(&app, req).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn scopes_are_checked_per_capability() {
    let (app, hits) = app(&config(TLS));
    // tools/list needs only a valid token.
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(
        send(&app, request(Some("run"), list)).await.0,
        StatusCode::OK
    );
    let plain_run = call("run_python", json!({"code": "pass"}));
    assert_eq!(
        send(&app, request(Some("run"), plain_run)).await.0,
        StatusCode::OK
    );
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    for (body, needs) in [
        (
            call("run_python", json!({"code": "pass", "packages": ["six"]})),
            "vivarium:run vivarium:packages",
        ),
        (
            call("run_python", json!({"code": "pass", "session_id": "new"})),
            "vivarium:run vivarium:sessions",
        ),
        (
            call("close_session", json!({"session_id": "mcp_x"})),
            "vivarium:run vivarium:sessions",
        ),
        (
            call("list_sessions", json!({})),
            "vivarium:run vivarium:sessions",
        ),
    ] {
        let (status, headers, json) = send(&app, request(Some("run"), body.clone())).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        let c = www_authenticate(&headers);
        assert!(c.contains("error=\"insufficient_scope\""), "{c}");
        assert!(c.contains(&format!("scope=\"{needs}\"")), "{c} / {needs}");
        assert!(c.contains("resource_metadata="), "{c}");
        assert_eq!(json["error"], "insufficient_scope");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        2,
        "no refused request reached MCP"
    );
    // With every scope, they pass, and the token does not go on.
    let (status, _, json) = send(
        &app,
        request(
            Some("all"),
            call("run_python", json!({"code": "pass", "packages": ["six"]})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["sub"], "alice");
    assert_eq!(json["token_seen"], false);
    assert_eq!(json["peer"], "192.0.2.7");
    assert!(json["body_len"].as_u64().unwrap() > 10);
}

#[tokio::test]
async fn host_and_origin_fail_closed_before_anything_else() {
    let (app, hits) = app(&config(TLS));
    let body = serde_json::to_vec(&call("run_python", json!({"code": "pass"}))).unwrap();
    let with = |host: &str, origin: Option<&str>| {
        let mut b = Request::post("/mcp")
            .header(header::HOST, host)
            .header(header::AUTHORIZATION, "Bearer all");
        if let Some(o) = origin {
            b = b.header(header::ORIGIN, o);
        }
        with_peer(b.body(Body::from(body.clone())).unwrap(), "192.0.2.7")
    };
    // A rebound name, with or without a port; the Origin matching the rebound name.
    for (host, origin) in [
        ("attacker.example", None),
        ("attacker.example:443", Some("https://attacker.example")),
        ("mcp.example.attacker.example", None),
    ] {
        let (status, _, _) = send(&app, with(host, origin)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{host}");
    }
    for origin in ["https://attacker.example", "null", "http://mcp.example"] {
        let (status, _, _) = send(&app, with("mcp.example", Some(origin))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{origin}");
    }
    // The metadata too is behind the Host check.
    let req = Request::get("/.well-known/oauth-protected-resource")
        .header(header::HOST, "attacker.example")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, req).await.0, StatusCode::FORBIDDEN);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    for (host, origin) in [
        ("mcp.example", Some("https://mcp.example")),
        ("MCP.example:443", None),
    ] {
        let (status, _, _) = send(&app, with(host, origin)).await;
        assert_eq!(status, StatusCode::OK, "{host}");
    }
}

#[tokio::test]
async fn bodies_are_bounded_and_other_paths_are_not_found() {
    let (app, hits) = app(&config(TLS));
    let big = "x".repeat(5000);
    let req = with_peer(
        post(Some("all"), json!({}))
            .body(Body::from(
                serde_json::to_vec(&call("run_python", json!({ "code": big }))).unwrap(),
            ))
            .unwrap(),
        "192.0.2.7",
    );
    assert_eq!(send(&app, req).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    let req = Request::get("/admin")
        .header(header::HOST, "mcp.example")
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, req).await.0, StatusCode::NOT_FOUND);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn behind_a_proxy_only_the_proxy_is_believed() {
    let cfg = config("[proxy]\ntrusted = [\"10.0.0.1/32\"]\n");
    let (app, hits) = app(&cfg);
    let body = serde_json::to_vec(&call("run_python", json!({"code": "pass"}))).unwrap();
    let req = |peer: &str, proto: &str, host: &str| {
        with_peer(
            Request::post("/mcp")
                .header(header::HOST, "127.0.0.1:8080")
                .header("x-forwarded-proto", proto)
                .header("x-forwarded-host", host)
                .header("x-forwarded-for", "203.0.113.9, 10.0.0.1")
                .header(header::AUTHORIZATION, "Bearer all")
                .body(Body::from(body.clone()))
                .unwrap(),
            peer,
        )
    };
    // Straight to the backend, bypassing the proxy.
    let (status, _, _) = send(&app, req("192.0.2.7", "https", "mcp.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Through the proxy over plain HTTP.
    let (status, _, _) = send(&app, req("10.0.0.1", "http", "mcp.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Through the proxy, for another host.
    let (status, _, _) = send(&app, req("10.0.0.1", "https", "attacker.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let (status, headers, json) = send(&app, req("10.0.0.1", "https", "mcp.example")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json["peer"], "203.0.113.9");
    assert!(headers.contains_key(header::STRICT_TRANSPORT_SECURITY));
}

#[test]
fn needs_follow_the_arguments() {
    let n = |v: Value| needs_of_body(&serde_json::to_vec(&v).unwrap());
    assert_eq!(
        n(call("run_python", json!({"code": "x", "packages": []}))),
        Needs {
            run: true,
            ..Needs::default()
        }
    );
    assert!(n(call("run_python", json!({"session_id": "new"}))).sessions);
    assert!(!n(call("run_python", json!({"session_id": null}))).sessions);
    // A malformed packages value still counts as asking for packages.
    assert!(n(call("run_python", json!({"packages": "six"}))).packages);
    assert!(n(json!({"jsonrpc": "2.0", "id": 1, "method": "resources/read"})).run);
    assert_eq!(n(json!({"method": "initialize"})), Needs::default());
    assert_eq!(needs_of_body(b"not json"), Needs::default());
    // A batch needs what each member needs.
    let batch = json!([
        call("run_python", json!({"code": "x"})),
        call("run_python", json!({"packages": ["six"]})),
    ]);
    assert!(n(batch).packages);
}

#[tokio::test]
async fn cors_is_off_unless_configured() {
    let preflight = |origin: &str| {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/mcp")
            .header(header::HOST, "mcp.example")
            .header(header::ORIGIN, origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization, content-type",
            )
            .body(Body::empty())
            .unwrap()
    };
    let (off, _) = app(&config(TLS));
    let (_, headers, _) = send(&off, preflight("https://mcp.example")).await;
    assert!(
        !headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
        "{headers:?}"
    );
    let cfg = config(&format!("cors_origins = [\"https://app.example\"]\n{TLS}"));
    let (on, hits) = app(&cfg);
    let (status, headers, _) = send(&on, preflight("https://app.example")).await;
    assert!(status.is_success(), "{status}");
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://app.example"
    );
    assert!(headers[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap()
        .contains("authorization"));
    // Another origin gets nothing (and is refused as an Origin).
    let (status, headers, _) = send(&on, preflight("https://evil.example")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}
