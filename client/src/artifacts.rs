//! Artifacts (protocol 8, [`ARTIFACTS_PROTOCOL`]): the files a job or cell returns. The
//! daemon sends each as an `Artifact` header and its bytes in `ArtifactChunk` frames, then
//! one `Artifacts` report; [`Assembler`] turns those into whole [`Artifact`]s, checking
//! that the bytes add up to the announced size.

use vivarium_proto::{ArtifactHeader, ArtifactsReport, Event};

use crate::{ClientError, Result};

/// The protocol version that returns artifacts.
pub const ARTIFACTS_PROTOCOL: u32 = 8;

/// A file the job or cell returned: where it was under `/work`, what the daemon found
/// (size, SHA-256, media type sniffed from the bytes), and the bytes.
///
/// The bytes are the sandboxed code's: treat them as hostile (their path is relative and
/// normalized, but write them only where [`safe_join`]-style checks allow).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub header: ArtifactHeader,
    pub data: Vec<u8>,
}

impl Artifact {
    pub fn path(&self) -> &str {
        &self.header.path
    }

    pub fn media_type(&self) -> &str {
        &self.header.media_type
    }
}

/// What one artifact event made.
#[derive(Debug)]
pub(crate) enum Assembled {
    /// Not an artifact event.
    Other(Event),
    /// A chunk taken; the artifact is not complete yet.
    Partial,
    Artifact(Box<Artifact>),
    Report(Box<ArtifactsReport>),
}

/// Puts artifacts together from their events, in order.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    pending: Option<Artifact>,
}

impl Assembler {
    pub(crate) fn take(&mut self, event: Event) -> Result<Assembled> {
        match event {
            Event::Artifact(header) => {
                if let Some(p) = &self.pending {
                    return Err(short(p));
                }
                let artifact = Artifact {
                    data: Vec::with_capacity(header.size.min(1 << 24) as usize),
                    header: *header,
                };
                if artifact.header.size == 0 {
                    return Ok(Assembled::Artifact(Box::new(artifact)));
                }
                self.pending = Some(artifact);
                Ok(Assembled::Partial)
            }
            Event::ArtifactChunk(bytes) => {
                let Some(p) = self.pending.as_mut() else {
                    return Err(ClientError::Protocol(
                        "an artifact chunk with no artifact announced".into(),
                    ));
                };
                let room = p.header.size - p.data.len() as u64;
                if bytes.len() as u64 > room {
                    return Err(ClientError::Protocol(format!(
                        "artifact {:?} has more bytes than its {} announced",
                        p.header.path, p.header.size
                    )));
                }
                p.data.extend_from_slice(&bytes);
                if p.data.len() as u64 == p.header.size {
                    let done = self.pending.take().expect("pending");
                    return Ok(Assembled::Artifact(Box::new(done)));
                }
                Ok(Assembled::Partial)
            }
            Event::Artifacts(report) => match &self.pending {
                Some(p) => Err(short(p)),
                None => Ok(Assembled::Report(report)),
            },
            other => match &self.pending {
                Some(p) => Err(short(p)),
                None => Ok(Assembled::Other(other)),
            },
        }
    }
}

fn short(p: &Artifact) -> ClientError {
    ClientError::Protocol(format!(
        "artifact {:?} ended after {} of its {} bytes",
        p.header.path,
        p.data.len(),
        p.header.size
    ))
}

/// Join an artifact's `path` onto `dir`, refusing anything that could land outside it:
/// an absolute path, an empty, `.` or `..` component, a NUL or a backslash-free but
/// control-character name. Whether a component of the result is a link is for the
/// writer to check (see `viv run --out`).
pub fn safe_join(dir: &std::path::Path, path: &str) -> Option<std::path::PathBuf> {
    vivarium_proto::files::check_input_path(path).ok()?;
    Some(dir.join(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(path: &str, size: u64) -> Box<ArtifactHeader> {
        Box::new(ArtifactHeader {
            path: path.into(),
            path_lossy: false,
            size,
            sha256: String::new(),
            media_type: "text/plain; charset=utf-8".into(),
        })
    }

    #[test]
    fn chunks_add_up_to_the_announced_size() {
        let mut a = Assembler::default();
        assert!(matches!(
            a.take(Event::Artifact(header("a", 5))).unwrap(),
            Assembled::Partial
        ));
        assert!(matches!(
            a.take(Event::ArtifactChunk(b"ab".to_vec())).unwrap(),
            Assembled::Partial
        ));
        let Assembled::Artifact(done) = a.take(Event::ArtifactChunk(b"cde".to_vec())).unwrap()
        else {
            panic!("complete")
        };
        assert_eq!(done.data, b"abcde");
        // An empty file needs no chunk.
        assert!(matches!(
            a.take(Event::Artifact(header("e", 0))).unwrap(),
            Assembled::Artifact(_)
        ));
        let report = ArtifactsReport::empty(vivarium_proto::ArtifactsStatus::Collected);
        assert!(matches!(
            a.take(Event::Artifacts(Box::new(report))).unwrap(),
            Assembled::Report(_)
        ));
    }

    #[test]
    fn too_many_or_too_few_bytes_are_protocol_errors() {
        let mut a = Assembler::default();
        a.take(Event::Artifact(header("a", 2))).unwrap();
        assert!(a.take(Event::ArtifactChunk(b"abc".to_vec())).is_err());
        let mut a = Assembler::default();
        a.take(Event::Artifact(header("a", 2))).unwrap();
        a.take(Event::ArtifactChunk(b"a".to_vec())).unwrap();
        let report = ArtifactsReport::empty(vivarium_proto::ArtifactsStatus::Collected);
        assert!(a.take(Event::Artifacts(Box::new(report))).is_err());
        let mut a = Assembler::default();
        assert!(a.take(Event::ArtifactChunk(b"a".to_vec())).is_err());
    }

    #[test]
    fn safe_join_stays_inside() {
        let dir = std::path::Path::new("/tmp/out");
        assert_eq!(safe_join(dir, "a/b.png").unwrap(), dir.join("a/b.png"));
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "",
            "a\0b",
        ] {
            assert!(safe_join(dir, bad).is_none(), "{bad:?}");
        }
    }
}
