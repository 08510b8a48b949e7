//! clog: one folder per conversation (seed 004).
//!
//! # Wire format
//!
//! ```text
//! storage/conversations/conversation-2026-03-26T01-32-20-418Z-thread_abc123/
//!   notes.jsonl
//!   chat.jsonl
//! ```
//!
//! Both files are JSON Lines. Their first line is a header record:
//!
//! ```json
//! {"type":"conversation-header","schemaVersion":1,"fileKind":"chat","conversationId":"conversation-2026-03-26T01-32-20-418Z-thread_abc123","threadId":"thread_abc123","channel":"tui","title":"Operator Conversation","createdAt":1774402340418,"updatedAt":1774402400000}
//! ```
//!
//! `chat.jsonl` continues with one message record per line:
//!
//! ```json
//! {"type":"message","conversationId":"…","threadId":"thread_abc123","messageId":"msg_02","role":"user","channel":"tui","content":"what errors happened today?","createdAt":1774402350000}
//! ```
//!
//! `role` is `system`, `user` or `agent`; a message may carry `reasoning`
//! and `thoughts`, which are kept, as is any other field. `createdAt` is
//! milliseconds since the epoch. `notes.jsonl` continues with note records
//! (`{"type":"note","createdAt":…,"author":"model","content":"…"}`), kept
//! with the conversation and written back on export.
//!
//! A path to import may be a conversation folder, its `chat.jsonl`, or a
//! folder of conversation folders (`storage/conversations/`, or `storage/`
//! holding one): every conversation in it is read. The conversation is
//! named by its `conversationId`. A writer names the folder
//! [`convo_core::text::component`] of the `conversationId` (or of
//! `conversation-{time}-{threadId}`), so no id — `../../x`, `.git`, `a/b` —
//! can put it anywhere but directly under the target folder; the records
//! keep the id verbatim.
//!
//! clog has no tool messages: a writer records a tool call as an `agent`
//! message with `toolCall: {"to": …}` and a tool's answer as a `system`
//! message with `toolResult: {"from": …}`, which a reader maps back.

use crate::error::{Error, Result};
use crate::json::{Ordered, compact, millis_to_iso, parse_line};
use crate::model::{Conversation, Message, Read, Role};
use crate::{MAX_INPUT_BYTES, Reader, Writer, read_file};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};

/// The clog format.
#[derive(Clone, Copy, Debug, Default)]
pub struct Clog;

/// Whether `dir` is a clog conversation folder or holds some.
pub fn is_clog_dir(dir: &Path) -> bool {
    !conversation_dirs(dir).is_empty()
}

/// The conversation folders under `dir` (itself, its children, or those of
/// its `conversations/`), sorted by name.
pub fn conversation_dirs(dir: &Path) -> Vec<PathBuf> {
    if dir.join("chat.jsonl").is_file() {
        return vec![dir.to_path_buf()];
    }
    let children = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.join("chat.jsonl").is_file())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let direct = children(dir);
    if !direct.is_empty() {
        return direct;
    }
    children(&dir.join("conversations"))
}

impl Reader for Clog {
    fn name(&self) -> &'static str {
        "clog"
    }

    /// Reads one `chat.jsonl` on its own (no notes).
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        Ok(Read::of(vec![read_chat(file, bytes, None)?]))
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        let dir = if path.is_file() {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            path.to_path_buf()
        };
        let dirs = conversation_dirs(&dir);
        if dirs.is_empty() {
            return Err(Error::new(
                &path.display().to_string(),
                "clog-layout",
                "no clog conversation here: expected a folder holding chat.jsonl, or a folder of such folders",
            ));
        }
        let mut out = Vec::with_capacity(dirs.len());
        for d in dirs {
            let chat = d.join("chat.jsonl");
            let notes = d.join("notes.jsonl");
            let notes = if notes.is_file() {
                let name = notes.display().to_string();
                Some((name, read_file(&notes, MAX_INPUT_BYTES)?))
            } else {
                None
            };
            let bytes = read_file(&chat, MAX_INPUT_BYTES)?;
            out.push(read_chat(
                &chat.display().to_string(),
                &bytes,
                notes.as_ref().map(|(n, b)| (n.as_str(), b.as_slice())),
            )?);
        }
        Ok(Read::of(out))
    }
}

fn lines<'a>(file: &str, bytes: &'a [u8]) -> Result<Vec<(usize, &'a str)>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let ok = e.valid_up_to();
        Error::new(file, "encoding", "the file is not UTF-8")
            .at(std::str::from_utf8(&bytes[..ok]).unwrap_or(""), ok)
    })?;
    Ok(text
        .split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty())
        .collect())
}

fn read_chat(file: &str, bytes: &[u8], notes: Option<(&str, &[u8])>) -> Result<Conversation> {
    let mut header: Option<Map<String, Value>> = None;
    let mut messages = Vec::new();
    let mut other = Vec::new();
    for (n, line) in lines(file, bytes)? {
        let rec: Map<String, Value> = parse_line(file, n, line)?;
        match rec.get("type").and_then(Value::as_str) {
            Some("conversation-header") if header.is_none() => header = Some(rec),
            Some("message") => messages.push(chat_message(file, n, rec, header.as_ref())?),
            _ => other.push(Value::Object(rec)),
        }
    }
    let Some(header) = header else {
        return Err(Error::new(
            file,
            "clog-header",
            "chat.jsonl has no conversation-header record",
        )
        .at_line(1, 1));
    };
    let mut conv = Conversation::linear(messages);
    conv.id = header
        .get("conversationId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    conv.title = header
        .get("title")
        .and_then(Value::as_str)
        .map(str::to_owned);
    conv.created_at = header.get("createdAt").and_then(Value::as_i64);
    conv.agent = Some("clog".into());
    conv.meta.insert("clog".into(), Value::Object(header));
    if !other.is_empty() {
        conv.meta.insert("chat_records".into(), Value::Array(other));
    }
    if let Some((nfile, nbytes)) = notes {
        let mut recs = Vec::new();
        for (n, line) in lines(nfile, nbytes)? {
            let rec: Map<String, Value> = parse_line(nfile, n, line)?;
            if rec.get("type").and_then(Value::as_str) == Some("conversation-header") {
                conv.meta.insert("notes_header".into(), Value::Object(rec));
            } else {
                recs.push(Value::Object(rec));
            }
        }
        conv.meta.insert("notes".into(), Value::Array(recs));
    }
    Ok(conv)
}

/// A `message` record (line `n`) as a message: its role, content and
/// time; the fields the header already says dropped, the rest kept.
fn chat_message(
    file: &str,
    n: usize,
    mut rec: Map<String, Value>,
    header: Option<&Map<String, Value>>,
) -> Result<Message> {
    let wrong = |key: &str, want: &str| {
        Error::new(file, "wrong-type", format!("`{key}` must be {want}"))
            .at_line(n, 1)
            .with_path(format!("$.{key}"))
    };
    let role = match rec.remove("role") {
        Some(Value::String(r)) => r,
        _ => return Err(wrong("role", "system, user or agent")),
    };
    let content = match rec.remove("content") {
        Some(Value::String(c)) => c,
        Some(Value::Null) | None => String::new(),
        _ => return Err(wrong("content", "a string")),
    };
    let at = match rec.remove("createdAt") {
        Some(Value::Number(x)) => x.as_i64().or_else(|| x.as_f64().map(|f| f as i64)),
        Some(Value::Null) | None => None,
        _ => return Err(wrong("createdAt", "milliseconds since the epoch")),
    };
    let tool_call = rec.remove("toolCall");
    let tool_result = rec.remove("toolResult");
    let (role, speaker, to) = match (role.as_str(), &tool_call, &tool_result) {
        ("agent" | "assistant", Some(tc), _) => (
            Role::ToolCall,
            "agent".to_owned(),
            tc.get("to").and_then(Value::as_str).map(str::to_owned),
        ),
        (_, _, Some(tr)) => (
            Role::Tool,
            tr.get("from")
                .and_then(Value::as_str)
                .unwrap_or("tool")
                .to_owned(),
            None,
        ),
        ("agent" | "assistant", ..) => (Role::Assistant, "agent".to_owned(), None),
        ("user", ..) => (Role::User, "user".to_owned(), None),
        ("system", ..) => (Role::System, "system".to_owned(), None),
        (r, ..) => {
            return Err(Error::new(
                file,
                "wrong-type",
                format!("unknown role {r:?} (expected system, user or agent)"),
            )
            .at_line(n, 1)
            .with_path("$.role"));
        }
    };
    for k in ["type", "conversationId", "threadId"] {
        rec.remove(k);
    }
    if let (Some(h), Some(ch)) = (header, rec.get("channel"))
        && h.get("channel") == Some(ch)
    {
        rec.remove("channel");
    }
    let model = rec.get("model").and_then(Value::as_str).map(str::to_owned);
    let mut m = Message::new(role, speaker, content)
        .at(at)
        .with_model(model);
    m.to = to;
    m.extra = rec;
    Ok(m)
}

/// `2026-03-26T01-32-20-418Z`: a time as clog puts it in folder names.
fn folder_time(ms: i64) -> String {
    millis_to_iso(ms)
        .replace([':', '.'], "-")
        .replace("Z", if ms % 1000 == 0 { "-000Z" } else { "Z" })
}

struct Files {
    folder: String,
    notes: String,
    chat: String,
}

fn render(conv: &Conversation) -> Files {
    let h = conv.meta.get("clog").and_then(Value::as_object);
    let hs = |k: &str| {
        h.and_then(|h| h.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let created = h
        .and_then(|h| h.get("createdAt"))
        .and_then(Value::as_i64)
        .or(conv.first_time())
        .unwrap_or(0);
    let thread = hs("threadId").unwrap_or_else(|| {
        let seed = conv.id.clone().unwrap_or_default();
        format!(
            "thread_{}",
            &convo_core::sha256(seed.as_bytes()).to_hex()[..12]
        )
    });
    // The id as the conversation had it, written back verbatim in the
    // records; the folder is always one safe path component of it.
    let conv_id = hs("conversationId")
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| format!("conversation-{}-{thread}", folder_time(created)));
    let ids = ClogIds {
        folder: convo_core::text::component(&conv_id),
        conv_id,
        thread,
        channel: hs("channel").unwrap_or_else(|| "convo".into()),
        created,
    };
    let turns = conv.turns();
    let updated = turns
        .iter()
        .filter_map(|m| m.time)
        .max()
        .unwrap_or(created)
        .max(created);
    let mut chat = ids.header(conv, "chat", updated);
    chat.push('\n');
    for (i, m) in turns.iter().enumerate() {
        chat.push_str(&ids.message_line(i, m));
        chat.push('\n');
    }
    push_records(&mut chat, conv.meta.get("chat_records"));
    let mut notes = ids.header(conv, "notes", created);
    notes.push('\n');
    push_records(&mut notes, conv.meta.get("notes"));
    Files {
        folder: ids.folder,
        notes,
        chat,
    }
}

/// Appends records kept as they were (an array of them), a line each.
fn push_records(out: &mut String, recs: Option<&Value>) {
    if let Some(Value::Array(recs)) = recs {
        for r in recs {
            out.push_str(&compact(r));
            out.push('\n');
        }
    }
}

/// What every record of a clog folder says of its conversation.
struct ClogIds {
    folder: String,
    conv_id: String,
    thread: String,
    channel: String,
    created: i64,
}

impl ClogIds {
    /// A file's `conversation-header` record (`kind`: chat or notes).
    fn header(&self, conv: &Conversation, kind: &str, updated: i64) -> String {
        let mut o = vec![
            ("type", Ordered::V(json!("conversation-header"))),
            ("schemaVersion", Ordered::V(json!(1))),
            ("fileKind", Ordered::V(json!(kind))),
            ("conversationId", Ordered::V(json!(self.conv_id))),
            ("threadId", Ordered::V(json!(self.thread))),
            ("channel", Ordered::V(json!(self.channel))),
        ];
        if let Some(t) = &conv.title {
            o.push(("title", Ordered::V(json!(t))));
        }
        o.push(("createdAt", Ordered::V(json!(self.created))));
        o.push(("updatedAt", Ordered::V(json!(updated))));
        Ordered::obj(o).compact()
    }

    /// The `message` record of turn `i`, its kept fields last.
    fn message_line(&self, i: usize, m: &Message) -> String {
        let mut extra = m.extra.clone();
        let id = extra
            .remove("messageId")
            .unwrap_or_else(|| json!(format!("msg_{:02}", i + 1)));
        let role = match m.role {
            Role::User => "user",
            Role::Assistant | Role::ToolCall => "agent",
            Role::System | Role::Tool => "system",
        };
        let ch = extra
            .remove("channel")
            .unwrap_or_else(|| json!(self.channel));
        let mut o = vec![
            ("type".to_owned(), Ordered::V(json!("message"))),
            ("conversationId".to_owned(), Ordered::V(json!(self.conv_id))),
            ("threadId".to_owned(), Ordered::V(json!(self.thread))),
            ("messageId".to_owned(), Ordered::V(id)),
            ("role".to_owned(), Ordered::V(json!(role))),
            ("channel".to_owned(), Ordered::V(ch)),
            ("content".to_owned(), Ordered::V(json!(m.text))),
            (
                "createdAt".to_owned(),
                Ordered::V(json!(m.time.unwrap_or(self.created))),
            ),
        ];
        if m.role == Role::ToolCall {
            o.push((
                "toolCall".into(),
                Ordered::V(json!({"to": m.to.clone().unwrap_or_else(|| "tool".into())})),
            ));
        }
        if m.role == Role::Tool {
            o.push(("toolResult".into(), Ordered::V(json!({"from": m.speaker}))));
        }
        if let Some(model) = &m.model
            && !extra.contains_key("model")
        {
            o.push(("model".into(), Ordered::V(json!(model))));
        }
        for (k, v) in extra {
            o.push((k, Ordered::V(v)));
        }
        Ordered::Obj(o).compact()
    }
}

/// Writes the conversation folder (`notes.jsonl` + `chat.jsonl`) under
/// `parent`, atomically: into a temporary folder renamed into place, so a
/// failure leaves nothing half-written. Refuses to replace a folder.
pub fn write_folder(conv: &Conversation, parent: &Path) -> Result<PathBuf> {
    let f = render(conv);
    let target = parent.join(&f.folder);
    let name = target.display().to_string();
    let io = |e: std::io::Error| Error::new(&name, "io", format!("cannot write: {e}"));
    if target.exists() {
        return Err(Error::new(
            &name,
            "exists",
            "the conversation folder already exists; remove it or export elsewhere",
        ));
    }
    std::fs::create_dir_all(parent).map_err(io)?;
    let tmp = parent.join(format!(".{}.tmp-{}", f.folder, std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let res = (|| {
        std::fs::create_dir(&tmp)?;
        std::fs::write(tmp.join("notes.jsonl"), &f.notes)?;
        std::fs::write(tmp.join("chat.jsonl"), &f.chat)?;
        std::fs::rename(&tmp, &target)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(io(e));
    }
    Ok(target)
}

impl Writer for Clog {
    fn name(&self) -> &'static str {
        "clog"
    }
    /// `chat.jsonl` alone (for standard output); see [`write_folder`].
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>> {
        Ok(render(conv).chat.into_bytes())
    }
}
