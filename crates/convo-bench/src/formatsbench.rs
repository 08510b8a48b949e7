//! Conversation formats: CONVO parse speed against pulldown-cmark alone on
//! the same text, and importing 10,000 conversations.

use crate::util::{Result, Row, Verdict, thousands};
use convo_formats::convo::{self, Convo};
use convo_formats::{Conversation, Message, Reader, Role, Writer};
use convo_llm::ledger::import_all;
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
    Convo.write(&c).expect("the benchmark text is writable")
}

pub fn formats() -> Result<Vec<Row>> {
    let bytes = big_convo(24 << 20);
    let mb = bytes.len() as f64 / 1e6;
    let text = std::str::from_utf8(&bytes)?;
    let mut bare = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let n = pulldown_cmark::Parser::new_ext(text, pulldown_cmark::Options::empty())
            .into_offset_iter()
            .count();
        bare.push(t.elapsed());
        if n == 0 {
            return Err("pulldown-cmark saw nothing".into());
        }
        let t = Instant::now();
        convo::parse("big.convo", &bytes)?;
        ours.push(t.elapsed());
    }
    let (b, o) = (median(bare), median(ours));
    let (bs, os) = (mb / b.as_secs_f64(), mb / o.as_secs_f64());
    let mut rows = vec![Row::new(
        format!("CONVO parse ({mb:.1} MB)"),
        format!("{os:.0} MB/s"),
        format!("pulldown-cmark alone {bs:.0} MB/s"),
        format!("{:.2}×", os / bs),
        "≥ 50 MB/s",
        Verdict::of(os >= 50.0),
    )];

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
    let dir = crate::util::Scratch::new("formats")?;
    let path = dir.db().with_file_name("sharegpt.json");
    std::fs::write(&path, &s)?;
    let t = Instant::now();
    let read = convo_formats::sharegpt::ShareGpt.read_path(&path)?;
    let parse = t.elapsed();
    let mut store = dir.store("")?;
    let items: Vec<(&str, &Conversation)> =
        read.conversations.iter().map(|c| ("sharegpt", c)).collect();
    let t = Instant::now();
    let out = import_all(&mut store, &items, None, 0)?;
    let write = t.elapsed();
    if out.len() != n {
        return Err("not every conversation was imported".into());
    }
    rows.push(Row::new(
        "import 10,000 ShareGPT conversations (one transaction)",
        format!(
            "{} conversations/s",
            thousands(n as f64 / (parse + write).as_secs_f64())
        ),
        format!(
            "parse {:.0} ms, store {:.0} ms",
            parse.as_secs_f64() * 1e3,
            write.as_secs_f64() * 1e3
        ),
        "—",
        "—",
        Verdict::Info,
    ));
    Ok(rows)
}
