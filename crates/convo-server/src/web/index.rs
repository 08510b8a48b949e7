//! The session list.

use super::jump::given;
use super::llm;
use super::*;
use convo_runtime::wire::FromStore as _;

/// Sessions per list page.
const PER_PAGE: usize = 50;

/// What the list can be sorted by: the query value, the column's heading,
/// and whether it needs every session's figures.
const SORTS: [(&str, &str, bool); 9] = [
    ("title", "Title", false),
    ("agent", "Agent", false),
    ("created", "Created", false),
    ("activity", "Last activity", true),
    ("turns", "Turns", true),
    ("calls", "Calls", true),
    ("tokens", "Tokens in / out", true),
    ("cost", "Cost", true),
    ("errors", "Errors", true),
];

/// The list's filters, order and page, as its links carry them.
#[derive(Clone, Debug)]
struct View {
    needle: String,
    agent: String,
    sort: &'static str,
    asc: bool,
    per: usize,
}

impl View {
    /// The list's URL with only what differs from the defaults.
    fn url(&self, offset: usize, sort: &str, asc: bool) -> String {
        let mut parts = Vec::new();
        if !self.needle.is_empty() {
            parts.push(format!("q={}", query_escape(&self.needle)));
        }
        if !self.agent.is_empty() {
            parts.push(format!("agent={}", query_escape(&self.agent)));
        }
        if sort != "created" || asc {
            parts.push(format!(
                "sort={sort}&dir={}",
                if asc { "asc" } else { "desc" }
            ));
        }
        if self.per != PER_PAGE {
            parts.push(format!("limit={}", self.per));
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

    fn page(&self, offset: usize) -> String {
        self.url(offset, self.sort, self.asc)
    }
}

/// Orders `rows` (newest first, each with its figures when the key needs
/// them) by `key`; ties keep newest first.
fn sort_rows(rows: &mut [(&SessionRow, Option<llm::Totals>)], key: &str, asc: bool) {
    use std::cmp::Ordering;
    let fig = |t: &Option<llm::Totals>, f: fn(&llm::Totals) -> f64| t.as_ref().map_or(-1.0, f);
    let cmp = |a: &(&SessionRow, Option<llm::Totals>),
               b: &(&SessionRow, Option<llm::Totals>)|
     -> Ordering {
        match key {
            "title" => {
                let t = |r: &SessionRow| r.title.as_deref().map(str::to_lowercase);
                // Untitled sessions after the titled ones.
                match (t(a.0), t(b.0)) {
                    (Some(x), Some(y)) => x.cmp(&y),
                    (x, y) => y.is_none().cmp(&x.is_none()).reverse(),
                }
            }
            "agent" => a.0.agent.to_lowercase().cmp(&b.0.agent.to_lowercase()),
            "created" => a.0.created_at.cmp(&b.0.created_at),
            other => {
                let f: fn(&llm::Totals) -> f64 = match other {
                    "activity" => |t| t.last.unwrap_or(0) as f64,
                    "turns" => |t| t.turns as f64,
                    "calls" => |t| t.calls as f64,
                    "tokens" => |t| (t.tokens_in + t.tokens_out) as f64,
                    "cost" => |t| t.cost,
                    _ => |t| (t.errors + t.cut) as f64,
                };
                fig(&a.1, f).total_cmp(&fig(&b.1, f))
            }
        }
    };
    if asc {
        rows.sort_by(cmp);
    } else {
        rows.sort_by(|a, b| cmp(b, a));
    }
}

/// The list's form and links; blank fields are ignored.
#[derive(Debug, Deserialize)]
pub(super) struct ListForm {
    q: Option<String>,
    agent: Option<String>,
    offset: Option<String>,
    limit: Option<String>,
    sort: Option<String>,
    dir: Option<String>,
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
    let sort = SORTS
        .iter()
        .find(|(k, _, _)| Some(*k) == given(&f.sort))
        .map_or("created", |(k, _, _)| *k);
    let view = View {
        needle,
        agent,
        sort,
        // Names ascend by default, figures and dates descend.
        asc: match given(&f.dir) {
            Some(d) => d == "asc",
            None => matches!(sort, "title" | "agent"),
        },
        per: limit.unwrap_or(PER_PAGE).clamp(1, 1000),
    };
    let q = SessionQuery {
        q: Some(view.needle.clone()),
        agent: Some(view.agent.clone()),
        offset: None,
        limit: None,
    };
    let v = view.clone();
    let (rows, total) = match run(&st, move |s| {
        let all = s.sessions()?;
        let hits = api::matching_sessions(&all, &q);
        let needs = SORTS.iter().any(|(k, _, n)| *k == v.sort && *n);
        // The figures (remembered per session until a head moves): of
        // every session when the order needs them, else of this page's.
        let figures = |s: &mut Store, r: &SessionRow| llm::session_totals(s, r).ok();
        let mut rows: Vec<(&SessionRow, Option<llm::Totals>)> = hits
            .into_iter()
            .map(|r| (r, if needs { figures(s, r) } else { None }))
            .collect();
        sort_rows(&mut rows, v.sort, v.asc);
        let total = rows.len();
        let page: Vec<(convo_api::Session, Option<llm::Totals>)> = rows
            .into_iter()
            .skip(offset)
            .take(v.per)
            .map(|(r, t)| {
                let t = if needs { t } else { figures(s, r) };
                (convo_api::Session::from_store(r), t)
            })
            .collect();
        Ok((page, total))
    })
    .await
    {
        Ok(d) => d,
        Err(r) => return r,
    };
    html_response(page("Sessions", list_body(&view, &rows, total, offset)))
}

/// A time stamp that may break between its date and its time.
fn stamp(t: &str) -> Markup {
    match t.split_once('T') {
        Some((d, h)) => html! { (d) "T" wbr; (h) },
        None => html! { (t) },
    }
}

/// A sortable column heading: a link that sorts by it (again: the other way).
fn heading(view: &View, key: &str, label: &str) -> Markup {
    let current = view.sort == key;
    let default_asc = matches!(key, "title" | "agent");
    let asc = if current { !view.asc } else { default_asc };
    let num = !matches!(key, "title" | "agent" | "created" | "activity");
    let sort = match (current, view.asc) {
        (false, _) => "none",
        (true, true) => "ascending",
        (true, false) => "descending",
    };
    html! {
        th class=(format!("c-{key}{}", if num { " num" } else { "" })) aria-sort=(sort) {
            a.sort href=(view.url(0, key, asc)) title=(format!("sort by {}", label.to_lowercase())) { (label) }
        }
    }
}

fn list_body(
    view: &View,
    rows: &[(convo_api::Session, Option<llm::Totals>)],
    total: usize,
    offset: usize,
) -> Markup {
    let (needle, agent) = (&view.needle, &view.agent);
    html! {
        h1 { "Sessions" }
        form.filters action="/" method="get" {
            input type="search" name="q" value=(needle) placeholder="title, agent or id" aria-label="Title, agent or id";
            input type="text" name="agent" value=(agent) placeholder="agent" aria-label="Agent";
            @if view.sort != "created" || view.asc {
                input type="hidden" name="sort" value=(view.sort);
                input type="hidden" name="dir" value=(if view.asc { "asc" } else { "desc" });
            }
            button type="submit" { "Filter" }
            @if !needle.is_empty() || !agent.is_empty() { a href="/" { "clear" } }
            @if !needle.is_empty() { a href=(format!("/search?q={}", query_escape(needle))) { "search messages for it →" } }
        }
        p.count {
            (total) " sessions"
            @if total > 0 { " · " (offset.min(total) + 1) "–" ((offset + rows.len()).min(total)) }
        }
        table.sessions {
            colgroup {
                col.c-title; col.c-agent; col.c-id; col.c-created; col.c-activity;
                col.c-turns; col.c-calls; col.c-tokens; col.c-cost; col.c-errors;
            }
            thead { tr {
                (heading(view, "title", "Title"))
                (heading(view, "agent", "Agent"))
                th.c-id { "Id" }
                @for (k, label, _) in &SORTS[2..] { (heading(view, k, label)) }
            } }
            tbody {
                @for (s, t) in rows {
                    @let bad = t.as_ref().is_some_and(|t| t.errors + t.cut > 0);
                    @let title = s.title.as_deref().unwrap_or("(untitled)");
                    tr class=(if bad { "row failed" } else { "row" }) data-href=(session_url(&s.id, None)) {
                        td.title { a href=(session_url(&s.id, None)) { bdi { (title) } } }
                        td.agent { bdi { (s.agent) } }
                        td.mono { (short(&s.id)) }
                        td.date { (stamp(&s.created_at)) }
                        @if let Some(t) = t {
                            td.last.date { @if let Some(l) = t.last { (stamp(&convo_api::time(l))) } }
                            td.num { (t.turns) }
                            td.num { (t.calls) }
                            td.num { (t.tokens_in) " / " (t.tokens_out) }
                            td.num { @if t.calls > 0 { (llm::usd(t.cost)) } }
                            td class=(if t.errors + t.cut > 0 { "num bad" } else { "num" }) {
                                (t.errors) @if t.cut > 0 { " · " span.cut title="calls whose stream the upstream cut" { (t.cut) " cut" } }
                            }
                        } @else { td {} td {} td {} td {} td {} td {} }
                    }
                }
            }
        }
        (pages("Session pages", view.per, total, offset, &|o| view.page(o)))
    }
}

/// Previous, page numbers (first, last and those around this one), next:
/// pages of `per` items, `url(offset)` the link to each (the session list
/// and the search's hits).
pub(super) fn pages(
    label: &str,
    per: usize,
    total: usize,
    offset: usize,
    url: &dyn Fn(usize) -> String,
) -> Markup {
    let per = per.max(1);
    let count = total.div_ceil(per).max(1);
    let current = (offset / per).min(count - 1);
    let mut numbers: Vec<usize> = vec![0, count - 1];
    numbers.extend(current.saturating_sub(2)..=(current + 2).min(count - 1));
    numbers.sort_unstable();
    numbers.dedup();
    html! {
        nav.pager aria-label=(label) {
            @if offset > 0 {
                a.prev href=(url(offset.saturating_sub(per))) rel="prev" { "← Previous page" }
            }
            @if count > 1 {
                span.pages {
                    @for (i, k) in numbers.iter().enumerate() {
                        @if i > 0 && *k > numbers[i - 1] + 1 { span.gap { "…" } }
                        @if *k == current {
                            strong.page aria-current="page" { (k + 1) }
                        } @else {
                            a.page href=(url(k * per)) title=(if *k == count - 1 { "the last page" } else { "" }) { (k + 1) }
                        }
                    }
                }
            }
            @if offset + per < total {
                a.next href=(url(offset + per)) rel="next" { "Next page →" }
                a.last href=(url((count - 1) * per)) { "last ⇥" }
            }
        }
    }
}
