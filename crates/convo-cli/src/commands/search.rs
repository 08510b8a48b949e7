use super::select::FilterArgs;
use super::{CmdResult, CommandError, Env, branch_name, find_session, now};
use crate::output::{clean, human_time, write_json};
use crate::ui::{Out, Style, paint};
use clap::Args;
use convo_core::text::{Newlines, visible};
use convo_store::search::{Query, SearchHit, SearchRequest};
use convo_store::{Access, Store};
use std::io::Write;
use std::process::ExitCode;

/// Find the nodes whose payload holds every word of QUERY, best match first.
///
/// Reads the store's full-text index (SQLite FTS5, PostgreSQL full-text
/// search) and prints each hit's node, its place as BRANCH@TURN (a
/// reference `convo turn` and `convo log` take), the session, and the
/// payload around the match, highlighted when color is on. The index is
/// brought up to date first (it only ever adds the nodes appended since
/// it last ran); on a store that cannot be written, the nodes it lacks are
/// scanned instead. --reindex rebuilds it from scratch.
///
/// QUERY: words (all must appear; case does not matter; words are runs of
/// letters and digits), `prefix*`, and "quoted phrases". `foo-bar` is the
/// phrase "foo bar". `a OR b` finds either; `-word` leaves out the nodes
/// holding it.
///
/// A message resent with every later request (an agent's history) is one
/// hit, where it first appeared in its session. When there are more hits
/// than -n, the last line (on stderr) says how many and the --offset of
/// the next page.
///
/// Examples:
///   convo search paris
///   convo search 'capit* "of france"' --session Paris --kind complete
///   convo search timeout --since 2h -n 5
///   convo search 'rate limit' --agent proxy --model gpt-4o --failed
///   convo search 'paris OR rome -weather' -n 20 --offset 20
///   convo search 'rate limit' --json | jq -r '.hits[].node.hash'
///   convo search "migration failed" --agent claude-code
///   convo search --reindex
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct SearchArgs {
    /// What to find: words, prefix*, "a phrase"
    #[arg(required_unless_present = "reindex")]
    pub query: Option<String>,
    /// Only this session (id, unique id prefix or title)
    #[arg(long)]
    pub session: Option<String>,
    /// Only nodes on this timeline of the session
    #[arg(long, requires = "session")]
    pub branch: Option<String>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only sessions of this agent (exact name: claude-code, codex, an OTLP service name…)
    #[arg(long, value_name = "NAME", help_heading = "Filters")]
    pub agent: Option<String>,
    /// Only nodes whose diagnostics name this model
    #[arg(long, help_heading = "Filters")]
    pub model: Option<String>,
    /// Only nodes whose diagnostics' status is this (200, 429…)
    #[arg(long, help_heading = "Filters")]
    pub status: Option<String>,
    /// Only nodes that record a failure (an error in their diagnostics, or a 4xx/5xx status)
    #[arg(long, help_heading = "Filters")]
    pub failed: bool,
    /// Show at most this many hits
    #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// Skip this many hits first (the next page: --offset N with N the hits seen)
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub offset: usize,
    /// Rebuild the search index from every node, then search (if QUERY is given)
    #[arg(long)]
    pub reindex: bool,
    /// Print one JSON document (see convo_api::SearchResults)
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: SearchArgs) -> CmdResult {
    let mut filter = a.filter.to_filter(now())?;
    filter.model = a.model.clone();
    filter.status = a.status.clone();
    filter.failed = a.failed;
    let query = a.query.as_deref().map(Query::parse).transpose()?;
    let mut store = env.open()?;
    if a.reindex {
        let mut w = Store::open_as(&env.store_url, Access::Write)?;
        let n = update(&mut w, true)?;
        if !a.json || query.is_none() {
            eprintln!("search index rebuilt: {n} nodes read");
        }
    } else if store.search_status()?.behind() > 0 {
        // Reads open the store read-only: update through a writer when we may.
        match Store::open_as(&env.store_url, Access::Write) {
            Ok(mut w) => {
                update(&mut w, false)?;
            }
            Err(e) => {
                let behind = store.search_status()?.behind();
                eprintln!(
                    "note: the search index is {behind} nodes behind and cannot be updated ({}); scanning them",
                    visible(&e.to_string(), Newlines::Escape)
                );
            }
        }
    }
    let Some(query) = query else {
        return Ok(ExitCode::SUCCESS);
    };
    let session = a
        .session
        .as_deref()
        .map(|q| find_session(&mut store, q))
        .transpose()?;
    let req = SearchRequest {
        query,
        session: session.as_ref().map(|s| s.id),
        agent: a.agent.clone(),
        branch: a.branch.as_deref().map(branch_name).transpose()?,
        filter,
        limit: a.limit,
        offset: a.offset,
    };
    let r = store.search(&req)?;
    if a.json {
        let v = serde_json::to_value(
            <convo_api::SearchResults as convo_runtime::wire::FromStore<_>>::from_store(&r),
        )
        .map_err(|e| CommandError::user(e.to_string()))?;
        let mut out = Out::stdout();
        write_json(&mut out, &v)?;
        // Like the human output (and grep, rg --json): no hit is exit 1.
        return Ok(ExitCode::from(u8::from(r.hits.is_empty())));
    }
    let mut titles = std::collections::HashMap::new();
    let mut out = Out::paged();
    for (i, h) in r.hits.iter().enumerate() {
        let s = &h.node.node.session;
        if !titles.contains_key(s) {
            let t = store
                .find_session(&s.to_string())
                .ok()
                .and_then(|r| r.title);
            titles.insert(*s, t);
        }
        let title = titles.get(s).cloned().flatten();
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(out, "{}", heading(h, title.as_deref()))?;
        writeln!(out, "    {}", highlighted(h))?;
    }
    out.finish()?;
    if r.hits.is_empty() {
        eprintln!("no match");
        return Ok(ExitCode::from(1));
    }
    if let Some(line) = page_line(&r) {
        eprintln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `hits 21-40 of 143 (12 resent copies not shown); next: --offset 40`,
/// when the hits are not all shown or copies were left out.
fn page_line(r: &convo_store::search::SearchResults) -> Option<String> {
    let end = r.offset + r.hits.len();
    if r.offset == 0 && end >= r.total && r.resent == 0 {
        return None;
    }
    let of = if r.exact {
        r.total.to_string()
    } else {
        format!("at least {}", r.total)
    };
    let mut line = format!("hits {}-{end} of {of}", r.offset + 1);
    if r.resent > 0 {
        line.push_str(&format!(
            " ({} resent {} not shown)",
            r.resent,
            if r.resent == 1 { "copy" } else { "copies" }
        ));
    }
    if end < r.total {
        line.push_str(&format!("; next: --offset {end}"));
    }
    Some(line)
}

/// Brings the index up to date (or rebuilds it), with a progress bar
/// when it takes a while; returns how many nodes it read.
fn update(store: &mut Store, rebuild: bool) -> CmdResult<u64> {
    let status = store.search_status()?;
    let todo = if rebuild { status.end } else { status.behind() };
    let mut bar = crate::ui::Progress::new(todo, "nodes");
    let start = if rebuild { 0 } else { status.cursor };
    let mut progress = |cursor: u64, _end: u64| bar.set("indexing", cursor.saturating_sub(start));
    let n = if rebuild {
        store.search_reindex(&mut progress)?
    } else {
        store.search_update(&mut progress)?
    };
    bar.finish();
    Ok(n)
}

/// `3fa9c1d2  main@2 (+1)  ses-1234abcd "Paris"  complete agent → cli  2026-11-23 09:30`
fn heading(h: &SearchHit, title: Option<&str>) -> String {
    let n = &h.node.node;
    let place = match (h.branches.first(), h.turn) {
        (Some(b), Some(t)) => format!("{}@{t}", clean(b.as_str())),
        (Some(b), None) => clean(b.as_str()),
        (None, _) => "(no timeline)".to_owned(),
    };
    let more = match h.branches.len() {
        0 | 1 => String::new(),
        k => format!(" (+{})", k - 1),
    };
    let title = title
        .map(|t| format!(" \"{}\"", clean(t)))
        .unwrap_or_default();
    format!(
        "{}  {}{}  {}{}  {} {} → {}  {}",
        paint(Style::Hash, &h.node.hash.short()),
        paint(Style::Cyan, &place),
        more,
        n.session.short(),
        title,
        paint(Style::Magenta, n.kind.as_str()),
        clean(&n.from),
        clean(&n.to),
        paint(Style::Dim, &human_time(n.created_at)),
    )
}

/// The snippet made safe for the terminal, its matches in bold red when
/// color is on.
fn highlighted(h: &SearchHit) -> String {
    let s = &h.snippet;
    let safe = |t: &str| visible(t, Newlines::Escape).into_owned();
    let mut out = String::new();
    let mut at = 0;
    for &(a, b) in &s.marks {
        out.push_str(&safe(&s.text[at..a]));
        let m = safe(&s.text[a..b]);
        if crate::ui::color() {
            out.push_str(&format!("\x1b[1;31m{m}\x1b[0m"));
        } else {
            out.push_str(&m);
        }
        at = b;
    }
    out.push_str(&safe(&s.text[at..]));
    out
}
