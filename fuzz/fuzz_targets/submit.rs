//! A client's frame as the daemon treats it before anything runs: decode a `Request`, and
//! for a `Submit`, apply its limit overrides to the shipped default profile with
//! `Profile::job_limits`. Accepted limits must lie in 1..=the profile's maximum, field by
//! field; a refusal must name a field that really is zero or looser than the profile.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vivarium_proto::{decode, Code, LimitOverrides, Request};
use vivariumd::profile::Profile;

fn profile() -> &'static Profile {
    static PROFILE: OnceLock<Profile> = OnceLock::new();
    PROFILE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../profiles/default.toml");
        Profile::load(std::path::Path::new(path)).expect("the shipped default profile loads")
    })
}

fn check_limits(o: &LimitOverrides) {
    let p = profile();
    let max = p.max_limits();
    let fields = [
        ("wall_ms", o.wall_ms, max.wall_ms),
        ("cpu_ms", o.cpu_ms, max.cpu_ms),
        ("memory_bytes", o.memory_bytes, max.memory_bytes),
        ("pids", o.pids.map(u64::from), u64::from(max.pids)),
        ("output_bytes", o.output_bytes, max.output_bytes),
    ];
    let bad = |req: Option<u64>, max: u64| req.is_some_and(|v| v == 0 || v > max);
    match p.job_limits(o) {
        Ok(l) => {
            let got = [
                l.wall_ms,
                l.cpu_ms,
                l.memory_bytes,
                u64::from(l.pids),
                l.output_bytes,
            ];
            for ((name, req, max), got) in fields.iter().zip(got) {
                assert!(!bad(*req, *max), "{name}: {req:?} accepted over {max}");
                assert!((1..=*max).contains(&got), "{name} = {got}, max {max}");
                assert_eq!(got, req.unwrap_or(*max), "{name}");
            }
        }
        Err(e) => {
            let (_, req, max) = fields
                .iter()
                .find(|(name, ..)| *name == e.field)
                .unwrap_or_else(|| panic!("refusal names an unknown field {:?}", e.field));
            assert!(bad(*req, *max), "{} refused: {e}", e.field);
            assert_eq!((Some(e.requested), e.max), (*req, *max));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(req) = decode::<Request>(data) else {
        return;
    };
    if let Request::Submit(spec) = req {
        check_limits(&spec.limits);
        // What the connection checks next, on inline code: it must not panic either.
        if let Code::Inline(code) = &spec.code {
            let _ = std::str::from_utf8(code);
        }
        let _ = spec.args.iter().any(|a| a.contains('\0'));
    }
});
