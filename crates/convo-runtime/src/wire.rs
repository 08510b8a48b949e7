//! The store's rows in the wire format ([`convo_api`]), and wire input
//! into the store's drafts: the conversions live here, where the store is
//! known, so `convo-api` depends on the core only.

use convo_api::{AppendLine, Branch, ErrorDoc, NodeView, SearchHit, SearchResults, Session};
use convo_api::{decode_payload, default_ends, time};
use convo_core::{Diagnostics, Kind, Millis, StateRoot};
use convo_store::{BranchRow, Draft, SessionRow, StoreError, StoredNode};

/// A wire type made from a store value.
pub trait FromStore<T: ?Sized> {
    /// The wire form of `t`.
    fn from_store(t: &T) -> Self;
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
