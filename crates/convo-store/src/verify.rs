//! Verification: recompute everything from stored bytes, trust nothing.

use crate::backend::Tx;
use crate::ledger::{TxNodes, state_err};
use crate::{Result, StoreError};
use convo_core::state;
use convo_core::timeline::Context;
use convo_core::{ContentHash, Kind, NodeHash, SessionId, StateRoot};
use std::collections::{HashMap, HashSet};

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// What is broken: `node <hash>`, `branch <session>/<name>`, `payload <hash>`, `state <root>`.
    pub object: String,
    /// Why.
    pub reason: String,
}

/// What `verify` checked and found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    /// Nodes whose hash was recomputed.
    pub nodes: u64,
    /// Blobs (payloads and state values) whose hash was recomputed.
    pub blobs: u64,
    /// Payload and value bytes hashed.
    pub blob_bytes: u64,
    /// Branches checked.
    pub branches: u64,
    /// Distinct state roots walked.
    pub state_roots: u64,
    /// Everything wrong, in the order found.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// Whether nothing was found wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
    fn problem(&mut self, object: String, reason: impl Into<String>) {
        self.problems.push(Problem {
            object,
            reason: reason.into(),
        });
    }
}

struct Seen {
    ctx: Context,
    session: SessionId,
}

/// Checks, in one snapshot: every blob hashes to its address; every node
/// hashes to its stored hash, has a well-formed kind, an earlier parent in
/// the same session, the submission/sequence the timeline rules give, a
/// stored payload of the recorded length and the derived context its parent
/// implies; every branch head exists in its session; every state root (on
/// nodes and branches) is a complete, canonical trie whose values exist.
pub(crate) fn verify(tx: &mut dyn Tx) -> Result<VerifyReport> {
    let mut r = VerifyReport::default();

    let mut blobs: HashMap<ContentHash, u64> = HashMap::new();
    let mut bad_blobs = Vec::new();
    tx.scan_blobs(&mut |addr, bytes| {
        let actual = convo_core::hash::content_hash(bytes);
        match ContentHash::from_slice(addr) {
            Some(h) if h == actual => {
                blobs.insert(h, bytes.len() as u64);
            }
            Some(h) => bad_blobs.push((
                h.to_hex(),
                "its bytes do not hash to its address".to_owned(),
            )),
            None => bad_blobs.push((hex::encode(addr), "its address is not 32 bytes".to_owned())),
        }
        r.blobs += 1;
        r.blob_bytes += bytes.len() as u64;
        Ok(())
    })?;
    for (o, why) in bad_blobs {
        r.problem(format!("blob {o}"), why);
    }

    let sessions: HashSet<SessionId> = tx.sessions()?.into_iter().map(|s| s.id).collect();
    let mut orphans: std::collections::BTreeSet<SessionId> = std::collections::BTreeSet::new();
    let mut seen: HashMap<NodeHash, Seen> = HashMap::new();
    let mut roots: HashSet<StateRoot> = HashSet::new();
    let mut problems = Vec::new();
    let mut undecodable = Vec::new();
    tx.scan_nodes(&mut |row| {
        r.nodes += 1;
        let s = match row {
            Ok(s) => s,
            Err(why) => {
                undecodable.push(why);
                return Ok(());
            }
        };
        let mut bad = |why: String| problems.push((s.hash, why));
        let node = &s.node;
        let recomputed = node.hash();
        if recomputed != s.hash {
            bad(format!("its fields hash to {recomputed}, not to its stored hash"));
        }
        if let Err(e) = node.check_shape() {
            bad(e.to_string());
        }
        match blobs.get(&node.payload) {
            None => bad(format!("its payload {} is missing or corrupt", node.payload)),
            Some(&len) if len != node.payload_len => {
                bad(format!("its payload is {len} bytes, the node says {}", node.payload_len))
            }
            Some(_) => {}
        }
        let parent_ctx = match node.parent {
            None => Some(Context::genesis()),
            Some(p) => match seen.get(&p) {
                None => {
                    bad(format!("its parent {p} is missing (or was appended after it)"));
                    None
                }
                Some(ps) if ps.session != node.session => {
                    bad(format!("its parent {p} belongs to session {}", ps.session));
                    None
                }
                Some(ps) => Some(ps.ctx),
            },
        };
        if let Some(pc) = parent_ctx {
            match node.kind {
                Kind::Fork | Kind::Promote => {
                    if node.submission.is_some() || node.sequence.is_some() {
                        bad(format!("a {} node carries a submission or sequence", node.kind));
                    }
                }
                k => {
                    let asked = if k == Kind::Response { node.sequence } else { None };
                    match pc.place(k, &node.session, &node.payload, asked) {
                        Err(e) => bad(format!("it breaks a timeline rule: {e}")),
                        Ok(p) if p.submission != node.submission || p.sequence != node.sequence => {
                            bad("its submission or sequence is not the one its timeline gives".into())
                        }
                        Ok(_) => {}
                    }
                }
            }
            let expect = pc.after(node);
            if expect != s.ctx {
                bad("its stored context (depth, submission, state in effect) does not follow from its parent".into());
            }
        }
        if !sessions.contains(&node.session) {
            orphans.insert(node.session);
        }
        if let Some(st) = node.state {
            roots.insert(st);
        }
        if let Some(st) = s.ctx.state {
            roots.insert(st);
        }
        seen.insert(s.hash, Seen { ctx: s.ctx, session: node.session });
        Ok(())
    })?;
    for (h, why) in problems {
        r.problem(format!("node {h}"), why);
    }
    for why in undecodable {
        r.problem("node row".to_owned(), why);
    }

    for b in tx.branches(None)? {
        r.branches += 1;
        if !sessions.contains(&b.session) {
            orphans.insert(b.session);
        }
        let object = format!("branch {}/{}", b.session, b.name);
        if let Some(h) = b.head {
            match seen.get(&h) {
                None => r.problem(object.clone(), format!("its head {h} is not a stored node")),
                Some(s) if s.session != b.session => r.problem(
                    object.clone(),
                    format!("its head {h} belongs to session {}", s.session),
                ),
                Some(_) => {}
            }
        }
        if let Some(st) = b.state {
            roots.insert(st);
        }
    }

    for s in orphans {
        r.problem(
            format!("session {s}"),
            format!("session {s} has nodes or branches but no session row"),
        );
    }

    let mut walked = HashSet::new();
    let mut roots: Vec<StateRoot> = roots.into_iter().collect();
    roots.sort();
    for root in roots {
        r.state_roots += 1;
        let mut missing = Vec::new();
        let res = state::verify(&mut TxNodes(tx), &root, &mut walked, &mut |v| {
            if !blobs.contains_key(v) {
                missing.push(*v);
            }
        });
        if let Err(e) = res {
            let e = state_err(e);
            if !matches!(e, StoreError::State(_)) {
                return Err(e);
            }
            r.problem(format!("state {root}"), e.to_string());
        }
        for v in missing {
            r.problem(
                format!("state {root}"),
                format!("value {v} is missing or corrupt"),
            );
        }
    }
    Ok(r)
}
