//! The PostgreSQL backend (the sync `postgres` client; no libpq).
//!
//! Selected by a `postgres://` URL. Every write transaction first takes one
//! transaction-scoped advisory lock, so writers from any number of processes
//! and machines queue exactly as SQLite's writers do: a node's follow
//! sequence number is `max + 1` assigned under that lock, hence store-wide,
//! gap-free and in commit order, and a writer killed mid-transaction rolls
//! back without leaving a gap. Reads run in `REPEATABLE READ` snapshots and
//! never block writers. A write that commits nodes sends `NOTIFY
//! convo_nodes`, which `convo watch` listens to. Serialization failures,
//! deadlocks and lost compare-and-swaps are retried inside, with a bound.
//! Migrations live in `migrations/postgres/`, tracked in `convo_schema`.

use crate::backend::{Backend, BlobVisitor, BranchRow, NodeVisitor, SessionRow, StoredNode, Tx};
use crate::{Result, StoreError};
use convo_core::timeline::Context;
use convo_core::{
    BranchName, ContentHash, Digest, HashPrefix, Node, NodeHash, SessionId, StateRoot,
};
use postgres::error::SqlState;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;
use postgres::{Client, IsolationLevel, NoTls, Row, Statement};
use std::collections::HashMap;
use std::time::Duration;

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres/0001_init.sql"),
    include_str!("../migrations/postgres/0002_facts.sql"),
    include_str!("../migrations/postgres/0004_redact.sql"),
];
/// The schema version whose migration starts the fact journal (see `sqlite.rs`).
const FACTS_VERSION: usize = 2;
/// Key of the advisory lock every writer takes.
const WRITE_LOCK: i64 = 0x636f_6e76_6f01;
const MIGRATE_LOCK: i64 = 0x636f_6e76_6f02;
use crate::backend::RETRY_BUDGET;

/// A PostgreSQL store.
pub struct Postgres {
    client: Client,
    listening: bool,
    /// Prepared statements are per connection and outlive transactions.
    statements: HashMap<String, Statement>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Postgres")
    }
}

fn db(e: postgres::Error) -> StoreError {
    match e.code() {
        Some(c)
            if *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::T_R_DEADLOCK_DETECTED =>
        {
            StoreError::Busy(RETRY_BUDGET.as_secs())
        }
        _ => StoreError::Backend(describe(&e)),
    }
}

/// What the server said (`FATAL: database "x" does not exist (SQLSTATE
/// 3D000)`), or the client's error with its causes (`error connecting to
/// server: Connection refused (os error 111)`): `postgres::Error`'s own
/// `Display` says only `db error`.
pub fn describe(e: &postgres::Error) -> String {
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
    StoreError::Corrupt(what.to_string())
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
        let client =
            Client::connect(url, NoTls).map_err(|e| StoreError::Url(redact(url), describe(&e)))?;
        let mut me = Postgres {
            client,
            listening: false,
            statements: HashMap::new(),
        };
        if access == crate::Access::Read {
            let exists: bool = me
                .client
                .query_one("SELECT to_regclass('convo_schema') IS NOT NULL", &[])
                .map_err(db)?
                .get(0);
            if !exists {
                return Err(StoreError::NoStore(redact(url)));
            }
        }
        me.migrate()?;
        Ok(me)
    }

    fn migrate(&mut self) -> Result<()> {
        let known = MIGRATIONS.len() as i64;
        let mut tx = self.client.transaction().map_err(db)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
            .map_err(db)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS convo_schema (version BIGINT NOT NULL)")
            .map_err(db)?;
        let version: i64 = tx
            .query_opt("SELECT version FROM convo_schema", &[])
            .map_err(db)?
            .map(|r| r.get(0))
            .unwrap_or(0);
        if version > known {
            return Err(StoreError::SchemaTooNew {
                found: version,
                known,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.batch_execute(sql).map_err(db)?;
            tx.execute("DELETE FROM convo_schema", &[]).map_err(db)?;
            tx.execute(
                "INSERT INTO convo_schema (version) VALUES ($1)",
                &[&(i as i64 + 1)],
            )
            .map_err(db)?;
            if i + 1 == FACTS_VERSION {
                let mut t = PgTx {
                    tx: &mut tx,
                    wrote_nodes: false,
                    next_seq: None,
                    statements: &mut HashMap::new(),
                };
                crate::ledger::journal_existing(&mut t)?;
            }
        }
        tx.commit().map_err(db)
    }

    fn run(&mut self, write: bool, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        crate::backend::retrying(|| {
            let mut tx = if write {
                let mut tx = self
                    .client
                    .build_transaction()
                    .isolation_level(IsolationLevel::ReadCommitted)
                    .start()
                    .map_err(db)?;
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[&WRITE_LOCK])
                    .map_err(db)?;
                tx
            } else {
                self.client
                    .build_transaction()
                    .isolation_level(IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .map_err(db)?
            };
            let mut t = PgTx {
                tx: &mut tx,
                wrote_nodes: false,
                next_seq: None,
                statements: &mut self.statements,
            };
            f(&mut t)?;
            if t.wrote_nodes {
                tx.execute("SELECT pg_notify('convo_nodes', '')", &[])
                    .map_err(db)?;
            }
            tx.commit().map_err(db)
        })
    }
}

/// The URL without its password, for error messages.
/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

impl Backend for Postgres {
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.run(true, f)
    }
    fn read(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.run(false, f)
    }
    fn kind(&self) -> &'static str {
        "postgres"
    }
    fn erase_freed(&mut self) -> Result<Option<String>> {
        // A deleted row stays in the heap (and its TOAST table) until the
        // table is rewritten; VACUUM FULL writes new files and drops the old.
        // ANALYZE may have sampled the bytes into pg_statistic: analyze
        // again (the row is gone) and rewrite that catalog too, which needs
        // the database's owner.
        for sql in ["VACUUM FULL blobs", "ANALYZE blobs"] {
            self.client.batch_execute(sql).map_err(db)?;
        }
        Ok(self
            .client
            .batch_execute("VACUUM FULL pg_statistic")
            .err()
            .map(|e| {
                format!(
                    "pg_statistic was not rewritten ({}), so column statistics sampled \
                     before the redaction may keep the bytes until the database's owner runs \
                     `VACUUM FULL pg_statistic`",
                    describe(&e)
                )
            }))
    }
    fn wait_for_append(&mut self, timeout: Duration) -> Result<()> {
        if !self.listening {
            self.client
                .batch_execute("LISTEN convo_nodes")
                .map_err(db)?;
            self.listening = true;
        }
        let mut n = self.client.notifications();
        let got = n.timeout_iter(timeout).next().map_err(db)?.is_some();
        if got {
            // Drain whatever else arrived; one wake-up is enough.
            while n.iter().next().map_err(db)?.is_some() {}
        }
        Ok(())
    }
}

struct PgTx<'a, 'b> {
    tx: &'a mut postgres::Transaction<'b>,
    wrote_nodes: bool,
    /// The next follow number; read once per transaction, which the
    /// writers' advisory lock makes safe.
    next_seq: Option<i64>,
    statements: &'a mut HashMap<String, Statement>,
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
        use postgres::types::Type;
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

type Params<'p> = [&'p (dyn ToSql + Sync)];

impl PgTx<'_, '_> {
    fn prepare_cached(&mut self, sql: &str) -> Result<Statement> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = self.tx.prepare(sql).map_err(db)?;
        self.statements.insert(sql.to_owned(), st.clone());
        Ok(st)
    }
    fn query(&mut self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>> {
        let st = self.prepare_cached(sql)?;
        self.tx.query(&st, params).map_err(db)
    }
    fn opt(&mut self, sql: &str, params: &Params<'_>) -> Result<Option<Row>> {
        let st = self.prepare_cached(sql)?;
        self.tx.query_opt(&st, params).map_err(db)
    }
    fn exec(&mut self, sql: &str, params: &Params<'_>) -> Result<u64> {
        let st = self.prepare_cached(sql)?;
        self.tx.execute(&st, params).map_err(db)
    }
    fn stream(&mut self, sql: &str, f: &mut dyn FnMut(&Row) -> Result<()>) -> Result<()> {
        let mut rows = self
            .tx
            .query_raw(sql, std::iter::empty::<&(dyn ToSql + Sync)>())
            .map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            f(&r)?;
        }
        Ok(())
    }
}

impl Tx for PgTx<'_, '_> {
    fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        self.exec(
            "INSERT INTO sessions (id, agent, title, created_at) VALUES ($1, $2, $3, $4)",
            &[&s.id.to_string(), &s.agent, &s.title, &s.created_at],
        )?;
        Ok(())
    }

    fn set_session_title(&mut self, id: &SessionId, title: Option<&str>) -> Result<()> {
        self.exec(
            "UPDATE sessions SET title = $2 WHERE id = $1",
            &[&id.to_string(), &title],
        )?;
        Ok(())
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
        self.exec(
            "INSERT INTO branches (session, name, head, state, sealed, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &br.session.to_string(),
                &br.name.as_str(),
                &br.head.as_ref().map(|h| b(h.as_bytes())),
                &br.state.as_ref().map(|h| b(h.as_bytes())),
                &br.sealed,
                &br.created_at,
            ],
        )?;
        Ok(())
    }

    fn cas_head(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        old: Option<&NodeHash>,
        new: &NodeHash,
    ) -> Result<bool> {
        let n = self.exec(
            "UPDATE branches SET head = $1 WHERE session = $2 AND name = $3 AND head IS NOT DISTINCT FROM $4",
            &[&b(new.as_bytes()), &s.to_string(), &name.as_str(), &old.map(|h| b(h.as_bytes()))],
        )?;
        Ok(n == 1)
    }

    fn set_branch_state(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        state: Option<&StateRoot>,
    ) -> Result<()> {
        self.exec(
            "UPDATE branches SET state = $1 WHERE session = $2 AND name = $3",
            &[
                &state.map(|h| b(h.as_bytes())),
                &s.to_string(),
                &name.as_str(),
            ],
        )?;
        Ok(())
    }

    fn rename_branch(
        &mut self,
        s: &SessionId,
        from: &BranchName,
        to: &BranchName,
        sealed: bool,
    ) -> Result<()> {
        self.exec(
            "UPDATE branches SET name = $1, sealed = $2 WHERE session = $3 AND name = $4",
            &[&to.as_str(), &sealed, &s.to_string(), &from.as_str()],
        )?;
        Ok(())
    }

    fn insert_node(&mut self, hash: &NodeHash, n: &Node, ctx: &Context) -> Result<u64> {
        let seq: i64 = match self.next_seq {
            Some(n) => n,
            None => self
                .opt("SELECT COALESCE(MAX(seq), 0) + 1 FROM nodes", &[])?
                .map(|r| r.get(0))
                .unwrap_or(1),
        };
        let ev = n.event.as_ref();
        let res = self.exec(
            "INSERT INTO nodes (seq, hash, session, parent, kind, submission, sequence, sender, recipient, \
             payload, payload_len, diagnostics, state, created_at, ev_branch, ev_sealed, ev_nonce, \
             depth, ctx_sub, ctx_open, ctx_seq, ctx_state) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22) \
             ON CONFLICT (hash) DO NOTHING",
            &[
                &seq,
                &b(hash.as_bytes()),
                &n.session.to_string(),
                &n.parent.as_ref().map(|h| b(h.as_bytes())),
                &i16::from(n.kind.code()),
                &n.submission.as_ref().map(|h| b(h.as_bytes())),
                &n.sequence.map(i64::from),
                &n.from,
                &n.to,
                &b(n.payload.as_bytes()),
                &(n.payload_len as i64),
                &n.diagnostics.as_str(),
                &n.state.as_ref().map(|h| b(h.as_bytes())),
                &n.created_at,
                &ev.map(|e| e.branch.as_str()),
                &ev.and_then(|e| e.sealed_as.as_ref().map(|s| s.as_str())),
                &ev.map(|e| e.nonce.as_slice()),
                &(ctx.depth as i64),
                &ctx.submission.as_ref().map(|h| b(h.as_bytes())),
                &ctx.open,
                &i64::from(ctx.last_sequence),
                &ctx.state.as_ref().map(|h| b(h.as_bytes())),
            ],
        )?;
        if res == 0 {
            return Err(StoreError::Invalid(format!(
                "node {hash} is already stored"
            )));
        }
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
        let cols = NODE_COLS
            .split(", ")
            .map(|c| format!("n.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = if payloads {
            format!(
                "SELECT {cols}, bl.data FROM nodes n LEFT JOIN blobs bl ON bl.hash = n.payload WHERE n.session = $1 ORDER BY n.seq"
            )
        } else {
            format!("SELECT {cols}, NULL::bytea FROM nodes n WHERE n.session = $1 ORDER BY n.seq")
        };
        self.query(&sql, &[&s.to_string()])?
            .iter()
            .map(|r| {
                Ok((
                    node_row(r)?,
                    r.try_get::<_, Option<Vec<u8>>>(22).map_err(corrupt)?,
                ))
            })
            .collect()
    }

    fn nodes_since(&mut self, after: u64, limit: usize) -> Result<Vec<StoredNode>> {
        self.query(
            &format!("SELECT {NODE_COLS} FROM nodes WHERE seq > $1 ORDER BY seq LIMIT $2"),
            &[&(after as i64), &(limit as i64)],
        )?
        .iter()
        .map(node_row)
        .collect()
    }

    fn max_seq(&mut self) -> Result<u64> {
        let rows = self.query("SELECT COALESCE(MAX(seq), 0)::BIGINT FROM nodes", &[])?;
        let v: i64 = rows
            .first()
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(db)?
            .unwrap_or(0);
        u64::try_from(v)
            .map_err(|_| StoreError::Corrupt("a stored follow number is negative".into()))
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

    fn put_blob(&mut self, h: &ContentHash, bytes: &[u8]) -> Result<()> {
        self.exec(
            "INSERT INTO blobs (hash, data) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
            &[&b(h.as_bytes()), &bytes],
        )?;
        Ok(())
    }

    fn blob(&mut self, h: &ContentHash) -> Result<Option<Vec<u8>>> {
        self.opt(
            "SELECT data FROM blobs WHERE hash = $1",
            &[&b(h.as_bytes())],
        )?
        .map(|r| r.try_get(0).map_err(corrupt))
        .transpose()
    }

    fn scan_blobs(&mut self, f: &mut BlobVisitor<'_>) -> Result<()> {
        self.stream("SELECT hash, data FROM blobs ORDER BY id", &mut |r| {
            let h: Vec<u8> = r.try_get(0).map_err(corrupt)?;
            let d: Vec<u8> = r.try_get(1).map_err(corrupt)?;
            f(&h, &d)
        })
    }

    fn put_state_node(&mut self, h: &Digest, body: &[u8]) -> Result<()> {
        self.exec(
            "INSERT INTO state_nodes (hash, body) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
            &[&h.0.as_slice(), &body],
        )?;
        Ok(())
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

    fn last_seq(&mut self) -> Result<u64> {
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

    fn insert_fact(&mut self, seq: u64, hash: &Digest, body: &[u8]) -> Result<()> {
        self.exec(
            "INSERT INTO facts (seq, hash, body) VALUES ($1, $2, $3)",
            &[&(seq as i64), &hash.0.as_slice(), &body],
        )?;
        Ok(())
    }

    fn last_fact(&mut self) -> Result<Option<(u64, Digest)>> {
        self.opt("SELECT seq, hash FROM facts ORDER BY seq DESC LIMIT 1", &[])?
            .map(|r| {
                let seq: i64 = r.try_get(0).map_err(corrupt)?;
                Ok((seq.max(0) as u64, digest(&r, 1)?))
            })
            .transpose()
    }

    fn delete_blob(&mut self, h: &ContentHash) -> Result<bool> {
        Ok(self.exec("DELETE FROM blobs WHERE hash = $1", &[&b(h.as_bytes())])? > 0)
    }

    fn insert_redaction(&mut self, h: &ContentHash, fact: u64) -> Result<()> {
        self.exec(
            "INSERT INTO redactions (hash, fact) VALUES ($1, $2)",
            &[&b(h.as_bytes()), &(fact as i64)],
        )?;
        Ok(())
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
