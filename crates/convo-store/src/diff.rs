//! Comparing two timelines of a session: where they part and what each
//! side added, turn by turn, with a line diff of the payloads.
//!
//! The two sides are read from the session's first node to their heads
//! (any references, see [`crate::refs`]). The *fork point* is the last node
//! they share. After it, each side's nodes are grouped into turns
//! ([`crate::turns`]) and the turns are paired in order: the first turn
//! each side added after the fork point, then the second, and so on. Inside
//! a pair, nodes are paired in order too (invoke with invoke, the first
//! request with the first request…), and each pair's payloads get a line
//! diff. JSON payloads are compared pretty-printed, so a change in one field
//! is one line; anything else that is UTF-8 is compared as text; bytes that
//! are not UTF-8 are one summary line (their length and hash).

use crate::ledger::TimelineNode;
use crate::turns;
use crate::{Result, Store};
use convo_core::{Kind, SessionId};

/// What [`diff`] found.
#[derive(Clone, Debug)]
pub struct TimelineDiff {
    /// The last node both sides share; `None` when they share nothing.
    pub fork_point: Option<TimelineNode>,
    /// How many nodes they share (the fork point's depth).
    pub common: usize,
    /// The first side.
    pub a: Side,
    /// The second side.
    pub b: Side,
    /// The turns each side added, paired in order.
    pub turns: Vec<TurnDiff>,
}

/// One side of a diff.
#[derive(Clone, Debug)]
pub struct Side {
    /// The reference as given.
    pub label: String,
    /// The nodes it has after the fork point, oldest first.
    pub added: Vec<TimelineNode>,
    /// The turn number of each added node (`None` outside any turn).
    pub turn_numbers: Vec<Option<usize>>,
}

/// A turn of side A against the turn in the same place on side B.
#[derive(Clone, Debug)]
pub struct TurnDiff {
    /// A's turn number, when A has a turn here.
    pub a: Option<usize>,
    /// B's turn number, when B has a turn here.
    pub b: Option<usize>,
    /// The nodes of the two turns, paired in order.
    pub nodes: Vec<NodeDiff>,
}

/// A node of A against the node in the same place on B.
#[derive(Clone, Debug)]
pub struct NodeDiff {
    /// Index into [`Side::added`] of A.
    pub a: Option<usize>,
    /// Index into [`Side::added`] of B.
    pub b: Option<usize>,
    /// The payloads' line diff (A's payload is the old text).
    pub lines: Vec<Line>,
}

impl NodeDiff {
    /// Whether the two payloads differ (or only one side has the node).
    pub fn changed(&self) -> bool {
        self.a.is_none() || self.b.is_none() || self.lines.iter().any(|l| l.change != Change::Same)
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

/// How a line differs.
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

/// Compares the timelines ending at references `a` and `b` of `session`.
pub fn diff(store: &mut Store, session: &SessionId, a: &str, b: &str) -> Result<TimelineDiff> {
    let ha = store.resolve_ref(session, a)?.hash;
    let hb = store.resolve_ref(session, b)?.hash;
    let ca = store.chain(session, &ha)?;
    let cb = store.chain(session, &hb)?;
    Ok(compare(a, ca, b, cb))
}

/// [`diff`] over two chains already read (each from the session's first
/// node to its head).
pub fn compare(
    label_a: &str,
    mut ca: Vec<TimelineNode>,
    label_b: &str,
    mut cb: Vec<TimelineNode>,
) -> TimelineDiff {
    let common = ca
        .iter()
        .zip(&cb)
        .take_while(|(x, y)| x.stored.hash == y.stored.hash)
        .count();
    let numbers = |c: &[TimelineNode]| {
        let kinds: Vec<Kind> = c.iter().map(|n| n.stored.node.kind).collect();
        turns::numbers(&turns::group(&kinds), kinds.len())
    };
    let na = numbers(&ca)[common..].to_vec();
    let nb = numbers(&cb)[common..].to_vec();
    let added_a = ca.split_off(common);
    let added_b = cb.split_off(common);
    let fork_point = ca.pop();
    let groups_a = by_turn(&na);
    let groups_b = by_turn(&nb);
    let mut turn_diffs = Vec::new();
    for i in 0..groups_a.len().max(groups_b.len()) {
        let ga = groups_a.get(i);
        let gb = groups_b.get(i);
        let empty = Vec::new();
        let ia = ga.map(|g| &g.1).unwrap_or(&empty);
        let ib = gb.map(|g| &g.1).unwrap_or(&empty);
        let mut nodes = Vec::new();
        for (xa, xb) in align(
            &ia.iter().map(|&k| key(&added_a[k])).collect::<Vec<_>>(),
            &ib.iter().map(|&k| key(&added_b[k])).collect::<Vec<_>>(),
        ) {
            let xa = xa.map(|j| ia[j]);
            let xb = xb.map(|j| ib[j]);
            let old = xa.map(|k| payload_lines(&added_a[k].payload));
            let new = xb.map(|k| payload_lines(&added_b[k].payload));
            nodes.push(NodeDiff {
                a: xa,
                b: xb,
                lines: line_diff(old.as_deref().unwrap_or(""), new.as_deref().unwrap_or("")),
            });
        }
        turn_diffs.push(TurnDiff {
            a: ga.map(|g| g.0),
            b: gb.map(|g| g.0),
            nodes,
        });
    }
    TimelineDiff {
        fork_point,
        common,
        a: Side {
            label: label_a.to_owned(),
            added: added_a,
            turn_numbers: na,
        },
        b: Side {
            label: label_b.to_owned(),
            added: added_b,
            turn_numbers: nb,
        },
        turns: turn_diffs,
    }
}

/// What must match for two nodes to be compared: kind and sequence.
fn key(n: &TimelineNode) -> (Kind, Option<u32>) {
    (n.stored.node.kind, n.stored.node.sequence)
}

/// Pairs two sequences of keys in order, matching equal keys (a longest
/// common subsequence); what does not match pairs with nothing.
fn align<K: Eq + std::hash::Hash + Ord>(a: &[K], b: &[K]) -> Vec<(Option<usize>, Option<usize>)> {
    let mut out = Vec::new();
    for op in similar::capture_diff_slices(similar::Algorithm::Myers, a, b) {
        match op {
            similar::DiffOp::Equal {
                old_index,
                new_index,
                len,
            } => out.extend((0..len).map(|k| (Some(old_index + k), Some(new_index + k)))),
            similar::DiffOp::Delete {
                old_index, old_len, ..
            } => out.extend((0..old_len).map(|k| (Some(old_index + k), None))),
            similar::DiffOp::Insert {
                new_index, new_len, ..
            } => out.extend((0..new_len).map(|k| (None, Some(new_index + k)))),
            similar::DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                out.extend((0..old_len).map(|k| (Some(old_index + k), None)));
                out.extend((0..new_len).map(|k| (None, Some(new_index + k))));
            }
        }
    }
    out
}

/// Positions grouped by turn number, in order; nodes outside turns skipped.
fn by_turn(numbers: &[Option<usize>]) -> Vec<(usize, Vec<usize>)> {
    let mut out: Vec<(usize, Vec<usize>)> = Vec::new();
    for (i, n) in numbers.iter().enumerate() {
        let Some(n) = *n else { continue };
        match out.last_mut() {
            Some((m, v)) if *m == n => v.push(i),
            _ => out.push((n, vec![i])),
        }
    }
    out
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
    similar::TextDiff::from_lines(old, new)
        .iter_all_changes()
        .map(|c| Line {
            change: match c.tag() {
                similar::ChangeTag::Equal => Change::Same,
                similar::ChangeTag::Delete => Change::Removed,
                similar::ChangeTag::Insert => Change::Added,
            },
            text: c.value().trim_end_matches(['\n', '\r']).to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
