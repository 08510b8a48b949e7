//! `convo import`, `convo export` and `convo check`, end to end.
use crate::common::TestEnv;

fn fixture(name: &str) -> String {
    convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn session_count(t: &TestEnv) -> usize {
    t.run(&["session", "list", "--json"])
        .json()
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn import_prints_created_ids_and_a_second_import_creates_nothing() {
    let t = TestEnv::new();
    let out = t
        .run(&[
            "import",
            "-v",
            &fixture("seed_example.convo"),
            &fixture("chatgpt_conversations.json"),
            &fixture("storage/conversations"),
        ])
        .ok();
    let ids: Vec<&str> = out.lines().collect();
    assert_eq!(ids.len(), 4, "{out}");
    assert!(ids.iter().all(|i| i.starts_with("ses-")));
    let again = t.run(&[
        "import",
        "-v",
        &fixture("seed_example.convo"),
        &fixture("chatgpt_conversations.json"),
        &fixture("storage/conversations"),
    ]);
    assert_eq!(again.ok(), "", "nothing created");
    assert!(
        again.stderr().contains("already imported"),
        "{}",
        again.stderr()
    );
    for id in &ids {
        assert!(again.stderr().contains(id));
    }
    assert_eq!(session_count(&t), 4);
    let branches = t.run(&["branch", "list", "Paris trip", "--json"]).json();
    assert_eq!(branches.as_array().unwrap().len(), 3, "main, alt-1, alt-2");
    assert!(t.run(&["verify"]).out.status.success());
}

#[test]
fn a_bad_file_stops_the_whole_import_and_writes_nothing() {
    let t = TestEnv::new();
    t.run(&["init"]).ok();
    let bad = t.home().join("bad.json");
    std::fs::write(
        &bad,
        "[{\"conversations\": [{\"from\": \"human\", \"value\": 7}]}]",
    )
    .unwrap();
    let r = t.run(&[
        "import",
        "-v",
        "--format",
        "sharegpt",
        &fixture("sharegpt.json"),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(r.code(), 2);
    let err = r.stderr();
    assert!(err.contains("bad.json:1:"), "{err}");
    assert!(err.contains("$[0].conversations[0].value"), "{err}");
    assert!(err.contains("expected a string"), "{err}");
    assert_eq!(session_count(&t), 0, "nothing written");

    // Hostile nesting: a clear error, no crash, nothing written.
    let deep = t.home().join("deep.json");
    let mut s = String::from(
        "[{\"mapping\": {\"a\": {\"message\": {\"author\": {\"role\": \"user\"}, \"content\": ",
    );
    s.push_str(&"[".repeat(100_000));
    s.push_str(&"]".repeat(100_000));
    s.push_str("}}}, \"current_node\": \"a\"}]");
    std::fs::write(&deep, s).unwrap();
    let r = t.run(&["import", "-v", deep.to_str().unwrap()]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(r.stderr().contains("128 levels"), "{}", r.stderr());
    assert_eq!(session_count(&t), 0);

    let r = t.run(&[
        "import",
        "-v",
        t.home().join("missing.json").to_str().unwrap(),
    ]);
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("no such file"), "{}", r.stderr());
}

#[test]
fn export_writes_every_format() {
    let t = TestEnv::new();
    let id = t
        .run(&["import", "-v", &fixture("seed_example.convo")])
        .ok();
    let convo = t.run(&["export", &id, "--format", "convo"]).ok();
    let original = std::fs::read_to_string(fixture("seed_example.convo")).unwrap();
    assert_eq!(
        convo,
        original.trim_end(),
        "the seed file comes back byte for byte"
    );

    let out = t.home().join("out.convo");
    t.run(&[
        "export",
        &id[..12],
        "--format",
        "convo",
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), original);
    let r = t.run(&["check", out.to_str().unwrap()]);
    assert_eq!(r.code(), 0, "{}", r.stderr());

    let line = t.run(&["export", &id, "--format", "openai"]).json();
    let roles: Vec<&str> = line["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);

    let html = t.run(&["export", &id, "--format", "html"]).ok();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("Sounds good."));
    let md = t.run(&["export", &id, "--format", "markdown"]).ok();
    assert!(md.contains("### Gem (gemini-2.5-pro)"), "{md}");
    let sj = t.run(&["export", &id, "--format", "session-json"]).json();
    assert_eq!(sj["history"].as_array().unwrap().len(), 4);
    assert_eq!(sj["open"], serde_json::Value::Null);

    let dir = t.home().join("storage");
    t.run(&[
        "export",
        &id,
        "--format",
        "clog",
        "-o",
        dir.to_str().unwrap(),
    ])
    .ok();
    let folders: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(folders.len(), 1);
    let folder = folders.into_iter().next().unwrap().unwrap().path();
    assert!(folder.join("chat.jsonl").is_file() && folder.join("notes.jsonl").is_file());
    // …and that folder imports back as a new session with the same turns.
    let back = t.run(&["import", "-v", dir.to_str().unwrap()]).ok();
    assert!(back.starts_with("ses-"), "{back}");

    let r = t.run(&["export", &id, "--format", "convo", "--branch", "nope"]);
    assert_eq!(r.code(), 3);
    assert!(r.stderr().contains("no branch"), "{}", r.stderr());
}

#[test]
fn native_sessions_export_too() {
    let t = TestEnv::new();
    let s = t.session("researcher");
    t.run(&[
        "say",
        &s,
        "--user",
        "Tell me about Paris",
        "--agent",
        "Paris is the capital.",
    ])
    .ok();
    let line = t.run(&["export", &s, "--format", "openai"]).json();
    assert_eq!(line["messages"][0]["role"], "user");
    assert_eq!(line["messages"][1]["content"], "Paris is the capital.");
    let convo = t.run(&["export", &s, "--format", "convo"]).ok();
    assert!(
        convo.starts_with("### @cli\nTell me about Paris\n\n### @researcher\n"),
        "{convo}"
    );
    let f = t.home().join("native.convo");
    std::fs::write(&f, format!("{convo}\n")).unwrap();
    t.run(&["check", f.to_str().unwrap()]).ok();
}

#[test]
fn check_exits_1_with_the_rule_line_and_column() {
    let t = TestEnv::new();
    let bad = t.home().join("bad.convo");
    std::fs::write(&bad, "### @a\nhi\n\n### @b\nyo\n\n----\n{\"type\": \"dialog\", \"time\": \"2025-10-23\", \"participants\": [\"a\"]}\n").unwrap();
    let r = t.run(&[
        "check",
        &fixture("seed_example.convo"),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(r.code(), 1);
    assert!(
        r.stdout()
            .contains("seed_example.convo: ok (4 turns, 2 participants)"),
        "{}",
        r.stdout()
    );
    let err = r.stderr();
    assert!(
        err.contains("bad.convo:4:1: error[names-mismatch]"),
        "{err}"
    );
    assert!(err.contains("4 | ### @b"), "{err}");
    let j = t.run(&["check", bad.to_str().unwrap(), "--json"]);
    assert_eq!(j.code(), 1);
    let v: serde_json::Value = serde_json::from_str(&j.stdout()).unwrap();
    assert_eq!(v[0]["rule"], "names-mismatch");
    assert_eq!(v[0]["line"], 4);
    assert_eq!(t.run(&["check", &fixture("tricky.convo")]).code(), 0);
}
