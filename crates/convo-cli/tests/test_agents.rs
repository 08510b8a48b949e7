//! Coding agents end to end: the real Claude Code, Codex, Gemini CLI and
//! opencode (npm, scripts/npm-test) talk to a scripted upstream, write their transcripts
//! in temporary homes, and the real `convo` imports them, re-imports them
//! as they grow, gives them back byte for byte, and turns a branch into a
//! session the CLI resumes.

use crate::common::TestEnv;
use crate::test_harness::Upstream;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A CLI installed by scripts/test-env, or `None` outside CI when it is not.
/// Claude Code as the tests run it: in `proj`, with only `PATH` from the
/// environment, `home` as its home, against `base`, telemetry off.
pub(crate) fn claude_code(
    claude: &Path,
    proj: &Path,
    home: &Path,
    base: impl AsRef<std::ffi::OsStr>,
) -> Command {
    let mut c = Command::new(claude);
    c.current_dir(proj)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("ANTHROPIC_BASE_URL", base)
        .env("ANTHROPIC_API_KEY", "x")
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    c
}

pub(crate) fn node_tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("CONVO_TEST_NODE_MODULES")
        .map(|d| PathBuf::from(d).join(".bin").join(name))
        .filter(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CONVO_TEST_NODE_MODULES with {name} (scripts/test-env)"
        );
        eprintln!("SKIPPED: {name} is not installed (scripts/test-env installs it)");
    }
    found
}

/// Forks `session` after its first turn as `other` and says one turn
/// there in convo: the branch the agents' end-to-end tests resume.
fn fork_with_a_turn(t: &TestEnv, session: &str) {
    t.run(&[
        "session", "fork", session, "--from", "main@1", "--branch", "other",
    ])
    .ok();
    t.run(&[
        "say",
        session,
        "--branch",
        "other",
        "--user",
        "a different follow-up",
        "--agent",
        "a reply made in convo",
    ])
    .ok();
}

/// Answers like Anthropic Messages and OpenAI Responses, streamed: the
/// text is `answer N`.
fn agent_model(n: usize, path: &str, req: &Value) -> Value {
    let text = format!("answer {n}");
    let model = req["model"].clone();
    let all = req["messages"].to_string();
    let has_agent_tool = req["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == "Agent"));
    if path.starts_with("/v1/messages")
        && req["stream"] == json!(true)
        && has_agent_tool
        && all.contains("please delegate")
        && !all.contains("tool_use")
    {
        // Start a subagent.
        let input = json!({"description": "look around", "prompt": "list the files please",
            "subagent_type": "general-purpose"});
        return json!({"sse": [
            ["message_start", {"type": "message_start", "message": {"id": format!("msg_{n}"),
                "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 1}}}],
            ["content_block_start", {"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": format!("toolu_{n}"), "name": "Agent", "input": {}}}],
            ["content_block_delta", {"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}],
            ["content_block_stop", {"type": "content_block_stop", "index": 0}],
            ["message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 3}}],
            ["message_stop", {"type": "message_stop"}],
        ]});
    }
    if path.starts_with("/v1/messages") {
        let message = json!({"id": format!("msg_{n}"), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}});
        if req["stream"] != json!(true) {
            let mut m = message;
            m["content"] = json!([{"type": "text", "text": text}]);
            m["stop_reason"] = json!("end_turn");
            return m;
        }
        return json!({"sse": [
            ["message_start", {"type": "message_start", "message": message}],
            ["content_block_start", {"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}],
            ["content_block_delta", {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}],
            ["content_block_stop", {"type": "content_block_stop", "index": 0}],
            ["message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 3}}],
            ["message_stop", {"type": "message_stop"}],
        ]});
    }
    if path.starts_with("/v1/responses") {
        let item = json!({"type": "message", "id": format!("msg_{n}"), "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        let resp = json!({"id": format!("resp_{n}"), "object": "response", "status": "in_progress",
            "model": model, "output": []});
        let mut done = resp.clone();
        done["status"] = json!("completed");
        done["output"] = json!([item]);
        done["usage"] = json!({"input_tokens": 10, "output_tokens": 3, "total_tokens": 13,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}});
        return json!({"sse": [
            ["response.created", {"type": "response.created", "response": resp}],
            ["response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}],
            ["response.completed", {"type": "response.completed", "response": done}],
        ]});
    }
    json!({"data": []})
}

/// Every file under `dir` whose name ends with `suffix`.
fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

pub(crate) fn ok(o: Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The text of every message the upstream was sent in call `i`.
fn sent(up: &Upstream, i: usize) -> String {
    up.calls.lock().unwrap()[i].1.to_string()
}

/// The last call to `path_prefix` that carried the conversation.
fn last_call(up: &Upstream, path_prefix: &str) -> usize {
    let calls = up.calls.lock().unwrap();
    calls
        .iter()
        .rposition(|(p, b)| p.starts_with(path_prefix) && b["stream"] == json!(true))
        .expect("a streamed call")
}

#[test]
fn claude_code_sessions_import_grow_export_and_a_branch_resumes() {
    let Some(claude) = node_tool("claude") else {
        return;
    };
    let up = Upstream::start(agent_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    let run = |args: &[&str]| {
        claude_code(&claude, &proj, &home, up.url.trim_end_matches("/v1"))
            .args(args)
            .output()
            .unwrap()
    };
    let sid = "0b7d2c1e-5a4f-4e3b-9c2d-1f0e9d8c7b6a";
    ok(
        run(&["-p", "--session-id", sid, "first question"]),
        "claude -p",
    );
    let projects = home.join(".claude/projects");
    let file = files(&projects, &format!("{sid}.jsonl")).remove(0);
    let imported = t
        .run(&["import", projects.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(
        imported["created"].as_array().unwrap().len(),
        1,
        "{imported}"
    );
    let session = imported["created"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(imported["created"][0]["title"], "first question");
    // `convo turn` reads like a turn: tokens and how many source records
    // ride with each node, not the records' raw JSON.
    let turn = t.run(&["turn", &session, "main@1"]).ok();
    assert!(turn.contains("first question"), "{turn}");
    assert!(turn.contains("records "), "{turn}");
    assert!(turn.contains("tokens "), "{turn}");
    assert!(!turn.contains("parentUuid"), "no raw record: {turn}");
    // Unchanged: skipped after a look at the file.
    let again = t
        .run(&["import", projects.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(again["unchanged"], 1, "{again}");

    // The session goes on: the same file grows, the same session grows.
    ok(
        run(&["-p", "--resume", sid, "second question"]),
        "claude --resume",
    );
    let grown = t
        .run(&["import", projects.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(grown["updated"][0]["id"], session.as_str(), "{grown}");
    assert_eq!(grown["updated"][0]["nodes"], 2, "{grown}");
    let back = t
        .run(&["export", &session, "--format", "claude-code"])
        .out
        .stdout;
    assert_eq!(back, std::fs::read(&file).unwrap(), "byte for byte");

    // A rewind: a new prompt after the first answer (what /rewind writes:
    // records whose parentUuid is an earlier record of the same file).
    let text = std::fs::read_to_string(&file).unwrap();
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first_answer = records
        .iter()
        .find(|r| r["type"] == "assistant")
        .unwrap()
        .clone();
    let second_prompt = records
        .iter()
        .find(|r| r["type"] == "user" && r["message"]["content"] == "second question")
        .unwrap()
        .clone();
    let second_answer = records
        .iter()
        .rfind(|r| r["type"] == "assistant")
        .unwrap()
        .clone();
    let mut u = second_prompt;
    u["uuid"] = json!("5f1e8c2a-0000-4000-8000-000000000001");
    u["parentUuid"] = first_answer["uuid"].clone();
    u["message"] = json!({"role": "user", "content": "rewound question"});
    let mut a = second_answer;
    a["uuid"] = json!("5f1e8c2a-0000-4000-8000-000000000002");
    a["parentUuid"] = u["uuid"].clone();
    a["message"]["id"] = json!("msg_rewound");
    a["message"]["content"] = json!([{"type": "text", "text": "rewound answer"}]);
    let mut more = text.clone();
    more.push_str(&format!("{u}\n{a}\n"));
    std::fs::write(&file, &more).unwrap();
    let rewound = t.run(&["import", file.to_str().unwrap(), "--json"]).json();
    assert_eq!(rewound["updated"][0]["branches"], 1, "{rewound}");
    let branches = t.run(&["branch", "list", &session, "--json"]).ok();
    assert!(
        branches.contains("broken-"),
        "the abandoned branch is kept, sealed: {branches}"
    );
    let main = t.run(&["log", &session]).ok();
    assert!(
        main.contains("rewound answer"),
        "the active branch is main: {main}"
    );
    assert!(!main.contains("second question"), "{main}");
    let back = t
        .run(&["export", &session, "--format", "claude-code"])
        .out
        .stdout;
    assert_eq!(back, more.as_bytes(), "byte for byte, both branches");

    // The rewound timeline as a new session Claude Code resumes: the model
    // is sent that history, not the abandoned one.
    let new_id = ok(
        t.cmd()
            .env("HOME", &home)
            .args([
                "export",
                &session,
                "--branch",
                "main",
                "--format",
                "claude-code",
                "--place",
            ])
            .output()
            .unwrap(),
        "convo export --place",
    )
    .trim()
    .to_owned();
    assert_ne!(new_id, sid);
    let placed = files(&projects, &format!("{new_id}.jsonl"));
    assert_eq!(placed.len(), 1, "placed in the project's folder");
    ok(
        run(&["-p", "--resume", &new_id, "after the fork"]),
        "claude --resume fork",
    );
    let body = sent(&up, last_call(&up, "/v1/messages"));
    assert!(body.contains("first question"), "{body}");
    assert!(body.contains("rewound question"), "{body}");
    assert!(body.contains("after the fork"), "{body}");
    assert!(
        !body.contains("second question"),
        "the abandoned branch: {body}"
    );
}

#[test]
fn claude_code_subagents_are_branches_of_the_turn_that_started_them() {
    let Some(claude) = node_tool("claude") else {
        return;
    };
    let up = Upstream::start(agent_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    let out = claude_code(&claude, &proj, &home, up.url.trim_end_matches("/v1"))
        .args(["-p", "please delegate this"])
        .output()
        .unwrap();
    ok(out, "claude -p");
    let projects = home.join(".claude/projects");
    let subagents = files(&projects, ".jsonl")
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/subagents/"))
        .count();
    assert!(subagents >= 1, "Claude Code wrote a subagent transcript");
    let imported = t
        .run(&["import", projects.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(
        imported["created"].as_array().unwrap().len(),
        1,
        "one session: {imported}"
    );
    let session = imported["created"][0]["id"].as_str().unwrap().to_owned();
    let branches = t.run(&["branch", "list", &session]).ok();
    assert!(branches.contains("agent-1"), "{branches}");
    let sub = t.run(&["log", &session, "agent-1"]).ok();
    assert!(sub.contains("list the files please"), "{sub}");
    let main = t.run(&["log", &session]).ok();
    assert!(main.contains("please delegate this"), "{main}");
    assert!(main.contains("Agent"), "the call that started it: {main}");
    // Linked both ways to the call that started it, as through the proxy.
    let link = subagent_link(&t, &session);
    assert_eq!(link["tool"], "Agent", "{link}");
    let started = t.run(&["show", link["started_by"].as_str().unwrap()]).ok();
    assert!(
        started.contains("Agent"),
        "started by the Agent call: {started}"
    );
    // The web view: under the call, a link to the subagent's timeline; on
    // that timeline, the way back to the call.
    let web = crate::serve_util::Server::start(&t, &[]);
    let page = web.get(&format!("/sessions/{session}")).text();
    assert!(
        page.contains("class=\"subagent\"")
            && page.contains(&format!("/sessions/{session}?branch=agent-1")),
        "the main timeline links its subagent: {page}"
    );
    let sub_page = web
        .get(&format!("/sessions/{session}?branch=agent-1"))
        .text();
    let back = format!("node={}", link["started_by"].as_str().unwrap());
    assert!(
        sub_page.contains("A subagent&#39;s timeline")
            || sub_page.contains("A subagent's timeline"),
        "{sub_page}"
    );
    assert!(sub_page.contains(&back), "back to the call: {sub_page}");
    drop(web);
    // The session file comes back byte for byte (the subagents' lines are
    // kept too, under their own file name).
    let file = files(&projects, ".jsonl")
        .into_iter()
        .find(|p| !p.to_string_lossy().contains("/subagents/"))
        .unwrap();
    let back = t
        .run(&["export", &session, "--format", "claude-code"])
        .out
        .stdout;
    assert_eq!(back, std::fs::read(&file).unwrap());
}

#[test]
fn codex_rollouts_import_grow_export_and_a_fork_resumes() {
    let Some(codex) = node_tool("codex") else {
        return;
    };
    let up = Upstream::start(agent_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let codex_home = t.home().join("codex-home");
    let proj = t.home().join("proj");
    for d in [&home, &codex_home, &proj] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"test-model\"\nmodel_provider = \"scripted\"\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}\"\n\
             env_key = \"SCRIPTED_KEY\"\nwire_api = \"responses\"\n",
            up.url
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(&codex)
            .current_dir(&proj)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", &codex_home)
            .env("SCRIPTED_KEY", "x")
            .args(args)
            .output()
            .unwrap()
    };
    ok(
        run(&["exec", "--skip-git-repo-check", "hello codex"]),
        "codex exec",
    );
    let sessions = codex_home.join("sessions");
    let file = files(&sessions, ".jsonl").remove(0);
    let imported = t
        .run(&["import", sessions.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(
        imported["created"].as_array().unwrap().len(),
        1,
        "{imported}"
    );
    assert_eq!(imported["created"][0]["title"], "hello codex");
    let session = imported["created"][0]["id"].as_str().unwrap().to_owned();
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let codex_id =
        &name[name.len() - "01a20e44-6585-7cd2-a0c2-224cd881c6c3.jsonl".len()..name.len() - 6];

    ok(
        run(&[
            "exec",
            "--skip-git-repo-check",
            "resume",
            codex_id,
            "again codex",
        ]),
        "codex exec resume",
    );
    let grown = t
        .run(&["import", sessions.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(grown["updated"][0]["id"], session.as_str(), "{grown}");
    let back = t.run(&["export", &session, "--format", "codex"]).out.stdout;
    assert_eq!(back, std::fs::read(&file).unwrap(), "byte for byte");
    let shown = t.run(&["log", &session]).ok();
    assert!(shown.contains("again codex"), "{shown}");

    // Fork after the first answer, say something else there, and resume it.
    fork_with_a_turn(&t, &session);
    let new_id = ok(
        t.cmd()
            .env("CODEX_HOME", &codex_home)
            .args([
                "export", &session, "--branch", "other", "--format", "codex", "--place",
            ])
            .output()
            .unwrap(),
        "convo export --place",
    )
    .trim()
    .to_owned();
    let placed = files(&sessions, &format!("{new_id}.jsonl"));
    assert_eq!(placed.len(), 1);
    ok(
        run(&[
            "exec",
            "--skip-git-repo-check",
            "resume",
            &new_id,
            "after the fork",
        ]),
        "codex exec resume fork",
    );
    let body = sent(&up, last_call(&up, "/v1/responses"));
    assert!(body.contains("hello codex"), "{body}");
    assert!(body.contains("a different follow-up"), "{body}");
    assert!(!body.contains("again codex"), "the other branch: {body}");
}

/// Polls `f` every 200 ms for up to 60 s (no timing is asserted: a slow
/// machine only waits longer).
/// `convo import --watch PATH` running in the background, quiet.
fn watch(t: &TestEnv, path: &Path) -> std::process::Child {
    t.cmd()
        .arg("import")
        .arg("--watch")
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// The first session's id, once the store exists.
fn first_session(t: &TestEnv) -> Option<String> {
    let r = t.run(&["session", "list", "--json"]);
    if r.code() != 0 {
        return None; // no store yet
    }
    r.json()
        .as_array()
        .and_then(|a| a.first())
        .and_then(|s| s["id"].as_str())
        .map(str::to_owned)
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..300 {
        if f() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!("never happened: {what}");
}

#[test]
fn watch_imports_lines_as_they_are_written_and_keeps_deleted_files() {
    let fixture = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures/claude-code/2.1.331")
        .join("360bddc6-2d60-4460-b4e3-0ea3d034065f.jsonl");
    let bytes = std::fs::read(&fixture).unwrap();
    let t = TestEnv::new();
    let projects = t.home().join("projects");
    let proj = projects.join("-tmp-p");
    std::fs::create_dir_all(&proj).unwrap();
    let mut watcher = watch(&t, &projects);
    // The first turn, and half of the next line (being written).
    let line_end = |n: usize| {
        let mut at = 0;
        for _ in 0..n {
            at += bytes[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
        }
        at
    };
    let file = proj.join("360bddc6-2d60-4460-b4e3-0ea3d034065f.jsonl");
    let cut = line_end(22) + 40;
    std::fs::write(&file, &bytes[..cut]).unwrap();
    let session = || first_session(&t);
    eventually("the session is imported", || session().is_some());
    let id = session().unwrap();
    let log = t.run(&["log", &id]).ok();
    assert!(log.contains("answer 1"), "{log}");
    // The rest is written; the watcher adds it to the same session.
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(&bytes[cut..]).unwrap();
    }
    eventually("the rest is imported", || {
        t.run(&["log", &id])
            .ok()
            .contains("answer to the rewound question")
    });
    // The agent deletes its transcript: the archive still has every line.
    std::fs::remove_file(&file).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let back = t
        .run(&["export", &id, "--format", "claude-code"])
        .out
        .stdout;
    assert_eq!(back, bytes);
    assert_eq!(
        t.run(&["session", "list", "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    watcher.kill().unwrap();
    watcher.wait().unwrap();
}

/// What `convo import` remembers of a file it imported (its size and time,
/// the shortcut that skips it) lives in the store: importing into another
/// store, or into a store deleted and made again, reads the file again
/// rather than calling it unchanged.
#[test]
fn an_unchanged_file_is_skipped_only_by_the_store_that_has_it() {
    let fixture = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures/claude-code/2.1.331");
    let t = TestEnv::new();
    let dir = fixture.to_str().unwrap();
    let import = |extra: &[&str]| {
        let mut args = extra.to_vec();
        args.extend(["import", dir, "--json"]);
        t.run(&args).json()
    };
    let first = import(&[]);
    assert_eq!(
        first["created"].as_array().map(Vec::len),
        Some(1),
        "{first}"
    );
    assert_eq!(import(&[])["unchanged"], 1, "the same store skips it");
    // Another store beside it.
    let other = format!("sqlite://{}", t.home().join("other.db").display());
    let there = import(&["--store", &other]);
    assert_eq!(
        there["created"].as_array().map(Vec::len),
        Some(1),
        "{there}"
    );
    assert_eq!(import(&["--store", &other])["unchanged"], 1);
    // The store deleted and made again at the same place.
    let db = t.db();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let again = import(&[]);
    assert_eq!(
        again["created"].as_array().map(Vec::len),
        Some(1),
        "{again}"
    );
    let id = again["created"][0]["id"].as_str().unwrap();
    let log = t.run(&["log", id]).ok();
    assert!(log.contains("answer to the rewound question"), "{log}");
}

/// `convo import ~`: a home folder's coding agents' sessions, each folder
/// read in its agent's format.
#[test]
fn a_home_folder_imports_every_agents_sessions() {
    let fixtures = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures");
    let t = TestEnv::new();
    let home = t.home().join("someone");
    let claude = home.join(".claude/projects/-tmp-p");
    let codex = home.join(".codex/sessions/2026/11/24");
    for (dir, from) in [(&claude, "claude-code/2.1.331"), (&codex, "codex/0.169.0")] {
        std::fs::create_dir_all(dir).unwrap();
        for f in std::fs::read_dir(fixtures.join(from)).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
        }
    }
    // An agent installed but with nothing written yet.
    std::fs::create_dir_all(home.join(".gemini/tmp")).unwrap();
    let r = t.run(&["import", home.to_str().unwrap(), "--json"]).json();
    let created = r["created"].as_array().unwrap();
    assert_eq!(created.len(), 2, "{r}");
    let agents: std::collections::BTreeSet<String> = t
        .run(&["session", "list", "--json"])
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["agent"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(agents, ["claude-code", "codex"].map(String::from).into());
}

/// `import --watch` on opencode's data folder: the database as opencode
/// 1.18.34 left it with a revert pending, then after its next prompt
/// (which deleted the reverted turn): the watcher adds the new turn to
/// main and the archive keeps the deleted one.
#[test]
fn watch_follows_an_opencode_database() {
    let fixtures = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures/opencode/1.18.34");
    let t = TestEnv::new();
    let data = t.home().join("opencode-data");
    std::fs::create_dir_all(&data).unwrap();
    let put = |which: &str| {
        let tmp = data.join("next.tmp");
        let _ = std::fs::remove_file(&tmp);
        let sql = std::fs::read_to_string(fixtures.join(format!("{which}.sql"))).unwrap();
        rusqlite::Connection::open(&tmp)
            .unwrap()
            .execute_batch(&sql)
            .unwrap();
        std::fs::rename(&tmp, data.join("opencode.db")).unwrap();
    };
    put("reverted");
    let mut watcher = watch(&t, &data);
    let session = || first_session(&t);
    eventually("the session is imported", || session().is_some());
    let id = session().unwrap();
    assert!(t.run(&["log", &id]).ok().contains("answer 6"));
    put("after");
    eventually("the turn after the revert is imported", || {
        t.run(&["log", &id]).ok().contains("after the revert")
    });
    let sql = t.run(&["export", &id, "--format", "opencode"]).ok();
    assert!(sql.contains("answer 3"), "the reverted turn is kept");
    watcher.kill().unwrap();
    watcher.wait().unwrap();
}

/// `import --watch` follows a Gemini CLI chat: half of it, then the rest
/// appended (the rewind included), picked up and exported byte for byte.
#[test]
fn watch_follows_a_gemini_cli_chat() {
    let fixture = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join(
        "../convo-formats/tests/fixtures/gemini-cli/source-016443b/session-2026-11-24T10-00-5e1f0c2a.jsonl",
    );
    let bytes = std::fs::read(&fixture).unwrap();
    let t = TestEnv::new();
    let chats = t.home().join("gemini/tmp/9c1a7f0e/chats");
    std::fs::create_dir_all(&chats).unwrap();
    let file = chats.join(fixture.file_name().unwrap());
    let mut cut = 0;
    for _ in 0..5 {
        cut += bytes[cut..].iter().position(|&b| b == b'\n').unwrap() + 1;
    }
    std::fs::write(&file, &bytes[..cut]).unwrap();
    let mut watcher = watch(&t, &t.home().join("gemini"));
    let session = || first_session(&t);
    eventually("the chat is imported", || session().is_some());
    let id = session().unwrap();
    let exported = |t: &TestEnv| t.run(&["export", &id, "--format", "gemini-cli"]).out.stdout;
    eventually("the first lines are stored", || {
        exported(&t) == bytes[..cut]
    });
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(&bytes[cut..])
        .unwrap();
    eventually("the appended lines are imported", || exported(&t) == bytes);
    assert!(t.run(&["log", &id]).ok().contains("Vendored foo.h"));
    watcher.kill().unwrap();
    watcher.wait().unwrap();
}

/// `import --redact-secrets`: the credentials a transcript holds (an API
/// key in a prompt, an `.env` assignment and a bearer token in a Bash
/// call, a private key in a tool result) are replaced before anything is
/// stored, the report counts them, the ids that thread the transcript are
/// kept, export gives valid redacted lines (each keeping the original
/// line's SHA-256), and the store verifies.
#[test]
fn import_redact_secrets_replaces_credentials_before_storing() {
    let t = TestEnv::new();
    let dir = t.home().join("projects").join("-home-me-proj");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = "7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f";
    let key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr";
    let bearer = "eyJhbGciOiJIUzI1NiJ9abcdefghijklmnopqrstuvwx";
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x+abc/def==\n-----END RSA PRIVATE KEY-----";
    // Shapes only gitleaks' rules know (short, or holding slashes).
    let aws = format!("AKIA{}", "QW3ER5TY7UI2OP4Z");
    let slack = format!(
        "https://hooks.slack.com/services/{}",
        "T0A1B2C3D4E/B5F6G7H8I9J/Kq8Lm2Np4Rs6Tu8Vw0Xy2Za4"
    );
    let lines = [
        json!({"parentUuid": null, "isSidechain": false, "type": "user",
            "message": {"role": "user", "content": format!("my key is {key}, deploy please")},
            "uuid": "00000000-0000-4000-8000-000000000001", "timestamp": "2026-11-24T10:00:00.000Z",
            "sessionId": sid, "cwd": "/home/me/proj"}),
        json!({"parentUuid": "00000000-0000-4000-8000-000000000001", "isSidechain": false,
            "type": "assistant", "uuid": "00000000-0000-4000-8000-000000000002",
            "timestamp": "2026-11-24T10:00:01.000Z", "sessionId": sid,
            "message": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [{"type": "tool_use", "id": "toolu_01AbCdEfGhIjKlMnOpQrStUv", "name": "Bash",
                    "input": {"command": format!("export OPENAI_API_KEY={key} && curl -H 'Authorization: Bearer {bearer}' https://api.example.com")}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 12, "output_tokens": 3}}}),
        json!({"parentUuid": "00000000-0000-4000-8000-000000000002", "isSidechain": false,
            "type": "user", "uuid": "00000000-0000-4000-8000-000000000003",
            "timestamp": "2026-11-24T10:00:02.000Z", "sessionId": sid,
            "message": {"role": "user", "content": [{"tool_use_id": "toolu_01AbCdEfGhIjKlMnOpQrStUv",
                "type": "tool_result", "content": format!("deployed\n{pem}\naws {aws} notify {slack}\n"), "is_error": false}]}}),
        json!({"parentUuid": "00000000-0000-4000-8000-000000000003", "isSidechain": false,
            "type": "assistant", "uuid": "00000000-0000-4000-8000-000000000004",
            "timestamp": "2026-11-24T10:00:03.000Z", "sessionId": sid,
            "message": {"id": "msg_02", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [{"type": "text", "text": "Deployed; nothing secret here."}],
                "stop_reason": "end_turn", "usage": {"input_tokens": 20, "output_tokens": 5}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join(format!("{sid}.jsonl")), &text).unwrap();
    let r = t
        .run(&[
            "import",
            "--redact-secrets",
            "--json",
            dir.to_str().unwrap(),
        ])
        .json();
    assert_eq!(r["created"].as_array().unwrap().len(), 1, "{r}");
    assert!(
        r["secrets"].as_u64().unwrap() >= 4,
        "key twice, bearer, private key: {r}"
    );
    assert_eq!(r["redacted"][0]["messages"], 3, "{r}");
    // The report names the rule that found each secret.
    let rules = &r["secret_rules"];
    assert!(rules["aws-access-token"].as_u64() >= Some(1), "{r}");
    assert!(rules["slack-webhook-url"].as_u64() >= Some(1), "{r}");
    assert!(rules["convo-private-key-block"].as_u64() >= Some(1), "{r}");
    assert_eq!(r["redacted"][0]["rules"], *rules, "one file: {r}");
    let session = r["created"][0]["id"].as_str().unwrap().to_owned();
    let back = t.run(&["export", &session, "--format", "claude-code"]).ok();
    for secret in [
        key,
        bearer,
        "MIIEowIBAAKCAQEA7x",
        &aws,
        "Kq8Lm2Np4Rs6Tu8Vw0Xy2Za4",
    ] {
        assert!(
            !back.contains(secret),
            "{secret} left in the export:\n{back}"
        );
    }
    let out: Vec<Value> = back
        .lines()
        .map(|l| serde_json::from_str(l).expect("every exported line is JSON"))
        .collect();
    assert_eq!(out.len(), 4);
    for (a, b) in out.iter().zip(&lines) {
        assert_eq!(a["uuid"], b["uuid"], "ids kept");
        assert_eq!(a["parentUuid"], b["parentUuid"]);
    }
    assert_eq!(out[3], lines[3], "a line without secrets is untouched");
    assert_eq!(
        back.lines().nth(3).unwrap(),
        text.lines().nth(3).unwrap(),
        "byte for byte"
    );
    assert_eq!(
        out[1]["message"]["content"][0]["id"], "toolu_01AbCdEfGhIjKlMnOpQrStUv",
        "the tool call id is an identifier, not a secret"
    );
    assert_eq!(
        out[1]["message"]["usage"]["input_tokens"], 12,
        "numbers never change"
    );
    let cmd = out[1]["message"]["content"][0]["input"]["command"]
        .as_str()
        .unwrap();
    assert!(cmd.contains("OPENAI_API_KEY=REDACTED"), "{cmd}");
    // The stored messages hold no secret either, and the originals' digests are kept.
    let shown = t.run(&["log", &session, "--json"]).ok();
    assert!(!shown.contains(key) && !shown.contains(bearer), "{shown}");
    let node = t.run(&["search", "deployed notify", "--json"]).json();
    let hash = node["hits"][0]["node"]["hash"].as_str().unwrap().to_owned();
    let full = t.run(&["show", &hash, "--json"]).ok();
    assert!(full.contains("original_sha256"), "{full}");
    let line2 = text.lines().nth(2).unwrap();
    assert!(
        full.contains(&convo_core::sha256(line2.as_bytes()).to_hex()),
        "the original line's digest: {full}"
    );
    let v = t.run(&["verify"]);
    assert_eq!(v.code(), 0, "{}", v.stderr());
}

/// `--redact-secrets` on an opencode database (opencode 1.18.34's, a
/// secret put inside the JSON of a text part's and a tool part's `data`
/// column): the rows' inner JSON stays valid, no store file holds the
/// secret, and the export is SQL that opencode's schema takes back.
#[test]
fn import_redact_secrets_in_opencode_rows_keeps_their_json_valid() {
    let fixtures = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures/opencode/1.18.34");
    let sql = std::fs::read_to_string(fixtures.join("after.sql")).unwrap();
    let t = TestEnv::new();
    let data = tempfile::tempdir().unwrap();
    let db_path = data.path().join("opencode.db");
    let db = rusqlite::Connection::open(&db_path).unwrap();
    db.execute_batch(&sql).unwrap();
    let key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr";
    let pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7x+abc/def==\n-----END RSA PRIVATE KEY-----";
    // A quote and a backslash beside the secret: escapes in the inner JSON.
    let said = format!("my \"key\" is {key}\\ and here is mine:\n{pem}\n");
    let text_part: String = db
        .query_row(
            "SELECT id FROM part WHERE json_extract(data, '$.type') = 'text' ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    db.execute(
        "UPDATE part SET data = json_set(data, '$.text', ?1) WHERE id = ?2",
        rusqlite::params![said, text_part],
    )
    .unwrap();
    let tool_part: String = db
        .query_row(
            "SELECT id FROM part WHERE json_extract(data, '$.type') = 'tool' ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    db.execute(
        "UPDATE part SET data = json_set(data, '$.state.input.command', ?1) WHERE id = ?2",
        rusqlite::params![format!("OPENAI_API_KEY={key} ./deploy.sh"), tool_part],
    )
    .unwrap();
    drop(db);

    let r = t
        .run(&[
            "import",
            "--redact-secrets",
            "--json",
            data.path().to_str().unwrap(),
        ])
        .json();
    // The session and opencode's fork of it (a session of its own).
    assert_eq!(r["created"].as_array().unwrap().len(), 2, "{r}");
    let secrets = r["secrets"].as_u64().unwrap();
    assert!(
        (3..=8).contains(&secrets),
        "the key twice and the private key, in the rows and the messages' texts; nothing else: {r}"
    );
    // No file of the store holds the secrets (the database, its log).
    let mut files = vec![t.home().to_path_buf()];
    let mut seen = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        seen += 1;
        for secret in [key, "MIIEowIBAAKCAQEA7x"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} is in {}",
                p.display()
            );
        }
    }
    assert!(seen > 0);
    let v = t.run(&["verify"]);
    assert_eq!(v.code(), 0, "{}", v.stderr());

    // The export is SQL opencode's schema accepts, every row's JSON valid.
    let out = r["created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let id = c["id"].as_str().unwrap();
            t.run(&["export", id, "--format", "opencode"]).ok()
        })
        .find(|sql| sql.contains(&text_part))
        .expect("a session holds the part");
    assert!(
        !out.contains(key) && !out.contains("MIIEowIBAAKCAQEA7x"),
        "{out}"
    );

    let fresh = data.path().join("fresh.db");
    let db = rusqlite::Connection::open(&fresh).unwrap();
    db.execute_batch(&sql).unwrap();
    db.execute_batch("DELETE FROM part; DELETE FROM message; DELETE FROM session;")
        .unwrap();
    db.execute_batch(&out).unwrap();
    let (parts, valid): (i64, i64) = db
        .query_row(
            "SELECT count(*), sum(json_valid(data)) FROM part",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    // Every part of the sessions written back (the session and its
    // subagent's) is back.
    db.execute("ATTACH DATABASE ?1 AS orig", [db_path.to_str().unwrap()])
        .unwrap();
    let want: i64 = db
        .query_row(
            "SELECT count(*) FROM orig.part WHERE session_id IN (SELECT id FROM main.session)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(parts, want, "every part of the sessions back");
    assert_eq!(valid, parts, "every part's data is JSON");
    let text: String = db
        .query_row(
            "SELECT json_extract(data, '$.text') FROM part WHERE id = ?1",
            [&text_part],
            |r| r.get(0),
        )
        .unwrap();
    assert!(text.starts_with("my \"key\" is "), "{text}");
    assert!(!text.contains(key) && text.contains("REDACTED"), "{text}");
    let cmd: String = db
        .query_row(
            "SELECT json_extract(data, '$.state.input.command') FROM part WHERE id = ?1",
            [&tool_part],
            |r| r.get(0),
        )
        .unwrap();
    assert!(cmd.contains("OPENAI_API_KEY=REDACTED"), "{cmd}");
    assert!(cmd.ends_with(" ./deploy.sh"), "{cmd}");
    let (messages, mvalid): (i64, i64) = db
        .query_row(
            "SELECT count(*), sum(json_valid(data)) FROM message",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(messages > 0 && mvalid == messages);
}

/// Gemini CLI chats end to end through the binary: the project folder
/// imported (format detected), the session exported back byte for byte,
/// found by `search --agent gemini-cli`; the rewound branch written as a
/// new chat where Gemini CLI looks.
#[test]
fn gemini_cli_chats_import_export_and_search_by_agent() {
    let t = TestEnv::new();
    let src = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-formats/tests/fixtures/gemini-cli/source-016443b");
    let chats = t.home().join("gemini/tmp/9c1a7f0e/chats");
    std::fs::create_dir_all(&chats).unwrap();
    let name = "session-2026-11-24T10-00-5e1f0c2a.jsonl";
    let bytes = std::fs::read(src.join(name)).unwrap();
    std::fs::write(chats.join(name), &bytes).unwrap();
    let gemini_home = t.home().join("gemini");
    let r = t
        .run(&["import", gemini_home.to_str().unwrap(), "--json"])
        .json();
    assert_eq!(r["created"].as_array().unwrap().len(), 1, "{r}");
    let session = r["created"][0]["id"].as_str().unwrap().to_owned();
    let back = t
        .run(&["export", &session, "--format", "gemini-cli"])
        .out
        .stdout;
    assert_eq!(back, bytes, "byte for byte");
    let hits = t
        .run(&["search", "vendored", "--agent", "gemini-cli", "--json"])
        .json();
    assert_eq!(
        hits["hits"][0]["node"]["session"],
        session.as_str(),
        "{hits}"
    );
    // The rewound branch, with a turn made in convo, as a new chat file
    // where Gemini CLI looks: its history, not the live conversation's.
    t.run(&[
        "say",
        &session,
        "--branch",
        "alt-1",
        "--user",
        "and test it",
        "--agent",
        "Tested.",
    ])
    .ok();
    let new_id = ok(
        t.cmd()
            .env("GEMINI_CLI_HOME", t.home().join("gemini-home"))
            .args([
                "export",
                &session,
                "--branch",
                "alt-1",
                "--format",
                "gemini-cli",
                "--place",
            ])
            .output()
            .unwrap(),
        "convo export --place",
    )
    .trim()
    .to_owned();
    assert_ne!(new_id, "5e1f0c2a-7b3d-4c8e-9f10-2a3b4c5d6e7f");
    let placed = files(
        &t.home().join("gemini-home/.gemini/tmp/9c1a7f0e3d5b2a4c6e8f0a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5a7b9c1d/chats"),
        &format!("-{}.jsonl", &new_id[..8]),
    );
    assert_eq!(placed.len(), 1, "placed in the project's chats");
    let text = std::fs::read_to_string(&placed[0]).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["sessionId"], new_id.as_str());
    assert!(
        text.contains("add it") && text.contains("Added foo.h."),
        "{text}"
    );
    assert!(
        text.contains("and test it") && text.contains("Tested."),
        "{text}"
    );
    assert!(
        !text.contains("vendor it instead"),
        "the live branch: {text}"
    );
    assert!(!text.contains("$rewindTo"), "{text}");
    // A valid chat: read back, it is one session whose main is the branch.
    let back = t
        .run(&["import", placed[0].to_str().unwrap(), "--json"])
        .json();
    let fork = back["created"][0]["id"].as_str().unwrap().to_owned();
    let log = t.run(&["log", &fork]).ok();
    assert!(log.contains("Tested.") && log.contains("make"), "{log}");
}

/// Answers like the Gemini API (what Gemini CLI 0.61.0 asks
/// `GOOGLE_GEMINI_BASE_URL` for): its model router's `:generateContent`
/// gets a complexity score; `:streamGenerateContent?alt=sse` calls
/// `read_file` on `notes.txt` for a prompt "please read…" not answered by
/// the tool yet, and is answered `answer N` otherwise.
fn gemini_model(n: usize, path: &str, req: &Value) -> Value {
    let reply = |parts: Value| {
        json!({"candidates": [{"content": {"parts": parts, "role": "model"},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3, "totalTokenCount": 13},
            "modelVersion": "gemini-scripted"})
    };
    if path.contains(":generateContent") {
        let score = json!({"complexity_reasoning": "simple", "complexity_score": 10});
        return reply(json!([{"text": score.to_string()}]));
    }
    if !path.contains(":streamGenerateContent") {
        return json!({});
    }
    let last = req["contents"]
        .as_array()
        .and_then(|c| c.last())
        .map(Value::to_string)
        .unwrap_or_default();
    let parts = if last.contains("please read") && !last.contains("functionResponse") {
        json!([{"functionCall": {"name": "read_file", "args": {"file_path": "notes.txt"}}}])
    } else {
        json!([{"text": format!("answer {n}")}])
    };
    json!({"sse": [[null, reply(parts)]]})
}

/// Gemini CLI for real (`@google/gemini-cli` pinned in scripts/npm-test)
/// against a scripted Gemini API: `import --watch` picks up the chat it
/// writes (a `read_file` call and its result), the chat resumed by the
/// CLI grows the same session, `export` gives the file back byte for
/// byte, and a branch made in convo, placed where the CLI looks, is
/// resumed by `gemini --resume`, which sends that history, not the
/// abandoned one.
#[test]
fn gemini_cli_chats_import_grow_export_and_a_fork_resumes() {
    let Some(gemini) = node_tool("gemini") else {
        return;
    };
    let up = Upstream::start(gemini_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    let dot = home.join(".gemini");
    std::fs::create_dir_all(&dot).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("notes.txt"), "hello notes\n").unwrap();
    // The API key sign-in (its base URL from the environment), nothing
    // sent elsewhere.
    std::fs::write(
        dot.join("settings.json"),
        json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false}})
        .to_string(),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(&gemini)
            .current_dir(&proj)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("GEMINI_API_KEY", "x")
            .env("GOOGLE_GEMINI_BASE_URL", up.url.trim_end_matches("/v1"))
            .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
            .args(args)
            .output()
            .unwrap()
    };
    let mut watcher = watch(&t, &dot);
    ok(run(&["--yolo", "-p", "please read notes.txt"]), "gemini -p");
    let session = || first_session(&t);
    eventually("the watcher imports the chat", || {
        session().is_some_and(|id| t.run(&["log", &id]).ok().contains("hello notes"))
    });
    watcher.kill().unwrap();
    watcher.wait().unwrap();
    let session = session().unwrap();
    let log = t.run(&["log", &session]).ok();
    assert!(log.contains("read notes.txt"), "the tool call: {log}");
    assert!(log.contains("please read notes.txt"), "{log}");

    let chats = files(&dot.join("tmp"), ".jsonl");
    assert_eq!(chats.len(), 1, "{chats:?}");
    assert!(
        chats[0]
            .to_string_lossy()
            .contains("/tmp/proj/chats/session-"),
        "{chats:?}"
    );
    let first: Value = serde_json::from_str(
        std::fs::read_to_string(&chats[0])
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let sid = first["sessionId"].as_str().unwrap().to_owned();
    ok(
        run(&["--yolo", "--resume", &sid, "-p", "second question"]),
        "gemini --resume",
    );
    let grown = t.run(&["import", dot.to_str().unwrap(), "--json"]).json();
    assert_eq!(grown["updated"][0]["id"], session.as_str(), "{grown}");
    assert_eq!(grown["created"].as_array().unwrap().len(), 0, "{grown}");
    let file = files(&dot.join("tmp"), ".jsonl")
        .into_iter()
        .find(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains("second question")
        })
        .unwrap();
    let back = t
        .run(&["export", &session, "--format", "gemini-cli"])
        .out
        .stdout;
    assert_eq!(back, std::fs::read(&file).unwrap(), "byte for byte");
    let log = t.run(&["log", &session]).ok();
    assert!(log.contains("second question"), "{log}");
    assert!(
        log.contains("read notes.txt"),
        "the tool call, after the resume restated the history: {log}"
    );

    // Fork after the first turn, say something else there, resume it.
    fork_with_a_turn(&t, &session);
    let new_id = ok(
        t.cmd()
            .env("HOME", &home)
            .args([
                "export",
                &session,
                "--branch",
                "other",
                "--format",
                "gemini-cli",
                "--place",
            ])
            .output()
            .unwrap(),
        "convo export --place",
    )
    .trim()
    .to_owned();
    assert_ne!(new_id, sid);
    let placed = files(
        &dot.join("tmp/proj/chats"),
        &format!("-{}.jsonl", &new_id[..8]),
    );
    assert_eq!(placed.len(), 1, "in the project's chats (projects.json)");
    let fork = std::fs::read_to_string(&placed[0]).unwrap();
    assert!(
        fork.contains("<session_context>"),
        "the messages that are no nodes in convo are written back: {fork}"
    );
    ok(
        run(&["--yolo", "--resume", &new_id, "-p", "after the fork"]),
        "gemini --resume fork",
    );
    let body = {
        let calls = up.calls.lock().unwrap();
        let i = calls
            .iter()
            .rposition(|(p, _)| p.contains(":streamGenerateContent"))
            .unwrap();
        calls[i].1.to_string()
    };
    assert!(body.contains("please read notes.txt"), "{body}");
    assert!(body.contains("hello notes"), "the tool's result: {body}");
    assert!(body.contains("a different follow-up"), "{body}");
    assert!(body.contains("a reply made in convo"), "{body}");
    assert!(body.contains("after the fork"), "{body}");
    assert!(
        !body.contains("second question"),
        "the abandoned branch: {body}"
    );
}

/// Answers like OpenAI chat completions, streamed (what opencode's
/// `@ai-sdk/openai-compatible` provider asks for): "now run ls" calls
/// `bash` with `ls`; anything else is answered `answer N`.
fn chat_model(n: usize, _: &str, req: &Value) -> Value {
    let last = req["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or(Value::Null);
    let has_bash = req["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "bash"));
    let chunk = |delta: Value, finish: Value| {
        json!(["message", {"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
            "created": 0, "model": req["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": if finish.is_null() { Value::Null } else {
                json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}) }}])
    };
    if last["role"] == "user" && last["content"].to_string().contains("now run ls") && has_bash {
        let call = json!({"index": 0, "id": format!("call_{n}"), "type": "function",
            "function": {"name": "bash", "arguments": json!({"command": "ls", "description": "List files"}).to_string()}});
        return json!({"sse": [
            chunk(json!({"role": "assistant", "tool_calls": [call]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
        ]});
    }
    json!({"sse": [
        chunk(json!({"role": "assistant", "content": format!("answer {n}")}), Value::Null),
        chunk(json!({}), json!("stop")),
    ]})
}

/// opencode for real (the `opencode-linux-x64` binary pinned in
/// scripts/npm-test) against a scripted upstream: its opencode.db imported,
/// the session deleted from opencode and put back from the archive with
/// `convo export --format opencode | sqlite3`, then continued by opencode,
/// which sends the restored history; the re-import adds the new turn.
#[test]
fn opencode_database_imports_and_a_deleted_session_is_restored() {
    let Some(modules) = std::env::var_os("CONVO_TEST_NODE_MODULES").map(PathBuf::from) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CONVO_TEST_NODE_MODULES"
        );
        eprintln!("SKIPPED: opencode is not installed (scripts/test-env installs it)");
        return;
    };
    let opencode = modules.join("opencode-linux-x64/bin/opencode");
    if !opencode.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install opencode-linux-x64"
        );
        eprintln!("SKIPPED: {} is not installed", opencode.display());
        return;
    }
    let up = Upstream::start(chat_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    for d in [&home, &proj] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        proj.join("opencode.json"),
        json!({
            "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
                "options": {"baseURL": up.url, "apiKey": "x"},
                "models": {"test-model": {"name": "Test model", "tool_call": true}}}},
            "model": "scripted/test-model", "small_model": "scripted/test-model",
            "autoupdate": false, "share": "disabled"
        })
        .to_string(),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(&opencode)
            .current_dir(&proj)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .args(args)
            .output()
            .unwrap()
    };
    ok(run(&["run", "hello opencode"]), "opencode run");
    ok(
        run(&["run", "--continue", "now run ls"]),
        "opencode run --continue",
    );
    let data = home.join(".local/share/opencode");
    let db_path = data.join("opencode.db");
    let imported = t.run(&["import", data.to_str().unwrap(), "--json"]).json();
    assert_eq!(
        imported["created"].as_array().unwrap().len(),
        1,
        "{imported}"
    );
    let session = imported["created"][0]["id"].as_str().unwrap().to_owned();
    let shown = t.run(&["log", &session]).ok();
    assert!(
        shown.contains("$ ls"),
        "the bash call reads as its command: {shown}"
    );

    // Deleted from opencode; put back from the archive.
    let db = rusqlite::Connection::open(&db_path).unwrap();
    let oc_id: String = db
        .query_row("SELECT id FROM session", [], |r| r.get(0))
        .unwrap();
    let rows = |db: &rusqlite::Connection| -> i64 {
        db.query_row(
            "SELECT (SELECT count(*) FROM message) + (SELECT count(*) FROM part)",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let before = rows(&db);
    db.execute_batch("PRAGMA foreign_keys = ON").unwrap();
    db.execute("DELETE FROM session WHERE id = ?1", [&oc_id])
        .unwrap();
    assert_eq!(rows(&db), 0, "opencode's rows are gone");
    let sql = t.run(&["export", &session, "--format", "opencode"]).ok();
    db.execute_batch(&sql).unwrap();
    assert_eq!(rows(&db), before, "every row back");
    drop(db);
    let calls = up.calls.lock().unwrap().len();
    ok(
        run(&["run", "--session", &oc_id, "and again"]),
        "opencode run --session",
    );
    let end = up.calls.lock().unwrap().len();
    let resumed = (calls..end)
        .map(|i| sent(&up, i))
        .find(|s| s.contains("and again"))
        .expect("the continued turn reached the model");
    assert!(
        resumed.contains("hello opencode") && resumed.contains("opencode.json"),
        "opencode sent the restored history: {resumed}"
    );
    let again = t.run(&["import", data.to_str().unwrap(), "--json"]).json();
    assert_eq!(again["updated"][0]["id"], session.as_str(), "{again}");
    let again = t.run(&["import", data.to_str().unwrap(), "--json"]).json();
    assert_eq!(again["unchanged"], 1, "{again}");

    // Fork after the first answer, say something else there, write the
    // branch into opencode's database as a new session and continue it.
    fork_with_a_turn(&t, &session);
    let new_id = ok(
        t.cmd()
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .args([
                "export", &session, "--branch", "other", "--format", "opencode", "--place",
            ])
            .output()
            .unwrap(),
        "convo export --place",
    )
    .trim()
    .to_owned();
    assert!(new_id.starts_with("ses_") && new_id != oc_id, "{new_id}");
    let calls = up.calls.lock().unwrap().len();
    ok(
        run(&["run", "--session", &new_id, "after the fork"]),
        "opencode run --session fork",
    );
    let end = up.calls.lock().unwrap().len();
    let body = (calls..end)
        .map(|i| sent(&up, i))
        .find(|s| s.contains("after the fork"))
        .expect("the fork's turn reached the model");
    assert!(body.contains("hello opencode"), "{body}");
    assert!(
        body.contains("a different follow-up") && body.contains("a reply made in convo"),
        "{body}"
    );
    assert!(
        !body.contains("now run ls") && !body.contains("and again"),
        "the abandoned turns: {body}"
    );
    // opencode lists it as a session titled as a fork.
    let db = rusqlite::Connection::open(&db_path).unwrap();
    let title: String = db
        .query_row("SELECT title FROM session WHERE id = ?1", [&new_id], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(title.ends_with("(fork: other)"), "{title}");
}

/// `convo proxy` on port 0 in `t`'s home, with `args` after its listen flags.
pub(crate) fn proxy(t: &TestEnv, args: &[&str]) -> crate::serve_util::Server {
    let mut all = vec!["proxy", "--listen", "127.0.0.1:0", "--quiet"];
    all.extend_from_slice(args);
    crate::serve_util::Server::launch(t, &all)
}

/// The one subagent timeline of `session` (`agent-1`): its link to the
/// call that started it, checked both ways in `log --graph` (text and
/// JSON) and `session get --json`.
pub(crate) fn subagent_link(t: &TestEnv, session: &str) -> Value {
    let graph = t.run(&["log", session, "--graph", "--json"]).json();
    let tree = graph.as_array().unwrap();
    let subs: Vec<&Value> = tree.iter().filter(|b| !b["subagent"].is_null()).collect();
    assert_eq!(subs.len(), 1, "one subagent timeline: {graph:#}");
    let sub = subs[0];
    assert_eq!(sub["name"], "agent-1", "{graph:#}");
    let link = sub["subagent"].clone();
    assert_eq!(link["started_by"], sub["fork_point"], "{graph:#}");
    assert_eq!(link["branch"], sub["parent"], "{graph:#}");
    let parent = tree.iter().find(|b| b["name"] == sub["parent"]).unwrap();
    assert_eq!(
        parent["subagents"][0]["subagent_branch"], "agent-1",
        "{graph:#}"
    );
    let text = t.run(&["log", session, "--graph"]).ok();
    assert!(text.contains("subagent started by"), "{text}");
    let get = t
        .run(&["session", "get", session, "--branch", "agent-1", "--json"])
        .json();
    assert_eq!(get["branch"]["subagent"], link, "{get:#}");
    let main = t
        .run(&[
            "session",
            "get",
            session,
            "--branch",
            parent["name"].as_str().unwrap(),
            "--json",
        ])
        .json();
    let starter: Vec<&Value> = main["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| !n["subagents"].is_null())
        .collect();
    assert_eq!(starter.len(), 1, "{main:#}");
    assert_eq!(starter[0]["hash"], link["started_by"], "{main:#}");
    assert_eq!(starter[0]["subagents"], json!(["agent-1"]), "{main:#}");
    link
}

#[test]
fn claude_code_subagent_through_the_proxy_is_a_timeline_linked_to_its_call() {
    let Some(claude) = node_tool("claude") else {
        return;
    };
    let up = Upstream::start(agent_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    let live = proxy(&t, &["--upstream", &up.url]);
    let out = claude_code(&claude, &proj, &home, format!("http://{}", live.addr))
        .args(["-p", "please delegate this", "--allowedTools", "Agent"])
        .output()
        .unwrap();
    ok(out, "claude -p through the proxy");
    assert!(live.stop().success());
    let calls = up.calls.lock().unwrap().clone();
    assert!(
        calls.iter().any(
            |(_, b)| b["messages"].to_string().contains("list the files please")
                && !b["messages"].to_string().contains("please delegate")
        ),
        "the subagent called the model"
    );
    // One session for the conversation; the subagent is not one of its own.
    let sessions = proxy_sessions(&t);
    let main: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["title"] == "please delegate this")
        .collect();
    assert_eq!(main.len(), 1, "{sessions:?}");
    assert!(
        !sessions
            .iter()
            .any(|s| s["title"] == "list the files please"),
        "no unlinked session for the subagent: {sessions:?}"
    );
    let id = main[0]["id"].as_str().unwrap().to_owned();
    let link = subagent_link(&t, &id);
    assert_eq!(link["tool"], "Agent", "{link}");
    assert!(
        link["tool_call_id"].as_str().unwrap().starts_with("toolu_"),
        "{link}"
    );
    assert_eq!(link["branch"], "main", "{link}");
    // Its calls are on its timeline, not interleaved on main.
    let invokes = |branch: &str| -> Vec<String> {
        let v = t
            .run(&["session", "get", &id, "--branch", branch, "--json"])
            .json();
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "invoke")
            .map(|n| n["payload"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let on_main = invokes("main");
    assert!(
        !on_main.iter().any(|p| p.contains("list the files please")),
        "{on_main:?}"
    );
    let on_sub = invokes("agent-1");
    assert!(
        on_sub.iter().any(|p| p.contains("list the files please")),
        "{on_sub:?}"
    );
}

/// The proxy's sessions (agent `proxy`), as `session list --json` gives them.
pub(crate) fn proxy_sessions(t: &TestEnv) -> Vec<Value> {
    let v = t.run(&["session", "list", "--json"]).json();
    let list = v.get("sessions").cloned().unwrap_or(v);
    list.as_array()
        .unwrap()
        .iter()
        .filter(|s| s["agent"] == "proxy")
        .cloned()
        .collect()
}

#[test]
fn claude_code_through_the_proxy_is_one_titled_session_and_replays_offline() {
    let Some(claude) = node_tool("claude") else {
        return;
    };
    let up = Upstream::start(agent_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let proj = t.home().join("proj");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    let run = |base: &str, args: &[&str]| {
        claude_code(&claude, &proj, &home, base)
            .args(args)
            .output()
            .unwrap()
    };
    let live = proxy(&t, &["--upstream", &up.url]);
    let base = format!("http://{}", live.addr);
    let sid = "7c1d2e3f-4a5b-4c6d-8e7f-901a2b3c4d5e";
    let first = ok(
        run(
            &base,
            &["-p", "--session-id", sid, "what is in this folder?"],
        ),
        "claude -p through the proxy",
    );
    assert!(first.contains("answer"), "{first}");
    let second = ok(
        run(&base, &["-p", "--resume", sid, "and after that?"]),
        "claude --resume through the proxy",
    );
    assert!(live.stop().success());
    let sessions = proxy_sessions(&t);
    let titled: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["title"] == "what is in this folder?")
        .collect();
    assert_eq!(
        titled.len(),
        1,
        "one session for the conversation: {sessions:?}"
    );
    let id = titled[0]["id"].as_str().unwrap().to_owned();
    let log = t.run(&["log", &id]).ok();
    assert!(
        log.contains("and after that?"),
        "the resumed turn continues it: {log}"
    );
    assert!(!sessions.iter().any(|s| {
        s["title"]
            .as_str()
            .is_some_and(|x| x.contains("<system-reminder>"))
    }));

    // Replayed with the upstream gone: the same answers.
    let calls = up.calls.lock().unwrap().len();
    drop(up);
    let replay = proxy(&t, &["--replay", &id]);
    let base = format!("http://{}", replay.addr);
    let again = ok(
        run(
            &base,
            &[
                "-p",
                "--session-id",
                "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a",
                "what is in this folder?",
            ],
        ),
        "claude -p against the replay",
    );
    assert_eq!(again, first, "{calls} calls recorded");
    let _ = second;
    assert!(replay.stop().success());
}

#[test]
fn codex_through_the_proxy_is_one_titled_session_and_replays_offline() {
    let Some(codex) = node_tool("codex") else {
        return;
    };
    let up = Upstream::start(agent_model);
    let t = TestEnv::new();
    let home = t.home().join("agent-home");
    let codex_home = t.home().join("codex-home");
    let proj = t.home().join("proj");
    for d in [&home, &codex_home, &proj] {
        std::fs::create_dir_all(d).unwrap();
    }
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
    let run = |args: &[&str]| {
        Command::new(&codex)
            .current_dir(&proj)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("CODEX_HOME", &codex_home)
            .env("SCRIPTED_KEY", "x")
            .args(args)
            .output()
            .unwrap()
    };
    let live = proxy(&t, &["--upstream", &up.url]);
    configure(&format!("http://{}", live.addr));
    let first = ok(
        run(&["exec", "--skip-git-repo-check", "hello through convo"]),
        "codex exec through the proxy",
    );
    assert!(first.contains("answer"), "{first}");
    assert!(live.stop().success());
    let sessions = proxy_sessions(&t);
    let titled: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["title"] == "hello through convo")
        .collect();
    assert_eq!(
        titled.len(),
        1,
        "one session for the conversation: {sessions:?}"
    );
    let id = titled[0]["id"].as_str().unwrap().to_owned();
    assert!(!sessions.iter().any(|s| {
        s["title"]
            .as_str()
            .is_some_and(|x| x.contains("environment_context"))
    }));

    // Replayed with the upstream gone: the same answer.
    drop(up);
    let replay = proxy(&t, &["--replay", &id]);
    configure(&format!("http://{}", replay.addr));
    let again = ok(
        run(&["exec", "--skip-git-repo-check", "hello through convo"]),
        "codex exec against the replay",
    );
    assert_eq!(again, first);
    assert!(replay.stop().success());
}

/// `convo import` of a folder of many transcripts puts them in by groups of
/// files per transaction; a bad file among them (a line that is not UTF-8)
/// still fails alone, named, and every other file goes in, its session
/// whole and given back byte for byte; a second run skips what went in and
/// reports the bad file again.
#[test]
fn import_of_many_files_goes_in_by_groups_and_a_bad_file_fails_alone() {
    let t = TestEnv::new();
    let dir = t.home().join("projects").join("-p");
    std::fs::create_dir_all(&dir).unwrap();
    let file = |n: u32| -> Vec<u8> {
        let sid = format!("00000000-0000-4000-8000-{n:012}");
        let mut out = String::new();
        let mut parent: Option<String> = None;
        for i in 0..3 {
            let (q, a) = (
                format!("{n:08}-0000-4000-8000-{:012}", 2 * i),
                format!("{n:08}-0000-4000-8000-{:012}", 2 * i + 1),
            );
            out += &json!({"parentUuid": parent, "isSidechain": false, "type": "user",
                "message": {"role": "user", "content": format!("question {i} of {n}")}, "uuid": q,
                "timestamp": "2026-11-24T15:53:08.139Z", "sessionId": sid})
            .to_string();
            out.push('\n');
            out += &json!({"parentUuid": q, "isSidechain": false, "type": "assistant",
                "message": {"id": format!("msg_{n}_{i}"), "role": "assistant", "model": "m",
                            "content": [{"type": "text", "text": format!("answer {i}")}]},
                "uuid": a, "timestamp": "2026-11-24T15:53:09.139Z", "sessionId": sid})
            .to_string();
            out.push('\n');
            parent = Some(a);
        }
        out.into_bytes()
    };
    let n = 40;
    for i in 0..n {
        let mut bytes = file(i);
        if i == 21 {
            bytes.extend_from_slice(b"{\"type\":\"summary\",\"summary\":\"\xff\"}\n");
        }
        std::fs::write(dir.join(format!("{i:04}.jsonl")), bytes).unwrap();
    }
    let folder = t.home().join("projects");
    let r = t.run(&["import", folder.to_str().unwrap(), "--json"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    let v: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(
        v["created"].as_array().map(Vec::len),
        Some(n as usize - 1),
        "{v}"
    );
    let failed = v["failed"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{v}");
    assert!(
        failed[0]["file"].as_str().unwrap().ends_with("0021.jsonl"),
        "{v}"
    );
    assert!(
        failed[0]["error"].as_str().unwrap().contains("UTF-8"),
        "{v}"
    );
    assert_eq!(v["nodes"], 6 * (n - 1), "{v}");
    let again = t.run(&["import", folder.to_str().unwrap(), "--json"]);
    assert_eq!(again.code(), 1);
    let again: Value = serde_json::from_str(&again.stdout()).unwrap();
    assert_eq!(again["unchanged"], n - 1, "{again}");
    assert_eq!(again["failed"].as_array().map(Vec::len), Some(1));
    // One of them back, byte for byte.
    let id = v["created"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["file"].as_str().unwrap().ends_with("0030.jsonl"))
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = t.home().join("back.jsonl");
    t.run(&[
        "export",
        &id,
        "--format",
        "claude-code",
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    assert_eq!(std::fs::read(&out).unwrap(), file(30));
    t.run(&["verify"]).ok();
}
