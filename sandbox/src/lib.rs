//! vivarium-sandbox: what a Vivarium job's processes run, and the messages they exchange.
//!
//! Used by `vivariumd` (the single-threaded spawner and the server that talks to it) and
//! by the zygote library (`vivarium-zygote`). It holds no policy: a job's plan is computed
//! from its profile in `vivariumd` and only executed here. See `docs/ARCHITECTURE.md`.
#![deny(unsafe_code)]

pub mod cgroup;
pub mod plan;
#[allow(unsafe_code)]
pub mod sys;
