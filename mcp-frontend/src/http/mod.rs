//! `vivarium-mcp --http`: MCP over Streamable HTTP as an OAuth 2.1 resource server.
//!
//! - [`config`]: the configuration file, checked before anything listens.
pub mod config;
