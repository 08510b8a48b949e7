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
use crate::model::{Conversation, Message, Read, Role, Timeline};
use crate::records::{self, RecRef, Record, Session, Sources};
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
        let files = if path.is_dir() {
            session_files(path)
        } else {
            vec![path.to_path_buf()]
        };
        let mut out = Read::default();
        for f in files {
            let got = read_session(&f)?;
            out.conversations.extend(got.conversations);
            out.warnings.extend(got.warnings);
        }
        Ok(out)
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
    let dir = path.with_extension("").join("subagents");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let name = f
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (format!("subagents/{name}"), f)
        })
        .collect()
}

/// The session id a transcript's records name (its first `sessionId`,
/// else its file name), read from its first lines: `None` when they do
/// not say (the whole file is read instead).
pub fn session_identity(path: &Path) -> Option<String> {
    use std::io::BufRead as _;
    let f = std::fs::File::open(path).ok()?;
    let mut r = std::io::BufReader::new(f);
    let mut line = String::new();
    for _ in 0..64 {
        line.clear();
        if r.read_line(&mut line).ok()? == 0 || !line.ends_with('\n') {
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
/// ledger adds to the stored session ([`crate::ledger::import_tail`]):
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
    let mut sources = Sources::new();
    let mut warnings = Vec::new();
    let mut rel = Vec::new();
    let mut marks = Vec::new();
    for (f, (r, p)) in files.iter().enumerate() {
        let Some(mark) = tail.mark(r) else {
            return Ok(None);
        };
        let Some(w) = sources.scan_path_after(p, mark, |fi, rec| ix.add(fi, f > 0, rec))? else {
            return Ok(None);
        };
        warnings.extend(w);
        rel.push((f > 0).then(|| r.clone()));
        marks.push(mark.clone());
    }
    // Every uuid read must be new, every parent read or stored.
    let mut read: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for it in &ix.items {
        if let Some(u) = it.uuid.as_deref()
            && (!read.insert(u) || stored(u))
        {
            return Ok(None);
        }
    }
    let mut outside: Vec<Box<str>> = Vec::new();
    for it in &ix.items {
        if let (Some(_), Some(p)) = (it.uuid.as_deref(), it.parent.as_deref())
            && !read.contains(p)
            && !outside.iter().any(|o| &**o == p)
        {
            if !stored(p) {
                return Ok(None);
            }
            outside.push(p.into());
        }
    }
    drop(read);
    // The stored messages the new ones continue from: each file's last,
    // the last of the session's own thread, the parents outside.
    let mut stubs: Vec<Item> = Vec::new();
    let mut stub = |key: &str, file: u32| -> usize {
        if let Some(i) = stubs.iter().position(|s| s.uuid.as_deref() == Some(key)) {
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
            sub: false,
            what: Kind::Msg {
                role: Role::User,
                speaker: String::new(),
                to: None,
            },
            uuid: Some(key.into()),
            parent: None,
            sidechain: false,
            time: None,
            stub: true,
        });
        stubs.len() - 1
    };
    for p in &outside {
        stub(p, u32::MAX);
    }
    let mut file_stubs = vec![None; files.len()];
    for (f, k) in state.last.iter().enumerate().take(files.len()) {
        if let Some(k) = k {
            file_stubs[f] = Some(stub(k, f as u32));
        }
    }
    let last_main = state.last_main.as_deref().map(|k| stub(k, u32::MAX));
    // The session's last message comes last among them: the main
    // timeline ends there unless a new message goes on from it.
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
        s.sidechain = true;
    }
    let new = std::mem::take(&mut ix.items);
    ix.items = stubs;
    ix.items.extend(new);
    let pre = Pre {
        file_stubs,
        last_main,
        marks,
    };
    match build(&name, ix, sources, rel, warnings, Some(pre)) {
        Err(e) if e.rule == REREAD => Ok(None),
        other => other,
    }
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
                self.any_title = Some(crate::ledger::title_of_text(&text));
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
        let what = match what {
            What::Carrier => Kind::Carrier,
            What::Msg {
                role, speaker, to, ..
            } => Kind::Msg { role, speaker, to },
        };
        self.items.push(Item {
            at: rec.at(file),
            sub,
            what,
            uuid: rec.str("uuid").map(Box::from),
            parent: rec
                .str("parentUuid")
                .or_else(|| rec.str("logicalParentUuid"))
                .map(Box::from),
            sidechain,
            time: time_of(&rec),
            stub: false,
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

/// What the first pass keeps of a record's mapping.
enum Kind {
    Carrier,
    Msg {
        role: Role,
        speaker: String,
        to: Option<String>,
    },
}

/// What the first pass keeps of one record.
struct Item {
    at: RecRef,
    /// A subagent's transcript, not the session file.
    sub: bool,
    what: Kind,
    uuid: Option<Box<str>>,
    parent: Option<Box<str>>,
    sidechain: bool,
    time: Option<i64>,
    /// A stored message a tail's records continue from ([`open_tail`]):
    /// not read, not written.
    stub: bool,
}

/// What a record is; its text only when `text` (the first pass only
/// needs to know whether there is one).
fn classify(rec: &Record, tools: &mut HashMap<String, String>, text: bool) -> What {
    let want_text = text;
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
        "assistant" => {
            let Some(blocks) = content.and_then(Value::as_array) else {
                return What::Carrier;
            };
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
        _ => What::Carrier,
    }
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
    ix: Indexer,
    sources: Sources<'a>,
    rel: Vec<Option<String>>,
    mut warnings: Vec<String>,
    pre: Option<Pre>,
) -> Result<Option<Session<'a>>> {
    let Indexer {
        mut items,
        custom_title,
        summary,
        typed_title,
        any_title,
        first: firsts,
        mut tools,
        answered,
        ..
    } = ix;
    if items.is_empty() {
        return Ok(None);
    }
    let reread = || Error::new(file, REREAD, "the new lines cannot be read alone");
    let where_ = |it: &Item| match rel.get(it.at.file as usize).cloned().flatten() {
        Some(f) => format!("{file} ({f}):{}", it.at.line),
        None => format!("{file}:{}", it.at.line),
    };

    // The uuid tree, over items: a uuid used twice links its first record.
    let mut dups = Vec::new();
    {
        let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (i, it) in items.iter().enumerate() {
            if let Some(u) = it.uuid.as_deref()
                && !seen.insert(u)
            {
                dups.push(i);
            }
        }
    }
    for &i in &dups {
        let it = &items[i];
        warnings.push(format!(
            "{}: uuid {} was already used; this record is kept but not linked",
            where_(it),
            it.uuid.as_deref().unwrap_or("")
        ));
    }
    for &i in &dups {
        items[i].what = Kind::Carrier;
        items[i].uuid = None;
    }
    let mut up: Vec<Option<usize>> = vec![None; items.len()];
    {
        let mut by_uuid: HashMap<&str, usize> = HashMap::new();
        for (i, it) in items.iter().enumerate() {
            if let Some(u) = it.uuid.as_deref() {
                by_uuid.insert(u, i);
            }
        }
        for (i, it) in items.iter().enumerate() {
            let (Some(_), Some(p)) = (it.uuid.as_deref(), it.parent.as_deref()) else {
                continue;
            };
            match by_uuid.get(p) {
                Some(&j) => up[i] = Some(j),
                None if pre.is_some() => return Err(reread()),
                None => warnings.push(format!(
                    "{}: parentUuid {p} is not in the session; it starts a new root",
                    where_(it)
                )),
            }
        }
    }
    if let Some(cycle) = crate::tree::find_cycle(&up) {
        let ids: Vec<String> = cycle
            .iter()
            .map(|&i| items[i].uuid.as_deref().unwrap_or("?").to_owned())
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

    // Messages, in item order, each with its parent message.
    let mut msg_of: Vec<Option<usize>> = vec![None; items.len()];
    let mut item_of: Vec<usize> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        if matches!(it.what, Kind::Msg { .. }) {
            msg_of[i] = Some(item_of.len());
            item_of.push(i);
        }
    }
    let mut parent_msg: Vec<Option<usize>> = vec![None; item_of.len()];
    let message_above = |mut at: Option<usize>| {
        while let Some(j) = at {
            if let Some(pm) = msg_of[j] {
                return Some(pm);
            }
            at = up[j];
        }
        None
    };
    for (m, &i) in item_of.iter().enumerate() {
        parent_msg[m] = message_above(up[i]);
    }
    // Records with a uuid that are not messages lead to the message above.
    let mut aliases: Vec<(Box<str>, usize)> = items
        .iter()
        .enumerate()
        .filter(|(i, it)| msg_of[*i].is_none() && !it.stub)
        .filter_map(|(i, it)| Some((it.uuid.clone()?, message_above(up[i])?)))
        .collect();
    drop(up);
    // Roots after the first are linked to the message written before them
    // (in a tail, the session's first root is stored).
    let mut linked = vec![false; item_of.len()];
    let mut first_root = pre.is_none();
    let mut last_main: Option<usize> = None;
    for (m, &i) in item_of.iter().enumerate() {
        if items[i].stub {
            if pre.as_ref().and_then(|p| p.last_main) == Some(i) {
                last_main = Some(m);
            }
            continue;
        }
        if parent_msg[m].is_none() {
            if first_root {
                first_root = false;
            } else if let Some(p) = last_main.filter(|&p| p != m) {
                parent_msg[m] = Some(p);
                linked[m] = true;
            }
        }
        if !items[i].sub && !items[i].sidechain {
            last_main = Some(m);
        }
    }
    // A subagent file's messages come after the whole session file in
    // item order: link their roots to the last session message written
    // before them instead.
    for (m, &i) in item_of.iter().enumerate() {
        if linked[m] && items[i].sub {
            if pre.is_some() {
                // The session's messages before it are not all read.
                return Err(reread());
            }
            let t = items[i].time;
            let before = item_of
                .iter()
                .enumerate()
                .filter(|&(_, &j)| !items[j].sub && !items[j].sidechain)
                .filter(|&(_, &j)| match (t, items[j].time) {
                    (Some(a), Some(b)) => b <= a,
                    _ => true,
                })
                .map(|(k, _)| k)
                .next_back();
            parent_msg[m] = before.or(parent_msg[m]);
        }
    }

    // Records ride with the message before them in their file.
    // (In a tail, the first records of a file ride with its last stored
    // message: the ledger adds them to the first new node.)
    let file_stub = |f: u32| {
        let p = pre.as_ref()?;
        let i = (*p.file_stubs.get(f as usize)?)?;
        msg_of[i]
    };
    let mut recs: Vec<Vec<RecRef>> = vec![Vec::new(); item_of.len()];
    let mut waiting: Vec<usize> = Vec::new();
    let mut holder_needed = false;
    let mut prev: Option<(u32, usize)> = None;
    for (i, it) in items.iter().enumerate() {
        if it.stub {
            continue;
        }
        let owner = match msg_of[i] {
            Some(m) => Some(m),
            None => prev
                .filter(|(f, _)| *f == it.at.file)
                .map(|(_, m)| m)
                .or_else(|| file_stub(it.at.file)),
        };
        match owner {
            Some(m) => {
                for w in waiting.drain(..) {
                    recs[m].push(items[w].at);
                }
                recs[m].push(it.at);
                prev = Some((it.at.file, m));
            }
            None => waiting.push(i),
        }
        let next_file = items.get(i + 1).map(|n| n.at.file);
        if next_file != Some(it.at.file) && !waiting.is_empty() {
            // A file ends with records no message of it came before.
            match last_main.or_else(|| item_of.len().checked_sub(1)) {
                Some(m) => {
                    for w in waiting.drain(..) {
                        recs[m].push(items[w].at);
                    }
                }
                None => holder_needed = true,
            }
        }
    }

    let mut messages: Vec<Message> = Vec::with_capacity(item_of.len() + 1);
    let mut own: Vec<Option<RecRef>> = Vec::with_capacity(item_of.len() + 1);
    let mut carried: Vec<Vec<RecRef>> = Vec::with_capacity(item_of.len() + 1);
    let mut order_fix = false;
    for (m, &i) in item_of.iter().enumerate() {
        let it = &mut items[i];
        let Kind::Msg { role, speaker, to } = std::mem::replace(&mut it.what, Kind::Carrier) else {
            continue;
        };
        let mut msg = Message::new(role, speaker, String::new()).at(it.time);
        msg.to = to;
        msg.parent = parent_msg[m];
        if msg.parent.is_some_and(|p| p >= m) {
            order_fix = true;
        }
        if it.sidechain {
            msg.extra.insert("sidechain".into(), json!(true));
        }
        if linked[m] {
            msg.extra.insert("linked".into(), json!(true));
        }
        let mut r = std::mem::take(&mut recs[m]);
        r.sort_by_key(|a| (a.file, a.line));
        r.shrink_to_fit();
        msg.key = it.uuid.as_deref().map(str::to_owned);
        messages.push(msg);
        own.push((!it.stub).then_some(it.at));
        carried.push(r);
    }
    drop(recs);
    if pre.is_some() && holder_needed {
        return Err(reread());
    }
    if holder_needed || messages.is_empty() {
        // Only bookkeeping records so far: one system message holds them.
        let mut msg = Message::new(Role::System, "claude-code", "");
        msg.extra.insert("holder".into(), json!(true));
        msg.key = Some(format!("records:{}", items[0].at.line));
        msg.time = items.iter().find_map(|it| it.time);
        messages.push(msg);
        own.push(None);
        carried.push(items.iter().map(|it| it.at).collect());
    }
    // Where the files read end, and the state to go on from there.
    let tail = {
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
            if !it.stub {
                marks[f] = Some(records::Mark::of(&name(it.at.file), &it.at));
            }
            if msg_of[i].is_some() {
                last[f] = it.uuid.as_deref().map(str::to_owned);
            }
        }
        let last_main =
            last_main.and_then(|m| items[item_of[m]].uuid.as_deref().map(str::to_owned));
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
    };
    if order_fix {
        let order = parents_first(&mut messages);
        own = order.iter().map(|&o| own[o]).collect();
        let mut slots: Vec<Option<Vec<RecRef>>> = carried.into_iter().map(Some).collect();
        carried = order.iter().filter_map(|&o| slots[o].take()).collect();
        let mut new_of = vec![0; order.len()];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
        }
        for a in &mut aliases {
            a.1 = new_of[a.1];
        }
    }

    // Intermediate answers: the turn goes on after them.
    let mut has_turn_child = vec![false; messages.len()];
    for m in &messages {
        if let Some(p) = m.parent
            && matches!(m.role, Role::ToolCall | Role::Tool | Role::Assistant)
        {
            has_turn_child[p] = true;
        }
    }
    for (i, m) in messages.iter_mut().enumerate() {
        if m.role == Role::Assistant && has_turn_child[i] {
            m.role = Role::ToolCall;
            m.to = Some("user".into());
            m.extra.insert("intermediate".into(), json!(true));
        }
    }

    // Timelines.
    let mut children = vec![0usize; messages.len()];
    let mut last_child: Vec<Option<usize>> = vec![None; messages.len()];
    for (i, m) in messages.iter().enumerate() {
        if let Some(p) = m.parent {
            children[p] += 1;
            last_child[p] = Some(i);
        }
    }
    let main_leaf = {
        let last = messages
            .iter()
            .rposition(|m| !m.extra.contains_key("sidechain"))
            .unwrap_or(messages.len() - 1);
        let mut at = last;
        let mut steps = 0;
        while let Some(c) = last_child[at].filter(|_| steps <= messages.len()) {
            at = c;
            steps += 1;
        }
        at
    };
    let mut timelines = vec![Timeline {
        name: "main".into(),
        leaf: Some(main_leaf),
    }];
    let (mut alt, mut agent) = (0, 0);
    for (i, m) in messages.iter().enumerate() {
        if children[i] == 0 && i != main_leaf {
            let name = if m.extra.contains_key("sidechain") {
                agent += 1;
                format!("agent-{agent}")
            } else {
                alt += 1;
                format!("alt-{alt}")
            };
            timelines.push(Timeline {
                name,
                leaf: Some(i),
            });
        }
    }

    // Title, id, metadata.
    let title = custom_title
        .or(summary)
        .or(typed_title.flatten())
        .or(any_title.flatten());
    let [session_id, ..] = &firsts;
    let id = session_id.clone().or_else(|| {
        Path::new(file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
    });
    let mut meta = Map::new();
    for (k, v) in FIRST_KEYS.iter().zip(&firsts) {
        if let Some(v) = v {
            meta.insert((*k).into(), json!(v));
        }
    }
    meta.insert(
        "file".into(),
        json!(
            Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    );
    let created_at = items.iter().find_map(|it| it.time);
    drop(items);
    Ok(Some(Session {
        conv: Conversation {
            id,
            title,
            agent: Some("claude-code".into()),
            created_at,
            meta,
            messages,
            timelines,
        },
        warnings,
        records: records::Stored {
            sources,
            rel,
            own,
            carried,
            fill,
            failed: None,
            aliases,
            tail,
            defer: true,
            deferred: Vec::new(),
        },
    }))
}

fn time_of(rec: &Record) -> Option<i64> {
    rec.str("timestamp").and_then(crate::json::iso_to_millis)
}

/// Reorders messages so parents come before children (keeping file order
/// otherwise), renumbering parents; returns the old index of each.
fn parents_first(messages: &mut Vec<Message>) -> Vec<usize> {
    let n = messages.len();
    let mut kids: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut roots = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m.parent {
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
    let mut new_of = vec![0usize; n];
    for (new, &old) in order.iter().enumerate() {
        new_of[old] = new;
    }
    let mut slots: Vec<Option<Message>> = std::mem::take(messages).into_iter().map(Some).collect();
    *messages = order
        .iter()
        .filter_map(|&old| {
            let mut m = slots[old].take()?;
            m.parent = m.parent.map(|p| new_of[p]);
            Some(m)
        })
        .collect();
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
/// ([`crate::ledger::session_records`]); `leaf` is the key (`uuid`) of the
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
