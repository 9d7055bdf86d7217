//! Per-principal state: each principal ([`crate::principal`]) has its own session registry
//! and, over HTTP, its own admission limits. A principal's session ids are looked up only
//! in its own registry, so another principal's id is "not known", exactly as a made-up one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http::config::PrincipalLimits;
use crate::limiter::Limiter;
use crate::principal::PrincipalKey;
use crate::session::Registry;

/// Tenants kept before idle ones are dropped.
const MAX_TENANTS: usize = 4096;

/// How long a tenant must have been idle (no call) to be dropped: past the limiter's
/// window, so dropping it forgets nothing its rate limit still counts.
const IDLE_DROP: Duration = Duration::from_secs(120);

/// One principal's state.
pub struct Tenant {
    pub key: PrincipalKey,
    /// Its sessions (alias -> daemon handle).
    pub sessions: Registry,
    /// Its own limits (HTTP); `None` over stdio, where the instance's limiter is the one.
    pub limiter: Option<Limiter>,
    last_call: Mutex<Instant>,
}

impl Tenant {
    fn touch(&self) {
        *self.last_call.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_call
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

/// Every principal's state, created on first use.
pub struct Tenants {
    limits: Option<PrincipalLimits>,
    map: Mutex<HashMap<PrincipalKey, Arc<Tenant>>>,
}

impl Tenants {
    /// `limits`: each principal's own (HTTP), or `None` (stdio: one principal).
    pub fn new(limits: Option<PrincipalLimits>) -> Tenants {
        Tenants {
            limits,
            map: Mutex::new(HashMap::new()),
        }
    }

    pub fn limits(&self) -> Option<PrincipalLimits> {
        self.limits
    }

    /// `key`'s state (made now if it has none); counts as a call for idleness.
    pub fn get(&self, key: &PrincipalKey) -> Arc<Tenant> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = map.get(key) {
            t.touch();
            return t.clone();
        }
        if map.len() >= MAX_TENANTS {
            // Drop the idle tenants that hold nothing: no open session, no call running
            // or queued (the Arc is ours alone), quiet past the rate window.
            map.retain(|_, t| {
                Arc::strong_count(t) > 1
                    || !t.sessions.known_open().is_empty()
                    || t.idle_for() < IDLE_DROP
            });
        }
        let sessions = match self.limits {
            Some(l) => Registry::with_max_open(l.sessions),
            None => Registry::new(),
        };
        let tenant = Arc::new(Tenant {
            key: key.clone(),
            sessions,
            limiter: self
                .limits
                .map(|l| Limiter::new(l.calls_per_minute, l.concurrent_jobs, l.queued_calls)),
            last_call: Mutex::new(Instant::now()),
        });
        map.insert(key.clone(), tenant.clone());
        tenant
    }

    /// Every tenant now (for closing their sessions at shutdown).
    pub fn all(&self) -> Vec<Arc<Tenant>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionArg;
    use vivarium_client::SessionHandle;

    #[test]
    fn a_session_id_is_known_only_to_its_principal() {
        let tenants = Tenants::new(Some(PrincipalLimits::default()));
        let alice = tenants.get(&PrincipalKey::new("https://as", "alice"));
        let mallory = tenants.get(&PrincipalKey::new("https://as", "mallory"));
        let id = alice
            .sessions
            .opened(SessionHandle("vs_0123".into()), "default".into());
        let arg = SessionArg::parse(&id).unwrap();
        assert!(alice.sessions.resolve(&arg).is_ok());
        assert!(matches!(
            mallory.sessions.resolve(&arg),
            Err(crate::session::Unusable::Unknown(_))
        ));
        assert!(mallory.sessions.known_open().is_empty());
        // The same principal gets the same state back.
        let again = tenants.get(&PrincipalKey::new("https://as", "alice"));
        assert!(again.sessions.resolve(&arg).is_ok());
    }

    #[test]
    fn each_principal_has_its_own_limits() {
        let limits = PrincipalLimits {
            concurrent_jobs: 1,
            queued_calls: 0,
            ..PrincipalLimits::default()
        };
        let tenants = Tenants::new(Some(limits));
        let a = tenants.get(&PrincipalKey::new("https://as", "a"));
        let b = tenants.get(&PrincipalKey::new("https://as", "b"));
        let _running = a.limiter.as_ref().unwrap().admit(1).unwrap();
        assert!(a.limiter.as_ref().unwrap().admit(1).is_err());
        assert!(b.limiter.as_ref().unwrap().admit(1).is_ok());
        assert_eq!(a.sessions.max_open(), PrincipalLimits::default().sessions);
    }
}
