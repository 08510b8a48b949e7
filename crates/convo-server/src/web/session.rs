//! The session page: the timelines as a graph, one timeline's turns, its state.

use super::graph::{Lane, graph, lanes};
use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct SessionPageQuery {
    branch: Option<String>,
    cursor: Option<i64>,
}

/// Model, tokens, latency and status found in a node's diagnostics.
fn diag_summary(d: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let get = |k: &str| d.get(k).filter(|v| !v.is_null());
    let show = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(m) = get("model") {
        out.push(("model".into(), show(m)));
    }
    if let Some(u) = get("usage").or_else(|| get("tokens")) {
        if let Some(o) = u.as_object() {
            let pick = |ks: &[&str]| ks.iter().find_map(|k| o.get(*k)).map(show);
            if let Some(i) = pick(&["prompt_tokens", "input_tokens", "input"]) {
                out.push(("tokens in".into(), i));
            }
            if let Some(i) = pick(&["completion_tokens", "output_tokens", "output"]) {
                out.push(("tokens out".into(), i));
            }
        } else {
            out.push(("tokens".into(), show(u)));
        }
    }
    for k in ["latency_ms", "duration_ms", "ttft_ms"] {
        if let Some(v) = get(k) {
            out.push((k.replace('_', " "), show(v)));
        }
    }
    if let Some(s) = get("status") {
        out.push(("status".into(), show(s)));
    }
    out
}

pub(super) fn payload_text(n: &NodeView) -> Option<&str> {
    match n.payload_encoding {
        Some(PayloadEncoding::Utf8) => n.payload.as_deref(),
        _ => None,
    }
}

/// A payload as a reader wants it: JSON pretty-printed, text as Markdown
/// (rendered safely), binary as its size.
pub(super) fn payload_view(n: &NodeView, markdown_ok: bool) -> Markup {
    let Some(text) = payload_text(n) else {
        return html! { p.binary { "<" (n.payload_len) " bytes of binary> " a href=(format!("/api/v1/nodes/{}/payload", n.hash)) { "download" } } };
    };
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text)
        && (v.is_object() || v.is_array())
    {
        let pretty = serde_json::to_string_pretty(&v).unwrap_or_else(|_| text.to_owned());
        return html! { pre.json { (pretty) } };
    }
    if markdown_ok {
        html! { div.md { (PreEscaped(markdown::render(text))) } }
    } else {
        html! { pre { (text) } }
    }
}

fn node_item(sid: &str, n: &NodeView, branch: &str, sealed: bool) -> Markup {
    let kind = n.kind.as_str();
    let diag = diag_summary(&n.diagnostics);
    html! {
        article class=(format!("node {kind}")) id=(format!("n-{}", n.hash)) tabindex="0"
            data-hash=(n.hash) data-seq=(n.seq) {
            div.meta {
                span class=(format!("kind k-{kind}")) { (kind) }
                span.ends { bdi { (n.from) } " → " bdi { (n.to) } }
                @if let Some(s) = n.sequence { span.seqno { "#" (s) } }
                @for (k, v) in &diag { span.diag { (k) ": " bdi { (v) } } }
                @if let Some(b) = &n.branch { span.event { "branch " bdi { (b) } } }
                @if let Some(s) = &n.sealed_as { span.event { "sealed " bdi { (s) } } }
                time { (n.created_at) }
                a.hash href=(format!("/sessions/{sid}/nodes/{}", n.hash)) title="open this node" { (short(&n.hash)) }
                button.fork type="button" data-hash=(n.hash) title="fork a new timeline from here (f)" { "fork" }
            }
            @match kind {
                "request" | "response" => {
                    details { summary { (kind) " " (n.payload_len) " bytes" } (payload_view(n, false)) }
                }
                "fork" | "promote" => {}
                _ => { (payload_view(n, true)) }
            }
        }
        @let _ = (branch, sealed);
    }
}

pub(super) async fn session_page(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(pq): Query<SessionPageQuery>,
) -> Response {
    let branch_s = pq.branch.unwrap_or_else(|| "main".into());
    let branch = match BranchName::new(&branch_s) {
        Ok(b) => b,
        Err(e) => return error_page(StoreError::Invalid(e.to_string())),
    };
    let cursor = pq.cursor.unwrap_or(-200);
    let b2 = branch.clone();
    let data = run(&st, move |s| {
        let row = s.find_session(&q)?;
        let lanes = lanes(s, &row)?;
        let this = s.branch(&row.id, &b2)?;
        let page = api::timeline_page(s, &row.id.to_string(), &b2, cursor, 200)?;
        let state = api::state_view(s, &row.id.to_string(), &b2, None)?;
        Ok((row, lanes, this, page, state))
    })
    .await;
    let (row, lanes, this, tl, state) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let sid = row.id.to_string();
    let title = row.title.clone().unwrap_or_else(|| "(untitled)".into());
    let head = this.head.map(|h| h.to_hex()).unwrap_or_default();
    let others: Vec<&Lane> = lanes
        .iter()
        .filter(|l| l.branch.name.as_str() != branch_s)
        .collect();
    // A heading before the first node of each turn.
    let mut last = None;
    let headed: Vec<(Option<u64>, &NodeView)> = tl
        .nodes
        .iter()
        .map(|n| {
            let t = n.turn.unwrap_or(0);
            let h = (last != Some(t)).then_some(t);
            last = Some(t);
            (h, n)
        })
        .collect();
    let body = html! {
        section.session id="session" data-session=(sid) data-branch=(branch_s) data-head=(head)
            data-sealed=(if this.sealed { "1" } else { "0" }) {
            h1 { bdi { (title) } }
            p.sub {
                "agent " b { bdi { (row.agent) } } " · " span.mono { (sid) } " · created " (convo_api::time(row.created_at))
            }
            (graph(&sid, &lanes, &branch_s))
            nav.timelines {
                "Timeline: "
                @for l in &lanes {
                    @if l.branch.name.as_str() == branch_s {
                        strong { bdi { (l.branch.name.as_str()) } @if l.branch.sealed { " (sealed)" } }
                    } @else {
                        a href=(session_url(&sid, Some(l.branch.name.as_str()))) { bdi { (l.branch.name.as_str()) } @if l.branch.sealed { " (sealed)" } }
                    }
                    " "
                }
            }
            div.actions {
                @if branch_s != "main" && !this.sealed {
                    button id="promote" type="button" data-branch=(branch_s) { "Promote " bdi { (branch_s) } " to main" }
                }
                @if !others.is_empty() {
                    form.diff action=(format!("/sessions/{sid}/diff")) method="get" {
                        input type="hidden" name="a" value=(branch_s);
                        label { "Compare with " select name="b" {
                            @for l in &others { option value=(l.branch.name.as_str()) { "\u{2068}" (l.branch.name.as_str()) "\u{2069}" } }
                        } }
                        button type="submit" { "Diff" }
                    }
                }
                a href=(format!("/api/v1/sessions/{sid}/export?format=markdown&branch={}", query_escape(&branch_s))) { "Export Markdown" }
            }
            @if this.sealed {
                p.notice { "This timeline is sealed: it is kept as it was and refuses new messages. Fork from any of its nodes to continue it." }
            }
            p.count { (tl.total) " nodes · " (tl.turns) " turns" }
            @if tl.cursor > 0 {
                p { a href=(format!("{}{}cursor={}", session_url(&sid, Some(&branch_s)), if branch_s == "main" { "?" } else { "&" }, tl.cursor.saturating_sub(200))) { "← earlier nodes" } }
            }
            div.turns id="turns" {
                @for (header, n) in &headed {
                    @if let Some(turn) = header {
                        h2.turn id=(format!("turn-{turn}")) { @if *turn == 0 { "Start" } @else { "Turn " (turn) } }
                    }
                    (node_item(&sid, n, &branch_s, this.sealed))
                }
            }
            @if let Some(next) = tl.next_cursor {
                p { a href=(format!("{}{}cursor={next}", session_url(&sid, Some(&branch_s)), if branch_s == "main" { "?" } else { "&" })) { "later nodes →" } }
            }
            p.live id="live" hidden { }
            (state_panel(&state, "State at the head of this timeline"))
        }
    };
    html_response(page(&title, body))
}

pub(super) fn state_panel(state: &api::StateView, heading: &str) -> Markup {
    html! {
        section.state {
            h2 { (heading) }
            p.mono { "root " (state.root.as_deref().unwrap_or("(empty)")) }
            @if state.entries.is_empty() {
                p { "No keys." }
            } @else {
                table { tbody {
                    @for e in &state.entries {
                        tr { th { bdi { (e.key) } } td { pre { @if e.value_encoding == PayloadEncoding::Base64 { "base64:" } bdi { (e.value) } } } }
                    }
                } }
            }
        }
    }
}
