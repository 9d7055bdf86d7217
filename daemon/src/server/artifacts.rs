//! Output files ("artifacts") as the server receives them: the bundle a sandbox's
//! collector wrote (`vivarium_sandbox::outputs`, whose doc defines the format, the
//! patterns and the walk), parsed as **hostile** input. In a session the bundle comes
//! from the job's own interpreter (`outputs.py` runs as the job), so nothing in it is
//! trusted: every length is checked against the caps and the bytes left before anything
//! is taken or allocated, every path against the normalized-relative rules and against
//! the patterns the job asked for (so a lying collector cannot return what was not
//! asked for), the records must come in the walk's order without a duplicate, and the
//! bundle must end with exactly one `END`.
//!
//! What the server adds: each file's SHA-256 (hex) and a media type sniffed from its
//! first bytes, never from its name ([`media_type`]). Paths are decoded as UTF-8
//! lossily, with a flag saying so (a name on disk is any bytes but `/` and NUL).
//!
//! Cost: [`parse`] allocates at most the bundle's own size (plus the digests), since
//! every length is checked against the bytes left; the pattern re-check costs up to
//! (pattern bytes x path bytes) per record in the worst case, patterns being bounded by
//! `MAX_PATTERNS_BYTES` and records by `max_files + MAX_SKIPPED` (the worst patterns
//! built against 4 KiB paths, 15 of `**/*aaa...ab`, took ~0.4 ms per record in a
//! release build: ~8 s for 20 000 records): the caller should run it off the async
//! worker threads (`spawn_blocking`).

use sha2::{Digest, Sha256};
use vivarium_sandbox::outputs::{
    check_patterns, could_match_below, effective_patterns, pattern_matches, tag, OutputCaps,
    PatternError, FLAG_DEPTH_LIMIT, FLAG_WALK_LIMIT, MAGIC, MAX_DEPTH, MAX_PATH, MAX_SKIPPED,
    MAX_VISITS,
};

/// Longest component of a path, in bytes (`NAME_MAX`).
const MAX_NAME: usize = 255;

/// A file returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Relative to `/work`; lossily decoded if [`Self::path_lossy`].
    pub path: String,
    pub path_lossy: bool,
    pub size: u64,
    /// Lowercase hex.
    pub sha256: String,
    /// From the content's magic bytes ([`media_type`]).
    pub media_type: &'static str,
    pub data: Vec<u8>,
}

/// Why a matching entry was not returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipKind {
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
    TooLarge,
    OverTotal,
    Unreadable,
    Changed,
}

impl SkipKind {
    fn from_tag(t: u8) -> Option<Self> {
        Some(match t {
            tag::SYMLINK => SkipKind::Symlink,
            tag::FIFO => SkipKind::Fifo,
            tag::SOCKET => SkipKind::Socket,
            tag::CHAR_DEVICE => SkipKind::CharDevice,
            tag::BLOCK_DEVICE => SkipKind::BlockDevice,
            tag::TOO_LARGE => SkipKind::TooLarge,
            tag::OVER_TOTAL => SkipKind::OverTotal,
            tag::UNREADABLE => SkipKind::Unreadable,
            tag::CHANGED => SkipKind::Changed,
            _ => return None,
        })
    }
}

/// A matching entry not returned, with its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub path: String,
    pub path_lossy: bool,
    pub kind: SkipKind,
    /// Its `st_size` (a symlink: its target's length), or the bytes read of a file that
    /// grew past the caps while read.
    pub size: u64,
    /// [`SkipKind::Unreadable`] only.
    pub errno: Option<u32>,
}

/// A parsed bundle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    pub artifacts: Vec<Artifact>,
    pub skipped: Vec<Skipped>,
    /// Matching entries not listed: files past `max_files`, others past `MAX_SKIPPED`.
    pub omitted: u64,
    /// The walk stopped at its entry limit: there may be more.
    pub walk_limit: bool,
    /// A directory too deep or a path too long was not walked into or listed.
    pub depth_limit: bool,
}

impl Collected {
    pub fn total_bytes(&self) -> u64 {
        self.artifacts.iter().map(|a| a.size).sum()
    }
}

/// Why a bundle is refused (as a whole: a lying collector gets nothing through).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactsError {
    #[error(transparent)]
    Patterns(#[from] PatternError),
    #[error("not an output bundle (bad magic)")]
    BadMagic,
    #[error("the bundle is truncated at byte {0}")]
    Truncated(usize),
    #[error("the bundle has no END record")]
    MissingEnd,
    #[error("{0} bytes after the END record")]
    TrailingBytes(usize),
    #[error("unknown record tag {tag:#04x} at byte {at}")]
    UnknownTag { tag: u8, at: usize },
    #[error("a path of {0} bytes (at most {MAX_PATH})")]
    PathTooLong(u64),
    #[error("path {path:?}: {reason}")]
    BadPath { path: String, reason: &'static str },
    #[error("path {0:?} was not asked for")]
    NotRequested(String),
    #[error("path {0:?} is out of order or repeated")]
    OutOfOrder(String),
    #[error("more than {0} files")]
    TooManyFiles(u32),
    #[error("more than {MAX_SKIPPED} skipped entries")]
    TooManySkipped,
    #[error("file {path:?} of {size} bytes is over the cap of {cap}")]
    FileTooLarge { path: String, size: u64, cap: u64 },
    #[error("the files are over the total cap of {0} bytes")]
    OverTotal(u64),
    #[error("unknown END flags {0:#x}")]
    UnknownFlags(u32),
    #[error("{0} omitted entries (more than the walk can visit)")]
    Omitted(u64),
}

/// The longest bundle a collector can honestly write within `caps`: what the caller
/// should stop reading at (a longer one is refused by [`parse`] anyway).
pub fn max_bundle_len(caps: &OutputCaps) -> u64 {
    let record = 1 + 4 + MAX_PATH as u64 + 8 + 4;
    let records = u64::from(caps.max_files) + u64::from(MAX_SKIPPED);
    (MAGIC.len() as u64 + 13)
        .saturating_add(records.saturating_mul(record))
        .saturating_add(caps.max_total_bytes)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// `n` bytes, checked against what is left before anything is taken.
    fn take(&mut self, n: u64) -> Result<&'a [u8], ArtifactsError> {
        let left = self.b.len() - self.at;
        if n > left as u64 {
            return Err(ArtifactsError::Truncated(self.b.len()));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, ArtifactsError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64, ArtifactsError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

/// Parse a bundle a collector wrote for `patterns` (none: the default) within `caps`.
pub fn parse(
    bundle: &[u8],
    patterns: &[String],
    caps: &OutputCaps,
) -> Result<Collected, ArtifactsError> {
    check_patterns(patterns)?;
    let patterns = effective_patterns(patterns);
    if !bundle.starts_with(MAGIC) {
        return Err(ArtifactsError::BadMagic);
    }
    let mut r = Reader {
        b: bundle,
        at: MAGIC.len(),
    };
    let mut got = Collected::default();
    let mut total: u64 = 0;
    let mut prev: Option<&[u8]> = None;
    loop {
        let at = r.at;
        if at == bundle.len() {
            return Err(ArtifactsError::MissingEnd);
        }
        let t = r.take(1)?[0];
        if t == tag::END {
            got.omitted = r.u64()?;
            let flags = r.u32()?;
            if flags & !(FLAG_WALK_LIMIT | FLAG_DEPTH_LIMIT) != 0 {
                return Err(ArtifactsError::UnknownFlags(flags));
            }
            if got.omitted > MAX_VISITS {
                return Err(ArtifactsError::Omitted(got.omitted));
            }
            got.walk_limit = flags & FLAG_WALK_LIMIT != 0;
            got.depth_limit = flags & FLAG_DEPTH_LIMIT != 0;
            if r.at != bundle.len() {
                return Err(ArtifactsError::TrailingBytes(bundle.len() - r.at));
            }
            return Ok(got);
        }
        let kind = match t {
            tag::FILE => None,
            t => Some(SkipKind::from_tag(t).ok_or(ArtifactsError::UnknownTag { tag: t, at })?),
        };
        let len = u64::from(r.u32()?);
        if len > MAX_PATH as u64 {
            return Err(ArtifactsError::PathTooLong(len));
        }
        let raw = r.take(len)?;
        let (path, path_lossy) = decode(raw);
        check_path(raw).map_err(|reason| ArtifactsError::BadPath {
            path: path.clone(),
            reason,
        })?;
        if let Some(p) = prev {
            if !in_order(p, raw) {
                return Err(ArtifactsError::OutOfOrder(path));
            }
        }
        prev = Some(raw);
        let size = r.u64()?;
        match kind {
            None => {
                if !patterns.iter().any(|p| pattern_matches(p, raw)) {
                    return Err(ArtifactsError::NotRequested(path));
                }
                if got.artifacts.len() >= caps.max_files as usize {
                    return Err(ArtifactsError::TooManyFiles(caps.max_files));
                }
                if size > caps.max_file_bytes {
                    return Err(ArtifactsError::FileTooLarge {
                        path,
                        size,
                        cap: caps.max_file_bytes,
                    });
                }
                total = total.saturating_add(size);
                if total > caps.max_total_bytes {
                    return Err(ArtifactsError::OverTotal(caps.max_total_bytes));
                }
                // Checked against the caps above and against what is left in `take`.
                let data = r.take(size)?.to_vec();
                got.artifacts.push(Artifact {
                    path,
                    path_lossy,
                    size,
                    sha256: sha256_hex(&data),
                    media_type: media_type(&data),
                    data,
                });
            }
            Some(kind) => {
                // A directory on the way may be listed (unreadable) too.
                if !patterns
                    .iter()
                    .any(|p| pattern_matches(p, raw) || could_match_below(p, raw))
                {
                    return Err(ArtifactsError::NotRequested(path));
                }
                if got.skipped.len() >= MAX_SKIPPED as usize {
                    return Err(ArtifactsError::TooManySkipped);
                }
                let errno = if kind == SkipKind::Unreadable {
                    Some(r.u32()?)
                } else {
                    None
                };
                got.skipped.push(Skipped {
                    path,
                    path_lossy,
                    kind,
                    size,
                    errno,
                });
            }
        }
    }
}

/// Relative, normalized, no NUL, within the walk's bounds. Control characters and
/// invalid UTF-8 are names a job may give its files: they pass (decoded lossily).
fn check_path(raw: &[u8]) -> Result<(), &'static str> {
    if raw.is_empty() {
        return Err("empty");
    }
    if raw[0] == b'/' {
        return Err("absolute");
    }
    if raw.contains(&0) {
        return Err("holds a NUL byte");
    }
    let mut components = 0;
    for name in raw.split(|&b| b == b'/') {
        components += 1;
        match name {
            b"" => return Err("has an empty component"),
            b"." | b".." => return Err("has a `.` or `..` component"),
            n if n.len() > MAX_NAME => return Err("has a component over 255 bytes"),
            _ => {}
        }
    }
    if components > MAX_DEPTH {
        return Err("deeper than the walk goes");
    }
    Ok(())
}

/// The walk's order: strictly increasing component by component, and no record below
/// another (a listed entry is never a directory that was walked into).
fn in_order(prev: &[u8], next: &[u8]) -> bool {
    fn split(p: &[u8]) -> Vec<&[u8]> {
        p.split(|&b| b == b'/').collect()
    }
    let (a, b) = (split(prev), split(next));
    a < b && !b.starts_with(&a)
}

fn decode(raw: &[u8]) -> (String, bool) {
    match std::str::from_utf8(raw) {
        Ok(s) => (s.to_string(), false),
        Err(_) => (String::from_utf8_lossy(raw).into_owned(), true),
    }
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The media type of `data`, from its first bytes alone: PNG, JPEG, GIF, WebP, PDF,
/// ZIP, gzip by their magic; SVG for text (as below) that starts, after an optional
/// UTF-8 BOM and ASCII whitespace, with `<svg` or with `<?xml` and has `<svg` in its
/// first KiB (`<svg` followed by whitespace, `>` or `/`); any other valid UTF-8 without
/// a NUL byte (JSON, CSV, ... and the empty file) `text/plain; charset=utf-8`; else
/// `application/octet-stream`.
pub fn media_type(data: &[u8]) -> &'static str {
    const MAGICS: &[(&[u8], &str)] = &[
        (b"\x89PNG\r\n\x1a\n", "image/png"),
        (b"\xff\xd8\xff", "image/jpeg"),
        (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"),
        (b"%PDF-", "application/pdf"),
        (b"PK\x03\x04", "application/zip"),
        (b"PK\x05\x06", "application/zip"),
        (b"\x1f\x8b", "application/gzip"),
    ];
    for (magic, media) in MAGICS {
        if data.starts_with(magic) {
            return media;
        }
    }
    if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        return "image/webp";
    }
    if data.contains(&0) || std::str::from_utf8(data).is_err() {
        return "application/octet-stream";
    }
    let text = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let text = &text[start..];
    let svg_at = |i: usize| {
        text[i..].starts_with(b"<svg")
            && text
                .get(i + 4)
                .is_some_and(|&c| c.is_ascii_whitespace() || c == b'>' || c == b'/')
    };
    if svg_at(0) {
        return "image/svg+xml";
    }
    if text.starts_with(b"<?xml") {
        let head = &text[..text.len().min(1024)];
        if (0..head.len()).any(|i| head[i] == b'<' && svg_at(i)) {
            return "image/svg+xml";
        }
    }
    "text/plain; charset=utf-8"
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_sandbox::outputs::collect;

    const CAPS: OutputCaps = OutputCaps {
        max_files: 10,
        max_file_bytes: 100,
        max_total_bytes: 1000,
    };

    /// A bundle written by hand, honest or not.
    struct Bundle(Vec<u8>);

    impl Bundle {
        fn new() -> Self {
            Bundle(MAGIC.to_vec())
        }
        fn rec(mut self, t: u8, path: &[u8], size: u64, body: &[u8]) -> Self {
            self.0.push(t);
            self.0.extend_from_slice(&(path.len() as u32).to_le_bytes());
            self.0.extend_from_slice(path);
            self.0.extend_from_slice(&size.to_le_bytes());
            self.0.extend_from_slice(body);
            self
        }
        fn file(self, path: &str, data: &[u8]) -> Self {
            self.rec(tag::FILE, path.as_bytes(), data.len() as u64, data)
        }
        fn end(mut self, omitted: u64, flags: u32) -> Vec<u8> {
            self.0.push(tag::END);
            self.0.extend_from_slice(&omitted.to_le_bytes());
            self.0.extend_from_slice(&flags.to_le_bytes());
            self.0
        }
    }

    fn parse_default(b: &[u8]) -> Result<Collected, ArtifactsError> {
        parse(b, &[], &CAPS)
    }

    #[test]
    fn round_trip_with_the_sandbox_collector() {
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path();
        std::fs::create_dir_all(w.join("out/sub")).unwrap();
        std::fs::write(w.join("out/a.png"), b"\x89PNG\r\n\x1a\nrest").unwrap();
        std::fs::write(w.join("out/sub/b.json"), b"{\"k\": 1}").unwrap();
        std::fs::write(w.join("out/exact"), [0u8; 100]).unwrap();
        std::fs::write(w.join("out/over"), [7u8; 101]).unwrap();
        std::fs::write(w.join("elsewhere"), b"not asked").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", w.join("out/shadow")).unwrap();
        nix::unistd::mkfifo(
            &w.join("out/fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let mut b = Vec::new();
        collect(w, &[], &CAPS, &mut b).unwrap();
        assert!(b.len() as u64 <= max_bundle_len(&CAPS));
        let got = parse_default(&b).unwrap();
        let files: Vec<(&str, u64, &str)> = got
            .artifacts
            .iter()
            .map(|a| (a.path.as_str(), a.size, a.media_type))
            .collect();
        assert_eq!(
            files,
            [
                ("out/a.png", 12, "image/png"),
                ("out/exact", 100, "application/octet-stream"),
                ("out/sub/b.json", 8, "text/plain; charset=utf-8"),
            ]
        );
        assert_eq!(
            got.artifacts[2].sha256,
            sha256_hex(b"{\"k\": 1}"),
            "the digest of the bytes"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let skipped: Vec<(&str, SkipKind, u64)> = got
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), s.kind, s.size))
            .collect();
        assert_eq!(
            skipped,
            [
                ("out/fifo", SkipKind::Fifo, 0),
                ("out/over", SkipKind::TooLarge, 101),
                ("out/shadow", SkipKind::Symlink, 11),
            ]
        );
        assert_eq!(
            (got.omitted, got.walk_limit, got.depth_limit),
            (0, false, false)
        );

        // With the job's patterns: the daemon checks against the same ones.
        let p = vec!["elsewhere".to_string()];
        let mut b = Vec::new();
        collect(w, &p, &CAPS, &mut b).unwrap();
        let got = parse(&b, &p, &CAPS).unwrap();
        assert_eq!(got.artifacts[0].path, "elsewhere");
        // ... and the same bundle read for other patterns is a lie.
        assert_eq!(
            parse_default(&b),
            Err(ArtifactsError::NotRequested("elsewhere".into()))
        );
    }

    #[test]
    fn an_honest_hand_made_bundle_parses() {
        let b = Bundle::new()
            .file("out/a", b"x")
            .rec(tag::UNREADABLE, b"out/b", 3, &13u32.to_le_bytes())
            .rec(tag::CHANGED, b"out/c", 4, b"")
            .rec(tag::FILE, b"out/d\xff", 0, b"")
            .end(5, FLAG_WALK_LIMIT | FLAG_DEPTH_LIMIT);
        let got = parse_default(&b).unwrap();
        assert_eq!(got.artifacts.len(), 2);
        assert_eq!(got.skipped[0].errno, Some(13));
        assert_eq!(got.skipped[1].kind, SkipKind::Changed);
        assert!(!got.artifacts[0].path_lossy);
        assert_eq!(got.artifacts[1].path, "out/d\u{fffd}");
        assert!(got.artifacts[1].path_lossy);
        assert_eq!(
            (got.omitted, got.walk_limit, got.depth_limit),
            (5, true, true)
        );
        // An unreadable directory on the way to the pattern may be listed.
        let b = Bundle::new()
            .rec(tag::UNREADABLE, b"out", 0, &13u32.to_le_bytes())
            .end(0, 0);
        let p = vec!["out/*.txt".to_string()];
        assert_eq!(parse(&b, &p, &CAPS).unwrap().skipped[0].path, "out");
        // A file must match, though.
        let b = Bundle::new().file("out", b"").end(0, 0);
        assert!(matches!(
            parse(&b, &p, &CAPS),
            Err(ArtifactsError::NotRequested(_))
        ));
    }

    #[test]
    fn malformed_bundles_are_refused() {
        use ArtifactsError as E;
        let good = Bundle::new().file("out/a", b"xyz").end(0, 0);
        assert!(parse_default(&good).is_ok());
        // Every strict prefix is refused, none panics.
        for n in 0..good.len() {
            let e = parse_default(&good[..n]).unwrap_err();
            assert!(
                matches!(e, E::BadMagic | E::Truncated(_) | E::MissingEnd),
                "{n}: {e}"
            );
        }
        assert_eq!(parse_default(&good[..8]), Err(E::MissingEnd));
        assert_eq!(
            parse_default(&good[..good.len() - 1]),
            Err(E::Truncated(good.len() - 1))
        );
        assert_eq!(parse_default(b"VIVOUT2\n\xff"), Err(E::BadMagic));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(parse_default(&trailing), Err(E::TrailingBytes(1)));
        let two_ends = Bundle::new().end(0, 0);
        let mut two = two_ends.clone();
        two.extend_from_slice(&two_ends[8..]);
        assert_eq!(parse_default(&two), Err(E::TrailingBytes(13)));
        assert_eq!(
            parse_default(&Bundle::new().rec(0x42, b"out/a", 0, b"").end(0, 0)),
            Err(E::UnknownTag { tag: 0x42, at: 8 })
        );
        assert_eq!(
            parse_default(&Bundle::new().end(0, 4)),
            Err(E::UnknownFlags(4))
        );
        assert_eq!(
            parse_default(&Bundle::new().end(u64::MAX, 0)),
            Err(E::Omitted(u64::MAX))
        );
        // Lengths are never trusted: a huge path or file length with nothing behind it.
        let mut huge = MAGIC.to_vec();
        huge.push(tag::FILE);
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse_default(&huge), Err(E::PathTooLong(u32::MAX as u64)));
        let mut short = MAGIC.to_vec();
        short.push(tag::FILE);
        short.extend_from_slice(&100u32.to_le_bytes());
        short.extend_from_slice(b"out/");
        assert!(matches!(parse_default(&short), Err(E::Truncated(_))));
        let lying_size = Bundle::new().rec(tag::FILE, b"out/a", 50, b"12").end(0, 0);
        assert!(matches!(parse_default(&lying_size), Err(E::Truncated(_))));
        let unreadable_without_errno = Bundle::new()
            .rec(tag::UNREADABLE, b"out/a", 0, b"")
            .end(0, 0);
        assert!(matches!(
            parse_default(&unreadable_without_errno),
            Err(E::Truncated(_) | E::UnknownTag { .. })
        ));
        // Invalid patterns are the caller's error, before any byte is read.
        assert!(matches!(
            parse(&good, &["/etc".to_string()], &CAPS),
            Err(E::Patterns(_))
        ));
    }

    #[test]
    fn no_byte_changed_anywhere_makes_it_panic() {
        let good = Bundle::new()
            .file("out/a", b"xyz")
            .rec(tag::UNREADABLE, b"out/b", 3, &13u32.to_le_bytes())
            .rec(tag::SYMLINK, b"out/c", 11, b"")
            .file("out/d/e", b"\x89PNG\r\n\x1a\n")
            .end(2, 1);
        assert!(parse_default(&good).is_ok());
        for i in 0..good.len() {
            for v in [0u8, 1, 2, 0x2f, 0x7f, 0x80, 0xfe, 0xff] {
                let mut b = good.clone();
                b[i] = v;
                if let Ok(got) = parse_default(&b) {
                    assert!(got.total_bytes() <= CAPS.max_total_bytes);
                }
            }
        }
    }

    #[test]
    fn a_lying_bundle_is_refused() {
        use ArtifactsError as E;
        let refused = |b: Vec<u8>| parse_default(&b).unwrap_err();
        // Files that were not asked for, or outside /work.
        assert_eq!(
            refused(Bundle::new().file("etc/shadow", b"root:x").end(0, 0)),
            E::NotRequested("etc/shadow".into())
        );
        for bad in [
            &b"out/../etc/shadow"[..],
            b"/etc/shadow",
            b"out/./a",
            b"out//a",
            b"out/a/",
            b"",
            b"out/a\0b",
        ] {
            let e = refused(Bundle::new().rec(tag::FILE, bad, 0, b"").end(0, 0));
            assert!(matches!(e, E::BadPath { .. }), "{bad:?}: {e}");
        }
        let long_name = format!("out/{}", "n".repeat(256));
        assert!(matches!(
            refused(Bundle::new().file(&long_name, b"").end(0, 0)),
            E::BadPath { .. }
        ));
        let deep = format!("out{}", "/d".repeat(MAX_DEPTH));
        assert!(matches!(
            refused(Bundle::new().file(&deep, b"").end(0, 0)),
            E::BadPath { .. }
        ));
        // Over the caps.
        assert_eq!(
            refused(Bundle::new().file("out/a", &[0; 101]).end(0, 0)),
            E::FileTooLarge {
                path: "out/a".into(),
                size: 101,
                cap: 100
            }
        );
        let mut b = Bundle::new();
        for i in 0..11 {
            b = b.file(&format!("out/{i:02}"), b"");
        }
        assert_eq!(refused(b.end(0, 0)), E::TooManyFiles(10));
        let mut b = Bundle::new();
        for i in 0..11 {
            b = b.file(&format!("out/{i:02}"), &[0; 100]);
        }
        let many = OutputCaps {
            max_files: 100,
            ..CAPS
        };
        assert_eq!(parse(&b.end(0, 0), &[], &many), Err(E::OverTotal(1000)));
        let mut b = Bundle::new();
        for i in 0..=MAX_SKIPPED {
            b = b.rec(tag::SYMLINK, format!("out/{i:05}").as_bytes(), 1, b"");
        }
        assert_eq!(refused(b.end(0, 0)), E::TooManySkipped);
        // Repeated, out of order, or below a listed entry.
        assert_eq!(
            refused(
                Bundle::new()
                    .file("out/a", b"1")
                    .file("out/a", b"2")
                    .end(0, 0)
            ),
            E::OutOfOrder("out/a".into())
        );
        assert_eq!(
            refused(
                Bundle::new()
                    .file("out/b", b"")
                    .file("out/a", b"")
                    .end(0, 0)
            ),
            E::OutOfOrder("out/a".into())
        );
        assert_eq!(
            refused(
                Bundle::new()
                    .file("out/a", b"")
                    .file("out/a/b", b"")
                    .end(0, 0)
            ),
            E::OutOfOrder("out/a/b".into())
        );
        // Component order, not byte order: `out/a/b` before `out/a-c` is the walk's.
        assert!(parse_default(
            &Bundle::new()
                .file("out/a/b", b"")
                .file("out/a-c", b"")
                .end(0, 0)
        )
        .is_ok());
    }

    #[test]
    fn media_types_come_from_the_bytes() {
        let table: &[(&[u8], &str)] = &[
            (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", "image/png"),
            (b"\xff\xd8\xff\xe0\0\x10JFIF", "image/jpeg"),
            (b"GIF89a\x01\0", "image/gif"),
            (b"GIF87a", "image/gif"),
            (b"RIFF\x24\0\0\0WEBPVP8 ", "image/webp"),
            (b"RIFF\x24\0\0\0WAVEfmt ", "application/octet-stream"),
            (b"%PDF-1.7\n", "application/pdf"),
            (b"PK\x03\x04\x14\0", "application/zip"),
            (b"PK\x05\x06", "application/zip"),
            (b"\x1f\x8b\x08\0", "application/gzip"),
            (
                b"<svg xmlns=\"http://www.w3.org/2000/svg\"/>",
                "image/svg+xml",
            ),
            (b"\xef\xbb\xbf  \n<svg>", "image/svg+xml"),
            (
                b"<?xml version=\"1.0\"?>\n<!-- c -->\n<svg width=\"1\">",
                "image/svg+xml",
            ),
            (
                b"<?xml version=\"1.0\"?><html/>",
                "text/plain; charset=utf-8",
            ),
            (b"<svgfoo>", "text/plain; charset=utf-8"),
            (b"<svg\0>", "application/octet-stream"),
            (b"{\"a\": [1, 2]}", "text/plain; charset=utf-8"),
            (b"a,b\n1,2\n", "text/plain; charset=utf-8"),
            ("héllo".as_bytes(), "text/plain; charset=utf-8"),
            (b"", "text/plain; charset=utf-8"),
            (b"text\0with nul", "application/octet-stream"),
            (b"\xff\xfe not utf-8", "application/octet-stream"),
            (b"\x7fELF\x02\x01\x01\0\0\0", "application/octet-stream"),
        ];
        for (data, want) in table {
            assert_eq!(media_type(data), *want, "{data:?}");
        }
        // `<svg` further than the first KiB after `<?xml` is not looked for.
        let mut late = b"<?xml version=\"1.0\"?>".to_vec();
        late.extend(std::iter::repeat_n(b' ', 1100));
        late.extend_from_slice(b"<svg>");
        assert_eq!(media_type(&late), "text/plain; charset=utf-8");
        // The name plays no part: a PNG called .txt is a PNG (the collector's test).
    }
}

/// Where the figure capture writes (`figures.py`): collected whatever the patterns are.
pub const FIGURES_PATTERN: &str = "out/figure-*.png";

/// What a job or cell asked to collect: the patterns its collector walks with, never
/// empty (the default is spelled out, and the figures' pattern is always among them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub patterns: Vec<String>,
}

/// A request's outputs, checked: `None` for [`Outputs::None`] (nothing is collected).
pub fn wanted(outputs: vivarium_proto::Outputs) -> Result<Option<Wanted>, PatternError> {
    use vivarium_proto::Outputs;
    let mut patterns = match outputs {
        Outputs::None => return Ok(None),
        Outputs::Default => vivarium_sandbox::outputs::DEFAULT_PATTERNS
            .iter()
            .map(|p| (*p).to_owned())
            .collect(),
        Outputs::Patterns(p) => {
            check_patterns(&p)?;
            // One place is the figures'.
            if p.len() >= vivarium_sandbox::outputs::MAX_PATTERNS {
                return Err(PatternError::TooMany);
            }
            p
        }
    };
    if !patterns.iter().any(|p| p == FIGURES_PATTERN) {
        patterns.push(FIGURES_PATTERN.to_owned());
    }
    check_patterns(&patterns)?;
    Ok(Some(Wanted { patterns }))
}

/// The collection request a sandbox's collector reads (init's, or the cell loop's): the
/// caps, then the patterns, NUL-separated. Integers little endian:
/// `max_files:u32 max_file_bytes:u64 max_total_bytes:u64 count:u32 (pattern NUL)*`.
pub fn request_bytes(wanted: &Wanted, caps: &OutputCaps) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + wanted.patterns.iter().map(|p| p.len() + 1).sum::<usize>());
    b.extend_from_slice(&caps.max_files.to_le_bytes());
    b.extend_from_slice(&caps.max_file_bytes.to_le_bytes());
    b.extend_from_slice(&caps.max_total_bytes.to_le_bytes());
    b.extend_from_slice(&(wanted.patterns.len() as u32).to_le_bytes());
    for p in &wanted.patterns {
        b.extend_from_slice(p.as_bytes());
        b.push(0);
    }
    b
}

/// Parse `bundle` off the async threads (see [`parse`]'s cost) into what the client is
/// sent: the collection's report, and the artifacts. A bundle of at most 16 KiB (a few
/// records: at worst ~4 of 4 KiB paths, ~2 ms) is parsed in place.
pub async fn parse_off_thread(
    bundle: Vec<u8>,
    wanted: Wanted,
    caps: OutputCaps,
) -> Result<Collected, ArtifactsError> {
    // A small bundle (no file, or a few small ones: most jobs') is parsed here; the
    // hop to a blocking thread would cost more than the parse.
    if bundle.len() <= 16 * 1024 {
        return parse(&bundle, &wanted.patterns, &caps);
    }
    tokio::task::spawn_blocking(move || parse(&bundle, &wanted.patterns, &caps))
        .await
        .unwrap_or(Err(ArtifactsError::MissingEnd))
}

fn skip_kind(k: SkipKind) -> vivarium_proto::SkipKind {
    use vivarium_proto::SkipKind as K;
    match k {
        SkipKind::Symlink => K::Symlink,
        SkipKind::Fifo => K::Fifo,
        SkipKind::Socket => K::Socket,
        SkipKind::CharDevice => K::CharDevice,
        SkipKind::BlockDevice => K::BlockDevice,
        SkipKind::TooLarge => K::TooLarge,
        SkipKind::OverTotal => K::OverTotal,
        SkipKind::Unreadable => K::Unreadable,
        SkipKind::Changed => K::Changed,
    }
}

/// Send what was collected (or why nothing was) to the client: each artifact as an
/// `Artifact` and its `ArtifactChunk`s, then the `Artifacts` report.
pub async fn send(
    sock: &tokio_seqpacket::UnixSeqpacket,
    collected: Result<Collected, vivarium_proto::ArtifactsStatus>,
    caps: &OutputCaps,
) {
    use vivarium_proto::{ArtifactHeader, ArtifactsReport, ArtifactsStatus, Event};
    let collected = match collected {
        Ok(c) => c,
        Err(status) => {
            let mut report = ArtifactsReport::empty(status);
            report.max_files = caps.max_files;
            report.max_file_bytes = caps.max_file_bytes;
            report.max_total_bytes = caps.max_total_bytes;
            super::conn::send(sock, &Event::Artifacts(Box::new(report))).await;
            return;
        }
    };
    let returned = collected.artifacts.len() as u32;
    let returned_bytes = collected.total_bytes();
    for a in collected.artifacts {
        let header = ArtifactHeader {
            path: a.path,
            path_lossy: a.path_lossy,
            size: a.size,
            sha256: a.sha256,
            media_type: a.media_type.to_owned(),
        };
        super::conn::send(sock, &Event::Artifact(Box::new(header))).await;
        for piece in a.data.chunks(vivarium_proto::MAX_PAYLOAD_CHUNK) {
            super::conn::send(sock, &Event::ArtifactChunk(piece.to_vec())).await;
        }
    }
    let report = ArtifactsReport {
        status: ArtifactsStatus::Collected,
        returned,
        returned_bytes,
        skipped: collected
            .skipped
            .into_iter()
            .map(|s| vivarium_proto::SkippedArtifact {
                path: s.path,
                path_lossy: s.path_lossy,
                kind: skip_kind(s.kind),
                size: s.size,
                errno: s.errno,
            })
            .collect(),
        omitted: collected.omitted,
        walk_limit: collected.walk_limit,
        depth_limit: collected.depth_limit,
        max_files: caps.max_files,
        max_file_bytes: caps.max_file_bytes,
        max_total_bytes: caps.max_total_bytes,
    };
    super::conn::send(sock, &Event::Artifacts(Box::new(report))).await;
}

#[cfg(test)]
mod wanted_tests {
    use super::*;
    use vivarium_proto::Outputs;

    #[test]
    fn the_figures_are_always_asked_for_and_none_is_nothing() {
        assert_eq!(wanted(Outputs::None).unwrap(), None);
        assert_eq!(
            wanted(Outputs::Default).unwrap().unwrap().patterns,
            vec!["out/**".to_owned(), FIGURES_PATTERN.to_owned()]
        );
        assert_eq!(
            wanted(Outputs::Patterns(vec!["a.csv".into()]))
                .unwrap()
                .unwrap()
                .patterns,
            vec!["a.csv".to_owned(), FIGURES_PATTERN.to_owned()]
        );
        assert_eq!(
            wanted(Outputs::Patterns(vec![])).unwrap().unwrap().patterns,
            vec![FIGURES_PATTERN.to_owned()]
        );
        for bad in ["/etc/shadow", "../x", "a\0b", "", "a//b"] {
            assert!(
                wanted(Outputs::Patterns(vec![bad.into()])).is_err(),
                "{bad:?}"
            );
        }
        let many: Vec<String> = (0..64).map(|i| format!("f{i}")).collect();
        assert!(wanted(Outputs::Patterns(many[..63].to_vec())).is_ok());
        assert!(wanted(Outputs::Patterns(many)).is_err());
    }

    #[test]
    fn the_request_spells_caps_then_patterns() {
        let w = Wanted {
            patterns: vec!["out/**".into(), "a".into()],
        };
        let caps = OutputCaps {
            max_files: 1,
            max_file_bytes: 2,
            max_total_bytes: 3,
        };
        let b = request_bytes(&w, &caps);
        assert_eq!(&b[..4], &1u32.to_le_bytes());
        assert_eq!(&b[4..12], &2u64.to_le_bytes());
        assert_eq!(&b[12..20], &3u64.to_le_bytes());
        assert_eq!(&b[20..24], &2u32.to_le_bytes());
        assert_eq!(&b[24..], b"out/**\0a\0");
    }
}
