//! The MCP server: `tools/list` and `tools/call` for `run_python`, each call one job on
//! its own daemon connection.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProgressToken, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use vivarium_client::{Client, ClientError, Job, JobEvent, ProfileInfo, Stream};
use vivarium_proto::{error_chain, ErrorCode, ProfileFeatures};

use crate::artifacts::{self, Collected};
use crate::cell::{self, CLOSE_TOOL_NAME, LIST_TOOL_NAME};
use crate::limiter::{Admission, Limiter, Refusal, Ticket};
use crate::principal::Principal;
use crate::resources::ArtifactStore;
use crate::session::SessionArg;
use crate::tasks::TaskStore;
use crate::tenants::{Tenant, Tenants};
use crate::tool::{self, RunPythonArgs, TOOL_NAME};
use crate::Config;

mod cells;
mod tasks;

/// The name this server announces to the daemon and to MCP clients.
pub const SERVER_NAME: &str = "vivarium-mcp";

/// How long connecting and the hello may take before the daemon counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `run_python` server; cheap to clone (shared state behind `Arc`).
#[derive(Clone)]
pub struct VivariumServer {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    limiter: Limiter,
    /// The daemon's profiles, once it has answered.
    profiles: Mutex<Option<Vec<ProfileInfo>>>,
    /// What they offer (protocol 4+ daemons; `None` before, or from an older daemon).
    features: Mutex<Option<Vec<ProfileFeatures>>>,
    /// Becomes true when stdin reaches EOF: every running job is then killed.
    eof: watch::Receiver<bool>,
    /// How clients reach this instance, and so who a call is for.
    transport: Transport,
    /// Each principal's sessions and limits (crate::tenants).
    tenants: Tenants,
    /// The artifacts its results returned, for `resources/read` (crate::resources).
    artifacts: Arc<ArtifactStore>,
    /// Each principal's tasks (HTTP only: over stdio every call is synchronous).
    tasks: Option<Arc<TaskStore>>,
}

/// What a running call answers to: its cancellation, and the peer that hears of a changed
/// tool list. A request's are its context's; a task's are its own token and no peer (the
/// request that made it has ended).
pub(crate) struct Call {
    pub ct: CancellationToken,
    pub peer: Option<Peer<RoleServer>>,
}

impl Call {
    fn of(context: &RequestContext<RoleServer>) -> Call {
        Call {
            ct: context.ct.clone(),
            peer: Some(context.peer.clone()),
        }
    }
}

impl VivariumServer {
    /// A stdio server for `config`, with the daemon's profiles if it answered at startup.
    pub fn new(
        config: Config,
        profiles: Option<Profiles>,
        eof: watch::Receiver<bool>,
    ) -> VivariumServer {
        VivariumServer::with_transport(config, profiles, eof, Transport::Stdio)
    }

    /// A server for `config` reached over `transport`.
    pub fn with_transport(
        config: Config,
        profiles: Option<Profiles>,
        eof: watch::Receiver<bool>,
        transport: Transport,
    ) -> VivariumServer {
        let (profiles, features) = match profiles {
            Some((p, f)) => (Some(p), f),
            None => (None, None),
        };
        let limiter = Limiter::new(
            config.max_calls_per_minute,
            config.max_concurrent_jobs,
            config.max_queued_calls,
        );
        VivariumServer {
            inner: Arc::new(Inner {
                limiter,
                profiles: Mutex::new(profiles),
                features: Mutex::new(features),
                eof,
                tenants: Tenants::new(match &transport {
                    Transport::Stdio => None,
                    Transport::Http(http) => Some(http.limits),
                }),
                tasks: match &transport {
                    Transport::Stdio => None,
                    Transport::Http(http) => Some(Arc::new(TaskStore::new(
                        Duration::from_secs(http.tasks.result_ttl_seconds),
                        http.limits.tasks,
                    ))),
                },
                transport,
                artifacts: Arc::new(ArtifactStore::new(
                    config.artifact_ttl,
                    config.artifact_store_bytes,
                )),
                config,
            }),
        }
    }

    fn profiles(&self) -> Option<Vec<ProfileInfo>> {
        self.inner
            .profiles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn features(&self) -> Option<Vec<ProfileFeatures>> {
        self.inner
            .features
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The tool as it stands (no daemon round trip).
    fn tool_now(&self) -> Tool {
        tool::tool(
            self.profiles().as_deref(),
            self.features().as_deref(),
            &self.inner.config.default_profile,
            self.inner.config.budgets,
        )
    }

    /// Ask the daemon for its profiles again; when the answer changes the tool (a reload,
    /// or the daemon's first answer), keep it and tell `peer` that the tool list changed.
    /// A daemon that does not answer leaves the last list in place.
    pub async fn refresh_profiles(&self, peer: Option<&Peer<RoleServer>>) -> bool {
        let Ok((found, features)) =
            load_profiles(&self.inner.config.socket, Duration::from_secs(1)).await
        else {
            return false;
        };
        let before = self.tool_now();
        {
            let mut profiles = self
                .inner
                .profiles
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mut known = self
                .inner
                .features
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if profiles.as_ref() == Some(&found) && *known == features {
                return false;
            }
            *profiles = Some(found);
            *known = features;
        }
        if self.tool_now() == before {
            return false;
        }
        info!("the daemon's profiles changed; the tool list changed");
        if let Some(peer) = peer {
            if let Err(e) = peer.notify_tool_list_changed().await {
                debug!(error = %e, "tools/list_changed not sent");
            }
        }
        true
    }

    fn usable_profile_names(&self) -> Vec<String> {
        self.profiles()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.disabled.is_none())
            .map(|p| format!("`{}`", p.name))
            .collect()
    }

    /// When a refused call may retry: a running call ends within its wall limit.
    fn retry_after_s(&self) -> u64 {
        let default = &self.inner.config.default_profile;
        self.profiles()
            .and_then(|ps| ps.into_iter().find(|p| &p.name == default))
            .map_or(30, |p| p.max.wall_ms.div_ceil(1000).max(1))
    }

    /// Wait in the queue for a job slot, telling the client it is queued; a tool error
    /// when the wait is cancelled, the client goes away, or the wait limit passes.
    async fn wait_in_queue(
        &self,
        ticket: Ticket,
        call: &Call,
        progress: &mut Option<Progress>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, CallToolResult> {
        let config = &self.inner.config;
        let running = self.inner.limiter.max_jobs();
        let message = format!(
            "queued: {} call(s) ahead; this server runs {running} run_python calls at a time",
            ticket.position
        );
        debug!(position = ticket.position, "call queued");
        let started = Instant::now();
        let wait = ticket.wait();
        tokio::pin!(wait);
        let deadline = tokio::time::sleep(config.queue_timeout);
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(config.progress_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut eof = self.inner.eof.clone();
        loop {
            tokio::select! {
                biased;
                () = call.ct.cancelled() => {
                    return Err(self.tool_error("cancelled while queued: nothing ran".into()));
                }
                () = crate::until_eof(&mut eof) => {
                    return Err(self.tool_error("the MCP client went away while the call was queued: nothing ran".into()));
                }
                permit = &mut wait => return Ok(permit),
                () = &mut deadline => {
                    let refusal = Refusal::QueueTimeout {
                        waited_s: started.elapsed().as_secs(),
                        running,
                        retry_after_s: self.retry_after_s(),
                    };
                    return Err(self.tool_error(refusal.to_string()));
                }
                _ = ticker.tick(), if progress.is_some() => {
                    if let Some(p) = progress.as_mut() {
                        p.send_message(message.clone()).await;
                    }
                }
            }
        }
    }

    /// A connection to the daemon, past its hello; a tool error saying why not.
    async fn connect(&self) -> Result<Client, CallToolResult> {
        let socket = &self.inner.config.socket;
        let client_name = format!("{SERVER_NAME}/{}", env!("CARGO_PKG_VERSION"));
        // The hello's answer before the job: a refused hello gets its own advice.
        let connect = async {
            let mut client = Client::connect_as(socket, &client_name).await?;
            client.hello().await?;
            Ok::<_, vivarium_client::ClientError>(client)
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(self.tool_error(connect_error_text(socket, &e))),
            Err(_) => Err(self.tool_error(connect_timeout_text(socket))),
        }
    }

    async fn run(
        &self,
        tenant: &Tenant,
        args: RunPythonArgs,
        call: &Call,
        progress: Option<Progress>,
    ) -> CallToolResult {
        match args.session() {
            Some(session) => self.run_cell(tenant, args, session, call, progress).await,
            None => self.run_job(tenant, args, call, progress).await,
        }
    }

    async fn run_job(
        &self,
        tenant: &Tenant,
        args: RunPythonArgs,
        call: &Call,
        mut progress: Option<Progress>,
    ) -> CallToolResult {
        let config = &self.inner.config;
        let profile = args
            .profile
            .clone()
            .unwrap_or_else(|| config.default_profile.clone());
        if let Err(text) =
            tool::check_timeout(args.timeout_seconds, &profile, self.profiles().as_deref())
        {
            return self.tool_error(text);
        }
        let mut client = match self.connect().await {
            Ok(client) => client,
            Err(result) => return result,
        };
        let mut job = Job::new(args.code).profile(profile.clone());
        job.packages = args.packages.unwrap_or_default();
        job.files = args.input_files;
        if let Some(t) = args.timeout_seconds {
            job = job.wall_ms(tool::timeout_ms(t));
        }
        let stdin = args.stdin.map(String::into_bytes);
        let mut handle = match client.submit(&job, stdin.as_deref()).await {
            Ok(handle) => handle,
            Err(e) => {
                if let ClientError::Refused(w) = &e {
                    if matches!(
                        w.code,
                        ErrorCode::UnknownProfile | ErrorCode::ProfileDisabled
                    ) {
                        // Our list may be stale (a reload): refresh it, and name what is there.
                        self.refresh_profiles(call.peer.as_ref()).await;
                        let names = self.usable_profile_names();
                        return self.tool_error(format!(
                            "{} Profiles now: {}.",
                            job_error_text(&e),
                            names.join(", ")
                        ));
                    }
                }
                return self.tool_error(job_error_text(&e));
            }
        };
        // `JobHandle` is not `Sync`, so `handle.cancel()` cannot be awaited in a `Send`
        // future; a `Canceller` can.
        let canceller = handle.canceller();
        let mut ticker = tokio::time::interval(config.progress_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        ticker.tick().await; // the first tick is immediate
        let mut eof = self.inner.eof.clone();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut latest_line = String::new();
        let mut collected = Collected::default();
        let outcome = loop {
            tokio::select! {
                biased;
                () = call.ct.cancelled() => {
                    // Cancel, then close the connection: either alone kills the job.
                    let _ = tokio::time::timeout(Duration::from_millis(200), canceller.cancel()).await;
                    drop(handle);
                    info!(profile, "request cancelled; job killed");
                    return self.tool_error("cancelled: the job was killed".into());
                }
                () = crate::until_eof(&mut eof) => {
                    drop(handle);
                    info!(profile, "stdin closed; job killed");
                    return self.tool_error("the MCP client went away: the job was killed".into());
                }
                event = handle.next_event() => match event {
                    Ok(Some(JobEvent::Output(stream, bytes))) => {
                        if let Some(line) = last_line(&bytes) {
                            latest_line = line;
                        }
                        match stream {
                            Stream::Stdout => stdout.extend_from_slice(&bytes),
                            Stream::Stderr => stderr.extend_from_slice(&bytes),
                        }
                    }
                    Ok(Some(JobEvent::Finished(outcome))) => break outcome,
                    Ok(Some(JobEvent::Artifact(a))) => collected.artifacts.push(*a),
                    Ok(Some(JobEvent::Artifacts(r))) => collected.report = Some(*r),
                    Ok(Some(JobEvent::Started { job_id, .. })) => {
                        debug!(job_id, profile, "job started");
                    }
                    Ok(Some(JobEvent::Queued { position })) => {
                        latest_line = format!("queued in the daemon (position {position})");
                    }
                    Ok(None) => return self.tool_error("the Vivarium daemon closed the connection before the job's outcome (it stopped or restarted): the job did not run to its end, or its end was not reported; retry once the daemon is back".into()),
                    Err(e) => return self.tool_error(job_error_text(&e)),
                },
                _ = ticker.tick(), if progress.is_some() => {
                    if let Some(p) = progress.as_mut() {
                        p.send(&latest_line).await;
                    }
                }
            }
        };
        info!(
            job_id = outcome.job_id,
            profile,
            reason = tool::reason_name(outcome.reason),
            "job finished"
        );
        crate::audit::note(|n| {
            n.job_id = Some(outcome.job_id);
            n.profile = Some(outcome.profile.clone());
        });
        let packages = handle.packages().cloned();
        drop(handle);
        let prepared = artifacts::prepare(
            collected,
            self.inner.artifacts.clone(),
            tenant.key.clone(),
            config.budgets.text_chars,
        )
        .await;
        let call = tool::call_result(
            &outcome,
            &stdout,
            &stderr,
            artifacts::json_budgets(config.budgets, prepared.as_ref()),
            packages.as_ref(),
            self.profiles()
                .and_then(|ps| ps.into_iter().find(|p| p.name == outcome.profile))
                .map(|p| p.max.output_bytes),
        );
        artifacts::attach(call, prepared)
    }
}

/// Progress notifications for one request: its token, strictly increasing values.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    started: Instant,
    last: f64,
}

impl Progress {
    /// Progress for `context`'s request, if it asked for any.
    fn for_request(context: &RequestContext<RoleServer>) -> Option<Progress> {
        context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
            started: Instant::now(),
            last: 0.0,
        })
    }

    async fn send(&mut self, latest_line: &str) {
        let elapsed = self.started.elapsed().as_secs_f64();
        let message = if latest_line.is_empty() {
            format!("running for {elapsed:.0} s, no output yet")
        } else {
            format!("running for {elapsed:.0} s; latest output: {latest_line}")
        };
        self.send_message(message).await;
    }

    async fn send_message(&mut self, message: String) {
        let elapsed = self.started.elapsed().as_secs_f64();
        // Whole tenths of seconds, strictly above the last value sent.
        let value = ((elapsed * 10.0).floor() / 10.0).max(self.last + 0.1);
        self.last = value;
        let param = ProgressNotificationParam::new(self.token.clone(), value).with_message(message);
        if let Err(e) = self.peer.notify_progress(param).await {
            debug!(error = %e, "progress notification not sent");
        }
    }
}

/// The last non-empty line of an output chunk, at most 200 characters.
fn last_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(200).collect())
}

fn tool_error(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl VivariumServer {
    /// A tool error whose text fits the text budget.
    fn tool_error(&self, text: String) -> CallToolResult {
        tool_error(tool::error_text(text, self.inner.config.budgets.text_chars))
    }
}

/// The system daemon's socket (the default for root).
const SYSTEM_SOCKET: &str = "/run/vivarium/vivariumd.sock";

/// How to start a daemon, for the message a newcomer sees first.
fn start_hint(socket: &Path) -> String {
    start_hint_for(
        socket,
        vivarium_client::effective_uid(),
        &vivarium_client::default_socket_path(),
    )
}

/// [`start_hint`] for a user (`euid`) whose default socket is `user_default`: each case
/// says what is true for it (which daemon listens where by default, and what to add).
fn start_hint_for(socket: &Path, euid: u32, user_default: &Path) -> String {
    const PROFILES: &str = "--profiles /path/to/vivarium/profiles";
    const ROOTLESS: &str = "use the `rootless` profile (limits by rlimits unless the user \
                            service has a delegated cgroup v2 subtree; `dist/install.sh --user` \
                            sets that up)";
    const ADMIT: &str = "the daemon must admit this user: `allow_uids` / `allow_groups` and \
                         `socket_mode` in its config";
    const POINT: &str = "Or point this server at a running daemon with `vivarium-mcp --socket \
                         PATH` or VIVARIUM_SOCKET=PATH.";
    let system = Path::new(SYSTEM_SOCKET);
    let s = socket.display();
    if socket == system {
        let admit = if euid == 0 {
            String::new()
        } else {
            format!(" ({ADMIT})")
        };
        return format!(
            "Start the system daemon with `sudo vivariumd {PROFILES}` (full isolation and \
             cgroup limits); it listens on {s} by default{admit}. {POINT}"
        );
    }
    if euid != 0 && socket == user_default {
        return format!(
            "Start one as this user with `vivariumd {PROFILES}` (it listens on {s} by \
             default) and {ROOTLESS}. For full isolation run the system daemon with `sudo \
             vivariumd {PROFILES}`, which listens on {SYSTEM_SOCKET}, and start this server \
             with `--socket {SYSTEM_SOCKET}` ({ADMIT})."
        );
    }
    let as_user = if euid == 0 {
        String::new()
    } else {
        format!(
            " (as root, {ADMIT}), or as this user with `vivariumd {PROFILES} --socket {s}` and \
             {ROOTLESS}"
        )
    };
    format!(
        "Start one that listens there with `sudo vivariumd {PROFILES} --socket {s}` (full \
         isolation and cgroup limits){as_user}. {POINT}"
    )
}

/// What the startup log says when the daemon gave no profile list: true to the case.
pub fn no_profiles_log(socket: &Path, error: Option<&ClientError>) {
    let socket = socket.display();
    match error {
        None => {
            warn!(%socket, "the daemon did not answer the profile list in time; the tool is described without profiles")
        }
        Some(ClientError::Connect { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            warn!(%socket, "permission denied on the daemon's socket: this user may not use it (allow_uids / allow_groups and socket_mode in the daemon config)");
        }
        Some(ClientError::Connect { source, .. }) => {
            warn!(%socket, error = %source, "no daemon is listening; the first tool call will say how to start one");
        }
        Some(ClientError::Refused(w)) if w.code == ErrorCode::NotAuthorized => {
            warn!(%socket, message = %w.message, "the daemon answered but does not admit this user (allow_uids / allow_groups in its config)");
        }
        Some(e) => warn!(%socket, error = %e, "the daemon answered but gave no profile list"),
    }
}

/// The tool error for a failed connect or hello.
pub fn connect_error_text(socket: &Path, e: &ClientError) -> String {
    match e {
        ClientError::Connect { source, .. }
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            format!(
                "permission denied connecting to the Vivarium daemon at {}: this user may not use \
                 its socket. Run this server as a user the daemon admits (`allow_uids` / \
                 `allow_groups` and `socket_mode` in the daemon config).",
                socket.display()
            )
        }
        ClientError::Connect { source, .. } => format!(
            "no Vivarium daemon is reachable at {} ({source}). {}",
            socket.display(),
            start_hint(socket)
        ),
        ClientError::Refused(w) if w.code == ErrorCode::NotAuthorized => format!(
            "the Vivarium daemon at {} does not admit this user: {}. Add the uid or a group to \
             `allow_uids` / `allow_groups` in the daemon config.",
            socket.display(),
            w.message
        ),
        other => format!(
            "cannot talk to the Vivarium daemon at {}: {}",
            socket.display(),
            error_chain(other)
        ),
    }
}

fn connect_timeout_text(socket: &Path) -> String {
    format!(
        "the Vivarium daemon at {} did not answer within {} s; is it overloaded or stuck?",
        socket.display(),
        CONNECT_TIMEOUT.as_secs()
    )
}

/// The tool error for a job the daemon refused or lost.
fn job_error_text(e: &ClientError) -> String {
    match e {
        ClientError::Refused(w) => match w.code {
            ErrorCode::Busy => format!(
                "the daemon is busy (every job slot and queue place is taken): {}; retry shortly",
                w.message
            ),
            ErrorCode::UnknownProfile | ErrorCode::ProfileDisabled => format!(
                "invalid profile: {} (see the `profile` parameter for the available ones)",
                w.message
            ),
            ErrorCode::LimitOutOfRange => format!("invalid timeout_seconds: {}", w.message),
            ErrorCode::InvalidInputFile => format!(
                "invalid input file: {}. Nothing ran. Send fewer or smaller files (by default \
                 a profile takes {} files, {} MiB per file and {} MiB together), or another \
                 path",
                w.message,
                crate::files::DEFAULT_MAX_FILES,
                crate::files::DEFAULT_MAX_FILE_BYTES >> 20,
                crate::files::DEFAULT_MAX_TOTAL_BYTES >> 20,
            ),
            ErrorCode::ShuttingDown => format!(
                "the Vivarium daemon is shutting down and takes no new jobs ({}); nothing ran; \
                 retry once it is back",
                w.message
            ),
            _ => format!("the daemon refused the job ({:?}): {}", w.code, w.message),
        },
        ClientError::FilesUnsupported { version } => format!(
            "this Vivarium daemon speaks protocol {version}, which has no input files (they \
             need {}): upgrade vivariumd, or omit `files` (and write the data from the code). \
             Nothing ran.",
            vivarium_client::FILES_PROTOCOL
        ),
        // parse_args checked the files as the client does: these are not expected, but
        // are still the call's fault, not the connection's.
        ClientError::InvalidInputFiles(e) => format!("invalid input files: {e}. Nothing ran."),
        ClientError::TooManyInputFiles { .. } => format!("{e}. Nothing ran."),
        other => format!(
            "the daemon connection failed during the job: {}",
            error_chain(other)
        ),
    }
}

/// The daemon's profiles and what they offer (`None` from a daemon older than protocol 4).
pub type Profiles = (Vec<ProfileInfo>, Option<Vec<ProfileFeatures>>);

/// The daemon's profiles, or why not (logged at debug: callers decide what to say).
pub async fn load_profiles(
    socket: &Path,
    timeout: Duration,
) -> Result<Profiles, Option<ClientError>> {
    let name = format!("{SERVER_NAME}/{}", env!("CARGO_PKG_VERSION"));
    let ask = async {
        let mut client = Client::connect_as(socket, &name).await?;
        let profiles = client.list_profiles().await?;
        // Features are extra: a daemon that cannot say leaves them unknown.
        let features = match client.list_profile_features().await {
            Ok(features) => features,
            Err(e) => {
                debug!(error = %e, "no profile features from the daemon");
                None
            }
        };
        Ok((profiles, features))
    };
    match tokio::time::timeout(timeout, ask).await {
        Ok(Ok(profiles)) => Ok(profiles),
        Ok(Err(e)) => {
            debug!(socket = %socket.display(), error = %e, "no profile list from the daemon");
            Err(Some(e))
        }
        Err(_) => {
            debug!(socket = %socket.display(), "the daemon did not answer the profile list in time");
            Err(None)
        }
    }
}

impl ServerHandler for VivariumServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .build();
        if self.inner.tasks.is_some() {
            // SEP-2663 (HTTP only): long or asked-for run_python calls become tasks for a
            // client that declares the extension on the request.
            capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(
                    rmcp::model::TASKS_EXTENSION_ID.to_string(),
                    rmcp::model::JsonObject::new(),
                );
        }
        let mut info = ServerConfig::new(capabilities);
        info.server_info = server_info();
        info.instructions = Some(
            "Use run_python to execute Python code in an isolated, disposable sandbox (no \
             network, resource limits). Each call is independent unless it names a session \
             (`session_id`), which keeps Python state between calls until it expires or is \
             closed with close_session."
                .into(),
        );
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // The client asks for the list: no notification needed, just the latest.
        self.refresh_profiles(None).await;
        Ok(ListToolsResult::with_all_items(vec![
            self.tool_now(),
            cell::close_tool(),
            cell::list_tool(),
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let principal = self.principal(&context)?;
        Ok(ListResourcesResult::with_all_items(
            self.inner.artifacts.list(&principal.key),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = self.principal(&context)?;
        let read = self.inner.artifacts.read(&principal.key, &request.uri);
        if let Some(http) = self.http() {
            let mut record = crate::audit::Record::by("resources/read", &principal);
            record.peer = peer_of(&context);
            record.detail = Some(request.uri.clone());
            record.outcome = match &read {
                Ok(_) => "ok".into(),
                Err(e) => e.reason().into(),
            };
            http.audit.write(record);
        }
        match read {
            Ok(result) => Ok(result.into()),
            Err(e) => {
                debug!(uri = %request.uri, reason = e.reason(), "resource not served");
                Err(e.to_error_data())
            }
        }
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        self.get_task_as(request, context).await
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_task_as(request, context).await
    }

    async fn update_task(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.update_task_as(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        match name {
            TOOL_NAME => Some(self.tool_now()),
            CLOSE_TOOL_NAME => Some(cell::close_tool()),
            LIST_TOOL_NAME => Some(cell::list_tool()),
            _ => None,
        }
    }

    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CustomResult, ErrorData> {
        if request.method != crate::lines::OVERSIZED_METHOD {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            ));
        }
        // The stand-in for a request line over the limit (crate::lines).
        let bytes = request
            .params
            .as_ref()
            .and_then(|p| p.get("bytes"))
            .and_then(|b| b.as_u64())
            .unwrap_or_default();
        Err(ErrorData::invalid_request(
            format!(
                "request too large: its line has {bytes} bytes; this server reads at most {} \
                 bytes per message. Keep `code` within {} and `stdin` within {} characters, \
                 and the content of `files` well under {} bytes together.",
                crate::lines::MAX_LINE_BYTES,
                tool::MAX_CODE_CHARS,
                tool::MAX_STDIN_CHARS,
                crate::lines::MAX_LINE_BYTES,
            ),
            request.params,
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let principal = self.principal(&context)?;
        let tenant = self.inner.tenants.get(&principal.key);
        let Some(http) = self.http() else {
            return self
                .call_tool_as(&principal, &tenant, request, context)
                .await;
        };
        // Over HTTP every call is audited: who, what, how it ended.
        let started = Instant::now();
        let mut record = crate::audit::Record::by("tools/call", &principal);
        record.tool = Some(request.name.to_string());
        record.peer = peer_of(&context);
        if http.audit.code {
            record.code = request
                .arguments
                .as_ref()
                .and_then(|a| a.get("code"))
                .and_then(|c| c.as_str())
                .map(str::to_string);
        }
        let (result, note) =
            crate::audit::noting(self.call_tool_as(&principal, &tenant, request, context)).await;
        record.job_id = note.job_id;
        record.session = note.session;
        record.profile = note.profile;
        record.duration_ms = Some(started.elapsed().as_millis() as u64);
        record.outcome = match &result {
            Ok(CallToolResponse::Complete(r)) => outcome_of(r),
            Ok(CallToolResponse::Task(t)) => {
                record.task = Some(t.task.task_id.clone());
                "task".into()
            }
            Ok(_) => "input_required".into(),
            Err(e) => {
                record.detail = Some(e.message.to_string());
                "protocol_error".into()
            }
        };
        http.audit.write(record);
        result
    }
}

/// The audit outcome of a tool result: its `reason`, else `tool_error` or `ok`.
fn outcome_of(result: &CallToolResult) -> String {
    let reason = result
        .structured_content
        .as_ref()
        .and_then(|s| s.get("reason"))
        .and_then(|r| r.as_str());
    match (reason, result.is_error) {
        (Some(reason), _) => reason.to_string(),
        (None, Some(true)) => "tool_error".into(),
        (None, _) => "ok".into(),
    }
}

/// The peer address the HTTP layer recorded for this request.
fn peer_of(context: &RequestContext<RoleServer>) -> Option<std::net::IpAddr> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<crate::http::RequestInfo>())
        .and_then(|i| i.peer)
}

impl VivariumServer {
    /// Who `context`'s request is for: the stdio client, or the principal the HTTP layer
    /// authenticated (a request without one never reaches a tool: fail closed).
    fn principal(&self, context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
        match &self.inner.transport {
            Transport::Stdio => Ok(Principal::local()),
            Transport::Http(_) => context
                .extensions
                .get::<http::request::Parts>()
                .and_then(|p| p.extensions.get::<Principal>())
                .cloned()
                .ok_or_else(|| {
                    warn!("an HTTP request reached a handler without a principal; refused");
                    ErrorData::internal_error("no authenticated principal", None)
                }),
        }
    }

    /// The stdio principal's state (tests).
    #[cfg(test)]
    pub(crate) fn local(&self) -> Arc<Tenant> {
        self.inner.tenants.get(&Principal::local().key)
    }

    fn http(&self) -> Option<&HttpServing> {
        match &self.inner.transport {
            Transport::Stdio => None,
            Transport::Http(http) => Some(http),
        }
    }

    /// The scopes `principal` lacks for this call (none over stdio or without auth). The
    /// HTTP layer refuses such a request with 403 before it gets here; this is the
    /// handler's own check of the arguments as parsed.
    fn missing_scopes(&self, principal: &Principal, needs: Needs) -> Vec<String> {
        let Some(scopes) = self.http().and_then(|h| h.scopes.as_ref()) else {
            return Vec::new();
        };
        needs
            .scopes(scopes)
            .into_iter()
            .filter(|s| !principal.has_scope(s))
            .collect()
    }

    async fn call_tool_as(
        &self,
        principal: &Principal,
        tenant: &Arc<Tenant>,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let insufficient = |missing: Vec<String>| {
            self.tool_error(format!(
                "insufficient scope: this call needs {} , which the access token does not grant",
                missing.join(" ")
            ))
        };
        if request.name == CLOSE_TOOL_NAME || request.name == LIST_TOOL_NAME {
            let missing = self.missing_scopes(principal, Needs::sessions());
            if !missing.is_empty() {
                return Ok(insufficient(missing).into());
            }
        }
        if request.name == CLOSE_TOOL_NAME {
            return Ok(match cell::parse_close_args(request.arguments) {
                Ok(session) => match self.handover_refusal(&session) {
                    Some(refusal) => refusal,
                    None => self.close(tenant, session).await,
                },
                Err(text) => self.tool_error(text),
            }
            .into());
        }
        if request.name == LIST_TOOL_NAME {
            return Ok(match cell::parse_list_args(request.arguments) {
                Ok(()) => self.list(tenant).await,
                Err(text) => self.tool_error(text),
            }
            .into());
        }
        if request.name != TOOL_NAME {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`; this server has `{TOOL_NAME}`, `{CLOSE_TOOL_NAME}` and \
                     `{LIST_TOOL_NAME}`",
                    request.name
                ),
                None,
            ));
        }
        let args = match tool::parse_args(request.arguments) {
            Ok(args) => args,
            Err(text) => return Ok(self.tool_error(text).into()),
        };
        let missing = self.missing_scopes(principal, Needs::of_run(&args));
        if !missing.is_empty() {
            return Ok(insufficient(missing).into());
        }
        if let Some(refusal) = args
            .session()
            .as_ref()
            .and_then(|s| self.handover_refusal(s))
        {
            return Ok(refusal.into());
        }
        // The principal's own limits first (HTTP), then the instance's; a refusal by the
        // principal's answers at once, task or not.
        let admitted = match &tenant.limiter {
            None => None,
            Some(limiter) => match limiter.admit(self.retry_after_s()) {
                Ok(admission) => Some(admission),
                Err(refusal) => {
                    return Ok(self
                        .tool_error(format!("{refusal} (a limit of each client of this server)"))
                        .into())
                }
            },
        };
        if self.wants_task(&context, &args) {
            return Ok(self.start_task(principal, tenant.clone(), admitted, args));
        }
        let progress = Progress::for_request(&context);
        Ok(self
            .admit_and_run(tenant, admitted, args, &Call::of(&context), progress)
            .await
            .into())
    }

    /// Wait for the principal's place (`admitted`), then the instance's, then run.
    async fn admit_and_run(
        &self,
        tenant: &Tenant,
        admitted: Option<Admission>,
        args: RunPythonArgs,
        call: &Call,
        mut progress: Option<Progress>,
    ) -> CallToolResult {
        let _tenant_permit = match admitted {
            None => None,
            Some(Admission::Run(permit)) => Some(permit),
            Some(Admission::Queued(ticket)) => {
                match self.wait_in_queue(ticket, call, &mut progress).await {
                    Ok(permit) => Some(permit),
                    Err(result) => return result,
                }
            }
        };
        let _permit = match self.inner.limiter.admit(self.retry_after_s()) {
            Ok(Admission::Run(permit)) => permit,
            Ok(Admission::Queued(ticket)) => {
                match self.wait_in_queue(ticket, call, &mut progress).await {
                    Ok(permit) => permit,
                    Err(result) => return result,
                }
            }
            Err(refusal) => return self.tool_error(refusal.to_string()),
        };
        self.run(tenant, args, call, progress).await
    }

    /// Over HTTP a daemon handle (`vs_...`) is refused unless configured: every principal
    /// shares this process's uid at the daemon, so a handle would let one use another's.
    fn handover_refusal(&self, arg: &SessionArg) -> Option<CallToolResult> {
        let http = self.http()?;
        if http.allow_daemon_handles || !matches!(arg, SessionArg::Handover(_)) {
            return None;
        }
        Some(
            self.tool_error(
                "daemon session handles (`vs_...`) are not accepted by this HTTP server: use a \
             session_id this server returned (`mcp_...`), or `\"new\"`. Nothing ran."
                    .into(),
            ),
        )
    }
}

/// What a call needs its token to grant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    pub run: bool,
    pub sessions: bool,
    pub packages: bool,
}

impl Needs {
    pub fn sessions() -> Needs {
        Needs {
            sessions: true,
            ..Needs::default()
        }
    }

    /// `run_python` with these arguments.
    pub fn of_run(args: &RunPythonArgs) -> Needs {
        Needs {
            run: true,
            sessions: args.session_id.is_some(),
            packages: args.packages.as_ref().is_some_and(|p| !p.is_empty()),
        }
    }

    /// The scopes, in `scopes`' names (each once).
    pub fn scopes(self, scopes: &crate::http::config::ScopeConfig) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (needed, scope) in [
            (self.run, &scopes.run),
            (self.sessions, &scopes.sessions),
            (self.packages, &scopes.packages),
        ] {
            if needed && !out.contains(scope) {
                out.push(scope.clone());
            }
        }
        out
    }
}

/// How clients reach a server instance, and so who each call is for.
#[derive(Clone)]
pub enum Transport {
    /// One local client on stdin/stdout: one principal, no scopes.
    Stdio,
    /// Streamable HTTP (crate::http): each request carries the principal the HTTP layer
    /// authenticated.
    Http(Arc<HttpServing>),
}

/// What the handlers need to know of an HTTP server.
pub struct HttpServing {
    /// The scopes enforced; `None` for `insecure_no_auth` (one anonymous principal).
    pub scopes: Option<crate::http::config::ScopeConfig>,
    /// Each principal's limits.
    pub limits: crate::http::config::PrincipalLimits,
    /// Whether `vs_...` daemon handles are accepted.
    pub allow_daemon_handles: bool,
    pub audit: Arc<crate::audit::Audit>,
    pub tasks: crate::http::config::TasksConfig,
}

/// Who this server is (`serverInfo`): name and version, and the title, description and
/// website the 2025-11-25 revision allows.
pub fn server_info() -> Implementation {
    Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION"))
        .with_title("Vivarium: sandboxed Python")
        .with_description(env!("CARGO_PKG_DESCRIPTION"))
        .with_website_url(env!("CARGO_PKG_REPOSITORY"))
}

/// Where the daemon's socket is: the flag, else `VIVARIUM_SOCKET`, else the default.
pub fn socket_path(flag: Option<PathBuf>) -> PathBuf {
    vivarium_client::resolve_socket_path(flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_line_skips_blank_tail() {
        assert_eq!(last_line(b"a\nb\n\n").as_deref(), Some("b"));
        assert_eq!(last_line(b"\n\n"), None);
        assert_eq!(last_line(&[b'x'; 500]).unwrap().len(), 200);
    }

    #[test]
    fn start_hints_are_true_to_the_case() {
        let user_default = Path::new("/run/user/1000/vivarium/vivariumd.sock");
        let other = Path::new("/srv/viv.sock");
        let system = Path::new(SYSTEM_SOCKET);
        // A user at their own default: a user daemon listens there without flags; the
        // root daemon listens elsewhere and needs --socket here.
        let t = start_hint_for(user_default, 1000, user_default);
        assert!(t.contains("as this user with `vivariumd --profiles"), "{t}");
        assert!(
            t.contains("listens on /run/user/1000/vivarium/vivariumd.sock by default"),
            "{t}"
        );
        assert!(t.contains("`--socket /run/vivarium/vivariumd.sock`"), "{t}");
        assert!(!t.contains("--config") && !t.contains("non-default"), "{t}");
        // Any user at another path: the daemon's own --socket.
        for euid in [0, 1000] {
            let t = start_hint_for(other, euid, user_default);
            assert!(
                t.contains(
                    "`sudo vivariumd --profiles /path/to/vivarium/profiles --socket /srv/viv.sock`"
                ),
                "{t}"
            );
            assert!(t.contains("VIVARIUM_SOCKET"), "{t}");
            assert_eq!(t.contains("as this user"), euid != 0, "{t}");
        }
        // The system socket: the system daemon, which must admit a non-root user.
        let t = start_hint_for(system, 1000, user_default);
        assert!(
            t.contains("`sudo vivariumd --profiles") && t.contains("allow_uids"),
            "{t}"
        );
        let t = start_hint_for(system, 0, system);
        assert!(
            t.contains("`sudo vivariumd --profiles") && !t.contains("allow_uids"),
            "{t}"
        );
    }

    #[test]
    fn input_file_refusals_are_the_calls_fault_and_say_nothing_ran() {
        let e = ClientError::Refused(vivarium_proto::WireError {
            code: ErrorCode::InvalidInputFile,
            message: "input file \"big.bin\" is 20000000 bytes, and profile \"default\" allows \
                      at most 16777216 per file (files.max_input_file_bytes)"
                .into(),
        });
        let t = job_error_text(&e);
        assert!(
            t.starts_with("invalid input file: input file \"big.bin\" is 20000000 bytes")
                && t.contains("Nothing ran")
                && t.contains("16 MiB per file"),
            "{t}"
        );
        let t = job_error_text(&ClientError::FilesUnsupported { version: 6 });
        assert!(
            t.contains("protocol 6") && t.contains("need 7") && t.contains("omit `files`"),
            "{t}"
        );
        let t = job_error_text(&ClientError::TooManyInputFiles {
            files: 900,
            paths_bytes: 60_000,
        });
        assert!(
            t.contains("900 input files") && !t.contains("connection failed"),
            "{t}"
        );
    }

    #[test]
    fn unreachable_daemon_says_how_to_start_one() {
        let socket = Path::new("/nonexistent/vivariumd.sock");
        let e = ClientError::Connect {
            path: socket.into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let text = connect_error_text(socket, &e);
        assert!(text.contains("sudo vivariumd --profiles"), "{text}");
        assert!(text.contains("/nonexistent/vivariumd.sock"), "{text}");
        assert!(text.contains("VIVARIUM_SOCKET"), "{text}");
    }
}
