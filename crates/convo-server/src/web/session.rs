//! The session page: the timelines as a graph, one timeline's turns, its state.

use super::graph::{Lane, graph, lanes};
use super::jump::{self, PAGE, given};
use super::*;
use super::{json, llm};

/// Which timeline and which page of it (see [`jump::locate`]); blank
/// values are ignored.
#[derive(Debug, Deserialize)]
pub(super) struct SessionPageQuery {
    branch: Option<String>,
    cursor: Option<String>,
    /// Jump to this turn.
    turn: Option<String>,
    /// The page centred on this node (hash or unique prefix).
    node: Option<String>,
    /// `graph`: only the timelines' graph and list, as the page draws
    /// them (the live view redraws them from this).
    fragment: Option<String>,
}

/// Model, tokens, cost, latency and status found in a node's diagnostics.
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
    // Tokens and cost as every surface reads them (`convo_llm::usage`).
    let call = convo_llm::usage::Call::of(d, None);
    match (call.usage, get("usage").or_else(|| get("tokens"))) {
        (Some(u), _) => {
            out.push(("tokens in".into(), u.input.to_string()));
            out.push(("tokens out".into(), u.output.to_string()));
        }
        (None, Some(u)) => out.push(("tokens".into(), show(u))),
        (None, None) => {}
    }
    if let Some(x) = call.cost {
        out.push(("cost".into(), convo_llm::usage::usd(x)));
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

/// A payload as a reader wants it: JSON as a tree (from its bytes), text as Markdown
/// (rendered safely), binary as its size.
pub(super) fn payload_view(n: &NodeView, markdown_ok: bool) -> Markup {
    let Some(text) = payload_text(n) else {
        return html! { p.binary { "<" (n.payload_len) " bytes of binary> " a href=(format!("/api/v1/nodes/{}/payload", n.hash)) { "download" } } };
    };
    if markdown_ok && let Some(m) = llm::messages_view(text) {
        return m;
    }
    if let Some(tree) = json::view(text) {
        return tree;
    }
    if markdown_ok {
        html! { div.md { (PreEscaped(markdown::render(text))) } }
    } else {
        html! { pre { (text) } }
    }
}

/// What a request or response node shows: an MCP message, or the LLM
/// call as a conversation when it is one (`true`: its own chips say
/// model, tokens, latency and status), else its payload.
pub(super) fn call_view(n: &NodeView, full: bool) -> (Markup, bool) {
    if super::kv::is_kv_view(n) {
        return (super::kv::kv_view(n), false);
    }
    if let Some(text) = payload_text(n) {
        if let Some(v) = super::mcp::view(n, text) {
            return (v, true);
        }
        let v = match n.kind.as_str() {
            "request" => llm::request_view(n, text, full),
            _ => llm::response_view(n, text),
        };
        if let Some(v) = v {
            return (v, true);
        }
        if let Some(v) = llm::agent_tool_view(n, text) {
            return (v, false);
        }
    }
    (
        html! { details open[full] { summary { (n.kind) " " (n.payload_len) " bytes" } (payload_view(n, false)) } },
        false,
    )
}

pub(super) fn node_item(sid: &str, n: &NodeView) -> Markup {
    node_item_after(sid, n, None)
}

/// [`node_item`]; `answered` is the turn's last response (its hash and
/// answer text): a `complete` that only repeats that answer says so
/// instead of showing it a second time.
pub(super) fn node_item_after(
    sid: &str,
    n: &NodeView,
    answered: Option<&(String, String)>,
) -> Markup {
    let kind = n.kind.as_str();
    let same = kind == "complete"
        && answered.is_some_and(|(_, a)| payload_text(n).is_some_and(|t| t.trim() == a.trim()));
    let (body, is_call) = match kind {
        "request" | "response" => call_view(n, false),
        "fork" | "promote" => (html! {}, false),
        _ if same => (
            html! { p.same { "The answer above, as the agent returned it (" a href=(format!("#n-{}", answered.map(|a| a.0.as_str()).unwrap_or_default())) { "same text" } ", " (n.payload_len) " bytes)." } },
            false,
        ),
        _ => (payload_view(n, true), false),
    };
    // A call's own chips say model, tokens, latency and status.
    let diag = if is_call {
        Vec::new()
    } else {
        diag_summary(&n.diagnostics)
    };
    let fig = llm::figures(n);
    html! {
        article class=(format!("node {kind}{}", if super::kv::is_kv_view(n) { " kv" } else { "" })) id=(format!("n-{}", n.hash)) tabindex="0"
            data-hash=(n.hash) data-seq=(n.seq) data-turn=(n.turn.unwrap_or(0))
            data-tin=[fig.map(|f| f.0)] data-tout=[fig.map(|f| f.1)] data-cost=[fig.map(|f| f.2)]
            data-failed=[fig.and_then(|f| f.3.then_some("1"))] {
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
            (body)
        }
    }
}

pub(super) async fn session_page(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(pq): Query<SessionPageQuery>,
) -> Response {
    let asked = given(&pq.branch).map(str::to_owned);
    let branch = match BranchName::new(asked.as_deref().unwrap_or("main")) {
        Ok(b) => b,
        Err(e) => return error_page(StoreError::invalid(e)),
    };
    if given(&pq.fragment) == Some("graph") {
        return graph_fragment(st, q, branch).await;
    }
    match run(&st, move |s| load(s, &q, branch, asked.is_some(), &pq)).await {
        Ok(d) => session_view(&d),
        Err(r) => r,
    }
}

/// What a session page shows, read in one go.
struct Loaded {
    row: SessionRow,
    lanes: Vec<Lane>,
    subs: Vec<super::subagent::Sub>,
    calls: Vec<super::subagent::Calls>,
    this: convo_store::BranchRow,
    tl: api::TimelinePageView,
    state: convo_api::StateView,
    place: jump::Place,
    branch: BranchName,
    totals: llm::Totals,
    /// Where the store was as the page was read: its live stream starts here.
    end: u64,
}

fn load(
    s: &mut Store,
    q: &str,
    mut branch: BranchName,
    asked: bool,
    pq: &SessionPageQuery,
) -> convo_store::Result<Loaded> {
    // Read first, so nothing written meanwhile is missed.
    let end = s.end_cursor()?;
    let row = s.find_session(q)?;
    let mut place = jump::locate(
        s,
        &row,
        &branch,
        given(&pq.cursor),
        given(&pq.turn),
        given(&pq.node),
    )?;
    // A node asked for without a timeline: shown on one that holds it.
    if !asked && let Some(other) = place.elsewhere.take() {
        branch = BranchName::new(&other).map_err(StoreError::invalid)?;
    }
    let lanes = lanes(s, &row)?;
    let subs = super::subagent::subagents(s, &row, lanes.len())?;
    let this = s.branch(&row.id, &branch)?;
    let tl = api::timeline_page(s, &row.id.to_string(), &branch, place.cursor, PAGE, false)?;
    let calls = super::subagent::calls(s, &row, &subs, branch.as_str(), &tl)?;
    let state = api::state_view(s, &row.id.to_string(), &branch, None)?;
    let totals = llm::session_totals(s, &row)?;
    Ok(Loaded {
        row,
        lanes,
        subs,
        calls,
        this,
        tl,
        state,
        place,
        branch,
        totals,
        end,
    })
}

/// Each complete's turn's last answer before it, by the complete's hash
/// (a complete that repeats it is not shown twice).
fn answers_of(nodes: &[NodeView]) -> std::collections::HashMap<String, (String, String)> {
    let mut answers = std::collections::HashMap::new();
    let mut answer: Option<(String, String)> = None;
    for n in nodes {
        match n.kind.as_str() {
            "invoke" => answer = None,
            "response" => answer = llm::answer_text(n).map(|a| (n.hash.clone(), a)),
            "complete" => {
                if let Some(a) = answer.take() {
                    answers.insert(n.hash.clone(), a);
                }
            }
            _ => {}
        }
    }
    answers
}

/// The page's buttons and links: promote, diff with another timeline,
/// export, share.
fn actions(sid: &str, branch: &str, sealed: bool, others: &[&Lane]) -> Markup {
    html! {
        div.actions {
            @if branch != "main" && !sealed {
                button id="promote" type="button" data-branch=(branch) { "Promote " bdi { (branch) } " to main" }
            }
            @if !others.is_empty() {
                form.diff action=(format!("/sessions/{sid}/diff")) method="get" {
                    input type="hidden" name="a" value=(branch);
                    label { "Compare with " select name="b" {
                        @for l in others { option value=(l.branch.name.as_str()) { "\u{2068}" (l.branch.name.as_str()) "\u{2069}" } }
                    } }
                    button type="submit" { "Diff" }
                }
            }
            a href=(format!("/api/v1/sessions/{sid}/export?format=markdown&branch={}", query_escape(branch))) { "Export Markdown" }
            a #share href=(format!("/sessions/{sid}/share?branch={}", query_escape(branch)))
                title="One HTML file that checks its own hashes in the browser: metadata only" { "Share" }
            a #share-content href=(format!("/sessions/{sid}/share?branch={}&content=1", query_escape(branch)))
                title="The same file with the message text" { "(with content)" }
        }
    }
}

/// The page's turns: a heading (with the turn's waterfall) before the
/// first node of each, subagents under the node that started them.
fn turns_view(d: &Loaded, sid: &str) -> Markup {
    let branch = d.branch.as_str();
    // Subagents started on this timeline, under the node they fork at.
    let mut started: std::collections::HashMap<&str, Vec<&super::subagent::Sub>> =
        Default::default();
    for s in d.subs.iter().filter(|s| s.parent == branch) {
        started.entry(s.started_by.as_str()).or_default().push(s);
    }
    // Turns with a failed call or a cut stream are marked in their heading.
    let failed: std::collections::HashSet<u64> =
        d.tl.nodes
            .iter()
            .filter(|n| llm::figures(n).is_some_and(|f| f.3))
            .map(|n| n.turn.unwrap_or(0))
            .collect();
    let falls = super::waterfall::of_turns(sid, &d.tl.nodes, &d.calls);
    let answers = answers_of(&d.tl.nodes);
    // A heading before the first node of each turn.
    let mut last = None;
    let headed: Vec<(Option<u64>, &NodeView)> =
        d.tl.nodes
            .iter()
            .map(|n| {
                let t = n.turn.unwrap_or(0);
                let h = (last != Some(t)).then_some(t);
                last = Some(t);
                (h, n)
            })
            .collect();
    html! {
        div.turns id="turns" {
            @for (header, n) in &headed {
                @if let Some(turn) = header {
                    h2 class=(if failed.contains(turn) { "turn failed" } else { "turn" }) id=(format!("turn-{turn}")) {
                        @if *turn == 0 { "Start" } @else { "Turn " (turn) }
                        @if failed.contains(turn) { " " span.diag.status.bad { "a call failed or was cut" } }
                    }
                    @if let Some(w) = falls.get(turn) { (w) }
                }
                (node_item_after(sid, n, answers.get(&n.hash)))
                @if let Some(subs) = started.get(n.hash.as_str()) {
                    (super::subagent::started_here(sid, subs))
                }
            }
        }
    }
}

fn session_view(d: &Loaded) -> Response {
    let (row, tl, this, place) = (&d.row, &d.tl, &d.this, &d.place);
    let branch_s = d.branch.as_str();
    let sid = row.id.to_string();
    let title = row.title.clone().unwrap_or_else(|| "(untitled)".into());
    let head = this.head.map(|h| h.to_hex()).unwrap_or_default();
    let others: Vec<&Lane> = d
        .lanes
        .iter()
        .filter(|l| l.branch.name.as_str() != branch_s)
        .collect();
    // On a subagent's own timeline, the way back.
    let came_from = d.subs.iter().find(|s| s.branch == branch_s);
    let body = html! {
        section.session id="session" data-session=(sid) data-branch=(branch_s) data-head=(head)
            data-sealed=(if this.sealed { "1" } else { "0" })
            data-tail=(if tl.next_cursor.is_none() { "1" } else { "0" })
            data-after=(d.end)
            data-turns=(tl.turns) {
            h1 { bdi { (title) } }
            p.sub {
                "agent " b { bdi { (row.agent) } } " · " span.mono { (sid) } " · created " (convo_api::time(row.created_at))
            }
            div #timelines { (timelines(&sid, &d.lanes, branch_s)) }
            (actions(&sid, branch_s, this.sealed, &others))
            @if let Some(s) = came_from { (super::subagent::back(&sid, s)) }
            @if this.sealed {
                p.notice { "This timeline is sealed: it is kept as it was and refuses new messages. Fork from any of its nodes to continue it." }
            }
            (llm::totals_view(&d.totals))
            p.count { span #c-nodes { (tl.total) } " nodes · " span #c-turns { (tl.turns) } " turns" }
            @if let Some(n) = &place.notice { p.notice.jumpnote { (n) } }
            @if let Some(other) = &place.elsewhere {
                p.notice.jumpnote { "That node is not on this timeline; it is on " a href=(jump::node_url(&sid, other, place.focus.as_deref().unwrap_or_default())) { bdi { (other) } } "." }
            }
            (jump::pager(&sid, branch_s, tl, true))
            @if let Some(f) = &place.focus { span #focus hidden data-hash=(f) {} }
            (turns_view(d, &sid))
            @if tl.total > PAGE { (jump::pager(&sid, branch_s, tl, true)) }
            p.live id="live" hidden { }
            (state_panel(&d.state, "State at the head of this timeline"))
        }
    };
    html_response(page(&title, body))
}

/// The graph of the session's timelines and the list of their names,
/// the one being read in bold.
fn timelines(sid: &str, lanes: &[Lane], current: &str) -> Markup {
    html! {
        (graph(sid, lanes, current))
        nav.timelines {
            "Timeline: "
            @for l in lanes {
                @if l.branch.name.as_str() == current {
                    strong { bdi { (l.branch.name.as_str()) } @if l.branch.sealed { " (sealed)" } }
                } @else {
                    a href=(session_url(sid, Some(l.branch.name.as_str()))) { bdi { (l.branch.name.as_str()) } @if l.branch.sealed { " (sealed)" } }
                }
                " "
            }
        }
    }
}

/// `?fragment=graph`: [`timelines`] alone, for the live view to redraw.
async fn graph_fragment(st: AppState, q: String, branch: BranchName) -> Response {
    let data = run(&st, move |s| {
        let row = s.find_session(&q)?;
        let lanes = lanes(s, &row)?;
        Ok((row.id.to_string(), lanes))
    })
    .await;
    match data {
        Ok((sid, lanes)) => html_response(timelines(&sid, &lanes, branch.as_str())),
        Err(r) => r,
    }
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
