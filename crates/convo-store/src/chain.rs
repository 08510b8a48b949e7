//! A timeline as a chain: the parent walk every timeline read shares
//! (ledger, search, refs, verify and diff call down to it), a stretch of
//! a chain read by depth, and a node found by hash prefix.

use crate::backend::{BranchRow, StoredNode, Tx};
use crate::redact::payload_in;
use crate::{Result, StoreError};
use convo_core::{BranchName, HashPrefix, NodeHash, SessionId};

/// A node on a timeline with its payload, as `session get` shows it.
#[derive(Clone, Debug)]
pub struct TimelineNode {
    /// The node.
    pub stored: StoredNode,
    /// Its payload bytes.
    pub payload: Vec<u8>,
}

/// The positions, oldest first, of the nodes from the session's first node
/// to `head` among `n` rows of a session, each row given as (hash, parent)
/// by `row`: the one parent walk every timeline read shares.
pub(crate) fn walk_chain(
    session: &SessionId,
    head: NodeHash,
    n: usize,
    row: impl Fn(usize) -> (NodeHash, Option<NodeHash>),
) -> Result<Vec<usize>> {
    let index: convo_core::DigestMap<NodeHash, usize> = (0..n).map(|i| (row(i).0, i)).collect();
    let mut chain = Vec::new();
    let mut cur = Some(head);
    while let Some(h) = cur {
        let &i = index.get(&h).ok_or_else(|| {
            StoreError::corrupt(format!("node {h} of session {session} is missing"))
        })?;
        chain.push(i);
        cur = row(i).1;
        if chain.len() > n {
            return Err(StoreError::corrupt(format!(
                "node {head} has a parent cycle"
            )));
        }
    }
    chain.reverse();
    Ok(chain)
}

/// The nodes from the session's first node to `head`, following parents,
/// oldest first; with payloads when `payloads` (else they are empty).
pub(crate) fn chain_in(
    tx: &mut dyn Tx,
    session: &SessionId,
    head: NodeHash,
    payloads: bool,
) -> Result<Vec<TimelineNode>> {
    let rows = tx.session_nodes(session, payloads)?;
    let chain = walk_chain(session, head, rows.len(), |i| {
        (rows[i].0.hash, rows[i].0.node.parent)
    })?;
    let mut rows: Vec<Option<(StoredNode, Option<Vec<u8>>)>> = rows.into_iter().map(Some).collect();
    chain
        .into_iter()
        .filter_map(|i| rows[i].take())
        .map(|(stored, payload)| {
            let payload = match payload {
                Some(p) => p,
                // A redacted payload (its row is gone): the tombstone.
                None if payloads => payload_in(tx, &stored.node.payload)?.unwrap_or_default(),
                None => Vec::new(),
            };
            Ok(TimelineNode { stored, payload })
        })
        .collect()
}

/// The hashes of the nodes at positions `start..end` (depths `start + 1
/// ..= end`) of the timeline ending at `head`, oldest first. Reads the
/// session's nodes at those depths (every timeline's, a few more near
/// forks); when several sit at depth `end`, the nodes between `end` and the
/// head too, to find which one is on this timeline.
pub(crate) fn chain_stretch(
    tx: &mut dyn Tx,
    session: &SessionId,
    head: &StoredNode,
    start: u64,
    end: u64,
) -> Result<Vec<NodeHash>> {
    if start >= end {
        return Ok(Vec::new());
    }
    let corrupt = |h: &NodeHash| {
        StoreError::corrupt(format!(
            "node {h} of session {session} is missing or out of its depth"
        ))
    };
    let links = tx.session_links_at(session, start + 1, end)?;
    let at_end: Vec<&crate::backend::Link> = links.iter().filter(|l| l.depth == end).collect();
    let anchor = if end == head.ctx.depth {
        head.hash
    } else if let [one] = at_end.as_slice() {
        one.hash
    } else {
        let above = tx.session_links_at(session, end + 1, head.ctx.depth)?;
        let index: std::collections::HashMap<NodeHash, &crate::backend::Link> =
            above.iter().map(|l| (l.hash, l)).collect();
        let mut cur = head.hash;
        for d in (end + 1..=head.ctx.depth).rev() {
            let l = index
                .get(&cur)
                .filter(|l| l.depth == d)
                .ok_or_else(|| corrupt(&cur))?;
            cur = l.parent.ok_or_else(|| corrupt(&cur))?;
        }
        cur
    };
    let index: std::collections::HashMap<NodeHash, &crate::backend::Link> =
        links.iter().map(|l| (l.hash, l)).collect();
    let mut out = Vec::with_capacity((end - start) as usize);
    let mut cur = Some(anchor);
    for d in (start + 1..=end).rev() {
        let h = cur.ok_or_else(|| corrupt(&head.hash))?;
        let l = index
            .get(&h)
            .filter(|l| l.depth == d)
            .ok_or_else(|| corrupt(&h))?;
        out.push(h);
        cur = l.parent;
    }
    out.reverse();
    Ok(out)
}

pub(crate) fn resolve_in(tx: &mut dyn Tx, p: &HashPrefix) -> Result<StoredNode> {
    let hash = match p.full() {
        Some(h) => h,
        None => {
            let found = tx.nodes_with_prefix(p, 2)?;
            match found.as_slice() {
                [one] => *one,
                [] => return Err(StoreError::NoNode(p.as_str().to_owned())),
                _ => {
                    let count = tx.nodes_with_prefix(p, 1000)?.len();
                    return Err(StoreError::AmbiguousNode {
                        prefix: p.as_str().to_owned(),
                        count,
                    });
                }
            }
        }
    };
    tx.node(&hash)?
        .ok_or_else(|| StoreError::NoNode(p.as_str().to_owned()))
}

/// Loads a branch, failing clearly if it is missing or (for writes) sealed.
pub(crate) fn open_branch(
    tx: &mut dyn Tx,
    session: &SessionId,
    name: &BranchName,
    for_write: bool,
) -> Result<BranchRow> {
    let b = tx.branch(session, name)?.ok_or_else(|| {
        if tx.session(session).ok().flatten().is_none() {
            StoreError::NoSession(session.to_string())
        } else {
            StoreError::NoBranch {
                session: session.to_string(),
                branch: name.to_string(),
            }
        }
    })?;
    if for_write && b.sealed {
        return Err(StoreError::Sealed {
            session: session.to_string(),
            branch: name.to_string(),
        });
    }
    Ok(b)
}
