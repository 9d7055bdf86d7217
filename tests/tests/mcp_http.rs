//! `vivarium-mcp --http` (#22) with the real daemon: a test issuer (its metadata and JWKS
//! on loopback, an EC P-256 key made here) signs valid and forged tokens, and plain
//! JSON-RPC over HTTP checks what the frontend lets through.
//!
//! - every bad token is refused with the right status and challenge, and none reaches
//!   the daemon: the job ids of a valid call before and after them are consecutive, and
//!   the audit log names each refusal;
//! - Host and Origin mismatches are refused;
//! - one principal cannot use another's session or artifact, and limits are per
//!   principal;
//! - a dropped HTTP request kills its job;
//! - TLS: a client with the test CA connects, HSTS is on every response, no plaintext;
//! - the tokenless mode refuses anything but loopback.
//!
//! Needs root (the daemon does).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use vivarium_e2e::http::*;
use vivarium_e2e::{require_root, Daemon, DaemonOpts};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_and_no_bad_one_reaches_the_daemon() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, ""));
    let client = plain_client();
    let url = &frontend.url;
    let ok = issuer.token(&resource, "alice");

    let answer = post(
        &client,
        url,
        Some(&ok),
        &run_python(json!({"code": "print(6*7)"})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}\n{}", answer.body, frontend.log());
    assert!(result_text(&answer).contains("42"), "{}", answer.body);
    let before = last_job_id(&frontend);

    // No token: the challenge, and the metadata it names says where to get one.
    let answer = post(&client, url, None, &run_python(json!({"code": "1"})), &[]).await;
    assert_eq!(answer.status, 401);
    let challenge = answer.challenge.expect("WWW-Authenticate");
    let metadata_url = format!("http://{addr}/.well-known/oauth-protected-resource/mcp");
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{challenge}"
    );
    assert!(
        challenge.contains(&format!("scope=\"{SCOPES}\"")),
        "{challenge}"
    );
    let metadata: Value = client
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], resource);
    assert_eq!(metadata["authorization_servers"], json!([issuer.url]));

    let t = now();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut c = issuer.claims(&resource, "alice");
        f(&mut c);
        c
    };
    let public_pem = issuer.key.public_pem.clone();
    let hs256_with_public_key = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("k1".into());
        jsonwebtoken::encode(
            &header,
            &issuer.claims(&resource, "alice"),
            &EncodingKey::from_secret(public_pem.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let alg_none = format!(
        "{}.{}.",
        B64.encode(br#"{"alg":"none","typ":"at+jwt","kid":"k1"}"#),
        B64.encode(serde_json::to_vec(&issuer.claims(&resource, "alice")).unwrap())
    );
    let bad: Vec<(&str, String)> = vec![
        ("malformed", "not-a-jwt".into()),
        (
            "wrong aud",
            issuer.sign(&with(&|c| {
                c["aud"] = json!("https://elsewhere.example/mcp")
            })),
        ),
        (
            "another resource of this host",
            issuer.sign(&with(&|c| c["aud"] = json!(format!("http://{addr}/other")))),
        ),
        (
            "wrong iss",
            issuer.sign(&with(&|c| c["iss"] = json!("http://127.0.0.1:1"))),
        ),
        (
            "expired",
            issuer.sign(&with(&|c| {
                c["exp"] = json!(t - 3600);
                c["iat"] = json!(t - 7200);
                c["nbf"] = json!(t - 7200);
            })),
        ),
        (
            "not yet valid",
            issuer.sign(&with(&|c| c["nbf"] = json!(t + 3600))),
        ),
        ("alg none", alg_none),
        ("HS256 with the public key", hs256_with_public_key),
        (
            "unknown kid",
            issuer.sign_with(&issuer.stranger, &issuer.claims(&resource, "alice")),
        ),
        (
            "no aud",
            issuer.sign(&with(&|c| {
                c.as_object_mut().unwrap().remove("aud");
            })),
        ),
    ];
    for (what, token) in &bad {
        let answer = post(
            &client,
            url,
            Some(token),
            &run_python(json!({"code": "print('ran')"})),
            &[],
        )
        .await;
        assert_eq!(answer.status, 401, "{what}: {}", answer.body);
        let c = answer.challenge.unwrap_or_default();
        assert!(
            c.contains("error=\"invalid_token\"") && c.contains("resource_metadata="),
            "{what}: {c}"
        );
    }
    // A valid token without the scope a call needs.
    let run_only = issuer.sign(&with(&|c| c["scope"] = json!("vivarium:run")));
    let answer = post(
        &client,
        url,
        Some(&run_only),
        &run_python(json!({"code": "print('ran')", "packages": ["six"]})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    let c = answer.challenge.unwrap_or_default();
    assert!(c.contains("error=\"insufficient_scope\""), "{c}");
    assert!(c.contains("vivarium:packages"), "{c}");
    let no_scope = issuer.sign(&with(&|c| c["scope"] = json!("openid")));
    let answer = post(
        &client,
        url,
        Some(&no_scope),
        &run_python(json!({"code": "print('ran')"})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    // Host (DNS rebinding) and Origin.
    for headers in [
        vec![("host", "attacker.example")],
        vec![("origin", "http://attacker.example")],
    ] {
        let answer = post(
            &client,
            url,
            Some(&ok),
            &run_python(json!({"code": "print('ran')"})),
            &headers,
        )
        .await;
        assert_eq!(answer.status, 403, "{headers:?}");
    }

    // A SIGHUP (systemctl reload) without TLS does not end the server.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(frontend.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !frontend
        .log()
        .contains("SIGHUP: no TLS certificate to reload")
    {
        assert!(Instant::now() < end, "SIGHUP not noted\n{}", frontend.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = post(
        &client,
        url,
        Some(&ok),
        &run_python(json!({"code": "print(6*7)"})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200);
    let after = last_job_id(&frontend);
    assert_eq!(
        after,
        before + 1,
        "jobs ran between the two valid calls\n{}",
        daemon.log()
    );
    let audit = frontend.audit();
    let refused = audit.iter().filter(|r| r["event"] == "refused").count();
    assert!(
        refused > bad.len() + 4,
        "every refusal is audited: {refused}"
    );
    assert!(
        audit
            .iter()
            .any(|r| r["event"] == "tools/call" && r["sub"] == "alice" && r["outcome"] == "ok"),
        "{audit:?}"
    );
    // No token and no code in the audit log.
    let text = std::fs::read_to_string(frontend.dir.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains(&ok) && !text.contains("print(6*7)"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_cannot_reach_each_others_state() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(
        &daemon,
        addr,
        &auth_config(
            &issuer,
            &resource,
            "[limits]\ncalls_per_minute = 3\nconcurrent_jobs = 1\nqueued_calls = 0\nsessions = 1\n",
        ),
    );
    let client = plain_client();
    let url = &frontend.url;
    let alice = issuer.token(&resource, "alice");
    let bob = issuer.token(&resource, "bob");

    let answer = post(
        &client,
        url,
        Some(&alice),
        &run_python(json!({
            "code": "import os\nos.makedirs('out', exist_ok=True)\nopen('out/a.txt','w').write('secret')\nx = 41",
            "session_id": "new",
        })),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let structured = &answer.body["result"]["structuredContent"];
    let session = structured["session"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", answer.body))
        .to_string();
    let uri = structured["artifacts"]["files"][0]["uri"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", answer.body))
        .to_string();

    // Bob: alice's session is unknown, her artifact not found, and his list is empty.
    let answer = post(
        &client,
        url,
        Some(&bob),
        &run_python(json!({"code": "print('leaked', x)", "session_id": session})),
        &[],
    )
    .await;
    assert_eq!(answer.body["result"]["isError"], true, "{}", answer.body);
    let text = result_text(&answer);
    assert!(text.contains("no such session"), "{text}");
    assert!(!text.contains("leaked"), "{text}");
    let answer = post(
        &client,
        url,
        Some(&bob),
        &rpc("resources/read", json!({"uri": uri})),
        &[],
    )
    .await;
    assert!(answer.body.get("error").is_some(), "{}", answer.body);
    assert!(!answer.body.to_string().contains("secret"));
    let answer = post(
        &client,
        url,
        Some(&bob),
        &rpc(
            "tools/call",
            json!({"name": "list_sessions", "arguments": {}}),
        ),
        &[],
    )
    .await;
    assert!(
        !answer.body.to_string().contains(&session),
        "{}",
        answer.body
    );
    // Alice still has both.
    let answer = post(
        &client,
        url,
        Some(&alice),
        &run_python(json!({"code": "x + 1", "session_id": session})),
        &[],
    )
    .await;
    assert_eq!(
        answer.body["result"]["structuredContent"]["session"]["value"], "42",
        "{}",
        answer.body
    );
    let answer = post(
        &client,
        url,
        Some(&alice),
        &rpc("resources/read", json!({"uri": uri})),
        &[],
    )
    .await;
    assert!(
        answer.body.to_string().contains("secret"),
        "{}",
        answer.body
    );
    // Her session limit (1) is hers: a second is refused, bob may open one.
    let answer = post(
        &client,
        url,
        Some(&alice),
        &run_python(json!({"code": "1", "session_id": "new"})),
        &[],
    )
    .await;
    assert!(
        result_text(&answer).contains("sessions are open"),
        "{}",
        answer.body
    );
    // Her rate (3 calls a minute) is spent; bob's is not.
    let answer = post(
        &client,
        url,
        Some(&alice),
        &run_python(json!({"code": "1"})),
        &[],
    )
    .await;
    assert!(
        result_text(&answer).contains("rate limit"),
        "{}",
        answer.body
    );
    let answer = post(
        &client,
        url,
        Some(&bob),
        &run_python(json!({"code": "print('bob ran')"})),
        &[],
    )
    .await;
    assert!(result_text(&answer).contains("bob ran"), "{}", answer.body);
    // A daemon handle is refused over HTTP (all principals share the daemon uid).
    let answer = post(
        &client,
        url,
        Some(&bob),
        &run_python(json!({"code": "1", "session_id": "vs_0123456789abcdef0123456789abcdef"})),
        &[],
    )
    .await;
    assert!(
        result_text(&answer).contains("not accepted by this HTTP server"),
        "{}",
        answer.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_request_kills_its_job() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, ""));
    let client = plain_client();
    let token = issuer.token(&resource, "alice");
    let body =
        run_python(json!({"code": "import time\nprint('started', flush=True)\ntime.sleep(120)"}));
    let url = frontend.url.clone();
    let call = tokio::spawn(async move { post(&client, &url, Some(&token), &body, &[]).await });
    // Wait until the job runs, then drop the request.
    let end = Instant::now() + Duration::from_secs(30);
    while daemon.job_processes().is_empty() {
        assert!(
            Instant::now() < end,
            "the job never started\n{}",
            frontend.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    call.abort();
    let end = Instant::now() + Duration::from_secs(20);
    while !daemon.job_processes().is_empty() {
        assert!(
            Instant::now() < end,
            "the job outlived its dropped request\n{}",
            frontend.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A test CA and a leaf for 127.0.0.1 / localhost, as PEM files in `dir`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_hsts_and_no_plaintext() {
    if !require_root() {
        return;
    }
    rustls::crypto::ring::default_provider()
        .install_default()
        .ok();
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let certs = tempfile::tempdir().unwrap();
    let (cert, key, ca_pem) = test_ca(certs.path());
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let resource = format!("https://localhost:{port}/mcp");
    let tls = format!(
        "[tls]\ncert = {:?}\nkey = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    );
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, &tls));
    let client = tls_client(&ca_pem);
    let token = issuer.token(&resource, "alice");
    let answer = post(
        &client,
        &resource,
        Some(&token),
        &run_python(json!({"code": "print(6*7)"})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{}\n{}", answer.body, frontend.log());
    assert!(result_text(&answer).contains("42"));
    assert!(
        answer
            .hsts
            .as_deref()
            .is_some_and(|h| h.starts_with("max-age=")),
        "HSTS on a tool call: {:?}",
        answer.hsts
    );
    // On a refusal and on the metadata too.
    let refused = post(&client, &resource, None, &run_python(json!({})), &[]).await;
    assert_eq!(refused.status, 401);
    assert!(refused.hsts.is_some());
    // A client without the CA fails the handshake.
    let stranger = tls_client(&test_ca(tempfile::tempdir().unwrap().path()).2);
    assert!(stranger.get(&resource).send().await.is_err());
    // Plain HTTP to the port gets no HTTP answer, and that is the only port.
    let plain = plain_client()
        .post(format!("http://localhost:{port}/mcp"))
        .body("{}")
        .send()
        .await;
    assert!(
        plain.is_err(),
        "a plaintext answer on the TLS port: {plain:?}"
    );
    assert_eq!(listening_ports(frontend.child.id()), vec![port]);
    // SIGHUP reloads the certificate for new connections: a new pair (another CA) in
    // the same files, then only a client trusting the new CA gets in.
    let renewed = tempfile::tempdir().unwrap();
    let (new_cert, new_key, new_ca) = test_ca(renewed.path());
    std::fs::copy(&new_cert, &cert).unwrap();
    std::fs::copy(&new_key, &key).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(frontend.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let renewed_client = tls_client(&new_ca);
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let metadata = renewed_client
            .get(format!(
                "https://localhost:{port}/.well-known/oauth-protected-resource"
            ))
            .send()
            .await;
        if metadata.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            Instant::now() < end,
            "the renewed certificate is not served after SIGHUP\n{}",
            frontend.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A fresh client trusting only the old CA is refused now.
    assert!(tls_client(&ca_pem).get(&resource).send().await.is_err());
    // A broken file on reload keeps the serving pair.
    std::fs::write(&cert, "not a certificate").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(frontend.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !frontend.log().contains("the previous one stays in use") {
        assert!(
            Instant::now() < end,
            "no word of the failed reload\n{}",
            frontend.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = post(
        &tls_client(&new_ca),
        &resource,
        Some(&token),
        &run_python(json!({"code": "print(6*7)"})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200);
    let _ = frontend.addr;
}

#[test]
fn tokenless_mode_is_refused_off_loopback() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("none.sock");
    let err = Frontend::try_start(
        &socket,
        format!("0.0.0.0:{}", free_port()).parse().unwrap(),
        "insecure_no_auth = true\n",
    )
    .err()
    .expect("it must not start");
    assert!(err.contains("only on loopback"), "{err}");
    let err = Frontend::try_start(
        &socket,
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        "",
    )
    .err()
    .expect("no [auth] must not start");
    assert!(err.contains("authorization is required"), "{err}");
    let ok = Frontend::try_start(
        &socket,
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        "insecure_no_auth = true\n",
    )
    .unwrap();
    assert!(ok.log().contains("WITHOUT AUTHORIZATION"), "{}", ok.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_revision_is_served_2026_07_28_statelessly() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, ""));
    let client = plain_client();
    let url = &frontend.url;
    let token = issuer.token(&resource, "alice");
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
    });
    let v = Some("2026-07-28");
    let discover = json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover",
                          "params": {"_meta": meta}});
    let answer = post_as(
        &client,
        url,
        Some(&token),
        &discover,
        v,
        &[("mcp-method", "server/discover")],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let text = answer.body["result"].to_string();
    assert!(
        text.contains("2026-07-28") && text.contains("2025-06-18"),
        "{text}"
    );
    assert!(
        text.contains("run_python") || text.contains("tools"),
        "{text}"
    );
    // A stateless tools/call with the standard headers.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "run_python", "arguments": {"code": "print(6*7)"},
                                 "_meta": meta}});
    let answer = post_as(
        &client,
        url,
        Some(&token),
        &call,
        v,
        &[("mcp-method", "tools/call"), ("mcp-name", "run_python")],
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(result_text(&answer).contains("42"), "{}", answer.body);
    // The header and _meta must agree.
    let answer = post_as(
        &client,
        url,
        Some(&token),
        &call,
        Some("2025-11-25"),
        &[("mcp-method", "tools/call"), ("mcp-name", "run_python")],
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    // An older client still initializes (2025-11-25) and calls without a session.
    let init = rpc(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
                                         "clientInfo": {"name": "e2e", "version": "1"}}),
    );
    let answer = post_as(&client, url, Some(&token), &init, None, &[]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        answer.body["result"]["protocolVersion"], "2025-11-25",
        "{}",
        answer.body
    );
    let answer = post_as(
        &client,
        url,
        Some(&token),
        &run_python(json!({"code": "print(6*7)"})),
        Some("2025-11-25"),
        &[],
    )
    .await;
    assert!(result_text(&answer).contains("42"), "{}", answer.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_streams_over_http() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default());
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, ""));
    let token = issuer.token(&resource, "alice");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "run_python", "_meta": {"progressToken": "p-1"},
                   "arguments": {"code": "import time\nprint('tick', flush=True)\ntime.sleep(2.5)\nprint('done')"}}});
    let response = plain_client()
        .post(&frontend.url)
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    let messages: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "no progress in {text}");
    assert!(progress
        .iter()
        .all(|p| p["params"]["progressToken"] == "p-1"));
    let last = messages.last().unwrap();
    assert_eq!(last["id"], 7, "{text}");
    assert!(last["result"].to_string().contains("done"), "{text}");
}
