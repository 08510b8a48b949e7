//! The JSON API under `/api/v1`. Every handler runs its store work through
//! the [`StorePool`](convo_runtime::StorePool) on a blocking thread; every
//! error is one [`ErrorDoc`] with the store's error kind and its HTTP status.

use crate::AppState;
use crate::events::{Filter, pump};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
pub use convo_api::http::{
    AppendBody, Appended, AtQuery, DiffQuery, EventsQuery, ExportQuery, ForkRequest, Forked,
    Health, ImportQuery, ImportSummary, ImportedSession, NewSession, PageQuery, PromoteRequest,
    PromotedView, Retitle, SearchQuery, SessionDetail, SessionList, SessionQuery, StateWritten,
    TimelinePageView,
};
use convo_api::{Branch, ErrorDoc, NodeView, Session};
use convo_core::{BranchName, HashPrefix, Kind, Millis};
use convo_runtime::wire::{self, FromStore as _};
use convo_store::{SessionRow, StoreError};
use std::convert::Infallible;

/// An API error: a status and an [`ErrorDoc`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    doc: ErrorDoc,
}

impl ApiError {
    /// A 422 `invalid` error.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            doc: ErrorDoc::new("invalid", message),
        }
    }
    /// A 400 `invalid` error: a request that does not parse (JSON syntax,
    /// an array where an object is documented, a query value of the wrong
    /// type, a path that is not UTF-8).
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            doc: ErrorDoc::new("invalid", message),
        }
    }
    /// What the framework refused (an extractor's rejection), as an error
    /// document with the rejection's status.
    pub fn rejected(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = match status {
            StatusCode::PAYLOAD_TOO_LARGE => "too_large",
            StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
            StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
            s if s.is_server_error() => "corrupt",
            _ => "invalid",
        };
        ApiError {
            status,
            doc: ErrorDoc::new(kind, message),
        }
    }
    /// What went wrong (the error document's message).
    pub fn message(&self) -> &str {
        &self.doc.error.message
    }
    /// A 404 `not_found` error.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            doc: ErrorDoc::new("not_found", message),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        ApiError {
            status: convo_runtime::error::status_of(&e),
            doc: ErrorDoc::from_store(&e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        convo_runtime::error::doc_response(self.status, self.doc)
    }
}

/// An error response with the given status, kind and message.
pub use convo_runtime::error::error_response;

type ApiResult<T> = Result<T, ApiError>;

/// The query string, parsed; a value of the wrong type (`cursor=abc`) is
/// a 400 error document, not the framework's plain text.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::bad_request(format!("query string: {}", e.body_text())))
    }
}

/// The path's parameters, percent-decoded; a path that is not UTF-8 is a
/// 400 error document.
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for Path<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::rejected(e.status(), format!("path: {}", e.body_text())))
    }
}

/// The request body's bytes; a body over the limit is a 413 error document.
#[derive(Debug)]
pub struct Body(pub Bytes);

impl<S> axum::extract::FromRequest<S> for Body
where
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        Bytes::from_request(req, state)
            .await
            .map(Body)
            .map_err(|e| {
                let status = e.status();
                let msg = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    "the request body is over this server's limit (--max-body-mib)".to_owned()
                } else {
                    format!("request body: {}", e.body_text())
                };
                ApiError::rejected(status, msg)
            })
    }
}

/// A method the route does not serve: 405 with the error document.
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        &format!("{} is not served: {method} is not allowed", uri.path()),
    )
}

pub(crate) fn now() -> Millis {
    convo_runtime::now_ms()
}

pub(crate) fn branch_name(s: &str) -> ApiResult<BranchName> {
    BranchName::new(s).map_err(|e| ApiError::invalid(e.to_string()))
}

pub(crate) fn prefix(s: &str) -> ApiResult<HashPrefix> {
    HashPrefix::parse(s).map_err(|e| ApiError::invalid(e.to_string()))
}

/// The node a reference names in `session` (see `convo_store::refs`), as
/// the full-hash prefix the store calls take.
pub(crate) fn resolved(
    s: &mut convo_store::Store,
    session: &convo_core::SessionId,
    r: &str,
) -> convo_store::Result<HashPrefix> {
    let n = s.resolve_ref(session, r)?;
    HashPrefix::parse(&n.hash.to_hex()).map_err(StoreError::invalid)
}

// ----- sessions ---------------------------------------------------------

/// The session list, newest first, filtered and paginated.
#[utoipa::path(get, path = "/api/v1/sessions", params(SessionQuery),
    responses((status = 200, body = SessionList), (status = "default", body = ErrorDoc)))]
pub async fn list_sessions(
    State(st): State<AppState>,
    Query(q): Query<SessionQuery>,
) -> ApiResult<Json<SessionList>> {
    let all = st.pool.run(|s| s.sessions()).await?;
    Ok(Json(filter_sessions(all, &q)))
}

pub(crate) fn filter_sessions(all: Vec<SessionRow>, q: &SessionQuery) -> SessionList {
    let mut hits = matching_sessions(&all, q);
    let total = hits.len();
    let offset = q.offset.unwrap_or(0).min(total);
    let limit = q.limit.unwrap_or(50).clamp(1, 1000);
    let end = (offset + limit).min(total);
    let sessions = hits.drain(offset..end).map(Session::from_store).collect();
    SessionList {
        sessions,
        total,
        next_offset: (end < total).then_some(end),
    }
}

/// Every session `q`'s filters let through (its `offset` and `limit`
/// aside), newest first.
pub(crate) fn matching_sessions<'a>(
    all: &'a [SessionRow],
    q: &SessionQuery,
) -> Vec<&'a SessionRow> {
    let needle = given(&q.q).map(str::to_lowercase).unwrap_or_default();
    all.iter()
        .rev()
        // A blank `agent=` (an empty form field) is no filter.
        .filter(|s| given(&q.agent).is_none_or(|a| s.agent == a))
        .filter(|s| {
            needle.is_empty()
                || s.id.to_string().contains(&needle)
                || s.agent.to_lowercase().contains(&needle)
                || s.title
                    .as_deref()
                    .is_some_and(|t| t.to_lowercase().contains(&needle))
        })
        .collect()
}

/// Creates a session with an empty `main`.
#[utoipa::path(post, path = "/api/v1/sessions", request_body = NewSession,
    responses((status = 201, body = Session), (status = "default", body = ErrorDoc)))]
pub async fn create_session(
    State(st): State<AppState>,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<Session>)> {
    let n: NewSession = parse_json(&body)?;
    if n.agent.trim().is_empty() {
        return Err(ApiError::invalid("`agent` must not be empty"));
    }
    let row = st
        .pool
        .run(move |s| s.transaction(|l| l.new_session(&n.agent, n.title.as_deref(), now())))
        .await?;
    Ok((StatusCode::CREATED, Json(Session::from_store(&row))))
}

/// One session (by id, unique id prefix or title) with its branches.
#[utoipa::path(get, path = "/api/v1/sessions/{session}",
    params(("session" = String, Path, description = "id, unique id prefix, or title")),
    responses((status = 200, body = SessionDetail), (status = "default", body = ErrorDoc)))]
pub async fn get_session(
    State(st): State<AppState>,
    Path(q): Path<String>,
) -> ApiResult<Json<SessionDetail>> {
    let (row, branches) = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let b = s.branches(&row.id)?;
            Ok((row, b))
        })
        .await?;
    Ok(Json(SessionDetail {
        session: Session::from_store(&row),
        branches: branches.iter().map(Branch::from_store).collect(),
    }))
}

/// Sets or removes a session's title (recorded, so verify still binds it).
#[utoipa::path(patch, path = "/api/v1/sessions/{session}",
    params(("session" = String, Path, description = "id, unique id prefix, or title")),
    request_body = Retitle,
    responses((status = 200, body = Session), (status = "default", body = ErrorDoc)))]
pub async fn retitle(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Session>> {
    let r: Retitle = parse_json(&body)?;
    let row = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            s.transaction(|l| l.retitle(&row.id, r.title.as_deref()))
        })
        .await?;
    Ok(Json(Session::from_store(&row)))
}

/// The session's branches.
#[utoipa::path(get, path = "/api/v1/sessions/{session}/branches",
    params(("session" = String, Path, description = "id, unique id prefix, or title")),
    responses((status = 200, body = Vec<Branch>), (status = "default", body = ErrorDoc)))]
pub async fn list_branches(
    State(st): State<AppState>,
    Path(q): Path<String>,
) -> ApiResult<Json<Vec<Branch>>> {
    let branches = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            s.branches(&row.id)
        })
        .await?;
    Ok(Json(branches.iter().map(Branch::from_store).collect()))
}

// ----- timelines and nodes ------------------------------------------------

/// A page of a timeline, root to head, with turn numbers.
#[utoipa::path(get, path = "/api/v1/sessions/{session}/branches/{branch}/timeline",
    params(("session" = String, Path), ("branch" = String, Path), PageQuery),
    responses((status = 200, body = TimelinePageView), (status = "default", body = ErrorDoc)))]
pub async fn timeline(
    State(st): State<AppState>,
    Path((q, b)): Path<(String, String)>,
    Query(p): Query<PageQuery>,
) -> ApiResult<Json<TimelinePageView>> {
    let branch = branch_name(&b)?;
    let limit = p.limit.unwrap_or(200).clamp(1, 2000);
    let cursor = p.cursor.unwrap_or(0);
    let otel = p.otel.unwrap_or(false);
    if !p.payloads.unwrap_or(true) {
        return Ok(Json(
            st.pool
                .run(move |s| bare_timeline_page(s, &q, &branch, cursor, limit))
                .await?,
        ));
    }
    Ok(Json(
        st.pool
            .run(move |s| timeline_page(s, &q, &branch, cursor, limit, otel))
            .await?,
    ))
}

/// A page of a timeline without payloads (`payloads=false`).
pub(crate) fn bare_timeline_page(
    s: &mut convo_store::Store,
    q: &str,
    branch: &BranchName,
    cursor: i64,
    limit: usize,
) -> convo_store::Result<TimelinePageView> {
    let row = s.find_session(q)?;
    let start = if cursor < 0 {
        // The last `-cursor` nodes (at most a page), as `timeline_page` reads them.
        let total = s.timeline_page_bare(&row.id, branch, 0, 1)?.total;
        total.saturating_sub((cursor.unsigned_abs() as usize).min(limit))
    } else {
        cursor as usize
    };
    let page = s.timeline_page_bare(&row.id, branch, start, limit)?;
    let nodes: Vec<NodeView> = page
        .nodes
        .iter()
        .map(|(n, turn)| wire::node(&n.stored, None).with_turn(*turn))
        .collect();
    let end = page.offset + nodes.len();
    Ok(TimelinePageView {
        branch: branch.as_str().to_owned(),
        nodes,
        total: page.total,
        turns: page.turns,
        cursor: page.offset,
        next_cursor: (end < page.total).then_some(end),
    })
}

pub(crate) fn timeline_page(
    s: &mut convo_store::Store,
    q: &str,
    branch: &BranchName,
    cursor: i64,
    limit: usize,
    otel: bool,
) -> convo_store::Result<TimelinePageView> {
    let row = s.find_session(q)?;
    let page = if cursor < 0 {
        // From the end, in the same single pass.
        let n = (cursor.unsigned_abs() as usize).min(limit);
        s.timeline_tail(&row.id, branch, n)?
    } else {
        s.timeline_page(&row.id, branch, cursor as usize, limit)?
    };
    let offset = page.offset;
    // A call received as telemetry leaves its details to the kept export
    // body: read back, beside the diagnostics as stored.
    let refs: Vec<_> = page
        .nodes
        .iter()
        .map(|(n, _)| (&n.stored, n.payload.as_slice()))
        .collect();
    let otel = if otel {
        convo_llm::otel::ingest::resolve_kept(s, &refs)?
    } else {
        vec![None; refs.len()]
    };
    let nodes: Vec<NodeView> = page
        .nodes
        .iter()
        .zip(otel)
        .map(|((n, turn), o)| {
            let mut v = wire::node(&n.stored, Some(&n.payload)).with_turn(*turn);
            if v.diagnostics
                .pointer("/extra/otel")
                .is_none_or(convo_llm::otel::ingest::left_to_body)
            {
                v.otel = o;
            }
            v
        })
        .collect();
    let end = offset + nodes.len();
    Ok(TimelinePageView {
        branch: branch.as_str().to_owned(),
        nodes,
        total: page.total,
        turns: page.turns,
        cursor: offset,
        next_cursor: (end < page.total).then_some(end),
    })
}

/// One node by full hash or unique prefix (4+ hex digits), with its payload.
#[utoipa::path(get, path = "/api/v1/nodes/{hash}",
    params(("hash" = String, Path, description = "full hash or unique prefix")),
    responses((status = 200, body = NodeView), (status = "default", body = ErrorDoc)))]
pub async fn get_node(
    State(st): State<AppState>,
    Path(h): Path<String>,
) -> ApiResult<Json<NodeView>> {
    let p = prefix(&h)?;
    let (node, payload) = st.pool.run(move |s| node_with_payload(s, &p)).await?;
    Ok(Json(wire::node(&node, Some(&payload))))
}

/// A node's raw payload. `Content-Type` is `application/json` for JSON,
/// `text/plain; charset=utf-8` for other text, `application/octet-stream`
/// otherwise (as an attachment); never rendered as HTML.
#[utoipa::path(get, path = "/api/v1/nodes/{hash}/payload",
    params(("hash" = String, Path)),
    responses((status = 200, description = "the payload bytes", content_type = "application/octet-stream"),
        (status = "default", body = ErrorDoc)))]
pub async fn node_payload(
    State(st): State<AppState>,
    Path(h): Path<String>,
) -> ApiResult<Response> {
    let p = prefix(&h)?;
    let (hash, payload) = st
        .pool
        .run(move |s| {
            let (n, b) = node_with_payload(s, &p)?;
            Ok((n.hash.to_hex(), b))
        })
        .await?;
    let ct = content_type(&payload);
    let mut res = (StatusCode::OK, payload).into_response();
    let h = res.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    if ct == "application/octet-stream"
        && let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{hash}.bin\""))
    {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(res)
}

/// A node by hash or prefix, with its payload bytes.
pub(crate) fn node_with_payload(
    s: &mut convo_store::Store,
    p: &HashPrefix,
) -> convo_store::Result<(convo_store::StoredNode, Vec<u8>)> {
    let n = s.node(p)?;
    let b = s
        .blob(&n.node.payload)?
        .ok_or_else(|| StoreError::corrupt(format!("payload of node {} is missing", n.hash)))?;
    Ok((n, b))
}

fn content_type(b: &[u8]) -> &'static str {
    match std::str::from_utf8(b) {
        Ok(t) if serde_json::from_str::<serde_json::Value>(t).is_ok() && !t.trim().is_empty() => {
            "application/json"
        }
        Ok(_) => "text/plain; charset=utf-8",
        Err(_) => "application/octet-stream",
    }
}

// ----- writes -------------------------------------------------------------

/// Appends messages to a timeline, in one transaction (all or none). The
/// line shape is `convo ingest`'s ([`AppendLine`]); at most 10,000 lines.
#[utoipa::path(post, path = "/api/v1/sessions/{session}/branches/{branch}/nodes",
    params(("session" = String, Path), ("branch" = String, Path)),
    request_body = AppendBody,
    responses((status = 201, body = Appended), (status = 409, body = ErrorDoc, description = TURN_OPEN), (status = "default", body = ErrorDoc)))]
pub async fn append(
    State(st): State<AppState>,
    Path((q, b)): Path<(String, String)>,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<Appended>)> {
    let branch = branch_name(&b)?;
    let lines = parse_json_objects::<AppendBody>(&body)?;
    let lines = match lines {
        AppendBody::One(l) => vec![l],
        AppendBody::Many(v) => v,
    };
    if lines.is_empty() {
        return Err(ApiError::invalid("nothing to append: the array is empty"));
    }
    if lines.len() > 10_000 {
        return Err(ApiError::invalid(format!(
            "{} lines in one request; send at most 10000",
            lines.len()
        )));
    }
    let stamp = now();
    let (row, drafts) = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let drafts = lines
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    wire::draft(l, &row.agent, stamp)
                        .map_err(|e| StoreError::Invalid(format!("line {}: {e}", i + 1).into()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((row, drafts))
        })
        .await?;
    let nodes = st.writer.append(row, branch, drafts).await?;
    st.hub.poke();
    Ok((
        StatusCode::CREATED,
        Json(Appended {
            nodes: nodes.iter().map(|n| wire::node(n, None)).collect(),
        }),
    ))
}

/// Parses a JSON body that must be one object: a body that is not JSON,
/// or JSON of another shape (an array, a string), is a 400; an object
/// whose fields break the schema (unknown field, wrong type) a 422, with
/// serde's line, column and what.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let v = json_value(body)?;
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "request body: expected a JSON object, got {}",
            json_type(&v)
        )));
    }
    from_value(v)
}

/// Parses a JSON body: an object, or an array of objects.
pub(crate) fn parse_json_objects<T: serde::de::DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let v = json_value(body)?;
    let ok = match &v {
        serde_json::Value::Object(_) => true,
        serde_json::Value::Array(items) => items.iter().all(serde_json::Value::is_object),
        _ => false,
    };
    if !ok {
        return Err(ApiError::bad_request(format!(
            "request body: expected a JSON object or an array of objects, got {}",
            json_type(&v)
        )));
    }
    from_value(v)
}

fn json_value(body: &[u8]) -> ApiResult<serde_json::Value> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("request body is not JSON: {e}")))
}

fn from_value<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> ApiResult<T> {
    serde_json::from_value(v).map_err(|e| ApiError::invalid(format!("request body: {e}")))
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(a) if a.iter().all(serde_json::Value::is_object) => "an array",
        serde_json::Value::Array(_) => "an array holding something other than objects",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Forks a new timeline from any node of the session (O(1) at any depth).
#[utoipa::path(post, path = "/api/v1/sessions/{session}/fork",
    params(("session" = String, Path)), request_body = ForkRequest,
    responses((status = 201, body = Forked), (status = 409, body = ErrorDoc, description = TURN_OPEN), (status = "default", body = ErrorDoc)))]
pub async fn fork(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<Forked>)> {
    let f: ForkRequest = parse_json(&body)?;
    let branch = branch_name(&f.branch)?;
    let (node, b) = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let from = resolved(s, &row.id, &f.from)?;
            let node = s.transaction(|l| {
                // A fork from a timeline with an open turn would start inside it.
                if let Some(src) = convo_store::refs::source_branch(l.tx(), &row.id, &f.from)? {
                    guard(l, &row.id, &src)?;
                }
                l.fork(&row.id, &from, &branch, now())
            })?;
            let b = s.branch(&row.id, &branch)?;
            Ok((node, b))
        })
        .await?;
    st.hub.poke();
    Ok((
        StatusCode::CREATED,
        Json(Forked {
            branch: Branch::from_store(&b),
            node: wire::node(&node, None),
        }),
    ))
}

/// Makes a branch `main`; the old `main` is sealed as `broken-YYYY-MM-DD`.
#[utoipa::path(post, path = "/api/v1/sessions/{session}/promote",
    params(("session" = String, Path)), request_body = PromoteRequest,
    responses((status = 200, body = PromotedView), (status = 409, body = ErrorDoc, description = TURN_OPEN), (status = "default", body = ErrorDoc)))]
pub async fn promote(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<PromotedView>> {
    let p: PromoteRequest = parse_json(&body)?;
    let branch = branch_name(&p.branch)?;
    let out = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            s.transaction(|l| {
                // Both timelines change: neither may be inside a turn.
                guard(l, &row.id, &BranchName::main())?;
                guard(l, &row.id, &branch)?;
                l.promote(&row.id, &branch, now())
            })
        })
        .await?;
    st.hub.poke();
    Ok(Json(PromotedView {
        node: wire::node(&out.node, None),
        sealed_as: out.sealed_as.as_str().to_owned(),
    }))
}

/// What a 409 of a write says (the OpenAPI document's description).
const TURN_OPEN: &str = "Refused (`kind: refused`): the timeline is sealed, or a harness turn is open on it (`convo run`/`chat`: the message names the turn as BRANCH@TURN and its holder; retry once the turn has ended). A turn whose holder was killed is closed as interrupted by the next write instead.";

/// Refuses a write to a timeline with a harness turn open (409 `refused`,
/// naming `BRANCH@TURN`), closing a killed holder's turn first: see
/// [`convo_runtime::turns`].
fn guard(
    l: &mut convo_store::Ledger<'_>,
    session: &convo_core::SessionId,
    branch: &BranchName,
) -> Result<(), StoreError> {
    convo_runtime::turns::guard(l, session, branch, now())
}

// ----- state --------------------------------------------------------------

pub use convo_api::{StateEntry, StateView};

/// Every key and value of a timeline's state, now or as of a node.
#[utoipa::path(get, path = "/api/v1/sessions/{session}/branches/{branch}/state",
    params(("session" = String, Path), ("branch" = String, Path), AtQuery),
    responses((status = 200, body = StateView), (status = "default", body = ErrorDoc)))]
pub async fn state_list(
    State(st): State<AppState>,
    Path((q, b)): Path<(String, String)>,
    Query(at): Query<AtQuery>,
) -> ApiResult<Json<StateView>> {
    let branch = branch_name(&b)?;
    Ok(Json(
        st.pool
            .run(move |s| state_view(s, &q, &branch, at.at.as_deref()))
            .await?,
    ))
}

pub(crate) fn state_view(
    s: &mut convo_store::Store,
    q: &str,
    branch: &BranchName,
    at: Option<&str>,
) -> convo_store::Result<StateView> {
    let row = s.find_session(q)?;
    let at = at.map(|r| resolved(s, &row.id, r)).transpose()?;
    let root = s.state_root(&row.id, branch, at.as_ref())?;
    state_at_root(s, root)
}

/// Every entry of a state version.
pub(crate) fn state_at_root(
    s: &mut convo_store::Store,
    root: convo_core::StateRoot,
) -> convo_store::Result<StateView> {
    Ok(StateView::new(&root, s.state_list(&root)?))
}

/// One state value, as raw bytes (404 when the key is absent).
#[utoipa::path(get, path = "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
    params(("session" = String, Path), ("branch" = String, Path), ("key" = String, Path), AtQuery),
    responses((status = 200, description = "the value's bytes", content_type = "application/octet-stream"),
        (status = "default", body = ErrorDoc)))]
pub async fn state_get(
    State(st): State<AppState>,
    Path((q, b, key)): Path<(String, String, String)>,
    Query(at): Query<AtQuery>,
) -> ApiResult<Response> {
    let branch = branch_name(&b)?;
    let k = key.clone();
    let v = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let at = at
                .at
                .as_deref()
                .map(|r| resolved(s, &row.id, r))
                .transpose()?;
            let root = s.state_root(&row.id, &branch, at.as_ref())?;
            s.state_get(&root, &k)
        })
        .await?;
    match v {
        Some(v) => Ok(([(header::CONTENT_TYPE, "application/octet-stream")], v).into_response()),
        None => Err(ApiError::not_found(format!("no state key `{key}`"))),
    }
}

/// Sets a key on the branch's working state (the body is the value).
#[utoipa::path(put, path = "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
    params(("session" = String, Path), ("branch" = String, Path), ("key" = String, Path)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 200, body = StateWritten), (status = 409, body = ErrorDoc, description = TURN_OPEN), (status = "default", body = ErrorDoc)))]
pub async fn state_put(
    State(st): State<AppState>,
    Path((q, b, key)): Path<(String, String, String)>,
    Body(body): Body,
) -> ApiResult<Json<StateWritten>> {
    let branch = branch_name(&b)?;
    let root = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let op = [convo_runtime::turns::StateOp::Put(
                key.clone(),
                body.to_vec(),
            )];
            s.transaction(|l| {
                guard(l, &row.id, &branch)?;
                convo_runtime::turns::state_write(l, &row.id, &branch, &op, now()).map(|(r, _)| r)
            })
        })
        .await?;
    st.hub.poke();
    Ok(Json(StateWritten {
        root: root.to_hex(),
        existed: None,
    }))
}

/// Removes a key from the branch's working state.
#[utoipa::path(delete, path = "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
    params(("session" = String, Path), ("branch" = String, Path), ("key" = String, Path)),
    responses((status = 200, body = StateWritten), (status = 409, body = ErrorDoc, description = TURN_OPEN), (status = "default", body = ErrorDoc)))]
pub async fn state_delete(
    State(st): State<AppState>,
    Path((q, b, key)): Path<(String, String, String)>,
) -> ApiResult<Json<StateWritten>> {
    let branch = branch_name(&b)?;
    let (root, existed) = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let op = [convo_runtime::turns::StateOp::Delete(key.clone())];
            s.transaction(|l| {
                guard(l, &row.id, &branch)?;
                convo_runtime::turns::state_write(l, &row.id, &branch, &op, now())
            })
        })
        .await?;
    st.hub.poke();
    Ok(Json(StateWritten {
        root: root.to_hex(),
        existed: Some(existed),
    }))
}

// ----- verify, diff, search, export, import --------------------------------

pub use convo_api::{VerifyProblem, VerifyView};

/// Recomputes every hash and checks every link (the same as `convo verify`).
#[utoipa::path(get, path = "/api/v1/verify",
    responses((status = 200, body = VerifyView), (status = "default", body = ErrorDoc)))]
pub async fn verify(State(st): State<AppState>) -> ApiResult<Json<VerifyView>> {
    let r = st.pool.run(|s| s.verify()).await?;
    Ok(Json(VerifyView::from_store(&r)))
}

/// Two timelines from their fork point (common ancestor), aligned by
/// content and grouped into turns: the document `convo diff --json` prints.
#[utoipa::path(get, path = "/api/v1/sessions/{session}/diff",
    params(("session" = String, Path), DiffQuery),
    responses((status = 200, body = convo_api::DiffView), (status = "default", body = ErrorDoc)))]
pub async fn diff(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(d): Query<DiffQuery>,
) -> ApiResult<Json<convo_api::DiffView>> {
    let a = d.a.unwrap_or_else(|| "main".into());
    let view = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let diff = convo_store::diff::diff(s, &row.id, &a, &d.b)?;
            wire::diff(s, &diff, d.page)
        })
        .await?;
    Ok(Json(view))
}

pub use convo_api::{SearchHit, SearchResults};

/// A query parameter, `None` when absent or blank.
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn rfc3339(name: &str, v: Option<&str>) -> ApiResult<Option<Millis>> {
    v.map(|t| {
        if let Ok(ts) = t.parse::<jiff::Timestamp>() {
            return Ok(ts.as_millisecond());
        }
        // A browser's date and datetime-local fields: UTC.
        let utc = |dt: jiff::civil::DateTime| {
            dt.to_zoned(jiff::tz::TimeZone::UTC)
                .map(|z| z.timestamp().as_millisecond())
        };
        if let Ok(dt) = t.parse::<jiff::civil::DateTime>()
            && let Ok(ms) = utc(dt)
        {
            return Ok(ms);
        }
        match t.parse::<jiff::civil::Date>() {
            Ok(d) => utc(d.to_datetime(jiff::civil::Time::midnight()))
                .map_err(|e| ApiError::invalid(format!("`{name}`: {e}"))),
            Err(e) => Err(ApiError::invalid(format!(
                "`{name}` is not an RFC 3339 time or a date: {e}"
            ))),
        }
    })
    .transpose()
}

/// Full-text search over payloads, best match first (the same index and
/// ranking as `convo search`; the index is brought up to date first).
#[utoipa::path(get, path = "/api/v1/search", params(SearchQuery),
    responses((status = 200, body = SearchResults), (status = "default", body = ErrorDoc)))]
pub async fn search(
    State(st): State<AppState>,
    Query(q): Query<SearchQuery>,
) -> ApiResult<Json<SearchResults>> {
    Ok(Json(search_results(&st, &q).await?))
}

/// The search behind `GET /api/v1/search` and the web view's search page.
pub(crate) async fn search_results(st: &AppState, q: &SearchQuery) -> ApiResult<SearchResults> {
    use convo_store::search::{Query as Words, SearchRequest};
    let query = Words::parse(&q.q).map_err(|e| ApiError::invalid(e.to_string()))?;
    let kinds = given(&q.kind)
        .map(|k| {
            k.split(',')
                .map(|k| k.trim().parse::<Kind>().map_err(ApiError::invalid))
                .collect::<ApiResult<Vec<_>>>()
        })
        .transpose()?
        .unwrap_or_default();
    let failed = match given(&q.failed) {
        None | Some("false" | "0" | "off") => false,
        Some("true" | "1" | "on") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "`failed` is true or false, not `{other}`"
            )));
        }
    };
    let own = |v: &Option<String>| given(v).map(str::to_owned);
    let filter = convo_store::filter::NodeFilter {
        kinds,
        from: own(&q.from),
        to: own(&q.to),
        since: rfc3339("since", given(&q.since))?,
        until: rfc3339("until", given(&q.until))?,
        model: own(&q.model),
        status: own(&q.status),
        failed,
    };
    let branch = given(&q.branch).map(branch_name).transpose()?;
    let session = own(&q.session);
    if branch.is_some() && session.is_none() {
        return Err(ApiError::invalid("`branch` needs `session`"));
    }
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let offset = q.offset.unwrap_or(0);
    let agent = own(&q.agent);
    let r = st
        .pool
        .run(move |s| {
            s.search_update(&mut |_, _| {})?;
            let only = session.as_deref().map(|q| s.find_session(q)).transpose()?;
            s.search(&SearchRequest {
                query,
                session: only.map(|o| o.id),
                branch,
                agent,
                filter,
                limit,
                offset,
            })
        })
        .await?;
    Ok(SearchResults::from_store(&r))
}

/// A timeline in a file format, as `convo export` writes it.
#[utoipa::path(get, path = "/api/v1/sessions/{session}/export",
    params(("session" = String, Path), ExportQuery),
    responses((status = 200, description = "the file", content_type = "application/octet-stream"),
        (status = "default", body = ErrorDoc)))]
pub async fn export(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(e): Query<ExportQuery>,
) -> ApiResult<Response> {
    let format = e.format.unwrap_or_else(|| "convo".into());
    let branch = branch_name(e.branch.as_deref().unwrap_or("main"))?;
    if convo_formats::writer(&format).is_none() {
        return Err(ApiError::invalid(format!(
            "`{format}` cannot be exported; use one of {}",
            convo_formats::EXPORT_FORMATS.join(", ")
        )));
    }
    let f2 = format.clone();
    let bytes = st
        .pool
        .run(move |s| {
            let writer = convo_formats::writer(&f2)
                .ok_or_else(|| StoreError::Invalid(format!("`{f2}` cannot be exported").into()))?;
            let row = s.find_session(&q)?;
            let conv = convo_llm::ledger::export(s, &row, &branch)?;
            writer.write(&conv).map_err(StoreError::invalid)
        })
        .await?;
    let ct = match format.as_str() {
        "html" => "text/html; charset=utf-8",
        "markdown" | "convo" => "text/markdown; charset=utf-8",
        _ => "application/json",
    };
    let mut res = (StatusCode::OK, bytes).into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    // An exported HTML page is a download, never a page of this origin.
    res.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'; style-src 'unsafe-inline'"),
    );
    res.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment"),
    );
    Ok(res)
}

/// Imports an uploaded file (the request body) in one transaction.
#[utoipa::path(post, path = "/api/v1/import", params(ImportQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = ImportSummary), (status = "default", body = ErrorDoc)))]
pub async fn import(
    State(st): State<AppState>,
    Query(iq): Query<ImportQuery>,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<ImportSummary>)> {
    let (name, read) = {
        let reader = convo_formats::reader(&iq.format).ok_or_else(|| {
            ApiError::invalid(format!(
                "`{}` cannot be imported; use one of {}",
                iq.format,
                convo_formats::IMPORT_FORMATS.join(", ")
            ))
        })?;
        let read = reader
            .read_bytes("upload", &body)
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        (reader.name(), read)
    };
    let agent = iq.agent.clone();
    let outcomes = st
        .pool
        .run(move |s| {
            let convs: Vec<(&str, &convo_formats::Conversation)> =
                read.conversations.iter().map(|c| (name, c)).collect();
            convo_llm::ledger::import_all(s, &convs, agent.as_deref(), now())
        })
        .await?;
    st.hub.poke();
    Ok((
        StatusCode::CREATED,
        Json(ImportSummary {
            sessions: outcomes
                .iter()
                .map(|o| ImportedSession {
                    id: o.id().to_string(),
                    created: matches!(o, convo_llm::ledger::Outcome::Created { .. }),
                })
                .collect(),
        }),
    ))
}

// ----- events ---------------------------------------------------------------

/// Server-Sent Events: every new node in append order (`event: node`,
/// `id:` the follow cursor, `data:` the [`NodeView`] JSON with payload).
/// Reconnecting with `Last-Event-ID` resumes with no gap and no duplicate.
#[utoipa::path(get, path = "/api/v1/events", params(EventsQuery),
    responses((status = 200, description = "an SSE stream of NodeView objects", content_type = "text/event-stream"),
        (status = "default", body = ErrorDoc)))]
pub async fn events(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(e): Query<EventsQuery>,
) -> ApiResult<Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>>> {
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| ApiError::invalid("Last-Event-ID must be a follow cursor (a number)"))
        })
        .transpose()?;
    let session = match e.session {
        Some(q) => Some(
            st.pool
                .run(move |s| s.find_session(&q))
                .await?
                .id
                .to_string(),
        ),
        None => None,
    };
    // A cursor past the end (a wrapped or made-up number) means "nothing
    // yet": the stream starts at the end, it never replays the store.
    let end = st.pool.run(|s| s.end_cursor()).await?;
    let start = last.or(e.after).map_or(end, |c| c.min(end));
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(pump(
        st.hub.clone(),
        st.pool.clone(),
        start,
        Filter { session },
        tx,
    ));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let (id, json) = rx.recv().await?;
        Some((
            Ok(SseEvent::default()
                .event("node")
                .id(id.to_string())
                .data(json)),
            rx,
        ))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Liveness and the store's follow cursor.
#[utoipa::path(get, path = "/api/v1/health",
    responses((status = 200, body = Health), (status = "default", body = ErrorDoc)))]
pub async fn health(State(st): State<AppState>) -> ApiResult<Json<Health>> {
    let (kind, cursor) = st
        .pool
        .run(|s| Ok((s.kind().to_owned(), s.end_cursor()?)))
        .await?;
    Ok(Json(Health {
        ok: true,
        store: kind,
        cursor,
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }))
}

/// Anything no route matches.
pub async fn fallback(uri: axum::http::Uri) -> Response {
    error_response(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!("no route for {}", uri.path()),
    )
}
