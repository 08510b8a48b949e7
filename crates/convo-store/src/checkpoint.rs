//! Signed checkpoints: an anchor kept outside the store.
//!
//! Nothing inside one store can tell a rolled-back branch, a truncated
//! suffix or a run of forged nodes with recomputed hashes from the real
//! thing: whoever can write the file can make it consistent again. A
//! checkpoint is a small statement of the store's state, signed with an
//! Ed25519 key kept elsewhere (as Certificate Transparency logs sign their
//! tree heads): the follow cursor, the number of nodes, a hash chain over
//! every node hash in follow order, the fact journal's length and head, and
//! every (session, branch, head, sealed). [`Store::check_checkpoint`]
//! proves that the store still extends it.
//!
//! ```text
//! log_0   = SHA-256("convo.log.v1")
//! log_i   = SHA-256(log_{i-1} || u64le seq_i || h32 node_hash_i)       follow order
//! heads   = SHA-256("convo.heads.v1" || entry*)   sorted by (session, branch)
//! entry   = 16 bytes session UUID || lp(branch) || opt(h32 head) || u8 sealed
//! statement_v1 = "convo.checkpoint.v1" || i64le time || u64le cursor || u64le nodes
//!                || h32 log_cursor || u64le facts || opt(h32 last fact hash) || h32 heads
//! signature = Ed25519(statement_v1)
//! ```

use crate::backend::Tx;
use crate::{Problem, Result, Store, StoreError};
use convo_core::{BranchName, Digest, Kind, Millis, NodeHash, SessionId, sha256};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

/// Domain tag of the signed statement.
pub const CHECKPOINT_TAG_V1: &[u8] = b"convo.checkpoint.v1";

/// One timeline as a checkpoint saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadEntry {
    /// `ses-{uuid}`.
    pub session: String,
    /// The branch's name then.
    pub branch: String,
    /// Its head (64 hex), or none for an empty timeline.
    pub head: Option<String>,
    /// Whether it was sealed.
    pub sealed: bool,
}

/// A checkpoint: the statement's fields, the heads it digests, and the
/// signature with the public key that made it. Serialized as one JSON
/// object (`format` = `convo.checkpoint.v1`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Always `convo.checkpoint.v1`.
    pub format: String,
    /// When it was taken (ms since the Unix epoch).
    pub time: Millis,
    /// The follow cursor: the highest follow number.
    pub cursor: u64,
    /// How many nodes the store held.
    pub nodes: u64,
    /// The log chain over nodes 1..=cursor (64 hex).
    pub log: String,
    /// How many facts the journal held.
    pub facts: u64,
    /// The newest fact's hash (64 hex).
    pub facts_head: Option<String>,
    /// The digest of `heads` (64 hex).
    pub heads_digest: String,
    /// Every timeline, sorted by session and branch.
    pub heads: Vec<HeadEntry>,
    /// The Ed25519 public key (64 hex).
    pub key: String,
    /// The Ed25519 signature of the statement (128 hex).
    pub signature: String,
}

/// One timeline: session, name, head, sealed.
type Head = (SessionId, BranchName, Option<NodeHash>, bool);

/// The store's state as a checkpoint records it, before signing.
#[derive(Clone, Debug)]
struct State {
    cursor: u64,
    nodes: u64,
    log: Digest,
    facts: u64,
    facts_head: Option<Digest>,
    heads: Vec<Head>,
}

fn log_start() -> Digest {
    sha256(b"convo.log.v1")
}

fn log_step(prev: &Digest, seq: u64, hash: &[u8]) -> Digest {
    let mut b = Vec::with_capacity(72);
    b.extend_from_slice(&prev.0);
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(hash);
    sha256(&b)
}

fn heads_digest(heads: &[Head]) -> Digest {
    let mut b = b"convo.heads.v1".to_vec();
    for (s, n, h, sealed) in heads {
        b.extend_from_slice(s.as_bytes());
        b.extend_from_slice(&(n.as_str().len() as u64).to_le_bytes());
        b.extend_from_slice(n.as_str().as_bytes());
        match h {
            None => b.push(0),
            Some(h) => {
                b.push(1);
                b.extend_from_slice(h.as_bytes());
            }
        }
        b.push(u8::from(*sealed));
    }
    sha256(&b)
}

#[allow(clippy::too_many_arguments)]
fn statement(
    time: Millis,
    cursor: u64,
    nodes: u64,
    log: &Digest,
    facts: u64,
    facts_head: Option<&Digest>,
    heads: &Digest,
) -> Vec<u8> {
    let mut b = CHECKPOINT_TAG_V1.to_vec();
    b.extend_from_slice(&time.to_le_bytes());
    b.extend_from_slice(&cursor.to_le_bytes());
    b.extend_from_slice(&nodes.to_le_bytes());
    b.extend_from_slice(&log.0);
    b.extend_from_slice(&facts.to_le_bytes());
    match facts_head {
        None => b.push(0),
        Some(h) => {
            b.push(1);
            b.extend_from_slice(&h.0);
        }
    }
    b.extend_from_slice(&heads.0);
    b
}

fn state_in(tx: &mut dyn Tx) -> Result<State> {
    let mut log = log_start();
    let mut nodes = 0u64;
    let mut cursor = 0u64;
    tx.scan_node_hashes(&mut |seq, h| {
        log = log_step(&log, seq, h);
        nodes += 1;
        cursor = cursor.max(seq);
        Ok(())
    })?;
    let (facts, facts_head) = match tx.last_fact()? {
        Some((n, h)) => (n, Some(h)),
        None => (0, None),
    };
    let mut heads: Vec<_> = tx
        .branches(None)?
        .into_iter()
        .map(|b| (b.session, b.name, b.head, b.sealed))
        .collect();
    heads.sort_by(|a, b| (a.0.to_string(), a.1.as_str()).cmp(&(b.0.to_string(), b.1.as_str())));
    Ok(State {
        cursor,
        nodes,
        log,
        facts,
        facts_head,
        heads,
    })
}

fn hex32(s: &str, what: &str) -> std::result::Result<Digest, String> {
    Digest::from_hex(s).map_err(|_| format!("its {what} is not 64 hex digits"))
}

impl Checkpoint {
    /// The signed statement's bytes, recomputed from the fields.
    fn statement(&self) -> std::result::Result<Vec<u8>, String> {
        let fh = self
            .facts_head
            .as_deref()
            .map(|h| hex32(h, "facts_head"))
            .transpose()?;
        Ok(statement(
            self.time,
            self.cursor,
            self.nodes,
            &hex32(&self.log, "log")?,
            self.facts,
            fh.as_ref(),
            &hex32(&self.heads_digest, "heads_digest")?,
        ))
    }

    fn parsed_heads(&self) -> std::result::Result<Vec<Head>, String> {
        self.heads
            .iter()
            .map(|h| {
                Ok((
                    SessionId::parse(&h.session)
                        .map_err(|_| format!("session `{}` is malformed", h.session))?,
                    BranchName::new(&h.branch)
                        .map_err(|_| format!("branch `{}` is invalid", h.branch))?,
                    h.head
                        .as_deref()
                        .map(|x| hex32(x, "head").map(NodeHash))
                        .transpose()?,
                    h.sealed,
                ))
            })
            .collect()
    }

    /// Checks the signature, the heads digest and the format, and returns
    /// the public key that signed it.
    pub fn check_signature(&self) -> std::result::Result<VerifyingKey, String> {
        if self.format != "convo.checkpoint.v1" {
            return Err(format!(
                "its format is `{}`, not convo.checkpoint.v1",
                self.format
            ));
        }
        let heads = self.parsed_heads()?;
        if heads_digest(&heads).to_hex() != self.heads_digest {
            return Err("its heads do not hash to its heads_digest".into());
        }
        let key: [u8; 32] = hex::decode(&self.key)
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or("its key is not 32 bytes of hex")?;
        let key = VerifyingKey::from_bytes(&key).map_err(|e| format!("its key is invalid: {e}"))?;
        let sig: [u8; 64] = hex::decode(&self.signature)
            .ok()
            .and_then(|k| k.try_into().ok())
            .ok_or("its signature is not 64 bytes of hex")?;
        key.verify_strict(&self.statement()?, &Signature::from_bytes(&sig))
            .map_err(|_| {
                "its signature does not verify: the checkpoint was altered or forged".to_owned()
            })?;
        Ok(key)
    }
}

/// A 32-byte Ed25519 secret key (the seed), as kept in a key file.
pub fn signing_key(seed: &[u8; 32]) -> SigningKey {
    SigningKey::from_bytes(seed)
}

/// Problems `object: reason` found by comparing the store with a checkpoint.
fn problem(out: &mut Vec<Problem>, object: String, reason: String) {
    out.push(Problem { object, reason });
}

/// Whether `ancestor` is `from` or one of its ancestors (walked by parent,
/// stopping at `ancestor`'s depth).
fn descends(tx: &mut dyn Tx, from: &NodeHash, ancestor: &NodeHash, depth: u64) -> Result<bool> {
    let mut cur = Some(*from);
    while let Some(h) = cur {
        if h == *ancestor {
            return Ok(true);
        }
        let Some(n) = tx.node(&h)? else {
            return Ok(false);
        };
        if n.ctx.depth <= depth {
            return Ok(false);
        }
        cur = n.node.parent;
    }
    Ok(false)
}

impl Store {
    /// Takes a checkpoint of the store, signed with `key`, at `now`.
    pub fn checkpoint(&mut self, key: &SigningKey, now: Millis) -> Result<Checkpoint> {
        let st = self.read(state_in)?;
        let hd = heads_digest(&st.heads);
        let msg = statement(
            now,
            st.cursor,
            st.nodes,
            &st.log,
            st.facts,
            st.facts_head.as_ref(),
            &hd,
        );
        let sig = key.sign(&msg);
        Ok(Checkpoint {
            format: "convo.checkpoint.v1".into(),
            time: now,
            cursor: st.cursor,
            nodes: st.nodes,
            log: st.log.to_hex(),
            facts: st.facts,
            facts_head: st.facts_head.map(|h| h.to_hex()),
            heads_digest: hd.to_hex(),
            heads: st
                .heads
                .iter()
                .map(|(s, n, h, sealed)| HeadEntry {
                    session: s.to_string(),
                    branch: n.to_string(),
                    head: h.map(|h| h.to_hex()),
                    sealed: *sealed,
                })
                .collect(),
            key: hex::encode(key.verifying_key().to_bytes()),
            signature: hex::encode(sig.to_bytes()),
        })
    }

    /// Proves that the store still extends `cp` (whose signature the caller
    /// checked): the first `cp.cursor` nodes hash to its log, the journal
    /// still holds its facts, and every head it names is still in the store
    /// with its branch moved only forward along its chain, or sealed or
    /// renamed by a promote recorded after it. Returns what was rolled
    /// back, truncated or rewritten, each on the object it concerns.
    pub fn check_checkpoint(&mut self, cp: &Checkpoint) -> Result<Vec<Problem>> {
        let heads = cp.parsed_heads().map_err(StoreError::Invalid)?;
        let want_log = hex32(&cp.log, "log").map_err(StoreError::Invalid)?;
        self.read(|tx| {
            let mut out = Vec::new();
            let mut log = log_start();
            let (mut count, mut upto, mut last) = (0u64, 0u64, 0u64);
            tx.scan_node_hashes(&mut |seq, h| {
                count += 1;
                last = last.max(seq);
                if seq <= cp.cursor {
                    log = log_step(&log, seq, h);
                    upto += 1;
                }
                Ok(())
            })?;
            if count < cp.nodes || last < cp.cursor {
                problem(
                    &mut out,
                    "store".into(),
                    format!(
                        "truncated: it holds {count} nodes up to follow number {last}, the checkpoint of {} saw {} up to {}",
                        crate::checkpoint::time(cp.time),
                        cp.nodes,
                        cp.cursor
                    ),
                );
            } else if log != want_log || upto != cp.nodes {
                problem(
                    &mut out,
                    "store".into(),
                    format!(
                        "rewritten: nodes 1..={} no longer hash to the checkpoint's log: a node was removed, replaced or reordered",
                        cp.cursor
                    ),
                );
            }
            match tx.last_fact()? {
                Some((n, _)) if n < cp.facts => problem(
                    &mut out,
                    "fact journal".into(),
                    format!("truncated: {n} facts, the checkpoint saw {}", cp.facts),
                ),
                None if cp.facts > 0 => problem(
                    &mut out,
                    "fact journal".into(),
                    format!("truncated: no facts, the checkpoint saw {}", cp.facts),
                ),
                _ => {
                    if let Some(want) = &cp.facts_head {
                        let rows = tx.facts()?;
                        let at = rows.into_iter().flatten().find(|f| f.seq == cp.facts);
                        if at.is_none_or(|f| hex::encode(&f.hash) != *want) {
                            problem(
                                &mut out,
                                "fact journal".into(),
                                format!("rewritten: fact {} is not the one the checkpoint saw", cp.facts),
                            );
                        }
                    }
                }
            }
            for (sid, name, head, _sealed) in &heads {
                let object = format!("branch {sid}/{name}");
                let Some(h) = head else { continue };
                let Some(then) = tx.node(h)? else {
                    problem(
                        &mut out,
                        object,
                        format!("its head at the checkpoint, {h}, is no longer in the store: its history was truncated or rewritten"),
                    );
                    continue;
                };
                let rows = tx.branches(Some(sid))?;
                let now = rows.iter().find(|b| &b.name == name);
                if let Some(b) = now
                    && let Some(nh) = b.head
                    && descends(tx, &nh, h, then.ctx.depth)?
                {
                    continue;
                }
                // Moved through a promote recorded after the checkpoint:
                // the timeline lives on under its new name.
                let mut promoted = false;
                for b in &rows {
                    let Some(nh) = b.head else { continue };
                    if b.name == *name || !descends(tx, &nh, h, then.ctx.depth)? {
                        continue;
                    }
                    let renamed = tx.session_nodes(sid, false)?.into_iter().any(|(n, _)| {
                        n.seq > cp.cursor
                            && n.node.kind == Kind::Promote
                            && n.node.event.as_ref().is_some_and(|e| {
                                (e.branch == *name && b.name.is_main())
                                    || (name.is_main() && e.sealed_as.as_ref() == Some(&b.name))
                            })
                    });
                    if renamed {
                        promoted = true;
                        break;
                    }
                }
                if promoted {
                    continue;
                }
                let reason = match now.and_then(|b| b.head) {
                    None if now.is_none() => format!("deleted: the checkpoint saw it at {h}, no promote renamed it"),
                    None => format!("rolled back: its head was {h} at the checkpoint and is now none"),
                    Some(nh) => {
                        let back = descends(tx, h, &nh, 0)?;
                        if back {
                            let d = tx.node(&nh)?.map_or(0, |n| n.ctx.depth);
                            format!(
                                "rolled back: its head was {h} at the checkpoint and is now {nh}, {} node(s) earlier on the same chain",
                                then.ctx.depth.saturating_sub(d)
                            )
                        } else {
                            format!("rewritten: its head is {nh}, which does not descend from {h}, its head at the checkpoint")
                        }
                    }
                };
                problem(&mut out, object, reason);
            }
            Ok(out)
        })
    }
}

/// RFC 3339 UTC, for messages.
pub(crate) fn time(ms: Millis) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}
