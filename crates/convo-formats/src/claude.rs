//! Claude.ai data export: `conversations.json`.
//!
//! # Wire format
//!
//! A JSON array of conversations: `uuid`, `name` (the title), `created_at`
//! (ISO 8601), and `chat_messages`, each with `uuid`, `sender` (`human` or
//! `assistant`), `created_at`, `text`, `content` (blocks: `text` with
//! `text`, `thinking` with `thinking`, `tool_use` with `name` and `input`,
//! `tool_result` with `content`), `attachments` (`file_name`,
//! `file_type`, `file_size`, `extracted_content`: the text Claude extracted
//! from an uploaded file), `files` and, in newer exports,
//! `parent_message_uuid`.
//!
//! # Mapping
//!
//! `human` turns are user turns, `assistant` turns the model's. A message's
//! text is `text`, or its text blocks when `text` is empty. Thinking,
//! tool blocks, attachments (with their extracted text) and files are kept
//! in the message's extra fields. When messages name their parents and
//! those form a tree, every leaf is a timeline: the last one in the file is
//! `main`, the others `alt-1`, `alt-2`…

use crate::Reader;
use crate::error::Result;
use crate::json::{iso_to_millis, parse};
use crate::model::{Conversation, Message, Read, Role, Timeline};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The Claude.ai export format.
#[derive(Clone, Copy, Debug, Default)]
pub struct Claude;

#[derive(Deserialize)]
struct Conv {
    #[serde(default)]
    uuid: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    chat_messages: Vec<Msg>,
}

#[derive(Deserialize)]
struct Msg {
    #[serde(default)]
    uuid: Option<String>,
    sender: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    content: Option<Vec<Value>>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    attachments: Option<Vec<Value>>,
    #[serde(default)]
    files: Option<Vec<Value>>,
    #[serde(default)]
    parent_message_uuid: Option<String>,
}

impl Reader for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let convs: Vec<Conv> = parse(file, bytes)?;
        let mut out = Vec::with_capacity(convs.len());
        for (i, c) in convs.into_iter().enumerate() {
            out.push(conversation(file, i, c)?);
        }
        Ok(Read::of(out))
    }
}

fn conversation(file: &str, i: usize, c: Conv) -> Result<Conversation> {
    let mut messages = Vec::with_capacity(c.chat_messages.len());
    let mut by_uuid: HashMap<String, usize> = HashMap::new();
    let mut parents: Vec<Option<String>> = Vec::new();
    for (j, m) in c.chat_messages.into_iter().enumerate() {
        let role = match m.sender.as_str() {
            "human" | "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(crate::Error::new(
                    file,
                    "unknown-speaker",
                    format!("unknown `sender` {other:?} (expected human or assistant)"),
                )
                .with_path(format!("$[{i}].chat_messages[{j}].sender")));
            }
        };
        let blocks = m.content.unwrap_or_default();
        let block_text = |ty: &str, key: &str| -> Vec<String> {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some(ty))
                .filter_map(|b| b.get(key).and_then(Value::as_str).map(str::to_owned))
                .collect()
        };
        let text = match m.text.filter(|t| !t.is_empty()) {
            Some(t) => t,
            None => block_text("text", "text").join("\n\n"),
        };
        let thinking = block_text("thinking", "thinking");
        let tools: Vec<Value> = blocks
            .iter()
            .filter(|b| {
                matches!(
                    b.get("type").and_then(Value::as_str),
                    Some("tool_use" | "tool_result")
                )
            })
            .cloned()
            .collect();
        let speaker = if role == Role::User {
            "human"
        } else {
            "assistant"
        };
        let mut msg = Message::new(role, speaker, text)
            .at(m.created_at.as_deref().and_then(iso_to_millis))
            .with_extra("uuid", json!(m.uuid));
        if !thinking.is_empty() {
            msg = msg.with_extra("thinking", json!(thinking.join("\n\n")));
        }
        if !tools.is_empty() {
            msg = msg.with_extra("tool_blocks", Value::Array(tools));
        }
        if let Some(a) = m.attachments.filter(|a| !a.is_empty()) {
            msg = msg.with_extra("attachments", Value::Array(a));
        }
        if let Some(f) = m.files.filter(|f| !f.is_empty()) {
            msg = msg.with_extra("files", Value::Array(f));
        }
        if let Some(u) = &m.uuid {
            by_uuid.insert(u.clone(), j);
        }
        parents.push(m.parent_message_uuid);
        messages.push(msg);
    }
    let tree = parents
        .iter()
        .any(|p| p.as_ref().is_some_and(|p| by_uuid.contains_key(p)));
    let mut conv = if tree {
        for (j, p) in parents.iter().enumerate() {
            messages[j].parent = p
                .as_ref()
                .and_then(|p| by_uuid.get(p).copied())
                .filter(|&q| q != j);
        }
        let mut has_child = vec![false; messages.len()];
        for m in &messages {
            if let Some(p) = m.parent {
                has_child[p] = true;
            }
        }
        let leaves: Vec<usize> = (0..messages.len()).filter(|&k| !has_child[k]).collect();
        let main = leaves.last().copied();
        let mut timelines = vec![Timeline {
            name: "main".into(),
            leaf: main,
        }];
        for (n, l) in leaves.iter().filter(|l| Some(**l) != main).enumerate() {
            timelines.push(Timeline {
                name: format!("alt-{}", n + 1),
                leaf: Some(*l),
            });
        }
        Conversation {
            messages,
            timelines,
            ..Conversation::default()
        }
    } else {
        Conversation::linear(messages)
    };
    conv.id = c.uuid;
    conv.title = c.name.filter(|n| !n.is_empty());
    conv.agent = Some("claude".into());
    conv.created_at = c.created_at.as_deref().and_then(iso_to_millis);
    Ok(conv)
}
