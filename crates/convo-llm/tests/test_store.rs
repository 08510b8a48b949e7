//! The mapping into the store and back.
use crate::common::{fixture, one, read, texts};
use convo_core::{BranchName, Kind};
use convo_formats::{Conversation, Message, Role, Writer};
use convo_llm::ledger::{Outcome, export, import_all, session_id};
use convo_store::Store;

fn store() -> Store {
    Store::open("sqlite::memory:").unwrap()
}

fn import(s: &mut Store, format: &str, c: &Conversation) -> Outcome {
    import_all(s, &[(format, c)], None, 1_800_000_000_000)
        .unwrap()
        .remove(0)
}

#[test]
fn convo_file_imports_as_invoke_and_complete_and_exports_back() {
    let mut s = store();
    let c = one("convo", "seed_example.convo");
    let out = import(&mut s, "convo", &c);
    let Outcome::Created {
        id,
        nodes,
        branches,
        ..
    } = out
    else {
        panic!("{out:?}")
    };
    assert_eq!((nodes, branches), (4, 1));
    let sess = s.find_session(&id.to_string()).unwrap();
    assert_eq!(sess.agent, "Gem");
    let tl = s.timeline(&id, &BranchName::main()).unwrap();
    let kinds: Vec<Kind> = tl.iter().map(|n| n.stored.node.kind).collect();
    assert_eq!(
        kinds,
        [Kind::Invoke, Kind::Complete, Kind::Invoke, Kind::Complete]
    );
    assert_eq!(
        tl[0].stored.node.created_at, 1_761_238_800_000,
        "time from the file"
    );
    assert_eq!(tl[1].stored.node.from, "Gem");
    assert_eq!(tl[1].stored.node.to, "founder");
    assert_eq!(
        tl[1].stored.node.diagnostics.to_value()["model"],
        "gemini-2.5-pro"
    );
    // Export gives the same file back, participants' metadata included.
    let back = export(&mut s, &sess, &BranchName::main()).unwrap();
    let a = convo_formats::convo::Convo.write(&c).unwrap();
    let b = convo_formats::convo::Convo.write(&back).unwrap();
    assert_eq!(String::from_utf8(a).unwrap(), String::from_utf8(b).unwrap());
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn importing_twice_creates_nothing_new() {
    let mut s = store();
    let r = read("sharegpt", "sharegpt.json");
    let items: Vec<(&str, &Conversation)> =
        r.conversations.iter().map(|c| ("sharegpt", c)).collect();
    let first = import_all(&mut s, &items, None, 0).unwrap();
    assert!(first.iter().all(|o| matches!(o, Outcome::Created { .. })));
    let nodes_before = s.follow(0, 100_000).unwrap().len();
    let second = import_all(&mut s, &items, None, 0).unwrap();
    assert!(
        second.iter().all(|o| matches!(o, Outcome::Existing { .. })),
        "{second:?}"
    );
    assert_eq!(
        first.iter().map(Outcome::id).collect::<Vec<_>>(),
        second.iter().map(Outcome::id).collect::<Vec<_>>()
    );
    assert_eq!(s.follow(0, 100_000).unwrap().len(), nodes_before);
    assert_eq!(s.sessions().unwrap().len(), 2);
    // The id depends on format and identity only.
    assert_eq!(first[0].id(), session_id("sharegpt", &r.conversations[0]));
}

#[test]
fn chatgpt_tree_becomes_forks_sharing_their_prefix() {
    let mut s = store();
    let c = one("chatgpt", "chatgpt_conversations.json");
    let Outcome::Created { id, branches, .. } = import(&mut s, "chatgpt", &c) else {
        panic!()
    };
    assert_eq!(branches, 3);
    let names: Vec<String> = s
        .branches(&id)
        .unwrap()
        .iter()
        .map(|b| b.name.to_string())
        .collect();
    assert_eq!(names, ["alt-1", "alt-2", "main"]);
    let main = s.timeline(&id, &BranchName::main()).unwrap();
    let alt1 = s.timeline(&id, &BranchName::new("alt-1").unwrap()).unwrap();
    // alt-1 = system, question (shared), fork node, regenerated answer.
    assert_eq!(alt1[0].stored.hash, main[0].stored.hash);
    assert_eq!(alt1[1].stored.hash, main[1].stored.hash);
    assert_eq!(alt1[2].stored.node.kind, Kind::Fork);
    assert_eq!(alt1[3].payload, b"Start with the Eiffel Tower.");
    // The tool call is a request to `web`, its answer a response from it.
    let req = main
        .iter()
        .find(|n| n.stored.node.kind == Kind::Request)
        .unwrap();
    assert_eq!(req.stored.node.to, "web");
    let resp = main
        .iter()
        .find(|n| n.stored.node.kind == Kind::Response)
        .unwrap();
    assert_eq!(resp.stored.node.from, "web");
    assert_eq!(resp.stored.node.sequence, req.stored.node.sequence);
    // Exporting alt-2 gives its messages, synthetic nodes skipped.
    let sess = s.find_session(&id.to_string()).unwrap();
    let back = export(&mut s, &sess, &BranchName::new("alt-2").unwrap()).unwrap();
    let want: Vec<String> = c
        .timeline_messages(2)
        .iter()
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(texts(&back), want);
    let back_main = export(&mut s, &sess, &BranchName::main()).unwrap();
    let want: Vec<String> = c
        .timeline_messages(0)
        .iter()
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(texts(&back_main), want);
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn answers_without_a_question_get_a_synthetic_invoke_that_export_skips() {
    let mut s = store();
    let c = Conversation::linear(vec![
        Message::new(Role::Assistant, "bot", "Hello! I start."),
        Message::new(Role::Assistant, "bot", "And I go on."),
        Message::new(Role::Tool, "calc", "42"),
        Message::new(Role::User, "me", "thanks"),
    ]);
    let Outcome::Created { id, .. } = import(&mut s, "test", &c) else {
        panic!()
    };
    let tl = s.timeline(&id, &BranchName::main()).unwrap();
    let kinds: Vec<Kind> = tl.iter().map(|n| n.stored.node.kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Invoke,
            Kind::Complete,
            Kind::Invoke,
            Kind::Complete,
            Kind::Invoke,
            Kind::Request,
            Kind::Response,
            Kind::Invoke
        ]
    );
    let sess = s.find_session(&id.to_string()).unwrap();
    let back = export(&mut s, &sess, &BranchName::main()).unwrap();
    assert_eq!(texts(&back), texts(&c));
    let roles: Vec<Role> = back.turns().iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::Assistant, Role::Assistant, Role::Tool, Role::User]
    );
}

#[test]
fn timelines_with_different_roots_fork_from_an_anchor() {
    let mut c = Conversation::linear(vec![Message::new(Role::User, "u", "first version")]);
    c.messages
        .push(Message::new(Role::User, "u", "edited first message"));
    c.timelines.push(convo_formats::Timeline {
        name: "edit".into(),
        leaf: Some(1),
    });
    let mut s = store();
    let Outcome::Created { id, .. } = import(&mut s, "test", &c) else {
        panic!()
    };
    let sess = s.find_session(&id.to_string()).unwrap();
    let a = export(&mut s, &sess, &BranchName::main()).unwrap();
    let b = export(&mut s, &sess, &BranchName::new("edit").unwrap()).unwrap();
    assert_eq!(texts(&a), ["first version"]);
    assert_eq!(texts(&b), ["edited first message"]);
}

/// The ledger keeps the nodes of the messages where timelines part (two
/// children or more, a timeline's last), not of every message: a timeline
/// ending inside another, or leaving it at a message with two children,
/// still forks where it should.
#[test]
fn timelines_part_where_they_end_or_branch() {
    let mut c = Conversation::linear(vec![
        Message::new(Role::User, "u", "q1"),
        Message::new(Role::Assistant, "a", "a1"),
        Message::new(Role::User, "u", "q2"),
        Message::new(Role::Assistant, "a", "a2"),
    ]);
    let mut other = Message::new(Role::User, "u", "q2 again");
    other.parent = Some(1);
    c.messages.push(other);
    let mut answer = Message::new(Role::Assistant, "a", "a2 again");
    answer.parent = Some(4);
    c.messages.push(answer);
    for (name, leaf) in [("inside", 1), ("again", 5), ("stub", 4)] {
        c.timelines.push(convo_formats::Timeline {
            name: name.into(),
            leaf: Some(leaf),
        });
    }
    let mut s = store();
    let Outcome::Created { id, branches, .. } = import(&mut s, "test", &c) else {
        panic!()
    };
    assert_eq!(branches, 4);
    let sess = s.find_session(&id.to_string()).unwrap();
    for (b, want) in [
        ("main", &["q1", "a1", "q2", "a2"][..]),
        ("inside", &["q1", "a1"][..]),
        ("again", &["q1", "a1", "q2 again", "a2 again"][..]),
        ("stub", &["q1", "a1", "q2 again"][..]),
    ] {
        let got = export(&mut s, &sess, &BranchName::new(b).unwrap()).unwrap();
        assert_eq!(texts(&got), want, "{b}");
    }
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn every_import_format_round_trips_through_the_store_to_every_export_format() {
    let mut s = store();
    let mut convs: Vec<(&str, Conversation)> = Vec::new();
    for (f, name) in [
        ("convo", "tricky.convo"),
        ("chatgpt", "chatgpt_conversations.json"),
        ("claude", "claude_conversations.json"),
        ("sharegpt", "sharegpt.json"),
        ("openai", "openai.jsonl"),
        ("session-json", "session.json"),
        ("clog", "storage/conversations"),
    ] {
        for c in read(f, name).conversations {
            convs.push((f, c));
        }
    }
    let items: Vec<(&str, &Conversation)> = convs.iter().map(|(f, c)| (*f, c)).collect();
    let outs = import_all(&mut s, &items, None, 0).unwrap();
    assert_eq!(outs.len(), convs.len());
    for ((f, c), o) in convs.iter().zip(&outs) {
        let sess = s.find_session(&o.id().to_string()).unwrap();
        let back = export(&mut s, &sess, &BranchName::main()).unwrap();
        assert_eq!(texts(&back), texts(&c.main_only()), "{f}");
        for w in convo_formats::EXPORT_FORMATS {
            let bytes = convo_formats::writer(w).unwrap().write(&back);
            assert!(bytes.is_ok(), "{f} → {w}: {:?}", bytes.err());
        }
    }
    assert!(s.verify().unwrap().is_clean());
    let _ = fixture;
}
