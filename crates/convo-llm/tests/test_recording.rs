//! The recording format: a session with every timeline (forks, a promote,
//! state, a binary payload) round-trips byte- and hash-exact, and an
//! edited line is refused naming the line.

use convo_core::{BranchName, Diagnostics, HashPrefix, Kind};
use convo_llm::recording;
use convo_store::{Draft, Store};

fn draft(kind: Kind, payload: &[u8], at: i64) -> Draft {
    Draft {
        kind,
        from: "a".into(),
        to: "b".into(),
        payload: payload.to_vec(),
        diagnostics: Diagnostics::parse(r#"{"model":"m","n":1.5}"#).unwrap(),
        state: None,
        sequence: None,
        created_at: at,
    }
}

fn turn(s: &mut Store, id: &convo_core::SessionId, branch: &str, text: &str, at: i64) {
    let b = BranchName::new(branch).unwrap();
    let drafts = [
        draft(Kind::Invoke, text.as_bytes(), at),
        draft(Kind::Request, br#"{"messages":[{"content":"hi"}]}"#, at + 1),
        draft(Kind::Response, &[0xff, 0x00, 0x01], at + 2),
        draft(Kind::Complete, b"done", at + 3),
    ];
    s.transaction(|l| l.append_many(id, &b, &drafts)).unwrap();
}

/// A session with two turns on main, a fork with a turn and state, promoted.
fn session() -> (Store, convo_store::backend::SessionRow) {
    let mut s = Store::open("sqlite::memory:").unwrap();
    let row = s
        .transaction(|l| l.new_session("app", Some("trip"), 1_700_000_000_000))
        .unwrap();
    turn(&mut s, &row.id, "main", "Paris?", 1_700_000_001_000);
    let first = s
        .branch(&row.id, &BranchName::main())
        .unwrap()
        .head
        .unwrap();
    turn(&mut s, &row.id, "main", "Lyon?", 1_700_000_002_000);
    let alt = BranchName::new("alt").unwrap();
    let from = HashPrefix::parse(&first.to_hex()).unwrap();
    s.transaction(|l| l.fork(&row.id, &from, &alt, 1_700_000_003_000))
        .unwrap();
    s.transaction(|l| l.state_put(&row.id, &alt, "k", b"\x00v"))
        .unwrap();
    turn(&mut s, &row.id, "alt", "Rome?", 1_700_000_004_000);
    s.transaction(|l| l.promote(&row.id, &alt, 1_700_000_005_000))
        .unwrap();
    (s, row)
}

#[test]
fn a_recording_round_trips_byte_and_hash_exact() {
    let (mut s, row) = session();
    let bytes = recording::write(&mut s, &row).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.starts_with(r#"{"format":"convo.recording.v1""#));
    assert!(
        text.contains(r#""payload":"Paris?""#),
        "text payloads stay text"
    );
    assert!(text.contains(r#""payload_encoding":"base64","payload":"/wAB""#));
    let rec = recording::read("t.jsonl", &bytes).unwrap();
    assert_eq!(rec.nodes.len(), 4 + 4 + 1 + 4 + 1);
    assert_eq!(rec.branches.len(), 2);
    let mut other = Store::open("sqlite::memory:").unwrap();
    let got = recording::load(&mut other, &rec).unwrap();
    assert_eq!(
        got,
        recording::Loaded::Created {
            nodes: 14,
            branches: 2
        }
    );
    let again = other.find_session(&row.id.to_string()).unwrap();
    assert_eq!(recording::write(&mut other, &again).unwrap(), bytes);
    assert!(other.verify().unwrap().is_clean());
    let main = other.branch(&row.id, &BranchName::main()).unwrap();
    let root = other
        .state_root(&row.id, &BranchName::main(), None)
        .unwrap();
    assert_eq!(
        other.state_get(&root, "k").unwrap().as_deref(),
        Some(&b"\x00v"[..])
    );
    assert_eq!(
        main.head,
        s.branch(&row.id, &BranchName::main()).unwrap().head
    );
    // Loading it again changes nothing.
    assert_eq!(
        recording::load(&mut other, &rec).unwrap(),
        recording::Loaded::Existing
    );
}

#[test]
fn an_edited_line_is_refused_with_its_number() {
    let (mut s, row) = session();
    let text = String::from_utf8(recording::write(&mut s, &row).unwrap()).unwrap();
    for (edit, what) in [
        (("Paris?", "Berlin"), "payload"),
        ((r#""model":"m""#, r#""model":"x""#), "diagnostics"),
        (("\"from\":\"a\"", "\"from\":\"z\""), "sender"),
    ] {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let at = lines
            .iter()
            .position(|l| l.contains(edit.0) && l.contains("\"hash\""))
            .unwrap();
        lines[at] = lines[at].replacen(edit.0, edit.1, 1);
        let edited = lines.join("\n");
        let e = recording::read("t.jsonl", edited.as_bytes()).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(&format!("line {}", at + 1)), "{what}: {msg}");
        assert!(msg.contains("edited"), "{what}: {msg}");
    }
    // A node whose parent is missing (a line deleted) does not load.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.remove(2);
    let rec = recording::read("t.jsonl", lines.join("\n").as_bytes()).unwrap();
    let mut other = Store::open("sqlite::memory:").unwrap();
    let e = recording::load(&mut other, &rec).unwrap_err();
    assert!(e.to_string().contains("is not stored"), "{e}");
    assert!(other.sessions().unwrap().is_empty(), "nothing was written");
}
