//! The issuer's signing keys (a JWKS), cached.
//!
//! Keys are used for `cache_for` after a successful fetch. An unknown `kid` refetches at
//! most once per `min_refresh`. A refresh is single-flight: validations that wait for one
//! share its outcome (success or failure) instead of fetching again. A failed refresh
//! when the cache has expired fails validations as unavailable (fail closed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{
    AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, KeyOperations, PublicKeyUse,
};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use serde_json::Value;
use url::Url;

use super::{fetch, Clock, TokenError, TokenSetupError, MAX_DOCUMENT_BYTES};

/// Most keys kept from one JWKS (the rest is an error: fail closed).
pub(super) const MAX_KEYS: usize = 64;
/// Smallest RSA modulus accepted, bytes (2048 bits).
const MIN_RSA_MODULUS_BYTES: usize = 256;

pub(super) struct Jwks {
    uri: Url,
    client: reqwest::Client,
    cache_for: Duration,
    min_refresh: Duration,
    clock: Arc<Clock>,
    state: RwLock<State>,
    /// Held while fetching: one fetch at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// Fetch attempts so far (for the logs).
    attempts: AtomicU64,
}

struct State {
    keys: Arc<Vec<Jwk>>,
    fetched_at: Instant,
    /// Bumped at every fetch attempt: a waiter that sees it move shares that outcome.
    generation: u64,
    /// Why the latest attempt failed (None when it succeeded).
    last_error: Option<String>,
    /// When an unknown `kid` last caused a fetch.
    last_kid_refresh: Option<Instant>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    Expired,
    UnknownKid,
}

impl Jwks {
    /// Fetch the keys once: an error if they cannot be fetched.
    pub(super) async fn new(
        client: reqwest::Client,
        uri: Url,
        cache_for: Duration,
        min_refresh: Duration,
        clock: Arc<Clock>,
    ) -> Result<Jwks, TokenSetupError> {
        let keys = fetch_keys(&client, &uri)
            .await
            .map_err(|message| TokenSetupError::Jwks {
                url: uri.to_string(),
                message,
            })?;
        tracing::info!(jwks_uri = %uri, keys = keys.len(), "fetched the authorization server's keys");
        let fetched_at = clock.now();
        Ok(Jwks {
            uri,
            client,
            cache_for,
            min_refresh,
            clock,
            state: RwLock::new(State {
                keys: Arc::new(keys),
                fetched_at,
                generation: 0,
                last_error: None,
                last_kid_refresh: None,
            }),
            refreshing: tokio::sync::Mutex::new(()),
            attempts: AtomicU64::new(1),
        })
    }

    /// The key to check a token signed with `alg` under `kid`.
    pub(super) async fn key_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<DecodingKey, TokenError> {
        let (mut keys, mut generation, fresh) = {
            let state = self.read();
            (
                state.keys.clone(),
                state.generation,
                self.clock.now().saturating_duration_since(state.fetched_at) < self.cache_for,
            )
        };
        if !fresh {
            keys = self.refresh(generation, Why::Expired).await?;
            generation = self.read().generation;
        }
        if let Some(jwk) = select(&keys, kid, alg) {
            return DecodingKey::from_jwk(jwk).map_err(|_| TokenError::UnknownKey);
        }
        let keys = self.refresh(generation, Why::UnknownKid).await?;
        let jwk = select(&keys, kid, alg).ok_or(TokenError::UnknownKey)?;
        DecodingKey::from_jwk(jwk).map_err(|_| TokenError::UnknownKey)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fetch the keys again, unless another validation did while this one waited (then
    /// its outcome is shared) or, for an unknown `kid`, one did within `min_refresh`.
    async fn refresh(&self, seen: u64, why: Why) -> Result<Arc<Vec<Jwk>>, TokenError> {
        let _one_at_a_time = self.refreshing.lock().await;
        {
            let state = self.read();
            if state.generation != seen {
                return match &state.last_error {
                    None => Ok(state.keys.clone()),
                    Some(e) => Err(TokenError::KeysUnavailable(e.clone())),
                };
            }
            if why == Why::UnknownKid {
                if let Some(at) = state.last_kid_refresh {
                    if self.clock.now().saturating_duration_since(at) < self.min_refresh {
                        return Ok(state.keys.clone());
                    }
                }
            }
        }
        let attempt = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let result = fetch_keys(&self.client, &self.uri).await;
        let now = self.clock.now();
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        state.generation += 1;
        if why == Why::UnknownKid {
            state.last_kid_refresh = Some(now);
        }
        match result {
            Ok(keys) => {
                tracing::debug!(jwks_uri = %self.uri, keys = keys.len(), attempt, "refreshed the keys");
                state.keys = Arc::new(keys);
                state.fetched_at = now;
                state.last_error = None;
                Ok(state.keys.clone())
            }
            Err(e) => {
                tracing::warn!(jwks_uri = %self.uri, error = %e, "cannot refresh the authorization server's keys");
                state.last_error = Some(e.clone());
                Err(TokenError::KeysUnavailable(e))
            }
        }
    }
}

/// Fetch and parse a JWKS; keys that do not parse are skipped.
async fn fetch_keys(client: &reqwest::Client, uri: &Url) -> Result<Vec<Jwk>, String> {
    let body = fetch(client.get(uri.clone()), MAX_DOCUMENT_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    parse_jwks(&body)
}

pub(super) fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let Some(Value::Array(keys)) = doc.get("keys") else {
        return Err("no `keys` array".into());
    };
    if keys.len() > MAX_KEYS {
        return Err(format!("{} keys, more than {MAX_KEYS}", keys.len()));
    }
    Ok(keys
        .iter()
        .filter_map(|k| serde_json::from_value::<Jwk>(k.clone()).ok())
        .collect())
}

/// The key for `kid` fit for `alg`; without a `kid`, the only fit key if there is one.
fn select<'k>(keys: &'k [Jwk], kid: Option<&str>, alg: Algorithm) -> Option<&'k Jwk> {
    match kid {
        Some(kid) => keys
            .iter()
            .find(|k| k.common.key_id.as_deref() == Some(kid) && fit(k, alg)),
        None => {
            let mut fit_keys = keys.iter().filter(|k| fit(k, alg));
            match (fit_keys.next(), fit_keys.next()) {
                (Some(key), None) => Some(key),
                _ => None,
            }
        }
    }
}

/// Whether `jwk` may check a signature made with `alg` (`DecodingKey::from_jwk` looks at
/// none of this).
pub(super) fn fit(jwk: &Jwk, alg: Algorithm) -> bool {
    let common = &jwk.common;
    if !matches!(common.public_key_use, None | Some(PublicKeyUse::Signature)) {
        return false;
    }
    if let Some(ops) = &common.key_operations {
        if !ops.iter().any(|op| matches!(op, KeyOperations::Verify)) {
            return false;
        }
    }
    if let Some(key_alg) = &common.key_algorithm {
        if *key_alg != KeyAlgorithm::from(alg) {
            return false;
        }
    }
    match (&jwk.algorithm, alg.family()) {
        (AlgorithmParameters::RSA(rsa), AlgorithmFamily::Rsa) => {
            // Leading zero bytes do not count.
            super::b64url_len(&rsa.n).is_some_and(|n| n >= MIN_RSA_MODULUS_BYTES)
        }
        (AlgorithmParameters::EllipticCurve(ec), AlgorithmFamily::Ec) => matches!(
            (&ec.curve, alg),
            (EllipticCurve::P256, Algorithm::ES256) | (EllipticCurve::P384, Algorithm::ES384)
        ),
        (AlgorithmParameters::OctetKeyPair(okp), AlgorithmFamily::Ed) => {
            okp.curve == EllipticCurve::Ed25519
        }
        _ => false,
    }
}
