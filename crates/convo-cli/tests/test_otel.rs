//! The OTLP receiver of `convo serve` (`/v1/traces`, `/v1/logs`), end to
//! end: real GenAI instrumentations around the real `openai` SDK export
//! with their own OTLP exporters, configured only by
//! `OTEL_EXPORTER_OTLP_ENDPOINT`; the protocol's answers and errors over
//! the wire; the token.
use crate::common::TestEnv;
use crate::serve_util::Server;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Command;

fn python() -> Option<String> {
    match std::env::var("CONVO_TEST_PYTHON") {
        Ok(p) => Some(p),
        Err(_) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CONVO_TEST_PYTHON (scripts/test-env)"
            );
            eprintln!("SKIPPED: CONVO_TEST_PYTHON is not set (scripts/test-env sets it up)");
            None
        }
    }
}

/// Runs emit.py MODE exporting to `srv`; what it printed (its answers),
/// `null` when nothing.
fn emit(python: &str, srv: &Server, mode: &str, env: &[(&str, &str)]) -> Value {
    let script = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("tests/otel/emit.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(mode)
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://{}", srv.addr),
        )
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "emit.py {mode}: {stderr}");
    assert!(
        !stderr.contains("Failed to export"),
        "emit.py {mode}: an export failed: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .last()
        .map_or(Value::Null, |l| serde_json::from_str(l).unwrap())
}

/// (kind, from, to, payload) of a session's main timeline, over the API.
fn transcript(srv: &Server, session: &str) -> Vec<(String, String, String, String)> {
    let page = srv
        .get(&format!(
            "/api/v1/sessions/{session}/branches/main/timeline?limit=100"
        ))
        .expect(200);
    page["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let s = |k: &str| n[k].as_str().unwrap_or("").to_owned();
            (s("kind"), s("from"), s("to"), s("payload"))
        })
        .collect()
}

fn expected() -> Vec<(String, String, String, String)> {
    [
        ("invoke", "system", "weather-agent", "You are terse."),
        ("invoke", "user", "weather-agent", "Weather in Paris?"),
        ("request", "assistant", "get_weather", r#"{"city":"Paris"}"#),
        ("response", "get_weather", "weather-agent", "18C sunny"),
        (
            "complete",
            "assistant",
            "user",
            "It is 18C and sunny in Paris.",
        ),
        ("invoke", "user", "weather-agent", "And tomorrow?"),
        ("complete", "assistant", "user", "Tomorrow: rain."),
    ]
    .iter()
    .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
    .collect()
}

fn session_ids(srv: &Server) -> Vec<String> {
    let list = srv.get("/api/v1/sessions").expect(200);
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Each real emitter, exporting to a live server, gives one session with
/// the conversation: every message once (each call resent the history;
/// openai-v2 in latest mode sends it on spans and logs both), the tool
/// call paired with its result.
#[test]
fn otel_real_emitters_export_to_convo_serve() {
    let Some(py) = python() else { return };
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let mut seen: Vec<String> = Vec::new();
    for mode in [
        "openai-v2-latest",
        "openinference",
        "openllmetry",
        "openai-agents",
    ] {
        emit(&py, &srv, mode, &[]);
        let now = session_ids(&srv);
        let new: Vec<&String> = now.iter().filter(|s| !seen.contains(s)).collect();
        assert_eq!(new.len(), 1, "{mode}: one new session, got {new:?}");
        let id = new[0].clone();
        assert_eq!(transcript(&srv, &id), expected(), "{mode}");
        let sess = srv.get(&format!("/api/v1/sessions/{id}")).expect(200);
        assert_eq!(
            sess["session"]["title"], "Weather in Paris?",
            "{mode}: {sess}"
        );
        seen = now;
    }
    let v = srv.get("/api/v1/verify").expect(200);
    assert_eq!(v["ok"], json!(true), "{v}");
}

/// An installed test tool from scripts/test-env (`var`), or `None` outside
/// CI when it is not set.
fn tool_env(var: &str) -> Option<String> {
    let v = std::env::var(var).ok();
    if v.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set {var} (scripts/test-env)"
        );
        eprintln!("SKIPPED: {var} is not set (scripts/test-env sets it up)");
    }
    v
}

/// Pydantic AI instrumented by logfire (`send_to_logfire=False`, its own
/// venv) and the Vercel AI SDK on Node (`@ai-sdk/otel`, both its
/// integrations, `@opentelemetry/exporter-trace-otlp-http`, OTLP/JSON)
/// export to a live server: one session each with the conversation, every
/// message once, the agent spans adding nothing.
#[test]
fn otel_pydantic_ai_and_the_ai_sdk_export_to_convo_serve() {
    let (Some(py), Some(modules)) = (
        tool_env("CONVO_TEST_PYTHON_LOGFIRE"),
        tool_env("CONVO_TEST_NODE_MODULES"),
    ) else {
        return;
    };
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let endpoint = format!("http://{}", srv.addr);
    let mut seen: Vec<String> = Vec::new();
    let mut check = |what: &str, out: std::process::Output| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{what}: {stderr}");
        assert!(!stderr.contains("Failed to export"), "{what}: {stderr}");
        let printed: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap_or(Value::Null);
        assert_eq!(
            printed["answers"],
            json!(["It is 18C and sunny in Paris.", "Tomorrow: rain."]),
            "{what}"
        );
        let now = session_ids(&srv);
        let new: Vec<&String> = now.iter().filter(|s| !seen.contains(s)).collect();
        assert_eq!(new.len(), 1, "{what}: one new session, got {new:?}");
        assert_eq!(transcript(&srv, new[0]), expected(), "{what}");
        seen = now;
    };
    let dir = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("tests/otel");
    let out = Command::new(&py)
        .arg(dir.join("emit.py"))
        .arg("pydantic-ai")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .output()
        .unwrap();
    check("pydantic-ai", out);
    for mode in ["otel", "legacy"] {
        let out = Command::new("node")
            .arg(dir.join("emit-ai-sdk.js"))
            .arg(mode)
            .env("NODE_PATH", &modules)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .output()
            .unwrap();
        check(&format!("ai-sdk {mode}"), out);
    }
    let v = srv.get("/api/v1/verify").expect(200);
    assert_eq!(v["ok"], json!(true), "{v}");
}

/// OpenLLMetry's SDK (`traceloop-sdk`, its own venv: every bundled
/// instrumentation, `Traceloop.init` pointed at the server by
/// `TRACELOOP_BASE_URL` as its users point it elsewhere) exports a run as
/// a `@workflow` to a live server: one session with the conversation,
/// every message once, the tool call paired with its result, the workflow
/// span adding nothing.
#[test]
fn otel_traceloop_sdk_exports_to_convo_serve() {
    let Some(py) = tool_env("CONVO_TEST_PYTHON_TRACELOOP") else {
        return;
    };
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let out = emit(&py, &srv, "traceloop", &[]);
    assert_eq!(
        out["answers"],
        json!(["It is 18C and sunny in Paris.", "Tomorrow: rain."]),
        "{out}"
    );
    let ids = session_ids(&srv);
    assert_eq!(ids.len(), 1, "one session, got {ids:?}");
    assert_eq!(transcript(&srv, &ids[0]), expected());
    let tl = srv
        .get(&format!(
            "/api/v1/sessions/{}/branches/main/timeline?limit=100",
            ids[0]
        ))
        .expect(200);
    let nodes = tl["nodes"].as_array().unwrap();
    let (req, resp) = (&nodes[2], &nodes[3]);
    assert_eq!(
        (req["kind"].as_str(), resp["kind"].as_str()),
        (Some("request"), Some("response"))
    );
    assert_eq!(req["submission"], resp["submission"], "one submission");
    let last = &nodes[nodes.len() - 1]["diagnostics"];
    assert_eq!(last["model"], "gpt-4o-2024-08-06", "{last}");
    assert_eq!(
        last["extra"]["otel"]["call"]["usage"]["input_tokens"],
        json!(20),
        "{last}"
    );
    let v = srv.get("/api/v1/verify").expect(200);
    assert_eq!(v["ok"], json!(true), "{v}");
}

/// Behind a token, the exporters need it in `OTEL_EXPORTER_OTLP_HEADERS`;
/// without it they are refused and nothing is written.
#[test]
fn otel_receiver_wants_the_token() {
    let Some(py) = python() else { return };
    let t = TestEnv::new();
    let srv = Server::start(&t, &["--token", "otel-token"]);
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        b"",
    );
    assert_eq!(r.status, 401);
    emit(
        &py,
        &srv,
        "openai-v2-latest",
        &[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Bearer%20otel-token",
        )],
    );
    let list = srv.req(
        "GET",
        "/api/v1/sessions",
        &[("Authorization", "Bearer otel-token")],
        b"",
    );
    assert_eq!(list.json()["sessions"].as_array().unwrap().len(), 1);
}

fn span_json(trace: &str) -> Value {
    json!({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [{
    "traceId": trace, "spanId": "00f067aa0ba902b7", "name": "chat",
    "startTimeUnixNano": "1800000000000000000", "endTimeUnixNano": "1800000001000000000",
    "attributes": [
        {"key": "gen_ai.input.messages", "value": {"stringValue":
            "[{\"role\":\"user\",\"parts\":[{\"type\":\"text\",\"content\":\"hi\"}]}]"}},
        {"key": "gen_ai.output.messages", "value": {"stringValue":
            "[{\"role\":\"assistant\",\"parts\":[{\"type\":\"text\",\"content\":\"hello\"}]}]"}}
    ]}]}]}]})
}

/// A call's details its node leaves to the kept export body (span and
/// trace ids, latency, the attributes as received) are still shown (the
/// API's timeline, `convo show`) and exported, beside the model and
/// tokens its diagnostics keep.
#[test]
fn otel_call_details_kept_in_the_body_are_shown_and_exported() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut body = span_json(trace);
    let span = &mut body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    let attr = |k: &str, v: Value| json!({"key": k, "value": v});
    span["attributes"].as_array_mut().unwrap().extend([
        attr("gen_ai.request.model", json!({"stringValue": "gpt-4o"})),
        attr(
            "gen_ai.response.model",
            json!({"stringValue": "gpt-4o-2024-08-06"}),
        ),
        attr("gen_ai.usage.input_tokens", json!({"intValue": "12"})),
        attr("gen_ai.usage.output_tokens", json!({"intValue": "3"})),
    ]);
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let ids = session_ids(&srv);
    let page = srv
        .get(&format!(
            "/api/v1/sessions/{}/branches/main/timeline?limit=100&otel=true",
            ids[0]
        ))
        .expect(200);
    let last = page["nodes"].as_array().unwrap().last().unwrap().clone();
    let stored = &last["diagnostics"];
    assert_eq!(stored["model"], "gpt-4o-2024-08-06", "{last}");
    assert_eq!(
        stored["extra"]["otel"]["call"]["usage"]["input_tokens"], 12,
        "{last}"
    );
    assert_eq!(stored["extra"]["otel"].get("span_id"), None, "{last}");
    assert_eq!(stored["extra"]["otel"]["call"].get("attributes"), None);
    let check = |o: &Value, what: &str| {
        assert_eq!(o["span_id"], "00f067aa0ba902b7", "{what}: {o}");
        assert_eq!(o["trace_id"], trace, "{what}: {o}");
        assert_eq!(o["call"]["latency_ms"], 1000, "{what}: {o}");
        assert_eq!(o["call"]["usage"]["output_tokens"], 3, "{what}: {o}");
        assert_eq!(
            o["call"]["attributes"]["gen_ai.request.model"], "gpt-4o",
            "{what}: {o}"
        );
    };
    check(&last["otel"], "the API's timeline");
    // Asked for: a page without it reads no body.
    let plain = srv
        .get(&format!(
            "/api/v1/sessions/{}/branches/main/timeline?limit=100",
            ids[0]
        ))
        .expect(200);
    assert_eq!(plain["nodes"][1].get("otel"), None, "{plain}");
    let hash = last["hash"].as_str().unwrap();
    let page = srv.req(
        "GET",
        &format!("/sessions/{}/nodes/{hash}", ids[0]),
        &[],
        b"",
    );
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(
        html.contains("Telemetry") && html.contains("00f067aa0ba902b7"),
        "the node page: {html}"
    );
    check(
        &t.run(&["show", hash, "--json"]).json()["otel"],
        "show --json",
    );
    let text = t.run(&["show", hash]).ok();
    assert!(
        text.contains("telemetry") && text.contains("00f067aa0ba902b7") && text.contains(trace),
        "{text}"
    );
    let exported = t.run(&["export", &ids[0], "--format", "session-json"]).ok();
    let doc: Value = serde_json::from_str(&exported).unwrap();
    let otel = doc["history"]
        .as_array()
        .and_then(|h| h.iter().find(|e| e["agent"] == "hello"))
        .map(|e| &e["otel"])
        .unwrap_or_else(|| panic!("{exported}"));
    check(otel, "export --format session-json");
    let v = srv.get("/api/v1/verify").expect(200);
    assert_eq!(v["ok"], json!(true), "{v}");
}

/// A span of conversation `trace` for call `i`: its history of `i`
/// question/answer pairs, question `i`, answer `i`.
fn call_span(trace: &str, i: usize) -> Value {
    let msg = |role: &str, text: String| json!({"role": role, "parts": [{"type": "text", "content": text}]});
    let mut input = Vec::new();
    for k in 0..=i {
        input.push(msg("user", format!("{trace} question {k}")));
        if k < i {
            input.push(msg("assistant", format!("{trace} answer {k}")));
        }
    }
    let ns = |s: usize| ((1_800_000_000 + s) as u128 * 1_000_000_000).to_string();
    json!({
    "traceId": trace, "spanId": format!("{:016x}", i + 1), "name": "chat",
    "startTimeUnixNano": ns(2 * i), "endTimeUnixNano": ns(2 * i + 1),
    "attributes": [
        {"key": "gen_ai.input.messages", "value": {"stringValue": Value::Array(input).to_string()}},
        {"key": "gen_ai.output.messages", "value": {"stringValue":
            json!([msg("assistant", format!("{trace} answer {i}"))]).to_string()}},
    ]})
}

/// Many exporters at once, through the server's one writer (their exports
/// and API appends sharing transactions): each conversation's calls sent
/// newest first and then all again (an exporter's retries) give each
/// message once, in order, on `main`; every export acknowledged is stored.
#[test]
fn otel_concurrent_exporters_out_of_order_and_retried_store_each_message_once() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let addr = srv.addr.clone();
    const CALLS: usize = 6;
    let handles: Vec<_> = (0..8)
        .map(|e| {
            let addr = addr.clone();
            // An API client beside the exporter, appending to a session of its own.
            let beside = srv
                .post_json("/api/v1/sessions", &json!({"agent": "beside"}))
                .expect(201)["id"]
                .as_str()
                .unwrap()
                .to_owned();
            std::thread::spawn(move || {
                for c in 0..3 {
                    let trace = format!("{:016x}{:016x}", e + 1, c + 1);
                    for round in 0..2 {
                        for i in (0..CALLS).rev() {
                            let body = json!({"resourceSpans": [{"resource": {"attributes": []},
                                "scopeSpans": [{"spans": [call_span(&trace, i)]}]}]});
                            let r = crate::serve_util::http(
                                &addr,
                                "POST",
                                "/v1/traces",
                                &[("Content-Type", "application/json")],
                                body.to_string().as_bytes(),
                            );
                            assert_eq!(
                                r.status,
                                200,
                                "{trace} call {i} round {round}: {}",
                                r.text()
                            );
                        }
                        for kind in ["invoke", "complete"] {
                            let r = crate::serve_util::http(
                                &addr,
                                "POST",
                                &format!("/api/v1/sessions/{beside}/branches/main/nodes"),
                                &[("Content-Type", "application/json")],
                                json!({"kind": kind, "payload": format!("{e} {c} {round}")})
                                    .to_string()
                                    .as_bytes(),
                            );
                            assert_eq!(r.status, 201, "{}", r.text());
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let ids = session_ids(&srv);
    assert_eq!(ids.len(), 8 * 3 + 8, "one session per conversation");
    for e in 0..8 {
        for c in 0..3 {
            let trace = format!("{:016x}{:016x}", e + 1, c + 1);
            let id = ids
                .iter()
                .find(|id| {
                    let tl = transcript(&srv, id);
                    tl.first()
                        .is_some_and(|n| n.3 == format!("{trace} question 0"))
                })
                .unwrap_or_else(|| panic!("no session for {trace}"));
            let got: Vec<String> = transcript(&srv, id).into_iter().map(|n| n.3).collect();
            let want: Vec<String> = (0..CALLS)
                .flat_map(|i| {
                    [
                        format!("{trace} question {i}"),
                        format!("{trace} answer {i}"),
                    ]
                })
                .collect();
            assert_eq!(got, want, "{trace}");
            let branches = srv
                .get(&format!("/api/v1/sessions/{id}/branches"))
                .expect(200);
            assert_eq!(branches.as_array().unwrap().len(), 1, "{branches}");
        }
    }
    let v = srv.get("/api/v1/verify").expect(200);
    assert_eq!(v["ok"], json!(true), "{v}");
}

/// The protocol over the wire: JSON and gzip accepted, a span without a
/// trace id counted in `partialSuccess`, a body that does not decode a
/// 400 `google.rpc.Status` in the request's encoding, other media types
/// 415; nothing half-written.
#[test]
fn otel_receiver_speaks_otlp_http() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let json_ct = [("Content-Type", "application/json")];

    let mut body = span_json("5b8efff798038103d269b633813fc60c");
    let bad = span_json("");
    body["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array_mut()
        .unwrap()
        .push(bad["resourceSpans"][0]["scopeSpans"][0]["spans"][0].clone());
    let r = srv.req("POST", "/v1/traces", &json_ct, body.to_string().as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let ans = r.json();
    assert_eq!(ans["partialSuccess"]["rejectedSpans"], json!(1), "{ans}");
    assert!(
        ans["partialSuccess"]["errorMessage"]
            .as_str()
            .unwrap()
            .contains("trace id")
    );
    assert_eq!(session_ids(&srv).len(), 1);

    // The same body again, gzipped: stored once.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, body.to_string().as_bytes()).unwrap();
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[
            ("Content-Type", "application/json"),
            ("Content-Encoding", "gzip"),
        ],
        &gz.finish().unwrap(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let ids = session_ids(&srv);
    assert_eq!(ids.len(), 1);
    assert_eq!(transcript(&srv, &ids[0]).len(), 2);

    // Malformed protobuf: 400 with a protobuf google.rpc.Status (code 3).
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        b"\x0a\xff\xff\xff\xff\x0f",
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(r.body.first(), Some(&0x08), "field 1 (code), varint");
    assert_eq!(r.body.get(1), Some(&3), "INVALID_ARGUMENT");

    // Malformed JSON on /v1/logs: 400 with a JSON status.
    let r = srv.req("POST", "/v1/logs", &json_ct, b"{\"resourceLogs\": 5}");
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["code"], json!(3));

    // Not OTLP at all.
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/xml")],
        b"<x/>",
    );
    assert_eq!(r.status, 415);
    assert_eq!(session_ids(&srv).len(), 1, "nothing half-written");

    // Both routes are in the OpenAPI document.
    let doc = srv.get("/openapi.json").expect(200);
    for path in ["/v1/traces", "/v1/logs"] {
        assert!(
            doc["paths"][path]["post"].is_object(),
            "{path} undocumented"
        );
    }

    // An empty export is a success.
    let r = srv.req("POST", "/v1/logs", &json_ct, b"{}");
    assert_eq!(r.status, 200, "{}", r.text());
}

/// `convo otel --listen`: the receiver alone, from the same server
/// assembly: OTLP recorded (seen by the CLI on the same store), the API
/// and the web view not served, the Host and token guards as on `serve`.
#[test]
fn otel_standalone_receiver_records_behind_the_same_guards() {
    let t = TestEnv::new();
    let srv = Server::launch(
        &t,
        &[
            "otel",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--token",
            "otel-token",
        ],
    );
    let json_ct = ("Content-Type", "application/json");
    let auth = ("Authorization", "Bearer otel-token");
    let body = span_json("5b8efff798038103d269b633813fc60c").to_string();
    let r = srv.req("POST", "/v1/traces", &[json_ct], body.as_bytes());
    assert_eq!(r.status, 401, "the token is wanted: {}", r.text());
    let r = crate::serve_util::http_host(
        &srv.addr,
        "evil.example",
        "POST",
        "/v1/traces",
        &[json_ct, auth],
        body.as_bytes(),
    );
    assert_eq!(r.status, 403, "a foreign Host is refused: {}", r.text());
    let r = srv.req("POST", "/v1/traces", &[json_ct, auth], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    // A full success: `{}` (OTLP/JSON leaves an unset field out; `null`
    // is not a partial-success object).
    assert_eq!(r.json(), json!({}), "a full success: {}", r.text());
    // Only the receiver: no API, no web view.
    assert_eq!(srv.req("GET", "/api/v1/sessions", &[auth], b"").status, 404);
    assert_eq!(srv.req("GET", "/", &[auth], b"").status, 404);
    assert_eq!(srv.req("GET", "/v1/traces", &[auth], b"").status, 405);
    assert_eq!(srv.req("GET", "/api/v1/health", &[auth], b"").status, 200);
    let list = t.run(&["session", "list", "--json"]).json();
    let sessions = list.as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{list}");
    assert_eq!(sessions[0]["title"], "hi", "{list}");
    // Forked by hand, then the conversation goes on over OTLP: the next
    // call continues `main` (the receiver sees the new branch and reads
    // the session again), the fork stays.
    let id = sessions[0]["id"].as_str().unwrap().to_owned();
    t.run(&[
        "session", "fork", &id, "--from", "main@1", "--branch", "by-hand",
    ])
    .ok();
    let mut next = span_json("5b8efff798038103d269b633813fc60c");
    let span = &mut next["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    span["spanId"] = json!("00f067aa0ba902b8");
    span["startTimeUnixNano"] = json!("1800000002000000000");
    span["endTimeUnixNano"] = json!("1800000003000000000");
    span["attributes"] = json!([
        {"key": "gen_ai.input.messages", "value": {"stringValue": json!([
            {"role": "user", "parts": [{"type": "text", "content": "hi"}]},
            {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]},
            {"role": "user", "parts": [{"type": "text", "content": "more?"}]}]).to_string()}},
        {"key": "gen_ai.output.messages", "value": {"stringValue": json!([
            {"role": "assistant", "parts": [{"type": "text", "content": "yes"}]}]).to_string()}}
    ]);
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[json_ct, auth],
        next.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let log = t.run(&["log", &id, "--json"]).json();
    // Newest first.
    let payloads: Vec<&str> = log
        .as_array()
        .unwrap_or_else(|| panic!("{log}"))
        .iter()
        .map(|n| n["payload"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(payloads, ["yes", "more?", "hello", "hi"], "{log}");
    let branches = t.run(&["branch", "list", &id, "--json"]).ok();
    assert!(branches.contains("by-hand"), "{branches}");
    assert_eq!(t.run(&["verify"]).code(), 0);
    let status = srv.stop();
    assert!(status.success(), "convo otel stops cleanly: {status:?}");
}

/// A session received as telemetry replays: the real `openai` SDK
/// instrumented by openai-v2 (then OpenInference) exports to `convo
/// serve`, its scripted upstream is gone, and the same script against
/// `convo proxy --replay SESSION` gets the same answers (rebuilt from the
/// recorded messages, matched by conversation and model), non-streamed and
/// streamed; its exports of the replayed run store nothing new.
/// OpenInference captured each whole answer (`output.value`): a call
/// gets it back byte for byte. A timeline forked after call 2 replays
/// calls 1 and 2, and call 3 is not in it.
#[test]
fn otel_session_replays_through_the_proxy_and_forks() {
    let Some(py) = python() else { return };
    for mode in ["openai-v2-latest", "openinference"] {
        let t = TestEnv::new();
        let srv = Server::start(&t, &[]);
        let live = emit(&py, &srv, mode, &[]);
        let answers = live["answers"].clone();
        assert_eq!(
            answers,
            json!([
                {"content": null, "tool_calls": [["get_weather", {"city": "Paris"}]]},
                {"content": "It is 18C and sunny in Paris.", "tool_calls": []},
                {"content": "Tomorrow: rain.", "tool_calls": []},
            ]),
            "{mode}: {live}"
        );
        let ids = session_ids(&srv);
        assert_eq!(ids.len(), 1, "{mode}");
        let id = ids[0].clone();
        // The emitter's exports are answered once stored; a loaded machine
        // may still be storing one its exporter gave up waiting for.
        let complete = |t: &[(String, String, String, String)]| {
            ["Weather in Paris?", "Tomorrow: rain.", "And tomorrow?"]
                .iter()
                .all(|w| t.iter().any(|n| n.3.contains(w)))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut before = transcript(&srv, &id);
        while !complete(&before) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            before = transcript(&srv, &id);
        }
        assert!(complete(&before), "{mode}: the live run stored: {before:?}");
        let proxy = |target: &str| {
            Server::launch(
                &t,
                &[
                    "proxy",
                    "--listen",
                    "127.0.0.1:0",
                    "--quiet",
                    "--replay",
                    target,
                ],
            )
        };
        let replay = |target: &str, stream: bool| {
            let p = proxy(target);
            let url = format!("http://{}/v1", p.addr);
            let mut env = vec![("CONVO_EMIT_BASE_URL", url.as_str())];
            if stream {
                env.push(("CONVO_EMIT_STREAM", "1"));
            }
            let got = emit(&py, &srv, mode, &env);
            p.stop();
            got["answers"].clone()
        };
        assert_eq!(
            replay(&id, false),
            answers,
            "{mode}: replayed from {before:?}"
        );
        assert_eq!(replay(&id, true), answers, "{mode}: replayed as streams");
        assert_eq!(
            transcript(&srv, &id),
            before,
            "{mode}: the replayed runs' exports stored nothing new"
        );
        let page = srv
            .get(&format!(
                "/api/v1/sessions/{id}/branches/main/timeline?limit=100&otel=true"
            ))
            .expect(200);
        let nodes = page["nodes"].as_array().unwrap().clone();
        if mode == "openinference" {
            // Call 1's answer (the tool call) as OpenInference captured it.
            let whole = nodes[2]["otel"]["call"]["attributes"]["output.value"]
                .as_str()
                .unwrap_or_else(|| panic!("no output.value: {}", nodes[2]))
                .to_owned();
            let p = proxy(&id);
            let r = p.req(
                "POST",
                "/v1/chat/completions",
                &[("Content-Type", "application/json")],
                json!({"model": "gpt-4o", "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Weather in Paris?"}]})
                .to_string()
                .as_bytes(),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            assert_eq!(r.text(), whole, "byte for byte as captured");
            continue;
        }

        // Fork after call 2's answer: calls 1 and 2 replay, 3 is not recorded.
        assert_eq!(nodes[4]["payload"], "It is 18C and sunny in Paris.");
        let at = nodes[4]["hash"].as_str().unwrap();
        t.run(&[
            "session",
            "fork",
            &id,
            "--from",
            at,
            "--branch",
            "at-call-2",
        ])
        .ok();
        let forked = replay(&format!("{id}:at-call-2"), false);
        assert_eq!(forked.as_array().unwrap().len(), 3, "{forked}");
        assert_eq!(forked[0], answers[0]);
        assert_eq!(forked[1], answers[1]);
        assert_eq!(
            forked[2],
            json!({"error": 400, "code": "replay_exhausted"}),
            "{forked}"
        );
        let v = srv.get("/api/v1/verify").expect(200);
        assert_eq!(v["ok"], json!(true), "{v}");
    }
}

/// The export bodies a session was recorded from come back byte for byte:
/// each real emitter's capture (protobuf and OTLP/JSON, one of them
/// gzipped on the wire, a log export of the same run that writes no node)
/// posted to a live `convo serve`, then `convo export --format otlp`; a
/// retried export is kept once.
#[test]
fn otel_export_bodies_come_back_byte_for_byte() {
    use std::io::Write as _;
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let fixtures = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-llm/tests/fixtures/otel");
    // (fixture, path, content type, gzip on the wire)
    let sends = [
        (
            "openai-v2-2.4b0-latest.traces.pb",
            "/v1/traces",
            "application/x-protobuf",
            false,
        ),
        (
            "openai-v2-2.4b0-latest.logs.pb",
            "/v1/logs",
            "application/x-protobuf",
            true,
        ),
        (
            "openinference-openai-0.1.66.traces.pb",
            "/v1/traces",
            "application/x-protobuf",
            false,
        ),
        (
            "ai-sdk-7.0.173-otel-1.0.173.traces.json",
            "/v1/traces",
            "application/json",
            true,
        ),
        (
            "pydantic-ai-2.68.0-logfire-5.4.0.traces.pb",
            "/v1/traces",
            "application/x-protobuf",
            false,
        ),
    ];
    let mut sent: std::collections::BTreeMap<String, Vec<Vec<u8>>> = Default::default();
    let mut seen: Vec<String> = Vec::new();
    for (name, path, ct, gzip) in sends {
        let body = std::fs::read(fixtures.join(name)).unwrap();
        let wire = if gzip {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(&body).unwrap();
            e.finish().unwrap()
        } else {
            body.clone()
        };
        let mut headers = vec![("content-type", ct)];
        if gzip {
            headers.push(("content-encoding", "gzip"));
        }
        let r = srv.req("POST", path, &headers, &wire);
        assert_eq!(r.status, 200, "{name}: {}", r.text());
        // A retry (the same body again) is kept once.
        if name.contains("openinference") {
            assert_eq!(srv.req("POST", path, &headers, &wire).status, 200);
        }
        let now = session_ids(&srv);
        let new: Vec<String> = now.iter().filter(|s| !seen.contains(s)).cloned().collect();
        // The logs of openai-v2's run go to its session (no new one).
        let session = match new.as_slice() {
            [s] => s.clone(),
            [] => sent.keys().last().cloned().unwrap(),
            more => panic!("{name}: sessions {more:?}"),
        };
        seen = now;
        sent.entry(session).or_default().push(body);
    }
    for (session, bodies) in &sent {
        let dir = t.home().join(format!("otlp-{session}"));
        t.run(&[
            "export",
            session,
            "--format",
            "otlp",
            "-o",
            dir.to_str().unwrap(),
        ])
        .ok();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        let back: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
        assert_eq!(back.len(), bodies.len(), "{session}: {files:?}");
        for (b, s) in back.iter().zip(bodies) {
            assert!(
                b == s,
                "{session}: a body came back different ({} vs {} bytes)",
                b.len(),
                s.len()
            );
        }
    }
    // A session that was not received over OTLP has none.
    let other = t.session("plain");
    let r = t.run(&[
        "export",
        &other,
        "--format",
        "otlp",
        "-o",
        t.home().join("none").to_str().unwrap(),
    ]);
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("no OTLP export bodies"),
        "{}",
        r.stderr()
    );
}

/// A body over the server's limit is answered `413` with a
/// `google.rpc.Status` (code 3) in the request's encoding, as OTLP/HTTP
/// wants (it used to be axum's text/plain), and nothing is stored.
#[test]
fn otel_body_over_the_limit_is_a_413_status_in_the_request_encoding() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &["--max-body-mib", "1"]);
    let big = vec![b' '; 1536 * 1024];
    let r = srv.req(
        "POST",
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &big,
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(r.body.first(), Some(&0x08), "field 1 (code), varint");
    assert_eq!(r.body.get(1), Some(&3), "INVALID_ARGUMENT");
    let r = srv.req(
        "POST",
        "/v1/logs",
        &[("Content-Type", "application/json")],
        &big,
    );
    assert_eq!(r.status, 413, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["code"], json!(3), "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("limit"));
    assert_eq!(session_ids(&srv).len(), 0);
}

/// emit.py's scripted model, for the proxy's upstream: a tool call for the
/// first question, then answers.
fn weather_model(_: usize, _: &str, req: &Value) -> Value {
    let last = req["messages"].as_array().and_then(|m| m.last()).cloned();
    let last = last.unwrap_or(Value::Null);
    let hands_off = req["tools"].as_array().is_some_and(|t| {
        t.iter()
            .any(|t| t["function"]["name"] == "transfer_to_weather")
    });
    let (msg, finish) = if hands_off && last["role"] == "user" {
        (
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_0",
                "type": "function", "function": {"name": "transfer_to_weather",
                "arguments": "{}"}}]}),
            "tool_calls",
        )
    } else if last["role"] == "tool" {
        (
            json!({"role": "assistant", "content": "It is 18C and sunny in Paris."}),
            "stop",
        )
    } else if last["content"] == "And tomorrow?" {
        (
            json!({"role": "assistant", "content": "Tomorrow: rain."}),
            "stop",
        )
    } else {
        (
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
                "type": "function", "function": {"name": "get_weather",
                "arguments": "{\"city\":\"Paris\"}"}}]}),
            "tool_calls",
        )
    };
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1800000000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}})
}

/// A store's conversations as a user reads them: per session (by title),
/// per timeline (by name), the text answers, oldest first.
type Tree = Vec<(String, Vec<(String, Vec<String>)>)>;

fn tree(t: &TestEnv) -> Tree {
    let v = t.run(&["session", "list", "--json"]).json();
    let list = v.get("sessions").cloned().unwrap_or(v);
    let mut out: Tree = Vec::new();
    for s in list.as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        let title = s["title"].as_str().unwrap_or("").to_owned();
        let b = t.run(&["branch", "list", id, "--json"]).json();
        let b = b.get("branches").cloned().unwrap_or(b);
        let mut timelines = Vec::new();
        for br in b.as_array().unwrap() {
            let name = br["name"].as_str().unwrap().to_owned();
            let nodes = t.run(&["log", id, "--branch", &name, "--json"]).json();
            let mut answers: Vec<String> = nodes
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["kind"] == "complete")
                .filter_map(|n| n["payload"].as_str())
                .filter(|p| !p.is_empty() && !p.starts_with('{'))
                .map(str::to_owned)
                .collect();
            answers.reverse();
            timelines.push((name, answers));
        }
        timelines.sort();
        out.push((title, timelines));
    }
    out.sort();
    out
}

/// Waits until `t`'s store holds `want` (a receiver may still be writing
/// the last export the emitter sent), then gives what it holds.
fn settled(t: &TestEnv, want: &Tree) -> Tree {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let got = tree(t);
        if &got == want || std::time::Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A plain script's conversation, each call its own trace (no agent span
/// around them), sent through `convo proxy` and exported by the real
/// instrumentation to `convo serve` in the same run: OpenTelemetry's
/// openai-v2 on the latest conventions in each capture mode that carries
/// the messages (on spans, in log events, both), and OpenInference. The
/// receiver gives the tree the proxy gives: one session, one timeline,
/// the same answers.
#[test]
fn otel_each_call_its_own_trace_is_one_session_as_through_the_proxy() {
    let Some(py) = python() else { return };
    let up = crate::test_harness::Upstream::start(weather_model);
    let runs: [(&str, &[(&str, &str)]); 4] = [
        (
            "openai-v2-latest",
            &[(
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "SPAN_ONLY",
            )],
        ),
        (
            "openai-v2-latest",
            &[(
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "EVENT_ONLY",
            )],
        ),
        (
            "openai-v2-latest",
            &[(
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "SPAN_AND_EVENT",
            )],
        ),
        ("openinference", &[]),
    ];
    for (mode, capture) in runs {
        let via_proxy = TestEnv::new();
        let via_otel = TestEnv::new();
        let srv = Server::start(&via_otel, &[]);
        let proxy = Server::launch(
            &via_proxy,
            &[
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--quiet",
                "--upstream",
                &up.url,
            ],
        );
        let base = format!("http://{}/v1", proxy.addr);
        let mut env = vec![
            ("CONVO_EMIT_TRACES", "each"),
            ("CONVO_EMIT_BASE_URL", base.as_str()),
        ];
        env.extend_from_slice(capture);
        let out = emit(&py, &srv, mode, &env);
        assert_eq!(
            out["answers"][2]["content"], "Tomorrow: rain.",
            "{mode} {capture:?}: {out}"
        );
        proxy.stop();
        let want = tree(&via_proxy);
        assert_eq!(
            want,
            vec![(
                "Weather in Paris?".to_owned(),
                vec![(
                    "main".to_owned(),
                    vec![
                        "It is 18C and sunny in Paris.".to_owned(),
                        "Tomorrow: rain.".to_owned()
                    ]
                )]
            )],
            "through the proxy"
        );
        settled(&via_otel, &want);
        // EVENT_ONLY: the spans come first and say nothing of the
        // messages; held, they are not also recorded as calls without
        // content once their log events bring the conversation. A server
        // that stops writes what it holds: the whole store, afterwards.
        let v = srv.get("/api/v1/verify").expect(200);
        assert_eq!(v["ok"], json!(true), "{v}");
        assert!(srv.stop().success());
        assert_eq!(tree(&via_otel), want, "{mode} {capture:?}: as telemetry");
    }
}

/// The instrumentations' default (`NO_CONTENT`): each call is still
/// recorded (model, tokens, latency, status), in one session of the
/// agent's calls, whose first call says how to capture the messages; the
/// server's log says it once.
#[test]
fn otel_calls_without_content_are_recorded_and_say_how_to_capture_them() {
    use std::io::Read as _;
    let Some(py) = python() else { return };
    let t = TestEnv::new();
    let mut srv = Server::start(&t, &[]);
    for _ in 0..2 {
        let out = emit(
            &py,
            &srv,
            "openai-v2-latest",
            &[
                ("CONVO_EMIT_TRACES", "each"),
                (
                    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                    "NO_CONTENT",
                ),
            ],
        );
        assert_eq!(out["answers"][2]["content"], "Tomorrow: rain.", "{out}");
    }
    // Held a while for messages that may follow in log events (none do).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let list = loop {
        let list = t.run(&["session", "list", "--json"]).json();
        let list = list.get("sessions").cloned().unwrap_or(list);
        let list = list.as_array().unwrap().clone();
        if !list.is_empty() || std::time::Instant::now() > deadline {
            break list;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(
        list[0]["title"],
        "weather-agent: calls without their messages"
    );
    let id = list[0]["id"].as_str().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let calls = loop {
        let nodes = t.run(&["log", id, "--json"]).json();
        let calls: Vec<Value> = nodes
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "complete")
            .cloned()
            .rev()
            .collect();
        if calls.len() >= 6 || std::time::Instant::now() > deadline {
            break calls;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(calls.len(), 6, "two runs of three calls: {calls:?}");
    for (i, c) in calls.iter().enumerate() {
        let d = &c["diagnostics"];
        let otel = &d["extra"]["otel"];
        assert_eq!(otel["call"]["content"], json!(false), "{c}");
        assert_eq!(otel["call"]["usage"]["input_tokens"], json!(20), "{c}");
        assert_eq!(otel["call"]["usage"]["output_tokens"], json!(7), "{c}");
        assert_eq!(d["model"], "gpt-4o-2024-08-06", "{c}");
        assert!(otel["call"]["latency_ms"].is_number(), "{c}");
        assert_eq!(
            otel["hint"].is_string(),
            i == 0,
            "the hint once, on the first call: {c}"
        );
    }
    assert!(
        calls[0]["diagnostics"]["extra"]["otel"]["hint"]
            .as_str()
            .unwrap()
            .contains("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
    );
    let mut err = srv.child.stderr.take().unwrap();
    srv.child.kill().unwrap();
    srv.child.wait().unwrap();
    let mut log = String::new();
    err.read_to_string(&mut log).unwrap();
    assert_eq!(
        log.matches("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .count(),
        1,
        "said once: {log}"
    );
}

/// An openai-agents handoff (a triage agent hands the question to a
/// weather agent: another system prompt), then the follow-up, each run
/// its own trace, sent through `convo proxy` and exported by
/// OpenInference's openai-agents instrumentation in the same run: the
/// receiver gives the sessions and timelines the proxy gives, one session
/// on one timeline, the same answers in order.
#[test]
fn otel_openai_agents_handoff_is_one_session_as_through_the_proxy() {
    let Some(py) = python() else { return };
    let up = crate::test_harness::Upstream::start(weather_model);
    let via_proxy = TestEnv::new();
    let via_otel = TestEnv::new();
    let srv = Server::start(&via_otel, &[]);
    let proxy = Server::launch(
        &via_proxy,
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--upstream",
            &up.url,
        ],
    );
    let base = format!("http://{}/v1", proxy.addr);
    let out = emit(
        &py,
        &srv,
        "openai-agents-handoff",
        &[("CONVO_EMIT_BASE_URL", base.as_str())],
    );
    assert_eq!(out["agents"], json!(["weather", "weather"]), "{out}");
    assert_eq!(out["answers"][1], "Tomorrow: rain.", "{out}");
    assert!(proxy.stop().success());
    let want = tree(&via_proxy);
    assert_eq!(
        want,
        vec![(
            "Weather in Paris?".to_owned(),
            vec![(
                "main".to_owned(),
                vec![
                    "It is 18C and sunny in Paris.".to_owned(),
                    "Tomorrow: rain.".to_owned()
                ]
            )]
        )],
        "through the proxy"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while tree(&via_otel).len() != 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(srv.stop().success());
    let got = tree(&via_otel);
    // The same sessions, timelines and answers: the history openai-agents
    // summarized for the weather agent is no answer of its own (folded,
    // as the proxy keeps it inside the request).
    assert_eq!(got, want, "as telemetry");
}
