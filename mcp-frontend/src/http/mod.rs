//! `vivarium-mcp --http`: MCP over Streamable HTTP as an OAuth 2.1 resource server.
//!
//! - [`config`]: the configuration file, checked before anything listens.
//! - [`tls`]: the TLS server configuration from `[tls]`'s PEM files, reloaded on SIGHUP.
//! - [`listen`]: the listener (TCP, TLS or a Unix socket) and the per-connection HTTP/1
//!   and HTTP/2 serving, with header limits, connection bounds and graceful shutdown.
pub mod config;
pub mod listen;
pub mod tls;
