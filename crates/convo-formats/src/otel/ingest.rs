//! [`Call`]s → sessions: conversations, not spans.
//!
//! **Sessions.** Calls are grouped by [`Call::thread`]
//! (`gen_ai.conversation.id`, then a session id, then the trace); each
//! thread is one session, id [`session_id`] = `SessionId::derived("otel:"
//! + thread)`, created by the first call that arrives for it (agent: the
//! `gen_ai.agent.name` or `service.name`; title: the first user message).
//!
//! **Each message once.** Every LLM call resends the whole history, so a
//! call's messages (input, then output) are read as a path and each
//! message gets a *thread hash*: SHA-256 (first 128 bits) over the previous message's
//! thread hash and this message's role, target and text (length-prefixed),
//! kept in its node's diagnostics (`extra.otel.thread`). A call's path is
//! matched against the session's nodes by those hashes; the deepest
//! message already stored is where the call continues:
//!
//! - every message stored (a retried export, a call that arrives after a
//!   later call that resent its messages): nothing is written;
//! - the deepest stored message is a timeline's head: the rest of the path
//!   is appended there;
//! - it is inside a timeline (the history was edited, a regeneration):
//!   the session forks there (`otel-{span id}`) and the rest goes on the
//!   new timeline;
//! - none is stored (the first call, or a call with unrelated history in
//!   the same trace): the whole path is appended to `main`.
//!
//! So the order in which calls and batches arrive does not matter for
//! what is stored once, only for which call's diagnostics a message
//! carries. Calls of one request are taken oldest first.
//!
//! **Cost per request.** Threading needs each stored message's thread hash
//! and each timeline's head. Read from the store, that is every node of
//! the session, so a request would cost more as its session grows. A
//! [`ThreadCache`] (the receiver keeps one) holds them between requests;
//! a request then reads the session's row and its branches only, and
//! takes the cached state when the branches (name, head, sealed) are the
//! ones it left: every write to a session moves a head or adds a branch,
//! so another writer (a second server, `convo fork`, a transaction that
//! did not commit) is seen and the state read again. Bounded: at most
//! [`CACHE_MESSAGES`] thread hashes in all, the least recently used
//! sessions dropped first.
//!
//! Messages become nodes through [`message_drafts`] (the import mapping:
//! user → invoke, tool call → request, tool result → response, answer →
//! complete). Each new node's diagnostics carry `extra.otel.thread` (the
//! thread hash, its first 128 bits); the last node a call writes also
//! the trace and span ids and `call`: the
//! call's dialect, provider, usage, latency, status and the span's other
//! attributes as received.

use super::Call;
use crate::ledger::{Cursor, derived_title, message_drafts};
use crate::model::{Conversation, Message, Role};
use convo_core::{BranchName, HashPrefix, Millis, NodeHash, SessionId};
use convo_store::{Draft, Ledger, StoreError};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
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
}

/// The session a thread is recorded in.
pub fn session_id(thread: &str) -> SessionId {
    SessionId::derived(format!("otel:{thread}").as_bytes())
}

/// The most thread hashes a [`ThreadCache`] keeps (about 100 bytes each).
pub const CACHE_MESSAGES: usize = 250_000;

/// Threading state kept between requests (see the module docs): a
/// request then costs what it carries, not what its session holds.
#[derive(Debug, Default)]
pub struct ThreadCache {
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    threads: HashMap<SessionId, (u64, Thread)>,
    tick: u64,
    messages: usize,
    /// Traces whose LLM calls were received (bounded: forgotten past
    /// LLM_TRACES), so an agent span exported later is not a call.
    llm_traces: std::collections::HashSet<String>,
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
    fn keep(&self, calls: &[Call]) -> Vec<bool> {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if c.llm_traces.len() > LLM_TRACES {
            c.llm_traces.clear();
        }
        for call in calls.iter().filter(|x| !x.agent_span) {
            if !c.llm_traces.contains(&call.trace_id) {
                c.llm_traces.insert(call.trace_id.clone());
            }
        }
        calls
            .iter()
            .map(|x| !x.agent_span || !c.llm_traces.contains(&x.trace_id))
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

    /// Sessions held (for tests and benchmarks).
    pub fn sessions(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .threads
            .len()
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
    let mut by_thread: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for (c, keep) in calls.iter().zip(cache.keep(calls)) {
        if keep {
            by_thread.entry(c.thread.as_str()).or_default().push(c);
        }
    }
    let mut out = Ingested {
        calls: calls.len(),
        ..Ingested::default()
    };
    for (thread, mut cs) in by_thread {
        cs.sort_by(|a, b| (a.start, a.end, &a.span_id).cmp(&(b.start, b.end, &b.span_id)));
        out.sessions.push(session_id(thread));
        let mut t = Thread::open(l, thread, &cs, now, cache)?;
        t.record(l, &cs, &mut out)?;
        t.branches = branch_marks(l, &t.id)?;
        cache.put(t);
    }
    Ok(out)
}

/// What a session's branches are: (name, head, sealed), by name. Any
/// write to the session changes it.
type Marks = Vec<(BranchName, Option<NodeHash>, bool)>;

fn branch_marks(l: &mut Ledger<'_>, id: &SessionId) -> Result<Marks, StoreError> {
    let mut v: Marks = l
        .tx()
        .branches(Some(id))?
        .into_iter()
        .map(|b| (b.name, b.head, b.sealed))
        .collect();
    v.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    Ok(v)
}

/// A session's threading state: which node each thread hash names, which
/// node heads which timeline, and the branches it was read from.
#[derive(Debug)]
struct Thread {
    id: SessionId,
    agent: String,
    known: HashMap<String, NodeHash>,
    heads: HashMap<NodeHash, BranchName>,
    main_head: Option<NodeHash>,
    branches: Marks,
}

impl Thread {
    fn open(
        l: &mut Ledger<'_>,
        thread: &str,
        cs: &[&Call],
        now: Millis,
        cache: &ThreadCache,
    ) -> Result<Thread, StoreError> {
        let id = session_id(thread);
        let row = match l.tx().session(&id)? {
            Some(row) => row,
            None => {
                let agent = cs
                    .iter()
                    .find_map(|c| c.agent.clone())
                    .filter(|a| !a.trim().is_empty())
                    .unwrap_or_else(|| "otel".into());
                let title = cs
                    .iter()
                    .find_map(|c| derived_title(&Conversation::linear(c.input.clone())));
                let created = cs
                    .first()
                    .map_or(now, |c| if c.start > 0 { c.start } else { now });
                l.create_session(id, &agent, title.as_deref(), created)?
            }
        };
        let branches = branch_marks(l, &id)?;
        if let Some(t) = cache.take(&id)
            && t.branches == branches
            && t.agent == row.agent
        {
            return Ok(t);
        }
        let mut known = HashMap::new();
        for (n, _) in l.tx().session_nodes(&id, false)? {
            let d = n.node.diagnostics.to_value();
            if let Some(t) = d.pointer("/extra/otel/thread").and_then(Value::as_str) {
                known.entry(t.to_owned()).or_insert(n.hash);
            }
        }
        let mut heads = HashMap::new();
        let mut main_head = None;
        for b in l.tx().branches(Some(&id))? {
            if b.sealed {
                continue;
            }
            if b.name == BranchName::main() {
                main_head = b.head;
            }
            if let Some(h) = b.head {
                heads.insert(h, b.name);
            }
        }
        Ok(Thread {
            id,
            agent: row.agent,
            known,
            heads,
            main_head,
            branches,
        })
    }

    fn record(
        &mut self,
        l: &mut Ledger<'_>,
        cs: &[&Call],
        out: &mut Ingested,
    ) -> Result<(), StoreError> {
        for c in cs {
            let path = path_of(c);
            if path.is_empty() {
                continue;
            }
            let chains = thread_hashes(&path);
            let found = (0..path.len())
                .rev()
                .find(|&j| self.known.contains_key(&chains[j]));
            if found == Some(path.len() - 1) {
                continue;
            }
            let from = found.map_or(0, |j| j + 1);
            let (branch, old_head, mut cur) = match found {
                Some(j) => {
                    let x = self.known[&chains[j]];
                    match self.heads.get(&x) {
                        Some(b) => (
                            b.clone(),
                            Some(x),
                            Cursor::after(&stored(l, &x)?.ctx, c.start),
                        ),
                        None => {
                            let name = self.fork_name(l, c)?;
                            let prefix =
                                HashPrefix::parse(&x.to_hex()).map_err(StoreError::invalid)?;
                            let fork = l.fork(&self.id, &prefix, &name, c.start)?;
                            out.nodes += 1;
                            self.heads.insert(fork.hash, name.clone());
                            (name, Some(fork.hash), Cursor::after(&fork.ctx, c.start))
                        }
                    }
                }
                None => {
                    let cur = match self.main_head {
                        Some(h) => Cursor::after(&stored(l, &h)?.ctx, c.start),
                        None => Cursor::start(c.start),
                    };
                    (BranchName::main(), self.main_head, cur)
                }
            };
            let mut msgs: Vec<Message> = path[from..].to_vec();
            let n_in = c.input.len();
            let last = msgs.len() - 1;
            for (k, m) in msgs.iter_mut().enumerate() {
                let at = from + k;
                let output = at >= n_in;
                m.time = Some(if output { c.end } else { c.start });
                if output && m.role != Role::Tool {
                    m.model = c.model.clone();
                }
                let mut otel = json!({ "thread": chains[at] });
                if k == last {
                    otel["trace_id"] = json!(c.trace_id);
                    otel["span_id"] = json!(c.span_id);
                    let mut call = c.info.clone();
                    if !c.parent_span_id.is_empty() {
                        call.insert("parent_span_id".into(), json!(c.parent_span_id));
                    }
                    otel["call"] = Value::Object(call);
                }
                m.extra.insert("otel".into(), otel);
            }
            let refs: Vec<&Message> = msgs.iter().collect();
            let drafts = message_drafts(&self.agent, &mut cur, &refs)?;
            let only: Vec<Draft> = drafts.iter().map(|(_, d)| d.clone()).collect();
            let hashes = l.append_many(&self.id, &branch, &only)?;
            for ((i, _), h) in drafts.iter().zip(&hashes) {
                if let Some(i) = i {
                    self.known.entry(chains[from + i].clone()).or_insert(*h);
                }
            }
            if let Some(new) = hashes.last() {
                if let Some(old) = old_head {
                    self.heads.remove(&old);
                }
                self.heads.insert(*new, branch.clone());
                if branch == BranchName::main() {
                    self.main_head = Some(*new);
                }
            }
            out.nodes += hashes.len();
            out.recorded += 1;
        }
        Ok(())
    }

    /// `otel-{first 8 hex of the span id}`, or with `-2`, `-3`… when taken.
    fn fork_name(&self, l: &mut Ledger<'_>, c: &Call) -> Result<BranchName, StoreError> {
        let base = format!("otel-{}", c.span_id.get(..8).unwrap_or(&c.span_id));
        let mut name = base.clone();
        let mut n = 2;
        loop {
            let b = BranchName::new(&name).map_err(StoreError::invalid)?;
            if l.tx().branch(&self.id, &b)?.is_none() {
                return Ok(b);
            }
            name = format!("{base}-{n}");
            n += 1;
        }
    }
}

fn stored(l: &mut Ledger<'_>, h: &NodeHash) -> Result<convo_store::StoredNode, StoreError> {
    l.tx()
        .node(h)?
        .ok_or_else(|| StoreError::corrupt(format!("node {h} is missing")))
}

/// A call's messages as one path (input, then output), each tool result
/// named after the tool its call id went to earlier in the path.
fn path_of(c: &Call) -> Vec<Message> {
    let mut path: Vec<Message> = c.input.iter().chain(&c.output).cloned().collect();
    let mut names: HashMap<String, String> = HashMap::new();
    for m in &mut path {
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
    path
}

/// The thread hash of each message of a path (32 hex digits).
pub fn thread_hashes(path: &[Message]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(path.len());
    for m in path {
        let mut buf = Vec::new();
        let mut put = |b: &[u8]| {
            buf.extend_from_slice(&(b.len() as u64).to_le_bytes());
            buf.extend_from_slice(b);
        };
        put(b"convo-otel-thread-v1");
        put(out.last().map_or("", String::as_str).as_bytes());
        put(m.role.as_str().as_bytes());
        put(m.to.as_deref().unwrap_or("").as_bytes());
        put(m.text.as_bytes());
        // 128 bits: enough to tell a session's messages apart, and
        // stored on every node.
        let mut h = convo_core::sha256(&buf).to_hex();
        h.truncate(32);
        out.push(h);
    }
    out
}
