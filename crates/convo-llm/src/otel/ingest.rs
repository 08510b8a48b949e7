//! [`Call`]s → sessions: conversations, not spans.
//!
//! **Sessions.** Calls are grouped by [`Call::thread`]
//! (`gen_ai.conversation.id`, then a session id, then the trace); each
//! thread is one session, id [`session_id`] = `SessionId::derived("otel:"
//! + thread)`, created by the first call that arrives for it (agent: the
//! `gen_ai.agent.name` or `service.name`; title: the first user message).
//! A call known only by its trace whose history continues one recorded
//! under another thread (a script whose every call is its own trace) is
//! that thread's: the receiver remembers ([`ThreadCache`]) which thread
//! recorded each history that holds an answer, as the proxy finds the
//! conversation a request continues by its history. Calls exported
//! without their messages (the instrumentations' default) have nothing to
//! thread by: one session per agent holds them, each a turn with an empty
//! answer carrying the call's model, usage, latency and status, the first
//! saying how to capture the messages ([`super::dialect::CONTENT_HINT`]).
//!
//! **Each message once.** Every LLM call resends the whole history, so a
//! call's messages (input, then output) are read as a path and each
//! message gets a *thread hash*: SHA-256 (first 128 bits) over the previous
//! message's thread hash and this message's role, target and text
//! (length-prefixed). It is not stored: a node's thread hash is computed
//! again from the messages of its timeline when a session is read (any
//! node that records a message counts, whoever wrote it). A call's path is
//! matched against the session's nodes by those hashes; the deepest
//! message already stored is where the call continues:
//!
//! - every message stored (a retried export, a call that arrives after a
//!   later call that resent its messages): nothing is written;
//! - the deepest stored message is a timeline's head: the rest of the path
//!   is appended there;
//! - it is inside a timeline (the history was edited, a regeneration):
//!   the session forks there on a new timeline `edit-N`, named as every
//!   way in names it ([`crate::thread`]), and the rest goes on it;
//! - none is stored, but the path resends a recorded tool call (same id,
//!   tool, arguments) after a rewritten history (an openai-agents
//!   handoff: another system prompt, the history summarized in one
//!   message): the call continues at that tool call, the messages before
//!   it kept on its first new node (`extra.rewritten_history`), not
//!   recorded as their own;
//! - none is stored and the call's first user message is a string
//!   argument of a recorded tool call (an agent used as a tool): a
//!   subagent, on a timeline `agent-N` forked at that tool call, linked
//!   as the proxy links one ([`crate::thread::start_subagent`]);
//! - none is stored (the first call, or a call with unrelated history in
//!   the same trace): the whole path is appended to `main`.
//!
//! So the order in which calls and batches arrive does not matter for
//! what is stored once, only for which call's diagnostics a message
//! carries. Calls of one request are taken oldest first.
//!
//! **Cost per request.** Threading needs each stored message's thread hash
//! and each timeline's head. Read from the store, that is every node of
//! the session (and its payload), so a request would cost more as its
//! session grows. A [`ThreadCache`] (the receiver keeps one) holds them
//! between requests; a request then reads its session's branches only
//! (one query), and takes the cached state when the branches (name, head,
//! sealed) are the ones it left: every write to a session moves a head or
//! adds a branch, so another writer (a second server, `convo fork`, a
//! transaction that did not commit) is seen and the state read again. A
//! session the request creates is not read at all. Bounded: at most
//! [`CACHE_MESSAGES`] thread hashes in all, the least recently used
//! sessions dropped first. What needs no store ([`prepare`]: each call's
//! path and thread hashes, sessions grouped) is done before the write
//! transaction, so the receiver runs it in parallel outside its one
//! writer.
//!
//! Messages become nodes through [`message_drafts`] (the import mapping:
//! user → invoke, tool call → request, tool result → response, answer →
//! complete). Each new node's diagnostics carry `extra.otel` (`{}`: the
//! message came as telemetry); the last node a call writes also its span
//! id and `call`: usage, latency, status, parent span and the span's
//! other attributes as received. The fields that stay the same from call
//! to call of a conversation ([`STABLE`]: the trace id, the dialect, the
//! span's name and scope, the provider) are stored where they change: a
//! call's value is its own, else that of the nearest call before it on
//! its timeline (`null`: none); [`resolve`] gives each call's whole
//! diagnostics back.

use super::Call;
use crate::ledger::{Cursor, message_drafts, node_message};
use convo_core::timeline::Context;
use convo_core::{BranchName, Millis, NodeHash, SessionId};
use convo_formats::model::derived_title;
use convo_formats::model::{Conversation, Message, Role};
use convo_store::{Draft, Ledger, StoreError};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// What an ingest wrote.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Ingested {
    /// Calls read.
    pub calls: usize,
    /// Calls that added at least one node (the rest were already stored).
    pub recorded: usize,
    /// Nodes written (fork nodes included).
    pub nodes: usize,
    /// The sessions touched, each once.
    pub sessions: Vec<SessionId>,
    /// The number under which the export's body was kept ([`super::raw`]),
    /// if it was (not for a retry of the last body kept, nor without one).
    pub raw: Option<u64>,
    /// Calls recorded without their messages (exported without content).
    pub without_content: usize,
}

/// The session a thread is recorded in.
pub fn session_id(thread: &str) -> SessionId {
    SessionId::derived(format!("otel:{thread}").as_bytes())
}

/// The most thread hashes a [`ThreadCache`] keeps (about 60 bytes each).
pub const CACHE_MESSAGES: usize = 250_000;

/// A message's thread hash: the first 128 bits of a SHA-256.
pub type ThreadHash = [u8; 16];

/// The call fields stored only where they change along a timeline
/// (`trace_id` beside `span_id` in `extra.otel`, the others in
/// `extra.otel.call`).
pub const STABLE: [&str; 5] = ["trace_id", "dialect", "span", "scope", "provider"];

/// The [`STABLE`] fields in effect at a node: `Null` for one not set.
type Stable = [Value; 5];

fn no_stable() -> Stable {
    [
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
        Value::Null,
    ]
}

/// Threading state kept between requests (see the module docs): a
/// request then costs what it carries, not what its session holds.
#[derive(Debug, Default)]
pub struct ThreadCache {
    inner: Mutex<CacheInner>,
    raws: Mutex<Raws>,
}

/// The body kept last for each session (its number and bytes), the base
/// of the next one's residual ([`super::raw`]); at most [`RAW_BYTES`].
#[derive(Debug, Default)]
struct Raws {
    last: HashMap<SessionId, (u64, u64, std::sync::Arc<Vec<u8>>)>,
    tick: u64,
    bytes: usize,
}

/// The most body bytes a [`ThreadCache`] keeps as bases.
pub const RAW_BYTES: usize = 64 << 20;

#[derive(Debug, Default)]
struct CacheInner {
    threads: HashMap<SessionId, (u64, Thread)>,
    tick: u64,
    messages: usize,
    /// Traces whose LLM calls were received (bounded: forgotten past
    /// LLM_TRACES), so an agent span exported later is not a call.
    llm_traces: std::collections::HashSet<String>,
    /// The thread (conversation) each answered history was recorded in,
    /// by the thread hash of its messages (bounded: forgotten past
    /// CACHE_MESSAGES), so a call of another trace that continues it
    /// lands in its session.
    owners: HashMap<ThreadHash, (String, bool)>,
    /// Span ids whose messages were received (bounded as `llm_traces`):
    /// the same span without them (a span whose content went to log
    /// events) is not another call.
    with_content: HashSet<String>,
}

/// How many traces with LLM calls the cache remembers for agent spans.
const LLM_TRACES: usize = 100_000;

impl ThreadCache {
    /// An empty cache.
    pub fn new() -> ThreadCache {
        ThreadCache::default()
    }

    /// Notes the traces of `calls`' LLM calls and says which calls to
    /// keep: not an agent span whose trace's LLM calls were received.
    fn keep<'a>(&self, calls: impl Iterator<Item = &'a Call> + Clone) -> Vec<bool> {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if c.llm_traces.len() > LLM_TRACES {
            c.llm_traces.clear();
        }
        for call in calls.clone().filter(|x| !x.agent_span) {
            if !c.llm_traces.contains(&call.trace_id) {
                c.llm_traces.insert(call.trace_id.clone());
            }
        }
        calls
            .map(|x| !x.agent_span || !c.llm_traces.contains(&x.trace_id))
            .collect()
    }

    /// The thread a history was recorded in last: the deepest of
    /// `hashes` that one owns (with `failed`, only a failed call's: its
    /// next attempt).
    fn owner(&self, hashes: &[ThreadHash], failed: bool) -> Option<String> {
        let c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        hashes.iter().rev().find_map(|h| {
            c.owners
                .get(h)
                .filter(|(_, f)| *f || !failed)
                .map(|(t, _)| t.clone())
        })
    }

    /// Notes a call's histories ([`answered`]) as recorded in `thread`
    /// (the newest recording wins); a call that got its answer is no
    /// longer a failed call's next attempt.
    fn own(&self, pc: &PreparedCall, thread: &str) {
        let failed = pc.path.len() == pc.n_in;
        let hashes = answered(pc);
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if c.owners.len() + hashes.len() > CACHE_MESSAGES {
            c.owners.clear();
        }
        if !failed {
            for h in &pc.chains[..pc.n_in] {
                if let Some(o) = c.owners.get_mut(h) {
                    o.1 = false;
                }
            }
        }
        for h in hashes {
            c.owners.insert(*h, (thread.to_owned(), failed));
        }
        // The subagents its tool calls could start.
        for m in &pc.path[pc.n_in..] {
            for sp in spawns_of(m) {
                c.owners
                    .insert(spawn_marker(&sp.key), (thread.to_owned(), false));
            }
        }
    }

    /// Notes the spans of `calls` that carry messages and says which calls
    /// to keep: not a call without content whose span's messages came.
    fn keep_content(&self, calls: &[&PreparedCall]) -> Vec<bool> {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if c.with_content.len() > LLM_TRACES {
            c.with_content.clear();
        }
        for pc in calls.iter().filter(|pc| !pc.path.is_empty()) {
            if !pc.call.span_id.is_empty() && !c.with_content.contains(&pc.call.span_id) {
                c.with_content.insert(pc.call.span_id.clone());
            }
        }
        calls
            .iter()
            .map(|pc| !pc.path.is_empty() || !c.with_content.contains(&pc.call.span_id))
            .collect()
    }

    fn take(&self, id: &SessionId) -> Option<Thread> {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (_, t) = c.threads.remove(id)?;
        c.messages = c.messages.saturating_sub(t.known.len());
        Some(t)
    }

    fn put(&self, t: Thread) {
        if t.known.len() > CACHE_MESSAGES {
            return;
        }
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        c.tick += 1;
        let tick = c.tick;
        c.messages += t.known.len();
        if let Some((_, old)) = c.threads.insert(t.id, (tick, t)) {
            c.messages = c.messages.saturating_sub(old.known.len());
        }
        while c.messages > CACHE_MESSAGES {
            let Some(oldest) = c
                .threads
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| *id)
            else {
                break;
            };
            if let Some((_, gone)) = c.threads.remove(&oldest) {
                c.messages = c.messages.saturating_sub(gone.known.len());
            }
        }
    }

    /// The last body kept for the first of `sessions` that has one.
    fn raw_base(&self, sessions: &[SessionId]) -> Option<(u64, std::sync::Arc<Vec<u8>>)> {
        let r = self.raws.lock().unwrap_or_else(|e| e.into_inner());
        sessions
            .iter()
            .find_map(|s| r.last.get(s).map(|(_, seq, b)| (*seq, b.clone())))
    }

    /// Notes `body`, kept as `seq`, as the last body of `sessions`.
    fn raw_kept(&self, sessions: &[SessionId], seq: u64, body: &std::sync::Arc<Vec<u8>>) {
        let mut r = self.raws.lock().unwrap_or_else(|e| e.into_inner());
        if body.len() > RAW_BYTES {
            return;
        }
        for s in sessions {
            r.tick += 1;
            let tick = r.tick;
            r.bytes += body.len();
            if let Some((_, _, old)) = r.last.insert(*s, (tick, seq, body.clone())) {
                r.bytes = r.bytes.saturating_sub(old.len());
            }
        }
        while r.bytes > RAW_BYTES {
            let Some(oldest) = r.last.iter().min_by_key(|(_, v)| v.0).map(|(k, _)| *k) else {
                break;
            };
            if let Some((_, _, gone)) = r.last.remove(&oldest) {
                r.bytes = r.bytes.saturating_sub(gone.len());
            }
        }
    }

    /// Forgets the bodies kept (a transaction that noted some did not
    /// commit).
    pub fn forget_raws(&self) {
        let mut r = self.raws.lock().unwrap_or_else(|e| e.into_inner());
        r.last.clear();
        r.bytes = 0;
    }

    /// Sessions held (for tests and benchmarks).
    pub fn sessions(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .threads
            .len()
    }
}

/// One call read into what threading needs, before any store is touched.
#[derive(Debug)]
pub struct PreparedCall {
    /// The call (its `input` and `output` moved into `path`).
    call: Call,
    /// Input, then output, tool results named after their tools.
    path: Vec<Message>,
    /// The thread hash of each message of `path`.
    chains: Vec<ThreadHash>,
    /// How many of `path` were the input.
    n_in: usize,
    /// Its place among the calls read from the export body (what
    /// [`super::calls_from_body`] gives back), for [`resolve_kept`].
    index: usize,
}

/// The calls of one conversation, oldest first, and what its session is
/// created with if it is new.
#[derive(Debug)]
pub struct PreparedThread {
    thread: String,
    agent: String,
    title: Option<String>,
    created: Option<Millis>,
    calls: Vec<PreparedCall>,
}

/// An export request's calls, ready for [`ingest_prepared`]: grouped by
/// conversation, each call's path hashed. Needs no store, so it runs
/// outside the write transaction.
#[derive(Debug, Default)]
pub struct Prepared {
    calls: usize,
    threads: Vec<PreparedThread>,
    /// The export's body, to keep ([`super::raw`]).
    body: Option<super::raw::Body>,
}

impl Prepared {
    /// Calls read.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Whether every call was exported without its messages (their
    /// thread is [`super::dialect::NO_CONTENT`]'s): calls whose messages
    /// may still come in log events (`EVENT_ONLY`).
    pub fn only_without_content(&self) -> bool {
        self.calls > 0
            && !self.threads.is_empty()
            && self
                .threads
                .iter()
                .all(|t| t.thread.starts_with(super::dialect::NO_CONTENT))
    }

    /// Keeps `body` (the export as received) with the calls.
    pub fn with_body(mut self, body: super::raw::Body) -> Prepared {
        self.body = Some(body);
        self
    }

    /// Messages carried (what the writer's batch limit counts).
    pub fn messages(&self) -> usize {
        self.threads
            .iter()
            .flat_map(|t| &t.calls)
            .map(|c| c.path.len())
            .sum()
    }
}

/// Groups `calls` by conversation (oldest call first in each) and hashes
/// each call's path.
pub fn prepare(calls: Vec<Call>) -> Prepared {
    let n = calls.len();
    let mut by_thread: std::collections::BTreeMap<String, Vec<(usize, Call)>> = Default::default();
    for (i, c) in calls.into_iter().enumerate() {
        by_thread.entry(c.thread.clone()).or_default().push((i, c));
    }
    let threads = by_thread
        .into_iter()
        .map(|(thread, mut cs)| {
            cs.sort_by(|(_, a), (_, b)| {
                (a.start, a.end, &a.span_id).cmp(&(b.start, b.end, &b.span_id))
            });
            let agent = cs
                .iter()
                .find_map(|(_, c)| c.agent.clone())
                .filter(|a| !a.trim().is_empty())
                .unwrap_or_else(|| "otel".into());
            let title = cs
                .iter()
                .find_map(|(_, c)| derived_title(&Conversation::linear(c.input.clone())))
                .or_else(|| {
                    thread
                        .starts_with(super::dialect::NO_CONTENT)
                        .then(|| format!("{agent}: calls without their messages"))
                });
            let created = cs.first().map(|(_, c)| c.start).filter(|&t| t > 0);
            let calls = cs
                .into_iter()
                .map(|(index, mut c)| {
                    let n_in = c.input.len();
                    let mut path = std::mem::take(&mut c.input);
                    path.append(&mut c.output);
                    name_tool_results(&mut path);
                    let chains = thread_hashes(&path);
                    PreparedCall {
                        call: c,
                        path,
                        chains,
                        n_in,
                        index,
                    }
                })
                .collect();
            PreparedThread {
                thread,
                agent,
                title,
                created,
                calls,
            }
        })
        .collect::<Vec<PreparedThread>>();
    // Oldest conversation first: a later one that continues it (another
    // trace) finds it recorded.
    let mut threads = threads;
    threads.sort_by_key(|t| t.calls.first().map(|c| c.call.start));
    Prepared {
        calls: n,
        threads,
        body: None,
    }
}

/// Records `calls` inside an open transaction (one per export request),
/// reading each session's threading state from the store.
pub fn ingest(l: &mut Ledger<'_>, calls: &[Call], now: Millis) -> Result<Ingested, StoreError> {
    ingest_cached(l, calls, now, &ThreadCache::new())
}

/// [`ingest`] with the threading state kept in `cache` between requests.
pub fn ingest_cached(
    l: &mut Ledger<'_>,
    calls: &[Call],
    now: Millis,
    cache: &ThreadCache,
) -> Result<Ingested, StoreError> {
    ingest_prepared(l, &prepare(calls.to_vec()), now, cache)
}

/// Records prepared calls inside an open transaction, the threading state
/// kept in `cache` between requests.
pub fn ingest_prepared(
    l: &mut Ledger<'_>,
    p: &Prepared,
    now: Millis,
    cache: &ThreadCache,
) -> Result<Ingested, StoreError> {
    let keep = cache.keep(p.threads.iter().flat_map(|t| &t.calls).map(|c| &c.call));
    let mut keep = keep.into_iter();
    let mut out = Ingested {
        calls: p.calls,
        ..Ingested::default()
    };
    // The nodes written (follow number, payload), for the body's residual.
    let mut written: Vec<(u64, Vec<u8>)> = Vec::new();
    // The sessions the calls went to, for the body.
    let mut sessions: Vec<SessionId> = Vec::new();
    for t in &p.threads {
        let cs: Vec<&PreparedCall> = t
            .calls
            .iter()
            .filter(|_| keep.next().unwrap_or(true))
            .collect();
        let with = cache.keep_content(&cs);
        let cs: Vec<&PreparedCall> = cs
            .into_iter()
            .zip(with)
            .filter_map(|(c, k)| k.then_some(c))
            .collect();
        let thread = continued_thread(t, &cs, cache);
        let id = session_id(&thread);
        if !sessions.contains(&id) {
            sessions.push(id);
        }
        if cs.is_empty() {
            continue;
        }
        if !out.sessions.contains(&id) {
            out.sessions.push(id);
        }
        let mut th = Thread::open(l, id, t, now, cache)?;
        th.record(l, &cs, p.body.is_some(), &mut out, &mut written)?;
        cache.put(th);
        for pc in &cs {
            cache.own(pc, &thread);
        }
    }
    if let Some(body) = &p.body
        && p.calls > 0
    {
        let base = cache.raw_base(&sessions);
        out.raw = super::raw::keep(l, body, sessions.clone(), now, base, &written)?;
        if let Some(seq) = out.raw {
            cache.raw_kept(&sessions, seq, &body.bytes);
        }
    }
    Ok(out)
}

/// The thread hashes of a call's path that a later call of another trace
/// continues the conversation from: from its first answer on (a history
/// with no answer yet is a first question, which unrelated conversations
/// share), or all of them when the call got no answer (it failed: the
/// next attempt, or a fallback to another model, resends them).
fn answered(pc: &PreparedCall) -> &[ThreadHash] {
    if pc.path.len() == pc.n_in {
        return &pc.chains;
    }
    let first = pc
        .path
        .iter()
        .position(|m| matches!(m.role, Role::Assistant | Role::ToolCall))
        .unwrap_or(pc.path.len());
    &pc.chains[first..]
}

/// The thread a conversation's calls are recorded in: its own, unless it
/// is only its trace (no conversation or session id) and its first call
/// continues a history recorded in another thread (an agent that makes
/// each call in its own trace, as a plain script does): the thread that
/// recorded that history last. So a conversation is one session however
/// its calls are traced, as the proxy threads it: a first call (no
/// answer in its history yet) starts a conversation of its own, unless it
/// is the next attempt of a call that failed.
fn continued_thread(t: &PreparedThread, cs: &[&PreparedCall], cache: &ThreadCache) -> String {
    if !t.thread.starts_with("trace:") && !t.thread.starts_with("service:") {
        return t.thread.clone();
    }
    let Some(first) = cs.first() else {
        return t.thread.clone();
    };
    let input = &first.path[..first.n_in];
    let fresh = !input
        .iter()
        .any(|m| matches!(m.role, Role::Assistant | Role::ToolCall));
    let found = if fresh {
        cache.owner(&first.chains[..first.n_in], true).or_else(|| {
            // A subagent started by a tool call of another trace.
            let key = input
                .iter()
                .find(|m| m.role == Role::User)
                .and_then(|m| crate::thread::spawn_key(&m.text))?;
            cache.owner(&[spawn_marker(&key)], false)
        })
    } else {
        cache.owner(&first.chains, false)
    };
    found.unwrap_or_else(|| t.thread.clone())
}

/// The thread hash a call recorded without its messages is known by: its
/// span id (so a retried export writes it once).
fn span_marker(span_id: &str) -> ThreadHash {
    thread_hash(None, &Message::new(Role::System, "otel-span", span_id))
}

/// The thread hash a subagent's key ([`crate::thread::spawn_key`]) is
/// known by in the cache's owners.
fn spawn_marker(key: &str) -> ThreadHash {
    thread_hash(None, &Message::new(Role::System, "otel-spawn", key))
}

/// What a session's branches are: (name, head, sealed), by name. Any
/// write to the session changes it.
type Marks = Vec<(BranchName, Option<NodeHash>, bool)>;

/// A timeline's head: its branch, its context (read when first needed)
/// and the stable fields in effect there (`None`: not known).
#[derive(Debug, Clone)]
struct Head {
    branch: BranchName,
    ctx: Option<Context>,
    stable: Option<Stable>,
}

/// Each node's thread hash and the stable fields in effect there.
type Effects = HashMap<NodeHash, (Option<ThreadHash>, Stable)>;

/// A session read back from its nodes ([`Thread::open`]).
struct ReadBack {
    /// Each node's thread hash and the stable fields in effect there.
    at: Effects,
    /// The node each thread hash (and each call recorded without its
    /// messages, by [`span_marker`]) names first.
    known: HashMap<ThreadHash, NodeHash>,
    /// The tool calls recorded: the message, its node and thread hash.
    tool_calls: Vec<(Message, NodeHash, ThreadHash)>,
}

impl ReadBack {
    /// Every node, in follow order (a parent before its children): its
    /// thread hash and the stable fields in effect, from its parent's.
    fn of(nodes: &[(convo_store::StoredNode, Option<Vec<u8>>)]) -> ReadBack {
        let mut at: Effects = HashMap::with_capacity(nodes.len());
        let mut known = HashMap::new();
        let mut tool_calls = Vec::new();
        for (n, payload) in nodes {
            let (prev, mut stable) = match n.node.parent.and_then(|p| at.get(&p)) {
                Some((h, s)) => (*h, s.clone()),
                None => (None, no_stable()),
            };
            let diag = n.node.diagnostics.to_value();
            // A subagent's conversation starts again at its timeline's
            // first node, as its calls hash it.
            let prev = if diag.get("subagent").is_some() {
                None
            } else {
                prev
            };
            if let Some(otel) = diag.pointer("/extra/otel")
                && let Some(call) = otel.get("call")
            {
                apply_stable(&mut stable, otel);
                if call.get("content") == Some(&Value::Bool(false))
                    && let Some(span) = otel.get("span_id").and_then(Value::as_str)
                {
                    known.entry(span_marker(span)).or_insert(n.hash);
                }
            }
            let chain = match node_message(&n.node, payload.as_deref().unwrap_or_default()) {
                Some(m) => {
                    let h = thread_hash(prev.as_ref(), &m);
                    known.entry(h).or_insert(n.hash);
                    if m.role == Role::ToolCall {
                        tool_calls.push((m, n.hash, h));
                    }
                    Some(h)
                }
                None => prev,
            };
            at.insert(n.hash, (chain, stable));
        }
        ReadBack {
            at,
            known,
            tool_calls,
        }
    }
}

/// A session's threading state: which node each thread hash names, which
/// node heads which timeline, and the branches as it left them.
#[derive(Debug)]
struct Thread {
    id: SessionId,
    agent: String,
    known: HashMap<ThreadHash, NodeHash>,
    heads: HashMap<NodeHash, Head>,
    /// `main`, when it has no node yet.
    empty_main: bool,
    main_head: Option<NodeHash>,
    branches: Marks,
    /// Each tool call recorded, by [`call_identity`]: its node and thread
    /// hash (a call whose history was rewritten before it resumes there).
    calls: HashMap<String, (NodeHash, ThreadHash)>,
    /// Tool-call arguments that could start a subagent
    /// ([`crate::thread::Spawn`]), by key: the tool call's node and the
    /// timeline it was recorded on, when known.
    spawns: HashMap<String, (NodeHash, Option<BranchName>, crate::thread::Spawn)>,
}

/// Where a call continues: (branch, head before, its context, the stable
/// fields in effect there).
type At = (
    BranchName,
    Option<NodeHash>,
    Option<Context>,
    Option<Stable>,
);

/// Where a call's new messages go ([`Thread::locate`]).
struct Place<'p> {
    /// The first message of the path to write.
    from: usize,
    branch: BranchName,
    /// The timeline's head before the call.
    old_head: Option<NodeHash>,
    ctx: Option<Context>,
    /// The stable fields in effect there.
    effect: Option<Stable>,
    /// The path's thread hashes as the session knows them (rebased on a
    /// recorded tool call when the history before it was rewritten).
    chains: std::borrow::Cow<'p, [ThreadHash]>,
    /// What the first new node carries: its subagent link, the messages
    /// the client sent instead of the recorded history.
    subagent: Option<Value>,
    folded: &'p [Message],
}

/// A tool call's identity: its id, tool and arguments (ids alone repeat
/// across conversations of a scripted model).
fn call_identity(m: &Message) -> Option<String> {
    if m.role != Role::ToolCall {
        return None;
    }
    let id = m.extra.get("tool_call_id").and_then(Value::as_str)?;
    Some(format!(
        "{id}\u{0}{}\u{0}{}",
        m.to.as_deref().unwrap_or(""),
        m.text
    ))
}

/// The subagents a tool-call message could start ([`crate::thread::spawns_of_call`]).
fn spawns_of(m: &Message) -> Vec<crate::thread::Spawn> {
    if m.role != Role::ToolCall {
        return Vec::new();
    }
    let args = crate::api::parsed_arguments(&Value::String(m.text.clone()));
    let id = m.extra.get("tool_call_id").and_then(Value::as_str);
    crate::thread::spawns_of_call(id, m.to.as_deref(), &args)
}

impl Thread {
    /// Notes a tool call recorded as `node` (thread hash `h`) on `branch`.
    fn note_call(
        &mut self,
        m: &Message,
        node: NodeHash,
        h: ThreadHash,
        branch: Option<&BranchName>,
    ) {
        if let Some(id) = call_identity(m) {
            self.calls.insert(id, (node, h));
        }
        for sp in spawns_of(m) {
            self.spawns
                .insert(sp.key.clone(), (node, branch.cloned(), sp));
        }
    }

    /// A new session for `t`: nothing to read.
    fn create(
        l: &mut Ledger<'_>,
        id: SessionId,
        t: &PreparedThread,
        now: Millis,
    ) -> Result<Thread, StoreError> {
        let row = l.create_session(id, &t.agent, t.title.as_deref(), t.created.unwrap_or(now))?;
        Ok(Thread {
            id,
            agent: row.agent,
            known: HashMap::new(),
            heads: HashMap::new(),
            empty_main: true,
            main_head: None,
            branches: vec![(BranchName::main(), None, false)],
            calls: HashMap::new(),
            spawns: HashMap::new(),
        })
    }

    fn open(
        l: &mut Ledger<'_>,
        id: SessionId,
        t: &PreparedThread,
        now: Millis,
        cache: &ThreadCache,
    ) -> Result<Thread, StoreError> {
        // A session this receiver wrote last: its branches say whether it
        // still is as it was left.
        let cached = cache.take(&id);
        let row = if cached.is_some() {
            None
        } else {
            match l.tx().session(&id)? {
                Some(row) => Some(row),
                None => {
                    // New: nothing to read.
                    return Thread::create(l, id, t, now);
                }
            }
        };
        let mut rows = l.tx().branches(Some(&id))?;
        rows.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
        let branches: Marks = rows
            .iter()
            .map(|b| (b.name.clone(), b.head, b.sealed))
            .collect();
        if let Some(th) = cached
            && th.branches == branches
        {
            return Ok(th);
        }
        let agent = match row {
            Some(row) => row.agent,
            None => match l.tx().session(&id)? {
                Some(row) => row.agent,
                None => {
                    // Gone since (deleted behind the receiver's back).
                    return Thread::create(l, id, t, now);
                }
            },
        };
        let nodes = l.tx().session_nodes(&id, true)?;
        let read = ReadBack::of(&nodes);
        let mut th = Thread {
            id,
            agent,
            known: read.known,
            heads: HashMap::new(),
            empty_main: false,
            main_head: None,
            branches,
            calls: HashMap::new(),
            spawns: HashMap::new(),
        };
        th.note_heads(rows, &read.at);
        for (m, node, h) in read.tool_calls {
            th.note_call(&m, node, h, None);
        }
        Ok(th)
    }

    /// Notes the heads of the open timelines among `rows`, with the stable
    /// fields in effect at each (`at`: by node).
    fn note_heads(&mut self, rows: Vec<convo_store::BranchRow>, at: &Effects) {
        for b in rows {
            if b.sealed {
                continue;
            }
            if b.name == BranchName::main() {
                self.main_head = b.head;
                self.empty_main = b.head.is_none();
            }
            if let Some(h) = b.head {
                self.heads.insert(
                    h,
                    Head {
                        branch: b.name,
                        ctx: None,
                        stable: at.get(&h).map(|(_, s)| s.clone()),
                    },
                );
            }
        }
    }

    fn record(
        &mut self,
        l: &mut Ledger<'_>,
        cs: &[&PreparedCall],
        kept: bool,
        out: &mut Ingested,
        written: &mut Vec<(u64, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        for pc in cs {
            let (c, path) = (&pc.call, &pc.path);
            if path.is_empty() {
                self.record_without_content(l, c, out, written)?;
                continue;
            }
            let Some(place) = self.locate(l, pc, out)? else {
                continue;
            };
            let Place {
                from,
                branch,
                old_head,
                ctx,
                effect,
                chains,
                subagent,
                folded,
            } = place;
            let mut cur = match &ctx {
                Some(ctx) => Cursor::after(ctx, c.start),
                None => Cursor::start(c.start),
            };
            let own = call_stable(c);
            let msgs = new_messages(pc, from, kept, &own, effect.as_ref(), folded);
            let refs: Vec<&Message> = msgs.iter().collect();
            let (index, mut only): (Vec<Option<usize>>, Vec<Draft>) =
                message_drafts(&self.agent, &mut cur, &refs)?
                    .into_iter()
                    .unzip();
            if let (Some(link), Some(first)) = (subagent, only.first_mut()) {
                let mut d = first.diagnostics.to_value();
                d["subagent"] = link;
                first.diagnostics =
                    convo_core::Diagnostics::from_value(&d).map_err(StoreError::invalid)?;
            }
            let nodes = l.append_many_nodes(&self.id, &branch, &only)?;
            written.extend(
                nodes
                    .iter()
                    .zip(&only)
                    .map(|(n, d)| (n.seq, d.payload.clone())),
            );
            for (i, n) in index.iter().zip(&nodes) {
                if let Some(i) = i {
                    let h = chains[from + i];
                    self.known.entry(h).or_insert(n.hash);
                    // Also as the call's own path hashes it (a rewritten
                    // history), for its next call.
                    self.known.entry(pc.chains[from + i]).or_insert(n.hash);
                    self.note_call(&path[from + i], n.hash, h, Some(&branch));
                }
            }
            if let Some(new) = nodes.last() {
                self.moved(&branch, old_head, new, own);
            }
            out.nodes += nodes.len();
            out.recorded += 1;
        }
        Ok(())
    }

    /// `branch`'s head moved from `old_head` to `new`.
    fn moved(
        &mut self,
        branch: &BranchName,
        old_head: Option<NodeHash>,
        new: &convo_store::StoredNode,
        own: Stable,
    ) {
        if let Some(old) = old_head {
            self.heads.remove(&old);
        }
        self.heads.insert(
            new.hash,
            Head {
                branch: branch.clone(),
                ctx: Some(new.ctx),
                stable: Some(own),
            },
        );
        if *branch == BranchName::main() {
            self.main_head = Some(new.hash);
            self.empty_main = false;
        }
        if let Some(m) = self.branches.iter_mut().find(|m| m.0 == *branch) {
            m.1 = Some(new.hash);
        }
    }

    /// Where a call's messages go, and from which one on (`None`: every
    /// message is stored already). The deepest message of its path the
    /// session has decides ([`Thread::at`]); when it has none, a recorded
    /// tool call the path resends after a rewritten history
    /// ([`Thread::resume`]), or a tool call whose argument is the call's
    /// first human text ([`Thread::subagent`]); else the whole path on `main`.
    fn locate<'p>(
        &mut self,
        l: &mut Ledger<'_>,
        pc: &'p PreparedCall,
        out: &mut Ingested,
    ) -> Result<Option<Place<'p>>, StoreError> {
        let (path, chains) = (&pc.path, &pc.chains);
        let found = (0..path.len())
            .rev()
            .find(|&j| self.known.contains_key(&chains[j]));
        if found == Some(path.len() - 1) {
            return Ok(None);
        }
        if found.is_none() {
            if let Some(resumed) = self.resume(l, pc, out)? {
                return Ok(resumed);
            }
            if let Some(sub) = self.subagent(l, pc, out)? {
                return Ok(Some(sub));
            }
        }
        let at = found.map(|j| self.known[&chains[j]]);
        let (branch, old_head, ctx, effect) = self.at(l, at, pc.call.start, out)?;
        Ok(Some(Place {
            from: found.map_or(0, |j| j + 1),
            branch,
            old_head,
            ctx,
            effect,
            chains: std::borrow::Cow::Borrowed(chains),
            subagent: None,
            folded: &[],
        }))
    }

    /// Where a call continues after the stored node `at` (`None`: the
    /// end of `main`): (branch, head before, its context, the stable
    /// fields in effect there). A node inside a timeline is forked at,
    /// as every way in forks (`edit-N`).
    fn at(
        &mut self,
        l: &mut Ledger<'_>,
        at: Option<NodeHash>,
        start: Millis,
        out: &mut Ingested,
    ) -> Result<At, StoreError> {
        let Some(x) = at else {
            let (ctx, effect) = match self.main_head {
                Some(h) => match self.heads.get(&h).cloned() {
                    Some(head) => (
                        Some(match head.ctx {
                            Some(ctx) => ctx,
                            None => stored(l, &h)?.ctx,
                        }),
                        head.stable,
                    ),
                    None => (Some(stored(l, &h)?.ctx), None),
                },
                None if self.empty_main => (None, Some(no_stable())),
                None => (None, None),
            };
            return Ok((BranchName::main(), self.main_head, ctx, effect));
        };
        if let Some(h) = self.heads.get(&x).cloned() {
            let ctx = match h.ctx {
                Some(ctx) => ctx,
                None => stored(l, &x)?.ctx,
            };
            return Ok((h.branch, Some(x), Some(ctx), h.stable));
        }
        let (name, fork) = crate::thread::fork_at(l, &self.id, &x, start)?;
        let fork = fork.ok_or_else(|| StoreError::backend("no fork node"))?;
        out.nodes += 1;
        self.new_branch(&name, fork.hash);
        Ok((name, Some(fork.hash), Some(fork.ctx), None))
    }

    fn new_branch(&mut self, name: &BranchName, head: NodeHash) {
        self.branches.push((name.clone(), Some(head), false));
        self.branches.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    }

    /// A call whose history before a recorded tool call was rewritten
    /// (openai-agents hands a conversation to another agent with another
    /// system prompt and what came before summarized in one message), as
    /// the proxy finds the turn such a request continues by the answer it
    /// sends back: it continues at that tool call. Its path from there is
    /// hashed on from the stored call's thread hash; the messages before
    /// it are not recorded as their own, but kept on the first new node
    /// (`extra.rewritten_history`). `Some(None)`: all of it is stored.
    #[allow(clippy::type_complexity)]
    fn resume<'p>(
        &mut self,
        l: &mut Ledger<'_>,
        pc: &'p PreparedCall,
        out: &mut Ingested,
    ) -> Result<Option<Option<Place<'p>>>, StoreError> {
        let path = &pc.path;
        let Some((j, h)) = (0..pc.n_in).rev().find_map(|j| {
            let id = call_identity(&path[j])?;
            self.calls.get(&id).map(|&(_, h)| (j, h))
        }) else {
            return Ok(None);
        };
        let mut chains = pc.chains.clone();
        chains[j] = h;
        for k in j + 1..path.len() {
            chains[k] = thread_hash(Some(&chains[k - 1]), &path[k]);
        }
        let Some(deepest) = (j..path.len())
            .rev()
            .find(|&k| self.known.contains_key(&chains[k]))
        else {
            return Ok(None);
        };
        // The call's own hashes of what is stored, for its next call.
        for (own, h) in pc.chains[j..=deepest].iter().zip(&chains[j..=deepest]) {
            let n = self.known[h];
            self.known.entry(*own).or_insert(n);
        }
        if deepest == path.len() - 1 {
            return Ok(Some(None));
        }
        let at = self.known[&chains[deepest]];
        let (branch, old_head, ctx, effect) = self.at(l, Some(at), pc.call.start, out)?;
        Ok(Some(Some(Place {
            from: deepest + 1,
            branch,
            old_head,
            ctx,
            effect,
            chains: std::borrow::Cow::Owned(chains),
            subagent: None,
            folded: if deepest == j { &path[..j] } else { &[] },
        })))
    }

    /// A first call (no answer in its history) whose first human text is
    /// a string argument of a tool call this session recorded (an agent
    /// used as a tool, a nested agent): a subagent, on a timeline
    /// `agent-N` forked at that tool call, its first node linked to it
    /// (`subagent`), as the proxy records one ([`crate::thread::start_subagent`]).
    fn subagent<'p>(
        &mut self,
        l: &mut Ledger<'_>,
        pc: &'p PreparedCall,
        out: &mut Ingested,
    ) -> Result<Option<Place<'p>>, StoreError> {
        let input = &pc.path[..pc.n_in];
        if input
            .iter()
            .any(|m| matches!(m.role, Role::Assistant | Role::ToolCall))
        {
            return Ok(None);
        }
        let Some(key) = input
            .iter()
            .find(|m| m.role == Role::User)
            .and_then(|m| crate::thread::spawn_key(&m.text))
        else {
            return Ok(None);
        };
        let Some((node, branch, spawn)) = self.spawns.get(&key).cloned() else {
            return Ok(None);
        };
        let spot = crate::thread::Spot {
            session: self.id,
            branch: branch.unwrap_or_else(BranchName::main),
            node,
        };
        let (name, fork, link) = crate::thread::start_subagent(l, &spot, &spawn, pc.call.start)?;
        out.nodes += 1;
        self.new_branch(&name, fork.hash);
        Ok(Some(Place {
            from: 0,
            branch: name,
            old_head: Some(fork.hash),
            ctx: Some(fork.ctx),
            effect: None,
            chains: std::borrow::Cow::Borrowed(&pc.chains),
            subagent: Some(link),
            folded: &[],
        }))
    }

    /// A call exported without its messages: a turn of its own on `main`
    /// (an `invoke` from the platform and an empty `complete` carrying the
    /// call's model, usage, latency, status and span), once per span. The
    /// session's first such call says how to capture the messages.
    fn record_without_content(
        &mut self,
        l: &mut Ledger<'_>,
        c: &Call,
        out: &mut Ingested,
        written: &mut Vec<(u64, Vec<u8>)>,
    ) -> Result<(), StoreError> {
        let marker = span_marker(&c.span_id);
        if self.known.contains_key(&marker) {
            return Ok(());
        }
        let main = BranchName::main();
        let old_head = self.main_head;
        let ctx = match old_head {
            Some(h) => match self.heads.get(&h).and_then(|x| x.ctx) {
                Some(ctx) => Some(ctx),
                None => Some(stored(l, &h)?.ctx),
            },
            None => None,
        };
        let mut cur = match &ctx {
            Some(ctx) => Cursor::after(ctx, c.start),
            None => Cursor::start(c.start),
        };
        let own = call_stable(c);
        let mut otel = call_diagnostics(c, &own, None);
        if old_head.is_none()
            && let Some(o) = otel.as_object_mut()
        {
            o.insert("hint".into(), json!(super::dialect::CONTENT_HINT));
        }
        let mut m = Message::new(Role::Assistant, "assistant", "");
        m.time = Some(c.end);
        m.model = c.model.clone();
        m.extra.insert("otel".into(), otel);
        let only: Vec<Draft> = message_drafts(&self.agent, &mut cur, &[&m])?
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        let nodes = l.append_many_nodes(&self.id, &main, &only)?;
        written.extend(
            nodes
                .iter()
                .zip(&only)
                .map(|(n, d)| (n.seq, d.payload.clone())),
        );
        if let Some(new) = nodes.last() {
            self.moved(&main, old_head, new, own);
            self.known.insert(marker, new.hash);
        }
        out.nodes += nodes.len();
        out.recorded += 1;
        out.without_content += 1;
        Ok(())
    }
}

/// The messages a call adds from `from` on, as they are recorded: times,
/// the model on its output, `extra.otel` (the call's diagnostics on the
/// last), and on the first what the client sent instead of the recorded
/// history (`folded`).
fn new_messages(
    pc: &PreparedCall,
    from: usize,
    kept: bool,
    own: &Stable,
    effect: Option<&Stable>,
    folded: &[Message],
) -> Vec<Message> {
    let c = &pc.call;
    let mut msgs: Vec<Message> = pc.path[from..].to_vec();
    let last = msgs.len().saturating_sub(1);
    for (k, m) in msgs.iter_mut().enumerate() {
        let output = from + k >= pc.n_in;
        m.time = Some(if output { c.end } else { c.start });
        if output && m.role != Role::Tool {
            m.model = c.model.clone();
        }
        let otel = if k == last && kept {
            kept_call_diagnostics(c, pc.index, own, effect)
        } else if k == last {
            call_diagnostics(c, own, effect)
        } else if kept && !matches!(m.role, Role::Assistant | Role::ToolCall) {
            // The export's row says it came as telemetry
            // (`resolve_kept`); an answer keeps its marker, which
            // replay finds calls by.
            continue;
        } else {
            Value::Object(Map::new())
        };
        m.extra.insert("otel".into(), otel);
    }
    if let (false, Some(first)) = (folded.is_empty(), msgs.first_mut()) {
        let was: Vec<Value> = folded
            .iter()
            .map(|m| json!({"role": m.role.as_str(), "text": m.text}))
            .collect();
        first
            .extra
            .insert("rewritten_history".into(), Value::Array(was));
    }
    msgs
}

fn stored(l: &mut Ledger<'_>, h: &NodeHash) -> Result<convo_store::StoredNode, StoreError> {
    l.tx()
        .node(h)?
        .ok_or_else(|| StoreError::corrupt(format!("node {h} is missing")))
}

/// A call's [`STABLE`] fields (`Null` where it has none).
fn call_stable(c: &Call) -> Stable {
    let mut s = no_stable();
    if !c.trace_id.is_empty() {
        s[0] = json!(c.trace_id);
    }
    for (i, k) in STABLE.iter().enumerate().skip(1) {
        if let Some(v) = c.info.get(*k) {
            s[i] = v.clone();
        }
    }
    s
}

/// The stable fields a node's `extra.otel` sets, over `s`.
fn apply_stable(s: &mut Stable, otel: &Value) {
    for (i, k) in STABLE.iter().enumerate() {
        let v = if i == 0 {
            otel.get(k)
        } else {
            otel.get("call").and_then(|c| c.get(k))
        };
        if let Some(v) = v {
            s[i] = v.clone();
        }
    }
}

/// `extra.otel` of a call's last node: its span id, `call` (its info) and
/// the stable fields that differ from `effect` (all of them, nulls
/// included, where what is in effect is not known).
fn call_diagnostics(c: &Call, own: &Stable, effect: Option<&Stable>) -> Value {
    let mut call = c.info.clone();
    if !c.parent_span_id.is_empty() {
        call.insert("parent_span_id".into(), json!(c.parent_span_id));
    }
    let mut otel = Map::new();
    otel.insert("span_id".into(), json!(c.span_id));
    with_stable(otel, call, own, effect)
}

/// `extra.otel` of a call's last node when its export body is kept: its
/// place among the calls read from that body (`call.n`, left out for the
/// first), usage and status,
/// and the stable fields that differ from `effect`. The rest (span and
/// parent span ids, latency, the attributes as received, where the
/// messages came from) is in the body, and [`resolve_kept`] reads it
/// from there.
fn kept_call_diagnostics(c: &Call, index: usize, own: &Stable, effect: Option<&Stable>) -> Value {
    let mut call = Map::new();
    if index > 0 {
        call.insert("n".into(), json!(index));
    }
    for k in ["usage", "status"] {
        if let Some(v) = c.info.get(k) {
            call.insert(k.into(), v.clone());
        }
    }
    with_stable(Map::new(), call, own, effect)
}

/// `otel` with `call` inside and the [`STABLE`] fields that differ from
/// `effect` (all of them, nulls included, where it is not known).
fn with_stable(
    mut otel: Map<String, Value>,
    mut call: Map<String, Value>,
    own: &Stable,
    effect: Option<&Stable>,
) -> Value {
    for (i, k) in STABLE.iter().enumerate() {
        let write = match effect {
            Some(e) => e[i] != own[i],
            None => true,
        };
        let target = if i == 0 { &mut otel } else { &mut call };
        if write {
            target.insert((*k).into(), own[i].clone());
        } else {
            target.remove(*k);
        }
    }
    otel.insert("call".into(), Value::Object(call));
    Value::Object(otel)
}

/// Each node's whole `extra.otel` for the diagnostics of a timeline's
/// nodes (root first): a call's node with the [`STABLE`] fields in
/// effect filled in (those `null` left out), any other node's as stored,
/// `None` where a node has none.
pub fn resolve(diagnostics: &[Value]) -> Vec<Option<Value>> {
    let mut effect = no_stable();
    diagnostics
        .iter()
        .map(|d| {
            let otel = d.pointer("/extra/otel")?;
            if otel.get("call").is_none() {
                return Some(otel.clone());
            }
            apply_stable(&mut effect, otel);
            let mut o = otel.clone();
            for (i, k) in STABLE.iter().enumerate() {
                let target = if i == 0 {
                    o.as_object_mut()
                } else {
                    o.get_mut("call").and_then(Value::as_object_mut)
                };
                if let Some(t) = target {
                    if effect[i].is_null() {
                        t.remove(*k);
                    } else {
                        t.insert((*k).into(), effect[i].clone());
                    }
                }
            }
            Some(o)
        })
        .collect()
}

/// Whether a node's `extra.otel` leaves its call's details to the kept
/// export body (written by [`kept_call_diagnostics`]: a `call` without a
/// `span_id` beside it).
pub fn left_to_body(otel: &Value) -> bool {
    otel.get("call").is_some() && otel.get("span_id").is_none()
}

/// Each node's whole `extra.otel`, as [`resolve`] gives it, for a
/// timeline's nodes (root first), with what a call's node leaves to its
/// kept export body ([`left_to_body`]: span and parent span ids, latency,
/// the attributes as received) read back from that body, and the marker
/// (`{}`) of every other message the export wrote: the export whose
/// nodes include the node, its calls read as the receiver read them
/// ([`super::read_body`]), the `n`-th (or, should the reading have
/// changed since, the one whose last message is the node's). A node whose
/// body is gone (redacted) keeps what it stores. Reads and rebuilds the
/// kept bodies of the timeline's session once.
pub fn resolve_kept(
    store: &mut convo_store::Store,
    nodes: &[(&convo_store::StoredNode, &[u8])],
) -> Result<Vec<Option<Value>>, StoreError> {
    if !nodes
        .iter()
        .any(|(n, _)| n.node.diagnostics.as_str().contains("\"otel\""))
    {
        return Ok(vec![None; nodes.len()]);
    }
    let diags: Vec<Value> = nodes
        .iter()
        .map(|(n, _)| n.node.diagnostics.to_value())
        .collect();
    let mut out = resolve(&diags);
    let want: Vec<usize> = (0..nodes.len())
        .filter(|&i| out[i].as_ref().is_some_and(left_to_body))
        .collect();
    let Some(first) = want.first() else {
        return Ok(out);
    };
    let want: HashSet<usize> = want.iter().copied().collect();
    let mut done = vec![false; nodes.len()];
    let session = nodes[*first].0.node.session;
    // One body at a time, each read for the calls of the wanted nodes it
    // wrote (the first body holding a node answers for it), then dropped.
    store.each_otlp_export(Some(&session), &mut |b| {
        let Some((from, to)) = b.nodes else {
            return Ok(());
        };
        let mut calls: Option<Vec<Call>> = None;
        for (i, (n, payload)) in nodes.iter().enumerate() {
            if n.seq < from || n.seq > to {
                continue;
            }
            // A message the export wrote without a call's details: its marker.
            if out[i].is_none() {
                out[i] = Some(Value::Object(Map::new()));
            }
            if !want.contains(&i) || done[i] {
                continue;
            }
            done[i] = true;
            let calls = calls.get_or_insert_with(|| {
                super::read_body(&b.media, &b.body, b.body.len())
                    .map(|(calls, _)| calls)
                    .unwrap_or_default()
            });
            let text = String::from_utf8_lossy(payload);
            let last = |c: &Call| {
                c.output
                    .last()
                    .or(c.input.last())
                    .is_some_and(|m| m.text == text)
            };
            let k = out[i]
                .as_ref()
                .and_then(|o| o.pointer("/call/n"))
                .map_or(Some(0), Value::as_u64)
                .and_then(|k| usize::try_from(k).ok());
            let Some(c) = k
                .and_then(|k| calls.get(k))
                .filter(|c| last(c))
                .or_else(|| calls.iter().find(|c| last(c)))
            else {
                continue;
            };
            let mut full = call_diagnostics(c, &call_stable(c), None);
            if let Some(o) = full.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            if let Some(call) = full.get_mut("call").and_then(Value::as_object_mut) {
                call.retain(|_, v| !v.is_null());
            }
            out[i] = Some(full);
        }
        Ok(())
    })?;
    Ok(out)
}

/// Names each tool result of a path after the tool its call id went to
/// earlier in the path.
fn name_tool_results(path: &mut [Message]) {
    let mut names: HashMap<String, String> = HashMap::new();
    for m in path {
        let id = m
            .extra
            .get("tool_call_id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (m.role, id) {
            (Role::ToolCall, Some(id)) => {
                if let Some(to) = &m.to {
                    names.insert(id, to.clone());
                }
            }
            (Role::Tool, Some(id)) => {
                if let Some(n) = names.get(&id) {
                    m.speaker = n.clone();
                }
            }
            _ => {}
        }
    }
}

/// One message's thread hash, chained on the one before it.
fn thread_hash(prev: Option<&ThreadHash>, m: &Message) -> ThreadHash {
    let mut buf = Vec::with_capacity(m.text.len() + 96);
    let mut put = |b: &[u8]| {
        buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
        buf.extend_from_slice(b);
    };
    put(b"convo-otel-thread-v2");
    put(prev.map_or(&[][..], |p| &p[..]));
    put(m.role.as_str().as_bytes());
    put(m.to.as_deref().unwrap_or("").as_bytes());
    put(m.text.as_bytes());
    let d = convo_core::sha256(&buf);
    let mut out = [0u8; 16];
    out.copy_from_slice(&d.0[..16]);
    out
}

/// The thread hash of each message of a path.
pub fn thread_hashes(path: &[Message]) -> Vec<ThreadHash> {
    let mut out: Vec<ThreadHash> = Vec::with_capacity(path.len());
    for m in path {
        let h = thread_hash(out.last(), m);
        out.push(h);
    }
    out
}
