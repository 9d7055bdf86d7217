//! Copying a directory tree that untrusted code wrote (a package install's virtual
//! environment, on its sandbox's tmpfs) onto the host, and measuring trees on the host.
//!
//! The source is hostile: symlinks anywhere, special files, sparse files, masses of
//! empty files, deep nesting, any bytes in names. So every step on both sides is an
//! `*at` call relative to a directory fd, with `O_NOFOLLOW`, on a single name that
//! is never `.` or `..`: nothing the tree holds can steer a read or a write outside
//! it. And every inode and byte is charged against [`TreeLimits`] before it is
//! created or read, so the copy costs no more than the limits, whatever the tree
//! claims to hold.

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::libc;
use nix::sys::stat::{fchmod, fstat, fstatat, futimens, mkdirat, FileStat, Mode};
use nix::sys::time::TimeSpec;
use nix::unistd::symlinkat;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Large enough that a big wheel's files take few syscalls, small enough to allocate
/// once per copy without a second thought.
const BUF_SIZE: usize = 128 * 1024;

/// How every directory is opened, on both sides: a symlink in its place fails
/// (`ELOOP`/`ENOTDIR`) instead of being followed.
const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// What a copied tree may cost. Measured as [`usage`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// Sum of the regular files' sizes and the symlinks' target lengths.
    pub max_bytes: u64,
    /// Directories, files and symlinks, the tree's root included.
    pub max_inodes: u64,
    /// How deep directories may nest: the root is at depth 0, its subdirectories at
    /// 1, and so on; files and symlinks may sit in a directory at `max_depth`.
    /// The copy holds two fds per level (source and destination), so this must stay
    /// well below half of `RLIMIT_NOFILE`.
    pub max_depth: usize,
}

/// The apparent size of a tree; see [`usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeUsage {
    pub bytes: u64,
    pub inodes: u64,
}

/// Why a copy stopped. Paths on the source side are relative to the tree's root
/// (`.` for the root itself); paths on the destination side are under `dest`.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("tree holds more than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("tree holds more than {limit} inodes")]
    TooManyInodes { limit: u64 },
    #[error("tree nests directories deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// `kind` is one of "fifo", "socket", "char device", "block device", "unknown".
    #[error("{path:?} is a {kind}, which a tree may not hold")]
    Unsupported { path: PathBuf, kind: &'static str },
    /// A file was not what it had been stat'd as when it was read: other type, other
    /// inode, other size. The source should be at rest; refuse rather than guess.
    #[error("{path:?} changed while being copied")]
    Changed { path: PathBuf },
    #[error("cannot copy {path:?}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(path: &Path, e: Errno) -> TreeError {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    TreeError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// A directory being copied: its entries not yet handled, and where they go.
struct Frame {
    src: OwnedFd,
    dest: OwnedFd,
    /// Popped from the end.
    names: Vec<OsString>,
    /// Relative to the tree's root.
    rel: PathBuf,
    depth: usize,
}

/// Copy the directory tree under `src` (an open directory fd; `O_PATH` will do) into
/// `dest` (an existing empty directory, whose own mode is left to the caller).
/// Regular files, directories and symlinks only; anything else is `Unsupported`.
/// Never follows a link (symlinks are recreated as symlinks with the same target
/// bytes, never resolved). Files keep their contents, their owner-execute bit decides
/// mode 0o755 vs 0o644 (directories 0o755), and their mtime (seconds + nanoseconds).
/// Stops at the first limit crossed; on error `dest` may hold a partial copy that the
/// caller removes.
pub fn copy_tree(src: OwnedFd, dest: &Path, limits: &TreeLimits) -> Result<TreeUsage, TreeError> {
    let dest_fd = nix::fcntl::open(dest, DIR_FLAGS, Mode::empty()).map_err(|e| io_err(dest, e))?;
    if limits.max_inodes == 0 {
        return Err(TreeError::TooManyInodes {
            limit: limits.max_inodes,
        });
    }
    let mut used = TreeUsage {
        bytes: 0,
        inodes: 1,
    };
    let mut stack = Vec::new();
    enter(
        &mut stack,
        &mut used,
        limits,
        src,
        dest_fd,
        PathBuf::new(),
        0,
    )?;
    let mut buf = vec![0u8; BUF_SIZE];
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.pop() else {
            // Done with this directory: its fds close here, keeping the number open
            // to the depth of the walk.
            stack.pop();
            continue;
        };
        let name = name.as_os_str();
        let rel = top.rel.join(name);
        let to = dest.join(&rel);
        let st =
            fstatat(&top.src, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|e| io_err(&rel, e))?;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let depth = top.depth + 1;
                if depth > limits.max_depth {
                    return Err(TreeError::TooDeep {
                        limit: limits.max_depth,
                    });
                }
                let sub = openat(&top.src, name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| io_err(&rel, e))?;
                // The umask may strip bits from mkdirat's mode; fchmod sets them exactly.
                mkdirat(&top.dest, name, Mode::S_IRWXU).map_err(|e| io_err(&to, e))?;
                let sub_dest = openat(&top.dest, name, DIR_FLAGS, Mode::empty())
                    .map_err(|e| io_err(&to, e))?;
                fchmod(&sub_dest, Mode::from_bits_truncate(0o755)).map_err(|e| io_err(&to, e))?;
                enter(&mut stack, &mut used, limits, sub, sub_dest, rel, depth)?;
            }
            libc::S_IFREG => {
                let size = charge(&mut used, &st, limits)?;
                copy_file(top, name, &st, size, &rel, &to, &mut buf)?;
            }
            libc::S_IFLNK => {
                let size = charge(&mut used, &st, limits)?;
                // Bounded by PATH_MAX whatever st_size said; checked against it so
                // the charge above was the truth.
                let target = readlinkat(&top.src, name).map_err(|e| io_err(&rel, e))?;
                if target.len() as u64 != size {
                    return Err(TreeError::Changed { path: rel });
                }
                symlinkat(target.as_os_str(), &top.dest, name).map_err(|e| io_err(&to, e))?;
            }
            other => {
                return Err(TreeError::Unsupported {
                    path: rel,
                    kind: special_kind(other),
                })
            }
        }
    }
    Ok(used)
}

fn special_kind(fmt: libc::mode_t) -> &'static str {
    match fmt {
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char device",
        libc::S_IFBLK => "block device",
        _ => "unknown",
    }
}

/// List the directory `src` and push it on the stack. Its entries are charged as
/// inodes here, before any of them is created: every entry becomes one inode or stops
/// the copy. That also bounds the names held in memory, all levels together, by
/// `max_inodes`.
fn enter(
    stack: &mut Vec<Frame>,
    used: &mut TreeUsage,
    limits: &TreeLimits,
    src: OwnedFd,
    dest: OwnedFd,
    rel: PathBuf,
    depth: usize,
) -> Result<(), TreeError> {
    let names = list(&src, limits.max_inodes - used.inodes).map_err(|e| io_err(&rel, e))?;
    used.inodes += names.len() as u64;
    if used.inodes > limits.max_inodes {
        return Err(TreeError::TooManyInodes {
            limit: limits.max_inodes,
        });
    }
    stack.push(Frame {
        src,
        dest,
        names,
        rel,
        depth,
    });
    Ok(())
}

/// The names in directory `dir` but `.` and `..`, sorted so that popping them gives
/// a stable order. Stops after `budget + 1` of them: a directory too big for the inode
/// limit is refused after reading no more of it than that.
fn list(dir: &OwnedFd, budget: u64) -> Result<Vec<OsString>, Errno> {
    // A second open file description of the same directory, so the stream (and its
    // buffer) lives only while listing, and `dir` may be an O_PATH fd.
    let mut stream = Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for entry in stream.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        names.push(OsStr::from_bytes(name).to_os_string());
        if names.len() as u64 > budget {
            break;
        }
    }
    names.sort_unstable_by(|a, b| b.cmp(a));
    Ok(names)
}

/// The bytes an entry costs: a file's size, a symlink's target length.
fn apparent_size(st: &FileStat) -> u64 {
    // Never negative; if it were, refuse it as huge rather than count it as nothing.
    u64::try_from(st.st_size).unwrap_or(u64::MAX)
}

/// Charge an entry's bytes before any of them is read; return them.
fn charge(used: &mut TreeUsage, st: &FileStat, limits: &TreeLimits) -> Result<u64, TreeError> {
    let size = apparent_size(st);
    match used.bytes.checked_add(size) {
        Some(total) if total <= limits.max_bytes => {
            used.bytes = total;
            Ok(size)
        }
        _ => Err(TreeError::TooLarge {
            limit: limits.max_bytes,
        }),
    }
}

/// Copy regular file `name` of `top.src`, stat'd as `st` (`size` bytes, already
/// charged), to a new file of `top.dest`.
fn copy_file(
    top: &Frame,
    name: &OsStr,
    st: &FileStat,
    size: u64,
    rel: &Path,
    to: &Path,
    buf: &mut [u8],
) -> Result<(), TreeError> {
    let changed = || TreeError::Changed {
        path: rel.to_path_buf(),
    };
    // O_NONBLOCK: were a FIFO there by now, opening it must not hang the daemon
    // (and the fstat below refuses it); it changes nothing for a regular file.
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = openat(&top.src, name, flags, Mode::empty()).map_err(|e| io_err(rel, e))?;
    let now = fstat(&fd).map_err(|e| io_err(rel, e))?;
    if now.st_mode & libc::S_IFMT != libc::S_IFREG
        || (now.st_dev, now.st_ino, now.st_size) != (st.st_dev, st.st_ino, st.st_size)
    {
        return Err(changed());
    }
    // O_EXCL: fails on anything already there, a symlink included (even dangling).
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let out =
        openat(&top.dest, name, flags, Mode::S_IRUSR | Mode::S_IWUSR).map_err(|e| io_err(to, e))?;
    let mut out = File::from(out);
    // One byte past the stat'd size, to notice growth without reading on and on.
    let mut input = File::from(fd).take(size.saturating_add(1));
    let mut copied = 0u64;
    loop {
        let n = match input.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(TreeError::Io {
                    path: rel.to_path_buf(),
                    source,
                })
            }
        };
        copied += n as u64;
        if copied > size {
            return Err(changed());
        }
        out.write_all(&buf[..n]).map_err(|source| TreeError::Io {
            path: to.to_path_buf(),
            source,
        })?;
    }
    if copied != size {
        return Err(changed());
    }
    let mode = if st.st_mode & libc::S_IXUSR != 0 {
        0o755
    } else {
        0o644
    };
    fchmod(&out, Mode::from_bits_truncate(mode)).map_err(|e| io_err(to, e))?;
    // Last, as every write moves the mtime.
    let mtime = TimeSpec::new(st.st_mtime, st.st_mtime_nsec);
    futimens(&out, &TimeSpec::UTIME_OMIT, &mtime).map_err(|e| io_err(to, e))?;
    Ok(())
}

/// Apparent size and inode count of a tree on the host (not following links), for the
/// cache's accounting and eviction: bytes = sum of st_size of regular files plus the
/// length of each symlink's target; inodes = every directory, file and symlink beneath
/// `dir` plus `dir` itself (and any other kind of file, which a copied tree has not).
/// Counts a sparse file by its apparent size, an empty file as one inode. Never
/// follows links, `dir` itself included.
pub fn usage(dir: &Path) -> std::io::Result<TreeUsage> {
    let root = nix::fcntl::open(dir, DIR_FLAGS, Mode::empty())?;
    let mut total = TreeUsage {
        bytes: 0,
        inodes: 1,
    };
    // fd-relative like the copy, so a tree deeper than PATH_MAX is measured too.
    let mut stack = vec![(list(&root, u64::MAX)?, root)];
    while let Some((names, fd)) = stack.last_mut() {
        let Some(name) = names.pop() else {
            stack.pop();
            continue;
        };
        let st = fstatat(&*fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)?;
        total.inodes += 1;
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                let sub = openat(&*fd, name.as_os_str(), DIR_FLAGS, Mode::empty())?;
                stack.push((list(&sub, u64::MAX)?, sub));
            }
            libc::S_IFREG | libc::S_IFLNK => {
                total.bytes = total.bytes.saturating_add(apparent_size(&st));
            }
            _ => {}
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::fs::{self, FileTimes, Permissions};
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
    use std::time::{Duration, Instant, SystemTime};

    const MIB: u64 = 1 << 20;

    fn limits(max_bytes: u64, max_inodes: u64, max_depth: usize) -> TreeLimits {
        TreeLimits {
            max_bytes,
            max_inodes,
            max_depth,
        }
    }

    fn roomy() -> TreeLimits {
        limits(1 << 30, 100_000, 64)
    }

    /// A temp dir with `src/` (the tree) and `dest/` (empty) in it.
    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let (src, dest) = (tmp.path().join("src"), tmp.path().join("dest"));
        fs::create_dir(&src).unwrap();
        fs::create_dir(&dest).unwrap();
        (tmp, src, dest)
    }

    fn open(dir: &Path) -> OwnedFd {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        nix::fcntl::open(dir, flags, Mode::empty()).unwrap()
    }

    fn copy(src: &Path, dest: &Path, limits: &TreeLimits) -> Result<TreeUsage, TreeError> {
        copy_tree(open(src), dest, limits)
    }

    fn write(path: &Path, data: &[u8], mode: u32, mtime: (u64, u32)) {
        fs::write(path, data).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::new(mtime.0, mtime.1);
        let f = File::options().write(true).open(path).unwrap();
        f.set_times(FileTimes::new().set_modified(t)).unwrap();
        // Last: a read-only mode would stop a non-root test from opening it above.
        fs::set_permissions(path, Permissions::from_mode(mode)).unwrap();
    }

    #[derive(Debug, PartialEq, Eq)]
    enum Node {
        Dir(u32),
        File {
            mode: u32,
            data: Vec<u8>,
            mtime: (i64, i64),
        },
        Link(OsString),
    }

    /// Everything under `root`, by relative path, not following links.
    fn manifest(root: &Path) -> BTreeMap<PathBuf, Node> {
        let mut out = BTreeMap::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            for entry in fs::read_dir(root.join(&rel)).unwrap() {
                let rel = rel.join(entry.unwrap().file_name());
                let path = root.join(&rel);
                let meta = fs::symlink_metadata(&path).unwrap();
                let node = if meta.is_dir() {
                    stack.push(rel.clone());
                    Node::Dir(meta.mode() & 0o7777)
                } else if meta.is_symlink() {
                    Node::Link(fs::read_link(&path).unwrap().into_os_string())
                } else {
                    Node::File {
                        mode: meta.mode() & 0o7777,
                        data: fs::read(&path).unwrap(),
                        mtime: (meta.mtime(), meta.mtime_nsec()),
                    }
                };
                out.insert(rel, node);
            }
        }
        out
    }

    /// What the copy of `src` must look like.
    fn expected(src: &Path) -> BTreeMap<PathBuf, Node> {
        let mut m = manifest(src);
        for node in m.values_mut() {
            match node {
                Node::Dir(mode) => *mode = 0o755,
                Node::File { mode, .. } => *mode = if *mode & 0o100 != 0 { 0o755 } else { 0o644 },
                Node::Link(_) => {}
            }
        }
        m
    }

    #[test]
    fn normal_tree_copies_exactly() {
        let (_tmp, src, dest) = dirs();
        let site = src.join("lib/python3.11/site-packages/pkg");
        fs::create_dir_all(&site).unwrap();
        fs::create_dir(src.join("bin")).unwrap();
        fs::create_dir(src.join("private")).unwrap();
        fs::set_permissions(src.join("private"), Permissions::from_mode(0o700)).unwrap();
        write(
            &src.join("bin/tool"),
            b"#!/bin/sh\n",
            0o4750,
            (1_600_000_000, 123_456_789),
        );
        write(&src.join("bin/exec-only"), b"x", 0o500, (1, 0));
        write(
            &site.join("__init__.py"),
            b"print()\n",
            0o600,
            (1_700_000_000, 999_999_999),
        );
        write(&site.join("empty"), b"", 0o644, (0, 1));
        // Several buffers' worth, not a multiple of the buffer.
        let big: Vec<u8> = (0..(3 * BUF_SIZE + 17))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        write(&src.join("private/big.so"), &big, 0o755, (1_234_567_890, 5));
        symlink("lib", src.join("lib64")).unwrap();
        symlink("/usr/bin/python3", src.join("bin/python")).unwrap();
        symlink("../../..", site.join("up")).unwrap();
        symlink("no/such/file", src.join("dangling")).unwrap();

        let used = copy(&src, &dest, &roomy()).unwrap();
        assert_eq!(manifest(&dest), expected(&src));
        assert_eq!(usage(&dest).unwrap(), used);
        assert_eq!(usage(&src).unwrap(), used);
        // 6 dirs + 5 files + 4 links + the root.
        assert_eq!(used.inodes, 16);
        let links = (3 + 16 + 8 + 12) as u64;
        assert_eq!(used.bytes, 10 + 1 + 8 + big.len() as u64 + links);
    }

    #[test]
    fn o_path_source_fd_works() {
        let (_tmp, src, dest) = dirs();
        fs::create_dir(src.join("d")).unwrap();
        write(&src.join("d/f"), b"hi", 0o644, (5, 6));
        let fd = nix::fcntl::open(&src, OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        copy_tree(fd, &dest, &roomy()).unwrap();
        assert_eq!(manifest(&dest), expected(&src));
    }

    #[test]
    fn links_out_of_the_tree_are_never_opened() {
        let (tmp, src, dest) = dirs();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        // Opening a FIFO with no writer blocks: a copy that followed the link would hang.
        nix::unistd::mkfifo(&outside.join("fifo"), Mode::S_IRWXU).unwrap();
        symlink(outside.join("fifo"), src.join("to-fifo")).unwrap();
        symlink(&outside, src.join("to-dir")).unwrap();
        symlink("/etc/shadow", src.join("shadow")).unwrap();
        symlink("..", src.join("parent")).unwrap();

        let (tx, rx) = std::sync::mpsc::channel();
        let (s, d) = (src.clone(), dest.clone());
        std::thread::spawn(move || tx.send(copy(&s, &d, &roomy()).map_err(|e| e.to_string())));
        let used = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("copy hung: it opened a link's target")
            .unwrap();
        assert_eq!(manifest(&dest), expected(&src));
        assert_eq!(
            fs::read_link(dest.join("to-fifo")).unwrap(),
            outside.join("fifo")
        );
        assert_eq!(usage(&dest).unwrap(), used);
        // Nothing appeared in the directory a link pointed at.
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
    }

    #[track_caller]
    fn assert_unsupported(src: &Path, dest: &Path, want: &Path, want_kind: &str) {
        match copy(src, dest, &roomy()) {
            Err(TreeError::Unsupported { path, kind }) => {
                assert_eq!((path.as_path(), kind), (want, want_kind));
            }
            other => panic!("want unsupported {want_kind}, got {other:?}"),
        }
    }

    #[test]
    fn special_files_are_refused() {
        let (_tmp, src, dest) = dirs();
        fs::create_dir(src.join("sub")).unwrap();
        nix::unistd::mkfifo(&src.join("sub/fifo"), Mode::S_IRWXU).unwrap();
        assert_unsupported(&src, &dest, Path::new("sub/fifo"), "fifo");

        let (_tmp, src, dest) = dirs();
        let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
        assert_unsupported(&src, &dest, Path::new("sock"), "socket");

        for (kind, sflag, (major, minor)) in [
            ("char device", nix::sys::stat::SFlag::S_IFCHR, (1, 3)),
            ("block device", nix::sys::stat::SFlag::S_IFBLK, (7, 0)),
        ] {
            let (_tmp, src, dest) = dirs();
            let dev = nix::sys::stat::makedev(major, minor);
            let path = src.join("node");
            match nix::sys::stat::mknod(&path, sflag, Mode::S_IRUSR, dev) {
                Ok(()) => assert_unsupported(&src, &dest, Path::new("node"), kind),
                Err(e) => eprintln!("skipping the {kind} case: mknod: {e} (needs CAP_MKNOD)"),
            }
        }
    }

    #[test]
    fn sparse_file_over_the_limit_is_refused_unread() {
        let (_tmp, src, dest) = dirs();
        write(&src.join("small"), b"abc", 0o644, (1, 1));
        let f = File::create(src.join("sparse")).unwrap();
        f.set_len(1 << 30).unwrap();
        let start = Instant::now();
        let err = copy(&src, &dest, &limits(16 * MIB, 100, 8)).unwrap_err();
        assert!(
            matches!(err, TreeError::TooLarge { limit } if limit == 16 * MIB),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(!dest.join("sparse").exists());
        assert!(usage(&dest).unwrap().bytes <= 3);
        assert!(fs::metadata(&dest).unwrap().blocks() < 1024);
    }

    #[test]
    fn sparse_file_within_the_limit_keeps_its_size() {
        let (_tmp, src, dest) = dirs();
        File::create(src.join("sparse"))
            .unwrap()
            .set_len(8 * MIB)
            .unwrap();
        let used = copy(&src, &dest, &limits(8 * MIB, 2, 0)).unwrap();
        assert_eq!(
            used,
            TreeUsage {
                bytes: 8 * MIB,
                inodes: 2
            }
        );
        assert_eq!(fs::metadata(dest.join("sparse")).unwrap().len(), 8 * MIB);
    }

    #[test]
    fn limits_are_inclusive() {
        let tree = |src: &Path| {
            fs::create_dir(src.join("d")).unwrap();
            write(&src.join("d/f"), &[7; 1000], 0o644, (1, 1));
            write(&src.join("e"), b"", 0o644, (1, 1));
            symlink("abc", src.join("d/l")).unwrap();
        };
        // 1003 bytes; 5 inodes (root, d, d/f, e, d/l).
        let (_tmp, src, dest) = dirs();
        tree(&src);
        let used = copy(&src, &dest, &limits(1003, 5, 1)).unwrap();
        assert_eq!(
            used,
            TreeUsage {
                bytes: 1003,
                inodes: 5
            }
        );
        assert_eq!(usage(&src).unwrap(), used);

        let (_tmp, src, dest) = dirs();
        tree(&src);
        let err = copy(&src, &dest, &limits(1002, 5, 1)).unwrap_err();
        assert!(
            matches!(err, TreeError::TooLarge { limit: 1002 }),
            "{err:?}"
        );

        let (_tmp, src, dest) = dirs();
        tree(&src);
        let err = copy(&src, &dest, &limits(1003, 4, 1)).unwrap_err();
        assert!(
            matches!(err, TreeError::TooManyInodes { limit: 4 }),
            "{err:?}"
        );

        let (_tmp, src, dest) = dirs();
        let err = copy(&src, &dest, &limits(0, 0, 0)).unwrap_err();
        assert!(
            matches!(err, TreeError::TooManyInodes { limit: 0 }),
            "{err:?}"
        );
        let used = copy(&src, &dest, &limits(0, 1, 0)).unwrap();
        assert_eq!(
            used,
            TreeUsage {
                bytes: 0,
                inodes: 1
            }
        );
    }

    #[test]
    fn many_empty_files_are_refused_before_creating_any() {
        let (_tmp, src, dest) = dirs();
        for i in 0..5000 {
            File::create(src.join(format!("f{i}"))).unwrap();
        }
        let err = copy(&src, &dest, &limits(MIB, 1000, 4)).unwrap_err();
        assert!(
            matches!(err, TreeError::TooManyInodes { limit: 1000 }),
            "{err:?}"
        );
        assert_eq!(fs::read_dir(&dest).unwrap().count(), 0);
    }

    #[test]
    fn many_empty_files_across_directories_stop_at_the_limit() {
        let (_tmp, src, dest) = dirs();
        for d in 0..50 {
            let dir = src.join(format!("d{d}"));
            fs::create_dir(&dir).unwrap();
            for i in 0..100 {
                File::create(dir.join(format!("f{i}"))).unwrap();
            }
        }
        let err = copy(&src, &dest, &limits(MIB, 1000, 4)).unwrap_err();
        assert!(
            matches!(err, TreeError::TooManyInodes { limit: 1000 }),
            "{err:?}"
        );
        assert!(usage(&dest).unwrap().inodes <= 1000);
    }

    #[test]
    fn usage_counts_apparent_sizes_and_every_inode() {
        let (_tmp, src, _dest) = dirs();
        for i in 0..3 {
            File::create(src.join(format!("empty{i}"))).unwrap();
        }
        File::create(src.join("sparse"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        fs::create_dir(src.join("d")).unwrap();
        symlink("xy", src.join("d/link")).unwrap();
        // A link to a directory counts as a link, not as what it points at.
        symlink("/usr", src.join("usr")).unwrap();
        assert_eq!(
            usage(&src).unwrap(),
            TreeUsage {
                bytes: (1 << 30) + 2 + 4,
                inodes: 1 + 3 + 1 + 1 + 1 + 1,
            }
        );
        assert!(usage(&src.join("usr")).is_err());
    }

    #[test]
    fn depth_past_the_limit_is_refused() {
        let (_tmp, src, _dest) = dirs();
        let deepest: PathBuf = (1..=5).map(|i| format!("d{i}")).collect();
        fs::create_dir_all(src.join(&deepest)).unwrap();
        write(&src.join(&deepest).join("f"), b"x", 0o644, (1, 1));

        let dest = src.parent().unwrap().join("ok");
        fs::create_dir(&dest).unwrap();
        copy(&src, &dest, &limits(MIB, 100, 5)).unwrap();
        assert_eq!(manifest(&dest), expected(&src));

        let dest = src.parent().unwrap().join("too-deep");
        fs::create_dir(&dest).unwrap();
        let err = copy(&src, &dest, &limits(MIB, 100, 4)).unwrap_err();
        assert!(matches!(err, TreeError::TooDeep { limit: 4 }), "{err:?}");
    }

    #[test]
    fn a_tree_deeper_than_path_max_copies_and_measures() {
        let (_tmp, src, dest) = dirs();
        let name = "n".repeat(250);
        // 40 levels of 251 bytes: past PATH_MAX, so only fd-relative calls reach it.
        let mut fd = open(&src);
        for _ in 0..40 {
            mkdirat(&fd, name.as_str(), Mode::S_IRWXU).unwrap();
            fd = openat(&fd, name.as_str(), DIR_FLAGS, Mode::empty()).unwrap();
        }
        symlinkat("leaf", &fd, "l").unwrap();
        let used = copy(&src, &dest, &limits(MIB, 100, 40)).unwrap();
        assert_eq!(
            used,
            TreeUsage {
                bytes: 4,
                inodes: 42
            }
        );
        assert_eq!(usage(&dest).unwrap(), used);
    }

    #[test]
    fn odd_names_copy() {
        let (_tmp, src, dest) = dirs();
        let name = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
        let dir = src.join(name(b"\xff\xfe dir\n"));
        fs::create_dir(&dir).unwrap();
        write(&src.join(name(b"new\nline")), b"1", 0o644, (1, 1));
        write(&dir.join(name(b"\x80")), b"2", 0o755, (2, 2));
        write(&dir.join(name(b"-rf *")), b"3", 0o644, (3, 3));
        symlink(name(b"\xff/\n/.."), dir.join(name(b"link\n"))).unwrap();
        copy(&src, &dest, &roomy()).unwrap();
        assert_eq!(manifest(&dest), expected(&src));
    }

    #[test]
    fn a_link_named_like_a_directory_is_not_descended() {
        let (tmp, src, dest) = dirs();
        let outside = tmp.path().join("somewhere");
        fs::create_dir(&outside).unwrap();
        symlink(&outside, src.join("lib")).unwrap();
        // Entries that a path-joining copier might try to put under `lib`.
        fs::create_dir_all(src.join("lib64/python3.11")).unwrap();
        write(&src.join("lib64/python3.11/site.py"), b"x", 0o644, (1, 1));
        symlink("../lib/python3.11", src.join("lib64/python3.11/up")).unwrap();
        copy(&src, &dest, &roomy()).unwrap();
        assert_eq!(manifest(&dest), expected(&src));
        assert!(fs::symlink_metadata(dest.join("lib")).unwrap().is_symlink());
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn links_planted_in_dest_are_not_written_through() {
        // As a racing attacker on the host would: links where the copy is about to
        // create a directory and a file.
        let (tmp, src, dest) = dirs();
        let outside = tmp.path().join("somewhere");
        fs::create_dir(&outside).unwrap();
        fs::create_dir(src.join("lib")).unwrap();
        write(&src.join("lib/site.py"), b"x", 0o644, (1, 1));
        symlink(&outside, dest.join("lib")).unwrap();
        let err = copy(&src, &dest, &roomy()).unwrap_err();
        assert!(
            matches!(&err, TreeError::Io { path, .. } if *path == dest.join("lib")),
            "{err:?}"
        );

        let (_tmp, src, dest) = dirs();
        write(&src.join("conf"), b"x", 0o644, (1, 1));
        symlink(outside.join("conf"), dest.join("conf")).unwrap();
        let err = copy(&src, &dest, &roomy()).unwrap_err();
        assert!(
            matches!(&err, TreeError::Io { path, .. } if *path == dest.join("conf")),
            "{err:?}"
        );
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn dest_must_be_a_real_directory() {
        let (tmp, src, dest) = dirs();
        let link = tmp.path().join("link");
        symlink(&dest, &link).unwrap();
        let err = copy(&src, &link, &roomy()).unwrap_err();
        assert!(
            matches!(&err, TreeError::Io { path, .. } if *path == link),
            "{err:?}"
        );
        assert_eq!(err.to_string(), format!("cannot copy {link:?}"));
    }
}
