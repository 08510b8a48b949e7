//! The web view's diff page of a long session forked at turn 1, at 625,
//! 2,500 and 10,000 turns (1×, 4×, 16×; four nodes a turn: invoke,
//! request, response, complete). Two forks after turn 1: `early` holds only
//! its fork node (so page 1 shows 200 of main's nodes and the rest is
//! paged), `copy` records every later turn again the same way (so the diff
//! is the fork node and one collapsed line). Measured: page 1's bytes and
//! its server round trip (median of 5, over HTTP/1.1 keep-alive).

use crate::servebench::{request, start};
use crate::util::{Result, Row, Scratch, Verdict, median, ms, note};
use convo_core::{BranchName, HashPrefix, Kind};
use convo_store::Store;
use convo_testutil::draft;
use std::io::BufReader;
use std::net::TcpStream;
use std::time::{Duration, Instant};

const SCALES: [(u64, u64); 3] = [(1, 625), (4, 2_500), (16, 10_000)];

/// Turns `from..to` as drafts (four nodes each).
fn turns(from: u64, to: u64) -> Vec<convo_store::Draft> {
    (from..to)
        .flat_map(|i| {
            let t = 1_770_000_000_000 + 4 * i as i64;
            [
                draft(Kind::Invoke, &format!("Question {i}: what next?"), t),
                draft(
                    Kind::Request,
                    &format!("{{\"prompt\":\"step {i}\"}}"),
                    t + 1,
                ),
                draft(Kind::Response, &format!("Step {i} is done."), t + 2),
                draft(Kind::Complete, &format!("Answer {i}: it is done."), t + 3),
            ]
        })
        .collect()
}

fn append(
    st: &mut Store,
    ses: &convo_core::SessionId,
    b: &BranchName,
    from: u64,
    to: u64,
) -> Result<Vec<convo_core::NodeHash>> {
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        let j = (i + 2_500).min(to);
        out.extend(st.transaction(|l| l.append_many(ses, b, &turns(i, j)))?);
        i = j;
    }
    Ok(out)
}

/// A page's median round trip and bytes.
type Measure = (Duration, usize);

/// Page 1's median round trip and bytes.
fn page(addr: &str, path: &str) -> Result<Measure> {
    let mut c = BufReader::new(TcpStream::connect(addr)?);
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let (st, body) = request(&mut c, "GET", path, "")?;
        if st != 200 {
            return Err(format!("{path}: {st}").into());
        }
        times.push(t.elapsed());
        bytes = body.len();
    }
    Ok((median(times), bytes))
}

pub fn diff_page() -> Result<Vec<Row>> {
    let dir = Scratch::new("webdiff")?;
    let url = dir.url("");
    drop(dir.store("")?);
    let (addr, rt) = start(&url)?;
    let mut got: Vec<(u64, u64, Measure, Measure)> = Vec::new();
    for (scale, n) in SCALES {
        note(format!("diff: {n} turns"));
        let mut st = Store::open(&url)?;
        let ses = st
            .transaction(|l| l.new_session("bench", Some(&format!("diff {n}")), 0))?
            .id;
        let main = BranchName::main();
        let hashes = append(&mut st, &ses, &main, 0, n)?;
        let at = HashPrefix::parse(&hashes[3].to_hex())?;
        let early = BranchName::new("early")?;
        let copy = BranchName::new("copy")?;
        st.transaction(|l| l.fork(&ses, &at, &early, 0))?;
        st.transaction(|l| l.fork(&ses, &at, &copy, 0))?;
        append(&mut st, &ses, &copy, 1, n)?;
        let path = |b: &str| format!("/sessions/{ses}/diff?a=main&b={b}");
        got.push((
            scale,
            n,
            page(&addr, &path("early"))?,
            page(&addr, &path("copy"))?,
        ));
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    let mut rows = Vec::new();
    let base = got[0];
    for (scale, n, (te, be), (tc, bc)) in got.iter().copied() {
        let ok = te < Duration::from_millis(500)
            && be < 1_000_000
            && tc < Duration::from_millis(500)
            && bc < 1_000_000;
        rows.push(Row::new(
            format!("26. serve: diff page 1 of a {n}-turn session forked at turn 1 ({scale}×): fork node only / every turn again"),
            format!("{} ({} KB) / {} ({} KB)", ms(te), be / 1000, ms(tc), bc / 1000),
            format!("1×: {} / {}", ms(base.2.0), ms(base.3.0)),
            format!(
                "{:.1}× / {:.1}× the time",
                te.as_secs_f64() / base.2.0.as_secs_f64().max(1e-9),
                tc.as_secs_f64() / base.3.0.as_secs_f64().max(1e-9)
            ),
            "< 500 ms, < 1 MB; ≤ 16× at 16×",
            Verdict::of(ok),
        ));
    }
    Ok(rows)
}
