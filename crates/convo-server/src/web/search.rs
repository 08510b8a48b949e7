//! The search page: full-text search over every message (the store's
//! index, through [`api::search_results`], the code behind
//! `GET /api/v1/search`), filtered by agent, model, status, failure, kind
//! and time; each hit links to its node on the page of its timeline
//! centred on it. Sessions whose title, agent or id match are listed
//! above.

use super::jump::{given, node_url};
use super::*;

/// The form's fields; blank ones are ignored.
#[derive(Debug, Default, Deserialize)]
pub(super) struct SearchForm {
    q: Option<String>,
    agent: Option<String>,
    model: Option<String>,
    status: Option<String>,
    failed: Option<String>,
    kind: Option<String>,
    since: Option<String>,
    until: Option<String>,
    session: Option<String>,
    limit: Option<String>,
    offset: Option<String>,
}

impl SearchForm {
    /// This search's URL at another offset: the fields given, in order.
    fn url(&self, offset: usize) -> String {
        let fields = [
            ("q", &self.q),
            ("agent", &self.agent),
            ("model", &self.model),
            ("status", &self.status),
            ("failed", &self.failed),
            ("kind", &self.kind),
            ("since", &self.since),
            ("until", &self.until),
            ("session", &self.session),
            ("limit", &self.limit),
        ];
        let mut parts: Vec<String> = fields
            .iter()
            .filter_map(|(k, v)| given(v).map(|v| format!("{k}={}", query_escape(v))))
            .collect();
        if offset > 0 {
            parts.push(format!("offset={offset}"));
        }
        format!("/search?{}", parts.join("&"))
    }
}

/// Hits per search page.
const HITS: usize = 50;

pub(super) async fn search_page(
    State(st): State<AppState>,
    Query(f): Query<SearchForm>,
) -> Response {
    let needle = given(&f.q).unwrap_or_default().to_owned();
    let limit = given(&f.limit)
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(HITS)
        .clamp(1, 500);
    let offset = given(&f.offset)
        .and_then(|o| o.parse::<usize>().ok())
        .unwrap_or(0);
    let sessions = match run(&st, |s| s.sessions()).await {
        Ok(all) => all,
        Err(r) => return r,
    };
    let mut agents: Vec<&str> = sessions.iter().map(|s| s.agent.as_str()).collect();
    agents.sort_unstable();
    agents.dedup();
    let names: std::collections::HashMap<String, (&str, &str)> = sessions
        .iter()
        .map(|s| {
            (
                s.id.to_string(),
                (s.title.as_deref().unwrap_or("(untitled)"), s.agent.as_str()),
            )
        })
        .collect();
    // Sessions by title, agent or id, as the list filters them.
    let by_name = (!needle.is_empty()).then(|| {
        api::filter_sessions(
            sessions.clone(),
            &SessionQuery {
                q: Some(needle.clone()),
                agent: f.agent.clone(),
                offset: None,
                limit: Some(10),
            },
        )
    });
    let results = if needle.is_empty() {
        None
    } else {
        let q = api::SearchQuery {
            q: needle.clone(),
            session: f.session.clone(),
            agent: f.agent.clone(),
            kind: f.kind.clone(),
            model: f.model.clone(),
            status: f.status.clone(),
            failed: f.failed.clone(),
            since: f.since.clone(),
            until: f.until.clone(),
            limit: Some(limit),
            offset: Some(offset),
            ..api::SearchQuery::default()
        };
        Some(api::search_results(&st, &q).await)
    };
    let body = html! {
        h1 { "Search" }
        (filters(&f, &needle, &agents))
        @if let Some(list) = &by_name && list.total > 0 { (named_like(list, &needle)) }
        @match &results {
            None => { p.count { "Type words to find in every message of every session." } }
            Some(Err(e)) => { p.notice { (e.message()) } }
            Some(Ok(r)) => {
                p.count #hits-count data-total=(r.total) {
                    @if !r.exact { "more than " }
                    (r.total) @if r.total == 1 { " message" } @else { " messages" }
                    @if r.total as usize > r.hits.len() && !r.hits.is_empty() { ", " (r.offset + 1) "–" (r.offset as usize + r.hits.len()) " shown" }
                    @if r.resent > 0 { span.resent title="a message an agent sent again with a later request is shown once, where it first appeared" { " (" (r.resent) " resent " @if r.resent == 1 { "copy" } @else { "copies" } " folded)" } }
                }
                ol.hits { @for h in &r.hits { (hit_item(h, &names)) } }
                (super::index::pages("Search result pages", limit, r.total as usize, offset, &|o| f.url(o)))
                @if r.scanned > 0 { p.count { (r.scanned) " recent messages were read one by one (the index is catching up)." } }
            }
        }
    };
    html_response(page("Search", body))
}

/// The search form with its filters, as they were asked.
fn filters(f: &SearchForm, needle: &str, agents: &[&str]) -> Markup {
    let val = |v: &Option<String>| given(v).unwrap_or_default().to_owned();
    let failed_on = matches!(given(&f.failed), Some("on" | "true" | "1"));
    html! {
        form.filters.find action="/search" method="get" role="search" {
            input type="search" name="q" value=(needle) placeholder="words in any message, prefix*, \"a phrase\", a OR b, -word" aria-label="Words to find" id="find-q";
            input type="text" name="agent" value=(val(&f.agent)) placeholder="agent" list="agents" aria-label="Agent";
            datalist #agents { @for a in agents { option value=(a) {} } }
            input type="text" name="model" value=(val(&f.model)) placeholder="model" aria-label="Model";
            input type="text" name="status" value=(val(&f.status)) placeholder="status" size="6" aria-label="Status";
            select name="kind" aria-label="Kind" {
                option value="" { "any kind" }
                @for k in ["invoke", "request", "response", "complete"] {
                    option value=(k) selected[given(&f.kind) == Some(k)] { (k) }
                }
            }
            label { input type="checkbox" name="failed" value="on" checked[failed_on]; " failed only" }
            label { "from " input type="date" name="since" value=(val(&f.since)) aria-label="Since"; }
            label { "before " input type="date" name="until" value=(val(&f.until)) aria-label="Until"; }
            @if let Some(s) = given(&f.session) { input type="hidden" name="session" value=(s); }
            button type="submit" { "Search" }
        }
    }
}

/// The sessions whose title, agent or id match the words.
fn named_like(list: &crate::api::SessionList, needle: &str) -> Markup {
    html! {
        section.found-sessions {
            h2 { "Sessions named like this (" (list.total) ")" }
            ul {
                @for s in &list.sessions {
                    li { a href=(session_url(&s.id, None)) { bdi { (s.title.as_deref().unwrap_or("(untitled)")) } } " · " bdi { (s.agent) } " · " span.mono { (short(&s.id)) } }
                }
            }
            @if list.total > list.sessions.len() {
                p { a href=(format!("/?q={}", query_escape(needle))) { "All " (list.total) " sessions named like this →" } }
            }
        }
    }
}

/// One hit: where it is (session, timeline, turn), its figures and the
/// words found, marked.
fn hit_item(
    h: &convo_api::SearchHit,
    names: &std::collections::HashMap<String, (&str, &str)>,
) -> Markup {
    let n = &h.node;
    let (title, agent) = names.get(&n.session).copied().unwrap_or(("(untitled)", ""));
    let branch = h.branches.first().map(String::as_str).unwrap_or("main");
    html! {
        li.hit data-hash=(n.hash) {
            div.meta {
                span class=(format!("kind k-{}", n.kind)) { (n.kind) }
                a.where href=(node_url(&n.session, branch, &n.hash)) {
                    bdi { (title) } " · " bdi { (branch) }
                    @if let Some(t) = h.turn { "@" (t) }
                }
                span.diag { "agent: " bdi { (agent) } }
                @for k in ["model", "status"] {
                    @if let Some(v) = n.diagnostics.get(k).filter(|v| !v.is_null()) {
                        span.diag { (k) ": " bdi { (v.as_str().map_or_else(|| v.to_string(), str::to_owned)) } }
                    }
                }
                @if convo_store::filter::failed(&n.diagnostics.to_string()) { span.event { "failed" } }
                @if h.branches.len() > 1 { span.also { "also on " (h.branches.len() - 1) " other timeline(s)" } }
                time { (n.created_at) }
            }
            p.snippet { (marked(&h.snippet, &h.marks)) }
        }
    }
}

/// A snippet with its matches in `<mark>`, every part escaped.
fn marked(text: &str, marks: &[[usize; 2]]) -> Markup {
    let mut parts: Vec<(&str, bool)> = Vec::new();
    let mut at = 0;
    for &[a, b] in marks {
        let (Some(before), Some(hit)) = (text.get(at..a), text.get(a..b)) else {
            continue;
        };
        parts.push((before, false));
        parts.push((hit, true));
        at = b;
    }
    parts.push((text.get(at..).unwrap_or_default(), false));
    html! {
        bdi { @for (t, hit) in parts { @if hit { mark { (t) } } @else { (t) } } }
    }
}
