//! The session list.

use super::*;

pub(super) async fn index(State(st): State<AppState>, Query(q): Query<SessionQuery>) -> Response {
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
