//! `vivarium-mcp --http`: MCP over Streamable HTTP as an OAuth 2.1 resource server.
//!
//! - [`config`]: the configuration file, checked before anything listens.
//! - [`token`]: the access-token validator (JWT with the issuer's JWKS, or introspection).
pub mod config;
pub mod token;
