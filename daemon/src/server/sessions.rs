//! Sessions: one sandbox per session, whose interpreter runs a cell loop and keeps its
//! `__main__` between cells (docs/ARCHITECTURE.md, "Sessions").
//!
//! A session's sandbox is built by the warm path's code (the same plan as a cold job's,
//! every layer included) with the session bootstrap (`SESSION_BOOTSTRAP`) for a program
//! and a control link ([`super::cell_link`]) for its stdin. One task per session (its
//! supervisor, [`supervise`]) owns the sandbox: it runs one cell at a time, enforces the
//! per-cell wall limit (interrupt, then kill after `interrupt_grace_ms`), the memory
//! guard, the idle TTL, and turns every end into a typed [`SessionEndReason`]; the
//! spawner enforces the lifetime and the CPU budget (the sandbox's `Arm`), the kernel the
//! memory and pids limits (its cgroup).
//!
//! Handles are `vs_` + hex(instance ‖ 128 random bits ‖ tag), the tag an HMAC of the
//! rest and the uid under a key kept in the state directory: a handle is only ever
//! looked up for the uid that opened it (any other uid gets `SessionNotFound`, as for a
//! handle that never existed), and after a restart a handle of an earlier instance whose
//! tag holds for the caller is answered `DaemonRestarted` without any state surviving.

use super::cell_link::{self, CellLink, CellResult};

use super::conn::{send, send_error, StdinChunk};
use super::{ActiveProfile, Daemon};
use hmac::{KeyInit, Mac};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_seqpacket::UnixSeqpacket;
use vivarium_proto::{
    CellException, CellOutcome, CellStatus, ErrorCode, Event, SandboxStart, SessionEndReason,
    SessionEnded, SessionHandle, SessionInfo, SessionLimits, SessionOpened, MAX_PAYLOAD_CHUNK,
};
use vivarium_sandbox::ipc::{FromSpawner, JobReport, KillCause, LiveStats};

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Tombstones kept at most (the oldest go first past it).
const MAX_TOMBSTONES: usize = 10_000;
/// The longest the daemon waits for the spawner's answer about a session's sandbox.
const SPAWNER_ANSWER: Duration = Duration::from_secs(5);

/// Every session of the daemon, and the tombstones of the ended ones.
pub struct Sessions {
    key: [u8; 32],
    instance: [u8; 8],
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Arc<Entry>>,
    /// Places taken by sessions being opened (counted against the limits).
    opening: HashMap<u32, usize>,
    tombstones: HashMap<String, Tombstone>,
}

struct Tombstone {
    uid: u32,
    ended: SessionEnded,
    at: Instant,
    /// Kept until then (`session_tombstone_secs` when it was buried).
    until: Instant,
}

/// One live session, as the table holds it.
struct Entry {
    handle: SessionHandle,
    uid: u32,
    profile: String,
    sandbox_id: u64,
    limits: SessionLimits,
    /// What a cell's artifacts may hold: its profile's `[files]`, as opened.
    output_caps: vivarium_sandbox::outputs::OutputCaps,
    opened: Instant,
    packages: Vec<String>,
    tx: mpsc::UnboundedSender<Command>,
    meta: Mutex<Meta>,
}

#[derive(Clone, Copy)]
struct Meta {
    /// When the last cell ended (or the session opened).
    last_active: Instant,
    running: bool,
    cells: u64,
    usage: LiveStats,
}

/// What a connection asks of a session's supervisor.
enum Command {
    Exec(Box<ExecRequest>, CellReply),
    Interrupt,
    /// End it (`Closed`, `IdleMemory`); the answer is its end.
    End(
        SessionEndReason,
        String,
        Option<oneshot::Sender<SessionEnded>>,
    ),
    Info(oneshot::Sender<SessionInfo>),
}

/// One cell, from a connection.
pub struct ExecRequest {
    pub code: Vec<u8>,
    /// Input files, placed under the session's `/work` before the cell runs.
    pub inputs: super::inputs::Inputs,
    /// What to return as artifacts (protocol 8+); `None`: nothing.
    pub outputs: Option<super::artifacts::Wanted>,
    pub wall_ms: Option<u64>,
    pub stdin: Option<mpsc::UnboundedReceiver<StdinChunk>>,
    pub credits: bool,
    pub sock: Arc<UnixSeqpacket>,
    /// `Cancel` on the connection, or its end: interrupt the cell.
    pub cancel: Arc<Notify>,
}

/// Where a cell's outcome (or the reason it did not run) goes.
type CellReply = oneshot::Sender<Result<CellOutcome, (ErrorCode, String)>>;

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// The session key: read from `dir/session.key`, or made there (0600) when missing, so
/// that handles of an earlier instance are recognised after a restart; in memory only
/// when the directory is not writable (then a restart makes them unknown).
fn load_key(dir: &std::path::Path) -> [u8; 32] {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("session.key");
    let mut key = [0u8; 32];
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.read_exact(&mut key));
    if read.is_ok() {
        return key;
    }
    getrandom::fill(&mut key).expect("the kernel's random numbers");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut f| f.write_all(&key));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "session key not kept: after a restart, earlier sessions' handles are unknown rather than DaemonRestarted");
    }
    key
}

impl Sessions {
    pub fn new(state_dir: &std::path::Path) -> Sessions {
        let mut instance = [0u8; 8];
        getrandom::fill(&mut instance).expect("the kernel's random numbers");
        Sessions {
            key: load_key(state_dir),
            instance,
            table: Mutex::default(),
        }
    }

    fn tag(&self, instance: &[u8], random: &[u8], uid: u32) -> [u8; 8] {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(instance);
        mac.update(random);
        mac.update(&uid.to_le_bytes());
        let out = mac.finalize().into_bytes();
        out[..8].try_into().expect("8 of 32 bytes")
    }

    fn mint(&self, uid: u32) -> Result<SessionHandle, getrandom::Error> {
        let mut random = [0u8; 16];
        getrandom::fill(&mut random)?;
        let tag = self.tag(&self.instance, &random, uid);
        Ok(SessionHandle(format!(
            "vs_{}{}{}",
            hex(&self.instance),
            hex(&random),
            hex(&tag)
        )))
    }

    /// Whether `handle` was made by this daemon's key for `uid` in an earlier instance.
    fn minted_before_restart(&self, handle: &SessionHandle, uid: u32) -> bool {
        let Some(bytes) = handle.0.strip_prefix("vs_").and_then(unhex) else {
            return false;
        };
        if bytes.len() != 32 {
            return false;
        }
        let (instance, rest) = bytes.split_at(8);
        let (random, tag) = rest.split_at(16);
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key");
        mac.update(instance);
        mac.update(random);
        mac.update(&uid.to_le_bytes());
        instance != self.instance && mac.verify_truncated_left(tag).is_ok()
    }

    /// The caller's live session, or the answer to give instead.
    fn find(&self, handle: &SessionHandle, uid: u32) -> Result<Arc<Entry>, Gone> {
        let mut table = self.table.lock().expect("sessions lock");
        if let Some(e) = table.live.get(&handle.0).filter(|e| e.uid == uid) {
            return Ok(e.clone());
        }
        let now = Instant::now();
        if let Some(t) = table
            .tombstones
            .get(&handle.0)
            .filter(|t| t.uid == uid && now < t.until)
        {
            let mut ended = t.ended.clone();
            ended.ended_ms_ago = ms(t.at.elapsed());
            return Err(Gone::Expired(Box::new(ended)));
        }
        if self.minted_before_restart(handle, uid) {
            let ended = SessionEnded {
                handle: handle.clone(),
                reason: SessionEndReason::DaemonRestarted,
                detail: "the daemon was restarted since this session opened: no session survives a restart".into(),
                ended_ms_ago: 0,
                cells: 0,
                cpu_ms: 0,
                peak_memory_bytes: 0,
                age_ms: 0,
            };
            return Err(Gone::Expired(Box::new(ended)));
        }
        table.tombstones.retain(|_, t| now < t.until);
        Err(Gone::NotFound)
    }

    fn bury(&self, entry: &Entry, ended: SessionEnded, keep: Duration) {
        let mut table = self.table.lock().expect("sessions lock");
        table.live.remove(&entry.handle.0);
        let now = Instant::now();
        table.tombstones.retain(|_, t| now < t.until);
        if table.tombstones.len() >= MAX_TOMBSTONES {
            if let Some(oldest) = table
                .tombstones
                .iter()
                .min_by_key(|(_, t)| t.at)
                .map(|(h, _)| h.clone())
            {
                table.tombstones.remove(&oldest);
            }
        }
        table.tombstones.insert(
            entry.handle.0.clone(),
            Tombstone {
                uid: entry.uid,
                ended,
                at: now,
                until: now + keep,
            },
        );
    }

    /// Live sessions: `(all, this uid's)`, those being opened included.
    fn counts(table: &Table, uid: u32) -> (usize, usize) {
        let opening: usize = table.opening.values().sum();
        let mine = table.live.values().filter(|e| e.uid == uid).count()
            + table.opening.get(&uid).copied().unwrap_or(0);
        (table.live.len() + opening, mine)
    }

    /// The profile of the caller's live session `handle`; if there is none, the answer
    /// (`SessionNotFound`, or `SessionExpired` with why) has been sent on `sock`.
    pub async fn profile_or_answer(
        &self,
        sock: &UnixSeqpacket,
        handle: &SessionHandle,
        uid: u32,
    ) -> Option<String> {
        match self.find(handle, uid) {
            Ok(e) => Some(e.profile.clone()),
            Err(gone) => {
                answer_gone(sock, gone).await;
                None
            }
        }
    }

    /// How many sessions are open (for the status line).
    pub fn open_count(&self) -> usize {
        self.table.lock().expect("sessions lock").live.len()
    }

    /// End every session (the daemon is shutting down).
    pub fn end_all(&self) {
        let table = self.table.lock().expect("sessions lock");
        for e in table.live.values() {
            let _ = e.tx.send(Command::End(
                SessionEndReason::DaemonRestarted,
                "the daemon is shutting down".into(),
                None,
            ));
        }
    }

    /// Idle sessions past `max_idle_session_bytes` together: end the longest-idle until
    /// the rest fit.
    fn enforce_idle_memory(&self, budget: u64) {
        let table = self.table.lock().expect("sessions lock");
        let mut idle: Vec<(Instant, u64, &Arc<Entry>)> = table
            .live
            .values()
            .filter_map(|e| {
                let m = *e.meta.lock().expect("session meta lock");
                (!m.running).then_some((m.last_active, m.usage.memory_bytes, e))
            })
            .collect();
        let mut total: u64 = idle.iter().map(|(_, b, _)| b).sum();
        idle.sort_by_key(|(at, _, _)| *at);
        for (_, bytes, e) in idle {
            if total <= budget {
                break;
            }
            total -= bytes;
            let _ = e.tx.send(Command::End(
                SessionEndReason::IdleMemory,
                format!("idle sessions held more than max_idle_session_bytes ({budget} bytes); this one was idle longest"),
                None,
            ));
        }
    }
}

enum Gone {
    NotFound,
    Expired(Box<SessionEnded>),
}

/// Answer a request about a session that is not the caller's live one.
async fn answer_gone(sock: &UnixSeqpacket, gone: Gone) {
    match gone {
        Gone::NotFound => {
            send_error(
                sock,
                ErrorCode::SessionNotFound,
                "no such session (it never existed, or its tombstone has expired)",
            )
            .await;
        }
        Gone::Expired(ended) => {
            send(sock, &Event::SessionExpired(ended)).await;
        }
    }
}

impl Entry {
    fn info(&self, live: Option<LiveStats>) -> SessionInfo {
        let mut meta = self.meta.lock().expect("session meta lock");
        if let Some(u) = live {
            meta.usage = u;
        }
        let now = Instant::now();
        let idle = if meta.running {
            Duration::ZERO
        } else {
            now.duration_since(meta.last_active)
        };
        let (expires_in, by) = self.expiry(&meta, now);
        SessionInfo {
            handle: self.handle.clone(),
            profile: self.profile.clone(),
            sandbox_id: self.sandbox_id,
            limits: self.limits.clone(),
            age_ms: ms(now.duration_since(self.opened)),
            idle_ms: ms(idle),
            expires_at_unix_ms: unix_ms(SystemTime::now() + expires_in),
            expires_in_ms: ms(expires_in),
            expires_by: by,
            memory_bytes: meta.usage.memory_bytes,
            peak_memory_bytes: meta.usage.peak_memory_bytes,
            cells: meta.cells,
            cpu_ms: meta.usage.cpu_ms,
            running: meta.running,
            packages: self.packages.clone(),
        }
    }

    /// From now, when the session ends if no cell comes, and why then.
    fn expiry(&self, meta: &Meta, now: Instant) -> (Duration, SessionEndReason) {
        let lifetime_end = self.opened + Duration::from_millis(self.limits.lifetime_ms);
        let idle_end = meta.last_active + Duration::from_millis(self.limits.idle_ttl_ms);
        let idle_end = if meta.running {
            now + Duration::from_millis(self.limits.idle_ttl_ms)
        } else {
            idle_end
        };
        if idle_end < lifetime_end {
            (
                idle_end.saturating_duration_since(now),
                SessionEndReason::IdleTimeout,
            )
        } else {
            (
                lifetime_end.saturating_duration_since(now),
                SessionEndReason::Lifetime,
            )
        }
    }

    fn ended(&self, reason: SessionEndReason, detail: String) -> SessionEnded {
        let meta = self.meta.lock().expect("session meta lock");
        SessionEnded {
            handle: self.handle.clone(),
            reason,
            detail,
            ended_ms_ago: 0,
            cells: meta.cells,
            cpu_ms: meta.usage.cpu_ms,
            peak_memory_bytes: meta.usage.peak_memory_bytes,
            age_ms: ms(self.opened.elapsed()),
        }
    }
}

/// A session's sandbox as built: ready for its first cell.
struct Sandbox {
    job_id: u64,
    events: mpsc::UnboundedReceiver<FromSpawner>,
    link: CellLink,
    stdout: tokio::net::unix::pipe::Receiver,
    stderr: tokio::net::unix::pipe::Receiver,
    /// The environment in use (not evictable) while the session lives.
    _env: Option<super::packages::Ready>,
}

/// `OpenSession`: check, build, register, answer.
pub async fn open(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    uid: u32,
    req: vivarium_proto::OpenSession,
) {
    let live = daemon.live();
    let Some(active) = live.profiles.get(&req.profile).cloned() else {
        let msg = super::conn::unknown_profile(&live, &req.profile);
        send_error(sock, ErrorCode::UnknownProfile, msg).await;
        return;
    };
    if let Some(why) = &active.disabled {
        let msg = format!("profile {:?} cannot be enforced here: {why}", req.profile);
        send_error(sock, ErrorCode::ProfileDisabled, msg).await;
        return;
    }
    if !active.profile.file.session.enabled {
        let msg = format!(
            "profile {:?} has no sessions ([session] enabled = false)",
            req.profile
        );
        send_error(sock, ErrorCode::SessionsDisabled, msg).await;
        return;
    }
    if daemon.facts.cgroup.is_none() {
        // A session's memory, pids and CPU budget are its cgroup's: without one it would
        // run with none of them (fail closed).
        let msg = "sessions need cgroups for their memory, pids and CPU limits, and this daemon has none (see vivariumd's log)";
        send_error(sock, ErrorCode::ProfileDisabled, msg).await;
        return;
    }
    let limits = match active.profile.session_limits(&req.limits) {
        Ok(l) => l,
        Err(e) => {
            send_error(sock, ErrorCode::LimitOutOfRange, e.to_string()).await;
            return;
        }
    };
    let packages = match super::conn::check_packages(&active, &req.packages) {
        Ok(p) => p,
        Err(e) => {
            send_error(sock, e.code, e.message).await;
            return;
        }
    };
    // A place, counted until the session is registered (or its open fails).
    let config = &live.config;
    let refusal = {
        let mut table = daemon.sessions.table.lock().expect("sessions lock");
        let (all, mine) = Sessions::counts(&table, uid);
        if all >= config.max_sessions {
            Some(format!("{all} sessions are open, the daemon's most (max_sessions); close one or retry later"))
        } else if mine >= config.max_sessions_per_uid {
            Some(format!("uid {uid} has {mine} sessions open, its most (max_sessions_per_uid); close one first"))
        } else {
            *table.opening.entry(uid).or_default() += 1;
            None
        }
    };
    if let Some(msg) = refusal {
        send_error(sock, ErrorCode::Busy, msg).await;
        return;
    }
    let opened = build_and_register(daemon, sock, uid, &active, limits, &packages).await;
    {
        let mut table = daemon.sessions.table.lock().expect("sessions lock");
        if let Some(n) = table.opening.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                table.opening.remove(&uid);
            }
        }
    }
    match opened {
        Ok(opened) => {
            tracing::info!(session = %opened.info.handle, sandbox = opened.info.sandbox_id, profile = %opened.info.profile, uid, "session opened");
            send(sock, &Event::SessionOpened(Box::new(opened))).await;
        }
        Err((code, msg)) => {
            tracing::warn!(uid, error = %msg, "session not opened");
            send_error(sock, code, msg).await;
        }
    }
}

async fn build_and_register(
    daemon: &Arc<Daemon>,
    sock: &Arc<UnixSeqpacket>,
    uid: u32,
    active: &Arc<ActiveProfile>,
    limits: SessionLimits,
    packages: &[crate::packages::spec::Req],
) -> Result<SessionOpened, (ErrorCode, String)> {
    let handle = daemon
        .sessions
        .mint(uid)
        .map_err(|e| (ErrorCode::Internal, format!("no random handle: {e}")))?;
    let (sandbox, start, resolved) = sandbox(daemon, sock, active, &limits, packages).await?;
    let (tx, rx) = mpsc::unbounded_channel();
    let now = Instant::now();
    let entry = Arc::new(Entry {
        handle,
        uid,
        profile: active.profile.name.clone(),
        sandbox_id: sandbox.job_id,
        limits,
        output_caps: active.profile.output_caps(),
        opened: now,
        packages: resolved,
        tx,
        meta: Mutex::new(Meta {
            last_active: now,
            running: false,
            cells: 0,
            usage: LiveStats::default(),
        }),
    });
    daemon
        .sessions
        .table
        .lock()
        .expect("sessions lock")
        .live
        .insert(entry.handle.0.clone(), entry.clone());
    let info = entry.info(None);
    tokio::spawn(supervise(daemon.clone(), entry, sandbox, rx));
    Ok(SessionOpened {
        info,
        sandbox: start,
    })
}

/// A session's sandbox: one from the profile's session pool when the session's memory
/// and pids are the pool's and it asks for exactly the profile's `warm.packages` (none,
/// usually), else one built now on its own environment; then its lifetime and CPU budget
/// are armed (from now: a pooled sandbox's wait is not the session's) and its memory
/// guard set. Also returns the environment's packages (`name==version`).
async fn sandbox(
    daemon: &Arc<Daemon>,
    sock: &UnixSeqpacket,
    active: &Arc<ActiveProfile>,
    limits: &SessionLimits,
    packages: &[crate::packages::spec::Req],
) -> Result<(Sandbox, SandboxStart, Vec<String>), (ErrorCode, String)> {
    let failed =
        |e: super::warm::WarmError| (ErrorCode::SandboxFailed, vivarium_proto::error_chain(&e));
    let own = active.profile.session_limits(&Default::default());
    let same_limits =
        own.is_ok_and(|own| own.memory_bytes == limits.memory_bytes && own.pids == limits.pids);
    let mut asked: Vec<&str> = packages.iter().map(|r| r.text.as_str()).collect();
    asked.sort_unstable();
    asked.dedup();
    let offered = active.profile.warm_packages.iter().map(|r| r.text.as_str());
    let pooled = same_limits
        && asked.into_iter().eq(offered)
        && active.profile.file.session.pool > 0
        && daemon.live().config.max_ready_sandboxes > 0;
    let taken = if pooled {
        let key = super::warm::PoolKey::session(&active.profile.name);
        daemon.warm.take(&key, active).sandbox(CLAIM_WAIT).await
    } else {
        None
    };
    let (w, start) = match taken {
        Some(w) => {
            if let Some(report) = w.packages_report() {
                send(sock, &Event::Packages(report)).await;
            }
            let id = w.job_id;
            (w, SandboxStart::Ready { sandbox_id: id })
        }
        None => {
            let env = if packages.is_empty() {
                None
            } else {
                match super::packages::for_job(daemon, active, packages, &Notify::new()).await {
                    Ok(ready) => {
                        send(sock, &Event::Packages(ready.report())).await;
                        Some(ready)
                    }
                    Err(e) => return Err((e.code, e.message)),
                }
            };
            let built = active.profile.session_sandbox_limits(limits);
            let w = super::warm::build_session_with(daemon, active, &built, env)
                .await
                .map_err(failed)?;
            (w, SandboxStart::Cold)
        }
    };
    let resolved = w
        .env
        .as_ref()
        .map(|r| r.report().resolved)
        .unwrap_or_default();
    let job_id = w.job_id;
    daemon
        .spawner
        .arm(job_id, limits.lifetime_ms, limits.cpu_ms)
        .await;
    if limits.memory_guard_bytes > 0 {
        daemon
            .spawner
            .guard(job_id, limits.memory_guard_bytes, false)
            .await;
    }
    let internal = |what: &str, e: std::io::Error| (ErrorCode::Internal, format!("{what}: {e}"));
    let pipe = |fd: OwnedFd| {
        tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(|e| internal("pipe", e))
    };
    let link = CellLink::from_fd(w.stdin).map_err(|e| internal("control link", e))?;
    // (A pooled sandbox's `Taker` is dropped here: a session lasts minutes, and its pool
    // should refill now, not when it ends.)
    let sb = Sandbox {
        job_id,
        events: w.events,
        link,
        stdout: pipe(w.stdout)?,
        stderr: pipe(w.stderr)?,
        _env: w.env,
    };
    Ok((sb, start, resolved))
}

/// The longest an open waits for the session sandbox being built for its empty pool.
const CLAIM_WAIT: Duration = Duration::from_secs(2);

/// `ExecCell`: hand the cell to its session's supervisor and send what comes back
/// (setting `over` just before that last event, as a job does).
pub async fn exec(
    daemon: Arc<Daemon>,
    uid: u32,
    handle: SessionHandle,
    req: ExecRequest,
    over: Arc<std::sync::atomic::AtomicBool>,
) {
    let sock = req.sock.clone();
    let last = || over.store(true, std::sync::atomic::Ordering::SeqCst);
    let entry = match daemon.sessions.find(&handle, uid) {
        Ok(e) => e,
        Err(gone) => {
            last();
            return answer_gone(&sock, gone).await;
        }
    };
    let (tx, rx) = oneshot::channel();
    let answer = match entry.tx.send(Command::Exec(Box::new(req), tx)) {
        Ok(()) => rx.await.ok(),
        Err(_) => None,
    };
    last();
    match answer {
        Some(Ok(outcome)) => {
            send(&sock, &Event::CellFinished(Box::new(outcome))).await;
        }
        Some(Err((code, msg))) => {
            send_error(&sock, code, msg).await;
        }
        None => {
            // Ended meanwhile: its tombstone says why.
            let gone = daemon
                .sessions
                .find(&handle, uid)
                .err()
                .unwrap_or(Gone::NotFound);
            answer_gone(&sock, gone).await;
        }
    }
}

/// `InterruptCell`, `CloseSession`, `ListSessions`.
pub async fn interrupt(daemon: &Daemon, sock: &UnixSeqpacket, uid: u32, handle: &SessionHandle) {
    match daemon.sessions.find(handle, uid) {
        Ok(e) => {
            let _ = e.tx.send(Command::Interrupt);
            send(sock, &Event::SessionAck).await;
        }
        Err(gone) => answer_gone(sock, gone).await,
    }
}

pub async fn close(daemon: &Daemon, sock: &UnixSeqpacket, uid: u32, handle: &SessionHandle) {
    let entry = match daemon.sessions.find(handle, uid) {
        Ok(e) => e,
        Err(gone) => return answer_gone(sock, gone).await,
    };
    let (tx, rx) = oneshot::channel();
    let asked = entry.tx.send(Command::End(
        SessionEndReason::Closed,
        "closed by its client".into(),
        Some(tx),
    ));
    match (asked, rx.await) {
        (Ok(()), Ok(ended)) => {
            send(sock, &Event::SessionClosed(Box::new(ended))).await;
        }
        _ => {
            let gone = daemon
                .sessions
                .find(handle, uid)
                .err()
                .unwrap_or(Gone::NotFound);
            answer_gone(sock, gone).await;
        }
    }
}

pub async fn list(daemon: &Daemon, sock: &UnixSeqpacket, uid: u32) {
    let mine: Vec<Arc<Entry>> = {
        let table = daemon.sessions.table.lock().expect("sessions lock");
        table
            .live
            .values()
            .filter(|e| e.uid == uid)
            .cloned()
            .collect()
    };
    let mut infos = Vec::with_capacity(mine.len());
    for e in mine {
        let (tx, rx) = oneshot::channel();
        let info = if e.tx.send(Command::Info(tx)).is_ok() {
            tokio::time::timeout(SPAWNER_ANSWER, rx)
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        infos.push(info.unwrap_or_else(|| e.info(None)));
    }
    infos.sort_by_key(|i| std::cmp::Reverse(i.age_ms));
    send(sock, &Event::Sessions(infos)).await;
}

/// What stopped a cell from the outside, if anything.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    Interrupted,
    Timeout,
    MemoryGuard,
}

/// The supervisor of one session: cells one at a time, its idle TTL, its end.
async fn supervise(
    daemon: Arc<Daemon>,
    entry: Arc<Entry>,
    mut sb: Sandbox,
    mut rx: mpsc::UnboundedReceiver<Command>,
) {
    let mut waiters: Vec<oneshot::Sender<SessionEnded>> = Vec::new();
    let (reason, detail) = loop {
        let idle_end = {
            let meta = entry.meta.lock().expect("session meta lock");
            meta.last_active + Duration::from_millis(entry.limits.idle_ttl_ms)
        };
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Command::Exec(req, reply)) => {
                    if let Err(end) = run_cell(&daemon, &entry, &mut sb, &mut rx, *req, reply).await {
                        waiters.extend(end.waiter);
                        break (end.reason, end.detail);
                    }
                    daemon
                        .sessions
                        .enforce_idle_memory(daemon.live().config.max_idle_session_bytes);
                }
                Some(Command::Interrupt) => {}
                Some(Command::Info(reply)) => {
                    let stats = query_stats(&daemon, &mut sb).await;
                    match stats {
                        Ok((s, _)) => { let _ = reply.send(entry.info(Some(s))); }
                        Err(end) => {
                            let _ = reply.send(entry.info(None));
                            break (end.reason, end.detail);
                        }
                    }
                }
                Some(Command::End(reason, detail, waiter)) => {
                    waiters.extend(waiter);
                    break (reason, detail);
                }
                None => break (SessionEndReason::DaemonRestarted, "the daemon is shutting down".into()),
            },
            msg = sb.events.recv() => match msg {
                Some(FromSpawner::Finished { report, .. }) => {
                    let (reason, detail) = ended_by(&report);
                    finish(&daemon, &entry, &mut sb, reason, detail, waiters, Some(report)).await;
                    return;
                }
                Some(_) => {}
                None => break (SessionEndReason::DaemonRestarted, "the spawner went away".into()),
            },
            () = tokio::time::sleep_until(idle_end.into()) => {
                let idle = entry.limits.idle_ttl_ms / 1000;
                break (SessionEndReason::IdleTimeout, format!("no cell for {idle} s (its idle TTL)"));
            }
        }
    };
    finish(&daemon, &entry, &mut sb, reason, detail, waiters, None).await;
}

/// End the session: kill its sandbox (unless it is gone), wait for the spawner to say
/// it is, leave its tombstone, tell whoever waits.
async fn finish(
    daemon: &Daemon,
    entry: &Entry,
    sb: &mut Sandbox,
    reason: SessionEndReason,
    detail: String,
    waiters: Vec<oneshot::Sender<SessionEnded>>,
    report: Option<Box<JobReport>>,
) {
    let report = match report {
        Some(r) => Some(r),
        None => {
            daemon.spawner.kill(sb.job_id, KillCause::Shutdown).await;
            wait_finished(sb).await
        }
    };
    if let Some(r) = &report {
        let mut meta = entry.meta.lock().expect("session meta lock");
        meta.usage.cpu_ms = meta.usage.cpu_ms.max(r.cpu_ms);
        meta.usage.peak_memory_bytes = meta.usage.peak_memory_bytes.max(r.peak_memory_bytes);
    }
    let ended = entry.ended(reason, detail);
    tracing::info!(session = %entry.handle, sandbox = sb.job_id, reason = ?ended.reason, detail = %ended.detail, cells = ended.cells, "session ended");
    let keep = Duration::from_secs(daemon.live().config.session_tombstone_secs);
    daemon.sessions.bury(entry, ended.clone(), keep);
    for w in waiters {
        let _ = w.send(ended.clone());
    }
}

/// The spawner's `Finished` for the sandbox (after a kill), or `None` if it never comes.
async fn wait_finished(sb: &mut Sandbox) -> Option<Box<JobReport>> {
    let wait = async {
        while let Some(msg) = sb.events.recv().await {
            if let FromSpawner::Finished { report, .. } = msg {
                return Some(report);
            }
        }
        None
    };
    tokio::time::timeout(SPAWNER_ANSWER, wait)
        .await
        .ok()
        .flatten()
}

/// Why the sandbox ended on its own, from the spawner's evidence.
fn ended_by(report: &JobReport) -> (SessionEndReason, String) {
    use vivarium_sandbox::report::WaitStatus;
    if let Some(f) = &report.failure {
        return (
            SessionEndReason::SandboxError,
            format!("sandbox step {} failed: {}", f.step, f.detail),
        );
    }
    match report.killed {
        Some(KillCause::Timeout) => {
            return (
                SessionEndReason::Lifetime,
                "its maximum lifetime passed".into(),
            )
        }
        Some(KillCause::CpuLimit) => {
            return (
                SessionEndReason::CpuBudget,
                format!("it used its whole CPU budget ({} ms)", report.cpu_ms),
            )
        }
        Some(KillCause::Shutdown) => {
            return (
                SessionEndReason::DaemonRestarted,
                "the daemon is shutting down".into(),
            )
        }
        _ => {}
    }
    if report.oom_kills > 0 {
        return (
            SessionEndReason::Memory,
            format!(
                "the kernel's OOM killer ended it at its memory limit (peak {} bytes)",
                report.peak_memory_bytes
            ),
        );
    }
    match report.exit {
        Some(WaitStatus::Signal(sig)) if sig == libc::SIGSYS => (
            SessionEndReason::Seccomp,
            "a syscall the seccomp filter kills on".into(),
        ),
        Some(WaitStatus::Signal(sig)) => (
            SessionEndReason::Exited,
            format!("the interpreter was killed by signal {sig}"),
        ),
        Some(WaitStatus::Code(code)) => (
            SessionEndReason::Exited,
            format!("the interpreter exited with status {code}"),
        ),
        None => (SessionEndReason::Exited, "the interpreter ended".into()),
    }
}

/// Why a cell could not end normally: the session is over.
struct End {
    reason: SessionEndReason,
    detail: String,
    waiter: Option<oneshot::Sender<SessionEnded>>,
}

impl End {
    fn new(reason: SessionEndReason, detail: impl Into<String>) -> End {
        End {
            reason,
            detail: detail.into(),
            waiter: None,
        }
    }
}

/// Ask the spawner what the sandbox uses now (its `Finished` instead means it is gone),
/// and whether it said, before answering, that the memory guard was reached (it tells
/// that before it sends the SIGINT, so a cell interrupted by the guard is known as such
/// here, whichever of its result and that message the supervisor read first).
async fn query_stats(daemon: &Daemon, sb: &mut Sandbox) -> Result<(LiveStats, bool), End> {
    daemon.spawner.stats(sb.job_id).await;
    let mut guarded = false;
    let wait = async {
        loop {
            match sb.events.recv().await {
                Some(FromSpawner::Stats { stats, .. }) => return Ok((stats, guarded)),
                Some(FromSpawner::MemoryHigh { .. }) => guarded = true,
                Some(FromSpawner::Finished { report, .. }) => {
                    let (reason, detail) = ended_by(&report);
                    return Err(End::new(reason, detail));
                }
                Some(_) => continue,
                None => {
                    return Err(End::new(
                        SessionEndReason::DaemonRestarted,
                        "the spawner went away",
                    ))
                }
            }
        }
    };
    tokio::time::timeout(SPAWNER_ANSWER, wait)
        .await
        .unwrap_or_else(|_| {
            Err(End::new(
                SessionEndReason::SandboxError,
                "the spawner did not answer about the session's sandbox",
            ))
        })
}

/// One stream of a cell's output: what was read, what was forwarded.
#[derive(Default)]
struct StreamCount {
    read: u64,
}

impl StreamCount {
    /// Forward `chunk` within `cap`.
    async fn forward(&mut self, sock: &UnixSeqpacket, chunk: &[u8], cap: u64, stdout: bool) {
        let room = cap.saturating_sub(self.read) as usize;
        self.read += chunk.len() as u64;
        if room > 0 {
            let part = chunk[..chunk.len().min(room)].to_vec();
            let event = if stdout {
                Event::Stdout(part)
            } else {
                Event::Stderr(part)
            };
            send(sock, &event).await;
        }
    }
}

/// Run one cell. `Err`: the session ended (the cell's outcome, sent here, says so).
async fn run_cell(
    daemon: &Daemon,
    entry: &Entry,
    sb: &mut Sandbox,
    rx: &mut mpsc::UnboundedReceiver<Command>,
    req: ExecRequest,
    reply: CellReply,
) -> Result<(), End> {
    let ExecRequest {
        code,
        inputs,
        outputs,
        wall_ms,
        stdin,
        credits,
        sock,
        cancel,
    } = req;
    let before = {
        let mut meta = entry.meta.lock().expect("session meta lock");
        meta.running = true;
        meta.usage
    };
    let cell_no = before_cells(entry) + 1;
    let started = Instant::now();
    let limits = &entry.limits;
    let wall = Duration::from_millis(
        wall_ms
            .unwrap_or(limits.cell_wall_ms)
            .min(limits.cell_wall_ms),
    );
    // The cell's stdin: a pipe of its own, its read end handed into the sandbox.
    let (stdin_r, stdin_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => {
            let _ = reply.send(Err((ErrorCode::Internal, format!("pipe: {e}"))));
            entry.meta.lock().expect("session meta lock").running = false;
            return Ok(());
        }
    };
    let cell = cell_no as u32;
    let files = inputs.files.len() as u32; // (the files go at the head of its stdin)
                                           // The outputs: asked for in the `C` datagram; the bundle comes with the result.
    let caps = entry.output_caps;
    let request = outputs
        .as_ref()
        .map(|wanted| super::artifacts::request_bytes(wanted, &caps));
    let sent = sb
        .link
        .send_cell(cell, &code, files, stdin_r.as_fd(), request.as_deref())
        .await;
    if let Err(e) = sent {
        drop(stdin_r);
        let end = End::new(
            SessionEndReason::LinkFailed,
            format!("sending the cell: {e}"),
        );
        return Err(end_in_cell(daemon, entry, sb, reply, cell_no, started, end).await);
    }
    drop(stdin_r);
    let credit_sock = credits.then(|| sock.clone());
    // The input files go first on the cell's stdin: the cell loop places them, then
    // hands the rest of the pipe to the cell.
    let head = inputs.into_stream();
    super::job::widen_pipe(&stdin_w, head.len());
    let feeder = tokio::spawn(super::job::feed_stdin(stdin_w, head, stdin, credit_sock));
    let guard = limits.memory_guard_bytes > 0 && before.memory_bytes < limits.memory_guard_bytes;
    if guard {
        daemon
            .spawner
            .guard(sb.job_id, limits.memory_guard_bytes, true)
            .await;
    }
    let cap = limits.output_bytes;
    let (mut out, mut err) = (StreamCount::default(), StreamCount::default());
    let mut out_buf = vec![0u8; MAX_PAYLOAD_CHUNK];
    let mut err_buf = vec![0u8; MAX_PAYLOAD_CHUNK];
    let deadline = tokio::time::Instant::now() + wall;
    let mut stop: Option<Stop> = None;
    let mut grace: Option<tokio::time::Instant> = None;
    let grace_len = Duration::from_millis(limits.interrupt_grace_ms);
    let mut out_open = true;
    let mut err_open = true;
    let interrupt =
        |why: Stop, stop: &mut Option<Stop>, grace: &mut Option<tokio::time::Instant>| {
            if stop.is_none() {
                *stop = Some(why);
                *grace = Some(tokio::time::Instant::now() + grace_len);
                true
            } else {
                false
            }
        };
    let result: Result<(CellResult, Option<OwnedFd>), End> = loop {
        tokio::select! {
            r = sb.link.next_result_with_bundle() => match r {
                Ok((res, bundle)) if res.cell == cell => break Ok((res, bundle)),
                Ok(_) => continue, // a stale result (or the cell's own forgery): not this cell's end
                Err(cell_link::LinkError::Closed) => {
                    // The interpreter is gone: the spawner's report says how.
                    let end = match wait_finished(sb).await {
                        Some(report) => { let (r, d) = ended_by(&report); End::new(r, d) }
                        None => End::new(SessionEndReason::Exited, "the interpreter ended"),
                    };
                    break Err(end);
                }
                Err(e) => break Err(End::new(SessionEndReason::LinkFailed, format!("the cell's result: {}", vivarium_proto::error_chain(&e)))),
            },
            n = sb.stdout.read(&mut out_buf), if out_open => match n {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => out.forward(&sock, &out_buf[..n], cap, true).await,
            },
            n = sb.stderr.read(&mut err_buf), if err_open => match n {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => err.forward(&sock, &err_buf[..n], cap, false).await,
            },
            msg = sb.events.recv() => match msg {
                Some(FromSpawner::MemoryHigh { .. }) if guard => {
                    // The spawner has sent the interpreter SIGINT itself, at once: the
                    // link's reader thread would first wait for the interpreter's lock
                    // (up to its 5 ms switch interval).
                    interrupt(Stop::MemoryGuard, &mut stop, &mut grace);
                }
                Some(FromSpawner::Finished { report, .. }) => {
                    let (r, d) = ended_by(&report);
                    break Err(End::new(r, d));
                }
                Some(_) => {}
                None => break Err(End::new(SessionEndReason::DaemonRestarted, "the spawner went away")),
            },
            () = cancel.notified() => {
                if interrupt(Stop::Interrupted, &mut stop, &mut grace) {
                    let _ = sb.link.interrupt(cell).await;
                }
            }
            cmd = rx.recv() => match cmd {
                Some(Command::Interrupt) => {
                    if interrupt(Stop::Interrupted, &mut stop, &mut grace) {
                        let _ = sb.link.interrupt(cell).await;
                    }
                }
                Some(Command::Exec(_, other)) => {
                    let _ = other.send(Err((ErrorCode::SessionBusy, "the session is running a cell; one cell at a time".into())));
                }
                Some(Command::Info(r)) => { let _ = r.send(entry.info(None)); }
                Some(Command::End(reason, detail, waiter)) => {
                    break Err(End { reason, detail, waiter });
                }
                None => break Err(End::new(SessionEndReason::DaemonRestarted, "the daemon is shutting down")),
            },
            () = tokio::time::sleep_until(deadline), if stop.is_none() => {
                if interrupt(Stop::Timeout, &mut stop, &mut grace) {
                    let _ = sb.link.interrupt(cell).await;
                }
            }
            () = tokio::time::sleep_until(grace.unwrap_or(deadline)), if grace.is_some() => {
                let why = match stop {
                    Some(Stop::MemoryGuard) => "near its memory limit",
                    Some(Stop::Timeout) => "past its wall limit",
                    _ => "on request",
                };
                break Err(End::new(SessionEndReason::Unresponsive, format!(
                    "cell {cell_no} was interrupted {why} and did not stop within {} ms (it ignored SIGINT, or was in a call that does not return to Python): the session was killed and its state is lost",
                    limits.interrupt_grace_ms
                )));
            }
        }
    };
    feeder.abort();
    let _ = feeder.await;
    if guard {
        daemon
            .spawner
            .guard(sb.job_id, limits.memory_guard_bytes, false)
            .await;
    }
    let (res, bundle) = match result {
        Ok(got) => got,
        Err(end) => return Err(end_in_cell(daemon, entry, sb, reply, cell_no, started, end).await),
    };
    // Everything the cell wrote before its result is in the pipes now.
    drain(&mut sb.stdout, &mut out_buf, &mut out, &sock, cap, true).await;
    drain(&mut sb.stderr, &mut err_buf, &mut err, &sock, cap, false).await;
    // And its bundle, which came with the result.
    if let Some(wanted) = outputs {
        use vivarium_proto::ArtifactsStatus::NotCollected;
        let most = super::artifacts::max_bundle_len(&caps);
        let read = match bundle {
            None => Err(NotCollected(
                "the cell loop sent no artifacts (it could not collect them)".into(),
            )),
            Some(fd) => tokio::task::spawn_blocking(move || cell_link::read_bundle(fd, most))
                .await
                .unwrap_or(Err(cell_link::BundleError::NotSealed))
                .map_err(|e| {
                    tracing::warn!(error = %e, "a cell's output bundle was refused");
                    NotCollected(format!("the session's answer was refused: {e}"))
                }),
        };
        let collected = match read {
            Ok(b) => super::artifacts::parse_off_thread(b, wanted, caps)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "a cell's output bundle was refused");
                    NotCollected(format!("the session's answer was refused: {e}"))
                }),
            Err(status) => Err(status),
        };
        super::artifacts::send(&sock, collected, &caps).await;
    }
    let wall_ms = ms(started.elapsed());
    let usage = match query_stats(daemon, sb).await {
        Ok((u, guarded)) => {
            if guard && guarded && stop.is_none() {
                stop = Some(Stop::MemoryGuard);
            }
            u
        }
        Err(end) => return Err(end_in_cell(daemon, entry, sb, reply, cell_no, started, end).await),
    };
    let status = match res.status {
        cell_link::CellStatus::Ok => CellStatus::Ok,
        cell_link::CellStatus::Exception {
            type_name,
            message,
            traceback,
            traceback_truncated,
        } => match stop {
            Some(s) if type_name == "KeyboardInterrupt" => match s {
                Stop::Interrupted => CellStatus::Interrupted,
                Stop::Timeout => CellStatus::Timeout,
                Stop::MemoryGuard => CellStatus::MemoryGuard,
            },
            _ => CellStatus::Exception(CellException {
                type_name,
                message,
                traceback,
                traceback_truncated,
            }),
        },
    };
    let (expires_in, _) = {
        let mut meta = entry.meta.lock().expect("session meta lock");
        meta.running = false;
        meta.cells = cell_no;
        meta.usage = usage;
        meta.last_active = Instant::now();
        entry.expiry(&meta, Instant::now())
    };
    let outcome = CellOutcome {
        session: entry.handle.clone(),
        cell: cell_no,
        status,
        value: res.value,
        value_truncated: res.value_truncated,
        wall_ms,
        cpu_ms: usage.cpu_ms.saturating_sub(before.cpu_ms),
        memory_bytes: usage.memory_bytes,
        peak_memory_bytes: usage.peak_memory_bytes,
        stdout_bytes: out.read,
        stderr_bytes: err.read,
        stdout_truncated: out.read > cap,
        stderr_truncated: err.read > cap,
        expires_at_unix_ms: unix_ms(SystemTime::now() + expires_in),
        expires_in_ms: ms(expires_in),
    };
    let _ = reply.send(Ok(outcome));
    Ok(())
}

fn before_cells(entry: &Entry) -> u64 {
    entry.meta.lock().expect("session meta lock").cells
}

/// Read what is in `pipe` now (without waiting), forwarding it within `cap`.
async fn drain(
    pipe: &mut tokio::net::unix::pipe::Receiver,
    buf: &mut [u8],
    count: &mut StreamCount,
    sock: &UnixSeqpacket,
    cap: u64,
    stdout: bool,
) {
    // A read(2) of its own, not tokio's `try_read`: that one answers WouldBlock unless
    // the reactor has already seen the pipe readable, which it may not have yet.
    loop {
        match nix::unistd::read(pipe.as_fd(), buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => count.forward(sock, &buf[..n], cap, stdout).await,
        }
    }
}

/// The session ended during cell `cell_no`: its outcome says so (sent to the client),
/// and the supervisor ends it with `end`.
async fn end_in_cell(
    daemon: &Daemon,
    entry: &Entry,
    sb: &mut Sandbox,
    reply: CellReply,
    cell_no: u64,
    started: Instant,
    end: End,
) -> End {
    let _ = (daemon, &sb);
    let wall_ms = ms(started.elapsed());
    let ended = entry.ended(end.reason, end.detail.clone());
    let usage = entry.meta.lock().expect("session meta lock").usage;
    let outcome = CellOutcome {
        session: entry.handle.clone(),
        cell: cell_no,
        status: CellStatus::SessionEnded(Box::new(ended)),
        value: None,
        value_truncated: false,
        wall_ms,
        cpu_ms: 0,
        memory_bytes: 0,
        peak_memory_bytes: usage.peak_memory_bytes,
        stdout_bytes: 0,
        stderr_bytes: 0,
        stdout_truncated: false,
        stderr_truncated: false,
        expires_at_unix_ms: 0,
        expires_in_ms: 0,
    };
    let _ = reply.send(Ok(outcome));
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> (Sessions, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        (Sessions::new(dir.path()), dir)
    }

    /// Handles are 128 random bits beyond the instance, and bound to their uid: a
    /// handle of an earlier instance (same key) is recognised for its own uid only.
    #[test]
    fn handles_are_random_and_bound_to_their_uid_across_a_restart() {
        let (a, dir) = sessions();
        let h1 = a.mint(1000).unwrap();
        let h2 = a.mint(1000).unwrap();
        assert_ne!(h1, h2);
        assert_eq!(h1.0.len(), 3 + 64);
        assert!(
            !a.minted_before_restart(&h1, 1000),
            "not from an earlier instance"
        );
        // The next instance, with the key kept in the state directory.
        let b = Sessions::new(dir.path());
        assert!(b.minted_before_restart(&h1, 1000));
        assert!(!b.minted_before_restart(&h1, 1001), "another uid's");
        let mut forged = h1.0.clone();
        let last = forged.pop().unwrap();
        forged.push(if last == '0' { '1' } else { '0' });
        assert!(!b.minted_before_restart(&SessionHandle(forged), 1000));
        assert!(!b.minted_before_restart(&SessionHandle("vs_zz".into()), 1000));
        assert!(matches!(b.find(&h1, 1001), Err(Gone::NotFound)));
        match b.find(&h1, 1000) {
            Err(Gone::Expired(e)) => assert_eq!(e.reason, SessionEndReason::DaemonRestarted),
            _ => panic!("expected DaemonRestarted"),
        }
        // Another key (a lost state directory): unknown.
        let (c, _d) = sessions();
        assert!(!c.minted_before_restart(&h1, 1000));
    }
}
