//! The warm path with sandboxes forked from a zygote: every case of the warm path
//! (warm/cases.rs), and what is the zygote's own.
#![forbid(unsafe_code)]

const ZYGOTE: bool = true;

include!("warm/cases.rs");
