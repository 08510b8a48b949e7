//! Reading history: references, turns, diff, graph, filters, `log --all`,
//! titles, and a closed stdout; on SQLite and on PostgreSQL. Human output
//! is pinned by snapshots with hashes and times masked.

use crate::common::{TestEnv, is_hash};
use convo_testutil::Backend;
use std::io::Read;
use std::process::Stdio;

/// Masks what changes from run to run: 12-hex-digit short hashes, full
/// hashes, session ids and `YYYY-MM-DD HH:MM:SS` times.
fn mask(s: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let hex = chars[i..]
            .iter()
            .take_while(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            .count();
        let boundary = i == 0 || !chars[i - 1].is_ascii_alphanumeric();
        if boundary && (hex == 12 || hex == 64) {
            out.push_str(if hex == 12 { "HASH" } else { "FULLHASH" });
            i += hex;
            continue;
        }
        let rest: String = chars[i..chars.len().min(i + 19)].iter().collect();
        if rest.len() == 19
            && rest.chars().enumerate().all(|(k, c)| match k {
                4 | 7 => c == '-',
                10 => c == ' ',
                13 | 16 => c == ':',
                _ => c.is_ascii_digit(),
            })
        {
            out.push_str("TIME");
            i += 19;
            continue;
        }
        if rest.starts_with("ses-") && chars.len() >= i + 40 {
            out.push_str("SESSION");
            i += 40;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

fn ingest(t: &TestEnv, s: &str, branch: &str, lines: &str) -> Vec<String> {
    let r = t.run_stdin(
        &["ingest", s, "--branch", branch, "--batch", "1000"],
        lines.as_bytes(),
    );
    r.ok().lines().map(str::to_owned).collect()
}

/// Two turns on main (the first with a service call), a fork after turn 1
/// with a different turn 2.
fn story(t: &TestEnv) -> (String, Vec<String>) {
    let s = t
        .run(&["session", "new", "--agent", "bot", "--title", "story"])
        .ok();
    let main = ingest(
        t,
        &s,
        "main",
        concat!(
            r#"{"kind":"invoke","payload":"Tell me about Paris"}"#,
            "\n",
            r#"{"kind":"request","payload":"{\"prompt\":\"Paris\",\"n\":1}","to":"infer"}"#,
            "\n",
            r#"{"kind":"response","payload":"Paris is big.","from":"infer","diagnostics":{"status":200,"model":"m1"}}"#,
            "\n",
            r#"{"kind":"complete","payload":"Paris is the capital."}"#,
            "\n",
            r#"{"kind":"invoke","payload":"Population?"}"#,
            "\n",
            r#"{"kind":"complete","payload":"About 2 million.\nIn the city proper."}"#,
            "\n",
        ),
    );
    assert_eq!(main.len(), 6);
    t.run(&[
        "session", "fork", &s, "--from", "main@1", "--branch", "retry",
    ])
    .ok();
    ingest(
        t,
        &s,
        "retry",
        concat!(
            r#"{"kind":"invoke","payload":"Population?"}"#,
            "\n",
            r#"{"kind":"complete","payload":"About 2.1 million.\nIn the city proper."}"#,
            "\n",
        ),
    );
    (s, main)
}

fn references_turns_and_diff(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let (s, main) = story(&t);
    let head = |r: &str| t.run(&["show", &s, r, "--json"]).json()["hash"].clone();
    // The grammar: branch, ~N, @TURN, negative turns, prefixes.
    assert_eq!(head("main"), main[5].as_str());
    assert_eq!(head("main~2"), main[3].as_str());
    assert_eq!(head("main@1"), main[3].as_str());
    assert_eq!(head("main@-1"), main[5].as_str());
    assert_eq!(head("main@-2"), main[3].as_str());
    assert_eq!(head("main@2~1"), main[4].as_str());
    assert_eq!(head(&main[2][..8]), main[2].as_str());
    let short = t.run(&["show", &s, &main[2][..3]]);
    assert_eq!(short.code(), 2);
    assert!(
        short.stderr().contains("at least 4 hex digits"),
        "{}",
        short.stderr()
    );
    let far = t.run(&["show", &s, "main~40"]);
    assert_ne!(far.code(), 0);
    assert!(far.stderr().contains("main~40"), "{}", far.stderr());
    assert_ne!(t.run(&["show", &s, "main@9"]).code(), 0);
    assert_ne!(t.run(&["show", &s, "nope"]).code(), 0);
    // The fork started after turn 1: retry@1 is main's turn 1.
    assert_eq!(head("retry@1"), main[3].as_str());

    // Turn numbers in log and session get.
    let log = t.run(&["log", &s, "--json"]).json();
    let turns: Vec<_> = log
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [2, 2, 1, 1, 1, 1]);
    let got = t
        .run(&["session", "get", &s, "--branch", "retry", "--json"])
        .json();
    assert_eq!(got["turns"], 2);
    let retry_turns: Vec<_> = got["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["turn"].as_u64())
        .collect();
    assert_eq!(
        retry_turns,
        [Some(1), Some(1), Some(1), Some(1), None, Some(2), Some(2)]
    );

    // A whole turn.
    let turn = t.run(&["turn", &s, "main@1", "--json"]).json();
    assert_eq!(turn["turn"], 1);
    assert_eq!(turn["complete"], true);
    assert_eq!(turn["nodes"].as_array().unwrap().len(), 4);
    let same = t.run(&["turn", &main[2], "--json"]).json();
    assert_eq!(same, turn, "a hash alone names its turn");
    let human = t.run(&["--color", "never", "turn", &s, "main@1"]).ok();
    assert_eq!(
        mask(&human),
        mask(concat!(
            "turn 1  2026-01-01 00:00:00\n",
            "invoke  cli → bot  000000000000\n",
            "  Tell me about Paris\n",
            "  request #1  bot → infer  000000000000\n",
            "    {\n",
            "      \"n\": 1,\n",
            "      \"prompt\": \"Paris\"\n",
            "    }\n",
            "  response #1  infer → bot  000000000000  model m1  status 200\n",
            "    Paris is big.\n",
            "complete  bot → cli  000000000000\n",
            "  Paris is the capital.",
        ))
    );
    // session get --full prints every turn whole.
    let full = t
        .run(&["--color", "never", "session", "get", &s, "--full"])
        .ok();
    assert!(full.contains("turn 1") && full.contains("turn 2"), "{full}");
    assert!(full.contains("\n  In the city proper."), "{full}");

    // diff: the fork point, then turn 2 against turn 2, aligned by content:
    // retry's fork node is only on B and shifts nothing, the invoke both
    // recorded the same way pairs as unchanged, the answers differ.
    let d = t.run(&["diff", &s, "main", "retry", "--json"]).json();
    assert_eq!(d["fork_point"]["hash"], main[3].as_str());
    assert_eq!(d["shared"], 4);
    assert_eq!(d["common"], 4);
    assert_eq!(d["a"]["added"].as_array().unwrap().len(), 2);
    assert_eq!(d["b"]["added"].as_array().unwrap().len(), 3, "fork + 2");
    assert_eq!(d["b"]["ref"], "retry");
    assert_eq!(d["turns"].as_array().unwrap().len(), 1);
    let t2 = &d["turns"][0];
    assert_eq!((t2["a"].clone(), t2["b"].clone()), (2.into(), 2.into()));
    assert_eq!(t2["changed"], true);
    let kinds: Vec<_> = t2["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["kind"].as_str().unwrap(), n["changed"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("fork", true), ("invoke", false), ("complete", true)]
    );
    assert_eq!(t2["nodes"][0]["a"], serde_json::Value::Null);
    assert_eq!(d["unchanged"], 1);
    assert_eq!(
        (d["page"].clone(), d["pages"].clone()),
        (serde_json::Value::Null, 1.into())
    );
    let human = t
        .run(&["--color", "never", "diff", &s, "main", "retry"])
        .ok();
    assert_eq!(
        mask(&human),
        mask(concat!(
            "fork point 000000000000  (4 shared nodes)\n",
            "--- main  +2 nodes in 1 turn\n",
            "+++ retry  +3 nodes in 1 turn\n",
            "\n",
            "turn 2 ↔ 2\n",
            "  fork  - → 000000000000\n",
            "    +(fork: the timeline `retry` starts here)\n",
            "  invoke  000000000000 → 000000000000\n",
            "    (same payload)\n",
            "  complete  000000000000 → 000000000000\n",
            "    -About 2 million.\n",
            "    +About 2.1 million.\n",
            "     In the city proper.",
        ))
    );
    let stat = t
        .run(&["--color", "never", "diff", &s, "main", "retry", "--stat"])
        .ok();
    assert!(
        stat.ends_with("turn 2 ↔ 2       2 of 3 nodes differ  +1 -1"),
        "{stat}"
    );

    // The graph: main a root, retry under it at the fork point.
    let g = t.run(&["branch", "list", &s, "--graph", "--json"]).json();
    assert_eq!(g[0]["name"], "main");
    assert_eq!(g[1]["name"], "retry");
    assert_eq!(g[1]["parent"], "main");
    assert_eq!(g[1]["fork_point"], main[3].as_str());
    let human = t.run(&["--color", "never", "log", &s, "--graph"]).ok();
    assert_eq!(
        mask(&human),
        mask(concat!(
            "● main  head 000000000000  6 nodes, 2 turns  2026-01-01 00:00:00\n",
            "└─ ● retry  head 000000000000  7 nodes, 2 turns  forked at 000000000000 (after turn 1), +3  2026-01-01 00:00:00",
        ))
    );
    t.run(&["session", "promote", &s, "--branch", "retry"]).ok();
    let g = t.run(&["log", &s, "--graph", "--json"]).json();
    assert_eq!(
        g[1]["name"], "main",
        "the promoted fork hangs under the sealed main"
    );
    assert_eq!(g[0]["sealed"], true);
    assert_eq!(g[1]["promoted"], true);

    // Filters.
    let only = t.run(&["log", &s, "--kind", "invoke", "--json"]).json();
    assert!(
        only.as_array()
            .unwrap()
            .iter()
            .all(|n| n["kind"] == "invoke")
    );
    assert_eq!(only.as_array().unwrap().len(), 2);
    let from_infer = t.run(&["log", &s, "--from", "infer", "--json"]).json();
    assert_eq!(from_infer.as_array().unwrap().len(), 1);
    let none = t
        .run(&["log", &s, "--until", "1970-01-02", "--json"])
        .json();
    assert_eq!(none.as_array().unwrap().len(), 0);
    let recent = t
        .run(&["log", &s, "--since", "1h", "-n", "2", "--json"])
        .json();
    assert_eq!(recent.as_array().unwrap().len(), 2);
    assert_eq!(t.run(&["log", &s, "--kind", "bogus"]).code(), 2);
    assert_eq!(t.run(&["log", &s, "--since", "later"]).code(), 2);
    // log --all ends, oldest first, every node of the store.
    let other = t.session("b");
    t.run(&["say", &other, "--user", "u", "--agent", "a"]).ok();
    let all = t.run(&["log", "--all", "--json"]).json();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 6 + 1 + 2 + 1 + 2);
    assert!(
        all.windows(2)
            .all(|w| w[0]["cursor"].as_u64() < w[1]["cursor"].as_u64())
    );
    let some = t
        .run(&["log", "--all", "--kind", "complete", "-n", "2", "--json"])
        .json();
    assert_eq!(some.as_array().unwrap().len(), 2);
    assert!(is_hash(some[0]["hash"].as_str().unwrap()));
}

fn sessions_by_name(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let a = t
        .run(&["session", "new", "--agent", "x", "--title", "alpha"])
        .ok();
    let b = t
        .run(&["session", "new", "--agent", "x", "--title", "alpha"])
        .ok();
    let amb = t.run(&["session", "get", "alpha"]);
    assert_eq!(amb.code(), 2);
    let err = amb.stderr();
    assert!(
        err.contains(&a) && err.contains(&b),
        "candidates listed: {err}"
    );
    t.run(&["session", "retitle", &a, "beta"]).ok();
    let got = t.run(&["session", "get", "beta", "--json"]).json();
    assert_eq!(got["id"], a.as_str());
    assert_eq!(got["title"], "beta");
    assert_eq!(
        t.run(&["session", "get", "alpha", "--json"]).json()["id"],
        b.as_str()
    );
    // A title that looks like an id prefix is still reachable.
    let digits = t
        .run(&["session", "new", "--agent", "x", "--title", "4579"])
        .ok();
    let got = t.run(&["session", "get", "4579", "--json"]);
    if got.code() == 0 {
        assert_eq!(got.json()["id"], digits.as_str());
    } else {
        assert!(got.stderr().contains(&digits), "{}", got.stderr());
    }
    t.run(&["session", "retitle", &a, "--clear"]).ok();
    assert!(
        t.run(&["verify"]).ok().starts_with("ok"),
        "a retitle is journaled"
    );
    assert_eq!(
        t.run(&["session", "get", &a, "--json"]).json()["title"],
        serde_json::Value::Null
    );
    let list = t
        .run(&["session", "list", "--title", "ALP", "--json"])
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let header = t.run(&["--color", "never", "session", "list"]).ok();
    assert!(header.starts_with("session "), "{header}");
}

/// Runs `args` with a standard output whose reading end is already
/// closed; the command must end quietly with status 141.
fn closed_stdout(t: &TestEnv, args: &[&str]) {
    let mut child = t
        .cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141), "{args:?}: {err}");
    assert!(err.is_empty(), "{args:?} printed: {err}");
}

fn broken_pipe(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t.session("pipe");
    // Enough output (well over a pipe buffer) that every listing writes
    // after the reader is gone.
    let lines: String = (0..800)
        .map(|i| {
            format!(
                "{{\"kind\":\"invoke\",\"payload\":\"question {i} {}\"}}\n{{\"kind\":\"complete\",\"payload\":\"answer {i}\"}}\n",
                "x".repeat(60)
            )
        })
        .collect();
    ingest(&t, &s, "main", &lines);
    t.run(&["session", "fork", &s, "--from", "main@1", "--branch", "f"])
        .ok();
    ingest(&t, &s, "f", &lines);
    // Sessions for `session list`: few (one process each) but long titles.
    for i in 0..40 {
        t.run(&[
            "session",
            "new",
            "--agent",
            "a",
            "--title",
            &format!("{i} {}", "t".repeat(2000)),
        ])
        .ok();
    }
    let cases: Vec<Vec<&str>> = vec![
        vec!["session", "list"],
        vec!["session", "list", "--json"],
        vec!["session", "get", &s],
        vec!["session", "get", &s, "--json"],
        vec!["session", "get", &s, "--full"],
        vec!["log", &s],
        vec!["log", &s, "--json"],
        vec!["log", "--all"],
        vec!["log", "--all", "--json"],
        vec!["diff", &s, "main", "f"],
        vec!["diff", &s, "main", "f", "--json"],
        vec!["export", &s, "--format", "markdown"],
        vec!["search", "answer", "-n", "2000"],
        vec!["search", "answer", "-n", "2000", "--json"],
    ];
    for c in &cases {
        closed_stdout(&t, c);
    }
}

#[test]
fn import_summarizes_titles_sessions_and_export_writes_every_branch() {
    let t = TestEnv::new();
    let fixture = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures/openai.jsonl");
    let r = t.run(&["import", fixture.to_str().unwrap()]);
    assert!(
        r.stdout().is_empty(),
        "ids only with -v or --json: {}",
        r.stdout()
    );
    assert!(r.stderr().contains("imported 2 sessions"), "{}", r.stderr());
    let again = t
        .run(&["import", fixture.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(again["skipped"], 2);
    assert_eq!(again["sessions"], 0);
    // No title in the file: the first user message becomes one.
    let list = t.run(&["session", "list", "--json"]).json();
    let titles: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["title"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        titles.contains(&"Weather in Paris?".to_owned()),
        "{titles:?}"
    );
    assert_eq!(
        t.run(&["session", "get", "Weather in Paris?", "--json"])
            .json()["title"],
        "Weather in Paris?"
    );

    let (s, _) = story(&t);
    let dir = t.home().join("out");
    t.run(&[
        "export",
        &s,
        "--format",
        "markdown",
        "--all-branches",
        "-o",
        dir.to_str().unwrap(),
    ])
    .ok();
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["main.md", "retry.md"]);
    let retry = std::fs::read_to_string(dir.join("retry.md")).unwrap();
    assert!(retry.contains("About 2.1 million."), "{retry}");
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    references_turns_and_diff,
    sessions_by_name,
    broken_pipe,
);
