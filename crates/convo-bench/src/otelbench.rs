//! OTLP ingest (`convo_formats::otel`, what `/v1/traces` runs): the cost
//! of one more call as the session grows (1×/4×/16×), with the receiver's
//! threading cache and without it (every stored node read back); spans/s
//! over many short conversations; bytes stored against the distinct
//! message bytes of a run that resends its history on every call.
//!
//! `CONVO_BENCH_OTEL_CALLS` (default 500) is the 1× session length.

use crate::util::{Result, Row, Scratch, Verdict, median, thousands};
use convo_formats::otel::{self, Batch, Encoding, ThreadCache};
use convo_store::Store;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const LIMIT: usize = 1 << 30;

fn msg(role: &str, text: &str) -> Value {
    json!({"role": role, "parts": [{"type": "text", "content": text}]})
}

fn question(i: usize) -> String {
    format!("question {i}: what does step {i} of the migration change?")
}

fn answer(i: usize) -> String {
    format!("answer {i}: it adds a column and backfills it; nothing is dropped.")
}

/// One OTLP/JSON export of one chat span of `trace` (span number `i`):
/// the history of `i` question/answer pairs, question `i`, answer `i`.
fn export(trace: &str, i: usize, history: &[Value]) -> Vec<u8> {
    let mut input = history.to_vec();
    input.push(msg("user", &question(i)));
    let ns = |s: usize| ((1_800_000_000 + s) as u128 * 1_000_000_000).to_string();
    let span = json!({
        "traceId": trace,
        "spanId": format!("{:016x}", i + 1),
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": ns(i * 2),
        "endTimeUnixNano": ns(i * 2 + 1),
        "attributes": [
            {"key": "gen_ai.request.model", "value": {"stringValue": "gpt-4o"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": Value::Array(input).to_string()}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": json!([msg("assistant", &answer(i))]).to_string()}},
        ],
    });
    serde_json::to_vec(&json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bench"}}]},
        "scopeSpans": [{"scope": {"name": "bench"}, "spans": [span]}],
    }]}))
    .unwrap_or_default()
}

fn history(n: usize) -> Vec<Value> {
    let mut h = Vec::with_capacity(2 * n);
    for i in 0..n {
        h.push(msg("user", &question(i)));
        h.push(msg("assistant", &answer(i)));
    }
    h
}

/// Decodes and records one export; (decode time, ingest time).
fn receive(
    s: &mut Store,
    body: &[u8],
    cache: Option<&ThreadCache>,
) -> Result<(Duration, Duration)> {
    let t = Instant::now();
    let req = otel::decode_traces(body, Encoding::Json, false, LIMIT)?;
    let calls = otel::calls_from_spans(&Batch::traces(&req));
    let decode = t.elapsed();
    let t = Instant::now();
    match cache {
        Some(c) => s.transaction(|l| otel::ingest_cached(l, &calls, 0, c))?,
        None => s.transaction(|l| otel::ingest(l, &calls, 0))?,
    };
    Ok((decode, t.elapsed()))
}

/// The median ingest time of the next 10 calls of a session of `n` calls
/// (the session written first in one export), on a store whose receiver
/// keeps the cache and on one that reads the session; and the median
/// decode time.
fn next_call(n: usize) -> Result<(Duration, Duration, Duration)> {
    let trace = "5b8efff798038103d269b633813fc60c";
    let mut out = Vec::new();
    let mut dec = Vec::new();
    for cached in [true, false] {
        let dir = Scratch::new("otel-grow")?;
        let mut s = dir.store("")?;
        let cache = ThreadCache::new();
        let cache = cached.then_some(&cache);
        let mut h = history(n - 1);
        receive(&mut s, &export(trace, n - 1, &h), cache)?;
        h.push(msg("user", &question(n - 1)));
        h.push(msg("assistant", &answer(n - 1)));
        let mut times = Vec::new();
        for k in 0..10 {
            let i = n + k;
            let (d, t) = receive(&mut s, &export(trace, i, &h), cache)?;
            times.push(t);
            dec.push(d);
            h.push(msg("user", &question(i)));
            h.push(msg("assistant", &answer(i)));
        }
        out.push(median(times));
    }
    Ok((out[0], out[1], median(dec)))
}

pub fn otel() -> Result<Vec<Row>> {
    let base: usize = std::env::var("CONVO_BENCH_OTEL_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let mut rows = Vec::new();
    let mut first = None;
    for mult in [1usize, 4, 16] {
        let n = base * mult;
        let (with, without, dec) = next_call(n)?;
        crate::util::note(format!(
            "{n} calls: next call ingest {:.2} ms cached, {:.2} ms uncached; decode {:.2} ms",
            with.as_secs_f64() * 1e3,
            without.as_secs_f64() * 1e3,
            dec.as_secs_f64() * 1e3
        ));
        let f = *first.get_or_insert(with);
        rows.push(Row::new(
            format!(
                "OTLP: ingest of one more call at {mult}× ({} calls, the call resending {} messages), threading cache",
                thousands(n as f64),
                2 * n + 1
            ),
            format!("{:.2} ms", with.as_secs_f64() * 1e3),
            format!(
                "every node read back: {:.2} ms; decoding the export: {:.2} ms",
                without.as_secs_f64() * 1e3,
                dec.as_secs_f64() * 1e3
            ),
            format!("{:.2}× 1×", with.as_secs_f64() / f.as_secs_f64().max(1e-9)),
            "grows with the request only (the request is 16× at 16×)",
            Verdict::Info,
        ));
    }

    // Spans/s: 2,000 conversations of 5 calls, one span per export.
    let dir = Scratch::new("otel-rate")?;
    let mut s = dir.store("")?;
    let cache = ThreadCache::new();
    let mut bodies = Vec::new();
    for c in 0..2000usize {
        let trace = format!("{:032x}", c + 1);
        let mut h = Vec::new();
        for i in 0..5 {
            bodies.push(export(&trace, i, &h));
            h.push(msg("user", &question(i)));
            h.push(msg("assistant", &answer(i)));
        }
    }
    let t = Instant::now();
    for b in &bodies {
        receive(&mut s, b, Some(&cache))?;
    }
    let took = t.elapsed();
    let spans = bodies.len() as f64 / took.as_secs_f64();
    rows.push(Row::new(
        "OTLP: spans/s, 10,000 one-span exports of 2,000 five-call conversations (decode + thread + write, one tx each)",
        format!("{} spans/s", thousands(spans)),
        "—",
        "—",
        "—",
        Verdict::Info,
    ));

    // Bytes stored vs distinct: one 200-call run.
    let dir = Scratch::new("otel-bytes")?;
    let mut s = dir.store("")?;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let mut h = Vec::new();
    let (mut distinct, mut sent) = (0usize, 0usize);
    for i in 0..200 {
        let body = export(trace, i, &h);
        sent += body.len();
        receive(&mut s, &body, Some(&cache))?;
        distinct += question(i).len() + answer(i).len();
        h.push(msg("user", &question(i)));
        h.push(msg("assistant", &answer(i)));
    }
    drop(s);
    let stored = dir_bytes(&dir)?;
    rows.push(Row::new(
        "OTLP: store size after a 200-call run (each call resends the history)",
        format!("{:.2} MB", stored as f64 / 1e6),
        format!(
            "distinct message text {:.3} MB; exports sent {:.1} MB",
            distinct as f64 / 1e6,
            sent as f64 / 1e6
        ),
        format!("{:.3}× the exports", stored as f64 / sent as f64),
        "—",
        Verdict::Info,
    ));
    Ok(rows)
}

fn dir_bytes(d: &Scratch) -> Result<u64> {
    let mut n = 0;
    let dir = d
        .db()
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    for e in std::fs::read_dir(dir)? {
        n += e?.metadata()?.len();
    }
    Ok(n)
}
