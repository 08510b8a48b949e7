use crate::common::{fixture, one, read, texts};
use convo_formats::{Reader, Role, Writer};

#[test]
fn chatgpt_tree_gives_main_along_current_node_and_forks_for_other_leaves() {
    let c = one("chatgpt", "chatgpt_conversations.json");
    assert_eq!(
        c.id.as_deref(),
        Some("6f1c2a00-0000-4000-8000-000000000001")
    );
    assert_eq!(c.title.as_deref(), Some("Paris trip"));
    assert_eq!(c.created_at, Some(1_700_000_000_123));
    let names: Vec<&str> = c.timelines.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["main", "alt-1", "alt-2"]);
    let main = c.timeline_messages(0);
    let roles: Vec<Role> = main.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::Assistant,
            Role::ToolCall,
            Role::Tool,
            Role::Assistant
        ],
        "empty hidden system root skipped; custom instructions kept as system"
    );
    assert_eq!(main[0].text, "I live in Lyon.\n\nAnswer briefly.");
    assert_eq!(main[0].extra["hidden"], true);
    assert_eq!(main[2].text, "Planning\n\nList landmarks, keep it short.");
    assert_eq!(main[2].extra["content_type"], "thoughts");
    assert_eq!(main[3].text, "Thought for 2 seconds");
    assert_eq!(main[4].to.as_deref(), Some("web"));
    assert_eq!(main[5].speaker, "web");
    assert_eq!(main[6].model.as_deref(), Some("o3"));
    // alt-1: the regeneration; alt-2: the edited first question.
    let alt1 = c.timeline_messages(1);
    assert_eq!(alt1.last().unwrap().text, "Start with the Eiffel Tower.");
    assert_eq!(alt1.len(), 3, "shares system and question with main");
    let alt2 = c.timeline_messages(2);
    assert_eq!(
        alt2[1].text, "What is this building?",
        "audio transcription is text"
    );
    assert!(alt2[1].extra.contains_key("content"), "image part kept");
    assert_eq!(alt2[2].text, "That is the Panthéon.");
    assert_eq!(alt2[2].model.as_deref(), Some("gpt-4o"), "default model");
}

#[test]
fn claude_export_keeps_thinking_and_attachment_text() {
    let c = one("claude", "claude_conversations.json");
    assert_eq!(c.title.as_deref(), Some("Budget review"));
    let t = c.turns();
    assert_eq!(t[0].role, Role::User);
    assert_eq!(
        t[0].extra["attachments"][0]["extracted_content"],
        "item,cost\nrent,1200\nfood,400"
    );
    assert_eq!(t[1].role, Role::Assistant);
    assert_eq!(t[1].text, "Rent (1200) is three times food (400).");
    assert_eq!(t[1].extra["thinking"], "Two rows; rent dominates.");
    let md = String::from_utf8(convo_formats::markdown::Markdown.write(&c).unwrap()).unwrap();
    assert!(md.contains("rent,1200"), "attachment text exported:\n{md}");
}

#[test]
fn sharegpt_ids_roles_and_system() {
    let r = read("sharegpt", "sharegpt.json");
    assert_eq!(r.conversations.len(), 2);
    let a = &r.conversations[0];
    assert_eq!(a.id.as_deref(), Some("sg-1"));
    assert_eq!(a.turns()[0].role, Role::System);
    assert_eq!(a.turns()[2].speaker, "gpt");
    assert_eq!(r.conversations[1].id.as_deref(), Some("2"));
    assert_eq!(
        texts(&r.conversations[1]),
        ["2+2?", "4", "And times 3?", "12"]
    );
    // JSON Lines and a single object work too.
    let jl = b"{\"conversations\":[{\"from\":\"human\",\"value\":\"a\"}]}\n{\"conversations\":[{\"from\":\"gpt\",\"value\":\"b\"}]}\n";
    let r = convo_formats::sharegpt::ShareGpt
        .read_bytes("x.jsonl", jl)
        .unwrap();
    assert_eq!(r.conversations.len(), 2);
}

#[test]
fn openai_jsonl_keeps_tool_calls_and_round_trips() {
    let r = read("openai", "openai.jsonl");
    assert_eq!(r.conversations.len(), 2, "blank lines skipped");
    let c = &r.conversations[0];
    let t = c.turns();
    assert_eq!(t[2].role, Role::ToolCall);
    assert_eq!(t[2].to.as_deref(), Some("weather"));
    assert_eq!(t[3].role, Role::Tool);
    assert_eq!(t[3].extra["tool_call_id"], "call_1");
    let w = convo_formats::openai::OpenAi.write(c).unwrap();
    let line: serde_json::Value = serde_json::from_slice(&w).unwrap();
    let orig: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(fixture("openai.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(line, orig, "the line comes back as it was");
    assert_eq!(r.conversations[1].turns()[0].text, "Describe");
}

#[test]
fn session_json_reads_the_seed_and_writes_it_back() {
    let c = one("session-json", "session.json");
    assert_eq!(c.agent.as_deref(), Some("researcher"));
    assert_eq!(c.turns().len(), 3, "open input already in history");
    assert_eq!(c.turns()[0].time, Some(1_770_561_005_000));
    let w = convo_formats::session_json::SessionJson.write(&c).unwrap();
    let a: serde_json::Value = serde_json::from_slice(&w).unwrap();
    let b: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("session.json")).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn clog_folder_of_conversations_reads_all_with_notes() {
    let r = read("clog", "storage/conversations");
    assert_eq!(r.conversations.len(), 2);
    let c = &r.conversations[0];
    assert_eq!(
        c.id.as_deref(),
        Some("conversation-2026-03-26T01-32-20-418Z-thread_abc123")
    );
    assert_eq!(c.title.as_deref(), Some("Operator Conversation"));
    let t = c.turns();
    assert_eq!(t[0].role, Role::System);
    assert_eq!(t[2].role, Role::Assistant);
    assert_eq!(t[2].extra["reasoning"], "Scanned today's system.log.");
    assert_eq!(t[2].extra["thoughts"][1], "summarise");
    assert_eq!(c.meta["notes"][0]["author"], "model");
    // Also from `storage/` and from one conversation folder.
    assert_eq!(read("clog", "storage").conversations.len(), 2);
    // Written back, the folder has the same records.
    let dir = tempfile::tempdir().unwrap();
    let out = convo_formats::clog::write_folder(c, dir.path()).unwrap();
    assert_eq!(
        out.file_name().unwrap(),
        "conversation-2026-03-26T01-32-20-418Z-thread_abc123"
    );
    let src = fixture("storage/conversations/conversation-2026-03-26T01-32-20-418Z-thread_abc123");
    for f in ["chat.jsonl", "notes.jsonl"] {
        let parse = |p: std::path::PathBuf| -> Vec<serde_json::Value> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let (a, b) = (parse(out.join(f)), parse(src.join(f)));
        if f == "chat.jsonl" {
            assert_eq!(a[1..], b[1..], "{f} messages");
        } else {
            assert_eq!(a[1..], b[1..], "{f} notes");
        }
    }
    assert!(
        convo_formats::clog::write_folder(c, dir.path()).is_err(),
        "no overwrite"
    );
}

#[test]
fn detect_guesses_every_fixture() {
    for (name, want) in [
        ("seed_example.convo", "convo"),
        ("chatgpt_conversations.json", "chatgpt"),
        ("claude_conversations.json", "claude"),
        ("sharegpt.json", "sharegpt"),
        ("openai.jsonl", "openai"),
        ("session.json", "session-json"),
        ("storage/conversations", "clog"),
        ("storage", "clog"),
    ] {
        assert_eq!(
            convo_formats::detect(&fixture(name)).unwrap(),
            want,
            "{name}"
        );
    }
}

#[test]
fn html_is_one_page_with_everything_escaped() {
    let c = convo_formats::Conversation::linear(vec![convo_formats::Message::new(
        Role::User,
        "<b>eve</b>",
        "<script>alert('x')</script> & \"q\"",
    )]);
    let h = String::from_utf8(convo_formats::html::Html.write(&c).unwrap()).unwrap();
    assert!(h.starts_with("<!DOCTYPE html>"));
    assert!(!h.contains("<script>"), "{h}");
    assert!(!h.contains("<b>eve"), "{h}");
    assert!(h.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"));
    assert!(!h.contains("src="), "nothing loaded from outside");
    assert!(!h.contains("href="), "nothing linked");
}
