//! The OTLP/HTTP receiver: `POST /v1/traces` and `POST /v1/logs`, so any
//! OpenTelemetry exporter pointed at the server unchanged
//! (`OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:PORT`) records its GenAI
//! telemetry as sessions.
//!
//! The protocol (OTLP/HTTP 1.x): a body in protobuf
//! (`application/x-protobuf`) or JSON (`application/json`), optionally
//! `Content-Encoding: gzip`; success is `200` with an
//! `Export{Trace,Logs}ServiceResponse` in the request's encoding, whose
//! `partial_success` counts the items rejected (a span without a valid
//! trace or span id) and says why; a body that does not decode is `400`
//! with a `google.rpc.Status` (code 3, `INVALID_ARGUMENT`) in the
//! request's encoding, which exporters do not retry; a store that cannot
//! be written is `503` (exporters retry, and a retried export is stored
//! once). The routes sit behind the server's guards like the API: the
//! token (`OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN`), the
//! body limit (compressed, and again after inflating), the Host rules.
//!
//! Everything else is `convo_llm::otel`: decoding, every dialect and
//! what threading needs no store for ([`otel::prepare`]) run on the
//! blocking pool, requests in parallel; the threading into sessions runs
//! on the server's one group-commit writer ([`crate::appends`]), which
//! writes the exports (and appends) that arrive together in one
//! transaction and keeps the threading cache, so a request reads its
//! session's branches, not all its nodes: ingest costs what a request
//! carries, not what its session already holds. Each request stays
//! atomic: a batch that fails is written again request by request.

use crate::AppState;
use crate::api::now;
use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use convo_llm::otel::{self, Encoding, Prepared, Rejected};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};

/// `google.rpc.Status`, the body of an OTLP error response.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// Says once per process, in the server's log, that calls arrived
/// without their messages and how to capture them (their sessions say it
/// too, on their first call).
fn say_content_hint() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "convo: OTLP calls arrived without their messages; {}",
            otel::dialect::CONTENT_HINT
        );
    }
}

/// How long an export whose calls all came without their messages is
/// held before it is written. Such spans come first when the
/// instrumentation sends the messages in log events (`EVENT_ONLY`): held,
/// a call whose messages arrive meanwhile is recorded once, in its
/// conversation, and not also as a call without content (the writer
/// drops a content-less span whose messages it has). The same
/// conversation so gives the same sessions in every capture mode. Calls
/// exported with no content at all (`NO_CONTENT`) appear this much later;
/// a server that stops writes what it holds first ([`flush_held`]).
pub const HOLD: std::time::Duration = std::time::Duration::from_secs(10);

fn hold(st: &AppState, calls: Prepared) {
    let id = st.writer.hold(calls);
    let st = st.clone();
    tokio::spawn(async move {
        tokio::time::sleep(HOLD).await;
        for calls in st.writer.take_held(Some(id)) {
            write_held(&st, calls).await;
        }
    });
}

/// Writes every export still held (see [`HOLD`]): a stopping server's
/// last work.
pub async fn flush_held(st: &AppState) {
    for calls in st.writer.take_held(None) {
        write_held(st, calls).await;
    }
}

/// Writes a held export; its exporter has had its answer, so a failure
/// is said in the server's log.
async fn write_held(st: &AppState, calls: Prepared) {
    let n = calls.calls();
    match st.writer.otel(calls, now()).await {
        Ok(done) => {
            if done.without_content > 0 {
                say_content_hint();
            }
        }
        Err(e) => eprintln!(
            "{}",
            serde_json::json!({"otel": "calls without their messages not recorded", "calls": n, "error": e.to_string()})
        ),
    }
}

/// gRPC's `INVALID_ARGUMENT`.
const INVALID_ARGUMENT: i32 = 3;
/// gRPC's `UNAVAILABLE`.
const UNAVAILABLE: i32 = 14;
/// gRPC's `INTERNAL`.
const INTERNAL: i32 = 13;

fn encode<T: prost::Message + serde::Serialize>(
    enc: Encoding,
    status: StatusCode,
    msg: &T,
) -> Response {
    match enc {
        Encoding::Protobuf => (
            status,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            msg.encode_to_vec(),
        )
            .into_response(),
        Encoding::Json => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&without_nulls(msg)).unwrap_or_default(),
        )
            .into_response(),
    }
}

/// A response as OTLP/JSON: a message field that is not set is left out
/// (the prost types serialize it as `null`, which OTLP/JSON does not
/// allow: `"partialSuccess": null` is not a partial-success object).
fn without_nulls<T: serde::Serialize>(msg: &T) -> serde_json::Value {
    let mut v = serde_json::to_value(msg).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.retain(|_, x| !x.is_null());
    }
    v
}

fn status(enc: Encoding, http: StatusCode, code: i32, message: String) -> Response {
    match enc {
        Encoding::Protobuf => (
            http,
            [(header::CONTENT_TYPE, "application/x-protobuf")],
            prost::Message::encode_to_vec(&RpcStatus { code, message }),
        )
            .into_response(),
        Encoding::Json => (
            http,
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&serde_json::json!({"code": code, "message": message}))
                .unwrap_or_default(),
        )
            .into_response(),
    }
}

/// Why a request's media type is refused: the encoding to answer in, and
/// the message.
type Refusal = (Encoding, String);

/// The request's encoding and whether it is gzipped, or why it is refused
/// (a 415).
fn negotiate(headers: &HeaderMap) -> Result<(Encoding, bool), Refusal> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(enc) = Encoding::from_content_type(ct) else {
        return Err((
            Encoding::Json,
            format!(
                "content type `{ct}` is not OTLP: send application/x-protobuf or application/json"
            ),
        ));
    };
    let ce = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let gzip = match ce.as_str() {
        "" | "identity" => false,
        "gzip" => true,
        other => {
            return Err((
                enc,
                format!("content encoding `{other}` is not supported: send gzip or none"),
            ));
        }
    };
    Ok((enc, gzip))
}

/// Which signal a request carries.
#[derive(Clone, Copy, Debug)]
enum Signal {
    Traces,
    Logs,
}

/// Decodes, reads and records one export request; the answer in its
/// encoding.
async fn receive(
    st: AppState,
    limit: usize,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
    signal: Signal,
) -> Response {
    let (enc, gzip) = match negotiate(&headers) {
        Ok(x) => x,
        Err((enc, why)) => {
            return status(
                enc,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                INVALID_ARGUMENT,
                why,
            );
        }
    };
    // A body over the server's limit (or cut) is answered as any other
    // error of the protocol: a google.rpc.Status in the request's encoding.
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            let why = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                "the body is over the server's limit (--max-body-mib)".to_owned()
            } else {
                e.body_text()
            };
            return status(enc, e.status(), INVALID_ARGUMENT, why);
        }
    };
    let (calls, rejected) = match read_export(body, gzip, limit, signal, enc).await {
        Ok(x) => x,
        Err(answer) => return answer,
    };
    if let Err(answer) = record(&st, calls, enc).await {
        return answer;
    }
    exported(enc, signal, &rejected)
}

/// The calls of an export body (gunzipped when `gzip`), read off the
/// async runtime, and what was rejected; `Err`: the answer saying why it
/// cannot be read (a 413 over the limits, else a 400).
async fn read_export(
    body: Bytes,
    gzip: bool,
    limit: usize,
    signal: Signal,
    enc: Encoding,
) -> Result<(Prepared, Rejected), Response> {
    let read = tokio::task::spawn_blocking(
        move || -> Result<(Prepared, Rejected), convo_formats::Error> {
            // The body as received, gunzipped: decoded, and kept.
            let bytes = otel::inflate(&body, gzip, limit)?.into_owned();
            let media = match (signal, enc) {
                (Signal::Traces, Encoding::Protobuf) => "traces/protobuf",
                (Signal::Traces, Encoding::Json) => "traces/json",
                (Signal::Logs, Encoding::Protobuf) => "logs/protobuf",
                (Signal::Logs, Encoding::Json) => "logs/json",
            };
            let (calls, rejected) = otel::read_body(media, &bytes, limit)?;
            let body = otel::raw::Body {
                media,
                bytes: std::sync::Arc::new(bytes),
            };
            Ok((otel::prepare(calls).with_body(body), rejected))
        },
    )
    .await;
    match read {
        Ok(Ok(x)) => Ok(x),
        Ok(Err(e)) => {
            let http = if e.rule == "too-large" || e.rule == "too-many" {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                StatusCode::BAD_REQUEST
            };
            Err(status(enc, http, INVALID_ARGUMENT, e.to_string()))
        }
        Err(e) => Err(status(
            enc,
            StatusCode::INTERNAL_SERVER_ERROR,
            INTERNAL,
            e.to_string(),
        )),
    }
}

/// Records the calls read (held for their log events when none carries
/// content); `Err`: the answer saying why the store refused them.
async fn record(st: &AppState, calls: Prepared, enc: Encoding) -> Result<(), Response> {
    if calls.only_without_content() {
        // Their messages may still come, in log events (EVENT_ONLY).
        hold(st, calls);
        return Ok(());
    }
    if calls.calls() == 0 {
        return Ok(());
    }
    // The writer wakes the event hub after each batch.
    match st.writer.otel(calls, now()).await {
        Ok(done) => {
            if done.without_content > 0 {
                say_content_hint();
            }
            Ok(())
        }
        Err(e) => {
            let (http, code) = match e.kind() {
                convo_store::ErrorKind::Unavailable => {
                    (StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE)
                }
                convo_store::ErrorKind::Invalid => (StatusCode::BAD_REQUEST, INVALID_ARGUMENT),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL),
            };
            Err(status(enc, http, code, e.to_string()))
        }
    }
}

/// The answer to an export recorded: what was rejected, as a partial
/// success.
fn exported(enc: Encoding, signal: Signal, rejected: &Rejected) -> Response {
    match signal {
        Signal::Traces => encode(
            enc,
            StatusCode::OK,
            &ExportTraceServiceResponse {
                partial_success: (rejected.count > 0).then(|| ExportTracePartialSuccess {
                    rejected_spans: rejected.count,
                    error_message: rejected.message.clone(),
                }),
            },
        ),
        Signal::Logs => encode(
            enc,
            StatusCode::OK,
            &ExportLogsServiceResponse {
                partial_success: (rejected.count > 0).then(|| ExportLogsPartialSuccess {
                    rejected_log_records: rejected.count,
                    error_message: rejected.message.clone(),
                }),
            },
        ),
    }
}

/// OTLP/HTTP trace export: GenAI spans become sessions.
#[utoipa::path(post, path = "/v1/traces",
    request_body(description = "an ExportTraceServiceRequest",
        content((Vec<u8> = "application/x-protobuf"), (Vec<u8> = "application/json"))),
    responses(
        (status = 200, description = "an ExportTraceServiceResponse (partial_success counts rejected spans)"),
        (status = "default", description = "a google.rpc.Status")))]
pub async fn traces(
    State(st): State<AppState>,
    Extension(limit): Extension<InflatedLimit>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    receive(st, limit.0, headers, body, Signal::Traces).await
}

/// OTLP/HTTP log export: GenAI events (per-message events, operation
/// details) become sessions.
#[utoipa::path(post, path = "/v1/logs",
    request_body(description = "an ExportLogsServiceRequest",
        content((Vec<u8> = "application/x-protobuf"), (Vec<u8> = "application/json"))),
    responses(
        (status = 200, description = "an ExportLogsServiceResponse (partial_success counts rejected records)"),
        (status = "default", description = "a google.rpc.Status")))]
pub async fn logs(
    State(st): State<AppState>,
    Extension(limit): Extension<InflatedLimit>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    receive(st, limit.0, headers, body, Signal::Logs).await
}

/// The largest body a gzipped request may inflate to.
#[derive(Clone, Copy, Debug)]
pub struct InflatedLimit(pub usize);

/// The two routes; `limit` bounds a body after inflating (the server's
/// body limit bounds it before). They write through the state's writer.
pub fn routes(limit: usize) -> axum::Router<AppState> {
    use axum::routing::post;
    axum::Router::new()
        .route("/v1/traces", post(traces))
        .route("/v1/logs", post(logs))
        .layer(Extension(InflatedLimit(limit)))
}

/// The receiver alone (`convo otel --listen`): the two routes (and the
/// health check) behind the guards `convo serve` puts on its own, with the
/// same error document for anything else.
pub fn standalone(state: AppState, config: &crate::Config) -> axum::Router {
    let app = routes(config.body_limit)
        .route("/api/v1/health", axum::routing::get(crate::api::health))
        .method_not_allowed_fallback(crate::api::method_not_allowed)
        .with_state(state)
        .fallback(crate::api::fallback);
    crate::guarded(app, config, false)
}
