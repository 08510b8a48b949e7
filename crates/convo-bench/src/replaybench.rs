//! The replay decision at the 200th call of a conversation: a received
//! request looked up among 200 calls recorded in a store, each repeating
//! the conversation so far (a coding agent's: tool calls and results of
//! about 1 KiB, a subagent's result naming its id and duration), as the
//! proxy decides it ([`Replay::take_sent`]: by the bytes, else in parts,
//! each message read once; [`Replay::take`] only when neither can tell). Measured for the bytes sent as
//! recorded, for the same request written otherwise (members in another
//! order: an exact match of the canonical form), and for one matching only
//! by tolerating volatile differences (another subagent id and duration),
//! against the time to parse the request's JSON alone.

use crate::util::{Result, Row, Scratch, Verdict};
use convo_core::BranchName;
use convo_llm::record::Exchange;
use convo_proxy::replay::{self, Matcher, Replay, ReplaySpec, matching};
use convo_store::Store;
use serde_json::{Map, Value, json};
use std::time::Instant;

const CALLS: usize = 200;
const ROUNDS: usize = 50;
const PATH: &str = "/v1/messages?beta=true";

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

/// Records the calls of one conversation (`CALLS`) in a fresh store.
fn recorded() -> Result<(Scratch, Store)> {
    let dir = Scratch::new("replay")?;
    let mut store = dir.store("")?;
    let ses = store
        .transaction(|l| l.new_session("agent", Some("replay bench"), 0))?
        .id;
    let main = BranchName::main();
    for n in 1..=CALLS {
        let ex = Exchange {
            method: "POST".into(),
            path: PATH.into(),
            request_body: body(n, "ab2b83361b31b8cba", 851).into(),
            status: 200,
            response_body:
                br#"{"type":"message","role":"assistant","content":[{"type":"text","text":"ok"}]}"#
                    .to_vec(),
            ..Exchange::default()
        };
        convo_llm::record::record(&mut store, &ses, &main, &ex)?;
    }
    Ok((dir, store))
}

/// Microseconds of the best of `ROUNDS` decisions of `decide`, each on a
/// replay freshly loaded (a decision marks its call served).
fn decisions(
    store: &mut Store,
    mut decide: impl FnMut(&mut Replay) -> Option<&'static str>,
) -> Result<(f64, &'static str)> {
    let mut best = f64::INFINITY;
    let mut how = "";
    let mut load = f64::INFINITY;
    for _ in 0..ROUNDS / 5 {
        let spec = ReplaySpec::parse("replay bench")?;
        let t = Instant::now();
        let mut r = Replay::load(store, spec)?;
        load = load.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let got = decide(&mut r);
        best = best.min(t.elapsed().as_secs_f64() * 1e6);
        how = got.ok_or("the replay did not answer")?;
    }
    crate::util::note(format!(
        "loading the {CALLS} recorded calls: {:.0} ms",
        load * 1000.0
    ));
    Ok((best, how))
}

/// The proxy's decision: without reading the request whole (by its
/// bytes, else in parts), else read whole; how it matched.
fn decide(r: &mut Replay, body: &[u8]) -> Option<&'static str> {
    let h = Map::new();
    if r.take_sent("POST", PATH, &h, body).is_none() {
        let received = r.received("POST", PATH, &h, body);
        r.take(&received).ok()?;
    }
    r.outcomes().last().map(|o| o.outcome)
}

pub fn replay_decision() -> Result<Vec<Row>> {
    let (_dir, mut store) = recorded()?;
    let same = body(CALLS, "ab2b83361b31b8cba", 851);
    let reordered = {
        let v: Map<String, Value> = serde_json::from_slice(&same)?;
        let flipped: Vec<(String, Value)> = v.into_iter().rev().collect();
        let mut text = String::from("{");
        for (i, (k, v)) in flipped.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            text.push_str(&format!("{}: {v}", Value::from(k.as_str())));
        }
        text.push('}');
        text.into_bytes()
    };
    let other = body(CALLS, "a4186f68a441c1bc9", 1204);
    let parse = best(|| {
        let _ = std::hint::black_box(serde_json::from_slice::<Value>(&same));
    });
    let mut rows = Vec::new();
    for (what, bytes, want) in [
        ("exact, the bytes as recorded", &same, "exact"),
        ("exact, members reordered", &reordered, "exact"),
        ("tolerated", &other, "tolerated"),
    ] {
        let (us, how) = decisions(&mut store, |r| decide(r, bytes))?;
        if how != want {
            return Err(format!("replay decision ({what}): {how}, not {want}").into());
        }
        rows.push(Row::new(
            format!(
                "replay decision at call {CALLS} ({what}, {} KiB request)",
                bytes.len() / 1024
            ),
            format!("{:.3} ms", us / 1000.0),
            format!("{:.3} ms (parse only)", parse / 1000.0),
            format!("{:.1}×", us / parse),
            "≤ 1 ms",
            Verdict::of(us <= 1000.0),
        ));
    }
    parts(&same)?;
    Ok(rows)
}

/// What the decision by the canonical form costs, part by part (a note).
fn parts(same: &[u8]) -> Result<()> {
    let m = Matcher::default();
    let h = Map::new();
    let canon = |b: &[u8]| m.canonical("POST", PATH, &h, b);
    let c = canon(same);
    let canonical = best(|| {
        let _ = std::hint::black_box(canon(same));
    });
    let keyed = best(|| {
        let _ = std::hint::black_box(matching::key(&c));
    });
    let shaped = best(|| {
        let _ = std::hint::black_box(matching::shape(&c));
    });
    let sent = best(|| {
        let _ = std::hint::black_box(replay::raw_key("POST", PATH, &h, same));
    });
    crate::util::note(format!(
        "of which: digest of the bytes {:.3} ms, canonical form {:.3} ms, its key {:.3} ms, shape {:.3} ms",
        sent / 1000.0,
        canonical / 1000.0,
        keyed / 1000.0,
        shaped / 1000.0,
    ));
    Ok(())
}
