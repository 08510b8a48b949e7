//! Where bulk ingest's time goes: the store's per-node writes rebuilt in
//! raw SQL one piece at a time, each rung measured against the bare insert
//! of figure 1 in the same run. The rungs use the store's own schema (a
//! fresh `Store::open` creates it; indexes a rung does not use are
//! dropped), its 100-byte payloads and 10,000-node transactions. The last
//! rung is every per-node write the store makes, without any of its Rust
//! (no timeline rules, no context, no node encoding: one SHA-256 stands for
//! the node hash), so it is a floor for `append_many` on this schema.

use crate::util::{
    Result, Row, Scratch, Verdict, bare_insert, median_f, payload, rate, store_pragmas, timed,
};
use rusqlite::{Connection, OptionalExtension, params};
use sha2::Digest as _;

const NODES: u64 = 100_000;
const BATCH: u64 = 10_000;
const REPS: usize = 3;
/// The node row size figure 1 measures (dbstat), for the bare insert.
const ROW_BYTES: usize = 247;

#[derive(Clone, Copy, PartialEq, PartialOrd)]
enum Rung {
    /// The node row, every column, two SHA-256 (payload, node).
    Row,
    /// + the index on the node hash.
    NodeIndex,
    /// + the payload's row in `blobs` (no index, no lookup).
    Blob,
    /// + the blob index and the lookup that deduplicates payloads.
    BlobIndex,
}

fn sha(b: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(b).into()
}

fn rung_once(r: Rung) -> Result<f64> {
    let dir = Scratch::new("floor")?;
    let ses = dir
        .store("")?
        .transaction(|l| l.new_session("agent", None, 0))?
        .id
        .to_string();
    let c = Connection::open(dir.db())?;
    store_pragmas(&c, false)?;
    if r < Rung::NodeIndex {
        c.execute_batch("DROP INDEX nodes_by_hash")?;
    }
    if r < Rung::BlobIndex {
        c.execute_batch("DROP INDEX blobs_by_hash")?;
    }
    let (_, d) = timed(|| {
        let mut node = c.prepare(
            "INSERT INTO nodes (hash, session, parent, kind, submission, sequence, sender, \
             recipient, payload, payload_len, diagnostics, state, created_at, depth, ctx_sub, \
             ctx_open, ctx_seq, ctx_state, payload_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, NULL, 'user', 'agent', ?6, ?7, '{}', NULL, ?8, ?9, ?5, \
             ?10, 0, NULL, ?11)",
        )?;
        let mut find =
            c.prepare("SELECT id FROM blobs WHERE substr(hash, 1, 8) = ?1 AND hash = ?2")?;
        let mut blob = c.prepare("INSERT INTO blobs (hash, data) VALUES (?1, ?2)")?;
        let mut parent = [0u8; 32];
        let mut sub = [0u8; 32];
        let mut i = 0;
        while i < NODES {
            c.execute_batch("BEGIN IMMEDIATE")?;
            let first = i + 1;
            for _ in 0..BATCH {
                let p = payload(i);
                let ph = sha(p.as_bytes());
                let found: Option<i64> = if r >= Rung::BlobIndex {
                    find.query_row(params![&ph[..8], &ph[..]], |row| row.get(0))
                        .optional()?
                } else {
                    None
                };
                let id = match found {
                    None if r >= Rung::Blob => {
                        blob.execute(params![&ph[..], p.as_bytes()])?;
                        Some(c.last_insert_rowid())
                    }
                    found => found,
                };
                let mut enc = Vec::with_capacity(200);
                enc.extend_from_slice(&parent);
                enc.extend_from_slice(&ph);
                enc.extend_from_slice(ses.as_bytes());
                let h = sha(&enc);
                let invoke = i % 2 == 0;
                if invoke {
                    sub = h;
                }
                node.execute(params![
                    &h[..],
                    ses,
                    (i > 0).then_some(&parent[..]),
                    if invoke { 1 } else { 4 },
                    &sub[..],
                    &ph[..],
                    p.len() as i64,
                    1_770_000_000_000 + i as i64,
                    i as i64 + 1,
                    invoke,
                    id,
                ])?;
                parent = h;
                i += 1;
            }
            c.execute(
                "INSERT OR REPLACE INTO session_runs (first, last, session) VALUES (?1, ?2, ?3)",
                params![first as i64, i as i64, ses],
            )?;
            c.execute_batch("COMMIT")?;
        }
        Ok(())
    })?;
    Ok(rate(NODES, d))
}

/// The rungs and the store, each as a share of a bare insert.
pub fn ingest_floor() -> Result<Vec<Row>> {
    let rungs = [
        (Rung::Row, "node row only (all columns, 2 SHA-256)"),
        (Rung::NodeIndex, "+ node hash index"),
        (Rung::Blob, "+ payload row in blobs"),
        (
            Rung::BlobIndex,
            "+ blob index and dedup lookup (all the store's writes)",
        ),
    ];
    let mut got: Vec<Vec<f64>> = vec![Vec::new(); rungs.len() + 1];
    let mut base = Vec::new();
    for _ in 0..REPS {
        base.push(rate(NODES, bare_insert(NODES, ROW_BYTES, BATCH, false)?));
        for (k, (r, _)) in rungs.iter().enumerate() {
            got[k].push(rung_once(*r)?);
        }
        got[rungs.len()].push(crate::benches::ingest_rate()?);
    }
    let base = median_f(base);
    let mut rows = Vec::new();
    let names = rungs
        .iter()
        .map(|(_, n)| *n)
        .chain(["the store's append_many"]);
    for (name, v) in names.zip(got) {
        let v = median_f(v);
        rows.push(Row::new(
            format!("1. floor: {name}"),
            format!("{} nodes/s", crate::util::thousands(v)),
            format!(
                "{} rows/s (bare {ROW_BYTES} B rows)",
                crate::util::thousands(base)
            ),
            format!("{:.0}%", 100.0 * v / base),
            "—",
            Verdict::Info,
        ));
    }
    Ok(rows)
}
