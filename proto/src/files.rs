//! The rules an input file's path and mode must follow (protocol 7+), shared by the
//! daemon, which enforces them, and clients, which can say what is wrong before sending.
//!
//! A path is relative to `/work`, `/`-separated and already normalized: the daemon does
//! not resolve anything, it refuses. Inside the sandbox the file is then created one
//! component at a time without following a link (`O_NOFOLLOW`), so that a link already
//! in a session's `/work` is never traversed either.

use crate::InputFile;

/// Longest path, in bytes.
pub const MAX_INPUT_PATH: usize = 1024;
/// Longest component, in bytes (Linux's `NAME_MAX`).
pub const MAX_INPUT_NAME: usize = 255;
/// The paths of one job's files together, in bytes (they travel in the job's plan).
pub const MAX_INPUT_PATHS_TOTAL: usize = 64 * 1024;
/// The most permissive mode an input file may have: no execute bit, no setuid/setgid or
/// sticky bit, no write for group or others.
pub const MAX_INPUT_MODE: u32 = 0o644;
/// What `mode: 0` stands for.
pub const DEFAULT_INPUT_MODE: u32 = 0o644;

/// Why an input file's path or mode is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputPathError {
    #[error("the path is empty")]
    Empty,
    #[error("the path is longer than {MAX_INPUT_PATH} bytes")]
    TooLong,
    #[error("the path is absolute (it must be relative to /work)")]
    Absolute,
    #[error("the path holds a NUL byte")]
    Nul,
    #[error("the path holds a control character")]
    Control,
    #[error("the path has an empty component (`//` or a trailing `/`)")]
    EmptyComponent,
    #[error("the path has a `.` or `..` component")]
    DotComponent,
    #[error("a component of the path is longer than {MAX_INPUT_NAME} bytes")]
    NameTooLong,
    #[error(
        "mode {0:#o} is not allowed (at most 0644: no execute, setuid or group/other write bits)"
    )]
    Mode(u32),
}

/// Check one path: relative, normalized, no NUL or control characters, within the
/// length limits. (A `String` is UTF-8 by construction; bincode refuses anything else.)
pub fn check_input_path(path: &str) -> Result<(), InputPathError> {
    if path.is_empty() {
        return Err(InputPathError::Empty);
    }
    if path.len() > MAX_INPUT_PATH {
        return Err(InputPathError::TooLong);
    }
    if path.starts_with('/') {
        return Err(InputPathError::Absolute);
    }
    if path.contains('\0') {
        return Err(InputPathError::Nul);
    }
    if path.chars().any(char::is_control) {
        return Err(InputPathError::Control);
    }
    for name in path.split('/') {
        match name {
            "" => return Err(InputPathError::EmptyComponent),
            "." | ".." => return Err(InputPathError::DotComponent),
            n if n.len() > MAX_INPUT_NAME => return Err(InputPathError::NameTooLong),
            _ => {}
        }
    }
    Ok(())
}

/// The mode a file gets: `mode`, or [`DEFAULT_INPUT_MODE`] for 0; refused above
/// [`MAX_INPUT_MODE`].
pub fn input_mode(mode: u32) -> Result<u32, InputPathError> {
    match mode {
        0 => Ok(DEFAULT_INPUT_MODE),
        m if m & !MAX_INPUT_MODE != 0 => Err(InputPathError::Mode(m)),
        m => Ok(m),
    }
}

/// Why a set of input files is refused as a whole (each rule names the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputFilesError {
    #[error("input file {path:?}: {error}")]
    Path { path: String, error: InputPathError },
    #[error("input file {0:?} is given twice")]
    Duplicate(String),
    #[error("input file {file:?} would need {dir:?} to be a directory, and it is a file too")]
    FileIsDirectory { file: String, dir: String },
    #[error("the input files' paths exceed {MAX_INPUT_PATHS_TOTAL} bytes together")]
    PathsTooLong,
}

/// Check every file's path and mode, and that no two clash: the same path twice, or a
/// file that another file's path needs as a directory.
pub fn check_input_files(files: &[InputFile]) -> Result<(), InputFilesError> {
    let mut total = 0usize;
    let mut paths = std::collections::HashSet::with_capacity(files.len());
    for f in files {
        check_input_path(&f.path).map_err(|error| InputFilesError::Path {
            path: f.path.clone(),
            error,
        })?;
        input_mode(f.mode).map_err(|error| InputFilesError::Path {
            path: f.path.clone(),
            error,
        })?;
        total += f.path.len() + 1;
        if total > MAX_INPUT_PATHS_TOTAL {
            return Err(InputFilesError::PathsTooLong);
        }
        if !paths.insert(f.path.as_str()) {
            return Err(InputFilesError::Duplicate(f.path.clone()));
        }
    }
    for f in files {
        let mut end = 0;
        while let Some(i) = f.path[end..].find('/') {
            end += i;
            let dir = &f.path[..end];
            if paths.contains(dir) {
                return Err(InputFilesError::FileIsDirectory {
                    file: f.path.clone(),
                    dir: dir.to_owned(),
                });
            }
            end += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> InputFile {
        InputFile {
            path: path.into(),
            mode: 0,
            len: 1,
        }
    }

    #[test]
    fn good_paths_pass() {
        for p in [
            "data.csv",
            "a/b/c.txt",
            "out/plot 1.png",
            "é/名前.txt",
            "..hidden",
            ".config",
            "a..b",
            "back\\slash",
        ] {
            assert_eq!(check_input_path(p), Ok(()), "{p}");
        }
    }

    #[test]
    fn bad_paths_are_refused_with_their_reason() {
        use InputPathError::*;
        let long_name = "x".repeat(256);
        let long_path = "a/".repeat(600);
        for (p, want) in [
            ("", Empty),
            ("/etc/passwd", Absolute),
            ("../x", DotComponent),
            ("a/../../x", DotComponent),
            ("a/./b", DotComponent),
            (".", DotComponent),
            ("..", DotComponent),
            ("a//b", EmptyComponent),
            ("a/", EmptyComponent),
            ("a\0b", Nul),
            ("a\nb", Control),
            ("a\u{7f}", Control),
            (long_name.as_str(), NameTooLong),
            (long_path.as_str(), TooLong),
        ] {
            assert_eq!(check_input_path(p), Err(want), "{p:?}");
        }
    }

    #[test]
    fn modes_are_at_most_0644() {
        assert_eq!(input_mode(0), Ok(0o644));
        assert_eq!(input_mode(0o600), Ok(0o600));
        assert_eq!(input_mode(0o444), Ok(0o444));
        for m in [0o755, 0o4644, 0o666, 0o1644, 0o100, 0o10644] {
            assert_eq!(input_mode(m), Err(InputPathError::Mode(m)), "{m:o}");
        }
    }

    #[test]
    fn clashing_files_are_refused() {
        assert_eq!(
            check_input_files(&[file("a/b"), file("a/c"), file("d")]),
            Ok(())
        );
        assert_eq!(
            check_input_files(&[file("a"), file("a")]),
            Err(InputFilesError::Duplicate("a".into()))
        );
        assert_eq!(
            check_input_files(&[file("a/b/c"), file("a/b")]),
            Err(InputFilesError::FileIsDirectory {
                file: "a/b/c".into(),
                dir: "a/b".into()
            })
        );
        let mut bad = file("x");
        bad.mode = 0o755;
        assert!(matches!(
            check_input_files(&[bad]),
            Err(InputFilesError::Path { path, .. }) if path == "x"
        ));
        let many: Vec<InputFile> = (0..200)
            .map(|i| file(&format!("{i}/{}/{}", "n".repeat(250), "m".repeat(250))))
            .collect();
        assert_eq!(check_input_files(&many), Err(InputFilesError::PathsTooLong));
    }
}
