//! Recording through the group-commit writer ([`convo_runtime::writer`]):
//! concurrent calls' turns share one store transaction, as `convo serve`'s
//! appends do, with the same writer (batches, a failing batch retried call
//! by call, a new connection after the database went away, WAL checkpoints
//! on another thread). A call is answered only once its commit is done, so
//! what was answered is kept.
//!
//! What is the proxy's own: how a batch of calls is recorded (session
//! names resolved or created once per batch, calls threaded by content),
//! and the caches a batch teaches (session names, thread keys), kept only
//! once it has committed.

use crate::Target;
use crate::record::{self, Exchange};
use crate::thread::{self, Spawn, Spot};
use convo_core::{BranchName, SessionId};
use convo_runtime::writer::{self, Work};
use convo_runtime::{Hub, StorePool};
use convo_store::{Ledger, Result, Store, StoreError, StoredNode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Calls one batch records at most.
pub const MAX_CALLS: usize = 256;

/// What the writer shares with the proxy: caches filled after commits.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Thread keys (see [`thread`]) → where the conversation continues.
    pub threads: Mutex<thread::ThreadIndex>,
    /// Session names already resolved.
    pub names: Mutex<HashMap<String, SessionId>>,
    /// The title of this run's session for calls that are not a
    /// conversation (see [`thread`]).
    pub calls_title: String,
}

impl Shared {
    /// The caches of a proxy started now.
    pub fn new() -> Shared {
        let now = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M:%S UTC");
        Shared {
            threads: Mutex::default(),
            names: Mutex::default(),
            calls_title: format!("calls (proxy run {now})"),
        }
    }
}

pub(crate) struct Job {
    pub target: Target,
    pub ex: Exchange,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job").field("path", &self.ex.path).finish()
    }
}

/// How the writer records calls.
#[derive(Debug)]
pub(crate) struct Recording {
    shared: Arc<Shared>,
}

impl Work for Recording {
    type Job = Job;
    type Done = (StoredNode, Learnt);
    const MAX_BATCH: usize = MAX_CALLS;

    fn write(&mut self, store: &mut Store, jobs: &[Job]) -> Result<Vec<(StoredNode, Learnt)>> {
        record_batch(&self.shared, store, jobs)
    }

    fn committed(&mut self, done: &mut (StoredNode, Learnt)) {
        std::mem::take(&mut done.1).keep(&self.shared);
    }

    /// A locked store is waited out: the callers have their answers.
    fn waits_while_busy(&self) -> bool {
        true
    }
}

/// The handle calls are sent to for recording.
#[derive(Debug)]
pub(crate) struct Writer {
    inner: writer::Writer<Recording>,
}

impl Writer {
    /// Starts the writer thread, recording into the pool's store.
    pub fn start(shared: Arc<Shared>, pool: &StorePool, hub: Option<Hub>) -> Result<Writer> {
        Ok(Writer {
            inner: writer::Writer::start("convo-proxy-writer", pool, Recording { shared }, hub)?,
        })
    }

    /// `true` while the store refuses recordings as locked.
    pub fn stalled(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.stalled()
    }

    /// Records `ex` where `target` says (in a transaction shared with other
    /// calls) and returns the last node recorded.
    pub async fn record(&self, target: Target, ex: Exchange) -> Result<StoredNode> {
        let (node, _) = self.inner.submit(Job { target, ex }).await?;
        Ok(node)
    }
}

/// What a recorded call taught the caches (kept once committed).
#[derive(Debug, Default)]
pub(crate) struct Learnt {
    names: Vec<(String, SessionId)>,
    thread: Vec<(String, Spot)>,
    spawns: Vec<(Spot, Spawn)>,
}

impl Learnt {
    fn keep(self, shared: &Shared) {
        if !self.names.is_empty()
            && let Ok(mut m) = shared.names.lock()
        {
            m.extend(self.names);
        }
        if !self.thread.is_empty()
            && let Ok(mut idx) = shared.threads.lock()
        {
            for (k, spot) in self.thread {
                idx.insert(k, spot);
            }
        }
        if !self.spawns.is_empty()
            && let Ok(mut idx) = shared.threads.lock()
        {
            for (spot, spawn) in self.spawns {
                idx.insert_spawn(spot, spawn);
            }
        }
    }
}

/// Where a thread key points: this batch, this process, then the store
/// (one indexed probe).
fn find(
    shared: &Shared,
    l: &mut Ledger<'_>,
    spots: &HashMap<String, Spot>,
    key: &str,
) -> Result<Option<Spot>> {
    if let Some(s) = spots.get(key) {
        return Ok(Some(s.clone()));
    }
    let known = shared
        .threads
        .lock()
        .map_err(|_| poisoned())?
        .get(key)
        .cloned();
    match known {
        Some(s) => Ok(Some(s)),
        None => thread::ThreadIndex::find(l.tx(), key),
    }
}

/// A call naming a timeline the session does not have yet: the timeline
/// is created from the session's head (its `main`'s head), so the call is
/// recorded where it says (`true`). A session with nothing recorded yet
/// (`false`): the call's turn is recorded on `main` and the timeline
/// forked at its end. Never answered unrecorded: an invalid branch name
/// is refused before the upstream is called (see `Proxy::call`).
fn ensure_branch(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    now: convo_core::Millis,
) -> Result<bool> {
    if l.tx().branch(session, branch)?.is_some() {
        return Ok(true);
    }
    let head = l
        .tx()
        .branch(session, &BranchName::main())?
        .and_then(|b| b.head);
    match head {
        Some(h) => {
            let from = convo_core::HashPrefix::parse(&h.to_hex()).map_err(StoreError::invalid)?;
            l.fork(session, &from, branch, now)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// A first request (no answer in it yet) whose client names a
/// conversation the store has (its identity, [`crate::body::client_key`],
/// on a `complete`): the client edited or regenerated the first message.
/// Recorded in that session, on a new timeline `edit-N`:
///
/// - the same first human text as a first turn of the session (a
///   regenerate): forked at that turn's `invoke`, the new answer recorded
///   as the turn's `request`, `response`, `complete` (`true`);
/// - another first human text (an edit): the first message is a session's
///   first node, so nothing comes before it to fork at; the timeline
///   starts empty ([`Ledger::create_branch`], as a replay's does), in the
///   same session (`false`).
///
/// `None` (a new session) when no identity or no recorded conversation.
fn first_message_fork(
    shared: &Shared,
    l: &mut Ledger<'_>,
    spots: &HashMap<String, Spot>,
    ex: &record::Exchange,
    api: crate::api::Api,
    now: convo_core::Millis,
) -> Result<Option<(SessionId, BranchName, bool)>> {
    let facts = ex.facts();
    // A first request only (nothing answered before in it): a longer one
    // that matched nothing is not an edit of the first message.
    let first = facts.messages.as_ref().is_some_and(|m| m.before.is_none());
    let Some(key) = facts.client.clone().filter(|_| first) else {
        return Ok(None);
    };
    let Some(spot) = find(shared, l, spots, &key)? else {
        return Ok(None);
    };
    let first_text = |body: &[u8]| {
        let req = crate::api::parse(body)?;
        let msgs = crate::api::messages(api, Some(&req))?;
        crate::api::first_human(&msgs).map(|(_, t)| t)
    };
    let Some(text) = first_text(&ex.request_body) else {
        return Ok(None);
    };
    // The session's first turns: invokes at depth 1, their requests at 2.
    let links = l.tx().session_links_at(&spot.session, 1, 2)?;
    let mut again = None;
    for inv in links
        .iter()
        .filter(|k| k.depth == 1 && k.kind == convo_core::Kind::Invoke)
    {
        let Some(req) = links.iter().find(|k| {
            k.depth == 2 && k.kind == convo_core::Kind::Request && k.parent == Some(inv.hash)
        }) else {
            continue;
        };
        let read = l.tx().nodes_with_payloads(&[req.hash])?;
        if let Some(Some((_, body))) = read.first()
            && first_text(body).as_deref() == Some(text.as_str())
        {
            again = Some(inv.hash);
            break;
        }
    }
    let name = thread::free_edit_branch(l, &spot.session)?;
    match again {
        Some(invoke) => {
            let from =
                convo_core::HashPrefix::parse(&invoke.to_hex()).map_err(StoreError::invalid)?;
            l.fork(&spot.session, &from, &name, now)?;
        }
        None => {
            l.create_branch(&spot.session, &name, now)?;
        }
    }
    Ok(Some((spot.session, name, again.is_some())))
}

/// A new conversation whose first human text is an argument of a tool
/// call a recorded answer made (Claude Code's `Task`/`Agent`, an agent
/// used as a tool, [`thread::Spawn`]): a subagent. It gets a timeline of
/// its own, `agent-N`, forked at the `complete` of the turn that made the
/// call, and its first `invoke` names that call in its diagnostics
/// (`subagent`: `started_by` the complete's hash, its `branch`,
/// `tool_call_id`, `tool`). `None` when it is not one.
fn subagent_of(
    shared: &Shared,
    l: &mut Ledger<'_>,
    spawns: &HashMap<String, (Spot, Spawn)>,
    ex: &record::Exchange,
    api: crate::api::Api,
    now: convo_core::Millis,
) -> Result<Option<(SessionId, BranchName, serde_json::Value)>> {
    let known = !spawns.is_empty() || shared.threads.lock().map_err(|_| poisoned())?.has_spawns();
    let first = ex
        .facts()
        .messages
        .as_ref()
        .is_some_and(|m| m.before.is_none());
    if !known || !first {
        return Ok(None);
    }
    let Some(key) = thread::spawned_by(api, ex.request_json().as_ref()) else {
        return Ok(None);
    };
    let found = match spawns.get(&key) {
        Some(x) => Some(x.clone()),
        None => shared
            .threads
            .lock()
            .map_err(|_| poisoned())?
            .spawn(&key)
            .cloned(),
    };
    let Some((spot, spawn)) = found else {
        return Ok(None);
    };
    let (name, _, link) = thread::start_subagent(l, &spot, &spawn, now)?;
    Ok(Some((spot.session, name, link)))
}

fn poisoned() -> StoreError {
    StoreError::backend("the thread index lock was poisoned")
}

/// Records `jobs` in one transaction; per job its last node and what it
/// taught the caches.
fn record_batch(
    shared: &Shared,
    store: &mut Store,
    jobs: &[Job],
) -> Result<Vec<(StoredNode, Learnt)>> {
    // Reads that need the store outside a write transaction come first.
    let mut found: HashMap<String, Option<SessionId>> = HashMap::new();
    for j in jobs {
        if let Target::Named { session, .. } = &j.target
            && !found.contains_key(session)
        {
            let cached = shared
                .names
                .lock()
                .ok()
                .and_then(|m| m.get(session).copied());
            let id = match cached {
                Some(id) => Some(id),
                None => match store.find_session(session) {
                    Ok(row) => Some(row.id),
                    Err(StoreError::NoSession(_)) => None,
                    Err(e) => return Err(e),
                },
            };
            found.insert(session.clone(), id);
        }
    }
    store.transaction(|l| {
        // Within the batch: names created and thread keys recorded by
        // earlier calls of the same batch (not yet committed).
        let mut names = found.clone();
        let mut spots: HashMap<String, Spot> = HashMap::new();
        let mut spawns: HashMap<String, (Spot, Spawn)> = HashMap::new();
        jobs.iter()
            .map(|j| record_one(shared, l, j, &mut names, &mut spots, &mut spawns))
            .collect()
    })
}

/// Where a call is recorded: its session and timeline, the timeline to
/// fork after it when it named one its session does not have yet, and
/// what kind of first call it is.
#[derive(Default)]
struct Landing {
    /// A regenerated first answer: the timeline's head is that turn's invoke.
    regenerate: bool,
    /// A subagent's first call: the call that started it.
    started_by: Option<serde_json::Value>,
    /// A timeline named before anything was recorded: forked after the turn.
    then_fork: Option<BranchName>,
}

fn record_one(
    shared: &Shared,
    l: &mut Ledger<'_>,
    job: &Job,
    names: &mut HashMap<String, Option<SessionId>>,
    spots: &mut HashMap<String, Spot>,
    spawns: &mut HashMap<String, (Spot, Spawn)>,
) -> Result<(StoredNode, Learnt)> {
    let ex = &job.ex;
    let now = ex.started_at;
    let mut learnt = Learnt::default();
    let api = ex.api.unwrap_or(crate::api::Api::Other);
    let named = match &job.target {
        Target::Named { session, branch } => Some((session.clone(), branch.clone())),
        // Not a conversation: this run's `calls` session.
        Target::Auto if !api.is_conversation() => Some((shared.calls_title.clone(), "main".into())),
        Target::Auto => None,
    };
    // A request's retry key reads it whole: only when an attempt awaits one.
    let retry = std::cell::OnceCell::new();
    let retry_key = || retry.get_or_init(|| ex.retry_key()).clone();
    let (id, branch, how) = match named {
        Some((session, branch)) => named_landing(l, session, &branch, names, &mut learnt, now)?,
        None => threaded_landing(shared, l, ex, api, spots, spawns, &retry_key)?,
    };
    let linked;
    let ex = match how.started_by {
        Some(link) => {
            let mut e = ex.clone();
            e.subagent = Some(link);
            linked = e;
            &linked
        }
        None => ex,
    };
    let rec = if how.regenerate {
        record::record_answer_in(l, &id, &branch, ex)?
    } else {
        record::record_in(l, &id, &branch, ex)?
    };
    if let (Some(name), Some(last)) = (&how.then_fork, rec.nodes.last()) {
        let from =
            convo_core::HashPrefix::parse(&last.hash.to_hex()).map_err(StoreError::invalid)?;
        l.fork(&id, &from, name, now)?;
    }
    if let Some(done) = rec.nodes.last() {
        let spot = Spot {
            session: id,
            branch: branch.clone(),
            node: done.hash,
        };
        remember(ex, &rec, done, spot, spots, spawns, &mut learnt, &retry_key);
    }
    let last = rec
        .nodes
        .last()
        .cloned()
        .ok_or_else(|| StoreError::backend("nothing recorded"))?;
    Ok((last, learnt))
}

/// A call that names its session (created when new) and timeline.
fn named_landing(
    l: &mut Ledger<'_>,
    session: String,
    branch: &str,
    names: &mut HashMap<String, Option<SessionId>>,
    learnt: &mut Learnt,
    now: convo_core::Millis,
) -> Result<(SessionId, BranchName, Landing)> {
    let branch = BranchName::new(branch)
        .map_err(|e| StoreError::Invalid(format!("branch `{branch}`: {e}").into()))?;
    let id = match names.get(&session).copied().flatten() {
        Some(id) => id,
        None => {
            // Re-checked inside the write transaction: two first
            // calls naming the same new title create one session.
            let existing = l
                .tx()
                .sessions()?
                .into_iter()
                .find(|s| s.title.as_deref() == Some(session.as_str()));
            match existing {
                Some(s) => s.id,
                None => {
                    l.create_session(
                        SessionId::new_random(),
                        thread::PROXY_AGENT,
                        Some(&session),
                        now,
                    )?
                    .id
                }
            }
        }
    };
    names.insert(session.clone(), Some(id));
    learnt.names.push((session, id));
    if ensure_branch(l, &id, &branch, now)? {
        return Ok((id, branch, Landing::default()));
    }
    // Nothing recorded yet: the turn goes on `main` and the timeline
    // starts from it.
    let how = Landing {
        then_fork: Some(branch),
        ..Landing::default()
    };
    Ok((id, BranchName::main(), how))
}

/// A call threaded by its content: the retry of an open attempt, the
/// conversation it continues, a subagent, an edited first message, or a
/// new session.
fn threaded_landing(
    shared: &Shared,
    l: &mut Ledger<'_>,
    ex: &record::Exchange,
    api: crate::api::Api,
    spots: &HashMap<String, Spot>,
    spawns: &HashMap<String, (Spot, Spawn)>,
    retry_key: &dyn Fn() -> String,
) -> Result<(SessionId, BranchName, Landing)> {
    let now = ex.started_at;
    if let Some(s) = open_attempt(shared, l, spots, retry_key)? {
        return Ok((s.session, s.branch, Landing::default()));
    }
    for k in ex.facts().lookup_keys() {
        if let Some(s) = find(shared, l, spots, &k)? {
            let branch = thread::continue_at(l, &s, now)?.0;
            return Ok((s.session, branch, Landing::default()));
        }
    }
    if let Some((session, branch, link)) = subagent_of(shared, l, spawns, ex, api, now)? {
        let how = Landing {
            started_by: Some(link),
            ..Landing::default()
        };
        return Ok((session, branch, how));
    }
    if let Some((session, branch, again)) = first_message_fork(shared, l, spots, ex, api, now)? {
        let how = Landing {
            regenerate: again,
            ..Landing::default()
        };
        return Ok((session, branch, how));
    }
    let req = ex.request_json();
    let title = thread::title_of(api, req.as_ref(), &ex.method, &ex.path);
    let row = l.create_session(
        SessionId::new_random(),
        thread::PROXY_AGENT,
        Some(&title),
        now,
    )?;
    Ok((row.id, BranchName::main(), Landing::default()))
}

/// A retry of a failed attempt whose turn is still open: where it is.
fn open_attempt(
    shared: &Shared,
    l: &mut Ledger<'_>,
    spots: &HashMap<String, Spot>,
    retry_key: &dyn Fn() -> String,
) -> Result<Option<Spot>> {
    let awaits = spots.keys().any(|k| k.starts_with("retry:"))
        || shared
            .threads
            .lock()
            .map_err(|_| poisoned())?
            .awaits_retry();
    if !awaits {
        return Ok(None);
    }
    let Some(s) = find(shared, l, spots, &retry_key())? else {
        return Ok(None);
    };
    let head = l.tx().branch(&s.session, &s.branch)?.and_then(|b| b.head);
    if head == Some(s.node) {
        return Ok(Some(s));
    }
    if !spots.contains_key(&retry_key()) {
        // Answered since: no longer awaited.
        shared
            .threads
            .lock()
            .map_err(|_| poisoned())?
            .remove(&retry_key());
    }
    Ok(None)
}

/// What a recorded call teaches the batch and the caches: its thread
/// keys and the subagents its tool calls could start (a whole turn), or
/// its retry key (a failed attempt awaiting its retry).
#[allow(clippy::too_many_arguments)]
fn remember(
    ex: &record::Exchange,
    rec: &record::Recorded,
    done: &StoredNode,
    spot: Spot,
    spots: &mut HashMap<String, Spot>,
    spawns: &mut HashMap<String, (Spot, Spawn)>,
    learnt: &mut Learnt,
    retry_key: &dyn Fn() -> String,
) {
    if rec.whole_turn {
        let d = done.node.diagnostics.to_value();
        let keys = ["thread", "thread_response", "thread_conversation"]
            .iter()
            .filter_map(|f| d.get(*f).and_then(|v| v.as_str()));
        for k in keys {
            spots.insert(k.to_owned(), spot.clone());
            learnt.thread.push((k.to_owned(), spot.clone()));
        }
        for sp in ex.spawns() {
            spawns.insert(sp.key.clone(), (spot.clone(), sp.clone()));
            learnt.spawns.push((spot.clone(), sp));
        }
    } else if done.node.kind == convo_core::Kind::Response {
        // A failed attempt awaiting its retry.
        spots.insert(retry_key(), spot.clone());
        learnt.thread.push((retry_key(), spot));
    }
}
