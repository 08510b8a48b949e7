//! Hostile input: every reader answers with an error naming the file and
//! a line or JSON path, never a panic, in bounded time and memory.
use crate::common::parse_err;
use convo_formats::Reader;

const JSON_FORMATS: &[&str] = &[
    "chatgpt",
    "claude",
    "sharegpt",
    "session-json",
    "openai",
    "clog",
];

fn deep(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 * n);
    v.extend(std::iter::repeat_n(b'[', n));
    v.extend(std::iter::repeat_n(b']', n));
    v
}

#[test]
fn json_nested_100000_deep_is_a_clear_error() {
    let d = deep(100_000);
    for f in JSON_FORMATS {
        let e = parse_err(f, &d);
        assert!(
            e.rule == "json-too-deep" || e.rule == "wrong-type",
            "{f}: {e}"
        );
        assert!(e.location.is_some(), "{f}: {e}");
    }
    // The same inside an object the readers expect.
    let mut obj =
        b"[{\"mapping\": {\"a\": {\"message\": {\"author\": {\"role\": \"user\"}, \"content\": "
            .to_vec();
    obj.extend(deep(100_000));
    obj.extend(b"}}}}]");
    let e = parse_err("chatgpt", &obj);
    assert_eq!(e.rule, "json-too-deep", "{e}");
    assert!(e.render().contains("128 levels"), "{e}");
    // And in a CONVO metadata block.
    let mut c = b"### @a\nx\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\", \"participants\": [\"a\"], \"x\": ".to_vec();
    c.extend(deep(100_000));
    c.push(b'}');
    let e = parse_err("convo", &c);
    assert!(
        e.rule.starts_with("json") || e.rule.starts_with("metadata"),
        "{e}"
    );
    assert_eq!(e.location.unwrap().line, 5, "{e}");
}

#[test]
fn truncated_json_names_file_line_and_column() {
    let full = std::fs::read(crate::common::fixture("chatgpt_conversations.json")).unwrap();
    let cut = &full[..full.len() / 2];
    let e = parse_err("chatgpt", cut);
    assert_eq!(e.rule, "json-truncated", "{e}");
    let r = e.render();
    assert!(r.starts_with("input:"), "{r}");
    assert!(e.location.unwrap().line > 10, "{r}");
}

#[test]
fn wrong_types_name_the_json_path() {
    let e = parse_err(
        "chatgpt",
        br#"[{"mapping": {"n1": {"message": {"author": {"role": 7}}}}}]"#,
    );
    assert_eq!(e.rule, "wrong-type");
    assert_eq!(
        e.path.as_deref(),
        Some("$[0].mapping.n1.message.author.role"),
        "{e}"
    );
    assert!(e.message.contains("expected a string"), "{e}");
    let e = parse_err("claude", br#"[{"chat_messages": "nope"}]"#);
    assert_eq!(e.path.as_deref(), Some("$[0].chat_messages"), "{e}");
    let e = parse_err(
        "sharegpt",
        br#"[{"conversations": [{"from": "martian", "value": "hi"}]}]"#,
    );
    assert_eq!(e.rule, "unknown-speaker");
    assert_eq!(e.path.as_deref(), Some("$[0].conversations[0].from"));
    let e = parse_err(
        "session-json",
        br#"{"session": "s", "agent": "a", "history": [{"user": 5}]}"#,
    );
    assert_eq!(e.path.as_deref(), Some("$.history[0].user"), "{e}");
    let e = parse_err(
        "openai",
        b"{\"messages\": []}\n{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}\n",
    );
    assert_eq!(e.location.unwrap().line, 2, "{e}");
    assert_eq!(e.path.as_deref(), Some("$.messages[0].role"), "{e}");
    let e = parse_err("clog", b"{\"type\":\"conversation-header\"}\n{\"type\":\"message\",\"role\":\"user\",\"content\":3}\n");
    assert_eq!(e.location.unwrap().line, 2, "{e}");
}

#[test]
fn binary_garbage_is_refused_by_every_reader() {
    let mut g = Vec::new();
    let mut x: u32 = 0x1234_5678;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        g.push((x & 0xff) as u8);
    }
    for f in std::iter::once("convo").chain(JSON_FORMATS.iter().copied()) {
        let e = parse_err(f, &g);
        assert!(!e.message.is_empty(), "{f}");
        assert!(e.render().starts_with("input"), "{f}: {e}");
    }
}

#[test]
fn a_large_garbage_file_fails_fast_and_the_size_limit_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.json");
    // 40 MB of a valid-looking array whose last element is wrong.
    let mut s = String::with_capacity(40 << 20);
    s.push('[');
    let item = r#"{"conversations": [{"from": "human", "value": "lorem ipsum dolor sit amet lorem ipsum dolor sit amet"}]},"#;
    while s.len() < 40 << 20 {
        s.push_str(item);
    }
    s.push_str("{\"conversations\": 5}]");
    std::fs::write(&p, &s).unwrap();
    let e = convo_formats::sharegpt::ShareGpt.read_path(&p).unwrap_err();
    assert_eq!(e.rule, "wrong-type", "{e}");
    assert!(
        e.path.as_deref().unwrap_or("").ends_with(".conversations"),
        "{e}"
    );
    assert!(e.file.ends_with("big.json"));
    let e = convo_formats::read_file(&p, 1 << 20).unwrap_err();
    assert_eq!(e.rule, "too-large");
    assert!(e.message.contains("40 MiB"), "{e}");
}

#[test]
fn llm_reader_refuses_a_file_that_is_not_its_database() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("logs.db");
    std::fs::write(&p, b"SQLite format 3\0 but then garbage, garbage, garbage").unwrap();
    let e = convo_formats::llm::Llm.read_path(&p).unwrap_err();
    assert_eq!(e.rule, "sqlite", "{e}");
    let q = dir.path().join("other.db");
    rusqlite::Connection::open(&q)
        .unwrap()
        .execute_batch("CREATE TABLE t(x)")
        .unwrap();
    let e = convo_formats::llm::Llm.read_path(&q).unwrap_err();
    assert_eq!(e.rule, "llm-schema", "{e}");
}

#[test]
fn pathological_convo_text_is_read_and_written_exactly() {
    use convo_formats::convo::{self, Convo};
    use convo_formats::{Conversation, Message, Role, Writer};
    // One 4 MB line full of escape look-alikes, read.
    let mut s = String::from("### @a\n");
    s.push_str(&"\\#\\#\\# @x ".repeat(400_000));
    s.push_str(
        "\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\", \"participants\": [\"a\"]}\n",
    );
    let c = convo::parse("long-line", s.as_bytes()).unwrap();
    assert_eq!(c.turns().len(), 1);
    // A text where each escape reveals the next delimiter: refused or
    // written quickly, never mis-written.
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(&format!("### @b{i}\n<x-tag>\n"));
    }
    let c = Conversation::linear(vec![Message::new(Role::User, "a", text.clone())]);
    match Convo.write(&c) {
        Ok(w) => assert_eq!(convo::parse("w", &w).unwrap().turns()[0].text, text),
        Err(e) => assert_eq!(e.rule, "cannot-encode"),
    }
}

/// A clog conversation whose header carries `id` as `key`.
fn clog_with(key: &str, id: &str) -> convo_formats::Conversation {
    let header = serde_json::json!({"type": "conversation-header", "schemaVersion": 1,
        "fileKind": "chat", key: id, "channel": "tui", "createdAt": 1774402340418i64});
    let msg = serde_json::json!({"type": "message", "messageId": "m1", "role": "user",
        "content": "hi", "createdAt": 1774402350000i64});
    let bytes = format!("{header}\n{msg}\n");
    let mut r = convo_formats::reader("clog")
        .unwrap()
        .read_bytes("chat.jsonl", bytes.as_bytes())
        .unwrap();
    r.conversations.remove(0)
}

#[test]
fn regression_clog_thread_id_cannot_escape_the_export_folder() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("a").join("b").join("out");
    let c = clog_with("threadId", "../../../../x");
    let written = convo_formats::clog::write_folder(&c, &out).unwrap();
    assert_eq!(
        written.parent(),
        Some(out.as_path()),
        "{}",
        written.display()
    );
    assert!(!root.path().join("x").exists() && !root.path().join("a").join("x").exists());
    let chat = std::fs::read_to_string(written.join("chat.jsonl")).unwrap();
    assert!(
        chat.contains("\"threadId\":\"../../../../x\""),
        "kept verbatim: {chat}"
    );
}

#[test]
fn regression_clog_conversation_id_dot_git_is_not_written_as_dot_git() {
    for id in [
        ".git",
        "..",
        ".",
        "a/b",
        "..\\..\\x",
        "/etc/passwd",
        "NUL",
        "",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let c = clog_with("conversationId", id);
        let written = convo_formats::clog::write_folder(&c, dir.path()).unwrap();
        assert_eq!(written.parent(), Some(dir.path()), "{id:?}");
        let name = written.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(convo_core::text::is_component(&name), "{id:?} -> {name}");
        assert!(!dir.path().join(".git").exists(), "{id:?}");
        // Read back, the conversation keeps its id.
        let back = convo_formats::reader("clog")
            .unwrap()
            .read_path(&written)
            .unwrap();
        if !id.is_empty() {
            assert_eq!(back.conversations[0].id.as_deref(), Some(id), "{id:?}");
        }
    }
}

#[test]
fn chatgpt_parent_cycles_and_dangling_parents_are_errors_naming_the_ids() {
    let conv = |mapping: serde_json::Value| {
        serde_json::to_vec(&serde_json::json!([{"title": "t", "mapping": mapping}])).unwrap()
    };
    let msg = |t: &str| serde_json::json!({"author": {"role": "user"}, "content": {"content_type": "text", "parts": [t]}});
    // Two nodes pointing at each other: no root.
    let e = parse_err(
        "chatgpt",
        &conv(serde_json::json!({
            "a": {"message": msg("x"), "parent": "b", "children": ["b"]},
            "b": {"message": msg("y"), "parent": "a", "children": ["a"]}})),
    );
    assert_eq!(e.rule, "parent-cycle", "{e}");
    assert!(
        e.message.contains("\"a\"") && e.message.contains("\"b\""),
        "{e}"
    );
    // A self-parent.
    let e = parse_err(
        "chatgpt",
        &conv(serde_json::json!({"s": {"message": msg("x"), "parent": "s", "children": []}})),
    );
    assert_eq!(e.rule, "parent-cycle", "{e}");
    assert!(e.message.contains("\"s\""), "{e}");
    // A parent that is not there.
    let e = parse_err(
        "chatgpt",
        &conv(serde_json::json!({"r": {"message": msg("x"), "parent": "gone", "children": []}})),
    );
    assert_eq!(e.rule, "parent-dangling", "{e}");
    assert!(
        e.message.contains("\"r\"") && e.message.contains("\"gone\""),
        "{e}"
    );
    // A node its parent does not list: it would be silently dropped.
    let e = parse_err(
        "chatgpt",
        &conv(serde_json::json!({
            "r": {"message": msg("x"), "parent": null, "children": []},
            "c": {"message": msg("y"), "parent": "r", "children": []}})),
    );
    assert_eq!(e.rule, "child-missing", "{e}");
    assert!(e.message.contains("\"c\""), "{e}");
}

#[test]
fn claude_parent_cycles_and_dangling_parents_are_errors_naming_the_ids() {
    let conv = |msgs: serde_json::Value| {
        serde_json::to_vec(&serde_json::json!([{"uuid": "c", "name": "n", "chat_messages": msgs}]))
            .unwrap()
    };
    let m = |u: &str, p: &str, who: &str| serde_json::json!({"uuid": u, "parent_message_uuid": p, "sender": who, "text": u});
    // The reported case: m1 -> m2 -> m1, and m3 under m1.
    let e = parse_err(
        "claude",
        &conv(serde_json::json!([
            m("m1", "m2", "human"),
            m("m2", "m1", "assistant"),
            m("m3", "m1", "human")
        ])),
    );
    assert_eq!(e.rule, "parent-cycle", "{e}");
    assert!(e.message.contains("m1") && e.message.contains("m2"), "{e}");
    let e = parse_err("claude", &conv(serde_json::json!([m("m1", "m1", "human")])));
    assert_eq!(e.rule, "parent-cycle", "{e}");
    let e = parse_err(
        "claude",
        &conv(serde_json::json!([
            m("m1", "00000000-0000-4000-8000-000000000000", "human"),
            m("m2", "nope", "assistant")
        ])),
    );
    assert_eq!(e.rule, "parent-dangling", "{e}");
    assert!(
        e.message.contains("m2") && e.message.contains("nope"),
        "{e}"
    );
    // Claude's root marker is a root; a parent after its child is fine.
    let ok = convo_formats::reader("claude")
        .unwrap()
        .read_bytes(
            "x",
            &conv(serde_json::json!([
                m("a2", "q1", "assistant"),
                m("q1", "00000000-0000-4000-8000-000000000000", "human")
            ])),
        )
        .unwrap();
    let c = &ok.conversations[0];
    let texts: Vec<&str> = c
        .timeline_messages(0)
        .iter()
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(texts, ["q1", "a2"]);
}

#[test]
fn duplicate_json_keys_are_errors_in_every_json_format() {
    let cases: &[(&str, &str)] = &[
        (
            "openai",
            r#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#,
        ),
        ("chatgpt", r#"[{"title":"t","title":"u","mapping":{}}]"#),
        (
            "chatgpt",
            r#"[{"mapping":{"a":{"parent":null,"children":[]},"a":{"parent":null,"children":[]}}}]"#,
        ),
        (
            "claude",
            r#"[{"uuid":"c","chat_messages":[{"uuid":"m","sender":"human","text":"x","extra":{"k":1,"k":2}}]}]"#,
        ),
        (
            "sharegpt",
            r#"[{"conversations":[{"from":"human","value":"a","value":"b"}]}]"#,
        ),
        ("session-json", r#"{"open":true,"open":false}"#),
        (
            "clog",
            "{\"type\":\"conversation-header\",\"type\":\"x\"}\n",
        ),
    ];
    for (f, text) in cases {
        let e = parse_err(f, text.as_bytes());
        assert_eq!(e.rule, "json-duplicate-key", "{f}: {e}");
    }
    let e = parse_err(
        "convo",
        b"### @a\nhi\n\n----\n{\"type\": \"d\", \"time\": \"2025-10-23\", \"type\": \"e\", \"participants\": [\"a\"]}\n",
    );
    assert_eq!(e.rule, "json-duplicate-key", "{e}");
}
