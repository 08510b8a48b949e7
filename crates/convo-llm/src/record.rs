//! Recording one inference call: the library entry point.
//!
//! An [`Exchange`] is one call as it happened (what the client sent, what
//! the upstream answered, timings). [`record`] writes it on a timeline in
//! one transaction:
//!
//! - **inside an open submission** (the branch's head is in a submission
//!   that awaits its `complete`, as when the agent harness has recorded an
//!   `invoke`): a `request` to `infer` and its `response`, numbered by the
//!   submission's next `sequence` (see [`record_in_submission`], which the
//!   harness can also call in its own transaction);
//! - **otherwise** a whole turn: `invoke` (the user's new input), `request`
//!   (the full request body), `response` (the upstream's bytes), `complete`
//!   (the assistant's message).
//!
//! ## What each node holds
//!
//! - `request` payload: the request body exactly as the client sent it.
//!   Diagnostics: `api`, `method`, `path` (query string with key-like
//!   parameters removed), `headers` (allow-listed, see [`RECORDED_REQUEST_HEADERS`]),
//!   `model`, `stream`, `upstream` (scheme://host[:port]/path, no userinfo)
//!   and `upstream_changes` when what went upstream differs from what the
//!   client sent (`{"stream_options.include_usage": true}`).
//! - `response` payload: the upstream's body bytes exactly (for a stream,
//!   the raw SSE bytes, comment lines and unknown events included).
//!   Diagnostics: `status`, `headers` (allow-listed: content type, request
//!   ids, rate limits, `retry-after`), `model`, `usage`, `latency_ms`
//!   (request sent → last byte), `ttft_ms` (→ first body byte), `streamed`,
//!   `upstream_request_id`; for streams `chunks` (`[[bytes, ms since the
//!   request], …]`, one per chunk as it arrived; the answer in the
//!   non-streamed shape is assembled from the payload by its readers, so
//!   no copy of it sits in the diagnostics, which a redaction cannot
//!   erase); `partial` (why a stream ended early),
//!   `error` (an upstream that failed, timed out or was unreachable) and
//!   `truncated` (`{total_bytes, recorded_bytes, sha256}` when a stream was
//!   longer than the proxy's record limit: the payload is its first bytes).
//!
//! **Credentials are never recorded**: headers are recorded only when
//! named in the allow-list, and even then not when a value looks like a
//! key ([`looks_secret`]); a key inside a value (`User-Agent: app/1 (key
//! sk-…)`) is replaced by `REDACTED` ([`redact_secrets`]).

use crate::api::{self, Api};
use crate::body::Facts;
use bytes::Bytes;
use convo_api::default_ends;
use convo_core::{BranchName, Diagnostics, Kind, Millis, NodeHash, SessionId};
use convo_store::{Draft, Ledger, Result, Store, StoreError, StoredNode};
use serde_json::{Map, Value, json};

/// Request headers recorded (lowercase); every other header is dropped.
pub const RECORDED_REQUEST_HEADERS: &[&str] = &[
    "content-type",
    "accept",
    "user-agent",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "x-stainless-lang",
    "x-stainless-package-version",
    "x-stainless-runtime",
    "x-stainless-runtime-version",
    "x-stainless-os",
    "x-stainless-arch",
    "x-stainless-retry-count",
];

/// Response headers recorded (lowercase, or a prefix ending in `-`).
pub const RECORDED_RESPONSE_HEADERS: &[&str] = &[
    "content-type",
    "x-request-id",
    "request-id",
    "openai-processing-ms",
    "openai-version",
    "openai-model",
    "retry-after",
    "x-ratelimit-",
    "anthropic-ratelimit-",
];

/// Request headers that change a model's behaviour: part of the
/// canonical request replay checks.
pub const BEHAVIOUR_HEADERS: &[&str] = &["anthropic-version", "anthropic-beta", "openai-beta"];

/// Whether a header value (or query value) looks like a credential: a
/// bearer or basic scheme, a known key prefix, or a long opaque token.
pub fn looks_secret(v: &str) -> bool {
    let t = v.trim();
    let lower = t.to_ascii_lowercase();
    if lower.starts_with("bearer ") || lower.starts_with("basic ") {
        return true;
    }
    if [
        "sk-", "sk_", "pk-", "rk-", "key-", "api-", "aiza", "ghp_", "xox",
    ]
    .iter()
    .any(|p| lower.starts_with(p))
    {
        return true;
    }
    // A long run with no spaces, slashes or dots: a token, not a version.
    t.len() >= 32
        && !t.contains([' ', '/', '.', ','])
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '=')
}

/// The headers to record from `headers`, by an allow-list.
pub fn recorded_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    allow: &[&str],
) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        let allowed = allow.iter().any(|a| {
            if a.ends_with('-') {
                name.starts_with(a)
            } else {
                name == *a
            }
        });
        if !allowed {
            continue;
        }
        let Ok(v) = std::str::from_utf8(value) else {
            continue;
        };
        if looks_secret(v) {
            continue;
        }
        let v = redact_secrets(v);
        let v = v.as_str();
        match out.get_mut(&name) {
            Some(Value::String(prev)) => {
                prev.push_str(", ");
                prev.push_str(v);
            }
            _ => {
                out.insert(name, json!(v));
            }
        }
    }
    out
}

/// Whether a parameter name (`api_key`, `X-Token`, `password`…) says its
/// value is a credential.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["key", "token", "secret", "password", "auth", "sig"]
        .iter()
        .any(|s| n.contains(s))
}

/// A header value with every credential in it replaced by `REDACTED`:
/// split at spaces and punctuation (`;,()=:&"'`), a part that
/// [`looks_secret`], the part after an auth scheme (`Bearer`, `Basic`,
/// `Token`) and the value of a key-like `name=value` or `name: value` pair
/// ([`redact_query`]'s names).
pub fn redact_secrets(v: &str) -> String {
    const SEPARATORS: &[char] = &[' ', '\t', ';', ',', '(', ')', '=', ':', '&', '"', '\''];
    let mut out = String::with_capacity(v.len());
    // The previous part, and the separators between it and this one.
    let mut prev = "";
    let mut between = String::new();
    let mut rest = v;
    while !rest.is_empty() {
        let end = rest.find(SEPARATORS).unwrap_or(rest.len());
        let (part, after) = rest.split_at(end);
        if part.is_empty() {
            let sep = after.chars().next().unwrap_or(' ');
            out.push(sep);
            between.push(sep);
            rest = &after[sep.len_utf8()..];
            continue;
        }
        let scheme = ["bearer", "basic", "token"]
            .iter()
            .any(|s| prev.eq_ignore_ascii_case(s))
            && between.trim().is_empty();
        let named = secret_name(prev) && (between.contains('=') || between.contains(':'));
        if looks_secret(part) || scheme || named {
            out.push_str("REDACTED");
        } else {
            out.push_str(part);
        }
        prev = part;
        between.clear();
        rest = after;
    }
    out
}

/// A query string with the values of key-like parameters (`key`,
/// `api_key`, `token`, …) and key-like values removed.
pub fn redact_query(q: &str) -> String {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            if secret_name(k) || looks_secret(v) {
                format!("{k}=REDACTED")
            } else {
                kv.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A URL for the record: no userinfo, no query ([`convo_core::url::public`]).
pub fn public_url(url: &str) -> String {
    convo_core::url::public(url)
}

/// One call, as it happened.
#[derive(Clone, Debug, Default)]
pub struct Exchange {
    /// Which API (decides how the answer and usage are read).
    pub api: Option<Api>,
    /// HTTP method.
    pub method: String,
    /// Path as the upstream API names it (`/v1/chat/completions`), with a
    /// redacted query string when there is one.
    pub path: String,
    /// Allow-listed request headers ([`recorded_headers`]).
    pub request_headers: Map<String, Value>,
    /// The request body as the client sent it.
    pub request_body: Bytes,
    /// What the request says, read once ([`Facts`]); read from
    /// `request_body` when not given.
    pub facts: Option<Facts>,
    /// What went upstream differently, when it did.
    pub upstream_changes: Option<Value>,
    /// The upstream, as [`public_url`].
    pub upstream: String,
    /// HTTP status the client got.
    pub status: u16,
    /// Allow-listed response headers.
    pub response_headers: Map<String, Value>,
    /// The upstream's body bytes (a stream's raw bytes).
    pub response_body: Vec<u8>,
    /// Whether the response was a stream (`text/event-stream`).
    pub streamed: bool,
    /// Per chunk: its length and when it arrived (ms since the request).
    pub chunks: Vec<(usize, f64)>,
    /// When the request arrived (wall clock).
    pub started_at: Millis,
    /// When the answer ended (wall clock).
    pub ended_at: Millis,
    /// Request sent → last byte, ms.
    pub latency_ms: f64,
    /// Request sent → first body byte, ms.
    pub ttft_ms: Option<f64>,
    /// Why a stream ended early (client gone, upstream cut).
    pub partial: Option<String>,
    /// Why the upstream gave no answer (unreachable, timeout).
    pub error: Option<String>,
    /// When the answer was longer than the record keeps: its whole length
    /// and SHA-256 (hex); `response_body` holds its first bytes.
    pub truncated: Option<(u64, String)>,
    /// A subagent's first call: the call that started it (in the
    /// `invoke`'s diagnostics as `subagent`, see [`crate::thread::Spawn`]).
    pub subagent: Option<Value>,
}

fn ms(x: f64) -> Value {
    json!((x * 1000.0).round() / 1000.0)
}

impl Exchange {
    fn api(&self) -> Api {
        self.api.unwrap_or(Api::Other)
    }

    /// The request as JSON, when it is.
    pub fn request_json(&self) -> Option<Value> {
        api::parse(&self.request_body)
    }

    /// What the request says ([`Facts`]), read once.
    pub fn facts(&self) -> std::borrow::Cow<'_, Facts> {
        match &self.facts {
            Some(f) => std::borrow::Cow::Borrowed(f),
            None => std::borrow::Cow::Owned(Facts::read(self.api(), &self.request_body, None)),
        }
    }

    /// The key the next attempt of this call is recognized by: for a
    /// conversation, its messages (instructions aside, see
    /// [`crate::body`]), so a retry and a fallback to another model or
    /// with other parameters (a router's) are attempts of one turn;
    /// otherwise the request in its canonical form
    /// ([`crate::thread::retry_key`]). Computed only when a retry is
    /// possible.
    pub fn retry_key(&self) -> String {
        match &self.facts().messages {
            Some(c) => format!("retry:{}", c.after.key()),
            None => crate::thread::retry_key(&self.method, &self.path, &self.request_body),
        }
    }

    /// The answer in the non-streamed shape (assembled for a stream).
    pub fn response_json(&self) -> Option<Value> {
        if self.streamed {
            api::assemble(self.api(), &self.response_body)
        } else {
            api::parse(&self.response_body)
        }
    }

    /// The tool calls of a successful answer that could start a subagent
    /// ([`crate::thread::spawns_of_answer`]); the answer is read only when
    /// its bytes name a tool call.
    pub fn spawns(&self) -> Vec<crate::thread::Spawn> {
        let named = |w: &[u8]| self.response_body.windows(w.len()).any(|x| x == w);
        if !(200..300).contains(&self.status)
            || !(named(b"tool_use") || named(b"tool_calls") || named(b"function_call"))
        {
            return Vec::new();
        }
        let resp = self.response_json();
        let answer = api::reply(self.api(), resp.as_ref());
        crate::thread::spawns_of_answer(self.api(), answer.as_ref())
    }

    /// The `request` node's diagnostics.
    pub fn request_diagnostics(&self) -> Value {
        self.request_diagnostics_of(&self.facts())
    }

    fn request_diagnostics_of(&self, facts: &Facts) -> Value {
        let mut d = Map::new();
        d.insert("api".into(), json!(self.api().as_str()));
        d.insert("method".into(), json!(self.method));
        d.insert("path".into(), json!(self.path));
        d.insert(
            "headers".into(),
            Value::Object(self.request_headers.clone()),
        );
        if let Some(m) = &facts.model {
            d.insert("model".into(), json!(m));
        }
        d.insert("stream".into(), json!(facts.stream));
        d.insert("upstream".into(), json!(self.upstream));
        if let Some(c) = &self.upstream_changes {
            d.insert("upstream_changes".into(), c.clone());
        }
        Value::Object(d)
    }

    /// The `response` node's diagnostics.
    pub fn response_diagnostics(&self, resp: Option<&Value>) -> Value {
        let mut d = Map::new();
        d.insert("status".into(), json!(self.status));
        d.insert(
            "headers".into(),
            Value::Object(self.response_headers.clone()),
        );
        if let Some(m) = api::model(resp) {
            d.insert("model".into(), json!(m));
        }
        if let Some(u) = api::usage(self.api(), resp) {
            d.insert("usage".into(), u);
        }
        d.insert("latency_ms".into(), ms(self.latency_ms));
        if let Some(t) = self.ttft_ms {
            d.insert("ttft_ms".into(), ms(t));
        }
        d.insert("streamed".into(), json!(self.streamed));
        let rid = ["x-request-id", "request-id"]
            .iter()
            .find_map(|h| self.response_headers.get(*h).cloned());
        if let Some(rid) = rid {
            d.insert("upstream_request_id".into(), rid);
        }
        if self.streamed {
            let chunks: Vec<Value> = self
                .chunks
                .iter()
                .map(|(len, t)| json!([len, ms(*t)]))
                .collect();
            // Not the assembled answer: readers assemble it from the
            // payload, so a redaction of the payload erases every copy (a
            // node's diagnostics are inside its hash and stay).
            d.insert("chunks".into(), Value::Array(chunks));
        }
        if let Some(p) = &self.partial {
            d.insert("partial".into(), json!(p));
        }
        if let Some(e) = &self.error {
            d.insert("error".into(), json!(e));
        }
        if let Some((total, sha)) = &self.truncated {
            d.insert(
                "truncated".into(),
                json!({"total_bytes": total, "recorded_bytes": self.response_body.len(),
                       "sha256": sha}),
            );
        }
        Value::Object(d)
    }

    /// The `request` and `response` drafts (the response answers the
    /// request; its sequence is set by the caller when needed).
    pub fn pair(&self, agent: &str) -> Result<(Draft, Draft)> {
        self.pair_of(agent, &self.facts(), self.response_json().as_ref())
    }

    /// [`Exchange::pair`] with the request and answer already read: a
    /// request resends the whole conversation, so it is read once per
    /// call, not once per draft.
    fn pair_of(&self, agent: &str, facts: &Facts, resp: Option<&Value>) -> Result<(Draft, Draft)> {
        let (rf, rt) = default_ends(Kind::Request, agent);
        let (sf, st) = default_ends(Kind::Response, agent);
        Ok((
            draft(
                Kind::Request,
                rf,
                rt,
                self.request_body.to_vec(),
                &self.request_diagnostics_of(facts),
                self.started_at,
            )?,
            draft(
                Kind::Response,
                sf,
                st,
                self.response_body.clone(),
                &self.response_diagnostics(resp),
                self.ended_at,
            )?,
        ))
    }

    /// The four drafts of a whole turn: invoke, request, response, complete.
    pub fn turn(&self, agent: &str) -> Result<[Draft; 4]> {
        let facts = self.facts();
        let resp = self.response_json();
        let api = self.api();
        let input = match &facts.messages {
            Some(c) => c.new_input.clone(),
            None => format!("{} {}", self.method, self.path).into_bytes(),
        };
        let mut cdiag = Map::new();
        cdiag.insert("status".into(), json!(self.status));
        if let Some(m) = api::model(resp.as_ref()).or_else(|| facts.model.clone()) {
            cdiag.insert("model".into(), json!(m));
        }
        if let Some(u) = api::usage(api, resp.as_ref()) {
            cdiag.insert("usage".into(), u);
        }
        let answer = (200..300)
            .contains(&self.status)
            .then(|| api::reply(api, resp.as_ref()))
            .flatten();
        let answer_bytes = match &answer {
            Some(msg) => api::reply_text(api, msg),
            None => Vec::new(),
        };
        if let (Some(c), Some(a)) = (&facts.messages, &answer) {
            cdiag.insert("thread".into(), json!(c.after.key_with(a)));
        }
        for (field, key) in crate::thread::keys_of_answer(
            api,
            facts.conversation.as_deref(),
            facts.client.as_deref(),
            resp.as_ref(),
            answer.as_ref(),
        ) {
            cdiag.insert(field.as_str().into(), json!(key));
        }
        if let Some(e) = self.error.as_ref().or(self.partial.as_ref()) {
            cdiag.insert("error".into(), json!(e));
        }
        let (inv_from, inv_to) = default_ends(Kind::Invoke, agent);
        let (c_from, c_to) = default_ends(Kind::Complete, agent);
        let (request, response) = self.pair_of(agent, &facts, resp.as_ref())?;
        let mut idiag = json!({"api": api.as_str()});
        if let Some(link) = &self.subagent {
            idiag["subagent"] = link.clone();
        }
        Ok([
            draft(
                Kind::Invoke,
                inv_from,
                inv_to,
                input,
                &idiag,
                self.started_at,
            )?,
            request,
            response,
            draft(
                Kind::Complete,
                c_from,
                c_to,
                answer_bytes,
                &Value::Object(cdiag),
                self.ended_at,
            )?,
        ])
    }
}

fn draft(
    kind: Kind,
    from: String,
    to: String,
    payload: Vec<u8>,
    diag: &Value,
    at: Millis,
) -> Result<Draft> {
    Ok(Draft {
        kind,
        from,
        to,
        payload,
        diagnostics: Diagnostics::from_value(diag)
            .map_err(|e| StoreError::Invalid(format!("diagnostics: {e}").into()))?,
        state: None,
        sequence: None,
        created_at: at,
    })
}

/// What [`record`] wrote.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The nodes appended, in order.
    pub nodes: Vec<StoredNode>,
    /// Whether they are a whole turn (invoke … complete) rather than a
    /// request/response inside an open submission.
    pub whole_turn: bool,
}

impl Recorded {
    /// The last node appended (the complete of a whole turn, the response
    /// of a call inside a submission).
    pub fn last(&self) -> Option<NodeHash> {
        self.nodes.last().map(|n| n.hash)
    }
}

/// Appends a call as `request` + `response` into the branch's open
/// submission (the response answers that request's sequence), inside the
/// caller's transaction. Fails with the timeline rule's error when the
/// branch has no open submission. This is what the agent harness calls to
/// record an inference it made inside a submission it opened.
pub fn record_in_submission(
    ledger: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    agent: &str,
    ex: &Exchange,
) -> Result<(StoredNode, StoredNode)> {
    let (request, mut response) = ex.pair(agent)?;
    let req = ledger.append(session, branch, &request)?;
    response.sequence = req.node.sequence;
    let resp = ledger.append(session, branch, &response)?;
    Ok((req, resp))
}

/// Whether the branch's head is inside a submission awaiting its complete.
pub fn in_open_submission(
    ledger: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
) -> Result<bool> {
    let tx = ledger.tx();
    let b = tx
        .branch(session, branch)?
        .ok_or_else(|| StoreError::NoBranch {
            session: session.to_string(),
            branch: branch.to_string(),
        })?;
    let Some(head) = b.head else {
        return Ok(false);
    };
    let node = tx
        .node(&head)?
        .ok_or_else(|| StoreError::corrupt(format!("head {head} of `{branch}` is missing")))?;
    Ok(node.ctx.open)
}

/// Records a call in one transaction: into the open submission when the
/// branch has one, otherwise as a whole turn (see the module docs).
pub fn record(
    store: &mut Store,
    session: &SessionId,
    branch: &BranchName,
    ex: &Exchange,
) -> Result<Recorded> {
    store.transaction(|l| record_in(l, session, branch, ex))
}

/// [`record`] inside the caller's transaction.
///
/// A call that fails with a status SDKs retry ([`crate::thread::is_retried`])
/// leaves its turn open: `invoke`, `request` and a `response` whose
/// diagnostics say `awaiting_retry` (the request's
/// [`retry_key`](crate::thread::retry_key)). The same request next on the
/// timeline is the next attempt of that turn (`request`, `response`), and
/// the attempt that is not retried closes it with the `complete`; any
/// other call closes the open turn first (its `complete` carries the
/// failed attempt's status).
pub fn record_in(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    ex: &Exchange,
) -> Result<Recorded> {
    let agent = session_agent(l, session)?;
    let retried = crate::thread::is_retried(ex.status);
    let mut closed = Vec::new();
    if in_open_submission(l, session, branch)? {
        match awaiting_retry(l, session, branch)? {
            None => {
                let (a, b) = record_in_submission(l, session, branch, &agent, ex)?;
                return Ok(Recorded {
                    nodes: vec![a, b],
                    whole_turn: false,
                });
            }
            Some((key, _)) if key == ex.retry_key() => {
                return attempt_in(l, session, branch, &agent, ex);
            }
            Some((_, status)) => {
                // Not retried after all: the open turn ends as it failed.
                let (c_from, c_to) = default_ends(Kind::Complete, &agent);
                let end = draft(
                    Kind::Complete,
                    c_from,
                    c_to,
                    Vec::new(),
                    &json!({"status": status, "error": format!("the upstream answered {status} and the call was not retried")}),
                    ex.started_at,
                )?;
                closed.push(l.append(session, branch, &end)?);
            }
        }
    }
    let [invoke, request, mut response, complete] = ex.turn(&agent)?;
    if retried {
        mark_awaiting(&mut response, &ex.retry_key())?;
    }
    // One read of the branch and one move of its head for the turn (the
    // response answers the request before it: its sequence by default).
    let turn = [invoke, request, response, complete];
    let n = if retried { 3 } else { 4 };
    closed.extend(l.append_many_nodes(session, branch, &turn[..n])?);
    Ok(Recorded {
        nodes: closed,
        whole_turn: !retried,
    })
}

/// The agent a session was created for.
fn session_agent(l: &mut Ledger<'_>, session: &SessionId) -> Result<String> {
    Ok(l.tx()
        .session(session)?
        .ok_or_else(|| StoreError::NoSession(session.to_string()))?
        .agent)
}

/// [`record_in`] on a timeline whose head is a turn's `invoke` of the
/// same input (a timeline forked there to regenerate its answer): the
/// turn's `request`, `response` and `complete`, as an attempt of it.
pub fn record_answer_in(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    ex: &Exchange,
) -> Result<Recorded> {
    let agent = session_agent(l, session)?;
    attempt_in(l, session, branch, &agent, ex)
}

/// One attempt inside an open turn: `request`, `response` and, unless it
/// failed with a status SDKs retry (then it awaits its retry), `complete`.
fn attempt_in(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    agent: &str,
    ex: &Exchange,
) -> Result<Recorded> {
    let retried = crate::thread::is_retried(ex.status);
    let [_, request, mut response, complete] = ex.turn(agent)?;
    if retried {
        mark_awaiting(&mut response, &ex.retry_key())?;
    }
    let attempt = [request, response, complete];
    let n = if retried { 2 } else { 3 };
    let nodes = l.append_many_nodes(session, branch, &attempt[..n])?;
    Ok(Recorded {
        nodes,
        whole_turn: !retried,
    })
}

/// Marks a response as a failed attempt its turn awaits a retry of.
fn mark_awaiting(response: &mut Draft, retry: &str) -> Result<()> {
    let mut d = response.diagnostics.to_value();
    if let Some(o) = d.as_object_mut() {
        o.insert("awaiting_retry".into(), json!(retry));
    }
    response.diagnostics = Diagnostics::from_value(&d)
        .map_err(|e| StoreError::Invalid(format!("diagnostics: {e}").into()))?;
    Ok(())
}

/// When the branch's head is a proxy's failed attempt awaiting a retry:
/// the retry key it awaits and the status it failed with.
pub fn awaiting_retry(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
) -> Result<Option<(String, u64)>> {
    let tx = l.tx();
    let Some(head) = tx.branch(session, branch)?.and_then(|b| b.head) else {
        return Ok(None);
    };
    let Some(node) = tx.node(&head)? else {
        return Ok(None);
    };
    if node.node.kind != Kind::Response {
        return Ok(None);
    }
    let d = node.node.diagnostics.to_value();
    Ok(d.get("awaiting_retry").and_then(Value::as_str).map(|k| {
        (
            k.to_owned(),
            d.get("status").and_then(Value::as_u64).unwrap_or(0),
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_not_recorded() {
        let h: Vec<(&str, &[u8])> = vec![
            ("Authorization", b"Bearer sk-live-123"),
            ("x-api-key", b"sk-ant-xyz"),
            ("Content-Type", b"application/json"),
            ("anthropic-version", b"2023-06-01"),
            ("user-agent", b"sk-proj-abcdefgh"),
        ];
        let m = recorded_headers(h, RECORDED_REQUEST_HEADERS);
        assert_eq!(m.len(), 2);
        assert!(m.contains_key("content-type") && m.contains_key("anthropic-version"));
        // A key inside a value that is not one.
        let h: Vec<(&str, &[u8])> = vec![
            (
                "user-agent",
                b"my-agent/1.0 (key sk-proj-abc123; Bearer t0k3n) python",
            ),
            ("accept", b"application/json; token=hunter2"),
            ("content-type", b"multipart/form-data; boundary=abc"),
        ];
        let m = recorded_headers(h, RECORDED_REQUEST_HEADERS);
        assert_eq!(
            m["user-agent"],
            "my-agent/1.0 (key REDACTED; Bearer REDACTED) python"
        );
        assert_eq!(m["accept"], "application/json; token=REDACTED");
        assert_eq!(m["content-type"], "multipart/form-data; boundary=abc");
        assert_eq!(
            redact_secrets("OpenAI/Python 1.55.0"),
            "OpenAI/Python 1.55.0"
        );
        assert_eq!(
            redact_query("a=1&key=AIzaXX&x=sk-1"),
            "a=1&key=REDACTED&x=REDACTED"
        );
        assert_eq!(
            public_url("https://user:pw@api.example.com/v1?key=1"),
            "https://api.example.com/v1"
        );
    }
}
