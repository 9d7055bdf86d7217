//! `vivarium-mcp --http` under load: 200 concurrent callers (a handful of principals,
//! tokens from the test issuer) call `run_python` over HTTP on loopback for a fixed time,
//! against the frontend's limits (per principal and instance-wide) and the daemon's slots.
//!
//! - every answer is a success or one of the configured limit refusals (a tool error
//!   whose text names the limit): no HTTP 5xx (nor any other status), no JSON-RPC
//!   error, no transport error, no call without an answer;
//! - the frontend's memory stays flat: its RSS at the end is within a generous bound of
//!   its RSS after a warm-up (not a timing assertion).
//!
//! Counts (ok, refused by kind) and latencies are printed, never asserted on. Hard
//! bounded: about 20 s of load, then at most 60 s for the calls in flight.
//!
//! Needs root (the daemon does).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use vivarium_e2e::http::*;
use vivarium_e2e::{require_root, Daemon, DaemonOpts};

const CALLERS: usize = 200;
const PRINCIPALS: usize = 5;
const LOAD: Duration = Duration::from_secs(20);
const WARM_UP: Duration = Duration::from_secs(5);
/// No single call may take longer: past it, the call hangs.
const CALL_LIMIT: Duration = Duration::from_secs(30);
/// The frontend's RSS may grow this much from the warm-up to the end.
const RSS_SLACK_KIB: u64 = 32 << 10;

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// What one call got.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ok,
    /// A configured limit refused it (the kind).
    Refused(&'static str),
    /// Anything else: the test fails.
    Wrong(String),
}

fn classify_tool_error(text: &str) -> Outcome {
    let per_principal = text.contains("a limit of each client of this server");
    let kind = if text.contains("rate limit reached") {
        "rate limit"
    } else if text.contains("too many calls at once") {
        if per_principal {
            "principal queue full"
        } else {
            "instance queue full"
        }
    } else if text.contains("in the queue without a free job slot") {
        if per_principal {
            "principal queue timeout"
        } else {
            "instance queue timeout"
        }
    } else if text.contains("the daemon is busy") {
        "daemon busy"
    } else {
        return Outcome::Wrong(format!("tool error: {text}"));
    };
    Outcome::Refused(kind)
}

async fn call(client: &reqwest::Client, url: &str, token: &str, body: &Value) -> Outcome {
    let request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .bearer_auth(token)
        .json(body)
        .send();
    let response = match tokio::time::timeout(CALL_LIMIT, request).await {
        Err(_) => return Outcome::Wrong("no answer (hang)".into()),
        Ok(Err(e)) => return Outcome::Wrong(format!("transport error: {e}")),
        Ok(Ok(r)) => r,
    };
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = match tokio::time::timeout(CALL_LIMIT, response.text()).await {
        Err(_) => return Outcome::Wrong("the body never ended (hang)".into()),
        Ok(Err(e)) => return Outcome::Wrong(format!("transport error reading the body: {e}")),
        Ok(Ok(t)) => t,
    };
    if status != 200 {
        return Outcome::Wrong(format!("HTTP {status}: {text}"));
    }
    let body = response_message(text, content_type.as_deref());
    let result = &body["result"];
    if result.is_null() {
        return Outcome::Wrong(format!("not a result: {body}"));
    }
    if result["isError"] != true {
        return Outcome::Ok;
    }
    let text = result["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default();
    classify_tool_error(&text)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_callers_get_answers_or_limit_refusals_and_memory_stays_flat() {
    if !require_root() {
        return;
    }
    // 4 job slots and 4 queue places at the daemon; the frontend admits 6 at a time
    // (16 waiting, 3 s at most), and each principal 2 at a time (4 waiting): every kind
    // of limit is in play.
    let daemon = Daemon::start(DaemonOpts::default().warm_pools().slots(4, 4));
    let issuer = Issuer::start().await;
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let resource = format!("http://{addr}/mcp");
    let frontend = Frontend::start_with_args(
        &daemon,
        addr,
        &auth_config(
            &issuer,
            &resource,
            "[limits]\ncalls_per_minute = 0\nconcurrent_jobs = 2\nqueued_calls = 4\n",
        ),
        &[
            "--max-calls-per-minute",
            "0",
            "--max-concurrent-jobs",
            "6",
            "--max-queued-calls",
            "16",
            "--queue-timeout",
            "3",
        ],
    );
    let pid = frontend.child.id();
    let _ = plain_client(); // installs rustls' provider
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CALLERS)
        .build()
        .unwrap();
    let tokens: Vec<String> = (0..PRINCIPALS)
        .map(|i| issuer.token(&resource, &format!("load-{i}")))
        .collect();

    let start = Instant::now();
    let deadline = start + LOAD;
    let results: Arc<Mutex<Vec<(Outcome, Duration)>>> = Arc::default();
    let mut callers = tokio::task::JoinSet::new();
    for i in 0..CALLERS {
        let client = client.clone();
        let url = frontend.url.clone();
        let token = tokens[i % PRINCIPALS].clone();
        let results = results.clone();
        callers.spawn(async move {
            let body = run_python(json!({"code": if i % 2 == 0 { "pass" } else { "print(1)" }}));
            let mut mine = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let outcome = call(&client, &url, &token, &body).await;
                let refused = matches!(outcome, Outcome::Refused(_));
                let wrong = matches!(outcome, Outcome::Wrong(_));
                mine.push((outcome, t.elapsed()));
                if wrong {
                    break;
                }
                if refused {
                    // A client backs off a little before it retries.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            results.lock().unwrap().extend(mine);
        });
    }
    tokio::time::sleep_until((start + WARM_UP).into()).await;
    let rss_warm = vm_rss_kib(pid);
    tokio::time::sleep_until(deadline.into()).await;
    let rss_end = vm_rss_kib(pid);
    let drained = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(joined) = callers.join_next().await {
            joined.expect("a caller panicked");
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "calls still unanswered 60 s after the load ended\n{}",
        frontend.log()
    );
    let rss_drained = vm_rss_kib(pid);
    let elapsed = start.elapsed();

    let results = std::mem::take(&mut *results.lock().unwrap());
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut wrong: Vec<String> = Vec::new();
    let mut ok_latency = Vec::new();
    let mut all_latency = Vec::new();
    for (outcome, latency) in &results {
        all_latency.push(*latency);
        let key = match outcome {
            Outcome::Ok => {
                ok_latency.push(*latency);
                "ok".to_string()
            }
            Outcome::Refused(kind) => format!("refused: {kind}"),
            Outcome::Wrong(what) => {
                wrong.push(what.clone());
                "WRONG".to_string()
            }
        };
        *counts.entry(key).or_default() += 1;
    }
    ok_latency.sort();
    all_latency.sort();
    let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
    eprintln!(
        "load: {CALLERS} callers, {PRINCIPALS} principals, {:?} of calls ({:.1} s in all): {} answers",
        LOAD,
        elapsed.as_secs_f64(),
        results.len()
    );
    for (k, n) in &counts {
        eprintln!("  {k}: {n}");
    }
    eprintln!(
        "  ok latency p50 {} p99 {} (max {}); every answer p50 {} p99 {}",
        ms(percentile(&ok_latency, 0.5)),
        ms(percentile(&ok_latency, 0.99)),
        ms(ok_latency.last().copied().unwrap_or_default()),
        ms(percentile(&all_latency, 0.5)),
        ms(percentile(&all_latency, 0.99)),
    );
    eprintln!(
        "  frontend VmRSS: {} KiB after {:?} warm-up, {} KiB at the end of the load, {} KiB drained",
        rss_warm, WARM_UP, rss_end, rss_drained
    );

    assert!(
        wrong.is_empty(),
        "{} answers were neither a success nor a limit refusal; the first: {:?}\n{}",
        wrong.len(),
        &wrong[..wrong.len().min(5)],
        frontend.log()
    );
    assert!(counts.get("ok").copied().unwrap_or(0) > 0, "{counts:?}");
    assert!(
        counts.keys().any(|k| k.starts_with("refused")),
        "the limits were never reached: {counts:?}"
    );
    for rss in [rss_end, rss_drained] {
        assert!(
            rss <= rss_warm + RSS_SLACK_KIB,
            "the frontend's RSS grew from {rss_warm} KiB to {rss} KiB"
        );
    }
    // Still serving, and every job ended.
    let answer = post(
        &plain_client(),
        &frontend.url,
        Some(&tokens[0]),
        &run_python(json!({"code": "print(6*7)"})),
        &[],
    )
    .await;
    assert!(result_text(&answer).contains("42"), "{}", answer.body);
}
