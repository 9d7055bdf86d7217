//! `vivarium-mcp --http` and the Tasks extension (`io.modelcontextprotocol/tasks`,
//! SEP-2663, as rmcp 3.11 serves it) with the real daemon, in raw JSON-RPC at protocol
//! 2026-07-28 (per-request `_meta` protocol version and client capabilities, the
//! `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers):
//!
//! - alice's long call (timeout above `[tasks] threshold_seconds`) answers with a task,
//!   which `tasks/get` shows working, then completed with the output;
//! - bob's `tasks/get` and `tasks/cancel` of alice's id answer exactly as a made-up id
//!   does, and her task is unaffected;
//! - alice's `tasks/cancel` kills a running task's job, and the task ends cancelled;
//! - a client that does not declare the extension gets the synchronous result of the same
//!   call; `_meta` `vivarium/task` asks for a task explicitly;
//! - every task operation is in the audit log;
//! - a task's job ends with the server (SIGTERM).
//!
//! Needs root (the daemon does).
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vivarium_e2e::http::*;
use vivarium_e2e::{require_root, workspace_dir, Daemon, DaemonOpts};

const VERSION: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The shipped default profile with a 300 s wall (the default's 30 s is below the
/// frontend's default threshold of 60 s).
fn long_profile() -> String {
    let text = std::fs::read_to_string(workspace_dir().join("profiles/default.toml")).unwrap();
    assert!(text.contains("wall_ms = 30_000\n") && text.contains("cpu_ms = 30_000\n"));
    text.replace("wall_ms = 30_000\n", "wall_ms = 300_000\n")
        .replace("cpu_ms = 30_000\n", "cpu_ms = 300_000\n")
}

static ID: AtomicU64 = AtomicU64::new(1);

/// One JSON-RPC request at 2026-07-28; `tasks`: whether its client declares the extension
/// (in the per-request capabilities).
async fn call(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    method: &str,
    mut params: Value,
    tasks: bool,
) -> Value {
    let capabilities = if tasks {
        json!({ "extensions": { TASKS: {} } })
    } else {
        json!({})
    };
    // The caller's own `_meta` keys stay.
    let mut meta = params.get("_meta").cloned().unwrap_or_else(|| json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!(VERSION);
    meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    meta["io.modelcontextprotocol/clientInfo"] = json!({ "name": "e2e", "version": "0" });
    params["_meta"] = meta;
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let body = json!({
        "jsonrpc": "2.0",
        "id": ID.fetch_add(1, Ordering::Relaxed),
        "method": method,
        "params": params,
    });
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", VERSION)
        .header("mcp-method", method)
        .bearer_auth(token)
        .json(&body);
    if let Some(name) = name {
        request = request.header("mcp-name", name);
    }
    let response = request.send().await.expect("the request is answered");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|c| c.to_str().ok())
        .map(str::to_string);
    let text = response.text().await.unwrap_or_default();
    let value = response_message(text, content_type.as_deref());
    assert!(
        status == 200 || value.get("error").is_some(),
        "{method}: HTTP {status}: {value}"
    );
    value
}

fn run(code: &str, extra: Value) -> Value {
    let mut arguments = json!({ "code": code });
    for (k, v) in extra.as_object().unwrap() {
        arguments[k] = v.clone();
    }
    json!({ "name": "run_python", "arguments": arguments })
}

fn text_of(result: &Value) -> String {
    content_text(result).unwrap_or_else(|| result.to_string())
}

/// Poll `tasks/get` until the task's status is `want` (or terminal), within `bound`.
async fn poll_until(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    id: &str,
    want: &str,
    bound: Duration,
    log: &dyn Fn() -> String,
) -> Value {
    let end = Instant::now() + bound;
    loop {
        let answer = call(
            client,
            url,
            token,
            "tasks/get",
            json!({ "taskId": id }),
            true,
        )
        .await;
        let result = &answer["result"];
        let status = result["status"].as_str().unwrap_or_default();
        if status == want || ["completed", "failed", "cancelled"].contains(&status) {
            return result.clone();
        }
        assert_eq!(status, "working", "{answer}");
        assert!(
            Instant::now() < end,
            "task {id} not {want} within {bound:?}: {answer}\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_calls_become_tasks_bound_to_their_principal() {
    if !require_root() {
        return;
    }
    let daemon = Daemon::start(DaemonOpts::default().profile("long", &long_profile()));
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start(&daemon, addr, &auth_config(&issuer, &resource, ""));
    let log = || frontend.log();
    let client = plain_client();
    let url = frontend.url.as_str();
    let alice = issuer.token(&resource, "alice");
    let bob = issuer.token(&resource, "bob");
    let slow = "import time; time.sleep(3); print('done')";
    let long = json!({ "profile": "long", "timeout_seconds": 200 });

    // The server says it serves the extension.
    let answer = call(&client, url, &alice, "server/discover", json!({}), true).await;
    assert!(
        answer["result"]["capabilities"]["extensions"]
            .get(TASKS)
            .is_some(),
        "{answer}"
    );

    // Alice's long call: a task, resolvable at once, working, then completed.
    let answer = call(
        &client,
        url,
        &alice,
        "tools/call",
        run(slow, long.clone()),
        true,
    )
    .await;
    let created = &answer["result"];
    assert_eq!(created["resultType"], "task", "{answer}\n{}", log());
    assert_eq!(created["status"], "working", "{answer}");
    let id = created["taskId"].as_str().unwrap().to_string();
    assert!(
        id.starts_with("task_") && id.len() == 5 + 32,
        "128 random bits: {id}"
    );
    let first = call(
        &client,
        url,
        &alice,
        "tasks/get",
        json!({ "taskId": id }),
        true,
    )
    .await;
    assert_eq!(first["result"]["status"], "working", "{first}");
    assert_eq!(first["result"]["taskId"], id.as_str());

    // Bob: alice's id is answered exactly as a made-up one, for get and cancel alike.
    let made_up = format!("task_{}", "0".repeat(32));
    for method in ["tasks/get", "tasks/cancel"] {
        let foreign = call(&client, url, &bob, method, json!({ "taskId": id }), true).await;
        let unknown = call(
            &client,
            url,
            &bob,
            method,
            json!({ "taskId": made_up }),
            true,
        )
        .await;
        assert!(foreign.get("result").is_none(), "{method}: {foreign}");
        assert_eq!(
            foreign["error"]["code"], unknown["error"]["code"],
            "{foreign} {unknown}"
        );
        assert_eq!(
            foreign["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&id, "ID"),
            unknown["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&made_up, "ID"),
            "{method}"
        );
        assert_eq!(foreign["error"]["data"], unknown["error"]["data"]);
    }

    // 2025-11-25's tasks/result and tasks/list are not served (not in SEP-2663 nor rmcp).
    for method in ["tasks/result", "tasks/list"] {
        let answer = call(&client, url, &alice, method, json!({ "taskId": id }), true).await;
        assert_eq!(answer["error"]["code"], -32601, "{method}: {answer}");
    }

    // Alice's task ran on, unaffected, to its result.
    let done = poll_until(
        &client,
        url,
        &alice,
        &id,
        "completed",
        Duration::from_secs(90),
        &log,
    )
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(text_of(&done["result"]).contains("done"), "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert!(done["ttlMs"].as_u64().is_some(), "{done}");

    // Alice cancels a second task: its job goes, and the task ends cancelled.
    assert!(daemon.job_processes().is_empty());
    let answer = call(
        &client,
        url,
        &alice,
        "tools/call",
        run(
            "import time\nprint('started', flush=True)\ntime.sleep(120)",
            long.clone(),
        ),
        true,
    )
    .await;
    assert_eq!(answer["result"]["resultType"], "task", "{answer}");
    let second = answer["result"]["taskId"].as_str().unwrap().to_string();
    let end = Instant::now() + Duration::from_secs(60);
    while daemon.job_processes().is_empty() {
        assert!(Instant::now() < end, "the job never started\n{}", log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ack = call(
        &client,
        url,
        &alice,
        "tasks/cancel",
        json!({ "taskId": second }),
        true,
    )
    .await;
    assert!(ack.get("error").is_none(), "{ack}");
    let end = Instant::now() + Duration::from_secs(20);
    while !daemon.job_processes().is_empty() {
        assert!(
            Instant::now() < end,
            "the job outlived tasks/cancel\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cancelled = poll_until(
        &client,
        url,
        &alice,
        &second,
        "cancelled",
        Duration::from_secs(20),
        &log,
    )
    .await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    // Without the extension, the same call is synchronous.
    let answer = call(
        &client,
        url,
        &alice,
        "tools/call",
        run(slow, long.clone()),
        false,
    )
    .await;
    assert!(answer["result"].get("taskId").is_none(), "{answer}");
    assert!(text_of(&answer["result"]).contains("done"), "{answer}");
    // And at 2025-06-18 without per-request metadata.
    let answer = post(
        &client,
        url,
        Some(&alice),
        &run_python(json!({ "code": slow, "profile": "long", "timeout_seconds": 200 })),
        &[],
    )
    .await;
    assert!(result_text(&answer).contains("done"), "{}", answer.body);
    // With it but a short timeout: synchronous; `_meta` vivarium/task asks for a task.
    let answer = call(
        &client,
        url,
        &alice,
        "tools/call",
        run("print(6*7)", json!({})),
        true,
    )
    .await;
    assert!(text_of(&answer["result"]).contains("42"), "{answer}");
    let mut asked = run("print(6*7)", json!({}));
    asked["_meta"] = json!({ "vivarium/task": true });
    let answer = call(&client, url, &alice, "tools/call", asked, true).await;
    assert_eq!(answer["result"]["resultType"], "task", "{answer}");
    let third = answer["result"]["taskId"].as_str().unwrap().to_string();
    let done = poll_until(
        &client,
        url,
        &alice,
        &third,
        "completed",
        Duration::from_secs(60),
        &log,
    )
    .await;
    assert!(text_of(&done["result"]).contains("42"), "{done}");

    // Every task operation is audited, with its task.
    let audit = frontend.audit();
    let has = |event: &str, task: &str, outcome: &str| {
        audit.iter().any(|r| {
            r["event"] == event
                && r["task"] == task
                && (outcome.is_empty() || r["outcome"] == outcome)
        })
    };
    assert!(has("tools/call", &id, "task"), "{audit:#?}");
    assert!(has("tasks/get", &id, "working"), "{audit:#?}");
    assert!(has("tasks/get", &id, "completed"), "{audit:#?}");
    assert!(has("tasks/get", &id, "not_found"), "bob's: {audit:#?}");
    assert!(has("tasks/cancel", &id, "not_found"), "bob's: {audit:#?}");
    assert!(has("tasks/cancel", &second, "cancelling"), "{audit:#?}");
    assert!(has("tasks/finished", &id, "ok"), "{audit:#?}");
    assert!(has("tasks/finished", &second, "cancelled"), "{audit:#?}");
    let finished = audit
        .iter()
        .find(|r| r["event"] == "tasks/finished" && r["task"] == id.as_str())
        .unwrap();
    assert!(finished["job_id"].as_u64().is_some(), "{finished}");
    assert_eq!(finished["sub"], "alice");
    let bobs = audit
        .iter()
        .filter(|r| r["sub"] == "bob" && r["event"].as_str().unwrap().starts_with("tasks/"))
        .count();
    assert_eq!(bobs, 4, "{audit:#?}");

    // A task's job does not outlive the server: SIGTERM kills it.
    let answer = call(
        &client,
        url,
        &alice,
        "tools/call",
        run("import time; time.sleep(120)", long.clone()),
        true,
    )
    .await;
    assert_eq!(answer["result"]["resultType"], "task", "{answer}");
    let end = Instant::now() + Duration::from_secs(60);
    while daemon.job_processes().is_empty() {
        assert!(Instant::now() < end, "the job never started\n{}", log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(frontend);
    let end = Instant::now() + Duration::from_secs(20);
    while !daemon.job_processes().is_empty() {
        assert!(Instant::now() < end, "a task's job outlived the server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
