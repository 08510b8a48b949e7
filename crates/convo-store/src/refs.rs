//! References to nodes and turns, as people type them.
//!
//! # Grammar
//!
//! ```text
//! REF    := BASE [ "@" TURN ] [ "~" N ]
//! BASE   := BRANCH            the branch's head
//!         | HEX               a node: its full hash or a unique prefix of 4 to 64 hex digits
//! TURN   := ["-"] DIGITS      turn TURN of the timeline ending at BASE: 1 is the first turn,
//!                             -1 the last; the reference is that turn's last node (its
//!                             complete, or the newest node of a turn still open), so
//!                             `main@3` is "main as of turn 3" and forks after that turn
//! N      := DIGITS            N nodes back along parents (`~` alone means `~1`)
//! ```
//!
//! Rules, in the order they apply:
//!
//! 1. A string that is the exact name of one of the session's branches is
//!    that branch (so a branch called `beef` or `v@2` wins over a hash prefix
//!    or a turn suffix).
//! 2. Otherwise everything after the first `~` is `N`, and a trailing
//!    `@TURN` (after the last `@`, digits with an optional `-`) is the turn.
//! 3. What is left is a branch name if the session has that branch, else a
//!    hash prefix, which must be 4 or more hex digits and match exactly one
//!    node, of this session.
//!
//! A *turn* is an invoke and every node after it up to and including its
//! complete (see [`crate::turns`]). Turn numbers count turns from the
//! session's first node to the node the reference starts from, so a fork
//! continues its parent timeline's numbering.

use crate::backend::{StoredNode, Tx};
use crate::chain::{chain_in, open_branch, resolve_in};
use crate::{Result, StoreError};
use convo_core::{BranchName, HashPrefix, SessionId};

/// The shortest hash prefix a reference accepts.
pub const MIN_PREFIX: usize = 4;

/// A parsed reference, before it is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefSpec {
    /// The branch name or hash prefix it starts from, as typed.
    pub base: String,
    /// `@TURN`: 1-based, negative from the end.
    pub turn: Option<i64>,
    /// `~N`: how many nodes back.
    pub back: u64,
}

impl RefSpec {
    /// Splits `text` into base, turn and steps back (rule 2 of the grammar).
    /// Does not decide whether the base is a branch or a hash.
    pub fn parse(text: &str) -> Result<RefSpec> {
        let bad =
            |why: &str| StoreError::Invalid(format!("`{text}` is not a reference: {why}").into());
        if text.trim().is_empty() {
            return Err(bad("it is empty"));
        }
        let (rest, back) = match text.split_once('~') {
            None => (text, 0),
            Some((rest, "")) => (rest, 1),
            Some((rest, n)) => (
                rest,
                n.parse::<u64>()
                    .map_err(|_| bad("`~` must be followed by a number of nodes"))?,
            ),
        };
        let (base, turn) = match rest.rsplit_once('@') {
            Some((b, t))
                if !t.is_empty()
                    && t.strip_prefix('-')
                        .unwrap_or(t)
                        .bytes()
                        .all(|c| c.is_ascii_digit())
                    && !t.strip_prefix('-').unwrap_or(t).is_empty() =>
            {
                let n: i64 = t
                    .parse()
                    .map_err(|_| bad("the turn number is out of range"))?;
                if n == 0 {
                    return Err(bad("turns are numbered from 1 (or from -1 at the end)"));
                }
                (b, Some(n))
            }
            _ => (rest, None),
        };
        if base.is_empty() {
            return Err(bad("it names no branch or node before `@` or `~`"));
        }
        Ok(RefSpec {
            base: base.to_owned(),
            turn,
            back,
        })
    }
}

/// Resolves `text` (see the module docs) to a node of `session`, inside a
/// transaction.
/// The timeline a node reference names (`BRANCH`, `BRANCH@TURN`,
/// `BRANCH~N`; an existing branch of the session), `None` for a hash:
/// what a fork from it starts inside when a turn is open there.
pub fn source_branch(
    tx: &mut dyn Tx,
    session: &SessionId,
    text: &str,
) -> Result<Option<BranchName>> {
    let exact = BranchName::new(text).ok();
    if let Some(b) = exact
        && tx.branch(session, &b)?.is_some()
    {
        return Ok(Some(b));
    }
    let Ok(spec) = RefSpec::parse(text) else {
        return Ok(None);
    };
    match BranchName::new(&spec.base) {
        Ok(b) if tx.branch(session, &b)?.is_some() => Ok(Some(b)),
        _ => Ok(None),
    }
}

pub fn resolve_ref_in(tx: &mut dyn Tx, session: &SessionId, text: &str) -> Result<StoredNode> {
    // Rule 1: an exact branch name.
    if let Ok(name) = BranchName::new(text)
        && let Some(b) = tx.branch(session, &name)?
    {
        return head_of(tx, &b.name, b.head);
    }
    let spec = RefSpec::parse(text)?;
    let start = base_node(tx, session, &spec.base, text)?;
    let at_turn = match spec.turn {
        None => start,
        Some(t) => {
            let chain = chain_in(tx, session, start.hash, false)?;
            let kinds: Vec<_> = chain.iter().map(|n| n.stored.node.kind).collect();
            let turns = crate::turns::group(&kinds);
            let idx = if t > 0 {
                usize::try_from(t - 1).ok()
            } else {
                usize::try_from(-t)
                    .ok()
                    .and_then(|k| turns.len().checked_sub(k))
            };
            let turn = idx.and_then(|i| turns.get(i)).ok_or_else(|| {
                StoreError::NoNode(format!(
                    "{text} (the timeline has {} turn{})",
                    turns.len(),
                    if turns.len() == 1 { "" } else { "s" }
                ))
            })?;
            chain
                .into_iter()
                .nth(turn.end - 1)
                .map(|n| n.stored)
                .ok_or_else(|| StoreError::corrupt(format!("turn {} has no nodes", turn.number)))?
        }
    };
    let mut node = at_turn;
    for i in 0..spec.back {
        let parent = node.node.parent.ok_or_else(|| {
            StoreError::NoNode(format!(
                "{text} (only {i} node{} before it)",
                if i == 1 { "" } else { "s" }
            ))
        })?;
        node = tx.node(&parent)?.ok_or_else(|| {
            StoreError::corrupt(format!("parent {parent} of {} is missing", node.hash))
        })?;
    }
    Ok(node)
}

fn head_of(
    tx: &mut dyn Tx,
    name: &BranchName,
    head: Option<convo_core::NodeHash>,
) -> Result<StoredNode> {
    let h =
        head.ok_or_else(|| StoreError::NoNode(format!("{name} (the branch has no nodes yet)")))?;
    tx.node(&h)?
        .ok_or_else(|| StoreError::corrupt(format!("head {h} of `{name}` is missing")))
}

fn base_node(tx: &mut dyn Tx, session: &SessionId, base: &str, text: &str) -> Result<StoredNode> {
    if let Ok(name) = BranchName::new(base)
        && tx.branch(session, &name)?.is_some()
    {
        let b = open_branch(tx, session, &name, false)?;
        return head_of(tx, &b.name, b.head);
    }
    let looks_hex = base.bytes().all(|c| c.is_ascii_hexdigit());
    if !looks_hex || base.len() > 64 {
        return Err(StoreError::NoBranch {
            session: session.to_string(),
            branch: base.to_owned(),
        });
    }
    if base.len() < MIN_PREFIX {
        return Err(StoreError::Invalid(format!(
            "`{text}`: a hash prefix needs at least {MIN_PREFIX} hex digits, and no branch is named `{base}`"
        ).into()));
    }
    let p = HashPrefix::parse(base).map_err(StoreError::invalid)?;
    let n = resolve_in(tx, &p)?;
    if n.node.session != *session {
        return Err(StoreError::WrongSession {
            node: n.hash.to_hex(),
            owner: n.node.session.to_string(),
            session: session.to_string(),
        });
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::RefSpec;

    fn p(s: &str) -> (String, Option<i64>, u64) {
        let r = RefSpec::parse(s).unwrap();
        (r.base, r.turn, r.back)
    }

    #[test]
    fn grammar() {
        assert_eq!(p("main"), ("main".into(), None, 0));
        assert_eq!(p("main~3"), ("main".into(), None, 3));
        assert_eq!(p("main~"), ("main".into(), None, 1));
        assert_eq!(p("main@2"), ("main".into(), Some(2), 0));
        assert_eq!(p("main@-1"), ("main".into(), Some(-1), 0));
        assert_eq!(p("retry@-2~1"), ("retry".into(), Some(-2), 1));
        assert_eq!(p("3fa9c1"), ("3fa9c1".into(), None, 0));
        assert_eq!(p("a@b"), ("a@b".into(), None, 0));
        assert_eq!(p("v@2@3"), ("v@2".into(), Some(3), 0));
        assert!(RefSpec::parse("main@0").is_err());
        assert!(RefSpec::parse("main~x").is_err());
        assert!(RefSpec::parse("@3").is_err());
        assert!(RefSpec::parse("").is_err());
    }
}
