//! OTLP ingest (`convo_llm::otel`, what `/v1/traces` runs): the cost
//! of one more call as the session grows (1×/4×/16×), with the receiver's
//! threading cache and without it (every stored node read back); spans/s
//! over many short conversations; bytes stored against the distinct
//! message bytes of a run that resends its history on every call.
//!
//! `CONVO_BENCH_OTEL_CALLS` (default 500) is the 1× session length.

use crate::util::{Result, Row, Scratch, Verdict, median, thousands};
use convo_llm::otel::{self, Batch, Encoding, ThreadCache};
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
    body(vec![span(trace, i, history)])
}

/// An OTLP/JSON export of `spans`.
fn body(spans: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bench"}}]},
        "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}],
    }]}))
    .unwrap_or_default()
}

/// Chat span number `i` of `trace` (see [`export`]).
fn span(trace: &str, i: usize, history: &[Value]) -> Value {
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
    span
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
    // As the receiver does: the calls, and the body kept.
    let p = otel::prepare(calls).with_body(otel::raw::Body {
        media: "traces/json",
        bytes: std::sync::Arc::new(body.to_vec()),
    });
    let fresh = ThreadCache::new();
    s.transaction(|l| otel::ingest_prepared(l, &p, 0, cache.unwrap_or(&fresh)))?;
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

/// Exporters sending at once.
const EXPORTERS: usize = 16;
/// Conversations of the spans/s run, and calls in each.
const CONVERSATIONS: usize = 2_000;
const CALLS: usize = 5;
/// Conversations whose spans one export carries (an SDK's batch
/// processor sends what ended since its last flush).
const PER_EXPORT: usize = 10;

/// `convo serve` receiving OTLP over HTTP: spans/s from 16 concurrent
/// exporters against writing the same nodes the way `convo ingest` does;
/// bytes stored per call against the distinct message bytes; the latency
/// from an exporter's flush to the node on the SSE stream.
pub fn otel_serve() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // The exports: exporter e sends its conversations PER_EXPORT at a
    // time, all CALLS calls of each (every call resending its history).
    let mut per_exporter: Vec<Vec<Vec<u8>>> = vec![Vec::new(); EXPORTERS];
    let per = CONVERSATIONS / EXPORTERS;
    for (e, slot) in per_exporter.iter_mut().enumerate() {
        for chunk in (e * per..(e + 1) * per)
            .collect::<Vec<_>>()
            .chunks(PER_EXPORT)
        {
            let mut spans = Vec::new();
            for &c in chunk {
                let trace = format!("{:032x}", c + 1);
                let mut h = Vec::new();
                for i in 0..CALLS {
                    spans.push(span(&trace, i, &h));
                    h.push(msg("user", &question(i)));
                    h.push(msg("assistant", &answer(i)));
                }
            }
            slot.push(body(spans));
        }
    }
    let spans_total = per * EXPORTERS * CALLS;
    let dir = Scratch::new("otel-serve")?;
    let (addr, rt) = crate::servebench::start(&dir.url(""))?;
    let t = Instant::now();
    let handles: Vec<_> = per_exporter
        .into_iter()
        .map(|bodies| {
            let addr = addr.clone();
            std::thread::spawn(move || -> std::result::Result<(), String> {
                let s = std::net::TcpStream::connect(&addr).map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                let mut c = std::io::BufReader::new(s);
                for b in bodies {
                    let b = String::from_utf8(b).map_err(|e| e.to_string())?;
                    let (st, resp) = crate::servebench::request(&mut c, "POST", "/v1/traces", &b)
                        .map_err(|e| e.to_string())?;
                    if st != 200 {
                        return Err(format!("export: {st} {}", String::from_utf8_lossy(&resp)));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "an exporter panicked")??;
    }
    let http = t.elapsed();
    let nodes = {
        let mut s = dir.store("")?;
        let sessions = s.sessions()?;
        if sessions.len() != per * EXPORTERS {
            return Err(
                format!("{} sessions, expected {}", sessions.len(), per * EXPORTERS).into(),
            );
        }
        let mut n = 0;
        for ses in &sessions {
            n += s.timeline(&ses.id, &convo_core::BranchName::main())?.len();
        }
        n
    };
    rt.shutdown_timeout(Duration::from_millis(100));

    // The same nodes the way `convo ingest --batch N` writes them: drafts
    // appended in one transaction per export's worth, one writer.
    let dir2 = Scratch::new("otel-ingest")?;
    let mut s = dir2.store("")?;
    let t = Instant::now();
    let mut written = 0usize;
    for chunk in (0..per * EXPORTERS).collect::<Vec<_>>().chunks(PER_EXPORT) {
        s.transaction(|l| {
            for &c in chunk {
                let id = convo_core::SessionId::derived(format!("ingest:{c}").as_bytes());
                l.create_session(id, "bench", None, 0)?;
                let mut drafts = Vec::new();
                for i in 0..CALLS {
                    drafts.push(convo_testutil::draft(
                        convo_core::Kind::Invoke,
                        &question(i),
                        0,
                    ));
                    drafts.push(convo_testutil::draft(
                        convo_core::Kind::Complete,
                        &answer(i),
                        0,
                    ));
                }
                written += l
                    .append_many(&id, &convo_core::BranchName::main(), &drafts)?
                    .len();
            }
            Ok(())
        })?;
    }
    let ingest = t.elapsed();
    let otlp_rate = spans_total as f64 / http.as_secs_f64();
    // The same calls' worth of nodes (two per call) by ingest.
    let ingest_rate = (written / 2) as f64 / ingest.as_secs_f64();
    crate::util::note(format!(
        "16 exporters: {spans_total} spans, {nodes} nodes in {:.2} s; ingest: {written} nodes in {:.2} s",
        http.as_secs_f64(),
        ingest.as_secs_f64()
    ));
    let ratio = otlp_rate / ingest_rate;
    rows.push(Row::new(
        format!(
            "OTLP over HTTP: spans/s, {EXPORTERS} concurrent exporters, {} conversations × {CALLS} calls resending their history, {PER_EXPORT} conversations per export (decode + thread + write, one tx per export)",
            thousands((per * EXPORTERS) as f64)
        ),
        format!("{} spans/s", thousands(otlp_rate)),
        format!(
            "the same {} nodes as `convo ingest --batch` writes them (in process, one tx per {PER_EXPORT} conversations): {} calls/s",
            thousands(written as f64),
            thousands(ingest_rate)
        ),
        format!("{:.0}%", ratio * 100.0),
        "≥ 50%",
        Verdict::of(ratio >= 0.5),
    ));

    // Storage per call: 100 calls of ~550-byte messages.
    let dir3 = Scratch::new("otel-size")?;
    let mut s = dir3.store("")?;
    let cache = ThreadCache::new();
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let mut h: Vec<Value> = Vec::new();
    let mut distinct = 0usize;
    let mut sent = 0usize;
    for i in 0..100 {
        let q = format!("{} {}", question(i), "lorem ipsum ".repeat(40));
        let a = format!("{} {}", answer(i), "dolor sit amet ".repeat(32));
        distinct += q.len() + a.len();
        let mut input = h.clone();
        input.push(msg("user", &q));
        let mut sp = span(trace, i, &[]);
        sp["attributes"][1]["value"]["stringValue"] = json!(Value::Array(input).to_string());
        sp["attributes"][2]["value"]["stringValue"] =
            json!(json!([msg("assistant", &a)]).to_string());
        let b = body(vec![sp]);
        sent += b.len();
        receive(&mut s, &b, Some(&cache))?;
        h.push(msg("user", &q));
        h.push(msg("assistant", &a));
    }
    let ses = otel::ingest::session_id(&format!("trace:{trace}"));
    let tl = s.timeline(&ses, &convo_core::BranchName::main())?;
    let payload: usize = tl.iter().map(|n| n.payload.len()).sum();
    let diag: usize = tl
        .iter()
        .map(|n| n.stored.node.diagnostics.to_value().to_string().len())
        .sum();
    // The export bodies kept: their residuals and the row's numbers.
    let kept = s.read(|tx| tx.otlp_exports(None))?;
    let raw: usize = kept.iter().map(|r| r.residual.len() + 5 * 8).sum();
    let back = s.otlp_exports(None)?;
    if back.len() != 100 || back.iter().map(|b| b.body.len()).sum::<usize>() != sent {
        return Err("the export bodies did not come back whole".into());
    }
    drop(s);
    let file = dir_bytes(&dir3)?;
    let per_call = (payload + diag + raw) as f64 / 100.0;
    let ratio = (payload + diag + raw) as f64 / distinct as f64;
    rows.push(Row::new(
        "OTLP: bytes stored per call, 100 calls of ~550 B messages, each call resending its history (payloads + node diagnostics + the export bodies kept: residual and 40 B of numbers each)",
        format!(
            "{} B/call (bodies {} B/call)",
            thousands(per_call),
            thousands(raw as f64 / 100.0)
        ),
        format!(
            "distinct message bytes {} B/call; the bodies sent {} B/call; whole store file {} B/call",
            thousands(distinct as f64 / 100.0),
            thousands(sent as f64 / 100.0),
            thousands(file as f64 / 100.0)
        ),
        format!("{ratio:.3}×"),
        "≤ 1.2×",
        Verdict::of(ratio <= 1.2),
    ));

    // Flush → SSE.
    let dir4 = Scratch::new("otel-sse")?;
    let (addr, rt) = crate::servebench::start(&dir4.url(""))?;
    let lat = flush_to_sse(&addr, 200)?;
    rt.shutdown_timeout(Duration::from_millis(100));
    let p = |q: usize| lat[(lat.len() * q).div_ceil(100).saturating_sub(1)];
    rows.push(Row::new(
        "OTLP: an exporter's flush (one call of a growing conversation) to its last node on /api/v1/events, p50 / p99 of 200",
        format!("{} / {}", crate::util::ms(p(50)), crate::util::ms(p(99))),
        "—",
        "—",
        "—",
        Verdict::Info,
    ));
    Ok(rows)
}

/// Sends `n` one-call exports of one conversation and times each from
/// the start of its POST to the receipt of its last node (the answer) by
/// an SSE subscriber; sorted.
fn flush_to_sse(addr: &str, n: usize) -> Result<Vec<Duration>> {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::new()));
    let ready = Arc::new(AtomicUsize::new(0));
    {
        let (addr, seen, ready) = (addr.to_owned(), seen.clone(), ready.clone());
        let mut s = std::net::TcpStream::connect(&addr)?;
        s.set_nodelay(true)?;
        std::thread::spawn(move || {
            let req = format!(
                "GET /api/v1/events HTTP/1.0\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).is_err() {
                return;
            }
            let mut r = BufReader::new(s);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if line.trim().is_empty() {
                    ready.store(1, Ordering::SeqCst);
                }
                if line.starts_with("id:")
                    && let Ok(mut v) = seen.lock()
                {
                    v.push(Instant::now());
                }
            }
        });
    }
    let t = Instant::now();
    while ready.load(Ordering::SeqCst) == 0 {
        if t.elapsed() > Duration::from_secs(30) {
            return Err("SSE: not subscribed after 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    // No Nagle on the exporter's side either: a request written in two
    // pieces would wait for the server's delayed ACK (~40 ms).
    let exporter = std::net::TcpStream::connect(addr)?;
    exporter.set_nodelay(true)?;
    let mut c = BufReader::new(exporter);
    let mut h = Vec::new();
    let mut lat = Vec::new();
    for i in 0..n {
        let b = String::from_utf8(export(trace, i, &h))?;
        let want = 2 * (i + 1);
        let t = Instant::now();
        let (st, _) = crate::servebench::request(&mut c, "POST", "/v1/traces", &b)?;
        if st != 200 {
            return Err(format!("export: {st}").into());
        }
        let wait = Instant::now();
        loop {
            let got = seen.lock().map_err(|_| "poisoned")?.get(want - 1).copied();
            if let Some(at) = got {
                lat.push(at.duration_since(t));
                break;
            }
            if wait.elapsed() > Duration::from_secs(30) {
                return Err(format!("SSE: node {want} not seen after 30 s").into());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        h.push(msg("user", &question(i)));
        h.push(msg("assistant", &answer(i)));
    }
    lat.sort();
    Ok(lat)
}

/// Calls of the three-ways conversation (`CONVO_BENCH_THREE_WAYS_CALLS`).
fn three_ways_calls() -> usize {
    std::env::var("CONVO_BENCH_THREE_WAYS_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

/// The three-ways conversation's question and answer `i` (~200 and ~400
/// bytes).
fn tw_question(i: usize) -> String {
    format!(
        "question {i}: what does step {i} of the migration change, and what could fail? {}",
        "Consider the indexes, the triggers and the backfill. ".repeat(3)
    )
}

fn tw_answer(i: usize) -> String {
    format!(
        "answer {i}: it adds a column and backfills it in batches; nothing is dropped. {}",
        "The index is built concurrently, so writes go on meanwhile. ".repeat(5)
    )
}

/// The scripted upstream of the proxied run: answer `n` to a request of
/// `2n + 1` messages (a system prompt, then pairs).
async fn tw_upstream(body: axum::body::Bytes) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    let n = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["messages"].as_array().map(Vec::len))
        .unwrap_or(1)
        / 2;
    axum::Json(json!({"id": "c", "object": "chat.completion", "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": tw_answer(n.saturating_sub(1))},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}))
    .into_response()
}

const TW_SYSTEM: &str = "You are a careful database assistant.";

/// The store's bytes on disk for `scratch` (WAL folded in) less `empty`.
fn tw_disk(scratch: &Scratch, empty: u64) -> Result<u64> {
    crate::util::settle(&scratch.db())?;
    Ok(crate::util::disk_bytes(&scratch.db())?.saturating_sub(empty))
}

fn tw_empty(name: &str) -> Result<(Scratch, u64)> {
    let scratch = Scratch::new(name)?;
    drop(scratch.store("")?);
    crate::util::settle(&scratch.db())?;
    let empty = crate::util::disk_bytes(&scratch.db())?;
    Ok((scratch, empty))
}

/// Through `convo proxy` (mounted on `convo serve`) against a scripted
/// upstream: each call the history plus one question.
async fn tw_proxy(calls: usize) -> Result<u64> {
    use axum::routing::post;
    let (scratch, empty) = tw_empty("three-proxy")?;
    let up = crate::proxybench::serve(
        axum::Router::new().route("/v1/chat/completions", post(tw_upstream)),
    )
    .await?;
    let (px, st, _) = crate::proxybench::recording_proxy(scratch.url(""), &up).await?;
    let c = reqwest::Client::new();
    let via = format!("{px}/s/three/main/v1/chat/completions");
    let mut messages = vec![json!({"role": "system", "content": TW_SYSTEM})];
    for i in 0..calls {
        messages.push(json!({"role": "user", "content": tw_question(i)}));
        let body = serde_json::to_vec(&json!({"model": "bench", "messages": messages}))?;
        let r = c
            .post(&via)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let v: Value = serde_json::from_slice(&r.bytes().await?)?;
        let a = v["choices"][0]["message"].clone();
        if a["content"].as_str() != Some(tw_answer(i).as_str()) {
            return Err(format!("proxy call {i}: unexpected answer {v}").into());
        }
        messages.push(a);
    }
    drop(st);
    // The writer's connection closes with the pool; give it a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    tw_disk(&scratch, empty)
}

/// `convo import` of the same conversation as a Claude Code transcript
/// (a user line and an assistant line per call, chained by uuid).
fn tw_import(calls: usize) -> Result<u64> {
    use convo_formats::claude_code;
    use convo_llm::ledger::import_all;
    let (scratch, empty) = tw_empty("three-import")?;
    let dir = scratch
        .db()
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default()
        .join("transcripts");
    std::fs::create_dir_all(&dir)?;
    let sid = "00000000-0000-4000-8000-000000000003";
    let mut out = String::new();
    let mut parent = "null".to_owned();
    for i in 0..calls {
        let ts = format!("2026-11-24T15:{:02}:{:02}.000Z", (i / 60) % 60, i % 60);
        let u = format!("\"00000003-{i:04x}-4000-8000-000000000001\"");
        let a = format!("\"00000003-{i:04x}-4000-8000-000000000002\"");
        let (q, ans) = if i == 0 {
            (format!("{TW_SYSTEM}\n{}", tw_question(i)), tw_answer(i))
        } else {
            (tw_question(i), tw_answer(i))
        };
        out.push_str(&format!(
            r#"{{"parentUuid":{parent},"isSidechain":false,"type":"user","message":{{"role":"user","content":{}}},"uuid":{u},"timestamp":"{ts}","sessionId":"{sid}"}}"#,
            json!(q)
        ));
        out.push('\n');
        out.push_str(&format!(
            r#"{{"parentUuid":{u},"isSidechain":false,"type":"assistant","message":{{"id":"msg_{i}","type":"message","role":"assistant","model":"bench","content":[{{"type":"text","text":{}}}],"stop_reason":"end_turn","usage":{{"input_tokens":3,"output_tokens":1}}}},"uuid":{a},"timestamp":"{ts}","sessionId":"{sid}"}}"#,
            json!(ans)
        ));
        out.push('\n');
        parent = a;
    }
    let path = dir.join(format!("{sid}.jsonl"));
    std::fs::write(&path, out)?;
    let mut store = scratch.store("")?;
    let got = claude_code::read_session(&path)?;
    let items: Vec<(&str, &convo_formats::Conversation)> = got
        .conversations
        .iter()
        .map(|c| ("claude-code", c))
        .collect();
    import_all(&mut store, &items, None, 0)?;
    drop(store);
    std::fs::remove_dir_all(&dir)?;
    tw_disk(&scratch, empty)
}

/// OTLP/JSON spans to `convo serve`, one export per call, each span
/// resending the history (GenAI semconv ≥ 1.37 attributes).
async fn tw_otlp(calls: usize) -> Result<u64> {
    let (scratch, empty) = tw_empty("three-otlp")?;
    let mut config = convo_server::Config::new(scratch.url(""));
    config.log_requests = false;
    let st = convo_server::state(&config)?;
    let app = convo_server::router(st.clone(), &config, None);
    let srv = crate::proxybench::serve_convo(app).await?;
    let c = reqwest::Client::new();
    let trace = "7a2190356c3fc94b4c3b5f9a8a5e2c11";
    let mut history =
        vec![json!({"role": "system", "parts": [{"type": "text", "content": TW_SYSTEM}]})];
    for i in 0..calls {
        history.push(msg("user", &tw_question(i)));
        let mut sp = span(trace, i, &[]);
        sp["attributes"][1]["value"]["stringValue"] =
            json!(Value::Array(history.clone()).to_string());
        sp["attributes"][2]["value"]["stringValue"] =
            json!(json!([msg("assistant", &tw_answer(i))]).to_string());
        let r = c
            .post(format!("{srv}/v1/traces"))
            .header("content-type", "application/json")
            .body(body(vec![sp]))
            .send()
            .await?;
        if !r.status().is_success() {
            return Err(format!("export {i}: {}", r.status()).into());
        }
        history.push(msg("assistant", &tw_answer(i)));
    }
    drop(st);
    tokio::time::sleep(Duration::from_millis(300)).await;
    tw_disk(&scratch, empty)
}

/// One conversation recorded three ways (issue 26: "the same conversation
/// imported from a Claude Code transcript or received over OTLP costs the
/// same as through the proxy"): bytes on disk each against its distinct
/// message bytes.
pub fn three_ways() -> Result<Vec<Row>> {
    let calls = three_ways_calls();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let proxy = rt.block_on(tw_proxy(calls))?;
    let otlp = rt.block_on(tw_otlp(calls))?;
    let import = tw_import(calls)?;
    let distinct: usize = TW_SYSTEM.len()
        + (0..calls)
            .map(|i| tw_question(i).len() + tw_answer(i).len())
            .sum::<usize>();
    let per = |b: u64| format!("{:.2} KB/call", b as f64 / calls as f64 / 1e3);
    crate::util::note(format!(
        "{calls} calls: proxy {}, import {}, OTLP {}; distinct {:.2} KB/call",
        per(proxy),
        per(import),
        per(otlp),
        distinct as f64 / calls as f64 / 1e3
    ));
    let mut rows = Vec::new();
    for (way, bytes) in [
        ("through `convo proxy`", proxy),
        ("`convo import` of a Claude Code transcript", import),
        ("OTLP spans to `convo serve`", otlp),
    ] {
        let vs_proxy = bytes as f64 / proxy as f64;
        rows.push(Row::new(
            format!(
                "three ways: one conversation of {} calls resending its history, {way}: store bytes on disk",
                thousands(calls as f64)
            ),
            format!("{:.2} MB ({})", bytes as f64 / 1e6, per(bytes)),
            format!(
                "distinct message bytes {:.2} MB; through the proxy {:.2} MB",
                distinct as f64 / 1e6,
                proxy as f64 / 1e6
            ),
            format!(
                "{:.2}× distinct, {vs_proxy:.2}× the proxy",
                bytes as f64 / distinct as f64
            ),
            "≤ 1.25× the proxy",
            Verdict::of(vs_proxy <= 1.25),
        ));
    }
    Ok(rows)
}
