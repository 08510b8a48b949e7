//! The official `openai` and `anthropic` Python SDKs, and `curl -N`, as
//! clients of the proxy (the venv comes from scripts/test-env, which
//! scripts/test runs; CONVO_TEST_PYTHON names its python).

use crate::common::{Server, all_bytes, contains};
use crate::upstream::Upstream;
use convo_core::{BranchName, Kind};
use convo_proxy::ProxyConfig;

const KEY: &str = "sk-sdk-SECRET-0a1b2c3d4e5f60718293";

const SCRIPT: &str = r#"
import json, os, openai, anthropic
c = openai.OpenAI()
r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
out = {"plain": r.choices[0].message.content, "usage": r.usage.total_tokens}
msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": r.choices[0].message.content},
        {"role": "user", "content": "stream it"}]
parts = []
for ch in c.chat.completions.create(model="m", messages=msgs, stream=True):
    if ch.choices and ch.choices[0].delta.content:
        parts.append(ch.choices[0].delta.content)
out["streamed"] = "".join(parts)
tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
args = ""
for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "w"}], tools=tools, stream=True):
    for tc in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
        args += tc.function.arguments or ""
out["tool_args"] = args
try:
    openai.OpenAI(max_retries=0).chat.completions.create(model="rate-limited", messages=[{"role": "user", "content": "x"}])
except openai.RateLimitError as e:
    out["error"] = e.status_code
a = anthropic.Anthropic()
m = a.messages.create(model="claude", max_tokens=10, messages=[{"role": "user", "content": "bonjour"}])
out["claude"] = m.content[0].text
with a.messages.stream(model="claude", max_tokens=10, messages=[{"role": "user", "content": "encore"}]) as s:
    out["claude_stream"] = "".join(s.text_stream)
    out["claude_usage"] = s.get_final_message().usage.output_tokens
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_and_curl_record_through_the_proxy() {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test sets it up)");
        return;
    };
    let up = Upstream::start().await;
    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    cfg.anthropic_upstream = Some(up.url.clone());
    let srv = Server::start(cfg).await;
    let openai_base = format!("{}/s/sdk-run/main/v1", srv.url);
    let anthropic_base = format!("{}/s/sdk-run/main", srv.url);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .args(["-c", SCRIPT])
            .env("OPENAI_BASE_URL", openai_base)
            .env("OPENAI_API_KEY", KEY)
            .env("ANTHROPIC_BASE_URL", anthropic_base)
            .env("ANTHROPIC_API_KEY", KEY)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["plain"], "echo: hi");
    assert_eq!(v["usage"], 8);
    assert_eq!(v["streamed"], "echo: stream it");
    assert_eq!(v["tool_args"], "{\"city\":\"Paris\"}");
    assert_eq!(v["error"], 429);
    assert_eq!(v["claude"], "echo: bonjour");
    assert_eq!(v["claude_stream"], "echo: encore");
    assert_eq!(v["claude_usage"], 3);

    // curl -N: the stream as the upstream sent it, the usage chunk removed.
    let url = format!("{}/s/sdk-run/main/v1/chat/completions", srv.url);
    let curl = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sN", "-H", "content-type: application/json", "-d"])
            .arg(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"curl"}]}"#)
            .arg(url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8(curl.stdout).unwrap();
    assert!(
        text.starts_with(": PROCESSING\n\n") && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    assert!(!text.contains("total_tokens"));

    let t = crate::common::off_rt(|| {
        let mut store = srv.store();
        let s = store.find_session("sdk-run").unwrap();
        store.timeline(&s.id, &BranchName::main()).unwrap()
    });
    assert_eq!(t.len(), 7 * 4, "seven calls, each a whole turn");
    assert!(
        t.chunks(4)
            .all(|turn| turn[3].stored.node.kind == Kind::Complete)
    );
    assert_eq!(t[3].payload, b"echo: hi");
    assert_eq!(t[7].payload, b"echo: stream it");
    let dir = srv.stop().await;
    assert!(
        !contains(&all_bytes(dir.path()), KEY.as_bytes()),
        "the key reached the store"
    );
    up.stop().await;
}
