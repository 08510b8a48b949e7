//! Full-text search: what the index costs bulk ingest, how fast it catches
//! up, and search latency on 100,000 nodes against a `LIKE` scan of the same
//! payloads (docs/PERFORMANCE.md, "Search").

use crate::util::{Result, Row, Scratch, Verdict, median, ms, note, rate, thousands, timed};
use convo_core::{BranchName, Kind};
use convo_store::filter::NodeFilter;
use convo_store::search::{Query, SearchRequest};
use convo_store::{Draft, Store};
use convo_testutil::draft;
use rusqlite::Connection;
use std::time::Duration;

const NODES: u64 = 100_000;
const BATCH: u64 = 10_000;
const REPS: usize = 3;

const WORDS: &[&str] = &[
    "the", "agent", "called", "tool", "with", "a", "query", "about", "weather", "in", "city",
    "and", "returned", "result", "for", "user", "who", "asked", "to", "book", "flight", "from",
    "hotel", "price", "list", "of", "options", "please", "check", "again", "later", "error",
    "timeout", "retry", "model", "answer", "summary", "document", "search", "file", "read",
    "write", "plan", "step", "next", "done", "cannot", "find", "data", "table",
];

/// Message `i`: about 100 bytes of words; `capital` in every tenth,
/// `zanzibar` in every ten-thousandth.
fn text(i: u64) -> String {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut s = format!("message {i}");
    while s.len() < 95 {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.push(' ');
        s.push_str(WORDS[(x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40) as usize % WORDS.len()]);
    }
    if i.is_multiple_of(10) {
        s.push_str(" capital");
    }
    if i.is_multiple_of(10_000) {
        s.push_str(" zanzibar");
    }
    s
}

fn drafts(start: u64, n: u64) -> Vec<Draft> {
    (start..start + n)
        .map(|i| {
            let k = if i.is_multiple_of(2) {
                Kind::Invoke
            } else {
                Kind::Complete
            };
            draft(k, &text(i), 1_770_000_000_000 + i as i64)
        })
        .collect()
}

/// A fresh store with `NODES` nodes: the time of the ingest alone and of
/// the index catching up right after it.
fn build() -> Result<(Scratch, Store, Duration, Duration)> {
    let dir = Scratch::new("search")?;
    let mut store = dir.store("")?;
    let ses = store.transaction(|l| l.new_session("agent", None, 0))?.id;
    let batches: Vec<Vec<Draft>> = (0..NODES / BATCH)
        .map(|b| drafts(b * BATCH, BATCH))
        .collect();
    let main = BranchName::main();
    let (_, ingest) = timed(|| {
        for b in &batches {
            store.transaction(|l| l.append_many(&ses, &main, b))?;
        }
        Ok(())
    })?;
    let (n, index) = timed(|| Ok(store.search_update(&mut |_, _| {})?))?;
    if n != NODES {
        return Err(format!("indexed {n} nodes, not {NODES}").into());
    }
    Ok((dir, store, ingest, index))
}

fn search(store: &mut Store, q: &str) -> Result<usize> {
    let r = store.search(&SearchRequest {
        query: Query::parse(q)?,
        session: None,
        branch: None,
        agent: None,
        filter: NodeFilter::default(),
        limit: 20,
        offset: 0,
    })?;
    if r.scanned != 0 {
        return Err("the index was not up to date".into());
    }
    Ok(r.hits.len())
}

/// Every match of `%word%` in the payloads: what a ranked search without
/// an index has to read.
fn like(db: &std::path::Path, word: &str) -> Result<usize> {
    let c = Connection::open(db)?;
    let n: i64 = c.query_row(
        "SELECT count(*) FROM nodes n JOIN blobs b ON b.id = n.payload_id \
         WHERE CAST(b.data AS TEXT) LIKE ?1",
        [format!("%{word}%")],
        |r| r.get(0),
    )?;
    Ok(n as usize)
}

fn time_n(reps: usize, mut f: impl FnMut() -> Result<usize>) -> Result<Duration> {
    let mut v = Vec::new();
    for _ in 0..reps {
        let (_, d) = timed(&mut f)?;
        v.push(d);
    }
    Ok(median(v))
}

pub fn search_figures() -> Result<Vec<Row>> {
    let mut ingest = Vec::new();
    let mut index = Vec::new();
    let mut kept = None;
    for _ in 0..REPS {
        let (dir, store, i, x) = build()?;
        ingest.push(i);
        index.push(x);
        kept = Some((dir, store));
    }
    let (dir, mut store) = kept.ok_or("no run")?;
    let (ingest, index) = (median(ingest), median(index));
    let plain = rate(NODES, ingest);
    let catch_up = rate(NODES, index);
    let both = rate(NODES, ingest + index);
    note(format!(
        "ingest {} nodes/s; index catch-up {} nodes/s; ingest then index {} nodes/s",
        thousands(plain),
        thousands(catch_up),
        thousands(both)
    ));

    let rare = time_n(20, || search(&mut store, "zanzibar"))?;
    let common = time_n(20, || search(&mut store, "capital"))?;
    let phrase = time_n(20, || search(&mut store, "\"weather in\" capital"))?;
    let like_rare = time_n(5, || like(&dir.db(), "zanzibar"))?;
    let like_common = time_n(5, || like(&dir.db(), "capital"))?;
    let hits = search(&mut store, "zanzibar")?;
    if hits != 10 || like(&dir.db(), "zanzibar")? != 10 {
        return Err(format!("expected 10 zanzibar hits, got {hits}").into());
    }
    let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    Ok(vec![
        Row::new(
            format!("S1. bulk ingest with the search index present, {NODES} nodes"),
            format!("{} nodes/s", thousands(plain)),
            "index off the append path".to_owned(),
            "100%".to_owned(),
            "≥100,000/s",
            Verdict::of(plain >= 100_000.0),
        ),
        Row::new(
            "S2. index catch-up (search_update, 2,000 nodes per transaction)",
            format!("{} nodes/s", thousands(catch_up)),
            format!("ingest {} nodes/s", thousands(plain)),
            format!("{:.0}%", catch_up / plain * 100.0),
            "info",
            Verdict::Info,
        ),
        Row::new(
            "S3. ingest then index (what indexing in the append transaction would cost)",
            format!("{} nodes/s", thousands(both)),
            format!("ingest alone {} nodes/s", thousands(plain)),
            format!("{:.0}%", both / plain * 100.0),
            "≥100,000/s to index in the append transaction",
            Verdict::of(both >= 100_000.0),
        ),
        Row::new(
            "S4. search, rare word (10 hits), 100,000 nodes",
            ms(rare),
            format!("LIKE scan {}", ms(like_rare)),
            format!("{:.3}×", r(rare, like_rare)),
            "≤10% of the scan",
            Verdict::of(r(rare, like_rare) <= 0.10),
        ),
        Row::new(
            "S5. search, common word (10,000 hits, best 20), 100,000 nodes",
            ms(common),
            format!("LIKE scan {}", ms(like_common)),
            format!("{:.3}×", r(common, like_common)),
            "≤50% of the scan",
            Verdict::of(r(common, like_common) <= 0.50),
        ),
        Row::new(
            "S6. search, phrase + word, 100,000 nodes",
            ms(phrase),
            format!("LIKE scan {}", ms(like_common)),
            format!("{:.3}×", r(phrase, like_common)),
            "info",
            Verdict::Info,
        ),
    ])
}

/// Sessions and nodes per session of [`search_page`]'s store.
const PAGE_SESSIONS: u64 = 1_000;
const PAGE_NODES: u64 = 1_000;

/// The median round trip of `GET path` (20 runs, keep-alive, loopback:
/// the server's time plus a loopback hop) and the page's size.
fn page_time(addr: &str, path: &str, expect: &str) -> Result<(Duration, usize)> {
    use std::io::BufReader;
    let mut c = BufReader::new(std::net::TcpStream::connect(addr)?);
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..20 {
        let t = std::time::Instant::now();
        let (st, body) = crate::servebench::request(&mut c, "GET", path, "")?;
        times.push(t.elapsed());
        if st != 200 || !String::from_utf8_lossy(&body).contains(expect) {
            return Err(format!("{path}: {st}, without `{expect}`").into());
        }
        size = body.len();
    }
    Ok((median(times), size))
}

/// The web view's search page (`/search`, the store's index through the
/// API's search) over 1,000,000 nodes in 1,000 sessions of 10 agents.
pub fn search_page() -> Result<Vec<Row>> {
    let dir = Scratch::new("search-page")?;
    let url = dir.url("");
    {
        let mut store = dir.store("")?;
        let main = BranchName::main();
        for s in 0..PAGE_SESSIONS {
            let ses = store
                .transaction(|l| {
                    l.new_session(&format!("agent-{}", s % 10), Some(&format!("s{s}")), 0)
                })?
                .id;
            store
                .transaction(|l| l.append_many(&ses, &main, &drafts(s * PAGE_NODES, PAGE_NODES)))?;
        }
        let (n, index) = timed(|| Ok(store.search_update(&mut |_, _| {})?))?;
        note(format!(
            "{} nodes indexed in {}",
            thousands(n as f64),
            ms(index)
        ));
    }
    let (addr, rt) = crate::servebench::start(&url)?;
    // `zanzibar`: every 10,000th message (100 hits, the best 50 shown);
    // `capital`: every 10th (100,000 hits).
    let (rare, size) = page_time(&addr, "/search?q=zanzibar", "<mark>zanzibar</mark>")?;
    let (api, _) = page_time(&addr, "/api/v1/search?q=zanzibar&limit=50", "zanzibar")?;
    let (agent, _) = page_time(
        &addr,
        "/search?q=zanzibar&agent=agent-0&kind=&model=&status=&since=&until=",
        "<mark>zanzibar</mark>",
    )?;
    let (common, _) = page_time(&addr, "/search?q=capital", "<mark>capital</mark>")?;
    rt.shutdown_timeout(Duration::from_secs(1));
    let limit = Duration::from_millis(50);
    Ok(vec![
        Row::new(
            "S7. search page, rare word (100 hits, best 50 shown), 1,000,000 nodes in 1,000 sessions",
            ms(rare),
            format!("the same search over the API {}", ms(api)),
            format!(
                "{:.2}x ({} KB page)",
                rare.as_secs_f64() / api.as_secs_f64().max(1e-9),
                size / 1024
            ),
            "≤ 50 ms",
            Verdict::of(rare <= limit),
        ),
        Row::new(
            "S8. search page, rare word and an agent filter (blank fields sent), 1,000,000 nodes",
            ms(agent),
            format!("unfiltered {}", ms(rare)),
            format!("{:.2}x", agent.as_secs_f64() / rare.as_secs_f64().max(1e-9)),
            "≤ 50 ms",
            Verdict::of(agent <= limit),
        ),
        Row::new(
            "S9. search page, common word (100,000 hits, best 50 shown), 1,000,000 nodes",
            ms(common),
            format!("rare word {}", ms(rare)),
            format!(
                "{:.1}x",
                common.as_secs_f64() / rare.as_secs_f64().max(1e-9)
            ),
            "info (ranking every hit)",
            Verdict::Info,
        ),
    ])
}
