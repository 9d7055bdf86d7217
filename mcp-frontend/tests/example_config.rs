//! `dist/mcp-http.toml`, the shipped example of the HTTP frontend's configuration, loads
//! and passes every check made at start, and so does its commented-out `[proxy]` variant.
//! (The TLS files need not exist: loading only records their paths; they are read when
//! the server starts.)

use std::path::PathBuf;

use vivarium_mcp::http::config::{HttpConfig, Listen, PrincipalLimits, ScopeConfig};

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/mcp-http.toml")
}

#[test]
fn the_example_config_loads_and_checks() {
    let path = example();
    let config =
        HttpConfig::load(Some(&path), None).unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    assert_eq!(config.listen, Listen::parse("0.0.0.0:8443").unwrap());
    assert_eq!(config.resource.as_str(), "https://mcp.example.com/mcp");
    assert_eq!(config.endpoint_path(), "/mcp");
    assert_eq!(
        config.allowed_hosts,
        ["mcp.example.com", "mcp.example.com:443"]
    );
    assert_eq!(config.allowed_origins, ["https://mcp.example.com"]);
    assert!(!config.insecure_no_auth);
    assert!(!config.allow_daemon_handles);
    assert!(config.tls.is_some() && config.proxy.is_none());
    assert_eq!(config.hsts_max_age(), Some(31_536_000));
    let auth = config.auth.as_ref().expect("[auth]");
    assert_eq!(
        auth.authorization_servers[0].as_str(),
        "https://auth.example.com/"
    );
    assert!(auth.introspection.is_none());
    // The values written out are the defaults.
    assert_eq!(config.scopes, ScopeConfig::default());
    assert_eq!(config.limits, PrincipalLimits::default());
    assert_eq!(
        config.max_body_bytes,
        vivarium_mcp::http::config::DEFAULT_MAX_BODY_BYTES
    );
    assert_eq!(
        config.max_header_bytes,
        vivarium_mcp::http::config::DEFAULT_MAX_HEADER_BYTES
    );
    assert_eq!(
        config.audit.file.as_deref(),
        Some(std::path::Path::new("/var/log/vivarium/mcp-audit.jsonl"))
    );
    assert!(!config.audit.code);
}

/// The commented-out variant at the end of the file, uncommented, with the example's
/// `[auth]`.
#[test]
fn the_proxy_variant_loads_and_checks() {
    let text = std::fs::read_to_string(example()).unwrap();
    let (_, variant) = text
        .split_once("# --- Variant")
        .expect("the example has a proxy variant");
    let mut toml: String = variant
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .filter(|l| !l.starts_with('#') && !l.starts_with(' ') && !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    toml.push_str("[auth]\nauthorization_servers = [\"https://auth.example.com\"]\n");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    std::fs::write(&path, &toml).unwrap();
    let config = HttpConfig::load(Some(&path), None).unwrap_or_else(|e| panic!("{toml}\n{e:?}"));
    assert_eq!(config.listen, Listen::parse("127.0.0.1:8080").unwrap());
    let proxy = config.proxy.as_ref().expect("[proxy]");
    assert!(proxy.trusts("127.0.0.1".parse().unwrap()));
    assert!(!proxy.trusts("192.0.2.1".parse().unwrap()));
    assert!(config.tls.is_none());
    assert_eq!(config.hsts_max_age(), Some(31_536_000));
}
