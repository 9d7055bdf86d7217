//! The access-token validator of the resource server (MCP authorization; RFC 9068 JWT
//! access tokens, RFC 7662 introspection for the others).
//!
//! A token is accepted only when it was issued by the configured issuer for this resource
//! (RFC 8707: `aud` names the canonical resource URI exactly), is within its lifetime, and
//! names a subject; the principal is `(iss, sub)`.
//!
//! - A JWT (three base64url parts whose first is a JSON header) is checked here: `alg` in
//!   the configured list (asymmetric only: `none` and HS* never), `typ` per the
//!   configuration, the key chosen by `kid` from the issuer's JWKS among the keys fit for
//!   that `alg` (`use` absent or `sig`, `key_ops` absent or with `verify`, the JWK's `alg`
//!   absent or the same, the key type and curve of the algorithm's family), `exp`, `iss`,
//!   `aud`, `sub` required, `nbf` checked when present, with the configured leeway.
//!   A token without `kid` is checked against the one fit key if there is exactly one.
//!   With introspection configured and no JWKS published, JWTs are introspected too.
//! - Any other token goes to introspection when configured ([`introspect`]), else it is
//!   malformed.
//!
//! Keys ([`jwks`]) are fetched at start (fail closed: no keys, no server) and used for
//! `jwks_cache_seconds`; an unknown `kid` refetches at most once per
//! `jwks_min_refresh_seconds`; concurrent validations share one fetch. A cache that is
//! expired and cannot be refreshed fails every validation as unavailable (503), as does an
//! unreachable introspection endpoint.
//!
//! Every fetch (metadata, keys, introspection) goes over https, or http to a loopback
//! host only, with a 5 s timeout, no redirects, a bounded body, and the web PKI roots plus
//! the configured `ca_file`. The token itself never appears in a log line or an error.
//!
//! Issuer: `[auth] issuer`, else the first authorization server as the URL prints it. A
//! bare-origin URL prints with a trailing `/` (`https://as.example/`), which not every
//! issuer uses, so then both spellings are accepted, narrowed to the metadata's `issuer`
//! when the metadata is fetched.

mod introspect;
mod jwks;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use url::Url;

use super::config::AuthConfig;
use crate::principal::{Principal, PrincipalKey};

/// Longest token accepted, bytes (checked before any parsing).
pub const MAX_TOKEN_BYTES: usize = 16 << 10;
/// Largest metadata or JWKS document, bytes.
const MAX_DOCUMENT_BYTES: usize = 256 << 10;
/// Largest introspection answer, bytes.
const MAX_INTROSPECTION_BYTES: usize = 64 << 10;
/// Timeout of each fetch (connect and whole request).
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Checks bearer tokens. Cheap to share in an `Arc`.
pub struct TokenValidator {
    /// The required `aud`: the canonical resource URI.
    resource: String,
    /// The `iss` values accepted (one, or a bare origin's two spellings).
    issuers: Vec<String>,
    algorithms: Vec<Algorithm>,
    /// `typ` must be `at+jwt` (RFC 9068); false for `typ = "any"`.
    require_at_jwt: bool,
    leeway: u64,
    /// None when only introspection is configured and the issuer publishes no JWKS.
    jwks: Option<jwks::Jwks>,
    introspection: Option<introspect::Introspector>,
    /// Shared with the caches; read here only by the tests, which move it.
    #[cfg_attr(not(test), allow(dead_code))]
    clock: Arc<Clock>,
}

/// Why a token was refused, or could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("the token is longer than {MAX_TOKEN_BYTES} bytes")]
    TooLarge,
    #[error("the token is malformed")]
    Malformed,
    #[error("the token's algorithm is not accepted")]
    Algorithm,
    #[error("the token's type (typ) is not an access token's")]
    Type,
    #[error("the token's signing key is unknown")]
    UnknownKey,
    #[error("the token's signature is invalid")]
    Signature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token is not for this resource (audience)")]
    Audience,
    #[error("the token is not from the accepted issuer")]
    Issuer,
    #[error("the token lacks the `{0}` claim")]
    MissingClaim(&'static str),
    #[error("the token's claim `{0}` is invalid")]
    InvalidClaim(String),
    #[error("the token is not active")]
    Inactive,
    /// The issuer's keys cannot be fetched (and the cached ones are too old).
    #[error("the authorization server's keys are unavailable: {0}")]
    KeysUnavailable(String),
    /// The introspection endpoint cannot be reached or answered unusably.
    #[error("token introspection is unavailable: {0}")]
    IntrospectionUnavailable(String),
}

impl TokenError {
    /// The `error_description` for the 401 challenge: short, no token material, safe to show.
    pub fn description(&self) -> String {
        match self {
            TokenError::TooLarge => "token too large".into(),
            TokenError::Malformed => "malformed token".into(),
            TokenError::Algorithm => "token algorithm not accepted".into(),
            TokenError::Type => "not an access token (typ)".into(),
            TokenError::UnknownKey => "unknown signing key".into(),
            TokenError::Signature => "invalid signature".into(),
            TokenError::Expired => "token expired".into(),
            TokenError::NotYetValid => "token not yet valid".into(),
            TokenError::Audience => "token not issued for this resource".into(),
            TokenError::Issuer => "token from an unexpected issuer".into(),
            TokenError::MissingClaim(c) => format!("token lacks the {c} claim"),
            // The claim's name comes from us (a fixed list), never from the token.
            TokenError::InvalidClaim(c) if c.is_empty() => "invalid claim".into(),
            TokenError::InvalidClaim(c) => format!("invalid {c} claim"),
            TokenError::Inactive => "token not active".into(),
            TokenError::KeysUnavailable(_) => "authorization server keys unavailable".into(),
            TokenError::IntrospectionUnavailable(_) => "token introspection unavailable".into(),
        }
    }

    /// true when the failure is ours (JWKS or introspection endpoint unreachable): the
    /// caller answers 503, not 401.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            TokenError::KeysUnavailable(_) | TokenError::IntrospectionUnavailable(_)
        )
    }
}

/// A configuration that cannot be served (checked at start: fail closed).
#[derive(Debug, thiserror::Error)]
pub enum TokenSetupError {
    #[error("`[auth] authorization_servers` lists none")]
    NoAuthorizationServer,
    #[error("`[auth] algorithms`: {0}")]
    Algorithm(String),
    #[error("`[auth] typ` = `{0}`: expected `at+jwt` (or `application/at+jwt`) or `any`")]
    Typ(String),
    #[error("{what} `{url}`: only https is fetched (http only to a loopback host)")]
    InsecureUrl { what: &'static str, url: String },
    #[error("`[auth] ca_file` {path}: {message}")]
    CaFile { path: String, message: String },
    #[error("`[auth.introspection] client_secret_file` {path}: {message}")]
    Secret { path: String, message: String },
    #[error("the HTTP client: {0}")]
    Client(String),
    #[error("the authorization server's metadata ({issuer}): {message}")]
    Metadata { issuer: String, message: String },
    #[error("the authorization server's keys ({url}): {message}")]
    Jwks { url: String, message: String },
}

impl TokenValidator {
    /// Build from config; `resource` is the canonical resource URI (the required `aud`).
    ///
    /// Fetches the issuer metadata if `jwks_uri` is absent (RFC 8414
    /// `/.well-known/oauth-authorization-server`, then OpenID Connect
    /// `openid-configuration`, the issuer's path inserted after the well-known prefix per
    /// RFC 8414 §3.1, then OIDC's appended form), and fetches the JWKS once: an error if it
    /// cannot (fail closed at start).
    pub async fn new(auth: &AuthConfig, resource: &Url) -> Result<TokenValidator, TokenSetupError> {
        let Some(server) = auth.authorization_servers.first() else {
            return Err(TokenSetupError::NoAuthorizationServer);
        };
        let algorithms = parse_algorithms(&auth.algorithms)?;
        let require_at_jwt = match auth.typ.to_ascii_lowercase().as_str() {
            "at+jwt" | "application/at+jwt" => true,
            "any" => false,
            _ => return Err(TokenSetupError::Typ(auth.typ.clone())),
        };
        let client = http_client(auth.ca_file.as_deref())?;
        let clock = Arc::new(Clock::default());
        let server_spellings = issuer_spellings(server);
        let mut issuers = match &auth.issuer {
            Some(issuer) => vec![issuer.clone()],
            None => server_spellings.clone(),
        };
        let jwks_uri = match &auth.jwks_uri {
            Some(uri) => Some(uri.clone()),
            None => {
                let metadata = discover(&client, server, &server_spellings).await?;
                if auth.issuer.is_none() {
                    issuers = vec![metadata.issuer];
                }
                match (metadata.jwks_uri, &auth.introspection) {
                    (Some(uri), _) => Some(uri),
                    (None, Some(_)) => None,
                    (None, None) => {
                        return Err(TokenSetupError::Metadata {
                            issuer: server.to_string(),
                            message: "no `jwks_uri` (and no introspection configured)".into(),
                        })
                    }
                }
            }
        };
        let jwks = match jwks_uri {
            Some(uri) => {
                check_fetch_url("jwks_uri", &uri)?;
                Some(
                    jwks::Jwks::new(
                        client.clone(),
                        uri,
                        Duration::from_secs(auth.jwks_cache_seconds),
                        Duration::from_secs(auth.jwks_min_refresh_seconds),
                        clock.clone(),
                    )
                    .await?,
                )
            }
            None => None,
        };
        let introspection = match &auth.introspection {
            Some(config) => {
                check_fetch_url("introspection endpoint", &config.endpoint)?;
                Some(introspect::Introspector::new(
                    client,
                    config,
                    clock.clone(),
                )?)
            }
            None => None,
        };
        Ok(TokenValidator {
            resource: resource.as_str().to_string(),
            issuers,
            algorithms,
            require_at_jwt,
            leeway: auth.leeway_seconds,
            jwks,
            introspection,
            clock,
        })
    }

    /// Validate a bearer token; on success the principal (key = (iss, sub), client_id from
    /// `client_id` or `azp`, scopes from `scope` (space-separated) or `scp` (array or
    /// string)).
    pub async fn validate(&self, token: &str) -> Result<Principal, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLarge);
        }
        // RFC 6750 b64token: nothing else can be a bearer token.
        let b64token = |b: u8| b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b);
        if token.is_empty() || !token.bytes().all(b64token) {
            return Err(TokenError::Malformed);
        }
        match (jwt_header(token), &self.jwks, &self.introspection) {
            (Some(header), Some(jwks), _) => self.validate_jwt(token, &header, jwks).await,
            (_, _, Some(introspection)) => introspection.validate(token, &self.expect()).await,
            (_, _, None) => Err(TokenError::Malformed),
        }
    }

    fn expect(&self) -> Expect<'_> {
        Expect {
            resource: &self.resource,
            issuers: &self.issuers,
            leeway: self.leeway,
        }
    }

    async fn validate_jwt(
        &self,
        token: &str,
        header: &Map<String, Value>,
        jwks: &jwks::Jwks,
    ) -> Result<Principal, TokenError> {
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or(TokenError::Malformed)?;
        let Some(&alg) = self.algorithms.iter().find(|a| alg_name(**a) == alg) else {
            return Err(TokenError::Algorithm);
        };
        if self.require_at_jwt {
            let typ = header.get("typ").and_then(Value::as_str).unwrap_or("");
            if !(typ.eq_ignore_ascii_case("at+jwt")
                || typ.eq_ignore_ascii_case("application/at+jwt"))
            {
                return Err(TokenError::Type);
            }
        }
        let kid = match header.get("kid") {
            None => None,
            Some(Value::String(kid)) => Some(kid.as_str()),
            Some(_) => return Err(TokenError::Malformed),
        };
        let key = jwks.key_for(kid, alg).await?;
        let mut validation = Validation::new(alg);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.leeway = self.leeway;
        validation.set_audience(&[&self.resource]);
        validation.set_issuer(&self.issuers);
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(jwt_error)?;
        principal_from(&data.claims, None, &self.issuers)
    }

    #[cfg(test)]
    fn clock(&self) -> &Clock {
        &self.clock
    }
}

/// What an introspection answer must match.
struct Expect<'a> {
    resource: &'a str,
    issuers: &'a [String],
    leeway: u64,
}

/// Monotonic and wall-clock time; tests move it forward.
#[derive(Default)]
struct Clock {
    #[cfg(test)]
    offset: std::sync::atomic::AtomicU64,
}

impl Clock {
    fn offset(&self) -> Duration {
        #[cfg(test)]
        {
            Duration::from_secs(self.offset.load(std::sync::atomic::Ordering::SeqCst))
        }
        #[cfg(not(test))]
        {
            Duration::ZERO
        }
    }

    fn now(&self) -> Instant {
        Instant::now() + self.offset()
    }

    /// Seconds since the epoch.
    fn unix(&self) -> u64 {
        (SystemTime::now() + self.offset())
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    #[cfg(test)]
    fn advance(&self, seconds: u64) {
        self.offset
            .fetch_add(seconds, std::sync::atomic::Ordering::SeqCst);
    }
}

fn parse_algorithms(names: &[String]) -> Result<Vec<Algorithm>, TokenSetupError> {
    if names.is_empty() {
        return Err(TokenSetupError::Algorithm("lists none".into()));
    }
    names
        .iter()
        .map(|name| {
            let alg: Algorithm = name
                .parse()
                .map_err(|_| TokenSetupError::Algorithm(format!("`{name}` is not known")))?;
            if alg.family() == jsonwebtoken::AlgorithmFamily::Hmac {
                return Err(TokenSetupError::Algorithm(format!(
                    "`{name}` is symmetric: never accepted"
                )));
            }
            Ok(alg)
        })
        .collect()
}

/// The JOSE name of an algorithm (`ES256`, `EdDSA`).
fn alg_name(alg: Algorithm) -> String {
    format!("{alg:?}")
}

/// The length of a base64url number without its leading zero bytes.
fn b64url_len(s: &str) -> Option<usize> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()?;
    Some(bytes.iter().skip_while(|&&b| b == 0).count())
}

/// The token's JOSE header when it has a JWT's shape: three base64url parts, the first a
/// JSON object.
fn jwt_header(token: &str) -> Option<Map<String, Value>> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

fn jwt_error(e: jsonwebtoken::errors::Error) -> TokenError {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::InvalidSignature => TokenError::Signature,
        K::ExpiredSignature => TokenError::Expired,
        K::ImmatureSignature => TokenError::NotYetValid,
        K::InvalidAudience => TokenError::Audience,
        K::InvalidIssuer => TokenError::Issuer,
        K::InvalidAlgorithm | K::MissingAlgorithm | K::UnsupportedAlgorithm => {
            TokenError::Algorithm
        }
        K::MissingRequiredClaim(c) => TokenError::MissingClaim(match c.as_str() {
            "exp" => "exp",
            "iss" => "iss",
            "aud" => "aud",
            "sub" => "sub",
            _ => "required",
        }),
        K::InvalidClaimFormat(c) => TokenError::InvalidClaim(
            match c.as_str() {
                "exp" | "nbf" | "iss" | "aud" | "sub" => c.as_str(),
                _ => "",
            }
            .to_string(),
        ),
        // Key errors (a JWK whose numbers are not a key) are the key's, not the token's.
        K::InvalidEcdsaKey | K::InvalidEddsaKey | K::InvalidRsaKey(_) | K::InvalidKeyFormat => {
            TokenError::UnknownKey
        }
        _ => TokenError::Malformed,
    }
}

/// The principal of checked claims (a JWT's, or an introspection answer's).
/// `issuer` is the issuer to use when the claims carry none (introspection).
fn principal_from(
    claims: &Map<String, Value>,
    default_issuer: Option<&str>,
    issuers: &[String],
) -> Result<Principal, TokenError> {
    let sub = match claims.get("sub") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(TokenError::InvalidClaim("sub".into())),
        Some(_) => return Err(TokenError::InvalidClaim("sub".into())),
        None => return Err(TokenError::MissingClaim("sub")),
    };
    let iss = match (claims.get("iss"), default_issuer) {
        (Some(Value::String(s)), _) if issuers.contains(s) => s.clone(),
        (Some(Value::String(_)), _) => return Err(TokenError::Issuer),
        (Some(_), _) => return Err(TokenError::InvalidClaim("iss".into())),
        (None, Some(default)) => default.to_string(),
        (None, None) => return Err(TokenError::MissingClaim("iss")),
    };
    let client_id = ["client_id", "azp"]
        .iter()
        .find_map(|c| claims.get(*c).and_then(Value::as_str))
        .map(str::to_string);
    let mut scopes = BTreeSet::new();
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => {
            scopes.extend(s.split_ascii_whitespace().map(str::to_string));
        }
        (None, Some(Value::Array(list))) => {
            for s in list {
                let s = s
                    .as_str()
                    .ok_or_else(|| TokenError::InvalidClaim("scp".into()))?;
                scopes.insert(s.to_string());
            }
        }
        (None, None) => {}
        (Some(_), _) => return Err(TokenError::InvalidClaim("scope".into())),
        (None, Some(_)) => return Err(TokenError::InvalidClaim("scp".into())),
    }
    Ok(Principal {
        key: PrincipalKey::new(iss, sub),
        client_id,
        scopes,
    })
}

/// How an issuer URL may be written in `iss`: as it prints, and without the trailing
/// `/` when it is a bare origin.
fn issuer_spellings(server: &Url) -> Vec<String> {
    let printed = server.as_str().to_string();
    if server.path() == "/" && server.query().is_none() && printed.ends_with('/') {
        let bare = printed.trim_end_matches('/').to_string();
        vec![printed, bare]
    } else {
        vec![printed]
    }
}

/// The metadata documents to try, in order (RFC 8414 §3.1, then OpenID Connect
/// Discovery 1.0 with the path inserted, then appended).
fn metadata_urls(server: &Url) -> Vec<Url> {
    let path = server.path().trim_end_matches('/').to_string();
    let at = |p: String| {
        let mut url = server.clone();
        url.set_path(&p);
        url.set_query(None);
        url.set_fragment(None);
        url
    };
    if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server".into()),
            at("/.well-known/openid-configuration".into()),
        ]
    } else {
        vec![
            at(format!("/.well-known/oauth-authorization-server{path}")),
            at(format!("/.well-known/openid-configuration{path}")),
            at(format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

struct Metadata {
    issuer: String,
    jwks_uri: Option<Url>,
}

async fn discover(
    client: &reqwest::Client,
    server: &Url,
    spellings: &[String],
) -> Result<Metadata, TokenSetupError> {
    check_fetch_url("authorization server", server)?;
    let fail = |message: String| TokenSetupError::Metadata {
        issuer: server.to_string(),
        message,
    };
    let mut tried = Vec::new();
    for url in metadata_urls(server) {
        let body = match fetch(client.get(url.clone()), MAX_DOCUMENT_BYTES).await {
            Ok(body) => body,
            Err(FetchError::Status(status)) => {
                tried.push(format!("{url}: HTTP {status}"));
                continue;
            }
            Err(e) => {
                tried.push(format!("{url}: {e}"));
                continue;
            }
        };
        let doc: Map<String, Value> = serde_json::from_slice(&body)
            .map_err(|e| fail(format!("{url}: not a JSON object: {e}")))?;
        // RFC 8414 §3.3: the document must name the issuer it was fetched for.
        let issuer = match doc.get("issuer") {
            Some(Value::String(issuer)) if spellings.contains(issuer) => issuer.clone(),
            Some(Value::String(issuer)) => {
                return Err(fail(format!(
                    "{url} names the issuer `{issuer}`, not `{}`",
                    spellings[0]
                )))
            }
            _ => return Err(fail(format!("{url} has no `issuer`"))),
        };
        let jwks_uri = match doc.get("jwks_uri") {
            None => None,
            Some(Value::String(uri)) => {
                Some(Url::parse(uri).map_err(|e| fail(format!("{url}: `jwks_uri` `{uri}`: {e}")))?)
            }
            Some(_) => return Err(fail(format!("{url}: `jwks_uri` is not a string"))),
        };
        return Ok(Metadata { issuer, jwks_uri });
    }
    Err(fail(format!("no metadata found ({})", tried.join("; "))))
}

/// Only https, or http to a loopback host.
fn check_fetch_url(what: &'static str, url: &Url) -> Result<(), TokenSetupError> {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(TokenSetupError::InsecureUrl {
            what,
            url: url.to_string(),
        }),
    }
}

/// The client of every fetch: rustls with ring, the web PKI roots and `ca_file`.
fn http_client(ca_file: Option<&Path>) -> Result<reqwest::Client, TokenSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let ca_error = |message: String| TokenSetupError::CaFile {
            path: path.display().to_string(),
            message,
        };
        let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
        let mut added = 0;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| ca_error(e.to_string()))?;
            roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(ca_error("no certificate in it".into()));
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| TokenSetupError::Client(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(FETCH_TIMEOUT)
        .connect_timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("vivarium-mcp/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| TokenSetupError::Client(e.to_string()))
}

/// A fetch that failed: never carries a token (reqwest's errors name the URL only).
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("{0}")]
    Http(String),
    #[error("HTTP status {0}")]
    Status(u16),
    #[error("the answer is larger than {0} bytes")]
    TooLarge(usize),
}

/// Send `request`; the body of a 200 answer, at most `limit` bytes.
async fn fetch(request: reqwest::RequestBuilder, limit: usize) -> Result<Vec<u8>, FetchError> {
    let http = |e: reqwest::Error| FetchError::Http(e.to_string());
    let mut response = request.send().await.map_err(http)?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(FetchError::Status(response.status().as_u16()));
    }
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(FetchError::TooLarge(limit));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(http)? {
        if body.len() + chunk.len() > limit {
            return Err(FetchError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
