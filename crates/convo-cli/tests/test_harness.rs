//! The agent harness end to end: `convo run` / `replay` with real Python
//! agents as child processes, a scripted inference upstream, the todo
//! walkthrough (fork keeps the state, promote), and the failures.

use crate::common::TestEnv;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;

fn todo_agent() -> String {
    let p: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "..",
        "examples",
        "todo-agent",
        "agent.py",
    ]
    .iter()
    .collect();
    p.to_string_lossy().into_owned()
}

/// A scripted OpenAI-compatible upstream: every call is answered with a
/// chat completion saying "noted (N)", N counting calls. Returns its URL.
fn scripted_upstream() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for (n, conn) in l.incoming().enumerate() {
            let Ok(mut conn) = conn else { continue };
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut len = 0usize;
            let mut first = String::new();
            r.read_line(&mut first).unwrap();
            loop {
                let mut h = String::new();
                if r.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            assert!(first.starts_with("POST /v1/chat/completions"), "{first}");
            let out = format!(
                r#"{{"choices":[{{"message":{{"role":"assistant","content":"noted ({})"}}}}]}}"#,
                n + 1
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
                out.len()
            );
        }
    });
    url
}

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::to_owned).collect()
}

#[test]
fn todo_walkthrough_fork_keeps_state_promote_and_replay() {
    let t = TestEnv::new();
    let up = scripted_upstream();
    let agent = todo_agent();
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--upstream", &up, "--", "python3", &agent]);
        t.run(&a)
    };
    // 1. add milk, eggs, carrots: one child process, three turns.
    let out = run(&[
        "run",
        "todo",
        "--input",
        "add milk",
        "--input",
        "add eggs",
        "--input",
        "add carrots",
    ])
    .ok();
    assert_eq!(
        lines(&out),
        [
            "added milk: milk",
            "noted (1)",
            "added eggs: milk, eggs",
            "noted (2)",
            "added carrots: milk, eggs, carrots",
            "noted (3)"
        ]
    );
    // Each turn: invoke, kv get, kv put, infer, complete carrying the state.
    let tl = t.run(&["session", "get", "todo", "--json"]).json();
    let nodes = tl["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 24);
    let kinds: Vec<&str> = nodes[..8]
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "invoke", "request", "response", "request", "response", "request", "response",
            "complete"
        ]
    );
    assert_eq!(nodes[1]["to"], "kv");
    assert_eq!(nodes[5]["to"], "infer");
    assert_eq!(nodes[6]["sequence"], 3);
    assert!(nodes[7]["state"].is_string());
    // 2. fork after eggs (the second complete): the list there has no carrots.
    let eggs = nodes[15]["hash"].as_str().unwrap().to_owned();
    assert_eq!(nodes[15]["kind"], "complete");
    t.run(&[
        "session", "fork", "todo", "--from", &eggs, "--branch", "fix",
    ])
    .ok();
    let out = run(&[
        "run",
        "todo",
        "--branch",
        "fix",
        "--input",
        "list",
        "--input",
        "add bread",
    ])
    .ok();
    assert_eq!(lines(&out)[0], "your list: milk, eggs");
    assert_eq!(lines(&out)[2], "added bread: milk, eggs, bread");
    // 3. promote: main has milk, eggs, bread; the sealed timeline still has carrots.
    let p = t
        .run(&["session", "promote", "todo", "--branch", "fix", "--json"])
        .json();
    let sealed = p["sealed_as"].as_str().unwrap().to_owned();
    let out = run(&["run", "todo", "--input", "list"]).ok();
    assert_eq!(lines(&out)[0], "your list: milk, eggs, bread");
    let old = t
        .run(&["state", "get", "todo", "todos", "--branch", &sealed])
        .ok();
    assert_eq!(old, r#"["milk", "eggs", "carrots"]"#);
    // 4. replay main against the same agent with no upstream: identical.
    let r = t
        .run(&["replay", "todo", "--json", "--", "python3", &agent])
        .json();
    assert_eq!(r["divergence"], serde_json::Value::Null, "{r}");
    assert_eq!(r["turns"].as_array().unwrap().len(), 5);
    assert!(r["session"].as_str().unwrap().starts_with("ses-"));
    // 5. a changed agent diverges at the first turn's inference request.
    let changed = t.home().join("changed.py");
    let src = std::fs::read_to_string(&agent)
        .unwrap()
        .replace("f\"added {item}\"", "f\"added: {item}\"");
    std::fs::write(&changed, src).unwrap();
    let r = t.run(&["replay", "todo", "--", "python3", changed.to_str().unwrap()]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let out = r.stdout();
    assert!(
        out.contains("divergence at turn 1, call #3: request differs"),
        "{out}"
    );
    assert!(
        out.contains("+      \"content\": \"added: milk: milk\""),
        "{out}"
    );
    // Everything recorded verifies.
    t.run(&["verify"]).ok();
}

const ROUGH_AGENT: &str = r#"
import json, os, sys, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text, kv = req["input"], req["services"]["kv_url"]
        if text == "hang":
            time.sleep(30)
        if text == "crash":
            urllib.request.urlopen(urllib.request.Request(kv + "/k", data=b"v", method="PUT"))
            os._exit(3)
        if text == "keep":
            open(os.environ["KV_FILE"], "w").write(kv)
        if text == "late":
            kvu = open(os.environ["KV_FILE"]).read()
            try:
                urllib.request.urlopen(kvu + "/k")
                out = "late call accepted"
            except urllib.error.HTTPError as e:
                out = f"{e.code} {json.loads(e.read())['error']['kind']}"
            body = out.encode()
        elif text == "garbage":
            body = b'{"answer": 1}'
        else:
            body = json.dumps({"output": "ok " + text}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain" if text == "late" else "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

#[test]
fn failing_agents_end_their_turn_with_a_recorded_failure() {
    let t = TestEnv::new();
    let script = t.home().join("rough.py");
    std::fs::write(&script, ROUGH_AGENT).unwrap();
    let kv_file = t.home().join("kv-url");
    let r = t
        .cmd()
        .env("KV_FILE", &kv_file)
        .args(["run", "rough", "--timeout", "1", "--json"])
        .args([
            "--input", "hello", "--input", "hang", "--input", "crash", "--input", "garbage",
        ])
        .args(["--input", "keep", "--input", "late", "--input", "after"])
        .args(["--", "python3", script.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        r.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let turns: Vec<serde_json::Value> = String::from_utf8_lossy(&r.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(turns.len(), 7);
    let failure = |i: usize| turns[i]["failure"]["kind"].as_str().map(str::to_owned);
    assert_eq!(turns[0]["output"], "ok hello");
    assert_eq!(failure(1).as_deref(), Some("timeout"));
    assert_eq!(failure(2).as_deref(), Some("crash"));
    assert_eq!(failure(3).as_deref(), Some("garbage"));
    // The crashed turn kept its kv call; the harness restarted the agent.
    let crash_nodes = turns[2]["nodes"].as_array().unwrap();
    assert_eq!(
        crash_nodes.len(),
        4,
        "invoke, kv put, its response, complete"
    );
    let complete = crash_nodes.last().unwrap();
    assert_eq!(complete["diagnostics"]["failure"], "crash");
    // A kv URL of an ended turn is refused with a clear kind.
    assert_eq!(turns[5]["output"], "409 turn_ended");
    assert_eq!(turns[6]["output"], "ok after");
    // Every turn is invoke … complete, and the store verifies.
    for turn in &turns {
        let n = turn["nodes"].as_array().unwrap();
        assert_eq!(n[0]["kind"], "invoke");
        assert_eq!(n.last().unwrap()["kind"], "complete");
    }
    t.run(&["verify"]).ok();
}

#[test]
fn chat_forks_promotes_and_a_second_chat_on_the_timeline_is_refused() {
    use std::process::Stdio;
    let t = TestEnv::new();
    let agent = todo_agent();
    let mut first = t
        .cmd()
        .args(["chat", "todo", "--", "python3", &agent])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(first.stderr.take().unwrap());
    let mut banner = String::new();
    err.read_line(&mut banner).unwrap();
    assert!(banner.contains("· branch main ·"), "{banner}");
    // The first chat holds `main`: a second one is refused, naming it.
    let second = t.run(&["chat", "todo", "--", "python3", &agent]);
    assert_ne!(second.code(), 0);
    assert!(
        second
            .stderr()
            .contains("is in use by another convo run/chat/replay (convo chat, pid"),
        "{}",
        second.stderr()
    );
    let mut stdin = first.stdin.take().unwrap();
    stdin
        .write_all(b"add milk\nadd eggs\n/fork @1 alt\nlist\n/state\n/promote\nlist\n/quit\n")
        .unwrap();
    drop(stdin);
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success());
    let out = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        lines(&out),
        [
            "added milk: milk",
            "added eggs: milk, eggs",
            "your list: milk",
            r#"todos = ["milk"]"#,
            "your list: milk"
        ]
    );
    let b = t.run(&["branch", "list", "todo", "--json"]).json();
    assert_eq!(b.as_array().map(Vec::len), Some(2), "{b}");
    t.run(&["verify"]).ok();
}
