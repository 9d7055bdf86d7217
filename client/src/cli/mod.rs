//! The `viv` command line: arguments, dispatch, and error reporting at the edge.

mod artifacts;
mod doctor;
mod exec;
mod files;
mod out_dir;
mod parse;
mod profiles;
mod repl;
mod run;
mod session;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use vivarium_client::{resolve_socket_path, ClientError, EXIT_REFUSED};

#[derive(Debug, Parser)]
#[command(
    name = "viv",
    version,
    about = "Run untrusted Python in the Vivarium sandbox daemon"
)]
pub struct Cli {
    /// The daemon socket. Default: $VIVARIUM_SOCKET, else /run/vivarium/vivariumd.sock as
    /// root, else $XDG_RUNTIME_DIR/vivarium/vivariumd.sock.
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,

    /// Say more: the full outcome of a job, the details of checks.
    #[arg(short, long, global = true)]
    verbose: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a Python script in the sandbox, streaming its output; exits with its exit code.
    Run(RunArgs),
    /// List the daemon's profiles and whether each can be enforced on this host.
    Profiles {
        /// Print the profiles as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check what this kernel offers for sandboxing, and whether the daemon is reachable.
    Doctor,
    /// Sessions: sandboxed interpreters that keep their state between cells.
    Session {
        #[command(subcommand)]
        command: SessionCommand,
    },
    /// Run a cell in a session: stream its output, print its last expression's value, exit
    /// with a code for how it ended.
    Exec(ExecArgs),
    /// An interactive Python prompt backed by a new session (closed on ctrl-d).
    Repl(ReplArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionCommand {
    /// Open a session; prints its handle (for `viv exec`) on stdout.
    New {
        #[command(flatten)]
        opts: SessionOpts,
        /// Print the session's info as JSON instead of its handle.
        #[arg(long)]
        json: bool,
    },
    /// List your open sessions.
    Ls {
        /// Print the sessions as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a session (its state is gone); prints how it ended.
    Close {
        /// The session's handle (`vs_...`).
        #[arg(value_name = "HANDLE")]
        handle: String,
        /// Print how it ended as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// What a new session is opened with (`viv session new`, `viv repl`).
#[derive(Debug, Args)]
pub(crate) struct SessionOpts {
    /// The profile to open it under (its `[session]` table must enable sessions).
    #[arg(long, default_value = "default")]
    profile: String,

    /// Install this PyPI package (a PEP 508 requirement) into the session's environment
    /// first; repeatable.
    #[arg(long = "with", value_name = "REQUIREMENT")]
    with: Vec<String>,

    /// End the session after this many seconds without a cell.
    #[arg(long, value_name = "SECS", value_parser = parse::parse_secs_to_ms)]
    ttl: Option<u64>,

    /// End the session this many seconds after it opened, whatever it does.
    #[arg(long, value_name = "SECS", value_parser = parse::parse_secs_to_ms)]
    lifetime: Option<u64>,

    /// Each cell's wall-clock limit in seconds.
    #[arg(long, value_name = "SECS", value_parser = parse::parse_secs_to_ms)]
    cell_timeout: Option<u64>,

    #[command(flatten)]
    limits: LimitArgs,
}

/// The limits a job and a session share (`viv run`, `viv session new`, `viv repl`).
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// CPU-time limit in seconds, over all the processes (of a session: over its whole
    /// life).
    #[arg(long, value_name = "SECS", value_parser = parse::parse_secs_to_ms)]
    cpu: Option<u64>,

    /// Memory limit, e.g. 64M, 1G, 512K or plain bytes.
    #[arg(long, value_name = "SIZE", value_parser = parse::parse_size)]
    memory: Option<u64>,

    /// Limit on the number of processes and threads.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pids: Option<u32>,

    /// Output cap per stream, e.g. 1M (of a session: per cell).
    #[arg(long, value_name = "SIZE", value_parser = parse::parse_size)]
    output: Option<u64>,
}

/// What a job or cell returns and where it goes (`viv run`, `viv exec`).
#[derive(Debug, Args, Default)]
pub(crate) struct OutputArgs {
    /// Write the returned artifacts under DIR, each at DIR/<its path under /work> (by
    /// default the files under /work/out, so DIR/out/plot.png). DIR is created if need
    /// be, before the job runs. Nothing is written outside DIR: a path that could leave
    /// it is refused, and a symlink inside DIR is never followed (an artifact that would
    /// go through one is refused). An existing file is not replaced without --force. A
    /// refused artifact is named on stderr, the others are still written, and viv exits
    /// 125 if the job itself succeeded.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,

    /// With --out: replace existing regular files (by writing beside them and renaming
    /// over them; a symlink, directory or other file in the way is never replaced or
    /// written through).
    #[arg(long, requires = "out")]
    force: bool,

    /// Return the regular files under /work matching PATTERN (relative to /work,
    /// `/`-separated; `**` any number of directories, `*` and `?` within one name)
    /// instead of those under /work/out; repeatable. (`--output` is the output cap.)
    #[arg(long = "out-pattern", value_name = "PATTERN")]
    patterns: Vec<String>,

    /// Return no artifacts at all (no collection, no figure capture). Without this,
    /// --out or --json, the job still returns its artifacts and viv names them on
    /// stderr as not saved.
    #[arg(long, conflicts_with_all = ["out", "patterns"])]
    no_outputs: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 ok; 1 the cell raised (traceback on stderr); 124 wall \
limit; 121 memory guard; 130 interrupted; 120 the session has ended (before or during the \
cell); 125 refused (not found, busy), viv failed, or the cell succeeded and an artifact \
could not be written under --out."
)]
pub struct ExecArgs {
    /// The session's handle (`vs_...`, from `viv session new`).
    #[arg(value_name = "HANDLE")]
    handle: String,

    /// The cell's code, or `-` to read it from stdin.
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Put the host file LOCAL into the session's /work before the cell runs, as DEST (a
    /// path under /work, replacing a file there; default: LOCAL's file name); repeatable.
    /// The split is at the last ':', so DEST cannot hold one, and a LOCAL whose name does
    /// needs an explicit DEST (`--file a:b.csv:b.csv`). LOCAL must be a regular file (a
    /// symlink is followed) of at most 4 GiB; the file gets mode 0644. Needs a protocol-7
    /// daemon.
    #[arg(long = "file", value_name = "LOCAL[:DEST]", value_parser = files::parse_file_arg)]
    files: Vec<files::FileArg>,

    /// Send this file as the cell's stdin (otherwise it reads EOF).
    #[arg(long, value_name = "PATH")]
    stdin: Option<PathBuf>,

    /// The cell's wall-clock limit in seconds (tighter than the session's).
    #[arg(long, value_name = "SECS", value_parser = parse::parse_secs_to_ms)]
    wall: Option<u64>,

    #[command(flatten)]
    outputs: OutputArgs,

    /// Print the cell's outcome, with stdout and stderr as strings and the artifacts
    /// (`artifacts`: path, size, sha256, media_type, `saved` where --out wrote it or
    /// null, `error` if it could not; `artifacts_report`: what was skipped or omitted,
    /// the caps), as one JSON object on stdout at the end instead of streaming the output.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(
    after_help = "A line ending with ':' opens a block that an empty line ends; open \
brackets, triple quotes and a trailing backslash continue the input. History: \
$XDG_STATE_HOME/vivarium/repl_history (default ~/.local/state/vivarium/repl_history)."
)]
pub struct ReplArgs {
    #[command(flatten)]
    opts: SessionOpts,
}

/// Exit codes: the script's own, or 124 timeout/cpu, 121 oom, 122 pids, 123 output limit,
/// 125 refused/sandbox error/viv failed, 130 cancelled, 128+N killed by signal N.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: the script's own; 124 wall or cpu limit; 121 out of \
memory; 122 pids limit; 123 output limit; 125 refused, sandbox error, viv failed, or the \
script succeeded and an artifact could not be written under --out; 130 cancelled; 128+N \
killed by signal N (159: seccomp)."
)]
pub struct RunArgs {
    /// The profile to run under.
    #[arg(long, default_value = "default")]
    profile: String,

    /// Wall-clock limit in seconds (decimals allowed).
    #[arg(long, value_name = "SECS", value_parser = parse::parse_secs_to_ms)]
    timeout: Option<u64>,

    #[command(flatten)]
    limits: LimitArgs,

    /// Install this PyPI package (a PEP 508 requirement, e.g. `numpy>=2`) into the job's
    /// environment first; repeatable. A `# /// script` block (PEP 723) in the code is
    /// read as well. The profile must allow packages.
    #[arg(long = "with", value_name = "REQUIREMENT")]
    with: Vec<String>,

    /// Put the host file LOCAL into the job's /work before the script runs, as DEST (a
    /// path under /work; default: LOCAL's file name); repeatable, and given before FILE.
    /// The split is at the last ':', so DEST cannot hold one, and a LOCAL whose name does
    /// needs an explicit DEST (`--file a:b.csv:b.csv`). LOCAL must be a regular file (a
    /// symlink is followed) of at most 4 GiB; the file gets mode 0644. Needs a protocol-7
    /// daemon.
    #[arg(long = "file", value_name = "LOCAL[:DEST]", value_parser = files::parse_file_arg)]
    files: Vec<files::FileArg>,

    #[command(flatten)]
    outputs: OutputArgs,

    /// Print the outcome, with stdout and stderr as strings and the artifacts
    /// (`artifacts`: path, size, sha256, media_type, `saved` where --out wrote it or
    /// null, `error` if it could not; `artifacts_report`: what was skipped or omitted,
    /// the caps), as one JSON object on stdout at the end instead of streaming the output.
    #[arg(long)]
    json: bool,

    /// Give the job an empty stdin even when viv's stdin is a pipe or file.
    #[arg(long)]
    no_stdin: bool,

    /// Send this file as the job's stdin.
    #[arg(long, value_name = "PATH", conflicts_with = "no_stdin")]
    stdin_file: Option<PathBuf>,

    /// The script, or `-` to read it from stdin (the job's stdin is then empty).
    #[arg(value_name = "FILE")]
    file: PathBuf,

    /// Arguments for the script (`sys.argv[1:]`); everything after FILE goes to it.
    #[arg(
        value_name = "ARGS",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<String>,
}

/// Parse the command line, run the command, and return the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("viv: cannot start the async runtime: {e}");
            return EXIT_REFUSED;
        }
    };
    let code = runtime.block_on(dispatch(cli));
    // A blocking read of viv's own stdin may still be parked on a runtime thread (the job
    // ended before its stdin did): do not wait for it.
    runtime.shutdown_background();
    code
}

async fn dispatch(cli: Cli) -> i32 {
    let socket = resolve_socket_path(cli.socket);
    match cli.command {
        Command::Run(args) => run::run(&socket, args, cli.verbose).await,
        Command::Profiles { json } => profiles::profiles(&socket, json).await,
        Command::Doctor => doctor::doctor(&socket, cli.verbose).await,
        Command::Session { command } => session::session(&socket, command).await,
        Command::Exec(args) => exec::exec(&socket, args).await,
        Command::Repl(args) => repl::repl(&socket, args).await,
    }
}

/// Print an error and its causes on one line, prefixed `viv: `, plus a hint for the
/// common case of a daemon that is not running.
pub(crate) fn report_error(err: &(dyn std::error::Error + 'static)) {
    eprintln!("viv: {}", error_chain(err));
    if let Some(ClientError::Connect { .. }) = err.downcast_ref::<ClientError>() {
        for line in start_daemon_hint() {
            eprintln!("viv: {line}");
        }
    }
}

pub(crate) use vivarium_proto::error_chain;

/// How to get a daemon to talk to.
pub(crate) fn start_daemon_hint() -> [&'static str; 3] {
    [
        "is vivariumd running? start the system daemon with `sudo vivariumd --config /etc/vivarium/vivariumd.toml`,",
        "or a per-user daemon with `vivariumd` (socket in $XDG_RUNTIME_DIR/vivarium/);",
        "point viv at another socket with --socket PATH or VIVARIUM_SOCKET",
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn script_arguments_after_the_file_go_to_the_script() {
        let cli = Cli::try_parse_from([
            "viv",
            "--socket",
            "/s",
            "run",
            "--memory",
            "64M",
            "--timeout",
            "1.5",
            "a.py",
            "-x",
            "--json",
            "y",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(cli.socket, Some(PathBuf::from("/s")));
        assert_eq!(run.limits.memory, Some(64 << 20));
        assert_eq!(run.timeout, Some(1500));
        assert!(!run.json);
        assert_eq!(run.file, PathBuf::from("a.py"));
        assert_eq!(run.args, ["-x", "--json", "y"]);
    }

    #[test]
    fn file_options_are_repeatable_and_parsed() {
        let cli = Cli::try_parse_from([
            "viv",
            "run",
            "--file",
            "/tmp/data.csv",
            "--file",
            "x.bin:in/y.bin",
            "a.py",
            "-x",
            "--file",
            "z",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        let got: Vec<(PathBuf, &str)> = run
            .files
            .iter()
            .map(|f| (f.local.clone(), f.dest.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (PathBuf::from("/tmp/data.csv"), "data.csv"),
                (PathBuf::from("x.bin"), "in/y.bin")
            ]
        );
        // Once the script's arguments have begun, `--file` is one of them.
        assert_eq!(run.args, ["-x", "--file", "z"]);
        let cli =
            Cli::try_parse_from(["viv", "exec", "vs_x", "c.py", "--file", "d.txt:e.txt"]).unwrap();
        let Command::Exec(exec) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(exec.files[0].dest, "e.txt");
        assert!(Cli::try_parse_from(["viv", "run", "--file", "a:/abs", "a.py"]).is_err());
    }

    #[test]
    fn output_options_are_parsed_and_checked() {
        let cli = Cli::try_parse_from([
            "viv",
            "run",
            "--out",
            "res",
            "--force",
            "--out-pattern",
            "*.csv",
            "--out-pattern",
            "out/**",
            "--output",
            "1M",
            "a.py",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.outputs.out, Some(PathBuf::from("res")));
        assert!(run.outputs.force);
        assert_eq!(run.outputs.patterns, ["*.csv", "out/**"]);
        assert_eq!(run.limits.output, Some(1 << 20));
        let cli = Cli::try_parse_from(["viv", "exec", "vs_x", "--out", "d", "c.py"]).unwrap();
        let Command::Exec(exec) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(exec.outputs.out, Some(PathBuf::from("d")));
        // --force needs --out; --no-outputs asks for nothing, so nothing to save or match.
        assert!(Cli::try_parse_from(["viv", "run", "--force", "a.py"]).is_err());
        assert!(Cli::try_parse_from(["viv", "run", "--no-outputs", "--out", "d", "a.py"]).is_err());
        assert!(Cli::try_parse_from([
            "viv",
            "exec",
            "vs_x",
            "--no-outputs",
            "--out-pattern",
            "*",
            "c.py"
        ])
        .is_err());
    }

    #[test]
    fn stdin_options_conflict() {
        assert!(
            Cli::try_parse_from(["viv", "run", "--no-stdin", "--stdin-file", "f", "a.py"]).is_err()
        );
        assert!(Cli::try_parse_from(["viv", "run", "--pids", "0", "a.py"]).is_err());
    }

    #[test]
    fn error_chain_joins_causes() {
        let err = ClientError::Connect {
            path: "/x.sock".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(
            error_chain(&err),
            "cannot connect to the daemon at /x.sock: entity not found"
        );
    }
}
