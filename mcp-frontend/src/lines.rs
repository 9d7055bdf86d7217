//! A guard in front of rmcp's stdio reader for request lines over the size limit.
//!
//! rmcp drops a line longer than its 16 MiB limit with a log line and no answer, so a
//! client without its own timeout waits forever. [`LineGuard`] cuts such a line first (at
//! [`MAX_LINE_BYTES`], below rmcp's limit): it ends the cut line with a newline (rmcp
//! ignores the unparsable prefix), skips the rest of it, and then hands rmcp a small
//! request, [`OVERSIZED_METHOD`] with the original `id`, which the server answers with a
//! JSON-RPC error. When the id cannot be read (neither near the start nor near the end of
//! the line), the guard logs why and ends the input, which closes the session.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Longest request line passed on, newline excluded: 15 MiB, under rmcp's 16 MiB.
pub const MAX_LINE_BYTES: usize = 15 << 20;

/// The method of the request that stands in for an oversized one.
pub const OVERSIZED_METHOD: &str = "vivarium/oversizedRequest";

/// Bytes kept from each end of a line to find its `id`.
const WINDOW: usize = 64 << 10;

/// Stdin with request lines over a limit replaced by [`OVERSIZED_METHOD`] requests.
pub struct LineGuard<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current line so far (passed on or skipped).
    line_len: usize,
    /// The first bytes of the current line.
    head: Vec<u8>,
    /// While skipping an oversized line: its last bytes.
    tail: Option<Vec<u8>>,
    /// Bytes ready for the reader.
    out: Vec<u8>,
    out_pos: usize,
    /// The input is over (EOF, or an oversized line without a readable id).
    closed: bool,
}

impl<R> LineGuard<R> {
    pub fn new(inner: R, limit: usize) -> LineGuard<R> {
        LineGuard {
            inner,
            limit,
            line_len: 0,
            head: Vec::new(),
            tail: None,
            out: Vec::new(),
            out_pos: 0,
            closed: false,
        }
    }

    /// Pass `chunk` through, cutting lines over the limit.
    fn process(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let newline = chunk.iter().position(|&b| b == b'\n');
            let (segment, rest) = match newline {
                Some(at) => (&chunk[..at], &chunk[at + 1..]),
                None => (chunk, &[][..]),
            };
            chunk = rest;
            if self.tail.is_none() && self.line_len + segment.len() > self.limit {
                // Over the limit: pass what fits, then end rmcp's line here.
                let fits = self.limit - self.line_len;
                self.keep_head(&segment[..fits]);
                self.out.extend_from_slice(&segment[..fits]);
                self.out.push(b'\n');
                self.tail = Some(Vec::new());
            }
            self.line_len += segment.len();
            match self.tail.as_mut() {
                Some(tail) => {
                    tail.extend_from_slice(segment);
                    if tail.len() > 2 * WINDOW {
                        tail.drain(..tail.len() - WINDOW);
                    }
                }
                None => {
                    self.keep_head(segment);
                    self.out.extend_from_slice(segment);
                }
            }
            if newline.is_some() {
                if let Some(tail) = self.tail.take() {
                    self.answer_oversized(&tail);
                    if self.closed {
                        return;
                    }
                } else {
                    self.out.push(b'\n');
                }
                self.line_len = 0;
                self.head.clear();
            }
        }
    }

    fn keep_head(&mut self, bytes: &[u8]) {
        let room = WINDOW.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    fn answer_oversized(&mut self, tail: &[u8]) {
        let bytes = self.line_len;
        let id = top_level_id_in_head(&self.head).or_else(|| top_level_id_in_tail(tail));
        match id {
            Some(id) => {
                tracing::warn!(bytes, limit = self.limit, %id, "request line over the limit; answering it with an error");
                let request = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "method": OVERSIZED_METHOD,
                    "params": {"bytes": bytes, "limit": self.limit},
                });
                self.out.extend_from_slice(request.to_string().as_bytes());
                self.out.push(b'\n');
            }
            None => {
                tracing::error!(
                    bytes,
                    limit = self.limit,
                    "a message line over the limit has no readable id to answer; closing the session"
                );
                self.closed = true;
            }
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineGuard<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            let this = &mut *self;
            if this.out_pos < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.out_pos);
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.closed {
                return Poll::Ready(Ok(()));
            }
            let mut scratch = [0u8; 16 << 10];
            let mut read = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let filled = read.filled();
                    if filled.is_empty() {
                        this.closed = true;
                        return Poll::Ready(Ok(()));
                    }
                    let filled = filled.to_vec();
                    this.process(&filled);
                }
                other => return other,
            }
        }
    }
}

/// A JSON scanner's step over one byte outside or inside strings.
struct Scan {
    depth: i32,
    in_string: bool,
    escaped: bool,
}

impl Scan {
    fn new() -> Scan {
        Scan {
            depth: 0,
            in_string: false,
            escaped: false,
        }
    }

    fn step(&mut self, b: u8) {
        if self.in_string {
            match (self.escaped, b) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return;
        }
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => self.depth += 1,
            b'}' | b']' => self.depth -= 1,
            _ => {}
        }
    }
}

/// The value after `"id":` at `at` (the key's opening quote), if it is a number or string.
fn id_value_at(bytes: &[u8], at: usize) -> Option<(serde_json::Value, usize)> {
    let after_key = at + 4;
    let rest = bytes.get(after_key..)?;
    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    if rest[colon] != b':' {
        return None;
    }
    let value = &rest[colon + 1..];
    let start = value.iter().position(|b| !b.is_ascii_whitespace())?;
    let value = &value[start..];
    let mut stream = serde_json::Deserializer::from_slice(value).into_iter::<serde_json::Value>();
    match stream.next()? {
        Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::String(_))) => {
            Some((v, after_key + colon + 1 + start + stream.byte_offset()))
        }
        _ => None,
    }
}

/// The top-level `id` of a JSON object from its first bytes.
fn top_level_id_in_head(head: &[u8]) -> Option<serde_json::Value> {
    let mut scan = Scan::new();
    for (i, &b) in head.iter().enumerate() {
        if !scan.in_string && b == b'"' && scan.depth == 1 && head[i..].starts_with(b"\"id\"") {
            if let Some((v, _)) = id_value_at(head, i) {
                return Some(v);
            }
        }
        scan.step(b);
    }
    None
}

/// The top-level `id` of a JSON object from its last bytes: an `"id": value` after which
/// the rest closes exactly the top-level object.
fn top_level_id_in_tail(tail: &[u8]) -> Option<serde_json::Value> {
    let mut from = tail.len();
    while let Some(at) = tail[..from].windows(4).rposition(|w| w == b"\"id\"") {
        from = at;
        let Some((v, end)) = id_value_at(tail, at) else {
            continue;
        };
        let mut scan = Scan::new();
        let mut lowest = 0;
        for &b in &tail[end..] {
            scan.step(b);
            lowest = lowest.min(scan.depth);
        }
        if scan.depth == -1 && lowest == -1 && !scan.in_string {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through(input: &[u8], limit: usize) -> String {
        let mut guard = LineGuard::new(input, limit);
        let mut out = Vec::new();
        guard.read_to_end(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    #[tokio::test]
    async fn short_lines_pass_unchanged() {
        let input = b"{\"id\":1}\n\n{\"id\":2}\npartial";
        assert_eq!(through(input, 100).await, String::from_utf8_lossy(input));
    }

    #[tokio::test]
    async fn an_oversized_line_becomes_an_answerable_request() {
        let big = "x".repeat(500);
        // The id first (Python SDK order) and last (TypeScript SDK order).
        for line in [
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"code":"{big}"}}}}"#
            ),
            format!(
                r#"{{"method":"tools/call","params":{{"id":1,"code":"{big}"}},"jsonrpc":"2.0","id":"s-7"}}"#
            ),
        ] {
            let input = format!("{{\"id\":0}}\n{line}\n{{\"id\":9}}\n");
            let out = through(input.as_bytes(), 100).await;
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 4, "{out}");
            assert_eq!(lines[0], "{\"id\":0}");
            assert_eq!(lines[1].len(), 100, "the cut line stops at the limit");
            assert!(serde_json::from_str::<serde_json::Value>(lines[1]).is_err());
            let stand_in: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
            assert_eq!(stand_in["method"], OVERSIZED_METHOD);
            assert_eq!(stand_in["params"]["bytes"], line.len());
            let id = if line.contains("s-7") {
                serde_json::json!("s-7")
            } else {
                serde_json::json!(7)
            };
            assert_eq!(stand_in["id"], id, "{line}");
            assert_eq!(lines[3], "{\"id\":9}");
        }
    }

    #[tokio::test]
    async fn an_oversized_line_without_an_id_ends_the_input() {
        let line = format!(
            "{{\"method\":\"x\",\"params\":\"{}\"}}\n{{\"id\":1}}\n",
            "y".repeat(500)
        );
        let out = through(line.as_bytes(), 100).await;
        assert_eq!(out.lines().count(), 1, "{out}");
    }

    #[test]
    fn ids_are_found_only_at_the_top_level() {
        assert_eq!(
            top_level_id_in_head(br#"{"params":{"id":1},"id":2,"x":"#),
            Some(2.into())
        );
        assert_eq!(top_level_id_in_head(br#"{"params":{"id":1"#), None);
        assert_eq!(
            top_level_id_in_tail(br#"x", "id": 3}, "id": 4 }"#),
            Some(4.into())
        );
        assert_eq!(top_level_id_in_tail(br#"x","id":3}}"#), None);
        assert_eq!(
            top_level_id_in_tail(br#"x","id":"a\"}"}"#),
            Some("a\"}".into())
        );
    }
}
