//! The node-hash encoding, version 1.
//!
//! A node's hash is SHA-256 over the byte string below. The encoding is
//! injective: every variable-length field is length-prefixed and every
//! optional field is tagged, in a fixed order, so two different nodes never
//! encode to the same bytes. It is independent of how any backend stores
//! rows. `docs/HASHING.md` repeats this layout and lists golden vectors that
//! `tests::golden_vectors` pins; changing the layout means a new version tag.
//!
//! Notation: `u8`, `u32le`, `u64le`, `i64le` are fixed-width integers;
//! `lp(b)` is `u64le(len(b)) || b`; `opt(x)` is `0x00` when absent and
//! `0x01 || x` when present; `h32` is 32 raw digest bytes.
//!
//! ```text
//! node_v1 =
//!     "convo.node.v1"                  13 ASCII bytes, domain tag
//!     opt(h32 parent)
//!     u8 kind                          invoke=1 request=2 response=3
//!                                      complete=4 fork=5 promote=6
//!     16 bytes session UUID
//!     opt(h32 submission)
//!     opt(u32le sequence)
//!     lp(utf8 from)
//!     lp(utf8 to)
//!     h32 payload_sha256 || u64le payload_len
//!     lp(utf8 diagnostics)             RFC 8785 canonical JSON object
//!     opt(h32 state)
//!     i64le created_at                 ms since the Unix epoch, UTC
//!     opt(lp(branch) || opt(lp(sealed_as)) || 16 bytes nonce)
//! ```
//!
//! Submission ids use their own domain tag:
//!
//! ```text
//! submission_v1 = "convo.submission.v1" || h32 payload_sha256
//!                 || 16 bytes session UUID || opt(h32 parent_submission)
//! ```

use crate::{ContentHash, Digest, Node, NodeHash, SessionId, SubmissionId, sha256};

/// Domain tag that starts every v1 node encoding.
pub const NODE_TAG_V1: &[u8] = b"convo.node.v1";
/// Domain tag that starts every v1 submission encoding.
pub const SUBMISSION_TAG_V1: &[u8] = b"convo.submission.v1";

fn lp(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

fn opt<T>(out: &mut Vec<u8>, v: Option<T>, f: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => out.push(0),
        Some(x) => {
            out.push(1);
            f(out, x);
        }
    }
}

/// Appends the v1 encoding of `node` to `out`.
pub fn encode_node_into(node: &Node, out: &mut Vec<u8>) {
    out.extend_from_slice(NODE_TAG_V1);
    opt(out, node.parent.as_ref(), |o, p| {
        o.extend_from_slice(p.as_bytes())
    });
    out.push(node.kind.code());
    out.extend_from_slice(node.session.as_bytes());
    opt(out, node.submission.as_ref(), |o, s| {
        o.extend_from_slice(s.as_bytes())
    });
    opt(out, node.sequence, |o, s| {
        o.extend_from_slice(&s.to_le_bytes())
    });
    lp(out, node.from.as_bytes());
    lp(out, node.to.as_bytes());
    out.extend_from_slice(node.payload.as_bytes());
    out.extend_from_slice(&node.payload_len.to_le_bytes());
    lp(out, node.diagnostics.as_str().as_bytes());
    opt(out, node.state.as_ref(), |o, s| {
        o.extend_from_slice(s.as_bytes())
    });
    out.extend_from_slice(&node.created_at.to_le_bytes());
    opt(out, node.event.as_ref(), |o, e| {
        lp(o, e.branch.as_str().as_bytes());
        opt(o, e.sealed_as.as_ref(), |o, s| lp(o, s.as_str().as_bytes()));
        o.extend_from_slice(&e.nonce);
    });
}

/// The v1 encoding of `node`.
pub fn encode_node(node: &Node) -> Vec<u8> {
    let mut out = Vec::with_capacity(160 + node.from.len() + node.to.len());
    encode_node_into(node, &mut out);
    out
}

/// SHA-256 of the v1 encoding.
pub fn node_hash(node: &Node) -> NodeHash {
    NodeHash(sha256(&encode_node(node)))
}

/// The id of a submission whose input payload hashes to `payload`, in
/// `session`, following `parent` (the timeline's previous submission).
pub fn submission_id(
    payload: &ContentHash,
    session: &SessionId,
    parent: Option<&SubmissionId>,
) -> SubmissionId {
    let mut out = Vec::with_capacity(SUBMISSION_TAG_V1.len() + 82);
    out.extend_from_slice(SUBMISSION_TAG_V1);
    out.extend_from_slice(payload.as_bytes());
    out.extend_from_slice(session.as_bytes());
    opt(&mut out, parent, |o, p| o.extend_from_slice(p.as_bytes()));
    SubmissionId(sha256(&out))
}

/// The address of a payload or state value.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    ContentHash(sha256(bytes))
}

/// The digest of `Digest` zero, used in the golden vectors.
#[doc(hidden)]
pub const ZERO: Digest = Digest([0; 32]);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BranchName, Diagnostics, Kind, StateRoot, TimelineEvent};

    fn session() -> SessionId {
        SessionId::parse("ses-00000000-0000-4000-8000-000000000001").expect("valid")
    }

    fn invoke() -> Node {
        let payload = b"Tell me about Paris";
        Node {
            parent: None,
            kind: Kind::Invoke,
            session: session(),
            submission: Some(submission_id(&content_hash(payload), &session(), None)),
            sequence: None,
            from: "cli".into(),
            to: "researcher".into(),
            payload: content_hash(payload),
            payload_len: payload.len() as u64,
            diagnostics: Diagnostics::empty(),
            state: None,
            created_at: 1_770_993_005_000,
            event: None,
        }
    }

    /// The golden vectors of docs/HASHING.md. If this test fails, the
    /// encoding changed: that breaks every stored hash, so bump the version.
    #[test]
    fn golden_vectors() {
        let inv = invoke();
        assert_eq!(
            content_hash(b"Tell me about Paris").to_hex(),
            "128e9003fff014d491cb136a7e97a711db787fd830e6b10ce66378714c37082d",
        );
        assert_eq!(
            inv.submission.expect("set").to_hex(),
            "c211ee2b6f5b67902987f69ea86e731aa6fb1186543a6280e9205249bec97e30"
        );
        assert_eq!(
            inv.hash().to_hex(),
            "c4017536a533d01d06a45055ec9580e23b5a785cb131c31b0a73b8873c454963"
        );

        let complete = Node {
            parent: Some(inv.hash()),
            kind: Kind::Complete,
            from: "researcher".into(),
            to: "cli".into(),
            payload: content_hash(b"Paris is the capital of France."),
            payload_len: 31,
            diagnostics: Diagnostics::parse(r#"{"model":"m","tokens":{"out":9,"in":4}}"#)
                .expect("object"),
            state: Some(StateRoot(sha256(b"state"))),
            created_at: 1_770_993_047_000,
            ..inv.clone()
        };
        assert_eq!(
            complete.diagnostics.as_str(),
            r#"{"model":"m","tokens":{"in":4,"out":9}}"#
        );
        assert_eq!(
            complete.hash().to_hex(),
            "1384ad42f51be2948ea07d8a0b049b38ae0d5137cf1f9d6a70f899db0f7d2ea3"
        );

        let fork = Node {
            parent: Some(inv.hash()),
            kind: Kind::Fork,
            submission: None,
            from: "platform".into(),
            to: "researcher".into(),
            payload: content_hash(b""),
            payload_len: 0,
            created_at: 1_770_993_100_000,
            event: Some(TimelineEvent {
                branch: BranchName::new("fix").expect("valid"),
                sealed_as: None,
                nonce: [7; 16],
            }),
            ..inv.clone()
        };
        assert_eq!(
            fork.hash().to_hex(),
            "b6c023a377ebf7fe19bbe057501b0396ad392bc3bd138b32eafa76d9fb6d61cf"
        );
    }

    #[test]
    fn every_field_changes_the_hash() {
        let base = invoke();
        let h = base.hash();
        let variants: Vec<Node> = vec![
            Node {
                parent: Some(NodeHash(ZERO)),
                ..base.clone()
            },
            Node {
                kind: Kind::Complete,
                ..base.clone()
            },
            Node {
                session: SessionId::new_random(),
                ..base.clone()
            },
            Node {
                submission: None,
                ..base.clone()
            },
            Node {
                sequence: Some(1),
                ..base.clone()
            },
            Node {
                from: "cli2".into(),
                ..base.clone()
            },
            Node {
                to: "x".into(),
                ..base.clone()
            },
            Node {
                payload: content_hash(b"other"),
                ..base.clone()
            },
            Node {
                payload_len: 1,
                ..base.clone()
            },
            Node {
                diagnostics: Diagnostics::parse(r#"{"a":1}"#).expect("obj"),
                ..base.clone()
            },
            Node {
                state: Some(StateRoot(ZERO)),
                ..base.clone()
            },
            Node {
                created_at: base.created_at + 1,
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(v.hash(), h, "{v:?}");
        }
    }

    #[test]
    fn from_and_to_are_not_concatenated() {
        let a = Node {
            from: "ab".into(),
            to: "c".into(),
            ..invoke()
        };
        let b = Node {
            from: "a".into(),
            to: "bc".into(),
            ..invoke()
        };
        assert_ne!(a.hash(), b.hash());
    }
}
