//! `viv session new|ls|close`: open a session (its handle on stdout), list the caller's
//! sessions, end one.

use std::path::Path;

use serde::Serialize;
use vivarium_client::proto::{SandboxStart, SessionEndReason, SessionHandle, SessionInfo};
use vivarium_client::{
    describe_end, format_bytes, format_duration, format_ms, Client, SessionSpec,
};

use super::run::{print_json, report_failure, Failure};
use super::{SessionCommand, SessionOpts};

/// What `viv session new --json` prints: the session's info and how its sandbox was made.
#[derive(Debug, Serialize)]
struct JsonOpened<'a> {
    #[serde(flatten)]
    info: &'a SessionInfo,
    sandbox: SandboxStart,
}

pub(crate) async fn session(socket: &Path, command: SessionCommand) -> i32 {
    let json = match &command {
        SessionCommand::New { json, .. }
        | SessionCommand::Ls { json }
        | SessionCommand::Close { json, .. } => *json,
    };
    match session_inner(socket, command).await {
        Ok(code) => code,
        Err(failure) => report_failure(&failure, json),
    }
}

async fn session_inner(socket: &Path, command: SessionCommand) -> Result<i32, Failure> {
    let mut client = Client::connect(socket).await?;
    match command {
        SessionCommand::New { opts, json } => {
            let opened = client.open_session(&opts.spec()).await?;
            if json {
                print_json(&JsonOpened {
                    info: &opened.info,
                    sandbox: opened.sandbox,
                });
            } else {
                println!("{}", opened.info.handle);
                eprintln!("viv: {}", opened_line(&opened.info));
            }
        }
        SessionCommand::Ls { json } => {
            let sessions = client.list_sessions().await?;
            if json {
                print_json(&sessions);
            } else {
                print!("{}", table(&sessions));
            }
        }
        SessionCommand::Close { handle, json } => {
            let ended = client.close_session(&SessionHandle(handle)).await?;
            if json {
                print_json(&ended);
            } else {
                println!("{}", describe_end(&ended));
            }
        }
    }
    Ok(0)
}

impl SessionOpts {
    /// The session these options ask for.
    pub(crate) fn spec(&self) -> SessionSpec {
        let mut spec = SessionSpec::new().profile(self.profile.clone());
        spec.packages = self.with.clone();
        let l = &mut spec.limits;
        l.idle_ttl_ms = self.ttl;
        l.lifetime_ms = self.lifetime;
        l.cell_wall_ms = self.cell_timeout;
        l.cpu_ms = self.limits.cpu;
        l.memory_bytes = self.limits.memory;
        l.pids = self.limits.pids;
        l.output_bytes = self.limits.output;
        spec
    }
}

/// `session vs_.. open (profile default): ends after 10m00s idle or at 1h00m of age`.
pub(crate) fn opened_line(info: &SessionInfo) -> String {
    format!(
        "session {} open (profile {}): ends after {} idle, or {} after it opened",
        info.handle,
        info.profile,
        format_duration(info.limits.idle_ttl_ms),
        format_duration(info.limits.lifetime_ms)
    )
}

/// The `viv session ls` table: one row per session, columns padded to fit.
fn table(sessions: &[SessionInfo]) -> String {
    let header = [
        "HANDLE",
        "PROFILE",
        "AGE",
        "IDLE",
        "EXPIRES IN",
        "MEMORY",
        "CELLS",
        "CPU",
    ];
    let rows: Vec<[String; 8]> = sessions
        .iter()
        .map(|s| {
            [
                s.handle.to_string(),
                s.profile.clone(),
                format_duration(s.age_ms),
                if s.running {
                    "running".into()
                } else {
                    format_duration(s.idle_ms)
                },
                format!(
                    "{} ({})",
                    format_duration(s.expires_in_ms),
                    match s.expires_by {
                        SessionEndReason::Lifetime => "lifetime",
                        _ => "idle",
                    }
                ),
                format!(
                    "{}/{}",
                    format_bytes(s.memory_bytes),
                    format_bytes(s.peak_memory_bytes)
                ),
                s.cells.to_string(),
                format_ms(s.cpu_ms),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
    out
}
