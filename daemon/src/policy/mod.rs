//! The policy side of a job's sandbox: what a profile asks for, turned into the data that
//! `vivarium_sandbox` executes. Seccomp compilation ([`seccomp`]) lives here; installing
//! the compiled filters is the sandbox crate's. The attack suite's test-only weakening
//! ([`weaken`]) is a transform of the plans built here.

pub mod plan;
pub mod seccomp;
pub mod weaken;
