//! The benchmarks. Each one works in its own fresh scratch directories and
//! returns rows for the result table; see docs/PERFORMANCE.md for what each
//! figure means.

use crate::util::{
    PAYLOAD, Result, Row, Scratch, TxNodes, Verdict, avg_row_bytes, bare_insert, checkpoint,
    disk_bytes, drafts, ingest, median, median_f, ms, noise, note, rate, settle, space_by_object,
    state_err, thousands, timed,
};
use convo_core::state;
use convo_core::{BranchName, HashPrefix, Kind};
use convo_store::Draft;
use convo_testutil::draft;
use rusqlite::Connection;
use std::time::Duration;

fn main_branch() -> BranchName {
    BranchName::main()
}

fn per_s(x: f64, unit: &str) -> String {
    format!("{} {unit}/s", thousands(x))
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

// ----- 1. bulk ingest -------------------------------------------------------

const INGEST_NODES: u64 = 100_000;
const INGEST_BATCH: u64 = 10_000;
const INGEST_REPS: usize = 5;

/// One bulk ingest of `INGEST_NODES` into a fresh store; returns nodes/s
/// and, on request, the average size of a node row.
fn ingest_once(measure_row: bool) -> Result<(f64, Option<f64>)> {
    let dir = Scratch::new("ingest")?;
    let mut store = dir.store("")?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    let batches: Vec<Vec<Draft>> = (0..INGEST_NODES / INGEST_BATCH)
        .map(|b| drafts(b * INGEST_BATCH, INGEST_BATCH))
        .collect();
    let main = main_branch();
    let (_, d) = timed(|| {
        for b in &batches {
            store.transaction(|l| l.append_many(&ses, &main, b))?;
        }
        Ok(())
    })?;
    let row = if measure_row {
        Some(avg_row_bytes(&dir.db(), "nodes")?)
    } else {
        None
    };
    Ok((rate(INGEST_NODES, d), row))
}

/// One bulk ingest into a fresh store, in nodes/s (for the floor ladder).
pub fn ingest_rate() -> Result<f64> {
    Ok(ingest_once(false)?.0)
}

/// Figure 1: `append_many` in 10k-node transactions vs a bare insert of rows the
/// size of a node row.
pub fn bulk_ingest() -> Result<Vec<Row>> {
    let (first, row) = ingest_once(true)?;
    let row_bytes = row.unwrap_or(250.0).round() as usize;
    note(format!(
        "node row ≈ {row_bytes} bytes (dbstat); first ingest {}",
        per_s(first, "nodes")
    ));
    let mut ours = vec![first];
    let mut base = Vec::new();
    for _ in 0..INGEST_REPS {
        let d = bare_insert(INGEST_NODES, row_bytes, INGEST_BATCH, false)?;
        base.push(rate(INGEST_NODES, d));
        if ours.len() < INGEST_REPS {
            ours.push(ingest_once(false)?.0);
        }
    }
    let (ours, base) = (median_f(ours), median_f(base));
    let ratio = ours / base;
    Ok(vec![
        Row::new(
            format!("1. bulk ingest, append_many ×10k, {INGEST_NODES} nodes"),
            per_s(ours, "nodes"),
            format!("{} rows/s (bare {row_bytes} B rows)", thousands(base)),
            pct(ratio),
            "≥100,000/s",
            Verdict::of(ours >= 100_000.0),
        ),
        Row::new(
            "1. bulk ingest vs bare insert",
            pct(ratio),
            "bare insert = 100%",
            pct(ratio),
            "≥30%",
            Verdict::of(ratio >= 0.30),
        ),
    ])
}

// ----- 2. durable single appends -----------------------------------------------

const APPENDS: u64 = 3_000;
const APPENDS_FULL: u64 = 300;
const APPEND_REPS: usize = 3;

/// `n` appends, one transaction each, into a fresh store opened with `query`.
fn appends_once(n: u64, query: &str) -> Result<f64> {
    let dir = Scratch::new("append")?;
    let mut store = dir.store(query)?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    let ds = drafts(0, n);
    let main = main_branch();
    let (_, d) = timed(|| {
        for dr in &ds {
            store.transaction(|l| l.append(&ses, &main, dr))?;
        }
        Ok(())
    })?;
    Ok(rate(n, d))
}

/// Figure 2: One `Ledger::append` per transaction, with and without `sync=full`.
pub fn single_appends() -> Result<Vec<Row>> {
    // Row size for the bare baseline: that of a node row, measured.
    let row_bytes = {
        let dir = Scratch::new("rowsize")?;
        let mut store = dir.store("")?;
        let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
        ingest(&mut store, &ses, 0, 2_000, 1_000)?;
        avg_row_bytes(&dir.db(), "nodes")?.round() as usize
    };
    let (mut ours, mut full, mut base, mut base_full) = (vec![], vec![], vec![], vec![]);
    for _ in 0..APPEND_REPS {
        ours.push(appends_once(APPENDS, "")?);
        base.push(rate(APPENDS, bare_insert(APPENDS, row_bytes, 1, false)?));
        full.push(appends_once(APPENDS_FULL, "?sync=full")?);
        base_full.push(rate(
            APPENDS_FULL,
            bare_insert(APPENDS_FULL, row_bytes, 1, true)?,
        ));
    }
    let (ours, full, base, base_full) = (
        median_f(ours),
        median_f(full),
        median_f(base),
        median_f(base_full),
    );
    Ok(vec![
        Row::new(
            format!("2. single appends (WAL, sync=normal), {APPENDS} tx"),
            per_s(ours, "nodes"),
            format!("{} rows/s (bare 1 row/tx)", thousands(base)),
            pct(ours / base),
            "≥5,000/s",
            Verdict::of(ours >= 5_000.0),
        ),
        Row::new(
            format!("2. single appends, ?sync=full, {APPENDS_FULL} tx"),
            per_s(full, "nodes"),
            format!("{} rows/s (bare, FULL)", thousands(base_full)),
            pct(full / base_full),
            "—",
            Verdict::Info,
        ),
    ])
}

// ----- 3. fork at depth 10 vs depth 1,000,000 ------------------------------------

const FORK_DEPTH: u64 = 1_000_000;
const FORKS: usize = 201;

/// Figure 3: `Ledger::fork` from depth 10 and from the head at depth 1M.
pub fn fork() -> Result<Vec<Row>> {
    let dir = Scratch::new("fork")?;
    let mut store = dir.store("")?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    // Only the node at depth 10 and the head are needed, not all 1M hashes.
    let mut shallow = None;
    let mut head = None;
    let (_, build) = timed(|| {
        let main = main_branch();
        let mut i = 0;
        while i < FORK_DEPTH {
            let hs = store.transaction(|l| l.append_many(&ses, &main, &drafts(i, 10_000)))?;
            if i == 0 {
                shallow = hs.get(9).copied();
            }
            head = hs.last().copied();
            i += 10_000;
        }
        Ok(())
    })?;
    note(format!(
        "built a {FORK_DEPTH}-node main in {:.1} s ({})",
        build.as_secs_f64(),
        per_s(rate(FORK_DEPTH, build), "nodes")
    ));
    settle(&dir.db())?;
    let (Some(shallow), Some(head)) = (shallow, head) else {
        return Err("the fork session has no nodes".into());
    };
    let p10 = HashPrefix::parse(&shallow.to_hex())?;
    let pdeep = HashPrefix::parse(&head.to_hex())?;
    let (d10, ddeep) = (store.node(&p10)?.ctx.depth, store.node(&pdeep)?.ctx.depth);
    if d10 != 10 || ddeep != FORK_DEPTH {
        return Err(format!("fork points at depths {d10} and {ddeep}").into());
    }
    let (mut t10, mut tdeep) = (Vec::new(), Vec::new());
    for i in 0..FORKS {
        // Interleaved, so drift (WAL growth, checkpoints) hits both equally.
        let name = BranchName::new(&format!("d10-{i}"))?;
        let (f, d) =
            timed(|| Ok(store.transaction(|l| l.fork(&ses, &p10, &name, 2_000_000_000_000))?))?;
        t10.push(d);
        let name = BranchName::new(&format!("deep-{i}"))?;
        let (g, d) =
            timed(|| Ok(store.transaction(|l| l.fork(&ses, &pdeep, &name, 2_000_000_000_000))?))?;
        tdeep.push(d);
        if (f.ctx.depth, g.ctx.depth) != (11, FORK_DEPTH + 1) {
            return Err(format!("forks at depths {} and {}", f.ctx.depth, g.ctx.depth).into());
        }
    }
    let (m10, mdeep) = (median(t10), median(tdeep));
    let ratio = mdeep.as_secs_f64() / m10.as_secs_f64();
    let spread = ratio.max(1.0 / ratio);
    Ok(vec![Row::new(
        format!("3. fork from depth 1M vs depth 10 (median of {FORKS})"),
        ms(mdeep),
        format!("{} (depth 10)", ms(m10)),
        format!("{ratio:.2}×"),
        "within 2×",
        Verdict::of(spread <= 2.0),
    )])
}

// ----- 4. timeline -----------------------------------------------------------------

const TIMELINE_TURNS: u64 = 10_000;
const TIMELINE_REPS: usize = 15;

/// Reads the rows `Store::timeline` reads (every node column and the
/// payload, with the query the SQLite backend uses) with one raw query and
/// no decoding: the SQLite floor.
fn raw_timeline(db: &std::path::Path, ses: &str) -> Result<usize> {
    let c = Connection::open(db)?;
    c.pragma_update(None, "mmap_size", 1i64 << 30)?;
    let mut st = c.prepare(
        "SELECT n.*, coalesce(b.data, (SELECT data FROM blobs \
         WHERE substr(hash, 1, 8) = substr(n.payload, 1, 8) AND hash = n.payload)) \
         FROM session_runs r JOIN nodes n ON n.seq BETWEEN r.first AND r.last \
         LEFT JOIN blobs b ON b.id = n.payload_id AND b.hash = n.payload \
         WHERE r.session = ?1 AND n.session = ?1 ORDER BY r.first, n.seq",
    )?;
    let cols = st.column_count();
    let mut rows = st.query([ses])?;
    let (mut n, mut bytes) = (0, 0usize);
    while let Some(r) = rows.next()? {
        for i in 0..cols {
            bytes += match r.get_ref(i)? {
                rusqlite::types::ValueRef::Blob(b) | rusqlite::types::ValueRef::Text(b) => b.len(),
                _ => 1,
            };
        }
        n += 1;
    }
    std::hint::black_box(bytes);
    Ok(n)
}

/// Times `Store::timeline` of `ses`'s main against the raw query, median of
/// `TIMELINE_REPS` each.
fn time_timeline(
    dir: &Scratch,
    store: &mut convo_store::Store,
    ses: &convo_core::SessionId,
    what: &str,
) -> Result<(Duration, Duration)> {
    let main = main_branch();
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..TIMELINE_REPS {
        let (tl, d) = timed(|| Ok(store.timeline(ses, &main)?))?;
        if tl.len() as u64 != 2 * TIMELINE_TURNS {
            return Err(format!("timeline has {} nodes", tl.len()).into());
        }
        ours.push(d);
        let (n, d) = timed(|| raw_timeline(&dir.db(), &ses.to_string()))?;
        if n as u64 != 2 * TIMELINE_TURNS {
            return Err(format!("raw timeline has {n} rows").into());
        }
        base.push(d);
    }
    let spread = |v: &[Duration]| {
        let (lo, hi) = (v.iter().min(), v.iter().max());
        format!(
            "{}–{}",
            ms(lo.copied().unwrap_or_default()),
            ms(hi.copied().unwrap_or_default())
        )
    };
    note(format!(
        "timeline ({what}) runs {} (raw {})",
        spread(&ours),
        spread(&base)
    ));
    Ok((median(ours), median(base)))
}

/// Figure 4: `Store::timeline` of a 10,000-turn (20,000-node) main, written
/// in 10,000-node batches (a handful of session runs), and the worst case
/// for SQLite's session runs: every node of the session alternating with a
/// node of another session, so each node is a run of its own.
pub fn timeline() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for interleaved in [false, true] {
        let dir = Scratch::new("timeline")?;
        let mut store = dir.store("")?;
        let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
        if interleaved {
            let other = store.transaction(|l| l.new_session("other", None, 0))?.id;
            let main = main_branch();
            let ds = drafts(0, 2 * TIMELINE_TURNS);
            store.transaction(|l| {
                for d in &ds {
                    l.append(&ses, &main, d)?;
                    l.append(&other, &main, d)?;
                }
                Ok(())
            })?;
        } else {
            ingest(&mut store, &ses, 0, 2 * TIMELINE_TURNS, 10_000)?;
        }
        settle(&dir.db())?;
        let (what, figure) = if interleaved {
            (
                "interleaved",
                format!(
                    "4. timeline, {TIMELINE_TURNS} turns, each node interleaved with another session's"
                ),
            )
        } else {
            (
                "batched",
                format!(
                    "4. timeline, {TIMELINE_TURNS} turns ({} nodes)",
                    2 * TIMELINE_TURNS
                ),
            )
        };
        let (ours, base) = time_timeline(&dir, &mut store, &ses, what)?;
        rows.push(Row::new(
            figure,
            ms(ours),
            format!("{} (raw SELECT, no decode)", ms(base)),
            format!("{:.1}×", ours.as_secs_f64() / base.as_secs_f64()),
            "<50 ms",
            Verdict::of(ours < Duration::from_millis(50)),
        ));
    }
    Ok(rows)
}

// ----- 5. verify -----------------------------------------------------------------

const VERIFY_NODES: u64 = 300_000;
const VERIFY_REPS: usize = 3;
const BIG: usize = 1 << 20;
const BIG_COUNT: u64 = 200;
/// Calls of the smaller conversation verified (the larger has 4×).
const VERIFY_CALLS: usize = 250;

/// Reads every node and blob row with raw queries and no decoding.
fn raw_scan(db: &std::path::Path) -> Result<u64> {
    let c = Connection::open(db)?;
    c.pragma_update(None, "mmap_size", 1i64 << 30)?;
    let mut n = 0u64;
    for sql in [
        "SELECT * FROM nodes ORDER BY seq",
        "SELECT hash, data FROM blobs ORDER BY id",
    ] {
        let mut st = c.prepare(sql)?;
        let cols = st.column_count();
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            for i in 0..cols {
                std::hint::black_box(r.get_ref(i)?);
            }
            n += 1;
        }
    }
    Ok(n)
}

/// Figure 5: `Store::verify` on 300k small nodes, and on 200 × 1 MiB payloads
/// against SHA-256 of the same bytes in memory.
pub fn verify() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    {
        let dir = Scratch::new("verify-small")?;
        let mut store = dir.store("")?;
        let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
        ingest(&mut store, &ses, 0, VERIFY_NODES, 10_000)?;
        settle(&dir.db())?;
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for _ in 0..VERIFY_REPS {
            let (rep, d) = timed(|| Ok(store.verify()?))?;
            if !rep.is_clean() || rep.nodes != VERIFY_NODES {
                return Err(format!("verify: {} nodes, {:?}", rep.nodes, rep.problems).into());
            }
            ours.push(d);
            base.push(timed(|| raw_scan(&dir.db()))?.1);
        }
        note(format!(
            "verify runs: {} (raw scans: {})",
            ours.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", "),
            base.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
        ));
        let (ours, base) = (
            rate(VERIFY_NODES, median(ours)),
            rate(VERIFY_NODES, median(base)),
        );
        rows.push(Row::new(
            format!("5. verify, {VERIFY_NODES} small nodes"),
            per_s(ours, "nodes"),
            format!("{} (raw row scan)", per_s(base, "nodes")),
            pct(ours / base),
            "≥300,000/s",
            Verdict::of(ours >= 300_000.0),
        ));
    }
    {
        let dir = Scratch::new("verify-big")?;
        let mut store = dir.store("")?;
        let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
        let main = main_branch();
        let ds: Vec<Draft> = (0..BIG_COUNT)
            .map(|i| {
                let mut d = draft(
                    if i % 2 == 0 {
                        Kind::Invoke
                    } else {
                        Kind::Complete
                    },
                    "",
                    i as i64,
                );
                d.payload = noise(i + 1, BIG);
                d
            })
            .collect();
        for chunk in ds.chunks(10) {
            store.transaction(|l| l.append_many(&ses, &main, chunk))?;
        }
        settle(&dir.db())?;
        let total = BIG_COUNT * BIG as u64;
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for _ in 0..VERIFY_REPS {
            let (rep, d) = timed(|| Ok(store.verify()?))?;
            if !rep.is_clean() || rep.blob_bytes != total {
                return Err(format!("verify: {} bytes, {:?}", rep.blob_bytes, rep.problems).into());
            }
            ours.push(d);
            let (_, d) = timed(|| {
                for d in &ds {
                    use sha2::Digest as _;
                    std::hint::black_box(sha2::Sha256::digest(&d.payload));
                }
                Ok(())
            })?;
            base.push(d);
        }
        let mb = |d: Duration| total as f64 / 1e6 / d.as_secs_f64();
        let (ours, base) = (mb(median(ours)), mb(median(base)));
        rows.push(Row::new(
            format!("5. verify, {BIG_COUNT} × 1 MiB payloads"),
            format!("{ours:.0} MB/s"),
            format!("{base:.0} MB/s (sha2 in memory)"),
            pct(ours / base),
            "≥70%",
            Verdict::of(ours / base >= 0.70),
        ));
    }
    {
        // A conversation through the proxy: call n resends the n − 1
        // before it. Verify hashes each payload against its address; at 4×
        // the calls its time should be ~4×, not the 16× of rehashing the
        // history with every call.
        let mut runs = Vec::new();
        for calls in [VERIFY_CALLS, 4 * VERIFY_CALLS] {
            let dir = Scratch::new("verify-conversation")?;
            let mut store = dir.store("")?;
            let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
            let main = main_branch();
            let mut resent = 0u64;
            let go = draft(Kind::Invoke, "go", 0);
            store.transaction(|l| l.append(&ses, &main, &go))?;
            for first in (1..=calls).step_by(50) {
                let ds: Vec<Draft> = (first..(first + 50).min(calls + 1))
                    .flat_map(|n| {
                        let mut d = draft(Kind::Request, "", 2 * n as i64);
                        d.payload = convo_testutil::growing_request(n, "");
                        resent += d.payload.len() as u64;
                        [d, draft(Kind::Response, "because it is.", 2 * n as i64 + 1)]
                    })
                    .collect();
                store.transaction(|l| l.append_many(&ses, &main, &ds))?;
            }
            settle(&dir.db())?;
            let mut ours = Vec::new();
            for _ in 0..VERIFY_REPS {
                let (rep, d) = timed(|| Ok(store.verify()?))?;
                if !rep.is_clean() || rep.blob_bytes < resent {
                    return Err(
                        format!("verify: {} bytes, {:?}", rep.blob_bytes, rep.problems).into(),
                    );
                }
                ours.push(d);
            }
            let (_, sha) = timed(|| {
                for n in 1..=calls {
                    use sha2::Digest as _;
                    let p = convo_testutil::growing_request(n, "");
                    std::hint::black_box(sha2::Sha256::digest(&p));
                }
                Ok(())
            })?;
            runs.push((calls, resent, median(ours), sha));
        }
        let (a, b) = (runs[0], runs[1]);
        let growth = b.2.as_secs_f64() / a.2.as_secs_f64();
        rows.push(Row::new(
            format!(
                "5. verify, a conversation of {} / {} calls resending its history ({} / {} MB resent)",
                a.0,
                b.0,
                a.1 / 1_000_000,
                b.1 / 1_000_000
            ),
            format!("{} / {}", ms(a.2), ms(b.2)),
            format!(
                "SHA-256 of every request (building them included): {} / {}",
                ms(a.3),
                ms(b.3)
            ),
            format!("{growth:.1}× the time for 4× the calls"),
            "linear: ≤ 5×",
            Verdict::of(growth <= 5.0),
        ));
    }
    Ok(rows)
}

// ----- 6. state put ------------------------------------------------------------------

const STATE_PUTS: usize = 1_000;
const STATE_BIG: usize = 100_000;
const STATE_SMALL: usize = 10;

struct StateBench {
    _dir: Scratch,
    store: convo_store::Store,
    ses: convo_core::SessionId,
    keys: usize,
}

fn state_key(i: usize) -> String {
    format!("key/{i:08}")
}

/// A store whose `main` working state holds `keys` keys, written in one
/// transaction through the same trie code `state_put` uses.
fn state_store(keys: usize) -> Result<StateBench> {
    let dir = Scratch::new("state")?;
    let mut store = dir.store("")?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    let main = main_branch();
    store.write(|tx| {
        let mut root = state::empty_root();
        for i in 0..keys {
            let v = format!("value {i}");
            let vh = convo_core::hash::content_hash(v.as_bytes());
            tx.put_blob(&vh, v.as_bytes())?;
            root = state::put(&mut TxNodes(tx), &root, state_key(i).as_bytes(), vh)
                .map_err(state_err)?;
        }
        tx.set_branch_state(&ses, &main, Some(&root))
    })?;
    settle(&dir.db())?;
    Ok(StateBench {
        _dir: dir,
        store,
        ses,
        keys,
    })
}

/// Figure 6: `Ledger::state_put` (overwriting an existing key, so the key count
/// stays fixed) with 100,000 keys present vs with 10.
pub fn state_put() -> Result<Vec<Row>> {
    let mut small = state_store(STATE_SMALL)?;
    let mut big = state_store(STATE_BIG)?;
    let main = main_branch();
    let (mut ts, mut tb) = (Vec::new(), Vec::new());
    for i in 0..STATE_PUTS + 50 {
        let value = format!("new value {i}");
        for (b, out) in [(&mut small, &mut ts), (&mut big, &mut tb)] {
            // Spread over the keys with a stride coprime to both counts.
            let key = state_key((i * 7919) % b.keys);
            let (_, d) = timed(|| {
                Ok(b.store
                    .transaction(|l| l.state_put(&b.ses, &main, &key, value.as_bytes()))?)
            })?;
            if i >= 50 {
                out.push(d);
            }
        }
    }
    let root = big.store.state_root(&big.ses, &main, None)?;
    let n = big.store.state_list(&root)?.len();
    if n != STATE_BIG {
        return Err(format!("the big state has {n} keys").into());
    }
    let (ms_, mb) = (median(ts), median(tb));
    let ratio = mb.as_secs_f64() / ms_.as_secs_f64();
    Ok(vec![Row::new(
        format!("6. state_put with {STATE_BIG} keys vs {STATE_SMALL} (median of {STATE_PUTS})"),
        ms(mb),
        format!("{} ({STATE_SMALL} keys)", ms(ms_)),
        format!("{ratio:.2}×"),
        "within 3×",
        Verdict::of(ratio <= 3.0),
    )])
}

// ----- 7. storage ----------------------------------------------------------------------

const STORAGE_TURNS: [u64; 3] = [250, 500, 1000];

/// Bytes on disk after `turns` turns (invoke + complete, 100-byte
/// payloads, one append per transaction) and a WAL checkpoint.
fn storage_once(turns: u64, breakdown: bool) -> Result<u64> {
    let dir = Scratch::new("storage")?;
    let mut store = dir.store("")?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    let main = main_branch();
    for d in drafts(0, 2 * turns) {
        store.transaction(|l| l.append(&ses, &main, &d))?;
    }
    checkpoint(&dir.db())?;
    let bytes = disk_bytes(&dir.db())?;
    if breakdown {
        let parts: Vec<String> = space_by_object(&dir.db())?
            .into_iter()
            .map(|(n, b)| format!("{n} {b}"))
            .collect();
        note(format!(
            "{turns} turns, bytes by table/index: {}",
            parts.join(", ")
        ));
    }
    drop(store);
    Ok(bytes)
}

/// Figure 7: Bytes on disk per node, and its growth.
pub fn storage() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for turns in STORAGE_TURNS {
        let bytes = storage_once(turns, turns == 500)?;
        let nodes = 2 * turns;
        let per = bytes as f64 / nodes as f64;
        rows.push(Row::new(
            format!("7. storage, {turns} turns ({nodes} nodes)"),
            format!("{per:.0} B/node ({} KiB)", bytes / 1024),
            format!("{PAYLOAD} B payload/node"),
            format!("{:.1}× payload", per / PAYLOAD as f64),
            "—",
            Verdict::Info,
        ));
        sizes.push((nodes, bytes));
    }
    let slope = |a: (u64, u64), b: (u64, u64)| (b.1 as f64 - a.1 as f64) / (b.0 - a.0) as f64;
    let (s1, s2) = (slope(sizes[0], sizes[1]), slope(sizes[1], sizes[2]));
    let ratio = s2 / s1;
    rows.push(Row::new(
        "7. storage growth, marginal B/node 500→1000 vs 250→500 turns",
        format!("{s2:.0} B/node"),
        format!("{s1:.0} B/node"),
        format!("{ratio:.2}×"),
        "linear (within ±15%)",
        Verdict::of((0.85..=1.15).contains(&ratio)),
    ));
    Ok(rows)
}

// ----- checkpoints ------------------------------------------------------------

/// Figure: `Store::checkpoint` and `verify` + `check_checkpoint` on a store
/// of `CONVO_BENCH_CHECKPOINT_NODES` nodes (default 1,000,000), against
/// plain `verify` of the same store in the same run.
pub fn checkpoints() -> Result<Vec<Row>> {
    let nodes: u64 = std::env::var("CONVO_BENCH_CHECKPOINT_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = Scratch::new("checkpoint")?;
    let mut store = dir.store("")?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    ingest(&mut store, &ses, 0, nodes, 10_000)?;
    settle(&dir.db())?;
    let key = convo_store::checkpoint::signing_key(&[7; 32]);
    let (cp, took) = timed(|| Ok(store.checkpoint(&key, 0)?))?;
    let (plain, verify_took) = timed(|| Ok(store.verify()?))?;
    let (found, check_took) = timed(|| Ok(store.check_checkpoint(&cp)?))?;
    if !plain.is_clean() || !found.is_empty() || cp.nodes != nodes {
        return Err(format!("checkpoint: {:?} {:?}", plain.problems, found).into());
    }
    note(format!(
        "{nodes} nodes: checkpoint {}, verify {}, check against the checkpoint {}",
        ms(took),
        ms(verify_took),
        ms(check_took)
    ));
    let with = verify_took + check_took;
    let ratio = with.as_secs_f64() / verify_took.as_secs_f64().max(1e-9);
    // The automatic checkpointer: 1,000 appends later, the next checkpoint
    // from the previous one, against a full one of the same store.
    ingest(&mut store, &ses, nodes, 1000, 1000)?;
    let (inc, inc_took) = timed(|| Ok(store.checkpoint_after(&key, 1, Some(&cp))?))?;
    let (full, full_took) = timed(|| Ok(store.checkpoint(&key, 1)?))?;
    if inc != full {
        return Err("checkpoint: the incremental checkpoint differs from the full one".into());
    }
    note(format!(
        "1,000 appends later: incremental checkpoint {}, full {}",
        ms(inc_took),
        ms(full_took)
    ));
    Ok(vec![
        Row::new(
            format!("checkpoint after 1,000 more appends, from the previous one, {nodes} nodes"),
            ms(inc_took),
            format!("{} (full checkpoint)", ms(full_took)),
            pct(inc_took.as_secs_f64() / full_took.as_secs_f64().max(1e-9)),
            "—",
            Verdict::Info,
        ),
        Row::new(
            format!("checkpoint, {nodes} nodes"),
            ms(took),
            format!("{} (verify)", ms(verify_took)),
            pct(took.as_secs_f64() / verify_took.as_secs_f64().max(1e-9)),
            "< 1 s",
            Verdict::of(took.as_secs_f64() < 1.0),
        ),
        Row::new(
            format!("verify --checkpoint, {nodes} nodes"),
            ms(with),
            format!("{} (verify)", ms(verify_took)),
            format!("{ratio:.2}×"),
            "≤ 1.5× verify",
            Verdict::of(ratio <= 1.5),
        ),
    ])
}
