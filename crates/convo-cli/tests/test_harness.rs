//! The agent harness end to end: `convo run` / `replay` with real Python
//! agents as child processes, a scripted inference upstream, the todo
//! walkthrough (fork keeps the state, promote), and the failures.

use crate::common::TestEnv;
use convo_testutil::Backend;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// `examples/NAME/agent.py`.
fn example(name: &str) -> String {
    let p: PathBuf = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .join("agent.py");
    p.to_string_lossy().into_owned()
}

pub(crate) fn todo_agent() -> String {
    example("todo-agent")
}

/// A scripted OpenAI-compatible upstream written for these tests: each
/// call is answered by `answer(n, path, request body)` (n counting calls
/// from 1); every call's path and body are kept. An answer
/// `{"sse": [[event, data], …]}` is sent as a server-sent event stream
/// (what Claude Code, Codex and Gemini CLI ask for, see test_agents.rs). Each
/// connection is served on its own thread.
pub(crate) struct Upstream {
    pub(crate) url: String,
    pub(crate) calls: Arc<Mutex<Vec<(String, Value)>>>,
}

impl Upstream {
    pub(crate) fn start(answer: fn(usize, &str, &Value) -> Value) -> Upstream {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", l.local_addr().unwrap());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let kept = calls.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { continue };
                let kept = kept.clone();
                std::thread::spawn(move || Upstream::serve(conn, &kept, answer));
            }
        });
        Upstream { url, calls }
    }

    fn serve(
        mut conn: std::net::TcpStream,
        kept: &Mutex<Vec<(String, Value)>>,
        answer: fn(usize, &str, &Value) -> Value,
    ) -> Option<()> {
        let mut r = BufReader::new(conn.try_clone().ok()?);
        let mut len = 0usize;
        let mut first = String::new();
        r.read_line(&mut first).ok()?;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).ok()? == 0 || h == "\r\n" {
                break;
            }
            if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().ok()?;
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).ok()?;
        let path = first.split(' ').nth(1).unwrap_or("").to_owned();
        let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let n = {
            let mut c = kept.lock().unwrap();
            c.push((path.clone(), req.clone()));
            c.len()
        };
        let reply = answer(n, &path, &req);
        let (kind, out) = match reply.get("sse").and_then(Value::as_array) {
            Some(events) => {
                let mut s = String::new();
                for e in events {
                    // `[null, data]`: an event without a name (Gemini's).
                    match e[0].as_str() {
                        Some(name) => s.push_str(&format!("event: {name}\ndata: {}\n\n", e[1])),
                        None => s.push_str(&format!("data: {}\n\n", e[1])),
                    }
                }
                ("text/event-stream", s)
            }
            None => ("application/json", reply.to_string()),
        };
        write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
            out.len()
        )
        .ok()
    }

    fn count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    fn paths(&self) -> Vec<String> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|c| c.0.clone())
            .collect()
    }
}

/// A chat completion with this message.
fn completion(message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })
}

/// Every call answered "noted (N)".
pub(crate) fn noted(n: usize, path: &str, _: &Value) -> Value {
    assert_eq!(path, "/v1/chat/completions");
    completion(
        json!({"role": "assistant", "content": format!("noted ({n})")}),
        "stop",
    )
}

/// A model that uses the todo tools: "add X" calls add_todo(X), anything
/// else list_todos(); after a tool's result it answers "done: RESULT".
fn tool_model(_: usize, path: &str, req: &Value) -> Value {
    assert_eq!(path, "/v1/chat/completions");
    assert!(req["tools"].is_array(), "{req}");
    let last = req["messages"].as_array().and_then(|m| m.last()).unwrap();
    if last["role"] == "tool" {
        let content = last["content"].as_str().unwrap_or_default();
        return completion(
            json!({"role": "assistant", "content": format!("done: {content}")}),
            "stop",
        );
    }
    let text = last["content"].as_str().unwrap_or_default();
    let (name, args) = match text.strip_prefix("add ") {
        Some(item) => ("add_todo", json!({"item": item})),
        None => ("list_todos", json!({})),
    };
    completion(
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{name}"), "type": "function",
            "function": {"name": name, "arguments": args.to_string()},
        }]}),
        "tool_calls",
    )
}

fn lines(s: &str) -> Vec<String> {
    s.lines().map(str::to_owned).collect()
}

#[test]
fn todo_walkthrough_fork_keeps_state_promote_and_replay() {
    let t = TestEnv::new();
    let upstream = Upstream::start(noted);
    let up = upstream.url.clone();
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
    // 4. replay main against the same agent with no upstream: identical,
    // every model call answered from the recording (none reaches the model).
    let before = upstream.count();
    let r = t
        .run(&["replay", "todo", "--json", "--", "python3", &agent])
        .json();
    assert_eq!(r["divergence"], serde_json::Value::Null, "{r}");
    assert_eq!(r["turns"].as_array().unwrap().len(), 5);
    assert!(r["session"].as_str().unwrap().starts_with("ses-"));
    assert_eq!(upstream.count(), before, "a replay never calls the model");
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
    // 6. a changed kv write is answered 409 `replay_diverged` and not applied.
    let writer = t.home().join("writer.py");
    let src = std::fs::read_to_string(&agent).unwrap().replace(
        "json.dumps(todos).encode()",
        "json.dumps(todos + [\"extra\"]).encode()",
    );
    std::fs::write(&writer, src).unwrap();
    let r = t.run(&[
        "replay",
        "todo",
        "--json",
        "--",
        "python3",
        writer.to_str().unwrap(),
    ]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let v: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(v["divergence"]["turn"], 1, "{v}");
    assert_eq!(v["divergence"]["sequence"], 2, "{v}");
    let replayed = v["session"].as_str().unwrap();
    let state = t.run(&["state", "list", replayed, "--json"]).ok();
    assert!(
        !state.contains("extra"),
        "the differing write was applied: {state}"
    );
    let tl = t.run(&["session", "get", replayed, "--json"]).json();
    let refused = tl["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["kind"] == "response" && n["from"] == "kv" && n["sequence"] == 2)
        .unwrap();
    assert_eq!(refused["diagnostics"]["status"], 409, "{refused}");
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
    // Refused, like a store write into an open turn (exit 4), not a usage error.
    assert_eq!(second.code(), 4, "{}", second.stderr());
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

/// Runs `convo ARGS` with `stdin` as its input.
fn run_with_stdin(t: &TestEnv, args: &[&str], stdin: &str) -> crate::common::Run {
    t.run_stdin(args, stdin.as_bytes())
}

#[test]
fn inputs_from_a_file_or_stdin_and_replay_live_after_a_node() {
    let t = TestEnv::new();
    let upstream = Upstream::start(noted);
    let agent = todo_agent();
    let tail = ["--upstream", upstream.url.as_str(), "--", "python3", &agent];
    // Inputs one per line from a file (blank lines skipped)…
    let file = t.home().join("inputs.txt");
    std::fs::write(&file, "add milk\n\nadd eggs\n").unwrap();
    let mut a = vec!["run", "todo", "--inputs", file.to_str().unwrap()];
    a.extend(tail);
    let out = t.run(&a).ok();
    assert_eq!(
        lines(&out),
        [
            "added milk: milk",
            "noted (1)",
            "added eggs: milk, eggs",
            "noted (2)"
        ]
    );
    // …or from stdin, with `--inputs -` or with no input given at all.
    let mut a = vec!["run", "todo", "--inputs", "-"];
    a.extend(tail);
    let out = run_with_stdin(&t, &a, "add carrots\n").ok();
    assert_eq!(lines(&out)[0], "added carrots: milk, eggs, carrots");
    let mut a = vec!["run", "todo"];
    a.extend(tail);
    let out = run_with_stdin(&t, &a, "remove eggs\n").ok();
    assert_eq!(lines(&out)[0], "removed eggs: milk, carrots");
    assert_eq!(upstream.count(), 4);
    // Replay, live after turn 2's complete: turns 1-2 come from the
    // recording (no model call), turns 3-4 call the model again.
    let tl = t.run(&["session", "get", "todo", "--json"]).json();
    let nodes = tl["nodes"].as_array().unwrap();
    let completes: Vec<&Value> = nodes.iter().filter(|n| n["kind"] == "complete").collect();
    assert_eq!(completes.len(), 4);
    let second = completes[1]["hash"].as_str().unwrap()[..12].to_owned();
    let state_before = t.run(&["state", "get", "todo", "todos"]).ok();
    assert!(!second.is_empty());
    // `main@2`: the reference for turn 2's last node (its complete).
    let mut a = vec!["replay", "todo", "--json", "--live-after", "main@2"];
    a.extend(tail);
    let r = t.run(&a).json();
    assert_eq!(r["divergence"], Value::Null, "{r}");
    let live: Vec<bool> = r["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["live"].as_bool().unwrap())
        .collect();
    assert_eq!(live, [false, false, true, true]);
    assert_eq!(
        upstream.count(),
        6,
        "only the two live turns call the model"
    );
    // The replay has its own timeline (a new session): the original's
    // state is untouched, the replay's state ends the same.
    let rs = r["session"].as_str().unwrap();
    assert_ne!(rs, tl["session"]["id"].as_str().unwrap_or_default());
    assert_eq!(t.run(&["state", "get", "todo", "todos"]).ok(), state_before);
    assert_eq!(t.run(&["state", "get", rs, "todos"]).ok(), state_before);
    let replayed = t.run(&["session", "get", rs, "--json"]).json();
    let inputs: Vec<&str> = replayed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "invoke")
        .map(|n| n["payload"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        inputs,
        ["add milk", "add eggs", "add carrots", "remove eggs"]
    );
    // The replayed turn 1 answered the model call from the recording.
    let resp = replayed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["kind"] == "response" && n["from"] == "infer")
        .unwrap();
    assert_eq!(resp["diagnostics"]["replayed"], true, "{resp}");
    // An unknown node is a clear error.
    let mut a = vec!["replay", "todo", "--live-after", "0000deadbeef"];
    a.extend(tail);
    let r = t.run(&a);
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("--live-after 0000deadbeef"),
        "{}",
        r.stderr()
    );
    t.run(&["verify"]).ok();
}

const ENV_AGENT: &str = r#"
import json, os, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
def post(url, doc):
    req = urllib.request.Request(url, data=json.dumps(doc).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req) as r:
        return r.status
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        msg = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        e = os.environ
        got = [
            post(e["OPENAI_BASE_URL"] + "/chat/completions", msg),
            post(e["OPENAI_API_BASE"] + "/chat/completions", msg),
            post(e["OPENAI_HOST"] + "/v1/chat/completions", msg),
            post(e["OLLAMA_HOST"] + "/api/chat", msg),
            post(e["ANTHROPIC_BASE_URL"] + "/v1/messages", msg),
        ]
        body = json.dumps({"output": " ".join(map(str, got)) + " " + e["OPENAI_API_KEY"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

fn echo_model(_: usize, _: &str, _: &Value) -> Value {
    completion(json!({"role": "assistant", "content": "ok"}), "stop")
}

#[test]
fn a_child_finds_convo_through_the_variables_sdks_read() {
    let t = TestEnv::new();
    let upstream = Upstream::start(echo_model);
    let script = t.home().join("env_agent.py");
    std::fs::write(&script, ENV_AGENT).unwrap();
    let out = t
        .run(&[
            "run",
            "env",
            "--input",
            "go",
            "--upstream",
            &upstream.url,
            "--",
            "python3",
            script.to_str().unwrap(),
        ])
        .ok();
    // Every variable reaches convo (and through it the upstream); the SDKs'
    // key gets a placeholder when convo's environment has none.
    assert_eq!(out, "200 200 200 200 200 convo-no-key");
    assert_eq!(
        upstream.paths(),
        [
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/api/chat",
            "/v1/messages"
        ]
    );
    let tl = t.run(&["session", "get", "env", "--json"]).json();
    let infer: Vec<&Value> = tl["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "request" && n["to"] == "infer")
        .collect();
    assert_eq!(infer.len(), 5, "each call is recorded");
}

const STREAM_AGENT: &str = r#"
import json, os, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
FLAGS = os.environ["FLAGS"]
def wait_for(name):
    for _ in range(6000):
        if os.path.exists(os.path.join(FLAGS, name)):
            return
        time.sleep(0.01)
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
    def do_POST(self):
        text = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["input"]
        if text == "hang":
            with open(os.path.join(FLAGS, "hanging"), "w") as f:
                f.write(str(os.getpid()))
            time.sleep(60)
        if text == "hold":
            open(os.path.join(FLAGS, "holding"), "w").close()
            wait_for("release")
        if text == "cut":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"half an answer")
            open(os.path.join(FLAGS, "cutting"), "w").close()
            time.sleep(60)
        if text == "stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.chunk(b"first part, ")
            wait_for("go")
            self.chunk(b"second part")
            self.wfile.write(b"0\r\n\r\n")
            return
        body = json.dumps({"output": "ok " + text}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

/// Reads `r` until what was read ends with `want`; returns all of it.
fn read_until(r: &mut impl Read, want: &str) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !String::from_utf8_lossy(&got).ends_with(want) {
        let n = r.read(&mut b).unwrap();
        assert!(
            n > 0,
            "ended before {want:?}: {}",
            String::from_utf8_lossy(&got)
        );
        got.push(b[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn wait_for_file(p: &std::path::Path) {
    for _ in 0..6000 {
        if p.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{} never appeared", p.display());
}

#[test]
fn chat_streams_the_answer_and_ctrl_c_ends_only_the_turn() {
    use std::process::Stdio;
    let t = TestEnv::new();
    let script = t.home().join("stream_agent.py");
    std::fs::write(&script, STREAM_AGENT).unwrap();
    let flags = t.home().join("flags");
    std::fs::create_dir_all(&flags).unwrap();
    let mut chat = t
        .cmd()
        .env("FLAGS", &flags)
        .args(["chat", "s", "--", "python3", script.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    let mut out = chat.stdout.take().unwrap();
    // A warm-up turn: by then the chat handles Ctrl-C itself.
    stdin.write_all(b"hello\n").unwrap();
    assert_eq!(read_until(&mut out, "\n"), "ok hello\n");
    // The first piece is shown while the agent still holds the rest back
    // (it sends the rest only once the test has seen the first piece).
    stdin.write_all(b"stream\n").unwrap();
    assert_eq!(read_until(&mut out, "first part, "), "first part, ");
    std::fs::write(flags.join("go"), "").unwrap();
    assert_eq!(read_until(&mut out, "\n"), "second part\n");
    // Ctrl-C while the agent hangs ends that turn; the chat goes on.
    stdin.write_all(b"hang\n").unwrap();
    wait_for_file(&flags.join("hanging"));
    let kill = std::process::Command::new("kill")
        .args(["-INT", &chat.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    // Ctrl-C after part of an answer was streamed: that part is kept.
    stdin.write_all(b"cut\n").unwrap();
    assert_eq!(read_until(&mut out, "half an answer"), "half an answer");
    wait_for_file(&flags.join("cutting"));
    let kill = std::process::Command::new("kill")
        .args(["-INT", &chat.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    stdin.write_all(b"after\n/quit\n").unwrap();
    drop(stdin);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(rest.ends_with("ok after\n"), "{rest:?}");
    assert!(chat.wait().unwrap().success());
    let tl = t.run(&["session", "get", "s", "--json"]).json();
    let completes: Vec<&Value> = tl["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "complete")
        .collect();
    assert_eq!(completes.len(), 5);
    assert_eq!(completes[1]["payload"], "first part, second part");
    assert_eq!(completes[1]["failure"], Value::Null);
    assert_eq!(completes[2]["diagnostics"]["failure"], "interrupted");
    assert_eq!(completes[2]["failure"], "interrupted");
    assert_eq!(completes[2]["payload"], "");
    // The cut turn keeps what was streamed, marked partial.
    assert_eq!(completes[3]["failure"], "interrupted");
    assert_eq!(completes[3]["payload"], "half an answer");
    assert_eq!(completes[3]["diagnostics"]["partial"], true);
    assert_eq!(completes[4]["payload"], "ok after");
    // `log` flags the failed turns.
    let log = t.run(&["log", "s"]).ok();
    assert!(
        log.contains("[interrupted, partial] half an answer"),
        "{log}"
    );
    t.run(&["verify"]).ok();
}

#[test]
fn writers_never_land_inside_an_open_turn_and_a_killed_run_leaves_it_interrupted() {
    use std::process::Stdio;
    let t = TestEnv::new();
    let script = t.home().join("stream_agent.py");
    std::fs::write(&script, STREAM_AGENT).unwrap();
    let script = script.to_str().unwrap();
    let flags = t.home().join("flags");
    std::fs::create_dir_all(&flags).unwrap();
    let r = t
        .cmd()
        .env("FLAGS", &flags)
        .args(["run", "s", "--input", "hello", "--", "python3", script])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    t.run(&["session", "fork", "s", "--from", "main", "--branch", "side"])
        .ok();
    // A run whose second turn stays open (the agent hangs).
    let mut run = t
        .cmd()
        .env("FLAGS", &flags)
        .args(["run", "s", "--input", "hang", "--", "python3", script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&flags.join("hanging"));
    // The pid is written after the file is created: wait for it.
    let agent_pid = loop {
        let p = std::fs::read_to_string(flags.join("hanging")).unwrap();
        if !p.is_empty() {
            break p;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let writers: [&[&str]; 6] = [
        &["say", "s", "--user", "x", "--agent", "y"],
        &["record", "s", "request", "--payload", "z"],
        &["state", "put", "s", "k", "v"],
        &["state", "delete", "s", "k"],
        &["session", "fork", "s", "--from", "main@2", "--branch", "f"],
        &["session", "promote", "s", "--branch", "side"],
    ];
    for w in writers {
        let r = t.run(w);
        assert_eq!(r.code(), 4, "{w:?}: {}", r.stderr());
        let e = r.stderr();
        assert!(e.contains("inside turn main@2"), "{w:?}: {e}");
        assert!(e.contains("convo run, pid"), "{w:?}: {e}");
    }
    // Another timeline of the session is free.
    t.run(&[
        "say", "s", "--branch", "side", "--user", "a", "--agent", "b",
    ])
    .ok();
    // A writer that waits gets its turn once the run is gone: killed, it
    // leaves its turn open, and the waiter closes it as interrupted.
    let waiter = t
        .cmd()
        .args(["say", "s", "--user", "later", "--agent", "done", "--wait"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    run.kill().unwrap();
    run.wait().unwrap();
    let w = waiter.wait_with_output().unwrap();
    assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
    let _ = std::process::Command::new("kill")
        .arg(agent_pid.trim())
        .status();
    let tl = t.run(&["session", "get", "s", "--json"]).json();
    let nodes = tl["nodes"].as_array().unwrap();
    let kinds: Vec<&str> = nodes.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "invoke", "complete", "invoke", "complete", "invoke", "complete"
        ],
        "nothing landed inside the open turn"
    );
    assert_eq!(nodes[3]["failure"], "interrupted");
    let why = nodes[3]["diagnostics"]["error"].as_str().unwrap();
    assert!(why.contains("convo run"), "{why}");
    assert_eq!(nodes[5]["payload"], "done");
    let text = t.run(&["session", "get", "s"]).ok();
    assert!(text.contains("[interrupted]"), "{text}");
    // A replay takes the cut turn as the recording says: compared up to
    // the cut, it is no divergence; the first one is the `say` turn's
    // answer, which this agent does not give.
    let r = t
        .cmd()
        .env("FLAGS", &flags)
        .args([
            "replay",
            "s",
            "--json",
            "--timeout",
            "2",
            "--",
            "python3",
            script,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&r.stderr));
    });
    assert_eq!(v["divergence"]["turn"], 3, "{v}");
    assert_eq!(v["divergence"]["what"], "output", "{v}");
    t.run(&["verify"]).ok();
}

/// `convo serve` sees the turn a `convo run` has open (a row in the
/// store): its appends, state writes, forks and promotes on that timeline
/// are refused 409 naming BRANCH@TURN until the turn ends; a run killed
/// mid-turn leaves it open, and the next API write closes it as
/// interrupted.
fn api_writes_and_open_turns(backend: Backend) {
    use crate::serve_util::Server;
    use std::process::Stdio;
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let script = t.home().join("stream_agent.py");
    std::fs::write(&script, STREAM_AGENT).unwrap();
    let script = script.to_str().unwrap();
    let flags = t.home().join("flags");
    std::fs::create_dir_all(&flags).unwrap();
    let s = t.session("bot");
    let run = |input: &str| {
        t.cmd()
            .env("FLAGS", &flags)
            .args(["run", &s, "--input", input, "--", "python3", script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = run("hello").wait_with_output().unwrap();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    t.run(&["session", "fork", &s, "--from", "main", "--branch", "side"])
        .ok();
    let srv = Server::start(&t, &[]);
    let nodes = |b: &str| format!("/api/v1/sessions/{s}/branches/{b}/nodes");
    let line = |p: &str| json!({"kind": "invoke", "payload": p});

    // A turn held open by the agent.
    let held = run("hold");
    wait_for_file(&flags.join("holding"));
    let refused = |r: crate::serve_util::Resp, what: &str| {
        assert_eq!(r.status, 409, "{what}: {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["kind"], "refused", "{what}: {e}");
        let m = e["error"]["message"].as_str().unwrap();
        assert!(m.contains("inside turn main@2"), "{what}: {m}");
        assert!(m.contains("convo run, pid"), "{what}: {m}");
    };
    refused(srv.post_json(&nodes("main"), &line("x")), "append");
    refused(
        srv.req(
            "PUT",
            &format!("/api/v1/sessions/{s}/branches/main/state/k"),
            &[("Content-Type", "application/octet-stream")],
            b"v",
        ),
        "state put",
    );
    refused(
        srv.req(
            "DELETE",
            &format!("/api/v1/sessions/{s}/branches/main/state/k"),
            &[],
            b"",
        ),
        "state delete",
    );
    refused(
        srv.post_json(
            &format!("/api/v1/sessions/{s}/fork"),
            &json!({"from": "main@2", "branch": "f"}),
        ),
        "fork",
    );
    refused(
        srv.post_json(
            &format!("/api/v1/sessions/{s}/promote"),
            &json!({"branch": "side"}),
        ),
        "promote",
    );
    // Another timeline of the session is free.
    srv.post_json(&nodes("side"), &line("elsewhere"))
        .expect(201);
    let doc = srv.get("/openapi.json").expect(200);
    let post = &doc["paths"]["/api/v1/sessions/{session}/branches/{branch}/nodes"]["post"];
    assert!(
        post["responses"]["409"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("BRANCH@TURN")),
        "{post}"
    );
    // The turn ends: the same append is taken.
    std::fs::write(flags.join("release"), "").unwrap();
    let held = held.wait_with_output().unwrap();
    assert!(
        held.status.success(),
        "{}",
        String::from_utf8_lossy(&held.stderr)
    );
    srv.post_json(
        &nodes("main"),
        &json!([{"kind": "invoke", "payload": "after"}, {"kind": "complete", "payload": "ok"}]),
    )
    .expect(201);

    // A run killed mid-turn: its turn stays open (refused) until the
    // holder is gone, then the next API write closes it as interrupted.
    let mut hung = run("hang");
    wait_for_file(&flags.join("hanging"));
    let agent_pid = loop {
        let p = std::fs::read_to_string(flags.join("hanging")).unwrap();
        if !p.is_empty() {
            break p;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let r = srv.post_json(&nodes("main"), &line("too soon"));
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("inside turn main@4"), "{}", r.text());
    hung.kill().unwrap();
    hung.wait().unwrap();
    let _ = std::process::Command::new("kill")
        .arg(agent_pid.trim())
        .status();
    srv.post_json(
        &nodes("main"),
        &json!([{"kind": "invoke", "payload": "next"}, {"kind": "complete", "payload": "fine"}]),
    )
    .expect(201);
    let tl = t.run(&["session", "get", &s, "--json"]).json();
    let got: Vec<(String, String)> = tl["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["kind"].as_str().unwrap().to_owned(),
                n["payload"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("invoke", "hello"),
        ("complete", "ok hello"),
        ("invoke", "hold"),
        ("complete", "ok hold"),
        ("invoke", "after"),
        ("complete", "ok"),
        ("invoke", "hang"),
        ("complete", ""),
        ("invoke", "next"),
        ("complete", "fine"),
    ]
    .iter()
    .map(|(k, p)| (k.to_string(), p.to_string()))
    .collect();
    assert_eq!(got, want, "nothing landed inside a turn");
    assert_eq!(tl["nodes"][7]["failure"], "interrupted", "{tl}");
    drop(srv);
    t.run(&["verify"]).ok();
}

/// A turn held by a harness on another machine sharing the store is
/// only a row here (no lock file to see): every writer is refused, the
/// CLI (exit 4) and the API (409), and nobody closes it.
#[test]
fn a_turn_open_on_another_machine_refuses_every_writer() {
    use crate::serve_util::Server;
    let t = TestEnv::new();
    let s = t.session("bot");
    t.run(&["say", &s, "--user", "hi", "--agent", "yo"]).ok();
    let turn = json!({"submission": "ab".repeat(32), "turn": 2, "agent": "bot",
        "holder": "convo run, pid 7", "host": "another-machine",
        "lock": "/nonexistent/turn.lock"});
    rusqlite::Connection::open(t.db())
        .unwrap()
        .execute(
            "INSERT INTO open_turns (session, branch, turn) VALUES (?1, 'main', ?2)",
            rusqlite::params![s, turn.to_string()],
        )
        .unwrap();
    for w in [
        &["say", &s, "--user", "x", "--agent", "y"][..],
        &["state", "put", &s, "k", "v"],
    ] {
        let r = t.run(w);
        assert_eq!(r.code(), 4, "{w:?}: {}", r.stderr());
        assert!(
            r.stderr()
                .contains("inside turn main@2, open by convo run, pid 7 on another-machine"),
            "{w:?}: {}",
            r.stderr()
        );
    }
    let srv = Server::start(&t, &[]);
    let r = srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/main/nodes"),
        &json!({"kind": "invoke", "payload": "x"}),
    );
    assert_eq!(r.status, 409, "{}", r.text());
    assert!(r.text().contains("on another-machine"), "{}", r.text());
    let n = t.run(&["session", "get", &s, "--json"]).json()["nodes"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(n, 2, "nothing written, nothing closed");
}

/// `state put` on a fork (LangGraph's `update_state`) is recorded as a
/// turn of `kv` calls, so the agent's next turn on the fork and a replay
/// of the fork see the same state: no divergence, the replay ends with it.
fn state_write_on_a_fork(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let upstream = Upstream::start(noted);
    let up = upstream.url.clone();
    let agent = todo_agent();
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--upstream", &up, "--", "python3", &agent]);
        t.run(&a)
    };
    run(&["run", "todo", "--input", "add milk", "--input", "add eggs"]).ok();
    t.run(&[
        "session", "fork", "todo", "--from", "main", "--branch", "alt",
    ])
    .ok();
    let before = t
        .run(&["session", "get", "todo", "--branch", "alt", "--json"])
        .json()["nodes"]
        .as_array()
        .unwrap()
        .len();
    t.run(&[
        "state",
        "put",
        "todo",
        "todos",
        r#"["milk", "tea"]"#,
        "--branch",
        "alt",
    ])
    .ok();
    let tl = t
        .run(&["session", "get", "todo", "--branch", "alt", "--json"])
        .json();
    let nodes = tl["nodes"].as_array().unwrap();
    let kinds: Vec<&str> = nodes[before..]
        .iter()
        .map(|n| n["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["invoke", "request", "response", "complete"], "{tl}");
    assert_eq!(nodes[before]["to"], "kv");
    assert_eq!(nodes[before + 1]["diagnostics"]["op"], "put");
    assert!(nodes[before + 3]["state"].is_string());
    // On `main` a state write only moves the working state (no node).
    let main_len = |t: &TestEnv| {
        t.run(&["session", "get", "todo", "--json"]).json()["nodes"]
            .as_array()
            .unwrap()
            .len()
    };
    let n = main_len(&t);
    t.run(&["state", "put", "todo", "note", "x"]).ok();
    assert_eq!(main_len(&t), n);
    let out = run(&["run", "todo", "--branch", "alt", "--input", "list"]).ok();
    assert_eq!(lines(&out)[0], "your list: milk, tea");
    // The replay re-applies the write: the agent's turn after it matches.
    let r = t
        .run(&[
            "replay", "todo", "--branch", "alt", "--json", "--", "python3", &agent,
        ])
        .json();
    assert_eq!(r["divergence"], Value::Null, "{r}");
    let turns = r["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 4, "{r}");
    assert_eq!(turns[2]["input"], "state put todos");
    assert_eq!(
        lines(turns[3]["output"].as_str().unwrap())[0],
        "your list: milk, tea"
    );
    let replayed = r["session"].as_str().unwrap();
    assert_eq!(
        t.run(&["state", "get", replayed, "todos"]).ok(),
        r#"["milk", "tea"]"#
    );
    t.run(&["verify"]).ok();
}

#[test]
fn a_vlinder_agent_runs_unchanged() {
    let t = TestEnv::new();
    let upstream = Upstream::start(noted);
    let agent = example("vlinder-agent");
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--dialect", "vlinder", "--upstream", &upstream.url]);
        a.extend(["--", "python3", &agent]);
        t.run(&a)
    };
    let out = run(&["run", "todo", "--input", "add milk", "--input", "add eggs"]).ok();
    assert_eq!(
        lines(&out),
        [
            "added milk: milk",
            "noted (1)",
            "added eggs: milk, eggs",
            "noted (2)"
        ]
    );
    // The raw-text invoke, the kv routes and the inference host were all
    // recorded as usual.
    let tl = t.run(&["session", "get", "todo", "--json"]).json();
    let nodes = tl["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["payload"], "add milk");
    let put = nodes
        .iter()
        .find(|n| n["kind"] == "request" && n["diagnostics"]["op"] == "put")
        .unwrap();
    assert_eq!(put["to"], "kv");
    assert_eq!(put["diagnostics"]["key"], "/todos.json");
    assert_eq!(put["diagnostics"]["dialect"], "vlinder");
    assert_eq!(put["payload"], r#"["milk"]"#);
    assert_eq!(
        t.run(&["state", "get", "todo", "/todos.json"]).ok(),
        r#"["milk", "eggs"]"#
    );
    // A fork after milk resumes with that state.
    let first_complete = nodes.iter().find(|n| n["kind"] == "complete").unwrap();
    let from = first_complete["hash"].as_str().unwrap();
    t.run(&["session", "fork", "todo", "--from", from, "--branch", "fix"])
        .ok();
    let out = run(&["run", "todo", "--branch", "fix", "--input", "list"]).ok();
    assert_eq!(lines(&out)[0], "your list: milk");
    // And a replay matches without the model.
    let before = upstream.count();
    let r = t
        .run(&[
            "replay",
            "todo",
            "--json",
            "--dialect",
            "vlinder",
            "--",
            "python3",
            &agent,
        ])
        .json();
    assert_eq!(r["divergence"], Value::Null, "{r}");
    assert_eq!(upstream.count(), before);
    t.run(&["verify"]).ok();
}

/// An agent process the test starts itself (for `--agent-url`), ended on drop.
struct Served {
    child: std::process::Child,
    url: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_agent(python: &str, script: &str) -> Served {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(python)
        .arg(script)
        .env("PORT", port.to_string())
        .env("OPENAI_API_KEY", "test-key")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let served = Served {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // Importing a framework can take a while on a loaded machine.
    for _ in 0..3000 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return served;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{script} never listened on {port}");
}

/// The walkthrough for an agent whose model uses the todo tools: three
/// adds, a fork after the second that lists two items, a replay served
/// from the recording. Returns the session's timeline.
fn tool_agent_walkthrough(example_name: &str) -> Option<(TestEnv, Value)> {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CONVO_TEST_PYTHON (scripts/test-env)"
        );
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test-env sets it up)");
        return None;
    };
    let t = TestEnv::new();
    let upstream = Upstream::start(tool_model);
    let agent = serve_agent(&python, &example(example_name));
    let with = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--agent-url", &agent.url, "--upstream", &upstream.url]);
        t.run(&a)
    };
    let out = with(&[
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
            r#"done: ["milk"]"#,
            r#"done: ["milk", "eggs"]"#,
            r#"done: ["milk", "eggs", "carrots"]"#
        ]
    );
    assert_eq!(upstream.count(), 6, "a tool call and an answer per turn");
    let tl = t.run(&["session", "get", "todo", "--json"]).json();
    let nodes = tl["nodes"].as_array().unwrap().clone();
    // Turn 1: the model's tool call, the tool's kv write, the model's answer.
    let turn1: Vec<String> = nodes
        .iter()
        .take_while(|n| n["kind"] != "complete")
        .filter(|n| n["kind"] == "request")
        .map(|n| match n["to"].as_str().unwrap() {
            "kv" => format!("kv {}", n["diagnostics"]["op"].as_str().unwrap()),
            other => other.to_owned(),
        })
        .collect();
    assert_eq!(
        turn1.iter().filter(|c| *c == "infer").count(),
        2,
        "{turn1:?}"
    );
    assert!(turn1.contains(&"kv put".to_owned()), "{turn1:?}");
    // Fork after eggs: the list there has no carrots.
    let completes: Vec<&Value> = nodes.iter().filter(|n| n["kind"] == "complete").collect();
    let eggs = completes[1]["hash"].as_str().unwrap();
    t.run(&["session", "fork", "todo", "--from", eggs, "--branch", "fix"])
        .ok();
    let out = with(&["run", "todo", "--branch", "fix", "--input", "list"]).ok();
    assert_eq!(out, r#"done: ["milk", "eggs"]"#);
    // Replay main: every model call from the recording, none upstream.
    let before = upstream.count();
    let r = t
        .run(&["replay", "todo", "--json", "--agent-url", &agent.url])
        .json();
    assert_eq!(r["divergence"], Value::Null, "{r}");
    assert_eq!(r["turns"].as_array().unwrap().len(), 3);
    assert_eq!(upstream.count(), before, "a replay never calls the model");
    t.run(&["verify"]).ok();
    let fix = t
        .run(&["session", "get", "todo", "--branch", "fix", "--json"])
        .json();
    Some((t, fix))
}

#[test]
fn openai_sdk_agent_with_tool_calls() {
    tool_agent_walkthrough("openai-agent");
}

#[test]
fn langgraph_agent_resumes_on_a_fork_without_a_checkpointer() {
    let Some((_t, fix)) = tool_agent_walkthrough("langgraph-agent") else {
        return;
    };
    // The graph's conversation came from convo's state at the fork point:
    // the fork's first model call carries turns 1-2, not the carrots.
    let nodes = fix["nodes"].as_array().unwrap();
    let last_invoke = nodes.iter().rposition(|n| n["kind"] == "invoke").unwrap();
    let call = nodes[last_invoke..]
        .iter()
        .find(|n| n["kind"] == "request" && n["to"] == "infer")
        .unwrap();
    let body = call["payload"].as_str().unwrap();
    assert!(body.contains("add eggs") && body.contains("list"), "{body}");
    assert!(!body.contains("carrots"), "{body}");
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    api_writes_and_open_turns,
    state_write_on_a_fork,
);

#[test]
fn a_harness_agent_under_convo_test_replays_offline_and_a_change_fails() {
    let t = TestEnv::new();
    let upstream = Upstream::start(noted);
    let agent = todo_agent();
    t.run(&[
        "run",
        "todo",
        "--input",
        "add milk",
        "--input",
        "add eggs",
        "--upstream",
        &upstream.url,
        "--",
        "python3",
        &agent,
    ])
    .ok();
    let before = upstream.count();
    // The same agent: every turn matches, no model is called, the answers
    // are the output the assertions read.
    let o = t
        .cmd()
        .args(["test", "todo", "--harness", "--json"])
        .args(["--expect-contains", "added eggs: milk, eggs"])
        .args(["--", "python3", &agent])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    let test = &v["tests"][0];
    assert_eq!(test["status"], "passed", "{v:#}");
    assert_eq!(test["counts"]["exact"], 2, "{v:#}");
    assert_eq!(test["assertions"][0]["passed"], true, "{v:#}");
    assert_eq!(upstream.count(), before, "nothing reaches the model");

    // A changed model name (from the test file's env): the inference
    // request differs, the test fails naming the turn and the diff.
    let dir = t.home().join("suite");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("convo.toml"),
        format!(
            "[[test]]\nname = \"todo\"\nrecording = \"todo\"\nharness = true\n\
             command = [\"python3\", {agent:?}]\nenv = {{ TODO_MODEL = \"other-model\" }}\n"
        ),
    )
    .unwrap();
    let o = t
        .cmd()
        .current_dir(&dir)
        .args(["test", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1), "{v:#}");
    let test = &v["tests"][0];
    assert_eq!(test["status"], "changed", "{v:#}");
    let d = &test["divergence"];
    assert_eq!(
        (d["turn"].as_u64(), d["what"].as_str()),
        (Some(1), Some("request")),
        "{v:#}"
    );
    assert!(d["diff"].as_str().unwrap().contains("other-model"), "{v:#}");
    assert_eq!(upstream.count(), before);
}
