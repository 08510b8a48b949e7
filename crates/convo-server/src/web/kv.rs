//! A harness `kv` call shown as what it is: the agent reading or writing
//! its state (`request` agent → `kv` with diagnostics `{op, key}` or
//! `{op, prefix}` and, for a put, the value as payload; `response` kv →
//! agent with `{status, state}` and the value or the keys). Not a model
//! call: no conversation, no tokens, not counted among the LLM calls, not
//! offered for a re-run.

use super::*;

/// The service name the harness records its state calls under.
pub(super) const KV: &str = "kv";

/// Whether a node is one side of a harness kv call.
pub(crate) fn is_kv(kind: &str, from: &str, to: &str) -> bool {
    (kind == "request" && to == KV) || (kind == "response" && from == KV)
}

/// [`is_kv`] of a node as the pages hold it.
pub(super) fn is_kv_view(n: &NodeView) -> bool {
    is_kv(n.kind.as_str(), &n.from, &n.to)
}

/// The kv call's line: op and key, the value written or read, the status
/// and the state root it left.
pub(super) fn kv_view(n: &NodeView) -> Markup {
    let d = &n.diagnostics;
    let s = |k: &str| d.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let text = super::session::payload_text(n);
    let value = html! {
        @if n.payload_len > 0 {
            @match text {
                Some(t) => { pre.kv-value { (t) } }
                None => { span.diag { (n.payload_len) " bytes" } }
            }
        }
    };
    if n.kind == "request" {
        let op = s("op").unwrap_or_else(|| "call".into());
        html! {
            div.kv data-op=(op) {
                span.kv-op { "kv " (op) }
                @if let Some(k) = s("key") { " " code.kv-key { bdi { (k) } } }
                @if let Some(p) = s("prefix") { " keys starting with " code.kv-key { bdi { (p) } } }
                (value)
            }
        }
    } else {
        let status = d.get("status").map(|v| v.to_string()).unwrap_or_default();
        let root = s("state");
        html! {
            div.kv {
                span.diag { "status " (status) }
                @if let Some(r) = &root { " " span.diag title=(r) { "state root " span.mono { (short(r)) } } }
                (value)
            }
        }
    }
}
