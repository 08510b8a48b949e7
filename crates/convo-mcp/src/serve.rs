//! `convo mcp serve`: convo's history as an MCP server, so an agent can
//! search and read its own past runs.
//!
//! The server answers `initialize`, `ping`, `tools/list` and
//! `tools/call`; every other request gets JSON-RPC's `-32601`. The tools
//! ([`tools`]) read the store; `fork` and `promote` write it and are
//! listed only with [`ServeConfig::allow_writes`]. Each result is small
//! enough for a context window: listings are paged (`cursor` in,
//! `next_cursor` out), payloads cut at `max_chars` with `truncated` set.
//! A tool that fails answers a result with `isError` and the reason (as
//! the specification asks, so the model sees it), not a protocol error.
//!
//! [`Server::handle`] takes one message and gives the answer, so the
//! stdio loop ([`serve_stdio`]) and an HTTP endpoint share it.

use crate::McpError;
use crate::message::{Message, Shape};
use convo_core::{BranchName, HashPrefix};
use convo_store::{Store, StoreError, TimelineNode};
use serde_json::{Map, Value, json};
use std::io::{BufRead, Write};

/// The protocol revisions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What the server may do.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServeConfig {
    /// List and run `fork` and `promote`.
    pub allow_writes: bool,
}

/// The server over one store.
#[derive(Debug)]
pub struct Server {
    store: Store,
    cfg: ServeConfig,
}

const INSTRUCTIONS: &str = "convo records AI-agent conversations (model calls and tool calls) as \
timelines of nodes: invoke (input), request/response (calls to models and tools), complete \
(answer), fork and promote. Start with list_sessions or search, then read_turn to read one turn. \
Node references: a hash prefix, BRANCH (its head), BRANCH~N (N before the head), BRANCH@TURN \
(turn N, negative from the end: main@-1 is the last turn).";

fn schema(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}

/// The tools, as `tools/list` gives them.
pub fn tools(cfg: ServeConfig) -> Vec<Value> {
    let session =
        json!({"type": "string", "description": "Session id, unique id prefix, or exact title"});
    let cursor = json!({"type": "string", "description": "next_cursor from the previous page"});
    let mut t = vec![
        json!({"name": "list_sessions",
            "description": "List recorded sessions, newest first: id, title, agent, creation time and timelines. Use it to find a session to read; filter by a word of the title.",
            "inputSchema": schema(json!({"title_contains": {"type": "string", "description": "Only sessions whose title contains this (case-insensitive)"},
                "limit": {"type": "integer", "description": "At most this many (default 20, max 100)"}, "cursor": cursor}), &[]),
            "annotations": {"readOnlyHint": true}}),
        json!({"name": "search",
            "description": "Full-text search over every recorded message (prompts, answers, tool calls and results). Words must all match; \"quoted phrases\" match exactly. Returns the best hits with a snippet, their session, timeline and turn: read one with read_turn.",
            "inputSchema": schema(json!({"query": {"type": "string"}, "session": session,
                "limit": {"type": "integer", "description": "At most this many hits (default 10, max 50)"}}), &["query"]),
            "annotations": {"readOnlyHint": true}}),
        json!({"name": "read_turn",
            "description": "Read one turn of a session: its messages in order (kind, sender -> recipient, time, the text cut at max_chars, and latency, errors, model or MCP tool when recorded). ref defaults to main@-1, the last turn; main@1 is the first.",
            "inputSchema": schema(json!({"session": session,
                "ref": {"type": "string", "description": "A node in the turn: hash prefix, BRANCH, BRANCH~N or BRANCH@TURN (default main@-1)"},
                "max_chars": {"type": "integer", "description": "Characters of each message's text to show (default 1000)"},
                "cursor": cursor}), &["session"]),
            "annotations": {"readOnlyHint": true}}),
        json!({"name": "diff",
            "description": "Compare two timelines of a session (or two nodes): the turns they share, then what each has that the other has not. Paged: pass page 2, 3... while pages says there are more.",
            "inputSchema": schema(json!({"session": session,
                "a": {"type": "string", "description": "A timeline or node reference (main, retry, main@3)"},
                "b": {"type": "string", "description": "The other one"},
                "page": {"type": "integer", "description": "Page from 1 (default 1)"}}), &["session", "a", "b"]),
            "annotations": {"readOnlyHint": true}}),
        json!({"name": "verify",
            "description": "Recompute every hash of the store and check every timeline: whether the recorded history is intact, and the first problems found if not.",
            "inputSchema": schema(json!({}), &[]),
            "annotations": {"readOnlyHint": true}}),
    ];
    if cfg.allow_writes {
        t.push(json!({"name": "fork",
            "description": "Start a new timeline of a session from one of its nodes (to try another path from there). Writes the store.",
            "inputSchema": schema(json!({"session": session,
                "from": {"type": "string", "description": "The node to fork at (BRANCH@TURN, BRANCH~N, hash prefix)"},
                "branch": {"type": "string", "description": "The new timeline's name"}}), &["session", "from", "branch"]),
            "annotations": {"readOnlyHint": false, "destructiveHint": false}}));
        t.push(json!({"name": "promote",
            "description": "Make a timeline the session's main: the old main is kept, sealed as broken-DATE. Writes the store.",
            "inputSchema": schema(json!({"session": session,
                "branch": {"type": "string", "description": "The timeline to make main"}}), &["session", "branch"]),
            "annotations": {"readOnlyHint": false, "destructiveHint": true}}));
    }
    t
}

fn arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, StoreError> {
    args.get(name).and_then(Value::as_str).ok_or_else(|| {
        StoreError::Invalid(format!("argument `{name}` (a string) is required").into())
    })
}

fn number(args: &Value, name: &str, default: usize, max: usize) -> usize {
    args.get(name)
        .and_then(Value::as_u64)
        .map(|n| (n as usize).clamp(1, max))
        .unwrap_or(default)
}

fn offset(args: &Value) -> usize {
    args.get("cursor")
        .and_then(Value::as_str)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// `len` items from `from`, of `total`: the next page's cursor.
fn next_cursor(from: usize, len: usize, total: usize) -> Value {
    if from + len < total {
        json!((from + len).to_string())
    } else {
        Value::Null
    }
}

/// Text for a model: the payload as UTF-8, cut at `max` characters.
fn text_of(payload: &[u8], max: usize) -> (String, bool) {
    let s = String::from_utf8_lossy(payload);
    match s.char_indices().nth(max) {
        Some((i, _)) => (s[..i].to_owned(), true),
        None => (s.into_owned(), false),
    }
}

/// The diagnostics worth a model's attention.
fn facts(d: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for k in [
        "model",
        "latency_ms",
        "error",
        "status",
        "usage",
        "mcp",
        "partial",
    ] {
        if let Some(v) = d.get(k) {
            out.insert(k.into(), v.clone());
        }
    }
    if let Some(Value::Object(m)) = out.get_mut("mcp") {
        m.remove("command");
    }
    out
}

fn node_view(n: &TimelineNode, max: usize) -> Value {
    let node = &n.stored.node;
    let (text, truncated) = text_of(&n.payload, max);
    let mut v = json!({
        "node": n.stored.hash.to_hex()[..12].to_owned(),
        "kind": node.kind.to_string(),
        "from": node.from, "to": node.to,
        "at": convo_api::time(node.created_at),
        "text": text,
    });
    if let Some(q) = node.sequence {
        v["sequence"] = json!(q);
    }
    if truncated {
        v["truncated"] = json!({"total_bytes": n.payload.len()});
    }
    let f = facts(&node.diagnostics.to_value());
    if !f.is_empty() {
        v["diagnostics"] = Value::Object(f);
    }
    v
}

impl Server {
    /// A server over `store`.
    pub fn new(store: Store, cfg: ServeConfig) -> Server {
        Server { store, cfg }
    }

    /// The answer to one message (a whole line, newline included), or
    /// nothing (a notification, a response).
    pub fn handle(&mut self, line: &[u8]) -> Option<Vec<u8>> {
        let msg = Message::read(line);
        let (id, method) = match &msg.shape {
            Shape::Request { method, .. } => (msg.json["id"].clone(), method.clone()),
            Shape::Invalid(why) => {
                return Some(reply(json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("parse error: {why}")}})));
            }
            _ => return None,
        };
        let params = msg.json.get("params").cloned().unwrap_or(json!({}));
        let result = match method.as_str() {
            "initialize" => Ok(self.initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({"tools": tools(self.cfg)})),
            "tools/call" => Ok(self.call(&params)),
            other => Err(json!({"code": -32601, "message": format!("method not found: {other}")})),
        };
        Some(reply(match result {
            Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e}),
        }))
    }

    fn initialize(&self, params: &Value) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = asked
            .filter(|v| PROTOCOL_VERSIONS.contains(v))
            .unwrap_or(PROTOCOL_VERSIONS[0]);
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "convo", "version": env!("CARGO_PKG_VERSION")},
            "instructions": INSTRUCTIONS,
        })
    }

    fn call(&mut self, params: &Value) -> Value {
        let name = params.get("name").and_then(Value::as_str).unwrap_or("");
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let out = match name {
            "list_sessions" => self.list_sessions(&args),
            "search" => self.search(&args),
            "read_turn" => self.read_turn(&args),
            "diff" => self.diff(&args),
            "verify" => self.verify(),
            "fork" if self.cfg.allow_writes => self.fork(&args),
            "promote" if self.cfg.allow_writes => self.promote(&args),
            "fork" | "promote" => Err(StoreError::Invalid(
                format!("`{name}` writes the store: start the server with --allow-writes").into(),
            )),
            other => Err(StoreError::Invalid(format!("no tool `{other}`").into())),
        };
        match out {
            Ok(v) => json!({
                "content": [{"type": "text", "text": v.to_string()}],
                "structuredContent": v,
                "isError": false,
            }),
            Err(e) => json!({
                "content": [{"type": "text", "text": format!("{} ({})", e, e.kind().as_str())}],
                "isError": true,
            }),
        }
    }

    fn list_sessions(&mut self, args: &Value) -> Result<Value, StoreError> {
        let want = args
            .get("title_contains")
            .and_then(Value::as_str)
            .map(str::to_lowercase);
        let mut rows = self.store.sessions()?;
        rows.reverse();
        rows.retain(|r| match &want {
            Some(w) => r
                .title
                .as_deref()
                .is_some_and(|t| t.to_lowercase().contains(w)),
            None => true,
        });
        let from = offset(args);
        let limit = number(args, "limit", 20, 100);
        let mut out = Vec::new();
        for r in rows.iter().skip(from).take(limit) {
            let branches: Vec<String> = self
                .store
                .branches(&r.id)?
                .into_iter()
                .map(|b| b.name.to_string())
                .collect();
            out.push(
                json!({"id": r.id.to_string(), "title": r.title, "agent": r.agent,
                "created_at": convo_api::time(r.created_at), "timelines": branches}),
            );
        }
        Ok(json!({"sessions": out, "next_cursor": next_cursor(from, out.len(), rows.len())}))
    }

    fn search(&mut self, args: &Value) -> Result<Value, StoreError> {
        let query = convo_store::search::Query::parse(arg(args, "query")?)?;
        let session = match args.get("session").and_then(Value::as_str) {
            Some(s) => Some(self.store.find_session(s)?.id),
            None => None,
        };
        let req = convo_store::search::SearchRequest {
            query,
            session,
            branch: None,
            agent: None,
            filter: convo_store::filter::NodeFilter::default(),
            limit: number(args, "limit", 10, 50),
            offset: 0,
        };
        let found = self.store.search(&req)?;
        let hits: Vec<Value> = found
            .hits
            .iter()
            .map(|h| {
                let branch = h.branches.first().map(|b| b.to_string());
                let turn_ref = match (&branch, h.turn) {
                    (Some(b), Some(t)) => Some(format!("{b}@{t}")),
                    _ => None,
                };
                json!({"session": h.node.node.session.to_string(),
                    "node": h.node.hash.to_hex()[..12].to_owned(),
                    "kind": h.node.node.kind.to_string(),
                    "from": h.node.node.from, "to": h.node.node.to,
                    "ref": turn_ref, "snippet": h.snippet.text})
            })
            .collect();
        Ok(json!({"hits": hits}))
    }

    fn read_turn(&mut self, args: &Value) -> Result<Value, StoreError> {
        let s = self.store.find_session(arg(args, "session")?)?;
        let at = args.get("ref").and_then(Value::as_str).unwrap_or("main@-1");
        let turn = self.store.turn(&s.id, at)?;
        let max = number(args, "max_chars", 1000, 100_000);
        let from = offset(args);
        let page: Vec<Value> = turn
            .nodes
            .iter()
            .skip(from)
            .take(20)
            .map(|n| node_view(n, max))
            .collect();
        Ok(
            json!({"session": s.id.to_string(), "title": s.title, "turn": turn.number,
            "complete": turn.complete, "messages": page.len(),
            "nodes": page, "next_cursor": next_cursor(from, page.len(), turn.nodes.len())}),
        )
    }

    fn diff(&mut self, args: &Value) -> Result<Value, StoreError> {
        let s = self.store.find_session(arg(args, "session")?)?;
        let d = convo_store::diff::diff(&mut self.store, &s.id, arg(args, "a")?, arg(args, "b")?)?;
        let page = args.get("page").and_then(Value::as_u64).unwrap_or(1);
        let view = convo_runtime::wire::diff(&mut self.store, &d, Some(page))?;
        serde_json::to_value(view).map_err(|e| StoreError::backend(e.to_string()))
    }

    fn verify(&mut self) -> Result<Value, StoreError> {
        let r = self.store.verify()?;
        let problems: Vec<String> = r.problems.iter().take(20).map(|p| p.to_string()).collect();
        Ok(
            json!({"ok": r.is_clean(), "nodes": r.nodes, "branches": r.branches,
            "problem_count": r.problems.len(), "problems": problems}),
        )
    }

    fn fork(&mut self, args: &Value) -> Result<Value, StoreError> {
        let s = self.store.find_session(arg(args, "session")?)?;
        let from = self.store.resolve_ref(&s.id, arg(args, "from")?)?;
        let name = BranchName::new(arg(args, "branch")?).map_err(StoreError::invalid)?;
        let at = HashPrefix::parse(&from.hash.to_hex()).map_err(StoreError::invalid)?;
        let now = crate::record::now_ms();
        let node = self.store.transaction(|l| l.fork(&s.id, &at, &name, now))?;
        Ok(
            json!({"session": s.id.to_string(), "branch": name.to_string(),
            "fork_node": node.hash.to_hex()[..12].to_owned()}),
        )
    }

    fn promote(&mut self, args: &Value) -> Result<Value, StoreError> {
        let s = self.store.find_session(arg(args, "session")?)?;
        let name = BranchName::new(arg(args, "branch")?).map_err(StoreError::invalid)?;
        let now = crate::record::now_ms();
        let p = self.store.transaction(|l| l.promote(&s.id, &name, now))?;
        Ok(
            json!({"session": s.id.to_string(), "promoted": name.to_string(),
            "old_main_sealed_as": p.sealed_as.to_string()}),
        )
    }
}

fn reply(v: Value) -> Vec<u8> {
    let mut out = serde_json::to_vec(&v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Serves MCP over stdio: one message per line in, one answer per
/// request out, until the input ends.
pub fn serve_stdio(
    server: &mut Server,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<(), McpError> {
    for line in input.split(b'\n') {
        let line = line?;
        if crate::message::trim_eol(&line).is_empty() {
            continue;
        }
        if let Some(answer) = server.handle(&line) {
            output.write_all(&answer)?;
            output.flush()?;
        }
    }
    Ok(())
}
