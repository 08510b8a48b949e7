//! The session list.

use super::jump::given;
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
    let number = |v: &Option<String>| given(v).and_then(|v| v.parse::<usize>().ok());
    let offset = number(&f.offset).unwrap_or(0);
    let q = SessionQuery {
        q: Some(needle.clone()),
        agent: Some(agent.clone()),
        offset: Some(offset),
        limit: Some(number(&f.limit).unwrap_or(PER_PAGE)),
    };
    let list = match run(&st, |s| s.sessions()).await {
        Ok(all) => api::filter_sessions(all, &q),
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
