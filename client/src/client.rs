//! The requests a client makes: hello, profile listing, and the one-call ways to run a
//! job. The transport and the conversation's state are the connection's (`conn`).

use std::path::Path;

use tokio::io::AsyncRead;
use vivarium_proto::{Event, HelloAck, Outcome, ProfileInfo, Request};

use crate::artifacts::Artifact;
use crate::conn::{send, unexpected, Conn, ConnState};
use crate::job::{Job, JobEvent, JobHandle, Stream};
use crate::{default_client_name, ClientError, Result};

/// One connection to `vivariumd`, past the hello.
#[derive(Debug)]
pub struct Client {
    pub(crate) conn: Conn,
}

/// What [`Client::run_collect`] returns: the outcome and every output byte, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collected {
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The job's package environment, if it asked for packages.
    pub packages: Option<vivarium_proto::PackagesReport>,
    /// How the job's sandbox was made (protocol 5+ daemons say).
    pub sandbox: Option<vivarium_proto::SandboxStart>,
    /// The files the job returned (protocol 8+), in path order.
    pub artifacts: Vec<Artifact>,
    /// What matched and was not returned (protocol 8+ and a job that asked for outputs).
    pub artifacts_report: Option<vivarium_proto::ArtifactsReport>,
}

impl Client {
    /// Connect to the daemon at `path` and send the hello, announcing this library as
    /// `viv/<version>`. The daemon's answer is read with the first request's (one round
    /// trip fewer per connection): a refused hello surfaces there, or from
    /// [`Client::hello`].
    pub async fn connect(path: impl AsRef<Path>) -> Result<Client> {
        Self::connect_as(path, &default_client_name()).await
    }

    /// Like [`Client::connect`], announcing `client_name` (e.g. `vivarium-mcp/0.1.0`) in the
    /// hello for the daemon's logs.
    pub async fn connect_as(path: impl AsRef<Path>, client_name: &str) -> Result<Client> {
        let conn = Conn::open(path.as_ref(), client_name).await?;
        Ok(Client { conn })
    }

    /// The daemon's answer to the hello: negotiated version, daemon name, and the uid it
    /// saw (read now if no request has read it yet).
    pub async fn hello(&mut self) -> Result<&HelloAck> {
        let conn = &mut self.conn;
        if conn.hello.is_none() {
            conn.begin()?;
            // (On failure the connection is broken: settle is not for this one.)
            conn.await_hello().await?;
            conn.state = ConnState::Ready;
        }
        Ok(conn.hello.as_ref().expect("await_hello stored the ack"))
    }

    /// The profiles the daemon knows, each with whether this host can enforce it.
    pub async fn list_profiles(&mut self) -> Result<Vec<ProfileInfo>> {
        self.ask(
            &Request::ListProfiles,
            "the profile list",
            |event| match event {
                Event::Profiles(profiles) => Ok(Some(profiles)),
                other => Err(other),
            },
        )
        .await
    }

    /// What each profile offers beyond [`ProfileInfo`] (whether its jobs can have
    /// packages), or `None` from a daemon older than protocol 4, which cannot say.
    pub async fn list_profile_features(
        &mut self,
    ) -> Result<Option<Vec<vivarium_proto::ProfileFeatures>>> {
        // Only version 4 knows the request: wait for the hello's answer first.
        if self.hello().await?.version < 4 {
            return Ok(None);
        }
        let request = Request::ListProfileFeatures;
        self.ask(&request, "the profile features", |event| match event {
            Event::ProfileFeatures(features) => Ok(Some(Some(features))),
            other => Err(other),
        })
        .await
    }

    /// Send `request` and read its one answer. `answer` picks it from the events:
    /// `Ok(Some(_))` is the answer, `Ok(None)` an event to pass over, `Err(event)` one that
    /// makes no sense here (a protocol error naming `wanted`). `Error` and
    /// `SessionExpired` are the daemon's refusals, whatever was asked.
    pub(crate) async fn ask<T>(
        &mut self,
        request: &Request,
        wanted: &str,
        mut answer: impl FnMut(Event) -> Result<Option<T>, Event>,
    ) -> Result<T> {
        let conn = &mut self.conn;
        conn.begin()?;
        let result = async {
            send(&conn.sock, request).await?;
            conn.await_hello().await?;
            loop {
                match conn.recv().await? {
                    Event::Error(e) => return Err(ClientError::Refused(e)),
                    Event::SessionExpired(ended) => return Err(ClientError::SessionExpired(ended)),
                    event => match answer(event) {
                        Ok(Some(value)) => return Ok(value),
                        Ok(None) => {}
                        Err(other) => return Err(unexpected(wanted, &other)),
                    },
                }
            }
        }
        .await;
        conn.settle(result)
    }

    /// Submit `job`; events then come from [`JobHandle::next_event`]. With `stdin`, the job's
    /// stdin is streamed from it (while events are awaited) and closed at its end; without,
    /// the job's stdin is empty.
    pub async fn submit<'c, R>(&'c mut self, job: &Job, stdin: Option<R>) -> Result<JobHandle<'c>>
    where
        R: AsyncRead + Unpin + Send + 'c,
    {
        // Which request carries the job depends on the daemon's version when it wants
        // artifacts: the hello's answer, in flight since the connect, is read first.
        // The default outputs need no version: on a protocol-8 connection every request
        // asks for them, so the request goes out with the hello, not after its answer.
        // Other outputs need `SubmitJob`, which only a protocol-8 daemon takes.
        let version = if job.outputs != vivarium_proto::Outputs::Default {
            self.hello().await?.version
        } else {
            crate::artifacts::ARTIFACTS_PROTOCOL - 1
        };
        // Built first: a broken file rule needs no round trip to be reported.
        let frames = crate::job::submit_frames(job, stdin.is_some(), version);
        if frames.is_ok() && !job.packages.is_empty() {
            // Only version 2 takes packages: this request waits for the hello's answer.
            let version = self.hello().await?.version;
            if version < 2 {
                return Err(ClientError::Protocol(format!(
                    "packages need protocol version 2; the daemon speaks {version}"
                )));
            }
        }
        if frames.is_ok() && !job.files.is_empty() {
            self.require_files().await?;
        }
        let core = crate::exchange::start(&mut self.conn, frames, stdin).await?;
        Ok(JobHandle::new(core))
    }

    /// Refuse, before sending anything, when the daemon takes no input files.
    pub(crate) async fn require_files(&mut self) -> Result<()> {
        let version = self.hello().await?.version;
        if version < crate::FILES_PROTOCOL {
            return Err(ClientError::FilesUnsupported { version });
        }
        Ok(())
    }

    /// Run `job` to its end, handing each output chunk to `on_output` as it arrives.
    /// Returns the outcome; a refused job is `Err(ClientError::Refused(..))`.
    pub async fn run<R>(
        &mut self,
        job: &Job,
        stdin: Option<R>,
        mut on_output: impl FnMut(Stream, &[u8]),
    ) -> Result<Outcome>
    where
        R: AsyncRead + Unpin + Send,
    {
        let mut handle = self.submit(job, stdin).await?;
        while let Some(event) = handle.next_event().await? {
            match event {
                JobEvent::Output(stream, bytes) => on_output(stream, &bytes),
                JobEvent::Finished(outcome) => return Ok(*outcome),
                JobEvent::Queued { .. }
                | JobEvent::Started { .. }
                | JobEvent::Artifact(_)
                | JobEvent::Artifacts(_) => {}
            }
        }
        Err(ClientError::Protocol("job ended without an outcome".into()))
    }

    /// Run `job` with `stdin` (or empty stdin) and collect the outcome and all its output.
    pub async fn run_collect(&mut self, job: &Job, stdin: Option<&[u8]>) -> Result<Collected> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let (mut artifacts, mut artifacts_report) = (Vec::new(), None);
        let mut handle = self.submit(job, stdin).await?;
        while let Some(event) = handle.next_event().await? {
            match event {
                JobEvent::Output(Stream::Stdout, bytes) => stdout.extend_from_slice(&bytes),
                JobEvent::Output(Stream::Stderr, bytes) => stderr.extend_from_slice(&bytes),
                JobEvent::Artifact(a) => artifacts.push(*a),
                JobEvent::Artifacts(r) => artifacts_report = Some(*r),
                JobEvent::Finished(outcome) => {
                    return Ok(Collected {
                        outcome: *outcome,
                        stdout,
                        stderr,
                        packages: handle.packages().cloned(),
                        sandbox: handle.sandbox(),
                        artifacts,
                        artifacts_report,
                    })
                }
                JobEvent::Queued { .. } | JobEvent::Started { .. } => {}
            }
        }
        Err(ClientError::Protocol("job ended without an outcome".into()))
    }
}
