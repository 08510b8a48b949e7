//! ShareGPT JSON: the layout of many chat datasets.
//!
//! # Wire format
//!
//! A JSON array of conversations (or one conversation object, or JSON
//! Lines of them):
//!
//! ```json
//! [{"id": "abc", "conversations": [
//!     {"from": "system", "value": "You are helpful."},
//!     {"from": "human", "value": "Hi"},
//!     {"from": "gpt", "value": "Hello! How can I help?"}]}]
//! ```
//!
//! * `conversations` (or `conversation`): turns of `{from, value}`.
//!   `from` is `human` / `user` (a user turn), `gpt` / `assistant` /
//!   `chatgpt` / `bard` / `bing` / `model` / `claude` (the model), `system`,
//!   `function_call` / `tool_call` (a tool call) or `observation` / `tool` /
//!   `function_response` (its result). The `from` value names the speaker.
//! * `id` (string or number) identifies the conversation; without one, a
//!   hash of its content does. A top-level `system` string is a first
//!   system turn. `model` is kept as the assistant's model.
//!
//! Import only.

use crate::Reader;
use crate::error::{Error, Result};
use crate::json::{parse, parse_line};
use crate::model::{Conversation, Message, Read, Role};
use serde::Deserialize;
use serde_json::Value;

/// The ShareGPT format.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShareGpt;

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    id: Option<Value>,
    #[serde(alias = "conversation")]
    conversations: Vec<Turn>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    title: Option<String>,
}

#[derive(Deserialize)]
struct Turn {
    from: String,
    #[serde(default)]
    value: Option<String>,
}

impl Reader for ShareGpt {
    fn name(&self) -> &'static str {
        "sharegpt"
    }
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let start = bytes
            .iter()
            .position(|c| !c.is_ascii_whitespace() && *c != 0xEF && *c != 0xBB && *c != 0xBF);
        let items: Vec<(String, Item)> = match start.map(|i| bytes[i]) {
            Some(b'[') => {
                let v: Vec<Item> = parse(file, bytes)?;
                v.into_iter()
                    .enumerate()
                    .map(|(i, it)| (format!("$[{i}]"), it))
                    .collect()
            }
            Some(b'{') => match parse::<Item>(file, bytes) {
                Ok(one) => vec![("$".to_owned(), one)],
                Err(e) if e.rule == "json-syntax" && e.location.is_some_and(|l| l.line > 1) => {
                    jsonl(file, bytes)?
                }
                Err(e) => return Err(e),
            },
            _ => {
                // Let the JSON parser say what is wrong where.
                let v: Vec<Item> = parse(file, bytes)?;
                v.into_iter()
                    .enumerate()
                    .map(|(i, it)| (format!("$[{i}]"), it))
                    .collect()
            }
        };
        let mut out = Vec::with_capacity(items.len());
        for (path, it) in items {
            out.push(conversation(file, &path, it)?);
        }
        Ok(Read::of(out))
    }
}

fn jsonl(file: &str, bytes: &[u8]) -> Result<Vec<(String, Item)>> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| Error::new(file, "encoding", "the file is not UTF-8"))?;
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push((
            format!("line {}", i + 1),
            parse_line(file, i + 1, line.trim_end_matches('\r'))?,
        ));
    }
    Ok(out)
}

fn conversation(file: &str, path: &str, it: Item) -> Result<Conversation> {
    let mut messages = Vec::with_capacity(it.conversations.len() + 1);
    if let Some(s) = it.system.filter(|s| !s.is_empty()) {
        messages.push(Message::new(Role::System, "system", s));
    }
    for (j, t) in it.conversations.into_iter().enumerate() {
        let role = match t.from.to_ascii_lowercase().as_str() {
            "human" | "user" => Role::User,
            "gpt" | "assistant" | "chatgpt" | "bard" | "bing" | "model" | "claude" => Role::Assistant,
            "system" => Role::System,
            "function_call" | "tool_call" => Role::ToolCall,
            "observation" | "tool" | "function_response" | "function" => Role::Tool,
            other => {
                return Err(Error::new(
                    file,
                    "unknown-speaker",
                    format!("unknown `from` {other:?} (expected human, gpt, system, function_call or observation)"),
                )
                .with_path(format!("{path}.conversations[{j}].from")))
            }
        };
        let model = if role == Role::Assistant {
            it.model.clone()
        } else {
            None
        };
        let mut m = Message::new(role, t.from, t.value.unwrap_or_default()).with_model(model);
        if role == Role::ToolCall {
            m.to = Some("tool".into());
        }
        messages.push(m);
    }
    let mut c = Conversation::linear(messages);
    c.id = match it.id {
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    c.title = it.title;
    Ok(c)
}
