//! Sessions through MCP: the `session_id` argument, the ids this server instance mints,
//! and what a model is told when a session has ended or is not known here.
//!
//! State goes through an explicit handle in the tool's arguments (MCP 2026-07-28,
//! "Stateful Tools"), bound to its principal ("State Handle Hijacking"). The daemon binds
//! its handles (`vs_...`) to the uid that opened them; this server adds the instance: the
//! id a model sees is an alias, `mcp_` and 128 random bits, minted here and kept in memory
//! only. Another `vivarium-mcp` of the same uid does not know it and answers "no such
//! session". The one way to hand a session over is explicit: a daemon handle (`vs_...`,
//! from `viv session new`, say) passed as `session_id` is used as it is, and the daemon
//! checks it belongs to this uid. Aliases of ended sessions are kept (the newest
//! [`MAX_ENDED`]) so that an old id gets the typed "expired" answer, not "not found".

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::Instant;

use vivarium_client::{end_reason_text, format_bytes, format_duration, format_ms};
use vivarium_proto::{SessionEndReason, SessionEnded, SessionHandle};

/// The `session_id` value that opens a session.
pub const NEW: &str = "new";

/// The prefix of the ids this server mints.
pub const ALIAS_PREFIX: &str = "mcp_";

/// The prefix of the daemon's own handles.
pub const DAEMON_PREFIX: &str = "vs_";

/// Ended sessions whose aliases are kept, newest first, for the "expired" answer.
pub const MAX_ENDED: usize = 256;

/// Open sessions one server instance keeps at once (the daemon has its own limits).
pub const MAX_OPEN: usize = 64;

/// The idle TTL and lifetime stated when the daemon does not say (its defaults:
/// docs/profiles.md, `[session]`).
pub const DEFAULT_IDLE_TTL_SECS: u64 = 600;
pub const DEFAULT_LIFETIME_SECS: u64 = 3600;

/// What a call's `session_id` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionArg {
    /// `"new"`: open a session and run the code as its first cell.
    New,
    /// An id this server minted (`mcp_...`).
    Alias(String),
    /// A daemon handle handed over explicitly (`vs_...`).
    Handover(SessionHandle),
}

impl SessionArg {
    /// Read a `session_id`; the error says what it must be.
    pub fn parse(id: &str) -> Result<SessionArg, String> {
        let id = id.trim();
        if id == NEW {
            return Ok(SessionArg::New);
        }
        let well_formed = |rest: &str| {
            !rest.is_empty()
                && rest.len() <= 200
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        if let Some(rest) = id.strip_prefix(ALIAS_PREFIX) {
            if well_formed(rest) {
                return Ok(SessionArg::Alias(id.to_string()));
            }
        }
        if let Some(rest) = id.strip_prefix(DAEMON_PREFIX) {
            if well_formed(rest) {
                return Ok(SessionArg::Handover(SessionHandle(id.to_string())));
            }
        }
        let shown: String = id.chars().take(80).collect();
        Err(format!(
            "`session_id` must be \"new\" (open a session), an id from an earlier result \
             (`mcp_...`), or a daemon session handle (`vs_...`); got {shown:?}"
        ))
    }
}

/// A session this server knows, by the id the model uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// The daemon's handle.
    pub handle: SessionHandle,
    /// Its profile, when known (always for the ones opened here).
    pub profile: Option<String>,
    /// How it ended, once it has.
    pub ended: Option<SessionEnded>,
}

/// Where a call's session is, or why it cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Open a new one.
    New,
    /// Run in this session: the id the model uses, and the daemon's handle.
    Existing {
        id: String,
        handle: SessionHandle,
        profile: Option<String>,
    },
}

/// Why a session id cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// An alias this instance never minted (or forgot long ago).
    Unknown(String),
    /// A session that has ended: its id and how.
    Ended(String, Box<SessionEnded>),
}

impl Unusable {
    /// The tool error's text.
    pub fn text(&self) -> String {
        match self {
            Unusable::Unknown(id) => unknown_text(id),
            Unusable::Ended(id, ended) => expired_text(id, ended),
        }
    }
}

struct Entry {
    known: Known,
    /// When it ended (for forgetting the oldest ended first).
    ended_at: Option<Instant>,
    /// Whether this instance opened it (and so closes it when the client goes away).
    owned: bool,
}

/// The sessions of one principal of a server instance: alias -> daemon handle, in memory
/// only.
pub struct Registry {
    entries: Mutex<HashMap<String, Entry>>,
    max_open: usize,
}

impl Default for Registry {
    fn default() -> Self {
        Registry::with_max_open(MAX_OPEN)
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry that lets at most `max_open` of its sessions be open at once.
    pub fn with_max_open(max_open: usize) -> Registry {
        Registry {
            entries: Mutex::new(HashMap::new()),
            max_open,
        }
    }

    pub fn max_open(&self) -> usize {
        self.max_open
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where `arg` points, or why it cannot be used.
    pub fn resolve(&self, arg: &SessionArg) -> Result<Resolved, Unusable> {
        match arg {
            SessionArg::New => Ok(Resolved::New),
            SessionArg::Alias(id) => match self.lock().get(id) {
                None => Err(Unusable::Unknown(id.clone())),
                Some(Entry {
                    known:
                        Known {
                            ended: Some(ended), ..
                        },
                    ..
                }) => Err(Unusable::Ended(id.clone(), Box::new(ended.clone()))),
                Some(e) => Ok(Resolved::Existing {
                    id: id.clone(),
                    handle: e.known.handle.clone(),
                    profile: e.known.profile.clone(),
                }),
            },
            // A handed-over handle is the daemon's to check; an ended one it knows from
            // here is answered here.
            SessionArg::Handover(handle) => match self.lock().get(&handle.0) {
                Some(Entry {
                    known:
                        Known {
                            ended: Some(ended), ..
                        },
                    ..
                }) => Err(Unusable::Ended(handle.0.clone(), Box::new(ended.clone()))),
                known => Ok(Resolved::Existing {
                    id: handle.0.clone(),
                    handle: handle.clone(),
                    profile: known.and_then(|e| e.known.profile.clone()),
                }),
            },
        }
    }

    /// Whether another session may be opened here.
    /// `daemon_open`: the handles the daemon lists as open, when asked (a session that
    /// ended unseen, at its idle TTL say, then no longer counts).
    pub fn room_to_open(&self, daemon_open: Option<&[SessionHandle]>) -> Result<(), String> {
        let open = self
            .lock()
            .values()
            .filter(|e| e.owned && e.known.ended.is_none())
            .filter(|e| daemon_open.is_none_or(|d| d.contains(&e.known.handle)))
            .count();
        if open >= self.max_open {
            return Err(format!(
                "{open} sessions are open, which is all this server keeps at once for one \
                 client: close one with `close_session` (or let one expire) before opening \
                 another"
            ));
        }
        Ok(())
    }

    /// Record a session just opened here; returns the alias the model is to use.
    pub fn opened(&self, handle: SessionHandle, profile: String) -> String {
        let alias = mint_alias();
        self.lock().insert(
            alias.clone(),
            Entry {
                known: Known {
                    handle,
                    profile: Some(profile),
                    ended: None,
                },
                ended_at: None,
                owned: true,
            },
        );
        alias
    }

    /// Remember a handed-over handle's profile (it is not ours to close).
    pub fn adopt(&self, handle: &SessionHandle, profile: String) {
        self.lock()
            .entry(handle.0.clone())
            .or_insert_with(|| Entry {
                known: Known {
                    handle: handle.clone(),
                    profile: None,
                    ended: None,
                },
                ended_at: None,
                owned: false,
            })
            .known
            .profile = Some(profile);
    }

    /// Record that the session `id` names has ended; the oldest ended ids past
    /// [`MAX_ENDED`] are forgotten.
    pub fn ended(&self, id: &str, ended: SessionEnded) {
        let mut entries = self.lock();
        let entry = entries.entry(id.to_string()).or_insert_with(|| Entry {
            known: Known {
                handle: ended.handle.clone(),
                profile: None,
                ended: None,
            },
            ended_at: None,
            owned: false,
        });
        entry.known.ended = Some(ended);
        entry.ended_at.get_or_insert_with(Instant::now);
        let mut ended_ids: Vec<(Instant, String)> = entries
            .iter()
            .filter_map(|(id, e)| e.ended_at.map(|at| (at, id.clone())))
            .collect();
        if ended_ids.len() > MAX_ENDED {
            ended_ids.sort();
            for (_, id) in &ended_ids[..ended_ids.len() - MAX_ENDED] {
                entries.remove(id);
            }
        }
    }

    /// Forget `id` (the daemon does not know its session: nothing to say about it).
    pub fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    /// The open sessions this instance opened: (alias, handle).
    pub fn owned_open(&self) -> Vec<(String, SessionHandle)> {
        self.open_where(|e| e.owned)
    }

    /// Every session this instance knows and has not seen end (its own and the ones
    /// handed over): (id, handle).
    pub fn known_open(&self) -> Vec<(String, SessionHandle)> {
        self.open_where(|_| true)
    }

    fn open_where(&self, keep: impl Fn(&Entry) -> bool) -> Vec<(String, SessionHandle)> {
        let mut open: Vec<(String, SessionHandle)> = self
            .lock()
            .iter()
            .filter(|(_, e)| e.known.ended.is_none() && keep(e))
            .map(|(id, e)| (id.clone(), e.known.handle.clone()))
            .collect();
        open.sort_by(|a, b| a.0.cmp(&b.0));
        open
    }

    /// What this instance knows of `id`.
    pub fn get(&self, id: &str) -> Option<Known> {
        self.lock().get(id).map(|e| e.known.clone())
    }
}

/// A new alias: `mcp_` and 128 random bits in hex (from the kernel's CSPRNG).
pub fn mint_alias() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable");
    let mut id = String::with_capacity(ALIAS_PREFIX.len() + 32);
    id.push_str(ALIAS_PREFIX);
    for b in bytes {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// How to start again, the end of every "gone" message.
pub const START_AGAIN: &str = "To start again, call run_python with `session_id: \"new\"` and \
                               run the setup again (imports, definitions, data).";

/// The answer for an id this server does not know.
pub fn unknown_text(id: &str) -> String {
    format!(
        "no such session `{id}` on this server: session ids are valid only on the \
         vivarium-mcp instance that opened them, and only while it runs (a restarted server \
         or another client's server does not know them; an id it forgot may have expired \
         long ago). Nothing ran. {START_AGAIN}"
    )
}

/// The answer for a daemon handle the daemon does not know for this user.
pub fn unknown_handle_text(id: &str, daemon_message: &str) -> String {
    format!(
        "no such session `{id}`: the daemon has no session by that handle for this user \
         ({daemon_message}). Nothing ran. {START_AGAIN}"
    )
}

/// Why, in words: `it was idle for longer than its TTL` (and the daemon's detail).
fn why(ended: &SessionEnded) -> String {
    let mut why = match ended.reason {
        SessionEndReason::Closed => "it was closed (close_session, or `viv session close`)".into(),
        other => end_reason_text(other).to_string(),
    };
    if !ended.detail.is_empty() {
        why = format!("{why}: {}", ended.detail);
    }
    why
}

/// Totals of an ended session: `3 cells, 1.2s of CPU, peak memory 40M, age 10m00s`.
pub fn totals(ended: &SessionEnded) -> String {
    format!(
        "{} cell{}, {} of CPU, peak memory {}, age {}",
        ended.cells,
        if ended.cells == 1 { "" } else { "s" },
        format_ms(ended.cpu_ms),
        format_bytes(ended.peak_memory_bytes),
        format_duration(ended.age_ms)
    )
}

/// How a session ended, in one clause: `it was idle for longer than its TTL (3 cells, ...)`.
pub fn end_summary(ended: &SessionEnded) -> String {
    let when = if ended.ended_ms_ago > 0 {
        format!(", {} ago", format_duration(ended.ended_ms_ago))
    } else {
        String::new()
    };
    format!("{} ({}{when})", why(ended), totals(ended))
}

/// The answer for an ended session: that it expired, why, that its state is gone, and
/// how to start again. Names the session by `id` (the alias; never the daemon's handle
/// when the model did not give it).
pub fn expired_text(id: &str, ended: &SessionEnded) -> String {
    let when = if ended.ended_ms_ago > 0 {
        format!(" {} ago", format_duration(ended.ended_ms_ago))
    } else {
        String::new()
    };
    const GONE: &str = "Its state is gone: variables, imported modules and files in /work and \
                        /tmp. Nothing ran.";
    if ended.reason == SessionEndReason::Closed {
        return format!(
            "session `{id}` was closed{when} ({}). {GONE} {START_AGAIN}",
            totals(ended)
        );
    }
    format!(
        "session `{id}` has expired: it ended{when} because {} ({}). {GONE} {START_AGAIN}",
        why(ended),
        totals(ended)
    )
}

/// The text for a session that ended while its cell ran.
pub fn ended_during_cell_text(id: &str, ended: &SessionEnded) -> String {
    format!(
        "the session `{id}` ended during this cell because {} ({}); the cell did not finish \
         and the session's state is gone (variables, imported modules, files in /work and \
         /tmp). {START_AGAIN}",
        why(ended),
        totals(ended)
    )
}

/// RFC 3339 UTC (`2026-12-03T00:10:00Z`) for Unix time in milliseconds (whole seconds).
pub fn rfc3339_utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: u8) -> SessionHandle {
        SessionHandle(format!("vs_{}", format!("{n:02x}").repeat(32)))
    }

    fn ended(handle: SessionHandle, reason: SessionEndReason) -> SessionEnded {
        SessionEnded {
            handle,
            reason,
            detail: String::new(),
            ended_ms_ago: 5_000,
            cells: 3,
            cpu_ms: 1_200,
            peak_memory_bytes: 40 << 20,
            age_ms: 600_000,
        }
    }

    #[test]
    fn session_ids_parse_as_new_alias_or_handover() {
        assert_eq!(SessionArg::parse("new"), Ok(SessionArg::New));
        assert_eq!(SessionArg::parse(" new "), Ok(SessionArg::New));
        let alias = mint_alias();
        assert_eq!(
            SessionArg::parse(&alias),
            Ok(SessionArg::Alias(alias.clone()))
        );
        assert_eq!(
            SessionArg::parse(&handle(1).0),
            Ok(SessionArg::Handover(handle(1)))
        );
        for bad in [
            "", "New", "mcp_", "vs_", "mcp_a b", "s_123", "mcp_\"x", "../x",
        ] {
            let e = SessionArg::parse(bad).unwrap_err();
            assert!(
                e.contains("must be \"new\"") && e.contains("`vs_...`"),
                "{bad}: {e}"
            );
        }
        let long = SessionArg::parse(&"x".repeat(10_000)).unwrap_err();
        assert!(long.len() < 400, "{long}");
    }

    #[test]
    fn aliases_are_random_128_bit_hex() {
        let a = mint_alias();
        let b = mint_alias();
        assert_ne!(a, b);
        assert_eq!(a.len(), ALIAS_PREFIX.len() + 32);
        assert!(a[4..].bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn an_alias_resolves_only_in_the_registry_that_minted_it() {
        let mine = Registry::new();
        let other = Registry::new();
        let alias = mine.opened(handle(1), "default".into());
        let arg = SessionArg::parse(&alias).unwrap();
        assert_eq!(
            mine.resolve(&arg),
            Ok(Resolved::Existing {
                id: alias.clone(),
                handle: handle(1),
                profile: Some("default".into()),
            })
        );
        // A second instance (same uid) does not know it: "no such session".
        let e = other.resolve(&arg).unwrap_err();
        assert_eq!(e, Unusable::Unknown(alias.clone()));
        let text = e.text();
        assert!(
            text.contains("no such session") && text.contains(&alias),
            "{text}"
        );
        assert!(text.contains("session_id: \"new\""), "{text}");
        // A daemon handle is the explicit handover: any instance passes it on.
        let given = SessionArg::parse(&handle(1).0).unwrap();
        assert_eq!(
            other.resolve(&given),
            Ok(Resolved::Existing {
                id: handle(1).0,
                handle: handle(1),
                profile: None,
            })
        );
        other.adopt(&handle(1), "default".into());
        assert!(matches!(
            other.resolve(&given),
            Ok(Resolved::Existing { profile: Some(p), .. }) if p == "default"
        ));
        // Adopted handles are not this instance's to close.
        assert!(other.owned_open().is_empty());
        assert_eq!(mine.owned_open(), vec![(alias, handle(1))]);
    }

    #[test]
    fn an_ended_alias_answers_expired_not_unknown() {
        let r = Registry::new();
        let alias = r.opened(handle(2), "default".into());
        r.ended(&alias, ended(handle(2), SessionEndReason::IdleTimeout));
        let e = r.resolve(&SessionArg::Alias(alias.clone())).unwrap_err();
        let text = e.text();
        assert!(
            text.starts_with(&format!("session `{alias}` has expired: it ended 5.0s ago because it was idle for longer than its TTL (3 cells, 1.2s of CPU, peak memory 40M, age 10m00s)")),
            "{text}"
        );
        assert!(
            text.contains("state is gone") && text.contains("/work"),
            "{text}"
        );
        assert!(text.contains("`session_id: \"new\"`"), "{text}");
        // The daemon's handle is not shown for an alias.
        assert!(!text.contains("vs_"), "{text}");
        assert!(r.owned_open().is_empty());
        // Forgetting keeps the newest MAX_ENDED ended ids.
        let first = alias;
        for n in 0..MAX_ENDED {
            let a = r.opened(handle(3), "default".into());
            r.ended(&a, ended(handle(3), SessionEndReason::Closed));
            if n == 0 {
                assert!(r.get(&first).is_some());
            }
        }
        assert!(r.get(&first).is_none(), "the oldest ended id is forgotten");
        assert_eq!(r.lock().len(), MAX_ENDED);
    }

    #[test]
    fn every_end_reason_reads_as_a_reason() {
        use SessionEndReason as R;
        for reason in [
            R::Closed,
            R::IdleTimeout,
            R::Lifetime,
            R::CpuBudget,
            R::Memory,
            R::Unresponsive,
            R::Exited,
            R::Seccomp,
            R::IdleMemory,
            R::DaemonRestarted,
            R::SandboxError,
            R::LinkFailed,
        ] {
            let mut e = ended(handle(4), reason);
            e.ended_ms_ago = 0;
            let text = expired_text("mcp_x", &e);
            let lead = match reason {
                R::Closed => "session `mcp_x` was closed (3 cells,",
                _ => "session `mcp_x` has expired: it ended because ",
            };
            assert!(text.starts_with(lead), "{text}");
            assert!(text.contains("state is gone"), "{text}");
            assert!(text.contains(START_AGAIN), "{text}");
            let during = ended_during_cell_text("mcp_x", &e);
            assert!(
                during.contains("state is gone") && during.contains(START_AGAIN),
                "{during}"
            );
        }
    }

    #[test]
    fn the_open_cap_says_how_to_make_room() {
        let r = Registry::new();
        for _ in 0..MAX_OPEN {
            assert!(r.room_to_open(None).is_ok());
            r.opened(handle(5), "default".into());
        }
        let e = r.room_to_open(None).unwrap_err();
        assert!(e.contains("close_session"), "{e}");
        // Sessions the daemon no longer lists (they ended unseen) leave room.
        assert!(r.room_to_open(Some(&[])).is_ok());
        assert!(r.room_to_open(Some(&[handle(5)])).is_err());
        r.adopt(&handle(6), "default".into());
        assert_eq!(r.known_open().len(), MAX_OPEN + 1);
        assert_eq!(r.owned_open().len(), MAX_OPEN);
    }

    #[test]
    fn expiry_times_are_rfc3339_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400_999), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_796_256_000_000), "2026-12-03T00:00:00Z");
        assert_eq!(rfc3339_utc(1_796_259_723_000), "2026-12-03T01:02:03Z");
        assert_eq!(rfc3339_utc(4_102_444_799_000), "2099-12-31T23:59:59Z");
    }
}
