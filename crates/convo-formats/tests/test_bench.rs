//! Benchmarks, ignored in normal runs (figures in docs/PERFORMANCE.md):
//!
//! ```text
//! cargo test -p convo-formats --release --test runner bench -- --ignored --nocapture
//! ```
use convo_formats::convo::{self, Convo};
use convo_formats::ledger::import_all;
use convo_formats::{Conversation, Message, Reader, Role, Writer};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A CONVO file of at least `bytes`, written by convo's writer: turns of
/// prose, lists, code fences holding `### @`, quotes and dashes.
fn big_convo(bytes: usize) -> Vec<u8> {
    let prose = "The *archive* keeps every message of the conversation, with `inline code`, \
                 [links](https://example.com) and **emphasis**, so the parser has real inline work to do. ";
    let mut msgs = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < bytes {
        let mut t = String::new();
        for p in 0..4 {
            t.push_str(&prose.repeat(3));
            t.push_str(&format!("Turn {i}, paragraph {p}.\n\n"));
        }
        t.push_str("- first point\n- second point with `code`\n  continued\n\n");
        t.push_str("```markdown\n### @bob\nnot a delimiter\n```\n\n> ### @bob quoted\n\n----\n\n");
        t.push_str("{\"json\": \"looking\", \"text\": [1, 2, 3]}\n");
        size += t.len() + 12;
        let (who, role) = if i % 2 == 0 {
            ("alice", Role::User)
        } else {
            ("bob", Role::Assistant)
        };
        msgs.push(Message::new(role, who, t));
        i += 1;
    }
    let mut c = Conversation::linear(msgs);
    c.created_at = Some(1_761_238_800_000);
    Convo.write(&c).unwrap()
}

#[test]
#[ignore = "benchmark"]
fn bench_convo_parse_vs_pulldown_cmark() {
    let bytes = big_convo(24 << 20);
    let mb = bytes.len() as f64 / 1e6;
    let text = std::str::from_utf8(&bytes).unwrap();
    let mut bare = Vec::new();
    let mut ours = Vec::new();
    let mut turns = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let n = pulldown_cmark::Parser::new_ext(text, pulldown_cmark::Options::empty())
            .into_offset_iter()
            .count();
        bare.push(t.elapsed());
        assert!(n > 0);
        let t = Instant::now();
        let c = convo::parse("big.convo", &bytes).unwrap();
        ours.push(t.elapsed());
        turns = c.turns().len();
    }
    let (b, o) = (median(bare), median(ours));
    let (bs, os) = (mb / b.as_secs_f64(), mb / o.as_secs_f64());
    println!("convo-parse: {mb:.1} MB, {turns} turns");
    println!(
        "| CONVO parse (convo::parse) | {os:.0} MB/s | pulldown-cmark alone {bs:.0} MB/s | {:.2}x | ≥ 50 MB/s | {} |",
        os / bs,
        if os >= 50.0 { "PASS" } else { "FAIL" }
    );
    if !cfg!(debug_assertions) {
        assert!(os >= 50.0, "{os:.0} MB/s");
    }
    // Writing, for the record.
    let c = convo::parse("big.convo", &bytes).unwrap();
    let t = Instant::now();
    let w = Convo.write(&c).unwrap();
    let wt = t.elapsed();
    assert_eq!(w, bytes);
    println!(
        "| CONVO write (convo::write) | {:.0} MB/s | — | — | — | info |",
        mb / wt.as_secs_f64()
    );
}

#[test]
#[ignore = "benchmark"]
fn bench_import_10000_sharegpt_conversations() {
    let n = 10_000;
    let mut s = String::from("[");
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(
            r#"{{"id":"c{i}","conversations":[{{"from":"system","value":"You are helpful."}},{{"from":"human","value":"Question {i}: what is {i} squared?"}},{{"from":"gpt","value":"{i} squared is {}. Anything else?"}},{{"from":"human","value":"No, thanks."}},{{"from":"gpt","value":"You're welcome!"}}]}}"#,
            i * i
        ));
    }
    s.push(']');
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sharegpt.json");
    std::fs::write(&path, &s).unwrap();
    let t = Instant::now();
    let read = convo_formats::sharegpt::ShareGpt.read_path(&path).unwrap();
    let parse = t.elapsed();
    assert_eq!(read.conversations.len(), n);
    let mut store = convo_store::Store::open(&format!(
        "sqlite://{}",
        dir.path().join("convo.db").display()
    ))
    .unwrap();
    let items: Vec<(&str, &Conversation)> =
        read.conversations.iter().map(|c| ("sharegpt", c)).collect();
    let t = Instant::now();
    let out = import_all(&mut store, &items, None, 0).unwrap();
    let write = t.elapsed();
    assert_eq!(out.len(), n);
    let total = parse + write;
    println!(
        "import: {:.1} MB ShareGPT file, {n} conversations, {} nodes",
        s.len() as f64 / 1e6,
        n * 5
    );
    println!(
        "| import 10,000 ShareGPT conversations (parse + one transaction) | {:.0} conversations/s | parse {:.0} ms, store {:.0} ms | — | — | info |",
        n as f64 / total.as_secs_f64(),
        parse.as_secs_f64() * 1e3,
        write.as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let again = import_all(&mut store, &items, None, 0).unwrap();
    println!(
        "| re-import of the same 10,000 (all existing) | {:.0} conversations/s | — | — | — | info |",
        n as f64 / t.elapsed().as_secs_f64()
    );
    assert!(
        again
            .iter()
            .all(|o| matches!(o, convo_formats::ledger::Outcome::Existing { .. }))
    );
}
