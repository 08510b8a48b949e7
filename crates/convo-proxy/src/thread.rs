//! Threading by content: where a call lands when no session is named.
//!
//! Every recorded conversation turn's `complete` carries `thread` in its
//! diagnostics: the SHA-256 of the conversation so far, request messages
//! plus the answer, each message [`normalized`](crate::api::normalize) and
//! the list in RFC 8785 canonical form. A new request's key is the same
//! hash over its messages up to and including the last assistant message
//! (what it continues). Then:
//!
//! - the key names the head of a timeline: the call continues it;
//! - it names an earlier `complete` (the client edited or regenerated a
//!   later message, as in ChatGPT's tree of edits): the call goes on a new
//!   timeline `edit-N` forked at that `complete`;
//! - it names nothing, or the request has no assistant message yet: a new
//!   session (agent `proxy`, titled by the first user input).
//!
//! The index lives in memory, filled from the store on the first call
//! that needs it (sessions whose agent is `proxy`) and kept up to date by
//! every call this process records.

use crate::api::{self, Api};
use convo_core::{BranchName, Kind, NodeHash, SessionId};
use convo_store::{Ledger, Result, Store};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The agent name of sessions the proxy creates.
pub const PROXY_AGENT: &str = "proxy";

fn hash_messages(msgs: &[Value]) -> Option<String> {
    let norm: Vec<Value> = msgs.iter().map(api::normalize).collect();
    let text = serde_jcs::to_string(&norm).ok()?;
    Some(hex::encode(Sha256::digest(text.as_bytes())))
}

/// The key of what a request continues: its messages up to the last
/// assistant message; `None` for a conversation's first request.
pub fn key_before(api: Api, req: Option<&Value>) -> Option<String> {
    let msgs = api::messages(api, req)?;
    let last = msgs.iter().rposition(|m| {
        m.get("role").and_then(Value::as_str) == Some("assistant")
            || matches!(
                m.get("type").and_then(Value::as_str),
                Some("function_call" | "reasoning")
            )
    })?;
    // A Responses API answer is several output items: take them all.
    let mut end = last + 1;
    while end < msgs.len()
        && msgs[end].get("role").is_none()
        && msgs[end].get("type").and_then(Value::as_str) != Some("function_call_output")
    {
        end += 1;
    }
    hash_messages(&msgs[..end])
}

/// The key of the conversation after a call: its messages plus the answer.
pub fn key_after(api: Api, req: Option<&Value>, answer: Option<&Value>) -> Option<String> {
    let mut msgs = api::messages(api, req)?;
    match answer? {
        Value::Array(items) => msgs.extend(items.iter().cloned()),
        one => msgs.push(one.clone()),
    }
    hash_messages(&msgs)
}

/// Where a conversation's latest turn is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spot {
    /// The session.
    pub session: SessionId,
    /// The timeline the turn was recorded on.
    pub branch: BranchName,
    /// The turn's `complete`.
    pub node: NodeHash,
}

/// Conversation key → the turn that ended it.
#[derive(Debug, Default)]
pub struct ThreadIndex {
    map: HashMap<String, Spot>,
    loaded: bool,
}

impl ThreadIndex {
    /// Fills the index from the store once (every `complete` with a
    /// `thread` key on the timelines of `proxy` sessions).
    pub fn load(&mut self, store: &mut Store) -> Result<()> {
        if self.loaded {
            return Ok(());
        }
        for s in store.sessions()? {
            if s.agent != PROXY_AGENT {
                continue;
            }
            for b in store.branches(&s.id)? {
                for n in store.timeline(&s.id, &b.name)? {
                    let node = &n.stored.node;
                    if node.kind != Kind::Complete || node.session != s.id {
                        continue;
                    }
                    if let Some(k) = node
                        .diagnostics
                        .to_value()
                        .get("thread")
                        .and_then(Value::as_str)
                    {
                        self.map.entry(k.to_owned()).or_insert(Spot {
                            session: s.id,
                            branch: b.name.clone(),
                            node: n.stored.hash,
                        });
                    }
                }
            }
        }
        self.loaded = true;
        Ok(())
    }

    /// The turn a key names.
    pub fn get(&self, key: &str) -> Option<&Spot> {
        self.map.get(key)
    }

    /// Remembers a turn (the newest wins).
    pub fn insert(&mut self, key: String, spot: Spot) {
        self.map.insert(key, spot);
    }
}

/// The next free `edit-N` branch name of a session.
pub fn free_edit_branch(l: &mut Ledger<'_>, session: &SessionId) -> Result<BranchName> {
    free_branch(l, session, "edit")
}

/// The next free `{stem}-N` branch name of a session.
pub fn free_branch(l: &mut Ledger<'_>, session: &SessionId, stem: &str) -> Result<BranchName> {
    let mut n = 1u32;
    loop {
        let name = BranchName::new(&format!("{stem}-{n}"))
            .map_err(|e| convo_store::StoreError::Invalid(e.to_string()))?;
        if l.tx().branch(session, &name)?.is_none() {
            return Ok(name);
        }
        n += 1;
    }
}

/// A session title from a first input: its first line, at most 60 characters.
pub fn title_from(input: &[u8]) -> String {
    let text = String::from_utf8_lossy(input);
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut t: String = line.trim().chars().take(60).collect();
    if t.is_empty() {
        t = "proxy call".into();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_next_request_continues_the_recorded_answer() {
        let req = json!({"messages":[{"role":"user","content":"hi"}]});
        let answer = json!({"role":"assistant","content":"hello","refusal":null});
        let after = key_after(Api::Chat, Some(&req), Some(&answer)).unwrap();
        let next = json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":"hello"},
            {"role":"user","content":"more"}]});
        assert_eq!(key_before(Api::Chat, Some(&next)), Some(after));
        assert_eq!(key_before(Api::Chat, Some(&req)), None);
    }
}
