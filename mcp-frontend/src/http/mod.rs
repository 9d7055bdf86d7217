//! `vivarium-mcp --http`: MCP over Streamable HTTP as an OAuth 2.1 resource server.
//!
//! - [`config`]: the configuration file, checked before anything listens.
//! - [`router`]: Host/Origin checks, the RFC 9728 metadata, bearer tokens and scopes in
//!   front of rmcp's service.
//! - [`token`]: the access-token validator (JWT with the issuer's JWKS, or introspection).
//! - [`tls`]: the TLS server configuration from `[tls]`'s PEM files, reloaded on SIGHUP.
//! - [`listen`]: the listener (TCP, TLS or a Unix socket) and the per-connection HTTP/1
//!   and HTTP/2 serving, with header limits, connection bounds and graceful shutdown.
//! - [`serve`]: all of it put together, until SIGTERM.
pub mod config;
pub mod listen;
pub mod router;
pub mod serve;
pub mod tls;
pub mod token;

use std::net::IpAddr;

/// What the HTTP layer learnt of a request, for the handlers (in its extensions, beside
/// the [`crate::principal::Principal`]).
#[derive(Debug, Clone, Default)]
pub struct RequestInfo {
    /// The client's address: the TCP peer, or the `X-Forwarded-For` of a trusted proxy.
    pub peer: Option<IpAddr>,
}
