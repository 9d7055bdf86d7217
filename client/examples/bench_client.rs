//! Benchmark driver for `bench/perf.py`: times jobs submitted through the client library.
//!
//! Two modes:
//! - `latency`: reads one line per job on stdin, runs the job on a fresh connection and
//!   writes its submit-to-outcome time in milliseconds on stdout, then where its sandbox
//!   came from (`cold`, `ready`, `forked`, or `unknown` from an older daemon), so the Python
//!   driver can interleave library jobs with other launchers, pair by pair.
//! - `throughput`: `--clients N` tasks, each on its own connection, run jobs back to back
//!   for `--seconds S`; prints `jobs=<n> seconds=<s> failed=<n> ready=<n> forked=<n>`
//!   (`ready`: jobs that took a sandbox built ahead; `forked`: forked from a zygote).
//!
//! - `session`: for each line on stdin, opens a session (on a connection kept open),
//!   runs `--cells` cells `x = 1` and as many `x` in it, alternating, and closes it;
//!   writes `open <ms> <kind>`, then `assign <ms>` and `value <ms>` per cell, then `close
//!   <ms>`: the open's time (to `SessionOpened`) and each cell's round trip (request to
//!   `CellFinished`), through the library on one connection.
//! - `hold`: opens `--clients N` sessions, runs one cell `x = 1` in each, prints
//!   `held <handles...>`, and keeps them open until stdin closes (for an idle session's
//!   memory, read from outside).
//!
//! With `--input-bytes N`, each job carries an input file `input.bin` of N bytes (for
//! `bench/files.py`, the cost of input files per MB); with `--expect-artifact-bytes N`,
//! a job must return N bytes of artifacts (the cost of artifacts per MB).
//!
//! A job that does not end `ok` with the expected stdout counts as failed (and makes
//! `latency` exit non-zero): a benchmark of failing jobs measures nothing.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use vivarium_client::proto::{CellStatus, Reason, SandboxStart, SessionHandle};
use vivarium_client::{Cell, Client, Job, SessionSpec};

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Latency,
    Throughput,
    Session,
    Hold,
}

#[derive(Parser)]
struct Args {
    #[arg(long)]
    socket: std::path::PathBuf,
    #[arg(long, default_value = "default")]
    profile: String,
    #[arg(long, default_value = "print(1)")]
    code: String,
    /// What a successful job prints on stdout.
    #[arg(long, default_value = "1\n")]
    expect: String,
    #[arg(long, value_enum, default_value = "latency")]
    mode: Mode,
    #[arg(long, default_value_t = 1)]
    clients: usize,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// A PyPI requirement for the job (repeatable).
    #[arg(long = "package")]
    packages: Vec<String>,
    /// `session` mode: pairs of cells (`x = 1`, then `x`) per session.
    #[arg(long, default_value_t = 20)]
    cells: usize,
    /// `latency` and `throughput`: each job carries an input file `input.bin` of this
    /// many bytes (0: none; the job is then submitted exactly as without the option).
    #[arg(long, default_value_t = 0)]
    input_bytes: usize,
    /// `latency`: the artifacts' bytes each job must return (checked, as the stdout is).
    #[arg(long, default_value_t = 0)]
    expect_artifact_bytes: u64,
    /// `latency`: ask for no artifacts (`Outputs::None`): what their collection costs a
    /// job that makes none is the difference.
    #[arg(long)]
    no_outputs: bool,
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// Open a session on `client`, returning it and how its sandbox was made.
async fn open(client: &mut Client, args: &Args) -> Result<(SessionHandle, &'static str)> {
    let mut spec = SessionSpec::new().profile(args.profile.clone());
    for p in &args.packages {
        spec = spec.package(p.clone());
    }
    let opened = client.open_session(&spec).await?;
    Ok((opened.info.handle, kind(Some(opened.sandbox))))
}

/// Run one cell, which must end `Ok` with `value`.
async fn cell(
    client: &mut Client,
    h: &SessionHandle,
    code: &str,
    value: Option<&str>,
) -> Result<f64> {
    let start = Instant::now();
    let done = client
        .exec_cell_collect(&Cell::new(h.clone(), code), None)
        .await?;
    let ms = ms_since(start);
    if done.outcome.status != CellStatus::Ok || done.outcome.value.as_deref() != value {
        bail!(
            "cell {code:?} ended {:?} with value {:?}",
            done.outcome.status,
            done.outcome.value
        );
    }
    Ok(ms)
}

async fn one_session(args: &Args) -> Result<()> {
    let mut client = Client::connect(&args.socket).await?;
    let start = Instant::now();
    let (h, kind) = open(&mut client, args).await?;
    println!("open {:.3} {kind}", ms_since(start));
    for _ in 0..args.cells {
        println!("assign {:.3}", cell(&mut client, &h, "x = 1", None).await?);
        println!("value {:.3}", cell(&mut client, &h, "x", Some("1")).await?);
    }
    let start = Instant::now();
    client.close_session(&h).await?;
    println!("close {:.3}", ms_since(start));
    Ok(())
}

/// Where a job's sandbox came from, as the daemon said.
fn kind(start: Option<SandboxStart>) -> &'static str {
    match start {
        Some(SandboxStart::Cold) => "cold",
        Some(SandboxStart::Ready { .. }) => "ready",
        Some(SandboxStart::Forked { .. }) => "forked",
        None => "unknown",
    }
}

async fn one_job(args: &Args) -> Result<(f64, &'static str)> {
    let mut job = Job::new(args.code.clone()).profile(args.profile.clone());
    if args.no_outputs {
        job = job.outputs(vivarium_client::proto::Outputs::None);
    }
    for p in &args.packages {
        job = job.package(p.clone());
    }
    if args.input_bytes > 0 {
        // Bytes that do not compress, made before the clock starts.
        let data: Vec<u8> = (0..args.input_bytes)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        job = job.file("input.bin", data);
    }
    let start = Instant::now();
    let mut client = Client::connect(&args.socket).await?;
    let done = client.run_collect(&job, None).await?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let returned: u64 = done.artifacts.iter().map(|a| a.data.len() as u64).sum();
    if returned != args.expect_artifact_bytes {
        bail!(
            "job returned {returned} bytes of artifacts, not {}",
            args.expect_artifact_bytes
        );
    }
    if done.outcome.reason != Reason::Ok || done.stdout != args.expect.as_bytes() {
        bail!(
            "job ended {:?} with stdout {:?}, stderr {:?}",
            done.outcome.reason,
            String::from_utf8_lossy(&done.stdout),
            String::from_utf8_lossy(&done.stderr)
        );
    }
    Ok((ms, kind(done.sandbox)))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    match args.mode {
        Mode::Latency => {
            let stdin = std::io::stdin();
            for line in stdin.lock().lines() {
                line.context("reading stdin")?;
                let (ms, kind) = one_job(&args).await?;
                println!("{ms:.3} {kind}");
            }
        }
        Mode::Session => {
            for line in std::io::stdin().lock().lines() {
                line.context("reading stdin")?;
                one_session(&args).await?;
            }
        }
        Mode::Hold => {
            let mut client = Client::connect(&args.socket).await?;
            let mut held = Vec::new();
            for _ in 0..args.clients {
                let (h, _) = open(&mut client, &args).await?;
                cell(&mut client, &h, "x = 1", None).await?;
                held.push(h.0);
            }
            println!("held {}", held.join(" "));
            use std::io::Write;
            std::io::stdout().flush()?;
            for line in std::io::stdin().lock().lines() {
                line.context("reading stdin")?;
            }
            for h in held {
                client.close_session(&SessionHandle(h)).await?;
            }
        }
        Mode::Throughput => {
            let args = std::sync::Arc::new(args);
            let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for _ in 0..args.clients {
                let args = args.clone();
                tasks.push(tokio::spawn(async move {
                    let (mut ok, mut failed, mut ready, mut forked) = (0u64, 0u64, 0u64, 0u64);
                    while Instant::now() < deadline {
                        match one_job(&args).await {
                            Ok((_, kind)) => {
                                ok += 1;
                                ready += u64::from(kind == "ready");
                                forked += u64::from(kind == "forked");
                            }
                            Err(_) => failed += 1,
                        }
                    }
                    (ok, failed, ready, forked)
                }));
            }
            let (mut ok, mut failed, mut ready, mut forked) = (0, 0, 0, 0);
            for t in tasks {
                let (o, f, r, z) = t.await?;
                ok += o;
                failed += f;
                ready += r;
                forked += z;
            }
            let secs = start.elapsed().as_secs_f64();
            println!("jobs={ok} seconds={secs:.3} failed={failed} ready={ready} forked={forked}");
        }
    }
    Ok(())
}
