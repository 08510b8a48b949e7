//! Which nodes a listing shows: by kind, sender, recipient and time.

use crate::backend::StoredNode;
use convo_core::{Kind, Millis};

/// A conjunction of conditions; the default matches every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFilter {
    /// Any of these kinds (empty: any kind).
    pub kinds: Vec<Kind>,
    /// Sent by exactly this sender.
    pub from: Option<String>,
    /// Sent to exactly this recipient.
    pub to: Option<String>,
    /// Recorded at or after this time.
    pub since: Option<Millis>,
    /// Recorded before this time.
    pub until: Option<Millis>,
}

impl NodeFilter {
    /// Whether `n` passes every condition.
    pub fn matches(&self, n: &StoredNode) -> bool {
        let node = &n.node;
        (self.kinds.is_empty() || self.kinds.contains(&node.kind))
            && self.from.as_ref().is_none_or(|f| *f == node.from)
            && self.to.as_ref().is_none_or(|t| *t == node.to)
            && self.since.is_none_or(|s| node.created_at >= s)
            && self.until.is_none_or(|u| node.created_at < u)
    }

    /// Whether it matches every node.
    pub fn is_empty(&self) -> bool {
        *self == NodeFilter::default()
    }
}
