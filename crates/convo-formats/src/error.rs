//! The one error type of this crate: what rule was broken, where, and why.
//!
//! Every error names the file, the rule (a stable kebab-case name such as
//! `names-mismatch` or `json-syntax`), a line and column or a JSON path when
//! there is one, a message saying what was expected, and for text formats
//! an excerpt of the offending line with a caret under the column.

use std::fmt;

/// A position in a text file, both 1-based; the column counts characters.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Location {
    /// Line number, from 1.
    pub line: u32,
    /// Column in characters, from 1.
    pub column: u32,
}

/// A file that could not be read or written.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct Error {
    /// The file (or other source) the error is about.
    pub file: String,
    /// The rule broken, e.g. `separator-missing`, `json-syntax`, `wrong-type`.
    pub rule: &'static str,
    /// What was wrong and what was expected.
    pub message: String,
    /// Where, in a text file.
    pub location: Option<Location>,
    /// Where, as a JSON path (`$[3].mapping.abc.message`) or a table row.
    pub path: Option<Box<str>>,
    /// The offending line (a window of it, for a long one) and the
    /// character position of the caret within it.
    pub excerpt: Option<Box<(String, usize)>>,
}

impl Error {
    /// An error with no position.
    pub fn new(file: &str, rule: &'static str, message: impl Into<String>) -> Self {
        Error {
            file: file.to_owned(),
            rule,
            message: message.into(),
            location: None,
            path: None,
            excerpt: None,
        }
    }

    /// Points the error at byte `offset` of `text` (line, column, excerpt).
    pub fn at(mut self, text: &str, offset: usize) -> Self {
        let (loc, line) = locate(text, offset);
        self.location = Some(loc);
        let col = loc.column as usize - 1;
        let skip = col.saturating_sub(60);
        let window: String = line
            .chars()
            .skip(skip)
            .take(120)
            .map(|c| if c == '\t' || c.is_control() { ' ' } else { c })
            .collect();
        self.excerpt = Some(Box::new((window, col - skip)));
        self
    }

    /// Points the error at a line and column (no excerpt).
    pub fn at_line(mut self, line: usize, column: usize) -> Self {
        let (line, column) = (clamp(line), clamp(column));
        self.location = Some(Location { line, column });
        self
    }

    /// Adds a JSON path or row reference.
    pub fn with_path(mut self, path: impl Into<String>) -> Self {
        let p = path.into();
        if !p.is_empty() && p != "." {
            self.path = Some(p.into_boxed_str());
        }
        self
    }

    /// `file:line:col: error[rule]: message`, then the excerpt with a caret.
    pub fn render(&self) -> String {
        let mut s = self.file.clone();
        if let Some(l) = self.location {
            s.push_str(&format!(":{}:{}", l.line, l.column));
        }
        s.push_str(&format!(": error[{}]: ", self.rule));
        if let Some(p) = &self.path {
            s.push_str(&format!("at {p}: "));
        }
        s.push_str(&self.message);
        if let (Some(l), Some(ex)) = (self.location, &self.excerpt) {
            let (shown, col) = &**ex;
            let num = l.line.to_string();
            let pad = " ".repeat(num.len());
            let col = (*col).min(shown.chars().count());
            s.push_str(&format!(
                "\n{pad} |\n{num} | {shown}\n{pad} | {}^",
                " ".repeat(col)
            ));
        }
        s
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The line and column of byte `offset` in `text`, and the text of that
/// line. Lines end at `\n`, `\r\n` or `\r`, as in CommonMark.
pub fn locate(text: &str, offset: usize) -> (Location, &str) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let bytes = text.as_bytes();
    let mut line = 1;
    let mut start = 0;
    let mut i = 0;
    while i < offset {
        match bytes[i] {
            b'\n' => {
                line += 1;
                start = i + 1;
            }
            b'\r' if bytes.get(i + 1) != Some(&b'\n') => {
                line += 1;
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    let end = text[start..]
        .find(['\n', '\r'])
        .map(|e| start + e)
        .unwrap_or(text.len());
    let column = text[start..offset].chars().count() + 1;
    (
        Location {
            line: clamp(line),
            column: clamp(column),
        },
        &text[start..end],
    )
}

fn clamp(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Turns a serde_json error (with the path serde_path_to_error found) into
/// an [`Error`] with line, column and a plain-words reason.
pub fn json_error(file: &str, text: Option<&str>, path: String, e: &serde_json::Error) -> Error {
    use serde_json::error::Category;
    let raw = e.to_string();
    let (rule, message) = if raw.starts_with("duplicate key ")
        || raw.starts_with("duplicate field `")
    {
        ("json-duplicate-key", strip_pos(&raw))
    } else if raw.contains("recursion limit exceeded") {
        (
            "json-too-deep",
            "JSON nested more than 128 levels deep (recursion limit exceeded); no conversation format nests like that".to_owned(),
        )
    } else {
        match e.classify() {
            Category::Eof => (
                "json-truncated",
                format!(
                    "the JSON ends too early (truncated file?): {}",
                    strip_pos(&raw)
                ),
            ),
            Category::Syntax => ("json-syntax", format!("invalid JSON: {}", strip_pos(&raw))),
            Category::Data => ("wrong-type", strip_pos(&raw)),
            Category::Io => ("io", strip_pos(&raw)),
        }
    };
    let mut err = Error::new(file, rule, message).with_path(path);
    if e.line() > 0 {
        match text {
            Some(t) => {
                let off = offset_of(t, e.line(), e.column());
                err = err.at(t, off);
            }
            None => err = err.at_line(e.line(), e.column()),
        }
    }
    err
}

/// serde_json appends " at line L column C"; we print positions ourselves.
fn strip_pos(s: &str) -> String {
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_owned(),
        None => s.to_owned(),
    }
}

/// Byte offset of (line, column) as serde_json counts them (lines split at
/// `\n`, column = bytes into the line).
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let mut off = 0;
    for _ in 1..line {
        match text[off..].find('\n') {
            Some(i) => off += i + 1,
            None => return text.len(),
        }
    }
    (off + column.saturating_sub(1)).min(text.len())
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_counts_crlf_and_cr_as_one_line_end() {
        let t = "a\r\nb\rc\nd";
        assert_eq!(locate(t, 0).0, Location { line: 1, column: 1 });
        assert_eq!(locate(t, 3).0, Location { line: 2, column: 1 });
        assert_eq!(locate(t, 5), (Location { line: 3, column: 1 }, "c"));
        assert_eq!(locate(t, 7).0, Location { line: 4, column: 1 });
        assert_eq!(locate("héllo", 3).0.column, 3);
    }

    #[test]
    fn render_shows_a_caret_under_the_column() {
        let e = Error::new("f.convo", "empty-name", "a speaker needs a name").at("x\n### @\n", 6);
        let r = e.render();
        assert!(r.starts_with("f.convo:2:5: error[empty-name]"), "{r}");
        assert!(r.contains("2 | ### @\n  |     ^"), "{r}");
    }
}
