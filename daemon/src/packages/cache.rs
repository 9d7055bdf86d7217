//! The environment cache, on disk under the configured `package_cache_dir`:
//!
//! ```text
//! <root>/                 0711 root   (jobs' host ids may only traverse)
//!   envs/<key>/           0755        one complete environment
//!     env/                            the virtual environment (bound at /env)
//!     meta.json                       resolved set, sizes, checksum of env/
//!     COMPLETE                        written last, before the rename into envs/
//!     last-used                       its mtime is the LRU clock
//!   requests/<request>    0700        alias: a normalized request -> an entry key
//!   build/<random>/       0711        environments being built (removed at start)
//!   locks/<request>       0700        flock(2): one build per request across processes
//! ```
//!
//! An entry is keyed by a hash of (uv version, interpreter path and version, platform,
//! index, wheelhouse, normalized resolved requirements). It is built in `build/`, made
//! root-owned and read-only, checksummed, and renamed into `envs/` only when complete.
//! An entry without `COMPLETE`, with unreadable metadata, or whose checksum does not
//! match (checked on its first use after each daemon start) is removed and rebuilt.
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
    /// `name==version`, sorted.
    pub resolved: Vec<String>,
    pub python_version: String,
    pub uv_version: String,
    /// Disk usage of `env/`.
    pub bytes: u64,
    /// SHA-256 over the manifest of `env/` (paths, types, modes, contents, link targets).
    pub checksum: String,
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
    pub fn open(root: &Path, max_bytes: u64) -> std::io::Result<Cache> {
        if let Some(parent) = root.parent() {
            std::fs::create_dir_all(parent)?;
        }
        mkdir_mode(root, 0o711)?;
        mkdir_mode(&root.join("envs"), 0o711)?;
        mkdir_mode(&root.join("build"), 0o711)?;
        mkdir_mode(&root.join("requests"), 0o700)?;
        mkdir_mode(&root.join("locks"), 0o700)?;
        for entry in std::fs::read_dir(root.join("build"))? {
            let entry = entry?;
            let _ = std::fs::remove_dir_all(entry.path());
        }
        Ok(Cache {
            root: root.to_owned(),
            max_bytes,
            verified: Mutex::new(HashSet::new()),
            in_use: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn alias(&self, request: &str) -> PathBuf {
        self.root.join("requests").join(request)
    }

    /// Take the cross-process lock for one request (blocking).
    pub fn lock_request(&self, request: &str) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join("locks").join(request))?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| std::io::Error::from(e))
    }

    /// The complete, intact entry a request maps to, if any. A broken entry is removed.
    pub fn lookup(&self, request: &str) -> Option<Entry> {
        let key = std::fs::read_to_string(self.alias(request)).ok()?;
        let key = key.trim();
        if key.len() != 64 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            let _ = std::fs::remove_file(self.alias(request));
            return None;
        }
        match self.load(key) {
            Ok(entry) => Some(entry),
            Err(why) => {
                tracing::warn!(key, %why, "package cache entry is broken; rebuilding it");
                self.remove_entry(key);
                let _ = std::fs::remove_file(self.alias(request));
                None
            }
        }
    }

    /// Read and check one entry (checksum on its first use since start).
    fn load(&self, key: &str) -> Result<Entry, String> {
        let dir = self.root.join("envs").join(key);
        if !dir.join("COMPLETE").is_file() {
            return Err("no completion marker".into());
        }
        let meta: Meta = std::fs::read(dir.join("meta.json"))
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| format!("metadata: {e}"))?;
        let verified = self
            .verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(key);
        if !verified {
            let sum = checksum(&dir.join("env")).map_err(|e| format!("checksum: {e}"))?;
            if sum != meta.checksum {
                return Err("checksum mismatch".into());
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

    /// A fresh build directory `build/<random>/` (mode 0700) with an empty `env/` in it.
    pub fn new_build(&self) -> std::io::Result<PathBuf> {
        let dir = self.root.join("build").join(random_name());
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
        let env = dir.join("env");
        std::fs::create_dir(&env)?;
        std::fs::set_permissions(&env, std::fs::Permissions::from_mode(0o700))?;
        Ok(dir)
    }

    /// Turn a finished build into an entry: root-owned and read-only, checksummed,
    /// marked complete, renamed into place; then point `request` at it. If an entry with
    /// the same key appeared meanwhile, the build is discarded and that one is used.
    pub fn commit(
        &self,
        build: &Path,
        key: &str,
        request: &str,
        mut meta: Meta,
    ) -> std::io::Result<Entry> {
        let env = build.join("env");
        seal(&env)?;
        meta.bytes = super::disk_usage(&env)?;
        meta.checksum = checksum(&env)?;
        std::fs::write(build.join("meta.json"), serde_json::to_vec_pretty(&meta)?)?;
        std::fs::File::create(build.join("last-used"))?;
        let mut done = std::fs::File::create(build.join("COMPLETE"))?;
        done.write_all(b"ok\n")?;
        done.sync_all()?;
        std::fs::set_permissions(build, std::fs::Permissions::from_mode(0o755))?;
        let dest = self.root.join("envs").join(key);
        match std::fs::rename(build, &dest) {
            Ok(()) => {}
            // rename(2) onto a non-empty directory: someone else built the same set.
            Err(e) if dest.join("COMPLETE").is_file() => {
                tracing::debug!(error = %e, "entry already built; discarding this build");
                let _ = std::fs::remove_dir_all(build);
            }
            Err(e) => return Err(e),
        }
        self.verified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        let entry = self.load(key).map_err(std::io::Error::other)?;
        let tmp = self.alias(&format!("{request}.tmp"));
        std::fs::write(&tmp, key)?;
        std::fs::rename(&tmp, self.alias(request))?;
        Ok(entry)
    }

    /// Remove a build that failed.
    pub fn discard(&self, build: &Path) {
        if build.starts_with(self.root.join("build")) {
            let _ = std::fs::remove_dir_all(build);
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

    /// Evict least-recently-used entries not in use until the cache fits its cap.
    /// Returns the evicted keys.
    pub fn evict(&self) -> Vec<String> {
        let Ok(dir) = std::fs::read_dir(self.root.join("envs")) else {
            return Vec::new();
        };
        let mut entries: Vec<(std::time::SystemTime, String, u64)> = Vec::new();
        for e in dir.flatten() {
            let key = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let bytes = std::fs::read(path.join("meta.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Meta>(&b).ok())
                .map(|m| m.bytes);
            let Some(bytes) = bytes else {
                // Broken: it is rebuilt when next asked for; free the space now.
                if !self.is_in_use(&key) {
                    self.remove_entry(&key);
                }
                continue;
            };
            let used = std::fs::metadata(path.join("last-used"))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            entries.push((used, key, bytes));
        }
        let mut total: u64 = entries.iter().map(|e| e.2).sum();
        entries.sort();
        let mut evicted = Vec::new();
        for (_, key, bytes) in entries {
            if total <= self.max_bytes {
                break;
            }
            if self.is_in_use(&key) {
                continue;
            }
            self.remove_entry(&key);
            total -= bytes;
            evicted.push(key);
        }
        if !evicted.is_empty() {
            self.drop_dangling_aliases();
        }
        evicted
    }

    fn is_in_use(&self, key: &str) -> bool {
        self.in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(key)
    }

    fn drop_dangling_aliases(&self) {
        let Ok(dir) = std::fs::read_dir(self.root.join("requests")) else {
            return;
        };
        for e in dir.flatten() {
            let target = std::fs::read_to_string(e.path()).unwrap_or_default();
            if !self
                .root
                .join("envs")
                .join(target.trim())
                .join("COMPLETE")
                .is_file()
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
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
            resolved: vec!["a==1".into()],
            python_version: "3.11.2".into(),
            uv_version: "uv 0".into(),
            bytes: 0,
            checksum: String::new(),
        }
    }

    fn build_one(cache: &Cache, key: &str, request: &str, size: usize) -> Entry {
        let b = cache.new_build().unwrap();
        std::fs::create_dir_all(b.join("env/lib")).unwrap();
        std::fs::write(b.join("env/lib/x.py"), vec![b'x'; size]).unwrap();
        std::os::unix::fs::symlink("/usr/bin/python3", b.join("env/python")).unwrap();
        cache.commit(&b, key, request, meta()).unwrap()
    }

    #[test]
    fn commit_lookup_and_corruption_detection() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let key = "a".repeat(64);
        {
            let cache = Cache::open(&root, 1 << 30).unwrap();
            assert!(cache.lookup("req").is_none());
            let e = build_one(&cache, &key, "req", 10);
            assert_eq!(e.meta.resolved, ["a==1"]);
            let mode = std::fs::metadata(e.env().join("lib/x.py")).unwrap().mode();
            assert_eq!(mode & 0o777, 0o644);
            assert!(cache.lookup("req").is_some());
        }
        // A restart (new Cache) re-verifies; tampering is detected and the entry removed.
        let env = root.join("envs").join(&key).join("env/lib/x.py");
        std::fs::write(&env, b"tampered").unwrap();
        let cache = Cache::open(&root, 1 << 30).unwrap();
        assert!(cache.lookup("req").is_none());
        assert!(!root.join("envs").join(&key).exists());
        // A half-built entry (no COMPLETE) is not used either.
        let e = build_one(&cache, &key, "req", 10);
        std::fs::remove_file(e.dir.join("COMPLETE")).unwrap();
        let cache = Cache::open(&root, 1 << 30).unwrap();
        assert!(cache.lookup("req").is_none());
    }

    #[test]
    fn leftover_builds_are_removed_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cache");
        let cache = Cache::open(&root, 1 << 30).unwrap();
        let b = cache.new_build().unwrap();
        drop(cache);
        Cache::open(&root, 1 << 30).unwrap();
        assert!(!b.exists());
    }

    #[test]
    fn lru_eviction_skips_entries_in_use() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::open(&tmp.path().join("c"), 200_000).unwrap();
        let k = |c: char| c.to_string().repeat(64);
        let a = build_one(&cache, &k('a'), "ra", 90_000);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = build_one(&cache, &k('b'), "rb", 90_000);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _guard = cache.use_entry(&a); // a is now the most recent, and in use
        std::thread::sleep(std::time::Duration::from_millis(20));
        build_one(&cache, &k('c'), "rc", 90_000);
        let evicted = cache.evict();
        assert_eq!(evicted, vec![k('b')]);
        assert!(cache.lookup("rb").is_none());
        assert!(cache.lookup("ra").is_some());
        assert!(!b.dir.exists());
    }
}
