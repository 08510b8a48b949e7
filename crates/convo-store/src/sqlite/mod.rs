//! The SQLite backend (`rusqlite`, bundled SQLite).
//!
//! WAL journal, one `BEGIN IMMEDIATE` transaction per write so concurrent
//! writers queue on SQLite's lock instead of failing, a busy timeout plus a
//! bounded retry loop so `database is locked` never reaches the user, and
//! `synchronous=NORMAL` by default (a commit survives a crash of convo; add
//! `?sync=full` to the URL to also survive power loss). Migrations live in
//! `migrations/sqlite/` and are tracked with `PRAGMA user_version`.

use crate::backend::{Backend, BranchRow, SessionRow, StoredNode, Tx};
use crate::tx::*;
use crate::{Cause, Result, StoreError};
use convo_core::timeline::Context;
use convo_core::{
    BranchName, ContentHash, Digest, HashPrefix, Node, NodeHash, SessionId, StateRoot,
};
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};
use std::path::Path;

mod schema;
use schema::{MIGRATIONS, schema_mismatch};

/// How long a writer waits for another writer before giving up.
use crate::backend::RETRY_BUDGET as BUSY_BUDGET;

/// A SQLite store.
pub struct Sqlite {
    conn: Connection,
    /// The database file; `None` in memory.
    path: Option<std::path::PathBuf>,
    /// A short-lived writer (see [`Maintenance::keep_log_on_close`](crate::Maintenance::keep_log_on_close)): the log
    /// is folded in at close only once it is larger than this.
    fold_log_over: Option<u64>,
    /// The large payloads hashed and cut lately, and the chunks known to
    /// be stored (`chunk.rs`): the next call of a conversation is hashed
    /// and cut from where it differs from the one before.
    recent: crate::chunk::Recent,
    stored: crate::chunk::Stored,
    /// How long a write waits for a lock ([`Maintenance::busy_wait`](crate::Maintenance::busy_wait)).
    busy_budget: std::time::Duration,
}

/// The write-ahead log a short-lived writer leaves behind before it folds
/// it into the database file (at close, with `wal_checkpoint(TRUNCATE)`).
/// Each process that opens the store rebuilds its index of the log by
/// reading the log, and SQLite's own automatic checkpoint cannot finish
/// the job across processes (the rebuilt index forgets what was copied,
/// so every later commit copied the whole log again, and the log never
/// shrank); so a short writer turns it off and folds the log itself.
const SHORT_WRITER_LOG: u64 = 1 << 20;

impl Drop for Sqlite {
    fn drop(&mut self) {
        let (Some(limit), Some(path)) = (self.fold_log_over, &self.path) else {
            return;
        };
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        if std::fs::metadata(&wal).is_ok_and(|m| m.len() > limit) {
            // Best effort: a busy store is folded by a later writer.
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
}

/// The file that marks a store SQLite found damaged (next to the database,
/// like its `-wal` and `-shm` files): written when an integrity check or
/// any statement reports corruption, removed when `verify` finds the
/// database sound again. While it exists the store refuses writes.
pub fn damaged_marker(db: &Path) -> std::path::PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-damaged");
    std::path::PathBuf::from(name)
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sqlite")
    }
}

fn db(e: rusqlite::Error) -> StoreError {
    if matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
    ) {
        return StoreError::Corrupt(Cause::from_error(e));
    }
    if is_busy(&e) {
        return StoreError::Busy(BUSY_BUDGET.as_secs());
    }
    if matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    ) {
        return StoreError::Damaged(Cause::from_error(e));
    }
    StoreError::backend_from(e)
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// `PRAGMA application_id` of a convo store ("conv"). Stores made before
/// it was set have 0, which is accepted when the convo tables are there.
const APPLICATION_ID: i64 = 0x636f_6e76;
/// WAL pages after a commit at which [`Maintenance::defer_checkpoints`](crate::Maintenance::defer_checkpoints) asks
/// for a checkpoint on the other thread (SQLite's own default threshold).
const WAL_CHECKPOINT_PAGES: std::ffi::c_int = 1000;
/// WAL pages added after which the next checkpoint is asked for.
const WAL_CHECKPOINT_STEP: std::ffi::c_int = 500;
/// WAL pages at which a commit checkpoints inline all the same.
const WAL_INLINE_PAGES: std::ffi::c_int = 4000;

/// The SQLite file path of a store URL and whether it asks for `sync=full`;
/// `None` for an in-memory store.
fn parse_url(url: &str) -> Result<(Option<&str>, bool)> {
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url, None),
    };
    let mut full_sync = false;
    for kv in query.into_iter().flat_map(|q| q.split('&')) {
        match kv {
            "sync=full" => full_sync = true,
            "sync=normal" => full_sync = false,
            other => {
                return Err(StoreError::Url(
                    url.to_owned(),
                    format!("unknown option `{other}`").into(),
                ));
            }
        }
    }
    if path == "sqlite::memory:" || path == ":memory:" {
        return Ok((None, full_sync));
    }
    let path = path
        .strip_prefix("sqlite://")
        .or_else(|| path.strip_prefix("sqlite:"))
        .unwrap_or(path);
    if path.is_empty() {
        return Err(StoreError::Url(url.to_owned(), "no file path".into()));
    }
    Ok((Some(path), full_sync))
}

/// What an existing file at a store path turned out to be.
enum Found {
    /// A convo store at schema `version` (0: an empty database to set up).
    Store { version: i64 },
    /// Not a convo store: the reason, said to the user.
    Foreign(String),
}

fn percent_encode_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '?' | '#' | '%' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// Opens `path` read-only, without creating or changing anything. When
/// the directory cannot hold WAL's `-shm` file (a read-only directory),
/// SQLite refuses even reads; the file is then opened as immutable, which
/// is only exact if nobody writes it meanwhile — true of a store nobody
/// can write next to.
fn open_read_only(path: &Path) -> Result<Connection> {
    use rusqlite::OpenFlags;
    let url_err =
        |e: rusqlite::Error| StoreError::Url(path.display().to_string(), Cause::from_error(e));
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(url_err)?;
    match conn.query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0)) {
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen)
            ) =>
        {
            drop(conn);
            // Immutable skips the write-ahead log: refuse rather than show
            // a store without its latest commits.
            let mut wal = path.as_os_str().to_owned();
            wal.push("-wal");
            if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
                return Err(StoreError::Url(
                    path.display().to_string(),
                    format!(
                        "its write-ahead log {} holds commits not yet in the database file, \
                         and SQLite cannot read it from here (it needs to create {}-shm); \
                         open the store once where it can be written, or copy all its files \
                         somewhere writable",
                        std::path::Path::new(&wal).display(),
                        path.display()
                    )
                    .into(),
                ));
            }
            let uri = format!("file:{}?immutable=1", percent_encode_path(path));
            Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI).map_err(url_err)
        }
        _ => Ok(conn),
    }
}

/// Looks at an existing file without changing it: a convo store (or an
/// empty database), or something else and why.
fn inspect(conn: &Connection) -> Result<Found> {
    let not_db = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => {
            Ok(Found::Foreign("it is not a SQLite database".to_owned()))
        }
        _ => Err(db(e)),
    };
    let app: i64 = match conn.query_row("PRAGMA application_id", [], |r| r.get(0)) {
        Ok(v) => v,
        Err(e) => return not_db(e),
    };
    let version: i64 = match conn.query_row("PRAGMA user_version", [], |r| r.get(0)) {
        Ok(v) => v,
        Err(e) => return not_db(e),
    };
    if app != 0 && app != APPLICATION_ID {
        return Ok(Found::Foreign(format!(
            "it is the SQLite database of another application (application_id {app:#x})"
        )));
    }
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .map_err(db)?;
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .map_err(db)?
        .collect::<rusqlite::Result<_>>()
        .map_err(db)?;
    let has = |t: &str| tables.iter().any(|x| x == t);
    if version == 0 && tables.is_empty() {
        return Ok(Found::Store { version: 0 });
    }
    if version == 0 || !(has("sessions") && has("nodes") && has("branches")) {
        let mut shown: Vec<&str> = tables.iter().take(5).map(String::as_str).collect();
        if tables.len() > 5 {
            shown.push("…");
        }
        return Ok(Found::Foreign(format!(
            "it is a SQLite database without convo's schema (user_version {version}, tables: {})",
            if shown.is_empty() {
                "none".to_owned()
            } else {
                shown.join(", ")
            }
        )));
    }
    Ok(Found::Store { version })
}

impl Sqlite {
    /// Opens `sqlite:///abs/path`, `sqlite://rel/path`, `sqlite::memory:` or
    /// a bare path for writing, creating the store if needed.
    pub fn open_url(url: &str) -> Result<Self> {
        Self::open_url_as(url, crate::Access::Write)
    }

    /// Opens a store URL (see [`Sqlite::open_url`]) with `access`.
    pub fn open_url_as(url: &str, access: crate::Access) -> Result<Self> {
        match parse_url(url)? {
            (None, full_sync) => {
                let conn = Connection::open_in_memory().map_err(db)?;
                Self::init(conn, full_sync, None)
            }
            (Some(path), full_sync) => Self::open_as(Path::new(path), full_sync, access),
        }
    }

    /// Opens (creating if needed) the database file at `path` for writing.
    pub fn open(path: &Path, full_sync: bool) -> Result<Self> {
        Self::open_as(path, full_sync, crate::Access::Write)
    }

    /// Opens the store file at `path`.
    ///
    /// An existing file is first looked at read-only: anything but a convo
    /// store (or an empty database) is refused with
    /// [`StoreError::NotAStore`] and left untouched. With
    /// [`Access::Read`](crate::Access::Read) a missing file is
    /// [`StoreError::NoStore`] and the file is opened read-only (a
    /// read-only file or directory works); with `Write` a missing file and
    /// its directory are created and the schema set up.
    pub fn open_as(path: &Path, full_sync: bool, access: crate::Access) -> Result<Self> {
        let shown = || path.display().to_string();
        let meta = match std::fs::metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::Url(shown(), Cause::from_error(e))),
        };
        if meta.as_ref().is_some_and(|m| m.is_dir()) {
            return Err(StoreError::NotAStore {
                path: shown(),
                reason: "it is a directory".into(),
            });
        }
        let found = match &meta {
            None => None,
            Some(m) if m.len() == 0 => Some(0),
            Some(_) => {
                let conn = open_read_only(path)?;
                match inspect(&conn)? {
                    Found::Store { version } => {
                        if access == crate::Access::Read && version > 0 {
                            return Self::init_read(conn, path);
                        }
                        Some(version)
                    }
                    Found::Foreign(reason) => {
                        return Err(StoreError::NotAStore {
                            path: shown(),
                            reason,
                        });
                    }
                }
            }
        };
        if access == crate::Access::Read {
            // Missing, or an empty database nobody set up.
            return Err(StoreError::NoStore(shown()));
        }
        if found.is_none()
            && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Url(
                    shown(),
                    Cause::with_context(format!("cannot create {}", dir.display()), e),
                )
            })?;
        }
        let conn =
            Connection::open(path).map_err(|e| StoreError::Url(shown(), Cause::from_error(e)))?;
        Self::init(conn, full_sync, Some(path.to_owned()))
    }

    /// Finishes a read-only open: read pragmas only. A store whose schema
    /// is older than this build is upgraded first through a write
    /// connection (refused with the reason when the file cannot be written).
    fn init_read(conn: Connection, path: &Path) -> Result<Self> {
        conn.busy_timeout(BUSY_BUDGET).map_err(db)?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(db)?;
        conn.pragma_update(None, "mmap_size", MMAP_BYTES)
            .map_err(db)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db)?;
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(StoreError::SchemaTooNew {
                found: version,
                known,
            });
        }
        if version < known {
            drop(conn);
            drop(Self::open_as(path, false, crate::Access::Write)?);
            return Self::init_read(open_read_only(path)?, path);
        }
        Ok(Sqlite {
            conn,
            path: Some(path.to_owned()),
            fold_log_over: None,
            recent: Default::default(),
            stored: Default::default(),
            busy_budget: BUSY_BUDGET,
        })
    }

    fn init(conn: Connection, full_sync: bool, path: Option<std::path::PathBuf>) -> Result<Self> {
        conn.busy_timeout(BUSY_BUDGET).map_err(db)?;
        // journal_mode needs the write lock the first time; the busy timeout covers it.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(db)?;
        conn.pragma_update(
            None,
            "synchronous",
            if full_sync { "FULL" } else { "NORMAL" },
        )
        .map_err(db)?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(db)?;
        conn.pragma_update(None, "mmap_size", MMAP_BYTES)
            .map_err(db)?;
        // Each time the WAL starts again from its beginning (every page
        // checkpointed), the file is cut back to this size: a burst of
        // writes leaves no big log behind.
        conn.pragma_update(None, "journal_size_limit", WAL_KEEP_BYTES)
            .map_err(db)?;
        let mut me = Sqlite {
            conn,
            path,
            fold_log_over: None,
            recent: Default::default(),
            stored: Default::default(),
            busy_budget: BUSY_BUDGET,
        };
        me.migrate()?;
        Ok(me)
    }

    fn refuse_if_damaged(&self) -> Result<()> {
        if let Some(p) = &self.path {
            let marker = damaged_marker(p);
            if marker.exists() {
                let why = std::fs::read_to_string(&marker).unwrap_or_default();
                return Err(StoreError::damaged(format!(
                    "{} failed SQLite's integrity check, so it refuses writes ({}; remove {} once it is repaired)",
                    p.display(),
                    why.lines().next().unwrap_or("see `convo verify`"),
                    marker.display()
                )));
            }
        }
        Ok(())
    }

    fn mark_damaged(&self, why: &str) {
        if let Some(p) = &self.path {
            // Best effort: the error that led here is reported either way.
            let _ = std::fs::write(damaged_marker(p), why);
        }
    }

    fn run(
        &mut self,
        behavior: TransactionBehavior,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>,
    ) -> Result<()> {
        crate::backend::retrying(self.busy_budget, || {
            let tx = self.conn.transaction_with_behavior(behavior).map_err(db)?;
            self.stored.begin();
            let mut t = SqliteTx {
                tx: &tx,
                last_blob: None,
                run: None,
                hot: Hot::default(),
                recent: &mut self.recent,
                stored: &mut self.stored,
            };
            f(&mut t)?;
            t.flush_run()?;
            drop(t);
            if matches!(behavior, TransactionBehavior::Deferred) {
                // A read has nothing to commit: ending its snapshot cannot
                // lose anything, and on a damaged file (whose errors the
                // read may have reported) the COMMIT itself can fail.
                drop(tx);
                return Ok(());
            }
            tx.commit().map_err(db)?;
            self.stored.committed();
            Ok(())
        })
    }
}

impl Backend for Sqlite {
    fn write(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.refuse_if_damaged()?;
        let res = self.run(TransactionBehavior::Immediate, f);
        if let Err(StoreError::Damaged(why)) = &res {
            self.mark_damaged(why);
        }
        res
    }
    fn read(&mut self, f: &mut dyn FnMut(&mut dyn Tx) -> Result<()>) -> Result<()> {
        self.run(TransactionBehavior::Deferred, f)
    }
    fn kind(&self) -> &'static str {
        "sqlite"
    }
    fn payload_work(&self) -> (u64, u64) {
        (self.recent.hashed, self.recent.cut)
    }
    fn erase_freed(&mut self) -> Result<Option<String>> {
        if self.path.is_none() {
            return Ok(None);
        }
        self.refuse_if_damaged()?;
        // Empty the WAL (old page images hold the bytes), rewrite the file
        // so no free page keeps them, then empty the WAL VACUUM wrote.
        let checkpoint = |c: &Connection| -> Result<bool> {
            c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
            .map(|busy| busy == 0)
            .map_err(db)
        };
        let mut complete = checkpoint(&self.conn)?;
        // The search index (contentless FTS5) forgets a row by a tombstone:
        // the row's words stay in the index's segments until they are
        // merged. `optimize` merges every segment into one, dropping the
        // tombstoned rows' words, so the VACUUM below frees their pages.
        self.conn
            .execute(
                "INSERT INTO search_fts (search_fts) VALUES ('optimize')",
                [],
            )
            .map_err(db)?;
        self.conn.execute_batch("VACUUM").map_err(db)?;
        complete &= checkpoint(&self.conn)?;
        Ok((!complete).then(|| {
            "another connection kept the write-ahead log open, so older page images may \
             remain in it until the next checkpoint (run `convo redact` again once it has closed)"
                .to_owned()
        }))
    }
    fn maintenance(&mut self) -> Option<&mut dyn crate::backend::Maintenance> {
        Some(self)
    }
}

impl crate::backend::Maintenance for Sqlite {
    fn busy_wait(&mut self, budget: std::time::Duration) -> Result<()> {
        self.conn.busy_timeout(budget).map_err(db)?;
        self.busy_budget = budget;
        Ok(())
    }

    fn fold_log(&mut self) -> Result<()> {
        if self.path.is_none() {
            return Ok(());
        }
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(db)
    }
    fn structure_check_apart(&mut self) -> Option<crate::backend::StructureCheck> {
        // On a connection of its own, on another core: the check reads
        // every page, a third of verify's time when it ran first.
        let path = self.path.clone()?;
        Some(std::thread::spawn(move || {
            let c = Connection::open_with_flags(
                &path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(db)?;
            // Pages read through the map, not copied by a read call each
            // (two thirds of the check's time), as on every connection.
            c.pragma_update(None, "mmap_size", MMAP_BYTES).map_err(db)?;
            quick_check(&c)
        }))
    }

    fn keep_log_on_close(&mut self) -> Result<()> {
        self.conn
            .set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
                true,
            )
            .map_err(db)?;
        self.conn
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(db)?;
        self.fold_log_over = Some(SHORT_WRITER_LOG);
        Ok(())
    }
    fn defer_checkpoints(&mut self) -> Result<Option<crate::Background>> {
        let Some(path) = &self.path else {
            return Ok(None);
        };
        let other = Connection::open(path).map_err(db)?;
        other.busy_timeout(BUSY_BUDGET).map_err(db)?;
        let (poke, poked) = std::sync::mpsc::sync_channel::<()>(1);
        let (mut last, mut next) = (0, WAL_CHECKPOINT_PAGES);
        // Registering a WAL hook replaces the auto-checkpoint (itself a
        // WAL hook); the pragma says so first.
        self.conn
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(db)?;
        self.conn
            .wal_hook(Some(
                move |wal: &mut rusqlite::hooks::Wal, pages: std::ffi::c_int| {
                    if pages < last {
                        next = WAL_CHECKPOINT_PAGES; // the WAL was reset
                    }
                    last = pages;
                    if pages >= WAL_INLINE_PAGES {
                        // Busy when the other thread is at it: fine.
                        let _ = wal.checkpoint();
                    } else if pages >= next {
                        // Full when one is already asked for: fine too.
                        let _ = poke.try_send(());
                        next = pages + WAL_CHECKPOINT_STEP;
                    }
                    Ok(())
                },
            ))
            .map_err(db)?;
        Ok(Some(crate::Background::new(move || {
            // Ends when the writing connection, which holds `poke` in its
            // hook, is closed.
            while poked.recv().is_ok() {
                let _ = other.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
        })))
    }
    fn record_health(&mut self, damaged: Option<&str>) {
        match damaged {
            Some(why) => self.mark_damaged(why),
            None => {
                if let Some(p) = &self.path {
                    let _ = std::fs::remove_file(damaged_marker(p));
                }
            }
        }
    }
}

struct SqliteTx<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    /// The blob `put_blob` just inserted and its rowid: the ledger stores a
    /// node's payload right before the node, so `insert_node` can fill
    /// `nodes.payload_id` without looking the hash up again.
    last_blob: Option<(ContentHash, i64)>,
    /// The run of consecutive nodes of one session this transaction is
    /// appending to, written to `session_runs` once, at commit (or before a
    /// read that needs it), instead of once per node.
    run: Option<Run>,
    /// The statements and the session text a bulk append uses per node,
    /// kept for the transaction: looking a statement up in rusqlite's cache
    /// hashes its SQL, and formatting a session id allocates.
    hot: Hot<'a>,
    /// The connection's memory of recent payloads and stored chunks.
    recent: &'a mut crate::chunk::Recent,
    stored: &'a mut crate::chunk::Stored,
}

#[derive(Default)]
struct Hot<'a> {
    insert_node: Option<rusqlite::CachedStatement<'a>>,
    find_blob: Option<rusqlite::CachedStatement<'a>>,
    insert_blob: Option<rusqlite::CachedStatement<'a>>,
    session: Option<(SessionId, String)>,
}

/// The statement in `slot`, prepared on first use.
fn hot<'s, 'a>(
    tx: &'a rusqlite::Transaction<'a>,
    slot: &'s mut Option<rusqlite::CachedStatement<'a>>,
    sql: &str,
) -> Result<&'s mut rusqlite::CachedStatement<'a>> {
    if slot.is_none() {
        *slot = Some(tx.prepare_cached(sql).map_err(db)?);
    }
    Ok(slot.as_mut().expect("prepared just above"))
}

/// A run of consecutive follow numbers that belong to one session.
#[derive(Clone, Copy, Debug)]
struct Run {
    first: u64,
    last: u64,
    session: SessionId,
}

/// Payloads at least this long are written with the page cache held at
/// [`LARGE_BLOB_CACHE_KIB`], so their chunks spill to the log instead of
/// filling the cache.
const LARGE_BLOB: usize = 1 << 20;
/// The page cache while a large payload is written (KiB).
const LARGE_BLOB_CACHE_KIB: i64 = 4096;
/// The page cache otherwise (KiB).
/// How much of the database file every connection reads through a
/// memory map rather than a read call per page.
const MMAP_BYTES: i64 = 1 << 30;
/// The size the WAL file is cut back to when it restarts
/// (`journal_size_limit`).
const WAL_KEEP_BYTES: i64 = 4 << 20;
const CACHE_KIB: i64 = 65536;

/// The first 8 bytes of a hash: the key of the `nodes_by_hash` index
/// (`substr(hash, 1, 8)`) and of `blobs.k` (`blobs_by_key`).
fn key8(h: &Digest) -> &[u8] {
    &h.0[..8]
}

impl SqliteTx<'_> {
    /// A payload from its row, checked against its address
    /// ([`crate::chunk::payload`]).
    fn payload_of(&mut self, h: &ContentHash, chunked: bool, data: Vec<u8>) -> Result<Vec<u8>> {
        crate::chunk::payload(self, h, chunked, data)
    }

    /// The rows of a query selecting [`NODE_COLS`] (as `n.`), then the
    /// payload's data and chunked flag ([`payload_join`]), payloads
    /// assembled.
    fn with_payloads(
        &mut self,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>> {
        let rows: Vec<PayloadRow> = {
            let mut st = self.tx.prepare_cached(sql).map_err(db)?;
            st.query_map(p, payload_row)
                .and_then(|r| r.collect())
                .map_err(db)?
        };
        rows.into_iter()
            .map(|(n, data, chunked)| match data {
                Some(d) => {
                    let p = self.payload_of(&n.node.payload, chunked, d)?;
                    Ok((n, Some(p)))
                }
                None => Ok((n, None)),
            })
            .collect()
    }

    /// The nodes with these hashes, in this order (`None` for a hash not
    /// stored), each with its payload if asked (`None` where missing), in
    /// one query: the hashes as one JSON array, each an indexed lookup
    /// (`substr(hash, 1, 8)`), so a timeline page is not a query a node.
    fn by_hashes(
        &mut self,
        hashes: &[NodeHash],
        payloads: bool,
    ) -> Result<Vec<Option<crate::backend::NodeRead>>> {
        let cols = node_cols_of("n");
        let (payload, blobs) = payload_join(payloads);
        let sql = format!(
            "SELECT {cols}, {payload}, q.key FROM json_each(?1) q \
             CROSS JOIN nodes n ON substr(n.hash, 1, 8) = unhex(substr(q.value, 1, 16)) \
             AND n.hash = unhex(q.value) {blobs}"
        );
        let list: Vec<String> = hashes
            .iter()
            .map(|h| format!("\"{}\"", h.to_hex()))
            .collect();
        let rows: Vec<(i64, PayloadRow)> = {
            let mut st = self.tx.prepare_cached(&sql).map_err(db)?;
            st.query_map([format!("[{}]", list.join(","))], |r| {
                Ok((r.get(crate::backend::NODE_COL_COUNT + 2)?, payload_row(r)?))
            })
            .and_then(|r| r.collect())
            .map_err(db)?
        };
        let mut out: Vec<Option<crate::backend::NodeRead>> =
            std::iter::repeat_with(|| None).take(hashes.len()).collect();
        for (at, (n, data, chunked)) in rows {
            let data = data
                .map(|d| self.payload_of(&n.node.payload, chunked, d))
                .transpose()?;
            if let Some(slot) = usize::try_from(at).ok().and_then(|i| out.get_mut(i)) {
                *slot = Some((n, data));
            }
        }
        Ok(out)
    }

    fn flush_run(&mut self) -> Result<()> {
        if let Some(r) = self.run.take() {
            self.tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO session_runs (first, last, session) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut st| {
                    st.execute(params![r.first as i64, r.last as i64, r.session.to_string()])
                })
                .map_err(db)?;
        }
        Ok(())
    }

    /// Records that node `seq` of session `s` was appended.
    fn extend_run(&mut self, s: &SessionId, seq: u64) -> Result<()> {
        if let Some(r) = &mut self.run
            && r.session == *s
            && r.last + 1 == seq
        {
            r.last = seq;
            return Ok(());
        }
        self.flush_run()?;
        // Continue the newest stored run when it ends right before `seq`.
        let newest: Option<(i64, i64, String)> = self
            .tx
            .prepare_cached(
                "SELECT first, last, session FROM session_runs ORDER BY first DESC LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()
            })
            .map_err(db)?;
        let first = match newest {
            Some((first, last, session)) if last as u64 + 1 == seq && session == s.to_string() => {
                first as u64
            }
            _ => seq,
        };
        self.run = Some(Run {
            first,
            last: seq,
            session: *s,
        });
        Ok(())
    }
}

fn corrupt(what: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Blob,
        what.to_owned().into(),
    )
}

// The decoders below borrow the column (`get_ref`) instead of copying it
// into a `Vec` or `String` first: a node row holds up to seven hashes and a
// session id, and scans decode tens of thousands of rows. They accept and
// reject the same SQLite types `Row::get::<Vec<u8>>` and `Row::get::<String>` did.

fn wrong_type(r: &Row<'_>, i: usize, t: rusqlite::types::Type) -> rusqlite::Error {
    let name = r.as_ref().column_name(i).unwrap_or("?").to_owned();
    rusqlite::Error::InvalidColumnType(i, name, t)
}

impl crate::chunk::Chunks for SqliteTx<'_> {
    fn whole_payloads(
        &mut self,
        after: i64,
        max: usize,
    ) -> Result<Vec<crate::chunk::WholePayload>> {
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT id, hash, data FROM blobs WHERE id > ?1 AND chunked = 0 \
                 AND typeof(data) = 'blob' AND length(data) >= ?2 ORDER BY id LIMIT ?3",
            )
            .map_err(db)?;
        st.query_map(
            params![after, crate::chunk::CHUNKED_FROM as i64, max as i64],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .and_then(|rows| rows.collect())
        .map_err(db)
    }

    fn set_manifest(&mut self, id: i64, manifest: &[u8]) -> Result<()> {
        self.tx
            .execute(
                "UPDATE blobs SET data = ?1, chunked = 1 WHERE id = ?2",
                params![manifest, id],
            )
            .map(drop)
            .map_err(db)
    }

    fn rechunk_pending(&mut self) -> Result<bool> {
        self.tx
            .query_row(
                "SELECT 1 FROM pending_work WHERE work = 'rechunk'",
                [],
                |_| Ok(()),
            )
            .optional()
            .map(|r| r.is_some())
            .map_err(db)
    }

    fn rechunk_done(&mut self) -> Result<()> {
        self.tx
            .execute("DELETE FROM pending_work WHERE work = 'rechunk'", [])
            .map(drop)
            .map_err(db)
    }

    fn put_chunks(&mut self, pieces: &[(Digest, &[u8])]) -> Result<()> {
        let mut find = self
            .tx
            .prepare_cached("SELECT 1 FROM chunks WHERE k = ?1 AND hash = ?2")
            .map_err(db)?;
        let mut insert = self
            .tx
            .prepare_cached("INSERT INTO chunks (hash, k, data) VALUES (?1, substr(?1, 1, 8), ?2)")
            .map_err(db)?;
        for (h, bytes) in pieces {
            if !find.exists(params![key8(h), h.0.as_slice()]).map_err(db)? {
                insert.execute(params![h.0.as_slice(), bytes]).map_err(db)?;
            }
        }
        Ok(())
    }

    fn get_chunks(&mut self, hashes: &[Digest]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut st = self
            .tx
            .prepare_cached("SELECT data FROM chunks WHERE k = ?1 AND hash = ?2")
            .map_err(db)?;
        hashes
            .iter()
            .map(|h| {
                st.query_row(params![key8(h), h.0.as_slice()], |r| bytes(r, 0))
                    .optional()
                    .map(Option::flatten)
                    .map_err(db)
            })
            .collect()
    }

    fn read_chunks(
        &mut self,
        hashes: &[Digest],
        f: &mut crate::chunk::ChunkVisitor<'_>,
    ) -> Result<()> {
        // A payload's chunks were mostly written one after another (the
        // first time its bytes were stored, or a call at a time as a
        // conversation grew), so its next chunk is usually among the rows
        // just after the last one: read on in row order, a few rows at
        // most, before looking it up by key (an index descent and a table
        // descent, several times the cost of a step).
        const AHEAD: usize = 8;
        let mut by_key = self
            .tx
            .prepare_cached("SELECT id FROM chunks WHERE k = ?1 AND hash = ?2")
            .map_err(db)?;
        let mut onward = self
            .tx
            .prepare_cached("SELECT hash, data, k FROM chunks WHERE id >= ?1 ORDER BY id")
            .map_err(db)?;
        let mut rows: Option<rusqlite::Rows<'_>> = None;
        for h in hashes {
            let mut found = false;
            if let Some(r) = rows.as_mut() {
                for _ in 0..AHEAD {
                    let Some(row) = r.next().map_err(db)? else {
                        break;
                    };
                    // The row must be one a lookup by key finds too (its `k`
                    // the start of its hash): reads on in row order see
                    // exactly what lookups see, so verify reports a row
                    // with a wrong key as the missing chunk it is to them.
                    if row.get_ref(0).map_err(db)?.as_blob().ok() == Some(h.0.as_slice())
                        && row.get_ref(2).map_err(db)?.as_blob().ok() == Some(key8(h))
                    {
                        f(h, row.get_ref(1).map_err(db)?.as_bytes().ok())?;
                        found = true;
                        break;
                    }
                }
            }
            if found {
                continue;
            }
            rows = None;
            let id: Option<i64> = by_key
                .query_row(params![key8(h), h.0.as_slice()], |r| r.get(0))
                .optional()
                .map_err(db)?;
            let Some(id) = id else {
                f(h, None)?;
                continue;
            };
            let mut r = onward.query([id]).map_err(db)?;
            match r.next().map_err(db)? {
                Some(row) => f(h, row.get_ref(1).map_err(db)?.as_bytes().ok())?,
                None => f(h, None)?,
            }
            rows = Some(r);
        }
        Ok(())
    }

    fn delete_chunks(&mut self, hashes: &[Digest]) -> Result<()> {
        self.stored.forget();
        let mut st = self
            .tx
            .prepare_cached("DELETE FROM chunks WHERE k = ?1 AND hash = ?2")
            .map_err(db)?;
        for h in hashes {
            st.execute(params![key8(h), h.0.as_slice()]).map_err(db)?;
        }
        Ok(())
    }

    fn manifests(&mut self, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()> {
        self.visit_pairs("SELECT hash, data FROM blobs WHERE chunked", f)
    }
}

fn digest(r: &Row<'_>, i: usize) -> rusqlite::Result<Digest> {
    opt_digest(r, i)?.ok_or_else(|| wrong_type(r, i, rusqlite::types::Type::Null))
}

fn opt_digest(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Digest>> {
    use rusqlite::types::ValueRef;
    match r.get_ref(i)? {
        ValueRef::Null => Ok(None),
        ValueRef::Blob(b) => Digest::from_slice(b)
            .map(Some)
            .ok_or_else(|| corrupt("a stored hash is not 32 bytes")),
        other => Err(wrong_type(r, i, other.data_type())),
    }
}

/// Bytes of a BLOB or TEXT column (an edit may have changed the type).
/// A byte-string column as stored, borrowed (NULL: empty).
fn bytes_ref<'r>(r: &'r Row<'_>, i: usize) -> rusqlite::Result<&'r [u8]> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Null => &[],
        ValueRef::Blob(b) | ValueRef::Text(b) => b,
        _ => return Err(corrupt("a stored byte string has a numeric type")),
    })
}

fn bytes(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Vec<u8>>> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Blob(b) | ValueRef::Text(b) => Some(b.to_vec()),
        _ => return Err(corrupt("a stored byte string has a numeric type")),
    })
}

fn session_id(r: &Row<'_>, i: usize) -> rusqlite::Result<SessionId> {
    let v = r.get_ref(i)?;
    let s = v.as_str().map_err(|e| match e {
        rusqlite::types::FromSqlError::InvalidType => wrong_type(r, i, v.data_type()),
        e => rusqlite::Error::FromSqlConversionFailure(i, v.data_type(), e.into()),
    })?;
    SessionId::parse(s).map_err(|_| corrupt("a stored session id is malformed"))
}

fn branch_name(r: &Row<'_>, i: usize) -> rusqlite::Result<BranchName> {
    let s: String = r.get(i)?;
    BranchName::new(&s).map_err(|_| corrupt("a stored branch name is invalid"))
}

use crate::backend::NODE_COLS;

impl crate::backend::Columns for Row<'_> {
    fn bytes(&self, i: usize) -> std::result::Result<Option<&[u8]>, String> {
        use rusqlite::types::ValueRef;
        match self.get_ref(i).map_err(|e| e.to_string())? {
            ValueRef::Null => Ok(None),
            ValueRef::Blob(b) => Ok(Some(b)),
            other => Err(format!(
                "column {i} holds {} instead of bytes",
                other.data_type()
            )),
        }
    }
    fn text(&self, i: usize) -> std::result::Result<Option<&str>, String> {
        use rusqlite::types::ValueRef;
        match self.get_ref(i).map_err(|e| e.to_string())? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(Some)
                .map_err(|_| format!("column {i} holds text that is not UTF-8")),
            other => Err(format!(
                "column {i} holds {} instead of text",
                other.data_type()
            )),
        }
    }
    fn int(&self, i: usize) -> std::result::Result<Option<i64>, String> {
        use rusqlite::types::ValueRef;
        match self.get_ref(i).map_err(|e| e.to_string())? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(n) => Ok(Some(n)),
            other => Err(format!(
                "column {i} holds {} instead of an integer",
                other.data_type()
            )),
        }
    }
    fn flag(&self, i: usize) -> std::result::Result<bool, String> {
        Ok(self.int(i)?.ok_or_else(|| format!("column {i} is NULL"))? != 0)
    }
}

/// A node row, decoded and checked by the decoder every backend shares.
/// The payload columns of a node row `n` and the join they need: joined by
/// rowid (`payload_id`), checked against the hash, a row without a usable
/// shortcut falling back to the lookup by hash; `NULL, 0` without payloads.
/// [`NODE_COLS`] of the table named `alias` in a join (`n.seq, n.hash…`).
fn node_cols_of(alias: &str) -> String {
    NODE_COLS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A node and its payload's columns ([`payload_join`]): the data as stored
/// and whether it is chunked.
fn payload_row(r: &Row<'_>) -> rusqlite::Result<PayloadRow> {
    Ok((
        node_row(r)?,
        bytes(r, crate::backend::NODE_COL_COUNT)?,
        r.get::<_, Option<bool>>(crate::backend::NODE_COL_COUNT + 1)?
            .unwrap_or(false),
    ))
}

/// A node, its payload's data as stored, and whether it is chunked.
type PayloadRow = (StoredNode, Option<Vec<u8>>, bool);

fn payload_join(payloads: bool) -> (&'static str, &'static str) {
    if payloads {
        (
            "coalesce(b.data, (SELECT data FROM blobs \
             WHERE k = substr(n.payload, 1, 8) AND hash = n.payload)), \
             coalesce(b.chunked, (SELECT chunked FROM blobs \
             WHERE k = substr(n.payload, 1, 8) AND hash = n.payload))",
            "LEFT JOIN blobs b ON b.id = n.payload_id AND b.hash = n.payload",
        )
    } else {
        ("NULL, 0", "")
    }
}

fn node_row(r: &Row<'_>) -> rusqlite::Result<StoredNode> {
    crate::backend::decode_node(r).map_err(|e| corrupt(&e))
}

fn branch_row(r: &Row<'_>) -> rusqlite::Result<BranchRow> {
    Ok(BranchRow {
        session: session_id(r, 0)?,
        name: branch_name(r, 1)?,
        head: opt_digest(r, 2)?.map(NodeHash),
        state: opt_digest(r, 3)?.map(StateRoot),
        sealed: r.get(4)?,
        created_at: r.get(5)?,
    })
}

fn session_row(r: &Row<'_>) -> rusqlite::Result<SessionRow> {
    Ok(SessionRow {
        id: session_id(r, 0)?,
        agent: r.get(1)?,
        title: r.get(2)?,
        created_at: r.get(3)?,
    })
}

const BRANCH_COLS: &str = "session, name, head, state, sealed, created_at";

impl SessionTx for SqliteTx<'_> {
    fn insert_session(&mut self, s: &SessionRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO sessions (id, agent, title, created_at) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut st| {
                st.execute(params![s.id.to_string(), s.agent, s.title, s.created_at])
            })
            .map_err(db)?;
        Ok(())
    }

    fn set_session_title(&mut self, id: &SessionId, title: Option<&str>) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE sessions SET title = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![id.to_string(), title]))
            .map_err(db)?;
        Ok(())
    }

    fn session(&mut self, id: &SessionId) -> Result<Option<SessionRow>> {
        self.tx
            .prepare_cached("SELECT id, agent, title, created_at FROM sessions WHERE id = ?1")
            .and_then(|mut st| st.query_row([id.to_string()], session_row).optional())
            .map_err(db)
    }

    fn sessions(&mut self) -> Result<Vec<SessionRow>> {
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT id, agent, title, created_at FROM sessions ORDER BY created_at, id",
            )
            .map_err(db)?;
        st.query_map([], session_row)
            .and_then(|rows| rows.collect())
            .map_err(db)
    }
}

impl BranchTx for SqliteTx<'_> {
    fn branch(&mut self, s: &SessionId, name: &BranchName) -> Result<Option<BranchRow>> {
        self.tx
            .prepare_cached(&format!(
                "SELECT {BRANCH_COLS} FROM branches WHERE session = ?1 AND name = ?2"
            ))
            .and_then(|mut st| {
                st.query_row(params![s.to_string(), name.as_str()], branch_row)
                    .optional()
            })
            .map_err(db)
    }

    fn branches(&mut self, s: Option<&SessionId>) -> Result<Vec<BranchRow>> {
        match s {
            Some(s) => {
                let mut st = self
                    .tx
                    .prepare_cached(&format!(
                        "SELECT {BRANCH_COLS} FROM branches WHERE session = ?1 ORDER BY name"
                    ))
                    .map_err(db)?;
                st.query_map([s.to_string()], branch_row)
                    .and_then(|r| r.collect())
                    .map_err(db)
            }
            None => {
                let mut st = self
                    .tx
                    .prepare_cached(&format!(
                        "SELECT {BRANCH_COLS} FROM branches ORDER BY session, name"
                    ))
                    .map_err(db)?;
                st.query_map([], branch_row)
                    .and_then(|r| r.collect())
                    .map_err(db)
            }
        }
    }

    fn insert_branch(&mut self, b: &BranchRow) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO branches (session, name, head, state, sealed, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    b.session.to_string(),
                    b.name.as_str(),
                    b.head.as_ref().map(|h| h.as_bytes().as_slice()),
                    b.state.as_ref().map(|h| h.as_bytes().as_slice()),
                    b.sealed,
                    b.created_at
                ])
            })
            .map_err(db)?;
        Ok(())
    }

    fn cas_head(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        old: Option<&NodeHash>,
        new: &NodeHash,
    ) -> Result<bool> {
        let n = self
            .tx
            .prepare_cached(
                "UPDATE branches SET head = ?1 WHERE session = ?2 AND name = ?3 AND head IS ?4",
            )
            .and_then(|mut st| {
                st.execute(params![
                    new.as_bytes().as_slice(),
                    s.to_string(),
                    name.as_str(),
                    old.map(|h| h.as_bytes().as_slice())
                ])
            })
            .map_err(db)?;
        Ok(n == 1)
    }

    fn open_turns(&mut self) -> Result<Vec<(SessionId, BranchName, String)>> {
        let mut st = self
            .tx
            .prepare_cached("SELECT session, branch, turn FROM open_turns")
            .map_err(db)?;
        let rows: Vec<(String, String, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|r| r.collect())
            .map_err(db)?;
        rows.into_iter()
            .map(|(s, b, t)| crate::backend::open_turn_row(&s, &b, t))
            .collect()
    }

    fn set_open_turn(&mut self, s: &SessionId, b: &BranchName, turn: Option<&str>) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM open_turns WHERE session = ?1 AND branch = ?2")
            .and_then(|mut st| st.execute(params![s.to_string(), b.as_str()]))
            .map_err(db)?;
        if let Some(t) = turn {
            self.tx
                .prepare_cached(
                    "INSERT INTO open_turns (session, branch, turn) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut st| st.execute(params![s.to_string(), b.as_str(), t]))
                .map_err(db)?;
        }
        Ok(())
    }

    fn set_branch_state(
        &mut self,
        s: &SessionId,
        name: &BranchName,
        state: Option<&StateRoot>,
    ) -> Result<()> {
        self.tx
            .prepare_cached("UPDATE branches SET state = ?1 WHERE session = ?2 AND name = ?3")
            .and_then(|mut st| {
                st.execute(params![
                    state.map(|h| h.as_bytes().as_slice()),
                    s.to_string(),
                    name.as_str()
                ])
            })
            .map_err(db)?;
        Ok(())
    }

    fn rename_branch(
        &mut self,
        s: &SessionId,
        from: &BranchName,
        to: &BranchName,
        sealed: bool,
    ) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE branches SET name = ?1, sealed = ?2 WHERE session = ?3 AND name = ?4",
            )
            .and_then(|mut st| {
                st.execute(params![to.as_str(), sealed, s.to_string(), from.as_str()])
            })
            .map_err(db)?;
        Ok(())
    }
}

impl NodeTx for SqliteTx<'_> {
    fn insert_node(&mut self, hash: &NodeHash, n: &Node, ctx: &Context) -> Result<u64> {
        let ev = n.event.as_ref();
        let Hot {
            insert_node,
            session,
            ..
        } = &mut self.hot;
        if session.as_ref().is_none_or(|(id, _)| *id != n.session) {
            *session = Some((n.session, n.session.to_string()));
        }
        let session = session.as_ref().map(|(_, s)| s.as_str());
        let st = hot(
            self.tx,
            insert_node,
            "INSERT INTO nodes (hash, session, parent, kind, submission, sequence, sender, recipient, \
                 payload, payload_len, diagnostics, state, created_at, ev_branch, ev_sealed, ev_nonce, \
                 depth, ctx_sub, ctx_open, ctx_seq, ctx_state, payload_id, ctx_turn) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, \
                 coalesce(?22, (SELECT id FROM blobs WHERE k = substr(?9, 1, 8) AND hash = ?9)), ?23)",
        )?;
        st.execute(params![
            hash.as_bytes().as_slice(),
            session,
            n.parent.as_ref().map(|h| h.as_bytes().as_slice()),
            n.kind.code(),
            n.submission.as_ref().map(|h| h.as_bytes().as_slice()),
            n.sequence,
            n.from,
            n.to,
            n.payload.as_bytes().as_slice(),
            n.payload_len as i64,
            n.diagnostics.as_str(),
            n.state.as_ref().map(|h| h.as_bytes().as_slice()),
            n.created_at,
            ev.map(|e| e.branch.as_str()),
            ev.and_then(|e| e.sealed_as.as_ref().map(|s| s.as_str())),
            ev.map(|e| e.nonce.as_slice()),
            ctx.depth as i64,
            ctx.submission.as_ref().map(|h| h.as_bytes().as_slice()),
            ctx.open,
            ctx.last_sequence,
            ctx.state.as_ref().map(|h| h.as_bytes().as_slice()),
            self.last_blob
                .filter(|(h, _)| *h == n.payload)
                .map(|(_, id)| id),
            ctx.turn as i64,
        ])
        .map_err(db)?;
        let seq = self.tx.last_insert_rowid() as u64;
        self.extend_run(&n.session, seq)?;
        Ok(seq)
    }

    fn node(&mut self, h: &NodeHash) -> Result<Option<StoredNode>> {
        self.tx
            .prepare_cached(&format!(
                "SELECT {NODE_COLS} FROM nodes WHERE substr(hash, 1, 8) = ?1 AND hash = ?2"
            ))
            .and_then(|mut st| {
                st.query_row(params![key8(&h.0), h.as_bytes().as_slice()], node_row)
                    .optional()
            })
            .map_err(db)
    }

    fn complete_by_thread(
        &mut self,
        field: crate::backend::ThreadField,
        value: &str,
    ) -> Result<Option<NodeHash>> {
        let f = field.as_str();
        self.tx
            .prepare_cached(&format!(
                "SELECT hash FROM nodes WHERE kind = 4 AND instr(diagnostics, '\"{f}\":') > 0 \
                 AND (CASE WHEN json_valid(diagnostics) \
                 THEN json_extract(diagnostics, '$.{f}') END) = ?1 ORDER BY seq DESC LIMIT 1"
            ))
            .and_then(|mut st| st.query_row([value], |r| digest(r, 0)).optional())
            .map(|o| o.map(NodeHash))
            .map_err(db)
    }

    fn nodes_with_prefix(&mut self, p: &HashPrefix, limit: usize) -> Result<Vec<NodeHash>> {
        let (lo, hi) = p.bounds();
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT hash FROM nodes WHERE substr(hash, 1, 8) BETWEEN ?1 AND ?2 \
                 AND hash >= ?3 AND hash <= ?4 ORDER BY hash LIMIT ?5",
            )
            .map_err(db)?;
        st.query_map(
            params![
                &lo[..8],
                &hi[..8],
                lo.as_slice(),
                hi.as_slice(),
                limit as i64
            ],
            |r| digest(r, 0).map(NodeHash),
        )
        .and_then(|r| r.collect())
        .map_err(db)
    }

    fn session_nodes(
        &mut self,
        s: &SessionId,
        payloads: bool,
    ) -> Result<Vec<(StoredNode, Option<Vec<u8>>)>> {
        // A session's nodes are the rowid ranges its runs name, read in
        // one pass: the runs in order (their index), each a rowid range, so
        // `ORDER BY r.first, n.seq` needs no sort. The session column is
        // checked too: an edited run can hide nodes (verify reports it)
        // but never show another session's.
        self.flush_run()?;
        let cols = node_cols_of("n");
        let (payload, blobs) = payload_join(payloads);
        let sql = format!(
            "SELECT {cols}, {payload} \
             FROM session_runs r JOIN nodes n ON n.seq BETWEEN r.first AND r.last {blobs} \
             WHERE r.session = ?1 AND n.session = ?1 ORDER BY r.first, n.seq"
        );
        self.with_payloads(&sql, [s.to_string()])
    }

    fn each_session_node(
        &mut self,
        s: &SessionId,
        f: &mut dyn FnMut(StoredNode) -> Result<()>,
    ) -> Result<()> {
        // The rows of `session_nodes` without payloads, decoded one at a time.
        self.flush_run()?;
        let cols = node_cols_of("n");
        let sql = format!(
            "SELECT {cols} \
             FROM session_runs r JOIN nodes n ON n.seq BETWEEN r.first AND r.last \
             WHERE r.session = ?1 AND n.session = ?1 ORDER BY r.first, n.seq"
        );
        let mut st = self.tx.prepare_cached(&sql).map_err(db)?;
        let mut rows = st.query([s.to_string()]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            f(node_row(r).map_err(db)?)?;
        }
        Ok(())
    }

    fn session_links(&mut self, s: &SessionId) -> Result<Vec<crate::backend::Link>> {
        // The same runs as `session_nodes`, three columns only.
        self.flush_run()?;
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT n.hash, n.parent, n.kind, n.depth, n.ctx_turn, n.ctx_open \
                 FROM session_runs r JOIN nodes n ON n.seq BETWEEN r.first AND r.last \
                 WHERE r.session = ?1 AND n.session = ?1 ORDER BY r.first, n.seq",
            )
            .map_err(db)?;
        st.query_map([s.to_string()], link_row)
            .and_then(|r| r.collect())
            .map_err(db)
    }

    fn session_links_at(
        &mut self,
        s: &SessionId,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<crate::backend::Link>> {
        self.flush_run()?;
        let mut st = self
            .tx
            .prepare_cached(
                "SELECT n.hash, n.parent, n.kind, n.depth, n.ctx_turn, n.ctx_open \
                 FROM session_runs r JOIN nodes n ON n.seq BETWEEN r.first AND r.last \
                 WHERE r.session = ?1 AND n.session = ?1 AND n.depth BETWEEN ?2 AND ?3",
            )
            .map_err(db)?;
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        st.query_map(params![s.to_string(), clamp(lo), clamp(hi)], link_row)
            .and_then(|r| r.collect())
            .map_err(db)
    }

    fn nodes_by_hash(&mut self, hashes: &[NodeHash]) -> Result<Vec<Option<StoredNode>>> {
        let found = self.by_hashes(hashes, false)?;
        Ok(found.into_iter().map(|f| f.map(|(n, _)| n)).collect())
    }

    fn nodes_with_payloads(
        &mut self,
        hashes: &[NodeHash],
    ) -> Result<Vec<Option<crate::backend::NodeWithPayload>>> {
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
        // The numbers as one JSON array: each a rowid lookup.
        let cols = node_cols_of("n");
        let (payload, blobs) = payload_join(payloads);
        let sql = format!(
            "SELECT {cols}, {payload} FROM nodes n {blobs} \
             WHERE n.seq IN (SELECT value FROM json_each(?1)) ORDER BY n.seq"
        );
        let list: Vec<String> = seqs.iter().map(u64::to_string).collect();
        self.with_payloads(&sql, [format!("[{}]", list.join(","))])
    }

    fn nodes_since(&mut self, after: u64, limit: usize) -> Result<Vec<StoredNode>> {
        let mut st = self
            .tx
            .prepare_cached(&format!(
                "SELECT {NODE_COLS} FROM nodes WHERE seq > ?1 ORDER BY seq LIMIT ?2"
            ))
            .map_err(db)?;
        st.query_map(
            params![after.min(i64::MAX as u64) as i64, limit as i64],
            node_row,
        )
        .and_then(|r| r.collect())
        .map_err(db)
    }

    fn max_seq(&mut self) -> Result<u64> {
        let v: i64 = self
            .tx
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM nodes", [], |r| r.get(0))
            .map_err(db)?;
        u64::try_from(v).map_err(|_| StoreError::corrupt("a stored follow number is negative"))
    }

    fn scan_nodes(&mut self, f: &mut crate::backend::NodeVisitor<'_>) -> Result<()> {
        let mut st = self
            .tx
            .prepare(&format!("SELECT {NODE_COLS} FROM nodes ORDER BY seq"))
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            match node_row(r) {
                Ok(n) => f(Ok(n))?,
                Err(e) => {
                    let seq: i64 = r.get(0).unwrap_or(-1);
                    f(Err(format!("node row seq={seq} does not decode: {e}")))?;
                }
            }
        }
        Ok(())
    }

    fn last_seq(&mut self) -> Result<u64> {
        let n: Option<i64> = self
            .tx
            .prepare_cached("SELECT max(seq) FROM nodes")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(db)?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    fn scan_node_hashes(&mut self, f: &mut dyn FnMut(u64, &[u8]) -> Result<()>) -> Result<()> {
        let mut st = self
            .tx
            .prepare("SELECT seq, hash FROM nodes ORDER BY seq")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            let seq: i64 = r.get(0).map_err(db)?;
            let h = r
                .get_ref(1)
                .map_err(db)?
                .as_bytes_or_null()
                .map_err(|e| db(e.into()))?
                .unwrap_or_default();
            f(seq.max(0) as u64, h)?;
        }
        Ok(())
    }
}

impl BlobTx for SqliteTx<'_> {
    fn payload_hash(&mut self, bytes: &[u8]) -> ContentHash {
        if bytes.len() >= crate::chunk::CHUNKED_FROM {
            self.recent.hash(bytes)
        } else {
            convo_core::hash::content_hash(bytes)
        }
    }

    fn put_blob(&mut self, h: &ContentHash, bytes: &[u8]) -> Result<()> {
        let found: Option<i64> = hot(
            self.tx,
            &mut self.hot.find_blob,
            "SELECT id FROM blobs WHERE k = ?1 AND hash = ?2",
        )?
        .query_row(params![key8(&h.0), h.as_bytes().as_slice()], |r| r.get(0))
        .optional()
        .map_err(db)?;
        let id = match found {
            Some(id) => id,
            None if bytes.len() >= crate::chunk::CHUNKED_FROM => {
                // Chunked (see `chunk.rs`): the chunks not stored yet, then
                // the manifest under the payload's hash. A large payload is
                // written with the page cache held small, so its pages
                // spill to the log instead of filling 64 MiB of cache.
                let large = bytes.len() >= LARGE_BLOB;
                if large {
                    self.tx
                        .pragma_update(None, "cache_size", -(LARGE_BLOB_CACHE_KIB))
                        .map_err(db)?;
                }
                if !self.stored.checked() {
                    let version: i64 = self
                        .tx
                        .query_row("PRAGMA data_version", [], |r| r.get(0))
                        .map_err(db)?;
                    self.stored.check(version);
                }
                let split = self.recent.split(h, bytes);
                // Only the chunks not known to be stored are looked up.
                let new: Vec<(Digest, &[u8])> = split
                    .refs()
                    .into_iter()
                    .filter(|(h, _)| !self.stored.has(h))
                    .collect();
                let stored = crate::chunk::Chunks::put_chunks(self, &new);
                if stored.is_ok() {
                    for (h, _) in &split.pieces {
                        self.stored.put(*h);
                    }
                }
                if large {
                    self.tx
                        .pragma_update(None, "cache_size", -(CACHE_KIB))
                        .map_err(db)?;
                }
                stored?;
                self.tx
                    .prepare_cached(
                        "INSERT INTO blobs (hash, k, data, chunked) VALUES (?1, substr(?1, 1, 8), ?2, 1)",
                    )
                    .and_then(|mut st| st.execute(params![h.as_bytes().as_slice(), split.manifest]))
                    .map_err(db)?;
                self.tx.last_insert_rowid()
            }
            None => {
                hot(
                    self.tx,
                    &mut self.hot.insert_blob,
                    "INSERT INTO blobs (hash, k, data) VALUES (?1, substr(?1, 1, 8), ?2)",
                )?
                .execute(params![h.as_bytes().as_slice(), bytes])
                .map_err(db)?;
                self.tx.last_insert_rowid()
            }
        };
        self.last_blob = Some((*h, id));
        Ok(())
    }

    fn rechunk_pending(&mut self) -> Result<bool> {
        crate::chunk::Chunks::rechunk_pending(self)
    }

    fn rechunk(&mut self, after: i64, max: usize) -> Result<Option<i64>> {
        crate::chunk::rechunk(self, after, max)
    }

    fn blob_previews(
        &mut self,
        hashes: &[ContentHash],
        max: usize,
    ) -> Result<Vec<Option<crate::backend::Preview>>> {
        // `length()` of a blob reads its size from the record header, and
        // incremental blob I/O reads only the first pages: a preview of a
        // 60 MB payload touches a few KB.
        let mut out = Vec::with_capacity(hashes.len());
        for h in hashes {
            let row: Option<(i64, i64, bool)> = self
                .tx
                .prepare_cached(
                    "SELECT id, length(data), chunked FROM blobs \
                     WHERE k = ?1 AND hash = ?2 AND typeof(data) = 'blob'",
                )
                .and_then(|mut st| {
                    st.query_row(params![key8(&h.0), h.as_bytes().as_slice()], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                    })
                    .optional()
                })
                .map_err(db)?;
            if let Some((id, _, true)) = row {
                // Chunked: the manifest, then only the chunks that hold
                // the first `max` bytes.
                let manifest: Vec<u8> = self
                    .tx
                    .query_row("SELECT data FROM blobs WHERE id = ?1", [id], |r| r.get(0))
                    .map_err(db)?;
                out.push(Some(crate::chunk::prefix(self, &manifest, max)?));
                continue;
            }
            let Some((id, len, _)) = row else {
                // Not stored, or stored with a wrong type: the full read
                // reports what is wrong.
                out.push(self.blob(h)?.map(|d| {
                    let n = d.len() as u64;
                    (d.into_iter().take(max).collect(), n)
                }));
                continue;
            };
            let len = u64::try_from(len)
                .map_err(|_| StoreError::corrupt("a blob has a negative length"))?;
            let take = usize::try_from(len).unwrap_or(usize::MAX).min(max);
            let mut buf = vec![0u8; take];
            self.tx
                .blob_open(rusqlite::MAIN_DB, c"blobs", c"data", id, true)
                .and_then(|b| b.read_at_exact(&mut buf, 0))
                .map_err(db)?;
            out.push(Some((buf, len)));
        }
        Ok(out)
    }

    fn blob(&mut self, h: &ContentHash) -> Result<Option<Vec<u8>>> {
        let row = self
            .tx
            .prepare_cached("SELECT data, chunked FROM blobs WHERE k = ?1 AND hash = ?2")
            .and_then(|mut st| {
                st.query_row(params![key8(&h.0), h.as_bytes().as_slice()], |r| {
                    Ok((bytes(r, 0)?, r.get::<_, bool>(1)?))
                })
                .optional()
            })
            .map_err(db)?;
        match row {
            Some((Some(data), chunked)) => self.payload_of(h, chunked, data).map(Some),
            _ => Ok(None),
        }
    }

    fn scan_blobs(&mut self, keep: bool, f: &mut crate::backend::PayloadVisitor<'_>) -> Result<()> {
        // Whole rows are passed as they are read; chunked ones are
        // collected (their manifests are small) and assembled after the
        // scan, each hashed once.
        let mut chunked: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        {
            let mut st = self
                .tx
                .prepare("SELECT hash, data, chunked FROM blobs ORDER BY id")
                .map_err(db)?;
            let mut rows = st.query([]).map_err(db)?;
            while let Some(r) = rows.next().map_err(db)? {
                let h = r
                    .get_ref(0)
                    .map_err(db)?
                    .as_bytes_or_null()
                    .map_err(|e| db(e.into()))?
                    .unwrap_or_default();
                let d = r
                    .get_ref(1)
                    .map_err(db)?
                    .as_bytes_or_null()
                    .map_err(|e| db(e.into()))?
                    .unwrap_or_default();
                if r.get::<_, bool>(2).map_err(db)? {
                    chunked.push((h.to_vec(), d.to_vec()));
                } else {
                    f(h, Ok(crate::backend::Scanned::Unchecked(d)))?;
                }
            }
        }
        crate::chunk::scan_chunked(self, chunked, keep, f)?;
        // A chunk row whose lookup key (`chunks.k`) is not the start of
        // its hash is missed by every read (`read_chunks` reads on in row
        // order only to rows a lookup would find), so the payloads that
        // need it were reported above as missing it: no scan of the whole
        // chunk table (a third of verify's time for large payloads).
        // A row whose lookup key is not its hash's is invisible to every
        // lookup by hash.
        let off: Option<Vec<u8>> = self
            .tx
            .query_row(
                "SELECT hash FROM blobs WHERE k IS NOT substr(hash, 1, 8) LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        if let Some(h) = off {
            return Err(StoreError::backend(format!(
                "blob {}: its lookup key (blobs.k) is not the start of its hash, \
                 so lookups by hash miss it",
                hex::encode(h)
            )));
        }
        Ok(())
    }

    fn scan_chunks(&mut self, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()> {
        self.visit_pairs("SELECT hash, data FROM chunks ORDER BY id", f)
    }

    fn delete_blob(&mut self, h: &ContentHash) -> Result<bool> {
        let manifest: Option<Vec<u8>> = self
            .tx
            .query_row(
                "SELECT data FROM blobs WHERE k = ?1 AND hash = ?2 AND chunked",
                params![key8(&h.0), h.as_bytes().as_slice()],
                |r| r.get(0),
            )
            .optional()
            .map_err(db)?;
        let n = self
            .tx
            .execute(
                "DELETE FROM blobs WHERE k = ?1 AND hash = ?2",
                params![key8(&h.0), h.as_bytes().as_slice()],
            )
            .map_err(db)?;
        self.last_blob = None;
        if let Some(m) = manifest {
            // The chunks no other payload names go with it.
            crate::chunk::release(self, &m)?;
        }
        Ok(n > 0)
    }
}

impl StateTx for SqliteTx<'_> {
    fn put_state_node(&mut self, h: &Digest, body: &[u8]) -> Result<()> {
        let there = self
            .tx
            .prepare_cached("SELECT 1 FROM state_nodes WHERE substr(hash, 1, 8) = ?1 AND hash = ?2")
            .and_then(|mut st| st.exists(params![key8(h), h.0.as_slice()]))
            .map_err(db)?;
        if !there {
            self.tx
                .prepare_cached("INSERT INTO state_nodes (hash, body) VALUES (?1, ?2)")
                .and_then(|mut st| st.execute(params![h.0.as_slice(), body]))
                .map_err(db)?;
        }
        Ok(())
    }

    fn scan_state_nodes(&mut self, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()> {
        self.visit_pairs("SELECT hash, body FROM state_nodes", f)
    }

    fn state_node(&mut self, h: &Digest) -> Result<Option<Vec<u8>>> {
        self.tx
            .prepare_cached(
                "SELECT body FROM state_nodes WHERE substr(hash, 1, 8) = ?1 AND hash = ?2",
            )
            .and_then(|mut st| {
                st.query_row(params![key8(h), h.0.as_slice()], |r| r.get(0))
                    .optional()
            })
            .map_err(db)
    }
}

const OTLP_COLS: &str =
    "seq, sessions, received_at, media, base, nodes_from, nodes_to, body_len, residual";

impl SqliteTx<'_> {
    /// Hands `f` the two byte columns of each row `sql` selects, as stored
    /// (borrowed, not copied; NULL as empty): the one loop behind the
    /// blob, chunk and state-node scans.
    fn visit_pairs(&mut self, sql: &str, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()> {
        let mut st = self.tx.prepare(sql).map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            f(bytes_ref(r, 0).map_err(db)?, bytes_ref(r, 1).map_err(db)?)?;
        }
        Ok(())
    }

    fn otlp_rows(
        &mut self,
        sql: &str,
        p: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<crate::OtlpExportRow>> {
        let mut st = self.tx.prepare_cached(sql).map_err(db)?;
        let mut rows = st.query(p).map_err(db)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(db)? {
            out.push(crate::backend::otlp_export_row(r).map_err(StoreError::corrupt)?);
        }
        Ok(out)
    }

    fn put_otlp(&mut self, seq: Option<u64>, row: &crate::OtlpExportRow) -> Result<u64> {
        let opt = |v: Option<u64>| v.map(|x| x as i64);
        self.tx
            .prepare_cached(
                "INSERT INTO otlp_exports (seq, sessions, received_at, media, base, nodes_from, nodes_to, body_len, residual) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    opt(seq),
                    crate::backend::otlp_sessions_col(&row.sessions),
                    row.received_at,
                    row.media,
                    opt(row.base),
                    opt(row.nodes.map(|n| n.0)),
                    opt(row.nodes.map(|n| n.1)),
                    row.body_len as i64,
                    row.residual,
                ])
            })
            .map_err(db)?;
        Ok(self.tx.last_insert_rowid().max(0) as u64)
    }
}

impl TelemetryTx for SqliteTx<'_> {
    fn delete_otlp_export(&mut self, seq: u64) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM otlp_exports WHERE seq = ?1")
            .and_then(|mut st| st.execute(params![seq as i64]))
            .map_err(db)?;
        Ok(())
    }

    fn insert_otlp_export(&mut self, row: &crate::OtlpExportRow) -> Result<u64> {
        self.put_otlp(None, row)
    }

    fn put_otlp_export(&mut self, row: &crate::OtlpExportRow) -> Result<()> {
        self.put_otlp(Some(row.seq), row).map(|_| ())
    }

    fn otlp_exports(&mut self, session: Option<&SessionId>) -> Result<Vec<crate::OtlpExportRow>> {
        match session {
            Some(s) => {
                let like = format!("% {s} %");
                self.otlp_rows(
                    &format!(
                        "SELECT {OTLP_COLS} FROM otlp_exports WHERE sessions LIKE ?1 ORDER BY seq"
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
                &format!("SELECT {OTLP_COLS} FROM otlp_exports WHERE seq = ?1"),
                &[&(seq as i64)],
            )?
            .pop())
    }
}

impl FactTx for SqliteTx<'_> {
    fn insert_fact(&mut self, seq: u64, hash: &Digest, body: &[u8]) -> Result<()> {
        self.tx
            .prepare_cached("INSERT INTO facts (seq, hash, body) VALUES (?1, ?2, ?3)")
            .and_then(|mut st| st.execute(params![seq as i64, hash.0.as_slice(), body]))
            .map_err(db)?;
        Ok(())
    }

    fn last_fact(&mut self) -> Result<Option<(u64, Digest)>> {
        self.tx
            .prepare_cached("SELECT seq, hash FROM facts ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| {
                st.query_row([], |r| Ok((r.get::<_, i64>(0)?, digest(r, 1)?)))
                    .optional()
            })
            .map(|o| o.map(|(s, h)| (s.max(0) as u64, h)))
            .map_err(db)
    }

    fn facts(&mut self) -> Result<Vec<crate::backend::Decoded<crate::backend::FactRow>>> {
        let mut st = self
            .tx
            .prepare("SELECT seq, hash, body FROM facts ORDER BY seq")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(db)? {
            use crate::backend::Columns;
            let row = (|| {
                let seq = r.int(0)?.ok_or("its number is NULL")?;
                Ok(crate::backend::FactRow {
                    seq: u64::try_from(seq).map_err(|_| format!("its number {seq} is negative"))?,
                    hash: r.bytes(1)?.ok_or("its hash is NULL")?.to_vec(),
                    body: r.bytes(2)?.ok_or("its body is NULL")?.to_vec(),
                })
            })();
            out.push(row.map_err(|e: String| format!("fact row does not decode: {e}")));
        }
        Ok(out)
    }
}

impl SearchTx for SqliteTx<'_> {
    fn search_cursor(&mut self) -> Result<u64> {
        self.tx
            .prepare_cached("SELECT cursor FROM search_state WHERE id = 1")
            .and_then(|mut st| st.query_row([], |r| r.get::<_, i64>(0)).optional())
            .map(|c| c.unwrap_or(0).max(0) as u64)
            .map_err(db)
    }

    fn search_add(&mut self, docs: &[(u64, Vec<String>)], cursor: u64) -> Result<()> {
        let mut st = self
            .tx
            .prepare_cached("INSERT INTO search_fts (rowid, words) VALUES (?1, ?2)")
            .map_err(db)?;
        for (seq, words) in docs {
            st.execute(params![*seq as i64, words.join(" ")])
                .map_err(db)?;
        }
        self.tx
            .prepare_cached("UPDATE search_state SET cursor = ?1 WHERE id = 1")
            .and_then(|mut st| st.execute(params![cursor as i64]))
            .map_err(db)?;
        Ok(())
    }

    fn search_forget(&mut self, h: &ContentHash) -> Result<()> {
        self.flush_run()?;
        self.tx
            .execute(
                "DELETE FROM search_fts WHERE rowid IN \
                 (SELECT seq FROM nodes WHERE payload = ?1)",
                params![h.as_bytes().as_slice()],
            )
            .map_err(db)?;
        Ok(())
    }

    fn search_clear(&mut self) -> Result<()> {
        self.tx
            .execute_batch(
                "INSERT INTO search_fts (search_fts) VALUES ('delete-all');
                 UPDATE search_state SET cursor = 0 WHERE id = 1;",
            )
            .map_err(db)
    }

    fn search_match(&mut self, q: &crate::search::IndexQuery<'_>) -> Result<Vec<(u64, f64)>> {
        use crate::search::Param;
        let diag = |k: &str| {
            format!(
                "(CASE WHEN json_valid(n.diagnostics) THEN \
                 CAST(json_extract(n.diagnostics, '$.{k}') AS TEXT) END)"
            )
        };
        let (conds, values) = crate::search::conditions(q, '?', 2, &diag);
        let limit = q.limit.map_or(-1, |l| l as i64);
        // Every indexed row is a node's (nodes are never deleted): the
        // node rows are joined only for conditions on them.
        let join = match conds.is_empty() {
            true => "",
            false => "JOIN nodes n ON n.seq = search_fts.rowid",
        };
        let sql = format!(
            "SELECT search_fts.rowid, bm25(search_fts) AS rank FROM search_fts {join} \
             WHERE search_fts MATCH ?1{conds} ORDER BY rank, search_fts.rowid DESC LIMIT {limit}"
        );
        let mut bound: Vec<rusqlite::types::Value> =
            vec![crate::search::fts5_query(q.query).into()];
        bound.extend(values.into_iter().map(|p| match p {
            Param::Text(t) => t.into(),
            Param::Int(i) => i.into(),
        }));
        let mut st = self.tx.prepare_cached(&sql).map_err(db)?;
        let rows = st
            .query_map(rusqlite::params_from_iter(bound), |r| {
                Ok((r.get::<_, i64>(0)?.max(0) as u64, -r.get::<_, f64>(1)?))
            })
            .map_err(db)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(db)
    }
}

impl RedactionTx for SqliteTx<'_> {
    fn set_node_diagnostics(&mut self, h: &NodeHash, diagnostics: &str) -> Result<()> {
        self.tx
            .execute(
                "UPDATE nodes SET diagnostics = ?3 WHERE substr(hash, 1, 8) = ?1 AND hash = ?2",
                params![key8(&h.0), h.as_bytes().as_slice(), diagnostics],
            )
            .map_err(db)?;
        Ok(())
    }

    fn set_fact_body(&mut self, seq: u64, body: &[u8]) -> Result<()> {
        self.tx
            .execute(
                "UPDATE facts SET body = ?2 WHERE seq = ?1",
                params![seq as i64, body],
            )
            .map_err(db)?;
        Ok(())
    }

    fn insert_redaction(&mut self, h: &ContentHash, fact: u64) -> Result<()> {
        self.tx
            .execute(
                "INSERT INTO redactions (hash, fact) VALUES (?1, ?2)",
                params![h.as_bytes().as_slice(), fact as i64],
            )
            .map_err(db)?;
        Ok(())
    }

    fn redaction(&mut self, h: &ContentHash) -> Result<Option<(u64, Vec<u8>)>> {
        self.tx
            .prepare_cached(
                "SELECT f.seq, f.body FROM redactions r JOIN facts f ON f.seq = r.fact \
                 WHERE r.hash = ?1",
            )
            .and_then(|mut st| {
                st.query_row(params![h.as_bytes().as_slice()], |r| {
                    Ok((r.get::<_, i64>(0)?, bytes(r, 1)?))
                })
                .optional()
            })
            .map(|o| o.and_then(|(s, b)| Some((s.max(0) as u64, b?))))
            .map_err(db)
    }

    fn redaction_rows(&mut self) -> Result<Vec<crate::backend::RedactionRow>> {
        let mut st = self
            .tx
            .prepare("SELECT hash, fact FROM redactions ORDER BY fact")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(db)? {
            use crate::backend::Columns;
            let row = (|| {
                let h = r.bytes(0)?.ok_or("its digest is NULL")?.to_vec();
                let f = r.int(1)?.ok_or("its fact number is NULL")?;
                let f = u64::try_from(f).map_err(|_| format!("its fact number {f} is negative"))?;
                Ok((h, f))
            })();
            out.push(row.map_err(|e: String| format!("redaction row does not decode: {e}")));
        }
        Ok(out)
    }
}

impl CheckTx for SqliteTx<'_> {
    fn session_runs(
        &mut self,
    ) -> Result<Option<Vec<std::result::Result<crate::backend::SessionRun, String>>>> {
        self.flush_run()?;
        let mut st = self
            .tx
            .prepare("SELECT first, last, session FROM session_runs ORDER BY first")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(db)? {
            use crate::backend::Columns;
            let decoded = (|| {
                let first = r.int(0)?.ok_or("no first")?;
                let last = r.int(1)?.ok_or("no last")?;
                let session = r.text(2)?.ok_or("no session")?;
                let session = SessionId::parse(session)
                    .map_err(|_| format!("session `{session}` is malformed"))?;
                if first < 1 || last < first {
                    return Err(format!("it spans {first}..{last}"));
                }
                Ok(crate::backend::SessionRun {
                    first: first as u64,
                    last: last as u64,
                    session,
                })
            })();
            out.push(decoded.map_err(|e: String| format!("session index row: {e}")));
        }
        Ok(Some(out))
    }

    fn session_rows(&mut self) -> Result<Vec<crate::backend::Decoded<SessionRow>>> {
        let mut st = self
            .tx
            .prepare("SELECT id, agent, title, created_at FROM sessions ORDER BY rowid")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(db)? {
            out.push(session_row(r).map_err(|e| {
                let id = bytes(r, 0).ok().flatten().unwrap_or_default();
                format!(
                    "session row `{}` does not decode: {e}",
                    String::from_utf8_lossy(&id)
                )
            }));
        }
        Ok(out)
    }

    fn branch_rows(&mut self) -> Result<Vec<crate::backend::Decoded<BranchRow>>> {
        let mut st = self
            .tx
            .prepare(&format!(
                "SELECT {BRANCH_COLS} FROM branches ORDER BY rowid"
            ))
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(db)? {
            out.push(branch_row(r).map_err(|e| {
                let s = bytes(r, 0).ok().flatten().unwrap_or_default();
                let n = bytes(r, 1).ok().flatten().unwrap_or_default();
                format!(
                    "branch row `{}/{}` does not decode: {e}",
                    String::from_utf8_lossy(&s),
                    String::from_utf8_lossy(&n)
                )
            }));
        }
        Ok(out)
    }

    fn engine_check(&mut self, structure: bool) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let version: i64 = self
            .tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db)?;
        if let Some(why) = schema_mismatch(self.tx, version)? {
            out.push(why);
        }
        if structure {
            out.extend(quick_check(self.tx)?);
        }
        Ok(out)
    }
}

/// SQLite's structural check, as problems. `quick_check`: every page,
/// cell and record well formed, O(N). `integrity_check` also looks every
/// index entry up in its table (O(N log N): 3.1 s of a 5.4 s verify of
/// 300,000 nodes, more with every index added); verify's own checks read
/// the tables themselves, and an index SQL maintains cannot be edited
/// through SQL, so only a byte-level edit could make one disagree.
fn quick_check(c: &Connection) -> Result<Vec<String>> {
    let mut st = c.prepare("PRAGMA quick_check").map_err(db)?;
    let lines: Vec<String> = st
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect())
        .map_err(db)?;
    Ok(if lines == ["ok"] {
        Vec::new()
    } else {
        lines
            .into_iter()
            .map(|l| format!("SQLite's integrity check (quick_check): {l}"))
            .collect()
    })
}

/// A [`crate::backend::Link`] from `hash, parent, kind, depth, ctx_turn, ctx_open`.
fn link_row(r: &Row<'_>) -> rusqlite::Result<crate::backend::Link> {
    let kind = u8::try_from(r.get::<_, i64>(2)?)
        .ok()
        .and_then(convo_core::Kind::from_code)
        .ok_or_else(|| corrupt("a stored node kind is unknown"))?;
    let count = |i: usize, what: &str| -> rusqlite::Result<u64> {
        u64::try_from(r.get::<_, i64>(i)?)
            .map_err(|_| corrupt(&format!("a stored {what} is negative")))
    };
    Ok(crate::backend::Link::of(
        NodeHash(digest(r, 0)?),
        opt_digest(r, 1)?.map(NodeHash),
        kind,
        count(3, "depth")?,
        count(4, "turn number")?,
        r.get(5)?,
    ))
}

impl ImportTx for SqliteTx<'_> {
    fn import_key(&mut self, s: &SessionId, key: &str) -> Result<Option<NodeHash>> {
        self.tx
            .prepare_cached("SELECT node FROM import_keys WHERE session = ?1 AND key = ?2")
            .and_then(|mut st| {
                st.query_row(params![s.to_string(), key], |r| digest(r, 0))
                    .optional()
            })
            .map(|h| h.map(NodeHash))
            .map_err(db)
    }

    fn put_import_keys(&mut self, s: &SessionId, keys: &[(String, NodeHash)]) -> Result<()> {
        let mut st = self
            .tx
            .prepare_cached(
                "INSERT INTO import_keys (session, key, node) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (session, key) DO UPDATE SET node = excluded.node",
            )
            .map_err(db)?;
        let s = s.to_string();
        for (k, h) in keys {
            st.execute(params![s, k, h.as_bytes().as_slice()])
                .map_err(db)?;
        }
        Ok(())
    }

    fn import_tail(&mut self, s: &SessionId) -> Result<Option<String>> {
        self.tx
            .prepare_cached("SELECT tail FROM import_tails WHERE session = ?1")
            .and_then(|mut st| st.query_row([s.to_string()], |r| r.get(0)).optional())
            .map_err(db)
    }

    fn set_import_tail(&mut self, s: &SessionId, tail: &str) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO import_tails (session, tail) VALUES (?1, ?2) \
                 ON CONFLICT (session) DO UPDATE SET tail = excluded.tail",
            )
            .and_then(|mut st| st.execute(params![s.to_string(), tail]))
            .map_err(db)?;
        Ok(())
    }

    fn scan_import_index(
        &mut self,
        f: &mut dyn FnMut(crate::backend::ImportRow) -> Result<()>,
    ) -> Result<()> {
        use crate::backend::ImportRow;
        let session = |r: &Row<'_>| -> Result<SessionId> {
            let s: String = r.get(0).map_err(db)?;
            SessionId::parse(&s).map_err(|_| {
                StoreError::corrupt(format!("import index: session `{s}` is malformed"))
            })
        };
        let mut st = self
            .tx
            .prepare("SELECT session, key, node FROM import_keys ORDER BY session, key")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            let node = digest(r, 2).map_err(db)?;
            f(ImportRow::Key(
                session(r)?,
                r.get(1).map_err(db)?,
                NodeHash(node),
            ))?;
        }
        drop(rows);
        let mut st = self
            .tx
            .prepare("SELECT session, tail FROM import_tails ORDER BY session")
            .map_err(db)?;
        let mut rows = st.query([]).map_err(db)?;
        while let Some(r) = rows.next().map_err(db)? {
            f(ImportRow::Tail(session(r)?, r.get(1).map_err(db)?))?;
        }
        drop(rows);
        for (path, look) in self.import_files()? {
            f(ImportRow::File(path, look))?;
        }
        Ok(())
    }

    fn import_files(&mut self) -> Result<Vec<(String, String)>> {
        let mut st = self
            .tx
            .prepare_cached("SELECT path, look FROM import_files")
            .map_err(db)?;
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(db)?;
        rows.collect::<rusqlite::Result<_>>().map_err(db)
    }

    fn put_import_files(&mut self, files: &[(String, String)]) -> Result<()> {
        let mut st = self
            .tx
            .prepare_cached(
                "INSERT INTO import_files (path, look) VALUES (?1, ?2) \
                 ON CONFLICT (path) DO UPDATE SET look = excluded.look",
            )
            .map_err(db)?;
        for (path, look) in files {
            st.execute(params![path, look]).map_err(db)?;
        }
        Ok(())
    }
}
