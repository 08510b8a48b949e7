//! PostgreSQL: bulk ingest and durable single appends against a bare
//! `INSERT` of rows of the same size through the same client, and the
//! throughput of 8 concurrent writers on both backends.
//!
//! Needs a server: `CONVO_BENCH_PG=postgres://…/postgres` (an admin URL; a
//! fresh database is created and dropped), e.g. from
//! `PG_FSYNC=on scripts/pg-cluster start DIR` so commits are really durable.

use crate::util::{PAYLOAD, Result, Row, Scratch, Verdict, drafts, note, rate, thousands};
use convo_core::{BranchName, Kind};
use convo_store::Store;
use convo_testutil::draft;
use std::time::Instant;

pub(crate) struct Db {
    admin: String,
    name: String,
    pub(crate) url: String,
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.admin, postgres::NoTls) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

pub(crate) fn database() -> Result<Option<Db>> {
    let Ok(admin) = std::env::var("CONVO_BENCH_PG") else {
        note("SKIPPED: set CONVO_BENCH_PG=postgres://… to benchmark PostgreSQL");
        return Ok(None);
    };
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!(
        "convo_bench_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut c = postgres::Client::connect(&admin, postgres::NoTls)?;
    // Two statements: CREATE DATABASE cannot run inside an implicit transaction.
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))?;
    c.batch_execute(&format!("CREATE DATABASE {name}"))?;
    let base = admin
        .rsplit_once('/')
        .map(|(b, _)| b)
        .unwrap_or(&admin)
        .to_owned();
    let url = format!("{base}/{name}");
    Ok(Some(Db { admin, name, url }))
}

/// A bare table with rows as large as a node row plus its payload.
fn bare(url: &str) -> Result<postgres::Client> {
    let mut c = postgres::Client::connect(url, postgres::NoTls)?;
    c.batch_execute(
        "DROP TABLE IF EXISTS bare; CREATE TABLE bare (id BIGINT PRIMARY KEY, data BYTEA NOT NULL)",
    )?;
    Ok(c)
}

/// Bytes of one node's rows (node row plus payload row), roughly.
const ROW: usize = 420 + PAYLOAD;

pub fn postgres() -> Result<Vec<Row>> {
    let Some(db) = database()? else {
        return Ok(Vec::new());
    };
    let mut rows = Vec::new();
    let main = BranchName::main();

    // Bulk ingest: 20,000 nodes in batches of 10,000.
    let mut store = Store::open(&db.url)?;
    let ses = store.transaction(|l| l.new_session("bench", None, 0))?.id;
    let n = 20_000u64;
    let t = Instant::now();
    let mut i = 0;
    while i < n {
        store.transaction(|l| l.append_many(&ses, &main, &drafts(i, 10_000)))?;
        i += 10_000;
    }
    let ours = rate(n, t.elapsed());
    let mut c = bare(&db.url)?;
    let data = vec![7u8; ROW];
    let t = Instant::now();
    {
        let mut tx = c.transaction()?;
        let st = tx.prepare("INSERT INTO bare (id, data) VALUES ($1, $2)")?;
        for id in 0..n as i64 {
            tx.execute(&st, &[&id, &data])?;
        }
        tx.commit()?;
    }
    let base = rate(n, t.elapsed());
    rows.push(Row::new(
        "PostgreSQL bulk ingest (10,000 nodes/tx)",
        format!("{} nodes/s", thousands(ours)),
        format!("bare INSERT {} rows/s", thousands(base)),
        format!("{:.0}%", 100.0 * ours / base),
        "—",
        Verdict::Info,
    ));

    // Durable single appends: one transaction each.
    let appends = 1_000u64;
    let ses2 = store.transaction(|l| l.new_session("bench", None, 0))?.id;
    let t = Instant::now();
    for k in 0..appends {
        let kind = if k % 2 == 0 {
            Kind::Invoke
        } else {
            Kind::Complete
        };
        store.transaction(|l| {
            l.append(&ses2, &main, &draft(kind, &format!("single {k}"), k as i64))
        })?;
    }
    let ours = rate(appends, t.elapsed());
    let st = c.prepare("INSERT INTO bare (id, data) VALUES ($1, $2)")?;
    let t = Instant::now();
    for id in 0..appends as i64 {
        c.execute(&st, &[&(1_000_000 + id), &data])?;
    }
    let base = rate(appends, t.elapsed());
    rows.push(Row::new(
        "PostgreSQL single appends (1 tx each)",
        format!("{} nodes/s", thousands(ours)),
        format!("bare INSERT {} rows/s", thousands(base)),
        format!("{:.0}%", 100.0 * ours / base),
        "—",
        Verdict::Info,
    ));
    drop(store);
    rows.push(writers("PostgreSQL", &db.url)?);
    Ok(rows)
}

/// 8 threads, each with its own connection and session, 250 single appends each.
fn writers(label: &str, url: &str) -> Result<Row> {
    let per = 250u64;
    let t = Instant::now();
    let handles: Vec<_> = (0..8)
        .map(|w| {
            let url = url.to_owned();
            std::thread::spawn(move || -> std::result::Result<(), String> {
                let mut s = Store::open(&url).map_err(|e| e.to_string())?;
                let ses = s
                    .transaction(|l| l.new_session("w", None, 0))
                    .map_err(|e| e.to_string())?
                    .id;
                let main = BranchName::main();
                for k in 0..per {
                    let kind = if k % 2 == 0 {
                        Kind::Invoke
                    } else {
                        Kind::Complete
                    };
                    s.transaction(|l| {
                        l.append(&ses, &main, &draft(kind, &format!("w{w} {k}"), k as i64))
                    })
                    .map_err(|e| e.to_string())?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a writer panicked")??;
    }
    let r = rate(8 * per, t.elapsed());
    Ok(Row::new(
        format!("{label}: 8 concurrent writers, 1 append/tx"),
        format!("{} nodes/s", thousands(r)),
        "—",
        "—",
        "—",
        Verdict::Info,
    ))
}

pub fn concurrent_sqlite() -> Result<Vec<Row>> {
    let dir = Scratch::new("writers")?;
    drop(dir.store("")?);
    Ok(vec![writers("SQLite", &dir.url(""))?])
}
