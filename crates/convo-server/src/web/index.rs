//! The session list.

use super::jump::given;
use super::llm;
use super::*;

/// Sessions per list page.
const PER_PAGE: usize = 50;

/// The list's URL with only the filters that are set.
fn list_url(needle: &str, agent: &str, offset: usize) -> String {
    let mut parts = Vec::new();
    if !needle.is_empty() {
        parts.push(format!("q={}", query_escape(needle)));
    }
    if !agent.is_empty() {
        parts.push(format!("agent={}", query_escape(agent)));
    }
    if offset > 0 {
        parts.push(format!("offset={offset}"));
    }
    if parts.is_empty() {
        "/".into()
    } else {
        format!("/?{}", parts.join("&"))
    }
}

/// The list's form and links; blank fields are ignored.
#[derive(Debug, Deserialize)]
pub(super) struct ListForm {
    q: Option<String>,
    agent: Option<String>,
    offset: Option<String>,
    limit: Option<String>,
}

pub(super) async fn index(State(st): State<AppState>, Query(f): Query<ListForm>) -> Response {
    let needle = given(&f.q).unwrap_or_default().to_owned();
    let agent = given(&f.agent).unwrap_or_default().to_owned();
    // A blank field is no value; anything else must be a count.
    // (As the API's query strings: the error document, 400.)
    let number = |name: &str, v: &Option<String>| -> Result<Option<usize>, String> {
        given(v)
            .map(|x| {
                x.parse::<usize>().map_err(|_| {
                    format!("query string: {name} must be a non-negative whole number, not {x:?}")
                })
            })
            .transpose()
    };
    let (offset, limit) = match (number("offset", &f.offset), number("limit", &f.limit)) {
        (Ok(o), Ok(l)) => (o.unwrap_or(0), l),
        (Err(e), _) | (_, Err(e)) => return api::ApiError::bad_request(e).into_response(),
    };
    let q = SessionQuery {
        q: Some(needle.clone()),
        agent: Some(agent.clone()),
        offset: Some(offset),
        limit: Some(limit.unwrap_or(PER_PAGE)),
    };
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
            input type="search" name="q" value=(needle) placeholder="title, agent or id" aria-label="Title, agent or id";
            input type="text" name="agent" value=(agent) placeholder="agent" aria-label="Agent";
            button type="submit" { "Filter" }
            @if !needle.is_empty() || !agent.is_empty() { a href="/" { "clear" } }
            @if !needle.is_empty() { a href=(format!("/search?q={}", query_escape(&needle))) { "search messages for it →" } }
        }
        p.count {
            (list.total) " sessions"
            @if list.total > 0 { " · " (offset.min(list.total) + 1) "–" (list.next_offset.unwrap_or(list.total)) }
        }
        table.sessions {
            thead { tr { th { "Title" } th { "Agent" } th { "Id" } th { "Created" } th { "Last activity" } th.num { "Turns" } th.num { "Tokens in / out" } th.num { "Cost" } th.num { "Errors" } } }
            tbody {
                @for (s, t) in list.sessions.iter().zip(&totals) {
                    @let bad = t.as_ref().is_some_and(|t| t.errors + t.cut > 0);
                    tr class=(if bad { "row failed" } else { "row" }) data-href=(session_url(&s.id, None)) {
                        td { a href=(session_url(&s.id, None)) { bdi { (s.title.as_deref().unwrap_or("(untitled)")) } } }
                        td { bdi { (s.agent) } }
                        td.mono { (short(&s.id)) }
                        td { (s.created_at) }
                        @if let Some(t) = t {
                            td.last { @if let Some(l) = t.last { (convo_api::time(l)) } }
                            td.num { (t.turns) }
                            td.num { (t.tokens_in) " / " (t.tokens_out) }
                            td.num { @if t.calls > 0 { (llm::usd(t.cost)) } }
                            td class=(if t.errors + t.cut > 0 { "num bad" } else { "num" }) {
                                (t.errors) @if t.cut > 0 { " · " span.cut title="calls whose stream the upstream cut" { (t.cut) " cut" } }
                            }
                        } @else { td {} td {} td {} td {} td {} }
                    }
                }
            }
        }
        nav.pager aria-label="Session pages" {
            @if offset > 0 {
                a.prev href=(list_url(&needle, &agent, offset.saturating_sub(PER_PAGE))) rel="prev" { "← Previous page" }
            }
            @if let Some(next) = list.next_offset {
                a.next href=(list_url(&needle, &agent, next)) rel="next" { "Next page →" }
            }
        }
    };
    html_response(page("Sessions", body))
}
