//! One node in full, with the state as of it.

use super::json;
use super::session::{call_view, node_item, payload_view, state_panel};
use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct NodePageQuery {
    /// `1`: only the node as the timeline shows it (the page's live
    /// updates fetch this), with a turn heading when it starts a turn.
    fragment: Option<String>,
}

pub(super) async fn node_page(
    State(st): State<AppState>,
    Path((q, h)): Path<(String, String)>,
    Query(nq): Query<NodePageQuery>,
) -> Response {
    if nq.fragment.as_deref() == Some("1") {
        return fragment(st, q, h).await;
    }
    let data = run(&st, move |s| {
        let (row, n, payload) = session_node(s, &q, &h)?;
        let root = n.ctx.state.unwrap_or_else(convo_core::state::empty_root);
        let state = api::state_at_root(s, root)?;
        let mut view = convo_runtime::wire::node(&n, Some(&payload));
        // A call received as telemetry leaves its details to the kept
        // export body: read back.
        if view
            .diagnostics
            .pointer("/extra/otel")
            .is_some_and(convo_llm::otel::ingest::left_to_body)
        {
            view.otel = convo_llm::otel::ingest::resolve_kept(s, &[(&n, payload.as_slice())])?
                .pop()
                .flatten();
        }
        Ok((row, view, state))
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
            @match n.kind.as_str() {
                "request" => {
                    h2 { "What the model saw" }
                    (call_view(&n, true).0)
                }
                "response" => {
                    h2 { "The answer" }
                    @if let Some(p) = &n.parent { p { a href=(format!("/sessions/{sid}/nodes/{p}")) { "← the request (the context window)" } } }
                    (call_view(&n, true).0)
                }
                _ => { h2 { "Payload" } (payload_view(&n, true)) }
            }
            h2 { "Diagnostics" }
            @match json::view(&diag) { Some(t) => (t), None => pre.json { (diag) } }
            @if let Some(o) = &n.otel {
                @let o = serde_json::to_string_pretty(o).unwrap_or_default();
                h2 { "Telemetry (from the export body kept)" }
                @match json::view(&o) { Some(t) => (t), None => pre.json { (o) } }
            }
            (state_panel(&state, "State as of this node"))
        }
    };
    html_response(page(&format!("{} {}", n.kind, short(&n.hash)), body))
}

/// One node as the timeline renders it, for the page's live updates.
async fn fragment(st: AppState, q: String, h: String) -> Response {
    let data = run(&st, move |s| {
        let (row, n, payload) = session_node(s, &q, &h)?;
        let parent_turn = match n.node.parent {
            Some(ph) => Some(
                s.node(&convo_core::HashPrefix::parse(&ph.to_hex()).map_err(StoreError::invalid)?)?
                    .ctx
                    .turn,
            ),
            None => None,
        };
        let turn = n.ctx.turn;
        let view = convo_runtime::wire::node(&n, Some(&payload)).with_turn(turn);
        Ok((row, view, parent_turn != Some(turn)))
    })
    .await;
    let (row, n, starts) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let sid = row.id.to_string();
    let turn = n.turn.unwrap_or(0);
    html_response(html! {
        @if starts {
            h2.turn id=(format!("turn-{turn}")) { @if turn == 0 { "Start" } @else { "Turn " (turn) } }
        }
        (node_item(&sid, &n))
    })
}
