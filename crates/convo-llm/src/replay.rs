//! Replay: answer calls from a recorded timeline, with no upstream.
//!
//! Replay is a **lookup, not a cursor**: a call is answered by the
//! recorded call of the timeline that matches it, whatever the order the
//! calls arrive in (four calls an agent sends with `asyncio.gather` each
//! get their own answer). When several recorded calls match (a call
//! retried after an error, a question asked twice), the first not yet
//! served in timeline order answers; once every match was served, a
//! repeat is a miss unless repeats are allowed (`--replay-repeats`: the
//! last match answers again). A miss is only a miss: it moves nothing and
//! every later call is looked up as before.
//!
//! "Matches" means the same canonical form ([`Matcher::canonical`]):
//! RFC 8785 JSON of `{method, path, headers, body}` where `headers` keeps
//! only the behaviour-changing ones (`anthropic-version`, `anthropic-beta`,
//! `openai-beta`), the body is in the canonical form the threading uses
//! too ([`crate::api::canonical_value`]: tool arguments parsed, text parts
//! as strings, `null`s and cache hints dropped) and drops the volatile
//! fields [`VOLATILE`] and the JSON pointers given with `--match-ignore`
//! (`/body/temperature`, `/headers/openai-beta`). The agent harness
//! compares its calls with the same function.
//!
//! The Responses API's `previous_response_id` names an answer by the id
//! its upstream gave it: in the canonical form it is replaced by the
//! recorded call whose answer carried that id
//! (`{"recorded_response_of_call": N}`, N counting from 0), so a replayed
//! program, which got the recorded ids back, chains its calls as recorded,
//! and a miss names the call rather than an opaque id.
//!
//! A call matches **exactly** when its canonical form is a recorded
//! call's; otherwise it may match **tolerating volatile differences**: a
//! recorded call at the same place of the conversation (same method,
//! path, model, tool names and message shapes) whose every difference is
//! an id, a duration, a timestamp, a temporary path, a chunk id — found by
//! rules kept per known agent (Claude Code, Codex) and by what the
//! recording itself shows to vary ([`matching`]). Each tolerated
//! difference is reported with its JSON pointer ([`Replay::outcomes`],
//! [`Replay::report`]). [`Matcher::strict`] (`--strict`) keeps exact
//! matching only. A call matching only calls already answered is a
//! *repeat* (answered again with `--replay-repeats`), never "not in the
//! recording".
//!
//! A match is answered with the recorded status, headers and bytes: a
//! stream is re-sent chunk by chunk as recorded, byte-identical to what the
//! client got live (the usage chunk the proxy had asked for is removed the
//! same way), at once (`fast`) or at the recorded offsets (`recorded`). An
//! answer the upstream cut is cut again: a stream ends with an error after
//! the bytes that had arrived, a JSON answer is the `502 upstream_cut` the
//! client got.
//!
//! A miss (`--on-miss error`) is a `400` (a status SDKs do not retry) whose
//! JSON (`code: replay_miss`) names the closest recorded call, the received
//! canonical request and the JSON pointers where they differ; once every
//! recorded call was served it is a `400` with `code: replay_exhausted`
//! saying so. With `--on-miss live` the call goes to the upstream and is
//! recorded on a new timeline `live-N` forked just before the closest
//! recorded call's turn; every later call goes live there too. Past the
//! end of the recording, `live` continues the replayed timeline itself (so
//! replaying a timeline forked at node N serves the record up to N and
//! goes live after it).
//!
//! A session received as telemetry (`/v1/traces`, `/v1/logs`) has no
//! exchanges: its calls are rebuilt from the messages
//! ([`crate::otel::rebuild`]): looked up by the conversation and
//! model a request carries (any of the three APIs), answered with the
//! recorded answer in the wire format the request speaks (a chat stream
//! when it asks for one).

pub mod matching;
pub mod parts;

pub use matching::{Found, Index, Parted, Rules, Tolerated};

use crate::otel::rebuild::{self, Rebuilt};
use crate::record::BEHAVIOUR_HEADERS;
use crate::sse::ClientFilter;
use bytes::Bytes;
use convo_core::credential::{REDACTED, redact_query};
use convo_core::{BranchName, Kind, NodeHash, SessionId, SubmissionId};
use convo_store::{Result, Store, StoreError};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Body fields ignored when matching (they change between identical runs),
/// as JSON pointers into the canonical request.
pub const VOLATILE: &[&str] = &[
    "/body/user",
    "/body/stream_options/obfuscation",
    "/body/prompt_cache_key",
    "/body/safety_identifier",
    "/body/metadata/user_id",
    // Codex: per-run ids (session, turn, window, installation) …
    "/body/client_metadata",
    // … and the ids it gives its own input items (the content still counts).
    "/body/input/*/id",
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

/// How a request is reduced before it is compared: the one matcher the
/// proxy's replay and the agent harness's replay both use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matcher {
    /// JSON pointers (into `{method, path, headers, body}`) left out of the
    /// comparison, besides [`VOLATILE`].
    pub ignore: Vec<String>,
    /// Only exact matches: no volatile difference is tolerated.
    pub strict: bool,
}

impl Matcher {
    /// A matcher ignoring `pointers` too (each must start with `/`).
    pub fn new(pointers: &[String]) -> std::result::Result<Matcher, String> {
        for p in pointers {
            if !p.starts_with('/') {
                return Err(format!(
                    "--match-ignore `{p}`: not a JSON pointer (write /body/temperature, /headers/openai-beta)"
                ));
            }
        }
        Ok(Matcher {
            ignore: pointers.to_vec(),
            strict: false,
        })
    }

    /// The canonical form of a request (see the module docs).
    pub fn canonical(
        &self,
        method: &str,
        path: &str,
        headers: &Map<String, Value>,
        body: &[u8],
    ) -> Value {
        let body = match crate::api::parse(body) {
            Some(mut v) => {
                crate::api::canonicalize(&mut v);
                v
            }
            None => multipart(body).unwrap_or_else(|| json!(String::from_utf8_lossy(body))),
        };
        let headers: Map<String, Value> = headers
            .iter()
            .filter(|(k, _)| BEHAVIOUR_HEADERS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut v = json!({"method": method, "path": path, "headers": headers, "body": body});
        for p in VOLATILE
            .iter()
            .copied()
            .chain(self.ignore.iter().map(String::as_str))
        {
            remove_pointer(&mut v, p);
        }
        v
    }
}

/// What to replay.
#[derive(Clone, Debug)]
pub struct ReplaySpec {
    /// Session name (id, prefix or title).
    pub session: String,
    /// Timeline (default `main`).
    pub branch: BranchName,
    /// What `--replay` said, when it was split as `SESSION:BRANCH`: a
    /// session with that whole title is preferred.
    pub whole: Option<String>,
    /// Stream pace.
    pub pace: Pace,
    /// Miss policy.
    pub on_miss: OnMiss,
    /// Whether a call matching recorded calls already served is answered
    /// again (by the last of them).
    pub repeats: bool,
    /// How requests are compared.
    pub matcher: Matcher,
    /// Whether the tool calls the received requests carry are kept
    /// ([`Replay::tool_calls`]: `convo test`'s tool assertions).
    pub collect_tools: bool,
}

impl ReplaySpec {
    /// Parses `SESSION[:BRANCH]`. A title with a colon still works: when
    /// no session has the part before the last colon as its name, or the
    /// part after it is not a branch name, the whole text is the session
    /// (see [`ReplaySpec::with_branch`] to name the branch apart).
    pub fn parse(s: &str) -> std::result::Result<ReplaySpec, String> {
        let split = s
            .rsplit_once(':')
            .filter(|(a, _)| !a.is_empty())
            .and_then(|(a, b)| BranchName::new(b).ok().map(|b| (a, b)));
        let (session, branch, whole) = match split {
            Some((a, b)) => (a.to_owned(), b, Some(s.to_owned())),
            None if s.is_empty() => return Err("--replay: give SESSION or SESSION:BRANCH".into()),
            None => (s.to_owned(), BranchName::main(), None),
        };
        Ok(ReplaySpec {
            session,
            branch,
            whole,
            pace: Pace::Fast,
            on_miss: OnMiss::Error,
            repeats: false,
            matcher: Matcher::default(),
            collect_tools: false,
        })
    }

    /// `SESSION` taken whole (any title) and the branch named apart
    /// (`--replay-branch`).
    pub fn with_branch(session: &str, branch: &str) -> std::result::Result<ReplaySpec, String> {
        let branch =
            BranchName::new(branch).map_err(|e| format!("--replay-branch `{branch}`: {e}"))?;
        Ok(ReplaySpec {
            session: session.to_owned(),
            branch,
            whole: None,
            pace: Pace::Fast,
            on_miss: OnMiss::Error,
            repeats: false,
            matcher: Matcher::default(),
            collect_tools: false,
        })
    }
}

/// One recorded call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Its place among the timeline's recorded calls (from 0).
    pub index: usize,
    /// Its turn (submission).
    pub submission: Option<SubmissionId>,
    /// Its turn's number on the timeline (from 1) and its sequence there.
    pub turn: Option<u64>,
    /// Its sequence within the turn.
    pub sequence: Option<u32>,
    /// The digest of the request as the client sent it ([`raw_key`]);
    /// `None` for a call rebuilt from telemetry.
    pub raw: Option<matching::Key>,
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
    /// Why the upstream cut the answer, when it did (the client got a cut
    /// answer, and a replay cuts it the same way).
    pub cut: Option<String>,
    /// A call of a session received as telemetry: no exchange was
    /// recorded, the answer is rebuilt for each request ([`Call::answering`]).
    pub rebuilt: Option<Box<Rebuilt>>,
}

impl Call {
    /// The call as it answers a request to `/v1/{rest}` with `body`: a
    /// recorded exchange as recorded; a rebuilt one in the wire format the
    /// request speaks (see [`crate::otel::rebuild`]).
    pub fn answering(mut self, rest: &str, body: &[u8]) -> Call {
        let Some(r) = self.rebuilt.take() else {
            return self;
        };
        let (status, ct, bytes, events) = match rebuild::answer(&r, rest, body) {
            Ok(a) => (200, a.content_type, a.body, a.events),
            Err(why) => (
                400,
                "application/json",
                json!({"error": {"type": "convo_proxy_error", "code": "replay_unsupported",
                    "message": why}})
                .to_string()
                .into_bytes(),
                None,
            ),
        };
        self.status = status;
        self.headers = Map::from_iter([("content-type".to_owned(), json!(ct))]);
        self.body = bytes;
        self.chunks = events.map(|e| e.into_iter().map(|n| (n, 0.0)).collect());
        self
    }
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
    /// The recorded canonical requests, looked up exactly and tolerating
    /// volatile differences.
    index: Index,
    /// Once a miss went live: the session (name) and timeline live calls go to.
    pub live: Option<(String, BranchName)>,
    /// Calls answered from the record with the same canonical request.
    pub exact: u64,
    /// Calls answered from the record tolerating volatile differences.
    pub tolerated: u64,
    /// Calls that did not match and were refused (`--on-miss error`).
    pub missed: u64,
    /// Calls answered live: the one that did not match under
    /// `--on-miss live` and every call after it ([`Replay::take`],
    /// [`Replay::answered_live`]).
    pub live_calls: u64,
    /// What happened to each received call, in arrival order (the first
    /// [`MAX_OUTCOMES`]).
    outcomes: Vec<Outcome>,
    /// The tool calls received requests carried (name, arguments), each
    /// once, when [`ReplaySpec::collect_tools`].
    tool_calls: Vec<(String, Value)>,
    seen_tools: std::collections::HashSet<String>,
    /// Responses API answer ids → the recorded call that answered them.
    response_ids: HashMap<String, usize>,
    /// [`raw_key`] → the first recorded call sent with those bytes.
    by_raw: HashMap<matching::Key, usize>,
    /// The messages of the requests received so far ([`parts`]).
    memo: parts::Memo,
    /// Whether the calls are rebuilt from telemetry (matched by
    /// conversation and model, [`rebuild::received`]).
    rebuilt: bool,
}

/// The most per-call outcomes a replay keeps (the counts go on).
pub const MAX_OUTCOMES: usize = 100_000;

/// What happened to one received call (see `docs/JSON.md`, the replay report).
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// Its place among the received calls (from 1).
    pub call: u64,
    /// `exact`, `tolerated`, `live` or `missed`.
    pub outcome: &'static str,
    /// The recorded call that answered it, or the closest one (from 0).
    pub recorded_call: Option<usize>,
    /// That recorded call's turn on the timeline (from 1).
    pub turn: Option<u64>,
    /// Its sequence within the turn.
    pub sequence: Option<u32>,
    /// Each difference tolerated: JSON pointer and rule.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tolerated: Vec<Tolerated>,
    /// A miss: the JSON pointers where the closest recorded call differs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
    /// A miss: why (`replay_miss`, `replay_repeat`, `replay_exhausted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    /// A miss: a unified diff of the closest recorded request and the
    /// received one (pretty JSON, canonical form; the first 10 misses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// A unified diff, recorded → received, of two canonical requests, one
/// line per value named by its JSON pointer (`/body/model: "m"`); a text
/// of several lines gives one line each (`/body/system/0/text#L3: …`).
pub fn request_diff(recorded: &Value, received: &Value) -> String {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    flat(recorded, "", &mut a);
    flat(received, "", &mut b);
    let (a, b) = (a.join("\n") + "\n", b.join("\n") + "\n");
    similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(2)
        .header("recorded", "received")
        .to_string()
}

fn flat(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(o) if !o.is_empty() => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            for k in keys {
                let esc = k.replace('~', "~0").replace('/', "~1");
                flat(&o[k], &format!("{at}/{esc}"), out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                flat(x, &format!("{at}/{i}"), out);
            }
        }
        Value::String(t) if t.contains('\n') => {
            for (i, line) in t.split('\n').enumerate() {
                out.push(format!("{at}#L{}: {line}", i + 1));
            }
        }
        other => out.push(format!("{at}: {other}")),
    }
}

/// Removes what a JSON pointer names (nothing when it names nothing).
fn remove_pointer(v: &mut Value, pointer: &str) {
    let segments: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    remove_at(v, &segments);
}

/// Removes what `segments` name under `v`; a `*` segment stands for every
/// member of an object or element of an array.
fn remove_at(v: &mut Value, segments: &[String]) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    if rest.is_empty() {
        match v {
            Value::Object(o) if first == "*" => o.clear(),
            Value::Object(o) => {
                o.remove(first);
            }
            Value::Array(a) if first == "*" => a.clear(),
            Value::Array(a) => {
                if let Ok(i) = first.parse::<usize>()
                    && i < a.len()
                {
                    a.remove(i);
                }
            }
            _ => {}
        }
        return;
    }
    match v {
        Value::Object(o) if first == "*" => o.values_mut().for_each(|c| remove_at(c, rest)),
        Value::Array(a) if first == "*" => a.iter_mut().for_each(|c| remove_at(c, rest)),
        Value::Object(o) => {
            if let Some(c) = o.get_mut(first) {
                remove_at(c, rest);
            }
        }
        Value::Array(a) => {
            if let Some(c) = first.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                remove_at(c, rest);
            }
        }
        _ => {}
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
    // Recordings before the answer left the diagnostics hold it there.
    match diag.get("assembled") {
        Some(a) => from(a),
        None => crate::api::parse(body)
            .or_else(|| crate::api::assemble(crate::api::Api::Responses, body))
            .as_ref()
            .and_then(from),
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

/// The digest a request is looked up by before it is read: its method,
/// path, behaviour-changing headers ([`BEHAVIOUR_HEADERS`]) and body
/// bytes. Two requests with the same digest have the same canonical
/// form, so a received request whose bytes are a recorded call's is that
/// call with no parse ([`Replay::take_sent`]).
pub fn raw_key(
    method: &str,
    path: &str,
    headers: &Map<String, Value>,
    body: &[u8],
) -> matching::Key {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [method.as_bytes(), path.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    for name in BEHAVIOUR_HEADERS {
        match headers.get(*name) {
            Some(v) => {
                let text = v.to_string();
                h.update((text.len() as u64).to_le_bytes());
                h.update(text.as_bytes());
            }
            None => h.update(u64::MAX.to_le_bytes()),
        }
    }
    h.update(body);
    h.finalize().into()
}

/// The canonical form of a request with no `--match-ignore` (see
/// [`Matcher::canonical`]).
pub fn canonical(method: &str, path: &str, headers: &Map<String, Value>, body: &[u8]) -> Value {
    Matcher::default().canonical(method, path, headers, body)
}

/// A `multipart/form-data` body (a file or audio upload) part by part,
/// without its boundary, which a client picks anew for every request:
/// `{"multipart": [{"headers": [...], "body": ...}]}`, each part's headers
/// as sent (one line each) and its body as text, or its length and
/// SHA-256 when it is not UTF-8 (audio). `None` when the body is not one
/// (it does not start with `--BOUNDARY` and a line end, or a part has no
/// end).
fn multipart(body: &[u8]) -> Option<Value> {
    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }
    let first = find(body, b"\r\n")?;
    let boundary = body[..first].strip_prefix(b"--")?;
    if boundary.is_empty()
        || boundary.len() > 200
        || boundary.iter().any(|b| b.is_ascii_whitespace())
    {
        return None;
    }
    let mut delim = b"\r\n--".to_vec();
    delim.extend_from_slice(boundary);
    let mut parts = Vec::new();
    let mut rest = &body[first + 2..];
    loop {
        let end = find(rest, &delim)?;
        let part = &rest[..end];
        let split = find(part, b"\r\n\r\n")?;
        let headers: Vec<Value> = String::from_utf8_lossy(&part[..split])
            .split("\r\n")
            .map(|l| json!(l))
            .collect();
        let content = &part[split + 4..];
        let content = match std::str::from_utf8(content) {
            Ok(t) => json!(t),
            Err(_) => json!({"bytes": content.len(),
                "sha256": convo_core::sha256(content).to_hex()}),
        };
        parts.push(json!({"headers": headers, "body": content}));
        rest = &rest[end + delim.len()..];
        if rest.starts_with(b"--") {
            return Some(json!({ "multipart": parts }));
        }
        rest = rest.strip_prefix(b"\r\n")?;
    }
}

/// The path a received call is recorded under.
pub fn recorded_path(rest: &str, query: Option<&str>) -> String {
    match query {
        Some(q) => format!("/v1/{rest}?{}", redact_query(q, REDACTED)),
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
    pub fn load(store: &mut Store, mut spec: ReplaySpec) -> Result<Replay> {
        let whole = match &spec.whole {
            Some(w) => match store.find_session(w) {
                Ok(s) => Some(s),
                Err(StoreError::NoSession(_)) => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let s = match whole {
            Some(s) => {
                spec.session = spec.whole.take().unwrap_or_default();
                spec.branch = BranchName::main();
                s
            }
            None => store.find_session(&spec.session)?,
        };
        let nodes = store.timeline(&s.id, &spec.branch)?;
        let mut l = Loading::new(&spec.matcher);
        recorded_calls(&nodes, &mut l, true);
        if !l.calls.is_empty() {
            for sub in subagent_timelines(store, &s.id, &spec.branch, &nodes)? {
                recorded_calls(&sub, &mut l, false);
            }
            for other in companions(store, &s, &nodes)? {
                let nodes = store.timeline(&other, &BranchName::main())?;
                recorded_calls(&nodes, &mut l, false);
            }
        }
        let Loading {
            mut calls,
            parts,
            mut memo,
            response_ids,
            ..
        } = l;
        let rebuilt = calls.is_empty();
        let parts = if rebuilt {
            calls = rebuilt_calls(store, &nodes)?;
            calls
                .iter()
                .filter_map(|c| c.rebuilt.as_ref())
                .map(|r| Parted::split(r.canonical.clone(), &mut memo.by_key))
                .collect()
        } else {
            parts
        };
        if calls.is_empty() {
            return Err(StoreError::Invalid(format!(
                "timeline `{}` of session {} has no call recorded by the proxy or received as telemetry to replay",
                spec.branch, s.id
            ).into()));
        }
        number_turns(&mut calls);
        let mut by_raw = HashMap::new();
        for c in &calls {
            if let Some(k) = c.raw {
                by_raw.entry(k).or_insert(c.index);
            }
        }
        let index = Index::of_parts(parts, Rules::default(), spec.matcher.strict || rebuilt);
        Ok(Replay {
            session: s.id,
            title: s.title.unwrap_or_else(|| s.id.to_string()),
            spec,
            served: vec![false; calls.len()],
            calls,
            index,
            live: None,
            exact: 0,
            tolerated: 0,
            missed: 0,
            live_calls: 0,
            outcomes: Vec::new(),
            tool_calls: Vec::new(),
            seen_tools: Default::default(),
            response_ids,
            by_raw,
            memo,
            rebuilt,
        })
    }

    /// The canonical form of a received call, as the recording is looked
    /// up by: its `previous_response_id` mapped to the recorded call (see
    /// the module docs).
    pub fn received(
        &self,
        method: &str,
        path: &str,
        headers: &Map<String, Value>,
        body: &[u8],
    ) -> Value {
        if self.rebuilt {
            return rebuild::received(method, path.trim_start_matches("/v1/"), body);
        }
        let mut v = self.spec.matcher.canonical(method, path, headers, body);
        map_response_ids(&self.response_ids, &mut v);
        v
    }

    /// Number of recorded calls.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Looks a received call up without reading it whole: by the bytes
    /// the client sent ([`raw_key`]: a recorded call sent with the same
    /// bytes), else in parts ([`parts`]: the messages already read are not
    /// read again); the call [`Replay::take`] would answer, exactly or
    /// tolerating volatile differences. `None` when this cannot tell (a
    /// repeat, a miss, `--match-ignore` pointers, a body not JSON): then
    /// read the request ([`Replay::received`]) and [`Replay::take`] it.
    pub fn take_sent(
        &mut self,
        method: &str,
        path: &str,
        headers: &Map<String, Value>,
        body: &[u8],
    ) -> Option<Call> {
        if self.rebuilt || self.calls.is_empty() {
            return None;
        }
        let k = raw_key(method, path, headers, body);
        if let Some(i) = self
            .by_raw
            .get(&k)
            .and_then(|&i| self.index.same_as(i, &self.served))
        {
            if self.spec.collect_tools
                && let Some(p) = self.index.parts(i)
            {
                let found = tools_of(p);
                self.keep_tools(found);
            }
            return Some(self.serve(i, "exact", Vec::new()));
        }
        let ids = &self.response_ids;
        let pointers = pointers(&self.spec.matcher);
        let parted = self
            .memo
            .read((method, path, headers, body), &pointers, |head| {
                map_response_ids(ids, head)
            })?;
        let found = self.index.find_parts(&parted, &self.served)?;
        if self.spec.collect_tools {
            self.keep_tools(tools_of(&parted));
        }
        Some(match found {
            Found::Exact(i) => self.serve(i, "exact", Vec::new()),
            Found::Tolerated { call, tolerated } => self.serve(call, "tolerated", tolerated),
            Found::Repeat(_) | Found::Miss { .. } => return None,
        })
    }

    /// Looks a received call up: its recorded answer, or the miss. A miss
    /// changes nothing but the count (of misses, or under `--on-miss live`
    /// of live calls). Every call's outcome is kept ([`Replay::outcomes`]).
    pub fn take(&mut self, received: &Value) -> std::result::Result<Call, Box<Miss>> {
        if self.spec.collect_tools {
            self.collect_tools(received);
        }
        let found = self.index.find(received, &self.served);
        let (i, outcome, tolerated) = match found {
            Found::Exact(i) => (i, "exact", Vec::new()),
            Found::Tolerated { call, tolerated } => (call, "tolerated", tolerated),
            Found::Repeat(i) if self.spec.repeats => match self.index.tolerates_call(i, received) {
                Some(t) if !t.is_empty() => (i, "tolerated", t),
                _ => (i, "exact", Vec::new()),
            },
            Found::Repeat(i) => {
                return Err(Box::new(self.missed_call(
                    received,
                    Some(i),
                    Some(i),
                    vec![],
                )));
            }
            Found::Miss {
                closest,
                differences,
            } => {
                return Err(Box::new(self.missed_call(
                    received,
                    closest,
                    None,
                    differences,
                )));
            }
        };
        Ok(self.serve(i, outcome, tolerated))
    }

    /// Marks recorded call `i` served (its outcome counted and kept) and
    /// gives it.
    fn serve(&mut self, i: usize, outcome: &'static str, tolerated: Vec<Tolerated>) -> Call {
        self.served[i] = true;
        if outcome == "exact" {
            self.exact += 1;
        } else {
            self.tolerated += 1;
        }
        let c = &self.calls[i];
        let o = Outcome {
            call: self.received_count(),
            outcome,
            recorded_call: Some(i),
            turn: c.turn,
            sequence: c.sequence,
            tolerated,
            differences: Vec::new(),
            code: None,
            diff: None,
        };
        self.push_outcome(o);
        self.calls[i].clone()
    }

    /// Counts and keeps a miss (live under `--on-miss live`).
    fn missed_call(
        &mut self,
        received: &Value,
        closest: Option<usize>,
        repeat_of: Option<usize>,
        differences: Vec<String>,
    ) -> Miss {
        let n = self.received_count() + 1;
        // Under `--on-miss live` the call goes to the upstream: live, not
        // a miss.
        let outcome = match self.spec.on_miss {
            OnMiss::Live => {
                self.live_calls += 1;
                "live"
            }
            OnMiss::Error => {
                self.missed += 1;
                "missed"
            }
        };
        let exhausted = self.served.iter().all(|s| *s);
        let code = match (repeat_of, closest) {
            (Some(_), _) => "replay_repeat",
            (None, None) => "replay_exhausted",
            (None, Some(_)) if exhausted => "replay_exhausted",
            (None, Some(_)) => "replay_miss",
        };
        let c = closest.map(|i| &self.calls[i]);
        let recorded = closest.and_then(|i| self.index.get(i));
        let diff = (self.missed + self.live_calls <= 10)
            .then(|| recorded.as_ref().map(|r| request_diff(r, received)))
            .flatten();
        let o = Outcome {
            call: n,
            outcome,
            recorded_call: closest,
            turn: c.and_then(|c| c.turn),
            sequence: c.and_then(|c| c.sequence),
            tolerated: Vec::new(),
            differences: differences.clone(),
            code: Some(code),
            diff,
        };
        let miss = Miss {
            recorded,
            recorded_call: closest,
            before: c.and_then(|c| c.before),
            differences,
            exhausted,
            repeat_of,
        };
        self.push_outcome(o);
        miss
    }

    fn received_count(&self) -> u64 {
        self.exact + self.tolerated + self.missed + self.live_calls
    }

    fn push_outcome(&mut self, o: Outcome) {
        if self.outcomes.len() < MAX_OUTCOMES {
            self.outcomes.push(o);
        }
    }

    /// A call after the replay went live was answered live.
    pub fn answered_live(&mut self) {
        let o = Outcome {
            call: self.received_count() + 1,
            outcome: "live",
            recorded_call: None,
            turn: None,
            sequence: None,
            tolerated: Vec::new(),
            differences: Vec::new(),
            code: None,
            diff: None,
        };
        self.live_calls += 1;
        self.push_outcome(o);
    }

    fn collect_tools(&mut self, received: &Value) {
        let body = received.get("body").unwrap_or(&Value::Null);
        let mut found = Vec::new();
        tools_in(conversations(body), &mut found);
        self.keep_tools(found);
    }

    fn keep_tools(&mut self, found: Vec<(String, Value)>) {
        for (n, args) in found {
            if self.seen_tools.insert(format!("{n}\u{0}{args}")) {
                self.tool_calls.push((n, args));
            }
        }
    }

    /// The tool calls the received requests carried, each once, in the
    /// order first seen (with [`ReplaySpec::collect_tools`]).
    pub fn tool_calls(&self) -> &[(String, Value)] {
        &self.tool_calls
    }

    /// What happened to each received call, in arrival order.
    pub fn outcomes(&self) -> &[Outcome] {
        &self.outcomes
    }

    /// Whether every received call was answered from the record (exact or
    /// tolerated).
    pub fn all_matched(&self) -> bool {
        self.missed == 0 && self.live_calls == 0
    }

    /// `replay: N of M calls matched the recording (E exactly, T
    /// tolerating volatile differences at …) (fidelity P%), L went live, K
    /// missed; R recorded calls not asked for`. Fidelity is the share of
    /// the calls asked for that the recording answered.
    pub fn summary(&self) -> String {
        let total = self.received_count();
        let matched = self.exact + self.tolerated;
        let pct = if total == 0 {
            100.0
        } else {
            matched as f64 * 100.0 / total as f64
        };
        let mut pointers: Vec<&str> = self
            .outcomes
            .iter()
            .flat_map(|o| o.tolerated.iter().map(|t| t.pointer.as_str()))
            .collect();
        pointers.sort_unstable();
        pointers.dedup();
        let at = if pointers.is_empty() {
            String::new()
        } else {
            let shown: Vec<&str> = pointers.iter().take(8).copied().collect();
            let more = pointers.len().saturating_sub(8);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!(" at {}{more}", shown.join(", "))
        };
        format!(
            "replay: {matched} of {total} calls matched the recording ({} exactly, {} tolerating volatile differences{at}) (fidelity {pct:.1}%), {} went live, {} missed; {} recorded calls not asked for",
            self.exact,
            self.tolerated,
            self.live_calls,
            self.missed,
            self.served.iter().filter(|s| !**s).count()
        )
    }

    /// The replay report (see `docs/JSON.md`): the counts and every
    /// call's outcome.
    pub fn report(&self) -> Value {
        json!({
            "session": self.session.to_string(),
            "branch": self.spec.branch.as_str(),
            "strict": self.spec.matcher.strict,
            "recorded_calls": self.calls.len(),
            "counts": {
                "exact": self.exact,
                "tolerated": self.tolerated,
                "live": self.live_calls,
                "missed": self.missed,
                "not_asked_for": self.served.iter().filter(|s| !**s).count(),
            },
            "passed": self.all_matched(),
            "live_timeline": self.live.as_ref().map(|(s, b)| json!({"session": s, "branch": b.as_str()})),
            "tool_calls": self.tool_calls.iter().map(|(n, a)| json!({"name": n, "arguments": a})).collect::<Vec<_>>(),
            "calls": self.outcomes,
        })
    }
}

/// Numbers each call's turn: its submission's place among the calls'
/// submissions (from 1).
fn number_turns(calls: &mut [Call]) {
    let mut seen: HashMap<Option<SubmissionId>, u64> = HashMap::new();
    for c in calls {
        let next = seen.len() as u64 + 1;
        c.turn = Some(*seen.entry(c.submission).or_insert(next));
    }
}

/// The items of a request body's conversations (`messages`, `input`).
fn conversations(body: &Value) -> impl Iterator<Item = &Value> {
    matching::CONVERSATION
        .iter()
        .filter_map(|k| body.get(*k).and_then(Value::as_array))
        .flatten()
}

/// The tool calls of a request in parts, in the order
/// [`Replay::collect_tools`] finds them in the whole request.
fn tools_of(p: &Parted) -> Vec<(String, Value)> {
    let mut found = Vec::new();
    let body = p.head.get("body").unwrap_or(&Value::Null);
    let rest: Vec<&Value> = conversations(body).collect();
    match p.conv {
        Some("input") => {
            tools_in(rest.iter().copied(), &mut found);
            tools_in(p.messages.iter().map(|m| &m.value), &mut found);
        }
        _ => {
            tools_in(p.messages.iter().map(|m| &m.value), &mut found);
            tools_in(rest.iter().copied(), &mut found);
        }
    }
    found
}

/// The tool calls (name, arguments) conversation `items` carry.
fn tools_in<'a>(items: impl Iterator<Item = &'a Value>, found: &mut Vec<(String, Value)>) {
    let name = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    for item in items {
        if let (Some("function_call" | "custom_tool_call"), Some(n)) =
            (item.get("type").and_then(Value::as_str), name(item, "name"))
        {
            let args = item.get("arguments").or_else(|| item.get("input"));
            found.push((n, args.cloned().unwrap_or(Value::Null)));
        }
        for b in item
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if b.get("type").and_then(Value::as_str) == Some("tool_use")
                && let Some(n) = name(b, "name")
            {
                found.push((n, b.get("input").cloned().unwrap_or(Value::Null)));
            }
        }
        for c in item
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(f) = c.get("function")
                && let Some(n) = name(f, "name")
            {
                found.push((n, f.get("arguments").cloned().unwrap_or(Value::Null)));
            }
        }
    }
}

/// The pointers a canonical form drops: [`VOLATILE`] and the matcher's.
fn pointers(m: &Matcher) -> Vec<&str> {
    VOLATILE
        .iter()
        .copied()
        .chain(m.ignore.iter().map(String::as_str))
        .collect()
}

/// What [`Replay::load`] gathers: the calls and each one's request in
/// parts, the recorded conversations' messages read once (into the memo
/// the received requests are then read with).
struct Loading<'a> {
    matcher: &'a Matcher,
    response_ids: HashMap<String, usize>,
    calls: Vec<Call>,
    parts: Vec<Parted>,
    memo: parts::Memo,
}

impl<'a> Loading<'a> {
    fn new(matcher: &'a Matcher) -> Loading<'a> {
        Loading {
            matcher,
            response_ids: HashMap::new(),
            calls: Vec::new(),
            parts: Vec::new(),
            memo: parts::Memo::default(),
        }
    }

    /// A recorded request in parts: read as a received one is, or, when
    /// that cannot be (a body not JSON, a pointer into one message of the
    /// conversation), whole and then cut.
    fn request(&mut self, method: &str, path: &str, headers: &Map<String, Value>, body: &[u8]) {
        let ids = &self.response_ids;
        let parted = self.memo.read(
            (method, path, headers, body),
            &pointers(self.matcher),
            |head| map_response_ids(ids, head),
        );
        let parted = parted.unwrap_or_else(|| {
            let mut canon = self.matcher.canonical(method, path, headers, body);
            map_response_ids(ids, &mut canon);
            Parted::split(canon, &mut self.memo.by_key)
        });
        self.parts.push(parted);
    }
}

/// The calls the proxy recorded on a timeline, appended to `calls`
/// (`forks`: a miss going live may fork this timeline before a call).
fn recorded_calls(nodes: &[convo_store::TimelineNode], l: &mut Loading, forks: bool) {
    // (submission, sequence) → the response, so pairing is linear.
    let mut responses: HashMap<(Option<SubmissionId>, Option<u32>), usize> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let node = &n.stored.node;
        if node.kind == Kind::Response {
            responses
                .entry((node.submission, node.sequence))
                .or_insert(i);
        }
    }
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
        let Some(resp) = responses
            .get(&(node.submission, node.sequence))
            .filter(|&&r| r > i)
            .map(|&r| &nodes[r])
        else {
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
        // The node before the call's turn: before its invoke.
        let turn_start = nodes[..i]
            .iter()
            .rposition(|p| {
                p.stored.node.kind == Kind::Invoke && p.stored.node.submission == node.submission
            })
            .unwrap_or(i);
        l.request(method, path, &obj(&d, "headers"), &n.payload);
        if let Some(id) = response_id(&rd, &resp.payload) {
            l.response_ids.insert(id, l.calls.len());
        }
        let cut = rd
            .get("partial")
            .and_then(Value::as_str)
            .filter(|p| p.starts_with("upstream"))
            .map(str::to_owned);
        l.calls.push(Call {
            index: l.calls.len(),
            submission: node.submission,
            turn: None,
            sequence: node.sequence,
            raw: Some(raw_key(method, path, &obj(&d, "headers"), &n.payload)),
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
            before: turn_start
                .checked_sub(1)
                .filter(|_| forks)
                .map(|k| nodes[k].stored.hash),
            truncated: rd
                .get("truncated")
                .and_then(|t| t.get("total_bytes"))
                .and_then(Value::as_u64),
            cut,
            rebuilt: None,
        });
    }
}

/// The timelines of the subagents this timeline started (`agent-N`, forked
/// on it, see [`crate::thread::Spawn`]): each one's nodes after its fork.
fn subagent_timelines(
    store: &mut Store,
    session: &SessionId,
    branch: &BranchName,
    nodes: &[convo_store::TimelineNode],
) -> Result<Vec<Vec<convo_store::TimelineNode>>> {
    let on: std::collections::HashSet<_> = nodes.iter().map(|n| n.stored.hash).collect();
    let mut out = Vec::new();
    for b in store.branches(session)? {
        if &b.name == branch || !b.name.as_str().starts_with("agent-") {
            continue;
        }
        let mut tl = store.timeline(session, &b.name)?;
        let shared = tl
            .iter()
            .take_while(|n| on.contains(&n.stored.hash))
            .count();
        let rest = tl.split_off(shared);
        let starts = rest
            .first()
            .is_some_and(|n| n.stored.node.kind == Kind::Fork)
            && rest.get(1).is_some_and(|n| {
                convo_store::topology::subagent_link(&n.stored.node.diagnostics.to_value())
                    .is_some()
            });
        if shared > 0 && starts {
            out.push(rest);
        }
    }
    Ok(out)
}

/// The other sessions the proxy recorded while this timeline was recorded
/// (created between its first and last node, by the same agent): what
/// the same program did besides, such as Claude Code's subagents, each
/// threaded as a conversation of its own.
fn companions(
    store: &mut Store,
    s: &convo_store::SessionRow,
    nodes: &[convo_store::TimelineNode],
) -> Result<Vec<SessionId>> {
    let (Some(first), Some(last)) = (nodes.first(), nodes.last()) else {
        return Ok(Vec::new());
    };
    let span = first.stored.node.created_at..=last.stored.node.created_at;
    Ok(store
        .sessions()?
        .into_iter()
        .filter(|o| o.id != s.id && o.agent == s.agent && span.contains(&o.created_at))
        .map(|o| o.id)
        .collect())
}

/// The calls of a timeline received as telemetry, rebuilt from its
/// messages (see [`crate::otel::rebuild`]), each call's
/// diagnostics whole (what its node leaves to the kept export body read
/// back: `otel::ingest::resolve_kept`).
fn rebuilt_calls(store: &mut Store, nodes: &[convo_store::TimelineNode]) -> Result<Vec<Call>> {
    let refs: Vec<_> = nodes
        .iter()
        .map(|n| (&n.stored, n.payload.as_slice()))
        .collect();
    let otel = crate::otel::ingest::resolve_kept(store, &refs)?;
    let mut at = Vec::new();
    let mut messages = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        if let Some(mut m) = crate::ledger::node_message(&n.stored.node, &n.payload) {
            if let Some(o) = &otel[i] {
                m.extra.insert("otel".into(), o.clone());
            }
            at.push(i);
            messages.push(m);
        }
    }
    Ok(rebuild::calls(&messages)
        .into_iter()
        .map(|r| {
            let node = &nodes[at[r.at]];
            Call {
                index: r.index,
                submission: node.stored.node.submission,
                turn: None,
                sequence: node.stored.node.sequence,
                raw: None,
                status: 200,
                headers: Map::new(),
                body: Vec::new(),
                chunks: None,
                strip_usage: false,
                before: at[r.at].checked_sub(1).map(|k| nodes[k].stored.hash),
                truncated: None,
                cut: None,
                rebuilt: Some(Box::new(r)),
            }
        })
        .collect())
}

/// A call that did not match.
#[derive(Debug)]
pub struct Miss {
    /// The closest recorded call not yet served (`None`: every recorded
    /// call was served).
    pub recorded: Option<Value>,
    /// Its place among the recorded calls.
    pub recorded_call: Option<usize>,
    /// Where a live timeline forks.
    pub before: Option<NodeHash>,
    /// JSON pointers where recorded and received differ.
    pub differences: Vec<String>,
    /// Whether every recorded call has been served.
    pub exhausted: bool,
    /// The recorded call it repeats, when it matches only calls already
    /// answered.
    pub repeat_of: Option<usize>,
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
    // A cut stream never sent what its filter still held.
    if call.cut.is_none()
        && let Some(rest) = filter.finish()
    {
        out.push((rest, chunks.last().map_or(0.0, |c| c.1)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::matching::key;
    #[test]
    fn multipart_uploads_match_part_by_part_whatever_their_boundary() {
        let body = |boundary: &str, audio: &[u8]| {
            let mut b = format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n\
                 --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\
                 Content-Type: audio/wav\r\n\r\n"
            )
            .into_bytes();
            b.extend_from_slice(audio);
            b.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
            b
        };
        let m = super::Matcher::default();
        let h = serde_json::Map::new();
        let one = m.canonical(
            "POST",
            "/v1/audio/transcriptions",
            &h,
            &body("a1b2", &[0, 159, 146, 150]),
        );
        let two = m.canonical(
            "POST",
            "/v1/audio/transcriptions",
            &h,
            &body("zz-99", &[0, 159, 146, 150]),
        );
        let other = m.canonical(
            "POST",
            "/v1/audio/transcriptions",
            &h,
            &body("a1b2", &[1, 159, 146, 150]),
        );
        assert_eq!(one, two);
        assert_ne!(one, other);
        assert_eq!(one["body"]["multipart"][0]["body"], "whisper-1");
        assert_eq!(one["body"]["multipart"][1]["body"]["bytes"], 4);
        // Not multipart: as before.
        let plain = m.canonical("POST", "/v1/x", &h, b"--x");
        assert_eq!(plain["body"], "--x");
    }

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
        let colon = ReplaySpec::parse("title: with colon").unwrap();
        assert_eq!(colon.session, "title: with colon");
        assert!(colon.branch.is_main());
        let apart = ReplaySpec::with_branch("a:b", "dev").unwrap();
        assert_eq!(
            (apart.session.as_str(), apart.branch.as_str()),
            ("a:b", "dev")
        );
        let _ = a;
        // Codex's per-run ids: its client_metadata and its input items' ids
        // (`*`: every element); the items' content still counts.
        let run = |id: &str, text: &str| {
            let body = json!({"model": "m", "client_metadata": {"session_id": id},
                "input": [{"id": id, "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}]}]});
            canonical("POST", "/v1/responses", &h, body.to_string().as_bytes())
        };
        assert_eq!(
            differences(&run("one", "hi"), &run("two", "hi")),
            Vec::<String>::new()
        );
        assert_eq!(
            differences(&run("one", "hi"), &run("two", "ho")),
            vec!["/body/input/0/content".to_owned()]
        );
    }

    #[test]
    fn requests_match_in_canonical_form_and_ignored_pointers_do_not_count() {
        let h = Map::new();
        let a = canonical(
            "POST",
            "/v1/chat/completions",
            &h,
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},
               {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1,\"b\":2}"}}]}]}"#,
        );
        let b = canonical(
            "POST",
            "/v1/chat/completions",
            &h,
            br#"{"messages":[{"role":"user","content":"hi"},
               {"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"b\": 2, \"a\": 1}"}}]}],"model":"m"}"#,
        );
        assert_eq!(key(&a), key(&b));
        let m = Matcher::new(&["/body/temperature".into()]).unwrap();
        let t1 = m.canonical("POST", "/v1/x", &h, br#"{"model":"m","temperature":0.1}"#);
        let t2 = m.canonical("POST", "/v1/x", &h, br#"{"model":"m","temperature":0.9}"#);
        assert_eq!(t1, t2);
        assert!(Matcher::new(&["body.temperature".into()]).is_err());
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
