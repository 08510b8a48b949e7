//! The PostgreSQL schema: its migrations (`migrations/postgres/*.sql`,
//! the version in the `convo_schema` table), applied in one transaction
//! under the migration lock when a store is opened.

use super::*;

pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/postgres/0002_facts.sql"),
    include_str!("../../migrations/postgres/0003_search.sql"),
    include_str!("../../migrations/postgres/0004_redact.sql"),
    include_str!("../../migrations/postgres/0005_turns.sql"),
    include_str!("../../migrations/postgres/0006_chunks.sql"),
    include_str!("../../migrations/postgres/0007_thread_index.sql"),
    include_str!("../../migrations/postgres/0008_open_turns.sql"),
    include_str!("../../migrations/postgres/0009_otlp_exports.sql"),
    include_str!("../../migrations/postgres/0010_rechunk.sql"),
    include_str!("../../migrations/postgres/0011_import_index.sql"),
    include_str!("../../migrations/postgres/0012_import_files.sql"),
];
/// The schema version whose migration starts the fact journal (see the SQLite backend's `schema.rs`).
const FACTS_VERSION: usize = 2;

impl Postgres {
    /// Brings the schema up to [`MIGRATIONS`], journalling the sessions
    /// and working states already stored when the fact journal starts.
    pub(super) fn migrate(&mut self) -> Result<()> {
        let known = MIGRATIONS.len() as i64;
        let mut t = PgTx::new(&mut self.conn, Mode::Migrate);
        let out = (|| {
            t.simple("CREATE TABLE IF NOT EXISTS convo_schema (version BIGINT NOT NULL)")?;
            let version: i64 = t
                .opt("SELECT version FROM convo_schema", &[])?
                .map(|r| r.try_get(0).map_err(db))
                .transpose()?
                .unwrap_or(0);
            if version > known {
                return Err(StoreError::SchemaTooNew {
                    found: version,
                    known,
                });
            }
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                t.simple(sql)?;
                t.simple(&format!(
                    "DELETE FROM convo_schema; INSERT INTO convo_schema (version) VALUES ({})",
                    i + 1
                ))?;
                if i + 1 == FACTS_VERSION {
                    crate::facts::journal_existing(&mut t)?;
                }
            }
            t.commit()
        })();
        if out.is_err() {
            t.rollback();
        }
        out
    }
}
