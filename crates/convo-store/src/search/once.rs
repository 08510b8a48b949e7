//! A message counted once, where it first appeared.
//!
//! Agents resend their whole history with every model call: a user's
//! message is the `invoke` of its turn, then a part of every later
//! `request`; an answer is a `response`, its `complete`, then a part of
//! every later request. Each of those nodes holds the words, so the index
//! finds them all. [`fold`] drops a node when each of its matching *units*
//! is held by a matching node before it on its own timeline (an
//! ancestor): it is a resent copy, and the hit is the node where the
//! message first appeared. The same words typed again on another timeline
//! (after a fork) are a message of their own.
//!
//! A payload's units ([`units`]) are the pieces a message is made of: for
//! JSON, every string value and object key; for a server-sent event
//! stream, those of each `data:` line's JSON (and other lines whole); for
//! any other text, the whole text. Two units are the same when their words
//! are (so a message's text and the same text as a JSON string are one
//! unit). A unit matches when it holds one of the terms to find.

use super::{Query, document};
use crate::Result;
use crate::backend::{Link, StoredNode, Tx};
use convo_core::{DigestMap, NodeHash, SessionId};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// A match kept by [`fold`]: its node and score.
#[derive(Debug)]
pub(crate) struct Kept {
    pub node: StoredNode,
    pub score: f64,
}

/// How many matches' payloads [`fold`] holds at once (read in one query).
const PAYLOADS_AT_ONCE: usize = 64;

/// The matches `found` (best first) without the resent copies, best
/// first, and how many were dropped. Their nodes are read in one query,
/// their payloads a batch at a time, only in sessions with two matches or
/// more.
pub(crate) fn fold(
    tx: &mut dyn Tx,
    q: &Query,
    found: Vec<(u64, f64)>,
) -> Result<(Vec<Kept>, usize)> {
    let seqs: Vec<u64> = found.iter().map(|f| f.0).collect();
    let mut nodes: HashMap<u64, StoredNode> = tx
        .nodes_at(&seqs, false)?
        .into_iter()
        .map(|(n, _)| (n.seq, n))
        .collect();
    let mut kept: Vec<Option<Kept>> = Vec::with_capacity(found.len());
    let mut by_session: HashMap<SessionId, Vec<usize>> = HashMap::new();
    for (seq, score) in found {
        if let Some(node) = nodes.remove(&seq) {
            by_session
                .entry(node.node.session)
                .or_default()
                .push(kept.len());
            kept.push(Some(Kept { node, score }));
        }
    }
    let mut dropped = 0;
    for (s, mut at) in by_session {
        if at.len() < 2 {
            continue;
        }
        at.sort_by_key(|&i| kept[i].as_ref().map_or(0, |k| k.node.seq));
        dropped += fold_session(tx, q, &s, &at, &mut kept)?;
    }
    Ok((kept.into_iter().flatten().collect(), dropped))
}

/// Drops the resent copies among one session's matches (`at`: indexes
/// into `kept`, in follow order); returns how many.
fn fold_session(
    tx: &mut dyn Tx,
    q: &Query,
    s: &SessionId,
    at: &[usize],
    kept: &mut [Option<Kept>],
) -> Result<usize> {
    // With one timeline, the session's nodes are its chain: a node is an
    // ancestor of every deeper one, and no link needs reading.
    let one = tx.branches(Some(s))?.len() == 1;
    let spans = match one {
        true => DigestMap::default(),
        false => spans(&tx.session_links(s)?),
    };
    // Each matching unit (by the hash of its words) and the spans of the
    // nodes that held it; each distinct unit text read once.
    let mut seen: HashMap<u64, Vec<Span>> = HashMap::new();
    let mut memo: HashMap<u64, Option<u64>> = HashMap::new();
    let mut dropped = 0;
    for batch in at.chunks(PAYLOADS_AT_ONCE) {
        let seqs: Vec<u64> = batch
            .iter()
            .filter_map(|&i| kept[i].as_ref().map(|k| k.node.seq))
            .collect();
        let mut payloads: HashMap<u64, Vec<u8>> = tx
            .nodes_at(&seqs, true)?
            .into_iter()
            .filter_map(|(n, p)| Some((n.seq, p?)))
            .collect();
        for &i in batch {
            let Some(k) = kept[i].as_ref() else { continue };
            let here = match one {
                true => (k.node.ctx.depth, u64::MAX - k.node.ctx.depth),
                false => match spans.get(&k.node.hash) {
                    Some(&here) => here,
                    None => continue,
                },
            };
            let Some(payload) = payloads.remove(&k.node.seq) else {
                continue;
            };
            let mut keys = HashSet::new();
            each_unit(&payload, &mut |unit| {
                let key = *memo
                    .entry(digest(unit))
                    .or_insert_with(|| matching(q, unit));
                keys.extend(key);
            });
            // The latest holder first: on a chain, it is the ancestor.
            let before = |key: &u64| {
                seen.get(key)
                    .is_some_and(|held| held.iter().rev().any(|a| a.0 <= here.0 && here.1 <= a.1))
            };
            // A node whose match spans units cannot be told resent.
            let resent = !keys.is_empty() && keys.iter().all(before);
            for key in keys {
                seen.entry(key).or_default().push(here);
            }
            if resent {
                kept[i] = None;
                dropped += 1;
            }
        }
    }
    Ok(dropped)
}

/// A node's place in its session's tree: entered and left in a walk of
/// it, so that `a` is an ancestor of `b` (or `b` itself) when `a.0 <= b.0
/// && b.1 <= a.1`.
type Span = (u64, u64);

/// The span of each node of a session, from its links (parents listed
/// before their children).
fn spans(links: &[Link]) -> DigestMap<NodeHash, Span> {
    let index: DigestMap<NodeHash, usize> =
        links.iter().enumerate().map(|(i, l)| (l.hash, i)).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); links.len()];
    let mut roots = Vec::new();
    for (i, l) in links.iter().enumerate() {
        match l.parent.and_then(|p| index.get(&p)) {
            Some(&p) if p != i => children[p].push(i),
            _ => roots.push(i),
        }
    }
    let mut out = DigestMap::default();
    let mut clock = 0u64;
    let mut enter = vec![0u64; links.len()];
    // (node, children visited)
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for r in roots {
        stack.push((r, 0));
        enter[r] = clock;
        clock += 1;
        while let Some(top) = stack.last_mut() {
            let (n, next) = *top;
            if let Some(&c) = children[n].get(next) {
                top.1 += 1;
                enter[c] = clock;
                clock += 1;
                stack.push((c, 0));
            } else {
                out.insert(links[n].hash, (enter[n], clock));
                clock += 1;
                stack.pop();
            }
        }
    }
    out
}

/// A 64-bit digest of a text (units are told apart by it).
fn digest(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The digest of a unit's words when one of the terms to find is among
/// them; `None` when none is (most units: a cheap test first).
fn matching(q: &Query, unit: &str) -> Option<u64> {
    let lower = unit.to_lowercase();
    let first = |t: &super::Term| match t {
        super::Term::Word(w) | super::Term::Prefix(w) => w.clone(),
        super::Term::Phrase(p) => p.first().cloned().unwrap_or_default(),
    };
    if !q.terms().any(|t| lower.contains(first(t).as_str())) {
        return None;
    }
    let words = document(unit.as_bytes())?;
    q.touches(&words).then(|| digest(&words.join(" ")))
}

/// Calls `f` with each unit of a payload (see the module docs).
fn each_unit(payload: &[u8], f: &mut dyn FnMut(&str)) {
    let Ok(text) = std::str::from_utf8(payload) else {
        return;
    };
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        leaves(&v, f);
        return;
    }
    let sse = text.starts_with("data:") || text.starts_with("event:") || text.contains("\ndata:");
    if !sse {
        f(text);
        return;
    }
    for line in text.lines() {
        let json = line
            .strip_prefix("data:")
            .and_then(|d| serde_json::from_str::<Value>(d.trim()).ok());
        match json {
            Some(v) => leaves(&v, f),
            None if !line.trim().is_empty() => f(line),
            None => {}
        }
    }
}

/// The units of a payload, as [`each_unit`] finds them.
#[cfg(test)]
fn units(payload: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    each_unit(payload, &mut |u| out.push(u.to_owned()));
    out
}

/// Every string value and object key of `v`.
fn leaves(v: &Value, f: &mut dyn FnMut(&str)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().for_each(|x| leaves(x, f)),
        Value::Object(m) => {
            for (k, x) in m {
                f(k);
                leaves(x, f);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_json_strings_event_data_or_the_whole_text() {
        let mut u = units(br#"{"messages":[{"role":"user","content":"Hi there"}]}"#);
        u.sort();
        assert_eq!(u, ["Hi there", "content", "messages", "role", "user"]);
        assert_eq!(
            units(b"event: x\ndata: {\"t\":\"Par\"}\n\ndata: [DONE]\n"),
            ["event: x", "t", "Par", "data: [DONE]"]
        );
        assert_eq!(units(b"Hi\nthere"), ["Hi\nthere"]);
        assert!(units(&[0xff]).is_empty());
    }
}
