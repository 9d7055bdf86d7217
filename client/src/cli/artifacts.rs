//! What `viv run` and `viv exec` do with the artifacts a job or cell returns: save them
//! under `--out DIR`, list them for `--json`, and say on stderr what was not saved or
//! not returned.

use std::path::PathBuf;

use serde::Serialize;
use vivarium_client::proto::{ArtifactHeader, ArtifactsReport, ArtifactsStatus, Outputs, SkipKind};
use vivarium_client::{format_bytes, Artifact, EXIT_REFUSED};

use super::out_dir::{OutDir, SaveError};
use super::OutputArgs;

/// At most this many lines about skipped or unsaved artifacts, then "and N more".
const MAX_LINES: usize = 20;

/// What to ask for: `--no-outputs`, the `--out-pattern`s, or the default (`/work/out`).
pub(crate) fn outputs(args: &OutputArgs) -> Outputs {
    if args.no_outputs {
        Outputs::None
    } else if args.patterns.is_empty() {
        Outputs::Default
    } else {
        Outputs::Patterns(args.patterns.clone())
    }
}

/// One artifact as `--json` lists it: its header, where it was saved, or why not.
#[derive(Debug, Serialize)]
pub(crate) struct ListedArtifact {
    #[serde(flatten)]
    pub(crate) header: ArtifactHeader,
    /// DIR/path, when `--out DIR` wrote it.
    pub(crate) saved: Option<PathBuf>,
    /// Why `--out` did not write it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
}

/// The artifacts of one job or cell, as they arrive.
#[derive(Debug)]
pub(crate) struct Artifacts {
    out: Option<OutDir>,
    pub(crate) listed: Vec<ListedArtifact>,
    pub(crate) report: Option<ArtifactsReport>,
    failures: usize,
    /// Whether outputs were asked for (not `--no-outputs`).
    requested: bool,
}

impl Artifacts {
    /// Open `--out DIR` (before anything is sent: a DIR that cannot be made costs no run).
    pub(crate) fn new(args: &OutputArgs) -> Result<Artifacts, SaveError> {
        let out = match &args.out {
            Some(dir) => Some(OutDir::open(dir, args.force)?),
            None => None,
        };
        Ok(Artifacts {
            out,
            listed: Vec::new(),
            report: None,
            failures: 0,
            requested: outputs(args) != Outputs::None,
        })
    }

    /// Save one artifact (with `--out`), keep its listing, drop its bytes.
    pub(crate) fn take(&mut self, artifact: Artifact) {
        let (saved, error) = match &self.out {
            None => (None, None),
            Some(dir) => match dir.save(&artifact.header.path, &artifact.data) {
                Ok(at) => (Some(at), None),
                Err(e) => {
                    eprintln!("viv: {}", super::error_chain(&e));
                    self.failures += 1;
                    (None, Some(super::error_chain(&e)))
                }
            },
        };
        self.listed.push(ListedArtifact {
            header: artifact.header,
            saved,
            error,
        });
    }

    pub(crate) fn set_report(&mut self, report: ArtifactsReport) {
        self.report = Some(report);
    }

    /// Say on stderr what was not returned and, without `--out` or `--json`, what was
    /// returned but not saved. Returns the exit code: `code`, or [`EXIT_REFUSED`] when
    /// `code` is 0 and an artifact could not be written.
    pub(crate) fn finish(&self, code: i32, json: bool) -> i32 {
        let unsaved = if self.out.is_none() && !json {
            Some(self.listed.iter().map(|a| a.header.path.as_str()))
        } else {
            None
        };
        for line in report_lines(self.report.as_ref(), unsaved) {
            eprintln!("viv: {line}");
        }
        if let (Some(dir), None, true) = (&self.out, &self.report, self.requested) {
            // A daemon before protocol 8 runs the job and returns no artifacts.
            eprintln!(
                "viv: the daemon returned no artifacts (protocol {} needed): nothing written under {}",
                vivarium_client::ARTIFACTS_PROTOCOL,
                dir.path().display()
            );
        }
        if self.failures > 0 {
            eprintln!(
                "viv: {} of {} artifacts not written (the others were)",
                self.failures,
                self.listed.len()
            );
            if code == 0 {
                return EXIT_REFUSED;
            }
        }
        code
    }
}

/// The stderr lines about artifacts: the ones not saved (`unsaved`, without `--out`),
/// each skipped entry (bounded by [`MAX_LINES`]), the omitted count, the walk's bounds,
/// and a collection that did not run.
pub(crate) fn report_lines<'a>(
    report: Option<&ArtifactsReport>,
    unsaved: Option<impl Iterator<Item = &'a str>>,
) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(unsaved) = unsaved {
        let names: Vec<&str> = unsaved.collect();
        if !names.is_empty() {
            let shown = names.iter().take(5).copied().collect::<Vec<_>>().join(", ");
            let more = if names.len() > 5 {
                format!(", and {} more", names.len() - 5)
            } else {
                String::new()
            };
            lines.push(format!(
                "{} {} not saved ({shown}{more}): pass --out DIR to save, or --no-outputs",
                names.len(),
                plural(names.len(), "artifact", "artifacts"),
            ));
        }
    }
    let Some(report) = report else {
        return lines;
    };
    if let ArtifactsStatus::NotCollected(why) = &report.status {
        lines.push(format!("artifacts not collected: {why}"));
    }
    for s in report.skipped.iter().take(MAX_LINES) {
        let what = match s.kind {
            SkipKind::TooLarge => format!(
                "{}, larger than the {} per file",
                format_bytes(s.size),
                format_bytes(report.max_file_bytes)
            ),
            SkipKind::OverTotal => format!(
                "{} would pass the {} in all",
                format_bytes(s.size),
                format_bytes(report.max_total_bytes)
            ),
            SkipKind::Unreadable => match s.errno {
                Some(errno) => format!(
                    "unreadable ({})",
                    nix::errno::Errno::from_raw(errno as i32).desc()
                ),
                None => "unreadable".into(),
            },
            kind => format!("a {}", kind.as_str()),
        };
        lines.push(format!("artifact {} skipped: {what}", s.path));
    }
    if report.skipped.len() > MAX_LINES {
        lines.push(format!(
            "and {} more skipped",
            report.skipped.len() - MAX_LINES
        ));
    }
    if report.omitted > 0 {
        lines.push(format!(
            "{} more matching {} not returned (at most {} files are)",
            report.omitted,
            plural(report.omitted as usize, "entry", "entries"),
            report.max_files
        ));
    }
    if report.walk_limit {
        lines.push("the artifact walk stopped at its bound of entries: there may be more".into());
    }
    if report.depth_limit {
        lines.push(
            "a directory deeper than 32 levels or a path longer than 4096 bytes was left out"
                .into(),
        );
    }
    lines
}

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vivarium_client::proto::SkippedArtifact;

    fn skipped(path: &str, kind: SkipKind, size: u64) -> SkippedArtifact {
        SkippedArtifact {
            path: path.into(),
            path_lossy: false,
            kind,
            size,
            errno: None,
        }
    }

    fn report() -> ArtifactsReport {
        ArtifactsReport {
            max_files: 100,
            max_file_bytes: 1 << 20,
            max_total_bytes: 8 << 20,
            ..ArtifactsReport::empty(ArtifactsStatus::Collected)
        }
    }

    #[test]
    fn unsaved_artifacts_are_named_once_without_out() {
        let names = ["out/plot.png", "out/data.csv"];
        let lines = report_lines(Some(&report()), Some(names.into_iter()));
        assert_eq!(
            lines,
            ["2 artifacts not saved (out/plot.png, out/data.csv): pass --out DIR to save, or --no-outputs"]
        );
        let many: Vec<String> = (0..7).map(|i| format!("f{i}")).collect();
        let lines = report_lines(None, Some(many.iter().map(String::as_str)));
        assert!(lines[0].starts_with("7 artifacts not saved (f0, f1, f2, f3, f4, and 2 more)"));
        assert!(report_lines(Some(&report()), None::<std::iter::Empty<&str>>).is_empty());
    }

    #[test]
    fn skipped_entries_are_one_line_each_and_bounded() {
        let mut r = report();
        r.skipped = vec![
            skipped("out/shadow", SkipKind::Symlink, 11),
            skipped("out/fifo", SkipKind::Fifo, 0),
            skipped("out/big.bin", SkipKind::TooLarge, 3 << 20),
        ];
        r.omitted = 900;
        let lines = report_lines(Some(&r), None::<std::iter::Empty<&str>>);
        assert_eq!(
            lines,
            [
                "artifact out/shadow skipped: a symlink",
                "artifact out/fifo skipped: a fifo",
                "artifact out/big.bin skipped: 3M, larger than the 1M per file",
                "900 more matching entries not returned (at most 100 files are)",
            ]
        );
        r.skipped = (0..25)
            .map(|i| skipped(&format!("out/l{i}"), SkipKind::Symlink, 1))
            .collect();
        r.omitted = 0;
        let lines = report_lines(Some(&r), None::<std::iter::Empty<&str>>);
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert_eq!(lines[MAX_LINES], "and 5 more skipped");
    }

    #[test]
    fn a_collection_that_did_not_run_says_why() {
        let r = ArtifactsReport::empty(ArtifactsStatus::NotCollected("the job timed out".into()));
        assert_eq!(
            report_lines(Some(&r), None::<std::iter::Empty<&str>>),
            ["artifacts not collected: the job timed out"]
        );
    }

    #[test]
    fn outputs_follow_the_flags() {
        let mut args = OutputArgs::default();
        assert_eq!(outputs(&args), Outputs::Default);
        args.patterns = vec!["*.csv".into()];
        assert_eq!(outputs(&args), Outputs::Patterns(vec!["*.csv".into()]));
        args.no_outputs = true;
        assert_eq!(outputs(&args), Outputs::None);
    }

    #[test]
    fn a_failed_write_makes_a_clean_run_exit_non_zero_and_the_others_are_written() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("taken.txt"), b"old").unwrap();
        let args = OutputArgs {
            out: Some(out.clone()),
            ..OutputArgs::default()
        };
        let mut a = Artifacts::new(&args).unwrap();
        for path in ["taken.txt", "fresh.txt"] {
            a.take(artifact(path, b"new"));
        }
        assert_eq!(a.listed[0].saved, None);
        assert!(a.listed[0].error.as_deref().unwrap().contains("taken.txt"));
        assert_eq!(a.listed[1].saved, Some(out.join("fresh.txt")));
        assert_eq!(std::fs::read(out.join("fresh.txt")).unwrap(), b"new");
        assert_eq!(a.finish(0, false), EXIT_REFUSED);
        // The job's own failure wins.
        assert_eq!(a.finish(1, false), 1);
    }

    #[test]
    fn the_json_listing_says_where_each_went() {
        let listed = ListedArtifact {
            header: artifact("out/a.csv", b"1,2").header,
            saved: Some("o/out/a.csv".into()),
            error: None,
        };
        let v = serde_json::to_value(&listed).unwrap();
        assert_eq!(v["path"], "out/a.csv");
        assert_eq!(v["size"], 3);
        assert_eq!(v["media_type"], "text/plain; charset=utf-8");
        assert_eq!(v["saved"], "o/out/a.csv");
        assert!(v.get("error").is_none());
    }

    fn artifact(path: &str, data: &[u8]) -> Artifact {
        Artifact {
            header: ArtifactHeader {
                path: path.into(),
                path_lossy: false,
                size: data.len() as u64,
                sha256: String::new(),
                media_type: "text/plain; charset=utf-8".into(),
            },
            data: data.to_vec(),
        }
    }
}
