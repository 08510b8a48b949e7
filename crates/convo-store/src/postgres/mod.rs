//! The PostgreSQL backend (`tokio-postgres` on a private single-threaded
//! runtime, so the store API stays synchronous; no libpq).
//!
//! Selected by a `postgres://` URL. Every write transaction first takes one
//! transaction-scoped advisory lock, so writers from any number of processes
//! and machines queue exactly as SQLite's writers do: a node's follow
//! sequence number is `max + 1` assigned under that lock, hence store-wide,
//! gap-free and in commit order, and a writer killed mid-transaction rolls
//! back without leaving a gap. Reads run in `REPEATABLE READ` snapshots and
//! never block writers. A write that commits nodes sends `NOTIFY
//! convo_nodes`, which `convo watch` and the server's event stream listen
//! to. Serialization failures, deadlocks and lost compare-and-swaps are
//! retried inside, with a bound. Migrations live in `migrations/postgres/`,
//! tracked in `convo_schema`.
//!
//! # Round trips
//!
//! The ledger drives a transaction one row operation at a time, but the
//! backend does not pay a network round trip for each: statements are
//! *pipelined*. `BEGIN`, the advisory lock and the follow-number read wait
//! and go out with the transaction's first read; writes (blobs, nodes,
//! compare-and-swaps of heads, facts) wait and go out with the next read,
//! or with `COMMIT`. So one append costs two round trips: the branch with
//! its head's context (one joined read, [`crate::tx::BranchTx::branch_with_head`]), then its
//! writes and the commit; a batch of appends in one transaction costs one
//! more round trip per append. A write whose outcome the ledger asks for
//! is checked on the server, so a failure aborts the transaction before the
//! `COMMIT` behind it can take effect: a lost compare-and-swap divides by
//! zero (reported as a conflict, and retried), a node already stored
//! violates the key. [`Postgres::round_trips`] counts them (tests pin it).

use crate::backend::{
    Backend, BlobVisitor, BranchRow, NodeVisitor, NodeWithPayload, SessionRow, StoredNode, Tx,
};
use crate::tx::*;
use crate::{Result, StoreError};
use convo_core::timeline::Context;
use convo_core::{
    BranchName, ContentHash, Digest, HashPrefix, Node, NodeHash, SessionId, StateRoot,
};
use futures_util::TryStreamExt;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

mod schema;

/// Key of the transaction-scoped advisory lock every writer takes (a
/// session holding it keeps every convo writer of the database waiting).
pub const WRITE_LOCK: i64 = 0x636f_6e76_6f01;
const MIGRATE_LOCK: i64 = 0x636f_6e76_6f02;
/// How long a writer whose connection was lost at `COMMIT` tries to learn
/// from the server whether it was kept ([`Conn::reopen_for`]).
const REOPEN_BUDGET: Duration = Duration::from_secs(5);
/// Writes a transaction holds back at most before sending them (a bulk
/// import does not keep its whole batch in memory as statements).
const MAX_PENDING: usize = 512;
use crate::backend::RETRY_BUDGET;

/// One database connection and the runtime that drives it.
struct Conn {
    /// The URL it was opened with (to open another in its place).
    url: String,
    /// Opened in place of a connection lost at `COMMIT` (see
    /// [`PgTx::commit`]): its session settings and `LISTEN` are not set yet.
    replaced: bool,
    /// When the server it talks to started (`pg_postmaster_start_time`):
    /// a transaction id is trusted across a lost connection only if the
    /// server did not restart meanwhile (see [`Conn::reopen_for`]).
    started: String,
    rt: tokio::runtime::Runtime,
    client: Client,
    /// One message per `NOTIFY` received (the connection task forwards them).
    notes: tokio::sync::mpsc::UnboundedReceiver<()>,
    /// Prepared statements are per connection and outlive transactions.
    statements: HashMap<String, Statement>,
    round_trips: Arc<AtomicU64>,
    /// The large payloads this connection stored lately: the next one is
    /// hashed and cut from where it differs (as on SQLite).
    recent: crate::chunk::Recent,
}

/// A PostgreSQL store.
pub struct Postgres {
    conn: Conn,
    listening: bool,
    /// How long a transaction waits out lock contention (see
    /// [`crate::backend::Maintenance::busy_wait`]).
    busy_budget: Duration,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Postgres")
    }
}

fn db(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                // `lock_timeout` ran out (see `busy_wait`).
                || *c == SqlState::LOCK_NOT_AVAILABLE =>
        {
            StoreError::Busy(RETRY_BUDGET.as_secs())
        }
        _ if unreachable(&e) => {
            StoreError::Unreachable(crate::Cause::new(describe(&e)).with_source(e))
        }
        _ => StoreError::Backend(crate::Cause::new(describe(&e)).with_source(e)),
    }
}

/// Whether `e` says the server is gone or going (the connection closed or
/// cut, the server shutting down or starting up), not that a statement
/// failed.
fn unreachable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(c) => {
            c.code().starts_with("08")
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        }
        // No server error: the socket failed (refused, reset, timed out).
        None => std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

/// What the server said (`FATAL: database "x" does not exist (SQLSTATE
/// 3D000)`), or the client's error with its causes (`error connecting to
/// server: Connection refused (os error 111)`): the client error's own
/// `Display` says only `db error`.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(d) = e.as_db_error() {
        let mut s = format!(
            "{}: {} (SQLSTATE {})",
            d.severity(),
            d.message(),
            d.code().code()
        );
        if let Some(detail) = d.detail() {
            s.push_str("; ");
            s.push_str(detail);
        }
        if let Some(hint) = d.hint() {
            s.push_str("; hint: ");
            s.push_str(hint);
        }
        return s;
    }
    let mut s = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !s.contains(&c_text) {
            s.push_str(": ");
            s.push_str(&c_text);
        }
        cause = c.source();
    }
    s
}

fn corrupt(what: impl std::fmt::Display) -> StoreError {
    StoreError::corrupt(what.to_string())
}

impl Conn {
    fn open(url: &str) -> std::result::Result<Conn, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let (client, mut connection) = rt
            .block_on(tokio_postgres::connect(url, NoTls))
            .map_err(|e| describe(&e))?;
        let (tx, notes) = tokio::sync::mpsc::unbounded_channel();
        // The connection runs whenever the runtime does (inside `block_on`):
        // it sends what the client queued and forwards notifications.
        rt.spawn(async move {
            while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match m {
                    Ok(tokio_postgres::AsyncMessage::Notification(_)) => {
                        let _ = tx.send(());
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        let started = rt
            .block_on(client.query_one("SELECT pg_postmaster_start_time()::text", &[]))
            .and_then(|r| r.try_get::<_, String>(0))
            .map_err(|e| describe(&e))?;
        Ok(Conn {
            url: url.to_owned(),
            replaced: false,
            started,
            rt,
            client,
            notes,
            statements: HashMap::new(),
            round_trips: Arc::new(AtomicU64::new(0)),
            recent: crate::chunk::Recent::default(),
        })
    }

    /// After this connection was lost at `COMMIT`: opens another (trying
    /// for up to [`REOPEN_BUDGET`], as a restarting server comes back) and
    /// asks the server whether transaction `xid` was kept
    /// (`pg_xact_status`, waiting while it is still in progress). The new
    /// connection takes this one's place. `None` when neither can be
    /// known in time.
    fn reopen_for(&mut self, xid: &str) -> Option<bool> {
        let start = std::time::Instant::now();
        let mut fresh = loop {
            match Conn::open(&self.url) {
                Ok(c) => break c,
                Err(_) if start.elapsed() < REOPEN_BUDGET => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(_) => return None,
            }
        };
        let kept = loop {
            let status = fresh.rt.block_on(
                fresh
                    .client
                    .query_one("SELECT pg_xact_status($1::text::xid8)::text", &[&xid]),
            );
            match status
                .ok()?
                .try_get::<_, Option<String>>(0)
                .ok()?
                .as_deref()
            {
                // A server that restarted may have lost the id with the
                // transaction (not yet in its write-ahead log) and given it
                // to another since: `committed` may be that one's.
                Some("committed") if fresh.started != self.started => return None,
                Some("committed") => break true,
                Some("aborted") => break false,
                Some("in progress") if start.elapsed() < REOPEN_BUDGET => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return None,
            }
        };
        fresh.replaced = true;
        fresh.round_trips = self.round_trips.clone();
        *self = fresh;
        Some(kept)
    }

    /// Runs `f` on the runtime: one round trip (or one exchange).
    fn once<'a, T>(
        &'a mut self,
        f: impl FnOnce(&'a Client) -> Pin<Box<dyn Future<Output = T> + 'a>>,
    ) -> T {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let fut = f(&self.client);
        self.rt.block_on(fut)
    }

    /// Prepares (once per connection) every statement of `sqls` not yet
    /// prepared, in one round trip.
    fn prepare_all(&mut self, sqls: &[&str]) -> Result<()> {
        let mut missing: Vec<&str> = Vec::new();
        for s in sqls {
            if !self.statements.contains_key(*s) && !missing.contains(s) {
                missing.push(s);
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let client = &self.client;
        let futs: Vec<_> = missing
            .iter()
            .map(|s| Box::pin(client.prepare(s)))
            .collect();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let prepared = self.rt.block_on(in_order(futs));
        for (s, st) in missing.into_iter().zip(prepared) {
            self.statements.insert(s.to_owned(), st.map_err(db)?);
        }
        Ok(())
    }

    fn statement(&self, sql: &str) -> Result<Statement> {
        self.statements
            .get(sql)
            .cloned()
            .ok_or_else(|| StoreError::backend(format!("statement not prepared: {sql}")))
    }
}

/// Polls every future once in order (so each sends its request, in that
/// order, before any answer is awaited: a pipeline), then awaits each.
async fn in_order<F: Future + Unpin>(futs: Vec<F>) -> Vec<F::Output> {
    use futures_util::future::{MaybeDone, maybe_done};
    let mut all: Vec<MaybeDone<F>> = futs.into_iter().map(maybe_done).collect();
    std::future::poll_fn(|cx| {
        for f in all.iter_mut() {
            let _ = Pin::new(f).poll(cx);
        }
        std::task::Poll::Ready(())
    })
    .await;
    for f in all.iter_mut() {
        Pin::new(&mut *f).await;
    }
    all.iter_mut()
        .filter_map(|f| Pin::new(f).take_output())
        .collect()
}

impl Postgres {
    /// Connects to `url` (`postgres://user[:password]@host[:port]/db`) and
    /// applies pending migrations, creating the schema if needed.
    pub fn connect(url: &str) -> Result<Self> {
        Self::connect_as(url, crate::Access::Write)
    }

    /// Connects to `url`. With [`Access::Read`](crate::Access::Read) a
    /// database without convo's schema is [`StoreError::NoStore`]
    /// (nothing is created); pending migrations are applied either way.
    /// Connection errors carry the server's message and SQLSTATE.
    pub fn connect_as(url: &str, access: crate::Access) -> Result<Self> {
        let conn = Conn::open(url).map_err(|e| StoreError::Url(redact(url), e.into()))?;
        let mut me = Postgres {
            conn,
            listening: false,
            busy_budget: RETRY_BUDGET,
        };
        if access == crate::Access::Read {
            let row = me.conn.once(|c| {
                Box::pin(c.query_one("SELECT to_regclass('convo_schema') IS NOT NULL", &[]))
            });
            let exists: bool = row.map_err(db)?.try_get(0).map_err(db)?;
            if !exists {
                return Err(StoreError::NoStore(redact(url)));
            }
        }
        me.migrate()?;
        Ok(me)
    }

    /// How many round trips to the server this connection has made: each
    /// pipeline of statements (see the module docs) counts one.
    pub fn round_trips(&self) -> Arc<AtomicU64> {
        self.conn.round_trips.clone()
    }

    fn run(&mut self, mode: Mode, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        let out = crate::backend::retrying(self.busy_budget, || {
            let mut t = PgTx::new(&mut self.conn, mode);
            let out = f(&mut t).and_then(|()| t.commit());
            if out.is_err() {
                t.rollback();
            }
            out
        });
        if std::mem::take(&mut self.conn.replaced) {
            // A new connection took the lost one's place: its session has
            // neither the `LISTEN` nor the lock timeout yet.
            self.listening = false;
            if self.busy_budget < RETRY_BUDGET {
                crate::backend::Maintenance::busy_wait(self, self.busy_budget)?;
            }
        }
        out
    }
}

impl crate::backend::Maintenance for Postgres {
    /// A budget shorter than [`RETRY_BUDGET`] sets the connection's
    /// `lock_timeout` to it (at least 1 ms: PostgreSQL's zero means no
    /// limit), so a statement that would wait for a lock another session
    /// holds (the writers' advisory lock, a row, a table) fails at once as
    /// `Busy`, and is not retried here past the budget.
    fn busy_wait(&mut self, budget: Duration) -> Result<()> {
        let ms = if budget < RETRY_BUDGET {
            budget.as_millis().max(1)
        } else {
            0
        };
        let sql = format!("SET lock_timeout = {ms}");
        self.conn
            .once(|c| Box::pin(c.batch_execute(&sql)))
            .map_err(db)?;
        self.busy_budget = budget;
        Ok(())
    }
}

/// The warning of a redaction that ran while other transactions of the
/// database held snapshots ([`Postgres::snapshot_holders`]).
fn busy(holders: &[i64]) -> String {
    format!(
        "transactions older than the erasure (pids {holders:?}) were still running on \
         this server, so the \
         rewritten tables may still hold the bytes for them: run `convo redact` of \
         the same digest's --content again once they end, or `VACUUM FULL blobs`"
    )
}

impl Postgres {
    /// Waits, a bounded time (10 s), until no other backend holds a
    /// snapshot, or a transaction id, taken before this call, and returns
    /// those that still do. VACUUM FULL copies a row deleted or replaced
    /// before this call into the new files while such a snapshot may still
    /// see it: a snapshot of this database (another transaction, an
    /// autovacuum ANALYZE, a backend still starting up), and VACUUM FULL's
    /// own, which cannot be newer than the oldest transaction still writing
    /// in any database of the server. So each rewrite of an erasure waits
    /// first, and again after the statements whose old row versions it
    /// must drop (a snapshot newer than those is no hindrance: autovacuum
    /// takes new ones all the time).
    fn snapshot_holders(&mut self) -> Result<Vec<i64>> {
        // Every transaction that deleted or replaced a row before now has
        // an id below this snapshot's xmax; a snapshot whose xmin is below
        // it may still see such a row. `age` compares the 32-bit ids
        // across wraparound.
        let horizon: i64 = self
            .conn
            .once(|c| {
                Box::pin(c.query_one(
                    "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint \
                     % 4294967296",
                    &[],
                ))
            })
            .map_err(db)?
            .try_get(0)
            .map_err(db)?;
        let sql = format!(
            "SELECT pid::bigint FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() \
             AND ((datname = current_database() OR datname IS NULL) \
                  AND age(backend_xmin) > age('{horizon}'::xid) \
                  OR age(backend_xid) > age('{horizon}'::xid))"
        );
        let mut holders = Vec::new();
        for _ in 0..100 {
            let rows = self
                .conn
                .once(|c| Box::pin(c.query(sql.as_str(), &[])))
                .map_err(db)?;
            holders = rows
                .iter()
                .filter_map(|r| r.try_get::<_, i64>(0).ok())
                .collect();
            if holders.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(holders)
    }
}

/// The URL without its password, for error messages (the one redactor,
/// [`convo_core::url::redact`]).
pub use convo_core::url::redact;

impl Backend for Postgres {
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.run(Mode::Write, f)
    }
    fn read(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.run(Mode::Read, f)
    }
    fn kind(&self) -> &'static str {
        "postgres"
    }
    fn maintenance(&mut self) -> Option<&mut dyn crate::backend::Maintenance> {
        Some(self)
    }
    fn payload_work(&self) -> (u64, u64) {
        (self.conn.recent.hashed, self.conn.recent.cut)
    }
    fn erase_rewritten(&mut self) -> Result<Option<String>> {
        let holders = self.snapshot_holders()?;
        for sql in [
            "VACUUM FULL nodes",
            "VACUUM FULL facts",
            "VACUUM FULL sessions",
            "ANALYZE nodes",
            "ANALYZE facts",
            "ANALYZE sessions",
        ] {
            self.conn
                .once(|c| Box::pin(c.batch_execute(sql)))
                .map_err(db)?;
        }
        let freed = self.erase_freed()?;
        Ok(match (freed, holders.is_empty()) {
            (Some(w), _) => Some(w),
            (None, true) => None,
            (None, false) => Some(busy(&holders)),
        })
    }
    fn erase_freed(&mut self) -> Result<Option<String>> {
        // A deleted row stays in the heap (and its TOAST table) until the
        // table is rewritten; VACUUM FULL writes new files and drops the old.
        // ANALYZE may have sampled the bytes into pg_statistic: analyze
        // again (the row is gone) and rewrite that catalog too, which needs
        // the database's owner.
        let holders = self.snapshot_holders()?;
        // The search index's dead rows hold the erased payload's words.
        for sql in [
            "VACUUM FULL blobs",
            "VACUUM FULL chunks",
            "VACUUM FULL search_index",
            "ANALYZE blobs",
            "ANALYZE chunks",
            "ANALYZE search_index",
        ] {
            self.conn
                .once(|c| Box::pin(c.batch_execute(sql)))
                .map_err(db)?;
        }
        // The ANALYZEs above replaced statistics rows that sampled the
        // bytes: a snapshot taken before them may still see those.
        let mut holders = [holders, self.snapshot_holders()?].concat();
        holders.sort_unstable();
        holders.dedup();
        let stats = self
            .conn
            .once(|c| Box::pin(c.batch_execute("VACUUM FULL pg_statistic")))
            .err()
            .map(|e| {
                format!(
                    "pg_statistic was not rewritten ({}), so column statistics sampled \
                     before the redaction may keep the bytes until the database's owner runs \
                     `VACUUM FULL pg_statistic`",
                    describe(&e)
                )
            });
        let busy = (!holders.is_empty()).then(|| busy(&holders));
        Ok(match (stats, busy) {
            (None, None) => None,
            (a, b) => Some([a, b].into_iter().flatten().collect::<Vec<_>>().join("; ")),
        })
    }
    fn wait_for_append(&mut self, timeout: Duration) -> Result<()> {
        if !self.listening {
            self.conn
                .once(|c| Box::pin(c.batch_execute("LISTEN convo_nodes")))
                .map_err(db)?;
            self.listening = true;
        }
        let Conn { rt, notes, .. } = &mut self.conn;
        let got = rt.block_on(async { tokio::time::timeout(timeout, notes.recv()).await });
        match got {
            Ok(Some(())) => {
                // Drain whatever else arrived; one wake-up is enough.
                while notes.try_recv().is_ok() {}
                Ok(())
            }
            Ok(None) => Err(StoreError::backend(
                "the connection to PostgreSQL was closed",
            )),
            Err(_) => Ok(()),
        }
    }
}

/// What a transaction is for: what `BEGIN` it opens with and which lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
    Migrate,
}

/// A statement parameter a held-back write owns.
type Param = Box<dyn ToSql + Sync + Send>;

/// What a held-back write's failure means.
#[derive(Clone, Copy, Debug)]
enum OnError {
    Db,
    /// A compare-and-swap of a head that found another head.
    Conflict,
    /// A node insert that found the node stored.
    Stored(NodeHash),
}

enum Op {
    Simple(String),
    Exec {
        sql: String,
        params: Vec<Param>,
        on_error: OnError,
    },
    Lock(i64),
    NextSeq,
}

type Params<'p> = [&'p (dyn ToSql + Sync)];

const LOCK_SQL: &str = "SELECT pg_advisory_xact_lock($1)";
/// The next follow number and the transaction's id (so a `COMMIT` whose
/// connection was lost can be asked about: [`PgTx::commit`]).
const NEXT_SEQ_SQL: &str =
    "SELECT COALESCE(MAX(seq), 0) + 1, pg_current_xact_id()::text FROM nodes";

enum Out {
    Done,
    Rows(Vec<Row>),
}

type OpFuture<'f> =
    Pin<Box<dyn Future<Output = std::result::Result<Out, tokio_postgres::Error>> + 'f>>;

struct PgTx<'c> {
    c: &'c mut Conn,
    mode: Mode,
    /// `BEGIN` has been sent (or is on its way).
    begun: bool,
    /// Why the transaction is aborted on the server, if it is.
    failed: Option<String>,
    /// Writes held back until the next read or the commit.
    pending: Vec<Op>,
    wrote_nodes: bool,
    /// The next follow number; read once per transaction, under the
    /// writers' advisory lock, which makes it safe.
    next_seq: Option<i64>,
    /// The transaction's id (`xid8` as text), known once its first
    /// pipeline answered (write transactions).
    xid: Option<String>,
}

impl<'c> PgTx<'c> {
    fn new(c: &'c mut Conn, mode: Mode) -> Self {
        PgTx {
            c,
            mode,
            begun: false,
            failed: None,
            pending: Vec::new(),
            wrote_nodes: false,
            next_seq: None,
            xid: None,
        }
    }

    /// Sends the held-back statements (after `BEGIN` and the lock, the
    /// first time) and then `read`, in one pipeline; returns `read`'s rows.
    fn send(&mut self, read: Option<(&str, &Params<'_>)>) -> Result<Vec<Row>> {
        if let Some(why) = &self.failed {
            return Err(StoreError::backend(format!(
                "the transaction was aborted: {why}"
            )));
        }
        let mut ops = Vec::new();
        if !self.begun {
            self.begun = true;
            match self.mode {
                Mode::Read => ops.push(Op::Simple(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".into(),
                )),
                Mode::Write => {
                    ops.push(Op::Simple("BEGIN ISOLATION LEVEL READ COMMITTED".into()));
                    ops.push(Op::Lock(WRITE_LOCK));
                    ops.push(Op::NextSeq);
                }
                Mode::Migrate => {
                    ops.push(Op::Simple("BEGIN".into()));
                    ops.push(Op::Lock(MIGRATE_LOCK));
                }
            }
        }
        ops.append(&mut self.pending);
        if ops.is_empty() && read.is_none() {
            return Ok(Vec::new());
        }
        let out = self.pipeline(&ops, read);
        if let Err(e) = &out {
            self.failed = Some(e.to_string());
        }
        out
    }

    fn pipeline(&mut self, ops: &[Op], read: Option<(&str, &Params<'_>)>) -> Result<Vec<Row>> {
        let mut sqls: Vec<&str> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Exec { sql, .. } => Some(sql.as_str()),
                Op::Lock(_) => Some(LOCK_SQL),
                Op::NextSeq => Some(NEXT_SEQ_SQL),
                Op::Simple(_) => None,
            })
            .collect();
        if let Some((sql, _)) = read {
            sqls.push(sql);
        }
        self.c.prepare_all(&sqls)?;
        let mut statements = Vec::with_capacity(ops.len());
        for op in ops {
            statements.push(match op {
                Op::Exec { sql, .. } => Some(self.c.statement(sql)?),
                Op::Lock(_) => Some(self.c.statement(LOCK_SQL)?),
                Op::NextSeq => Some(self.c.statement(NEXT_SEQ_SQL)?),
                Op::Simple(_) => None,
            });
        }
        let read_st = read.map(|(sql, _)| self.c.statement(sql)).transpose()?;
        let params: Vec<Vec<&(dyn ToSql + Sync)>> = ops
            .iter()
            .map(|op| match op {
                Op::Exec { params, .. } => {
                    params.iter().map(|p| &**p as &(dyn ToSql + Sync)).collect()
                }
                Op::Lock(k) => vec![k as &(dyn ToSql + Sync)],
                _ => Vec::new(),
            })
            .collect();
        let client = &self.c.client;
        let mut futs: Vec<OpFuture<'_>> = Vec::with_capacity(ops.len() + 1);
        for ((op, st), p) in ops.iter().zip(&statements).zip(&params) {
            futs.push(match (op, st) {
                (Op::Simple(sql), _) => {
                    Box::pin(async move { client.batch_execute(sql).await.map(|()| Out::Done) })
                }
                (Op::NextSeq, Some(st)) => {
                    Box::pin(async move { client.query(st, p).await.map(Out::Rows) })
                }
                (_, Some(st)) => {
                    Box::pin(async move { client.execute(st, p).await.map(|_| Out::Done) })
                }
                (_, None) => return Err(StoreError::backend("statement not prepared")),
            });
        }
        if let (Some((_, p)), Some(st)) = (read, &read_st) {
            futs.push(Box::pin(
                async move { client.query(st, p).await.map(Out::Rows) },
            ));
        }
        self.c.round_trips.fetch_add(1, Ordering::Relaxed);
        let results = self.c.rt.block_on(in_order(futs));
        let mut rows = Vec::new();
        let mut first_err = None;
        for (i, r) in results.into_iter().enumerate() {
            let op = ops.get(i);
            match r {
                Ok(Out::Rows(got)) => match op {
                    Some(Op::NextSeq) => {
                        let next: i64 = got
                            .first()
                            .map(|r| r.try_get(0))
                            .transpose()
                            .map_err(db)?
                            .unwrap_or(1);
                        self.next_seq = Some(next);
                        self.xid = got.first().and_then(|r| r.try_get(1).ok());
                    }
                    _ => rows = got,
                },
                Ok(Out::Done) => {}
                Err(e) if first_err.is_none() => {
                    let on_error = match op {
                        Some(Op::Exec { on_error, .. }) => *on_error,
                        _ => OnError::Db,
                    };
                    first_err = Some(match (on_error, e.code()) {
                        (OnError::Conflict, Some(c)) if *c == SqlState::DIVISION_BY_ZERO => {
                            StoreError::Conflict(1)
                        }
                        (OnError::Stored(h), Some(c)) if *c == SqlState::UNIQUE_VIOLATION => {
                            StoreError::Invalid(format!("node {h} is already stored").into())
                        }
                        _ => db(e),
                    });
                }
                Err(_) => {}
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(rows),
        }
    }

    /// Holds a write back until the next read or the commit.
    fn defer(&mut self, sql: &str, params: Vec<Param>, on_error: OnError) -> Result<()> {
        self.pending.push(Op::Exec {
            sql: sql.to_owned(),
            params,
            on_error,
        });
        if self.pending.len() >= MAX_PENDING {
            self.send(None)?;
        }
        Ok(())
    }

    /// Runs a plain SQL script now (migrations).
    fn simple(&mut self, sql: &str) -> Result<()> {
        self.pending.push(Op::Simple(sql.to_owned()));
        self.send(None).map(|_| ())
    }

    fn commit(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(StoreError::backend(format!(
                "the transaction was aborted: {why}"
            )));
        }
        if !self.begun && self.pending.is_empty() {
            return Ok(());
        }
        if self.wrote_nodes {
            self.pending.push(Op::Exec {
                sql: "SELECT pg_notify('convo_nodes', '')".into(),
                params: Vec::new(),
                on_error: OnError::Db,
            });
        }
        self.pending.push(Op::Simple("COMMIT".into()));
        match self.send(None) {
            // The COMMIT may have reached the server: ask it.
            Err(StoreError::Unreachable(c)) => {
                let kept = self.xid.clone().and_then(|xid| self.c.reopen_for(&xid));
                self.begun = false;
                match kept {
                    Some(true) => Ok(()),
                    // Nothing was kept: `Unreachable` says so, and the
                    // caller may write it again.
                    Some(false) => Err(StoreError::Unreachable(c)),
                    None => Err(StoreError::Backend(crate::Cause::new(format!(
                        "{}: the connection was lost at COMMIT, whether the transaction was kept is unknown",
                        c.message()
                    )))),
                }
            }
            Err(e) => Err(e),
            Ok(_) => {
                self.begun = false;
                Ok(())
            }
        }
    }

    /// Ends the transaction without its writes (a no-op if nothing was sent).
    fn rollback(&mut self) {
        self.pending.clear();
        if self.begun {
            self.begun = false;
            let _ = self.c.once(|c| Box::pin(c.batch_execute("ROLLBACK")));
        }
    }

    fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>> {
        self.send(Some((sql, params)))
    }

    fn opt(&mut self, sql: &str, params: &Params<'_>) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    fn stream(&mut self, sql: &str, f: &mut dyn FnMut(&Row) -> Result<()>) -> Result<()> {
        self.send(None)?;
        self.c.prepare_all(&[sql])?;
        let st = self.c.statement(sql)?;
        self.c.round_trips.fetch_add(1, Ordering::Relaxed);
        let client = &self.c.client;
        let out: Result<()> = self.c.rt.block_on(async {
            let rows = client
                .query_raw(&st, std::iter::empty::<&(dyn ToSql + Sync)>())
                .await
                .map_err(db)?;
            let mut rows = std::pin::pin!(rows);
            while let Some(r) = rows.try_next().await.map_err(db)? {
                f(&r)?;
            }
            Ok(())
        });
        if let Err(e) = &out {
            self.failed = Some(e.to_string());
        }
        out
    }
}

/// Stores the chunks of a payload (`$1` hashes, `$2` bytes) that are not
/// stored yet, unless the payload `$3` is (whole, from before chunking).
const PUT_CHUNKS_SQL: &str = "INSERT INTO chunks (hash, data) \
     SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
     WHERE NOT EXISTS (SELECT 1 FROM blobs WHERE hash = $3) \
     ON CONFLICT (hash) DO NOTHING";

/// A `blobs.chunked` column (NULL where no blob was joined).
fn chunked_col(r: &Row, i: usize) -> Result<bool> {
    Ok(r.try_get::<_, Option<bool>>(i)
        .map_err(corrupt)?
        .unwrap_or(false))
}

impl PgTx<'_> {
    /// The nodes with these hashes, in this order (`None` for a hash not
    /// stored), each with its payload if asked (`None` where missing), in
    /// one query.
    fn by_hashes(
        &mut self,
        hashes: &[NodeHash],
        payloads: bool,
    ) -> Result<Vec<Option<crate::backend::NodeRead>>> {
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.as_bytes().to_vec()).collect();
        let (payload, blobs) = if payloads {
            (
                "bl.data, bl.chunked",
                "LEFT JOIN blobs bl ON bl.hash = n.payload",
            )
        } else {
            ("NULL::bytea, NULL::boolean", "")
        };
        let rows = self.query(
            &format!(
                "SELECT {}, {payload} FROM unnest($1::bytea[]) WITH ORDINALITY AS q(h, i) \
                 LEFT JOIN nodes n ON n.hash = q.h {blobs} ORDER BY q.i",
                prefixed(NODE_COLS)
            ),
            &[&keys],
        )?;
        rows.iter()
            .map(|r| {
                let seq: Option<i64> = r.try_get(0).map_err(corrupt)?;
                if seq.is_none() {
                    return Ok(None);
                }
                let data: Option<Vec<u8>> =
                    r.try_get(crate::backend::NODE_COL_COUNT).map_err(corrupt)?;
                let chunked = chunked_col(r, crate::backend::NODE_COL_COUNT + 1)?;
                let n = node_row(r)?;
                let p = data
                    .map(|d| self.payload_of(&n.node.payload, chunked, d))
                    .transpose()?;
                Ok(Some((n, p)))
            })
            .collect()
    }

    /// A payload from its row, checked against its address
    /// ([`crate::chunk::payload`]).
    fn payload_of(&mut self, h: &ContentHash, chunked: bool, data: Vec<u8>) -> Result<Vec<u8>> {
        crate::chunk::payload(self, h, chunked, data)
    }
}

impl crate::chunk::Chunks for PgTx<'_> {
    fn whole_payloads(
        &mut self,
        after: i64,
        max: usize,
    ) -> Result<Vec<crate::chunk::WholePayload>> {
        self.query(
            "SELECT id, hash, data FROM blobs WHERE id > $1 AND NOT chunked \
             AND octet_length(data) >= $2::bigint ORDER BY id LIMIT $3",
            &[
                &after,
                &(crate::chunk::CHUNKED_FROM as i64),
                &i64::try_from(max).unwrap_or(i64::MAX),
            ],
        )?
        .iter()
        .map(|r| {
            Ok((
                r.try_get(0).map_err(corrupt)?,
                r.try_get(1).map_err(corrupt)?,
                r.try_get(2).map_err(corrupt)?,
            ))
        })
        .collect()
    }

    fn set_manifest(&mut self, id: i64, manifest: &[u8]) -> Result<()> {
        self.defer(
            "UPDATE blobs SET data = $1, chunked = true WHERE id = $2",
            vec![Box::new(manifest.to_vec()), Box::new(id)],
            OnError::Db,
        )
    }

    fn rechunk_pending(&mut self) -> Result<bool> {
        Ok(self
            .opt("SELECT 1 FROM pending_work WHERE work = 'rechunk'", &[])?
            .is_some())
    }

    fn rechunk_done(&mut self) -> Result<()> {
        self.defer(
            "DELETE FROM pending_work WHERE work = 'rechunk'",
            vec![],
            OnError::Db,
        )
    }

    fn put_chunks(&mut self, pieces: &[(Digest, &[u8])]) -> Result<()> {
        let hashes: Vec<Vec<u8>> = pieces.iter().map(|(h, _)| h.0.to_vec()).collect();
        let datas: Vec<Vec<u8>> = pieces.iter().map(|(_, d)| d.to_vec()).collect();
        self.defer(
            "INSERT INTO chunks (hash, data) SELECT * FROM unnest($1::bytea[], $2::bytea[]) \
             ON CONFLICT (hash) DO NOTHING",
            vec![Box::new(hashes), Box::new(datas)],
            OnError::Db,
        )
    }

    fn get_chunks(&mut self, hashes: &[Digest]) -> Result<Vec<Option<Vec<u8>>>> {
        let keys: Vec<&[u8]> = hashes.iter().map(|h| h.0.as_slice()).collect();
        let rows = self.query(
            "SELECT hash, data FROM chunks WHERE hash = ANY($1::bytea[])",
            &[&keys],
        )?;
        let mut found: std::collections::HashMap<Digest, Vec<u8>> =
            std::collections::HashMap::with_capacity(rows.len());
        for r in rows {
            found.insert(digest(&r, 0)?, r.try_get(1).map_err(corrupt)?);
        }
        Ok(hashes.iter().map(|h| found.get(h).cloned()).collect())
    }

    fn delete_chunks(&mut self, hashes: &[Digest]) -> Result<()> {
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.0.to_vec()).collect();
        self.defer(
            "DELETE FROM chunks WHERE hash = ANY($1::bytea[])",
            vec![Box::new(keys)],
            OnError::Db,
        )
    }

    fn manifests(&mut self, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()> {
        for r in self.query("SELECT hash, data FROM blobs WHERE chunked", &[])? {
            let h: Vec<u8> = r.try_get(0).map_err(corrupt)?;
            let m: Vec<u8> = r.try_get(1).map_err(corrupt)?;
            f(&h, &m)?;
        }
        Ok(())
    }
}

fn digest(r: &Row, i: usize) -> Result<Digest> {
    let b: Vec<u8> = r.try_get(i).map_err(corrupt)?;
    Digest::from_slice(&b).ok_or_else(|| corrupt("a stored hash is not 32 bytes"))
}

fn opt_digest(r: &Row, i: usize) -> Result<Option<Digest>> {
    let b: Option<Vec<u8>> = r.try_get(i).map_err(corrupt)?;
    b.map(|b| Digest::from_slice(&b).ok_or_else(|| corrupt("a stored hash is not 32 bytes")))
        .transpose()
}

fn session_id(r: &Row, i: usize) -> Result<SessionId> {
    let s: String = r.try_get(i).map_err(corrupt)?;
    SessionId::parse(&s).map_err(|_| corrupt("a stored session id is malformed"))
}

fn branch_name(s: &str) -> Result<BranchName> {
    BranchName::new(s).map_err(|_| corrupt("a stored branch name is invalid"))
}

use crate::backend::NODE_COLS;

impl crate::backend::Columns for Row {
    fn bytes(&self, i: usize) -> std::result::Result<Option<&[u8]>, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
    fn text(&self, i: usize) -> std::result::Result<Option<&str>, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
    fn int(&self, i: usize) -> std::result::Result<Option<i64>, String> {
        use tokio_postgres::types::Type;
        let t = self.columns().get(i).map(|c| c.type_().clone());
        let v = match t {
            Some(Type::INT2) => self.try_get::<_, Option<i16>>(i).map(|v| v.map(i64::from)),
            Some(Type::INT4) => self.try_get::<_, Option<i32>>(i).map(|v| v.map(i64::from)),
            _ => self.try_get::<_, Option<i64>>(i),
        };
        v.map_err(|e| e.to_string())
    }
    fn flag(&self, i: usize) -> std::result::Result<bool, String> {
        self.try_get(i).map_err(|e| e.to_string())
    }
}

/// A node row, decoded and checked by the decoder every backend shares.
fn node_row(r: &Row) -> Result<StoredNode> {
    crate::backend::decode_node(r).map_err(corrupt)
}

fn branch_row(r: &Row) -> Result<BranchRow> {
    let name: String = r.try_get(1).map_err(corrupt)?;
    Ok(BranchRow {
        session: session_id(r, 0)?,
        name: branch_name(&name)?,
        head: opt_digest(r, 2)?.map(NodeHash),
        state: opt_digest(r, 3)?.map(StateRoot),
        sealed: r.try_get(4).map_err(corrupt)?,
        created_at: r.try_get(5).map_err(corrupt)?,
    })
}

fn session_row(r: &Row) -> Result<SessionRow> {
    Ok(SessionRow {
        id: session_id(r, 0)?,
        agent: r.try_get(1).map_err(corrupt)?,
        title: r.try_get(2).map_err(corrupt)?,
        created_at: r.try_get(3).map_err(corrupt)?,
    })
}

const BRANCH_COLS: &str = "session, name, head, state, sealed, created_at";

fn b(h: &[u8; 32]) -> &[u8] {
    h.as_slice()
}

/// `NODE_COLS` with each column qualified by the alias `n`.
fn prefixed(cols: &str) -> String {
    cols.split(", ")
        .map(|c| format!("n.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A row's columns from `.1` on, as if they were the whole row (a node
/// joined after other columns).
struct Shifted<'r>(&'r Row, usize);

impl crate::backend::Columns for Shifted<'_> {
    fn bytes(&self, i: usize) -> std::result::Result<Option<&[u8]>, String> {
        self.0.bytes(i + self.1)
    }
    fn text(&self, i: usize) -> std::result::Result<Option<&str>, String> {
        self.0.text(i + self.1)
    }
    fn int(&self, i: usize) -> std::result::Result<Option<i64>, String> {
        self.0.int(i + self.1)
    }
    fn flag(&self, i: usize) -> std::result::Result<bool, String> {
        self.0.flag(i + self.1)
    }
}

impl SessionTx for PgTx<'_> {
    fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        self.defer(
            "INSERT INTO sessions (id, agent, title, created_at) VALUES ($1, $2, $3, $4)",
            vec![
                Box::new(s.id.to_string()),
                Box::new(s.agent.clone()),
                Box::new(s.title.clone()),
                Box::new(s.created_at),
            ],
            OnError::Db,
        )
    }

    fn set_session_title(&mut self, id: &SessionId, title: Option<&str>) -> Result<()> {
        self.defer(
            "UPDATE sessions SET title = $2 WHERE id = $1",
            vec![Box::new(id.to_string()), Box::new(title.map(str::to_owned))],
            OnError::Db,
        )
    }

    fn session(&mut self, id: &SessionId) -> Result<Option<SessionRow>> {
        self.opt(
            "SELECT id, agent, title, created_at FROM sessions WHERE id = $1",
            &[&id.to_string()],
        )?
        .map(|r| session_row(&r))
        .transpose()
    }

    fn sessions(&mut self) -> Result<Vec<SessionRow>> {
        self.query(
            "SELECT id, agent, title, created_at FROM sessions ORDER BY created_at, id COLLATE \"C\"",
            &[],
        )?
        .iter()
        .map(session_row)
        .collect()
    }
}

impl BranchTx for PgTx<'_> {
    fn branch(&mut self, s: &SessionId, name: &BranchName) -> Result<Option<BranchRow>> {
        self.opt(
            &format!("SELECT {BRANCH_COLS} FROM branches WHERE session = $1 AND name = $2"),
            &[&s.to_string(), &name.as_str()],
        )?
        .map(|r| branch_row(&r))
        .transpose()
    }

    fn branches(&mut self, s: Option<&SessionId>) -> Result<Vec<BranchRow>> {
        let rows = match s {
            Some(s) => self.query(
                &format!("SELECT {BRANCH_COLS} FROM branches WHERE session = $1 ORDER BY name COLLATE \"C\""),
                &[&s.to_string()],
            )?,
            None => self.query(
                &format!("SELECT {BRANCH_COLS} FROM branches ORDER BY session COLLATE \"C\", name COLLATE \"C\""),
                &[],
            )?,
        };
        rows.iter().map(branch_row).collect()
    }

    fn insert_branch(&mut self, br: &BranchRow) -> Result<()> {
        self.defer(
            "INSERT INTO branches (session, name, head, state, sealed, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
            vec![
                Box::new(br.session.to_string()),
                Box::new(br.name.as_str().to_owned()),
                Box::new(br.head.map(|h| h.as_bytes().to_vec())),
                Box::new(br.state.map(|h| h.as_bytes().to_vec())),
                Box::new(br.sealed),
                Box::new(br.created_at),
            ],
            OnError::Db,
        )
    }

    fn branch_with_head(
        &mut self,
        s: &SessionId,
        name: &BranchName,
    ) -> Result<Option<(BranchRow, Option<StoredNode>)>> {
        let Some(r) = self.opt(
            &format!(
                "SELECT b.session, b.name, b.head, b.state, b.sealed, b.created_at, {} \
                 FROM branches b LEFT JOIN nodes n ON n.hash = b.head \
                 WHERE b.session = $1 AND b.name = $2",
                prefixed(NODE_COLS)
            ),
            &[&s.to_string(), &name.as_str()],
        )?
        else {
            return Ok(None);
        };
        let br = branch_row(&r)?;
        let head = match &br.head {
            None => None,
            Some(h) => {
                let seq: Option<i64> = r.try_get(6).map_err(corrupt)?;
                if seq.is_none() {
                    return Err(corrupt(format!("head {h} of `{}` is missing", br.name)));
                }
                Some(crate::backend::decode_node(&Shifted(&r, 6)).map_err(corrupt)?)
            }
        };
        Ok(Some((br, head)))
    }

    fn branches_with_heads(
        &mut self,
        keys: &[(SessionId, BranchName)],
    ) -> Result<Vec<Option<crate::backend::BranchHead>>> {
        if keys.len() < 2 {
            return keys
                .iter()
                .map(|(s, name)| self.branch_with_head(s, name))
                .collect();
        }
        let sessions: Vec<String> = keys.iter().map(|(s, _)| s.to_string()).collect();
        let names: Vec<&str> = keys.iter().map(|(_, n)| n.as_str()).collect();
        let rows = self.query(
            &format!(
                "SELECT b.session, b.name, b.head, b.state, b.sealed, b.created_at, {}, k.i \
                 FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(s, nm, i) \
                 JOIN branches b ON b.session = k.s AND b.name = k.nm \
                 LEFT JOIN nodes n ON n.hash = b.head",
                prefixed(NODE_COLS)
            ),
            &[&sessions, &names],
        )?;
        let mut out: Vec<Option<crate::backend::BranchHead>> = vec![None; keys.len()];
        for r in &rows {
            let i: i64 = r.try_get(r.len() - 1).map_err(corrupt)?;
            let slot = usize::try_from(i - 1)
                .ok()
                .and_then(|i| out.get_mut(i))
                .ok_or_else(|| corrupt("a batch read answered for no key"))?;
            let br = branch_row(r)?;
            let head = match &br.head {
                None => None,
                Some(h) => {
                    let seq: Option<i64> = r.try_get(6).map_err(corrupt)?;
                    if seq.is_none() {
                        return Err(corrupt(format!("head {h} of `{}` is missing", br.name)));
                    }
                    Some(crate::backend::decode_node(&Shifted(r, 6)).map_err(corrupt)?)
                }
            };
            *slot = Some((br, head));
        }
        Ok(out)
    }

    fn cas_head(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        old: Option<&NodeHash>,
        new: &NodeHash,
    ) -> Result<bool> {
        // Held back like every write: a head that moved divides by zero,
        // which aborts the transaction and reads as a conflict (retried).
        self.defer(
            "WITH moved AS (UPDATE branches SET head = $1 \
             WHERE session = $2 AND name = $3 AND head IS NOT DISTINCT FROM $4 RETURNING 1) \
             SELECT 1 / (SELECT count(*)::int FROM moved)",
            vec![
                Box::new(new.as_bytes().to_vec()),
                Box::new(s.to_string()),
                Box::new(name.as_str().to_owned()),
                Box::new(old.map(|h| h.as_bytes().to_vec())),
            ],
            OnError::Conflict,
        )?;
        Ok(true)
    }

    fn open_turns(&mut self) -> Result<Vec<(SessionId, BranchName, String)>> {
        let rows = self.query("SELECT session, branch, turn FROM open_turns", &[])?;
        rows.iter()
            .map(|r| {
                let (s, b, t): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                crate::backend::open_turn_row(&s, &b, t)
            })
            .collect()
    }

    fn set_open_turn(&mut self, s: &SessionId, b: &BranchName, turn: Option<&str>) -> Result<()> {
        self.defer(
            "DELETE FROM open_turns WHERE session = $1 AND branch = $2",
            vec![Box::new(s.to_string()), Box::new(b.as_str().to_owned())],
            OnError::Db,
        )?;
        if let Some(t) = turn {
            self.defer(
                "INSERT INTO open_turns (session, branch, turn) VALUES ($1, $2, $3)",
                vec![
                    Box::new(s.to_string()),
                    Box::new(b.as_str().to_owned()),
                    Box::new(t.to_owned()),
                ],
                OnError::Db,
            )?;
        }
        Ok(())
    }

    fn set_branch_state(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        state: Option<&StateRoot>,
    ) -> Result<()> {
        self.defer(
            "UPDATE branches SET state = $1 WHERE session = $2 AND name = $3",
            vec![
                Box::new(state.map(|h| h.as_bytes().to_vec())),
                Box::new(s.to_string()),
                Box::new(name.as_str().to_owned()),
            ],
            OnError::Db,
        )
    }

    fn rename_branch(
        &mut self,
        s: &SessionId,
        from: &BranchName,
        to: &BranchName,
        sealed: bool,
    ) -> Result<()> {
        self.defer(
            "UPDATE branches SET name = $1, sealed = $2 WHERE session = $3 AND name = $4",
            vec![
                Box::new(to.as_str().to_owned()),
                Box::new(sealed),
                Box::new(s.to_string()),
                Box::new(from.as_str().to_owned()),
            ],
            OnError::Db,
        )
    }
}

impl PgTx<'_> {
    /// The nodes `WHERE {cond}` (on the row `n`) in follow order, each
    /// with its payload if asked (one query, the blobs joined).
    fn with_payloads(
        &mut self,
        cond: &str,
        p: &Params<'_>,
        payloads: bool,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>> {
        let cols = prefixed(NODE_COLS);
        let sql = if payloads {
            format!(
                "SELECT {cols}, bl.data, bl.chunked FROM nodes n LEFT JOIN blobs bl ON bl.hash = n.payload WHERE {cond} ORDER BY n.seq"
            )
        } else {
            format!(
                "SELECT {cols}, NULL::bytea, NULL::boolean FROM nodes n WHERE {cond} ORDER BY n.seq"
            )
        };
        let rows = self.query(&sql, p)?;
        rows.iter()
            .map(|r| {
                let data = r
                    .try_get::<_, Option<Vec<u8>>>(crate::backend::NODE_COL_COUNT)
                    .map_err(corrupt)?;
                let chunked = chunked_col(r, crate::backend::NODE_COL_COUNT + 1)?;
                let n = node_row(r)?;
                let p = data
                    .map(|d| self.payload_of(&n.node.payload, chunked, d))
                    .transpose()?;
                Ok((n, p))
            })
            .collect()
    }
}

impl NodeTx for PgTx<'_> {
    fn insert_node(&mut self, hash: &NodeHash, n: &Node, ctx: &Context) -> Result<u64> {
        if self.next_seq.is_none() {
            // `BEGIN`, the lock and the follow number, if not yet sent.
            self.send(None)?;
        }
        let seq = self
            .next_seq
            .ok_or_else(|| StoreError::backend("no follow number outside a write"))?;
        let ev = n.event.as_ref();
        let opt = |h: Option<&Digest>| h.map(|h| h.0.to_vec());
        self.defer(
            "INSERT INTO nodes (seq, hash, session, parent, kind, submission, sequence, sender, recipient, \
             payload, payload_len, diagnostics, state, created_at, ev_branch, ev_sealed, ev_nonce, \
             depth, ctx_sub, ctx_open, ctx_seq, ctx_state, ctx_turn) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)",
            vec![
                Box::new(seq),
                Box::new(hash.as_bytes().to_vec()),
                Box::new(n.session.to_string()),
                Box::new(opt(n.parent.as_ref().map(|h| &h.0))),
                Box::new(i16::from(n.kind.code())),
                Box::new(opt(n.submission.as_ref().map(|h| &h.0))),
                Box::new(n.sequence.map(i64::from)),
                Box::new(n.from.clone()),
                Box::new(n.to.clone()),
                Box::new(n.payload.as_bytes().to_vec()),
                Box::new(n.payload_len as i64),
                Box::new(n.diagnostics.as_str().to_owned()),
                Box::new(opt(n.state.as_ref().map(|h| &h.0))),
                Box::new(n.created_at),
                Box::new(ev.map(|e| e.branch.as_str().to_owned())),
                Box::new(ev.and_then(|e| e.sealed_as.as_ref().map(|s| s.as_str().to_owned()))),
                Box::new(ev.map(|e| e.nonce.to_vec())),
                Box::new(ctx.depth as i64),
                Box::new(opt(ctx.submission.as_ref().map(|h| &h.0))),
                Box::new(ctx.open),
                Box::new(i64::from(ctx.last_sequence)),
                Box::new(opt(ctx.state.as_ref().map(|h| &h.0))),
                Box::new(ctx.turn as i64),
            ],
            OnError::Stored(*hash),
        )?;
        self.next_seq = Some(seq + 1);
        self.wrote_nodes = true;
        Ok(seq as u64)
    }

    fn node(&mut self, h: &NodeHash) -> Result<Option<StoredNode>> {
        self.opt(
            &format!("SELECT {NODE_COLS} FROM nodes WHERE hash = $1"),
            &[&b(h.as_bytes())],
        )?
        .map(|r| node_row(&r))
        .transpose()
    }

    fn complete_by_thread(
        &mut self,
        field: crate::backend::ThreadField,
        value: &str,
    ) -> Result<Option<NodeHash>> {
        let f = field.as_str();
        self.opt(
            &format!(
                "SELECT hash FROM nodes WHERE kind = 4 AND convo_diag_field(diagnostics, '{f}') = $1 \
                 ORDER BY seq DESC LIMIT 1"
            ),
            &[&value],
        )?
        .map(|r| digest(&r, 0).map(NodeHash))
        .transpose()
    }

    fn nodes_with_prefix(&mut self, p: &HashPrefix, limit: usize) -> Result<Vec<NodeHash>> {
        let (lo, hi) = p.bounds();
        self.query(
            "SELECT hash FROM nodes WHERE hash >= $1 AND hash <= $2 ORDER BY hash LIMIT $3",
            &[&lo.as_slice(), &hi.as_slice(), &(limit as i64)],
        )?
        .iter()
        .map(|r| digest(r, 0).map(NodeHash))
        .collect()
    }

    fn session_nodes(
        &mut self,
        s: &SessionId,
        payloads: bool,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>> {
        self.with_payloads("n.session = $1", &[&s.to_string()], payloads)
    }

    fn session_links(&mut self, s: &SessionId) -> Result<Vec<crate::backend::Link>> {
        self.query(
            "SELECT hash, parent, kind, depth, ctx_turn, ctx_open FROM nodes \
             WHERE session = $1 ORDER BY seq",
            &[&s.to_string()],
        )?
        .iter()
        .map(link_row)
        .collect()
    }

    fn session_links_at(
        &mut self,
        s: &SessionId,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<crate::backend::Link>> {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.query(
            "SELECT hash, parent, kind, depth, ctx_turn, ctx_open FROM nodes \
             WHERE session = $1 AND depth BETWEEN $2 AND $3",
            &[&s.to_string(), &clamp(lo), &clamp(hi)],
        )?
        .iter()
        .map(link_row)
        .collect()
    }

    fn nodes_by_hash(&mut self, hashes: &[NodeHash]) -> Result<Vec<Option<StoredNode>>> {
        let found = self.by_hashes(hashes, false)?;
        Ok(found.into_iter().map(|f| f.map(|(n, _)| n)).collect())
    }

    fn nodes_with_payloads(&mut self, hashes: &[NodeHash]) -> Result<Vec<Option<NodeWithPayload>>> {
        let found = self.by_hashes(hashes, true)?;
        Ok(found
            .into_iter()
            .map(|f| f.and_then(|(n, p)| Some((n, p?))))
            .collect())
    }

    fn nodes_at(
        &mut self,
        seqs: &[u64],
        payloads: bool,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>> {
        let keys: Vec<i64> = seqs
            .iter()
            .map(|&s| i64::try_from(s).unwrap_or(i64::MAX))
            .collect();
        self.with_payloads("n.seq = ANY($1)", &[&keys], payloads)
    }

    fn nodes_since(&mut self, after: u64, limit: usize) -> Result<Vec<StoredNode>> {
        self.query(
            &format!("SELECT {NODE_COLS} FROM nodes WHERE seq > $1 ORDER BY seq LIMIT $2"),
            &[&(after.min(i64::MAX as u64) as i64), &(limit as i64)],
        )?
        .iter()
        .map(node_row)
        .collect()
    }

    fn max_seq(&mut self) -> Result<u64> {
        if let Some(next) = self.next_seq {
            return Ok(next.saturating_sub(1).max(0) as u64);
        }
        let rows = self.query("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM nodes", &[])?;
        let v: i64 = rows
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(db)?
            .unwrap_or(0);
        u64::try_from(v).map_err(|_| StoreError::corrupt("a stored follow number is negative"))
    }

    fn scan_nodes(&mut self, f: &mut NodeVisitor<'_>) -> Result<()> {
        self.stream(
            &format!("SELECT {NODE_COLS} FROM nodes ORDER BY seq"),
            &mut |r| match node_row(r) {
                Ok(n) => f(Ok(n)),
                Err(e) => {
                    let seq: i64 = r.try_get(0).unwrap_or(-1);
                    f(Err(format!("node row seq={seq} does not decode: {e}")))
                }
            },
        )
    }

    fn last_seq(&mut self) -> Result<u64> {
        if let Some(next) = self.next_seq {
            return Ok(next.saturating_sub(1).max(0) as u64);
        }
        let n: i64 = self
            .opt("SELECT COALESCE(MAX(seq), 0) FROM nodes", &[])?
            .map(|r| r.try_get(0).map_err(corrupt))
            .transpose()?
            .unwrap_or(0);
        Ok(n.max(0) as u64)
    }

    fn scan_node_hashes(&mut self, f: &mut dyn FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        self.stream("SELECT seq, hash FROM nodes ORDER BY seq", &mut |r| {
            let seq: i64 = r.try_get(0).map_err(corrupt)?;
            let h: &[u8] = r.try_get(1).map_err(corrupt)?;
            f(seq.max(0) as u64, h)
        })
    }
}

impl BlobTx for PgTx<'_> {
    fn payload_hash(&mut self, bytes: &[u8]) -> ContentHash {
        if bytes.len() >= crate::chunk::CHUNKED_FROM {
            self.c.recent.hash(bytes)
        } else {
            convo_core::hash::content_hash(bytes)
        }
    }

    fn put_blob(&mut self, h: &ContentHash, bytes: &[u8]) -> Result<()> {
        if bytes.len() >= crate::chunk::CHUNKED_FROM {
            // Chunked (see `chunk.rs`): the chunks not stored yet, unless
            // the payload is (whole, from before), then its manifest. Two
            // held-back statements, no round trip of their own. Hashed and
            // cut from where it differs from a payload stored lately
            // (`chunk::Recent`, the connection's, as on SQLite).
            let split = self.c.recent.split(h, bytes);
            let (hashes, datas): (Vec<&[u8]>, Vec<&[u8]>) = split
                .pieces
                .iter()
                .map(|(h, d)| (h.0.as_slice(), d.as_ref()))
                .unzip();
            if bytes.len() >= 1 << 20 {
                // Sent now, borrowed: a deferred statement owns a copy of
                // its parameters, one copy too many for a large payload.
                self.query(PUT_CHUNKS_SQL, &[&hashes, &datas, &b(h.as_bytes())])?;
            } else {
                let own = |v: Vec<&[u8]>| v.into_iter().map(<[u8]>::to_vec).collect::<Vec<_>>();
                self.defer(
                    PUT_CHUNKS_SQL,
                    vec![
                        Box::new(own(hashes)),
                        Box::new(own(datas)),
                        Box::new(h.as_bytes().to_vec()),
                    ],
                    OnError::Db,
                )?;
            }
            return self.defer(
                "INSERT INTO blobs (hash, data, chunked) VALUES ($1, $2, true) \
                 ON CONFLICT (hash) DO NOTHING",
                vec![Box::new(h.as_bytes().to_vec()), Box::new(split.manifest)],
                OnError::Db,
            );
        }
        self.defer(
            "INSERT INTO blobs (hash, data) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
            vec![Box::new(h.as_bytes().to_vec()), Box::new(bytes.to_vec())],
            OnError::Db,
        )
    }

    fn rechunk_pending(&mut self) -> Result<bool> {
        crate::chunk::Chunks::rechunk_pending(self)
    }

    fn rechunk(&mut self, after: i64, max: usize) -> Result<Option<i64>> {
        crate::chunk::rechunk(self, after, max)
    }

    fn blob(&mut self, h: &ContentHash) -> Result<Option<Vec<u8>>> {
        let Some(r) = self.opt(
            "SELECT data, chunked FROM blobs WHERE hash = $1",
            &[&b(h.as_bytes())],
        )?
        else {
            return Ok(None);
        };
        let data: Vec<u8> = r.try_get(0).map_err(corrupt)?;
        let chunked = chunked_col(&r, 1)?;
        self.payload_of(h, chunked, data).map(Some)
    }

    fn blob_previews(
        &mut self,
        hashes: &[ContentHash],
        max: usize,
    ) -> Result<Vec<Option<crate::backend::Preview>>> {
        // One round trip; `substring` of a TOASTed bytea fetches only the
        // slices it needs, and `octet_length` reads the stored size.
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.as_bytes().to_vec()).collect();
        let max = i32::try_from(max).unwrap_or(i32::MAX);
        let rows = self.query(
            "SELECT k.i, CASE WHEN b.chunked THEN b.data ELSE substring(b.data from 1 for $2) END, \
             octet_length(b.data)::bigint, b.chunked \
             FROM unnest($1::bytea[]) WITH ORDINALITY AS k(hash, i) \
             LEFT JOIN blobs b ON b.hash = k.hash ORDER BY k.i",
            &[&keys, &max],
        )?;
        let mut out = vec![None; hashes.len()];
        for r in rows {
            let i: i64 = r.try_get(0).map_err(corrupt)?;
            let data: Option<Vec<u8>> = r.try_get(1).map_err(corrupt)?;
            let len: Option<i64> = r.try_get(2).map_err(corrupt)?;
            if chunked_col(&r, 3)?
                && let (Some(m), Some(slot)) = (
                    data.as_ref(),
                    usize::try_from(i - 1).ok().filter(|i| *i < out.len()),
                )
            {
                // The manifest, then only the chunks with the first bytes.
                out[slot] = Some(crate::chunk::prefix(self, m, max as usize)?);
                continue;
            }
            if let (Some(d), Some(n), Some(slot)) = (
                data,
                len,
                usize::try_from(i - 1).ok().and_then(|i| out.get_mut(i)),
            ) {
                *slot = Some((d, n.max(0) as u64));
            }
        }
        Ok(out)
    }

    fn scan_blobs(&mut self, keep: bool, f: &mut crate::backend::PayloadVisitor<'_>) -> Result<()> {
        // Whole rows as they stream; chunked ones (small manifests) after
        // the stream, each hashed once.
        let mut chunked: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        self.stream(
            "SELECT hash, data, chunked FROM blobs ORDER BY id",
            &mut |r| {
                let h: Vec<u8> = r.try_get(0).map_err(corrupt)?;
                let d: Vec<u8> = r.try_get(1).map_err(corrupt)?;
                if chunked_col(r, 2)? {
                    chunked.push((h, d));
                    Ok(())
                } else {
                    f(&h, Ok(crate::backend::Scanned::Unchecked(&d)))
                }
            },
        )?;
        crate::chunk::scan_chunked(self, chunked, keep, f)?;
        Ok(())
    }

    fn scan_chunks(&mut self, f: &mut BlobVisitor<'_>) -> Result<()> {
        self.stream("SELECT hash, data FROM chunks ORDER BY id", &mut |r| {
            let h: Vec<u8> = r.try_get(0).map_err(corrupt)?;
            let d: Vec<u8> = r.try_get(1).map_err(corrupt)?;
            f(&h, &d)
        })
    }

    fn delete_blob(&mut self, h: &ContentHash) -> Result<bool> {
        let gone = self.query(
            "DELETE FROM blobs WHERE hash = $1 RETURNING chunked, data",
            &[&b(h.as_bytes())],
        )?;
        if let Some(r) = gone.first()
            && chunked_col(r, 0)?
        {
            // The chunks no other payload names go with it.
            let manifest: Vec<u8> = r.try_get(1).map_err(corrupt)?;
            crate::chunk::release(self, &manifest)?;
        }
        Ok(!gone.is_empty())
    }
}

impl StateTx for PgTx<'_> {
    fn put_state_node(&mut self, h: &Digest, body: &[u8]) -> Result<()> {
        self.defer(
            "INSERT INTO state_nodes (hash, body) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
            vec![Box::new(h.0.to_vec()), Box::new(body.to_vec())],
            OnError::Db,
        )
    }

    fn state_node(&mut self, h: &Digest) -> Result<Option<Vec<u8>>> {
        self.opt(
            "SELECT body FROM state_nodes WHERE hash = $1",
            &[&h.0.as_slice()],
        )?
        .map(|r| r.try_get(0).map_err(corrupt))
        .transpose()
    }

    fn scan_state_nodes(&mut self, f: &mut BlobVisitor<'_>) -> Result<()> {
        self.stream("SELECT hash, body FROM state_nodes", &mut |r| {
            let h: Vec<u8> = r.try_get(0).map_err(corrupt)?;
            let d: Vec<u8> = r.try_get(1).map_err(corrupt)?;
            f(&h, &d)
        })
    }
}

const OTLP_COLS: &str =
    "seq, sessions, received_at, media, base, nodes_from, nodes_to, body_len, residual";

impl PgTx<'_> {
    fn otlp_rows(&mut self, sql: &str, p: &Params<'_>) -> Result<Vec<crate::OtlpExportRow>> {
        self.query(sql, p)?
            .iter()
            .map(|r| crate::backend::otlp_export_row(r).map_err(StoreError::corrupt))
            .collect()
    }

    fn put_otlp(&mut self, seq: u64, row: &crate::OtlpExportRow) -> Result<()> {
        let opt = |v: Option<u64>| v.map(|x| x as i64);
        self.defer(
            "INSERT INTO otlp_exports (seq, sessions, received_at, media, base, nodes_from, nodes_to, body_len, residual) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            vec![
                Box::new(seq as i64),
                Box::new(crate::backend::otlp_sessions_col(&row.sessions)),
                Box::new(row.received_at),
                Box::new(row.media.clone()),
                Box::new(opt(row.base)),
                Box::new(opt(row.nodes.map(|n| n.0))),
                Box::new(opt(row.nodes.map(|n| n.1))),
                Box::new(row.body_len as i64),
                Box::new(row.residual.clone()),
            ],
            OnError::Conflict,
        )
    }
}

impl TelemetryTx for PgTx<'_> {
    fn delete_otlp_export(&mut self, seq: u64) -> Result<()> {
        self.defer(
            "DELETE FROM otlp_exports WHERE seq = $1",
            vec![Box::new(seq as i64)],
            OnError::Db,
        )
    }

    fn insert_otlp_export(&mut self, row: &crate::OtlpExportRow) -> Result<u64> {
        let last = self
            .opt("SELECT COALESCE(MAX(seq), 0) FROM otlp_exports", &[])?
            .map(|r| r.try_get::<_, i64>(0).map_err(corrupt))
            .transpose()?
            .unwrap_or(0);
        let seq = last.max(0) as u64 + 1;
        self.put_otlp(seq, row)?;
        Ok(seq)
    }

    fn put_otlp_export(&mut self, row: &crate::OtlpExportRow) -> Result<()> {
        self.put_otlp(row.seq, row)
    }

    fn otlp_exports(&mut self, session: Option<&SessionId>) -> Result<Vec<crate::OtlpExportRow>> {
        match session {
            Some(s) => {
                let like = format!("% {s} %");
                self.otlp_rows(
                    &format!(
                        "SELECT {OTLP_COLS} FROM otlp_exports WHERE sessions LIKE $1 ORDER BY seq"
                    ),
                    &[&like],
                )
            }
            None => self.otlp_rows(
                &format!("SELECT {OTLP_COLS} FROM otlp_exports ORDER BY seq"),
                &[],
            ),
        }
    }

    fn otlp_export(&mut self, seq: u64) -> Result<Option<crate::OtlpExportRow>> {
        Ok(self
            .otlp_rows(
                &format!("SELECT {OTLP_COLS} FROM otlp_exports WHERE seq = $1"),
                &[&(seq as i64)],
            )?
            .pop())
    }
}

impl FactTx for PgTx<'_> {
    fn insert_fact(&mut self, seq: u64, hash: &Digest, body: &[u8]) -> Result<()> {
        self.defer(
            "INSERT INTO facts (seq, hash, body) VALUES ($1, $2, $3)",
            vec![
                Box::new(seq as i64),
                Box::new(hash.0.to_vec()),
                Box::new(body.to_vec()),
            ],
            OnError::Db,
        )
    }

    fn last_fact(&mut self) -> Result<Option<(u64, Digest)>> {
        self.opt("SELECT seq, hash FROM facts ORDER BY seq DESC LIMIT 1", &[])?
            .map(|r| {
                let seq: i64 = r.try_get(0).map_err(corrupt)?;
                Ok((seq.max(0) as u64, digest(&r, 1)?))
            })
            .transpose()
    }

    fn facts(&mut self) -> Result<Vec<crate::backend::Decoded<crate::backend::FactRow>>> {
        Ok(self
            .query("SELECT seq, hash, body FROM facts ORDER BY seq", &[])?
            .iter()
            .map(|r| {
                let seq: i64 = r.try_get(0).map_err(|e| e.to_string())?;
                Ok(crate::backend::FactRow {
                    seq: u64::try_from(seq)
                        .map_err(|_| format!("fact row {seq} has a negative number"))?,
                    hash: r.try_get(1).map_err(|e| e.to_string())?,
                    body: r.try_get(2).map_err(|e| e.to_string())?,
                })
            })
            .collect())
    }
}

impl SearchTx for PgTx<'_> {
    fn search_cursor(&mut self) -> Result<u64> {
        let c: Option<i64> = self
            .opt("SELECT cursor FROM search_state WHERE id = 1", &[])?
            .map(|r| r.try_get(0).map_err(corrupt))
            .transpose()?;
        Ok(c.unwrap_or(0).max(0) as u64)
    }

    fn search_add(&mut self, docs: &[(u64, Vec<String>)], cursor: u64) -> Result<()> {
        if !docs.is_empty() {
            let seqs: Vec<i64> = docs.iter().map(|(s, _)| *s as i64).collect();
            let vecs: Vec<String> = docs
                .iter()
                .map(|(_, w)| crate::search::tsvector(w))
                .collect();
            self.defer(
                "INSERT INTO search_index (seq, doc) \
                 SELECT s, d::tsvector FROM unnest($1::bigint[], $2::text[]) AS t(s, d)",
                vec![Box::new(seqs), Box::new(vecs)],
                OnError::Db,
            )?;
        }
        self.defer(
            "UPDATE search_state SET cursor = $1 WHERE id = 1",
            vec![Box::new(cursor as i64)],
            OnError::Db,
        )
    }

    fn search_forget(&mut self, h: &ContentHash) -> Result<()> {
        self.defer(
            "DELETE FROM search_index WHERE seq IN (SELECT seq FROM nodes WHERE payload = $1)",
            vec![Box::new(h.as_bytes().to_vec())],
            OnError::Db,
        )
    }

    fn search_clear(&mut self) -> Result<()> {
        self.defer("DELETE FROM search_index", Vec::new(), OnError::Db)?;
        self.defer(
            "UPDATE search_state SET cursor = 0 WHERE id = 1",
            Vec::new(),
            OnError::Db,
        )
    }

    fn search_match(&mut self, q: &crate::search::IndexQuery<'_>) -> Result<Vec<(u64, f64)>> {
        use crate::search::Param;
        let diag = |k: &str| format!("convo_diag_field(n.diagnostics, '{k}')");
        let (conds, values) = crate::search::conditions(q, '$', 2, &diag);
        let limit = q.limit.map_or_else(|| "ALL".to_owned(), |l| l.to_string());
        let sql = format!(
            "SELECT s.seq, ts_rank_cd(s.doc, $1::text::tsquery)::float8 AS rank FROM search_index s \
             JOIN nodes n ON n.seq = s.seq \
             WHERE s.doc @@ $1::text::tsquery{conds} ORDER BY rank DESC, s.seq DESC LIMIT {limit}"
        );
        let query = crate::search::tsquery(q.query);
        let owned: Vec<Box<dyn ToSql + Sync>> = values
            .into_iter()
            .map(|p| -> Box<dyn ToSql + Sync> {
                match p {
                    Param::Text(t) => Box::new(t),
                    Param::Int(i) => Box::new(i),
                }
            })
            .collect();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&query];
        params.extend(owned.iter().map(|b| b.as_ref()));
        self.query(&sql, &params)?
            .iter()
            .map(|r| {
                let seq: i64 = r.try_get(0).map_err(corrupt)?;
                let rank: f64 = r.try_get(1).map_err(corrupt)?;
                Ok((seq.max(0) as u64, rank))
            })
            .collect()
    }
}

impl RedactionTx for PgTx<'_> {
    fn set_node_diagnostics(&mut self, h: &NodeHash, diagnostics: &str) -> Result<()> {
        self.defer(
            "UPDATE nodes SET diagnostics = $2 WHERE hash = $1",
            vec![
                Box::new(h.as_bytes().to_vec()),
                Box::new(diagnostics.to_owned()),
            ],
            OnError::Db,
        )
    }

    fn set_fact_body(&mut self, seq: u64, body: &[u8]) -> Result<()> {
        self.defer(
            "UPDATE facts SET body = $2 WHERE seq = $1",
            vec![Box::new(seq as i64), Box::new(body.to_vec())],
            OnError::Db,
        )
    }

    fn insert_redaction(&mut self, h: &ContentHash, fact: u64) -> Result<()> {
        self.defer(
            "INSERT INTO redactions (hash, fact) VALUES ($1, $2)",
            vec![Box::new(h.as_bytes().to_vec()), Box::new(fact as i64)],
            OnError::Db,
        )
    }

    fn redaction(&mut self, h: &ContentHash) -> Result<Option<(u64, Vec<u8>)>> {
        self.opt(
            "SELECT f.seq, f.body FROM redactions r JOIN facts f ON f.seq = r.fact WHERE r.hash = $1",
            &[&b(h.as_bytes())],
        )?
        .map(|r| {
            let seq: i64 = r.try_get(0).map_err(corrupt)?;
            Ok((seq.max(0) as u64, r.try_get(1).map_err(corrupt)?))
        })
        .transpose()
    }

    fn redaction_rows(&mut self) -> Result<Vec<crate::backend::RedactionRow>> {
        Ok(self
            .query("SELECT hash, fact FROM redactions ORDER BY fact", &[])?
            .iter()
            .map(|r| {
                let h: Vec<u8> = r.try_get(0).map_err(|e| e.to_string())?;
                let f: i64 = r.try_get(1).map_err(|e| e.to_string())?;
                let f = u64::try_from(f)
                    .map_err(|_| format!("redaction row has a negative fact number {f}"))?;
                Ok((h, f))
            })
            .collect())
    }
}

impl CheckTx for PgTx<'_> {
    fn session_rows(&mut self) -> Result<Vec<crate::backend::Decoded<SessionRow>>> {
        Ok(self
            .query(
                "SELECT id, agent, title, created_at FROM sessions ORDER BY id COLLATE \"C\"",
                &[],
            )?
            .iter()
            .map(|r| {
                session_row(r).map_err(|e| {
                    let id: String = r.try_get(0).unwrap_or_default();
                    format!("session row `{id}` does not decode: {e}")
                })
            })
            .collect())
    }

    fn branch_rows(&mut self) -> Result<Vec<crate::backend::Decoded<BranchRow>>> {
        Ok(self
            .query(
                &format!("SELECT {BRANCH_COLS} FROM branches ORDER BY session COLLATE \"C\", name COLLATE \"C\""),
                &[],
            )?
            .iter()
            .map(|r| {
                branch_row(r).map_err(|e| {
                    let s: String = r.try_get(0).unwrap_or_default();
                    let n: String = r.try_get(1).unwrap_or_default();
                    format!("branch row `{s}/{n}` does not decode: {e}")
                })
            })
            .collect())
    }
}

/// A [`crate::backend::Link`] from `hash, parent, kind, depth, ctx_turn, ctx_open`.
fn link_row(r: &Row) -> Result<crate::backend::Link> {
    let kind: i16 = r.try_get(2).map_err(corrupt)?;
    let kind = u8::try_from(kind)
        .ok()
        .and_then(convo_core::Kind::from_code)
        .ok_or_else(|| corrupt("a stored node kind is unknown"))?;
    let count = |i: usize, what: &str| -> Result<u64> {
        u64::try_from(r.try_get::<_, i64>(i).map_err(corrupt)?)
            .map_err(|_| corrupt(format!("a stored {what} is negative")))
    };
    Ok(crate::backend::Link::of(
        NodeHash(digest(r, 0)?),
        opt_digest(r, 1)?.map(NodeHash),
        kind,
        count(3, "depth")?,
        count(4, "turn number")?,
        r.try_get(5).map_err(corrupt)?,
    ))
}

impl ImportTx for PgTx<'_> {
    fn import_key(&mut self, s: &SessionId, key: &str) -> Result<Option<NodeHash>> {
        self.opt(
            "SELECT node FROM import_keys WHERE session = $1 AND key = $2",
            &[&s.to_string(), &key],
        )?
        .map(|r| digest(&r, 0).map(NodeHash))
        .transpose()
    }

    fn put_import_keys(&mut self, s: &SessionId, keys: &[(String, NodeHash)]) -> Result<()> {
        for (k, h) in keys {
            self.defer(
                "INSERT INTO import_keys (session, key, node) VALUES ($1, $2, $3) \
                 ON CONFLICT (session, key) DO UPDATE SET node = excluded.node",
                vec![
                    Box::new(s.to_string()),
                    Box::new(k.clone()),
                    Box::new(h.as_bytes().to_vec()),
                ],
                OnError::Db,
            )?;
        }
        Ok(())
    }

    fn import_tail(&mut self, s: &SessionId) -> Result<Option<String>> {
        self.opt(
            "SELECT tail FROM import_tails WHERE session = $1",
            &[&s.to_string()],
        )?
        .map(|r| r.try_get::<_, String>(0).map_err(corrupt))
        .transpose()
    }

    fn set_import_tail(&mut self, s: &SessionId, tail: &str) -> Result<()> {
        self.defer(
            "INSERT INTO import_tails (session, tail) VALUES ($1, $2) \
             ON CONFLICT (session) DO UPDATE SET tail = excluded.tail",
            vec![Box::new(s.to_string()), Box::new(tail.to_owned())],
            OnError::Db,
        )
    }

    fn scan_import_index(
        &mut self,
        f: &mut dyn FnMut(crate::backend::ImportRow) -> Result<()>,
    ) -> Result<()> {
        use crate::backend::ImportRow;
        let session = |r: &Row| -> Result<SessionId> {
            let s: String = r.try_get(0).map_err(corrupt)?;
            SessionId::parse(&s)
                .map_err(|_| corrupt(format!("import index: session `{s}` is malformed")))
        };
        self.stream(
            "SELECT session, key, node FROM import_keys ORDER BY session, key",
            &mut |r| {
                let node = NodeHash(digest(r, 2)?);
                f(ImportRow::Key(
                    session(r)?,
                    r.try_get(1).map_err(corrupt)?,
                    node,
                ))
            },
        )?;
        self.stream(
            "SELECT session, tail FROM import_tails ORDER BY session",
            &mut |r| f(ImportRow::Tail(session(r)?, r.try_get(1).map_err(corrupt)?)),
        )?;
        for (path, look) in self.import_files()? {
            f(ImportRow::File(path, look))?;
        }
        Ok(())
    }

    fn import_files(&mut self) -> Result<Vec<(String, String)>> {
        self.query("SELECT path, look FROM import_files", &[])?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get(0).map_err(corrupt)?,
                    r.try_get(1).map_err(corrupt)?,
                ))
            })
            .collect()
    }

    fn put_import_files(&mut self, files: &[(String, String)]) -> Result<()> {
        for (path, look) in files {
            self.defer(
                "INSERT INTO import_files (path, look) VALUES ($1, $2) \
                 ON CONFLICT (path) DO UPDATE SET look = excluded.look",
                vec![Box::new(path.clone()), Box::new(look.clone())],
                OnError::Db,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            super::redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
