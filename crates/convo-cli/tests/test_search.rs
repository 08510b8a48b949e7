//! `convo search` end to end on SQLite and PostgreSQL, and the generated
//! completions and manual pages.

use crate::common::{TestEnv, is_hash};
use convo_testutil::Backend;

fn ingest(t: &TestEnv, s: &str, branch: &str, lines: &str) {
    t.run_stdin(&["ingest", s, "--branch", branch], lines.as_bytes())
        .ok();
}

fn search_end_to_end(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t
        .run(&["session", "new", "--agent", "bot", "--title", "trip"])
        .ok();
    ingest(
        &t,
        &s,
        "main",
        concat!(
            r#"{"kind":"invoke","payload":"What is the capital of France?"}"#,
            "\n",
            r#"{"kind":"complete","payload":"Paris is the capital.\nLovely city."}"#,
            "\n",
            r#"{"kind":"invoke","payload":"And its population?"}"#,
            "\n",
            r#"{"kind":"complete","payload":"About 2 million people."}"#,
            "\n",
        ),
    );
    t.run(&[
        "session", "fork", &s, "--from", "main@1", "--branch", "retry",
    ])
    .ok();
    ingest(
        &t,
        &s,
        "retry",
        concat!(
            r#"{"kind":"invoke","payload":"And its population?"}"#,
            "\n",
            r#"{"kind":"complete","payload":"About 2.1 million people, \u001b]0;pwned\u0007 says the capital's census."}"#,
            "\n",
        ),
    );

    // JSON: best first, every field of the wire type, the index up to date.
    let r = t.run(&["search", "capital", "--json"]).json();
    let hits = r["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 3, "{r}");
    assert_eq!(r["scanned"], 0, "the index caught up before searching");
    assert!(r["indexed"].as_u64().unwrap() >= 7);
    for h in hits {
        assert!(is_hash(h["node"]["hash"].as_str().unwrap()));
        assert!(h["node"]["payload"].is_null());
        assert!(h["score"].as_f64().is_some());
        let snip = h["snippet"].as_str().unwrap();
        let [a, b] = [
            h["marks"][0][0].as_u64().unwrap(),
            h["marks"][0][1].as_u64().unwrap(),
        ];
        assert_eq!(&snip[a as usize..b as usize].to_lowercase(), "capital");
    }
    let q = hits.iter().find(|h| h["node"]["kind"] == "invoke").unwrap();
    assert_eq!(q["turn"], 1);
    assert_eq!(q["branches"], serde_json::json!(["main", "retry"]));
    let census = hits
        .iter()
        .find(|h| h["snippet"].as_str().unwrap().contains("census"))
        .unwrap();
    assert_eq!(census["branches"], serde_json::json!(["retry"]));
    assert_eq!(census["turn"], 2);

    // Filters and phrases.
    let only = |args: &[&str]| -> usize {
        let mut v = vec!["search"];
        v.extend_from_slice(args);
        v.push("--json");
        let r = t.run(&v);
        let doc: serde_json::Value = serde_json::from_str(&r.stdout()).expect("one document");
        let n = doc["hits"].as_array().unwrap().len();
        assert_eq!(
            r.code(),
            if n == 0 { 1 } else { 0 },
            "{args:?}: no hit is exit 1"
        );
        n
    };
    assert_eq!(
        only(&["million", "--session", "trip", "--branch", "main"]),
        1
    );
    assert_eq!(
        only(&["million", "--session", "trip", "--branch", "retry"]),
        1
    );
    assert_eq!(only(&["million"]), 2);
    assert_eq!(only(&["capital", "--kind", "complete"]), 2);
    assert_eq!(only(&["capital", "--from", "cli"]), 1);
    assert_eq!(only(&["capital", "--since", "1h"]), 3);
    assert_eq!(only(&["capital", "--until", "2000-01-01"]), 0);
    assert_eq!(only(&["\"capital of france\""]), 1);
    assert_eq!(only(&["popul*", "-n", "1"]), 1);
    assert_eq!(only(&["popul*"]), 2);

    // Human output: BRANCH@TURN, the session, the snippet made safe,
    // highlighted only with color.
    let plain = t.run(&["search", "census", "--color", "never"]).ok();
    assert!(plain.contains("retry@2"), "{plain}");
    assert!(plain.contains("\"trip\""), "{plain}");
    assert!(plain.contains("\\x1b]0;pwned\\x07"), "{plain}");
    assert!(!plain.contains('\u{1b}'), "{plain:?}");
    let colored = t.run(&["search", "census", "--color", "always"]).ok();
    assert!(
        colored.contains("\u{1b}[1;31mcensus\u{1b}[0m"),
        "{colored:?}"
    );
    assert!(!colored.contains("\u{1b}]0;pwned"), "{colored:?}");

    // No match: exit 1, like grep; a query without words is a usage error.
    let none = t.run(&["search", "zanzibar"]);
    assert_eq!(none.code(), 1);
    assert!(none.stdout().is_empty());
    let bad = t.run(&["search", "--", "--- !!"]);
    assert_eq!(bad.code(), 2, "{}", bad.stderr());
    assert!(bad.stderr().contains("holds no word"), "{}", bad.stderr());
    assert_ne!(
        t.run(&["search", "x", "--session", "trip", "--branch", "nope"])
            .code(),
        0
    );

    // New nodes are indexed by the next search; --reindex rebuilds the same.
    ingest(
        &t,
        &s,
        "main",
        r#"{"kind":"invoke","payload":"capital again"}"#,
    );
    let again = t.run(&["search", "capital", "--json"]).json();
    assert_eq!(again["hits"].as_array().unwrap().len(), 4);
    assert_eq!(again["scanned"], 0);
    let rebuilt = t.run(&["search", "capital", "--reindex", "--json"]).json();
    assert_eq!(rebuilt["hits"], again["hits"]);
    assert_eq!(t.run(&["search", "--reindex"]).code(), 0);

    // The session's agent and what a call's diagnostics say.
    let ops = t
        .run(&["session", "new", "--agent", "other", "--title", "ops"])
        .ok();
    ingest(
        &t,
        &ops,
        "main",
        r#"{"kind":"invoke","payload":"capital outage","diagnostics":{"model":"gpt-x","status":503}}"#,
    );
    assert_eq!(only(&["capital", "--agent", "bot"]), 4);
    assert_eq!(only(&["capital", "--agent", "other"]), 1);
    assert_eq!(only(&["capital", "--model", "gpt-x", "--failed"]), 1);
    assert_eq!(only(&["capital", "--failed", "--agent", "bot"]), 0);
    assert_eq!(only(&["capital", "--status", "503"]), 1);
    assert!(t.run(&["verify"]).ok().contains("ok"));
}

#[test]
fn completions_name_every_command() {
    let t = TestEnv::new();
    let bash = t.run(&["completions", "bash"]).ok();
    for cmd in [
        "session",
        "search",
        "diff",
        "completions",
        "man",
        "--reindex",
    ] {
        assert!(bash.contains(cmd), "bash completion lacks {cmd}");
    }
    assert!(
        t.run(&["completions", "zsh"])
            .ok()
            .starts_with("#compdef convo")
    );
    assert!(
        t.run(&["completions", "fish"])
            .ok()
            .contains("complete -c convo")
    );
    assert!(
        t.run(&["completions", "powershell"])
            .ok()
            .contains("Register-ArgumentCompleter")
    );
    assert!(
        t.run(&["completions", "elvish"])
            .ok()
            .contains("edit:completion:arg-completer[convo]")
    );
    assert_eq!(t.run(&["completions", "tcsh"]).code(), 2);
    // Bash accepts the script.
    let check = std::process::Command::new("bash")
        .args(["-n", "-c", &bash])
        .output();
    if let Ok(o) = check {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

#[test]
fn man_pages_render_for_every_command() {
    let t = TestEnv::new();
    let top = t.run(&["man"]).ok();
    assert!(
        top.starts_with(".ie") || top.contains(".TH convo 1"),
        "{top}"
    );
    let page = t.run(&["man", "session", "retitle"]).ok();
    assert!(page.contains(".TH convo-session-retitle"), "{page}");
    assert!(page.contains("\\-\\-clear"), "{page}");
    assert_eq!(t.run(&["man", "nope"]).code(), 2);

    let dir = t.home().join("man1");
    t.run(&["man", "-o", dir.to_str().unwrap()]).ok();
    for name in [
        "convo.1",
        "convo-session.1",
        "convo-session-list.1",
        "convo-search.1",
    ] {
        assert!(dir.join(name).is_file(), "{name} missing");
    }
    let search = std::fs::read_to_string(dir.join("convo-search.1")).unwrap();
    assert!(search.contains("\\-\\-reindex"), "{search}");
    // Renders with man(1) where it is installed.
    if let Ok(o) = std::process::Command::new("man")
        .args(["-l", dir.join("convo-session.1").to_str().unwrap()])
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        && o.status.success()
    {
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("retitle"), "{text}");
    }
}

#[test]
fn every_command_help_has_an_example() {
    let t = TestEnv::new();
    let dir = t.home().join("pages");
    t.run(&["man", "-o", dir.to_str().unwrap()]).ok();
    let mut checked = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        let path: Vec<&str> = name.trim_end_matches(".1").split('-').skip(1).collect();
        let mut args = path.clone();
        args.push("--help");
        let help = t.run(&args).ok();
        assert!(
            help.contains("Examples:"),
            "`convo {}` --help has no example:\n{help}",
            path.join(" ")
        );
        if !path.is_empty() {
            // Global options apart, and never in the usage line.
            assert!(help.contains("Global options:"), "{help}");
            let usage = help.lines().find(|l| l.starts_with("Usage:")).unwrap();
            assert!(
                !usage.contains("--home") && !usage.contains("--store"),
                "{usage}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} pages");
    // ingest shows the shape of the lines it reads.
    let ingest = t.run(&["ingest", "--help"]).ok();
    assert!(
        ingest.contains(r#"{"kind": "invoke", "payload": "Tell me about Paris"}"#),
        "{ingest}"
    );
    assert!(ingest.contains("payload_encoding"), "{ingest}");
    // record keeps its explanation of submissions.
    assert!(
        t.run(&["record", "--help"])
            .ok()
            .contains("open submission")
    );
}

/// A session with one timeline places its hits from the stored turn
/// numbers, without walking the timeline; the same answer as a walk.
#[test]
fn hits_in_a_one_timeline_session_carry_their_turns() {
    let t = TestEnv::new();
    let s = t.session("a");
    for (q, a) in [
        ("first", "alpha"),
        ("second", "bravo"),
        ("third", "charlie"),
    ] {
        t.run(&["say", &s, "--user", q, "--agent", a]).ok();
    }
    for (word, turn) in [("alpha", 1), ("bravo", 2), ("third", 3)] {
        let r = t.run(&["search", word, "--json"]).json();
        let hit = &r["hits"][0];
        assert_eq!(hit["turn"], turn, "{word}: {r}");
        assert_eq!(hit["branches"], serde_json::json!(["main"]), "{word}: {r}");
    }
}

/// `--agent`: only the sessions of that agent, even when every better
/// ranked hit belongs to another agent (more than the first batch the
/// search asks the index for).
#[test]
fn search_agent_keeps_one_agents_sessions() {
    let t = TestEnv::new();
    let noisy = t
        .run(&["session", "new", "--agent", "bot", "--title", "noise"])
        .ok();
    let mut lines = String::new();
    for i in 0..150 {
        lines.push_str(&format!(
            "{{\"kind\":\"invoke\",\"payload\":\"migration failed {i}\"}}\n{{\"kind\":\"complete\",\"payload\":\"ok {i}\"}}\n"
        ));
    }
    ingest(&t, &noisy, "main", &lines);
    let coder = t
        .run(&[
            "session",
            "new",
            "--agent",
            "claude-code",
            "--title",
            "coding",
        ])
        .ok();
    ingest(
        &t,
        &coder,
        "main",
        concat!(
            r#"{"kind":"invoke","payload":"Run the migration and tell me whether the migration failed; it is the long one with many steps and words around it"}"#,
            "\n",
        ),
    );
    let all = t
        .run(&["search", "migration failed", "--json", "-n", "500"])
        .json();
    assert_eq!(all["hits"].as_array().unwrap().len(), 151);
    let first = all["hits"][0]["node"]["session"].as_str().unwrap();
    assert_eq!(first, noisy.trim(), "the other agent ranks first");
    let r = t
        .run(&[
            "search",
            "migration failed",
            "--agent",
            "claude-code",
            "--json",
            "-n",
            "1",
        ])
        .json();
    let hits = r["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{r}");
    assert_eq!(hits[0]["node"]["session"], coder.trim());
    let r = t.run(&["search", "migration", "--agent", "nobody"]);
    assert_eq!(r.code(), 1, "no hit: {}", r.stderr());
}

/// The scripted model of [`resent_history_is_one_hit_per_message`]: its
/// answer to the conversation's last user message.
fn zoo_model(n: usize, _path: &str, req: &serde_json::Value) -> serde_json::Value {
    let last = req["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let answer = if last.contains("crossing") {
        "The zebra crossing is on Abbey Road."
    } else if last.contains("giraffe") {
        "Next to the zebra stables."
    } else {
        "A lion, near the gate."
    };
    serde_json::json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0,
        "model": "scripted", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": answer}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

/// A conversation recorded through `convo proxy` (curl as the client) that
/// resends its whole history with every call: each message is one hit
/// where it first appeared, in `convo search`, the API and the web page;
/// hits page with `--offset`; `OR` and `-word` work.
fn resent_history_is_one_hit_per_message(backend: Backend) {
    use serde_json::json;
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let up = crate::test_harness::Upstream::start(zoo_model);
    let live = crate::test_agents::proxy(&t, &["--upstream", &up.url]);
    let url = format!("http://{}/v1/chat/completions", live.addr);
    let mut messages = vec![json!({"role": "system", "content": "You guide visitors."})];
    for ask in [
        "Where is the zebra crossing?",
        "And the giraffe house?",
        "Anything else?",
    ] {
        messages.push(json!({"role": "user", "content": ask}));
        let body = json!({"model": "scripted", "messages": messages}).to_string();
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "--fail",
                &url,
                "-H",
                "content-type: application/json",
            ])
            .args(["-H", "authorization: Bearer x", "--data-binary", &body])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        messages.push(reply["choices"][0]["message"].clone());
    }
    assert!(live.stop().success());
    let sessions = t.run(&["session", "list", "--json"]).json();
    let sessions = sessions.get("sessions").cloned().unwrap_or(sessions);
    assert_eq!(
        sessions.as_array().unwrap().len(),
        1,
        "one conversation: {sessions}"
    );

    let found = |args: &[&str]| {
        let mut v = vec!["search"];
        v.extend_from_slice(args);
        v.push("--json");
        t.run(&v).json()
    };
    let kinds = |r: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = r["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["node"]["kind"].as_str().unwrap().to_owned())
            .collect();
        k.sort();
        k
    };
    // `giraffe`: the question once (its invoke), not in the two requests
    // that carry it; `zebra`: the first question and two answers.
    let g = found(&["giraffe"]);
    assert_eq!(kinds(&g), ["invoke"], "{g:#}");
    assert_eq!(
        (g["total"].as_u64(), g["exact"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(g["resent"], 2, "{g:#}");
    let z = found(&["zebra"]);
    assert_eq!(kinds(&z), ["invoke", "response", "response"], "{z:#}");
    // Pages: one hit each, the next at --offset, the last line saying so.
    let p2 = t.run(&[
        "search", "zebra", "-n", "1", "--offset", "1", "--color", "never",
    ]);
    assert_eq!(p2.code(), 0);
    assert!(p2.stderr().contains("hits 2-2 of 3"), "{}", p2.stderr());
    assert!(p2.stderr().contains("next: --offset 2"), "{}", p2.stderr());
    let pages: Vec<String> = (0..3)
        .map(|o| {
            let r = found(&["zebra", "-n", "1", "--offset", &o.to_string()]);
            r["hits"][0]["node"]["hash"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut distinct = pages.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{pages:?}");
    assert_eq!(found(&["lion OR giraffe"])["total"], 2);
    assert_eq!(found(&["zebra -crossing"])["total"], 1);
    let only_not = t.run(&["search", "--json", "--", "-zebra"]);
    assert_eq!(only_not.code(), 2, "{}", only_not.stderr());
    assert!(
        only_not.stderr().contains("only excludes"),
        "{}",
        only_not.stderr()
    );

    // The API and the web page count the same.
    let srv = crate::serve_util::Server::start(&t, &[]);
    let api = srv.get("/api/v1/search?q=zebra&limit=2").expect(200);
    assert_eq!(
        (api["total"].as_u64(), api["hits"].as_array().unwrap().len()),
        (Some(3), 2)
    );
    let next = srv
        .get("/api/v1/search?q=zebra&limit=2&offset=2")
        .expect(200);
    assert_eq!(next["hits"].as_array().unwrap().len(), 1);
    let page = srv.get("/search?q=zebra&limit=2").text();
    assert!(page.contains("data-total=\"3\""), "{page}");
    assert!(page.contains("resent"), "{page}");
    assert!(
        page.contains("href=\"/search?q=zebra&amp;limit=2&amp;offset=2\""),
        "{page}"
    );
    let last = srv.get("/search?q=zebra&limit=2&offset=2").text();
    assert_eq!(last.matches("<li class=\"hit\"").count(), 1, "{last}");
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    search_end_to_end,
    resent_history_is_one_hit_per_message,
);
