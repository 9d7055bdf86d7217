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
//! A job that does not end `ok` with the expected stdout counts as failed (and makes
//! `latency` exit non-zero): a benchmark of failing jobs measures nothing.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use vivarium_client::proto::{Reason, SandboxStart};
use vivarium_client::{Client, Job};

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Latency,
    Throughput,
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
    for p in &args.packages {
        job = job.package(p.clone());
    }
    let start = Instant::now();
    let mut client = Client::connect(&args.socket).await?;
    let done = client.run_collect(&job, None).await?;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
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
