//! One turn: invoke the agent, serve its calls, record everything.

use crate::agent::{Agent, AgentSpec, ChildEnv, Dialect};
use crate::http::{Answer, CallError};
use crate::replay::{Divergence, Expected};
use crate::services::{Services, Turn, token};
use crate::{HarnessError, Result, now_ms};
use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use convo_core::{BranchName, Diagnostics, Kind, SessionId};
use convo_runtime::StorePool;
use convo_store::{Draft, StoredNode, TimelineNode};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the harness runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The agent's name on the nodes (`user → NAME`, `NAME → kv`…).
    pub agent_name: String,
    /// Where inference calls go (OpenAI-compatible; plain `http://`).
    pub upstream: Option<String>,
    /// Where Anthropic-style calls go (default: `upstream`).
    pub anthropic_upstream: Option<String>,
    /// How long one turn may take before it ends as a timeout.
    pub turn_timeout: Duration,
    /// How long a child agent may take to listen on its port.
    pub start_timeout: Duration,
    /// The agent's dialect (convo's contract or VlinderCLI's).
    pub dialect: Dialect,
    /// The services server's port on 127.0.0.1 (0: any free one).
    pub services_port: u16,
    /// Where the timelines' turn locks live (the CLI: `$CONVO_HOME/locks`):
    /// a turn holds its timeline's [`crate::TurnLock`] from invoke to
    /// complete, so no other writer lands inside it. `None`: no lock.
    pub lock_dir: Option<std::path::PathBuf>,
    /// Who runs the turns, written into the turn lock (`convo run`).
    pub holder: String,
    /// More environment for a child agent (the harness's own variables
    /// win over these).
    pub env: Vec<(String, String)>,
    /// A child agent's working directory (default: convo's).
    pub dir: Option<std::path::PathBuf>,
}

impl Options {
    /// Defaults: no upstream, 300 s per turn, 30 s to start.
    pub fn new(agent_name: impl Into<String>) -> Self {
        Options {
            agent_name: agent_name.into(),
            upstream: None,
            anthropic_upstream: None,
            turn_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(30),
            dialect: Dialect::Convo,
            services_port: 0,
            lock_dir: None,
            holder: "convo".to_owned(),
            env: Vec::new(),
            dir: None,
        }
    }
}

/// Why an agent's turn failed. Recorded in the `complete`'s diagnostics as
/// `{"failure": kind, "error": message}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// No answer within the turn timeout.
    Timeout(Duration),
    /// The child process died during the turn.
    Crash(String),
    /// No HTTP answer (connection refused or cut).
    Unreachable(String),
    /// A non-2xx status.
    Status(u16),
    /// A 2xx answer that is not `{"output": TEXT}` nor UTF-8 text.
    Garbage(String),
    /// The user interrupted the turn (Ctrl-C).
    Interrupted,
}

impl Failure {
    /// The `failure` value in diagnostics.
    pub fn kind(&self) -> &'static str {
        match self {
            Failure::Timeout(_) => "timeout",
            Failure::Crash(_) => "crash",
            Failure::Unreachable(_) => "unreachable",
            Failure::Status(_) => "status",
            Failure::Garbage(_) => "garbage",
            Failure::Interrupted => "interrupted",
        }
    }

    /// What happened, for a person.
    pub fn message(&self) -> String {
        match self {
            Failure::Timeout(d) => format!("the agent did not answer within {} s", d.as_secs_f64()),
            Failure::Crash(s) => format!("the agent process exited during the turn ({s})"),
            Failure::Unreachable(e) => format!("no answer from the agent: {e}"),
            Failure::Status(s) => format!("the agent answered HTTP {s}"),
            Failure::Garbage(why) => format!("the agent's answer is unusable: {why}"),
            Failure::Interrupted => "interrupted by the user".to_owned(),
        }
    }
}

/// What one turn did.
#[derive(Clone, Debug)]
pub struct TurnReport {
    /// The `invoke` node.
    pub invoke: StoredNode,
    /// The `complete` node.
    pub complete: StoredNode,
    /// The agent's output (on failure: whatever body it sent, maybe empty).
    pub output: Vec<u8>,
    /// Why the turn failed, when it did.
    pub failure: Option<Failure>,
    /// Every node of the turn, invoke to complete, with payloads.
    pub nodes: Vec<TimelineNode>,
    /// In a replay: differences the service calls found.
    pub divergences: Vec<Divergence>,
    /// In a replay: inference calls (by sequence) matched tolerating
    /// volatile differences.
    pub tolerated: Vec<(u32, Vec<convo_llm::replay::Tolerated>)>,
}

impl TurnReport {
    /// The output as text (lossy for bytes that are not UTF-8).
    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output).into_owned()
    }
}

/// A started agent with its services server.
#[derive(Debug)]
pub struct Harness {
    pub(crate) pool: StorePool,
    services: Services,
    agent: Agent,
    agent_token: String,
    pub(crate) opts: Options,
}

impl Harness {
    /// Starts the services server and the agent (a child process is
    /// started and waited for; a URL is used as given).
    pub async fn start(pool: StorePool, spec: &AgentSpec, opts: Options) -> Result<Harness> {
        let services = Services::start(
            pool.clone(),
            opts.upstream.as_deref(),
            opts.anthropic_upstream.as_deref(),
            opts.services_port,
        )
        .await?;
        let agent_token = token();
        services.register_agent(&agent_token);
        let u = services.urls("a", &agent_token);
        let mut vars = vec![
            ("OPENAI_BASE_URL".to_owned(), u.openai.clone()),
            ("OPENAI_API_BASE".to_owned(), u.openai.clone()),
            ("ANTHROPIC_BASE_URL".to_owned(), u.anthropic.clone()),
            // Clients that append `/v1/…` (or Ollama's `/api/…`) themselves.
            ("OPENAI_HOST".to_owned(), format!("{}/openai", u.root)),
            ("OLLAMA_HOST".to_owned(), format!("{}/openai", u.root)),
            ("CONVO_KV_URL".to_owned(), u.kv.clone()),
        ];
        if opts.dialect == Dialect::Vlinder {
            // VlinderCLI agents call `http://*.vlinder.local:3544/…`: as a
            // plain-http proxy, the services server answers those hosts
            // (and only those) without any DNS; loopback stays direct.
            let root = services.root();
            let mut no_proxy = "127.0.0.1,localhost,::1".to_owned();
            if let Some(v) = std::env::var("NO_PROXY")
                .ok()
                .or_else(|| std::env::var("no_proxy").ok())
                .filter(|v| !v.is_empty())
            {
                no_proxy = format!("{v},{no_proxy}");
            }
            for k in ["HTTP_PROXY", "http_proxy"] {
                vars.push((k.to_owned(), root.clone()));
            }
            for k in ["NO_PROXY", "no_proxy"] {
                vars.push((k.to_owned(), no_proxy.clone()));
            }
        }
        // SDKs refuse to start without a key; the upstream gets whatever
        // the agent sends, so a placeholder is only set when none is.
        if std::env::var_os("OPENAI_API_KEY").is_none() {
            vars.push(("OPENAI_API_KEY".to_owned(), "convo-no-key".to_owned()));
        }
        let mut all = opts.env.clone();
        all.extend(vars);
        let env = ChildEnv {
            vars: all,
            dir: opts.dir.clone(),
        };
        let agent = Agent::start(spec, env, opts.start_timeout, opts.dialect).await?;
        Ok(Harness {
            pool,
            services,
            agent,
            agent_token,
            opts,
        })
    }

    /// The store pool the harness records into.
    pub fn pool(&self) -> &StorePool {
        &self.pool
    }

    /// Runs one live turn on `branch`: `input` to the agent, its calls
    /// served and recorded, its answer recorded as the `complete`. The
    /// turn ends early (as [`Failure::Interrupted`]) when `cancel` resolves.
    /// An agent's failure is a report with `failure` set, not an error.
    pub async fn turn(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        input: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<TurnReport> {
        self.turn_streaming(session, branch, input, cancel, &mut |_| {})
            .await
    }

    /// Like [`Harness::turn`], handing the answer's text to `on_text` as it
    /// arrives when the agent streams it (a `text/plain` body sent in
    /// pieces, or `text/event-stream` events; see docs/AGENTS.md).
    pub async fn turn_streaming(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        input: &str,
        cancel: impl Future<Output = ()>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<TurnReport> {
        // The turn number matters only to a replay's report; counting the
        // timeline's invokes here would cost a pass over it on every turn.
        self.run_turn(session, branch, input.as_bytes(), None, 0, cancel, on_text)
            .await
    }

    /// How many turns (invokes) `branch` has.
    pub async fn turn_count(&self, session: &SessionId, branch: &BranchName) -> Result<u64> {
        let (s, b) = (*session, branch.clone());
        Ok(self
            .pool
            .run(move |st| st.timeline_page(&s, &b, 0, 0))
            .await?
            .turns)
    }

    /// One turn, in its phases: the timeline's turn lock, the invoke (and
    /// the open-turn row), the agent's call with its services open, the
    /// complete, the report.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn run_turn(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        input: &[u8],
        expected: Option<Expected>,
        number: u64,
        cancel: impl Future<Output = ()>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<TurnReport> {
        if self.agent.is_child() && self.agent.exited(Duration::ZERO).await.is_some() {
            self.agent.restart().await?;
        }
        let mut turn_lock = self.take_turn_lock(session, branch).await?;
        let open = self.open_turn_row(session, branch);
        let invoke = self
            .record_invoke(session, branch, input, turn_lock.is_some().then_some(&open))
            .await?;
        if let Some(l) = turn_lock.as_mut() {
            l.opened(&open.of(&invoke));
        }
        let submission = invoke
            .node
            .submission
            .map(|x| x.to_hex())
            .unwrap_or_default();
        let turn_token = token();
        let turn = Arc::new(Turn::new(
            *session,
            branch.clone(),
            self.opts.agent_name.clone(),
            submission.clone(),
            number,
            expected,
        ));
        self.services
            .open_turn(&turn_token, &self.agent_token, turn.clone());
        let body = self.agent_body(session, branch, input, &submission, &turn_token);
        let called = self.call_agent(body, cancel, on_text).await;
        self.services
            .close_turn(&turn_token, &self.agent_token, &turn)
            .await;
        let complete = self
            .record_complete(session, branch, &called, turn_lock.is_some())
            .await?;
        if let Some(mut l) = turn_lock {
            l.clear();
        }
        let mut nodes = vec![TimelineNode {
            stored: invoke.clone(),
            payload: input.to_vec(),
        }];
        nodes.extend(turn.nodes.lock().map(|v| v.clone()).unwrap_or_default());
        nodes.push(TimelineNode {
            stored: complete.clone(),
            payload: called.output.clone(),
        });
        nodes.sort_by_key(|n| n.stored.seq);
        let divergences = turn
            .divergences
            .lock()
            .map(|v| v.clone())
            .unwrap_or_default();
        let tolerated = turn.tolerated.lock().map(|v| v.clone()).unwrap_or_default();
        Ok(TurnReport {
            invoke,
            complete,
            output: called.output,
            failure: called.failure,
            nodes,
            divergences,
            tolerated,
        })
    }

    /// The timeline's turn lock (waiting for another writer's write),
    /// closing a turn a killed harness left open on it; `None` without a
    /// lock folder.
    async fn take_turn_lock(
        &self,
        session: &SessionId,
        branch: &BranchName,
    ) -> Result<Option<crate::TurnLock>> {
        let Some(dir) = self.opts.lock_dir.clone() else {
            return Ok(None);
        };
        let held = crate::TurnLock::path(&dir, session, branch);
        let (s, b) = (*session, branch.clone());
        let (mut lock, left) =
            tokio::task::spawn_blocking(move || crate::TurnLock::acquire(&dir, &s, &b, true))
                .await
                .map_err(|e| HarnessError::io("the turn lock", std::io::Error::other(e)))??;
        let (s, b) = (*session, branch.clone());
        let t = left.clone();
        self.pool
            .run(move |st| {
                crate::settle_interrupted(st, &s, &b, t.as_ref(), &held).map_err(|e| match e {
                    HarnessError::Store(e) => e,
                    HarnessError::TurnOpen {
                        session,
                        branch,
                        turn,
                        holder,
                    } => convo_store::StoreError::TurnOpen {
                        session,
                        branch,
                        turn,
                        holder,
                    },
                    other => convo_store::StoreError::backend_from(other),
                })
            })
            .await?;
        if left.is_some() {
            lock.clear();
        }
        Ok(Some(lock))
    }

    /// What the open-turn row of this timeline says, once its invoke is
    /// known: who holds it, where, and the lock file that tells a killed
    /// holder (its lock free) from a live one.
    fn open_turn_row(&self, session: &SessionId, branch: &BranchName) -> OpenRow {
        OpenRow {
            holder: format!("{}, pid {}", self.opts.holder, std::process::id()),
            host: convo_runtime::turns::this_host(),
            lock: self
                .opts
                .lock_dir
                .as_deref()
                .map(|d| crate::TurnLock::path(d, session, branch))
                .map(|p| std::path::absolute(&p).unwrap_or(p))
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    /// Records the turn's invoke and, with `open` (the turn lock held), the
    /// open-turn row every other writer checks, in one transaction.
    async fn record_invoke(
        &self,
        session: &SessionId,
        branch: &BranchName,
        input: &[u8],
        open: Option<&OpenRow>,
    ) -> Result<StoredNode> {
        let (s, b) = (*session, branch.clone());
        let agent_name = self.opts.agent_name.clone();
        let payload = input.to_vec();
        let open = open.cloned();
        Ok(self
            .pool
            .run(move |st| {
                st.transaction(|l| {
                    let inv = l.append(
                        &s,
                        &b,
                        &Draft {
                            kind: Kind::Invoke,
                            from: "user".into(),
                            to: agent_name.clone(),
                            payload: payload.clone(),
                            diagnostics: Diagnostics::empty(),
                            state: None,
                            sequence: None,
                            created_at: now_ms(),
                        },
                    )?;
                    if let Some(row) = &open {
                        l.set_open_turn(&s, &b, Some(&row.of(&inv)))?;
                    }
                    Ok(inv)
                })
            })
            .await?)
    }

    /// The request body the agent receives: convo's contract (the input,
    /// where it is, and the turn's service URLs) or, for VlinderCLI's
    /// dialect, the input alone.
    fn agent_body(
        &self,
        session: &SessionId,
        branch: &BranchName,
        input: &[u8],
        submission: &str,
        turn_token: &str,
    ) -> Bytes {
        match self.agent.dialect() {
            Dialect::Vlinder => Bytes::copy_from_slice(input),
            Dialect::Convo => {
                let urls = self.services.urls("t", turn_token);
                let body = json!({
                    "input": String::from_utf8_lossy(input),
                    "session": session.to_string(),
                    "branch": branch.as_str(),
                    "submission": submission,
                    "services": {
                        "openai_base_url": urls.openai,
                        "anthropic_base_url": urls.anthropic,
                        "kv_url": urls.kv,
                    },
                });
                Bytes::from(body.to_string())
            }
        }
    }

    /// Calls the agent with `body`, showing its streamed text to `on_text`,
    /// until it answers, the turn times out, or `cancel` resolves; a child
    /// that crashed or hung is noticed (and a hung one replaced).
    async fn call_agent(
        &mut self,
        body: Bytes,
        cancel: impl Future<Output = ()>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Called {
        let started = Instant::now();
        let timeout = self.opts.turn_timeout;
        let mut deltas = Deltas::default();
        // What was shown so far: kept (marked partial) when the turn is cut.
        let mut shown = String::new();
        let mut sink = |status: u16, h: &HeaderMap, chunk: &[u8]| {
            let t = deltas.feed(status, h, chunk);
            if !t.is_empty() {
                shown.push_str(&t);
                on_text(&t);
            }
        };
        let answer: std::result::Result<Answer, Failure> = {
            let call = tokio::time::timeout(timeout, self.agent.invoke(body, &mut sink));
            tokio::select! {
                r = call => match r {
                    Err(_) => Err(Failure::Timeout(timeout)),
                    Ok(Ok(a)) => Ok(a),
                    Ok(Err(e)) => Err(match e { CallError::Connect(..) | CallError::Protocol(..) => Failure::Unreachable(e.to_string()) }),
                },
                () = cancel => Err(Failure::Interrupted),
            }
        };
        let latency = started.elapsed();
        let (output, failure, status) = match answer {
            Ok(a) => {
                let status = a.status;
                match parse_answer(a, self.agent.dialect()) {
                    Ok(out) => (out, None, Some(status)),
                    Err((f, body)) => (body, Some(f), Some(status)),
                }
            }
            Err(Failure::Unreachable(e)) => {
                match self.agent.exited(Duration::from_millis(300)).await {
                    Some(st) => (Vec::new(), Some(Failure::Crash(st)), None),
                    None => (Vec::new(), Some(Failure::Unreachable(e)), None),
                }
            }
            Err(f) => (std::mem::take(&mut shown).into_bytes(), Some(f), None),
        };
        if failure.is_some() {
            self.agent.reset();
        }
        if matches!(failure, Some(Failure::Timeout(_))) && self.agent.is_child() {
            // A hung child may never answer again: start a fresh one.
            self.agent.kill_child().await;
        }
        Called {
            output,
            failure,
            status,
            latency,
        }
    }

    /// Records the turn's complete (its output and [`Called::diagnostics`])
    /// and, with `open`, removes the open-turn row in the same transaction.
    async fn record_complete(
        &self,
        session: &SessionId,
        branch: &BranchName,
        called: &Called,
        open: bool,
    ) -> Result<StoredNode> {
        let (s, b) = (*session, branch.clone());
        let agent_name = self.opts.agent_name.clone();
        let out = called.output.clone();
        let diagnostics =
            Diagnostics::from_value(&called.diagnostics()).unwrap_or_else(|_| Diagnostics::empty());
        Ok(self
            .pool
            .run(move |st| {
                st.transaction(|l| {
                    let node = l.append(
                        &s,
                        &b,
                        &Draft {
                            kind: Kind::Complete,
                            from: agent_name.clone(),
                            to: "user".into(),
                            payload: out.clone(),
                            diagnostics: diagnostics.clone(),
                            state: None,
                            sequence: None,
                            created_at: now_ms(),
                        },
                    )?;
                    if open {
                        l.set_open_turn(&s, &b, None)?;
                    }
                    Ok(node)
                })
            })
            .await?)
    }

    /// Stops the agent (a child process is ended) and the services.
    pub async fn stop(mut self) {
        self.agent.stop().await;
        self.services.stop();
    }
}

/// The open-turn row of a timeline, before its invoke is known.
#[derive(Clone, Debug)]
struct OpenRow {
    holder: String,
    host: String,
    lock: String,
}

impl OpenRow {
    /// The row for the turn `invoke` opens.
    fn of(&self, invoke: &StoredNode) -> crate::OpenTurn {
        crate::OpenTurn {
            submission: invoke
                .node
                .submission
                .map(|x| x.to_hex())
                .unwrap_or_default(),
            turn: invoke.ctx.turn,
            agent: invoke.node.to.clone(),
            holder: self.holder.clone(),
            host: self.host.clone(),
            lock: self.lock.clone(),
        }
    }
}

/// What the agent's call gave: its output (or, for a cut turn, the text
/// streamed before the cut), why it failed, the HTTP status it answered
/// with, and how long it took.
#[derive(Debug)]
struct Called {
    output: Vec<u8>,
    failure: Option<Failure>,
    status: Option<u16>,
    latency: Duration,
}

impl Called {
    /// The complete's diagnostics: latency, status, the failure's kind and
    /// message, and `partial` when the output is text streamed before the
    /// turn was cut.
    fn diagnostics(&self) -> Value {
        let mut diag = json!({"latency_ms": self.latency.as_millis() as u64});
        if let Some(s) = self.status {
            diag["status"] = json!(s);
        }
        if let Some(f) = &self.failure {
            diag["failure"] = json!(f.kind());
            diag["error"] = json!(f.message());
        }
        if self.failure.is_some() && !self.output.is_empty() && self.status.is_none() {
            diag["partial"] = json!(true);
        }
        diag
    }
}

/// How an answer's body is shown while it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Streamed {
    /// Text: each piece as it comes (split at UTF-8 boundaries).
    Text,
    /// Server-sent events: each `data:` line's text (see [`event_text`]).
    Events,
    /// Not shown until the end (JSON, or a failure).
    No,
}

fn is_event_stream(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"))
}

/// The text of one `data:` line of an event stream: a JSON object's
/// string `delta` (or `output`, or `content`), a JSON string, or the data
/// itself; `[DONE]` and anything else in JSON carry none.
fn event_text(data: &str) -> String {
    if data == "[DONE]" {
        return String::new();
    }
    match serde_json::from_str::<Value>(data) {
        Ok(Value::Object(m)) => ["delta", "output", "content"]
            .iter()
            .find_map(|k| m.get(*k).and_then(Value::as_str))
            .unwrap_or_default()
            .to_owned(),
        Ok(Value::String(s)) => s,
        Ok(_) => String::new(),
        Err(_) => data.to_owned(),
    }
}

/// Turns an agent's answer, piece by piece, into the text to show.
#[derive(Debug, Default)]
struct Deltas {
    mode: Option<Streamed>,
    pending: Vec<u8>,
}

impl Deltas {
    fn feed(&mut self, status: u16, h: &HeaderMap, chunk: &[u8]) -> String {
        let mode = *self.mode.get_or_insert_with(|| {
            let json = h
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.to_ascii_lowercase().contains("json"));
            if !(200..300).contains(&status) || json {
                Streamed::No
            } else if is_event_stream(h) {
                Streamed::Events
            } else {
                Streamed::Text
            }
        });
        match mode {
            Streamed::No => String::new(),
            Streamed::Text => {
                self.pending.extend_from_slice(chunk);
                let upto = match std::str::from_utf8(&self.pending) {
                    Ok(_) => self.pending.len(),
                    Err(e) if e.error_len().is_none() => e.valid_up_to(),
                    Err(_) => self.pending.len(),
                };
                let rest = self.pending.split_off(upto);
                let text = String::from_utf8_lossy(&self.pending).into_owned();
                self.pending = rest;
                text
            }
            Streamed::Events => {
                self.pending.extend_from_slice(chunk);
                let mut out = String::new();
                while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.pending.drain(..=i).collect();
                    out.push_str(&Self::line(&line));
                }
                out
            }
        }
    }

    /// The text of one event-stream line (`data: …`; others carry none).
    fn line(line: &[u8]) -> String {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches(['\n', '\r']);
        match line.strip_prefix("data:") {
            Some(d) => event_text(d.strip_prefix(' ').unwrap_or(d)),
            None => String::new(),
        }
    }

    /// Whatever a last line without a newline carries.
    fn finish(&mut self) -> String {
        let rest = std::mem::take(&mut self.pending);
        match self.mode {
            Some(Streamed::Events) if !rest.is_empty() => Self::line(&rest),
            _ => String::new(),
        }
    }
}

/// The agent's answer: `{"output": TEXT}` (JSON), an event stream (the
/// events' text joined), or plain UTF-8 text; in the VlinderCLI dialect,
/// the raw body as text.
fn parse_answer(a: Answer, dialect: Dialect) -> std::result::Result<Vec<u8>, (Failure, Vec<u8>)> {
    let body = a.body.to_vec();
    if !(200..300).contains(&a.status) {
        return Err((Failure::Status(a.status), body));
    }
    if dialect == Dialect::Vlinder {
        return String::from_utf8(body)
            .map(String::into_bytes)
            .map_err(|e| {
                (
                    Failure::Garbage("the answer is not UTF-8 text".into()),
                    e.into_bytes(),
                )
            });
    }
    if is_event_stream(&a.headers) {
        let mut d = Deltas::default();
        let mut text = d.feed(a.status, &a.headers, &body);
        text.push_str(&d.finish());
        return Ok(text.into_bytes());
    }
    let declared_json = a
        .content_type()
        .is_some_and(|c| c.to_ascii_lowercase().contains("json"));
    let looks_json = a.content_type().is_none() && body.first() == Some(&b'{');
    if declared_json || looks_json {
        return match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(m)) => match m.get("output") {
                Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
                _ => Err((
                    Failure::Garbage(
                        "a JSON answer must be an object with a string `output`".into(),
                    ),
                    body,
                )),
            },
            Ok(_) => Err((
                Failure::Garbage("a JSON answer must be an object with a string `output`".into()),
                body,
            )),
            Err(e) if declared_json => Err((
                Failure::Garbage(format!(
                    "the answer is declared JSON but does not parse: {e}"
                )),
                body,
            )),
            Err(_) => match String::from_utf8(body) {
                Ok(s) => Ok(s.into_bytes()),
                Err(e) => Err((
                    Failure::Garbage("the answer is not UTF-8 text".into()),
                    e.into_bytes(),
                )),
            },
        };
    }
    match String::from_utf8(body) {
        Ok(s) => Ok(s.into_bytes()),
        Err(e) => Err((
            Failure::Garbage("the answer is not UTF-8 text".into()),
            e.into_bytes(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderValue, header};

    fn ans(status: u16, ct: Option<&str>, body: &[u8]) -> Answer {
        let mut headers = HeaderMap::new();
        if let Some(c) = ct {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(c).unwrap());
        }
        Answer {
            status,
            headers,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn a_complete_says_latency_status_failure_and_a_partial_output() {
        let called = |output: &[u8], failure, status| Called {
            output: output.to_vec(),
            failure,
            status,
            latency: Duration::from_millis(42),
        };
        assert_eq!(
            called(b"hi", None, Some(200)).diagnostics(),
            json!({"latency_ms": 42, "status": 200})
        );
        // Cut while streaming: what was shown is the output, marked partial.
        assert_eq!(
            called(b"half an ans", Some(Failure::Interrupted), None).diagnostics(),
            json!({"latency_ms": 42, "failure": "interrupted",
                   "error": Failure::Interrupted.message(), "partial": true})
        );
        // A failed answer with a status is the agent's body, never partial.
        let d = called(b"oops", Some(Failure::Status(500)), Some(500)).diagnostics();
        assert_eq!(d["failure"], "status");
        assert_eq!(d["status"], 500);
        assert!(d.get("partial").is_none(), "{d}");
        // Nothing shown before a timeout: nothing partial either.
        let d = called(b"", Some(Failure::Timeout(Duration::from_secs(1))), None).diagnostics();
        assert_eq!(d["failure"], "timeout");
        assert!(d.get("partial").is_none(), "{d}");
    }

    #[test]
    fn answers_are_json_output_or_plain_text() {
        let ok = |a| parse_answer(a, Dialect::Convo).unwrap();
        assert_eq!(
            ok(ans(200, Some("application/json"), br#"{"output":"hi"}"#)),
            b"hi"
        );
        assert_eq!(ok(ans(200, Some("text/plain"), b"{not json")), b"{not json");
        assert_eq!(ok(ans(200, None, b"plain")), b"plain");
        let bad = |a| parse_answer(a, Dialect::Convo).unwrap_err().0.kind();
        assert_eq!(bad(ans(200, Some("application/json"), b"{")), "garbage");
        assert_eq!(
            bad(ans(200, Some("application/json"), br#"{"out":1}"#)),
            "garbage"
        );
        assert_eq!(bad(ans(200, None, b"\xff\xfe")), "garbage");
        assert_eq!(bad(ans(500, None, b"boom")), "status");
        // VlinderCLI: the raw body, whatever it looks like.
        let v = parse_answer(
            ans(200, Some("application/json"), br#"{"x":1}"#),
            Dialect::Vlinder,
        );
        assert_eq!(v.unwrap(), br#"{"x":1}"#);
        // An event stream: its events' text joined.
        let sse = b"data: {\"delta\": \"hel\"}\n\ndata: lo\n\ndata: [DONE]\n\n";
        assert_eq!(ok(ans(200, Some("text/event-stream"), sse)), b"hello");
    }

    #[test]
    fn deltas_split_text_at_utf8_boundaries_and_events_at_lines() {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        let mut d = Deltas::default();
        let e = "é".as_bytes();
        assert_eq!(d.feed(200, &h, &[b'a', e[0]]), "a");
        assert_eq!(d.feed(200, &h, &[e[1], b'b']), "éb");
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        let mut d = Deltas::default();
        assert_eq!(d.feed(200, &h, b"data: {\"delta\":\"x"), "");
        assert_eq!(d.feed(200, &h, b"y\"}\n\nevent: ping\ndata: z"), "xy");
        assert_eq!(d.finish(), "z");
        // A failure's body is not shown as it arrives.
        let mut d = Deltas::default();
        assert_eq!(d.feed(500, &h, b"data: boom\n"), "");
    }
}
