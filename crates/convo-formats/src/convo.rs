//! CONVO files: CONVO-FILE-SPEC v0.1.1, plus the optional `title` of v0.1.2.
//!
//! # Wire format
//!
//! A UTF-8 text file in two parts:
//!
//! ```text
//! ### @founder
//! Hi who are you.
//!
//! ### @Gem
//! I am Gemini 2.5 Pro. Nice to meet you.
//!
//! ----
//! {
//!   "type": "dialog",
//!   "time": "2025-10-23T12:00:00-05:00[America/Chicago]",
//!   "participants": ["founder", {"name": "Gem", "generative": true, "generative:model": "gemini-2.5-pro"}]
//! }
//! ```
//!
//! * **Metadata block**, found from the end: the file ends with one JSON
//!   object (trailing whitespace allowed), preceded by a line of four or
//!   more `-` (the separator; the last such line in the file), which follows
//!   a blank line. Keys: `type` (string, required), `time` (required: an ISO
//!   8601 date or date-time; RFC 9557 annotations such as
//!   `[America/Chicago]` are accepted and kept verbatim, and an offset that
//!   contradicts its named zone is an error), `participants` (required:
//!   strings, or objects with a required `name`, `generative` (boolean,
//!   default false), `generative:model` (string), other keys kept),
//!   `languages` (strings), `languages_meta` (object), `title` (string).
//!   Unknown keys are kept on a round trip.
//! * **Content block**: everything before the separator, parsed on its own as
//!   CommonMark 0.31.2 (pulldown-cmark, byte offsets). Only a *top-level*
//!   ATX level-3 heading whose text starts with `@` is a speaker delimiter;
//!   the rest of its line (without a closing `#` sequence, trimmed) is the
//!   speaker's name. The same line inside a fenced or indented code block, an
//!   HTML block, a block quote or a list item is content, and an unclosed
//!   fence runs to the end of the content block, exactly as CommonMark says.
//!   A turn's text is everything between its delimiter line and the next
//!   delimiter (or the separator), less the one blank line that ends it.
//!   Only blank lines may come before the first delimiter.
//! * The set of participant names must equal the set of speaker names.
//!
//! # Escapes, and why write → read is lossless
//!
//! `\#\#\# @` is the escape for `### @`. A reader turns a line that starts
//! (after up to three spaces) with `\#\#\#`, blanks and `@` back into `###`
//! wherever it is text — anywhere but inside a code or HTML block (a
//! lazy continuation line of a block quote is text too). A writer escapes
//! exactly the lines of a turn that would
//! otherwise parse as delimiters (repeating until none is left, since
//! escaping one line can change how the next parses). A text that already
//! holds an escaped line gets one more leading backslash, which a reader
//! removes again (`\\#\#\# @` reads as `\#\#\# @`), so every text survives.
//!
//! A turn that leaves a fenced code block or an HTML block (kinds 1–5) open
//! would swallow the next delimiter. The writer then closes it on a line of
//! its own and records what it added in the metadata key `convo:closers`
//! (`[{"turn": 3, "append": "\n```"}]`); a reader that knows the key removes
//! it, one that does not sees a well-formed file.
//!
//! # Errors
//!
//! Every broken rule is an [`Error`] with the rule's name, line, column and
//! an excerpt: `encoding`, `separator-missing`, `separator-blank-line`,
//! `metadata-missing`, `metadata-json`, `json-too-deep`, `json-duplicate-key`,
//! `metadata-required`,
//! `metadata-wrong-type`, `time-invalid`, `time-offset-zone`,
//! `participant-name`, `participant-duplicate`, `content-before-delimiter`,
//! `empty-name`, `names-mismatch`, `closers`, `too-large`. A file over
//! 10 MiB is read, with a warning (the spec expects at most 10 MB).

use crate::error::{Error, Result};
use crate::json::pretty;
use crate::model::{Conversation, Message, Read, Role};
use crate::{Reader, Writer};
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Range;

/// The CONVO format.
#[derive(Clone, Copy, Debug, Default)]
pub struct Convo;

/// Files over this size are read with a warning.
pub const WARN_BYTES: usize = 10 * 1024 * 1024;

/// The metadata key recording what the writer appended to close a turn.
pub const CLOSERS_KEY: &str = "convo:closers";

/// Where a read conversation keeps its metadata block's text (in
/// [`Conversation::meta`], never in a file), so that writing an unchanged
/// conversation gives the block back byte for byte, key order included.
pub const SOURCE_META_KEY: &str = "convo:metadata";

impl Reader for Convo {
    fn name(&self) -> &'static str {
        "convo"
    }
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let mut warnings = Vec::new();
        if bytes.len() > WARN_BYTES {
            warnings.push(format!(
                "{file}: {:.1} MiB is more than the 10 MB CONVO-FILE-SPEC expects; read anyway",
                bytes.len() as f64 / (1024.0 * 1024.0)
            ));
        }
        let conv = parse(file, bytes)?;
        Ok(Read {
            conversations: vec![conv],
            warnings,
        })
    }
}

impl Writer for Convo {
    fn name(&self) -> &'static str {
        "convo"
    }
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>> {
        write(conv).map(String::into_bytes)
    }
}

// ----- lines ------------------------------------------------------------------

/// Byte offsets where lines start (CommonMark line endings: `\n`, `\r\n`, `\r`).
fn line_starts(t: &str) -> Vec<usize> {
    let b = t.as_bytes();
    let mut out = vec![0];
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\n' => out.push(i + 1),
            b'\r' => {
                if b.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                out.push(i + 1);
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The start of the line holding byte `off`.
fn line_start_of(t: &str, off: usize) -> usize {
    t.as_bytes()[..off]
        .iter()
        .rposition(|&c| c == b'\n' || c == b'\r')
        .map_or(0, |i| i + 1)
}

/// The end of the line starting at `start` (before its line ending) and the
/// start of the next line.
fn line_end_of(t: &str, start: usize) -> (usize, usize) {
    let b = t.as_bytes();
    match b[start..].iter().position(|&c| c == b'\n' || c == b'\r') {
        None => (b.len(), b.len()),
        Some(p) => {
            let e = start + p;
            let next = if b[e] == b'\r' && b.get(e + 1) == Some(&b'\n') {
                e + 2
            } else {
                e + 1
            };
            (e, next)
        }
    }
}

fn is_blank(line: &str) -> bool {
    line.bytes().all(|c| c == b' ' || c == b'\t')
}

fn is_separator(line: &str) -> bool {
    let t = line.trim_end_matches([' ', '\t']);
    t.len() >= 4 && t.bytes().all(|c| c == b'-')
}

/// The last separator line of `t`, scanning from the end: (start, end, next).
fn find_separator(t: &str) -> Option<(usize, usize, usize)> {
    let b = t.as_bytes();
    let mut end = b.len();
    loop {
        let start = b[..end]
            .iter()
            .rposition(|&c| c == b'\n' || c == b'\r')
            .map_or(0, |i| i + 1);
        if is_separator(&t[start..end]) {
            let (_, next) = line_end_of(t, start);
            return Some((start, end, next));
        }
        if start == 0 {
            return None;
        }
        end = start - 1;
        if b[end] == b'\n' && end > 0 && b[end - 1] == b'\r' {
            end -= 1;
        }
    }
}

// ----- delimiters and escapes ---------------------------------------------------

/// If `line` is written like a speaker delimiter (`###`, blanks, `@`), the
/// name: the rest of the line without a closing `#` sequence, trimmed.
/// Returns the name and its byte offset in the line.
pub fn delimiter_name(line: &str) -> Option<(&str, usize)> {
    let indent = line.bytes().take_while(|&c| c == b' ').count();
    if indent > 3 {
        return None;
    }
    let rest = line[indent..].strip_prefix("###")?;
    let ws = rest
        .bytes()
        .take_while(|&c| c == b' ' || c == b'\t')
        .count();
    if ws == 0 {
        return None;
    }
    let after = rest[ws..].strip_prefix('@')?;
    let name_off = indent + 3 + ws + 1;
    let mut name = after.trim_end_matches([' ', '\t']);
    let hashes = name.len() - name.trim_end_matches('#').len();
    if hashes > 0 {
        let before = &name[..name.len() - hashes];
        if before.is_empty() || before.ends_with([' ', '\t']) {
            name = before.trim_end_matches([' ', '\t']);
        }
    }
    let lead = name.len() - name.trim_start_matches([' ', '\t']).len();
    Some((&name[lead..], name_off + lead))
}

/// If `line` is an escaped delimiter `E_k` (indent, `k + 1` backslashes,
/// `#\#\#`, blanks, `@`): the byte offset of its first backslash and `k`.
fn escaped_level(line: &str) -> Option<(usize, usize)> {
    let indent = line.bytes().take_while(|&c| c == b' ').count();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let n = rest.bytes().take_while(|&c| c == b'\\').count();
    if n == 0 {
        return None;
    }
    let tail = rest[n..].strip_prefix("#\\#\\#")?;
    let ws = tail
        .bytes()
        .take_while(|&c| c == b' ' || c == b'\t')
        .count();
    if ws == 0 || !tail[ws..].starts_with('@') {
        return None;
    }
    Some((indent, n - 1))
}

/// What one pass of the CommonMark parser tells us about a text.
#[derive(Default)]
struct Blocks {
    /// Top-level level-3 headings written like delimiters: (line start, name, name offset).
    delimiters: Vec<(usize, String, usize)>,
    /// Code and HTML blocks at any depth, in order: where an escaped
    /// delimiter is content and stays as it is.
    opaque: Vec<Range<usize>>,
    /// The last top-level block: its kind and range.
    last: Option<(LastBlock, Range<usize>)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LastBlock {
    Fenced,
    Html,
    Other,
}

fn scan(t: &str, want_opaque: bool) -> Blocks {
    let mut out = Blocks::default();
    let mut depth = 0usize;
    for (ev, range) in Parser::new_ext(t, Options::empty()).into_offset_iter() {
        match ev {
            Event::Start(tag) => {
                if want_opaque && matches!(tag, Tag::CodeBlock(_) | Tag::HtmlBlock) {
                    out.opaque.push(range.clone());
                }
                if depth == 0 {
                    let kind = match &tag {
                        Tag::CodeBlock(CodeBlockKind::Fenced(_)) => LastBlock::Fenced,
                        Tag::HtmlBlock => LastBlock::Html,
                        _ => LastBlock::Other,
                    };
                    out.last = Some((kind, range.clone()));
                    if let Tag::Heading {
                        level: HeadingLevel::H3,
                        ..
                    } = &tag
                    {
                        let ls = line_start_of(t, range.start);
                        let (le, _) = line_end_of(t, ls);
                        if let Some((name, off)) = delimiter_name(&t[ls..le]) {
                            out.delimiters.push((ls, name.to_owned(), ls + off));
                        }
                    }
                }
                depth += 1;
            }
            Event::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    out
}

/// The lines that are escaped delimiters outside code and HTML blocks:
/// (offset of the first backslash, level k), in order. Both the reader
/// (to un-escape) and the writer (to add a level) use exactly this rule.
fn escaped_lines(t: &str, opaque: &[Range<usize>]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    // Each line is looked at once, so a long line with many matches stays linear.
    let mut line_end = 0;
    for (at, _) in t.match_indices("#\\#\\#") {
        if at < line_end {
            continue;
        }
        let ls = line_start_of(t, at);
        let (le, _) = line_end_of(t, ls);
        line_end = le.max(at + 1);
        let Some((off, k)) = escaped_level(&t[ls..le]) else {
            continue;
        };
        let i = opaque.partition_point(|r| r.start <= ls);
        if i > 0 && opaque[i - 1].end > ls {
            continue;
        }
        out.push((ls + off, k));
    }
    out
}

// ----- reading ------------------------------------------------------------------

/// A participant from the metadata.
#[derive(Clone, Debug)]
struct Participant {
    name: String,
    generative: bool,
    model: Option<String>,
    role: Option<Role>,
}

/// Parses a CONVO file.
pub fn parse(file: &str, bytes: &[u8]) -> Result<Conversation> {
    let text = utf8(file, bytes)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let id = format!("sha256:{}", convo_core::sha256(text.as_bytes()).to_hex());

    // 1. The separator and the metadata, from the end.
    let (sep_start, meta_start) = separator(file, text)?;
    let meta = parse_metadata(file, text, meta_start)?;

    // 2. The content block, on its own.
    let content = &text[..sep_start];
    let blocks = scan(content, content.contains("#\\#\\#"));
    let first = blocks
        .delimiters
        .first()
        .map(|d| d.0)
        .unwrap_or(content.len());
    if let Some(p) = content[..first].find(|c: char| !c.is_whitespace()) {
        let why = if blocks.delimiters.is_empty() {
            "text with no speaker delimiter: each turn starts with a line `### @Name`"
        } else {
            "text before the first speaker delimiter: the content block must start with `### @Name`"
        };
        return Err(Error::new(file, "content-before-delimiter", why).at(text, p));
    }

    // 3. Turns.
    let turns = Turns::read(file, text, content, &blocks, &meta)?;
    if let Some(bad) = meta.closers.keys().find(|&&t| t >= turns.said.len()) {
        return Err(Error::new(
            file,
            "closers",
            format!(
                "`{CLOSERS_KEY}` names turn {bad}, but the file has {} turns",
                turns.said.len()
            ),
        )
        .at(text, meta_start));
    }

    // 4. Participants = speakers.
    let by_name: BTreeMap<&str, &Participant> = meta
        .participants
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    turns.check_speakers(file, text, &by_name, meta.participants_at)?;

    let time = Some(meta.time_ms);
    let messages = turns
        .said
        .into_iter()
        .map(|(name, body)| {
            let p = by_name.get(name.as_str());
            let role = match p {
                Some(p) if p.generative => Role::Assistant,
                Some(p) => p.role.unwrap_or(Role::User),
                None => Role::User,
            };
            let model = p.and_then(|p| p.model.clone());
            Message::new(role, name, body).at(time).with_model(model)
        })
        .collect();
    let mut conv = Conversation::linear(messages);
    conv.id = Some(id);
    conv.title = meta.title;
    conv.agent = meta
        .participants
        .iter()
        .find(|p| p.generative)
        .map(|p| p.name.clone());
    conv.created_at = time;
    conv.meta = meta.keep;
    Ok(conv)
}

/// A file's text; bytes that are not UTF-8 are the error `encoding`.
fn utf8<'a>(file: &str, bytes: &'a [u8]) -> Result<&'a str> {
    match std::str::from_utf8(bytes) {
        Ok(t) => Ok(t),
        Err(e) => {
            let ok = e.valid_up_to();
            let valid = std::str::from_utf8(&bytes[..ok]).unwrap_or("");
            Err(Error::new(
                file,
                "encoding",
                format!(
                    "the file is not UTF-8 (invalid byte 0x{:02x} here)",
                    bytes[ok]
                ),
            )
            .at(valid, ok))
        }
    }
}

/// Where the separator line starts and the metadata after it starts;
/// the separator must be there, after a blank line.
fn separator(file: &str, text: &str) -> Result<(usize, usize)> {
    let Some((sep_start, _sep_end, meta_start)) = find_separator(text) else {
        return Err(Error::new(
            file,
            "separator-missing",
            "no separator: a CONVO file ends with a line of four or more `-` after a blank line, then the metadata JSON object",
        )
        .at(text, text.len()));
    };
    if sep_start > 0 {
        let prev_start = line_start_of(text, sep_start - 1);
        let (prev_end, _) = line_end_of(text, prev_start);
        if !is_blank(&text[prev_start..prev_end]) {
            return Err(Error::new(
                file,
                "separator-blank-line",
                "the separator line must follow a blank line",
            )
            .at(text, sep_start));
        }
    }
    Ok((sep_start, meta_start))
}

/// The turns of a CONVO file's content.
struct Turns<'c> {
    /// Each turn's speaker and text.
    said: Vec<(String, String)>,
    /// Where each speaker's first turn starts.
    first_line_of: BTreeMap<&'c str, usize>,
}

impl<'c> Turns<'c> {
    /// The turns after the `blocks`' delimiters in `content` (the start
    /// of `text`): each up to the next, less the blank line that ends it
    /// and its closer (`meta`), escaped delimiters un-escaped.
    fn read(
        file: &str,
        text: &str,
        content: &str,
        blocks: &'c Blocks,
        meta: &Meta,
    ) -> Result<Turns<'c>> {
        let escapes = escaped_lines(content, &blocks.opaque);
        let mut said = Vec::with_capacity(blocks.delimiters.len());
        let mut first_line_of: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, (ls, name, name_off)) in blocks.delimiters.iter().enumerate() {
            if name.is_empty() {
                return Err(Error::new(
                    file,
                    "empty-name",
                    "a speaker delimiter needs a name after `@` (`### @Name`)",
                )
                .at(text, *name_off));
            }
            first_line_of.entry(name.as_str()).or_insert(*ls);
            let (_, body_start) = line_end_of(content, *ls);
            let body_end = blocks
                .delimiters
                .get(i + 1)
                .map(|d| d.0)
                .unwrap_or(content.len());
            let raw = &content[body_start.min(body_end)..body_end];
            let mut cut = strip_turn_end(raw);
            if let Some(suffix) = meta.closers.get(&i) {
                if !raw[..cut].ends_with(suffix.as_str()) {
                    return Err(Error::new(
                        file,
                        "closers",
                        format!(
                            "`{CLOSERS_KEY}` says turn {i} ends with {suffix:?}, but it does not"
                        ),
                    )
                    .at(text, *ls));
                }
                cut -= suffix.len();
            }
            let abs = body_start..body_start + cut;
            let body = unescape(content, abs, &escapes);
            said.push((name.clone(), body));
        }
        Ok(Turns {
            said,
            first_line_of,
        })
    }

    /// The participants (`by_name`, listed at `participants_at`) must be
    /// the speakers: else the error `names-mismatch`.
    fn check_speakers(
        &self,
        file: &str,
        text: &str,
        by_name: &BTreeMap<&str, &Participant>,
        participants_at: usize,
    ) -> Result<()> {
        let speakers: BTreeSet<&str> = self.said.iter().map(|(n, _)| n.as_str()).collect();
        let declared: BTreeSet<&str> = by_name.keys().copied().collect();
        if speakers == declared {
            return Ok(());
        }
        let missing: Vec<&str> = speakers.difference(&declared).copied().collect();
        let unused: Vec<&str> = declared.difference(&speakers).copied().collect();
        let mut why = String::from("the participant names must equal the speaker names:");
        if !missing.is_empty() {
            why.push_str(&format!(" speaking but not a participant: {missing:?};"));
        }
        if !unused.is_empty() {
            why.push_str(&format!(" participant who never speaks: {unused:?};"));
        }
        let at = missing
            .first()
            .and_then(|n| self.first_line_of.get(n).copied())
            .unwrap_or(participants_at);
        Err(Error::new(file, "names-mismatch", why.trim_end_matches(';')).at(text, at))
    }
}

/// How many bytes of a turn's raw text are its text: the one blank line
/// that ends a turn is not.
fn strip_turn_end(raw: &str) -> usize {
    for end in ["\n\n", "\r\n\r\n", "\r\r", "\r\n", "\n", "\r"] {
        if raw.ends_with(end) {
            return raw.len() - end.len();
        }
    }
    raw.len()
}

/// The text of `range`, with the escaped delimiters in it un-escaped.
fn unescape(content: &str, range: Range<usize>, escapes: &[(usize, usize)]) -> String {
    let lo = escapes.partition_point(|e| e.0 < range.start);
    let hi = escapes.partition_point(|e| e.0 < range.end);
    if lo == hi {
        return content[range].to_owned();
    }
    let mut out = String::with_capacity(range.len());
    let mut at = range.start;
    for &(off, k) in &escapes[lo..hi] {
        let width = if k == 0 { 6 } else { 1 };
        if off < at || off + width > range.end {
            // Cut short (a hand-made `convo:closers`): leave it as it is.
            continue;
        }
        out.push_str(&content[at..off]);
        if k == 0 {
            out.push_str("###");
        }
        at = off + width;
    }
    out.push_str(&content[at..range.end]);
    out
}

struct Meta {
    title: Option<String>,
    time_ms: i64,
    participants: Vec<Participant>,
    participants_at: usize,
    closers: BTreeMap<usize, String>,
    /// What the conversation keeps: everything but `title` and the closers.
    keep: Map<String, Value>,
}

fn parse_metadata(file: &str, text: &str, start: usize) -> Result<Meta> {
    let mtext = &text[start..];
    let Some(first) = mtext.find(|c: char| !c.is_whitespace()) else {
        return Err(Error::new(
            file,
            "metadata-missing",
            "nothing after the separator: the file must end with the metadata JSON object",
        )
        .at(text, text.len()));
    };
    if !mtext[first..].starts_with('{') {
        return Err(Error::new(
            file,
            "metadata-json",
            "expected the metadata JSON object (`{`) after the separator",
        )
        .at(text, start + first));
    }
    let m = MetaText {
        file,
        text,
        start,
        mtext,
        obj_at: start + first,
    };
    let map = m.map()?;
    let mut keep = Map::new();
    // type
    let ty = map
        .get("type")
        .ok_or_else(|| m.required("type", "a string such as \"dialog\""))?;
    match m.value(ty)? {
        Value::String(s) => keep.insert("type".into(), Value::String(s)),
        _ => return Err(m.wrong("type", ty, "a string")),
    };
    let time_ms = m.time(&map, &mut keep)?;
    let (participants, participants_at) = m.participants(&map, &mut keep)?;
    m.languages(&map, &mut keep)?;
    let title = match map.get("title") {
        None => None,
        Some(r) => match m.value(r)? {
            Value::String(s) => Some(s),
            Value::Null => None,
            _ => return Err(m.wrong("title", r, "a string")),
        },
    };
    let closers = match map.get(CLOSERS_KEY) {
        None => BTreeMap::new(),
        Some(r) => closers(m.value(r)?).ok_or_else(|| {
            Error::new(
                file,
                "closers",
                format!("`{CLOSERS_KEY}` must be an array of {{\"turn\": n, \"append\": \"…\"}}"),
            )
            .at(text, m.off_of(r))
        })?,
    };
    for (k, r) in &map {
        if matches!(
            k.as_str(),
            "type" | "time" | "participants" | "languages" | "languages_meta" | "title"
        ) || k == CLOSERS_KEY
            || k == SOURCE_META_KEY
        {
            continue;
        }
        keep.insert(k.clone(), m.value(r)?);
    }
    keep.insert(
        SOURCE_META_KEY.into(),
        Value::String(mtext.trim().to_owned()),
    );
    Ok(Meta {
        title,
        time_ms,
        participants,
        participants_at,
        closers,
        keep,
    })
}

/// The metadata object of a CONVO file (`mtext`, from `start` of `text`;
/// the object at `obj_at`), for its errors.
struct MetaText<'a> {
    file: &'a str,
    text: &'a str,
    start: usize,
    mtext: &'a str,
    obj_at: usize,
}

impl MetaText<'_> {
    /// Where a value of the metadata is in the file.
    fn off_of(&self, raw: &RawValue) -> usize {
        self.start + (raw.get().as_ptr() as usize).saturating_sub(self.mtext.as_ptr() as usize)
    }

    /// A JSON error of the metadata, pointed at in the whole file.
    fn relocate(&self, e: serde_json::Error) -> Error {
        let mut err = crate::error::json_error(self.file, Some(self.mtext), String::new(), &e);
        if err.rule == "json-syntax" || err.rule == "json-truncated" || err.rule == "wrong-type" {
            err.rule = "metadata-json";
        }
        // Re-point at the whole file.
        let line0 = crate::locate(self.text, self.start).0.line;
        if let Some(l) = err.location.as_mut() {
            if l.line == 1 {
                l.column += crate::locate(self.text, self.start).0.column - 1;
            }
            l.line += line0 - 1;
        }
        err.file = self.file.to_owned();
        err
    }

    /// The metadata's keys and raw values (keys unique, one object).
    fn map(&self) -> Result<BTreeMap<String, &RawValue>> {
        let relocate = |e| self.relocate(e);
        convo_core::json::check_unique_keys(self.mtext).map_err(relocate)?;
        let mut de = serde_json::Deserializer::from_str(self.mtext);
        let m = serde::Deserialize::deserialize(&mut de).map_err(relocate)?;
        de.end().map_err(relocate)?;
        Ok(m)
    }

    fn wrong(&self, key: &str, raw: &RawValue, want: &str) -> Error {
        Error::new(
            self.file,
            "metadata-wrong-type",
            format!("`{key}` must be {want}, found {}", describe(raw.get())),
        )
        .at(self.text, self.off_of(raw))
    }

    fn required(&self, key: &str, want: &str) -> Error {
        Error::new(
            self.file,
            "metadata-required",
            format!("the metadata has no `{key}` ({want}, required)"),
        )
        .at(self.text, self.obj_at)
    }

    fn value(&self, raw: &RawValue) -> Result<Value> {
        serde_json::from_str(raw.get()).map_err(|e| {
            Error::new(self.file, "metadata-json", e.to_string()).at(self.text, self.off_of(raw))
        })
    }

    /// The required `time` (kept in `keep`), in milliseconds.
    fn time(
        &self,
        map: &BTreeMap<String, &RawValue>,
        keep: &mut Map<String, Value>,
    ) -> Result<i64> {
        let tr = map
            .get("time")
            .ok_or_else(|| self.required("time", "an ISO 8601 date or date-time"))?;
        let Value::String(ts) = self.value(tr)? else {
            return Err(self.wrong("time", tr, "an ISO 8601 date or date-time string"));
        };
        let time_ms = parse_time(&ts).map_err(|(rule, why)| {
            Error::new(self.file, rule, why).at(self.text, self.off_of(tr) + 1)
        })?;
        keep.insert("time".into(), Value::String(ts));
        Ok(time_ms)
    }

    /// The required `participants` (kept in `keep`), each named once, and
    /// where they are listed.
    fn participants(
        &self,
        map: &BTreeMap<String, &RawValue>,
        keep: &mut Map<String, Value>,
    ) -> Result<(Vec<Participant>, usize)> {
        let pr = map
            .get("participants")
            .ok_or_else(|| self.required("participants", "an array of names or objects"))?;
        let items: Vec<&RawValue> = serde_json::from_str(pr.get())
            .map_err(|_| self.wrong("participants", pr, "an array of names or objects"))?;
        let mut participants = Vec::with_capacity(items.len());
        let mut raw_items = Vec::with_capacity(items.len());
        let mut seen = HashSet::new();
        for item in items {
            let at = self.off_of(item);
            let v = self.value(item)?;
            let p = participant(&v, item.get())
                .map_err(|(rule, why)| Error::new(self.file, rule, why).at(self.text, at))?;
            if p.name.is_empty() {
                return Err(Error::new(
                    self.file,
                    "participant-name",
                    "a participant's name is empty",
                )
                .at(self.text, at));
            }
            if !seen.insert(p.name.clone()) {
                return Err(Error::new(
                    self.file,
                    "participant-duplicate",
                    format!("participant {:?} is listed twice", p.name),
                )
                .at(self.text, at));
            }
            participants.push(p);
            raw_items.push(v);
        }
        keep.insert("participants".into(), Value::Array(raw_items));
        Ok((participants, self.off_of(pr)))
    }

    /// The optional `languages` and `languages_meta`, kept in `keep`.
    fn languages(
        &self,
        map: &BTreeMap<String, &RawValue>,
        keep: &mut Map<String, Value>,
    ) -> Result<()> {
        if let Some(r) = map.get("languages") {
            let v = self.value(r)?;
            match &v {
                Value::Array(a) if a.iter().all(Value::is_string) => {}
                _ => return Err(self.wrong("languages", r, "an array of strings")),
            }
            keep.insert("languages".into(), v);
        }
        if let Some(r) = map.get("languages_meta") {
            let v = self.value(r)?;
            if !v.is_object() {
                return Err(self.wrong("languages_meta", r, "an object"));
            }
            keep.insert("languages_meta".into(), v);
        }
        Ok(())
    }
}

/// One entry of `participants`: a name, or an object with `name` and
/// optionally `generative`, `generative:model` and `role`. An error is the
/// rule it breaks and why (the caller says where).
fn participant(v: &Value, raw: &str) -> std::result::Result<Participant, (&'static str, String)> {
    let o = match v {
        Value::String(s) => {
            return Ok(Participant {
                name: s.clone(),
                generative: false,
                model: None,
                role: None,
            });
        }
        Value::Object(o) => o,
        _ => {
            return Err((
                "metadata-wrong-type",
                format!(
                    "a participant must be a name or an object with `name`, found {}",
                    describe(raw)
                ),
            ));
        }
    };
    let name = match o.get("name") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            return Err((
                "participant-name",
                "a participant's `name` must be a string".to_owned(),
            ));
        }
        None => {
            return Err((
                "participant-name",
                "a participant object needs a `name` (string, required)".to_owned(),
            ));
        }
    };
    let generative = match o.get("generative") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err((
                "metadata-wrong-type",
                format!("`generative` of {name:?} must be true or false, found {other}"),
            ));
        }
    };
    let model = match o.get("generative:model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err((
                "metadata-wrong-type",
                format!("`generative:model` of {name:?} must be a string, found {other}"),
            ));
        }
    };
    let role = o.get("role").and_then(Value::as_str).and_then(|r| match r {
        "system" => Some(Role::System),
        "tool" => Some(Role::Tool),
        _ => None,
    });
    Ok(Participant {
        name,
        generative,
        model,
        role,
    })
}

/// The closers a CONVO file's metadata records (`[{"turn": n, "append":
/// "…"}]`), or `None` when the value is not that shape.
fn closers(v: Value) -> Option<BTreeMap<usize, String>> {
    let Value::Array(items) = v else {
        return None;
    };
    let mut out = BTreeMap::new();
    for it in items {
        let t = it.get("turn").and_then(Value::as_u64)?;
        let a = it.get("append").and_then(Value::as_str)?;
        out.insert(t as usize, a.to_owned());
    }
    Some(out)
}

fn describe(raw: &str) -> String {
    let t = raw.trim_start();
    let kind = match t.as_bytes().first() {
        Some(b'"') => "a string",
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    };
    let mut shown: String = t.chars().take(40).collect();
    if shown.len() < t.len() {
        shown.push('…');
    }
    format!("{kind} ({shown})")
}

/// Validates a CONVO `time` and returns it in milliseconds since the epoch.
///
/// Accepts an ISO 8601 date (`2025-10-23`), a date-time with or without an
/// offset, and RFC 9557 annotations (`…-05:00[America/Chicago]`); an
/// offset that contradicts the named zone at that moment is
/// `time-offset-zone`. A time without offset or zone is taken as UTC.
pub fn parse_time(s: &str) -> std::result::Result<i64, (&'static str, String)> {
    use jiff::fmt::temporal::{Pieces, PiecesOffset};
    let invalid = |why: String| {
        (
            "time-invalid",
            format!("`{s}` is not a valid ISO 8601 date or date-time: {why}"),
        )
    };
    let p = Pieces::parse(s).map_err(|e| invalid(e.to_string()))?;
    let dt = p
        .date()
        .to_datetime(p.time().unwrap_or(jiff::civil::Time::midnight()));
    let tz = p
        .to_time_zone()
        .map_err(|e| invalid(format!("unknown time zone ({e})")))?;
    let ms = |t: jiff::Timestamp| t.as_millisecond();
    match (p.offset(), tz) {
        (Some(PiecesOffset::Zulu), _) => jiff::tz::Offset::UTC
            .to_timestamp(dt)
            .map(ms)
            .map_err(|e| invalid(e.to_string())),
        (Some(off), Some(tz)) => {
            let off = off.to_numeric_offset();
            let t = off.to_timestamp(dt).map_err(|e| invalid(e.to_string()))?;
            let actual = tz.to_offset(t);
            if actual != off {
                let name = tz.iana_name().unwrap_or("the named zone");
                return Err((
                    "time-offset-zone",
                    format!(
                        "`{s}`: the offset {off} contradicts {name}, which is at {actual} at that moment"
                    ),
                ));
            }
            Ok(ms(t))
        }
        (Some(off), None) => off
            .to_numeric_offset()
            .to_timestamp(dt)
            .map(ms)
            .map_err(|e| invalid(e.to_string())),
        (None, Some(tz)) => tz
            .to_ambiguous_timestamp(dt)
            .compatible()
            .map(ms)
            .map_err(|e| invalid(e.to_string())),
        (None, None) => jiff::tz::Offset::UTC
            .to_timestamp(dt)
            .map(ms)
            .map_err(|e| invalid(e.to_string())),
    }
}

// ----- writing ------------------------------------------------------------------

/// How many escape passes a turn may need before the writer gives up.
const MAX_ESCAPE_ROUNDS: usize = 64;

/// A turn's text as written: escaped, plus what was appended to close an
/// open fence or HTML block (empty when nothing was).
pub fn encode_turn(text: &str) -> Result<(String, String)> {
    let needs_care = text.bytes().any(|c| matches!(c, b'#' | b'`' | b'~' | b'<'));
    if !needs_care {
        return Ok((text.to_owned(), String::new()));
    }
    // 1. Escape lines that would be delimiters, until none is left.
    let mut t = text.to_owned();
    let mut escaped: HashSet<usize> = HashSet::new();
    let mut rounds = 0;
    loop {
        let b = scan(&t, false);
        if b.delimiters.is_empty() {
            break;
        }
        // Escaping a line can turn the next one into a delimiter (it stops
        // being HTML-block content); real text needs a round or two, and a
        // text built to need thousands is refused rather than escaped in
        // quadratic time.
        rounds += 1;
        if rounds > MAX_ESCAPE_ROUNDS {
            return Err(Error::new(
                "<turn>",
                "cannot-encode",
                "escaping this turn's `### @` lines would take more than 64 passes",
            ));
        }
        let starts = line_starts(&t);
        let mut out = String::with_capacity(t.len() + 3 * b.delimiters.len());
        let mut at = 0;
        for (ls, _, _) in &b.delimiters {
            let indent = t[*ls..].bytes().take_while(|&c| c == b' ').count();
            let hash = ls + indent;
            out.push_str(&t[at..hash]);
            out.push_str("\\#\\#\\#");
            at = hash + 3;
            if let Ok(i) = starts.binary_search(ls) {
                escaped.insert(i);
            }
        }
        out.push_str(&t[at..]);
        t = out;
    }
    // 2. Lines already escaped in the text get one more backslash.
    let b = scan(&t, true);
    let starts = line_starts(&t);
    let bumps: Vec<usize> = escaped_lines(&t, &b.opaque)
        .into_iter()
        .filter(|(off, _)| {
            let ls = line_start_of(&t, *off);
            starts
                .binary_search(&ls)
                .map(|i| !escaped.contains(&i))
                .unwrap_or(true)
        })
        .map(|(off, _)| off)
        .collect();
    if !bumps.is_empty() {
        let mut out = String::with_capacity(t.len() + bumps.len());
        let mut at = 0;
        for off in bumps {
            out.push_str(&t[at..off]);
            out.push('\\');
            at = off;
        }
        out.push_str(&t[at..]);
        t = out;
    }
    // 3. Close whatever would swallow the next delimiter, and check the
    // result with the reader's own rules; refuse rather than write a file
    // that would read back differently.
    for fresh_line in [false, true] {
        let mut closer = String::new();
        for _ in 0..3 {
            let mut full = t.clone();
            full.push_str(&closer);
            if next_delimiter_survives(&full) {
                break;
            }
            let b = scan(&full, false);
            let Some(c) = b
                .last
                .and_then(|(kind, r)| closing_line(&full, kind, r.start))
            else {
                break;
            };
            if fresh_line || !(full.ends_with('\n') || full.ends_with('\r')) {
                closer.push('\n');
            }
            closer.push_str(&c);
        }
        if decodes_to(&t, &closer, text) {
            return Ok((t, closer));
        }
    }
    Err(Error::new(
        "<turn>",
        "cannot-encode",
        "this turn's text cannot be written so that it reads back the same (CommonMark leaves a block open; a lone carriage return next to a code fence can do that)",
    ))
}

/// Whether a turn written as `body` + `closer`, followed by another turn,
/// reads back as exactly `want` with the next delimiter intact.
fn decodes_to(body: &str, closer: &str, want: &str) -> bool {
    let mut doc = String::with_capacity(body.len() + closer.len() + 32);
    doc.push_str("### @a\n");
    doc.push_str(body);
    doc.push_str(closer);
    doc.push_str("\n\n");
    let next = doc.len();
    doc.push_str("### @b\nx\n\n");
    let blocks = scan(&doc, doc.contains("#\\#\\#"));
    if blocks.delimiters.len() != 2 || blocks.delimiters[0].0 != 0 || blocks.delimiters[1].0 != next
    {
        return false;
    }
    let escapes = escaped_lines(&doc, &blocks.opaque);
    let start = "### @a\n".len();
    let raw = &doc[start..next];
    let cut = strip_turn_end(raw);
    if !raw[..cut].ends_with(closer) {
        return false;
    }
    unescape(&doc, start..start + cut - closer.len(), &escapes) == want
}

/// Whether a delimiter written after `t` and a blank line is still one.
fn next_delimiter_survives(t: &str) -> bool {
    let mut probe = String::with_capacity(t.len() + 12);
    probe.push_str(t);
    probe.push_str("\n\n### @x\n");
    let at = t.len() + 2;
    scan(&probe, false)
        .delimiters
        .iter()
        .any(|(ls, name, _)| *ls == at && name == "x")
}

/// The line that closes the open block starting at `start`.
fn closing_line(t: &str, kind: LastBlock, start: usize) -> Option<String> {
    let ls = line_start_of(t, start);
    let (le, _) = line_end_of(t, ls);
    let line = t[ls..le].trim_start_matches(' ');
    match kind {
        LastBlock::Fenced => {
            let c = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
            let n = line.chars().take_while(|x| *x == c).count();
            Some(std::iter::repeat_n(c, n).collect())
        }
        LastBlock::Html => {
            let l = line.to_ascii_lowercase();
            if l.starts_with("<!--") {
                Some("-->".into())
            } else if l.starts_with("<?") {
                Some("?>".into())
            } else if l.starts_with("<![cdata[") {
                Some("]]>".into())
            } else if l.starts_with("<!") {
                Some(">".into())
            } else {
                let rest = l.get(1..).unwrap_or("");
                ["script", "pre", "style", "textarea"]
                    .iter()
                    .find(|tag| rest.starts_with(*tag))
                    .map(|tag| format!("</{tag}>"))
            }
        }
        LastBlock::Other => None,
    }
}

/// Whether `name` can be written as `### @name` and read back the same.
pub fn writable_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\n', '\r'])
        && delimiter_name(&format!("### @{name}")).map(|(n, _)| n) == Some(name)
}

/// Writes a conversation (its main timeline) as a CONVO file.
pub fn write(conv: &Conversation) -> Result<String> {
    let turns = conv.turns();
    let mut out = String::new();
    let mut closers = Vec::new();
    for (i, m) in turns.iter().enumerate() {
        if !writable_name(&m.speaker) {
            return Err(Error::new(
                "<convo>",
                "unwritable-name",
                format!(
                    "speaker {:?} cannot be written as a CONVO delimiter (empty, a line break, surrounding blanks or a trailing ` #`)",
                    m.speaker
                ),
            ));
        }
        let (body, closer) = encode_turn(&m.text).map_err(|mut e| {
            e.message = format!("turn {i}: {}", e.message);
            e
        })?;
        out.push_str("### @");
        out.push_str(&m.speaker);
        out.push('\n');
        out.push_str(&body);
        out.push_str(&closer);
        out.push_str("\n\n");
        if !closer.is_empty() {
            closers.push(json!({"turn": i, "append": closer}));
        }
    }
    let meta = metadata_for(conv, &turns, closers);
    out.push_str("----\n");
    out.push_str(&meta);
    out.push('\n');
    Ok(out)
}

/// The metadata object, known keys first in the spec's order.
fn metadata_for(conv: &Conversation, turns: &[&Message], closers: Vec<Value>) -> String {
    let mut keys: Vec<(String, Value)> = Vec::new();
    let participants = participants_for(conv, turns);
    let kind = conv
        .meta
        .get("type")
        .cloned()
        .filter(Value::is_string)
        .unwrap_or_else(|| {
            Value::String(if participants.len() == 2 {
                "dialog".into()
            } else {
                "conversation".into()
            })
        });
    keys.push(("type".into(), kind));
    if let Some(t) = &conv.title {
        keys.push(("title".into(), Value::String(t.clone())));
    }
    let time = conv
        .meta
        .get("time")
        .and_then(Value::as_str)
        .filter(|t| parse_time(t).is_ok())
        .map(str::to_owned)
        .unwrap_or_else(|| crate::json::millis_to_iso(conv.first_time().unwrap_or(0)));
    keys.push(("time".into(), Value::String(time)));
    keys.push(("participants".into(), Value::Array(participants)));
    for k in ["languages", "languages_meta"] {
        if let Some(v) = conv.meta.get(k) {
            keys.push((k.into(), v.clone()));
        }
    }
    for (k, v) in &conv.meta {
        if !matches!(
            k.as_str(),
            "type" | "title" | "time" | "participants" | "languages" | "languages_meta"
        ) && k != CLOSERS_KEY
            && k != SOURCE_META_KEY
        {
            keys.push((k.clone(), v.clone()));
        }
    }
    if closers.is_empty()
        && let Some(src) = conv.meta.get(SOURCE_META_KEY).and_then(Value::as_str)
        && let Ok(Value::Object(orig)) = serde_json::from_str::<Value>(src)
        && orig == keys.iter().cloned().collect::<Map<String, Value>>()
    {
        return src.to_owned();
    }
    if !closers.is_empty() {
        keys.push((CLOSERS_KEY.into(), Value::Array(closers)));
    }
    let mut s = String::from("{\n");
    for (i, (k, v)) in keys.iter().enumerate() {
        let body = pretty(v).replace('\n', "\n  ");
        s.push_str(&format!("  {}: {body}", Value::String(k.clone())));
        s.push_str(if i + 1 < keys.len() { ",\n" } else { "\n" });
    }
    s.push('}');
    s
}

/// The participants to write: those kept from the source whose names still
/// speak, then one per new speaker (generative when it answered).
fn participants_for(conv: &Conversation, turns: &[&Message]) -> Vec<Value> {
    let mut order: Vec<&str> = Vec::new();
    for m in turns {
        if !order.contains(&m.speaker.as_str()) {
            order.push(&m.speaker);
        }
    }
    let kept: BTreeMap<String, Value> = conv
        .meta
        .get("participants")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    let name = p
                        .as_str()
                        .or_else(|| p.get("name").and_then(Value::as_str))?;
                    Some((name.to_owned(), p.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    order
        .into_iter()
        .map(|name| {
            if let Some(v) = kept.get(name) {
                return v.clone();
            }
            let first = turns.iter().find(|m| m.speaker == name);
            let role = first.map(|m| m.role).unwrap_or(Role::User);
            match role {
                Role::Assistant | Role::ToolCall => {
                    let mut o = Map::new();
                    o.insert("name".into(), Value::String(name.to_owned()));
                    o.insert("generative".into(), Value::Bool(true));
                    if let Some(model) = turns
                        .iter()
                        .filter(|m| m.speaker == name)
                        .find_map(|m| m.model.clone())
                    {
                        o.insert("generative:model".into(), Value::String(model));
                    }
                    Value::Object(o)
                }
                Role::System | Role::Tool => json!({"name": name, "role": role.as_str()}),
                Role::User => Value::String(name.to_owned()),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participants_and_closers_are_read_or_refused_with_their_rule() {
        let p = participant(&json!("Ada"), "\"Ada\"").expect("read");
        assert_eq!((p.name.as_str(), p.generative), ("Ada", false));
        let v =
            json!({"name": "bot", "generative": true, "generative:model": "m1", "role": "tool"});
        let p = participant(&v, "{}").expect("read");
        assert_eq!(
            (p.generative, p.model.as_deref(), p.role),
            (true, Some("m1"), Some(Role::Tool))
        );
        let rule = |v: Value| participant(&v, &v.to_string()).expect_err("refused").0;
        assert_eq!(rule(json!({"generative": true})), "participant-name");
        assert_eq!(rule(json!({"name": 7})), "participant-name");
        assert_eq!(
            rule(json!({"name": "b", "generative": "yes"})),
            "metadata-wrong-type"
        );
        assert_eq!(rule(json!(42)), "metadata-wrong-type");
        let c = closers(json!([{"turn": 2, "append": "###"}])).expect("read");
        assert_eq!(c.get(&2).map(String::as_str), Some("###"));
        assert!(closers(json!([{"turn": "two", "append": "x"}])).is_none());
        assert!(closers(json!({"turn": 1})).is_none());
    }

    fn read(s: &str) -> Result<Conversation> {
        parse("t.convo", s.as_bytes())
    }

    const META: &str =
        "----\n{\"type\":\"dialog\",\"time\":\"2025-10-23\",\"participants\":[\"a\",\"b\"]}\n";

    #[test]
    fn delimiter_names() {
        assert_eq!(delimiter_name("### @Bob").map(|x| x.0), Some("Bob"));
        assert_eq!(
            delimiter_name("   ###\t@Bob ##  ").map(|x| x.0),
            Some("Bob")
        );
        assert_eq!(delimiter_name("### @C#").map(|x| x.0), Some("C#"));
        assert_eq!(delimiter_name("### @").map(|x| x.0), Some(""));
        assert_eq!(delimiter_name("###@Bob"), None);
        assert_eq!(delimiter_name("    ### @Bob"), None);
        assert!(writable_name("Ünïcödé 名前"));
        assert!(!writable_name("x #"));
        assert!(!writable_name(" x"));
    }

    #[test]
    fn fenced_and_quoted_delimiters_are_content() {
        let f = format!(
            "### @a\n```\n### @b\n```\n> ### @b\n- ### @b\n\n    ### @b\n\n<div>\n### @b\n</div>\n\n### @b\nhi\n\n{META}"
        );
        let c = read(&f).expect("valid");
        let t = c.turns();
        assert_eq!(t.len(), 2);
        assert!(t[0].text.contains("```\n### @b\n```"));
        assert_eq!(t[1].text, "hi");
    }

    #[test]
    fn unclosed_fence_runs_to_the_end() {
        let f = format!("### @a\n```\n### @b\nstill code\n\n{META}");
        let e = read(&f).expect_err("b never speaks");
        assert_eq!(e.rule, "names-mismatch", "{e}");
    }

    #[test]
    fn escapes_round_trip() {
        for text in [
            "### @b",
            "\\#\\#\\# @b",
            "\\\\#\\#\\# @b",
            "x\n### @b\n<custom-tag>\n### @c",
            "```\n### @b",
            "<!-- open\n### @b",
            "<script>\n### @b",
            "~~~~\n~~~\n### @b",
            "### @b\n---",
            "a\r### @b\r\n",
        ] {
            let c = Conversation::linear(vec![
                Message::new(Role::User, "a", text),
                Message::new(Role::Assistant, "b", "ok"),
            ]);
            let w = write(&c).expect("writes");
            let back = read(&w).unwrap_or_else(|e| panic!("{text:?}: {e}\n{w}"));
            let got: Vec<_> = back.turns().iter().map(|m| m.text.clone()).collect();
            assert_eq!(got, vec![text.to_owned(), "ok".into()], "{w}");
        }
    }

    #[test]
    fn regression_escaped_line_that_becomes_a_lazy_block_quote_line() {
        // Escaping `### @bob` makes it a lazy continuation of the quote's
        // paragraph; it must still be un-escaped on read.
        let c = Conversation::linear(vec![Message::new(Role::User, "a", ">A\n### @bob")]);
        let back = read(&write(&c).expect("writes")).expect("reads");
        assert_eq!(back.turns()[0].text, ">A\n### @bob");
    }

    #[test]
    fn regression_lone_cr_after_a_fence_is_refused_not_miswritten() {
        // pulldown-cmark reads "```\r### @bob\r" as a fence whose info
        // string swallows the line; no closer can fix that reliably.
        let c = Conversation::linear(vec![Message::new(
            Role::User,
            "a",
            "### @bob\n```\r### @bob\r",
        )]);
        match write(&c) {
            Ok(w) => assert_eq!(read(&w).expect("reads").turns()[0].text, c.messages[0].text),
            Err(e) => assert_eq!(e.rule, "cannot-encode"),
        }
    }

    #[test]
    fn regression_closers_that_cut_into_an_escaped_line_do_not_panic() {
        let f = "### @a\n\\#\\#\\# @bob\n\n----\n{\"type\":\"d\",\"time\":\"2025-10-23\",\"participants\":[\"a\"],\"convo:closers\":[{\"turn\":0,\"append\":\"#\\\\# @bob\"}]}\n";
        let c = read(f).expect("reads");
        assert_eq!(c.turns()[0].text, "\\#\\", "left as it is");
    }

    #[test]
    fn time_rules() {
        assert!(parse_time("2025-10-23").is_ok());
        assert!(parse_time("2025-10-23T12:00:00Z").is_ok());
        assert!(parse_time("2025-10-23T12:00:00").is_ok());
        assert_eq!(
            parse_time("2025-10-23T12:00:00-05:00[America/Chicago]"),
            Ok(1_761_238_800_000)
        );
        assert_eq!(
            parse_time("2025-10-23T12:00:00-06:00[America/Chicago]").map_err(|e| e.0),
            Err("time-offset-zone")
        );
        assert_eq!(
            parse_time("2025-12-23T12:00:00-06:00[America/Chicago]").map(|_| ()),
            Ok(())
        );
        assert_eq!(
            parse_time("yesterday").map_err(|e| e.0),
            Err("time-invalid")
        );
        assert_eq!(
            parse_time("2025-10-23T12:00:00[Mars/Olympus]").map_err(|e| e.0),
            Err("time-invalid")
        );
    }
}
