//! Input files (protocol 7): bytes a job or a cell finds under `/work` before its code
//! runs. The request names each file (path, mode, length) in its first frame; the bytes
//! follow, after any `CodeChunk`s, as `FileChunk` frames: every file's bytes one after the
//! other, cut into chunks of at most `MAX_PAYLOAD_CHUNK` bytes (a chunk may span files; an
//! empty file adds nothing).

use vivarium_proto::files::check_input_files;
use vivarium_proto::{encode, FrameError, InputFile, Request, MAX_FRAME, MAX_PAYLOAD_CHUNK};

use crate::{ClientError, Result};

/// The protocol version that brought input files.
pub const FILES_PROTOCOL: u32 = 7;

/// One input file of a [`crate::Job`] or [`crate::Cell`]: where it goes, its permission
/// bits and its bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct InputFileData {
    /// Relative to `/work`, `/`-separated and normalized (no empty, `.` or `..`
    /// component, no leading `/`): see [`vivarium_proto::files::check_input_path`].
    pub path: String,
    /// Permission bits, at most `0o644`; 0 means `0o644`.
    pub mode: u32,
    pub data: Vec<u8>,
}

impl InputFileData {
    /// A file at `path` (under `/work`) holding `data`, mode `0o644`.
    pub fn new(path: impl Into<String>, data: impl Into<Vec<u8>>) -> InputFileData {
        InputFileData {
            path: path.into(),
            mode: 0,
            data: data.into(),
        }
    }

    /// The same file with permission bits `mode` (at most `0o644`, e.g. `0o444`).
    pub fn mode(mut self, mode: u32) -> InputFileData {
        self.mode = mode;
        self
    }
}

impl std::fmt::Debug for InputFileData {
    // The bytes can be large: their length says enough.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputFileData")
            .field("path", &self.path)
            .field("mode", &format_args!("{:#o}", self.mode))
            .field("len", &self.data.len())
            .finish()
    }
}

/// What the request's first frame says of `files`, checked against the protocol's rules
/// (a clear error naming the file, before anything is sent).
pub(crate) fn describe(files: &[InputFileData]) -> Result<Vec<InputFile>> {
    let described: Vec<InputFile> = files
        .iter()
        .map(|f| InputFile {
            path: f.path.clone(),
            mode: f.mode,
            len: f.data.len() as u64,
        })
        .collect();
    check_input_files(&described).map_err(ClientError::InvalidInputFiles)?;
    Ok(described)
}

/// The error for a request whose first frame does not fit: the files' paths take the
/// room when the same request without them would fit (`fits_without`), else the request
/// is too large by itself (`error`).
pub(crate) fn head_error(
    files: &[InputFile],
    error: FrameError,
    fits_without: bool,
) -> ClientError {
    match error {
        FrameError::Oversize { .. } if fits_without => ClientError::TooManyInputFiles {
            files: files.len(),
            paths_bytes: files.iter().map(|f| f.path.len()).sum(),
        },
        other => other.into(),
    }
}

/// A request's frames: `head` (the request and its `CodeChunk`s, built and checked up
/// front), then the input files' bytes, cut into `FileChunk` frames as they are sent so
/// that they are never all copied at once.
pub(crate) struct Frames<'a> {
    pub(crate) head: Vec<Vec<u8>>,
    pub(crate) files: Vec<&'a [u8]>,
}

impl<'a> Frames<'a> {
    /// Frames with no input files.
    pub(crate) fn plain(head: Vec<Vec<u8>>) -> Frames<'a> {
        Frames {
            head,
            files: Vec::new(),
        }
    }

    /// The `FileChunk` payloads, in order.
    pub(crate) fn file_chunks(&self) -> FileChunks<'_> {
        FileChunks {
            files: &self.files,
            index: 0,
            offset: 0,
        }
    }

    /// The `FileChunk` frames, encoded one at a time.
    pub(crate) fn file_frames(&self) -> impl Iterator<Item = Result<Vec<u8>, FrameError>> + '_ {
        self.file_chunks().map(|chunk| {
            let frame = encode(&Request::FileChunk(chunk))?;
            debug_assert!(frame.len() <= MAX_FRAME);
            Ok(frame)
        })
    }

    /// Every frame, encoded (for tests: the real sender streams them).
    #[cfg(test)]
    pub(crate) fn all(&self) -> Vec<Vec<u8>> {
        let mut frames = self.head.clone();
        frames.extend(self.file_frames().map(|f| f.unwrap()));
        frames
    }
}

/// The files' bytes, concatenated and cut into pieces of at most `MAX_PAYLOAD_CHUNK`.
pub(crate) struct FileChunks<'f> {
    files: &'f [&'f [u8]],
    index: usize,
    offset: usize,
}

impl Iterator for FileChunks<'_> {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let mut chunk = Vec::new();
        while chunk.len() < MAX_PAYLOAD_CHUNK {
            let Some(file) = self.files.get(self.index) else {
                break;
            };
            let rest = &file[self.offset..];
            let take = rest.len().min(MAX_PAYLOAD_CHUNK - chunk.len());
            if chunk.is_empty() {
                chunk.reserve_exact(take.max(1));
            }
            chunk.extend_from_slice(&rest[..take]);
            self.offset += take;
            if self.offset == file.len() {
                self.index += 1;
                self.offset = 0;
            }
        }
        (!chunk.is_empty()).then_some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_proto::files::InputFilesError;

    fn chunks(files: &[&[u8]]) -> Vec<Vec<u8>> {
        Frames {
            head: Vec::new(),
            files: files.to_vec(),
        }
        .file_chunks()
        .collect()
    }

    #[test]
    fn chunks_span_files_and_skip_empty_ones() {
        let a = vec![1u8; MAX_PAYLOAD_CHUNK - 10];
        let b = vec![2u8; 25];
        let got = chunks(&[&a, &[], &b, &[]]);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].len(), MAX_PAYLOAD_CHUNK);
        assert_eq!(&got[0][MAX_PAYLOAD_CHUNK - 10..], &[2u8; 10]);
        assert_eq!(got[1], vec![2u8; 15]);
        assert!(chunks(&[&[], &[]]).is_empty());
        assert!(chunks(&[]).is_empty());
    }

    #[test]
    fn a_full_chunk_fits_a_frame() {
        let a = vec![0xffu8; 3 * MAX_PAYLOAD_CHUNK];
        let frames = Frames {
            head: Vec::new(),
            files: vec![&a],
        };
        let frames: Vec<_> = frames.file_frames().map(|f| f.unwrap()).collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f.len() <= MAX_FRAME));
    }

    #[test]
    fn broken_rules_name_the_file() {
        let err = describe(&[
            InputFileData::new("ok.txt", "x"),
            InputFileData::new("../x", ""),
        ])
        .unwrap_err();
        assert!(matches!(
            &err,
            ClientError::InvalidInputFiles(InputFilesError::Path { path, .. }) if path == "../x"
        ));
        assert!(err.to_string().contains("\"../x\""), "{err}");
        let err = describe(&[InputFileData::new("x", "").mode(0o755)]).unwrap_err();
        assert!(err.to_string().contains("0o755"), "{err}");
        let ok = describe(&[InputFileData::new("a/b.txt", "hello").mode(0o444)]).unwrap();
        assert_eq!(
            ok,
            [InputFile {
                path: "a/b.txt".into(),
                mode: 0o444,
                len: 5
            }]
        );
    }
}
