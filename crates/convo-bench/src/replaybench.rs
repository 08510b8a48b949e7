//! The replay decision at the 200th call of a conversation: the received
//! request read into its canonical form and looked up among 200 recorded
//! calls, each repeating the conversation so far (a coding agent's: tool
//! calls and results of about 1 KiB, a subagent's result naming its id and
//! duration). Measured for a call matching exactly and for one matching
//! only by tolerating volatile differences (another subagent id and
//! duration), against the time to parse the request's JSON alone.

use crate::util::{Result, Row, Verdict};
use convo_proxy::replay::{Found, Index, Matcher, Rules};
use serde_json::{Map, Value, json};
use std::time::Instant;

const CALLS: usize = 200;
const ROUNDS: usize = 50;

/// Call `n`'s request body: the conversation up to its `n`th tool result;
/// the subagent's result names `agent` and `ms`.
fn body(n: usize, agent: &str, ms: u64) -> Vec<u8> {
    let mut messages = vec![json!({"role": "user", "content": "please fix the build"})];
    for i in 0..n {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use",
            "id": format!("toolu_{i}"), "name": "Bash", "input": {"command": format!("make step{i}")}}]}));
        let result = if i == 3 {
            format!(
                "done\nagentId: {agent} (use SendMessage with to: '{agent}')\n<usage>duration_ms: {ms}</usage>"
            )
        } else {
            format!("step {i} output: {}", "ok ".repeat(300))
        };
        messages.push(json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": format!("toolu_{i}"), "content": result}]}));
    }
    json!({"model": "claude-opus-5-5", "max_tokens": 32000, "stream": true,
        "system": [{"type": "text", "text": "You are a coding agent. ".repeat(200)}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}, {"name": "Agent", "input_schema": {"type": "object"}}],
        "messages": messages})
    .to_string()
    .into_bytes()
}

/// Microseconds per call of `f`, the best of `ROUNDS` runs.
fn best(mut f: impl FnMut()) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn replay_decision() -> Result<Vec<Row>> {
    let m = Matcher::default();
    let h = Map::new();
    let canon = |b: &[u8]| m.canonical("POST", "/v1/messages?beta=true", &h, b);
    let recorded: Vec<Value> = (1..=CALLS)
        .map(|n| canon(&body(n, "ab2b83361b31b8cba", 851)))
        .collect();
    let index = Index::new(recorded, Rules::default(), false);
    let mut served = vec![true; CALLS];
    served[CALLS - 1] = false;
    let same = body(CALLS, "ab2b83361b31b8cba", 851);
    let other = body(CALLS, "a4186f68a441c1bc9", 1204);
    let bytes = same.len();
    let mut found = Vec::new();
    let exact = best(|| found.push(index.find(&canon(&same), &served)));
    let tolerated = best(|| found.push(index.find(&canon(&other), &served)));
    let parse = best(|| {
        let _ = std::hint::black_box(serde_json::from_slice::<Value>(&same));
    });
    let c = canon(&same);
    let canonical = best(|| {
        let _ = std::hint::black_box(canon(&same));
    });
    let keyed = best(|| {
        let _ = std::hint::black_box(convo_proxy::replay::matching::key(&c));
    });
    let shaped = best(|| {
        let _ = std::hint::black_box(convo_proxy::replay::matching::shape(&c));
    });
    let looked = best(|| {
        let _ = std::hint::black_box(index.find(&c, &served));
    });
    crate::util::note(format!(
        "of which: canonical form {:.3} ms, key {:.3} ms, shape {:.3} ms, lookup from the canonical form {:.3} ms",
        canonical / 1000.0,
        keyed / 1000.0,
        shaped / 1000.0,
        looked / 1000.0
    ));
    if !matches!(found.first(), Some(Found::Exact(_)))
        || !matches!(found.last(), Some(Found::Tolerated { .. }))
    {
        return Err(format!("the replay did not decide as expected: {:?}", found.last()).into());
    }
    let row = |what: &str, us: f64| {
        Row::new(
            format!(
                "replay decision at call {CALLS} ({what}, {} KiB request)",
                bytes / 1024
            ),
            format!("{:.3} ms", us / 1000.0),
            format!("{:.3} ms (parse only)", parse / 1000.0),
            format!("{:.1}×", us / parse),
            "≤ 1 ms",
            Verdict::of(us <= 1000.0),
        )
    };
    Ok(vec![row("exact", exact), row("tolerated", tolerated)])
}
