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
use crate::{Problem, ProblemKind, Result, Store, StoreError};
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
    if hash.len() == 32 {
        // The usual case, without an allocation per node.
        let mut b = [0u8; 72];
        b[..32].copy_from_slice(&prev.0);
        b[32..40].copy_from_slice(&seq.to_le_bytes());
        b[40..].copy_from_slice(hash);
        return sha256(&b);
    }
    let mut b = Vec::with_capacity(40 + hash.len());
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

/// Where a log chain stands: after follow number `cursor`, over `nodes`
/// nodes.
#[derive(Clone, Copy, Debug)]
struct LogAt {
    cursor: u64,
    nodes: u64,
    log: Digest,
}

/// The store's state; with `base`, the log chain goes on from it over the
/// nodes appended after its cursor only (the nodes up to it are taken as
/// `base` saw them, not read again).
fn state_in(tx: &mut dyn Tx, base: Option<LogAt>) -> Result<State> {
    let (mut log, mut nodes, mut cursor) = match base {
        Some(b) => (b.log, b.nodes, b.cursor),
        None => (log_start(), 0, 0),
    };
    if base.is_none() {
        tx.scan_node_hashes(&mut |seq, h| {
            log = log_step(&log, seq, h);
            nodes += 1;
            cursor = cursor.max(seq);
            Ok(())
        })?;
    } else {
        loop {
            let page = tx.nodes_since(cursor, 10_000)?;
            let Some(last) = page.last().map(|n| n.seq) else {
                break;
            };
            for n in &page {
                log = log_step(&log, n.seq, n.hash.as_bytes());
                nodes += 1;
            }
            cursor = last;
        }
    }
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
/// Problems `object: reason` found by comparing the store with a checkpoint.
fn problem(out: &mut Vec<Problem>, kind: ProblemKind, object: String, reason: String) {
    out.push(Problem::new(kind, object, reason));
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
        self.checkpoint_after(key, now, None)
    }

    /// Like [`Store::checkpoint`]; with `base`, a checkpoint this process
    /// took of this store earlier, the log chain goes on from `base`'s over
    /// the nodes appended since (what an automatic checkpointer does:
    /// O(new nodes), not O(store)). Nodes up to `base.cursor` are not read
    /// again, so a rewrite of them since is not laundered into the new
    /// checkpoint: verifying against either one reports it. Fails when the
    /// store now ends before `base.cursor` (it was truncated).
    pub fn checkpoint_after(
        &mut self,
        key: &SigningKey,
        now: Millis,
        base: Option<&Checkpoint>,
    ) -> Result<Checkpoint> {
        let base = match base {
            None => None,
            Some(b) => Some(LogAt {
                cursor: b.cursor,
                nodes: b.nodes,
                log: hex32(&b.log, "log").map_err(|m| StoreError::Invalid(m.into()))?,
            }),
        };
        let st = self.read(|tx| {
            if let Some(b) = base {
                let end = tx.max_seq()?;
                if end < b.cursor {
                    return Err(StoreError::Invalid(format!(
                        "the store ends at follow number {end}, before the previous checkpoint's \
                         cursor {}: it was truncated (check it with `convo verify --checkpoint`)",
                        b.cursor
                    ).into()));
                }
            }
            state_in(tx, base)
        })?;
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
    /// checked): see [`Store::check_checkpoints`].
    pub fn check_checkpoint(&mut self, cp: &Checkpoint) -> Result<Vec<Problem>> {
        Ok(self
            .check_checkpoints(std::slice::from_ref(cp))?
            .pop()
            .unwrap_or_default())
    }

    /// Proves that the store still extends each of `cps` (whose signatures
    /// the caller checked): the first `cp.cursor` nodes hash to its log,
    /// the journal still holds its facts, and every head it names is still
    /// in the store with its branch moved only forward along its chain, or
    /// sealed or renamed by a promote recorded after it. Returns, for each
    /// checkpoint in the order given, what was rolled back, truncated or
    /// rewritten, each on the object it concerns.
    ///
    /// One pass over the node hashes serves every checkpoint, and a head
    /// named by several checkpoints is checked once; walking back along a
    /// branch starts from the newest head already proven on its chain, so
    /// a directory of thousands of automatic checkpoints costs about one.
    pub fn check_checkpoints(&mut self, cps: &[Checkpoint]) -> Result<Vec<Vec<Problem>>> {
        let mut parsed = Vec::with_capacity(cps.len());
        for cp in cps {
            let heads = cp
                .parsed_heads()
                .map_err(|m| StoreError::Invalid(m.into()))?;
            let log = hex32(&cp.log, "log").map_err(|m| StoreError::Invalid(m.into()))?;
            parsed.push((heads, log));
        }
        // Newest first, so that older heads are found walking back from
        // newer ones already proven.
        let mut order: Vec<usize> = (0..cps.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse((cps[i].cursor, cps[i].time)));
        self.read(|tx| {
            let mut out: Vec<Vec<Problem>> = vec![Vec::new(); cps.len()];
            let nodes = NodeLog::scan(tx, cps)?;
            let fact_rows = if cps.iter().any(|cp| cp.facts_head.is_some()) {
                tx.facts()?
                    .into_iter()
                    .flatten()
                    .map(|f| (f.seq, f.hash))
                    .collect::<std::collections::HashMap<_, _>>()
            } else {
                Default::default()
            };
            let last_fact = tx.last_fact()?.map(|(n, _)| n);
            let mut heads_proven = Proven::default();
            for &i in &order {
                let cp = &cps[i];
                let (heads, want_log) = &parsed[i];
                let out = &mut out[i];
                nodes.check(out, cp, i, want_log);
                check_journal(out, cp, last_fact, &fact_rows);
                heads_proven.check(tx, out, cp, heads)?;
            }
            Ok(out)
        })
    }
}

/// The node log as the store holds it: how many nodes, the last follow
/// number, and the log chain (with the nodes counted) at each
/// checkpoint's cursor.
struct NodeLog {
    count: u64,
    last: u64,
    at: Vec<Option<(Digest, u64)>>,
}

impl NodeLog {
    /// The log chain at each of `cps`' cursors, in one scan of the node
    /// hashes.
    fn scan(tx: &mut dyn Tx, cps: &[Checkpoint]) -> Result<NodeLog> {
        let mut want: Vec<(u64, usize)> = (0..cps.len()).map(|i| (cps[i].cursor, i)).collect();
        want.sort_unstable();
        let mut at: Vec<Option<(Digest, u64)>> = vec![None; cps.len()];
        let mut log = log_start();
        let (mut count, mut last, mut next) = (0u64, 0u64, 0usize);
        while next < want.len() && want[next].0 == 0 {
            at[want[next].1] = Some((log, 0));
            next += 1;
        }
        tx.scan_node_hashes(&mut |seq, h| {
            count += 1;
            last = last.max(seq);
            if next < want.len() {
                log = log_step(&log, seq, h);
                while next < want.len() && want[next].0 <= seq {
                    // Exactly at the cursor, or past it: a node at the
                    // cursor is missing, which the log then shows.
                    let (c, i) = want[next];
                    if c == seq {
                        at[i] = Some((log, count));
                    }
                    next += 1;
                }
            }
            Ok(())
        })?;
        Ok(NodeLog { count, last, at })
    }

    /// Whether the store still holds the nodes checkpoint `cp` (the `i`th
    /// scanned, whose log is `want_log`) saw, unchanged.
    fn check(&self, out: &mut Vec<Problem>, cp: &Checkpoint, i: usize, want_log: &Digest) {
        let (count, last) = (self.count, self.last);
        if count < cp.nodes || last < cp.cursor {
            problem(
                out,
                ProblemKind::Truncated,
                "store".into(),
                format!(
                    "truncated: it holds {count} nodes up to follow number {last}, the checkpoint of {} saw {} up to {}",
                    crate::checkpoint::time(cp.time),
                    cp.nodes,
                    cp.cursor
                ),
            );
        } else if self.at[i].is_none_or(|(l, n)| l != *want_log || n != cp.nodes) {
            problem(
                out,
                ProblemKind::Rewritten,
                "store".into(),
                format!(
                    "rewritten: nodes 1..={} no longer hash to the checkpoint's log: a node was removed, replaced or reordered",
                    cp.cursor
                ),
            );
        }
    }
}

/// Whether the fact journal (`last_fact` facts, the hashes of `fact_rows`)
/// still holds the facts checkpoint `cp` saw, unchanged.
fn check_journal(
    out: &mut Vec<Problem>,
    cp: &Checkpoint,
    last_fact: Option<u64>,
    fact_rows: &std::collections::HashMap<u64, Vec<u8>>,
) {
    match last_fact {
        Some(n) if n < cp.facts => problem(
            out,
            ProblemKind::Truncated,
            "fact journal".into(),
            format!("truncated: {n} facts, the checkpoint saw {}", cp.facts),
        ),
        None if cp.facts > 0 => problem(
            out,
            ProblemKind::Truncated,
            "fact journal".into(),
            format!("truncated: no facts, the checkpoint saw {}", cp.facts),
        ),
        _ => {
            if let Some(want) = &cp.facts_head
                && fact_rows
                    .get(&cp.facts)
                    .is_none_or(|h| hex::encode(h) != *want)
            {
                problem(
                    out,
                    ProblemKind::Rewritten,
                    "fact journal".into(),
                    format!(
                        "rewritten: fact {} is not the one the checkpoint saw",
                        cp.facts
                    ),
                );
            }
        }
    }
}

/// Heads already proven still extended (checked once for every checkpoint
/// naming them) and, per timeline, the deepest node known to be on its
/// chain now.
#[derive(Default)]
struct Proven {
    heads: std::collections::HashSet<(SessionId, BranchName, NodeHash)>,
    anchor: std::collections::HashMap<(SessionId, BranchName), (NodeHash, u64)>,
}

impl Proven {
    /// Whether the store still extends each head checkpoint `cp` names.
    fn check(
        &mut self,
        tx: &mut dyn Tx,
        out: &mut Vec<Problem>,
        cp: &Checkpoint,
        heads: &[Head],
    ) -> Result<()> {
        for (sid, name, head, _sealed) in heads {
            let Some(h) = head else { continue };
            if self.heads.contains(&(*sid, name.clone(), *h)) {
                continue;
            }
            match check_head(tx, cp, sid, name, h, &mut self.anchor)? {
                None => {
                    self.heads.insert((*sid, name.clone(), *h));
                }
                Some((kind, reason)) => problem(out, kind, format!("branch {sid}/{name}"), reason),
            }
        }
        Ok(())
    }
}

/// Checks one head a checkpoint names against the store: `None` when its
/// timeline still extends it, else why not.
fn check_head(
    tx: &mut dyn Tx,
    cp: &Checkpoint,
    sid: &SessionId,
    name: &BranchName,
    h: &NodeHash,
    anchor: &mut std::collections::HashMap<(SessionId, BranchName), (NodeHash, u64)>,
) -> Result<Option<(ProblemKind, String)>> {
    let Some(then) = tx.node(h)? else {
        return Ok(Some((
            ProblemKind::Truncated,
            format!(
                "its head at the checkpoint, {h}, is no longer in the store: its history was truncated or rewritten"
            ),
        )));
    };
    let key = (*sid, name.clone());
    let rows = tx.branches(Some(sid))?;
    let now = rows.iter().find(|b| &b.name == name);
    if let Some(b) = now
        && let Some(nh) = b.head
    {
        // Walk back from the deepest node already proven on this chain
        // (when it is deeper than `h`), else from the head.
        let from = match anchor.get(&key) {
            Some((a, d)) if *d >= then.ctx.depth => *a,
            _ => nh,
        };
        if descends(tx, &from, h, then.ctx.depth)? {
            anchor.insert(key, (*h, then.ctx.depth));
            return Ok(None);
        }
        if from != nh && descends(tx, &nh, h, then.ctx.depth)? {
            return Ok(None);
        }
    }
    if renamed(tx, cp, sid, name, &rows, (h, then.ctx.depth))? {
        return Ok(None);
    }
    let now = now.map(|b| b.head);
    moved(tx, h, then.ctx.depth, now).map(Some)
}

/// Whether timeline `name` lives on under another name (one of `rows`,
/// which descends from `h` at `depth`), moved through a promote recorded
/// after checkpoint `cp`.
fn renamed(
    tx: &mut dyn Tx,
    cp: &Checkpoint,
    sid: &SessionId,
    name: &BranchName,
    rows: &[crate::backend::BranchRow],
    (h, depth): (&NodeHash, u64),
) -> Result<bool> {
    for b in rows {
        let Some(nh) = b.head else { continue };
        if b.name == *name || !descends(tx, &nh, h, depth)? {
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
            return Ok(true);
        }
    }
    Ok(false)
}

/// Why a timeline no longer extends `h` (at `depth`), its head at the
/// checkpoint: `now`, its row's head (`None`: no row any more).
fn moved(
    tx: &mut dyn Tx,
    h: &NodeHash,
    depth: u64,
    now: Option<Option<NodeHash>>,
) -> Result<(ProblemKind, String)> {
    Ok(match now {
        None => (
            ProblemKind::Truncated,
            format!("deleted: the checkpoint saw it at {h}, no promote renamed it"),
        ),
        Some(None) => (
            ProblemKind::Truncated,
            format!("rolled back: its head was {h} at the checkpoint and is now none"),
        ),
        Some(Some(nh)) => {
            if descends(tx, h, &nh, 0)? {
                let d = tx.node(&nh)?.map_or(0, |n| n.ctx.depth);
                (
                    ProblemKind::Truncated,
                    format!(
                        "rolled back: its head was {h} at the checkpoint and is now {nh}, {} node(s) earlier on the same chain",
                        depth.saturating_sub(d)
                    ),
                )
            } else {
                (
                    ProblemKind::Rewritten,
                    format!(
                        "rewritten: its head is {nh}, which does not descend from {h}, its head at the checkpoint"
                    ),
                )
            }
        }
    })
}

/// RFC 3339 UTC, for messages.
pub(crate) fn time(ms: Millis) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(|_| format!("{ms} ms"), |t| t.to_string())
}
