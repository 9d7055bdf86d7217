//! `vivariumd`: parse arguments, set up logging, run. The spawner subcommand is
//! dispatched before anything else, in particular before the tokio runtime exists.

use anyhow::{bail, Context};
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vivariumd::config::Config;
use vivariumd::server::{self, spawner_client, Daemon};
use vivariumd::spawner::{self, link::SpawnerConfig, link::SPAWNER_ARG};

#[derive(Parser, Debug)]
#[command(name = "vivariumd", version, about = "The Vivarium sandbox daemon")]
struct Cli {
    /// Daemon config file (TOML).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Listening socket (overrides VIVARIUM_SOCKET and the config).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Profiles directory (overrides the config).
    #[arg(long)]
    profiles: Option<PathBuf>,
    /// Validate the config and profiles, print them, and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> std::process::ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == SPAWNER_ARG) {
        spawner::main();
    }
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VIVARIUM_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vivariumd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(dir) = cli.profiles {
        config.profiles_dir = dir;
    }
    let profiles = vivariumd::profile::load_dir(&config.profiles_dir)
        .with_context(|| format!("loading profiles from {}", config.profiles_dir.display()))?;
    if profiles.is_empty() {
        bail!("no profiles in {}", config.profiles_dir.display());
    }
    let root = nix::unistd::geteuid().is_root();
    let socket = server::socket_path(cli.socket, &config, root);
    let allowed_gids = server::resolve_groups(&config.allow_groups).map_err(anyhow::Error::msg)?;
    let socket_group = match &config.socket_group {
        Some(g) => Some(
            *server::resolve_groups(std::slice::from_ref(g))
                .map_err(anyhow::Error::msg)?
                .first()
                .expect("one group"),
        ),
        None => None,
    };
    let mode = config.socket_mode_bits()?;
    if cli.check {
        for p in &profiles {
            println!("profile {}: ok ({})", p.name, p.file.description);
        }
        return Ok(());
    }
    if !root {
        bail!("vivariumd must run as root for now (rootless mode is not implemented yet)");
    }
    let state_dir = config
        .state_dir
        .clone()
        .unwrap_or_else(|| spawner::default_state_dir(root));
    let spawner_config = SpawnerConfig {
        state_dir,
        cgroup_subtree: config.cgroup_subtree.clone(),
        id_base: config.id_base,
        // A job's id slot is freed when its init has exited, a few ms after its
        // outcome went out and the next job may already be starting: keep spares.
        max_jobs: config.id_slots(),
    };
    // Start the privileged spawner while this process is still single-threaded.
    let unattached = spawner_client::start()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (client, facts, mut child) = spawner_client::SpawnerClient::attach(unattached, spawner_config).await?;
        let daemon = Arc::new(Daemon::new(config, profiles, facts, client, allowed_gids));
        for (name, p) in &daemon.profiles {
            match &p.disabled {
                Some(why) => tracing::warn!(profile = %name, "profile disabled: {why}"),
                None => tracing::info!(profile = %name, not_enforced = ?p.not_enforced, "profile enabled"),
            }
        }
        if daemon.enabled_profiles() == 0 {
            bail!("no profile can be enforced on this host (see the warnings above)");
        }
        let listener = server::bind(&socket, mode, socket_group)
            .with_context(|| format!("binding {}", socket.display()))?;
        tracing::info!(socket = %socket.display(), cgroup = ?daemon.facts.cgroup, landlock_abi = daemon.facts.landlock_abi, "listening");
        let spawner_gone = daemon.spawner.gone.clone();
        let mut failed = false;
        let stop = async {
            tokio::select! {
                () = stop_signal() => {}
                () = spawner_gone.notified() => failed = true,
            }
        };
        server::serve(daemon.clone(), listener, stop).await;
        tracing::info!("shutting down");
        daemon.spawner.shutdown().await;
        let waited = tokio::task::spawn_blocking(move || child.wait());
        let _ = tokio::time::timeout(Duration::from_secs(10), waited).await;
        let _ = std::fs::remove_file(&socket);
        if let Err(e) = vivariumd::cgroup::Cgroups::detect(&daemon.config.cgroup_subtree)
            .and_then(|c| c.remove_subtree())
        {
            tracing::warn!(error = %vivariumd::error_chain(&e), "cgroup subtree not removed");
        }
        if failed {
            bail!("the privileged spawner died; no job can run (its jobs died with it)");
        }
        Ok(())
    })
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
