//! Payloads that repeat (convo-store's `chunk.rs`): one conversation
//! through the recording proxy, each call resending the whole history plus
//! one question, at 250, 1,000 and 4,000 calls (1×, 4×, 16×). Measured:
//! the store's bytes on disk against the conversation's distinct message
//! bytes (target: at most 2× plus 4 KB per call at 1,000 calls), and the
//! proxy's added latency (the same request sent to the upstream directly,
//! right before) near call 10 against the last calls (target: within
//! 1.5×). Then, on the store alone: reading a 150 KB payload stored in
//! chunks against the same payload stored whole (target: at most 2×).

use crate::proxybench::serve;
use crate::util::{Result, Row, Scratch, Verdict, disk_bytes, settle, thousands};
use axum::body::Bytes;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use std::time::Instant;

/// The answer to the n-th call (about 70 bytes of content).
fn answer(n: usize) -> String {
    format!("answer {n}: it depends on the context you give, see above.")
}

/// The request's messages, counted without building them (the upstream
/// stands in for a model: its cost is in both the direct and the proxied
/// call, and a `Value` of 160 KB per call only added noise beside the proxy
/// on two cores).
#[derive(serde::Deserialize)]
struct Counted {
    #[serde(default)]
    messages: Vec<serde::de::IgnoredAny>,
}

async fn upstream(body: Bytes) -> axum::response::Response {
    let n = serde_json::from_slice::<Counted>(&body).map_or(0, |r| r.messages.len()) / 2;
    axum::Json(
        json!({"id": "c", "object": "chat.completion", "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer(n)},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}),
    )
    .into_response()
}

async fn call(c: &reqwest::Client, url: &str, body: &[u8]) -> Result<(f64, Value)> {
    let t = Instant::now();
    let r = c
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await?;
    let v: Value = serde_json::from_slice(&r.bytes().await?)?;
    Ok((t.elapsed().as_secs_f64() * 1000.0, v))
}

/// What one conversation of `calls` calls cost.
struct Conversation {
    calls: usize,
    /// Every message's JSON once.
    distinct: u64,
    /// Request bodies sent, in total.
    sent: u64,
    /// The store on disk (WAL folded in).
    disk: u64,
    /// The store on disk before the conversation.
    empty: u64,
    /// The largest tables and indexes (`dbstat`), bytes.
    space: Vec<(String, u64)>,
    /// Median added latency over calls 1..=20 and over the last 20, ms.
    early: f64,
    late: f64,
}

async fn conversation(calls: usize) -> Result<Conversation> {
    let up = serve(axum::Router::new().route("/v1/chat/completions", post(upstream))).await?;
    let scratch = Scratch::new("dedup")?;
    drop(scratch.store("")?);
    settle(&scratch.db())?;
    let empty = disk_bytes(&scratch.db())?;
    let (px, st, _) = crate::proxybench::recording_proxy(scratch.url(""), &up).await?;
    let c = reqwest::Client::new();
    let direct = format!("{up}/v1/chat/completions");
    let via = format!("{px}/s/conversation/main/v1/chat/completions");
    let system = json!({"role": "system", "content": "You are a helpful assistant."});
    let mut messages = vec![system.clone()];
    let mut distinct = serde_json::to_vec(&system)?.len() as u64;
    let (mut sent, mut added) = (0u64, Vec::with_capacity(calls));
    for i in 0..calls {
        let q = json!({"role": "user", "content": format!("question {i}: and what about the next step?")});
        distinct += serde_json::to_vec(&q)?.len() as u64;
        messages.push(q);
        let body = serde_json::to_vec(&json!({"model": "bench", "messages": messages}))?;
        sent += body.len() as u64;
        let (d, _) = call(&c, &direct, &body).await?;
        let (p, v) = call(&c, &via, &body).await?;
        added.push(p - d);
        let a = v["choices"][0]["message"].clone();
        distinct += serde_json::to_vec(&a)?.len() as u64;
        messages.push(a);
    }
    drop(st);
    // The writer's connection closes with the pool; give it a moment.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    settle(&scratch.db())?;
    let disk = disk_bytes(&scratch.db())?;
    let space = crate::util::space_by_object(&scratch.db())?;
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(Conversation {
        calls,
        distinct,
        sent,
        disk,
        empty,
        space,
        early: median(&added[..20.min(calls)]),
        late: median(&added[calls.saturating_sub(20)..]),
    })
}

/// Reading a ~150 KB payload back, chunked against whole: the same bytes
/// under two digests (a trailing space), one stored by the store (chunked),
/// one written whole into `blobs` as a store of the previous release holds it.
fn read_back() -> Result<(f64, f64)> {
    let scratch = Scratch::new("dedup-read")?;
    let mut s = scratch.store("")?;
    let chunked = convo_testutil::growing_request(550, "");
    let mut whole = chunked.clone();
    whole.push(b' ');
    let (hc, hw) = (
        convo_core::hash::content_hash(&chunked),
        convo_core::hash::content_hash(&whole),
    );
    s.write(|tx| tx.put_blob(&hc, &chunked))?;
    drop(s);
    {
        let c = rusqlite::Connection::open(scratch.db())?;
        c.execute(
            "INSERT INTO blobs (hash, k, data) VALUES (?1, substr(?1, 1, 8), ?2)",
            rusqlite::params![hw.as_bytes().as_slice(), whole],
        )?;
    }
    settle(&scratch.db())?;
    let mut s = scratch.store("")?;
    let mut time = |h: &convo_core::ContentHash, want: usize| -> Result<f64> {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..200 {
                let got = s.blob(h)?.map_or(0, |b| b.len());
                if got != want {
                    return Err("a payload did not read back whole".into());
                }
            }
            best = best.min(t.elapsed().as_secs_f64() * 1000.0 / 200.0);
        }
        Ok(best)
    };
    let w = time(&hw, whole.len())?;
    let c = time(&hc, chunked.len())?;
    Ok((c, w))
}

async fn run() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut per_call = Vec::new();
    // `CONVO_BENCH_DEDUP_CALLS=250,1000` for a shorter run.
    let scales: Vec<usize> = std::env::var("CONVO_BENCH_DEDUP_CALLS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![250, 1_000, 4_000]);
    for calls in scales {
        let c = conversation(calls).await?;
        let stored = c.disk.saturating_sub(c.empty);
        let budget = 2 * c.distinct + 4096 * c.calls as u64;
        per_call.push((c.calls, stored as f64 / c.calls as f64));
        let space: Vec<String> = c
            .space
            .iter()
            .take(5)
            .map(|(name, b)| format!("{name} {:.2} KB/call", *b as f64 / c.calls as f64 / 1e3))
            .collect();
        crate::util::note(format!("{} calls: {}", c.calls, space.join(", ")));
        rows.push(Row::new(
            format!(
                "dedup: store bytes, {} proxied calls",
                thousands(c.calls as f64)
            ),
            format!("{:.2} MB", stored as f64 / 1e6),
            format!(
                "distinct messages {:.2} MB, request bodies {:.1} MB",
                c.distinct as f64 / 1e6,
                c.sent as f64 / 1e6
            ),
            format!("{:.2} KB/call", stored as f64 / c.calls as f64 / 1e3),
            "≤ 2× distinct + 4 KB/call",
            Verdict::of(stored <= budget),
        ));
        rows.push(Row::new(
            format!(
                "dedup: added latency, last 20 of {} calls vs calls 1–20",
                thousands(c.calls as f64)
            ),
            format!("{:.3} ms", c.late),
            format!("{:.3} ms", c.early),
            format!("{:.2}×", c.late / c.early.max(1e-6)),
            if c.calls == 1_000 { "≤ 1.5×" } else { "—" },
            if c.calls == 1_000 {
                Verdict::of(c.late <= 1.5 * c.early.max(0.05))
            } else {
                Verdict::Info
            },
        ));
    }
    let growth: Vec<String> = per_call
        .iter()
        .map(|(n, b)| format!("{n}: {:.2} KB", b / 1e3))
        .collect();
    let flat = per_call.last().map_or(0.0, |l| l.1) <= 2.0 * per_call.first().map_or(0.0, |f| f.1);
    rows.push(Row::new(
        "dedup: store bytes per call at 1×, 4×, 16× the calls",
        growth.join(", "),
        "flat per call = linear growth",
        "—",
        "16× ≤ 2× of 1× per call",
        Verdict::of(flat),
    ));
    let (cont, whole, len) = read_request();
    rows.push(Row::new(
        "dedup: read call 1,000's request for recording (it continues call 999's)",
        format!("{cont:.3} ms"),
        format!(
            "parsing its {:.0} KB alone (messages as slices, as a whole reading starts): {whole:.3} ms",
            len as f64 / 1e3
        ),
        format!("{:.2}×", cont / whole.max(1e-9)),
        "—",
        Verdict::Info,
    ));
    let (c, w) = read_back()?;
    rows.push(Row::new(
        "dedup: read a 150 KB payload, chunked vs whole",
        format!("{c:.3} ms"),
        format!("whole {w:.3} ms"),
        format!("{:.2}×", c / w),
        "≤ 2×",
        Verdict::of(c <= 2.0 * w),
    ));
    Ok(rows)
}

/// Reading the request of call 1,000 of a conversation for recording
/// (`Facts::read` with the proxy's memory of call 999) against serde_json
/// parsing the same body with its messages as borrowed slices (what reading
/// it whole costs at least): medians in ms, and the body's length.
fn read_request() -> (f64, f64, usize) {
    use convo_proxy::api::Api;
    use convo_proxy::body::{Facts, Keys};
    let body_of = |n: usize| {
        let q = |i: usize| json!({"role": "user", "content": format!("question {i}: what about the next step, and why?")});
        let mut msgs = vec![json!({"role": "system", "content": "You answer questions."})];
        for i in 0..n {
            msgs.push(q(i));
            msgs.push(json!({"role": "assistant", "content": answer(i)}));
        }
        msgs.push(q(n));
        Bytes::from(
            serde_json::to_vec(&json!({"model": "m", "messages": msgs})).unwrap_or_default(),
        )
    };
    let (prev, last) = (body_of(999), body_of(1_000));
    #[derive(serde::Deserialize)]
    struct Slices<'a> {
        #[serde(borrow)]
        #[allow(dead_code)]
        messages: Vec<&'a serde_json::value::RawValue>,
    }
    let (mut cont, mut whole) = (Vec::new(), Vec::new());
    for _ in 0..41 {
        let keys = Keys::default();
        let _ = Facts::read(Api::Chat, &prev, Some(&keys));
        let t = Instant::now();
        let f = Facts::read(Api::Chat, &last, Some(&keys));
        cont.push(t.elapsed().as_secs_f64() * 1000.0);
        std::hint::black_box(f);
        let t = Instant::now();
        let v = serde_json::from_slice::<Slices<'_>>(&last).map(|s| s.messages.len());
        whole.push(t.elapsed().as_secs_f64() * 1000.0);
        std::hint::black_box(v.ok());
    }
    (
        crate::util::median_f(cont),
        crate::util::median_f(whole),
        last.len(),
    )
}

/// The benchmark (its own runtime).
pub fn dedup() -> Result<Vec<Row>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run())
}
