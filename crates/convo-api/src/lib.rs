//! The JSON wire format of convo, shared by every surface that speaks it:
//! the CLI's `--json`, the HTTP API (`convo serve`), the recording proxy and
//! the agent harness. One set of types, so the shapes cannot drift.
//!
//! Each type's rustdoc is its specification, message by message (as
//! ripgrep documents its JSON printer). Times are RFC 3339 UTC with
//! milliseconds (`2026-11-23T09:00:00.000Z`); hashes are 64 lowercase hex
//! digits; absent optional fields are `null`, never omitted, unless the
//! field's doc says otherwise.
//!
//! **Payloads are lossless.** A payload is carried as a string plus its
//! encoding: `"payload_encoding": "utf8"` when the bytes are valid UTF-8
//! (the string *is* the payload), `"base64"` otherwise (standard alphabet,
//! padded). Readers decode with [`decode_payload`]; no byte is ever
//! replaced.
//!
//! This crate depends on `convo-core` only: a client of the wire format
//! needs no store. The conversions from the store's rows live where the
//! store is known (`convo_runtime::wire`).

pub mod http;

use base64::Engine as _;
use convo_core::{Kind, Millis, Node, NodeHash, StateRoot};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How a payload string is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum PayloadEncoding {
    /// The string is the payload (the bytes were valid UTF-8).
    #[default]
    Utf8,
    /// The string is the payload's bytes in standard, padded base64.
    Base64,
}

/// Encodes payload bytes losslessly: the text itself when it is UTF-8,
/// base64 otherwise.
pub fn encode_payload(bytes: &[u8]) -> (String, PayloadEncoding) {
    match std::str::from_utf8(bytes) {
        Ok(t) => (t.to_owned(), PayloadEncoding::Utf8),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(bytes),
            PayloadEncoding::Base64,
        ),
    }
}

/// The inverse of [`encode_payload`]. Fails on invalid base64.
pub fn decode_payload(text: &str, enc: PayloadEncoding) -> Result<Vec<u8>, String> {
    match enc {
        PayloadEncoding::Utf8 => Ok(text.as_bytes().to_vec()),
        PayloadEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("payload is not valid base64: {e}")),
    }
}

/// RFC 3339 UTC with milliseconds; out-of-range times as `{ms}ms`.
pub fn time(ms: Millis) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => format!("{ms}ms"),
    }
}

/// A session.
///
/// ```json
/// {"id": "ses-…", "agent": "researcher", "title": "Paris", "created_at": "…"}
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Session {
    /// `ses-{uuid}`.
    pub id: String,
    /// The agent the session talks to.
    pub agent: String,
    /// A human title, or `null`.
    pub title: Option<String>,
    /// Creation time.
    pub created_at: String,
}

/// A branch (timeline) of a session.
///
/// `head` is `null` only for a new session's empty `main`; `state` is the
/// working state root the next `complete` carries; a `sealed` timeline
/// (an old `main` kept as `broken-YYYY-MM-DD` by a promote) refuses appends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Branch {
    /// The branch name (a valid git ref component).
    pub name: String,
    /// The newest node's hash.
    pub head: Option<String>,
    /// The working state root.
    pub state: Option<String>,
    /// Whether the timeline refuses appends.
    pub sealed: bool,
    /// Creation time.
    pub created_at: String,
}

/// One node (message).
///
/// Every field of the hashed node is here, plus where it sits: `seq` (the
/// store-wide follow cursor), `depth` (1 for a session's first node: the
/// number of nodes from the root to this one, itself included) and, when
/// the node is read as part of a timeline, `turn` (1-based count of the
/// `invoke`s up to and including this node; `null` before the first and
/// where the node was not read from a timeline).
/// `payload`/`payload_encoding` are present when the payload was asked for
/// (always in timelines and the event stream; `null` in bare listings).
/// `branch` and `sealed_as` are set on `fork` and `promote` nodes only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    /// The node hash.
    pub hash: String,
    /// The store-wide append sequence number (follow cursor).
    pub seq: u64,
    /// The parent's hash; `null` for a session's first node.
    pub parent: Option<String>,
    /// `invoke`, `request`, `response`, `complete`, `fork` or `promote`.
    pub kind: String,
    /// The session id.
    pub session: String,
    /// The submission (turn) id; `null` outside one.
    pub submission: Option<String>,
    /// For requests and responses: 1, 2, 3… within the submission.
    pub sequence: Option<u32>,
    /// The sender.
    pub from: String,
    /// The recipient.
    pub to: String,
    /// SHA-256 of the payload bytes.
    pub payload_sha256: String,
    /// Payload length in bytes.
    pub payload_len: u64,
    /// The payload (see `payload_encoding`), or `null` when not requested.
    pub payload: Option<String>,
    /// How `payload` is encoded; `null` when `payload` is.
    pub payload_encoding: Option<PayloadEncoding>,
    /// Diagnostics: a JSON object (model, tokens, status, latency…).
    #[schema(value_type = Object)]
    pub diagnostics: serde_json::Value,
    /// The state root a `complete` carries.
    pub state: Option<String>,
    /// When the node was recorded.
    pub created_at: String,
    /// Nodes from the session's first node to this one, both included (the
    /// first node has depth 1).
    pub depth: u64,
    /// Turn number on the timeline it was read from, when read from one.
    pub turn: Option<u64>,
    /// For `fork`/`promote`: the branch created or promoted.
    pub branch: Option<String>,
    /// For `promote`: the name the old `main` was sealed under.
    pub sealed_as: Option<String>,
    /// On a `complete` that ends a failed turn, why: `timeout`, `crash`,
    /// `unreachable`, `status`, `garbage` or `interrupted` (the turn was cut:
    /// Ctrl-C, or its harness was killed), from `diagnostics.failure`; the
    /// text is `diagnostics.error`, and `diagnostics.partial` is `true` when
    /// the payload is what was streamed before the cut. `null` otherwise.
    pub failure: Option<String>,
    /// For a node received as OpenTelemetry whose export body is kept (in
    /// a timeline): its whole `extra.otel` read back from that body (a
    /// call's `span_id`, `trace_id`, `call`: latency, usage, the
    /// attributes as received…; `{}` for another message), in a timeline
    /// page asked for with `otel=true` and on `convo show`. Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub otel: Option<serde_json::Value>,
}

impl NodeView {
    /// A node stored under `hash` with follow number `seq` at `depth`,
    /// with its payload when given.
    pub fn new(hash: &NodeHash, seq: u64, depth: u64, n: &Node, payload: Option<&[u8]>) -> Self {
        let (payload, payload_encoding) = match payload.map(encode_payload) {
            Some((p, e)) => (Some(p), Some(e)),
            None => (None, None),
        };
        NodeView {
            hash: hash.to_hex(),
            seq,
            parent: n.parent.map(|h| h.to_hex()),
            kind: n.kind.as_str().to_owned(),
            session: n.session.to_string(),
            submission: n.submission.map(|h| h.to_hex()),
            sequence: n.sequence,
            from: n.from.clone(),
            to: n.to.clone(),
            payload_sha256: n.payload.to_hex(),
            payload_len: n.payload_len,
            payload,
            payload_encoding,
            diagnostics: n.diagnostics.to_value(),
            state: n.state.map(|h| h.to_hex()),
            created_at: time(n.created_at),
            depth,
            turn: None,
            branch: n.event.as_ref().map(|e| e.branch.as_str().to_owned()),
            sealed_as: n
                .event
                .as_ref()
                .and_then(|e| e.sealed_as.as_ref().map(|s| s.as_str().to_owned())),
            failure: failure_of(n),
            otel: None,
        }
    }

    /// The same node with its turn number on a timeline.
    pub fn with_turn(mut self, turn: u64) -> Self {
        self.turn = Some(turn);
        self
    }

    /// The payload bytes, when present.
    pub fn payload_bytes(&self) -> Option<Result<Vec<u8>, String>> {
        let p = self.payload.as_deref()?;
        Some(decode_payload(p, self.payload_encoding.unwrap_or_default()))
    }
}

/// Why the turn a `complete` ends failed (`diagnostics.failure`), if it did.
pub fn failure_of(n: &Node) -> Option<String> {
    if n.kind != convo_core::Kind::Complete {
        return None;
    }
    n.diagnostics
        .to_value()
        .get("failure")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// One key of a state version (`state list --json`, the HTTP API's state).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateEntry {
    /// The key.
    pub key: String,
    /// The value (see `value_encoding`).
    pub value: String,
    /// `utf8` or `base64`: values are bytes, carried losslessly.
    pub value_encoding: PayloadEncoding,
}

/// A state version: `convo state list --json` and
/// `GET /api/v1/sessions/{s}/branches/{b}/state`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StateView {
    /// The state root (64 hex), `null` for the empty state.
    pub root: Option<String>,
    /// Every entry, sorted by key.
    pub entries: Vec<StateEntry>,
}

impl StateView {
    /// The view of the state `root` holding `entries` (key, value bytes).
    pub fn new(root: &StateRoot, entries: Vec<(String, Vec<u8>)>) -> StateView {
        let empty = convo_core::state::empty_root();
        StateView {
            root: (*root != empty).then(|| root.to_hex()),
            entries: entries
                .into_iter()
                .map(|(key, v)| {
                    let (value, value_encoding) = encode_payload(&v);
                    StateEntry {
                        key,
                        value,
                        value_encoding,
                    }
                })
                .collect(),
        }
    }
}

/// One hit of a full-text search: `convo search --json` (an element of
/// [`SearchResults::hits`]) and `GET /api/v1/search`.
///
/// ```json
/// {"node": {…, "payload": null, "turn": 2}, "snippet": "Rome, capital of Italy.",
///  "marks": [[6, 13]], "score": 1.73, "turn": 2, "branches": ["main", "alt"]}
/// ```
///
/// `node` is a [`NodeView`] without its payload (`payload` is `null`) and
/// with `turn` set when the node is on a timeline. `snippet` is the part of
/// the payload around the first match, on one line (line breaks and tabs
/// as spaces), with `…` where it was cut; `marks` are the byte ranges
/// `[start, end)` of the snippet's UTF-8 that matched. `score` is higher
/// for better hits and comparable only within one result list. `branches`
/// names every timeline whose history holds the node, `main` first; `turn`
/// is the node's turn number on the first of them (`null` outside a turn
/// or a timeline), so `BRANCH@TURN` is a reference `convo turn` takes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchHit {
    /// The node, without its payload.
    pub node: NodeView,
    /// The payload around the first match, on one line.
    pub snippet: String,
    /// Byte ranges of `snippet` that matched.
    pub marks: Vec<[usize; 2]>,
    /// Higher is better.
    pub score: f64,
    /// Turn number on the first of `branches`.
    pub turn: Option<u64>,
    /// Timelines whose history holds the node, `main` first.
    pub branches: Vec<String>,
}

/// The result of a full-text search (`convo search --json`, `GET
/// /api/v1/search`).
///
/// ```json
/// {"hits": [ … ], "indexed": 120000, "scanned": 0, "total": 143,
///  "exact": true, "offset": 0, "resent": 12}
/// ```
///
/// `hits` best first (see [`SearchHit`]), the page that starts `offset`
/// hits in. `total` counts every hit (the next page starts at `offset`
/// plus the hits shown, while it is below `total`); `exact` is false when
/// there were more than 1,000 matches and `total` is a lower bound. A
/// message resent with later requests is one hit, the node where it first
/// appeared in its session; `resent` counts the copies left out. `indexed` is the follow number
/// up to which the search index answered; `scanned` counts the nodes past
/// it that were read one by one instead (non-zero only when the index
/// could not be brought up to date, e.g. on a read-only store).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<SearchHit>,
    /// Nodes up to this follow number came from the index.
    #[serde(default)]
    pub indexed: u64,
    /// Nodes past it scanned one by one.
    #[serde(default)]
    pub scanned: u64,
    /// Hits in all (a lower bound when `exact` is false).
    #[serde(default)]
    pub total: u64,
    /// Whether `total` counts every match.
    #[serde(default)]
    pub exact: bool,
    /// Hits skipped before `hits`.
    #[serde(default)]
    pub offset: u64,
    /// Matches left out as copies of a message found earlier.
    #[serde(default)]
    pub resent: u64,
}

/// Two timelines of a session compared from their fork point (`convo diff
/// --json`, `GET /api/v1/sessions/{id}/diff`: one document, one shape).
///
/// ```json
/// {"session": "ses-…", "fork_point": { … }, "shared": 4, "common": 4,
///  "a": {"ref": "main", "branch": "main", "count": 2, "added": [ … ]},
///  "b": {"ref": "retry", "branch": "retry", "count": 3, "added": [ … ]},
///  "turns": [{"a": 2, "b": 2, "changed": true, "nodes": [
///    {"a": "<hash>", "b": null, "kind": "fork", "changed": true, "lines": []},
///    {"a": "<hash>", "b": "<hash>", "kind": "complete", "changed": true,
///     "lines": [{"op": "-", "text": "About 2 million."}, {"op": "+", "text": "About 2.1 million."}]}]}],
///  "unchanged": 1, "page": null, "pages": 1}
/// ```
///
/// After the fork point the two chains are aligned by content (kind, ends,
/// payload), not by position, and grouped into turns (`turns`, every turn,
/// unchanged ones too). `shared` and `common` are the same number (the
/// CLI's and the API's names before they were one document). When a page
/// is asked for (`?page=N`), `turns` holds that page's turns and `added`
/// only their nodes; `count` is always the side's whole number of nodes
/// after the fork point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DiffView {
    /// The session id.
    pub session: String,
    /// The last node both sides share (`null` when they share none).
    pub fork_point: Option<NodeView>,
    /// How many nodes the two sides share.
    pub shared: u64,
    /// The same as `shared`.
    pub common: u64,
    /// The first side (the old text of line diffs).
    pub a: DiffSide,
    /// The second side.
    pub b: DiffSide,
    /// The aligned nodes after the fork point, grouped into turns.
    pub turns: Vec<DiffTurn>,
    /// Nodes both sides recorded the same way after the fork point.
    pub unchanged: u64,
    /// The page shown (from 1); `null` for the whole diff.
    pub page: Option<u64>,
    /// How many pages the diff has (at most 200 changed nodes each).
    pub pages: u64,
}

/// One side of a [`DiffView`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DiffSide {
    /// The reference as given (a branch, HASH, BRANCH~N, BRANCH@TURN).
    #[serde(rename = "ref")]
    pub reference: String,
    /// The same as `ref`.
    pub branch: String,
    /// Its head: the node the reference names.
    pub head: String,
    /// How many nodes it has after the fork point.
    pub count: u64,
    /// Those nodes (on a page, the page's only), oldest first, with
    /// payloads and turn numbers.
    pub added: Vec<NodeView>,
}

/// A turn of side A aligned with a turn of side B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DiffTurn {
    /// The turn's number on side A; `null` when A has no node in a turn here.
    pub a: Option<u64>,
    /// The turn's number on side B.
    pub b: Option<u64>,
    /// Whether any node differs.
    pub changed: bool,
    /// The aligned nodes.
    pub nodes: Vec<DiffNode>,
}

/// A node of side A aligned with a node of side B.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DiffNode {
    /// A's node hash; `null` when only B has the node.
    pub a: Option<String>,
    /// B's node hash; `null` when only A has it.
    pub b: Option<String>,
    /// The node kind.
    pub kind: String,
    /// Whether the nodes differ (kind, ends or payload), or one is missing.
    pub changed: bool,
    /// The payloads' line diff (A's is the old text).
    pub lines: Vec<DiffLine>,
}

/// One line of a payload diff.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DiffLine {
    /// `" "` in both, `"-"` only in A, `"+"` only in B.
    pub op: String,
    /// The line, without its line break.
    pub text: String,
}

/// One message to append: a line of `convo ingest`, an element of the
/// HTTP API's append batch.
///
/// ```json
/// {"kind": "invoke", "payload": "Tell me about Paris"}
/// {"kind": "response", "payload": "…", "from": "infer", "diagnostics": {"status": 200}, "sequence": 1}
/// {"kind": "complete", "payload": "AAEC", "payload_encoding": "base64", "state": "<64 hex>"}
/// ```
///
/// Only `kind` and `payload` are required. `from`/`to` default by kind
/// (an invoke is `cli → agent`, a request `agent → service`…);
/// `diagnostics` must be a JSON object; `state` (complete only) overrides
/// the branch's working state root; `sequence` (response only) names the
/// request answered. Unknown fields are an error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppendLine {
    /// `invoke`, `request`, `response` or `complete`.
    pub kind: String,
    /// The message body (see `payload_encoding`).
    pub payload: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub payload_encoding: Option<PayloadEncoding>,
    /// Sender (default by kind).
    #[serde(default)]
    pub from: Option<String>,
    /// Recipient (default by kind).
    #[serde(default)]
    pub to: Option<String>,
    /// A JSON object.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub diagnostics: Option<serde_json::Value>,
    /// For a complete: the state root to carry (64 hex).
    #[serde(default)]
    pub state: Option<String>,
    /// For a response: which request it answers.
    #[serde(default)]
    pub sequence: Option<u32>,
}

/// Who sends and receives a message of `kind` when a caller does not say:
/// an invoke is `cli → agent`, a request `agent → infer`, a response
/// `infer → agent`, a complete `agent → cli`, fork/promote `platform → agent`.
pub fn default_ends(kind: Kind, agent: &str) -> (String, String) {
    let (f, t) = match kind {
        Kind::Invoke => ("cli", agent),
        Kind::Request => (agent, "infer"),
        Kind::Response => ("infer", agent),
        Kind::Complete => (agent, "cli"),
        Kind::Fork | Kind::Promote => ("platform", agent),
    };
    (f.to_owned(), t.to_owned())
}

/// A verify report: what `convo verify --json` prints and
/// `GET /api/v1/verify` answers (docs/JSON.md, "Verify report").
///
/// ```json
/// {"blob_bytes": 312, "blobs": 21, "branches": 6, "checkpoints": 0, "facts": 15,
///  "nodes": 22, "ok": false, "redacted": 1, "state_roots": 4,
///  "problems": [{"kind": "hash", "object": "node 7c53…", "reason": "…"}]}
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VerifyView {
    /// Nothing was found wrong (the CLI exits 0; otherwise 1).
    pub ok: bool,
    /// Nodes whose hash was recomputed.
    pub nodes: u64,
    /// Payloads and state values hashed.
    pub blobs: u64,
    /// Their bytes.
    pub blob_bytes: u64,
    /// Branches checked.
    pub branches: u64,
    /// Distinct state roots walked.
    pub state_roots: u64,
    /// Facts of the journal checked.
    pub facts: u64,
    /// Signed checkpoints the store was shown to extend (`--checkpoint`).
    pub checkpoints: u64,
    /// Payloads erased by a recorded redaction (not tampering).
    pub redacted: u64,
    /// Everything wrong, in the order found.
    pub problems: Vec<VerifyProblem>,
}

/// One thing [`VerifyView`] found wrong.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct VerifyProblem {
    /// What to match on: `hash`, `missing`, `undecodable`, `rule`,
    /// `mismatch`, `journal`, `database`, `truncated`, `rewritten`,
    /// `checkpoint` (`behind` from `git verify` only).
    pub kind: String,
    /// What is broken: `node <hash>`, `branch <session>/<name>`,
    /// `checkpoint <file>`, `database`…
    pub object: String,
    /// Why, in words, for people.
    pub reason: String,
}

/// The one error document every HTTP error answers with (and what
/// `--json` commands print on stderr when they fail).
///
/// ```json
/// {"error": {"kind": "not_found", "message": "no session matches `x`"}}
/// ```
///
/// `kind` is one of `invalid`, `ambiguous`, `not_found`, `refused`,
/// `unavailable`, `corrupt`, `unauthorized`, `forbidden`, `too_large`;
/// the HTTP status and the CLI exit code follow from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDoc {
    /// The error.
    pub error: ErrorBody,
}

/// The inside of [`ErrorDoc`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// The kind of failure.
    pub kind: String,
    /// What went wrong, with which object.
    pub message: String,
}

impl ErrorDoc {
    /// An error document.
    pub fn new(kind: &str, message: impl Into<String>) -> Self {
        ErrorDoc {
            error: ErrorBody {
                kind: kind.to_owned(),
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trips_bytes_that_are_not_utf8() {
        for bytes in [
            &b"plain"[..],
            &[0xff, 0x00, 0xfe][..],
            &[][..],
            "é😀".as_bytes(),
        ] {
            let (s, e) = encode_payload(bytes);
            assert_eq!(decode_payload(&s, e).expect("decodes"), bytes);
        }
        assert_eq!(encode_payload(&[0xff]).1, PayloadEncoding::Base64);
        assert_eq!(encode_payload(b"x").1, PayloadEncoding::Utf8);
    }

    #[test]
    fn append_line_rejects_unknown_fields() {
        let r: Result<AppendLine, _> =
            serde_json::from_str(r#"{"kind":"invoke","payload":"x","colour":1}"#);
        assert!(r.is_err());
    }
}
