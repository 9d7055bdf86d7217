//! The warm path with sandboxes built ahead of time by a cold start, each running
//! exactly one job (the cases are in warm/cases.rs, shared with zygote.rs).
#![forbid(unsafe_code)]

const ZYGOTE: bool = false;

include!("warm/cases.rs");
