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

/// Which module of this crate may import which (docs/ARCHITECTURE.md, "Crates and
/// modules"), checked on the source text so that an import the wrong way fails here:
/// `entry` > `server` > `policy` > `profile` > `packages`; `spawner`, `egress` and
/// `config` import none of those. (The root's `error_chain` is everyone's.)
#[cfg(test)]
mod layering {
    use std::path::{Path, PathBuf};

    /// What each part of the crate must not name.
    const RULES: &[(&str, &[&str])] = &[
        (
            "packages",
            &[
                "entry", "server", "policy", "profile", "spawner", "egress", "config",
            ],
        ),
        ("profile.rs", &["entry", "server", "policy", "spawner"]),
        ("policy", &["entry", "server", "spawner"]),
        (
            "spawner",
            &["entry", "server", "policy", "profile", "packages"],
        ),
        (
            "egress.rs",
            &[
                "entry", "server", "policy", "profile", "packages", "spawner",
            ],
        ),
        (
            "config.rs",
            &[
                "entry", "server", "policy", "profile", "packages", "spawner",
            ],
        ),
    ];

    fn rust_files(at: &Path, out: &mut Vec<PathBuf>) {
        if at.is_dir() {
            for e in std::fs::read_dir(at).unwrap() {
                rust_files(&e.unwrap().path(), out);
            }
        } else if at.extension().is_some_and(|x| x == "rs") {
            out.push(at.to_owned());
        }
    }

    /// The code lines of `file` (comments dropped) that name one of `modules` from the
    /// crate root: `crate::m`, `super::m` with as many `super`s as the file is deep,
    /// or either inside a `{...}` group.
    fn offending(src: &Path, file: &Path, modules: &[&str]) -> Vec<String> {
        let rel = file.strip_prefix(src).unwrap();
        let mut depth = rel.components().count();
        if rel.file_name().is_some_and(|n| n == "mod.rs") {
            depth -= 1;
        }
        let supers = vec!["super"; depth].join("::");
        let names = modules.join("|");
        let re = regex::Regex::new(&format!(
            r"\b(?:crate|{supers})::(?:\{{[^}}]*\b)?(?:{names})\b"
        ))
        .unwrap();
        let text = std::fs::read_to_string(file).unwrap();
        text.lines()
            .enumerate()
            .filter_map(|(i, line)| {
                let code = line.split("//").next().unwrap_or("");
                re.is_match(code)
                    .then(|| format!("{}:{}: {}", rel.display(), i + 1, line.trim()))
            })
            .collect()
    }

    #[test]
    fn no_module_imports_from_above_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut bad = Vec::new();
        for (part, modules) in RULES {
            let mut files = Vec::new();
            rust_files(&src.join(part), &mut files);
            assert!(!files.is_empty(), "{part} has no sources");
            for f in &files {
                bad.extend(offending(&src, f, modules));
            }
        }
        assert!(bad.is_empty(), "imports the wrong way:\n{}", bad.join("\n"));
    }

    #[test]
    fn the_check_sees_each_form() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("packages");
        std::fs::create_dir(&dir).unwrap();
        for (name, line, depth_ok) in [
            ("a.rs", "use crate::server::Daemon;", false),
            ("b.rs", "use super::super::server::job;", false),
            ("c.rs", "let d: crate::{profile::X, server::Daemon};", false),
            ("mod.rs", "use super::server;", false),
            (
                "d.rs",
                "use super::server; // packages::server: a sibling",
                true,
            ),
            ("e.rs", "// use crate::server::Daemon;", true),
            ("f.rs", "use crate::packages::spec;", true),
        ] {
            let f = dir.join(name);
            std::fs::write(&f, format!("{line}\n")).unwrap();
            let found = offending(tmp.path(), &f, &["server", "profile"]);
            assert_eq!(found.is_empty(), depth_ok, "{name}: {line}: {found:?}");
        }
    }
}
