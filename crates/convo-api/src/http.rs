//! The HTTP API's own request and response bodies and query parameters
//! (`/api/v1`): what `convo serve` accepts and answers besides the shapes
//! every surface shares (the crate root). The server's handlers and the
//! OpenAPI document use these; clients can too.

use crate::{AppendLine, Branch, NodeView, Session};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Filters and page of the session list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionQuery {
    /// Text that must appear in the id, title or agent (case-insensitive).
    pub q: Option<String>,
    /// Only sessions with this agent.
    pub agent: Option<String>,
    /// Skip this many (newest first).
    pub offset: Option<usize>,
    /// At most this many (default 50, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A page of sessions, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    /// The sessions on this page.
    pub sessions: Vec<Session>,
    /// How many sessions match the filters.
    pub total: usize,
    /// The `offset` of the next page, or `null` on the last.
    pub next_offset: Option<usize>,
}

/// A new session.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSession {
    /// The agent's name.
    pub agent: String,
    /// An optional title.
    pub title: Option<String>,
}

/// A session and its timelines.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SessionDetail {
    /// The session.
    pub session: Session,
    /// Its branches, by name.
    pub branches: Vec<Branch>,
}

/// A new title.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Retitle {
    /// The new title; `null` removes it.
    pub title: Option<String>,
}

/// Where a timeline page starts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Position of the first node (0 = the session's first node); negative
    /// counts from the end (`-50` = the last 50). Default 0.
    pub cursor: Option<i64>,
    /// Nodes per page (default 200, at most 2000).
    #[param(minimum = 1, maximum = 2000)]
    pub limit: Option<usize>,
    /// `true`: each node received as OpenTelemetry gets `otel`, its call's
    /// details read back from the kept export body (rebuilds the session's
    /// kept bodies: it costs what the exporter sent). Default `false`.
    pub otel: Option<bool>,
    /// `false`: leave each node's `payload` out (`null`), and do not read
    /// it (a listing of long payloads costs only the nodes). Default `true`.
    pub payloads: Option<bool>,
}

/// A page of a timeline.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TimelinePageView {
    /// The branch.
    pub branch: String,
    /// The nodes, root to head, payloads included, with turn numbers.
    pub nodes: Vec<NodeView>,
    /// Nodes on the whole timeline.
    pub total: usize,
    /// Turns (invokes) on the whole timeline.
    pub turns: u64,
    /// The position of the first node of this page.
    pub cursor: usize,
    /// The `cursor` of the next page, or `null` at the head.
    pub next_cursor: Option<usize>,
}

/// One line, or an array of lines appended in one transaction.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AppendBody {
    /// One message.
    One(AppendLine),
    /// Several, in order, in one transaction.
    Many(Vec<AppendLine>),
}

/// What an append wrote.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Appended {
    /// The nodes, in order (payloads omitted).
    pub nodes: Vec<NodeView>,
}

/// A fork.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The fork point: a node hash or unique prefix, `BRANCH`, `BRANCH@TURN` or `BRANCH~N`.
    pub from: String,
    /// The new branch's name.
    pub branch: String,
}

/// What a fork made.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Forked {
    /// The new branch.
    pub branch: Branch,
    /// Its `fork` node.
    pub node: NodeView,
}

/// A promote.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteRequest {
    /// The branch to make `main`.
    pub branch: String,
}

/// What a promote did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct PromotedView {
    /// The `promote` node, now the head of `main`.
    pub node: NodeView,
    /// The name the old `main` was sealed under.
    pub sealed_as: String,
}

/// Which state version to read.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AtQuery {
    /// A node (hash or prefix, `BRANCH`, `BRANCH@TURN`, `BRANCH~N`): the
    /// state as of that node. Default: the branch's working state.
    pub at: Option<String>,
}

/// The new state root after a write.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct StateWritten {
    /// The branch's new working state root.
    pub root: String,
    /// For a delete: whether the key was there.
    pub existed: Option<bool>,
}

/// The two timelines to compare.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// The first side (default `main`): a branch or any reference (HASH,
    /// BRANCH~N, BRANCH@TURN).
    pub a: Option<String>,
    /// The second side: a branch or any reference.
    pub b: String,
    /// Only this page (from 1) of at most 200 changed nodes; the whole diff
    /// without it.
    pub page: Option<u64>,
}

/// What to search for. Empty parameters are ignored (`agent=` is no
/// filter), so a form's blank fields can be sent as they are.
#[derive(Clone, Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SearchQuery {
    /// Words that must all appear in the payload (case-insensitive; words
    /// are runs of letters and digits), `prefix*`, or `"a phrase"`; `a OR
    /// b` for either, `-word` to exclude.
    pub q: String,
    /// Only this session (id, unique prefix or title).
    pub session: Option<String>,
    /// Only nodes on this timeline of `session`.
    pub branch: Option<String>,
    /// Only nodes of sessions recorded by this agent.
    pub agent: Option<String>,
    /// Only these node kinds (comma-separated).
    pub kind: Option<String>,
    /// Only nodes from this sender.
    pub from: Option<String>,
    /// Only nodes to this recipient.
    pub to: Option<String>,
    /// Only nodes whose diagnostics name this model.
    pub model: Option<String>,
    /// Only nodes whose diagnostics' status is this (`200`, `429`).
    pub status: Option<String>,
    /// `true` (or `on`, `1`): only nodes that record a failure (an `error`
    /// or `failure` in their diagnostics, or a 4xx/5xx status).
    pub failed: Option<String>,
    /// Only nodes recorded at or after this time (RFC 3339, or a UTC date
    /// `2026-11-24` or date and time `2026-11-24T09:30`).
    pub since: Option<String>,
    /// Only nodes recorded before this time (as `since`).
    pub until: Option<String>,
    /// At most this many hits (default 50, at most 500).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
    /// Skip this many hits first (the next page: `offset` + `limit`).
    pub offset: Option<usize>,
}

/// Which export.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// convo, clog, session-json, openai, markdown or html (default convo).
    pub format: Option<String>,
    /// The timeline (default main).
    pub branch: Option<String>,
}

/// How to read an upload.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ImportQuery {
    /// convo, session-json, chatgpt, claude, sharegpt or openai (required).
    pub format: String,
    /// The agent name for imported sessions.
    pub agent: Option<String>,
}

/// One imported conversation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ImportedSession {
    /// The session id.
    pub id: String,
    /// False when it had been imported before (nothing written).
    pub created: bool,
}

/// What an import did.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ImportSummary {
    /// Each conversation in the file.
    pub sessions: Vec<ImportedSession>,
}

/// Where the event stream starts.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Start after this follow cursor (the `Last-Event-ID` header wins);
    /// default: only nodes appended from now on.
    pub after: Option<u64>,
    /// Only nodes of this session (id, prefix or title).
    pub session: Option<String>,
}

/// Health: the store answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// Always true when the response is 200.
    pub ok: bool,
    /// `sqlite` or `postgres`.
    pub store: String,
    /// The newest follow cursor.
    pub cursor: u64,
    /// convo's version.
    pub version: String,
}
