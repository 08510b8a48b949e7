//! Property tests: write → read is the identity on turns, and no input
//! makes a reader panic (a bounded, proptest-driven fuzz of every reader).
use convo_formats::convo::{self, Convo};
use convo_formats::{Conversation, Message, Reader, Role, Writer};
use proptest::prelude::*;

/// Lines chosen to hit every CommonMark construct that could hide, fake
/// or swallow a delimiter, mixed with arbitrary text.
fn line() -> impl Strategy<Value = String> {
    let tricky = prop::sample::select(vec![
        "### @bob",
        "### @alice",
        "### @",
        "  ###\t@bob ##",
        "###@bob",
        "\\#\\#\\# @bob",
        "\\\\#\\#\\# @bob",
        "  \\#\\#\\#  @x",
        "```",
        "~~~",
        "````rust",
        "    ### @bob",
        "> ### @bob",
        "- ### @bob",
        "1. ### @bob",
        "<!-- open",
        "-->",
        "<div>",
        "<custom-tag>",
        "<script>",
        "</script>",
        "<pre>",
        "<?php",
        "<![CDATA[",
        "<!DOCTYPE html>",
        "----",
        "---",
        "===",
        "{\"type\": \"dialog\", \"participants\": []}",
        "}",
        "",
        "   ",
        "trailing spaces   ",
        "### heading",
        "# h1",
        "* * *",
        "\t\tindented",
        "[ref]: /url",
        "Ünïcödé 名前 🌟",
    ])
    .prop_map(str::to_owned);
    prop_oneof![
        6 => tricky,
        2 => "[ -~]{0,24}",
        1 => "\\PC{0,12}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(
            (line(), prop::sample::select(vec!["\n", "\n", "\r\n", "\r"])),
            0..8,
        ),
        any::<bool>(),
    )
        .prop_map(|(lines, trailing)| {
            let mut s = String::new();
            let n = lines.len();
            for (i, (l, end)) in lines.into_iter().enumerate() {
                s.push_str(&l);
                if i + 1 < n || trailing {
                    s.push_str(end);
                }
            }
            s
        })
}

/// (name, generative)
const PEOPLE: &[(&str, bool)] = &[
    ("alice", false),
    ("Bob", true),
    ("Ünïcödé Name", false),
    ("名前", true),
    ("C#", false),
    ("émile-2", true),
];

fn conversation() -> impl Strategy<Value = Conversation> {
    prop::collection::vec((0..PEOPLE.len(), text()), 0..6).prop_map(|turns| {
        let msgs = turns
            .into_iter()
            .map(|(p, t)| {
                let (name, generative) = PEOPLE[p];
                let role = if generative {
                    Role::Assistant
                } else {
                    Role::User
                };
                Message::new(role, name, t)
            })
            .collect();
        let mut c = Conversation::linear(msgs);
        c.created_at = Some(1_761_238_800_000);
        c
    })
}

fn has_bare_cr(t: &str) -> bool {
    t.as_bytes()
        .iter()
        .enumerate()
        .any(|(i, &b)| b == b'\r' && t.as_bytes().get(i + 1) != Some(&b'\n'))
}

fn turns(c: &Conversation) -> Vec<(String, String, Role)> {
    c.turns()
        .iter()
        .map(|m| (m.speaker.clone(), m.text.clone(), m.role))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn write_then_read_gives_back_every_turn(c in conversation()) {
        let w = match Convo.write(&c) {
            Ok(w) => w,
            // The writer may refuse (never mis-write) a text that
            // pulldown-cmark cannot close, which takes a lone CR.
            Err(e) if e.rule == "cannot-encode" => {
                prop_assert!(c.turns().iter().any(|m| has_bare_cr(&m.text)), "refused: {}", e);
                return Ok(());
            }
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let back = convo::parse("w.convo", &w)
            .map_err(|e| TestCaseError::fail(format!("{e}\n--- written:\n{}", String::from_utf8_lossy(&w))))?;
        prop_assert_eq!(turns(&c), turns(&back), "written:\n{}", String::from_utf8_lossy(&w));
        // And writing again is a fixpoint.
        prop_assert_eq!(Convo.write(&back).map_err(|e| TestCaseError::fail(e.to_string()))?, w);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Fuzz: arbitrary text made of the tricky lines, with or without a
    /// metadata block, never panics the CONVO reader.
    #[test]
    fn convo_reader_never_panics_on_text(body in text(), tail in prop::sample::select(vec![
        "",
        "\n\n----\n{\"type\":\"d\",\"time\":\"2025-10-23\",\"participants\":[\"bob\"]}",
        "\n\n----\n{\"type\":\"d\",\"time\":\"2025-10-23T01:00:00+01:00[Europe/Paris]\",\"participants\":[\"bob\",{\"name\":\"alice\"}],\"convo:closers\":[{\"turn\":0,\"append\":\"x\"}]}",
        "\n----\n{",
        "\n\n----\n[]",
    ])) {
        let input = format!("{body}{tail}");
        let _ = convo::parse("fuzz", input.as_bytes());
    }

    /// Fuzz: arbitrary bytes never panic any reader.
    #[test]
    fn readers_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        for f in ["convo", "clog", "session-json", "chatgpt", "claude", "sharegpt", "openai"] {
            let _ = convo_formats::reader(f).unwrap().read_bytes("fuzz", &bytes);
        }
    }

    /// Fuzz: JSON-shaped garbage (the kind that gets past the tokenizer)
    /// never panics the JSON readers.
    #[test]
    fn json_readers_never_panic_on_json(v in json_value()) {
        let s = v.to_string();
        for f in ["clog", "session-json", "chatgpt", "claude", "sharegpt", "openai"] {
            let _ = convo_formats::reader(f).unwrap().read_bytes("fuzz", s.as_bytes());
            let wrapped = format!("[{s}]");
            let _ = convo_formats::reader(f).unwrap().read_bytes("fuzz", wrapped.as_bytes());
        }
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::{Value, json};
    let key = prop::sample::select(vec![
        "mapping",
        "message",
        "author",
        "role",
        "content",
        "parts",
        "children",
        "parent",
        "current_node",
        "chat_messages",
        "sender",
        "text",
        "conversations",
        "from",
        "value",
        "messages",
        "history",
        "user",
        "agent",
        "session",
        "type",
        "createdAt",
        "open",
        "content_type",
        "tool_calls",
        "attachments",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        prop::sample::select(vec![
            "user",
            "assistant",
            "human",
            "gpt",
            "system",
            "tool",
            "text",
            "x",
            "conversation-header",
            "message"
        ])
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..5).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
            }),
        ]
    })
}

#[test]
fn empty_conversation_round_trips() {
    let c = Conversation::linear(Vec::new());
    let w = Convo.write(&c).unwrap();
    let back = convo::parse("empty", &w).unwrap();
    assert!(back.turns().is_empty());
    let _ = Convo.read_bytes("x", &w).unwrap();
}
