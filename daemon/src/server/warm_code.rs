//! The warm bootstrap compiled ahead, once per interpreter.
//!
//! A cold-built ready sandbox used to start its interpreter with the whole warm
//! bootstrap (`WARM_BOOTSTRAP`, ~12 KB of Python) as its `-c` program. Compiling it is
//! work every build repeats, and the compiler's peak stays in the interpreter's heap for
//! as long as the sandbox waits: ~0.4 MiB of private memory per idle sandbox, most of
//! what an idle sandbox holds beyond a bare interpreter. So the daemon compiles it once
//! per interpreter, and a sandbox gets the small `WARM_LOADER` as its `-c` program and
//! the code object (its magic number, then `marshal`) first on its stdin.
//!
//! What is run, and with what trust: the profile's interpreter (the same file every
//! sandbox of the profile executes), on the host, with `-I -S`, an empty environment,
//! `/` as its directory, our own constant source on stdin and no other input; as
//! `nobody` when the daemon is root. It compiles, it does not run the bootstrap. Its
//! answer only goes, unread, into sandboxes that run that same interpreter, which checks
//! the magic number before it loads anything; nothing a job does reaches it. An answer
//! that is not a code object of the right size, or an interpreter that fails or takes
//! over [`TIMEOUT`], leaves that interpreter's sandboxes on the source bootstrap (and is
//! not retried until the file changes): the cache is a speed-up, never a layer.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the interpreter runs: read the source on stdin, write its magic number and the
/// marshalled code object on stdout. The code's file name is the one a `-c` program
/// gets, so a traceback through the bootstrap reads as it did.
const COMPILE: &str = "import sys, marshal, _frozen_importlib_external as e\n\
    code = compile(sys.stdin.buffer.read().decode(), '<string>', 'exec', dont_inherit=True)\n\
    sys.stdout.buffer.write(e.MAGIC_NUMBER + marshal.dumps(code))\n";

/// How long the interpreter may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer taken. It must also fit in the sandbox's empty stdin pipe (64 KiB)
/// with its length, so that writing it never blocks; the bootstrap compiles to ~14 KB.
pub const MAX_CODE: usize = 60 << 10;

/// Which file an interpreter path is: a replaced or upgraded interpreter is another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    fn of(path: &Path) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
        })
    }
}

/// What a sandbox's stdin starts with (see [`WarmCode::stdin_for`]).
pub type Framed = Arc<Vec<u8>>;

/// The compiled bootstrap, per interpreter path: for which file it was made, and the
/// answer (`None`: it could not be).
#[derive(Default)]
pub struct WarmCode {
    cache: tokio::sync::Mutex<HashMap<PathBuf, (FileId, Option<Framed>)>>,
}

impl WarmCode {
    /// What a sandbox running `interpreter` gets first on its stdin (`u32` length, then
    /// the magic number and the code), or `None`: that sandbox runs the source
    /// bootstrap. Compiles on the first call for an interpreter (or a changed file), and
    /// remembers a failure as well as a success.
    pub async fn stdin_for(&self, interpreter: &Path, source: &str) -> Option<Framed> {
        let id = FileId::of(interpreter)?;
        let mut cache = self.cache.lock().await;
        if let Some((known, code)) = cache.get(interpreter) {
            if *known == id {
                return code.clone();
            }
        }
        let code = match compile(interpreter, source).await {
            Ok(code) => {
                let mut framed = Vec::with_capacity(code.len() + 4);
                framed.extend_from_slice(&(code.len() as u32).to_le_bytes());
                framed.extend_from_slice(&code);
                tracing::debug!(interpreter = %interpreter.display(), bytes = code.len(), "warm bootstrap compiled");
                Some(Arc::new(framed))
            }
            Err(why) => {
                tracing::warn!(interpreter = %interpreter.display(), %why, "the warm bootstrap could not be compiled ahead; its sandboxes compile it themselves");
                None
            }
        };
        cache.insert(interpreter.to_owned(), (id, code.clone()));
        code
    }
}

/// Run `interpreter` on `source` as the module's comment says; its answer, checked for
/// shape (the magic number's `\r\n`, then a marshalled code object, within [`MAX_CODE`]).
async fn compile(interpreter: &Path, source: &str) -> Result<Vec<u8>, String> {
    let mut cmd = tokio::process::Command::new(interpreter);
    cmd.args(["-I", "-S", "-c", COMPILE])
        .env_clear()
        .current_dir("/")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if nix::unistd::geteuid().is_root() {
        // (std drops the supplementary groups too when it changes the uid.)
        cmd.uid(65534).gid(65534);
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start it: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let run = async {
        let feed = async {
            stdin.write_all(source.as_bytes()).await?;
            drop(stdin);
            Ok::<_, std::io::Error>(())
        };
        let mut out = Vec::new();
        let mut limited = (&mut stdout).take(MAX_CODE as u64 + 1);
        let read = limited.read_to_end(&mut out);
        let (fed, read) = tokio::join!(feed, read);
        fed.and(read).map_err(|e| format!("talking to it: {e}"))?;
        if out.len() > MAX_CODE {
            return Err(format!("its answer is over {MAX_CODE} bytes"));
        }
        let status = child.wait().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, out))
    };
    let (status, out) = tokio::time::timeout(TIMEOUT, run)
        .await
        .map_err(|_| format!("it took over {} s", TIMEOUT.as_secs()))??;
    if !status.success() {
        return Err(format!("it ended with {status}"));
    }
    // A magic number ends in \r\n; marshal writes a code object as b'c' (or b'\xe3',
    // with its reference flag).
    if out.len() < 8 || out[2..4] != *b"\r\n" || !matches!(out[4], b'c' | 0xe3) {
        return Err("its answer is not a marshalled code object".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const PYTHON: &str = "/usr/bin/python3";

    /// A directory the interpreter can be run from as `nobody` (the daemon's tests run
    /// as root).
    fn open_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[tokio::test]
    async fn the_bootstrap_compiles_once_per_interpreter_and_loads_back() {
        let code = WarmCode::default();
        let src = "x = 6 * 7\n";
        let first = code
            .stdin_for(Path::new(PYTHON), src)
            .await
            .expect("compiled");
        let again = code.stdin_for(Path::new(PYTHON), src).await.unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second call is the cache's"
        );
        let len = u32::from_le_bytes(first[..4].try_into().unwrap()) as usize;
        assert_eq!(len, first.len() - 4);
        // The interpreter loads it back, magic number checked, and it runs.
        let check = "import sys, marshal, _frozen_importlib_external as e\n\
            d = sys.stdin.buffer.read()[4:]\n\
            assert d[:4] == e.MAGIC_NUMBER\n\
            g = {}\n\
            exec(marshal.loads(d[4:]), g)\n\
            print(g['x'], marshal.loads(d[4:]).co_filename)\n";
        let mut child = std::process::Command::new(PYTHON)
            .args(["-I", "-S", "-c", check])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&first).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "42 <string>\n");
    }

    #[tokio::test]
    async fn an_interpreter_that_fails_or_answers_nonsense_is_remembered_as_none() {
        let dir = open_dir();
        let cases = [
            ("fails", "#!/bin/sh\nexit 3\n"),
            ("nonsense", "#!/bin/sh\necho not-a-code-object\n"),
            ("flood", "#!/bin/sh\nhead -c 200000 /dev/zero\n"),
        ];
        let code = WarmCode::default();
        for (name, script) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            assert!(code.stdin_for(&path, "x = 1\n").await.is_none(), "{name}");
            assert!(
                code.cache.lock().await.contains_key(&path),
                "{name} remembered"
            );
        }
        assert!(code
            .stdin_for(&dir.path().join("missing"), "x = 1\n")
            .await
            .is_none());
    }

    #[tokio::test]
    async fn a_changed_interpreter_file_is_compiled_again() {
        let dir = open_dir();
        let path = dir.path().join("python");
        std::fs::write(&path, "#!/bin/sh\nexit 1\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let code = WarmCode::default();
        assert!(code.stdin_for(&path, "x = 1\n").await.is_none());
        // Replaced by a working one (another inode): compiled now.
        let fresh = dir.path().join("python.new");
        std::fs::write(&fresh, format!("#!/bin/sh\nexec {PYTHON} \"$@\"\n")).unwrap();
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&fresh, &path).unwrap();
        assert!(code.stdin_for(&path, "x = 1\n").await.is_some());
    }
}
