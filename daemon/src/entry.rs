//! The daemon's entry point: parse arguments, set up logging, run. The spawner
//! subcommand is dispatched before anything else, in particular before the tokio
//! runtime exists. `vivariumd` (src/main.rs) calls [`main`] with [`Weakening::none`];
//! only the test-only `vivariumd-weakened` (under `tests/`) passes anything else.

use crate::config::{Config, LogFormat};
use crate::policy::weaken::Weakening;
use crate::server::lifecycle::{self, ConfigSource, Loaded};
use crate::server::{self, activation, spawner_client, Daemon};
use crate::spawner;
use anyhow::{bail, Context};
use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use vivarium_sandbox::ipc::{SpawnerConfig, SPAWNER_ARG};

#[derive(Parser, Debug)]
#[command(name = "vivariumd", version, about = "The Vivarium sandbox daemon")]
struct Cli {
    /// Daemon config file (TOML); default /etc/vivarium/vivariumd.toml if it exists.
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

/// Run the daemon (or, as `<exe> __spawner`, its spawner) with `args` (`argv[0]`
/// first). `weakening` must be [`Weakening::none`] outside the attack suite's test binary.
pub fn main(args: Vec<OsString>, weakening: Weakening) -> std::process::ExitCode {
    if args.get(1).is_some_and(|a| a == SPAWNER_ARG) {
        spawner::main();
    }
    let cli = Cli::parse_from(args);
    let source = ConfigSource {
        path: Config::default_path(cli.config.clone()),
        profiles_dir: cli.profiles.clone(),
    };
    // The config first: it says how to log.
    let config = match source.load_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vivariumd: {}", crate::error_chain(&e));
            return std::process::ExitCode::FAILURE;
        }
    };
    init_logging(config.log_format);
    match run(cli, source, weakening) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vivariumd: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VIVARIUM_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Human => logs.init(),
        // The journal timestamps every line itself.
        LogFormat::Journald => logs.without_time().with_ansi(false).init(),
        LogFormat::Json => logs.json().init(),
    }
}

fn run(cli: Cli, source: ConfigSource, weakening: Weakening) -> anyhow::Result<()> {
    let Loaded {
        config,
        profiles,
        allowed_gids,
    } = source.load()?;
    let root = nix::unistd::geteuid().is_root();
    let socket = server::socket_path(cli.socket, &config, root);
    let socket_group = match &config.socket_group {
        Some(g) => Some(
            *server::resolve_groups(std::slice::from_ref(g))?
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
        tracing::info!("running rootless: single-id user namespaces; cgroup limits only where a delegated subtree is usable");
    }
    // A socket from systemd, adopted while this process is single-threaded (it unsets
    // LISTEN_*) and before the spawner starts (the fd is close-on-exec by now).
    let inherited = activation::take_listen_fd()?;
    let activated = inherited.is_some();
    let state_dir = config
        .state_dir
        .clone()
        .unwrap_or_else(|| spawner::default_state_dir(root));
    let spawner_config = SpawnerConfig {
        state_dir,
        cgroup_subtree: config.cgroup_subtree.clone(),
        id_base: config.id_base,
        rootless: !root,
        // A job's id slot is freed when its init has exited, a few ms after its
        // outcome went out and the next job may already be starting: keep spares.
        max_jobs: config.id_slots(),
        weakened: !weakening.is_empty(),
    };
    // Start the privileged spawner while this process is still single-threaded.
    raise_nofile_limit();
    let unattached = spawner_client::start()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // Ready means the spawner is up and has set up the cgroup subtree.
        let (client, facts, mut child) = spawner_client::SpawnerClient::attach(unattached, spawner_config, weakening).await?;
        let daemon = Arc::new(Daemon::new(config, profiles, facts, client, allowed_gids));
        for (name, p) in &daemon.live().profiles {
            match &p.disabled {
                Some(why) => tracing::warn!(profile = %name, "profile disabled: {why}"),
                None => tracing::info!(profile = %name, not_enforced = ?p.not_enforced, "profile enabled"),
            }
        }
        tokio::spawn(server::warm::maintain(daemon.clone()));
        if daemon.enabled_profiles() == 0 {
            bail!("no profile can be enforced on this host (see the warnings above)");
        }
        let signals = lifecycle::Signals::new().context("installing signal handlers")?;
        // The first jobs take the fast path: the kept warm pools (the shipped default's)
        // are built before the socket is bound (or, socket-activated, accepted on).
        server::warm::prefill(&daemon, Duration::from_secs(10)).await;
        // The socket file is ours to remove only if we bound it.
        let (listener, bound) = match inherited {
            Some(fd) => {
                let (listener, path) = activation::listener_from_fd(fd)?;
                if path.as_deref() != Some(socket.as_path()) {
                    tracing::info!(configured = %socket.display(), "the socket passed by the service manager replaces the configured one (and its mode and group)");
                }
                tracing::info!(socket = ?path, cgroup = ?daemon.facts.cgroup, landlock_abi = daemon.facts.landlock_abi, "listening on the socket passed by the service manager");
                (listener, None)
            }
            None => {
                let listener = server::bind(&socket, mode, socket_group)
                    .with_context(|| format!("binding {}", socket.display()))?;
                tracing::info!(socket = %socket.display(), cgroup = ?daemon.facts.cgroup, landlock_abi = daemon.facts.landlock_abi, "listening");
                (listener, Some(socket))
            }
        };
        let opts = lifecycle::RunOpts { source, activated };
        let stop = lifecycle::run(daemon.clone(), listener, signals, opts).await;
        tracing::info!(?stop, "shutting down");
        daemon.spawner.shutdown().await;
        let waited = tokio::task::spawn_blocking(move || child.wait());
        let _ = tokio::time::timeout(Duration::from_secs(10), waited).await;
        if let Some(path) = bound {
            let _ = std::fs::remove_file(&path);
        }
        // The spawner removes its cgroup subtree as it exits (`spawner::run`); one that
        // died could not, and its jobs died with it: their cgroups go now (a restarted
        // daemon's spawner would reap them too).
        if stop == lifecycle::Stop::SpawnerGone {
            if let Err(e) = vivarium_sandbox::cgroup::Cgroups::detect(&daemon.config.cgroup_subtree)
                .and_then(|c| c.remove_subtree())
            {
                tracing::warn!(error = %crate::error_chain(&e), "cgroup subtree not removed");
            }
            bail!("the privileged spawner died; no job can run (its jobs died with it)");
        }
        Ok(())
    })
}

/// Raise the soft fd limit to the hard one (systemd's default is 1024:524288): every
/// client connection and every job (code memfd, three pipes, pidfd, status pipe) costs
/// fds, in the server and in the spawner, which inherits the limit. Jobs get their own
/// limit from their profile.
fn raise_nofile_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
                tracing::warn!(error = %e, soft, hard, "cannot raise the fd limit");
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// No config file or profile can name a weakening: both parsers deny unknown keys,
    /// at the top level and in every table.
    #[test]
    fn no_config_or_profile_key_reaches_it() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../profiles");
        let profile = std::fs::read_to_string(dir.join("default.toml")).unwrap();
        assert!(toml::from_str::<crate::profile::ProfileFile>(&profile).is_ok());
        for key in [
            "weaken",
            "weakening",
            "weakened",
            "drop_layers",
            "test_weakened",
        ] {
            let line = format!("{key} = [\"landlock\"]\n");
            assert!(
                toml::from_str::<crate::config::Config>(&line).is_err(),
                "{key}"
            );
            let top = format!("{line}{profile}");
            assert!(toml::from_str::<crate::profile::ProfileFile>(&top).is_err());
            for table in [
                "[security]\n",
                "[filesystem]\n",
                "[limits]\n",
                "[network]\n",
            ] {
                let nested = profile.replace(table, &format!("{table}{line}"));
                assert_ne!(nested, profile, "{table}");
                assert!(
                    toml::from_str::<crate::profile::ProfileFile>(&nested).is_err(),
                    "{key} in {table}"
                );
            }
        }
    }
}
