//! A job's or a cell's input files (protocol 7) on their way into the sandbox: what each
//! file is and their bytes, received whole before the job starts. The rules (paths,
//! modes, the profile's `[files]` bounds) are checked in `conn` before any byte is read;
//! the sandbox places them (`vivarium_sandbox::inputs` for a cold job, `inputs.py` for a
//! warm sandbox and a session).

use vivarium_proto::InputFile;
use vivarium_sandbox::plan::InputPlan;

/// Input files and their bytes, one after the other in the order of `files`.
#[derive(Debug, Default)]
pub struct Inputs {
    pub files: Vec<InputFile>,
    pub bytes: Vec<u8>,
}

impl Inputs {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// The files as the sandbox gets them (mode 0 made 0644).
    pub fn plan(&self) -> Vec<InputPlan> {
        self.files
            .iter()
            .map(|f| InputPlan {
                path: f.path.clone(),
                mode: vivarium_proto::files::input_mode(f.mode).unwrap_or(0o644),
                len: f.len,
            })
            .collect()
    }

    /// The files as a session's cell loop reads them at the head of the cell's stdin
    /// (their bytes copied once, and the originals dropped).
    pub fn into_stream(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes.len() + 64 * self.files.len());
        vivarium_sandbox::plan::input_stream(&mut out, &self.plan(), &self.bytes);
        out
    }
}

/// The bytes that `files` announce together (saturating: a sum past `u64::MAX` is
/// refused as too large anyway).
pub fn announced(files: &[InputFile]) -> u64 {
    files.iter().fold(0u64, |n, f| n.saturating_add(f.len))
}
