//! `vivarium-mcp`: an MCP server (stdio) with one tool, `run_python`, that runs Python in
//! the Vivarium sandbox through the daemon's socket.
//!
//! Each call is one job on its own daemon connection. Cancelling the request
//! (`notifications/cancelled`) or closing stdin closes that connection, which makes the
//! daemon kill the job; the daemon's own deadlines hold when a client never cancels.
//! Nothing but JSON-RPC goes to stdout: logs go to stderr and no child process is spawned.
#![forbid(unsafe_code)]

pub mod excerpt;
pub mod limiter;
pub mod lines;
pub mod server;
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
