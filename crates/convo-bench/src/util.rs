//! Shared helpers: scratch directories, timing, workload generators, the
//! bare-SQLite baselines and the result table.

use convo_core::Kind;
use convo_store::{Draft, Store};
use convo_testutil::draft;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The error type of every benchmark.
pub type Error = Box<dyn std::error::Error>;
/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// ----- scratch directories -------------------------------------------------

/// A fresh directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Creates `$TMPDIR/convo-bench-{pid}-{n}-{tag}`.
    pub fn new(tag: &str) -> Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("convo-bench-{}-{n}-{tag}", std::process::id()));
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        std::fs::create_dir_all(&path)?;
        Ok(Scratch { path })
    }

    /// The database file inside the directory.
    pub fn db(&self) -> PathBuf {
        self.path.join("convo.db")
    }

    /// A store URL for [`Scratch::db`], with an optional `?query`.
    pub fn url(&self, query: &str) -> String {
        format!("sqlite://{}{query}", self.db().display())
    }

    /// Opens a convo store on [`Scratch::db`].
    pub fn store(&self, query: &str) -> Result<Store> {
        Ok(Store::open(&self.url(query))?)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

// ----- timing --------------------------------------------------------------

/// Runs `f` and returns its result and how long it took.
pub fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, Duration)> {
    let t = Instant::now();
    let out = f()?;
    Ok((out, t.elapsed()))
}

/// The median of some durations (the upper one for an even count).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The median of some numbers.
pub fn median_f(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// `count` per second over `d`.
pub fn rate(count: u64, d: Duration) -> f64 {
    count as f64 / d.as_secs_f64().max(1e-9)
}

/// Progress for the impatient, on stderr so the table stays clean.
pub fn note(msg: impl AsRef<str>) {
    eprintln!("  · {}", msg.as_ref());
}

// ----- workloads -----------------------------------------------------------

/// Size of the payloads of the small-node workloads.
pub const PAYLOAD: usize = 100;

/// A distinct `PAYLOAD`-byte text for message `i`.
pub fn payload(i: u64) -> String {
    let mut s = format!("message {i:012} ");
    let fill = PAYLOAD.saturating_sub(s.len());
    s.extend(std::iter::repeat_n('x', fill));
    s
}

/// Drafts `start..start+n`, alternating invoke and complete (a turn is two
/// nodes), each with a distinct 100-byte payload.
pub fn drafts(start: u64, n: u64) -> Vec<Draft> {
    (start..start + n)
        .map(|i| {
            let kind = if i % 2 == 0 {
                Kind::Invoke
            } else {
                Kind::Complete
            };
            draft(kind, &payload(i), 1_770_000_000_000 + i as i64)
        })
        .collect()
}

/// Appends `n` nodes (alternating invoke/complete) to `main` of `ses` in
/// `append_many` batches of `batch`, starting at message number `start`.
/// Returns every node hash in order.
pub fn ingest(
    store: &mut Store,
    ses: &convo_core::SessionId,
    start: u64,
    n: u64,
    batch: u64,
) -> Result<Vec<convo_core::NodeHash>> {
    let main = convo_core::BranchName::main();
    let mut out = Vec::with_capacity(n as usize);
    let mut i = start;
    while i < start + n {
        let k = batch.min(start + n - i);
        out.extend(store.transaction(|l| l.append_many(ses, &main, &drafts(i, k)))?);
        i += k;
    }
    Ok(out)
}

/// Deterministic pseudo-random bytes (xorshift64*), for incompressible,
/// distinct large payloads.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

pub use convo_store::backend::{TxNodes, state_err};

// ----- bare SQLite baselines ----------------------------------------------

/// A plain connection with the store's pragmas (WAL, `synchronous`, the
/// same cache and mmap sizes) and one `t(id INTEGER PRIMARY KEY, data BLOB)`.
pub fn bare(path: &Path, full_sync: bool) -> Result<Connection> {
    let c = Connection::open(path)?;
    store_pragmas(&c, full_sync)?;
    c.execute_batch("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")?;
    Ok(c)
}

/// Sets the pragmas the SQLite store sets on its connections.
pub fn store_pragmas(c: &Connection, full_sync: bool) -> Result<()> {
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(
        None,
        "synchronous",
        if full_sync { "FULL" } else { "NORMAL" },
    )?;
    c.pragma_update(None, "cache_size", -65536)?;
    c.pragma_update(None, "mmap_size", 1i64 << 30)?;
    Ok(())
}

/// A distinct row of `len` bytes.
fn row(i: u64, len: usize) -> Vec<u8> {
    let mut r = vec![0x5a; len.max(8)];
    r[..8].copy_from_slice(&i.to_le_bytes());
    r
}

/// Inserts `n` rows of `len` bytes into a fresh bare table, `per_tx` rows
/// per `BEGIN IMMEDIATE … COMMIT`, with one prepared statement. Returns
/// the time spent (row generation included, as the store's is).
pub fn bare_insert(n: u64, len: usize, per_tx: u64, full_sync: bool) -> Result<Duration> {
    let dir = Scratch::new("bare")?;
    let c = bare(&dir.db(), full_sync)?;
    let (_, d) = timed(|| {
        let mut st = c.prepare("INSERT INTO t (data) VALUES (?1)")?;
        let mut i = 0;
        while i < n {
            c.execute_batch("BEGIN IMMEDIATE")?;
            for _ in 0..per_tx.min(n - i) {
                st.execute([row(i, len)])?;
                i += 1;
            }
            c.execute_batch("COMMIT")?;
        }
        Ok(())
    })?;
    Ok(d)
}

/// Bytes in the database file plus its WAL (if any).
pub fn disk_bytes(db: &Path) -> Result<u64> {
    let mut total = std::fs::metadata(db)?.len();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(m) = std::fs::metadata(PathBuf::from(wal)) {
        total += m.len();
    }
    Ok(total)
}

/// Checkpoints the WAL into the main file and truncates it, from a separate connection.
pub fn checkpoint(db: &Path) -> Result<()> {
    let c = Connection::open(db)?;
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok(())
}

/// Lets a freshly written store settle before it is measured: checkpoints
/// the WAL into the database file (from a separate connection) and flushes
/// the file to disk, so the kernel's write-back of what was just written
/// does not run during the timed section.
pub fn settle(db: &Path) -> Result<()> {
    checkpoint(db)?;
    std::fs::File::open(db)?.sync_all()?;
    Ok(())
}

/// Average record size of the rows of table `name`, from the `dbstat`
/// virtual table (leaf-page payload bytes over cell count).
pub fn avg_row_bytes(db: &Path, name: &str) -> Result<f64> {
    let c = Connection::open(db)?;
    let (payload, cells): (i64, i64) = c.query_row(
        "SELECT coalesce(sum(payload), 0), coalesce(sum(ncell), 0) FROM dbstat \
         WHERE name = ?1 AND pagetype = 'leaf'",
        [name],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(payload as f64 / (cells.max(1)) as f64)
}

/// Bytes used by each table and index (`dbstat`), largest first.
pub fn space_by_object(db: &Path) -> Result<Vec<(String, u64)>> {
    let c = Connection::open(db)?;
    let mut st =
        c.prepare("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC, 1")?;
    let rows = st
        .query_map([], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

// ----- the result table ----------------------------------------------------

/// Whether a figure met its target.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Met.
    Pass,
    /// Missed.
    Fail,
    /// No target: shown for information.
    Info,
}

impl Verdict {
    /// `Pass` when `ok`, else `Fail`.
    pub fn of(ok: bool) -> Self {
        if ok { Verdict::Pass } else { Verdict::Fail }
    }
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Info => "info",
        }
    }
}

/// One line of the result table.
#[derive(Clone, Debug)]
pub struct Row {
    /// What was measured.
    pub figure: String,
    /// The measured value.
    pub value: String,
    /// The baseline measured in the same run (or `—`).
    pub baseline: String,
    /// The figure the target is stated in.
    pub ratio: String,
    /// The target.
    pub target: String,
    /// PASS / FAIL / info.
    pub verdict: Verdict,
}

impl Row {
    /// A row.
    pub fn new(
        figure: impl Into<String>,
        value: impl Into<String>,
        baseline: impl Into<String>,
        ratio: impl Into<String>,
        target: impl Into<String>,
        verdict: Verdict,
    ) -> Self {
        Row {
            figure: figure.into(),
            value: value.into(),
            baseline: baseline.into(),
            ratio: ratio.into(),
            target: target.into(),
            verdict,
        }
    }
}

/// Prints rows as a Markdown table, columns padded.
pub fn print_table(rows: &[Row]) {
    let head = [
        "figure", "measured", "baseline", "ratio", "target", "result",
    ];
    let cells: Vec<[&str; 6]> = rows
        .iter()
        .map(|r| {
            [
                r.figure.as_str(),
                r.value.as_str(),
                r.baseline.as_str(),
                r.ratio.as_str(),
                r.target.as_str(),
                r.verdict.as_str(),
            ]
        })
        .collect();
    let mut w = head.map(|h| h.chars().count());
    for c in &cells {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.chars().count());
        }
    }
    let line = |c: [&str; 6]| {
        let parts: Vec<String> = c
            .iter()
            .zip(w)
            .map(|(s, w)| format!("{s}{}", " ".repeat(w - s.chars().count())))
            .collect();
        println!("| {} |", parts.join(" | "));
    };
    line(head);
    let rule: Vec<String> = w.iter().map(|&w| "-".repeat(w)).collect();
    println!("|-{}-|", rule.join("-|-"));
    for c in cells {
        line(c);
    }
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(x: f64) -> String {
    let s = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A duration in milliseconds with sensible precision.
pub fn ms(d: Duration) -> String {
    let m = d.as_secs_f64() * 1e3;
    if m < 1.0 {
        format!("{:.0} µs", m * 1e3)
    } else if m < 10.0 {
        format!("{m:.2} ms")
    } else {
        format!("{m:.1} ms")
    }
}
