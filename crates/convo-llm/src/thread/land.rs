//! Where a call lands: the one place every way in (the proxy, an OTLP
//! span or log record) decides a call's session and timeline once it has
//! found the message its history continues.
//!
//! How the continued message is found depends on what the call carries
//! (the proxy hashes the API's messages, [`crate::thread`]; OTLP hashes
//! the neutral messages its dialects read, [`crate::otel::ingest`]); what
//! happens next is the same for both, here:
//!
//! - the message is the head of a timeline: the call continues that
//!   timeline ([`continue_at`]);
//! - it is inside a timeline (the client edited or regenerated a later
//!   message, or a history diverged): the session forks there, on a new
//!   timeline `edit-N` ([`free_edit_branch`]), and the call goes on it;
//! - nothing is found (a first call): a new session, unless its first
//!   human text is a string argument of a tool call recorded earlier (a
//!   subagent: Claude Code's `Task`, an agent used as a tool): then a
//!   timeline `agent-N` of that call's session, forked at it
//!   ([`start_subagent`]).

use convo_core::{BranchName, HashPrefix, Millis, NodeHash, SessionId};
use convo_store::{Ledger, Result, StoreError, StoredNode};

/// Where a conversation's latest turn is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spot {
    /// The session.
    pub session: SessionId,
    /// The timeline the turn was recorded on (or one it was seen on).
    pub branch: BranchName,
    /// The turn's last node.
    pub node: NodeHash,
}

/// Where a call that continues `spot` goes: `spot`'s timeline when
/// `spot.node` is still its head (`None`), else a new timeline `edit-N`
/// forked at `spot.node` (the fork node returned). The branch's head is
/// read from the store.
pub fn continue_at(
    l: &mut Ledger<'_>,
    spot: &Spot,
    now: Millis,
) -> Result<(BranchName, Option<StoredNode>)> {
    let head = l
        .tx()
        .branch(&spot.session, &spot.branch)?
        .and_then(|b| b.head);
    if head == Some(spot.node) {
        return Ok((spot.branch.clone(), None));
    }
    fork_at(l, &spot.session, &spot.node, now)
}

/// Forks `session` at `node` on the next free `edit-N` timeline.
pub fn fork_at(
    l: &mut Ledger<'_>,
    session: &SessionId,
    node: &NodeHash,
    now: Millis,
) -> Result<(BranchName, Option<StoredNode>)> {
    let name = free_edit_branch(l, session)?;
    let from = HashPrefix::parse(&node.to_hex()).map_err(StoreError::invalid)?;
    let fork = l.fork(session, &from, &name, now)?;
    Ok((name, Some(fork)))
}

/// The next free `edit-N` branch name of a session: what every way in
/// names a timeline its conversation forked onto.
pub fn free_edit_branch(l: &mut Ledger<'_>, session: &SessionId) -> Result<BranchName> {
    free_branch(l, session, "edit")
}

/// The next free `{stem}-N` branch name of a session.
pub fn free_branch(l: &mut Ledger<'_>, session: &SessionId, stem: &str) -> Result<BranchName> {
    let mut n = 1u32;
    loop {
        let name = BranchName::new(&format!("{stem}-{n}")).map_err(StoreError::invalid)?;
        if l.tx().branch(session, &name)?.is_none() {
            return Ok(name);
        }
        n += 1;
    }
}

/// Starts a subagent's timeline: the next free `agent-N` of `spot`'s
/// session, forked at `spot.node` (the node that recorded the tool call
/// that started it, or its turn's end). Returns the timeline, the fork
/// node and the link its first node carries in its diagnostics as
/// `subagent` (`started_by` the fork point, its `branch`, the
/// `tool_call_id` and `tool`), which
/// [`convo_store::topology::subagent_link`] reads back.
pub fn start_subagent(
    l: &mut Ledger<'_>,
    spot: &Spot,
    spawn: &super::Spawn,
    now: Millis,
) -> Result<(BranchName, StoredNode, serde_json::Value)> {
    let name = free_branch(l, &spot.session, "agent")?;
    let from = HashPrefix::parse(&spot.node.to_hex()).map_err(StoreError::invalid)?;
    let fork = l.fork(&spot.session, &from, &name, now)?;
    let link = serde_json::json!({
        "started_by": spot.node.to_hex(),
        "branch": spot.branch.as_str(),
        "tool_call_id": spawn.tool_call_id,
        "tool": spawn.tool,
    });
    Ok((name, fork, link))
}
