//! The requests a client makes: hello, profile listing, and the one-call ways to run a
//! job. The transport and the conversation's state are the connection's (`conn`).

use std::path::Path;

use tokio::io::AsyncRead;
use vivarium_proto::{Event, HelloAck, Outcome, ProfileInfo, Request};

use crate::conn::{send, send_frame, unexpected, Conn, ConnState};
use crate::job::{Job, JobEvent, JobHandle, Stream};
use crate::{default_client_name, ClientError, Result};

/// One connection to `vivariumd`, past the hello.
#[derive(Debug)]
pub struct Client {
    conn: Conn,
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
        let conn = &mut self.conn;
        conn.begin()?;
        let result = async {
            send(&conn.sock, &Request::ListProfiles).await?;
            conn.await_hello().await?;
            match conn.recv().await? {
                Event::Profiles(profiles) => Ok(profiles),
                Event::Error(e) => Err(ClientError::Refused(e)),
                other => Err(unexpected("the profile list", &other)),
            }
        }
        .await;
        conn.settle(result)
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
        let conn = &mut self.conn;
        conn.begin()?;
        let result = async {
            send(&conn.sock, &Request::ListProfileFeatures).await?;
            match conn.recv().await? {
                Event::ProfileFeatures(features) => Ok(Some(features)),
                Event::Error(e) => Err(ClientError::Refused(e)),
                other => Err(unexpected("the profile features", &other)),
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
        if !job.packages.is_empty() {
            // Only version 2 takes packages: this request waits for the hello's answer.
            let version = self.hello().await?.version;
            if version < 2 {
                return Err(ClientError::Protocol(format!(
                    "packages need protocol version 2; the daemon speaks {version}"
                )));
            }
        }
        let conn = &mut self.conn;
        conn.begin()?;
        let frames = match crate::job::submit_frames(job, stdin.is_some()) {
            Ok(frames) => frames,
            Err(e) => {
                // Nothing was sent: the connection is still in step.
                conn.state = ConnState::Ready;
                return Err(e.into());
            }
        };
        for frame in &frames {
            if let Err(e) = send_frame(&conn.sock, frame).await {
                // The daemon may have refused the job and closed before taking every chunk:
                // its reason beats our EPIPE.
                let e = conn.refusal_after_send_error().await.unwrap_or(e);
                conn.break_conn();
                return Err(e);
            }
        }
        Ok(JobHandle::new(conn, stdin))
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
                JobEvent::Queued { .. } | JobEvent::Started { .. } => {}
            }
        }
        Err(ClientError::Protocol("job ended without an outcome".into()))
    }

    /// Run `job` with `stdin` (or empty stdin) and collect the outcome and all its output.
    pub async fn run_collect(&mut self, job: &Job, stdin: Option<&[u8]>) -> Result<Collected> {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut handle = self.submit(job, stdin).await?;
        while let Some(event) = handle.next_event().await? {
            match event {
                JobEvent::Output(Stream::Stdout, bytes) => stdout.extend_from_slice(&bytes),
                JobEvent::Output(Stream::Stderr, bytes) => stderr.extend_from_slice(&bytes),
                JobEvent::Finished(outcome) => {
                    return Ok(Collected {
                        outcome: *outcome,
                        stdout,
                        stderr,
                        packages: handle.packages().cloned(),
                        sandbox: handle.sandbox(),
                    })
                }
                JobEvent::Queued { .. } | JobEvent::Started { .. } => {}
            }
        }
        Err(ClientError::Protocol("job ended without an outcome".into()))
    }
}
