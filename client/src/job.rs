//! A job: what to run ([`Job`]), and the handle that streams its events ([`JobHandle`]).

use vivarium_proto::{
    ArtifactsReport, Event, JobSpec, LimitOverrides, Outcome, Outputs, PackagesReport, Request,
    SandboxStart, SubmitFiles, SubmitJob, SubmitWith,
};

use crate::artifacts::{Artifact, Assembled, Assembler, ARTIFACTS_PROTOCOL};
use crate::conn::unexpected;
use crate::exchange::{code_frames, Canceller, Exchange};
use crate::files::{self, Frames, InputFileData};
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
    /// Files placed under `/work` before the code runs (protocol 7+, see
    /// [`crate::FILES_PROTOCOL`]); checked against [`vivarium_proto::files`]'s rules
    /// before anything is sent.
    pub files: Vec<InputFileData>,
    /// What to return as artifacts (protocol 8+, [`crate::ARTIFACTS_PROTOCOL`]): by
    /// default everything under `/work/out` and the figures matplotlib showed or left
    /// open. An older daemon returns none.
    pub outputs: Outputs,
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
            files: Vec::new(),
            outputs: Outputs::Default,
        }
    }

    /// What to return as artifacts (see [`Outputs`]).
    pub fn outputs(mut self, outputs: Outputs) -> Job {
        self.outputs = outputs;
        self
    }

    /// Return the files under `/work` that match `pattern` (e.g. `results/*.csv`,
    /// `**/*.png`) instead of the default `out/**`; repeatable.
    pub fn output(mut self, pattern: impl Into<String>) -> Job {
        match &mut self.outputs {
            Outputs::Patterns(p) => p.push(pattern.into()),
            other => *other = Outputs::Patterns(vec![pattern.into()]),
        }
        self
    }

    /// Add an input file: `data` at `path` under `/work` (e.g. `data/in.csv`), mode
    /// `0o644`. Needs a protocol-7 daemon.
    pub fn file(mut self, path: impl Into<String>, data: impl Into<Vec<u8>>) -> Job {
        self.files.push(InputFileData::new(path, data));
        self
    }

    /// Add an input file with permission bits `mode` (at most `0o644`, e.g. `0o444`).
    pub fn file_mode(
        mut self,
        path: impl Into<String>,
        data: impl Into<Vec<u8>>,
        mode: u32,
    ) -> Job {
        self.files.push(InputFileData::new(path, data).mode(mode));
        self
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

/// The frames that submit `job` to a daemon of protocol `version`: one `Submit`
/// (`SubmitWith` with packages, `SubmitFiles` with input files, `SubmitJob` from protocol
/// 8 when it wants artifacts), then `CodeChunk`s when the code does not fit inline, then
/// the files' `FileChunk`s. Every frame is at most `MAX_FRAME` bytes; a broken file rule,
/// or a first frame that cannot fit, is an error before anything is sent.
pub(crate) fn submit_frames(job: &Job, stdin: bool, version: u32) -> Result<Frames<'_>> {
    let spec = |code| JobSpec {
        profile: job.profile.clone(),
        code,
        args: job.args.clone(),
        stdin,
        limits: job.limits.clone(),
    };
    let plain = |code| {
        if job.packages.is_empty() {
            Request::Submit(spec(code))
        } else {
            Request::SubmitWith(Box::new(SubmitWith {
                spec: spec(code),
                packages: job.packages.clone(),
            }))
        }
    };
    // (The default outputs need no `SubmitJob`: see `Client::submit`.)
    let artifacts = version >= ARTIFACTS_PROTOCOL && job.outputs != Outputs::Default;
    if job.files.is_empty() && !artifacts {
        return Ok(Frames::plain(code_frames(job.code.as_bytes(), plain)?));
    }
    let described = files::describe(&job.files)?;
    let head = code_frames(job.code.as_bytes(), |code| {
        if artifacts {
            Request::SubmitJob(Box::new(SubmitJob {
                spec: spec(code),
                packages: job.packages.clone(),
                files: described.clone(),
                outputs: job.outputs.clone(),
            }))
        } else {
            Request::SubmitFiles(Box::new(SubmitFiles {
                spec: spec(code),
                packages: job.packages.clone(),
                files: described.clone(),
            }))
        }
    })
    .map_err(|e| {
        let fits_without = code_frames(job.code.as_bytes(), plain).is_ok();
        files::head_error(&described, e, fits_without)
    })?;
    Ok(Frames {
        head,
        files: job.files.iter().map(|f| f.data.as_slice()).collect(),
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
    /// Protocol 8+: a file the job returned (after its output, before `Artifacts`).
    Artifact(Box<Artifact>),
    /// Protocol 8+: the end of the artifacts, right before `Finished`: what matched and
    /// was not returned, and why.
    Artifacts(Box<ArtifactsReport>),
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
    artifacts: Assembler,
}

impl<'c> JobHandle<'c> {
    pub(crate) fn new(core: Exchange<'c>) -> JobHandle<'c> {
        JobHandle {
            core,
            job_id: None,
            packages: None,
            sandbox: None,
            artifacts: Assembler::default(),
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
            let event = match self.artifacts.take(self.core.recv().await?)? {
                Assembled::Other(event) => event,
                Assembled::Partial => continue,
                Assembled::Artifact(a) if self.job_id.is_some() => {
                    return Ok(JobEvent::Artifact(a))
                }
                Assembled::Report(r) if self.job_id.is_some() => return Ok(JobEvent::Artifacts(r)),
                Assembled::Artifact(_) | Assembled::Report(_) => {
                    return Err(ClientError::Protocol("artifacts before Started".into()))
                }
            };
            match event {
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
    use vivarium_proto::{decode, Code, FrameError, InputFile, MAX_FRAME, MAX_PAYLOAD_CHUNK};

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
    fn a_protocol_8_daemon_gets_submit_job_with_the_outputs() {
        let job = Job::new("print(1)").output("res/*.csv").output("**/*.png");
        let frames = decode_all(&submit_frames(&job, false, 8).unwrap().all());
        let [Request::SubmitJob(w)] = &frames[..] else {
            panic!("{frames:?}")
        };
        assert_eq!(
            w.outputs,
            Outputs::Patterns(vec!["res/*.csv".into(), "**/*.png".into()])
        );
        assert_eq!(w.spec.code, Code::Inline(b"print(1)".to_vec()));
        // The default goes the old way (a protocol-8 daemon reads it as the default);
        // no outputs must say so.
        let frames = decode_all(&submit_frames(&Job::new("1"), false, 8).unwrap().all());
        assert!(matches!(&frames[..], [Request::Submit(_)]));
        let none = Job::new("1").outputs(Outputs::None);
        let frames = decode_all(&submit_frames(&none, false, 8).unwrap().all());
        assert!(matches!(&frames[..], [Request::SubmitJob(w)] if w.outputs == Outputs::None));
        // A protocol-7 daemon never sees SubmitJob.
        let frames = decode_all(&submit_frames(&job, false, 7).unwrap().all());
        assert!(matches!(&frames[..], [Request::Submit(_)]));
    }

    #[test]
    fn small_code_goes_inline() {
        let job = Job::new("print(1)").arg("x").wall_ms(5);
        let frames = decode_all(&submit_frames(&job, true, 7).unwrap().all());
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
        let frames = decode_all(&submit_frames(&job, false, 7).unwrap().all());
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
        let frames = submit_frames(&job, false, 7).unwrap().all();
        assert_eq!(frames.len(), 1);
        assert!(frames[0].len() <= MAX_FRAME);
    }

    #[test]
    fn long_arguments_push_the_code_into_chunks() {
        let job = Job::new("#".repeat(INLINE_CODE_MAX)).args(vec!["a".repeat(2000)]);
        let frames = decode_all(&submit_frames(&job, false, 7).unwrap().all());
        assert_eq!(frames.len(), 2);
        assert!(
            matches!(&frames[0], Request::Submit(s) if s.code == Code::Chunked { len: INLINE_CODE_MAX as u64 })
        );
    }

    #[test]
    fn arguments_that_cannot_fit_any_frame_are_an_error() {
        let job = Job::new("pass").args(vec!["a".repeat(MAX_FRAME)]);
        assert!(matches!(
            submit_frames(&job, false, 7).map(|f| f.all()),
            Err(ClientError::Frame(FrameError::Oversize { .. }))
        ));
    }

    /// Varied bytes, so that a misplaced chunk would not reassemble equal.
    fn bytes(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                (i as u8)
                    .wrapping_mul(31)
                    .wrapping_add(seed ^ (i >> 8) as u8)
            })
            .collect()
    }

    /// Split the frames of a `SubmitFiles` into its head, the code and each file's bytes.
    fn reassemble(frames: &[Request]) -> (SubmitFiles, Vec<u8>, Vec<Vec<u8>>) {
        let Request::SubmitFiles(head) = &frames[0] else {
            panic!("first frame is {:?}", frames[0]);
        };
        let mut code = match &head.spec.code {
            Code::Inline(code) => code.clone(),
            Code::Chunked { .. } => Vec::new(),
        };
        let mut data = Vec::new();
        for frame in &frames[1..] {
            match frame {
                Request::CodeChunk(piece) => {
                    assert!(data.is_empty(), "a code chunk after file chunks");
                    code.extend_from_slice(piece);
                }
                Request::FileChunk(piece) => {
                    assert!(!piece.is_empty() && piece.len() <= MAX_PAYLOAD_CHUNK);
                    data.extend_from_slice(piece);
                }
                other => panic!("unexpected frame {other:?}"),
            }
        }
        let total: u64 = head.files.iter().map(|f| f.len).sum();
        assert_eq!(data.len() as u64, total);
        let mut rest = data.as_slice();
        let files = head
            .files
            .iter()
            .map(|f| {
                let (this, more) = rest.split_at(f.len as usize);
                rest = more;
                this.to_vec()
            })
            .collect();
        (*head.clone(), code, files)
    }

    #[test]
    fn files_follow_the_code_and_reassemble_exactly() {
        // Sizes around the chunk boundary, and empty files among them.
        let sizes = [
            10,
            0,
            MAX_PAYLOAD_CHUNK - 10,
            MAX_PAYLOAD_CHUNK,
            0,
            1,
            3 * MAX_PAYLOAD_CHUNK + 7,
            0,
        ];
        let mut job = Job::new("print(open('f0').read())")
            .package("numpy")
            .arg("a");
        for (i, &len) in sizes.iter().enumerate() {
            job = job.file(format!("d/f{i}"), bytes(i as u8, len));
        }
        job = job.file_mode("ro.txt", "read only", 0o444);
        let frames = decode_all(&submit_frames(&job, true, 7).unwrap().all());
        let (head, code, files) = reassemble(&frames);
        assert_eq!(code, job.code.as_bytes());
        assert!(matches!(head.spec.code, Code::Inline(_)));
        assert_eq!(head.packages, ["numpy"]);
        assert_eq!(head.spec.args, ["a"]);
        assert!(head.spec.stdin);
        assert_eq!(
            head.files.last(),
            Some(&InputFile {
                path: "ro.txt".into(),
                mode: 0o444,
                len: 9
            })
        );
        assert_eq!(files.len(), job.files.len());
        for (got, want) in files.iter().zip(&job.files) {
            assert_eq!(got, &want.data, "{}", want.path);
        }
        // The bytes are packed: no chunk is short but the last.
        let total: usize = job.files.iter().map(|f| f.data.len()).sum();
        assert_eq!(frames.len(), 1 + total.div_ceil(MAX_PAYLOAD_CHUNK));
    }

    #[test]
    fn chunked_code_comes_before_the_files() {
        let code =
            String::from_utf8(bytes(7, 150_000).iter().map(|b| b'a' + b % 26).collect()).unwrap();
        let job = Job::new(code.clone())
            .file("a", bytes(1, 70_000))
            .file("b", Vec::new());
        let frames = decode_all(&submit_frames(&job, false, 7).unwrap().all());
        let (head, got_code, files) = reassemble(&frames);
        assert_eq!(
            head.spec.code,
            Code::Chunked {
                len: code.len() as u64
            }
        );
        assert_eq!(got_code, code.as_bytes());
        assert_eq!(files, [bytes(1, 70_000), Vec::new()]);
        assert!(head.packages.is_empty());
    }

    #[test]
    fn only_empty_files_send_no_file_chunk() {
        let job = Job::new("pass").file("empty", Vec::new());
        let frames = decode_all(&submit_frames(&job, false, 7).unwrap().all());
        assert_eq!(frames.len(), 1);
        let (head, _, files) = reassemble(&frames);
        assert_eq!(head.files[0].len, 0);
        assert_eq!(files, [Vec::<u8>::new()]);
    }

    #[test]
    fn no_files_keep_the_old_requests() {
        let frames = decode_all(&submit_frames(&Job::new("pass"), false, 7).unwrap().all());
        assert!(matches!(&frames[..], [Request::Submit(_)]));
        let job = Job::new("pass").package("numpy");
        let frames = decode_all(&submit_frames(&job, false, 7).unwrap().all());
        assert!(matches!(&frames[..], [Request::SubmitWith(w)] if w.packages == ["numpy"]));
    }

    #[test]
    fn broken_file_rules_are_errors_naming_the_file() {
        for (job, name) in [
            (Job::new("pass").file("/etc/passwd", "x"), "/etc/passwd"),
            (Job::new("pass").file("a", "x").file("a", "y"), "a"),
            (Job::new("pass").file_mode("run.sh", "x", 0o755), "run.sh"),
        ] {
            let err = submit_frames(&job, false, 7).map(|f| f.all()).unwrap_err();
            assert!(matches!(err, ClientError::InvalidInputFiles(_)), "{err:?}");
            assert!(err.to_string().contains(&format!("{name:?}")), "{err}");
        }
    }

    #[test]
    fn paths_that_cannot_fit_the_first_frame_are_an_error() {
        // 64 paths of 1023 bytes: within the protocol's 64 KiB of paths, beyond a frame.
        let path = |i: usize| {
            let x = "x".repeat(255);
            format!("{i:03}/{x}/{x}/{x}/{}", "y".repeat(251))
        };
        assert_eq!(path(0).len(), 1023);
        let mut job = Job::new("pass");
        for i in 0..64 {
            job = job.file(path(i), "z");
        }
        let err = submit_frames(&job, false, 7).map(|f| f.all()).unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::TooManyInputFiles {
                    files: 64,
                    paths_bytes: 65_472
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("fewer files"), "{err}");
        // Half of them fit.
        let mut job = Job::new("pass");
        for i in 0..32 {
            job = job.file(path(i), "z");
        }
        assert!(submit_frames(&job, false, 7).is_ok());
        // Arguments that cannot fit any frame stay the frame's error.
        let job = Job::new("pass")
            .args(vec!["a".repeat(MAX_FRAME)])
            .file("f", "z");
        assert!(matches!(
            submit_frames(&job, false, 7).map(|f| f.all()),
            Err(ClientError::Frame(FrameError::Oversize { .. }))
        ));
    }
}
