//! The HTTP routes in front of rmcp's Streamable HTTP service:
//!
//! - every request: `Host` checked first (DNS rebinding: after a rebind the browser's
//!   request is same-origin and carries no `Origin`, but `Host` names the attacker's
//!   domain), then `Origin` when present, both failing closed with 403; behind a proxy,
//!   only requests from a trusted proxy address are served, and only its forwarded
//!   headers are believed; HSTS on every response when TLS is in front;
//! - `GET /.well-known/oauth-protected-resource` and the path-suffixed variant: the
//!   RFC 9728 metadata, naming the resource, the authorization servers and the scopes;
//! - the MCP endpoint (the resource URL's path): a bearer token from `Authorization`
//!   only, checked by an [`Authenticator`]; 401 with the `resource_metadata` challenge
//!   without one or with a bad one, 403 `insufficient_scope` naming every scope the
//!   request needs (read from the JSON-RPC body, bounded), 503 when the authorization
//!   server cannot be asked. The token never goes further: the request that reaches
//!   rmcp carries the [`Principal`] in its extensions and no `Authorization` header.
//! - anything else: 404.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};

use super::config::{HttpConfig, ScopeConfig};
use super::listen::PeerAddr;
use super::RequestInfo;
use crate::audit::{Audit, Record};
use crate::principal::Principal;
use crate::server::Needs;

/// Why a token was not accepted.
#[derive(Debug, Clone)]
pub enum AuthFailure {
    /// The token is not valid for this resource (401 `invalid_token`); the description
    /// is safe to show (no token material).
    Invalid(String),
    /// The authorization server could not be asked (503): fail closed.
    Unavailable(String),
}

/// Checks bearer tokens (crate::http::token in production; fakes in tests).
pub trait Authenticator: Send + Sync + 'static {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Principal, AuthFailure>> + Send + 'a>>;
}

/// How requests are let in: with tokens, or (loopback/Unix only) as one anonymous caller.
#[derive(Clone)]
pub enum Access {
    Tokens(Arc<dyn Authenticator>),
    Anonymous,
}

/// The guard's view of the configuration.
struct Guard {
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    proxy: Option<super::config::ProxyConfig>,
    hsts: Option<HeaderValue>,
    /// The metadata URL named in challenges.
    metadata_url: String,
    resource: String,
    authorization_servers: Vec<String>,
    scopes: ScopeConfig,
    max_body_bytes: usize,
    access: Access,
    audit: Arc<Audit>,
}

impl Authenticator for super::token::TokenValidator {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Principal, AuthFailure>> + Send + 'a>> {
        Box::pin(async move {
            self.validate(token).await.map_err(|e| {
                if e.is_unavailable() {
                    AuthFailure::Unavailable(e.to_string())
                } else {
                    AuthFailure::Invalid(e.description())
                }
            })
        })
    }
}

/// The router: guard, metadata, and `mcp` (rmcp's service) at the endpoint path.
pub fn router<S>(config: &HttpConfig, access: Access, audit: Arc<Audit>, mcp: S) -> Router
where
    S: tower::Service<Request, Error = std::convert::Infallible> + Clone + Send + Sync + 'static,
    S::Response: IntoResponse + 'static,
    S::Future: Send + 'static,
{
    let endpoint = config.endpoint_path().to_string();
    let metadata_path = metadata_path_for(&endpoint);
    let mut metadata_url = config.resource.clone();
    metadata_url.set_path(&metadata_path);
    let guard = Arc::new(Guard {
        allowed_hosts: config
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        allowed_origins: config
            .allowed_origins
            .iter()
            .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
            .collect(),
        proxy: config.proxy.clone(),
        hsts: config.hsts_max_age().map(|age| {
            HeaderValue::from_str(&format!("max-age={age}; includeSubDomains"))
                .expect("a number is a header value")
        }),
        metadata_url: metadata_url.to_string(),
        resource: config.resource.to_string(),
        authorization_servers: config
            .auth
            .as_ref()
            .map(|a| {
                a.authorization_servers
                    .iter()
                    .map(|u| u.as_str().trim_end_matches('/').to_string())
                    .collect()
            })
            .unwrap_or_default(),
        scopes: config.scopes.clone(),
        max_body_bytes: config.max_body_bytes,
        access,
        audit,
    });
    let metadata = get(protected_resource_metadata).with_state(guard.clone());
    let mcp_route = axum::routing::any_service(mcp).layer(axum::middleware::from_fn_with_state(
        guard.clone(),
        authorize,
    ));
    let mut router = Router::new()
        .route("/.well-known/oauth-protected-resource", metadata.clone())
        .route(&metadata_path, metadata)
        .route_service(&endpoint, mcp_route)
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") });
    if !config.cors_origins.is_empty() {
        router = router.layer(cors(&config.cors_origins));
    }
    router.layer(axum::middleware::from_fn_with_state(guard, check_request))
}

/// `/.well-known/oauth-protected-resource` + the endpoint path (RFC 9728 §3.1).
pub fn metadata_path_for(endpoint: &str) -> String {
    match endpoint {
        "/" | "" => "/.well-known/oauth-protected-resource".into(),
        p => format!("/.well-known/oauth-protected-resource{p}"),
    }
}

fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::GET, Method::POST, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            HeaderName::from_static("mcp-protocol-version"),
            HeaderName::from_static("mcp-method"),
            HeaderName::from_static("mcp-name"),
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([
            header::WWW_AUTHENTICATE,
            HeaderName::from_static("mcp-session-id"),
        ])
}

/// Who sent the request, over which scheme, naming which host, after the proxy rules.
struct Seen {
    peer: Option<IpAddr>,
    host: Option<String>,
}

impl Guard {
    /// The request as the client sent it: a trusted proxy's forwarded headers, else the
    /// connection's own. `Err` for a request that may not be served at all.
    fn seen(&self, req: &Request) -> Result<Seen, (StatusCode, &'static str)> {
        let tcp_peer = req
            .extensions()
            .get::<PeerAddr>()
            .and_then(|p| p.0)
            .map(|a| a.ip());
        let own_host = host_of(req);
        let Some(proxy) = &self.proxy else {
            return Ok(Seen {
                peer: tcp_peer,
                host: own_host,
            });
        };
        // Behind a proxy only the proxy may connect: anyone else would bypass its TLS.
        let trusted = match tcp_peer {
            Some(ip) => proxy.trusts(ip),
            // A Unix socket: whoever may connect to it is the proxy.
            None => true,
        };
        if !trusted {
            return Err((
                StatusCode::FORBIDDEN,
                "requests are served only through the configured reverse proxy\n",
            ));
        }
        let headers = req.headers();
        if let Some(proto) = last_value(headers, "x-forwarded-proto") {
            if !proto.eq_ignore_ascii_case("https") {
                return Err((
                    StatusCode::FORBIDDEN,
                    "HTTPS only: the proxy forwarded a plain HTTP request\n",
                ));
            }
        }
        // The client is the rightmost address that is not one of our proxies.
        let forwarded_for = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter_map(|a| a.parse::<IpAddr>().ok())
            .collect::<Vec<_>>();
        let peer = forwarded_for
            .iter()
            .rev()
            .find(|ip| !proxy.trusts(**ip))
            .copied()
            .or(tcp_peer);
        let host = last_value(headers, "x-forwarded-host")
            .map(|h| h.to_ascii_lowercase())
            .or(own_host);
        Ok(Seen { peer, host })
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.allowed_hosts.iter().any(|h| h == host)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        self.allowed_origins.contains(&origin)
    }

    fn challenge(&self, error: Option<(&str, &str)>, scopes: &[String]) -> HeaderValue {
        let mut value = format!("Bearer resource_metadata=\"{}\"", self.metadata_url);
        if !scopes.is_empty() {
            value.push_str(&format!(", scope=\"{}\"", scopes.join(" ")));
        }
        if let Some((error, description)) = error {
            let description: String = description
                .chars()
                .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
                .take(200)
                .collect();
            value.push_str(&format!(
                ", error=\"{error}\", error_description=\"{description}\""
            ));
        }
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    fn refuse(&self, seen_peer: Option<IpAddr>, outcome: &str, detail: Option<String>) {
        self.audit.write(Record {
            event: "refused".into(),
            peer: seen_peer,
            outcome: outcome.into(),
            detail,
            ..Record::default()
        });
    }
}

/// The `Host` a request names: HTTP/1's header, or HTTP/2's `:authority`.
fn host_of(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_string()))
        .map(|h| h.to_ascii_lowercase())
}

fn last_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .rfind(|v| !v.is_empty())
        .map(str::to_string)
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// Host, then Origin, then the proxy rules; HSTS on whatever is answered.
async fn check_request(State(guard): State<Arc<Guard>>, mut req: Request, next: Next) -> Response {
    let mut response = match guard.seen(&req) {
        Err((status, text)) => {
            guard.refuse(None, &format!("{} proxy", status.as_u16()), None);
            plain(status, text)
        }
        Ok(seen) => match seen.host.as_deref() {
            None => plain(StatusCode::BAD_REQUEST, "no Host header\n"),
            Some(host) if !guard.host_allowed(host) => {
                guard.refuse(
                    seen.peer,
                    "403 host",
                    Some(host.chars().take(100).collect()),
                );
                plain(
                    StatusCode::FORBIDDEN,
                    "forbidden: the Host header names no host this server answers for\n",
                )
            }
            Some(_) => {
                let origin = req
                    .headers()
                    .get(header::ORIGIN)
                    .map(|o| o.to_str().unwrap_or("\u{fffd}").to_string());
                match origin {
                    Some(origin) if !guard.origin_allowed(&origin) => {
                        guard.refuse(
                            seen.peer,
                            "403 origin",
                            Some(origin.chars().take(100).collect()),
                        );
                        plain(
                            StatusCode::FORBIDDEN,
                            "forbidden: requests from this Origin are not accepted\n",
                        )
                    }
                    _ => {
                        req.extensions_mut().insert(RequestInfo { peer: seen.peer });
                        next.run(req).await
                    }
                }
            }
        },
    };
    if let Some(hsts) = &guard.hsts {
        response
            .headers_mut()
            .insert(header::STRICT_TRANSPORT_SECURITY, hsts.clone());
    }
    response
}

/// RFC 9728 protected-resource metadata.
async fn protected_resource_metadata(State(guard): State<Arc<Guard>>) -> Response {
    let mut body = json!({
        "resource": guard.resource,
        "scopes_supported": guard.scopes.all(),
        "bearer_methods_supported": ["header"],
        "resource_name": "Vivarium: sandboxed Python (MCP)",
    });
    if !guard.authorization_servers.is_empty() {
        body["authorization_servers"] = json!(guard.authorization_servers);
    }
    (
        [(header::CACHE_CONTROL, "public, max-age=300")],
        axum::Json(body),
    )
        .into_response()
}

/// The bearer token of a request: exactly one `Authorization: Bearer <token>`.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, &'static str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("more than one Authorization header");
    }
    let value = value
        .to_str()
        .map_err(|_| "malformed Authorization header")?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or("the Authorization header is not a Bearer token")?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("the Authorization scheme is not Bearer");
    }
    let token = token.trim();
    if token.is_empty() || token.contains(' ') {
        return Err("malformed Bearer token");
    }
    Ok(Some(token))
}

/// Authenticate, check the request's scopes, and hand rmcp the request with the
/// principal and without the token.
async fn authorize(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let peer = req.extensions().get::<RequestInfo>().and_then(|i| i.peer);
    let all_scopes = guard.scopes.all();
    let (principal, enforce) = match &guard.access {
        Access::Anonymous => (Principal::unauthenticated(), false),
        Access::Tokens(auth) => {
            let token = match bearer(req.headers()) {
                Ok(Some(token)) => token.to_string(),
                Ok(None) => {
                    guard.refuse(peer, "401 no_token", None);
                    return unauthorized(guard.challenge(None, &all_scopes), None);
                }
                Err(why) => {
                    guard.refuse(peer, "401 invalid_request", Some(why.into()));
                    let c = guard.challenge(Some(("invalid_request", why)), &all_scopes);
                    return (
                        StatusCode::BAD_REQUEST,
                        [(header::WWW_AUTHENTICATE, c)],
                        why,
                    )
                        .into_response();
                }
            };
            match auth.authenticate(&token).await {
                Ok(principal) => (principal, true),
                Err(AuthFailure::Invalid(description)) => {
                    guard.refuse(peer, "401 invalid_token", Some(description.clone()));
                    let c = guard.challenge(Some(("invalid_token", &description)), &all_scopes);
                    return unauthorized(c, Some(&description));
                }
                Err(AuthFailure::Unavailable(why)) => {
                    tracing::warn!(error = %why, "tokens cannot be checked now");
                    guard.refuse(peer, "503 unavailable", Some(why));
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::RETRY_AFTER, "10")],
                        "the authorization server cannot be reached to check the token; retry shortly\n",
                    )
                        .into_response();
                }
            }
        }
    };
    let (mut parts, body) = req.into_parts();
    // The token stops here.
    parts.headers.remove(header::AUTHORIZATION);
    let bytes = if parts.method == Method::POST {
        match read_bounded(body, guard.max_body_bytes).await {
            Ok(bytes) => bytes,
            Err(response) => return response,
        }
    } else {
        Bytes::new()
    };
    if enforce && parts.method == Method::POST {
        let needs = needs_of_body(&bytes);
        let needed = needs.scopes(&guard.scopes);
        let missing: Vec<&String> = needed.iter().filter(|s| !principal.has_scope(s)).collect();
        if !missing.is_empty() {
            let mut record = Record::by("refused", &principal);
            record.peer = peer;
            record.outcome = "403 insufficient_scope".into();
            record.detail = Some(format!(
                "needs {}",
                missing
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            guard.audit.write(record);
            // Every scope the request needs (with those it has), in one challenge.
            let mut scopes: Vec<String> = principal.scopes.iter().cloned().collect();
            for s in needed {
                if !scopes.contains(&s) {
                    scopes.push(s);
                }
            }
            let c = guard.challenge(
                Some((
                    "insufficient_scope",
                    "the access token does not grant the scope this request needs",
                )),
                &scopes,
            );
            return (
                StatusCode::FORBIDDEN,
                [(header::WWW_AUTHENTICATE, c)],
                axum::Json(json!({
                    "error": "insufficient_scope",
                    "error_description": "the access token does not grant the scope this request needs",
                    "scope": scopes.join(" "),
                })),
            )
                .into_response();
        }
    }
    parts.extensions.insert(principal);
    let req = Request::from_parts(parts, Body::from(bytes));
    next.run(req).await
}

fn unauthorized(challenge: HeaderValue, description: Option<&str>) -> Response {
    let body = match description {
        None => {
            json!({ "error": "unauthorized", "error_description": "a bearer access token is required" })
        }
        Some(d) => json!({ "error": "invalid_token", "error_description": d }),
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
        axum::Json(body),
    )
        .into_response()
}

async fn read_bounded(body: Body, max: usize) -> Result<Bytes, Response> {
    let limited = http_body_util::Limited::new(body, max);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request body too large\n",
                ))
            } else {
                Err(plain(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read\n",
                ))
            }
        }
    }
}

/// What a JSON-RPC message needs its token to grant. A body that is not one JSON-RPC
/// request needs nothing here: rmcp refuses it.
pub fn needs_of_body(bytes: &[u8]) -> Needs {
    let Ok(value) = serde_json::from_slice::<Value>(bytes) else {
        return Needs::default();
    };
    match &value {
        // A batch (2025-03-26): the union of its members'.
        Value::Array(items) => items.iter().fold(Needs::default(), |acc, item| {
            let n = needs_of_message(item);
            Needs {
                run: acc.run || n.run,
                sessions: acc.sessions || n.sessions,
                packages: acc.packages || n.packages,
            }
        }),
        one => needs_of_message(one),
    }
}

fn needs_of_message(message: &Value) -> Needs {
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let params = message.get("params");
    match method {
        "tools/call" => {
            let name = params
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let arguments = params.and_then(|p| p.get("arguments"));
            match name {
                crate::cell::CLOSE_TOOL_NAME | crate::cell::LIST_TOOL_NAME => Needs::sessions(),
                _ => Needs {
                    run: true,
                    sessions: arguments
                        .and_then(|a| a.get("session_id"))
                        .is_some_and(|s| !s.is_null()),
                    packages: arguments
                        .and_then(|a| a.get("packages"))
                        .is_some_and(|p| match p {
                            Value::Array(a) => !a.is_empty(),
                            Value::Null => false,
                            _ => true,
                        }),
                },
            }
        }
        m if m.starts_with("resources/") || m.starts_with("tasks/") => Needs {
            run: true,
            ..Needs::default()
        },
        _ => Needs::default(),
    }
}

#[cfg(test)]
mod tests;
