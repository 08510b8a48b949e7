//! Verification: recompute everything from stored bytes, trust nothing.

use crate::backend::{BranchRow, Scanned, SessionRow, SessionRun, StoredNode, Tx};
use crate::backend::{TxNodes, state_err};
use crate::{Result, StoreError};
use convo_core::BranchName;
use convo_core::fact::{Fact, FactRecord};
use convo_core::state;
use convo_core::timeline::Context;
use convo_core::{ContentHash, Kind, Node, NodeHash, SessionId, StateRoot, TimelineEvent};
use convo_core::{DigestMap, DigestSet};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The object of problems the database engine itself finds.
pub(crate) const DATABASE: &str = "database";

/// What kind of thing is wrong: what a program (or a test) matches on,
/// never the English of [`Problem::reason`]. `verify --json` shows it as
/// `kind` (`hash`, `missing`, …).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// Bytes or fields do not hash to their stored hash or address.
    Hash,
    /// Something referenced is not stored: a payload, a parent, a state
    /// value, a row, nodes whose follow numbers were skipped.
    Missing,
    /// A row that does not decode (or an address of the wrong length).
    Undecodable,
    /// A node breaks a timeline rule: its shape, its place on its timeline,
    /// an append to a sealed timeline, a timeline created twice.
    Rule,
    /// A row or an index disagrees with what the nodes and the journal
    /// record (edited, added or moved by hand).
    Mismatch,
    /// The fact journal is not one unbroken chain: facts removed, cut,
    /// reordered or repeated.
    Journal,
    /// Part of the store could not be read, or the database engine's own
    /// check found damage.
    Database,
    /// Against a checkpoint: history it saw is gone (fewer nodes or facts, a
    /// timeline deleted or rolled back).
    Truncated,
    /// Against a checkpoint: history it saw was replaced or reordered.
    Rewritten,
    /// A checkpoint that cannot be used: unreadable, forged, signed by a key
    /// that is not trusted, or not comparable with the store.
    Checkpoint,
    /// A projection (the git repository) that has not caught up with the
    /// store: nodes not projected yet, redactions not applied yet. Not
    /// tampering: `convo git sync` clears it.
    Behind,
}

/// One thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    /// What kind of thing is wrong.
    pub kind: ProblemKind,
    /// What is broken: `node <hash>`, `branch <session>/<name>`, `payload <hash>`, `state <root>`.
    pub object: String,
    /// Why, in words.
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.object.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.object, self.reason)
        }
    }
}

impl Problem {
    /// A problem of `kind` with `object`.
    pub fn new(kind: ProblemKind, object: impl Into<String>, reason: impl Into<String>) -> Self {
        Problem {
            kind,
            object: object.into(),
            reason: reason.into(),
        }
    }
}

/// What `verify` checked and found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct VerifyReport {
    /// Nodes whose hash was recomputed.
    pub nodes: u64,
    /// Blobs (payloads and state values) whose hash was recomputed.
    pub blobs: u64,
    /// Payload and value bytes hashed.
    pub blob_bytes: u64,
    /// Branches checked.
    pub branches: u64,
    /// Distinct state roots walked.
    pub state_roots: u64,
    /// Facts of the journal checked.
    pub facts: u64,
    /// Signed checkpoints the store was proven to extend (or checked against).
    pub checkpoints: u64,
    /// Payloads erased by a recorded redaction (not tampering).
    pub redacted: u64,
    /// Everything wrong, in the order found.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    /// Whether nothing was found wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
    fn problem(&mut self, kind: ProblemKind, object: String, reason: impl Into<String>) {
        self.problems.push(Problem::new(kind, object, reason));
    }
}

struct Seen {
    ctx: Context,
    session: SessionId,
}

/// A timeline as the nodes and the fact journal say it must be.
#[derive(Clone, Debug)]
struct DBranch {
    head: Option<NodeHash>,
    state: Option<StateRoot>,
    sealed: bool,
}

/// A session's timelines as derived by replaying its fork and promote
/// nodes, its appends and its journalled working states in follow order.
#[derive(Debug)]
struct DSession {
    branches: BTreeMap<BranchName, DBranch>,
    by_head: DigestMap<NodeHash, BranchName>,
}

impl DSession {
    fn new() -> Self {
        let mut branches = BTreeMap::new();
        branches.insert(
            BranchName::main(),
            DBranch {
                head: None,
                state: None,
                sealed: false,
            },
        );
        DSession {
            branches,
            by_head: DigestMap::default(),
        }
    }
}

/// Where [`DSession`] placed a node.
enum Placed {
    /// On its timeline.
    On,
    /// On its timeline, breaking a rule (said).
    Breaking(String),
    /// Nowhere (the rule it breaks said, if any): it and its descendants
    /// are not blamed again.
    Off(Option<String>),
}

impl DSession {
    /// The timeline `parent` heads (for a first node: `main` when empty
    /// and open, else the first empty open timeline).
    fn headed_by(&self, parent: Option<NodeHash>) -> Option<BranchName> {
        let Some(p) = parent else {
            let main = BranchName::main();
            let empty = |b: &DBranch| b.head.is_none() && !b.sealed;
            return if self.branches.get(&main).is_some_and(empty) {
                Some(main)
            } else {
                self.branches
                    .iter()
                    .find(|(_, b)| empty(b))
                    .map(|(n, _)| n.clone())
            };
        };
        self.by_head.get(&p).cloned()
    }

    /// A fork node `hash` creating `branch` with working state `state`.
    fn fork(&mut self, hash: NodeHash, branch: &BranchName, state: Option<StateRoot>) -> Placed {
        if self.branches.contains_key(branch) {
            return Placed::Off(Some(format!(
                "it creates timeline `{branch}`, which already exists then"
            )));
        }
        self.branches.insert(
            branch.clone(),
            DBranch {
                head: Some(hash),
                state,
                sealed: false,
            },
        );
        self.by_head.insert(hash, branch.clone());
        Placed::On
    }

    /// A promote node `hash` (child of `parent`): its timeline becomes
    /// `main`, the old `main` is sealed under the name the event gives.
    fn promote(&mut self, hash: NodeHash, parent: Option<NodeHash>, ev: &TimelineEvent) -> Placed {
        let sealed_as = ev.sealed_as.clone().unwrap_or_else(BranchName::main);
        let ok = self.headed_by(parent).as_ref() == Some(&ev.branch)
            && self.branches.get(&ev.branch).is_some_and(|b| !b.sealed)
            && !self.branches.contains_key(&sealed_as);
        if !ok {
            return Placed::Off(Some(format!(
                "it promotes `{}` and seals `main` as `{sealed_as}`, but its parent is not the head of an open `{}` then, or `{sealed_as}` exists",
                ev.branch, ev.branch
            )));
        }
        if let Some(mut old) = self.branches.remove(&BranchName::main()) {
            old.sealed = true;
            if let Some(h) = old.head {
                self.by_head.insert(h, sealed_as.clone());
            }
            self.branches.insert(sealed_as, old);
        }
        if let Some(mut b) = self.branches.remove(&ev.branch) {
            if let Some(h) = b.head {
                self.by_head.remove(&h);
            }
            b.head = Some(hash);
            self.branches.insert(BranchName::main(), b);
        }
        self.by_head.insert(hash, BranchName::main());
        Placed::On
    }

    /// Any other node `s`: appended to the timeline its parent heads.
    fn append(&mut self, s: &StoredNode) -> Placed {
        let node = &s.node;
        let Some(name) = self.headed_by(node.parent) else {
            return Placed::Off(Some(match node.parent {
                Some(p) => format!(
                    "its parent {p} is not the head of any timeline when it is appended: a second child on one timeline, placed by hand"
                ),
                None => format!(
                    "it is a second first node of session {}: no timeline was empty",
                    node.session
                ),
            }));
        };
        let Some(b) = self.branches.get_mut(&name) else {
            return Placed::On;
        };
        let placed = if b.sealed {
            Placed::Breaking(format!("it was appended to the sealed timeline `{name}`"))
        } else {
            Placed::On
        };
        if let Some(h) = b.head {
            self.by_head.remove(&h);
        }
        b.head = Some(s.hash);
        if node.kind == Kind::Complete && node.state.is_some() {
            b.state = node.state;
        }
        self.by_head.insert(s.hash, name);
        placed
    }
}

/// A journalled working state (or, with `create`, an empty timeline), to
/// apply before node `after + 1`.
struct StateFact {
    create: bool,
    seq: u64,
    after: u64,
    session: SessionId,
    branch: BranchName,
    root: Option<StateRoot>,
}

const BATCH: usize = 1024;

/// The per-node checks of [`verify`], fed in follow order.
struct Checker<'a> {
    blobs: &'a DigestMap<ContentHash, u64>,
    /// Payloads the journal redacted: missing on purpose.
    redacted: &'a DigestMap<ContentHash, u64>,
    sessions: &'a HashSet<SessionId>,
    seen: DigestMap<NodeHash, Seen>,
    roots: DigestSet<StateRoot>,
    /// Sessions with nodes but no session row.
    orphans: BTreeSet<SessionId>,
    problems: Vec<(NodeHash, ProblemKind, String)>,
    undecodable: Vec<String>,
    /// The session index's runs (SQLite), ordered, and the one reached.
    runs: Option<&'a [SessionRun]>,
    run: usize,
    /// The follow number expected next (gap-free from 1).
    next_seq: u64,
    gaps: Vec<(u64, u64)>,
    derived: HashMap<SessionId, DSession>,
    state_facts: &'a [StateFact],
    fact: usize,
    fact_problems: Vec<(u64, ProblemKind, SessionId, String)>,
    /// Sessions with a node problem already reported: their rows are not
    /// compared with the derived timelines (that would blame the same edit
    /// again under other names).
    troubled: HashSet<SessionId>,
    /// Nodes that could not be placed on a timeline because of a problem
    /// already reported (and their descendants): not blamed again.
    tainted: DigestSet<NodeHash>,
}

impl<'a> Checker<'a> {
    fn new(
        blobs: &'a DigestMap<ContentHash, u64>,
        journal: &'a Journal,
        sessions: &'a HashSet<SessionId>,
        runs: Option<&'a [SessionRun]>,
    ) -> Self {
        Checker {
            blobs,
            redacted: &journal.redacted,
            sessions,
            seen: DigestMap::default(),
            roots: DigestSet::default(),
            orphans: BTreeSet::new(),
            problems: Vec::new(),
            undecodable: Vec::new(),
            runs,
            run: 0,
            next_seq: 1,
            gaps: Vec::new(),
            derived: HashMap::new(),
            state_facts: &journal.states,
            fact: 0,
            fact_problems: Vec::new(),
            troubled: HashSet::new(),
            tainted: DigestSet::default(),
        }
    }

    /// Applies the journalled working states written before node `seq`
    /// (all of them when `seq` is `None`).
    fn apply_facts(&mut self, seq: Option<u64>) {
        while let Some(f) = self.state_facts.get(self.fact) {
            if seq.is_some_and(|s| f.after >= s) {
                break;
            }
            self.fact += 1;
            let ds = self.derived.entry(f.session).or_insert_with(DSession::new);
            if f.create {
                if ds.branches.contains_key(&f.branch) {
                    self.fact_problems.push((
                        f.seq,
                        ProblemKind::Rule,
                        f.session,
                        format!("it creates {}/{}, which exists then", f.session, f.branch),
                    ));
                } else {
                    ds.branches.insert(
                        f.branch.clone(),
                        DBranch {
                            head: None,
                            state: None,
                            sealed: false,
                        },
                    );
                }
                continue;
            }
            match ds.branches.get_mut(&f.branch) {
                Some(b) => b.state = f.root,
                None => self.fact_problems.push((
                    f.seq, ProblemKind::Rule,
                    f.session,
                    format!(
                        "it sets the working state of {}/{}, a timeline that does not exist after node {}",
                        f.session, f.branch, f.after
                    ),
                )),
            }
        }
    }

    /// Places node `s` on the timeline its parent heads, as the ledger did
    /// when it appended it; `quiet` when the node already has a problem.
    fn place(&mut self, s: &StoredNode, parent_ctx: Option<Context>, quiet: bool) {
        let node = &s.node;
        if node.parent.is_some_and(|p| self.tainted.contains(&p)) {
            self.tainted.insert(s.hash);
            return;
        }
        let ds = self
            .derived
            .entry(node.session)
            .or_insert_with(DSession::new);
        let placed = match (node.kind, &node.event) {
            (Kind::Fork, Some(ev)) => {
                let state = parent_ctx.map_or(s.ctx.state, |c| c.state);
                ds.fork(s.hash, &ev.branch, state)
            }
            (Kind::Promote, Some(ev)) => ds.promote(s.hash, node.parent, ev),
            (Kind::Fork | Kind::Promote, None) => Placed::Off(None),
            _ => ds.append(s),
        };
        let (why, off) = match placed {
            Placed::On => (None, false),
            Placed::Breaking(why) => (Some(why), false),
            Placed::Off(why) => (why, true),
        };
        if let Some(why) = why
            && !quiet
        {
            self.problems.push((s.hash, ProblemKind::Rule, why));
        }
        if off {
            self.tainted.insert(s.hash);
        }
    }

    fn check(&mut self, row: std::result::Result<StoredNode, String>) {
        let s = match row {
            Ok(s) => s,
            Err(why) => {
                self.undecodable.push(why);
                return;
            }
        };
        if s.seq > self.next_seq {
            self.gaps.push((self.next_seq, s.seq - 1));
        }
        self.next_seq = self.next_seq.max(s.seq + 1);
        self.apply_facts(Some(s.seq));
        let before = self.problems.len();
        self.check_indexed(&s);
        let problems = &mut self.problems;
        let mut bad = |kind: ProblemKind, why: String| problems.push((s.hash, kind, why));
        check_fields(&s, self.blobs, self.redacted, &mut bad);
        let parent_ctx = parent_context(&s.node, &self.seen, &mut bad);
        if let Some(pc) = parent_ctx {
            check_rules(&s, pc, &mut bad);
        }
        let quiet = self.problems.len() > before;
        self.place(&s, parent_ctx, quiet);
        if self.problems.len() > before {
            self.troubled.insert(s.node.session);
        }
        self.note(&s);
    }

    /// Whether the session index (SQLite) lists node `s` under its session.
    fn check_indexed(&mut self, s: &StoredNode) {
        let Some(runs) = self.runs else {
            return;
        };
        while runs.get(self.run).is_some_and(|r| r.last < s.seq) {
            self.run += 1;
        }
        match runs.get(self.run) {
            Some(r) if r.first <= s.seq && r.session == s.node.session => {}
            _ => self.problems.push((
                s.hash,
                ProblemKind::Mismatch,
                format!(
                    "the session index does not list it (seq {}) under session {}, so its timeline would not show it",
                    s.seq, s.node.session
                ),
            )),
        }
    }

    /// Notes node `s` as seen (its session, its state roots): a later node
    /// may name it as parent; a second row of the same hash is a problem.
    fn note(&mut self, s: &StoredNode) {
        let node = &s.node;
        if !self.sessions.contains(&node.session) {
            self.orphans.insert(node.session);
        }
        if let Some(st) = node.state {
            self.roots.insert(st);
        }
        if let Some(st) = s.ctx.state {
            self.roots.insert(st);
        }
        let earlier = self.seen.insert(
            s.hash,
            Seen {
                ctx: s.ctx,
                session: node.session,
            },
        );
        if earlier.is_some() {
            self.problems.push((
                s.hash,
                ProblemKind::Mismatch,
                "another node row holds the same hash".into(),
            ));
        }
    }
}

/// A node's own fields: they hash to its stored hash (unless a redaction
/// rewrote its diagnostics), its shape is well formed, its payload is
/// stored with the recorded length (unless redacted).
fn check_fields(
    s: &StoredNode,
    blobs: &DigestMap<ContentHash, u64>,
    redacted: &DigestMap<ContentHash, u64>,
    bad: &mut impl FnMut(ProblemKind, String),
) {
    let node = &s.node;
    let recomputed = node.hash();
    // A node whose diagnostics were redacted keeps its hash, named by
    // the redaction fact: its fields no longer hash to it.
    if recomputed != s.hash && !redacted.contains_key(&ContentHash(s.hash.0)) {
        bad(
            ProblemKind::Hash,
            format!("its fields hash to {recomputed}, not to its stored hash"),
        );
    }
    if let Err(e) = node.check_shape() {
        bad(ProblemKind::Rule, e.to_string());
    }
    match blobs.get(&node.payload) {
        None if redacted.contains_key(&node.payload) => {}
        None => bad(
            ProblemKind::Missing,
            format!("its payload {} is missing or corrupt", node.payload),
        ),
        Some(&len) if len != node.payload_len => bad(
            ProblemKind::Mismatch,
            format!(
                "its payload is {len} bytes, the node says {}",
                node.payload_len
            ),
        ),
        Some(_) => {}
    }
}

/// The context of a node's parent: an earlier node of the same session
/// (the genesis context for a first node); `None` after a problem.
fn parent_context(
    node: &Node,
    seen: &DigestMap<NodeHash, Seen>,
    bad: &mut impl FnMut(ProblemKind, String),
) -> Option<Context> {
    let Some(p) = node.parent else {
        return Some(Context::genesis());
    };
    match seen.get(&p) {
        None => {
            bad(
                ProblemKind::Missing,
                format!("its parent {p} is missing (or was appended after it)"),
            );
            None
        }
        Some(ps) if ps.session != node.session => {
            bad(
                ProblemKind::Rule,
                format!("its parent {p} belongs to session {}", ps.session),
            );
            None
        }
        Some(ps) => Some(ps.ctx),
    }
}

/// The timeline rules after the parent's context `pc`: the submission and
/// sequence the timeline gives, and the stored context that follows.
fn check_rules(s: &StoredNode, pc: Context, bad: &mut impl FnMut(ProblemKind, String)) {
    let node = &s.node;
    match node.kind {
        Kind::Fork | Kind::Promote => {
            if node.submission.is_some() || node.sequence.is_some() {
                bad(
                    ProblemKind::Rule,
                    format!("a {} node carries a submission or sequence", node.kind),
                );
            }
        }
        k => {
            let asked = if k == Kind::Response {
                node.sequence
            } else {
                None
            };
            match pc.place(k, &node.session, &node.payload, asked) {
                Err(e) => bad(ProblemKind::Rule, format!("it breaks a timeline rule: {e}")),
                Ok(p) if p.submission != node.submission || p.sequence != node.sequence => bad(
                    ProblemKind::Rule,
                    "its submission or sequence is not the one its timeline gives".into(),
                ),
                Ok(_) => {}
            }
        }
    }
    let expect = pc.after(node);
    if expect != s.ctx {
        bad(ProblemKind::Mismatch, "its stored context (depth, turn number, submission, state in effect) does not follow from its parent".into());
    }
}

/// Turns a failed read of one part of the store into a problem, so verify
/// goes on with the other parts. Contention still fails the whole verify
/// (the read is retried).
fn or_problem<T>(r: &mut VerifyReport, what: &str, res: Result<T>) -> Result<Option<T>> {
    match res {
        Ok(v) => Ok(Some(v)),
        Err(e @ (StoreError::Busy(_) | StoreError::Conflict(_))) => Err(e),
        Err(e) => {
            let object = if matches!(e, StoreError::Damaged(_)) {
                DATABASE
            } else {
                what
            };
            r.problem(
                ProblemKind::Database,
                object.to_owned(),
                format!("reading {what} stopped: {e}"),
            );
            Ok(None)
        }
    }
}

/// The journal, checked: each fact hashes to its stored hash, names the one
/// before it, is numbered 1, 2, 3… and moves the follow cursor only forward.
#[derive(Default)]
struct Journal {
    sessions: HashMap<SessionId, (u64, SessionRow)>,
    states: Vec<StateFact>,
    /// Redacted payloads and the fact that redacted each.
    redacted: DigestMap<ContentHash, u64>,
}

fn check_facts(
    r: &mut VerifyReport,
    rows: Vec<crate::backend::Decoded<crate::backend::FactRow>>,
) -> Journal {
    let mut j = Journal::default();
    // The facts a redaction rewrote (a title erased) keep their hash,
    // named by a later redaction fact.
    let erased: HashSet<convo_core::Digest> = rows
        .iter()
        .flatten()
        .filter_map(|f| match FactRecord::decode(&f.body).ok()?.fact {
            Fact::Redaction { payload, .. } => Some(payload.0),
            _ => None,
        })
        .collect();
    let mut chain = FactChain {
        prev: None,
        after: 0,
        expect: 1,
    };
    for row in rows {
        let f = match row {
            Ok(f) => f,
            Err(why) => {
                r.problem(ProblemKind::Undecodable, "fact row".to_owned(), why);
                continue;
            }
        };
        r.facts += 1;
        let object = format!("fact {}", f.seq);
        if let Some(rec) = chain.link(r, &object, &f, &erased) {
            journal_fact(&mut j, r, object, f.seq, rec.after, rec.fact);
        }
    }
    j
}

/// Where the journal's chain stands: the hash of the fact before, the
/// node the facts so far were written after, the number expected next.
struct FactChain {
    prev: Option<convo_core::Digest>,
    after: u64,
    expect: u64,
}

impl FactChain {
    /// Fact `f` (`object`) as the next link: numbered next, hashing to its
    /// stored hash (or keeping it, `erased` by a redaction), naming the
    /// fact before it, moving the follow cursor only forward. Its record,
    /// when it decodes.
    fn link(
        &mut self,
        r: &mut VerifyReport,
        object: &str,
        f: &crate::backend::FactRow,
        erased: &HashSet<convo_core::Digest>,
    ) -> Option<FactRecord> {
        if f.seq != self.expect {
            r.problem(
                ProblemKind::Journal,
                object.to_owned(),
                format!(
                    "the journal jumps from fact {} to fact {}: facts were removed",
                    self.expect - 1,
                    f.seq
                ),
            );
        }
        self.expect = f.seq + 1;
        let mut actual = convo_core::sha256(&f.body);
        if let Some(kept) =
            convo_core::Digest::from_slice(&f.hash).filter(|h| *h != actual && erased.contains(h))
        {
            actual = kept;
        }
        if actual.0.as_slice() != f.hash.as_slice() {
            r.problem(
                ProblemKind::Hash,
                object.to_owned(),
                format!("its bytes hash to {actual}, not to its stored hash"),
            );
        }
        let rec = match FactRecord::decode(&f.body) {
            Ok(rec) => rec,
            Err(why) => {
                r.problem(
                    ProblemKind::Undecodable,
                    object.to_owned(),
                    format!("it does not decode: {why}"),
                );
                self.prev = Some(actual);
                return None;
            }
        };
        if rec.prev != self.prev {
            r.problem(
                ProblemKind::Journal,
                object.to_owned(),
                "it does not name the fact before it: the journal was cut or reordered".to_owned(),
            );
        }
        if rec.after < self.after {
            r.problem(
                ProblemKind::Journal,
                object.to_owned(),
                format!(
                    "it was written after node {}, before the fact before it (after node {})",
                    rec.after, self.after
                ),
            );
        }
        self.after = self.after.max(rec.after);
        self.prev = Some(actual);
        Some(rec)
    }
}

/// What one fact of the journal says, added to `j`: a session (or its
/// retitle), a timeline's state or creation, a redaction; a fact that
/// contradicts an earlier one is a problem.
fn journal_fact(
    j: &mut Journal,
    r: &mut VerifyReport,
    object: String,
    seq: u64,
    after: u64,
    fact: Fact,
) {
    match fact {
        Fact::Session {
            id,
            agent,
            title,
            created_at,
        } => {
            let row = SessionRow {
                id,
                agent,
                title,
                created_at,
            };
            // A later fact for the same session with the same agent and
            // creation time is a retitle (`Ledger::retitle`): the title
            // it carries replaces the earlier one.
            match j.sessions.get(&id) {
                Some((_, old)) if old.agent != row.agent || old.created_at != row.created_at => {
                    r.problem(
                        ProblemKind::Journal,
                        object,
                        format!("it creates session {id} a second time"),
                    );
                }
                _ => {
                    j.sessions.insert(id, (seq, row));
                }
            }
        }
        Fact::State {
            session,
            branch,
            root,
        } => j.states.push(StateFact {
            create: false,
            seq,
            after,
            session,
            branch,
            root,
        }),
        Fact::Branch { session, branch } => j.states.push(StateFact {
            create: true,
            seq,
            after,
            session,
            branch,
            root: None,
        }),
        Fact::Redaction { payload, .. } => {
            if let Some(first) = j.redacted.get(&payload) {
                r.problem(
                    ProblemKind::Journal,
                    object,
                    format!("it redacts payload {payload}, which fact {first} already redacted"),
                );
            } else {
                j.redacted.insert(payload, seq);
            }
        }
        // A replay's counts change nothing recorded.
        Fact::Replay { .. } => {}
    }
}

/// Redactions: the index (`redactions`) says exactly what the journal
/// says, and no redacted payload still has its bytes stored.
/// Every kept OTLP export body rebuilds (its base and the payloads of its
/// nodes are there, and the residual gives a body of its length); the
/// bodies still to serve as a base are held, the others dropped.
fn check_otlp_exports(r: &mut VerifyReport, tx: &mut dyn Tx) -> Result<()> {
    let Some(rows) = or_problem(r, "the OTLP export table", tx.otlp_exports(None))? else {
        return Ok(());
    };
    let mut uses: HashMap<u64, usize> = HashMap::new();
    for row in &rows {
        if let Some(b) = row.base {
            *uses.entry(b).or_default() += 1;
        }
    }
    let mut bodies = HashMap::new();
    for row in &rows {
        if let Err(e) = crate::otlp::body_in(tx, row, &mut bodies) {
            r.problem(
                ProblemKind::Missing,
                format!("otlp export {}", row.seq),
                format!("its body cannot be rebuilt: {e}"),
            );
        }
        if !uses.contains_key(&row.seq) {
            bodies.remove(&row.seq);
        }
        if let Some(b) = row.base
            && let Some(n) = uses.get_mut(&b)
        {
            *n -= 1;
            if *n == 0 {
                bodies.remove(&b);
            }
        }
    }
    Ok(())
}

fn check_redactions(
    r: &mut VerifyReport,
    tx: &mut dyn Tx,
    journal: &Journal,
    blobs: &DigestMap<ContentHash, u64>,
) -> Result<()> {
    r.redacted = journal.redacted.len() as u64;
    let mut sorted: Vec<(&ContentHash, &u64)> = journal.redacted.iter().collect();
    sorted.sort_by_key(|(_, seq)| **seq);
    for (h, seq) in &sorted {
        if blobs.contains_key(h) {
            r.problem(
                ProblemKind::Mismatch,
                format!("blob {}", h.to_hex()),
                format!("fact {seq} redacted it, but its bytes are still stored"),
            );
        }
    }
    let rows = or_problem(r, "the redaction index", tx.redaction_rows())?.unwrap_or_default();
    let mut indexed: DigestMap<ContentHash, u64> = DigestMap::default();
    for row in rows {
        match row {
            Err(why) => r.problem(ProblemKind::Undecodable, "redaction index".to_owned(), why),
            Ok((h, seq)) => match ContentHash::from_slice(&h) {
                None => r.problem(
                    ProblemKind::Undecodable,
                    "redaction index".to_owned(),
                    format!("digest {} is not 32 bytes", hex::encode(&h)),
                ),
                Some(h) => match journal.redacted.get(&h) {
                    Some(&want) if want == seq => {
                        indexed.insert(h, seq);
                    }
                    Some(&want) => r.problem(
                        ProblemKind::Mismatch,
                        format!("redaction {}", h.to_hex()),
                        format!("the index names fact {seq}, but fact {want} redacted it"),
                    ),
                    None => r.problem(
                        ProblemKind::Mismatch,
                        format!("redaction {}", h.to_hex()),
                        format!(
                            "the index lists it (fact {seq}), but no fact of the journal redacts it"
                        ),
                    ),
                },
            },
        }
    }
    for (h, seq) in sorted {
        if !indexed.contains_key(h) {
            r.problem(ProblemKind::Missing,
                format!("redaction {}", h.to_hex()),
                format!(
                    "fact {seq} redacted it, but the redaction index lacks it (readers would find the payload missing)"
                ),
            );
        }
    }
    Ok(())
}

fn opt_hex<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "none".to_owned(), |h| h.to_string())
}

/// How far a verify got, for a progress bar: the phases in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyProgress {
    /// The database engine's own check (SQLite's integrity check).
    Database,
    /// This many blobs hashed.
    Blobs(u64),
    /// This many nodes checked (of the store's follow cursor).
    Nodes(u64),
}

/// Adds what the engine's structural check found when it ran apart
/// ([`crate::backend::Maintenance::structure_check_apart`]): first in the
/// report, where it stands when it runs in verify's own transaction.
pub(crate) fn engine_problems(r: &mut VerifyReport, found: Vec<String>) {
    let before = r.problems.len();
    for why in found {
        r.problem(ProblemKind::Database, DATABASE.to_owned(), why);
    }
    let added = r.problems.len() - before;
    r.problems.rotate_right(added);
}

/// Checks, in one snapshot: the database engine's own integrity check; every
/// blob hashes to its address; the fact journal is one unbroken hash chain;
/// every node hashes to its stored hash, has a well-formed kind, an earlier
/// parent in the same session, the submission/sequence the timeline rules
/// give, a stored payload of the recorded length and the derived context its
/// parent implies; follow numbers have no gaps; every session row is the one
/// its fact records; every branch row (its existence, name, seal, head and
/// working state) is the one the fork and promote nodes, the appends and the
/// journal derive; every state root (on nodes and branches) is a complete,
/// canonical trie whose values exist. Bad data is reported, never stops it.
pub(crate) fn verify(
    tx: &mut dyn Tx,
    progress: &mut dyn FnMut(VerifyProgress),
    structure_apart: bool,
) -> Result<VerifyReport> {
    let mut r = VerifyReport::default();
    progress(VerifyProgress::Database);
    if let Some(found) = or_problem(&mut r, "the database", tx.engine_check(!structure_apart))? {
        for why in found {
            r.problem(ProblemKind::Database, DATABASE.to_owned(), why);
        }
    }
    let blobs = check_blobs(&mut r, tx, progress)?;
    let journal = match or_problem(&mut r, "the fact journal", tx.facts())? {
        Some(rows) => check_facts(&mut r, rows),
        None => Journal::default(),
    };
    check_redactions(&mut r, tx, &journal, &blobs)?;
    check_otlp_exports(&mut r, tx)?;
    let session_rows = decoded_rows(
        &mut r,
        "the session table",
        "session row",
        tx.session_rows(),
    )?;
    let sessions: HashSet<SessionId> = session_rows.iter().map(|s| s.id).collect();
    let runs = read_session_runs(&mut r, tx)?;
    let mut checker = Checker::new(&blobs, &journal, &sessions, runs.as_deref());
    let scan_stopped = check_nodes(&mut r, tx, &mut checker, progress)?;
    let Checker {
        seen,
        mut roots,
        problems,
        undecodable,
        gaps,
        derived,
        fact_problems,
        tainted,
        troubled,
        mut orphans,
        ..
    } = checker;
    let derivable = |s: &SessionId| undecodable.is_empty() && !troubled.contains(s);
    report_nodes(&mut r, problems, &undecodable, gaps);
    for (seq, kind, sid, why) in fact_problems {
        if derivable(&sid) {
            r.problem(kind, format!("fact {seq}"), why);
        }
    }

    check_session_rows(&mut r, &session_rows, &journal, &sessions);
    let branch_rows = decoded_rows(&mut r, "the branch table", "branch row", tx.branch_rows())?;
    let nodes = DerivedNodes {
        seen: &seen,
        derived: &derived,
        tainted: &tainted,
        derivable: &derivable,
        complete: !scan_stopped,
    };
    check_branch_rows(
        &mut r,
        &branch_rows,
        &nodes,
        &journal,
        &sessions,
        &mut orphans,
        &mut roots,
    );
    for s in orphans {
        r.problem(
            ProblemKind::Missing,
            format!("session {s}"),
            format!("session {s} has nodes or branches but no session row"),
        );
    }
    check_state_roots(&mut r, tx, roots, &blobs, &journal.redacted)?;
    Ok(r)
}

/// Blobs: each hashes to its address. Returns the sound ones and their
/// lengths; a blob that does not decode or hash is a problem.
fn check_blobs(
    r: &mut VerifyReport,
    tx: &mut dyn Tx,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<DigestMap<ContentHash, u64>> {
    let mut blobs: DigestMap<ContentHash, u64> = DigestMap::default();
    let mut bad_blobs = Vec::new();
    let mut counts = (0u64, 0u64);
    let scanned = tx.scan_blobs(false, &mut |addr, scanned| {
        let scanned = match scanned {
            Ok(s) => s,
            Err(why) => {
                bad_blobs.push((hex::encode(addr), ProblemKind::Undecodable, why));
                counts.0 += 1;
                return Ok(());
            }
        };
        let len = scanned.size();
        let right = |h: &ContentHash| match scanned {
            Scanned::Unchecked(bytes) => *h == convo_core::hash::content_hash(bytes),
            Scanned::Checked(_) | Scanned::Hashed(_) => true,
        };
        match ContentHash::from_slice(addr) {
            Some(h) if right(&h) => {
                blobs.insert(h, len);
            }
            Some(h) => bad_blobs.push((
                h.to_hex(),
                ProblemKind::Hash,
                "its bytes do not hash to its address".to_owned(),
            )),
            None => bad_blobs.push((
                hex::encode(addr),
                ProblemKind::Undecodable,
                "its address is not 32 bytes".to_owned(),
            )),
        }
        counts.0 += 1;
        counts.1 += len;
        if counts.0.is_multiple_of(4096) {
            progress(VerifyProgress::Blobs(counts.0));
        }
        Ok(())
    });
    or_problem(r, "the blob table", scanned)?;
    (r.blobs, r.blob_bytes) = counts;
    for (o, kind, why) in bad_blobs {
        r.problem(kind, format!("blob {o}"), why);
    }
    Ok(blobs)
}

/// Rows of one table, each decoded on its own: a row that does not decode
/// is a problem named `what`, a table that cannot be read one on `table`.
fn decoded_rows<T>(
    r: &mut VerifyReport,
    table: &str,
    what: &str,
    rows: Result<Vec<crate::backend::Decoded<T>>>,
) -> Result<Vec<T>> {
    Ok(or_problem(r, table, rows)?
        .unwrap_or_default()
        .into_iter()
        .filter_map(|row| {
            row.map_err(|why| r.problem(ProblemKind::Undecodable, what.to_owned(), why))
                .ok()
        })
        .collect())
}

/// The session index's runs (SQLite), ordered and without overlaps; `None`
/// for a backend without one.
fn read_session_runs(r: &mut VerifyReport, tx: &mut dyn Tx) -> Result<Option<Vec<SessionRun>>> {
    let Some(rows) = or_problem(r, "the session index", tx.session_runs())?.flatten() else {
        return Ok(None);
    };
    let mut runs: Vec<SessionRun> = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            Err(why) => r.problem(ProblemKind::Undecodable, "session index".to_owned(), why),
            Ok(run) => {
                if let Some(prev) = runs.last()
                    && run.first <= prev.last
                {
                    r.problem(
                        ProblemKind::Mismatch,
                        "session index".to_owned(),
                        format!(
                            "runs {}..{} and {}..{} overlap",
                            prev.first, prev.last, run.first, run.last
                        ),
                    );
                    continue;
                }
                runs.push(run);
            }
        }
    }
    Ok(Some(runs))
}

/// Nodes, in follow order, in two stages on two threads: this one steps
/// the database and decodes rows, a worker ([`Checker::check`]) recomputes
/// hashes, replays the timeline rules and derives every timeline. Returns
/// whether the scan stopped early (a node table that cannot be read).
fn check_nodes(
    r: &mut VerifyReport,
    tx: &mut dyn Tx,
    checker: &mut Checker<'_>,
    progress: &mut dyn FnMut(VerifyProgress),
) -> Result<bool> {
    let scanned = std::thread::scope(|scope| -> Result<u64> {
        let (send, recv) =
            std::sync::mpsc::sync_channel::<Vec<std::result::Result<StoredNode, String>>>(8);
        let worker = scope.spawn(|| {
            for batch in recv {
                for row in batch {
                    checker.check(row);
                }
            }
            checker.apply_facts(None);
        });
        let mut count = 0u64;
        let mut batch = Vec::with_capacity(BATCH);
        let scan = tx.scan_nodes(&mut |row| {
            count += 1;
            batch.push(row);
            if batch.len() == BATCH {
                progress(VerifyProgress::Nodes(count));
                let full = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
                send.send(full)
                    .map_err(|_| StoreError::backend("the verify worker stopped"))?;
            }
            Ok(())
        });
        if !batch.is_empty() {
            let _ = send.send(batch);
        }
        drop(send);
        worker
            .join()
            .map_err(|_| StoreError::backend("the verify worker panicked"))?;
        scan.map(|()| count)
    });
    match scanned {
        Ok(n) => {
            r.nodes += n;
            Ok(false)
        }
        Err(e) => {
            r.nodes += checker.next_seq.saturating_sub(1);
            or_problem(r, "the node table", Err::<(), _>(e))?;
            Ok(true)
        }
    }
}

/// What the node scan found: bad nodes, rows that do not decode, and gaps
/// in the follow numbers (deleted nodes).
fn report_nodes(
    r: &mut VerifyReport,
    problems: Vec<(NodeHash, ProblemKind, String)>,
    undecodable: &[String],
    gaps: Vec<(u64, u64)>,
) {
    for (h, kind, why) in problems {
        r.problem(kind, format!("node {h}"), why);
    }
    for why in undecodable {
        r.problem(ProblemKind::Undecodable, "node row".to_owned(), why.clone());
    }
    for (a, b) in gaps {
        r.problem(
            ProblemKind::Missing,
            "follow order".to_owned(),
            if a == b {
                format!("node {a} is missing: the follow numbers jump over it (a deleted node)")
            } else {
                format!(
                    "nodes {a}..{b} are missing: the follow numbers jump over them (deleted nodes)"
                )
            },
        );
    }
}

/// Session rows against the journal: each was created by a fact and says
/// what its latest fact recorded; each session the journal records has its row.
fn check_session_rows(
    r: &mut VerifyReport,
    session_rows: &[SessionRow],
    journal: &Journal,
    sessions: &HashSet<SessionId>,
) {
    for row in session_rows {
        let object = format!("session {}", row.id);
        match journal.sessions.get(&row.id) {
            None => r.problem(
                ProblemKind::Mismatch,
                object,
                "no fact records its creation: the row was added or rewritten by hand".to_owned(),
            ),
            Some((seq, f)) => {
                let mut diff = |field: &str, have: String, want: String| {
                    if have != want {
                        r.problem(
                            ProblemKind::Mismatch,
                            object.clone(),
                            format!("its {field} is {have}, but fact {seq} recorded {want}"),
                        );
                    }
                };
                diff(
                    "agent",
                    format!("`{}`", row.agent),
                    format!("`{}`", f.agent),
                );
                diff(
                    "title",
                    row.title
                        .as_ref()
                        .map_or("none".into(), |t| format!("`{t}`")),
                    f.title.as_ref().map_or("none".into(), |t| format!("`{t}`")),
                );
                diff(
                    "creation time",
                    row.created_at.to_string(),
                    f.created_at.to_string(),
                );
            }
        }
    }
    for (id, (seq, f)) in &journal.sessions {
        if !sessions.contains(id) {
            r.problem(
                ProblemKind::Missing,
                format!("session {id}"),
                format!(
                    "its row is missing: fact {seq} records it (agent `{}`), created {}",
                    f.agent, f.created_at
                ),
            );
        }
    }
}

/// Every state root (on nodes and branches) is a complete, canonical trie
/// whose values are stored (or were redacted by a recorded redaction).
fn check_state_roots(
    r: &mut VerifyReport,
    tx: &mut dyn Tx,
    roots: DigestSet<StateRoot>,
    blobs: &DigestMap<ContentHash, u64>,
    redacted: &DigestMap<ContentHash, u64>,
) -> Result<()> {
    let mut walked = HashSet::new();
    let mut roots: Vec<StateRoot> = roots.into_iter().collect();
    roots.sort();
    for root in roots {
        r.state_roots += 1;
        let mut missing = Vec::new();
        let res = state::verify(&mut TxNodes(tx), &root, &mut walked, &mut |v| {
            if !blobs.contains_key(v) && !redacted.contains_key(v) {
                missing.push(*v);
            }
        });
        if let Err(e) = res {
            let e = state_err(e);
            if e.is_retryable() {
                return Err(e);
            }
            r.problem(
                ProblemKind::Undecodable,
                format!("state {root}"),
                e.to_string(),
            );
        }
        for v in missing {
            r.problem(
                ProblemKind::Missing,
                format!("state {root}"),
                format!("value {v} is missing or corrupt"),
            );
        }
    }
    Ok(())
}

/// What the node scan derived, for the checks of the rows against it.
struct DerivedNodes<'a> {
    seen: &'a DigestMap<NodeHash, Seen>,
    derived: &'a HashMap<SessionId, DSession>,
    tainted: &'a DigestSet<NodeHash>,
    /// Whether a session's timelines can be derived (no node problem in it).
    derivable: &'a dyn Fn(&SessionId) -> bool,
    /// Whether the node scan read every node.
    complete: bool,
}

/// Branch rows against what the nodes and the journal derive: each head a
/// stored node of its session; each timeline's existence, head, seal and
/// working state the ones its fork and promote nodes, appends and journal
/// give.
fn check_branch_rows(
    r: &mut VerifyReport,
    branch_rows: &[BranchRow],
    nodes: &DerivedNodes<'_>,
    journal: &Journal,
    sessions: &HashSet<SessionId>,
    orphans: &mut BTreeSet<SessionId>,
    roots: &mut DigestSet<StateRoot>,
) {
    let mut rows_by_session: HashMap<SessionId, Vec<&BranchRow>> = HashMap::new();
    // Sessions with a head already reported as broken: comparing them with
    // the derived timelines would only blame the same edit again.
    let mut blamed: HashSet<SessionId> = HashSet::new();
    for b in branch_rows {
        r.branches += 1;
        if !sessions.contains(&b.session) {
            orphans.insert(b.session);
        }
        if let Some(h) = b.head
            && let Some((kind, why)) = head_problem(nodes.seen, b.session, h)
        {
            blamed.insert(b.session);
            r.problem(kind, format!("branch {}/{}", b.session, b.name), why);
        }
        if let Some(st) = b.state {
            roots.insert(st);
        }
        rows_by_session.entry(b.session).or_default().push(b);
    }
    if !nodes.complete {
        return;
    }
    let mut all: BTreeSet<SessionId> = rows_by_session.keys().copied().collect();
    all.extend(nodes.derived.keys().copied());
    all.extend(journal.sessions.keys().copied());
    let empty = DSession::new();
    for sid in all
        .into_iter()
        .filter(|s| !blamed.contains(s) && (nodes.derivable)(s))
    {
        let d = nodes.derived.get(&sid).unwrap_or(&empty);
        let rows = rows_by_session.remove(&sid).unwrap_or_default();
        // An empty timeline of a session the journal records, whose row is
        // missing too, is reported with the session row.
        let rowless = journal.sessions.contains_key(&sid) && !sessions.contains(&sid);
        compare_timelines(r, sid, d, &rows, nodes.tainted, rowless);
    }
}

/// What is wrong with the head `h` of a branch row of `session`: not a
/// stored node, or one of another session.
fn head_problem(
    seen: &DigestMap<NodeHash, Seen>,
    session: SessionId,
    h: NodeHash,
) -> Option<(ProblemKind, String)> {
    match seen.get(&h) {
        None => Some((
            ProblemKind::Missing,
            format!("its head {h} is not a stored node"),
        )),
        Some(s) if s.session != session => Some((
            ProblemKind::Mismatch,
            format!("its head {h} belongs to session {}", s.session),
        )),
        Some(_) => None,
    }
}

/// One session's branch rows against its derived timelines `d`: a row for
/// each (an empty one may lack it when `rowless`), none for a timeline no
/// node records.
fn compare_timelines(
    r: &mut VerifyReport,
    sid: SessionId,
    d: &DSession,
    rows: &[&BranchRow],
    tainted: &DigestSet<NodeHash>,
    rowless: bool,
) {
    for (name, want) in &d.branches {
        let object = format!("branch {sid}/{name}");
        let Some(have) = rows.iter().find(|b| &b.name == name) else {
            if want.head.is_some() || !rowless {
                r.problem(
                    ProblemKind::Missing,
                    object,
                    format!(
                        "its row is missing, but the nodes record it ({}, head {})",
                        if want.sealed { "sealed" } else { "open" },
                        opt_hex(&want.head)
                    ),
                );
            }
            continue;
        };
        compare_branch(r, object, have, want, tainted);
    }
    for b in rows {
        if !d.branches.contains_key(&b.name) {
            r.problem(
                ProblemKind::Mismatch,
                format!("branch {sid}/{}", b.name),
                "no fork or promote node records a timeline of this name".to_owned(),
            );
        }
    }
}

/// A branch row's head, seal and working state against the derived
/// timeline's (heads and states not compared when either head could not
/// be placed).
fn compare_branch(
    r: &mut VerifyReport,
    object: String,
    have: &BranchRow,
    want: &DBranch,
    tainted: &DigestSet<NodeHash>,
) {
    let tainted_head = want.head.is_some_and(|h| tainted.contains(&h));
    let row_tainted = have.head.is_some_and(|h| tainted.contains(&h));
    if have.head != want.head && !tainted_head && !row_tainted {
        r.problem(ProblemKind::Mismatch,
            object.clone(),
            format!(
                "its head is {}, but its nodes end at {}: the timeline was moved by hand (rolled back, or a node removed)",
                opt_hex(&have.head),
                opt_hex(&want.head)
            ),
        );
    }
    if have.sealed != want.sealed {
        r.problem(
            ProblemKind::Mismatch,
            object.clone(),
            if have.sealed {
                "it is sealed, but no promote node sealed it".to_owned()
            } else {
                "it is open, but a promote node sealed it: it would take appends".to_owned()
            },
        );
    }
    if have.state != want.state && !tainted_head && !row_tainted {
        r.problem(
            ProblemKind::Mismatch,
            object,
            format!(
                "its working state is {}, but its nodes and the journal give {}",
                opt_hex(&have.state),
                opt_hex(&want.state)
            ),
        );
    }
}
