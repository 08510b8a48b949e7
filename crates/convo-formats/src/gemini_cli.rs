//! Gemini CLI sessions: `~/.gemini/tmp/<project hash>/chats/`.
//!
//! # Wire format
//!
//! Established from google-gemini/gemini-cli's source
//! (`packages/core/src/services/chatRecordingService.ts` and
//! `chatRecordingTypes.ts`, 2026). Current versions append JSON Lines to
//! `chats/session-<YYYY-MM-DDTHH-MM>-<first 8 of the id>.jsonl`
//! (a subagent's to `chats/<parent session id>/<id>.jsonl`):
//!
//! ```text
//! {"sessionId":"…","projectHash":"…","startTime":"…","lastUpdated":"…","kind":"main"}
//! {"id":"u1","timestamp":"…","type":"user","content":[{"text":"fix the build"}]}
//! {"id":"g1","timestamp":"…","type":"gemini","content":"","model":"gemini-2.5-pro","toolCalls":[{"id":"c1","name":"run_shell_command","args":{"command":"make"},"result":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"ok"}}}],"status":"success","timestamp":"…"}],"tokens":{"input":10,"output":3,"cached":0,"total":13}}
//! {"$set":{"lastUpdated":"…"}}
//! {"$rewindTo":"u1"}
//! ```
//!
//! - the first line (`sessionId` + `projectHash`) is the session's
//!   metadata; `{"$set": {…}}` lines update it;
//! - a line with an `id` is a message (`type` `user`, `gemini`, `info`,
//!   `error`, `warning`; `content` a string, a part or a list of parts).
//!   The same `id` written again replaces the message (tokens and tool
//!   results are filled in that way), so the last line of an id is what
//!   it says;
//! - `{"$rewindTo": ID}` drops the message `ID` and everything after it
//!   from the conversation: what follows continues from the message
//!   before `ID`.
//!
//! Older versions wrote the whole `ConversationRecord` (`sessionId`,
//! `projectHash`, `startTime`, `lastUpdated`, `messages: […]`) as one
//! pretty-printed `session-*.json`; it is read too.
//!
//! # Mapping
//!
//! A `user` message is a [`Role::User`] prompt; a `gemini` message's text
//! a [`Role::Assistant`] answer (a [`Role::ToolCall`] to `user` marked
//! `intermediate` when tool calls follow it), each of its `toolCalls` a
//! [`Role::ToolCall`] to the tool (the text is the command, the edit, the
//! arguments: [`records::tool_call_text`]) followed by a [`Role::Tool`]
//! result from it; model and tokens on the message. `info`, `error`,
//! `warning`, metadata and rewind lines ride with a message in
//! `extra.records` ([`crate::records`]), so `convo export --format
//! gemini-cli` gives a `.jsonl` back byte for byte.
//!
//! **Every branch kept.** A rewind does not delete anything here: the
//! dropped messages stay as a timeline (`alt-N`) and the conversation
//! after the rewind is `main` when it is the live one. A message's key is
//! its `id` (`id#call:C`, `id#result:C` for its tool calls), so a re-import
//! of a grown file adds only new messages; a message rewritten later (its
//! tokens, a tool result) keeps what it said when first imported, the new
//! line stored with the next new message. Subagent files are sessions of
//! their own. A legacy `.json` has no lines to keep: it imports, it does
//! not export back byte for byte.

use crate::error::{Error, Result};
use crate::model::{Conversation, Message, Read, Role, Timeline};
use crate::records::{self, Record};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Gemini CLI reader.
#[derive(Debug)]
pub struct GeminiCli;

impl crate::Reader for GeminiCli {
    fn name(&self) -> &'static str {
        "gemini-cli"
    }

    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        read_one(file, bytes)
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        let files = if path.is_dir() {
            session_files(path)
        } else {
            vec![path.to_path_buf()]
        };
        let mut out = Read::default();
        for f in files {
            let name = f.display().to_string();
            let got = if name.ends_with(".json") {
                let bytes = crate::read_file(&f, crate::MAX_INPUT_BYTES)?;
                read_one(&name, &bytes)?
            } else {
                let lines = records::read_path(&f)?;
                let mut warnings = lines.warnings.clone();
                let conv = build(&name, &lines.records, true, &mut warnings);
                Read {
                    conversations: conv.into_iter().collect(),
                    warnings,
                }
            };
            out.warnings.extend(got.warnings);
            out.conversations.extend(got.conversations);
        }
        Ok(out)
    }
}

fn read_one(file: &str, bytes: &[u8]) -> Result<Read> {
    let head = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(0);
    // A legacy pretty-printed record: one JSON object over many lines.
    let first_line_is_whole = bytes[head..]
        .split(|&b| b == b'\n')
        .next()
        .is_some_and(|l| serde_json::from_slice::<Value>(l).is_ok());
    if !first_line_is_whole && bytes.get(head) == Some(&b'{') {
        let v: Value = crate::json::parse(file, bytes)?;
        let Value::Object(o) = v else {
            return Err(Error::new(file, "shape", "not a Gemini CLI session"));
        };
        let msgs = o
            .get("messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut meta = o.clone();
        meta.remove("messages");
        let mut recs = vec![Record {
            line: 0,
            offset: 0,
            raw: String::new(),
            value: Some(meta),
        }];
        for (i, m) in msgs.into_iter().enumerate() {
            if let Value::Object(m) = m {
                recs.push(Record {
                    line: i + 1,
                    offset: 0,
                    raw: String::new(),
                    value: Some(m),
                });
            }
        }
        let mut warnings = Vec::new();
        let conv = build(file, &recs, false, &mut warnings);
        return Ok(Read {
            conversations: conv.into_iter().collect(),
            warnings,
        });
    }
    let lines = records::read(file, bytes)?;
    let mut warnings = lines.warnings.clone();
    let conv = build(file, &lines.records, true, &mut warnings);
    Ok(Read {
        conversations: conv.into_iter().collect(),
        warnings,
    })
}

/// Every session file under `dir` (`~/.gemini`, its `tmp/`, a project's
/// folder or its `chats/`), in path order: `session-*.jsonl`,
/// `session-*.json`, and subagents' `chats/<parent>/<id>.jsonl`.
pub fn session_files(dir: &Path) -> Vec<PathBuf> {
    let in_chats = dir.file_name().is_some_and(|n| n == "chats");
    records::find_files(
        dir,
        5,
        |_, name| !name.starts_with('.'),
        |p, name| {
            let session = name.starts_with("session-")
                && (name.ends_with(".jsonl") || name.ends_with(".json"));
            let parent = p.parent();
            let sub = name.ends_with(".jsonl")
                && (parent
                    .and_then(Path::parent)
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "chats")
                    || (in_chats && parent != Some(dir)));
            session || sub
        },
    )
}

/// Whether the start of a file looks like a Gemini CLI session.
pub fn looks_like(head: &str) -> bool {
    head.contains("\"projectHash\"") && head.contains("\"sessionId\"")
}

/// The text of a `PartListUnion`: a string, a part, or a list of either.
fn parts_text(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            if let Some(t) = o.get("text").and_then(Value::as_str) {
                return t.to_owned();
            }
            if let Some(r) = o.get("functionResponse") {
                let resp = r.get("response").unwrap_or(&Value::Null);
                return match resp
                    .get("output")
                    .or_else(|| resp.get("error"))
                    .or_else(|| resp.get("content"))
                {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => records::content_text(other),
                    None => resp.to_string(),
                };
            }
            if o.contains_key("inlineData") || o.contains_key("fileData") {
                return "[file]".into();
            }
            String::new()
        }
        Value::Array(items) => items
            .iter()
            .map(parts_text)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        other => records::content_text(other),
    }
}

/// The messages one message record says (latest version of its id).
fn messages_of(id: &str, v: &Map<String, Value>) -> Vec<Message> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    let time = s("timestamp").and_then(crate::json::iso_to_millis);
    let text = parts_text(v.get("content").unwrap_or(&Value::Null));
    let mut out = Vec::new();
    match s("type") {
        Some("user") => {
            let mut m = Message::new(Role::User, "user", text);
            m.key = Some(id.to_owned());
            out.push(m);
        }
        Some("gemini") => {
            let model = s("model").map(str::to_owned);
            if !text.trim().is_empty() {
                let mut m = Message::new(Role::Assistant, "gemini", text).with_model(model.clone());
                if let Some(t) = v.get("tokens").filter(|t| !t.is_null()) {
                    m.extra.insert("usage".into(), t.clone());
                }
                m.key = Some(id.to_owned());
                out.push(m);
            }
            for call in v
                .get("toolCalls")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
            {
                let cs = |k: &str| call.get(k).and_then(Value::as_str);
                let name = cs("name").unwrap_or("tool").to_owned();
                let cid = cs("id").unwrap_or("").to_owned();
                let args = call.get("args").cloned().unwrap_or(Value::Null);
                let mut m = Message::new(
                    Role::ToolCall,
                    "gemini",
                    records::tool_call_text(&name, &args),
                )
                .with_model(model.clone())
                .with_extra("call_id", json!(cid));
                m.to = Some(name.clone());
                m.key = Some(if out.is_empty() {
                    id.to_owned()
                } else {
                    format!("{id}#call:{cid}")
                });
                m.time = cs("timestamp")
                    .and_then(crate::json::iso_to_millis)
                    .or(time);
                if out.is_empty()
                    && let Some(t) = v.get("tokens").filter(|t| !t.is_null())
                {
                    m.extra.insert("usage".into(), t.clone());
                }
                out.push(m);
                if let Some(result) = call.get("result").filter(|r| !r.is_null()) {
                    let mut text = parts_text(result);
                    if text.is_empty()
                        && let Some(d) = call.get("resultDisplay").and_then(Value::as_str)
                    {
                        text = d.to_owned();
                    }
                    let mut r = Message::new(Role::Tool, name, text)
                        .with_extra("call_id", json!(cid))
                        .with_extra("status", call.get("status").cloned().unwrap_or(Value::Null));
                    r.key = Some(format!("{id}#result:{cid}"));
                    r.time = m_time(call).or(time);
                    out.push(r);
                }
            }
        }
        _ => {}
    }
    for m in &mut out {
        m.time = m.time.or(time);
    }
    out
}

fn m_time(call: &Value) -> Option<i64> {
    call.get("timestamp")
        .and_then(Value::as_str)
        .and_then(crate::json::iso_to_millis)
}

/// The conversation of one file's records. `raw`: keep each record's line
/// (`extra.records`); a legacy `.json` has none.
fn build(
    file: &str,
    recs: &[Record],
    raw: bool,
    warnings: &mut Vec<String>,
) -> Option<Conversation> {
    if recs.is_empty() {
        return None;
    }
    let mut meta = Map::new();
    // Message ids in first-seen order; each id's latest record; the id it
    // followed when first seen; the records riding with each id.
    let mut order: Vec<&str> = Vec::new();
    let mut latest: HashMap<&str, &Map<String, Value>> = HashMap::new();
    let mut follows: HashMap<&str, Option<&str>> = HashMap::new();
    let mut riding: HashMap<&str, Vec<Value>> = HashMap::new();
    let mut waiting: Vec<Value> = Vec::new();
    let mut active: Vec<&str> = Vec::new();
    let mut last_seen: Option<&str> = None;
    let mut created = None;
    for rec in recs {
        let mut carrier = last_seen;
        if let Some(v) = &rec.value {
            if let Some(id) = v.get("id").and_then(Value::as_str) {
                if !latest.contains_key(id) {
                    order.push(id);
                    follows.insert(id, active.last().copied());
                    active.push(id);
                }
                latest.insert(id, v);
                carrier = Some(id);
                last_seen = Some(id);
            } else if let Some(to) = v.get("$rewindTo").and_then(Value::as_str) {
                match active.iter().position(|a| *a == to) {
                    Some(i) => active.truncate(i),
                    None => {
                        warnings.push(format!(
                            "{file}:{}: a rewind to a message that is not in the conversation ({to}); the conversation starts again",
                            rec.line
                        ));
                        active.clear();
                    }
                }
            } else if let Some(Value::Object(set)) = v.get("$set") {
                for (k, x) in set {
                    if k != "messages" {
                        meta.insert(k.clone(), x.clone());
                    }
                }
            } else if v.contains_key("sessionId") {
                for (k, x) in v {
                    meta.entry(k.clone()).or_insert_with(|| x.clone());
                }
                created = created.or_else(|| {
                    v.get("startTime")
                        .and_then(Value::as_str)
                        .and_then(crate::json::iso_to_millis)
                });
            }
        }
        if raw {
            match carrier {
                Some(id) => riding.entry(id).or_default().push(rec.to_value(None)),
                None => waiting.push(rec.to_value(None)),
            }
        }
    }
    let mut messages: Vec<Message> = Vec::new();
    // The last message each id ends with (inherited when it says nothing).
    let mut ends: HashMap<&str, Option<usize>> = HashMap::new();
    let mut carry: Vec<Value> = std::mem::take(&mut waiting);
    for id in &order {
        let parent = follows
            .get(id)
            .copied()
            .flatten()
            .and_then(|p| ends.get(p).copied().flatten());
        let mut ms = latest.get(id).map_or_else(Vec::new, |v| messages_of(id, v));
        let mut recs = std::mem::take(&mut carry);
        recs.extend(riding.remove(id).unwrap_or_default());
        if ms.is_empty() {
            carry = recs;
            ends.insert(id, parent);
            continue;
        }
        let mut prev = parent;
        for (k, mut m) in ms.drain(..).enumerate() {
            m.parent = prev;
            if k == 0 && raw {
                m.extra
                    .insert("records".into(), Value::Array(std::mem::take(&mut recs)));
            }
            messages.push(m);
            prev = Some(messages.len() - 1);
        }
        ends.insert(id, prev);
    }
    if !carry.is_empty() {
        match messages.last_mut() {
            Some(last) => {
                if let Some(Value::Array(r)) = last.extra.get_mut("records") {
                    r.extend(carry);
                    r.sort_by_key(|x| x.get("line").and_then(Value::as_u64).unwrap_or(0));
                }
            }
            None => {
                let mut m = Message::new(Role::System, "gemini-cli", "");
                m.time = created;
                m.key = Some("records".into());
                m.extra.insert("records".into(), Value::Array(carry));
                m.extra.insert("holder".into(), json!(true));
                messages.push(m);
            }
        }
    }
    records::mark_intermediate(&mut messages);
    let n = messages.len();
    let mut has_child = vec![false; n];
    for m in &messages {
        if let Some(p) = m.parent {
            has_child[p] = true;
        }
    }
    // `main` ends where the live conversation ends; every other leaf is a
    // rewound branch.
    let live = active
        .last()
        .and_then(|id| ends.get(id).copied().flatten())
        .or(n.checked_sub(1));
    let mut timelines = vec![Timeline {
        name: "main".into(),
        leaf: live,
    }];
    for (i, child) in has_child.iter().enumerate() {
        if !child && Some(i) != live {
            timelines.push(Timeline {
                name: format!("alt-{}", timelines.len()),
                leaf: Some(i),
            });
        }
    }
    let title = meta
        .get("summary")
        .and_then(Value::as_str)
        .and_then(records::title_of)
        .or_else(|| {
            messages
                .iter()
                .find(|m| m.role == Role::User)
                .and_then(|m| records::title_of(&m.text))
        });
    let created = created.or_else(|| messages.iter().find_map(|m| m.time));
    let id = meta
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            Path::new(file)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
        });
    let mut keep = Map::new();
    for k in ["sessionId", "projectHash", "kind", "directories"] {
        if let Some(v) = meta.get(k) {
            keep.insert(k.into(), v.clone());
        }
    }
    keep.insert(
        "file".into(),
        json!(
            Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    );
    Some(Conversation {
        id,
        title,
        agent: Some("gemini-cli".into()),
        created_at: created,
        meta: keep,
        timelines,
        messages,
    })
}

/// The chat file of a branch, for `gemini --resume`: the session's
/// metadata line with `sessionId` set to `new_id` and its times to `now`,
/// then the last version of each message the branch holds (`ids`, in
/// order: the messages up to its last imported one, so what a rewind
/// dropped is left out, and no `$rewindTo`), then `extra` lines (turns
/// made in convo, see [`turn_records`]). `records` are the session's
/// stored records ([`crate::ledger::session_records`]).
pub fn resume_file(
    records: &[(String, u64, String)],
    ids: &[String],
    new_id: &str,
    now: i64,
    extra: &[Value],
) -> Result<Vec<u8>> {
    let mut meta: Option<Map<String, Value>> = None;
    let mut latest: HashMap<String, &str> = HashMap::new();
    for (file, _, raw) in records {
        if !file.is_empty() {
            continue;
        }
        let Ok(Value::Object(o)) = serde_json::from_str::<Value>(raw) else {
            continue;
        };
        if let Some(id) = o.get("id").and_then(Value::as_str) {
            latest.insert(id.to_owned(), raw);
        } else if meta.is_none() && o.contains_key("sessionId") && o.contains_key("projectHash") {
            meta = Some(o);
        }
    }
    let Some(mut meta) = meta else {
        return Err(Error::new(
            "export",
            "not-found",
            "no Gemini CLI session line (sessionId, projectHash) is stored for this session",
        ));
    };
    let ts = crate::json::millis_to_iso(now);
    meta.insert("sessionId".into(), json!(new_id));
    meta.insert("startTime".into(), json!(ts));
    meta.insert("lastUpdated".into(), json!(ts));
    let mut out = serde_json::to_string(&Value::Object(meta)).unwrap_or_default();
    out.push('\n');
    for id in ids {
        if let Some(raw) = latest.get(id) {
            out.push_str(raw);
            out.push('\n');
        }
    }
    for v in extra {
        out.push_str(&serde_json::to_string(v).unwrap_or_default());
        out.push('\n');
    }
    Ok(out.into_bytes())
}

/// Gemini CLI messages for turns that have no line of their own (made in
/// convo after a fork): a `user` or `gemini` message per `(role, text,
/// time)`, ids derived from `seed`.
pub fn turn_records(turns: &[(Role, String, i64)], seed: &str, model: Option<&str>) -> Vec<Value> {
    turns
        .iter()
        .enumerate()
        .map(|(n, (role, text, time))| {
            let h = convo_core::sha256(format!("{seed}:{n}").as_bytes()).to_hex();
            let id = format!(
                "{}-{}-4{}-8{}-{}",
                &h[0..8],
                &h[8..12],
                &h[13..16],
                &h[17..20],
                &h[20..32]
            );
            let ts = crate::json::millis_to_iso(*time);
            if *role == Role::User {
                json!({"id": id, "timestamp": ts, "type": "user", "content": [{"text": text}]})
            } else {
                json!({"id": id, "timestamp": ts, "type": "gemini", "content": text,
                       "model": model.unwrap_or("gemini-2.5-pro")})
            }
        })
        .collect()
}

/// Where Gemini CLI keeps a chat started at `time` (ms) for a project:
/// `tmp/<project hash>/chats/session-YYYY-MM-DDTHH-MM-<first 8 of id>.jsonl`
/// under `~/.gemini`.
pub fn chat_path(project_hash: &str, time: i64, id: &str) -> PathBuf {
    let t = jiff::Timestamp::from_millisecond(time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    PathBuf::from("tmp")
        .join(convo_core::text::component(project_hash))
        .join("chats")
        .join(format!(
            "session-{}-{}.jsonl",
            z.strftime("%Y-%m-%dT%H-%M"),
            &id[..id.len().min(8)]
        ))
}
