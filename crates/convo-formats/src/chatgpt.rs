//! ChatGPT data export: `conversations.json`.
//!
//! # Wire format
//!
//! A JSON array of conversations. Each has `title`, `create_time` /
//! `update_time` (float seconds since the epoch), `conversation_id` (or
//! `id`), `current_node`, and `mapping`: an object of nodes keyed by id,
//! each `{id, message, parent, children}`, forming a tree of edits and
//! regenerations. A `message` has `author.role` (`system`, `user`,
//! `assistant`, `tool`) and `author.name`, `create_time`, `recipient`
//! (`all`, or the tool a message is addressed to), `metadata`
//! (`model_slug`, `is_visually_hidden_from_conversation`…) and `content`,
//! tagged by `content_type`:
//!
//! | content_type | text taken from |
//! |---|---|
//! | `text`, `multimodal_text` | `parts` (strings; `text` of object parts such as audio transcriptions; other parts kept as they are) |
//! | `code`, `execution_output`, `system_error` | `text` (and `name`) |
//! | `thoughts` | each thought's `summary` and `content` |
//! | `reasoning_recap` | `content` |
//! | `user_editable_context` | `user_profile` and `user_instructions` (read as a system prompt) |
//! | `tether_quote`, `tether_browsing_display` | `title`, `url`, `text` / `result`, `summary` |
//! | anything else | every string in the content, in order; the content object is kept |
//!
//! # Mapping
//!
//! Every root-to-leaf path of the tree becomes a timeline, sharing its
//! prefix nodes with the others: the path to `current_node` is `main`, the
//! other leaves become forks named `alt-1`, `alt-2`… in the tree's order
//! (depth first, children in the export's order). Nodes without a message
//! or with no text at all (the hidden root, empty system messages) are
//! skipped, their children attached to the nearest kept ancestor. Hidden
//! messages that hold text are kept, marked `hidden`. A user message is a
//! user turn, an assistant message addressed to a tool (`recipient` other
//! than `all`) a tool call, a `tool` message the tool's answer; the
//! content type, the message id and anything not plain text are kept in
//! the message's extra fields, so no text is lost.

use crate::Reader;
use crate::error::{Error, Result};
use crate::json::{parse, secs_to_millis};
use crate::model::{Conversation, Message, Read, Role};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The ChatGPT export format.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChatGpt;

#[derive(Deserialize)]
struct Conv {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    create_time: Option<f64>,
    mapping: BTreeMap<String, Node>,
    #[serde(default)]
    current_node: Option<String>,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    default_model_slug: Option<String>,
}

#[derive(Deserialize)]
struct Node {
    #[serde(default)]
    message: Option<Msg>,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    children: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Msg {
    #[serde(default)]
    id: Option<String>,
    author: Author,
    #[serde(default)]
    create_time: Option<f64>,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    metadata: Option<Meta>,
    #[serde(default)]
    recipient: Option<String>,
}

#[derive(Deserialize)]
struct Author {
    role: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    model_slug: Option<String>,
    #[serde(default)]
    is_visually_hidden_from_conversation: Option<bool>,
}

impl Reader for ChatGpt {
    fn name(&self) -> &'static str {
        "chatgpt"
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

/// The text of a message's content, and whether the content object must be
/// kept because the text alone does not say everything.
fn content_text(c: &Value) -> (String, bool) {
    let ct = c
        .get("content_type")
        .and_then(Value::as_str)
        .unwrap_or("text");
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let join = |v: Vec<String>| {
        v.into_iter()
            .filter(|x| !x.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    match ct {
        "text" | "multimodal_text" => {
            let mut keep = false;
            let parts: Vec<String> = c
                .get("parts")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|p| match p {
                            Value::String(t) => Some(t.clone()),
                            Value::Null => None,
                            other => {
                                keep = true;
                                other.get("text").and_then(Value::as_str).map(str::to_owned)
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            (parts.join("\n"), keep)
        }
        "code" | "execution_output" => (s("text"), false),
        "system_error" => (join(vec![s("name"), s("text")]), false),
        "reasoning_recap" => (s("content"), false),
        "thoughts" => {
            let t = c
                .get("thoughts")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|t| {
                            let f = |k| t.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                            join(vec![f("summary"), f("content")])
                        })
                        .collect()
                })
                .unwrap_or_default();
            (join(t), true)
        }
        "user_editable_context" => (join(vec![s("user_profile"), s("user_instructions")]), false),
        "tether_quote" => (join(vec![s("title"), s("url"), s("text")]), true),
        "tether_browsing_display" => (join(vec![s("result"), s("summary")]), true),
        _ => (join(strings(c)), true),
    }
}

/// Every string in a JSON value except `content_type`, depth first, without
/// recursion (the value is at most 128 levels deep anyway).
fn strings(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => stack.extend(a.iter().rev()),
            Value::Object(o) => stack.extend(
                o.iter()
                    .filter(|(k, _)| k.as_str() != "content_type")
                    .map(|(_, v)| v)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev(),
            ),
            _ => {}
        }
    }
    out
}

/// The message a node becomes, or `None` when it holds no text.
fn message(m: &Msg, default_model: Option<&str>) -> Option<Message> {
    let ct = m
        .content
        .get("content_type")
        .and_then(Value::as_str)
        .unwrap_or("text")
        .to_owned();
    let (text, keep_content) = content_text(&m.content);
    if text.trim().is_empty() && !keep_content {
        return None;
    }
    let meta = m.metadata.as_ref();
    let hidden = meta
        .and_then(|x| x.is_visually_hidden_from_conversation)
        .unwrap_or(false);
    let recipient = m.recipient.as_deref().filter(|r| *r != "all");
    let (role, speaker) = match (m.author.role.as_str(), ct.as_str()) {
        ("user", "user_editable_context") => (Role::System, "user_editable_context".to_owned()),
        ("user", _) => (Role::User, "user".to_owned()),
        ("system", _) => (Role::System, "system".to_owned()),
        ("assistant", _) if recipient.is_some() => (Role::ToolCall, "assistant".to_owned()),
        ("assistant", _) => (Role::Assistant, "assistant".to_owned()),
        ("tool", _) => (
            Role::Tool,
            m.author.name.clone().unwrap_or_else(|| "tool".into()),
        ),
        (other, _) => (Role::User, other.to_owned()),
    };
    let model = if matches!(role, Role::Assistant | Role::ToolCall) {
        meta.and_then(|x| x.model_slug.clone())
            .or_else(|| default_model.map(str::to_owned))
    } else {
        None
    };
    let mut msg = Message::new(role, speaker, text)
        .at(secs_to_millis(m.create_time))
        .with_model(model)
        .with_extra("id", json!(m.id));
    if ct != "text" {
        msg = msg.with_extra("content_type", json!(ct));
    }
    if keep_content {
        msg = msg.with_extra("content", m.content.clone());
    }
    if hidden {
        msg = msg.with_extra("hidden", json!(true));
    }
    if let Some(r) = recipient {
        msg.to = Some(r.to_owned());
        msg = msg.with_extra("recipient", json!(r));
    }
    Some(msg)
}

/// Refuses a mapping whose `parent` links point outside it or loop.
fn check_parents(file: &str, i: usize, c: &Conv) -> Result<()> {
    let ids: Vec<&String> = c.mapping.keys().collect();
    let index: HashMap<&str, usize> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| (id.as_str(), k))
        .collect();
    let mut parent = Vec::with_capacity(ids.len());
    for (id, n) in &c.mapping {
        let mut path = format!("$[{i}].mapping");
        crate::json::push_key(&mut path, id);
        match &n.parent {
            None => parent.push(None),
            Some(p) => match index.get(p.as_str()) {
                Some(&k) => parent.push(Some(k)),
                None => {
                    return Err(Error::new(
                        file,
                        "parent-dangling",
                        format!("message {id:?} has parent {p:?}, which is not in the mapping"),
                    )
                    .with_path(format!("{path}.parent")));
                }
            },
        }
        for ch in n.children.iter().flatten() {
            if !index.contains_key(ch.as_str()) {
                return Err(Error::new(
                    file,
                    "child-dangling",
                    format!("message {id:?} lists child {ch:?}, which is not in the mapping"),
                )
                .with_path(format!("{path}.children")));
            }
        }
    }
    if let Some(cycle) = crate::tree::find_cycle(&parent) {
        let names: Vec<String> = cycle.iter().map(|&k| ids[k].clone()).collect();
        return Err(Error::new(
            file,
            "parent-cycle",
            format!(
                "the parent links form a cycle: {} (each message's parent, in turn)",
                crate::tree::show_cycle(&names)
            ),
        )
        .with_path(format!("$[{i}].mapping")));
    }
    Ok(())
}

fn conversation(file: &str, i: usize, c: Conv) -> Result<Conversation> {
    check_parents(file, i, &c)?;
    let default_model = c.default_model_slug.as_deref();
    // Roots: nodes without a parent, in key order.
    let mut roots: Vec<&String> = c
        .mapping
        .iter()
        .filter(|(_, n)| n.parent.is_none())
        .map(|(k, _)| k)
        .collect();
    roots.reverse();
    let mut messages: Vec<Message> = Vec::new();
    let mut kept_at: HashMap<&str, Option<usize>> = HashMap::new();
    let mut seen: HashSet<&str> = HashSet::new();
    // Depth first, children in order; (node id, nearest kept ancestor).
    let mut stack: Vec<(&String, Option<usize>)> = roots.into_iter().map(|r| (r, None)).collect();
    while let Some((id, up)) = stack.pop() {
        if !seen.insert(id.as_str()) {
            continue;
        }
        let Some(node) = c.mapping.get(id) else {
            continue;
        };
        let here = match node
            .message
            .as_ref()
            .and_then(|m| message(m, default_model))
        {
            Some(mut m) => {
                m.parent = up;
                messages.push(m);
                Some(messages.len() - 1)
            }
            None => up,
        };
        kept_at.insert(id.as_str(), here);
        if let Some(ch) = &node.children {
            for k in ch.iter().rev() {
                if c.mapping.contains_key(k) {
                    stack.push((k, here));
                }
            }
        }
    }
    if let Some(lost) = c.mapping.keys().find(|k| !seen.contains(k.as_str())) {
        let parent = c
            .mapping
            .get(lost)
            .and_then(|n| n.parent.clone())
            .unwrap_or_default();
        let mut path = format!("$[{i}].mapping");
        crate::json::push_key(&mut path, lost);
        return Err(Error::new(
            file,
            "child-missing",
            format!(
                "message {lost:?} is not reachable: its parent {parent:?} does not list it in `children`"
            ),
        )
        .with_path(path));
    }
    let current = c
        .current_node
        .as_deref()
        .and_then(|n| kept_at.get(n).copied().flatten());
    let timelines = crate::model::leaf_timelines(&messages, current);
    let mut meta = Map::new();
    if let Some(m) = c.default_model_slug.clone() {
        meta.insert("default_model_slug".into(), json!(m));
    }
    Ok(Conversation {
        id: c.conversation_id.or(c.id),
        title: c.title,
        agent: Some("chatgpt".into()),
        created_at: secs_to_millis(c.create_time),
        meta,
        messages,
        timelines,
    })
}
