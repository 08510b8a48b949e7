//! The store's rows in the wire format ([`convo_api`]), and wire input
//! into the store's drafts: the conversions live here, where the store is
//! known, so `convo-api` depends on the core only.

use convo_api::{AppendLine, Branch, ErrorDoc, NodeView, SearchHit, SearchResults, Session};
use convo_api::{VerifyProblem, VerifyView};
use convo_api::{decode_payload, default_ends, time};
use convo_core::{Diagnostics, Kind, Millis, StateRoot};
use convo_store::{BranchRow, Draft, SessionRow, StoreError, StoredNode, VerifyReport};

/// A wire type made from a store value.
pub trait FromStore<T: ?Sized> {
    /// The wire form of `t`.
    fn from_store(t: &T) -> Self;
}

impl FromStore<VerifyReport> for VerifyView {
    fn from_store(r: &VerifyReport) -> Self {
        VerifyView {
            ok: r.is_clean(),
            nodes: r.nodes,
            blobs: r.blobs,
            blob_bytes: r.blob_bytes,
            branches: r.branches,
            state_roots: r.state_roots,
            facts: r.facts,
            checkpoints: r.checkpoints,
            redacted: r.redacted,
            problems: r
                .problems
                .iter()
                .map(|p| VerifyProblem {
                    kind: serde_json::to_value(p.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    object: p.object.clone(),
                    reason: p.reason.clone(),
                })
                .collect(),
        }
    }
}

impl FromStore<SessionRow> for Session {
    fn from_store(s: &SessionRow) -> Self {
        Session {
            id: s.id.to_string(),
            agent: s.agent.clone(),
            title: s.title.clone(),
            created_at: time(s.created_at),
        }
    }
}

impl FromStore<BranchRow> for Branch {
    fn from_store(b: &BranchRow) -> Self {
        Branch {
            name: b.name.as_str().to_owned(),
            head: b.head.map(|h| h.to_hex()),
            state: b.state.map(|h| h.to_hex()),
            sealed: b.sealed,
            created_at: time(b.created_at),
        }
    }
}

impl FromStore<convo_store::search::SearchHit> for SearchHit {
    fn from_store(h: &convo_store::search::SearchHit) -> Self {
        let mut node = node(&h.node, None);
        node.turn = h.turn.map(|t| t as u64);
        SearchHit {
            node,
            snippet: h.snippet.text.clone(),
            marks: h.snippet.marks.iter().map(|&(a, b)| [a, b]).collect(),
            score: h.score,
            turn: h.turn.map(|t| t as u64),
            branches: h.branches.iter().map(|b| b.as_str().to_owned()).collect(),
        }
    }
}

impl FromStore<convo_store::search::SearchResults> for SearchResults {
    fn from_store(r: &convo_store::search::SearchResults) -> Self {
        SearchResults {
            hits: r.hits.iter().map(SearchHit::from_store).collect(),
            indexed: r.indexed,
            scanned: r.scanned,
            total: r.total as u64,
            exact: r.exact,
            offset: r.offset as u64,
            resent: r.resent as u64,
        }
    }
}

impl FromStore<StoreError> for ErrorDoc {
    fn from_store(e: &StoreError) -> Self {
        ErrorDoc::new(e.kind().as_str(), e.to_string())
    }
}

/// A stored node, with its payload when given.
pub fn node(s: &StoredNode, payload: Option<&[u8]>) -> NodeView {
    NodeView::new(&s.hash, s.seq, s.ctx.depth, &s.node, payload)
}

/// Checks an [`AppendLine`] and turns it into a [`Draft`] for a session
/// whose agent is `agent`, recorded at `now`. The error says which field
/// is wrong.
pub fn draft(line: &AppendLine, agent: &str, now: Millis) -> Result<Draft, String> {
    let kind: Kind = line.kind.parse()?;
    if matches!(kind, Kind::Fork | Kind::Promote) {
        return Err(format!(
            "`{kind}` nodes are written by fork and promote, not appended"
        ));
    }
    let (from, to) = default_ends(kind, agent);
    let payload = decode_payload(&line.payload, line.payload_encoding.unwrap_or_default())?;
    let diagnostics = match &line.diagnostics {
        Some(d) => Diagnostics::from_value(d).map_err(|e| format!("diagnostics: {e}"))?,
        None => Diagnostics::empty(),
    };
    let state = line
        .state
        .as_deref()
        .map(|r| StateRoot::from_hex(r).map_err(|e| format!("state: {e}")))
        .transpose()?;
    Ok(Draft {
        kind,
        from: line.from.clone().unwrap_or(from),
        to: line.to.clone().unwrap_or(to),
        payload,
        diagnostics,
        state,
        sequence: line.sequence,
        created_at: now,
    })
}

/// A [`convo_store::diff::TimelineDiff`] as the one JSON document of `convo
/// diff --json` and the API (see [`convo_api::DiffView`]): the whole diff, or
/// page `page` (from 1) of [`convo_store::diff::PAGE_NODES`] changed nodes.
/// Reads the payloads it shows.
pub fn diff(
    store: &mut convo_store::Store,
    d: &convo_store::diff::TimelineDiff,
    page: Option<u64>,
) -> Result<convo_api::DiffView, StoreError> {
    use convo_api::DiffView;
    use convo_store::diff;
    let pages = d.pages(diff::PAGE_NODES);
    let range = match page {
        None => 0..d.turns.len(),
        Some(p) => match usize::try_from(p)
            .ok()
            .and_then(|p| pages.get(p.checked_sub(1)?))
        {
            Some(r) => r.clone(),
            None => {
                return Err(StoreError::Invalid(
                    format!(
                        "page {p}: the diff has {} page{} (from 1)",
                        pages.len(),
                        if pages.len() == 1 { "" } else { "s" }
                    )
                    .into(),
                ));
            }
        },
    };
    let payloads = diff::payloads(store, d, range.clone(), true)?;
    let turns = &d.turns[range];
    let shown = Shown {
        turns,
        page,
        payloads: &payloads,
    };
    let fork_point = d
        .fork_point
        .as_ref()
        .map(|f| numbered(node(&f.stored, Some(&f.payload)), diff::turn_of(&f.stored)));
    Ok(DiffView {
        session: d.a.head.node.session.to_string(),
        fork_point,
        shared: d.common as u64,
        common: d.common as u64,
        a: shown.side(&d.a, |n| n.a),
        b: shown.side(&d.b, |n| n.b),
        turns: turns.iter().map(|t| shown.turn(d, t)).collect(),
        unchanged: d.unchanged() as u64,
        page,
        pages: pages.len() as u64,
    })
}

/// A node's view with its turn number, when it has one.
fn numbered(v: NodeView, turn: Option<usize>) -> NodeView {
    match turn {
        Some(t) => v.with_turn(t as u64),
        None => v,
    }
}

/// The part of a diff [`diff`] shows: its turns (those of `page`, or all),
/// with the payloads of their nodes.
struct Shown<'a> {
    turns: &'a [convo_store::diff::TurnDiff],
    page: Option<u64>,
    payloads: &'a convo_store::diff::Payloads,
}

impl Shown<'_> {
    /// One side: its nodes shown (`pick`: a node's index on this side).
    fn side(
        &self,
        s: &convo_store::diff::Side,
        pick: fn(&convo_store::diff::NodeDiff) -> Option<usize>,
    ) -> convo_api::DiffSide {
        let shown: Vec<usize> = match self.page {
            None => (0..s.added.len()).collect(),
            Some(_) => self
                .turns
                .iter()
                .flat_map(|t| &t.nodes)
                .filter_map(pick)
                .collect(),
        };
        convo_api::DiffSide {
            reference: s.label.clone(),
            branch: s.label.clone(),
            head: s.head.hash.to_hex(),
            count: s.added.len() as u64,
            added: shown
                .into_iter()
                .map(|i| {
                    let n = &s.added[i];
                    let v = node(n, self.payloads.get(&n.hash).map(|p| p.as_slice()));
                    numbered(v, s.turn_numbers[i])
                })
                .collect(),
        }
    }

    /// One turn of the diff: its nodes on each side and their lines.
    fn turn(
        &self,
        d: &convo_store::diff::TimelineDiff,
        t: &convo_store::diff::TurnDiff,
    ) -> convo_api::DiffTurn {
        let hash = |n: Option<&StoredNode>| n.map(|n| n.hash.to_hex());
        convo_api::DiffTurn {
            a: t.a.map(|n| n as u64),
            b: t.b.map(|n| n as u64),
            changed: t.changed(),
            nodes: t
                .nodes
                .iter()
                .map(|n| convo_api::DiffNode {
                    a: hash(d.node_a(n)),
                    b: hash(d.node_b(n)),
                    kind: d
                        .node_a(n)
                        .or(d.node_b(n))
                        .map(|x| x.node.kind.as_str().to_owned())
                        .unwrap_or_default(),
                    changed: n.changed(),
                    lines: d
                        .lines(self.payloads, n)
                        .into_iter()
                        .map(|l| convo_api::DiffLine {
                            op: l.change.sign().to_owned(),
                            text: l.text,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}
