//! A scripted upstream for the proxy's tests: a small axum server that
//! answers like OpenAI and Anthropic would, deterministically.
//!
//! - `POST /v1/chat/completions`: answers `echo: {last user text}`; with
//!   `tools` in the request, a call to the first tool; `"stream": true`
//!   sends SSE chunks in separate writes (an SSE comment line first), the
//!   usage-only chunk when `stream_options.include_usage` is set, then
//!   `[DONE]` (with `include_usage`, every chunk has `"usage":null`, as
//!   OpenAI's do). Model `strict` refuses `stream_options` with a 400
//!   (as some OpenAI-compatible servers do). Model `rate-limited` answers 429; model `cut` sends one chunk
//!   and breaks the connection; `cut-mid` (streamed) breaks it half way
//!   through its last event.
//! - `POST /v1/messages`: the same for Anthropic Messages (events
//!   `message_start` … `message_stop`, tool use with `input_json_delta`).
//! - `POST /v1/responses`: the Responses API, `echo: {input}` plus
//!   ` (after {previous_response_id})` when there is one; each answer a new
//!   id `resp_{n}`; streamed as `response.created` … `response.completed`.
//! - `GET /v1/models`, `POST /v1/embeddings`: fixed answers.
//! - `POST /v1/files`, `POST /v1/audio/transcriptions` (multipart
//!   uploads): a file object, a transcription naming the body's length.
//! - Chat models that script failures: `rate-limited` (429 with
//!   `retry-after`), `server-error` (503 with a body), `slow` (answers
//!   after 2 s), `dribble` (a stream of 100 chunks 20 ms apart), `big-N`
//!   (a stream of N MiB in 64 KiB events, made as it is sent), `flaky`
//!   (429 on its first call, an answer on its second, and so on).
//!
//! Every request's headers and body are kept in `Seen` for the tests.

#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the upstream received.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub calls: Arc<Mutex<Vec<(HeaderMap, Value)>>>,
}

impl Seen {
    pub fn last(&self) -> (HeaderMap, Value) {
        self.calls.lock().unwrap().last().cloned().unwrap()
    }
}

#[derive(Debug)]
pub struct Upstream {
    pub url: String,
    pub seen: Seen,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let seen = Seen::default();
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/messages", post(messages))
            .route("/v1/models", get(models))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/responses", post(responses))
            .route("/v1/files", post(files))
            .route("/v1/audio/transcriptions", post(transcriptions))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Upstream {
            url,
            seen,
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
    }
}

fn last_user_text(req: &Value) -> String {
    let msgs = req["messages"].as_array().cloned().unwrap_or_default();
    let Some(m) = msgs.iter().rev().find(|m| m["role"] == "user") else {
        return String::new();
    };
    match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The head and tail of the `json-N` answers around their `y`s.
pub const BIG_JSON_HEAD: &str = r#"{"id":"chatcmpl-big","object":"chat.completion","model":"json","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":""#;
pub const BIG_JSON_TAIL: &str =
    r#""}}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#;

fn sse(events: Vec<String>, cut: bool) -> Response {
    let stream = async_stream(events, cut);
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("x-request-id", "req_scripted")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn async_stream(
    events: Vec<String>,
    cut: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    let n = events.len();
    futures_util::stream::unfold(0usize, move |i| {
        let events = events.clone();
        async move {
            if i > n || (i == n && !cut) {
                return None;
            }
            if i == n {
                return Some((Err(std::io::Error::other("scripted cut")), i + 1));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            Some((Ok(Bytes::from(events[i].clone())), i + 1))
        }
    })
}

async fn chat(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    seen.calls.lock().unwrap().push((headers, req.clone()));
    let model = req["model"].as_str().unwrap_or("scripted").to_owned();
    if model == "strict" && req.get("stream_options").is_some() {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {"message": "Unrecognized request argument supplied: stream_options"}})),
        )
            .into_response();
    }
    if model == "server-error" {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("x-request-id", "req_503")],
            "{\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}",
        )
            .into_response();
    }
    if model == "slow" {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    if model == "dribble" {
        let stream = futures_util::stream::unfold(0u32, |i| async move {
            if i >= 100 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let ev = format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": format!("{i} ")}}]})
            );
            Some((Ok::<Bytes, std::io::Error>(Bytes::from(ev)), i + 1))
        });
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    if let Some(mib) = model
        .strip_prefix("big-")
        .and_then(|n| n.parse::<usize>().ok())
    {
        let filler = "x".repeat(64 * 1024 - 64);
        let event = Bytes::from(format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": filler}}]})
        ));
        let n = mib * 1024 * 1024 / event.len() + 1;
        let stream = futures_util::stream::iter(0..n)
            .map(move |_| Ok::<Bytes, std::io::Error>(event.clone()))
            .chain(futures_util::stream::once(async {
                Ok(Bytes::from_static(b"data: [DONE]\n\n"))
            }));
        return Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    if let Some(rest) = model.strip_prefix("json-") {
        // A non-streamed answer of N MiB (`json-N`), or cut after it
        // (`json-N-cut`), sent in 64 KiB chunks.
        let (mib, cut) = match rest.strip_suffix("-cut") {
            Some(m) => (m, true),
            None => (rest, false),
        };
        let n = mib.parse::<usize>().unwrap_or(1) * 16;
        let filler = Bytes::from(vec![b'y'; 64 * 1024]);
        let end: Result<Bytes, std::io::Error> = if cut {
            Err(std::io::Error::other("scripted cut"))
        } else {
            Ok(Bytes::from_static(BIG_JSON_TAIL.as_bytes()))
        };
        let stream = futures_util::stream::iter(
            std::iter::once(Ok(Bytes::from_static(BIG_JSON_HEAD.as_bytes())))
                .chain((0..n).map(move |_| Ok(filler.clone())))
                .chain(std::iter::once(end)),
        );
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from_stream(stream))
            .unwrap();
    }
    let flaky = seen
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["model"] == "flaky")
        .count();
    if model == "rate-limited" || (model == "flaky" && flaky % 2 == 1) {
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [("x-request-id", "req_429"), ("retry-after", "1")],
            axum::Json(json!({"error": {"message": "slow down", "type": "rate_limit"}})),
        )
            .into_response();
    }
    let text = format!("echo: {}", last_user_text(&req));
    let tool = req["tools"][0]["function"]["name"]
        .as_str()
        .map(str::to_owned);
    let usage = json!({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8});
    if req["stream"] == true {
        // As OpenAI does, `include_usage` adds `"usage":null` to every chunk.
        let with_usage = req["stream_options"]["include_usage"] == true;
        let head = |delta: Value, finish: Value| {
            let mut chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                       "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            if with_usage {
                chunk["usage"] = Value::Null;
            }
            format!("data: {chunk}\n\n")
        };
        let mut ev = vec![": PROCESSING\n\n".to_owned()];
        ev.push(head(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ));
        match &tool {
            Some(name) => {
                ev.push(head(
                    json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                        "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ));
                ev.push(head(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
                    Value::Null,
                ));
                ev.push(head(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                    Value::Null,
                ));
                ev.push(head(json!({}), json!("tool_calls")));
            }
            None => {
                let (a, b) = text.split_at(text.len() / 2);
                ev.push(head(json!({"content": a}), Value::Null));
                ev.push(head(json!({"content": b}), Value::Null));
                ev.push(head(json!({}), json!("stop")));
            }
        }
        if req["stream_options"]["include_usage"] == true {
            ev.push(format!(
                "data: {}\n\n",
                json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
                       "model": model, "choices": [], "usage": usage})
            ));
        }
        ev.push("data: [DONE]\n\n".to_owned());
        if model == "cut-mid" {
            // Cut inside an event: the last one half sent.
            ev.pop();
            if let Some(last) = ev.last_mut() {
                last.truncate(last.len() / 2);
            }
        }
        return sse(ev, model == "cut" || model == "cut-mid");
    }
    let message = match &tool {
        Some(name) => json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{\"city\":\"Paris\"}"}}]}),
        None => json!({"role": "assistant", "content": text, "refusal": null}),
    };
    (
        [
            ("x-request-id", "req_scripted"),
            ("x-ratelimit-remaining-requests", "99"),
            ("x-ratelimit-reset-tokens", "6ms"),
            ("set-cookie", "session=sk-cookie-should-not-be-recorded"),
        ],
        axum::Json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": message,
                "finish_reason": if tool.is_some() { "tool_calls" } else { "stop" }}],
            "usage": usage,
        })),
    )
        .into_response()
}

async fn messages(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    seen.calls.lock().unwrap().push((headers, req.clone()));
    let model = req["model"]
        .as_str()
        .unwrap_or("claude-scripted")
        .to_owned();
    let text = format!("echo: {}", last_user_text(&req));
    let tool = req["tools"][0]["name"].as_str().map(str::to_owned);
    if req["stream"] == true {
        let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
        let mut out = vec![ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        )];
        out.push(ev("ping", json!({"type": "ping"})));
        match &tool {
            Some(name) => {
                out.push(ev("content_block_start", json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}})));
                out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": "{\"city\": \"Paris\"}"}})));
            }
            None => {
                out.push(ev(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
                ));
                out.push(ev(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text}}),
                ));
            }
        }
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        out.push(ev("message_delta", json!({"type": "message_delta",
            "delta": {"stop_reason": if tool.is_some() { "tool_use" } else { "end_turn" }, "stop_sequence": null},
            "usage": {"output_tokens": 3}})));
        out.push(ev("message_stop", json!({"type": "message_stop"})));
        return sse(out, false);
    }
    let content = match &tool {
        Some(name) => {
            json!([{"type": "tool_use", "id": "toolu_1", "name": name, "input": {"city": "Paris"}}])
        }
        None => json!([{"type": "text", "text": text}]),
    };
    (
        [("request-id", "req_anthropic")],
        axum::Json(
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": if tool.is_some() { "tool_use" } else { "end_turn" },
            "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 3}}),
        ),
    )
        .into_response()
}

/// A multipart upload, kept whole (as a JSON string) in `Seen`.
fn upload(seen: &Seen, headers: HeaderMap, body: &Bytes) {
    let text = String::from_utf8_lossy(body).into_owned();
    seen.calls.lock().unwrap().push((headers, json!(text)));
}

async fn files(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    upload(&seen, headers, &body);
    axum::Json(
        json!({"id": "file-1", "object": "file", "bytes": body.len(), "created_at": 1,
        "filename": "upload", "purpose": "batch", "status": "processed"}),
    )
    .into_response()
}

async fn transcriptions(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    upload(&seen, headers, &body);
    axum::Json(json!({"text": format!("heard {} bytes", body.len())})).into_response()
}

async fn models() -> Response {
    axum::Json(json!({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 1, "owned_by": "tests"}]}))
        .into_response()
}

async fn embeddings(body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    axum::Json(json!({"object": "list", "model": req["model"],
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
        "usage": {"prompt_tokens": 2, "total_tokens": 2}}))
    .into_response()
}

fn input_text(req: &Value) -> String {
    match &req["input"] {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                _ => String::new(),
            })
            .unwrap_or_default(),
        _ => String::new(),
    }
}

async fn responses(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    let n = {
        let mut calls = seen.calls.lock().unwrap();
        calls.push((headers, req.clone()));
        calls.len()
    };
    let model = req["model"].as_str().unwrap_or("scripted").to_owned();
    let mut text = format!("echo: {}", input_text(&req));
    if let Some(prev) = req["previous_response_id"].as_str() {
        text.push_str(&format!(" (after {prev})"));
    }
    let id = format!("resp_{n}");
    let msg_id = format!("msg_{n}");
    let usage = json!({"input_tokens": 4, "output_tokens": 2, "total_tokens": 6,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}});
    let item = |content: Value, status: &str| json!({"type": "message", "id": msg_id, "status": status, "role": "assistant", "content": content});
    let part = json!({"type": "output_text", "text": text, "annotations": []});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": id, "object": "response", "created_at": 1, "status": status, "model": model,
            "output": output, "usage": usage, "previous_response_id": req["previous_response_id"],
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": []})
    };
    if req["stream"] != true {
        return axum::Json(response(
            "completed",
            json!([item(json!([part]), "completed")]),
            usage,
        ))
        .into_response();
    }
    let mut seq = 0u64;
    let mut ev = |name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        format!("event: {name}\ndata: {data}\n\n")
    };
    let (a, b) = text.split_at(text.len() / 2);
    let out = vec![
        ev(
            "response.created",
            json!({"response": response("in_progress", json!([]), Value::Null)}),
        ),
        ev(
            "response.output_item.added",
            json!({"output_index": 0, "item": item(json!([]), "in_progress")}),
        ),
        ev(
            "response.content_part.added",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
        ev(
            "response.output_text.delta",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": a, "logprobs": []}),
        ),
        ev(
            "response.output_text.delta",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "delta": b, "logprobs": []}),
        ),
        ev(
            "response.output_text.done",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
        ),
        ev(
            "response.content_part.done",
            json!({"item_id": msg_id, "output_index": 0, "content_index": 0, "part": part}),
        ),
        ev(
            "response.output_item.done",
            json!({"output_index": 0, "item": item(json!([part]), "completed")}),
        ),
        ev(
            "response.completed",
            json!({"response": response("completed", json!([item(json!([part]), "completed")]), usage)}),
        ),
    ];
    sse(out, false)
}
