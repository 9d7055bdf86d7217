//! `viv run`: submit a script, stream its output, exit with its exit code.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::signal::unix::{signal, SignalKind};
use vivarium_client::proto::{
    ArtifactsReport, ErrorCode, PackagesReport, Reason, SandboxStart, SessionEnded,
};
use vivarium_client::{
    exit_code_for, is_abnormal, summary_line, verbose_report, Canceller, Client, ClientError, Job,
    JobEvent, Outcome, Stream, EXIT_CANCELLED, EXIT_REFUSED, EXIT_SESSION_ENDED,
};

use super::artifacts::{Artifacts, ListedArtifact};
use super::{report_error, RunArgs};

/// 128 + SIGPIPE: our stdout reader went away.
pub(crate) const EXIT_SIGPIPE: i32 = 141;

/// Where the job's stdin comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StdinSource {
    /// Empty stdin.
    Empty,
    /// viv's own stdin.
    Inherit,
    File(PathBuf),
}

/// Pick the job's stdin: an explicit file wins; `--no-stdin` and code read from stdin mean
/// empty; otherwise forward viv's stdin unless it is a terminal (a job should not sit
/// waiting on a keyboard nobody knows it reads) or `/dev/null` (empty either way, and
/// forwarding it would cost a reader thread and a frame).
pub(crate) fn choose_stdin(
    code_from_stdin: bool,
    no_stdin: bool,
    stdin_file: Option<PathBuf>,
    stdin_is_terminal_or_null: bool,
) -> StdinSource {
    match stdin_file {
        Some(path) => StdinSource::File(path),
        None if no_stdin || code_from_stdin || stdin_is_terminal_or_null => StdinSource::Empty,
        None => StdinSource::Inherit,
    }
}

/// Whether viv's stdin is a terminal or `/dev/null` (the character device 1:3).
fn stdin_has_nothing_to_forward() -> bool {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return true;
    }
    use nix::sys::stat::SFlag;
    const DEV_NULL: (u64, u64) = (1, 3);
    nix::sys::stat::fstat(&stdin).is_ok_and(|st| {
        SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR
            && (
                nix::sys::stat::major(st.st_rdev),
                nix::sys::stat::minor(st.st_rdev),
            ) == DEV_NULL
    })
}

/// Check that the script is UTF-8, with a message that says where it is not.
pub(crate) fn code_to_string(name: &str, bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{name} is not valid UTF-8 (first bad byte at offset {}); code must be UTF-8",
            e.utf8_error().valid_up_to()
        )
    })
}

/// What `--json` prints: the outcome's own fields, the exit code, and the output.
#[derive(Debug, Serialize)]
struct JsonRun<'a> {
    #[serde(flatten)]
    outcome: &'a Outcome,
    /// The job's package environment, when it asked for packages.
    #[serde(skip_serializing_if = "Option::is_none")]
    packages: Option<&'a PackagesReport>,
    /// How the job's sandbox was made (a protocol-5 daemon says).
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxStart>,
    exit_code: i32,
    stdout: String,
    stderr: String,
    /// The artifacts returned, and where `--out` saved them.
    artifacts: &'a [ListedArtifact],
    /// What was not returned; null when the daemon sent no report (`--no-outputs`, or a
    /// daemon before protocol 8).
    artifacts_report: Option<&'a ArtifactsReport>,
}

/// What `--json` prints when there is no outcome.
#[derive(Debug, Serialize)]
struct JsonFailure<'a> {
    error: JsonErrorBody,
    /// How the session ended, when the request named one that has.
    #[serde(skip_serializing_if = "Option::is_none")]
    session_ended: Option<&'a SessionEnded>,
    exit_code: i32,
}

#[derive(Debug, Serialize)]
struct JsonErrorBody {
    /// The daemon's code when it refused; null for local failures.
    code: Option<ErrorCode>,
    message: String,
}

pub(crate) async fn run(socket: &Path, args: RunArgs, verbose: bool) -> i32 {
    let json = args.json;
    match run_inner(socket, args, verbose).await {
        Ok(code) => code,
        Err(failure) => report_failure(&failure, json),
    }
}

/// Why a command has no result: something here, or the client library.
pub(crate) enum Failure {
    Local(String),
    Client(ClientError),
}

impl Failure {
    pub(crate) fn save(e: super::out_dir::SaveError) -> Failure {
        Failure::Local(super::error_chain(&e))
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        Failure::Client(e)
    }
}

/// Report a failure on stderr (and as JSON on stdout with `json`); returns the exit code:
/// [`EXIT_SESSION_ENDED`] for a session that has ended, [`EXIT_REFUSED`] otherwise.
pub(crate) fn report_failure(failure: &Failure, json: bool) -> i32 {
    let session_ended = match failure {
        Failure::Client(e) => e.session_ended(),
        Failure::Local(_) => None,
    };
    let exit_code = if session_ended.is_some() {
        EXIT_SESSION_ENDED
    } else {
        EXIT_REFUSED
    };
    match failure {
        Failure::Local(message) => eprintln!("viv: {message}"),
        Failure::Client(e) => report_error(e),
    }
    if json {
        print_json(&JsonFailure {
            error: JsonErrorBody {
                code: match failure {
                    Failure::Client(e) => e.refusal_code(),
                    Failure::Local(_) => None,
                },
                message: match failure {
                    Failure::Client(e) => super::error_chain(e),
                    Failure::Local(m) => m.clone(),
                },
            },
            session_ended,
            exit_code,
        });
    }
    exit_code
}

/// Read code from `file`, or from viv's stdin for `-`; `what` names it in messages
/// (`script`, `cell`).
pub(crate) async fn read_code(file: &Path, what: &str) -> Result<String, Failure> {
    if file.as_os_str() == "-" {
        let mut code = Vec::new();
        tokio::io::stdin()
            .read_to_end(&mut code)
            .await
            .map_err(|e| Failure::Local(format!("cannot read the {what} from stdin: {e}")))?;
        code_to_string(&format!("the {what} on stdin"), code)
    } else {
        // A plain read: nothing else runs yet, and tokio::fs would start a blocking
        // thread just for this.
        let name = file.display().to_string();
        let code =
            std::fs::read(file).map_err(|e| Failure::Local(format!("cannot read {name}: {e}")))?;
        code_to_string(&name, code)
    }
    .map_err(Failure::Local)
}

async fn run_inner(socket: &Path, args: RunArgs, verbose: bool) -> Result<i32, Failure> {
    let code_from_stdin = args.file.as_os_str() == "-";
    let code = read_code(&args.file, "script").await?;

    let stdin_choice = choose_stdin(
        code_from_stdin,
        args.no_stdin,
        args.stdin_file,
        stdin_has_nothing_to_forward(),
    );
    let stdin: Option<Box<dyn AsyncRead + Unpin + Send>> = match stdin_choice {
        StdinSource::Empty => None,
        StdinSource::Inherit => Some(Box::new(tokio::io::stdin())),
        StdinSource::File(path) => {
            let file = tokio::fs::File::open(&path).await.map_err(|e| {
                Failure::Local(format!("cannot open stdin file {}: {e}", path.display()))
            })?;
            Some(Box::new(file))
        }
    };

    let mut job = Job::new(code).profile(args.profile).args(args.args);
    job.limits.wall_ms = args.timeout;
    job.limits.cpu_ms = args.limits.cpu;
    job.limits.memory_bytes = args.limits.memory;
    job.limits.pids = args.limits.pids;
    job.limits.output_bytes = args.limits.output;
    job.packages = args.with;
    job.files = super::files::read_files(&args.files).map_err(Failure::Local)?;
    job.outputs = super::artifacts::outputs(&args.outputs);
    let mut artifacts = Artifacts::new(&args.outputs).map_err(Failure::save)?;

    let mut client = Client::connect(socket).await?;
    let mut sink = Sink::new(args.json);
    let (outcome, packages, sandbox) =
        drive(&mut client, &job, stdin, &mut sink, &mut artifacts, verbose).await?;

    if sink.stdout_closed && outcome.reason == Reason::Cancelled {
        // We stopped the job because our reader went away: exit as a process killed by
        // SIGPIPE would, and say nothing (`viv run gen.py | head` is not an error).
        return Ok(EXIT_SIGPIPE);
    }
    let code = artifacts.finish(exit_code_for(&outcome), args.json);
    if args.json {
        print_json(&JsonRun {
            outcome: &outcome,
            packages: packages.as_ref(),
            sandbox,
            exit_code: code,
            stdout: String::from_utf8_lossy(&sink.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&sink.stderr).into_owned(),
            artifacts: &artifacts.listed,
            artifacts_report: artifacts.report.as_ref(),
        });
    } else if is_abnormal(&outcome) && !verbose {
        eprintln!("viv: {}", summary_line(&outcome));
    }
    if verbose {
        if let Some(p) = &packages {
            eprintln!(
                "viv: packages: {} ({}, {} bytes{})",
                p.resolved.join(" "),
                if p.from_cache {
                    "cached environment"
                } else {
                    "installed now"
                },
                p.env_bytes,
                if p.from_cache {
                    String::new()
                } else {
                    format!(", {} ms", p.install_ms)
                }
            );
        }
        if let Some(start) = sandbox {
            eprintln!("viv: sandbox: {}", sandbox_line(start));
        }
        eprint!("{}", verbose_report(&outcome));
    }
    Ok(code)
}

/// Submit and follow the job to its outcome. The first ctrl-c cancels the job (the outcome
/// still arrives); a second one gives up at once, closing the connection (which kills the job).
async fn drive(
    client: &mut Client,
    job: &Job,
    stdin: Option<Box<dyn AsyncRead + Unpin + Send>>,
    sink: &mut Sink,
    artifacts: &mut Artifacts,
    verbose: bool,
) -> Result<(Outcome, Option<PackagesReport>, Option<SandboxStart>), Failure> {
    let mut sigint = signal(SignalKind::interrupt())
        .map_err(|e| Failure::Local(format!("cannot handle ctrl-c: {e}")))?;
    let mut handle = client.submit(job, stdin).await?;
    let mut cancelled = false;
    loop {
        let event = tokio::select! {
            event = handle.next_event() => event?,
            _ = sigint.recv() => {
                if cancelled {
                    eprintln!("viv: interrupted again; closing the connection");
                    std::process::exit(EXIT_CANCELLED);
                }
                cancelled = true;
                eprintln!("viv: cancelling the job (ctrl-c again to quit now)");
                cancel_aside(handle.canceller());
                continue;
            }
        };
        match event {
            Some(JobEvent::Queued { position }) if verbose => {
                eprintln!("viv: queued, position {position}");
            }
            Some(JobEvent::Started { job_id, profile }) if verbose => {
                eprintln!("viv: job {job_id} started (profile {profile})");
            }
            Some(JobEvent::Queued { .. } | JobEvent::Started { .. }) => {}
            Some(JobEvent::Artifact(a)) => artifacts.take(*a),
            Some(JobEvent::Artifacts(r)) => artifacts.set_report(*r),
            Some(JobEvent::Output(stream, bytes)) => {
                if sink.write(stream, &bytes) && !cancelled {
                    // Our stdout is gone (`viv run x.py | head`): stop the job, as the
                    // SIGPIPE it would get outside the sandbox would.
                    cancelled = true;
                    cancel_aside(handle.canceller());
                }
            }
            Some(JobEvent::Finished(outcome)) => {
                return Ok((*outcome, handle.packages().cloned(), handle.sandbox()));
            }
            None => return Err(ClientError::Protocol("job ended without an outcome".into()).into()),
        }
    }
}

/// How the job's sandbox was made, for `-v`.
fn sandbox_line(start: SandboxStart) -> String {
    match start {
        SandboxStart::Cold => "built for this job (cold start)".into(),
        SandboxStart::Ready { sandbox_id } => {
            format!("ready, built ahead by a cold start (sandbox {sandbox_id})")
        }
        SandboxStart::Forked {
            sandbox_id,
            ready: true,
        } => format!("ready, forked ahead from the profile's zygote (sandbox {sandbox_id})"),
        SandboxStart::Forked { sandbox_id, .. } => {
            format!("forked for this job from the profile's zygote (sandbox {sandbox_id})")
        }
    }
}

/// Send the job's (or cell's) `Cancel` from a task of its own and go on reading events: the send
/// can wait behind stdin the job has not read (docs/protocol.md, flow control), and a job
/// blocked on output nobody reads would never read it. (A failed send needs no report:
/// the connection is then gone, and the daemon kills the job for that.)
pub(crate) fn cancel_aside(canceller: Canceller) {
    tokio::spawn(async move {
        let _ = canceller.cancel().await;
    });
}

/// Where output goes: straight to viv's stdout/stderr, or collected for `--json`.
pub(crate) struct Sink {
    collect: bool,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
    pub(crate) stdout_closed: bool,
}

impl Sink {
    pub(crate) fn new(collect: bool) -> Sink {
        Sink {
            collect,
            stdout: Vec::new(),
            stderr: Vec::new(),
            stdout_closed: false,
        }
    }

    /// Write or collect a chunk; returns true when stdout has just become unwritable.
    pub(crate) fn write(&mut self, stream: Stream, bytes: &[u8]) -> bool {
        match (self.collect, stream) {
            (true, Stream::Stdout) => self.stdout.extend_from_slice(bytes),
            (true, Stream::Stderr) => self.stderr.extend_from_slice(bytes),
            (false, Stream::Stdout) if !self.stdout_closed => {
                let mut out = std::io::stdout().lock();
                if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
                    if e.kind() != std::io::ErrorKind::BrokenPipe {
                        eprintln!("viv: cannot write the job's output: {e}");
                    }
                    self.stdout_closed = true;
                    return true;
                }
            }
            (false, Stream::Stdout) => {}
            (false, Stream::Stderr) => {
                let mut err = std::io::stderr().lock();
                // Nowhere left to complain to if stderr itself fails.
                let _ = err.write_all(bytes).and_then(|()| err.flush());
            }
        }
        false
    }
}

pub(crate) fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("viv: cannot encode the result as JSON: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_client::proto::{ExitStatus, Isolation, Usage};

    #[test]
    fn stdin_choice() {
        use StdinSource::*;
        let file = || Some(PathBuf::from("in.txt"));
        // (code from stdin, --no-stdin, --stdin-file, stdin is a tty) -> source
        assert_eq!(choose_stdin(false, false, None, false), Inherit);
        assert_eq!(choose_stdin(false, false, None, true), Empty);
        assert_eq!(choose_stdin(false, true, None, false), Empty);
        assert_eq!(choose_stdin(true, false, None, false), Empty);
        assert_eq!(
            choose_stdin(true, false, file(), false),
            File("in.txt".into())
        );
        assert_eq!(
            choose_stdin(false, false, file(), true),
            File("in.txt".into())
        );
    }

    #[test]
    fn code_must_be_utf8() {
        assert_eq!(
            code_to_string("a.py", b"print(1)".to_vec()),
            Ok("print(1)".into())
        );
        let err = code_to_string("a.py", b"print(1)\n\xff".to_vec()).unwrap_err();
        assert!(err.contains("a.py is not valid UTF-8"), "{err}");
        assert!(err.contains("offset 9"), "{err}");
    }

    #[test]
    fn json_view_flattens_the_outcome() {
        let outcome = Outcome {
            job_id: 7,
            profile: "default".into(),
            reason: Reason::Ok,
            exit: ExitStatus::Code(0),
            limits_hit: vec![],
            usage: Usage::default(),
            stdout_truncated: false,
            stderr_truncated: false,
            isolation: Isolation::default(),
            detail: String::new(),
        };
        let value = serde_json::to_value(JsonRun {
            outcome: &outcome,
            packages: None,
            sandbox: Some(SandboxStart::Ready { sandbox_id: 7 }),
            exit_code: 0,
            stdout: "hi\n".into(),
            stderr: String::new(),
            artifacts: &[],
            artifacts_report: None,
        })
        .unwrap();
        assert_eq!(value["job_id"], 7);
        assert_eq!(value["artifacts"], serde_json::json!([]));
        assert!(value["artifacts_report"].is_null());
        assert_eq!(value["reason"], "Ok");
        assert_eq!(value["exit"]["Code"], 0);
        assert_eq!(value["stdout"], "hi\n");
        assert_eq!(value["exit_code"], 0);
        assert_eq!(value["usage"]["wall_ms"], 0);
        assert_eq!(value["sandbox"]["Ready"]["sandbox_id"], 7);
    }

    #[test]
    fn json_failure_carries_the_code() {
        let value = serde_json::to_value(JsonFailure {
            error: JsonErrorBody {
                code: Some(ErrorCode::Busy),
                message: "busy".into(),
            },
            session_ended: None,
            exit_code: 125,
        })
        .unwrap();
        assert_eq!(value["error"]["code"], "Busy");
    }
}
