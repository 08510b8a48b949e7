//! Many writers, `watch` and `migrate`, on SQLite and on PostgreSQL.

use crate::common::{TestEnv, is_hash};
use convo_testutil::Backend;
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};

fn turns(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("{{\"kind\":\"invoke\",\"payload\":\"{tag}-q{i}\"}}\n{{\"kind\":\"complete\",\"payload\":\"{tag}-a{i}\"}}\n"))
        .collect()
}

fn spawn_ingest(t: &TestEnv, session: &str, branch: &str, input: String) -> Child {
    let mut c = t
        .cmd()
        .args(["ingest", session, "--branch", branch, "--batch", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    c
}

/// 6 writers on one session's `main` (which keeps being replaced by
/// promotes), 1 writer on another session, and 1 process that forks,
/// appends to the fork and promotes it, over and over.
fn many_writers(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t.session("a");
    let other = t.session("b");
    t.run(&["say", &s, "--user", "seed", "--agent", "ok"]).ok();
    let mut writers: Vec<Child> = (0..6)
        .map(|i| spawn_ingest(&t, &s, "main", turns(12, &format!("w{i}"))))
        .collect();
    writers.push(spawn_ingest(&t, &other, "main", turns(12, "o")));
    let mut promotes = 0;
    for i in 0..4 {
        let head = t.run(&["log", &s, "-n", "1", "--json"]).json()[0]["hash"]
            .as_str()
            .unwrap()
            .to_owned();
        let name = format!("f{i}");
        t.run(&["session", "fork", &s, "--from", &head, "--branch", &name])
            .ok();
        t.run(&[
            "say", &s, "--branch", &name, "--user", "fork", "--agent", "turn",
        ])
        .ok();
        t.run(&["session", "promote", &s, "--branch", &name]).ok();
        promotes += 1;
    }
    let mut printed = Vec::new();
    for c in writers {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{backend}: a writer failed: {err}");
        assert!(
            !err.contains("lock") && !err.contains("serializ"),
            "{backend}: {err}"
        );
        printed.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned),
        );
    }
    assert_eq!(printed.len(), 7 * 24);
    assert!(printed.iter().all(|h| is_hash(h)));
    // Every node of every timeline, each timeline a single chain.
    let mut on_timelines = HashSet::new();
    for sess in [&s, &other] {
        let branches = t.run(&["branch", "list", sess, "--json"]).json();
        for b in branches.as_array().unwrap() {
            let name = b["name"].as_str().unwrap();
            let v = t
                .run(&["session", "get", sess, "--branch", name, "--json"])
                .json();
            let nodes = v["nodes"].as_array().unwrap();
            assert_eq!(
                nodes.last().map(|n| n["hash"].clone()),
                Some(b["head"].clone())
            );
            for (i, w) in nodes.windows(2).enumerate() {
                assert_eq!(
                    w[1]["parent"], w[0]["hash"],
                    "{backend}: {name} is one chain"
                );
                assert_eq!(w[1]["depth"], i + 2);
            }
            on_timelines.extend(nodes.iter().map(|n| n["hash"].as_str().unwrap().to_owned()));
        }
    }
    for h in &printed {
        assert!(on_timelines.contains(h), "{backend}: {h} is on no timeline");
    }
    let sealed = t.run(&["branch", "list", &s, "--json"]).json();
    assert_eq!(
        sealed
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["sealed"] == true)
            .count(),
        promotes
    );
    let v = t.run(&["verify", "--json"]).json();
    assert_eq!(v["ok"], true, "{backend}: {v}");
    assert_eq!(
        v["nodes"],
        2 + 7 * 24 + promotes * 4,
        "{backend}: no node lost or duplicated"
    );
}

/// `watch` sees every node once, in order, while writers run and one is
/// killed mid-transaction; a second watch resumes from a cursor.
fn watch_has_no_gap(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t.session("a");
    let mut watch = t
        .cmd()
        .args(["watch", "--json", "--after", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let writers: Vec<Child> = (0..3)
        .map(|i| spawn_ingest(&t, &s, "main", turns(10, &format!("w{i}"))))
        .collect();
    // A writer killed mid-stream, with big transactions in flight.
    let mut victim = t
        .cmd()
        .args(["ingest", &s, "--batch", "50"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut vin = victim.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let big = "z".repeat(50_000);
        for i in 0..100_000 {
            let kind = if i % 2 == 0 { "invoke" } else { "complete" };
            if writeln!(vin, "{{\"kind\":\"{kind}\",\"payload\":\"{i}{big}\"}}").is_err() {
                break;
            }
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    victim.kill().unwrap();
    victim.wait().unwrap();
    let _ = feeder.join();
    for c in writers {
        assert!(c.wait_with_output().unwrap().status.success());
    }
    t.run(&["say", &s, "--user", "last", "--agent", "one"]).ok();
    let total = t.run(&["verify", "--json"]).json()["nodes"]
        .as_u64()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while (seen.len() as u64) < total {
        let line = lines.next().expect("watch ended early").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        seen.push((
            v["cursor"].as_u64().unwrap(),
            v["hash"].as_str().unwrap().to_owned(),
        ));
    }
    let _ = watch.kill();
    watch.wait().unwrap();
    let cursors: Vec<u64> = seen.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        cursors,
        (1..=total).collect::<Vec<_>>(),
        "{backend}: every node once, in order, no gap"
    );
    // Resume from the middle.
    let mid = total / 2;
    let resumed = t.run(&[
        "watch",
        "--json",
        "--after",
        &mid.to_string(),
        "--limit",
        &(total - mid).to_string(),
    ]);
    let got: Vec<String> = resumed
        .ok()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["hash"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let want: Vec<String> = seen[mid as usize..]
        .iter()
        .map(|(_, h)| h.clone())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn migrate_sqlite_to_postgres_and_back_keeps_every_hash() {
    let Some((pg, _db)) = TestEnv::on(Backend::Postgres) else {
        return;
    };
    let t = TestEnv::new();
    let s = t.run(&["demo", "--json"]).json()["session"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&["state", "put", &s, "k", "v"]).ok();
    // A redacted payload travels as its redaction (the bytes stay erased).
    let first = t.run(&["log", &s, "--json"]).json();
    let first = first.as_array().unwrap().last().unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&["redact", &first, "--reason", "a test"]).ok();
    let shown = t.run(&["show", &first, "--json"]).json();
    assert_eq!(shown["redacted"]["reason"], "a test", "{shown}");
    let before = t.run(&["session", "get", &s, "--json"]).json();
    // An imported transcript: its import index travels too, so a re-import
    // on the target reads only the new lines.
    let path = t.home().join("s-idx.jsonl");
    let mut text = claude_turns(0, 3);
    std::fs::write(&path, &text).unwrap();
    let file = path.to_str().unwrap();
    let imported = t
        .run(&["import", file, "--format", "claude-code", "--json"])
        .json();
    let agent = imported["created"][0]["id"].as_str().unwrap().to_owned();
    let keys_of = |c: &rusqlite::Connection| -> i64 {
        c.query_row(
            "SELECT (SELECT count(*) FROM import_keys) * 1000 + (SELECT count(*) FROM import_tails) \
             + (SELECT count(*) FROM import_files) * 100",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let index = keys_of(&rusqlite::Connection::open(t.db()).unwrap());
    assert!(
        index > 1000 && index % 1000 == 101,
        "keys, a tail and a file: {index}"
    );
    let src = format!("sqlite://{}", t.db().display());
    let pg_url = pg.store.clone().unwrap();
    let out = t
        .run(&["migrate", "--from", &src, "--to", &pg_url, "--json"])
        .json();
    assert_eq!(out["verified"], true, "{out}");
    assert_eq!(
        out["import_rows"].as_i64().unwrap(),
        index / 1000 + 2,
        "{out}"
    );
    let on_pg_index = convo_testutil::pg_sql(
        &pg_url,
        "SELECT (SELECT count(*) FROM import_keys) * 1000 + (SELECT count(*) FROM import_tails) \
         + (SELECT count(*) FROM import_files) * 100",
    )
    .unwrap();
    assert_eq!(on_pg_index, index, "the import index is copied");
    text += &claude_turns(3, 4);
    std::fs::write(&path, &text).unwrap();
    let more = pg
        .run(&["import", file, "--format", "claude-code", "--json"])
        .json();
    assert_eq!(more["updated"][0]["id"], agent.as_str(), "{more}");
    assert_eq!(more["updated"][0]["nodes"], 2, "only the new turn: {more}");
    let on_pg = pg.run(&["session", "get", &s, "--json"]).json();
    assert_eq!(on_pg["nodes"], before["nodes"]);
    assert_eq!(pg.run(&["state", "get", &s, "k"]).ok(), "v");
    let back = t.home().join("back.db");
    let back_url = format!("sqlite://{}", back.display());
    let copied = t
        .run(&["migrate", "--from", &pg_url, "--to", &back_url, "--json"])
        .json();
    assert_eq!(copied["verified"], true);
    assert_eq!(copied["sessions"], 2);
    let back_index = keys_of(&rusqlite::Connection::open(&back).unwrap());
    assert!(
        back_index > on_pg_index && back_index % 1000 == 101,
        "the grown session's new keys come back: {back_index} vs {on_pg_index}"
    );
    let stored = pg.run(&["verify", "--json"]).json();
    assert_eq!(copied["nodes"], stored["nodes"], "{copied}");
    assert_eq!(copied["blobs"], stored["blobs"], "{copied}");
    let round = t
        .run(&["--store", &back_url, "session", "get", &s, "--json"])
        .json();
    assert_eq!(round["nodes"], before["nodes"]);
    let again = t.run(&["migrate", "--from", &src, "--to", &pg_url]);
    assert_eq!(again.code(), 2);
    assert!(again.stderr().contains("not empty"), "{}", again.stderr());
}

/// `convo redact NODE` and `convo redact --content` of a state value leave
/// no byte of the secret in any file of the store once they return: not as
/// stored, upper- or lowercased, nor as the words the search index held
/// (SQLite: the database, its FTS5 segments, WAL and free pages;
/// PostgreSQL: every table's and index's relation file).
fn redact_leaves_no_byte(backend: Backend) {
    let Some((t, db)) = TestEnv::on(backend) else {
        return;
    };
    let url = match &db {
        Some(db) => db.url.clone(),
        None => format!("sqlite://{}", t.db().display()),
    };
    let s = t.session("redact");
    let said = "my key is sk-live-Xq7PlutoniumWombat93 keep it";
    let value = "token=Hunter2-ZebraCrossing58-Sapphire";
    t.run(&["say", &s, "--user", said, "--agent", "noted"]).ok();
    t.run(&["say", &s, "--user", "something else", "--agent", "ok"])
        .ok();
    t.run(&["state", "put", &s, "db", value]).ok();
    // The search index takes in the words (lowercased) on the first search.
    let found = t.run(&["search", "xq7plutoniumwombat93", "--json"]).json();
    assert_eq!(found["hits"].as_array().map(Vec::len), Some(1), "{found}");
    for secret in [said, value] {
        assert!(
            !convo_testutil::files_holding(&url, secret.as_bytes()).is_empty(),
            "{backend}: the secret is stored"
        );
    }
    assert!(
        !convo_testutil::files_holding(&url, b"xq7plutoniumwombat93").is_empty(),
        "{backend}: the search index holds the lowercased word"
    );
    let log = t.run(&["log", &s, "--json"]).json();
    let invoke = log
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["payload"] == said)
        .unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = t
        .run(&["redact", &invoke, "--reason", "a leaked key", "--json"])
        .json();
    assert_eq!(r["warning"], serde_json::Value::Null, "{r}");
    let digest = convo_core::hash::content_hash(value.as_bytes()).to_hex();
    // A writer of another database on the same server, still writing when
    // the erasure starts: the erasure waits for it before each rewrite.
    let elsewhere = db
        .is_some()
        .then(|| convo_testutil::pg_writer_elsewhere(std::time::Duration::from_millis(1500)))
        .flatten();
    let r = t
        .run(&[
            "redact",
            "--content",
            &digest,
            "--reason",
            "a password",
            "--json",
        ])
        .json();
    assert_eq!(r["warning"], serde_json::Value::Null, "{r}");
    if let Some(h) = elsewhere {
        h.join().unwrap();
    }
    for secret in [said, value] {
        let left = convo_testutil::secret_in_files(&url, secret);
        assert!(
            left.is_empty(),
            "{backend}: left in the store's files: {left:?}"
        );
    }
    // Searching finds nothing of it; the store verifies.
    let none = t.run(&["search", "xq7plutoniumwombat93", "--json"]);
    assert_eq!(none.code(), 1, "no hit: {}", none.stdout());
    t.run(&["verify"]).ok();
}

/// A secret in the first message of an untitled session recorded through
/// `convo proxy` as a streamed call (so the session's title is made from
/// it, and the upstream echoes it back in the stream), and in an answer
/// recorded with the answer copied into its diagnostics (as the proxy did
/// before; as any recorder may): `convo redact` of every node that shows
/// it leaves no byte of it in any file of the store (the title reads
/// `[redacted]`, the diagnostics keep only what copies no content), and
/// verify passes (the rewritten node and facts keep their hashes, named
/// by redaction facts).
fn redact_of_a_proxied_stream_leaves_no_byte(backend: Backend) {
    let Some((t, db)) = TestEnv::on(backend) else {
        return;
    };
    let url = match &db {
        Some(db) => db.url.clone(),
        None => format!("sqlite://{}", t.db().display()),
    };
    let secret = "sk-live-Q7ZebraTangerine42";
    let said = format!("my key {secret}");
    let upstream = crate::test_crash::crash_upstream();
    let srv = crate::test_crash::start_proxy(&t, &upstream, &[]);
    let body = serde_json::json!({"model": "m", "stream": true,
        "messages": [{"role": "user", "content": said}]});
    let r = srv.req(
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(secret), "echoed: {}", r.text());
    assert!(srv.stop().success());
    let sessions = t.run(&["session", "list", "--json"]).json();
    let s = sessions[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(sessions[0]["title"], said.as_str(), "{sessions}");
    // Another answer, its diagnostics holding a copy of it.
    let diag = serde_json::json!({"model": "m", "assembled": {"content": said}}).to_string();
    t.run(&["record", &s, "invoke", "--payload", "again"]).ok();
    t.run(&[
        "record",
        &s,
        "complete",
        "--payload",
        &said,
        "--diagnostics",
        &diag,
    ])
    .ok();
    assert!(!convo_testutil::secret_in_files(&url, secret).is_empty());
    let nodes = t.run(&["session", "get", &s, "--json"]).json();
    let showing: Vec<String> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n.to_string().contains(secret))
        .map(|n| n["hash"].as_str().unwrap().to_owned())
        .collect();
    assert!(showing.len() >= 4, "{nodes}");
    for h in &showing {
        let r = t.run(&["redact", h, "--reason", "a leaked key", "--json"]);
        assert_eq!(r.code(), 0, "{h}: {}", r.stderr());
    }
    let left = convo_testutil::secret_in_files(&url, secret);
    assert!(
        left.is_empty(),
        "{backend}: left in the store's files: {left:?}"
    );
    let sessions = t.run(&["session", "list", "--json"]).json();
    assert_eq!(sessions[0]["title"], "[redacted]", "{sessions}");
    let v = t.run(&["verify", "--json"]).json();
    assert_eq!(v["ok"], true, "{backend}: {v}");
}

/// 6 processes running `convo say` and 8 running `convo record` on one
/// timeline with no harness turn open: every write lands (serialized, one
/// chain), none is refused as if a turn were open (it used to be: `inside
/// turn main@-1, open by another convo process`, exit 4).
fn concurrent_say_and_record_all_land(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t.session("a");
    t.run(&["say", &s, "--user", "seed", "--agent", "ok"]).ok();
    let rounds = 6;
    let t = std::sync::Arc::new(t);
    let workers: Vec<_> = (0..14)
        .map(|w| {
            let (t, s) = (t.clone(), s.clone());
            std::thread::spawn(move || {
                let mut failed = Vec::new();
                for i in 0..rounds {
                    let text = format!("w{w}-{i}");
                    let args: Vec<&str> = if w < 6 {
                        vec!["say", &s, "--user", &text, "--agent", "ok"]
                    } else {
                        vec!["record", &s, "invoke", "--payload", &text]
                    };
                    let r = t.run(&args);
                    if r.code() != 0 {
                        failed.push(format!("{text}: exit {}: {}", r.code(), r.stderr()));
                    }
                }
                failed
            })
        })
        .collect();
    let failed: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(failed.is_empty(), "{backend}: refused: {failed:#?}");
    let v = t.run(&["session", "get", &s, "--json"]).json();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2 + 6 * rounds * 2 + 8 * rounds, "{backend}");
    for w in nodes.windows(2) {
        assert_eq!(w[1]["parent"], w[0]["hash"], "{backend}: one chain");
    }
    t.run(&["verify"]).ok();
}

/// A Claude Code transcript's turns `from..to` (a prompt and its answer
/// each, chained by `parentUuid`).
pub fn claude_turns(from: u32, to: u32) -> String {
    let u = |i: u32| format!("00000000-0000-4000-8000-{i:012}");
    let mut out = String::new();
    for i in from..to {
        let (q, a) = (2 * i + 1, 2 * i + 2);
        let parent = (i > 0).then(|| u(2 * i));
        out += &serde_json::json!({"parentUuid": parent, "isSidechain": false, "type": "user",
            "message": {"role": "user", "content": format!("question {i}")}, "uuid": u(q),
            "timestamp": "2026-11-24T15:53:08.139Z", "sessionId": "s-idx"})
        .to_string();
        out.push('\n');
        out += &serde_json::json!({"parentUuid": u(q), "isSidechain": false, "type": "assistant",
            "message": {"id": format!("msg_{i}"), "role": "assistant", "model": "m",
                        "content": [{"type": "text", "text": format!("answer {i}")}]},
            "uuid": u(a), "timestamp": "2026-11-24T15:53:09.139Z", "sessionId": "s-idx"})
        .to_string();
        out.push('\n');
    }
    out
}

/// A store made before the import index (schema 12 on SQLite, 10 on
/// PostgreSQL) is migrated when opened; the first re-import of a grown
/// transcript reads it whole, adds only its new turn and writes the
/// session's tail, from which the next re-import goes on; the file comes
/// back byte for byte.
fn a_store_made_before_the_import_index_still_adds_only_what_is_new(backend: Backend) {
    let Some((t, db)) = TestEnv::on(backend) else {
        return;
    };
    let path = t.home().join("s-idx.jsonl");
    let mut text = claude_turns(0, 3);
    std::fs::write(&path, &text).unwrap();
    let file = path.to_str().unwrap();
    let import = |t: &TestEnv| {
        t.run(&["import", file, "--format", "claude-code", "--json"])
            .json()
    };
    let first = import(&t);
    assert_eq!(first["created"][0]["nodes"], 6, "{first}");
    // SQL on the store: a script for SQLite or PostgreSQL, then a count.
    let sql = |sqlite: &str, pg: &str| -> i64 {
        match &db {
            Some(db) => convo_testutil::pg_sql(&db.url, pg).unwrap_or(-1),
            None => {
                let c = rusqlite::Connection::open(t.db()).unwrap();
                let (script, count) = sqlite.rsplit_once(';').unwrap_or(("", sqlite));
                c.execute_batch(script).unwrap();
                c.query_row(count, [], |r| r.get(0)).unwrap()
            }
        }
    };
    let tails = "SELECT count(*) FROM import_tails";
    assert_eq!(sql(tails, tails), 1, "the import wrote its tail");
    // The store as the version before the index made it.
    // (SQLite: its thread indexes as version 9 made them, narrowed by 14.)
    let sqlite_v12 = format!(
        "DROP TABLE import_keys; DROP TABLE import_tails; DROP TABLE import_files; DROP INDEX nodes_by_thread; \
         DROP INDEX nodes_by_thread_response; DROP INDEX nodes_by_thread_conversation; {} \
         PRAGMA user_version = 12; SELECT 0",
        include_str!("../../convo-store/migrations/sqlite/0009_thread_index.sql")
    );
    sql(
        &sqlite_v12,
        "DROP TABLE import_keys; DROP TABLE import_tails; DROP TABLE import_files; \
         UPDATE convo_schema SET version = 10",
    );
    text += &claude_turns(3, 4);
    std::fs::write(&path, &text).unwrap();
    let more = import(&t);
    assert_eq!(more["updated"][0]["nodes"], 2, "only the new turn: {more}");
    assert_eq!(more["created"].as_array().map(Vec::len), Some(0), "{more}");
    assert_eq!(sql(tails, tails), 1, "migrated, and the tail written again");
    text += &claude_turns(4, 6);
    std::fs::write(&path, &text).unwrap();
    let again = import(&t);
    assert_eq!(again["updated"][0]["nodes"], 4, "{again}");
    assert_eq!(import(&t)["unchanged"], 1);
    let id = first["created"][0]["id"].as_str().unwrap();
    let out = t.home().join("back.jsonl");
    t.run(&[
        "export",
        id,
        "--format",
        "claude-code",
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        text,
        "byte for byte"
    );
    t.run(&["verify"]).ok();
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    many_writers,
    watch_has_no_gap,
    redact_leaves_no_byte,
    concurrent_say_and_record_all_land,
    redact_of_a_proxied_stream_leaves_no_byte,
    a_store_made_before_the_import_index_still_adds_only_what_is_new,
);
