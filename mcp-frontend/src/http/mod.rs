//! `vivarium-mcp --http`: MCP over Streamable HTTP as an OAuth 2.1 resource server.
//!
//! - [`config`]: the configuration file, checked before anything listens.
//! - [`tls`]: the TLS server configuration from `[tls]`'s PEM files, reloaded on SIGHUP.
pub mod config;
pub mod tls;
