//! `viv repl` on a pseudo-terminal, as a person uses it: rustyline's raw mode, so ctrl-c
//! at the prompt is a key that clears the line and ctrl-d closes the session.

mod common;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{cell_outcome, handle, serve, session_ended, session_opened};
use vivarium_client::proto::{CellStatus, Event, Request, SessionEndReason};

/// Everything the terminal shows, read on a thread of its own.
struct Screen {
    seen: String,
    rx: mpsc::Receiver<Vec<u8>>,
}

impl Screen {
    fn new(master: OwnedFd) -> Screen {
        let (tx, rx) = mpsc::channel();
        let mut master = std::fs::File::from(master);
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            // EIO once the last slave closes: the end.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Screen {
            seen: String::new(),
            rx,
        }
    }

    /// Wait until the screen shows `want` after what was waited for before.
    fn wait_for(&mut self, want: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !self.seen.contains(want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => panic!("{want:?} never showed; the screen: {:?}", self.seen),
            }
        }
        let at = self.seen.find(want).unwrap() + want.len();
        self.seen.drain(..at);
    }
}

#[tokio::test]
async fn the_repl_on_a_terminal_edits_lines_and_closes_on_ctrl_d() {
    let (_dir, path, daemon) = serve(|mut c| async move {
        c.hello().await;
        assert!(matches!(c.recv().await, Some(Request::OpenSession(_))));
        c.send(session_opened(handle(1))).await;
        // The line cleared by ctrl-c never arrives: the next cell is `6 * 7`.
        let (_, code) = c.exec_cell().await;
        assert_eq!(code, b"6 * 7\n");
        let mut done = cell_outcome(handle(1), 1, CellStatus::Ok);
        done.value = Some("42".into());
        c.send(Event::CellFinished(done)).await;
        assert_eq!(c.recv().await, Some(Request::CloseSession(handle(1))));
        let mut ended = session_ended(handle(1), SessionEndReason::Closed);
        ended.ended_ms_ago = 0;
        c.send(Event::SessionClosed(ended)).await;
    });
    let pty = nix::pty::openpty(None, None).unwrap();
    let state = tempfile::tempdir().unwrap();
    let slave = pty.slave;
    let mut child = Command::new(env!("CARGO_BIN_EXE_viv"))
        .arg("repl")
        .env("VIVARIUM_SOCKET", &path)
        .env("XDG_STATE_HOME", state.path())
        .env("TERM", "xterm")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut keys = std::fs::File::from(pty.master.try_clone().unwrap());
    let mut screen = Screen::new(pty.master);
    let status = tokio::task::spawn_blocking(move || {
        screen.wait_for(">>> ");
        keys.write_all(b"print('never')\x03").unwrap();
        screen.wait_for("KeyboardInterrupt");
        screen.wait_for(">>> ");
        keys.write_all(b"6 * 7\r").unwrap();
        screen.wait_for("42");
        screen.wait_for(">>> ");
        keys.write_all(b"\x04").unwrap();
        screen.wait_for("it was closed");
        child.wait().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(0));
    daemon.await.unwrap();
}
