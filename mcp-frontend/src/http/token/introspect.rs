//! RFC 7662 token introspection, for tokens that are not JWTs.
//!
//! A `POST` of `token=...&token_type_hint=access_token` to the endpoint, with HTTP Basic
//! client authentication (RFC 6749 §2.3.1: id and secret form-urlencoded first). The answer
//! must say `active: true`, and (stricter than RFC 7662, which makes them optional) carry
//! `aud` naming this resource (MCP requires audience validation), `exp` in the future
//! (with the leeway), and `sub`; `iss`, when present, must be the issuer (absent, the
//! configured issuer is the principal's); `nbf`, when present, must have passed.
//!
//! Positive answers are cached, keyed by the SHA-256 of the token (the token itself is
//! not kept), for `cache_seconds` but never past the token's `exp`; at most
//! [`MAX_CACHED`] entries (expired ones are dropped first, then the soonest to expire).
//! Negative answers are not cached: a refused token costs a request each time. An endpoint
//! that cannot be reached, or answers anything but 200 with a JSON object, makes the
//! validation unavailable (503).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use url::Url;

use super::{
    fetch, principal_from, Clock, Expect, TokenError, TokenSetupError, MAX_INTROSPECTION_BYTES,
};
use crate::http::config::IntrospectionConfig;
use crate::principal::Principal;

/// Most answers kept.
pub(super) const MAX_CACHED: usize = 10_000;

pub(super) struct Introspector {
    endpoint: Url,
    /// Form-urlencoded (RFC 6749 §2.3.1).
    client_id: String,
    secret: String,
    cache_for: Duration,
    client: reqwest::Client,
    clock: Arc<Clock>,
    cache: Mutex<HashMap<[u8; 32], (Principal, Instant)>>,
}

impl Introspector {
    /// Reads the client secret (trimmed) now.
    pub(super) fn new(
        client: reqwest::Client,
        config: &IntrospectionConfig,
        clock: Arc<Clock>,
    ) -> Result<Introspector, TokenSetupError> {
        let secret_error = |message: String| TokenSetupError::Secret {
            path: config.client_secret_file.display().to_string(),
            message,
        };
        let secret = std::fs::read_to_string(&config.client_secret_file)
            .map_err(|e| secret_error(e.to_string()))?;
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(secret_error("empty".into()));
        }
        let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect();
        Ok(Introspector {
            endpoint: config.endpoint.clone(),
            client_id: encode(&config.client_id),
            secret: encode(secret),
            cache_for: Duration::from_secs(config.cache_seconds),
            client,
            clock,
            cache: Mutex::new(HashMap::new()),
        })
    }

    pub(super) async fn validate(
        &self,
        token: &str,
        expect: &Expect<'_>,
    ) -> Result<Principal, TokenError> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = self.clock.now();
        {
            let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
            match cache.get(&digest) {
                Some((principal, until)) if *until > now => return Ok(principal.clone()),
                Some(_) => {
                    cache.remove(&digest);
                }
                None => {}
            }
        }
        let request = self
            .client
            .post(self.endpoint.clone())
            .basic_auth(&self.client_id, Some(&self.secret))
            .header(reqwest::header::ACCEPT, "application/json")
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("token", token)
                    .append_pair("token_type_hint", "access_token")
                    .finish(),
            );
        let body = fetch(request, MAX_INTROSPECTION_BYTES).await.map_err(|e| {
            tracing::warn!(endpoint = %self.endpoint, error = %e, "token introspection failed");
            TokenError::IntrospectionUnavailable(e.to_string())
        })?;
        let answer: Map<String, Value> = serde_json::from_slice(&body).map_err(|_| {
            TokenError::IntrospectionUnavailable("the answer is not a JSON object".into())
        })?;
        let (principal, exp) = check(&answer, expect, self.clock.unix())?;
        let ttl = self
            .cache_for
            .min(Duration::from_secs(exp.saturating_sub(self.clock.unix())));
        if !ttl.is_zero() {
            self.remember(digest, principal.clone(), now + ttl);
        }
        Ok(principal)
    }

    pub(super) fn remember(&self, digest: [u8; 32], principal: Principal, until: Instant) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED && !cache.contains_key(&digest) {
            let now = self.clock.now();
            cache.retain(|_, (_, until)| *until > now);
            while cache.len() >= MAX_CACHED {
                let Some(soonest) = cache
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(k, _)| *k)
                else {
                    break;
                };
                cache.remove(&soonest);
            }
        }
        cache.insert(digest, (principal, until));
    }

    #[cfg(test)]
    pub(super) fn cached(&self) -> usize {
        self.cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The principal of an introspection answer and its `exp`, if the answer accepts the token
/// for this resource. `now` is seconds since the epoch.
pub(super) fn check(
    answer: &Map<String, Value>,
    expect: &Expect<'_>,
    now: u64,
) -> Result<(Principal, u64), TokenError> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(TokenError::Inactive);
    }
    let for_us = match answer.get("aud") {
        Some(Value::String(aud)) => aud == expect.resource,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(expect.resource)),
        Some(_) => return Err(TokenError::InvalidClaim("aud".into())),
        None => return Err(TokenError::MissingClaim("aud")),
    };
    if !for_us {
        return Err(TokenError::Audience);
    }
    let exp = match answer.get("exp") {
        Some(exp) => seconds(exp).ok_or_else(|| TokenError::InvalidClaim("exp".into()))?,
        None => return Err(TokenError::MissingClaim("exp")),
    };
    if exp.saturating_add(expect.leeway) <= now {
        return Err(TokenError::Expired);
    }
    if let Some(nbf) = answer.get("nbf") {
        let nbf = seconds(nbf).ok_or_else(|| TokenError::InvalidClaim("nbf".into()))?;
        if nbf > now.saturating_add(expect.leeway) {
            return Err(TokenError::NotYetValid);
        }
    }
    let principal = principal_from(
        answer,
        expect.issuers.first().map(String::as_str),
        expect.issuers,
    )?;
    Ok((principal, exp))
}

/// A NumericDate: non-negative seconds, possibly fractional.
fn seconds(v: &Value) -> Option<u64> {
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
            .map(|f| f as u64)
    })
}
