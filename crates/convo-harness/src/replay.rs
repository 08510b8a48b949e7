//! `convo replay`: re-send a timeline's inputs to an agent and compare.
//!
//! Each recorded turn is re-run in a new session (titled `replay of
//! SESSION BRANCH`, its `main` empty at the start): the same input goes to the agent; its
//! inference calls are answered from the recording (matched by sequence
//! within the turn, never re-sent upstream), its `kv` state starts as the
//! recorded state at that turn's start, and every request it makes is
//! compared with the recorded request at the same sequence. After the turn
//! the output, the failure (if any) and the state root are compared too.
//! The first difference is a [`Divergence`]: the replay stops after that
//! turn. A turn the recording says was cut (`interrupted`, or with no
//! complete: its harness was killed) is compared up to the cut only: its
//! recorded calls, not the output or state it never reached. With `live_after`, turns after that node go live (inference to
//! the upstream, state carried on from the replay) and are not compared.

use crate::harness::{Harness, TurnReport};
use crate::{HarnessError, Result, now_ms};
use convo_core::{BranchName, HashPrefix, Kind, SessionId, StateRoot};
use convo_llm::replay::{Index, Matcher, Rules, Tolerated};
use convo_store::TimelineNode;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Where a replay differs from the recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// The turn (1-based on the recorded timeline).
    pub turn: u64,
    /// The request sequence within the turn (`None`: the turn's outcome).
    pub sequence: Option<u32>,
    /// What differs: `request`, `missing request`, `extra request`,
    /// `output`, `failure` or `state`.
    pub what: String,
    /// The recorded side.
    pub recorded: String,
    /// The replayed side.
    pub replayed: String,
    /// A unified diff, recorded → replayed.
    pub diff: String,
}

impl Divergence {
    fn new(turn: u64, sequence: Option<u32>, what: &str, recorded: &str, replayed: &str) -> Self {
        let diff = similar::TextDiff::from_lines(recorded, replayed)
            .unified_diff()
            .context_radius(3)
            .header("recorded", "replayed")
            .to_string();
        Divergence {
            turn,
            sequence,
            what: what.to_owned(),
            recorded: recorded.to_owned(),
            replayed: replayed.to_owned(),
            diff,
        }
    }
}

/// A recorded call, as compared.
#[derive(Clone, Debug)]
struct RecordedCall {
    described: String,
    /// An inference call: its place in the recording's [`Index`].
    inference: Option<usize>,
    response: Option<(Vec<u8>, Value)>,
}

/// How a replay compares inference calls: the one matcher's canonical
/// form and its index of the recording's calls (volatile differences
/// tolerated unless strict).
#[derive(Debug, Default)]
pub(crate) struct Matching {
    pub matcher: Matcher,
    pub index: Index,
}

/// The recorded calls of one turn, by sequence.
#[derive(Clone, Debug, Default)]
pub(crate) struct Expected {
    calls: BTreeMap<u32, RecordedCall>,
    pub matching: Arc<Matching>,
}

impl Expected {
    /// Compares call `seq` with the recording: the differences tolerated,
    /// or the divergence. `got_canon` is an inference call's canonical form.
    pub fn check(
        &self,
        turn: u64,
        seq: u32,
        got: &str,
        got_canon: Option<&Value>,
    ) -> std::result::Result<Vec<Tolerated>, Divergence> {
        let c = match self.calls.get(&seq) {
            Some(c) if c.described == got => return Ok(Vec::new()),
            Some(c) => c,
            None => return Err(Divergence::new(turn, Some(seq), "extra request", "", got)),
        };
        if let (Some(i), Some(g)) = (c.inference, got_canon)
            && let Some(t) = self.matching.index.tolerates_call(i, g)
        {
            return Ok(t);
        }
        Err(Divergence::new(
            turn,
            Some(seq),
            "request",
            &c.described,
            got,
        ))
    }

    /// The recorded answer to call `seq`: payload and diagnostics.
    pub fn response(&self, seq: u32) -> Option<(Vec<u8>, Value)> {
        self.calls.get(&seq).and_then(|c| c.response.clone())
    }
}

/// An inference call as compared: its canonical form by `matcher` (the
/// form the recording proxy's replay matches requests by,
/// [`convo_llm::replay::Matcher`]: the one matcher), and that form in one
/// text, so tool arguments re-serialized, text parts for a string or
/// volatile fields do not make a divergence.
pub(crate) fn describe_infer(matcher: &Matcher, diag: &Value, payload: &[u8]) -> (String, Value) {
    let s = |k: &str| diag.get(k).and_then(Value::as_str).unwrap_or("");
    let headers = diag
        .get("headers")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let canon = matcher.canonical(s("method"), s("path"), &headers, payload);
    let mut head = format!("infer {} {} {}", s("api"), s("method"), s("path"));
    if let Some(h) = canon
        .get("headers")
        .filter(|h| h.as_object().is_some_and(|o| !o.is_empty()))
    {
        head.push_str(&format!(" {h}"));
    }
    if payload.is_empty() {
        return (head, canon);
    }
    let body = canon.get("body").cloned().unwrap_or_default();
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    (format!("{head}\n{text}"), canon)
}

/// A call as compared: service, operation and payload in one text
/// (inference calls: [`describe_infer`] with no ignored pointer).
pub(crate) fn describe_call(to: &str, diag: &Value, payload: &[u8]) -> String {
    let s = |k: &str| diag.get(k).and_then(Value::as_str).unwrap_or("");
    if to == "infer" {
        return describe_infer(&Matcher::default(), diag, payload).0;
    }
    let head = match to {
        "kv" => match s("op") {
            "list" => format!("kv list prefix={:?}", s("prefix")),
            op => format!("kv {op} {:?}", s("key")),
        },
        other => format!("{other} {diag}"),
    };
    if payload.is_empty() {
        return head;
    }
    let body = match serde_json::from_slice::<Value>(payload) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(payload).into_owned(),
    };
    format!("{head}\n{body}")
}

/// How to replay.
#[derive(Clone, Debug, Default)]
pub struct ReplayOptions {
    /// Turns after this node (hash or prefix, on the replayed timeline) go live.
    pub live_after: Option<HashPrefix>,
    /// The replay session's title (default: `replay of SESSION BRANCH`).
    pub name: Option<BranchName>,
    /// How inference calls are compared (`--match-ignore`, `--strict`).
    pub matcher: Matcher,
}

/// An inference call that matched the recording tolerating volatile
/// differences.
#[derive(Clone, Debug, Serialize)]
pub struct ToleratedCall {
    /// The turn (1-based on the recorded timeline).
    pub turn: u64,
    /// The call's sequence within the turn.
    pub sequence: u32,
    /// Each difference tolerated: JSON pointer and rule.
    pub tolerated: Vec<Tolerated>,
}

/// One replayed turn.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayTurn {
    /// Its number on the recorded timeline.
    pub turn: u64,
    /// Whether it ran live (after `--live-after`).
    pub live: bool,
    /// The recorded input.
    pub input: String,
    /// The replayed output.
    pub output: String,
    /// Whether it matched the recording (always true for live turns).
    pub matched: bool,
}

/// What a replay did.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The session the replay was recorded in.
    pub session: String,
    /// The timeline the replay was recorded on (its `main`).
    pub branch: String,
    /// The turns replayed, in order.
    pub turns: Vec<ReplayTurn>,
    /// How many turns the recorded timeline has.
    pub recorded_turns: u64,
    /// The first difference, if any.
    pub divergence: Option<Divergence>,
    /// The inference calls matched tolerating volatile differences.
    pub tolerated: Vec<ToleratedCall>,
}

/// One recorded turn.
struct RecordedTurn {
    number: u64,
    index: usize,
    input: Vec<u8>,
    start_state: Option<StateRoot>,
    calls: BTreeMap<u32, RecordedCall>,
    complete: Option<TimelineNode>,
    /// A state write made outside any agent turn (`convo state put` on a
    /// fork: [`convo_runtime::turns::state_write`]): its writes, re-applied
    /// instead of sending the input to the agent.
    state_writes: Option<Vec<convo_runtime::turns::StateOp>>,
}

/// The recorded turns, and the matching of their inference calls.
fn split_turns(nodes: &[TimelineNode], matcher: &Matcher) -> (Vec<RecordedTurn>, Matching) {
    let mut turns: Vec<RecordedTurn> = Vec::new();
    let mut canon: Vec<Value> = Vec::new();
    let mut requests: BTreeMap<u32, (String, Value, Vec<u8>)> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let node = &n.stored.node;
        match node.kind {
            Kind::Invoke => {
                requests.clear();
                let marked = node
                    .diagnostics
                    .to_value()
                    .get(convo_runtime::turns::STATE_WRITE)
                    .and_then(Value::as_bool)
                    == Some(true);
                turns.push(RecordedTurn {
                    number: turns.len() as u64 + 1,
                    index: i,
                    input: n.payload.clone(),
                    start_state: n.stored.ctx.state,
                    calls: BTreeMap::new(),
                    complete: None,
                    state_writes: marked.then(Vec::new),
                });
            }
            Kind::Request => {
                if let (Some(t), Some(seq)) = (turns.last_mut(), node.sequence) {
                    let diag = node.diagnostics.to_value();
                    if let Some(w) = t.state_writes.as_mut()
                        && let Some(op) =
                            convo_runtime::turns::StateOp::from_request(&diag, &n.payload)
                    {
                        w.push(op);
                    }
                    let (described, inference) = if node.to == "infer" {
                        let (d, c) = describe_infer(matcher, &diag, &n.payload);
                        canon.push(c);
                        (d, Some(canon.len() - 1))
                    } else {
                        (describe_call(&node.to, &diag, &n.payload), None)
                    };
                    t.calls.insert(
                        seq,
                        RecordedCall {
                            described,
                            inference,
                            response: None,
                        },
                    );
                    requests.insert(seq, (node.to.clone(), diag, n.payload.clone()));
                }
            }
            Kind::Response => {
                if let (Some(t), Some(seq)) = (turns.last_mut(), node.sequence)
                    && let Some(c) = t.calls.get_mut(&seq)
                {
                    c.response = Some((n.payload.clone(), node.diagnostics.to_value()));
                }
            }
            Kind::Complete => {
                if let Some(t) = turns.last_mut() {
                    t.complete = Some(n.clone());
                }
            }
            Kind::Fork | Kind::Promote => {}
        }
    }
    let index = Index::new(canon, Rules::default(), matcher.strict);
    let matching = Matching {
        matcher: matcher.clone(),
        index,
    };
    (turns, matching)
}

fn failure_of(diag: &Value) -> String {
    diag.get("failure")
        .and_then(Value::as_str)
        .unwrap_or("none")
        .to_owned()
}

impl Harness {
    /// Replays `branch` of `session` (see the module docs), calling
    /// `progress` after each turn.
    pub async fn replay(
        &mut self,
        session: &SessionId,
        branch: &BranchName,
        opts: &ReplayOptions,
        mut progress: impl FnMut(&ReplayTurn),
    ) -> Result<ReplayReport> {
        let (s, b) = (*session, branch.clone());
        let recorded = self.pool.run(move |st| st.timeline(&s, &b)).await?;
        let (turns, matching) = split_turns(&recorded, &opts.matcher);
        let matching = Arc::new(matching);
        let live_index = match &opts.live_after {
            None => None,
            Some(p) => Some(
                recorded
                    .iter()
                    .position(|n| p.matches(&n.stored.hash))
                    .ok_or_else(|| {
                        HarnessError::Usage(format!(
                            "--live-after {}: no node of `{branch}` matches it",
                            p.as_str()
                        ))
                    })?,
            ),
        };
        let replay_session = self.replay_session(session, branch, opts).await?;
        let name = BranchName::main();
        let mut report = ReplayReport {
            session: replay_session.to_string(),
            branch: name.to_string(),
            turns: Vec::new(),
            recorded_turns: turns.len() as u64,
            divergence: None,
            tolerated: Vec::new(),
        };
        let at = (replay_session, name);
        for t in &turns {
            let live = live_index.is_some_and(|i| t.index > i);
            if !live {
                let (s, n, root) = (at.0, at.1.clone(), t.start_state);
                self.pool
                    .run(move |st| st.transaction(|l| l.set_working_state(&s, &n, root.as_ref())))
                    .await?;
            }
            let (output, divergence) = match &t.state_writes {
                Some(ops) => (String::new(), self.rewrite_state(t, ops, live, &at).await?),
                None => {
                    self.replay_turn(t, live, &at, &matching, &mut report)
                        .await?
                }
            };
            let rt = ReplayTurn {
                turn: t.number,
                live,
                input: String::from_utf8_lossy(&t.input).into_owned(),
                output,
                matched: divergence.is_none(),
            };
            progress(&rt);
            report.turns.push(rt);
            if divergence.is_some() {
                report.divergence = divergence;
                break;
            }
        }
        Ok(report)
    }

    /// The session a replay of `branch` of `session` is recorded as (its
    /// `main`), titled after the recorded timeline: a timeline of the same
    /// session would need a first node of its own, which verification
    /// refuses.
    async fn replay_session(
        &self,
        session: &SessionId,
        branch: &BranchName,
        opts: &ReplayOptions,
    ) -> Result<SessionId> {
        let title = match &opts.name {
            Some(n) => n.to_string(),
            None => format!("replay of {session} {branch}"),
        };
        let agent = self.opts.agent_name.clone();
        Ok(self
            .pool
            .run(move |st| st.transaction(|l| l.new_session(&agent, Some(&title), now_ms())))
            .await?
            .id)
    }

    /// A turn that wrote the state: its writes re-applied as recorded (the
    /// same nodes, the same root) on `at` (session, timeline); the
    /// divergence when the root differs from the recorded one (not
    /// compared when `live`).
    async fn rewrite_state(
        &self,
        t: &RecordedTurn,
        ops: &[convo_runtime::turns::StateOp],
        live: bool,
        at: &(SessionId, BranchName),
    ) -> Result<Option<Divergence>> {
        let (s, n, ops) = (at.0, at.1.clone(), ops.to_vec());
        let root = self
            .pool
            .run(move |st| {
                st.transaction(|l| {
                    convo_runtime::turns::state_write_turn(l, &s, &n, &ops, now_ms())
                        .map(|(root, _)| root)
                })
            })
            .await?;
        let recorded = t.complete.as_ref().and_then(|c| c.stored.node.state);
        Ok(
            (!live && recorded.is_some() && recorded != Some(root)).then(|| {
                Divergence::new(
                    t.number,
                    None,
                    "state",
                    &recorded.map(|r| r.to_hex()).unwrap_or_default(),
                    &root.to_hex(),
                )
            }),
        )
    }

    /// Runs recorded turn `t` again on `at` (session, timeline), its calls
    /// answered from the recording unless `live`: its output and where it
    /// diverged; the calls tolerated go to `report`.
    async fn replay_turn(
        &mut self,
        t: &RecordedTurn,
        live: bool,
        at: &(SessionId, BranchName),
        matching: &Arc<Matching>,
        report: &mut ReplayReport,
    ) -> Result<(String, Option<Divergence>)> {
        let expected = (!live).then(|| Expected {
            calls: t.calls.clone(),
            matching: matching.clone(),
        });
        let r = self
            .run_turn(
                &at.0,
                &at.1,
                &t.input,
                expected,
                t.number,
                std::future::pending(),
                &mut |_| {},
            )
            .await?;
        let divergence = if live {
            None
        } else {
            self.compare(t, &r).await?
        };
        report
            .tolerated
            .extend(r.tolerated.iter().map(|(seq, tolerated)| ToleratedCall {
                turn: t.number,
                sequence: *seq,
                tolerated: tolerated.clone(),
            }));
        Ok((r.output_text(), divergence))
    }

    async fn compare(&self, t: &RecordedTurn, r: &TurnReport) -> Result<Option<Divergence>> {
        // A turn the recording says was cut (interrupted, or never
        // completed: its harness was killed) is compared as far as it
        // went: the calls it recorded, not what came after the cut.
        let cut = t
            .complete
            .as_ref()
            .is_none_or(|c| failure_of(&c.stored.node.diagnostics.to_value()) == "interrupted");
        let recorded_max = t.calls.keys().max().copied().unwrap_or(0);
        let mut found: Vec<Divergence> = r
            .divergences
            .iter()
            .filter(|d| !cut || d.sequence.is_some_and(|q| q <= recorded_max))
            .cloned()
            .collect();
        let made: Vec<u32> = r
            .nodes
            .iter()
            .filter(|n| n.stored.node.kind == Kind::Request)
            .filter_map(|n| n.stored.node.sequence)
            .collect();
        for (seq, c) in &t.calls {
            if !made.contains(seq) {
                found.push(Divergence::new(
                    t.number,
                    Some(*seq),
                    "missing request",
                    &c.described,
                    "",
                ));
            }
        }
        found.sort_by_key(|d| d.sequence);
        if let Some(first) = found.into_iter().next() {
            return Ok(Some(first));
        }
        let Some(rec) = t.complete.as_ref().filter(|_| !cut) else {
            return Ok(None);
        };
        let rec_diag = rec.stored.node.diagnostics.to_value();
        let new_diag = r.complete.node.diagnostics.to_value();
        let (fa, fb) = (failure_of(&rec_diag), failure_of(&new_diag));
        if fa != fb {
            return Ok(Some(Divergence::new(t.number, None, "failure", &fa, &fb)));
        }
        if rec.payload != r.output {
            return Ok(Some(Divergence::new(
                t.number,
                None,
                "output",
                &String::from_utf8_lossy(&rec.payload),
                &r.output_text(),
            )));
        }
        let (ra, rb) = (rec.stored.node.state, r.complete.node.state);
        if ra != rb {
            let listing = |root: Option<StateRoot>| async move {
                let root = root.unwrap_or_else(convo_core::state::empty_root);
                let entries = self.pool.run(move |st| st.state_list(&root)).await?;
                Ok::<_, HarnessError>(
                    entries
                        .into_iter()
                        .map(|(k, v)| format!("{k} = {}\n", String::from_utf8_lossy(&v)))
                        .collect::<String>(),
                )
            };
            let (la, lb) = (listing(ra).await?, listing(rb).await?);
            return Ok(Some(Divergence::new(t.number, None, "state", &la, &lb)));
        }
        Ok(None)
    }
}
