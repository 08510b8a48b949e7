//! Recording MCP messages as nodes, on a thread of its own so the relay
//! never waits for the store.
//!
//! The relay hands every line it forwarded to [`Recorder::note`] (a
//! channel send); the recording thread writes what arrived since its last
//! write in one transaction, in the order it was relayed:
//!
//! - a **request** (client → server, or server → client for `sampling/…`,
//!   `elicitation/…`, `roots/list`, `ping`) is a `request` node from the
//!   sender to the receiver: the agent is the session's agent, the server
//!   is `mcp:NAME`, NAME from the server's `initialize` answer
//!   (`serverInfo.name`; the program's file name until then);
//! - its **response** (paired by JSON-RPC id and direction) is a
//!   `response` node answering that request's sequence (its diagnostics
//!   name the request's `method` and `tool`, `uri` or `prompt` too), with
//!   `latency_ms` (request relayed → response relayed) and `error` (the
//!   JSON-RPC error, or `{"tool_error": text}` for a tool result with
//!   `isError`) in its diagnostics;
//! - a **notification** (progress, cancellation, list changes, logging…)
//!   is a `request` node of its own that nothing answers.
//!
//! Every payload is the line exactly as relayed (no line ending), so the
//! store keeps each distinct result once whatever its size. Diagnostics
//! name it under `mcp`: `server`, `method`, `id`, and `tool`, `uri` or
//! `prompt` when the request names one.
//!
//! **Where they go.** Requests and responses live inside a submission.
//! When the timeline has one open (a harness's turn, or one an earlier
//! MCP message opened) the messages join it; otherwise the first message
//! opens one with an `invoke` (`mcp: PROGRAM ARGS…`, arguments that look
//! like credentials redacted) that stays open while the server runs, and
//! is closed by a `complete` when it exits. Model calls the proxy records
//! on the same timeline meanwhile land inside that submission too
//! (`request`/`response` to `infer`), so one agent run is one timeline
//! with its model calls and its tool calls in the order they happened.
//!
//! The environment the server runs with is never recorded.

use crate::message::{Dir, Message, Shape};
use convo_core::{BranchName, Diagnostics, Kind, Millis, SessionId, SubmissionId};
use convo_store::{Draft, Ledger, Result, Store, StoreError};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Where messages are recorded, and who the agent is.
#[derive(Clone, Debug)]
pub struct Target {
    /// The session.
    pub session: SessionId,
    /// The timeline.
    pub branch: BranchName,
    /// The session's agent (the client side of every message).
    pub agent: String,
}

/// The session named `session` (id, unique prefix or title; a title that
/// names none creates one, as the proxy does, so a run's model calls and
/// tool calls meet in one session), or a new session titled `title`;
/// `branch` is created when the session lacks it (from `main`'s head, or
/// empty when `main` has nothing yet).
pub fn resolve(
    store: &mut Store,
    session: Option<&str>,
    branch: &BranchName,
    title: &str,
    now: Millis,
) -> Result<Target> {
    let found = match session {
        Some(q) => match store.find_session(q) {
            Ok(row) => Some(row),
            Err(StoreError::NoSession(_)) => None,
            Err(e) => return Err(e),
        },
        None => None,
    };
    let title = session.unwrap_or(title).to_owned();
    store.transaction(|l| {
        let row = match &found {
            Some(row) => row.clone(),
            // Re-checked inside the write transaction: a wrapper and the
            // proxy (or two wrappers) starting one run under a new title
            // create one session.
            None => match l
                .tx()
                .sessions()?
                .into_iter()
                .find(|s| s.title.as_deref() == Some(title.as_str()))
            {
                Some(row) => row,
                None => l.new_session(convo_llm::thread::PROXY_AGENT, Some(&title), now)?,
            },
        };
        if l.tx().branch(&row.id, branch)?.is_none() {
            let head = l
                .tx()
                .branch(&row.id, &BranchName::main())?
                .and_then(|b| b.head);
            match head {
                Some(h) => {
                    let from =
                        convo_core::HashPrefix::parse(&h.to_hex()).map_err(StoreError::invalid)?;
                    l.fork(&row.id, &from, branch, now)?;
                }
                None => {
                    l.create_branch(&row.id, branch, now)?;
                }
            }
        }
        Ok(Target {
            session: row.id,
            branch: branch.clone(),
            agent: row.agent.clone(),
        })
    })
}

/// A new timeline `live-N` of `session` from the head of `from`: where
/// a replay records what it asked a live server.
pub fn live_branch(
    store: &mut Store,
    session: &str,
    from: &BranchName,
    now: Millis,
) -> Result<Target> {
    let row = store.find_session(session)?;
    store.transaction(|l| {
        let head = l
            .tx()
            .branch(&row.id, from)?
            .and_then(|b| b.head)
            .ok_or_else(|| StoreError::NoBranch {
                session: row.id.to_string(),
                branch: from.to_string(),
            })?;
        let name = convo_llm::thread::free_branch(l, &row.id, "live")?;
        let at = convo_core::HashPrefix::parse(&head.to_hex()).map_err(StoreError::invalid)?;
        l.fork(&row.id, &at, &name, now)?;
        Ok(Target {
            session: row.id,
            branch: name,
            agent: row.agent.clone(),
        })
    })
}

/// A node's `mcp` diagnostics in a few words, for listings:
/// `mcp tools/call echo`, `mcp notifications/progress`, with the error
/// when the answer is one (`mcp tools/call echo failed: …`).
pub fn describe(mcp: &Value, error: Option<&Value>) -> Option<String> {
    let method = mcp.get("method").and_then(Value::as_str)?;
    let mut out = format!("mcp {method}");
    for k in ["tool", "prompt", "uri"] {
        if let Some(x) = mcp.get(k).and_then(Value::as_str) {
            out.push(' ');
            out.push_str(x);
        }
    }
    if let Some(e) = error {
        let why = e
            .get("message")
            .or_else(|| e.get("tool_error"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| e.to_string());
        out.push_str(" failed: ");
        out.extend(why.chars().take(80));
    }
    Some(out)
}

/// A command line for the record: each argument that looks like a
/// credential (or follows `--token`, `--api-key`…) replaced by `REDACTED`.
pub fn public_command(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut secret_next = false;
    for a in argv {
        let lower = a.to_ascii_lowercase();
        let named = lower.starts_with('-')
            && ["key", "token", "secret", "password", "auth"]
                .iter()
                .any(|s| lower.contains(s));
        if secret_next {
            out.push("REDACTED".to_owned());
        } else if named && a.contains('=') {
            let (k, _) = a.split_once('=').unwrap_or((a, ""));
            out.push(format!("{k}=REDACTED"));
        } else {
            out.push(convo_llm::record::redact_secrets(a));
        }
        secret_next = named && !a.contains('=');
    }
    out
}

enum Event {
    Line {
        dir: Dir,
        line: Vec<u8>,
        at: Instant,
        wall: Millis,
    },
    End {
        exit: Option<i32>,
    },
}

/// What a recording came to.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Nodes written.
    pub nodes: usize,
    /// Messages that could not be recorded.
    pub failures: usize,
    /// The last reason one could not.
    pub last_error: Option<String>,
}

/// The recording thread's handle (see the module docs).
#[derive(Debug)]
pub struct Recorder {
    noter: Noter,
    join: JoinHandle<Outcome>,
}

/// What the relay's threads note lines through (a channel's sender).
#[derive(Clone, Debug)]
pub struct Noter {
    tx: mpsc::Sender<Event>,
}

impl Noter {
    /// Hands a relayed line to the recording thread.
    pub fn note(&self, dir: Dir, line: &[u8]) {
        let ev = Event::Line {
            dir,
            line: crate::message::trim_eol(line).to_vec(),
            at: Instant::now(),
            wall: now_ms(),
        };
        // A closed channel means the thread ended: counted there.
        let _ = self.tx.send(ev);
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Event")
    }
}

impl Recorder {
    /// Starts recording into `store` at `target`. `server` names the
    /// server until its `initialize` answer does; `command` is the
    /// program and its arguments as [`public_command`] gives them.
    /// `known`: `server` is the server's name already (a replay's live
    /// server, which answered its `initialize` unrecorded).
    pub fn start(
        store: Store,
        target: Target,
        server: &str,
        known: bool,
        command: Vec<String>,
    ) -> Recorder {
        let (tx, rx) = mpsc::channel();
        let state = State {
            target,
            server: server.to_owned(),
            named: known,
            command,
            pending: HashMap::new(),
            opened: None,
            held: Vec::new(),
        };
        let join = std::thread::spawn(move || run(store, state, rx));
        Recorder {
            noter: Noter { tx },
            join,
        }
    }

    /// A handle to note lines with, for each relay thread.
    pub fn noter(&self) -> Noter {
        self.noter.clone()
    }

    /// Waits until everything noted is written, closes the submission the
    /// recording opened (the server exited with `exit`), and says what
    /// was recorded.
    pub fn finish(self, exit: Option<i32>) -> Outcome {
        let _ = self.noter.tx.send(Event::End { exit });
        drop(self.noter);
        self.join.join().unwrap_or_else(|_| Outcome {
            failures: 1,
            last_error: Some("the recording thread panicked".into()),
            ..Outcome::default()
        })
    }
}

/// Wall-clock milliseconds.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

type Line = (Dir, Vec<u8>, Instant, Millis);

fn run(mut store: Store, mut state: State, rx: mpsc::Receiver<Event>) -> Outcome {
    let mut out = Outcome::default();
    let mut exit = None;
    let mut ended = false;
    while !ended {
        let Ok(first) = rx.recv() else { break };
        let mut batch: Vec<Line> = Vec::new();
        let mut take = |ev: Event, batch: &mut Vec<Line>| match ev {
            Event::Line {
                dir,
                line,
                at,
                wall,
            } => batch.push((dir, line, at, wall)),
            Event::End { exit: e } => {
                exit = e;
                ended = true;
            }
        };
        take(first, &mut batch);
        while batch.len() < 512 {
            match rx.try_recv() {
                Ok(ev) => take(ev, &mut batch),
                Err(_) => break,
            }
        }
        state.held.append(&mut batch);
        // Held until the server's name is known (its initialize answer),
        // or 16 lines, or the end, whichever comes first.
        if !state.named && !state.learn_name() && !ended && state.held.len() < 16 {
            continue;
        }
        state.named = true;
        let lines = std::mem::take(&mut state.held);
        write(&mut store, &mut state, &lines, &mut out);
    }
    if !state.held.is_empty() {
        let lines = std::mem::take(&mut state.held);
        write(&mut store, &mut state, &lines, &mut out);
    }
    if let Err(e) = store.transaction(|l| state.close(l, exit)) {
        out.failures += 1;
        out.last_error = Some(e.to_string());
    }
    out
}

/// Writes `lines` in one transaction; on failure, one at a time, so one
/// message the store refuses costs only itself.
fn write(store: &mut Store, state: &mut State, lines: &[Line], out: &mut Outcome) {
    let mut next = state.clone();
    let all = store.transaction(|l| {
        next = state.clone();
        let mut n = 0;
        for line in lines {
            n += next.append(l, line)?;
        }
        Ok(n)
    });
    match all {
        Ok(n) => {
            *state = next;
            out.nodes += n;
        }
        Err(_) if lines.len() > 1 => {
            for line in lines {
                write(store, state, std::slice::from_ref(line), out);
            }
        }
        Err(e) => {
            out.failures += 1;
            out.last_error = Some(e.to_string());
            eprintln!("convo: an MCP message was relayed but not recorded: {e}");
        }
    }
}

/// What a request is about, and the diagnostics field naming it.
fn subject(msg: &Message) -> Option<(&'static str, String)> {
    let what = msg.subject()?.to_owned();
    let field = match msg.method()? {
        "tools/call" => "tool",
        "prompts/get" => "prompt",
        _ => "uri",
    };
    Some((field, what))
}

#[derive(Clone, Debug)]
struct Pending {
    subject: Option<(&'static str, String)>,
    sequence: Option<u32>,
    submission: Option<SubmissionId>,
    at: Instant,
    method: String,
}

#[derive(Clone, Debug)]
struct State {
    target: Target,
    server: String,
    named: bool,
    command: Vec<String>,
    /// Requests awaiting their response, by (the way the request went, id).
    pending: HashMap<(Dir, String), Pending>,
    /// The submission this recording opened, while it may still be open.
    opened: Option<SubmissionId>,
    /// Lines waiting for the server's name.
    held: Vec<Line>,
}

fn diagnostics(v: &Value) -> Result<Diagnostics> {
    Diagnostics::from_value(v).map_err(|e| StoreError::Invalid(format!("diagnostics: {e}").into()))
}

impl State {
    /// Finds the server's name in the lines held (the `initialize`
    /// answer's `serverInfo.name`).
    fn learn_name(&mut self) -> bool {
        let name = self.held.iter().find_map(|(dir, line, _, _)| {
            if *dir != Dir::ToClient {
                return None;
            }
            let m = Message::read(line);
            m.json
                .pointer("/result/serverInfo/name")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        match name {
            Some(n) => {
                self.server = n;
                true
            }
            None => false,
        }
    }

    fn label(&self) -> String {
        format!("mcp:{}", self.server)
    }

    fn ends(&self, dir: Dir) -> (String, String) {
        match dir {
            Dir::ToServer => (self.target.agent.clone(), self.label()),
            Dir::ToClient => (self.label(), self.target.agent.clone()),
        }
    }

    fn head_context(&self, l: &mut Ledger<'_>) -> Result<convo_core::timeline::Context> {
        let t = &self.target;
        let tx = l.tx();
        let b = tx
            .branch(&t.session, &t.branch)?
            .ok_or_else(|| StoreError::NoBranch {
                session: t.session.to_string(),
                branch: t.branch.to_string(),
            })?;
        match b.head {
            None => Ok(convo_core::timeline::Context::genesis()),
            Some(h) => Ok(tx
                .node(&h)?
                .ok_or_else(|| StoreError::corrupt(format!("head {h} is missing")))?
                .ctx),
        }
    }

    /// Opens a submission when the timeline has none open: 1 node or 0.
    fn ensure_open(&mut self, l: &mut Ledger<'_>, wall: Millis) -> Result<usize> {
        if self.head_context(l)?.open {
            return Ok(0);
        }
        let d = Draft {
            kind: Kind::Invoke,
            from: "cli".into(),
            to: self.target.agent.clone(),
            payload: format!("mcp: {}", self.command.join(" ")).into_bytes(),
            diagnostics: diagnostics(
                &json!({"mcp": {"server": self.server, "command": self.command}}),
            )?,
            state: None,
            sequence: None,
            created_at: wall,
        };
        let n = l.append(&self.target.session, &self.target.branch, &d)?;
        self.opened = n.node.submission;
        Ok(1)
    }

    /// Appends one relayed line: the nodes written.
    fn append(&mut self, l: &mut Ledger<'_>, line: &Line) -> Result<usize> {
        let (dir, bytes, at, wall) = line;
        let msg = Message::read(bytes);
        let mut mcp = Map::new();
        mcp.insert("server".into(), json!(self.server));
        let mut diag = Map::new();
        let mut answers = None;
        match &msg.shape {
            Shape::Request { method, .. } => {
                mcp.insert("method".into(), json!(method));
                mcp.insert("id".into(), msg.json.get("id").cloned().unwrap_or_default());
                if let Some((field, what)) = subject(&msg) {
                    mcp.insert(field.into(), json!(what));
                }
                if method == "initialize" {
                    mcp.insert("command".into(), json!(self.command));
                }
            }
            Shape::Notification { method } => {
                mcp.insert("method".into(), json!(method));
                mcp.insert("notification".into(), json!(true));
            }
            Shape::Response { id, .. } => {
                mcp.insert("id".into(), msg.json.get("id").cloned().unwrap_or_default());
                answers = self.pending.remove(&(dir.back(), id.clone()));
                if let Some(p) = &answers {
                    mcp.insert("method".into(), json!(p.method));
                    if let Some((field, what)) = &p.subject {
                        mcp.insert((*field).into(), json!(what));
                    }
                    let ms = at.duration_since(p.at).as_secs_f64() * 1000.0;
                    diag.insert("latency_ms".into(), json!((ms * 1000.0).round() / 1000.0));
                }
                if let Some(e) = msg.failure() {
                    diag.insert("error".into(), e);
                }
            }
            Shape::Batch => {
                mcp.insert("batch".into(), json!(true));
            }
            Shape::Invalid(why) => {
                mcp.insert("invalid".into(), json!(why));
            }
        }
        let mut written = self.ensure_open(l, *wall)?;
        let ctx = self.head_context(l)?;
        // A response whose request is in the submission open now answers
        // it; any other (its request unrecorded, or in a submission since
        // closed) is kept as a message of its own.
        let paired = answers
            .as_ref()
            .filter(|p| p.sequence.is_some() && p.submission == ctx.submission);
        let (kind, sequence) = match (paired, &msg.shape) {
            (Some(p), _) => (Kind::Response, p.sequence),
            (None, Shape::Response { .. }) => {
                mcp.insert("unpaired".into(), json!(true));
                (Kind::Request, None)
            }
            _ => (Kind::Request, None),
        };
        diag.insert("mcp".into(), Value::Object(mcp));
        let (from, to) = self.ends(*dir);
        let d = Draft {
            kind,
            from,
            to,
            payload: bytes.clone(),
            diagnostics: diagnostics(&Value::Object(diag))?,
            state: None,
            sequence,
            created_at: *wall,
        };
        let n = l.append(&self.target.session, &self.target.branch, &d)?;
        written += 1;
        if let Shape::Request { id, method } = &msg.shape {
            self.pending.insert(
                (*dir, id.clone()),
                Pending {
                    subject: subject(&msg),
                    sequence: n.node.sequence,
                    submission: n.node.submission,
                    at: *at,
                    method: method.clone(),
                },
            );
        }
        Ok(written)
    }

    /// Closes the submission this recording opened, when it is still the
    /// timeline's open one.
    fn close(&mut self, l: &mut Ledger<'_>, exit: Option<i32>) -> Result<()> {
        let Some(opened) = self.opened else {
            return Ok(());
        };
        let ctx = self.head_context(l)?;
        if !ctx.open || ctx.submission != Some(opened) {
            return Ok(());
        }
        let d = Draft {
            kind: Kind::Complete,
            from: self.target.agent.clone(),
            to: "cli".into(),
            payload: format!("mcp server {} exited", self.server).into_bytes(),
            diagnostics: diagnostics(&json!({"mcp": {"server": self.server, "exit": exit}}))?,
            state: None,
            sequence: None,
            created_at: now_ms(),
        };
        l.append(&self.target.session, &self.target.branch, &d)?;
        self.opened = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_name_the_call_and_its_failure() {
        let d = json!({"method": "tools/call", "tool": "echo", "server": "s"});
        assert_eq!(describe(&d, None).as_deref(), Some("mcp tools/call echo"));
        let e = json!({"code": -32602, "message": "bad args"});
        assert_eq!(
            describe(&d, Some(&e)).as_deref(),
            Some("mcp tools/call echo failed: bad args")
        );
        assert_eq!(describe(&json!({"server": "s"}), None), None);
    }

    #[test]
    fn credentials_in_a_command_line_are_not_recorded() {
        let argv: Vec<String> = [
            "server",
            "--token",
            "hunter2",
            "--api-key=abc",
            "sk-proj-0123456789",
            "/tmp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            public_command(&argv),
            [
                "server",
                "--token",
                "REDACTED",
                "--api-key=REDACTED",
                "REDACTED",
                "/tmp"
            ]
        );
    }
}
