//! `--out DIR` (`viv run`, `viv exec`): write the artifacts a job or cell returned under a
//! host directory, never outside it and never over an existing file unless asked.
//!
//! An artifact's path and bytes come from the sandboxed code, and DIR's subtree may be
//! changed by anyone while we write (another process, or the user's own earlier runs
//! that left symlinks). So every step is relative to a directory fd, one component at a
//! time, with `O_NOFOLLOW` (openat(2), "O_NOFOLLOW"): a symlink anywhere below DIR is an
//! error, never followed, whenever it appears. This is the walk that `openat2`'s
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` does in one call; done by hand it works on
//! every kernel. (DIR itself is the user's choice and is opened as given.)

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Why an artifact was not written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SaveError {
    #[error("cannot create or open the output directory {}", dir.display())]
    OpenDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("artifact {path:?} has a path that could leave the output directory (absolute, empty, `.` or `..` component, or NUL); not written")]
    UnsafePath { path: String },
    #[error("artifact {path:?}: {component:?} in the output directory is a symlink or not a directory; not followed, not written")]
    NotADirectory { path: String, component: String },
    #[error("artifact {path:?}: {} already exists; not replaced (pass --force to replace a regular file)", at.display())]
    Exists { path: String, at: PathBuf },
    #[error("artifact {path:?}: {} exists and is not a regular file (a symlink, directory or other); not replaced, even with --force", at.display())]
    NotARegularFile { path: String, at: PathBuf },
    #[error("artifact {path:?}: cannot write {}", at.display())]
    Io {
        path: String,
        at: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// An open output directory: artifacts are written beneath its fd.
#[derive(Debug)]
pub(crate) struct OutDir {
    fd: OwnedFd,
    path: PathBuf,
    force: bool,
}

/// Distinguishes the temporary files of one viv (with its pid).
static TEMP_SEQ: AtomicU32 = AtomicU32::new(0);

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// rw-r--r-- (less the umask), as `--file` inputs are placed; rwxr-xr-x for directories.
const FILE_MODE: Mode = Mode::from_bits_truncate(0o644);
const DIR_MODE: Mode = Mode::from_bits_truncate(0o755);

impl OutDir {
    /// Create `dir` (and its parents) if need be and open it. Called before the job is
    /// sent, so that a DIR that cannot be used costs no run.
    pub(crate) fn open(dir: &Path, force: bool) -> Result<OutDir, SaveError> {
        let err = |source| SaveError::OpenDir {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let fd = nix::fcntl::open(
            dir,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err(e.into()))?;
        Ok(OutDir {
            fd,
            path: dir.to_owned(),
            force,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Write `data` as DIR/`path`, creating the directories on the way; returns where it
    /// went. Without `force` the file must not exist (`O_EXCL`); with it, an existing
    /// regular file is replaced by a rename (a new inode: a hard link elsewhere keeps the
    /// old bytes, and a symlink that appears there meanwhile is replaced, not written
    /// through).
    pub(crate) fn save(&self, path: &str, data: &[u8]) -> Result<PathBuf, SaveError> {
        if vivarium_client::safe_join(&self.path, path).is_none() {
            return Err(SaveError::UnsafePath { path: path.into() });
        }
        let at = self.path.join(path);
        let io = |source: std::io::Error| SaveError::Io {
            path: path.into(),
            at: at.clone(),
            source,
        };
        let (parents, name) = match path.rsplit_once('/') {
            Some((parents, name)) => (Some(parents), name),
            None => (None, path),
        };
        let mut walked: Option<OwnedFd> = None;
        for (i, component) in parents.into_iter().flat_map(|p| p.split('/')).enumerate() {
            let parent = walked.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
            match mkdirat(parent, component, DIR_MODE) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(io(e.into())),
            }
            let next =
                openat(parent, component, DIR_FLAGS, Mode::empty()).map_err(|e| match e {
                    Errno::ELOOP | Errno::ENOTDIR => SaveError::NotADirectory {
                        path: path.into(),
                        component: prefix(path, i),
                    },
                    e => io(e.into()),
                })?;
            walked = Some(next);
        }
        let parent = walked.as_ref().map_or(self.fd.as_fd(), |fd| fd.as_fd());
        if !self.force {
            let file = openat(
                parent,
                name,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                FILE_MODE,
            )
            .map_err(|e| match e {
                Errno::EEXIST => SaveError::Exists {
                    path: path.into(),
                    at: at.clone(),
                },
                e => io(e.into()),
            })?;
            return write_all(file, data).map(|()| at.clone()).map_err(io);
        }
        // --force: only a regular file (or nothing) may be there. The check and the rename
        // are not atomic together, but what the rename replaces is the name, never what a
        // link names, so losing that race replaces a link, never writes through it.
        match fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG => {}
            Ok(_) => {
                return Err(SaveError::NotARegularFile {
                    path: path.into(),
                    at,
                })
            }
            Err(Errno::ENOENT) => {}
            Err(e) => return Err(io(e.into())),
        }
        let temp = temp_name(name);
        let file = openat(
            parent,
            temp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            FILE_MODE,
        )
        .map_err(|e| io(e.into()))?;
        let written = write_all(file, data)
            .and_then(|()| renameat(parent, temp.as_os_str(), parent, name).map_err(Into::into));
        if let Err(e) = written {
            let _ = unlinkat(parent, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            return Err(io(e));
        }
        Ok(at)
    }
}

fn write_all(fd: OwnedFd, data: &[u8]) -> std::io::Result<()> {
    let mut file = File::from(fd);
    file.write_all(data)?;
    file.flush()
}

/// The first `i + 1` components of `path`.
fn prefix(path: &str, i: usize) -> String {
    path.split('/').take(i + 1).collect::<Vec<_>>().join("/")
}

/// A hidden name beside `name` for the file that replaces it (`.NAME.viv-PID-N`).
fn temp_name(name: &str) -> OsString {
    let n = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
    OsString::from_vec(format!(".{name}.viv-{}-{n}", std::process::id()).into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        (tmp, out)
    }

    #[test]
    fn nested_directories_are_created_under_a_new_dir() {
        let (_tmp, out) = setup();
        let dir = OutDir::open(&out.join("deep"), false).unwrap();
        let at = dir.save("a/b/c.csv", b"x,y\n").unwrap();
        assert_eq!(at, out.join("deep/a/b/c.csv"));
        assert_eq!(std::fs::read(&at).unwrap(), b"x,y\n");
        dir.save("a/b/d.png", b"").unwrap();
        assert_eq!(std::fs::read(out.join("deep/a/b/d.png")).unwrap(), b"");
    }

    #[test]
    fn unsafe_paths_are_refused_and_write_nothing() {
        let (tmp, out) = setup();
        let dir = OutDir::open(&out, false).unwrap();
        for bad in [
            "../escape",
            "/abs",
            "a/../../escape",
            "a//b",
            "./a",
            "",
            "a\0b",
        ] {
            let err = dir.save(bad, b"x").unwrap_err();
            assert!(
                matches!(err, SaveError::UnsafePath { .. }),
                "{bad:?}: {err}"
            );
        }
        assert!(!tmp.path().join("escape").exists());
        assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    }

    #[test]
    fn a_symlink_planted_inside_dir_is_never_followed() {
        let (tmp, out) = setup();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        symlink(&outside, out.join("link")).unwrap();
        std::fs::create_dir_all(out.join("real")).unwrap();
        symlink(&outside, out.join("real/deeper")).unwrap();
        for force in [false, true] {
            let dir = OutDir::open(&out, force).unwrap();
            for path in ["link/x.txt", "real/deeper/x.txt", "link/sub/x.txt"] {
                let err = dir.save(path, b"pwned").unwrap_err();
                assert!(
                    matches!(err, SaveError::NotADirectory { .. }),
                    "{path}: {err}"
                );
            }
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn a_file_where_a_directory_is_needed_is_refused() {
        let (_tmp, out) = setup();
        let dir = OutDir::open(&out, true).unwrap();
        dir.save("a", b"file").unwrap();
        let err = dir.save("a/b", b"x").unwrap_err();
        assert!(
            matches!(&err, SaveError::NotADirectory { component, .. } if component == "a"),
            "{err}"
        );
    }

    #[test]
    fn an_existing_file_is_kept_without_force_and_replaced_with_it() {
        let (_tmp, out) = setup();
        std::fs::create_dir_all(out.join("sub")).unwrap();
        std::fs::write(out.join("sub/plot.png"), b"old").unwrap();
        let err = OutDir::open(&out, false)
            .unwrap()
            .save("sub/plot.png", b"new")
            .unwrap_err();
        assert!(matches!(err, SaveError::Exists { .. }), "{err}");
        assert_eq!(std::fs::read(out.join("sub/plot.png")).unwrap(), b"old");

        let dir = OutDir::open(&out, true).unwrap();
        dir.save("sub/plot.png", b"new").unwrap();
        assert_eq!(std::fs::read(out.join("sub/plot.png")).unwrap(), b"new");
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(out.join("sub")).unwrap().count(), 1);
    }

    #[test]
    fn a_symlink_at_the_destination_is_never_written_through() {
        let (tmp, out) = setup();
        std::fs::create_dir_all(&out).unwrap();
        let target = tmp.path().join("target.txt");
        std::fs::write(&target, b"precious").unwrap();
        symlink(&target, out.join("a.txt")).unwrap();
        // A dangling link too: O_CREAT through it would create the target.
        let dangling = tmp.path().join("created-through-link");
        symlink(&dangling, out.join("b.txt")).unwrap();
        for force in [false, true] {
            let dir = OutDir::open(&out, force).unwrap();
            for name in ["a.txt", "b.txt"] {
                let err = dir.save(name, b"pwned").unwrap_err();
                if force {
                    assert!(matches!(err, SaveError::NotARegularFile { .. }), "{err}");
                } else {
                    assert!(matches!(err, SaveError::Exists { .. }), "{err}");
                }
            }
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        assert!(!dangling.exists());
        assert!(out.join("a.txt").symlink_metadata().unwrap().is_symlink());
    }

    #[test]
    fn a_directory_at_the_destination_is_not_replaced() {
        let (_tmp, out) = setup();
        std::fs::create_dir_all(out.join("d")).unwrap();
        let err = OutDir::open(&out, true)
            .unwrap()
            .save("d", b"x")
            .unwrap_err();
        assert!(matches!(err, SaveError::NotARegularFile { .. }), "{err}");
        assert!(out.join("d").is_dir());
    }

    #[test]
    fn dir_itself_may_be_a_symlink_the_user_gave() {
        let (tmp, out) = setup();
        let real = tmp.path().join("real");
        std::fs::create_dir_all(&real).unwrap();
        symlink(&real, &out).unwrap();
        OutDir::open(&out, false).unwrap().save("x", b"1").unwrap();
        assert_eq!(std::fs::read(real.join("x")).unwrap(), b"1");
    }
}
