//! `viv repl`: an interactive prompt backed by one new session. Line editing and history
//! are rustyline's; each complete block is one cell.
//!
//! When is a block complete? As in Python's REPL, kept simple (see [`is_complete`]):
//! the input goes on (`... `) while a bracket or a triple-quoted string is open or the last
//! line ends with a backslash; a line ending with `:` (or a decorator) opens an indented
//! block, which an empty line ends. Anything else runs at once; a syntax error is the
//! interpreter's to report.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use vivarium_client::proto::CellStatus;
use vivarium_client::{describe_end, Cell, Client, ClientError, EXIT_REFUSED, EXIT_SESSION_ENDED};

use super::exec::{drive_cell, show_outcome, sigint};
use super::run::{report_failure, Failure, Sink};
use super::session::opened_line;
use super::{report_error, ReplArgs};

pub(crate) async fn repl(socket: &Path, args: ReplArgs) -> i32 {
    match repl_inner(socket, args).await {
        Ok(code) => code,
        Err(failure) => report_failure(&failure, false),
    }
}

async fn repl_inner(socket: &Path, args: ReplArgs) -> Result<i32, Failure> {
    let mut sigint = sigint()?;
    let mut client = Client::connect(socket).await?;
    let opened = client.open_session(&args.opts.spec()).await?;
    let handle = opened.info.handle.clone();
    eprintln!("viv: {}", opened_line(&opened.info));
    eprintln!("viv: ctrl-c interrupts a cell, ctrl-d closes the session");
    let mut editor = DefaultEditor::new()
        .map_err(|e| Failure::Local(format!("cannot set up line editing: {e}")))?;
    let history = history_path(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"));
    if let Some(path) = &history {
        // No history yet is the common case, and no reason to stop.
        let _ = editor.load_history(path);
    }
    let mut block = String::new();
    let code = loop {
        let prompt = if block.is_empty() { ">>> " } else { "... " };
        // (A blocking read on the runtime's one thread: nothing else runs between cells.)
        match editor.readline(prompt) {
            Ok(line) => {
                block.push_str(&line);
                block.push('\n');
                if !is_complete(&block) {
                    continue;
                }
                let code = std::mem::take(&mut block);
                if code.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(code.trim_end());
                let cell = Cell::new(handle.clone(), code);
                let mut sink = Sink::new(false);
                match drive_cell(
                    &mut client,
                    &cell,
                    None,
                    &mut sink,
                    None,
                    &mut sigint,
                    false,
                )
                .await
                {
                    Ok(outcome) => {
                        show_outcome(&outcome, "");
                        if matches!(outcome.status, CellStatus::SessionEnded(_)) {
                            break EXIT_SESSION_ENDED;
                        }
                    }
                    Err(e @ ClientError::SessionExpired(_)) => {
                        report_error(&e);
                        break EXIT_SESSION_ENDED;
                    }
                    Err(e @ ClientError::Refused(_)) => report_error(&e),
                    Err(e) => {
                        // The connection is gone, not the session: it outlives it.
                        report_error(&e);
                        eprintln!("viv: reconnecting (the session keeps its state)");
                        client = Client::connect(socket).await?;
                    }
                }
            }
            // Ctrl-c at the prompt drops the line (and the block), as Python's REPL does.
            Err(ReadlineError::Interrupted) => {
                block.clear();
                eprintln!("KeyboardInterrupt");
            }
            Err(ReadlineError::Eof) => break close(&mut client, &handle).await,
            Err(e) => {
                eprintln!("viv: cannot read the prompt: {e}");
                break close(&mut client, &handle).await;
            }
        }
    };
    if let Some(path) = &history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = editor.save_history(path) {
            eprintln!("viv: cannot save the history to {}: {e}", path.display());
        }
    }
    Ok(code)
}

/// End the session on ctrl-d and say how it ended; the exit code.
async fn close(client: &mut Client, handle: &vivarium_client::SessionHandle) -> i32 {
    match client.close_session(handle).await {
        Ok(ended) => {
            eprintln!("viv: {}", describe_end(&ended));
            0
        }
        Err(e @ ClientError::SessionExpired(_)) => {
            report_error(&e);
            EXIT_SESSION_ENDED
        }
        Err(e) => {
            report_error(&e);
            EXIT_REFUSED
        }
    }
}

/// Where the history lives: `$XDG_STATE_HOME/vivarium/repl_history`, else
/// `~/.local/state/vivarium/repl_history` (the XDG base directory spec's default); none
/// without either (a relative `XDG_STATE_HOME` is ignored, as the spec says).
pub(crate) fn history_path(
    state_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let base = match state_home.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".local/state"),
    };
    Some(base.join("vivarium").join("repl_history"))
}

/// Whether `source` (lines so far, each ending in `\n`) is a whole block to run. See the
/// module docs for the rules.
pub(crate) fn is_complete(source: &str) -> bool {
    let scan = Scan::of(source);
    if scan.depth > 0 || scan.in_triple || scan.continued {
        return false;
    }
    if scan.opens_block {
        // An indented block ends with an empty line.
        return source.lines().last().is_none_or(|l| l.trim().is_empty());
    }
    true
}

/// What a small scan of Python source finds: open brackets, an open triple-quoted string,
/// a trailing backslash, a line that opens an indented block.
#[derive(Debug, Default)]
struct Scan {
    depth: usize,
    in_triple: bool,
    continued: bool,
    opens_block: bool,
}

impl Scan {
    fn of(source: &str) -> Scan {
        let mut scan = Scan::default();
        // The quote of the string we are in (and whether it is triple).
        let mut quote: Option<(char, bool)> = None;
        for line in source.lines() {
            let chars: Vec<char> = line.chars().collect();
            let mut last = None; // last significant character outside strings/comments
            let mut i = 0;
            if quote.is_none() && scan.depth == 0 && line.trim_start().starts_with('@') {
                scan.opens_block = true;
            }
            while i < chars.len() {
                let c = chars[i];
                match quote {
                    Some((q, triple)) => {
                        if c == '\\' {
                            i += 1;
                        } else if c == q {
                            if !triple {
                                quote = None;
                            } else if chars.get(i + 1) == Some(&q) && chars.get(i + 2) == Some(&q) {
                                quote = None;
                                i += 2;
                            }
                        }
                    }
                    None => match c {
                        '#' => break,
                        '"' | '\'' => {
                            let triple =
                                chars.get(i + 1) == Some(&c) && chars.get(i + 2) == Some(&c);
                            quote = Some((c, triple));
                            if triple {
                                i += 2;
                            }
                            last = Some(c);
                        }
                        '(' | '[' | '{' => scan.depth += 1,
                        ')' | ']' | '}' => scan.depth = scan.depth.saturating_sub(1),
                        _ => {}
                    },
                }
                if quote.is_none() && !c.is_whitespace() && c != '#' {
                    last = Some(c);
                }
                i += 1;
            }
            // A one-line string left open at the end of its line is a syntax error, not
            // a continuation: let the interpreter say so.
            if matches!(quote, Some((_, false))) {
                quote = None;
            }
            scan.continued = quote.is_none() && line.ends_with('\\');
            if quote.is_none() && scan.depth == 0 && last == Some(':') {
                scan.opens_block = true;
            }
        }
        scan.in_triple = quote.is_some();
        scan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `lines` one by one; the index of the line after which the block is complete.
    fn complete_after(lines: &[&str]) -> Option<usize> {
        let mut source = String::new();
        for (i, line) in lines.iter().enumerate() {
            source.push_str(line);
            source.push('\n');
            if is_complete(&source) {
                return Some(i);
            }
        }
        None
    }

    #[test]
    fn simple_statements_run_at_once() {
        assert_eq!(complete_after(&["x = 1"]), Some(0));
        assert_eq!(
            complete_after(&["print('a:')  # ends with a colon:"]),
            Some(0)
        );
        assert_eq!(complete_after(&["d = {1: 2}"]), Some(0));
        assert_eq!(complete_after(&["a[1:]"]), Some(0));
        assert_eq!(complete_after(&["f = lambda: 1"]), Some(0));
        assert_eq!(complete_after(&[""]), Some(0));
    }

    #[test]
    fn open_brackets_and_backslashes_continue() {
        assert_eq!(complete_after(&["x = [1,", "2,", "3]"]), Some(2));
        assert_eq!(complete_after(&["f(a,", "  b)"]), Some(1));
        assert_eq!(complete_after(&["x = 1 + \\", "2"]), Some(1));
        assert_eq!(complete_after(&["s = ')'  + (", "1)"]), Some(1));
        assert_eq!(complete_after(&["d = {", "'k':", "1}"]), Some(2));
    }

    #[test]
    fn triple_quoted_strings_continue_until_closed() {
        assert_eq!(complete_after(&["s = '''a", "(b:", "c'''"]), Some(2));
        assert_eq!(complete_after(&["s = \"\"\"one line\"\"\""]), Some(0));
    }

    #[test]
    fn an_indented_block_ends_with_an_empty_line() {
        assert_eq!(complete_after(&["def f(x):", "    return x", ""]), Some(2));
        assert_eq!(
            complete_after(&[
                "for i in range(3):",
                "    if i:",
                "        print(i)",
                "    else:",
                "        pass",
                ""
            ]),
            Some(5)
        );
        assert_eq!(
            complete_after(&["@decorator", "def f():", "    pass", ""]),
            Some(3)
        );
        assert_eq!(
            complete_after(&["class A:  # comment", "    x = 1", "   ", ""]),
            Some(2)
        );
        assert_eq!(
            complete_after(&["if (a and", "    b):", "    pass", ""]),
            Some(3)
        );
    }

    #[test]
    fn an_unclosed_one_line_string_is_left_to_the_interpreter() {
        assert_eq!(complete_after(&["s = 'oops"]), Some(0));
    }

    #[test]
    fn the_history_lives_under_the_state_directory() {
        let p = |s: Option<&str>, h: Option<&str>| {
            history_path(s.map(OsString::from), h.map(OsString::from))
        };
        assert_eq!(
            p(Some("/st"), Some("/home/u")),
            Some(PathBuf::from("/st/vivarium/repl_history"))
        );
        assert_eq!(
            p(Some("rel"), Some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/vivarium/repl_history"))
        );
        assert_eq!(
            p(None, Some("/home/u")),
            Some(PathBuf::from("/home/u/.local/state/vivarium/repl_history"))
        );
        assert_eq!(p(None, None), None);
        assert_eq!(p(Some(""), Some("")), None);
    }
}
