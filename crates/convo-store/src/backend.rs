//! The storage interface every backend implements.
//!
//! A backend only knows how to read and write rows inside a transaction.
//! Everything that decides *what* to write (timeline rules, hashing, the
//! state trie, sealing, verification) lives once in [`crate::Store`], so two
//! backends cannot drift apart: they differ only in SQL.

use crate::{Result, StoreError};
use convo_core::state::{StateError, StateNodes};
use convo_core::timeline::Context;
use convo_core::{
    BranchName, ContentHash, Digest, HashPrefix, Kind, Millis, Node, NodeHash, SessionId,
    StateRoot, SubmissionId, TimelineEvent,
};

/// A session row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    /// `ses-{uuid}`.
    pub id: SessionId,
    /// The agent the session talks to.
    pub agent: String,
    /// An optional human title.
    pub title: Option<String>,
    /// Creation time.
    pub created_at: Millis,
}

/// A branch (timeline) row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchRow {
    /// The session.
    pub session: SessionId,
    /// The branch's current name.
    pub name: BranchName,
    /// The newest node; `None` before the first node of a session.
    pub head: Option<NodeHash>,
    /// The working state root: what the next `complete` carries.
    pub state: Option<StateRoot>,
    /// Sealed timelines refuse appends.
    pub sealed: bool,
    /// Creation time.
    pub created_at: Millis,
}

/// A node as stored: its fields, its hash, its place in the follow order
/// and its derived context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredNode {
    /// Store-wide append sequence number (the follow cursor), from 1, gap-free.
    pub seq: u64,
    /// The hash as stored (verify recomputes it from `node`).
    pub hash: NodeHash,
    /// The hashed fields.
    pub node: Node,
    /// The derived context.
    pub ctx: Context,
}

/// Nodes `first..=last` (follow numbers) all belong to `session`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRun {
    /// The first node's follow number.
    pub first: u64,
    /// The last node's follow number.
    pub last: u64,
    /// Their session.
    pub session: SessionId,
}

/// A row of the fact journal as stored: verify recomputes `hash` from
/// `body` (the fact's v1 encoding, [`convo_core::fact`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FactRow {
    /// 1, 2, 3…: the chain's order.
    pub seq: u64,
    /// The stored hash.
    pub hash: Vec<u8>,
    /// The stored encoding.
    pub body: Vec<u8>,
}

/// A node's place in its session's tree: see [`crate::tx::NodeTx::session_links`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The node.
    pub hash: NodeHash,
    /// Its parent.
    pub parent: Option<NodeHash>,
    /// Its kind.
    pub kind: Kind,
    /// Nodes from the session's first node to it, inclusive (stored).
    pub depth: u64,
    /// Its turn number (stored), `None` outside any turn (a fork or
    /// promote between turns): see [`crate::turns`].
    pub turn: Option<u64>,
}

impl Link {
    /// A link from a node's stored columns.
    pub(crate) fn of(
        hash: NodeHash,
        parent: Option<NodeHash>,
        kind: Kind,
        depth: u64,
        turn: u64,
        open: bool,
    ) -> Link {
        let inside = turn > 0 && (open || kind == Kind::Complete);
        Link {
            hash,
            parent,
            kind,
            depth,
            turn: inside.then_some(turn),
        }
    }
}

/// A node and its payload bytes.
pub type NodeWithPayload = (StoredNode, Vec<u8>);

/// A node with its payload if one was asked for and read.
pub(crate) type NodeRead = (StoredNode, Option<Vec<u8>>);

/// A row, or why it does not decode.
pub type Decoded<T> = std::result::Result<T, String>;

/// A row of the redaction index: the erased digest and its fact's number.
pub type RedactionRow = Decoded<(Vec<u8>, u64)>;

/// Called with each node row, or why it does not decode.
pub type NodeVisitor<'a> = dyn FnMut(std::result::Result<StoredNode, String>) -> Result<()> + 'a;

/// Called with each blob's address and bytes.
pub type BlobVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// Called with each payload's address and its bytes, or why they cannot
/// be assembled (a chunk missing, damaged or not where its index says).
pub type PayloadVisitor<'a> =
    dyn FnMut(&[u8], std::result::Result<Scanned<'_>, String>) -> Result<()> + 'a;

/// A payload as [`Tx::scan_blobs`] gives it.
#[derive(Clone, Copy, Debug)]
pub enum Scanned<'a> {
    /// Its bytes as stored whole, not checked against its address.
    Unchecked(&'a [u8]),
    /// Its bytes, assembled from its chunks and hashed against its address
    /// (a reader that checks addresses need not hash them again).
    Checked(&'a [u8]),
    /// Its length: a chunked payload whose chunks hashed to its address as
    /// they were read, its bytes not kept (a scan without `keep`).
    Hashed(u64),
}

impl Scanned<'_> {
    /// Its bytes, unless the scan did not keep them.
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Scanned::Unchecked(b) | Scanned::Checked(b) => Some(b),
            Scanned::Hashed(_) => None,
        }
    }

    /// Its length in bytes.
    pub fn size(&self) -> u64 {
        match self {
            Scanned::Unchecked(b) | Scanned::Checked(b) => b.len() as u64,
            Scanned::Hashed(n) => *n,
        }
    }
}

/// The first bytes of a payload and its full length.
pub type Preview = (Vec<u8>, u64);

/// A diagnostics field of `complete` nodes that threading keys are looked
/// up by ([`crate::tx::NodeTx::complete_by_thread`]; indexed by SQLite migration 0009 and
/// PostgreSQL migration 0007).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadField {
    /// `thread`: the hash of the conversation up to that turn.
    Thread,
    /// `thread_response`: the Responses API answer's id.
    Response,
    /// `thread_conversation`: the Responses API conversation's id.
    Conversation,
}

impl ThreadField {
    /// The field's name in the diagnostics.
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadField::Thread => "thread",
            ThreadField::Response => "thread_response",
            ThreadField::Conversation => "thread_conversation",
        }
    }
}

/// A branch with its head node, as [`crate::tx::BranchTx::branch_with_head`] reads it.
pub type BranchHead = (BranchRow, Option<StoredNode>);

/// Session rows.
#[allow(missing_docs)]
pub trait SessionTx {
    fn insert_session(&mut self, s: &SessionRow) -> Result<()>;

    fn session(&mut self, id: &SessionId) -> Result<Option<SessionRow>>;

    fn sessions(&mut self) -> Result<Vec<SessionRow>>;

    fn set_session_title(&mut self, id: &SessionId, title: Option<&str>) -> Result<()>;
}

/// Branch rows: heads moved by compare-and-swap, renames, sealing.
#[allow(missing_docs)]
pub trait BranchTx: NodeTx {
    fn branch(&mut self, s: &SessionId, name: &BranchName) -> Result<Option<BranchRow>>;

    /// Branches of one session, or of every session when `s` is `None`.
    fn branches(&mut self, s: Option<&SessionId>) -> Result<Vec<BranchRow>>;

    /// A branch with its head node (`None` before its first node), in one
    /// read where the backend can: what an append needs first.
    fn branch_with_head(
        &mut self,
        s: &SessionId,
        name: &BranchName,
    ) -> Result<Option<(BranchRow, Option<StoredNode>)>> {
        let Some(b) = self.branch(s, name)? else {
            return Ok(None);
        };
        let head = match &b.head {
            None => None,
            Some(h) => Some(self.node(h)?.ok_or_else(|| {
                crate::StoreError::corrupt(format!("head {h} of `{}` is missing", b.name))
            })?),
        };
        Ok(Some((b, head)))
    }

    /// [`crate::tx::BranchTx::branch_with_head`] for several branches, in one read where
    /// the backend can (group commit's batches); one answer per key, in order.
    fn branches_with_heads(
        &mut self,
        keys: &[(SessionId, BranchName)],
    ) -> Result<Vec<Option<BranchHead>>> {
        keys.iter()
            .map(|(s, name)| self.branch_with_head(s, name))
            .collect()
    }

    fn insert_branch(&mut self, b: &BranchRow) -> Result<()>;

    /// Compare-and-swap of a branch head: moves it to `new` only if it is
    /// still `old`, and says whether it did.
    fn cas_head(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        old: Option<&NodeHash>,
        new: &NodeHash,
    ) -> Result<bool>;

    fn set_branch_state(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        state: Option<&StateRoot>,
    ) -> Result<()>;

    fn rename_branch(
        &mut self,
        s: &SessionId,
        from: &BranchName,
        to: &BranchName,
        sealed: bool,
    ) -> Result<()>;

    /// Every turn a harness has open (session, branch, the turn as JSON):
    /// a row from the turn's invoke to its complete (see [`crate::OpenTurn`]).
    fn open_turns(&mut self) -> Result<Vec<(SessionId, BranchName, String)>>;
    /// Records (`Some`) or removes (`None`) the open turn of a timeline.
    fn set_open_turn(&mut self, s: &SessionId, b: &BranchName, turn: Option<&str>) -> Result<()>;
}

/// Node rows and the follow sequence.
#[allow(missing_docs)]
pub trait NodeTx: BlobTx {
    /// Appends a node and returns its follow sequence number (the previous
    /// maximum plus one, so the sequence has no gaps).
    fn insert_node(&mut self, hash: &NodeHash, node: &Node, ctx: &Context) -> Result<u64>;

    fn node(&mut self, h: &NodeHash) -> Result<Option<StoredNode>>;

    /// The newest `complete` whose diagnostics hold `value` at `field`
    /// (indexed: the recording proxy's threading, convo-proxy thread.rs).
    fn complete_by_thread(&mut self, field: ThreadField, value: &str) -> Result<Option<NodeHash>>;
    /// Up to `limit` node hashes starting with `p`.
    fn nodes_with_prefix(&mut self, p: &HashPrefix, limit: usize) -> Result<Vec<NodeHash>>;

    /// Every node of a session in follow order, with payload bytes if asked.
    fn session_nodes(
        &mut self,
        s: &SessionId,
        payloads: bool,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>>;

    /// Every node of a session in follow order, without payloads, given
    /// to `f` one at a time: a reader that keeps a little of each node
    /// (an import's re-read of a grown transcript keeps each message's key)
    /// holds only that, not the session. SQLite streams the rows; the
    /// default reads them all first.
    fn each_session_node(
        &mut self,
        s: &SessionId,
        f: &mut dyn FnMut(StoredNode) -> Result<()>,
    ) -> Result<()> {
        for (n, _) in self.session_nodes(s, false)? {
            f(n)?;
        }
        Ok(())
    }

    /// Every node of a session in follow order as a [`Link`] (hash, parent
    /// and kind only): enough to walk a timeline and number its turns
    /// without decoding whole rows.
    fn session_links(&mut self, s: &SessionId) -> Result<Vec<Link>> {
        Ok(self
            .session_nodes(s, false)?
            .into_iter()
            .map(|(n, _)| {
                Link::of(
                    n.hash,
                    n.node.parent,
                    n.node.kind,
                    n.ctx.depth,
                    n.ctx.turn,
                    n.ctx.open,
                )
            })
            .collect())
    }

    /// The links of a session's nodes whose depth is in `lo..=hi`, in no
    /// particular order: a stretch of every timeline of the session.
    fn session_links_at(&mut self, s: &SessionId, lo: u64, hi: u64) -> Result<Vec<Link>> {
        let mut all = self.session_links(s)?;
        all.retain(|l| (lo..=hi).contains(&l.depth));
        Ok(all)
    }

    /// The nodes with these hashes, in this order, without their payloads
    /// (`None` for a hash not stored).
    fn nodes_by_hash(&mut self, hashes: &[NodeHash]) -> Result<Vec<Option<StoredNode>>> {
        hashes.iter().map(|h| self.node(h)).collect()
    }

    /// The nodes with these hashes, in this order, each with its payload
    /// (`None` for a hash not stored, or a node whose payload is missing).
    fn nodes_with_payloads(&mut self, hashes: &[NodeHash]) -> Result<Vec<Option<NodeWithPayload>>> {
        let mut out = Vec::with_capacity(hashes.len());
        for h in hashes {
            let found = match self.node(h)? {
                Some(n) => self.blob(&n.node.payload)?.map(|p| (n, p)),
                None => None,
            };
            out.push(found);
        }
        Ok(out)
    }

    /// The nodes with these follow numbers, in follow order (a number no
    /// node has is left out), each with its payload bytes if asked (`None`
    /// where they are missing), in one query: what a search reads of its
    /// matches.
    fn nodes_at(
        &mut self,
        seqs: &[u64],
        payloads: bool,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>>;

    /// Up to `limit` nodes with `seq > after`, in follow order.
    fn nodes_since(&mut self, after: u64, limit: usize) -> Result<Vec<StoredNode>>;

    /// The newest follow number (0 when the store has no node).
    fn max_seq(&mut self) -> Result<u64>;

    /// Calls `f` on every node in follow order; a row that does not decode
    /// is passed as `Err(what)` so a scan can report it and go on.
    fn scan_nodes(&mut self, f: &mut NodeVisitor<'_>) -> Result<()>;

    /// The highest follow number (0 for an empty store).
    fn last_seq(&mut self) -> Result<u64>;

    /// Calls `f` on every node's follow number and stored hash bytes, in
    /// follow order (checkpoints).
    fn scan_node_hashes(&mut self, f: &mut dyn FnMut(u64, &[u8]) -> Result<()>) -> Result<()>;
}

/// Payload bytes by content hash (chunked from a size on; see [`crate::chunk`]).
#[allow(missing_docs)]
pub trait BlobTx {
    /// The SHA-256 of a payload about to be stored. A backend may resume
    /// it from a payload it hashed before that starts with the same bytes
    /// ([`crate::chunk::Recent`]); the digest is the same either way.
    fn payload_hash(&mut self, bytes: &[u8]) -> ContentHash {
        convo_core::hash::content_hash(bytes)
    }

    /// Stores bytes under their hash; a no-op when already present. From
    /// [`crate::chunk::CHUNKED_FROM`] bytes on, the bytes are stored in
    /// content-defined chunks, each once (see [`crate::chunk`]).
    fn put_blob(&mut self, h: &ContentHash, bytes: &[u8]) -> Result<()>;

    /// The bytes stored under a hash, assembled from their chunks if they
    /// were chunked.
    fn blob(&mut self, h: &ContentHash) -> Result<Option<Vec<u8>>>;

    /// For each hash, the first `max` bytes stored under it and the full
    /// length, without reading the rest (`None` where nothing is stored):
    /// what a one-line preview needs from a payload of any size.
    fn blob_previews(&mut self, hashes: &[ContentHash], max: usize)
    -> Result<Vec<Option<Preview>>>;

    /// Calls `f` on every blob's address and bytes, a chunked one hashed
    /// against its address as it is read and, with `keep`, assembled (see
    /// [`crate::chunk::scan_chunked`]; without, only its length is given).
    fn scan_blobs(&mut self, keep: bool, f: &mut PayloadVisitor<'_>) -> Result<()>;

    /// Calls `f` on every payload chunk's address and bytes as stored
    /// (index chunks included; see [`crate::chunk`]).
    fn scan_chunks(&mut self, f: &mut BlobVisitor<'_>) -> Result<()>;

    /// Removes the bytes stored under a content hash (redaction), with the
    /// chunks no other payload names; says whether there were any.
    fn delete_blob(&mut self, h: &ContentHash) -> Result<bool>;

    /// Whether payloads stored whole before chunking are left to chunk in
    /// place (set by the schema migration that found some).
    fn rechunk_pending(&mut self) -> Result<bool>;

    /// Chunks up to `max` of them after row `after` in place
    /// ([`crate::chunk::rechunk`]); the last row looked at, `None` (and
    /// nothing pending any more) when none is left.
    fn rechunk(&mut self, after: i64, max: usize) -> Result<Option<i64>>;
}

/// The state trie's nodes by digest.
#[allow(missing_docs)]
pub trait StateTx {
    fn put_state_node(&mut self, h: &Digest, body: &[u8]) -> Result<()>;

    fn state_node(&mut self, h: &Digest) -> Result<Option<Vec<u8>>>;

    /// Calls `f` on every state trie node's address and body.
    fn scan_state_nodes(&mut self, f: &mut BlobVisitor<'_>) -> Result<()>;
}

/// The fact chain (see [`convo_core::fact`]).
#[allow(missing_docs)]
pub trait FactTx {
    /// Appends fact row `seq` (see [`convo_core::fact`]).
    fn insert_fact(&mut self, seq: u64, hash: &Digest, body: &[u8]) -> Result<()>;

    /// The newest fact's number and stored hash.
    fn last_fact(&mut self) -> Result<Option<(u64, Digest)>>;

    /// Every fact row in chain order.
    fn facts(&mut self) -> Result<Vec<Decoded<FactRow>>>;
}

/// One OTLP export body kept by the receiver (see
/// `convo_llm::otel::raw`, which encodes and decodes `residual`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpExportRow {
    /// Its number, from 1, in the order received.
    pub seq: u64,
    /// The sessions its calls belong to.
    pub sessions: Vec<SessionId>,
    /// When it was received.
    pub received_at: Millis,
    /// What it is: `traces` or `logs`, `/`, `protobuf` or `json`.
    pub media: String,
    /// The export whose body `residual` is a delta against, if any.
    pub base: Option<u64>,
    /// The follow numbers of the nodes the export wrote, if any (first
    /// and last): `residual` refers to their payloads (unless the body is
    /// kept whole), and their diagnostics to the body.
    pub nodes: Option<(u64, u64)>,
    /// The body's length in bytes.
    pub body_len: u64,
    /// The body, delta-encoded.
    pub residual: Vec<u8>,
}

/// The OTLP export bodies kept by the receiver.
pub trait TelemetryTx {
    /// Keeps `row` (its `seq` is ignored) as the next export; its number.
    fn insert_otlp_export(&mut self, row: &OtlpExportRow) -> Result<u64>;

    /// Keeps `row` under its own number (copying a store).
    fn put_otlp_export(&mut self, row: &OtlpExportRow) -> Result<()>;

    /// The exports with a call in `session` (every export when `None`),
    /// in the order received.
    fn otlp_exports(&mut self, session: Option<&SessionId>) -> Result<Vec<OtlpExportRow>>;

    /// Export `seq`.
    fn otlp_export(&mut self, seq: u64) -> Result<Option<OtlpExportRow>>;

    /// Removes export `seq` (a redaction).
    fn delete_otlp_export(&mut self, seq: u64) -> Result<()>;
}

/// The import index of coding agents' transcripts (`import_keys`,
/// `import_tails`, `import_files`): derived rows a re-import reads instead of the
/// session's nodes. Not hashed; `migrate` copies them (a session without
/// them is re-read whole once, which writes them again).
pub trait ImportTx {
    /// The node a session's key (a message key, or a record's id leading
    /// to that message) names.
    fn import_key(&mut self, s: &SessionId, key: &str) -> Result<Option<NodeHash>>;

    /// Sets keys (a key set again names its new node).
    fn put_import_keys(&mut self, s: &SessionId, keys: &[(String, NodeHash)]) -> Result<()>;

    /// Where a session's stored lines end, as the importer wrote it.
    fn import_tail(&mut self, s: &SessionId) -> Result<Option<String>>;

    /// Sets [`ImportTx::import_tail`].
    fn set_import_tail(&mut self, s: &SessionId, tail: &str) -> Result<()>;

    /// How each transcript file looked when its import committed
    /// (`import_files`: path → the importer's text), every row.
    fn import_files(&mut self) -> Result<Vec<(String, String)>>;

    /// Sets [`ImportTx::import_files`] rows (a path set again takes the
    /// new look).
    fn put_import_files(&mut self, files: &[(String, String)]) -> Result<()>;

    /// Every row of the index, keys, tails then file looks, one at a time
    /// (`migrate`).
    fn scan_import_index(&mut self, f: &mut dyn FnMut(ImportRow) -> Result<()>) -> Result<()>;
}

/// A row of the import index ([`ImportTx::scan_import_index`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportRow {
    /// A key of a session and the node it names.
    Key(SessionId, String, NodeHash),
    /// A session's tail.
    Tail(SessionId, String),
    /// How a file looked when its import committed.
    File(String, String),
}

/// An `otlp_exports` row from its columns (seq, sessions, received_at,
/// media, base, nodes_from, nodes_to, body_len, residual).
pub(crate) fn otlp_export_row(r: &impl Columns) -> std::result::Result<OtlpExportRow, String> {
    let int = |i: usize, what: &str| -> std::result::Result<Option<u64>, String> {
        r.int(i)?
            .map(|v| u64::try_from(v).map_err(|_| format!("its {what} {v} is negative")))
            .transpose()
    };
    let seq = int(0, "number")?.ok_or("its number is NULL")?;
    let sessions = r
        .text(1)?
        .ok_or("its sessions are NULL")?
        .split_whitespace()
        .map(|s| {
            s.parse::<SessionId>()
                .map_err(|e| format!("session `{s}`: {e}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let nodes = match (int(5, "first node")?, int(6, "last node")?) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    Ok(OtlpExportRow {
        seq,
        sessions,
        received_at: r.int(2)?.ok_or("its time is NULL")?,
        media: r.text(3)?.ok_or("its media is NULL")?.to_owned(),
        base: int(4, "base")?,
        nodes,
        body_len: int(7, "length")?.ok_or("its length is NULL")?,
        residual: r.bytes(8)?.ok_or("its residual is NULL")?.to_vec(),
    })
    .map_err(|e: String| format!("OTLP export {seq}: {e}"))
}

/// `sessions` as stored: each id between spaces (so `LIKE '% id %'` finds one).
pub(crate) fn otlp_sessions_col(sessions: &[SessionId]) -> String {
    let mut s = String::from(" ");
    for id in sessions {
        s.push_str(&id.to_string());
        s.push(' ');
    }
    s
}

/// The full-text search index (see [`crate::search`]).
#[allow(missing_docs)]
pub trait SearchTx {
    /// The search index's cursor: every node with a follow number up to
    /// it has been indexed (see [`crate::search`]).
    fn search_cursor(&mut self) -> Result<u64>;

    /// Adds documents (follow number, the words of its payload) to the
    /// search index and moves its cursor to `cursor`.
    fn search_add(&mut self, docs: &[(u64, Vec<String>)], cursor: u64) -> Result<()>;

    /// Empties the search index and sets its cursor to 0.
    fn search_clear(&mut self) -> Result<()>;

    /// Drops from the search index every node whose payload is `h`
    /// (redaction: the index must not keep the erased words).
    fn search_forget(&mut self, h: &ContentHash) -> Result<()>;

    /// Indexed nodes matching every term and condition, best first, as
    /// (follow number, score: higher is better).
    fn search_match(&mut self, q: &crate::search::IndexQuery<'_>) -> Result<Vec<(u64, f64)>>;
}

/// The redaction index: which fact erased which digest.
#[allow(missing_docs)]
pub trait RedactionTx {
    /// Indexes redaction fact `fact` under the digest it erased.
    fn insert_redaction(&mut self, h: &ContentHash, fact: u64) -> Result<()>;

    /// The number and encoding of the redaction fact indexed under `h`, if any.
    fn redaction(&mut self, h: &ContentHash) -> Result<Option<(u64, Vec<u8>)>>;

    /// Every row of the redaction index, `(digest, fact number)`, each
    /// decoded on its own (verify).
    fn redaction_rows(&mut self) -> Result<Vec<RedactionRow>>;

    /// Replaces node `h`'s stored diagnostics (their redaction: the node
    /// keeps its hash, which a redaction fact names).
    fn set_node_diagnostics(&mut self, h: &NodeHash, diagnostics: &str) -> Result<()>;

    /// Replaces fact `seq`'s stored encoding (a title's redaction: the fact
    /// keeps its hash, which a redaction fact names).
    fn set_fact_body(&mut self, seq: u64, body: &[u8]) -> Result<()>;
}

/// Raw rows for verify, each decoded on its own, and the engine's own checks.
#[allow(missing_docs)]
pub trait CheckTx {
    /// For a backend that indexes a session's nodes by runs of follow
    /// numbers (SQLite's `session_runs`): every run, ordered by `first`, or
    /// why a run row does not decode; so verify can check that each node is
    /// listed under its own session. `None` for a backend without runs.
    fn session_runs(&mut self) -> Result<Option<Vec<std::result::Result<SessionRun, String>>>> {
        Ok(None)
    }

    /// Every session row, each decoded on its own, so one bad row does not
    /// hide the others (verify).
    fn session_rows(&mut self) -> Result<Vec<Decoded<SessionRow>>>;

    /// Every branch row, each decoded on its own (verify).
    fn branch_rows(&mut self) -> Result<Vec<Decoded<BranchRow>>>;

    /// Problems the database engine itself finds (SQLite: a schema that
    /// is not the one its version names and, with `structure`, `PRAGMA
    /// quick_check`). Empty for a backend without such a check.
    fn engine_check(&mut self, _structure: bool) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
}

/// Row-level operations inside one transaction: every concern's trait.
///
/// Reads see the transaction's snapshot; writes become visible at commit.
/// A backend implements each concern's trait; [`Tx`] follows.
pub trait Tx:
    SessionTx
    + BranchTx
    + NodeTx
    + BlobTx
    + StateTx
    + FactTx
    + SearchTx
    + RedactionTx
    + TelemetryTx
    + ImportTx
    + CheckTx
{
}

impl<
    T: ?Sized
        + SessionTx
        + BranchTx
        + NodeTx
        + BlobTx
        + StateTx
        + FactTx
        + SearchTx
        + RedactionTx
        + TelemetryTx
        + ImportTx
        + CheckTx,
> Tx for T
{
}

/// A store backend: hands out transactions.
pub trait Backend: Send {
    /// Runs `f` in a write transaction and commits it. If `f` or the commit
    /// fails with a retryable error (lock contention, a lost
    /// compare-and-swap), the transaction is rolled back and `f` runs again,
    /// a bounded number of times. Any other error rolls back and returns.
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()>;
    /// Runs `f` in a read transaction (one consistent snapshot).
    fn read(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()>;
    /// `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;
    /// Makes deleted rows unrecoverable from the database's files (after a
    /// redaction): SQLite empties its WAL, merges the search index's
    /// segments (FTS5 `optimize`, which drops a forgotten row's words),
    /// rewrites the file (`VACUUM`) and empties the WAL again; PostgreSQL
    /// rewrites `blobs`, `search_index` and `pg_statistic` (`VACUUM FULL`).
    /// Returns what it could not do, if anything (another connection held
    /// the WAL open).
    fn erase_freed(&mut self) -> Result<Option<String>> {
        Ok(None)
    }
    /// [`Backend::erase_freed`] after rows were rewritten in place (a
    /// node's diagnostics, a title in a session and its facts): PostgreSQL
    /// also rewrites `nodes`, `facts` and `sessions`, whose old row
    /// versions hold the erased bytes; SQLite's `VACUUM` rewrites every
    /// table anyway.
    fn erase_rewritten(&mut self) -> Result<Option<String>> {
        self.erase_freed()
    }
    /// Bytes of large payloads this connection ran through SHA-256, and
    /// through FastCDC, since it was opened ([`crate::chunk::Recent`]:
    /// what recording a growing conversation costs; tests read it).
    fn payload_work(&self) -> (u64, u64) {
        (0, 0)
    }
    /// The engine's own housekeeping (SQLite's WAL and integrity), for a
    /// backend that has any; `None` (PostgreSQL) when there is nothing to do.
    fn maintenance(&mut self) -> Option<&mut dyn Maintenance> {
        None
    }
    /// Blocks until another process may have appended a node, or `timeout`
    /// passes. Backends without notifications just sleep a little.
    fn wait_for_append(&mut self, timeout: std::time::Duration) -> Result<()> {
        std::thread::sleep(timeout.min(std::time::Duration::from_millis(100)));
        Ok(())
    }
}

/// The engine's structural check running apart: the problems it found.
pub type StructureCheck = std::thread::JoinHandle<Result<Vec<String>>>;

/// An engine's own housekeeping that only some backends have (SQLite's
/// write-ahead log and integrity state), apart from the row operations and
/// transactions every backend shares: reached through
/// [`Backend::maintenance`].
pub trait Maintenance {
    /// Leaves the write-ahead log as it is when the store is closed instead
    /// of checkpointing it into the database file (SQLite: a short-lived
    /// writer then costs no fsync at exit; the log is folded in by a later
    /// writer's automatic checkpoint). Nothing to do elsewhere.
    fn keep_log_on_close(&mut self) -> Result<()> {
        Ok(())
    }
    /// Folds the write-ahead log into the database file and empties it
    /// (SQLite: `wal_checkpoint(TRUNCATE)`), as a server does when it
    /// stops: no log is left beside the database. Busy (another
    /// connection reading) is an error; nothing to do elsewhere.
    fn fold_log(&mut self) -> Result<()> {
        Ok(())
    }
    /// Told what the engine's own check found by a full verify: `Some(why)`
    /// when the database is damaged, `None` when it is sound. A backend may
    /// then refuse writes until it is sound again (SQLite does).
    fn record_health(&mut self, _damaged: Option<&str>) {}
    /// Starts the engine's structural check (SQLite: `quick_check`) on a
    /// connection and a thread of its own, for verify to run beside its
    /// own scans; `None` where it cannot (a database in memory), and
    /// verify runs it in its transaction.
    fn structure_check_apart(&mut self) -> Option<StructureCheck> {
        None
    }
    /// Takes the engine's periodic housekeeping off this connection's
    /// commits, for a connection that writes on a latency-sensitive path.
    /// SQLite turns off its WAL auto-checkpoint here (which otherwise runs
    /// inside one commit in every few hundred, copying the WAL into the
    /// database and syncing it) and returns the checkpoints as work for
    /// another thread: a `PASSIVE` checkpoint on a connection of its own
    /// once this connection's commits leave 1,000 pages in the WAL
    /// (SQLite's default threshold), then after every 500 more. The WAL
    /// starts again from its beginning only when a write begins with every
    /// page checkpointed, which a writer that never pauses may not allow:
    /// should the WAL reach 4,000 pages, the commit checkpoints inline (the
    /// pages left since the last checkpoint) as SQLite would by default, so
    /// the WAL stays bounded. Durability is unchanged: a commit is durable
    /// when it is in the WAL, checkpointed or not. `None` when there is
    /// nothing to move (PostgreSQL, an in-memory SQLite store).
    fn defer_checkpoints(&mut self) -> Result<Option<Background>> {
        Ok(None)
    }
    /// How long a write waits for a lock another connection holds before
    /// it fails with `Busy` ([`RETRY_BUDGET`] by default): zero for a
    /// writer that waits out a locked store itself and must know at once
    /// (the proxy's recordings). SQLite's busy timeout; PostgreSQL's
    /// `lock_timeout`.
    fn busy_wait(&mut self, _budget: std::time::Duration) -> Result<()> {
        Ok(())
    }
}

/// Work a backend asks to run on a thread of its own (see
/// [`Maintenance::defer_checkpoints`]).
pub struct Background(Box<dyn FnOnce() + Send>);

impl Background {
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Background(Box::new(f))
    }

    /// Does the work; returns once the connection that asked for it is
    /// closed.
    pub fn run(self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Background")
    }
}

/// How long a transaction waits out lock contention before giving up.
pub(crate) const RETRY_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);
/// How many lost compare-and-swaps a transaction retries.
pub(crate) const MAX_CONFLICTS: u32 = 100;

/// Runs `attempt` (one whole transaction) again while it fails with a
/// retryable error: lock contention (`Busy`) for up to [`RETRY_BUDGET`],
/// with a short jittered sleep, and a lost compare-and-swap (`Conflict`) up
/// to [`MAX_CONFLICTS`] times. Shared by every backend so they retry alike.
/// An `open_turns` row read back (a name that does not parse is corrupt).
pub(crate) fn open_turn_row(
    session: &str,
    branch: &str,
    turn: String,
) -> Result<(SessionId, BranchName, String)> {
    let s = SessionId::parse(session)
        .map_err(|e| StoreError::corrupt(format!("open turn of session `{session}`: {e}")))?;
    let b = BranchName::new(branch)
        .map_err(|e| StoreError::corrupt(format!("open turn of branch `{branch}`: {e}")))?;
    Ok((s, b, turn))
}

pub(crate) fn retrying(
    budget: std::time::Duration,
    mut attempt: impl FnMut() -> Result<()>,
) -> Result<()> {
    let start = std::time::Instant::now();
    let mut conflicts = 0;
    loop {
        match attempt() {
            Err(crate::StoreError::Busy(_)) if start.elapsed() < budget => {
                let jitter = (start.elapsed().as_micros() % 7_000) as u64;
                std::thread::sleep(std::time::Duration::from_micros(2_000 + jitter));
            }
            Err(crate::StoreError::Conflict(_)) if conflicts < MAX_CONFLICTS => conflicts += 1,
            Err(crate::StoreError::Conflict(_)) => {
                return Err(crate::StoreError::Conflict(conflicts + 1));
            }
            other => return other,
        }
    }
}

/// Read access to the columns of one stored row, in each backend's own
/// column types. Values are borrowed from the row: decoding copies only the
/// strings a node owns.
pub(crate) trait Columns {
    /// A BLOB / BYTEA column.
    fn bytes(&self, i: usize) -> std::result::Result<Option<&[u8]>, String>;
    /// A TEXT column.
    fn text(&self, i: usize) -> std::result::Result<Option<&str>, String>;
    /// An integer column of any width.
    fn int(&self, i: usize) -> std::result::Result<Option<i64>, String>;
    /// A boolean (or 0/1 integer) column.
    fn flag(&self, i: usize) -> std::result::Result<bool, String>;
}

/// The columns of a node row, in this order, on every backend.
pub(crate) const NODE_COLS: &str = "seq, hash, session, parent, kind, submission, sequence, sender, recipient, \
     payload, payload_len, diagnostics, state, created_at, ev_branch, ev_sealed, ev_nonce, \
     depth, ctx_sub, ctx_open, ctx_seq, ctx_state, ctx_turn";

/// How many columns [`NODE_COLS`] names (a column read after them is this one).
pub(crate) const NODE_COL_COUNT: usize = 23;

/// Decodes a node row ([`NODE_COLS`]) and checks every value's shape: hash
/// lengths, a known kind, non-negative counts, sequences that fit, valid
/// branch names, a 16-byte nonce. One decoder for every backend, so a
/// tampered row reads the same (as `Corrupt`) whatever stores it.
pub(crate) fn decode_node(r: &impl Columns) -> std::result::Result<StoredNode, String> {
    fn need<T>(v: Option<T>, what: &str) -> std::result::Result<T, String> {
        v.ok_or_else(|| format!("a stored {what} is NULL"))
    }
    let opt_digest = |i| -> std::result::Result<Option<Digest>, String> {
        r.bytes(i)?
            .map(|b| {
                Digest::from_slice(b).ok_or_else(|| "a stored hash is not 32 bytes".to_owned())
            })
            .transpose()
    };
    let digest = |i| need(opt_digest(i)?, "hash");
    let unsigned = |i, what| {
        u64::try_from(need(r.int(i)?, what)?).map_err(|_| format!("a stored {what} is negative"))
    };
    let sequence =
        |v: i64| u32::try_from(v).map_err(|_| "a stored sequence is out of range".to_owned());
    let branch =
        |s: &str| BranchName::new(s).map_err(|_| "a stored branch name is invalid".to_owned());
    let owned = |i, what| need(r.text(i)?, what).map(str::to_owned);

    let kind = u8::try_from(need(r.int(4)?, "kind")?)
        .ok()
        .and_then(Kind::from_code)
        .ok_or("a stored node kind is unknown")?;
    let event = match r.text(14)? {
        None => None,
        Some(b) => Some(TimelineEvent {
            branch: branch(b)?,
            sealed_as: r.text(15)?.map(branch).transpose()?,
            nonce: r
                .bytes(16)?
                .unwrap_or_default()
                .try_into()
                .map_err(|_| "a stored nonce is not 16 bytes")?,
        }),
    };
    let session = need(r.text(2)?, "session id")?;
    Ok(StoredNode {
        seq: unsigned(0, "follow number")?,
        hash: NodeHash(digest(1)?),
        node: Node {
            parent: opt_digest(3)?.map(NodeHash),
            kind,
            session: SessionId::parse(session).map_err(|_| "a stored session id is malformed")?,
            submission: opt_digest(5)?.map(SubmissionId),
            sequence: r.int(6)?.map(sequence).transpose()?,
            from: owned(7, "sender")?,
            to: owned(8, "recipient")?,
            payload: ContentHash(digest(9)?),
            payload_len: unsigned(10, "payload length")?,
            diagnostics: convo_core::Diagnostics::from_stored(owned(11, "diagnostics")?),
            state: opt_digest(12)?.map(StateRoot),
            created_at: need(r.int(13)?, "creation time")?,
            event,
        },
        ctx: Context {
            depth: unsigned(17, "depth")?,
            submission: opt_digest(18)?.map(SubmissionId),
            open: r.flag(19)?,
            last_sequence: sequence(need(r.int(20)?, "sequence")?)?,
            state: opt_digest(21)?.map(StateRoot),
            turn: unsigned(22, "turn number")?,
        },
    })
}

/// Adapts a transaction to the state trie's node source (the ledger's, and
/// the benchmarks' that preload large states in one transaction).
pub struct TxNodes<'a>(pub &'a mut dyn Tx);

impl std::fmt::Debug for TxNodes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TxNodes")
    }
}

impl StateNodes for TxNodes<'_> {
    type Error = StoreError;
    fn load(&mut self, hash: &Digest) -> Result<Option<Vec<u8>>> {
        self.0.state_node(hash)
    }
    fn save(&mut self, hash: &Digest, body: &[u8]) -> Result<()> {
        self.0.put_state_node(hash, body)
    }
}

/// A state-trie error as a store error (the backend's own error passed on).
pub fn state_err(e: StateError<StoreError>) -> StoreError {
    match e {
        StateError::Backend(e) => e,
        other => StoreError::State(crate::Cause::from_error(other)),
    }
}
