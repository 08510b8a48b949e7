//! Replaying a session received as telemetry: each LLM call's exchange
//! rebuilt from the recorded messages.
//!
//! A session the OTLP receiver wrote holds the conversation, one node per
//! message, not the HTTP exchanges (telemetry does not carry them). To
//! answer an SDK that sends the same conversation again
//! (`convo proxy --replay`), each call is rebuilt from the timeline:
//!
//! - **Which calls** ([`calls`]): every answer on the timeline is one call:
//!   an assistant message, or the run of tool calls one answer made. The
//!   call was sent everything before it (the history) and answered with it.
//! - **How a request is matched** ([`canonical`], [`received`]): not on
//!   bytes, which telemetry did not keep, but on the conversation and the
//!   model the client asked for, in one neutral form whichever API the
//!   client calls (chat completions, Responses, Anthropic Messages): each
//!   message its role and text, a tool call its tool name and parsed
//!   arguments. Tool call ids, parameters (`temperature`, `tools`…),
//!   `stream` and the client's wire format do not count.
//! - **What answers** ([`answer`]): the recorded answer in the wire format
//!   the client called: a chat completion (a `chat.completion.chunk`
//!   stream ending in `[DONE]` when it asked for `stream: true`, with the
//!   usage chunk when it asked for `stream_options.include_usage`), a
//!   Responses `response` or an Anthropic `message` (not streamed). The
//!   model, usage and finish reason are the recorded ones; the tool call
//!   ids the recorded ones when the emitter kept them (else
//!   `call_convo_N_K`, which the client then sends back and which do not
//!   count when matching). Where the emitter captured the whole answer
//!   (OpenInference's `output.value`), a non-streamed chat call gets it
//!   back as captured.
//!
//! The request model is the call's `gen_ai.request.model` (or the
//! dialect's equivalent), read from the call's diagnostics (the last node
//! a call wrote carries them; an answer stored by a later call that resent
//! it takes that call's), whole: what a node leaves to its kept export
//! body is read back first (`super::ingest::resolve_kept`, which replay
//! calls).

use crate::wire::Api;
use convo_formats::model::{Message, Role};
use serde_json::{Value, json};

/// One LLM call rebuilt from a timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Rebuilt {
    /// Its place among the timeline's calls (from 0).
    pub index: usize,
    /// Where its answer starts, as an index into the messages given.
    pub at: usize,
    /// The answer: one assistant message, or the tool calls of one answer.
    pub answer: Vec<Message>,
    /// The model the client asked for.
    pub model: Option<String>,
    /// The model that answered.
    pub answered_by: Option<String>,
    /// Tokens (`input_tokens`, `output_tokens`), when recorded.
    pub usage: Option<Value>,
    /// The history and model in the neutral form requests are matched by.
    pub canonical: Value,
    /// The whole answer as the emitter captured it (OpenInference's
    /// `output.value`, a `chat.completion`), given back as is to a
    /// chat-completions call that does not stream.
    pub whole: Option<String>,
}

/// The calls of a timeline's messages (read back from its nodes, oldest
/// first): one per answer received as telemetry (`extra.otel`).
pub fn calls(messages: &[Message]) -> Vec<Rebuilt> {
    let mut out: Vec<Rebuilt> = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        let from_otel = m.extra.contains_key("otel");
        let end = match m.role {
            Role::Assistant => i + 1,
            Role::ToolCall => {
                let mut j = i + 1;
                while j < messages.len() && messages[j].role == Role::ToolCall {
                    j += 1;
                }
                j
            }
            _ => {
                i += 1;
                continue;
            }
        };
        if !from_otel {
            i = end;
            continue;
        }
        let info = messages[end - 1..]
            .iter()
            .find_map(|m| m.extra.get("otel")?.get("call").cloned());
        let own = messages[end - 1]
            .extra
            .get("otel")
            .and_then(|o| o.get("call"))
            .is_some();
        let answered_by = messages[i].model.clone();
        let model = info
            .as_ref()
            .and_then(request_model)
            .or_else(|| answered_by.clone());
        let usage = own.then(|| info.as_ref()?.get("usage").cloned()).flatten();
        let whole = own
            .then(|| {
                let attrs = info.as_ref()?.get("attributes")?;
                let text = attrs.get("output.value")?.as_str()?;
                let v: Value = serde_json::from_str(text).ok()?;
                (v.get("object").and_then(Value::as_str) == Some("chat.completion"))
                    .then(|| text.to_owned())
            })
            .flatten();
        let history = &messages[..i];
        out.push(Rebuilt {
            index: out.len(),
            at: i,
            answer: messages[i..end].to_vec(),
            canonical: canonical(history, model.as_deref()),
            model,
            answered_by,
            usage,
            whole,
        });
        i = end;
    }
    out
}

/// The model a call asked for, from its diagnostics (`extra.otel.call`).
fn request_model(call: &Value) -> Option<String> {
    let attrs = call.get("attributes")?;
    let s = |k: &str| {
        attrs
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    s("gen_ai.request.model")
        .or_else(|| {
            let p = attrs.get("llm.invocation_parameters")?;
            let p: Value = match p {
                Value::String(t) => serde_json::from_str(t).ok()?,
                other => other.clone(),
            };
            p.get("model")?.as_str().map(str::to_owned)
        })
        .or_else(|| s("ai.model.id"))
        .or_else(|| s("llm.model_name"))
}

/// The neutral form of a message list and model (what requests are
/// matched by).
pub fn canonical(history: &[Message], model: Option<&str>) -> Value {
    let messages: Vec<Value> = history.iter().map(neutral_message).collect();
    json!({"conversation": messages, "model": model})
}

fn neutral_message(m: &Message) -> Value {
    match m.role {
        Role::ToolCall => tool_call(
            m.to.as_deref().unwrap_or("tool"),
            arguments(&Value::String(m.text.clone())),
        ),
        r => json!({"role": r.as_str(), "text": m.text}),
    }
}

/// Tool-call arguments as JSON: a JSON text parsed, anything else as is.
fn arguments(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        Value::Null => json!({}),
        other => other.clone(),
    }
}

/// The text of a content value: a string, or the text parts of an array
/// joined with newlines (as the dialect readers join them).
fn content_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                    Some("text" | "input_text" | "output_text") | None => {
                        o.get("text").and_then(Value::as_str).map(str::to_owned)
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn item(role: &str, text: String) -> Value {
    json!({"role": role, "text": text})
}

fn role_of(r: &str) -> &'static str {
    match r {
        "system" | "developer" => "system",
        "assistant" | "model" => "assistant",
        "tool" | "function" => "tool",
        _ => "user",
    }
}

/// The neutral form of a received request (`rest`: its path after
/// `/v1/`), comparable with [`canonical`]; for a call that is not a
/// conversation (or not JSON), its method and path alone, which match no
/// rebuilt call.
pub fn received(method: &str, rest: &str, body: &[u8]) -> Value {
    let rest = rest.split('?').next().unwrap_or("");
    let api = Api::classify(method, rest);
    let req: Option<Value> = serde_json::from_slice(body).ok();
    let (Some(req), true) = (req, api.is_conversation()) else {
        return json!({"method": method, "path": format!("/v1/{rest}")});
    };
    let out = match api {
        Api::Chat => chat_conversation(&req),
        Api::Responses => responses_conversation(&req),
        Api::Messages => messages_conversation(&req),
        _ => Vec::new(),
    };
    json!({"conversation": out, "model": req.get("model").and_then(Value::as_str)})
}

/// A tool call in the neutral form: the tool's name and its arguments.
fn tool_call(name: &str, arguments: Value) -> Value {
    json!({"role": "tool_call", "name": name, "arguments": arguments})
}

/// The `name` of a tool call or tool use object, `tool` when it has none.
fn name_of(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or("tool")
}

/// The items of the array at `key` of `v` (none when it is not an array).
fn each<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// The role of a wire message in the neutral form (`user` when it has none).
fn role_in(m: &Value) -> &'static str {
    role_of(m.get("role").and_then(Value::as_str).unwrap_or("user"))
}

/// A chat-completions request's `messages` in the neutral form.
fn chat_conversation(req: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for m in each(req, "messages") {
        let role = role_in(m);
        let calls: Vec<&Value> = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .or_else(|| m.get("function_call").map(|f| vec![f]))
            .unwrap_or_default();
        if role == "assistant" && !calls.is_empty() {
            for c in calls {
                let f = c.get("function").unwrap_or(c);
                let args = arguments(f.get("arguments").unwrap_or(&Value::Null));
                out.push(tool_call(name_of(f), args));
            }
        } else {
            out.push(item(role, content_text(m.get("content"))));
        }
    }
    out
}

/// A Responses request's `instructions` and `input` in the neutral form.
fn responses_conversation(req: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(i) = req.get("instructions").filter(|i| !i.is_null()) {
        out.push(item("system", content_text(Some(i))));
    }
    match req.get("input") {
        Some(Value::String(s)) => out.push(item("user", s.clone())),
        Some(Value::Array(items)) => {
            for it in items {
                match it.get("type").and_then(Value::as_str) {
                    Some("function_call") => {
                        let args = arguments(it.get("arguments").unwrap_or(&Value::Null));
                        out.push(tool_call(name_of(it), args));
                    }
                    Some("function_call_output") => {
                        out.push(item("tool", content_text(it.get("output"))));
                    }
                    Some("message") | None => {
                        out.push(item(role_in(it), content_text(it.get("content"))));
                    }
                    Some(_) => {}
                }
            }
        }
        _ => {}
    }
    out
}

/// An Anthropic Messages request's `system` and `messages` in the neutral
/// form.
fn messages_conversation(req: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(s) = req.get("system").filter(|s| !s.is_null()) {
        out.push(item("system", content_text(Some(s))));
    }
    for m in each(req, "messages") {
        let role = role_in(m);
        match m.get("content").and_then(Value::as_array) {
            Some(blocks) => blocks_conversation(role, blocks, &mut out),
            None => out.push(item(role, content_text(m.get("content")))),
        }
    }
    out
}

/// The content blocks of one Messages message in the neutral form: its
/// tool results, then its tool uses or else its text (left out when the
/// message holds only tool results).
fn blocks_conversation(role: &'static str, blocks: &[Value], out: &mut Vec<Value>) {
    let of_type = |t: &'static str| {
        blocks
            .iter()
            .filter(move |b| b.get("type").and_then(Value::as_str) == Some(t))
    };
    let uses: Vec<&Value> = of_type("tool_use").collect();
    let results: Vec<&Value> = of_type("tool_result").collect();
    for r in &results {
        out.push(item("tool", content_text(r.get("content"))));
    }
    if !uses.is_empty() {
        for u in uses {
            let args = arguments(u.get("input").unwrap_or(&Value::Null));
            out.push(tool_call(name_of(u), args));
        }
    } else {
        let text = content_text(Some(&Value::Array(of_type("text").cloned().collect())));
        if results.is_empty() || !text.is_empty() {
            out.push(item(role, text));
        }
    }
}

/// A rebuilt answer: what the client gets.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// The bytes.
    pub body: Vec<u8>,
    /// For a stream: the length of each event, in order.
    pub events: Option<Vec<usize>>,
}

impl Answer {
    /// A JSON answer of `v`.
    fn json(v: &Value) -> Answer {
        Answer {
            content_type: "application/json",
            body: serde_json::to_vec(v).unwrap_or_default(),
            events: None,
        }
    }
}

/// The answer of `call` in the wire format of the received request
/// (`rest`: its path after `/v1/`); `Err` says why it cannot be given (a
/// stream of an API other than chat completions).
pub fn answer(call: &Rebuilt, rest: &str, body: &[u8]) -> Result<Answer, String> {
    let rest = rest.split('?').next().unwrap_or("");
    let api = Api::classify("POST", rest);
    let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    let said = Said::of(call);
    match api {
        Api::Chat if !stream => Ok(match &call.whole {
            Some(whole) => Answer {
                content_type: "application/json",
                body: whole.clone().into_bytes(),
                events: None,
            },
            None => Answer::json(&said.chat_completion()),
        }),
        Api::Chat => {
            let wants_usage = req
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true);
            Ok(said.chat_stream(wants_usage))
        }
        _ if stream => Err(format!(
            "replay: a call received as telemetry is answered as a stream only on chat completions; send /v1/{rest} without `stream: true`"
        )),
        Api::Responses => Ok(Answer::json(&said.response())),
        Api::Messages => Ok(Answer::json(&said.message())),
        _ => Err(format!(
            "replay: /v1/{rest} is not a conversation call; a session received as telemetry answers chat completions, Responses and Messages calls"
        )),
    }
}

/// What a rebuilt call answered, whichever wire format it is given in.
struct Said<'a> {
    /// The call's place among the timeline's calls (in the ids made up).
    n: usize,
    /// The model that answered (else the one asked for).
    model: String,
    /// When it answered, in seconds.
    created: i64,
    input: Option<u64>,
    output: Option<u64>,
    /// The assistant's text (empty when it only called tools).
    text: String,
    /// Each tool call: its id, tool name and arguments (a JSON text).
    tools: Vec<(String, String, String)>,
    /// The recorded finish reason when it is one a client acts on
    /// (`length`, `content_filter`).
    finish: Option<&'a str>,
}

impl<'a> Said<'a> {
    fn of(call: &'a Rebuilt) -> Said<'a> {
        let n = call.index;
        let tokens = |k: &str| {
            call.usage
                .as_ref()
                .and_then(|u| u.get(k))
                .and_then(Value::as_u64)
        };
        let text: String = match call.answer.first() {
            Some(m) if m.role == Role::Assistant => m.text.clone(),
            Some(m) => m
                .extra
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            None => String::new(),
        };
        let tools = call
            .answer
            .iter()
            .filter(|m| m.role == Role::ToolCall)
            .enumerate()
            .map(|(k, m)| {
                let id = m
                    .extra
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("call_convo_{n}_{k}"), str::to_owned);
                let name = m.to.clone().unwrap_or_else(|| "tool".into());
                (id, name, m.text.clone())
            })
            .collect();
        Said {
            n,
            model: call
                .answered_by
                .clone()
                .or_else(|| call.model.clone())
                .unwrap_or_default(),
            created: call.answer.first().and_then(|m| m.time).unwrap_or(0) / 1000,
            input: tokens("input_tokens"),
            output: tokens("output_tokens"),
            text,
            tools,
            finish: call
                .answer
                .first()
                .and_then(|m| m.extra.get("finish_reason"))
                .and_then(Value::as_str)
                .filter(|f| matches!(*f, "length" | "content_filter")),
        }
    }

    /// The chat-completions finish reason.
    fn chat_finish(&self) -> &str {
        if !self.tools.is_empty() {
            "tool_calls"
        } else {
            self.finish.unwrap_or("stop")
        }
    }

    /// The chat-completions usage (`null` when no tokens were recorded).
    fn chat_usage(&self) -> Value {
        match (self.input, self.output) {
            (None, None) => Value::Null,
            (i, o) => json!({
                "prompt_tokens": i.unwrap_or(0),
                "completion_tokens": o.unwrap_or(0),
                "total_tokens": i.unwrap_or(0) + o.unwrap_or(0),
            }),
        }
    }

    /// A `chat.completion`.
    fn chat_completion(&self) -> Value {
        let (text, tools) = (&self.text, &self.tools);
        let mut msg = json!({"role": "assistant",
            "content": if text.is_empty() && !tools.is_empty() { Value::Null } else { json!(text) }});
        if !tools.is_empty() {
            msg["tool_calls"] = tools
                .iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": args}})
                })
                .collect();
        }
        let mut v = json!({"id": format!("chatcmpl-convo-{}", self.n),
            "object": "chat.completion", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "message": msg, "finish_reason": self.chat_finish()}]});
        let usage = self.chat_usage();
        if !usage.is_null() {
            v["usage"] = usage;
        }
        v
    }

    /// A `chat.completion.chunk` stream ending in `[DONE]`, with the usage
    /// chunk when `wants_usage`.
    fn chat_stream(&self, wants_usage: bool) -> Answer {
        let id = format!("chatcmpl-convo-{}", self.n);
        let (created, model) = (self.created, &self.model);
        let chunk = |delta: Value, finish: Value| {
            json!({"id": id, "object": "chat.completion.chunk", "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let mut events = vec![chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        if !self.text.is_empty() {
            events.push(chunk(json!({"content": self.text}), Value::Null));
        }
        for (k, (id, name, args)) in self.tools.iter().enumerate() {
            events.push(chunk(
                json!({"tool_calls": [{"index": k, "id": id, "type": "function",
                    "function": {"name": name, "arguments": args}}]}),
                Value::Null,
            ));
        }
        events.push(chunk(json!({}), json!(self.chat_finish())));
        if wants_usage {
            let usage = self.chat_usage();
            events.push(json!({"id": id, "object": "chat.completion.chunk",
                "created": created, "model": model, "choices": [],
                "usage": if usage.is_null() { json!({"prompt_tokens": 0,
                    "completion_tokens": 0, "total_tokens": 0}) } else { usage }}));
        }
        let mut framed: Vec<String> = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        framed.push("data: [DONE]\n\n".into());
        Answer {
            content_type: "text/event-stream",
            events: Some(framed.iter().map(String::len).collect()),
            body: framed.concat().into_bytes(),
        }
    }

    /// A Responses `response`.
    fn response(&self) -> Value {
        let n = self.n;
        let mut items = Vec::new();
        if !self.text.is_empty() || self.tools.is_empty() {
            items.push(json!({"type": "message", "id": format!("msg_convo_{n}"),
                "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": self.text, "annotations": []}]}));
        }
        for (k, (id, name, args)) in self.tools.iter().enumerate() {
            items.push(
                json!({"type": "function_call", "id": format!("fc_convo_{n}_{k}"),
                "call_id": id, "name": name, "arguments": args, "status": "completed"}),
            );
        }
        let mut v = json!({"id": format!("resp_convo_{n}"), "object": "response",
            "created_at": self.created, "status": "completed", "model": self.model,
            "output": items, "parallel_tool_calls": true, "tool_choice": "auto",
            "tools": [], "error": null, "incomplete_details": null});
        if self.input.is_some() || self.output.is_some() {
            let (i, o) = (self.input.unwrap_or(0), self.output.unwrap_or(0));
            v["usage"] = json!({"input_tokens": i, "output_tokens": o, "total_tokens": i + o});
        }
        v
    }

    /// An Anthropic `message`.
    fn message(&self) -> Value {
        let mut content = Vec::new();
        if !self.text.is_empty() || self.tools.is_empty() {
            content.push(json!({"type": "text", "text": self.text}));
        }
        for (id, name, args) in &self.tools {
            content.push(json!({"type": "tool_use", "id": id, "name": name,
                "input": arguments(&Value::String(args.clone()))}));
        }
        let stop = if !self.tools.is_empty() {
            "tool_use"
        } else if self.finish == Some("length") {
            "max_tokens"
        } else {
            "end_turn"
        };
        json!({"id": format!("msg_convo_{}", self.n), "type": "message",
            "role": "assistant", "model": self.model, "content": content,
            "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": self.input.unwrap_or(0),
                "output_tokens": self.output.unwrap_or(0)}})
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn otel(m: Message) -> Message {
        m.with_extra("otel", json!({"thread": "x"}))
    }

    fn session() -> Vec<Message> {
        let mut call = Message::new(Role::ToolCall, "assistant", r#"{"city":"Paris"}"#);
        call.to = Some("get_weather".into());
        call.extra.insert("tool_call_id".into(), json!("call_1"));
        let mut last = otel(Message::new(Role::Assistant, "assistant", "Sunny."))
            .with_model(Some("gpt-4o-2024-08-06".into()));
        last.extra.insert(
            "otel".into(),
            json!({"thread": "y", "call": {"usage": {"input_tokens": 20, "output_tokens": 7},
                "attributes": {"gen_ai.request.model": "gpt-4o"}}}),
        );
        vec![
            otel(Message::new(Role::System, "system", "Be terse.")),
            otel(Message::new(Role::User, "user", "Weather in Paris?")),
            otel(call).with_model(Some("gpt-4o-2024-08-06".into())),
            otel(Message::new(Role::Tool, "get_weather", "18C")),
            last,
        ]
    }

    #[test]
    fn each_answer_is_a_call_matched_by_conversation_and_model_in_any_api() {
        let cs = calls(&session());
        assert_eq!(cs.len(), 2);
        assert_eq!((cs[0].at, cs[1].at), (2, 4));
        // The first answer was stored by the second call: its model asked
        // is that call's, its usage is not.
        assert_eq!(cs[0].model.as_deref(), Some("gpt-4o"));
        assert_eq!(cs[0].usage, None);
        assert_eq!(
            cs[1].usage,
            Some(json!({"input_tokens": 20, "output_tokens": 7}))
        );
        let chat = json!({"model": "gpt-4o", "temperature": 0.2, "stream": true, "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "other", "type": "function",
                "function": {"name": "get_weather", "arguments": "{ \"city\": \"Paris\" }"}}]},
            {"role": "tool", "tool_call_id": "other", "content": "18C"}]});
        let got = received("POST", "chat/completions", chat.to_string().as_bytes());
        assert_eq!(got, cs[1].canonical);
        let responses = json!({"model": "gpt-4o", "instructions": "Be terse.", "input": [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "c", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "c", "output": "18C"}]});
        let got = received("POST", "responses", responses.to_string().as_bytes());
        assert_eq!(got, cs[1].canonical);
        let anthropic = json!({"model": "gpt-4o", "system": "Be terse.", "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather",
                "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "18C"}]}]});
        let got = received("POST", "messages", anthropic.to_string().as_bytes());
        assert_eq!(got, cs[1].canonical);
        // Another model, another text: no match.
        let mut other = chat.clone();
        other["model"] = json!("gpt-4o-mini");
        assert_ne!(
            received("POST", "chat/completions", other.to_string().as_bytes()),
            cs[1].canonical
        );
        assert_ne!(received("GET", "models", b""), cs[1].canonical);
    }

    #[test]
    fn answers_are_rebuilt_in_the_wire_format_called() {
        let cs = calls(&session());
        let a = answer(&cs[0], "chat/completions", br#"{"model":"gpt-4o"}"#).unwrap();
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"][0],
            json!({"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})
        );
        let a = answer(
            &cs[1],
            "chat/completions",
            br#"{"stream":true,"stream_options":{"include_usage":true}}"#,
        )
        .unwrap();
        assert_eq!(a.content_type, "text/event-stream");
        let lens = a.events.clone().unwrap();
        assert_eq!(lens.iter().sum::<usize>(), a.body.len());
        let assembled = crate::wire::assemble(Api::Chat, &a.body).unwrap();
        assert_eq!(assembled["choices"][0]["message"]["content"], "Sunny.");
        assert_eq!(assembled["usage"]["total_tokens"], 27);
        assert!(
            String::from_utf8(a.body)
                .unwrap()
                .ends_with("data: [DONE]\n\n")
        );
        let r = answer(&cs[1], "responses", b"{}").unwrap();
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["output"][0]["content"][0]["text"], "Sunny.");
        let m = answer(&cs[0], "messages", b"{}").unwrap();
        let v: Value = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(v["content"][0]["input"], json!({"city": "Paris"}));
        assert_eq!(v["stop_reason"], "tool_use");
        assert!(answer(&cs[1], "messages", br#"{"stream":true}"#).is_err());
    }

    #[test]
    fn a_whole_captured_answer_is_given_back_as_captured() {
        let mut msgs = session();
        let whole = r#"{"id":"chatcmpl-9","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Sunny."},"finish_reason":"stop"}],"system_fingerprint":"fp_1"}"#;
        msgs[4].extra.insert(
            "otel".into(),
            json!({"thread": "y", "call": {"attributes": {"gen_ai.request.model": "gpt-4o",
                "output.value": whole, "output.mime_type": "application/json"}}}),
        );
        let cs = calls(&msgs);
        let a = answer(&cs[1], "chat/completions", b"{}").unwrap();
        assert_eq!(a.body, whole.as_bytes());
        // A stream is still rebuilt.
        let s = answer(&cs[1], "chat/completions", br#"{"stream":true}"#).unwrap();
        assert_eq!(s.content_type, "text/event-stream");
        // The first call's answer was stored by the second: not its capture.
        assert_eq!(cs[0].whole, None);
    }
}
