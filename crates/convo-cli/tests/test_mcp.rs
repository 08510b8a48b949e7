//! `convo mcp`, end to end: the official `mcp` Python SDK's client
//! (tests/clients/mcp_client.py) drives the real reference servers
//! (@modelcontextprotocol/server-everything and server-filesystem, from
//! npm) through `convo mcp wrap`: every message recorded on the session's
//! timeline, then answered from the recording with the server gone (in
//! another order), a changed call answered with an error naming what
//! changed, and a miss sent to the live server with `--on-miss live`.
use crate::common::TestEnv;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

struct Tools {
    python: String,
    modules: PathBuf,
}

fn tools() -> Option<Tools> {
    let python = std::env::var("CONVO_TEST_PYTHON_MCP").ok();
    let modules = std::env::var("CONVO_TEST_NODE_MODULES").ok();
    match (python, modules) {
        (Some(python), Some(m)) => Some(Tools {
            python,
            modules: PathBuf::from(m),
        }),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CONVO_TEST_PYTHON_MCP and CONVO_TEST_NODE_MODULES (scripts/test-env)"
            );
            eprintln!("SKIPPED: CONVO_TEST_PYTHON_MCP or CONVO_TEST_NODE_MODULES is not set");
            None
        }
    }
}

impl Tools {
    fn server(&self, package: &str) -> String {
        self.modules
            .join("@modelcontextprotocol")
            .join(package)
            .join("dist/index.js")
            .display()
            .to_string()
    }

    /// Runs the client with `steps` against `convo ARGS…` (stdio); what it printed.
    fn client(&self, t: &TestEnv, steps: &Value, convo_args: &[&str]) -> Value {
        let script = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clients/mcp_client.py");
        let mut cmd = Command::new(&self.python);
        cmd.arg(script)
            .arg(steps.to_string())
            .arg("stdio")
            .arg(env!("CARGO_BIN_EXE_convo"))
            .args(convo_args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", t.home())
            .env("CONVO_HOME", t.home());
        if let Some(url) = &t.store {
            cmd.env("CONVO_STORE", url);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "mcp_client failed: {stderr}");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("mcp_client printed no JSON ({e}): {stderr}"))
    }
}

impl Tools {
    /// Runs the client with `steps` against the MCP endpoint at `addr` (streamable HTTP).
    fn http_client(&self, steps: &Value, addr: &str) -> Value {
        let script = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clients/mcp_client.py");
        let out = Command::new(&self.python)
            .arg(script)
            .arg(steps.to_string())
            .arg("http")
            .arg(format!("http://{addr}/mcp"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

/// A timeline as `convo log --json` gives it, oldest first.
fn timeline(t: &TestEnv, session: &str, branch: &str) -> Vec<Value> {
    let v = t
        .run(&["log", session, "--branch", branch, "--json"])
        .json();
    let mut nodes = v.as_array().cloned().unwrap_or_default();
    nodes.reverse();
    nodes
}

fn mcp_of(n: &Value) -> &Value {
    &n["diagnostics"]["mcp"]
}

#[test]
fn everything_server_is_recorded_and_replayed_without_it() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let server = tools.server("server-everything");
    let steps = json!([
        ["list_tools"],
        ["call_tool", "echo", {"message": "hello"}],
        ["call_tool", "get-sum", {"a": 2, "b": 3}],
        ["list_resources"],
        ["read_resource", "demo://resource/static/document/architecture.md"],
        ["list_prompts"],
        ["get_prompt", "simple-prompt", {}],
        ["call_tool", "get-tiny-image", {}],
        ["ping"],
    ]);
    let live = tools.client(
        &t,
        &steps,
        &["mcp", "wrap", "--session", "run", "--", "node", &server],
    );
    assert_eq!(live["server"], "mcp-servers/everything");
    let results = live["results"].as_array().unwrap();
    assert_eq!(results[1]["content"][0]["text"], "Echo: hello");
    assert!(
        results[2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains('5')
    );

    // On the timeline: one submission, every request answered by its
    // response, the server named from its initialize answer.
    let nodes = timeline(&t, "run", "main");
    let kinds: Vec<&str> = nodes.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"invoke"));
    assert_eq!(kinds.last(), Some(&"complete"));
    let calls: Vec<&Value> = nodes
        .iter()
        .filter(|n| n["kind"] == "request" && n["to"] == "mcp:mcp-servers/everything")
        .collect();
    let methods: Vec<&str> = calls
        .iter()
        .map(|n| mcp_of(n)["method"].as_str().unwrap())
        .collect();
    for m in [
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
        "resources/read",
        "prompts/get",
        "ping",
    ] {
        assert!(methods.contains(&m), "{m} not recorded: {methods:?}");
    }
    let echo = calls
        .iter()
        .find(|n| mcp_of(n)["tool"] == "echo")
        .expect("the echo call is recorded with its tool");
    let answer = nodes
        .iter()
        .find(|n| n["kind"] == "response" && n["sequence"] == echo["sequence"])
        .expect("the echo call is answered");
    assert_eq!(answer["from"], "mcp:mcp-servers/everything");
    assert!(answer["diagnostics"]["latency_ms"].as_f64().is_some());

    // Replayed with the server gone, in the reverse order.
    let mut reversed: Vec<Value> = steps.as_array().unwrap().clone();
    reversed.reverse();
    let replayed = tools.client(
        &t,
        &json!(reversed),
        &[
            "mcp",
            "wrap",
            "--session",
            "run",
            "--replay",
            "--",
            "/nonexistent/mcp-server",
        ],
    );
    assert_eq!(replayed["server"], "mcp-servers/everything");
    let mut again: Vec<Value> = replayed["results"].as_array().unwrap().clone();
    again.reverse();
    assert_eq!(&again, results);
    // Replaying recorded nothing.
    assert_eq!(timeline(&t, "run", "main").len(), nodes.len());

    // A changed call: an error naming the pointer, recorded and received.
    let changed = tools.client(
        &t,
        &json!([["call_tool", "echo", {"message": "changed"}]]),
        &[
            "mcp",
            "wrap",
            "--session",
            "run",
            "--replay",
            "--",
            "/nonexistent/mcp-server",
        ],
    );
    let err = changed["results"][0]["error"].as_str().unwrap();
    assert!(
        err.contains("/params/arguments/message")
            && err.contains("\"hello\"")
            && err.contains("\"changed\""),
        "{err}"
    );
    assert_eq!(changed["results"][0]["code"], -32042);
}

#[test]
fn filesystem_server_replays_files_that_are_gone() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("notes.txt"), "alpha\nbeta\n").unwrap();
    let root_s = root.display().to_string();
    let file = root.join("notes.txt").display().to_string();
    let steps = json!([
        ["call_tool", "list_directory", {"path": root_s}],
        ["call_tool", "read_text_file", {"path": file}],
    ]);
    let server = tools.server("server-filesystem");
    let live = tools.client(
        &t,
        &steps,
        &[
            "mcp",
            "wrap",
            "--session",
            "fs",
            "--",
            "node",
            &server,
            &root_s,
        ],
    );
    let results = live["results"].as_array().unwrap();
    assert!(
        results[1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("beta")
    );
    drop(dir);
    assert!(!root.exists());
    // The same command: the server would start, but --replay does not start it.
    let replayed = tools.client(
        &t,
        &steps,
        &[
            "mcp",
            "wrap",
            "--session",
            "fs",
            "--replay",
            "--",
            "node",
            &server,
            &root_s,
        ],
    );
    assert_eq!(&replayed["results"], &live["results"]);
}

#[test]
fn a_replay_miss_goes_live_on_a_new_timeline() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let server = tools.server("server-everything");
    tools.client(
        &t,
        &json!([["call_tool", "echo", {"message": "hello"}]]),
        &["mcp", "wrap", "--session", "run", "--", "node", &server],
    );
    let mixed = tools.client(
        &t,
        &json!([
            ["call_tool", "echo", {"message": "hello"}],
            ["call_tool", "echo", {"message": "new"}],
        ]),
        &[
            "mcp",
            "wrap",
            "--session",
            "run",
            "--replay",
            "--on-miss",
            "live",
            "--",
            "node",
            &server,
        ],
    );
    assert_eq!(mixed["results"][0]["content"][0]["text"], "Echo: hello");
    assert_eq!(mixed["results"][1]["content"][0]["text"], "Echo: new");
    let live = timeline(&t, "run", "live-1");
    let new_call = live.iter().find(|n| {
        n["kind"] == "request"
            && n["diagnostics"]["mcp"]["tool"] == "echo"
            && n["payload"].as_str().is_some_and(|p| p.contains("new"))
    });
    assert!(new_call.is_some(), "the live call is recorded on live-1");
}

/// A free port on loopback (bound, then released for a server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// server-everything over streamable HTTP, once it listens.
fn everything_http(tools: &Tools) -> (std::process::Child, String) {
    use std::io::BufRead;
    let port = free_port();
    let mut child = Command::new("node")
        .arg(tools.server("server-everything"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening") {
        line.clear();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "server-everything did not start"
        );
    }
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

#[test]
fn streamable_http_server_is_relayed_recorded_and_replayed() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let (mut upstream, url) = everything_http(&tools);
    let relay = crate::serve_util::Server::launch(
        &t,
        &[
            "mcp",
            "proxy",
            "--upstream",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--session",
            "web",
        ],
    );
    let steps = json!([
        ["list_tools"],
        ["call_tool", "echo", {"message": "over http"}],
        ["call_tool_progress", "trigger-long-running-operation", {"duration": 1, "steps": 2}],
        ["ping"],
    ]);
    let live = tools.http_client(&steps, &relay.addr);
    assert_eq!(live["results"][1]["content"][0]["text"], "Echo: over http");
    relay.stop();
    let _ = upstream.kill();
    let _ = upstream.wait();

    let nodes = timeline(&t, "web", "main");
    let methods: Vec<&str> = nodes
        .iter()
        .filter_map(|n| mcp_of(n)["method"].as_str())
        .collect();
    for m in [
        "initialize",
        "tools/list",
        "tools/call",
        "notifications/progress",
        "ping",
    ] {
        assert!(
            methods.contains(&m),
            "{m} not recorded over HTTP: {methods:?}"
        );
    }
    // What was recorded over HTTP replays over stdio, the server gone.
    let replayed = tools.client(
        &t,
        &steps,
        &[
            "mcp",
            "wrap",
            "--session",
            "web",
            "--replay",
            "--",
            "/nonexistent/mcp-server",
        ],
    );
    // The long call's progress is sent again before its answer.
    assert_eq!(replayed["results"], live["results"]);
    // And over HTTP, with no upstream at all.
    let replay = crate::serve_util::Server::launch(
        &t,
        &[
            "mcp",
            "proxy",
            "--replay",
            "--session",
            "web",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let again = tools.http_client(&steps, &replay.addr);
    assert_eq!(again["results"], live["results"]);
}

fn chat_answer(_: usize, _: &str, _: &Value) -> Value {
    json!({"id": "c1", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "call echo"},
            "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
}

#[test]
fn model_calls_and_tool_calls_interleave_on_one_timeline() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let upstream = crate::test_harness::Upstream::start(chat_answer);
    let proxy = crate::serve_util::Server::launch(
        &t,
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--upstream",
            &upstream.url,
        ],
    );
    let model = format!("http://{}/s/run/main/v1/chat/completions", proxy.addr);
    let ask = |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let server = tools.server("server-everything");
    let out = tools.client(
        &t,
        &json!([
            ["model", model, ask("first")],
            ["call_tool", "echo", {"message": "between"}],
            ["model", model, ask("second")],
        ]),
        &["mcp", "wrap", "--session", "run", "--", "node", &server],
    );
    assert_eq!(out["results"][1]["content"][0]["text"], "Echo: between");
    drop(proxy);
    let nodes = timeline(&t, "run", "main");
    let order: Vec<String> = nodes
        .iter()
        .filter(|n| n["kind"] == "request")
        .map(|n| match mcp_of(n)["method"].as_str() {
            Some(m) => m.to_owned(),
            None => n["to"].as_str().unwrap().to_owned(),
        })
        .collect();
    let at = |w: &str| {
        order
            .iter()
            .position(|m| m == w)
            .unwrap_or_else(|| panic!("{w}: {order:?}"))
    };
    let first_model = at("infer");
    let second_model = order.iter().rposition(|m| m == "infer").unwrap();
    assert!(at("initialize") < first_model);
    assert!(
        first_model < at("tools/call") && at("tools/call") < second_model,
        "{order:?}"
    );
    // One submission: the run is one turn.
    let turns: Vec<&Value> = nodes.iter().filter(|n| n["kind"] == "invoke").collect();
    assert_eq!(turns.len(), 1, "{order:?}");
}

#[test]
fn convo_history_is_served_over_mcp() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let server = tools.server("server-everything");
    tools.client(
        &t,
        &json!([["call_tool", "echo", {"message": "remember this"}]]),
        &["mcp", "wrap", "--session", "past", "--", "node", &server],
    );
    let out = tools.client(
        &t,
        &json!([
            ["list_tools"],
            ["call_tool", "list_sessions", {}],
            ["call_tool", "search", {"query": "\"remember this\""}],
            ["call_tool", "read_turn", {"session": "past", "max_chars": 100}],
            ["call_tool", "verify", {}],
            ["call_tool", "fork", {"session": "past", "from": "main@1", "branch": "b"}],
        ]),
        &["mcp", "serve"],
    );
    assert_eq!(out["server"], "convo");
    let r = &out["results"];
    let names: Vec<&str> = r[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["list_sessions", "search", "read_turn", "diff", "verify"]
    );
    assert_eq!(r[1]["structuredContent"]["sessions"][0]["title"], "past");
    let hits = r[2]["structuredContent"]["hits"].as_array().unwrap();
    assert!(!hits.is_empty() && hits[0]["ref"] == "main@1", "{hits:?}");
    let nodes = r[3]["structuredContent"]["nodes"].as_array().unwrap();
    assert!(
        nodes
            .iter()
            .any(|n| n["diagnostics"]["mcp"]["tool"] == "echo")
    );
    assert!(
        nodes
            .iter()
            .all(|n| n["text"].as_str().unwrap().chars().count() <= 100)
    );
    assert_eq!(r[4]["structuredContent"]["ok"], true);
    assert_eq!(r[5]["isError"], true, "fork needs --allow-writes");

    // Over HTTP, behind the token.
    let srv = crate::serve_util::Server::launch(
        &t,
        &[
            "mcp",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--token",
            "s3cret",
        ],
    );
    let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let json_ct = ("Content-Type", "application/json");
    let refused = srv.req("POST", "/mcp", &[json_ct], ping);
    assert_eq!(refused.status, 401);
    let ok = srv.req(
        "POST",
        "/mcp",
        &[json_ct, ("Authorization", "Bearer s3cret")],
        ping,
    );
    assert_eq!(ok.json()["result"], json!({}));
    let stranger = crate::serve_util::http_host(
        &srv.addr,
        "evil.example",
        "POST",
        "/mcp",
        &[json_ct, ("Authorization", "Bearer s3cret")],
        ping,
    );
    assert_eq!(stranger.status, 403, "the Host check applies");
}

/// A model for Claude Code with an MCP server `ev`: asked to use the echo
/// tool it calls `mcp__ev__echo` (when the request names it), then
/// answers with what the tool said.
fn echo_model(n: usize, path: &str, req: &Value) -> Value {
    use crate::test_convo_test::{said, tool_use};
    let model = req["model"].clone();
    if !path.starts_with("/v1/messages") || req["stream"] != json!(true) {
        return said(n, &model, &format!("answer {n}"));
    }
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let results: Vec<Value> = msgs
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    // Offered among the tools, or named as a deferred one (tool search).
    let offered = req.to_string().contains("mcp__ev__echo");
    let asked = Value::Array(msgs).to_string().contains("use the echo tool");
    match results.last() {
        None if asked && offered => tool_use(
            n,
            &model,
            "mcp__ev__echo",
            json!({"message": "from claude"}),
        ),
        Some(r) => {
            let text: String = match &r["content"] {
                Value::String(s) => s.clone(),
                Value::Array(a) => a.iter().filter_map(|b| b["text"].as_str()).collect(),
                other => other.to_string(),
            };
            said(n, &model, &format!("final: the tool said {text}"))
        }
        None => said(n, &model, &format!("answer {n} (no echo tool offered)")),
    }
}

/// Waits (up to a minute) until the timeline's last node is a `complete`:
/// an MCP wrapper a client stopped closes its recording as it exits.
fn until_closed(t: &TestEnv, session: &str) -> Vec<Value> {
    for _ in 0..600 {
        let nodes = timeline(t, session, "main");
        if nodes.last().is_some_and(|n| n["kind"] == "complete") {
            return nodes;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the recording of {session} was never closed");
}

#[test]
fn claude_code_with_a_wrapped_server_is_one_session_and_replays_offline_and_under_convo_test() {
    let Some(tools) = tools() else { return };
    let Some(claude) = crate::test_agents::node_tool("claude") else {
        return;
    };
    let up = crate::test_harness::Upstream::start(echo_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    let server = tools.server("server-everything");
    let convo = env!("CARGO_BIN_EXE_convo");
    let run = |base: &str, wrap: &[&str]| {
        let mut args = vec!["mcp", "wrap", "--session", "run"];
        args.extend_from_slice(wrap);
        let config = json!({"mcpServers": {"ev": {"command": convo, "args": args,
            "env": {"CONVO_HOME": t.home()}}}});
        crate::test_agents::claude_code(&claude, &proj, &home, format!("{base}/s/run/main"))
            .args(["-p", "please use the echo tool", "--strict-mcp-config"])
            .args(["--mcp-config", &config.to_string()])
            .args(["--allowedTools", "mcp__ev__echo"])
            .output()
            .unwrap()
    };
    let live = crate::test_agents::proxy(&t, &["--upstream", &up.url]);
    let first = crate::test_agents::ok(
        run(&format!("http://{}", live.addr), &["--", "node", &server]),
        "claude -p with a wrapped MCP server",
    );
    assert!(
        first.contains("final: the tool said Echo: from claude"),
        "{first}"
    );
    assert!(live.stop().success());

    // One session, one turn: the server's handshake, then the model's
    // call, the tool call it asked for, and the model's answer, in order;
    // closed when Claude Code stopped the wrapper.
    let nodes = until_closed(&t, "run");
    let sessions = t.run(&["session", "list", "--json"]).json();
    let list = sessions.get("sessions").unwrap_or(&sessions);
    let titled = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["title"] == "run");
    assert_eq!(titled.count(), 1, "{sessions}");
    let turns = nodes.iter().filter(|n| n["kind"] == "invoke").count();
    assert_eq!(turns, 1, "one submission");
    let order: Vec<String> = nodes
        .iter()
        .filter(|n| n["kind"] == "request")
        .map(|n| match mcp_of(n)["method"].as_str() {
            Some(m) => format!("{m} {}", mcp_of(n)["tool"].as_str().unwrap_or("")),
            None => n["to"].as_str().unwrap().to_owned(),
        })
        .collect();
    let at = |w: &str| order.iter().position(|m| m.trim() == w);
    let initialize = at("initialize").expect("initialize recorded");
    let model = at("infer").expect("a model call recorded");
    let echo = at("tools/call echo").expect("the tool call recorded");
    let answer = order.iter().rposition(|m| m == "infer").unwrap();
    assert!(
        initialize < model && model < echo && echo < answer,
        "{order:?}"
    );
    let result = nodes
        .iter()
        .find(|n| n["kind"] == "response" && mcp_of(n)["tool"] == "echo")
        .expect("the tool call's answer");
    assert!(
        result["payload"]
            .as_str()
            .unwrap()
            .contains("Echo: from claude")
    );
    assert!(t.run(&["verify"]).ok().starts_with("ok"));

    // Offline: the model calls and the tool calls answered from the
    // recording, the server never started; the same final answer.
    drop(up);
    let report = t.home().join("replay.json");
    let rep = report.to_str().unwrap();
    let replay = crate::test_agents::proxy(&t, &["--replay", "run", "--report", rep]);
    let again = crate::test_agents::ok(
        run(
            &format!("http://{}", replay.addr),
            &["--replay", "--", "/nonexistent/mcp-server"],
        ),
        "claude -p against the replays",
    );
    assert_eq!(again, first);
    assert!(replay.stop().success());
    let r: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(r["counts"]["missed"], 0, "{r:#}");
    assert_eq!(
        timeline(&t, "run", "main").len(),
        nodes.len(),
        "replays record nothing"
    );

    // `convo test`: the MCP server the test declares answered from the
    // recording, its configuration in $CONVO_MCP_CONFIG; from convo.toml
    // and from the command line.
    let claude_line = format!(
        "{} -p 'please use the echo tool' --strict-mcp-config \
         --mcp-config \"$CONVO_MCP_CONFIG\" --allowedTools mcp__ev__echo",
        claude.display()
    );
    let toml = format!(
        "[[test]]\nname = \"claude with an MCP tool\"\nrecording = \"run\"\n\
         command = {}\n[test.mcp]\nev = [\"node\", {}]\n\
         [[test.expect]]\ncontains = \"final: the tool said Echo: from claude\"\n",
        json!(claude_line),
        json!(server),
    );
    std::fs::write(proj.join("convo.toml"), toml).unwrap();
    let convo_test = |args: &[&str]| {
        let o = t
            .cmd()
            .current_dir(&proj)
            .env("HOME", &home)
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .args(args)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
            panic!(
                "convo test printed no JSON ({e}): {}",
                String::from_utf8_lossy(&o.stderr)
            )
        });
        (o.status.code(), v)
    };
    let (code, v) = convo_test(&["test", "--json"]);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["tests"][0]["status"], "passed", "{v:#}");
    let mcp_flag = format!("ev=node {server}");
    let (code, v) = convo_test(&[
        "test",
        "run",
        "--json",
        "--mcp",
        &mcp_flag,
        "--expect-contains",
        "final: the tool said Echo: from claude",
        "--",
        "sh",
        "-c",
        &claude_line,
    ]);
    assert_eq!(code, Some(0), "{v:#}");
    // Without the server declared the program has no MCP configuration
    // and no tool: the test fails.
    let (code, v) = convo_test(&[
        "test",
        "run",
        "--json",
        "--expect-contains",
        "final: the tool said Echo: from claude",
        "--",
        "sh",
        "-c",
        &claude_line,
    ]);
    assert_eq!(code, Some(1), "{v:#}");
}

/// A raw line client of `convo mcp wrap`: requests written, answers read.
struct Lines {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Lines {
    fn start(t: &TestEnv, args: &[&str]) -> Lines {
        let mut child = t
            .cmd()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        Lines {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, msg: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends request `id` and reads lines until its answer.
    fn call(&mut self, id: u64, method: &str, params: Value) -> Value {
        use std::io::BufRead;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "no answer to {method}"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) && v.get("method").is_none() {
                return v;
            }
        }
    }

    fn initialize(&mut self) -> Value {
        let v = self.call(
            0,
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "lines", "version": "1"}}),
        );
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        v
    }
}

#[test]
fn sigterm_mid_run_closes_the_recording_and_export_and_search_find_the_calls() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let server = tools.server("server-everything");
    let mut c = Lines::start(
        &t,
        &["mcp", "wrap", "--session", "sig", "--", "node", &server],
    );
    c.initialize();
    let echo = c.call(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "before the signal"}}),
    );
    assert_eq!(
        echo["result"]["content"][0]["text"],
        "Echo: before the signal"
    );
    // The client still connected: SIGTERM, as a client stopping its
    // servers sends it.
    let pid = c.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = c.child.wait().unwrap();
    assert!(
        status.code().is_some(),
        "exited, not killed by the signal: {status:?}"
    );

    let nodes = timeline(&t, "sig", "main");
    let last = nodes.last().unwrap();
    assert_eq!(last["kind"], "complete", "the submission is closed");
    assert_eq!(mcp_of(last)["server"], "mcp-servers/everything");
    let answered = nodes
        .iter()
        .find(|n| n["kind"] == "response" && mcp_of(n)["tool"] == "echo")
        .expect("the call before the signal is recorded with its answer");
    assert!(
        answered["payload"]
            .as_str()
            .unwrap()
            .contains("Echo: before the signal")
    );
    assert!(t.run(&["verify"]).ok().starts_with("ok"));

    // Search finds the tool call and its answer; exports carry them.
    let hits = t.run(&["search", "before the signal", "--json"]).json();
    let hits = hits
        .get("hits")
        .unwrap_or(&hits)
        .as_array()
        .unwrap()
        .clone();
    let mut hit_kinds: Vec<&str> = hits
        .iter()
        .filter(|h| mcp_of(&h["node"])["tool"] == "echo")
        .filter_map(|h| h["node"]["kind"].as_str())
        .collect();
    hit_kinds.sort();
    assert_eq!(hit_kinds, ["request", "response"], "{hits:?}");
    let recording = t.run(&["export", "sig", "--format", "recording"]).ok();
    assert!(recording.contains("Echo: before the signal"), "{recording}");
    let md = t.run(&["export", "sig", "--format", "markdown"]).ok();
    assert!(
        md.contains("mcp:mcp-servers/everything") && md.contains("Echo: before the signal"),
        "{md}"
    );
}

impl Tools {
    /// Runs tests/clients/mcp_client.mjs (the TypeScript SDK's client)
    /// with `steps` and `transport` (`stdio CMD…` or `http URL`); what it
    /// printed. The script is copied next to the test's node_modules.
    fn ts_client(&self, t: &TestEnv, steps: &Value, transport: &[&str]) -> Value {
        let dir = t.home().join("ts-client");
        if !dir.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            let src = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
                .join("tests/clients/mcp_client.mjs");
            std::fs::copy(src, dir.join("mcp_client.mjs")).unwrap();
            std::os::unix::fs::symlink(&self.modules, dir.join("node_modules")).unwrap();
        }
        let out = Command::new("node")
            .arg(dir.join("mcp_client.mjs"))
            .arg(steps.to_string())
            .args(transport)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", t.home())
            .env("CONVO_HOME", t.home())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "mcp_client.mjs failed: {stderr}");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("mcp_client.mjs printed no JSON ({e}): {stderr}"))
    }
}

#[test]
fn typescript_sdk_client_is_recorded_and_replayed_over_stdio_and_http() {
    let Some(tools) = tools() else { return };
    if !tools.modules.join("@modelcontextprotocol/sdk").exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install @modelcontextprotocol/sdk (scripts/test-env)"
        );
        eprintln!("SKIPPED: @modelcontextprotocol/sdk is not installed (scripts/test-env)");
        return;
    }
    let t = TestEnv::new();
    let convo = env!("CARGO_BIN_EXE_convo");
    let server = tools.server("server-everything");
    let steps = json!([
        ["list_tools"],
        ["call_tool", "echo", {"message": "from typescript"}],
        ["call_tool_progress", "trigger-long-running-operation", {"duration": 1, "steps": 2}],
        ["read_resource", "demo://resource/static/document/architecture.md"],
        ["get_prompt", "simple-prompt", {}],
        ["ping"],
    ]);

    // stdio: recorded through the wrapper, replayed with no server.
    let live = tools.ts_client(
        &t,
        &steps,
        &[
            "stdio",
            convo,
            "mcp",
            "wrap",
            "--session",
            "ts",
            "--",
            "node",
            &server,
        ],
    );
    assert_eq!(live["server"], "mcp-servers/everything");
    assert_eq!(
        live["results"][1]["content"][0]["text"],
        "Echo: from typescript"
    );
    let recorded = timeline(&t, "ts", "main");
    assert!(
        recorded
            .iter()
            .any(|n| mcp_of(n)["uri"] == "demo://resource/static/document/architecture.md")
    );
    let replayed = tools.ts_client(
        &t,
        &steps,
        &[
            "stdio",
            convo,
            "mcp",
            "wrap",
            "--session",
            "ts",
            "--replay",
            "--",
            "/nonexistent/mcp-server",
        ],
    );
    assert_eq!(replayed, live);
    let changed = tools.ts_client(
        &t,
        &json!([["call_tool", "echo", {"message": "changed"}]]),
        &[
            "stdio",
            convo,
            "mcp",
            "wrap",
            "--session",
            "ts",
            "--replay",
            "--",
            "/nonexistent/mcp-server",
        ],
    );
    assert_eq!(changed["results"][0]["code"], -32042, "{changed}");
    let err = changed["results"][0]["error"].as_str().unwrap();
    assert!(err.contains("/params/arguments/message"), "{err}");

    // Streamable HTTP: through `convo mcp proxy`, then with no upstream.
    let http_steps = json!([
        ["list_tools"],
        ["call_tool", "echo", {"message": "typescript over http"}],
        ["call_tool_progress", "trigger-long-running-operation", {"duration": 1, "steps": 2}],
        ["ping"],
    ]);
    let (mut upstream, url) = everything_http(&tools);
    let relay = crate::serve_util::Server::launch(
        &t,
        &[
            "mcp",
            "proxy",
            "--upstream",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--session",
            "ts-http",
        ],
    );
    let endpoint = format!("http://{}/mcp", relay.addr);
    let over_http = tools.ts_client(&t, &http_steps, &["http", &endpoint]);
    assert_eq!(
        over_http["results"][1]["content"][0]["text"],
        "Echo: typescript over http"
    );
    relay.stop();
    let _ = upstream.kill();
    let _ = upstream.wait();
    let methods: Vec<String> = timeline(&t, "ts-http", "main")
        .iter()
        .filter_map(|n| mcp_of(n)["method"].as_str().map(str::to_owned))
        .collect();
    for m in ["initialize", "tools/call", "notifications/progress", "ping"] {
        assert!(methods.iter().any(|x| x == m), "{m}: {methods:?}");
    }
    let replay = crate::serve_util::Server::launch(
        &t,
        &[
            "mcp",
            "proxy",
            "--replay",
            "--session",
            "ts-http",
            "--listen",
            "127.0.0.1:0",
        ],
    );
    let endpoint = format!("http://{}/mcp", replay.addr);
    let again = tools.ts_client(&t, &http_steps, &["http", &endpoint]);
    assert_eq!(again, over_http);
}

#[test]
fn the_session_page_shows_tool_calls_arguments_results_latency_and_errors() {
    let Some(tools) = tools() else { return };
    let t = TestEnv::new();
    let server = tools.server("server-everything");
    let out = tools.client(
        &t,
        &json!([
            ["call_tool", "echo", {"message": "shown <on> the page"}],
            ["call_tool", "no-such-tool", {}],
            ["call_tool", "get-tiny-image", {}],
        ]),
        &["mcp", "wrap", "--session", "page", "--", "node", &server],
    );
    assert_eq!(
        out["results"][0]["content"][0]["text"],
        "Echo: shown <on> the page"
    );
    let srv = crate::serve_util::Server::start(&t, &[]);
    let page = srv.get("/sessions/page");
    assert_eq!(page.status, 200);
    let html = page.text();
    // The call: its server, method, tool and arguments (escaped).
    assert!(
        html.contains("MCP <bdi>mcp-servers/everything</bdi>"),
        "{html}"
    );
    assert!(html.contains("tool call <b><bdi>echo</bdi></b>"), "{html}");
    assert!(html.contains("shown &lt;on&gt; the page"), "{html}");
    // Its result as text, with the latency.
    assert!(
        html.contains(r#"<pre class="output">Echo: shown &lt;on&gt; the page</pre>"#),
        "{html}"
    );
    assert!(html.contains(r#"class="diag latency""#), "{html}");
    // The failed call says so; the image is named, not dumped.
    assert!(
        html.contains("tool error") || html.contains("error -32602"),
        "{html}"
    );
    assert!(html.contains(r#"class="diag status bad""#), "{html}");
    assert!(html.contains("image image/png"), "{html}");
    // The server's tools, listed by name.
    assert!(html.contains("tools offered"), "{html}");
    // The turn's waterfall has a bar per tool call, the failed one marked.
    assert!(html.contains("3 tool calls over"), "{html}");
    assert!(
        html.contains(r#"class="bar tool""#) && html.contains(r#"class="bar bad""#),
        "{html}"
    );
    assert!(!html.contains("model calls"), "{html}");
}

#[test]
fn postgres_store_records_replays_and_closes_on_sigterm() {
    let Some(tools) = tools() else { return };
    let Some((t, _db)) = TestEnv::on(convo_testutil::Backend::Postgres) else {
        return;
    };
    let server = tools.server("server-everything");
    let steps = json!([
        ["call_tool", "echo", {"message": "in postgres"}],
        ["call_tool", "get-tiny-image", {}],
        ["read_resource", "demo://resource/static/document/architecture.md"],
    ]);
    let live = tools.client(
        &t,
        &steps,
        &["mcp", "wrap", "--session", "pg", "--", "node", &server],
    );
    assert_eq!(
        live["results"][0]["content"][0]["text"],
        "Echo: in postgres"
    );
    let nodes = timeline(&t, "pg", "main");
    assert_eq!(nodes.last().unwrap()["kind"], "complete");
    let replayed = tools.client(
        &t,
        &steps,
        &[
            "mcp",
            "wrap",
            "--session",
            "pg",
            "--replay",
            "--",
            "/nonexistent/mcp-server",
        ],
    );
    assert_eq!(replayed, live);

    // Stopped by SIGTERM mid-run: the recording is closed in PostgreSQL too.
    let mut c = Lines::start(
        &t,
        &["mcp", "wrap", "--session", "pg-sig", "--", "node", &server],
    );
    c.initialize();
    let echo = c.call(
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "x"}}),
    );
    assert_eq!(echo["result"]["content"][0]["text"], "Echo: x");
    let pid = c.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(c.child.wait().unwrap().code().is_some());
    let nodes = timeline(&t, "pg-sig", "main");
    assert_eq!(nodes.last().unwrap()["kind"], "complete");
    assert!(t.run(&["verify"]).ok().starts_with("ok"));
}
