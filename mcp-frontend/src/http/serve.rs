//! `vivarium-mcp --http`: put the pieces together and serve until SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use tracing::{info, warn};

use super::config::HttpConfig;
use super::listen::{self, ConnLimits, Listener};
use super::router::{self, Access};
use super::tls::TlsReloader;
use super::token::TokenValidator;
use crate::audit::Audit;
use crate::server::{self, HttpServing, Transport, VivariumServer};
use crate::Config;

/// Why the HTTP server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum HttpServeError {
    #[error("opening the audit log")]
    Audit(#[source] std::io::Error),
    #[error("setting up token validation")]
    Token(#[source] super::token::TokenSetupError),
    #[error("loading the TLS certificate and key")]
    Tls(#[source] super::tls::TlsError),
    #[error("listening on {listen}")]
    Bind {
        listen: String,
        #[source]
        source: std::io::Error,
    },
    #[error("serving")]
    Serve(#[source] std::io::Error),
    #[error("installing signal handlers")]
    Signals(#[source] std::io::Error),
}

/// Serve MCP over Streamable HTTP with `http`'s settings until SIGTERM or SIGINT.
pub async fn serve_http(config: Config, http: HttpConfig) -> Result<(), HttpServeError> {
    let audit = Arc::new(
        Audit::open(http.audit.file.as_deref(), http.audit.code).map_err(HttpServeError::Audit)?,
    );
    let access = match &http.auth {
        Some(auth) => Access::Tokens(Arc::new(
            TokenValidator::new(auth, &http.resource)
                .await
                .map_err(HttpServeError::Token)?,
        )),
        None => {
            warn!(
                listen = %http.listen,
                "serving WITHOUT AUTHORIZATION (insecure_no_auth): anyone who can connect to \
                 {} runs code as this server's user; allowed on loopback or a Unix socket only",
                http.listen
            );
            Access::Anonymous
        }
    };
    let tls = match &http.tls {
        Some(files) => Some(Arc::new(
            TlsReloader::load(files).map_err(HttpServeError::Tls)?,
        )),
        None => None,
    };
    let listener = Listener::bind(&http.listen).map_err(|source| HttpServeError::Bind {
        listen: http.listen.to_string(),
        source,
    })?;
    let bound = listener
        .local_addr()
        .map_or_else(|_| http.listen.to_string(), |l| l.to_string());

    let profiles = match server::load_profiles(&config.socket, Duration::from_secs(2)).await {
        Ok(profiles) => Some(profiles),
        Err(e) => {
            server::no_profiles_log(&config.socket, e.as_ref());
            None
        }
    };
    // Set at shutdown: every running job is killed.
    let (stopping_tx, stopping) = watch::channel(false);
    let refresh_every = config.profile_refresh;
    let serving = Arc::new(HttpServing {
        scopes: http.auth.as_ref().map(|_| http.scopes.clone()),
        limits: http.limits,
        allow_daemon_handles: http.allow_daemon_handles,
        audit: audit.clone(),
        tasks: http.tasks,
    });
    let server = VivariumServer::with_transport(
        config,
        profiles,
        stopping.clone(),
        Transport::Http(serving),
    );
    let mut rmcp_config = StreamableHttpServerConfig::default()
        // Every request on its own (2026-07-28 is stateless; older revisions are served
        // the same way, without protocol sessions: state lives in explicit session ids).
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(http.max_body_bytes)
        // The router checks Host (and a trusted proxy's forwarded host) before this.
        .disable_allowed_hosts();
    if !http.allowed_origins.is_empty() {
        rmcp_config = rmcp_config.with_allowed_origins(http.allowed_origins.clone());
    }
    let stop_rmcp = rmcp_config.cancellation_token.clone();
    let factory = server.clone();
    let mcp = StreamableHttpService::new(
        move || Ok(factory.clone()),
        Arc::new(NeverSessionManager::default()),
        rmcp_config,
    );
    let app = router::router(&http, access, audit, mcp);

    let mut terminate = signal(SignalKind::terminate()).map_err(HttpServeError::Signals)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(HttpServeError::Signals)?;
    // SIGHUP reloads the certificate; without TLS it is only noted (never the default
    // action, which would end the process: `systemctl reload` sends it).
    let _reload = match tls.clone() {
        Some(tls) => tls.spawn_sighup_reload(),
        None => {
            let mut hangups = signal(SignalKind::hangup()).map_err(HttpServeError::Signals)?;
            tokio::spawn(async move {
                while hangups.recv().await.is_some() {
                    info!("SIGHUP: no TLS certificate to reload");
                }
            })
        }
    };
    let refresher = server.clone();
    let _refresh = AbortOnDrop(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(refresh_every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            refresher.refresh_profiles(None).await;
        }
    }));
    info!(
        listen = %bound,
        resource = %http.resource,
        tls = tls.is_some(),
        "vivarium-mcp serving MCP over HTTP"
    );
    // The line tests and scripts wait for (stderr, whatever the log level).
    eprintln!("vivarium-mcp: listening on {bound} for {}", http.resource);
    let shutdown = async move {
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM: stopping"),
            _ = interrupt.recv() => info!("SIGINT: stopping"),
        }
        stopping_tx.send_replace(true);
        stop_rmcp.cancel();
    };
    let served = listen::serve(listener, tls, app, ConnLimits::from_config(&http), shutdown).await;
    server.close_owned_sessions().await;
    if let super::config::Listen::Unix(path) = &http.listen {
        let _ = std::fs::remove_file(path);
    }
    served.map_err(HttpServeError::Serve)
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
