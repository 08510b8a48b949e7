//! Threading that follows the conversation, not the bytes; nothing
//! answered unrecorded.

use crate::common::{Server, off_rt};
use crate::upstream::Upstream;
use convo_core::{BranchName, Kind};
use convo_proxy::ProxyConfig;
use convo_store::TimelineNode;
use convo_testutil::Backend;
use serde_json::{Value, json};

async fn post(url: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new().post(url).json(body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

fn timeline(srv: &Server, session: &str, branch: &str) -> Vec<TimelineNode> {
    off_rt(|| {
        let mut s = srv.store();
        let id = s.find_session(session).unwrap().id;
        s.timeline(&id, &BranchName::new(branch).unwrap()).unwrap()
    })
}

fn titles(srv: &Server) -> Vec<String> {
    let mut t: Vec<String> = off_rt(|| srv.store().sessions().unwrap())
        .into_iter()
        .map(|s| s.title.unwrap_or_default())
        .collect();
    t.sort();
    t
}

fn diag(n: &TimelineNode) -> Value {
    n.stored.node.diagnostics.to_value()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_loops_chains_retries_and_side_calls_stay_in_their_conversation() {
    threading_case(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threading_on_postgresql() {
    threading_case(Backend::Postgres).await;
}

async fn threading_case(backend: Backend) {
    let up = Upstream::start().await;
    let cfg = ProxyConfig::new(Some(up.url.clone()));
    let Some((srv, store)) = Server::on(cfg, backend).await else {
        return;
    };
    let chat = format!("{}/v1/chat/completions", srv.url);

    // A tool loop whose client re-serializes the arguments, sends the
    // user's text as parts and the assistant's content as "".
    let tools = json!([{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]);
    let ask = json!({"role": "user", "content": "weather in Paris?"});
    let first: Value = post(
        &chat,
        &json!({"model": "m", "tools": tools, "messages": [ask]}),
        &[],
    )
    .await
    .json()
    .await
    .unwrap();
    let call = &first["choices"][0]["message"]["tool_calls"][0];
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    let resent = json!({"role": "assistant", "content": "", "tool_calls": [{"id": call["id"], "type": "function",
        "function": {"name": "weather", "arguments": serde_json::to_string_pretty(&args).unwrap()}}]});
    let loop_msgs = json!([
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        resent,
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]);
    let res = post(
        &chat,
        &json!({"model": "m", "tools": tools, "messages": loop_msgs}),
        &[],
    )
    .await;
    assert_eq!(res.status(), 200);

    // A Responses API chain by previous_response_id.
    let responses = format!("{}/v1/responses", srv.url);
    let mut prev = Value::Null;
    for input in ["first step", "second step"] {
        let r: Value = post(
            &responses,
            &json!({"model": "m", "input": input, "previous_response_id": prev}),
            &[],
        )
        .await
        .json()
        .await
        .unwrap();
        prev = r["id"].clone();
    }

    // A 429 and the SDK's retry: one turn, both attempts recorded.
    let flaky = json!({"model": "flaky", "messages": [{"role": "user", "content": "retry me"}]});
    assert_eq!(post(&chat, &flaky, &[]).await.status(), 429);
    let retried = post(&chat, &flaky, &[("x-stainless-retry-count", "1")]).await;
    assert_eq!(retried.status(), 200);

    // Calls that are not a conversation: one session for the run.
    post(
        &format!("{}/v1/embeddings", srv.url),
        &json!({"model": "e", "input": "x"}),
        &[],
    )
    .await;
    reqwest::get(format!("{}/v1/models", srv.url))
        .await
        .unwrap();
    post(
        &format!("{}/v1/embeddings", srv.url),
        &json!({"model": "e", "input": "y"}),
        &[],
    )
    .await;

    // Claude Code's first message starts with a system reminder.
    post(
        &chat,
        &json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nThe date is today.\n</system-reminder>"},
            {"type": "text", "text": "Fix the failing test\nin src/"}]}]}),
        &[],
    )
    .await;

    let t = titles(&srv);
    assert_eq!(t.len(), 5, "{t:?}");
    assert!(
        t.iter().any(|x| x.starts_with("calls (proxy run ")),
        "{t:?}"
    );
    assert!(t.contains(&"Fix the failing test".to_owned()), "{t:?}");
    assert_eq!(timeline(&srv, "weather in Paris?", "main").len(), 8);
    let calls = t.iter().find(|x| x.starts_with("calls")).unwrap();
    assert_eq!(timeline(&srv, calls, "main").len(), 12);
    let retry = timeline(&srv, "retry me", "main");
    let kinds: Vec<Kind> = retry.iter().map(|n| n.stored.node.kind).collect();
    assert_eq!(
        kinds,
        [
            Kind::Invoke,
            Kind::Request,
            Kind::Response,
            Kind::Request,
            Kind::Response,
            Kind::Complete
        ]
    );
    assert_eq!(diag(&retry[2])["status"], 429);
    assert!(diag(&retry[2])["awaiting_retry"].is_string());
    assert_eq!(diag(&retry[5])["status"], 200);
    assert_eq!(retry[5].payload, b"echo: retry me");

    // After a restart, the chain continues from the store's record.
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    let srv = Server::start_on(ProxyConfig::new(Some(up.url.clone())), dir, store_url).await;
    let chat = format!("{}/v1/chat/completions", srv.url);
    let r = post(
        &format!("{}/v1/responses", srv.url),
        &json!({"model": "m", "input": "third step", "previous_response_id": prev}),
        &[],
    )
    .await;
    assert_eq!(r.status(), 200);
    let chain = timeline(&srv, "first step", "main");
    assert_eq!(chain.len(), 12, "three calls, one timeline");
    assert_eq!(chain[8].payload, b"third step");
    assert_eq!(titles(&srv).len(), 5);
    // The tool loop continues after the restart too (its `thread` key).
    let mut loop_msgs = loop_msgs.as_array().unwrap().clone();
    loop_msgs.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
        "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}));
    loop_msgs.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "still sunny"}));
    post(
        &chat,
        &json!({"model": "m", "tools": tools, "messages": loop_msgs}),
        &[],
    )
    .await;
    assert_eq!(timeline(&srv, "weather in Paris?", "main").len(), 12);
    assert_eq!(titles(&srv).len(), 5);
    srv.stop().await;
    up.stop().await;
    crate::common::off_rt(move || drop(store));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_branch_is_created_and_a_failure_to_record_is_visible() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let m = |text: &str| json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let at = |s: &str, b: &str| format!("{}/s/{s}/{b}/v1/chat/completions", srv.url);
    assert_eq!(
        post(&at("book", "main"), &m("one"), &[]).await.status(),
        200
    );
    // A branch the session does not have: forked from its head.
    assert_eq!(
        post(&at("book", "draft"), &m("two"), &[]).await.status(),
        200
    );
    let draft = timeline(&srv, "book", "draft");
    assert_eq!(draft.len(), 9);
    assert_eq!(draft[4].stored.node.kind, Kind::Fork);
    assert_eq!(draft[5].payload, b"two");
    // The same named by headers.
    let h = [("x-convo-session", "book"), ("x-convo-branch", "side")];
    let res = post(&format!("{}/v1/chat/completions", srv.url), &m("three"), &h).await;
    assert_eq!(res.status(), 200);
    assert_eq!(timeline(&srv, "book", "side")[5].payload, b"three");
    // A new session and a branch: the turn on main, the branch from it.
    assert_eq!(
        post(&at("fresh", "dev"), &m("four"), &[]).await.status(),
        200
    );
    assert_eq!(timeline(&srv, "fresh", "main").len(), 4);
    assert_eq!(timeline(&srv, "fresh", "dev").len(), 5);
    // A branch name that cannot be: refused before the upstream.
    let before = up.seen.calls.lock().unwrap().len();
    let res = post(&at("book", "a~b"), &m("five"), &[]).await;
    assert_eq!(res.status(), 400);
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_branch");
    assert_eq!(up.seen.calls.lock().unwrap().len(), before);

    // The store refuses (an ambiguous session name): the answer passes,
    // says so, and every later answer carries the count.
    off_rt(|| {
        let mut s = srv.store();
        s.transaction(|l| l.new_session("proxy", Some("dup"), 1))
            .unwrap();
        s.transaction(|l| l.new_session("proxy", Some("dup"), 1))
            .unwrap();
    });
    let res = post(&at("dup", "main"), &m("six"), &[]).await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-convo-error"));
    assert_eq!(res.headers()["x-convo-recording-failures"], "1");
    let res = post(&at("book", "main"), &m("seven"), &[]).await;
    assert_eq!(res.headers()["x-convo-recording-failures"], "1");
    srv.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_rejects_stream_options_gets_the_call_as_sent() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let url = format!("{}/s/strict/main/v1/chat/completions", srv.url);
    let body =
        json!({"model": "strict", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..2 {
        let res = post(&url, &body, &[]).await;
        assert_eq!(res.status(), 200);
        let text = res.text().await.unwrap();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(!text.contains("usage"), "{text}");
    }
    // The first call was sent twice (with, then without), the second once.
    let seen: Vec<bool> = up
        .seen
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(_, r)| r.get("stream_options").is_some())
        .collect();
    assert_eq!(seen, [true, false, false]);
    let t = timeline(&srv, "strict", "main");
    assert_eq!(t.len(), 8);
    assert!(diag(&t[1]).get("upstream_changes").is_none());
    assert_eq!(diag(&t[2])["status"], 200);
    srv.stop().await;
    up.stop().await;
}
