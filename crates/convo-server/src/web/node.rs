//! One node in full, with the state as of it.

use super::session::{payload_view, state_panel};
use super::*;

pub(super) async fn node_page(
    State(st): State<AppState>,
    Path((q, h)): Path<(String, String)>,
) -> Response {
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
