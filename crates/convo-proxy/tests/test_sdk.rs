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
weather = [{"name": "weather", "input_schema": {"type": "object"}}]
with a.messages.stream(model="claude", max_tokens=10, tools=weather,
                       messages=[{"role": "user", "content": "weather?"}]) as s:
    final = s.get_final_message()
    out["claude_tool"] = [final.stop_reason, final.content[0].type, final.content[0].name, final.content[0].input]
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
    assert_eq!(
        v["claude_tool"],
        serde_json::json!(["tool_use", "tool_use", "weather", {"city": "Paris"}])
    );

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
    assert_eq!(t.len(), 8 * 4, "eight calls, each a whole turn");
    // The Anthropic tool use, assembled from its stream.
    let d = t[26].stored.node.diagnostics.to_value();
    assert_eq!(d["assembled"]["content"][0]["input"]["city"], "Paris");
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

/// The Responses API through the official SDK: plain, streamed, chained by
/// `previous_response_id`; then the same program replayed with the
/// upstream stopped gets the same answers and ids.
const RESPONSES: &str = r#"
import json, openai
c = openai.OpenAI(max_retries=0)
r1 = c.responses.create(model="m", input="hi")
out = {"r1": [r1.id, r1.output_text, r1.usage.total_tokens]}
text, done = [], None
for ev in c.responses.create(model="m", input="more", previous_response_id=r1.id, stream=True):
    if ev.type == "response.output_text.delta":
        text.append(ev.delta)
    elif ev.type == "response.completed":
        done = ev.response
out["r2"] = ["".join(text), done.id, done.output_text]
r3 = c.responses.create(model="m", input="last", previous_response_id=done.id)
out["r3"] = [r3.id, r3.output_text]
print(json.dumps(out))
"#;

fn run_python(python: &str, script: &str, base: &str) -> serde_json::Value {
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .env("OPENAI_BASE_URL", base)
        .env("OPENAI_API_KEY", KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_api_streams_through_the_sdk_and_replays_its_chain() {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test sets it up)");
        return;
    };
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/s/resp-run/main/v1", srv.url);
    let py = python.clone();
    let live = tokio::task::spawn_blocking(move || run_python(&py, RESPONSES, &base))
        .await
        .unwrap();
    assert_eq!(live["r1"], serde_json::json!(["resp_1", "echo: hi", 6]));
    assert_eq!(
        live["r2"],
        serde_json::json!([
            "echo: more (after resp_1)",
            "resp_2",
            "echo: more (after resp_1)"
        ])
    );
    assert_eq!(
        live["r3"],
        serde_json::json!(["resp_3", "echo: last (after resp_2)"])
    );
    let (_, sent) = up.seen.last();
    assert_eq!(sent["previous_response_id"], "resp_2");
    let t = crate::common::off_rt(|| {
        let mut store = srv.store();
        let s = store.find_session("resp-run").unwrap();
        store.timeline(&s.id, &BranchName::main()).unwrap()
    });
    assert_eq!(t.len(), 12);
    assert_eq!(t[4].payload, b"more");
    assert_eq!(t[7].payload, b"echo: more (after resp_1)");
    let d = t[6].stored.node.diagnostics.to_value();
    assert_eq!(d["streamed"], true);
    assert_eq!(d["usage"]["total_tokens"], 6);
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    up.stop().await;

    // Replayed with no upstream: the same answers, the same ids, each
    // `previous_response_id` mapped to the recorded call it names.
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(convo_proxy::replay::ReplaySpec::parse("resp-run").unwrap());
    let srv = Server::start_on(cfg, dir, store_url).await;
    let base = format!("{}/v1", srv.url);
    let replayed = tokio::task::spawn_blocking(move || run_python(&python, RESPONSES, &base))
        .await
        .unwrap();
    assert_eq!(replayed, live);
    let dir = srv.stop().await;
    assert!(!contains(&all_bytes(dir.path()), KEY.as_bytes()));
}

/// Uploads (multipart), chat and Anthropic calls through the SDKs, the
/// client's key as it configures it; a key in a `User-Agent` too.
const UPLOADS: &str = r#"
import json, os, openai, anthropic
c = openai.OpenAI(max_retries=0)
f = c.files.create(file=("notes.jsonl", b'{"note": "file-bytes-Zq81"}\n'), purpose="batch")
t = c.audio.transcriptions.create(model="whisper-1", file=("hello.wav", b"RIFF0000WAVEaudio-bytes-Kx42"))
r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
ua = openai.OpenAI(max_retries=0, default_headers={"User-Agent": "agent/1.0 (key " + os.environ["UA_KEY"] + ")"})
ua.chat.completions.create(model="m", messages=[{"role": "user", "content": "ua"}])
a = anthropic.Anthropic(max_retries=0)
m = a.messages.create(model="claude", max_tokens=10, messages=[{"role": "user", "content": "bonjour"}])
out = {"file": [f.id, f.bytes], "heard": t.text, "chat": r.choices[0].message.content,
       "claude": m.content[0].text}
try:
    openai.OpenAI(api_key="not-the-token", max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}])
    out["wrong_key"] = 200
except openai.APIStatusError as e:
    out["wrong_key"] = e.status_code
print(json.dumps(out))
"#;

const TOKEN: &str = "convo-token-5f4e3d2c1b0a99887766";
const OPERATOR_KEY: &str = "sk-operator-0123456789abcdef0123";
const OPERATOR_ANTHROPIC_KEY: &str = "sk-ant-operator-fedcba9876543210";
const UA_KEY: &str = "sk-ua-LEAK-77aa88bb99cc00dd11ee";

/// `convo proxy` (standalone) with `--token` and operator keys: SDKs
/// authenticate with convo's token as their API key, the upstream gets
/// the operator's keys and never the token; `convo serve --upstream`
/// without a token: the client's key passes through. Both mounts take
/// multipart uploads (files, audio) and record them, and no key (nor one
/// inside a `User-Agent`) reaches the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_and_virtual_keys_through_the_sdks_on_both_mounts() {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        if std::env::var_os("CI").is_some() {
            panic!("CI is set but CONVO_TEST_PYTHON is not");
        }
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test sets it up)");
        return;
    };
    for virtual_keys in [true, false] {
        let up = Upstream::start().await;
        let mut cfg = ProxyConfig::new(Some(up.url.clone()));
        cfg.anthropic_upstream = Some(up.url.clone());
        cfg.upstream_key = Some(OPERATOR_KEY.into());
        cfg.anthropic_key = Some(OPERATOR_ANTHROPIC_KEY.into());
        let dir = tempfile::tempdir().unwrap();
        let store_url = format!("sqlite://{}/convo.db", dir.path().display());
        let token = virtual_keys.then_some(TOKEN);
        // Virtual keys on the standalone proxy, pass-through on `serve`.
        let srv = Server::start_as(cfg, dir, store_url, token, virtual_keys, None).await;
        let client_key = if virtual_keys { TOKEN } else { KEY };
        let (openai_base, anthropic_base) = (
            format!("{}/s/uploads/main/v1", srv.url),
            format!("{}/s/uploads/main", srv.url),
        );
        let py = python.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(py)
                .args(["-c", UPLOADS])
                .env("OPENAI_BASE_URL", openai_base)
                .env("OPENAI_API_KEY", client_key)
                .env("ANTHROPIC_BASE_URL", anthropic_base)
                .env("ANTHROPIC_API_KEY", client_key)
                .env("UA_KEY", UA_KEY)
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
        assert_eq!(v["file"][0], "file-1", "{v}");
        assert_eq!(v["chat"], "echo: hi");
        assert_eq!(v["claude"], "echo: bonjour");
        assert!(v["heard"].as_str().unwrap().starts_with("heard "), "{v}");
        // A wrong key: refused by convo with a token; passed on without one.
        assert_eq!(v["wrong_key"], if virtual_keys { 401 } else { 200 });

        let calls = up.seen.calls.lock().unwrap().clone();
        let bodies: Vec<String> = calls.iter().map(|(_, b)| b.to_string()).collect();
        assert!(
            bodies.iter().any(|b| b.contains("file-bytes-Zq81")),
            "{bodies:?}"
        );
        assert!(bodies.iter().any(|b| b.contains("audio-bytes-Kx42")));
        for (h, _) in &calls {
            let anthropic = h.contains_key("anthropic-version");
            let (name, want) = match (anthropic, virtual_keys) {
                (false, true) => ("authorization", format!("Bearer {OPERATOR_KEY}")),
                (true, true) => ("x-api-key", OPERATOR_ANTHROPIC_KEY.to_owned()),
                (false, false) => ("authorization", format!("Bearer {KEY}")),
                (true, false) => ("x-api-key", KEY.to_owned()),
            };
            if h.get("authorization")
                .is_some_and(|v| v == "Bearer not-the-token")
            {
                assert!(!virtual_keys, "a refused call went upstream");
                continue;
            }
            assert_eq!(h[name], want.as_str(), "{h:?}");
            assert!(
                h.values()
                    .all(|v| !contains(v.as_bytes(), TOKEN.as_bytes())),
                "convo's token went upstream: {h:?}"
            );
        }
        // The uploads are recorded: the request body as sent.
        let t = crate::common::off_rt(|| {
            let mut store = srv.store();
            let s = store.find_session("uploads").unwrap();
            store.timeline(&s.id, &BranchName::main()).unwrap()
        });
        assert!(
            t.iter()
                .any(|n| n.stored.node.kind == Kind::Request
                    && contains(&n.payload, b"file-bytes-Zq81")),
            "the file upload is recorded"
        );
        assert!(
            t.iter().any(|n| n.stored.node.kind == Kind::Request
                && contains(&n.payload, b"audio-bytes-Kx42"))
        );
        let dir = srv.stop().await;
        let all = all_bytes(dir.path());
        for secret in [TOKEN, KEY, OPERATOR_KEY, OPERATOR_ANTHROPIC_KEY, UA_KEY] {
            assert!(
                !contains(&all, secret.as_bytes()),
                "{secret} reached the store"
            );
        }
        assert!(
            contains(&all, b"agent/1.0 (key REDACTED)"),
            "the User-Agent is kept, redacted"
        );
        up.stop().await;
    }
}
