//! Two timelines of a session compared from their fork point.
//!
//! Both timelines start at the session's first node, so their common
//! ancestor is the end of their longest common prefix; everything after it
//! is what each side added.

use convo_api::NodeView;
use convo_store::{Result, Store};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One side of a diff.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DiffSide {
    /// The reference compared, as given (a branch, `BRANCH@TURN`, `BRANCH~N` or a hash).
    pub branch: String,
    /// The nodes it added after the fork point, with payloads and turn numbers.
    pub nodes: Vec<NodeView>,
}

/// Two timelines from their common ancestor.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DiffView {
    /// The session id.
    pub session: String,
    /// The last node both timelines share (`null` when they share none).
    pub fork_point: Option<NodeView>,
    /// Nodes both timelines share.
    pub common: usize,
    /// The first timeline's side.
    pub a: DiffSide,
    /// The second timeline's side.
    pub b: DiffSide,
}

/// Compares the timelines ending at references `a` and `b` of session `q`
/// (branches, `BRANCH@TURN`, `BRANCH~N`, hashes: [`convo_store::refs`]).
pub fn diff(s: &mut Store, q: &str, a: &str, b: &str) -> Result<DiffView> {
    let row = s.find_session(q)?;
    let ha = s.resolve_ref(&row.id, a)?.hash;
    let hb = s.resolve_ref(&row.id, b)?.hash;
    let ta = s.chain(&row.id, &ha)?;
    let tb = s.chain(&row.id, &hb)?;
    let common = ta
        .iter()
        .zip(&tb)
        .take_while(|(x, y)| x.stored.hash == y.stored.hash)
        .count();
    let turns = |t: &[convo_store::TimelineNode]| -> Vec<u64> {
        let mut n = 0;
        t.iter()
            .map(|x| {
                if x.stored.node.kind == convo_core::Kind::Invoke {
                    n += 1;
                }
                n
            })
            .collect()
    };
    let (turn_a, turn_b) = (turns(&ta), turns(&tb));
    let side = |branch: &str, t: &[convo_store::TimelineNode], turns: &[u64]| DiffSide {
        branch: branch.to_owned(),
        nodes: t[common..]
            .iter()
            .zip(&turns[common..])
            .map(|(n, turn)| {
                convo_runtime::wire::node(&n.stored, Some(&n.payload)).with_turn(*turn)
            })
            .collect(),
    };
    Ok(DiffView {
        session: row.id.to_string(),
        fork_point: common.checked_sub(1).map(|i| {
            convo_runtime::wire::node(&ta[i].stored, Some(&ta[i].payload)).with_turn(turn_a[i])
        }),
        common,
        a: side(a, &ta, &turn_a),
        b: side(b, &tb, &turn_b),
    })
}
