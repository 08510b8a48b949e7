//! The session list.

use super::llm;
use super::*;

pub(super) async fn index(State(st): State<AppState>, Query(q): Query<SessionQuery>) -> Response {
    let needle = q.q.clone().unwrap_or_default();
    let agent = q.agent.clone().unwrap_or_default();
    let (list, totals) = match run(&st, move |s| {
        let list = api::filter_sessions(s.sessions()?, &q);
        // The listed sessions' figures (remembered per session until a head moves).
        let totals: Vec<Option<llm::Totals>> = list
            .sessions
            .iter()
            .map(|x| {
                s.find_session(&x.id)
                    .and_then(|r| llm::session_totals(s, &r))
                    .ok()
            })
            .collect();
        Ok((list, totals))
    })
    .await
    {
        Ok(d) => d,
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
            thead { tr { th { "Title" } th { "Agent" } th { "Id" } th { "Created" } th { "Last activity" } th.num { "Turns" } th.num { "Tokens in / out" } th.num { "Cost" } th.num { "Errors" } } }
            tbody {
                @for (s, t) in list.sessions.iter().zip(&totals) {
                    tr.row data-href=(session_url(&s.id, None)) {
                        td { a href=(session_url(&s.id, None)) { bdi { (s.title.as_deref().unwrap_or("(untitled)")) } } }
                        td { bdi { (s.agent) } }
                        td.mono { (short(&s.id)) }
                        td { (s.created_at) }
                        @if let Some(t) = t {
                            td.last { @if let Some(l) = t.last { (convo_api::time(l)) } }
                            td.num { (t.turns) }
                            td.num { (t.tokens_in) " / " (t.tokens_out) }
                            td.num { @if t.calls > 0 { (llm::usd(t.cost)) } }
                            td class=(if t.errors > 0 { "num bad" } else { "num" }) { (t.errors) }
                        } @else { td {} td {} td {} td {} td {} }
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
