//! Live calls through the proxy to the scripted upstream.

use crate::common::{Server, all_bytes, contains};
use crate::upstream::Upstream;
use convo_core::{BranchName, Kind};
use convo_proxy::ProxyConfig;
use convo_store::TimelineNode;
use convo_testutil::Backend;
use serde_json::{Value, json};

const KEY: &str = "sk-test-SECRET-9f8e7d6c5b4a39281706";

fn cfg(up: &Upstream) -> ProxyConfig {
    let mut c = ProxyConfig::new(Some(up.url.clone()));
    c.anthropic_upstream = Some(up.url.trim_end_matches("/v1").to_owned());
    c
}

async fn post(url: &str, body: Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new().post(url).json(&body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

fn timeline(srv: &Server, session: &str, branch: &str) -> Vec<TimelineNode> {
    // The sync store (PostgreSQL's client especially) stays off the runtime.
    crate::common::off_rt(|| {
        let mut store = srv.store();
        let s = store.find_session(session).unwrap();
        store
            .timeline(&s.id, &BranchName::new(branch).unwrap())
            .unwrap()
    })
}

/// Every payload and diagnostics byte in the store, through the store
/// (works on both backends).
fn store_bytes(srv: &Server) -> Vec<u8> {
    crate::common::off_rt(|| {
        let mut store = srv.store();
        let mut out = Vec::new();
        for n in store.follow_with_payloads(0, 100_000).unwrap() {
            out.extend_from_slice(&n.payload);
            out.extend_from_slice(n.stored.node.diagnostics.to_value().to_string().as_bytes());
            out.extend_from_slice(n.stored.node.from.as_bytes());
            out.extend_from_slice(n.stored.node.to.as_bytes());
        }
        for s in store.sessions().unwrap() {
            out.extend_from_slice(s.title.unwrap_or_default().as_bytes());
        }
        out
    })
}

fn t_first_response(srv: &Server) -> TimelineNode {
    timeline(srv, "paris-run", "main").swap_remove(2)
}

fn diag(n: &TimelineNode) -> Value {
    n.stored.node.diagnostics.to_value()
}

fn kinds(t: &[TimelineNode]) -> Vec<Kind> {
    t.iter().map(|n| n.stored.node.kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_are_passed_through_and_recorded_as_turns_without_the_key() {
    chat_completions_case(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_completions_on_postgresql() {
    chat_completions_case(Backend::Postgres).await;
}

async fn chat_completions_case(backend: Backend) {
    let up = Upstream::start().await;
    let Some((srv, store)) = Server::on(cfg(&up), backend).await else {
        return;
    };
    let base = format!("{}/s/paris-run/main/v1", srv.url);
    let auth = format!("Bearer {KEY}");

    // Non-streamed: the upstream's bytes, recorded as invoke/request/response/complete.
    let body = json!({"model": "m1", "messages": [{"role": "user", "content": "hi"}]});
    let res = post(
        &format!("{base}/chat/completions"),
        body.clone(),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-convo-node"));
    let v: Value = res.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hi");
    let (h, _) = up.seen.last();
    assert_eq!(
        h["authorization"],
        auth.as_str(),
        "the client's key reaches the upstream"
    );

    // Streamed, the client not asking for usage: chunks pass through, the
    // usage chunk the proxy asked for is not sent on, [DONE] ends it.
    let body2 = json!({"model": "m1", "stream": true, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "echo: hi"},
        {"role": "user", "content": "again"}]});
    let res = post(
        &format!("{base}/chat/completions"),
        body2,
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    assert!(text.starts_with(": PROCESSING\n\n"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert!(
        !text.contains("total_tokens"),
        "usage chunk stripped: {text}"
    );
    assert!(text.contains("\"content\":\"echo:\""), "{text}");
    let (_, sent) = up.seen.last();
    assert_eq!(sent["stream_options"]["include_usage"], true);

    // A tool call streamed as deltas.
    let body3 = json!({"model": "m1", "stream": true, "stream_options": {"include_usage": true},
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}],
        "messages": [{"role": "user", "content": "weather?"}]});
    let text = post(
        &format!("{base}/chat/completions"),
        body3,
        &[("authorization", &auth)],
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(text.contains("total_tokens"), "asked for usage: kept");

    // An upstream error reaches the client as sent and is recorded.
    let res = post(
        &format!("{base}/chat/completions"),
        json!({"model": "rate-limited", "messages": [{"role": "user", "content": "x"}]}),
        &[("authorization", &auth)],
    )
    .await;
    assert_eq!(res.status(), 429);
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(
        res.json::<Value>().await.unwrap()["error"]["message"],
        "slow down"
    );

    let t = timeline(&srv, "paris-run", "main");
    use Kind::*;
    // The 429's turn stays open for the SDK's retry (see thread.rs).
    let mut turns = [Invoke, Request, Response, Complete].repeat(4);
    turns.pop();
    assert_eq!(kinds(&t), turns);
    assert_eq!(t[0].payload, b"hi");
    assert_eq!(t[1].payload, serde_json::to_vec(&body).unwrap());
    assert_eq!(t[3].payload, b"echo: hi");
    let d = diag(&t[2]);
    assert_eq!(d["status"], 200);
    assert_eq!(d["usage"]["total_tokens"], 8);
    assert_eq!(d["upstream_request_id"], "req_scripted");
    assert_eq!(d["streamed"], false);
    assert!(d["latency_ms"].as_f64().unwrap() >= 0.0);
    // The stream: raw bytes kept (usage chunk included), usage recorded,
    // the answer assembled, chunks timed.
    assert_eq!(t[4].payload, b"again");
    let d = diag(&t[6]);
    assert_eq!(d["streamed"], true);
    assert_eq!(d["usage"]["total_tokens"], 8);
    assert!(d["chunks"].as_array().unwrap().len() >= 5);
    assert!(d["ttft_ms"].as_f64().is_some());
    assert!(contains(&t[6].payload, b"total_tokens"));
    assert_eq!(t[7].payload, b"echo: again");
    assert_eq!(
        diag(&t[5])["upstream_changes"]["stream_options.include_usage"],
        true
    );
    // The tool call, assembled from its deltas.
    let call: Value = serde_json::from_slice(&t[11].payload).unwrap();
    assert_eq!(
        call["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(diag(&t[14])["status"], 429);
    assert!(diag(&t[14])["awaiting_retry"].is_string());

    // No byte of the key anywhere in the store.
    drop(t);
    assert!(!contains(&store_bytes(&srv), KEY.as_bytes()));
    assert!(!contains(&store_bytes(&srv), b"9f8e7d6c5b4a"));
    // Nor of the cookie the upstream set; the rate-limit headers are kept.
    assert!(!contains(&store_bytes(&srv), b"sk-cookie"));
    let d = diag(&t_first_response(&srv));
    assert_eq!(d["headers"]["x-ratelimit-remaining-requests"], "99");
    assert_eq!(d["headers"]["x-ratelimit-reset-tokens"], "6ms");
    assert!(d["headers"].get("set-cookie").is_none());
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    // Nor in the git projection (every object, uncompressed).
    let git = crate::common::git_projection_bytes(&store_url, dir.path());
    assert!(
        contains(&git, b"echo: again"),
        "the projection holds the answers"
    );
    assert!(
        !contains(&git, KEY.as_bytes()),
        "the key reached the git projection"
    );
    assert!(!contains(&git, b"9f8e7d6c5b4a"));
    assert!(!contains(&git, b"sk-cookie"));
    assert!(
        !contains(&all_bytes(dir.path()), KEY.as_bytes()),
        "the key reached the store"
    );
    assert!(!contains(&all_bytes(dir.path()), b"9f8e7d6c5b4a"));
    up.stop().await;
    crate::common::off_rt(move || drop(store));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_messages_models_embeddings_and_headers_naming_the_session() {
    let up = Upstream::start().await;
    let srv = Server::start(cfg(&up)).await;
    let h = [
        ("x-api-key", KEY),
        ("anthropic-version", "2023-06-01"),
        ("x-convo-session", "claude-run"),
    ];
    let url = format!("{}/v1/messages", srv.url);
    let res = post(
        &url,
        json!({"model": "claude", "max_tokens": 10, "system": "be brief",
        "messages": [{"role": "user", "content": "hello"}]}),
        &h,
    )
    .await;
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.json::<Value>().await.unwrap()["content"][0]["text"],
        "echo: hello"
    );
    let text = post(&url, json!({"model": "claude", "max_tokens": 10, "stream": true,
        "tools": [{"name": "weather", "input_schema": {}}],
        "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "echo: hello"},
                     {"role": "user", "content": "weather?"}]}), &h)
        .await
        .text()
        .await
        .unwrap();
    assert!(text.contains("event: message_stop"));
    let (seen, _) = up.seen.last();
    assert_eq!(seen["x-api-key"], KEY);
    let models = reqwest::Client::new()
        .get(format!("{}/v1/models", srv.url))
        .header("x-convo-session", "claude-run")
        .send()
        .await
        .unwrap();
    assert_eq!(
        models.json::<Value>().await.unwrap()["data"][0]["id"],
        "scripted"
    );
    let emb = post(
        &format!("{}/v1/embeddings", srv.url),
        json!({"model": "e", "input": "x"}),
        &[("x-convo-session", "claude-run")],
    )
    .await;
    assert_eq!(emb.status(), 200);

    let t = timeline(&srv, "claude-run", "main");
    assert_eq!(t.len(), 16);
    assert_eq!(t[0].payload, b"hello");
    assert_eq!(t[3].payload, b"echo: hello");
    assert_eq!(diag(&t[1])["headers"]["anthropic-version"], "2023-06-01");
    assert!(diag(&t[1])["headers"].get("x-api-key").is_none());
    assert_eq!(diag(&t[2])["upstream_request_id"], "req_anthropic");
    let d = diag(&t[6]);
    assert_eq!(d["usage"]["output_tokens"], 3);
    assert!(d.get("assembled").is_none(), "no copy of the answer: {d}");
    let assembled = convo_llm::api::assemble(convo_llm::api::Api::Messages, &t[6].payload).unwrap();
    assert_eq!(assembled["content"][0]["input"]["city"], "Paris");
    let answer: Value = serde_json::from_slice(&t[7].payload).unwrap();
    assert_eq!(answer["content"][0]["type"], "tool_use");
    assert_eq!(t[8].payload, b"GET /v1/models");
    assert_eq!(diag(&t[9])["api"], "models");
    let dir = srv.stop().await;
    assert!(!contains(&all_bytes(dir.path()), KEY.as_bytes()));
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnamed_calls_thread_by_content_and_edits_fork() {
    let up = Upstream::start().await;
    let srv = Server::start(cfg(&up)).await;
    let url = format!("{}/v1/chat/completions", srv.url);
    let m = |msgs: Value| json!({"model": "m", "messages": msgs});
    post(
        &url,
        m(json!([{"role": "user", "content": "plan a trip"}])),
        &[],
    )
    .await;
    // The SDK sends the answer back with nulls dropped: same conversation.
    post(
        &url,
        m(json!([{"role": "user", "content": "plan a trip"},
        {"role": "assistant", "content": "echo: plan a trip"},
        {"role": "user", "content": "to Paris"}])),
        &[],
    )
    .await;
    // The user edits the second message: a fork after the first turn.
    post(
        &url,
        m(json!([{"role": "user", "content": "plan a trip"},
        {"role": "assistant", "content": "echo: plan a trip"},
        {"role": "user", "content": "to Rome"}])),
        &[],
    )
    .await;
    // Another conversation: another session.
    post(
        &url,
        m(json!([{"role": "user", "content": "unrelated"}])),
        &[],
    )
    .await;

    let sessions = crate::common::off_rt(|| srv.store().sessions().unwrap());
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[0].title.as_deref(), Some("plan a trip"));
    let main = timeline(&srv, "plan a trip", "main");
    assert_eq!(main.len(), 8);
    assert_eq!(main[4].payload, b"to Paris");
    let edit = timeline(&srv, "plan a trip", "edit-1");
    assert_eq!(kinds(&edit)[4], Kind::Fork);
    assert_eq!(edit[5].payload, b"to Rome");
    assert_eq!(
        edit[3].stored.hash, main[3].stored.hash,
        "shares the first turn"
    );
    srv.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstreams_and_cut_streams_are_clear_and_recorded() {
    let up = Upstream::start().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let srv = Server::start(ProxyConfig::new(Some(format!("http://{dead}/v1")))).await;
    let res = post(
        &format!("{}/s/down/main/v1/chat/completions", srv.url),
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        &[],
    )
    .await;
    assert_eq!(res.status(), 502);
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["error"]["code"], "upstream_unreachable");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unreachable")
    );
    let t = timeline(&srv, "down", "main");
    assert_eq!(diag(&t[2])["status"], 502);
    assert!(diag(&t[2])["error"].as_str().is_some());
    srv.stop().await;

    let srv = Server::start(cfg(&up)).await;
    let res = post(
        &format!("{}/s/cut/main/v1/chat/completions", srv.url),
        json!({"model": "cut", "stream": true, "messages": [{"role": "user", "content": "x"}]}),
        &[],
    )
    .await;
    assert_eq!(res.status(), 200);
    assert!(res.text().await.is_err(), "the client sees the cut");
    // The recording lands just after the cut.
    let mut t = Vec::new();
    for _ in 0..200 {
        let found = crate::common::off_rt(|| {
            let mut store = srv.store();
            let s = store.find_session("cut").ok()?;
            Some(store.timeline(&s.id, &BranchName::main()).unwrap())
        });
        if let Some(found) = found.filter(|f| !f.is_empty()) {
            t = found;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(t.len(), 4);
    assert!(
        diag(&t[2])["partial"]
            .as_str()
            .unwrap()
            .contains("cut the stream")
    );
    srv.stop().await;
    up.stop().await;
}
