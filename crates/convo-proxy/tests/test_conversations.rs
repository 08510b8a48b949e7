//! One conversation, whichever way it comes in: the same calls sent
//! through the proxy and exported as OTLP spans (GenAI semconv and
//! OpenInference, each call its own trace, as a plain script makes them)
//! give the same sessions, timelines and answers.

use crate::common::{Server, off_rt};
use crate::upstream::Upstream;
use convo_core::Kind;
use convo_llm::otel::{self, Batch, Encoding, ThreadCache};
use convo_proxy::ProxyConfig;
use convo_store::Store;
use serde_json::{Value, json};

/// A store's conversations as a user reads them: per session (by title),
/// per timeline (by name), the text answers, oldest first.
type Tree = Vec<(String, Vec<(String, Vec<String>)>)>;

fn tree(s: &mut Store) -> Tree {
    let mut out: Tree = Vec::new();
    for row in s.sessions().unwrap() {
        let mut timelines = Vec::new();
        for b in s.branches(&row.id).unwrap() {
            let answers: Vec<String> = s
                .timeline(&row.id, &b.name)
                .unwrap()
                .iter()
                .filter(|n| n.stored.node.kind == Kind::Complete)
                .map(|n| String::from_utf8_lossy(&n.payload).into_owned())
                .filter(|p| !p.is_empty() && !p.starts_with('{'))
                .collect();
            timelines.push((b.name.to_string(), answers));
        }
        timelines.sort();
        out.push((row.title.unwrap_or_default(), timelines));
    }
    out.sort();
    out
}

/// One call: the model asked and the messages sent.
struct Call {
    model: &'static str,
    messages: Value,
}

fn call(model: &'static str, messages: Value) -> Call {
    Call { model, messages }
}

/// A chat message as a GenAI semconv (≥ 1.37) message: role and parts.
fn semconv(m: &Value) -> Value {
    let role = m["role"].as_str().unwrap_or("user");
    let mut parts = Vec::new();
    if let Some(t) = m["content"].as_str().filter(|t| !t.is_empty()) {
        if role == "tool" {
            parts.push(
                json!({"type": "tool_call_response", "id": m["tool_call_id"], "response": t}),
            );
        } else {
            parts.push(json!({"type": "text", "content": t}));
        }
    }
    for c in m["tool_calls"].as_array().into_iter().flatten() {
        let args: Value =
            serde_json::from_str(c["function"]["arguments"].as_str().unwrap_or("{}")).unwrap();
        parts.push(
            json!({"type": "tool_call", "id": c["id"], "name": c["function"]["name"],
            "arguments": args}),
        );
    }
    json!({"role": role, "parts": parts})
}

/// A chat message as OpenInference's flattened attributes under `prefix`.
fn openinference(prefix: &str, m: &Value, attrs: &mut Vec<Value>) {
    let mut put = |k: String, v: &Value| {
        if let Some(s) = v.as_str() {
            attrs.push(json!({"key": k, "value": {"stringValue": s}}));
        }
    };
    put(format!("{prefix}.message.role"), &m["role"]);
    put(format!("{prefix}.message.content"), &m["content"]);
    put(format!("{prefix}.message.tool_call_id"), &m["tool_call_id"]);
    for (j, c) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
        let p = format!("{prefix}.message.tool_calls.{j}.tool_call");
        put(format!("{p}.id"), &c["id"]);
        put(format!("{p}.function.name"), &c["function"]["name"]);
        put(
            format!("{p}.function.arguments"),
            &c["function"]["arguments"],
        );
    }
}

/// One span for a call (its own trace), in `dialect`, as OTLP/JSON.
fn span(dialect: &str, n: u64, c: &Call, answer: Option<&Value>) -> Value {
    let s = |k: &str, v: &str| json!({"key": k, "value": {"stringValue": v}});
    let mut attrs = vec![s("gen_ai.request.model", c.model)];
    let msgs = c.messages.as_array().unwrap();
    if dialect == "semconv" {
        attrs.push(s("gen_ai.operation.name", "chat"));
        let ins: Vec<Value> = msgs.iter().map(semconv).collect();
        attrs.push(s("gen_ai.input.messages", &Value::Array(ins).to_string()));
        if let Some(a) = answer {
            let outs = json!([semconv(a)]);
            attrs.push(s("gen_ai.output.messages", &outs.to_string()));
        }
    } else {
        attrs.push(s("openinference.span.kind", "LLM"));
        attrs.push(s("llm.model_name", c.model));
        for (i, m) in msgs.iter().enumerate() {
            openinference(&format!("llm.input_messages.{i}"), m, &mut attrs);
        }
        if let Some(a) = answer {
            openinference("llm.output_messages.0", a, &mut attrs);
        }
    }
    let t = 1_800_000_000_000_000_000u64 + n * 1_000_000_000;
    let mut sp = json!({"traceId": format!("{:032x}", n + 1), "spanId": format!("{:016x}", n + 1),
        "name": format!("chat {}", c.model), "kind": 3,
        "startTimeUnixNano": t.to_string(), "endTimeUnixNano": (t + 500_000_000).to_string(),
        "attributes": attrs});
    if answer.is_none() {
        sp["status"] = json!({"code": 2, "message": "429"});
    }
    json!({"resourceSpans": [{"resource": {"attributes": [s("service.name", "agent")]},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": [sp]}]}]})
}

/// The calls of each conversation, in the order a client makes them
/// (each vector one client, run one after the other).
fn conversations() -> Vec<Vec<Call>> {
    let q = json!({"role": "user", "content": "weather in Paris?"});
    let a1 = json!({"role": "assistant", "content": "echo: weather in Paris?"});
    let q2 = json!({"role": "user", "content": "and tomorrow?"});
    let q2b = json!({"role": "user", "content": "and in Rome?"});
    // The client sends the tool call's arguments back re-serialized.
    let resent = json!([{"id": "call_1", "type": "function",
        "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]);
    let lq = json!({"role": "user", "content": "loop in Lima?"});
    vec![
        // Two calls, then an edited second question: a fork at the answer.
        vec![
            call("m", json!([q])),
            call("m", json!([q, a1, q2])),
            call("m", json!([q, a1, q2b])),
        ],
        // A 429, a fallback to another model that calls a tool, and the
        // tool's result with the arguments re-serialized.
        vec![
            call("rate-limited", json!([lq])),
            call("tool-m", json!([lq])),
            call(
                "m",
                json!([lq, {"role": "assistant", "content": "", "tool_calls": resent},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
            ),
        ],
        // Another conversation alongside.
        vec![call(
            "m",
            json!([{"role": "user", "content": "hello there"}]),
        )],
    ]
}

/// What the scripted upstream answers a call (`echo:` the last user text;
/// a tool call for the `tool-` model; 429 for `rate-limited`).
fn request(c: &Call) -> Value {
    let mut body = json!({"model": c.model.trim_start_matches("tool-"), "messages": c.messages});
    if c.model.starts_with("tool-") {
        body["tools"] = json!([{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object"}}}]);
    }
    body
}

/// The same conversations through the proxy and as OTLP (both dialects,
/// each call its own trace, one receiver's cache across the exports):
/// the same tree, one session per conversation, the edited question on
/// `edit-1` in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_conversations_through_the_proxy_and_otlp_give_the_same_tree() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let url = format!("{}/v1/chat/completions", srv.url);
    let client = reqwest::Client::new();
    // Per call, the answer message (`None`: it failed).
    let mut answers: Vec<Vec<Option<Value>>> = Vec::new();
    for conv in conversations() {
        let mut got = Vec::new();
        for c in &conv {
            let res = client.post(&url).json(&request(c)).send().await.unwrap();
            let ok = res.status().is_success();
            let v: Value = res.json().await.unwrap();
            got.push(ok.then(|| v["choices"][0]["message"].clone()));
        }
        answers.push(got);
    }
    let proxy_tree = off_rt(|| tree(&mut srv.store()));
    assert_eq!(
        proxy_tree,
        vec![
            (
                "hello there".to_owned(),
                vec![("main".to_owned(), vec!["echo: hello there".to_owned()])]
            ),
            (
                "loop in Lima?".to_owned(),
                vec![("main".to_owned(), vec!["echo: loop in Lima?".to_owned()])]
            ),
            (
                "weather in Paris?".to_owned(),
                vec![
                    (
                        "edit-1".to_owned(),
                        vec![
                            "echo: weather in Paris?".to_owned(),
                            "echo: and in Rome?".to_owned()
                        ]
                    ),
                    (
                        "main".to_owned(),
                        vec![
                            "echo: weather in Paris?".to_owned(),
                            "echo: and tomorrow?".to_owned()
                        ]
                    ),
                ]
            ),
        ],
        "through the proxy"
    );
    srv.stop().await;
    up.stop().await;

    for dialect in ["semconv", "openinference"] {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/convo.db", dir.path().display());
        let convs = conversations();
        let answers = answers.clone();
        let got = off_rt(move || {
            let mut s = Store::open(&url).unwrap();
            let cache = ThreadCache::new();
            let mut n = 0;
            for (conv, said) in convs.iter().zip(&answers) {
                for (c, a) in conv.iter().zip(said) {
                    n += 1;
                    let body = span(dialect, n, c, a.as_ref()).to_string();
                    let req = otel::decode_traces(body.as_bytes(), Encoding::Json, false, 1 << 20)
                        .unwrap();
                    let calls = otel::calls_from_spans(&Batch::traces(&req));
                    assert_eq!(calls.len(), 1, "{dialect}: {body}");
                    s.transaction(|l| otel::ingest_cached(l, &calls, 0, &cache))
                        .unwrap();
                }
            }
            tree(&mut s)
        });
        assert_eq!(got, proxy_tree, "{dialect}");
    }
}
