//! `vivarium-mcp`: an MCP server (stdio) whose tool `run_python` runs Python in the
//! Vivarium sandbox through the daemon's socket, statelessly or in a session; its tools
//! `close_session` and `list_sessions` end a session and list this server's.
//!
//! Each call is one job on its own daemon connection. Cancelling the request
//! (`notifications/cancelled`) or closing stdin closes that connection, which makes the
//! daemon kill the job; the daemon's own deadlines hold when a client never cancels.
//! Nothing but JSON-RPC goes to stdout: logs go to stderr and no child process is spawned.
//!
//! # Sessions
//!
//! A call without `session_id` is a fresh, disposable run: its arguments and its result are
//! exactly as before sessions. With one, the code runs as a cell of a session (a sandbox
//! whose interpreter keeps `__main__`, imports and files between cells; the daemon's
//! `OpenSession`/`ExecCell`):
//!
//! - `session_id: "new"` opens a session on the call's `profile` (its `packages` make the
//!   session's environment) and runs `code` as cell 1.
//! - `session_id: "mcp_..."`, an id from an earlier result, runs `code` in that session;
//!   `profile` may only repeat the session's, and `packages` is refused.
//! - `session_id: "vs_..."`, a daemon handle (`viv session new`), is the explicit handover:
//!   any instance uses it as given, and the daemon checks it belongs to this uid.
//!
//! The result is `run_python`'s with a `session` object: `session_id` (to pass next),
//! `opened`, the cell number, `value` (the repr of the last expression, as IPython's
//! Out[]), `exception` (type, message, traceback), `state_kept`, and `expires_at`
//! (RFC 3339 UTC) / `expires_in_seconds`. `reason` is `ok`, `error` (the cell raised),
//! `timeout` or `interrupted` (KeyboardInterrupt; the state is kept), `memory_guard`
//! (interrupted before the memory limit; the state is kept) or `session_ended` (the state
//! is gone). Anything but `ok` is a tool error (`isError`), as a failing script is
//! without a session; its text leads with why and whether the state survived. `exit_code`
//! is null for a cell. The same output budgets apply; the value and the traceback are cut
//! to `output_chars` in `structuredContent` and to an eighth of `text_chars` in the text.
//!
//! Ids are bound to this server instance (MCP 2026-07-28, "State Handle Hijacking"): the
//! model sees `mcp_` and 128 random bits minted here and kept in memory only, mapped to the
//! daemon's handle, which is never shown. Another instance, even of the same uid, answers
//! "no such session"; a restarted server has forgotten them. When this server's client
//! goes away (stdin EOF) it closes the sessions it opened. An ended session's id is kept
//! (the newest 256) so that a later call gets a typed answer: the session expired, why
//! (idle TTL, lifetime, memory, an unresponsive cell, a daemon restart, ...), that its
//! state is gone, and to start again with `session_id: "new"`.
//!
//! Cancelling a call interrupts its cell; the session survives. `close_session` ends a
//! session and reports how it ended (cells, CPU, peak memory, age); closing one that had
//! ended already is no error and says how it ended. `list_sessions` lists the open
//! sessions this instance opened or was handed (id, profile, cells, idle time, expiry),
//! for a model that lost track of an id. The tool description states the idle
//! TTL and the lifetime as the daemon's defaults (10 minutes and 1 hour): the daemon's
//! profile list does not carry a profile's `[session]` limits, and each result states its
//! own session's expiry.
//!
//! # Input files
//!
//! `files` (text or base64) go with the job or the cell, checked and decoded first by
//! [`files::decode`]: see that module and docs/mcp.md, "Input files".
//!
//! # Artifacts
//!
//! What a job or cell leaves under /work/out (and the matplotlib figures it showed or left
//! open) comes back in its result ([`artifacts`]): images as image content fitted to the
//! image budget ([`images`]: long side 1568 px, 1.15 MP, 8 images, 600 KiB), each after a
//! caption naming its path; small text files inlined; resource links; and
//! `structuredContent.artifacts` listing every file and what was skipped. The text stays
//! within `--text-chars` and the whole result under 1 MB. [`resources`] keeps the files
//! in memory for `resources/read` for `--artifact-ttl` (1 hour), at most
//! `--artifact-store-mib` (256 MiB, oldest evicted first), under URIs bound to this
//! instance (`vivarium-artifact://<128 random bits>/<n>/<path>`).
#![forbid(unsafe_code)]

pub mod artifacts;
pub mod audit;
pub mod cell;
pub mod excerpt;
pub mod files;
pub mod http;
pub mod images;
pub mod limiter;
pub mod lines;
pub mod principal;
pub mod resources;
pub mod server;
pub mod session;
pub mod tasks;
pub mod tenants;
pub mod tool;

use std::path::PathBuf;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

pub use server::VivariumServer;

/// Settings of one server instance.
#[derive(Debug, Clone)]
pub struct Config {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// `run_python` calls admitted in any 60 s window (0: unlimited).
    pub max_calls_per_minute: u32,
    /// `run_python` calls running at once.
    pub max_concurrent_jobs: usize,
    /// Calls that may wait for a job slot; past them a call is refused.
    pub max_queued_calls: usize,
    /// How long a call may wait in the queue.
    pub queue_timeout: Duration,
    /// Characters of output a result carries: per stream in `structuredContent`, and in
    /// all of its text content.
    pub budgets: tool::Budgets,
    /// The profile used when a call names none.
    pub default_profile: String,
    /// How often progress notifications go out while a job runs.
    pub progress_interval: Duration,
    /// How often the daemon's profiles are asked for again (a reload changes the tool).
    pub profile_refresh: Duration,
    /// How long `resources/read` serves a result's artifacts.
    pub artifact_ttl: Duration,
    /// Bytes of artifacts kept for `resources/read` at most (the oldest are evicted).
    pub artifact_store_bytes: u64,
}

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP session could not start")]
    Start(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the MCP service task failed")]
    Join(#[from] tokio::task::JoinError),
}

/// Serve MCP on stdin/stdout until stdin closes. On stdin EOF every in-flight job is
/// killed at once (rmcp alone would wait up to 5 s for in-flight handlers to answer).
pub async fn serve_stdio(config: Config) -> Result<(), ServeError> {
    let profiles = match server::load_profiles(&config.socket, Duration::from_secs(2)).await {
        Ok(profiles) => Some(profiles),
        Err(e) => {
            server::no_profiles_log(&config.socket, e.as_ref());
            None
        }
    };
    let (eof_tx, eof_rx) = watch::channel(false);
    let refresh_every = config.profile_refresh;
    let server = VivariumServer::new(config, profiles, eof_rx.clone());
    let refresher = server.clone();
    let closer = server.clone();
    let stdin = EofSignal {
        inner: lines::LineGuard::new(tokio::io::stdin(), lines::MAX_LINE_BYTES),
        eof: eof_tx,
    };
    let service = match server.serve((stdin, tokio::io::stdout())).await {
        Ok(service) => service,
        // EOF before `initialize`: a probe, or a 2026-07-28 client that only asked
        // `server/discover`. Nothing went wrong.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(during)) => {
            tracing::info!(during, "the client closed the connection without a session");
            return Ok(());
        }
        Err(e) => return Err(ServeError::Start(Box::new(e))),
    };
    // A daemon reload changes the profiles: look again now and then, and tell the client.
    let peer = service.peer().clone();
    let refresh = tokio::spawn(async move {
        let mut ticker = tokio::time::interval(refresh_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            refresher.refresh_profiles(Some(&peer)).await;
        }
    });
    let _refresh = AbortOnDrop(refresh);
    let mut eof = eof_rx;
    let waiting = service.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        reason = &mut waiting => {
            tracing::info!(reason = ?reason?, "MCP session ended");
        }
        () = crate::until_eof(&mut eof) => {
            // Handlers saw the same signal and are killing their jobs; give their answers
            // a moment to drain, then stop regardless.
            match tokio::time::timeout(Duration::from_millis(500), &mut waiting).await {
                Ok(reason) => tracing::info!(reason = ?reason?, "MCP session ended on stdin EOF"),
                Err(_) => tracing::warn!("stdin closed; stopping without waiting for rmcp's drain"),
            }
        }
    }
    // Nobody else knows this instance's session ids: end its sessions now rather than
    // leave them to their idle TTL.
    closer.close_owned_sessions().await;
    Ok(())
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves once `eof` is true (or its sender is gone).
pub(crate) async fn until_eof(eof: &mut watch::Receiver<bool>) {
    let _ = eof.wait_for(|&e| e).await.map(|_| ());
}

/// Stdin that flips `eof` to true when a read reports end-of-file.
struct EofSignal<R> {
    inner: R,
    eof: watch::Sender<bool>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = result {
            if buf.filled().len() == before && buf.remaining() > 0 {
                self.eof.send_replace(true);
            }
        }
        result
    }
}
