//! The daemon's end of a session sandbox's control link: the cell protocol of
//! `sandbox/src/session_bootstrap.py` ([`vivarium_sandbox::plan::SESSION_BOOTSTRAP`]).
//!
//! One `SOCK_SEQPACKET` datagram per message, integers little endian:
//! - daemon -> sandbox: `C` + cell `u32` + code length `u64` with the read end of the
//!   cell's stdin pipe attached (`SCM_RIGHTS`), then `D` + at most [`CODE_CHUNK`] bytes
//!   of code until the length is reached; `I` + cell `u32` interrupts that cell if it is
//!   the one running; closing the link ends the session.
//! - sandbox -> daemon: `R` + JSON, one per cell ([`CellResult`]).
//!
//! Everything that comes from the sandbox is hostile: user code runs in the process that
//! holds the link and can write anything to it. A datagram is read into a bounded
//! buffer, parsed into a typed struct, its strings clamped; fds that come with it are
//! closed; nothing in here panics on what the sandbox sends.

use serde::Deserialize;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{BorrowedFd, OwnedFd};
use tokio_seqpacket::ancillary::AncillaryMessageWriter;
use tokio_seqpacket::UnixSeqpacket;

/// The most code one `D` datagram carries.
pub(crate) const CODE_CHUNK: usize = 60 * 1024;
/// The largest result datagram accepted, `R` included (the bootstrap stays under it).
pub(crate) const MAX_RESULT: usize = 60 * 1024;
/// Field bounds, as the bootstrap cuts them; a longer field is cut again here.
pub(crate) const MAX_VALUE: usize = 16 * 1024;
pub(crate) const MAX_MESSAGE: usize = 4 * 1024;
pub(crate) const MAX_TRACEBACK: usize = 16 * 1024;
pub(crate) const MAX_TYPE_NAME: usize = 512;

/// Room for the fds a hostile sandbox may attach to a datagram (all are closed; the
/// kernel closes the ones that do not fit).
const RECV_FD_SPACE: usize = 256;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The link is closed: the interpreter is gone (or sent an empty datagram, which
    /// reads the same on a seqpacket socket).
    #[error("the session's interpreter is gone")]
    Closed,
    #[error("session link i/o failed")]
    Io(#[source] io::Error),
    /// A datagram that is not a result (the session may go on: it is one datagram).
    #[error("malformed datagram from the session: {reason}")]
    Malformed {
        reason: &'static str,
        #[source]
        source: Option<serde_json::Error>,
    },
}

impl LinkError {
    fn malformed(reason: &'static str) -> Self {
        LinkError::Malformed {
            reason,
            source: None,
        }
    }

    fn from_send(e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => LinkError::Closed,
            _ => LinkError::Io(e),
        }
    }
}

/// How a cell ended, as its interpreter reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CellResult {
    pub cell: u32,
    /// The repr() of the cell's last expression, when it is one and not `None`.
    pub value: Option<String>,
    pub value_truncated: bool,
    pub status: CellStatus,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CellStatus {
    Ok,
    /// Any exception out of the cell: a syntax error, `SystemExit`, and
    /// `KeyboardInterrupt` too (whether it was the daemon's interrupt is the caller's
    /// to decide).
    Exception {
        /// `module.QualName`, or the bare name of a builtin.
        type_name: String,
        message: String,
        /// Starts in the cell's code (for a syntax error: the error alone).
        traceback: String,
        traceback_truncated: bool,
    },
}

/// The JSON of a result datagram, exactly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireResult {
    cell: u32,
    status: WireStatus,
    value: Option<String>,
    value_truncated: bool,
    exc_type: Option<String>,
    exc_message: Option<String>,
    traceback: Option<String>,
    traceback_truncated: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum WireStatus {
    Ok,
    Exception,
}

/// The daemon's end of one session's control link.
pub(crate) struct CellLink {
    sock: UnixSeqpacket,
    /// Held for the datagrams of one cell, so two cells never interleave.
    sending: tokio::sync::Mutex<()>,
}

/// A connected link's two ends as fds: the daemon's (non-blocking, for tokio) and the
/// sandbox's (close-on-exec, blocking: to become the interpreter's fd 0). A warm pool
/// keeps the daemon's as an fd until a session takes the sandbox ([`CellLink::from_fd`]).
pub(crate) fn fd_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    let flags = OFlag::from_bits_retain(fcntl(&ours, FcntlArg::F_GETFL)?);
    fcntl(&ours, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok((ours, theirs))
}

/// A connected link: the daemon's end, and the sandbox's fd (see [`fd_pair`]). Needs a
/// tokio runtime (the daemon's end registers with it).
#[cfg(test)]
pub(crate) fn pair() -> io::Result<(CellLink, OwnedFd)> {
    let (ours, theirs) = fd_pair()?;
    Ok((CellLink::from_fd(ours)?, theirs))
}

impl CellLink {
    /// The daemon's end from [`fd_pair`] (it must be non-blocking).
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        Ok(CellLink::new(UnixSeqpacket::try_from(fd)?))
    }

    pub fn new(sock: UnixSeqpacket) -> Self {
        CellLink {
            sock,
            sending: tokio::sync::Mutex::new(()),
        }
    }

    /// Sends cell `cell`: the `C` datagram with `stdin` (the read end of the cell's
    /// stdin pipe; the sandbox gets its own copy), then the code in `D` datagrams. With
    /// `files`, that many input files come first on the stdin pipe (the caller writes
    /// them there, `Inputs::stream`). With `outputs`, a collection request
    /// (`artifacts::request_bytes`) ends the `C` datagram: the result then comes with the
    /// cell's bundle in a sealed memfd ([`CellLink::next_result_with_bundle`]).
    ///
    /// Not cancel-safe: a cancelled send leaves a partial cell in the sandbox, which it
    /// drops when the next `C` comes (the session stays usable).
    pub async fn send_cell(
        &self,
        cell: u32,
        code: &[u8],
        files: u32,
        stdin: BorrowedFd<'_>,
        outputs: Option<&[u8]>,
    ) -> Result<(), LinkError> {
        let _one_cell = self.sending.lock().await;
        let mut header = Vec::with_capacity(17 + outputs.map_or(0, <[u8]>::len));
        header.push(b'C');
        header.extend_from_slice(&cell.to_le_bytes());
        header.extend_from_slice(&(code.len() as u64).to_le_bytes());
        // (Without files or outputs, the 13-byte form a cell loop of protocol 6 took.)
        if files > 0 || outputs.is_some() {
            header.extend_from_slice(&files.to_le_bytes());
        }
        if let Some(request) = outputs {
            header.extend_from_slice(request);
        }
        if header.len() > MAX_RESULT {
            return Err(LinkError::Io(io::Error::other(
                "the cell's header is too long",
            )));
        }
        let mut space = [0u8; 64];
        let mut anc = AncillaryMessageWriter::new(&mut space);
        anc.add_fds(&[stdin])
            .map_err(|_| LinkError::Io(io::Error::other("ancillary buffer too small")))?;
        self.sock
            .send_vectored_with_ancillary(&[IoSlice::new(&header)], &mut anc)
            .await
            .map_err(LinkError::from_send)?;
        for chunk in code.chunks(CODE_CHUNK) {
            self.sock
                .send_vectored(&[IoSlice::new(b"D"), IoSlice::new(chunk)])
                .await
                .map_err(LinkError::from_send)?;
        }
        Ok(())
    }

    /// Asks the sandbox to interrupt cell `cell` (SIGINT to its main thread), if that
    /// cell is running; ignored otherwise. SIGINT does not stop C code, a blocked
    /// signal or a cell that ignores it: the caller waits, then kills.
    pub async fn interrupt(&self, cell: u32) -> Result<(), LinkError> {
        let mut msg = [0u8; 5];
        msg[0] = b'I';
        msg[1..5].copy_from_slice(&cell.to_le_bytes());
        self.sock
            .send(&msg)
            .await
            .map(drop)
            .map_err(LinkError::from_send)
    }

    /// The next datagram from the sandbox, as a result. Cancel-safe (a datagram is
    /// either received whole or left in the socket), so it can wait in `select!`.
    /// A `Malformed` error is about one datagram: the caller may read on or end the
    /// session.
    #[cfg(test)]
    pub async fn next_result(&self) -> Result<CellResult, LinkError> {
        self.next_result_with_bundle().await.map(|(r, _)| r)
    }

    /// [`CellLink::next_result`], and the first fd that came with it (a cell's bundle;
    /// checked by its reader, [`read_bundle`]). Every other fd is closed.
    pub async fn next_result_with_bundle(
        &self,
    ) -> Result<(CellResult, Option<OwnedFd>), LinkError> {
        // One byte more than the limit: a datagram that fills it is too long (the
        // kernel drops what does not fit).
        let mut buf = vec![0u8; MAX_RESULT + 1];
        let mut space = [0u8; RECV_FD_SPACE];
        let (n, anc) = self
            .sock
            .recv_vectored_with_ancillary(&mut [IoSliceMut::new(&mut buf)], &mut space)
            .await
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ECONNRESET) => LinkError::Closed,
                _ => LinkError::Io(e),
            })?;
        let mut bundle = None;
        for msg in anc.into_messages() {
            if let tokio_seqpacket::ancillary::OwnedAncillaryMessage::FileDescriptors(fds) = msg {
                for fd in fds {
                    if bundle.is_none() {
                        bundle = Some(fd);
                    } // (else dropped: closed)
                }
            }
        }
        if n == 0 {
            return Err(LinkError::Closed);
        }
        parse_result(&buf[..n]).map(|r| (r, bundle))
    }
}

/// Why a cell's bundle fd is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BundleError {
    #[error("the bundle is not a sealed memfd")]
    NotSealed,
    #[error("the bundle is {0} bytes, more than the caps allow")]
    TooLarge(u64),
    #[error("reading the bundle: {0}")]
    Io(#[from] io::Error),
}

/// The bytes of a cell's bundle, as its fd came from the sandbox (hostile): only a
/// regular file sealed against writes, growth and shrinking (a memfd: nothing can
/// change it, and reading it never blocks), of at most `most` bytes.
pub(crate) fn read_bundle(fd: OwnedFd, most: u64) -> Result<Vec<u8>, BundleError> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use std::io::Read;
    let st = nix::sys::stat::fstat(&fd).map_err(io::Error::from)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(BundleError::NotSealed);
    }
    let need = SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK;
    let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(|_| BundleError::NotSealed)?;
    if !SealFlag::from_bits_truncate(seals).contains(need) {
        return Err(BundleError::NotSealed);
    }
    let size = st.st_size as u64;
    if size > most {
        return Err(BundleError::TooLarge(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    let mut file = std::fs::File::from(fd);
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(0))?;
    file.take(size).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A result datagram, checked and clamped.
fn parse_result(datagram: &[u8]) -> Result<CellResult, LinkError> {
    if datagram.len() > MAX_RESULT {
        return Err(LinkError::malformed("datagram too long"));
    }
    let Some(json) = datagram.strip_prefix(b"R") else {
        return Err(LinkError::malformed("not a result"));
    };
    let text = std::str::from_utf8(json).map_err(|_| LinkError::malformed("not utf-8"))?;
    let wire: WireResult = serde_json::from_str(text).map_err(|e| LinkError::Malformed {
        reason: "not a result object",
        source: Some(e),
    })?;
    let (value, value_cut) = clamp_opt(wire.value, MAX_VALUE);
    let status = match wire.status {
        WireStatus::Ok => {
            if wire.exc_type.is_some() || wire.exc_message.is_some() || wire.traceback.is_some() {
                return Err(LinkError::malformed("an ok result with an exception"));
            }
            CellStatus::Ok
        }
        WireStatus::Exception => {
            if value.is_some() {
                return Err(LinkError::malformed("an exception with a value"));
            }
            let Some(type_name) = wire.exc_type else {
                return Err(LinkError::malformed("an exception without a type"));
            };
            let (traceback, traceback_cut) = clamp_opt(wire.traceback, MAX_TRACEBACK);
            CellStatus::Exception {
                type_name: clamp(type_name, MAX_TYPE_NAME).0,
                message: clamp_opt(wire.exc_message, MAX_MESSAGE)
                    .0
                    .unwrap_or_default(),
                traceback: traceback.unwrap_or_default(),
                traceback_truncated: wire.traceback_truncated || traceback_cut,
            }
        }
    };
    Ok(CellResult {
        cell: wire.cell,
        value,
        value_truncated: wire.value_truncated || value_cut,
        status,
    })
}

/// `s` cut to at most `max` bytes at a character boundary; whether it was cut.
fn clamp(mut s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    (s, true)
}

fn clamp_opt(s: Option<String>, max: usize) -> (Option<String>, bool) {
    match s {
        Some(s) => {
            let (s, cut) = clamp(s, max);
            (Some(s), cut)
        }
        None => (None, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    use std::process::{Child, ChildStdout, Command, Stdio};
    use std::time::Duration;
    use tokio::time::timeout;
    use vivarium_sandbox::plan::session_program;

    /// A hang guard only: no test relies on anything being fast.
    const GUARD: Duration = Duration::from_secs(60);

    struct Session {
        link: CellLink,
        child: Child,
        stdout: ChildStdout,
        next: u32,
        _cwd: tempfile::TempDir,
    }

    impl Drop for Session {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    fn pipe() -> (OwnedFd, OwnedFd) {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe")
    }

    /// `/usr/bin/python3 -I -S -c STUB PART... --`, as a sandbox runs it, once it has
    /// written its ready byte.
    async fn start() -> Session {
        start_with(&["-I", "-S"], &[]).await
    }

    async fn start_with(flags: &[&str], preload: &[&str]) -> Session {
        let (link, theirs) = pair().expect("socketpair");
        let cwd = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new("/usr/bin/python3")
            .args(flags)
            .args(session_program())
            .args(preload)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir(cwd.path())
            .spawn()
            .expect("start python");
        let mut stderr = child.stderr.take().expect("stderr");
        let ready = tokio::task::spawn_blocking(move || {
            let mut b = [0u8; 1];
            let got = stderr.read_exact(&mut b).map(|_| b[0]);
            // Keep draining, so a cell that writes to stderr never blocks.
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            got
        });
        let ready = timeout(GUARD, ready).await.expect("ready in time");
        assert_eq!(ready.expect("join").expect("ready byte"), 0);
        let stdout = child.stdout.take().expect("stdout");
        Session {
            link,
            child,
            stdout,
            next: 1,
            _cwd: cwd,
        }
    }

    impl Session {
        /// Sends the next cell with `stdin` as its whole stdin; returns its number.
        async fn send(&mut self, code: &str, stdin: &[u8]) -> u32 {
            let (read, write) = pipe();
            let stdin = stdin.to_vec();
            std::thread::spawn(move || {
                let _ = std::fs::File::from(write).write_all(&stdin);
            });
            self.send_with(code, read).await
        }

        /// Sends the next cell with `stdin` (a pipe's read end) as its stdin.
        async fn send_with(&mut self, code: &str, stdin: OwnedFd) -> u32 {
            let cell = self.next;
            self.next += 1;
            self.link
                .send_cell(cell, code.as_bytes(), 0, stdin.as_fd(), None)
                .await
                .expect("send cell");
            cell
        }

        async fn result(&self) -> CellResult {
            timeout(GUARD, self.link.next_result())
                .await
                .expect("result in time")
                .expect("a result")
        }

        async fn run_with(&mut self, code: &str, stdin: &[u8]) -> CellResult {
            let cell = self.send(code, stdin).await;
            let r = self.result().await;
            assert_eq!(r.cell, cell, "{r:?}");
            r
        }

        async fn run(&mut self, code: &str) -> CellResult {
            self.run_with(code, b"").await
        }

        /// The value of a cell that must succeed.
        async fn value(&mut self, code: &str) -> Option<String> {
            let r = self.run(code).await;
            assert_eq!(r.status, CellStatus::Ok, "{code}: {r:?}");
            r.value
        }

        /// Reads stdout until `line` has come (the cell has reached that point).
        async fn wait_for_line(&mut self, line: &str) {
            let fd = self.stdout.as_fd().try_clone_to_owned().expect("dup");
            let want = format!("{line}\n");
            let seen = tokio::task::spawn_blocking(move || {
                let mut f = std::fs::File::from(fd);
                let mut got = Vec::new();
                let mut b = [0u8; 1];
                while !got.ends_with(want.as_bytes()) {
                    if f.read(&mut b).unwrap_or(0) == 0 {
                        return false;
                    }
                    got.push(b[0]);
                }
                true
            });
            assert!(timeout(GUARD, seen).await.expect("line in time").unwrap());
        }
    }

    fn exception(r: &CellResult) -> (&str, &str, &str, bool) {
        match &r.status {
            CellStatus::Exception {
                type_name,
                message,
                traceback,
                traceback_truncated,
            } => (type_name, message, traceback, *traceback_truncated),
            CellStatus::Ok => panic!("expected an exception: {r:?}"),
        }
    }

    #[tokio::test]
    async fn state_persists_from_one_cell_to_the_next() {
        let mut s = start().await;
        assert_eq!(s.value("x = 41").await, None);
        s.value("import math\ndef f(y):\n    return y + 1").await;
        assert_eq!(
            s.value("f(x) + int(math.sqrt(0))").await.as_deref(),
            Some("42")
        );
        assert_eq!(s.value("__name__").await.as_deref(), Some("'__main__'"));
        // Nothing of the bootstrap's is in the user's namespace.
        assert_eq!(
            s.value("sorted(k for k in globals() if k not in ('x', 'f', 'math', '_'))")
                .await
                .as_deref(),
            Some(
                "['__builtins__', '__doc__', '__loader__', '__name__', '__package__', '__spec__']"
            )
        );
        assert_eq!(
            s.value("import sys; sys.argv").await.as_deref(),
            Some("['']")
        );
        assert_eq!(
            s.value("sys.modules['__main__'] is globals().get('sys').modules['__main__']")
                .await
                .as_deref(),
            Some("True")
        );
    }

    #[tokio::test]
    async fn preloaded_modules_are_imported_before_the_first_cell() {
        let mut s = start_with(&["-I"], &["json", "decimal"]).await;
        assert_eq!(
            s.value("import sys; [m in sys.modules for m in ('json', 'decimal')]")
                .await
                .as_deref(),
            Some("[True, True]")
        );
        assert_eq!(
            s.value("'json' in globals()").await.as_deref(),
            Some("False")
        );
    }

    #[tokio::test]
    async fn no_fd_is_left_behind_from_cell_to_cell() {
        let mut s = start().await;
        let count = "import os; len(os.listdir('/proc/self/fd'))";
        let before = s.value(count).await;
        for _ in 0..30 {
            s.run_with("input()", b"leftover\nlines\n").await;
        }
        assert_eq!(s.value(count).await, before);
    }

    async fn with_fds(link: &CellLink, fds: &[BorrowedFd<'_>], data: &[u8]) {
        let mut space = [0u8; 64];
        let mut anc = AncillaryMessageWriter::new(&mut space);
        anc.add_fds(fds).unwrap();
        link.sock
            .send_vectored_with_ancillary(&[IoSlice::new(data)], &mut anc)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn malformed_datagrams_from_the_daemon_are_ignored_and_their_fds_closed() {
        let mut s = start().await;
        let count = "import os; len(os.listdir('/proc/self/fd'))";
        let before = s.value(count).await;
        let (r1, _w1) = pipe();
        let (r2, _w2) = pipe();
        let mut header = vec![b'C'];
        header.extend_from_slice(&77u32.to_le_bytes());
        header.extend_from_slice(&10u64.to_le_bytes());
        // A cell with two fds, a cell without, unknown and short datagrams, code with no
        // cell, an interrupt with fds attached.
        with_fds(&s.link, &[r1.as_fd(), r2.as_fd()], &header).await;
        s.link.sock.send(&header).await.unwrap();
        for d in [&b"Z"[..], b"I\x01", b"Dcode", b"C\x01\x00\x00\x00"] {
            s.link.sock.send(d).await.unwrap();
        }
        with_fds(&s.link, &[r1.as_fd()], b"I\x4d\x00\x00\x00").await;
        with_fds(&s.link, &[r1.as_fd()], b"Z").await;
        // A cell cut short (as by a cancelled send_cell), then one past its length.
        with_fds(&s.link, &[r1.as_fd()], &header).await;
        s.link.sock.send(b"Dabc").await.unwrap();
        assert_eq!(s.value("1 + 2").await.as_deref(), Some("3"));
        with_fds(&s.link, &[r1.as_fd()], &header).await;
        s.link.sock.send(b"D0123456789abc").await.unwrap();
        assert_eq!(s.value(count).await, before);
    }

    #[tokio::test]
    async fn the_last_expression_is_the_value_unless_a_semicolon_ends_it() {
        let mut s = start().await;
        s.value("x = 'v'").await;
        assert_eq!(s.value("x").await.as_deref(), Some("'v'"));
        assert_eq!(s.value("_").await.as_deref(), Some("'v'"));
        assert_eq!(s.value("x;").await, None);
        assert_eq!(s.value("x ;  # quiet\n").await, None);
        assert_eq!(s.value("print(1)").await, None);
        assert_eq!(s.value("y = 1\n(y +\n 2)").await.as_deref(), Some("3"));
        assert_eq!(
            s.value("y = 2\ny * 3  # a comment\n# another\n\n")
                .await
                .as_deref(),
            Some("6")
        );
        assert_eq!(
            s.value("s = '''a;\nb;'''; s").await.as_deref(),
            Some("'a;\\nb;'")
        );
        assert_eq!(s.value("(x) ;").await, None);
        assert_eq!(s.value("x \\\n ;").await, None);
        assert_eq!(s.value("x  # ;").await.as_deref(), Some("'v'"));
        assert_eq!(s.value("x;\n# a comment").await, None);
        assert_eq!(s.value("x ;\r\n").await, None);
        assert_eq!(
            s.value("z = '\u{2028}\x0c'\r\nz").await.as_deref(),
            Some("'\\u2028\\x0c'")
        );
        assert_eq!(s.value("# only a comment").await, None);
        assert_eq!(s.value("").await, None);
        assert_eq!(s.value("if True:\n    x\n").await, None);
    }

    #[tokio::test]
    async fn top_level_await_runs_to_completion() {
        let mut s = start().await;
        let code =
            "import asyncio\nawait asyncio.sleep(0)\nasync def f():\n    return 7\nawait f()";
        assert_eq!(s.value(code).await.as_deref(), Some("7"));
        let r = s.run("await asyncio.sleep(0)\n1 / 0").await;
        let (ty, _, tb, _) = exception(&r);
        assert_eq!(ty, "ZeroDivisionError");
        assert!(tb.lines().nth(1).unwrap().contains("<cell 2>"), "{tb}");
    }

    #[tokio::test]
    async fn an_exception_is_reported_from_the_cells_code_and_the_loop_goes_on() {
        let mut s = start().await;
        s.value("def g():\n    raise ValueError('boom')").await;
        let r = s.run("y = 1\ng()").await;
        let cell = r.cell;
        let (ty, msg, tb, cut) = exception(&r);
        assert_eq!((ty, msg, cut), ("ValueError", "boom", false));
        let lines: Vec<&str> = tb.lines().collect();
        assert_eq!(lines[0], "Traceback (most recent call last):", "{tb}");
        assert_eq!(
            lines[1],
            format!("  File \"<cell {cell}>\", line 2, in <module>"),
            "{tb}"
        );
        assert_eq!(lines[2].trim(), "g()", "{tb}");
        assert!(tb.contains("  File \"<cell 1>\", line 2, in g"), "{tb}");
        assert!(tb.contains("raise ValueError('boom')"), "{tb}");
        assert!(tb.ends_with("ValueError: boom\n"), "{tb}");
        assert!(!tb.contains("<string>"), "a bootstrap frame: {tb}");
        assert_eq!(s.value("y").await.as_deref(), Some("1"));

        let r = s.run("class E(Exception):\n    pass\nraise E('x')").await;
        assert_eq!(exception(&r).0, "__main__.E");
        let r = s.run("import json\njson.loads('{')").await;
        assert_eq!(exception(&r).0, "json.decoder.JSONDecodeError");
        assert_eq!(
            s.value("import sys; sys.last_type.__name__")
                .await
                .as_deref(),
            Some("'JSONDecodeError'")
        );
        // An exception out of repr() is the cell's.
        let r = s
            .run("class R:\n    def __repr__(self):\n        raise KeyError('r')\nR()")
            .await;
        let (ty, _, tb, _) = exception(&r);
        assert_eq!(ty, "KeyError");
        assert!(tb.lines().nth(1).unwrap().contains("<cell"), "{tb}");
        assert!(!tb.contains("<string>"), "{tb}");
        // linecache.checkcache() does not drop a cell's source.
        let r = s.run("import linecache\nlinecache.checkcache()\ng()").await;
        assert!(
            exception(&r).2.contains("raise ValueError('boom')"),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn cell_sources_are_in_linecache_from_its_first_import() {
        let mut s = start().await;
        // An idle session has imported neither linecache nor tokenize (their ~1 MiB).
        assert_eq!(
            s.value("import sys\nsorted({'linecache', 'tokenize', 're'} & set(sys.modules))")
                .await
                .as_deref(),
            Some("[]")
        );
        s.value("def f(a):\n    return a + 1").await;
        // inspect (and linecache) imported for the first time in the cell that asks.
        assert_eq!(
            s.value("import inspect\ninspect.getsource(f)")
                .await
                .as_deref(),
            Some("'def f(a):\\n    return a + 1\\n'")
        );
        // A traceback printed by the cell's own code shows the cell's lines.
        let r = s
            .run("import io, traceback\nb = io.StringIO()\ntry:\n    f(None)\nexcept TypeError:\n    traceback.print_exc(file=b)\nb.getvalue()")
            .await;
        let tb = r.value.expect("a value");
        assert!(tb.contains("f(None)"), "{tb}");
        assert!(tb.contains("return a + 1"), "{tb}");
        // Even when the cell cleared linecache's cache.
        let r = s
            .run("import linecache\nlinecache.clearcache()\nf(None)")
            .await;
        let tb = exception(&r).2;
        assert!(tb.contains("return a + 1"), "{tb}");
        assert!(
            !tb.contains("<vivarium session>"),
            "a bootstrap frame: {tb}"
        );
    }

    #[tokio::test]
    async fn a_coding_declaration_decodes_the_cell() {
        let mut s = start().await;
        let code = b"# -*- coding: latin-1 -*-\ns = '\xe9t\xe9'\nlen(s), s";
        let cell = s.next;
        s.next += 1;
        let (read, write) = pipe();
        drop(write);
        s.link
            .send_cell(cell, code, 0, read.as_fd(), None)
            .await
            .expect("send");
        let r = s.result().await;
        assert_eq!(r.value.as_deref(), Some("(3, '\u{e9}t\u{e9}')"), "{r:?}");
        // A UTF-8 BOM is dropped; without a declaration the cell is UTF-8.
        assert_eq!(
            s.value("\u{feff}x = '\u{e9}'\nlen(x)").await.as_deref(),
            Some("1")
        );
        // The word "coding" elsewhere changes nothing.
        assert_eq!(
            s.value("coding = 'utf-8'\nlen('\u{e9}t\u{e9}')")
                .await
                .as_deref(),
            Some("3")
        );
    }

    #[tokio::test]
    async fn a_syntax_error_is_reported_alone() {
        let mut s = start().await;
        let r = s.run("x = 1\ny = (").await;
        let cell = r.cell;
        let (ty, _, tb, _) = exception(&r);
        assert_eq!(ty, "SyntaxError");
        assert!(
            tb.starts_with(&format!("  File \"<cell {cell}>\", line 2")),
            "{tb}"
        );
        assert!(tb.contains("y = ("), "{tb}");
        assert!(!tb.contains("Traceback"), "{tb}");
        // Nothing of a cell that does not compile has run.
        let r = s.run("x").await;
        assert_eq!(exception(&r).0, "NameError");
        let r = s.run("return 1").await;
        assert_eq!(exception(&r).0, "SyntaxError");
        let r = s.run("x = 1\0").await;
        assert!(matches!(r.status, CellStatus::Exception { .. }), "{r:?}");
        let r = s.run("# -*- coding: nope -*-\n1").await;
        assert_eq!(exception(&r).0, "SyntaxError");
        assert_eq!(s.value("1 + 1").await.as_deref(), Some("2"));
    }

    #[tokio::test]
    async fn sys_exit_is_an_exception_and_the_session_goes_on() {
        let mut s = start().await;
        s.value("x = 5").await;
        let r = s.run("import sys\nsys.exit(3)").await;
        let (ty, msg, _, _) = exception(&r);
        assert_eq!((ty, msg), ("SystemExit", "3"));
        let r = s.run("raise SystemExit").await;
        assert_eq!(exception(&r).0, "SystemExit");
        assert_eq!(s.value("x").await.as_deref(), Some("5"));
    }

    #[tokio::test]
    async fn each_cell_reads_its_own_stdin_and_nothing_else() {
        let mut s = start().await;
        let r = s.run_with("input()", b"hello\nworld\n").await;
        assert_eq!(r.value.as_deref(), Some("'hello'"), "{r:?}");
        // The line left over is not the next cell's.
        let r = s.run_with("import sys; sys.stdin.read()", b"abc").await;
        assert_eq!(r.value.as_deref(), Some("'abc'"), "{r:?}");
        assert_eq!(s.value("sys.stdin.read()").await.as_deref(), Some("''"));
        let r = s.run_with("sys.stdin.readline()", b"a\nb\n").await;
        assert_eq!(r.value.as_deref(), Some("'a\\n'"));
        assert_eq!(s.value("sys.stdin.read()").await.as_deref(), Some("''"));
        let r = s.run("input()").await;
        assert_eq!(exception(&r).0, "EOFError");
        // A cell that replaced sys.stdin gets a fresh one next time.
        s.value("import io; sys.stdin = io.StringIO('fake')").await;
        let r = s.run_with("sys.stdin.read()", b"real").await;
        assert_eq!(r.value.as_deref(), Some("'real'"));
        // A cell's fd 0 is its pipe; the one before it was closed (a read end left
        // open would keep a writer from seeing EPIPE).
        let r = s
            .run_with("import os; os.readlink('/proc/self/fd/0')", b"")
            .await;
        assert!(r.value.unwrap().contains("pipe:"));
    }

    #[tokio::test]
    async fn an_interrupt_stops_a_sleep_a_busy_loop_and_a_read_and_the_state_survives() {
        let mut s = start().await;
        s.value("import sys, time\nx = 9").await;
        for code in [
            "print('go', flush=True)\ntime.sleep(60)",
            "print('go', flush=True)\nwhile True:\n    pass",
            "print('go', flush=True)\nsys.stdin.read()",
        ] {
            // The pipe stays open: the last cell blocks reading it.
            let (read, write) = pipe();
            let cell = s.send_with(code, read).await;
            s.wait_for_line("go").await;
            s.link.interrupt(cell).await.unwrap();
            let r = s.result().await;
            drop(write);
            assert_eq!(r.cell, cell);
            assert_eq!(exception(&r).0, "KeyboardInterrupt", "{code}: {r:?}");
            assert_eq!(s.value("x").await.as_deref(), Some("9"));
        }
    }

    #[tokio::test]
    async fn an_interrupt_for_another_cell_is_ignored() {
        let mut s = start().await;
        let (read, write) = pipe();
        let code = "import sys\nprint('go', flush=True)\nsys.stdin.readline()";
        let cell = s.send_with(code, read).await;
        s.wait_for_line("go").await;
        s.link.interrupt(cell + 1).await.unwrap();
        s.link.interrupt(cell - 1).await.unwrap();
        // Only so the interrupts are likely read before the line comes (a slow
        // machine makes this test weaker, never flaky).
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::File::from(write).write_all(b"line\n").unwrap();
        let r = s.result().await;
        assert_eq!(
            (r.cell, r.status, r.value.as_deref()),
            (cell, CellStatus::Ok, Some("'line\\n'"))
        );
        // An interrupt once no cell runs is harmless too.
        s.link.interrupt(cell).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(s.value("1").await.as_deref(), Some("1"));
    }

    #[tokio::test]
    async fn an_interrupt_sent_with_the_cell_stops_it() {
        let mut s = start().await;
        s.value("x = 3").await;
        for _ in 0..20 {
            // Read before the cell has started, or as it runs: it stops the cell.
            let cell = s.send("import time\ntime.sleep(60)", b"").await;
            s.link.interrupt(cell).await.unwrap();
            let r = s.result().await;
            assert_eq!((r.cell, exception(&r).0), (cell, "KeyboardInterrupt"));
            assert_eq!(s.value("x").await.as_deref(), Some("3"));
        }
    }

    #[tokio::test]
    async fn an_interrupt_racing_the_end_of_a_cell_never_reaches_the_next() {
        let mut s = start().await;
        s.value("x = 3").await;
        for i in 0..100 {
            // The cell ends just after the line: the interrupt lands in it or after it
            // ended, either is fine; the next cell (no interrupt) must not get it.
            let code =
                format!("sum(range({i} * 100))\nprint('go', flush=True)\nsum(range({i} * 100))");
            let cell = s.send(&code, b"").await;
            s.wait_for_line("go").await;
            s.link.interrupt(cell).await.unwrap();
            let r = s.result().await;
            assert_eq!(r.cell, cell);
            match &r.status {
                CellStatus::Ok => {}
                CellStatus::Exception { type_name, .. } => {
                    assert_eq!(type_name, "KeyboardInterrupt", "{r:?}")
                }
            }
            assert_eq!(s.value("x").await.as_deref(), Some("3"));
        }
    }

    #[tokio::test]
    async fn a_cell_that_ignores_sigint_keeps_running_until_killed() {
        let mut s = start().await;
        let code = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('go', flush=True)\ntime.sleep(60)";
        let cell = s.send(code, b"").await;
        s.wait_for_line("go").await;
        s.link.interrupt(cell).await.unwrap();
        let waited = timeout(Duration::from_millis(500), s.link.next_result()).await;
        assert!(waited.is_err(), "the cell ended: {waited:?}");
        s.child.kill().unwrap();
        s.child.wait().unwrap();
        let r = timeout(GUARD, s.link.next_result()).await.expect("in time");
        assert!(matches!(r, Err(LinkError::Closed)), "{r:?}");
    }

    #[tokio::test]
    async fn a_user_sigint_handler_is_kept_from_cell_to_cell() {
        let mut s = start().await;
        s.value(
            "import signal\nhits = []\nsignal.signal(signal.SIGINT, lambda *a: hits.append(1))",
        )
        .await;
        let code = "import time\nprint('go', flush=True)\nwhile not hits:\n    time.sleep(0.01)\nlen(hits)";
        let cell = s.send(code, b"").await;
        s.wait_for_line("go").await;
        s.link.interrupt(cell).await.unwrap();
        let r = s.result().await;
        assert_eq!(r.value.as_deref(), Some("1"), "{r:?}");
    }

    #[tokio::test]
    async fn long_values_messages_and_tracebacks_are_cut_and_flagged() {
        let mut s = start().await;
        let r = s.run("'x' * 100000").await;
        assert!(r.value_truncated);
        let v = r.value.unwrap();
        assert!(v.len() <= MAX_VALUE && v.starts_with("'xxx"), "{}", v.len());
        let r = s.run("'\u{e9}' * 100000").await;
        assert!(r.value_truncated && r.value.unwrap().len() <= MAX_VALUE);
        assert_eq!(s.value("len(_)").await.as_deref(), Some("100000"));
        // Control characters grow sixfold in JSON: still one datagram under the limit.
        let r = s.run("raise ValueError('\\x01' * 100000)").await;
        let (ty, msg, tb, cut) = exception(&r);
        assert_eq!(ty, "ValueError");
        assert!(cut && msg.len() <= MAX_MESSAGE && tb.len() <= MAX_TRACEBACK);
        assert!(
            tb.starts_with("Traceback") && tb.contains("omitted"),
            "{tb}"
        );
        let r = s.run("def f(n):\n    return f(n + 1)\nf(0)").await;
        let (ty, _, tb, _) = exception(&r);
        assert_eq!(ty, "RecursionError");
        assert!(
            tb.starts_with("Traceback") && tb.ends_with("recursion depth exceeded\n"),
            "{tb}"
        );
        // Lone surrogates are escaped, not a UTF-8 error on either side.
        assert_eq!(s.value("'\\ud800'").await.as_deref(), Some("'\\ud800'"));
        let r = s.run("raise ValueError('\\ud800')").await;
        assert_eq!(exception(&r).1, "\\ud800");
    }

    #[tokio::test]
    async fn a_long_cell_arrives_whole() {
        let mut s = start().await;
        let code = format!("x = '{}'\nlen(x)", "a".repeat(3 * CODE_CHUNK + 17));
        assert_eq!(
            s.value(&code).await,
            Some((3 * CODE_CHUNK + 17).to_string())
        );
    }

    #[tokio::test]
    async fn stdout_is_in_the_pipe_when_the_result_comes() {
        let mut s = start().await;
        s.value("import sys\nprint('hello')\nsys.stdout.write('x' * 10)")
            .await;
        let mut fd = std::fs::File::from(s.stdout.as_fd().try_clone_to_owned().unwrap());
        let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(flags)).unwrap();
        let mut got = vec![0u8; 4096];
        let n = fd.read(&mut got).expect("stdout is there, unread");
        assert_eq!(&got[..n], b"hello\nxxxxxxxxxx");
        // A cell that replaces sys.stdout or moves away does not break the loop.
        s.value("import io, os\nsys.stdout = io.StringIO()\nos.chdir('/')\nprint('lost')")
            .await;
        assert_eq!(s.value("os.getcwd()").await.as_deref(), Some("'/'"));
        s.value("import threading\nthreading.Thread(target=lambda: None).start()")
            .await;
        assert_eq!(
            s.value("sys.stdout.getvalue()").await.as_deref(),
            Some("'lost\\n'")
        );
        s.value("class Bad:\n    def write(self, s): raise OSError('w')\n    def flush(self): raise OSError('f')\nsys.stdout = Bad()")
            .await;
        assert_eq!(s.value("2 + 2").await.as_deref(), Some("4"));
    }

    #[tokio::test]
    async fn lies_and_garbage_from_user_code_are_results_or_errors() {
        let mut s = start().await;
        let forge = r#"
import os, socket, stat
ctl = [fd for fd in range(3, 1024) if os.path.exists(f'/proc/self/fd/{fd}')
       and stat.S_ISSOCK(os.fstat(fd).st_mode)]
s = socket.socket(fileno=os.dup(ctl[0]))
s.send(b'R{"cell": 999, "status": "ok", "value": "lie", "value_truncated": false, "exc_type": null, "exc_message": null, "traceback": null, "traceback_truncated": false}')
s.send(b'\xff\xfe garbage')
s.send(b'R' + b'[' * 50000)
"#;
        let cell = s.send(forge, b"").await;
        let lie = s.result().await;
        assert_eq!((lie.cell, lie.value.as_deref()), (999, Some("lie")));
        for _ in 0..2 {
            let r = timeout(GUARD, s.link.next_result()).await.unwrap();
            assert!(matches!(r, Err(LinkError::Malformed { .. })), "{r:?}");
        }
        let r = s.result().await;
        assert_eq!((r.cell, r.status), (cell, CellStatus::Ok));
        assert_eq!(s.value("2").await.as_deref(), Some("2"));
    }

    fn ok_json(cell: &str, value: &str) -> String {
        format!(
            r#"R{{"cell": {cell}, "status": "ok", "value": {value}, "value_truncated": false, "exc_type": null, "exc_message": null, "traceback": null, "traceback_truncated": false}}"#
        )
    }

    /// A cell's bundle is read only from a memfd sealed against change, within the caps:
    /// an unsealed one, a pipe (whose reader could block) or a larger one is refused.
    #[test]
    fn a_bundle_fd_is_read_only_when_sealed_and_within_bounds() {
        use nix::fcntl::{fcntl, FcntlArg, SealFlag};
        use nix::sys::memfd::{memfd_create, MFdFlags};
        use std::io::Write;
        let memfd = |data: &[u8], seal: bool| {
            let fd =
                memfd_create("t", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).unwrap();
            let mut f = std::fs::File::from(fd);
            f.write_all(data).unwrap();
            let fd = OwnedFd::from(f);
            if seal {
                let seals =
                    SealFlag::F_SEAL_WRITE | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SHRINK;
                fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).unwrap();
            }
            fd
        };
        assert_eq!(
            read_bundle(memfd(b"VIVOUT1\n", true), 100).unwrap(),
            b"VIVOUT1\n"
        );
        assert!(matches!(
            read_bundle(memfd(b"x", false), 100),
            Err(BundleError::NotSealed)
        ));
        assert!(matches!(
            read_bundle(memfd(&[0; 101], true), 100),
            Err(BundleError::TooLarge(101))
        ));
        let (r, _w) = nix::unistd::pipe().unwrap();
        assert!(matches!(read_bundle(r, 100), Err(BundleError::NotSealed)));
        let file = tempfile::tempfile().unwrap();
        assert!(matches!(
            read_bundle(file.into(), 100),
            Err(BundleError::NotSealed)
        ));
    }

    #[tokio::test]
    async fn hostile_datagrams_never_panic_next_result() {
        let (a, b) = UnixSeqpacket::pair().unwrap();
        let link = CellLink::new(a);
        let ok = ok_json("1", "null");
        let hostile: Vec<Vec<u8>> = vec![
            vec![b'R'; MAX_RESULT + 10_000],
            b"R".to_vec(),
            b"R{".to_vec(),
            b"Rnull".to_vec(),
            b"R[]".to_vec(),
            b"R\xff\xff".to_vec(),
            b"X{}".to_vec(),
            format!("R{}", "[".repeat(60_000)).into_bytes(),
            ok_json("-1", "null").into_bytes(),
            ok_json("4294967296", "null").into_bytes(),
            ok_json("\"1\"", "null").into_bytes(),
            ok_json("1", "7").into_bytes(),
            ok_json("1", "\"\\ud800\"").into_bytes(),
            ok.replace("\"ok\"", "\"maybe\"").into_bytes(),
            ok.replace("\"exc_type\": null", "\"exc_type\": \"E\"")
                .into_bytes(),
            ok.replace("\"status\": \"ok\"", "\"status\": \"exception\"")
                .into_bytes(),
            ok.replace('}', ", \"extra\": 1}").into_bytes(),
            ok.replace("\"value_truncated\": false, ", "").into_bytes(),
            ok.replace("\"cell\": 1", "\"cell\": 1, \"cell\": 2")
                .into_bytes(),
            format!("{ok} trailing").into_bytes(),
        ];
        for d in &hostile {
            b.send(d).await.unwrap();
            let r = timeout(GUARD, link.next_result()).await.unwrap();
            assert!(
                matches!(r, Err(LinkError::Malformed { .. })),
                "{:?}: {r:?}",
                String::from_utf8_lossy(&d[..d.len().min(80)])
            );
        }
        // An oversize value is clamped and flagged; an attached fd is closed, not kept.
        let long_value = ok_json("1", &format!("\"{}\"", "v".repeat(50_000)));
        let (pr, pw) = pipe();
        let mut space = [0u8; 64];
        let mut anc = AncillaryMessageWriter::new(&mut space);
        anc.add_fds(&[pr.as_fd()]).unwrap();
        b.send_vectored_with_ancillary(&[IoSlice::new(long_value.as_bytes())], &mut anc)
            .await
            .unwrap();
        drop(pr);
        let r = timeout(GUARD, link.next_result()).await.unwrap().unwrap();
        assert!(r.value_truncated && r.value.unwrap().len() == MAX_VALUE);
        // Every read end is closed: writing to the pipe fails with EPIPE.
        let wrote = std::fs::File::from(pw).write(b"x");
        assert_eq!(wrote.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        let e = r#"R{"cell": 2, "status": "exception", "value": null, "value_truncated": false, "exc_type": "E", "exc_message": null, "traceback": null, "traceback_truncated": false}"#;
        b.send(e.as_bytes()).await.unwrap();
        let r = timeout(GUARD, link.next_result()).await.unwrap().unwrap();
        assert_eq!(
            r.status,
            CellStatus::Exception {
                type_name: "E".into(),
                message: String::new(),
                traceback: String::new(),
                traceback_truncated: false
            }
        );
        drop(b);
        let r = timeout(GUARD, link.next_result()).await.unwrap();
        assert!(matches!(r, Err(LinkError::Closed)), "{r:?}");
        assert!(matches!(link.interrupt(1).await, Err(LinkError::Closed)));
    }

    #[test]
    fn clamping_cuts_at_a_character_boundary() {
        assert_eq!(clamp("ab".into(), 2), ("ab".into(), false));
        assert_eq!(clamp("a\u{e9}".into(), 2), ("a".into(), true));
        assert_eq!(clamp("\u{e9}\u{e9}".into(), 3), ("\u{e9}".into(), true));
    }
}
