//! `viv exec`: run one cell in a session, stream its output, show its value or its
//! traceback, exit with a code for how it ended. The cell-driving and the showing are
//! shared with `viv repl`.

use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio::io::AsyncRead;
use tokio::signal::unix::{signal, Signal, SignalKind};
use vivarium_client::proto::{ArtifactsReport, CellOutcome, CellStatus, SessionHandle};
use vivarium_client::{
    cell_exit_code, expired_message, format_bytes, format_ms, Cell, CellEvent, Client, ClientError,
    EXIT_CANCELLED,
};

use super::artifacts::{Artifacts, ListedArtifact};
use super::run::{
    cancel_aside, print_json, read_code, report_failure, Failure, Sink, EXIT_SIGPIPE,
};
use super::ExecArgs;

/// What `--json` prints: the cell's outcome, the exit code, and the output.
#[derive(Debug, Serialize)]
struct JsonCell<'a> {
    #[serde(flatten)]
    outcome: &'a CellOutcome,
    exit_code: i32,
    stdout: String,
    stderr: String,
    /// The artifacts returned (in a session: the files new or changed since the last
    /// collection), and where `--out` saved them.
    artifacts: &'a [ListedArtifact],
    /// What was not returned; null without a report (`--no-outputs`, an older daemon).
    artifacts_report: Option<&'a ArtifactsReport>,
}

pub(crate) async fn exec(socket: &Path, args: ExecArgs) -> i32 {
    let json = args.json;
    match exec_inner(socket, args).await {
        Ok(code) => code,
        Err(failure) => report_failure(&failure, json),
    }
}

async fn exec_inner(socket: &Path, args: ExecArgs) -> Result<i32, Failure> {
    let code = read_code(&args.file, "cell").await?;
    let stdin: Option<Box<dyn AsyncRead + Unpin + Send>> = match &args.stdin {
        None => None,
        Some(path) => Some(Box::new(open_stdin(path).await?)),
    };
    let mut cell = Cell::new(SessionHandle(args.handle), code);
    cell.wall_ms = args.wall;
    cell.files = super::files::read_files(&args.files).map_err(Failure::Local)?;
    cell.outputs = super::artifacts::outputs(&args.outputs);
    let mut artifacts = Artifacts::new(&args.outputs).map_err(Failure::save)?;
    let mut client = Client::connect(socket).await?;
    let mut sigint = sigint()?;
    let mut sink = Sink::new(args.json);
    let outcome = drive_cell(
        &mut client,
        &cell,
        stdin,
        &mut sink,
        Some(&mut artifacts),
        &mut sigint,
        true,
    )
    .await?;
    if sink.stdout_closed && outcome.status == CellStatus::Interrupted {
        // Interrupted because our reader went away (`viv exec H x.py | head`).
        return Ok(EXIT_SIGPIPE);
    }
    let code = artifacts.finish(cell_exit_code(&outcome), args.json);
    if args.json {
        print_json(&JsonCell {
            outcome: &outcome,
            exit_code: code,
            stdout: String::from_utf8_lossy(&sink.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&sink.stderr).into_owned(),
            artifacts: &artifacts.listed,
            artifacts_report: artifacts.report.as_ref(),
        });
    } else {
        show_outcome(&outcome, "viv: ");
    }
    Ok(code)
}

async fn open_stdin(path: &PathBuf) -> Result<tokio::fs::File, Failure> {
    tokio::fs::File::open(path)
        .await
        .map_err(|e| Failure::Local(format!("cannot open stdin file {}: {e}", path.display())))
}

pub(crate) fn sigint() -> Result<Signal, Failure> {
    signal(SignalKind::interrupt())
        .map_err(|e| Failure::Local(format!("cannot handle ctrl-c: {e}")))
}

/// Run `cell` and follow it to its outcome, its output into `sink`, its artifacts into
/// `artifacts` (dropped without). A ctrl-c interrupts
/// the cell (its outcome still comes, and the session keeps its state); a second one
/// quits at once with `quit_on_second` (closing the connection, which interrupts the cell
/// too), or interrupts again without.
pub(crate) async fn drive_cell(
    client: &mut Client,
    cell: &Cell,
    stdin: Option<Box<dyn AsyncRead + Unpin + Send>>,
    sink: &mut Sink,
    mut artifacts: Option<&mut Artifacts>,
    sigint: &mut Signal,
    quit_on_second: bool,
) -> Result<CellOutcome, ClientError> {
    let mut running = client.exec_cell(cell, stdin).await?;
    let mut interrupted = false;
    loop {
        let event = tokio::select! {
            event = running.next_event() => event?,
            _ = sigint.recv() => {
                if interrupted && quit_on_second {
                    eprintln!("viv: interrupted again; closing the connection (the session stays)");
                    std::process::exit(EXIT_CANCELLED);
                }
                if quit_on_second {
                    eprintln!("viv: interrupting the cell (ctrl-c again to quit now)");
                }
                interrupted = true;
                cancel_aside(running.interrupter());
                continue;
            }
        };
        match event {
            Some(CellEvent::Output(stream, bytes)) => {
                if sink.write(stream, &bytes) && !interrupted {
                    interrupted = true;
                    cancel_aside(running.interrupter());
                }
            }
            Some(CellEvent::Artifact(a)) => {
                if let Some(artifacts) = artifacts.as_deref_mut() {
                    artifacts.take(*a);
                }
            }
            Some(CellEvent::Artifacts(r)) => {
                if let Some(artifacts) = artifacts.as_deref_mut() {
                    artifacts.set_report(*r);
                }
            }
            Some(CellEvent::Finished(outcome)) => return Ok(*outcome),
            None => {
                return Err(ClientError::Protocol(
                    "cell ended without an outcome".into(),
                ))
            }
        }
    }
}

/// Show how a cell ended, as a REPL does: its value on stdout, its traceback on stderr,
/// and a line (prefixed `prefix`) on stderr for anything else.
pub(crate) fn show_outcome(outcome: &CellOutcome, prefix: &str) {
    if let Some(value) = &outcome.value {
        println!(
            "{value}{}",
            if outcome.value_truncated { " ..." } else { "" }
        );
    }
    if let Some(line) = status_line(outcome) {
        eprintln!("{prefix}{line}");
    }
    if let CellStatus::Exception(e) = &outcome.status {
        if e.traceback.is_empty() {
            eprintln!("{}: {}", e.type_name, e.message);
        } else {
            eprint!("{}", e.traceback);
            if !e.traceback.ends_with('\n') {
                eprintln!();
            }
        }
        if e.traceback_truncated {
            eprintln!("{prefix}(traceback truncated)");
        }
    }
    for (truncated, name, bytes) in [
        (outcome.stdout_truncated, "stdout", outcome.stdout_bytes),
        (outcome.stderr_truncated, "stderr", outcome.stderr_bytes),
    ] {
        if truncated {
            eprintln!(
                "{prefix}cell {}: {name} truncated at {}",
                outcome.cell,
                format_bytes(bytes)
            );
        }
    }
}

/// The line for a cell that did not simply run (or raise), `None` for those.
pub(crate) fn status_line(outcome: &CellOutcome) -> Option<String> {
    let cell = outcome.cell;
    Some(match &outcome.status {
        CellStatus::Ok | CellStatus::Exception(_) => return None,
        CellStatus::Interrupted => {
            format!("cell {cell} interrupted (KeyboardInterrupt; the state is kept)")
        }
        CellStatus::Timeout => format!(
            "cell {cell} timed out after {} (KeyboardInterrupt; the state is kept)",
            format_ms(outcome.wall_ms)
        ),
        CellStatus::MemoryGuard => format!(
            "cell {cell} interrupted at the memory guard ({} in use; the state is kept)",
            format_bytes(outcome.memory_bytes)
        ),
        CellStatus::SessionEnded(ended) => {
            format!("during cell {cell}: {}", expired_message(ended))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_client::proto::{SessionEndReason, SessionEnded};

    fn outcome(status: CellStatus) -> CellOutcome {
        CellOutcome {
            session: SessionHandle("vs_x".into()),
            cell: 3,
            status,
            value: Some("42".into()),
            value_truncated: false,
            wall_ms: 2_000,
            cpu_ms: 1,
            memory_bytes: 480 << 20,
            peak_memory_bytes: 500 << 20,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            expires_at_unix_ms: 0,
            expires_in_ms: 0,
        }
    }

    #[test]
    fn status_lines_say_whether_the_state_is_kept() {
        assert_eq!(status_line(&outcome(CellStatus::Ok)), None);
        assert_eq!(
            status_line(&outcome(CellStatus::Timeout)).unwrap(),
            "cell 3 timed out after 2.0s (KeyboardInterrupt; the state is kept)"
        );
        assert!(status_line(&outcome(CellStatus::MemoryGuard))
            .unwrap()
            .contains("480M in use"));
        let ended = SessionEnded {
            handle: SessionHandle("vs_x".into()),
            reason: SessionEndReason::Memory,
            detail: String::new(),
            ended_ms_ago: 0,
            cells: 3,
            cpu_ms: 0,
            peak_memory_bytes: 0,
            age_ms: 0,
        };
        let line = status_line(&outcome(CellStatus::SessionEnded(Box::new(ended)))).unwrap();
        assert!(line.contains("ran out of memory"), "{line}");
        assert!(line.contains("state is gone"), "{line}");
    }

    #[test]
    fn json_view_flattens_the_cell_outcome() {
        let o = outcome(CellStatus::Ok);
        let value = serde_json::to_value(JsonCell {
            outcome: &o,
            exit_code: 0,
            stdout: "hi\n".into(),
            stderr: String::new(),
            artifacts: &[],
            artifacts_report: None,
        })
        .unwrap();
        assert_eq!(value["cell"], 3);
        assert_eq!(value["status"], "Ok");
        assert_eq!(value["value"], "42");
        assert_eq!(value["exit_code"], 0);
        assert_eq!(value["stdout"], "hi\n");
    }
}
