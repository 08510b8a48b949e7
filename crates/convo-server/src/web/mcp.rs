//! MCP messages on a session page: what `convo mcp wrap` and `convo mcp
//! proxy` record (one JSON-RPC message per node, diagnostics under `mcp`:
//! `server`, `method`, `tool`/`prompt`/`uri`, and on an answer
//! `latency_ms` and `error`) read as what they are: the method and its
//! subject, a tool call's arguments, its result's content (text, images
//! and resources by what they are), the list of tools a server offers, a
//! progress notification's figures, an error's code and message, with
//! the latency; the exact bytes one click away. Values are shown as the
//! bytes hold them (sub-trees of the recorded text, never re-serialized).

use super::json::{self, J};
use super::llm::{ms, raw_view};
use convo_api::NodeView;
use maud::{Markup, html};
use serde_json::Value;

/// An MCP request, response or notification node, readably; `None` for
/// any other node (no `mcp` diagnostics, or a payload that is not one
/// JSON message).
pub(super) fn view(n: &NodeView, text: &str) -> Option<Markup> {
    let d = n.diagnostics.get("mcp")?;
    let msg: Value = serde_json::from_str(text).ok()?;
    let raw = json::parse(text)?;
    let method = d.get("method").and_then(Value::as_str).unwrap_or("");
    let body = match n.kind.as_str() {
        "response" => answer(d, &msg, &raw),
        _ => ask(method, d, &msg, &raw),
    };
    Some(html! {
        div.call.mcp {
            div.callhead { (chips(n, d, method)) }
            (body)
            (raw_view(n, text))
        }
    })
}

/// Server, method, subject, latency and failure.
fn chips(n: &NodeView, d: &Value, method: &str) -> Markup {
    let server = d.get("server").and_then(Value::as_str).unwrap_or("");
    let subject = ["tool", "prompt", "uri"]
        .iter()
        .find_map(|k| d.get(*k).and_then(Value::as_str));
    let latency = n.diagnostics.get("latency_ms").and_then(Value::as_f64);
    let error = n.diagnostics.get("error");
    let notification = d.get("notification").and_then(Value::as_bool) == Some(true);
    html! {
        span.diag title="Model Context Protocol" { "MCP " bdi { (server) } }
        @if !method.is_empty() { span.diag.mcp-method { bdi { (method) } } }
        @if let Some(s) = subject { span.diag.mcp-subject { b { bdi { (s) } } } }
        @if notification { span.diag { "notification" } }
        @if let Some(l) = latency {
            span.diag.latency title=(format!("{l} ms")) { (latency_text(l)) }
        }
        @if let Some(e) = error {
            span.diag.status.bad { (failure_chip(e)) }
        }
    }
}

fn latency_text(l: f64) -> String {
    if l < 10.0 {
        format!("{l:.1} ms")
    } else {
        ms(l.round() as i64)
    }
}

fn failure_chip(e: &Value) -> String {
    if e.get("tool_error").is_some() {
        return "tool error".into();
    }
    match e.get("code").and_then(Value::as_i64) {
        Some(c) => format!("error {c}"),
        None => "error".into(),
    }
}

/// A member of a parsed object, by its unquoted name.
fn member<'a, 'b>(v: &'b J<'a>, name: &str) -> Option<&'b J<'a>> {
    let J::Obj(_, members) = v else { return None };
    members
        .iter()
        .find(|(k, _)| k.strip_prefix('"').and_then(|k| k.strip_suffix('"')) == Some(name))
        .map(|(_, v)| v)
}

/// A value as a tree when it is an object or array with something in it.
fn tree(v: Option<&J<'_>>) -> Option<Markup> {
    match v? {
        J::Obj(_, m) if !m.is_empty() => Some(json::tree(v?)),
        J::Arr(_, a) if !a.is_empty() => Some(json::tree(v?)),
        _ => None,
    }
}

/// A request or notification: a tool call's arguments, progress, params.
fn ask(method: &str, d: &Value, msg: &Value, raw: &J<'_>) -> Markup {
    let params = member(raw, "params");
    match method {
        "tools/call" => {
            let tool = d.get("tool").and_then(Value::as_str).unwrap_or("");
            html! {
                div.toolcall {
                    div.tl { "tool call " b { bdi { (tool) } } }
                    @match tree(params.and_then(|p| member(p, "arguments"))) {
                        Some(t) => (t),
                        None => p.tl { "no arguments" },
                    }
                }
            }
        }
        "notifications/progress" => {
            let p = &msg["params"];
            let of = p
                .get("total")
                .map(|t| format!(" of {t}"))
                .unwrap_or_default();
            html! {
                p.mcp-progress {
                    "progress " (p.get("progress").map(Value::to_string).unwrap_or_default()) (of)
                    @if let Some(m) = p.get("message").and_then(Value::as_str) { " · " bdi { (m) } }
                }
            }
        }
        _ => html! { @if let Some(t) = tree(params) { (t) } },
    }
}

/// A response: the error, a tool's result, the tools offered, or the result.
fn answer(d: &Value, msg: &Value, raw: &J<'_>) -> Markup {
    if let Some(e) = msg.get("error") {
        return html! {
            div.toolresult.error {
                div.tl { "error " (e.get("code").map(Value::to_string).unwrap_or_default()) }
                p.mcp-error { bdi { (e.get("message").and_then(Value::as_str).unwrap_or("")) } }
                @if let Some(t) = tree(member(raw, "error").and_then(|e| member(e, "data"))) { (t) }
            }
        };
    }
    let result = member(raw, "result");
    let r = &msg["result"];
    match d.get("method").and_then(Value::as_str) {
        Some("tools/call") => tool_result(r, result),
        Some("tools/list") => tools_offered(r),
        _ => html! { @if let Some(t) = tree(result) { (t) } },
    }
}

fn tool_result(r: &Value, raw: Option<&J<'_>>) -> Markup {
    let failed = r.get("isError").and_then(Value::as_bool) == Some(true);
    let items = r
        .get("content")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    html! {
        div class=(if failed { "toolresult error" } else { "toolresult" }) {
            div.tl { @if failed { "tool error" } @else { "tool result" } }
            @for c in &items { (content(c)) }
            @if let Some(t) = tree(raw.and_then(|r| member(r, "structuredContent"))) {
                div.tl { "structured content" } (t)
            }
        }
    }
}

/// One content item of a tool result.
fn content(c: &Value) -> Markup {
    let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("");
    let inline = |data: &str, mime: &str, what: &str| {
        // base64: three bytes per four characters.
        format!("{what} {mime}, {} bytes inline", data.len() / 4 * 3)
    };
    html! {
        @match s("type") {
            "text" => {
                @match json::view(s("text")) {
                    Some(t) => (t),
                    None => pre.output { (s("text")) },
                }
            }
            "image" | "audio" => p.image { (inline(s("data"), s("mimeType"), s("type"))) },
            "resource" => {
                @let res = &c["resource"];
                @let uri = res.get("uri").and_then(Value::as_str).unwrap_or("");
                p.tl { "resource " bdi.mono { (uri) } }
                @if let Some(t) = res.get("text").and_then(Value::as_str) { pre.output { (t) } }
                @if let Some(b) = res.get("blob").and_then(Value::as_str) {
                    p.image { (inline(b, res.get("mimeType").and_then(Value::as_str).unwrap_or(""), "blob")) }
                }
            }
            "resource_link" => p.tl { "resource link " bdi.mono { (s("uri")) } @if !s("name").is_empty() { " · " bdi { (s("name")) } } },
            _ => {
                @let t = serde_json::to_string_pretty(c).unwrap_or_default();
                @match json::view(&t) { Some(v) => (v), None => pre { (t) } }
            }
        }
    }
}

/// A server's tools: name and description, one line each.
fn tools_offered(r: &Value) -> Markup {
    let tools = r
        .get("tools")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    html! {
        div.tl { (tools.len()) " tools offered" }
        ul.mcp-tools {
            @for t in &tools {
                li {
                    b { bdi { (t.get("name").and_then(Value::as_str).unwrap_or("")) } }
                    @if let Some(d) = t.get("description").and_then(Value::as_str) { " — " bdi { (d) } }
                }
            }
        }
    }
}

/// An answered MCP tool call, for a turn's waterfall: its label, its
/// latency, and whether it failed (a JSON-RPC error or `isError`).
pub(super) fn tool_call(n: &NodeView) -> Option<(String, f64, bool)> {
    let d = n.diagnostics.get("mcp")?;
    if n.kind != "response" || d.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let latency = n.diagnostics.get("latency_ms").and_then(Value::as_f64)?;
    let tool = d.get("tool").and_then(Value::as_str).unwrap_or("tool");
    let label = format!("#{} tool {tool}", n.sequence.unwrap_or(0));
    Some((label, latency, n.diagnostics.get("error").is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(kind: &str, diagnostics: Value, payload: &str) -> NodeView {
        let mut n: NodeView = serde_json::from_value(json!({
            "hash": "ab".repeat(32), "seq": 1, "parent": null, "kind": kind,
            "session": "ses-x", "submission": null, "sequence": 1, "from": "a", "to": "b",
            "payload_sha256": "00", "payload_len": payload.len(), "payload": payload,
            "payload_encoding": "utf8", "diagnostics": diagnostics,
            "created_at": "2026-01-01T00:00:00Z", "depth": 1, "state": null,
        }))
        .unwrap();
        n.payload = Some(payload.to_owned());
        n
    }

    fn shown(n: &NodeView) -> String {
        view(n, n.payload.as_deref().unwrap())
            .unwrap()
            .into_string()
    }

    #[test]
    fn a_tool_call_shows_its_tool_arguments_result_latency_and_errors() {
        let d =
            json!({"mcp": {"server": "fs", "method": "tools/call", "tool": "read_file", "id": 3}});
        let call = node(
            "request",
            d.clone(),
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"/tmp/a","n":12345678901234567890}}}"#,
        );
        let h = shown(&call);
        assert!(h.contains("read_file") && h.contains("/tmp/a"), "{h}");
        assert!(
            h.contains("12345678901234567890"),
            "as the bytes hold it: {h}"
        );

        let mut d2 = d.clone();
        d2["latency_ms"] = json!(42.5);
        let ok = node(
            "response",
            d2,
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"alpha <b>"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}}"#,
        );
        let h = shown(&ok);
        assert!(
            h.contains("tool result") && h.contains("alpha &lt;b&gt;"),
            "{h}"
        );
        assert!(h.contains("42 ms") || h.contains("42.5"), "{h}");
        assert!(h.contains("image image/png, 3 bytes inline"), "{h}");

        let mut d3 = d.clone();
        d3["error"] = json!({"tool_error": "no such file"});
        let failed = node(
            "response",
            d3,
            r#"{"jsonrpc":"2.0","id":3,"result":{"isError":true,"content":[{"type":"text","text":"no such file"}]}}"#,
        );
        let h = shown(&failed);
        assert!(
            h.contains("toolresult error") && h.contains("tool error"),
            "{h}"
        );

        let mut d4 = d;
        d4["error"] = json!({"code": -32602, "message": "bad args"});
        let rpc = node(
            "response",
            d4,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad args"}}"#,
        );
        let h = shown(&rpc);
        assert!(h.contains("error -32602") && h.contains("bad args"), "{h}");
    }

    #[test]
    fn other_messages_read_as_what_they_are() {
        let list = node(
            "response",
            json!({"mcp": {"server": "s", "method": "tools/list"}}),
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"echo","description":"Echoes back"}]}}"#,
        );
        let h = shown(&list);
        assert!(
            h.contains("1 tools offered") && h.contains("Echoes back"),
            "{h}"
        );
        let progress = node(
            "request",
            json!({"mcp": {"server": "s", "method": "notifications/progress", "notification": true}}),
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":2,"total":5}}"#,
        );
        assert!(shown(&progress).contains("progress 2 of 5"));
        let model = node("request", json!({"model": "m"}), r#"{"messages":[]}"#);
        assert!(view(&model, r#"{"messages":[]}"#).is_none());
    }
}
