//! `vivariumd`: the daemon with every isolation layer (see `vivariumd::entry`).

fn main() -> std::process::ExitCode {
    // Always the full sandbox: the test-only weakening is not reachable from here.
    vivariumd::entry::main(
        std::env::args_os().collect(),
        vivariumd::policy::weaken::Weakening::none(),
    )
}
