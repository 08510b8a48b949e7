//! How nodes, sessions and branches look on the terminal and in `--json`.
//!
//! JSON wire format (stable): a node is an object with `hash`, `seq`,
//! `parent` (hash or null), `kind`, `session`, `submission` (or null),
//! `sequence` (or null), `from`, `to`, `payload_sha256`, `payload_len`,
//! `payload` (UTF-8 text, or null when not UTF-8), `payload_base64`-free:
//! binary payloads are shown as null with `payload_binary: true`,
//! `diagnostics` (object), `state` (or null), `created_at` (RFC 3339 UTC,
//! milliseconds), `depth`, and for fork/promote `branch`, `sealed_as`.

use convo_core::{Millis, Node};
use convo_store::{BranchRow, SessionRow, StoredNode};
use serde_json::{Value, json};

/// RFC 3339 UTC with milliseconds.
pub fn time(ms: Millis) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => format!("{ms}ms"),
    }
}

pub fn session_json(s: &SessionRow) -> Value {
    json!({
        "id": s.id.to_string(),
        "agent": s.agent,
        "title": s.title,
        "created_at": time(s.created_at),
    })
}

pub fn branch_json(b: &BranchRow) -> Value {
    json!({
        "name": b.name.as_str(),
        "head": b.head.map(|h| h.to_hex()),
        "state": b.state.map(|h| h.to_hex()),
        "sealed": b.sealed,
        "created_at": time(b.created_at),
    })
}

pub fn node_json(s: &StoredNode, payload: Option<&[u8]>) -> Value {
    let n: &Node = &s.node;
    let mut v = json!({
        "hash": s.hash.to_hex(),
        "seq": s.seq,
        "parent": n.parent.map(|h| h.to_hex()),
        "kind": n.kind.as_str(),
        "session": n.session.to_string(),
        "submission": n.submission.map(|h| h.to_hex()),
        "sequence": n.sequence,
        "from": n.from,
        "to": n.to,
        "payload_sha256": n.payload.to_hex(),
        "payload_len": n.payload_len,
        "diagnostics": n.diagnostics.to_value(),
        "state": n.state.map(|h| h.to_hex()),
        "created_at": time(n.created_at),
        "depth": s.ctx.depth,
    });
    if let Some(p) = payload {
        match std::str::from_utf8(p) {
            Ok(t) => v["payload"] = json!(t),
            Err(_) => {
                v["payload"] = Value::Null;
                v["payload_binary"] = json!(true);
            }
        }
    }
    if let Some(e) = &n.event {
        v["branch"] = json!(e.branch.as_str());
        v["sealed_as"] = json!(e.sealed_as.as_ref().map(|s| s.as_str()));
    }
    v
}

/// A one-line preview of a payload: first line, at most `max` characters.
pub fn preview(p: &[u8], max: usize) -> String {
    let Ok(t) = std::str::from_utf8(p) else {
        return format!("<{} bytes of binary>", p.len());
    };
    let line = t.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if out.len() < t.len() {
        out.push('…');
    }
    out.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// One line for a node in `log` and `session get`.
pub fn node_line(s: &StoredNode, payload: &[u8]) -> String {
    let n = &s.node;
    let mut extra = String::new();
    if let Some(seq) = n.sequence {
        extra.push_str(&format!(" #{seq}"));
    }
    if let Some(st) = n.state {
        extra.push_str(&format!(" state={}", st.short()));
    }
    if let Some(e) = &n.event {
        extra.push_str(&format!(" branch={}", e.branch));
        if let Some(s) = &e.sealed_as {
            extra.push_str(&format!(" sealed={s}"));
        }
    }
    let sub = n
        .submission
        .map(|s| s.short())
        .unwrap_or_else(|| "-".into());
    format!(
        "{} {} {:<8} {} → {}  sub={}{}  {}",
        s.hash.short(),
        time(n.created_at),
        n.kind.as_str(),
        n.from,
        n.to,
        sub,
        extra,
        preview(payload, 60)
    )
}

pub fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into())
    );
}
