//! The recording proxy: OpenAI- and Anthropic-compatible HTTP endpoints
//! that forward every call to an upstream and record it on a timeline.
//!
//! Point a program's base URL at it (`OPENAI_BASE_URL=http://127.0.0.1:7777/v1`,
//! or `…/s/{session}/{branch}/v1` to choose where calls land) and every
//! call is passed through (streams chunk by chunk as they arrive) and
//! recorded as described in [`record`]. [`router`] gives the routes;
//! `convo serve --upstream URL` mounts them next to the API and
//! `convo proxy` serves them alone.
//!
//! ## Routes
//!
//! - `/v1/{path}`: the session comes from the `X-Convo-Session` header
//!   (id, unique prefix or title; a title that names no session creates
//!   one) and the branch from `X-Convo-Branch` (default `main`); with no
//!   header, calls are threaded by content ([`thread`]).
//! - `/s/{session}/{branch}/v1/{path}`: the same, named in the base URL
//!   (which every SDK accepts).
//!
//! **Nothing is answered unrecorded.** A branch the session does not have
//! yet is created from the session's head (its `main`'s head) and the call
//! recorded on it; in a session with nothing recorded yet (a new title),
//! the call's turn goes on `main` and the branch is forked at its end. A
//! branch name that is not valid is refused (`400 invalid_branch`) before
//! the upstream is called. When the store refuses a call anyway, the
//! client still gets its answer, a line on stderr says so, and from then
//! on every answer carries `x-convo-recording-failures: N` (non-streamed
//! answers also `x-convo-error` with the reason).
//!
//! ## Upstreams
//!
//! `{path}` goes to `{upstream}/v1/{path}` (a trailing `/v1` on the
//! configured URL is dropped, so `https://api.openai.com/v1` and
//! `https://api.openai.com` are the same upstream). A call with an
//! `anthropic-version` or `x-api-key` header, or to `/v1/messages`, goes to
//! the Anthropic upstream when one is configured. The client's headers are
//! passed through except hop-by-hop ones, `Accept-Encoding` (the proxy
//! reads bodies, so it asks for identity) and `X-Convo-*`.
//!
//! ## Keys
//!
//! Without a server token, the client's key (`Authorization`, `x-api-key`,
//! `api-key`) goes upstream as sent, and a key configured for an upstream
//! ([`ProxyConfig::upstream_key`], [`ProxyConfig::anthropic_key`]) is sent
//! only when the client sent none. With a token (`--token`,
//! [`ProxyConfig::virtual_keys`]) the client's key *is* convo's token: the
//! server's guard checks it (as `Authorization: Bearer` or `x-api-key`, so
//! an SDK needs only its base URL and API key set), the proxy never
//! forwards it, and the upstream gets the configured key instead (or none,
//! for an upstream that wants none). Keys are never recorded.
//!
//! ## Requests
//!
//! Any body passes through (JSON, `multipart/form-data` file and audio
//! uploads, bytes), read as it streams in up to the server's body limit
//! (`--max-body-mib`, axum's `DefaultBodyLimit`): past it the call is
//! refused with `413` and a JSON error, having held at most the limit in
//! memory.
//!
//! ## Errors
//!
//! Upstream answers, 4xx and 5xx included, reach the client as sent and
//! are recorded with their status. An unreachable upstream is a `502` and
//! a timeout a `504`, each with a JSON body
//! `{"error": {"type": "convo_proxy_error", "code": …, "message": …}}`
//! naming the reason, and recorded with that status. A stream the
//! upstream cuts is cut for the client too and recorded as `partial`.
//!
//! ## Answers pass through
//!
//! A stream is passed on chunk by chunk as it arrives, through a bounded
//! channel (a slow client slows the upstream read, nothing piles up), and
//! recorded when it ends, before the client's body ends. A non-streamed
//! answer up to [`WHOLE_ANSWER`] (1 MiB) is read whole, recorded, then
//! sent with an `x-convo-node` header naming the last node recorded; a
//! longer one passes through as a stream does, its last chunk held back
//! until it is recorded. Either way the record keeps at most
//! [`ProxyConfig::record_limit`] bytes of an answer, and a client that
//! has received a whole answer has a recorded call — unless the store is
//! locked by another process (the writer finds it so at once: its
//! connection does not wait for locks, SQLite's or PostgreSQL's), away (a
//! PostgreSQL server restarting or refusing connections: the record is
//! written again once it is back) or did not take the record within
//! [`RECORD_WAIT`] (1 s: slow, gone): then the answer goes out all the
//! same, marked `x-convo-recording: queued`, and the record waits in a
//! bounded queue ([`MAX_QUEUED`] records, [`MAX_QUEUED_BYTES`]) until the
//! store takes it; one that cannot be queued is counted as not recorded
//! (above). While a record waits past its answer, or the store is locked,
//! no answer waits for its record at all: a locked store delays no
//! answer. Each such call is counted and logged, and
//! `GET /convo/recording` says how many wait, how many were answered
//! before their record and how many were not recorded.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub use convo_llm::{api, body, record, replay, sse, thread};
mod writer;

use api::Api;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use bytes::Bytes;
use convo_core::BranchName;
use convo_runtime::{Hub, StorePool, forward, now_ms};
use convo_store::{StoreError, StoredNode};
use futures_util::StreamExt;
use record::Exchange;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the proxy reaches its upstreams.
#[derive(Clone, Default)]
pub struct ProxyConfig {
    /// The OpenAI-compatible upstream (`https://api.openai.com/v1`, an
    /// Ollama, vLLM, llama.cpp or OpenRouter URL).
    pub upstream: Option<String>,
    /// The Anthropic upstream (`https://api.anthropic.com`).
    pub anthropic_upstream: Option<String>,
    /// A key sent as `Authorization: Bearer` to the OpenAI upstream when
    /// the client sends none. Never recorded or logged.
    pub upstream_key: Option<String>,
    /// A key sent as `x-api-key` to the Anthropic upstream when the client
    /// sends none. Never recorded or logged.
    pub anthropic_key: Option<String>,
    /// How long to wait to connect, and between two bytes of an answer.
    pub timeout: Duration,
    /// Answer from this recorded timeline instead of the upstream.
    pub replay: Option<replay::ReplaySpec>,
    /// Clients authenticate to convo with its token as their API key (the
    /// server has a token: the guard checks it). Their key headers are
    /// then never forwarded; the upstream gets [`ProxyConfig::upstream_key`]
    /// or [`ProxyConfig::anthropic_key`] on every call (or no key).
    pub virtual_keys: bool,
    /// The most bytes of one answer (streamed or not) kept in the record
    /// (default [`DEFAULT_RECORD_LIMIT`]): past it the answer still passes
    /// through in full, and the record keeps its first bytes, its length
    /// and the SHA-256 of the whole (`truncated` in the response's
    /// diagnostics).
    pub record_limit: Option<usize>,
}

/// The default [`ProxyConfig::record_limit`]: 32 MiB.
pub const DEFAULT_RECORD_LIMIT: usize = 32 << 20;

impl std::fmt::Debug for ProxyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyConfig")
            .field(
                "upstream",
                &self.upstream.as_deref().map(convo_core::url::public),
            )
            .field(
                "anthropic_upstream",
                &self
                    .anthropic_upstream
                    .as_deref()
                    .map(convo_core::url::public),
            )
            .field("upstream_key", &self.upstream_key.as_ref().map(|_| "…"))
            .field("anthropic_key", &self.anthropic_key.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .field("replay", &self.replay)
            .field("virtual_keys", &self.virtual_keys)
            .field("record_limit", &self.record_limit)
            .finish()
    }
}

impl ProxyConfig {
    /// A config for one OpenAI-compatible upstream, 600 s timeout.
    pub fn new(upstream: Option<String>) -> Self {
        ProxyConfig {
            upstream,
            timeout: Duration::from_secs(600),
            ..ProxyConfig::default()
        }
    }
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// An upstream URL that is not `http://` or `https://`.
    #[error("upstream `{0}` is not an http:// or https:// URL")]
    BadUpstream(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The recording thread could not start.
    #[error("cannot start recording: {0}")]
    Writer(#[source] StoreError),
    /// The recording to replay could not be read.
    #[error("cannot replay: {0}")]
    Replay(#[source] StoreError),
}

impl ProxyError {
    /// What kind of failure this is ([`convo_store::ErrorKind`]).
    pub fn kind(&self) -> convo_store::ErrorKind {
        use convo_store::ErrorKind;
        match self {
            ProxyError::BadUpstream(_) => ErrorKind::Invalid,
            ProxyError::Client(_) => ErrorKind::Failed,
            ProxyError::Writer(e) | ProxyError::Replay(e) => e.kind(),
        }
    }
}

/// The proxy: shared by every request.
#[derive(Clone, Debug)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    cfg: ProxyConfig,
    upstream: Option<String>,
    anthropic: Option<String>,
    /// The one upstream forwarder (`convo_runtime::forward`).
    fwd: forward::Forwarder,
    pool: StorePool,
    writer: writer::Writer,
    replay: Mutex<Option<replay::Replay>>,
    /// Calls answered but not recorded (the store refused them, or the
    /// queue of records waiting for the store was full).
    failures: std::sync::atomic::AtomicU64,
    /// Records handed to the writer and not yet written: how many, and
    /// their bytes (bounded by [`MAX_QUEUED`] and [`MAX_QUEUED_BYTES`]).
    queued: std::sync::atomic::AtomicUsize,
    queued_bytes: std::sync::atomic::AtomicUsize,
    /// Woken when the last queued record is written ([`Proxy::recordings_written`]).
    drained: tokio::sync::Notify,
    /// Records still waiting after their answer went out (the store is
    /// locked or slow): while there are any, answers do not wait at all.
    overdue: std::sync::atomic::AtomicUsize,
    /// Calls answered before their record was written (counted, said in
    /// the log and on `GET /convo/recording`).
    delayed: std::sync::atomic::AtomicU64,
    /// Set once an upstream rejected the `stream_options` the proxy adds.
    no_usage_option: std::sync::atomic::AtomicBool,
    /// Conversations' hasher states ([`body::Keys`]).
    keys: body::Keys,
}

fn base(url: &str) -> Result<String, ProxyError> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ProxyError::BadUpstream(convo_core::url::public(url)));
    }
    let u = url.trim_end_matches('/');
    Ok(u.strip_suffix("/v1").unwrap_or(u).to_owned())
}

impl Proxy {
    /// A proxy recording into `pool`, waking `hub` after each append.
    pub fn new(cfg: ProxyConfig, pool: StorePool, hub: Option<Hub>) -> Result<Proxy, ProxyError> {
        let upstream = cfg.upstream.as_deref().map(base).transpose()?;
        let anthropic = cfg.anthropic_upstream.as_deref().map(base).transpose()?;
        let fwd = forward::Forwarder::new(cfg.timeout).map_err(ProxyError::Client)?;
        let shared = Arc::new(writer::Shared::new());
        let writer = writer::Writer::start(shared, &pool, hub).map_err(ProxyError::Writer)?;
        Ok(Proxy {
            inner: Arc::new(Inner {
                cfg,
                upstream,
                anthropic,
                fwd,
                pool,
                writer,
                replay: Mutex::default(),
                failures: std::sync::atomic::AtomicU64::new(0),
                queued: std::sync::atomic::AtomicUsize::new(0),
                queued_bytes: std::sync::atomic::AtomicUsize::new(0),
                drained: tokio::sync::Notify::new(),
                overdue: std::sync::atomic::AtomicUsize::new(0),
                delayed: std::sync::atomic::AtomicU64::new(0),
                no_usage_option: std::sync::atomic::AtomicBool::new(false),
                keys: body::Keys::default(),
            }),
        })
    }

    /// [`Proxy::new`], then reads the recording to replay when the config
    /// names one (on a blocking thread).
    pub async fn start(
        cfg: ProxyConfig,
        pool: StorePool,
        hub: Option<Hub>,
    ) -> Result<Proxy, ProxyError> {
        let spec = cfg.replay.clone();
        let p = Proxy::new(cfg, pool.clone(), hub)?;
        if let Some(spec) = spec {
            let r = pool
                .run(move |s| replay::Replay::load(s, spec))
                .await
                .map_err(ProxyError::Replay)?;
            if let Ok(mut slot) = p.inner.replay.lock() {
                *slot = Some(r);
            }
        }
        Ok(p)
    }

    /// The replay's fidelity line, when replaying.
    pub fn replay_summary(&self) -> Option<String> {
        let r = self.inner.replay.lock().ok()?;
        r.as_ref().map(replay::Replay::summary)
    }

    /// The replay report (`docs/JSON.md`), when replaying.
    pub fn replay_report(&self) -> Option<serde_json::Value> {
        let r = self.inner.replay.lock().ok()?;
        r.as_ref().map(replay::Replay::report)
    }

    /// Journals how the replay answered its calls on the replayed session
    /// (a replay fact: `convo session get` lists it), once it received
    /// any. Nothing recorded changes.
    pub async fn note_replay(&self) -> Result<(), StoreError> {
        let note = self.inner.replay.lock().ok().and_then(|r| {
            r.as_ref().map(|r| convo_store::ReplayNote {
                session: r.session,
                branch: r.spec.branch.clone(),
                at: now_ms(),
                exact: r.exact,
                tolerated: r.tolerated,
                live: r.live_calls,
                missed: r.missed,
            })
        });
        match note.filter(|n| n.exact + n.tolerated + n.live + n.missed > 0) {
            Some(n) => self.inner.pool.run(move |s| s.note_replay(&n)).await,
            None => Ok(()),
        }
    }

    /// How many calls were answered but could not be recorded.
    pub fn recording_failures(&self) -> u64 {
        self.inner
            .failures
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many records wait for the store (answered, not yet written).
    pub fn recordings_queued(&self) -> usize {
        self.inner.queued.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Returns once no record waits for the store (every queued record
    /// written, or counted as not recorded): woken by the last one
    /// written, never polling.
    pub async fn recordings_written(&self) {
        loop {
            let mut woken = std::pin::pin!(self.inner.drained.notified());
            // Registered before the count is read: a record written in
            // between still wakes it.
            woken.as_mut().enable();
            if self.inner.queued.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            woken.await;
        }
    }

    /// What became of the records (`GET /convo/recording`): how many wait
    /// for the store and their bytes, how many calls were answered before
    /// their record was written, how many were not recorded, and whether
    /// the store is locked now.
    pub fn recording_status(&self) -> serde_json::Value {
        use std::sync::atomic::Ordering::Relaxed;
        let i = &self.inner;
        json!({
            "queued": i.queued.load(Relaxed),
            "queued_bytes": i.queued_bytes.load(Relaxed),
            "max_queued": MAX_QUEUED,
            "max_queued_bytes": MAX_QUEUED_BYTES,
            "answered_before_recorded": i.delayed.load(Relaxed),
            "not_recorded": i.failures.load(Relaxed),
            "store_locked": *i.writer.stalled().borrow(),
        })
    }

    /// How many recorded calls a replay serves (0 when not replaying).
    pub fn replay_len(&self) -> usize {
        self.inner
            .replay
            .lock()
            .ok()
            .and_then(|r| r.as_ref().map(replay::Replay::len))
            .unwrap_or(0)
    }
}

/// The proxy's routes (see the crate docs), ready to merge into a server.
pub fn router(proxy: Proxy) -> Router {
    Router::new()
        .route("/v1/{*rest}", any(unnamed))
        .route("/s/{session}/{branch}/v1/{*rest}", any(named))
        .route(
            "/convo/recording",
            axum::routing::get(
                |State(p): State<Proxy>| async move { axum::Json(p.recording_status()) },
            ),
        )
        .with_state(proxy)
}

/// Where a call is recorded.
#[derive(Clone, Debug)]
enum Target {
    Named { session: String, branch: String },
    Auto,
}

async fn named(
    State(p): State<Proxy>,
    Path((session, branch, rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    p.call(Target::Named { session, branch }, rest, req).await
}

async fn unnamed(State(p): State<Proxy>, Path(rest): Path<String>, req: Request) -> Response {
    let h = req.headers();
    let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let target = match header("x-convo-session") {
        Some(session) => Target::Named {
            session,
            branch: header("x-convo-branch").unwrap_or_else(|| "main".into()),
        },
        None => Target::Auto,
    };
    p.call(target, rest, req).await
}

/// A JSON error the SDKs show (`error.message`), with convo's kind.
pub fn proxy_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({"error": {
        "type": "convo_proxy_error",
        "code": code,
        "message": message,
    }});
    (status, axum::Json(body)).into_response()
}

fn store_error(e: &StoreError) -> Response {
    let status = convo_runtime::error::status_of(e);
    proxy_error(status, e.kind().as_str(), &e.to_string())
}

fn since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Where a call goes: the upstream's base URL (no trailing `/v1`) and the
/// key configured for it (header name and value), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Route {
    base: String,
    key: Option<(&'static str, String)>,
}

/// The route phase: a call to `/v1/messages`, or with an
/// `anthropic-version` or `x-api-key` header, goes to the Anthropic
/// upstream when there is one; anything else to the OpenAI-compatible
/// one, else to the Anthropic one. `None`: no upstream at all.
fn route(
    cfg: &ProxyConfig,
    upstream: Option<&str>,
    anthropic: Option<&str>,
    api: Api,
    headers: &HeaderMap,
) -> Option<Route> {
    let anthropic_call = api == Api::Messages
        || headers.contains_key("anthropic-version")
        || headers.contains_key("x-api-key");
    let to_anthropic = |a: &str| Route {
        base: a.to_owned(),
        key: cfg.anthropic_key.clone().map(|k| ("x-api-key", k)),
    };
    match (anthropic_call, anthropic, upstream) {
        (true, Some(a), _) => Some(to_anthropic(a)),
        (_, _, Some(u)) => Some(Route {
            base: u.to_owned(),
            key: cfg
                .upstream_key
                .as_ref()
                .map(|k| ("authorization", format!("Bearer {k}"))),
        }),
        (_, Some(a), None) => Some(to_anthropic(a)),
        (_, None, None) => None,
    }
}

/// `{base}/v1/{rest}`, with the query as the client sent it.
fn upstream_url(base: &str, rest: &str, query: Option<&str>) -> String {
    let mut url = format!("{base}/v1/{rest}");
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    url
}

/// The exchange to record, before the upstream is called: the request as
/// the client sent it (its body shared, not copied; query keys and
/// header secrets redacted), `facts` read from it.
fn exchange(
    api: Api,
    method: &str,
    rest: &str,
    parts: &axum::http::request::Parts,
    body: Bytes,
    facts: body::Facts,
    upstream: &str,
) -> Exchange {
    Exchange {
        api: Some(api),
        method: method.to_owned(),
        path: match parts.uri.query() {
            Some(q) => format!(
                "/v1/{rest}?{}",
                convo_core::credential::redact_query(q, convo_core::credential::REDACTED)
            ),
            None => format!("/v1/{rest}"),
        },
        request_headers: record::recorded_headers(
            parts
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_bytes())),
            record::RECORDED_REQUEST_HEADERS,
        ),
        request_body: body,
        facts: Some(facts),
        upstream: convo_core::url::public(upstream),
        started_at: now_ms(),
        ..Exchange::default()
    }
}

/// Notes in the record that what went upstream differs from what the
/// client sent (`upstream_changes`), never with a key's value.
fn note_change(ex: &mut Exchange, what: &str, note: serde_json::Value) {
    match &mut ex.upstream_changes {
        Some(serde_json::Value::Object(m)) => {
            m.insert(what.to_owned(), note);
        }
        _ => {
            let mut m = serde_json::Map::new();
            m.insert(what.to_owned(), note);
            ex.upstream_changes = Some(serde_json::Value::Object(m));
        }
    }
}

/// An answer's body as it arrives from upstream, an error as its text
/// (without the URL: a query string may carry a key).
trait Upstream: futures_util::Stream<Item = Result<Bytes, String>> + Send + Unpin + 'static {}
impl<S: futures_util::Stream<Item = Result<Bytes, String>> + Send + Unpin + 'static> Upstream
    for S
{
}

/// A non-streamed answer as read by [`read_whole`].
#[derive(Debug)]
enum Whole {
    /// Read to its end (or to where the upstream cut it: why).
    Read { body: Bytes, cut: Option<String> },
    /// Longer than [`WHOLE_ANSWER`]: what has arrived; the rest is still
    /// upstream.
    Long(Vec<Bytes>),
}

/// Reads an answer whole, up to [`WHOLE_ANSWER`]; `ttft` is set when its
/// first bytes arrive.
async fn read_whole(up: &mut impl Upstream, t0: Instant, ttft: &mut Option<f64>) -> Whole {
    let mut head: Vec<Bytes> = Vec::new();
    let mut len = 0;
    let cut = loop {
        match up.next().await {
            None => break None,
            Some(Err(e)) => break Some(e),
            Some(Ok(chunk)) => {
                if head.is_empty() {
                    *ttft = Some(since(t0));
                }
                len += chunk.len();
                head.push(chunk);
                if len > WHOLE_ANSWER {
                    return Whole::Long(head);
                }
            }
        }
    };
    let body = match head.len() {
        1 => head.pop().unwrap_or_default(),
        _ => Bytes::from(head.concat()),
    };
    Whole::Read { body, cut }
}

/// Passes a stream on to the client chunk by chunk (through `filter`,
/// which cuts the usage chunks the client did not ask for), keeping what
/// the record keeps. Returns when the stream ends: when its first chunk
/// arrived, and why it is partial (the upstream cut it: the client gets
/// the same error; the client went away).
async fn pump(
    mut up: impl Upstream,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut filter: sse::ClientFilter,
    kept: &mut Kept,
    t0: Instant,
    upstream: &str,
) -> (Option<f64>, Option<String>) {
    let mut ttft = None;
    let mut partial = None;
    loop {
        match up.next().await {
            None => break,
            Some(Err(e)) => {
                let why = format!("upstream {upstream} cut the stream: {e}");
                partial = Some(why.clone());
                // As cut as the upstream left it: what arrived, a part of
                // an event included, then the error.
                if let Some(rest) = filter.finish() {
                    let _ = tx.send(Ok(rest)).await;
                }
                let _ = tx.send(Err(std::io::Error::other(why))).await;
                break;
            }
            Some(Ok(chunk)) => {
                let t = since(t0);
                if ttft.is_none() {
                    ttft = Some(t);
                }
                kept.push(&chunk, t);
                if let Some(out) = filter.push(chunk)
                    && tx.send(Ok(out)).await.is_err()
                {
                    partial = Some("the client disconnected".into());
                    break;
                }
            }
        }
    }
    if partial.is_none()
        && let Some(rest) = filter.finish()
    {
        let _ = tx.send(Ok(rest)).await;
    }
    (ttft, partial)
}

/// What [`relay`] left: the last chunk, held back; why the upstream cut
/// the answer; whether the client went away.
#[derive(Debug, Default)]
struct Relayed {
    held: Option<Bytes>,
    cut: Option<String>,
    gone: bool,
}

/// Passes `head` and the rest of a long answer on as they arrive, one
/// chunk behind (the last one is held back for the caller to send once
/// the call is recorded), keeping what the record keeps.
async fn relay(
    head: Vec<Bytes>,
    mut up: impl Upstream,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    kept: &mut Kept,
) -> Relayed {
    let mut out = Relayed::default();
    let mut head = head.into_iter();
    loop {
        let chunk = match head.next() {
            Some(c) => c,
            None => match up.next().await {
                None => break,
                Some(Ok(c)) => c,
                Some(Err(e)) => {
                    out.cut = Some(e);
                    break;
                }
            },
        };
        kept.push(&chunk, 0.0);
        if let Some(ready) = out.held.replace(chunk)
            && tx.send(Ok(ready)).await.is_err()
        {
            out.gone = true;
            break;
        }
    }
    out
}

/// The header every answer carries once a call could not be recorded:
/// how many were not (see [`Proxy::recording_failures`]).
pub const FAILURES_HEADER: &str = "x-convo-recording-failures";

impl Proxy {
    async fn call(&self, target: Target, rest: String, req: Request) -> Response {
        if let Target::Named { branch, .. } = &target
            && let Err(e) = BranchName::new(branch)
        {
            // Refused before the upstream is called: never answered
            // unrecorded.
            return proxy_error(
                StatusCode::BAD_REQUEST,
                "invalid_branch",
                &format!("branch `{branch}`: {e}"),
            );
        }
        let mut res = self.forward(target, rest, req).await;
        let failed = self.recording_failures();
        if failed > 0
            && let Ok(v) = HeaderValue::from_str(&failed.to_string())
        {
            res.headers_mut()
                .insert(HeaderName::from_static(FAILURES_HEADER), v);
        }
        res
    }

    /// One call, phase by phase: the request read, replay, [`route`], the
    /// [`exchange`] to record, the headers ([`forward::request_headers`]),
    /// [`Proxy::send`],
    /// then the answer [`Proxy::buffered`] or [`Proxy::streamed`], each
    /// recorded by [`Proxy::save`].
    async fn forward(&self, target: Target, rest: String, req: Request) -> Response {
        let (parts, body) = match read_request(req).await {
            Ok(read) => read,
            Err(refused) => return refused,
        };
        let method = parts.method.as_str().to_owned();
        let mut target = target;
        if let Some(answer) = self
            .try_replay(&method, &rest, &parts, &body, &mut target)
            .await
        {
            return answer;
        }
        let api = Api::classify(&method, &rest);
        let inner = &self.inner;
        // (In replay mode, reached only for calls going live.)
        let Some(route) = route(
            &inner.cfg,
            inner.upstream.as_deref(),
            inner.anthropic.as_deref(),
            api,
            &parts.headers,
        ) else {
            return proxy_error(
                StatusCode::BAD_GATEWAY,
                "no_upstream",
                "this proxy has no upstream configured (start it with --upstream URL)",
            );
        };
        let url = upstream_url(&route.base, &rest, parts.uri.query());
        // The body is read once (`body.rs`), never parsed whole, and held
        // once: the exchange and the upstream request share its bytes.
        let facts = body::Facts::read(api, &body, Some(&inner.keys));
        let changed = if inner
            .no_usage_option
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            None
        } else {
            body::add_include_usage(api, &facts, &body)
        };
        let (headers, added_key) =
            forward::request_headers(&parts.headers, inner.cfg.virtual_keys, route.key.as_ref());
        let mut ex = exchange(api, &method, &rest, &parts, body, facts, &route.base);
        if changed.is_some() {
            note_change(&mut ex, "stream_options.include_usage", json!(true));
        }
        if let Some(name) = added_key {
            // What went upstream differs: say so, never with the value.
            note_change(
                &mut ex,
                &format!("headers.{name}"),
                json!("added: the proxy's configured key"),
            );
        }
        let t0 = Instant::now();
        let (sent, strip_usage) = self.send(&method, &url, headers, changed, &mut ex).await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => return self.unreachable(target, ex, e, t0).await,
        };
        ex.ttft_ms = Some(since(t0));
        ex.status = resp.status().as_u16();
        ex.response_headers = record::recorded_headers(
            resp.headers()
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_bytes())),
            record::RECORDED_RESPONSE_HEADERS,
        );
        ex.streamed = forward::is_event_stream(resp.headers());
        let status = StatusCode::from_u16(ex.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let out_headers = forward::answer_headers(resp.headers());
        let limit = inner.cfg.record_limit.unwrap_or(DEFAULT_RECORD_LIMIT);
        let up = forward::body(resp);
        if ex.streamed {
            let out = self.streamed(target, ex, up, strip_usage, t0, limit);
            (status, out_headers, out).into_response()
        } else {
            self.buffered(target, ex, status, out_headers, up, t0, limit)
                .await
        }
    }

    /// Sends the call upstream, with `changed` (the body with
    /// `stream_options` added) when given: an upstream that rejects it
    /// (400, 422) gets the call as the client sent it, and no more adding
    /// for this run. Also whether usage chunks are to be cut from the
    /// client's stream (the proxy asked for them).
    async fn send(
        &self,
        method: &str,
        url: &str,
        headers: HeaderMap,
        changed: Option<Vec<u8>>,
        ex: &mut Exchange,
    ) -> (reqwest::Result<reqwest::Response>, bool) {
        let fwd = &self.inner.fwd;
        let Some(changed) = changed else {
            let sent = fwd
                .send(method, url, headers, ex.request_body.clone())
                .await;
            return (sent, false);
        };
        let sent = fwd.send(method, url, headers.clone(), changed).await;
        match &sent {
            Ok(r) if matches!(r.status().as_u16(), 400 | 422) => {}
            _ => return (sent, true),
        }
        self.inner
            .no_usage_option
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(serde_json::Value::Object(m)) = &mut ex.upstream_changes {
            m.remove("stream_options.include_usage");
            if m.is_empty() {
                ex.upstream_changes = None;
            }
        }
        let sent = fwd
            .send(method, url, headers, ex.request_body.clone())
            .await;
        (sent, false)
    }

    /// An upstream that could not be reached (502) or timed out (504):
    /// recorded with that status and answered with a JSON error.
    async fn unreachable(
        &self,
        target: Target,
        mut ex: Exchange,
        e: reqwest::Error,
        t0: Instant,
    ) -> Response {
        let (status, code, how) = if e.is_timeout() {
            (StatusCode::GATEWAY_TIMEOUT, "upstream_timeout", "timed out")
        } else {
            (
                StatusCode::BAD_GATEWAY,
                "upstream_unreachable",
                "is unreachable",
            )
        };
        let why = format!("upstream {} {how}: {}", ex.upstream, forward::error_text(e));
        ex.status = status.as_u16();
        ex.error = Some(why.clone());
        ex.latency_ms = since(t0);
        ex.ended_at = now_ms();
        ex.response_body = serde_json::to_vec(&json!({"error": {
            "type": "convo_proxy_error", "code": code, "message": why}}))
        .unwrap_or_default();
        let _ = self.save(target, ex).await;
        proxy_error(status, code, &why)
    }

    /// A non-streamed answer: the usual one (a JSON document) is read
    /// whole ([`read_whole`]), recorded, then sent, `x-convo-node` naming
    /// its record; one longer than [`WHOLE_ANSWER`] is passed on as it
    /// arrives instead ([`Proxy::pass_through`]).
    #[allow(clippy::too_many_arguments)]
    async fn buffered(
        &self,
        target: Target,
        mut ex: Exchange,
        status: StatusCode,
        out_headers: HeaderMap,
        mut up: impl Upstream,
        t0: Instant,
        limit: usize,
    ) -> Response {
        let (body, cut) = match read_whole(&mut up, t0, &mut ex.ttft_ms).await {
            Whole::Long(head) => {
                let passed = self.pass_through(target, ex, head, up, t0, limit);
                return (status, out_headers, passed).into_response();
            }
            Whole::Read { body, cut } => (body, cut),
        };
        ex.latency_ms = since(t0);
        ex.ended_at = now_ms();
        let mut kept = Kept::new(limit, false);
        kept.push(&body, 0.0);
        kept.finish(&mut ex);
        if let Some(e) = cut {
            let why = format!("upstream {} cut the answer: {e}", ex.upstream);
            ex.partial = Some(why.clone());
            let _ = self.save(target, ex).await;
            return proxy_error(StatusCode::BAD_GATEWAY, "upstream_cut", &why);
        }
        let saved = self.save(target, ex).await;
        let mut res = (status, out_headers, body).into_response();
        mark(&mut res, saved);
        res
    }

    /// A stream: each chunk passed on as it arrives ([`pump`]); recorded
    /// at the end, before the client's body ends (so a finished call is
    /// recorded). The channel is bounded (a slow client slows the upstream
    /// read) and so is what the record keeps (`record_limit`).
    fn streamed(
        &self,
        target: Target,
        mut ex: Exchange,
        up: impl Upstream,
        strip_usage: bool,
        t0: Instant,
        limit: usize,
    ) -> Body {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        let this = self.clone();
        tokio::spawn(async move {
            let mut kept = Kept::new(limit, true);
            let filter = sse::ClientFilter::new(strip_usage);
            let (ttft, partial) = pump(up, &tx, filter, &mut kept, t0, &ex.upstream).await;
            if ttft.is_some() {
                ex.ttft_ms = ttft;
            }
            ex.partial = partial;
            ex.latency_ms = since(t0);
            ex.ended_at = now_ms();
            kept.finish(&mut ex);
            let _ = this.save(target, ex).await;
            drop(tx);
        });
        channel_body(rx)
    }

    /// A non-streamed answer longer than [`WHOLE_ANSWER`]: `head` (what
    /// has arrived) and the rest are passed on as they arrive, through a
    /// bounded channel ([`relay`]), and the record keeps at most `limit`
    /// bytes of it. The last chunk is held back until the call is
    /// recorded, so a client that has the whole answer has a recorded call.
    fn pass_through(
        &self,
        target: Target,
        mut ex: Exchange,
        head: Vec<Bytes>,
        up: impl Upstream,
        t0: Instant,
        limit: usize,
    ) -> Body {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        let this = self.clone();
        tokio::spawn(async move {
            let mut kept = Kept::new(limit, false);
            let relayed = relay(head, up, &tx, &mut kept).await;
            ex.latency_ms = since(t0);
            ex.ended_at = now_ms();
            if relayed.gone {
                ex.partial = Some("the client disconnected".into());
            }
            let cut = relayed
                .cut
                .map(|e| format!("upstream {} cut the answer: {e}", ex.upstream));
            if cut.is_some() {
                ex.partial.clone_from(&cut);
            }
            kept.finish(&mut ex);
            let _ = this.save(target, ex).await;
            match cut {
                Some(why) => {
                    let _ = tx.send(Err(std::io::Error::other(why))).await;
                }
                None => {
                    if let Some(last) = relayed.held {
                        let _ = tx.send(Ok(last)).await;
                    }
                }
            }
        });
        channel_body(rx)
    }

    /// In replay mode: the recorded answer, a miss error, or `None` to go
    /// live (with `target` set to the live timeline).
    async fn try_replay(
        &self,
        method: &str,
        rest: &str,
        parts: &axum::http::request::Parts,
        body: &Bytes,
        target: &mut Target,
    ) -> Option<Response> {
        let headers = record::recorded_headers(
            parts
                .headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_bytes())),
            record::RECORDED_REQUEST_HEADERS,
        );
        let path = replay::recorded_path(rest, parts.uri.query());
        let (received, taken, pace, on_miss, session, title, branch) = {
            let mut guard = self.inner.replay.lock().ok()?;
            let r = guard.as_mut()?;
            if let Some((s, b)) = r.live.clone() {
                r.answered_live();
                *target = Target::Named {
                    session: s,
                    branch: b.as_str().to_owned(),
                };
                return None;
            }
            // The bytes a recorded call was sent with: that call, unread.
            if let Some(call) = r.take_sent(method, &path, &headers, body) {
                let pace = r.spec.pace;
                drop(guard);
                return Some(serve_recorded(call.answering(rest, body), pace));
            }
            let received = r.received(method, &path, &headers, body);
            let taken = r.take(&received);
            (
                received,
                taken,
                r.spec.pace,
                r.spec.on_miss,
                r.session,
                r.title.clone(),
                r.spec.branch.clone(),
            )
        };
        let miss = match taken {
            Ok(call) => return Some(serve_recorded(call.answering(rest, body), pace)),
            Err(m) => m,
        };
        if on_miss == replay::OnMiss::Error {
            return Some(miss_answer(&miss, &received, &session, &branch));
        }
        // Live from here on.
        let live = match (&miss.recorded, miss.before) {
            (None, _) => (session.to_string(), branch),
            (Some(_), _) if miss.exhausted => (session.to_string(), branch),
            (Some(_), Some(before)) => {
                let now = now_ms();
                let forked = self
                    .inner
                    .pool
                    .run(move |s| {
                        s.transaction(|l| {
                            let name = thread::free_branch(l, &session, "live")?;
                            let from = convo_core::HashPrefix::parse(&before.to_hex())
                                .map_err(StoreError::invalid)?;
                            l.fork(&session, &from, &name, now)?;
                            Ok(name)
                        })
                    })
                    .await;
                match forked {
                    Ok(name) => (session.to_string(), name),
                    Err(e) => return Some(store_error(&e)),
                }
            }
            (Some(_), None) => (format!("{title} (live)"), BranchName::main()),
        };
        if let Ok(mut guard) = self.inner.replay.lock()
            && let Some(r) = guard.as_mut()
        {
            r.live = Some(live.clone());
        }
        *target = Target::Named {
            session: live.0,
            branch: live.1.as_str().to_owned(),
        };
        None
    }

    /// Records an exchange where `target` says (group commit, see
    /// [`writer`]), waiting at most [`RECORD_WAIT`] for it: the answer is
    /// never held longer by the store. A record not written by then stays
    /// queued (bounded: [`MAX_QUEUED`] records, [`MAX_QUEUED_BYTES`]) and is
    /// written when the store takes it; one that cannot be queued or that
    /// the store refuses is counted and logged (never with headers or
    /// bodies).
    async fn save(&self, target: Target, ex: Exchange) -> Saved {
        use std::sync::atomic::Ordering::Relaxed;
        let bytes = ex.request_body.len() + ex.response_body.len();
        let inner = &self.inner;
        let n = inner.queued.fetch_add(1, Relaxed) + 1;
        let b = inner.queued_bytes.fetch_add(bytes, Relaxed) + bytes;
        if n > MAX_QUEUED || b > MAX_QUEUED_BYTES {
            inner.queued.fetch_sub(1, Relaxed);
            inner.queued_bytes.fetch_sub(bytes, Relaxed);
            let why = format!(
                "not recorded: {} records ({} bytes) already wait for the store",
                n - 1,
                b - bytes
            );
            self.lost(&ex.path, &why);
            return Saved::Failed(why);
        }
        let this = self.clone();
        let path = ex.path.clone();
        let task_path = path.clone();
        // Set by whichever comes second: the record written, or the
        // answer going out without it (then counted in `overdue` until
        // the record is written).
        let late = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task_late = late.clone();
        let mut task = tokio::spawn(async move {
            let path = task_path;
            let res = this.inner.writer.record(target, ex).await;
            this.inner.queued_bytes.fetch_sub(bytes, Relaxed);
            if this
                .inner
                .queued
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst)
                == 1
            {
                this.inner.drained.notify_waiters();
            }
            if task_late.swap(true, std::sync::atomic::Ordering::SeqCst) {
                this.inner
                    .overdue
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
            if let Err(e) = &res {
                this.lost(&path, &e.to_string());
            }
            res
        });
        // A store already behind (a record still waits past its answer)
        // or locked (the writer found it so) holds no answer: this one
        // goes out at once, its record queued.
        let mut stalled = inner.writer.stalled();
        let behind = inner.overdue.load(std::sync::atomic::Ordering::SeqCst) > 0;
        let wait = if behind || *stalled.borrow() {
            Duration::ZERO
        } else {
            RECORD_WAIT
        };
        let waited = tokio::select! {
            biased;
            r = &mut task => Ok(r),
            _ = stalled.wait_for(|s| *s) => Err(()),
            () = tokio::time::sleep(wait) => Err(()),
        };
        if waited.is_err() {
            inner.delayed.fetch_add(1, Relaxed);
            inner
                .overdue
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if late.swap(true, std::sync::atomic::Ordering::SeqCst) {
                inner
                    .overdue
                    .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        match waited {
            Ok(Ok(Ok(n))) => Saved::Node(Box::new(n)),
            Ok(Ok(Err(e))) => Saved::Failed(e.to_string()),
            Ok(Err(join)) => {
                let why = format!("the recording task failed: {join}");
                self.lost(&path, &why);
                Saved::Failed(why)
            }
            Err(()) => {
                eprintln!(
                    "{}",
                    json!({"proxy": "answered, record queued until the store takes it", "path": path,
                        "queued": self.recordings_queued(), "answered_before_recorded": inner.delayed.load(Relaxed)})
                );
                Saved::Queued
            }
        }
    }

    /// Counts and logs a call answered but not recorded.
    fn lost(&self, path: &str, why: &str) {
        let n = self
            .inner
            .failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        eprintln!(
            "{}",
            json!({"proxy": "answered but not recorded", "path": path, "error": why, "not_recorded": n})
        );
    }
}

/// What became of a call's record when its answer went out.
enum Saved {
    /// Written: the last node recorded.
    Node(Box<StoredNode>),
    /// Still waiting for the store (written when it takes it).
    Queued,
    /// Not recorded (counted): why.
    Failed(String),
}

/// How long an answer waits for its record before it goes out anyway (the
/// record stays queued): long enough for any store that is not locked or
/// gone (a record takes milliseconds), so a client that has its answer has
/// a recorded call; short next to SQLite's 60 s busy budget.
pub const RECORD_WAIT: Duration = Duration::from_secs(1);
/// At most this many records wait for the store; past it a call is
/// answered and counted as not recorded.
pub const MAX_QUEUED: usize = 10_000;
/// At most this many bytes of requests and answers wait for the store.
pub const MAX_QUEUED_BYTES: usize = 512 << 20;

/// The request's head and body, the body read as it streams in up to the
/// server's limit (`DefaultBodyLimit`, `--max-body-mib`): past it, `413`
/// and a JSON error, with no more than the limit read.
async fn read_request(req: Request) -> Result<(axum::http::request::Parts, Bytes), Response> {
    use axum::extract::FromRequest as _;
    use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
    let (parts, body) = req.into_parts();
    match Bytes::from_request(Request::from_parts(parts.clone(), body), &()).await {
        Ok(body) => Ok((parts, body)),
        Err(BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_))) => {
            Err(proxy_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                "the request body is larger than this server accepts (its --max-body-mib)",
            ))
        }
        Err(e) => Err(proxy_error(
            StatusCode::BAD_REQUEST,
            "invalid",
            &format!("cannot read the request body: {}", e.body_text()),
        )),
    }
}

/// A response body fed by a channel.
fn channel_body(rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Body {
    Body::from_stream(Channel { rx, failed: None })
}

/// The stream of a channel whose error (an upstream that cut its answer)
/// comes only after the server has had a turn to send what came before
/// it: the body is first `Pending` once (the server writes out what it
/// holds when its body has nothing ready), then fails. Without that turn
/// the server could drop the connection with the last chunks unsent, and
/// the client would get less than the upstream sent (and the record).
struct Channel {
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
    failed: Option<std::io::Error>,
}

impl futures_util::Stream for Channel {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if let Some(e) = self.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Err(e))) => {
                self.failed = Some(e);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            other => other,
        }
    }
}

/// Non-streamed answers up to this many bytes are read whole before they
/// are passed on (so their answer can name the node recorded); longer ones
/// pass through as they arrive, with bounded memory.
pub const WHOLE_ANSWER: usize = 1 << 20;

/// What the record keeps of an answer: at most `limit` bytes, the chunks'
/// lengths and times (streams), and the length and SHA-256 of the whole.
struct Kept {
    limit: usize,
    raw: Vec<u8>,
    chunks: Option<Vec<(usize, f64)>>,
    total: u64,
    whole: sha2::Sha256,
}

impl Kept {
    fn new(limit: usize, timed: bool) -> Kept {
        use sha2::Digest as _;
        Kept {
            limit,
            raw: Vec::new(),
            chunks: timed.then(Vec::new),
            total: 0,
            whole: sha2::Sha256::new(),
        }
    }

    /// A chunk that arrived `t` ms after the request was sent.
    fn push(&mut self, chunk: &[u8], t: f64) {
        use sha2::Digest as _;
        self.total += chunk.len() as u64;
        self.whole.update(chunk);
        let keep = chunk.len().min(self.limit - self.raw.len());
        if keep > 0 {
            if let Some(c) = &mut self.chunks {
                c.push((keep, t));
            }
            self.raw.extend_from_slice(&chunk[..keep]);
        }
    }

    /// Into the exchange: the body kept, its chunks, `truncated` when the
    /// record keeps less than the whole.
    fn finish(self, ex: &mut Exchange) {
        use sha2::Digest as _;
        if self.total > self.raw.len() as u64 {
            ex.truncated = Some((self.total, hex::encode(self.whole.finalize())));
        }
        ex.chunks = self.chunks.unwrap_or_default();
        ex.response_body = self.raw;
    }
}

/// The answer to a call the replay does not have (`--on-miss error`): a
/// 400 (a status no SDK retries: 409, 429 and 5xx are retried, 404 reads
/// as "model not found") naming the closest recorded call and where it
/// differs, and one line on stderr a test harness reads (the pytest
/// plugin's failure): each differing pointer with both values.
fn miss_answer(
    miss: &replay::Miss,
    received: &Value,
    session: &convo_core::SessionId,
    branch: &BranchName,
) -> Response {
    let (code, message) = match (&miss.recorded, miss.exhausted, miss.repeat_of) {
        (_, _, Some(n)) => (
            "replay_repeat",
            format!(
                "replay: this call matches call #{n} recorded on `{branch}` of session {session}, already answered; pass --replay-repeats to answer it again"
            ),
        ),
        (None, _, _) | (_, true, _) => (
            "replay_exhausted",
            format!(
                "replay: every call recorded on `{branch}` of session {session} has been answered; this call is not in the recording"
            ),
        ),
        (Some(_), false, None) => (
            "replay_miss",
            format!(
                "replay: no call recorded on `{branch}` of session {session} matches this one; the closest (call #{}) differs at {}",
                miss.recorded_call.unwrap_or(0),
                miss.differences.join(", ")
            ),
        ),
    };
    let values: Vec<Value> = miss
        .differences
        .iter()
        .map(|p| {
            let at = |v: Option<&Value>| v.and_then(|v| v.pointer(p)).cloned();
            json!({"pointer": p, "recorded": at(miss.recorded.as_ref()), "received": at(Some(received))})
        })
        .collect();
    eprintln!(
        "{}",
        json!({"proxy": "replay miss", "code": code, "recorded_call": miss.recorded_call,
               "differences": miss.differences, "values": values})
    );
    let body = json!({"error": {
        "type": "convo_proxy_error",
        "code": code,
        "message": message,
        "recorded": miss.recorded,
        "recorded_call": miss.recorded_call,
        "received": received,
        "differences": miss.differences,
    }});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// A recorded answer, re-sent as recorded.
fn serve_recorded(call: replay::Call, pace: replay::Pace) -> Response {
    let status = StatusCode::from_u16(call.status).unwrap_or(StatusCode::OK);
    let mut headers = HeaderMap::new();
    for (k, v) in &call.headers {
        if let (Ok(name), Some(Ok(value))) = (
            HeaderName::from_bytes(k.as_bytes()),
            v.as_str().map(HeaderValue::from_str),
        ) {
            headers.insert(name, value);
        }
    }
    headers.insert(
        HeaderName::from_static("x-convo-replayed"),
        HeaderValue::from_static("true"),
    );
    if let Some(total) = call.truncated {
        return proxy_error(
            StatusCode::BAD_GATEWAY,
            "replay_truncated",
            &format!(
                "replay: the recorded answer was {total} bytes, more than the record keeps ({} bytes): it cannot be replayed exactly",
                call.body.len()
            ),
        );
    }
    let streamed = call.chunks.is_some();
    if let (false, Some(why)) = (streamed, &call.cut)
        && call.body.len() <= WHOLE_ANSWER
    {
        // The client got this error live (an answer read whole).
        return proxy_error(StatusCode::BAD_GATEWAY, "upstream_cut", why);
    }
    let cut = call.cut.clone();
    let chunks = replay::chunks(&call);
    if !streamed && cut.is_none() {
        let body: Vec<u8> = chunks.into_iter().flat_map(|(b, _)| b.to_vec()).collect();
        return (status, headers, body).into_response();
    }
    let start = tokio::time::Instant::now();
    let stream = futures_util::stream::iter(chunks).then(move |(b, t)| async move {
        if pace == replay::Pace::Recorded {
            tokio::time::sleep_until(start + Duration::from_secs_f64(t.max(0.0) / 1000.0)).await;
        }
        Ok::<Bytes, std::io::Error>(b)
    });
    // A stream the upstream cut ends with the same error it did live.
    // (After a pause, so what came before reaches the client first, as it
    // did live: an error the body yields at once drops the connection with
    // the bytes still buffered.)
    let end = futures_util::stream::iter(cut).then(|why| async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        Err::<Bytes, _>(std::io::Error::other(why))
    });
    (status, headers, Body::from_stream(stream.chain(end))).into_response()
}

/// `x-convo-node` (the last node recorded), `x-convo-recording: queued`
/// (written when the store takes it) or `x-convo-error`.
fn mark(res: &mut Response, saved: Saved) {
    let (name, value) = match saved {
        Saved::Node(n) => ("x-convo-node", n.hash.to_hex()),
        Saved::Queued => ("x-convo-recording", "queued".to_owned()),
        Saved::Failed(why) => ("x-convo-error", why),
    };
    let value: String = value
        .chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .collect();
    if let Ok(v) = HeaderValue::from_str(&value) {
        res.headers_mut().insert(HeaderName::from_static(name), v);
    }
}

/// Used by `store_error` users outside this module.
pub fn error_response(e: &StoreError) -> Response {
    store_error(e)
}

/// The proxy's routes alone behind the server's guards for API clients
/// (body limit, path check, Host, token, CSRF, headers, request log: the
/// same as under `convo serve --upstream`): what `convo proxy` serves.
pub fn standalone(proxy: Proxy, config: &convo_runtime::Config) -> Router {
    let routes = router(proxy).fallback(|| async {
        proxy_error(
            StatusCode::NOT_FOUND,
            "not_found",
            "convo proxy serves /v1/…, /s/{session}/{branch}/v1/… and /convo/recording only",
        )
    });
    convo_runtime::guarded(routes, config, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::stream;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        h
    }

    fn cfg() -> ProxyConfig {
        ProxyConfig {
            upstream_key: Some("ok-key".into()),
            anthropic_key: Some("an-key".into()),
            ..ProxyConfig::new(None)
        }
    }

    #[test]
    fn route_sends_anthropic_calls_to_the_anthropic_upstream_and_the_rest_to_openai() {
        let (o, a) = (Some("http://o"), Some("http://a"));
        let none = HeaderMap::new();
        let r = route(&cfg(), o, a, Api::Messages, &none).unwrap();
        assert_eq!(r.base, "http://a");
        assert_eq!(r.key, Some(("x-api-key", "an-key".to_owned())));
        let by_header = headers(&[("anthropic-version", "2023-06-01")]);
        assert_eq!(
            route(&cfg(), o, a, Api::Other, &by_header).unwrap().base,
            "http://a"
        );
        let r = route(&cfg(), o, a, Api::Chat, &none).unwrap();
        assert_eq!(r.base, "http://o");
        assert_eq!(r.key, Some(("authorization", "Bearer ok-key".to_owned())));
        // An Anthropic call with no Anthropic upstream goes to the other,
        // and a chat call with only an Anthropic upstream goes there.
        assert_eq!(
            route(&cfg(), o, None, Api::Messages, &none).unwrap().base,
            "http://o"
        );
        assert_eq!(
            route(&cfg(), None, a, Api::Chat, &none).unwrap().base,
            "http://a"
        );
        assert_eq!(route(&cfg(), None, None, Api::Chat, &none), None);
        let keyless = ProxyConfig::new(None);
        assert_eq!(route(&keyless, o, a, Api::Chat, &none).unwrap().key, None);
    }

    #[test]
    fn upstream_url_keeps_the_path_and_query_as_sent() {
        assert_eq!(
            upstream_url("http://u:1", "chat/completions", None),
            "http://u:1/v1/chat/completions"
        );
        assert_eq!(
            upstream_url("http://u", "models", Some("key=s&x=1")),
            "http://u/v1/models?key=s&x=1"
        );
    }

    #[test]
    fn changes_made_upstream_are_noted_together() {
        let mut ex = Exchange::default();
        note_change(&mut ex, "stream_options.include_usage", json!(true));
        note_change(&mut ex, "headers.x-api-key", json!("added"));
        assert_eq!(
            ex.upstream_changes,
            Some(json!({"stream_options.include_usage": true, "headers.x-api-key": "added"}))
        );
    }

    #[test]
    fn exchange_records_the_path_with_keys_in_the_query_redacted_and_shares_the_body() {
        let req = axum::http::Request::builder()
            .uri("/v1/models?api_key=sk-secret&limit=2")
            .header("authorization", "Bearer sk-secret")
            .header("openai-beta", "x")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let body = Bytes::from_static(b"{}");
        let ex = exchange(
            Api::Models,
            "GET",
            "models",
            &parts,
            body.clone(),
            body::Facts::default(),
            "https://user:pw@up.example",
        );
        assert!(ex.path.starts_with("/v1/models?"), "{}", ex.path);
        assert!(!ex.path.contains("sk-secret"), "{}", ex.path);
        assert!(ex.path.contains("limit=2"));
        assert!(!ex.upstream.contains("pw"), "{}", ex.upstream);
        assert_eq!(ex.request_body.as_ptr(), body.as_ptr());
        let recorded = serde_json::to_string(&ex.request_headers).unwrap();
        assert!(!recorded.contains("sk-secret"), "{recorded}");
    }

    fn chunks(items: Vec<Result<&'static [u8], &'static str>>) -> impl Upstream {
        stream::iter(
            items
                .into_iter()
                .map(|r| r.map(Bytes::from_static).map_err(str::to_owned))
                .collect::<Vec<_>>(),
        )
    }

    #[tokio::test]
    async fn read_whole_joins_an_answer_and_says_where_it_was_cut() {
        let mut ttft = None;
        let t0 = Instant::now();
        let mut up = chunks(vec![Ok(b"{\"a\":"), Ok(b"1}")]);
        match read_whole(&mut up, t0, &mut ttft).await {
            Whole::Read { body, cut } => {
                assert_eq!(&body[..], b"{\"a\":1}");
                assert_eq!(cut, None);
            }
            Whole::Long(_) => panic!("a short answer is read whole"),
        }
        assert!(ttft.is_some());
        let mut up = chunks(vec![Ok(b"{\"a\":"), Err("reset")]);
        match read_whole(&mut up, t0, &mut None).await {
            Whole::Read { body, cut } => {
                assert_eq!(&body[..], b"{\"a\":");
                assert_eq!(cut.as_deref(), Some("reset"));
            }
            Whole::Long(_) => panic!("a short answer is read whole"),
        }
    }

    #[tokio::test]
    async fn read_whole_stops_past_the_whole_answer_limit_and_leaves_the_rest_upstream() {
        let big = vec![b'x'; WHOLE_ANSWER / 2 + 1];
        let parts: Vec<Result<Bytes, String>> =
            (0..4).map(|_| Ok(Bytes::from(big.clone()))).collect();
        let mut up = stream::iter(parts);
        match read_whole(&mut up, Instant::now(), &mut None).await {
            Whole::Long(head) => assert_eq!(head.len(), 2),
            Whole::Read { .. } => panic!("a long answer is passed through"),
        }
        assert_eq!(up.count().await, 2);
    }

    #[tokio::test]
    async fn pump_passes_every_chunk_on_and_a_cut_reaches_the_client_as_an_error() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let mut kept = Kept::new(1 << 20, true);
        let up = chunks(vec![Ok(b"data: 1\n\n"), Ok(b"data: 2\n\n"), Err("reset")]);
        let (ttft, partial) = pump(
            up,
            &tx,
            sse::ClientFilter::new(false),
            &mut kept,
            Instant::now(),
            "http://u",
        )
        .await;
        drop(tx);
        assert!(ttft.is_some());
        assert_eq!(
            partial.as_deref(),
            Some("upstream http://u cut the stream: reset")
        );
        assert_eq!(rx.recv().await.unwrap().unwrap(), &b"data: 1\n\n"[..]);
        assert_eq!(rx.recv().await.unwrap().unwrap(), &b"data: 2\n\n"[..]);
        assert!(rx.recv().await.unwrap().is_err());
        assert!(rx.recv().await.is_none());
        let mut ex = Exchange::default();
        kept.finish(&mut ex);
        assert_eq!(ex.response_body, b"data: 1\n\ndata: 2\n\n");
        assert_eq!(ex.chunks.len(), 2);
    }

    #[tokio::test]
    async fn pump_notes_a_client_that_went_away() {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        drop(rx);
        let mut kept = Kept::new(1 << 20, true);
        let up = chunks(vec![Ok(b"data: 1\n\n"), Ok(b"data: 2\n\n")]);
        let (_, partial) = pump(
            up,
            &tx,
            sse::ClientFilter::new(false),
            &mut kept,
            Instant::now(),
            "http://u",
        )
        .await;
        assert_eq!(partial.as_deref(), Some("the client disconnected"));
    }

    #[tokio::test]
    async fn relay_holds_the_last_chunk_back_and_reports_a_cut() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let mut kept = Kept::new(1 << 20, false);
        let head = vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let out = relay(head, chunks(vec![Ok(b"c")]), &tx, &mut kept).await;
        drop(tx);
        assert_eq!(out.held.as_deref(), Some(&b"c"[..]));
        assert_eq!((out.cut, out.gone), (None, false));
        assert_eq!(rx.recv().await.unwrap().unwrap(), &b"a"[..]);
        assert_eq!(rx.recv().await.unwrap().unwrap(), &b"b"[..]);
        assert!(rx.recv().await.is_none());
        let (tx, _rx) = tokio::sync::mpsc::channel(16);
        let out = relay(
            Vec::new(),
            chunks(vec![Ok(b"a"), Err("reset")]),
            &tx,
            &mut kept,
        )
        .await;
        assert_eq!(out.cut.as_deref(), Some("reset"));
        assert_eq!(out.held.as_deref(), Some(&b"a"[..]));
    }

    #[test]
    fn kept_keeps_at_most_its_limit_and_the_digest_of_the_whole() {
        use sha2::Digest as _;
        let mut kept = Kept::new(4, true);
        kept.push(b"abc", 1.0);
        kept.push(b"def", 2.0);
        let mut ex = Exchange::default();
        kept.finish(&mut ex);
        assert_eq!(ex.response_body, b"abcd");
        assert_eq!(ex.chunks, vec![(3, 1.0), (1, 2.0)]);
        assert_eq!(
            ex.truncated,
            Some((6, hex::encode(sha2::Sha256::digest(b"abcdef"))))
        );
        let mut whole = Kept::new(10, false);
        whole.push(b"abc", 0.0);
        let mut ex = Exchange::default();
        whole.finish(&mut ex);
        assert_eq!((ex.truncated, ex.response_body), (None, b"abc".to_vec()));
    }
}
