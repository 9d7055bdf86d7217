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

/// The error-chain printer every crate here uses (one copy, in `vivarium_proto`).
pub use vivarium_proto::error_chain;
