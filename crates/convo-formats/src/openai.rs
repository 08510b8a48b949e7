//! OpenAI chat JSONL: one conversation per line.
//!
//! # Wire format
//!
//! Each non-blank line is one JSON object with a `messages` array, as used
//! for fine-tuning and logging:
//!
//! ```json
//! {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "call_1", "content": "18°C"}, {"role": "assistant", "content": "18°C and sunny."}]}
//! ```
//!
//! * `role`: `system` or `developer` (read as a system prompt), `user`,
//!   `assistant`, `tool` or `function`.
//! * `content`: a string, `null`, or an array of parts; the text parts are
//!   joined with newlines and the original array is kept.
//! * An assistant message with `tool_calls` (or a legacy `function_call`)
//!   is a tool call: its text is the compact JSON of the calls (a `content`
//!   beside them is kept); a `tool` message is the answer, its
//!   `tool_call_id` kept. `name` names the speaker.
//! * Other keys of the line (`tools`, …) and of each message are kept.
//!
//! A line's identity (what makes a second import a no-op) is the SHA-256
//! of the line. The writer emits one line per conversation with roles
//! `system` / `user` / `assistant` / `tool`.

use crate::error::{Error, Result};
use crate::json::{Ordered, parse_line};
use crate::model::{Conversation, Message, Read, Role};
use crate::{Reader, Writer};
use serde_json::{Map, Value, json};

/// The OpenAI chat JSONL format.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenAi;

impl Reader for OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let text = std::str::from_utf8(bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes))
            .map_err(|e| {
                let ok = e.valid_up_to();
                Error::new(file, "encoding", "the file is not UTF-8")
                    .at(std::str::from_utf8(&bytes[..ok]).unwrap_or(""), ok)
            })?;
        let mut out = Vec::new();
        for (i, line) in text.split('\n').enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let obj: Map<String, Value> = parse_line(file, i + 1, line)?;
            out.push(conversation(file, i + 1, line, obj)?);
        }
        Ok(Read::of(out))
    }
}

fn conversation(
    file: &str,
    lineno: usize,
    line: &str,
    mut obj: Map<String, Value>,
) -> Result<Conversation> {
    let at = LineAt { file, lineno };
    let msgs = match obj.remove("messages") {
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(at.wrong("$.messages".into(), "`messages` must be an array".into()));
        }
        None => {
            return Err(
                Error::new(file, "missing-key", "each line needs a `messages` array")
                    .at_line(lineno, 1),
            );
        }
    };
    let mut messages = Vec::with_capacity(msgs.len());
    for (j, m) in msgs.into_iter().enumerate() {
        messages.push(at.message(j, m)?);
    }
    let mut c = Conversation::linear(messages);
    c.id = Some(format!(
        "sha256:{}",
        convo_core::sha256(line.as_bytes()).to_hex()
    ));
    if !obj.is_empty() {
        c.meta.insert("openai".into(), Value::Object(obj));
    }
    Ok(c)
}

/// The line a conversation is read from, for its errors.
struct LineAt<'a> {
    file: &'a str,
    lineno: usize,
}

impl LineAt<'_> {
    /// The error `wrong-type` at `path` of the line.
    fn wrong(&self, path: String, why: String) -> Error {
        Error::new(self.file, "wrong-type", why)
            .at_line(self.lineno, 1)
            .with_path(path)
    }

    /// Message `j` of the line: its role, name, text and model; the rest
    /// of its fields kept in `extra`.
    fn message(&self, j: usize, m: Value) -> Result<Message> {
        let path = format!("$.messages[{j}]");
        let Value::Object(mut m) = m else {
            return Err(self.wrong(path, "a message must be an object".into()));
        };
        let role = match m.remove("role") {
            Some(Value::String(r)) => r,
            _ => {
                return Err(self.wrong(format!("{path}.role"), "`role` must be a string".into()));
            }
        };
        let name = match m.remove("name") {
            Some(Value::String(n)) => Some(n),
            Some(Value::Null) | None => None,
            Some(_) => {
                return Err(self.wrong(format!("{path}.name"), "`name` must be a string".into()));
            }
        };
        let content = m.remove("content").unwrap_or(Value::Null);
        let text = self.text_of(&path, &content, &mut m)?;
        let mut msg = self.role_message(&path, &role, name, text, content, &mut m)?;
        if let Some(model) = m
            .remove("model")
            .and_then(|v| v.as_str().map(str::to_owned))
        {
            msg.model = Some(model);
        }
        msg.extra = m;
        Ok(msg)
    }

    /// A message's text from its `content` (an array of parts is also
    /// kept whole in `m`).
    fn text_of(&self, path: &str, content: &Value, m: &mut Map<String, Value>) -> Result<String> {
        Ok(match content {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            Value::Array(parts) => {
                m.insert("content".into(), content.clone());
                parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            _ => {
                return Err(self.wrong(
                    format!("{path}.content"),
                    "`content` must be a string, null or an array of parts".into(),
                ));
            }
        })
    }

    /// The message a `role` says (what is kept of it noted in `m`).
    fn role_message(
        &self,
        path: &str,
        role: &str,
        name: Option<String>,
        text: String,
        content: Value,
        m: &mut Map<String, Value>,
    ) -> Result<Message> {
        let calls = m.remove("tool_calls").filter(|v| !v.is_null());
        let legacy = m.remove("function_call").filter(|v| !v.is_null());
        Ok(match role {
            "system" | "developer" => {
                if role == "developer" {
                    m.insert("openai_role".into(), json!("developer"));
                }
                Message::new(Role::System, name.unwrap_or_else(|| "system".into()), text)
            }
            "user" => Message::new(Role::User, name.unwrap_or_else(|| "user".into()), text),
            "assistant" if calls.is_some() || legacy.is_some() => {
                call_message(name, calls, legacy, content, m)
            }
            "assistant" => Message::new(
                Role::Assistant,
                name.unwrap_or_else(|| "assistant".into()),
                text,
            ),
            "tool" | "function" => {
                if role == "function" {
                    m.insert("openai_role".into(), json!("function"));
                }
                Message::new(Role::Tool, name.unwrap_or_else(|| "tool".into()), text)
            }
            other => {
                return Err(self.wrong(
                    format!("{path}.role"),
                    format!(
                        "unknown role {other:?} (expected system, developer, user, assistant, tool or function)"
                    ),
                ));
            }
        })
    }
}

/// An assistant message with `tool_calls` (or a legacy `function_call`):
/// a tool call to the first tool, its text the calls' JSON; its content
/// and the legacy shape kept in `m`.
fn call_message(
    name: Option<String>,
    calls: Option<Value>,
    legacy: Option<Value>,
    content: Value,
    m: &mut Map<String, Value>,
) -> Message {
    let (key, v) = match (calls, legacy) {
        (Some(c), _) => ("tool_calls", c),
        (None, Some(f)) => ("function_call", f),
        (None, None) => ("tool_calls", Value::Array(Vec::new())),
    };
    if !content.is_null() && !m.contains_key("content") {
        m.insert("content".into(), content);
    }
    if key == "function_call" {
        m.insert("openai_call".into(), json!("function_call"));
    }
    let to = v
        .as_array()
        .and_then(|a| a.first())
        .unwrap_or(&v)
        .pointer("/function/name")
        .or_else(|| v.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("tool")
        .to_owned();
    let mut msg = Message::new(
        Role::ToolCall,
        name.unwrap_or_else(|| "assistant".into()),
        crate::json::compact(&v),
    );
    msg.to = Some(to);
    msg
}

/// Whether OpenAI accepts `name` as a message `name`.
fn api_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The `messages` of one conversation, as OpenAI chat messages.
pub fn messages(conv: &Conversation) -> Vec<Ordered> {
    let mut out = Vec::new();
    let mut last_call: Option<String> = None;
    let mut n = 0;
    for m in conv.turns() {
        let mut o: Vec<(String, Ordered)> = Vec::new();
        let mut extra = m.extra.clone();
        let v = |x: Value| Ordered::V(x);
        match m.role {
            Role::System => {
                let role = crate::json::take_str(&mut extra, "openai_role")
                    .unwrap_or_else(|| "system".into());
                o.push(("role".into(), v(json!(role))));
                o.push(("content".into(), v(json!(m.text))));
            }
            Role::User | Role::Assistant => {
                let role = if m.role == Role::User {
                    "user"
                } else {
                    "assistant"
                };
                o.push(("role".into(), v(json!(role))));
                let content = extra
                    .remove("content")
                    .filter(Value::is_array)
                    .unwrap_or_else(|| json!(m.text));
                o.push(("content".into(), v(content)));
                if m.speaker != role && api_name(&m.speaker) {
                    o.push(("name".into(), v(json!(m.speaker))));
                }
            }
            Role::ToolCall => {
                o.push(("role".into(), v(json!("assistant"))));
                o.push((
                    "content".into(),
                    v(extra.remove("content").unwrap_or(Value::Null)),
                ));
                let legacy = crate::json::take_str(&mut extra, "openai_call").is_some();
                let parsed: Option<Value> = convo_core::json::from_str_unique(&m.text).ok();
                let calls = match parsed {
                    Some(Value::Array(a)) if !legacy => Value::Array(a),
                    Some(obj @ Value::Object(_)) if legacy => obj,
                    _ => {
                        n += 1;
                        json!([{"id": format!("call_{n}"), "type": "function",
                                "function": {"name": m.to.clone().unwrap_or_else(|| "tool".into()), "arguments": m.text}}])
                    }
                };
                if let Some(id) = calls.pointer("/0/id").and_then(Value::as_str) {
                    last_call = Some(id.to_owned());
                }
                o.push((
                    if legacy {
                        "function_call"
                    } else {
                        "tool_calls"
                    }
                    .into(),
                    v(calls),
                ));
            }
            Role::Tool => {
                let role = crate::json::take_str(&mut extra, "openai_role")
                    .unwrap_or_else(|| "tool".into());
                o.push(("role".into(), v(json!(role))));
                if role == "tool" {
                    let id = extra
                        .remove("tool_call_id")
                        .or_else(|| last_call.clone().map(Value::String))
                        .unwrap_or_else(|| json!("call_0"));
                    o.push(("tool_call_id".into(), v(id)));
                } else {
                    o.push(("name".into(), v(json!(m.speaker))));
                }
                o.push(("content".into(), v(json!(m.text))));
            }
        }
        for (k, val) in extra {
            if !o.iter().any(|(x, _)| *x == k) {
                o.push((k, v(val)));
            }
        }
        out.push(Ordered::Obj(o));
    }
    out
}

impl Writer for OpenAi {
    fn name(&self) -> &'static str {
        "openai"
    }
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>> {
        let mut line = vec![("messages".to_owned(), Ordered::Arr(messages(conv)))];
        if let Some(Value::Object(o)) = conv.meta.get("openai") {
            for (k, v) in o {
                line.push((k.clone(), Ordered::V(v.clone())));
            }
        }
        let mut s = Ordered::Obj(line).compact();
        s.push('\n');
        Ok(s.into_bytes())
    }
}
