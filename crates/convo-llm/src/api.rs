//! What the proxy knows about each upstream API: which one a path is (or
//! a recorded body, by its shape: [`request_api`], [`response_api`],
//! [`stream_api`]), the model of a call (its tokens: [`crate::usage`]),
//! the answer assembled from a stream, the user's new input, and the
//! conversation a request carries (for threading by content).
//!
//! Everything here reads JSON leniently: a field that is missing or of an
//! unexpected type yields `None`, never an error; the bytes are forwarded
//! and recorded whatever they are.

use serde_json::{Map, Value, json};

pub use crate::wire::{Api, assemble, messages};

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

/// Which API a request body speaks, from the request node's diagnostics
/// (`api`, as the proxy records it) or the body's shape.
pub fn request_api(diag: &Value, req: &Value) -> Api {
    match diag.get("api").and_then(Value::as_str).map(Api::from_name) {
        Some(a) if a.is_conversation() => a,
        _ if req.get("input").is_some() => Api::Responses,
        _ if req.get("messages").is_some()
            && (req.get("system").is_some()
                || req.get("max_tokens").is_some()
                    && req.get("max_completion_tokens").is_none()
                    && anthropic_blocks(req)) =>
        {
            Api::Messages
        }
        _ if req.get("messages").is_some() => Api::Chat,
        _ => Api::Other,
    }
}

fn anthropic_blocks(req: &Value) -> bool {
    req.get("messages")
        .and_then(Value::as_array)
        .is_some_and(|ms| {
            ms.iter().any(|m| {
                m.get("content")
                    .and_then(Value::as_array)
                    .is_some_and(|bs| {
                        bs.iter().any(|b| {
                            matches!(
                                b.get("type").and_then(Value::as_str),
                                Some("tool_use" | "tool_result" | "image" | "thinking")
                            )
                        })
                    })
            })
        })
}

/// Which API a (non-streamed or assembled) response body is from.
pub fn response_api(v: &Value) -> Api {
    if v.get("choices").is_some() {
        Api::Chat
    } else if v.get("object").and_then(Value::as_str) == Some("response")
        || v.get("output").is_some_and(Value::is_array)
    {
        Api::Responses
    } else if v.get("type").and_then(Value::as_str) == Some("message")
        || (v.get("content").is_some_and(Value::is_array) && v.get("role").is_some())
    {
        Api::Messages
    } else {
        Api::Other
    }
}

/// Whether bytes look like a Server-Sent Events stream.
pub fn is_sse(t: &str) -> bool {
    let t = t.trim_start();
    t.starts_with("data:") || t.starts_with("event:") || t.starts_with(": ")
}

/// The API of a recorded stream, from its events.
pub fn stream_api(t: &str) -> Api {
    if t.contains("\"message_start\"") {
        Api::Messages
    } else if t.contains("\"response.") {
        Api::Responses
    } else {
        Api::Chat
    }
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

/// A message's role (`user`, `assistant`, …).
pub fn role(m: &Value) -> Option<&str> {
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
    let mut c = v.clone();
    canonicalize(&mut c);
    c
}

/// [`canonical_value`] in place: a request read only to be compared is
/// not copied.
pub fn canonicalize(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.retain(|k, x| {
                !(x.is_null()
                    || k == "cache_control"
                    || (k == "annotations" && x.as_array().is_some_and(Vec::is_empty)))
            });
            for (k, x) in o.iter_mut() {
                match k.as_str() {
                    "content" if x.is_array() => match only_text(Some(x)) {
                        Some(t) => *x = Value::String(t),
                        None => canonicalize(x),
                    },
                    "arguments" if x.is_string() => *x = parsed_arguments(x),
                    _ => canonicalize(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(canonicalize),
        _ => {}
    }
}

/// A title a person can read for a conversation: the first human text of
/// its user messages, skipping blocks a client adds around it
/// (`<system-reminder>…</system-reminder>` from Claude Code,
/// `<environment_context>…`, `<user_instructions>…` from Codex, any
/// message that is only such a block).
pub fn human_text(msgs: &[Value]) -> Option<String> {
    first_human(msgs).map(|(_, t)| t)
}

/// The first message with human text ([`human_text`]): its index and that text.
pub fn first_human(msgs: &[Value]) -> Option<(usize, String)> {
    for (i, m) in msgs.iter().enumerate() {
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
                return Some((i, t.trim().to_owned()));
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
        assert_eq!(
            crate::usage::raw(Api::Chat, Some(&v)).unwrap()["total_tokens"],
            9
        );
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
