//! Subagents on the session page: under the call that started one, a link
//! to its timeline (turns, the tool that started it); on the subagent's
//! timeline, a way back to that call. The link is what the store's one
//! reader says ([`convo_store::topology`], `BranchNode::subagent`), for
//! calls recorded through the proxy and transcripts imported alike.

use super::*;
use convo_store::Store;

/// One subagent's timeline, as the page shows it.
pub(super) struct Sub {
    /// Its timeline.
    pub(super) branch: String,
    /// The timeline it was started from.
    pub(super) parent: String,
    /// The node it forks at: the call (or its turn's end) that started it.
    pub(super) started_by: String,
    /// The tool that started it, when known.
    pub(super) tool: Option<String>,
    /// Its turns.
    pub(super) turns: usize,
    /// Nodes it shares with the timeline it was started from.
    pub(super) shared: usize,
}

/// A subagent's calls, for the waterfall of the turn that started it.
pub(super) struct Calls {
    /// Its timeline.
    pub(super) branch: String,
    /// The node it forks at.
    pub(super) started_by: String,
    /// Its nodes after the fork (without payloads: the bars read the
    /// diagnostics).
    pub(super) nodes: Vec<NodeView>,
}

/// Nodes of a subagent's timeline its waterfall rows read at most.
const CALLS_READ: usize = 400;
/// Subagents drawn in one page's waterfalls at most.
const SUBS_READ: usize = 50;

/// The session's subagent timelines (none read for a session with one
/// timeline).
pub(super) fn subagents(
    s: &mut Store,
    row: &SessionRow,
    timelines: usize,
) -> convo_store::Result<Vec<Sub>> {
    if timelines < 2 {
        return Ok(Vec::new());
    }
    Ok(convo_store::topology::topology(s, &row.id)?
        .into_iter()
        .filter_map(|b| {
            let link = b.subagent?;
            let text = |k: &str| link.get(k).and_then(|v| v.as_str()).map(str::to_owned);
            Some(Sub {
                branch: b.branch.name.as_str().to_owned(),
                parent: text("branch")
                    .or_else(|| b.parent.map(|p| p.as_str().to_owned()))
                    .unwrap_or_else(|| "main".into()),
                started_by: text("started_by")
                    .or_else(|| b.fork_point.map(|h| h.to_hex()))
                    .unwrap_or_default(),
                tool: text("tool"),
                turns: b.turns.saturating_sub(b.fork_turn),
                shared: b.shared,
            })
        })
        .collect())
}

/// The calls of each subagent started from a node of this page of
/// `branch` (the nodes of its timeline after the fork).
pub(super) fn calls(
    s: &mut Store,
    row: &SessionRow,
    subs: &[Sub],
    branch: &str,
    page: &api::TimelinePageView,
) -> convo_store::Result<Vec<Calls>> {
    let here: std::collections::HashSet<&str> =
        page.nodes.iter().map(|n| n.hash.as_str()).collect();
    let sid = row.id.to_string();
    let mut out = Vec::new();
    let started = subs
        .iter()
        .filter(|x| x.parent == branch && here.contains(x.started_by.as_str()));
    for sub in started.take(SUBS_READ) {
        let b = BranchName::new(&sub.branch).map_err(StoreError::invalid)?;
        let from = i64::try_from(sub.shared).unwrap_or(i64::MAX);
        let nodes = api::bare_timeline_page(s, &sid, &b, from, CALLS_READ)?.nodes;
        out.push(Calls {
            branch: sub.branch.clone(),
            started_by: sub.started_by.clone(),
            nodes,
        });
    }
    Ok(out)
}

/// Under the node that started them: each subagent's timeline.
pub(super) fn started_here(sid: &str, subs: &[&Sub]) -> Markup {
    html! {
        @for s in subs {
            div.subagent {
                "↳ subagent "
                a href=(session_url(sid, Some(&s.branch))) { bdi { (s.branch) } }
                " · " (s.turns) @if s.turns == 1 { " turn" } @else { " turns" }
                @if let Some(t) = &s.tool { " · started by a " bdi { (t) } " call" }
            }
        }
    }
}

/// On a subagent's own timeline: where it came from.
pub(super) fn back(sid: &str, s: &Sub) -> Markup {
    html! {
        p.notice.subagent {
            "A subagent's timeline"
            @if let Some(t) = &s.tool { ", started by a " bdi { (t) } " call" }
            " on " bdi { (s.parent) } ": "
            a href=(super::jump::node_url(sid, &s.parent, &s.started_by)) { "back to that call" } "."
        }
    }
}
