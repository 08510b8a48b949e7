//! The SQLite schema: its migrations (`migrations/sqlite/*.sql`, tracked
//! with `PRAGMA user_version`), applied in one write transaction when a
//! store is opened, and the check that a database's tables are the ones
//! its version names.

use super::*;

pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/sqlite/0001_init.sql"),
    include_str!("../../migrations/sqlite/0002_runs.sql"),
    include_str!("../../migrations/sqlite/0003_facts.sql"),
    include_str!("../../migrations/sqlite/0004_search.sql"),
    include_str!("../../migrations/sqlite/0005_redact.sql"),
    include_str!("../../migrations/sqlite/0006_blob_key.sql"),
    include_str!("../../migrations/sqlite/0007_turns.sql"),
    include_str!("../../migrations/sqlite/0008_chunks.sql"),
    include_str!("../../migrations/sqlite/0009_thread_index.sql"),
    include_str!("../../migrations/sqlite/0010_open_turns.sql"),
    include_str!("../../migrations/sqlite/0011_otlp_exports.sql"),
    include_str!("../../migrations/sqlite/0012_rechunk.sql"),
    include_str!("../../migrations/sqlite/0013_import_index.sql"),
    include_str!("../../migrations/sqlite/0014_thread_index_narrow.sql"),
    include_str!("../../migrations/sqlite/0015_import_files.sql"),
];
/// The schema version whose migration starts the fact journal: the
/// sessions and working states already stored are journalled right after it.
const FACTS_VERSION: usize = 3;

impl Sqlite {
    /// Brings the schema up to [`MIGRATIONS`], journalling the sessions
    /// and working states already stored when the fact journal starts.
    pub(super) fn migrate(&mut self) -> Result<()> {
        let known = MIGRATIONS.len() as i64;
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db)?;
        if version > known {
            return Err(StoreError::SchemaTooNew {
                found: version,
                known,
            });
        }
        if version == known {
            return Ok(());
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(db)?;
        // Re-read under the write lock: another process may have migrated meanwhile.
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(db)?;
        if version == 0 {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(db)?;
        }
        if let Some(why) = schema_mismatch(&tx, version)? {
            return Err(StoreError::damaged(why));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql).map_err(db)?;
            tx.pragma_update(None, "user_version", i as i64 + 1)
                .map_err(db)?;
            if i + 1 == FACTS_VERSION {
                let (mut recent, mut stored) = Default::default();
                let mut t = SqliteTx {
                    tx: &tx,
                    last_blob: None,
                    run: None,
                    hot: Hot::default(),
                    recent: &mut recent,
                    stored: &mut stored,
                };
                crate::facts::journal_existing(&mut t)?;
            }
        }
        tx.commit().map_err(db)
    }
}

/// One schema object: type, name, table, SQL.
type SchemaObject = (String, String, String, Option<String>);

/// The schema objects of a database, SQLite's own aside.
fn schema_of(c: &Connection) -> Result<Vec<SchemaObject>> {
    let mut st = c
        .prepare(
            "SELECT type, name, tbl_name, sql FROM sqlite_master \
             WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name",
        )
        .map_err(db)?;
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .and_then(|rows| rows.collect())
        .map_err(db)
}

/// Why the schema of `c` is not the one `PRAGMA user_version` = `version`
/// names (migrations 1..=version applied to an empty database), if it is not.
pub(super) fn schema_mismatch(c: &Connection, version: i64) -> Result<Option<String>> {
    let Ok(v) = usize::try_from(version) else {
        return Ok(Some(format!(
            "its schema version (PRAGMA user_version) is {version}"
        )));
    };
    if v > MIGRATIONS.len() {
        return Ok(None);
    }
    let built = Connection::open_in_memory().map_err(db)?;
    for sql in &MIGRATIONS[..v] {
        built.execute_batch(sql).map_err(db)?;
    }
    let want = schema_of(&built)?;
    for sql in &MIGRATIONS[v..] {
        built.execute_batch(sql).map_err(db)?;
    }
    let later = schema_of(&built)?;
    // Objects of its own (a user's table, say) are not convo's business;
    // convo's objects missing, defined differently, or from a later version are.
    let have = schema_of(c)?;
    let key = |o: &SchemaObject| format!("{} {}", o.0, o.1);
    let missing: Vec<String> = want
        .iter()
        .filter(|w| !have.iter().any(|h| key(h) == key(w)))
        .map(key)
        .collect();
    let changed: Vec<String> = want
        .iter()
        .filter(|w| have.iter().any(|h| key(h) == key(w) && h != *w))
        .map(key)
        .collect();
    let ahead: Vec<String> = have
        .iter()
        .filter(|h| {
            later.iter().any(|l| key(l) == key(h)) && !want.iter().any(|w| key(w) == key(h))
        })
        .map(key)
        .collect();
    if missing.is_empty() && changed.is_empty() && ahead.is_empty() {
        return Ok(None);
    }
    let detail = format!(
        "missing: [{}], defined differently: [{}], from a later version: [{}]",
        missing.join(", "),
        changed.join(", "),
        ahead.join(", ")
    );
    Ok(Some(format!(
        "its schema version (PRAGMA user_version) says {version}, but its tables are not those of version {version} ({detail})"
    )))
}
