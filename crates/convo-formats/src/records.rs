//! Line-based agent transcripts (Claude Code, Codex): every line is a
//! record, kept with its exact bytes so an export gives the file back.
//!
//! A file is read as a stream, one line at a time (a line over
//! [`MAX_RECORD`] is refused, naming it), so memory follows the records,
//! never a second copy of the file. A line that is not JSON (a write cut
//! by a crash), or repeats a key, is kept raw and not interpreted, with a
//! warning naming it; a last line without its newline is being written and
//! is left for the next import.
//!
//! Messages carry their records in `extra.records`, each
//! `{"line": n, "raw": "…"}` plus `"file": "subagents/agent-x.jsonl"` for a
//! record of another file of the same session. Once stored, a record of
//! [`DETACHED_FROM`] bytes or more is
//! `{"line": n, "blob": "<SHA-256 hex>", "bytes": len}` instead: its raw
//! bytes are a payload of their own. A record's identity is its
//! file and line, which is how a re-import of a grown file
//! (`convo_llm::ledger`) stores only the lines it has not stored.

use crate::error::{Error, Result};
use crate::model::{Conversation, Message};
use serde_json::{Map, Value, json};
use std::io::BufRead;

pub mod skeleton;
pub use skeleton::{Id, Names, Skeleton};

/// A source record this long or longer (its raw bytes) is not kept in its
/// message's diagnostics but stored as a payload of its own, which its
/// entry in `extra.records` names: `{"line", "blob": SHA-256 hex,
/// "bytes": length}` instead of `"raw"`. A node's row then stays small, so
/// writing a 50 MB record does not copy it into SQLite's statement, its
/// row record and its page cache; the payload is chunked like any other
/// (and shares chunks with the message's text where the bytes repeat).
pub const DETACHED_FROM: usize = 1 << 20;

/// The longest record (line) read: 64 MiB.
pub const MAX_RECORD: u64 = 64 * 1024 * 1024;

/// One line of a transcript.
#[derive(Clone, Debug)]
pub struct Record {
    /// Its line number, from 1.
    pub line: usize,
    /// Where its bytes start in the file.
    pub offset: u64,
    /// The line's bytes without the newline.
    pub raw: String,
    /// The line parsed, when it is one JSON object.
    pub value: Option<Map<String, Value>>,
}

impl Record {
    /// A string field of the record.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.value.as_ref()?.get(key)?.as_str()
    }

    /// A field of the record.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.value.as_ref()?.get(key)
    }

    /// `{"line", "raw"}` (and `"file"` when given) for `extra.records`.
    pub fn to_value(&self, file: Option<&str>) -> Value {
        let mut v = json!({"line": self.line, "raw": self.raw});
        if let Some(f) = file {
            v["file"] = json!(f);
        }
        v
    }

    /// [`Record::to_value`], moving the line's bytes instead of copying them.
    pub fn into_value(self, file: Option<&str>) -> Value {
        let mut o = Map::new();
        if let Some(f) = file {
            o.insert("file".into(), json!(f));
        }
        o.insert("line".into(), json!(self.line));
        o.insert("raw".into(), Value::String(self.raw));
        Value::Object(o)
    }

    /// Where it is, for reading it again ([`Sources::record`]): `file` is
    /// the index of its file in the session's [`Sources`].
    pub fn at(&self, file: u32) -> RecRef {
        RecRef {
            file,
            line: self.line as u32,
            offset: self.offset,
            len: self.raw.len() as u32,
            check: check(self.raw.as_bytes()),
        }
    }
}

/// Where a record is: its file (an index into the session's [`Sources`]),
/// line, the place and length of its bytes, and a checksum that tells a
/// file rewritten since it was indexed. What an import keeps per record
/// between its two passes, instead of the record.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RecRef {
    /// The file's index in [`Sources`].
    pub file: u32,
    /// Its line number, from 1.
    pub line: u32,
    /// Where its bytes start.
    pub offset: u64,
    /// How many bytes (without the newline; at most [`MAX_RECORD`]).
    pub len: u32,
    /// [`check`] of those bytes.
    pub check: u64,
}

/// A fast checksum of a record's bytes (not a digest: it only tells a
/// file that changed between an import's two reads).
pub fn check(bytes: &[u8]) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(bytes);
    h.finish()
}

/// A transcript read line by line.
#[derive(Debug, Default)]
pub struct Lines {
    /// Every complete line, in order.
    pub records: Vec<Record>,
    /// Lines kept raw because they could not be interpreted, and a last line
    /// still being written.
    pub warnings: Vec<String>,
}

/// Reads every complete line of `r`. `file` names it in errors and warnings.
pub fn read(file: &str, r: impl BufRead) -> Result<Lines> {
    let mut records = Vec::new();
    let warnings = scan(file, r, |rec| {
        records.push(rec);
        Ok(())
    })?;
    Ok(Lines { records, warnings })
}

/// Reads `r` one line at a time, giving each complete line to `each` and
/// keeping none: the first pass of an import. Returns the warnings (lines
/// kept raw, a last line still being written).
pub fn scan(
    file: &str,
    r: impl BufRead,
    each: impl FnMut(Record) -> Result<()>,
) -> Result<Vec<String>> {
    scan_from(file, r, 0, 0, each)
}

/// [`scan`] of a reader placed after `lines` lines (`offset` bytes) of
/// its file: the lines after an earlier import's [`Mark`].
pub fn scan_from(
    file: &str,
    mut r: impl BufRead,
    lines: usize,
    offset: u64,
    mut each: impl FnMut(Record) -> Result<()>,
) -> Result<Vec<String>> {
    use std::io::Read as _;
    let mut warnings = Vec::new();
    let mut buf = Vec::new();
    let mut line = lines;
    let mut offset = offset;
    loop {
        buf.clear();
        line += 1;
        let n = (&mut r)
            .take(MAX_RECORD + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| {
                Error::new(file, "io", format!("cannot read the file: {e}")).at_line(line, 1)
            })?;
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') {
            if buf.len() as u64 > MAX_RECORD {
                return Err(too_large(file, line));
            }
            warnings.push(format!(
                "{file}:{line}: the last line has no newline yet (being written?); left for the next import"
            ));
            break;
        }
        buf.pop();
        let mut raw = String::from_utf8(std::mem::take(&mut buf))
            .map_err(|e| not_utf8(file, line, e.utf8_error()))?;
        // The buffer grew by doubling: a huge line gives back the room
        // it does not use (a 50 MB line had 64 MiB).
        if raw.capacity() - raw.len() > 1 << 20 {
            raw.shrink_to_fit();
        }
        let (value, warning) = parse(file, line, &raw);
        warnings.extend(warning);
        each(Record {
            line,
            offset,
            raw,
            value,
        })?;
        offset += n as u64;
    }
    Ok(warnings)
}

fn too_large(file: &str, line: usize) -> Error {
    Error::new(
        file,
        "too-large",
        format!(
            "a record longer than {} MiB; convo reads records of at most that",
            MAX_RECORD / (1024 * 1024)
        ),
    )
    .at_line(line, 1)
}

fn not_utf8(file: &str, line: usize, e: std::str::Utf8Error) -> Error {
    Error::new(
        file,
        "encoding",
        format!(
            "the line is not UTF-8 (invalid byte at column {})",
            e.valid_up_to() + 1
        ),
    )
    .at_line(line, e.valid_up_to() + 1)
}

/// The byte span (quotes included) of the longest string literal of a
/// JSON text, and whether it holds escapes.
fn longest_string(raw: &[u8]) -> Option<(usize, usize, bool)> {
    let mut best: Option<(usize, usize, bool)> = None;
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        let mut esc = false;
        i += 1;
        while i < raw.len() && raw[i] != b'"' {
            if raw[i] == b'\\' {
                esc = true;
                i += 1;
            }
            i += 1;
        }
        let end = (i + 1).min(raw.len());
        if best.is_none_or(|(a, b, _)| end - start > b - a) {
            best = Some((start, end, esc));
        }
        i = end;
    }
    best
}

/// A huge line's longest string literal, when it is most of the line:
/// its span and escapes ([`longest_string`]).
pub(crate) fn huge_string(raw: &str) -> Option<(usize, usize, bool)> {
    if raw.len() < DETACHED_FROM {
        return None;
    }
    longest_string(raw.as_bytes()).filter(|(a, b, _)| (b - a) * 2 >= raw.len())
}

/// A message's record parsed: a JSON object, or one followed by a comma
/// (a legacy Gemini CLI message's record: its lines of the document).
fn parse_object(raw: &str) -> Option<Map<String, Value>> {
    let t = raw.trim_end();
    serde_json::from_str(t.strip_suffix(',').unwrap_or(t)).ok()
}

/// `raw` with the string literal at `span` replaced by `with` (a string):
/// a huge line as a small one, parsed without copying its huge string.
pub(crate) fn slim(raw: &str, span: (usize, usize), with: &str) -> String {
    let with = serde_json::to_string(with).unwrap_or_default();
    let mut out = String::with_capacity(raw.len() - (span.1 - span.0) + with.len());
    out.push_str(&raw[..span.0]);
    out.push_str(&with);
    out.push_str(&raw[span.1..]);
    out
}

/// The start of a string literal's text (its first ~4 KiB): what a
/// first pass reads of a huge string (a title, whether it is injected).
fn literal_start(literal: &str) -> String {
    let body = &literal[1..literal.len().saturating_sub(1)];
    let b = body.as_bytes();
    // Cuts between escapes, the last two before 4 KiB (the last may split
    // a surrogate pair).
    let (mut i, mut cuts) = (0, [0usize; 2]);
    while i < b.len() && i < 4096 {
        i += match (b[i], b.get(i + 1)) {
            (b'\\', Some(b'u')) => 6,
            (b'\\', _) => 2,
            _ => 1,
        };
        if i <= b.len() && body.is_char_boundary(i) {
            cuts = [cuts[1], i];
        }
    }
    cuts.iter()
        .rev()
        .find_map(|&c| serde_json::from_str::<String>(&format!("\"{}\"", &body[..c])).ok())
        .unwrap_or_default()
}

/// Unescapes a JSON string literal's body in place (its bytes become the
/// text they spell; every escape is at least as long as what it spells);
/// `false` when it is not a valid body.
pub(crate) fn unescape_in_place(s: &mut String) -> bool {
    let mut v = std::mem::take(s).into_bytes();
    let hex = |b: &[u8]| -> Option<u32> {
        let t = std::str::from_utf8(b).ok()?;
        u32::from_str_radix(t, 16).ok()
    };
    let (mut r, mut w) = (0, 0);
    while r < v.len() {
        if v[r] != b'\\' {
            v[w] = v[r];
            r += 1;
            w += 1;
            continue;
        }
        let Some(&e) = v.get(r + 1) else {
            return false;
        };
        let simple = match e {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(8),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(c) = simple {
            v[w] = c;
            r += 2;
            w += 1;
            continue;
        }
        if e != b'u' {
            return false;
        }
        let Some(hi) = v.get(r + 2..r + 6).and_then(hex) else {
            return false;
        };
        r += 6;
        let code = if (0xD800..0xDC00).contains(&hi) {
            let lo = (v.get(r..r + 2) == Some(b"\\u"))
                .then(|| v.get(r + 2..r + 6).and_then(hex))
                .flatten();
            match lo {
                Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                    r += 6;
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                }
                _ => return false,
            }
        } else {
            hi
        };
        let Some(c) = char::from_u32(code) else {
            return false;
        };
        let mut buf = [0u8; 4];
        for &b in c.encode_utf8(&mut buf).as_bytes() {
            v[w] = b;
            w += 1;
        }
    }
    v.truncate(w);
    match String::from_utf8(v) {
        Ok(t) => {
            *s = t;
            true
        }
        Err(_) => false,
    }
}

/// A line parsed, when it is one JSON object, or the warning saying why it
/// is kept raw.
fn parse(file: &str, line: usize, raw: &str) -> (Option<Map<String, Value>>, Option<String>) {
    if raw.trim().is_empty() {
        return (None, None);
    }
    // A huge line whose most is one string: parsed with that string cut to
    // its start, so the line is not held twice (its bytes and its parse).
    // The first pass reads no more of it; the message is read again whole.
    if let Some((a, b, _)) = huge_string(raw)
        && let Ok(Value::Object(m)) = crate::json::parse_line::<Value>(
            file,
            line,
            &slim(raw, (a, b), &literal_start(&raw[a..b])),
        )
    {
        return (Some(m), None);
    }
    match crate::json::parse_line::<Value>(file, line, raw) {
        Ok(Value::Object(m)) => (Some(m), None),
        Ok(_) => (
            None,
            Some(format!(
                "{file}:{line}: not a JSON object; kept as it is, not interpreted"
            )),
        ),
        Err(e) => (
            None,
            Some(format!(
                "{}; kept as it is, not interpreted",
                e.render().lines().next().unwrap_or_default()
            )),
        ),
    }
}

/// The files of one session, for reading records again by their
/// [`RecRef`] (the second pass of an import): open files, or bytes
/// already in memory.
pub struct Sources<'a> {
    files: Vec<(String, Source<'a>)>,
}

enum Source<'a> {
    Mem(&'a [u8]),
    File(std::fs::File),
}

impl<'a> Sources<'a> {
    /// No file yet.
    pub fn new() -> Self {
        Sources { files: Vec::new() }
    }

    /// Adds bytes in memory named `name`; returns their index.
    pub fn add_bytes(&mut self, name: &str, bytes: &'a [u8]) -> u32 {
        self.files.push((name.to_owned(), Source::Mem(bytes)));
        (self.files.len() - 1) as u32
    }

    /// Opens a file to read records from by their [`RecRef`]; returns its
    /// index.
    pub fn add_file(&mut self, path: &std::path::Path) -> Result<u32> {
        let name = path.display().to_string();
        let f = crate::open_file(path)?;
        self.files.push((name, Source::File(f)));
        Ok((self.files.len() - 1) as u32)
    }

    /// Opens a file and scans it ([`scan`]), giving `each` its records
    /// with the file's index; returns the warnings.
    pub fn scan_path(
        &mut self,
        path: &std::path::Path,
        mut each: impl FnMut(u32, Record) -> Result<()>,
    ) -> Result<Vec<String>> {
        let name = path.display().to_string();
        let f = crate::open_file(path)?;
        let again = f
            .try_clone()
            .map_err(|e| Error::new(&name, "io", format!("cannot read the file: {e}")))?;
        let ix = self.files.len() as u32;
        self.files.push((name.clone(), Source::File(again)));
        scan(
            &name,
            std::io::BufReader::with_capacity(256 * 1024, f),
            |r| each(ix, r),
        )
    }

    /// Opens a file and scans it from `mark` on (the lines after it),
    /// giving `each` its records with the file's index; returns the
    /// warnings, or `None` when the file's bytes at `mark` are not the
    /// line the mark names (rewritten, truncated, another file).
    pub fn scan_path_after(
        &mut self,
        path: &std::path::Path,
        mark: &Mark,
        mut each: impl FnMut(u32, Record) -> Result<()>,
    ) -> Result<Option<Vec<String>>> {
        use std::io::{Read as _, Seek as _};
        let name = path.display().to_string();
        let io = |e: std::io::Error| Error::new(&name, "io", format!("cannot read the file: {e}"));
        let mut f = crate::open_file(path)?;
        let mut last = vec![0u8; mark.len as usize + 1];
        let same = f
            .seek(std::io::SeekFrom::Start(mark.offset))
            .and_then(|_| f.read_exact(&mut last))
            .is_ok()
            && last.pop() == Some(b'\n')
            && check(&last) == mark.check;
        if !same {
            return Ok(None);
        }
        drop(last);
        let again = f.try_clone().map_err(io)?;
        let ix = self.files.len() as u32;
        self.files.push((name.clone(), Source::File(again)));
        scan_from(
            &name,
            std::io::BufReader::with_capacity(64 * 1024, f),
            mark.line as usize,
            mark.offset + u64::from(mark.len) + 1,
            |r| each(ix, r),
        )
        .map(Some)
    }

    /// Scans bytes added with [`Sources::add_bytes`].
    pub fn scan_bytes(
        &mut self,
        name: &str,
        bytes: &'a [u8],
        mut each: impl FnMut(u32, Record) -> Result<()>,
    ) -> Result<Vec<String>> {
        let ix = self.add_bytes(name, bytes);
        scan(name, bytes, |r| each(ix, r))
    }

    /// A file's name.
    pub fn name(&self, file: u32) -> &str {
        self.files
            .get(file as usize)
            .map_or("", |(n, _)| n.as_str())
    }

    /// Reads a record again (parsed when `parse`). A file whose bytes
    /// there changed since they were indexed (the agent rewrote it) is the
    /// error `changed`.
    pub fn record(&mut self, at: &RecRef, parse: bool) -> Result<Record> {
        use std::io::{Read as _, Seek as _};
        let (name, src) = self
            .files
            .get_mut(at.file as usize)
            .ok_or_else(|| Error::new("import", "io", "a record of an unknown file"))?;
        let changed = |name: &str| {
            Error::new(
                name,
                "changed",
                "the file changed while it was imported (rewritten?); import it again",
            )
            .at_line(at.line as usize, 1)
        };
        let mut buf = vec![0u8; at.len as usize];
        match src {
            Source::Mem(b) => {
                let start = at.offset as usize;
                let got = b
                    .get(start..start + buf.len())
                    .ok_or_else(|| changed(name))?;
                buf.copy_from_slice(got);
            }
            Source::File(f) => {
                f.seek(std::io::SeekFrom::Start(at.offset))
                    .and_then(|_| f.read_exact(&mut buf))
                    .map_err(|_| changed(name))?;
            }
        }
        if check(&buf) != at.check {
            return Err(changed(name));
        }
        let raw = String::from_utf8(buf).map_err(|_| changed(name))?;
        // The first pass checked the line (repeated keys, the error's
        // place): a plain parse now.
        let value = if parse { parse_object(&raw) } else { None };
        Ok(Record {
            line: at.line as usize,
            offset: at.offset,
            raw,
            value,
        })
    }
}

impl Default for Sources<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Sources<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.files.iter().map(|(n, _)| n))
            .finish()
    }
}

/// A transcript's session indexed by an import's first pass: the
/// conversation as a skeleton (every message's parent, role, speaker, `to`,
/// time, key and flags; no text, no records) and where each message's
/// records are, to read them again one message at a time
/// (`convo_llm::ledger::import_lazy`). Memory follows the number of records,
/// not their bytes: Claude Code's, Codex's and Gemini CLI's skeleton is
/// compact ([`Stored::tree`], 56 bytes a message, their places 8 bytes a
/// message and 32 a record), `conv.messages` left empty.
#[derive(Debug)]
pub struct Session<'a> {
    /// The skeleton (its messages in [`Stored::tree`] when that is set).
    pub conv: Conversation,
    /// Lines kept raw, a last line still being written, links that point
    /// nowhere.
    pub warnings: Vec<String>,
    /// Where its messages' records are.
    pub records: Stored<'a>,
}

/// Where a [`Session`]'s messages' records are: its
/// [`crate::loader::Loader`].
pub struct Stored<'a> {
    /// The session's files.
    pub sources: Sources<'a>,
    /// Per file: its name in `extra.records` (`None` for the session's own
    /// file, `subagents/…` for another).
    pub rel: Vec<Option<String>>,
    /// Per message: the record it was read from (`None` for a holder) and
    /// the records it carries, in file and line order.
    pub refs: Refs,
    /// The messages' compact skeleton, when the session's `conv.messages`
    /// is left empty (Claude Code, Codex, Gemini CLI): the ledger places
    /// the messages from it ([`crate::loader::Loader::take_tree`]).
    pub tree: Option<Skeleton>,
    /// Fills a skeleton message from its record: its text, model and the
    /// format's extras. It may move the text out of the record's parse
    /// (a huge text is then not copied).
    pub fill: fn(&mut Message, &mut Record),
    /// The error of the last load that failed (a file rewritten meanwhile),
    /// kept whole: the store sees only its message.
    pub failed: Option<Error>,
    /// Ids of records that are not messages (a Claude Code `attachment`'s
    /// uuid), each with the message it leads to: a later record whose
    /// parent is one of them is that message's child.
    pub aliases: Aliases,
    /// Where the files read end and the reader's state there, for an
    /// import of what is written after ([`Tail`]); `None` when the
    /// format has no such import.
    pub tail: Option<Tail>,
    /// Whether the ledger's loads leave a message's own record of
    /// [`DETACHED_FROM`] bytes or more to be stored after
    /// its node ([`crate::loader::Loader::next_deferred`]): its entry in
    /// `extra.records` names it by hash, and its bytes are not in memory
    /// beside the message's text. Off for a load whose records are changed
    /// after (`--redact-secrets`).
    pub defer: bool,
    /// The records left to store so.
    pub deferred: Vec<RecRef>,
}

/// Ids of records that are not messages, each with the message it leads
/// to ([`Stored::aliases`]); an id that is neither a UUID nor a number is
/// a name of `names`.
#[derive(Debug, Default)]
pub struct Aliases {
    /// The ids and their messages.
    pub ids: Vec<(Id, u32)>,
    /// The names of ids that are names.
    pub names: Names,
}

/// Per message, where its own record is and the records it carries: one
/// flat list for the session (32 bytes a record, 8 a message), not a list
/// per message.
#[derive(Debug, Default, Clone)]
pub struct Refs {
    all: Vec<RecRef>,
    /// Per message: where its records start in `all` (they end where the
    /// next message's start).
    starts: Vec<u32>,
    /// Per message: the index in `all` of its own record, [`OUTSIDE`] set
    /// when it is not one it carries (then last of its slice); [`NO_REF`]
    /// for none.
    own: Vec<u32>,
}

/// No own record.
const NO_REF: u32 = u32::MAX;
/// An own record that the message does not carry.
const OUTSIDE: u32 = 1 << 31;

impl Refs {
    /// Adds a message: its own record and those it carries (in order).
    pub fn push(&mut self, own: Option<RecRef>, carried: impl IntoIterator<Item = RecRef>) {
        let start = self.all.len();
        self.starts.push(start as u32);
        self.all.extend(carried);
        let ix = match own {
            None => NO_REF,
            Some(o) => match self.all[start..].iter().position(|r| *r == o) {
                Some(k) => (start + k) as u32,
                None => {
                    self.all.push(o);
                    (self.all.len() - 1) as u32 | OUTSIDE
                }
            },
        };
        self.own.push(ix);
    }

    /// Makes room for `messages` more messages carrying `records` more
    /// records.
    pub fn reserve_exact(&mut self, messages: usize, records: usize) {
        self.all.reserve_exact(records);
        self.starts.reserve_exact(messages);
        self.own.reserve_exact(messages);
    }

    /// Adds a record the last message carries (after those it has).
    pub fn push_to_last(&mut self, at: RecRef) {
        match self.own.last() {
            Some(&o) if o != NO_REF && o & OUTSIDE != 0 => {
                let k = (o & !OUTSIDE) as usize;
                self.all.insert(k, at);
                *self.own.last_mut().expect("a message") = (k as u32 + 1) | OUTSIDE;
            }
            Some(_) => self.all.push(at),
            None => {}
        }
    }

    /// From a list per message (own, carried).
    pub fn from_lists(own: Vec<Option<RecRef>>, carried: Vec<Vec<RecRef>>) -> Refs {
        let mut r = Refs::default();
        for (o, c) in own.into_iter().zip(carried) {
            r.push(o, c);
        }
        r
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.own.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty()
    }

    fn end(&self, i: usize) -> usize {
        self.starts
            .get(i + 1)
            .map_or(self.all.len(), |&s| s as usize)
    }

    /// Message `i`'s own record.
    pub fn own(&self, i: usize) -> Option<RecRef> {
        match self.own[i] {
            NO_REF => None,
            o => Some(self.all[(o & !OUTSIDE) as usize]),
        }
    }

    /// The records message `i` carries.
    pub fn carried(&self, i: usize) -> &[RecRef] {
        let end = self.end(i) - usize::from(self.own[i] != NO_REF && self.own[i] & OUTSIDE != 0);
        &self.all[self.starts[i] as usize..end]
    }

    /// Puts the messages in `order` (old indices, each once).
    pub fn reorder(&mut self, order: &[usize]) {
        let mut out = Refs::default();
        out.all.reserve_exact(self.all.len());
        for &old in order {
            out.push(self.own(old), self.carried(old).iter().copied());
        }
        *self = out;
    }

    /// Gives back the room growing vectors left unused.
    pub fn shrink_to_fit(&mut self) {
        self.all.shrink_to_fit();
        self.starts.shrink_to_fit();
        self.own.shrink_to_fit();
    }
}

/// Where an import's stored lines end, and what the reader needs to go on
/// from there: kept per session in the store (`import_tails`) once every
/// line read is stored, so the next import of the grown files reads only
/// their new lines.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tail {
    /// The format that wrote it.
    pub format: String,
    /// Per file of the session: its last line read.
    pub marks: Vec<Mark>,
    /// The reader's state after those lines (format-specific).
    pub state: Value,
}

/// A file's last line read: its name in `extra.records` (`""` for the
/// session's own file), number, place, length and [`check`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    /// `""`, or `subagents/…`.
    pub file: String,
    /// Its line number.
    pub line: u32,
    /// Where the line starts.
    pub offset: u64,
    /// Its length without the newline.
    pub len: u32,
    /// [`check`] of its bytes.
    pub check: u64,
}

impl Tail {
    /// Parses a stored tail of `format`; `None` when it is not one.
    pub fn parse(format: &str, text: &str) -> Option<Tail> {
        serde_json::from_str::<Tail>(text)
            .ok()
            .filter(|t| t.format == format)
    }

    /// The mark of a file.
    pub fn mark(&self, file: &str) -> Option<&Mark> {
        self.marks.iter().find(|m| m.file == file)
    }
}

impl Mark {
    /// The mark of a record read from file `rel`.
    pub fn of(rel: &str, at: &RecRef) -> Mark {
        Mark {
            file: rel.to_owned(),
            line: at.line,
            offset: at.offset,
            len: at.len,
            check: at.check,
        }
    }
}

impl Stored<'_> {
    /// Message `i` whole: its skeleton filled from its record, with its
    /// records in `extra.records`.
    pub fn message(&mut self, i: usize, skeleton: &Message) -> Result<Message> {
        self.message_as(i, skeleton, false)
    }

    /// Fills `m` from its huge record `at` whose text is its longest
    /// string: the rest of the record is parsed without it, and the
    /// line's bytes become the text in place (unescaped), so the record
    /// is in memory once. Its SHA-256 (its bytes are stored after, as a
    /// payload of their own); `None`, `m` untouched, when its text is not
    /// that string alone.
    fn text_of_huge(
        &mut self,
        at: &RecRef,
        m: &mut Message,
    ) -> Result<Option<convo_core::ContentHash>> {
        const MARK: &str = "\u{0}convo:the-huge-string\u{0}";
        let rec = self.sources.record(at, false)?;
        let Some((a, b, esc)) = huge_string(&rec.raw) else {
            return Ok(None);
        };
        let hash = convo_core::hash::content_hash(rec.raw.as_bytes());
        let value = parse_object(&slim(&rec.raw, (a, b), MARK));
        let mut probe = m.clone();
        let mut slim_rec = Record {
            line: rec.line,
            offset: rec.offset,
            raw: String::new(),
            value,
        };
        (self.fill)(&mut probe, &mut slim_rec);
        drop(slim_rec);
        let elsewhere = serde_json::to_string(&probe.extra)
            .map_or(true, |t| t.contains("convo:the-huge-string"));
        if probe.text != MARK || elsewhere {
            return Ok(None);
        }
        let mut text = rec.raw;
        text.truncate(b - 1);
        text.drain(..a + 1);
        if esc && !unescape_in_place(&mut text) {
            return Ok(None);
        }
        probe.text = text;
        *m = probe;
        Ok(Some(hash))
    }

    /// [`Stored::message`]; with `defer`, its own record of
    /// [`DETACHED_FROM`] bytes or more is parsed as it is
    /// read and left in [`Stored::deferred`], named by hash.
    fn message_as(&mut self, i: usize, skeleton: &Message, defer: bool) -> Result<Message> {
        let mut m = skeleton.clone();
        // The message's own record is read once: parsed for the fill, then
        // its bytes moved into `records`.
        let mut own = None;
        if let Some(at) = self.refs.own(i) {
            let large = at.len as usize >= DETACHED_FROM;
            // (Only a record it carries: the record names the payload.)
            let moved = if large && defer && self.refs.carried(i).contains(&at) {
                self.text_of_huge(&at, &mut m)?
            } else {
                None
            };
            if let Some(hash) = moved {
                self.deferred.push(at);
                own = Some((at, Err(hash)));
            } else {
                let mut rec = self.sources.record(&at, true)?;
                if large {
                    // Its bytes, its parse and the text taken from it would
                    // be three copies of a huge record: the bytes are
                    // dropped while it is read and read again after.
                    rec.raw = String::new();
                }
                (self.fill)(&mut m, &mut rec);
                rec.value = None;
                // Kept only when the message carries it (a Gemini CLI
                // legacy message's own bytes are not one of its records).
                if large && self.refs.carried(i).contains(&at) {
                    rec = self.sources.record(&at, false)?;
                }
                own = Some((at, Ok(rec)));
            }
        }
        let mut recs = Vec::with_capacity(self.refs.carried(i).len());
        for at in self.refs.carried(i) {
            let rel = self.rel.get(at.file as usize).cloned().flatten();
            let rec = match own.take() {
                Some((o, Err(hash))) if o == *at => {
                    // What the ledger's `detach_records` makes of it.
                    let mut v = Map::new();
                    if let Some(f) = &rel {
                        v.insert("file".into(), json!(f));
                    }
                    v.insert("line".into(), json!(at.line));
                    v.insert("blob".into(), json!(hash.to_hex()));
                    v.insert("bytes".into(), json!(at.len));
                    recs.push(Value::Object(v));
                    continue;
                }
                Some((o, Ok(rec))) if o == *at => rec,
                other => {
                    own = other;
                    self.sources.record(at, false)?
                }
            };
            recs.push(rec.into_value(rel.as_deref()));
        }
        m.extra.insert("records".into(), Value::Array(recs));
        Ok(m)
    }
}

/// The name of a transcript's file (what its session's metadata keeps
/// as `file`): the last part of `file`'s path.
pub(crate) fn file_name(file: &str) -> String {
    std::path::Path::new(file)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A transcript's session id: the one its records name (`id`), else its
/// file's stem.
pub(crate) fn id_or_stem(id: Option<String>, file: &str) -> Option<String> {
    id.or_else(|| {
        std::path::Path::new(file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
    })
}

/// A transcript reader's `Reader::read_path`: `path` itself, or each
/// session file `list` finds in the directory `path`, read whole with
/// `open` (one session a file), conversations and warnings together.
pub(crate) fn read_files<'a>(
    path: &std::path::Path,
    list: impl Fn(&std::path::Path) -> Vec<std::path::PathBuf>,
    open: impl Fn(&std::path::Path) -> Result<Option<Session<'a>>>,
) -> Result<crate::model::Read> {
    let files = if path.is_dir() {
        list(path)
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = crate::model::Read::default();
    for f in files {
        let got = read_whole(open(&f)?)?;
        out.conversations.extend(got.conversations);
        out.warnings.extend(got.warnings);
    }
    Ok(out)
}

/// A whole file's session read at once (`Reader::read_path`): the
/// conversation and its warnings, or nothing for a file without one.
pub(crate) fn read_whole(session: Option<Session<'_>>) -> Result<crate::model::Read> {
    match session {
        Some(s) => {
            let (conv, warnings) = s.read_all()?;
            Ok(crate::model::Read {
                conversations: vec![conv],
                warnings,
            })
        }
        None => Ok(crate::model::Read::default()),
    }
}

impl Session<'_> {
    /// The whole conversation (every message loaded), with the warnings.
    pub fn read_all(mut self) -> Result<(Conversation, Vec<String>)> {
        let mut messages = Vec::with_capacity(self.conv.messages.len());
        if let Some(tree) = self.records.tree.take() {
            for i in 0..tree.len() {
                messages.push(self.records.message(i, &tree.message(i))?);
            }
        } else {
            for (i, m) in self.conv.messages.iter().enumerate() {
                messages.push(self.records.message(i, m)?);
            }
        }
        self.conv.messages = messages;
        Ok((self.conv, self.warnings))
    }
}

/// A message a loader could not read again: kept in `slot` for the
/// importer to report whole, and given to the ledger.
pub(crate) fn failed_load(slot: &mut Option<Error>, e: Error) -> Error {
    *slot = Some(e.clone());
    e
}

impl crate::loader::Loader for Stored<'_> {
    fn load(&mut self, i: usize, skeleton: &Message) -> Result<Message> {
        let defer = self.defer;
        self.message_as(i, skeleton, defer)
            .map_err(|e| failed_load(&mut self.failed, e))
    }

    fn record_ids(&self, i: usize) -> Vec<(String, u64)> {
        self.refs
            .carried(i)
            .iter()
            .map(|at| {
                let rel = self.rel.get(at.file as usize).cloned().flatten();
                (rel.unwrap_or_default(), u64::from(at.line))
            })
            .collect()
    }

    fn next_deferred(&mut self) -> Option<Result<String>> {
        if self.deferred.is_empty() {
            return None;
        }
        let at = self.deferred.remove(0);
        Some(
            self.sources
                .record(&at, false)
                .map(|rec| rec.raw)
                .map_err(|e| failed_load(&mut self.failed, e)),
        )
    }

    fn aliases(&self) -> Vec<(String, usize)> {
        self.aliases
            .ids
            .iter()
            .filter_map(|(k, i)| Some((k.text(&self.aliases.names)?.into_owned(), *i as usize)))
            .collect()
    }

    fn take_tree(&mut self) -> Option<Skeleton> {
        self.tree.take()
    }

    fn put_tree(&mut self, tree: Skeleton) {
        self.tree = Some(tree);
    }

    fn tail(&self) -> Option<String> {
        self.tail
            .as_ref()
            .and_then(|t| serde_json::to_string(t).ok())
    }
}

impl std::fmt::Debug for Stored<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("sources", &self.sources)
            .field("messages", &self.refs.len())
            .finish()
    }
}

/// The files under `dir` that `keep(path, name)` takes, in path order,
/// looking `max_depth` folders down into those `descend(path, name)` takes:
/// the walk both agents' folders need (a symbolic link is not followed).
pub fn find_files(
    dir: &std::path::Path,
    max_depth: usize,
    descend: impl Fn(&std::path::Path, &str) -> bool,
    keep: impl Fn(&std::path::Path, &str) -> bool,
) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            let name = e.file_name().to_string_lossy().into_owned();
            if ft.is_dir() {
                if depth < max_depth && descend(&p, &name) {
                    stack.push((p, depth + 1));
                }
            } else if keep(&p, &name) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The `.jsonl` files directly in `dir`, in name order, each named
/// `label/NAME` (how a subagent's transcript is named in `extra.records`).
pub fn labelled_jsonl(dir: &std::path::Path, label: &str) -> Vec<(String, std::path::PathBuf)> {
    find_files(dir, 0, |_, _| false, |_, name| name.ends_with(".jsonl"))
        .into_iter()
        .map(|f| {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (format!("{label}/{name}"), f)
        })
        .collect()
}

/// Reads a file with [`read`].
pub fn read_path(path: &std::path::Path) -> Result<Lines> {
    let name = path.display().to_string();
    let f = crate::open_file(path)?;
    read(&name, std::io::BufReader::with_capacity(256 * 1024, f))
}

/// The text of a content value: a string, or the `text` of its text
/// blocks joined by blank lines (other blocks shown as `[type]`).
pub fn content_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            // Borrowed parts, joined into one string sized once (a huge
            // text is copied once, not once per part and again joined).
            use std::borrow::Cow;
            let parts: Vec<Cow<'_, str>> = items
                .iter()
                .filter_map(|b| match b {
                    Value::String(s) => Some(Cow::Borrowed(s.as_str())),
                    Value::Object(o) => match o.get("text").and_then(Value::as_str) {
                        Some(t) => Some(Cow::Borrowed(t)),
                        None => match o.get("type").and_then(Value::as_str) {
                            Some("tool_result") => {
                                o.get("content").map(|c| Cow::Owned(content_text(c)))
                            }
                            Some(t) if t.contains("image") => Some(Cow::Borrowed("[image]")),
                            Some(_) => None,
                            None => None,
                        },
                    },
                    _ => None,
                })
                .collect();
            parts.join("\n\n")
        }
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Whether a user text is a block the agent injected rather than words the
/// human typed (`<system-reminder>`, `<environment_context>`,
/// `<user_instructions>`, a caveat, a local command's output…).
pub fn is_injected(text: &str) -> bool {
    let t = text.trim_start();
    const TAGS: &[&str] = &[
        "<system-reminder>",
        "<environment_context>",
        "<user_instructions>",
        "<permissions instructions>",
        "<local-command-stdout>",
        "<local-command-stderr>",
        "<local-command-caveat>",
        "<command-name>",
        "<command-message>",
        "<turn_aborted>",
        "<task-notification>",
        "<user_shell_command>",
        "<skills_instructions>",
        "# AGENTS.md instructions",
        "Caveat: The messages below were generated",
    ];
    t.is_empty() || TAGS.iter().any(|p| t.starts_with(p))
}

/// A title from the first words a human typed: its first non-empty line
/// without tags, at most 80 characters.
pub fn title_of(text: &str) -> Option<String> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('<'))?;
    // At most 81 characters are looked at: a huge one-line prompt is not
    // copied whole.
    let clean: String = line.chars().filter(|c| !c.is_control()).take(81).collect();
    if clean.chars().count() <= 80 {
        return Some(clean);
    }
    let cut: String = clean.chars().take(79).collect();
    Some(format!("{}…", cut.trim_end()))
}

/// How a tool call reads: the command of a shell call, the path and the
/// change of an edit, the URL of a fetch, else the arguments as JSON.
pub fn tool_call_text(name: &str, input: &Value) -> String {
    // Claude Code and Codex name arguments in snake_case, opencode in
    // camelCase (`filePath`, `oldString`, `newString`).
    let s = |k: &str| {
        let camel = match k {
            "file_path" => "filePath",
            "old_string" => "oldString",
            "new_string" => "newString",
            other => other,
        };
        input
            .get(k)
            .or_else(|| input.get(camel))
            .and_then(Value::as_str)
    };
    let lower = name.to_ascii_lowercase();
    if let Some(cmd) = s("command").or_else(|| s("cmd")) {
        return format!("$ {cmd}");
    }
    if let Some(cmd) = input.get("command").and_then(Value::as_array) {
        let parts: Vec<&str> = cmd.iter().filter_map(Value::as_str).collect();
        return format!("$ {}", parts.join(" "));
    }
    if let (Some(path), Some(old), Some(new)) = (s("file_path"), s("old_string"), s("new_string")) {
        let mut d = format!("--- {path}\n+++ {path}\n");
        for l in old.lines() {
            d.push_str(&format!("-{l}\n"));
        }
        for l in new.lines() {
            d.push_str(&format!("+{l}\n"));
        }
        return d;
    }
    if let (Some(path), Some(content)) = (s("file_path"), s("content")) {
        return format!("write {path}\n{content}");
    }
    if let Some(url) = s("url") {
        return format!("fetch {url}");
    }
    if let Some(prompt) = s("prompt") {
        return match s("description") {
            Some(d) => format!("{d}\n\n{prompt}"),
            None => prompt.to_owned(),
        };
    }
    if let Some(q) = s("query").or_else(|| s("pattern")) {
        return format!("{lower} {q}");
    }
    // Claude Code's `Read`, Gemini CLI's `read_file`.
    if (lower == "read" || lower == "read_file")
        && let Some(p) = s("file_path")
    {
        return format!("read {p}");
    }
    if let Some(patch) = s("input").filter(|_| lower.contains("patch")) {
        return patch.to_owned();
    }
    match input {
        Value::String(t) => t.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_kept_raw_and_a_partial_last_line_waits() {
        let text = b"{\"a\":1}\n\nnot json\n{\"a\":1,\"a\":2}\n{\"b\":";
        let got = read("t.jsonl", &text[..]).expect("reads");
        assert_eq!(got.records.len(), 4);
        assert_eq!(got.records[0].raw, "{\"a\":1}");
        assert!(got.records[0].value.is_some());
        assert!(got.records[1].value.is_none());
        assert!(got.records[2].value.is_none());
        assert!(
            got.records[3].value.is_none(),
            "a repeated key is not interpreted"
        );
        assert_eq!(got.warnings.len(), 3, "{:?}", got.warnings);
        assert!(
            got.warnings[0].starts_with("t.jsonl:3"),
            "{:?}",
            got.warnings
        );
        assert!(got.warnings[2].contains("t.jsonl:5"), "{:?}", got.warnings);
    }

    #[test]
    fn refs_keep_each_messages_records_in_one_list() {
        let at = |line: u32| RecRef {
            file: 0,
            line,
            offset: u64::from(line) * 10,
            len: 9,
            check: u64::from(line),
        };
        let own = vec![Some(at(2)), None, Some(at(9)), Some(at(5))];
        let carried = vec![
            vec![at(1), at(2), at(3)],
            vec![at(4)],
            vec![at(6), at(7)], // its own record is not one it carries
            vec![],
        ];
        let mut r = Refs::from_lists(own.clone(), carried.clone());
        assert_eq!(r.len(), 4);
        for i in 0..4 {
            assert_eq!(r.own(i), own[i], "{i}");
            assert_eq!(r.carried(i), &carried[i][..], "{i}");
        }
        r.push(Some(at(11)), [at(10)]);
        r.reorder(&[4, 2, 0, 1, 3]);
        assert_eq!(r.own(1), Some(at(9)));
        assert_eq!(r.carried(1), &[at(6), at(7)]);
        assert_eq!(r.carried(0), &[at(10)]);
        assert_eq!(r.own(0), Some(at(11)));
        // The last message carries one more: after those it has, its
        // own record still apart.
        r.push(Some(at(20)), []);
        r.push_to_last(at(21));
        assert_eq!(r.own(5), Some(at(20)));
        assert_eq!(r.carried(5), &[at(21)]);
        r.push(Some(at(30)), [at(30)]);
        r.push_to_last(at(31));
        assert_eq!(r.carried(6), &[at(30), at(31)]);
        assert_eq!(r.own(6), Some(at(30)));
    }

    #[test]
    fn bad_utf8_names_the_line() {
        let e = read("t.jsonl", &b"{}\n\xff\n"[..]).expect_err("not UTF-8");
        assert_eq!(e.rule, "encoding");
        assert_eq!(e.location.map(|l| l.line), Some(2));
    }

    #[test]
    fn injected_blocks_are_not_titles() {
        assert!(is_injected("<system-reminder>\nx</system-reminder>"));
        assert!(is_injected("  <environment_context>"));
        assert!(!is_injected("fix the migration"));
        assert_eq!(title_of("\n  fix it\nmore").as_deref(), Some("fix it"));
    }
}

#[cfg(test)]
mod huge_tests {
    use super::*;

    #[test]
    fn a_huge_strings_text_is_unescaped_in_place_as_serde_reads_it() {
        let texts = [
            "plain",
            "a \"quoted\" line\n\t\\ / \u{8}\u{c}\r é 😀 \u{1}\u{1f}",
            "",
            "\u{2028}\u{ffff}\u{10ffff}",
        ];
        for t in texts {
            let lit = serde_json::to_string(t).expect("a string");
            // serde writes some characters bare: spell them as escapes too.
            let spelled = lit.replace('é', "\\u00e9").replace('😀', "\\ud83d\\ude00");
            for l in [&lit, &spelled] {
                let mut body = l[1..l.len() - 1].to_owned();
                assert!(unescape_in_place(&mut body), "{l}");
                assert_eq!(body, t);
            }
        }
        for bad in ["\\ud83d", "\\x", "\\u12", "tail\\"] {
            let mut body = bad.to_owned();
            assert!(!unescape_in_place(&mut body), "{bad}");
        }
        let raw = format!(
            "{{\"a\":\"b\",\"text\":{},\"c\":1}}",
            serde_json::to_string(&"x\n".repeat(DETACHED_FROM)).expect("a string")
        );
        let (a, b, esc) = huge_string(&raw).expect("most of the line");
        assert!(esc);
        assert!(raw[a..b].starts_with("\"x\\n"));
        let small = slim(&raw, (a, b), &literal_start(&raw[a..b]));
        let v: Value = serde_json::from_str(&small).expect("parses");
        let start = v["text"].as_str().expect("a text");
        assert!(start.len() > 2000 && start.len() <= 4096, "{}", start.len());
        assert!("x\n".repeat(2048).starts_with(start), "the start");
        assert_eq!(v["c"], 1);
    }
}
