//! Input files (protocol 7): placed under `/work` inside the sandbox, as the job's user,
//! one path component at a time, never following a link.
//!
//! A cold job's init calls [`place`] after it wrote the script (I13), still holding the
//! job's root filesystem but not yet the payload: with its filesystem ids set to the
//! job's user, so every file and directory is created as that user, and the kernel
//! checks each step with that user's permissions (the capabilities that bypass them are
//! cleared from the effective set while the filesystem uid is not 0). A warm sandbox's
//! bootstrap and a session's cell loop do the same in Python (`inputs.py`), as the job's
//! own process. The server has checked every path already (`vivarium_proto::files`);
//! this refuses again what it cannot do safely: a component that exists and is not a
//! directory (or is a link to one), a file that exists.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{setfsgid, setfsuid, Gid, Uid};

use crate::plan::InputPlan;
use crate::{SetupError, Step};

/// Place `files` under the directory `work`, their bytes one after the other in
/// `bytes`, created as `owner` (uid, gid).
pub fn place(
    work: &Path,
    files: &[InputPlan],
    bytes: &[u8],
    owner: (u32, u32),
) -> Result<(), SetupError> {
    let want: u64 = files.iter().map(|f| f.len).sum();
    if want != bytes.len() as u64 {
        return Err(SetupError::Other {
            step: Step::InputFile,
            detail: format!(
                "the files need {want} bytes, {} were delivered",
                bytes.len()
            ),
        });
    }
    // setfsgid first: with the filesystem uid no longer 0, CAP_SETGID is still there
    // (only the filesystem capabilities go), but keep the order the payload uses.
    let old_gid = setfsgid(Gid::from_raw(owner.1));
    let old_uid = setfsuid(Uid::from_raw(owner.0));
    // setfsuid(2) reports no error: (uid_t)-1 is refused, and answers the ids in force.
    let now = (
        setfsuid(Uid::from_raw(u32::MAX)).as_raw(),
        setfsgid(Gid::from_raw(u32::MAX)).as_raw(),
    );
    let placed = if now == owner {
        place_as(work, files, bytes)
    } else {
        Err(SetupError::Other {
            step: Step::InputFile,
            detail: format!("filesystem ids {now:?} instead of the job's {owner:?}"),
        })
    };
    setfsuid(old_uid);
    setfsgid(old_gid);
    placed
}

fn place_as(work: &Path, files: &[InputPlan], mut bytes: &[u8]) -> Result<(), SetupError> {
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let root = nix::fcntl::open(work, dir_flags, Mode::empty())
        .map_err(|e| SetupError::nix(Step::InputFile, work, e))?;
    for f in files {
        let (data, rest) = bytes.split_at(f.len as usize);
        bytes = rest;
        let fail = |e: nix::Error| SetupError::nix(Step::InputFile, Path::new(&f.path), e);
        let mode = vivarium_proto::files::input_mode(f.mode).map_err(|e| SetupError::Other {
            step: Step::InputFile,
            detail: format!("{}: {e}", f.path),
        })?;
        let mut names = f.path.split('/').peekable();
        let mut dir: Option<OwnedFd> = None;
        while let Some(name) = names.next() {
            if name.is_empty() || name == "." || name == ".." {
                return Err(fail(nix::Error::EINVAL));
            }
            let at = dir.as_ref().map_or(root.as_fd(), |d| d.as_fd());
            if names.peek().is_none() {
                let file = openat(
                    at,
                    name,
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(mode),
                )
                .map_err(fail)?;
                // The mode as asked, whatever the umask took away.
                fchmod(&file, Mode::from_bits_truncate(mode)).map_err(fail)?;
                let mut file = std::fs::File::from(file);
                file.write_all(data)
                    .map_err(|e| SetupError::io(Step::InputFile, Path::new(&f.path), &e))?;
                break;
            }
            match mkdirat(at, name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(nix::Error::EEXIST) => {}
                Err(e) => return Err(fail(e)),
            }
            // O_NOFOLLOW with O_DIRECTORY: a link here is ELOOP (or ENOTDIR), never
            // followed; a file is ENOTDIR.
            dir = Some(openat(at, name, dir_flags, Mode::empty()).map_err(fail)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn plan(path: &str, mode: u32, len: usize) -> InputPlan {
        InputPlan {
            path: path.into(),
            mode,
            len: len as u64,
        }
    }

    fn me() -> (u32, u32) {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }

    #[test]
    fn files_land_with_their_bytes_modes_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let files = [
            plan("a.csv", 0, 3),
            plan("d/e/f.txt", 0o600, 2),
            plan("d/g", 0o444, 0),
        ];
        place(dir.path(), &files, b"1,2hi", me()).unwrap();
        assert_eq!(std::fs::read(dir.path().join("a.csv")).unwrap(), b"1,2");
        assert_eq!(std::fs::read(dir.path().join("d/e/f.txt")).unwrap(), b"hi");
        assert_eq!(std::fs::read(dir.path().join("d/g")).unwrap(), b"");
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("a.csv"), 0o644);
        assert_eq!(mode("d/e/f.txt"), 0o600);
        assert_eq!(mode("d/g"), 0o444);
        assert!(std::fs::metadata(dir.path().join("d/e")).unwrap().is_dir());
    }

    #[test]
    fn a_link_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("x"), dir.path().join("file")).unwrap();
        let e = place(dir.path(), &[plan("link/x", 0, 1)], b"!", me()).unwrap_err();
        assert!(e.to_string().contains("link/x"), "{e}");
        let e = place(dir.path(), &[plan("file", 0, 1)], b"!", me()).unwrap_err();
        assert!(e.to_string().contains("file"), "{e}");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        // An existing file is not overwritten, nor used as a directory.
        std::fs::write(dir.path().join("f"), b"keep").unwrap();
        assert!(place(dir.path(), &[plan("f", 0, 1)], b"!", me()).is_err());
        assert!(place(dir.path(), &[plan("f/x", 0, 1)], b"!", me()).is_err());
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"keep");
    }

    #[test]
    fn bytes_must_add_up() {
        let dir = tempfile::tempdir().unwrap();
        assert!(place(dir.path(), &[plan("a", 0, 3)], b"ab", me()).is_err());
        assert!(place(dir.path(), &[plan("a", 0, 1)], b"ab", me()).is_err());
        assert!(!dir.path().join("a").exists());
    }

    #[test]
    fn root_places_files_as_the_owner_given() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("VIVARIUM_REQUIRE_ROOT").is_none(),
                "needs root (VIVARIUM_REQUIRE_ROOT is set)"
            );
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        place(dir.path(), &[plan("sub/a", 0, 1)], b"x", (4242, 4343)).unwrap();
        for p in ["sub", "sub/a"] {
            let m = std::fs::metadata(dir.path().join(p)).unwrap();
            assert_eq!((m.uid(), m.gid()), (4242, 4343), "{p}");
        }
        // With the job's ids, its permissions apply: a directory it cannot write.
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = place(dir.path(), &[plan("locked/a", 0, 1)], b"x", (4242, 4343)).unwrap_err();
        assert!(e.to_string().contains("Permission denied"), "{e}");
        // And the ids are back afterwards.
        assert_eq!(setfsuid(Uid::from_raw(0)).as_raw(), 0);
    }
}
