//! Which recorded call a received request is: the one matcher's lookup.
//!
//! An [`Index`] holds recorded requests in canonical form (JSON values,
//! whatever produced them: an LLM call's `{method, path, headers, body}`,
//! an MCP message) and answers [`Index::find`] for a received one:
//!
//! - **exact**: the same canonical value (RFC 8785 text) as a recorded
//!   call not yet served;
//! - **tolerated**: a recorded call at the same place of the conversation
//!   (the same [`shape`]: method, path, model, tool names, the role, type
//!   and tool names of every message) whose every difference is volatile,
//!   each named by its JSON pointer and why ([`Tolerated`]);
//! - **repeat**: it matches only calls already served;
//! - **miss**: the closest recorded call not yet served and the JSON
//!   pointers where they differ.
//!
//! A difference is volatile when ([`Rules`]):
//! 1. its pointer is one a known agent or format changes on every run
//!    ([`AGENT_RULES`]: Claude Code's `anthropic-beta` header and
//!    `context_management`), or a `--match-ignore` pointer;
//! 2. its member's name says it is volatile (`duration_ms`, `agentId`,
//!    `timestamp`, … [`VOLATILE_KEYS`]);
//! 3. both sides are text equal once the volatile tokens are masked
//!    (UUIDs, ISO timestamps, temporary paths, and per agent: Claude
//!    Code's `agentId: …` and `duration_ms: …` in a Task result, Codex's
//!    `Chunk ID: …` and `Wall time: …` in a shell output);
//! 4. the recording itself shows it to vary: a message a later recorded
//!    call of the same conversation repeats differently (the pointer
//!    where they differ).
//!
//! With `strict`, only exact matches count.

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use super::parts::{Message, Parted};
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

/// Why a difference was tolerated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tolerated {
    /// Where (a JSON pointer into the canonical request).
    pub pointer: String,
    /// Which rule: `agent:claude-code`, `volatile key`, `volatile text`,
    /// `varies in the recording`, `ignored`.
    pub why: String,
}

/// What [`Index::find`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// The same canonical request as recorded call N.
    Exact(usize),
    /// Recorded call `call`, every difference volatile.
    Tolerated {
        /// The recorded call.
        call: usize,
        /// Every tolerated difference.
        tolerated: Vec<Tolerated>,
    },
    /// Only calls already served match (the last of them).
    Repeat(usize),
    /// Nothing matches.
    Miss {
        /// The closest recorded call not yet served.
        closest: Option<usize>,
        /// JSON pointers where it differs (at most 20).
        differences: Vec<String>,
    },
}

/// A known agent's or format's volatile fields.
#[derive(Debug)]
pub struct AgentRules {
    /// Its name (reported with what it tolerated).
    pub name: &'static str,
    /// The calls it applies to: paths starting with this.
    pub path_prefix: &'static str,
    /// Pointers (`*` for any member or element) whose differences do not count.
    pub pointers: &'static [&'static str],
    /// Regular expressions of volatile tokens in text.
    pub texts: &'static [&'static str],
    /// Regular expressions whose first group is an id: every occurrence
    /// of that id in the text is volatile too (Claude Code names a
    /// subagent's id after `agentId:` and again in a file name).
    pub ids: &'static [&'static str],
}

/// The rules kept per known agent and format.
pub const AGENT_RULES: &[AgentRules] = &[
    AgentRules {
        name: "any",
        path_prefix: "",
        pointers: &[],
        texts: &[
            // UUIDs, ISO-8601 timestamps, temporary paths.
            r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?",
            r"\b\d{4}-\d{2}-\d{2}\b",
            r"(/private)?(/tmp|/var/folders|/var/tmp)/[^\s/'\x22]+",
            r"(?i)\b(duration(_ms|_seconds)?|elapsed(_ms)?|took|wall[ _]time)\x22?\s*[:=]\s*[0-9.]+\s*(ms|s|seconds)?",
            r"(?i)<(duration(_ms)?|elapsed(_ms)?)>[0-9.]+</",
            // Long hexadecimal ids (an agent's, a commit's).
            r"\b[0-9a-f]{16,}\b",
        ],
        ids: &[],
    },
    AgentRules {
        // Claude Code: a Task (subagent) result names the agent and its
        // duration; betas and context editing vary with the run.
        name: "claude-code",
        path_prefix: "/v1/messages",
        pointers: &[
            "/headers/anthropic-beta",
            "/body/context_management",
            "/body/metadata",
        ],
        texts: &[],
        ids: &[
            r"\bagent_?[iI]d\x22?\s*[:=]\s*\x22?([0-9A-Za-z_-]{4,})",
            r"<task-id>([^<]{4,})</task-id>",
        ],
    },
    AgentRules {
        // Codex: its shell tool's output names a chunk and a wall time.
        name: "codex",
        path_prefix: "/v1/responses",
        pointers: &[],
        texts: &[r"Wall time:\s*[0-9.]+\s*(seconds|s|ms)?"],
        ids: &[
            r"Chunk ID:\s*([0-9A-Za-z_-]{4,})",
            r"\bsession_id\x22?\s*[:=]\s*\x22?([0-9A-Za-z_-]{4,})",
        ],
    },
];

/// Members whose value is volatile wherever they are.
pub const VOLATILE_KEYS: &[&str] = &[
    "duration_ms",
    "duration_seconds",
    "durationMs",
    "elapsed_ms",
    "agentId",
    "agent_id",
    "timestamp",
    "created_at",
    "request_id",
    "chunk_id",
    "wall_time",
];

struct Compiled {
    name: &'static str,
    path_prefix: &'static str,
    pointers: Vec<Vec<String>>,
    texts: Vec<regex::Regex>,
    ids: Vec<regex::Regex>,
}

static COMPILED: LazyLock<Vec<Compiled>> = LazyLock::new(|| {
    AGENT_RULES
        .iter()
        .map(|r| Compiled {
            name: r.name,
            path_prefix: r.path_prefix,
            pointers: r.pointers.iter().map(|p| segments(p)).collect(),
            texts: r
                .texts
                .iter()
                .filter_map(|t| regex::Regex::new(t).ok())
                .collect(),
            ids: r
                .ids
                .iter()
                .filter_map(|t| regex::Regex::new(t).ok())
                .collect(),
        })
        .collect()
});

/// A pointer's unescaped segments.
pub fn segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

/// Whether `pattern` (segments, `*` any) names `at` or a parent of it.
fn covers(pattern: &[String], at: &[String]) -> bool {
    pattern.len() <= at.len() && pattern.iter().zip(at).all(|(p, a)| p == "*" || p == a)
}

/// The rules that apply to a call (by its canonical `path`), and the
/// `--match-ignore` pointers.
#[derive(Debug, Default, Clone)]
pub struct Rules {
    /// Extra pointers whose differences do not count.
    pub ignore: Vec<String>,
}

impl Rules {
    fn applying(path: &str) -> impl Iterator<Item = &'static Compiled> {
        COMPILED
            .iter()
            .filter(move |c| path.starts_with(c.path_prefix))
    }

    /// Text with every volatile token of the rules for `path` masked.
    pub fn mask(path: &str, text: &str) -> String {
        let mut out = text.to_owned();
        let mut ids: Vec<String> = Vec::new();
        for c in Self::applying(path) {
            for re in &c.ids {
                ids.extend(
                    re.captures_iter(text)
                        .filter_map(|m| m.get(1).map(|g| g.as_str().to_owned())),
                );
            }
        }
        ids.sort_by_key(|i| std::cmp::Reverse(i.len()));
        for id in ids {
            out = out.replace(&id, "<id>");
        }
        for c in Self::applying(path) {
            for re in &c.texts {
                if re.is_match(&out) {
                    out = re.replace_all(&out, "<volatile>").into_owned();
                }
            }
        }
        out
    }

    /// Why the difference at `at` (segments) between `a` and `b` is
    /// volatile, if it is.
    fn why(&self, path: &str, at: &[String], a: &Value, b: &Value) -> Option<String> {
        if self.ignore.iter().any(|p| covers(&segments(p), at)) {
            return Some("ignored".into());
        }
        for c in Self::applying(path) {
            if c.pointers.iter().any(|p| covers(p, at)) {
                return Some(format!("agent:{}", c.name));
            }
        }
        if at
            .last()
            .is_some_and(|k| VOLATILE_KEYS.contains(&k.as_str()))
            && !a.is_object()
            && !a.is_array()
        {
            return Some("volatile key".into());
        }
        if let (Value::String(x), Value::String(y)) = (a, b)
            && Self::mask(path, x) == Self::mask(path, y)
        {
            return Some("volatile text".into());
        }
        None
    }
}

/// The place of a call in its conversation: method, path, model, tool
/// names, whether it streams, and each message's role, type and tool names
/// (never their text). Calls that differ only in volatile values have the
/// same shape. A digest, fed with no value built.
pub fn shape(canon: &Value) -> Key {
    let mut h = Sha256::new();
    shape_head(&mut h, canon);
    for m in conversation(canon).into_iter().flat_map(|c| c.1) {
        h.update(message_shape(m));
    }
    h.finalize().into()
}

/// What [`shape`] takes from a request but its messages.
pub(crate) fn shape_head(h: &mut Sha256, canon: &Value) {
    let body = canon.get("body").unwrap_or(&Value::Null);
    let opt = |h: &mut Sha256, v: Option<&Value>| feed(h, v.unwrap_or(&Value::Null));
    opt(h, canon.get("method"));
    opt(h, canon.get("path"));
    opt(h, body.get("model"));
    opt(h, body.get("stream"));
    for t in body
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        feed_str(h, b'N', name_of(t));
    }
    h.update(
        [body.get("system").is_some() as u8 | (body.get("instructions").is_some() as u8) << 1],
    );
}

fn name_of(v: &Value) -> &str {
    v.get("name")
        .or_else(|| v.pointer("/function/name"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// What [`shape`] takes from one message: its role, type, name, the type
/// and name of each block and the names of its tool calls.
pub(crate) fn message_shape(m: &Value) -> Key {
    let mut h = Sha256::new();
    let opt = |h: &mut Sha256, v: Option<&Value>| feed(h, v.unwrap_or(&Value::Null));
    opt(&mut h, m.get("role"));
    opt(&mut h, m.get("type"));
    feed_str(&mut h, b'N', name_of(m));
    match m.get("content") {
        Some(Value::Array(a)) => {
            for b in a {
                feed_str(
                    &mut h,
                    b'B',
                    b.get("type").and_then(Value::as_str).unwrap_or(""),
                );
                feed_str(&mut h, b'N', name_of(b));
            }
        }
        Some(Value::String(_)) => h.update(b"S"),
        _ => {}
    }
    for c in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        feed_str(&mut h, b'C', name_of(c));
    }
    h.finalize().into()
}

/// Recorded requests, looked up by [`key`] and by [`shape`]; each kept in
/// parts ([`Parted`]), a message repeated by later calls kept once.
#[derive(Debug, Default)]
pub struct Index {
    calls: Vec<Parted>,
    by_key: HashMap<Key, Vec<usize>>,
    by_shape: HashMap<Key, Vec<usize>>,
    /// Pointers where the recording shows a message to vary.
    learned: HashSet<String>,
    rules: Rules,
    strict: bool,
}

/// A 256-bit digest requests are looked up by ([`key`], [`shape`]).
pub type Key = [u8; 32];

/// The members of a request body that hold its conversation, one item a
/// message; the first that is an array is the request's conversation.
pub const CONVERSATION: [&str; 2] = ["messages", "input"];

/// The conversation of a canonical request: its member's name and items.
pub fn conversation(canon: &Value) -> Option<(&'static str, &Vec<Value>)> {
    let body = canon.get("body")?.as_object()?;
    CONVERSATION
        .iter()
        .find_map(|c| body.get(*c).and_then(Value::as_array).map(|a| (*c, a)))
}

/// What a canonical request is looked up by: a SHA-256 digest of its
/// structure, equal for two values exactly when their RFC 8785 texts are
/// equal (members in a fixed order, each string and number as JCS
/// writes it), with no text built. The conversation's messages count by
/// their own digests ([`message_key`]), so a request read in parts (its
/// messages known from earlier requests) is keyed without being read
/// whole ([`super::parts`]).
pub fn key(canon: &Value) -> Key {
    let conv = conversation(canon);
    let mut h = Sha256::new();
    feed_without(&mut h, canon, conv.map(|c| c.0));
    if let Some((name, a)) = conv {
        let keys: Vec<Key> = a.iter().map(message_key).collect();
        finish_key(&mut h, name, &keys);
    }
    h.finalize().into()
}

/// The digest of one message of a conversation.
pub fn message_key(m: &Value) -> Key {
    let mut h = Sha256::new();
    feed(&mut h, m);
    h.finalize().into()
}

/// Feeds a canonical request less its body's member `conv`.
pub(crate) fn feed_without(h: &mut Sha256, canon: &Value, conv: Option<&str>) {
    let (Some(conv), Value::Object(o)) = (conv, canon) else {
        return feed(h, canon);
    };
    h.update([b'o']);
    h.update((o.len() as u64).to_le_bytes());
    for (k, x) in o {
        feed_str(h, b'k', k);
        match (k.as_str(), x) {
            ("body", Value::Object(b)) => {
                h.update([b'o']);
                h.update((b.len() as u64 - u64::from(b.contains_key(conv))).to_le_bytes());
                for (bk, bx) in b.iter().filter(|(bk, _)| *bk != conv) {
                    feed_str(h, b'k', bk);
                    feed(h, bx);
                }
            }
            _ => feed(h, x),
        }
    }
}

/// Ends a key with the conversation `name` and its messages' keys.
pub(crate) fn finish_key(h: &mut Sha256, name: &str, keys: &[Key]) {
    feed_str(h, b'C', name);
    h.update((keys.len() as u64).to_le_bytes());
    keys.iter().for_each(|k| h.update(k));
}

/// Feeds `v` to `h`, each item tagged and length-prefixed so that no two
/// different values feed the same bytes.
pub(crate) fn feed(h: &mut Sha256, v: &Value) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"T" } else { b"F" }),
        Value::Number(n) => {
            let text = convo_core::json::canonical(v).unwrap_or_else(|_| n.to_string());
            feed_str(h, b'd', &text);
        }
        Value::String(s) => feed_str(h, b's', s),
        Value::Array(a) => {
            h.update([b'a']);
            h.update((a.len() as u64).to_le_bytes());
            a.iter().for_each(|x| feed(h, x));
        }
        Value::Object(o) => {
            // A `Map` iterates in one order (sorted) whatever the order
            // the members were read in.
            h.update([b'o']);
            h.update((o.len() as u64).to_le_bytes());
            for (k, x) in o {
                feed_str(h, b'k', k);
                feed(h, x);
            }
        }
    }
}

pub(crate) fn feed_str(h: &mut Sha256, tag: u8, s: &str) {
    h.update([tag]);
    h.update((s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

fn path_of(v: &Value) -> &str {
    v.get("path").and_then(Value::as_str).unwrap_or("")
}

impl Index {
    /// An index of `calls` (canonical requests, in recorded order).
    pub fn new(calls: Vec<Value>, rules: Rules, strict: bool) -> Index {
        let mut shared = HashMap::new();
        let calls = calls
            .into_iter()
            .map(|c| Parted::split(c, &mut shared))
            .collect();
        Index::of_parts(calls, rules, strict)
    }

    /// An index of `calls` already in parts.
    pub fn of_parts(calls: Vec<Parted>, rules: Rules, strict: bool) -> Index {
        let mut by_key: HashMap<Key, Vec<usize>> = HashMap::new();
        let mut by_shape: HashMap<Key, Vec<usize>> = HashMap::new();
        for (i, c) in calls.iter().enumerate() {
            by_key.entry(c.key).or_default().push(i);
            if !strict {
                by_shape.entry(c.shape).or_default().push(i);
            }
        }
        let learned = if strict {
            HashSet::new()
        } else {
            learn(&calls)
        };
        Index {
            calls,
            by_key,
            by_shape,
            learned,
            rules,
            strict,
        }
    }

    /// Recorded call `i`'s canonical request, whole.
    pub fn get(&self, i: usize) -> Option<Value> {
        self.calls.get(i).map(Parted::whole)
    }

    /// Recorded call `i` in parts.
    pub fn parts(&self, i: usize) -> Option<&Parted> {
        self.calls.get(i)
    }

    /// How many calls are recorded.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// The pointers the recording shows to vary.
    pub fn learned(&self) -> impl Iterator<Item = &String> {
        self.learned.iter()
    }

    /// The first call `served` does not mark whose canonical request is
    /// recorded call `i`'s: what [`Index::find`] answers exactly for a
    /// request known to be the same as call `i` (the replay's look-up
    /// by the received bytes).
    pub fn same_as(&self, i: usize, served: &[bool]) -> Option<usize> {
        let free = |i: &usize| !served.get(*i).copied().unwrap_or(false);
        self.by_key
            .get(&self.calls.get(i)?.key)?
            .iter()
            .copied()
            .find(free)
    }

    /// Looks `received` up among the calls `served` does not mark (see
    /// the module docs).
    pub fn find(&self, received: &Value, served: &[bool]) -> Found {
        let r = Parted::split(received.clone(), &mut HashMap::new());
        let (found, same_place) = self.look(&r, served);
        match found {
            Some(f) => f,
            None => self.closest(received, same_place, served),
        }
    }

    /// [`Index::find`] for a request read in parts ([`Parted`]): an exact
    /// match or the call tolerating volatile differences. `None` for a
    /// repeat or a miss (whose report reads the whole request).
    pub fn find_parts(&self, r: &Parted, served: &[bool]) -> Option<Found> {
        match self.look(r, served).0? {
            f @ (Found::Exact(_) | Found::Tolerated { .. }) => Some(f),
            Found::Repeat(_) | Found::Miss { .. } => None,
        }
    }

    /// Exact, tolerated or repeat; `None` (with the calls of the same
    /// shape) for a miss.
    fn look(&self, r: &Parted, served: &[bool]) -> (Option<Found>, Option<&[usize]>) {
        let free = |i: &usize| !served.get(*i).copied().unwrap_or(false);
        let exact = self.by_key.get(&r.key);
        if let Some(i) = exact.and_then(|all| all.iter().copied().find(free)) {
            return (Some(Found::Exact(i)), None);
        }
        let same_place = if self.strict {
            None
        } else {
            self.by_shape.get(&r.shape)
        };
        let mut best: Option<(usize, Vec<Tolerated>)> = None;
        let mut repeat = exact.and_then(|all| all.last().copied());
        for &i in same_place.into_iter().flatten() {
            let Some(t) = self.tolerates_parts(&self.calls[i], r) else {
                continue;
            };
            if !free(&i) {
                repeat = repeat.or(Some(i));
                continue;
            }
            if best.as_ref().is_none_or(|(_, b)| t.len() < b.len()) {
                best = Some((i, t));
            }
        }
        let found = match (best, repeat) {
            (Some((call, tolerated)), _) => Some(Found::Tolerated { call, tolerated }),
            (None, Some(i)) => Some(Found::Repeat(i)),
            (None, None) => None,
        };
        (found, same_place.map(Vec::as_slice))
    }

    /// The closest free call: of the same shape first, else by method and
    /// path, then fewest differences, then the earliest.
    fn closest(&self, received: &Value, same: Option<&[usize]>, served: &[bool]) -> Found {
        let free = |i: &usize| !served.get(*i).copied().unwrap_or(false);
        let place = |v: &Value| (v.get("method").cloned(), v.get("path").cloned());
        let pick = |it: &mut dyn Iterator<Item = usize>| {
            it.filter(free)
                .map(|i| {
                    let recorded = self.calls[i].whole();
                    let d = super::differences(&recorded, received);
                    ((place(&recorded) != place(received), d.len(), i), d)
                })
                .min_by_key(|(rank, _)| *rank)
        };
        let found = same
            .and_then(|s| pick(&mut s.iter().copied()))
            .or_else(|| pick(&mut (0..self.calls.len())));
        match found {
            Some(((_, _, i), differences)) => Found::Miss {
                closest: Some(i),
                differences,
            },
            None => Found::Miss {
                closest: None,
                differences: vec![],
            },
        }
    }

    /// [`Index::tolerates`] of recorded call `i` (read whole).
    pub fn tolerates_call(&self, i: usize, received: &Value) -> Option<Vec<Tolerated>> {
        self.tolerates(&self.calls.get(i)?.whole(), received)
    }

    /// [`Index::tolerates`] of two requests in parts: the messages whose
    /// keys are the same are not compared.
    fn tolerates_parts(&self, a: &Parted, b: &Parted) -> Option<Vec<Tolerated>> {
        let (Value::Object(x), Value::Object(y)) = (&a.head, &b.head) else {
            return self.tolerates(&a.whole(), &b.whole());
        };
        if a.conv != b.conv {
            return self.tolerates(&a.whole(), &b.whole());
        }
        let path = path_of(&b.head);
        let (mut at, mut out) = (Vec::new(), Vec::new());
        for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
            let (p, q) = (
                x.get(k).unwrap_or(&Value::Null),
                y.get(k).unwrap_or(&Value::Null),
            );
            at.push(k.clone());
            let ok = match (k.as_str(), a.conv, p, q) {
                ("body", Some(conv), Value::Object(p), Value::Object(q)) => {
                    self.walk_body(path, (p, q), conv, (a, b), &mut at, &mut out)
                }
                _ => self.walk(path, p, q, &mut at, &mut out),
            };
            at.pop();
            if !ok {
                return None;
            }
        }
        Some(out)
    }

    /// Two bodies less their conversation `conv`, whose messages are
    /// `calls`' (the conversation walked in its place among the members).
    fn walk_body(
        &self,
        path: &str,
        (x, y): (&Map<String, Value>, &Map<String, Value>),
        conv: &str,
        (a, b): (&Parted, &Parted),
        at: &mut Vec<String>,
        out: &mut Vec<Tolerated>,
    ) -> bool {
        let mut keys: Vec<&str> = x.keys().map(String::as_str).chain([conv]).collect();
        keys.sort_unstable();
        keys.extend(y.keys().map(String::as_str).filter(|k| !x.contains_key(*k)));
        keys.into_iter().all(|k| {
            at.push(k.to_owned());
            let ok = if k == conv {
                self.walk_messages(path, &a.messages, &b.messages, at, out)
            } else {
                let missing = Value::Null;
                let (p, q) = (x.get(k).unwrap_or(&missing), y.get(k).unwrap_or(&missing));
                self.walk(path, p, q, at, out)
            };
            at.pop();
            ok
        })
    }

    /// Two conversations, message by message; those with the same key are
    /// the same.
    fn walk_messages(
        &self,
        path: &str,
        x: &[std::sync::Arc<Message>],
        y: &[std::sync::Arc<Message>],
        at: &mut Vec<String>,
        out: &mut Vec<Tolerated>,
    ) -> bool {
        if x.len() != y.len() {
            let whole = |m: &[std::sync::Arc<Message>]| {
                Value::Array(m.iter().map(|m| m.value.clone()).collect())
            };
            return self.walk(path, &whole(x), &whole(y), at, out);
        }
        x.iter().zip(y).enumerate().all(|(j, (p, q))| {
            if p.key == q.key {
                return true;
            }
            at.push(j.to_string());
            let ok = self.walk(path, &p.value, &q.value, at, out);
            at.pop();
            ok
        })
    }

    /// Every difference between `recorded` and `received` if each is
    /// volatile; `None` at the first that is not.
    pub fn tolerates(&self, recorded: &Value, received: &Value) -> Option<Vec<Tolerated>> {
        let path = path_of(received);
        let mut out = Vec::new();
        let mut at = Vec::new();
        self.walk(path, recorded, received, &mut at, &mut out)
            .then_some(out)
    }

    fn walk(
        &self,
        path: &str,
        a: &Value,
        b: &Value,
        at: &mut Vec<String>,
        out: &mut Vec<Tolerated>,
    ) -> bool {
        if a == b {
            return true;
        }
        let mark = out.len();
        let descend = match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let ok = x
                    .keys()
                    .chain(y.keys().filter(|k| !x.contains_key(*k)))
                    .all(|k| {
                        at.push(k.clone());
                        let ok = self.walk(
                            path,
                            x.get(k).unwrap_or(&Value::Null),
                            y.get(k).unwrap_or(&Value::Null),
                            at,
                            out,
                        );
                        at.pop();
                        ok
                    });
                Some(ok)
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                Some(x.iter().zip(y).enumerate().all(|(i, (p, q))| {
                    at.push(i.to_string());
                    let ok = self.walk(path, p, q, at, out);
                    at.pop();
                    ok
                }))
            }
            _ => None,
        };
        if descend == Some(true) {
            return true;
        }
        out.truncate(mark);
        // A container that differs in a way its members do not tolerate
        // may still be covered whole (an ignored pointer, a rule).
        let pointer: String = at.iter().map(|s| format!("/{}", escape(s))).collect();
        let why = self.rules.why(path, at, a, b).or_else(|| {
            self.learned
                .contains(&pointer)
                .then(|| "varies in the recording".into())
        });
        match why {
            Some(why) => {
                out.push(Tolerated { pointer, why });
                true
            }
            None => false,
        }
    }
}

/// Pointers the recording shows to vary: where a later call of the same
/// conversation (same path, model and tools, the same first message, more
/// messages) repeats an earlier call's message differently. A conversation
/// only counts when at most a quarter of the repeated messages differ.
fn learn(calls: &[Parted]) -> HashSet<String> {
    let mut out = HashSet::new();
    let group = |c: &Parted| {
        let b = c.head.get("body").unwrap_or(&Value::Null);
        serde_json::json!([c.head.get("path"), b.get("model"), b.get("tools")]).to_string()
    };
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, c) in calls.iter().enumerate() {
        let g = group(c);
        if let Some(&prev) = last.get(&g) {
            learn_pair(&calls[prev], c, &mut out);
        }
        last.insert(g, i);
    }
    out
}

fn learn_pair(a: &Parted, b: &Parted, out: &mut HashSet<String>) {
    let (Some(field), true) = (a.conv, a.conv == b.conv) else {
        return;
    };
    let (x, y) = (&a.messages, &b.messages);
    if x.is_empty() || y.len() <= x.len() || x[0].key != y[0].key {
        return;
    }
    let differing: Vec<usize> = (0..x.len()).filter(|&j| x[j].key != y[j].key).collect();
    if differing.len() * 4 > x.len() {
        return;
    }
    for j in differing {
        for p in super::differences(&x[j].value, &y[j].value) {
            out.insert(format!("/body/{field}/{j}{p}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(messages: Value) -> Value {
        json!({"method": "POST", "path": "/v1/messages", "headers": {},
            "body": {"model": "m", "tools": [{"name": "Task"}], "messages": messages}})
    }

    #[test]
    fn a_task_result_with_another_agent_id_and_duration_is_tolerated_by_pointer() {
        let rec = call(json!([{"role": "user", "content": "go"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
              "content": "done\nagentId: a1b2c3d (for resuming)\n<usage>duration_ms: 5123</usage>"}]}]));
        let got = call(json!([{"role": "user", "content": "go"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
              "content": "done\nagentId: f9e8d7c (for resuming)\n<usage>duration_ms: 77</usage>"}]}]));
        let idx = Index::new(vec![rec], Rules::default(), false);
        match idx.find(&got, &[false]) {
            Found::Tolerated { call: 0, tolerated } => assert_eq!(
                tolerated,
                vec![Tolerated {
                    pointer: "/body/messages/1/content/0/content".into(),
                    why: "volatile text".into()
                }]
            ),
            other => panic!("{other:?}"),
        }
        // Served already: a repeat, not "not in the recording".
        assert_eq!(idx.find(&got, &[true]), Found::Repeat(0));
        // Strict: a miss naming the pointer.
        let strict = Index::new(vec![idx.calls[0].whole()], Rules::default(), true);
        assert_eq!(
            strict.find(&got, &[false]),
            Found::Miss {
                closest: Some(0),
                differences: vec!["/body/messages/1/content/0/content".into()]
            }
        );
    }

    #[test]
    fn a_changed_text_is_a_miss_and_codex_chunk_ids_are_not() {
        let out = |chunk: &str, text: &str| {
            let wall = chunk.len() as f64 / 7.0;
            json!({"method": "POST", "path": "/v1/responses", "headers": {},
                "body": {"model": "m", "input": [{"type": "function_call_output", "call_id": "c",
                  "output": format!("Chunk ID: {chunk}\nWall time: {wall:.4} seconds\nOutput:\n{text}")}]}})
        };
        let idx = Index::new(vec![out("3f9a1c", "a.txt")], Rules::default(), false);
        assert!(matches!(
            idx.find(&out("77aa00e", "a.txt"), &[false]),
            Found::Tolerated { call: 0, .. }
        ));
        assert_eq!(
            idx.find(&out("77aa00e", "b.txt"), &[false]),
            Found::Miss {
                closest: Some(0),
                differences: vec!["/body/input/0/output".into()]
            }
        );
        // An ignored pointer tolerates anything under it.
        let rules = Rules {
            ignore: vec!["/body/input/*/output".into()],
        };
        let idx = Index::new(vec![out("3f9a1c", "a.txt")], rules, false);
        assert!(matches!(
            idx.find(&out("77aa00", "b.txt"), &[false]),
            Found::Tolerated { .. }
        ));
    }

    #[test]
    fn what_the_recording_shows_to_vary_is_tolerated_and_a_changed_prompt_is_not() {
        let a = call(json!([{"role": "user", "content": "go"},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "y"}, {"role": "user", "content": "state 1"}]));
        let b = call(json!([{"role": "user", "content": "go"},
            {"role": "assistant", "content": "x"}, {"role": "user", "content": "ok"},
            {"role": "assistant", "content": "y"}, {"role": "user", "content": "state 2"},
            {"role": "assistant", "content": "z"}, {"role": "user", "content": "more"}]));
        let idx = Index::new(vec![a.clone(), b], Rules::default(), false);
        let mut got = a.clone();
        got["body"]["messages"][4]["content"] = json!("state 9");
        assert!(
            matches!(idx.find(&got, &[false, false]), Found::Tolerated { call: 0, ref tolerated }
                if tolerated[0].why == "varies in the recording"),
        );
        let mut changed = a;
        changed["body"]["messages"][0]["content"] = json!("stop");
        assert!(matches!(
            idx.find(&changed, &[false, false]),
            Found::Miss {
                closest: Some(0),
                ..
            }
        ));
    }
}
