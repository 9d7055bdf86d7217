//! The validator against a fake authorization server (metadata, JWKS, introspection)
//! served by axum on 127.0.0.1 inside each test.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::{json, Value};
use url::Url;

use super::*;
use crate::http::config::IntrospectionConfig;

const RESOURCE: &str = "http://127.0.0.1:9/mcp";
const CLIENT_SECRET: &str = "s3cr&t";

/// The fake authorization server's shared state.
#[derive(Default)]
struct AsState {
    issuer: Mutex<String>,
    jwks: Mutex<Value>,
    jwks_hits: AtomicUsize,
    /// Answer 500 to JWKS fetches.
    jwks_fail: AtomicBool,
    /// When set, JWKS fetches wait until it is opened.
    jwks_gate: Mutex<Option<tokio::sync::watch::Receiver<bool>>>,
    introspect_hits: AtomicUsize,
    /// Introspection answers by token; others are `{"active": false}`.
    answers: Mutex<HashMap<String, Value>>,
}

struct FakeAs {
    base: String,
    state: Arc<AsState>,
}

impl FakeAs {
    async fn start() -> FakeAs {
        let state = Arc::new(AsState::default());
        let app = Router::new()
            .route(
                "/.well-known/oauth-authorization-server/tenant",
                get(metadata),
            )
            .route("/jwks", get(jwks))
            .route("/introspect", post(introspect))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let base = format!("http://{addr}");
        *state.issuer.lock().unwrap() = format!("{base}/tenant");
        FakeAs { base, state }
    }

    fn issuer(&self) -> String {
        format!("{}/tenant", self.base)
    }

    fn set_keys(&self, keys: &[Value]) {
        *self.state.jwks.lock().unwrap() = json!({ "keys": keys });
    }

    fn jwks_hits(&self) -> usize {
        self.state.jwks_hits.load(Ordering::SeqCst)
    }

    fn introspect_hits(&self) -> usize {
        self.state.introspect_hits.load(Ordering::SeqCst)
    }

    fn answer(&self, token: &str, answer: Value) {
        self.state
            .answers
            .lock()
            .unwrap()
            .insert(token.to_string(), answer);
    }

    /// `[auth]` for this server: the keys found through its metadata.
    fn auth(&self) -> AuthConfig {
        AuthConfig {
            authorization_servers: vec![Url::parse(&self.issuer()).unwrap()],
            issuer: None,
            jwks_uri: None,
            algorithms: vec!["ES256".into(), "RS256".into()],
            typ: "at+jwt".into(),
            leeway_seconds: 5,
            jwks_cache_seconds: 300,
            jwks_min_refresh_seconds: 3600,
            ca_file: None,
            introspection: None,
        }
    }

    fn introspection(&self, dir: &tempfile::TempDir) -> IntrospectionConfig {
        let secret = dir.path().join("secret");
        std::fs::write(&secret, format!("  {CLIENT_SECRET}\n")).unwrap();
        IntrospectionConfig {
            endpoint: Url::parse(&format!("{}/introspect", self.base)).unwrap(),
            client_id: "vivarium".into(),
            client_secret_file: secret,
            cache_seconds: 60,
        }
    }
}

async fn metadata(State(state): State<Arc<AsState>>) -> Json<Value> {
    let issuer = state.issuer.lock().unwrap().clone();
    let base = issuer.trim_end_matches("/tenant");
    Json(json!({ "issuer": issuer, "jwks_uri": format!("{base}/jwks") }))
}

async fn jwks(State(state): State<Arc<AsState>>) -> Response {
    state.jwks_hits.fetch_add(1, Ordering::SeqCst);
    let gate = state.jwks_gate.lock().unwrap().clone();
    if let Some(mut gate) = gate {
        let _ = gate.wait_for(|open| *open).await;
    }
    if state.jwks_fail.load(Ordering::SeqCst) {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    Json(state.jwks.lock().unwrap().clone()).into_response()
}

async fn introspect(
    State(state): State<Arc<AsState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    state.introspect_hits.fetch_add(1, Ordering::SeqCst);
    // RFC 6749 §2.3.1: the secret form-urlencoded, then Basic.
    let expected = format!("Basic {}", STANDARD.encode("vivarium:s3cr%26t"));
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let form: HashMap<String, String> = url::form_urlencoded::parse(&body).into_owned().collect();
    if form.get("token_type_hint").map(String::as_str) != Some("access_token") {
        return StatusCode::BAD_REQUEST.into_response();
    }
    let token = form.get("token").cloned().unwrap_or_default();
    let answer = state.answers.lock().unwrap().get(&token).cloned();
    Json(answer.unwrap_or(json!({ "active": false }))).into_response()
}

/// A signing key and its public JWK.
struct Key {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
    public_pem: String,
}

fn ec_key(kid: &str) -> Key {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = pair.public_key_raw();
    assert_eq!(raw.len(), 65);
    assert_eq!(raw[0], 4);
    Key {
        kid: kid.into(),
        encoding: EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&raw[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&raw[33..65]),
        }),
        public_pem: pair.public_key_pem(),
    }
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn claims(fake: &FakeAs) -> Value {
    json!({
        "iss": fake.issuer(),
        "sub": "alice",
        "aud": RESOURCE,
        "exp": now() + 600,
        "iat": now(),
        "client_id": "cli-1",
        "scope": "vivarium:run vivarium:sessions",
    })
}

fn header(alg: Algorithm, kid: &str, typ: &str) -> Header {
    let mut header = Header::new(alg);
    header.kid = Some(kid.into());
    header.typ = Some(typ.into());
    header
}

fn sign(key: &Key, claims: &Value) -> String {
    jsonwebtoken::encode(
        &header(Algorithm::ES256, &key.kid, "at+jwt"),
        claims,
        &key.encoding,
    )
    .unwrap()
}

fn resource() -> Url {
    Url::parse(RESOURCE).unwrap()
}

/// A fake server with one EC key `k1`, and a validator for it.
async fn setup() -> (FakeAs, Key, TokenValidator) {
    setup_with(|_| {}).await
}

async fn setup_with(edit: impl FnOnce(&mut AuthConfig)) -> (FakeAs, Key, TokenValidator) {
    let fake = FakeAs::start().await;
    let key = ec_key("k1");
    fake.set_keys(std::slice::from_ref(&key.jwk));
    let mut auth = fake.auth();
    edit(&mut auth);
    let validator = TokenValidator::new(&auth, &resource()).await.unwrap();
    (fake, key, validator)
}

async fn refused(validator: &TokenValidator, token: &str) -> TokenError {
    let e = validator.validate(token).await.unwrap_err();
    assert!(!e.is_unavailable(), "{e}");
    if token.len() >= 8 {
        assert!(
            !e.description().contains(token),
            "the token is in the description"
        );
        assert!(
            !e.to_string().contains(token),
            "the token is in the message"
        );
    }
    e
}

#[test]
fn the_validator_is_shareable() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<TokenValidator>();
    shareable::<TokenError>();
}

#[tokio::test]
async fn a_valid_token_gives_its_principal_and_scopes() {
    let (fake, key, validator) = setup().await;
    let principal = validator
        .validate(&sign(&key, &claims(&fake)))
        .await
        .unwrap();
    assert_eq!(principal.key.issuer(), fake.issuer());
    assert_eq!(principal.key.subject(), "alice");
    assert_eq!(principal.client_id.as_deref(), Some("cli-1"));
    assert!(principal.has_scope("vivarium:run") && principal.has_scope("vivarium:sessions"));
    assert_eq!(principal.scopes.len(), 2);
    // `scp` as an array, `azp` for the client.
    let mut c = claims(&fake);
    let c_map = c.as_object_mut().unwrap();
    c_map.remove("scope");
    c_map.remove("client_id");
    c_map.insert("scp".into(), json!(["a", "b"]));
    c_map.insert("azp".into(), json!("cli-2"));
    let principal = validator.validate(&sign(&key, &c)).await.unwrap();
    assert_eq!(principal.client_id.as_deref(), Some("cli-2"));
    assert_eq!(principal.scopes.iter().collect::<Vec<_>>(), ["a", "b"]);
    // Found through the metadata (RFC 8414 §3.1 path insertion), fetched once.
    assert_eq!(fake.jwks_hits(), 1);
}

#[tokio::test]
async fn the_audience_is_required_and_must_be_this_resource() {
    let (fake, key, validator) = setup().await;
    let mut c = claims(&fake);
    c.as_object_mut().unwrap().remove("aud");
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::MissingClaim("aud")), "{e:?}");

    c["aud"] = json!("http://127.0.0.1:9/other");
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::Audience), "{e:?}");
    // Exact: a prefix or a trailing slash is another resource.
    c["aud"] = json!("http://127.0.0.1:9/mcp/");
    assert!(matches!(
        refused(&validator, &sign(&key, &c)).await,
        TokenError::Audience
    ));
    c["aud"] = json!([]);
    assert!(matches!(
        refused(&validator, &sign(&key, &c)).await,
        TokenError::Audience
    ));

    c["aud"] = json!(["https://elsewhere.example", RESOURCE]);
    validator.validate(&sign(&key, &c)).await.unwrap();
}

#[tokio::test]
async fn the_issuer_must_match() {
    let (fake, key, validator) = setup().await;
    let mut c = claims(&fake);
    c["iss"] = json!("https://evil.example/tenant");
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::Issuer), "{e:?}");
    c.as_object_mut().unwrap().remove("iss");
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::MissingClaim("iss")), "{e:?}");
}

#[tokio::test]
async fn expired_and_not_yet_valid_tokens_are_refused() {
    let (fake, key, validator) = setup().await;
    let mut c = claims(&fake);
    c["exp"] = json!(now() - 100);
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::Expired), "{e:?}");
    c.as_object_mut().unwrap().remove("exp");
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::MissingClaim("exp")), "{e:?}");

    let mut c = claims(&fake);
    c["nbf"] = json!(now() + 300);
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::NotYetValid), "{e:?}");
    // Within the leeway (5 s) it is accepted.
    c["nbf"] = json!(now() + 1);
    validator.validate(&sign(&key, &c)).await.unwrap();
}

#[tokio::test]
async fn a_token_without_sub_is_refused() {
    let (fake, key, validator) = setup().await;
    let mut c = claims(&fake);
    c.as_object_mut().unwrap().remove("sub");
    let e = refused(&validator, &sign(&key, &c)).await;
    assert!(matches!(e, TokenError::MissingClaim("sub")), "{e:?}");
    c["sub"] = json!("");
    refused(&validator, &sign(&key, &c)).await;
}

#[tokio::test]
async fn alg_none_is_refused() {
    let (fake, _key, validator) = setup().await;
    for header in [
        json!({"alg": "none", "typ": "at+jwt", "kid": "k1"}),
        json!({"alg": "none"}),
        json!({"alg": "None", "typ": "at+jwt"}),
    ] {
        let token = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims(&fake).to_string())
        );
        let e = refused(&validator, &token).await;
        assert!(matches!(e, TokenError::Algorithm), "{e:?}");
    }
}

#[tokio::test]
async fn hs256_signed_with_the_public_key_is_refused() {
    let (fake, key, validator) = setup().await;
    for secret in [key.public_pem.as_bytes(), key.jwk.to_string().as_bytes()] {
        let token = jsonwebtoken::encode(
            &header(Algorithm::HS256, "k1", "at+jwt"),
            &claims(&fake),
            &EncodingKey::from_secret(secret).unwrap(),
        )
        .unwrap();
        let e = refused(&validator, &token).await;
        assert!(matches!(e, TokenError::Algorithm), "{e:?}");
    }
    // Nor may the configuration name a symmetric algorithm.
    let mut auth = fake.auth();
    auth.algorithms = vec!["ES256".into(), "HS256".into()];
    let e = TokenValidator::new(&auth, &resource()).await.err().unwrap();
    assert!(matches!(e, TokenSetupError::Algorithm(_)), "{e}");
}

#[tokio::test]
async fn an_algorithm_outside_the_list_is_refused() {
    let (fake, key, validator) = setup_with(|a| a.algorithms = vec!["RS256".into()]).await;
    let e = refused(&validator, &sign(&key, &claims(&fake))).await;
    assert!(matches!(e, TokenError::Algorithm), "{e:?}");
}

#[tokio::test]
async fn typ_must_be_at_jwt_unless_any() {
    let (fake, key, validator) = setup().await;
    let with_typ = |typ: &str| {
        jsonwebtoken::encode(
            &header(Algorithm::ES256, "k1", typ),
            &claims(&fake),
            &key.encoding,
        )
        .unwrap()
    };
    let e = refused(&validator, &with_typ("JWT")).await;
    assert!(matches!(e, TokenError::Type), "{e:?}");
    let mut no_typ = header(Algorithm::ES256, "k1", "");
    no_typ.typ = None;
    let token = jsonwebtoken::encode(&no_typ, &claims(&fake), &key.encoding).unwrap();
    assert!(matches!(
        refused(&validator, &token).await,
        TokenError::Type
    ));
    validator
        .validate(&with_typ("application/AT+JWT"))
        .await
        .unwrap();
    validator.validate(&with_typ("at+jwt")).await.unwrap();

    let mut auth = fake.auth();
    auth.typ = "any".into();
    let any = TokenValidator::new(&auth, &resource()).await.unwrap();
    any.validate(&with_typ("JWT")).await.unwrap();
    any.validate(&token).await.unwrap();
}

#[tokio::test]
async fn an_unknown_kid_refetches_once_per_min_refresh() {
    let (fake, key, validator) = setup().await;
    assert_eq!(fake.jwks_hits(), 1);
    let other = ec_key("k2");
    let token = sign(&other, &claims(&fake));
    let e = refused(&validator, &token).await;
    assert!(matches!(e, TokenError::UnknownKey), "{e:?}");
    assert_eq!(fake.jwks_hits(), 2, "one refetch");
    let e = refused(&validator, &token).await;
    assert!(matches!(e, TokenError::UnknownKey), "{e:?}");
    assert_eq!(
        fake.jwks_hits(),
        2,
        "no refetch within jwks_min_refresh_seconds"
    );
    // The known key still works, without a fetch.
    validator
        .validate(&sign(&key, &claims(&fake)))
        .await
        .unwrap();
    assert_eq!(fake.jwks_hits(), 2);
    // After min_refresh, the rotated-in key is found.
    fake.set_keys(&[key.jwk.clone(), other.jwk.clone()]);
    validator.clock().advance(3600);
    // (The cache, 300 s, has expired too: that fetch finds the key.)
    validator.validate(&token).await.unwrap();
    assert_eq!(fake.jwks_hits(), 3);
}

#[tokio::test]
async fn a_rotated_key_is_found_by_the_refetch() {
    let (fake, key, validator) = setup().await;
    let other = ec_key("k2");
    fake.set_keys(&[key.jwk.clone(), other.jwk.clone()]);
    validator
        .validate(&sign(&other, &claims(&fake)))
        .await
        .unwrap();
    assert_eq!(fake.jwks_hits(), 2);
}

#[tokio::test]
async fn concurrent_unknown_kids_share_one_fetch() {
    let (fake, _key, validator) = setup().await;
    let validator = Arc::new(validator);
    let (open, gate) = tokio::sync::watch::channel(false);
    *fake.state.jwks_gate.lock().unwrap() = Some(gate);
    let token = sign(&ec_key("k2"), &claims(&fake));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (validator, token) = (validator.clone(), token.clone());
            tokio::spawn(async move { validator.validate(&token).await })
        })
        .collect();
    // Whether or not every task is waiting by now, at most one fetch may happen.
    tokio::time::sleep(Duration::from_millis(100)).await;
    open.send(true).unwrap();
    for task in tasks {
        let e = task.await.unwrap().unwrap_err();
        assert!(matches!(e, TokenError::UnknownKey), "{e:?}");
    }
    assert_eq!(fake.jwks_hits(), 2);
}

#[tokio::test]
async fn concurrent_validations_on_an_expired_cache_share_one_fetch() {
    let (fake, key, validator) = setup().await;
    let validator = Arc::new(validator);
    let (open, gate) = tokio::sync::watch::channel(false);
    *fake.state.jwks_gate.lock().unwrap() = Some(gate);
    validator.clock().advance(301);
    let token = sign(&key, &claims(&fake));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (validator, token) = (validator.clone(), token.clone());
            tokio::spawn(async move { validator.validate(&token).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    open.send(true).unwrap();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(fake.jwks_hits(), 2);
}

#[tokio::test]
async fn an_expired_cache_that_cannot_be_refreshed_fails_closed() {
    let (fake, key, validator) = setup().await;
    let token = sign(&key, &claims(&fake));
    validator.validate(&token).await.unwrap();
    fake.state.jwks_fail.store(true, Ordering::SeqCst);
    // Within the cache: no fetch, still valid.
    validator.validate(&token).await.unwrap();
    assert_eq!(fake.jwks_hits(), 1);
    validator.clock().advance(301);
    let e = validator.validate(&token).await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(!e.description().contains(&token));
    // The server is back: so are the keys.
    fake.state.jwks_fail.store(false, Ordering::SeqCst);
    validator.validate(&token).await.unwrap();
}

#[tokio::test]
async fn startup_fails_without_keys() {
    let fake = FakeAs::start().await;
    fake.state.jwks_fail.store(true, Ordering::SeqCst);
    let e = TokenValidator::new(&fake.auth(), &resource())
        .await
        .err()
        .unwrap();
    assert!(matches!(e, TokenSetupError::Jwks { .. }), "{e}");
    // A metadata document naming another issuer is refused (RFC 8414 §3.3).
    fake.state.jwks_fail.store(false, Ordering::SeqCst);
    *fake.state.issuer.lock().unwrap() = "https://evil.example/tenant".into();
    let e = TokenValidator::new(&fake.auth(), &resource())
        .await
        .err()
        .unwrap();
    assert!(matches!(e, TokenSetupError::Metadata { .. }), "{e}");
    // Plain http off loopback is never fetched.
    let mut auth = fake.auth();
    auth.jwks_uri = Some(Url::parse("http://keys.example/jwks").unwrap());
    let e = TokenValidator::new(&auth, &resource()).await.err().unwrap();
    assert!(matches!(e, TokenSetupError::InsecureUrl { .. }), "{e}");
}

#[tokio::test]
async fn jwks_entries_unfit_for_the_alg_are_ignored() {
    let (fake, key, validator) = setup().await;
    let token = sign(&key, &claims(&fake));
    let variants = [
        ("use", json!("enc")),
        ("alg", json!("ES384")),
        ("alg", json!("RS256")),
        ("crv", json!("P-384")),
        ("key_ops", json!(["encrypt"])),
    ];
    for (field, value) in variants {
        let mut jwk = key.jwk.clone();
        jwk[field] = value;
        fake.set_keys(&[jwk]);
        validator.clock().advance(3601);
        let e = refused(&validator, &token).await;
        assert!(matches!(e, TokenError::UnknownKey), "{field}: {e:?}");
    }
    // Without `use` and `alg`, and with key_ops verify, the key is fit.
    let mut jwk = key.jwk.clone();
    let map = jwk.as_object_mut().unwrap();
    map.remove("use");
    map.remove("alg");
    map.insert("key_ops".into(), json!(["verify"]));
    fake.set_keys(&[jwk]);
    validator.clock().advance(3601);
    validator.validate(&token).await.unwrap();
}

#[tokio::test]
async fn a_token_without_kid_uses_the_only_fit_key() {
    let (fake, key, validator) = setup().await;
    let mut h = header(Algorithm::ES256, "", "at+jwt");
    h.kid = None;
    let token = jsonwebtoken::encode(&h, &claims(&fake), &key.encoding).unwrap();
    validator.validate(&token).await.unwrap();
    // Two fit keys: which one is ambiguous.
    fake.set_keys(&[key.jwk.clone(), ec_key("k2").jwk]);
    validator.clock().advance(3601);
    assert!(matches!(
        refused(&validator, &token).await,
        TokenError::UnknownKey
    ));
}

#[tokio::test]
async fn a_bad_signature_is_refused() {
    let (fake, key, validator) = setup().await;
    // k2's signature under k1's kid.
    let other = ec_key("k2");
    let forged = jsonwebtoken::encode(
        &header(Algorithm::ES256, "k1", "at+jwt"),
        &claims(&fake),
        &other.encoding,
    )
    .unwrap();
    let e = refused(&validator, &forged).await;
    assert!(matches!(e, TokenError::Signature), "{e:?}");
    // A changed payload under a valid signature.
    let token = sign(&key, &claims(&fake));
    let parts: Vec<&str> = token.split('.').collect();
    let mut c = claims(&fake);
    c["sub"] = json!("mallory");
    let tampered = format!(
        "{}.{}.{}",
        parts[0],
        URL_SAFE_NO_PAD.encode(c.to_string()),
        parts[2]
    );
    assert!(matches!(
        refused(&validator, &tampered).await,
        TokenError::Signature
    ));
}

#[tokio::test]
async fn oversized_and_malformed_tokens_are_refused() {
    let (_fake, _key, validator) = setup().await;
    let big = "a".repeat(MAX_TOKEN_BYTES + 1);
    assert!(matches!(
        refused(&validator, &big).await,
        TokenError::TooLarge
    ));
    for token in ["", "opaque-token", "a b", "a.b.c", "é"] {
        let e = refused(&validator, token).await;
        assert!(matches!(e, TokenError::Malformed), "{token}: {e:?}");
    }
}

#[tokio::test]
async fn rs256_with_an_rsa_key() {
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("rsa.pem");
    let status = std::process::Command::new("openssl")
        .args(["genrsa", "-out"])
        .arg(&pem)
        .arg("2048")
        .stderr(std::process::Stdio::null())
        .status();
    // openssl is on every machine this runs on (Debian's); no silent skip.
    let status = status.expect("openssl (to make an RSA key) must be installed");
    assert!(status.success());
    let encoding = EncodingKey::from_rsa_pem(&std::fs::read(&pem).unwrap()).unwrap();
    let mut jwk = serde_json::to_value(
        jsonwebtoken::jwk::Jwk::from_encoding_key(&encoding, Algorithm::RS256).unwrap(),
    )
    .unwrap();
    jwk["kid"] = json!("rsa");
    let (fake, key, validator) = setup().await;
    fake.set_keys(&[key.jwk.clone(), jwk]);
    validator.clock().advance(301);
    let token = jsonwebtoken::encode(
        &header(Algorithm::RS256, "rsa", "at+jwt"),
        &claims(&fake),
        &encoding,
    )
    .unwrap();
    validator.validate(&token).await.unwrap();
    // An RS256 token naming the EC key: the key type does not fit.
    let token = jsonwebtoken::encode(
        &header(Algorithm::RS256, "k1", "at+jwt"),
        &claims(&fake),
        &encoding,
    )
    .unwrap();
    assert!(matches!(
        refused(&validator, &token).await,
        TokenError::UnknownKey
    ));
}

async fn introspecting() -> (FakeAs, TokenValidator, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeAs::start().await;
    fake.set_keys(&[ec_key("k1").jwk]);
    let mut auth = fake.auth();
    auth.introspection = Some(fake.introspection(&dir));
    let validator = TokenValidator::new(&auth, &resource()).await.unwrap();
    (fake, validator, dir)
}

fn active(fake: &FakeAs) -> Value {
    json!({
        "active": true,
        "iss": fake.issuer(),
        "sub": "bob",
        "aud": [RESOURCE],
        "exp": now() + 600,
        "client_id": "cli-3",
        "scope": "vivarium:run",
    })
}

#[tokio::test]
async fn introspection_accepts_an_active_token_and_caches_it() {
    let (fake, validator, _dir) = introspecting().await;
    fake.answer("opaque-1", active(&fake));
    let principal = validator.validate("opaque-1").await.unwrap();
    assert_eq!(principal.key.issuer(), fake.issuer());
    assert_eq!(principal.key.subject(), "bob");
    assert_eq!(principal.client_id.as_deref(), Some("cli-3"));
    assert!(principal.has_scope("vivarium:run"));
    assert_eq!(fake.introspect_hits(), 1);
    assert_eq!(validator.validate("opaque-1").await.unwrap(), principal);
    assert_eq!(fake.introspect_hits(), 1, "the answer is cached");
    // Not past cache_seconds (60).
    validator.clock().advance(61);
    validator.validate("opaque-1").await.unwrap();
    assert_eq!(fake.introspect_hits(), 2);
    // Not past the token's exp.
    let mut short = active(&fake);
    // (The validator's clock is 61 s ahead now.)
    short["exp"] = json!(now() + 61 + 10);
    short.as_object_mut().unwrap().remove("iss");
    fake.answer("opaque-2", short);
    let p = validator.validate("opaque-2").await.unwrap();
    assert_eq!(
        p.key.issuer(),
        fake.issuer(),
        "no iss: the configured issuer"
    );
    validator.clock().advance(11);
    let _ = validator.validate("opaque-2").await;
    assert_eq!(fake.introspect_hits(), 4);
}

#[tokio::test]
async fn introspection_refuses_inactive_and_foreign_tokens() {
    let (fake, validator, _dir) = introspecting().await;
    let e = refused(&validator, "opaque-unknown").await;
    assert!(matches!(e, TokenError::Inactive), "{e:?}");
    let cases = [
        ("aud", json!("https://other.example/mcp"), "audience"),
        ("aud", Value::Null, "no aud"),
        ("iss", json!("https://evil.example"), "issuer"),
        ("exp", json!(now() - 100), "expired"),
        ("exp", Value::Null, "no exp"),
        ("sub", Value::Null, "no sub"),
        ("active", json!("true"), "active as a string"),
    ];
    for (i, (field, value, what)) in cases.into_iter().enumerate() {
        let mut answer = active(&fake);
        if value.is_null() {
            answer.as_object_mut().unwrap().remove(field);
        } else {
            answer[field] = value;
        }
        let token = format!("opaque-{i}");
        fake.answer(&token, answer);
        let e = refused(&validator, &token).await;
        let expected = match what {
            "audience" => matches!(e, TokenError::Audience),
            "no aud" => matches!(e, TokenError::MissingClaim("aud")),
            "issuer" => matches!(e, TokenError::Issuer),
            "expired" => matches!(e, TokenError::Expired),
            "no exp" => matches!(e, TokenError::MissingClaim("exp")),
            "no sub" => matches!(e, TokenError::MissingClaim("sub")),
            _ => matches!(e, TokenError::Inactive),
        };
        assert!(expected, "{what}: {e:?}");
    }
    // Refusals are not cached.
    let hits = fake.introspect_hits();
    let _ = validator.validate("opaque-unknown").await;
    assert_eq!(fake.introspect_hits(), hits + 1);
}

#[tokio::test]
async fn an_unreachable_introspection_endpoint_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeAs::start().await;
    fake.set_keys(&[ec_key("k1").jwk]);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut introspection = fake.introspection(&dir);
    introspection.endpoint = Url::parse(&format!("http://127.0.0.1:{port}/introspect")).unwrap();
    let mut auth = fake.auth();
    auth.introspection = Some(introspection);
    let validator = TokenValidator::new(&auth, &resource()).await.unwrap();
    let e = validator.validate("opaque-1").await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(!e.to_string().contains("opaque-1"));
    // Wrong client credentials (our configuration) are ours too: 503, not 401.
    let mut introspection = fake.introspection(&dir);
    std::fs::write(&introspection.client_secret_file, "wrong").unwrap();
    introspection.cache_seconds = 0;
    let mut auth = fake.auth();
    auth.introspection = Some(introspection);
    let validator = TokenValidator::new(&auth, &resource()).await.unwrap();
    fake.answer("opaque-1", active(&fake));
    assert!(validator
        .validate("opaque-1")
        .await
        .unwrap_err()
        .is_unavailable());
}

#[tokio::test]
async fn introspection_cache_is_bounded() {
    let (fake, validator, _dir) = introspecting().await;
    let introspector = validator.introspection.as_ref().unwrap();
    let principal = Principal::unauthenticated();
    let until = validator.clock().now() + Duration::from_secs(60);
    for i in 0..introspect::MAX_CACHED + 10 {
        let mut digest = [0u8; 32];
        digest[..8].copy_from_slice(&(i as u64).to_le_bytes());
        introspector.remember(digest, principal.clone(), until);
    }
    assert_eq!(introspector.cached(), introspect::MAX_CACHED);
    fake.answer("opaque-1", active(&fake));
    validator.validate("opaque-1").await.unwrap();
    assert_eq!(introspector.cached(), introspect::MAX_CACHED);
}

#[tokio::test]
async fn a_bare_origin_issuer_matches_either_spelling() {
    // `https://as.example` prints as `https://as.example/`: accept what the metadata says.
    let fake = FakeAs::start().await;
    let key = ec_key("k1");
    fake.set_keys(std::slice::from_ref(&key.jwk));
    let mut auth = fake.auth();
    auth.authorization_servers = vec![Url::parse(&fake.base).unwrap()];
    auth.jwks_uri = Some(Url::parse(&format!("{}/jwks", fake.base)).unwrap());
    let validator = TokenValidator::new(&auth, &resource()).await.unwrap();
    for iss in [fake.base.clone(), format!("{}/", fake.base)] {
        let mut c = claims(&fake);
        c["iss"] = json!(iss);
        let p = validator.validate(&sign(&key, &c)).await.unwrap();
        assert_eq!(p.key.issuer(), iss);
    }
    assert_eq!(
        metadata_urls(&Url::parse("https://as.example/t/1/").unwrap())
            .iter()
            .map(Url::as_str)
            .collect::<Vec<_>>(),
        [
            "https://as.example/.well-known/oauth-authorization-server/t/1",
            "https://as.example/.well-known/openid-configuration/t/1",
            "https://as.example/t/1/.well-known/openid-configuration",
        ]
    );
}

/// Serve `body` at every path over TLS with a certificate for `localhost` from a fresh CA;
/// returns the port and the CA's PEM.
async fn tls_server(body: String) -> (u16, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let ca_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let leaf_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |_req| {
                    let body = body.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, ca.pem())
}

#[tokio::test]
async fn the_ca_file_is_trusted_for_fetches() {
    let key = ec_key("k1");
    let (port, ca_pem) = tls_server(json!({ "keys": [key.jwk] }).to_string()).await;
    let fake = FakeAs::start().await;
    let mut auth = fake.auth();
    auth.jwks_uri = Some(Url::parse(&format!("https://localhost:{port}/jwks")).unwrap());
    // A private CA: unknown to the web PKI roots.
    let e = TokenValidator::new(&auth, &resource()).await.err().unwrap();
    assert!(matches!(e, TokenSetupError::Jwks { .. }), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    auth.ca_file = Some(ca_file);
    let validator = TokenValidator::new(&auth, &resource()).await.unwrap();
    validator
        .validate(&sign(&key, &claims(&fake)))
        .await
        .unwrap();
    // A file without a certificate is an error, not an empty trust.
    std::fs::write(auth.ca_file.as_ref().unwrap(), "not a certificate\n").unwrap();
    let e = TokenValidator::new(&auth, &resource()).await.err().unwrap();
    assert!(matches!(e, TokenSetupError::CaFile { .. }), "{e}");
}
