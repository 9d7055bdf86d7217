//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) over HTTP: a
//! `run_python` call that becomes a task answers at once with a task id, its job runs on
//! without the request, and the client polls `tasks/get` and may `tasks/cancel` it.
//!
//! The store is bound to principals: each principal's tasks live in its own map, looked
//! up only by its own [`PrincipalKey`], so another principal's task id answers exactly as
//! a made-up one ("no such task"). Ids are `task_` and 128 random bits. A principal keeps
//! at most `limits.tasks` tasks (running or holding a result); a finished task is kept
//! `result_ttl_seconds` after it finished, then forgotten. At the cap, the oldest finished
//! task whose result a `tasks/get` already returned makes room; if there is none, the new
//! call is refused (a tool error, nothing ran).
//!
//! rmcp's own `TaskManager` is not used: it has no principal binding, uuid ids, and a
//! TTL from creation that would fail a long job.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rmcp::model::{CallToolResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use rmcp::ErrorData;
use tokio_util::sync::CancellationToken;

use crate::principal::PrincipalKey;

/// The prefix of every task id.
pub const ID_PREFIX: &str = "task_";

/// Tasks kept across all principals, whatever their number (memory stays bounded).
pub const MAX_TASKS_TOTAL: usize = 65_536;

/// The polling interval suggested to clients.
pub const POLL_INTERVAL_MS: u64 = 2_000;

/// A `tools/call` `_meta` key: `true` asks for a task whatever the timeout, `false` for
/// the synchronous path (only for a client that declared the extension on the request;
/// SEP-2663 has no request-side field, task creation is the server's decision).
pub const TASK_META_KEY: &str = "vivarium/task";

/// One principal's task.
struct Entry {
    /// Its wire state (`status` kept in step with `payload`).
    task: Task,
    payload: TaskPayload,
    /// When it was created (Unix ms), for `ttlMs`.
    created_ms: u64,
    /// When it reached a terminal status.
    finished: Option<Instant>,
    /// Whether a `tasks/get` returned its terminal state (it may then make room).
    delivered: bool,
    /// Cancels the job.
    cancel: CancellationToken,
}

/// A new task: what the `CreateTaskResult` carries and what its runner needs.
#[derive(Debug)]
pub struct Created {
    pub id: String,
    pub task: Task,
    /// Cancelled by `tasks/cancel` (and [`TaskStore::shutdown`]): the job's own token.
    pub cancel: CancellationToken,
}

/// Why no task was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "too many tasks: this client already has {max} tasks running or holding a result, \
         the most this server keeps for one client. Nothing ran. Poll a finished one with \
         tasks/get (a result it returned makes room), cancel one with tasks/cancel, or wait: \
         a result is kept {ttl_s} s after its task finished"
    )]
    PrincipalFull { max: usize, ttl_s: u64 },
    #[error("too many tasks on this server (all clients together). Nothing ran; retry later")]
    ServerFull,
}

/// How a task's run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The tool result (a tool error included: `completed` with `isError`).
    Completed(CallToolResult),
    /// The run failed without a tool result (a JSON-RPC error).
    Failed(ErrorData),
    /// `tasks/cancel` (or shutdown) stopped it.
    Cancelled,
}

/// Every principal's tasks.
pub struct TaskStore {
    result_ttl: Duration,
    per_principal: usize,
    total: usize,
    map: Mutex<HashMap<PrincipalKey, HashMap<String, Entry>>>,
}

impl TaskStore {
    /// Results kept `result_ttl` after their task finished; `per_principal` tasks each.
    pub fn new(result_ttl: Duration, per_principal: usize) -> TaskStore {
        TaskStore::with_total(result_ttl, per_principal, MAX_TASKS_TOTAL)
    }

    fn with_total(result_ttl: Duration, per_principal: usize, total: usize) -> TaskStore {
        TaskStore {
            result_ttl,
            per_principal,
            total,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// A new `working` task of `owner`; it resolves in [`Self::get`] from now on.
    pub fn create(&self, owner: &PrincipalKey) -> Result<Created, Refused> {
        self.create_at(owner, Instant::now())
    }

    fn create_at(&self, owner: &PrincipalKey, now: Instant) -> Result<Created, Refused> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep(&mut map, now);
        let mine = map.get(owner).map_or(0, HashMap::len);
        if mine >= self.per_principal {
            // Make room with the oldest result already delivered, if there is one.
            let tasks = map.get_mut(owner).expect("counted above");
            let oldest = tasks
                .iter()
                .filter(|(_, e)| e.delivered)
                .min_by_key(|(_, e)| e.finished)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => {
                    tasks.remove(&id);
                }
                None => {
                    return Err(Refused::PrincipalFull {
                        max: self.per_principal,
                        ttl_s: self.result_ttl.as_secs(),
                    })
                }
            }
        }
        let total: usize = map.values().map(HashMap::len).sum();
        if total >= self.total {
            return Err(Refused::ServerFull);
        }
        let id = mint_id();
        let wall = SystemTime::now();
        let stamp = timestamp_of(wall);
        let mut task = Task::new(id.clone(), TaskStatus::Working, stamp.clone(), stamp);
        task.poll_interval_ms = Some(POLL_INTERVAL_MS);
        // A running task is not discarded (the job's wall limit ends it); its result then
        // lives `result_ttl` (ttlMs becomes finite when it finishes).
        task.ttl_ms = None;
        let cancel = CancellationToken::new();
        map.entry(owner.clone()).or_default().insert(
            id.clone(),
            Entry {
                task: task.clone(),
                payload: TaskPayload::Working,
                created_ms: unix_ms(wall),
                finished: None,
                delivered: false,
                cancel: cancel.clone(),
            },
        );
        Ok(Created { id, task, cancel })
    }

    /// Record how `owner`'s task `id` ended (a task already cancelled stays cancelled).
    pub fn finish(&self, owner: &PrincipalKey, id: &str, outcome: Outcome) {
        self.finish_at(owner, id, outcome, Instant::now(), SystemTime::now());
    }

    fn finish_at(
        &self,
        owner: &PrincipalKey,
        id: &str,
        outcome: Outcome,
        now: Instant,
        wall: SystemTime,
    ) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = map.get_mut(owner).and_then(|m| m.get_mut(id)) else {
            return;
        };
        if entry.finished.is_some() {
            return;
        }
        entry.payload = match outcome {
            Outcome::Completed(result) => TaskPayload::Completed {
                result: to_object(&result),
            },
            Outcome::Failed(error) => TaskPayload::Failed {
                error: to_object(&error),
            },
            Outcome::Cancelled => {
                entry.task.status_message = Some(
                    "cancelled by tasks/cancel: the job was killed (a session's cell interrupted)"
                        .into(),
                );
                TaskPayload::Cancelled
            }
        };
        entry.task.status = entry.payload.status();
        entry.finished = Some(now);
        let stamp = timestamp_of(wall);
        entry.task.last_updated_at = stamp;
        // From creation: how long it ran, then the result's time to live.
        let ran_ms = unix_ms(wall).saturating_sub(entry.created_ms);
        entry.task.ttl_ms = Some(ran_ms + self.result_ttl.as_millis() as u64);
    }

    /// `owner`'s task `id` as it stands; `None` for an unknown id, an expired one, and
    /// another principal's, alike.
    pub fn get(&self, owner: &PrincipalKey, id: &str) -> Option<DetailedTask> {
        self.get_at(owner, id, Instant::now())
    }

    fn get_at(&self, owner: &PrincipalKey, id: &str, now: Instant) -> Option<DetailedTask> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep(&mut map, now);
        let entry = map.get_mut(owner)?.get_mut(id)?;
        if entry.finished.is_some() {
            entry.delivered = true;
        }
        Some(DetailedTask::new(entry.task.clone(), entry.payload.clone()))
    }

    /// Ask `owner`'s task `id` to stop (its job is killed); its status then, `None` as in
    /// [`Self::get`]. A finished task keeps its status (cancellation is cooperative).
    pub fn cancel(&self, owner: &PrincipalKey, id: &str) -> Option<TaskStatus> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep(&mut map, Instant::now());
        let entry = map.get_mut(owner)?.get_mut(id)?;
        if entry.finished.is_none() {
            entry.cancel.cancel();
        }
        Some(entry.task.status)
    }

    /// Whether `owner` holds task `id` (without counting as a delivery of its result).
    pub fn holds(&self, owner: &PrincipalKey, id: &str) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep(&mut map, Instant::now());
        map.get(owner).is_some_and(|m| m.contains_key(id))
    }

    /// Tasks `owner` holds now (running or holding a result).
    pub fn count(&self, owner: &PrincipalKey) -> usize {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        self.sweep(&mut map, Instant::now());
        map.get(owner).map_or(0, HashMap::len)
    }

    /// Cancel every running task (server shutdown).
    pub fn shutdown(&self) {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        for entry in map.values().flat_map(HashMap::values) {
            entry.cancel.cancel();
        }
    }

    /// Forget the results older than their time to live, and principals left without tasks.
    fn sweep(&self, map: &mut HashMap<PrincipalKey, HashMap<String, Entry>>, now: Instant) {
        let ttl = self.result_ttl;
        map.retain(|_, tasks| {
            tasks.retain(|_, e| {
                e.finished
                    .is_none_or(|f| now.saturating_duration_since(f) < ttl)
            });
            !tasks.is_empty()
        });
    }
}

fn to_object<T: serde::Serialize>(value: &T) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// A new task id: `task_` and 128 random bits in hex (from the kernel's CSPRNG).
pub fn mint_id() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    let mut id = String::with_capacity(ID_PREFIX.len() + 32);
    id.push_str(ID_PREFIX);
    for b in bytes {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// RFC 3339 UTC with milliseconds (`...:SS.mmmZ`).
fn timestamp_of(t: SystemTime) -> String {
    let ms = unix_ms(t);
    let base = crate::session::rfc3339_utc(ms);
    format!("{}.{:03}Z", base.trim_end_matches('Z'), ms % 1000)
}

/// The answer to a task id this principal does not have (unknown, expired, or another's).
pub fn not_found(id: &str) -> ErrorData {
    ErrorData::invalid_params(
        format!(
            "no such task `{id}`: task ids are valid only for the client that started the \
             task, on the server that started it, until its result expires"
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    fn key(sub: &str) -> PrincipalKey {
        PrincipalKey::new("https://as", sub)
    }

    fn done(text: &str) -> Outcome {
        Outcome::Completed(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    #[test]
    fn ids_are_128_random_bits() {
        let a = mint_id();
        let b = mint_id();
        assert_ne!(a, b);
        assert!(a.starts_with(ID_PREFIX));
        assert_eq!(a.len(), ID_PREFIX.len() + 32);
        assert!(a[ID_PREFIX.len()..].chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn a_task_resolves_at_once_and_carries_its_result() {
        let store = TaskStore::new(Duration::from_secs(60), 4);
        let alice = key("alice");
        let created = store.create(&alice).unwrap();
        assert_eq!(created.task.task_id, created.id);
        let working = store.get(&alice, &created.id).unwrap();
        assert_eq!(working.status(), TaskStatus::Working);
        assert_eq!(working.task.ttl_ms, None);
        store.finish(&alice, &created.id, done("done"));
        let finished = store.get(&alice, &created.id).unwrap();
        assert_eq!(finished.status(), TaskStatus::Completed);
        let TaskPayload::Completed { result } = &finished.payload else {
            panic!("{finished:?}");
        };
        assert!(serde_json::Value::Object(result.clone())
            .to_string()
            .contains("done"));
        let ttl = finished.task.ttl_ms.unwrap();
        assert!((60_000..70_000).contains(&ttl), "{ttl}");
        // A second finish changes nothing.
        store.finish(&alice, &created.id, Outcome::Cancelled);
        assert_eq!(
            store.get(&alice, &created.id).unwrap().status(),
            TaskStatus::Completed
        );
    }

    #[test]
    fn another_principals_id_is_answered_as_an_unknown_one() {
        let store = TaskStore::new(Duration::from_secs(60), 4);
        let (alice, bob) = (key("alice"), key("bob"));
        let created = store.create(&alice).unwrap();
        // The same answer for a foreign id as for a made-up one: None, whatever the call.
        assert!(store.get(&bob, &created.id).is_none());
        assert!(store.get(&bob, &mint_id()).is_none());
        assert!(store.cancel(&bob, &created.id).is_none());
        assert!(store.cancel(&bob, &mint_id()).is_none());
        assert!(!store.holds(&bob, &created.id) && store.holds(&alice, &created.id));
        // Same issuer, other subject; same subject, other issuer.
        assert!(store
            .get(&PrincipalKey::new("https://other", "alice"), &created.id)
            .is_none());
        // Bob's attempts changed nothing for alice.
        assert!(!created.cancel.is_cancelled());
        assert_eq!(
            store.get(&alice, &created.id).unwrap().status(),
            TaskStatus::Working
        );
        // And bob's finish of alice's id (not reachable from the wire) does nothing.
        store.finish(&bob, &created.id, done("x"));
        assert_eq!(
            store.get(&alice, &created.id).unwrap().status(),
            TaskStatus::Working
        );
        assert_eq!(not_found("a").message, not_found("a").message);
    }

    #[test]
    fn cancel_fires_the_jobs_token_and_the_task_ends_cancelled() {
        let store = TaskStore::new(Duration::from_secs(60), 4);
        let alice = key("alice");
        let created = store.create(&alice).unwrap();
        assert_eq!(store.cancel(&alice, &created.id), Some(TaskStatus::Working));
        assert!(created.cancel.is_cancelled());
        store.finish(&alice, &created.id, Outcome::Cancelled);
        let t = store.get(&alice, &created.id).unwrap();
        assert_eq!(t.status(), TaskStatus::Cancelled);
        // Cancelling a finished task keeps its status.
        let other = store.create(&alice).unwrap();
        store.finish(&alice, &other.id, done("ok"));
        assert_eq!(store.cancel(&alice, &other.id), Some(TaskStatus::Completed));
        assert!(!other.cancel.is_cancelled());
    }

    #[test]
    fn results_expire_after_their_ttl_and_running_tasks_do_not() {
        let ttl = Duration::from_secs(10);
        let store = TaskStore::new(ttl, 4);
        let alice = key("alice");
        let t0 = Instant::now();
        let running = store.create_at(&alice, t0).unwrap();
        let finished = store.create_at(&alice, t0).unwrap();
        store.finish_at(&alice, &finished.id, done("x"), t0, SystemTime::now());
        assert!(store
            .get_at(&alice, &finished.id, t0 + ttl - Duration::from_millis(1))
            .is_some());
        let later = t0 + ttl + Duration::from_secs(3600);
        assert!(store.get_at(&alice, &finished.id, later).is_none());
        assert!(store.get_at(&alice, &running.id, later).is_some());
        // Forgotten for good: it no longer counts.
        assert_eq!(store.map.lock().unwrap()[&alice].len(), 1);
        store.finish_at(&alice, &running.id, done("y"), later, SystemTime::now());
        assert!(store
            .get_at(&alice, &running.id, later + ttl + Duration::from_secs(1))
            .is_none());
        // A principal without tasks leaves no map behind.
        assert!(store.map.lock().unwrap().is_empty());
    }

    #[test]
    fn the_per_principal_cap_refuses_and_a_delivered_result_makes_room() {
        let store = TaskStore::new(Duration::from_secs(60), 2);
        let (alice, bob) = (key("alice"), key("bob"));
        let a = store.create(&alice).unwrap();
        let b = store.create(&alice).unwrap();
        let refused = store.create(&alice).unwrap_err();
        assert_eq!(refused, Refused::PrincipalFull { max: 2, ttl_s: 60 });
        assert!(refused.to_string().contains("Nothing ran"), "{refused}");
        // Bob has his own cap.
        assert!(store.create(&bob).is_ok());
        // A finished but unread result still counts.
        store.finish(&alice, &a.id, done("x"));
        assert!(store.create(&alice).is_err());
        // Once a tasks/get returned it, it makes room (the oldest delivered goes).
        assert_eq!(
            store.get(&alice, &a.id).unwrap().status(),
            TaskStatus::Completed
        );
        let c = store.create(&alice).unwrap();
        assert!(store.get(&alice, &a.id).is_none());
        assert!(store.get(&alice, &b.id).is_some());
        assert!(store.get(&alice, &c.id).is_some());
        assert_eq!(store.count(&alice), 2);
        // A running task never makes room.
        assert!(store.create(&alice).is_err());
    }

    #[test]
    fn the_server_wide_cap_holds_across_principals() {
        let store = TaskStore::with_total(Duration::from_secs(60), 4, 3);
        for sub in ["a", "b", "c"] {
            store.create(&key(sub)).unwrap();
        }
        assert_eq!(store.create(&key("d")).unwrap_err(), Refused::ServerFull);
    }

    #[test]
    fn shutdown_cancels_every_running_task() {
        let store = TaskStore::new(Duration::from_secs(60), 4);
        let a = store.create(&key("alice")).unwrap();
        let b = store.create(&key("bob")).unwrap();
        store.shutdown();
        assert!(a.cancel.is_cancelled() && b.cancel.is_cancelled());
    }
}
