//! Turns: how a timeline reads to a person.
//!
//! A *turn* is an `invoke` and every node after it up to and including the
//! `complete` that closes it: the requests and responses the agent made on
//! the way, and any fork or promote recorded in between. Turns are numbered
//! 1, 2, 3… from the session's first node, so a timeline forked after turn 4
//! starts its own turns at 5. Nodes outside any turn (a fork or promote
//! between turns) have no number. An invoke that arrives while a turn is
//! still open closes that turn unfinished and starts the next.

use convo_core::Kind;
use serde::{Deserialize, Serialize};

/// The turn a harness has open on a timeline, from its invoke to its
/// complete: a row of the store (`open_turns`, written in the invoke's
/// transaction, removed in the complete's), so every writer of the
/// timeline sees it inside its own transaction, on every machine sharing
/// the store. Not a node: nothing hashes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenTurn {
    /// The turn's submission (hex).
    pub submission: String,
    /// The turn's number on the timeline (`BRANCH@TURN`).
    pub turn: u64,
    /// The agent answering it (the `from` of its complete).
    pub agent: String,
    /// Who holds it (`convo run, pid 123`).
    pub holder: String,
    /// The machine the holder runs on (a writer on it can tell a killed
    /// holder by its lock file; see `convo_runtime::turns`).
    #[serde(default)]
    pub host: String,
    /// The holder's turn lock file (absolute), locked while it lives.
    #[serde(default)]
    pub lock: String,
}

/// One turn of a timeline, as a range of positions in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Turn {
    /// 1-based turn number.
    pub number: usize,
    /// Position of its invoke.
    pub start: usize,
    /// One past its last node.
    pub end: usize,
    /// Position of its complete, if the turn has finished.
    pub complete: Option<usize>,
}

impl Turn {
    /// Whether position `i` of the timeline is in this turn.
    pub fn contains(&self, i: usize) -> bool {
        (self.start..self.end).contains(&i)
    }
}

/// Groups a timeline, given as the kinds of its nodes from the first to the
/// last, into turns.
pub fn group(kinds: &[Kind]) -> Vec<Turn> {
    let mut out: Vec<Turn> = Vec::new();
    let mut open: Option<Turn> = None;
    for (i, k) in kinds.iter().enumerate() {
        match k {
            Kind::Invoke => {
                if let Some(mut t) = open.take() {
                    t.end = i;
                    out.push(t);
                }
                open = Some(Turn {
                    number: out.len() + 1,
                    start: i,
                    end: i + 1,
                    complete: None,
                });
            }
            Kind::Complete => {
                if let Some(mut t) = open.take() {
                    t.end = i + 1;
                    t.complete = Some(i);
                    out.push(t);
                }
            }
            _ => {
                if let Some(t) = &mut open {
                    t.end = i + 1;
                }
            }
        }
    }
    out.extend(open);
    out
}

/// The turn number of each position (`None` outside any turn).
pub fn numbers(turns: &[Turn], len: usize) -> Vec<Option<usize>> {
    let mut out = vec![None; len];
    for t in turns {
        for slot in out.iter_mut().take(t.end.min(len)).skip(t.start) {
            *slot = Some(t.number);
        }
    }
    out
}

/// The turn holding position `i`, if any.
pub fn turn_at(turns: &[Turn], i: usize) -> Option<&Turn> {
    turns.iter().find(|t| t.contains(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::*;

    #[test]
    fn groups_invoke_to_complete() {
        let kinds = [
            Invoke, Request, Response, Complete, Fork, Invoke, Complete, Invoke,
        ];
        let t = group(&kinds);
        assert_eq!(t.len(), 3);
        assert_eq!((t[0].start, t[0].end, t[0].complete), (0, 4, Some(3)));
        assert_eq!((t[1].start, t[1].end, t[1].complete), (5, 7, Some(6)));
        assert_eq!(
            (t[2].number, t[2].start, t[2].end, t[2].complete),
            (3, 7, 8, None)
        );
        let n = numbers(&t, kinds.len());
        assert_eq!(
            n,
            vec![
                Some(1),
                Some(1),
                Some(1),
                Some(1),
                None,
                Some(2),
                Some(2),
                Some(3)
            ]
        );
        assert_eq!(turn_at(&t, 2).map(|t| t.number), Some(1));
        assert_eq!(turn_at(&t, 4), None);
    }

    #[test]
    fn an_invoke_closes_an_unfinished_turn() {
        let t = group(&[Invoke, Request, Invoke, Complete]);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].end, t[0].complete), (2, None));
        assert_eq!((t[1].start, t[1].end), (2, 4));
    }

    #[test]
    fn a_fork_inside_a_turn_belongs_to_it() {
        let t = group(&[Invoke, Request, Fork, Response, Complete]);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].end, 5);
    }
}
