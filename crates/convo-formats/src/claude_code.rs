//! Claude Code transcripts: `~/.claude/projects/<project>/<session>.jsonl`.
//!
//! # Wire format
//!
//! JSON Lines, one record per line, appended as the session runs. Every
//! record has a `type`; the conversation records (`user`, `assistant`,
//! `attachment`, `system`, `progress`…) also have a `uuid` and a
//! `parentUuid` (`null` at a root) that make a tree, `isSidechain`,
//! `timestamp`, `sessionId`, `cwd`, `version`, `gitBranch`:
//!
//! ```text
//! {"type":"queue-operation","operation":"enqueue","content":"hello",…}
//! {"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":"hello"},"uuid":"9018…","timestamp":"2026-11-24T15:53:08.139Z","sessionId":"360b…",…}
//! {"parentUuid":"9018…","type":"attachment","attachment":{"type":"date",…},"uuid":"1c72…",…}
//! {"parentUuid":"1c72…","type":"assistant","message":{"id":"msg_1","model":"claude-…","content":[{"type":"text","text":"…"}],"stop_reason":"end_turn","usage":{…}},"uuid":"0e20…",…}
//! {"type":"cost-state","totalCostUSD":0.0001,…}
//! ```
//!
//! * `user` whose `message.content` is a string or text blocks: what the
//!   human typed (an `isMeta` one was injected by Claude Code); with
//!   `tool_result` blocks: tools' answers; `isCompactSummary`: the summary
//!   that replaced the history before a compaction.
//! * `assistant`: one model answer (older versions wrote one record per
//!   content block, sharing `message.id`): `text`, `thinking`, `tool_use`
//!   blocks, `model`, `usage`, `stop_reason`.
//! * `/rewind` (and editing an earlier prompt) appends records whose
//!   `parentUuid` is an earlier record: a new branch in the same file.
//!   Compaction starts a new root whose `logicalParentUuid` names the
//!   record before it. Subagents are sidechains (`isSidechain: true`): in
//!   the same file in older versions, in `<session>/subagents/*.jsonl` in
//!   newer ones.
//! * Other types (`summary`, `custom-title`, `file-history-snapshot`,
//!   `queue-operation`, `api-request`, `api-request-blob`, `last-prompt`,
//!   `cost-state`, and whatever the next version adds) are kept as they
//!   are; an unknown type is never an error.
//!
//! # Mapping
//!
//! A human's prompt is a [`Role::User`] message, an answer with tool calls
//! a [`Role::ToolCall`] (to the first tool; the text is the Bash command,
//! the edit as a diff, the URL…), a tool result a [`Role::Tool`] from the
//! tool, an answer without tool calls a [`Role::Assistant`] — or, when the
//! turn goes on after it (a tool call or a tool result follows), a
//! [`Role::ToolCall`] to `user` marked `intermediate`. Every other record
//! rides with the message before it in the file (the first message for the
//! records before it) in `extra.records` ([`crate::records`]), so no line
//! is lost and `convo export --format claude-code` gives the file back byte
//! for byte. A message's key is its record's `uuid`.
//!
//! Parents skip the records that are not messages. A `parentUuid` that is
//! not in the file (the session was resumed from another file) starts a
//! new root, with a warning; a loop is the error `parent-cycle`. A root
//! other than the first (a compaction without `logicalParentUuid`, a
//! sidechain, a subagent's transcript) is linked to the message before it
//! in the file (for a subagent file: the last message of the session
//! written before it), so it is a branch from the turn that started it.
//! Timelines: the branch of the last message written (outside sidechains)
//! is `main`; every other leaf is `alt-N`, or `agent-N` for sidechains.
//! The title is the session's `custom-title`, else its latest `summary`,
//! else the first words a human typed (not a `<system-reminder>` or a
//! command's output).

use crate::error::{Error, Result};
use crate::model::{Conversation, Message, Read, Role};
use crate::records::{self, Id, Names, RecRef, Record, Refs, Session, Skeleton, Sources};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Claude Code reader.
#[derive(Debug)]
pub struct ClaudeCode;

impl crate::Reader for ClaudeCode {
    fn name(&self) -> &'static str {
        "claude-code"
    }

    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let mut ix = Indexer::default();
        let mut sources = Sources::new();
        let warnings = sources.scan_bytes(file, bytes, |f, rec| ix.add(f, false, rec))?;
        records::read_whole(build(file, ix, sources, vec![None], warnings, None)?)
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        records::read_files(path, session_files, open_session)
    }
}

/// Every session transcript under `dir` (a project folder or
/// `~/.claude/projects`), in path order; subagent transcripts
/// (`<session>/subagents/*.jsonl`) are read with their session.
pub fn session_files(dir: &Path) -> Vec<PathBuf> {
    records::find_files(
        dir,
        3,
        |p, name| name != "subagents" && !is_session_folder(p),
        |p, _| p.extension().is_some_and(|x| x == "jsonl"),
    )
}

/// A `<session>/` folder beside `<session>.jsonl` (subagents, tool results).
fn is_session_folder(p: &Path) -> bool {
    p.with_extension("jsonl").is_file()
}

/// Reads one session file and its subagents' transcripts.
pub fn read_session(path: &Path) -> Result<Read> {
    records::read_whole(open_session(path)?)
}

/// Indexes one session file and its subagents' transcripts (an import's
/// first pass: one record in memory at a time); `None` for a file with no
/// record. The messages are read again one at a time from the files
/// ([`Session`]).
pub fn open_session(path: &Path) -> Result<Option<Session<'static>>> {
    let name = path.display().to_string();
    let mut ix = Indexer::default();
    let mut sources = Sources::new();
    let mut warnings = sources.scan_path(path, |f, rec| ix.add(f, false, rec))?;
    let mut rel = vec![None];
    for (r, f) in subagent_files(path) {
        warnings.extend(sources.scan_path(&f, |fi, rec| ix.add(fi, true, rec))?);
        rel.push(Some(r));
    }
    build(&name, ix, sources, rel, warnings, None)
}

/// A session's subagent transcripts (`<session>/subagents/*.jsonl`), in
/// name order, each with its name in `extra.records`.
fn subagent_files(path: &Path) -> Vec<(String, PathBuf)> {
    records::labelled_jsonl(&path.with_extension("").join("subagents"), "subagents")
}

/// The session id a transcript's records name (its first `sessionId`,
/// else its file name), read from its first lines: `None` when they do
/// not say (the whole file is read instead).
pub fn session_identity(path: &Path) -> Option<String> {
    use std::io::{BufRead as _, Read as _};
    let f = crate::open_file(path).ok()?;
    let mut r = std::io::BufReader::new(f);
    let mut line = String::new();
    for _ in 0..64 {
        line.clear();
        // Never more than one record's worth of a line held.
        let read = (&mut r)
            .take(crate::records::MAX_RECORD + 1)
            .read_line(&mut line);
        if read.ok()? == 0 || !line.ends_with('\n') {
            return None;
        }
        if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&line)
            && let Some(id) = o.get("sessionId").and_then(Value::as_str)
        {
            return Some(id.to_owned());
        }
    }
    None
}

/// The lines of a session written after those `tail` says an earlier
/// import stored (its own file's and its subagents'), as a skeleton the
/// ledger adds to the stored session (`convo_llm::ledger::import_tail`):
/// the new messages, and as messages whose key is stored, those they
/// continue from. `stored` says whether a key (a uuid) is in the store.
/// `None` when the files cannot be read that way and must be read whole:
/// a file rewritten or gone since, a new subagent transcript, a record
/// whose parent is not known, a uuid used again, a new root of a
/// subagent.
pub fn open_tail(
    path: &Path,
    tail: &records::Tail,
    stored: &mut dyn FnMut(&str) -> bool,
) -> Result<Option<Session<'static>>> {
    let name = path.display().to_string();
    let mut files = vec![(String::new(), path.to_path_buf())];
    files.extend(subagent_files(path));
    if files.len() != tail.marks.len() {
        return Ok(None);
    }
    let state: TailState = match serde_json::from_value(tail.state.clone()) {
        Ok(s) => s,
        Err(_) => return Ok(None),
    };
    let mut ix = Indexer {
        tools: state.tools.into_iter().collect(),
        typed_title: Some(None),
        any_title: Some(None),
        ..Indexer::default()
    };
    let Some(read) = scan_after(&files, tail, &mut ix)? else {
        return Ok(None);
    };
    let Some(outside) = parents_outside(&ix, stored) else {
        return Ok(None);
    };
    let (stubs, file_stubs, last_main) = tail_stubs(
        &mut ix.names,
        &outside,
        &state.last,
        state.last_main.as_deref(),
        files.len(),
    );
    let new = std::mem::take(&mut ix.items);
    ix.items = stubs;
    ix.items.extend(new);
    let pre = Pre {
        file_stubs,
        last_main,
        marks: read.marks,
    };
    match build(&name, ix, read.sources, read.rel, read.warnings, Some(pre)) {
        Err(e) if e.rule == REREAD => Ok(None),
        other => other,
    }
}

/// The lines of a tail's files ([`open_tail`]) read after their marks.
struct ReadAfter {
    sources: Sources<'static>,
    warnings: Vec<String>,
    rel: Vec<Option<String>>,
    marks: Vec<records::Mark>,
}

/// Indexes the lines of `files` (the session file first, then its
/// subagents', each with its name) written after `tail`'s marks; `None`
/// when a file has no mark or cannot be read from it.
fn scan_after(
    files: &[(String, PathBuf)],
    tail: &records::Tail,
    ix: &mut Indexer,
) -> Result<Option<ReadAfter>> {
    let mut read = ReadAfter {
        sources: Sources::new(),
        warnings: Vec::new(),
        rel: Vec::new(),
        marks: Vec::new(),
    };
    for (f, (r, p)) in files.iter().enumerate() {
        let Some(mark) = tail.mark(r) else {
            return Ok(None);
        };
        let Some(w) = read
            .sources
            .scan_path_after(p, mark, |fi, rec| ix.add(fi, f > 0, rec))?
        else {
            return Ok(None);
        };
        read.warnings.extend(w);
        read.rel.push((f > 0).then(|| r.clone()));
        read.marks.push(mark.clone());
    }
    Ok(Some(read))
}

/// The parents outside a tail's records (each once, all `stored`); `None`
/// when a uuid read is not new (used twice, or stored) or a parent is
/// neither read nor stored.
fn parents_outside(ix: &Indexer, stored: &mut dyn FnMut(&str) -> bool) -> Option<Vec<Id>> {
    let mut read: std::collections::HashSet<Id> = std::collections::HashSet::new();
    for it in &ix.items {
        if !it.uuid.is_none() && (!read.insert(it.uuid) || stored(&ix.names.text_of(it.uuid))) {
            return None;
        }
    }
    let mut outside: Vec<Id> = Vec::new();
    for it in &ix.items {
        let p = it.parent;
        if !it.uuid.is_none() && !p.is_none() && !read.contains(&p) && !outside.contains(&p) {
            if !stored(&ix.names.text_of(p)) {
                return None;
            }
            outside.push(p);
        }
    }
    Some(outside)
}

/// The stored messages a tail's records continue from, as stub items:
/// the parents `outside`, each file's last (`last`, keys), the last of the
/// session's own thread (`last_main`), which comes last among them (the
/// main timeline ends there unless a new message goes on from it). With
/// per file the index of its stub, and the index of `last_main`'s.
fn tail_stubs(
    names: &mut Names,
    outside: &[Id],
    last: &[Option<String>],
    last_main: Option<&str>,
    files: usize,
) -> (Vec<Item>, Vec<Option<usize>>, Option<usize>) {
    let empty = names.intern("");
    let mut stubs: Vec<Item> = Vec::new();
    let mut stub = |key: Id, file: u32| -> usize {
        if let Some(i) = stubs.iter().position(|s| s.uuid == key) {
            if file != u32::MAX {
                stubs[i].at.file = file;
            }
            return i;
        }
        stubs.push(Item {
            at: RecRef {
                file,
                line: 0,
                offset: 0,
                len: 0,
                check: 0,
            },
            role: Some(Role::User),
            speaker: empty,
            to: NO_NAME,
            uuid: key,
            parent: Id::NONE,
            time: i64::MIN,
            flags: STUB,
        });
        stubs.len() - 1
    };
    for p in outside {
        stub(*p, u32::MAX);
    }
    let mut file_stubs = vec![None; files];
    for (f, k) in last.iter().enumerate().take(files) {
        if let Some(k) = k {
            file_stubs[f] = Some(stub(Id::of(k, names), f as u32));
        }
    }
    let last_main = last_main.map(|k| stub(Id::of(k, names), u32::MAX));
    let n = stubs.len();
    if let Some(lm) = last_main {
        let s = stubs.remove(lm);
        stubs.push(s);
        let moved = |i: usize| match i {
            i if i == lm => n - 1,
            i if i > lm => i - 1,
            i => i,
        };
        for f in file_stubs.iter_mut().flatten() {
            *f = moved(*f);
        }
    }
    let last_main = last_main.map(|_| n - 1);
    for s in stubs
        .iter_mut()
        .take(n.saturating_sub(usize::from(last_main.is_some())))
    {
        // Not the session's own thread: never where `main` ends.
        s.flags |= SIDECHAIN;
    }
    (stubs, file_stubs, last_main)
}

/// The rule of [`build`]'s error that says a tail cannot be read alone.
const REREAD: &str = "reread";

/// What a tail's skeleton starts from ([`open_tail`]): per file, the item
/// of its last stored message; the item of the session's last message
/// (outside sidechains); the files' marks before.
struct Pre {
    file_stubs: Vec<Option<usize>>,
    last_main: Option<usize>,
    marks: Vec<records::Mark>,
}

/// Claude Code's [`records::Tail::state`]: the tool uses not answered yet
/// (id → tool), per file the key of its last message, the key of the
/// session's last message outside sidechains.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct TailState {
    tools: std::collections::BTreeMap<String, String>,
    last: Vec<Option<String>>,
    last_main: Option<String>,
}

/// What the first pass keeps of a session's records.
#[derive(Default)]
struct Indexer {
    items: Vec<Item>,
    /// Uuids that are not canonical UUIDs, speakers, tools.
    names: Names,
    tools: HashMap<String, String>,
    /// The latest `custom-title` and `summary`.
    custom_title: Option<String>,
    summary: Option<String>,
    /// The title from the first words a human typed, once found.
    typed_title: Option<Option<String>>,
    /// A title from the first user message, whatever it says, once seen.
    any_title: Option<Option<String>>,
    /// The session file's first `sessionId`, `cwd`, `version`, `gitBranch`.
    first: [Option<String>; 4],
    /// Tool uses answered (their ids).
    answered: std::collections::HashSet<String>,
}

const FIRST_KEYS: [&str; 4] = ["sessionId", "cwd", "version", "gitBranch"];

impl Indexer {
    fn add(&mut self, file: u32, sub: bool, rec: Record) -> Result<()> {
        let what = classify(&rec, &mut self.tools, false);
        let sidechain = sub || rec.get("isSidechain").and_then(Value::as_bool) == Some(true);
        if let What::Msg {
            role: Role::User,
            extra,
            ..
        } = &what
            && (self.typed_title.is_none() || self.any_title.is_none())
        {
            let text = rec
                .get("message")
                .and_then(|m| m.get("content"))
                .map(records::content_text)
                .unwrap_or_default();
            if self.any_title.is_none() {
                self.any_title = Some(crate::model::title_of_text(&text));
            }
            if self.typed_title.is_none()
                && !sidechain
                && !extra.contains_key("compact_summary")
                && !records::is_injected(&text)
            {
                self.typed_title = Some(records::title_of(&text));
            }
        }
        match rec.str("type") {
            Some("custom-title") => self.custom_title = rec.str("customTitle").map(str::to_owned),
            Some("summary") => self.summary = rec.str("summary").map(str::to_owned),
            _ => {}
        }
        if !sub {
            for (k, slot) in FIRST_KEYS.iter().zip(self.first.iter_mut()) {
                if slot.is_none() {
                    *slot = rec.str(k).map(str::to_owned);
                }
            }
        }
        if let What::Msg {
            role: Role::Tool,
            extra,
            ..
        } = &what
            && let Some(id) = extra.get("tool_use_id").and_then(Value::as_str)
        {
            self.answered.insert(id.to_owned());
        }
        let (role, speaker, to) = match what {
            What::Carrier => (None, NO_NAME, NO_NAME),
            What::Msg {
                role, speaker, to, ..
            } => (
                Some(role),
                self.names.intern(&speaker),
                to.map_or(NO_NAME, |t| self.names.intern(&t)),
            ),
        };
        let mut flags = 0;
        if sub {
            flags |= SUB;
        }
        if sidechain {
            flags |= SIDECHAIN;
        }
        self.items.push(Item {
            at: rec.at(file),
            role,
            speaker,
            to,
            uuid: Id::of_opt(rec.str("uuid"), &mut self.names),
            parent: Id::of_opt(
                rec.str("parentUuid")
                    .or_else(|| rec.str("logicalParentUuid")),
                &mut self.names,
            ),
            time: time_of(&rec).unwrap_or(i64::MIN),
            flags,
        });
        Ok(())
    }
}

/// Fills a skeleton message from its record (see [`Session::fill`]). A
/// prompt of one string has its text moved out of the record's parse, not
/// copied.
fn fill(m: &mut Message, rec: &mut Record) {
    let typed =
        rec.str("type") == Some("user") && rec.get("isMeta").and_then(Value::as_bool) != Some(true);
    let taken = match rec
        .value
        .as_mut()
        .and_then(|v| v.get_mut("message"))
        .and_then(|m| m.get_mut("content"))
    {
        Some(Value::String(s)) if typed => Some(std::mem::take(s)),
        _ => None,
    };
    if let What::Msg { text, extra, .. } = classify(rec, &mut HashMap::new(), taken.is_none()) {
        m.text = taken.unwrap_or(text);
        m.extra.extend(extra);
    }
    m.model = rec
        .get("message")
        .and_then(|x| x.get("model"))
        .and_then(Value::as_str)
        .filter(|x| *x != "<synthetic>")
        .map(str::to_owned);
}

/// What one record is, for the mapping.
enum What {
    Carrier,
    Msg {
        role: Role,
        speaker: String,
        to: Option<String>,
        text: String,
        extra: Map<String, Value>,
    },
}

/// What the first pass keeps of one record (~100 bytes, no allocation:
/// its ids are [`Id`]s, its speaker and tool names of the [`Indexer`]'s
/// [`Names`]).
struct Item {
    at: RecRef,
    /// Its uuid and `parentUuid` (or `logicalParentUuid`).
    uuid: Id,
    parent: Id,
    /// Its time ([`i64::MIN`]: none).
    time: i64,
    /// A message's speaker and tool ([`NO_NAME`]: none).
    speaker: u32,
    to: u32,
    /// A message's role; `None` for a record that is not one.
    role: Option<Role>,
    /// [`SUB`], [`SIDECHAIN`], [`STUB`].
    flags: u8,
}

/// No name.
const NO_NAME: u32 = u32::MAX;
/// A subagent's transcript, not the session file.
const SUB: u8 = 1;
/// A sidechain.
const SIDECHAIN: u8 = 2;
/// A stored message a tail's records continue from ([`open_tail`]): not
/// read, not written.
const STUB: u8 = 4;

impl Item {
    fn sub(&self) -> bool {
        self.flags & SUB != 0
    }
    fn sidechain(&self) -> bool {
        self.flags & SIDECHAIN != 0
    }
    fn stub(&self) -> bool {
        self.flags & STUB != 0
    }
    fn time(&self) -> Option<i64> {
        (self.time != i64::MIN).then_some(self.time)
    }
}

/// What a record is; its text only when `text` (the first pass only
/// needs to know whether there is one).
fn classify(rec: &Record, tools: &mut HashMap<String, String>, text: bool) -> What {
    let Some(v) = &rec.value else {
        return What::Carrier;
    };
    let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
    let msg = v.get("message");
    let content = msg.and_then(|m| m.get("content"));
    match ty {
        "user" => {
            if v.get("isMeta").and_then(Value::as_bool) == Some(true) {
                return What::Carrier;
            }
            let Some(content) = content else {
                return What::Carrier;
            };
            classify_user(v, content, tools, text)
        }
        "assistant" => {
            let Some(blocks) = content.and_then(Value::as_array) else {
                return What::Carrier;
            };
            classify_answer(msg, blocks, tools, text)
        }
        _ => What::Carrier,
    }
}

/// A `user` record with `content`: tools' answers (its `tool_result`
/// blocks, from the tool `tools` says the first answers) or a prompt.
fn classify_user(
    v: &Map<String, Value>,
    content: &Value,
    tools: &HashMap<String, String>,
    want_text: bool,
) -> What {
    let blocks = content.as_array();
    let results: Vec<&Value> = blocks
        .map(|b| {
            b.iter()
                .filter(|x| x.get("type").and_then(Value::as_str) == Some("tool_result"))
                .collect()
        })
        .unwrap_or_default();
    let mut extra = Map::new();
    if let Some(first) = results.first() {
        let id = first
            .get("tool_use_id")
            .and_then(Value::as_str)
            .unwrap_or("");
        let speaker = tools.get(id).cloned().unwrap_or_else(|| "tool".into());
        let text = if want_text {
            results
                .iter()
                .map(|r| records::content_text(r.get("content").unwrap_or(&Value::Null)))
                .collect::<Vec<_>>()
                .join("\n\n")
        } else {
            String::new()
        };
        extra.insert("tool_use_id".into(), json!(id));
        if first.get("is_error").and_then(Value::as_bool) == Some(true) {
            extra.insert("is_error".into(), json!(true));
        }
        return What::Msg {
            role: Role::Tool,
            speaker,
            to: None,
            text,
            extra,
        };
    }
    if v.get("isCompactSummary").and_then(Value::as_bool) == Some(true) {
        extra.insert("compact_summary".into(), json!(true));
    }
    What::Msg {
        role: Role::User,
        speaker: "user".into(),
        to: None,
        text: if want_text {
            records::content_text(content)
        } else {
            String::new()
        },
        extra,
    }
}

/// An `assistant` record's content `blocks` (of `msg`): a tool call (its
/// tool uses noted in `tools`), an answer, or nothing to show.
fn classify_answer(
    msg: Option<&Value>,
    blocks: &[Value],
    tools: &mut HashMap<String, String>,
    want_text: bool,
) -> What {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut first_tool = None;
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = b.get("text").and_then(Value::as_str)
                    && !t.trim().is_empty()
                {
                    texts.push(if want_text {
                        t.to_owned()
                    } else {
                        String::new()
                    });
                }
            }
            Some("tool_use" | "server_tool_use") => {
                let name = b.get("name").and_then(Value::as_str).unwrap_or("tool");
                if let Some(id) = b.get("id").and_then(Value::as_str) {
                    tools.insert(id.to_owned(), name.to_owned());
                }
                first_tool.get_or_insert_with(|| name.to_owned());
                if want_text {
                    calls.push(records::tool_call_text(
                        name,
                        b.get("input").unwrap_or(&Value::Null),
                    ));
                }
            }
            _ => {}
        }
    }
    let mut extra = Map::new();
    if let Some(m) = msg {
        for k in ["usage", "stop_reason", "id"] {
            if let Some(x) = m.get(k).filter(|x| !x.is_null()) {
                extra.insert(k.into(), x.clone());
            }
        }
    }
    let speaker = "claude-code".to_owned();
    if let Some(tool) = first_tool {
        texts.extend(calls);
        What::Msg {
            role: Role::ToolCall,
            speaker,
            to: Some(tool),
            text: texts.join("\n\n"),
            extra,
        }
    } else if !texts.is_empty() {
        What::Msg {
            role: Role::Assistant,
            speaker,
            to: None,
            text: texts.join("\n\n"),
            extra,
        }
    } else {
        What::Carrier
    }
}

/// No index (a `u32` index list's empty slot).
const NONE: u32 = u32::MAX;

/// The uuid tree over `items`: per item the item its `parentUuid` names
/// ([`NONE`]: a root). A uuid used twice links its first record (the
/// others are kept unlinked, with a warning); a parent not in the session
/// starts a new root (in a tail read, `pre`: the new lines cannot be read
/// alone); links that loop are an error.
fn uuid_tree(
    file: &str,
    items: &mut [Item],
    names: &Names,
    where_: &dyn Fn(&Item) -> String,
    pre: bool,
    warnings: &mut Vec<String>,
) -> Result<Vec<u32>> {
    // The uuid tree, over items: a uuid used twice links its first record.
    // Items with a uuid, by uuid (then file order): 4 bytes an item, where
    // a map by uuid takes ~70.
    let mut by_uuid: Vec<u32> = (0..items.len() as u32)
        .filter(|&i| !items[i as usize].uuid.is_none())
        .collect();
    by_uuid.sort_unstable_by_key(|&i| (items[i as usize].uuid, i));
    let mut dups = Vec::new();
    for w in by_uuid.windows(2) {
        if items[w[0] as usize].uuid == items[w[1] as usize].uuid {
            dups.push(w[1] as usize);
        }
    }
    dups.sort_unstable();
    by_uuid.retain(|&i| dups.binary_search(&(i as usize)).is_err());
    for &i in &dups {
        let it = &items[i];
        warnings.push(format!(
            "{}: uuid {} was already used; this record is kept but not linked",
            where_(it),
            names.text_of(it.uuid)
        ));
    }
    for &i in &dups {
        items[i].role = None;
        items[i].uuid = Id::NONE;
    }
    let mut up: Vec<u32> = vec![NONE; items.len()];
    {
        let find = |id: Id| {
            by_uuid
                .binary_search_by(|&j| items[j as usize].uuid.cmp(&id))
                .ok()
                .map(|k| by_uuid[k])
        };
        for (i, it) in items.iter().enumerate() {
            if it.uuid.is_none() || it.parent.is_none() {
                continue;
            }
            match find(it.parent) {
                Some(j) => up[i] = j,
                None if pre => return Err(reread(file)),
                None => warnings.push(format!(
                    "{}: parentUuid {} is not in the session; it starts a new root",
                    where_(it),
                    names.text_of(it.parent)
                )),
            }
        }
    }
    drop(by_uuid);
    let up_of = |i: usize| (up[i] != NONE).then_some(up[i] as usize);
    {
        if let Some(cycle) = crate::tree::find_cycle_in(items.len(), up_of) {
            let ids: Vec<String> = cycle
                .iter()
                .map(|&i| match items[i].uuid.text(names) {
                    Some(t) => t.into_owned(),
                    None => "?".to_owned(),
                })
                .collect();
            let first = &items[cycle[0]];
            return Err(Error::new(
                file,
                "parent-cycle",
                format!(
                    "records' parentUuid links loop: {}",
                    crate::tree::show_cycle(&ids)
                ),
            )
            .at_line(first.at.line as usize, 1));
        }
    }
    Ok(up)
}

/// The timelines: `main` ends at the deepest last child of the last
/// message written outside sidechains; every other leaf is `alt-N`, or
/// `agent-N` for a sidechain's.
fn timelines_of(skel: &Skeleton, sidechain: &[bool]) -> Vec<crate::model::Timeline> {
    let n = skel.len();
    let mut last_child: Vec<u32> = vec![NONE; n];
    for i in 0..n {
        if let Some(p) = skel.parent(i) {
            last_child[p] = i as u32;
        }
    }
    let main_leaf = {
        let last = sidechain.iter().rposition(|s| !s).unwrap_or(n - 1);
        let mut at = last;
        let mut steps = 0;
        while last_child[at] != NONE && steps <= n {
            at = last_child[at] as usize;
            steps += 1;
        }
        at
    };
    drop(last_child);
    skel.timelines(Some(main_leaf), |i| sidechain[i])
}

/// The session's id (its `sessionId`, else the file's stem) and the
/// metadata kept: the first value of each of [`FIRST_KEYS`], the file's name.
fn id_and_meta(file: &str, firsts: &[Option<String>; 4]) -> (Option<String>, Map<String, Value>) {
    let [session_id, ..] = firsts;
    let id = records::id_or_stem(session_id.clone(), file);
    let mut meta = Map::new();
    for (k, v) in FIRST_KEYS.iter().zip(firsts) {
        if let Some(v) = v {
            meta.insert((*k).into(), json!(v));
        }
    }
    meta.insert("file".into(), json!(records::file_name(file)));
    (id, meta)
}

/// Where the files read end (a mark per file; `None` when one was not
/// read to a record) and the state a later tail read goes on from: the
/// tool calls not answered yet, each file's last message, `main`'s last.
#[allow(clippy::too_many_arguments)]
fn tail_of(
    items: &[Item],
    msgs: &Msgs,
    rel: &[Option<String>],
    pre: Option<&Pre>,
    names: &Names,
    last_main: Option<usize>,
    mut tools: HashMap<String, String>,
    answered: &std::collections::HashSet<String>,
) -> Option<records::Tail> {
    let name = |f: u32| rel.get(f as usize).cloned().flatten().unwrap_or_default();
    let mut marks: Vec<Option<records::Mark>> = match &pre {
        Some(p) => p.marks.iter().cloned().map(Some).collect(),
        None => vec![None; rel.len()],
    };
    let mut last: Vec<Option<String>> = vec![None; rel.len()];
    for (i, it) in items.iter().enumerate() {
        let f = it.at.file as usize;
        if f >= rel.len() {
            continue;
        }
        if !it.stub() {
            marks[f] = Some(records::Mark::of(&name(it.at.file), &it.at));
        }
        if msgs.msg_of[i] != NONE {
            last[f] = it.uuid.text(names).map(|t| t.into_owned());
        }
    }
    let last_main = last_main.and_then(|m| {
        items[msgs.item_of[m]]
            .uuid
            .text(names)
            .map(|t| t.into_owned())
    });
    tools.retain(|k, _| !answered.contains(k));
    let state = TailState {
        tools: std::mem::take(&mut tools).into_iter().collect(),
        last,
        last_main,
    };
    marks
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .map(|marks| records::Tail {
            format: "claude-code".into(),
            marks,
            state: serde_json::to_value(state).unwrap_or_default(),
        })
}

/// Builds the skeleton of one session from its records' index (the
/// session file's and its subagents', `rel` naming each file).
/// `None` for a file with no record.
///
/// With `pre`, the items are a tail's ([`open_tail`]): its stubs first,
/// then the records read after the marks; a tail that cannot be read
/// alone is the error [`REREAD`].
fn build<'a>(
    file: &str,
    mut ix: Indexer,
    sources: Sources<'a>,
    rel: Vec<Option<String>>,
    mut warnings: Vec<String>,
    pre: Option<Pre>,
) -> Result<Option<Session<'a>>> {
    let mut items = std::mem::take(&mut ix.items);
    if items.is_empty() {
        return Ok(None);
    }
    items.shrink_to_fit();
    // The skeleton keeps the first pass's names (its ids are of them).
    let mut skel = Skeleton::with_names(std::mem::take(&mut ix.names));
    let Links {
        msgs,
        parent_msg,
        mut aliases,
        linked,
        last_main,
    } = links(
        file,
        &rel,
        &mut items,
        &skel.names,
        pre.as_ref(),
        &mut warnings,
    )?;
    let (owner, holder_needed) = msgs.owners(&items, pre.as_ref(), last_main);
    if pre.is_some() && holder_needed {
        return Err(reread(file));
    }
    let mut refs = msgs.refs(&items, &owner);
    drop(owner);
    skel.reserve_exact(msgs.item_of.len() + 1);
    let (mut sidechain, order_fix) = msgs.fill_skeleton(&mut skel, &items, &parent_msg, &linked);
    drop(parent_msg);
    drop(linked);
    if holder_needed || skel.is_empty() {
        push_holder(&mut skel, &mut refs, &mut sidechain, &items);
    }
    // Where the files read end, and the state to go on from there.
    let tail = tail_of(
        &items,
        &msgs,
        &rel,
        pre.as_ref(),
        &skel.names,
        last_main,
        std::mem::take(&mut ix.tools),
        &ix.answered,
    );
    let created_at = items.iter().find_map(Item::time);
    drop(msgs);
    drop(items);
    if order_fix {
        put_parents_first(&mut skel, &mut refs, &mut sidechain, &mut aliases);
    }
    // Intermediate answers: the turn goes on after them.
    skel.mark_intermediate();
    let timelines = timelines_of(&skel, &sidechain);
    drop(sidechain);
    let conv = ix.conversation(file, created_at, timelines);
    let aliases = aliases_of(aliases, &skel.names);
    skel.shrink_to_fit();
    refs.shrink_to_fit();
    Ok(Some(Session {
        conv,
        warnings,
        records: records::Stored {
            sources,
            rel,
            refs,
            tree: Some(skel),
            fill,
            failed: None,
            aliases,
            tail,
            defer: true,
            deferred: Vec::new(),
        },
    }))
}

impl Indexer {
    /// The session's conversation, without its messages (they are read
    /// again one at a time): its id, title and metadata from the records.
    fn conversation(
        self,
        file: &str,
        created_at: Option<i64>,
        timelines: Vec<crate::model::Timeline>,
    ) -> Conversation {
        let title = self
            .custom_title
            .or(self.summary)
            .or(self.typed_title.flatten())
            .or(self.any_title.flatten());
        let (id, meta) = id_and_meta(file, &self.first);
        Conversation {
            id,
            title,
            agent: Some("claude-code".into()),
            created_at,
            meta,
            messages: Vec::new(),
            timelines,
        }
    }
}

/// How a session's messages link ([`links`]).
struct Links {
    msgs: Msgs,
    /// Per message its parent message ([`NONE`]: a root).
    parent_msg: Vec<u32>,
    /// Records with a uuid that are not messages, each with its message.
    aliases: Vec<(Id, u32)>,
    /// Per message whether it is a root linked to the message before it.
    linked: Vec<bool>,
    /// The last message outside sidechains.
    last_main: Option<usize>,
}

/// The messages among `items` and their parents: up the uuid tree
/// ([`uuid_tree`]), then roots after the first linked to the message
/// before them (a subagent's to the last session message before it).
fn links(
    file: &str,
    rel: &[Option<String>],
    items: &mut [Item],
    names: &Names,
    pre: Option<&Pre>,
    warnings: &mut Vec<String>,
) -> Result<Links> {
    let where_ = |it: &Item| match rel.get(it.at.file as usize).cloned().flatten() {
        Some(f) => format!("{file} ({f}):{}", it.at.line),
        None => format!("{file}:{}", it.at.line),
    };
    let up = uuid_tree(file, items, names, &where_, pre.is_some(), warnings)?;
    let msgs = Msgs::of(items);
    let (mut parent_msg, aliases) = msgs.parents(items, &up);
    drop(up);
    let (linked, last_main) = msgs.link_roots(items, &mut parent_msg, pre);
    msgs.link_subagent_roots(items, &linked, &mut parent_msg, pre.is_some())
        .map_err(|()| reread(file))?;
    Ok(Links {
        msgs,
        parent_msg,
        aliases,
        linked,
        last_main,
    })
}

/// [`build`]'s error when a tail cannot be read alone.
fn reread(file: &str) -> Error {
    Error::new(file, REREAD, "the new lines cannot be read alone")
}

/// The messages among a session's items, in item order.
struct Msgs {
    /// Per item: its message ([`NONE`]: not one).
    msg_of: Vec<u32>,
    /// Per message: its item.
    item_of: Vec<usize>,
}

impl Msgs {
    fn of(items: &[Item]) -> Msgs {
        let mut msg_of: Vec<u32> = vec![NONE; items.len()];
        let mut item_of: Vec<usize> =
            Vec::with_capacity(items.iter().filter(|it| it.role.is_some()).count());
        for (i, it) in items.iter().enumerate() {
            if it.role.is_some() {
                msg_of[i] = item_of.len() as u32;
                item_of.push(i);
            }
        }
        Msgs { msg_of, item_of }
    }

    /// Item `i`'s message.
    fn msg(&self, i: usize) -> Option<usize> {
        (self.msg_of[i] != NONE).then_some(self.msg_of[i] as usize)
    }

    /// Per message its parent message (the nearest message up the uuid
    /// tree `up`, [`NONE`]: a root), and the aliases: records with a uuid
    /// that are not messages lead to the message above.
    fn parents(&self, items: &[Item], up: &[u32]) -> (Vec<u32>, Vec<(Id, u32)>) {
        let up_of = |i: usize| (up[i] != NONE).then_some(up[i] as usize);
        let message_above = |mut at: Option<usize>| {
            while let Some(j) = at {
                if let Some(pm) = self.msg(j) {
                    return Some(pm);
                }
                at = up_of(j);
            }
            None
        };
        let parent_msg: Vec<u32> = self
            .item_of
            .iter()
            .map(|&i| message_above(up_of(i)).map_or(NONE, |p| p as u32))
            .collect();
        let aliases: Vec<(Id, u32)> = items
            .iter()
            .enumerate()
            .filter(|(i, it)| self.msg(*i).is_none() && !it.stub() && !it.uuid.is_none())
            .filter_map(|(i, it)| Some((it.uuid, message_above(up_of(i))? as u32)))
            .collect();
        (parent_msg, aliases)
    }

    /// Links roots after the first to the message written before them (in
    /// a tail, the session's first root is stored): per message whether it
    /// was linked, and the last message outside sidechains.
    fn link_roots(
        &self,
        items: &[Item],
        parent_msg: &mut [u32],
        pre: Option<&Pre>,
    ) -> (Vec<bool>, Option<usize>) {
        let mut linked = vec![false; self.item_of.len()];
        let mut first_root = pre.is_none();
        let mut last_main: Option<usize> = None;
        for (m, &i) in self.item_of.iter().enumerate() {
            if items[i].stub() {
                if pre.and_then(|p| p.last_main) == Some(i) {
                    last_main = Some(m);
                }
                continue;
            }
            if parent_msg[m] == NONE {
                if first_root {
                    first_root = false;
                } else if let Some(p) = last_main.filter(|&p| p != m) {
                    parent_msg[m] = p as u32;
                    linked[m] = true;
                }
            }
            if !items[i].sub() && !items[i].sidechain() {
                last_main = Some(m);
            }
        }
        (linked, last_main)
    }

    /// A subagent file's messages come after the whole session file in
    /// item order: links their roots to the last session message written
    /// before them instead. `Err` in a tail (`tail`), where the session's
    /// messages before them are not all read.
    fn link_subagent_roots(
        &self,
        items: &[Item],
        linked: &[bool],
        parent_msg: &mut [u32],
        tail: bool,
    ) -> std::result::Result<(), ()> {
        for (m, &i) in self.item_of.iter().enumerate() {
            if linked[m] && items[i].sub() {
                if tail {
                    return Err(());
                }
                let t = items[i].time();
                let before = self
                    .item_of
                    .iter()
                    .enumerate()
                    .filter(|&(_, &j)| !items[j].sub() && !items[j].sidechain())
                    .filter(|&(_, &j)| match (t, items[j].time()) {
                        (Some(a), Some(b)) => b <= a,
                        _ => true,
                    })
                    .map(|(k, _)| k)
                    .next_back();
                if let Some(b) = before {
                    parent_msg[m] = b as u32;
                }
            }
        }
        Ok(())
    }

    /// Per item the message that carries it ([`NONE`]: none): records ride
    /// with the message before them in their file (in a tail, the first
    /// records of a file ride with its last stored message: the ledger
    /// adds them to the first new node), a file's records before its first
    /// message with `main`'s last (else the last). `true` when records are
    /// left with no message to carry them (a holder is needed).
    fn owners(
        &self,
        items: &[Item],
        pre: Option<&Pre>,
        last_main: Option<usize>,
    ) -> (Vec<u32>, bool) {
        let file_stub = |f: u32| {
            let p = pre?;
            let i = (*p.file_stubs.get(f as usize)?)?;
            self.msg(i)
        };
        let mut owner: Vec<u32> = vec![NONE; items.len()];
        let mut waiting: Vec<usize> = Vec::new();
        let mut holder_needed = false;
        let mut prev: Option<(u32, usize)> = None;
        for (i, it) in items.iter().enumerate() {
            if it.stub() {
                continue;
            }
            let carrier = match self.msg(i) {
                Some(m) => Some(m),
                None => prev
                    .filter(|(f, _)| *f == it.at.file)
                    .map(|(_, m)| m)
                    .or_else(|| file_stub(it.at.file)),
            };
            match carrier {
                Some(m) => {
                    for w in waiting.drain(..) {
                        owner[w] = m as u32;
                    }
                    owner[i] = m as u32;
                    prev = Some((it.at.file, m));
                }
                None => waiting.push(i),
            }
            let next_file = items.get(i + 1).map(|n| n.at.file);
            if next_file != Some(it.at.file) && !waiting.is_empty() {
                // A file ends with records no message of it came before.
                match last_main.or_else(|| self.item_of.len().checked_sub(1)) {
                    Some(m) => {
                        for w in waiting.drain(..) {
                            owner[w] = m as u32;
                        }
                    }
                    None => holder_needed = true,
                }
            }
        }
        (owner, holder_needed)
    }

    /// Each message's records, in file and line order, in one flat list
    /// (sized once: no room left over from growing).
    fn refs(&self, items: &[Item], owner: &[u32]) -> Refs {
        let n = self.item_of.len();
        let mut refs = Refs::default();
        refs.reserve_exact(n + 1, items.len());
        let mut starts = vec![0u32; n + 1];
        for &o in owner {
            if o != NONE {
                starts[o as usize + 1] += 1;
            }
        }
        for m in 0..n {
            starts[m + 1] += starts[m];
        }
        let mut fill = starts.clone();
        let mut by_owner = vec![0u32; starts[n] as usize];
        for (i, &o) in owner.iter().enumerate() {
            if o != NONE {
                by_owner[fill[o as usize] as usize] = i as u32;
                fill[o as usize] += 1;
            }
        }
        drop(fill);
        let mut list: Vec<RecRef> = Vec::new();
        for (m, &i) in self.item_of.iter().enumerate() {
            list.clear();
            list.extend(
                by_owner[starts[m] as usize..starts[m + 1] as usize]
                    .iter()
                    .map(|&k| items[k as usize].at),
            );
            list.sort_by_key(|a| (a.file, a.line));
            let it = &items[i];
            refs.push((!it.stub()).then_some(it.at), list.iter().copied());
        }
        refs
    }

    /// Pushes each message onto the skeleton: its parent, role, names,
    /// time, key, and whether it is a sidechain's or linked. Per message
    /// whether it is a sidechain's, and whether a parent comes after its
    /// child (the skeleton must be reordered).
    fn fill_skeleton(
        &self,
        skel: &mut Skeleton,
        items: &[Item],
        parent_msg: &[u32],
        linked: &[bool],
    ) -> (Vec<bool>, bool) {
        let mut sidechain: Vec<bool> = Vec::with_capacity(self.item_of.len() + 1);
        let mut order_fix = false;
        let flag = |k: &str| {
            let mut x = Map::new();
            x.insert(k.into(), json!(true));
            x
        };
        for (m, &i) in self.item_of.iter().enumerate() {
            let it = &items[i];
            let Some(role) = it.role else { continue };
            let parent = (parent_msg[m] != NONE).then_some(parent_msg[m] as usize);
            if parent.is_some_and(|p| p >= m) {
                order_fix = true;
            }
            let k = skel.push_parts(
                parent,
                role,
                it.speaker,
                (it.to != NO_NAME).then_some(it.to),
                it.time(),
                it.uuid,
            );
            let mut extra = Map::new();
            if it.sidechain() {
                extra.extend(flag("sidechain"));
            }
            if linked[m] {
                extra.extend(flag("linked"));
            }
            if !extra.is_empty() {
                skel.set_extra(k, &extra);
            }
            sidechain.push(it.sidechain());
        }
        (sidechain, order_fix)
    }
}

/// Only bookkeeping records so far: one system message holds them.
fn push_holder(skel: &mut Skeleton, refs: &mut Refs, sidechain: &mut Vec<bool>, items: &[Item]) {
    let mut msg = Message::new(Role::System, "claude-code", "");
    msg.extra.insert("holder".into(), json!(true));
    msg.key = Some(format!("records:{}", items[0].at.line));
    msg.time = items.iter().find_map(Item::time);
    skel.push(&msg);
    refs.push(None, items.iter().map(|it| it.at));
    sidechain.push(false);
}

/// Reorders a skeleton (and what goes with its messages) so parents come
/// before their children.
fn put_parents_first(
    skel: &mut Skeleton,
    refs: &mut Refs,
    sidechain: &mut Vec<bool>,
    aliases: &mut [(Id, u32)],
) {
    let order = parents_first(skel);
    skel.reorder(&order);
    refs.reorder(&order);
    *sidechain = order.iter().map(|&o| sidechain[o]).collect();
    let mut new_of = vec![0; order.len()];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new as u32;
    }
    for a in aliases {
        a.1 = new_of[a.1 as usize];
    }
}

/// The aliases as stored: alias ids that are names keep their own (the
/// skeleton's names are lent to the ledger while it imports).
fn aliases_of(aliases: Vec<(Id, u32)>, names: &Names) -> records::Aliases {
    let mut alias_names = Names::default();
    records::Aliases {
        ids: aliases
            .into_iter()
            .filter_map(|(a, m)| Some((Id::of(&a.text(names)?, &mut alias_names), m)))
            .collect(),
        names: alias_names,
    }
}

fn time_of(rec: &Record) -> Option<i64> {
    rec.str("timestamp").and_then(crate::json::iso_to_millis)
}

/// An order of a skeleton's messages where parents come before children
/// (keeping file order otherwise): the old index of each.
fn parents_first(skel: &Skeleton) -> Vec<usize> {
    let n = skel.len();
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut roots = Vec::new();
    for i in 0..n {
        match skel.parent(i) {
            Some(p) if p < n => kids[p].push(i),
            _ => roots.push(i),
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(i) = stack.pop() {
        order.push(i);
        stack.extend(kids[i].iter().rev());
    }
    order
}

/// Whether a file looks like a Claude Code transcript (its first records).
pub fn looks_like(head: &str) -> bool {
    head.lines().take(20).any(|l| {
        l.contains("\"sessionId\"")
            && (l.contains("\"parentUuid\"")
                || l.contains("\"type\":\"queue-operation\"")
                || l.contains("\"type\":\"summary\"")
                || l.contains("\"type\":\"file-history-snapshot\""))
    }) || head.starts_with("{\"type\":\"summary\"")
}

/// The session file of a branch, for `claude --resume`: the records from
/// the session's first to the branch's last message (the `parentUuid`
/// chain, so what a rewind abandoned is left out), each with its
/// `sessionId` set to `new_id`. `records` are the session's stored records
/// (`convo_llm::ledger::session_records`); `leaf` is the key (`uuid`) of the
/// branch's last imported message; `extra` are lines to append (the
/// branch's turns made in convo, see [`turn_records`]).
pub fn resume_file(
    records: &[(String, u64, String)],
    leaf: &str,
    new_id: &str,
    extra: &[Map<String, Value>],
) -> Result<Vec<u8>> {
    let mut by_uuid: HashMap<String, Map<String, Value>> = HashMap::new();
    for (_, _, raw) in records {
        if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(raw)
            && let Some(u) = o.get("uuid").and_then(Value::as_str)
        {
            by_uuid.entry(u.to_owned()).or_insert(o);
        }
    }
    let mut chain = Vec::new();
    let mut at = Some(leaf.to_owned());
    while let Some(u) = at {
        let Some(rec) = by_uuid.remove(&u) else { break };
        at = rec
            .get("parentUuid")
            .and_then(Value::as_str)
            .or_else(|| rec.get("logicalParentUuid").and_then(Value::as_str))
            .map(str::to_owned);
        chain.push(rec);
    }
    if chain.is_empty() {
        return Err(Error::new(
            "export",
            "not-found",
            format!("no Claude Code record {leaf} is stored for this session"),
        ));
    }
    chain.reverse();
    let mut out = Vec::new();
    for mut rec in chain.into_iter().chain(extra.iter().cloned()) {
        rec.insert("sessionId".into(), json!(new_id));
        out.extend_from_slice(
            serde_json::to_string(&Value::Object(rec))
                .unwrap_or_default()
                .as_bytes(),
        );
        out.push(b'\n');
    }
    Ok(out)
}

/// Claude Code records for turns that have no record of their own (made in
/// convo after a fork): each `(role, text, time)` a `user` or `assistant`
/// record chained after `parent`, with uuids derived from `seed`.
pub fn turn_records(
    parent: &str,
    turns: &[(Role, String, i64)],
    seed: &str,
    base: &Map<String, Value>,
) -> Vec<Map<String, Value>> {
    let mut out = Vec::new();
    let mut parent = parent.to_owned();
    for (n, (role, text, time)) in turns.iter().enumerate() {
        let h = convo_core::sha256(format!("{seed}:{n}").as_bytes()).to_hex();
        let uuid = format!(
            "{}-{}-4{}-8{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        );
        let mut rec = Map::new();
        for k in ["cwd", "version", "gitBranch", "userType", "entrypoint"] {
            if let Some(v) = base.get(k) {
                rec.insert(k.into(), v.clone());
            }
        }
        rec.insert("parentUuid".into(), json!(parent));
        rec.insert("isSidechain".into(), json!(false));
        let ts = crate::json::millis_to_iso(*time);
        if *role == Role::User {
            rec.insert("type".into(), json!("user"));
            rec.insert("message".into(), json!({"role": "user", "content": text}));
        } else {
            rec.insert("type".into(), json!("assistant"));
            rec.insert(
                "message".into(),
                json!({"id": format!("msg_convo_{}", &h[..24]), "type": "message", "role": "assistant",
                       "model": base.get("model").cloned().unwrap_or(json!("<synthetic>")),
                       "content": [{"type": "text", "text": text}],
                       "stop_reason": "end_turn", "stop_sequence": null,
                       "usage": {"input_tokens": 0, "output_tokens": 0}}),
            );
        }
        rec.insert("uuid".into(), json!(uuid));
        rec.insert("timestamp".into(), json!(ts));
        parent = uuid;
        out.push(rec);
    }
    out
}

/// Claude Code's project folder name for a working directory: every
/// character other than an ASCII letter or digit becomes `-`.
pub fn project_folder(cwd: &str) -> String {
    cwd.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reader as _;
    use std::borrow::Cow;

    /// The first pass keeps uuids as 128-bit values when they are
    /// canonical UUIDs and as names otherwise: both come back as written
    /// (keys, parents, aliases, warnings), a uuid used twice links its
    /// first record only.
    #[test]
    fn uuids_and_other_ids_come_back_as_written() {
        let rec = |uuid: &str, parent: Option<&str>, ty: &str, text: &str| {
            let content = if ty == "assistant" {
                json!([{"type": "text", "text": text}])
            } else {
                json!(text)
            };
            let mut s = serde_json::to_string(&json!({
                "parentUuid": parent, "isSidechain": false, "type": ty,
                "message": {"role": ty, "content": content}, "uuid": uuid,
                "timestamp": "2026-11-24T15:53:08.139Z", "sessionId": "s-1"}))
            .expect("json");
            s.push('\n');
            s
        };
        let u1 = "0e20a6c4-9b1f-4c3e-8a2d-5f6e7d8c9b0a";
        let odd = "Msg-ABC"; // not a UUID
        let upper = "0E20A6C4-9B1F-4C3E-8A2D-5F6E7D8C9B0B"; // not canonical
        let text = rec(u1, None, "user", "hello")
            + &rec(odd, Some(u1), "assistant", "hi")
            + &rec(upper, Some(odd), "attachment", "")
            + &rec("42", Some(upper), "user", "more")
            + &rec(odd, Some("42"), "assistant", "again");
        let mut ix = Indexer::default();
        let mut sources = Sources::new();
        let warnings = sources
            .scan_bytes("s.jsonl", text.as_bytes(), |f, r| ix.add(f, false, r))
            .expect("scans");
        let s = build("s.jsonl", ix, sources, vec![None], warnings, None)
            .expect("builds")
            .expect("a session");
        let tree = s.records.tree.as_ref().expect("a compact skeleton");
        let keys: Vec<Option<String>> = (0..tree.len())
            .map(|i| tree.key(i).map(Cow::into_owned))
            .collect();
        assert_eq!(
            keys,
            [Some(u1.into()), Some(odd.into()), Some("42".into())],
            "the second {odd} is not a message"
        );
        assert_eq!(tree.parent(1), Some(0));
        assert_eq!(tree.parent(2), Some(1), "through the attachment");
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("s.jsonl:5")
                    && w.contains(&format!("uuid {odd} was already used"))),
            "{:?}",
            s.warnings
        );
        use crate::loader::Loader as _;
        assert_eq!(s.records.aliases(), [(upper.to_owned(), 1)]);
        let read = ClaudeCode
            .read_bytes("s.jsonl", text.as_bytes())
            .expect("reads");
        let c = &read.conversations[0];
        assert_eq!(c.messages.len(), 3);
        assert_eq!(c.messages[1].text, "hi");
        assert_eq!(c.messages[1].key.as_deref(), Some(odd));
    }
}
