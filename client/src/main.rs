//! `viv`: the command-line client of `vivariumd`. Argument parsing and the commands live in
//! the `cli` module; this file only hands over the exit code.
#![forbid(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main());
}
