//! OTLP GenAI telemetry → sessions: every dialect gives the same nodes,
//! history resent by every call is stored once, batches in any order and
//! twice are stored once, bad input is refused whole.
use convo_core::{BranchName, HashPrefix, Kind};
use convo_llm::otel::{
    self, Batch, Encoding, MAX_ITEMS, calls_from_logs, calls_from_spans, decode_logs,
    decode_traces, ingest::session_id,
};
use convo_store::Store;
use serde_json::{Value, json};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const LIMIT: usize = 64 << 20;

fn store() -> Store {
    Store::open("sqlite::memory:").unwrap()
}

/// An OTLP/JSON attribute.
fn kv(k: &str, v: Value) -> Value {
    let value = match v {
        Value::String(s) => json!({ "stringValue": s }),
        Value::Number(n) if n.is_i64() => json!({ "intValue": n.to_string() }),
        Value::Number(n) => json!({ "doubleValue": n }),
        Value::Bool(b) => json!({ "boolValue": b }),
        other => json!({ "stringValue": other.to_string() }),
    };
    json!({ "key": k, "value": value })
}

fn attrs(list: &[(&str, Value)]) -> Vec<Value> {
    list.iter().map(|(k, v)| kv(k, v.clone())).collect()
}

/// A span of `TRACE` starting at second `at`.
fn span(id: u8, at: u64, list: &[(&str, Value)], events: Vec<Value>) -> Value {
    let ns = |s: u64| ((1_800_000_000 + s) * 1_000_000_000).to_string();
    json!({
        "traceId": TRACE,
        "spanId": format!("{:016x}", 0x1000 + id as u64),
        "parentSpanId": "00f067aa0ba902b7",
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": ns(at),
        "endTimeUnixNano": ns(at + 1),
        "attributes": attrs(list),
        "events": events,
        "status": {},
    })
}

fn traces(spans: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({"resourceSpans": [{
        "resource": {"attributes": [kv("service.name", json!("weather-agent"))]},
        "scopeSpans": [{"scope": {"name": "test"}, "spans": spans}],
    }]}))
    .unwrap()
}

fn ingest_traces(s: &mut Store, body: &[u8]) -> otel::Ingested {
    let mut req = decode_traces(body, Encoding::Json, false, LIMIT).unwrap();
    assert_eq!(otel::check_traces(&mut req).count, 0);
    let calls = calls_from_spans(&Batch::traces(&req));
    s.transaction(|l| otel::ingest(l, &calls, 1_900_000_000_000))
        .unwrap()
}

/// Records an export as the receiver does: its calls, and its body kept.
fn ingest_kept(
    s: &mut Store,
    cache: &otel::ThreadCache,
    body: &[u8],
    enc: Encoding,
) -> otel::Ingested {
    let mut req = decode_traces(body, enc, false, LIMIT).unwrap();
    assert_eq!(otel::check_traces(&mut req).count, 0);
    let calls = calls_from_spans(&Batch::traces(&req));
    let media = match enc {
        Encoding::Json => "traces/json",
        Encoding::Protobuf => "traces/protobuf",
    };
    let p = otel::prepare(calls).with_body(otel::raw::Body {
        media,
        bytes: std::sync::Arc::new(body.to_vec()),
    });
    s.transaction(|l| otel::ingest_prepared(l, &p, 1_900_000_000_000, cache))
        .unwrap()
}

/// (kind, from, to, payload) of every node of a session's main timeline.
fn transcript(s: &mut Store, thread: &str) -> Vec<(Kind, String, String, String)> {
    let id = session_id(thread);
    s.timeline(&id, &BranchName::main())
        .unwrap()
        .iter()
        .map(|n| {
            let node = &n.stored.node;
            (
                node.kind,
                node.from.clone(),
                node.to.clone(),
                String::from_utf8_lossy(&n.payload).into_owned(),
            )
        })
        .collect()
}

/// The conversation every dialect below describes: a system prompt, a
/// question, a tool call and its result, an answer.
fn expected() -> Vec<(Kind, String, String, String)> {
    let r = |k, f: &str, t: &str, p: &str| (k, f.to_owned(), t.to_owned(), p.to_owned());
    vec![
        r(Kind::Invoke, "system", "weather-agent", "You are terse."),
        r(Kind::Invoke, "user", "weather-agent", "Weather in Paris?"),
        r(
            Kind::Request,
            "assistant",
            "get_weather",
            r#"{"city":"Paris"}"#,
        ),
        r(Kind::Response, "get_weather", "weather-agent", "18C sunny"),
        r(
            Kind::Complete,
            "assistant",
            "user",
            "It is 18C and sunny in Paris.",
        ),
    ]
}

// ----- GenAI semconv ≥ 1.37 ----------------------------------------------------

fn semconv_calls() -> (Value, Value) {
    let sys = json!([{"type": "text", "content": "You are terse."}]).to_string();
    let user = json!({"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]});
    let call = json!({"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1",
        "name": "get_weather", "arguments": {"city": "Paris"}}], "finish_reason": "tool_call"});
    let result = json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
        "response": "18C sunny"}]});
    let answer = json!({"role": "assistant", "parts": [{"type": "text",
        "content": "It is 18C and sunny in Paris."}], "finish_reason": "stop"});
    let one = span(
        1,
        10,
        &[
            ("gen_ai.operation.name", json!("chat")),
            ("gen_ai.request.model", json!("gpt-4o")),
            ("gen_ai.usage.input_tokens", json!(20)),
            ("gen_ai.usage.output_tokens", json!(7)),
            ("gen_ai.system_instructions", json!(sys)),
            ("gen_ai.input.messages", json!(json!([user]).to_string())),
            ("gen_ai.output.messages", json!(json!([call]).to_string())),
        ],
        vec![],
    );
    let two = span(
        2,
        20,
        &[
            ("gen_ai.operation.name", json!("chat")),
            ("gen_ai.request.model", json!("gpt-4o")),
            ("gen_ai.response.model", json!("gpt-4o-2024-08-06")),
            ("gen_ai.system_instructions", json!(sys)),
            (
                "gen_ai.input.messages",
                json!(json!([user, call, result]).to_string()),
            ),
            ("gen_ai.output.messages", json!(json!([answer]).to_string())),
        ],
        vec![],
    );
    (one, two)
}

#[test]
fn otel_semconv_spans_become_one_session_each_message_once() {
    let mut s = store();
    let (one, two) = semconv_calls();
    let w = ingest_traces(&mut s, &traces(vec![one.clone(), two.clone()]));
    assert_eq!((w.calls, w.recorded, w.nodes), (2, 2, 5));
    let thread = format!("trace:{TRACE}");
    assert_eq!(transcript(&mut s, &thread), expected());

    let id = session_id(&thread);
    let sess = s.find_session(&id.to_string()).unwrap();
    assert_eq!(sess.agent, "weather-agent");
    assert_eq!(sess.title.as_deref(), Some("Weather in Paris?"));
    let tl = s.timeline(&id, &BranchName::main()).unwrap();
    let last = tl.last().unwrap().stored.node.diagnostics.to_value();
    assert_eq!(last["model"], "gpt-4o-2024-08-06");
    assert_eq!(last["extra"]["otel"]["span_id"], "0000000000001002");
    assert_eq!(
        last["extra"]["otel"]["call"]["attributes"]["gen_ai.operation.name"],
        "chat"
    );
    // The trace id, dialect, span name and scope are the first call's:
    // stored there, not again on the second.
    let first = tl[2].stored.node.diagnostics.to_value();
    assert_eq!(first["extra"]["otel"]["trace_id"], TRACE);
    assert_eq!(first["extra"]["otel"]["call"]["dialect"], "gen_ai");
    assert_eq!(last["extra"]["otel"].get("trace_id"), None, "{last}");
    assert_eq!(last["extra"]["otel"]["call"].get("dialect"), None, "{last}");
    // Resolved along the timeline, the second call has them all.
    let diags: Vec<Value> = tl
        .iter()
        .map(|n| n.stored.node.diagnostics.to_value())
        .collect();
    let resolved = otel::ingest::resolve(&diags);
    let whole = resolved.last().unwrap().as_ref().unwrap();
    assert_eq!(whole["trace_id"], TRACE);
    assert_eq!(whole["span_id"], "0000000000001002");
    assert_eq!(whole["call"]["dialect"], "gen_ai");
    assert_eq!(
        whole["call"]["span"],
        first["extra"]["otel"]["call"]["span"]
    );
    assert_eq!(resolved[0], Some(json!({})), "a message's marker");
    let request = tl[2].stored.node.diagnostics.to_value();
    assert_eq!(
        request["extra"]["otel"]["call"]["usage"]["input_tokens"],
        20
    );
    assert_eq!(request["extra"]["tool_call_id"], "call_1");

    // Re-delivery (an exporter's retry) writes nothing.
    let again = ingest_traces(&mut s, &traces(vec![one, two]));
    assert_eq!((again.recorded, again.nodes), (0, 0));
    assert_eq!(transcript(&mut s, &thread), expected());
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn otel_batches_out_of_order_store_the_same_nodes() {
    let (one, two) = semconv_calls();
    let mut s = store();
    // The later call first, in its own batch: its history makes the nodes.
    let w = ingest_traces(&mut s, &traces(vec![two]));
    assert_eq!(w.nodes, 5);
    let w = ingest_traces(&mut s, &traces(vec![one]));
    assert_eq!(
        (w.recorded, w.nodes),
        (0, 0),
        "the earlier call is already there"
    );
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
}

#[test]
fn otel_conversation_id_threads_calls_of_several_traces() {
    let mut s = store();
    let (mut one, mut two) = semconv_calls();
    for (sp, trace) in [
        (&mut one, "11111111111111111111111111111111"),
        (&mut two, "22222222222222222222222222222222"),
    ] {
        sp["traceId"] = json!(trace);
        sp["attributes"]
            .as_array_mut()
            .unwrap()
            .push(kv("gen_ai.conversation.id", json!("conv-42")));
    }
    ingest_traces(&mut s, &traces(vec![one]));
    ingest_traces(&mut s, &traces(vec![two]));
    assert_eq!(transcript(&mut s, "conversation:conv-42"), expected());
    assert_eq!(s.sessions().unwrap().len(), 1);
}

#[test]
fn otel_edited_history_forks_at_the_last_shared_message() {
    let mut s = store();
    let (one, two) = semconv_calls();
    ingest_traces(&mut s, &traces(vec![one, two]));
    // A third call whose history changes the question: a new timeline
    // from the system prompt.
    let user = json!({"role": "user", "parts": [{"type": "text", "content": "Weather in Rome?"}]});
    let answer = json!({"role": "assistant", "parts": [{"type": "text", "content": "Rainy."}]});
    let three = span(
        3,
        30,
        &[
            (
                "gen_ai.system_instructions",
                json!(json!([{"type": "text", "content": "You are terse."}]).to_string()),
            ),
            ("gen_ai.input.messages", json!(json!([user]).to_string())),
            ("gen_ai.output.messages", json!(json!([answer]).to_string())),
        ],
        vec![],
    );
    let w = ingest_traces(&mut s, &traces(vec![three]));
    assert_eq!(w.nodes, 3, "a fork node, the question, the answer");
    let id = session_id(&format!("trace:{TRACE}"));
    let branches = s.branches(&id).unwrap();
    let fork = branches
        .iter()
        .find(|b| b.name.as_str() == "edit-1")
        .unwrap_or_else(|| panic!("{branches:?}"));
    let tl = s.timeline(&id, &fork.name).unwrap();
    let payloads: Vec<String> = tl
        .iter()
        .map(|n| String::from_utf8_lossy(&n.payload).into_owned())
        .collect();
    assert_eq!(tl[1].stored.node.kind, Kind::Fork);
    assert_eq!(payloads[0], "You are terse.");
    assert_eq!(&payloads[2..], ["Weather in Rome?", "Rainy."]);
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
    // What is in effect at a fork point is not known: the fork's first
    // call stores its trace id, dialect, span name and scope again, and
    // its timeline resolves to them.
    let last = tl.last().unwrap().stored.node.diagnostics.to_value();
    assert_eq!(last["extra"]["otel"]["trace_id"], TRACE, "{last}");
    assert_eq!(last["extra"]["otel"]["call"]["dialect"], "gen_ai", "{last}");
    let diags: Vec<Value> = tl
        .iter()
        .map(|n| n.stored.node.diagnostics.to_value())
        .collect();
    let resolved = otel::ingest::resolve(&diags);
    assert_eq!(
        resolved.last().unwrap().as_ref().unwrap()["trace_id"],
        TRACE
    );
}

// ----- the other dialects --------------------------------------------------------

#[test]
fn otel_openinference_spans_map_to_the_same_nodes() {
    let p = |n: usize, k: &str| format!("llm.input_messages.{n}.message.{k}");
    let keys = [
        (p(0, "role"), json!("system")),
        (p(0, "content"), json!("You are terse.")),
        (p(1, "role"), json!("user")),
        (
            "llm.input_messages.1.message.contents.0.message_content.text".into(),
            json!("Weather in Paris?"),
        ),
        (p(2, "role"), json!("assistant")),
        (p(2, "tool_calls.0.tool_call.id"), json!("call_1")),
        (
            p(2, "tool_calls.0.tool_call.function.name"),
            json!("get_weather"),
        ),
        (
            p(2, "tool_calls.0.tool_call.function.arguments"),
            json!("{\"city\": \"Paris\"}"),
        ),
        (p(3, "role"), json!("tool")),
        (p(3, "content"), json!("18C sunny")),
        (p(3, "tool_call_id"), json!("call_1")),
        (
            "llm.output_messages.0.message.role".into(),
            json!("assistant"),
        ),
        (
            "llm.output_messages.0.message.content".into(),
            json!("It is 18C and sunny in Paris."),
        ),
        ("llm.model_name".into(), json!("gpt-4o")),
        ("llm.token_count.prompt".into(), json!(31)),
        ("openinference.span.kind".into(), json!("LLM")),
        ("session.id".into(), json!("oi-session")),
    ];
    let list: Vec<(&str, Value)> = keys.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut s = store();
    ingest_traces(&mut s, &traces(vec![span(1, 10, &list, vec![])]));
    assert_eq!(transcript(&mut s, "session:oi-session"), expected());
    let tl = s
        .timeline(&session_id("session:oi-session"), &BranchName::main())
        .unwrap();
    let d = tl[4].stored.node.diagnostics.to_value();
    assert_eq!(d["extra"]["otel"]["call"]["dialect"], "openinference");
    assert_eq!(d["extra"]["otel"]["call"]["usage"]["input_tokens"], 31);
    assert_eq!(d["model"], "gpt-4o");
}

#[test]
fn otel_openllmetry_indexed_attributes_map_to_the_same_nodes() {
    let list = [
        ("gen_ai.system", json!("openai")),
        ("gen_ai.request.model", json!("gpt-4o")),
        ("llm.request.type", json!("chat")),
        ("gen_ai.prompt.0.role", json!("system")),
        ("gen_ai.prompt.0.content", json!("You are terse.")),
        ("gen_ai.prompt.1.role", json!("user")),
        ("gen_ai.prompt.1.content", json!("Weather in Paris?")),
        ("gen_ai.prompt.2.role", json!("assistant")),
        ("gen_ai.prompt.2.tool_calls.0.id", json!("call_1")),
        ("gen_ai.prompt.2.tool_calls.0.name", json!("get_weather")),
        (
            "gen_ai.prompt.2.tool_calls.0.arguments",
            json!("{\"city\":\"Paris\"}"),
        ),
        ("gen_ai.prompt.3.role", json!("tool")),
        ("gen_ai.prompt.3.content", json!("18C sunny")),
        ("gen_ai.prompt.3.tool_call_id", json!("call_1")),
        ("gen_ai.completion.0.role", json!("assistant")),
        (
            "gen_ai.completion.0.content",
            json!("It is 18C and sunny in Paris."),
        ),
        ("gen_ai.completion.0.finish_reason", json!("stop")),
    ];
    let mut s = store();
    ingest_traces(&mut s, &traces(vec![span(1, 10, &list, vec![])]));
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
}

#[test]
fn otel_vercel_ai_sdk_spans_map_to_the_same_nodes() {
    let prompt = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "tool-call", "toolCallId": "call_1",
            "toolName": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "tool", "content": [{"type": "tool-result", "toolCallId": "call_1",
            "toolName": "get_weather", "output": {"type": "text", "value": "18C sunny"}}]},
    ]);
    let list = [
        ("operation.name", json!("ai.generateText.doGenerate")),
        ("ai.model.id", json!("gpt-4o")),
        ("ai.model.provider", json!("openai.chat")),
        ("ai.prompt.messages", json!(prompt.to_string())),
        ("ai.response.text", json!("It is 18C and sunny in Paris.")),
        ("ai.response.finishReason", json!("stop")),
        ("ai.usage.inputTokens", json!(40)),
        ("ai.telemetry.metadata.sessionId", json!("chat-7")),
    ];
    let mut s = store();
    ingest_traces(&mut s, &traces(vec![span(1, 10, &list, vec![])]));
    assert_eq!(transcript(&mut s, "session:chat-7"), expected());
}

#[test]
fn otel_deprecated_span_events_map_to_the_same_nodes() {
    let ev = |name: &str, body: Value| {
        json!({"timeUnixNano": "1800000010000000000", "name": name,
            "attributes": [kv("gen_ai.event.content", json!(body.to_string()))]})
    };
    let events = vec![
        ev(
            "gen_ai.system.message",
            json!({"content": "You are terse."}),
        ),
        ev(
            "gen_ai.user.message",
            json!({"content": "Weather in Paris?"}),
        ),
        ev(
            "gen_ai.assistant.message",
            json!({"tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}),
        ),
        ev(
            "gen_ai.tool.message",
            json!({"content": "18C sunny", "id": "call_1"}),
        ),
        ev(
            "gen_ai.choice",
            json!({"index": 0, "finish_reason": "stop",
                "message": {"content": "It is 18C and sunny in Paris."}}),
        ),
    ];
    let mut s = store();
    ingest_traces(
        &mut s,
        &traces(vec![span(
            1,
            10,
            &[("gen_ai.system", json!("openai"))],
            events,
        )]),
    );
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
}

/// A log record whose body is an OTLP map.
fn record(span_id: u8, name: &str, body: Value) -> Value {
    fn any(v: &Value) -> Value {
        match v {
            Value::String(s) => json!({"stringValue": s}),
            Value::Number(n) => json!({"intValue": n.to_string()}),
            Value::Bool(b) => json!({"boolValue": b}),
            Value::Array(a) => {
                json!({"arrayValue": {"values": a.iter().map(any).collect::<Vec<_>>()}})
            }
            Value::Object(o) => json!({"kvlistValue": {"values":
                o.iter().map(|(k, v)| json!({"key": k, "value": any(v)})).collect::<Vec<_>>()}}),
            Value::Null => json!({}),
        }
    }
    json!({
        "timeUnixNano": "1800000010000000000",
        "traceId": TRACE,
        "spanId": format!("{:016x}", 0x1000 + span_id as u64),
        "eventName": name,
        "attributes": [kv("gen_ai.system", json!("openai"))],
        "body": any(&body),
    })
}

fn logs(records: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({"resourceLogs": [{
        "resource": {"attributes": [kv("service.name", json!("weather-agent"))]},
        "scopeLogs": [{"scope": {"name": "opentelemetry.instrumentation.openai_v2"},
            "logRecords": records}],
    }]}))
    .unwrap()
}

fn ingest_logs(s: &mut Store, body: &[u8]) -> otel::Ingested {
    let mut req = decode_logs(body, Encoding::Json, false, LIMIT).unwrap();
    assert_eq!(otel::check_logs(&mut req).count, 0);
    let calls = calls_from_logs(&Batch::logs(&req));
    s.transaction(|l| otel::ingest(l, &calls, 1_900_000_000_000))
        .unwrap()
}

#[test]
fn otel_deprecated_log_events_map_to_the_same_nodes_and_join_the_spans() {
    let call_1 = vec![
        record(
            1,
            "gen_ai.system.message",
            json!({"content": "You are terse."}),
        ),
        record(
            1,
            "gen_ai.user.message",
            json!({"content": "Weather in Paris?"}),
        ),
        record(
            1,
            "gen_ai.choice",
            json!({"index": 0, "finish_reason": "tool_calls", "message": {"tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}),
        ),
    ];
    let call_2 = vec![
        record(
            2,
            "gen_ai.system.message",
            json!({"content": "You are terse."}),
        ),
        record(
            2,
            "gen_ai.user.message",
            json!({"content": "Weather in Paris?"}),
        ),
        record(
            2,
            "gen_ai.assistant.message",
            json!({"tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}),
        ),
        record(
            2,
            "gen_ai.tool.message",
            json!({"content": "18C sunny", "id": "call_1"}),
        ),
        record(
            2,
            "gen_ai.choice",
            json!({"index": 0, "finish_reason": "stop",
                "message": {"content": "It is 18C and sunny in Paris."}}),
        ),
    ];
    let mut s = store();
    let w = ingest_logs(&mut s, &logs(call_1));
    assert_eq!(w.nodes, 3);
    let w = ingest_logs(&mut s, &logs(call_2.clone()));
    assert_eq!(w.nodes, 2);
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
    // The spans of the same calls (semconv attributes) arrive after the
    // logs: nothing new.
    let (one, two) = semconv_calls();
    let w = ingest_traces(&mut s, &traces(vec![one, two]));
    assert_eq!(w.nodes, 0);
    let w = ingest_logs(&mut s, &logs(call_2));
    assert_eq!(w.nodes, 0);
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
}

#[test]
fn otel_operation_details_log_record_maps_like_span_attributes() {
    let body = json!({
        "gen_ai.system_instructions": [{"type": "text", "content": "You are terse."}],
        "gen_ai.input.messages": [
            {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1",
                "name": "get_weather", "arguments": {"city": "Paris"}}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "18C sunny"}]},
        ],
        "gen_ai.output.messages": [{"role": "assistant", "parts": [{"type": "text",
            "content": "It is 18C and sunny in Paris."}]}],
    });
    let mut s = store();
    ingest_logs(
        &mut s,
        &logs(vec![record(
            1,
            "gen_ai.client.inference.operation.details",
            body,
        )]),
    );
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
}

// ----- bad input ---------------------------------------------------------------

#[test]
fn otel_bad_bodies_are_refused_with_a_rule() {
    let e = decode_traces(b"\xff\xff\xff\xff", Encoding::Protobuf, false, LIMIT).unwrap_err();
    assert_eq!(e.rule, "protobuf");
    let e = decode_traces(b"{\"resourceSpans\": 3}", Encoding::Json, false, LIMIT).unwrap_err();
    assert_eq!(e.rule, "json");
    let e = decode_traces(b"not gzip", Encoding::Json, true, LIMIT).unwrap_err();
    assert_eq!(e.rule, "gzip");

    // A gzip bomb stops at the limit.
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![b' '; 1 << 20]).unwrap();
    let bomb = gz.finish().unwrap();
    let e = decode_traces(&bomb, Encoding::Json, true, 1000).unwrap_err();
    assert_eq!(e.rule, "too-large");

    // gzip of a good body decodes.
    let (one, _) = semconv_calls();
    let body = traces(vec![one]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&body).unwrap();
    let req = decode_traces(&gz.finish().unwrap(), Encoding::Json, true, LIMIT).unwrap();
    assert_eq!(calls_from_spans(&Batch::traces(&req)).len(), 1);

    // Too many spans in one request.
    let many: Vec<Value> = (0..=MAX_ITEMS).map(|_| json!({})).collect();
    let e = decode_traces(&traces(many), Encoding::Json, false, LIMIT).unwrap_err();
    assert_eq!(e.rule, "too-many");
}

#[test]
fn otel_spans_without_ids_are_rejected_and_the_rest_kept() {
    let (one, mut two) = semconv_calls();
    two["traceId"] = json!("");
    let mut req = decode_traces(&traces(vec![one, two]), Encoding::Json, false, LIMIT).unwrap();
    let r = otel::check_traces(&mut req);
    assert_eq!(r.count, 1);
    assert!(r.message.contains("trace id"), "{}", r.message);
    assert_eq!(calls_from_spans(&Batch::traces(&req)).len(), 1);
}

#[test]
fn otel_attributes_of_the_wrong_type_are_read_or_skipped_never_a_panic() {
    // Messages as a number, a model as a list, parts that are not objects.
    let list = [
        ("gen_ai.input.messages", json!(42)),
        (
            "gen_ai.output.messages",
            json!("[1, \"x\", {\"parts\": 5}]"),
        ),
        ("gen_ai.request.model", json!(["a", "b"])),
    ];
    let mut s = store();
    let w = ingest_traces(&mut s, &traces(vec![span(1, 10, &list, vec![])]));
    assert_eq!(w.calls, 1);
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn otel_protobuf_round_trip_decodes() {
    use prost::Message as _;
    let (one, two) = semconv_calls();
    let req = decode_traces(&traces(vec![one, two]), Encoding::Json, false, LIMIT).unwrap();
    let bytes = req.encode_to_vec();
    let back = decode_traces(&bytes, Encoding::Protobuf, false, LIMIT).unwrap();
    assert_eq!(back, req);
    let mut s = store();
    let calls = calls_from_spans(&Batch::traces(&back));
    s.transaction(|l| otel::ingest(l, &calls, 0)).unwrap();
    assert_eq!(transcript(&mut s, &format!("trace:{TRACE}")), expected());
}

// ----- recorded captures of real emitters -------------------------------------

/// The conversation `crates/convo-cli/tests/otel/emit.py` has: the one
/// above plus a follow-up question and its answer.
fn expected_emitted() -> Vec<(Kind, String, String, String)> {
    let mut e = expected();
    e.push((
        Kind::Invoke,
        "user".into(),
        "weather-agent".into(),
        "And tomorrow?".into(),
    ));
    e.push((
        Kind::Complete,
        "assistant".into(),
        "user".into(),
        "Tomorrow: rain.".into(),
    ));
    e
}

/// Each capture (as the emitter's exporter sent it, OTLP protobuf or
/// OTLP/JSON, one per emitter and version, recorded by emit.py and
/// emit-ai-sdk.js): every message recovered, the tool call paired with its
/// result, nothing duplicated; the logs of the same run add nothing. The
/// agent spans of Pydantic AI and the AI SDK (which sum up the run again)
/// give no calls of their own.
#[test]
fn otel_recorded_captures_of_real_emitters_give_the_conversation() {
    for name in [
        "openai-v2-2.4b0-latest",
        "openinference-openai-0.1.66",
        "openllmetry-openai-0.62.4",
        "openai-agents-0.6.2-openinference-1.6.2",
        "pydantic-ai-2.68.0-logfire-5.4.0",
        "traceloop-sdk-0.62.4",
        "ai-sdk-7.0.173-otel-1.0.173",
        "ai-sdk-7.0.173-legacy-otel-1.0.173",
    ] {
        let enc = if name.starts_with("ai-sdk") {
            Encoding::Json
        } else {
            Encoding::Protobuf
        };
        let ext = if enc == Encoding::Json { "json" } else { "pb" };
        let body =
            std::fs::read(crate::common::fixture(&format!("otel/{name}.traces.{ext}"))).unwrap();
        let mut req = decode_traces(&body, enc, false, LIMIT).unwrap();
        assert_eq!(otel::check_traces(&mut req).count, 0, "{name}");
        let calls = calls_from_spans(&Batch::traces(&req));
        assert_eq!(calls.len(), 3, "{name}: three LLM calls");
        let thread = calls[0].thread.clone();
        let mut s = store();
        s.transaction(|l| otel::ingest(l, &calls, 0)).unwrap();
        assert_eq!(transcript(&mut s, &thread), expected_emitted(), "{name}");
        let tl = s
            .timeline(&session_id(&thread), &BranchName::main())
            .unwrap();
        let request = &tl[2].stored.node;
        let response = &tl[3].stored.node;
        assert_eq!(
            (request.kind, response.kind, request.submission),
            (Kind::Request, Kind::Response, response.submission),
            "{name}: the tool call and its result in one submission"
        );
        assert_eq!(response.sequence, request.sequence, "{name}");
        let last = tl.last().unwrap().stored.node.diagnostics.to_value();
        // The Agents SDK's generation span names the model it was
        // configured with, not the one the answer names.
        let model = if name.starts_with("openai-agents") {
            "gpt-4o"
        } else {
            "gpt-4o-2024-08-06"
        };
        assert_eq!(last["model"], model, "{name}");
        if name.starts_with("openai-v2") {
            let body =
                std::fs::read(crate::common::fixture(&format!("otel/{name}.logs.pb"))).unwrap();
            let req = decode_logs(&body, Encoding::Protobuf, false, LIMIT).unwrap();
            let calls = calls_from_logs(&Batch::logs(&req));
            assert_eq!(calls.len(), 3, "{name}: three operation.details events");
            let w = s.transaction(|l| otel::ingest(l, &calls, 0)).unwrap();
            assert_eq!(w.nodes, 0, "{name}: the logs repeat the spans");
            // The logs first (a log processor flushes sooner than a span
            // processor): the same nodes, and each call still knows the
            // model it asked for, so it replays.
            let mut first = store();
            first.transaction(|l| otel::ingest(l, &calls, 0)).unwrap();
            let tl = first
                .timeline(&session_id(&thread), &BranchName::main())
                .unwrap();
            let messages: Vec<_> = tl
                .iter()
                .filter_map(|n| convo_llm::ledger::node_message(&n.stored.node, &n.payload))
                .collect();
            let rebuilt = otel::rebuild::calls(&messages);
            assert_eq!(rebuilt.len(), 3, "{name}: logs first");
            for r in &rebuilt {
                assert_eq!(r.model.as_deref(), Some("gpt-4o"), "{name}: logs first");
            }
            assert_eq!(
                transcript(&mut first, &thread),
                expected_emitted(),
                "{name}"
            );
        }
        assert!(s.verify().unwrap().is_clean());
    }
}

/// A 100-call run, every call resending the whole history, in batches of
/// 10 delivered newest first: one node per distinct message, and the
/// diagnostics stay small beside the messages.
#[test]
fn otel_a_hundred_call_run_stores_each_message_once() {
    let msg = |role: &str, text: String| json!({"role": role, "parts": [{"type": "text", "content": text}]});
    let mut history = Vec::new();
    let mut spans = Vec::new();
    let mut distinct = 0usize;
    for i in 0..100u8 {
        let q = format!("question {i}: {}", "lorem ipsum ".repeat(40));
        let a = format!("answer {i}: {}", "dolor sit amet ".repeat(40));
        distinct += q.len() + a.len();
        history.push(msg("user", q));
        let list = [
            ("gen_ai.request.model", json!("gpt-4o")),
            (
                "gen_ai.input.messages",
                json!(Value::Array(history.clone()).to_string()),
            ),
            (
                "gen_ai.output.messages",
                json!(json!([msg("assistant", a.clone())]).to_string()),
            ),
        ];
        spans.push(span(i, u64::from(i) * 10, &list, vec![]));
        history.push(msg("assistant", a));
    }
    let mut s = store();
    let cache = otel::ThreadCache::new();
    let mut sent = Vec::new();
    for chunk in spans.chunks(10).rev() {
        let body = traces(chunk.to_vec());
        ingest_kept(&mut s, &cache, &body, Encoding::Json);
        sent.push(body);
    }
    let thread = format!("trace:{TRACE}");
    let tl = s
        .timeline(&session_id(&thread), &BranchName::main())
        .unwrap();
    assert_eq!(tl.len(), 200, "one node per message");
    let payload: usize = tl.iter().map(|n| n.payload.len()).sum();
    assert_eq!(payload, distinct);
    let diag: usize = tl
        .iter()
        .map(|n| n.stored.node.diagnostics.to_value().to_string().len())
        .sum();
    // Every export body is kept, and given back byte for byte.
    let kept = s.otlp_exports(Some(&session_id(&thread))).unwrap();
    assert_eq!(
        kept.iter().map(|k| k.body.clone()).collect::<Vec<_>>(),
        sent
    );
    let raw: usize = s
        .read(|tx| tx.otlp_exports(None))
        .unwrap()
        .iter()
        .map(|r| r.residual.len())
        .sum();
    eprintln!(
        "100 calls: payloads {payload} + diagnostics {diag} + kept bodies {raw} bytes for {distinct} distinct ({:.3}×; the bodies sent: {} bytes)",
        (payload + diag + raw) as f64 / distinct as f64,
        sent.iter().map(Vec::len).sum::<usize>()
    );
    assert!(
        (payload + diag + raw) as f64 <= 1.2 * distinct as f64,
        "payloads {payload} + diagnostics {diag} + kept bodies {raw} against {distinct} distinct bytes"
    );
}

/// Every branch of a session, each with its nodes (all but a fork's
/// random nonce, so two stores compare).
fn branch_hashes(s: &mut Store, thread: &str) -> Vec<(String, Vec<String>)> {
    let id = session_id(thread);
    let mut out = Vec::new();
    for b in s.branches(&id).unwrap() {
        let tl = s.timeline(&id, &b.name).unwrap();
        let hashes = tl
            .iter()
            .map(|n| {
                let x = &n.stored.node;
                format!(
                    "{:?} {} {} {} {} {} {:?}",
                    x.kind,
                    x.from,
                    x.to,
                    x.payload,
                    x.diagnostics.to_value(),
                    x.created_at,
                    x.event.as_ref().map(|e| e.branch.as_str().to_owned())
                )
            })
            .collect();
        out.push((b.name.as_str().to_owned(), hashes));
    }
    out.sort();
    out
}

/// Threading state kept between requests gives exactly the nodes that
/// reading it from the store gives, also when something else writes the
/// session between requests: a second receiver with its own cache, a
/// fork made by hand, a transaction that did not commit.
#[test]
fn otel_cached_threading_stores_what_reading_the_store_gives() {
    let msg = |role: &str, text: String| json!({"role": role, "parts": [{"type": "text", "content": text}]});
    let call = |i: u8, history: &[Value], answer: &str| {
        let list = [
            ("gen_ai.request.model", json!("gpt-4o")),
            (
                "gen_ai.input.messages",
                json!(Value::Array(history.to_vec()).to_string()),
            ),
            (
                "gen_ai.output.messages",
                json!(json!([msg("assistant", answer.to_owned())]).to_string()),
            ),
        ];
        traces(vec![span(i, u64::from(i) * 10, &list, vec![])])
    };
    // 24 calls; every 7th edits the last question (a fork), the rest
    // continue the history.
    let mut bodies = Vec::new();
    let mut history = Vec::new();
    for i in 0..24u8 {
        if i % 7 == 6 {
            let mut edited = history.clone();
            edited.pop();
            edited.pop();
            edited.push(msg("user", format!("edited question {i}")));
            bodies.push(call(i, &edited, &format!("answer to the edit {i}")));
            continue;
        }
        history.push(msg("user", format!("question {i}")));
        let a = format!("answer {i}");
        bodies.push(call(i, &history, &a));
        history.push(msg("assistant", a));
    }
    let thread = format!("trace:{TRACE}");
    let id = session_id(&thread);
    let calls_of = |body: &[u8]| {
        let req = decode_traces(body, Encoding::Json, false, LIMIT).unwrap();
        calls_from_spans(&Batch::traces(&req))
    };
    let (mut plain, mut cached) = (store(), store());
    let (one, two) = (otel::ThreadCache::new(), otel::ThreadCache::new());
    for (i, body) in bodies.iter().enumerate() {
        let calls = calls_of(body);
        plain.transaction(|l| otel::ingest(l, &calls, 0)).unwrap();
        // Two receivers on one store, each with its own cache.
        let cache = if i % 3 == 2 { &two } else { &one };
        cached
            .transaction(|l| otel::ingest_cached(l, &calls, 0, cache))
            .unwrap();
        if i == 10 {
            // A fork by hand, on both stores.
            for s in [&mut plain, &mut cached] {
                let tl = s.timeline(&id, &BranchName::main()).unwrap();
                let at = HashPrefix::parse(&tl[3].stored.hash.to_hex()).unwrap();
                s.transaction(|l| l.fork(&id, &at, &BranchName::new("by-hand").unwrap(), 5))
                    .unwrap();
            }
        }
        if i == 15 {
            // A transaction that writes through the cache, then fails:
            // the cache holds what was never committed.
            let next = calls_of(&bodies[i + 1]);
            let failed = cached.transaction(|l| {
                otel::ingest_cached(l, &next, 0, &one)?;
                Err::<(), _>(convo_store::StoreError::Invalid("rolled back".into()))
            });
            assert!(failed.is_err());
        }
        assert_eq!(
            branch_hashes(&mut cached, &thread),
            branch_hashes(&mut plain, &thread),
            "after request {i}"
        );
    }
    assert_eq!(one.sessions() + two.sessions(), 2);
    let branches = branch_hashes(&mut plain, &thread);
    assert!(branches.len() >= 5, "forks were made: {branches:?}");
    assert!(cached.verify().unwrap().is_clean());
}

/// A batch processor exports the agent span (it ends last) after its
/// trace's LLM calls: received in a later request, it is not a call of its
/// own (it would fork the conversation with the run's summary); exported
/// alone, with no LLM call of its trace received, it is one.
#[test]
fn otel_an_agent_span_after_its_llm_calls_is_not_a_call() {
    let (one, two) = semconv_calls();
    let user = json!({"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]});
    let answer = json!({"role": "assistant", "parts": [{"type": "text",
        "content": "It is 18C and sunny in Paris."}], "finish_reason": "stop"});
    let agent = span(
        9,
        30,
        &[
            ("gen_ai.operation.name", json!("invoke_agent")),
            ("gen_ai.request.model", json!("gpt-4o")),
            ("gen_ai.input.messages", json!(json!([user]).to_string())),
            ("gen_ai.output.messages", json!(json!([answer]).to_string())),
        ],
        vec![],
    );
    let calls_of = |spans: Vec<Value>| {
        let req = decode_traces(&traces(spans), Encoding::Json, false, LIMIT).unwrap();
        calls_from_spans(&Batch::traces(&req))
    };
    let thread = format!("trace:{TRACE}");
    let mut s = store();
    let cache = otel::ThreadCache::new();
    s.transaction(|l| otel::ingest_cached(l, &calls_of(vec![one.clone(), two.clone()]), 0, &cache))
        .unwrap();
    let before = branch_hashes(&mut s, &thread);
    let w = s
        .transaction(|l| otel::ingest_cached(l, &calls_of(vec![agent.clone()]), 0, &cache))
        .unwrap();
    assert_eq!(w.nodes, 0, "{w:?}");
    assert_eq!(branch_hashes(&mut s, &thread), before);
    assert_eq!(transcript(&mut s, &thread), expected());
    // Alone (no LLM call of its trace received): the agent span is the call.
    let mut alone = store();
    let w = alone
        .transaction(|l| {
            otel::ingest_cached(
                l,
                &calls_of(vec![agent.clone()]),
                0,
                &otel::ThreadCache::new(),
            )
        })
        .unwrap();
    assert!(w.nodes > 0, "{w:?}");
}

/// Export bodies as received are kept whatever the export wrote: a batch
/// of calls already stored (older calls after a newer one), a retry kept
/// once; and a redaction takes the bodies holding the redacted text with
/// the payload, leaving the others whole.
#[test]
fn otel_export_bodies_are_kept_and_a_redaction_takes_those_holding_the_text() {
    let msg = |role: &str, text: String| json!({"role": role, "parts": [{"type": "text", "content": text}]});
    let mut history = Vec::new();
    let mut bodies = Vec::new();
    for i in 0..6u8 {
        let q = format!("question {i}: where is \"step {i}\"?\né");
        history.push(msg("user", q));
        let list = [
            ("gen_ai.request.model", json!("gpt-4o")),
            ("gen_ai.usage.input_tokens", json!(17 + i as i64)),
            (
                "gen_ai.input.messages",
                json!(Value::Array(history.clone()).to_string()),
            ),
            (
                "gen_ai.output.messages",
                json!(json!([msg("assistant", format!("answer {i}"))]).to_string()),
            ),
        ];
        bodies.push(traces(vec![span(i, u64::from(i) * 10, &list, vec![])]));
        history.push(msg("assistant", format!("answer {i}")));
    }
    let mut s = store();
    let cache = otel::ThreadCache::new();
    // Calls 4 and 5 first; 0..=3 then write nothing, 3 arrives twice.
    let order = [4usize, 5, 0, 1, 2, 3, 3];
    for &i in &order {
        ingest_kept(&mut s, &cache, &bodies[i], Encoding::Json);
    }
    let thread = format!("trace:{TRACE}");
    let id = session_id(&thread);
    assert_eq!(s.timeline(&id, &BranchName::main()).unwrap().len(), 12);
    let kept: Vec<Vec<u8>> = s
        .otlp_exports(Some(&id))
        .unwrap()
        .into_iter()
        .map(|k| k.body)
        .collect();
    let want: Vec<Vec<u8>> = order[..6].iter().map(|&i| bodies[i].clone()).collect();
    assert!(
        kept == want,
        "every body once, as sent, in the order received"
    );
    // Redact question 5 (sent by call 5 only): its body goes, and the
    // bodies rebuilt from it; the others stay whole.
    let tl = s.timeline(&id, &BranchName::main()).unwrap();
    let q5 = tl
        .iter()
        .find(|n| String::from_utf8_lossy(&n.payload).starts_with("question 5"))
        .unwrap();
    s.redact(&q5.stored.node.payload, "test", "pii", 0, true)
        .unwrap();
    let after = s.otlp_exports(Some(&id)).unwrap();
    assert!(!after.is_empty() && after.len() < 6, "{} kept", after.len());
    for k in &after {
        assert!(!String::from_utf8_lossy(&k.body).contains("question 5"));
        assert!(bodies.contains(&k.body), "a body still comes back whole");
    }
    assert!(s.verify().unwrap().is_clean(), "the history verifies");
}

/// Where the export body is kept, a call's node stores only its place
/// among the body's calls, usage and status: the span and parent span
/// ids, latency and attributes as received are read back from the body,
/// and give what a node stores when no body is kept.
#[test]
fn otel_what_the_kept_body_holds_is_read_back_from_it_not_stored_twice() {
    let (one, two) = semconv_calls();
    // The body lists the second call first: its place is 0.
    let body = traces(vec![two, one]);
    let thread = format!("trace:{TRACE}");
    let id = session_id(&thread);
    let mut kept = store();
    ingest_kept(&mut kept, &otel::ThreadCache::new(), &body, Encoding::Json);
    let mut whole = store();
    ingest_traces(&mut whole, &body);
    assert_eq!(transcript(&mut kept, &thread), expected());

    let tl = kept.timeline(&id, &BranchName::main()).unwrap();
    let last = tl.last().unwrap().stored.node.diagnostics.to_value();
    assert_eq!(last["model"], "gpt-4o-2024-08-06", "{last}");
    assert_eq!(
        last["extra"]["otel"]["call"].get("n"),
        None,
        "the first: {last}"
    );
    let question = tl[1].stored.node.diagnostics.to_value();
    assert_eq!(question["extra"].get("otel"), None, "no marker: {question}");
    for gone in ["span_id", "parent_span_id"] {
        assert_eq!(last["extra"]["otel"].get(gone), None, "{last}");
    }
    for gone in ["attributes", "latency_ms", "parent_span_id"] {
        assert_eq!(last["extra"]["otel"]["call"].get(gone), None, "{last}");
    }
    let request = tl[2].stored.node.diagnostics.to_value();
    assert_eq!(request["extra"]["otel"]["call"]["n"], 1, "{request}");
    assert_eq!(
        request["extra"]["otel"]["call"]["usage"]["input_tokens"], 20,
        "tokens stay in the diagnostics: {request}"
    );

    // Read back from the body: what the node stores when none is kept.
    let refs: Vec<_> = tl
        .iter()
        .map(|n| (&n.stored, n.payload.as_slice()))
        .collect();
    let back = otel::ingest::resolve_kept(&mut kept, &refs).unwrap();
    let wtl = whole.timeline(&id, &BranchName::main()).unwrap();
    let diags: Vec<Value> = wtl
        .iter()
        .map(|n| n.stored.node.diagnostics.to_value())
        .collect();
    let want = otel::ingest::resolve(&diags);
    assert_eq!(back, want);
    let got = back.last().unwrap().as_ref().unwrap();
    assert_eq!(got["span_id"], "0000000000001002");
    assert_eq!(got["trace_id"], TRACE);
    assert_eq!(got["call"]["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(got["call"]["latency_ms"], 1000);
    assert_eq!(
        got["call"]["attributes"]["gen_ai.response.model"],
        "gpt-4o-2024-08-06"
    );
    // The export formats carry it whole.
    let row = kept.find_session(&id.to_string()).unwrap();
    let conv = convo_llm::ledger::export(&mut kept, &row, &BranchName::main()).unwrap();
    let m = conv.messages.last().unwrap();
    assert_eq!(m.extra["otel"]["span_id"], "0000000000001002");
    assert_eq!(m.extra["otel"]["call"]["latency_ms"], 1000);
    assert!(kept.verify().unwrap().is_clean());
}

// ----- subagents and handoffs (openai-agents through OpenInference) -----

/// An OpenInference LLM span of trace `trace`: `input` and `output` as
/// `(role, content, tool calls (id, name, arguments), tool_call_id)`.
type OiMessage<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str, &'a str)], &'a str);

fn oi_span(
    trace: &str,
    id: u8,
    at: u64,
    input: &[OiMessage<'_>],
    output: &[OiMessage<'_>],
) -> Value {
    let mut list: Vec<(String, Value)> = vec![
        ("llm.model_name".into(), json!("gpt-4o")),
        ("openinference.span.kind".into(), json!("LLM")),
    ];
    for (side, msgs) in [("input", input), ("output", output)] {
        for (i, (role, content, calls, call_id)) in msgs.iter().enumerate() {
            let p = |k: &str| format!("llm.{side}_messages.{i}.message.{k}");
            list.push((p("role"), json!(role)));
            if !content.is_empty() {
                list.push((p("content"), json!(content)));
            }
            if !call_id.is_empty() {
                list.push((p("tool_call_id"), json!(call_id)));
            }
            for (j, (cid, name, args)) in calls.iter().enumerate() {
                let q = |k: &str| p(&format!("tool_calls.{j}.tool_call.{k}"));
                list.push((q("id"), json!(cid)));
                list.push((q("function.name"), json!(name)));
                list.push((q("function.arguments"), json!(args)));
            }
        }
    }
    let pairs: Vec<(&str, Value)> = list.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let mut s = span(id, at, &pairs, vec![]);
    s["traceId"] = json!(trace);
    s["name"] = json!("generation");
    s
}

/// Every timeline of a session: (name, [(kind, payload)]).
fn timelines(s: &mut Store, thread: &str) -> Vec<(String, Vec<(Kind, String)>)> {
    let id = session_id(thread);
    let mut out = Vec::new();
    for b in s.branches(&id).unwrap() {
        let t = s.timeline(&id, &b.name).unwrap();
        let nodes = t
            .iter()
            .map(|n| {
                (
                    n.stored.node.kind,
                    String::from_utf8_lossy(&n.payload).into_owned(),
                )
            })
            .collect();
        out.push((b.name.as_str().to_owned(), nodes));
    }
    out.sort();
    out
}

/// An orchestrator calls an agent used as a tool (openai-agents'
/// `Agent.as_tool`: the nested agent's LLM call is a span of the same
/// trace, its question the tool's argument): the nested agent's calls go
/// on a timeline `agent-1` forked at the tool call, its first node linked
/// to it as the proxy links a subagent (read back by the store's one
/// subagent reader), and the orchestrator's answer goes on `main`. The
/// same whether the calls come in one export, one by one (the session
/// read back from the store each time) or twice.
#[test]
fn otel_an_agent_used_as_a_tool_is_a_linked_agent_timeline() {
    let sys = ("system", "You orchestrate.", &[][..], "");
    let ask = ("user", "Say hello in Spanish.", &[][..], "");
    let call = [("call_t", "spanish_agent", r#"{"input": "hello"}"#)];
    let calls = ("assistant", "", &call[..], "");
    let result = ("tool", "hola", &[][..], "call_t");
    let spans = vec![
        oi_span(TRACE, 1, 10, &[sys, ask], &[calls]),
        oi_span(
            TRACE,
            2,
            11,
            &[
                ("system", "You translate to Spanish.", &[], ""),
                ("user", "hello", &[], ""),
            ],
            &[("assistant", "hola", &[], "")],
        ),
        oi_span(
            TRACE,
            3,
            12,
            &[sys, ask, calls, result],
            &[("assistant", "In Spanish: hola.", &[], "")],
        ),
    ];
    let thread = format!("trace:{TRACE}");
    let want = vec![
        (
            "agent-1".to_owned(),
            vec![
                (Kind::Invoke, "You orchestrate.".to_owned()),
                (Kind::Invoke, "Say hello in Spanish.".to_owned()),
                (Kind::Request, r#"{"input":"hello"}"#.to_owned()),
                (Kind::Fork, String::new()),
                (Kind::Invoke, "You translate to Spanish.".to_owned()),
                (Kind::Invoke, "hello".to_owned()),
                (Kind::Complete, "hola".to_owned()),
            ],
        ),
        (
            "main".to_owned(),
            vec![
                (Kind::Invoke, "You orchestrate.".to_owned()),
                (Kind::Invoke, "Say hello in Spanish.".to_owned()),
                (Kind::Request, r#"{"input":"hello"}"#.to_owned()),
                (Kind::Response, "hola".to_owned()),
                (Kind::Complete, "In Spanish: hola.".to_owned()),
            ],
        ),
    ];
    let mut together = store();
    ingest_traces(&mut together, &traces(spans.clone()));
    assert_eq!(timelines(&mut together, &thread), want);
    let again = ingest_traces(&mut together, &traces(spans.clone()));
    assert_eq!(again.nodes, 0, "{again:?}");
    let mut one_by_one = store();
    for sp in &spans {
        ingest_traces(&mut one_by_one, &traces(vec![sp.clone()]));
    }
    assert_eq!(timelines(&mut one_by_one, &thread), want);
    // Each call its own trace (a script's calls), through the receiver's
    // cache: the same.
    let mut traced = store();
    let cache = otel::ThreadCache::new();
    for (i, sp) in spans.iter().enumerate() {
        let mut sp = sp.clone();
        sp["traceId"] = json!(format!("{:032x}", 0xabc0 + i));
        let req = decode_traces(&traces(vec![sp]), Encoding::Json, false, LIMIT).unwrap();
        let calls = calls_from_spans(&Batch::traces(&req));
        traced
            .transaction(|l| otel::ingest_cached(l, &calls, 0, &cache))
            .unwrap();
    }
    assert_eq!(
        timelines(&mut traced, &format!("trace:{:032x}", 0xabc0)),
        want
    );

    // Linked both ways, as the proxy links a subagent.
    let id = session_id(&thread);
    let main = together.timeline(&id, &BranchName::main()).unwrap();
    let sub = together
        .timeline(&id, &BranchName::new("agent-1").unwrap())
        .unwrap();
    let link = sub[4].stored.node.diagnostics.to_value()["subagent"].clone();
    assert_eq!(link["started_by"], main[2].stored.hash.to_hex(), "{link}");
    assert_eq!(link["branch"], "main", "{link}");
    assert_eq!(link["tool_call_id"], "call_t", "{link}");
    assert_eq!(link["tool"], "spanish_agent", "{link}");
    let topo = convo_store::topology::topology(&mut together, &id).unwrap();
    let b = topo
        .iter()
        .find(|b| b.branch.name.as_str() == "agent-1")
        .unwrap();
    assert_eq!(b.parent.as_ref().map(|p| p.as_str()), Some("main"));
    let read = b.subagent.as_ref().expect("a subagent's timeline");
    assert_eq!(read["tool"], "spanish_agent");
    assert_eq!(read["started_by"], main[2].stored.hash.to_hex());
}

/// openai-agents hands a conversation to another agent (another system
/// prompt) with what came before summarized in one assistant message
/// (`nest_handoff_history`), then resends the handoff's tool call and
/// result, as exported by OpenInference (captured from
/// openai-agents 0.24): the weather agent's calls continue at the
/// handoff's tool call, on `main`, and the summary is no node of its own
/// (kept on the first node the call adds); the follow-up of another trace
/// continues it, in one export or two (the receiver's cache, or the
/// session read back from the store).
#[test]
fn otel_a_handoffs_summarized_history_is_folded() {
    const OTHER: &str = "1af7651916cd43dd8448eb211c80319d";
    let summary = "For context, here is the conversation so far between the user and the previous agent:\n<CONVERSATION HISTORY>\n1. user: Weather in Paris?\n2. function_call: {\"arguments\": \"{}\", \"call_id\": \"call_0\", \"name\": \"transfer_to_weather\"}\n</CONVERSATION HISTORY>";
    let transfer = [("call_0", "transfer_to_weather", "{}")];
    let weather_sys = ("system", "You know the weather.", &[][..], "");
    let folded = ("assistant", summary, &[][..], "");
    let handoff = ("assistant", "", &transfer[..], "");
    let handed = ("tool", r#"{"assistant": "weather"}"#, &[][..], "call_0");
    let sunny = ("assistant", "It is 18C and sunny in Paris.", &[][..], "");
    let tomorrow = ("user", "And tomorrow?", &[][..], "");
    let spans = vec![
        oi_span(
            TRACE,
            1,
            10,
            &[
                ("system", "Send weather questions on.", &[], ""),
                ("user", "Weather in Paris?", &[], ""),
            ],
            &[handoff],
        ),
        oi_span(
            TRACE,
            2,
            11,
            &[weather_sys, folded, handoff, handed],
            &[sunny],
        ),
        oi_span(
            OTHER,
            3,
            12,
            &[weather_sys, folded, handoff, handed, sunny, tomorrow],
            &[("assistant", "Tomorrow: rain.", &[], "")],
        ),
    ];
    let thread = format!("trace:{TRACE}");
    let want = vec![(
        "main".to_owned(),
        vec![
            (Kind::Invoke, "Send weather questions on.".to_owned()),
            (Kind::Invoke, "Weather in Paris?".to_owned()),
            (Kind::Request, "{}".to_owned()),
            (Kind::Response, r#"{"assistant": "weather"}"#.to_owned()),
            (Kind::Complete, "It is 18C and sunny in Paris.".to_owned()),
            (Kind::Invoke, "And tomorrow?".to_owned()),
            (Kind::Complete, "Tomorrow: rain.".to_owned()),
        ],
    )];
    let mut s = store();
    let w = ingest_traces(&mut s, &traces(spans.clone()));
    assert_eq!(w.sessions.len(), 1, "{w:?}");
    assert_eq!(timelines(&mut s, &thread), want);
    let tl = s
        .timeline(&session_id(&thread), &BranchName::main())
        .unwrap();
    let kept = tl[3].stored.node.diagnostics.to_value();
    let was = &kept["extra"]["rewritten_history"];
    assert_eq!(was[0]["text"], "You know the weather.", "{kept}");
    assert_eq!(was[1]["text"], summary, "{kept}");

    // In two exports: the follow-up's trace found by the receiver's cache;
    // then the handoff again, its session read back from the store.
    let mut s = store();
    let cache = otel::ThreadCache::new();
    let ingest = |s: &mut Store, spans: Vec<Value>, cache: &otel::ThreadCache| {
        let req = decode_traces(&traces(spans), Encoding::Json, false, LIMIT).unwrap();
        let calls = calls_from_spans(&Batch::traces(&req));
        s.transaction(|l| otel::ingest_cached(l, &calls, 0, cache))
            .unwrap()
    };
    ingest(&mut s, spans[..2].to_vec(), &cache);
    let later = ingest(&mut s, spans.clone(), &cache);
    assert_eq!(later.nodes, 2, "{later:?}");
    assert_eq!(timelines(&mut s, &thread), want);
    let again = ingest(&mut s, spans[..2].to_vec(), &otel::ThreadCache::new());
    assert_eq!(again.nodes, 0, "{again:?}");
    assert_eq!(timelines(&mut s, &thread), want);
}
