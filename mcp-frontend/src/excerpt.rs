//! Head-and-tail excerpts of a job's output, so a result fits a model's context.

use rmcp::schemars::JsonSchema;
use serde::Serialize;

/// One output stream as the tool reports it: an excerpt plus exact totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct StreamExcerpt {
    /// The output (invalid UTF-8 replaced); when `truncated`, its head and tail with a marker
    /// line saying how much of the middle was left out; a last line longer than the tail
    /// keeps its start (a traceback's exception type) and its end around an inline marker.
    pub text: String,
    /// Exact number of bytes the job wrote to this stream (as received).
    pub total_bytes: u64,
    /// Exact number of lines (a last line without a newline counts).
    pub total_lines: u64,
    /// True when `text` leaves out part of the output to fit the character budget.
    pub truncated: bool,
    /// True when the sandbox's per-stream output cap cut the stream itself.
    pub capped_by_sandbox: bool,
}

/// Number of lines in `bytes`: newlines, plus one for a final unterminated line.
pub fn count_lines(bytes: &[u8]) -> u64 {
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    match bytes.last() {
        Some(b'\n') | None => newlines,
        Some(_) => newlines + 1,
    }
}

/// Excerpt `bytes` within `budget` characters: the whole text when it fits, else its head
/// and tail (each snapped to a line boundary when one is near) around a marker line.
pub fn excerpt(bytes: &[u8], budget: usize, capped_by_sandbox: bool) -> StreamExcerpt {
    excerpt_weighted(bytes, budget, capped_by_sandbox, 50)
}

/// Like [`excerpt`], giving `head_percent` of the room to the head and the rest to the
/// tail (an error's stderr keeps more tail: the traceback is there).
pub fn excerpt_weighted(
    bytes: &[u8],
    budget: usize,
    capped_by_sandbox: bool,
    head_percent: usize,
) -> StreamExcerpt {
    let text = String::from_utf8_lossy(bytes);
    let (text, truncated) = cut(&text, budget, head_percent);
    StreamExcerpt {
        text,
        total_bytes: bytes.len() as u64,
        total_lines: count_lines(bytes),
        truncated,
        capped_by_sandbox,
    }
}

/// `text` within `budget` characters, and whether anything was left out.
fn cut(text: &str, budget: usize, head_percent: usize) -> (String, bool) {
    let chars = text.chars().count();
    if chars <= budget {
        return (text.to_owned(), false);
    }
    // Room for the marker, which never exceeds this many characters.
    const MARKER_ROOM: usize = 80;
    let room = budget.saturating_sub(MARKER_ROOM);
    let head_chars = room * head_percent.min(100) / 100;
    let tail_chars = room - head_chars;
    let head = snap_head(prefix_chars(text, head_chars));
    let tail = snap_tail(suffix_chars(text, tail_chars));
    let sep = if head.is_empty() || head.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    // A tail that starts inside the last line loses that line's start, which for a
    // traceback is the exception's type: keep the start of the line and its end.
    const INNER_ROOM: usize = 32;
    let tail_start = text.len() - tail.len();
    let body_end = text.trim_end_matches('\n').len();
    let last_line = text[..body_end].rfind('\n').map_or(0, |at| at + 1);
    if last_line >= head.len() && last_line < tail_start && tail_chars > INNER_ROOM {
        let line = &text[last_line..];
        let keep = (tail_chars - INNER_ROOM) * 2 / 3;
        let line_head = prefix_chars(line, keep);
        let line_tail = suffix_chars(line, tail_chars - INNER_ROOM - keep);
        let inner = line.len() - line_head.len() - line_tail.len();
        let before = &text[head.len()..last_line];
        let marker = if before.is_empty() {
            String::new()
        } else {
            format!(
                "{sep}[... {} bytes, {} lines omitted ...]\n",
                before.len(),
                before.matches('\n').count()
            )
        };
        return (
            format!("{head}{marker}{line_head}[... {inner} bytes omitted ...]{line_tail}"),
            true,
        );
    }
    let omitted = &text[head.len()..text.len() - tail.len()];
    let marker = format!(
        "[... {} bytes, {} lines omitted ...]",
        omitted.len(),
        omitted.matches('\n').count()
    );
    (format!("{head}{sep}{marker}\n{tail}"), true)
}

fn prefix_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

fn suffix_chars(text: &str, n: usize) -> &str {
    let count = text.chars().count();
    if n >= count {
        return text;
    }
    if n == 0 {
        return "";
    }
    let (at, _) = text.char_indices().nth(count - n).expect("within bounds");
    &text[at..]
}

/// Cut a head back to its last newline if that keeps at least 3/4 of it.
fn snap_head(head: &str) -> &str {
    match head.rfind('\n') {
        Some(at) if at + 1 >= head.len() * 3 / 4 => &head[..at + 1],
        _ => head,
    }
}

/// Start a tail after its first newline if that keeps at least 3/4 of it.
fn snap_tail(tail: &str) -> &str {
    match tail.find('\n') {
        Some(at) if tail.len() - (at + 1) >= tail.len() * 3 / 4 => &tail[at + 1..],
        _ => tail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_whole() {
        let e = excerpt(b"a\nb\n", 100, false);
        assert_eq!(
            e,
            StreamExcerpt {
                text: "a\nb\n".into(),
                total_bytes: 4,
                total_lines: 2,
                truncated: false,
                capped_by_sandbox: false,
            }
        );
    }

    #[test]
    fn line_counts() {
        assert_eq!(count_lines(b""), 0);
        assert_eq!(count_lines(b"x"), 1);
        assert_eq!(count_lines(b"x\n"), 1);
        assert_eq!(count_lines(b"x\ny"), 2);
        assert_eq!(count_lines(b"\n\n"), 2);
    }

    #[test]
    fn long_output_keeps_head_and_tail_within_budget() {
        let text: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
        let e = excerpt(text.as_bytes(), 1_000, true);
        assert!(e.truncated);
        assert!(e.capped_by_sandbox);
        assert_eq!(e.total_bytes, text.len() as u64);
        assert_eq!(e.total_lines, 10_000);
        assert!(e.text.chars().count() <= 1_000, "{}", e.text.len());
        assert!(e.text.starts_with("line 0\nline 1\n"));
        assert!(e.text.ends_with("line 9999\n"));
        assert!(e.text.contains("lines omitted ...]\n"));
        // Snapped to line boundaries: every line is whole.
        for line in e.text.lines() {
            assert!(
                line.starts_with("line ") || line.starts_with("[... "),
                "{line:?}"
            );
        }
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let text = "é".repeat(5_000);
        let e = excerpt(text.as_bytes(), 500, false);
        assert!(e.truncated);
        assert_eq!(e.total_bytes, 10_000);
        assert!(e.text.chars().count() <= 500);
    }

    #[test]
    fn invalid_utf8_is_replaced_but_bytes_are_exact() {
        let e = excerpt(&[0xff, b'a', b'\n'], 100, false);
        assert_eq!(e.text, "\u{fffd}a\n");
        assert_eq!(e.total_bytes, 3);
    }

    /// `--output-chars 200` and a long exception message: the tail used to start in the
    /// middle of the last line and lose `ValueError`.
    #[test]
    fn the_last_line_keeps_its_start() {
        let stderr = format!(
            "Traceback (most recent call last):\n  File \"/work/script.py\", line 1, in <module>\n\
             ValueError: {}end\n",
            "bad value ".repeat(100)
        );
        for budget in [200, 500, 1_000] {
            for head in [25, 50] {
                let e = excerpt_weighted(stderr.as_bytes(), budget, false, head);
                assert!(e.truncated);
                assert!(e.text.chars().count() <= budget, "{budget}: {}", e.text);
                let start = if budget == 200 {
                    "\nValueError"
                } else {
                    "\nValueError: bad value"
                };
                assert!(e.text.contains(start), "{budget}: {}", e.text);
                assert!(e.text.ends_with("end\n"), "{}", e.text);
                assert!(e.text.starts_with("Traceback"), "{}", e.text);
            }
        }
        // One long line: the head already has its start; the tail is plain.
        let e = excerpt("x".repeat(10_000).as_bytes(), 200, false);
        assert_eq!(e.text.matches("omitted").count(), 1, "{}", e.text);
    }
}
