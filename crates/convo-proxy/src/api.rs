//! What the proxy knows about each upstream API: which one a path is, the
//! model and token usage of a call, the answer assembled from a stream,
//! the user's new input, and the conversation a request carries (for
//! threading by content).
//!
//! Everything here reads JSON leniently: a field that is missing or of an
//! unexpected type yields `None`, never an error; the bytes are forwarded
//! and recorded whatever they are.

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

/// The request body as JSON, when it is JSON.
pub fn parse(body: &[u8]) -> Option<Value> {
    if body.is_empty() {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// Whether the client asked for a stream.
pub fn wants_stream(req: Option<&Value>) -> bool {
    req.and_then(|v| v.get("stream"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// For a streamed chat completion whose client did not ask for usage, the
/// body to send upstream with `stream_options.include_usage: true` added
/// (so usage is recorded for streams too); `None` when nothing changes.
pub fn add_include_usage(api: Api, req: Option<&Value>) -> Option<Vec<u8>> {
    if api != Api::Chat || !wants_stream(req) {
        return None;
    }
    let mut v = req?.clone();
    let obj = v.as_object_mut()?;
    let opts = obj
        .entry("stream_options")
        .or_insert_with(|| Value::Object(Map::new()));
    if opts.is_null() {
        *opts = Value::Object(Map::new());
    }
    let opts = opts.as_object_mut()?;
    if opts.get("include_usage").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    opts.insert("include_usage".into(), Value::Bool(true));
    serde_json::to_vec(&v).ok()
}

/// The model a request or response names.
pub fn model(v: Option<&Value>) -> Option<String> {
    v?.get("model")?.as_str().map(str::to_owned)
}

/// Token usage in a (non-streamed or assembled) response.
pub fn usage(api: Api, resp: Option<&Value>) -> Option<Value> {
    let r = resp?;
    let u = match api {
        Api::Responses => r.get("usage").or_else(|| r.get("response")?.get("usage")),
        _ => r.get("usage"),
    }?;
    (!u.is_null()).then(|| u.clone())
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

/// The assistant's message in a (non-streamed or assembled) response, in
/// the request's message shape: what a client sends back next turn.
pub fn reply(api: Api, resp: Option<&Value>) -> Option<Value> {
    let r = resp?;
    match api {
        Api::Chat => r.get("choices")?.get(0)?.get("message").cloned(),
        Api::Messages => Some(json!({
            "role": r.get("role").cloned().unwrap_or(json!("assistant")),
            "content": r.get("content").cloned().unwrap_or(json!([])),
        })),
        Api::Responses => r.get("output").cloned(),
        _ => None,
    }
}

/// What a person reads as the answer: its text when it is only text,
/// otherwise the message as JSON.
pub fn reply_text(api: Api, msg: &Value) -> Vec<u8> {
    let text = match api {
        Api::Chat => {
            let no_tools = msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
            msg.get("content")
                .and_then(Value::as_str)
                .filter(|_| no_tools)
                .map(str::to_owned)
        }
        Api::Messages => only_text(msg.get("content")),
        Api::Responses => {
            let items = msg.as_array();
            let texts: Option<Vec<String>> = items.map(|items| {
                items
                    .iter()
                    .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
                    .filter_map(|i| only_text(i.get("content")))
                    .collect()
            });
            texts.filter(|t| !t.is_empty()).map(|t| t.join("\n"))
        }
        _ => None,
    };
    text.map(String::into_bytes)
        .unwrap_or_else(|| serde_json::to_vec(msg).unwrap_or_default())
}

/// The text of content that is a string or a list of only text blocks.
fn only_text(content: Option<&Value>) -> Option<String> {
    match content? {
        Value::String(s) => Some(s.clone()),
        Value::Array(blocks) => {
            let mut out = String::new();
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text" | "output_text" | "input_text") => {
                        out.push_str(b.get("text")?.as_str()?);
                    }
                    _ => return None,
                }
            }
            Some(out)
        }
        _ => None,
    }
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

/// The user's new input: the messages after the last assistant message
/// (system prompts left out). One user message of plain text is recorded
/// as that text; anything else as a JSON array of the messages.
pub fn new_input(msgs: &[Value]) -> Vec<u8> {
    let start = msgs
        .iter()
        .rposition(|m| role(m) == Some("assistant") || is_output_item(m))
        .map_or(0, |i| i + 1);
    let tail: Vec<&Value> = msgs[start..]
        .iter()
        .filter(|m| !matches!(role(m), Some("system" | "developer")))
        .collect();
    if let [one] = tail.as_slice()
        && role(one) == Some("user")
        && let Some(t) = only_text(one.get("content"))
    {
        return t.into_bytes();
    }
    serde_json::to_vec(&tail).unwrap_or_default()
}

fn role(m: &Value) -> Option<&str> {
    m.get("role")?.as_str()
}

/// Responses API output items sent back as input (`function_call`, …).
fn is_output_item(m: &Value) -> bool {
    matches!(
        m.get("type").and_then(Value::as_str),
        Some("function_call" | "reasoning")
    )
}

/// A message reduced to what identifies it in a conversation, so that a
/// client re-sending an answer it received (with `null`s dropped, fields
/// re-ordered, an SDK's extra keys, tool arguments re-serialized, text
/// parts instead of a string) still matches the recorded one: role,
/// content text (or blocks without cache hints), tool calls as (id, name,
/// parsed arguments), tool-call id. A Responses API `"type": "message"`
/// is implied by its role and left out.
pub fn normalize(m: &Value) -> Value {
    let mut out = Map::new();
    if let Some(r) = role(m) {
        out.insert("role".into(), json!(r));
    }
    if let Some(t) = m.get("type").and_then(Value::as_str)
        && !(t == "message" && role(m).is_some())
    {
        out.insert("type".into(), json!(t));
    }
    out.insert("content".into(), normalize_content(m.get("content")));
    if let Some(calls) = m.get("tool_calls").and_then(Value::as_array)
        && !calls.is_empty()
    {
        let calls: Vec<Value> = calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.get("id"),
                    "name": c.get("function").and_then(|f| f.get("name")),
                    "arguments": c.get("function").and_then(|f| f.get("arguments")).map(parsed_arguments),
                })
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    for key in ["tool_call_id", "call_id", "name", "output"] {
        if let Some(x) = m.get(key).filter(|x| !x.is_null()) {
            out.insert(key.into(), normalize_content(Some(x)));
        }
    }
    if let Some(a) = m.get("arguments").filter(|x| !x.is_null()) {
        out.insert("arguments".into(), parsed_arguments(a));
    }
    Value::Object(out)
}

/// Tool-call arguments as JSON when they are a JSON document in a string
/// (`{"city":"Paris"}` and `{"city": "Paris"}` are the same arguments).
pub fn parsed_arguments(a: &Value) -> Value {
    match a {
        Value::String(s) => serde_json::from_str::<Value>(s)
            .map(|v| canonical_value(&v))
            .unwrap_or_else(|_| a.clone()),
        other => canonical_value(other),
    }
}

/// Content as compared: text (a string or only text parts) as one
/// string, nothing as `""`, blocks normalized.
fn normalize_content(c: Option<&Value>) -> Value {
    match c {
        None | Some(Value::Null) => json!(""),
        Some(c) => match only_text(Some(c)) {
            Some(t) => json!(t),
            None => match c {
                Value::Array(blocks) => Value::Array(blocks.iter().map(normalize_block).collect()),
                other => other.clone(),
            },
        },
    }
}

fn normalize_block(b: &Value) -> Value {
    let Some(obj) = b.as_object() else {
        return b.clone();
    };
    let keep = [
        "type",
        "text",
        "id",
        "name",
        "input",
        "tool_use_id",
        "content",
        "is_error",
        "thinking",
        "source",
        "image_url",
    ];
    Value::Object(
        obj.iter()
            .filter(|(k, v)| keep.contains(&k.as_str()) && !v.is_null())
            .map(|(k, v)| {
                let v = match k.as_str() {
                    "content" => normalize_content(Some(v)),
                    "input" => parsed_arguments(v),
                    _ => v.clone(),
                };
                (k.clone(), v)
            })
            .collect(),
    )
}

/// A JSON value in the canonical form requests are compared in (by
/// replay and by the harness): `null` members and empty `annotations`
/// dropped, cache hints (`cache_control`) dropped, content that is only
/// text parts as one string, tool arguments that are a JSON document in
/// a string parsed. Key order and whitespace do not matter once the value
/// is serialized canonically (RFC 8785).
pub fn canonical_value(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, x) in o {
                match (k.as_str(), x) {
                    (_, Value::Null) | ("cache_control", _) => {}
                    ("annotations", Value::Array(a)) if a.is_empty() => {}
                    ("content", c @ Value::Array(_)) => {
                        let c = match only_text(Some(c)) {
                            Some(t) => json!(t),
                            None => canonical_value(c),
                        };
                        out.insert(k.clone(), c);
                    }
                    ("arguments", Value::String(_)) => {
                        out.insert(k.clone(), parsed_arguments(x));
                    }
                    _ => {
                        out.insert(k.clone(), canonical_value(x));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical_value).collect()),
        other => other.clone(),
    }
}

/// A title a person can read for a conversation: the first human text of
/// its user messages, skipping blocks a client adds around it
/// (`<system-reminder>…</system-reminder>` from Claude Code,
/// `<environment_context>…`, `<user_instructions>…` from Codex, any
/// message that is only such a block).
pub fn human_text(msgs: &[Value]) -> Option<String> {
    for m in msgs {
        if role(m) != Some("user") {
            continue;
        }
        let parts: Vec<&str> = match m.get("content") {
            Some(Value::String(s)) => vec![s.as_str()],
            Some(Value::Array(blocks)) => blocks
                .iter()
                .filter(|b| {
                    matches!(
                        b.get("type").and_then(Value::as_str),
                        Some("text" | "input_text")
                    )
                })
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
            _ => vec![],
        };
        for p in parts {
            let t = strip_wrapped_blocks(p);
            if !t.trim().is_empty() {
                return Some(t.trim().to_owned());
            }
        }
    }
    None
}

/// Text without the `<tag>…</tag>` blocks it starts with or that make up
/// whole lines of it.
fn strip_wrapped_blocks(text: &str) -> String {
    let mut rest = text;
    let mut out = String::new();
    loop {
        let t = rest.trim_start();
        let Some(after) = t.strip_prefix('<') else {
            out.push_str(t);
            break;
        };
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        let close = format!("</{name}>");
        match (
            name.is_empty(),
            after[name.len()..].starts_with('>'),
            t.find(&close),
        ) {
            (false, true, Some(end)) => rest = &t[end + close.len()..],
            _ => {
                out.push_str(t);
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_stream_with_tool_call_deltas_assembles() {
        let raw = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"total_tokens\":9}}\n\n",
            "data: [DONE]\n\n"
        );
        let v = assemble(Api::Chat, raw.as_bytes()).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], "{\"a\":1}");
        assert_eq!(call["function"]["name"], "get");
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(usage(Api::Chat, Some(&v)).unwrap()["total_tokens"], 9);
    }

    #[test]
    fn anthropic_stream_assembles_text_and_tool_use() {
        let raw = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"usage\":{\"input_tokens\":5}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"tu\",\"name\":\"f\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"x\\\":2}\"}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":7}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        let v = assemble(Api::Messages, raw.as_bytes()).unwrap();
        assert_eq!(v["content"][0]["text"], "Hi");
        assert_eq!(v["content"][1]["input"]["x"], 2);
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(v["usage"]["input_tokens"], 5);
        assert_eq!(v["usage"]["output_tokens"], 7);
    }

    #[test]
    fn include_usage_is_added_only_for_streams_that_lack_it() {
        let s = json!({"model":"m","stream":true,"messages":[]});
        let added: Value =
            serde_json::from_slice(&add_include_usage(Api::Chat, Some(&s)).unwrap()).unwrap();
        assert_eq!(added["stream_options"]["include_usage"], true);
        let asked = json!({"stream":true,"stream_options":{"include_usage":true}});
        assert!(add_include_usage(Api::Chat, Some(&asked)).is_none());
        assert!(add_include_usage(Api::Chat, Some(&json!({"stream":false}))).is_none());
    }

    #[test]
    fn new_input_is_the_text_after_the_last_answer() {
        let msgs = vec![
            json!({"role":"system","content":"be brief"}),
            json!({"role":"user","content":"hi"}),
            json!({"role":"assistant","content":"hello"}),
            json!({"role":"user","content":[{"type":"text","text":"more"}]}),
        ];
        assert_eq!(new_input(&msgs), b"more");
        assert_eq!(new_input(&msgs[..2]), b"hi");
    }

    #[test]
    fn normalized_answers_ignore_nulls_and_sdk_extras() {
        let recorded = json!({"role":"assistant","content":"hi","refusal":null,"annotations":[]});
        let resent = json!({"content":"hi","role":"assistant"});
        assert_eq!(normalize(&recorded), normalize(&resent));
        // Re-serialized tool arguments and text parts are the same message.
        let sent = json!({"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
            "function":{"name":"weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}}]});
        let back = json!({"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
            "function":{"name":"weather","arguments":"{\"unit\": \"c\", \"city\": \"Paris\"}"}}]});
        assert_eq!(normalize(&sent), normalize(&back));
        let parts = json!({"role":"user","content":[{"type":"text","text":"hi"}]});
        assert_eq!(
            normalize(&parts),
            normalize(&json!({"role":"user","content":"hi"}))
        );
        let other = json!({"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"weather","arguments":"{\"city\":\"Rome\"}"}}]});
        assert_ne!(normalize(&sent), normalize(&other));
    }

    #[test]
    fn titles_skip_what_clients_add_around_the_human_text() {
        let claude = vec![json!({"role":"user","content":[
            {"type":"text","text":"<system-reminder>\nAs you answer…\n</system-reminder>"},
            {"type":"text","text":"Fix the failing test\nplease"}]})];
        assert_eq!(human_text(&claude).unwrap(), "Fix the failing test\nplease");
        let codex = vec![
            json!({"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]}),
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":"<user_instructions>\nx\n</user_instructions>"}]}),
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>\n  <cwd>/w</cwd>\n</environment_context>"}]}),
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":"List the files"}]}),
        ];
        assert_eq!(human_text(&codex).unwrap(), "List the files");
        assert_eq!(
            human_text(&[json!({"role":"user","content":"<b>bold</b> move"})]).unwrap(),
            "move"
        );
    }
}
