//! What a job asks for: PEP 508 requirement strings (explicit, and from the PEP 723
//! `script` block of its code), checked against the profile's `[packages]` settings.

use super::PackageError;
use pep508_rs::{Requirement, VerbatimUrl};
use serde::Deserialize;
use std::str::FromStr;
use vivarium_proto::ErrorCode;

/// At most this many requirements per job, each at most this long.
pub const MAX_REQUIREMENTS: usize = 64;
pub const MAX_REQUIREMENT_LEN: usize = 512;

/// PEP 503 normalization: runs of `-`, `_`, `.` become one `-`, lower case.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// One checked requirement: its normalized project name and its canonical text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub name: String,
    /// `pep508_rs`'s canonical rendering (normalized name, extras, specifiers, marker).
    pub text: String,
}

fn invalid(package: Option<&str>, message: String) -> PackageError {
    PackageError::new(ErrorCode::InvalidRequirement, package, message)
}

/// Parse one PEP 508 string. Direct references (`name @ url`) are refused: only the
/// profile's index and wheelhouse are sources.
pub fn parse_requirement(s: &str) -> Result<Req, PackageError> {
    if s.len() > MAX_REQUIREMENT_LEN {
        return Err(invalid(
            None,
            format!("a requirement is longer than {MAX_REQUIREMENT_LEN} bytes"),
        ));
    }
    if s.contains(['\0', '\n', '\r']) {
        return Err(invalid(
            None,
            format!("requirement {s:?} contains a control character"),
        ));
    }
    let req = Requirement::<VerbatimUrl>::from_str(s.trim())
        .map_err(|e| invalid(None, format!("invalid requirement {s:?}: {e}")))?;
    let name = normalize_name(req.name.as_ref());
    if req
        .version_or_url
        .as_ref()
        .is_some_and(|v| matches!(v, pep508_rs::VersionOrUrl::Url(_)))
    {
        return Err(invalid(
            Some(&name),
            format!("{name}: direct URL references are not allowed; only the profile's index and wheelhouse are used"),
        ));
    }
    let mut text = req.to_string();
    // The name in canonical form, so that `NumPy` and `numpy` share an environment.
    let raw = req.name.to_string();
    if let Some(rest) = text.strip_prefix(&raw) {
        text = format!("{name}{rest}");
    }
    Ok(Req { name, text })
}

/// The PEP 723 `script` block, if any, extracted with the PEP's reference rules:
/// `(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$`.
/// More than one `script` block is an error; blocks of other types are ignored.
pub fn inline_metadata(code: &str) -> Result<Option<Vec<String>>, PackageError> {
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$",
        )
        .expect("the PEP 723 regex compiles")
    });
    let mut found = None;
    for cap in re.captures_iter(code) {
        if &cap["type"] != "script" {
            continue;
        }
        if found.is_some() {
            return Err(invalid(
                None,
                "the code has more than one `# /// script` block (PEP 723)".into(),
            ));
        }
        // Each line loses its leading `#` and, if present, the one space after it.
        let content: String = cap["content"]
            .split_inclusive('\n')
            .map(|line| {
                line.strip_prefix("# ")
                    .or_else(|| line.strip_prefix('#'))
                    .unwrap_or(line)
            })
            .collect();
        found = Some(content);
    }
    let Some(toml_text) = found else {
        return Ok(None);
    };
    #[derive(Deserialize)]
    #[serde(rename_all = "kebab-case")]
    struct Script {
        #[serde(default)]
        dependencies: Vec<String>,
        // Accepted and recorded by PEP 723; the profile fixes the interpreter.
        #[allow(dead_code)]
        requires_python: Option<String>,
        #[allow(dead_code)]
        tool: Option<toml::Table>,
    }
    let script: Script = toml::from_str(&toml_text)
        .map_err(|e| invalid(None, format!("invalid PEP 723 `script` block: {e}")))?;
    Ok(Some(script.dependencies))
}

/// The profile's `[packages]` policy, as far as names go.
pub struct NamePolicy<'a> {
    pub allow: &'a [String],
    pub deny: &'a [String],
}

/// Parse, dedupe and check a job's requirements: explicit ones, then the PEP 723 block.
pub fn requirements(
    explicit: &[String],
    inline: Option<&[String]>,
    policy: &NamePolicy<'_>,
) -> Result<Vec<Req>, PackageError> {
    let all: Vec<&String> = explicit.iter().chain(inline.unwrap_or(&[])).collect();
    if all.len() > MAX_REQUIREMENTS {
        return Err(invalid(
            None,
            format!("{} requirements; at most {MAX_REQUIREMENTS}", all.len()),
        ));
    }
    let mut out: Vec<Req> = Vec::new();
    for s in all {
        let req = parse_requirement(s)?;
        let denied = policy.deny.iter().any(|d| normalize_name(d) == req.name);
        let allowed =
            policy.allow.is_empty() || policy.allow.iter().any(|a| normalize_name(a) == req.name);
        if denied || !allowed {
            return Err(PackageError::new(
                ErrorCode::PackageNotAllowed,
                Some(&req.name),
                format!(
                    "{}: the profile does not allow this project ({})",
                    req.name,
                    if denied {
                        "deny list"
                    } else {
                        "not on the allow list"
                    }
                ),
            ));
        }
        if !out.iter().any(|r| r.text == req.text) {
            out.push(req);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: NamePolicy<'static> = NamePolicy {
        allow: &[],
        deny: &[],
    };

    #[test]
    fn names_are_normalized_per_pep_503() {
        assert_eq!(normalize_name("Friendly-Bard"), "friendly-bard");
        assert_eq!(normalize_name("FRIENDLY_BARD"), "friendly-bard");
        assert_eq!(normalize_name("friendly.bard"), "friendly-bard");
        assert_eq!(normalize_name("FrIeNdLy-._.-bArD"), "friendly-bard");
    }

    #[test]
    fn requirements_parse_and_canonicalize() {
        let r = parse_requirement("NumPy >= 1.26 ; python_version >= '3.8'").unwrap();
        assert_eq!(r.name, "numpy");
        assert!(r.text.starts_with("numpy>=1.26"), "{}", r.text);
        let r = parse_requirement("Requests[socks]==2.*").unwrap();
        assert_eq!(r.name, "requests");
    }

    #[test]
    fn invalid_requirements_are_typed_errors() {
        for bad in [
            "",
            "numpy >>> 1",
            "nu mpy",
            "numpy==1;",
            "x\0y",
            "a @ https://e.invalid/a.whl",
        ] {
            let e = parse_requirement(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequirement, "{bad:?}: {e}");
        }
    }

    #[test]
    fn allow_and_deny_lists_use_normalized_names() {
        let allow = ["NumPy".to_owned()];
        let deny = ["evil_pkg".to_owned()];
        let p = NamePolicy {
            allow: &allow,
            deny: &[],
        };
        assert!(requirements(&["numpy".into()], None, &p).is_ok());
        let e = requirements(&["pandas".into()], None, &p).unwrap_err();
        assert_eq!(
            (e.code, e.package.as_deref()),
            (ErrorCode::PackageNotAllowed, Some("pandas"))
        );
        let p = NamePolicy {
            allow: &[],
            deny: &deny,
        };
        let e = requirements(&["Evil.Pkg>=1".into()], None, &p).unwrap_err();
        assert_eq!(e.code, ErrorCode::PackageNotAllowed);
    }

    #[test]
    fn duplicates_collapse_and_order_is_kept() {
        let r = requirements(
            &["b".into(), "a".into(), "B".into()],
            Some(&["c>=1".into()]),
            &OPEN,
        )
        .unwrap();
        let names: Vec<_> = r.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(names, ["b", "a", "c>=1"]);
    }

    #[test]
    fn pep723_block_is_extracted_and_parsed() {
        let code = "#!/usr/bin/env python\n# /// script\n# requires-python = \">=3.11\"\n# dependencies = [\n#   \"numpy>=1\",\n#   \"rich\",\n# ]\n# ///\nimport numpy\n";
        assert_eq!(
            inline_metadata(code).unwrap(),
            Some(vec!["numpy>=1".to_owned(), "rich".to_owned()])
        );
        // Other block types are ignored; no block is None.
        assert_eq!(
            inline_metadata("# /// other\n# x = 1\n# ///\n").unwrap(),
            None
        );
        assert_eq!(inline_metadata("print(1)\n").unwrap(), None);
        // An empty comment line is allowed inside the block.
        let code = "# /// script\n# dependencies = [\"a\"]\n#\n# ///\n";
        assert_eq!(inline_metadata(code).unwrap(), Some(vec!["a".to_owned()]));
    }

    #[test]
    fn pep723_errors_are_typed() {
        let two =
            "# /// script\n# dependencies = []\n# ///\n# /// script\n# dependencies = []\n# ///\n";
        assert_eq!(
            inline_metadata(two).unwrap_err().code,
            ErrorCode::InvalidRequirement
        );
        let bad_toml = "# /// script\n# dependencies = [\n# ///\n";
        assert_eq!(
            inline_metadata(bad_toml).unwrap_err().code,
            ErrorCode::InvalidRequirement
        );
        let wrong_type = "# /// script\n# dependencies = \"numpy\"\n# ///\n";
        assert_eq!(
            inline_metadata(wrong_type).unwrap_err().code,
            ErrorCode::InvalidRequirement
        );
    }
}
