//! The shape of a session's timelines: which branch forked from which, where.
//!
//! Each branch is read from the session's first node to its head. A branch
//! B *forked from* X when, right after the longest history B shares with X,
//! B's next node is a fork node: B's fork point is the last node they
//! share. A branch that forked from no other is a root (a session's first
//! `main`, or a timeline sealed by a promote: after a promote the new `main`
//! is the fork that was promoted, so it hangs under the sealed
//! `broken-YYYY-MM-DD` it forked from, which is where its history came from).

use crate::backend::{BranchRow, StoredNode};
use crate::{Result, Store, StoreError};
use convo_core::{BranchName, Kind, NodeHash, SessionId};

/// One branch in the tree.
#[derive(Clone, Debug)]
pub struct BranchNode {
    /// The branch row (name, head, sealed, working state).
    pub branch: BranchRow,
    /// How deep it sits in the tree (0 for a root).
    pub level: usize,
    /// The branch it forked from.
    pub parent: Option<BranchName>,
    /// The last node it shares with its parent.
    pub fork_point: Option<NodeHash>,
    /// How many nodes it shares with its parent.
    pub shared: usize,
    /// The turn number of the fork point, if it is inside a turn or
    /// otherwise the number of turns before it.
    pub fork_turn: usize,
    /// Nodes from the session's first node to the head.
    pub len: usize,
    /// Turns on the timeline.
    pub turns: usize,
    /// The head, when the branch has one.
    pub head: Option<StoredNode>,
    /// When the head was recorded (the branch's creation without one).
    pub updated_at: convo_core::Millis,
    /// Promote nodes on the branch after its fork point: it was promoted.
    pub promotes: usize,
    /// A subagent's timeline: the call that started it ([`subagent_link`]
    /// of the first node after its fork), with `started_by` (the fork
    /// point) and `branch` (its parent) always set.
    pub subagent: Option<serde_json::Value>,
}

/// What a node's diagnostics say of the subagent whose timeline it
/// starts: the proxy's `subagent` (`started_by`, `branch`,
/// `tool_call_id`, `tool`), or an imported transcript's sidechain
/// message linked to the turn that started it (`extra.sidechain` and
/// `extra.linked`, Claude Code): `{}` then. `None`: not a subagent's.
pub fn subagent_link(diag: &serde_json::Value) -> Option<serde_json::Value> {
    if let Some(v) = diag.get("subagent").filter(|v| v.is_object()) {
        return Some(v.clone());
    }
    let flag =
        |k: &str| diag.pointer(&format!("/extra/{k}")) == Some(&serde_json::Value::Bool(true));
    (flag("sidechain") && flag("linked")).then(|| serde_json::json!({}))
}

/// The session's branches as a forest, in display order: each root, then
/// its children depth first, the most recent fork first among siblings.
pub fn topology(store: &mut Store, session: &SessionId) -> Result<Vec<BranchNode>> {
    store.read(|tx| {
        let branches = tx.branches(Some(session))?;
        let rows = tx.session_nodes(session, false)?;
        let chains = chains(&branches, &rows)?;
        let mut parent = fork_parents(&chains, &rows);
        break_cycles(&mut parent);
        let f = Forest {
            turn_counts: turn_counts(&chains, &rows),
            branches: &branches,
            rows: &rows,
            chains,
            parent,
        };
        Ok(f.in_order())
    })
}

/// A session's nodes as read back (payloads left out).
type Rows = [(StoredNode, Option<Vec<u8>>)];

/// Each branch's chain as row indexes, oldest first.
fn chains(branches: &[BranchRow], rows: &Rows) -> Result<Vec<Vec<usize>>> {
    let index: convo_core::DigestMap<NodeHash, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, (s, _))| (s.hash, i))
        .collect();
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(branches.len());
    for b in branches {
        let mut chain = Vec::new();
        let mut cur = b.head;
        while let Some(h) = cur {
            let &i = index.get(&h).ok_or_else(|| {
                StoreError::corrupt(format!("node {h} on `{}` is missing", b.name))
            })?;
            chain.push(i);
            cur = rows[i].0.node.parent;
            if chain.len() > rows.len() {
                return Err(StoreError::corrupt(format!(
                    "branch `{}` has a parent cycle",
                    b.name
                )));
            }
        }
        chain.reverse();
        chains.push(chain);
    }
    Ok(chains)
}

/// For each branch, the branch it forked from (the one it shares the
/// longest history with, a fork node next) and how many nodes they share.
fn fork_parents(chains: &[Vec<usize>], rows: &Rows) -> Vec<Option<(usize, usize)>> {
    let n = chains.len();
    let mut parent: Vec<Option<(usize, usize)>> = vec![None; n];
    for bi in 0..n {
        let mut best: Option<(usize, usize)> = None;
        for xi in 0..n {
            if xi == bi {
                continue;
            }
            let shared = chains[bi]
                .iter()
                .zip(&chains[xi])
                .take_while(|(p, q)| p == q)
                .count();
            let next_is_fork = chains[bi]
                .get(shared)
                .is_some_and(|&i| rows[i].0.node.kind == Kind::Fork);
            if shared > 0 && next_is_fork && best.is_none_or(|(_, s)| shared > s) {
                best = Some((xi, shared));
            }
        }
        parent[bi] = best;
    }
    parent
}

/// Breaks any cycle of `parent` (two forks of each other cannot happen,
/// but a tampered store could make one): a branch in a cycle becomes a
/// root.
fn break_cycles(parent: &mut [Option<(usize, usize)>]) {
    let n = parent.len();
    for bi in 0..n {
        let mut seen = vec![false; n];
        let mut cur = bi;
        let mut cycle = false;
        while let Some((p, _)) = parent[cur] {
            if seen[p] {
                cycle = true;
                break;
            }
            seen[p] = true;
            cur = p;
        }
        if cycle {
            parent[bi] = None;
        }
    }
}

/// For each chain, the turns started up to and including each position.
fn turn_counts(chains: &[Vec<usize>], rows: &Rows) -> Vec<Vec<usize>> {
    chains
        .iter()
        .map(|c| {
            let kinds: Vec<Kind> = c.iter().map(|&i| rows[i].0.node.kind).collect();
            let turns = crate::turns::group(&kinds);
            let mut count = vec![0; kinds.len() + 1];
            for (pos, k) in kinds.iter().enumerate() {
                count[pos + 1] = count[pos] + usize::from(*k == Kind::Invoke);
            }
            debug_assert_eq!(count[kinds.len()], turns.len());
            count
        })
        .collect()
}

/// A session's branches with their chains and fork parents, by index.
struct Forest<'a> {
    branches: &'a [BranchRow],
    rows: &'a Rows,
    chains: Vec<Vec<usize>>,
    parent: Vec<Option<(usize, usize)>>,
    turn_counts: Vec<Vec<usize>>,
}

impl Forest<'_> {
    /// When branch `i`'s head was recorded (its creation without one).
    fn updated(&self, i: usize) -> i64 {
        self.chains[i]
            .last()
            .map(|&r| self.rows[r].0.node.created_at)
            .unwrap_or(self.branches[i].created_at)
    }

    /// Every branch in display order: each root (`main` first, then the
    /// most recently updated), then its children depth first (`main`
    /// first, then the longest shared history).
    fn in_order(&self) -> Vec<BranchNode> {
        let n = self.branches.len();
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut roots = Vec::new();
        for (bi, p) in self.parent.iter().enumerate() {
            match p {
                Some((p, _)) => children[*p].push(bi),
                None => roots.push(bi),
            }
        }
        let main = |i: usize| !self.branches[i].name.is_main();
        roots.sort_by_key(|&i| (main(i), -self.updated(i)));
        for c in &mut children {
            c.sort_by_key(|&i| (main(i), -(self.parent[i].map_or(0, |(_, s)| s) as i64)));
        }
        let mut out = Vec::with_capacity(n);
        let mut stack: Vec<(usize, usize)> = roots.iter().rev().map(|&r| (r, 0)).collect();
        while let Some((bi, level)) = stack.pop() {
            out.push(self.node(bi, level));
            for &c in children[bi].iter().rev() {
                stack.push((c, level + 1));
            }
        }
        out
    }

    /// Branch `bi` as shown at `level`.
    fn node(&self, bi: usize, level: usize) -> BranchNode {
        let (rows, chain) = (self.rows, &self.chains[bi]);
        let (p, shared) = match self.parent[bi] {
            Some((p, s)) => (Some(p), s),
            None => (None, 0),
        };
        let fork_point = (shared > 0).then(|| rows[chain[shared - 1]].0.hash);
        BranchNode {
            branch: self.branches[bi].clone(),
            level,
            parent: p.map(|p| self.branches[p].name.clone()),
            fork_point,
            shared,
            fork_turn: self.turn_counts[bi][shared],
            len: chain.len(),
            turns: self.turn_counts[bi][chain.len()],
            head: chain.last().map(|&r| rows[r].0.clone()),
            updated_at: self.updated(bi),
            promotes: chain[shared..]
                .iter()
                .filter(|&&r| rows[r].0.node.kind == Kind::Promote)
                .count(),
            subagent: self.subagent(bi, p, shared),
        }
    }

    /// The subagent link of branch `bi` (forked from `p` after `shared`
    /// nodes): the node after the fork node starts what the branch adds.
    fn subagent(&self, bi: usize, p: Option<usize>, shared: usize) -> Option<serde_json::Value> {
        let (rows, chain) = (self.rows, &self.chains[bi]);
        let (true, Some(p), Some(&r)) = (shared > 0, p, chain.get(shared + 1)) else {
            return None;
        };
        let fp = rows[chain[shared - 1]].0.hash;
        subagent_link(&rows[r].0.node.diagnostics.to_value()).map(|mut v| {
            v["started_by"] = serde_json::json!(fp.to_hex());
            v["branch"] = serde_json::json!(self.branches[p].name.as_str());
            // A transcript's subagent forks at the tool call (a `request`
            // to the tool): its name.
            let at = &rows[chain[shared - 1]].0.node;
            if v.get("tool").is_none() && at.kind == Kind::Request {
                v["tool"] = serde_json::json!(at.to);
            }
            v
        })
    }
}
