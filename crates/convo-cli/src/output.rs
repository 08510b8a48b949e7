//! How nodes, sessions and branches look on the terminal and in `--json`.
//!
//! JSON shapes are the wire types of `convo-api` (documented there, message
//! by message): a node is [`convo_api::NodeView`] (payload lossless: text
//! with `"payload_encoding": "utf8"`, or base64 with `"base64"`), a session
//! [`convo_api::Session`], a branch [`convo_api::Branch`]. Listings read
//! from a timeline set each node's `turn`.

use convo_api::{Branch, Session};
use convo_core::Millis;
use convo_runtime::wire::FromStore as _;
use convo_store::{BranchRow, SessionRow, StoredNode};
use serde_json::Value;

/// RFC 3339 UTC with milliseconds.
pub fn time(ms: Millis) -> String {
    convo_api::time(ms)
}

pub fn session_json(s: &SessionRow) -> Value {
    serde_json::to_value(Session::from_store(s)).unwrap_or(Value::Null)
}

pub fn branch_json(b: &BranchRow) -> Value {
    serde_json::to_value(Branch::from_store(b)).unwrap_or(Value::Null)
}

pub fn node_json(s: &StoredNode, payload: Option<&[u8]>) -> Value {
    serde_json::to_value(convo_runtime::wire::node(s, payload)).unwrap_or(Value::Null)
}

/// How many bytes of a payload listings read for a preview.
pub const PREVIEW_BYTES: usize = 1024;

/// A one-line preview of a payload of `len` bytes of which `head` is the
/// start: its first line, at most `max` characters.
pub fn preview_of(head: &[u8], len: u64, max: usize) -> String {
    let t = match std::str::from_utf8(head) {
        Ok(t) => t,
        // Cut inside a character at the end of a prefix: text all the same.
        Err(e) if e.error_len().is_none() && (head.len() as u64) < len => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(_) => return format!("<{len} bytes of binary>"),
    };
    let line = t.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(max).collect();
    if (out.len() as u64) < len {
        out.push('…');
    }
    clean(&out)
}

/// The cells of a node's row in `log` and `session get`: turn, node,
/// time, kind, from → to, details, payload preview.
pub fn node_cells(s: &StoredNode, payload: &[u8], turn: Option<usize>) -> Vec<String> {
    node_cells_of(s, payload, payload.len() as u64, turn)
}

/// [`node_cells`] from the start of a payload of `len` bytes.
pub fn node_cells_of(s: &StoredNode, payload: &[u8], len: u64, turn: Option<usize>) -> Vec<String> {
    use crate::ui::{Style, paint};
    let n = &s.node;
    let mut what = Vec::new();
    if let Some(st) = n.state {
        what.push(paint(Style::Dim, &format!("[state {}]", st.short())));
    }
    if let Some(e) = &n.event {
        what.push(format!("branch {}", clean(e.branch.as_str())));
        if let Some(s) = &e.sealed_as {
            what.push(format!("(old main sealed as {})", clean(s.as_str())));
        }
    }
    if let Some(f) = convo_api::failure_of(n) {
        let partial = n.diagnostics.to_value().get("partial") == Some(&Value::Bool(true));
        let flag = if partial {
            format!("[{}, partial]", clean(&f))
        } else {
            format!("[{}]", clean(&f))
        };
        what.push(paint(Style::Red, &flag));
    }
    let d = n.diagnostics.to_value();
    if let Some(m) = d
        .get("mcp")
        .and_then(|m| convo_mcp::record::describe(m, d.get("error")))
    {
        what.push(clean(&m));
    }
    if n.event.is_none() || len > 0 {
        what.push(preview_of(payload, len, 60));
    }
    let kind_text = match n.sequence {
        Some(q) => format!("{} #{q}", n.kind),
        None => n.kind.to_string(),
    };
    let kind = match n.kind {
        convo_core::Kind::Invoke | convo_core::Kind::Complete => paint(Style::Bold, &kind_text),
        convo_core::Kind::Fork | convo_core::Kind::Promote => paint(Style::Magenta, &kind_text),
        _ => kind_text,
    };
    vec![
        turn.map(|t| paint(Style::Cyan, &t.to_string()))
            .unwrap_or_else(|| "-".into()),
        paint(Style::Hash, &s.hash.short()),
        paint(Style::Dim, &human_time(n.created_at)),
        kind,
        format!("{} → {}", clean(&n.from), clean(&n.to)),
        what.join(" "),
    ]
}

/// The header row over [`node_cells`].
pub fn node_header() -> Vec<String> {
    header(&["turn", "node", "time (UTC)", "kind", "from → to", "payload"])
}

/// Header cells, bold when colored.
pub fn header(names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| crate::ui::paint(crate::ui::Style::Bold, n))
        .collect()
}

/// `YYYY-MM-DD HH:MM:SS` in UTC: for people; JSON carries [`time`].
pub fn human_time(ms: Millis) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => format!("{ms}ms"),
    }
}

/// A one-line field (a name, a title) made safe for a terminal: control
/// characters, escape sequences and line breaks shown as escapes
/// (`convo_core::text::visible`).
pub fn clean(s: &str) -> String {
    convo_core::text::visible(s, convo_core::text::Newlines::Escape).into_owned()
}

/// Like [`clean`] for text of several lines: keeps line breaks and tabs.
pub fn clean_multiline(s: &str) -> String {
    convo_core::text::visible(s, convo_core::text::Newlines::Keep).into_owned()
}

/// One line for a node (`watch`): the cells of [`node_cells`] without a turn.
pub fn node_line(s: &StoredNode, payload: &[u8]) -> String {
    let mut cells = node_cells(s, payload, None);
    cells.remove(0);
    cells.retain(|c| !c.is_empty());
    cells.join("  ")
}

/// Writes `v` pretty-printed and a newline.
pub fn write_json(out: &mut impl std::io::Write, v: &Value) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".into());
    out.write_all(text.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Prints `v` on standard output; a closed pipe ends the process quietly.
pub fn print_json(v: &Value) {
    if let Err(e) = write_json(&mut std::io::stdout().lock(), v)
        && crate::ui::is_closed(&e)
    {
        std::process::exit(i32::from(crate::ui::closed_status()));
    }
}
