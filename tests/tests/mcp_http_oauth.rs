//! The whole OAuth flow against `vivarium-mcp --http` (#22): a real authorization server
//! (oidc-provider, mcp-frontend/tests/clients/oauth/as.mjs: authorization code with PKCE,
//! dynamic registration, RFC 8707 resource indicators, RFC 9068 JWT access tokens) and
//! the official MCP Python SDK's OAuth client (`oauth_client.py`), which starts from the
//! 401, reads the RFC 9728 metadata and the authorization server's, registers, logs in
//! headless, and completes an authorized `tools/call` of `run_python` on the real daemon.
//!
//! Needs root (the daemon), Node.js with the AS's modules (`npm ci` in
//! mcp-frontend/tests/clients/oauth; `VIVARIUM_REQUIRE_OAUTH_AS=1` makes their absence a
//! failure) and the MCP SDK venv (`VIVARIUM_REQUIRE_MCP_SDK=1`).
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use vivarium_e2e::http::{free_port, Frontend};
use vivarium_e2e::{bin_dir, require_root, workspace_dir, Daemon, DaemonOpts};

fn skip_or_fail(require: &str, why: &str) {
    if std::env::var(require).as_deref() == Ok("1") {
        panic!("{why}, and {require}=1 says it must run");
    }
    eprintln!("SKIP: {why} (set {require}=1 to make this a failure)");
}

fn sdk_python() -> Option<PathBuf> {
    let python = std::env::var_os("VIVARIUM_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            bin_dir()
                .parent()
                .expect("the bin dir has a parent")
                .join("mcp-venv/bin/python")
        });
    Command::new(&python)
        .args(["-c", "import mcp, mcp.client.auth"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then_some(python)
}

/// The authorization server, killed on drop.
struct AuthServer {
    child: Child,
    issuer: String,
}

impl AuthServer {
    fn start(dir: &std::path::Path) -> AuthServer {
        let script = dir.join("as.mjs");
        let mut child = Command::new("node")
            .arg(&script)
            .args(["--port", "0", "--no-stdin-watch"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node as.mjs");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(issuer) = line.strip_prefix("READY ") {
                    let _ = tx.send(issuer.trim().to_string());
                }
            }
        });
        let issuer = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the authorization server did not start");
        AuthServer { child, issuer }
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_python_sdk_oauth_client_discovers_logs_in_and_calls_a_tool() {
    if !require_root() {
        return;
    }
    let oauth_dir = workspace_dir().join("mcp-frontend/tests/clients/oauth");
    if !oauth_dir.join("node_modules/oidc-provider").is_dir() {
        return skip_or_fail(
            "VIVARIUM_REQUIRE_OAUTH_AS",
            "the test authorization server's modules are not installed (npm ci in mcp-frontend/tests/clients/oauth)",
        );
    }
    let Some(python) = sdk_python() else {
        return skip_or_fail(
            "VIVARIUM_REQUIRE_MCP_SDK",
            "no Python with the MCP SDK (set VIVARIUM_MCP_PYTHON)",
        );
    };
    let daemon = Daemon::start(DaemonOpts::default());
    let auth = AuthServer::start(&oauth_dir);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let config = format!(
        "resource = \"{resource}\"\n[auth]\nauthorization_servers = [\"{}\"]\nalgorithms = [\"RS256\", \"ES256\"]\n",
        auth.issuer
    );
    let frontend = Frontend::start(&daemon, addr, &config);
    let output = Command::new(&python)
        .arg(workspace_dir().join("mcp-frontend/tests/clients/oauth_client.py"))
        .args(["--url", &frontend.url, "--login", "carol"])
        .stdin(Stdio::null())
        .output()
        .expect("run oauth_client.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "no JSON from the driver\nstdout: {stdout}\nstderr: {}\nfrontend:\n{}",
                String::from_utf8_lossy(&output.stderr),
                frontend.log()
            )
        });
    assert!(
        output.status.success() && report["ok"] == true,
        "{report:#}\nfrontend:\n{}",
        frontend.log()
    );
    // Discovery went from the 401 through both metadata documents to a token.
    let steps = report["steps"].to_string();
    for step in [
        "/mcp -> 401".to_string(),
        "/.well-known/oauth-protected-resource/mcp -> 200".to_string(),
        format!(
            "{}/.well-known/oauth-authorization-server -> 200",
            auth.issuer
        ),
        "/token -> 200".to_string(),
    ] {
        assert!(steps.contains(&step), "no `{step}` in {steps}");
    }
    assert_eq!(report["token"]["claims"]["aud"], resource, "{report:#}");
    assert_eq!(report["token"]["header"]["typ"], "at+jwt", "{report:#}");
    let result = report["result"].to_string();
    assert!(result.contains("42"), "{result}");
    // The call is audited as the principal the authorization server named.
    let audited = frontend.audit();
    assert!(
        audited.iter().any(|r| r["event"] == "tools/call"
            && r["iss"] == auth.issuer
            && r["sub"] == "carol"
            && r["outcome"] == "ok"
            && r["job_id"].is_u64()),
        "{audited:?}"
    );
}
