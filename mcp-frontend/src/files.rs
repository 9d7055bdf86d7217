//! `run_python`'s `files`: input files placed under `/work` before the code runs
//! (protocol 7), given as text or as base64.
//!
//! Everything is checked here before the daemon is contacted, with a tool error that names
//! the file and says how to fix it: the number of files, the size of their content as sent
//! (bounded before anything is decoded, so that a huge argument costs no further
//! allocation), the path rules of [`vivarium_proto::files::check_input_files`] (relative
//! to `/work`, normalized, no clash), `main.py` in a stateless run (the script's own
//! path), and strict base64. The profile's own `[files]` bounds are the daemon's to
//! enforce: its refusal (`InvalidInputFile`) names the file as well.

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine as _;
use rmcp::schemars::JsonSchema;
use serde::Deserialize;
use vivarium_client::InputFileData;
use vivarium_proto::files::{check_input_files, InputFilesError};
use vivarium_proto::InputFile;

/// Files per call the daemon allows by default (`files.max_input_files`).
pub const DEFAULT_MAX_FILES: usize = 100;
/// Bytes per file the daemon allows by default (`files.max_input_file_bytes`).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;
/// Bytes of all the files of a call the daemon allows by default (`files.max_input_bytes`).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 32 << 20;
/// Most files this server takes in one call, whatever the profile: the daemon's bound on
/// `files.max_input_files` (the schema's `maxItems`).
pub const MAX_FILES: usize = 1000;
/// Most bytes of `content` (as sent: the text's UTF-8, or the base64 characters) of all the
/// files of one call together, checked before anything is decoded: the request line limit
/// (`lines::MAX_LINE_BYTES`, 15 MiB), which no request can pass anyway; a bound of its own
/// here so that the decoding never depends on it.
pub const MAX_CONTENT_BYTES: usize = crate::lines::MAX_LINE_BYTES;

/// One input file of a `run_python` call.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars", inline)]
#[serde(deny_unknown_fields)]
pub struct FileArg {
    /// Where the file goes, relative to /work (the script's working directory), e.g.
    /// `data/sales.csv`: `/`-separated, no leading `/`, no `.` or `..` component; missing
    /// directories are made.
    pub path: String,
    /// The file's content: the text itself with `encoding: "text"` (written as UTF-8), or
    /// the bytes in standard base64 with `encoding: "base64"` (alphabet A-Z a-z 0-9 + /,
    /// `=` padding optional, no spaces or line breaks).
    pub content: String,
    /// How `content` is given: `text` (the default) or `base64` (for binary files).
    #[serde(default, deserialize_with = "null_is_text")]
    pub encoding: Encoding,
}

/// `encoding: null` is as if omitted, as for the tool's own optional parameters.
fn null_is_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Encoding, D::Error> {
    Ok(Option::<Encoding>::deserialize(d)?.unwrap_or_default())
}

/// How a file's `content` is given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars", inline)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Text,
    Base64,
}

/// Standard base64, padded or not, and nothing else: no whitespace, no URL-safe alphabet,
/// no stray bits in the last symbol.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(false),
);

/// How to write a path, for the errors.
const PATH_HINT: &str = "Paths are relative to /work, `/`-separated, with no leading `/` and \
                         no empty, `.` or `..` component, e.g. \"data/sales.csv\".";

/// The call's files, checked and decoded; the error is a sentence for the model (without
/// the "invalid arguments" lead, which the caller adds). `stateless`: a run without a
/// session, whose script is `/work/main.py`.
pub fn decode(files: Vec<FileArg>, stateless: bool) -> Result<Vec<InputFileData>, String> {
    let n = files.len();
    if n > MAX_FILES {
        return Err(format!(
            "`files` has {n} files; at most {MAX_FILES} (and the daemon allows \
             {DEFAULT_MAX_FILES} by default). Send fewer files: pack many small ones into \
             one archive and unpack it in the code (zipfile, tarfile)."
        ));
    }
    let content: usize = files.iter().map(|f| f.content.len()).sum();
    if content > MAX_CONTENT_BYTES {
        return Err(format!(
            "the files' content has {content} bytes together; at most {MAX_CONTENT_BYTES} \
             (the request size limit). Send less data, or generate it inside the script."
        ));
    }
    let described: Vec<InputFile> = files
        .iter()
        .map(|f| InputFile {
            path: f.path.clone(),
            mode: 0,
            len: f.content.len() as u64,
        })
        .collect();
    check_input_files(&described).map_err(|e| match e {
        InputFilesError::Path { .. } => format!("{e}. {PATH_HINT}"),
        InputFilesError::Duplicate(_) => {
            format!("{e}: give each path once (a later file cannot replace an earlier one in the same call)")
        }
        InputFilesError::FileIsDirectory { .. } => {
            format!("{e}: one path cannot be both a file and a directory; rename one of them")
        }
        InputFilesError::PathsTooLong => format!("{e}: send fewer files, or shorter paths"),
    })?;
    if stateless {
        if let Some(f) = files.iter().find(|f| f.path == "main.py") {
            return Err(format!(
                "input file {:?}: /work/main.py is the script itself in a run without a \
                 session; give the file another name",
                f.path
            ));
        }
    }
    files
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let data = match f.encoding {
                Encoding::Text => f.content.into_bytes(),
                Encoding::Base64 => BASE64
                    .decode(f.content.as_bytes())
                    .map_err(|e| base64_error(i, &f.path, &f.content, e))?,
            };
            Ok(InputFileData::new(f.path, data))
        })
        .collect()
}

/// The error for file `index` at `path` whose `content` is not strict base64.
fn base64_error(index: usize, path: &str, content: &str, e: base64::DecodeError) -> String {
    use base64::DecodeError as E;
    let at = |offset: usize, byte: u8| {
        let what = match byte {
            b'\n' | b'\r' => "a line break".to_string(),
            b' ' | b'\t' => "a space".to_string(),
            b'-' | b'_' => format!("{:?} (URL-safe base64)", byte as char),
            b'=' => "`=` padding before the end".to_string(),
            b if b.is_ascii_graphic() => format!("{:?}", b as char),
            b => format!("byte {b:#04x}"),
        };
        format!("{what} at offset {offset}")
    };
    let why = match e {
        E::InvalidByte(offset, byte) => at(offset, byte),
        E::InvalidLastSymbol(offset, byte) => format!(
            "the last symbol {:?} at offset {offset} has bits past the data (not canonical base64)",
            byte as char
        ),
        E::InvalidLength(_) => format!(
            "its length ({} characters without padding) cannot be base64: one character too \
             many or too few",
            content.trim_end_matches('=').len()
        ),
        E::InvalidPadding => "the `=` padding is wrong".to_string(),
    };
    format!(
        "files[{index}] ({path:?}): `content` is not valid base64 ({why}). With `encoding: \
         \"base64\"` it must be standard base64 (A-Z a-z 0-9 + /, `=` padding optional) \
         with no spaces or line breaks, as Python's base64.b64encode writes it; for text, \
         use `encoding: \"text\"` and send the text as is."
    )
}

/// The `files` parameter's description: the rules and the caps (the daemon's defaults;
/// a profile may set others).
pub fn description() -> String {
    format!(
        "Input files to place under /work (the script's working directory) before the code \
         runs, e.g. [{{\"path\": \"data/sales.csv\", \"content\": \"<the CSV text>\"}}, \
         {{\"path\": \"img/logo.png\", \"content\": \"iVBORw0KGgo...\", \"encoding\": \"base64\"}}]; \
         the code then opens them by their path (`open(\"data/sales.csv\")`). Each is \
         `path` (relative to /work: no leading `/`, no `.` or `..`; each path once), \
         `content` and `encoding` (`text`, the default, written as UTF-8; or `base64` for \
         binary data). Mode 0644. At most {} files, {} per file and {} together (the \
         daemon's defaults; a profile may set other bounds, and a refusal names the file), \
         and the whole request must stay under {} (about {} of binary data as base64). In \
         a session the files are written before the cell runs and stay in /work for later \
         calls; a file already at the same path is replaced. Better for data than pasting \
         it into `code`. For large or many files, generate or download them in the code \
         when the profile allows.",
        DEFAULT_MAX_FILES,
        mib(DEFAULT_MAX_FILE_BYTES),
        mib(DEFAULT_MAX_TOTAL_BYTES),
        mib(MAX_CONTENT_BYTES as u64),
        mib(MAX_CONTENT_BYTES as u64 / 4 * 3),
    )
}

/// Whole MiB, rounded down (`16 MiB`).
fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, content: &str, encoding: Encoding) -> FileArg {
        FileArg {
            path: path.into(),
            content: content.into(),
            encoding,
        }
    }

    #[test]
    fn text_and_base64_decode_to_their_bytes() {
        let got = decode(
            vec![
                file("data/sales.csv", "a,b\n1,é\n", Encoding::Text),
                file("bin/x.bin", "AAH/", Encoding::Base64),
                file("bin/unpadded", "AAE", Encoding::Base64),
                file("bin/padded", "AAE=", Encoding::Base64),
                file("empty", "", Encoding::Base64),
            ],
            true,
        )
        .unwrap();
        let bytes: Vec<(&str, &[u8])> = got
            .iter()
            .map(|f| (f.path.as_str(), f.data.as_slice()))
            .collect();
        assert_eq!(
            bytes,
            [
                ("data/sales.csv", "a,b\n1,é\n".as_bytes()),
                ("bin/x.bin", &[0, 1, 255][..]),
                ("bin/unpadded", &[0, 1][..]),
                ("bin/padded", &[0, 1][..]),
                ("empty", &[][..]),
            ]
        );
        assert!(got.iter().all(|f| f.mode == 0));
    }

    #[test]
    fn bad_base64_is_refused_naming_the_file() {
        for (content, needle) in [
            ("AAH/\nAAH/", "a line break at offset 4"),
            ("AA H", "a space at offset 2"),
            ("AA-_", "'-' (URL-safe base64) at offset 2"),
            ("A!==", "'!' at offset 1"),
            ("AAAAA", "one character too many or too few"),
            ("AAF=", "has bits past the data"),
            ("A===", "offset"),
        ] {
            let e = decode(
                vec![
                    file("ok.txt", "fine", Encoding::Text),
                    file("img/x.png", content, Encoding::Base64),
                ],
                true,
            )
            .unwrap_err();
            assert!(
                e.starts_with("files[1] (\"img/x.png\"): `content` is not valid base64"),
                "{content:?}: {e}"
            );
            assert!(e.contains(needle), "{content:?}: {e}");
            assert!(e.contains("no spaces or line breaks"), "{e}");
        }
        // The same characters as text are fine.
        assert!(decode(vec![file("a", "AA-_\n", Encoding::Text)], true).is_ok());
    }

    #[test]
    fn bad_paths_and_clashes_are_refused_naming_the_file() {
        for (paths, needle) in [
            (
                vec!["../etc/x"],
                "input file \"../etc/x\": the path has a `.` or `..` component",
            ),
            (
                vec!["/etc/passwd"],
                "input file \"/etc/passwd\": the path is absolute",
            ),
            (vec!["a//b"], "empty component"),
            (vec![""], "the path is empty"),
            (
                vec!["a", "b", "a"],
                "input file \"a\" is given twice: give each path once",
            ),
            (vec!["d", "d/x"], "would need \"d\" to be a directory"),
        ] {
            let files = paths.iter().map(|p| file(p, "x", Encoding::Text)).collect();
            let e = decode(files, false).unwrap_err();
            assert!(e.contains(needle), "{paths:?}: {e}");
        }
        let e = decode(vec![file("x/../y", "", Encoding::Text)], false).unwrap_err();
        assert!(
            e.contains("relative to /work") && e.contains("data/sales.csv"),
            "{e}"
        );
        // main.py is the script of a stateless run, and a file like any other in a session.
        let e = decode(vec![file("main.py", "", Encoding::Text)], true).unwrap_err();
        assert!(e.contains("/work/main.py is the script itself"), "{e}");
        assert!(decode(vec![file("main.py", "", Encoding::Text)], false).is_ok());
        assert!(decode(vec![file("lib/main.py", "", Encoding::Text)], true).is_ok());
    }

    #[test]
    fn oversize_arguments_are_refused_before_decoding() {
        let many = (0..=MAX_FILES)
            .map(|i| file(&format!("f{i}"), "", Encoding::Text))
            .collect();
        let e = decode(many, true).unwrap_err();
        assert!(e.contains("has 1001 files; at most 1000"), "{e}");
        // Over the content cap: refused on the lengths alone, the bad base64 never read.
        let half = "A".repeat(MAX_CONTENT_BYTES / 2 + 1);
        let e = decode(
            vec![
                file("a", &half, Encoding::Text),
                file("b", &(half.clone() + "!"), Encoding::Base64),
            ],
            true,
        )
        .unwrap_err();
        assert!(
            e.contains(&format!("at most {MAX_CONTENT_BYTES}")) && !e.contains("base64"),
            "{e}"
        );
    }

    #[test]
    fn the_description_states_the_caps() {
        let d = description();
        for needle in [
            "relative to /work",
            "no `.` or `..`",
            "100 files",
            "16 MiB per file",
            "32 MiB together",
            "under 15 MiB (about 11 MiB of binary",
            "replaced",
            "stay in /work",
            "\"encoding\": \"base64\"",
        ] {
            assert!(d.contains(needle), "{needle}: {d}");
        }
    }
}
