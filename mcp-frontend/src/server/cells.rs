//! `run_python` with a `session_id`, and `close_session`: each call one daemon
//! connection, as a job's. The session outlives the connection (and the call); this
//! server's [`Registry`] maps the ids it minted to the daemon's handles.

use std::time::Duration;

use rmcp::model::CallToolResult;
use tracing::{debug, info, warn};
use vivarium_client::{Cell, CellEvent, CellStatus, ClientError, SessionSpec, Stream};
use vivarium_proto::ErrorCode;

use super::{job_error_text, last_line, Progress, VivariumServer};
use crate::cell::{self, CellRun};
use crate::session::{self, Registry, Resolved, SessionArg, Unusable};
use crate::tenants::Tenant;
use crate::tool::{self, RunPythonArgs};

/// How long closing this instance's sessions may take when its client goes away.
const CLOSE_ALL_TIMEOUT: Duration = Duration::from_millis(1_000);

impl VivariumServer {
    /// Run `args.code` as a cell of the session `arg` names (opening it first for
    /// `"new"`).
    pub(super) async fn run_cell(
        &self,
        tenant: &Tenant,
        args: RunPythonArgs,
        arg: SessionArg,
        call: &super::Call,
        mut progress: Option<Progress>,
    ) -> CallToolResult {
        let config = &self.inner.config;
        let sessions = &tenant.sessions;
        let target = match sessions.resolve(&arg) {
            Ok(target) => target,
            Err(unusable) => {
                if let Unusable::Unknown(id) = &unusable {
                    info!(session = %id, "a session id this server does not know");
                }
                return self.tool_error(unusable.text());
            }
        };
        if let (
            Resolved::Existing {
                id,
                profile: Some(p),
                ..
            },
            Some(asked),
        ) = (&target, &args.profile)
        {
            if asked != p {
                return self.tool_error(format!(
                    "session `{id}` runs on profile `{p}`; `profile` cannot change that. Omit \
                     `profile`, or open a session on `{asked}` with `session_id: \"new\"`. \
                     Nothing ran."
                ));
            }
        }
        let mut client = match self.connect().await {
            Ok(client) => client,
            Err(result) => return result,
        };
        let (id, handle, profile, opened) = match target {
            Resolved::New => {
                if sessions.room_to_open(None).is_err() {
                    // Full as far as this server saw: ask the daemon which are still open.
                    let listed = client.list_sessions().await.ok();
                    let open: Option<Vec<_>> =
                        listed.map(|l| l.into_iter().map(|s| s.handle).collect());
                    if let Err(text) = sessions.room_to_open(open.as_deref()) {
                        return self.tool_error(text);
                    }
                }
                let profile = args
                    .profile
                    .clone()
                    .unwrap_or_else(|| config.default_profile.clone());
                let mut spec = SessionSpec::new().profile(profile.clone());
                spec.packages = args.packages.clone().unwrap_or_default();
                // Opening may install packages (seconds): a cancel or the client going
                // away stops waiting (a session the daemon opens meanwhile ends at its
                // idle TTL).
                let mut eof = self.inner.eof.clone();
                let opened = tokio::select! {
                    biased;
                    () = call.ct.cancelled() => {
                        return self.tool_error("cancelled while the session was opening: no cell ran".into());
                    }
                    () = crate::until_eof(&mut eof) => {
                        return self.tool_error("the MCP client went away while the session was opening".into());
                    }
                    opened = client.open_session(&spec) => opened,
                };
                match opened {
                    Ok(opened) => {
                        let info = opened.info;
                        let alias = sessions.opened(info.handle.clone(), info.profile.clone());
                        info!(session = %alias, profile = info.profile, "session opened");
                        (alias, info.handle, info.profile, true)
                    }
                    Err(e) => return self.tool_error(self.open_error_text(&profile, &e)),
                }
            }
            Resolved::Existing {
                id,
                handle,
                profile,
            } => {
                let profile = match profile {
                    Some(p) => p,
                    // A handed-over handle: its profile from the daemon, once.
                    None => match client.list_sessions().await {
                        Ok(list) => match list.into_iter().find(|s| s.handle == handle) {
                            Some(found) => {
                                sessions.adopt(&handle, found.profile.clone());
                                found.profile
                            }
                            None => String::new(),
                        },
                        Err(e) => {
                            debug!(error = %e, "no session list from the daemon");
                            String::new()
                        }
                    },
                };
                (id, handle, profile, false)
            }
        };
        let mut cell = Cell::new(handle, args.code);
        cell.files = args.input_files;
        if let Some(t) = args.timeout_seconds {
            cell = cell.wall_ms(tool::timeout_ms(t));
        }
        let stdin = args.stdin.map(String::into_bytes);
        let mut running = match client.exec_cell(&cell, stdin.as_deref()).await {
            Ok(running) => running,
            Err(e) => return self.tool_error(self.session_error_text(sessions, &id, opened, e)),
        };
        let interrupter = running.interrupter();
        let mut ticker = tokio::time::interval(config.progress_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        ticker.tick().await; // the first tick is immediate
        let mut eof = self.inner.eof.clone();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut latest_line = String::new();
        let kept = format!("the session `{id}` and its state are kept");
        let mut collected = crate::artifacts::Collected::default();
        let outcome = loop {
            tokio::select! {
                biased;
                () = call.ct.cancelled() => {
                    // Interrupt, then close the connection: either alone interrupts the
                    // cell; the session lives on.
                    let _ = tokio::time::timeout(Duration::from_millis(200), interrupter.cancel()).await;
                    drop(running);
                    info!(session = %id, "request cancelled; cell interrupted");
                    return self.tool_error(format!("cancelled: the cell was interrupted (KeyboardInterrupt); {kept}"));
                }
                () = crate::until_eof(&mut eof) => {
                    drop(running);
                    info!(session = %id, "stdin closed; cell interrupted");
                    return self.tool_error("the MCP client went away: the cell was interrupted".into());
                }
                event = running.next_event() => match event {
                    Ok(Some(CellEvent::Output(stream, bytes))) => {
                        if let Some(line) = last_line(&bytes) {
                            latest_line = line;
                        }
                        match stream {
                            Stream::Stdout => stdout.extend_from_slice(&bytes),
                            Stream::Stderr => stderr.extend_from_slice(&bytes),
                        }
                    }
                    Ok(Some(CellEvent::Finished(outcome))) => break *outcome,
                    Ok(Some(CellEvent::Artifact(a))) => collected.artifacts.push(*a),
                    Ok(Some(CellEvent::Artifacts(r))) => collected.report = Some(*r),
                    Ok(None) => return self.tool_error(format!(
                        "the Vivarium daemon closed the connection before the cell's outcome (it \
                         stopped or restarted); the cell's end was not reported. A call with \
                         session_id `{id}` says whether the session is still there"
                    )),
                    Err(e) => return self.tool_error(self.session_error_text(sessions, &id, opened, e)),
                },
                _ = ticker.tick(), if progress.is_some() => {
                    if let Some(p) = progress.as_mut() {
                        p.send(&latest_line).await;
                    }
                }
            }
        };
        let status = cell::cell_reason(&outcome.status);
        info!(session = %id, cell = outcome.cell, status, "cell finished");
        if let CellStatus::SessionEnded(ended) = &outcome.status {
            sessions.ended(&id, (**ended).clone());
        }
        let prepared = crate::artifacts::prepare(
            collected,
            self.inner.artifacts.clone(),
            tenant.key.clone(),
            config.budgets.text_chars,
        )
        .await;
        let call = cell::cell_call_result(
            CellRun {
                id: &id,
                profile: &profile,
                opened,
                outcome: &outcome,
            },
            &stdout,
            &stderr,
            crate::artifacts::json_budgets(config.budgets, prepared.as_ref()),
        );
        crate::artifacts::attach(call, prepared)
    }

    /// `close_session`: end the session `arg` names, and say how it ended.
    pub(super) async fn close(&self, tenant: &Tenant, arg: SessionArg) -> CallToolResult {
        let sessions = &tenant.sessions;
        let (id, handle) = match sessions.resolve(&arg) {
            Ok(Resolved::Existing { id, handle, .. }) => (id, handle),
            Ok(Resolved::New) => return self.tool_error("nothing to close: \"new\"".into()),
            Err(Unusable::Ended(id, ended)) => return cell::close_call_result(&id, &ended, false),
            Err(unknown) => return self.tool_error(unknown.text()),
        };
        let mut client = match self.connect().await {
            Ok(client) => client,
            Err(result) => return result,
        };
        match client.close_session(&handle).await {
            Ok(ended) => {
                info!(session = %id, cells = ended.cells, "session closed");
                sessions.ended(&id, ended.clone());
                cell::close_call_result(&id, &ended, true)
            }
            Err(ClientError::SessionExpired(ended)) => {
                sessions.ended(&id, (*ended).clone());
                cell::close_call_result(&id, &ended, false)
            }
            Err(e) => self.tool_error(self.session_error_text(sessions, &id, false, e)),
        }
    }

    /// `list_sessions`: the open sessions this instance knows, as the daemon sees them.
    pub(super) async fn list(&self, tenant: &Tenant) -> CallToolResult {
        let known = tenant.sessions.known_open();
        if known.is_empty() {
            return cell::list_call_result(&[]);
        }
        let mut client = match self.connect().await {
            Ok(client) => client,
            Err(result) => return result,
        };
        let listed = match client.list_sessions().await {
            Ok(listed) => listed,
            Err(e) => return self.tool_error(job_error_text(&e)),
        };
        let found: Vec<(String, vivarium_client::SessionInfo)> = known
            .into_iter()
            .filter_map(|(id, handle)| {
                let info = listed.iter().find(|s| s.handle == handle)?;
                Some((id, info.clone()))
            })
            .collect();
        cell::list_call_result(&found)
    }

    /// Close the sessions this instance opened (its client has gone: nobody else knows
    /// their ids), within a second. Handed-over sessions are left alone.
    pub async fn close_owned_sessions(&self) {
        let open: Vec<(
            std::sync::Arc<Tenant>,
            String,
            vivarium_client::SessionHandle,
        )> = self
            .inner
            .tenants
            .all()
            .into_iter()
            .flat_map(|t| {
                t.sessions
                    .owned_open()
                    .into_iter()
                    .map(move |(id, h)| (t.clone(), id, h))
                    .collect::<Vec<_>>()
            })
            .collect();
        if open.is_empty() {
            return;
        }
        let close = async {
            let mut client = self.connect().await.ok()?;
            for (tenant, id, handle) in &open {
                match client.close_session(handle).await {
                    Ok(ended) => tenant.sessions.ended(id, ended),
                    Err(e) => debug!(session = %id, error = %e, "session not closed"),
                }
            }
            Some(())
        };
        match tokio::time::timeout(CLOSE_ALL_TIMEOUT, close).await {
            Ok(Some(())) => info!(sessions = open.len(), "closed this server's sessions"),
            _ => warn!(
                sessions = open.len(),
                "could not close this server's sessions; they end at their idle TTL"
            ),
        }
    }

    /// The tool error for a session request the daemon refused, or one that failed.
    /// `opened`: this call opened the session, so its id must reach the model anyway.
    fn session_error_text(
        &self,
        sessions: &Registry,
        id: &str,
        opened: bool,
        e: ClientError,
    ) -> String {
        let still_open = if opened {
            format!(
                " The session `{id}` was opened and stays open: pass it as session_id to \
                 continue."
            )
        } else {
            String::new()
        };
        match e {
            ClientError::SessionExpired(ended) => {
                info!(session = %id, reason = cell::end_reason_name(ended.reason), "session has ended");
                sessions.ended(id, (*ended).clone());
                session::expired_text(id, &ended)
            }
            ClientError::Refused(w) => match w.code {
                ErrorCode::SessionNotFound if id.starts_with(session::DAEMON_PREFIX) => {
                    session::unknown_handle_text(id, &w.message)
                }
                ErrorCode::SessionNotFound => {
                    sessions.forget(id);
                    format!(
                        "session `{id}` is gone: the daemon no longer knows it (it restarted, or \
                         the session ended long ago), so its state is gone. Nothing ran. {}",
                        session::START_AGAIN
                    )
                }
                ErrorCode::SessionBusy => format!(
                    "session `{id}` is running another cell (one cell at a time per session): \
                     wait for that call to finish, or cancel it. Nothing ran."
                ),
                ErrorCode::LimitOutOfRange => format!(
                    "invalid timeout_seconds: {} (a cell's limit is at most its session's cell \
                     wall limit).{still_open}",
                    w.message
                ),
                _ => format!("{}{still_open}", job_error_text(&ClientError::Refused(w))),
            },
            ClientError::SessionsUnsupported { version } => unsupported_text(version),
            other => format!("{}{still_open}", job_error_text(&other)),
        }
    }

    /// The tool error for a session that could not be opened on `profile`.
    fn open_error_text(&self, profile: &str, e: &ClientError) -> String {
        match e {
            ClientError::Refused(w) if w.code == ErrorCode::SessionsDisabled => format!(
                "profile `{profile}` does not serve sessions ({}): omit session_id for a \
                 stateless run, or open the session on another profile",
                w.message
            ),
            ClientError::Refused(w)
                if matches!(
                    w.code,
                    ErrorCode::UnknownProfile | ErrorCode::ProfileDisabled
                ) =>
            {
                format!(
                    "{} Profiles now: {}.",
                    job_error_text(e),
                    self.usable_profile_names().join(", ")
                )
            }
            ClientError::SessionsUnsupported { version } => unsupported_text(*version),
            ClientError::Refused(w) => format!(
                "the session could not be opened ({:?}): {}",
                w.code, w.message
            ),
            other => format!("the session could not be opened: {}", job_error_text(other)),
        }
    }
}

/// The tool error for a daemon older than sessions.
fn unsupported_text(version: u32) -> String {
    format!(
        "this Vivarium daemon speaks protocol {version}, which has no sessions (they need {}): \
         upgrade vivariumd, or omit session_id",
        vivarium_client::SESSION_PROTOCOL
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use vivarium_proto::{SessionEndReason, SessionEnded, SessionHandle, WireError};

    fn server() -> VivariumServer {
        let config = Config {
            socket: "/nonexistent/vivariumd.sock".into(),
            max_calls_per_minute: 0,
            max_concurrent_jobs: 1,
            max_queued_calls: 1,
            queue_timeout: Duration::from_secs(1),
            budgets: tool::Budgets::default(),
            default_profile: "default".into(),
            progress_interval: Duration::from_secs(1),
            profile_refresh: Duration::from_secs(10),
            artifact_ttl: Duration::from_secs(3600),
            artifact_store_bytes: 1 << 20,
        };
        let (_tx, rx) = tokio::sync::watch::channel(false);
        VivariumServer::new(config, None, rx)
    }

    fn handle() -> SessionHandle {
        SessionHandle(format!("vs_{}", "cd".repeat(32)))
    }

    fn refused(code: ErrorCode) -> ClientError {
        ClientError::Refused(WireError {
            code,
            message: "the daemon's words".into(),
        })
    }

    #[test]
    fn an_expiry_from_the_daemon_is_remembered_and_typed() {
        let s = server();
        let alias = s.local().sessions.opened(handle(), "default".into());
        let ended = SessionEnded {
            handle: handle(),
            reason: SessionEndReason::Lifetime,
            detail: String::new(),
            ended_ms_ago: 0,
            cells: 9,
            cpu_ms: 100,
            peak_memory_bytes: 1 << 20,
            age_ms: 3_600_000,
        };
        let text = s.session_error_text(
            &s.local().sessions,
            &alias,
            false,
            ClientError::SessionExpired(Box::new(ended)),
        );
        assert!(
            text.starts_with(&format!(
                "session `{alias}` has expired: it ended because it reached the end of its lifetime"
            )),
            "{text}"
        );
        assert!(!text.contains("vs_"), "{text}");
        // The next call is answered here, the same way, without the daemon.
        let again = s
            .local()
            .sessions
            .resolve(&SessionArg::Alias(alias.clone()))
            .unwrap_err();
        assert!(matches!(again, Unusable::Ended(..)), "{again:?}");
        assert!(s.local().sessions.owned_open().is_empty());
    }

    #[test]
    fn refusals_about_a_session_say_what_to_do() {
        let s = server();
        let alias = s.local().sessions.opened(handle(), "default".into());
        let busy = s.session_error_text(
            &s.local().sessions,
            &alias,
            false,
            refused(ErrorCode::SessionBusy),
        );
        assert!(
            busy.contains("one cell at a time") && busy.contains("Nothing ran"),
            "{busy}"
        );
        // A handed-over handle the daemon does not know for this uid.
        let text = s.session_error_text(
            &s.local().sessions,
            &handle().0,
            false,
            refused(ErrorCode::SessionNotFound),
        );
        assert!(
            text.starts_with("no such session `vs_") && text.contains("the daemon's words"),
            "{text}"
        );
        // An alias whose session the daemon lost: gone, and forgotten here.
        let gone = s.session_error_text(
            &s.local().sessions,
            &alias,
            false,
            refused(ErrorCode::SessionNotFound),
        );
        assert!(
            gone.contains("is gone") && gone.contains("session_id: \"new\""),
            "{gone}"
        );
        assert!(s.local().sessions.get(&alias).is_none());
        let old = s.session_error_text(
            &s.local().sessions,
            "mcp_x",
            false,
            ClientError::SessionsUnsupported { version: 5 },
        );
        assert!(
            old.contains("protocol 5") && old.contains("upgrade vivariumd"),
            "{old}"
        );
        // A session this call opened: its id reaches the model with any other failure.
        let other = s.session_error_text(
            &s.local().sessions,
            "mcp_y",
            true,
            ClientError::Disconnected,
        );
        assert!(
            other.contains("`mcp_y` was opened and stays open"),
            "{other}"
        );
        let disabled = s.open_error_text("p", &refused(ErrorCode::SessionsDisabled));
        assert!(
            disabled.contains("profile `p` does not serve sessions"),
            "{disabled}"
        );
    }
}
