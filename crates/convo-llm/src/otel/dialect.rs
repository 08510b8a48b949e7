//! Spans and log records → [`Call`]s: every dialect GenAI telemetry speaks,
//! read in one place.
//!
//! A [`Call`] is one LLM call: the messages it was sent (`input`, the whole
//! history, as every instrumentation resends it) and the messages it
//! answered (`output`), with where it came from (trace and span ids, the
//! conversation it belongs to) and what it cost (model, tokens, latency,
//! status). Where the messages are found, newest convention first:
//!
//! | dialect | where | keys |
//! |---|---|---|
//! | GenAI semconv ≥ 1.37 | span attributes, or a `gen_ai.client.inference.operation.details` span event / log record | `gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages` (role/parts JSON) |
//! | OpenInference | span attributes | `llm.input_messages.N.message.*`, `llm.output_messages.N.message.*` |
//! | OpenLLMetry | span attributes | `gen_ai.prompt.N.*`, `gen_ai.completion.N.*` |
//! | Vercel AI SDK | `ai.*.doGenerate` / `ai.*.doStream` span attributes | `ai.prompt.messages`, `ai.response.text`, `ai.response.toolCalls` |
//! | GenAI semconv ≤ 1.36 | span events or log records | `gen_ai.{system,user,assistant,tool}.message`, `gen_ai.choice` |
//!
//! Messages become the neutral [`Message`]s of [`convo_formats::model`]: a text
//! from the user an [`Role::User`], a system prompt [`Role::System`], an
//! answer [`Role::Assistant`], each tool call the assistant makes a
//! [`Role::ToolCall`] to the tool (arguments as JSON text, the call id in
//! `extra`), each tool result a [`Role::Tool`] from the tool. The same
//! message therefore reads the same whether it arrives as the output of
//! one call or in the history of the next, which is what threading
//! ([`super::ingest`]) relies on.

use super::{Batch, any_json, attr, attr_str, hex_id, nanos_to_millis};
use convo_core::Millis;
use convo_formats::model::{Message, Role};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// One LLM call, read from a span (and its events) or a group of log records.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// What it belongs to: `conversation:ID`, `session:ID` or `trace:HEX`.
    pub thread: String,
    /// Trace id (hex).
    pub trace_id: String,
    /// Span id (hex).
    pub span_id: String,
    /// Parent span id (hex, empty for a root).
    pub parent_span_id: String,
    /// Start, in milliseconds since the epoch.
    pub start: Millis,
    /// End.
    pub end: Millis,
    /// The agent or service that made it.
    pub agent: Option<String>,
    /// The model that answered (or was asked).
    pub model: Option<String>,
    /// What it was sent: the whole history.
    pub input: Vec<Message>,
    /// What it answered.
    pub output: Vec<Message>,
    /// Diagnostics: dialect, provider, usage, status, latency, the
    /// attributes the messages were not read from, scope.
    pub info: Map<String, Value>,
    /// An agent span's call (the whole run's input, a summary of its
    /// output): dropped where an LLM call of its trace was received.
    pub agent_span: bool,
}

/// The calls in a batch of spans. A span that is not an LLM call (an
/// agent, a tool execution, an HTTP request) gives none.
///
/// An agent span (`gen_ai.operation.name` `invoke_agent` or
/// `invoke_workflow`, as the Vercel AI SDK's and others' emit) carries the
/// whole run's input and a summary of its output, which the LLM calls under
/// it carry message by message: it is read only when the batch has no LLM
/// call of its trace (an emitter that exports agent spans alone); across
/// batches, [`crate::otel::ingest_cached`] drops it where its trace's LLM
/// calls were received before (a batch processor exports the agent span,
/// which ends last, after them).
pub fn calls_from_spans(batch: &Batch<'_>) -> Vec<Call> {
    let mut out = Vec::new();
    for (resource, scope, span) in batch.spans() {
        if let Some(c) = span_call(resource, scope, span) {
            out.push(c);
        }
    }
    let llm_traces: std::collections::HashSet<String> = out
        .iter()
        .filter(|c| !c.agent_span)
        .map(|c| c.trace_id.clone())
        .collect();
    out.retain(|c| !c.agent_span || !llm_traces.contains(&c.trace_id));
    propagate_threads(&mut out);
    out
}

fn is_agent_span(span: &Span) -> bool {
    let attrs: Vec<&KeyValue> = span.attributes.iter().collect();
    matches!(
        attr_str(&attrs, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent" | "invoke_workflow")
    )
}

/// The calls in a batch of log records: the records of one span grouped
/// (per-message events), or one `operation.details` record each.
pub fn calls_from_logs(batch: &Batch<'_>) -> Vec<Call> {
    let (groups, order) = log_groups(batch);
    let mut out: Vec<Call> = order
        .iter()
        .filter_map(|key| log_call(key, &groups[key]))
        .collect();
    propagate_threads(&mut out);
    out
}

/// Where a log record belongs: its trace and span ids, or for one in no
/// trace its service (`service:NAME`, no span).
type LogKey = (String, String);

/// The GenAI records of a batch grouped by [`LogKey`], and the keys in
/// the order first seen.
fn log_groups<'a>(batch: &Batch<'a>) -> (BTreeMap<LogKey, Vec<Record<'a>>>, Vec<LogKey>) {
    let mut groups: BTreeMap<LogKey, Vec<Record<'_>>> = BTreeMap::new();
    let mut order: Vec<LogKey> = Vec::new();
    for (resource, scope, rec) in batch.records() {
        let name = event_name(rec);
        if !name.starts_with("gen_ai.") {
            continue;
        }
        let key = (hex_id(&rec.trace_id), hex_id(&rec.span_id));
        let key = if key.0.is_empty() && key.1.is_empty() {
            // Not in a trace: one call per service's run of records.
            (
                format!("service:{}", service(resource).unwrap_or_default()),
                String::new(),
            )
        } else {
            key
        };
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push((resource, scope, rec));
    }
    (groups, order)
}

/// The call the records of one group (`key`) carry, when their events
/// hold messages.
fn log_call(key: &LogKey, recs: &[Record<'_>]) -> Option<Call> {
    let events: Vec<Event> = recs
        .iter()
        .map(|(_, _, r)| Event {
            name: event_name(r).to_owned(),
            attrs: &r.attributes,
            body: r.body.as_ref(),
            time: nanos_to_millis(if r.time_unix_nano != 0 {
                r.time_unix_nano
            } else {
                r.observed_time_unix_nano
            }),
        })
        .collect();
    let (resource, scope, first) = recs[0];
    let start = events.iter().map(|e| e.time).min().unwrap_or(0);
    let end = events.iter().map(|e| e.time).max().unwrap_or(start);
    let mut attrs: Vec<&KeyValue> = Vec::new();
    for e in &events {
        attrs.extend(e.attrs.iter());
    }
    let (dialect, input, output) = from_events(&events)?;
    let trace_id = hex_id(&first.trace_id);
    let mut info = Map::new();
    info.insert("dialect".into(), json!(dialect));
    info.insert("source".into(), json!("logs"));
    if !scope.is_empty() {
        info.insert("scope".into(), json!(scope));
    }
    read_info(&attrs, &mut info);
    let model = find_str(&attrs, &["gen_ai.response.model", "gen_ai.request.model"]);
    let thread = explicit_thread(&attrs).unwrap_or_else(|| {
        if trace_id.is_empty() {
            key.0.clone()
        } else {
            format!("trace:{trace_id}")
        }
    });
    Some(Call {
        thread,
        trace_id,
        span_id: hex_id(&first.span_id),
        parent_span_id: String::new(),
        start,
        end,
        agent: agent_name(resource, &attrs),
        model,
        input,
        output,
        info,
        agent_span: false,
    })
}

/// A log record with its resource's attributes and its scope's name.
type Record<'a> = (&'a [KeyValue], &'a str, &'a LogRecord);

/// The name of a log record's event: the `event_name` field, or the
/// `event.name` attribute older SDKs set.
fn event_name(r: &LogRecord) -> &str {
    if !r.event_name.is_empty() {
        return &r.event_name;
    }
    r.attributes
        .iter()
        .find(|kv| kv.key == "event.name")
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => {
                Some(s.as_str())
            }
            _ => None,
        })
        .unwrap_or("")
}

/// A conversation id carried by some span of a trace applies to the
/// trace's other calls in the same batch.
fn propagate_threads(calls: &mut [Call]) {
    let mut by_trace: BTreeMap<String, String> = BTreeMap::new();
    for c in calls.iter() {
        if !c.thread.starts_with("trace:") && !c.trace_id.is_empty() {
            by_trace
                .entry(c.trace_id.clone())
                .or_insert_with(|| c.thread.clone());
        }
    }
    for c in calls.iter_mut() {
        if c.thread.starts_with("trace:")
            && let Some(t) = by_trace.get(&c.trace_id)
        {
            c.thread = t.clone();
        }
    }
}

/// Attributes whose values are the messages: kept in the nodes, not again
/// in the diagnostics. (OpenInference's `output.value`, the whole answer
/// as the SDK got it, is kept: it is one call's, not the history, and
/// replay gives it back as it was captured.)
fn is_message_key(k: &str) -> bool {
    k == "gen_ai.input.messages"
        || k == "gen_ai.output.messages"
        || k == "gen_ai.system_instructions"
        || k.starts_with("llm.input_messages.")
        || k.starts_with("llm.output_messages.")
        || k.starts_with("gen_ai.prompt.")
        || k.starts_with("gen_ai.completion.")
        || k == "ai.prompt.messages"
        || k == "ai.prompt"
        || k == "ai.response.text"
        || k == "ai.response.toolCalls"
        || k == "input.value"
        || k == "gen_ai.event.content"
}

fn span_call(resource: &[KeyValue], scope: &str, span: &Span) -> Option<Call> {
    let attrs: Vec<&KeyValue> = span.attributes.iter().collect();
    let found = from_attributes(&attrs).or_else(|| {
        let events: Vec<Event> = span
            .events
            .iter()
            .map(|e| Event {
                name: e.name.clone(),
                attrs: &e.attributes,
                body: None,
                time: nanos_to_millis(e.time_unix_nano),
            })
            .collect();
        from_events(&events)
    });
    let content = found.is_some();
    let (dialect, input, output) = match found {
        Some(f) => f,
        None if without_content(&attrs) => ("gen_ai", Vec::new(), Vec::new()),
        None => return None,
    };
    let trace_id = hex_id(&span.trace_id);
    let start = nanos_to_millis(span.start_time_unix_nano);
    let end = nanos_to_millis(span.end_time_unix_nano).max(start);
    let mut info = Map::new();
    info.insert("dialect".into(), json!(dialect));
    info.insert("span".into(), json!(span.name));
    if !scope.is_empty() {
        info.insert("scope".into(), json!(scope));
    }
    info.insert("latency_ms".into(), json!(end - start));
    if let Some(st) = &span.status
        && st.code != 0
    {
        info.insert(
            "status".into(),
            json!({"code": if st.code == 2 { "error" } else { "ok" }, "message": st.message}),
        );
    }
    read_info(&attrs, &mut info);
    if !content {
        info.insert("content".into(), json!(false));
    }
    let model = find_str(
        &attrs,
        &[
            "gen_ai.response.model",
            "gen_ai.request.model",
            "llm.model_name",
            "ai.response.model",
            "ai.model.id",
        ],
    );
    let agent = agent_name(resource, &attrs);
    let thread = explicit_thread(&attrs).unwrap_or_else(|| {
        if content {
            format!("trace:{trace_id}")
        } else {
            // Nothing to thread by: one session per agent.
            format!("{NO_CONTENT}{}", agent.as_deref().unwrap_or("otel"))
        }
    });
    Some(Call {
        thread,
        trace_id,
        span_id: hex_id(&span.span_id),
        parent_span_id: hex_id(&span.parent_span_id),
        start,
        end,
        agent,
        model,
        input,
        output,
        info,
        agent_span: is_agent_span(span),
    })
}

/// The thread of calls exported without their messages (the
/// instrumentations' default, `NO_CONTENT`), followed by the agent's name:
/// one session per agent, as the proxy keeps one for calls that are not a
/// conversation.
pub const NO_CONTENT: &str = "no-content:";

/// What a session of calls without content says, once, on its first call
/// (and the receiver in its log).
pub const CONTENT_HINT: &str = "the instrumentation exported these calls without their messages \
     (its default): set OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only \
     (OpenTelemetry's openai-v2 with OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental; \
     `true` on older conventions) to record the conversation itself";

/// Whether a span with no messages is an LLM call exported without its
/// content: an inference operation (`gen_ai.operation.name` `chat`,
/// `text_completion`, `generate_content`) or, with no operation named, a
/// requested model and token usage.
fn without_content(attrs: &[&KeyValue]) -> bool {
    match attr_str(attrs, "gen_ai.operation.name").as_deref() {
        Some("chat" | "text_completion" | "generate_content") => true,
        Some(_) => false,
        None => {
            attr(attrs, "gen_ai.request.model").is_some()
                && attr(attrs, "gen_ai.usage.input_tokens").is_some()
        }
    }
}

/// What a call's attributes say beside its messages, into `info`: usage
/// (tokens, cost), the provider, and every attribute the messages were
/// not read from, as received (the first of a repeated key).
fn read_info(attrs: &[&KeyValue], info: &mut Map<String, Value>) {
    let mut usage = Map::new();
    for (name, keys) in [
        (
            "input_tokens",
            &[
                "gen_ai.usage.input_tokens",
                "gen_ai.usage.prompt_tokens",
                "llm.token_count.prompt",
                "ai.usage.inputTokens",
                "ai.usage.promptTokens",
            ][..],
        ),
        (
            "output_tokens",
            &[
                "gen_ai.usage.output_tokens",
                "gen_ai.usage.completion_tokens",
                "llm.token_count.completion",
                "ai.usage.outputTokens",
                "ai.usage.completionTokens",
            ][..],
        ),
        ("cost", &["gen_ai.usage.cost", "llm.cost.total"][..]),
    ] {
        if let Some(v) = keys.iter().find_map(|k| attr(attrs, k)) {
            usage.insert(name.into(), any_json(v));
        }
    }
    if !usage.is_empty() {
        info.insert("usage".into(), Value::Object(usage));
    }
    if let Some(p) = find_str(
        attrs,
        &[
            "gen_ai.provider.name",
            "gen_ai.system",
            "llm.provider",
            "llm.system",
            "ai.model.provider",
        ],
    ) {
        info.insert("provider".into(), json!(p));
    }
    // Everything the messages were not read from, as received.
    let mut rest = Map::new();
    for kv in attrs {
        if !is_message_key(&kv.key) && !rest.contains_key(&kv.key) {
            rest.insert(
                kv.key.clone(),
                kv.value.as_ref().map_or(Value::Null, any_json),
            );
        }
    }
    if !rest.is_empty() {
        info.insert("attributes".into(), Value::Object(rest));
    }
}

/// The conversation a span names itself: `gen_ai.conversation.id`, then a
/// session id in any dialect.
fn explicit_thread(attrs: &[&KeyValue]) -> Option<String> {
    if let Some(c) = find_str(attrs, &["gen_ai.conversation.id"]) {
        return Some(format!("conversation:{c}"));
    }
    find_str(
        attrs,
        &[
            "session.id",
            "ai.telemetry.metadata.sessionId",
            "ai.telemetry.metadata.session_id",
            "traceloop.association.properties.session_id",
            "langfuse.session.id",
        ],
    )
    .map(|s| format!("session:{s}"))
}

fn service(resource: &[KeyValue]) -> Option<String> {
    let r: Vec<&KeyValue> = resource.iter().collect();
    find_str(&r, &["service.name"]).filter(|s| !s.starts_with("unknown_service"))
}

fn agent_name(resource: &[KeyValue], attrs: &[&KeyValue]) -> Option<String> {
    find_str(attrs, &["gen_ai.agent.name"]).or_else(|| service(resource))
}

fn find_str(attrs: &[&KeyValue], keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| attr_str(attrs, k))
        .filter(|s| !s.is_empty())
}

/// A span event or a log record, as far as the event conventions care.
struct Event<'a> {
    name: String,
    attrs: &'a [KeyValue],
    body: Option<&'a AnyValue>,
    time: Millis,
}

type Found = (&'static str, Vec<Message>, Vec<Message>);

/// Messages carried by attributes (semconv ≥ 1.37, OpenInference,
/// OpenLLMetry, the Vercel AI SDK), newest convention first.
fn from_attributes(attrs: &[&KeyValue]) -> Option<Found> {
    if let Some(found) = semconv(attrs) {
        return Some(found);
    }
    let indexed = Indexed::of(attrs);
    if let Some(found) = openinference(&indexed) {
        return Some(found);
    }
    if let Some(found) = openllmetry(&indexed) {
        return Some(found);
    }
    vercel(attrs)
}

fn json_attr(attrs: &[&KeyValue], key: &str) -> Option<Value> {
    let v = attr(attrs, key)?;
    // A string (the whole history, often) is parsed where it is, not
    // copied first.
    if let Some(Any::StringValue(s)) = &v.value {
        return Some(serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())));
    }
    Some(any_json(v))
}

fn semconv(attrs: &[&KeyValue]) -> Option<Found> {
    let input = json_attr(attrs, "gen_ai.input.messages");
    let output = json_attr(attrs, "gen_ai.output.messages");
    if input.is_none() && output.is_none() {
        return None;
    }
    let mut ins = Vec::new();
    if let Some(sys) = json_attr(attrs, "gen_ai.system_instructions") {
        let text = parts_text(&sys);
        if !text.is_empty() {
            ins.push(Message::new(Role::System, "system", text));
        }
    }
    for m in input
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        semconv_message(m, &mut ins);
    }
    let mut outs = Vec::new();
    for m in output
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        semconv_message(m, &mut outs);
    }
    Some(("gen_ai", ins, outs))
}

/// The text of a parts array (or a plain string): text parts joined.
fn parts_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.clone()),
                Value::Object(o)
                    if matches!(o.get("type").and_then(Value::as_str), Some("text") | None) =>
                {
                    o.get("content")
                        .or_else(|| o.get("text"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A JSON value as message text: a string as itself, anything else as JSON.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Tool-call arguments as one JSON text, the same whichever way they came
/// (a JSON string or an object).
fn args_text(v: &Value) -> String {
    match v {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(parsed) => parsed.to_string(),
            Err(_) => s.clone(),
        },
        Value::Null => "{}".into(),
        other => other.to_string(),
    }
}

/// One message in the role/parts schema.
fn semconv_message(m: &Value, out: &mut Vec<Message>) {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let parts: Vec<&Value> = match m.get("parts") {
        Some(Value::Array(p)) => p.iter().collect(),
        _ => Vec::new(),
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    let mut other = Vec::new();
    for p in parts {
        match p.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(as_text(p.get("content").unwrap_or(&Value::Null))),
            Some("tool_call") => calls.push(ToolCall {
                id: p.get("id").and_then(Value::as_str).map(str::to_owned),
                name: p
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool")
                    .to_owned(),
                args: args_text(p.get("arguments").unwrap_or(&Value::Null)),
            }),
            Some("tool_call_response") => results.push((
                p.get("id").and_then(Value::as_str).map(str::to_owned),
                as_text(
                    p.get("response")
                        .or_else(|| p.get("result"))
                        .unwrap_or(&Value::Null),
                ),
            )),
            _ => other.push(p.clone()),
        }
    }
    let mut extra = Map::new();
    if !other.is_empty() {
        extra.insert("parts".into(), Value::Array(other));
    }
    if let Some(f) = m.get("finish_reason") {
        extra.insert("finish_reason".into(), f.clone());
    }
    push_message(
        role,
        texts.join("\n"),
        calls,
        results,
        m.get("name").and_then(Value::as_str),
        extra,
        out,
    );
}

struct ToolCall {
    id: Option<String>,
    name: String,
    args: String,
}

/// Appends the neutral messages for one message of any dialect: tool
/// results each a [`Role::Tool`], an assistant's tool calls each a
/// [`Role::ToolCall`] (its text, if any, kept on the first), otherwise one
/// message of the role.
fn push_message(
    role: &str,
    text: String,
    calls: Vec<ToolCall>,
    results: Vec<(Option<String>, String)>,
    name: Option<&str>,
    extra: Map<String, Value>,
    out: &mut Vec<Message>,
) {
    if !results.is_empty() {
        for (id, text) in results {
            let mut m = Message::new(Role::Tool, "tool", text);
            if let Some(id) = id {
                m.extra.insert("tool_call_id".into(), json!(id));
            }
            out.push(m);
        }
        return;
    }
    if !calls.is_empty() {
        for (i, c) in calls.into_iter().enumerate() {
            let mut m = Message::new(Role::ToolCall, "assistant", c.args);
            m.to = Some(c.name);
            if let Some(id) = c.id {
                m.extra.insert("tool_call_id".into(), json!(id));
            }
            if i == 0 && !text.is_empty() {
                m.extra.insert("content".into(), json!(text));
            }
            if i == 0 {
                m.extra.extend(extra.clone());
            }
            out.push(m);
        }
        return;
    }
    let (r, speaker) = match role {
        "system" | "developer" => (Role::System, "system"),
        "assistant" | "model" | "ai" => (Role::Assistant, "assistant"),
        "tool" | "function" | "ipython" => (Role::Tool, "tool"),
        _ => (Role::User, "user"),
    };
    let mut m = Message::new(r, speaker, text);
    if r == Role::User
        && let Some(n) = name
    {
        m.extra.insert("name".into(), json!(n));
    }
    m.extra.extend(extra);
    out.push(m);
}

/// Attributes `PREFIX.N.REST`, grouped by prefix and N.
struct Indexed<'a> {
    groups: BTreeMap<&'a str, BTreeMap<usize, BTreeMap<&'a str, &'a AnyValue>>>,
}

impl<'a> Indexed<'a> {
    fn of(attrs: &[&'a KeyValue]) -> Self {
        let mut groups: BTreeMap<&str, BTreeMap<usize, BTreeMap<&str, &AnyValue>>> =
            BTreeMap::new();
        for kv in attrs {
            for prefix in [
                "llm.input_messages",
                "llm.output_messages",
                "gen_ai.prompt",
                "gen_ai.completion",
            ] {
                if let Some(rest) = kv
                    .key
                    .strip_prefix(prefix)
                    .and_then(|r| r.strip_prefix('.'))
                    && let Some((n, sub)) = rest.split_once('.')
                    && let Ok(n) = n.parse::<usize>()
                    && let Some(v) = &kv.value
                {
                    groups
                        .entry(prefix)
                        .or_default()
                        .entry(n)
                        .or_default()
                        .insert(sub, v);
                }
            }
        }
        Indexed { groups }
    }

    fn messages(&self, prefix: &str) -> Vec<&BTreeMap<&'a str, &'a AnyValue>> {
        self.groups
            .get(prefix)
            .map(|g| g.values().collect())
            .unwrap_or_default()
    }
}

fn s(m: &BTreeMap<&str, &AnyValue>, k: &str) -> Option<String> {
    m.get(k).map(|v| as_text(&any_json(v)))
}

/// Sub-keys `PREFIX.K.REST` of one message, grouped by K.
fn sub_indexed<'a>(
    m: &BTreeMap<&'a str, &'a AnyValue>,
    prefix: &str,
) -> BTreeMap<usize, BTreeMap<&'a str, &'a AnyValue>> {
    let mut out: BTreeMap<usize, BTreeMap<&str, &AnyValue>> = BTreeMap::new();
    for (k, v) in m {
        if let Some(rest) = k.strip_prefix(prefix).and_then(|r| r.strip_prefix('.'))
            && let Some((n, sub)) = rest.split_once('.')
            && let Ok(n) = n.parse::<usize>()
        {
            out.entry(n).or_default().insert(sub, v);
        }
    }
    out
}

fn openinference(ix: &Indexed<'_>) -> Option<Found> {
    let ins = ix.messages("llm.input_messages");
    let outs = ix.messages("llm.output_messages");
    if ins.is_empty() && outs.is_empty() {
        return None;
    }
    let read = |msgs: Vec<&BTreeMap<&str, &AnyValue>>| {
        let mut out = Vec::new();
        for m in msgs {
            let role = s(m, "message.role").unwrap_or_else(|| "user".into());
            let mut text = s(m, "message.content").unwrap_or_default();
            if text.is_empty() {
                let contents = sub_indexed(m, "message.contents");
                text = contents
                    .values()
                    .filter_map(|c| s(c, "message_content.text"))
                    .collect::<Vec<_>>()
                    .join("\n");
            }
            let calls: Vec<ToolCall> = sub_indexed(m, "message.tool_calls")
                .values()
                .map(|c| ToolCall {
                    id: s(c, "tool_call.id"),
                    name: s(c, "tool_call.function.name").unwrap_or_else(|| "tool".into()),
                    args: args_text(&json!(
                        s(c, "tool_call.function.arguments").unwrap_or_default()
                    )),
                })
                .collect();
            let results = if role == "tool" {
                vec![(s(m, "message.tool_call_id"), text.clone())]
            } else {
                Vec::new()
            };
            let name = s(m, "message.name");
            push_message(
                &role,
                text,
                calls,
                results,
                name.as_deref(),
                Map::new(),
                &mut out,
            );
        }
        out
    };
    Some(("openinference", read(ins), read(outs)))
}

fn openllmetry(ix: &Indexed<'_>) -> Option<Found> {
    let ins = ix.messages("gen_ai.prompt");
    let outs = ix.messages("gen_ai.completion");
    if ins.is_empty() && outs.is_empty() {
        return None;
    }
    let read = |msgs: Vec<&BTreeMap<&str, &AnyValue>>, default_role: &str| {
        let mut out = Vec::new();
        for m in msgs {
            let role = s(m, "role").unwrap_or_else(|| default_role.into());
            // Multimodal content is a JSON list of parts.
            let raw = s(m, "content").unwrap_or_default();
            let text = match serde_json::from_str::<Value>(&raw) {
                Ok(v @ Value::Array(_)) => parts_text(&v),
                _ => raw,
            };
            let calls: Vec<ToolCall> = sub_indexed(m, "tool_calls")
                .values()
                .map(|c| ToolCall {
                    id: s(c, "id"),
                    name: s(c, "name").unwrap_or_else(|| "tool".into()),
                    args: args_text(&json!(s(c, "arguments").unwrap_or_default())),
                })
                .collect();
            let results = if role == "tool" {
                vec![(s(m, "tool_call_id"), text.clone())]
            } else {
                Vec::new()
            };
            let mut extra = Map::new();
            if let Some(f) = s(m, "finish_reason") {
                extra.insert("finish_reason".into(), json!(f));
            }
            push_message(&role, text, calls, results, None, extra, &mut out);
        }
        out
    };
    Some(("openllmetry", read(ins, "user"), read(outs, "assistant")))
}

fn vercel(attrs: &[&KeyValue]) -> Option<Found> {
    let prompt = json_attr(attrs, "ai.prompt.messages")?;
    let mut ins = Vec::new();
    for m in prompt.as_array().into_iter().flatten() {
        vercel_message(m, &mut ins);
    }
    let mut outs = Vec::new();
    let text = json_attr(attrs, "ai.response.text")
        .map(|v| as_text(&v))
        .unwrap_or_default();
    let calls: Vec<ToolCall> = json_attr(attrs, "ai.response.toolCalls")
        .as_ref()
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(vercel_tool_call)
        .collect();
    if !text.is_empty() || !calls.is_empty() {
        let mut extra = Map::new();
        if let Some(f) = attr_str(attrs, "ai.response.finishReason") {
            extra.insert("finish_reason".into(), json!(f));
        }
        push_message("assistant", text, calls, Vec::new(), None, extra, &mut outs);
    }
    Some(("vercel-ai", ins, outs))
}

/// One message of the AI SDK's `ai.prompt.messages`: its text parts, tool
/// calls and tool results.
fn vercel_message(m: &Value, out: &mut Vec<Message>) {
    let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    match m.get("content") {
        Some(Value::Array(parts)) => {
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(as_text(p.get("text").unwrap_or(&Value::Null))),
                    Some("tool-call") => calls.push(vercel_tool_call(p)),
                    Some("tool-result") => results.push(vercel_tool_result(p)),
                    _ => {}
                }
            }
        }
        Some(v) => texts.push(as_text(v)),
        None => {}
    }
    push_message(
        role,
        texts.join("\n"),
        calls,
        results,
        None,
        Map::new(),
        out,
    );
}

/// An AI SDK tool call (a prompt's `tool-call` part or one of
/// `ai.response.toolCalls`): `toolCallId`, `toolName`, `input` (`args`
/// before AI SDK 5).
fn vercel_tool_call(c: &Value) -> ToolCall {
    ToolCall {
        id: c
            .get("toolCallId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        name: c
            .get("toolName")
            .and_then(Value::as_str)
            .unwrap_or("tool")
            .to_owned(),
        args: args_text(
            c.get("input")
                .or_else(|| c.get("args"))
                .unwrap_or(&Value::Null),
        ),
    }
}

/// An AI SDK `tool-result` part: its call id and text (`output`, `result`
/// before AI SDK 5).
fn vercel_tool_result(p: &Value) -> (Option<String>, String) {
    let out = p
        .get("output")
        .or_else(|| p.get("result"))
        .unwrap_or(&Value::Null);
    // AI SDK 5 wraps results: {"type": "json"|"text", "value": …}.
    let out = match out {
        Value::Object(o) if o.contains_key("value") && o.contains_key("type") => &o["value"],
        other => other,
    };
    (
        p.get("toolCallId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        as_text(out),
    )
}

/// Messages carried by events: the `operation.details` event (semconv ≥
/// 1.37) or the per-message events before it.
fn from_events(events: &[Event<'_>]) -> Option<Found> {
    for e in events {
        if e.name == "gen_ai.client.inference.operation.details" {
            let mut attrs: Vec<KeyValue> = e.attrs.to_vec();
            if let Some(AnyValue {
                value:
                    Some(opentelemetry_proto::tonic::common::v1::any_value::Value::KvlistValue(kv)),
            }) = e.body
            {
                attrs.extend(kv.values.iter().cloned());
            }
            let refs: Vec<&KeyValue> = attrs.iter().collect();
            if let Some(found) = semconv(&refs) {
                return Some(found);
            }
        }
    }
    let mut ins = Vec::new();
    let mut choices: Vec<(i64, Message)> = Vec::new();
    let mut any = false;
    for e in events {
        let role = match e.name.as_str() {
            "gen_ai.system.message" => "system",
            "gen_ai.user.message" => "user",
            "gen_ai.assistant.message" => "assistant",
            "gen_ai.tool.message" => "tool",
            "gen_ai.choice" => "choice",
            _ => continue,
        };
        any = true;
        let body = event_body(e);
        if role == "choice" {
            let index = body.get("index").and_then(Value::as_i64).unwrap_or(0);
            let msg = body.get("message").cloned().unwrap_or(Value::Null);
            let mut extra = Map::new();
            if let Some(f) = body.get("finish_reason") {
                extra.insert("finish_reason".into(), f.clone());
            }
            let mut out = Vec::new();
            old_message("assistant", &msg, extra, &mut out);
            for m in out {
                choices.push((index, m.at(Some(e.time))));
            }
        } else {
            let role = body
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or(role)
                .to_owned();
            old_message(&role, &body, Map::new(), &mut ins);
        }
    }
    if !any {
        return None;
    }
    choices.sort_by_key(|(i, _)| *i);
    Some((
        "gen_ai-events",
        ins,
        choices.into_iter().map(|(_, m)| m).collect(),
    ))
}

/// The body of an event: the log record's body, or the span event's
/// attributes (`gen_ai.event.content` as JSON where an SDK put it there).
fn event_body(e: &Event<'_>) -> Value {
    if let Some(b) = e.body {
        let v = any_json(b);
        return match v {
            Value::String(s) => serde_json::from_str(&s).unwrap_or(json!({"content": s})),
            other => other,
        };
    }
    let refs: Vec<&KeyValue> = e.attrs.iter().collect();
    if let Some(v) = json_attr(&refs, "gen_ai.event.content") {
        return v;
    }
    let mut o = Map::new();
    for kv in e.attrs {
        o.insert(
            kv.key.clone(),
            kv.value.as_ref().map_or(Value::Null, any_json),
        );
    }
    Value::Object(o)
}

/// One message in the shape of the ≤ 1.36 events (and OpenAI's API):
/// `content` (a string or parts), `tool_calls` (`{id, function: {name,
/// arguments}}`), a tool message's `id`.
fn old_message(role: &str, body: &Value, extra: Map<String, Value>, out: &mut Vec<Message>) {
    let text = parts_text(body.get("content").unwrap_or(&Value::Null));
    let calls: Vec<ToolCall> = body
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            let f = c.get("function").unwrap_or(c);
            ToolCall {
                id: c.get("id").and_then(Value::as_str).map(str::to_owned),
                name: f
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool")
                    .to_owned(),
                args: args_text(f.get("arguments").unwrap_or(&Value::Null)),
            }
        })
        .collect();
    let results = if role == "tool" {
        vec![(
            body.get("id")
                .or_else(|| body.get("tool_call_id"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            text.clone(),
        )]
    } else {
        Vec::new()
    };
    push_message(role, text, calls, results, None, extra, out);
}
