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

/// Calls of the two timelines of [`request_diff`]: 1×, 4×, 16×.
const CALLS: [u64; 3] = [50, 200, 800];

/// Turn `i` of an agent that resends its history with every request
/// (system prompt, every question and answer so far): invoke, request,
/// response, complete. `system` is the system prompt.
fn agent_turn(
    i: u64,
    system: &str,
    history: &mut Vec<serde_json::Value>,
) -> Vec<convo_store::Draft> {
    let t = 1_770_000_000_000 + 4 * i as i64;
    let ask = format!("Question {i}: which file should the agent read next?");
    let answer = format!("Answer {i}: read src/module_{i}.rs, then run the tests.");
    history.push(serde_json::json!({"role": "user", "content": ask}));
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    messages.extend(history.iter().cloned());
    let body = serde_json::json!({"model": "gpt-4o", "temperature": 0.2, "messages": messages});
    let reply = serde_json::json!({"id": format!("c{i}"), "model": "gpt-4o", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]});
    history.push(serde_json::json!({"role": "assistant", "content": answer}));
    vec![
        draft(Kind::Invoke, &ask, t),
        draft(Kind::Request, &body.to_string(), t + 1),
        draft(Kind::Response, &reply.to_string(), t + 2),
        draft(Kind::Complete, &answer, t + 3),
    ]
}

/// A session of `n` calls on `main` and `n` on `b`, forked after the first
/// turn, whose system prompt differs in one word: every request after the
/// fork changed in one message. Returns the session.
fn two_timelines(st: &mut Store, n: u64) -> Result<convo_core::SessionId> {
    let ses = st
        .transaction(|l| l.new_session("bench", Some(&format!("requests {n}")), 0))?
        .id;
    let (main, b) = (BranchName::main(), BranchName::new("b")?);
    let mut first = None;
    for (branch, system) in [
        (&main, "You are a careful coding agent."),
        (&b, "You are a fast coding agent."),
    ] {
        let mut history = Vec::new();
        let from = if branch.is_main() { 0 } else { 1 };
        if !branch.is_main() {
            agent_turn(0, "You are a careful coding agent.", &mut history);
            let at = first.clone().ok_or("no first turn")?;
            st.transaction(|l| l.fork(&ses, &at, branch, 0))?;
        }
        for chunk in (from..n).collect::<Vec<_>>().chunks(100) {
            let drafts: Vec<_> = chunk
                .iter()
                .flat_map(|&i| agent_turn(i, system, &mut history))
                .collect();
            let hashes = st.transaction(|l| l.append_many(&ses, branch, &drafts))?;
            if first.is_none() {
                first = Some(HashPrefix::parse(&hashes[3].to_hex())?);
            }
        }
    }
    Ok(ses)
}

/// The request diff of two timelines of 50/200/800 calls whose every
/// request after the fork changed in one message (the target: 200
/// calls, ≤ 200 KB and ≤ 300 ms to first paint): page 1's bytes, server
/// round trip and first paint in headless Chromium.
pub fn request_diff() -> Result<Vec<Row>> {
    let dir = Scratch::new("webdiff-requests")?;
    let url = dir.url("");
    drop(dir.store("")?);
    let (addr, rt) = start(&url)?;
    let mut got = Vec::new();
    for n in CALLS {
        note(format!("request diff: {n} calls a side"));
        let mut st = Store::open(&url)?;
        let ses = two_timelines(&mut st, n)?;
        let path = format!("/sessions/{ses}/diff?a=main&b=b");
        got.push((n, path.clone(), page(&addr, &path)?));
    }
    let mut rows = Vec::new();
    for (n, path, (t, bytes)) in &got {
        let paint = crate::servebench::paint_times(&addr, path, &got[0].1, "#diff")?;
        let fp = paint.as_ref().and_then(|v| v["big"].as_f64());
        let ok = *bytes <= 200_000 && fp.is_none_or(|f| f <= 300.0);
        rows.push(Row::new(
            format!("26b. serve: request diff page 1, two {n}-call timelines, one message changed in every request"),
            format!(
                "{} KB, server {}, first paint {}",
                bytes / 1000,
                ms(*t),
                fp.map_or("not measured".to_owned(), |f| format!("{f:.0} ms"))
            ),
            format!("{} calls: {} KB", got[0].0, got[0].2.1 / 1000),
            format!("{:.1}× the bytes", *bytes as f64 / got[0].2.1.max(1) as f64),
            "≤ 200 KB, ≤ 300 ms first paint (200 calls)",
            Verdict::of(ok),
        ));
    }
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(rows)
}
