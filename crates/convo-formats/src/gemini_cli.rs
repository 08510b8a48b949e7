//! Gemini CLI sessions: `~/.gemini/tmp/<project>/chats/`.
//!
//! # Wire format
//!
//! Established from google-gemini/gemini-cli's source
//! (`packages/core/src/services/chatRecordingService.ts` and
//! `chatRecordingTypes.ts`, 2026) and checked against the files Gemini CLI
//! 0.61.0 writes (tests/fixtures/gemini-cli/0.61.0/). Current versions
//! append JSON Lines to
//! `tmp/<project>/chats/session-<YYYY-MM-DDTHH-MM>-<first 8 of the id>.jsonl`
//! (a subagent's to `chats/<parent session id>/<id>.jsonl`), `<project>`
//! the short name `~/.gemini/projects.json` gives the project's path
//! (older versions: the path's SHA-256, the chat's `projectHash`):
//!
//! ```text
//! {"sessionId":"…","projectHash":"…","startTime":"…","lastUpdated":"…","kind":"main"}
//! {"$set":{"messages":[{"id":"…","type":"user","content":[{"text":"<session_context>…"}]}],"lastUpdated":"…"}}
//! {"id":"u1","timestamp":"…","type":"user","content":[{"text":"fix the build"}]}
//! {"id":"g1","timestamp":"…","type":"gemini","content":"","model":"gemini-2.5-pro","toolCalls":[{"id":"c1","name":"run_shell_command","args":{"command":"make"},"result":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"ok"}}}],"status":"success","timestamp":"…"}],"tokens":{"input":10,"output":3,"cached":0,"thoughts":0,"tool":0,"total":13}}
//! {"id":"u2","timestamp":"…","type":"user","content":[{"functionResponse":{"id":"c1","name":"run_shell_command","response":{"output":"ok"}}}]}
//! {"$set":{"lastUpdated":"…"}}
//! {"$rewindTo":"u1"}
//! ```
//!
//! - the first line (`sessionId` + `projectHash`) is the session's
//!   metadata; `{"$set": {…}}` lines update it;
//! - a line with an `id` is a message (`type` `user`, `gemini`, `info`,
//!   `error`, `warning`; `content` a string, a part or a list of parts).
//!   The same `id` written again replaces the message (tokens and tool
//!   results are filled in that way), so the last line of an id is what
//!   it says;
//! - `{"$set": {"messages": […]}}` restates the whole conversation (the
//!   session's context at its start, the history on every `--resume`):
//!   the conversation from there on is those messages, in that order;
//! - `{"$rewindTo": ID}` drops the message `ID` and everything after it
//!   from the conversation: what follows continues from the message
//!   before `ID`.
//!
//! Older versions wrote the whole `ConversationRecord` (`sessionId`,
//! `projectHash`, `startTime`, `lastUpdated`, `messages: […]`) as one
//! pretty-printed `session-*.json`; it is read too.
//!
//! # Mapping
//!
//! A `user` message is a [`Role::User`] prompt (not the session's
//! `<session_context>`, nor tool results alone, which ride as records:
//! `not_a_prompt`); a `gemini` message's text
//! a [`Role::Assistant`] answer (a [`Role::ToolCall`] to `user` marked
//! `intermediate` when tool calls follow it), each of its `toolCalls` a
//! [`Role::ToolCall`] to the tool (the text is the command, the edit, the
//! arguments: [`records::tool_call_text`]) followed by a [`Role::Tool`]
//! result from it; model and tokens on the message. `info`, `error`,
//! `warning`, metadata and rewind lines ride with a message in
//! `extra.records` ([`crate::records`]), so `convo export --format
//! gemini-cli` gives a `.jsonl` back byte for byte.
//!
//! **Every branch kept.** A rewind does not delete anything here: the
//! dropped messages stay as a timeline (`alt-N`) and the conversation
//! after the rewind is `main` when it is the live one. A message's key is
//! its `id` (`id#call:C`, `id#result:C` for its tool calls), so a re-import
//! of a grown file adds only new messages; a message rewritten later (its
//! tokens, a tool result) keeps what it said when first imported, the new
//! line stored with the next new message. A subagent's chat
//! (`chats/<parent id>/<id>.jsonl`) is read with its parent's as a
//! timeline `agent-N` from the `invoke_agent` call that gave it its task
//! (alone, when the parent's chat is gone). A legacy `.json` is kept as its lines too, a message's lines
//! as one record (see `legacy`), so its export is the file again
//! ([`file_bytes`]); a branch of it resumes as a `.jsonl`.
//!
//! **Memory.** A chat is read in two passes ([`open_session`],
//! [`crate::records::Session`]): the first keeps per message id its
//! latest record's place and its messages without text, pushed to a
//! compact [`Skeleton`] as it reads (56 bytes a message; ids, speakers and
//! keys kept once), which, put in order, is the session's skeleton
//! ([`Stored::tree`]); the second reads each message again as its node is
//! written. The legacy document is
//! never held whole: it is parsed as a stream, one message at a time.

use crate::error::{Error, Result};
use crate::model::{Message, Read, Role, Timeline};
use crate::records::{self, RecRef, Record, Refs, Session, Skeleton, Sources, Stored};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The Gemini CLI reader.
#[derive(Debug)]
pub struct GeminiCli;

impl crate::Reader for GeminiCli {
    fn name(&self) -> &'static str {
        "gemini-cli"
    }

    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let mut sources = Sources::new();
        let mut ix = Indexer::default();
        let warnings = if is_legacy(file, bytes) {
            let at = sources.add_bytes(file, bytes);
            legacy::index(file, at, &mut ix, &mut || Ok(bytes))?;
            Vec::new()
        } else {
            sources.scan_bytes(file, bytes, |f, rec| {
                ix.add(f, &rec);
                Ok(())
            })?
        };
        records::read_whole(build(file, ix, Vec::new(), sources, vec![None], warnings))
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        records::read_files(path, session_files, open_session)
    }
}

/// Whether a chat is the legacy whole-file `ConversationRecord` (a
/// `.json`, or a first line that is not one JSON object) rather than JSON
/// Lines.
fn is_legacy(name: &str, head: &[u8]) -> bool {
    if name.ends_with(".json") {
        return true;
    }
    let head = &head[head
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(head.len())..];
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    head.first() == Some(&b'{') && serde_json::from_slice::<Value>(first).is_err()
}

/// Indexes one chat file (an import's first pass: one record in memory at
/// a time, for a legacy `.json` one message at a time, parsed as it is
/// read); `None` for a file with no record. The messages are read again
/// one at a time from the file ([`Session`]).
pub fn open_session(path: &Path) -> Result<Option<Session<'static>>> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let io = |e: std::io::Error| Error::new(&name, "io", format!("cannot read the file: {e}"));
    let mut head = Vec::new();
    crate::open_file(path)?
        .take(64 * 1024)
        .read_to_end(&mut head)
        .map_err(io)?;
    let mut sources = Sources::new();
    let mut ix = Indexer::default();
    let warnings = if is_legacy(&name, &head) {
        let at = sources.add_file(path)?;
        legacy::index(&name, at, &mut ix, &mut || {
            crate::open_file(path).map(|f| std::io::BufReader::with_capacity(256 * 1024, f))
        })?;
        Vec::new()
    } else {
        sources.scan_path(path, |f, rec| {
            ix.add(f, &rec);
            Ok(())
        })?
    };
    // Its subagents' chats (`chats/<its session id>/*.jsonl`), read with it.
    let mut warnings = warnings;
    let mut agents = Vec::new();
    let mut rel = vec![None];
    let main = ix.meta.get("kind").and_then(Value::as_str) != Some("subagent");
    if let Some(sid) = ix
        .meta
        .get("sessionId")
        .and_then(Value::as_str)
        .filter(|_| main)
    {
        for (r, f) in subagent_files(path, sid) {
            let mut a = Indexer::sharing(&mut ix);
            let scanned = sources.scan_path(&f, |fi, rec| {
                a.add(fi, &rec);
                Ok(())
            });
            a.give_back(&mut ix);
            warnings.extend(scanned?);
            agents.push(a);
            rel.push(Some(r));
        }
    }
    Ok(build(&name, ix, agents, sources, rel, warnings))
}

/// A chat's subagents' chats (Gemini CLI 0.61.0 writes them to
/// `chats/<the chat's session id>/<id>.jsonl`), in name order, each with
/// its name under `chats/` (in `extra.records`).
fn subagent_files(chat: &Path, session_id: &str) -> Vec<(String, PathBuf)> {
    let dir_name = convo_core::text::component(session_id);
    let Some(dir) = chat.parent().map(|d| d.join(&dir_name)) else {
        return Vec::new();
    };
    records::labelled_jsonl(&dir, &dir_name)
}

/// No index (of an id, a message).
const NONE: u32 = u32::MAX;

/// What the first pass keeps of one message id (40 bytes).
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Its latest record.
    own: RecRef,
    /// The messages that record says, without their text: `count`
    /// messages of the first pass's [`Arena`] from `first`.
    first: u32,
    count: u32,
    /// The id it followed when first seen ([`NONE`]: none).
    follows: u32,
}

/// The messages the first pass found (each id's latest), without their
/// text, shared by a chat and its subagents' chats: a compact
/// [`Skeleton`] (whose names also key the ids) and, per message, the
/// task it gave or was given (a hash of [`task_start`], 0 for none): what
/// links a subagent's chat to the `invoke_agent` call that started it.
#[derive(Debug, Default)]
struct Arena {
    skel: Skeleton,
    tasks: Vec<u64>,
}

/// A chat's records indexed: message ids, what follows what, where each
/// record is.
#[derive(Debug, Default)]
struct Indexer {
    ids: Vec<Seen>,
    index: HashMap<records::Id, u32>,
    arena: Arena,
    /// Records after the first message, each with the id it rides with,
    /// in file order.
    riding: Vec<(u32, RecRef)>,
    /// Records before the first message.
    waiting: Vec<RecRef>,
    /// The live conversation, as ids.
    active: Vec<u32>,
    last_seen: Option<usize>,
    /// The title of the first id (in order) whose first message is a
    /// prompt, as far as the first pass knows: (the id, its title).
    title: Option<(u32, Option<String>)>,
    meta: Map<String, Value>,
    created: Option<i64>,
    warnings: Vec<String>,
}

impl Indexer {
    /// An indexer of a subagent's chat, adding to `parent`'s arena (given
    /// back with [`Indexer::give_back`]).
    fn sharing(parent: &mut Indexer) -> Indexer {
        Indexer {
            arena: std::mem::take(&mut parent.arena),
            ..Indexer::default()
        }
    }

    /// Gives `parent` its arena back.
    fn give_back(&mut self, parent: &mut Indexer) {
        parent.arena = std::mem::take(&mut self.arena);
    }

    /// One line of a `.jsonl` chat: a message, a rewind, a metadata
    /// update, or anything else (riding with the message before it).
    fn add(&mut self, file: u32, rec: &Record) {
        let at = rec.at(file);
        let mut carrier = self.last_seen;
        if let Some(v) = &rec.value {
            if let Some(id) = v.get("id").and_then(Value::as_str) {
                carrier = Some(self.message(id, v, at, false));
            } else if let Some(Value::Array(list)) = v.get("$set").and_then(|s| s.get("messages")) {
                // The conversation written again whole (Gemini CLI's
                // `updateMessagesFromHistory`: the session's context at its
                // start, the history on `--resume`): these messages, in
                // this order.
                self.active.clear();
                for m in list {
                    if let Value::Object(o) = m
                        && let Some(id) = o.get("id").and_then(Value::as_str)
                    {
                        carrier = Some(self.message(id, o, at, true));
                    }
                }
                self.other(v, rec.line);
            } else {
                self.other(v, rec.line);
            }
        }
        self.ride(carrier, at);
    }

    /// A message record: its id's latest version (`relist`: listed by a
    /// `$set` of the messages, so live again, read as first written when
    /// it is known). Returns the id's index.
    fn message(&mut self, id: &str, v: &Map<String, Value>, own: RecRef, relist: bool) -> usize {
        let key = records::Id::of(id, &mut self.arena.skel.names);
        let i = match self.index.get(&key) {
            // Listed again by a `$set`: live again, and read as its own
            // line said it (the list restates it from the CLI's memory, its
            // tool calls, tokens and model left out when the CLI lost
            // them: 0.61.0 resuming a chat in the minute it started).
            Some(&i) if relist => {
                if !self.active.contains(&i) {
                    self.active.push(i);
                }
                self.last_seen = Some(i as usize);
                return i as usize;
            }
            Some(&i) => i,
            None => {
                let i = self.ids.len() as u32;
                self.ids.push(Seen {
                    own,
                    first: 0,
                    count: 0,
                    follows: self.active.last().copied().unwrap_or(NONE),
                });
                self.index.insert(key, i);
                self.active.push(i);
                i
            }
        };
        let Arena { skel, tasks } = &mut self.arena;
        let e = &mut self.ids[i as usize];
        // Said again: the messages it said last, when they are the
        // arena's last, are replaced in place.
        if e.count > 0 && (e.first + e.count) as usize == skel.len() {
            skel.truncate(e.first as usize);
            tasks.truncate(e.first as usize);
        }
        e.own = own;
        e.first = skel.len() as u32;
        e.count = 0;
        for m in messages_of(id, v, None) {
            let speaker = skel.names.intern(&m.speaker);
            let to = m.to.as_deref().map(|t| skel.names.intern(t));
            let key = records::Id::of_opt(m.key.as_deref(), &mut skel.names);
            skel.push_parts(None, m.role, speaker, to, m.time, key);
            tasks.push(
                m.extra
                    .get("task")
                    .and_then(Value::as_str)
                    .map_or(0, task_hash),
            );
            e.count += 1;
        }
        let prompt = e.count > 0 && skel.role(e.first as usize) == Role::User;
        if prompt && self.title.as_ref().is_none_or(|(t, _)| i <= *t) {
            self.title = Some((i, first_title(v.get("content").unwrap_or(&Value::Null))));
        }
        self.last_seen = Some(i as usize);
        i as usize
    }

    /// A record that is not a message: a rewind, a metadata update, the
    /// session's metadata line.
    fn other(&mut self, v: &Map<String, Value>, line: usize) {
        if let Some(to) = v.get("$rewindTo").and_then(Value::as_str) {
            let at = records::Id::find(to, &self.arena.skel.names)
                .and_then(|k| self.index.get(&k))
                .and_then(|i| self.active.iter().position(|a| a == i));
            match at {
                Some(i) => self.active.truncate(i),
                None => {
                    self.warnings.push(format!(
                        "{line}: a rewind to a message that is not in the conversation ({to}); the conversation starts again"
                    ));
                    self.active.clear();
                }
            }
        } else if let Some(Value::Object(set)) = v.get("$set") {
            for (k, x) in set {
                if k != "messages" {
                    self.meta.insert(k.clone(), x.clone());
                }
            }
        } else if v.contains_key("sessionId") {
            for (k, x) in v {
                if k != "messages" {
                    self.meta.entry(k.clone()).or_insert_with(|| x.clone());
                }
            }
            self.created = self.created.or_else(|| {
                v.get("startTime")
                    .and_then(Value::as_str)
                    .and_then(crate::json::iso_to_millis)
            });
        }
    }

    /// A record kept with the message `carrier` (or before the first).
    fn ride(&mut self, carrier: Option<usize>, at: RecRef) {
        match carrier {
            Some(i) => self.riding.push((i as u32, at)),
            None => self.waiting.push(at),
        }
    }
}

/// The legacy whole-file `ConversationRecord`, streamed.
///
/// The document is parsed once with a [`serde::de::DeserializeSeed`] over
/// its `messages` array, each message handed to the [`Indexer`] as soon as
/// it is parsed (its place in the file from a counting reader), then the
/// file is read again once, a line at a time, to cut it into records: each
/// message's lines (with what shares them: the comma after it) are one
/// record, every other line one record of its own, so the records joined
/// by newlines are the file ([`file_bytes`]). Memory follows the largest
/// message, not the file.
mod legacy {
    use super::{Error, Indexer, RecRef, Result, Value};
    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use std::cell::Cell;
    use std::io::BufRead;
    use std::rc::Rc;

    /// Counts the bytes serde_json takes (it takes one at a time and looks
    /// one ahead only where a value could go on: never after an object).
    struct Counter<R> {
        inner: R,
        at: Rc<Cell<u64>>,
    }

    impl<R: std::io::Read> std::io::Read for Counter<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.at.set(self.at.get() + n as u64);
            Ok(n)
        }
    }

    /// A message parsed: its id's index, where its bytes are.
    struct Place {
        id: Option<usize>,
        start: u64,
        end: u64,
    }

    struct Doc<'a> {
        ix: &'a mut Indexer,
        at: Rc<Cell<u64>>,
        places: &'a mut Vec<Place>,
    }

    impl<'de> DeserializeSeed<'de> for Doc<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for Doc<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a Gemini CLI conversation record (an object with `messages`)")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
            let mut meta = serde_json::Map::new();
            while let Some(k) = map.next_key::<String>()? {
                if meta.contains_key(&k) {
                    return Err(de::Error::custom(format_args!(
                        "duplicate key {} in an object (I-JSON: each key once)",
                        Value::String(k)
                    )));
                }
                if k == "messages" {
                    map.next_value_seed(Messages {
                        ix: &mut *self.ix,
                        at: self.at.clone(),
                        places: &mut *self.places,
                    })?;
                    meta.insert(k, Value::Null);
                } else {
                    let v: Value = map.next_value()?;
                    meta.insert(k, v);
                }
            }
            meta.remove("messages");
            self.ix.other(&meta, 1);
            Ok(())
        }
    }

    struct Messages<'a> {
        ix: &'a mut Indexer,
        at: Rc<Cell<u64>>,
        places: &'a mut Vec<Place>,
    }

    impl<'de> DeserializeSeed<'de> for Messages<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }

    impl<'de> Visitor<'de> for Messages<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list of messages")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            while let Some(p) = seq.next_element_seed(One {
                ix: &mut *self.ix,
                at: self.at.clone(),
            })? {
                self.places.push(p);
            }
            Ok(())
        }
    }

    struct One<'a> {
        ix: &'a mut Indexer,
        at: Rc<Cell<u64>>,
    }

    impl<'de> DeserializeSeed<'de> for One<'_> {
        type Value = Place;
        fn deserialize<D: de::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<Place, D::Error> {
            // serde_json has read the value's first byte to know what it is.
            let start = self.at.get().saturating_sub(1);
            let v: Value = d.deserialize_any(Slim)?;
            let end = self.at.get();
            if end - start > crate::records::MAX_RECORD {
                return Err(de::Error::custom(format_args!(
                    "a message longer than {} MiB; convo reads records of at most that",
                    crate::records::MAX_RECORD / (1024 * 1024)
                )));
            }
            let id = match &v {
                Value::Object(o) => o.get("id").and_then(Value::as_str).map(|id| {
                    let own = RecRef {
                        file: 0,
                        line: 0,
                        offset: start,
                        len: (end - start) as u32,
                        check: 0,
                    };
                    self.ix.message(id, o, own, false)
                }),
                _ => None,
            };
            Ok(Place { id, start, end })
        }
    }

    /// A message as the first pass needs it: a JSON value whose strings
    /// of more than 4 KiB are cut to their first 4 KiB (after their
    /// leading blanks; a blank one is empty), so a huge text is not copied
    /// out of the parser's buffer (the title, whether it is blank or the
    /// session's context, are in its start; the text is read again in the
    /// second pass).
    struct Slim;

    const SLIM: usize = 4096;

    impl<'de> Visitor<'de> for Slim {
        type Value = Value;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, v: bool) -> std::result::Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> std::result::Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_u64<E>(self, v: u64) -> std::result::Result<Value, E> {
            Ok(Value::from(v))
        }
        fn visit_f64<E>(self, v: f64) -> std::result::Result<Value, E> {
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Value, E> {
            if v.len() <= SLIM {
                return Ok(Value::String(v.to_owned()));
            }
            let v = v.trim_start();
            let mut end = v.len().min(SLIM);
            while !v.is_char_boundary(end) {
                end -= 1;
            }
            Ok(Value::String(v[..end].to_owned()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Value, E> {
            if v.len() <= SLIM {
                return Ok(Value::String(v));
            }
            self.visit_str(&v)
        }
        fn visit_unit<E>(self) -> std::result::Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_none<E>(self) -> std::result::Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_some<D: de::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<Value, D::Error> {
            d.deserialize_any(Slim)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Value, A::Error> {
            let mut out = Vec::new();
            while let Some(v) = seq.next_element_seed(Slim)? {
                out.push(v);
            }
            Ok(Value::Array(out))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Value, A::Error> {
            let mut out = serde_json::Map::new();
            while let Some(k) = map.next_key::<String>()? {
                let v = map.next_value_seed(Slim)?;
                out.insert(k, v);
            }
            Ok(Value::Object(out))
        }
    }

    impl<'de> DeserializeSeed<'de> for Slim {
        type Value = Value;
        fn deserialize<D: de::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<Value, D::Error> {
            d.deserialize_any(Slim)
        }
    }

    /// Indexes the legacy chat `open` reads (twice) as file `file` of the
    /// session's sources.
    pub(super) fn index<R: BufRead>(
        name: &str,
        file: u32,
        ix: &mut Indexer,
        open: &mut dyn FnMut() -> Result<R>,
    ) -> Result<()> {
        let at = Rc::new(Cell::new(0u64));
        let mut places = Vec::new();
        {
            let counter = Counter {
                inner: open()?,
                at: at.clone(),
            };
            let mut de = serde_json::Deserializer::from_reader(counter);
            let doc = Doc {
                ix: &mut *ix,
                at: at.clone(),
                places: &mut places,
            };
            doc.deserialize(&mut de)
                .and_then(|()| de.end())
                .map_err(|e| crate::error::json_error(name, None, String::new(), &e))?;
        }
        cut(name, file, ix, &places, open()?)
    }

    /// The second read: the file cut into records at the newlines outside
    /// messages; each message's own record (its exact bytes) checked.
    fn cut(
        name: &str,
        file: u32,
        ix: &mut Indexer,
        places: &[Place],
        mut r: impl BufRead,
    ) -> Result<()> {
        use std::io::Read as _;
        let mut seg: Vec<u8> = Vec::new();
        let (mut seg_start, mut seg_line) = (0u64, 1usize);
        let (mut offset, mut line) = (0u64, 1usize);
        let mut k = 0;
        // The last message seen: what a record of no message rides with.
        let mut last = None;
        loop {
            let n = (&mut r)
                .take(crate::records::MAX_RECORD + 1)
                .read_until(b'\n', &mut seg)
                .map_err(|e| Error::new(name, "io", format!("cannot read the file: {e}")))?;
            let eof = n == 0 || seg.last() != Some(&b'\n');
            offset += n as u64;
            // The newline just read is at `offset - 1`: a cut unless it is
            // inside a message.
            let nl = offset.saturating_sub(1);
            let inside = places[k..]
                .iter()
                .find(|p| p.end > nl)
                .is_some_and(|p| p.start <= nl);
            if !eof && inside {
                if seg.len() as u64 > crate::records::MAX_RECORD {
                    return Err(too_large(name, seg_line));
                }
                line += 1;
                continue;
            }
            if !eof {
                seg.pop();
            }
            let raw = &seg[..];
            if raw.len() as u64 > crate::records::MAX_RECORD {
                return Err(too_large(name, seg_line));
            }
            let rec = Seg {
                raw,
                start: seg_start,
                line: seg_line,
                at: RecRef {
                    file,
                    line: seg_line as u32,
                    offset: seg_start,
                    len: raw.len() as u32,
                    check: crate::records::check(raw),
                },
            };
            let carrier = rec.messages(name, ix, places, &mut k, last)?;
            last = carrier;
            ix.ride(carrier, rec.at);
            if eof {
                break;
            }
            seg.clear();
            seg_start = offset;
            line += 1;
            seg_line = line;
        }
        if k < places.len() {
            return Err(changed(name));
        }
        Ok(())
    }

    /// The error when a file changed between its two reads.
    fn changed(name: &str) -> Error {
        Error::new(
            name,
            "changed",
            "the file changed while it was imported (rewritten?); import it again",
        )
    }

    /// One record of a legacy chat ([`cut`]): its bytes, where it starts
    /// (offset, line) and its reference.
    struct Seg<'s> {
        raw: &'s [u8],
        start: u64,
        line: usize,
        at: RecRef,
    }

    impl Seg<'_> {
        /// The messages ending in this record (from `places[*k]` on): their
        /// own bytes checked, each one's record noted. The last of them
        /// carries the record, else `last` (the message before it).
        fn messages(
            &self,
            name: &str,
            ix: &mut Indexer,
            places: &[Place],
            k: &mut usize,
            last: Option<usize>,
        ) -> Result<Option<usize>> {
            let mut carrier = last;
            while let Some(p) = places
                .get(*k)
                .filter(|p| p.end <= self.start + self.raw.len() as u64)
            {
                if let Some(i) = p.id {
                    let bytes = self
                        .raw
                        .get((p.start - self.start) as usize..(p.end - self.start) as usize)
                        .ok_or_else(|| changed(name))?;
                    let text = std::str::from_utf8(bytes).map_err(|_| changed(name))?;
                    convo_core::json::check_unique_keys(text).map_err(|e| {
                        crate::error::json_error(name, None, String::new(), &e)
                            .at_line(self.line, 1)
                    })?;
                    let own = &mut ix.ids[i].own;
                    if own.offset == p.start {
                        self.own_record(own, p, bytes);
                    }
                    carrier = Some(i);
                }
                *k += 1;
            }
            Ok(carrier)
        }

        /// A message alone in its record (its lines, the comma after it)
        /// is read from that record, as a JSON line is: a huge one is then
        /// in memory once. Else its own bytes (`bytes`) are checked.
        fn own_record(&self, own: &mut RecRef, p: &Place, bytes: &[u8]) {
            let before = &self.raw[..(p.start - self.start) as usize];
            let after = &self.raw[(p.end - self.start) as usize..];
            let blank = |b: &[u8]| b.iter().all(u8::is_ascii_whitespace);
            let after = after.trim_ascii_end();
            if blank(before) && blank(after.strip_suffix(b",").unwrap_or(after)) {
                *own = self.at;
            } else {
                own.line = self.line as u32;
                own.check = crate::records::check(bytes);
            }
        }
    }

    fn too_large(name: &str, line: usize) -> Error {
        Error::new(
            name,
            "too-large",
            format!(
                "a record longer than {} MiB; convo reads records of at most that",
                crate::records::MAX_RECORD / (1024 * 1024)
            ),
        )
        .at_line(line, 1)
    }
}

/// Every session file under `dir` (`~/.gemini`, its `tmp/`, a project's
/// folder or its `chats/`), in path order: `session-*.jsonl`,
/// `session-*.json`, and subagents' `chats/<parent>/<id>.jsonl` whose
/// parent's chat is not there (those are read with it).
pub fn session_files(dir: &Path) -> Vec<PathBuf> {
    let in_chats = dir.file_name().is_some_and(|n| n == "chats");
    records::find_files(
        dir,
        5,
        |_, name| !name.starts_with('.'),
        |p, name| {
            let session = name.starts_with("session-")
                && (name.ends_with(".jsonl") || name.ends_with(".json"));
            let parent = p.parent();
            let sub = name.ends_with(".jsonl")
                && (parent
                    .and_then(Path::parent)
                    .and_then(Path::file_name)
                    .is_some_and(|n| n == "chats")
                    || (in_chats && parent != Some(dir)));
            session || (sub && !parent_chat_exists(p))
        },
    )
}

/// Whether a subagent's chat (`chats/<parent id>/<id>.jsonl`) has its
/// parent's chat beside its folder (`chats/session-…-<parent id8>.jsonl`),
/// which reads it.
fn parent_chat_exists(sub: &Path) -> bool {
    let Some(folder) = sub.parent() else {
        return false;
    };
    let Some(parent_id) = folder.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return false;
    };
    let short: String = parent_id.chars().take(8).collect();
    let Some(chats) = folder.parent() else {
        return false;
    };
    std::fs::read_dir(chats)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("session-")
                && (n.ends_with(&format!("-{short}.jsonl"))
                    || n.ends_with(&format!("-{short}.json")))
        })
}

/// Whether the start of a file looks like a Gemini CLI session.
pub fn looks_like(head: &str) -> bool {
    head.contains("\"projectHash\"") && head.contains("\"sessionId\"")
}

/// The text of a `PartListUnion`: a string, a part, or a list of either.
fn parts_text(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            if let Some(t) = o.get("text").and_then(Value::as_str) {
                return t.to_owned();
            }
            if let Some(r) = o.get("functionResponse") {
                let resp = r.get("response").unwrap_or(&Value::Null);
                return match resp
                    .get("output")
                    .or_else(|| resp.get("error"))
                    .or_else(|| resp.get("content"))
                {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => records::content_text(other),
                    None => resp.to_string(),
                };
            }
            if o.contains_key("inlineData") || o.contains_key("fileData") {
                return "[file]".into();
            }
            String::new()
        }
        Value::Array(items) => {
            let mut parts: Vec<String> = items
                .iter()
                .map(parts_text)
                .filter(|t| !t.is_empty())
                .collect();
            // One part (the usual prompt) is not copied again by a join.
            if parts.len() == 1 {
                return parts.pop().unwrap_or_default();
            }
            parts.join("\n\n")
        }
        other => records::content_text(other),
    }
}

/// Whether [`parts_text`] is blank, without building it (a huge text is
/// not copied by the first pass).
fn parts_blank(v: &Value) -> bool {
    match v {
        Value::String(s) => s.trim().is_empty(),
        Value::Object(o) => match o.get("text").and_then(Value::as_str) {
            Some(t) => t.trim().is_empty(),
            None => parts_text(v).trim().is_empty(),
        },
        Value::Array(items) => items.iter().all(parts_blank),
        other => parts_text(other).trim().is_empty(),
    }
}

/// [`records::title_of`] the text of a `PartListUnion`, without building it.
fn first_title(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => records::title_of(s),
        Value::Object(o) => match o.get("text").and_then(Value::as_str) {
            Some(t) => records::title_of(t),
            None => records::title_of(&parts_text(v)),
        },
        Value::Array(items) => items.iter().find_map(first_title),
        other => records::title_of(&parts_text(other)),
    }
}

/// The messages one message record says (latest version of its id), with
/// the text of the one keyed `want` only (none for the skeleton).
fn messages_of(id: &str, v: &Map<String, Value>, want: Option<&str>) -> Vec<Message> {
    let s = |k: &str| v.get(k).and_then(Value::as_str);
    let time = s("timestamp").and_then(crate::json::iso_to_millis);
    let content = v.get("content").unwrap_or(&Value::Null);
    let text_for = |key: &str, make: &dyn Fn() -> String| {
        if want == Some(key) {
            make()
        } else {
            String::new()
        }
    };
    let mut out = Vec::new();
    match s("type") {
        Some("user") if !not_a_prompt(content) => {
            let mut m = Message::new(Role::User, "user", text_for(id, &|| parts_text(content)));
            m.key = Some(id.to_owned());
            if want.is_none()
                && let Some(t) = task_start(content)
            {
                m.extra.insert("task".into(), json!(t));
            }
            out.push(m);
        }
        Some("gemini") => {
            let model = s("model").map(str::to_owned);
            if !parts_blank(content) {
                let mut m = Message::new(
                    Role::Assistant,
                    "gemini",
                    text_for(id, &|| parts_text(content)),
                )
                .with_model(model.clone());
                if let Some(t) = v.get("tokens").filter(|t| !t.is_null()) {
                    m.extra.insert("usage".into(), t.clone());
                }
                m.key = Some(id.to_owned());
                out.push(m);
            }
            for call in v
                .get("toolCalls")
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice)
            {
                let cs = |k: &str| call.get(k).and_then(Value::as_str);
                let name = cs("name").unwrap_or("tool").to_owned();
                let cid = cs("id").unwrap_or("").to_owned();
                let key = if out.is_empty() {
                    id.to_owned()
                } else {
                    format!("{id}#call:{cid}")
                };
                let args = call.get("args").unwrap_or(&Value::Null);
                let mut m = Message::new(
                    Role::ToolCall,
                    "gemini",
                    text_for(&key, &|| records::tool_call_text(&name, args)),
                )
                .with_model(model.clone())
                .with_extra("call_id", json!(cid));
                m.to = Some(name.clone());
                m.key = Some(key);
                m.time = m_time(call).or(time);
                if want.is_none()
                    && name == "invoke_agent"
                    && let Some(t) = args.get("prompt").and_then(task_start)
                {
                    m.extra.insert("task".into(), json!(t));
                }
                if out.is_empty()
                    && let Some(t) = v.get("tokens").filter(|t| !t.is_null())
                {
                    m.extra.insert("usage".into(), t.clone());
                }
                out.push(m);
                if let Some(result) = call.get("result").filter(|r| !r.is_null()) {
                    let key = format!("{id}#result:{cid}");
                    let text = text_for(&key, &|| {
                        let text = parts_text(result);
                        match call.get("resultDisplay").and_then(Value::as_str) {
                            Some(d) if text.is_empty() => d.to_owned(),
                            _ => text,
                        }
                    });
                    let mut r = Message::new(Role::Tool, name, text)
                        .with_extra("call_id", json!(cid))
                        .with_extra("status", call.get("status").cloned().unwrap_or(Value::Null));
                    r.key = Some(key);
                    r.time = m_time(call).or(time);
                    out.push(r);
                }
            }
        }
        _ => {}
    }
    for m in &mut out {
        m.time = m.time.or(time);
    }
    out
}

/// Whether a `user` message is not something a human typed: the session's
/// context Gemini CLI sends first (`<session_context>`, `<hook_context>`,
/// which it leaves out of a resumed history too), or tool results alone
/// (`functionResponse` parts: the results its `gemini` message's
/// `toolCalls` already hold). Such a message rides with the next one.
fn not_a_prompt(content: &Value) -> bool {
    let parts = match content {
        Value::Array(items) => items.as_slice(),
        other => std::slice::from_ref(other),
    };
    let response = |p: &Value| p.get("functionResponse").is_some();
    if !parts.is_empty() && parts.iter().all(response) {
        return true;
    }
    let first = parts.iter().find_map(|p| match p {
        Value::String(s) => Some(s.as_str()),
        other => other.get("text").and_then(Value::as_str),
    });
    first.is_some_and(|t| {
        let t = t.trim_start();
        t.starts_with("<session_context>") || t.starts_with("<hook_context>")
    })
}

/// The message keyed `key` in a record: the record itself (a message
/// line), or the message of that id a `{"$set": {"messages": […]}}` lists.
fn message_in<'v>(v: &'v Map<String, Value>, key: &str) -> Option<&'v Map<String, Value>> {
    if v.contains_key("id") {
        return Some(v);
    }
    let id = key.split('#').next().unwrap_or(key);
    v.get("$set")?
        .get("messages")?
        .as_array()?
        .iter()
        .filter_map(Value::as_object)
        .find(|m| m.get("id").and_then(Value::as_str) == Some(id))
}

/// The first 200 characters of a text (a string, or the first text part
/// of a list), trimmed: what matches a subagent to the call that gave it
/// its task.
fn task_start(v: &Value) -> Option<String> {
    let t = match v {
        Value::String(s) => s.as_str(),
        Value::Array(items) => items.iter().find_map(|p| match p {
            Value::String(s) => Some(s.as_str()),
            other => other.get("text").and_then(Value::as_str),
        })?,
        other => other.get("text").and_then(Value::as_str)?,
    };
    let t: String = t.trim().chars().take(200).collect();
    (!t.is_empty()).then_some(t)
}

fn m_time(call: &Value) -> Option<i64> {
    call.get("timestamp")
        .and_then(Value::as_str)
        .and_then(crate::json::iso_to_millis)
}

/// Fills a skeleton message from its record (see [`Stored::fill`]): the
/// text, model and extras of the message its key names.
fn fill(m: &mut Message, rec: &mut Record) {
    let (Some(v), Some(key)) = (&rec.value, m.key.as_deref()) else {
        return;
    };
    let Some(v) = message_in(v, key) else {
        return;
    };
    let id = v.get("id").and_then(Value::as_str).unwrap_or("");
    if let Some(got) = messages_of(id, v, Some(key))
        .into_iter()
        .find(|x| x.key.as_deref() == Some(key))
    {
        m.text = got.text;
        m.model = got.model;
        m.extra.extend(got.extra);
    }
}

/// What a chat's skeleton is built into: its messages in order (indices
/// in the first pass's [`Arena`]), each one's own record and the records
/// it carries, and the records carried by a message already placed
/// ([`Built::carry_to`]).
#[derive(Default)]
struct Built {
    order: Vec<usize>,
    refs: Refs,
    late: Vec<(usize, Vec<RecRef>)>,
}

impl Built {
    /// One chat's messages, in the order first seen, each after the one
    /// it followed (the first after `root`), parents set in `arena`.
    /// Returns the last message each id ends with and the records after
    /// its last message.
    fn chain(
        &mut self,
        arena: &mut Skeleton,
        ids: &[Seen],
        mut riding: Vec<(u32, RecRef)>,
        waiting: Vec<RecRef>,
        root: Option<usize>,
    ) -> (Vec<Option<usize>>, Vec<RecRef>) {
        // Each id's records together, in file order.
        riding.sort_by_key(|r| r.0);
        let mut rides = riding.into_iter().peekable();
        // The last message each id ends with (inherited when it says nothing).
        let mut ends: Vec<Option<usize>> = vec![None; ids.len()];
        let mut carry: Vec<RecRef> = waiting;
        for (i, e) in ids.iter().enumerate() {
            let parent = match e.follows {
                NONE => root,
                p => ends[p as usize],
            };
            while let Some((_, at)) = rides.next_if(|r| r.0 as usize == i) {
                carry.push(at);
            }
            if e.count == 0 {
                ends[i] = parent;
                continue;
            }
            let mut prev = parent;
            for k in 0..e.count as usize {
                let a = e.first as usize + k;
                arena.set_parent(a, prev.map(|p| self.order[p]));
                self.order.push(a);
                if k == 0 {
                    self.refs.push(Some(e.own), carry.drain(..));
                } else {
                    self.refs.push(Some(e.own), []);
                }
                prev = Some(self.order.len() - 1);
            }
            ends[i] = prev;
        }
        (ends, carry)
    }

    /// Records after a chat's last message: carried by the message `to`
    /// (in file order with those it carries).
    fn carry_to(&mut self, to: usize, carry: Vec<RecRef>) {
        self.late.push((to, carry));
    }

    /// The messages' records, with those carried late.
    fn refs(self) -> Refs {
        let Built { refs, mut late, .. } = self;
        if late.is_empty() {
            return refs;
        }
        late.sort_by_key(|l| l.0);
        let mut out = Refs::default();
        let mut late = late.into_iter().peekable();
        let mut list = Vec::new();
        for i in 0..refs.len() {
            list.clear();
            list.extend_from_slice(refs.carried(i));
            let mut more = false;
            while let Some((_, l)) = late.next_if(|l| l.0 == i) {
                list.extend(l);
                more = true;
            }
            if more {
                list.sort_by_key(|r| (r.file, r.line));
            }
            out.push(refs.own(i), list.iter().copied());
        }
        out.shrink_to_fit();
        out
    }
}

/// A hash of a task's start ([`Arena::tasks`]; 0 is none).
fn task_hash(task: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::hash::DefaultHasher::new();
    task.hash(&mut h);
    h.finish().max(1)
}

/// The first id (in order) whose first message is a prompt, if any.
fn first_prompt(ids: &[Seen], arena: &Skeleton) -> Option<usize> {
    ids.iter()
        .position(|e| e.count > 0 && arena.role(e.first as usize) == Role::User)
}

/// The title of the chat whose first prompt is `ids[first]`: what the
/// first pass kept, or its record read again (when a later line said the
/// id the first pass took it from again as no prompt).
fn title_of(
    first: Option<usize>,
    ids: &[Seen],
    arena: &Skeleton,
    kept: Option<(u32, Option<String>)>,
    sources: &mut Sources<'_>,
) -> Option<Option<String>> {
    let i = first?;
    if let Some((k, t)) = kept
        && k as usize == i
    {
        return Some(t);
    }
    let key = arena.key(ids[i].first as usize)?;
    let rec = sources.record(&ids[i].own, true).ok()?;
    let v = message_in(rec.value.as_ref()?, &key)?;
    Some(first_title(v.get("content").unwrap_or(&Value::Null)))
}

/// Chains each subagent's chat after the call that gave it its task
/// (each call once; else the chat's last message) and gives the leaf of
/// each that has a message of its own; every line kept (after its last
/// message, or with the call).
fn chain_agents(
    b: &mut Built,
    arena: &mut Skeleton,
    tasks: &[u64],
    agents: Vec<Indexer>,
    rel: &[Option<String>],
    warnings: &mut Vec<String>,
) -> Vec<usize> {
    let own_count = b.order.len();
    let mut agent_leaves = Vec::new();
    let mut used = vec![false; own_count];
    for (k, agent) in agents.into_iter().enumerate() {
        let Indexer {
            ids,
            riding,
            waiting,
            active,
            warnings: found,
            ..
        } = agent;
        let name = rel.get(k + 1).cloned().flatten().unwrap_or_default();
        warnings.extend(found.into_iter().map(|w| format!("{name}:{w}")));
        let task = first_prompt(&ids, arena).map_or(0, |i| tasks[ids[i].first as usize]);
        // The call that gave it its task (each call once), else the
        // chat's last message.
        let matched = (0..own_count).find(|&i| !used[i] && task != 0 && tasks[b.order[i]] == task);
        if let Some(r) = matched {
            used[r] = true;
        }
        let root = matched.or(own_count.checked_sub(1));
        let first = b.order.len();
        let (ends, carry) = b.chain(arena, &ids, riding, waiting, root);
        let leaf = active
            .last()
            .and_then(|&i| ends[i as usize])
            .filter(|&l| l >= first)
            .or((b.order.len() > first).then(|| b.order.len() - 1));
        // Every line kept: after its last message, or with the call.
        if let Some(to) = leaf.or(root) {
            b.carry_to(to, carry);
        }
        if let Some(l) = leaf {
            agent_leaves.push(l);
        }
    }
    agent_leaves
}

/// `main` ends where the live conversation ends; a subagent's chat is
/// `agent-N`; every other leaf is a rewound branch (`alt-N`).
fn timelines_of(messages: &Skeleton, live: Option<usize>, agent_leaves: &[usize]) -> Vec<Timeline> {
    let mut timelines = vec![Timeline {
        name: "main".into(),
        leaf: live,
    }];
    for (k, &leaf) in agent_leaves.iter().enumerate() {
        timelines.push(Timeline {
            name: format!("agent-{}", k + 1),
            leaf: Some(leaf),
        });
    }
    for (i, leaf) in messages.leaves().into_iter().enumerate() {
        if leaf && Some(i) != live && !agent_leaves.contains(&i) {
            timelines.push(Timeline {
                name: format!("alt-{}", timelines.len() - agent_leaves.len()),
                leaf: Some(i),
            });
        }
    }
    timelines
}

/// A chat's conversation, without its messages (they are read again one
/// at a time): its id (its `sessionId`, else its file's stem), its title
/// (its `summary`, else the first words typed: `typed`), its metadata.
fn chat_conversation(
    file: &str,
    meta: &Map<String, Value>,
    typed: Option<String>,
    created: Option<i64>,
    timelines: Vec<Timeline>,
) -> crate::model::Conversation {
    // A subagent's `summary` is its result (0.61.0: the JSON its
    // `complete_task` call gave), not a title: it is titled by its task.
    let subagent = meta.get("kind").and_then(Value::as_str) == Some("subagent");
    let title = meta
        .get("summary")
        .filter(|_| !subagent)
        .and_then(Value::as_str)
        .and_then(records::title_of)
        .or(typed);
    let id = meta
        .get("sessionId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    crate::model::Conversation {
        id: records::id_or_stem(id, file),
        title,
        agent: Some("gemini-cli".into()),
        created_at: created,
        meta: kept_meta(meta, file),
        timelines,
        messages: Vec::new(),
    }
}

/// What a session keeps of its chat's metadata, and its file's name.
fn kept_meta(meta: &Map<String, Value>, file: &str) -> Map<String, Value> {
    let mut keep = Map::new();
    for k in ["sessionId", "projectHash", "kind", "directories"] {
        if let Some(v) = meta.get(k) {
            keep.insert(k.into(), v.clone());
        }
    }
    keep.insert("file".into(), json!(records::file_name(file)));
    keep
}

/// The skeleton of one chat from its records' index, with its subagents'
/// chats (`agents`, each read as file `i + 1` of `sources`, named by
/// `rel[i + 1]`): each a timeline `agent-N` from the `invoke_agent` call
/// that gave it its task (its first prompt's start matched to the call's
/// `prompt`; else the chat's last message before it). `None` for a file
/// with no message.
fn build<'a>(
    file: &str,
    ix: Indexer,
    agents: Vec<Indexer>,
    mut sources: Sources<'a>,
    rel: Vec<Option<String>>,
    mut warnings: Vec<String>,
) -> Option<Session<'a>> {
    let Indexer {
        ids,
        riding,
        waiting,
        active,
        arena: Arena {
            skel: mut arena,
            tasks,
        },
        title: kept,
        meta,
        created,
        warnings: found,
        ..
    } = ix;
    warnings.extend(found.into_iter().map(|w| format!("{file}:{w}")));
    if ids.is_empty() && waiting.is_empty() {
        return None;
    }
    let title = title_of(first_prompt(&ids, &arena), &ids, &arena, kept, &mut sources);
    let mut b = Built::default();
    let (ends, carry) = b.chain(&mut arena, &ids, riding, waiting, None);
    if !carry.is_empty() {
        match b.order.len().checked_sub(1) {
            Some(last) => b.carry_to(last, carry),
            // No prompt or answer yet (the session line and its context
            // alone: a chat just started, or the one Gemini CLI 0.61.0
            // starts and leaves beside the chat it resumes, under the same
            // `sessionId`): not a session yet; it is read again when it
            // grows.
            None => return None,
        }
    }
    // Where the live conversation ends.
    let live = active
        .last()
        .and_then(|&i| ends[i as usize])
        .or(b.order.len().checked_sub(1));
    drop((ids, ends));
    let agent_leaves = chain_agents(&mut b, &mut arena, &tasks, agents, &rel, &mut warnings);
    drop(tasks);
    // The arena's messages in order (those said again left out).
    let mut messages = arena;
    messages.reorder(&b.order);
    messages.shrink_to_fit();
    let refs = b.refs();
    messages.mark_intermediate();
    let n = messages.len();
    let timelines = timelines_of(&messages, live, &agent_leaves);
    let created = created.or_else(|| (0..n).find_map(|i| messages.time(i)));
    Some(Session {
        conv: chat_conversation(file, &meta, title.flatten(), created, timelines),
        warnings,
        records: Stored {
            sources,
            rel,
            refs,
            tree: Some(messages),
            fill,
            failed: None,
            aliases: Default::default(),
            tail: None,
            // A huge message whose text is its record's one string is
            // held once (`Stored::text_of_huge`; a legacy chat's message
            // alone in its record too, see `legacy::cut`).
            defer: true,
            deferred: Vec::new(),
        },
    })
}

/// The chat file an imported session's records give back, byte for byte:
/// a `.jsonl`'s lines each with its newline; a legacy `.json`'s records
/// (its lines, a message's lines together) joined by newlines. `records`
/// are `convo_llm::ledger::session_records`'s.
pub fn file_bytes(records: &[(String, u64, String)]) -> Vec<u8> {
    let mine = || records.iter().filter(|(f, _, _)| f.is_empty());
    let legacy = mine().next().is_some_and(|(_, _, raw)| legacy_first(raw));
    let mut out = Vec::new();
    for (i, (_, _, raw)) in mine().enumerate() {
        if legacy && i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(raw.as_bytes());
        if !legacy {
            out.push(b'\n');
        }
    }
    out
}

/// Whether a chat's first record is a legacy document's first line (not a
/// JSON object, or the whole document with its `messages`).
fn legacy_first(raw: &str) -> bool {
    !matches!(serde_json::from_str::<Value>(raw), Ok(Value::Object(o)) if !o.contains_key("messages"))
}

/// The chat file of a branch, for `gemini --resume`: the session's
/// metadata line with `sessionId` set to `new_id` and its times to `now`,
/// then the last version of each message the branch holds (`ids`, in
/// order: the messages up to its last imported one, so what a rewind
/// dropped is left out, and no `$rewindTo`; its last line, as the reader
/// reads it, or for a message with no line of its own, such as the
/// session's context, what a `$set` of the messages says), then `extra` lines (turns
/// made in convo, see [`turn_records`]). `records` are the session's
/// stored records (`convo_llm::ledger::session_records`).
pub fn resume_file(
    records: &[(String, u64, String)],
    ids: &[String],
    new_id: &str,
    now: i64,
    extra: &[Value],
) -> Result<Vec<u8>> {
    let mut meta: Option<Map<String, Value>> = None;
    let mut latest: HashMap<String, std::borrow::Cow<'_, str>> = HashMap::new();
    // What `$set`s of the messages restate, for a message with no line.
    let mut restated: HashMap<String, &str> = HashMap::new();
    let legacy = records
        .iter()
        .find(|(f, _, _)| f.is_empty())
        .is_some_and(|(_, _, raw)| legacy_first(raw));
    if legacy {
        // A legacy document, whole: its messages become lines.
        let doc: Value = crate::json::parse("export", &file_bytes(records))?;
        if let Value::Object(mut o) = doc {
            if let Some(Value::Array(msgs)) = o.remove("messages") {
                for m in msgs {
                    if let Some(id) = m.get("id").and_then(Value::as_str) {
                        latest.insert(id.to_owned(), m.to_string().into());
                    }
                }
            }
            meta = Some(o).filter(|o| o.contains_key("sessionId") && o.contains_key("projectHash"));
        }
    }
    for (file, _, raw) in records {
        if legacy || !file.is_empty() {
            continue;
        }
        for (id, m) in set_messages(raw) {
            restated.insert(id, m);
        }
        let Ok(Value::Object(o)) = serde_json::from_str::<Value>(raw) else {
            continue;
        };
        if let Some(id) = o.get("id").and_then(Value::as_str) {
            latest.insert(id.to_owned(), raw.as_str().into());
        } else if meta.is_none() && o.contains_key("sessionId") && o.contains_key("projectHash") {
            meta = Some(o);
        }
    }
    let Some(mut meta) = meta else {
        return Err(Error::new(
            "export",
            "not-found",
            "no Gemini CLI session line (sessionId, projectHash) is stored for this session",
        ));
    };
    let ts = crate::json::millis_to_iso(now);
    meta.insert("sessionId".into(), json!(new_id));
    meta.insert("startTime".into(), json!(ts));
    meta.insert("lastUpdated".into(), json!(ts));
    let mut out = serde_json::to_string(&Value::Object(meta)).unwrap_or_default();
    out.push('\n');
    for id in ids {
        let raw = latest.get(id).map(|r| r.as_ref());
        if let Some(raw) = raw.or_else(|| restated.get(id).copied()) {
            out.push_str(raw);
            out.push('\n');
        }
    }
    for v in extra {
        out.push_str(&serde_json::to_string(v).unwrap_or_default());
        out.push('\n');
    }
    Ok(out.into_bytes())
}

/// The messages a `{"$set": {"messages": […]}}` line lists, as `(id,
/// its exact bytes)`; none for another line.
fn set_messages(raw: &str) -> Vec<(String, &str)> {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        #[serde(rename = "$set", borrow)]
        set: Set<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Set<'a> {
        #[serde(borrow, default)]
        messages: Vec<&'a serde_json::value::RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<String>,
    }
    if !raw.contains("\"messages\"") {
        return Vec::new();
    }
    let Ok(line) = serde_json::from_str::<Line<'_>>(raw) else {
        return Vec::new();
    };
    line.set
        .messages
        .into_iter()
        .filter_map(|m| {
            let id = serde_json::from_str::<Id>(m.get()).ok()?.id?;
            Some((id, m.get()))
        })
        .collect()
}

/// The ids of the messages a record holds, in order, and whether they are
/// the whole conversation up to there: a message line's `id`, or those a
/// `$set` of the messages lists (whole). For `--branch`: the branch's
/// records name the messages it holds, those that are not messages of
/// their own in convo included, such as the session's context and the
/// tool results Gemini CLI also writes as `user` messages.
pub fn message_ids(raw: &str) -> (Vec<String>, bool) {
    #[derive(serde::Deserialize)]
    struct Id {
        id: Option<String>,
    }
    if let Ok(Id { id: Some(id) }) = serde_json::from_str::<Id>(raw) {
        return (vec![id], false);
    }
    let listed: Vec<String> = set_messages(raw).into_iter().map(|(id, _)| id).collect();
    let whole = !listed.is_empty();
    (listed, whole)
}

/// Gemini CLI messages for turns that have no line of their own (made in
/// convo after a fork): a `user` or `gemini` message per `(role, text,
/// time)`, ids derived from `seed`.
pub fn turn_records(turns: &[(Role, String, i64)], seed: &str, model: Option<&str>) -> Vec<Value> {
    turns
        .iter()
        .enumerate()
        .map(|(n, (role, text, time))| {
            let h = convo_core::sha256(format!("{seed}:{n}").as_bytes()).to_hex();
            let id = format!(
                "{}-{}-4{}-8{}-{}",
                &h[0..8],
                &h[8..12],
                &h[13..16],
                &h[17..20],
                &h[20..32]
            );
            let ts = crate::json::millis_to_iso(*time);
            if *role == Role::User {
                json!({"id": id, "timestamp": ts, "type": "user", "content": [{"text": text}]})
            } else {
                json!({"id": id, "timestamp": ts, "type": "gemini", "content": text,
                       "model": model.unwrap_or("gemini-2.5-pro")})
            }
        })
        .collect()
}

/// Where Gemini CLI keeps a chat started at `time` (ms) for a project,
/// under its `.gemini` folder `gemini_dir`:
/// `tmp/<project>/chats/session-YYYY-MM-DDTHH-MM-<first 8 of id>.jsonl`.
/// The project's folder is the short name `projects.json` gives the
/// project's path (Gemini CLI 0.61.0: `{"projects": {"/home/me/proj":
/// "proj"}}`), found by the chat's `projectHash` (the SHA-256 of that
/// path); for a project not listed there, the hash itself (the folder
/// older versions used, which 0.61.0 moves to the short name while that
/// one is empty).
pub fn chat_path(gemini_dir: &Path, project_hash: &str, time: i64, id: &str) -> PathBuf {
    let t = jiff::Timestamp::from_millisecond(time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let z = t.to_zoned(jiff::tz::TimeZone::UTC);
    gemini_dir
        .join("tmp")
        .join(convo_core::text::component(&project_folder(
            gemini_dir,
            project_hash,
        )))
        .join("chats")
        .join(format!(
            "session-{}-{}.jsonl",
            z.strftime("%Y-%m-%dT%H-%M"),
            &id[..id.len().min(8)]
        ))
}

/// The name of a project's folder under `tmp/` (see [`chat_path`]).
fn project_folder(gemini_dir: &Path, project_hash: &str) -> String {
    let listed = std::fs::read(gemini_dir.join("projects.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    listed
        .as_ref()
        .and_then(|v| v.get("projects")?.as_object())
        .and_then(|projects| {
            projects.iter().find_map(|(path, name)| {
                (convo_core::sha256(path.as_bytes()).to_hex() == project_hash)
                    .then(|| name.as_str())
                    .flatten()
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
            })
        })
        .unwrap_or_else(|| project_hash.to_owned())
}
