//! Two timelines side by side from their fork point.

use super::session::{payload_text, payload_view};
use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct DiffPageQuery {
    a: Option<String>,
    b: Option<String>,
}

pub(super) async fn diff_page(
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
