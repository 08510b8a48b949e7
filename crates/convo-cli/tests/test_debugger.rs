//! The web view as a debugger: two timelines compared request by request
//! (message by message), harness kv calls shown as state operations, and
//! the pages of `convo test` runs; every new page escapes what it shows.

use crate::common::TestEnv;
use crate::serve_util::Server;
use crate::test_harness::Upstream;
use serde_json::{Value, json};
use std::process::Command;

/// Every tag of a page, lowercased (for handler and script-URL checks).
fn tags(html: &str) -> Vec<String> {
    html.split('<')
        .skip(1)
        .filter_map(|t| t.split_once('>').map(|(tag, _)| tag.to_ascii_lowercase()))
        .collect()
}

/// No payload became markup: the only scripts are the page's own, and no
/// tag holds a handler or a script URL.
fn assert_inert(path: &str, html: &str) {
    let lower = html.to_ascii_lowercase();
    assert_eq!(
        lower.matches("<script").count(),
        lower.matches("<script src=\"/assets/").count(),
        "{path}"
    );
    assert!(!lower.contains("<img"), "{path}");
    for tag in tags(html) {
        for bad in ["onerror", "onload", "onmouseover", "javascript:"] {
            assert!(!tag.contains(bad), "{path}: a tag holds {bad}: {tag}");
        }
    }
}

/// Opens each page of `spec` (see tests/browser/debugger.py) in headless
/// Chromium on `t`'s home: the selectors it expects, no dialog, no payload
/// run, no sideways scrolling on a phone; screenshots kept with the web
/// view's. Skipped (loudly, and never in CI) without Chromium.
fn browse(t: &TestEnv, spec: &Value) {
    let (Some(py), Some(chromium)) = (
        std::env::var_os("CONVO_TEST_PYTHON"),
        std::env::var_os("CONVO_TEST_CHROMIUM"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CONVO_TEST_PYTHON and CONVO_TEST_CHROMIUM (scripts/test-env)"
        );
        eprintln!("skipping the browser part: run scripts/test (it sets up Chromium)");
        return;
    };
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("webview");
    let script =
        convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("tests/browser/debugger.py");
    let out = Command::new(py)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_convo"))
        .arg(chromium)
        .arg(t.home())
        .arg(&shots)
        .arg(spec.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "debugger.py\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The scripted model of the diff test: it answers the last user message.
fn echo_model(n: usize, _path: &str, req: &Value) -> Value {
    let last = req["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0,
        "model": "scripted", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": format!("About {}: noted.", last.len())}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
}

/// Sends one chat call through the proxy with curl; the assistant's message.
fn chat(url: &str, body: &Value) -> Value {
    let out = Command::new("curl")
        .args(["-sS", "--fail", url, "-H", "content-type: application/json"])
        .args([
            "-H",
            "authorization: Bearer x",
            "--data-binary",
            &body.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    reply["choices"][0]["message"].clone()
}

/// A tool an agent declares (long descriptions, as agents' are).
fn tool(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name, "description": "x ".repeat(300),
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}})
}

/// One more call of a conversation through the proxy, an agent's way: the
/// whole history resent with the tools; the answer appended.
fn ask(url: &str, messages: &mut Vec<Value>, text: &str, tools: &[Value], temperature: f64) {
    messages.push(json!({"role": "user", "content": text}));
    let body = json!({"model": "scripted", "temperature": temperature,
        "messages": messages, "tools": tools});
    let answer = chat(url, &body);
    messages.push(answer);
}

/// Two timelines of one conversation (the proxy forks `edit-1` where the
/// second question was asked differently) compared in the web view:
/// request by request, message by message. The unchanged messages and
/// parameters are folded, the changed message is word-diffed, the added
/// tool and the changed parameter listed, and the page stays small.
#[test]
fn the_request_diff_aligns_messages_and_folds_the_same_ones() {
    let up = Upstream::start(echo_model);
    let t = TestEnv::new();
    let live = crate::test_agents::proxy(&t, &["--upstream", &up.url]);
    let url = format!("http://{}/v1/chat/completions", live.addr);
    let tools: Vec<Value> = ["search", "book", "cancel", "weather"].map(tool).to_vec();
    let system =
        json!({"role": "system", "content": "You are a careful travel agent. ".repeat(400)});
    let mut a = vec![system];
    ask(&url, &mut a, "Find me a hotel in Lisbon.", &tools, 0.2);
    let after_first = a.clone();
    ask(&url, &mut a, "Near the river, please.", &tools, 0.2);
    ask(&url, &mut a, "Book it.", &tools, 0.2);
    // After the same first turn, the second question asked differently
    // (the proxy forks there), then a tool added and the temperature
    // changed on the last call.
    let mut b = after_first;
    let hostile = "Near the <img src=x onerror=\"window.__pwned=1\"> castle, please.";
    ask(&url, &mut b, hostile, &tools, 0.2);
    let mut more = tools.clone();
    more.push(tool("lookup"));
    ask(&url, &mut b, "Book it.", &more, 0.7);
    assert!(live.stop().success());
    let sessions = t.run(&["session", "list", "--json"]).json();
    let sessions = sessions.get("sessions").cloned().unwrap_or(sessions);
    let s = sessions[0]["id"].as_str().unwrap().to_owned();
    let branches = t.run(&["branch", "list", &s, "--json"]).json();
    let names: Vec<&str> = branches
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["name"].as_str())
        .collect();
    let fork = names
        .iter()
        .find(|n| **n != "main")
        .copied()
        .unwrap_or_else(|| panic!("a fork: {names:?}"));

    let srv = Server::start(&t, &[]);
    let path = format!("/sessions/{s}/diff?a=main&b={fork}");
    let page = srv.get(&path);
    assert_eq!(page.status, 200);
    let html = page.text();
    assert_inert(&path, &html);
    // Measured for docs/PERFORMANCE.md (3 changed turns, 16 KB requests).
    eprintln!("request diff page: {} bytes", html.len());
    assert!(html.len() < 80 * 1024, "{} bytes", html.len());
    assert!(html.contains("pair changed by-parts"), "{html}");
    assert!(html.contains("unchanged: <bdi>"), "{html}");
    assert!(html.contains("unchanged in <bdi>messages</bdi>"), "{html}");
    // The changed question, word by word, escaped.
    assert!(html.contains("river,</del>"), "{html}");
    assert!(
        html.contains("&lt;img src=x onerror=\"window.__pwned=1\"&gt;"),
        "{html}"
    );
    // The added tool and the changed temperature.
    assert!(html.contains("function lookup"), "{html}");
    assert!(html.contains("<del>0.2</del> → <ins>0.7</ins>"), "{html}");
    // The long system prompt is never shown whole, not even once.
    assert!(
        !html.contains(&"You are a careful travel agent. ".repeat(50)),
        "folded"
    );
    browse(
        &t,
        &json!([
            {"path": path, "shot": "debugger-diff.png",
             "expect": [[".pair.by-parts", 4], [".parts .folded", 4], [".parts .item del", 1],
                        [".parts .item.only-on-B", 1], [".parts .field", 1]],
             "text": [[".parts .item.only-on-B", "function lookup"]]},
            {"path": "/search?q=noted&limit=1", "expect": [["li.hit", 1], ["nav.pager a.page", 1]],
             "text": [["#hits-count", "5 messages"]]},
        ]),
    );
}

/// A harness turn (`convo run`, the todo example agent: a kv get, a kv
/// put, one model call): the kv calls read as what they are (op, key,
/// value, state root), are not counted among the model calls or drawn in
/// the waterfall, and are not offered for a re-run.
#[test]
fn harness_kv_calls_read_as_state_operations() {
    let t = TestEnv::new();
    let up = Upstream::start(crate::test_harness::noted);
    let agent = crate::test_harness::todo_agent();
    t.run(&[
        "run",
        "todo",
        "--input",
        "add <b>milk</b>",
        "--upstream",
        &up.url,
        "--",
        "python3",
        &agent,
    ])
    .ok();
    let tl = t.run(&["session", "get", "todo", "--json"]).json();
    let nodes = tl["nodes"].as_array().unwrap();
    let kv_request = nodes
        .iter()
        .find(|n| n["kind"] == "request" && n["to"] == "kv")
        .unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let srv = Server::start(&t, &[]);
    let html = srv.get("/sessions/todo").text();
    assert_inert("/sessions/todo", &html);
    assert!(
        html.contains("<b id=\"t-calls\">1</b>"),
        "one model call: {html}"
    );
    assert!(html.contains("class=\"node request kv\""), "{html}");
    assert!(html.contains("kv put"), "{html}");
    assert!(html.contains("kv get"), "{html}");
    assert!(html.contains("state root"), "{html}");
    assert!(!html.contains("request 0 bytes"), "{html}");
    assert!(
        html.contains("data-calls=\"1\""),
        "one bar in the waterfall: {html}"
    );
    let rerun = srv
        .get(&format!("/sessions/todo/nodes/{kv_request}/rerun"))
        .text();
    assert!(rerun.contains("Nothing to re-run here"), "{rerun}");
    assert!(!rerun.contains("textarea"), "{rerun}");
    let list = srv.get("/").text();
    assert!(
        !list.contains("<td class=\"num\">3</td>"),
        "kv calls are not model calls: {list}"
    );
    browse(
        &t,
        &json!([{"path": "/sessions/todo", "shot": "debugger-kv.png",
                 "expect": [["article.node.kv .kv", 4], [".waterfall", 1]],
                 "text": [["#t-calls", "1"]]}]),
    );
}

/// `convo test` keeps each run's report in the home, and `convo serve`
/// shows the runs: a passed test, a changed one with its first divergence
/// and its diff, links to the recorded timeline; hostile names escaped; a
/// run name that is not one is 404.
#[test]
fn convo_test_runs_are_kept_and_shown() {
    let up = Upstream::start(echo_model);
    let t = TestEnv::new();
    let live = crate::test_agents::proxy(&t, &["--upstream", &up.url]);
    let url = format!("http://{}/v1/chat/completions", live.addr);
    let body =
        |ask: &str| json!({"model": "scripted", "messages": [{"role": "user", "content": ask}]});
    chat(&url, &body("Plan a trip"));
    assert!(live.stop().success());
    let sessions = t.run(&["session", "list", "--json"]).json();
    let sessions = sessions.get("sessions").cloned().unwrap_or(sessions);
    let s = sessions[0]["id"].as_str().unwrap().to_owned();
    let program = |ask: &str| {
        format!(
            "curl -sS \"$OPENAI_BASE_URL/chat/completions\" -H 'content-type: application/json' --data-binary '{}'",
            body(ask)
        )
    };
    let run = |name: &str, ask: &str| {
        t.run(&["test", &s, "--name", name, "--", "sh", "-c", &program(ask)])
            .code()
    };
    assert_eq!(run("same trip", "Plan a trip"), 0);
    assert_eq!(
        run("<img src=x onerror=window.__pwned=1> trip", "Plan a cruise"),
        1
    );
    let kept: Vec<String> = std::fs::read_dir(t.home().join("test-runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");

    let srv = Server::start(&t, &[]);
    let list = srv.get("/tests");
    assert_eq!(list.status, 200);
    let list = list.text();
    assert_inert("/tests", &list);
    assert_eq!(list.matches("<tr data-run=").count(), 2, "{list}");
    let mut names: Vec<String> = kept
        .iter()
        .map(|k| k.trim_end_matches(".json").to_owned())
        .collect();
    names.sort();
    let changed = srv.get(&format!("/tests/{}", names[1])).text();
    assert_inert("/tests/RUN", &changed);
    assert!(changed.contains("data-status=\"changed\""), "{changed}");
    assert!(changed.contains("First divergence"), "{changed}");
    assert!(changed.contains("replay_miss"), "{changed}");
    assert!(
        changed.contains("cruise"),
        "the diff of the two requests: {changed}"
    );
    assert!(
        changed.contains(&format!("href=\"/sessions/{s}?branch=main\"")),
        "{changed}"
    );
    assert!(
        changed.contains("&lt;img src=x onerror=window.__pwned=1&gt; trip"),
        "{changed}"
    );
    let passed = srv.get(&format!("/tests/{}", names[0])).text();
    assert!(passed.contains("data-status=\"passed\""), "{passed}");
    for bad in ["/tests/nope", "/tests/12345", "/tests/..%2Fconvo.db"] {
        let st = srv.get(bad).status;
        assert!(st == 404 || st == 400, "{bad}: {st}");
    }
    browse(
        &t,
        &json!([
            {"path": "/tests", "expect": [["table.runs tr[data-run]", 2]]},
            {"path": format!("/tests/{}", names[1]), "shot": "debugger-testrun.png",
             "expect": [["article.test[data-status=changed] .divergence pre.difftext", 1],
                        ["a.recorded", 1], [".divergence a.turnlink", 1]],
             "text": [["article.test h2", "trip"]]},
        ]),
    );
}
