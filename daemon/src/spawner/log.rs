//! The spawner's own log lines go to the server over the link (`FromSpawner::Log`),
//! which writes them with its `tracing` subscriber: a daemon with `log_format = "json"`
//! writes only JSON, spawner lines included (target `vivariumd::spawner`).
//!
//! The spawner is one thread, and a log line can come from anywhere in it (a namespace
//! guard, a zygote's bookkeeping), so the link is kept here once, as a duplicate of the
//! spawner's own (close-on-exec; every job's init closes it with the rest of the
//! spawner's fds). Before the link exists (the first steps of `main`), or if a send
//! fails, the line goes to stderr as plain text: the daemon's log still gets it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;
use vivarium_sandbox::ipc::{self, FromSpawner, LogLevel};
use vivarium_sandbox::sys;

static LINK: OnceLock<OwnedFd> = OnceLock::new();

/// From now on, log lines go over this link (a duplicate is kept).
pub(super) fn attach(link: BorrowedFd<'_>) {
    if let Ok(fd) = link.try_clone_to_owned() {
        let _ = LINK.set(fd);
    }
}

/// Send one line; stderr if there is no link (yet) or it fails.
pub(super) fn line(level: LogLevel, message: String) {
    let sent = LINK.get().is_some_and(|link| {
        let msg = ipc::encode(&FromSpawner::Log {
            level,
            message: message.clone(),
        });
        sys::send_with_fds(link.as_fd(), &msg, &[]).is_ok()
    });
    if !sent {
        eprintln!("vivariumd spawner: {message}");
    }
}

/// A warning from the spawner: `log_warn!("...", args)`.
macro_rules! log_warn {
    ($($arg:tt)*) => {
        $crate::spawner::log::line(vivarium_sandbox::ipc::LogLevel::Warn, format!($($arg)*))
    };
}

/// An error from the spawner (it goes on, or exits right after).
macro_rules! log_error {
    ($($arg:tt)*) => {
        $crate::spawner::log::line(vivarium_sandbox::ipc::LogLevel::Error, format!($($arg)*))
    };
}

pub(super) use {log_error, log_warn};
