//! The LLM APIs a recorded call speaks (OpenAI chat completions and
//! Responses, Anthropic Messages): which one a path is, the request's
//! messages, and the answer assembled from a stream in the shape of the
//! non-streamed response. Shared by the proxy (which records calls) and
//! the web view (which shows them); read leniently: a field missing or of
//! an unexpected type yields `None`, never an error.

use crate::sse;
use serde_json::{Map, Value, json};

/// The API a call speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// OpenAI `POST /v1/responses`.
    Responses,
    /// OpenAI `POST /v1/embeddings`.
    Embeddings,
    /// `GET /v1/models` (either vendor).
    Models,
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Anything else under `/v1/`, passed through as is.
    Other,
}

impl Api {
    /// Classifies a call by method and the path after `/v1/`.
    pub fn classify(method: &str, rest: &str) -> Api {
        let rest = rest.trim_end_matches('/');
        match (method, rest) {
            ("POST", "chat/completions") => Api::Chat,
            ("POST", "responses") => Api::Responses,
            ("POST", "embeddings") => Api::Embeddings,
            ("POST", "messages") => Api::Messages,
            ("GET", "models") => Api::Models,
            _ => Api::Other,
        }
    }

    /// The name recorded in diagnostics (`openai.chat`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "openai.chat",
            Api::Responses => "openai.responses",
            Api::Embeddings => "openai.embeddings",
            Api::Models => "models",
            Api::Messages => "anthropic.messages",
            Api::Other => "other",
        }
    }

    /// The inverse of [`Api::as_str`].
    pub fn from_name(s: &str) -> Api {
        match s {
            "openai.chat" => Api::Chat,
            "openai.responses" => Api::Responses,
            "openai.embeddings" => Api::Embeddings,
            "models" => Api::Models,
            "anthropic.messages" => Api::Messages,
            _ => Api::Other,
        }
    }

    /// Whether a call of this API is a conversation turn (has messages in
    /// and an assistant's answer out).
    pub fn is_conversation(self) -> bool {
        matches!(self, Api::Chat | Api::Messages | Api::Responses)
    }
}

/// The answer assembled from a whole stream, in the shape of the
/// non-streamed response (a `chat.completion`, a Messages `message`, a
/// Responses `response`); `None` when the API has no stream shape.
pub fn assemble(api: Api, raw: &[u8]) -> Option<Value> {
    match api {
        Api::Chat => Some(assemble_chat(raw)),
        Api::Messages => Some(assemble_messages(raw)),
        Api::Responses => sse::events(raw).into_iter().rev().find_map(|e| {
            let v: Value = serde_json::from_str(&e.data).ok()?;
            let t = v.get("type")?.as_str()?;
            matches!(
                t,
                "response.completed" | "response.failed" | "response.incomplete"
            )
            .then(|| v.get("response").cloned())
            .flatten()
        }),
        _ => None,
    }
}

fn append_str(slot: &mut Value, more: &str) {
    match slot {
        Value::String(s) => s.push_str(more),
        _ => *slot = Value::String(more.to_owned()),
    }
}

fn assemble_chat(raw: &[u8]) -> Value {
    let mut out = Map::new();
    // choice index -> (content, tool calls by index, finish_reason, role)
    let mut choices: std::collections::BTreeMap<u64, Map<String, Value>> = Default::default();
    let mut tools: std::collections::BTreeMap<(u64, u64), Map<String, Value>> = Default::default();
    for ev in sse::events(raw) {
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            continue;
        };
        for key in ["id", "model", "created", "system_fingerprint"] {
            if let Some(x) = v.get(key).filter(|x| !x.is_null()) {
                out.entry(key).or_insert_with(|| x.clone());
            }
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            out.insert("usage".into(), u.clone());
        }
        for c in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let i = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            let ch = choices.entry(i).or_default();
            if let Some(f) = c.get("finish_reason").filter(|f| !f.is_null()) {
                ch.insert("finish_reason".into(), f.clone());
            }
            let Some(d) = c.get("delta") else { continue };
            if let Some(r) = d.get("role").and_then(Value::as_str) {
                ch.insert("role".into(), json!(r));
            }
            for key in ["content", "refusal", "reasoning_content", "reasoning"] {
                if let Some(s) = d.get(key).and_then(Value::as_str) {
                    append_str(ch.entry(key).or_insert(Value::Null), s);
                }
            }
            for tc in d
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let ti = tc.get("index").and_then(Value::as_u64).unwrap_or(0);
                let t = tools.entry((i, ti)).or_default();
                for key in ["id", "type"] {
                    if let Some(x) = tc.get(key).and_then(Value::as_str) {
                        t.insert(key.into(), json!(x));
                    }
                }
                if let Some(f) = tc.get("function") {
                    let fun = t
                        .entry("function")
                        .or_insert_with(|| json!({"name": "", "arguments": ""}));
                    for key in ["name", "arguments"] {
                        if let Some(s) = f.get(key).and_then(Value::as_str)
                            && let Some(slot) = fun.get_mut(key)
                        {
                            append_str(slot, s);
                        }
                    }
                }
            }
        }
    }
    let mut arr = Vec::new();
    for (i, ch) in choices {
        let mut msg = Map::new();
        msg.insert(
            "role".into(),
            ch.get("role").cloned().unwrap_or(json!("assistant")),
        );
        msg.insert(
            "content".into(),
            ch.get("content").cloned().unwrap_or(Value::Null),
        );
        for key in ["refusal", "reasoning_content", "reasoning"] {
            if let Some(x) = ch.get(key) {
                msg.insert(key.into(), x.clone());
            }
        }
        let calls: Vec<Value> = tools
            .iter()
            .filter(|((ci, _), _)| *ci == i)
            .map(|(_, t)| Value::Object(t.clone()))
            .collect();
        if !calls.is_empty() {
            msg.insert("tool_calls".into(), Value::Array(calls));
        }
        arr.push(json!({
            "index": i,
            "message": msg,
            "finish_reason": ch.get("finish_reason").cloned().unwrap_or(Value::Null),
        }));
    }
    out.insert("object".into(), json!("chat.completion"));
    out.insert("choices".into(), Value::Array(arr));
    Value::Object(out)
}

fn assemble_messages(raw: &[u8]) -> Value {
    let mut msg = Map::new();
    let mut blocks: std::collections::BTreeMap<u64, Map<String, Value>> = Default::default();
    let mut partial_json: std::collections::BTreeMap<u64, String> = Default::default();
    for ev in sse::events(raw) {
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            continue;
        };
        let idx = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if let Some(Value::Object(m)) = v.get("message") {
                    msg = m.clone();
                }
            }
            "content_block_start" => {
                if let Some(Value::Object(b)) = v.get("content_block") {
                    blocks.insert(idx, b.clone());
                }
            }
            "content_block_delta" => {
                let Some(d) = v.get("delta") else { continue };
                let b = blocks.entry(idx).or_default();
                match d.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" => {
                        if let Some(s) = d.get("text").and_then(Value::as_str) {
                            append_str(b.entry("text").or_insert(json!("")), s);
                        }
                    }
                    "input_json_delta" => {
                        if let Some(s) = d.get("partial_json").and_then(Value::as_str) {
                            partial_json.entry(idx).or_default().push_str(s);
                        }
                    }
                    "thinking_delta" => {
                        if let Some(s) = d.get("thinking").and_then(Value::as_str) {
                            append_str(b.entry("thinking").or_insert(json!("")), s);
                        }
                    }
                    "signature_delta" => {
                        if let Some(s) = d.get("signature").and_then(Value::as_str) {
                            append_str(b.entry("signature").or_insert(json!("")), s);
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(Value::Object(d)) = v.get("delta") {
                    for (k, x) in d {
                        msg.insert(k.clone(), x.clone());
                    }
                }
                if let Some(Value::Object(u)) = v.get("usage") {
                    let slot = msg.entry("usage").or_insert_with(|| json!({}));
                    if let Some(m) = slot.as_object_mut() {
                        for (k, x) in u {
                            m.insert(k.clone(), x.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    for (idx, text) in partial_json {
        if let Some(b) = blocks.get_mut(&idx) {
            let input = if text.is_empty() {
                json!({})
            } else {
                serde_json::from_str(&text).unwrap_or(Value::String(text))
            };
            b.insert("input".into(), input);
        }
    }
    msg.insert(
        "content".into(),
        Value::Array(blocks.into_values().map(Value::Object).collect()),
    );
    Value::Object(msg)
}

/// The request's messages (system prompt first, as a message), when the
/// API has a message list.
pub fn messages(api: Api, req: Option<&Value>) -> Option<Vec<Value>> {
    let r = req?;
    match api {
        Api::Chat => r.get("messages")?.as_array().cloned(),
        Api::Messages => {
            let mut out = Vec::new();
            if let Some(s) = r.get("system").filter(|s| !s.is_null()) {
                out.push(json!({"role": "system", "content": s}));
            }
            out.extend(r.get("messages")?.as_array()?.iter().cloned());
            Some(out)
        }
        Api::Responses => match r.get("input")? {
            Value::String(s) => Some(vec![json!({"role": "user", "content": s})]),
            Value::Array(items) => Some(items.clone()),
            _ => None,
        },
        _ => None,
    }
}
