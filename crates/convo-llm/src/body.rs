//! A request body read once: what recording a call needs from it.
//!
//! An agent resends its whole conversation with every call, so the n-th
//! request carries n messages. Everything the proxy derives from a request
//! (model, stream, the user's new input, the thread keys of [`thread`],
//! whether to add `stream_options`) is read here in one pass over the
//! bytes, without building a `serde_json::Value` of the request: the top
//! level is read into borrowed slices ([`RawValue`]), each message stays a
//! slice of the body until it is needed.
//!
//! The thread keys hash the conversation's messages in their canonical
//! form ([`thread`](crate::thread)): SHA-256 over `[m1,m2,…]` in RFC 8785
//! form, which is the same as feeding `[`, each message's canonical form
//! and `,` between them into one SHA-256 ([`Chain`]). A hasher's state
//! after the messages of one request is remembered ([`Keys`], in memory),
//! under the SHA-256 of those messages' *bytes as sent*; the next request
//! of the conversation starts with the same bytes, so it finds that state
//! and parses and normalizes only the messages it adds. Per call, the
//! history costs one SHA-256 pass over its bytes (to find the state), and
//! no allocation that grows with it.
//!
//! [`thread`]: crate::thread

use crate::api::{self, Api};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// The canonical hash of a list of messages, fed one message at a time:
/// `[`, each message [normalized](api::normalize) in RFC 8785 form, `,`
/// between them; [`Chain::key`] closes the list.
#[derive(Clone)]
pub struct Chain {
    h: Sha256,
    n: usize,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain").field("messages", &self.n).finish()
    }
}

struct Feed<'a>(&'a mut Sha256);

impl std::io::Write for Feed<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Default for Chain {
    fn default() -> Chain {
        let mut h = Sha256::new();
        h.update(b"[");
        Chain { h, n: 0 }
    }
}

impl Chain {
    /// Adds one message (as sent: it is normalized here).
    pub fn push(&mut self, m: &Value) {
        if self.n > 0 {
            self.h.update(b",");
        }
        let _ = serde_jcs::to_writer(Feed(&mut self.h), &api::normalize(m));
        self.n += 1;
    }

    /// The key of the messages so far (hex SHA-256).
    pub fn key(&self) -> String {
        let mut h = self.h.clone();
        h.update(b"]");
        hex::encode(h.finalize())
    }

    /// The key of the messages so far followed by an answer (one message,
    /// or a Responses API answer's list of output items).
    pub fn key_with(&self, answer: &Value) -> String {
        let mut c = self.clone();
        match answer {
            Value::Array(items) => items.iter().for_each(|m| c.push(m)),
            one => c.push(one),
        }
        c.key()
    }
}

/// Whether a message ends what a next request continues: an assistant
/// message or a Responses API output item sent back.
fn answers(m: &Value) -> bool {
    m.get("role").and_then(Value::as_str) == Some("assistant")
        || matches!(
            m.get("type").and_then(Value::as_str),
            Some("function_call" | "reasoning")
        )
}

/// Whether a message is instructions to the model (`system`,
/// `developer`): not part of what a conversation continues, so an agent
/// that hands the conversation to another agent (another system prompt,
/// the same messages) continues it, as Anthropic's top-level `system`
/// never counted.
fn instructions(m: &Value) -> bool {
    matches!(
        m.get("role").and_then(Value::as_str),
        Some("system" | "developer")
    )
}

/// A conversation read message by message: the hash so far (of every
/// message but [`instructions`]), and where the last answer (and so the
/// key of what a request continues) is.
#[derive(Clone, Debug, Default)]
struct Walk {
    /// Messages read.
    seen: usize,
    chain: Chain,
    /// Index of the last answer.
    last: Option<usize>,
    /// Whether the messages since the last answer are its output items.
    extending: bool,
    /// The key of the messages up to the last answer and its items.
    before: Option<String>,
    /// The key of the last answer alone, when it calls tools
    /// ([`answer_key`]).
    answer: Option<String>,
}

/// The key a tool-calling answer is known by alone (`answer:` and the
/// hash of its canonical form): its call ids are the model's, so a
/// request that sends it back continues the turn that got it even when
/// the history before it was rewritten (an agent SDK that hands the
/// conversation to another agent with the history summarized). `None`
/// for an answer that calls no tool.
pub fn answer_key(m: &Value) -> Option<String> {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())?;
    let mut c = Chain::default();
    c.push(m);
    Some(format!("answer:{}", c.key()))
}

impl Walk {
    fn step(&mut self, m: &Value) {
        let i = self.seen;
        self.seen += 1;
        if instructions(m) {
            return;
        }
        self.chain.push(m);
        if answers(m) {
            self.last = Some(i);
            self.extending = true;
            self.before = Some(self.chain.key());
            self.answer = answer_key(m);
        } else if self.extending
            && m.get("role").is_none()
            && m.get("type").and_then(Value::as_str) != Some("function_call_output")
        {
            // A Responses API answer is several output items: all of them.
            self.before = Some(self.chain.key());
        } else {
            self.extending = false;
        }
    }
}

/// The conversation a request carries.
#[derive(Clone, Debug, Default)]
pub struct Conversation {
    /// The user's new input ([`api::new_input`]).
    pub new_input: Vec<u8>,
    /// The key of what the request continues (`None` for a first request).
    pub before: Option<String>,
    /// The key of its last answer alone, when that called tools
    /// ([`answer_key`]).
    pub answer: Option<String>,
    /// The hash of all its messages, to which the answer is added.
    pub after: Chain,
}

/// What recording needs from a request body (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// The body is a JSON object.
    pub object: bool,
    /// `model`.
    pub model: Option<String>,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options` is there (not `null`).
    pub stream_options: bool,
    /// `stream_options.include_usage: true`.
    pub include_usage: bool,
    /// The Responses API's `previous_response_id`.
    pub previous_response_id: Option<String>,
    /// The Responses API's `conversation` (an id, or `{"id": …}`).
    pub conversation: Option<String>,
    /// The messages, when the API has a message list.
    pub messages: Option<Conversation>,
    /// The conversation identity the client sends, with what its messages
    /// say before the first human text (see [`client_key`]): read for a
    /// conversation's first request only (no answer in it yet).
    pub client: Option<String>,
}

/// Conversations' hasher states, by the requests that ended with them:
/// see the module docs. A state is found by a fingerprint of the
/// messages' bytes (a fast 64-bit hash per message, chained) and used
/// only once those bytes are compared with the request it was remembered
/// from (kept, not copied: the body's `Bytes`). Bounded: past
/// [`Keys::LIMIT`] states or [`Keys::LIMIT_BYTES`] bodies, the least
/// recently used go.
#[derive(Debug, Default)]
pub struct Keys {
    map: Mutex<Remembered>,
}

#[derive(Debug, Default)]
struct Remembered {
    by_print: HashMap<u64, Known>,
    /// The fingerprints of the requests remembered, by their first bytes
    /// ([`head_key`]), most recent last: where a request that continues
    /// one is found before it is parsed ([`Facts::continued`]).
    by_head: HashMap<u64, Vec<u64>>,
    /// Bodies held, in bytes.
    held: usize,
    /// A clock for least-recently-used eviction.
    tick: u64,
    /// Message bytes compared and fingerprinted, and normalized and
    /// hashed, since the start (what a request costs; tests read it).
    scanned: u64,
    hashed: u64,
    /// Request bytes parsed as JSON (the whole body, or what follows a
    /// remembered beginning).
    parsed: u64,
}

/// One request remembered: its body, where its messages are in it, and
/// the walk after all of them.
#[derive(Debug)]
struct Known {
    body: Bytes,
    spans: Vec<(u8, u32, u32)>,
    walk: Walk,
    used: u64,
}

impl Keys {
    /// States kept at most (one per conversation).
    pub const LIMIT: usize = 50_000;
    /// Bodies kept at most, in bytes.
    pub const LIMIT_BYTES: usize = 64 << 20;

    /// Message bytes fingerprinted and compared so far, and message
    /// bytes parsed, normalized and hashed (the part not remembered).
    pub fn work(&self) -> (u64, u64) {
        self.map
            .lock()
            .map(|m| (m.scanned, m.hashed))
            .unwrap_or((0, 0))
    }

    /// Request bytes parsed as JSON so far.
    pub fn parsed(&self) -> u64 {
        self.map.lock().map(|m| m.parsed).unwrap_or(0)
    }

    /// `now` when it is the same bytes as the span `(a, b)` of the
    /// request remembered as `print`.
    fn unchanged<'a>(&self, print: u64, (a, b): (u32, u32), now: &'a str) -> Option<&'a str> {
        let map = self.map.lock().ok()?;
        let kn = map.by_print.get(&print)?;
        (kn.body.get(a as usize..b as usize)? == now.as_bytes()).then_some(now)
    }
}

/// Remembered requests found by their first bytes at most, per
/// [`head_key`] (conversations that start alike: the same system prompt).
const PER_HEAD: usize = 32;
/// How many first bytes [`head_key`] reads.
const HEAD: usize = 64;

/// The key of a body's first [`HEAD`] bytes.
fn head_key(body: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    PRINT.hash_one(&body[..body.len().min(HEAD)])
}

/// How many JSON whitespace bytes `b` starts with.
fn ws(b: &[u8]) -> usize {
    b.iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        .unwrap_or(b.len())
}

/// The length of the JSON value `b` starts with, found by its brackets and
/// strings (the value is checked by the caller); `None` when it does not
/// end within `b`.
fn value_len(b: &[u8]) -> Option<usize> {
    match b.first()? {
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'"' => i += string_len(&b[i..])? - 1,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        b'"' => string_len(b),
        _ => Some(
            b.iter()
                .position(|c| matches!(c, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(b.len()),
        ),
    }
}

/// The length of the JSON string `b` starts with (its quotes included).
fn string_len(b: &[u8]) -> Option<usize> {
    let mut i = 1;
    loop {
        i += b.get(i..)?.iter().position(|c| matches!(c, b'"' | b'\\'))?;
        match b[i] {
            b'"' => return Some(i + 1),
            _ => i += 2,
        }
    }
}

/// The messages `text` adds after a remembered beginning ending at `end`,
/// each checked and pushed to `sources`; where the messages array's `]`
/// is, or `None` when the array does not go on that way.
fn added_messages<'a>(text: &'a str, end: usize, sources: &mut Vec<Source<'a>>) -> Option<usize> {
    let body = text.as_bytes();
    let mut at = end;
    loop {
        at += ws(&body[at..]);
        match body.get(at)? {
            b']' => return Some(at),
            b',' => {
                at += 1;
                at += ws(&body[at..]);
                let len = value_len(&body[at..])?;
                let m = text.get(at..at + len)?;
                serde_json::from_str::<serde::de::IgnoredAny>(m).ok()?;
                sources.push(Source::Message(m));
                at += len;
            }
            _ => return None,
        }
    }
}

impl Remembered {
    /// Drops the least recently used half once over a bound.
    fn bound(&mut self) {
        if self.by_print.len() <= Keys::LIMIT && self.held <= Keys::LIMIT_BYTES {
            return;
        }
        let mut ticks: Vec<u64> = self.by_print.values().map(|k| k.used).collect();
        ticks.sort_unstable();
        let cut = ticks[ticks.len() / 2];
        self.by_print.retain(|_, k| k.used > cut);
        self.held = self.by_print.values().map(|k| k.body.len()).sum();
        let kept = &self.by_print;
        self.by_head.retain(|_, v| {
            v.retain(|p| kept.contains_key(p));
            !v.is_empty()
        });
    }

    /// The walk after the messages of the request remembered as `print`
    /// (there), found as the beginning of another: taken out with it when
    /// `extended` (the other adds messages and reuses its buffers), else
    /// marked used.
    fn take(&mut self, print: u64, extended: bool) -> (Walk, Option<Known>) {
        if extended {
            let kn = self.by_print.remove(&print).expect("found by the caller");
            self.held -= kn.body.len();
            (kn.walk.clone(), Some(kn))
        } else {
            self.tick += 1;
            let tick = self.tick;
            let kn = self.by_print.get_mut(&print).expect("found by the caller");
            kn.used = tick;
            (kn.walk.clone(), None)
        }
    }

    /// Remembers a request under `print` (its messages' fingerprint) with
    /// the walk after its messages, when each of them is a slice of its
    /// body; `reused`: a request taken out, whose buffers are reused.
    fn remember(
        &mut self,
        print: u64,
        body: &Bytes,
        sources: &[Source<'_>],
        reused: Option<Known>,
        walk: &Walk,
    ) {
        let mut spans = reused.map(|r| r.spans).unwrap_or_default();
        spans.clear();
        spans.reserve(sources.len());
        spans.extend(sources.iter().map_while(|s| span(body, s)));
        if spans.len() != sources.len() {
            return;
        }
        self.tick += 1;
        self.held += body.len();
        let used = self.tick;
        self.by_print.insert(
            print,
            Known {
                body: body.clone(),
                spans,
                walk: walk.clone(),
                used,
            },
        );
        let Remembered {
            by_print, by_head, ..
        } = &mut *self;
        let heads = by_head.entry(head_key(body)).or_default();
        heads.retain(|p| *p != print && by_print.contains_key(p));
        if heads.len() >= PER_HEAD {
            heads.remove(0);
        }
        heads.push(print);
        self.bound();
    }

    /// The remembered request `body` continues (the same bytes to the end
    /// of its last message, then more), most recent first: the first that
    /// matches is taken (any remembered beginning gives the same keys).
    fn continued_by(&self, api: Api, body: &[u8]) -> Option<(&Known, Prior)> {
        let cands = self.by_head.get(&head_key(body))?;
        for p in cands.iter().rev() {
            let Some(kn) = self.by_print.get(p) else {
                continue;
            };
            let system = kn.spans.first().filter(|s| s.0 == b's').map(|s| (s.1, s.2));
            let msgs = &kn.spans[usize::from(system.is_some())..];
            let (Some(first), Some(last)) = (msgs.first(), msgs.last()) else {
                continue;
            };
            let end = last.2 as usize;
            if (system.is_none() || api == Api::Messages)
                && end < body.len()
                && kn.body.len() >= end
                && msgs.iter().all(|s| s.0 == b'm')
                && body[..end] == kn.body[..end]
            {
                let prior = Prior {
                    print: *p,
                    end,
                    system,
                    first: first.1 as usize,
                };
                return Some((kn, prior));
            }
        }
        None
    }
}

/// A remembered request that another continues.
struct Prior {
    /// Its fingerprint.
    print: u64,
    /// Where its last message ends.
    end: usize,
    /// Where its `system` is, when it has one (a Messages API request).
    system: Option<(u32, u32)>,
    /// Where its first message starts.
    first: usize,
}

/// The top level of a request, borrowed from its bytes.
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    previous_response_id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    conversation: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    prompt_cache_key: Option<&'a RawValue>,
}

fn value(raw: Option<&RawValue>) -> Value {
    raw.and_then(|r| serde_json::from_str(r.get()).ok())
        .unwrap_or(Value::Null)
}

/// One message of a request: a slice of its bytes, or one the API implies
/// (a Messages API `system`, a Responses API `input` string).
#[derive(Clone, Copy)]
enum Source<'a> {
    Message(&'a str),
    System(&'a str),
    Input(&'a str),
}

impl<'a> Source<'a> {
    fn bytes(&self) -> (u8, &'a str) {
        match *self {
            Source::Message(r) => (b'm', r),
            Source::System(r) => (b's', r),
            Source::Input(r) => (b'i', r),
        }
    }

    fn value(&self) -> Value {
        let of = |r: &str| serde_json::from_str(r).unwrap_or(Value::Null);
        match *self {
            Source::Message(r) => of(r),
            Source::System(r) => json!({"role": "system", "content": of(r)}),
            Source::Input(r) => json!({"role": "user", "content": of(r)}),
        }
    }
}

/// The fingerprint of a list of messages extended by one.
fn extend(print: u64, s: &Source<'_>) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let (tag, bytes) = s.bytes();
    let mut h = PRINT.build_hasher();
    print.hash(&mut h);
    tag.hash(&mut h);
    bytes.hash(&mut h);
    h.finish()
}

/// The fingerprints' hasher (fast, not cryptographic: a match is
/// compared byte for byte before it is used).
static PRINT: std::sync::LazyLock<foldhash::fast::RandomState> =
    std::sync::LazyLock::new(foldhash::fast::RandomState::default);

/// Where `s` sits in `body`, when it is a slice of it.
fn span(body: &[u8], s: &Source<'_>) -> Option<(u8, u32, u32)> {
    let (tag, bytes) = s.bytes();
    let start = (bytes.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let end = start + bytes.len();
    (end <= body.len()).then_some((tag, u32::try_from(start).ok()?, u32::try_from(end).ok()?))
}

impl Facts {
    /// Reads a request body of `api` (see the module docs); `keys`, when
    /// given, remembers conversations across calls.
    pub fn read(api: Api, body: &Bytes, keys: Option<&Keys>) -> Facts {
        if body.is_empty() {
            return Facts::default();
        }
        if let Some(k) = keys
            && let Some(f) = Facts::continued(api, body, k)
        {
            return f;
        }
        if let Some(k) = keys
            && let Ok(mut map) = k.map.lock()
        {
            map.parsed += body.len() as u64;
        }
        match serde_json::from_slice::<Top<'_>>(body) {
            Ok(top) => Facts::of_top(api, body, &top, keys),
            // Not an object, a key twice, `messages` not a list…: as a
            // document (the lenient reading of `api`).
            Err(_) => match serde_json::from_slice::<Value>(body) {
                Ok(v) => Facts::of_value(api, &v),
                Err(_) => Facts::default(),
            },
        }
    }

    /// The top level's facts, without the messages.
    fn scalars(top: &Top<'_>) -> Facts {
        let opts = value(top.stream_options);
        Facts {
            object: true,
            model: value(top.model).as_str().map(str::to_owned),
            stream: value(top.stream).as_bool().unwrap_or(false),
            stream_options: !opts.is_null(),
            include_usage: opts.get("include_usage").and_then(Value::as_bool) == Some(true),
            previous_response_id: value(top.previous_response_id).as_str().map(str::to_owned),
            conversation: conversation_id(&value(top.conversation)),
            messages: None,
            client: None,
        }
    }

    fn of_top(api: Api, body: &Bytes, top: &Top<'_>, keys: Option<&Keys>) -> Facts {
        let f = Facts::scalars(top);
        let mut sources = Vec::new();
        match api {
            Api::Chat => {
                let Some(m) = &top.messages else { return f };
                sources.extend(m.iter().map(|r| Source::Message(r.get())));
            }
            Api::Messages => {
                let Some(m) = &top.messages else { return f };
                if let Some(s) = top.system {
                    sources.push(Source::System(s.get()));
                }
                sources.extend(m.iter().map(|r| Source::Message(r.get())));
            }
            Api::Responses => match top.input {
                Some(r) if r.get().starts_with('"') => sources.push(Source::Input(r.get())),
                Some(r) => match serde_json::from_str::<Vec<&RawValue>>(r.get()) {
                    Ok(items) => {
                        sources.extend(items.into_iter().map(|r| Source::Message(r.get())))
                    }
                    Err(_) => return f,
                },
                None => return f,
            },
            _ => return f,
        }
        f.with_conversation(body, &sources, keys, None, top)
    }

    /// The facts with the conversation of `sources` (see [`conversation`];
    /// `start`: the remembered request it continues, already compared).
    fn with_conversation(
        mut self,
        body: &Bytes,
        sources: &[Source<'_>],
        keys: Option<&Keys>,
        start: Option<u64>,
        top: &Top<'_>,
    ) -> Facts {
        let c = conversation(body, sources, keys, start);
        // Read for a first request only (what an edit of the first message
        // sends): the later calls of a conversation pay nothing for it.
        if c.before.is_none()
            && let Some(id) = client_id(&value(top.metadata), &value(top.prompt_cache_key))
        {
            self.client = Some(client_key(&id, sources.iter().map(Source::value)));
        }
        self.messages = Some(c);
        self
    }

    /// A request that continues one remembered (the next call of a
    /// conversation: the previous request's bytes up to the end of its
    /// last message, then more messages): only the bytes after those are
    /// read. The top level outside the messages is parsed as a small
    /// document of its own (its members with an empty message list), each
    /// added message on its own; the messages before are the remembered
    /// request's, at the same places (the same bytes, compared). `None`
    /// when the request does not continue one that way (read whole then).
    fn continued(api: Api, body: &Bytes, keys: &Keys) -> Option<Facts> {
        if !matches!(api, Api::Chat | Api::Messages) {
            return None;
        }
        let text = std::str::from_utf8(body).ok()?;
        // The messages: the remembered ones (at the same places), then
        // those added; a Messages API `system` goes first, read below.
        let mut sources: Vec<Source<'_>> = vec![Source::System("")];
        let prior = {
            let map = keys.map.lock().ok()?;
            let (kn, prior) = map.continued_by(api, body)?;
            sources.reserve(kn.spans.len() + 4);
            for &(tag, a, b) in &kn.spans {
                if tag == b'm' {
                    sources.push(Source::Message(text.get(a as usize..b as usize)?));
                }
            }
            prior
        };
        // The messages array's `[`: before the first message.
        let bracket = text[..prior.first].trim_end().len().checked_sub(1)?;
        if body[bracket] != b'[' {
            return None;
        }
        let close = added_messages(text, prior.end, &mut sources)?;
        // The top level, without the messages.
        let mut doc = String::with_capacity(bracket + 1 + text.len() - close);
        doc.push_str(&text[..=bracket]);
        doc.push_str(&text[close..]);
        let top: Top<'_> = serde_json::from_str(&doc).ok()?;
        top.messages.as_ref()?;
        // The `system` of a Messages API request, where it sits in the
        // body (before or after the messages), the same as remembered.
        match (api, top.system, prior.system) {
            (Api::Messages, Some(raw), Some(span)) => {
                let at = raw.get().as_ptr() as usize - doc.as_ptr() as usize;
                let at = if at <= bracket {
                    at
                } else {
                    at - bracket - 1 + close
                };
                let now = text.get(at..at + raw.get().len())?;
                sources[0] = Source::System(keys.unchanged(prior.print, span, now)?);
            }
            (Api::Messages, None, None) | (Api::Chat, _, None) => {
                sources.remove(0);
            }
            _ => return None,
        }
        if let Ok(mut map) = keys.map.lock() {
            map.parsed += (body.len() - prior.end + bracket) as u64;
        }
        let print = Some(prior.print);
        Some(Facts::scalars(&top).with_conversation(body, &sources, Some(keys), print, &top))
    }

    /// The same from a parsed document.
    pub fn of_value(api: Api, v: &Value) -> Facts {
        let opts = v.get("stream_options").unwrap_or(&Value::Null);
        let null = Value::Null;
        let msgs = api::messages(api, Some(v));
        let mut w = Walk::default();
        msgs.iter().flatten().for_each(|m| w.step(m));
        let client = client_id(
            v.get("metadata").unwrap_or(&null),
            v.get("prompt_cache_key").unwrap_or(&null),
        )
        .filter(|_| w.before.is_none())
        .and_then(|id| Some(client_key(&id, msgs.clone()?.into_iter())));
        Facts {
            object: v.is_object(),
            model: api::model(Some(v)),
            stream: api::wants_stream(Some(v)),
            stream_options: !opts.is_null(),
            include_usage: opts.get("include_usage").and_then(Value::as_bool) == Some(true),
            previous_response_id: v
                .get("previous_response_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
            conversation: v.get("conversation").and_then(conversation_id),
            messages: msgs.map(|msgs| {
                let start = w.last.map_or(0, |i| i + 1);
                Conversation {
                    new_input: api::new_input(&msgs[start..]),
                    before: w.before,
                    answer: w.answer,
                    after: w.chain,
                }
            }),
            client,
        }
    }

    /// The keys a request continues, most specific first (see
    /// [`thread::lookup_keys`](crate::thread::lookup_keys)).
    pub fn lookup_keys(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(id) = &self.previous_response_id {
            out.push(format!("response:{id}"));
        }
        if let Some(c) = &self.conversation {
            out.push(format!("conversation:{c}"));
        }
        if let Some(m) = &self.messages {
            out.extend(m.before.clone());
            out.extend(m.answer.clone());
        }
        out
    }
}

/// The conversation identity a client puts in a request, when it sends
/// one that names a conversation (not a user): Claude Code's
/// `metadata.user_id` (`user_…_account_…_session_UUID`: the session),
/// `metadata.session_id` / `conversation_id` / `thread_id`, and
/// `prompt_cache_key` (Codex sets it to its conversation id). The
/// OpenAI `user` field and a `metadata.user_id` without a session name a
/// person, whose conversations are many: not an identity.
pub fn client_id(metadata: &Value, prompt_cache_key: &Value) -> Option<String> {
    fn text(v: Option<&Value>) -> Option<&str> {
        v.and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
    if let Some(u) = text(metadata.get("user_id"))
        && let Some((_, session)) = u.rsplit_once("_session_")
        && !session.is_empty()
    {
        return Some(format!("claude-code:{session}"));
    }
    for k in ["session_id", "conversation_id", "thread_id"] {
        if let Some(v) = text(metadata.get(k)) {
            return Some(format!("metadata.{k}:{v}"));
        }
    }
    text(Some(prompt_cache_key)).map(|v| format!("prompt_cache_key:{v}"))
}

/// The key a conversation's identity is recorded under (on the `complete`
/// of its first turn, `thread_conversation`): `client:ID:PRELUDE`, PRELUDE the
/// hash of the messages before the first human text (the system prompt,
/// developer messages, Codex's environment blocks) in canonical form. So
/// a client's side calls under the same identity with another system
/// prompt (Claude Code's title and topic calls) are another conversation.
pub fn client_key(id: &str, msgs: impl Iterator<Item = Value>) -> String {
    let mut prelude = Chain::default();
    for m in msgs {
        if api::first_human(std::slice::from_ref(&m)).is_some() {
            break;
        }
        prelude.push(&m);
    }
    format!("client:{id}:{}", prelude.key())
}

/// A Responses API request's `conversation` (an id, or `{"id": …}`).
pub fn conversation_id(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        v => v.get("id")?.as_str().map(str::to_owned),
    }
}

/// Hashes a request's messages, starting from the state remembered for
/// its longest known beginning.
fn conversation(
    body: &Bytes,
    sources: &[Source<'_>],
    keys: Option<&Keys>,
    start: Option<u64>,
) -> Conversation {
    let Beginning {
        known,
        reused,
        print,
    } = beginning(keys, sources, start);
    let (from, mut walk) = known.unwrap_or_default();
    let mut added = Vec::with_capacity(sources.len() - from);
    let mut hashed = 0u64;
    for s in &sources[from..] {
        let v = s.value();
        hashed += s.bytes().1.len() as u64;
        walk.step(&v);
        added.push(v);
    }
    let start = walk.last.map_or(0, |i| i + 1);
    let new_input = if start >= from {
        api::new_input(&added[start - from..])
    } else {
        // The input began in the part already known: read it again.
        let tail: Vec<Value> = sources[start..from]
            .iter()
            .map(Source::value)
            .chain(added)
            .collect();
        api::new_input(&tail)
    };
    if let Some(k) = keys
        && let Ok(mut map) = k.map.lock()
    {
        map.hashed += hashed;
        if from < sources.len()
            && let Some(print) = print
        {
            map.remember(print, body, sources, reused, &walk);
        }
    }
    Conversation {
        new_input,
        before: walk.before,
        answer: walk.answer,
        after: walk.chain,
    }
}

/// The longest remembered beginning of a request's messages.
#[derive(Default)]
struct Beginning {
    /// How many messages it holds, and the walk after them.
    known: Option<(usize, Walk)>,
    /// The request remembered with it, taken out when this one extends
    /// it (its buffers are reused for this one).
    reused: Option<Known>,
    /// The fingerprint of all the request's messages.
    print: Option<u64>,
}

/// The longest beginning of `sources` remembered: the last message whose
/// chained fingerprint names a request with exactly these messages,
/// compared; or, given `start` (the request continued, its messages
/// already compared), that one.
fn beginning(keys: Option<&Keys>, sources: &[Source<'_>], start: Option<u64>) -> Beginning {
    let Some(k) = keys else {
        return Beginning::default();
    };
    if let Some(p) = start
        && let Ok(mut map) = k.map.lock()
        && let Some(n) = map.by_print.get(&p).map(|kn| kn.spans.len())
        && n <= sources.len()
    {
        let print = sources[n..].iter().fold(p, |p, s| extend(p, s));
        let (walk, reused) = map.take(p, n < sources.len());
        return Beginning {
            known: Some((n, walk)),
            reused,
            print: Some(print),
        };
    }
    let Ok(mut map) = k.map.lock() else {
        return Beginning::default();
    };
    let mut prints = Vec::with_capacity(sources.len());
    let mut p = 0u64;
    for s in sources {
        p = extend(p, s);
        prints.push(p);
    }
    let mut found = Beginning::default();
    let mut scanned = 0u64;
    for (i, p) in prints.iter().enumerate().rev() {
        let Some(kn) = map.by_print.get(p) else {
            continue;
        };
        let same = kn.spans.len() == i + 1
            && kn.spans.iter().zip(sources).all(|(&(tag, a, b), s)| {
                let (t, bytes) = s.bytes();
                scanned += bytes.len() as u64;
                t == tag && kn.body.get(a as usize..b as usize) == Some(bytes.as_bytes())
            });
        if same {
            let n = i + 1;
            let (walk, reused) = map.take(*p, n < sources.len());
            found.known = Some((n, walk));
            found.reused = reused;
            break;
        }
    }
    map.scanned += scanned
        + sources
            .iter()
            .map(|s| s.bytes().1.len() as u64)
            .sum::<u64>();
    found.print = prints.last().copied();
    found
}

/// For a streamed chat completion whose client did not ask for usage, the
/// body to send upstream with `stream_options.include_usage: true` added
/// (so usage is recorded for streams too); `None` when nothing changes.
/// The member is written in front of the others, so the body is copied
/// once and never re-serialized (a `stream_options` already there without
/// `include_usage` is set by [`api::add_include_usage`]).
pub fn add_include_usage(api: Api, facts: &Facts, body: &[u8]) -> Option<Vec<u8>> {
    if api != Api::Chat || !facts.stream || facts.include_usage || !facts.object {
        return None;
    }
    if facts.stream_options {
        return api::add_include_usage(api, api::parse(body).as_ref());
    }
    let open = body.iter().position(|b| *b == b'{')?;
    let rest = &body[open + 1..];
    let empty = rest
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|b| *b == b'}');
    const MEMBER: &[u8] = br#""stream_options":{"include_usage":true}"#;
    let mut out = Vec::with_capacity(body.len() + MEMBER.len() + 1);
    out.extend_from_slice(&body[..=open]);
    out.extend_from_slice(MEMBER);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(api: Api, body: &[u8], keys: Option<&Keys>) -> Facts {
        Facts::read(api, &Bytes::copy_from_slice(body), keys)
    }

    /// The thread key as it was computed before: the whole list
    /// normalized, then in RFC 8785 form.
    /// The key of a list of messages: its canonical form, the
    /// instructions (system, developer) left out.
    fn whole(msgs: &[Value]) -> String {
        let norm: Vec<Value> = msgs
            .iter()
            .filter(|m| !instructions(m))
            .map(api::normalize)
            .collect();
        hex::encode(Sha256::digest(
            serde_jcs::to_string(&norm).unwrap().as_bytes(),
        ))
    }

    fn request(n: usize) -> (Vec<Value>, Vec<u8>) {
        let mut msgs = vec![json!({"role": "system", "content": "be brief"})];
        for i in 0..n {
            msgs.push(
                json!({"role": "user", "content": [{"type": "text", "text": format!("q{i}")}]}),
            );
            msgs.push(json!({"role": "assistant", "content": format!("a{i}"), "refusal": null,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}));
            msgs.push(json!({"role": "tool", "tool_call_id": "c", "content": "ok"}));
        }
        msgs.push(json!({"role": "user", "content": "last one"}));
        let body =
            serde_json::to_vec(&json!({"model": "m", "stream": true, "messages": msgs})).unwrap();
        (msgs, body)
    }

    #[test]
    fn keys_hashed_a_message_at_a_time_are_the_whole_lists_and_remembered_states_agree() {
        let keys = Keys::default();
        for n in [0, 1, 2, 5, 6, 7] {
            let (msgs, body) = request(n);
            let last = msgs.iter().rposition(answers);
            for remembered in [None, Some(&keys)] {
                let f = read(Api::Chat, &body, remembered);
                let c = f.messages.unwrap();
                assert_eq!(c.before, last.map(|l| whole(&msgs[..=l])), "{n}");
                let answer = json!({"role": "assistant", "content": "fine"});
                let mut all = msgs.clone();
                all.push(answer.clone());
                assert_eq!(c.after.key_with(&answer), whole(&all));
                assert_eq!(c.new_input, api::new_input(&msgs));
                assert_eq!(f.model.as_deref(), Some("m"));
                assert!(f.stream && !f.include_usage);
            }
        }
        // The same request again is found whole; its input still read.
        let (msgs, body) = request(7);
        let again = read(Api::Chat, &body, Some(&keys));
        assert_eq!(again.messages.unwrap().new_input, api::new_input(&msgs));
    }

    #[test]
    fn a_growing_conversation_normalizes_only_the_messages_each_call_adds() {
        let keys = Keys::default();
        let mut hashed = Vec::new();
        // Each call resends the one before and adds the answer, a tool
        // result and a question.
        let (mut msgs, _) = request(0);
        for n in 0..300 {
            if n > 0 {
                let (more, _) = request(n);
                let k = more.len();
                msgs.extend_from_slice(&more[k - 4..k - 2]);
                msgs.push(json!({"role": "user", "content": format!("next {n}")}));
            }
            let body = serde_json::to_vec(&json!({"model": "m", "stream": true, "messages": msgs}))
                .unwrap();
            let before = keys.work().1;
            let f = read(Api::Chat, &body, Some(&keys));
            hashed.push(keys.work().1 - before);
            if n % 37 == 0 {
                let last = msgs.iter().rposition(answers);
                let c = f.messages.unwrap();
                assert_eq!(c.before, last.map(|l| whole(&msgs[..=l])), "{n}");
                assert_eq!(c.new_input, api::new_input(&msgs));
            }
        }
        // Each call adds three messages: those are read (~300 bytes),
        // whatever the history's length.
        for (n, h) in hashed.iter().enumerate().skip(1) {
            assert!(*h < 600, "call {n}: {h} bytes of messages normalized");
        }
        // An edit of an early message is not taken for a known beginning:
        // the keys are the whole list's again.
        msgs[2]["content"][0]["text"] = json!("q0, edited");
        let body =
            serde_json::to_vec(&json!({"model": "m", "stream": true, "messages": msgs})).unwrap();
        let before = keys.work().1;
        let c = read(Api::Chat, &body, Some(&keys)).messages.unwrap();
        assert!(keys.work().1 - before > 10_000);
        let last = msgs.iter().rposition(answers);
        assert_eq!(c.before, last.map(|l| whole(&msgs[..=l])));
        // Another conversation: nothing remembered applies.
        let (msgs, body) = request(201);
        let c = read(Api::Chat, &body, Some(&keys)).messages.unwrap();
        let last = msgs.iter().rposition(answers);
        assert_eq!(c.before, last.map(|l| whole(&msgs[..=l])));
    }

    /// What a reading gives, comparable.
    fn seen(f: &Facts) -> String {
        let m = f.messages.as_ref();
        format!(
            "{} {:?} {} {} {} {:?} {:?} {:?} | {:?} {:?} {:?}",
            f.object,
            f.model,
            f.stream,
            f.stream_options,
            f.include_usage,
            f.previous_response_id,
            f.conversation,
            f.client,
            m.map(|c| c.before.clone()),
            m.map(|c| String::from_utf8_lossy(&c.new_input).into_owned()),
            m.map(|c| c.after.key()),
        )
    }

    #[test]
    fn a_request_continuing_a_remembered_one_is_parsed_only_after_it() {
        let keys = Keys::default();
        let mut parsed = Vec::new();
        let (mut msgs, _) = request(0);
        for n in 0..200 {
            if n > 0 {
                msgs.push(json!({"role": "assistant", "content": format!("a \"quoted\" ] }} {n}"),
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": [1, {}]}"}}]}));
                msgs.push(json!({"role": "tool", "tool_call_id": "c", "content": "ok"}));
                msgs.push(json!({"role": "user", "content": [{"type": "text", "text": format!("next {n}")}]}));
            }
            // Members after the messages too, as some SDKs write them.
            let body = format!(
                "{{\"model\":\"m\",\"messages\":{},\"stream\":true,\"metadata\":{{\"session_id\":\"s1\"}}}}",
                serde_json::to_string(&msgs).unwrap()
            );
            let before = keys.parsed();
            let f = read(Api::Chat, body.as_bytes(), Some(&keys));
            parsed.push(keys.parsed() - before);
            assert_eq!(
                seen(&f),
                seen(&read(Api::Chat, body.as_bytes(), None)),
                "{n}"
            );
        }
        // Each call adds three messages (~400 bytes): those and the top
        // level are parsed, whatever the history's length (up to 80 KB).
        for (n, p) in parsed.iter().enumerate().skip(2) {
            assert!(*p < 1_000, "call {n}: {p} bytes parsed");
        }
        // Pretty-printed, with the history edited, a member twice, or the
        // same messages again: read as a whole reading reads them.
        let pretty = serde_json::to_vec_pretty(&json!({"model": "m", "messages": msgs})).unwrap();
        let mut edited = msgs.clone();
        edited[3]["content"] = json!("edited");
        let edited = serde_json::to_vec(&json!({"model": "m", "messages": edited})).unwrap();
        let whole = serde_json::to_string(&json!({"model": "m", "messages": msgs})).unwrap();
        let twice = format!("{},\"model\":\"other\"}}", &whole[..whole.len() - 1]);
        let mut more = msgs.clone();
        more.push(json!({"role": "user", "content": "and then?"}));
        let more = serde_json::to_string(&json!({"model": "m", "messages": more})).unwrap();
        let twice_more = format!("{},\"model\":\"other\"}}", &more[..more.len() - 1]);
        let cut = &more[..more.len() - 30];
        for body in [
            pretty.as_slice(),
            &edited,
            whole.as_bytes(),
            twice.as_bytes(),
            more.as_bytes(),
            twice_more.as_bytes(),
            cut.as_bytes(),
        ] {
            let fresh = read(Api::Chat, body, None);
            assert_eq!(seen(&read(Api::Chat, body, Some(&keys))), seen(&fresh));
        }
    }

    #[test]
    fn a_messages_api_request_continued_keeps_its_system_prompt() {
        let keys = Keys::default();
        let mut msgs = vec![json!({"role": "user", "content": "hi"})];
        for n in 0..20 {
            if n > 0 {
                msgs.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("a{n}")}]}));
                msgs.push(json!({"role": "user", "content": format!("q{n}")}));
            }
            let body = serde_json::to_vec(
                &json!({"model": "c", "system": "be kind", "messages": msgs, "max_tokens": 9}),
            )
            .unwrap();
            let before = keys.parsed();
            let f = read(Api::Messages, &body, Some(&keys));
            if n > 1 {
                assert!(keys.parsed() - before < 200, "{n}");
            }
            assert_eq!(seen(&f), seen(&read(Api::Messages, &body, None)), "{n}");
        }
        // The same messages with a system prompt added after them: not the
        // remembered request's messages (the system prompt comes first).
        let body =
            serde_json::to_vec(&json!({"model": "c", "messages": msgs, "system": "new"})).unwrap();
        let mut no_system = serde_json::to_vec(&json!({"model": "c", "messages": msgs})).unwrap();
        for b in [&body, &no_system] {
            assert_eq!(
                seen(&read(Api::Messages, b, Some(&keys))),
                seen(&read(Api::Messages, b, None))
            );
        }
        no_system.truncate(no_system.len() - 1);
        no_system.extend_from_slice(br#","system":"late"}"#);
        assert_eq!(
            seen(&read(Api::Messages, &no_system, Some(&keys))),
            seen(&read(Api::Messages, &no_system, None))
        );
    }

    #[test]
    fn a_handoff_to_another_system_prompt_continues_the_conversation() {
        let first = br#"{"messages":[{"role":"system","content":"triage"},{"role":"user","content":"weather?"}]}"#;
        let answer = json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1",
            "type": "function", "function": {"name": "transfer_to_weather", "arguments": "{}"}}]});
        let after = read(Api::Chat, first, None)
            .messages
            .unwrap()
            .after
            .key_with(&answer);
        let next = br#"{"messages":[{"role":"system","content":"weather expert"},{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"transfer_to_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"{\"assistant\": \"weather\"}"}]}"#;
        let f = read(Api::Chat, next, Some(&Keys::default()));
        let c = f.messages.unwrap();
        assert_eq!(c.before, Some(after));
        assert_eq!(
            c.new_input,
            api::new_input(&[
                json!({"role":"tool","tool_call_id":"c1","content":"{\"assistant\": \"weather\"}"})
            ])
        );
    }

    #[test]
    fn the_messages_api_system_and_a_responses_input_string_are_messages() {
        let body = br#"{"system":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yo"}]},{"role":"user","content":"more"}]}"#;
        let v: Value = serde_json::from_slice(body).unwrap();
        let msgs = api::messages(Api::Messages, Some(&v)).unwrap();
        let f = read(Api::Messages, body, Some(&Keys::default()));
        assert_eq!(f.messages.unwrap().before, Some(whole(&msgs[..3])));
        let f = read(
            Api::Responses,
            br#"{"input":"hello","conversation":{"id":"c1"}}"#,
            None,
        );
        assert_eq!(f.messages.unwrap().new_input, b"hello");
        assert_eq!(f.conversation.as_deref(), Some("c1"));
        // Duplicate keys: read as a document (the last one wins).
        let f = read(
            Api::Chat,
            br#"{"model":"a","model":"b","messages":[]}"#,
            None,
        );
        assert_eq!(f.model.as_deref(), Some("b"));
        assert!(read(Api::Chat, b"not json", None).messages.is_none());
    }

    #[test]
    fn a_client_names_its_conversation_and_its_prelude_tells_side_calls_apart() {
        let cc = json!({"user_id": "user_ab_account_cd_session_7d3c-11"});
        assert_eq!(
            client_id(&cc, &Value::Null).as_deref(),
            Some("claude-code:7d3c-11")
        );
        // A user id without a session names a person: no identity.
        assert_eq!(client_id(&json!({"user_id": "alice"}), &Value::Null), None);
        assert_eq!(
            client_id(&json!({"thread_id": "t1"}), &json!("k")).as_deref(),
            Some("metadata.thread_id:t1")
        );
        assert_eq!(
            client_id(&Value::Null, &json!("conv-9")).as_deref(),
            Some("prompt_cache_key:conv-9")
        );
        let read = |body: &str| {
            Facts::read(
                Api::Chat,
                &bytes::Bytes::copy_from_slice(body.as_bytes()),
                None,
            )
            .client
        };
        let a = read(
            r#"{"prompt_cache_key":"c","messages":[{"role":"system","content":"S"},{"role":"user","content":"one"}]}"#,
        );
        let edited = read(
            r#"{"prompt_cache_key":"c","messages":[{"role":"system","content":"S"},{"role":"user","content":"two"}]}"#,
        );
        let side = read(
            r#"{"prompt_cache_key":"c","messages":[{"role":"system","content":"T"},{"role":"user","content":"one"}]}"#,
        );
        assert!(
            a.as_deref()
                .unwrap()
                .starts_with("client:prompt_cache_key:c:")
        );
        assert_eq!(a, edited, "the first human text is not part of it");
        assert_ne!(a, side, "another system prompt is another conversation");
        let v: Value = serde_json::from_str(
            r#"{"prompt_cache_key":"c","messages":[{"role":"system","content":"S"},{"role":"user","content":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(Facts::of_value(Api::Chat, &v).client, a);
        assert_eq!(read(r#"{"user":"alice","messages":[]}"#), None);
    }

    #[test]
    fn include_usage_is_added_in_front_without_re_serializing() {
        let f = |b: &[u8]| read(Api::Chat, b, None);
        let b = br#" {"stream":true,"messages":[]}"#;
        let out = add_include_usage(Api::Chat, &f(b), b).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["stream"], true);
        let b = br#"{"stream":true,"stream_options":{"x":1}}"#;
        let v: Value =
            serde_json::from_slice(&add_include_usage(Api::Chat, &f(b), b).unwrap()).unwrap();
        assert_eq!(v["stream_options"], json!({"x": 1, "include_usage": true}));
        let b = br#"{"stream":true,"stream_options":{"include_usage":true}}"#;
        assert!(add_include_usage(Api::Chat, &f(b), b).is_none());
        let b = br#"{"stream":false}"#;
        assert!(add_include_usage(Api::Chat, &f(b), b).is_none());
    }
}
