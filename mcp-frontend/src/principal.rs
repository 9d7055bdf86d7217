//! Who a call is for. Over stdio that is the one local client; over HTTP it is the
//! access token's `(iss, sub)` (crate::http). Sessions, artifacts, tasks and limits are
//! bound to it: another principal gets "not found".

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

/// The identity a call runs as, with what its token allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// `(iss, sub)`: the only part that binds state.
    pub key: PrincipalKey,
    /// The OAuth client the token was issued to (`client_id` or `azp`), for the audit log.
    pub client_id: Option<String>,
    /// The token's scopes (empty over stdio, where scopes do not apply).
    pub scopes: BTreeSet<String>,
}

/// A principal's identity: the issuer and the subject, compared exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PrincipalKey(Arc<(String, String)>);

impl PrincipalKey {
    pub fn new(issuer: impl Into<String>, subject: impl Into<String>) -> PrincipalKey {
        PrincipalKey(Arc::new((issuer.into(), subject.into())))
    }

    pub fn issuer(&self) -> &str {
        &self.0 .0
    }

    pub fn subject(&self) -> &str {
        &self.0 .1
    }
}

impl fmt::Display for PrincipalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.issuer(), self.subject())
    }
}

/// The issuer of the stdio principal: no token, the process's own client.
pub const LOCAL_ISSUER: &str = "local:stdio";

impl Principal {
    /// The one client of a stdio server.
    pub fn local() -> Principal {
        Principal {
            key: PrincipalKey::new(LOCAL_ISSUER, "stdio"),
            client_id: None,
            scopes: BTreeSet::new(),
        }
    }

    /// The principal of an HTTP server started with `insecure_no_auth` (loopback or a
    /// Unix socket only): every caller is the same one.
    pub fn unauthenticated() -> Principal {
        Principal {
            key: PrincipalKey::new("local:no-auth", "anonymous"),
            client_id: None,
            scopes: BTreeSet::new(),
        }
    }

    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.contains(scope)
    }
}
