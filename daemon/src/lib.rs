//! vivariumd: the Vivarium sandbox daemon.
//!
//! Two processes share this crate: the tokio [`server`] (untrusted bytes, no privileged
//! step) and the single-threaded, privileged [`spawner`] that builds each job's
//! sandbox with the `vivarium_sandbox` crate, from the plan its [`policy`] computed. See
//! `docs/ARCHITECTURE.md`.
#![deny(unsafe_code)]

pub mod config;
pub mod egress;
pub mod entry;
pub mod packages;
pub mod policy;
pub mod profile;
pub mod server;
pub mod spawner;

/// Render an error with its whole `source()` chain, for the edge of the program.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
