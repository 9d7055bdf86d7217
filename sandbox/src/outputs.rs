//! Output files ("artifacts"): what a job or a cell leaves under `/work` that it asked to
//! return, collected inside the sandbox, as the job's user, never following a link. The
//! other direction of [`crate::inputs`].
//!
//! Three parts share the definitions here: this walker (for a cold job's init), the same
//! walker in Python (`outputs.py`, for the session cell loop, run by the job's own
//! interpreter), and the daemon's parser (`vivariumd::server::artifacts`), which treats
//! the bundle as hostile and re-checks every path against the patterns with
//! [`pattern_matches`]. The two walkers write byte-identical bundles for the same tree
//! (tested below).
//!
//! # Patterns
//!
//! A job names what to return as patterns; none means [`DEFAULT_PATTERNS`] (`out/**`,
//! everything under `/work/out`). A pattern is a `/`-separated path relative to `/work`,
//! normalized as an input path is ([`check_pattern`]: not empty, not absolute, no empty,
//! `.` or `..` component, no NUL or control character, at most 1024 bytes and 255 per
//! component; at most [`MAX_PATTERNS`] patterns, [`MAX_PATTERNS_BYTES`] together). It
//! is matched against a path component by component:
//!
//! - a component that is exactly `**` matches zero or more whole components;
//! - in any other component, `*` matches any run of characters (including none), `?`
//!   exactly one character, and every other character itself. There is no escape, no
//!   `[...]` class and no `{a,b}`: `[` is a character like any other. (`a**b` or `***`
//!   are components with stars, the same as `a*b` and `*`.)
//! - `*` and `?` match a leading `.` too: `out/*` returns `out/.hidden`.
//! - a character is a Unicode scalar value of the name's UTF-8; each byte of a name that
//!   is not valid UTF-8 is one character of its own (which only `*` and `?` match), as
//!   Python's `surrogateescape` decodes it.
//!
//! Only regular files are artifacts. A pattern that matches a directory does not collect
//! it or what is in it (`out` returns nothing when `out` is a directory); `out/**`
//! collects everything below `out`, at any depth, because `**` matches the components
//! below it. Directories are only walked into, and only when some pattern could still
//! match below them ([`could_match_below`]).
//!
//! # The walk
//!
//! `/work` is opened with `O_DIRECTORY | O_NOFOLLOW`, each directory below it with
//! `openat(O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)` from its parent's fd and read
//! with getdents. A directory's entries are all read, then taken in byte order of their
//! names, depth first: the records come in the order of their paths compared component
//! by component (so `a/b` before `a-c`). For each entry that a pattern matches, or that a
//! pattern could match below:
//!
//! 1. `fstatat(AT_SYMLINK_NOFOLLOW)` says what it is; nothing is opened before.
//! 2. A directory that a pattern could match below is entered (its path has fewer than
//!    [`MAX_DEPTH`] components, else the depth flag is set).
//! 3. A matching symlink, FIFO, socket, character or block device is listed with its
//!    kind and its `st_size`, never opened.
//! 4. A matching regular file: past `max_files` files it is counted as omitted; larger
//!    than `max_file_bytes` it is `TOO_LARGE`; if it would take the total past
//!    `max_total_bytes` it is `OVER_TOTAL` (a later smaller file may still fit). Else it
//!    is opened with `O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, and
//!    `fstat` must show a regular file with the `st_dev`/`st_ino` of step 1, else it is
//!    `CHANGED`. It is read to its end, but at most `allowance + 1` bytes, where the
//!    allowance is the smaller of `max_file_bytes` and what the total has left: a file
//!    that grew past the allowance while read is `TOO_LARGE` (or `OVER_TOTAL` if it is
//!    still within `max_file_bytes`), its size the bytes read; a file that shrank or grew
//!    within the allowance is returned as read, its size the bytes read.
//! 5. A failure to stat, open or read an entry (`EACCES`, ...) is `UNREADABLE` with its
//!    errno (for a directory on the way too), not a failure of the collection.
//!
//! Bounds: at most [`MAX_SKIPPED`] records that are not `FILE` (more are counted as
//! omitted); a path longer than [`MAX_PATH`] bytes is not listed nor entered (the depth
//! flag); after [`MAX_VISITS`] directory entries read, the walk stops (the walk-limit
//! flag), and what the directory being read held is not listed. An error reading a
//! directory below `/work` lists it as `UNREADABLE` and drops its entries.
//!
//! The walker runs inside the sandbox with the job's credentials: whoever calls it sets
//! them (a cold job's init its filesystem ids, as [`crate::inputs::place`] does). It
//! opens nothing through a link (`O_NOFOLLOW` on every open, from a directory fd), so a
//! link swapped in after step 1 fails the open; whatever else it could open, the job can
//! open too.
//!
//! # The bundle
//!
//! Integers little endian.
//!
//! ```text
//! bundle  = MAGIC record* end
//! MAGIC   = "VIVOUT1\n"                         (8 bytes)
//! record  = tag:u8 path_len:u32 path size:u64 body
//!           path: the raw bytes of the path relative to /work, components joined by "/"
//!           body: FILE: `size` bytes, the file's content as read (size = bytes read)
//!                 UNREADABLE: errno:u32
//!                 any other tag: nothing
//!           size: for FILE the bytes that follow; else the entry's st_size from
//!                 fstatat (0 if that failed), or for a file that grew while read the
//!                 bytes read (one more than it could take)
//! end     = 0xFF omitted:u64 flags:u32
//!           omitted: matching entries not listed: files past max_files, other records
//!                    past MAX_SKIPPED
//!           flags: bit 0 walk limit reached (MAX_VISITS), bit 1 depth or path-length
//!                  limit reached; no other bit is set
//! tags    = FILE 1, SYMLINK 2, FIFO 3, SOCKET 4, CHAR_DEVICE 5, BLOCK_DEVICE 6,
//!           TOO_LARGE 7, OVER_TOTAL 8, UNREADABLE 9, CHANGED 10, END 0xFF
//! ```

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use vivarium_proto::files::{check_input_path, InputPathError};

/// The bundle's first bytes.
pub const MAGIC: &[u8; 8] = b"VIVOUT1\n";

/// The records' tags.
pub mod tag {
    pub const FILE: u8 = 1;
    pub const SYMLINK: u8 = 2;
    pub const FIFO: u8 = 3;
    pub const SOCKET: u8 = 4;
    pub const CHAR_DEVICE: u8 = 5;
    pub const BLOCK_DEVICE: u8 = 6;
    pub const TOO_LARGE: u8 = 7;
    pub const OVER_TOTAL: u8 = 8;
    pub const UNREADABLE: u8 = 9;
    pub const CHANGED: u8 = 10;
    pub const END: u8 = 0xFF;
}

/// `END` flag: the walk stopped at [`MAX_VISITS`] entries.
pub const FLAG_WALK_LIMIT: u32 = 1;
/// `END` flag: a directory at [`MAX_DEPTH`], or a path over [`MAX_PATH`] bytes, that a
/// pattern could match was not entered or listed.
pub const FLAG_DEPTH_LIMIT: u32 = 2;

/// The most components a listed path has (a directory with this many is not entered).
pub const MAX_DEPTH: usize = 32;
/// Directory entries read at most, over the whole walk.
pub const MAX_VISITS: u64 = 100_000;
/// Records other than `FILE` at most.
pub const MAX_SKIPPED: u32 = 10_000;
/// The longest path listed, in bytes.
pub const MAX_PATH: usize = 4096;
/// Patterns at most.
pub const MAX_PATTERNS: usize = 64;
/// The patterns' bytes together at most (matching costs up to pattern bytes x path
/// bytes per path, paid by the daemon too for each record it re-checks).
pub const MAX_PATTERNS_BYTES: usize = 4096;
/// What is returned when a job names no pattern.
pub const DEFAULT_PATTERNS: &[&str] = &["out/**"];

/// A profile's bounds on what is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputCaps {
    pub max_files: u32,
    pub max_file_bytes: u64,
    pub max_total_bytes: u64,
}

/// What a collection wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectStats {
    /// `FILE` records, and their bytes.
    pub files: u32,
    pub file_bytes: u64,
    /// Other records.
    pub skipped: u32,
    pub omitted: u64,
    pub flags: u32,
}

/// Why a set of patterns is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("more than {MAX_PATTERNS} output patterns")]
    TooMany,
    #[error("the output patterns are longer than {MAX_PATTERNS_BYTES} bytes together")]
    TooLong,
    #[error("output pattern {pattern:?}: {error}")]
    Pattern {
        pattern: String,
        error: InputPathError,
    },
}

/// Why a collection failed as a whole (an entry's failure is a record instead).
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Pattern(#[from] PatternError),
    #[error("opening the work directory: {0}")]
    Work(#[source] io::Error),
    #[error("reading the work directory: {0}")]
    ReadWork(#[source] io::Error),
    #[error("writing the output bundle: {0}")]
    Write(#[source] io::Error),
}

/// Check one pattern: the rules of an input path (`vivarium_proto::files`).
pub fn check_pattern(pattern: &str) -> Result<(), InputPathError> {
    check_input_path(pattern)
}

/// Check a job's patterns (none is allowed: [`DEFAULT_PATTERNS`]).
pub fn check_patterns(patterns: &[String]) -> Result<(), PatternError> {
    if patterns.len() > MAX_PATTERNS {
        return Err(PatternError::TooMany);
    }
    if patterns.iter().map(String::len).sum::<usize>() > MAX_PATTERNS_BYTES {
        return Err(PatternError::TooLong);
    }
    for p in patterns {
        check_pattern(p).map_err(|error| PatternError::Pattern {
            pattern: p.clone(),
            error,
        })?;
    }
    Ok(())
}

/// The patterns in force: `patterns`, or [`DEFAULT_PATTERNS`] when there are none.
pub fn effective_patterns(patterns: &[String]) -> Vec<&str> {
    if patterns.is_empty() {
        DEFAULT_PATTERNS.to_vec()
    } else {
        patterns.iter().map(String::as_str).collect()
    }
}

/// A name's characters: Unicode scalar values, and `0xDC00 + b` for each byte `b` that
/// is not part of valid UTF-8 (as Python's `surrogateescape`).
fn units(name: &[u8]) -> Vec<u32> {
    let mut v = Vec::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        v.extend(chunk.valid().chars().map(u32::from));
        v.extend(chunk.invalid().iter().map(|&b| 0xDC00 + u32::from(b)));
    }
    v
}

/// One component against one name: `*` any run, `?` one character.
fn component_matches(pattern: &str, name: &[u8]) -> bool {
    let p: Vec<u32> = pattern.chars().map(u32::from).collect();
    let n = units(name);
    let (star, question) = (u32::from('*'), u32::from('?'));
    let (mut pi, mut ni) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == question || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == star {
            back = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = back {
            pi = sp + 1;
            ni = sn + 1;
            back = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == star)
}

/// The pattern's states (how many components are matched) after `path`'s components;
/// `**` is a state that consumes any component.
fn states(pattern: &[&str], path: &[u8]) -> Vec<bool> {
    let close = |s: &mut Vec<bool>| {
        for i in 0..pattern.len() {
            if s[i] && pattern[i] == "**" {
                s[i + 1] = true;
            }
        }
    };
    let mut now = vec![false; pattern.len() + 1];
    now[0] = true;
    close(&mut now);
    if path.is_empty() {
        return now;
    }
    for name in path.split(|&b| b == b'/') {
        let mut next = vec![false; pattern.len() + 1];
        for i in 0..pattern.len() {
            if now[i] && (pattern[i] == "**" || component_matches(pattern[i], name)) {
                next[if pattern[i] == "**" { i } else { i + 1 }] = true;
            }
        }
        close(&mut next);
        if !next.contains(&true) {
            return next;
        }
        now = next;
    }
    now
}

/// Whether `pattern` matches `path` (relative to `/work`, the raw bytes). A pattern that
/// [`check_pattern`] refuses matches nothing.
pub fn pattern_matches(pattern: &str, path: &[u8]) -> bool {
    if check_pattern(pattern).is_err() || path.is_empty() {
        return false;
    }
    let pattern: Vec<&str> = pattern.split('/').collect();
    states(&pattern, path)[pattern.len()]
}

/// Whether `pattern` could match a path below the directory `dir` (`b""` for `/work`).
pub fn could_match_below(pattern: &str, dir: &[u8]) -> bool {
    if check_pattern(pattern).is_err() {
        return false;
    }
    let pattern: Vec<&str> = pattern.split('/').collect();
    let s = states(&pattern, dir);
    s[..pattern.len()].contains(&true)
}

/// Collect what `patterns` (none: [`DEFAULT_PATTERNS`]) match under the directory
/// `work`, within `caps`, as a bundle written to `out`. Runs with the caller's
/// credentials.
pub fn collect(
    work: &Path,
    patterns: &[String],
    caps: &OutputCaps,
    out: &mut impl Write,
) -> Result<CollectStats, CollectError> {
    collect_with(work, patterns, caps, out, LIMITS)
}

/// The walk's own bounds ([`MAX_DEPTH`], ...), smaller in tests.
#[derive(Debug, Clone, Copy)]
struct Limits {
    depth: usize,
    visits: u64,
    skipped: u32,
    path: usize,
}

const LIMITS: Limits = Limits {
    depth: MAX_DEPTH,
    visits: MAX_VISITS,
    skipped: MAX_SKIPPED,
    path: MAX_PATH,
};

fn collect_with(
    work: &Path,
    patterns: &[String],
    caps: &OutputCaps,
    out: &mut impl Write,
    limits: Limits,
) -> Result<CollectStats, CollectError> {
    check_patterns(patterns)?;
    let root = nix::fcntl::open(work, dir_flags(), Mode::empty())
        .map_err(|e| CollectError::Work(e.into()))?;
    let mut walk = Walk {
        patterns: effective_patterns(patterns),
        caps,
        limits,
        out: io::BufWriter::with_capacity(64 * 1024, out),
        stats: CollectStats::default(),
        visits: 0,
    };
    walk.out.write_all(MAGIC).map_err(CollectError::Write)?;
    match walk.list(root) {
        Ok(Some((dir, names))) => {
            walk.entries(&dir, &names, b"", 0)?;
        }
        Ok(None) => {}
        Err(e) => return Err(CollectError::ReadWork(e.into())),
    }
    let mut end = vec![tag::END];
    end.extend_from_slice(&walk.stats.omitted.to_le_bytes());
    end.extend_from_slice(&walk.stats.flags.to_le_bytes());
    walk.out.write_all(&end).map_err(CollectError::Write)?;
    walk.out.flush().map_err(CollectError::Write)?;
    Ok(walk.stats)
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

struct Walk<'a, W: Write> {
    patterns: Vec<&'a str>,
    caps: &'a OutputCaps,
    limits: Limits,
    out: io::BufWriter<W>,
    stats: CollectStats,
    visits: u64,
}

/// Whether the walk goes on.
type Flow = Result<bool, CollectError>;

/// A directory and its names, sorted.
type Listing = (Dir, Vec<Vec<u8>>);

impl<W: Write> Walk<'_, W> {
    /// A directory's names, sorted; `None` when the visit limit stops the walk.
    fn list(&mut self, fd: OwnedFd) -> Result<Option<Listing>, Errno> {
        let mut dir = Dir::from_fd(fd)?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name == b"." || name == b".." {
                continue;
            }
            self.visits += 1;
            if self.visits > self.limits.visits {
                self.stats.flags |= FLAG_WALK_LIMIT;
                return Ok(None);
            }
            names.push(name);
        }
        names.sort();
        Ok(Some((dir, names)))
    }

    fn entries(&mut self, dir: &Dir, names: &[Vec<u8>], prefix: &[u8], depth: usize) -> Flow {
        for name in names {
            let mut path = prefix.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
            let matches = self.patterns.iter().any(|p| pattern_matches(p, &path));
            let below = self.patterns.iter().any(|p| could_match_below(p, &path));
            if !matches && !below {
                continue;
            }
            if path.len() > self.limits.path {
                self.stats.flags |= FLAG_DEPTH_LIMIT;
                continue;
            }
            let st = match fstatat(dir.as_fd(), name.as_slice(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(e) => {
                    self.skip(tag::UNREADABLE, &path, 0, Some(e))?;
                    continue;
                }
            };
            let size = st.st_size as u64;
            let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            let skip_tag = match kind {
                SFlag::S_IFDIR => {
                    if below && !self.enter(dir, name, &path, depth + 1, &st)? {
                        return Ok(false);
                    }
                    continue;
                }
                SFlag::S_IFREG => {
                    if matches {
                        self.file(dir, name, &path, &st)?;
                    }
                    continue;
                }
                SFlag::S_IFLNK => tag::SYMLINK,
                SFlag::S_IFIFO => tag::FIFO,
                SFlag::S_IFSOCK => tag::SOCKET,
                SFlag::S_IFCHR => tag::CHAR_DEVICE,
                SFlag::S_IFBLK => tag::BLOCK_DEVICE,
                _ => tag::UNREADABLE,
            };
            if matches {
                let errno = (skip_tag == tag::UNREADABLE).then_some(Errno::EINVAL);
                self.skip(skip_tag, &path, size, errno)?;
            }
        }
        Ok(true)
    }

    /// Walk into the directory `name` of `dir` (its path has `depth` components).
    fn enter(&mut self, dir: &Dir, name: &[u8], path: &[u8], depth: usize, st: &FileStat) -> Flow {
        if depth >= self.limits.depth {
            self.stats.flags |= FLAG_DEPTH_LIMIT;
            return Ok(true);
        }
        let size = st.st_size as u64;
        let fd = match openat(dir.as_fd(), name, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                return self
                    .skip(tag::UNREADABLE, path, size, Some(e))
                    .map(|()| true)
            }
        };
        match fstat(&fd) {
            Ok(now) if same_file(&now, st) => {}
            Ok(_) => return self.skip(tag::CHANGED, path, size, None).map(|()| true),
            Err(e) => {
                return self
                    .skip(tag::UNREADABLE, path, size, Some(e))
                    .map(|()| true)
            }
        }
        match self.list(fd) {
            Ok(Some((sub, names))) => self.entries(&sub, &names, path, depth),
            Ok(None) => Ok(false),
            Err(e) => self
                .skip(tag::UNREADABLE, path, size, Some(e))
                .map(|()| true),
        }
    }

    /// A matching regular file.
    fn file(
        &mut self,
        dir: &Dir,
        name: &[u8],
        path: &[u8],
        st: &FileStat,
    ) -> Result<(), CollectError> {
        let caps = self.caps;
        if self.stats.files >= caps.max_files {
            self.stats.omitted += 1;
            return Ok(());
        }
        let size = st.st_size as u64;
        if size > caps.max_file_bytes {
            return self.skip(tag::TOO_LARGE, path, size, None);
        }
        let room = caps.max_total_bytes.saturating_sub(self.stats.file_bytes);
        if size > room {
            return self.skip(tag::OVER_TOTAL, path, size, None);
        }
        let allowance = caps.max_file_bytes.min(room);
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = match openat(dir.as_fd(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => return self.skip(tag::UNREADABLE, path, size, Some(e)),
        };
        match fstat(&fd) {
            Ok(now)
                if SFlag::from_bits_truncate(now.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
                    && same_file(&now, st) => {}
            Ok(_) => return self.skip(tag::CHANGED, path, size, None),
            Err(e) => return self.skip(tag::UNREADABLE, path, size, Some(e)),
        }
        let mut data = Vec::with_capacity(size as usize);
        let limit = allowance.saturating_add(1);
        if let Err(e) = std::fs::File::from(fd).take(limit).read_to_end(&mut data) {
            let errno = Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
            return self.skip(tag::UNREADABLE, path, size, Some(errno));
        }
        let read = data.len() as u64;
        if read > allowance {
            let t = if read > caps.max_file_bytes {
                tag::TOO_LARGE
            } else {
                tag::OVER_TOTAL
            };
            return self.skip(t, path, read, None);
        }
        self.header(tag::FILE, path, read)?;
        self.out.write_all(&data).map_err(CollectError::Write)?;
        self.stats.files += 1;
        self.stats.file_bytes += read;
        Ok(())
    }

    /// A record other than `FILE`, or an omitted entry past [`MAX_SKIPPED`].
    fn skip(
        &mut self,
        t: u8,
        path: &[u8],
        size: u64,
        errno: Option<Errno>,
    ) -> Result<(), CollectError> {
        if self.stats.skipped >= self.limits.skipped {
            self.stats.omitted += 1;
            return Ok(());
        }
        self.header(t, path, size)?;
        if t == tag::UNREADABLE {
            let errno = errno.map_or(libc::EIO, |e| e as i32) as u32;
            self.out
                .write_all(&errno.to_le_bytes())
                .map_err(CollectError::Write)?;
        }
        self.stats.skipped += 1;
        Ok(())
    }

    fn header(&mut self, t: u8, path: &[u8], size: u64) -> Result<(), CollectError> {
        let mut h = Vec::with_capacity(13 + path.len());
        h.push(t);
        h.extend_from_slice(&(path.len() as u32).to_le_bytes());
        h.extend_from_slice(path);
        h.extend_from_slice(&size.to_le_bytes());
        self.out.write_all(&h).map_err(CollectError::Write)
    }
}

fn same_file(a: &FileStat, b: &FileStat) -> bool {
    (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
}

/// The most bytes of a collection request ([`parse_request`]).
pub const MAX_REQUEST: usize = 64 * 1024;

/// What to collect, as the server asks it of a sandbox's collector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectRequest {
    pub caps: OutputCaps,
    pub patterns: Vec<String>,
}

/// Parse a collection request (`vivariumd::server::artifacts::request_bytes`): integers
/// little endian, `max_files:u32 max_file_bytes:u64 max_total_bytes:u64 count:u32`, then
/// `count` patterns each ended by a NUL. `None` if it is anything else, or its patterns
/// break [`check_patterns`].
pub fn parse_request(b: &[u8]) -> Option<CollectRequest> {
    let head = b.get(..24)?;
    let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4"));
    let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8"));
    let caps = OutputCaps {
        max_files: u32_at(0),
        max_file_bytes: u64_at(4),
        max_total_bytes: u64_at(12),
    };
    let count = u32_at(20) as usize;
    let body = &b[24..];
    if count > MAX_PATTERNS || body.last().is_some_and(|&c| c != 0) {
        return None;
    }
    let patterns: Vec<String> = body
        .split(|&c| c == 0)
        .take(count)
        .map(|p| String::from_utf8(p.to_vec()).ok())
        .collect::<Option<_>>()?;
    let len: usize = patterns.iter().map(|p| p.len() + 1).sum();
    if patterns.len() != count || len != body.len() || patterns.is_empty() {
        return None;
    }
    check_patterns(&patterns).ok()?;
    Some(CollectRequest { caps, patterns })
}

/// A job's collection at its end, by its init (a cold job's, a warm sandbox's, a zygote
/// job's), once every process of the job is gone: so nothing of the job runs while its
/// files are read. The server wrote the request to `link` (a stream socket) before the
/// job could end: `len:u32` and the request. Without one (a sandbox whose job asked for
/// no outputs, or that never got a job), nothing is collected: the read never waits.
/// The bundle is written to `link` as `owner`'s filesystem ids (checked: nothing is read
/// with init's own), then the link is shut for writing, which the server reads as the
/// bundle's end. Failures end the collection quietly; the server, which sees a bundle
/// without its `END`, reports the artifacts as not collected.
pub fn collect_for_job(link: &OwnedFd, owner: (u32, u32)) {
    use nix::sys::socket::{recv, shutdown, MsgFlags, Shutdown};
    use std::os::fd::AsRawFd;
    let mut len = [0u8; 4];
    let got = recv(
        link.as_raw_fd(),
        &mut len,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_WAITALL,
    );
    if got != Ok(4) {
        return;
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_REQUEST {
        return;
    }
    let mut req = vec![0u8; len];
    let mut at = 0;
    while at < len {
        match recv(link.as_raw_fd(), &mut req[at..], MsgFlags::MSG_DONTWAIT) {
            Ok(0) | Err(_) => return,
            Ok(n) => at += n,
        }
    }
    let Some(req) = parse_request(&req) else {
        return;
    };
    let old_gid = nix::unistd::setfsgid(nix::unistd::Gid::from_raw(owner.1));
    let old_uid = nix::unistd::setfsuid(nix::unistd::Uid::from_raw(owner.0));
    let now = (
        nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u32::MAX)).as_raw(),
        nix::unistd::setfsgid(nix::unistd::Gid::from_raw(u32::MAX)).as_raw(),
    );
    if now == owner {
        let mut out = LinkWriter(link);
        let _ = collect(Path::new("/work"), &req.patterns, &req.caps, &mut out);
    }
    nix::unistd::setfsuid(old_uid);
    nix::unistd::setfsgid(old_gid);
    let _ = shutdown(link.as_raw_fd(), Shutdown::Write);
}

/// Writes to a socket without `SIGPIPE` (a server that stopped reading is an error).
struct LinkWriter<'a>(&'a OwnedFd);

impl Write for LinkWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        use std::os::fd::AsRawFd;
        nix::sys::socket::send(
            self.0.as_raw_fd(),
            buf,
            nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        )
        .map_err(io::Error::from)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    const PYTHON: &str = "/usr/bin/python3";
    const OUTPUTS_PY: &str = include_str!("outputs.py");

    const CAPS: OutputCaps = OutputCaps {
        max_files: 100,
        max_file_bytes: 1000,
        max_total_bytes: 1 << 20,
    };

    fn pats(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    /// One record of a bundle, as the tests read it back.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Rec {
        tag: u8,
        path: Vec<u8>,
        size: u64,
        data: Vec<u8>,
        errno: Option<u32>,
    }

    /// A trusting reader of a bundle (the daemon's hostile one is `server::artifacts`).
    fn read_bundle(b: &[u8]) -> (Vec<Rec>, u64, u32) {
        assert_eq!(&b[..8], MAGIC);
        let mut at = 8;
        let mut take = |n: usize| {
            let s = &b[at..at + n];
            at += n;
            s
        };
        let mut recs = Vec::new();
        loop {
            let t = take(1)[0];
            if t == tag::END {
                let omitted = u64::from_le_bytes(take(8).try_into().unwrap());
                let flags = u32::from_le_bytes(take(4).try_into().unwrap());
                assert_eq!(at, b.len(), "trailing bytes");
                return (recs, omitted, flags);
            }
            let len = u32::from_le_bytes(take(4).try_into().unwrap()) as usize;
            let path = take(len).to_vec();
            let size = u64::from_le_bytes(take(8).try_into().unwrap());
            let data = if t == tag::FILE {
                take(size as usize).to_vec()
            } else {
                Vec::new()
            };
            let errno =
                (t == tag::UNREADABLE).then(|| u32::from_le_bytes(take(4).try_into().unwrap()));
            recs.push(Rec {
                tag: t,
                path,
                size,
                data,
                errno,
            });
        }
    }

    fn rust(work: &Path, p: &[String], caps: &OutputCaps, limits: Limits) -> Vec<u8> {
        let mut out = Vec::new();
        collect_with(work, p, caps, &mut out, limits).unwrap();
        out
    }

    /// The Python collector's bundle, with a timeout (a FIFO opened would block it).
    fn python(work: &Path, p: &[String], caps: &OutputCaps, limits: Limits) -> Vec<u8> {
        let driver = "\nimport sys\na = sys.argv[1:]\n\
            _vivarium_outputs_limits = tuple(int(x) for x in a[0].split(','))\n\
            _vivarium_outputs_collect(1, a[5:], int(a[2]), int(a[3]), int(a[4]), work=a[1])\n";
        let program = format!("import os\n{OUTPUTS_PY}{driver}");
        let l = format!(
            "{},{},{},{}",
            limits.depth, limits.visits, limits.skipped, limits.path
        );
        let mut child = Command::new(PYTHON)
            .args(["-I", "-S", "-c", &program, &l])
            .arg(work)
            .args([
                caps.max_files.to_string(),
                caps.max_file_bytes.to_string(),
                caps.max_total_bytes.to_string(),
            ])
            .args(p)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut b = Vec::new();
            stdout.read_to_end(&mut b).unwrap();
            b
        });
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "python collector: {status}");
                break;
            }
            if start.elapsed() > Duration::from_secs(60) {
                child.kill().unwrap();
                panic!("the python collector hung (did it open a FIFO?)");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        reader.join().unwrap()
    }

    /// Both collectors, which must agree to the byte; the Rust one under a timeout.
    fn both(work: &Path, p: &[String], caps: &OutputCaps, limits: Limits) -> (Vec<Rec>, u64, u32) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (w, p2, c) = (work.to_path_buf(), p.to_vec(), *caps);
        std::thread::spawn(move || tx.send(rust(&w, &p2, &c, limits)).unwrap());
        let r = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the rust collector hung (did it open a FIFO?)");
        let py = python(work, p, caps, limits);
        assert!(
            r == py,
            "bundles differ:\nrust   {:?}\npython {:?}",
            read_bundle(&r),
            read_bundle(&py)
        );
        read_bundle(&r)
    }

    /// A FIFO with a writer blocked in open(2) until something opens it to read: had a
    /// collector opened it (with `O_NONBLOCK` or not), the writer's open would return.
    struct FifoWatch {
        path: std::path::PathBuf,
        opened: std::sync::Arc<std::sync::atomic::AtomicBool>,
        writer: std::thread::JoinHandle<()>,
    }

    impl FifoWatch {
        fn new(path: &Path) -> Self {
            nix::unistd::mkfifo(path, Mode::from_bits_truncate(0o644)).unwrap();
            let opened = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let (p, o) = (path.to_path_buf(), opened.clone());
            let writer = std::thread::spawn(move || {
                let _w = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
                o.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            std::thread::sleep(Duration::from_millis(100)); // the writer is in open(2)
            FifoWatch {
                path: path.to_path_buf(),
                opened,
                writer,
            }
        }

        fn assert_never_opened(self) {
            std::thread::sleep(Duration::from_millis(100));
            let opened = self.opened.load(std::sync::atomic::Ordering::SeqCst);
            assert!(!opened, "{:?} was opened", self.path);
            // Let the writer go: now it is opened, and the watch sees it.
            let _r = nix::fcntl::open(
                &self.path,
                OFlag::O_RDONLY | OFlag::O_NONBLOCK,
                Mode::empty(),
            )
            .unwrap();
            self.writer.join().unwrap();
            assert!(self.opened.load(std::sync::atomic::Ordering::SeqCst));
        }
    }

    fn summary(recs: &[Rec]) -> Vec<(u8, String)> {
        recs.iter()
            .map(|r| (r.tag, String::from_utf8_lossy(&r.path).into_owned()))
            .collect()
    }

    #[test]
    fn patterns_match_as_documented() {
        let table: &[(&str, &[u8], bool)] = &[
            ("out/**", b"out/a", true),
            ("out/**", b"out/a/b/c.txt", true),
            ("out/**", b"out", true), // (a directory matched: nothing collected)
            ("out/**", b"outx/a", false),
            ("out/**", b"a/out/b", false),
            ("out", b"out", true),
            ("out", b"out/a", false),
            ("*.png", b"a.png", true),
            ("*.png", b"d/a.png", false),
            ("**/*.png", b"a.png", true),
            ("**/*.png", b"d/e/a.png", true),
            ("**/*.png", b"d/e/a.pngx", false),
            ("out/*", b"out/.hidden", true),
            ("*", b".x", true),
            ("a?c", b"abc", true),
            ("a?c", b"ac", false),
            ("a?c", "aéc".as_bytes(), true),
            ("a?c", b"a\xffc", true),
            ("a?c", b"a\xc3c", true),
            ("a??c", "aéc".as_bytes(), false),
            ("a*b*c", b"aXbYbZc", true),
            ("a*b*c", b"aXbYbZ", false),
            ("*x*", b"abc", false),
            ("***", b"abc", true),
            ("a**b", b"aXYb", true),
            ("a**b", b"aX/Yb", false),
            ("a/**/b", b"a/b", true),
            ("a/**/b", b"a/x/y/b", true),
            ("a/**/**/b", b"a/b", true),
            ("**", b"anything/at/all", true),
            ("[ab]", b"a", false),
            ("[ab]", b"[ab]", true),
            ("/abs", b"abs", false), // refused patterns match nothing
            ("a/../b", b"b", false),
            ("", b"", false),
        ];
        for (p, path, want) in table {
            assert_eq!(pattern_matches(p, path), *want, "{p:?} {path:?}");
        }
        let below: &[(&str, &[u8], bool)] = &[
            ("out/**", b"", true),
            ("out/**", b"out", true),
            ("out/**", b"out/x/y", true),
            ("out/**", b"other", false),
            ("out/*.txt", b"out", true),
            ("out/*.txt", b"out/sub", false),
            ("out", b"", true),
            ("out", b"out", false),
            ("**/x", b"a/b/c", true),
            ("a/*/c", b"a/b", true),
            ("a/*/c", b"a/b/c", false),
        ];
        for (p, path, want) in below {
            assert_eq!(could_match_below(p, path), *want, "below {p:?} {path:?}");
        }
        // And Python agrees on every case.
        let mut input = Vec::new();
        for (p, path, _) in table.iter().chain(below) {
            let hex: String = path.iter().map(|b| format!("{b:02x}")).collect();
            input.extend_from_slice(format!("{p}\t{hex}\n").as_bytes());
        }
        let driver = "\nimport sys\nout = []\n\
            for line in sys.stdin.read().splitlines():\n\
            \x20   p, h = line.split('\\t')\n\
            \x20   b = bytes.fromhex(h)\n\
            \x20   out.append('%d%d' % (_vivarium_outputs_matches(p, b), _vivarium_outputs_below(p, b)))\n\
            print(' '.join(out))\n";
        let mut child = Command::new(PYTHON)
            .args([
                "-I",
                "-S",
                "-c",
                &format!("import os\n{OUTPUTS_PY}{driver}"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&input).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let got = String::from_utf8(out.stdout).unwrap();
        let got: Vec<&str> = got.split_whitespace().collect();
        for (i, (p, path, _)) in table.iter().chain(below).enumerate() {
            // Python is given only valid patterns (the daemon checks them).
            if check_pattern(p).is_err() {
                continue;
            }
            let want = format!(
                "{}{}",
                pattern_matches(p, path) as u8,
                could_match_below(p, path) as u8
            );
            assert_eq!(got[i], want, "python on {p:?} {path:?}");
        }
    }

    #[test]
    fn patterns_are_checked() {
        assert!(check_pattern("out/**").is_ok());
        for bad in [
            "",
            "/etc/shadow",
            "a/../b",
            "./a",
            "a//b",
            "a/",
            "a\nb",
            "a\0b",
        ] {
            assert!(check_pattern(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            check_patterns(&vec!["a".to_string(); MAX_PATTERNS + 1]),
            Err(PatternError::TooMany)
        );
        assert_eq!(
            check_patterns(&vec!["a".repeat(1000); 5]),
            Err(PatternError::TooLong)
        );
        let dir = tempfile::tempdir().unwrap();
        let e = collect(dir.path(), &pats(&["../x"]), &CAPS, &mut Vec::new()).unwrap_err();
        assert!(matches!(e, CollectError::Pattern(_)), "{e}");
    }

    /// The python constants are the Rust ones.
    #[test]
    fn python_limits_are_the_same() {
        let line = format!(
            "_vivarium_outputs_limits = ({MAX_DEPTH}, {MAX_VISITS}, {MAX_SKIPPED}, {MAX_PATH})\n"
        );
        assert!(OUTPUTS_PY.contains(&line), "outputs.py lacks {line:?}");
    }

    #[test]
    fn a_tree_is_collected_the_same_by_both_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let w = dir.path();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, b"host secret").unwrap();
        std::fs::create_dir_all(w.join("out/nested/deeper")).unwrap();
        std::fs::create_dir_all(w.join("other")).unwrap();
        std::fs::write(w.join("out/a.txt"), b"hello").unwrap();
        std::fs::write(w.join("out/.hidden"), b"dot").unwrap();
        std::fs::write(w.join("out/nested/deeper/x.bin"), [0u8, 1, 2]).unwrap();
        std::fs::write(w.join("out/a-b"), b"").unwrap();
        std::fs::write(w.join("other/not-asked"), b"no").unwrap();
        std::fs::write(w.join("top.txt"), b"no").unwrap();
        std::fs::write(
            w.join("out/exact"),
            vec![b'e'; CAPS.max_file_bytes as usize],
        )
        .unwrap();
        std::fs::write(
            w.join("out/over"),
            vec![b'o'; CAPS.max_file_bytes as usize + 1],
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/shadow", w.join("out/shadow")).unwrap();
        std::os::unix::fs::symlink(&secret, w.join("out/secret")).unwrap();
        std::os::unix::fs::symlink(outside.path(), w.join("out/dirlink")).unwrap();
        let fifo = FifoWatch::new(&w.join("out/fifo"));
        let _sock = std::os::unix::net::UnixListener::bind(w.join("out/sock")).unwrap();
        let invalid = std::ffi::OsStr::from_bytes(b"out/\xff\xfename");
        std::fs::write(w.join(invalid), b"raw name").unwrap();

        let (recs, omitted, flags) = both(w, &[], &CAPS, LIMITS);
        fifo.assert_never_opened();
        assert_eq!((omitted, flags), (0, 0));
        let got = summary(&recs);
        let want: Vec<(u8, String)> = [
            (tag::FILE, ".hidden"),
            (tag::FILE, "a-b"),
            (tag::FILE, "a.txt"),
            (tag::SYMLINK, "dirlink"),
            (tag::FILE, "exact"),
            (tag::FIFO, "fifo"),
            (tag::FILE, "nested/deeper/x.bin"),
            (tag::TOO_LARGE, "over"),
            (tag::SYMLINK, "secret"),
            (tag::SYMLINK, "shadow"),
            (tag::SOCKET, "sock"),
            (tag::FILE, "\u{fffd}\u{fffd}name"),
        ]
        .iter()
        .map(|(t, p)| (*t, format!("out/{p}")))
        .collect();
        assert_eq!(got, want);
        let rec = |p: &str| recs.iter().find(|r| r.path == p.as_bytes()).unwrap();
        assert_eq!(rec("out/a.txt").data, b"hello");
        assert_eq!(rec("out/exact").size, CAPS.max_file_bytes);
        assert_eq!(rec("out/exact").data.len() as u64, CAPS.max_file_bytes);
        assert_eq!(rec("out/over").size, CAPS.max_file_bytes + 1);
        assert_eq!(rec("out/shadow").size, "/etc/shadow".len() as u64);
        assert_eq!(recs.last().unwrap().path, b"out/\xff\xfename");
        assert_eq!(recs.last().unwrap().data, b"raw name");
        // Nothing of the host: no record holds the secret's bytes.
        let all = rust(w, &[], &CAPS, LIMITS);
        assert!(!all.windows(11).any(|x| x == b"host secret"));

        // Other patterns: only what they name, directories never as such.
        let p = pats(&["top.txt", "out/*.txt", "other", "out/nested"]);
        let (recs, _, _) = both(w, &p, &CAPS, LIMITS);
        assert_eq!(
            summary(&recs),
            vec![
                (tag::FILE, "out/a.txt".into()),
                (tag::FILE, "top.txt".into())
            ]
        );
        let (recs, _, _) = both(w, &pats(&["**/x.bin", "out/dirlink/**"]), &CAPS, LIMITS);
        // (`out/dirlink/**` matches `out/dirlink` itself: the link is listed, not followed.)
        assert_eq!(
            summary(&recs),
            vec![
                (tag::SYMLINK, "out/dirlink".into()),
                (tag::FILE, "out/nested/deeper/x.bin".into())
            ]
        );
        // No /work/out at all: an empty bundle.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(both(empty.path(), &[], &CAPS, LIMITS), (vec![], 0, 0));
    }

    #[test]
    fn the_count_and_total_caps_hold_and_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::create_dir(w.join("out")).unwrap();
        for i in 0..1000 {
            std::fs::write(w.join(format!("out/f{i:04}")), b"x").unwrap();
        }
        let (recs, omitted, flags) = both(w, &[], &CAPS, LIMITS);
        assert_eq!(recs.len(), 100);
        assert!(recs.iter().all(|r| r.tag == tag::FILE));
        assert_eq!(recs[99].path, b"out/f0099");
        assert_eq!((omitted, flags), (900, 0));

        // The total: a file that would cross it is listed, a later smaller one still fits.
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::create_dir(w.join("out")).unwrap();
        std::fs::write(w.join("out/1"), [1u8; 600]).unwrap();
        std::fs::write(w.join("out/2"), [2u8; 600]).unwrap();
        std::fs::write(w.join("out/3"), [3u8; 400]).unwrap();
        std::fs::write(w.join("out/4"), [4u8; 1]).unwrap();
        let caps = OutputCaps {
            max_total_bytes: 1000,
            ..CAPS
        };
        let (recs, _, _) = both(w, &[], &caps, LIMITS);
        let got: Vec<(u8, u64)> = recs.iter().map(|r| (r.tag, r.size)).collect();
        assert_eq!(
            got,
            [
                (tag::FILE, 600),
                (tag::OVER_TOTAL, 600),
                (tag::FILE, 400),
                (tag::OVER_TOTAL, 1)
            ]
        );
        // Zero files allowed: everything is omitted, nothing read.
        let caps = OutputCaps {
            max_files: 0,
            ..CAPS
        };
        assert_eq!(both(w, &[], &caps, LIMITS), (vec![], 4, 0));
    }

    #[test]
    fn the_walk_limits_hold_and_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        let mut deep = w.join("out");
        for i in 0..6 {
            std::fs::create_dir_all(&deep).unwrap();
            std::fs::write(deep.join(format!("f{i}")), b"x").unwrap();
            deep.push("d");
        }
        let small = Limits { depth: 4, ..LIMITS };
        let (recs, _, flags) = both(w, &[], &CAPS, small);
        assert_eq!(
            summary(&recs),
            vec![
                (tag::FILE, "out/d/d/f2".into()),
                (tag::FILE, "out/d/f1".into()),
                (tag::FILE, "out/f0".into()),
            ]
        );
        assert_eq!(flags, FLAG_DEPTH_LIMIT);
        // A path too long is not listed.
        let (recs, _, flags) = both(w, &[], &CAPS, Limits { path: 9, ..LIMITS });
        assert_eq!(
            summary(&recs),
            vec![(tag::FILE, "out/d/f1".into()), (tag::FILE, "out/f0".into())]
        );
        assert_eq!(flags, FLAG_DEPTH_LIMIT);
        // Visits: the walk stops, and what the directory being read held is not listed.
        let (recs, _, flags) = both(
            w,
            &[],
            &CAPS,
            Limits {
                visits: 5,
                ..LIMITS
            },
        );
        assert_eq!(flags, FLAG_WALK_LIMIT);
        assert!(recs.is_empty(), "{recs:?}");
        let (recs, _, flags) = both(
            w,
            &[],
            &CAPS,
            Limits {
                visits: 1000,
                ..LIMITS
            },
        );
        assert_eq!((recs.len(), flags), (6, 0));
        // Skipped records past their bound are counted as omitted.
        for i in 0..5 {
            std::os::unix::fs::symlink("/", w.join(format!("out/l{i}"))).unwrap();
        }
        let (recs, omitted, _) = both(
            w,
            &[],
            &CAPS,
            Limits {
                skipped: 2,
                ..LIMITS
            },
        );
        assert_eq!(recs.iter().filter(|r| r.tag == tag::SYMLINK).count(), 2);
        assert_eq!(omitted, 3);
    }

    #[test]
    fn root_devices_are_listed_not_opened_and_the_job_s_permissions_apply() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("VIVARIUM_REQUIRE_ROOT").is_none(),
                "needs root (VIVARIUM_REQUIRE_ROOT is set)"
            );
            eprintln!("skipped: needs root");
            return;
        }
        use nix::sys::stat::{makedev, mknod};
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::create_dir(w.join("out")).unwrap();
        let rw = Mode::from_bits_truncate(0o666);
        mknod(&w.join("out/null"), SFlag::S_IFCHR, rw, makedev(1, 3)).unwrap();
        mknod(&w.join("out/loop"), SFlag::S_IFBLK, rw, makedev(7, 0)).unwrap();
        let pipe = FifoWatch::new(&w.join("out/pipe"));
        std::fs::write(w.join("out/locked"), b"secret").unwrap();
        std::fs::set_permissions(
            w.join("out/locked"),
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(w.join("out/open"), b"ok").unwrap();
        std::fs::set_permissions(w, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let (recs, _, _) = both(w, &[], &CAPS, LIMITS);
        pipe.assert_never_opened();
        let got: Vec<(u8, String, Option<u32>)> = recs
            .iter()
            .map(|r| (r.tag, String::from_utf8_lossy(&r.path).into(), r.errno))
            .collect();
        assert_eq!(
            got,
            vec![
                (tag::FILE, "out/locked".into(), None),
                (tag::BLOCK_DEVICE, "out/loop".into(), None),
                (tag::CHAR_DEVICE, "out/null".into(), None),
                (tag::FILE, "out/open".into(), None),
                (tag::FIFO, "out/pipe".into(), None),
            ]
        );
        // As another user (the job's, as a caller would set its filesystem ids, here a
        // whole process): the file it may not read is unreadable, the collection goes on.
        let me = std::env::current_exe().unwrap();
        let out = Command::new(me)
            .args([
                "--exact",
                "outputs::tests::as_nobody",
                "--nocapture",
                "--include-ignored",
            ])
            .env("VIVARIUM_OUTPUTS_AS_NOBODY", w)
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Run by the root test in a child process: drop to 65534 and collect.
    #[test]
    #[ignore = "run by root_devices_are_listed_not_opened_and_the_job_s_permissions_apply"]
    fn as_nobody() {
        let Some(w) = std::env::var_os("VIVARIUM_OUTPUTS_AS_NOBODY") else {
            return;
        };
        let w = Path::new(&w);
        nix::unistd::setgroups(&[]).unwrap();
        nix::unistd::setgid(nix::unistd::Gid::from_raw(65534)).unwrap();
        nix::unistd::setuid(nix::unistd::Uid::from_raw(65534)).unwrap();
        let mut b = Vec::new();
        collect(w, &[], &CAPS, &mut b).unwrap();
        let (recs, _, _) = read_bundle(&b);
        let locked = recs.iter().find(|r| r.path == b"out/locked").unwrap();
        assert_eq!(
            (locked.tag, locked.size, locked.errno),
            (tag::UNREADABLE, 6, Some(libc::EACCES as u32))
        );
        let open = recs.iter().find(|r| r.path == b"out/open").unwrap();
        assert_eq!(open.data, b"ok");
    }
}
