//! Coding agents' transcripts (Claude Code, Codex, Gemini CLI, opencode), from files the real
//! CLIs wrote (tests/fixtures/claude-code/<version>/, codex/<version>/; the
//! Claude Code one has a hand-made /rewind branch and a record of a type
//! no version writes appended).
use crate::common::fixture;
use convo_core::{BranchName, Kind};
use convo_formats::{Conversation, Role};
use convo_llm::ledger::{Outcome, import_all, session_records};
use convo_store::Store;
use std::collections::BTreeSet;

const CLAUDE: &str = "claude-code/2.1.331/360bddc6-2d60-4460-b4e3-0ea3d034065f.jsonl";
const CODEX: &str =
    "codex/0.169.0/rollout-2026-11-24T15-54-53-01a20e44-6585-7cd2-a0c2-224cd881c6c3.jsonl";

fn read_bytes(format: &str, bytes: &[u8]) -> convo_formats::Read {
    convo_formats::reader(format)
        .unwrap()
        .read_bytes("t.jsonl", bytes)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn one(format: &str, bytes: &[u8]) -> Conversation {
    let mut r = read_bytes(format, bytes);
    assert_eq!(r.conversations.len(), 1);
    r.conversations.remove(0)
}

fn lines_of(c: &Conversation) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    for m in &c.messages {
        for r in m.extra["records"].as_array().unwrap() {
            assert!(
                out.insert(r["line"].as_u64().unwrap()),
                "line {} kept twice",
                r["line"]
            );
        }
    }
    out
}

fn import(s: &mut Store, format: &str, c: &Conversation) -> Outcome {
    import_all(s, &[(format, c)], None, 1_800_000_000_000)
        .unwrap()
        .remove(0)
}

fn joined(s: &mut Store, o: &Outcome) -> Vec<u8> {
    let mut out = Vec::new();
    for (file, _, raw) in session_records(s, &o.id()).unwrap() {
        assert_eq!(file, "");
        out.extend_from_slice(raw.as_bytes());
        out.push(b'\n');
    }
    out
}

#[test]
fn claude_code_keeps_every_line_and_every_branch() {
    let bytes = std::fs::read(fixture(CLAUDE)).unwrap();
    assert_eq!(
        convo_formats::detect(&fixture(CLAUDE)).unwrap(),
        "claude-code"
    );
    let c = one("claude-code", &bytes);
    let n = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(lines_of(&c), (1..=n).collect(), "every line, once");
    assert_eq!(
        c.id.as_deref(),
        Some("360bddc6-2d60-4460-b4e3-0ea3d034065f")
    );
    assert_eq!(
        c.title.as_deref(),
        Some("hello there"),
        "not a system reminder"
    );
    assert_eq!(c.agent.as_deref(), Some("claude-code"));
    let names: Vec<&str> = c.timelines.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["main", "alt-1"]);
    let texts = |t: usize| -> Vec<String> {
        c.timeline_messages(t)
            .iter()
            .map(|m| m.text.clone())
            .collect()
    };
    assert_eq!(texts(0).len(), 4);
    assert!(texts(0)[0].ends_with("hello there"), "{:?}", texts(0));
    assert_eq!(texts(0)[1], "answer 1");
    assert_eq!(texts(0)[2], "third question, after a rewind");
    assert_eq!(texts(0)[3], "answer to the rewound question");
    assert_eq!(texts(1)[2], "second question");
    assert_eq!(texts(1)[3], "answer 3");
    let roles: Vec<Role> = c.timeline_messages(0).iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::Assistant]
    );
    let a1 = c.timeline_messages(0)[1];
    assert_eq!(a1.model.as_deref(), Some("claude-opus-5-5"));
    assert_eq!(a1.extra["usage"]["output_tokens"], 3);
    assert!(a1.time.is_some());
    // The record of an unknown type rides with the message before it.
    let unknown = c
        .messages
        .iter()
        .flat_map(|m| m.extra["records"].as_array().unwrap())
        .find(|r| {
            r["raw"]
                .as_str()
                .unwrap()
                .contains("a-record-type-from-the-future")
        });
    assert!(unknown.is_some());
}

#[test]
fn claude_code_grown_file_adds_only_new_lines_and_exports_byte_for_byte() {
    let bytes = std::fs::read(fixture(CLAUDE)).unwrap();
    // The file as it was after the first turn (its 22nd line is cost-state).
    let mut cut = 0;
    for _ in 0..22 {
        cut += bytes[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    let first = one("claude-code", &bytes[..cut]);
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o1 = import(&mut s, "claude-code", &first);
    let Outcome::Created { nodes, .. } = o1 else {
        panic!("{o1:?}")
    };
    assert_eq!(nodes, 2, "one prompt and its answer");
    assert_eq!(joined(&mut s, &o1), &bytes[..cut]);

    let full = one("claude-code", &bytes);
    let o2 = import(&mut s, "claude-code", &full);
    let Outcome::Updated {
        id,
        nodes,
        branches,
        pending,
    } = o2
    else {
        panic!("{o2:?}")
    };
    assert_eq!(id, o1.id(), "same session");
    assert_eq!((nodes, branches, pending), (5, 1, 0), "{o2:?}");
    assert_eq!(joined(&mut s, &o2), bytes, "byte for byte");
    let main = s.timeline(&id, &BranchName::main()).unwrap();
    let kinds: Vec<Kind> = main.iter().map(|n| n.stored.node.kind).collect();
    assert_eq!(
        kinds,
        [Kind::Invoke, Kind::Complete, Kind::Invoke, Kind::Complete]
    );
    assert_eq!(
        String::from_utf8_lossy(&main[3].payload),
        "answer to the rewound question"
    );
    let branches: Vec<String> = s
        .branches(&id)
        .unwrap()
        .iter()
        .map(|b| b.name.as_str().to_owned())
        .collect();
    assert_eq!(branches.len(), 2, "{branches:?}");

    // Once more: nothing new.
    let o3 = import(&mut s, "claude-code", &full);
    assert_eq!(o3, Outcome::Existing { id });
    // A first import of the whole file gives the same timelines' contents.
    let mut s2 = Store::open("sqlite::memory:").unwrap();
    let o4 = import(&mut s2, "claude-code", &full);
    assert_eq!(o4.id(), id);
    assert_eq!(joined(&mut s2, &o4), bytes);
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn codex_rollout_reads_turns_and_comes_back_byte_for_byte() {
    let bytes = std::fs::read(fixture(CODEX)).unwrap();
    assert_eq!(convo_formats::detect(&fixture(CODEX)).unwrap(), "codex");
    let c = one("codex", &bytes);
    let n = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(lines_of(&c), (1..=n).collect());
    assert_eq!(
        c.id.as_deref(),
        Some("01a20e44-6585-7cd2-a0c2-224cd881c6c3")
    );
    assert_eq!(
        c.title.as_deref(),
        Some("hello codex"),
        "not the environment context"
    );
    let turns: Vec<(Role, String)> = c.turns().iter().map(|m| (m.role, m.text.clone())).collect();
    assert_eq!(
        turns,
        [
            (Role::User, "hello codex".into()),
            (Role::Assistant, "answer 2".into()),
            (Role::User, "again codex".into()),
            (Role::Assistant, "answer 4".into()),
        ]
    );
    assert_eq!(c.turns()[1].model.as_deref(), Some("test-model"));
    assert_eq!(c.turns()[1].extra["usage"]["output_tokens"], 3);
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "codex", &c);
    assert_eq!(joined(&mut s, &o), bytes);
}

#[test]
fn transcripts_with_bad_lines_say_where_and_keep_what_they_can() {
    let rec = |uuid: &str, parent: Option<&str>, ty: &str, text: &str| {
        let content = if ty == "assistant" {
            serde_json::json!([{"type": "text", "text": text}])
        } else {
            serde_json::json!(text)
        };
        serde_json::json!({"parentUuid": parent, "isSidechain": false, "type": ty,
            "message": {"role": ty, "content": content}, "uuid": uuid,
            "timestamp": "2026-01-01T00:00:00Z", "sessionId": "s1"})
        .to_string()
    };
    // A loop is an error naming the records and the line.
    let cyc = [
        rec("a", Some("b"), "user", "x"),
        rec("b", Some("a"), "assistant", "y"),
    ]
    .join("\n")
        + "\n";
    let e = convo_formats::reader("claude-code")
        .unwrap()
        .read_bytes("loop.jsonl", cyc.as_bytes())
        .unwrap_err();
    assert_eq!(e.rule, "parent-cycle");
    assert!(e.render().starts_with("loop.jsonl:1:"), "{}", e.render());
    // A parent that is not there starts a root; a cut line is kept raw;
    // a last line without newline waits.
    let text = [
        rec("a", Some("elsewhere"), "user", "first"),
        "{\"type\":\"assistant\",\"mess".into(),
        rec("b", Some("a"), "assistant", "second"),
        rec("c", Some("b"), "user", "third"),
    ]
    .join("\n");
    let r = read_bytes("claude-code", text.as_bytes());
    let c = &r.conversations[0];
    assert_eq!(c.turns().len(), 2, "the partial last line is not read");
    let w = r.warnings.join("\n");
    assert!(w.contains("t.jsonl:1: parentUuid elsewhere"), "{w}");
    assert!(w.contains("t.jsonl:2:"), "{w}");
    assert!(w.contains("t.jsonl:4: the last line has no newline"), "{w}");
    assert_eq!(lines_of(c), (1..=3).collect());
}

// ----- Gemini CLI ----------------------------------------------------------------

/// Written from gemini-cli's chatRecordingService.ts (commit 016443b):
/// a tool call recorded twice (its result filled in), a rewind, an `info`
/// message, metadata updates.
const GEMINI: &str = "gemini-cli/source-016443b/session-2026-11-24T10-00-5e1f0c2a.jsonl";
const GEMINI_LEGACY: &str = "gemini-cli/legacy/session-2025-09-01T08-00-aa11bb22.json";

fn kept_lines(c: &Conversation) -> Vec<u64> {
    let mut out: Vec<u64> = c
        .messages
        .iter()
        .filter_map(|m| m.extra.get("records").and_then(|r| r.as_array()))
        .flatten()
        .map(|r| r["line"].as_u64().unwrap())
        .collect();
    out.sort();
    out
}

#[test]
fn gemini_cli_session_keeps_every_line_and_the_rewound_branch() {
    let path = fixture(GEMINI);
    assert_eq!(convo_formats::detect(&path).unwrap(), "gemini-cli");
    assert_eq!(
        convo_formats::detect(path.parent().unwrap()).unwrap(),
        "gemini-cli"
    );
    let bytes = std::fs::read(&path).unwrap();
    let c = one("gemini-cli", &bytes);
    let n = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(
        kept_lines(&c),
        (1..=n).collect::<Vec<_>>(),
        "each line once"
    );
    assert_eq!(
        c.id.as_deref(),
        Some("5e1f0c2a-7b3d-4c8e-9f10-2a3b4c5d6e7f")
    );
    assert_eq!(
        c.title.as_deref(),
        Some("Fix the missing foo.h build failure")
    );
    let turns: Vec<(Role, String)> = c.turns().iter().map(|m| (m.role, m.text.clone())).collect();
    assert_eq!(
        turns,
        [
            (Role::User, "why does the build fail?".into()),
            (Role::ToolCall, "$ make".into()),
            (Role::Tool, "error: missing header foo.h".into()),
            (
                Role::Assistant,
                "The build fails because foo.h is missing.".into()
            ),
            (Role::User, "vendor it instead".into()),
            (Role::Assistant, "Vendored foo.h under third_party/.".into()),
        ],
        "main is the conversation after the rewind"
    );
    let main = c.turns();
    assert_eq!(main[1].to.as_deref(), Some("run_shell_command"));
    assert_eq!(main[2].speaker, "run_shell_command");
    assert_eq!(
        main[1].extra["usage"]["total"], 128,
        "the latest version of the record"
    );
    assert_eq!(main[5].model.as_deref(), Some("gemini-2.5-pro"));
    assert_eq!(c.timelines.len(), 2, "{:?}", c.timelines);
    let alt = c.path_to(c.timelines[1].leaf);
    let texts: Vec<&str> = alt.iter().map(|&i| c.messages[i].text.as_str()).collect();
    assert_eq!(
        &texts[texts.len() - 2..],
        ["add it", "Added foo.h."],
        "the rewound branch is kept"
    );

    // Imported, grown, exported: byte for byte, only the new lines added.
    let mut cut = 0;
    for _ in 0..8 {
        cut += bytes[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o1 = import(&mut s, "gemini-cli", &one("gemini-cli", &bytes[..cut]));
    assert_eq!(joined(&mut s, &o1), &bytes[..cut]);
    let o2 = import(&mut s, "gemini-cli", &c);
    assert!(matches!(o2, Outcome::Updated { .. }), "{o2:?}");
    assert_eq!(o2.id(), o1.id(), "same session");
    assert_eq!(joined(&mut s, &o2), bytes, "byte for byte");
    let tl = s.timeline(&o2.id(), &BranchName::main()).unwrap();
    let answer = tl
        .iter()
        .rev()
        .find(|n| n.stored.node.kind == Kind::Complete)
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&answer.payload),
        "Vendored foo.h under third_party/.",
        "main (promoted) ends with the live conversation"
    );
    assert_eq!(s.branches(&o2.id()).unwrap().len(), 2);
    assert_eq!(
        import(&mut s, "gemini-cli", &c),
        Outcome::Existing { id: o2.id() }
    );
    assert!(s.verify().unwrap().is_clean());
}

/// A Gemini CLI message said again: the call whose result comes later (a
/// message said again after others), the answer given its tokens (said
/// again at once), and the first prompt said again as tool results alone
/// (then not a prompt: the chat is titled by the next one).
#[test]
fn gemini_cli_messages_said_again_are_read_as_last_said() {
    let lines = [
        r#"{"sessionId":"s-1","projectHash":"9c1a","startTime":"2026-11-24T10:00:00.000Z","lastUpdated":"2026-11-24T10:00:00.000Z","kind":"main"}"#,
        r#"{"id":"u1","timestamp":"2026-11-24T10:00:01.000Z","type":"user","content":[{"text":"first prompt"}]}"#,
        r#"{"id":"g1","timestamp":"2026-11-24T10:00:02.000Z","type":"gemini","content":"","toolCalls":[{"id":"c1","name":"run_shell_command","args":{"command":"make"},"status":"executing"}]}"#,
        r#"{"id":"u2","timestamp":"2026-11-24T10:00:03.000Z","type":"user","content":[{"text":"second prompt"}]}"#,
        r#"{"id":"g1","timestamp":"2026-11-24T10:00:02.000Z","type":"gemini","content":"","toolCalls":[{"id":"c1","name":"run_shell_command","args":{"command":"make"},"result":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"ok"}}}],"status":"success"}]}"#,
        r#"{"id":"g2","timestamp":"2026-11-24T10:00:04.000Z","type":"gemini","content":"done","model":"gemini-2.5-pro"}"#,
        r#"{"id":"g2","timestamp":"2026-11-24T10:00:04.000Z","type":"gemini","content":"done","model":"gemini-2.5-pro","tokens":{"input":3,"output":1,"total":4}}"#,
        r#"{"id":"u1","timestamp":"2026-11-24T10:00:01.000Z","type":"user","content":[{"functionResponse":{"id":"c0","name":"x","response":{"output":"y"}}}]}"#,
    ];
    let bytes = format!("{}\n", lines.join("\n"));
    let c = one("gemini-cli", bytes.as_bytes());
    assert_eq!(
        kept_lines(&c),
        (1..=8).collect::<Vec<_>>(),
        "each line once"
    );
    assert_eq!(c.title.as_deref(), Some("second prompt"));
    let turns: Vec<(Role, &str, Option<&str>)> = c
        .messages
        .iter()
        .map(|m| (m.role, m.text.as_str(), m.key.as_deref()))
        .collect();
    assert_eq!(
        turns,
        [
            (Role::ToolCall, "$ make", Some("g1")),
            (Role::Tool, "ok", Some("g1#result:c1")),
            (Role::User, "second prompt", Some("u2")),
            (Role::Assistant, "done", Some("g2")),
        ],
        "each message as last said, in the order first seen"
    );
    let parents: Vec<Option<usize>> = c.messages.iter().map(|m| m.parent).collect();
    assert_eq!(parents, [None, Some(0), Some(1), Some(2)]);
    assert_eq!(c.messages[3].extra["usage"]["total"], 4);
    assert_eq!(c.timelines.len(), 1, "{:?}", c.timelines);
    assert_eq!(c.timelines[0].leaf, Some(3));
}

/// Written by Gemini CLI 0.61.0 itself (`gemini --yolo -p`, then
/// `gemini --resume ID -p` a minute later, against a scripted upstream):
/// its session context and the resumed history as `{"$set": {"messages":
/// […]}}`, a `read_file` call with its result (also written as a `user`
/// message of `functionResponse` parts), and the second file the resume
/// left under the same `sessionId` with the context alone; and a chat
/// resumed within the minute it started (the second file's lines are
/// then appended to it: a second session line, the context alone again);
/// and a chat whose model started a subagent (`invoke_agent`), the
/// subagent's chat in `chats/<parent id>/`. The folder is the CLI's
/// `~/.gemini` (its `projects.json`, `tmp/proj/chats/`).
const GEMINI_061: &str = "gemini-cli/0.61.0";
const GEMINI_061_CHAT: &str =
    "gemini-cli/0.61.0/tmp/proj/chats/session-2026-11-25T07-31-96d9de82.jsonl";
const GEMINI_061_SAME_MINUTE: &str =
    "gemini-cli/0.61.0/tmp/proj/chats/session-2026-11-25T07-36-e121ae98.jsonl";

#[test]
fn gemini_cli_0_61_0_chat_reads_as_the_cli_wrote_it() {
    let dir = fixture(GEMINI_061);
    assert_eq!(convo_formats::detect(&dir).unwrap(), "gemini-cli");
    let got = convo_formats::reader("gemini-cli")
        .unwrap()
        .read_path(&dir)
        .unwrap();
    assert_eq!(
        got.conversations.len(),
        3,
        "the file with the session's context alone is no session, the subagent's chat is read with its parent's"
    );
    let by_id = |id: &str| {
        got.conversations
            .iter()
            .find(|c| c.id.as_deref() == Some(id))
            .unwrap()
    };
    // A subagent (`invoke_agent`): its chat, under the parent's id, is the
    // timeline `agent-1` of the parent's session, from the call that gave
    // it its task; the parent's file still comes back byte for byte.
    let parent = by_id("0420ff9a-7860-4620-8775-22e2e7d97a07");
    let said: Vec<(Role, &str)> = parent
        .turns()
        .iter()
        .map(|m| (m.role, m.text.as_str()))
        .collect();
    assert_eq!(said[0], (Role::User, "please delegate this"));
    assert_eq!(said[1], (Role::ToolCall, "list the files please"));
    assert_eq!(parent.turns()[1].to.as_deref(), Some("invoke_agent"));
    assert!(
        said[2].1.contains("the subagent found notes.txt"),
        "{said:?}"
    );
    assert_eq!(said[3], (Role::Assistant, "answer 5"));
    let names: Vec<&str> = parent.timelines.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["main", "agent-1"]);
    let agent = parent.timeline_messages(1);
    let call = parent.turns()[1];
    let from = agent
        .iter()
        .position(|m| std::ptr::eq(*m, call))
        .expect("the agent's timeline goes through the call");
    let sub: Vec<(Role, &str)> = agent[from + 1..]
        .iter()
        .map(|m| (m.role, m.text.as_str()))
        .collect();
    assert_eq!(sub[0], (Role::User, "list the files please"), "{sub:?}");
    assert_eq!(sub[1].0, Role::ToolCall);
    assert_eq!(agent[from + 2].to.as_deref(), Some("complete_task"));
    let parent_file = dir.join("tmp/proj/chats/session-2026-11-25T08-05-0420ff9a.jsonl");
    let sub_file = dir.join(
        "tmp/proj/chats/0420ff9a-7860-4620-8775-22e2e7d97a07/ddd26140-4a3c-45d8-a0ec-a9b7adc664f0.jsonl",
    );
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "gemini-cli", parent);
    let records = session_records(&mut s, &o.id()).unwrap();
    assert_eq!(
        convo_formats::gemini_cli::file_bytes(&records),
        std::fs::read(&parent_file).unwrap()
    );
    let sub_lines: Vec<&str> = records
        .iter()
        .filter(|(f, _, _)| f.ends_with("ddd26140-4a3c-45d8-a0ec-a9b7adc664f0.jsonl"))
        .map(|(_, _, raw)| raw.as_str())
        .collect();
    let sub_text = std::fs::read_to_string(&sub_file).unwrap();
    assert_eq!(
        sub_lines,
        sub_text.lines().collect::<Vec<_>>(),
        "every line of the subagent's chat"
    );
    assert!(s.verify().unwrap().is_clean());
    // Read alone, it is a session titled by its task, not by its result.
    let alone = convo_formats::reader("gemini-cli")
        .unwrap()
        .read_path(&sub_file)
        .unwrap();
    let sub = &alone.conversations[0];
    assert_eq!(sub.meta["kind"], "subagent");
    assert_eq!(sub.title.as_deref(), Some("list the files please"));
    // Resumed within the minute: one file, read the same way.
    let same = by_id("e121ae98-b6f8-4087-8647-49730294f0f1");
    assert_eq!(
        same.id.as_deref(),
        Some("e121ae98-b6f8-4087-8647-49730294f0f1")
    );
    let said: Vec<&str> = same.turns().iter().map(|m| m.text.as_str()).collect();
    assert_eq!(
        said,
        [
            "please read notes.txt",
            "read notes.txt",
            "hello notes\n",
            "answer 17",
            "second question",
            "answer 19"
        ]
    );
    assert_eq!(same.timelines.len(), 1);
    let same_bytes = std::fs::read(fixture(GEMINI_061_SAME_MINUTE)).unwrap();
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "gemini-cli", same);
    assert_eq!(joined(&mut s, &o), same_bytes, "byte for byte");

    let c = by_id("96d9de82-a410-4248-9969-dc4340124dff");
    let bytes = std::fs::read(fixture(GEMINI_061_CHAT)).unwrap();
    let n = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    assert_eq!(kept_lines(c), (1..=n).collect::<Vec<_>>(), "each line once");
    assert_eq!(
        c.id.as_deref(),
        Some("96d9de82-a410-4248-9969-dc4340124dff")
    );
    assert_eq!(
        c.title.as_deref(),
        Some("please read notes.txt"),
        "not the session's context"
    );
    assert_eq!(c.timelines.len(), 1, "{:?}", c.timelines);
    let turns: Vec<(Role, String)> = c.turns().iter().map(|m| (m.role, m.text.clone())).collect();
    assert_eq!(
        turns,
        [
            (Role::User, "please read notes.txt".into()),
            (Role::ToolCall, "read notes.txt".into()),
            (Role::Tool, "hello notes\n".into()),
            (Role::Assistant, "answer 12".into()),
            (Role::User, "second question".into()),
            (Role::Assistant, "answer 14".into()),
        ],
        "the tool's result once; the context and the resumed history are no prompts"
    );
    let main = c.turns();
    assert_eq!(main[1].to.as_deref(), Some("read_file"));
    assert_eq!(main[2].speaker, "read_file");
    assert_eq!(main[1].model.as_deref(), Some("gemini-3.8-flash"));
    assert_eq!(main[3].model.as_deref(), Some("gemini-3.8-flash"));
    assert_eq!(main[3].extra["usage"]["total"], 13);
    assert_eq!(main[3].extra["usage"]["input"], 10);
    assert!(main.iter().all(|m| m.time.is_some()));

    // Imported: the file back byte for byte; again: nothing new.
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "gemini-cli", c);
    assert!(matches!(o, Outcome::Created { nodes: 6, .. }), "{o:?}");
    assert_eq!(joined(&mut s, &o), bytes, "byte for byte");
    assert_eq!(
        convo_formats::gemini_cli::file_bytes(&session_records(&mut s, &o.id()).unwrap()),
        bytes
    );
    assert_eq!(
        import(&mut s, "gemini-cli", c),
        Outcome::Existing { id: o.id() }
    );
    assert!(s.verify().unwrap().is_clean());

    // Read as it grew (the first run's lines, then the resume's).
    let mut cut = 0;
    for _ in 0..11 {
        cut += bytes[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o1 = import(&mut s, "gemini-cli", &one("gemini-cli", &bytes[..cut]));
    assert!(matches!(o1, Outcome::Created { nodes: 4, .. }), "{o1:?}");
    let o2 = import(&mut s, "gemini-cli", c);
    assert!(matches!(o2, Outcome::Updated { .. }), "{o2:?}");
    assert_eq!(joined(&mut s, &o2), bytes, "byte for byte");
    assert_eq!(s.branches(&o2.id()).unwrap().len(), 1);

    // The branch as a chat to resume: the messages in the order of the
    // resumed history, the context and the `functionResponse` ones kept.
    let records = session_records(&mut s, &o2.id()).unwrap();
    let ids: Vec<String> = records
        .iter()
        .take(13)
        .fold(Vec::new(), |mut ids, (_, _, raw)| {
            let (listed, whole) = convo_formats::gemini_cli::message_ids(raw);
            if whole {
                ids.clear();
            }
            ids.extend(
                listed
                    .into_iter()
                    .filter(|l| !ids.contains(l))
                    .collect::<Vec<_>>(),
            );
            ids
        });
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert!(ids[0].starts_with("d04923d3"), "the context first: {ids:?}");
    assert!(ids[3].ends_with("_response"), "{ids:?}");
    let file =
        convo_formats::gemini_cli::resume_file(&records, &ids, "new-id", 1_800_000_000_000, &[])
            .unwrap();
    let text = String::from_utf8(file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 7, "{text}");
    assert_eq!(lines[0]["sessionId"], "new-id");
    let said: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l["id"].as_str().unwrap())
        .collect();
    assert_eq!(said, ids);
    assert!(
        text.contains("\"toolCalls\"") && !text.contains("\"content\":[{\"functionCall\""),
        "each message's own last line, not the resume's restatement: {text}"
    );
    assert!(
        text.contains("<session_context>"),
        "the context, which has no line of its own: {text}"
    );
    // Placed in the project's folder: its short name in projects.json
    // (the fixture's, for the project the chat's `projectHash` names).
    let hash = lines[0]["projectHash"].as_str().unwrap();
    let path = convo_formats::gemini_cli::chat_path(&dir, hash, 1_800_000_000_000, "new-id");
    assert_eq!(
        path,
        dir.join("tmp/proj/chats/session-2027-01-15T08-00-new-id.jsonl"),
        "beside the chat it was made from"
    );
    let unlisted = convo_formats::gemini_cli::chat_path(&dir, "ab12", 1_800_000_000_000, "new-id");
    assert!(
        unlisted.starts_with(dir.join("tmp/ab12/chats")),
        "{unlisted:?}"
    );
}

#[test]
fn gemini_cli_legacy_json_session_reads() {
    let path = fixture(GEMINI_LEGACY);
    assert_eq!(convo_formats::detect(&path).unwrap(), "gemini-cli");
    let got = convo_formats::reader("gemini-cli")
        .unwrap()
        .read_path(&path)
        .unwrap();
    assert_eq!(got.conversations.len(), 1);
    let c = &got.conversations[0];
    let turns: Vec<(Role, String)> = c.turns().iter().map(|m| (m.role, m.text.clone())).collect();
    assert_eq!(
        turns,
        [
            (Role::User, "list the files".into()),
            (Role::ToolCall, "{\n  \"path\": \"/p\"\n}".into()),
            (Role::Tool, "a.txt\nb.txt".into()),
            (Role::Assistant, "Two files: a.txt and b.txt.".into()),
        ]
    );
    // Every line kept, a message's lines as one record: the records
    // joined by newlines are the file, byte for byte.
    let bytes = std::fs::read(&path).unwrap();
    let lines = kept_lines(c);
    assert_eq!(lines.first(), Some(&1));
    assert!(lines.len() > 4 && lines.len() < bytes.split(|&b| b == b'\n').count());
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "gemini-cli", c);
    assert!(matches!(o, Outcome::Created { nodes: 4, .. }), "{o:?}");
    let records = session_records(&mut s, &o.id()).unwrap();
    assert_eq!(convo_formats::gemini_cli::file_bytes(&records), bytes);
    // Without its final newline (as JSON.stringify wrote it), too.
    let cut = &bytes[..bytes.len() - 1];
    let c2 = one("gemini-cli", cut);
    let mut s2 = Store::open("sqlite::memory:").unwrap();
    let o2 = import(&mut s2, "gemini-cli", &c2);
    let records = session_records(&mut s2, &o2.id()).unwrap();
    assert_eq!(convo_formats::gemini_cli::file_bytes(&records), cut);
    assert_eq!(
        import(&mut s, "gemini-cli", c),
        Outcome::Existing { id: o.id() },
        "a re-import adds nothing"
    );
    // A branch of it as a new chat to resume: a `.jsonl` of its messages.
    let file = convo_formats::gemini_cli::resume_file(
        &session_records(&mut s, &o.id()).unwrap(),
        &["m1".into(), "m2".into()],
        "new-id",
        1_800_000_000_000,
        &[],
    )
    .unwrap();
    let text = String::from_utf8(file).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0]["sessionId"], "new-id");
    assert_eq!(lines[2]["toolCalls"][0]["name"], "list_directory");
}

// ----- opencode --------------------------------------------------------------------

/// A database as opencode 1.18.34 left it (tests/fixtures/opencode/1.18.34:
/// `sqlite3 opencode.db .dump project session message part` of a run
/// against a scripted upstream), rebuilt in `dir`.
fn opencode_db(dir: &std::path::Path, which: &str) -> std::path::PathBuf {
    let sql = std::fs::read_to_string(fixture(&format!("opencode/1.18.34/{which}.sql"))).unwrap();
    let path = dir.join("opencode.db");
    let _ = std::fs::remove_file(&path);
    let db = rusqlite::Connection::open(&path).unwrap();
    db.execute_batch(&sql).unwrap();
    path
}

fn opencode_read(path: &std::path::Path) -> convo_formats::Read {
    convo_formats::reader("opencode")
        .unwrap()
        .read_path(path)
        .unwrap_or_else(|e| panic!("{e}"))
}

fn timeline_texts(c: &Conversation, t: usize) -> Vec<String> {
    c.path_to(c.timelines[t].leaf)
        .iter()
        .map(|&i| format!("{}:{}", c.messages[i].role.as_str(), c.messages[i].text))
        .collect()
}

/// The rows of opencode's four tables, for comparing databases.
fn opencode_rows(path: &std::path::Path) -> Vec<String> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut out = Vec::new();
    for t in ["project", "session", "message", "part"] {
        let cols: Vec<String> = db
            .prepare(&format!("PRAGMA table_info(\"{t}\")"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(1))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let q = format!(
            "SELECT json_array({}) FROM \"{t}\" ORDER BY id",
            cols.iter()
                .map(|c| format!("\"{c}\""))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut st = db.prepare(&q).unwrap();
        let rows: Vec<String> = st
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(|r| format!("{t} {}", r.unwrap()))
            .collect();
        out.extend(rows);
    }
    out
}

#[test]
fn opencode_database_keeps_the_reverted_turn_and_the_subagent() {
    let dir = tempfile::tempdir().unwrap();
    let db = opencode_db(dir.path(), "reverted");
    assert_eq!(convo_formats::detect(&db).unwrap(), "opencode");
    assert_eq!(convo_formats::detect(dir.path()).unwrap(), "opencode");
    let r = opencode_read(&db);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    assert_eq!(
        r.conversations.len(),
        1,
        "the subagent's session is folded in"
    );
    let c = &r.conversations[0];
    assert_eq!(c.id.as_deref(), Some("ses_df09f2b0effewvn4qJx9UFQqc6"));
    assert_eq!(c.agent.as_deref(), Some("opencode"));
    let names: Vec<&str> = c.timelines.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["main", "alt-1", "agent-1"]);
    let main = timeline_texts(c, 0);
    assert_eq!(
        main.last().unwrap(),
        "assistant:answer 6",
        "main ends before the pending revert: {main:?}"
    );
    assert!(main.contains(&"tool_call:$ ls".to_owned()), "{main:?}");
    let alt = timeline_texts(c, 1);
    assert_eq!(
        &alt[main.len()..],
        [
            "user:\"please delegate\"",
            "tool_call:look around\n\nlist the files please",
            "tool:<task id=\"ses_df09ea250ffeK3rYqOGguFAa4b\" state=\"completed\">\n<task_result>\nanswer 2\n</task_result>\n</task>",
            "assistant:answer 3",
        ],
        "the reverted turn is a branch"
    );
    let agent = timeline_texts(c, 2);
    assert_eq!(
        &agent[main.len()..],
        [
            "user:\"please delegate\"",
            "tool_call:look around\n\nlist the files please",
            "user:list the files please",
            "assistant:answer 2",
        ],
        "the subagent goes on from the task call that started it"
    );
    let call = c
        .turns()
        .iter()
        .find(|m| m.role == Role::ToolCall)
        .copied()
        .unwrap();
    assert_eq!(call.to.as_deref(), Some("bash"));
    assert_eq!(call.model.as_deref(), Some("test-model"));
    assert_eq!(call.extra["usage"]["total"], 13);

    // Imported; the rows written back as SQL into an emptied copy of the
    // database give every row back.
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o1 = import(&mut s, "opencode", c);
    assert!(matches!(o1, Outcome::Created { branches: 3, .. }), "{o1:?}");
    let script =
        convo_formats::opencode::sql_script(&session_records(&mut s, &o1.id()).unwrap()).unwrap();
    let before = opencode_rows(&db);
    let copy = dir.path().join("copy.db");
    std::fs::copy(&db, &copy).unwrap();
    {
        let cx = rusqlite::Connection::open(&copy).unwrap();
        cx.execute_batch(
            "DELETE FROM part; DELETE FROM message; DELETE FROM session; DELETE FROM project;",
        )
        .unwrap();
        cx.execute_batch(std::str::from_utf8(&script).unwrap())
            .unwrap();
    }
    assert_eq!(opencode_rows(&copy), before, "every row back");

    // opencode deleted the reverted turn at the next prompt; the archive
    // keeps it, and main goes on from where the revert went back.
    let db = opencode_db(dir.path(), "after");
    let r = opencode_read(&db);
    assert_eq!(r.conversations.len(), 2, "the session and its fork");
    let c2 = &r.conversations[0];
    assert_eq!(c2.id, c.id);
    let o2 = import(&mut s, "opencode", c2);
    assert!(matches!(o2, Outcome::Updated { .. }), "{o2:?}");
    let tl = s.timeline(&o2.id(), &BranchName::main()).unwrap();
    let said: Vec<String> = tl
        .iter()
        .map(|n| String::from_utf8_lossy(&n.payload).into_owned())
        .collect();
    assert_eq!(
        &said[said.len() - 2..],
        ["\"after the revert\"", "answer 4"],
        "{said:?}"
    );
    assert!(!said.iter().any(|t| t == "answer 3"), "{said:?}");
    let kept = session_records(&mut s, &o2.id()).unwrap();
    let deleted = c.messages.iter().find(|m| m.text == "answer 3").unwrap();
    let deleted_key = deleted.key.clone().unwrap();
    assert!(
        kept.iter()
            .any(|(f, _, _)| *f == format!("message/{deleted_key}")),
        "the archive keeps the deleted message's row"
    );
    let fork = &r.conversations[1];
    assert_eq!(fork.title.as_deref(), Some("answer 1 (fork #1)"));
    assert_eq!(
        import(&mut s, "opencode", c2),
        Outcome::Existing { id: o2.id() }
    );
    assert!(s.verify().unwrap().is_clean());
}

/// A branch written as a new opencode session into the database: the
/// reverted turn (with its subagent's task call) and a turn made in convo,
/// under new ids, read back as a session of its own; a database whose
/// tables are not what the reader knows is refused, nothing written.
#[test]
fn opencode_branch_becomes_a_new_session_in_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = opencode_db(dir.path(), "reverted");
    let r = opencode_read(&db);
    let c = &r.conversations[0];
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "opencode", c);
    let records = session_records(&mut s, &o.id()).unwrap();
    let alt = c.path_to(c.timelines[1].leaf);
    let files: Vec<String> = alt
        .iter()
        .filter_map(|&i| c.messages[i].extra.get("records")?.as_array())
        .flatten()
        .map(|r| r["file"].as_str().unwrap().to_owned())
        .collect();
    let turns = [
        (Role::User, "and one more".to_owned(), 1_795_554_400_000),
        (Role::Assistant, "One more.".to_owned(), 1_795_554_401_000),
    ];
    let now = 1_795_554_500_000;
    let fork =
        convo_formats::opencode::fork(&records, &files, "alt-1", &turns, now, "seed").unwrap();
    assert!(
        fork.id.starts_with("ses_") && fork.id.len() == 30,
        "{}",
        fork.id
    );
    assert_ne!(c.id.as_deref(), Some(fork.id.as_str()));
    let script = String::from_utf8(fork.rows.script()).unwrap();
    assert!(script.starts_with("BEGIN;\n") && script.ends_with("COMMIT;\n"));
    let before = opencode_rows(&db);
    fork.rows.apply(&db).unwrap();
    let after = opencode_rows(&db);
    assert!(
        before.iter().all(|r| after.contains(r)),
        "no row of the database changed"
    );
    // Applying again adds nothing (every row is there).
    fork.rows.apply(&db).unwrap();
    assert_eq!(opencode_rows(&db), after);
    let cx = rusqlite::Connection::open(&db).unwrap();
    let (title, revert, parent): (String, Option<String>, Option<String>) = cx
        .query_row(
            "SELECT title, revert, parent_id FROM session WHERE id = ?1",
            [&fork.id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(title, "answer 1 (fork: alt-1)");
    assert_eq!((revert, parent), (None, None));
    // Message and part ids ascend in the session's order, as opencode's do.
    let ids: Vec<(String, i64)> = cx
        .prepare(
            "SELECT id, time_created FROM message WHERE session_id = ?1 ORDER BY time_created, id",
        )
        .unwrap()
        .query_map([&fork.id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(ids.windows(2).all(|w| w[0].0 < w[1].0), "{ids:?}");
    assert!(ids.iter().all(|(id, _)| id.starts_with("msg_")));
    let orphans: i64 = cx
        .query_row(
            "SELECT count(*) FROM message WHERE session_id = ?1 AND json_extract(data, '$.parentID') IS NOT NULL \
             AND json_extract(data, '$.parentID') NOT IN (SELECT id FROM message WHERE session_id = ?1)",
            [&fork.id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(orphans, 0, "every answer names a user message of the fork");
    drop(cx);
    let back = opencode_read(&db);
    let f = back
        .conversations
        .iter()
        .find(|x| x.id.as_deref() == Some(fork.id.as_str()))
        .expect("the fork is a session of its own");
    let want: Vec<String> = timeline_texts(c, 1)
        .into_iter()
        .chain([
            "user:and one more".to_owned(),
            "assistant:One more.".to_owned(),
        ])
        .collect();
    assert_eq!(timeline_texts(f, 0), want);
    assert!(
        !timeline_texts(f, 0).contains(&"user:\"after the revert\"".to_owned()),
        "not the live branch"
    );

    // A database whose tables are laid out otherwise: refused, untouched.
    let odd = dir.path().join("odd.db");
    {
        let cx = rusqlite::Connection::open(&odd).unwrap();
        cx.execute_batch(
            "CREATE TABLE project (id TEXT PRIMARY KEY);
             CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT, title TEXT, time_created INTEGER, owner TEXT NOT NULL);
             CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT, time_created INTEGER, data TEXT);
             CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT, session_id TEXT, data TEXT);",
        )
        .unwrap();
    }
    let e = fork.rows.apply(&odd).unwrap_err();
    assert_eq!(e.rule, "schema", "{e}");
    let cx = rusqlite::Connection::open(&odd).unwrap();
    let n: i64 = cx
        .query_row(
            "SELECT (SELECT count(*) FROM project) + (SELECT count(*) FROM session)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 0, "nothing written");
    let e = fork.rows.apply(&dir.path().join("none.db")).unwrap_err();
    assert_eq!(e.rule, "not-found", "{e}");
}

/// An opencode database with a huge text part and a huge tool output
/// (escapes included): the two-pass import, which reads a long cell
/// without SQLite's copy of it, makes its text in place and stores its
/// row after its node, stores the nodes a whole read does; the rows come
/// back as they were, the node holds the text and the store verifies.
#[test]
fn a_huge_opencode_part_is_read_once_and_comes_back_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let db = opencode_db(dir.path(), "reverted");
    let big = "said \"this\"\n\tand é 😀 \\ ".repeat(convo_formats::records::DETACHED_FROM / 20);
    let outputs = {
        let cx = rusqlite::Connection::open(&db).unwrap();
        cx.execute(
            "UPDATE part SET data = json_set(data, '$.text', ?1) WHERE id = 'prt_20f60e79a001pqwN9yK9XiuqdX'",
            [&big],
        )
        .unwrap();
        let n = cx
            .execute(
                "UPDATE part SET data = json_set(data, '$.state.output', ?1) \
                 WHERE json_extract(data, '$.tool') = 'bash' AND json_extract(data, '$.state.status') = 'completed'",
                [format!("out {big}")],
            )
            .unwrap();
        assert!(n >= 1);
        n
    };
    let before = opencode_rows(&db);
    let mut a = Store::open("sqlite::memory:").unwrap();
    let mut opened = convo_formats::opencode::open(&db).unwrap();
    let mut outcomes = Vec::new();
    a.transaction(|l| {
        opened.each(|c, rows| {
            outcomes.push(convo_llm::ledger::import_lazy(
                l, "opencode", c, rows, None, 0,
            )?);
            Ok::<_, convo_store::StoreError>(())
        })
    })
    .unwrap();
    // Its read transaction ends.
    drop(opened);
    let oa = outcomes.remove(0);
    let mut b = Store::open("sqlite::memory:").unwrap();
    let ob = import(&mut b, "opencode", &opencode_read(&db).conversations[0]);
    assert_eq!(shape(&mut a, &oa), shape(&mut b, &ob));
    let nodes = a.read(|tx| tx.session_nodes(&oa.id(), false)).unwrap();
    let named = nodes
        .iter()
        .filter(|(n, _)| n.node.diagnostics.as_str().contains("\"blob\""))
        .count();
    assert_eq!(named, 1 + outputs, "the huge rows are named by hash");
    assert!(
        nodes
            .iter()
            .all(|(n, _)| n.node.diagnostics.as_str().len() < 8192),
        "diagnostics stay small"
    );
    let main = a.timeline(&oa.id(), &BranchName::main()).unwrap();
    assert!(main.iter().any(|n| n.payload == big.as_bytes()), "the text");
    assert!(
        main.iter()
            .any(|n| n.payload == format!("out {big}").as_bytes()),
        "the output"
    );
    assert!(a.verify().unwrap().problems.is_empty());
    let script =
        convo_formats::opencode::sql_script(&session_records(&mut a, &oa.id()).unwrap()).unwrap();
    let cx = rusqlite::Connection::open(&db).unwrap();
    cx.execute_batch(
        "DELETE FROM part; DELETE FROM message; DELETE FROM session; DELETE FROM project;",
    )
    .unwrap();
    cx.execute_batch(std::str::from_utf8(&script).unwrap())
        .unwrap();
    assert_eq!(opencode_rows(&db), before, "every row back");
}

/// Copies the JSON storage fixture `which` over `dst`: files that did not
/// change keep their time, changed and new ones get `time`, files gone are
/// removed (as opencode leaves its storage).
fn opencode_storage(which: &str, dst: &std::path::Path, time: std::time::SystemTime) {
    let src = fixture(&format!("opencode/1.1.65/{which}"));
    let mut wanted = BTreeSet::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap().to_path_buf();
            let to = dst.join(&rel);
            let bytes = std::fs::read(&p).unwrap();
            if std::fs::read(&to).ok().as_deref() != Some(&bytes[..]) {
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::write(&to, &bytes).unwrap();
                std::fs::File::options()
                    .write(true)
                    .open(&to)
                    .unwrap()
                    .set_modified(time)
                    .unwrap();
            }
            wanted.insert(rel);
        }
    }
    let mut stack = vec![dst.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if !wanted.contains(p.strip_prefix(dst).unwrap()) {
                std::fs::remove_file(&p).unwrap();
            }
        }
    }
}

#[test]
fn opencode_json_storage_comes_back_byte_for_byte() {
    use std::time::{Duration, UNIX_EPOCH};
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    opencode_storage(
        "reverted",
        &storage,
        UNIX_EPOCH + Duration::from_secs(1_795_000_000),
    );
    assert_eq!(convo_formats::detect(dir.path()).unwrap(), "opencode");
    let r = opencode_read(dir.path());
    assert_eq!(r.conversations.len(), 1, "{:?}", r.warnings);
    let c = &r.conversations[0];
    assert_eq!(c.title.as_deref(), Some("answer 5"));
    let names: Vec<&str> = c.timelines.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["main", "alt-1", "agent-1"]);
    assert_eq!(
        timeline_texts(c, 0),
        ["user:\"hello opencode\"\n", "assistant:answer 7"],
        "main ends where the revert went back"
    );
    assert_eq!(timeline_texts(c, 1).last().unwrap(), "assistant:answer 15");
    assert_eq!(timeline_texts(c, 2).last().unwrap(), "assistant:answer 14");

    let mut s = Store::open("sqlite::memory:").unwrap();
    let o1 = import(&mut s, "opencode", c);
    let files = convo_formats::opencode::storage_files(&session_records(&mut s, &o1.id()).unwrap());
    // Every file of the session, its subagent's and its project's, as on disk.
    let mut on_disk = 0;
    for (rel, bytes) in &files {
        assert_eq!(&std::fs::read(storage.join(rel)).unwrap(), bytes, "{rel}");
        on_disk += 1;
    }
    let mut all = 0;
    let mut stack = vec![storage.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                all += 1;
            }
        }
    }
    assert_eq!(on_disk, all, "every file of the storage is kept");
    // Its branches are not written as new sessions (opencode 1.2 and
    // later read the database only): a clear refusal.
    let paths: Vec<String> = files.iter().map(|(rel, _)| rel.clone()).collect();
    let e = convo_formats::opencode::fork(
        &session_records(&mut s, &o1.id()).unwrap(),
        &paths,
        "alt-1",
        &[],
        0,
        "seed",
    )
    .unwrap_err();
    assert_eq!(e.rule, "unsupported", "{e}");
    assert!(e.render().contains("JSON storage"), "{e}");

    // The next prompt deleted the reverted messages' files: the archive
    // keeps them, main goes on from the revert.
    opencode_storage(
        "after",
        &storage,
        UNIX_EPOCH + Duration::from_secs(1_795_000_100),
    );
    let r = opencode_read(dir.path());
    let c2 = r.conversations.iter().find(|x| x.id == c.id).unwrap();
    let o2 = import(&mut s, "opencode", c2);
    assert!(matches!(o2, Outcome::Updated { .. }), "{o2:?}");
    let tl = s.timeline(&o2.id(), &BranchName::main()).unwrap();
    let last = String::from_utf8_lossy(&tl.last().unwrap().payload).into_owned();
    assert_eq!(last, "answer 16");
    let kept = convo_formats::opencode::storage_files(&session_records(&mut s, &o2.id()).unwrap());
    assert!(
        kept.len() > files.len(),
        "deleted files are kept, new ones added"
    );
    assert_eq!(
        import(&mut s, "opencode", c2),
        Outcome::Existing { id: o2.id() }
    );
    assert!(s.verify().unwrap().is_clean());
}

// ----- two-pass imports --------------------------------------------------------------

/// The nodes of a session in follow order, every field but the hashes (a
/// fork's is random), and its branches' names.
fn shape(s: &mut Store, o: &Outcome) -> (Vec<String>, Vec<String>) {
    let nodes = s.read(|tx| tx.session_nodes(&o.id(), false)).unwrap();
    let fields = nodes
        .iter()
        .map(|(n, _)| {
            let n = &n.node;
            format!(
                "{:?} {} {} {} {} {:?} {}",
                n.kind,
                n.from,
                n.to,
                n.payload.to_hex(),
                n.diagnostics.as_str(),
                n.sequence,
                n.created_at
            )
        })
        .collect();
    let branches = s
        .branches(&o.id())
        .unwrap()
        .iter()
        .map(|b| b.name.to_string())
        .collect();
    (fields, branches)
}

/// `convo import`'s path (an index per record, each message read again as
/// its node is written: `open_session` / `open_rollout` + `import_lazy`)
/// stores exactly the nodes an import of the conversation read whole does,
/// gives the file back byte for byte, and adds only the new lines of a
/// longer version of the file.
#[test]
fn two_pass_import_stores_what_a_whole_read_does() {
    for (format, file) in [("claude-code", CLAUDE), ("codex", CODEX)] {
        let bytes = std::fs::read(fixture(file)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir
            .path()
            .join(std::path::Path::new(file).file_name().unwrap());
        let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
        let half: Vec<u8> = lines[..lines.len() / 2].concat();
        let lazy = |s: &mut Store, path: &std::path::Path| {
            let mut got = convo_formats::open_lazy(format, path)
                .unwrap()
                .unwrap()
                .unwrap();
            let conv = &got.conv;
            let records = &mut got.records;
            s.transaction(|l| {
                convo_llm::ledger::import_lazy(l, format, conv, records, None, 1_800_000_000_000)
            })
            .unwrap()
        };
        // Half the file, then all of it.
        std::fs::write(&path, &half).unwrap();
        let mut s = Store::open("sqlite::memory:").unwrap();
        let first = lazy(&mut s, &path);
        assert!(matches!(first, Outcome::Created { .. }), "{first:?}");
        assert_eq!(joined(&mut s, &first), half, "{format}: half back");
        std::fs::write(&path, &bytes).unwrap();
        let more = lazy(&mut s, &path);
        assert!(
            matches!(more, Outcome::Updated { .. }),
            "{format}: {more:?}"
        );
        assert_eq!(joined(&mut s, &more), bytes, "{format}: all back");
        assert!(
            matches!(lazy(&mut s, &path), Outcome::Existing { .. }),
            "{format}: nothing new"
        );

        // Whole file, both ways: the same nodes.
        let mut a = Store::open("sqlite::memory:").unwrap();
        let oa = lazy(&mut a, &path);
        let mut b = Store::open("sqlite::memory:").unwrap();
        let mut whole = convo_formats::reader(format)
            .unwrap()
            .read_path(&path)
            .unwrap();
        let ob = import(&mut b, format, &whole.conversations.remove(0));
        assert_eq!(oa, ob, "{format}");
        assert_eq!(shape(&mut a, &oa), shape(&mut b, &ob), "{format}");
        assert_eq!(joined(&mut a, &oa), bytes, "{format}: byte for byte");
    }
}

/// A transcript rewritten between the two passes (the agent compacted it,
/// a user edited it) is refused with `changed`, and nothing is stored.
#[test]
fn a_file_rewritten_between_the_passes_is_refused_whole() {
    let bytes = std::fs::read(fixture(CLAUDE)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, &bytes).unwrap();
    let mut got = convo_formats::claude_code::open_session(&path)
        .unwrap()
        .unwrap();
    // Same length, one byte changed in the last record.
    let mut other = bytes.clone();
    let at = other.len() - 10;
    other[at] = if other[at] == b'a' { b'b' } else { b'a' };
    std::fs::write(&path, &other).unwrap();
    let mut s = Store::open("sqlite::memory:").unwrap();
    let conv = &got.conv;
    let records = &mut got.records;
    let e = s
        .transaction(|l| convo_llm::ledger::import_lazy(l, "claude-code", conv, records, None, 0))
        .expect_err("the file changed");
    assert!(
        e.to_string().contains("changed while it was imported"),
        "{e}"
    );
    let kept = got
        .records
        .failed
        .take()
        .expect("the reader's error is kept");
    assert_eq!(kept.rule, "changed");
    assert!(s.sessions().unwrap().is_empty(), "nothing half-imported");
}

/// A record of `DETACHED_FROM` bytes or more is stored as a payload of its
/// own, named by hash from its node's diagnostics (which stay small), and
/// still comes back byte for byte, read whole or in two passes, and after
/// the file grew.
#[test]
fn a_huge_record_is_a_payload_of_its_own_and_comes_back_byte_for_byte() {
    let big = "a \"quoted\" line\n\t".repeat(convo_formats::records::DETACHED_FROM / 16);
    let line = |u: &str, p: Option<&str>, role: &str, text: &str| {
        let mut s = serde_json::to_string(&serde_json::json!({
            "parentUuid": p, "isSidechain": false, "type": role,
            "message": {"role": role, "content": text}, "uuid": u,
            "timestamp": "2026-11-24T15:53:08.139Z", "sessionId": "s-1"}))
        .unwrap();
        s.push('\n');
        s
    };
    let u = |i: u32| format!("00000000-0000-4000-8000-{i:012}");
    let head = line(&u(1), None, "user", "hello") + &line(&u(2), Some(&u(1)), "assistant", "hi");
    let huge = line(&u(3), Some(&u(2)), "user", &big);
    assert!(huge.len() > convo_formats::records::DETACHED_FROM);
    let first = head.clone() + &huge;
    let all = first.clone() + &line(&u(4), Some(&u(3)), "user", "and then?");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s-1.jsonl");
    let lazy = |s: &mut Store| {
        let mut got = convo_formats::open_lazy("claude-code", &path)
            .unwrap()
            .unwrap()
            .unwrap();
        let (conv, records) = (&got.conv, &mut got.records);
        s.transaction(|l| convo_llm::ledger::import_lazy(l, "claude-code", conv, records, None, 0))
            .unwrap()
    };
    std::fs::write(&path, &first).unwrap();
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = lazy(&mut s);
    assert_eq!(joined(&mut s, &o), first.as_bytes());
    std::fs::write(&path, &all).unwrap();
    let o = lazy(&mut s);
    assert!(matches!(o, Outcome::Updated { nodes: 1, .. }), "{o:?}");
    assert_eq!(joined(&mut s, &o), all.as_bytes());
    let nodes = s.read(|tx| tx.session_nodes(&o.id(), false)).unwrap();
    let diag: Vec<&str> = nodes
        .iter()
        .map(|(n, _)| n.node.diagnostics.as_str())
        .collect();
    assert!(
        diag.iter().all(|d| d.len() < 4096),
        "diagnostics stay small"
    );
    let named: Vec<&str> = diag
        .iter()
        .copied()
        .filter(|d| d.contains("\"blob\""))
        .collect();
    assert_eq!(named.len(), 1, "the huge line is named by hash: {diag:?}");
    assert!(named[0].contains(&format!("\"bytes\":{}", huge.len() - 1)));
    assert!(s.verify().unwrap().problems.is_empty());

    // Read whole (one pass, import_all): the nodes of two passes.
    let mut a = Store::open("sqlite::memory:").unwrap();
    let oa = lazy(&mut a);
    let mut b = Store::open("sqlite::memory:").unwrap();
    let mut whole = convo_formats::reader("claude-code")
        .unwrap()
        .read_path(&path)
        .unwrap();
    let ob = import(&mut b, "claude-code", &whole.conversations.remove(0));
    assert_eq!(shape(&mut b, &ob), shape(&mut a, &oa));
    assert_eq!(joined(&mut b, &ob), all.as_bytes());
}

// ----- Bad input: Gemini CLI and opencode ---------------------------------------

/// A legacy chat cut short, or repeating a key inside a message, is an
/// error naming the file and the rule, before anything is imported; the
/// streamed read of a good one gives the same conversation as reading it
/// from memory.
#[test]
fn gemini_cli_legacy_bad_input_is_a_clear_error() {
    let bytes = std::fs::read(fixture(GEMINI_LEGACY)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session-x.json");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = convo_formats::gemini_cli::open_session(&path).expect_err("truncated");
    assert_eq!(e.rule, "json-truncated", "{e}");
    assert!(e.render().contains("session-x.json"), "{e}");

    let text = String::from_utf8(bytes.clone()).unwrap();
    let dup = text.replacen(
        "\"type\": \"user\",",
        "\"type\": \"user\", \"type\": \"gemini\",",
        1,
    );
    assert_ne!(dup, text);
    std::fs::write(&path, &dup).unwrap();
    let e = convo_formats::gemini_cli::open_session(&path).expect_err("repeated key");
    assert_eq!(e.rule, "json-duplicate-key", "{e}");

    let not_chat = "{\"messages\": 3}";
    std::fs::write(&path, not_chat).unwrap();
    let e = convo_formats::gemini_cli::open_session(&path).expect_err("not a chat");
    assert_eq!(e.rule, "wrong-type", "{e}");

    std::fs::write(&path, &bytes).unwrap();
    let streamed = convo_formats::gemini_cli::open_session(&path)
        .unwrap()
        .unwrap()
        .read_all()
        .unwrap()
        .0;
    let whole = one("gemini-cli", &bytes);
    assert_eq!(streamed.messages.len(), whole.messages.len());
    for (a, b) in streamed.messages.iter().zip(&whole.messages) {
        assert_eq!((a.role, &a.text, &a.key), (b.role, &b.text, &b.key));
        assert_eq!(a.extra["records"], b.extra["records"]);
    }
}

/// A record of a type no version writes, a line that is not JSON and a
/// rewind to a message that is not there: kept raw, warned about, and the
/// file still comes back byte for byte.
#[test]
fn gemini_cli_unknown_records_and_a_rewind_to_nowhere_are_kept() {
    let mut bytes = std::fs::read(fixture(GEMINI)).unwrap();
    bytes.extend_from_slice(
        b"{\"$future\":{\"x\":1}}\nnot json at all\n{\"$rewindTo\":\"nowhere\"}\n",
    );
    bytes.extend_from_slice(
        b"{\"id\":\"u9\",\"timestamp\":\"2026-11-24T10:09:00.000Z\",\"type\":\"user\",\"content\":[{\"text\":\"start over\"}]}\n",
    );
    let r = read_bytes("gemini-cli", &bytes);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("not in the conversation (nowhere)")),
        "{:?}",
        r.warnings
    );
    assert!(
        r.warnings.iter().any(|w| w.contains("kept as it is")),
        "{:?}",
        r.warnings
    );
    let c = &r.conversations[0];
    let main = c.turns();
    assert_eq!(main.len(), 1, "the rewind to nowhere starts again");
    assert_eq!(main[0].text, "start over");
    let mut s = Store::open("sqlite::memory:").unwrap();
    let o = import(&mut s, "gemini-cli", c);
    assert_eq!(joined(&mut s, &o), bytes, "byte for byte");
    assert!(s.verify().unwrap().is_clean());
}

/// A part file rewritten between the import's two passes (opencode wrote
/// it meanwhile) is the error `changed`, and the transaction stores
/// nothing; a part of a message that is not there is left out.
#[test]
fn opencode_storage_changed_between_passes_stores_nothing() {
    use std::time::{Duration, UNIX_EPOCH};
    let dir = tempfile::tempdir().unwrap();
    let storage = dir.path().join("storage");
    opencode_storage(
        "reverted",
        &storage,
        UNIX_EPOCH + Duration::from_secs(1_795_000_000),
    );
    // A part pointing at no message.
    let orphan = storage.join("part/msg_nowhere");
    std::fs::create_dir_all(&orphan).unwrap();
    std::fs::write(
        orphan.join("prt_x.json"),
        "{\"type\":\"text\",\"text\":\"lost\"}",
    )
    .unwrap();
    let mut opened = convo_formats::opencode::open(&storage).unwrap();
    // Rewrite one part file: a new modification time.
    let mut parts = Vec::new();
    let mut stack = vec![storage.join("part")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else if !e.path().starts_with(&orphan) {
                parts.push(e.path());
            }
        }
    }
    parts.sort();
    let f = std::fs::File::options()
        .write(true)
        .open(&parts[0])
        .unwrap();
    f.set_modified(UNIX_EPOCH + Duration::from_secs(1_796_000_000))
        .unwrap();
    drop(f);
    let mut s = Store::open("sqlite::memory:").unwrap();
    let mut failed = None;
    let got = s.transaction(|l| {
        opened.each(|c, rows| {
            let o = convo_llm::ledger::import_lazy(l, "opencode", c, rows, None, 0);
            if o.is_err() {
                failed = rows.failed.take();
            }
            o.map(|_| ())
        })
    });
    assert!(got.is_err());
    let e = failed.expect("the loader's error");
    assert_eq!(e.rule, "changed", "{e}");
    assert!(e.render().contains("prt_"), "{e}");
    assert!(s.sessions().unwrap().is_empty(), "nothing half-imported");
    // Read again, it imports whole, and the lost part is not in it.
    let r = opencode_read(dir.path());
    let text: String = r.conversations[0]
        .messages
        .iter()
        .map(|m| m.text.as_str())
        .collect();
    assert!(!text.contains("lost"));
}

/// `convo import`'s re-import of a Claude Code file (crates/convo-cli
/// `agents.rs`): the lines after the stored tail when it can
/// (`open_tail` + `import_tail`), else the whole file read again
/// (`open_session` + `import_lazy`). `whole` always reads it whole. Says
/// whether the tail was read alone.
fn import_grown(
    s: &mut Store,
    format: &str,
    path: &std::path::Path,
    whole: bool,
) -> (Outcome, bool) {
    if !whole {
        let got = s
            .transaction(|l| {
                let Some(convo_llm::ledger::StoredTail {
                    identity: ident,
                    session: id,
                    tail,
                }) = convo_llm::ledger::stored_tail(l.tx(), format, path)?
                else {
                    return Ok(None);
                };
                let opened = convo_formats::open_tail(format, path, &tail, &mut |k| {
                    l.tx().import_key(&id, k).unwrap().is_some()
                })
                .unwrap()
                .unwrap();
                let Some(mut session) = opened else {
                    return Ok(None);
                };
                session.conv.id = Some(ident);
                convo_llm::ledger::import_tail(
                    l,
                    format,
                    &session.conv,
                    &mut session.records,
                    1_800_000_000_000,
                )
                .map(Some)
            })
            .unwrap();
        if let Some(o) = got {
            return (o, true);
        }
    }
    let mut got = convo_formats::open_lazy(format, path)
        .unwrap()
        .unwrap()
        .unwrap();
    let (conv, records) = (&got.conv, &mut got.records);
    let o = s
        .transaction(|l| {
            convo_llm::ledger::import_lazy(l, format, conv, records, None, 1_800_000_000_000)
        })
        .unwrap();
    (o, false)
}

/// Every branch's nodes (kind, from, to, payload, sequence, time), by
/// branch name: what a session says, whichever node carries which record.
fn timelines(s: &mut Store, o: &Outcome) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for b in s.branches(&o.id()).unwrap() {
        let nodes = s.timeline(&o.id(), &b.name).unwrap();
        let fields = nodes
            .iter()
            .map(|n| {
                let n = &n.stored.node;
                format!(
                    "{:?} {} {} {} {:?} {}",
                    n.kind,
                    n.from,
                    n.to,
                    n.payload.to_hex(),
                    n.sequence,
                    n.created_at
                )
            })
            .collect();
        out.push((b.name.to_string(), fields));
    }
    out
}

/// A Claude Code session with what a tail must join to the stored
/// session: attachments and system records between messages (a parent
/// that is not a message), a tool use answered in a later write, a
/// rewound prompt, bookkeeping lines at the end, a subagent transcript.
fn grown_session(dir: &std::path::Path) -> (std::path::PathBuf, Vec<String>, Vec<String>) {
    let u = |i: u32| format!("00000000-0000-4000-8000-{i:012}");
    let rec = |i: u32, p: Option<u32>, v: serde_json::Value| {
        let mut o = serde_json::json!({"parentUuid": p.map(u), "isSidechain": false,
            "uuid": u(i), "timestamp": format!("2026-11-24T15:53:{:02}.000Z", i % 60),
            "sessionId": "s-2", "cwd": "/p"});
        for (k, x) in v.as_object().unwrap() {
            o[k] = x.clone();
        }
        o.to_string()
    };
    let user = |i, p, t: &str| {
        rec(
            i,
            p,
            serde_json::json!({"type": "user", "message": {"role": "user", "content": t}}),
        )
    };
    let answer = |i, p, t: &str| {
        rec(
            i,
            p,
            serde_json::json!({"type": "assistant", "message": {"id": format!("msg_{i}"), "role": "assistant", "model": "m", "content": [{"type": "text", "text": t}], "usage": {"input_tokens": i}}}),
        )
    };
    let lines = vec![
        r#"{"type":"queue-operation","operation":"enqueue","sessionId":"s-2"}"#.to_owned(),
        user(1, None, "list the files"),
        rec(
            2,
            Some(1),
            serde_json::json!({"type": "attachment", "attachment": {"type": "date"}}),
        ),
        rec(
            3,
            Some(2),
            serde_json::json!({"type": "assistant", "message": {"id": "msg_3", "role": "assistant", "model": "m", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]}}),
        ),
        r#"{"type":"cost-state","totalCostUSD":0.1,"sessionId":"s-2"}"#.to_owned(),
        rec(
            4,
            Some(3),
            serde_json::json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"}]}}),
        ),
        answer(5, Some(4), "two files"),
        rec(
            6,
            Some(5),
            serde_json::json!({"type": "system", "subtype": "turn_duration"}),
        ),
        r#"{"type":"file-history-snapshot","sessionId":"s-2"}"#.to_owned(),
        user(7, Some(6), "and the hidden ones?"),
        answer(8, Some(7), "none"),
        user(9, Some(5), "rewound: count them"),
        answer(10, Some(9), "2"),
        r#"{"type":"summary","summary":"files","sessionId":"s-2"}"#.to_owned(),
        user(11, Some(10), "thanks"),
        answer(12, Some(11), "welcome"),
    ];
    let sub = |i, p: Option<u32>, v: serde_json::Value| {
        let mut o: serde_json::Value = serde_json::from_str(&rec(i, p, v)).unwrap();
        o["isSidechain"] = serde_json::json!(true);
        o.to_string()
    };
    let subagent = vec![
        sub(
            101,
            None,
            serde_json::json!({"type": "user", "message": {"role": "user", "content": "look around"}}),
        ),
        sub(
            102,
            Some(101),
            serde_json::json!({"type": "assistant", "message": {"id": "msg_102", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "looked"}]}}),
        ),
        sub(
            103,
            Some(102),
            serde_json::json!({"type": "user", "message": {"role": "user", "content": "more"}}),
        ),
        sub(
            104,
            Some(103),
            serde_json::json!({"type": "assistant", "message": {"id": "msg_104", "role": "assistant", "model": "m", "content": [{"type": "text", "text": "done"}]}}),
        ),
    ];
    (dir.join("s-2.jsonl"), lines, subagent)
}

/// A session re-imported after every line written (what `--watch` does)
/// reads only the new lines once its tail is stored, and ends with the
/// timelines, the nodes and the bytes of a session read whole each time.
#[test]
fn a_grown_transcript_is_read_from_where_its_stored_lines_end() {
    let dir = tempfile::tempdir().unwrap();
    let (path, lines, subagent) = grown_session(dir.path());
    let subdir = dir.path().join("s-2").join("subagents");
    let mut tail_store = Store::open("sqlite::memory:").unwrap();
    let mut whole_store = Store::open("sqlite::memory:").unwrap();
    let (mut tails, mut steps) = (0, 0);
    let mut written = String::new();
    let mut check = |written: &str, sub: Option<&str>, tails: &mut usize| {
        std::fs::write(&path, written).unwrap();
        if let Some(sub) = sub {
            std::fs::create_dir_all(&subdir).unwrap();
            std::fs::write(subdir.join("agent-a.jsonl"), sub).unwrap();
        }
        let (a, by_tail) = import_grown(&mut tail_store, "claude-code", &path, false);
        let (b, _) = import_grown(&mut whole_store, "claude-code", &path, true);
        *tails += usize::from(by_tail);
        steps += 1;
        assert_eq!(a.id(), b.id());
        let (na, nb) = (
            timelines(&mut tail_store, &a),
            timelines(&mut whole_store, &b),
        );
        assert_eq!(na, nb, "after {} bytes (tail: {by_tail})", written.len());
        let recs = session_records(&mut tail_store, &a.id()).unwrap();
        let main: String = recs
            .iter()
            .filter(|r| r.0.is_empty())
            .map(|r| format!("{}\n", r.2))
            .collect();
        assert_eq!(
            main,
            session_records(&mut whole_store, &b.id())
                .unwrap()
                .iter()
                .filter(|r| r.0.is_empty())
                .map(|r| format!("{}\n", r.2))
                .collect::<String>()
        );
        // The first prompt goes on from the bookkeeping line imported
        // alone before it (records after a message may wait for the next).
        if written.matches('\n').count() == 2 {
            assert_eq!(main, written, "the prompt after bookkeeping alone");
        }
        // (The lines of a rewritten file are those first stored.)
        assert!(
            written.starts_with(&main) || !written.contains("list the files"),
            "stored lines are the file's"
        );
    };
    // (The first import holds bookkeeping lines alone: the messages
    // after them go on from the node holding them.)
    for l in &lines {
        written.push_str(l);
        written.push('\n');
        check(&written, None, &mut tails);
    }
    // A subagent transcript appears (the whole session is read again),
    // then grows (its tail is read).
    let mut sub = String::new();
    for l in &subagent {
        sub.push_str(l);
        sub.push('\n');
        check(&written, Some(&sub), &mut tails);
    }
    // A partial last line waits; a rewritten file is read whole.
    check(&(written.clone() + "{\"type\":\"user\""), None, &mut tails);
    let before = tails;
    // (Its last line is checked: an earlier line rewritten to the same
    // length goes unseen, as by a whole read, which matches lines by
    // number.)
    let rewritten = written
        .replacen("list the files", "list the FILES", 1)
        .replacen("welcome", "WELCOME", 1);
    check(&rewritten, None, &mut tails);
    assert_eq!(tails, before, "a rewritten file is read whole");
    assert!(
        tails >= lines.len() + subagent.len() - 4,
        "{tails} of {steps} imports read the tail alone"
    );
    assert!(tail_store.verify().unwrap().problems.is_empty());
    // Once more: nothing new, by the tail.
    let (o, by_tail) = import_grown(&mut tail_store, "claude-code", &path, false);
    assert!(matches!(o, Outcome::Existing { .. }), "{o:?}");
    assert!(!by_tail || matches!(o, Outcome::Existing { .. }));
}

/// A Codex rollout with a huge user message (escapes included): the
/// two-pass import, which turns the line's bytes into the text in place and
/// stores the line after its node, stores the nodes a whole read does and
/// gives the file back byte for byte.
#[test]
fn a_huge_codex_message_is_read_once_and_comes_back_byte_for_byte() {
    let big = "said \"this\"\n\tand é 😀 \\ ".repeat(convo_formats::records::DETACHED_FROM / 20);
    let item = |role: &str, kind: &str, text: &str| {
        serde_json::json!({"timestamp": "2026-11-24T15:53:08.139Z", "type": "response_item",
            "payload": {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}})
        .to_string()
            + "\n"
    };
    let text = serde_json::json!({"timestamp": "2026-11-24T15:53:08.139Z", "type": "session_meta",
        "payload": {"id": "c-1", "cwd": "/p", "cli_version": "0.169.0"}})
    .to_string()
        + "\n"
        + &item("user", "input_text", "hello")
        + &item("assistant", "output_text", "hi")
        + &item("user", "input_text", &big)
        + &item("assistant", "output_text", "long");
    huge_message_round_trip(
        "codex",
        "rollout-2026-11-24T15-53-08-c-1.jsonl",
        &text,
        &big,
    );
}

/// `text`, written as `name`, holding the message `big`: imported by the
/// two-pass import (`open_lazy`), its nodes are those of a whole read, the
/// file comes back byte for byte, the message's node holds `big` and the
/// store verifies.
fn huge_message_round_trip(format: &str, name: &str, text: &str, big: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let mut a = Store::open("sqlite::memory:").unwrap();
    let mut got = convo_formats::open_lazy(format, &path)
        .unwrap()
        .unwrap()
        .unwrap();
    let (conv, records) = (&got.conv, &mut got.records);
    let oa = a
        .transaction(|l| convo_llm::ledger::import_lazy(l, format, conv, records, None, 0))
        .unwrap();
    let mut b = Store::open("sqlite::memory:").unwrap();
    let mut whole = convo_formats::reader(format)
        .unwrap()
        .read_path(&path)
        .unwrap();
    let ob = import(&mut b, format, &whole.conversations.remove(0));
    assert_eq!(shape(&mut a, &oa), shape(&mut b, &ob));
    assert_eq!(joined(&mut a, &oa), text.as_bytes());
    let main = a.timeline(&oa.id(), &BranchName::main()).unwrap();
    assert!(main.iter().any(|n| n.payload == big.as_bytes()), "the text");
    assert!(a.verify().unwrap().problems.is_empty());
}

/// A Gemini CLI chat (`.jsonl`) with a huge user message: its text is
/// its line's one string, so the line's bytes become the text in place
/// and the line is stored after its node; the nodes are a whole read's and
/// the file comes back byte for byte.
#[test]
fn a_huge_gemini_cli_message_is_read_once_and_comes_back_byte_for_byte() {
    let big = "said \"this\"\n\tand é 😀 \\ ".repeat(convo_formats::records::DETACHED_FROM / 20);
    let msg = |id: &str, kind: &str, content: serde_json::Value| {
        serde_json::json!({"id": id, "timestamp": "2026-11-24T15:53:09.139Z", "type": kind,
            "content": content})
        .to_string()
            + "\n"
    };
    let text = serde_json::json!({"sessionId": "g-1", "projectHash": "abc",
        "startTime": "2026-11-24T15:53:08.139Z", "lastUpdated": "2026-11-24T15:53:08.139Z",
        "kind": "main"})
    .to_string()
        + "\n"
        + &msg("u1", "user", serde_json::json!([{"text": "hello"}]))
        + &msg("g1", "gemini", serde_json::json!("hi"))
        + &msg("u2", "user", serde_json::json!([{"text": big}]))
        + &msg("g2", "gemini", serde_json::json!("long"));
    huge_message_round_trip(
        "gemini-cli",
        "session-2026-11-24T15-53-g1.jsonl",
        &text,
        &big,
    );
}

/// The same in a legacy pretty-printed `.json` chat: the huge message is
/// alone in its record (its lines, the comma after it), read from that
/// record as a `.jsonl` line is, so its bytes become the text in place;
/// the file comes back byte for byte and nothing is stored twice (the
/// payloads are the text and that record: no copy of the message's own
/// bytes).
#[test]
fn a_huge_message_of_a_legacy_gemini_cli_chat_is_read_once() {
    let big = "said \"this\"\n\tand é 😀 \\ ".repeat(convo_formats::records::DETACHED_FROM / 20);
    let msg = |id: &str, kind: &str, content: serde_json::Value| {
        serde_json::json!({"id": id, "timestamp": "2026-11-24T15:53:09.139Z", "type": kind,
            "content": content})
    };
    let doc = serde_json::json!({"sessionId": "g-2", "projectHash": "abc",
        "startTime": "2026-11-24T15:53:08.139Z", "lastUpdated": "2026-11-24T15:53:08.139Z",
        "messages": [msg("u1", "user", serde_json::json!([{"text": "hello"}])),
            msg("g1", "gemini", serde_json::json!("hi")),
            msg("u2", "user", serde_json::json!([{"text": big}])),
            msg("g2", "gemini", serde_json::json!("long"))]});
    let text = serde_json::to_string_pretty(&doc).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session-2026-11-24T15-53-g2.json");
    std::fs::write(&path, &text).unwrap();
    let mut s = Store::open("sqlite::memory:").unwrap();
    let mut got = convo_formats::open_lazy("gemini-cli", &path)
        .unwrap()
        .unwrap()
        .unwrap();
    let (conv, records) = (&got.conv, &mut got.records);
    let o = s
        .transaction(|l| convo_llm::ledger::import_lazy(l, "gemini-cli", conv, records, None, 0))
        .unwrap();
    let back = convo_formats::gemini_cli::file_bytes(&session_records(&mut s, &o.id()).unwrap());
    assert!(back == text.as_bytes(), "byte for byte");
    let main = s.timeline(&o.id(), &BranchName::main()).unwrap();
    assert!(main.iter().any(|n| n.payload == big.as_bytes()), "the text");
    let v = s.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    assert!(
        (v.blob_bytes as usize) < big.len() + text.len() + text.len() / 10,
        "the text and the message's record, not a third copy: {} bytes of payloads for a {} byte file",
        v.blob_bytes,
        text.len()
    );
}

/// The same for a Codex rollout (the fixture, one line more at a time):
/// after the first import, every re-import reads only the new lines, and
/// the session ends as a whole read makes it, byte for byte.
#[test]
fn a_grown_rollout_is_read_from_where_its_stored_lines_end() {
    let bytes = std::fs::read(fixture(CODEX)).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|&b| b == b'\n').collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join(std::path::Path::new(CODEX).file_name().unwrap());
    let mut tail_store = Store::open("sqlite::memory:").unwrap();
    let mut whole_store = Store::open("sqlite::memory:").unwrap();
    let mut tails = 0;
    // The first import holds its first message (a prompt, past Codex's
    // injected context).
    let first = lines
        .iter()
        .position(|l| {
            l.windows(12).any(|w| w == b"\"input_text\"")
                && !l.windows(5).any(|w| w == b"<envi")
                && !l.windows(5).any(|w| w == b"<user")
                && !l.windows(5).any(|w| w == b"<perm")
                && !l.windows(5).any(|w| w == b"# AGE")
        })
        .unwrap();
    for n in first + 1..=lines.len() {
        std::fs::write(&path, lines[..n].concat()).unwrap();
        let (a, by_tail) = import_grown(&mut tail_store, "codex", &path, false);
        let (b, _) = import_grown(&mut whole_store, "codex", &path, true);
        tails += usize::from(by_tail);
        assert_eq!(
            timelines(&mut tail_store, &a),
            timelines(&mut whole_store, &b),
            "after {n} lines (tail: {by_tail})"
        );
        let stored = joined(&mut tail_store, &a);
        assert_eq!(stored, joined(&mut whole_store, &b), "after {n} lines");
        assert!(lines[..n].concat().starts_with(&stored));
    }
    assert_eq!(
        tails,
        lines.len() - first - 1,
        "all but the first by the tail"
    );
    assert!(tail_store.verify().unwrap().problems.is_empty());
}
