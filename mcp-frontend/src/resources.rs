//! The artifacts this server instance returned, kept in memory for a while so that a
//! client can fetch them with `resources/read` (MCP resources): the full-resolution
//! original of a downscaled image, a CSV, a PDF, anything not shown in the result itself.
//!
//! # Bound to this instance
//!
//! A URI is `vivarium-artifact://<instance>/<n>/<path>`: `<instance>` is 128 random bits
//! minted when the server starts (as session ids are, crate::session), `<n>` the
//! artifact's number in this instance, `<path>` its path under `/work`, percent-encoded
//! (the path comes from the sandbox: it is shown, never used to open anything). Another
//! instance, or this one after a restart, answers such a URI with a not-found error that
//! says why; so does this one once the artifact has expired or was evicted.
//!
//! # Bounded
//!
//! Each artifact is kept for `ttl` (one hour by default, `--artifact-ttl`), and all of
//! them together take at most `max_bytes` (256 MiB by default, `--artifact-store-mib`):
//! past that the oldest are evicted first. An artifact larger than the whole store is not
//! kept at all (its result says so: no URI).

use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use rmcp::model::{ReadResourceResult, Resource, ResourceContents};
use vivarium_proto::ArtifactHeader;

use crate::principal::PrincipalKey;

/// The URI scheme of artifacts.
pub const SCHEME: &str = "vivarium-artifact";

/// How long an artifact is served, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3600);

/// Bytes of artifacts kept at most, by default.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

/// Artifacts listed by `resources/list` at most (the newest).
pub const MAX_LISTED: usize = 500;

/// Removed artifacts whose fate is remembered (to say "expired" rather than "unknown").
const GONE_REMEMBERED: usize = 4096;

/// The artifacts of this instance.
pub struct ArtifactStore {
    instance: String,
    ttl: Duration,
    max_bytes: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Oldest first (numbers increase).
    entries: VecDeque<Entry>,
    bytes: u64,
    next: u64,
    gone: VecDeque<(u64, PrincipalKey, Gone)>,
}

struct Entry {
    number: u64,
    /// The principal whose call returned it: the only one it is served to.
    owner: PrincipalKey,
    uri: String,
    header: ArtifactHeader,
    data: Arc<[u8]>,
    stored: Instant,
}

/// Why an artifact is no longer served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    Expired,
    Evicted,
}

/// Why `resources/read` found nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error(
        "no such resource `{uri}`: this server serves only the artifacts of its own run_python \
         results, as {SCHEME}:// URIs"
    )]
    NotAnArtifact { uri: String },
    #[error(
        "artifact `{uri}` is not served here: it was returned by another vivarium-mcp instance \
         (or by this server before it restarted). Artifacts are kept in memory by the \
         instance whose run_python call produced them and served only by it; run the code \
         again to get them anew"
    )]
    OtherInstance { uri: String },
    #[error(
        "artifact `{uri}` has expired: artifacts are served for {ttl_s} s after the call that \
         returned them; run the code again to get it anew"
    )]
    Expired { uri: String, ttl_s: u64 },
    #[error(
        "artifact `{uri}` was evicted: this server keeps at most {max_mib} MiB of artifacts and \
         drops the oldest first; run the code again to get it anew"
    )]
    Evicted { uri: String, max_mib: u64 },
    #[error("artifact `{uri}` is not known to this server (expired long ago, or never returned)")]
    Unknown { uri: String },
}

impl ReadError {
    /// A short name for the error's `data.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            ReadError::NotAnArtifact { .. } => "not_an_artifact",
            ReadError::OtherInstance { .. } => "other_instance",
            ReadError::Expired { .. } => "expired",
            ReadError::Evicted { .. } => "evicted",
            ReadError::Unknown { .. } => "unknown",
        }
    }

    /// The MCP error (`-32002`, resource not found) with the reason in `data`.
    pub fn to_error_data(&self) -> rmcp::ErrorData {
        let uri = match self {
            ReadError::NotAnArtifact { uri }
            | ReadError::OtherInstance { uri }
            | ReadError::Expired { uri, .. }
            | ReadError::Evicted { uri, .. }
            | ReadError::Unknown { uri } => uri,
        };
        rmcp::ErrorData::resource_not_found(
            self.to_string(),
            Some(serde_json::json!({ "uri": uri, "reason": self.reason() })),
        )
    }
}

impl ArtifactStore {
    /// A store for one server instance, with a fresh random instance id.
    pub fn new(ttl: Duration, max_bytes: u64) -> ArtifactStore {
        ArtifactStore {
            instance: random_hex(16),
            ttl,
            max_bytes,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keep an artifact for `owner`; its URI, or `None` when it is larger than the whole
    /// store.
    pub fn put(
        &self,
        owner: &PrincipalKey,
        header: &ArtifactHeader,
        data: Arc<[u8]>,
    ) -> Option<String> {
        self.put_at(owner, header, data, Instant::now())
    }

    fn put_at(
        &self,
        owner: &PrincipalKey,
        header: &ArtifactHeader,
        data: Arc<[u8]>,
        now: Instant,
    ) -> Option<String> {
        let len = data.len() as u64;
        if len > self.max_bytes {
            return None;
        }
        let mut inner = self.lock();
        self.expire(&mut inner, now);
        while inner.bytes + len > self.max_bytes {
            let Some(old) = inner.entries.pop_front() else {
                break;
            };
            inner.bytes -= old.data.len() as u64;
            remember(&mut inner, old.number, old.owner, Gone::Evicted);
        }
        let number = inner.next;
        inner.next += 1;
        let uri = format!(
            "{SCHEME}://{}/{number}/{}",
            self.instance,
            percent_encode_path(&header.path)
        );
        inner.bytes += len;
        inner.entries.push_back(Entry {
            number,
            owner: owner.clone(),
            uri: uri.clone(),
            header: header.clone(),
            data,
            stored: now,
        });
        Some(uri)
    }

    /// Drop the entries older than the TTL (they are at the front).
    fn expire(&self, inner: &mut Inner, now: Instant) {
        while let Some(front) = inner.entries.front() {
            if now.saturating_duration_since(front.stored) < self.ttl {
                break;
            }
            let old = inner.entries.pop_front().expect("a front entry");
            inner.bytes -= old.data.len() as u64;
            remember(inner, old.number, old.owner, Gone::Expired);
        }
    }

    /// `resources/read` by `owner`: the artifact's bytes, as text for UTF-8 text and as
    /// base64 else. Another principal's artifact is `Unknown`, as one never returned.
    pub fn read(&self, owner: &PrincipalKey, uri: &str) -> Result<ReadResourceResult, ReadError> {
        self.read_at(owner, uri, Instant::now())
    }

    fn read_at(
        &self,
        owner: &PrincipalKey,
        uri: &str,
        now: Instant,
    ) -> Result<ReadResourceResult, ReadError> {
        let not_ours = || ReadError::NotAnArtifact { uri: uri.into() };
        let rest = uri
            .strip_prefix(SCHEME)
            .and_then(|r| r.strip_prefix("://"))
            .ok_or_else(not_ours)?;
        let (instance, rest) = rest.split_once('/').ok_or_else(not_ours)?;
        let (number, _path) = rest.split_once('/').ok_or_else(not_ours)?;
        let number: u64 = number.parse().map_err(|_| not_ours())?;
        if instance != self.instance {
            return Err(ReadError::OtherInstance { uri: uri.into() });
        }
        let mut inner = self.lock();
        self.expire(&mut inner, now);
        let found = inner
            .entries
            .binary_search_by_key(&number, |e| e.number)
            .ok()
            .map(|i| &inner.entries[i])
            // The whole URI must match, path included; another principal's artifact is
            // one this principal was never given ("not known", nothing more).
            .filter(|e| e.uri == uri && e.owner == *owner);
        let Some(entry) = found else {
            let gone = inner
                .gone
                .iter()
                .find(|(n, o, _)| *n == number && o == owner)
                .map(|g| g.2);
            return Err(match gone {
                Some(Gone::Expired) => ReadError::Expired {
                    uri: uri.into(),
                    ttl_s: self.ttl.as_secs(),
                },
                Some(Gone::Evicted) => ReadError::Evicted {
                    uri: uri.into(),
                    max_mib: self.max_bytes >> 20,
                },
                None => ReadError::Unknown { uri: uri.into() },
            });
        };
        let media_type = entry.header.media_type.clone();
        let contents = match std::str::from_utf8(&entry.data) {
            Ok(text) if is_text(&media_type) => ResourceContents::text(text, uri),
            _ => ResourceContents::blob(
                base64::engine::general_purpose::STANDARD.encode(&entry.data),
                uri,
            ),
        }
        .with_mime_type(media_type);
        Ok(ReadResourceResult::new(vec![contents]))
    }

    /// `resources/list`: the artifacts still served, newest first (at most
    /// [`MAX_LISTED`]).
    pub fn list(&self, owner: &PrincipalKey) -> Vec<Resource> {
        let mut inner = self.lock();
        self.expire(&mut inner, Instant::now());
        inner
            .entries
            .iter()
            .rev()
            .filter(|e| e.owner == *owner)
            .take(MAX_LISTED)
            .map(|e| link(&e.uri, &e.header))
            .collect()
    }
}

fn remember(inner: &mut Inner, number: u64, owner: PrincipalKey, why: Gone) {
    if inner.gone.len() >= GONE_REMEMBERED {
        inner.gone.pop_front();
    }
    inner.gone.push_back((number, owner, why));
}

/// Whether a daemon media type is text (`text/plain; charset=utf-8`).
pub fn is_text(media_type: &str) -> bool {
    media_type.starts_with("text/")
}

/// The resource (or resource link) of an artifact at `uri`.
pub fn link(uri: &str, header: &ArtifactHeader) -> Resource {
    Resource::new(uri, &header.path)
        .with_mime_type(&header.media_type)
        .with_size(header.size)
        .with_description(format!("/work/{} ({} bytes)", header.path, header.size))
}

/// `path` with every byte but the unreserved ones (RFC 3986) and `/` percent-encoded.
pub fn percent_encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `bytes` random bytes from the kernel's CSPRNG, in hex.
fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom is readable");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(path: &str, size: usize, media_type: &str) -> ArtifactHeader {
        ArtifactHeader {
            path: path.into(),
            path_lossy: false,
            size: size as u64,
            sha256: "00".repeat(32),
            media_type: media_type.into(),
        }
    }

    fn me() -> PrincipalKey {
        PrincipalKey::new("https://as.example", "alice")
    }

    fn text_of(r: &ReadResourceResult) -> Option<&str> {
        match &r.contents[0] {
            ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        }
    }

    #[test]
    fn a_link_is_served_as_text_or_blob() {
        let store = ArtifactStore::new(DEFAULT_TTL, DEFAULT_MAX_BYTES);
        let csv = store
            .put(
                &me(),
                &header("out/data.csv", 8, "text/plain; charset=utf-8"),
                Arc::from(&b"a,b\n1,2\n"[..]),
            )
            .unwrap();
        let png = store
            .put(
                &me(),
                &header("out/a b/π.png", 4, "image/png"),
                Arc::from(&b"\x89PNG"[..]),
            )
            .unwrap();
        assert!(
            csv.starts_with(&format!("vivarium-artifact://{}/0/", store.instance())),
            "{csv}"
        );
        assert!(png.ends_with("/1/out/a%20b/%CF%80.png"), "{png}");
        let read = store.read(&me(), &csv).unwrap();
        assert_eq!(text_of(&read), Some("a,b\n1,2\n"));
        let read = store.read(&me(), &png).unwrap();
        match &read.contents[0] {
            ResourceContents::BlobResourceContents {
                blob, mime_type, ..
            } => {
                assert_eq!(blob, "iVBORw==");
                assert_eq!(mime_type.as_deref(), Some("image/png"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(store.list(&me()).len(), 2);
    }

    #[test]
    fn another_principals_artifact_is_unknown_to_it() {
        let store = ArtifactStore::new(Duration::from_secs(60), 10);
        let t0 = Instant::now();
        let mallory = PrincipalKey::new("https://as.example", "mallory");
        let uri = store
            .put_at(
                &me(),
                &header("out/x", 4, "text/plain"),
                Arc::from(&b"abcd"[..]),
                t0,
            )
            .unwrap();
        // Same issuer, another subject; and the same subject at another issuer.
        for other in [mallory, PrincipalKey::new("https://other.example", "alice")] {
            let e = store.read_at(&other, &uri, t0).unwrap_err();
            assert!(matches!(e, ReadError::Unknown { .. }), "{e}");
            assert!(store.list(&other).is_empty());
        }
        assert!(store.read_at(&me(), &uri, t0).is_ok());
        // Nor does its expiry tell the other one it existed.
        let later = t0 + Duration::from_secs(61);
        let e = store
            .read_at(
                &PrincipalKey::new("https://as.example", "mallory"),
                &uri,
                later,
            )
            .unwrap_err();
        assert!(matches!(e, ReadError::Unknown { .. }), "{e}");
        assert!(matches!(
            store.read_at(&me(), &uri, later),
            Err(ReadError::Expired { .. })
        ));
    }

    #[test]
    fn foreign_expired_evicted_and_malformed_uris_are_refused_with_why() {
        let store = ArtifactStore::new(Duration::from_secs(60), 10);
        let other = ArtifactStore::new(Duration::from_secs(60), 10);
        assert_ne!(store.instance(), other.instance());
        assert_eq!(store.instance().len(), 32);
        let t0 = Instant::now();
        let uri = store
            .put_at(
                &me(),
                &header("out/x", 4, "text/plain"),
                Arc::from(&b"abcd"[..]),
                t0,
            )
            .unwrap();
        // Another instance does not serve it, and says why.
        let e = other.read(&me(), &uri).unwrap_err();
        assert!(matches!(e, ReadError::OtherInstance { .. }), "{e}");
        assert!(
            e.to_string().contains("another vivarium-mcp instance"),
            "{e}"
        );
        let data = e.to_error_data();
        assert_eq!(data.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        // The same number with another path is not it.
        let forged = uri.replace("/out/x", "/out/y");
        assert!(matches!(
            store.read_at(&me(), &forged, t0),
            Err(ReadError::Unknown { .. })
        ));
        assert!(store
            .read_at(&me(), &uri, t0 + Duration::from_secs(59))
            .is_ok());
        let e = store
            .read_at(&me(), &uri, t0 + Duration::from_secs(61))
            .unwrap_err();
        assert_eq!(
            e,
            ReadError::Expired {
                uri: uri.clone(),
                ttl_s: 60
            }
        );
        assert!(e.to_string().contains("has expired"), "{e}");
        // Over the byte cap the oldest goes first.
        let a = store
            .put(
                &me(),
                &header("a", 6, "text/plain"),
                Arc::from(&b"aaaaaa"[..]),
            )
            .unwrap();
        let b = store
            .put(
                &me(),
                &header("b", 6, "text/plain"),
                Arc::from(&b"bbbbbb"[..]),
            )
            .unwrap();
        assert!(matches!(
            store.read(&me(), &a),
            Err(ReadError::Evicted { .. })
        ));
        assert!(store.read(&me(), &b).is_ok());
        // Larger than the whole store: not kept.
        assert!(store
            .put(
                &me(),
                &header("c", 11, "text/plain"),
                Arc::from(&[0u8; 11][..])
            )
            .is_none());
        for bad in [
            "file:///etc/shadow",
            "vivarium-artifact://x",
            "vivarium-artifact://x/notanumber/p",
        ] {
            assert!(
                matches!(store.read(&me(), bad), Err(ReadError::NotAnArtifact { .. })),
                "{bad}"
            );
        }
        let never = format!("vivarium-artifact://{}/999/p", store.instance());
        assert!(matches!(
            store.read(&me(), &never),
            Err(ReadError::Unknown { .. })
        ));
    }
}
