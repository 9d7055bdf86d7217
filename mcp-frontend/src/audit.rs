//! The audit log of the HTTP frontend: one JSON line per call (tools/call,
//! resources/read, tasks) and per refused request (401/403/429...), saying who (the
//! principal, its OAuth client, the peer address), what (tool, profile, session, job id)
//! and how it ended, never the token, never the output, and the code only when
//! configured. Written to a file (appended, created 0600) or to stderr, each line
//! prefixed `audit: `, whatever the log filter.

use std::cell::RefCell;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::principal::Principal;

/// Where audit records go.
pub struct Audit {
    file: Option<Mutex<std::fs::File>>,
    /// Whether a call's code is recorded.
    pub code: bool,
}

/// One record. Absent fields are left out of the line.
#[derive(Debug, Default, Serialize)]
pub struct Record {
    /// RFC 3339 UTC, milliseconds.
    pub time: String,
    /// `tools/call`, `resources/read`, `tasks/get`, ..., or `refused` (the request never
    /// reached a handler).
    pub event: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The run's `reason` (ok, error, timeout, ...), `tool_error`, `protocol_error`, or for
    /// a refusal its HTTP status and error (`401 invalid_token`).
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

impl Audit {
    /// Records to `file` (appended; created 0600), or to the log when `None`.
    pub fn open(file: Option<&Path>, code: bool) -> std::io::Result<Audit> {
        let file = match file {
            Some(path) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(path)?,
            )),
            None => None,
        };
        Ok(Audit { file, code })
    }

    /// Write `record` (its time filled in), one line.
    pub fn write(&self, mut record: Record) {
        record.time = now_rfc3339_ms();
        let mut line = match serde_json::to_vec(&record) {
            Ok(line) => line,
            Err(e) => {
                tracing::error!(error = %e, "audit record not serialisable");
                return;
            }
        };
        match &self.file {
            Some(file) => {
                line.push(b'\n');
                let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
                // One write of a whole line on an O_APPEND file: lines never interleave.
                if let Err(e) = file.write_all(&line) {
                    tracing::error!(error = %e, "audit log write failed");
                }
            }
            None => {
                // Straight to stderr, whatever the log filter: an audit record is never
                // filtered out.
                let mut text = b"audit: ".to_vec();
                text.extend_from_slice(&line);
                text.push(b'\n');
                let _ = std::io::stderr().lock().write_all(&text);
            }
        }
    }
}

impl Record {
    /// A record of `event` by `principal`.
    pub fn by(event: &str, principal: &Principal) -> Record {
        Record {
            event: event.into(),
            iss: Some(principal.key.issuer().into()),
            sub: Some(principal.key.subject().into()),
            client_id: principal.client_id.clone(),
            ..Record::default()
        }
    }
}

fn now_rfc3339_ms() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ms = now.as_millis() as u64;
    let base = crate::session::rfc3339_utc(ms);
    // "...:SSZ" -> "...:SS.mmmZ"
    format!("{}.{:03}Z", base.trim_end_matches('Z'), ms % 1000)
}

tokio::task_local! {
    /// What a call's handler learnt for its audit record (the job id, the session).
    static NOTE: RefCell<CallNote>;
}

/// What the handler of one call noted for the audit record.
#[derive(Debug, Default, Clone)]
pub struct CallNote {
    pub job_id: Option<u64>,
    pub session: Option<String>,
    pub profile: Option<String>,
}

/// Run `fut` with a fresh note; the note as it ended, with the output.
pub async fn noting<F: std::future::Future>(fut: F) -> (F::Output, CallNote) {
    NOTE.scope(RefCell::new(CallNote::default()), async move {
        let out = fut.await;
        let note = NOTE.with(|n| n.borrow().clone());
        (out, note)
    })
    .await
}

/// Note something of the running call (nothing outside [`noting`]).
pub fn note(f: impl FnOnce(&mut CallNote)) {
    let _ = NOTE.try_with(|n| f(&mut n.borrow_mut()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_are_whole_json_lines_without_empty_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = Audit::open(Some(&path), false).unwrap();
        let principal = Principal {
            key: crate::principal::PrincipalKey::new("https://as", "alice"),
            client_id: Some("cli".into()),
            scopes: Default::default(),
        };
        let ((), noted) = noting(async {
            note(|n| n.job_id = Some(7));
        })
        .await;
        let mut r = Record::by("tools/call", &principal);
        r.tool = Some("run_python".into());
        r.job_id = noted.job_id;
        r.outcome = "ok".into();
        audit.write(r);
        audit.write(Record {
            event: "refused".into(),
            outcome: "401 invalid_token".into(),
            ..Record::default()
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["sub"], "alice");
        assert_eq!(lines[0]["job_id"], 7);
        assert!(lines[0].get("code").is_none());
        assert!(lines[1].get("iss").is_none());
        assert!(lines[0]["time"].as_str().unwrap().ends_with('Z'));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // Outside a call, a note is dropped, not a panic.
        note(|n| n.job_id = Some(1));
    }
}
