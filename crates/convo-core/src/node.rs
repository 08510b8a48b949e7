//! The node: one message in a session's Merkle DAG.

use crate::hash;
use crate::{BranchName, ContentHash, NodeHash, SessionId, StateRoot, SubmissionId};
use std::fmt;
use std::str::FromStr;

/// Milliseconds since the Unix epoch, UTC. Every node time has this precision.
pub type Millis = i64;

/// What a node records. See PRODUCT.md §1 for who sends each kind to whom.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum Kind {
    /// A caller's input to the agent; starts a submission.
    Invoke,
    /// The agent's call to a service (`infer`, `kv`, …).
    Request,
    /// A service's answer to the agent.
    Response,
    /// The agent's answer to the caller; may carry a state root.
    Complete,
    /// A timeline created at a fork point.
    Fork,
    /// A timeline made canonical.
    Promote,
}

impl Kind {
    /// All kinds, in code order.
    pub const ALL: [Kind; 6] = [
        Kind::Invoke,
        Kind::Request,
        Kind::Response,
        Kind::Complete,
        Kind::Fork,
        Kind::Promote,
    ];

    /// The one-byte code used in the hash encoding and in storage.
    pub fn code(self) -> u8 {
        match self {
            Kind::Invoke => 1,
            Kind::Request => 2,
            Kind::Response => 3,
            Kind::Complete => 4,
            Kind::Fork => 5,
            Kind::Promote => 6,
        }
    }

    /// The inverse of [`Kind::code`].
    pub fn from_code(c: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.code() == c)
    }

    /// The lowercase name (`invoke`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Invoke => "invoke",
            Kind::Request => "request",
            Kind::Response => "response",
            Kind::Complete => "complete",
            Kind::Fork => "fork",
            Kind::Promote => "promote",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                format!("unknown node kind `{s}` (expected invoke, request, response, complete, fork or promote)")
            })
    }
}

/// A node's diagnostics: a JSON object kept in RFC 8785 canonical form,
/// so the bytes hashed do not depend on how the object was written.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Diagnostics(String);

impl Diagnostics {
    /// The empty object `{}`.
    pub fn empty() -> Self {
        Diagnostics("{}".to_owned())
    }

    /// Parses JSON text that must be an object with no repeated key, and
    /// canonicalises it.
    pub fn parse(text: &str) -> Result<Self, NodeError> {
        let v: serde_json::Value = crate::json::from_str_unique(text)
            .map_err(|e| NodeError::Diagnostics(e.to_string()))?;
        Self::from_value(&v)
    }

    /// Canonicalises a JSON value, which must be an object.
    pub fn from_value(v: &serde_json::Value) -> Result<Self, NodeError> {
        if !v.is_object() {
            return Err(NodeError::Diagnostics("expected a JSON object".into()));
        }
        crate::json::canonical(v)
            .map(Diagnostics)
            .map_err(|e| NodeError::Diagnostics(e.to_string()))
    }

    /// Wraps text read back from a store, as stored. Verification hashes
    /// these exact bytes, so an edit is caught even if it is not canonical.
    pub fn from_stored(text: String) -> Self {
        Diagnostics(text)
    }

    /// The canonical JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The diagnostics as a JSON value (`{}` if the stored text is not JSON).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or_else(|_| serde_json::json!({}))
    }
}

/// What a fork or promote node records about the timeline it made.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct TimelineEvent {
    /// The branch created (fork) or promoted (promote), under its name at the time.
    pub branch: BranchName,
    /// For a promote: the name the old `main` was sealed under.
    pub sealed_as: Option<BranchName>,
    /// 16 random bytes, so two events never share a hash even when every
    /// other field matches (same fork point, same name, same millisecond).
    pub nonce: [u8; 16],
}

/// Errors in a node's own fields.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NodeError {
    /// Diagnostics that are not a JSON object.
    #[error("diagnostics must be a JSON object: {0}")]
    Diagnostics(String),
    /// A fork or promote without its event, or another kind with one.
    #[error("a {0} node {1}")]
    Shape(Kind, &'static str),
}

/// One message, with every hashed field. The hash itself is computed by
/// [`Node::hash`], never stored in the struct, so it cannot drift.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Node {
    /// The previous node on the timeline; `None` for a session's first node.
    pub parent: Option<NodeHash>,
    /// What the node records.
    pub kind: Kind,
    /// The session it belongs to.
    pub session: SessionId,
    /// The submission it belongs to (`None` for fork and promote).
    pub submission: Option<SubmissionId>,
    /// 1, 2, 3… for requests and responses within a submission.
    pub sequence: Option<u32>,
    /// Sender (`cli`, an agent name, a service name, `platform`).
    pub from: String,
    /// Recipient.
    pub to: String,
    /// SHA-256 of the payload bytes.
    pub payload: ContentHash,
    /// Length of the payload in bytes.
    pub payload_len: u64,
    /// Durations, token counts, model, status code…
    pub diagnostics: Diagnostics,
    /// The agent's state root after the turn (complete nodes).
    pub state: Option<StateRoot>,
    /// When the node was recorded.
    pub created_at: Millis,
    /// Present exactly on fork and promote nodes.
    pub event: Option<TimelineEvent>,
}

impl Node {
    /// The node's hash: SHA-256 of [`hash::encode_node`].
    pub fn hash(&self) -> NodeHash {
        hash::node_hash(self)
    }

    /// Checks that the kind and the fork/promote event agree.
    pub fn check_shape(&self) -> Result<(), NodeError> {
        match (self.kind, &self.event) {
            (Kind::Fork, Some(e)) if e.sealed_as.is_none() => Ok(()),
            (Kind::Fork, Some(_)) => Err(NodeError::Shape(Kind::Fork, "has a sealed name")),
            (Kind::Promote, Some(e)) if e.sealed_as.is_some() => Ok(()),
            (Kind::Promote, Some(_)) => {
                Err(NodeError::Shape(Kind::Promote, "lacks the sealed name"))
            }
            (k @ (Kind::Fork | Kind::Promote), None) => {
                Err(NodeError::Shape(k, "lacks its timeline event"))
            }
            (k, Some(_)) => Err(NodeError::Shape(k, "carries a timeline event")),
            (_, None) => Ok(()),
        }
    }
}
