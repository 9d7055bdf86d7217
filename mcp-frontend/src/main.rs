//! `vivarium-mcp`: parse flags, log to stderr, serve MCP on stdio.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// MCP server with a `run_python` tool that runs code in the Vivarium sandbox: on stdio
/// (the default), or over Streamable HTTP as an OAuth 2.1 resource server (`--http`).
#[derive(Debug, Parser)]
#[command(name = "vivarium-mcp", version)]
struct Args {
    /// The daemon's socket [default: VIVARIUM_SOCKET, else the daemon's default path].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// run_python calls allowed per minute (0: unlimited).
    #[arg(long, default_value_t = 60, env = "VIVARIUM_MCP_CALLS_PER_MINUTE")]
    max_calls_per_minute: u32,
    /// run_python calls running at once.
    #[arg(long, default_value_t = 4, env = "VIVARIUM_MCP_MAX_JOBS", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_jobs: u32,
    /// run_python calls that may wait for a free slot (beyond them a call is refused).
    #[arg(long, default_value_t = 16, env = "VIVARIUM_MCP_MAX_QUEUED")]
    max_queued_calls: u32,
    /// Seconds a queued call may wait for a slot before it is refused.
    #[arg(long, default_value_t = 120.0)]
    queue_timeout: f64,
    /// Characters of stdout and of stderr returned (head and tail excerpt), each.
    #[arg(long, default_value_t = 8000, env = "VIVARIUM_MCP_OUTPUT_CHARS", value_parser = clap::value_parser!(u32).range(200..))]
    output_chars: u32,
    /// Characters of a result's text content in all (the result as JSON, with shorter
    /// excerpts when needed), for hosts that show the model only the text.
    #[arg(long, default_value_t = vivarium_mcp::tool::DEFAULT_TEXT_CHARS as u32, env = "VIVARIUM_MCP_TEXT_CHARS", value_parser = clap::value_parser!(u32).range(1000..))]
    text_chars: u32,
    /// The profile used when a call names none.
    #[arg(long, default_value = "default")]
    profile: String,
    /// Seconds between progress notifications while a job runs.
    #[arg(long, default_value_t = 1.0)]
    progress_interval: f64,
    /// Seconds between looks at the daemon's profiles (a reload changes the tool; the
    /// client gets notifications/tools/list_changed).
    #[arg(long, default_value_t = 10.0)]
    profile_refresh: f64,
    /// Seconds that resources/read serves a result's artifacts (files the code left in
    /// /work/out, captured plots) after the call that returned them.
    #[arg(long, default_value_t = vivarium_mcp::resources::DEFAULT_TTL.as_secs(), env = "VIVARIUM_MCP_ARTIFACT_TTL", value_parser = clap::value_parser!(u64).range(1..=604_800))]
    artifact_ttl: u64,
    /// MiB of artifacts kept for resources/read at most; past it the oldest are evicted.
    #[arg(long, default_value_t = vivarium_mcp::resources::DEFAULT_MAX_BYTES >> 20, env = "VIVARIUM_MCP_ARTIFACT_STORE_MIB", value_parser = clap::value_parser!(u64).range(0..=65_536))]
    artifact_store_mib: u64,
    /// Serve MCP over Streamable HTTP on ADDR (HOST:PORT, or unix:/path) instead of stdio.
    /// Authorization (an OAuth authorization server, scopes), TLS and limits come from
    /// --http-config (docs/deployment.md); without an `[auth]` section the server refuses
    /// to start unless the file sets `insecure_no_auth` on loopback or a Unix socket.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// The HTTP frontend's configuration file (TOML; implies --http, with its `listen`).
    #[arg(long, value_name = "FILE", env = "VIVARIUM_MCP_HTTP_CONFIG")]
    http_config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let http = args.http.is_some() || args.http_config.is_some();
    // stdout carries JSON-RPC only: every log line goes to stderr. A service over HTTP
    // says more by default.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VIVARIUM_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if http { "info" } else { "warn" })
            }),
        )
        .init();
    let config = vivarium_mcp::Config {
        socket: vivarium_mcp::server::socket_path(args.socket),
        max_calls_per_minute: args.max_calls_per_minute,
        max_concurrent_jobs: args.max_concurrent_jobs as usize,
        max_queued_calls: args.max_queued_calls as usize,
        queue_timeout: Duration::from_secs_f64(args.queue_timeout.clamp(0.0, 86_400.0)),
        budgets: vivarium_mcp::tool::Budgets {
            output_chars: args.output_chars as usize,
            text_chars: args.text_chars as usize,
        },
        default_profile: args.profile,
        progress_interval: Duration::from_secs_f64(args.progress_interval.clamp(0.1, 10.0)),
        profile_refresh: Duration::from_secs_f64(args.profile_refresh.clamp(0.1, 3600.0)),
        artifact_ttl: Duration::from_secs(args.artifact_ttl),
        artifact_store_bytes: args.artifact_store_mib << 20,
    };
    if http {
        let http = match vivarium_mcp::http::config::HttpConfig::load(
            args.http_config.as_deref(),
            args.http.as_deref(),
        ) {
            Ok(http) => http,
            Err(e) => {
                eprintln!("vivarium-mcp: {}", vivarium_proto::error_chain(&e));
                return std::process::ExitCode::from(2);
            }
        };
        return match vivarium_mcp::http::serve::serve_http(config, http).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("vivarium-mcp: {}", vivarium_proto::error_chain(&e));
                std::process::ExitCode::FAILURE
            }
        };
    }
    match vivarium_mcp::serve_stdio(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vivarium-mcp: {}", vivarium_proto::error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
