//! The environment cache, on disk under the configured `package_cache_dir`:
//!
//! ```text
//! <root>/                 0711 root   (jobs' host ids may only traverse)
//!   envs/<request>/       0755        one complete environment
//!     env/                            the virtual environment (bound at /env)
//!     meta.json                       request, resolved set, sizes, checksum of env/
//!     COMPLETE                        written last, before the rename into envs/
//!     last-used                       its mtime is the LRU clock
//!   build/<random>/       0711        environments being copied in (removed at start)
//!   locks/<request>       0700        flock(2): one build per request across processes
//! ```
//!
//! An entry is keyed by its request (see `server::packages::Manager::request_key`): a hash of
//! what was asked and of everything that decides what may be installed for it (uv
//! version, interpreter identity, platform, index, wheelhouse, allowed hosts, the
//! profile's package policy and limits). Never by what the install reports: the
//! resolved set in `meta.json` is data for the user. An environment is copied out of
//! its install sandbox into `build/`, made root-owned and read-only, counted (apparent
//! bytes and inodes), checksummed, and renamed into `envs/` only when complete. An
//! entry without `COMPLETE`, with unreadable metadata, whose metadata names another
//! request, or whose checksum does not match (checked on its first use after each
//! daemon start; bounded by the limits it was built under) is removed and rebuilt.
//! Everything here is created by the daemon; nothing outside `<root>` is touched.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    /// The request key this entry was built for (its directory's name).
    pub request: String,
    /// `name==version`, sorted: what the install reported, shown to users, never a key.
    pub resolved: Vec<String>,
    pub python_version: String,
    pub uv_version: String,
    /// Apparent size of `env/` (`tree::usage`).
    pub bytes: u64,
    /// Files, directories and links in `env/`.
    pub inodes: u64,
    /// SHA-256 over the manifest of `env/` (paths, types, modes, contents, link targets).
    pub checksum: String,
}

/// Why an entry on disk is not served (it is then removed and rebuilt).
#[derive(Debug, thiserror::Error)]
pub enum EntryError {
    #[error("no completion marker")]
    Incomplete,
    #[error("metadata")]
    ReadMeta(#[source] std::io::Error),
    #[error("metadata")]
    ParseMeta(#[source] serde_json::Error),
    #[error("its metadata names request {request:?}")]
    OtherRequest { request: String },
    #[error("checksum")]
    Checksum(#[source] std::io::Error),
    #[error("checksum mismatch")]
    Mismatch,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub dir: PathBuf,
    pub meta: Meta,
}

impl Entry {
    pub fn env(&self) -> PathBuf {
        self.dir.join("env")
    }
}

pub struct Cache {
    root: PathBuf,
    max_bytes: u64,
    max_inodes: u64,
    /// Entries whose checksum was verified since the daemon started.
    verified: Mutex<HashSet<String>>,
    /// Entries bound into a running job: never evicted.
    in_use: Arc<Mutex<HashMap<String, usize>>>,
}

/// Keeps an entry from eviction while a job uses it.
pub struct InUse {
    key: String,
    map: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Create a directory with `mode`; one that exists already is left as it is (never
/// re-moded: the operator may have made it), but must be a real directory.
fn mkdir_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if std::fs::symlink_metadata(path)?.is_dir() {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "{} exists and is not a directory",
                    path.display()
                )))
            }
        }
        Err(e) => Err(e),
    }
}

pub fn sha256_hex(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_name() -> String {
    let mut b = [0u8; 12];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        b[..12].copy_from_slice(&t.to_le_bytes()[..12]);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Cache {
    /// Create (or reopen) the cache; remove leftovers of builds that never completed.
    pub fn open(root: &Path, max_bytes: u64, max_inodes: u64) -> std::io::Result<Cache> {
        if let Some(parent) = root.parent() {
            std::fs::create_dir_all(parent)?;
        }
        mkdir_mode(root, 0o711)?;
        mkdir_mode(&root.join("envs"), 0o711)?;
        mkdir_mode(&root.join("build"), 0o711)?;
        mkdir_mode(&root.join("locks"), 0o700)?;
        // The aliases of the earlier layout (request -> an entry keyed by what its
        // install reported): gone with that keying; its entries fail to load and go.
        let _ = std::fs::remove_dir_all(root.join("requests"));
        for entry in std::fs::read_dir(root.join("build"))? {
            let entry = entry?;
            let _ = std::fs::remove_dir_all(entry.path());
        }
        Ok(Cache {
            root: root.to_owned(),
            max_bytes,
            max_inodes,
            verified: Mutex::new(HashSet::new()),
            in_use: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Take the cross-process lock for one request of the cache at `root` (blocking).
    pub fn lock_request_at(
        root: &Path,
        request: &str,
    ) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
        if !is_key(request) {
            return Err(std::io::Error::other("not a request key"));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(root.join("locks").join(request))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| std::io::Error::from(e))
    }

    /// The complete, intact entry for a request, if any. A broken entry is removed.
    pub fn lookup(&self, request: &str) -> Option<Entry> {
        if !is_key(request) {
            return None;
        }
        if !self.root.join("envs").join(request).exists() {
            return None;
        }
        match self.load(request) {
            Ok(entry) => Some(entry),
            Err(why) => {
                let why = vivarium_proto::error_chain(&why);
                tracing::warn!(request, %why, "package cache entry is broken; rebuilding it");
                self.remove_entry(request);
                None
            }
        }
    }

    /// Read and check one entry (checksum on its first use since start).
    fn load(&self, key: &str) -> Result<Entry, EntryError> {
        let dir = self.root.join("envs").join(key);
        if !dir.join("COMPLETE").is_file() {
            return Err(EntryError::Incomplete);
        }
        let bytes = std::fs::read(dir.join("meta.json")).map_err(EntryError::ReadMeta)?;
        let meta: Meta = serde_json::from_slice(&bytes).map_err(EntryError::ParseMeta)?;
        if meta.request != key {
            return Err(EntryError::OtherRequest {
                request: meta.request,
            });
        }
        let verified = self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key);
        if !verified {
            let sum = checksum(&dir.join("env")).map_err(EntryError::Checksum)?;
            if sum != meta.checksum {
                return Err(EntryError::Mismatch);
            }
            self.verified
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.to_owned());
        }
        Ok(Entry {
            key: key.to_owned(),
            dir,
            meta,
        })
    }

    /// Mark an entry used now (LRU) and keep it from eviction until the guard drops.
    pub fn use_entry(&self, entry: &Entry) -> InUse {
        let _ = std::fs::File::create(entry.dir.join("last-used"))
            .and_then(|f| f.set_modified(std::time::SystemTime::now()));
        *self
            .in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(entry.key.clone())
            .or_default() += 1;
        InUse {
            key: entry.key.clone(),
            map: self.in_use.clone(),
        }
    }

    /// A fresh, empty build directory `build/<random>/` (mode 0711): the caller copies
    /// the environment into its `env/`.
    pub fn new_build(&self) -> std::io::Result<PathBuf> {
        let dir = self.root.join("build").join(random_name());
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        Ok(dir)
    }

    /// Turn a finished build into the entry for `request`: root-owned and read-only,
    /// counted, checksummed, marked complete, renamed into place. If the entry appeared
    /// meanwhile (another process sharing the cache built the same request), the build
    /// is discarded and that one is used.
    pub fn commit(&self, build: &Path, request: &str, mut meta: Meta) -> std::io::Result<Entry> {
        if !is_key(request) {
            return Err(std::io::Error::other("not a request key"));
        }
        let env = build.join("env");
        seal(&env)?;
        let usage = super::tree::usage(&env)?;
        meta.request = request.to_owned();
        meta.bytes = usage.bytes;
        meta.inodes = usage.inodes;
        meta.checksum = checksum(&env)?;
        std::fs::write(build.join("meta.json"), serde_json::to_vec_pretty(&meta)?)?;
        std::fs::File::create(build.join("last-used"))?;
        let mut done = std::fs::File::create(build.join("COMPLETE"))?;
        done.write_all(b"ok\n")?;
        done.sync_all()?;
        std::fs::set_permissions(build, std::fs::Permissions::from_mode(0o755))?;
        let dest = self.root.join("envs").join(request);
        match std::fs::rename(build, &dest) {
            Ok(()) => {}
            // rename(2) onto a non-empty directory: someone else built the same request.
            Err(e) if dest.join("COMPLETE").is_file() => {
                tracing::debug!(error = %e, "entry already built; discarding this build");
                let _ = std::fs::remove_dir_all(build);
            }
            Err(e) => return Err(e),
        }
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(request);
        self.load(request)
            .map_err(|e| std::io::Error::other(vivarium_proto::error_chain(&e)))
    }

    /// Remove a build that failed.
    pub fn discard(&self, build: &Path) {
        if build.starts_with(self.root.join("build")) {
            let _ = std::fs::remove_dir_all(build);
        }
    }

    /// Remove an entry (one over its profile's limits).
    pub fn remove(&self, key: &str) {
        if is_key(key) {
            self.remove_entry(key);
        }
    }

    fn remove_entry(&self, key: &str) {
        let dir = self.root.join("envs").join(key);
        // Out of envs/ first (atomic), then deleted at leisure.
        let gone = self
            .root
            .join("build")
            .join(format!("evict-{}", random_name()));
        if std::fs::rename(&dir, &gone).is_ok() {
            let _ = std::fs::remove_dir_all(&gone);
        }
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Evict least-recently-used entries not in use until the cache fits both of its
    /// caps (apparent bytes and inodes). Returns the evicted keys.
    pub fn evict(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.root.join("envs")) else {
            return Vec::new();
        };
        let mut entries: Vec<(std::time::SystemTime, String, u64, u64)> = Vec::new();
        for e in dir.flatten() {
            let key = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let meta = std::fs::read(path.join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Meta>(&b).ok());
            let Some(meta) = meta else {
                // Broken (or of the earlier layout): rebuilt when next asked for; free
                // the space now.
                if !self.is_in_use(&key) {
                    self.remove_entry(&key);
                }
                continue;
            };
            let used = std::fs::metadata(path.join("last-used"))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            entries.push((used, key, meta.bytes, meta.inodes));
        }
        let mut bytes: u64 = entries.iter().map(|e| e.2).sum();
        let mut inodes: u64 = entries.iter().map(|e| e.3).sum();
        entries.sort();
        let mut evicted = Vec::new();
        for (_, key, b, i) in entries {
            if bytes <= self.max_bytes && inodes <= self.max_inodes {
                break;
            }
            if self.is_in_use(&key) {
                continue;
            }
            self.remove_entry(&key);
            bytes -= b;
            inodes -= i;
            evicted.push(key);
        }
        evicted
    }

    fn is_in_use(&self, key: &str) -> bool {
        self.in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(key)
    }
}

/// A request key: 64 lowercase hex digits (it names files under the cache root).
fn is_key(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Make a built environment root-owned (the daemon's ids) and read-only to everyone:
/// directories 0755, files 0644 or 0755, no set-id bits. Only regular files,
/// directories and symlinks are accepted. Links are never followed.
fn seal(dir: &Path) -> std::io::Result<()> {
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        std::os::unix::fs::lchown(&d, Some(uid), Some(gid))?;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))?;
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            let meta = std::fs::symlink_metadata(&path)?;
            let ft = meta.file_type();
            if ft.is_dir() {
                stack.push(path);
            } else if ft.is_symlink() {
                std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
            } else if ft.is_file() {
                std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
                let mode = if meta.mode() & 0o100 != 0 {
                    0o755
                } else {
                    0o644
                };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
            } else {
                return Err(std::io::Error::other(format!(
                    "{}: not a regular file, directory or symlink",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

/// SHA-256 over a sorted manifest of the tree: for each path its type, mode, and the
/// SHA-256 of its contents (files) or its target (symlinks).
pub fn checksum(dir: &Path) -> std::io::Result<String> {
    let mut lines = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(&rel))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        for name in names {
            let rel = rel.join(name);
            let path = dir.join(&rel);
            let meta = std::fs::symlink_metadata(&path)?;
            let ft = meta.file_type();
            let mode = meta.mode() & 0o7777;
            let line = if ft.is_dir() {
                stack.push(rel.clone());
                format!("d {mode:o} {}", rel.display())
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path)?;
                format!("l {} -> {}", rel.display(), target.display())
            } else {
                let mut hasher = Sha256::new();
                let mut f = std::fs::File::open(&path)?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = f.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
                let d: String = hasher
                    .finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                format!("f {mode:o} {} {} {d}", meta.len(), rel.display())
            };
            lines.push(line);
        }
    }
    lines.sort();
    Ok(sha256_hex(lines.join("\n").as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        Meta {
            request: String::new(),
            resolved: vec!["a==1".into()],
            python_version: "3.11.2".into(),
            uv_version: "uv 0".into(),
            bytes: 0,
            inodes: 0,
            checksum: String::new(),
        }
    }

    fn build_one(cache: &Cache, key: &str, size: usize) -> Entry {
        let b = cache.new_build().unwrap();
        std::fs::create_dir_all(b.join("env/lib")).unwrap();
        std::fs::write(b.join("env/lib/x.py"), vec![b'x'; size]).unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3", b.join("env/python")).unwrap();
        cache.commit(&b, key, meta()).unwrap()
    }

    #[test]
    fn commit_lookup_and_corruption_detection() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let key = "a".repeat(64);
        {
            let cache = Cache::open(&root, 1 << 30, 1 << 20).unwrap();
            assert!(cache.lookup(&key).is_none());
            assert!(
                cache.lookup("../../etc").is_none(),
                "only request keys name entries"
            );
            let e = build_one(&cache, &key, 10);
            assert_eq!(e.meta.resolved, ["a==1"]);
            assert_eq!(e.meta.request, key);
            // env/, lib/, lib/x.py, python: apparent bytes are the file's 10 and the
            // link target's 16.
            assert_eq!((e.meta.bytes, e.meta.inodes), (10 + 16, 4));
            let mode = std::fs::metadata(e.env().join("lib/x.py")).unwrap().mode();
            assert_eq!(mode & 0o777, 0o644);
            assert!(cache.lookup(&key).is_some());
        }
        // A restart (new Cache) re-verifies; tampering is detected and the entry removed.
        let env = root.join("envs").join(&key).join("env/lib/x.py");
        std::fs::write(&env, b"tampered").unwrap();
        let cache = Cache::open(&root, 1 << 30, 1 << 20).unwrap();
        assert!(cache.lookup(&key).is_none());
        assert!(!root.join("envs").join(&key).exists());
        // A half-built entry (no COMPLETE) is not used either.
        let e = build_one(&cache, &key, 10);
        std::fs::remove_file(e.dir.join("COMPLETE")).unwrap();
        let cache = Cache::open(&root, 1 << 30, 1 << 20).unwrap();
        assert!(cache.lookup(&key).is_none());
    }

    /// An entry is served only for the request it was built for: one moved (or
    /// planted) under another request's name is removed, not served.
    #[test]
    fn an_entry_under_another_requests_name_is_not_served() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let cache = Cache::open(&root, 1 << 30, 1 << 20).unwrap();
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        build_one(&cache, &a, 10);
        std::fs::rename(root.join("envs").join(&a), root.join("envs").join(&b)).unwrap();
        let cache = Cache::open(&root, 1 << 30, 1 << 20).unwrap();
        assert!(cache.lookup(&b).is_none());
        assert!(!root.join("envs").join(&b).exists());
    }

    #[test]
    fn leftover_builds_and_the_old_layout_are_removed_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let cache = Cache::open(&root, 1 << 30, 1 << 20).unwrap();
        let b = cache.new_build().unwrap();
        std::fs::create_dir(root.join("requests")).unwrap();
        drop(cache);
        Cache::open(&root, 1 << 30, 1 << 20).unwrap();
        assert!(!b.exists());
        assert!(!root.join("requests").exists());
    }

    #[test]
    fn lru_eviction_skips_entries_in_use() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(&tmp.path().join("c"), 200_000, 1 << 20).unwrap();
        let k = |c: char| c.to_string().repeat(64);
        let a = build_one(&cache, &k('a'), 90_000);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = build_one(&cache, &k('b'), 90_000);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _guard = cache.use_entry(&a); // a is now the most recent, and in use
        std::thread::sleep(std::time::Duration::from_millis(20));
        build_one(&cache, &k('c'), 90_000);
        let evicted = cache.evict();
        assert_eq!(evicted, vec![k('b')]);
        assert!(cache.lookup(&k('b')).is_none());
        assert!(cache.lookup(&k('a')).is_some());
        assert!(!b.dir.exists());
    }

    /// Empty files cost no bytes but an inode each: the inode cap evicts them.
    #[test]
    fn eviction_counts_inodes_and_apparent_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(&tmp.path().join("c"), 1 << 30, 1_500).unwrap();
        let k = |c: char| c.to_string().repeat(64);
        let many = |key: &str| {
            let b = cache.new_build().unwrap();
            std::fs::create_dir_all(b.join("env")).unwrap();
            for n in 0..1_000 {
                std::fs::File::create(b.join(format!("env/{n}"))).unwrap();
            }
            cache.commit(&b, key, meta()).unwrap()
        };
        let first = many(&k('a'));
        assert_eq!((first.meta.bytes, first.meta.inodes), (0, 1_001));
        std::thread::sleep(std::time::Duration::from_millis(20));
        many(&k('b'));
        assert_eq!(cache.evict(), vec![k('a')]);
        // A sparse file counts by its apparent size.
        let cache = Cache::open(&tmp.path().join("d"), 1 << 20, 1 << 20).unwrap();
        let b = cache.new_build().unwrap();
        std::fs::create_dir_all(b.join("env")).unwrap();
        let f = std::fs::File::create(b.join("env/sparse")).unwrap();
        f.set_len(8 << 20).unwrap();
        let e = cache.commit(&b, &k('f'), meta()).unwrap();
        assert_eq!(e.meta.bytes, 8 << 20);
        assert_eq!(cache.evict(), vec![k('f')]);
    }
}
