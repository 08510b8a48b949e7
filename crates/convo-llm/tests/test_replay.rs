//! The replay's look-ups agree: a received request answered by its bytes
//! or read in parts ([`Replay::take_sent`]) is answered as the whole
//! canonical form ([`Replay::take`]) would answer it: the first recorded
//! call not yet served with the same canonical form, counted exact, or
//! the same call tolerating the same differences.

use convo_core::BranchName;
use convo_llm::record::{Exchange, record};
use convo_llm::replay::{Replay, ReplaySpec};
use convo_store::Store;
use serde_json::Map;

const PATH: &str = "/v1/chat/completions";

fn exchange(body: &str, answer: &str) -> Exchange {
    Exchange {
        method: "POST".into(),
        path: PATH.into(),
        request_body: body.as_bytes().to_vec().into(),
        status: 200,
        response_body: answer.as_bytes().to_vec(),
        ..Exchange::default()
    }
}

/// Three calls: 0 and 2 are the same request written two ways, 1 another.
fn recorded() -> Store {
    let mut s = Store::open("sqlite::memory:").unwrap();
    let ses = s
        .transaction(|l| l.new_session("app", Some("twice"), 0))
        .unwrap()
        .id;
    let main = BranchName::main();
    for (body, answer) in [
        (
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
            "first",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":"bye"}]}"#,
            "second",
        ),
        (
            r#"{ "messages": [{"content": "hi", "role": "user"}], "model": "m" }"#,
            "third",
        ),
    ] {
        record(&mut s, &ses, &main, &exchange(body, answer)).unwrap();
    }
    s
}

#[test]
fn the_bytes_and_the_canonical_form_pick_the_same_recorded_call() {
    let mut s = recorded();
    let h = Map::new();
    let third = br#"{ "messages": [{"content": "hi", "role": "user"}], "model": "m" }"#;
    let mut by_bytes = Replay::load(&mut s, ReplaySpec::parse("twice").unwrap()).unwrap();
    let mut by_form = Replay::load(&mut s, ReplaySpec::parse("twice").unwrap()).unwrap();
    for round in 0..2 {
        let a = by_bytes.take_sent("POST", PATH, &h, third).unwrap();
        let received = by_form.received("POST", PATH, &h, third);
        let b = by_form.take(&received).unwrap();
        // The first call not yet served with that canonical form: call 0,
        // then call 2, whichever bytes it was recorded with.
        assert_eq!(a.index, [0, 2][round]);
        assert_eq!(a.index, b.index);
        assert_eq!(a.body, b.body);
        assert_eq!(by_bytes.outcomes()[round].call, round as u64 + 1);
        assert_eq!(by_bytes.outcomes()[round].outcome, "exact");
    }
    assert_eq!((by_bytes.exact, by_bytes.tolerated), (2, 0));
    // Every call with that form served: the bytes give nothing, and the
    // canonical form names it a repeat.
    assert!(by_bytes.take_sent("POST", PATH, &h, third).is_none());
    let received = by_bytes.received("POST", PATH, &h, third);
    let miss = by_bytes.take(&received).unwrap_err();
    assert_eq!(miss.repeat_of, Some(2));
    // Bytes never recorded: read in parts, the same call as read whole.
    let other = br#"{"model":"m","messages":[{"role":"user","content":"bye"}] }"#;
    let received = by_form.received("POST", PATH, &h, other);
    assert_eq!(by_form.take(&received).unwrap().index, 1);
    assert_eq!(
        by_bytes.take_sent("POST", PATH, &h, other).unwrap().index,
        1
    );
}

#[test]
fn behaviour_headers_are_part_of_the_bytes_looked_up() {
    let mut s = recorded();
    let mut r = Replay::load(&mut s, ReplaySpec::parse("twice").unwrap()).unwrap();
    let mut h = Map::new();
    h.insert("anthropic-beta".into(), "tools-2".into());
    let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    // A header the recorded call was not sent with: not the same bytes.
    assert!(r.take_sent("POST", PATH, &h, body).is_none());
    assert!(r.take_sent("GET", PATH, &Map::new(), body).is_none());
    assert_eq!(
        r.take_sent("POST", PATH, &Map::new(), body).unwrap().index,
        0
    );
}

/// A coding agent's conversation up to its `n`th tool result; the result
/// of a subagent at step 1 names `agent` and `ms`, step 2's output `out`.
fn agent_call(n: usize, agent: &str, ms: u64, out: &str) -> Vec<u8> {
    let mut messages = vec![serde_json::json!({"role": "user", "content": "fix the build"})];
    for i in 0..n {
        messages.push(serde_json::json!({"role": "assistant", "content": [{"type": "tool_use",
            "id": format!("toolu_{i}"), "name": "Bash", "input": {"command": format!("make {i}")}}]}));
        let result = match i {
            1 => format!("done\nagentId: {agent}\n<usage>duration_ms: {ms}</usage>"),
            2 => out.to_owned(),
            _ => format!("step {i}: ok"),
        };
        messages.push(
            serde_json::json!({"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": format!("toolu_{i}"), "content": result, "cache_control": null}]}),
        );
    }
    serde_json::json!({"model": "claude", "max_tokens": 100, "metadata": {"user_id": agent},
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "tools": [{"name": "Bash"}, {"name": "Task"}], "messages": messages})
    .to_string()
    .into_bytes()
}

/// Each outcome as compared: the recorded call, how, what was tolerated.
fn outcomes(r: &Replay) -> Vec<String> {
    r.outcomes()
        .iter()
        .map(|o| format!("{} {:?} {:?}", o.outcome, o.recorded_call, o.tolerated))
        .collect()
}

#[test]
fn a_request_read_in_parts_matches_as_the_whole_request_does() {
    let mut s = Store::open("sqlite::memory:").unwrap();
    let ses = s
        .transaction(|l| l.new_session("app", Some("agent"), 0))
        .unwrap()
        .id;
    let path = "/v1/messages";
    for n in 1..=6 {
        let mut ex = exchange("", "{}");
        ex.path = path.into();
        ex.request_body = agent_call(n, "ab2b83361b31", 851, "built").into();
        record(&mut s, &ses, &BranchName::main(), &ex).unwrap();
    }
    let reordered = |b: Vec<u8>| {
        let v: Map<String, serde_json::Value> = serde_json::from_slice(&b).unwrap();
        let mut text = String::from("{");
        for (i, (k, v)) in v.into_iter().rev().enumerate() {
            text.push_str(&format!("{}\"{k}\" : {v}", if i > 0 { ", " } else { "" }));
        }
        (text + "}").into_bytes()
    };
    let received: Vec<Vec<u8>> = vec![
        agent_call(1, "ab2b83361b31", 851, "built"),
        agent_call(2, "f00dfeed9876", 1204, "built"),
        reordered(agent_call(3, "f00dfeed9876", 1204, "built")),
        agent_call(3, "f00dfeed9876", 1204, "built"),
        agent_call(4, "f00dfeed9876", 1204, "FAILED"),
        agent_call(4, "ab2b83361b31", 851, "built"),
        agent_call(5, "0123abcd4567", 3, "built"),
        b"not json".to_vec(),
        agent_call(6, "ab2b83361b31", 851, "built"),
    ];
    let h = Map::new();
    let mut parts = Replay::load(&mut s, ReplaySpec::parse("agent").unwrap()).unwrap();
    let mut whole = Replay::load(&mut s, ReplaySpec::parse("agent").unwrap()).unwrap();
    let mut by_parts = 0;
    for body in &received {
        if parts.take_sent("POST", path, &h, body).is_some() {
            by_parts += 1;
        } else {
            let got = parts.received("POST", path, &h, body);
            let _ = parts.take(&got);
        }
        let got = whole.received("POST", path, &h, body);
        let _ = whole.take(&got);
        assert_eq!(
            outcomes(&parts),
            outcomes(&whole),
            "after {}",
            String::from_utf8_lossy(body)
        );
    }
    let all = outcomes(&whole);
    // Exact, tolerated (another subagent), exact reordered (call 2 was
    // served: the tolerated one), a repeat, a changed output missed, …
    assert_eq!(all[0], "exact Some(0) []");
    assert!(all[1].starts_with("tolerated Some(1)"), "{}", all[1]);
    assert!(
        all[1].contains("/body/messages/4/content/0/content"),
        "{}",
        all[1]
    );
    assert!(all[2].starts_with("tolerated Some(2)"), "{}", all[2]);
    assert!(all[4].starts_with("missed"), "{}", all[4]);
    assert_eq!(all[5], "exact Some(3) []");
    assert!(all[6].starts_with("tolerated Some(4)"), "{}", all[6]);
    assert!(all[7].starts_with("missed"), "{}", all[7]);
    assert_eq!(all[8], "exact Some(5) []");
    // Every answer but the repeat and the misses came without reading the
    // request whole.
    assert_eq!(by_parts, 6);
}
