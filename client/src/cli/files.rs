//! `--file LOCAL[:DEST]` (`viv run`, `viv exec`): host files put under the sandbox's
//! `/work` before the code runs.

use std::io::Read;
use std::path::{Path, PathBuf};

use vivarium_client::proto::files::{check_input_files, check_input_path};
use vivarium_client::proto::InputFile;
use vivarium_client::{format_bytes, InputFileData};

/// The largest local file `--file` reads (the daemon's profile sets the real limits,
/// far lower as a rule; this only keeps viv from reading a disk image into memory).
pub(crate) const MAX_LOCAL_FILE: u64 = 4 << 30;

/// One `--file` argument: the host file, and its path under `/work`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileArg {
    pub(crate) local: PathBuf,
    pub(crate) dest: String,
}

/// Parse `LOCAL[:DEST]`. The split is at the last `:` (so DEST cannot hold one; a LOCAL
/// whose name holds one needs an explicit DEST: `a:b.csv:b.csv`). Without a `:`, DEST is
/// LOCAL's file name (not its directory path). DEST must follow the protocol's path rules:
/// relative to `/work`, normalized, no `.` or `..`.
pub(crate) fn parse_file_arg(text: &str) -> Result<FileArg, String> {
    let (local, dest) = match text.rsplit_once(':') {
        Some((_, "")) => {
            return Err(format!(
                "{text:?} ends with ':' but names no DEST after it: give a path under /work \
                 after the last ':', or no ':' at all"
            ))
        }
        Some((local, dest)) => (local, dest.to_owned()),
        None => {
            let name = Path::new(text).file_name().and_then(|n| n.to_str());
            let Some(name) = name else {
                return Err(format!(
                    "{text:?} has no file name to use under /work: give one as LOCAL:DEST"
                ));
            };
            (text, name.to_owned())
        }
    };
    if local.is_empty() {
        return Err(format!("{text:?} names no LOCAL file before the ':'"));
    }
    check_input_path(&dest).map_err(|e| format!("DEST {dest:?}: {e}"))?;
    Ok(FileArg {
        local: PathBuf::from(local),
        dest,
    })
}

/// Read the `--file`s from the host. The paths are checked together first (twice the
/// same DEST, a file where another needs a directory) so that nothing is read in vain;
/// a LOCAL that is not a readable regular file, or is larger than [`MAX_LOCAL_FILE`], is
/// an error naming it.
pub(crate) fn read_files(args: &[FileArg]) -> Result<Vec<InputFileData>, String> {
    let described: Vec<InputFile> = args
        .iter()
        .map(|a| InputFile {
            path: a.dest.clone(),
            mode: 0,
            len: 0,
        })
        .collect();
    check_input_files(&described).map_err(|e| format!("--file: {e}"))?;
    args.iter()
        .map(|a| {
            Ok(InputFileData::new(
                a.dest.clone(),
                read_local(&a.local, MAX_LOCAL_FILE)?,
            ))
        })
        .collect()
}

/// Read one regular file (symlinks followed: it is the user's own host file) of at most
/// `limit` bytes.
fn read_local(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let name = path.display();
    let cannot = |e: std::io::Error| format!("cannot read --file {name}: {e}");
    // Looked at before opening: opening a FIFO would wait for a writer.
    let meta = std::fs::metadata(path).map_err(cannot)?;
    if !meta.is_file() {
        return Err(format!("--file {name} is not a regular file"));
    }
    let too_large = || {
        format!(
            "--file {name} is larger than {}, more than viv sends",
            format_bytes(limit)
        )
    };
    if meta.len() > limit {
        return Err(too_large());
    }
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(cannot)?;
    if data.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(local: &str, dest: &str) -> FileArg {
        FileArg {
            local: local.into(),
            dest: dest.into(),
        }
    }

    #[test]
    fn dest_defaults_to_the_file_name() {
        assert_eq!(parse_file_arg("data.csv"), Ok(arg("data.csv", "data.csv")));
        assert_eq!(
            parse_file_arg("/home/me/in/data.csv"),
            Ok(arg("/home/me/in/data.csv", "data.csv"))
        );
        assert_eq!(parse_file_arg("../x/y.txt"), Ok(arg("../x/y.txt", "y.txt")));
        assert_eq!(parse_file_arg("dir/"), Ok(arg("dir/", "dir")));
    }

    #[test]
    fn the_split_is_at_the_last_colon() {
        assert_eq!(
            parse_file_arg("/tmp/data.csv:in/d.csv"),
            Ok(arg("/tmp/data.csv", "in/d.csv"))
        );
        assert_eq!(parse_file_arg("a:b.csv:b.csv"), Ok(arg("a:b.csv", "b.csv")));
        // A name with a ':' and no DEST splits too: LOCAL `a`, DEST `b.csv`.
        assert_eq!(parse_file_arg("a:b.csv"), Ok(arg("a", "b.csv")));
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        for (text, want) in [
            ("a.csv:", "names no DEST"),
            (":a.csv", "names no LOCAL"),
            ("/", "no file name"),
            ("..", "no file name"),
            ("a/..", "no file name"),
            ("a:/etc/passwd", "absolute"),
            ("a:../x", "`..` component"),
            ("a:x//y", "empty component"),
            ("a:x/", "empty component"),
        ] {
            let err = parse_file_arg(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn local_files_are_read_or_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f.bin");
        std::fs::write(&f, b"\x00\x01hello").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        let got = read_files(&[
            FileArg {
                local: f.clone(),
                dest: "a/f.bin".into(),
            },
            FileArg {
                local: link,
                dest: "l".into(),
            },
        ])
        .unwrap();
        assert_eq!(
            got[0],
            InputFileData::new("a/f.bin", b"\x00\x01hello".to_vec())
        );
        assert_eq!(got[1].data, b"\x00\x01hello");

        let dir_arg = FileArg {
            local: dir.path().to_owned(),
            dest: "d".into(),
        };
        let err = read_files(&[dir_arg]).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        let missing = FileArg {
            local: dir.path().join("nope"),
            dest: "n".into(),
        };
        let err = read_files(&[missing]).unwrap_err();
        assert!(
            err.contains("cannot read --file") && err.contains("nope"),
            "{err}"
        );
        assert!(read_local(&f, 3).unwrap_err().contains("larger than"));
        let twice = [arg("x", "same"), arg("y", "same")];
        let err = read_files(&twice).unwrap_err();
        assert!(err.contains("\"same\" is given twice"), "{err}");
    }
}
