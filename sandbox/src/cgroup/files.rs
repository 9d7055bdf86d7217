//! Small helpers shared by the v1 and v2 backends: cgroupfs reads and writes, the pure parsers
//! for the kernel's "key value" files, and the bounded kill and rmdir loops.
//!
//! Writes never create files: on cgroupfs the kernel pre-creates every interface file, so a
//! missing file means a missing controller (or a typo) and must fail, not silently create a
//! regular file. Test fixtures mimic the kernel instead (see `fixture.rs`).

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{self, OFlag};
use nix::sys::signal::{self, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{self, Pid};

use super::CgroupError;

/// How many times `rmdir` is retried on EBUSY, and the pause between tries. A SIGKILLed task
/// leaves its cgroup within a few milliseconds; 200 x 5 ms bounds a stuck exit at one second.
const RMDIR_ATTEMPTS: u32 = 200;
const RMDIR_PAUSE: Duration = Duration::from_millis(5);

/// Rounds of "read cgroup.procs, SIGKILL everything" before giving up. A fork bomb can add
/// tasks between the read and the kill, so one round is not enough.
pub(super) const KILL_ROUNDS: u32 = 100;
const KILL_PAUSE: Duration = Duration::from_millis(2);

/// A cgroup directory opened once, with its path for messages. A job's files are opened,
/// made and removed relative to it (`openat`, `mkdirat`, `unlinkat`), so each costs no walk
/// of the whole path (`/sys/fs/cgroup/<controller>/<subtree>/...`: several lookups and two
/// mount crossings, per file and per hierarchy).
#[derive(Debug)]
pub(super) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// `flags`: `O_PATH` for a directory only used to reach its files, `O_RDONLY` for one
    /// that clone3 takes (`CLONE_INTO_CGROUP`); `O_DIRECTORY | O_CLOEXEC` are added.
    pub(super) fn open(path: PathBuf, flags: OFlag) -> Result<Dir, CgroupError> {
        match fcntl::open(
            &path,
            flags | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(source) => Err(CgroupError::OpenDir { path, source }),
        }
    }

    /// The directory `name` below this one.
    pub(super) fn open_child(&self, name: &str, flags: OFlag) -> Result<Dir, CgroupError> {
        let path = self.path.join(name);
        let flags = flags | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        match fcntl::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(source) => Err(CgroupError::OpenDir { path, source }),
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Open `rel` (a file name, or `<child>/<file>`) below this directory; never creates.
    pub(super) fn open_file(&self, rel: &str, flags: OFlag) -> nix::Result<OwnedFd> {
        fcntl::openat(&self.fd, rel, flags | OFlag::O_CLOEXEC, Mode::empty())
    }

    /// [`write_value`] to `rel` below this directory.
    pub(super) fn write(&self, rel: &str, value: &str) -> Result<(), CgroupError> {
        self.write_if_present(rel, value)?
            .then_some(())
            .ok_or_else(|| self.write_error(rel, value, Errno::ENOENT.into()))
    }

    /// [`Dir::write`], where a missing file is no error but `false` (a file that exists only
    /// with some kernel option): one failed open instead of a `stat` and an open.
    pub(super) fn write_if_present(&self, rel: &str, value: &str) -> Result<bool, CgroupError> {
        match self.open_file(rel, OFlag::O_WRONLY | OFlag::O_TRUNC) {
            Ok(fd) => write_fd(fd, value)
                .map(|()| true)
                .map_err(|e| self.write_error(rel, value, e)),
            Err(Errno::ENOENT) => Ok(false),
            Err(e) => Err(self.write_error(rel, value, e.into())),
        }
    }

    pub(super) fn write_error(&self, rel: &str, value: &str, source: io::Error) -> CgroupError {
        CgroupError::Write {
            path: self.path.join(rel),
            value: value.to_owned(),
            source,
        }
    }

    /// [`make_dir`] of `name` below this directory (an existing one is an error).
    pub(super) fn mkdir(&self, name: &str) -> Result<(), CgroupError> {
        nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(0o777)).map_err(|e| {
            CgroupError::Mkdir {
                path: self.path.join(name),
                source: e.into(),
            }
        })?;
        #[cfg(test)]
        super::fixture::on_mkdir(&self.path.join(name));
        Ok(())
    }

    /// One `rmdir` of `name` below this directory, no retry: `Ok` when it is gone (or was
    /// not there), else the kernel's refusal (EBUSY while the cgroup has tasks or children).
    pub(super) fn try_rmdir(&self, name: &str) -> nix::Result<()> {
        #[cfg(test)]
        super::fixture::before_rmdir(&self.path.join(name));
        match unistd::unlinkat(&self.fd, name, unistd::UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// [`remove_dir`] of `name` below this directory: EBUSY is retried while the last
    /// tasks finish exiting.
    pub(super) fn rmdir(&self, name: &str) -> Result<(), CgroupError> {
        let mut attempt = 0;
        loop {
            match self.try_rmdir(name) {
                Ok(()) => return Ok(()),
                Err(Errno::EBUSY) if attempt + 1 < RMDIR_ATTEMPTS => {
                    attempt += 1;
                    thread::sleep(RMDIR_PAUSE);
                }
                Err(e) => {
                    return Err(CgroupError::Rmdir {
                        path: self.path.join(name),
                        source: e.into(),
                    })
                }
            }
        }
    }
}

/// A directory of the daemon's (a v1 hierarchy's subtree, the v2 delegated root), opened
/// `O_PATH` once, by `setup` (or at the first job), and shared by the jobs made in it. A
/// subtree removed under the daemon then fails job creation (ENOENT): the fd never follows
/// a directory made again by someone else.
#[derive(Clone, Debug)]
pub(super) struct Base {
    path: PathBuf,
    dir: OnceLock<Arc<Dir>>,
}

impl Base {
    pub(super) fn new(path: PathBuf) -> Base {
        Base {
            path,
            dir: OnceLock::new(),
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) fn dir(&self) -> Result<&Arc<Dir>, CgroupError> {
        if let Some(dir) = self.dir.get() {
            return Ok(dir);
        }
        let dir = Dir::open(self.path.clone(), OFlag::O_PATH)?;
        Ok(self.dir.get_or_init(|| Arc::new(dir)))
    }
}

/// Write all of `value` to `fd` (one `write(2)` on cgroupfs), then close it.
pub(super) fn write_fd(fd: OwnedFd, value: &str) -> io::Result<()> {
    fs::File::from(fd).write_all(value.as_bytes())
}

/// Write `value` with one `write(2)` into an existing file (truncating it, which cgroupfs ignores
/// and a fixture needs for whole-file asserts).
pub(super) fn write_value(path: &Path, value: &str) -> Result<(), CgroupError> {
    OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: path.to_path_buf(),
            value: value.to_owned(),
            source,
        })
}

pub(super) fn read_string(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Read a file holding a single unsigned number (`cpuacct.usage`, `memory.peak`, ...).
pub(super) fn read_u64(path: &Path) -> Result<u64, CgroupError> {
    Counters::default().read_u64(path)
}

/// A job's counter files, opened once (while the job runs) and read at its end without
/// an open or a close each: the kernel regenerates a cgroup file's text on every read
/// from offset 0 (`pread`). A file not opened here is read by path.
#[derive(Debug, Default)]
pub(super) struct Counters(Vec<(PathBuf, fs::File)>);

impl Counters {
    /// Open those of `files` (a directory and a path relative to it) that exist, with
    /// `openat`; a missing one fails later, when read by path.
    pub(super) fn open<'a>(files: impl IntoIterator<Item = (&'a Dir, String)>) -> Counters {
        Counters(
            files
                .into_iter()
                .filter_map(|(dir, rel)| {
                    let fd = dir.open_file(&rel, OFlag::O_RDONLY).ok()?;
                    Some((dir.path().join(rel), fs::File::from(fd)))
                })
                .collect(),
        )
    }

    /// Whether `path` exists (known without a syscall when it was opened here).
    pub(super) fn exists(&self, path: &Path) -> bool {
        self.0.iter().any(|(p, _)| p == path) || path.exists()
    }

    pub(super) fn read_string(&self, path: &Path) -> Result<String, CgroupError> {
        use std::os::unix::fs::FileExt;
        let Some((_, file)) = self.0.iter().find(|(p, _)| p == path) else {
            return read_string(path);
        };
        let err = |source| CgroupError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut buf = vec![0u8; 512];
        let mut len = 0;
        loop {
            if len == buf.len() {
                buf.resize(len * 2, 0);
            }
            let want = buf.len() - len;
            let n = file.read_at(&mut buf[len..], len as u64).map_err(err)?;
            len += n;
            // A cgroup file is a seq_file, which fills the buffer while it has text:
            // a short read is the end (one pread for a counter, not two).
            if n < want {
                break;
            }
        }
        buf.truncate(len);
        String::from_utf8(buf).map_err(|e| err(io::Error::new(io::ErrorKind::InvalidData, e)))
    }

    pub(super) fn read_u64(&self, path: &Path) -> Result<u64, CgroupError> {
        parse_u64(&self.read_string(path)?).ok_or_else(|| CgroupError::Parse {
            path: path.to_path_buf(),
            key: "value",
        })
    }

    /// `key` from a flat keyed file (`memory.events`, `cpu.stat`, `memory.oom_control`...).
    pub(super) fn read_key(&self, path: &Path, key: &'static str) -> Result<u64, CgroupError> {
        parse_keyed(&self.read_string(path)?, key).ok_or_else(|| CgroupError::Parse {
            path: path.to_path_buf(),
            key,
        })
    }
}

/// Parse a single number, surrounding whitespace allowed.
pub fn parse_u64(content: &str) -> Option<u64> {
    content.trim().parse().ok()
}

/// The value of `key` in a flat keyed file: one `key value` pair per line, separated by a space.
/// See Documentation/admin-guide/cgroup-v2.rst "Interface Files" (the v1 files use the same shape).
pub fn parse_keyed(content: &str, key: &str) -> Option<u64> {
    content.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        if parts.next()? != key {
            return None;
        }
        let value = parse_u64(parts.next()?)?;
        parts.next().is_none().then_some(value)
    })
}

/// Parse `cgroup.procs` / `tasks`: one pid per line.
pub fn parse_pids(content: &str) -> Vec<i32> {
    content
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Parse a space-separated controller list (`cgroup.controllers`, `cgroup.subtree_control`).
pub fn parse_controller_list(content: &str) -> Vec<&str> {
    content
        .split_whitespace()
        .map(|word| word.trim_start_matches(['+', '-']))
        .collect()
}

/// mkdir; with `allow_existing` an existing directory is fine (the daemon's own dirs survive
/// restarts), without it EEXIST is an error (a job must never reuse a cgroup with leftovers).
pub(super) fn make_dir(path: &Path, allow_existing: bool) -> Result<(), CgroupError> {
    match fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if allow_existing && e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(source) => {
            return Err(CgroupError::Mkdir {
                path: path.to_path_buf(),
                source,
            })
        }
    }
    // A fixture directory is a plain directory: play the kernel and add the interface files.
    #[cfg(test)]
    super::fixture::on_mkdir(path);
    Ok(())
}

/// rmdir, retrying EBUSY while the last tasks finish exiting. A missing directory is success.
pub(super) fn remove_dir(path: &Path) -> Result<(), CgroupError> {
    let mut attempt = 0;
    loop {
        #[cfg(test)]
        super::fixture::before_rmdir(path);
        match fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt + 1 < RMDIR_ATTEMPTS => {
                attempt += 1;
                thread::sleep(RMDIR_PAUSE);
            }
            Err(source) => {
                return Err(CgroupError::Rmdir {
                    path: path.to_path_buf(),
                    source,
                })
            }
        }
    }
}

/// Remove `dir` and any cgroups below it, deepest first.
pub(super) fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    for child in subdirs(dir)? {
        remove_tree(&child)?;
    }
    remove_dir(dir)
}

/// The child cgroups (directories) of `dir`, sorted; a missing `dir` has none.
pub(super) fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let read_err = |source| CgroupError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_err(e)),
    };
    let mut dirs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        if entry.file_type().map_err(read_err)?.is_dir() {
            dirs.push(entry.path());
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// SIGKILL every process listed in `procs` (a `cgroup.procs` file) until it reads empty.
///
/// Pids are read and then signalled, so in theory a pid could exit and be reused in between;
/// with pid_max at 4M that needs a full wrap-around inside this loop. The spawner's primary kill
/// is SIGKILL on the job's pid-namespace init through a pidfd, which has no such race.
pub(super) fn kill_procs(procs: &Path) -> Result<(), CgroupError> {
    for _ in 0..KILL_ROUNDS {
        let pids = match fs::read_to_string(procs) {
            Ok(content) => parse_pids(&content),
            // The cgroup is gone: nothing left to kill.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(CgroupError::Read {
                    path: procs.to_path_buf(),
                    source,
                })
            }
        };
        if pids.is_empty() {
            return Ok(());
        }
        for pid in pids {
            match signal::kill(Pid::from_raw(pid), Signal::SIGKILL) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(source) => {
                    return Err(CgroupError::Kill {
                        path: procs.to_path_buf(),
                        pid,
                        source,
                    })
                }
            }
        }
        thread::sleep(KILL_PAUSE);
    }
    Err(CgroupError::StillPopulated {
        path: procs.to_path_buf(),
        attempts: KILL_ROUNDS,
    })
}

/// A path as a C string, built ahead of time so the attach itself does not allocate (it may run
/// in a freshly forked child).
pub(super) fn c_path(path: &Path) -> CString {
    // Paths come from mountinfo and validated names, which never contain NUL.
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

/// Write "0" to a `tasks` (v1) or `cgroup.procs` (v2) file: the kernel reads 0 as "the caller".
/// No allocation on success, so it is usable between fork and exec.
pub(super) fn attach_self(file: &std::ffi::CStr) -> Result<(), CgroupError> {
    let attach_err = |source| CgroupError::Attach {
        path: PathBuf::from(std::ffi::OsStr::from_bytes(file.to_bytes())),
        source,
    };
    let fd =
        fcntl::open(file, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty()).map_err(attach_err)?;
    unistd::write(&fd, b"0").map_err(attach_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_files_parse_like_the_kernel_prints_them() {
        let events = "low 0\nhigh 0\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(parse_keyed(events, "max"), Some(17));
        assert_eq!(parse_keyed(events, "oom_kill"), Some(1));
        assert_eq!(parse_keyed(events, "oom_group_kill"), Some(0));
        assert_eq!(parse_keyed(events, "missing"), None);

        let oom_control = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_keyed(oom_control, "oom_kill"), Some(3));

        let cpu_stat = "usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\n\
                        nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n";
        assert_eq!(parse_keyed(cpu_stat, "usage_usec"), Some(123_456));
    }

    #[test]
    fn keyed_parser_rejects_malformed_lines() {
        assert_eq!(parse_keyed("max", "max"), None);
        assert_eq!(parse_keyed("max x\n", "max"), None);
        assert_eq!(parse_keyed("max 1 2\n", "max"), None);
        assert_eq!(parse_keyed("max -1\n", "max"), None);
        // A prefix of a key is not the key.
        assert_eq!(parse_keyed("oom_kill 4\n", "oom"), None);
        assert_eq!(parse_keyed("", "max"), None);
    }

    #[test]
    fn single_values_and_lists() {
        assert_eq!(
            parse_u64("9223372036854771712\n"),
            Some(9_223_372_036_854_771_712)
        );
        assert_eq!(parse_u64(" 42 "), Some(42));
        assert_eq!(parse_u64("max\n"), None);
        assert_eq!(parse_pids("12\n345\n\n"), vec![12, 345]);
        assert_eq!(parse_pids(""), Vec::<i32>::new());
        assert_eq!(
            parse_controller_list("cpuset cpu io memory hugetlb pids rdma misc\n"),
            vec!["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"]
        );
        assert_eq!(
            parse_controller_list("+memory +pids -cpu"),
            vec!["memory", "pids", "cpu"]
        );
    }

    #[test]
    fn write_value_never_creates_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("memory.max");
        let err = write_value(&missing, "1").unwrap_err();
        assert!(matches!(err, CgroupError::Write { ref source, .. }
            if source.kind() == io::ErrorKind::NotFound));
        assert!(!missing.exists());

        fs::write(&missing, "max\n").unwrap();
        write_value(&missing, "1").unwrap();
        assert_eq!(fs::read_to_string(&missing).unwrap(), "1");
    }

    #[test]
    fn remove_dir_tolerates_missing_and_reports_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        remove_dir(&dir.path().join("gone")).unwrap();
        // A child cgroup keeps its parent busy (ENOTEMPTY is not retried).
        let full = dir.path().join("full");
        fs::create_dir_all(full.join("child")).unwrap();
        assert!(matches!(
            remove_dir(&full),
            Err(CgroupError::Rmdir { ref path, .. }) if *path == full
        ));
    }
}
