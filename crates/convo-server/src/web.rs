//! The web view: server-rendered pages (maud templates, escaped by
//! construction) plus one small script and one stylesheet embedded in the
//! binary. Nothing is loaded from anywhere else, so it works offline, and
//! the Content-Security-Policy forbids inline script, so a payload cannot
//! run even if it slipped through escaping.
//!
//! Pages: `/` (sessions, with search and filters), `/sessions/{id}` (the
//! timelines as a graph, one timeline's turns as a conversation, its state,
//! fork and promote), `/sessions/{id}/nodes/{hash}` (one node in full, the
//! state as of it), `/sessions/{id}/diff?a=&b=` (two timelines side by side
//! from their fork point). Every page has a shareable URL.
//!
//! Every string from the store (titles, agents, names, keys, values,
//! payloads) sits in its own bidirectional isolate (`<bdi>`, or
//! `unicode-bidi: isolate` / U+2068…U+2069 where HTML elements cannot go),
//! so a right-to-left override in one cannot reverse the ids and dates
//! around it.

use crate::AppState;
use crate::api::{self, SessionQuery};
use crate::api::{Path, Query};
use crate::markdown;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use convo_api::{NodeView, PayloadEncoding};
use convo_core::{BranchName, DigestMap, Kind, NodeHash};
use convo_store::{BranchRow, SessionRow, Store, StoreError};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Deserialize;

const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// The page routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/sessions/{session}", get(session_page))
        .route("/sessions/{session}/nodes/{hash}", get(node_page))
        .route("/sessions/{session}/diff", get(diff_page))
        .route("/assets/app.js", get(js))
        .route("/assets/app.css", get(css))
}

async fn js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

async fn css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}

fn asset(body: &'static str, ct: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// A rendered page as an HTML response.
fn html_response(m: Markup) -> Response {
    let mut r = m.into_string().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // First-strong isolates: a right-to-left override in a
                // title cannot turn the tab's text around.
                title { "\u{2068}" (title) "\u{2069} · convo" }
                link rel="stylesheet" href="/assets/app.css";
                script src="/assets/app.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "convo" }
                    form.search action="/" method="get" {
                        input type="search" name="q" placeholder="Search sessions  ( / )" id="q" aria-label="Search sessions";
                    }
                }
                main { (body) }
                footer { "keys: j/k move · o open · f fork here · / search · ? help" }
            }
        }
    }
}

fn error_page(e: StoreError) -> Response {
    let status = convo_runtime::error::status_of(&e);
    let body = page(
        "error",
        html! { section.error { h1 { "Error" } p { (e.to_string()) } p { a href="/" { "All sessions" } } } },
    );
    (status, html_response(body)).into_response()
}

async fn run<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&mut Store) -> convo_store::Result<T> + Send + 'static,
) -> Result<T, Response> {
    st.pool.run(f).await.map_err(error_page)
}

fn short(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

fn session_url(id: &str, branch: Option<&str>) -> String {
    match branch {
        Some(b) if b != "main" => format!("/sessions/{id}?branch={}", query_escape(b)),
        _ => format!("/sessions/{id}"),
    }
}

/// Percent-encodes a query value (branch names are ref-safe, but `+`, `&`
/// and friends must not change a URL's meaning).
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ----- the session list ------------------------------------------------------

async fn index(State(st): State<AppState>, Query(q): Query<SessionQuery>) -> Response {
    let needle = q.q.clone().unwrap_or_default();
    let agent = q.agent.clone().unwrap_or_default();
    let list = match run(&st, |s| s.sessions()).await {
        Ok(all) => api::filter_sessions(all, &q),
        Err(r) => return r,
    };
    let body = html! {
        h1 { "Sessions" }
        form.filters action="/" method="get" {
            input type="search" name="q" value=(needle) placeholder="title, agent or id";
            input type="text" name="agent" value=(agent) placeholder="agent";
            button type="submit" { "Filter" }
        }
        p.count { (list.total) " sessions" }
        table.sessions {
            thead { tr { th { "Title" } th { "Agent" } th { "Id" } th { "Created" } } }
            tbody {
                @for s in &list.sessions {
                    tr.row data-href=(session_url(&s.id, None)) {
                        td { a href=(session_url(&s.id, None)) { bdi { (s.title.as_deref().unwrap_or("(untitled)")) } } }
                        td { bdi { (s.agent) } }
                        td.mono { (short(&s.id)) }
                        td { (s.created_at) }
                    }
                }
            }
        }
        @if let Some(next) = list.next_offset {
            p { a href=(format!("/?q={}&agent={}&offset={next}", query_escape(&needle), query_escape(&agent))) { "Next page →" } }
        }
    };
    html_response(page("Sessions", body))
}

// ----- the session page ------------------------------------------------------

#[derive(Debug, Deserialize)]
struct SessionPageQuery {
    branch: Option<String>,
    cursor: Option<i64>,
}

/// One timeline's place in the graph.
#[derive(Debug, Clone)]
struct Lane {
    branch: BranchRow,
    /// Depth of the first node of this lane's own segment.
    start: u64,
    /// Depth of its head.
    end: u64,
    /// The lane it forked from and the depth of the fork point.
    parent: Option<(usize, u64)>,
    /// Depths of promote nodes on the lane's own segment.
    promotes: Vec<u64>,
}

/// Lays the session's timelines out: `main` first, then by creation time;
/// each lane owns the nodes no earlier lane has. One pass over the
/// session's node rows (no payloads).
fn lanes(s: &mut Store, row: &SessionRow) -> convo_store::Result<Vec<Lane>> {
    let mut branches = s.branches(&row.id)?;
    branches.sort_by_key(|b| (b.name.as_str() != "main", b.created_at));
    branches.truncate(64);
    let id = row.id;
    // Links only (hash, parent, kind): no row is decoded whole. A parent
    // comes before its children in follow order, so depths take one pass.
    let nodes = s.read(move |tx| tx.session_links(&id))?;
    let index: DigestMap<NodeHash, usize> =
        nodes.iter().enumerate().map(|(i, l)| (l.hash, i)).collect();
    let mut depths = Vec::with_capacity(nodes.len());
    for l in &nodes {
        let d = l
            .parent
            .and_then(|p| index.get(&p))
            .and_then(|&i| depths.get(i).copied())
            .unwrap_or(0u64)
            + 1;
        depths.push(d);
    }
    let mut owner: DigestMap<NodeHash, usize> = DigestMap::default();
    let mut out = Vec::new();
    for b in branches {
        let lane = out.len();
        let Some(head) = b.head else {
            out.push(Lane {
                branch: b,
                start: 0,
                end: 0,
                parent: None,
                promotes: Vec::new(),
            });
            continue;
        };
        let mut cur = Some(head);
        let mut start = 0;
        let mut parent = None;
        let mut promotes = Vec::new();
        let mut end = None;
        let mut steps = 0;
        while let Some(h) = cur {
            steps += 1;
            if steps > nodes.len() + 1 {
                break;
            }
            if let Some(&l) = owner.get(&h) {
                let depth = index.get(&h).map(|&i| depths[i]).unwrap_or(0);
                parent = Some((l, depth));
                break;
            }
            let Some(&i) = index.get(&h) else { break };
            let n = &nodes[i];
            end.get_or_insert(depths[i]);
            start = depths[i];
            if n.kind == Kind::Promote {
                promotes.push(depths[i]);
            }
            owner.insert(h, lane);
            cur = n.parent;
        }
        out.push(Lane {
            branch: b,
            start,
            end: end.unwrap_or(start),
            parent,
            promotes,
        });
    }
    Ok(out)
}

fn graph(sid: &str, lanes: &[Lane], current: &str) -> Markup {
    let max = lanes.iter().map(|l| l.end).max().unwrap_or(0).max(1) as f64;
    let w = 640.0;
    let x = |d: u64| 12.0 + (d as f64 / max) * (w - 24.0);
    let row_h = 34.0;
    let h = 16.0 + row_h * lanes.len() as f64;
    let y = |l: usize| 22.0 + row_h * l as f64;
    html! {
        figure.graph {
            svg viewBox=(format!("0 0 {} {h}", w + 200.0)) role="img" aria-label="Timelines of this session" {
                @for (i, l) in lanes.iter().enumerate() {
                    @if let Some((p, at)) = l.parent {
                        path.forkline d=(format!("M {:.1} {:.1} C {:.1} {:.1}, {:.1} {:.1}, {:.1} {:.1}",
                            x(at), y(p), x(at), y(i), x(at), y(i), x(l.start.max(at)), y(i))) {}
                        circle.forkpoint cx=(format!("{:.1}", x(at))) cy=(format!("{:.1}", y(p))) r="4" {}
                    }
                    line class=(if l.branch.sealed { "lane sealed" } else if l.branch.name.as_str() == "main" { "lane main" } else { "lane" })
                        x1=(format!("{:.1}", x(l.start))) y1=(format!("{:.1}", y(i)))
                        x2=(format!("{:.1}", x(l.end))) y2=(format!("{:.1}", y(i))) {}
                    @for d in &l.promotes {
                        text.promote x=(format!("{:.1}", x(*d))) y=(format!("{:.1}", y(i) + 5.0)) { "★" }
                    }
                    @if l.branch.head.is_some() {
                        circle.head cx=(format!("{:.1}", x(l.end))) cy=(format!("{:.1}", y(i))) r="5" {}
                    }
                    a href=(session_url(sid, Some(l.branch.name.as_str()))) {
                        text class=(if l.branch.name.as_str() == current { "label current" } else { "label" })
                            x=(format!("{:.1}", w + 4.0)) y=(format!("{:.1}", y(i) + 4.0)) {
                            tspan.u { (l.branch.name.as_str()) }
                            @if l.branch.sealed { " (sealed)" }
                        }
                    }
                }
            }
            figcaption {
                "Each line is a timeline from its fork point (●) to its head; ★ marks a promote; "
                "sealed timelines are dashed. Click a name to read it."
            }
        }
    }
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

fn payload_text(n: &NodeView) -> Option<&str> {
    match n.payload_encoding {
        Some(PayloadEncoding::Utf8) => n.payload.as_deref(),
        _ => None,
    }
}

/// A payload as a reader wants it: JSON pretty-printed, text as Markdown
/// (rendered safely), binary as its size.
fn payload_view(n: &NodeView, markdown_ok: bool) -> Markup {
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

async fn session_page(
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

fn state_panel(state: &api::StateView, heading: &str) -> Markup {
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

// ----- one node ----------------------------------------------------------------

async fn node_page(State(st): State<AppState>, Path((q, h)): Path<(String, String)>) -> Response {
    let p = match convo_core::HashPrefix::parse(&h) {
        Ok(p) => p,
        Err(e) => return error_page(StoreError::Invalid(e.to_string())),
    };
    let data = run(&st, move |s| {
        let row = s.find_session(&q)?;
        let (n, payload) = api::node_with_payload(s, &p)?;
        if n.node.session != row.id {
            return Err(StoreError::NoNode(h.clone()));
        }
        let root = n.ctx.state.unwrap_or_else(convo_core::state::empty_root);
        let state = api::state_at_root(s, root)?;
        Ok((row, convo_runtime::wire::node(&n, Some(&payload)), state))
    })
    .await;
    let (row, n, state) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let sid = row.id.to_string();
    let fields: Vec<(&str, Markup)> = vec![
        ("hash", html! { (n.hash) }),
        (
            "parent",
            html! { (n.parent.as_deref().unwrap_or("(none)")) },
        ),
        ("kind", html! { (n.kind) }),
        ("from → to", html! { bdi { (n.from) } " → " bdi { (n.to) } }),
        (
            "submission",
            html! { bdi { (n.submission.as_deref().unwrap_or("(none)")) } },
        ),
        ("sequence", html! { @if let Some(s) = n.sequence { (s) } }),
        ("created", html! { (n.created_at) }),
        ("follow cursor", html! { (n.seq) }),
        ("depth", html! { (n.depth) }),
        ("payload sha256", html! { (n.payload_sha256) }),
        ("payload bytes", html! { (n.payload_len) }),
        (
            "state carried",
            html! { (n.state.as_deref().unwrap_or_default()) },
        ),
    ];
    let diag = serde_json::to_string_pretty(&n.diagnostics).unwrap_or_default();
    let body = html! {
        section.nodepage id="session" data-session=(sid) data-branch="" data-head="" data-sealed="1" {
            p { a href=(session_url(&sid, None)) { "← " bdi { (row.title.as_deref().unwrap_or("(untitled)")) } } }
            h1 { (n.kind) " " span.mono { (short(&n.hash)) } }
            table.fields { tbody { @for (k, v) in &fields { tr { th { (k) } td.mono { (v) } } } } }
            div.actions {
                button.fork type="button" data-hash=(n.hash) { "Fork a timeline from here" }
                a href=(format!("/api/v1/nodes/{}/payload", n.hash)) { "Raw payload" }
                a href=(format!("/api/v1/nodes/{}", n.hash)) { "JSON" }
            }
            h2 { "Payload" }
            (payload_view(&n, true))
            h2 { "Diagnostics" }
            pre.json { (diag) }
            (state_panel(&state, "State as of this node"))
        }
    };
    html_response(page(&format!("{} {}", n.kind, short(&n.hash)), body))
}

// ----- diff ------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct DiffPageQuery {
    a: Option<String>,
    b: Option<String>,
}

async fn diff_page(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(d): Query<DiffPageQuery>,
) -> Response {
    let parse = |s: Option<&str>, dflt: &str| BranchName::new(s.unwrap_or(dflt));
    let (a, b) = match (parse(d.a.as_deref(), "main"), parse(d.b.as_deref(), "main")) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => return error_page(StoreError::Invalid(e.to_string())),
    };
    let data = run(&st, move |s| crate::diff::diff(s, &q, &a, &b)).await;
    let dv = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let sid = dv.session.clone();
    let rows = dv.a.nodes.len().max(dv.b.nodes.len());
    let body = html! {
        section.diffpage {
            p { a href=(session_url(&sid, None)) { "← session" } }
            h1 { bdi { (dv.a.branch) } " ↔ " bdi { (dv.b.branch) } }
            p.sub {
                (dv.common) " nodes shared"
                @if let Some(f) = &dv.fork_point {
                    " · fork point " a.mono href=(format!("/sessions/{sid}/nodes/{}", f.hash)) { (short(&f.hash)) }
                    " (turn " (f.turn.unwrap_or(0)) ")"
                }
            }
            div.sidebyside {
                div.col { h2 { a href=(session_url(&sid, Some(&dv.a.branch))) { bdi { (dv.a.branch) } } " +" (dv.a.nodes.len()) } }
                div.col { h2 { a href=(session_url(&sid, Some(&dv.b.branch))) { bdi { (dv.b.branch) } } " +" (dv.b.nodes.len()) } }
                @for i in 0..rows {
                    @let (x, y) = (dv.a.nodes.get(i), dv.b.nodes.get(i));
                    div.col { @if let Some(n) = x { (diff_cell(&sid, n, y)) } }
                    div.col { @if let Some(n) = y { (diff_cell(&sid, n, x)) } }
                }
            }
        }
    };
    html_response(page("diff", body))
}

/// One node of a diff, with its text's lines marked against the node at
/// the same place on the other side.
fn diff_cell(sid: &str, n: &NodeView, other: Option<&NodeView>) -> Markup {
    let mine = payload_text(n).map(pretty);
    let theirs = other.and_then(payload_text).map(pretty);
    html! {
        article class=(format!("node {}", n.kind)) {
            div.meta {
                span class=(format!("kind k-{}", n.kind)) { (n.kind) }
                span.ends { bdi { (n.from) } " → " bdi { (n.to) } }
                a.hash href=(format!("/sessions/{sid}/nodes/{}", n.hash)) { (short(&n.hash)) }
            }
            @match (mine, theirs) {
                (Some(m), Some(t)) => {
                    pre.difftext {
                        @for op in similar::TextDiff::from_lines(t.as_str(), m.as_str()).iter_all_changes() {
                            @match op.tag() {
                                similar::ChangeTag::Equal => span { (op.value()) },
                                similar::ChangeTag::Insert => ins { (op.value()) },
                                similar::ChangeTag::Delete => {},
                            }
                        }
                    }
                }
                (Some(m), None) => { pre.difftext { ins { (m) } } }
                _ => { (payload_view(n, false)) }
            }
        }
    }
}

fn pretty(t: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(t) {
        Ok(v) if v.is_object() || v.is_array() => {
            serde_json::to_string_pretty(&v).unwrap_or_else(|_| t.to_owned())
        }
        _ => t.to_owned(),
    }
}
