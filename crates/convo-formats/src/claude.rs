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
use crate::model::{Conversation, Message, Read, Role};
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
    for (j, mut m) in c.chat_messages.into_iter().enumerate() {
        let msg = chat_message(file, i, j, &mut m)?;
        if let Some(u) = &m.uuid
            && let Some(first) = by_uuid.insert(u.clone(), j)
        {
            return Err(crate::Error::new(
                file,
                "message-duplicate",
                format!("messages {first} and {j} share the uuid {u:?}"),
            )
            .with_path(format!("$[{i}].chat_messages[{j}].uuid")));
        }
        parents.push(m.parent_message_uuid);
        messages.push(msg);
    }
    let parent_ix = parent_indexes(file, i, &parents, &by_uuid, &messages)?;
    drop(parents);
    if let Some(cycle) = crate::tree::find_cycle(&parent_ix) {
        let names: Vec<String> = cycle
            .iter()
            .map(|&k| {
                messages[k]
                    .extra
                    .get("uuid")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("#{k}"), str::to_owned)
            })
            .collect();
        return Err(crate::Error::new(
            file,
            "parent-cycle",
            format!(
                "the parent_message_uuid links form a cycle: {}",
                crate::tree::show_cycle(&names)
            ),
        )
        .with_path(format!("$[{i}].chat_messages")));
    }
    let mut conv = if parent_ix.iter().any(Option::is_some) {
        tree_conversation(messages, &parent_ix)
    } else {
        Conversation::linear(messages)
    };
    conv.id = c.uuid;
    conv.title = c.name.filter(|n| !n.is_empty());
    conv.agent = Some("claude".into());
    conv.created_at = c.created_at.as_deref().and_then(iso_to_millis);
    Ok(conv)
}

/// Message `j` of conversation `i`: its text (else its text blocks), its
/// thinking, tool blocks, attachments and files (moved out of `m`).
fn chat_message(file: &str, i: usize, j: usize, m: &mut Msg) -> Result<Message> {
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
    let blocks = m.content.take().unwrap_or_default();
    let block_text = |ty: &str, key: &str| -> Vec<String> {
        blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some(ty))
            .filter_map(|b| b.get(key).and_then(Value::as_str).map(str::to_owned))
            .collect()
    };
    let text = match m.text.take().filter(|t| !t.is_empty()) {
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
    if let Some(a) = m.attachments.take().filter(|a| !a.is_empty()) {
        msg = msg.with_extra("attachments", Value::Array(a));
    }
    if let Some(f) = m.files.take().filter(|f| !f.is_empty()) {
        msg = msg.with_extra("files", Value::Array(f));
    }
    Ok(msg)
}

/// Each message's parent (by its `parent_message_uuid`, among `by_uuid`;
/// Claude's root marker or none: a root). A parent not in the
/// conversation is the error `parent-dangling`.
fn parent_indexes(
    file: &str,
    i: usize,
    parents: &[Option<String>],
    by_uuid: &HashMap<String, usize>,
    messages: &[Message],
) -> Result<Vec<Option<usize>>> {
    // Claude marks a conversation's first message with this parent.
    let is_root_marker = |p: &str| p.bytes().all(|b| matches!(b, b'0' | b'-' | b'4' | b'8'));
    let mut parent_ix: Vec<Option<usize>> = Vec::with_capacity(parents.len());
    for (j, p) in parents.iter().enumerate() {
        match p.as_deref() {
            None => parent_ix.push(None),
            Some(p) if is_root_marker(p) && !by_uuid.contains_key(p) => parent_ix.push(None),
            Some(p) => match by_uuid.get(p) {
                Some(&q) => parent_ix.push(Some(q)),
                None => {
                    let id = messages[j]
                        .extra
                        .get("uuid")
                        .and_then(Value::as_str)
                        .map_or_else(|| format!("#{j}"), |u| format!("{u:?}"));
                    return Err(crate::Error::new(
                        file,
                        "parent-dangling",
                        format!(
                            "message {id} has parent_message_uuid {p:?}, which is not a message of this conversation"
                        ),
                    )
                    .with_path(format!("$[{i}].chat_messages[{j}].parent_message_uuid")));
                }
            },
        }
    }
    Ok(parent_ix)
}

/// A branched conversation: each message under its parent (`parent_ix`,
/// acyclic), parents first; `main` ends at the last leaf, every other
/// leaf is `alt-N`.
fn tree_conversation(mut messages: Vec<Message>, parent_ix: &[Option<usize>]) -> Conversation {
    for (j, p) in parent_ix.iter().enumerate() {
        messages[j].parent = *p;
    }
    if parent_ix
        .iter()
        .enumerate()
        .any(|(j, p)| p.is_some_and(|p| p > j))
    {
        messages = parents_first(messages);
    }
    let timelines = crate::model::leaf_timelines(&messages, None);
    Conversation {
        messages,
        timelines,
        ..Conversation::default()
    }
}

/// The messages reordered so that every parent comes before its children
/// (the model's invariant), depth first, siblings in file order. Only
/// called on an acyclic tree.
fn parents_first(messages: Vec<Message>) -> Vec<Message> {
    let n = messages.len();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut roots = Vec::new();
    for (j, m) in messages.iter().enumerate() {
        match m.parent {
            Some(p) => children[p].push(j),
            None => roots.push(j),
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut stack: Vec<usize> = roots.into_iter().rev().collect();
    while let Some(j) = stack.pop() {
        order.push(j);
        stack.extend(children[j].iter().rev());
    }
    let mut new_index = vec![0usize; n];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    let mut slots: Vec<Option<Message>> = messages.into_iter().map(Some).collect();
    order
        .iter()
        .filter_map(|&old| slots[old].take())
        .map(|mut m| {
            m.parent = m.parent.map(|p| new_index[p]);
            m
        })
        .collect()
}
