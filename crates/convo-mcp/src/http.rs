//! MCP's streamable HTTP transport: `convo mcp proxy` (a remote server
//! relayed and recorded) and `convo mcp serve --listen` (convo's history
//! served over HTTP).
//!
//! **The relay** ([`relay_router`]) forwards every request to the
//! upstream endpoint as it came (method, body, query, headers less the
//! hop-by-hop ones and `X-Convo-*`), and its answer back as it came: a
//! JSON body whole, an SSE stream (a POST's answer, or the GET stream)
//! chunk by chunk as it arrives. `Mcp-Session-Id`, `MCP-Protocol-Version`
//! and `Last-Event-ID` pass both ways, and SSE event ids are not touched,
//! so a client resumes a broken stream against the upstream as it would
//! directly; `DELETE` ends the upstream session. Meanwhile each message
//! is noted for the [`crate::record`]er: a POST's body (client → server),
//! the JSON answer or each SSE event's `data` (server → client). With a
//! token in front (`--token`), the client's `Authorization` is convo's
//! and is not forwarded.
//!
//! **The replay** ([`replay_router`]) answers each POSTed request from
//! the recording as `convo mcp wrap --replay` does, with no upstream.
//!
//! **The server** ([`serve_router`]) takes one JSON-RPC message per POST
//! and answers `application/json` (a notification: `202`); it offers no
//! GET stream (`405`), which the specification allows.

use crate::McpError;
use crate::message::Dir;
use crate::record::Noter;
use crate::replay::{Answer, McpReplay};
use crate::serve::Server;
pub use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use convo_llm::sse::{EventSplitter, parse_event};
use futures_util::StreamExt;
use std::sync::{Arc, Mutex};

/// The relay to one upstream MCP endpoint.
#[derive(Clone, Debug)]
pub struct HttpRelay {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    upstream: String,
    client: convo_runtime::forward::Forwarder,
    noter: Noter,
    body_limit: usize,
    strip_auth: bool,
}

impl HttpRelay {
    /// A relay to `upstream` (the server's MCP endpoint URL), noting
    /// messages with `noter`. `strip_auth`: the client's `Authorization`
    /// is convo's token, not the upstream's.
    pub fn new(
        upstream: &str,
        noter: Noter,
        body_limit: usize,
        strip_auth: bool,
    ) -> Result<HttpRelay, McpError> {
        if !(upstream.starts_with("http://") || upstream.starts_with("https://")) {
            return Err(McpError::Invalid(format!(
                "--upstream `{}` is not an http:// or https:// URL",
                convo_core::url::public(upstream)
            )));
        }
        // The one forwarder; no read timeout: the GET stream may idle.
        let client = convo_runtime::forward::Forwarder::build(
            std::time::Duration::from_secs(30),
            None,
            true,
        )
        .map_err(|e| McpError::Invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(HttpRelay {
            inner: Arc::new(Inner {
                upstream: upstream.to_owned(),
                client,
                noter,
                body_limit,
                strip_auth,
            }),
        })
    }
}

/// Every path and method relayed to the upstream endpoint.
pub fn relay_router(r: HttpRelay) -> Router {
    Router::new().fallback(relay).with_state(r)
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null,
        "error": {"code": -32603, "message": message}});
    (status, axum::Json(body)).into_response()
}

async fn relay(State(r): State<HttpRelay>, req: Request) -> Response {
    let inner = &r.inner;
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, inner.body_limit).await {
        Ok(b) => b,
        Err(e) => return error(StatusCode::PAYLOAD_TOO_LARGE, &e.to_string()),
    };
    if parts.method == Method::POST && !body.is_empty() {
        inner.noter.note(Dir::ToServer, &body);
    }
    let mut url = inner.upstream.clone();
    if let Some(q) = parts.uri.query() {
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(q);
    }
    // The forwarder's header policy; with a token in front, the client's
    // `Authorization` is convo's.
    let (mut headers, _) = convo_runtime::forward::request_headers(&parts.headers, false, None);
    if inner.strip_auth {
        headers.remove(header::AUTHORIZATION);
    }
    let resp = match inner
        .client
        .send(parts.method.as_str(), &url, headers, body)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            let why = if e.is_timeout() {
                "timed out"
            } else {
                "unreachable"
            };
            return error(
                StatusCode::BAD_GATEWAY,
                &format!("the upstream MCP server is {why}: {e}"),
            );
        }
    };
    let status = resp.status();
    let headers = convo_runtime::forward::answer_headers(resp.headers());
    let sse = convo_runtime::forward::is_event_stream(&headers);
    let body = if sse {
        let noter = inner.noter.clone();
        let mut split = EventSplitter::default();
        Body::from_stream(resp.bytes_stream().map(move |chunk| {
            if let Ok(c) = &chunk {
                for ev in split.push(c) {
                    let data = parse_event(&ev).data;
                    if !data.trim().is_empty() {
                        noter.note(Dir::ToClient, data.as_bytes());
                    }
                }
            }
            chunk.map_err(std::io::Error::other)
        }))
    } else {
        let bytes = match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return error(
                    StatusCode::BAD_GATEWAY,
                    &format!("the upstream cut its answer: {e}"),
                );
            }
        };
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("application/json"));
        if json && !bytes.is_empty() {
            inner.noter.note(Dir::ToClient, &bytes);
        }
        Body::from(bytes)
    };
    let mut out = Response::new(body);
    *out.status_mut() = status;
    *out.headers_mut() = headers;
    out
}

/// `convo mcp proxy --replay`: each POSTed request answered from the
/// recording (`application/json`; a notification or a response: `202`),
/// no upstream; no GET stream (`405`).
pub fn replay_router(replay: McpReplay) -> Router {
    Router::new()
        .fallback(replay_one)
        .with_state(Arc::new(Mutex::new(replay)))
}

async fn replay_one(
    State(r): State<Arc<Mutex<McpReplay>>>,
    method: Method,
    body: Bytes,
) -> Response {
    if let Some(refused) = post_only(&method) {
        return refused;
    }
    let msg = crate::message::Message::read(&body);
    let answer = match r.lock() {
        Ok(mut r) => r.answer(&msg),
        Err(_) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the replay lock was poisoned",
            );
        }
    };
    match answer {
        Answer::Hit(line) | Answer::Miss(line) => json_line(line),
        Answer::Nothing => StatusCode::ACCEPTED.into_response(),
    }
}

fn json_line(line: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        line,
    )
        .into_response()
}

/// `None` for a POST; the answer to anything else (no GET stream here:
/// `405`; `DELETE` ends nothing: `204`).
fn post_only(method: &Method) -> Option<Response> {
    match *method {
        Method::POST => None,
        Method::DELETE => Some(StatusCode::NO_CONTENT.into_response()),
        _ => Some(
            (
                StatusCode::METHOD_NOT_ALLOWED,
                [(header::ALLOW, "POST, DELETE")],
            )
                .into_response(),
        ),
    }
}

/// `convo mcp serve --listen`: one JSON-RPC message per POST.
pub fn serve_router(server: Server) -> Router {
    Router::new()
        .fallback(serve_one)
        .with_state(Arc::new(Mutex::new(server)))
}

async fn serve_one(State(s): State<Arc<Mutex<Server>>>, method: Method, body: Bytes) -> Response {
    if let Some(refused) = post_only(&method) {
        return refused;
    }
    // The store is synchronous: its reads run on a blocking thread.
    let answer = tokio::task::spawn_blocking(move || {
        s.lock()
            .map_err(|_| "the server lock was poisoned".to_owned())
            .map(|mut s| s.handle(&body))
    })
    .await;
    match answer {
        Ok(Ok(Some(line))) => json_line(line),
        Ok(Ok(None)) => StatusCode::ACCEPTED.into_response(),
        Ok(Err(why)) => error(StatusCode::INTERNAL_SERVER_ERROR, &why),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}
