//! Recording stays flat in the history's length, by allocation counts:
//! what the proxy does with a request once it has its bytes (read it once,
//! [`convo_proxy::body::Facts`]; record the turn in the store) allocates
//! about as often for a request of 1,000 messages as for one of 100, and
//! holds no more than two copies of its body (the bytes received, the
//! store's draft). Its own test binary, beside `tests/runner.rs` (and in
//! a folder, so the workspace check does not take it for a module the
//! runner forgot): a global allocator counts the whole process, so no
//! other test may run beside it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use convo_core::BranchName;
use convo_proxy::api::Api;
use convo_proxy::body::{Facts, Keys};
use convo_proxy::record::{self, Exchange};
use convo_store::Store;
use serde_json::json;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Allocations and bytes allocated while `f` runs (the whole process:
/// this binary holds this one test, so nothing else runs beside it).
fn counted<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let region = Region::new(GLOBAL);
    let out = f();
    let c = region.change();
    (
        out,
        (c.allocations + c.reallocations) as u64,
        (c.bytes_allocated + c.bytes_reallocated.max(0) as usize) as u64,
    )
}

/// What recording one call cost: allocations, bytes allocated, the body's
/// length.
#[derive(Debug, Clone, Copy)]
struct Cost {
    allocs: u64,
    bytes: u64,
    body: u64,
}

#[test]
fn recording_allocates_as_often_at_1000_messages_as_at_100() {
    let dir = tempfile::tempdir().unwrap();
    let mut store =
        Store::open(&format!("sqlite://{}", dir.path().join("s.db").display())).unwrap();
    let session = store
        .transaction(|l| l.new_session("proxy", Some("long"), 1))
        .unwrap()
        .id;
    let main = BranchName::main();
    let keys = Keys::default();
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut costs = std::collections::BTreeMap::new();
    let mut n = 0;
    let mut last = bytes::Bytes::new();
    while messages.len() < 1_001 {
        n += 1;
        messages.push(json!({"role": "user", "content": format!("question {n}: and what about the next step? {}", "x".repeat(n % 40))}));
        let body = serde_json::to_vec(&json!({"model": "m", "messages": messages})).unwrap();
        let answer = format!("answer {n}: it depends on the context you give, see above.");
        let response = serde_json::to_vec(&json!({"id": "c", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}))
        .unwrap();
        let body = bytes::Bytes::from(body);
        let response_body = response.clone();
        let (_, allocs, bytes) = counted(|| {
            let ex = Exchange {
                api: Some(Api::Chat),
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
                facts: Some(Facts::read(Api::Chat, &body, Some(&keys))),
                request_body: body.clone(),
                status: 200,
                response_body,
                started_at: n as i64,
                ended_at: n as i64,
                ..Exchange::default()
            };
            record::record(&mut store, &session, &main, &ex).unwrap();
        });
        costs.insert(
            messages.len(),
            Cost {
                allocs,
                bytes,
                body: body.len() as u64,
            },
        );
        messages.push(json!({"role": "assistant", "content": answer}));
        last = body;
    }
    // Averaged over a few calls around each length.
    let near = |m: usize| {
        let picked: Vec<Cost> = costs
            .range(m.saturating_sub(10)..=m + 10)
            .map(|(_, c)| *c)
            .collect();
        let k = picked.len() as u64;
        Cost {
            allocs: picked.iter().map(|c| c.allocs).sum::<u64>() / k,
            bytes: picked.iter().map(|c| c.bytes).sum::<u64>() / k,
            body: picked.iter().map(|c| c.body).sum::<u64>() / k,
        }
    };
    let (one, hundred, thousand) = (near(2), near(100), near(990));
    eprintln!("allocations per recorded call: 1: {one:?}, 100: {hundred:?}, 1000: {thousand:?}");
    // As often: the count does not grow with the history.
    assert!(
        thousand.allocs <= hundred.allocs * 3 / 2,
        "allocations per call grow with the history: {hundred:?} → {thousand:?}"
    );
    // At most two copies of the body, plus what does not grow with it.
    let fixed = one.bytes;
    assert!(
        thousand.bytes <= 2 * thousand.body + 2 * fixed,
        "more than two copies of the body: {thousand:?} (fixed {fixed})"
    );
    // And the store reads the last request back whole.
    let nodes = store.timeline(&session, &main).unwrap();
    assert_eq!(nodes.len(), 4 * n);
    assert_eq!(nodes[nodes.len() - 3].payload, last);
}
