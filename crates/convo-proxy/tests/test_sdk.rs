//! The official `openai` and `anthropic` Python SDKs, and `curl -N`, as
//! clients of the proxy (the venv comes from scripts/test-env, which
//! scripts/test runs; CONVO_TEST_PYTHON names its python).

use crate::common::{Server, all_bytes, contains};
use crate::upstream::Upstream;
use convo_core::{BranchName, Kind};
use convo_proxy::ProxyConfig;
use convo_testutil::Backend;

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
    assert!(
        !text.contains("usage"),
        "nothing the client did not ask for: {text}"
    );

    let t = crate::common::off_rt(|| {
        let mut store = srv.store();
        let s = store.find_session("sdk-run").unwrap();
        store.timeline(&s.id, &BranchName::main()).unwrap()
    });
    assert_eq!(t.len(), 8 * 4, "eight calls, each a whole turn");
    // The Anthropic tool use, assembled from its stream.
    let d = t[26].stored.node.diagnostics.to_value();
    assert!(d.get("assembled").is_none(), "no copy of the answer: {d}");
    let assembled =
        convo_llm::api::assemble(convo_llm::api::Api::Messages, &t[26].payload).unwrap();
    assert_eq!(assembled["content"][0]["input"]["city"], "Paris");
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
        .env("ANTHROPIC_BASE_URL", base.trim_end_matches("/v1"))
        .env("ANTHROPIC_API_KEY", KEY)
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

/// A tool loop whose arguments the client re-serializes (by hand with the
/// openai SDK, as LangChain does with langchain-openai), then four calls
/// at once with `asyncio.gather`.
const AGENT: &str = r#"
import asyncio, json, os, openai
from langchain_openai import ChatOpenAI
from langchain_core.messages import HumanMessage, ToolMessage
out = {}
c = openai.OpenAI(max_retries=0)
tools = [{"type": "function", "function": {"name": "weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
msgs = [{"role": "user", "content": "weather in Paris?"}]
r = c.chat.completions.create(model="m", messages=msgs, tools=tools)
call = r.choices[0].message.tool_calls[0]
args = json.dumps(json.loads(call.function.arguments), indent=2)
msgs.append({"role": "assistant", "content": None, "tool_calls": [
    {"id": call.id, "type": "function", "function": {"name": call.function.name, "arguments": args}}]})
msgs.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
r2 = c.chat.completions.create(model="m", messages=msgs, tools=tools)
out["loop"] = [call.function.arguments, r2.choices[0].finish_reason]
llm = ChatOpenAI(model="m", base_url=os.environ["OPENAI_BASE_URL"], max_retries=0).bind_tools(tools)
hist = [HumanMessage("weather in Rome?")]
ai = llm.invoke(hist)
hist += [ai, ToolMessage("rainy", tool_call_id=ai.tool_calls[0]["id"])]
ai2 = llm.invoke(hist)
out["langchain"] = [ai.tool_calls[0]["args"], ai2.tool_calls[0]["name"]]
import anthropic
claude = anthropic.Anthropic(max_retries=0)
weather = [{"name": "weather", "input_schema": {"type": "object"}}]
convo = [{"role": "user", "content": "weather in Oslo?"}]
m1 = claude.messages.create(model="claude", max_tokens=10, tools=weather, messages=convo)
use = m1.content[0]
convo += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m1.content]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "snow"}]}]
m2 = claude.messages.create(model="claude", max_tokens=10, tools=weather, messages=convo)
out["anthropic"] = [use.input, m2.stop_reason]
async def gather():
    a = openai.AsyncOpenAI(max_retries=0)
    rs = await asyncio.gather(*[a.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"question {i}"}]) for i in range(4)])
    return [x.choices[0].message.content for x in rs]
out["gather"] = asyncio.run(gather())
print(json.dumps(out, sort_keys=True))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_tool_loops_stay_one_session_and_concurrent_calls_replay() {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CONVO_TEST_PYTHON is not set in CI"
        );
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test sets it up)");
        return;
    };
    let up = Upstream::start().await;
    // Threaded by conversation: one session per conversation.
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/v1", srv.url);
    let py = python.clone();
    let live = tokio::task::spawn_blocking(move || run_python(&py, AGENT, &base))
        .await
        .unwrap();
    assert_eq!(
        live["loop"],
        serde_json::json!(["{\"city\":\"Paris\"}", "tool_calls"])
    );
    assert_eq!(
        live["langchain"],
        serde_json::json!([{"city": "Paris"}, "weather"])
    );
    let sessions = crate::common::off_rt(|| srv.store().sessions().unwrap());
    let mut titles: Vec<String> = sessions.into_iter().filter_map(|s| s.title).collect();
    titles.sort();
    assert_eq!(
        titles,
        [
            "question 0",
            "question 1",
            "question 2",
            "question 3",
            "weather in Oslo?",
            "weather in Paris?",
            "weather in Rome?"
        ]
    );
    assert_eq!(
        live["anthropic"],
        serde_json::json!([{"city": "Paris"}, "tool_use"])
    );
    for t in ["weather in Oslo?", "weather in Paris?", "weather in Rome?"] {
        let n = crate::common::off_rt(|| {
            let mut store = srv.store();
            let s = store.find_session(t).unwrap();
            store.timeline(&s.id, &BranchName::main()).unwrap().len()
        });
        assert_eq!(n, 8, "{t}: both calls of the loop on one timeline");
    }
    srv.stop().await;

    // Recorded on one timeline, then replayed with the upstream gone:
    // the same output, the four concurrent calls included.
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/s/agent-run/main/v1", srv.url);
    let py = python.clone();
    let recorded = tokio::task::spawn_blocking(move || run_python(&py, AGENT, &base))
        .await
        .unwrap();
    assert_eq!(recorded, live);
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    up.stop().await;
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(convo_proxy::replay::ReplaySpec::parse("agent-run").unwrap());
    let srv = Server::start_on(cfg, dir, store_url).await;
    let base = format!("{}/v1", srv.url);
    let replayed = tokio::task::spawn_blocking(move || run_python(&python, AGENT, &base))
        .await
        .unwrap();
    assert_eq!(replayed, live);
    srv.stop().await;
}

/// The Vercel AI SDK's tool loop (`generateText` with a zod schema, two
/// steps): the SDK sends the tool call back as it re-serializes it.
const VERCEL: &str = r#"
const { generateText, tool, stepCountIs } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { z } = require('zod');
const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
(async () => {
  const r = await generateText({
    model: openai.chat('m'),
    maxRetries: 0,
    tools: { weather: tool({ description: 'the weather', inputSchema: z.object({ city: z.string() }),
                             execute: async ({ city }) => `sunny in ${city}` }) },
    stopWhen: stepCountIs(2),
    prompt: 'weather in Lima?',
  });
  console.log(JSON.stringify({ steps: r.steps.length,
    calls: r.steps.map(s => s.toolCalls.map(c => c.input)),
    results: r.steps.map(s => s.toolResults.map(c => c.output)) }));
})().catch(e => { console.error(e); process.exit(1); });
"#;

fn run_node(modules: &str, script: &str, base: &str) -> serde_json::Value {
    let out = std::process::Command::new("node")
        .args(["-e", script])
        .env("NODE_PATH", modules)
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
async fn the_vercel_ai_sdk_tool_loop_is_one_session_and_replays() {
    let Ok(modules) = std::env::var("CONVO_TEST_NODE_MODULES") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CONVO_TEST_NODE_MODULES is not set in CI"
        );
        eprintln!("SKIPPED: CONVO_TEST_NODE_MODULES is not set (scripts/test sets it up)");
        return;
    };
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/v1", srv.url);
    let m = modules.clone();
    let live = tokio::task::spawn_blocking(move || run_node(&m, VERCEL, &base))
        .await
        .unwrap();
    assert_eq!(live["steps"], 2);
    assert_eq!(live["calls"][0][0]["city"], "Paris");
    let sessions = crate::common::off_rt(|| srv.store().sessions().unwrap());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0].title.as_deref(), Some("weather in Lima?"));
    let t = crate::common::off_rt(|| {
        srv.store()
            .timeline(&sessions[0].id, &BranchName::main())
            .unwrap()
    });
    assert_eq!(t.len(), 8, "both steps on one timeline");
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    up.stop().await;

    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(convo_proxy::replay::ReplaySpec::parse("weather in Lima?").unwrap());
    let srv = Server::start_on(cfg, dir, store_url).await;
    let base = format!("{}/v1", srv.url);
    let replayed = tokio::task::spawn_blocking(move || run_node(&modules, VERCEL, &base))
        .await
        .unwrap();
    assert_eq!(replayed, live);
    srv.stop().await;
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

/// Conversations the SDKs name (`prompt_cache_key`, `metadata`, Claude
/// Code's `metadata.user_id`), each started in phase 1; in phase 2 (a
/// new proxy on the same store, so the identities are found in the
/// store, not in memory) their first messages edited and regenerated.
const FIRST_EDITS: &str = r#"
import json, sys, openai, anthropic
c = openai.OpenAI(max_retries=0)
a = anthropic.Anthropic(max_retries=0)
SYS = {"role": "system", "content": "You plan trips."}
CC = "user_4f1e_account_9a2b_session_7d3c2a10-1b2c-4d5e-8f90-0a1b2c3d4e5f"
CC_SYS = [{"type": "text", "text": "You are Claude Code."}]
def cc_user(text):
    return {"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>\nAs you answer, use the context.\n</system-reminder>"},
        {"type": "text", "text": text}]}
def chat(msgs, **kw):
    return c.chat.completions.create(model="m", messages=msgs, **kw).choices[0].message.content
out = {}
if sys.argv[1] == "1":
    t = chat([SYS, {"role": "user", "content": "plan a trip"}], prompt_cache_key="conv-A")
    out["a2"] = chat([SYS, {"role": "user", "content": "plan a trip"}, {"role": "assistant", "content": t},
                      {"role": "user", "content": "by train"}], prompt_cache_key="conv-A")
    out["b1"] = chat([{"role": "user", "content": "first B"}], metadata={"session_id": "conv-B"}, store=True)
    out["u1"] = chat([{"role": "user", "content": "alice one"}], user="alice")
    m = a.messages.create(model="claude", max_tokens=10, system=CC_SYS, metadata={"user_id": CC},
                          messages=[cc_user("fix the bug")])
    out["c1"] = m.content[0].text
else:
    out["a_edit"] = chat([SYS, {"role": "user", "content": "plan a hike"}], prompt_cache_key="conv-A")
    out["a_regen"] = chat([SYS, {"role": "user", "content": "plan a trip"}], prompt_cache_key="conv-A")
    out["a_other"] = chat([{"role": "system", "content": "You write titles."},
                           {"role": "user", "content": "title: trip"}], prompt_cache_key="conv-A")
    out["b_edit"] = chat([{"role": "user", "content": "second B"}], metadata={"session_id": "conv-B"}, store=True)
    out["u2"] = chat([{"role": "user", "content": "alice two"}], user="alice")
    m = a.messages.create(model="claude", max_tokens=10, system=CC_SYS, metadata={"user_id": CC},
                          messages=[cc_user("fix the test")])
    out["c_edit"] = m.content[0].text
    with a.messages.stream(model="claude", max_tokens=10, system=CC_SYS, metadata={"user_id": CC},
                           messages=[cc_user("fix the bug")]) as s:
        out["c_regen"] = "".join(s.text_stream)
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_or_regenerated_first_message_forks_its_session() {
    first_edits_case(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_first_message_forks_its_session_on_postgresql() {
    first_edits_case(Backend::Postgres).await;
}

async fn first_edits_case(backend: Backend) {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test sets it up)");
        return;
    };
    let up = Upstream::start().await;
    let cfg = || {
        let mut cfg = ProxyConfig::new(Some(up.url.clone()));
        cfg.anthropic_upstream = Some(up.url.clone());
        cfg
    };
    let Some(store) = crate::common::off_rt(move || backend.fresh()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = store.url.clone();
    let phase = |srv_url: String, n: &'static str| {
        let python = python.clone();
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(python)
                .args(["-c", FIRST_EDITS, n])
                .env("OPENAI_BASE_URL", format!("{srv_url}/v1"))
                .env("ANTHROPIC_BASE_URL", &srv_url)
                .env("ANTHROPIC_API_KEY", KEY)
                .env("OPENAI_API_KEY", KEY)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        })
    };
    let srv = Server::start_on(cfg(), dir, url.clone()).await;
    let one = phase(srv.url.clone(), "1").await.unwrap();
    assert_eq!(one["a2"], "echo: by train");
    assert!(one["c1"].as_str().unwrap().ends_with("fix the bug"));
    let dir = srv.stop().await;
    let srv = Server::start_on(cfg(), dir, url).await;
    let two = phase(srv.url.clone(), "2").await.unwrap();
    assert_eq!(two["a_edit"], "echo: plan a hike");
    assert!(
        two["c_regen"]
            .as_str()
            .unwrap()
            .ends_with("</system-reminder>fix the bug")
    );

    let (sessions, views) = crate::common::off_rt(|| {
        let mut store = srv.store();
        let sessions: Vec<String> = store
            .sessions()
            .unwrap()
            .into_iter()
            .map(|s| s.title.unwrap_or_default())
            .collect();
        let report = store.verify().unwrap();
        assert!(report.is_clean(), "{:#?}", report.problems);
        let mut views = std::collections::BTreeMap::new();
        for title in ["plan a trip", "first B", "fix the bug"] {
            let s = store.find_session(title).unwrap();
            for b in store.branches(&s.id).unwrap() {
                let t = store.timeline(&s.id, &b.name).unwrap();
                views.insert(format!("{title}/{}", b.name), t);
            }
        }
        (sessions, views)
    });
    let mut sorted = sessions.clone();
    sorted.sort();
    // The edits and regenerates are timelines of their sessions; the
    // call with another system prompt and the `user` field's two
    // conversations are sessions of their own.
    assert_eq!(
        sorted,
        [
            "alice one",
            "alice two",
            "first B",
            "fix the bug",
            "plan a trip",
            "title: trip"
        ],
        "{sessions:?}"
    );
    let kinds = |k: &str| -> Vec<Kind> { views[k].iter().map(|n| n.stored.node.kind).collect() };
    let last_payload = |k: &str| views[k].last().unwrap().payload.clone();
    use Kind::*;
    // The edit: a timeline of its own from the first message on.
    assert_eq!(views["plan a trip/main"].len(), 8);
    assert_eq!(
        kinds("plan a trip/edit-1"),
        [Invoke, Request, Response, Complete]
    );
    assert_eq!(last_payload("plan a trip/edit-1"), b"echo: plan a hike");
    // The regenerate: forked at the first message, a new answer to it.
    assert_eq!(
        kinds("plan a trip/edit-2"),
        [Invoke, Fork, Request, Response, Complete]
    );
    assert_eq!(
        views["plan a trip/edit-2"][0].stored.hash,
        views["plan a trip/main"][0].stored.hash
    );
    assert_eq!(last_payload("plan a trip/edit-2"), b"echo: plan a trip");
    let d = views["plan a trip/main"][3]
        .stored
        .node
        .diagnostics
        .to_value();
    assert!(
        d["thread_conversation"]
            .as_str()
            .unwrap()
            .starts_with("client:prompt_cache_key:conv-A:"),
        "{d}"
    );
    assert_eq!(last_payload("first B/edit-1"), b"echo: second B");
    // Claude Code's session: the edit, then the regenerate (streamed).
    assert_eq!(kinds("fix the bug/edit-1").len(), 4);
    assert!(last_payload("fix the bug/edit-1").ends_with(b"fix the test"));
    assert_eq!(
        kinds("fix the bug/edit-2"),
        [Invoke, Fork, Request, Response, Complete]
    );
    assert!(last_payload("fix the bug/edit-2").ends_with(b"fix the bug"));
    assert_eq!(
        views
            .keys()
            .filter(|k| k.starts_with("fix the bug/"))
            .count(),
        3
    );
    srv.stop().await;
    up.stop().await;
    crate::common::off_rt(move || drop(store));
}

/// The OpenAI Agents SDK with `OpenAIChatCompletionsModel`: a triage
/// agent hands the conversation to a specialist (another system prompt,
/// the same messages), which answers; then a follow-up to the specialist.
const HANDOFF: &str = r#"
import asyncio, json, os
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI
set_tracing_disabled(True)
client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
model = OpenAIChatCompletionsModel(model="m", openai_client=client)
weather = Agent(name="weather", instructions="You know the weather.", model=model)
triage = Agent(name="triage", instructions="Send weather questions on.", model=model, handoffs=[weather])
async def main():
    first = await Runner.run(triage, "weather in Paris?")
    second = await Runner.run(first.last_agent, first.to_input_list() + [{"role": "user", "content": "and tomorrow?"}])
    print(json.dumps({"agents": [first.last_agent.name, second.last_agent.name],
                      "answers": [first.final_output, second.final_output]}))
asyncio.run(main())
"#;

/// An agent handoff changes the system prompt, not the conversation: the
/// three calls (the triage agent's handoff, the specialist's answer, the
/// follow-up) are one session on one timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_agents_handoff_stays_one_session() {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CONVO_TEST_PYTHON is not set in CI"
        );
        eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test sets it up)");
        return;
    };
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/v1", srv.url);
    let out = tokio::task::spawn_blocking(move || run_python(&python, HANDOFF, &base))
        .await
        .unwrap();
    assert_eq!(
        out["agents"],
        serde_json::json!(["weather", "weather"]),
        "{out}"
    );
    assert_eq!(out["answers"][1], "echo: and tomorrow?", "{out}");
    let seen = up.seen.calls.lock().unwrap().len();
    assert_eq!(seen, 3, "the handoff, the answer, the follow-up");
    let (sessions, branches, completes) = crate::common::off_rt(|| {
        let mut store = srv.store();
        let sessions = store.sessions().unwrap();
        let id = sessions[0].id;
        let branches: Vec<String> = store
            .branches(&id)
            .unwrap()
            .into_iter()
            .map(|b| b.name.to_string())
            .collect();
        let completes = store
            .timeline(&id, &BranchName::main())
            .unwrap()
            .iter()
            .filter(|n| n.stored.node.kind == Kind::Complete)
            .count();
        (sessions, branches, completes)
    });
    let titles: Vec<_> = sessions.iter().map(|s| s.title.clone()).collect();
    assert_eq!(
        titles,
        [Some("weather in Paris?".to_owned())],
        "one session"
    );
    assert_eq!(branches, ["main"]);
    assert_eq!(completes, 3, "the three calls, one turn each, on main");
    srv.stop().await;
}

/// A litellm `Router` whose first model answers 429 (retried once) and
/// falls back to another: two questions.
const FALLBACK: &str = r#"
import json, os
from litellm import Router
base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
router = Router(
    model_list=[
        {"model_name": "primary", "litellm_params": {"model": "openai/rate-limited", "api_base": base, "api_key": key}},
        {"model_name": "backup", "litellm_params": {"model": "openai/m", "api_base": base, "api_key": key}},
    ],
    fallbacks=[{"primary": ["backup"]}],
    num_retries=1,
    retry_after=0,
)
msgs = [{"role": "user", "content": "weather in Paris?"}]
first = router.completion(model="primary", messages=msgs).choices[0].message.content
msgs += [{"role": "assistant", "content": first}, {"role": "user", "content": "and tomorrow?"}]
second = router.completion(model="primary", messages=msgs).choices[0].message.content
print(json.dumps({"answers": [first, second]}))
"#;

/// A router's fallback after errors is the same turn: every attempt (the
/// 429s and the backup's answer) kept in it, one session, no fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_litellm_fallback_after_429_is_one_turn_with_every_attempt() {
    let Ok(python) = std::env::var("CONVO_TEST_PYTHON_LITELLM") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CONVO_TEST_PYTHON_LITELLM is not set in CI"
        );
        eprintln!("SKIPPED: CONVO_TEST_PYTHON_LITELLM is not set (scripts/test-env sets it up)");
        return;
    };
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/v1", srv.url);
    let out = tokio::task::spawn_blocking(move || run_python(&python, FALLBACK, &base))
        .await
        .unwrap();
    assert_eq!(
        out["answers"],
        serde_json::json!(["echo: weather in Paris?", "echo: and tomorrow?"]),
        "{out}"
    );
    let attempts = up.seen.calls.lock().unwrap().len();
    assert!(attempts >= 4, "429s, then the backup, twice: {attempts}");
    let (titles, branches, kinds) = crate::common::off_rt(|| {
        let mut store = srv.store();
        let sessions = store.sessions().unwrap();
        let id = sessions[0].id;
        let branches: Vec<String> = store
            .branches(&id)
            .unwrap()
            .into_iter()
            .map(|b| b.name.to_string())
            .collect();
        let kinds: Vec<Kind> = store
            .timeline(&id, &BranchName::main())
            .unwrap()
            .iter()
            .map(|n| n.stored.node.kind)
            .collect();
        let titles: Vec<_> = sessions.into_iter().map(|s| s.title).collect();
        (titles, branches, kinds)
    });
    assert_eq!(
        titles,
        [Some("weather in Paris?".to_owned())],
        "one session"
    );
    assert_eq!(branches, ["main"], "no fork");
    let count = |k: Kind| kinds.iter().filter(|x| **x == k).count();
    assert_eq!(count(Kind::Invoke), 2, "two turns: {kinds:?}");
    assert_eq!(count(Kind::Complete), 2, "each closed: {kinds:?}");
    assert_eq!(
        count(Kind::Request),
        attempts,
        "every attempt kept: {kinds:?}"
    );
    assert_eq!(count(Kind::Response), attempts, "{kinds:?}");
    srv.stop().await;
}
