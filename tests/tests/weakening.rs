//! The test-only weakening (`vivariumd::policy::weaken`) cannot be reached from the
//! production binary: `vivariumd` has no option for it (and its config and profile
//! parsers deny unknown keys: a unit test in daemon/src/entry.rs), and the
//! test-only `vivariumd-weakened` refuses to start without its variable or without a
//! weakening. (That every outcome of the real daemon lists no weakening, and every
//! outcome of a weakened one lists its layers, is checked per job in attack_probes.rs.)
#![forbid(unsafe_code)]

use std::process::Command;
use vivarium_e2e::bin;

fn run(cmd: &mut Command) -> (i32, String) {
    let out = cmd.output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_production_daemon_has_no_weakening_option() {
    for args in [
        &["--weaken", "landlock", "--check"][..],
        &["--expose", "/etc:/etc", "--check"][..],
    ] {
        let (code, err) = run(Command::new(bin("vivariumd"))
            .args(args)
            .env("VIVARIUM_TEST_WEAKENED", "1"));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("unexpected argument"), "{err}");
    }
}

#[test]
fn the_weakened_binary_refuses_without_its_variable_or_a_weakening() {
    let (code, err) = run(Command::new(bin("vivariumd-weakened"))
        .args(["--weaken", "landlock", "--check"])
        .env_remove("VIVARIUM_TEST_WEAKENED"));
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("refusing to start without VIVARIUM_TEST_WEAKENED=1"),
        "{err}"
    );
    let (code, err) = run(Command::new(bin("vivariumd-weakened"))
        .arg("--check")
        .env("VIVARIUM_TEST_WEAKENED", "1"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nothing to weaken"), "{err}");
    let (code, err) = run(Command::new(bin("vivariumd-weakened"))
        .args(["--weaken", "no-such-layer", "--check"])
        .env("VIVARIUM_TEST_WEAKENED", "1"));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unknown layer"), "{err}");
}
