//! No credential is stored, whatever carries it: a model call through
//! `convo proxy` and an MCP call through `convo mcp proxy`, each with keys
//! in headers, in the query string and inside other header values, both
//! against a scripted upstream. Every file under the home (the store, its
//! write-ahead log, logs) is searched for every key afterwards.

use crate::common::TestEnv;
use crate::serve_util::{Server, http};
use crate::test_harness::Upstream;
use serde_json::{Value, json};

const KEYS: &[&str] = &[
    "sk-proj-AUTHZ0123456789abcdef",
    "XAPIKEY-0123456789abcdefghij",
    "AIzaGOOGKEY0123456789abcdef",
    "QUERYKEY-0123456789abcdefgh",
    "sk-INUSERAGENT0123456789",
    "COOKIESECRET0123456789abcd",
    "MCPBEARER-0123456789abcdefgh",
    "MCPQUERYTOKEN-0123456789abcd",
];

fn answer(_: usize, path: &str, req: &Value) -> Value {
    if path.starts_with("/v1/chat") {
        return json!({"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}});
    }
    json!({"jsonrpc": "2.0", "id": req["id"], "result": {"protocolVersion": "2025-11-25",
        "capabilities": {}, "serverInfo": {"name": "scripted", "version": "1"}}})
}

fn files_under(dir: &std::path::Path, out: &mut Vec<(String, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p.display().to_string(), b));
        }
    }
}

#[test]
fn no_key_of_a_proxied_model_call_or_mcp_call_is_stored() {
    let t = TestEnv::new();
    let upstream = Upstream::start(answer);
    let proxy = Server::launch(
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
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});
    let bearer = format!("Bearer {}", KEYS[0]);
    let agent = format!("app/1.0 (key {}) python", KEYS[4]);
    let cookie = format!("session={}", KEYS[5]);
    let path = format!(
        "/s/creds/main/v1/chat/completions?api-version=1&key={}",
        KEYS[3]
    );
    let r = proxy.req(
        "POST",
        &path,
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &bearer),
            ("x-api-key", KEYS[1]),
            ("x-goog-api-key", KEYS[2]),
            ("User-Agent", &agent),
            ("Cookie", &cookie),
        ],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "fine");
    proxy.stop();

    let mcp_url = format!(
        "{}/mcp?token={}",
        upstream.url.trim_end_matches("/v1"),
        KEYS[7]
    );
    let relay = Server::launch(
        &t,
        &[
            "mcp",
            "proxy",
            "--upstream",
            &mcp_url,
            "--listen",
            "127.0.0.1:0",
            "--session",
            "creds-mcp",
        ],
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let mcp_bearer = format!("Bearer {}", KEYS[6]);
    let r = http(
        &relay.addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", &mcp_bearer),
        ],
        init.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "scripted");
    relay.stop();

    // Both calls reached the upstream with their keys and were recorded.
    assert_eq!(upstream.calls.lock().unwrap().len(), 2);
    let log = t.run(&["log", "creds", "--json"]).ok();
    assert!(log.contains("fine"), "{log}");
    let log = t.run(&["log", "creds-mcp", "--json"]).ok();
    assert!(log.contains("initialize"), "{log}");

    let mut files = Vec::new();
    files_under(t.home(), &mut files);
    assert!(files.iter().any(|(p, _)| p.ends_with("convo.db")));
    for key in KEYS {
        let holding: Vec<&str> = files
            .iter()
            .filter(|(_, b)| b.windows(key.len()).any(|w| w == key.as_bytes()))
            .map(|(p, _)| p.as_str())
            .collect();
        assert!(holding.is_empty(), "{key} stored in {holding:?}");
    }
}
