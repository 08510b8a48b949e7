//! Answering an MCP client from a recording, without the server.
//!
//! The recorded requests of one server (client → server, paired with
//! their responses) are looked up, not walked: a request is answered by
//! the recorded request that matches it, whatever the order. "Matches"
//! is the one matcher of [`convo_llm::replay::Matcher`]: the canonical
//! form of `{method: "MCP", path: <JSON-RPC method>, body: <the message
//! without its id>}`, less [`VOLATILE`] and the caller's `--match-ignore`
//! pointers, looked up by its [`Index`]: the same canonical form, else a
//! request of the same method whose every difference is volatile (a
//! UUID, a timestamp, a temporary path). Several matches answer in
//! recorded order; once all were served, the last answers again (clients
//! list tools and ping more than once).
//!
//! A hit is the recorded response with the received id, after the
//! progress notifications the server had sent for it (with the received
//! progress token; [`McpReplay::notes`], sent by the stdio replay) (the recorded
//! bytes themselves when the id is the one recorded). A miss is a
//! JSON-RPC error (code [`MISS_CODE`]) whose message names the closest
//! recorded request and each JSON pointer (into the message: `/params/…`)
//! where they differ, with the recorded and received values; `data`
//! holds the same as JSON. Notifications and the client's answers to
//! server requests need no answer and get none.

use crate::McpError;
use crate::message::{Message, Shape};
use convo_core::{BranchName, Kind, SubmissionId};
use convo_llm::replay::{Found, Index, Matcher, Rules, differences};
use convo_store::{Store, StoreError, TimelineNode};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Fields of an MCP request that change between identical runs, as
/// pointers into the canonical request: SDKs make the progress token
/// from their own request counter.
pub const VOLATILE: &[&str] = &["/body/params/_meta/progressToken"];

/// The JSON-RPC error code of a request the recording does not answer
/// (in the range JSON-RPC leaves to servers).
pub const MISS_CODE: i64 = -32042;

/// One recorded request and its answer.
#[derive(Clone, Debug)]
struct Call {
    canonical: Value,
    method: String,
    response: Value,
    /// The response's bytes as recorded.
    raw: Vec<u8>,
    /// The progress notifications the server sent for it, in order.
    progress: Vec<Value>,
}

/// The recording of one server, ready to answer.
#[derive(Debug)]
pub struct McpReplay {
    matcher: Matcher,
    calls: Vec<Call>,
    /// The recorded requests, looked up by the one matcher (exact, then
    /// tolerating volatile differences).
    index: Index,
    served: Vec<bool>,
    /// The server whose calls these are.
    pub server: String,
    /// Requests answered from the recording.
    pub matched: usize,
    /// Requests the recording did not answer.
    pub missed: usize,
    /// What the last hit's recorded call was sent before its answer: its
    /// progress notifications (lines), with the received progress token;
    /// empty when the request asked for none.
    pub notes: Vec<Vec<u8>>,
}

/// What to do with a line the client sent.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A recorded answer (a whole line, newline included).
    Hit(Vec<u8>),
    /// No recorded request matches: the error line to answer with.
    Miss(Vec<u8>),
    /// Nothing to answer (a notification, a response).
    Nothing,
}

impl McpReplay {
    /// Reads the MCP calls recorded on `branch` of `session`: of the
    /// server `server` when given, else of the server started by
    /// `command` (as recorded), else of the only server recorded.
    pub fn load(
        store: &mut Store,
        session: &str,
        branch: &BranchName,
        server: Option<&str>,
        command: &[String],
        ignore: &[String],
    ) -> Result<McpReplay, McpError> {
        let s = store.find_session(session)?;
        let nodes = store.timeline(&s.id, branch)?;
        McpReplay::from_nodes(&nodes, server, command, ignore)
    }

    /// [`McpReplay::load`] from a timeline already read.
    pub fn from_nodes(
        nodes: &[TimelineNode],
        server: Option<&str>,
        command: &[String],
        ignore: &[String],
    ) -> Result<McpReplay, McpError> {
        let mut pointers: Vec<String> = VOLATILE.iter().map(|p| (*p).to_owned()).collect();
        pointers.extend(ignore.iter().cloned());
        let matcher = Matcher::new(&pointers).map_err(McpError::Invalid)?;
        let server = pick_server(nodes, server, command)?;
        let mut responses: HashMap<(Option<SubmissionId>, Option<u32>), usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            if n.stored.node.kind == Kind::Response {
                responses
                    .entry((n.stored.node.submission, n.stored.node.sequence))
                    .or_insert(i);
            }
        }
        let mut calls = Vec::new();
        for (i, n) in nodes.iter().enumerate() {
            let node = &n.stored.node;
            let d = node.diagnostics.to_value();
            let Some(mcp) = d.get("mcp") else { continue };
            if node.kind != Kind::Request
                || mcp.get("server").and_then(Value::as_str) != Some(server.as_str())
                || node.to != format!("mcp:{server}")
            {
                continue;
            }
            let Some(&r) = responses.get(&(node.submission, node.sequence)) else {
                continue;
            };
            let resp = &nodes[r];
            let msg = Message::read(&n.payload);
            let Shape::Request { method, .. } = &msg.shape else {
                continue;
            };
            let Ok(response) = serde_json::from_slice::<Value>(&resp.payload) else {
                continue;
            };
            calls.push(Call {
                canonical: canonical(&matcher, &msg.json, method),
                method: method.clone(),
                response,
                raw: resp.payload.clone(),
                progress: progress_between(&nodes[i..r], &msg.json, &server),
            });
        }
        if calls.is_empty() {
            return Err(McpError::Invalid(format!(
                "the timeline has no answered request to MCP server `{server}` to replay"
            )));
        }
        let index = Index::new(
            calls.iter().map(|c| c.canonical.clone()).collect(),
            Rules::default(),
            matcher.strict,
        );
        Ok(McpReplay {
            matcher,
            served: vec![false; calls.len()],
            calls,
            index,
            server,
            matched: 0,
            missed: 0,
            notes: Vec::new(),
        })
    }

    /// How many recorded requests there are.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The answer to one line from the client.
    pub fn answer(&mut self, msg: &Message) -> Answer {
        let Shape::Request { method, .. } = &msg.shape else {
            return Answer::Nothing;
        };
        let id = msg.json.get("id").cloned().unwrap_or(Value::Null);
        let canon = canonical(&self.matcher, &msg.json, method);
        let found = match self.index.find(&canon, &self.served) {
            Found::Exact(i) | Found::Repeat(i) | Found::Tolerated { call: i, .. } => Some(i),
            Found::Miss { .. } => None,
        };
        match found {
            Some(i) => {
                self.served[i] = true;
                self.matched += 1;
                let call = &self.calls[i];
                let token = msg.json.pointer("/params/_meta/progressToken");
                self.notes = match token {
                    Some(t) => call
                        .progress
                        .iter()
                        .map(|p| {
                            let mut p = p.clone();
                            if let Some(params) = p.get_mut("params").and_then(Value::as_object_mut)
                            {
                                params.insert("progressToken".into(), t.clone());
                            }
                            line(&p)
                        })
                        .collect(),
                    None => Vec::new(),
                };
                if call.response.get("id") == Some(&id) {
                    // The same id as recorded: the recorded bytes.
                    let mut out = call.raw.clone();
                    out.push(b'\n');
                    return Answer::Hit(out);
                }
                let mut r = call.response.clone();
                if let Some(o) = r.as_object_mut() {
                    o.insert("id".into(), id);
                }
                Answer::Hit(line(&r))
            }
            None => {
                self.missed += 1;
                self.notes.clear();
                Answer::Miss(line(&self.miss(id, method, &canon)))
            }
        }
    }

    /// The error answering a request the recording does not have.
    fn miss(&self, id: Value, method: &str, canon: &Value) -> Value {
        let closest = self
            .calls
            .iter()
            .map(|c| (c, differences(&c.canonical, canon)))
            .min_by_key(|(c, d)| (c.method != method, d.len()));
        let (message, data) = match closest {
            Some((c, diffs)) => {
                let named: Vec<Value> = diffs
                    .iter()
                    .map(|p| {
                        json!({
                            "pointer": message_pointer(p),
                            "recorded": c.canonical.pointer(p).cloned().unwrap_or(Value::Null),
                            "received": canon.pointer(p).cloned().unwrap_or(Value::Null),
                        })
                    })
                    .collect();
                let text: Vec<String> = named
                    .iter()
                    .map(|d| {
                        format!(
                            "{} recorded {} received {}",
                            d["pointer"].as_str().unwrap_or(""),
                            short(&d["recorded"]),
                            short(&d["received"])
                        )
                    })
                    .collect();
                (
                    format!(
                        "convo replay: no recorded `{method}` request of MCP server `{}` matches; the closest (`{}`) differs at {}",
                        self.server,
                        c.method,
                        text.join("; ")
                    ),
                    json!({"closest_method": c.method, "differences": named}),
                )
            }
            None => (
                format!(
                    "convo replay: nothing recorded for MCP server `{}`",
                    self.server
                ),
                json!({}),
            ),
        };
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": MISS_CODE, "message": message, "data": data}})
    }

    /// A one-line summary: what was answered and missed.
    pub fn summary(&self) -> String {
        format!(
            "replayed MCP server `{}`: {} answered from {} recorded requests, {} missed",
            self.server,
            self.matched,
            self.calls.len(),
            self.missed
        )
    }
}

/// The progress notifications `server` sent for `request` among `between`
/// (the nodes from the request to its response).
fn progress_between(between: &[TimelineNode], request: &Value, server: &str) -> Vec<Value> {
    let Some(token) = request.pointer("/params/_meta/progressToken") else {
        return Vec::new();
    };
    let from = format!("mcp:{server}");
    between
        .iter()
        .filter(|n| n.stored.node.from == from)
        .filter_map(|n| serde_json::from_slice::<Value>(&n.payload).ok())
        .filter(|v| {
            v.get("method").and_then(Value::as_str) == Some("notifications/progress")
                && v.pointer("/params/progressToken") == Some(token)
        })
        .collect()
}

/// The canonical form of a request (its id and `jsonrpc` left out, an
/// emptied `_meta` too).
fn canonical(matcher: &Matcher, msg: &Value, method: &str) -> Value {
    let mut body = msg.clone();
    if let Some(o) = body.as_object_mut() {
        o.remove("id");
        o.remove("jsonrpc");
    }
    let bytes = serde_json::to_vec(&body).unwrap_or_default();
    let mut canon = matcher.canonical("MCP", method, &Map::new(), &bytes);
    // `_meta` left empty by the volatile fields counts as no `_meta`.
    if let Some(params) = canon
        .pointer_mut("/body/params")
        .and_then(Value::as_object_mut)
        && params
            .get("_meta")
            .is_some_and(|m| m.as_object().is_some_and(Map::is_empty))
    {
        params.remove("_meta");
    }
    canon
}

/// A pointer into the canonical request as a pointer into the message.
fn message_pointer(p: &str) -> String {
    if let Some(rest) = p.strip_prefix("/body") {
        return if rest.is_empty() {
            "/".into()
        } else {
            rest.into()
        };
    }
    if p == "/path" {
        return "/method".into();
    }
    p.to_owned()
}

/// A value for a one-line message: at most 200 characters of its JSON.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

fn line(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Which recorded server to replay (see [`McpReplay::load`]).
fn pick_server(
    nodes: &[TimelineNode],
    server: Option<&str>,
    command: &[String],
) -> Result<String, McpError> {
    if let Some(s) = server {
        return Ok(s.to_owned());
    }
    let public = json!(crate::record::public_command(command));
    let mut names: Vec<String> = Vec::new();
    for n in nodes {
        let d = n.stored.node.diagnostics.to_value();
        let Some(mcp) = d.get("mcp") else { continue };
        let Some(name) = mcp.get("server").and_then(Value::as_str) else {
            continue;
        };
        if mcp.get("command") == Some(&public) {
            return Ok(name.to_owned());
        }
        if !names.iter().any(|x| x == name) {
            names.push(name.to_owned());
        }
    }
    match names.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(McpError::Store(StoreError::Invalid(
            "the timeline has no MCP message recorded (record one with `convo mcp wrap`)".into(),
        ))),
        many => Err(McpError::Invalid(format!(
            "the timeline has several MCP servers ({}): name one with --server",
            many.join(", ")
        ))),
    }
}
