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
use crate::records::{self, Lines, Record};
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
        let lines = records::read(file, bytes)?;
        let mut warnings = lines.warnings.clone();
        let conv = build(file, &lines, &mut warnings);
        Ok(Read {
            conversations: conv.into_iter().collect(),
            warnings,
        })
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        let files = if path.is_dir() {
            rollout_files(path)
        } else {
            vec![path.to_path_buf()]
        };
        let mut out = Read::default();
        for f in files {
            let name = f.display().to_string();
            let lines = records::read_path(&f)?;
            out.warnings.extend(lines.warnings.iter().cloned());
            out.conversations
                .extend(build(&name, &lines, &mut out.warnings));
        }
        Ok(out)
    }
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

fn build(file: &str, lines: &Lines, warnings: &mut Vec<String>) -> Option<Conversation> {
    let _ = warnings;
    if lines.records.is_empty() {
        return None;
    }
    let mut messages: Vec<Message> = Vec::new();
    let mut calls: HashMap<String, String> = HashMap::new();
    let mut model: Option<String> = None;
    let mut waiting: Vec<Value> = Vec::new();
    let mut meta = Map::new();
    let mut id = None;
    let mut created = None;
    for rec in &lines.records {
        let time = rec.str("timestamp").and_then(crate::json::iso_to_millis);
        created = created.or(time);
        let mut msg: Option<Message> = None;
        if let Some((ty, p)) = item(rec) {
            let s = |k: &str| p.get(k).and_then(Value::as_str);
            match (ty, s("type")) {
                ("session_meta", _) => {
                    id = id.or_else(|| s("id").map(str::to_owned));
                    for k in ["id", "cwd", "cli_version", "originator", "model_provider"] {
                        if let Some(v) = p.get(k) {
                            meta.entry(k).or_insert_with(|| v.clone());
                        }
                    }
                }
                ("turn_context", _) => model = s("model").map(str::to_owned).or(model),
                ("event_msg", Some("token_count")) => {
                    let usage = p
                        .get("info")
                        .and_then(|i| i.get("last_token_usage"))
                        .cloned();
                    if let (Some(u), Some(last)) = (usage, messages.last_mut())
                        && matches!(last.role, Role::Assistant | Role::ToolCall)
                        && !last.extra.contains_key("usage")
                    {
                        last.extra.insert("usage".into(), u);
                    }
                }
                ("response_item", Some("message")) => {
                    let text = records::content_text(p.get("content").unwrap_or(&Value::Null));
                    match s("role") {
                        Some("user") if !records::is_injected(&text) => {
                            msg = Some(Message::new(Role::User, "user", text));
                        }
                        Some("assistant") => {
                            msg = Some(
                                Message::new(Role::Assistant, "codex", text)
                                    .with_model(model.clone()),
                            );
                        }
                        _ => {}
                    }
                }
                ("response_item", Some(t @ ("function_call" | "custom_tool_call"))) => {
                    let name = s("name").unwrap_or("tool").to_owned();
                    if let Some(c) = s("call_id") {
                        calls.insert(c.to_owned(), name.clone());
                    }
                    let input = if t == "function_call" {
                        let args = s("arguments").unwrap_or("");
                        serde_json::from_str(args).unwrap_or_else(|_| json!(args))
                    } else {
                        p.get("input").cloned().unwrap_or(Value::Null)
                    };
                    let mut m = Message::new(
                        Role::ToolCall,
                        "codex",
                        records::tool_call_text(&name, &input),
                    )
                    .with_model(model.clone())
                    .with_extra("call_id", p.get("call_id").cloned().unwrap_or(Value::Null));
                    m.to = Some(name);
                    msg = Some(m);
                }
                ("response_item", Some(t @ ("local_shell_call" | "web_search_call"))) => {
                    let action = p.get("action").cloned().unwrap_or(Value::Null);
                    let name = if t == "local_shell_call" {
                        "shell"
                    } else {
                        "web_search"
                    };
                    if let Some(c) = s("call_id") {
                        calls.insert(c.to_owned(), name.to_owned());
                    }
                    let text = match action.get("query").and_then(Value::as_str) {
                        Some(q) => format!("search {q}"),
                        None => records::tool_call_text(name, &action),
                    };
                    let mut m = Message::new(Role::ToolCall, "codex", text)
                        .with_model(model.clone())
                        .with_extra("call_id", p.get("call_id").cloned().unwrap_or(Value::Null));
                    m.to = Some(name.to_owned());
                    msg = Some(m);
                }
                ("response_item", Some("function_call_output" | "custom_tool_call_output")) => {
                    let call = s("call_id").unwrap_or("");
                    let name = calls.get(call).cloned().unwrap_or_else(|| "tool".into());
                    let out = match p.get("output") {
                        Some(Value::String(o)) => o.clone(),
                        Some(Value::Object(o)) => o
                            .get("content")
                            .or_else(|| o.get("output"))
                            .map(records::content_text)
                            .unwrap_or_default(),
                        Some(other) => records::content_text(other),
                        None => String::new(),
                    };
                    msg = Some(
                        Message::new(Role::Tool, name, out).with_extra("call_id", json!(call)),
                    );
                }
                _ => {}
            }
        }
        match msg {
            Some(mut m) => {
                m.time = time;
                m.parent = messages.len().checked_sub(1);
                m.key = Some(rec.line.to_string());
                let mut r = std::mem::take(&mut waiting);
                r.push(rec.to_value(None));
                m.extra.insert("records".into(), Value::Array(r));
                messages.push(m);
            }
            None => match messages.last_mut() {
                Some(last) => {
                    if let Some(Value::Array(r)) = last.extra.get_mut("records") {
                        r.push(rec.to_value(None));
                    }
                }
                None => waiting.push(rec.to_value(None)),
            },
        }
    }
    if !waiting.is_empty() {
        // Nothing but bookkeeping so far: one system message holds it.
        let mut m = Message::new(Role::System, "codex", "");
        m.time = created;
        m.key = Some("records".into());
        m.extra.insert("records".into(), Value::Array(waiting));
        m.extra.insert("holder".into(), json!(true));
        messages.push(m);
    }
    let n = messages.len();
    for i in 0..n {
        if messages[i].role == Role::Assistant
            && messages
                .get(i + 1)
                .is_some_and(|next| next.role != Role::User)
        {
            let m = &mut messages[i];
            m.role = Role::ToolCall;
            m.to = Some("user".into());
            m.extra.insert("intermediate".into(), json!(true));
        }
    }
    let title = messages
        .iter()
        .find(|m| m.role == Role::User)
        .and_then(|m| records::title_of(&m.text));
    meta.insert(
        "file".into(),
        json!(
            Path::new(file)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
    );
    let id = id.or_else(|| {
        Path::new(file)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
    });
    Some(Conversation {
        id,
        title,
        agent: Some("codex".into()),
        created_at: created,
        meta,
        timelines: vec![Timeline {
            name: "main".into(),
            leaf: n.checked_sub(1),
        }],
        messages,
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
