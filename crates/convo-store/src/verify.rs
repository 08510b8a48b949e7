//! Verification: recompute everything from stored bytes, trust nothing.

use crate::backend::{SessionRun, StoredNode, Tx};
use crate::ledger::{TxNodes, state_err};
use crate::{Result, StoreError};
use convo_core::state;
use convo_core::timeline::Context;
use convo_core::{ContentHash, Kind, NodeHash, SessionId, StateRoot};
use convo_core::{DigestMap, DigestSet};
use std::collections::HashSet;

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

const BATCH: usize = 1024;

/// The per-node checks of [`verify`], fed in follow order.
struct Checker<'a> {
    blobs: &'a DigestMap<ContentHash, u64>,
    sessions: &'a HashSet<SessionId>,
    seen: DigestMap<NodeHash, Seen>,
    roots: DigestSet<StateRoot>,
    orphans: &'a mut std::collections::BTreeSet<SessionId>,
    problems: Vec<(NodeHash, String)>,
    undecodable: Vec<String>,
    /// The session index's runs (SQLite), ordered, and the one reached.
    runs: Option<&'a [SessionRun]>,
    run: usize,
}

impl Checker<'_> {
    fn check(&mut self, row: std::result::Result<StoredNode, String>) {
        let s = match row {
            Ok(s) => s,
            Err(why) => {
                self.undecodable.push(why);
                return;
            }
        };
        let problems = &mut self.problems;
        let mut bad = |why: String| problems.push((s.hash, why));
        let node = &s.node;
        if let Some(runs) = self.runs {
            while runs.get(self.run).is_some_and(|r| r.last < s.seq) {
                self.run += 1;
            }
            match runs.get(self.run) {
                Some(r) if r.first <= s.seq && r.session == node.session => {}
                _ => bad(format!(
                    "the session index does not list it (seq {}) under session {}, so its timeline would not show it",
                    s.seq, node.session
                )),
            }
        }
        let recomputed = node.hash();
        if recomputed != s.hash {
            bad(format!(
                "its fields hash to {recomputed}, not to its stored hash"
            ));
        }
        if let Err(e) = node.check_shape() {
            bad(e.to_string());
        }
        match self.blobs.get(&node.payload) {
            None => bad(format!(
                "its payload {} is missing or corrupt",
                node.payload
            )),
            Some(&len) if len != node.payload_len => bad(format!(
                "its payload is {len} bytes, the node says {}",
                node.payload_len
            )),
            Some(_) => {}
        }
        let parent_ctx = match node.parent {
            None => Some(Context::genesis()),
            Some(p) => match self.seen.get(&p) {
                None => {
                    bad(format!(
                        "its parent {p} is missing (or was appended after it)"
                    ));
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
                        bad(format!(
                            "a {} node carries a submission or sequence",
                            node.kind
                        ));
                    }
                }
                k => {
                    let asked = if k == Kind::Response {
                        node.sequence
                    } else {
                        None
                    };
                    match pc.place(k, &node.session, &node.payload, asked) {
                        Err(e) => bad(format!("it breaks a timeline rule: {e}")),
                        Ok(p) if p.submission != node.submission || p.sequence != node.sequence => {
                            bad(
                                "its submission or sequence is not the one its timeline gives"
                                    .into(),
                            )
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
        if !self.sessions.contains(&node.session) {
            self.orphans.insert(node.session);
        }
        if let Some(st) = node.state {
            self.roots.insert(st);
        }
        if let Some(st) = s.ctx.state {
            self.roots.insert(st);
        }
        let earlier = self.seen.insert(
            s.hash,
            Seen {
                ctx: s.ctx,
                session: node.session,
            },
        );
        if earlier.is_some() {
            self.problems
                .push((s.hash, "another node row holds the same hash".into()));
        }
    }
}

/// Checks, in one snapshot: every blob hashes to its address; every node
/// hashes to its stored hash, has a well-formed kind, an earlier parent in
/// the same session, the submission/sequence the timeline rules give, a
/// stored payload of the recorded length and the derived context its parent
/// implies; every branch head exists in its session; every state root (on
/// nodes and branches) is a complete, canonical trie whose values exist.
pub(crate) fn verify(tx: &mut dyn Tx) -> Result<VerifyReport> {
    let mut r = VerifyReport::default();

    let mut blobs: DigestMap<ContentHash, u64> = DigestMap::default();
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
    let runs = tx.session_runs()?.map(|rows| {
        let mut runs: Vec<SessionRun> = Vec::with_capacity(rows.len());
        for row in rows {
            match row {
                Err(why) => r.problem("session index".to_owned(), why),
                Ok(run) => {
                    if let Some(prev) = runs.last()
                        && run.first <= prev.last
                    {
                        r.problem(
                            "session index".to_owned(),
                            format!(
                                "runs {}..{} and {}..{} overlap",
                                prev.first, prev.last, run.first, run.last
                            ),
                        );
                        continue;
                    }
                    runs.push(run);
                }
            }
        }
        runs
    });
    let mut orphans: std::collections::BTreeSet<SessionId> = std::collections::BTreeSet::new();
    // Two stages on two threads: this one steps SQLite and decodes rows,
    // a worker recomputes hashes and replays the timeline rules, in order.
    let mut checker = Checker {
        blobs: &blobs,
        sessions: &sessions,
        seen: DigestMap::default(),
        roots: DigestSet::default(),
        orphans: &mut orphans,
        problems: Vec::new(),
        undecodable: Vec::new(),
        runs: runs.as_deref(),
        run: 0,
    };
    let scanned = std::thread::scope(|scope| -> Result<u64> {
        let (send, recv) =
            std::sync::mpsc::sync_channel::<Vec<std::result::Result<StoredNode, String>>>(8);
        let worker = scope.spawn(|| {
            for batch in recv {
                for row in batch {
                    checker.check(row);
                }
            }
        });
        let mut count = 0u64;
        let mut batch = Vec::with_capacity(BATCH);
        let scan = tx.scan_nodes(&mut |row| {
            count += 1;
            batch.push(row);
            if batch.len() == BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                send.send(full)
                    .map_err(|_| StoreError::Backend("the verify worker stopped".into()))?;
            }
            Ok(())
        });
        if !batch.is_empty() {
            let _ = send.send(batch);
        }
        drop(send);
        worker
            .join()
            .map_err(|_| StoreError::Backend("the verify worker panicked".into()))?;
        scan.map(|()| count)
    })?;
    r.nodes += scanned;
    let Checker {
        seen,
        mut roots,
        problems,
        undecodable,
        ..
    } = checker;
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
