//! Replay that real agents survive, and `convo test`: Claude Code (Bash,
//! Read, a subagent, two runs) and Codex `exec` (shell tools) recorded
//! through `convo proxy` against a scripted upstream, then replayed
//! offline with default settings to the recorded final answers; a Python
//! agent (the openai SDK) and a Node agent (the `openai` npm package)
//! under `convo test`: a changed system prompt and a changed tool result
//! caught with a diff, JUnit XML parsed, `--on-change live` forking,
//! `--compare` against a baseline, a `convo.toml` of several tests.

use crate::common::TestEnv;
use crate::test_agents::{node_tool, ok, proxy, proxy_sessions};
use crate::test_harness::Upstream;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// An Anthropic stream answering one block.
fn anthropic_stream(n: usize, model: &Value, block: Value, delta: Value, stop: &str) -> Value {
    json!({"sse": [
        ["message_start", {"type": "message_start", "message": {"id": format!("msg_{n}"),
            "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}],
        ["content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}],
        ["content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}],
        ["content_block_stop", {"type": "content_block_stop", "index": 0}],
        ["message_delta", {"type": "message_delta", "delta": {"stop_reason": stop},
            "usage": {"output_tokens": 3}}],
        ["message_stop", {"type": "message_stop"}],
    ]})
}

pub(crate) fn tool_use(n: usize, model: &Value, name: &str, input: Value) -> Value {
    anthropic_stream(
        n,
        model,
        json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": {}}),
        json!({"type": "input_json_delta", "partial_json": input.to_string()}),
        "tool_use",
    )
}

pub(crate) fn said(n: usize, model: &Value, text: &str) -> Value {
    anthropic_stream(
        n,
        model,
        json!({"type": "text", "text": ""}),
        json!({"type": "text_delta", "text": text}),
        "end_turn",
    )
}

/// A model for Claude Code: asked to inspect the folder, it runs `ls`
/// (Bash), reads notes.txt (Read), delegates to a subagent in the
/// foreground (Agent) that runs `ls` itself, then answers; asked "and
/// after that?", it answers again. Other calls get `answer N`.
fn coding_model(n: usize, path: &str, req: &Value) -> Value {
    let model = req["model"].clone();
    if !path.starts_with("/v1/messages") {
        return json!({"data": []});
    }
    if req["stream"] != json!(true) {
        return json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": model, "content": [{"type": "text", "text": format!("answer {n}")}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}});
    }
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let all = Value::Array(msgs.clone()).to_string();
    let used: Vec<String> = msgs
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["name"].as_str().map(str::to_owned))
        .collect();
    let cwd = format!("{all}{}", req["system"])
        .split("orking directory: ")
        .nth(1)
        .and_then(|s| {
            s.split(|c: char| c.is_whitespace() || c == '\\' || c == '"')
                .next()
        })
        .unwrap_or("/tmp")
        .to_owned();
    let last = msgs.last().map(Value::to_string).unwrap_or_default();
    if all.contains("please inspect") {
        return match used.len() {
            0 => tool_use(
                n,
                &model,
                "Bash",
                json!({"command": "ls", "description": "list files"}),
            ),
            1 => tool_use(
                n,
                &model,
                "Read",
                json!({"file_path": format!("{cwd}/notes.txt")}),
            ),
            2 => tool_use(
                n,
                &model,
                "Agent",
                json!({"description": "look around", "prompt": "list the files please",
                    "subagent_type": "general-purpose", "run_in_background": false}),
            ),
            _ if last.contains("and after that") => said(n, &model, "the second answer"),
            _ => said(n, &model, "final: the folder holds notes.txt"),
        };
    }
    if all.contains("list the files please") {
        return match used.len() {
            0 => tool_use(
                n,
                &model,
                "Bash",
                json!({"command": "ls", "description": "list"}),
            ),
            _ => said(n, &model, "the subagent saw notes.txt"),
        };
    }
    said(n, &model, &format!("answer {n}"))
}

/// A Responses API model for Codex: `ls`, then `cat notes.txt` (its
/// exec_command tool), then the answer.
fn codex_model(n: usize, path: &str, req: &Value) -> Value {
    if !path.starts_with("/v1/responses") {
        return json!({"data": []});
    }
    let outputs = req["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|i| i["type"] == "function_call_output")
                .count()
        })
        .unwrap_or(0);
    let call = |cmd: &str| {
        json!({"type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
            "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string(), "status": "completed"})
    };
    let item = match outputs {
        0 => call("ls"),
        1 => call("cat notes.txt"),
        _ => json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
            "status": "completed", "content": [{"type": "output_text",
            "text": "codex final: the notes say hello", "annotations": []}]}),
    };
    let resp = json!({"id": format!("resp_{n}"), "object": "response", "status": "in_progress",
        "model": req["model"], "output": []});
    let mut done = resp.clone();
    done["status"] = json!("completed");
    done["output"] = json!([item]);
    done["usage"] = json!({"input_tokens": 10, "output_tokens": 3, "total_tokens": 13,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}});
    json!({"sse": [
        ["response.created", {"type": "response.created", "response": resp}],
        ["response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}],
        ["response.completed", {"type": "response.completed", "response": done}],
    ]})
}

/// The session the proxy recorded under `title`.
fn recorded(t: &TestEnv, title: &str) -> String {
    let sessions = proxy_sessions(t);
    let found: Vec<&Value> = sessions.iter().filter(|s| s["title"] == title).collect();
    assert_eq!(found.len(), 1, "one session titled {title:?}: {sessions:?}");
    found[0]["id"].as_str().unwrap().to_owned()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// Every pointer the report says was tolerated.
fn tolerated(report: &Value) -> Vec<String> {
    report["calls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["tolerated"].as_array().cloned().unwrap_or_default())
        .map(|t| t["pointer"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn claude_code_with_bash_read_and_a_subagent_replays_offline_with_default_settings() {
    let Some(claude) = node_tool("claude") else {
        return;
    };
    let up = Upstream::start(coding_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("notes.txt"), "hello notes\n").unwrap();
    let run = |base: &str, args: &[&str]| {
        let mut all = vec!["-p"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--allowedTools", "Bash,Read,Agent"]);
        crate::test_agents::claude_code(&claude, &proj, &home, base)
            .args(all)
            .output()
            .unwrap()
    };
    let live = proxy(&t, &["--upstream", &up.url]);
    let base = format!("http://{}", live.addr);
    let sid = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f";
    let first = ok(
        run(&base, &["please inspect this folder", "--session-id", sid]),
        "claude through the proxy",
    );
    assert!(
        first.contains("final: the folder holds notes.txt"),
        "{first}"
    );
    let second = ok(
        run(&base, &["and after that?", "--resume", sid]),
        "claude --resume through the proxy",
    );
    assert!(second.contains("the second answer"), "{second}");
    assert!(live.stop().success());
    let sent = up.calls.lock().unwrap().clone();
    let names: Vec<&str> = sent
        .iter()
        .flat_map(|(_, b)| b["messages"].as_array().into_iter().flatten())
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["name"].as_str())
        .collect();
    for tool in ["Bash", "Read", "Agent"] {
        assert!(names.contains(&tool), "{tool} was called: {names:?}");
    }
    let id = recorded(&t, "please inspect this folder");
    drop(up);

    // Offline, default settings: both runs to the end, the recorded answers.
    let report = t.home().join("replay.json");
    let replay = proxy(
        &t,
        &[
            "--replay",
            &id,
            "--report",
            report.to_str().unwrap(),
            "--fail-on-miss",
        ],
    );
    let base = format!("http://{}", replay.addr);
    let sid2 = "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b";
    let again = ok(
        run(&base, &["please inspect this folder", "--session-id", sid2]),
        "claude against the replay",
    );
    assert_eq!(again, first);
    let again2 = ok(
        run(&base, &["and after that?", "--resume", sid2]),
        "claude --resume against the replay",
    );
    assert_eq!(again2, second);
    assert!(replay.stop().success(), "--fail-on-miss: nothing missed");
    let r = read_json(&report);
    assert_eq!(r["counts"]["missed"], 0, "{r:#}");
    assert_eq!(r["passed"], true, "{r:#}");
    let pointers = tolerated(&r);
    assert!(
        r["counts"]["tolerated"].as_u64().unwrap() > 0
            && pointers.iter().any(|p| p.starts_with("/body/messages/")),
        "the subagent's id and duration were tolerated, by pointer: {r:#}"
    );

    // `convo test` runs the same: passes with defaults, fails with --strict
    // naming where the strict match broke.
    let test = |extra: &[&str]| {
        let mut args = vec!["test", &id, "--json"];
        args.extend_from_slice(extra);
        args.push("--");
        let c = claude.to_str().unwrap();
        args.extend_from_slice(&[
            c,
            "-p",
            "please inspect this folder",
            "--allowedTools",
            "Bash,Read,Agent",
        ]);
        t.cmd()
            .current_dir(&proj)
            .env("HOME", &home)
            .env("DISABLE_TELEMETRY", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .args(&args)
            .output()
            .unwrap()
    };
    let o = test(&["--expect-contains", "final: the folder holds notes.txt"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    assert_eq!(v["tests"][0]["status"], "passed");
    let o = test(&["--strict"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1), "{v:#}");
    let d = &v["tests"][0]["divergence"];
    assert!(
        d["differences"].as_array().is_some_and(|a| !a.is_empty()),
        "{v:#}"
    );
}

#[test]
fn codex_exec_with_shell_tools_replays_offline_with_default_settings() {
    let Some(codex) = node_tool("codex") else {
        return;
    };
    let up = Upstream::start(codex_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let codex_home = t.home().join("codex-home");
    let proj = t.home().join("proj");
    for d in [&home, &codex_home, &proj] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(proj.join("notes.txt"), "hello notes\n").unwrap();
    let configure = |base: &str| {
        std::fs::write(
            codex_home.join("config.toml"),
            format!(
                "model = \"test-model\"\nmodel_provider = \"scripted\"\n\
                 [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{base}/v1\"\n\
                 env_key = \"SCRIPTED_KEY\"\nwire_api = \"responses\"\n"
            ),
        )
        .unwrap();
    };
    let run = || {
        Command::new(&codex)
            .current_dir(&proj)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", &codex_home)
            .env("SCRIPTED_KEY", "x")
            .args(["exec", "--skip-git-repo-check", "look at the notes"])
            .output()
            .unwrap()
    };
    let live = proxy(&t, &["--upstream", &up.url]);
    configure(&format!("http://{}", live.addr));
    let first = ok(run(), "codex exec through the proxy");
    assert!(
        first.contains("codex final: the notes say hello"),
        "{first}"
    );
    assert!(live.stop().success());
    let outputs = up.calls.lock().unwrap().last().unwrap().1["input"].to_string();
    assert!(
        outputs.contains("Chunk ID") && outputs.contains("hello notes"),
        "the shell ran: {outputs}"
    );
    let id = recorded(&t, "look at the notes");
    drop(up);

    let report = t.home().join("replay.json");
    let replay = proxy(
        &t,
        &[
            "--replay",
            &id,
            "--report",
            report.to_str().unwrap(),
            "--fail-on-miss",
        ],
    );
    configure(&format!("http://{}", replay.addr));
    let again = ok(run(), "codex exec against the replay");
    assert_eq!(again, first);
    assert!(replay.stop().success(), "--fail-on-miss: nothing missed");
    let r = read_json(&report);
    assert_eq!(r["counts"]["missed"], 0, "{r:#}");
    assert!(
        tolerated(&r).iter().any(|p| p.starts_with("/body/input/")),
        "the shell outputs' chunk ids and wall times were tolerated: {r:#}"
    );
}

fn python() -> Option<String> {
    match std::env::var("CONVO_TEST_PYTHON") {
        Ok(p) => Some(p),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CONVO_TEST_PYTHON (scripts/test-env)"
            );
            eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test-env sets it up)");
            None
        }
    }
}

/// A chat model with one tool: asked about data.txt, it calls
/// `read_file`, then says what the file holds; anything else is greeted.
fn chat_model(n: usize, path: &str, req: &Value) -> Value {
    assert_eq!(path, "/v1/chat/completions");
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let tool = msgs.iter().rev().find(|m| m["role"] == "tool");
    let message = match tool {
        _ if !req["messages"].to_string().contains("data.txt") => {
            json!({"role": "assistant", "content": format!("hello, node (call {n})")})
        }
        None => {
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("call_{n}"),
            "type": "function", "function": {"name": "read_file",
            "arguments": json!({"path": "data.txt"}).to_string()}}]})
        }
        Some(t) => json!({"role": "assistant",
            "content": format!("the file says: {}", t["content"].as_str().unwrap_or("").trim())}),
    };
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0,
        "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

/// A Python agent on the openai SDK: a tool loop reading files; prints
/// `{"answer": …}`. Its system prompt comes from AGENT_SYSTEM.
const PYTHON_AGENT: &str = r#"
import json, os
from openai import OpenAI

client = OpenAI()
messages = [
    {"role": "system", "content": os.environ.get("AGENT_SYSTEM", "You are terse.")},
    {"role": "user", "content": "What does data.txt say?"},
]
tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"]}}}]
while True:
    r = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
    m = r.choices[0].message
    if not m.tool_calls:
        print(json.dumps({"answer": m.content}))
        break
    messages.append({"role": "assistant", "content": m.content,
                     "tool_calls": [c.model_dump() for c in m.tool_calls]})
    for c in m.tool_calls:
        path = json.loads(c.function.arguments)["path"]
        with open(path) as f:
            messages.append({"role": "tool", "tool_call_id": c.id, "content": f.read()})
"#;

/// A Node agent on the `openai` npm package.
const NODE_AGENT: &str = r#"
import OpenAI from "openai";
const client = new OpenAI();
const r = await client.chat.completions.create({
  model: "scripted",
  messages: [{ role: "user", content: "hello from node" }],
});
console.log(r.choices[0].message.content);
"#;

/// Checks a JUnit XML file against the format's schema
/// (`tests/fixtures/junit.xsd`, with the `xmlschema` validator of
/// scripts/requirements-test-junit.txt), and that the schema refuses the
/// same file with a time CI systems cannot read.
fn junit_valid(path: &Path) {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON_JUNIT") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CONVO_TEST_PYTHON_JUNIT (scripts/test-env)"
        );
        eprintln!("SKIPPED: the JUnit schema check (CONVO_TEST_PYTHON_JUNIT is not set)");
        return;
    };
    let xsd =
        convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/junit.xsd");
    let script = r#"
import re, sys, xmlschema
schema = xmlschema.XMLSchema(sys.argv[1])
text = open(sys.argv[2], encoding="utf-8").read()
errors = [str(e) for e in schema.iter_errors(text)]
broken = re.sub(r'time="[0-9.]+"', 'time="1,5 s"', text, count=1)
print("\n".join(errors) if errors else "valid")
print("refused" if not schema.is_valid(broken) else "accepted a broken time")
"#;
    let o = Command::new(python)
        .args(["-c", script, xsd.to_str().unwrap(), path.to_str().unwrap()])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out == "valid\nrefused\n",
        "the JUnit file {} against its schema: {out}{}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Parses a JUnit XML file with Python's XML parser (once checked against
/// its schema, [`junit_valid`]): its testcases as `{name, failure:
/// {message, type, text} | null, error}` under `{root, suites, tests,
/// failures}`.
fn junit(path: &Path) -> Value {
    junit_valid(path);
    let script = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = root.findall("testsuite")
cases = []
for s in suites:
    for c in s.findall("testcase"):
        f = c.find("failure")
        e = c.find("error")
        cases.append({"name": c.get("name"), "classname": c.get("classname"), "time": c.get("time"),
                      "failure": None if f is None else {"message": f.get("message"), "type": f.get("type"), "text": f.text},
                      "error": e is not None})
print(json.dumps({"root": root.tag, "suites": len(suites), "tests": root.get("tests"),
                  "failures": root.get("failures"), "cases": cases}))
"#;
    let o = Command::new("python3")
        .args(["-c", script, path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the JUnit file parses: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn python_and_node_agents_under_convo_test_and_changes_fail_with_a_readable_diff() {
    let Some(python) = python() else {
        return;
    };
    let Some(nm) = std::env::var_os("CONVO_TEST_NODE_MODULES")
        .map(std::path::PathBuf::from)
        .filter(|p| p.join("openai").exists())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install the openai npm package (scripts/test-env)"
        );
        eprintln!("SKIPPED: the openai npm package is not installed (scripts/test-env)");
        return;
    };
    let up = Upstream::start(chat_model);
    let t = TestEnv::new();
    let work = t.home().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("agent.py"), PYTHON_AGENT).unwrap();
    std::fs::write(work.join("agent.mjs"), NODE_AGENT).unwrap();
    std::os::unix::fs::symlink(&nm, work.join("node_modules")).unwrap();
    std::fs::write(work.join("data.txt"), "forty-two\n").unwrap();
    let live = proxy(&t, &["--upstream", &up.url]);
    let base = format!("http://{}/v1", live.addr);
    let agent = |prog: &str, script: &str| {
        Command::new(prog)
            .current_dir(&work)
            .env("OPENAI_BASE_URL", &base)
            .env("OPENAI_API_KEY", "x")
            .arg(script)
            .output()
            .unwrap()
    };
    let py = ok(agent(&python, "agent.py"), "the python agent");
    assert_eq!(py.trim(), r#"{"answer": "the file says: forty-two"}"#);
    let node = ok(agent("node", "agent.mjs"), "the node agent");
    assert!(node.starts_with("hello, node"), "{node}");
    assert!(live.stop().success());
    let py_rec = recorded(&t, "What does data.txt say?");
    let node_rec = recorded(&t, "hello from node");

    // Both pass under convo test, from a convo.toml, with assertions.
    std::fs::write(
        work.join("answer.schema.json"),
        json!({"type": "object", "required": ["answer"],
               "properties": {"answer": {"type": "string", "pattern": "^the file says"}},
               "additionalProperties": false})
        .to_string(),
    )
    .unwrap();
    let toml = format!(
        r#"
[[test]]
name = "python agent"
recording = "{py_rec}"
command = ["{python}", "agent.py"]
[[test.expect]]
json_schema = "answer.schema.json"
[[test.expect]]
tool = "read_file"
args = {{ path = "data.txt" }}
[[test.expect]]
regex = "forty-\\w+"

[[test]]
name = "node agent"
recording = "{node_rec}"
command = "node agent.mjs"
[[test.expect]]
contains = "hello, node"
[[test.expect]]
command = "grep -q '\"exit_code\":0'"
"#
    );
    std::fs::write(work.join("convo.toml"), toml).unwrap();
    let convo_test = |args: &[&str], envs: &[(&str, &str)]| {
        let mut c = t.cmd();
        c.current_dir(&work).args(["test"]).args(args);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let j1 = work.join("all.xml");
    let md = work.join("summary.md");
    let o = convo_test(
        &[
            "--json",
            "--junit",
            j1.to_str().unwrap(),
            "--summary",
            md.to_str().unwrap(),
        ],
        &[],
    );
    let baseline: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{baseline:#}");
    assert_eq!(baseline["passed"], 2, "{baseline:#}");
    for test in baseline["tests"].as_array().unwrap() {
        assert_eq!(
            test["counts"]["exact"].as_u64(),
            test["replay"]["recorded_calls"].as_u64()
        );
        assert!(
            test["assertions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["passed"] == true)
        );
    }
    let x = junit(&j1);
    assert_eq!(
        (x["root"].as_str(), x["suites"].as_u64()),
        (Some("testsuites"), Some(1)),
        "{x}"
    );
    assert_eq!(x["cases"].as_array().unwrap().len(), 2, "{x}");
    assert!(
        x["cases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["failure"].is_null()),
        "{x}"
    );
    let summary = std::fs::read_to_string(&md).unwrap();
    assert!(
        summary.contains("2 passed, 0 failed") && summary.contains("| ✅ | python agent |"),
        "{summary}"
    );
    let base_file = work.join("baseline.json");
    std::fs::write(&base_file, &o.stdout).unwrap();

    // A changed system prompt: exit 1, the pointer and a diff.
    let j2 = work.join("prompt.xml");
    let changed = |extra: &[&str], envs: &[(&str, &str)]| {
        let mut args = vec![py_rec.as_str(), "--name", "python agent", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", python.as_str(), "agent.py"]);
        let o = convo_test(&args, envs);
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code(), v)
    };
    let (code, v) = changed(
        &["--junit", j2.to_str().unwrap()],
        &[("AGENT_SYSTEM", "You are verbose.")],
    );
    assert_eq!(code, Some(1), "{v:#}");
    let d = &v["tests"][0]["divergence"];
    assert_eq!(v["tests"][0]["status"], "changed");
    assert_eq!(
        d["differences"],
        json!(["/body/messages/0/content"]),
        "{v:#}"
    );
    let diff = d["diff"].as_str().unwrap();
    assert!(
        diff.contains("-/body/messages/0/content: \"You are terse.\"")
            && diff.contains("+/body/messages/0/content: \"You are verbose.\""),
        "{diff}"
    );
    let x = junit(&j2);
    let f = &x["cases"][0]["failure"];
    assert_eq!(x["failures"], "1", "{x}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("/body/messages/0/content"),
        "{x}"
    );
    assert!(
        f["text"]
            .as_str()
            .unwrap()
            .contains("+/body/messages/0/content: \"You are verbose.\""),
        "{x}"
    );

    // A changed tool result: the call after the tool differs there.
    std::fs::write(work.join("data.txt"), "forty-three\n").unwrap();
    let (code, v) = changed(&[], &[]);
    assert_eq!(code, Some(1), "{v:#}");
    let d = &v["tests"][0]["divergence"];
    assert_eq!(
        d["differences"],
        json!(["/body/messages/3/content"]),
        "{v:#}"
    );
    let diff = d["diff"].as_str().unwrap();
    assert!(
        diff.contains("-/body/messages/3/content#L1: forty-two")
            && diff.contains("+/body/messages/3/content#L1: forty-three"),
        "{diff}"
    );
    assert_eq!(d["turn"], 2, "the tool result is the second call's: {v:#}");

    // Against the baseline: the python test regressed, node is unchanged.
    let o = convo_test(&["--json", "--compare", base_file.to_str().unwrap()], &[]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1), "{v:#}");
    assert_eq!(v["comparison"]["regressed"], 1, "{v:#}");
    assert_eq!(v["comparison"]["unchanged"], 1, "{v:#}");
    assert_eq!(v["tests"][0]["comparison"], "regressed");

    // --on-change live: the changed run goes on live, on a fork.
    let (code, v) = changed(&["--on-change", "live", "--upstream", &up.url], &[]);
    assert_eq!(code, Some(1), "a changed run still fails: {v:#}");
    let test = &v["tests"][0];
    assert_eq!(
        test["stdout"].as_str().unwrap().trim(),
        r#"{"answer": "the file says: forty-three"}"#,
        "{v:#}"
    );
    assert_eq!(test["counts"]["exact"], 1, "{v:#}");
    assert_eq!(test["counts"]["live"], 1, "{v:#}");
    let branch = test["live_timeline"]["branch"].as_str().unwrap();
    assert_eq!(branch, "live-1");
    let log = t.run(&["log", &py_rec, "--branch", branch]).ok();
    assert!(
        log.contains("forty-three"),
        "the live run is kept for review: {log}"
    );
    // Each run is kept in the home; the web view's page of this one links
    // the recorded timeline, the live one and the two side by side.
    let mut runs: Vec<String> = std::fs::read_dir(t.home().join("test-runs"))
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.trim_end_matches(".json").to_owned()
        })
        .collect();
    runs.sort();
    let srv = crate::serve_util::Server::start(&t, &[]);
    let page = srv.get(&format!("/tests/{}", runs.last().unwrap())).text();
    assert!(page.contains("?branch=live-1\""), "{page}");
    assert!(page.contains("/diff?a=main&amp;b=live-1\""), "{page}");
    drop(srv);

    // Usage errors exit 2.
    let o = convo_test(&[&py_rec], &[]);
    assert_eq!(o.status.code(), Some(2));
    let o = convo_test(&["--file", "missing.toml"], &[]);
    assert_eq!(o.status.code(), Some(2));
}

/// A judge: the output passes when it says forty-two.
fn judge_model(n: usize, path: &str, req: &Value) -> Value {
    assert_eq!(path, "/v1/chat/completions");
    let asked = req["messages"][1]["content"].as_str().unwrap_or("");
    let output = asked.split("Program output:").nth(1).unwrap_or("");
    let pass = output.contains("forty-two");
    let reason = if pass {
        "it says forty-two"
    } else {
        "it never says forty-two"
    };
    json!({"id": format!("chatcmpl-j{n}"), "object": "chat.completion", "created": 0,
        "model": req["model"], "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant",
            "content": json!({"pass": pass, "reason": reason}).to_string()}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

#[test]
fn an_llm_judge_is_asked_once_through_the_proxy_then_replayed() {
    let up = Upstream::start(chat_model);
    let judge = Upstream::start(judge_model);
    let t = TestEnv::new();
    let work = t.home().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let req = json!({"model": "scripted", "messages": [{"role": "user", "content": "judge me"}]});
    std::fs::write(work.join("req.json"), req.to_string()).unwrap();
    let live = proxy(&t, &["--upstream", &up.url]);
    let o = Command::new("curl")
        .args(["-sf", &format!("http://{}/v1/chat/completions", live.addr)])
        .args(["-H", "content-type: application/json", "-d", "@req.json"])
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(live.stop().success());
    let rec = recorded(&t, "judge me");
    // The program: its one call, then what out.txt holds.
    let program = r#"curl -sf "$OPENAI_BASE_URL/chat/completions" -H "content-type: application/json" -d @req.json > /dev/null && cat out.txt"#;
    let secret = "sk-judge-Kumquat-Lantern-8812";
    let run = |out: &str, extra: &[&str]| {
        std::fs::write(work.join("out.txt"), out).unwrap();
        let mut c = t.cmd();
        c.current_dir(&work)
            .env("CONVO_JUDGE_API_KEY", secret)
            .args(["test", &rec, "--json", "--expect-judge", "says forty-two"])
            .args(extra)
            .args(["--", "sh", "-c", program]);
        let o = c.output().unwrap();
        let v: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
        (o.status.code(), v["tests"][0]["assertions"][0].clone(), v)
    };
    let asked = || judge.calls.lock().unwrap().len();

    // First run: the judge is asked once, through the proxy.
    let (code, a, v) = run(
        "the answer is forty-two\n",
        &["--judge-upstream", &judge.url],
    );
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(a["passed"], true, "{a:#}");
    assert_eq!(a["verdict"]["replayed"], false, "{a:#}");
    assert_eq!(a["verdict"]["reason"], "it says forty-two");
    assert_eq!(asked(), 1);
    let (_, first) = judge.calls.lock().unwrap()[0].clone();
    assert_eq!(first["model"], "gpt-4o-mini");
    assert!(
        first["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("says forty-two"),
        "{first}"
    );
    let session = a["verdict"]["session"].as_str().unwrap().to_owned();
    assert!(session.starts_with("convo-judge:"), "{session}");
    let log = t.run(&["log", &session]).ok();
    assert!(
        log.contains("it says forty-two"),
        "the verdict is recorded: {log}"
    );
    assert!(
        convo_testutil::files_holding(&t.db().display().to_string(), secret.as_bytes()).is_empty(),
        "the judge's key is never stored"
    );

    // Second run, no upstream: the verdict is replayed, nobody is asked.
    let (code, a, v) = run("the answer is forty-two\n", &[]);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(a["verdict"]["replayed"], true, "{a:#}");
    assert_eq!(a["verdict"]["session"], session.as_str());
    assert_eq!(asked(), 1);
    // Each replay's counts are journaled on the recording's session.
    let got = t.run(&["session", "get", &rec, "--json"]).json();
    let replays = got["replays"].as_array().unwrap();
    assert_eq!(replays.len(), 2, "{got:#}");
    for r in replays {
        assert_eq!(
            (
                &r["branch"],
                &r["exact"],
                &r["tolerated"],
                &r["missed"],
                &r["live"]
            ),
            (&json!("main"), &json!(1), &json!(0), &json!(0), &json!(0)),
            "{r}"
        );
    }
    let shown = t.run(&["session", "get", &rec]).ok();
    assert!(
        shown.contains("replays 2, the last")
            && shown.contains("1 exact, 0 tolerated, 0 live, 0 missed"),
        "{shown}"
    );
    t.run(&["verify"]).ok();

    // A changed output: no verdict recorded, and none without an upstream.
    let (code, a, v) = run("the answer is forty-three\n", &[]);
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["tests"][0]["status"], "failed");
    let why = a["message"].as_str().unwrap();
    assert!(why.contains("--judge-upstream"), "{why}");
    assert_eq!(asked(), 1);
    // With one, the judge says no, and says why.
    let (code, a, v) = run(
        "the answer is forty-three\n",
        &["--judge-upstream", &judge.url],
    );
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(a["passed"], false);
    assert!(
        a["message"]
            .as_str()
            .unwrap()
            .contains("it never says forty-two"),
        "{a:#}"
    );
    assert_eq!(asked(), 2);

    // From a file: [judge] names the upstream and the model.
    std::fs::write(work.join("out.txt"), "forty-two it is\n").unwrap();
    let toml = format!(
        r#"
[judge]
upstream = "{}"
model = "judge-small"

[[test]]
name = "judged"
recording = "{rec}"
command = {program:?}
[[test.expect]]
judge = "says forty-two"
[[test.expect]]
judge = "says forty-two"
model = "judge-large"
"#,
        judge.url
    );
    std::fs::write(work.join("convo.toml"), toml).unwrap();
    let o = t
        .cmd()
        .current_dir(&work)
        .args(["test", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{v:#}");
    let models: Vec<Value> = judge.calls.lock().unwrap()[2..]
        .iter()
        .map(|(_, r)| r["model"].clone())
        .collect();
    assert_eq!(models, [json!("judge-small"), json!("judge-large")]);

    // `model` without `judge` is a usage error.
    std::fs::write(
        work.join("bad.toml"),
        format!("[[test]]\nrecording = \"{rec}\"\ncommand = \"true\"\n[[test.expect]]\ncontains = \"x\"\nmodel = \"m\"\n"),
    )
    .unwrap();
    let o = t
        .cmd()
        .current_dir(&work)
        .args(["test", "-f", "bad.toml"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("`model` goes with `judge`"),
        "{o:?}"
    );
}
