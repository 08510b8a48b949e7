//! What the model saw: a recorded LLM request (OpenAI chat completions,
//! the Responses API, Anthropic Messages) rendered as the conversation it
//! carries, and a response as the assistant's answer (a stream from its
//! assembled form), with model, tokens, latency, cost and status. The
//! message lists and stream assembly are `convo_llm::wire`'s (the
//! proxy's own); which API a body speaks, its tokens and its cost are
//! read by `convo_llm::api` and `convo_llm::usage` (the one reader, the
//! CLI's too).

use super::json;
use super::*;
use convo_llm::api::{is_sse, request_api, response_api, stream_api};
pub(crate) use convo_llm::usage::{Call, prices, usd};
use convo_llm::wire::{self, Api};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

/// A session's (or timeline's) figures, summed over its response nodes.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Totals {
    pub(crate) calls: u64,
    pub(crate) tokens_in: u64,
    pub(crate) tokens_out: u64,
    pub(crate) cost: f64,
    /// Calls whose model has no price (their cost is not in `cost`).
    pub(crate) unpriced: u64,
    pub(crate) errors: u64,
    /// Calls whose stream the upstream cut.
    pub(crate) cut: u64,
    pub(crate) turns: u64,
    pub(crate) first: Option<i64>,
    pub(crate) last: Option<i64>,
}

impl Totals {
    /// Adds one node.
    pub(crate) fn add(&mut self, kind: Kind, created_ms: i64, turn: u64, diag: &str) {
        self.first = Some(self.first.map_or(created_ms, |f| f.min(created_ms)));
        self.last = Some(self.last.map_or(created_ms, |l| l.max(created_ms)));
        self.turns = self.turns.max(turn);
        // Most nodes carry no diagnostics worth parsing.
        if kind != Kind::Response || diag.len() < 3 {
            return;
        }
        let Ok(d) = serde_json::from_str::<Value>(diag) else {
            return;
        };
        let c = Call::of(&d, None);
        if !c.is_call() {
            return;
        }
        self.calls += 1;
        if let Some(u) = c.usage {
            self.tokens_in += u.input;
            self.tokens_out += u.output;
        }
        match c.cost {
            Some(x) => self.cost += x,
            None if c.usage.is_some() => self.unpriced += 1,
            None => {}
        }
        if c.failed {
            self.errors += 1;
        }
        if c.cut.is_some() {
            self.cut += 1;
        }
    }

    /// From first to last node.
    pub(crate) fn duration_ms(&self) -> i64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        }
    }
}

/// Totals of a whole session (every timeline): one pass over its node
/// rows, no payloads; remembered per session until a head moves.
pub(crate) fn session_totals(s: &mut Store, row: &SessionRow) -> convo_store::Result<Totals> {
    /// Session id → (its timelines' heads, its totals).
    type Cache = std::sync::Mutex<HashMap<String, (Vec<String>, Totals)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let heads: Vec<String> = s
        .branches(&row.id)?
        .iter()
        .map(|b| b.head.map(|h| h.to_hex()).unwrap_or_default())
        .collect();
    let key = row.id.to_string();
    if let Ok(c) = cache.lock()
        && let Some((h, t)) = c.get(&key)
        && *h == heads
    {
        return Ok(t.clone());
    }
    let id = row.id;
    let nodes = s.read(move |tx| tx.session_nodes(&id, false))?;
    let mut t = Totals::default();
    for (n, _) in &nodes {
        // A harness kv call is not a model call.
        if super::kv::is_kv(n.node.kind.as_str(), &n.node.from, &n.node.to) {
            continue;
        }
        t.add(
            n.node.kind,
            n.node.created_at,
            n.ctx.turn,
            n.node.diagnostics.as_str(),
        );
    }
    if let Ok(mut c) = cache.lock() {
        if c.len() > 4096 {
            c.clear();
        }
        c.insert(key, (heads, t.clone()));
    }
    Ok(t)
}

pub(crate) fn ms(x: i64) -> String {
    if x < 1000 {
        format!("{x} ms")
    } else if x < 60_000 {
        format!("{:.1} s", x as f64 / 1000.0)
    } else if x < 3_600_000 {
        format!("{} min {} s", x / 60_000, (x % 60_000) / 1000)
    } else {
        format!("{} h {} min", x / 3_600_000, (x % 3_600_000) / 60_000)
    }
}

// ----- messages ----------------------------------------------------------

/// One piece of a message.
#[derive(Debug)]
enum Part {
    Text(String),
    Thinking(String),
    ToolCall {
        id: String,
        name: String,
        /// The arguments as the call wrote them (a JSON string for OpenAI,
        /// the input object re-serialized for Anthropic).
        args: String,
    },
    ToolResult {
        id: String,
        parts: Vec<Part>,
        error: bool,
    },
    /// An image: its URL when it has one, else what it is.
    Image {
        url: Option<String>,
        what: String,
    },
    Other(Value),
}

/// A message of a conversation.
#[derive(Debug)]
struct Msg {
    role: String,
    parts: Vec<Part>,
}

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn image(url: Option<&str>, what: &str) -> Part {
    match url {
        Some(u) if u.starts_with("data:") => Part::Image {
            url: None,
            what: format!(
                "{} image, {} bytes inline",
                u.get(5..)
                    .and_then(|r| r.split([';', ',']).next())
                    .unwrap_or("an"),
                u.len()
            ),
        },
        Some(u) => Part::Image {
            url: Some(u.to_owned()),
            what: what.to_owned(),
        },
        None => Part::Image {
            url: None,
            what: what.to_owned(),
        },
    }
}

fn parts(c: Option<&Value>) -> Vec<Part> {
    match c {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(t)) => vec![Part::Text(t.clone())],
        Some(Value::Array(blocks)) => blocks.iter().map(block).collect(),
        Some(other) => vec![Part::Other(other.clone())],
    }
}

fn block(b: &Value) -> Part {
    let t = b.get("type").and_then(Value::as_str).unwrap_or("");
    match t {
        "text" | "input_text" | "output_text" => Part::Text(s(b.get("text"))),
        "refusal" => Part::Text(s(b.get("refusal"))),
        "thinking" => Part::Thinking(s(b.get("thinking"))),
        "redacted_thinking" => Part::Thinking("(redacted thinking)".into()),
        "tool_use" | "server_tool_use" => Part::ToolCall {
            id: s(b.get("id")),
            name: s(b.get("name")),
            args: b
                .get("input")
                .map(|i| serde_json::to_string_pretty(i).unwrap_or_default())
                .unwrap_or_default(),
        },
        "tool_result" => Part::ToolResult {
            id: s(b.get("tool_use_id")),
            parts: parts(b.get("content")),
            error: b.get("is_error").and_then(Value::as_bool) == Some(true),
        },
        "image_url" => image(
            b.get("image_url")
                .and_then(|u| u.get("url").or(Some(u)))
                .and_then(Value::as_str),
            "image",
        ),
        "input_image" => image(
            b.get("image_url").and_then(Value::as_str),
            &format!("image {}", s(b.get("file_id"))),
        ),
        "image" => {
            let src = b.get("source");
            match src.and_then(|x| x.get("type")).and_then(Value::as_str) {
                Some("url") => image(
                    src.and_then(|x| x.get("url")).and_then(Value::as_str),
                    "image",
                ),
                _ => Part::Image {
                    url: None,
                    what: format!(
                        "{} image, {} bytes inline",
                        s(src.and_then(|x| x.get("media_type"))),
                        s(src.and_then(|x| x.get("data"))).len()
                    ),
                },
            }
        }
        _ => Part::Other(b.clone()),
    }
}

/// A message or Responses API item in the shape the page shows.
fn msg(m: &Value) -> Msg {
    match m.get("type").and_then(Value::as_str) {
        Some("function_call" | "custom_tool_call") => {
            return Msg {
                role: "assistant".into(),
                parts: vec![Part::ToolCall {
                    id: s(m.get("call_id")),
                    name: s(m.get("name")),
                    args: s(m.get("arguments").or_else(|| m.get("input"))),
                }],
            };
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let out = m.get("output");
            return Msg {
                role: "tool".into(),
                parts: vec![Part::ToolResult {
                    id: s(m.get("call_id")),
                    parts: parts(out),
                    error: false,
                }],
            };
        }
        Some("reasoning") => {
            let text: Vec<String> = m
                .get("summary")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(|x| s(x.get("text"))).collect())
                .unwrap_or_default();
            return Msg {
                role: "assistant".into(),
                parts: vec![Part::Thinking(if text.is_empty() {
                    "(reasoning, not shown by the API)".into()
                } else {
                    text.join("\n\n")
                })],
            };
        }
        _ => {}
    }
    let Some(role) = m.get("role").and_then(Value::as_str) else {
        return Msg {
            role: "item".into(),
            parts: vec![Part::Other(m.clone())],
        };
    };
    let mut ps = Vec::new();
    if let Some(r) = m.get("reasoning_content").and_then(Value::as_str) {
        ps.push(Part::Thinking(r.to_owned()));
    }
    if role == "tool" {
        ps.push(Part::ToolResult {
            id: s(m.get("tool_call_id")),
            parts: parts(m.get("content")),
            error: false,
        });
    } else {
        ps.extend(parts(m.get("content")));
    }
    for c in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let f = c.get("function");
        ps.push(Part::ToolCall {
            id: s(c.get("id")),
            name: s(f.and_then(|f| f.get("name"))),
            args: s(f.and_then(|f| f.get("arguments"))),
        });
    }
    if let Some(Value::String(r)) = m.get("refusal") {
        ps.push(Part::Text(r.clone()));
    }
    Msg {
        role: role.to_owned(),
        parts: ps,
    }
}

/// A parsed request: its messages (system prompts first) and settings.
struct Request {
    api: Api,
    model: Option<String>,
    msgs: Vec<Msg>,
    tools: Vec<String>,
    stream: bool,
}

/// JSON text as a value. A number outside f64 (`1e400`, which serde_json
/// refuses) becomes a string of its own text, so the rest of the body
/// still reads as a call (its messages, its tokens).
pub(crate) fn lenient_json(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    let mut changed = false;
    while i < b.len() {
        let start = i;
        if b[i] == b'"' {
            i += 1;
            while i < b.len() {
                match b[i] {
                    b'\\' => i += 2,
                    b'"' => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
            out.push_str(text.get(start..i.min(b.len()))?);
        } else if b[i] == b'-' || b[i].is_ascii_digit() {
            while i < b.len() && matches!(b[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                i += 1;
            }
            let tok = &text[start..i];
            if tok.parse::<f64>().is_ok_and(f64::is_infinite) {
                out.push('"');
                out.push_str(tok);
                out.push('"');
                changed = true;
            } else {
                out.push_str(tok);
            }
        } else {
            // Structure and white space: ASCII up to the next string or number.
            while i < b.len() && b[i] != b'"' && b[i] != b'-' && !b[i].is_ascii_digit() {
                i += 1;
            }
            out.push_str(text.get(start..i)?);
        }
    }
    if !changed {
        return None;
    }
    serde_json::from_str(&out).ok()
}

fn parse_request(diag: &Value, text: &str) -> Option<Request> {
    let v: Value = lenient_json(text)?;
    // A bare list of messages (as some importers record a call).
    if let Value::Array(items) = &v {
        if items
            .iter()
            .all(|m| m.get("role").is_some() || m.get("type").is_some())
            && !items.is_empty()
        {
            return Some(Request {
                api: Api::Chat,
                model: diag.get("model").and_then(Value::as_str).map(str::to_owned),
                msgs: items.iter().map(msg).collect(),
                tools: Vec::new(),
                stream: false,
            });
        }
        return None;
    }
    let api = request_api(diag, &v);
    let list = wire::messages(api, Some(&v))?;
    let mut msgs = Vec::new();
    if let Some(i) = v.get("instructions").filter(|i| !i.is_null()) {
        msgs.push(Msg {
            role: "system".into(),
            parts: parts(Some(i)),
        });
    }
    msgs.extend(list.iter().map(msg));
    let tools = v
        .get("tools")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    s(t.get("name")
                        .or_else(|| t.get("function")?.get("name"))
                        .or_else(|| t.get("type")))
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Request {
        api,
        model: wire_model(&v),
        msgs,
        tools,
        stream: v.get("stream").and_then(Value::as_bool) == Some(true),
    })
}

fn wire_model(v: &Value) -> Option<String> {
    v.get("model")?.as_str().map(str::to_owned)
}

/// The answer a response body holds: messages, why it stopped, and the
/// body parsed (assembled from the stream for a stream).
fn parse_response(diag: &Value, text: &str) -> Option<(Vec<Msg>, Option<String>, Value)> {
    let v: Value = if is_sse(text) {
        match diag.get("assembled").filter(|a| a.is_object()) {
            Some(a) => a.clone(),
            None => wire::assemble(stream_api(text), text.as_bytes())?,
        }
    } else {
        lenient_json(text)?
    };
    if let Some(e) = v.get("error").filter(|e| !e.is_null()) {
        let m = e
            .get("message")
            .map_or_else(|| e.to_string(), |m| s(Some(m)));
        return Some((
            vec![Msg {
                role: "error".into(),
                parts: vec![Part::Text(m)],
            }],
            None,
            v,
        ));
    }
    let (msgs, stop) = match response_api(&v) {
        Api::Chat => {
            let choices = v.get("choices").and_then(Value::as_array);
            let msgs = choices
                .into_iter()
                .flatten()
                .filter_map(|c| c.get("message").map(msg))
                .collect();
            let stop = choices
                .and_then(|c| c.first())
                .and_then(|c| c.get("finish_reason"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            (msgs, stop)
        }
        Api::Messages => (
            vec![msg(&v)],
            v.get("stop_reason")
                .and_then(Value::as_str)
                .map(str::to_owned),
        ),
        Api::Responses => {
            let items = v.get("output").and_then(Value::as_array);
            let mut msgs: Vec<Msg> = Vec::new();
            for m in items.into_iter().flatten().map(msg) {
                // Consecutive items of one assistant turn read as one message.
                match msgs.last_mut() {
                    Some(prev) if prev.role == m.role => prev.parts.extend(m.parts),
                    _ => msgs.push(m),
                }
            }
            (
                msgs,
                v.get("status").and_then(Value::as_str).map(str::to_owned),
            )
        }
        _ => return None,
    };
    Some((msgs, stop, v))
}

// ----- rendering ---------------------------------------------------------

/// Text as Markdown; a text that is a JSON object or array (a tool's
/// output, often) as a JSON tree.
fn text_view(t: &str) -> Markup {
    if let Some(tree) = json::view(t) {
        return tree;
    }
    html! { div.md { (PreEscaped(markdown::render(t))) } }
}

fn args_view(a: &str) -> Markup {
    match json::parse(a) {
        Some(v @ (json::J::Obj(..) | json::J::Arr(..))) => json::tree(&v),
        _ => html! { pre { (a) } },
    }
}

fn part_view(p: &Part) -> Markup {
    html! {
        @match p {
            Part::Text(t) => (text_view(t)),
            Part::Thinking(t) => {
                details.thinking { summary { "thinking" } div.md { (PreEscaped(markdown::render(t))) } }
            }
            Part::ToolCall { id, name, args } => {
                div.toolcall {
                    div.tl { "tool call " b { bdi { (name) } } @if !id.is_empty() { " " span.mono.callid { bdi { (id) } } } }
                    (args_view(args))
                }
            }
            Part::ToolResult { id, parts, error } => {
                div class=(if *error { "toolresult error" } else { "toolresult" }) {
                    div.tl { @if *error { "tool error" } @else { "tool result" } @if !id.is_empty() { " for " span.mono.callid { bdi { (id) } } } }
                    @for q in parts { (part_view(q)) }
                }
            }
            Part::Image { url: Some(u), what } => {
                @if u.starts_with("https://") || u.starts_with("http://") {
                    p.image { a href=(u) rel="noopener noreferrer nofollow" target="_blank" { (what) ": " bdi { (u) } } }
                } @else {
                    p.image { (what) ": " bdi { (u) } }
                }
            }
            Part::Image { url: None, what } => { p.image { (what) } }
            Part::Other(v) => {
                @let t = serde_json::to_string_pretty(v).unwrap_or_default();
                (args_view(&t))
            }
        }
    }
}

/// A coding agent's tool call or result as the agent readers import it
/// (`convo_formats::records::tool_call_text`: `$ command` for a shell
/// call, a `--- path`/`+++ path` diff for an edit, `fetch URL`, a task's
/// prompt; a result is the tool's output), shown as what it is: the
/// command, the diff with its lines marked, the URL as text (never a
/// link), the output. Diagnostics `role` says which (`tool_call` to a
/// tool, `tool`); `None` for any other node.
pub(super) fn agent_tool_view(n: &NodeView, text: &str) -> Option<Markup> {
    let role = n.diagnostics.get("role").and_then(Value::as_str)?;
    let call_id = n
        .diagnostics
        .pointer("/extra/call_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    match (n.kind.as_str(), role) {
        ("request", "tool_call") if n.to == "user" => {
            Some(html! { div.md { (PreEscaped(markdown::render(text))) } })
        }
        ("request", "tool_call") => {
            let body = if let Some(cmd) = text.strip_prefix("$ ") {
                html! { pre.shell { span.prompt { "$ " } (cmd) } }
            } else if text.starts_with("--- ") && text.contains("\n+++ ") {
                html! {
                    pre.diff {
                        @for l in text.lines() {
                            @let class = if l.starts_with("+++") || l.starts_with("---") {
                                "file"
                            } else if l.starts_with('+') {
                                "add"
                            } else if l.starts_with('-') {
                                "del"
                            } else if l.starts_with("@@") {
                                "hunk"
                            } else {
                                "ctx"
                            };
                            span class=(class) { (l) } "\n"
                        }
                    }
                }
            } else if let Some(url) = text.strip_prefix("fetch ").filter(|u| !u.contains('\n')) {
                html! { p.fetch { "fetch " span.mono { bdi { (url) } } } }
            } else {
                args_view(text)
            };
            Some(html! {
                div.toolcall.agent {
                    div.tl { "tool call " b { bdi { (n.to) } } @if !call_id.is_empty() { " " span.mono.callid { bdi { (call_id) } } } }
                    (body)
                }
            })
        }
        ("response", "tool") => {
            let error = n
                .diagnostics
                .pointer("/extra/status")
                .and_then(Value::as_str)
                == Some("error")
                || n.diagnostics
                    .pointer("/extra/is_error")
                    .and_then(Value::as_bool)
                    == Some(true);
            Some(html! {
                div class=(if error { "toolresult agent error" } else { "toolresult agent" }) {
                    div.tl { @if error { "tool error from " } @else { "tool result from " } b { bdi { (n.from) } } }
                    pre.output { (text) }
                }
            })
        }
        _ => None,
    }
}

fn conversation(msgs: &[Msg]) -> Markup {
    html! {
        div.convo {
            @for m in msgs {
                div class=(format!("msg r-{}", css_word(&m.role))) {
                    div.role { (m.role) }
                    @for p in &m.parts { (part_view(p)) }
                }
            }
        }
    }
}

/// A role as a CSS class word (letters only).
fn css_word(s: &str) -> String {
    s.chars()
        .filter(char::is_ascii_alphanumeric)
        .take(20)
        .collect()
}

fn chips(c: &Call, stop: Option<&str>) -> Markup {
    html! {
        @if let Some(m) = &c.model { span.diag { "model " bdi { (m) } } }
        @if let Some(u) = c.usage {
            span.diag title=(format!("{} cached, {} written to cache", u.cached, u.cache_write)) { "tokens " (u.input) " in · " (u.output) " out" }
        }
        @if let Some(x) = c.cost { span.diag.cost title=(prices().map(|p| p.source.as_str()).unwrap_or("")) { (usd(x)) } }
        @if let Some(l) = c.latency_ms { span.diag { (ms(l as i64)) @if let Some(t) = c.ttft_ms { " (first byte " (ms(t as i64)) ")" } } }
        @if let Some(st) = c.status { span class=(if c.failed { "diag status bad" } else { "diag status" }) { "HTTP " (st) } }
        @else if c.failed { span.diag.status.bad { "failed" } }
        @if let Some(why) = &c.cut { span.diag.status.bad.cut title=(why) { "stream cut: partial answer" } }
        @if let Some(s) = stop { span.diag { "stop " bdi { (s) } } }
    }
}

/// The raw bytes, as a JSON tree when they are JSON.
pub(super) fn raw_view(n: &NodeView, text: &str) -> Markup {
    html! {
        details.raw {
            summary { "raw " (n.kind) " · " (n.payload_len) " bytes" }
            p.rawlinks { a href=(format!("/api/v1/nodes/{}/payload", n.hash)) { "download the exact bytes" } }
            @match json::view(text) { Some(t) => (t), None => pre { (text) } }
        }
    }
}

/// A request node: a summary line, the context window (open on the node
/// page, one click away in the timeline) and the raw body. `None` when
/// the payload is not an LLM request.
pub(super) fn request_view(n: &NodeView, text: &str, full: bool) -> Option<Markup> {
    let r = parse_request(&n.diagnostics, text)?;
    let api = match r.api {
        Api::Other => "chat",
        a => a.as_str(),
    };
    Some(html! {
        div.call {
            div.callhead {
                span.diag { (api) }
                @if let Some(m) = &r.model { span.diag { "model " bdi { (m) } } }
                span.diag { (r.msgs.len()) " messages" }
                @if !r.tools.is_empty() { span.diag title=(r.tools.join(", ")) { (r.tools.len()) " tools" } }
                @if r.stream { span.diag { "stream" } }
            }
            details.context open[full] {
                summary { "context window: " (r.msgs.len()) " messages the model saw" }
                (conversation(&r.msgs))
            }
            (raw_view(n, text))
        }
    })
}

/// A response node: the answer as messages, the call's figures and the
/// raw bytes (a stream's events, and its assembled form).
pub(super) fn response_view(n: &NodeView, text: &str) -> Option<Markup> {
    let (msgs, stop, body) = parse_response(&n.diagnostics, text)?;
    let c = Call::of(&n.diagnostics, Some(&body));
    let streamed = is_sse(text);
    Some(html! {
        div.call {
            div.callhead { (chips(&c, stop.as_deref())) @if streamed { span.diag { "streamed" } } }
            (conversation(&msgs))
            @if streamed {
                details.raw {
                    summary { "assembled from the stream" }
                    @let a = serde_json::to_string_pretty(&body).unwrap_or_default();
                    @match json::view(&a) { Some(t) => (t), None => pre { (a) } }
                }
            }
            (raw_view(n, text))
        }
    })
}

/// The text a response answered with (its messages' text parts, joined),
/// to tell a `complete` that only repeats it.
pub(super) fn answer_text(n: &NodeView) -> Option<String> {
    let text = super::session::payload_text(n)?;
    let (msgs, _, _) = parse_response(&n.diagnostics, text)?;
    let parts: Vec<&str> = msgs
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

/// An invoke's or complete's payload when it is messages (the proxy
/// records a turn's new input, or an answer that is not only text, as the
/// API's message JSON): shown as a conversation.
pub(super) fn messages_view(text: &str) -> Option<Markup> {
    let t = text.trim_start();
    if !(t.starts_with('[') || t.starts_with('{')) {
        return None;
    }
    let v: Value = lenient_json(t)?;
    let is_msg = |m: &Value| {
        m.get("role").and_then(Value::as_str).is_some()
            || matches!(
                m.get("type").and_then(Value::as_str),
                Some("function_call" | "function_call_output" | "reasoning" | "message")
            )
    };
    let msgs: Vec<Msg> = match &v {
        Value::Array(items) if !items.is_empty() && items.iter().all(is_msg) => {
            items.iter().map(msg).collect()
        }
        Value::Object(_) if is_msg(&v) => vec![msg(&v)],
        _ => return None,
    };
    Some(html! {
        (conversation(&msgs))
        details.raw { summary { "as recorded" } @match json::view(text) { Some(t) => (t), None => pre { (text) } } }
    })
}

/// Data attributes a response node carries for the page's live totals.
pub(super) fn figures(n: &NodeView) -> Option<(u64, u64, f64, bool)> {
    if n.kind != "response" || super::kv::is_kv_view(n) {
        return None;
    }
    let c = Call::of(&n.diagnostics, None);
    c.is_call().then(|| {
        let u = c.usage.unwrap_or_default();
        (
            u.input,
            u.output,
            c.cost.unwrap_or(0.0),
            c.failed || c.cut.is_some(),
        )
    })
}

/// The session's figures as a line of chips.
pub(super) fn totals_view(t: &Totals) -> Markup {
    html! {
        p.totals id="totals" data-tin=(t.tokens_in) data-tout=(t.tokens_out) data-cost=(t.cost) data-errors=(t.errors) {
            span.diag { b #t-calls { (t.calls) } " LLM calls" }
            span.diag { "tokens " b #t-tin { (t.tokens_in) } " in · " b #t-tout { (t.tokens_out) } " out" }
            span.diag.cost title=(prices().map(|p| p.source.as_str()).unwrap_or("")) {
                "cost " b #t-cost { (usd(t.cost)) }
                @if t.unpriced > 0 { " (+" (t.unpriced) " calls of unpriced models)" }
            }
            span.diag { "duration " (ms(t.duration_ms())) }
            span class=(if t.errors > 0 { "diag status bad" } else { "diag status" }) { b #t-errors { (t.errors) } " errors" }
            @if t.cut > 0 { span.diag.status.bad.cut { b #t-cut { (t.cut) } " streams cut" } }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(m: Markup) -> String {
        m.into_string()
    }

    #[test]
    fn coding_agents_tool_calls_read_as_what_they_are() {
        let nv = |kind: &str, from: &str, to: &str, diag: Value| -> NodeView {
            serde_json::from_value(json!({
                "hash": "ab", "seq": 1, "parent": null, "kind": kind, "session": "s", "submission": null,
                "sequence": null, "from": from, "to": to, "payload_sha256": "x", "payload_len": 1,
                "payload": null, "payload_encoding": null, "diagnostics": diag, "state": null,
                "created_at": "t", "depth": 1
            }))
            .unwrap()
        };
        let call = |to: &str| {
            nv(
                "request",
                "claude",
                to,
                json!({"role": "tool_call", "extra": {"call_id": "toolu_1"}}),
            )
        };
        let h = rendered(agent_tool_view(&call("Bash"), "$ ls <b>").unwrap());
        assert!(
            h.contains("pre class=\"shell\"")
                && h.contains("ls &lt;b&gt;")
                && h.contains("toolu_1"),
            "{h}"
        );
        let diff = "--- /p/a.rs\n+++ /p/a.rs\n-old <i>\n+new\n";
        let h = rendered(agent_tool_view(&call("Edit"), diff).unwrap());
        assert!(
            h.contains("class=\"del\">-old &lt;i&gt;") && h.contains("class=\"add\">+new"),
            "{h}"
        );
        let h = rendered(agent_tool_view(&call("WebFetch"), "fetch javascript:alert(1)").unwrap());
        assert!(
            h.contains("fetch ") && !h.contains("href"),
            "a URL is text, never a link: {h}"
        );
        let r = nv(
            "response",
            "Bash",
            "claude",
            json!({"role": "tool", "extra": {"status": "error"}}),
        );
        let h = rendered(agent_tool_view(&r, "boom").unwrap());
        assert!(
            h.contains("tool error from") && h.contains("Bash") && h.contains("boom"),
            "{h}"
        );
        // Not an imported tool call: the generic view.
        assert!(agent_tool_view(&nv("request", "a", "b", json!({})), "$ ls").is_none());
    }

    #[test]
    fn each_api_reads_as_a_conversation() {
        let nv = |kind: &str, diag: Value| {
            NodeView {
            kind: kind.into(),
            diagnostics: diag,
            ..serde_json::from_value(json!({
                "hash": "ab", "seq": 1, "parent": null, "kind": kind, "session": "s", "submission": null,
                "sequence": null, "from": "a", "to": "b", "payload_sha256": "x", "payload_len": 1,
                "payload": null, "payload_encoding": null, "diagnostics": {}, "state": null,
                "created_at": "t", "depth": 1
            }))
            .unwrap()
        }
        };
        // OpenAI chat with a tool call and its result.
        let chat = r#"{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief <b>"},{"role":"user","content":[{"type":"text","text":"Weather?"},{"type":"image_url","image_url":{"url":"https://e.com/a.png"}}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"n\":12345678901234567890123}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"18C"}],"tools":[{"type":"function","function":{"name":"get_weather"}}]}"#;
        let h = rendered(
            request_view(&nv("request", json!({"api": "openai.chat"})), chat, true).unwrap(),
        );
        assert!(
            h.contains("r-system") && h.contains("Be brief &lt;b&gt;"),
            "{h}"
        );
        assert!(h.contains("get_weather") && h.contains("12345678901234567890123"));
        assert!(h.contains("href=\"https://e.com/a.png\""));
        assert!(h.contains("tool result") && h.contains("18C"));
        assert!(h.contains("4 messages") && h.contains("1 tools"));
        // Anthropic, sniffed from the shape: system, thinking, tool use.
        let anth = r#"{"model":"claude-x","max_tokens":10,"system":[{"type":"text","text":"You are terse"}],"messages":[{"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"thinking","thinking":"hmm"},{"type":"tool_use","id":"tu_1","name":"calc","input":{"x":1}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu_1","content":[{"type":"text","text":"2"}],"is_error":true},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}]}"#;
        let h = rendered(request_view(&nv("request", json!({})), anth, false).unwrap());
        assert!(
            h.contains("anthropic.messages") && h.contains("You are terse"),
            "{h}"
        );
        assert!(h.contains("thinking") && h.contains("calc") && h.contains("tool error"));
        assert!(h.contains("image/png image"));
        // Responses API: instructions, function call output.
        let resp = r#"{"model":"gpt-4o","instructions":"sys","input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c9","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c9","output":"done"}]}"#;
        let h = rendered(request_view(&nv("request", json!({})), resp, false).unwrap());
        assert!(
            h.contains("openai.responses") && h.contains("4 messages") && h.contains("done"),
            "{h}"
        );
        // A streamed chat answer, assembled here (no `assembled` recorded).
        let sse = "data: {\"id\":\"c\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\ndata: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\ndata: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        let h = rendered(
            response_view(
                &nv("response", json!({"status": 200, "latency_ms": 1500})),
                sse,
            )
            .unwrap(),
        );
        assert!(
            h.contains("Hello") && h.contains("streamed") && h.contains("stop <bdi>stop</bdi>"),
            "{h}"
        );
        assert!(h.contains("tokens 3 in · 2 out") && h.contains("1.5 s") && h.contains("HTTP 200"));
        // An Anthropic answer and an error.
        let h = rendered(response_view(&nv("response", json!({"status": 200})), r#"{"type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#).unwrap());
        assert!(h.contains("ok") && h.contains("end_turn"), "{h}");
        let h = rendered(
            response_view(
                &nv("response", json!({"status": 429})),
                r#"{"error":{"message":"slow down"}}"#,
            )
            .unwrap(),
        );
        assert!(h.contains("slow down") && h.contains("status bad"), "{h}");
        assert!(request_view(&nv("request", json!({})), "{\"kv\":1}", false).is_none());
    }

    #[test]
    fn totals_sum_calls_and_errors() {
        let mut t = Totals::default();
        t.add(Kind::Invoke, 1000, 1, "{}");
        t.add(Kind::Response, 2000, 1, r#"{"model":"gpt-4o","status":200,"usage":{"prompt_tokens":100,"completion_tokens":10}}"#);
        t.add(
            Kind::Response,
            5000,
            2,
            r#"{"model":"nobody-knows","status":500,"usage":{"input_tokens":1,"output_tokens":1}}"#,
        );
        assert_eq!(
            (
                t.calls,
                t.tokens_in,
                t.tokens_out,
                t.errors,
                t.unpriced,
                t.turns
            ),
            (2, 101, 11, 1, 1, 2)
        );
        assert!(t.cost > 0.0);
        assert_eq!(t.duration_ms(), 4000);
    }
}
