//! Comparing two timelines of a session: where they part and what each
//! side has after that, aligned node by node and grouped into turns. The
//! one diff behind `convo diff`, the API's `/sessions/{id}/diff` and the
//! web view's diff page.
//!
//! The two sides are read from the session's first node to their heads
//! (any references, see [`crate::refs`]). The *fork point* is the last node
//! they share. After it the two chains are **aligned by content, not by
//! position**: a longest common subsequence over each node's identity
//! (kind, from, to and payload hash), so one extra node (a fork node, an
//! inserted request) shifts nothing and the nodes both sides recorded the
//! same way pair as unchanged. Between two such anchors, the nodes left
//! over pair by kind (a longest common subsequence over kinds), so a
//! changed answer sits beside the answer it replaced; the rest are only on
//! one side.
//!
//! The aligned pairs are grouped into turns: a group starts at an invoke on
//! either side (nodes before the first invoke, such as a fork node, join the
//! turn after them), and carries each side's stored turn number. A group is
//! *changed* when any of its pairs is. Readers show changed groups and
//! collapse runs of unchanged ones; [`TimelineDiff::pages`] cuts the groups
//! into pages of a bounded number of changed nodes, and [`payloads`] reads
//! the payloads of a page only.
//!
//! Cost: the chains are read once without payloads (one pass over the
//! session's node rows). The alignment is Myers' O((N+M)·D) after dropping
//! the nodes whose identity the other side does not have at all (they can
//! be in no common subsequence), so a side that shares nothing, or one
//! short side against a long one, costs linear time; a deadline bounds the
//! pathological case (the alignment is then valid but may not be minimal).
//!
//! Two JSON objects (a request and the request it replaced) are also
//! compared part by part ([`parts`]): each list (messages, tools) element
//! by element, aligned as the nodes are, the same ones folded, and the
//! other fields one by one, so that one changed message is one small word
//! diff. Payloads are compared line by line ([`line_diff`]) and word by word
//! ([`word_diff`]). JSON payloads are compared pretty-printed, so a change
//! in one field is one line; anything else that is UTF-8 is compared as
//! text; bytes that are not UTF-8 are one summary line (their length and
//! hash).

mod parts;
pub use parts::{Part, parts};

use crate::backend::StoredNode;
use crate::chain::{TimelineNode, walk_chain};
use crate::redact::payload_in;
use crate::{Result, Store, StoreError};
use convo_core::{DigestMap, Kind, NodeHash, SessionId};
use std::collections::HashMap;
use std::ops::Range;
use std::time::{Duration, Instant};

/// What [`diff`] found.
#[derive(Clone, Debug)]
pub struct TimelineDiff {
    /// The last node both sides share, with its payload; `None` when they
    /// share nothing.
    pub fork_point: Option<TimelineNode>,
    /// How many nodes they share (the fork point's depth).
    pub common: usize,
    /// The first side.
    pub a: Side,
    /// The second side.
    pub b: Side,
    /// The aligned nodes after the fork point, grouped into turns, in order
    /// (unchanged turns too).
    pub turns: Vec<TurnDiff>,
}

/// One side of a diff.
#[derive(Clone, Debug)]
pub struct Side {
    /// The reference as given.
    pub label: String,
    /// The node the reference names (the side's head).
    pub head: StoredNode,
    /// The nodes it has after the fork point, oldest first (no payloads:
    /// see [`payloads`]).
    pub added: Vec<StoredNode>,
    /// The turn number of each added node, as stored (`None` for a node
    /// outside any turn: a fork or promote between turns).
    pub turn_numbers: Vec<Option<usize>>,
}

/// A turn of side A against the turn aligned with it on side B.
#[derive(Clone, Debug)]
pub struct TurnDiff {
    /// A's turn number, when A has a node in a turn here.
    pub a: Option<usize>,
    /// B's turn number, when B has a node in a turn here.
    pub b: Option<usize>,
    /// The aligned nodes.
    pub nodes: Vec<NodeDiff>,
}

impl TurnDiff {
    /// Whether any node differs.
    pub fn changed(&self) -> bool {
        self.nodes.iter().any(NodeDiff::changed)
    }

    /// How many nodes each side has in this turn.
    pub fn sizes(&self) -> (usize, usize) {
        let a = self.nodes.iter().filter(|n| n.a.is_some()).count();
        let b = self.nodes.iter().filter(|n| n.b.is_some()).count();
        (a, b)
    }
}

/// A node of A against the node aligned with it on B.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeDiff {
    /// Index into [`Side::added`] of A.
    pub a: Option<usize>,
    /// Index into [`Side::added`] of B.
    pub b: Option<usize>,
    /// Whether both nodes have the same identity (kind, ends, payload).
    pub same: bool,
}

impl NodeDiff {
    /// Whether the two nodes differ (or only one side has the node).
    pub fn changed(&self) -> bool {
        !self.same
    }
}

/// One line of a payload diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// Same, removed (only in A) or added (only in B).
    pub change: Change,
    /// The line, without its line break.
    pub text: String,
}

/// How a line or a word differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// In both.
    Same,
    /// Only in A.
    Removed,
    /// Only in B.
    Added,
}

impl Change {
    /// `" "`, `"-"` or `"+"`, as in a unified diff.
    pub fn sign(self) -> &'static str {
        match self {
            Change::Same => " ",
            Change::Removed => "-",
            Change::Added => "+",
        }
    }
}

/// Changed nodes (both sides counted) a page of [`TimelineDiff::pages`]
/// holds at most, unless one turn alone is bigger.
pub const PAGE_NODES: usize = 200;

/// How long the alignment may search for a minimal answer.
const DEADLINE: Duration = Duration::from_secs(2);

/// Compares the timelines ending at references `a` and `b` of `session`.
/// Reads node rows only; [`payloads`] reads the payloads of the turns a
/// reader shows.
pub fn diff(store: &mut Store, session: &SessionId, a: &str, b: &str) -> Result<TimelineDiff> {
    store.read(|tx| {
        let ha = crate::refs::resolve_ref_in(tx, session, a)?;
        let hb = crate::refs::resolve_ref_in(tx, session, b)?;
        let rows = tx.session_nodes(session, false)?;
        let link = |i: usize| (rows[i].0.hash, rows[i].0.node.parent);
        let ca = walk_chain(session, ha.hash, rows.len(), link)?;
        let cb = walk_chain(session, hb.hash, rows.len(), link)?;
        let common = ca.iter().zip(&cb).take_while(|(x, y)| x == y).count();
        let fork_point = match common.checked_sub(1) {
            Some(i) => {
                let stored = rows[ca[i]].0.clone();
                let payload = payload_in(tx, &stored.node.payload)?.ok_or_else(|| {
                    StoreError::corrupt(format!("payload of node {} is missing", stored.hash))
                })?;
                Some(TimelineNode { stored, payload })
            }
            None => None,
        };
        let mut rows: Vec<Option<StoredNode>> = rows.into_iter().map(|(n, _)| Some(n)).collect();
        let mut take = |c: &[usize]| -> Vec<StoredNode> {
            c[common..].iter().filter_map(|&i| rows[i].take()).collect()
        };
        let added_a = take(&ca);
        let added_b = take(&cb);
        Ok(compare(
            fork_point,
            common,
            (a, ha, added_a),
            (b, hb, added_b),
        ))
    })
}

/// [`diff`] over what it read: the fork point, the shared length, and each
/// side's label, head and nodes after the fork point.
pub fn compare(
    fork_point: Option<TimelineNode>,
    common: usize,
    (label_a, head_a, added_a): (&str, StoredNode, Vec<StoredNode>),
    (label_b, head_b, added_b): (&str, StoredNode, Vec<StoredNode>),
) -> TimelineDiff {
    let pairs = align(&added_a, &added_b);
    let turns = group(&pairs, &added_a, &added_b);
    let numbers = |v: &[StoredNode]| v.iter().map(turn_of).collect();
    TimelineDiff {
        fork_point,
        common,
        a: Side {
            label: label_a.to_owned(),
            head: head_a,
            turn_numbers: numbers(&added_a),
            added: added_a,
        },
        b: Side {
            label: label_b.to_owned(),
            head: head_b,
            turn_numbers: numbers(&added_b),
            added: added_b,
        },
        turns,
    }
}

/// The stored turn number of a node, `None` outside any turn (a fork or
/// promote after a turn's complete and before the next invoke).
pub fn turn_of(n: &StoredNode) -> Option<usize> {
    let inside = n.ctx.open || n.node.kind == Kind::Complete;
    (inside && n.ctx.turn > 0).then_some(n.ctx.turn as usize)
}

/// What a fork or promote node means, in words (`None` for other nodes):
/// the timeline a fork starts; the branch a promote made `main` and the
/// name the old `main` was sealed under.
pub fn event_text(n: &StoredNode) -> Option<String> {
    let e = n.node.event.as_ref()?;
    let b = e.branch.as_str();
    match (n.node.kind, &e.sealed_as) {
        (Kind::Fork, _) => Some(format!("fork: the timeline `{b}` starts here")),
        (Kind::Promote, Some(s)) => Some(format!(
            "promote: `{b}` became main; the old main was sealed as `{}`",
            s.as_str()
        )),
        (Kind::Promote, None) => Some(format!("promote: `{b}` became main")),
        _ => None,
    }
}

/// What two nodes must share to be the same node recorded on two
/// timelines: kind, ends and payload (not the parent, time or diagnostics).
type Identity<'a> = (Kind, &'a str, &'a str, convo_core::ContentHash);

fn identity(n: &StoredNode) -> Identity<'_> {
    (
        n.node.kind,
        n.node.from.as_str(),
        n.node.to.as_str(),
        n.node.payload,
    )
}

/// Aligns two runs of nodes: equal identities pair as unchanged (a
/// longest common subsequence), then between them nodes of the same kind
/// pair as changed (another one over kinds), the rest stands alone.
fn align(a: &[StoredNode], b: &[StoredNode]) -> Vec<NodeDiff> {
    let (ka, kb) = intern(a.iter().map(identity), b.iter().map(identity));
    let anchors = lcs(&ka, &kb);
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    let (mut i, mut j) = (0, 0);
    for (x, y) in anchors.into_iter().chain([(a.len(), b.len())]) {
        gap(a, b, i..x, j..y, &mut out);
        if x < a.len() && y < b.len() {
            out.push(NodeDiff {
                a: Some(x),
                b: Some(y),
                same: true,
            });
        }
        (i, j) = (x + 1, y + 1);
    }
    out
}

/// The nodes between two anchors: same kinds pair as changed, in order.
fn gap(
    a: &[StoredNode],
    b: &[StoredNode],
    ra: Range<usize>,
    rb: Range<usize>,
    out: &mut Vec<NodeDiff>,
) {
    let (ka, kb) = intern(
        a[ra.clone()].iter().map(|n| n.node.kind),
        b[rb.clone()].iter().map(|n| n.node.kind),
    );
    let (mut i, mut j) = (ra.start, rb.start);
    for (x, y) in lcs(&ka, &kb)
        .into_iter()
        .map(|(x, y)| (x + ra.start, y + rb.start))
        .chain([(ra.end, rb.end)])
    {
        // The nodes only one side has, in the order they were recorded
        // (by depth; at the same depth a fork node first, as it starts its
        // timeline, else A's), so a fork node that starts B comes first.
        let (mut p, mut q) = (i, j);
        while p < x || q < y {
            let take_a = if p >= x {
                false
            } else if q >= y {
                true
            } else {
                let (da, db) = (a[p].ctx.depth, b[q].ctx.depth);
                let b_forks = b[q].node.kind == Kind::Fork && a[p].node.kind != Kind::Fork;
                da < db || (da == db && !b_forks)
            };
            out.push(NodeDiff {
                a: take_a.then_some(p),
                b: (!take_a).then_some(q),
                same: false,
            });
            if take_a {
                p += 1;
            } else {
                q += 1;
            }
        }
        if x < ra.end && y < rb.end {
            out.push(NodeDiff {
                a: Some(x),
                b: Some(y),
                same: false,
            });
        }
        (i, j) = (x + 1, y + 1);
    }
}

/// Numbers the distinct values of two sequences (equal values, equal numbers).
fn intern<K: Eq + std::hash::Hash>(
    a: impl Iterator<Item = K>,
    b: impl Iterator<Item = K>,
) -> (Vec<u32>, Vec<u32>) {
    let mut ids: HashMap<K, u32> = HashMap::new();
    let mut id = |k: K| {
        let n = ids.len() as u32;
        *ids.entry(k).or_insert(n)
    };
    let ka = a.map(&mut id).collect();
    let kb = b.map(&mut id).collect();
    (ka, kb)
}

/// The index pairs of a longest common subsequence of `a` and `b`
/// (increasing on both sides). Values only one side has are dropped first:
/// they cannot be in any common subsequence, and dropping them makes a
/// side that shares nothing cost nothing.
pub fn lcs(a: &[u32], b: &[u32]) -> Vec<(usize, usize)> {
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let max = a.iter().chain(b).copied().max().unwrap_or(0) as usize + 1;
    let mut in_a = vec![false; max];
    let mut in_b = vec![false; max];
    a.iter().for_each(|&k| in_a[k as usize] = true);
    b.iter().for_each(|&k| in_b[k as usize] = true);
    let fa: Vec<usize> = (0..a.len()).filter(|&i| in_b[a[i] as usize]).collect();
    let fb: Vec<usize> = (0..b.len()).filter(|&i| in_a[b[i] as usize]).collect();
    let va: Vec<u32> = fa.iter().map(|&i| a[i]).collect();
    let vb: Vec<u32> = fb.iter().map(|&i| b[i]).collect();
    let mut out = Vec::new();
    let ops = similar::capture_diff_deadline(
        similar::Algorithm::Myers,
        &va,
        0..va.len(),
        &vb,
        0..vb.len(),
        Some(Instant::now() + DEADLINE),
    );
    for op in ops {
        if let similar::DiffOp::Equal {
            old_index,
            new_index,
            len,
        } = op
        {
            out.extend((0..len).map(|k| (fa[old_index + k], fb[new_index + k])));
        }
    }
    out
}

/// Groups aligned pairs into turns: a new group at an invoke on either
/// side, once the group has had one.
fn group(pairs: &[NodeDiff], a: &[StoredNode], b: &[StoredNode]) -> Vec<TurnDiff> {
    let mut out: Vec<TurnDiff> = Vec::new();
    let mut has_invoke = false;
    let mut cur = TurnDiff {
        a: None,
        b: None,
        nodes: Vec::new(),
    };
    for p in pairs {
        let na = p.a.map(|i| &a[i]);
        let nb = p.b.map(|i| &b[i]);
        let invoke = [na, nb]
            .iter()
            .flatten()
            .any(|n| n.node.kind == Kind::Invoke);
        if invoke && has_invoke {
            out.push(std::mem::replace(
                &mut cur,
                TurnDiff {
                    a: None,
                    b: None,
                    nodes: Vec::new(),
                },
            ));
            has_invoke = false;
        }
        has_invoke |= invoke;
        cur.a = cur.a.or_else(|| na.and_then(turn_of));
        cur.b = cur.b.or_else(|| nb.and_then(turn_of));
        cur.nodes.push(*p);
    }
    if !cur.nodes.is_empty() {
        out.push(cur);
    }
    out
}

impl TimelineDiff {
    /// The turns cut into pages (ranges of [`TimelineDiff::turns`]): each
    /// holds at most `budget` changed nodes (both sides counted; unchanged
    /// turns count nothing, a reader collapses them), except a single turn
    /// bigger than that. Always at least one page.
    pub fn pages(&self, budget: usize) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        let (mut start, mut used) = (0, 0);
        for (i, t) in self.turns.iter().enumerate() {
            if !t.changed() {
                continue;
            }
            let (x, y) = t.sizes();
            if used > 0 && used + x + y > budget {
                out.push(start..i);
                (start, used) = (i, 0);
            }
            used += x + y;
        }
        out.push(start..self.turns.len());
        out
    }

    /// Unchanged nodes (counted on side B) in total.
    pub fn unchanged(&self) -> usize {
        self.turns
            .iter()
            .flat_map(|t| &t.nodes)
            .filter(|n| n.same)
            .count()
    }

    /// The node of side A of a pair.
    pub fn node_a(&self, n: &NodeDiff) -> Option<&StoredNode> {
        n.a.and_then(|i| self.a.added.get(i))
    }

    /// The node of side B of a pair.
    pub fn node_b(&self, n: &NodeDiff) -> Option<&StoredNode> {
        n.b.and_then(|i| self.b.added.get(i))
    }

    /// The line diff of a pair's payloads (A's is the old text), from
    /// payloads read by [`payloads`]; empty when one is missing there.
    pub fn lines(&self, payloads: &Payloads, n: &NodeDiff) -> Vec<Line> {
        let text = |x: Option<&StoredNode>| match x {
            None => Some(String::new()),
            Some(x) => payloads.get(&x.hash).map(|p| payload_lines(p)),
        };
        match (text(self.node_a(n)), text(self.node_b(n))) {
            (Some(old), Some(new)) => line_diff(&old, &new),
            _ => Vec::new(),
        }
    }
}

/// Payloads by node hash (see [`payloads`]).
pub type Payloads = DigestMap<NodeHash, Vec<u8>>;

/// Reads the payloads of the nodes of `turns` (a range of
/// [`TimelineDiff::turns`]) in one snapshot; a redacted payload reads as
/// its tombstone. `unchanged` says whether to read the turns that did not
/// change too (a reader that collapses them does not need them).
pub fn payloads(
    store: &mut Store,
    d: &TimelineDiff,
    turns: Range<usize>,
    unchanged: bool,
) -> Result<Payloads> {
    let mut want: Vec<&StoredNode> = Vec::new();
    for t in &d.turns[turns] {
        if !unchanged && !t.changed() {
            continue;
        }
        for n in &t.nodes {
            want.extend(d.node_a(n));
            want.extend(d.node_b(n));
        }
    }
    store.read(|tx| {
        let mut out = Payloads::default();
        for n in &want {
            if out.contains_key(&n.hash) {
                continue;
            }
            let p = payload_in(tx, &n.node.payload)?.ok_or_else(|| {
                StoreError::corrupt(format!("payload of node {} is missing", n.hash))
            })?;
            out.insert(n.hash, p);
        }
        Ok(out)
    })
}

/// A payload as the lines a diff compares: pretty-printed JSON when it is
/// a JSON object or array, the text when it is UTF-8, else one line naming
/// its length and SHA-256.
pub fn payload_lines(p: &[u8]) -> String {
    let Ok(text) = std::str::from_utf8(p) else {
        return format!(
            "<{} bytes, not UTF-8, sha256 {}>",
            p.len(),
            convo_core::sha256(p)
        );
    };
    let t = text.trim_start();
    if (t.starts_with('{') || t.starts_with('['))
        && let Ok(v) = serde_json::from_str::<serde_json::Value>(text)
        && let Ok(pretty) = serde_json::to_string_pretty(&v)
    {
        return pretty;
    }
    text.to_owned()
}

/// The line diff of two texts (`old` is A's).
pub fn line_diff(old: &str, new: &str) -> Vec<Line> {
    similar::TextDiff::configure()
        .deadline(Instant::now() + DEADLINE)
        .diff_lines(old, new)
        .iter_all_changes()
        .map(|c| Line {
            change: change(c.tag()),
            text: c.value().trim_end_matches(['\n', '\r']).to_owned(),
        })
        .collect()
}

/// The word diff of two texts (`old` is A's): runs of words and of the
/// spaces between them, each the same, only in A or only in B, in an order
/// that reads A's text from the same and removed runs and B's from the
/// same and added ones.
pub fn word_diff(old: &str, new: &str) -> Vec<(Change, String)> {
    let mut out: Vec<(Change, String)> = Vec::new();
    for c in similar::TextDiff::configure()
        .deadline(Instant::now() + Duration::from_millis(200))
        .diff_words(old, new)
        .iter_all_changes()
    {
        let ch = change(c.tag());
        match out.last_mut() {
            Some((last, text)) if *last == ch => text.push_str(c.value()),
            _ => out.push((ch, c.value().to_owned())),
        }
    }
    out
}

fn change(t: similar::ChangeTag) -> Change {
    match t {
        similar::ChangeTag::Equal => Change::Same,
        similar::ChangeTag::Delete => Change::Removed,
        similar::ChangeTag::Insert => Change::Added,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use convo_core::hash::content_hash;
    use convo_core::timeline::Context;
    use convo_core::{Diagnostics, Node};

    /// A chain of nodes after a fork point, from `(kind, payload)` pairs,
    /// with stored contexts as the ledger derives them.
    fn chain(spec: &[(Kind, &str)], turn0: u64) -> Vec<StoredNode> {
        let session = SessionId::derived(b"diff");
        let mut ctx = Context {
            turn: turn0,
            ..Context::default()
        };
        let mut parent = None;
        spec.iter()
            .enumerate()
            .map(|(i, (kind, p))| {
                let node = Node {
                    parent,
                    kind: *kind,
                    session,
                    submission: None,
                    sequence: None,
                    from: "u".into(),
                    to: "a".into(),
                    payload: content_hash(p.as_bytes()),
                    payload_len: p.len() as u64,
                    diagnostics: Diagnostics::empty(),
                    state: None,
                    created_at: i as convo_core::Millis,
                    event: None,
                };
                match kind {
                    Kind::Invoke => {
                        ctx.turn += 1;
                        ctx.open = true;
                    }
                    Kind::Complete => ctx.open = false,
                    _ => {}
                }
                ctx.depth += 1;
                let hash = node.hash();
                parent = Some(hash);
                StoredNode {
                    seq: i as u64 + 1,
                    hash,
                    node,
                    ctx,
                }
            })
            .collect()
    }

    fn run(a: &[(Kind, &str)], b: &[(Kind, &str)]) -> TimelineDiff {
        let (ca, cb) = (chain(a, 1), chain(b, 1));
        let head = chain(&[(Kind::Invoke, "head")], 0).remove(0);
        compare(None, 0, ("a", head.clone(), ca), ("b", head, cb))
    }

    /// Each pair as (A index, B index, same).
    fn pairs(d: &TimelineDiff) -> Vec<(Option<usize>, Option<usize>, bool)> {
        d.turns
            .iter()
            .flat_map(|t| &t.nodes)
            .map(|n| (n.a, n.b, n.same))
            .collect()
    }

    fn turns(n: usize, answer: &str) -> Vec<(Kind, String)> {
        (0..n)
            .flat_map(|i| {
                [
                    (Kind::Invoke, format!("question {i}")),
                    (Kind::Request, format!("request {i}")),
                    (Kind::Response, format!("response {i}")),
                    (Kind::Complete, format!("{answer} {i}")),
                ]
            })
            .collect()
    }

    fn refs(v: &[(Kind, String)]) -> Vec<(Kind, &str)> {
        v.iter().map(|(k, s)| (*k, s.as_str())).collect()
    }

    #[test]
    fn a_fork_node_shifts_nothing() {
        let a = turns(50, "answer");
        let mut b = vec![(Kind::Fork, String::new())];
        b.extend(turns(50, "answer"));
        let d = run(&refs(&a), &refs(&b));
        let changed: Vec<_> = pairs(&d).into_iter().filter(|p| !p.2).collect();
        assert_eq!(changed, [(None, Some(0), false)], "only the fork node");
        assert_eq!(d.unchanged(), 200);
        assert_eq!(d.turns.len(), 50, "the fork node joins the first turn");
        assert_eq!((d.turns[0].a, d.turns[0].b), (Some(2), Some(2)));
        assert!(d.turns[0].changed() && !d.turns[1].changed());
        assert_eq!(
            d.pages(PAGE_NODES),
            vec![std::ops::Range { start: 0, end: 50 }]
        );
        assert_eq!(d.b.turn_numbers[0], None, "a fork between turns");
    }

    #[test]
    fn identical_sides_have_no_change() {
        let a = turns(10, "same");
        let d = run(&refs(&a), &refs(&a));
        assert!(pairs(&d).iter().all(|p| p.2));
        assert!(d.turns.iter().all(|t| !t.changed()));
        assert_eq!(d.turns.len(), 10);
    }

    #[test]
    fn empty_sides() {
        let d = run(&[], &[]);
        assert!(d.turns.is_empty());
        assert_eq!(
            d.pages(PAGE_NODES),
            vec![std::ops::Range { start: 0, end: 0 }]
        );
        let a = turns(3, "x");
        let d = run(&refs(&a), &[]);
        assert_eq!(d.turns.len(), 3);
        assert!(pairs(&d).iter().all(|p| p.0.is_some() && p.1.is_none()));
        let d = run(&[], &refs(&a));
        assert!(pairs(&d).iter().all(|p| p.0.is_none() && p.1.is_some()));
        assert_eq!((d.turns[2].a, d.turns[2].b), (None, Some(4)));
    }

    #[test]
    fn insertions_and_changed_answers_pair_by_kind() {
        // B inserts a request/response in turn 1 and answers turn 2 differently.
        let a = [
            (Kind::Invoke, "q1"),
            (Kind::Complete, "a1"),
            (Kind::Invoke, "q2"),
            (Kind::Complete, "a2"),
        ];
        let b = [
            (Kind::Invoke, "q1"),
            (Kind::Request, "look up"),
            (Kind::Response, "found"),
            (Kind::Complete, "a1"),
            (Kind::Invoke, "q2"),
            (Kind::Complete, "a2, better"),
        ];
        let d = run(&a, &b);
        assert_eq!(
            pairs(&d),
            [
                (Some(0), Some(0), true),
                (None, Some(1), false),
                (None, Some(2), false),
                (Some(1), Some(3), true),
                (Some(2), Some(4), true),
                (Some(3), Some(5), false),
            ]
        );
        assert_eq!(d.turns.len(), 2);
        assert_eq!(d.turns[0].sizes(), (2, 4));
        let mut p = Payloads::default();
        p.insert(d.a.added[3].hash, b"a2".to_vec());
        p.insert(d.b.added[5].hash, b"a2, better".to_vec());
        let lines = d.lines(&p, &d.turns[1].nodes[1]);
        assert_eq!(lines.len(), 2);
        assert_eq!(
            (lines[0].change, lines[1].change),
            (Change::Removed, Change::Added)
        );
    }

    #[test]
    fn pages_bound_changed_nodes() {
        let a = turns(500, "old");
        let b = turns(500, "new");
        let d = run(&refs(&a), &refs(&b));
        let pages = d.pages(PAGE_NODES);
        // A changed turn shows whole: 4 + 4 nodes, 25 turns a page.
        assert_eq!(pages.len(), 20);
        assert_eq!(pages[0], 0..25);
        assert_eq!(pages.last().unwrap().end, 500);
        // One side with nothing: one page per 200 nodes of the other.
        let d = run(&refs(&a), &[]);
        assert_eq!(d.pages(PAGE_NODES).len(), 10);
    }

    #[test]
    fn alignment_stays_linear_when_one_side_is_short() {
        // 40,000 nodes against one fork node: the nodes B lacks are
        // dropped before the search (no quadratic walk).
        let a = turns(10_000, "answer");
        let d = run(&refs(&a), &[(Kind::Fork, "")]);
        assert_eq!(pairs(&d).len(), 40_001);
        assert_eq!(d.turns.len(), 10_000);
        assert_eq!(pairs(&d)[0], (None, Some(0), false), "the fork node first");
    }

    #[test]
    fn lcs_skips_values_one_side_lacks() {
        assert_eq!(lcs(&[1, 2, 3, 4], &[9, 2, 4]), [(1, 1), (3, 2)]);
        assert_eq!(lcs(&[], &[1]), []);
    }

    #[test]
    fn word_diff_marks_only_the_changed_word() {
        let w = word_diff("About 2 million people", "About 2.1 million people");
        let changed: Vec<_> = w.iter().filter(|(c, _)| *c != Change::Same).collect();
        assert_eq!(
            changed,
            [
                &(Change::Removed, "2".to_owned()),
                &(Change::Added, "2.1".to_owned())
            ]
        );
    }

    #[test]
    fn json_is_compared_pretty() {
        let old = payload_lines(br#"{"a":1,"b":[1,2]}"#);
        let new = payload_lines(br#"{"a":2,"b":[1,2]}"#);
        let d = line_diff(&old, &new);
        let changed: Vec<_> = d.iter().filter(|l| l.change != Change::Same).collect();
        assert_eq!(changed.len(), 2);
        assert_eq!(changed[0].text.trim(), "\"a\": 1,");
        assert_eq!(changed[1].text.trim(), "\"a\": 2,");
    }

    #[test]
    fn binary_is_one_line() {
        let l = payload_lines(&[0xff, 0, 1]);
        assert!(l.starts_with("<3 bytes, not UTF-8"));
    }
}
