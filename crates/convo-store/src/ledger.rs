//! The ledger: what to write for each operation, shared by every backend.

use crate::backend::{Backend, BranchRow, SessionRow, StoredNode, Tx};
use crate::backend::{TxNodes, state_err};
use crate::chain::{TimelineNode, chain_in, chain_stretch, open_branch, resolve_in};
use crate::facts::append_fact;
use crate::redact::payload_in;
use crate::{Result, StoreError};
use convo_core::fact::Fact;
use convo_core::hash::content_hash;
use convo_core::state;
use convo_core::timeline::{Context, sealed_name};
use convo_core::{
    BranchName, ContentHash, Diagnostics, HashPrefix, Kind, Millis, Node, NodeHash, SessionId,
    StateRoot, TimelineEvent,
};
use std::borrow::Cow;

/// A message to append, before the ledger places it on a timeline.
#[derive(Clone, Debug)]
pub struct Draft {
    /// invoke, request, response or complete.
    pub kind: Kind,
    /// Sender.
    pub from: String,
    /// Recipient.
    pub to: String,
    /// The message body.
    pub payload: Vec<u8>,
    /// Diagnostics (a canonical JSON object).
    pub diagnostics: Diagnostics,
    /// For a complete: the state root to carry instead of the branch's.
    pub state: Option<StateRoot>,
    /// For a response: which request it answers (default: the last one).
    pub sequence: Option<u32>,
    /// When it was recorded.
    pub created_at: Millis,
}

/// What a promote did.
#[derive(Clone, Debug)]
pub struct Promoted {
    /// The promote node, now the head of `main`.
    pub node: StoredNode,
    /// The name the old `main` was sealed under.
    pub sealed_as: BranchName,
}

/// A node on a timeline with the start of its payload: see
/// [`Store::timeline_previews`].
#[derive(Clone, Debug)]
pub struct PreviewNode {
    /// The node.
    pub stored: StoredNode,
    /// The first bytes of its payload (at most the `max` asked for).
    pub head: Vec<u8>,
    /// The payload's full length in bytes.
    pub len: u64,
}

/// One turn, read whole: see [`Store::turn`].
#[derive(Clone, Debug)]
pub struct TurnView {
    /// Its number on the timeline (1-based).
    pub number: usize,
    /// Whether it has its complete.
    pub complete: bool,
    /// Its nodes, the invoke first.
    pub nodes: Vec<TimelineNode>,
}

/// The store: reads, each one transaction, and [`Store::transaction`],
/// the one way to write. Every write goes through a [`Ledger`] inside a
/// transaction, so one append and an import of a thousand nodes use the
/// same code and commit whole or not at all:
///
/// ```
/// use convo_store::Store;
/// let mut store = Store::open("sqlite::memory:")?;
/// let session = store.transaction(|l| l.new_session("my-agent", Some("demo"), 0))?;
/// assert_eq!(store.find_session("demo")?.id, session.id);
/// # Ok::<(), convo_store::StoreError>(())
/// ```
pub struct Store {
    backend: Box<dyn Backend>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.backend.kind())
    }
}

/// Payloads chunked in place per transaction when an old store is opened
/// (see [`Store::open_with`]).
const RECHUNK_BATCH: usize = 64;

/// How a store is opened: reads never create or change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// The store must exist; SQLite files are opened read-only.
    Read,
    /// The store is created (file, directory, schema) if it does not exist.
    Write,
}

fn nonce() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

impl Store {
    /// Wraps a backend.
    pub fn new(backend: Box<dyn Backend>) -> Self {
        Store { backend }
    }

    /// Opens the store at `url` for writing, creating it if needed:
    /// `sqlite:///path/to/convo.db`, `sqlite::memory:`, a plain file path,
    /// or `postgres://user@host:port/db`. See [`Store::open_as`].
    pub fn open(url: &str) -> Result<Self> {
        Store::open_as(url, Access::Write)
    }

    /// Opens the store at `url` with `access`. Any other `scheme://` is
    /// [`StoreError::UnknownScheme`] (never a file named like the URL). An
    /// existing SQLite file that is not a convo store is refused untouched
    /// ([`StoreError::NotAStore`]). [`Access::Read`] never creates a store
    /// ([`StoreError::NoStore`]) and opens SQLite files read-only.
    pub fn open_as(url: &str, access: Access) -> Result<Self> {
        Store::open_with(&crate::Backends::default(), url, access)
    }

    /// Opens the store at `url` through the backend `backends` registers
    /// for its scheme (see [`crate::Backends`]).
    pub fn open_with(backends: &crate::Backends, url: &str, access: Access) -> Result<Self> {
        let mut store = Store::new(backends.open(url, access)?);
        if access == Access::Write {
            store.rechunk_whole_payloads()?;
        }
        Ok(store)
    }

    /// The schema migration's second half, for a store made before
    /// payloads were chunked: its large payloads stored whole are chunked
    /// in place, [`RECHUNK_BATCH`] per transaction (a kill loses nothing,
    /// the next writer to open the store goes on), then the space they
    /// held is returned ([`Backend::erase_freed`]: VACUUM). A no-op, one
    /// read, once done or for a store made since.
    fn rechunk_whole_payloads(&mut self) -> Result<()> {
        let mut pending = false;
        self.backend.read(&mut |tx| {
            pending = tx.rechunk_pending()?;
            Ok(())
        })?;
        if !pending {
            return Ok(());
        }
        let mut after = 0i64;
        loop {
            let mut last = None;
            self.backend.write(&mut |tx| {
                last = tx.rechunk(after, RECHUNK_BATCH)?;
                Ok(())
            })?;
            match last {
                Some(id) => after = id,
                None => break,
            }
        }
        self.backend.erase_freed().map(drop)
    }

    pub(crate) fn backend_mut(&mut self) -> &mut dyn Backend {
        &mut *self.backend
    }

    /// Leaves SQLite's write-ahead log in place when this handle closes
    /// (no checkpoint, no fsync at exit): for short-lived writers such as
    /// one `convo say`. The log stays next to the database file (`-wal`,
    /// `-shm`) until it passes 1 MiB, when a short writer's close folds
    /// it in, so a copy of the store must take all three files (or use
    /// `convo migrate`). A no-op on PostgreSQL.
    pub fn keep_log_on_close(&mut self) -> Result<()> {
        match self.backend.maintenance() {
            Some(m) => m.keep_log_on_close(),
            None => Ok(()),
        }
    }

    /// Folds SQLite's write-ahead log into the database file and empties
    /// it (see [`crate::backend::Maintenance::fold_log`]); a no-op on
    /// PostgreSQL.
    pub fn fold_log(&mut self) -> Result<()> {
        match self.backend.maintenance() {
            Some(m) => m.fold_log(),
            None => Ok(()),
        }
    }

    /// How long this connection's writes wait for a lock another holds
    /// before failing with `Busy` (see
    /// [`crate::backend::Maintenance::busy_wait`]): SQLite's busy timeout,
    /// PostgreSQL's `lock_timeout`.
    pub fn busy_wait(&mut self, budget: std::time::Duration) -> Result<()> {
        match self.backend.maintenance() {
            Some(m) => m.busy_wait(budget),
            None => Ok(()),
        }
    }

    /// Moves WAL checkpoints off this connection's commits; the work
    /// returned runs them and belongs on a thread of its own (see
    /// [`crate::backend::Maintenance::defer_checkpoints`]).
    pub fn defer_checkpoints(&mut self) -> Result<Option<crate::Background>> {
        match self.backend.maintenance() {
            Some(m) => m.defer_checkpoints(),
            None => Ok(None),
        }
    }

    /// The backend's name.
    pub fn kind(&self) -> &'static str {
        self.backend.kind()
    }

    /// Bytes of large payloads hashed, and cut, by this connection since
    /// it was opened (see [`crate::backend::Backend::payload_work`]).
    pub fn payload_work(&self) -> (u64, u64) {
        self.backend.payload_work()
    }

    /// Runs `f` in one write transaction, with the backend's retries.
    pub fn write<T>(&mut self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let mut out = None;
        self.backend.write(&mut |tx| {
            out = Some(f(tx)?);
            Ok(())
        })?;
        out.ok_or_else(|| StoreError::backend("write finished without a result"))
    }

    /// Runs `f` in one read transaction.
    pub fn read<T>(&mut self, mut f: impl FnMut(&mut dyn Tx) -> Result<T>) -> Result<T> {
        let mut out = None;
        self.backend.read(&mut |tx| {
            out = Some(f(tx)?);
            Ok(())
        })?;
        out.ok_or_else(|| StoreError::backend("read finished without a result"))
    }

    /// Runs `f` against a [`Ledger`] in one write transaction: everything
    /// it does commits together or not at all (an import, say).
    pub fn transaction<T>(&mut self, mut f: impl FnMut(&mut Ledger<'_>) -> Result<T>) -> Result<T> {
        self.write(|tx| f(&mut Ledger { tx }))
    }

    // ----- sessions -------------------------------------------------------

    /// Every session, oldest first.
    pub fn sessions(&mut self) -> Result<Vec<SessionRow>> {
        self.read(|tx| tx.sessions())
    }

    /// Finds a session by full id (`ses-{uuid}`), or else by what matches
    /// `query` either way: a prefix of the id (4 or more hex digits, with
    /// or without `ses-`) or the exact title. One match is the session;
    /// several are an error listing them (so a title that is also an id
    /// prefix stays reachable when nothing else matches, and the full id
    /// always works).
    pub fn find_session(&mut self, query: &str) -> Result<SessionRow> {
        if let Ok(id) = SessionId::parse(query) {
            return self
                .read(|tx| tx.session(&id))?
                .ok_or_else(|| StoreError::NoSession(query.to_owned()));
        }
        let all = self.sessions()?;
        let q = query
            .strip_prefix("ses-")
            .unwrap_or(query)
            .to_ascii_lowercase();
        let hexish = q.len() >= 4 && q.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
        let matches: Vec<&SessionRow> = all
            .iter()
            .filter(|s| {
                s.title.as_deref() == Some(query)
                    || (hexish && s.id.0.hyphenated().to_string().starts_with(&q))
            })
            .collect();
        match matches.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(StoreError::NoSession(query.to_owned())),
            many => Err(StoreError::AmbiguousSession {
                query: query.to_owned(),
                count: many.len(),
                candidates: many
                    .iter()
                    .take(10)
                    .map(|s| match &s.title {
                        Some(t) => format!("{}  {t:?}", s.id),
                        None => s.id.to_string(),
                    })
                    .collect(),
            }),
        }
    }

    /// The session's branches, by name.
    pub fn branches(&mut self, session: &SessionId) -> Result<Vec<BranchRow>> {
        self.read(|tx| tx.branches(Some(session)))
    }

    /// One branch.
    pub fn branch(&mut self, session: &SessionId, name: &BranchName) -> Result<BranchRow> {
        self.read(|tx| open_branch(tx, session, name, false))
    }

    // ----- writes, each one transaction -------------------------------------

    // ----- reads ----------------------------------------------------------

    /// The node with this hash or unique prefix.
    pub fn node(&mut self, prefix: &HashPrefix) -> Result<StoredNode> {
        self.read(|tx| resolve_in(tx, prefix))
    }

    /// Bytes stored under a content hash, or the tombstone of their
    /// redaction.
    pub fn blob(&mut self, h: &ContentHash) -> Result<Option<Vec<u8>>> {
        self.read(|tx| payload_in(tx, h))
    }

    /// The timeline of `branch`, from the session's first node to the head,
    /// with payloads.
    pub fn timeline(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
    ) -> Result<Vec<TimelineNode>> {
        self.read(|tx| timeline_in(tx, session, branch))
    }

    /// Like [`Store::timeline`] (or [`Store::chain`] from `head`), with only
    /// the first `max` bytes of each payload and its length: listings never
    /// load a whole payload.
    pub fn timeline_previews(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        head: Option<&NodeHash>,
        max: usize,
    ) -> Result<Vec<PreviewNode>> {
        self.read(|tx| {
            let head = match head {
                Some(h) => *h,
                None => match open_branch(tx, session, branch, false)?.head {
                    Some(h) => h,
                    None => return Ok(Vec::new()),
                },
            };
            let chain = chain_in(tx, session, head, false)?;
            let hashes: Vec<ContentHash> = chain.iter().map(|n| n.stored.node.payload).collect();
            let mut previews = Vec::with_capacity(hashes.len());
            for part in hashes.chunks(1000) {
                previews.extend(tx.blob_previews(part, max)?);
            }
            chain
                .into_iter()
                .zip(previews)
                .map(|(n, p)| {
                    let (head, len) = match p {
                        Some(p) => p,
                        // A redacted payload previews as its tombstone.
                        None => {
                            let t = payload_in(tx, &n.stored.node.payload)?.ok_or_else(|| {
                                StoreError::corrupt(format!(
                                    "payload of node {} is missing",
                                    n.stored.hash
                                ))
                            })?;
                            let len = t.len() as u64;
                            (t, len)
                        }
                    };
                    Ok(PreviewNode {
                        stored: n.stored,
                        head,
                        len,
                    })
                })
                .collect()
        })
    }

    /// The node a reference names: a hash or unique prefix (4+ hex digits),
    /// `BRANCH`, `BRANCH~N`, `BRANCH@TURN` (see [`crate::refs`] for the grammar).
    pub fn resolve_ref(&mut self, session: &SessionId, text: &str) -> Result<StoredNode> {
        self.read(|tx| crate::refs::resolve_ref_in(tx, session, text))
    }

    /// The nodes from the session's first node to `head` (following
    /// parents), oldest first, with payloads: the timeline as of `head`.
    pub fn chain(&mut self, session: &SessionId, head: &NodeHash) -> Result<Vec<TimelineNode>> {
        self.read(|tx| chain_in(tx, session, *head, true))
    }

    /// The turn a reference points into, with the timeline it belongs to
    /// (from the session's first node to the turn's last node): see
    /// [`crate::turns`]. Fails with `NoNode` when the node is outside any
    /// turn (a fork or promote between turns).
    pub fn turn(&mut self, session: &SessionId, text: &str) -> Result<crate::TurnView> {
        self.read(|tx| {
            let node = crate::refs::resolve_ref_in(tx, session, text)?;
            // The turn may go on past `node` on the branch that holds it: read
            // up to the head of a branch that contains the node when there is one.
            let mut heads = vec![node.hash];
            for b in tx.branches(Some(session))? {
                if let Some(h) = b.head
                    && h != node.hash
                {
                    heads.push(h);
                }
            }
            // Prefer a chain on which the node's turn is finished.
            let mut best = None;
            for h in heads {
                let c = chain_in(tx, session, h, false)?;
                let Some(i) = c.iter().position(|n| n.stored.hash == node.hash) else {
                    continue;
                };
                let kinds: Vec<_> = c.iter().map(|n| n.stored.node.kind).collect();
                let turns = crate::turns::group(&kinds);
                let Some(t) = crate::turns::turn_at(&turns, i).copied() else {
                    return Err(StoreError::NoNode(format!(
                        "{text} (node {} is a {} outside any turn)",
                        node.hash.short(),
                        node.node.kind
                    )));
                };
                let done = t.complete.is_some();
                best = Some((h, t));
                if done {
                    break;
                }
            }
            let (head, turn) = best.ok_or_else(|| StoreError::NoNode(text.to_owned()))?;
            let mut chain = chain_in(tx, session, head, true)?;
            chain.truncate(turn.end);
            let nodes = chain.split_off(turn.start);
            Ok(crate::TurnView {
                number: turn.number,
                complete: turn.complete.is_some(),
                nodes,
            })
        })
    }

    /// One page of the timeline of `branch`: up to `limit` nodes from
    /// position `offset` (0 = the session's first node), with payloads and
    /// turn numbers, and the timeline's length. Whole rows and payloads
    /// are read for the page only: the rest of the timeline costs one pass
    /// over the session's links (hash, parent, kind) to walk the chain and
    /// number its turns.
    pub fn timeline_page(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        offset: usize,
        limit: usize,
    ) -> Result<TimelinePage> {
        self.read(|tx| timeline_page_in(tx, session, branch, Some(offset), limit, true))
    }

    /// Like [`Store::timeline_page`] without reading payloads (each node's
    /// `payload` is left empty): a listing that needs only the nodes costs
    /// nothing for their payloads' size.
    pub fn timeline_page_bare(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        offset: usize,
        limit: usize,
    ) -> Result<TimelinePage> {
        self.read(|tx| timeline_page_in(tx, session, branch, Some(offset), limit, false))
    }

    /// Like [`Store::timeline_page`], for the last `limit` nodes (one pass).
    pub fn timeline_tail(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        limit: usize,
    ) -> Result<TimelinePage> {
        self.read(|tx| timeline_page_in(tx, session, branch, None, limit, true))
    }

    /// The follow number of the newest node (0 for an empty store).
    pub fn end_cursor(&mut self) -> Result<u64> {
        self.read(|tx| tx.max_seq())
    }

    /// Up to `limit` nodes appended after cursor `after`, in append order.
    pub fn follow(&mut self, after: u64, limit: usize) -> Result<Vec<StoredNode>> {
        self.read(|tx| tx.nodes_since(after, limit))
    }

    /// Like [`Store::follow`], with each node's payload, in one snapshot.
    pub fn follow_with_payloads(&mut self, after: u64, limit: usize) -> Result<Vec<TimelineNode>> {
        self.read(|tx| {
            let nodes = tx.nodes_since(after, limit)?;
            nodes
                .into_iter()
                .map(|stored| {
                    let payload = payload_in(tx, &stored.node.payload)?.ok_or_else(|| {
                        StoreError::corrupt(format!("payload of node {} is missing", stored.hash))
                    })?;
                    Ok(TimelineNode { stored, payload })
                })
                .collect()
        })
    }

    /// The state root as of a node (hash or prefix) or, without one, the
    /// branch's working state.
    pub fn state_root(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        at: Option<&HashPrefix>,
    ) -> Result<StateRoot> {
        self.read(|tx| state_root_in(tx, session, branch, at))
    }

    /// The value of `key` in a state version.
    pub fn state_get(&mut self, root: &StateRoot, key: &str) -> Result<Option<Vec<u8>>> {
        self.read(|tx| {
            let Some(vh) = state::get(&mut TxNodes(tx), root, key.as_bytes()).map_err(state_err)?
            else {
                return Ok(None);
            };
            payload_in(tx, &vh)?
                .map(Some)
                .ok_or_else(|| StoreError::corrupt(format!("state value {vh} is missing")))
        })
    }

    /// Every key and value in a state version, sorted by key.
    pub fn state_list(&mut self, root: &StateRoot) -> Result<Vec<(String, Vec<u8>)>> {
        self.read(|tx| {
            let entries = state::list(&mut TxNodes(tx), root).map_err(state_err)?;
            entries
                .into_iter()
                .map(|(k, vh)| {
                    let v = payload_in(tx, &vh)?.ok_or_else(|| {
                        StoreError::corrupt(format!("state value {vh} is missing"))
                    })?;
                    Ok((String::from_utf8_lossy(&k).into_owned(), v))
                })
                .collect()
        })
    }

    /// Blocks until a node may have been appended by another process, or
    /// `timeout` passes (LISTEN/NOTIFY on PostgreSQL, a short sleep on SQLite).
    pub fn wait_for_append(&mut self, timeout: std::time::Duration) -> Result<()> {
        self.backend.wait_for_append(timeout)
    }

    /// Searches payloads (see [`crate::search`]): the index up to its
    /// cursor, then a scan of the nodes appended since. Never writes; call
    /// [`Store::search_update`] first to bring the index up to date.
    pub fn search(
        &mut self,
        req: &crate::search::SearchRequest,
    ) -> Result<crate::search::SearchResults> {
        self.read(|tx| crate::search::search_in(tx, req))
    }

    /// How far the search index is behind the store.
    pub fn search_status(&mut self) -> Result<crate::search::IndexStatus> {
        self.read(|tx| {
            Ok(crate::search::IndexStatus {
                cursor: tx.search_cursor()?,
                end: tx.max_seq()?,
            })
        })
    }

    /// Adds the nodes appended since the index's cursor to the search
    /// index, [`crate::search::BATCH`] nodes per write transaction, calling
    /// `progress(cursor, end)` after each; returns how many nodes it read.
    /// Safe to run from several processes at once: each batch starts from
    /// the cursor it reads under the write lock.
    pub fn search_update(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        let mut total = 0;
        loop {
            let (cursor, n, end) = self.write(|tx| {
                let (c, n) = crate::search::index_batch(tx)?;
                Ok((c, n, tx.max_seq()?))
            })?;
            total += n as u64;
            progress(cursor, end);
            if n == 0 || cursor >= end {
                return Ok(total);
            }
        }
    }

    /// Empties the search index and builds it again from every node.
    pub fn search_reindex(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<u64> {
        self.write(|tx| tx.search_clear())?;
        self.search_update(progress)
    }

    /// Recomputes and checks everything; see [`crate::VerifyReport`].
    /// Problems with the database itself (SQLite's integrity check) are
    /// passed to the backend too, which refuses writes while there are any.
    pub fn verify(&mut self) -> Result<crate::VerifyReport> {
        self.verify_with_progress(&mut |_| {})
    }

    /// [`Store::verify`], telling `progress` how far it got now and then
    /// (for a progress bar).
    pub fn verify_with_progress(
        &mut self,
        progress: &mut dyn FnMut(crate::VerifyProgress),
    ) -> Result<crate::VerifyReport> {
        let apart = self
            .backend
            .maintenance()
            .and_then(|m| m.structure_check_apart());
        let mut r = self.read(|tx| crate::verify::verify(tx, progress, apart.is_some()))?;
        if let Some(check) = apart {
            let found = match check.join() {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => vec![format!("SQLite's integrity check could not run: {e}")],
                Err(_) => vec!["SQLite's integrity check stopped".to_owned()],
            };
            crate::verify::engine_problems(&mut r, found);
        }
        let damaged = r
            .problems
            .iter()
            .find(|p| p.object == crate::verify::DATABASE)
            .map(|p| p.reason.clone());
        if let Some(m) = self.backend.maintenance() {
            m.record_health(damaged.as_deref());
        }
        Ok(r)
    }
}

/// The ledger's operations inside one open write transaction.
///
/// Obtained from [`Store::transaction`]; every method here runs in that
/// transaction and sees what earlier calls wrote.
pub struct Ledger<'t> {
    tx: &'t mut dyn Tx,
}

impl std::fmt::Debug for Ledger<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ledger")
    }
}

impl Ledger<'_> {
    /// The raw transaction, for reads the ledger does not wrap.
    pub fn tx(&mut self) -> &mut dyn Tx {
        self.tx
    }

    /// Creates session `id` with an empty `main`; fails if `id` exists.
    pub fn create_session(
        &mut self,
        id: SessionId,
        agent: &str,
        title: Option<&str>,
        now: Millis,
    ) -> Result<SessionRow> {
        if agent.trim().is_empty() {
            return Err(StoreError::Invalid(
                "an agent name must not be empty".into(),
            ));
        }
        if self.tx.session(&id)?.is_some() {
            return Err(StoreError::Invalid(
                format!("session {id} already exists").into(),
            ));
        }
        let row = SessionRow {
            id,
            agent: agent.to_owned(),
            title: title.map(str::to_owned),
            created_at: now,
        };
        self.tx.insert_session(&row)?;
        append_fact(
            self.tx,
            Fact::Session {
                id,
                agent: row.agent.clone(),
                title: row.title.clone(),
                created_at: now,
            },
        )?;
        self.tx.insert_branch(&BranchRow {
            session: row.id,
            name: BranchName::main(),
            head: None,
            state: None,
            sealed: false,
            created_at: now,
        })?;
        Ok(row)
    }

    /// Puts back a session recorded elsewhere (a recording's header): its
    /// row, journaled as a creation is, and no branch — the caller inserts
    /// the nodes ([`Ledger::insert_exact`]), then the branches as recorded.
    pub fn restore_session(&mut self, row: &SessionRow) -> Result<()> {
        if self.tx.session(&row.id)?.is_some() {
            return Err(StoreError::Invalid(
                format!("session {} already exists", row.id).into(),
            ));
        }
        self.tx.insert_session(row)?;
        append_fact(
            self.tx,
            Fact::Session {
                id: row.id,
                agent: row.agent.clone(),
                title: row.title.clone(),
                created_at: row.created_at,
            },
        )
    }

    /// Inserts a node recorded elsewhere exactly as it was, so it keeps its
    /// hash: its parent must be stored already, the payload must be the
    /// bytes the node names, and a message must sit where an append would
    /// have put it (the same submission and sequence). Fork and promote
    /// nodes keep their event (nonce included).
    pub fn insert_exact(&mut self, node: Node, payload: &[u8]) -> Result<StoredNode> {
        let tx = &mut *self.tx;
        let hash = node.hash();
        if content_hash(payload) != node.payload || payload.len() as u64 != node.payload_len {
            return Err(StoreError::Invalid(
                format!("node {hash}: the payload is not the bytes the node names").into(),
            ));
        }
        node.check_shape().map_err(StoreError::invalid)?;
        let ctx = match &node.parent {
            None => Context::genesis(),
            Some(p) => tx.node(p)?.map(|s| s.ctx).ok_or_else(|| {
                StoreError::Invalid(format!("node {hash}: its parent {p} is not stored").into())
            })?,
        };
        if node.event.is_none() {
            // Only a response names its sequence; a request's is assigned.
            let asked = node.sequence.filter(|_| node.kind == Kind::Response);
            let placed = ctx.place(node.kind, &node.session, &node.payload, asked)?;
            if placed.submission != node.submission || placed.sequence != node.sequence {
                return Err(StoreError::Invalid(
                    format!(
                        "node {hash}: its submission or sequence is not where an append puts it"
                    )
                    .into(),
                ));
            }
        }
        let next = ctx.after(&node);
        tx.put_blob(&node.payload, payload)?;
        let seq = tx.insert_node(&hash, &node, &next)?;
        Ok(StoredNode {
            seq,
            hash,
            node,
            ctx: next,
        })
    }

    /// Creates a session with a new random id and an empty `main`.
    pub fn new_session(
        &mut self,
        agent: &str,
        title: Option<&str>,
        now: Millis,
    ) -> Result<SessionRow> {
        self.create_session(SessionId::new_random(), agent, title, now)
    }

    /// Sets (or with `None` removes) a session's title.
    pub fn retitle(&mut self, session: &SessionId, title: Option<&str>) -> Result<SessionRow> {
        let tx = &mut *self.tx;
        let mut row = tx
            .session(session)?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        tx.set_session_title(session, title)?;
        row.title = title.map(str::to_owned);
        // Journaled like the creation, so verify can tell a retitle
        // from an edit behind convo's back.
        append_fact(
            tx,
            Fact::Session {
                id: row.id,
                agent: row.agent.clone(),
                title: row.title.clone(),
                created_at: row.created_at,
            },
        )?;
        Ok(row)
    }

    /// Appends one message to a branch.
    pub fn append(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        d: &Draft,
    ) -> Result<StoredNode> {
        let tx = &mut *self.tx;
        let (b, ctx) = open_branch_head(tx, session, branch)?;
        let stored = place_and_insert(tx, &b, ctx, Cow::Borrowed(d))?;
        if !tx.cas_head(session, branch, b.head.as_ref(), &stored.hash)? {
            return Err(StoreError::Conflict(1));
        }
        Ok(stored)
    }

    /// Appends several requests' messages, each to its own branch, in
    /// order (group commit): the branches and their heads are read in one
    /// go ([`crate::tx::BranchTx::branches_with_heads`]), each branch's head moves once. One
    /// failing request fails the whole call (the transaction rolls back).
    pub fn append_batch(
        &mut self,
        jobs: &[(SessionId, BranchName, &[Draft])],
    ) -> Result<Vec<Vec<StoredNode>>> {
        let tx = &mut *self.tx;
        let mut keys: Vec<(SessionId, BranchName)> = Vec::new();
        for (s, b, _) in jobs {
            if !keys.iter().any(|(ks, kb)| ks == s && kb == b) {
                keys.push((*s, b.clone()));
            }
        }
        let read = tx.branches_with_heads(&keys)?;
        // Per branch: its row as it moves, its context, its head before.
        let mut open: Vec<(BranchRow, Context, Option<NodeHash>)> = Vec::with_capacity(keys.len());
        for ((s, name), got) in keys.iter().zip(read) {
            let (b, ctx) = match got {
                Some((b, _)) if b.sealed => {
                    return Err(StoreError::Sealed {
                        session: s.to_string(),
                        branch: name.to_string(),
                    });
                }
                Some((b, head)) => {
                    let ctx = head.map_or_else(Context::genesis, |n| n.ctx);
                    (b, ctx)
                }
                // Missing: the single-branch read names what is missing.
                None => open_branch_head(tx, s, name)?,
            };
            let old = b.head;
            open.push((b, ctx, old));
        }
        let mut out = Vec::with_capacity(jobs.len());
        for (s, name, drafts) in jobs {
            let k = keys
                .iter()
                .position(|(ks, kb)| ks == s && kb == name)
                .ok_or_else(|| StoreError::backend("a batch lost a branch"))?;
            let mut nodes = Vec::with_capacity(drafts.len());
            for d in drafts.iter() {
                let (b, ctx, _) = &mut open[k];
                let stored = place_and_insert(tx, b, *ctx, Cow::Borrowed(d))?;
                if d.kind == Kind::Complete && d.state.is_some() {
                    b.state = d.state;
                }
                *ctx = stored.ctx;
                b.head = Some(stored.hash);
                nodes.push(stored);
            }
            out.push(nodes);
        }
        for ((s, name), (b, _, old)) in keys.iter().zip(&open) {
            if let Some(new) = &b.head
                && b.head != *old
                && !tx.cas_head(s, name, old.as_ref(), new)?
            {
                return Err(StoreError::Conflict(1));
            }
        }
        Ok(out)
    }

    /// Appends many messages to a branch, moving its head once.
    pub fn append_many(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        drafts: &[Draft],
    ) -> Result<Vec<NodeHash>> {
        let mut out = Vec::with_capacity(drafts.len());
        self.append_each(
            session,
            branch,
            &mut drafts.iter().map(Cow::Borrowed),
            &mut |s| out.push(s.hash),
        )?;
        Ok(out)
    }

    /// [`Ledger::append_many`], returning the stored nodes.
    pub fn append_many_nodes(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        drafts: &[Draft],
    ) -> Result<Vec<StoredNode>> {
        let mut out = Vec::with_capacity(drafts.len());
        self.append_each(
            session,
            branch,
            &mut drafts.iter().map(Cow::Borrowed),
            &mut |s| out.push(s),
        )?;
        Ok(out)
    }

    /// [`Ledger::append_many_nodes`], taking the drafts: each one's
    /// diagnostics move into its node instead of being copied, and its
    /// payload is dropped once written (an import of a huge message holds
    /// it once).
    pub fn append_drafts(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        drafts: Vec<Draft>,
    ) -> Result<Vec<StoredNode>> {
        let mut out = Vec::with_capacity(drafts.len());
        self.append_each(
            session,
            branch,
            &mut drafts.into_iter().map(Cow::Owned),
            &mut |s| out.push(s),
        )?;
        Ok(out)
    }

    /// A payload stored without a node of its own (hashed and chunked as a
    /// node's payload is; stored once): bytes a node's diagnostics name by
    /// their hash instead of holding them, such as an imported record too
    /// large to keep inline. Returns its hash.
    pub fn put_payload(&mut self, bytes: &[u8]) -> Result<ContentHash> {
        let h = self.tx.payload_hash(bytes);
        self.tx.put_blob(&h, bytes)?;
        Ok(h)
    }

    fn append_each(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        drafts: &mut dyn Iterator<Item = Cow<'_, Draft>>,
        each: &mut dyn FnMut(StoredNode),
    ) -> Result<()> {
        let tx = &mut *self.tx;
        let (mut b, mut ctx) = open_branch_head(tx, session, branch)?;
        let old_head = b.head;
        for d in drafts {
            let (kind, state) = (d.kind, d.state);
            let stored = place_and_insert(tx, &b, ctx, d)?;
            if kind == Kind::Complete && state.is_some() {
                b.state = state;
            }
            ctx = stored.ctx;
            b.head = Some(stored.hash);
            each(stored);
        }
        if let Some(last) = b.head.filter(|h| Some(*h) != old_head)
            && !tx.cas_head(session, branch, old_head.as_ref(), &last)?
        {
            return Err(StoreError::Conflict(1));
        }
        Ok(())
    }

    /// Creates branch `name` whose first node is a fork node after the node
    /// `from` (a hash or unique prefix), starting from that node's state.
    /// Costs the same at any depth: nothing is copied or walked.
    pub fn fork(
        &mut self,
        session: &SessionId,
        from: &HashPrefix,
        name: &BranchName,
        now: Millis,
    ) -> Result<StoredNode> {
        let tx = &mut *self.tx;
        let sess = tx
            .session(session)?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        let point = resolve_in(tx, from)?;
        if point.node.session != *session {
            return Err(StoreError::WrongSession {
                node: point.hash.to_hex(),
                owner: point.node.session.to_string(),
                session: session.to_string(),
            });
        }
        if tx.branch(session, name)?.is_some() {
            return Err(StoreError::BranchExists {
                session: session.to_string(),
                branch: name.to_string(),
            });
        }
        let event = TimelineEvent {
            branch: name.clone(),
            sealed_as: None,
            nonce: nonce(),
        };
        let node = timeline_node(Kind::Fork, &sess, point.hash, now, event);
        let ctx = point.ctx.after(&node);
        let hash = node.hash();
        tx.put_blob(&node.payload, b"")?;
        let seq = tx.insert_node(&hash, &node, &ctx)?;
        tx.insert_branch(&BranchRow {
            session: *session,
            name: name.clone(),
            head: Some(hash),
            state: point.ctx.state,
            sealed: false,
            created_at: now,
        })?;
        Ok(StoredNode {
            seq,
            hash,
            node,
            ctx,
        })
    }

    /// Makes `branch` canonical: seals `main` as `broken-YYYY-MM-DD[-N]`,
    /// renames `branch` to `main` and appends a promote node to it.
    pub fn promote(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        now: Millis,
    ) -> Result<Promoted> {
        if branch.is_main() {
            return Err(StoreError::PromoteMain);
        }
        let tx = &mut *self.tx;
        let sess = tx
            .session(session)?
            .ok_or_else(|| StoreError::NoSession(session.to_string()))?;
        let b = open_branch(tx, session, branch, true)?;
        let main = BranchName::main();
        let taken: Vec<String> = tx
            .branches(Some(session))?
            .into_iter()
            .map(|b| b.name.as_str().to_owned())
            .collect();
        let sealed_as = sealed_name(now, |n| taken.iter().any(|t| t == n));
        if tx.branch(session, &main)?.is_some() {
            tx.rename_branch(session, &main, &sealed_as, true)?;
        }
        tx.rename_branch(session, branch, &main, false)?;
        let head = b
            .head
            .ok_or_else(|| StoreError::corrupt(format!("branch `{branch}` has no head")))?;
        let parent = tx
            .node(&head)?
            .ok_or_else(|| StoreError::corrupt(format!("head {head} of `{branch}` is missing")))?;
        let event = TimelineEvent {
            branch: branch.clone(),
            sealed_as: Some(sealed_as.clone()),
            nonce: nonce(),
        };
        let node = timeline_node(Kind::Promote, &sess, head, now, event);
        let ctx = parent.ctx.after(&node);
        let hash = node.hash();
        tx.put_blob(&node.payload, b"")?;
        let seq = tx.insert_node(&hash, &node, &ctx)?;
        if !tx.cas_head(session, &main, Some(&head), &hash)? {
            return Err(StoreError::Conflict(1));
        }
        Ok(Promoted {
            node: StoredNode {
                seq,
                hash,
                node,
                ctx,
            },
            sealed_as,
        })
    }

    /// Sets `key` on the branch's working state; returns the new root.
    pub fn state_put(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        key: &str,
        value: &[u8],
    ) -> Result<StateRoot> {
        let tx = &mut *self.tx;
        let b = open_branch(tx, session, branch, true)?;
        let root = b.state.unwrap_or_else(state::empty_root);
        let vh = content_hash(value);
        tx.put_blob(&vh, value)?;
        let new = state::put(&mut TxNodes(tx), &root, key.as_bytes(), vh).map_err(state_err)?;
        set_working_state(tx, session, branch, new)?;
        Ok(new)
    }

    /// Removes `key` from the branch's working state.
    pub fn state_delete(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        key: &str,
    ) -> Result<(StateRoot, bool)> {
        let tx = &mut *self.tx;
        let b = open_branch(tx, session, branch, true)?;
        let root = b.state.unwrap_or_else(state::empty_root);
        let new = state::delete(&mut TxNodes(tx), &root, key.as_bytes()).map_err(state_err)?;
        set_working_state(tx, session, branch, new)?;
        Ok((new, new != root))
    }

    /// Every turn a harness has open, with its timeline ([`crate::OpenTurn`]).
    pub fn open_turns(&mut self) -> Result<Vec<(SessionId, BranchName, crate::OpenTurn)>> {
        self.tx
            .open_turns()?
            .into_iter()
            .map(|(s, b, t)| {
                let turn = serde_json::from_str(&t).map_err(|e| {
                    StoreError::corrupt(format!("the open turn of `{b}` of {s}: {e}"))
                })?;
                Ok((s, b, turn))
            })
            .collect()
    }

    /// The turn a harness has open on a timeline, if any.
    pub fn open_turn(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
    ) -> Result<Option<crate::OpenTurn>> {
        Ok(self
            .open_turns()?
            .into_iter()
            .find(|(s, b, _)| s == session && b == branch)
            .map(|(_, _, t)| t))
    }

    /// Records the turn a harness opens on a timeline (in its invoke's
    /// transaction), or removes it (`None`, in its complete's).
    pub fn set_open_turn(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        turn: Option<&crate::OpenTurn>,
    ) -> Result<()> {
        let json = turn
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Invalid(format!("open turn: {e}").into()))?;
        self.tx.set_open_turn(session, branch, json.as_deref())
    }

    /// Closes the turn a dead holder left open on `branch`: when the
    /// timeline's head is still inside that turn (same submission, still
    /// open), a `complete` recording `{"failure": "interrupted"}` is
    /// appended (it carries the branch's working state, so the turn's kv
    /// writes are kept and accounted). The open-turn row goes either way.
    /// Returns the complete; `None` when the turn was closed after all.
    pub fn close_interrupted(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        left: &crate::OpenTurn,
        now: Millis,
    ) -> Result<Option<StoredNode>> {
        self.set_open_turn(session, branch, None)?;
        let Some(row) = self.tx.branch(session, branch)? else {
            return Ok(None);
        };
        let Some(head) = row.head else {
            return Ok(None);
        };
        let head = self
            .tx
            .node(&head)?
            .ok_or_else(|| StoreError::corrupt(format!("head {head} of `{branch}` is missing")))?;
        let same = head.ctx.open
            && head
                .ctx
                .submission
                .is_some_and(|s| s.to_hex() == left.submission);
        if !same {
            return Ok(None);
        }
        let diag = serde_json::json!({
            "failure": "interrupted",
            "error": format!("the harness ({}) ended during the turn", left.holder),
        });
        let node = self.append(
            session,
            branch,
            &Draft {
                kind: Kind::Complete,
                from: left.agent.clone(),
                to: "user".into(),
                payload: Vec::new(),
                diagnostics: convo_core::Diagnostics::from_value(&diag)
                    .map_err(StoreError::invalid)?,
                state: None,
                sequence: None,
                created_at: now,
            },
        )?;
        Ok(Some(node))
    }

    /// One branch, as seen inside this transaction.
    pub fn branch(&mut self, session: &SessionId, name: &BranchName) -> Result<BranchRow> {
        open_branch(self.tx, session, name, false)
    }

    /// Creates an empty timeline `name` (no nodes, empty state), as a new
    /// session's `main` is: for a run that must not share history with
    /// another timeline (a replay, say).
    pub fn create_branch(
        &mut self,
        session: &SessionId,
        name: &BranchName,
        now: Millis,
    ) -> Result<BranchRow> {
        if self.tx.session(session)?.is_none() {
            return Err(StoreError::NoSession(session.to_string()));
        }
        if self.tx.branch(session, name)?.is_some() {
            return Err(StoreError::BranchExists {
                session: session.to_string(),
                branch: name.to_string(),
            });
        }
        let row = BranchRow {
            session: *session,
            name: name.clone(),
            head: None,
            state: None,
            sealed: false,
            created_at: now,
        };
        self.tx.insert_branch(&row)?;
        append_fact(
            self.tx,
            Fact::Branch {
                session: *session,
                branch: name.clone(),
            },
        )?;
        Ok(row)
    }

    /// Sets the branch's working state root to an existing state version
    /// (the state as of some node), as a fork does at its start.
    pub fn set_working_state(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        root: Option<&StateRoot>,
    ) -> Result<()> {
        open_branch(self.tx, session, branch, true)?;
        self.tx.set_branch_state(session, branch, root)?;
        append_fact(
            self.tx,
            Fact::State {
                session: *session,
                branch: branch.clone(),
                root: root.copied(),
            },
        )
    }

    /// The value of `key` in a state version, inside this transaction.
    pub fn state_get(&mut self, root: &StateRoot, key: &str) -> Result<Option<Vec<u8>>> {
        let tx = &mut *self.tx;
        let Some(vh) = state::get(&mut TxNodes(tx), root, key.as_bytes()).map_err(state_err)?
        else {
            return Ok(None);
        };
        payload_in(tx, &vh)?
            .map(Some)
            .ok_or_else(|| StoreError::corrupt(format!("state value {vh} is missing")))
    }

    /// Every key of a state version, sorted, inside this transaction.
    pub fn state_keys(&mut self, root: &StateRoot) -> Result<Vec<String>> {
        let entries = state::list(&mut TxNodes(&mut *self.tx), root).map_err(state_err)?;
        Ok(entries
            .into_iter()
            .map(|(k, _)| String::from_utf8_lossy(&k).into_owned())
            .collect())
    }

    /// A timeline with payloads, as seen inside this transaction.
    pub fn timeline(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
    ) -> Result<Vec<TimelineNode>> {
        timeline_in(self.tx, session, branch)
    }
}

/// Sets a branch's working state root and journals it (a fact: no node
/// records it until the next `complete` carries it).
fn set_working_state(
    tx: &mut dyn Tx,
    session: &SessionId,
    branch: &BranchName,
    root: StateRoot,
) -> Result<()> {
    tx.set_branch_state(session, branch, Some(&root))?;
    append_fact(
        tx,
        Fact::State {
            session: *session,
            branch: branch.clone(),
            root: Some(root),
        },
    )
}

fn timeline_in(
    tx: &mut dyn Tx,
    session: &SessionId,
    branch: &BranchName,
) -> Result<Vec<TimelineNode>> {
    let b = open_branch(tx, session, branch, false)?;
    match b.head {
        None => Ok(Vec::new()),
        Some(head) => chain_in(tx, session, head, true),
    }
}

/// A page of a timeline; see [`Store::timeline_page`].
#[derive(Clone, Debug)]
pub struct TimelinePage {
    /// The nodes, in timeline order, with their turn numbers (the count of
    /// `invoke`s from the timeline's start up to and including the node).
    pub nodes: Vec<(TimelineNode, u64)>,
    /// How many nodes the whole timeline has.
    pub total: usize,
    /// How many turns (invokes) the whole timeline has.
    pub turns: u64,
    /// The position of the page's first node.
    pub offset: usize,
}

fn timeline_page_in(
    tx: &mut dyn Tx,
    session: &SessionId,
    branch: &BranchName,
    offset: Option<usize>,
    limit: usize,
    payloads: bool,
) -> Result<TimelinePage> {
    let b = open_branch(tx, session, branch, false)?;
    let Some(head) = b.head else {
        return Ok(TimelinePage {
            nodes: Vec::new(),
            total: 0,
            turns: 0,
            offset: 0,
        });
    };
    // The head's stored context gives the timeline's length and turns;
    // the page's stretch of the chain is read by depth (stored with every
    // node), so a page costs the same however long the timeline is.
    let head_node = tx
        .node(&head)?
        .ok_or_else(|| StoreError::corrupt(format!("head {head} of `{branch}` is missing")))?;
    let total = usize::try_from(head_node.ctx.depth)
        .map_err(|_| StoreError::corrupt(format!("node {head} has a depth out of range")))?;
    let turns = head_node.ctx.turn;
    let offset = offset.unwrap_or(total.saturating_sub(limit));
    let end = offset.saturating_add(limit).min(total);
    let start = offset.min(end);
    let hashes = chain_stretch(tx, session, &head_node, start as u64, end as u64)?;
    let rows: Vec<Option<(StoredNode, Vec<u8>)>> = if payloads {
        tx.nodes_with_payloads(&hashes)?
    } else {
        let bare = tx.nodes_by_hash(&hashes)?;
        bare.into_iter()
            .map(|n| n.map(|n| (n, Vec::new())))
            .collect()
    };
    let mut nodes = Vec::with_capacity(hashes.len());
    for (h, row) in hashes.iter().zip(rows) {
        let (stored, payload) = match row {
            Some(r) => r,
            // No payload bytes: a redacted payload reads as its tombstone.
            None => {
                let stored = tx
                    .node(h)?
                    .ok_or_else(|| StoreError::corrupt(format!("node {h} is missing")))?;
                if !payloads {
                    (stored, Vec::new())
                } else {
                    let payload = payload_in(tx, &stored.node.payload)?.ok_or_else(|| {
                        StoreError::corrupt(format!("payload of node {h} is missing"))
                    })?;
                    (stored, payload)
                }
            }
        };
        if stored.hash != *h || stored.node.session != *session {
            return Err(StoreError::corrupt(format!(
                "node {h} of session {session} reads as another node"
            )));
        }
        let turn = stored.ctx.turn;
        nodes.push((TimelineNode { stored, payload }, turn));
    }
    Ok(TimelinePage {
        nodes,
        total,
        turns,
        offset,
    })
}

fn timeline_node(
    kind: Kind,
    sess: &SessionRow,
    parent: NodeHash,
    now: Millis,
    event: TimelineEvent,
) -> Node {
    Node {
        parent: Some(parent),
        kind,
        session: sess.id,
        submission: None,
        sequence: None,
        from: "platform".into(),
        to: sess.agent.clone(),
        payload: content_hash(b""),
        payload_len: 0,
        diagnostics: Diagnostics::empty(),
        state: None,
        created_at: now,
        event: Some(event),
    }
}

/// Loads a branch open for appends and its head's context, in one read
/// ([`crate::tx::BranchTx::branch_with_head`]).
fn open_branch_head(
    tx: &mut dyn Tx,
    session: &SessionId,
    name: &BranchName,
) -> Result<(BranchRow, Context)> {
    match tx.branch_with_head(session, name)? {
        None => Err(open_branch(tx, session, name, true)
            .err()
            .unwrap_or_else(|| StoreError::NoBranch {
                session: session.to_string(),
                branch: name.to_string(),
            })),
        Some((b, _)) if b.sealed => Err(StoreError::Sealed {
            session: session.to_string(),
            branch: name.to_string(),
        }),
        Some((b, head)) => {
            let ctx = head.map_or_else(Context::genesis, |n| n.ctx);
            Ok((b, ctx))
        }
    }
}

/// Places a draft after the branch's head and writes it. A draft given
/// owned has its diagnostics moved into the node (a borrowed one, copied).
fn place_and_insert(
    tx: &mut dyn Tx,
    b: &BranchRow,
    ctx: Context,
    d: Cow<'_, Draft>,
) -> Result<StoredNode> {
    let owned;
    let (d, diagnostics) = match d {
        Cow::Borrowed(d) => (d, d.diagnostics.clone()),
        Cow::Owned(mut o) => {
            let diagnostics = std::mem::replace(&mut o.diagnostics, Diagnostics::empty());
            owned = o;
            (&owned, diagnostics)
        }
    };
    let payload = tx.payload_hash(&d.payload);
    let placement = ctx.place(d.kind, &b.session, &payload, d.sequence)?;
    let state = match (d.kind, d.state) {
        (Kind::Complete, Some(root)) => {
            if root != state::empty_root() && tx.state_node(&root.0)?.is_none() {
                return Err(StoreError::State(
                    format!("unknown state root {root}").into(),
                ));
            }
            tx.set_branch_state(&b.session, &b.name, Some(&root))?;
            Some(root)
        }
        (Kind::Complete, None) => b.state,
        (_, Some(_)) => {
            return Err(StoreError::Invalid(
                "only a complete carries a state root".into(),
            ));
        }
        (_, None) => None,
    };
    let node = Node {
        parent: b.head,
        kind: d.kind,
        session: b.session,
        submission: placement.submission,
        sequence: placement.sequence,
        from: d.from.clone(),
        to: d.to.clone(),
        payload,
        payload_len: d.payload.len() as u64,
        diagnostics,
        state,
        created_at: d.created_at,
        event: None,
    };
    let hash = node.hash();
    let next = ctx.after(&node);
    tx.put_blob(&payload, &d.payload)?;
    let seq = tx.insert_node(&hash, &node, &next)?;
    Ok(StoredNode {
        seq,
        hash,
        node,
        ctx: next,
    })
}

fn state_root_in(
    tx: &mut dyn Tx,
    session: &SessionId,
    branch: &BranchName,
    at: Option<&HashPrefix>,
) -> Result<StateRoot> {
    match at {
        Some(p) => {
            let n = resolve_in(tx, p)?;
            if n.node.session != *session {
                return Err(StoreError::WrongSession {
                    node: n.hash.to_hex(),
                    owner: n.node.session.to_string(),
                    session: session.to_string(),
                });
            }
            Ok(n.ctx.state.unwrap_or_else(state::empty_root))
        }
        None => Ok(open_branch(tx, session, branch, false)?
            .state
            .unwrap_or_else(state::empty_root)),
    }
}
