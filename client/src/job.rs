//! A job: what to run ([`Job`]), and the handle that streams its events ([`JobHandle`]).

use vivarium_proto::{
    Event, FrameError, JobSpec, LimitOverrides, Outcome, PackagesReport, Request, SandboxStart,
    SubmitWith,
};

use crate::conn::unexpected;
use crate::exchange::{code_frames, Canceller, Exchange};
use crate::{ClientError, Result};

/// A Python job to submit: the script, its arguments, the profile and tighter limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Profile name; `default` unless set.
    pub profile: String,
    /// The Python source. A `String`, so it is UTF-8 as the daemon requires.
    pub code: String,
    /// `sys.argv[1:]`.
    pub args: Vec<String>,
    /// Per-job limits; `None` keeps the profile's value, and none may exceed it.
    pub limits: LimitOverrides,
    /// PyPI packages (PEP 508 requirement strings) to install into the job's
    /// environment first; needs a protocol-2 daemon and a profile that allows packages.
    /// A PEP 723 `# /// script` block in the code is read by the daemon as well.
    pub packages: Vec<String>,
}

impl Job {
    /// A job running `code` under the `default` profile with its limits.
    pub fn new(code: impl Into<String>) -> Job {
        Job {
            profile: "default".into(),
            code: code.into(),
            args: Vec::new(),
            limits: LimitOverrides::default(),
            packages: Vec::new(),
        }
    }

    /// Add a PEP 508 requirement (e.g. `numpy>=2`).
    pub fn package(mut self, requirement: impl Into<String>) -> Job {
        self.packages.push(requirement.into());
        self
    }

    pub fn profile(mut self, profile: impl Into<String>) -> Job {
        self.profile = profile.into();
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Job {
        self.args.push(arg.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Job {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn limits(mut self, limits: LimitOverrides) -> Job {
        self.limits = limits;
        self
    }

    pub fn wall_ms(mut self, ms: u64) -> Job {
        self.limits.wall_ms = Some(ms);
        self
    }

    pub fn cpu_ms(mut self, ms: u64) -> Job {
        self.limits.cpu_ms = Some(ms);
        self
    }

    pub fn memory_bytes(mut self, bytes: u64) -> Job {
        self.limits.memory_bytes = Some(bytes);
        self
    }

    pub fn pids(mut self, pids: u32) -> Job {
        self.limits.pids = Some(pids);
        self
    }

    pub fn output_bytes(mut self, bytes: u64) -> Job {
        self.limits.output_bytes = Some(bytes);
        self
    }
}

/// The frames that submit `job`: one `Submit`, then `CodeChunk`s when the code does not fit
/// inline. Every frame is at most `MAX_FRAME` bytes.
pub(crate) fn submit_frames(job: &Job, stdin: bool) -> Result<Vec<Vec<u8>>, FrameError> {
    code_frames(job.code.as_bytes(), |code| {
        let spec = JobSpec {
            profile: job.profile.clone(),
            code,
            args: job.args.clone(),
            stdin,
            limits: job.limits.clone(),
        };
        if job.packages.is_empty() {
            Request::Submit(spec)
        } else {
            Request::SubmitWith(Box::new(SubmitWith {
                spec,
                packages: job.packages.clone(),
            }))
        }
    })
}

/// Which output stream a chunk belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One event of a submitted job, in the order the daemon sent them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobEvent {
    /// Waiting for a free slot; 0 is next.
    Queued { position: u32 },
    /// The daemon is building the sandbox for the job.
    Started { job_id: u64, profile: String },
    /// Output bytes, in order within a stream (stdout and stderr are forwarded
    /// independently, so their relative order is not guaranteed).
    Output(Stream, Vec<u8>),
    /// The last event: how the job ended.
    Finished(Box<Outcome>),
}

/// A submitted job. Await [`JobHandle::next_event`] until it returns `Finished` (or a
/// refusal); the job's stdin, if any, is streamed meanwhile.
///
/// Dropping the handle before the job has ended closes the connection, which makes the
/// daemon kill the job; the [`crate::Client`] is then unusable.
pub struct JobHandle<'c> {
    core: Exchange<'c>,
    job_id: Option<u64>,
    /// The job's package environment, once the daemon has reported it.
    packages: Option<PackagesReport>,
    /// How the job's sandbox was made (protocol 5+), once the daemon has said.
    sandbox: Option<SandboxStart>,
}

impl<'c> JobHandle<'c> {
    pub(crate) fn new(core: Exchange<'c>) -> JobHandle<'c> {
        JobHandle {
            core,
            job_id: None,
            packages: None,
            sandbox: None,
        }
    }

    /// How the job's sandbox was made: built for it, taken ready from a pool, or forked
    /// from a zygote; known after `Started` from a protocol-5 daemon.
    pub fn sandbox(&self) -> Option<SandboxStart> {
        self.sandbox
    }

    /// The job's package environment (resolved set, whether it came from the cache), if
    /// it asked for packages; known before `Started`.
    pub fn packages(&self) -> Option<&PackagesReport> {
        self.packages.as_ref()
    }

    /// The daemon's job id, once `Started` has arrived.
    pub fn job_id(&self) -> Option<u64> {
        self.job_id
    }

    /// The next event; `Ok(None)` once the job has ended. A refusal (`Event::Error`) ends the
    /// job and is returned as `Err(ClientError::Refused(..))`; the connection stays usable.
    ///
    /// Cancel-safe: it can be a branch of `tokio::select!` (e.g. against ctrl-c) without
    /// losing events or stdin bytes.
    pub async fn next_event(&mut self) -> Result<Option<JobEvent>> {
        if !self.core.running()? {
            return Ok(None);
        }
        let event = self.next_event_inner().await;
        self.core
            .settle(event, |e| matches!(e, JobEvent::Finished(_)))
            .map(Some)
    }

    /// Ask the daemon to kill the job; its `Finished` (reason `Cancelled`) still follows.
    /// Returns whether a `Cancel` was sent (false once the job has ended). The job's stdin
    /// is not sent any further. The send waits behind stdin the job has not read yet
    /// (stdin is flow-controlled, docs/protocol.md): keep reading events meanwhile (for
    /// instance with a [`Canceller`] in another task), or a job blocked on its output can
    /// hold it up.
    pub async fn cancel(&self) -> Result<bool> {
        self.core.cancel().await
    }

    /// A cloneable, `'static` way to cancel this job from another task. It does not keep the
    /// connection open, and does nothing once this job has ended.
    pub fn canceller(&self) -> Canceller {
        self.core.canceller()
    }

    async fn next_event_inner(&mut self) -> Result<JobEvent> {
        let event = loop {
            match self.core.recv().await? {
                // Reported before `Started`; kept on the handle rather than an event.
                Event::Packages(report) if self.job_id.is_none() && self.packages.is_none() => {
                    self.packages = Some(report);
                }
                // Right after `Started`; kept on the handle as well.
                Event::Sandbox(start) if self.job_id.is_some() && self.sandbox.is_none() => {
                    self.sandbox = Some(start);
                }
                other => break other,
            }
        };
        let started = self.job_id.is_some();
        match event {
            Event::Queued { position } if !started => Ok(JobEvent::Queued { position }),
            Event::Started { job_id, profile } if !started => {
                self.job_id = Some(job_id);
                Ok(JobEvent::Started { job_id, profile })
            }
            Event::Stdout(bytes) if started => Ok(JobEvent::Output(Stream::Stdout, bytes)),
            Event::Stderr(bytes) if started => Ok(JobEvent::Output(Stream::Stderr, bytes)),
            Event::Finished(outcome) => match self.job_id {
                Some(id) if id != outcome.job_id => Err(ClientError::Protocol(format!(
                    "outcome is for job {}, not job {id}",
                    outcome.job_id
                ))),
                _ => Ok(JobEvent::Finished(outcome)),
            },
            Event::Error(e) => Err(ClientError::Refused(e)),
            other if started => Err(unexpected("output, Finished or Error", &other)),
            other => Err(unexpected("Queued, Started, Finished or Error", &other)),
        }
    }
}

impl std::fmt::Debug for JobHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("job_id", &self.job_id)
            .field("phase", &self.core.phase)
            .field("stdin", &self.core.stdin_open())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::INLINE_CODE_MAX;
    use vivarium_proto::{decode, Code, MAX_FRAME, MAX_PAYLOAD_CHUNK};

    fn decode_all(frames: &[Vec<u8>]) -> Vec<Request> {
        frames
            .iter()
            .map(|f| {
                assert!(f.len() <= MAX_FRAME, "frame of {} bytes", f.len());
                decode(f).unwrap()
            })
            .collect()
    }

    #[test]
    fn small_code_goes_inline() {
        let job = Job::new("print(1)").arg("x").wall_ms(5);
        let frames = decode_all(&submit_frames(&job, true).unwrap());
        assert_eq!(
            frames,
            vec![Request::Submit(JobSpec {
                profile: "default".into(),
                code: Code::Inline(b"print(1)".to_vec()),
                args: vec!["x".into()],
                stdin: true,
                limits: LimitOverrides {
                    wall_ms: Some(5),
                    ..Default::default()
                },
            })]
        );
    }

    #[test]
    fn large_code_is_chunked_and_reassembles_exactly() {
        // 300 KiB of varied text, so a misplaced chunk would not reassemble equal.
        let code: String = (0..)
            .map(|i| format!("x{i} = {i}  # line {i}\n"))
            .take_while({
                let mut total = 0;
                move |line: &String| {
                    total += line.len();
                    total <= 300 * 1024
                }
            })
            .collect();
        assert!(code.len() > 299 * 1024);
        let job = Job::new(code.clone()).profile("p");
        let frames = decode_all(&submit_frames(&job, false).unwrap());
        let Request::Submit(spec) = &frames[0] else {
            panic!("first frame is {:?}", frames[0]);
        };
        assert_eq!(
            spec.code,
            Code::Chunked {
                len: code.len() as u64
            }
        );
        assert_eq!(spec.profile, "p");
        let mut reassembled = Vec::new();
        for frame in &frames[1..] {
            let Request::CodeChunk(piece) = frame else {
                panic!("expected a code chunk, got {frame:?}");
            };
            assert!(!piece.is_empty() && piece.len() <= MAX_PAYLOAD_CHUNK);
            reassembled.extend_from_slice(piece);
        }
        assert_eq!(reassembled, code.as_bytes());
        assert_eq!(frames.len(), 1 + code.len().div_ceil(MAX_PAYLOAD_CHUNK));
    }

    #[test]
    fn code_at_the_inline_limit_still_fits() {
        let job = Job::new("#".repeat(INLINE_CODE_MAX)).profile("x".repeat(200));
        let frames = submit_frames(&job, false).unwrap();
        assert_eq!(frames.len(), 1);
        assert!(frames[0].len() <= MAX_FRAME);
    }

    #[test]
    fn long_arguments_push_the_code_into_chunks() {
        let job = Job::new("#".repeat(INLINE_CODE_MAX)).args(vec!["a".repeat(2000)]);
        let frames = decode_all(&submit_frames(&job, false).unwrap());
        assert_eq!(frames.len(), 2);
        assert!(
            matches!(&frames[0], Request::Submit(s) if s.code == Code::Chunked { len: INLINE_CODE_MAX as u64 })
        );
    }

    #[test]
    fn arguments_that_cannot_fit_any_frame_are_an_error() {
        let job = Job::new("pass").args(vec!["a".repeat(MAX_FRAME)]);
        assert!(matches!(
            submit_frames(&job, false),
            Err(FrameError::Oversize { .. })
        ));
    }
}
