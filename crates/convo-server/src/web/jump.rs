//! Finding one's way in a long timeline: which page of it to show (a
//! `cursor`, the page holding turn `N`, or the page centred on a node), the
//! page numbers with first and last, and the jump box.
//!
//! A node's position on any timeline holding it is its depth − 1 (its
//! derived context), so a page centred on a node is one page read, and a
//! turn is found through its `BRANCH@TURN` reference.

use super::*;

/// Nodes per timeline page.
pub(super) const PAGE: usize = 200;

/// Nodes shown before a turn jumped to (its context).
const BEFORE_TURN: usize = 20;

/// Where a session page starts and what it brings into view.
#[derive(Debug, Default)]
pub(super) struct Place {
    /// The `cursor` for [`api::timeline_page`] (negative: from the end).
    pub cursor: i64,
    /// The node to bring into view and mark.
    pub focus: Option<String>,
    /// Why a jump could not be made (shown on the page).
    pub notice: Option<String>,
    /// Another timeline holding the node asked for, when this one does not.
    pub elsewhere: Option<String>,
}

/// A query value, `None` when absent or blank (a form's empty field).
pub(super) fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// The place a session page shows: `node` (a hash or unique prefix) wins
/// over `turn`, which wins over `cursor`; the tail by default.
pub(super) fn locate(
    s: &mut Store,
    session: &SessionRow,
    branch: &BranchName,
    cursor: Option<&str>,
    turn: Option<&str>,
    node: Option<&str>,
) -> convo_store::Result<Place> {
    let tail = -(PAGE as i64);
    let mut place = Place {
        cursor: tail,
        ..Place::default()
    };
    if let Some(n) = node {
        let found = convo_core::HashPrefix::parse(n)
            .map_err(StoreError::invalid)
            .and_then(|p| s.node(&p));
        match found {
            Ok(stored) if stored.node.session == session.id => {
                let pos = stored.ctx.depth.saturating_sub(1) as usize;
                place.cursor = pos.saturating_sub(PAGE / 2) as i64;
                place.focus = Some(stored.hash.to_hex());
                if !on_timeline(s, session, branch, &stored.hash)? {
                    place.elsewhere = holding(s, session, &stored.hash)?;
                }
            }
            Ok(_) => place.notice = Some(format!("node {n} is not in this session")),
            Err(e) => place.notice = Some(e.to_string()),
        }
        return Ok(place);
    }
    if let Some(t) = turn {
        match t.parse::<u64>() {
            Ok(k) if k >= 1 => {
                // `BRANCH@K` is the turn's last node; its first (the
                // invoke) is at most a page before it.
                match s.resolve_ref(&session.id, &format!("{}@{k}", branch.as_str())) {
                    Ok(last) => {
                        let end = last.ctx.depth.saturating_sub(1) as usize;
                        let from = end.saturating_sub(PAGE);
                        let before = s.timeline_page(&session.id, branch, from, end - from + 1)?;
                        let first = before
                            .nodes
                            .iter()
                            .enumerate()
                            .find(|(_, (_, t))| *t == k)
                            .map_or((end, last.hash), |(i, (n, _))| (from + i, n.stored.hash));
                        place.cursor = first.0.saturating_sub(BEFORE_TURN) as i64;
                        place.focus = Some(first.1.to_hex());
                    }
                    Err(e) => place.notice = Some(format!("no turn {k} here: {e}")),
                }
            }
            _ => place.notice = Some(format!("turn `{t}` is not a number from 1")),
        }
        return Ok(place);
    }
    if let Some(c) = cursor {
        match c.parse::<i64>() {
            Ok(c) => place.cursor = c,
            Err(_) => place.notice = Some(format!("cursor `{c}` is not a number")),
        }
    }
    Ok(place)
}

/// Whether the timeline `branch` holds `hash` (its page at the node's
/// position does).
fn on_timeline(
    s: &mut Store,
    session: &SessionRow,
    branch: &BranchName,
    hash: &NodeHash,
) -> convo_store::Result<bool> {
    let stored =
        s.node(&convo_core::HashPrefix::parse(&hash.to_hex()).map_err(StoreError::invalid)?)?;
    let pos = stored.ctx.depth.saturating_sub(1) as usize;
    let page = s.timeline_page(&session.id, branch, pos, 1)?;
    Ok(page
        .nodes
        .first()
        .is_some_and(|(n, _)| n.stored.hash == *hash))
}

/// The first timeline (`main` first, then by name) that holds `hash`.
fn holding(
    s: &mut Store,
    session: &SessionRow,
    hash: &NodeHash,
) -> convo_store::Result<Option<String>> {
    let mut branches = s.branches(&session.id)?;
    branches.sort_by(|a, b| {
        (a.name.as_str() != "main", a.name.as_str())
            .cmp(&(b.name.as_str() != "main", b.name.as_str()))
    });
    for b in branches {
        if on_timeline(s, session, &b.name, hash)? {
            return Ok(Some(b.name.as_str().to_owned()));
        }
    }
    Ok(None)
}

/// The URL of a session page at `extra` (`cursor=…`, `node=…`), on `branch`.
pub(super) fn page_url(sid: &str, branch: &str, extra: &str) -> String {
    let base = session_url(sid, Some(branch));
    if extra.is_empty() {
        return base;
    }
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}{extra}")
}

/// A link to a node in its timeline: the page centred on it.
pub(super) fn node_url(sid: &str, branch: &str, hash: &str) -> String {
    format!(
        "{}#n-{}",
        page_url(sid, branch, &format!("node={}", query_escape(hash))),
        query_escape(hash)
    )
}

/// First, earlier, numbered pages around this one, later, last; with
/// `form`, the box to jump to a turn or a node.
pub(super) fn pager(sid: &str, branch: &str, tl: &api::TimelinePageView, form: bool) -> Markup {
    let total = tl.total;
    let pages = total.div_ceil(PAGE).max(1);
    let at = tl.cursor;
    let end = at + tl.nodes.len();
    // The page holding this page's first node; the last at the head.
    let current = if end >= total { pages - 1 } else { at / PAGE };
    let link = |c: usize| page_url(sid, branch, &format!("cursor={c}"));
    let last_url = page_url(sid, branch, "");
    let mut numbers: Vec<usize> = vec![0];
    numbers.extend(current.saturating_sub(2)..=(current + 2).min(pages - 1));
    numbers.push(pages - 1);
    numbers.sort_unstable();
    numbers.dedup();
    // Each page number, and whether pages are left out before it.
    let shown: Vec<(usize, bool)> = numbers
        .iter()
        .enumerate()
        .map(|(i, &k)| (k, i > 0 && k > numbers[i - 1] + 1))
        .collect();
    html! {
        nav.pager aria-label="Timeline pages" {
            @if total > 0 { span.range { "nodes " (at + 1) "–" (end) " of " (total) } }
            @if pages > 1 {
                @if at > 0 {
                    a.first href=(link(0)) title="the session's first nodes" { "⇤ first" }
                    a.prev href=(link(at.saturating_sub(PAGE))) rel="prev" { "← earlier" }
                }
                span.pages {
                    @for (k, gap) in &shown {
                        @if *gap { span.gap { "…" } }
                        @if *k == current {
                            strong.page aria-current="page" { (k + 1) }
                        } @else if *k == pages - 1 {
                            a.page href=(last_url) { (k + 1) }
                        } @else {
                            a.page href=(link(k * PAGE)) { (k + 1) }
                        }
                    }
                }
                @if let Some(next) = tl.next_cursor {
                    a.next href=(link(next)) rel="next" { "later →" }
                    a.last href=(last_url) title="the head of this timeline" { "last ⇥" }
                }
            }
            @if form { form.jump action=(format!("/sessions/{sid}")) method="get" {
                @if branch != "main" { input type="hidden" name="branch" value=(branch); }
                label { "Turn " input type="number" name="turn" min="1" max=(tl.turns.max(1)) placeholder=(format!("1–{}", tl.turns)) id="jump-turn"; }
                label { "or node " input type="text" name="node" placeholder="hash" size="12" id="jump-node"; }
                button type="submit" { "Go" }
            } }
        }
    }
}
