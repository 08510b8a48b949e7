//! Codex rollouts: `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`.
//!
//! # Wire format
//!
//! JSON Lines appended as the session runs, each
//! `{"timestamp", "type", "payload"}` (0.1xx adds `ordinal`):
//!
//! ```text
//! {"timestamp":"…","type":"session_meta","payload":{"id":"01a2…","cwd":"/p","cli_version":"0.169.0","originator":"codex_exec",…}}
//! {"timestamp":"…","type":"turn_context","payload":{"turn_id":"…","model":"gpt-…","cwd":"/p",…}}
//! {"timestamp":"…","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hello"}]}}
//! {"timestamp":"…","type":"response_item","payload":{"type":"function_call","name":"shell","arguments":"{\"command\":[\"ls\"]}","call_id":"call_1"}}
//! {"timestamp":"…","type":"response_item","payload":{"type":"function_call_output","call_id":"call_1","output":"…"}}
//! {"timestamp":"…","type":"event_msg","payload":{"type":"token_count","info":{"last_token_usage":{…}}}}
//! {"timestamp":"…","type":"compacted","payload":{"message":"…summary…","replacement_history":[…]}}
//! ```
//!
//! `response_item` payloads are the Responses API items the model saw or
//! produced: `message` (roles `user`, `assistant`, `developer`),
//! `function_call` / `function_call_output`, `custom_tool_call` /
//! `custom_tool_call_output` (`apply_patch`), `local_shell_call`,
//! `web_search_call`, `reasoning`. `event_msg` are UI events (the user's
//! message again, token counts, task start and end). Versions before
//! mid-2025 wrote the items bare (no `payload`), after a first line
//! `{"id", "timestamp", "instructions"}`; both are read. Other and unknown
//! types are kept as they are.
//!
//! # Mapping
//!
//! A `user` message is a [`Role::User`] prompt unless it is a block Codex
//! injected (`<environment_context>`, `<user_instructions>`, AGENTS.md…),
//! a call a [`Role::ToolCall`] to its tool (the text is the shell command,
//! the patch, the arguments), its output a [`Role::Tool`] from the tool,
//! an `assistant` message a [`Role::Assistant`] answer — or, when the turn
//! goes on after it, a [`Role::ToolCall`] to `user` marked
//! `intermediate`. The model is the last `turn_context`'s, the tokens the
//! next `token_count`'s `last_token_usage`. Every other record rides with
//! the message before it in `extra.records` ([`crate::records`]), so
//! `convo export --format codex` gives the file back byte for byte. A
//! rollout is linear: one timeline, `main`; a message's key is its line.

use crate::error::{Error, Result};
use crate::model::{Conversation, Message, Read, Role, Timeline};
use crate::records::{self, RecRef, Record, Refs, Session, Skeleton, Sources};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Codex reader.
#[derive(Debug)]
pub struct Codex;

impl crate::Reader for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let mut ix = Indexer::default();
        let mut sources = Sources::new();
        let warnings = sources.scan_bytes(file, bytes, |f, rec| {
            ix.add(f, rec);
            Ok(())
        })?;
        records::read_whole(build(file, ix, sources, warnings))
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        records::read_files(path, rollout_files, open_rollout)
    }
}

/// Indexes one rollout (an import's first pass: one record in memory at a
/// time); `None` for a file with no record. The messages are read again one
/// at a time from the file ([`Session`]).
pub fn open_rollout(path: &Path) -> Result<Option<Session<'static>>> {
    let name = path.display().to_string();
    let mut ix = Indexer::default();
    let mut sources = Sources::new();
    let warnings = sources.scan_path(path, |f, rec| {
        ix.add(f, rec);
        Ok(())
    })?;
    Ok(build(&name, ix, sources, warnings))
}

/// Codex's [`records::Tail::state`]: the last `turn_context`'s model, the
/// calls not answered yet (id → tool), the key of the last message.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct TailState {
    model: Option<String>,
    calls: std::collections::BTreeMap<String, String>,
    last: Option<String>,
}

/// The session id a rollout names (its `session_meta`'s), read from its
/// first lines; `None` when they do not say (the file is read whole).
pub fn session_identity(path: &Path) -> Option<String> {
    use std::io::{BufRead as _, Read as _};
    let f = crate::open_file(path).ok()?;
    let mut r = std::io::BufReader::new(f);
    let mut line = String::new();
    for _ in 0..16 {
        line.clear();
        // Never more than one record's worth of a line held.
        let read = (&mut r)
            .take(crate::records::MAX_RECORD + 1)
            .read_line(&mut line);
        if read.ok()? == 0 || !line.ends_with('\n') {
            return None;
        }
        if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&line)
            && o.get("type").and_then(Value::as_str) == Some("session_meta")
        {
            return o.get("payload")?.get("id")?.as_str().map(str::to_owned);
        }
    }
    None
}

/// The lines of a rollout written after those `tail` says an earlier
/// import stored, as a skeleton the ledger adds to the stored session
/// (`convo_llm::ledger::import_tail`): the new messages after the last stored
/// one (a message whose key is stored). `None` when the file must be read
/// whole (rewritten since, or no message stored yet).
pub fn open_tail(
    path: &Path,
    tail: &records::Tail,
    stored: &mut dyn FnMut(&str) -> bool,
) -> Result<Option<Session<'static>>> {
    let (Some(mark), 1) = (tail.mark(""), tail.marks.len()) else {
        return Ok(None);
    };
    let Ok(state) = serde_json::from_value::<TailState>(tail.state.clone()) else {
        return Ok(None);
    };
    let Some(last) = state.last.filter(|k| stored(k)) else {
        return Ok(None);
    };
    let mut stub = Message::new(Role::User, "", "");
    stub.key = Some(last);
    let mut messages = Skeleton::default();
    messages.push(&stub);
    let mut refs = Refs::default();
    refs.push(None, []);
    let mut ix = Indexer {
        messages,
        refs,
        calls: state.calls.into_iter().collect(),
        model: state.model,
        title: Some(None),
        first_line: Some(mark.line as usize),
        ..Indexer::default()
    };
    let name = path.display().to_string();
    let mut sources = Sources::new();
    let Some(warnings) = sources.scan_path_after(path, mark, |f, rec| {
        ix.add(f, rec);
        Ok(())
    })?
    else {
        return Ok(None);
    };
    let mut session = build(&name, ix, sources, warnings);
    if let Some(s) = &mut session
        && let Some(t) = &mut s.records.tail
        && t.marks.is_empty()
    {
        // Nothing read: the mark stays.
        t.marks.push(mark.clone());
    }
    Ok(session)
}

/// Every rollout under `dir` (`$CODEX_HOME`, its `sessions/`, a day's
/// folder), in path order.
pub fn rollout_files(dir: &Path) -> Vec<PathBuf> {
    records::find_files(
        dir,
        5,
        |_, name| !name.starts_with('.'),
        |_, name| name.starts_with("rollout-") && name.ends_with(".jsonl"),
    )
}

/// The item of a record and the record's type: `payload` for the current
/// layout, the record itself for the bare layout.
fn item(rec: &Record) -> Option<(&str, &Map<String, Value>)> {
    let v = rec.value.as_ref()?;
    match (v.get("type").and_then(Value::as_str), v.get("payload")) {
        (Some(t), Some(Value::Object(p))) => Some((t, p)),
        (Some(_), _) => Some(("response_item", v)),
        _ => None,
    }
}

/// The message a record is, if any: its role, speaker, `to` and extras,
/// its text only when `text` (for a user's message, always: whether Codex
/// injected it is read from it). `calls` maps call ids to tool names.
fn message_of(
    rec: &Record,
    calls: &mut HashMap<String, String>,
    model: &Option<String>,
    text: bool,
) -> Option<Message> {
    let (ty, p) = item(rec)?;
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let or_empty = |f: &dyn Fn() -> String| if text { f() } else { String::new() };
    match (ty, s("type")) {
        ("response_item", Some("message")) => {
            let role = s("role");
            let content = p.get("content").unwrap_or(&Value::Null);
            match role {
                Some("user") => {
                    let t = records::content_text(content);
                    (!records::is_injected(&t)).then(|| Message::new(Role::User, "user", t))
                }
                Some("assistant") => Some(
                    Message::new(
                        Role::Assistant,
                        "codex",
                        or_empty(&|| records::content_text(content)),
                    )
                    .with_model(model.clone()),
                ),
                _ => None,
            }
        }
        ("response_item", Some(t @ ("function_call" | "custom_tool_call"))) => {
            let name = s("name").unwrap_or("tool").to_owned();
            if let Some(c) = s("call_id") {
                calls.insert(c.to_owned(), name.clone());
            }
            let body = or_empty(&|| {
                let input = if t == "function_call" {
                    let args = s("arguments").unwrap_or("");
                    serde_json::from_str(args).unwrap_or_else(|_| json!(args))
                } else {
                    p.get("input").cloned().unwrap_or(Value::Null)
                };
                records::tool_call_text(&name, &input)
            });
            let mut m = Message::new(Role::ToolCall, "codex", body)
                .with_model(model.clone())
                .with_extra("call_id", p.get("call_id").cloned().unwrap_or(Value::Null));
            m.to = Some(name);
            Some(m)
        }
        ("response_item", Some(t @ ("local_shell_call" | "web_search_call"))) => {
            let name = if t == "local_shell_call" {
                "shell"
            } else {
                "web_search"
            };
            if let Some(c) = s("call_id") {
                calls.insert(c.to_owned(), name.to_owned());
            }
            let body = or_empty(&|| {
                let action = p.get("action").cloned().unwrap_or(Value::Null);
                match action.get("query").and_then(Value::as_str) {
                    Some(q) => format!("search {q}"),
                    None => records::tool_call_text(name, &action),
                }
            });
            let mut m = Message::new(Role::ToolCall, "codex", body)
                .with_model(model.clone())
                .with_extra("call_id", p.get("call_id").cloned().unwrap_or(Value::Null));
            m.to = Some(name.to_owned());
            Some(m)
        }
        ("response_item", Some("function_call_output" | "custom_tool_call_output")) => {
            let call = s("call_id").unwrap_or("");
            let name = calls.get(call).cloned().unwrap_or_else(|| "tool".into());
            let out = or_empty(&|| match p.get("output") {
                Some(Value::String(o)) => o.clone(),
                Some(Value::Object(o)) => o
                    .get("content")
                    .or_else(|| o.get("output"))
                    .map(records::content_text)
                    .unwrap_or_default(),
                Some(other) => records::content_text(other),
                None => String::new(),
            });
            Some(Message::new(Role::Tool, name, out).with_extra("call_id", json!(call)))
        }
        _ => None,
    }
}

/// Fills a skeleton message from its record (see [`records::Stored::fill`]).
/// A user's message of one text block (the first pass found it is not
/// injected) has its text moved out of the record's parse, not copied.
fn fill(m: &mut Message, rec: &mut Record) {
    if m.role == Role::User
        && let Some(v) = rec.value.as_mut()
    {
        let item = match v.get("payload") {
            Some(Value::Object(_)) => v.get_mut("payload"),
            _ => None,
        };
        let content = match item {
            Some(p) => p.get_mut("content"),
            None => v.get_mut("content"),
        };
        if let Some(Value::Array(blocks)) = content
            && let [Value::Object(b)] = blocks.as_mut_slice()
            && let Some(Value::String(t)) = b.get_mut("text")
        {
            m.text = std::mem::take(t);
            return;
        }
    }
    if let Some(full) = message_of(rec, &mut HashMap::new(), &None, true) {
        m.text = full.text;
        m.extra.extend(full.extra);
    }
}

/// What the first pass keeps of a rollout.
#[derive(Default)]
struct Indexer {
    messages: Skeleton,
    /// Per message: its own record and those it carries.
    refs: Refs,
    waiting: Vec<RecRef>,
    calls: HashMap<String, String>,
    model: Option<String>,
    meta: Map<String, Value>,
    id: Option<String>,
    created: Option<i64>,
    title: Option<Option<String>>,
    first_line: Option<usize>,
    /// Calls answered (their ids).
    answered: std::collections::HashSet<String>,
    /// The last record read.
    last_at: Option<RecRef>,
}

impl Indexer {
    fn add(&mut self, file: u32, rec: Record) {
        let time = rec.str("timestamp").and_then(crate::json::iso_to_millis);
        self.created = self.created.or(time);
        self.first_line.get_or_insert(rec.line);
        if let Some((ty, p)) = item(&rec) {
            let s = |k: &str| p.get(k).and_then(Value::as_str);
            match (ty, s("type")) {
                ("session_meta", _) => {
                    self.id = self.id.take().or_else(|| s("id").map(str::to_owned));
                    for k in ["id", "cwd", "cli_version", "originator", "model_provider"] {
                        if let Some(v) = p.get(k) {
                            self.meta.entry(k).or_insert_with(|| v.clone());
                        }
                    }
                }
                ("turn_context", _) => {
                    if let Some(m) = s("model") {
                        self.model = Some(m.to_owned());
                    }
                }
                ("event_msg", Some("token_count")) => {
                    let usage = p
                        .get("info")
                        .and_then(|i| i.get("last_token_usage"))
                        .cloned();
                    if let (Some(u), Some(last)) = (usage, self.messages.len().checked_sub(1))
                        && matches!(self.messages.role(last), Role::Assistant | Role::ToolCall)
                        && !self.messages.has_extra(last, "usage")
                    {
                        self.messages.insert_extra(last, "usage", u);
                    }
                }
                _ => {}
            }
        }
        let at = rec.at(file);
        self.last_at = Some(at);
        if let Some(("response_item", p)) = item(&rec)
            && matches!(
                p.get("type").and_then(Value::as_str),
                Some("function_call_output" | "custom_tool_call_output")
            )
            && let Some(c) = p.get("call_id").and_then(Value::as_str)
        {
            self.answered.insert(c.to_owned());
        }
        let mut rec = rec;
        if rec.raw.len() >= crate::records::DETACHED_FROM {
            // Placed (`at`): its bytes are not needed beside its parse
            // and the text taken from it.
            rec.raw = String::new();
        }
        match message_of(&rec, &mut self.calls, &self.model, false) {
            Some(mut m) => {
                if m.role == Role::User && self.title.is_none() {
                    self.title = Some(records::title_of(&m.text));
                }
                m.text = String::new();
                m.extra.clear();
                m.time = time;
                m.parent = self.messages.len().checked_sub(1);
                m.key = Some(rec.line.to_string());
                let mut r = std::mem::take(&mut self.waiting);
                r.push(at);
                self.messages.push(&m);
                self.refs.push(Some(at), r);
            }
            None if self.refs.is_empty() => self.waiting.push(at),
            None => self.refs.push_to_last(at),
        }
    }
}

fn build<'a>(
    file: &str,
    ix: Indexer,
    sources: Sources<'a>,
    warnings: Vec<String>,
) -> Option<Session<'a>> {
    let Indexer {
        mut messages,
        mut refs,
        waiting,
        mut meta,
        id,
        created,
        title,
        first_line,
        mut calls,
        answered,
        last_at,
        model,
        ..
    } = ix;
    first_line?;
    calls.retain(|k, _| !answered.contains(k));
    let tail = records::Tail {
        format: "codex".into(),
        marks: last_at
            .map(|at| records::Mark::of("", &at))
            .into_iter()
            .collect(),
        state: serde_json::to_value(TailState {
            model,
            calls: calls.into_iter().collect(),
            last: messages
                .len()
                .checked_sub(1)
                .and_then(|i| messages.key(i))
                .map(|k| k.into_owned()),
        })
        .unwrap_or_default(),
    };
    if !waiting.is_empty() {
        // Nothing but bookkeeping so far: one system message holds it.
        let mut m = Message::new(Role::System, "codex", "");
        m.time = created;
        m.key = Some("records".into());
        m.extra.insert("holder".into(), json!(true));
        messages.push(&m);
        refs.push(None, waiting);
    }
    let n = messages.len();
    for i in 0..n {
        if messages.role(i) == Role::Assistant && i + 1 < n && messages.role(i + 1) != Role::User {
            messages.set_role(i, Role::ToolCall, Some("user"));
            messages.insert_extra(i, "intermediate", json!(true));
        }
    }
    messages.shrink_to_fit();
    refs.shrink_to_fit();
    meta.insert("file".into(), json!(records::file_name(file)));
    let id = records::id_or_stem(id, file);
    Some(Session {
        conv: Conversation {
            id,
            title: title.flatten(),
            agent: Some("codex".into()),
            created_at: created,
            meta,
            timelines: vec![Timeline {
                name: "main".into(),
                leaf: n.checked_sub(1),
            }],
            messages: Vec::new(),
        },
        warnings,
        records: records::Stored {
            sources,
            rel: vec![None],
            refs,
            tree: Some(messages),
            fill,
            failed: None,
            aliases: Default::default(),
            tail: Some(tail),
            defer: true,
            deferred: Vec::new(),
        },
    })
}

/// Whether a file looks like a Codex rollout (its first record).
pub fn looks_like(head: &str) -> bool {
    let first = head.lines().next().unwrap_or("");
    first.contains("\"type\":\"session_meta\"")
        || (first.contains("\"instructions\"") && first.contains("\"id\""))
}

/// The rollout of a branch, for `codex resume`: the stored records up to
/// line `upto` (the branch's last imported message), the `session_meta`
/// carrying `new_id`, then `extra` lines (turns made in convo, see
/// [`turn_records`]).
pub fn resume_file(
    records: &[(String, u64, String)],
    upto: u64,
    new_id: &str,
    extra: &[Value],
) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut meta_seen = false;
    let mut ordinal: Option<u64> = None;
    for (file, line, raw) in records {
        if !file.is_empty() || *line > upto {
            continue;
        }
        let mut text = raw.clone();
        if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(raw)
            && let Some(n) = o.get("ordinal").and_then(Value::as_u64)
        {
            ordinal = Some(n);
        }
        if !meta_seen
            && let Ok(Value::Object(mut o)) = serde_json::from_str::<Value>(raw)
            && o.get("type").and_then(Value::as_str) == Some("session_meta")
        {
            meta_seen = true;
            if let Some(Value::Object(p)) = o.get_mut("payload") {
                let old = p.get("id").cloned();
                p.insert("id".into(), json!(new_id));
                if p.contains_key("session_id") {
                    p.insert("session_id".into(), json!(new_id));
                }
                if let Some(old) = old {
                    p.insert("forked_from_id".into(), old);
                }
            }
            text = serde_json::to_string(&Value::Object(o)).unwrap_or(text);
        }
        out.extend_from_slice(text.as_bytes());
        out.push(b'\n');
    }
    if !meta_seen {
        return Err(Error::new(
            "export",
            "not-found",
            "no session_meta record is stored for this session",
        ));
    }
    for v in extra {
        let mut v = v.clone();
        // Versions that number their records want the numbering to go on.
        if let (Some(n), Some(o)) = (ordinal.as_mut(), v.as_object_mut()) {
            *n += 1;
            o.insert("ordinal".into(), json!(*n));
        }
        out.extend_from_slice(serde_json::to_string(&v).unwrap_or_default().as_bytes());
        out.push(b'\n');
    }
    Ok(out)
}

/// Codex records for turns that have no record of their own (made in
/// convo after a fork): a `response_item` message per `(role, text, time)`.
pub fn turn_records(turns: &[(Role, String, i64)]) -> Vec<Value> {
    turns
        .iter()
        .map(|(role, text, time)| {
            let (r, ty) = if *role == Role::User {
                ("user", "input_text")
            } else {
                ("assistant", "output_text")
            };
            json!({"timestamp": crate::json::millis_to_iso(*time), "type": "response_item",
                   "payload": {"type": "message", "role": r, "content": [{"type": ty, "text": text}]}})
        })
        .collect()
}

/// Where Codex keeps a rollout started at `time` (ms): the
/// `sessions/YYYY/MM/DD/rollout-YYYY-MM-DDTHH-MM-SS-<id>.jsonl` under
/// `$CODEX_HOME`.
pub fn rollout_path(time: i64, id: &str) -> PathBuf {
    let t = jiff::Timestamp::from_millisecond(time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    PathBuf::from("sessions")
        .join(format!("{:04}", z.year()))
        .join(format!("{:02}", z.month()))
        .join(format!("{:02}", z.day()))
        .join(format!(
            "rollout-{}-{id}.jsonl",
            z.strftime("%Y-%m-%dT%H-%M-%S")
        ))
}
