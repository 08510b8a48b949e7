//! `llm` log databases, created here with the schemas llm itself creates.
use convo_formats::{Reader, Role};
use rusqlite::Connection;

/// The tables llm created before 0.32 (migrations m010 … m021), with data.
fn legacy(conn: &Connection) {
    conn.execute_batch(
        r#"
        CREATE TABLE [conversations] ([id] TEXT PRIMARY KEY, [name] TEXT, [model] TEXT);
        CREATE TABLE [responses] (
            [id] TEXT PRIMARY KEY, [model] TEXT, [prompt] TEXT, [system] TEXT, [prompt_json] TEXT,
            [options_json] TEXT, [response] TEXT, [response_json] TEXT,
            [conversation_id] TEXT REFERENCES [conversations]([id]), [duration_ms] INTEGER,
            [datetime_utc] TEXT, [input_tokens] INTEGER, [output_tokens] INTEGER, [token_details] TEXT,
            [schema_id] TEXT, [resolved_model] TEXT);
        CREATE TABLE [tool_calls] ([id] INTEGER PRIMARY KEY, [response_id] TEXT, [tool_id] INTEGER,
            [name] TEXT, [arguments] TEXT, [tool_call_id] TEXT);
        CREATE TABLE [tool_results] ([id] INTEGER PRIMARY KEY, [response_id] TEXT, [tool_id] INTEGER,
            [name] TEXT, [output] TEXT, [tool_call_id] TEXT, [instance_id] INTEGER, [exception] TEXT);
        INSERT INTO conversations VALUES ('01j0conv', 'Name ten pelicans', 'gpt-4o-mini');
        INSERT INTO responses (id, model, prompt, system, response, conversation_id, duration_ms, datetime_utc, input_tokens, output_tokens)
          VALUES ('01j0r1', 'gpt-4o-mini', 'Name ten pelicans', 'Be terse.', 'Brown, white, …', '01j0conv', 900, '2024-11-01T10:00:00.000000', 12, 30);
        INSERT INTO responses (id, model, prompt, system, response, conversation_id, duration_ms, datetime_utc)
          VALUES ('01j0r2', 'gpt-4o-mini', 'What time is it?', 'Be terse.', '', '01j0conv', 300, '2024-11-01T10:01:00.000000');
        INSERT INTO tool_calls (response_id, name, arguments, tool_call_id) VALUES ('01j0r2', 'llm_time', '{}', 'call_9');
        INSERT INTO responses (id, model, prompt, system, response, conversation_id, duration_ms, datetime_utc)
          VALUES ('01j0r3', 'gpt-4o-mini', '', 'Be terse.', 'It is 10:01.', '01j0conv', 200, '2024-11-01T10:01:01.000000');
        INSERT INTO tool_results (response_id, name, output, tool_call_id) VALUES ('01j0r3', 'llm_time', '10:01 UTC', 'call_9');
        "#,
    )
    .unwrap();
}

/// The 0.32+ message store (m024 + m027's `text` column).
fn message_store(conn: &Connection) {
    conn.execute_batch(
        r#"
        CREATE TABLE [messages] ([hash] TEXT PRIMARY KEY, [parent_hash] TEXT REFERENCES [messages]([hash]),
            [role] TEXT, [provider_metadata] TEXT);
        CREATE TABLE [parts] ([id] INTEGER PRIMARY KEY, [message_hash] TEXT REFERENCES [messages]([hash]),
            [position] INTEGER, [type] TEXT, [tool_name] TEXT, [payload] TEXT, [text] TEXT);
        CREATE TABLE [fragments] ([id] INTEGER PRIMARY KEY, [hash] TEXT, [content] TEXT, [datetime_utc] TEXT, [source] TEXT);
        CREATE TABLE [threads] ([id] TEXT PRIMARY KEY, [name] TEXT, [tip_message_hash] TEXT,
            [forked_from] TEXT REFERENCES [threads]([id]), [datetime_utc] TEXT);
        CREATE TABLE [turns] ([id] TEXT PRIMARY KEY, [thread_id] TEXT, [parent_message_hash] TEXT,
            [tip_message_hash] TEXT, [model] TEXT, [resolved_model] TEXT, [options_json] TEXT, [schema_id] TEXT,
            [input_tokens] INTEGER, [output_tokens] INTEGER, [token_details] TEXT, [duration_ms] INTEGER,
            [datetime_utc] TEXT);
        INSERT INTO fragments (id, hash, content) VALUES (1, 'f1', 'A LONG DOCUMENT');
        INSERT INTO messages VALUES ('h1', NULL, 'system', NULL);
        INSERT INTO parts (message_hash, position, type, text) VALUES ('h1', 0, 'text', 'You are kind.');
        INSERT INTO messages VALUES ('h2', 'h1', 'user', NULL);
        INSERT INTO parts (message_hash, position, type, payload) VALUES ('h2', 0, 'text', '{"text_ref": [{"literal": "Summarise: "}, {"fragment": 1}]}');
        INSERT INTO messages VALUES ('h3', 'h2', 'assistant', NULL);
        INSERT INTO parts (message_hash, position, type, text) VALUES ('h3', 0, 'reasoning', 'It is long.');
        INSERT INTO parts (message_hash, position, type, text) VALUES ('h3', 1, 'text', 'It is a long document.');
        INSERT INTO messages VALUES ('h4', 'h3', 'user', NULL);
        INSERT INTO parts (message_hash, position, type, text) VALUES ('h4', 0, 'text', 'Shorter?');
        INSERT INTO messages VALUES ('h5', 'h4', 'assistant', NULL);
        INSERT INTO parts (message_hash, position, type, tool_name, payload) VALUES ('h5', 0, 'tool_call', 'count', '{"arguments": {"of": "words"}, "tool_call_id": "t1"}');
        INSERT INTO messages VALUES ('h6', 'h5', 'tool', NULL);
        INSERT INTO parts (message_hash, position, type, tool_name, payload) VALUES ('h6', 0, 'tool_result', 'count', '{"output": "3", "tool_call_id": "t1"}');
        INSERT INTO messages VALUES ('h7', 'h6', 'assistant', NULL);
        INSERT INTO parts (message_hash, position, type, text) VALUES ('h7', 0, 'text', 'Long doc.');
        INSERT INTO messages VALUES ('h8', 'h4', 'assistant', NULL);
        INSERT INTO parts (message_hash, position, type, text) VALUES ('h8', 0, 'text', 'Doc.');
        INSERT INTO threads VALUES ('th1', 'summary', 'h7', NULL, '2025-08-01T09:00:00');
        INSERT INTO threads VALUES ('th2', 'terse', 'h8', 'th1', '2025-08-01T09:05:00');
        INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model, resolved_model, datetime_utc)
          VALUES ('01j0r1', 'th1', 'h2', 'h3', 'claude-4', 'claude-4-20250701', '2025-08-01T09:00:00');
        INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model, datetime_utc)
          VALUES ('t2', 'th1', 'h4', 'h7', 'claude-4', '2025-08-01T09:01:00');
        INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model, datetime_utc)
          VALUES ('t3', 'th2', 'h4', 'h8', 'gpt-5', '2025-08-01T09:05:00');
        "#,
    )
    .unwrap();
}

fn db(f: impl Fn(&Connection)) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("logs.db");
    f(&Connection::open(&p).unwrap());
    (dir, p)
}

#[test]
fn legacy_conversations_and_responses() {
    let (_d, p) = db(legacy);
    assert_eq!(convo_formats::detect(&p).unwrap(), "llm");
    let r = convo_formats::llm::Llm.read_path(&p).unwrap();
    assert_eq!(r.conversations.len(), 1);
    let c = &r.conversations[0];
    assert_eq!(c.title.as_deref(), Some("Name ten pelicans"));
    let t = c.turns();
    let roles: Vec<Role> = t.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::System,
            Role::User,
            Role::Assistant,
            Role::User,
            Role::ToolCall,
            Role::Tool,
            Role::Assistant
        ]
    );
    assert_eq!(t[2].model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(t[2].extra["output_tokens"], 30);
    assert_eq!(t[4].to.as_deref(), Some("llm_time"));
    assert_eq!(t[5].text, "10:01 UTC");
    assert_eq!(t[6].text, "It is 10:01.");
    assert_eq!(t[1].time, Some(1_730_455_200_000));
}

#[test]
fn message_store_threads_become_one_conversation_with_a_fork() {
    let (_d, p) = db(|c| {
        legacy(c);
        message_store(c);
    });
    let r = convo_formats::llm::Llm.read_path(&p).unwrap();
    // The thread group, then the legacy conversation minus the response
    // also logged as a turn (01j0r1).
    assert_eq!(r.conversations.len(), 2);
    let c = &r.conversations[0];
    assert_eq!(c.title.as_deref(), Some("summary"));
    let names: Vec<&str> = c.timelines.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["main", "terse"]);
    let main = c.timeline_messages(0);
    let texts: Vec<&str> = main.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "You are kind.",
            "Summarise: A LONG DOCUMENT",
            "It is a long document.",
            "Shorter?",
            "{\"arguments\":{\"of\":\"words\"},\"name\":\"count\",\"tool_call_id\":\"t1\"}",
            "3",
            "Long doc."
        ]
    );
    assert_eq!(main[2].extra["reasoning"], "It is long.");
    assert_eq!(main[2].model.as_deref(), Some("claude-4-20250701"));
    assert_eq!(main[6].model.as_deref(), Some("claude-4"));
    let terse = c.timeline_messages(1);
    assert_eq!(terse.len(), 5);
    assert_eq!(terse[4].text, "Doc.");
    assert_eq!(terse[4].model.as_deref(), Some("gpt-5"));
    let legacy = &r.conversations[1];
    assert!(
        legacy.turns().iter().all(|m| m.text != "Brown, white, …"),
        "deduplicated"
    );

    // Into the store: one session, two timelines sharing four nodes.
    let mut s = convo_store::Store::open("sqlite::memory:").unwrap();
    let outs = convo_llm::ledger::import_all(&mut s, &[("llm", c)], None, 0).unwrap();
    let id = outs[0].id();
    let b = s.branches(&id).unwrap();
    assert_eq!(b.len(), 2);
    assert!(s.verify().unwrap().is_clean());
}
