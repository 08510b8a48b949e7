use crate::common::{TestEnv, is_hash};
use convo_testutil::Backend;

#[test]
fn record_prints_only_the_hash_and_session_get_shows_the_turn() {
    let t = TestEnv::new();
    let s = t.session("researcher");
    assert!(s.starts_with("ses-"), "{s}");
    let inv = t
        .run(&[
            "record",
            &s,
            "invoke",
            "--from",
            "cli",
            "--to",
            "researcher",
            "--payload",
            "Tell me about Paris",
        ])
        .ok();
    assert!(is_hash(&inv), "{inv}");
    let req = t
        .run_stdin(
            &["record", &s, "request", "--to", "infer"],
            b"{\"prompt\":\"Paris\"}",
        )
        .ok();
    let resp = t
        .run(&[
            "record",
            &s,
            "response",
            "--from",
            "infer",
            "--payload",
            "Paris is…",
            "--diagnostics",
            r#"{"status":200,"ms":12}"#,
        ])
        .ok();
    let done = t
        .run(&[
            "record",
            &s,
            "complete",
            "--payload",
            "Paris is the capital.",
        ])
        .ok();
    let v = t.run(&["session", "get", &s, "--json"]).json();
    let nodes = v["nodes"].as_array().unwrap();
    let hashes: Vec<&str> = nodes.iter().map(|n| n["hash"].as_str().unwrap()).collect();
    assert_eq!(
        hashes,
        [inv.as_str(), req.as_str(), resp.as_str(), done.as_str()]
    );
    assert_eq!(nodes[1]["sequence"], 1);
    assert_eq!(nodes[2]["sequence"], 1);
    assert_eq!(nodes[2]["diagnostics"]["status"], 200);
    assert_eq!(nodes[1]["payload"], "{\"prompt\":\"Paris\"}");
    assert_eq!(nodes[0]["submission"], nodes[3]["submission"]);
    let human = t.run(&["session", "get", &s]).ok();
    assert!(
        human.contains("invoke") && human.contains("Tell me about Paris"),
        "{human}"
    );
    let shown = t.run(&["show", &done[..10], "--json"]).json();
    assert_eq!(shown["hash"], done.as_str());
    assert_eq!(shown["parent"], resp.as_str());
    let log = t.run(&["log", &s, "--json"]).json();
    assert_eq!(log[0]["hash"], done.as_str(), "log is newest first");
}

#[test]
fn fork_promote_and_state_through_the_cli() {
    let t = TestEnv::new();
    let s = t
        .run(&["session", "new", "--agent", "todo", "--title", "chores"])
        .ok();
    t.run(&["state", "put", "chores", "list", "milk"]).ok();
    let said = t
        .run(&["say", "chores", "--user", "add milk", "--agent", "added"])
        .ok();
    let first_complete = said.lines().nth(1).unwrap().to_owned();
    t.run(&["state", "put", &s, "list", "milk,eggs"]).ok();
    t.run(&["say", &s, "--user", "add eggs", "--agent", "added"])
        .ok();
    let fork = t
        .run(&[
            "session",
            "fork",
            &s,
            "--from",
            &first_complete[..12],
            "--branch",
            "no-eggs",
        ])
        .ok();
    assert!(is_hash(&fork));
    assert_eq!(
        t.run(&["state", "get", &s, "list", "--branch", "no-eggs"])
            .ok(),
        "milk"
    );
    assert_eq!(t.run(&["state", "get", &s, "list"]).ok(), "milk,eggs");
    assert_eq!(
        t.run(&["state", "get", &s, "list", "--at", &first_complete])
            .ok(),
        "milk"
    );
    t.run(&[
        "say",
        &s,
        "--user",
        "add bread",
        "--agent",
        "added",
        "--branch",
        "no-eggs",
    ])
    .ok();
    let promoted = t
        .run(&["session", "promote", &s, "--branch", "no-eggs", "--json"])
        .json();
    let sealed = promoted["sealed_as"].as_str().unwrap().to_owned();
    assert!(sealed.starts_with("broken-"), "{sealed}");
    let branches = t.run(&["branch", "list", &s, "--json"]).json();
    let names: Vec<&str> = branches
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [sealed.as_str(), "main"]);
    let refused = t.run(&[
        "say", &s, "--user", "x", "--agent", "y", "--branch", &sealed,
    ]);
    assert_eq!(refused.code(), 4);
    assert!(refused.stderr().contains("sealed"), "{}", refused.stderr());
    assert!(refused.stderr().contains("hint:"), "{}", refused.stderr());
    let list = t.run(&["state", "list", &s, "--json"]).json();
    assert_eq!(list["entries"][0]["key"], "list");
    assert_eq!(list["entries"][0]["value"], "milk");
    assert_eq!(list["entries"][0]["value_encoding"], "utf8");
    t.run(&["state", "delete", &s, "list"]).ok();
    assert_eq!(
        t.run(&["state", "get", &s, "list"]).code(),
        3,
        "a key not set is not found"
    );
    assert!(t.run(&["verify"]).ok().starts_with("ok:"));
}

#[test]
fn bad_input_gets_one_clear_error_and_writes_nothing() {
    let t = TestEnv::new();
    let s = t.session("a");
    let cases: &[(&[&str], &str)] = &[
        (
            &["record", &s, "gossip", "--payload", "x"],
            "unknown node kind",
        ),
        (
            &["record", &s, "request", "--payload", "x"],
            "must follow an invoke",
        ),
        (
            &[
                "record",
                &s,
                "invoke",
                "--payload",
                "x",
                "--diagnostics",
                "[1]",
            ],
            "diagnostics",
        ),
        (
            &["record", &s, "invoke", "--payload", "x", "--branch", "a..b"],
            "not a valid branch name",
        ),
        (
            &["record", "ses-nope", "invoke", "--payload", "x"],
            "no session matches",
        ),
        (
            &["record", &s, "invoke", "--payload-file", "/does/not/exist"],
            "cannot read payload file",
        ),
        (&["show", "zz"], "not a hash prefix"),
        (&["show", "0123"], "no node matches"),
        (
            &["session", "fork", &s, "--from", "abcd", "--branch", "x"],
            "no node matches",
        ),
        (
            &["session", "promote", &s, "--branch", "main"],
            "already the canonical",
        ),
        (
            &["record", &s, "complete", "--payload", "x", "--state", "12"],
            "--state",
        ),
    ];
    for (args, expect) in cases {
        let r = t.run(args);
        // Exit codes by kind: 3 not found, 4 refused, 2 anything else wrong.
        let code = if expect.starts_with("no ") {
            3
        } else if expect.contains("canonical") || expect.contains("sealed") {
            4
        } else {
            2
        };
        assert_eq!(r.code(), code, "{args:?}: {}", r.stderr());
        assert!(r.stderr().contains(expect), "{args:?}: {}", r.stderr());
        assert!(r.stdout().is_empty(), "{args:?} printed {}", r.stdout());
        assert!(!r.stderr().contains("panicked"), "{args:?}");
    }
    let v = t.run(&["session", "get", &s, "--json"]).json();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 0);
    let verify = t.run(&["verify", "--json"]).json();
    assert_eq!(verify["ok"], true);
}

#[test]
fn verify_exits_1_and_names_the_node_after_a_payload_is_edited() {
    let t = TestEnv::new();
    let s = t.session("a");
    let said = t
        .run(&["say", &s, "--user", "hello", "--agent", "hi there"])
        .ok();
    let answer = said.lines().nth(1).unwrap().to_owned();
    let conn = rusqlite::Connection::open(t.db()).unwrap();
    let n = conn.execute("UPDATE blobs SET data = CAST('hi therE' AS BLOB) WHERE data = CAST('hi there' AS BLOB)", []).unwrap();
    assert_eq!(n, 1);
    drop(conn);
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 1, "{}", r.stdout());
    assert!(r.stdout().contains("blob "), "{}", r.stdout());
    assert!(
        r.stdout().contains(&format!("node {answer}")),
        "{}",
        r.stdout()
    );
    let j = t.run(&["verify", "--json"]);
    assert_eq!(j.code(), 1);
    let v: serde_json::Value = serde_json::from_str(&j.stdout()).unwrap();
    assert_eq!(v["ok"], false);
    // Reads check what they serve: the edited bytes are never shown or
    // exported, each refusal names the payload and points at verify.
    for args in [
        vec!["show", &answer],
        vec!["export", &s, "--format", "openai"],
        vec!["export", &s, "--format", "markdown"],
    ] {
        let r = t.run(&args);
        assert_eq!(r.code(), 5, "{args:?}: {}", r.stderr());
        assert!(!r.stdout().contains("hi therE"), "{args:?}: {}", r.stdout());
        assert!(
            r.stderr().contains("does not hash"),
            "{args:?}: {}",
            r.stderr()
        );
        assert!(
            r.stderr().contains("convo verify"),
            "{args:?}: {}",
            r.stderr()
        );
    }
}

#[test]
fn demo_builds_a_session_with_a_fork_and_a_promote() {
    let t = TestEnv::new();
    let v = t.run(&["demo", "--json"]).json();
    let s = v["session"].as_str().unwrap();
    let names = v["branches"].as_array().unwrap();
    assert_eq!(names.len(), 2);
    let got = t.run(&["session", "get", s, "--json"]).json();
    let kinds: Vec<&str> = got["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"fork") && kinds.contains(&"promote") && kinds.contains(&"request"),
        "{kinds:?}"
    );
    assert!(t.run(&["verify"]).ok().starts_with("ok:"));
}

#[test]
fn store_url_and_home_flags_are_honoured() {
    let t = TestEnv::new();
    let other = t.home().join("elsewhere").join("x.db");
    let url = format!("sqlite://{}", other.display());
    let s = t
        .run(&["--store", &url, "session", "new", "--agent", "a"])
        .ok();
    assert!(other.exists());
    let none = t.run(&["session", "list", "--json"]);
    assert_eq!(none.code(), 3);
    assert!(none.stderr().contains("no store at"), "{}", none.stderr());
    let listed = t
        .run(&["--store", &url, "session", "list", "--json"])
        .json();
    assert_eq!(listed[0]["id"], s.as_str());
    let bad = t.run(&["--store", "postgres://localhost/x", "session", "list"]);
    assert_eq!(bad.code(), 5, "store unavailable");
    assert!(
        bad.stderr().contains("cannot open store"),
        "{}",
        bad.stderr()
    );
}

fn assert_subset(expected: &serde_json::Value, got: &serde_json::Value, at: &str) {
    match (expected, got) {
        (serde_json::Value::Object(e), serde_json::Value::Object(g)) => {
            for (k, v) in e {
                let gv = g.get(k).unwrap_or(&serde_json::Value::Null);
                assert_subset(v, gv, &format!("{at}.{k}"));
            }
        }
        (serde_json::Value::Array(e), serde_json::Value::Array(g)) => {
            assert_eq!(e.len(), g.len(), "{at}: length");
            for (i, (x, y)) in e.iter().zip(g).enumerate() {
                assert_subset(x, y, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(expected, got, "{at} after the migration"),
    }
}

/// A store written by convo's first schema (version 1: UNIQUE hash indexes,
/// a per-node session index) is kept under `tests/fixtures/store-v1` with
/// what `session get --json` and `state list --json` printed for it then. It
/// opens, migrates in place (version 2: the session index becomes runs),
/// verifies clean, reads back exactly as before and takes new appends.
#[test]
fn a_version_1_store_migrates_and_reads_back_the_same() {
    let t = TestEnv::new();
    let fx =
        convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1");
    std::fs::copy(fx.join("convo.db"), t.db()).unwrap();
    let version = |db: &std::path::Path| -> i64 {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(version(&t.db()), 1);

    let mut compared = 0;
    let mut sessions = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(&fx).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        let (ses, what) = stem.split_once('.').unwrap();
        sessions.insert(ses.to_owned());
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let got = if what == "state" {
            t.run(&["state", "list", ses, "--json"]).json()
        } else {
            t.run(&["session", "get", ses, "--branch", what, "--json"])
                .json()
        };
        // Every field printed then is printed the same now (fields added
        // since, such as turn numbers and payload_encoding, are extra).
        assert_subset(&expected, &got, &name);
        compared += 1;
    }
    assert_eq!(compared, 5, "three timelines and two states");
    assert_eq!(
        version(&t.db()),
        15,
        "migrated to the newest schema (4: search, 5: redactions, 6: blob keys, 7: turn numbers, 8: chunks, 9: thread index, 10: open turns, 11: OTLP export bodies, 12: whole payloads chunked in place, 13: import index, 14: thread indexes of the completes carrying a key, 15: imported files' looks)"
    );
    // Turn numbers were stored in place (verify, below, checks each one).
    let numbered: i64 = rusqlite::Connection::open(t.db())
        .unwrap()
        .query_row("SELECT count(*) FROM nodes WHERE ctx_turn > 0", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(numbered > 0, "no node of the old store got a turn number");
    let runs: i64 = rusqlite::Connection::open(t.db())
        .unwrap()
        .query_row("SELECT count(*) FROM session_runs", [], |r| r.get(0))
        .unwrap();
    assert!(
        runs >= 7,
        "the fixture's two sessions interleave: {runs} runs"
    );
    assert!(t.run(&["verify"]).ok().starts_with("ok: 26 nodes"));

    for ses in &sessions {
        let before = t.run(&["log", ses, "--json"]).json();
        t.run(&["say", ses, "--user", "after", "--agent", "the migration"])
            .ok();
        let after = t.run(&["log", ses, "--json"]).json();
        let n = |v: &serde_json::Value| v.as_array().map(Vec::len);
        assert_eq!(n(&after).unwrap(), n(&before).unwrap() + 2, "{after}");
    }
    assert!(t.run(&["verify"]).ok().starts_with("ok: 30 nodes"));
}

#[test]
fn verify_reports_a_garbage_store_file_as_one_json_document() {
    let t = TestEnv::new();
    std::fs::write(t.db(), vec![0x5a; 8192]).unwrap();
    let j = t.run(&["verify", "--json"]);
    assert_eq!(j.code(), 1, "{}", j.stderr());
    let v: serde_json::Value = serde_json::from_str(&j.stdout()).expect("one JSON document");
    assert_eq!(v["ok"], false);
    assert_eq!(v["problems"][0]["object"], "database");
    assert_eq!(v["problems"][0]["kind"], "database");
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 1);
    assert!(
        r.stdout().contains("not a SQLite database"),
        "{}",
        r.stdout()
    );
}

#[test]
fn verify_reports_rows_edited_by_hand_and_exits_1() {
    let t = TestEnv::new();
    let s = t.session("a");
    t.run(&["say", &s, "--user", "hello", "--agent", "hi"]).ok();
    let conn = rusqlite::Connection::open(t.db()).unwrap();
    conn.execute("UPDATE branches SET head = NULL", []).unwrap();
    conn.execute("UPDATE sessions SET agent = 'mallory'", [])
        .unwrap();
    drop(conn);
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 1, "{}", r.stdout());
    let out = r.stdout();
    assert!(
        out.contains(&format!("branch {s}/main: its head is none")),
        "{out}"
    );
    assert!(
        out.contains(&format!("session {s}: its agent is `mallory`")),
        "{out}"
    );
}

#[test]
fn a_checkpoint_catches_a_rollback_that_verify_alone_cannot() {
    let t = TestEnv::new();
    let s = t.session("a");
    t.run(&["say", &s, "--user", "one", "--agent", "1"]).ok();
    t.run(&["say", &s, "--user", "two", "--agent", "2"]).ok();
    let cp = t.home().join("elsewhere/cp.json");
    std::fs::create_dir_all(cp.parent().unwrap()).unwrap();
    t.run(&["checkpoint", "--out", cp.to_str().unwrap()]).ok();
    assert!(
        t.home().join("checkpoint.key").exists(),
        "made on first use"
    );
    // Stdout is the other place it can go: one JSON document.
    let printed = t.run(&["checkpoint"]).json();
    assert_eq!(printed["format"], "convo.checkpoint.v1");
    assert_eq!(printed["nodes"], 4);
    let ok = t
        .run(&["verify", "--checkpoint", cp.to_str().unwrap()])
        .ok();
    assert!(ok.contains("extends 1 checkpoint"), "{ok}");
    t.run(&["say", &s, "--user", "three", "--agent", "3"]).ok();
    assert!(
        t.run(&["verify", "--checkpoint", cp.to_str().unwrap()])
            .out
            .status
            .success()
    );
    // Truncate the last two turns consistently: verify alone finds nothing.
    let conn = rusqlite::Connection::open(t.db()).unwrap();
    let second: Vec<u8> = conn
        .query_row("SELECT hash FROM nodes WHERE seq = 2", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("DELETE FROM nodes WHERE seq > 2; UPDATE session_runs SET last = 2;")
        .unwrap();
    conn.execute("UPDATE branches SET head = ?1", [&second])
        .unwrap();
    drop(conn);
    assert!(t.run(&["verify"]).out.status.success());
    let r = t.run(&["verify", "--json", "--checkpoint", cp.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let v: serde_json::Value = serde_json::from_str(&r.stdout()).unwrap();
    let text = v["problems"].to_string();
    assert!(text.contains("truncated"), "{text}");
    assert!(text.contains(&format!("branch {s}/main")), "{text}");
    // An edited checkpoint is refused by its signature.
    let edited = std::fs::read_to_string(&cp)
        .unwrap()
        .replace("\"nodes\": 4", "\"nodes\": 2");
    std::fs::write(&cp, edited).unwrap();
    let r = t.run(&["verify", "--checkpoint", cp.to_str().unwrap()]);
    assert_eq!(r.code(), 1);
    assert!(
        r.stdout().contains("signature does not verify"),
        "{}",
        r.stdout()
    );
}

#[test]
fn record_say_and_state_print_json_with_json() {
    let t = TestEnv::new();
    let s = t.session("researcher");
    let rec: serde_json::Value = serde_json::from_str(
        &t.run(&["record", &s, "invoke", "--payload", "hi", "--json"])
            .ok(),
    )
    .unwrap();
    assert_eq!(rec["kind"], "invoke");
    assert_eq!(rec["payload"], "hi");
    assert!(is_hash(rec["hash"].as_str().unwrap()), "{rec}");
    let said: serde_json::Value = serde_json::from_str(
        &t.run(&["say", &s, "--user", "q", "--agent", "a", "--json"])
            .ok(),
    )
    .unwrap();
    let said = said.as_array().unwrap();
    assert_eq!(said.len(), 2);
    assert_eq!(
        (said[0]["kind"].as_str(), said[1]["payload"].as_str()),
        (Some("invoke"), Some("a"))
    );
    assert_eq!(
        said[0]["parent"], rec["hash"],
        "appended after the recorded node"
    );
    let put: serde_json::Value =
        serde_json::from_str(&t.run(&["state", "put", &s, "k", "v", "--json"]).ok()).unwrap();
    let got: serde_json::Value =
        serde_json::from_str(&t.run(&["state", "get", &s, "k", "--json"]).ok()).unwrap();
    assert_eq!(got["value"], "v");
    assert_eq!(got["root"], put["root"]);
    let del: serde_json::Value =
        serde_json::from_str(&t.run(&["state", "delete", &s, "nope", "--json"]).ok()).unwrap();
    assert_eq!(del["existed"], false);
}

/// `init`, `ingest`, `state put/get/list` and `git verify` take `--json`,
/// and state values that are not UTF-8 come back losslessly (base64,
/// marked) on both backends.
fn write_commands_print_json(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let init = t.run(&["init", "--json"]).json();
    assert_eq!(
        init["backend"],
        if backend == Backend::Postgres {
            "postgres"
        } else {
            "sqlite"
        }
    );
    if backend == Backend::Sqlite {
        assert_eq!(init["created"], true, "{init}");
        assert_eq!(t.run(&["init", "--json"]).json()["created"], false);
    }
    let s = t.session("a");
    let lines = t
        .run_stdin(
            &["ingest", &s, "--json", "--batch", "2"],
            b"{\"kind\":\"invoke\",\"payload\":\"q\"}\n{\"kind\":\"complete\",\"payload\":\"a\"}\n{\"kind\":\"invoke\",\"payload\":\"q2\"}\n",
        )
        .ok();
    let printed: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let logged = t.run(&["log", &s, "--json"]).json();
    // `log` lists the newest first.
    let logged: Vec<&serde_json::Value> = logged.as_array().unwrap().iter().rev().collect();
    assert_eq!(printed.len(), 3);
    assert_eq!(logged.len(), 3);
    for (p, l) in printed.iter().zip(logged) {
        assert!(is_hash(p["hash"].as_str().unwrap()));
        for field in ["hash", "seq", "kind", "payload", "parent", "session"] {
            assert_eq!(p[field], l[field], "{field} differs from log --json");
        }
    }

    let bytes = [0x61u8, 0xff, 0x00, 0x1b];
    t.run_stdin(&["state", "put", &s, "nonce", "--value-file", "-"], &bytes)
        .ok();
    let list = t.run(&["state", "list", &s, "--json"]).json();
    assert_eq!(list["entries"][0]["key"], "nonce");
    assert_eq!(list["entries"][0]["value_encoding"], "base64");
    assert_eq!(list["entries"][0]["value"], "Yf8AGw==");
    let got = t.run(&["state", "get", &s, "nonce", "--json"]).json();
    assert_eq!(got["value"], "Yf8AGw==");
    let human = t.run(&["state", "get", &s, "nonce"]).ok();
    assert!(human.contains("4 bytes, not UTF-8"), "{human}");
    t.run(&["state", "put", &s, "esc", "\u{1b}[31mred"]).ok();
    let human = t.run(&["state", "list", &s]).ok();
    assert!(
        !human.contains('\u{1b}'),
        "an escape reached the terminal: {human:?}"
    );

    t.run(&["git", "sync"]).ok();
    let v = t.run(&["git", "verify", "--json"]);
    assert_eq!(v.code(), 0, "{}", v.stderr());
    let v = v.json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["layout"], "dag");
    assert_eq!(v["problems"], serde_json::json!([]));
    // A projected node missing from the repository is a problem, exit 1.
    let repo = t.home().join("conversations");
    let refs = std::process::Command::new("git")
        .args([
            "--git-dir",
            repo.to_str().unwrap(),
            "for-each-ref",
            "--format=%(refname)",
        ])
        .output()
        .unwrap();
    let first = String::from_utf8(refs.stdout).unwrap();
    let first = first
        .lines()
        .next()
        .expect("the projection has refs")
        .to_owned();
    let st = std::process::Command::new("git")
        .args([
            "--git-dir",
            repo.to_str().unwrap(),
            "update-ref",
            "-d",
            &first,
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let v = t.run(&["git", "verify", "--json"]);
    assert_eq!(v.code(), 1, "{}", v.stderr());
    let v: serde_json::Value = serde_json::from_str(&v.stdout()).expect("one JSON document");
    assert_eq!(v["ok"], false);
    assert!(!v["problems"].as_array().unwrap().is_empty(), "{v}");
}

/// The checkpoint files of `dir` (names sort by cursor) and their cursors.
fn checkpoint_cursors(dir: &std::path::Path) -> Vec<u64> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".checkpoint"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|n| {
            let text = std::fs::read_to_string(dir.join(n)).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            v["cursor"].as_u64().unwrap()
        })
        .collect()
}

/// Waits (up to a minute: a deadline, not a measurement) until `done`.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `convo checkpoint --every-appends N --dir DIR` follows the store: a
/// checkpoint at start, one after every N appends, a last one on SIGTERM;
/// each file is new (names sort by cursor) and `verify --checkpoint DIR`
/// checks them all. On SQLite, a rollback made consistently behind
/// convo's back (verify alone finds nothing) is then named.
fn automatic_checkpoints_every_n_appends(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t.session("a");
    t.run(&["say", &s, "--user", "one", "--agent", "1"]).ok();
    let dir = t.home().join("offsite");
    let child = t
        .cmd()
        .args(["checkpoint", "--every-appends", "4", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the first checkpoint", || {
        checkpoint_cursors(&dir) == vec![2]
    });
    // Two turns: four appends, one checkpoint.
    t.run(&["say", &s, "--user", "two", "--agent", "2"]).ok();
    t.run(&["say", &s, "--user", "three", "--agent", "3"]).ok();
    wait_until("a checkpoint after 4 appends", || {
        checkpoint_cursors(&dir) == vec![2, 6]
    });
    // One more turn: not yet due, but written on stop.
    t.run(&["say", &s, "--user", "four", "--agent", "4"]).ok();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("3 checkpoint(s) written"), "{err}");
    assert_eq!(checkpoint_cursors(&dir), vec![2, 6, 8]);
    let d = dir.to_str().unwrap();
    let ok = t.run(&["verify", "--checkpoint", d]).ok();
    assert!(ok.contains("extends 3 checkpoint(s)"), "{ok}");
    if backend != Backend::Sqlite {
        return;
    }
    // Roll main back by its last turn behind convo's back, consistently.
    let conn = rusqlite::Connection::open(t.db()).unwrap();
    let sixth: Vec<u8> = conn
        .query_row("SELECT hash FROM nodes WHERE seq = 6", [], |r| r.get(0))
        .unwrap();
    conn.execute_batch("DELETE FROM nodes WHERE seq > 6; UPDATE session_runs SET last = 6;")
        .unwrap();
    conn.execute("UPDATE branches SET head = ?1", [&sixth])
        .unwrap();
    drop(conn);
    assert!(t.run(&["verify"]).out.status.success());
    let r = t.run(&["verify", "--checkpoint", d]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let said = r.stdout();
    assert!(said.contains("truncated"), "{said}");
    assert!(
        said.contains(&format!("branch {s}/main: its head at the checkpoint"))
            && said.contains("is no longer in the store"),
        "{said}"
    );
    // Against the newest checkpoint only: the two earlier ones still hold.
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max()
        .unwrap();
    assert_eq!(said.matches("(against ").count(), 2, "{said}");
    assert_eq!(said.matches(&newest).count(), 2, "{said}");
}

/// `--every-minutes`: a change that appends no node (a state write, a fact
/// of the journal) is checkpointed when the period is up; with nothing
/// changed since, stopping writes nothing more.
#[test]
fn automatic_checkpoints_by_time_cover_facts_too() {
    let t = TestEnv::new();
    let s = t.session("a");
    t.run(&["say", &s, "--user", "one", "--agent", "1"]).ok();
    let dir = t.home().join("cps");
    let child = t
        .cmd()
        .args(["checkpoint", "--every-minutes", "0.005", "--dir"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the first checkpoint", || {
        checkpoint_cursors(&dir).len() == 1
    });
    t.run(&["state", "put", &s, "topic", "x"]).ok();
    wait_until("a checkpoint of the state write", || {
        checkpoint_cursors(&dir).len() == 2
    });
    assert_eq!(checkpoint_cursors(&dir), vec![2, 2], "no node appended");
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 checkpoint(s) written"), "{err}");
    let ok = t
        .run(&["verify", "--checkpoint", dir.to_str().unwrap()])
        .ok();
    assert!(ok.contains("extends 2 checkpoint(s)"), "{ok}");
}

/// One-node writers leave SQLite's log for later (no fsync at exit), but
/// fold it into the database once it passes 1 MiB: the log stays bounded
/// over many processes, and nothing is lost.
#[test]
fn short_writers_keep_the_log_bounded() {
    let t = TestEnv::new();
    let s = t.session("a");
    let wal = t.home().join("convo.db-wal");
    let mut largest = 0;
    for i in 0..80 {
        let q = format!("question {i} {}", "x".repeat(6000));
        t.run(&["say", &s, "--user", &q, "--agent", "ok"]).ok();
        largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
    }
    assert!(largest > 0, "say left no log: it folded at exit");
    assert!(
        largest <= (1 << 20) + (256 << 10),
        "the log grew to {largest} bytes"
    );
    let v = t.run(&["verify", "--json"]).json();
    assert_eq!(v["nodes"], 160);
    assert_eq!(v["ok"], true);
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    write_commands_print_json,
    automatic_checkpoints_every_n_appends,
);
