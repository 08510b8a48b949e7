//! Timeline rules: what may be appended after a node, and what follows.
//!
//! Every stored node carries a derived [`Context`]: the submission it is in,
//! whether that submission is still open, the last request sequence, the
//! state in effect, and its depth. The context of a node is a pure function
//! of its parent's context and the node itself ([`Context::after`]), so a
//! backend stores it next to the node (a fork copies it in O(1) instead of
//! walking history) and verification recomputes it to catch edits.

use crate::hash::submission_id;
use crate::{BranchName, ContentHash, Kind, Millis, Node, SessionId, StateRoot, SubmissionId};

/// What a timeline looks like as of one node. Derived, never hashed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Context {
    /// Nodes from the session's first node to this one, inclusive.
    pub depth: u64,
    /// `invoke`s from the session's first node to this one, inclusive: the
    /// node's turn number (stored, so a page of a long timeline need not
    /// count the turns before it).
    pub turn: u64,
    /// The timeline's most recent submission.
    pub submission: Option<SubmissionId>,
    /// Whether that submission still awaits its `complete`.
    pub open: bool,
    /// The highest request sequence used in the submission (0 for none).
    pub last_sequence: u32,
    /// The agent state in effect: the root of the last `complete` that carried one.
    pub state: Option<StateRoot>,
}

/// A message that breaks a timeline rule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RuleError {
    /// request / response / complete with no invoke before it.
    #[error(
        "a {0} must follow an invoke: this timeline has no open submission (record an invoke first)"
    )]
    NoOpenSubmission(Kind),
    /// A response with no request in the submission.
    #[error("a response must follow a request: the open submission has made no request yet")]
    NoRequest,
    /// A response naming a sequence no request used.
    #[error("response sequence {given} does not match a request of this submission (1..={max})")]
    BadSequence {
        /// The sequence asked for.
        given: u32,
        /// The highest request sequence so far.
        max: u32,
    },
    /// A sequence given for a kind that does not take one.
    #[error("only a response takes an explicit sequence; a {0}'s is assigned")]
    SequenceNotAllowed(Kind),
    /// fork / promote through `record`.
    #[error("{0} nodes are recorded by `session {0}`, not by `record`")]
    TimelineKind(Kind),
}

/// Where a new message lands: its submission and sequence.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Placement {
    /// The submission the message joins or starts.
    pub submission: Option<SubmissionId>,
    /// Its sequence, for requests and responses.
    pub sequence: Option<u32>,
}

impl Context {
    /// The context before a session's first node.
    pub fn genesis() -> Self {
        Context::default()
    }

    /// Decides the submission and sequence of a message of `kind` appended
    /// after a node with this context, or why it may not be appended.
    pub fn place(
        &self,
        kind: Kind,
        session: &SessionId,
        payload: &ContentHash,
        sequence: Option<u32>,
    ) -> Result<Placement, RuleError> {
        if sequence.is_some() && kind != Kind::Response {
            return Err(RuleError::SequenceNotAllowed(kind));
        }
        let open = || {
            if self.open {
                Ok(self.submission)
            } else {
                Err(RuleError::NoOpenSubmission(kind))
            }
        };
        match kind {
            Kind::Invoke => Ok(Placement {
                submission: Some(submission_id(payload, session, self.submission.as_ref())),
                sequence: None,
            }),
            Kind::Request => Ok(Placement {
                submission: open()?,
                sequence: Some(self.last_sequence.saturating_add(1)),
            }),
            Kind::Response => {
                let submission = open()?;
                if self.last_sequence == 0 {
                    return Err(RuleError::NoRequest);
                }
                let seq = sequence.unwrap_or(self.last_sequence);
                if seq == 0 || seq > self.last_sequence {
                    return Err(RuleError::BadSequence {
                        given: seq,
                        max: self.last_sequence,
                    });
                }
                Ok(Placement {
                    submission,
                    sequence: Some(seq),
                })
            }
            Kind::Complete => Ok(Placement {
                submission: open()?,
                sequence: None,
            }),
            Kind::Fork | Kind::Promote => Err(RuleError::TimelineKind(kind)),
        }
    }

    /// The context as of `node`, appended after a node with this context.
    pub fn after(&self, node: &Node) -> Context {
        let mut c = *self;
        c.depth = c.depth.saturating_add(1);
        match node.kind {
            Kind::Invoke => {
                c.turn = c.turn.saturating_add(1);
                c.submission = node.submission;
                c.open = true;
                c.last_sequence = 0;
            }
            Kind::Request => c.last_sequence = node.sequence.unwrap_or(c.last_sequence),
            Kind::Complete => {
                c.open = false;
                if node.state.is_some() {
                    c.state = node.state;
                }
            }
            Kind::Response | Kind::Fork | Kind::Promote => {}
        }
        c
    }
}

/// The name the old `main` is sealed under when a branch is promoted at
/// `now`: `broken-YYYY-MM-DD`, then `-2`, `-3`… while `taken` says a name is
/// already used in the session.
pub fn sealed_name(now: Millis, taken: impl Fn(&str) -> bool) -> BranchName {
    let date = jiff::Timestamp::from_millisecond(now)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    let base = format!("broken-{}", date.strftime("%Y-%m-%d"));
    let mut name = base.clone();
    let mut n = 2;
    while taken(&name) {
        name = format!("{base}-{n}");
        n += 1;
    }
    BranchName::new(&name).expect("broken-YYYY-MM-DD[-N] is a valid branch name")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::content_hash;

    #[test]
    fn sealed_names_count_up_on_collision() {
        let t = 1_770_993_005_000; // 2026-02-13
        assert_eq!(sealed_name(t, |_| false).as_str(), "broken-2026-02-13");
        let taken = ["broken-2026-02-13", "broken-2026-02-13-2"];
        assert_eq!(
            sealed_name(t, |n| taken.contains(&n)).as_str(),
            "broken-2026-02-13-3"
        );
    }

    #[test]
    fn requests_need_an_open_submission() {
        let s = SessionId::new_random();
        let p = content_hash(b"x");
        let g = Context::genesis();
        assert_eq!(
            g.place(Kind::Request, &s, &p, None),
            Err(RuleError::NoOpenSubmission(Kind::Request))
        );
        assert_eq!(
            g.place(Kind::Fork, &s, &p, None),
            Err(RuleError::TimelineKind(Kind::Fork))
        );
        let inv = g
            .place(Kind::Invoke, &s, &p, None)
            .expect("invoke always allowed");
        let open = Context {
            open: true,
            submission: inv.submission,
            depth: 1,
            ..g
        };
        assert_eq!(
            open.place(Kind::Response, &s, &p, None),
            Err(RuleError::NoRequest)
        );
        let req = open.place(Kind::Request, &s, &p, None).expect("open");
        assert_eq!(req.sequence, Some(1));
        let after_req = Context {
            last_sequence: 1,
            ..open
        };
        assert_eq!(
            after_req
                .place(Kind::Response, &s, &p, None)
                .expect("ok")
                .sequence,
            Some(1)
        );
        assert!(after_req.place(Kind::Response, &s, &p, Some(2)).is_err());
        assert!(after_req.place(Kind::Request, &s, &p, Some(2)).is_err());
    }

    #[test]
    fn same_input_in_same_context_gets_same_submission() {
        let s = SessionId::new_random();
        let p = content_hash(b"hello");
        let g = Context::genesis();
        let a = g.place(Kind::Invoke, &s, &p, None).expect("ok");
        let b = g.place(Kind::Invoke, &s, &p, None).expect("ok");
        assert_eq!(a, b);
        let other = Context {
            submission: a.submission,
            ..g
        };
        assert_ne!(other.place(Kind::Invoke, &s, &p, None).expect("ok"), a);
    }
}
