//! TEST ONLY: `vivariumd` with chosen isolation layers switched off, for the attack
//! suite's detector proofs (`tests/tests/attack_probes.rs`): each escape probe must
//! report ESCAPED once the layer that stops it is gone. Never install or run it
//! elsewhere.
//!
//! `VIVARIUM_TEST_WEAKENED=1 vivariumd-weakened --weaken pid-ns,landlock
//!  --expose /var/tmp/decoy:/etc/shadow[:rw] <vivariumd arguments>`
//!
//! It refuses to start without `VIVARIUM_TEST_WEAKENED=1` or without a weakening, and
//! the daemon lists every dropped layer in each outcome's `not_enforced`. The weakening
//! is a plain argument of `vivariumd::entry::main` (see `vivariumd::policy::weaken`):
//! the production `vivariumd` always passes none, and no config, profile or request
//! can set one.
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::IntoRawFd;
use std::process::ExitCode;
use vivarium_sandbox::ipc::SPAWNER_ARG;
use vivariumd::policy::weaken::{Weakening, TEST_ENV};

fn main() -> ExitCode {
    if std::env::var(TEST_ENV).as_deref() != Ok("1") {
        eprintln!("vivariumd-weakened: a test-only binary; refusing to start without {TEST_ENV}=1");
        return ExitCode::FAILURE;
    }
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == SPAWNER_ARG) {
        // The spawner (re-exec'd from /proc/self/exe) gets its weakened plans from the
        // server over its link. A decoy fd, not close-on-exec, stands for an fd the daemon
        // leaked: init's close-all must remove it unless `close-fds` is switched off.
        if let Ok(f) = std::fs::File::open("/dev/null") {
            let _ = nix::fcntl::fcntl(
                &f,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            );
            let _ = f.into_raw_fd();
        }
        return vivariumd::entry::main(args, Weakening::none());
    }
    let (mut layers, mut exposed, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    let mut it = args.into_iter();
    rest.extend(it.next());
    while let Some(arg) = it.next() {
        let list = match arg.to_str() {
            Some("--weaken") => &mut layers,
            Some("--expose") => &mut exposed,
            _ => {
                rest.push(arg);
                continue;
            }
        };
        match it.next().and_then(|v| v.into_string().ok()) {
            Some(v) => list.push(v),
            None => {
                eprintln!("vivariumd-weakened: {arg:?} needs a value");
                return ExitCode::FAILURE;
            }
        }
    }
    let weakening = match Weakening::parse(&layers, &exposed) {
        Ok(w) if !w.is_empty() => w,
        Ok(_) => {
            eprintln!("vivariumd-weakened: nothing to weaken (use vivariumd)");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("vivariumd-weakened: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "vivariumd-weakened: TEST ONLY, not a sandbox: {:?}",
        weakening.describe()
    );
    vivariumd::entry::main(rest, weakening)
}
