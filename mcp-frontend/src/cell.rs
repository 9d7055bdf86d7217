//! A session cell's MCP result (the `run_python` result with its `session` part), and
//! the `close_session` tool. Pure functions, unit-tested.
//!
//! A cell's result is `run_python`'s, within the same budgets: `structuredContent` keeps up
//! to `output_chars` of each stream, of the value and of the traceback (an eighth of
//! `text_chars` each in the text); the one text block
//! is the same JSON, led by `error` when the cell did not run to its end, cut to
//! `text_chars`. A cell that raised is a tool error (`isError`), as a failing script is
//! without a session; so is an interrupted one. Both keep the session and its state
//! (`session.state_kept`); only a session that ended loses it.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vivarium_client::{format_bytes, CellOutcome, CellStatus};
use vivarium_proto::{SessionEndReason, SessionEnded};

use crate::excerpt::excerpt_weighted;
use crate::session::{self, SessionArg};
use crate::tool::{fit_text, Budgets, ExceptionResult, RunPythonResult, SessionResult};

/// The tool that ends a session.
pub const CLOSE_TOOL_NAME: &str = "close_session";

/// A cell as the result reports it.
#[derive(Debug, Clone, Copy)]
pub struct CellRun<'a> {
    /// The id the model names the session by (this server's alias, or a handed-over handle).
    pub id: &'a str,
    /// The session's profile, when known.
    pub profile: &'a str,
    /// Whether this call opened the session.
    pub opened: bool,
    pub outcome: &'a CellOutcome,
}

/// The exception type of a cell whose input files could not be written (the session's
/// cell loop raises it before the code runs; docs/protocol.md, "Input files").
pub const INPUT_FILE_ERROR: &str = "vivarium.InputFileError";

/// The result's `reason` for a cell.
pub fn cell_reason(status: &CellStatus) -> &'static str {
    match status {
        CellStatus::Ok => "ok",
        CellStatus::Exception(_) => "error",
        CellStatus::Interrupted => "interrupted",
        CellStatus::Timeout => "timeout",
        CellStatus::MemoryGuard => "memory_guard",
        CellStatus::SessionEnded(_) => "session_ended",
    }
}

/// `text` within `chars` characters (head and tail around a marker, `head` % to the head),
/// and whether it was cut.
fn cut(text: &str, chars: usize, head: usize) -> (String, bool) {
    if text.chars().count() <= chars {
        return (text.to_string(), false);
    }
    (
        excerpt_weighted(text.as_bytes(), chars, false, head).text,
        true,
    )
}

/// The result of `run` with each stream's `(bytes, chars, head %)` and the value and the
/// traceback within `extra_chars` each.
fn cell_result_with(
    run: CellRun<'_>,
    (stdout, out_chars, out_head): (&[u8], usize, usize),
    (stderr, err_chars, err_head): (&[u8], usize, usize),
    extra_chars: usize,
) -> RunPythonResult {
    let o = run.outcome;
    let mut limits_hit = Vec::new();
    match o.status {
        CellStatus::Timeout => limits_hit.push("wall".to_string()),
        CellStatus::MemoryGuard => limits_hit.push("memory".to_string()),
        _ => {}
    }
    if o.stdout_truncated {
        limits_hit.push("stdout".into());
    }
    if o.stderr_truncated {
        limits_hit.push("stderr".into());
    }
    let (value, value_truncated) = match &o.value {
        Some(v) => {
            let (v, cut) = cut(v, extra_chars, 50);
            (Some(v), cut || o.value_truncated)
        }
        None => (None, o.value_truncated),
    };
    let exception = match &o.status {
        CellStatus::Exception(e) => {
            let (traceback, cut) = cut(&e.traceback, extra_chars, 25);
            Some(ExceptionResult {
                type_name: e.type_name.clone(),
                message: cut_message(&e.message, extra_chars),
                traceback,
                traceback_truncated: cut || e.traceback_truncated,
            })
        }
        _ => None,
    };
    let ended = matches!(o.status, CellStatus::SessionEnded(_));
    RunPythonResult {
        exit_code: None,
        reason: cell_reason(&o.status).into(),
        stdout: excerpt_weighted(stdout, out_chars, o.stdout_truncated, out_head),
        stderr: excerpt_weighted(stderr, err_chars, o.stderr_truncated, err_head),
        wall_ms: o.wall_ms,
        cpu_ms: o.cpu_ms,
        peak_memory_bytes: o.peak_memory_bytes,
        limits_hit,
        profile: run.profile.into(),
        packages: None,
        session: Some(SessionResult {
            session_id: run.id.into(),
            opened: run.opened,
            cell: o.cell,
            value,
            value_truncated,
            exception,
            state_kept: !ended,
            expires_at: (!ended && o.expires_at_unix_ms > 0)
                .then(|| session::rfc3339_utc(o.expires_at_unix_ms)),
            expires_in_seconds: (!ended && o.expires_at_unix_ms > 0)
                .then_some(o.expires_in_ms / 1000),
        }),
        artifacts: None,
    }
}

fn cut_message(message: &str, chars: usize) -> String {
    cut(message, chars, 50).0
}

/// Why a cell did not run to its end, in a sentence (`None` when it did).
pub fn cell_failure(run: CellRun<'_>) -> Option<String> {
    const KEPT: &str = "the session and its state are kept";
    let o = run.outcome;
    Some(match &o.status {
        CellStatus::Ok => return None,
        CellStatus::Exception(e) if e.type_name == INPUT_FILE_ERROR => {
            let message: String = e.message.chars().take(300).collect();
            format!(
                "an input file could not be written, so the cell's code did not run (none of \
                 it): {message}. A file replaces only a regular file at its path, and /work \
                 must have room for it: move or remove what is there (a directory, a link, \
                 ...) in a cell first, or send the file to another path. The session and its \
                 state are kept; the details are in session.exception"
            )
        }
        CellStatus::Exception(e) => {
            let message: String = e.message.chars().take(200).collect();
            let colon = if message.is_empty() { "" } else { ": " };
            format!(
                "the cell raised {}{colon}{message}; {KEPT} (what ran before the exception \
                 stays done); the traceback is in session.exception",
                e.type_name
            )
        }
        CellStatus::Interrupted => {
            format!("interrupted: KeyboardInterrupt landed in the cell; {KEPT}")
        }
        CellStatus::Timeout => format!(
            "interrupted: the cell's wall-clock limit passed after {} ms (KeyboardInterrupt \
             landed in it); {KEPT}. Do less per cell, or pass a larger timeout_seconds",
            o.wall_ms
        ),
        CellStatus::MemoryGuard => format!(
            "interrupted: the session's memory reached its guard (peak {}), so the cell was \
             stopped before the memory limit could end the session; {KEPT}. Free memory \
             (`del` large objects) or work in smaller pieces",
            format_bytes(o.peak_memory_bytes)
        ),
        CellStatus::SessionEnded(ended) => session::ended_during_cell_text(run.id, ended),
    })
}

/// The MCP result of a finished cell: success when it ran to its end, `isError`
/// otherwise, within `budgets` as `run_python`'s results are.
pub fn cell_call_result(
    run: CellRun<'_>,
    stdout: &[u8],
    stderr: &[u8],
    budgets: Budgets,
) -> CallToolResult {
    let out = budgets.output_chars;
    let result = cell_result_with(run, (stdout, out, 50), (stderr, out, 50), out);
    let value = serde_json::to_value(&result).expect("the result serializes");
    let error = cell_failure(run);
    // The value, the exception's message and its traceback take at most an eighth of the
    // text each.
    let extra = (budgets.text_chars / 8).min(out);
    let text = fit_text(
        error.as_deref(),
        stdout,
        stderr,
        budgets,
        |out_chars, err_chars| {
            cell_result_with(run, (stdout, out_chars, 50), (stderr, err_chars, 50), extra)
        },
    );
    let mut call = if error.is_none() {
        CallToolResult::structured(value)
    } else {
        CallToolResult::structured_error(value)
    };
    call.content = vec![ContentBlock::text(text)];
    call
}

/// Arguments of `close_session`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct CloseSessionArgs {
    /// The `session_id` of a run_python result (`result.session.session_id`).
    pub session_id: String,
}

/// What `close_session` returns (`structuredContent`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct CloseSessionResult {
    pub session_id: String,
    /// True when this call ended it; false when it had ended already (`reason` says why).
    pub closed_now: bool,
    /// How it ended: closed, idle_timeout, lifetime, cpu_budget, memory, unresponsive,
    /// exited, seccomp, idle_memory, daemon_restarted, sandbox_error, link_failed.
    pub reason: String,
    /// Cells it ran.
    pub cells: u64,
    /// CPU time it used, in milliseconds.
    pub cpu_ms: u64,
    /// Its peak memory in bytes.
    pub peak_memory_bytes: u64,
    /// How long it lived, in milliseconds.
    pub age_ms: u64,
}

/// Every `reason` of a close ([`end_reason_name`]).
pub const END_REASONS: [&str; 12] = [
    "closed",
    "idle_timeout",
    "lifetime",
    "cpu_budget",
    "memory",
    "unresponsive",
    "exited",
    "seccomp",
    "idle_memory",
    "daemon_restarted",
    "sandbox_error",
    "link_failed",
];

pub fn end_reason_name(reason: SessionEndReason) -> &'static str {
    use SessionEndReason as R;
    match reason {
        R::Closed => "closed",
        R::IdleTimeout => "idle_timeout",
        R::Lifetime => "lifetime",
        R::CpuBudget => "cpu_budget",
        R::Memory => "memory",
        R::Unresponsive => "unresponsive",
        R::Exited => "exited",
        R::Seccomp => "seccomp",
        R::IdleMemory => "idle_memory",
        R::DaemonRestarted => "daemon_restarted",
        R::SandboxError => "sandbox_error",
        R::LinkFailed => "link_failed",
    }
}

/// Parse `close_session`'s arguments; the error text is meant for the model.
pub fn parse_close_args(arguments: Option<JsonObject>) -> Result<SessionArg, String> {
    let bad = |e: String| format!("invalid arguments for {CLOSE_TOOL_NAME}: {e}");
    let arguments = arguments.unwrap_or_default();
    if let Some(other) = arguments.keys().find(|k| *k != "session_id") {
        return Err(bad(format!(
            "unknown field `{other}`; the one parameter is `session_id`"
        )));
    }
    let id = match arguments.get("session_id") {
        Some(serde_json::Value::String(id)) => id,
        Some(_) => {
            return Err(bad(
                "`session_id` must be a string (the session_id of a run_python result)".into(),
            ))
        }
        None => return Err(bad("missing field `session_id`".into())),
    };
    match SessionArg::parse(id).map_err(bad)? {
        SessionArg::New => Err(bad(
            "`session_id` names the session to close: the session_id of a run_python \
             result, not \"new\""
                .into(),
        )),
        arg => Ok(arg),
    }
}

/// The result of a close: `closed_now` when this call ended the session.
pub fn close_call_result(id: &str, ended: &SessionEnded, closed_now: bool) -> CallToolResult {
    let result = CloseSessionResult {
        session_id: id.into(),
        closed_now,
        reason: end_reason_name(ended.reason).into(),
        cells: ended.cells,
        cpu_ms: ended.cpu_ms,
        peak_memory_bytes: ended.peak_memory_bytes,
        age_ms: ended.age_ms,
    };
    let text = if closed_now {
        format!(
            "closed session `{id}` ({}); its state is gone",
            session::totals(ended)
        )
    } else {
        format!(
            "nothing to close: session `{id}` had already ended: {}",
            session::end_summary(ended)
        )
    };
    let mut call =
        CallToolResult::structured(serde_json::to_value(&result).expect("the result serializes"));
    call.content = vec![ContentBlock::text(text)];
    call
}

/// The tool that lists this server's sessions.
pub const LIST_TOOL_NAME: &str = "list_sessions";

/// `list_sessions` takes no arguments.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ListSessionsArgs {}

/// What `list_sessions` returns (`structuredContent`).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListSessionsResult {
    /// The open sessions this server opened or was handed, soonest to expire first.
    pub sessions: Vec<SessionSummary>,
}

/// One open session.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SessionSummary {
    /// Pass this as run_python's `session_id`.
    pub session_id: String,
    pub profile: String,
    /// Cells it has run.
    pub cells: u64,
    /// Whether a cell runs in it now.
    pub running: bool,
    /// Seconds since its last cell ended (0 while one runs).
    pub idle_seconds: u64,
    /// When it ends if no cell comes, RFC 3339 UTC.
    pub expires_at: String,
    pub expires_in_seconds: u64,
    /// What ends it then: idle_timeout or lifetime.
    pub expires_by: String,
    /// Its memory now, in bytes.
    pub memory_bytes: u64,
    /// CPU time it has used, in milliseconds.
    pub cpu_ms: u64,
}

/// The sessions `(id, info)` the daemon lists and this server knows, as a result.
pub fn list_call_result(found: &[(String, vivarium_client::SessionInfo)]) -> CallToolResult {
    let mut sessions: Vec<SessionSummary> = found
        .iter()
        .map(|(id, info)| SessionSummary {
            session_id: id.clone(),
            profile: info.profile.clone(),
            cells: info.cells,
            running: info.running,
            idle_seconds: info.idle_ms / 1000,
            expires_at: session::rfc3339_utc(info.expires_at_unix_ms),
            expires_in_seconds: info.expires_in_ms / 1000,
            expires_by: end_reason_name(info.expires_by).into(),
            memory_bytes: info.memory_bytes,
            cpu_ms: info.cpu_ms,
        })
        .collect();
    sessions.sort_by(|a, b| {
        (a.expires_in_seconds, &a.session_id).cmp(&(b.expires_in_seconds, &b.session_id))
    });
    let text = if sessions.is_empty() {
        "no open sessions on this server (run_python with `session_id: \"new\"` opens one)"
            .to_string()
    } else {
        let lines: Vec<String> = sessions
            .iter()
            .map(|s| {
                format!(
                    "{} (profile `{}`): {} cell{}{}, idle {} s, expires at {} (in {} s, {})",
                    s.session_id,
                    s.profile,
                    s.cells,
                    if s.cells == 1 { "" } else { "s" },
                    if s.running { ", a cell running" } else { "" },
                    s.idle_seconds,
                    s.expires_at,
                    s.expires_in_seconds,
                    s.expires_by.replace('_', " ")
                )
            })
            .collect();
        format!("{} open session(s):\n{}", lines.len(), lines.join("\n"))
    };
    let result = ListSessionsResult { sessions };
    let mut call =
        CallToolResult::structured(serde_json::to_value(&result).expect("the result serializes"));
    call.content = vec![ContentBlock::text(text)];
    call
}

/// Check that `list_sessions` got no arguments.
pub fn parse_list_args(arguments: Option<JsonObject>) -> Result<(), String> {
    match arguments.unwrap_or_default().keys().next() {
        Some(k) => Err(format!(
            "invalid arguments for {LIST_TOOL_NAME}: unknown field `{k}`; it takes no parameters"
        )),
        None => Ok(()),
    }
}

/// The `list_sessions` tool as `tools/list` shows it.
pub fn list_tool() -> Tool {
    let mut input = (*rmcp::handler::server::common::schema_for_input::<ListSessionsArgs>()
        .expect("ListSessionsArgs has an object schema"))
    .clone();
    crate::tool::portable(&mut input, true);
    input.insert("examples".into(), serde_json::json!([{}]));
    let mut output =
        (*rmcp::handler::server::common::schema_for_output::<ListSessionsResult>()).clone();
    crate::tool::portable(&mut output, false);
    Tool::new(
        LIST_TOOL_NAME,
        "List the open run_python sessions of this server: each one's session_id, profile, \
         cells, idle time and when it expires. Use it to find a session id again; sessions \
         that have ended are not listed.",
        Arc::new(input),
    )
    .with_title("List Python sessions")
    .with_raw_output_schema(Arc::new(output))
    .with_annotations(
        ToolAnnotations::with_title("List Python sessions")
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

/// The `close_session` tool as `tools/list` shows it.
pub fn close_tool() -> Tool {
    let mut input = (*rmcp::handler::server::common::schema_for_input::<CloseSessionArgs>()
        .expect("CloseSessionArgs has an object schema"))
    .clone();
    crate::tool::portable(&mut input, true);
    input.insert(
        "examples".into(),
        serde_json::json!([{"session_id": "mcp_0123456789abcdef0123456789abcdef"}]),
    );
    let mut output =
        (*rmcp::handler::server::common::schema_for_output::<CloseSessionResult>()).clone();
    crate::tool::portable(&mut output, false);
    if let Some(serde_json::Value::Object(r)) = output
        .get_mut("properties")
        .and_then(|p| p.get_mut("reason"))
    {
        r.insert("enum".into(), END_REASONS.to_vec().into());
    }
    let description = format!(
        "End a run_python session now and free its sandbox: its state (variables, imports, \
         files in /work) is gone. Returns what it used (cells, CPU, peak memory). Closing \
         one that has already ended says how it ended. {}.\nExample: {{\"session_id\": \
         \"mcp_0123456789abcdef0123456789abcdef\"}}",
        crate::tool::session_lifetime_text()
    );
    Tool::new(CLOSE_TOOL_NAME, description, Arc::new(input))
        .with_title("Close a Python session")
        .with_raw_output_schema(Arc::new(output))
        .with_annotations(
            ToolAnnotations::with_title("Close a Python session")
                .read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::{CellException, SessionHandle};

    fn outcome(status: CellStatus) -> CellOutcome {
        CellOutcome {
            session: SessionHandle(format!("vs_{}", "ab".repeat(32))),
            cell: 2,
            status,
            value: Some("42".into()),
            value_truncated: false,
            wall_ms: 12,
            cpu_ms: 10,
            memory_bytes: 30 << 20,
            peak_memory_bytes: 40 << 20,
            stdout_bytes: 2,
            stderr_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            expires_at_unix_ms: 1_796_256_600_000,
            expires_in_ms: 599_500,
        }
    }

    fn run(o: &CellOutcome) -> CellRun<'_> {
        CellRun {
            id: "mcp_00112233445566778899aabbccddeeff",
            profile: "default",
            opened: false,
            outcome: o,
        }
    }

    fn structured(r: &CallToolResult) -> serde_json::Value {
        r.structured_content.clone().unwrap()
    }

    fn text_json(r: &CallToolResult) -> serde_json::Value {
        let text = r.content[0].as_text().unwrap().text.clone();
        serde_json::from_str(&text).unwrap()
    }

    fn ended(reason: SessionEndReason) -> SessionEnded {
        SessionEnded {
            handle: SessionHandle(format!("vs_{}", "ab".repeat(32))),
            reason,
            detail: String::new(),
            ended_ms_ago: 0,
            cells: 3,
            cpu_ms: 1_200,
            peak_memory_bytes: 40 << 20,
            age_ms: 12_000,
        }
    }

    #[test]
    fn a_cells_result_carries_the_session_its_value_and_its_expiry() {
        let o = outcome(CellStatus::Ok);
        let r = cell_call_result(run(&o), b"hi\n", b"", Budgets::default());
        assert_eq!(r.is_error, Some(false));
        let s = structured(&r);
        assert_eq!(
            s["session"],
            serde_json::json!({
                "session_id": "mcp_00112233445566778899aabbccddeeff",
                "opened": false,
                "cell": 2,
                "value": "42",
                "value_truncated": false,
                "exception": null,
                "state_kept": true,
                "expires_at": "2026-12-03T00:10:00Z",
                "expires_in_seconds": 599,
            })
        );
        assert_eq!(s["reason"], "ok");
        assert_eq!(s["exit_code"], serde_json::Value::Null);
        assert_eq!(s["stdout"]["text"], "hi\n");
        assert_eq!(s["profile"], "default");
        // The text is the same JSON, with no error lead.
        let t = text_json(&r);
        assert!(t.get("error").is_none());
        assert_eq!(t["session"], s["session"]);
    }

    #[test]
    fn an_exception_is_a_tool_error_that_keeps_the_state() {
        let o = outcome(CellStatus::Exception(CellException {
            type_name: "ZeroDivisionError".into(),
            message: "division by zero".into(),
            traceback: "Traceback (most recent call last):\n  File \"<cell 2>\", line 1, in <module>\nZeroDivisionError: division by zero\n".into(),
            traceback_truncated: false,
        }));
        let r = cell_call_result(run(&o), b"", b"", Budgets::default());
        assert_eq!(r.is_error, Some(true));
        let s = structured(&r);
        assert_eq!(s["reason"], "error");
        assert_eq!(s["session"]["exception"]["type"], "ZeroDivisionError");
        assert_eq!(s["session"]["state_kept"], true);
        let t = text_json(&r);
        let why = t["error"].as_str().unwrap();
        assert!(
            why.starts_with("the cell raised ZeroDivisionError: division by zero; the session and its state are kept"),
            "{why}"
        );
        assert!(t["session"]["exception"]["traceback"]
            .as_str()
            .unwrap()
            .starts_with("Traceback"));
    }

    /// An input file the cell loop could not write: the code did not run, and the text
    /// says so (not "what ran before the exception stays done").
    #[test]
    fn an_input_file_error_says_the_code_did_not_run() {
        let mut o = outcome(CellStatus::Exception(CellException {
            type_name: INPUT_FILE_ERROR.into(),
            message: "input file \"d\": a directory is there".into(),
            traceback: "vivarium.InputFileError: input file \"d\": a directory is there (the cell did not run)\n".into(),
            traceback_truncated: false,
        }));
        o.value = None;
        let r = cell_call_result(run(&o), b"", b"", Budgets::default());
        assert_eq!(r.is_error, Some(true));
        let s = structured(&r);
        assert_eq!(s["reason"], "error");
        assert_eq!(s["session"]["exception"]["type"], INPUT_FILE_ERROR);
        assert_eq!(s["session"]["state_kept"], true);
        let why = text_json(&r)["error"].as_str().unwrap().to_string();
        assert!(
            why.starts_with("an input file could not be written, so the cell's code did not run")
                && why.contains("input file \"d\": a directory is there")
                && why.contains("another path")
                && why.contains("state are kept")
                && !why.contains("what ran before"),
            "{why}"
        );
    }

    #[test]
    fn interrupted_cells_say_the_state_is_kept() {
        for (status, reason, limit, needle) in [
            (
                CellStatus::Timeout,
                "timeout",
                Some("wall"),
                "wall-clock limit passed after 12 ms",
            ),
            (
                CellStatus::Interrupted,
                "interrupted",
                None,
                "KeyboardInterrupt",
            ),
            (
                CellStatus::MemoryGuard,
                "memory_guard",
                Some("memory"),
                "memory reached its guard (peak 40M)",
            ),
        ] {
            let o = outcome(status);
            let r = cell_call_result(run(&o), b"", b"", Budgets::default());
            assert_eq!(r.is_error, Some(true), "{reason}");
            let s = structured(&r);
            assert_eq!(s["reason"], reason);
            assert_eq!(s["session"]["state_kept"], true);
            let hit: Vec<String> = serde_json::from_value(s["limits_hit"].clone()).unwrap();
            assert_eq!(hit, limit.into_iter().map(String::from).collect::<Vec<_>>());
            let why = text_json(&r)["error"].as_str().unwrap().to_string();
            assert!(
                why.contains(needle) && why.contains("state are kept"),
                "{why}"
            );
        }
    }

    #[test]
    fn a_session_that_ends_during_its_cell_loses_its_state() {
        let mut o = outcome(CellStatus::SessionEnded(Box::new(ended(
            SessionEndReason::Memory,
        ))));
        o.value = None;
        o.expires_at_unix_ms = 0;
        o.expires_in_ms = 0;
        let r = cell_call_result(run(&o), b"", b"", Budgets::default());
        assert_eq!(r.is_error, Some(true));
        let s = structured(&r);
        assert_eq!(s["reason"], "session_ended");
        assert_eq!(s["session"]["state_kept"], false);
        assert_eq!(s["session"]["expires_at"], serde_json::Value::Null);
        let why = text_json(&r)["error"].as_str().unwrap().to_string();
        assert!(
            why.contains("ran out of memory") && why.contains("state is gone"),
            "{why}"
        );
        assert!(why.contains("session_id: \"new\""), "{why}");
        assert!(!why.contains("vs_"), "{why}");
    }

    #[test]
    fn a_cells_value_traceback_and_output_stay_within_the_budgets() {
        let long = "x".repeat(16 << 10);
        let mut o = outcome(CellStatus::Exception(CellException {
            type_name: "ValueError".into(),
            message: long.clone(),
            traceback: format!("Traceback (most recent call last):\n{long}\nValueError: bad\n"),
            traceback_truncated: false,
        }));
        o.value = Some(long.clone());
        let out = "o\n".repeat(1 << 19);
        let err = "e\n".repeat(1 << 19);
        for text_chars in [1_000, 4_000, 8_000, 20_000] {
            let budgets = Budgets {
                output_chars: 8_000,
                text_chars,
            };
            let r = cell_call_result(run(&o), out.as_bytes(), err.as_bytes(), budgets);
            let text = r.content[0].as_text().unwrap().text.clone();
            assert!(
                text.chars().count() <= text_chars.max(2_000),
                "{text_chars}: {}",
                text.len()
            );
            let t: serde_json::Value = serde_json::from_str(&text).unwrap();
            let tb = t["session"]["exception"]["traceback"].as_str().unwrap();
            assert!(tb.ends_with("ValueError: bad\n"), "{tb}");
            assert_eq!(t["session"]["value_truncated"], true);
            let s = structured(&r);
            assert!(s["session"]["value"].as_str().unwrap().chars().count() <= 8_000);
            assert!(s["stdout"]["text"].as_str().unwrap().chars().count() <= 8_000);
        }
    }

    #[test]
    fn close_arguments_name_one_session() {
        let args = |v: serde_json::Value| parse_close_args(v.as_object().cloned());
        let alias = "mcp_00112233445566778899aabbccddeeff";
        assert_eq!(
            args(serde_json::json!({"session_id": alias})),
            Ok(SessionArg::Alias(alias.into()))
        );
        for (bad, needle) in [
            (serde_json::json!({}), "missing field `session_id`"),
            (serde_json::json!({"session_id": 1}), "must be a string"),
            (serde_json::json!({"session_id": "new"}), "not \"new\""),
            (serde_json::json!({"session_id": "x"}), "must be \"new\""),
            (
                serde_json::json!({"session_id": alias, "force": true}),
                "unknown field `force`",
            ),
        ] {
            let e = args(bad.clone()).unwrap_err();
            assert!(
                e.contains(needle) && e.contains("close_session"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_close_reports_how_the_session_ended() {
        let r = close_call_result("mcp_x", &ended(SessionEndReason::Closed), true);
        assert_eq!(r.is_error, Some(false));
        assert_eq!(
            structured(&r),
            serde_json::json!({"session_id": "mcp_x", "closed_now": true, "reason": "closed",
                "cells": 3, "cpu_ms": 1200, "peak_memory_bytes": 40u64 << 20, "age_ms": 12000})
        );
        let text = r.content[0].as_text().unwrap().text.clone();
        assert!(
            text.starts_with("closed session `mcp_x` (3 cells, 1.2s of CPU"),
            "{text}"
        );
        let r = close_call_result("mcp_x", &ended(SessionEndReason::IdleTimeout), false);
        assert_eq!(structured(&r)["reason"], "idle_timeout");
        let text = r.content[0].as_text().unwrap().text.clone();
        assert!(
            text.contains("nothing to close") && text.contains("idle"),
            "{text}"
        );
        let t = close_tool();
        let out = serde_json::Value::Object((*t.output_schema.unwrap()).clone());
        assert_eq!(
            out["properties"]["reason"]["enum"],
            serde_json::json!(END_REASONS)
        );
        for r in [
            SessionEndReason::Closed,
            SessionEndReason::IdleTimeout,
            SessionEndReason::LinkFailed,
        ] {
            assert!(END_REASONS.contains(&end_reason_name(r)));
        }
        let input = serde_json::Value::Object((*t.input_schema).clone());
        assert_eq!(input["required"], serde_json::json!(["session_id"]));
        assert_eq!(t.annotations.unwrap().destructive_hint, Some(true));
    }

    #[test]
    fn the_list_names_each_session_by_its_id_soonest_first() {
        use vivarium_proto::{SessionInfo, SessionLimits};
        let info = |n: u8, expires_in_ms: u64| SessionInfo {
            handle: SessionHandle(format!("vs_{}", format!("{n:02x}").repeat(32))),
            profile: "default".into(),
            sandbox_id: 1,
            limits: SessionLimits::default(),
            age_ms: 5_000,
            idle_ms: 2_500,
            expires_at_unix_ms: 1_796_256_600_000,
            expires_in_ms,
            expires_by: SessionEndReason::IdleTimeout,
            memory_bytes: 30 << 20,
            peak_memory_bytes: 40 << 20,
            cells: 1,
            cpu_ms: 10,
            running: false,
            packages: vec![],
        };
        let r = list_call_result(&[
            ("mcp_b".into(), info(1, 9_000)),
            ("mcp_a".into(), info(2, 3_000)),
        ]);
        let s = structured(&r);
        assert_eq!(s["sessions"][0]["session_id"], "mcp_a");
        assert_eq!(s["sessions"][0]["expires_by"], "idle_timeout");
        assert_eq!(s["sessions"][1]["expires_in_seconds"], 9);
        let text = r.content[0].as_text().unwrap().text.clone();
        assert!(
            text.starts_with("2 open session(s):\nmcp_a (profile `default`): 1 cell, idle 2 s"),
            "{text}"
        );
        assert!(!text.contains("vs_"), "{text}");
        let empty = list_call_result(&[]);
        assert!(empty.content[0]
            .as_text()
            .unwrap()
            .text
            .contains("no open sessions"));
        assert!(parse_list_args(None).is_ok());
        assert!(
            parse_list_args(serde_json::json!({"x": 1}).as_object().cloned())
                .unwrap_err()
                .contains("unknown field `x`")
        );
        let t = list_tool();
        assert_eq!(t.annotations.unwrap().read_only_hint, Some(true));
        let input = serde_json::Value::Object((*t.input_schema).clone());
        assert_eq!(input["type"], "object");
    }
}
