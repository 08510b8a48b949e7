//! Replay: answer calls from a recorded timeline, with no upstream.
//!
//! The timeline's proxy calls (each `request` the proxy recorded and its
//! `response`) are served in order. A call is matched **by position**:
//! it must equal the first call not yet served, or another unserved call
//! of the same turn (calls a program makes concurrently inside one turn
//! may arrive in any order, and each still gets its own answer). "Equal"
//! means the same canonical form ([`canonical`]): RFC 8785 JSON of
//! `{method, path, headers, body}` where `headers` keeps only the
//! behaviour-changing ones (`anthropic-version`, `anthropic-beta`,
//! `openai-beta`) and the body drops the volatile fields [`VOLATILE`].
//!
//! The Responses API's `previous_response_id` names an answer by the id
//! its upstream gave it: in the canonical form it is replaced by the
//! recorded call whose answer carried that id
//! (`{"recorded_response_of_call": N}`, N counting from 0), so a replayed
//! program, which got the recorded ids back, chains its calls as recorded,
//! and a miss names the call rather than an opaque id.
//!
//! A match is answered with the recorded status, headers and bytes: a
//! stream is re-sent chunk by chunk as recorded, byte-identical to what the
//! client got live (the usage chunk the proxy had asked for is removed the
//! same way), at once (`fast`) or at the recorded offsets (`recorded`).
//!
//! A miss is a `409` (`404` once the recording is exhausted) whose JSON
//! names the recorded and the received canonical request and the paths
//! where they differ (`--on-miss error`), or (`--on-miss live`) the call
//! goes to the upstream and is recorded on a new timeline `live-N` forked
//! just before the missed call; every later call goes live there too. Past
//! the end of the recording, `live` continues the replayed timeline itself
//! (so replaying a timeline forked at node N serves the record up to N and
//! goes live after it).

use crate::record::{BEHAVIOUR_HEADERS, redact_query};
use crate::sse::ClientFilter;
use bytes::Bytes;
use convo_core::{BranchName, Kind, NodeHash, SessionId, SubmissionId};
use convo_store::{Result, Store, StoreError};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Body fields ignored when matching (they change between identical runs).
pub const VOLATILE: &[&str] = &[
    "user",
    "stream_options.obfuscation",
    "prompt_cache_key",
    "safety_identifier",
];

/// How fast a recorded stream is re-sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pace {
    /// Every chunk at once.
    #[default]
    Fast,
    /// Each chunk at its recorded offset.
    Recorded,
}

/// What a call that does not match does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnMiss {
    /// Fail with a JSON error naming the difference.
    #[default]
    Error,
    /// Go to the upstream, recording on a timeline forked before the call.
    Live,
}

/// What to replay.
#[derive(Clone, Debug)]
pub struct ReplaySpec {
    /// Session name (id, prefix or title).
    pub session: String,
    /// Timeline (default `main`).
    pub branch: BranchName,
    /// Stream pace.
    pub pace: Pace,
    /// Miss policy.
    pub on_miss: OnMiss,
}

impl ReplaySpec {
    /// Parses `SESSION[:BRANCH]`.
    pub fn parse(s: &str) -> std::result::Result<ReplaySpec, String> {
        let (session, branch) = match s.rsplit_once(':') {
            Some((a, b)) if !a.is_empty() => (a, b),
            _ => (s, "main"),
        };
        let branch = BranchName::new(branch).map_err(|e| format!("--replay `{s}`: {e}"))?;
        Ok(ReplaySpec {
            session: session.to_owned(),
            branch,
            pace: Pace::Fast,
            on_miss: OnMiss::Error,
        })
    }
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Its turn (submission).
    pub submission: Option<SubmissionId>,
    /// The canonical request.
    pub canonical: Value,
    /// Recorded status.
    pub status: u16,
    /// Recorded response headers (allow-listed).
    pub headers: Map<String, Value>,
    /// The upstream's bytes.
    pub body: Vec<u8>,
    /// Stream chunks: (length, ms), when streamed.
    pub chunks: Option<Vec<(usize, f64)>>,
    /// Whether the proxy had added include_usage (so the client never saw
    /// the usage chunk).
    pub strip_usage: bool,
    /// The node before the call's turn (fork point for `--on-miss live`).
    pub before: Option<NodeHash>,
    /// The whole answer's length when the record kept only its first bytes.
    pub truncated: Option<u64>,
}

/// The replay state.
#[derive(Debug)]
pub struct Replay {
    /// The session replayed.
    pub session: SessionId,
    /// Its title (for a live session when nothing precedes a miss).
    pub title: String,
    /// The spec.
    pub spec: ReplaySpec,
    calls: Vec<Call>,
    served: Vec<bool>,
    /// Once a miss went live: the session (name) and timeline live calls go to.
    pub live: Option<(String, BranchName)>,
    /// Calls answered from the record.
    pub matched: u64,
    /// Calls that did not match.
    pub missed: u64,
    /// Responses API answer ids → the recorded call that answered them.
    response_ids: HashMap<String, usize>,
}

fn remove_path(v: &mut Value, path: &str) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let Some(last) = parts.pop() else { return };
    let mut cur = v;
    for p in parts {
        match cur.get_mut(p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(o) = cur.as_object_mut() {
        o.remove(last);
    }
}

/// A Responses API answer's id: the body's `id` (a non-streamed answer)
/// or the assembled response's (a stream).
fn response_id(diag: &Value, body: &[u8]) -> Option<String> {
    let from = |v: &Value| {
        (v.get("object").and_then(Value::as_str) == Some("response"))
            .then(|| v.get("id").and_then(Value::as_str).map(str::to_owned))
            .flatten()
    };
    match diag.get("assembled") {
        Some(a) => from(a),
        None => crate::api::parse(body).as_ref().and_then(from),
    }
}

fn map_response_ids(ids: &HashMap<String, usize>, canon: &mut Value) {
    let Some(body) = canon.get_mut("body").and_then(Value::as_object_mut) else {
        return;
    };
    let call = body
        .get("previous_response_id")
        .and_then(Value::as_str)
        .and_then(|id| ids.get(id));
    if let Some(&call) = call {
        body.insert(
            "previous_response_id".into(),
            json!({"recorded_response_of_call": call}),
        );
    }
}

/// The canonical form of a request (see the module docs).
pub fn canonical(method: &str, path: &str, headers: &Map<String, Value>, body: &[u8]) -> Value {
    let body = match crate::api::parse(body) {
        Some(mut v) => {
            for f in VOLATILE {
                remove_path(&mut v, f);
            }
            v
        }
        None => json!(String::from_utf8_lossy(body)),
    };
    let headers: Map<String, Value> = headers
        .iter()
        .filter(|(k, _)| BEHAVIOUR_HEADERS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    json!({"method": method, "path": path, "headers": headers, "body": body})
}

/// The path a received call is recorded under.
pub fn recorded_path(rest: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("/v1/{rest}?{}", redact_query(q)),
        None => format!("/v1/{rest}"),
    }
}

/// Where two JSON values differ, as JSON pointers (at most 20).
pub fn differences(a: &Value, b: &Value) -> Vec<String> {
    fn walk(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
        if out.len() >= 20 || a == b {
            return;
        }
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let esc = k.replace('~', "~0").replace('/', "~1");
                    walk(
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        format!("{at}/{esc}"),
                        out,
                    );
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(p, q, format!("{at}/{i}"), out);
                }
            }
            _ => out.push(if at.is_empty() { "/".into() } else { at }),
        }
    }
    let mut out = Vec::new();
    walk(a, b, String::new(), &mut out);
    out
}

fn obj(v: &Value, k: &str) -> Map<String, Value> {
    v.get(k)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

impl Replay {
    /// Reads the recorded calls of `spec`'s timeline.
    pub fn load(store: &mut Store, spec: ReplaySpec) -> Result<Replay> {
        let s = store.find_session(&spec.session)?;
        let nodes = store.timeline(&s.id, &spec.branch)?;
        let mut calls = Vec::new();
        let mut response_ids = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let node = &n.stored.node;
            if node.kind != Kind::Request {
                continue;
            }
            let d = node.diagnostics.to_value();
            let (Some(method), Some(path)) = (
                d.get("method").and_then(Value::as_str),
                d.get("path").and_then(Value::as_str),
            ) else {
                continue; // not a call the proxy recorded
            };
            let Some(resp) = nodes[i + 1..].iter().find(|r| {
                r.stored.node.kind == Kind::Response
                    && r.stored.node.submission == node.submission
                    && r.stored.node.sequence == node.sequence
            }) else {
                continue;
            };
            let rd = resp.stored.node.diagnostics.to_value();
            let chunks = rd.get("chunks").and_then(Value::as_array).map(|a| {
                a.iter()
                    .map(|c| {
                        (
                            c.get(0).and_then(Value::as_u64).unwrap_or(0) as usize,
                            c.get(1).and_then(Value::as_f64).unwrap_or(0.0),
                        )
                    })
                    .collect()
            });
            let turn_start = if i > 0 && nodes[i - 1].stored.node.kind == Kind::Invoke {
                i - 1
            } else {
                i
            };
            let mut canon = canonical(method, path, &obj(&d, "headers"), &n.payload);
            map_response_ids(&response_ids, &mut canon);
            if let Some(id) = response_id(&rd, &resp.payload) {
                response_ids.insert(id, calls.len());
            }
            calls.push(Call {
                submission: node.submission,
                canonical: canon,
                status: rd.get("status").and_then(Value::as_u64).unwrap_or(200) as u16,
                headers: obj(&rd, "headers"),
                body: resp.payload.clone(),
                chunks: rd
                    .get("streamed")
                    .and_then(Value::as_bool)
                    .filter(|s| *s)
                    .and(chunks),
                strip_usage: d
                    .get("upstream_changes")
                    .and_then(|c| c.get("stream_options.include_usage"))
                    .is_some(),
                before: turn_start.checked_sub(1).map(|k| nodes[k].stored.hash),
                truncated: rd
                    .get("truncated")
                    .and_then(|t| t.get("total_bytes"))
                    .and_then(Value::as_u64),
            });
        }
        if calls.is_empty() {
            return Err(StoreError::Invalid(format!(
                "timeline `{}` of session {} has no call recorded by the proxy to replay",
                spec.branch, s.id
            )));
        }
        Ok(Replay {
            session: s.id,
            title: s.title.unwrap_or_else(|| s.id.to_string()),
            spec,
            served: vec![false; calls.len()],
            calls,
            live: None,
            matched: 0,
            missed: 0,
            response_ids,
        })
    }

    /// A received canonical request with its `previous_response_id` mapped
    /// to the recorded call (see the module docs).
    pub fn map_ids(&self, received: &mut Value) {
        map_response_ids(&self.response_ids, received);
    }

    /// Number of recorded calls.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Matches a received call: its recorded answer, or the miss.
    pub fn take(&mut self, received: &Value) -> std::result::Result<Call, Miss> {
        let Some(first) = self.served.iter().position(|s| !s) else {
            self.missed += 1;
            return Err(Miss {
                recorded: None,
                before: None,
                differences: vec![],
            });
        };
        let turn = self.calls[first].submission;
        let hit = (first..self.calls.len())
            .take_while(|&i| self.calls[i].submission == turn)
            .find(|&i| !self.served[i] && self.calls[i].canonical == *received);
        match hit {
            Some(i) => {
                self.served[i] = true;
                self.matched += 1;
                Ok(self.calls[i].clone())
            }
            None => {
                self.missed += 1;
                let c = &self.calls[first];
                Err(Miss {
                    recorded: Some(c.canonical.clone()),
                    before: c.before,
                    differences: differences(&c.canonical, received),
                })
            }
        }
    }

    /// `replay: N of M calls matched exactly (fidelity P%), K missed`.
    pub fn summary(&self) -> String {
        let total = self.matched + self.missed;
        let pct = if total == 0 {
            100.0
        } else {
            self.matched as f64 * 100.0 / total as f64
        };
        format!(
            "replay: {} of {} calls matched the recording exactly (fidelity {pct:.1}%), {} missed; {} recorded calls not asked for",
            self.matched,
            total,
            self.missed,
            self.served.iter().filter(|s| !**s).count()
        )
    }
}

/// A call that did not match.
#[derive(Debug)]
pub struct Miss {
    /// The recorded call expected at this position (`None`: exhausted).
    pub recorded: Option<Value>,
    /// Where a live timeline forks.
    pub before: Option<NodeHash>,
    /// JSON pointers where recorded and received differ.
    pub differences: Vec<String>,
}

/// The client-facing chunks of a recorded answer.
pub fn chunks(call: &Call) -> Vec<(Bytes, f64)> {
    let Some(chunks) = &call.chunks else {
        return vec![(Bytes::from(call.body.clone()), 0.0)];
    };
    let mut filter = ClientFilter::new(call.strip_usage);
    let mut out = Vec::new();
    let mut at = 0usize;
    for (len, t) in chunks {
        let end = (at + len).min(call.body.len());
        if let Some(b) = filter.push(Bytes::copy_from_slice(&call.body[at..end])) {
            out.push((b, *t));
        }
        at = end;
    }
    if at < call.body.len()
        && let Some(b) = filter.push(Bytes::copy_from_slice(&call.body[at..]))
    {
        out.push((b, chunks.last().map_or(0.0, |c| c.1)));
    }
    if let Some(rest) = filter.finish() {
        out.push((rest, chunks.last().map_or(0.0, |c| c.1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_fields_do_not_matter_and_differences_are_named() {
        let h = Map::new();
        let a = canonical(
            "POST",
            "/v1/x",
            &h,
            br#"{"user":"u1","model":"m","stream_options":{"obfuscation":true}}"#,
        );
        let b = canonical("POST", "/v1/x", &h, br#"{"model":"m","user":"u2"}"#);
        assert_eq!(a["body"]["stream_options"], json!({}));
        let c = canonical("POST", "/v1/x", &h, br#"{"model":"n"}"#);
        assert_eq!(differences(&b, &c), vec!["/body/model".to_owned()]);
        assert!(ReplaySpec::parse("ses:edit-1").unwrap().branch.as_str() == "edit-1");
        assert!(ReplaySpec::parse("Paris").unwrap().branch.is_main());
        let _ = a;
    }

    #[test]
    fn previous_response_id_names_the_recorded_call() {
        let mut ids = HashMap::new();
        let answer = br#"{"id":"resp_7","object":"response","output":[]}"#;
        ids.insert(response_id(&json!({}), answer).unwrap(), 2);
        assert_eq!(
            response_id(
                &json!({"assembled": {"id": "resp_8", "object": "response"}}),
                b""
            ),
            Some("resp_8".into())
        );
        let mut c = canonical(
            "POST",
            "/v1/responses",
            &Map::new(),
            br#"{"input":"x","previous_response_id":"resp_7"}"#,
        );
        map_response_ids(&ids, &mut c);
        assert_eq!(
            c["body"]["previous_response_id"],
            json!({"recorded_response_of_call": 2})
        );
        let mut unknown = canonical(
            "POST",
            "/v1/responses",
            &Map::new(),
            br#"{"previous_response_id":"resp_9"}"#,
        );
        map_response_ids(&ids, &mut unknown);
        assert_eq!(unknown["body"]["previous_response_id"], "resp_9");
    }
}
