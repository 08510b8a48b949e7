//! The services an agent reaches during a turn, on a loopback HTTP server
//! the harness starts on a free port.
//!
//! Routes, under a scope and a token (`/t/{turn token}` as given in each
//! invoke body; `/a/{agent token}` in a child process's environment, which
//! cannot change between turns and always means "the current turn"):
//!
//! | route | what |
//! |---|---|
//! | `GET {kv}/{key}` | the value (404 when absent) |
//! | `PUT {kv}/{key}` | set the value to the body (204) |
//! | `DELETE {kv}/{key}` | remove it (204; 404 when absent) |
//! | `GET {kv}?prefix=P` | the keys starting with `P`, as a JSON array |
//! | `ANY {openai}/…`, `ANY {anthropic}/…` | inference, forwarded to the upstream through the proxy's forwarder (`convo_runtime::forward`: http or https, a stream passed on as it arrives), or answered from the recording in a replay |
//!
//! The VlinderCLI dialect is served too, for the agent's current turn
//! (these routes carry no token: one services server serves one agent):
//! `POST /get`, `/put`, `/delete`, `/list` with `{"path", "content"}`
//! bodies (the routes of VlinderCLI's `sqlite-kv.vlinder.local`), and
//! `/v1/…` and Ollama's `/api/…` inference paths (its `ollama.vlinder.local`
//! and `openrouter.vlinder.local`). A child process in that dialect reaches
//! them through `HTTP_PROXY`, so its `http://*.vlinder.local:3544/…` URLs
//! work unchanged without DNS.
//!
//! Like every listener, it answers only to its own names (loopback, and
//! `*.vlinder.local`): a web page that rebinds its name to 127.0.0.1 gets
//! 403 before any route runs (`convo_runtime::security::hosts_only`).
//!
//! Each call is a `request` (agent → `kv` / `infer`) and its `response`
//! in the turn's submission. A `kv` call is one store transaction: the
//! request node, the state operation on the timeline's working state, the
//! response node. Reads see the working state: the state as of the turn's
//! start on that timeline (for the first turn after a fork, the fork
//! point's state) plus this turn's own writes. A call with an unknown token
//! is 404; a call for a turn that has ended is 409 with a message saying
//! so; both as `{"error": {"kind", "message"}}`.

use crate::replay::{Divergence, Expected, describe_call, describe_infer};
use crate::{HarnessError, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use convo_core::{BranchName, Diagnostics, Kind, SessionId};
use convo_runtime::StorePool;
use convo_runtime::forward;
use convo_store::{Draft, TimelineNode};
use futures_util::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// One turn in progress, as its service calls see it.
#[derive(Debug)]
pub(crate) struct Turn {
    pub session: SessionId,
    pub branch: BranchName,
    pub agent: String,
    pub submission: String,
    /// 1-based turn number on the timeline.
    pub number: u64,
    /// In a replay: the recorded calls, answered and compared by sequence.
    pub expected: Option<Expected>,
    /// `true` while the turn accepts calls; calls hold it for reading, the
    /// end of the turn takes it for writing (so in-flight calls finish first).
    gate: Arc<tokio::sync::RwLock<bool>>,
    /// The request/response nodes recorded so far.
    pub nodes: Mutex<Vec<TimelineNode>>,
    /// Differences from the recording found by the service calls (replay).
    pub divergences: Mutex<Vec<Divergence>>,
    /// Inference calls (by sequence) that matched tolerating volatile
    /// differences (replay).
    pub tolerated: Mutex<Vec<(u32, Vec<convo_llm::replay::Tolerated>)>>,
}

impl Turn {
    pub fn new(
        session: SessionId,
        branch: BranchName,
        agent: String,
        submission: String,
        number: u64,
        expected: Option<Expected>,
    ) -> Self {
        Turn {
            session,
            branch,
            agent,
            submission,
            number,
            expected,
            gate: Arc::new(tokio::sync::RwLock::new(true)),
            nodes: Mutex::new(Vec::new()),
            divergences: Mutex::new(Vec::new()),
            tolerated: Mutex::new(Vec::new()),
        }
    }

    fn push(&self, n: TimelineNode) {
        if let Ok(mut v) = self.nodes.lock() {
            v.push(n);
        }
    }

    fn diverged(&self, d: Divergence) {
        if let Ok(mut v) = self.divergences.lock() {
            v.push(d);
        }
    }
}

enum Slot {
    Open(Arc<Turn>),
    Ended(String),
}

struct Registry {
    pool: StorePool,
    turns: Mutex<HashMap<String, Slot>>,
    agents: Mutex<HashMap<String, Option<String>>>,
    /// The agent token the VlinderCLI routes (no token in the URL) use.
    default_agent: Mutex<Option<String>>,
    /// The inference upstreams' base URLs (`http://` or `https://`).
    openai: Option<String>,
    anthropic: Option<String>,
    /// The one upstream forwarder (`convo_runtime::forward`).
    fwd: forward::Forwarder,
}

/// The running services server.
pub struct Services {
    addr: SocketAddr,
    reg: Arc<Registry>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Services({})", self.addr)
    }
}

/// The URLs of one scope's services.
#[derive(Clone, Debug)]
pub(crate) struct Urls {
    pub openai: String,
    pub anthropic: String,
    pub kv: String,
    pub root: String,
}

/// A random token for a URL path.
pub(crate) fn token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

impl Services {
    /// Starts the server on `127.0.0.1:0`. `openai` / `anthropic` are the
    /// inference upstreams (`http://` or `https://` URLs), when there are
    /// any.
    pub(crate) async fn start(
        pool: StorePool,
        openai: Option<&str>,
        anthropic: Option<&str>,
        port: u16,
    ) -> Result<Services> {
        let parse = |u: Option<&str>| -> Result<Option<String>> {
            u.map(|u| {
                upstream_base(u).map_err(|why| HarnessError::BadUrl {
                    what: "inference upstream",
                    url: convo_core::url::redact(u),
                    why,
                })
            })
            .transpose()
        };
        let fwd = forward::Forwarder::new(UPSTREAM_TIMEOUT).map_err(|e| HarnessError::BadUrl {
            what: "inference upstream",
            url: String::new(),
            why: format!("cannot build the HTTP client: {}", forward::error_text(e)),
        })?;
        let reg = Arc::new(Registry {
            pool,
            turns: Mutex::new(HashMap::new()),
            agents: Mutex::new(HashMap::new()),
            default_agent: Mutex::new(None),
            openai: parse(openai)?,
            anthropic: parse(anthropic)?,
            fwd,
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| {
                HarnessError::io(
                    format!("cannot start the services server on 127.0.0.1:{port}"),
                    e,
                )
            })?;
        let addr = listener
            .local_addr()
            .map_err(|e| HarnessError::io("cannot start the services server", e))?;
        // The Host allow-list every listener has: loopback names, and the
        // VlinderCLI names a child process reaches us by through HTTP_PROXY.
        let hosts = convo_runtime::security::Hosts::new(
            Some(addr),
            &["vlinder.local".to_owned(), "*.vlinder.local".to_owned()],
        );
        let app = router(reg.clone()).layer(axum::middleware::from_fn_with_state(
            hosts,
            convo_runtime::security::hosts_only,
        ));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Services {
            addr,
            reg,
            stop: Some(tx),
        })
    }

    /// The URLs for `scope` (`t` or `a`) and `token`.
    pub(crate) fn urls(&self, scope: &str, token: &str) -> Urls {
        let root = format!("http://{}/{scope}/{token}", self.addr);
        Urls {
            openai: format!("{root}/openai/v1"),
            anthropic: format!("{root}/anthropic"),
            kv: format!("{root}/kv"),
            root,
        }
    }

    pub(crate) fn register_agent(&self, agent_token: &str) {
        if let Ok(mut a) = self.reg.agents.lock() {
            a.insert(agent_token.to_owned(), None);
        }
        if let Ok(mut d) = self.reg.default_agent.lock() {
            *d = Some(agent_token.to_owned());
        }
    }

    /// The server's own root URL (`http://127.0.0.1:PORT`).
    pub(crate) fn root(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Opens a turn under `token`, and makes it the agent's current turn.
    pub(crate) fn open_turn(&self, token: &str, agent_token: &str, turn: Arc<Turn>) {
        if let Ok(mut t) = self.reg.turns.lock() {
            t.insert(token.to_owned(), Slot::Open(turn));
        }
        if let Ok(mut a) = self.reg.agents.lock() {
            a.insert(agent_token.to_owned(), Some(token.to_owned()));
        }
    }

    /// Ends a turn: waits for its calls in flight, then refuses new ones.
    pub(crate) async fn close_turn(&self, token: &str, agent_token: &str, turn: &Turn) {
        if let Ok(mut a) = self.reg.agents.lock() {
            a.insert(agent_token.to_owned(), None);
        }
        *turn.gate.write().await = false;
        if let Ok(mut t) = self.reg.turns.lock() {
            t.insert(token.to_owned(), Slot::Ended(turn.submission.clone()));
        }
    }

    /// Stops the server.
    pub(crate) fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for Services {
    fn drop(&mut self) {
        self.stop();
    }
}

fn router(reg: Arc<Registry>) -> Router {
    Router::new()
        .route("/{scope}/{token}/kv", get(kv_list))
        .route("/{scope}/{token}/kv/", get(kv_list))
        .route(
            "/{scope}/{token}/kv/{*key}",
            get(kv_get).put(kv_put).delete(kv_delete),
        )
        .route("/{scope}/{token}/openai/{*rest}", any(infer_route::<false>))
        .route(
            "/{scope}/{token}/anthropic/{*rest}",
            any(infer_route::<true>),
        )
        .fallback(vlinder)
        .with_state(reg)
}

fn error(status: StatusCode, kind: &str, message: String) -> Response {
    (
        status,
        axum::Json(json!({"error": {"kind": kind, "message": message}})),
    )
        .into_response()
}

impl Registry {
    fn resolve(&self, scope: &str, token: &str) -> Result<Arc<Turn>, Box<Response>> {
        let token = match scope {
            "t" => token.to_owned(),
            "a" => {
                let current = self.agents.lock().ok().and_then(|a| a.get(token).cloned());
                match current {
                    Some(Some(t)) => t,
                    Some(None) => {
                        return Err(Box::new(error(
                            StatusCode::CONFLICT,
                            "no_turn",
                            "no turn is in progress: kv and inference calls are accepted only while the agent answers an invoke".into(),
                        )));
                    }
                    None => return Err(Box::new(unknown())),
                }
            }
            _ => return Err(Box::new(unknown())),
        };
        let turns = self.turns.lock().map_err(|_| Box::new(unknown()))?;
        match turns.get(&token) {
            Some(Slot::Open(t)) => Ok(t.clone()),
            Some(Slot::Ended(sub)) => Err(Box::new(ended(sub))),
            None => Err(Box::new(unknown())),
        }
    }
}

fn unknown() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "unknown_turn",
        "unknown service token: use the URLs given in the invoke body (or the environment) of the current turn".into(),
    )
}

fn ended(submission: &str) -> Response {
    let short = submission.get(..12).unwrap_or(submission);
    error(
        StatusCode::CONFLICT,
        "turn_ended",
        format!(
            "turn {short} has ended: its services accept calls only while the agent answers that invoke (nothing was recorded)"
        ),
    )
}

/// A key-value operation.
#[derive(Clone, Debug)]
enum KvOp {
    Get(String),
    Put(String, Bytes),
    Delete(String),
    List(String),
}

impl KvOp {
    fn diagnostics(&self) -> Value {
        match self {
            KvOp::Get(k) => json!({"op": "get", "key": k}),
            KvOp::Put(k, _) => json!({"op": "put", "key": k}),
            KvOp::Delete(k) => json!({"op": "delete", "key": k}),
            KvOp::List(p) => json!({"op": "list", "prefix": p}),
        }
    }
    fn payload(&self) -> Vec<u8> {
        match self {
            KvOp::Put(_, v) => v.to_vec(),
            _ => Vec::new(),
        }
    }
}

async fn kv_get(
    State(reg): State<Arc<Registry>>,
    Path((scope, token, key)): Path<(String, String, String)>,
) -> Response {
    kv(reg, &scope, &token, KvOp::Get(key)).await
}

async fn kv_put(
    State(reg): State<Arc<Registry>>,
    Path((scope, token, key)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    kv(reg, &scope, &token, KvOp::Put(key, body)).await
}

async fn kv_delete(
    State(reg): State<Arc<Registry>>,
    Path((scope, token, key)): Path<(String, String, String)>,
) -> Response {
    kv(reg, &scope, &token, KvOp::Delete(key)).await
}

async fn kv_list(
    State(reg): State<Arc<Registry>>,
    Path((scope, token)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let prefix = q.get("prefix").cloned().unwrap_or_default();
    kv(reg, &scope, &token, KvOp::List(prefix)).await
}

fn draft(kind: Kind, from: &str, to: &str, payload: Vec<u8>, diag: &Value) -> Draft {
    Draft {
        kind,
        from: from.to_owned(),
        to: to.to_owned(),
        payload,
        diagnostics: Diagnostics::from_value(diag).unwrap_or_else(|_| Diagnostics::empty()),
        state: None,
        sequence: None,
        created_at: crate::now_ms(),
    }
}

fn node(stored: convo_store::StoredNode, payload: Vec<u8>) -> TimelineNode {
    TimelineNode { stored, payload }
}

/// How a kv call was made: convo's REST routes, or VlinderCLI's
/// `POST /get|/put|/delete|/list` (whose answers are always 200: an absent
/// key reads as an empty body, a write answers `{"state": ROOT}`, a delete
/// `ok` or `not_found`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Convo,
    Vlinder,
}

async fn kv(reg: Arc<Registry>, scope: &str, token: &str, op: KvOp) -> Response {
    kv_in(reg, scope, token, op, Dialect::Convo).await
}

async fn kv_in(
    reg: Arc<Registry>,
    scope: &str,
    token: &str,
    op: KvOp,
    dialect: Dialect,
) -> Response {
    let turn = match reg.resolve(scope, token) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    let gate = turn.gate.read().await;
    if !*gate {
        return ended(&turn.submission);
    }
    if let KvOp::Get(k) | KvOp::Put(k, _) | KvOp::Delete(k) = &op
        && k.is_empty()
    {
        return error(
            StatusCode::BAD_REQUEST,
            "bad_key",
            "a key must not be empty: use {kv_url}/{key}".into(),
        );
    }
    let (op2, t2) = (op.clone(), turn.clone());
    let done = reg
        .pool
        .run(move |store| store.transaction(|l| kv_write(l, &t2, &op2, dialect)))
        .await;
    let call = match done {
        Ok(x) => x,
        Err(e) => {
            let kind = e.kind();
            return error(
                StatusCode::from_u16(kind.http_status())
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                kind.as_str(),
                format!("the store refused the kv call: {e}"),
            );
        }
    };
    if let Some(d) = call.diverged {
        turn.diverged(d);
    }
    turn.push(node(call.req, op.payload()));
    turn.push(node(call.resp, call.body.clone()));
    drop(gate);
    kv_response(&op, dialect, call.status, call.body)
}

/// A kv call as recorded: its request and response nodes, the status and
/// body the agent gets, and how it differs from the recording (a replay).
struct KvCall {
    req: convo_store::StoredNode,
    resp: convo_store::StoredNode,
    status: u16,
    body: Vec<u8>,
    diverged: Option<Divergence>,
}

/// Records kv call `op` of `turn` and applies it to the timeline's state,
/// in one transaction. In a replay, a call that differs from the recording
/// is answered 409 `replay_diverged` and not applied (its state write
/// would be one the recording never made).
fn kv_write(
    l: &mut convo_store::Ledger<'_>,
    turn: &Turn,
    op: &KvOp,
    dialect: Dialect,
) -> convo_store::Result<KvCall> {
    let (s, b, agent) = (&turn.session, &turn.branch, &turn.agent);
    let mut req_diag = op.diagnostics();
    if dialect == Dialect::Vlinder {
        req_diag["dialect"] = json!("vlinder");
    }
    let req = l.append(
        s,
        b,
        &draft(Kind::Request, agent, "kv", op.payload(), &req_diag),
    )?;
    let got = describe_call("kv", &op.diagnostics(), &op.payload());
    let diverged = turn.expected.as_ref().and_then(|e| {
        e.check(turn.number, req.node.sequence.unwrap_or(0), &got, None)
            .err()
    });
    let (status, body, diag) = match &diverged {
        Some(d) => {
            let msg = format!(
                "replay: this kv call differs from the recording (turn {}, call #{}): {}",
                d.turn,
                d.sequence.unwrap_or(0),
                d.what
            );
            let body = json!({"error": {"kind": "replay_diverged", "message": msg}});
            (409, body.to_string().into_bytes(), json!({"status": 409}))
        }
        None => {
            let (status, body, root) = kv_apply(l, s, b, op)?;
            let (status, body) = in_dialect(dialect, op, status, body, root.as_deref());
            let mut diag = json!({"status": status});
            if let Some(r) = &root {
                diag["state"] = json!(r);
            }
            (status, body, diag)
        }
    };
    let mut d = draft(Kind::Response, "kv", agent, body.clone(), &diag);
    d.sequence = req.node.sequence;
    let resp = l.append(s, b, &d)?;
    Ok(KvCall {
        req,
        resp,
        status,
        body,
        diverged,
    })
}

/// Applies `op` to the timeline's working state: the status and body in
/// convo's dialect, and the new state root of a write.
fn kv_apply(
    l: &mut convo_store::Ledger<'_>,
    s: &SessionId,
    b: &BranchName,
    op: &KvOp,
) -> convo_store::Result<(u16, Vec<u8>, Option<String>)> {
    let working = l
        .branch(s, b)?
        .state
        .unwrap_or_else(convo_core::state::empty_root);
    Ok(match op {
        KvOp::Get(k) => match l.state_get(&working, k)? {
            Some(v) => (200, v, None),
            None => (404, Vec::new(), None),
        },
        KvOp::Put(k, v) => {
            let r = l.state_put(s, b, k, v)?;
            (204, Vec::new(), Some(r.to_hex()))
        }
        KvOp::Delete(k) => {
            let (r, existed) = l.state_delete(s, b, k)?;
            let status = if existed { 204 } else { 404 };
            (status, Vec::new(), Some(r.to_hex()))
        }
        KvOp::List(p) => {
            let keys: Vec<String> = l
                .state_keys(&working)?
                .into_iter()
                .filter(|k| k.starts_with(p.as_str()))
                .collect();
            (200, serde_json::to_vec(&keys).unwrap_or_default(), None)
        }
    })
}

/// The status and body of a kv answer in `dialect` (Vlinder's kv answers
/// 200 with a body of its own where convo's uses a status).
fn in_dialect(
    dialect: Dialect,
    op: &KvOp,
    status: u16,
    body: Vec<u8>,
    root: Option<&str>,
) -> (u16, Vec<u8>) {
    match (dialect, op) {
        (Dialect::Convo, _) => (status, body),
        (Dialect::Vlinder, KvOp::Get(_) | KvOp::List(_)) => (200, body),
        (Dialect::Vlinder, KvOp::Put(..)) => (
            200,
            json!({"state": root.unwrap_or_default()})
                .to_string()
                .into_bytes(),
        ),
        (Dialect::Vlinder, KvOp::Delete(_)) => {
            let said: &[u8] = if status == 204 { b"ok" } else { b"not_found" };
            (200, said.to_vec())
        }
    }
}

/// The HTTP answer to kv call `op`.
fn kv_response(op: &KvOp, dialect: Dialect, status: u16, body: Vec<u8>) -> Response {
    let mut r = (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), body).into_response();
    if status == 409
        || matches!(op, KvOp::List(_))
        || (dialect == Dialect::Vlinder && matches!(op, KvOp::Put(..)))
    {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    r
}

/// An inference route: [`infer`] in the Anthropic dialect (`ANTHROPIC`)
/// or the OpenAI one.
async fn infer_route<const ANTHROPIC: bool>(
    State(reg): State<Arc<Registry>>,
    Path((scope, token, rest)): Path<(String, String, String)>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let dialect = if ANTHROPIC { "anthropic" } else { "openai" };
    infer(
        reg,
        &scope,
        &token,
        dialect,
        method,
        rest,
        uri.query(),
        headers,
        body,
    )
    .await
}

/// How long an inference upstream may take to connect (at most 30 s) and
/// between two pieces of its answer.
const UPSTREAM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// An inference upstream's base URL, checked: `http://` or `https://`,
/// with a host; no trailing `/`.
fn upstream_base(url: &str) -> std::result::Result<String, String> {
    let u = reqwest::Url::parse(url)
        .map_err(|e| format!("not a URL ({e}): expected http(s)://HOST[:PORT][/PATH]"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!(
            "unsupported scheme `{}`; use http:// or https://",
            u.scheme()
        ));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("expected http(s)://HOST[:PORT][/PATH]".into());
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The path sent upstream: `rest` under the upstream's base path, where a
/// base ending in `/v1` absorbs a leading `v1/` (so `--upstream` may be a
/// server's root or its `/v1` base).
fn upstream_path(base: &str, rest: &str, query: Option<&str>) -> String {
    let rest = if base.ends_with("/v1") {
        rest.strip_prefix("v1/").unwrap_or(rest)
    } else {
        rest
    };
    match query {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    }
}

/// The URL a call goes to: [`upstream_path`] under `base`; Ollama's
/// native API (`api/…`) lives beside a `/v1` base, not under it.
fn upstream_url(base: &str, rest: &str, query: Option<&str>) -> String {
    let base = base.trim_end_matches('/');
    let base = match rest.starts_with("api/") {
        true => base.strip_suffix("/v1").unwrap_or(base),
        false => base,
    };
    format!("{base}{}", upstream_path(base, rest, query))
}

/// The call as the recording proxy records it (convo-llm's Exchange: its
/// header allow-list, API classification, model and usage), so calls
/// recorded by the harness and by `convo proxy` look the same. The
/// request is read once (convo-llm's `body.rs`), never parsed whole.
fn exchange(
    method: &Method,
    rest: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Bytes,
) -> convo_llm::record::Exchange {
    let sub = rest.strip_prefix("v1/").unwrap_or(rest);
    let mut ex = convo_llm::record::Exchange {
        api: Some(convo_llm::api::Api::classify(method.as_str(), sub)),
        method: method.as_str().to_owned(),
        path: match query {
            Some(q) => format!(
                "/{rest}?{}",
                convo_core::credential::redact_query(q, convo_core::credential::REDACTED)
            ),
            None => format!("/{rest}"),
        },
        request_headers: convo_llm::record::recorded_headers(
            headers.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
            convo_llm::record::RECORDED_REQUEST_HEADERS,
        ),
        request_body: body,
        started_at: crate::now_ms(),
        ..Default::default()
    };
    ex.facts = Some(ex.facts().into_owned());
    ex
}

#[allow(clippy::too_many_arguments)]
async fn infer(
    reg: Arc<Registry>,
    scope: &str,
    token: &str,
    api: &'static str,
    method: Method,
    rest: String,
    query: Option<&str>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let turn = match reg.resolve(scope, token) {
        Ok(t) => t,
        Err(r) => return *r,
    };
    let gate = turn.gate.clone().read_owned().await;
    if !*gate {
        return ended(&turn.submission);
    }
    let ex = exchange(&method, &rest, query, &headers, body);
    if turn.expected.is_none() {
        let call = LiveCall {
            api,
            method,
            rest,
            query: query.map(str::to_owned),
            headers,
        };
        return infer_live(reg, turn, gate, call, ex).await;
    }
    let (status, ctype, answer) = match infer_replay(&reg, &turn, &ex).await {
        Ok(a) => a,
        Err(refused) => return *refused,
    };
    drop(gate);
    let mut r = (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        answer,
    )
        .into_response();
    if let Some(ct) = ctype.and_then(|c| HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    r
}

/// A replayed inference call: the request recorded and compared first,
/// the answer (status, content type, body) from the recording.
async fn infer_replay(
    reg: &Registry,
    turn: &Turn,
    ex: &convo_llm::record::Exchange,
) -> std::result::Result<(u16, Option<String>, Bytes), Box<Response>> {
    let Some(exp) = &turn.expected else {
        return Err(Box::new(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "invalid",
            "not a replay".into(),
        )));
    };
    let req_diag = ex.request_diagnostics();
    let payload = ex.request_body.to_vec();
    let started = Instant::now();
    // Replay: the request is recorded and compared first; the answer
    // comes from the recording.
    let (s, b, agent) = (turn.session, turn.branch.clone(), turn.agent.clone());
    let d = draft(Kind::Request, &agent, "infer", payload.clone(), &req_diag);
    let req = match reg
        .pool
        .run(move |st| st.transaction(|l| l.append(&s, &b, &d)))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            return Err(Box::new(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.kind().as_str(),
                format!("the store refused the inference call: {e}"),
            )));
        }
    };
    let seq = req.node.sequence.unwrap_or(0);
    turn.push(node(req, payload.clone()));
    let (got, canon) = describe_infer(&exp.matching.matcher, &req_diag, &payload);
    let checked = exp.check(turn.number, seq, &got, Some(&canon)).map(|t| {
        if !t.is_empty()
            && let Ok(mut v) = turn.tolerated.lock()
        {
            v.push((seq, t));
        }
    });
    let (status, ctype, answer) = match checked.err() {
        None => match exp.response(seq) {
            Some((body, diag)) => {
                let status = diag.get("status").and_then(Value::as_u64).unwrap_or(200) as u16;
                let ctype = diag
                    .get("content_type")
                    .or_else(|| diag.get("headers").and_then(|h| h.get("content-type")))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                (status, ctype, Bytes::from(body))
            }
            None => (
                502,
                Some("application/json".to_owned()),
                Bytes::from(
                    json!({"error": {"kind": "replay", "message": format!("the recording has no response to inference call #{seq}")}}).to_string(),
                ),
            ),
        },
        Some(div) => {
            let msg = format!(
                "replay diverged at turn {}, call #{seq}: {}",
                div.turn, div.what
            );
            turn.diverged(div);
            (
                409,
                Some("application/json".to_owned()),
                Bytes::from(json!({"error": {"kind": "replay_diverged", "message": msg}}).to_string()),
            )
        }
    };
    let diag = json!({
        "status": status,
        "content_type": ctype,
        "latency_ms": started.elapsed().as_millis() as u64,
        "replayed": true,
    });
    let (s, b, agent) = (turn.session, turn.branch.clone(), turn.agent.clone());
    let mut d = draft(Kind::Response, "infer", &agent, answer.to_vec(), &diag);
    d.sequence = Some(seq);
    match reg
        .pool
        .run(move |st| st.transaction(|l| l.append(&s, &b, &d)))
        .await
    {
        Ok(resp) => turn.push(node(resp, answer.to_vec())),
        Err(e) => {
            return Err(Box::new(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.kind().as_str(),
                format!("the store refused the inference answer: {e}"),
            )));
        }
    }
    Ok((status, ctype, answer))
}

/// What an inference call going live needs besides its exchange.
struct LiveCall {
    /// `openai` or `anthropic`: which upstream.
    api: &'static str,
    method: Method,
    rest: String,
    query: Option<String>,
    headers: HeaderMap,
}

/// A live inference call, through the one forwarder
/// (`convo_runtime::forward`: http or https, the proxy's header policy):
/// a JSON answer read whole, recorded, then sent; a stream passed on to
/// the agent as it arrives and recorded when it ends, before the agent's
/// body ends (so an agent that has the whole answer has a recorded call).
async fn infer_live(
    reg: Arc<Registry>,
    turn: Arc<Turn>,
    gate: tokio::sync::OwnedRwLockReadGuard<bool>,
    call: LiveCall,
    mut ex: convo_llm::record::Exchange,
) -> Response {
    let started = Instant::now();
    let base = match call.api {
        "anthropic" => reg.anthropic.clone().or_else(|| reg.openai.clone()),
        _ => reg.openai.clone(),
    };
    let Some(base) = base else {
        ex.error = Some("no inference upstream".into());
        let why = "convo has no inference upstream: pass --upstream URL (or set CONVO_UPSTREAM)";
        return unanswered(&reg, &turn, ex, started, "no_upstream", why).await;
    };
    ex.upstream = convo_core::url::public(&base);
    let url = upstream_url(&base, &call.rest, call.query.as_deref());
    let (headers, _) = forward::request_headers(&call.headers, false, None);
    let sent = reg
        .fwd
        .send(call.method.as_str(), &url, headers, ex.request_body.clone())
        .await;
    let resp = match sent {
        Ok(r) => r,
        Err(e) => {
            let why = match e.is_connect() {
                true => format!(
                    "cannot connect to {}: {}",
                    ex.upstream,
                    forward::error_text(e)
                ),
                false => format!("{}: {}", ex.upstream, forward::error_text(e)),
            };
            ex.error = Some(why.clone());
            let why = format!("the inference upstream did not answer: {why}");
            return unanswered(&reg, &turn, ex, started, "upstream", &why).await;
        }
    };
    ex.ttft_ms = Some(started.elapsed().as_secs_f64() * 1000.0);
    let status = resp.status().as_u16();
    ex.response_headers = convo_llm::record::recorded_headers(
        resp.headers()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_bytes())),
        convo_llm::record::RECORDED_RESPONSE_HEADERS,
    );
    ex.streamed = forward::is_event_stream(resp.headers());
    let out_headers = forward::answer_headers(resp.headers());
    let mut up = forward::body(resp);
    if ex.streamed {
        return streamed(reg, turn, gate, ex, started, status, out_headers, up);
    }
    let mut all = Vec::new();
    while let Some(piece) = up.next().await {
        match piece {
            Ok(b) => all.extend_from_slice(&b),
            Err(e) => {
                let why = format!("upstream {} cut the answer: {e}", ex.upstream);
                ex.partial = Some(why.clone());
                ex.response_body = all;
                let body = json!({"error": {"kind": "upstream", "message": why}});
                return answered(
                    &reg,
                    &turn,
                    ex,
                    started,
                    502,
                    json_headers(),
                    body.to_string().into(),
                )
                .await;
            }
        }
    }
    drop(gate);
    answered(&reg, &turn, ex, started, status, out_headers, all.into()).await
}

/// `Content-Type: application/json`.
fn json_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h
}

/// Records a live call whose answer is `answer` (what the agent gets;
/// the record keeps the upstream's bytes when it has them), then answers.
/// A 502 with convo's error document: the upstream could not be asked.
async fn unanswered(
    reg: &Registry,
    turn: &Turn,
    ex: convo_llm::record::Exchange,
    started: Instant,
    kind: &str,
    message: &str,
) -> Response {
    let body = json!({"error": {"kind": kind, "message": message}});
    answered(
        reg,
        turn,
        ex,
        started,
        502,
        json_headers(),
        body.to_string().into(),
    )
    .await
}

async fn answered(
    reg: &Registry,
    turn: &Turn,
    mut ex: convo_llm::record::Exchange,
    started: Instant,
    status: u16,
    headers: HeaderMap,
    answer: Bytes,
) -> Response {
    if ex.status == 0 {
        ex.status = status;
    }
    if ex.response_body.is_empty() {
        ex.response_body = answer.to_vec();
    }
    if let Err(e) = record_live(reg, turn, ex, started).await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.kind().as_str(),
            format!("the store refused the inference call: {e}"),
        );
    }
    let mut r = Response::new(axum::body::Body::from(answer));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    *r.headers_mut() = headers;
    r
}

/// Records a live call in the turn's submission (`request` to `infer`
/// and its `response`).
async fn record_live(
    reg: &Registry,
    turn: &Turn,
    mut ex: convo_llm::record::Exchange,
    started: Instant,
) -> convo_store::Result<()> {
    ex.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    ex.ended_at = crate::now_ms();
    let (s, b, agent) = (turn.session, turn.branch.clone(), turn.agent.clone());
    let request = ex.request_body.to_vec();
    let response = std::mem::take(&mut ex.response_body);
    let mut ex2 = ex;
    ex2.response_body = response.clone();
    let (req, resp) = reg
        .pool
        .run(move |st| {
            st.transaction(|l| convo_llm::record::record_in_submission(l, &s, &b, &agent, &ex2))
        })
        .await?;
    turn.push(node(req, request));
    turn.push(node(resp, response));
    Ok(())
}

/// A streamed answer: each piece passed on to the agent as it arrives
/// (through a bounded channel: a slow agent slows the upstream read), the
/// call recorded when the stream ends, then the agent's body ended (with
/// the upstream's error when it cut the stream). The turn stays open
/// (`gate`) until then.
#[allow(clippy::too_many_arguments)]
fn streamed(
    reg: Arc<Registry>,
    turn: Arc<Turn>,
    gate: tokio::sync::OwnedRwLockReadGuard<bool>,
    mut ex: convo_llm::record::Exchange,
    started: Instant,
    status: u16,
    headers: HeaderMap,
    mut up: impl futures_util::Stream<Item = std::result::Result<Bytes, String>>
    + Send
    + Unpin
    + 'static,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::result::Result<Bytes, std::io::Error>>(16);
    ex.status = status;
    tokio::spawn(async move {
        let mut all = Vec::new();
        let mut cut = None;
        while let Some(piece) = up.next().await {
            match piece {
                Ok(b) => {
                    ex.chunks
                        .push((b.len(), started.elapsed().as_secs_f64() * 1000.0));
                    all.extend_from_slice(&b);
                    if tx.send(Ok(b)).await.is_err() {
                        ex.partial = Some("the agent disconnected".into());
                        break;
                    }
                }
                Err(e) => {
                    let why = format!("upstream {} cut the stream: {e}", ex.upstream);
                    ex.partial = Some(why.clone());
                    cut = Some(why);
                    break;
                }
            }
        }
        ex.response_body = all;
        if let Err(e) = record_live(&reg, &turn, ex, started).await {
            cut.get_or_insert(format!("the store refused the inference call: {e}"));
        }
        if let Some(why) = cut {
            let _ = tx.send(Err(std::io::Error::other(why))).await;
        }
        drop(gate);
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|piece| (piece, rx))
    });
    let mut r = Response::new(axum::body::Body::from_stream(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    *r.headers_mut() = headers;
    r
}

/// What the fallback answers for a route nobody serves.
fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such service: the harness serves {kv_url}, {openai_base_url} and {anthropic_base_url} as given in the invoke body (and VlinderCLI's POST /get, /put, /delete, /list, /v1/…, /api/…)".into(),
    )
}

/// A VlinderCLI kv body: `{"path": P}` or `{"path": P, "content": TEXT}`.
#[derive(serde::Deserialize)]
struct VlinderKv {
    path: String,
    content: Option<String>,
}

/// The VlinderCLI dialect (routes without a token, for the agent's current
/// turn), reached directly or through `HTTP_PROXY` with a
/// `*.vlinder.local` host; anything else is not found.
async fn vlinder(
    State(reg): State<Arc<Registry>>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let host = uri
        .host()
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(|h| match h.rsplit_once(':') {
                    Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
                        name.to_owned()
                    }
                    _ => h.to_owned(),
                })
        })
        .unwrap_or_default()
        .to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let vlinder_host = host == "vlinder.local" || host.ends_with(".vlinder.local");
    let local = matches!(host, "" | "127.0.0.1" | "localhost" | "::1");
    if !vlinder_host && !local {
        return error(
            StatusCode::BAD_GATEWAY,
            "not_proxied",
            format!(
                "convo's services proxy serves only VlinderCLI's *.vlinder.local hosts, not `{}`",
                convo_core::text::visible(host, convo_core::text::Newlines::Escape)
            ),
        );
    }
    let path = uri.path().to_owned();
    let agent = reg.default_agent.lock().ok().and_then(|d| d.clone());
    let Some(agent) = agent else {
        return not_found();
    };
    let kv_op = |p: &str| -> Option<Result<KvOp, String>> {
        if method != Method::POST {
            return None;
        }
        let parse = || serde_json::from_slice::<VlinderKv>(&body).map_err(|e| e.to_string());
        let op = match p {
            "/get" => parse().map(|b| KvOp::Get(b.path)),
            "/put" => parse().and_then(|b| match b.content {
                Some(c) => Ok(KvOp::Put(b.path, Bytes::from(c))),
                None => Err("missing field `content`".to_owned()),
            }),
            "/delete" => parse().map(|b| KvOp::Delete(b.path)),
            "/list" => parse().map(|b| KvOp::List(b.path)),
            _ => return None,
        };
        Some(op)
    };
    if let Some(op) = kv_op(&path) {
        return match op {
            Ok(op) => kv_in(reg, "a", &agent, op, Dialect::Vlinder).await,
            Err(why) => error(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!(
                    "{path} takes a JSON body {{\"path\": KEY}} ({{\"path\", \"content\"}} for /put): {why}"
                ),
            ),
        };
    }
    if path.starts_with("/v1/") || path.starts_with("/api/") {
        let rest = path.trim_start_matches('/').to_owned();
        return infer(
            reg,
            "a",
            &agent,
            "openai",
            method,
            rest,
            uri.query(),
            headers,
            body,
        )
        .await;
    }
    not_found()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One raw HTTP/1.1 request with this Host; the status.
    async fn status_for(addr: SocketAddr, host: &str, path: &str) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        c.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        c.read_to_end(&mut out).await.unwrap();
        let head = String::from_utf8_lossy(&out).into_owned();
        head.split(' ').nth(1).unwrap().parse().unwrap()
    }

    /// The services server has every listener's Host allow-list: a page
    /// rebinding its name to 127.0.0.1 gets 403 before any route; loopback
    /// and the VlinderCLI names (reached through HTTP_PROXY) get through.
    #[test]
    fn foreign_hosts_are_refused_and_vlinder_names_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("convo.db").display());
        let pool = StorePool::open(&url, 2).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let services = Services::start(pool, None, None, 0).await.unwrap();
            let addr = services.addr;
            let port = addr.port();
            for host in [
                "attacker.example".to_owned(),
                format!("attacker.example:{port}"),
                "vlinder.local.attacker.example".to_owned(),
                "evilvlinder.local".to_owned(),
            ] {
                for path in ["/put", "/t/x/kv/k", "/a/x/openai/v1/chat/completions"] {
                    assert_eq!(status_for(addr, &host, path).await, 403, "{host} {path}");
                }
            }
            for host in [
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                "sqlite-kv.vlinder.local:3544".to_owned(),
                "ollama.vlinder.local".to_owned(),
            ] {
                // No agent is registered: not found, but past the guard.
                assert_eq!(status_for(addr, &host, "/put").await, 404, "{host}");
            }
        });
    }

    /// A scripted SSE upstream for one call: sends the head and the first
    /// event, waits for `go`, then the rest and closes. Returns its URL.
    async fn stream_upstream(go: tokio::sync::oneshot::Receiver<()>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", l.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut c, _) = l.accept().await.unwrap();
            // The request: its head, then its body of Content-Length bytes.
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = c.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len: usize = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    if got.len() >= end + 4 + len {
                        assert!(text.starts_with("post /v1/chat/completions "), "{text}");
                        assert!(text.contains("authorization: bearer sk-up"), "{text}");
                        break;
                    }
                }
                assert!(n > 0, "the request was cut");
            }
            let first = "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n";
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Request-Id: up-1\r\nConnection: close\r\n\r\n";
            c.write_all(head.as_bytes()).await.unwrap();
            c.write_all(first.as_bytes()).await.unwrap();
            c.flush().await.unwrap();
            go.await.unwrap();
            let rest = concat!(
                "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n",
                "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
                "data: [DONE]\n\n"
            );
            c.write_all(rest.as_bytes()).await.unwrap();
            c.shutdown().await.unwrap();
        });
        url
    }

    /// An agent's streamed inference call goes through the proxy's
    /// forwarder: the first event reaches the agent while the upstream
    /// still holds the rest (it sends it only once the agent has read
    /// that event), and the whole stream is recorded in the turn.
    #[test]
    fn a_streamed_inference_call_reaches_the_agent_as_it_arrives_and_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("convo.db").display());
        let pool = StorePool::open(&url, 2).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (go, wait) = tokio::sync::oneshot::channel();
            let upstream = stream_upstream(wait).await;
            let services = Services::start(pool.clone(), Some(&upstream), None, 0)
                .await
                .unwrap();
            let main = BranchName::main();
            let (session, invoke) = pool
                .run(move |st| {
                    st.transaction(|l| {
                        let s = l.new_session("agent", None, 1)?;
                        let d = draft(Kind::Invoke, "user", "agent", b"hi".to_vec(), &json!({}));
                        let inv = l.append(&s.id, &BranchName::main(), &d)?;
                        Ok((s.id, inv))
                    })
                })
                .await
                .unwrap();
            let submission = invoke.node.submission.unwrap().to_hex();
            let turn = Arc::new(Turn::new(
                session,
                main,
                "agent".into(),
                submission,
                1,
                None,
            ));
            services.open_turn("tok", "agent-tok", turn.clone());
            let urls = services.urls("t", "tok");
            let body = json!({"model": "m", "stream": true,
                "messages": [{"role": "user", "content": "hi"}]});
            let mut res = reqwest::Client::new()
                .post(format!("{}/chat/completions", urls.openai))
                .header("authorization", "Bearer sk-up")
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 200);
            assert_eq!(res.headers()["content-type"], "text/event-stream");
            assert_eq!(res.headers()["x-request-id"], "up-1");
            let mut got = Vec::new();
            while !String::from_utf8_lossy(&got).contains("Hel") {
                got.extend_from_slice(&res.chunk().await.unwrap().expect("the first event"));
            }
            // Only now does the upstream send the rest.
            go.send(()).unwrap();
            while let Some(c) = res.chunk().await.unwrap() {
                got.extend_from_slice(&c);
            }
            let text = String::from_utf8(got).unwrap();
            assert!(
                text.contains("\"lo\"") && text.ends_with("data: [DONE]\n\n"),
                "{text}"
            );
            services.close_turn("tok", "agent-tok", &turn).await;
            let nodes = turn.nodes.lock().unwrap().clone();
            assert_eq!(nodes.len(), 2);
            assert_eq!(nodes[1].stored.node.kind, Kind::Response);
            assert_eq!(
                nodes[1].payload,
                text.as_bytes(),
                "recorded as the agent got it"
            );
            let d = nodes[1].stored.node.diagnostics.to_value();
            assert_eq!(d["streamed"], true);
            assert_eq!(d["status"], 200);
            assert_eq!(d["usage"]["completion_tokens"], 2);
            assert!(d["chunks"].as_array().unwrap().len() >= 2, "{d}");
            assert!(!nodes[0].stored.node.diagnostics.as_str().contains("sk-up"));
        });
    }

    #[test]
    fn upstream_paths_absorb_a_repeated_v1() {
        assert_eq!(
            upstream_base("https://api.openai.com/v1/").as_deref(),
            Ok("https://api.openai.com/v1")
        );
        assert!(upstream_base("ftp://h/v1").is_err());
        assert!(upstream_base("localhost:80").is_err());
        assert_eq!(
            upstream_url("https://h/v1", "api/chat", None),
            "https://h/api/chat"
        );
        assert_eq!(
            upstream_url("http://h:1/v1", "v1/chat/completions", Some("a=1")),
            "http://h:1/v1/chat/completions?a=1"
        );
        assert_eq!(
            upstream_path("/v1", "v1/chat/completions", None),
            "/chat/completions"
        );
        assert_eq!(
            upstream_path("", "v1/chat/completions", None),
            "/v1/chat/completions"
        );
        assert_eq!(
            upstream_path("/api", "v1/models", Some("a=1")),
            "/v1/models?a=1"
        );
    }
}
