//! opencode sessions: its SQLite `opencode.db` and the older JSON storage.
//!
//! # Wire format
//!
//! Established from anomalyco/opencode's source (`session/session.sql.ts`,
//! `session/message-v2.ts`, `storage/json-migration.ts`) and checked
//! against what the real CLI writes (fixtures made by opencode 1.18.34
//! and 1.1.65 against a scripted upstream). Two layouts:
//!
//! - **SQLite** (1.2 and later): `~/.local/share/opencode/opencode.db`
//!   (`opencode-<channel>.db` for other channels), tables `project`,
//!   `session` (`id`, `project_id`, `parent_id`, `title`, `revert`, times…),
//!   `message` (`id`, `session_id`, `time_created`, `time_updated`, `data`:
//!   the message without `id`/`sessionID`) and `part` (`id`, `message_id`,
//!   `session_id`, times, `data`: the part without its ids);
//! - **JSON files** (up to 1.1): under `~/.local/share/opencode/storage/`,
//!   `project/<project>.json`, `session/<project>/<session>.json`,
//!   `message/<session>/<message>.json`, `part/<message>/<part>.json`,
//!   each one pretty-printed object carrying its own ids.
//!
//! A message is `{"role": "user", "time": {"created"}, "agent", "model"}`
//! or `{"role": "assistant", "parentID", "modelID", "providerID", "tokens",
//! "cost", "time": {"created", "completed"}, "finish", "error"?}`; its
//! parts, in id order, are `text` (`synthetic` for injected text),
//! `reasoning`, `tool` (`tool`, `callID`, `state`: `{status: pending |
//! running | completed | error, input, output | error, metadata, time}`),
//! `file`, `subtask`, `compaction`, `step-start`, `step-finish`, `patch`,
//! `snapshot`, `agent`, `retry`. A subagent runs in a child session
//! (`parent_id`), named by its `task` tool part's `state.metadata.sessionId`.
//! `session.revert = {messageID, partID?}` hides that message and what
//! follows until the next prompt, which deletes them.
//!
//! # Mapping
//!
//! A user message is a [`Role::User`] prompt (its typed text; a subtask's
//! prompt; a compaction's `What did we do so far?`); an assistant
//! message's text parts are answers, each tool part a [`Role::ToolCall`]
//! to the tool ([`records::tool_call_text`]: `$ command`, a diff for an
//! edit, `fetch URL`) followed by a [`Role::Tool`] result once completed
//! or failed; model, tokens and cost on its first message. An assistant
//! message still being written (no `time.completed`, no `error`) is left
//! for the next import.
//!
//! **Every row kept.** Each row (or file) rides with the message it
//! belongs to in `extra.records` ([`crate::records`]) as its exact text:
//! a row as a JSON object of its columns (`file` `message/<id>`, `line`
//! its `time_updated`), a file as its bytes (`file` its path under
//! `storage/`, `line` its modification time in milliseconds). A row or
//! file written again (a tool's result filled in) is a new record, kept
//! beside the old; an export writes the last.
//!
//! **Every branch kept.** The messages of a session follow each other;
//! a pending revert makes `main` end before the reverted message and
//! keeps the reverted turns as `alt-N` (once opencode deletes them, the
//! archive still has them: a re-import forks from where the revert went
//! back). A child session (a subagent) is a timeline `agent-N` forked at
//! the `task` call that started it (at the last message before it when
//! that call is gone). opencode's own fork (`/session/:id/fork`) copies
//! messages under new ids into a new session titled `… (fork #N)`: it is
//! a session of its own (opencode records no link).

use crate::error::{Error, Result};
use crate::model::{Conversation, Message, Read, Role};
use crate::records::{self, Skeleton};
use rusqlite::{Connection, OpenFlags, types::Value as Sql};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The opencode reader.
#[derive(Debug)]
pub struct OpenCode;

impl crate::Reader for OpenCode {
    fn name(&self) -> &'static str {
        "opencode"
    }

    fn read_bytes(&self, file: &str, _bytes: &[u8]) -> Result<Read> {
        Err(Error::new(
            file,
            "opencode-path",
            "opencode sessions are read from opencode.db or the storage folder, not standard input",
        ))
    }

    fn read_path(&self, path: &Path) -> Result<Read> {
        let mut out = Read::default();
        for s in source_list(path)? {
            let mut opened = open(&s)?;
            let mut convs = Vec::new();
            opened.each(|skeleton, rows| -> Result<()> {
                let mut conv = skeleton.clone();
                let tree = rows.tree.take().unwrap_or_default();
                for i in 0..tree.len() {
                    conv.messages.push(rows.message(i, &tree.message(i))?);
                }
                convs.push(conv);
                Ok(())
            })?;
            out.conversations.extend(convs);
            out.warnings.append(&mut opened.warnings);
        }
        Ok(out)
    }
}

/// What `convo import PATH` reads for opencode: the databases or storage
/// folder under a folder ([`sources`]), or the path itself.
pub fn source_list(path: &Path) -> Result<Vec<PathBuf>> {
    let found = if path.is_dir() {
        sources(path)
    } else {
        vec![path.to_path_buf()]
    };
    if found.is_empty() {
        return Err(Error::new(
            &path.display().to_string(),
            "unknown-format",
            "no opencode.db and no opencode storage folder (session/, message/, part/) here",
        ));
    }
    Ok(found)
}

/// What to read under `dir` (opencode's data folder, its `storage/`, or a
/// folder above them): its `opencode*.db` when there is one (it supersedes
/// the JSON storage it was migrated from), else the storage folder.
pub fn sources(dir: &Path) -> Vec<PathBuf> {
    for d in [dir.to_path_buf(), dir.join("opencode")] {
        let mut dbs: Vec<PathBuf> = std::fs::read_dir(&d)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("opencode") && n.ends_with(".db"))
            })
            .collect();
        if !dbs.is_empty() {
            dbs.sort();
            return dbs;
        }
        for s in [d.clone(), d.join("storage")] {
            if is_storage(&s) {
                return vec![s];
            }
        }
    }
    Vec::new()
}

/// Whether `dir` is opencode's JSON storage (`session/` and `message/`).
pub fn is_storage(dir: &Path) -> bool {
    dir.join("session").is_dir() && dir.join("message").is_dir()
}

/// Whether an SQLite file holds opencode's tables.
pub fn is_db(path: &Path) -> bool {
    let Ok(db) = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) else {
        return false;
    };
    let n: i64 = db
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('session', 'message', 'part')",
            [],
            |r| r.get(0),
        )
        .unwrap_or(0);
    n == 3
}

/// A stored thing's identity, which is also where to read it again: a row
/// is `table/id`, versioned by its `time_updated`; a file of the JSON
/// storage its path under `storage/`, versioned by its modification time
/// in milliseconds. What an import keeps of a record between its passes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct At {
    file: Box<str>,
    version: u64,
}

impl At {
    /// The row's or file's id (`msg_…`, `prt_…`).
    fn id(&self) -> String {
        let last = self.file.rsplit('/').next().unwrap_or_default();
        last.strip_suffix(".json").unwrap_or(last).to_owned()
    }
}

/// One stored thing (a row or a file) read: its exact text (when asked
/// for) and its JSON (a row's `data`, a file's object).
#[derive(Debug)]
struct Rec {
    at: At,
    raw: String,
    value: Map<String, Value>,
}

impl Rec {
    /// `{file, line, raw}` for `extra.records`, its text moved (`json!`
    /// would copy it).
    fn into_value(self) -> Value {
        let mut m = Map::new();
        m.insert("file".into(), Value::String(self.at.file.into()));
        m.insert("line".into(), json!(self.at.version));
        m.insert("raw".into(), Value::String(self.raw));
        Value::Object(m)
    }
}

#[derive(Debug)]
struct Part {
    id: String,
    rec: Rec,
}

/// One opencode message with its parts, whole: what [`messages_of`]
/// reads. The first pass holds one at a time.
#[derive(Debug)]
struct Msg {
    id: String,
    rec: Rec,
    parts: Vec<Part>,
}

/// What the first pass keeps of a message until its session's skeleton
/// is built (then it is moved into the skeleton and dropped): where it
/// and its parts are, the messages it says without their text (`count`
/// messages of its session's [`Sess::said`] from `first`), whether it is
/// still being written.
#[derive(Debug)]
struct Lite {
    at: At,
    parts: Box<[At]>,
    first: u32,
    count: u32,
    pending: bool,
    /// A title from its user message's words (its session's first only).
    title: Option<String>,
}

impl Lite {
    /// Its messages pushed to `said`, without their text.
    fn of(mut m: Msg, said: &mut Skeleton) -> Lite {
        let pending = in_progress(&m);
        let mut title = None;
        let first = said.len() as u32;
        if !pending {
            for mut x in messages_of(&mut m) {
                if x.role == Role::User && title.is_none() {
                    title = Some(records::title_of(&x.text));
                }
                x.text = String::new();
                x.extra = std::mem::take(&mut x.extra)
                    .remove("session")
                    .map(|v| Map::from_iter([("session".to_owned(), v)]))
                    .unwrap_or_default();
                said.push(&x);
            }
        }
        Lite {
            at: m.rec.at,
            parts: m.parts.into_iter().map(|p| p.rec.at).collect(),
            first,
            count: said.len() as u32 - first,
            pending,
            title: title.flatten(),
        }
    }
}

#[derive(Debug)]
struct Sess {
    id: String,
    parent: Option<String>,
    title: Option<String>,
    created: Option<i64>,
    revert: Option<String>,
    meta: Map<String, Value>,
    recs: Vec<At>,
    /// Taken (moved, not copied) when the skeleton is built.
    msgs: std::cell::RefCell<Vec<Lite>>,
    /// The messages `msgs` say, without their text (taken with them).
    said: std::cell::RefCell<Skeleton>,
    /// Whether one of `msgs` has its title (the first user message's).
    titled: bool,
}

impl Sess {
    /// Adds a message of the first pass, the title kept for the first
    /// user message only.
    fn push(&mut self, m: Msg) {
        let mut m = Lite::of(m, self.said.get_mut());
        if self.titled {
            m.title = None;
        }
        self.titled |= m.title.is_some();
        self.msgs.get_mut().push(m);
    }
}

fn sql_to_json(v: Sql) -> Value {
    match v {
        Sql::Null => Value::Null,
        Sql::Integer(i) => json!(i),
        Sql::Real(f) => json!(f),
        Sql::Text(t) => Value::String(t),
        Sql::Blob(b) => json!({"$blob": b.iter().map(|x| format!("{x:02x}")).collect::<String>()}),
    }
}

/// A row as `{column: value}`.
fn row_map(r: &rusqlite::Row<'_>, names: &[String]) -> rusqlite::Result<Map<String, Value>> {
    let mut m = Map::new();
    for (i, n) in names.iter().enumerate() {
        m.insert(n.clone(), sql_to_json(r.get::<_, Sql>(i)?));
    }
    Ok(m)
}

fn s(m: &Map<String, Value>, k: &str) -> Option<String> {
    m.get(k).and_then(Value::as_str).map(str::to_owned)
}

/// A row's identity: `table/id` at its `time_updated`.
fn row_at(table: &str, row: &Map<String, Value>) -> At {
    At {
        file: format!("{table}/{}", s(row, "id").unwrap_or_default()).into(),
        version: row.get("time_updated").and_then(Value::as_u64).unwrap_or(0),
    }
}

/// The JSON a `data` (or JSON-valued) column holds.
fn data_of(row: &Map<String, Value>, col: &str) -> Map<String, Value> {
    match row.get(col) {
        Some(Value::String(t)) => match serde_json::from_str::<Value>(t) {
            Ok(Value::Object(o)) => o,
            _ => Map::new(),
        },
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    }
}

/// Where an import reads opencode's records from, both passes: the
/// database (inside one read transaction, so both passes see the same
/// rows) or the storage folder.
enum Src {
    /// The database, with each table's [`Layout`] once read.
    Db(
        Connection,
        std::cell::RefCell<HashMap<String, std::rc::Rc<Layout>>>,
    ),
    Dir(PathBuf),
}

impl std::fmt::Debug for Src {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Src::Db(..) => f.write_str("Db"),
            Src::Dir(d) => write!(f, "Dir({})", d.display()),
        }
    }
}

impl Src {
    /// Reads a record again by its identity: its text when `raw`, its
    /// JSON when not. A row or file changed since the first pass is the
    /// error `changed`.
    fn read(&self, name: &str, at: &At, raw: bool) -> Result<Rec> {
        let changed = || changed(name, at);
        match self {
            Src::Db(db, _) => {
                let (table, id) = at.file.split_once('/').ok_or_else(changed)?;
                if !TABLES.contains(&table) {
                    return Err(changed());
                }
                let rec = if raw {
                    let (got, text) = self.text(name, table, id, None)?.ok_or_else(changed)?;
                    Rec {
                        at: got,
                        raw: text.into_string(),
                        value: Map::new(),
                    }
                } else {
                    fetch(db, name, table, id)?.ok_or_else(changed)?
                };
                if rec.at != *at {
                    return Err(changed());
                }
                Ok(rec)
            }
            Src::Dir(root) => {
                let mut warnings = Vec::new();
                let got = file_rec(&at.file, &root.join(&*at.file), !raw, &mut warnings)?
                    .filter(|r| r.at == *at)
                    .ok_or_else(changed)?;
                Ok(got)
            }
        }
    }
}

impl Src {
    /// A row's text ([`row_text`]), its table's layout read once.
    fn text(
        &self,
        name: &str,
        table: &str,
        id: &str,
        hash_from: Option<usize>,
    ) -> Result<Option<(At, Text)>> {
        let Src::Db(db, layouts) = self else {
            return Ok(None);
        };
        let sql = |e: rusqlite::Error| sql_error(name, e);
        let known = layouts.borrow().get(table).cloned();
        let layout = match known {
            Some(l) => l,
            None => {
                let l = std::rc::Rc::new(Layout::of(db, table).map_err(sql)?);
                layouts.borrow_mut().insert(table.to_owned(), l.clone());
                l
            }
        };
        row_text(db, &layout, table, id, hash_from).map_err(sql)
    }

    /// A record for `extra.records` (read once): `{file, line, raw}`, or, with
    /// `defer` and a row of [`crate::records::DETACHED_FROM`] bytes or
    /// more, what the ledger's detaching makes of it (`{file, line, blob:
    /// its SHA-256, bytes}`) with `true`: its text is stored after its
    /// node ([`Rows::next_deferred`](crate::loader::Loader::next_deferred)), never beside the message's text.
    fn record(&self, name: &str, at: &At, defer: bool) -> Result<(Value, bool)> {
        if let Src::Db(..) = self
            && let Some((table, id)) = at.file.split_once('/')
            && TABLES.contains(&table)
        {
            let hash_from = defer.then_some(crate::records::DETACHED_FROM);
            let got = self.text(name, table, id, hash_from)?;
            let Some((got_at, text)) = got.filter(|(got_at, _)| got_at == at) else {
                return Err(changed(name, at));
            };
            let rec = match text {
                Text::Hashed(h, len) => {
                    let hash = hex::encode(sha2::Digest::finalize(h));
                    let mut m = Map::new();
                    m.insert("file".into(), Value::String(at.file.to_string()));
                    m.insert("line".into(), json!(at.version));
                    m.insert("blob".into(), json!(hash));
                    m.insert("bytes".into(), json!(len));
                    return Ok((Value::Object(m), true));
                }
                kept => Rec {
                    at: got_at,
                    raw: kept.into_string(),
                    value: Map::new(),
                },
            };
            return Ok((rec.into_value(), false));
        }
        Ok((self.read(name, at, true)?.into_value(), false))
    }
}

/// The error of a record changed since the first pass.
fn changed(name: &str, at: &At) -> Error {
    Error::new(
        name,
        "changed",
        format!(
            "{} changed while it was imported (opencode wrote it?); import again",
            at.file
        ),
    )
}

/// A `message` or `part` row by its id, its `data` parsed
/// ([`fetch_data`]), `None` when there is none.
fn fetch(db: &Connection, name: &str, table: &str, id: &str) -> Result<Option<Rec>> {
    fetch_data(db, table, id).map_err(|e| sql_error(name, e))
}

/// A `message` or `part` row's identity and its `data` parsed, a long
/// `data` parsed as SQLite's incremental blob I/O reads it (not copied
/// out of SQLite whole first).
fn fetch_data(db: &Connection, table: &str, id: &str) -> rusqlite::Result<Option<Rec>> {
    use rusqlite::types::ValueRef;
    let mut st = db.prepare_cached(&format!(
        "SELECT rowid, id, time_updated, octet_length(data), \
         CASE WHEN octet_length(data) > {STREAMED} THEN NULL ELSE data END \
         FROM \"{table}\" WHERE id = ?1"
    ))?;
    let mut rows = st.query([id])?;
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    let version = match r.get_ref(2)? {
        ValueRef::Integer(i) => u64::try_from(i).unwrap_or(0),
        _ => 0,
    };
    let at = At {
        file: format!(
            "{table}/{}",
            r.get::<_, Option<String>>(1)?.unwrap_or_default()
        )
        .into(),
        version,
    };
    let parsed = match (r.get::<_, Option<i64>>(3)?, r.get_ref(4)?) {
        (_, ValueRef::Text(t)) => serde_json::from_slice::<Value>(t).ok(),
        (Some(n), ValueRef::Null) if n > STREAMED => {
            let blob = db.blob_open(rusqlite::MAIN_DB, table, "data", r.get(0)?, true)?;
            let mut bytes = vec![0u8; blob.len()];
            blob.read_at_exact(&mut bytes, 0)?;
            String::from_utf8(bytes).ok().and_then(parse_huge)
        }
        _ => None,
    };
    let value = match parsed {
        Some(Value::Object(o)) => o,
        _ => Map::new(),
    };
    Ok(Some(Rec {
        at,
        raw: String::new(),
        value,
    }))
}

/// A long `data` parsed with its longest string (a part's text, a tool's
/// output), when that is most of it, made in place from its bytes
/// ([`records::huge_string`]), so the cell is in memory once, not beside
/// its parse.
fn parse_huge(raw: String) -> Option<Value> {
    const MARK: &str = "\u{0}convo:the-huge-string\u{0}";
    fn find(v: &mut Value) -> Option<&mut Value> {
        match v {
            Value::String(t) if t == MARK => Some(v),
            Value::Object(o) => o.values_mut().find_map(find),
            Value::Array(a) => a.iter_mut().find_map(find),
            _ => None,
        }
    }
    let Some((a, b, esc)) = records::huge_string(&raw) else {
        return serde_json::from_str(&raw).ok();
    };
    let mut value: Value = serde_json::from_str(&records::slim(&raw, (a, b), MARK)).ok()?;
    let Some(slot) = find(&mut value) else {
        return serde_json::from_str(&raw).ok();
    };
    let mut text = raw;
    text.truncate(b - 1);
    text.drain(..a + 1);
    if esc && !records::unescape_in_place(&mut text) {
        return None;
    }
    *slot = Value::String(text);
    Some(value)
}

/// A cell longer than this is not copied out of SQLite whole: its row's
/// text is written from it a chunk at a time ([`fetch_raw`]).
const STREAMED: i64 = 64 * 1024;

/// How a table's rows are written as text: its columns, in the order a
/// [`Map`] of them iterates, each name as a JSON string, and the query
/// that reads a row by id giving, per column, its length in bytes (read
/// without loading it) and its value when short.
struct Layout {
    names: Vec<String>,
    order: Vec<usize>,
    keys: Vec<String>,
    sql: String,
}

impl Layout {
    fn of(db: &Connection, table: &str) -> rusqlite::Result<Layout> {
        let names: Vec<String> = db
            .prepare(&format!("SELECT * FROM \"{table}\" WHERE id = ?1"))?
            .column_names()
            .map(str::to_owned)
            .collect();
        // Column indexes in the order a `Map` of the columns iterates.
        let keys: Map<String, Value> = names.iter().map(|n| (n.clone(), Value::Null)).collect();
        let order = keys
            .keys()
            .filter_map(|k| names.iter().position(|n| n == k))
            .collect();
        let keys = names
            .iter()
            .map(|n| serde_json::to_string(n).unwrap_or_default())
            .collect();
        let cols: Vec<String> = names
            .iter()
            .map(|c| {
                let q = format!("\"{}\"", c.replace('"', "\"\""));
                format!("octet_length({q}), CASE WHEN octet_length({q}) > {STREAMED} THEN NULL ELSE {q} END")
            })
            .collect();
        let sql = format!(
            "SELECT rowid, {} FROM \"{table}\" WHERE id = ?1",
            cols.join(", ")
        );
        Ok(Layout {
            names,
            order,
            keys,
            sql,
        })
    }
}

/// A row's text (its record: the JSON object of its columns, as
/// `Value::Object(row_map(..)).to_string()` writes it) with its identity,
/// a cell longer than [`STREAMED`] read with SQLite's incremental blob
/// I/O and escaped into the text a chunk at a time, so the only whole
/// copy of a large cell is the text itself (a plain `SELECT` would
/// materialize the cell beside it). With `hash_from`, a row of that many
/// bytes or more is only hashed and counted as it is written (the text
/// never whole in memory).
fn row_text(
    db: &Connection,
    layout: &Layout,
    table: &str,
    id: &str,
    hash_from: Option<usize>,
) -> rusqlite::Result<Option<(At, Text)>> {
    use rusqlite::types::ValueRef;
    use std::io::Write as _;
    let names = &layout.names;
    let mut st = db.prepare_cached(&layout.sql)?;
    let mut rows = st.query([id])?;
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    let rowid: i64 = r.get(0)?;
    let mut size = 2usize;
    let (mut version, mut id_text) = (0, String::new());
    for (i, n) in names.iter().enumerate() {
        let len: Option<i64> = r.get(1 + 2 * i)?;
        size += n.len() + 4 + usize::try_from(len.unwrap_or(4)).unwrap_or(0);
        match (n.as_str(), r.get_ref(2 + 2 * i)?) {
            ("time_updated", ValueRef::Integer(v)) => version = u64::try_from(v).unwrap_or(0),
            ("id", ValueRef::Text(t)) => id_text = String::from_utf8_lossy(t).into_owned(),
            _ => {}
        }
    }
    let at = At {
        file: format!("{table}/{id_text}").into(),
        version,
    };
    let json = |e: serde_json::Error| rusqlite::Error::ToSqlConversionFailure(Box::new(e));
    // Escaping adds a little; a few escapes more only grow the text once.
    let mut out = match hash_from {
        Some(n) if size >= n => Text::Hashed(sha2::Digest::new(), 0),
        _ => Text::Kept(Vec::with_capacity(size + size / 64)),
    };
    out.push('{');
    for (k, &i) in layout.order.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        out.push_str(&layout.keys[i]);
        out.push(':');
        let len: Option<i64> = r.get(1 + 2 * i)?;
        let long = len.is_some_and(|l| l > STREAMED);
        if long {
            // A text or a blob (a number is never that long).
            let text = db
                .prepare_cached(&format!(
                    "SELECT typeof(\"{}\") = 'text' FROM \"{table}\" WHERE rowid = ?1",
                    names[i].replace('"', "\"\"")
                ))?
                .query_row([rowid], |r| r.get::<_, bool>(0))?;
            let blob = db.blob_open(rusqlite::MAIN_DB, table, names[i].as_str(), rowid, true)?;
            if text {
                stream_text(&blob, &mut out).map_err(json)?;
            } else {
                out.push_str("{\"$blob\":\"");
                let mut buf = vec![0u8; 64 * 1024];
                let mut at = 0;
                while at < blob.len() {
                    let n = blob.read_at(&mut buf, at)?;
                    if n == 0 {
                        break;
                    }
                    out.push_str(&hex::encode(&buf[..n]));
                    at += n;
                }
                out.push_str("\"}");
            }
            continue;
        }
        match r.get_ref(2 + 2 * i)? {
            ValueRef::Null => out.push_str("null"),
            ValueRef::Integer(x) => {
                let _ = write!(out, "{x}");
            }
            ValueRef::Real(f) => serde_json::to_writer(&mut out, &json!(f)).map_err(json)?,
            ValueRef::Text(t) => match std::str::from_utf8(t) {
                Ok(t) => serde_json::to_writer(&mut out, t).map_err(json)?,
                Err(_) => {
                    serde_json::to_writer(&mut out, &String::from_utf8_lossy(t)).map_err(json)?
                }
            },
            ValueRef::Blob(b) => {
                out.push_str("{\"$blob\":\"");
                out.push_str(&hex::encode(b));
                out.push_str("\"}");
            }
        }
    }
    out.push('}');
    Ok(Some((at, out)))
}

/// Where a row's text goes as it is written: kept, or only hashed and
/// counted (a record stored after its node, [`Rows::next_deferred`](crate::loader::Loader::next_deferred)).
enum Text {
    Kept(Vec<u8>),
    Hashed(sha2::Sha256, usize),
}

impl Text {
    fn push_str(&mut self, s: &str) {
        match self {
            Text::Kept(t) => t.extend_from_slice(s.as_bytes()),
            Text::Hashed(h, n) => {
                sha2::Digest::update(h, s.as_bytes());
                *n += s.len();
            }
        }
    }

    fn push(&mut self, c: char) {
        self.push_str(c.encode_utf8(&mut [0; 4]));
    }

    /// The text kept (what was written is UTF-8: JSON of strings).
    fn into_string(self) -> String {
        match self {
            Text::Kept(v) => String::from_utf8(v)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
            Text::Hashed(..) => String::new(),
        }
    }
}

impl std::io::Write for Text {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Text::Kept(t) => t.extend_from_slice(b),
            Text::Hashed(h, n) => {
                sha2::Digest::update(h, b);
                *n += b.len();
            }
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes a text cell, read a chunk at a time, as a JSON string: what
/// `serde_json` writes for `String::from_utf8_lossy` of its bytes.
fn stream_text(blob: &rusqlite::blob::Blob<'_>, out: &mut Text) -> serde_json::Result<()> {
    let push = |out: &mut Text, s: &str| -> serde_json::Result<()> {
        let q = serde_json::to_string(s)?;
        out.push_str(&q[1..q.len() - 1]);
        Ok(())
    };
    out.push('"');
    let mut buf = vec![0u8; 64 * 1024];
    // Bytes of a character cut by the last chunk's end, at `buf`'s start.
    let mut held = 0;
    let mut at = 0;
    loop {
        let n = blob
            .read_at(&mut buf[held..], at)
            .map_err(<serde_json::Error as serde::ser::Error>::custom)?;
        at += n;
        let (end, last) = (held + n, n == 0);
        let mut pos = 0;
        held = 0;
        while pos < end {
            match std::str::from_utf8(&buf[pos..end]) {
                Ok(t) => {
                    push(out, t)?;
                    pos = end;
                }
                Err(e) => {
                    let ok = pos + e.valid_up_to();
                    push(out, std::str::from_utf8(&buf[pos..ok]).unwrap_or_default())?;
                    match e.error_len() {
                        Some(bad) => {
                            out.push('\u{fffd}');
                            pos = ok + bad;
                        }
                        None if last => {
                            out.push('\u{fffd}');
                            pos = end;
                        }
                        None => {
                            buf.copy_within(ok..end, 0);
                            held = end - ok;
                            pos = end;
                        }
                    }
                }
            }
        }
        if last {
            break;
        }
    }
    out.push('"');
    Ok(())
}

fn sql_error(file: &str, e: rusqlite::Error) -> Error {
    Error::new(
        file,
        "sqlite",
        format!("cannot read opencode's database: {e}"),
    )
}

/// opencode's sessions in a database or storage folder, indexed (an
/// import's first pass: one message with its parts in memory at a time;
/// what is kept is an identity per record and each message's skeleton, in
/// its session's compact [`Skeleton`]).
/// [`Opened::each`] gives each session and reads its messages again one
/// at a time.
#[derive(Debug)]
pub struct Opened {
    name: String,
    src: Src,
    sessions: Vec<Sess>,
    /// Files left for the next import (being written), messages still
    /// being written.
    pub warnings: Vec<String>,
}

/// Indexes an `opencode.db` or a storage folder ([`Opened`]).
pub fn open(path: &Path) -> Result<Opened> {
    let name = path.display().to_string();
    let mut warnings = Vec::new();
    let (src, sessions) = if path.is_dir() {
        let sessions = index_storage(path, &mut warnings)?;
        (Src::Dir(path.to_path_buf()), sessions)
    } else {
        let db = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| sql_error(&name, e))?;
        // Both passes read one snapshot of the database.
        db.execute_batch("BEGIN").map_err(|e| sql_error(&name, e))?;
        let sessions = index_db(&name, &db)?;
        (Src::Db(db, Default::default()), sessions)
    };
    Ok(Opened {
        name,
        src,
        sessions,
        warnings,
    })
}

fn index_db(file: &str, db: &Connection) -> Result<Vec<Sess>> {
    let sql = |e: rusqlite::Error| sql_error(file, e);
    let mut projects: HashMap<String, At> = HashMap::new();
    if let Ok(mut st) = db.prepare("SELECT * FROM project") {
        let names: Vec<String> = st.column_names().map(str::to_owned).collect();
        let mut rows = st.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = row_map(r, &names).map_err(sql)?;
            projects.insert(s(&row, "id").unwrap_or_default(), row_at("project", &row));
        }
    }
    let mut sessions: Vec<Sess> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    {
        let mut st = db.prepare("SELECT * FROM session").map_err(sql)?;
        let names: Vec<String> = st.column_names().map(str::to_owned).collect();
        let mut rows = st.query([]).map_err(sql)?;
        while let Some(r) = rows.next().map_err(sql)? {
            let row = row_map(r, &names).map_err(sql)?;
            let id = s(&row, "id").unwrap_or_default();
            let revert = data_of(&row, "revert");
            let mut meta = Map::new();
            for k in ["project_id", "directory", "version", "slug"] {
                if let Some(v) = row.get(k).filter(|v| !v.is_null()) {
                    meta.insert(k.into(), v.clone());
                }
            }
            let mut recs = vec![row_at("session", &row)];
            if let Some(p) = s(&row, "project_id").and_then(|p| projects.get(&p)) {
                recs.push(p.clone());
            }
            index.insert(id.clone(), sessions.len());
            sessions.push(Sess {
                id,
                parent: s(&row, "parent_id"),
                title: s(&row, "title").filter(|t| !t.is_empty()),
                created: row.get("time_created").and_then(Value::as_i64),
                revert: s(&revert, "messageID"),
                meta,
                recs,
                msgs: Default::default(),
                said: Default::default(),
                titled: false,
            });
        }
    }
    // Messages in (time_created, id) order, each with its parts in id
    // order: two cursors over their ids in the same order, merged, each
    // row then read by its id, so one message is held at a time (sorting
    // whole rows would hold them all in SQLite's sorter).
    let mut mst = db
        .prepare("SELECT id, session_id FROM message ORDER BY time_created, id")
        .map_err(sql)?;
    let mut pst = db
        .prepare(
            "SELECT p.id, p.message_id FROM part AS p JOIN message AS m ON m.id = p.message_id \
             ORDER BY m.time_created, m.id, p.id",
        )
        .map_err(sql)?;
    let mut mrows = mst.query([]).map_err(sql)?;
    let mut prows = pst.query([]).map_err(sql)?;
    let next_part = |prows: &mut rusqlite::Rows<'_>| -> Result<Option<(String, String)>> {
        Ok(match prows.next().map_err(sql)? {
            Some(r) => Some((r.get(1).map_err(sql)?, r.get(0).map_err(sql)?)),
            None => None,
        })
    };
    let mut pending = next_part(&mut prows)?;
    while let Some(r) = mrows.next().map_err(sql)? {
        let id: String = r.get(0).map_err(sql)?;
        let session: Option<String> = r.get(1).map_err(sql)?;
        let mut part_ids = Vec::new();
        while let Some((of, pid)) = pending.take() {
            if of != id {
                pending = Some((of, pid));
                break;
            }
            part_ids.push(pid);
            pending = next_part(&mut prows)?;
        }
        let Some(&si) = session.and_then(|x| index.get(&x)) else {
            continue;
        };
        let Some(rec) = fetch(db, file, "message", &id)? else {
            continue;
        };
        let mut parts = Vec::with_capacity(part_ids.len());
        for pid in part_ids {
            if let Some(rec) = fetch(db, file, "part", &pid)? {
                parts.push(Part { id: pid, rec });
            }
        }
        sessions[si].push(Msg { id, rec, parts });
    }
    Ok(sessions)
}

/// The JSON files of one storage folder, `(path under storage, file)`.
fn json_files(root: &Path, sub: &str, depth: usize) -> Vec<(String, PathBuf)> {
    records::find_files(
        &root.join(sub),
        depth,
        |_, n| !n.starts_with('.'),
        |_, n| n.ends_with(".json"),
    )
    .into_iter()
    .filter_map(|p| {
        let rel = p
            .strip_prefix(root)
            .ok()?
            .to_string_lossy()
            .replace('\\', "/");
        Some((rel, p))
    })
    .collect()
}

/// A file of the storage folder read: its text when `keep_raw` is false
/// it is dropped once parsed. `None` (with a warning) for a file that is
/// not one JSON object (being written).
fn file_rec(
    rel: &str,
    path: &Path,
    parse: bool,
    warnings: &mut Vec<String>,
) -> Result<Option<Rec>> {
    let name = path.display().to_string();
    let io = |e: std::io::Error| Error::new(&name, "io", format!("cannot read the file: {e}"));
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.len() > records::MAX_RECORD {
        return Err(Error::new(
            &name,
            "too-large",
            format!(
                "a record longer than {} MiB; convo reads records of at most that",
                records::MAX_RECORD / (1024 * 1024)
            ),
        ));
    }
    let version = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(crate::open_file(path)?, records::MAX_RECORD),
        &mut bytes,
    )
    .map_err(io)?;
    let raw = String::from_utf8(bytes)
        .map_err(|_| Error::new(&name, "encoding", "the file is not UTF-8"))?;
    let at = At {
        file: rel.into(),
        version,
    };
    if !parse {
        return Ok(Some(Rec {
            at,
            raw,
            value: Map::new(),
        }));
    }
    let value = match crate::json::parse::<Value>(&name, raw.as_bytes()) {
        Ok(Value::Object(o)) => o,
        Ok(_) | Err(_) => {
            warnings.push(format!(
                "{name}: not one JSON object (being written?); left for the next import"
            ));
            return Ok(None);
        }
    };
    Ok(Some(Rec {
        at,
        raw: String::new(),
        value,
    }))
}

fn stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn index_storage(root: &Path, warnings: &mut Vec<String>) -> Result<Vec<Sess>> {
    let mut projects: HashMap<String, At> = HashMap::new();
    for (rel, p) in json_files(root, "project", 1) {
        if let Some(r) = file_rec(&rel, &p, true, warnings)? {
            projects.insert(stem(Path::new(&rel)), r.at);
        }
    }
    let mut sessions: Vec<Sess> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (rel, p) in json_files(root, "session", 2) {
        let Some(rec) = file_rec(&rel, &p, true, warnings)? else {
            continue;
        };
        // Ids come from the paths, as opencode's own migration reads them.
        let id = stem(&p);
        let project = p
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let v = &rec.value;
        let mut meta = Map::new();
        meta.insert("project_id".into(), json!(project));
        for k in ["directory", "version", "slug"] {
            if let Some(x) = v.get(k).filter(|x| !x.is_null()) {
                meta.insert(k.into(), x.clone());
            }
        }
        let mut recs = vec![rec.at.clone()];
        if let Some(pr) = projects.get(&project) {
            recs.push(pr.clone());
        }
        index.insert(id.clone(), sessions.len());
        sessions.push(Sess {
            id,
            parent: s(v, "parentID"),
            title: s(v, "title").filter(|t| !t.is_empty()),
            created: v
                .get("time")
                .and_then(|t| t.get("created"))
                .and_then(Value::as_i64),
            revert: v
                .get("revert")
                .and_then(|r| r.get("messageID"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            meta,
            recs,
            msgs: Default::default(),
            said: Default::default(),
            titled: false,
        });
    }
    // Messages (small: their parts are files of their own) first, to
    // order them; then each with its parts, one at a time.
    let mut infos: Vec<(usize, i64, String, Rec)> = Vec::new();
    for (rel, p) in json_files(root, "message", 2) {
        let ses = p
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(&si) = index.get(&ses) else { continue };
        let Some(rec) = file_rec(&rel, &p, true, warnings)? else {
            continue;
        };
        let created = rec
            .value
            .get("time")
            .and_then(|t| t.get("created"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        infos.push((si, created, stem(&p), rec));
    }
    infos.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
    for (si, _, id, rec) in infos {
        let mut parts = Vec::new();
        for (rel, p) in json_files(root, &format!("part/{id}"), 1) {
            if let Some(rec) = file_rec(&rel, &p, true, warnings)? {
                parts.push(Part { id: stem(&p), rec });
            }
        }
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        let msg = Msg { id, rec, parts };
        sessions[si].push(msg);
    }
    Ok(sessions)
}

/// The texts of a user message's `text` parts (the `synthetic` or
/// `ignored` ones, or the others), moved out of them.
fn take_texts(parts: &mut [Part], synthetic: bool) -> String {
    let mut got: Vec<String> = parts
        .iter_mut()
        .map(|p| &mut p.rec.value)
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("text"))
        .filter(|v| {
            (v.get("synthetic").and_then(Value::as_bool) == Some(true)
                || v.get("ignored").and_then(Value::as_bool) == Some(true))
                == synthetic
        })
        .filter_map(|v| match v.get_mut("text") {
            Some(Value::String(t)) => Some(std::mem::take(t)),
            _ => None,
        })
        .collect();
    if got.len() == 1 {
        got.pop().unwrap_or_default()
    } else {
        got.join("\n\n")
    }
}

/// A string field of a part, moved out of it.
fn take_str(v: &mut Map<String, Value>, k: &str) -> Option<String> {
    match v.get_mut(k) {
        Some(Value::String(t)) => Some(std::mem::take(t)),
        _ => None,
    }
}

/// The messages one opencode message says, its texts moved out of its
/// parts (a long text is not copied).
fn messages_of(m: &mut Msg) -> Vec<Message> {
    let info = &m.rec.value;
    let time = info
        .get("time")
        .and_then(|t| t.get("created"))
        .and_then(Value::as_i64);
    match info.get("role").and_then(Value::as_str) {
        Some("user") => vec![user_message(m, time)],
        Some("assistant") => answer_messages(m, time),
        _ => Vec::new(),
    }
}

/// A string field of a part, copied.
fn part_str(p: &Part, k: &str) -> Option<String> {
    p.rec
        .value
        .get(k)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A user message: its text parts (else a subtask's prompt, a
/// compaction's question, a file's name, the synthetic texts).
fn user_message(m: &mut Msg, time: Option<i64>) -> Message {
    let mut text = take_texts(&mut m.parts, false);
    let mut extra = Map::new();
    for p in &m.parts {
        match part_str(p, "type").as_deref() {
            Some("subtask") if text.is_empty() => {
                text = part_str(p, "prompt").unwrap_or_default();
                extra.insert("subtask".into(), json!(part_str(p, "agent")));
            }
            Some("compaction") if text.is_empty() => {
                text = "What did we do so far?".into();
                extra.insert("compaction".into(), json!(true));
            }
            Some("file") => {
                let name = part_str(p, "filename")
                    .or_else(|| part_str(p, "url"))
                    .unwrap_or_default();
                if text.is_empty() {
                    text = format!("[file {name}]");
                }
            }
            _ => {}
        }
    }
    if text.is_empty() {
        text = take_texts(&mut m.parts, true);
    }
    let mut msg = Message::new(Role::User, "user", text).at(time);
    msg.extra = extra;
    if let Some(a) = m.rec.value.get("agent").filter(|a| !a.is_null()) {
        msg.extra.insert("agent".into(), a.clone());
    }
    msg.key = Some(m.id.clone());
    msg
}

/// An assistant message's messages: one per text part and per tool call
/// and result (reasoning kept on the next), else its error; the first
/// with its usage, cost and finish.
fn answer_messages(m: &mut Msg, time: Option<i64>) -> Vec<Message> {
    let info = &m.rec.value;
    let model = info
        .get("modelID")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut out = Vec::new();
    let mut reasoning = String::new();
    for p in &mut m.parts {
        let key = if out.is_empty() {
            m.id.clone()
        } else {
            format!("{}#{}", m.id, p.id)
        };
        let ptype = part_str(p, "type");
        let v = &mut p.rec.value;
        let ptime = v
            .get("time")
            .and_then(|t| t.get("start"))
            .and_then(Value::as_i64)
            .or(time);
        match ptype.as_deref() {
            Some("reasoning") => {
                if let Some(t) = take_str(v, "text") {
                    reasoning.push_str(&t);
                }
            }
            Some("text") => {
                let t = take_str(v, "text").unwrap_or_default();
                if t.trim().is_empty() {
                    continue;
                }
                let mut msg = Message::new(Role::Assistant, "opencode", t)
                    .with_model(model.clone())
                    .at(ptime);
                keep_reasoning(&mut msg, &mut reasoning);
                msg.key = Some(key);
                out.push(msg);
            }
            Some("tool") => {
                let said = Said {
                    model: &model,
                    time,
                    key,
                    msg_id: &m.id,
                    part_id: &p.id,
                };
                tool_messages(v, said, &mut reasoning, &mut out);
            }
            _ => {}
        }
    }
    if out.is_empty()
        && let Some(e) = info.get("error").filter(|e| !e.is_null())
    {
        out.push(error_message(e, &model, time, &m.id));
    }
    if let Some(first) = out.first_mut() {
        for k in ["tokens", "cost", "finish", "providerID", "agent"] {
            if let Some(v) = info.get(k).filter(|v| !v.is_null()) {
                let name = if k == "tokens" { "usage" } else { k };
                first.extra.insert(name.into(), v.clone());
            }
        }
    }
    out
}

/// The reasoning read before a message (taken), kept beside it.
fn keep_reasoning(m: &mut Message, reasoning: &mut String) {
    if !reasoning.is_empty() {
        m.extra
            .insert("reasoning".into(), json!(std::mem::take(reasoning)));
    }
}

/// An assistant message that failed before it said anything: its error
/// `e` (`[name] message`, the error kept).
fn error_message(e: &Value, model: &Option<String>, time: Option<i64>, id: &str) -> Message {
    let name = e.get("name").and_then(Value::as_str).unwrap_or("error");
    let said = e
        .get("data")
        .and_then(|d| d.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut msg = Message::new(Role::Assistant, "opencode", format!("[{name}] {said}"))
        .with_model(model.clone())
        .at(time)
        .with_extra("error", e.clone());
    msg.key = Some(id.to_owned());
    msg
}

/// What a tool part's messages get from their message: its model and
/// time, the call's key, the ids the result's key is made of.
struct Said<'x> {
    model: &'x Option<String>,
    time: Option<i64>,
    key: String,
    msg_id: &'x str,
    part_id: &'x str,
}

/// A tool part's call (with the `reasoning` before it, taken) and, once
/// it completed or failed, its result; its state moved out of the part.
fn tool_messages(
    v: &mut Map<String, Value>,
    said: Said,
    reasoning: &mut String,
    out: &mut Vec<Message>,
) {
    let time = said.time;
    let tool = s(v, "tool").unwrap_or_else(|| "tool".into());
    let call_id = s(v, "callID").unwrap_or_default();
    let state = v.remove("state").unwrap_or(Value::Null);
    let st = |k: &str| state.get(k);
    let input = st("input").cloned().unwrap_or(Value::Null);
    let stime = st("time")
        .and_then(|t| t.get("start"))
        .and_then(Value::as_i64);
    let mut call = Message::new(
        Role::ToolCall,
        "opencode",
        records::tool_call_text(&tool, &input),
    )
    .with_model(said.model.clone())
    .with_extra("call_id", json!(call_id))
    .at(stime.or(time));
    call.to = Some(tool.clone());
    if let Some(sid) = st("metadata")
        .and_then(|x| x.get("sessionId"))
        .filter(|x| x.is_string())
    {
        call.extra.insert("session".into(), sid.clone());
    }
    keep_reasoning(&mut call, reasoning);
    call.key = Some(said.key);
    out.push(call);
    let status = st("status").and_then(Value::as_str).unwrap_or("");
    let result = match status {
        "completed" => st("output").map(|o| match o {
            Value::String(t) => t.clone(),
            other => other.to_string(),
        }),
        "error" => st("error").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    };
    if let Some(text) = result {
        let mut r = Message::new(Role::Tool, tool, text)
            .with_extra("call_id", json!(call_id))
            .with_extra("status", json!(status))
            .at(st("time")
                .and_then(|t| t.get("end"))
                .and_then(Value::as_i64)
                .or(time));
        r.key = Some(format!("{}#{}:result", said.msg_id, said.part_id));
        out.push(r);
    }
}

/// Whether an assistant message is still being written.
fn in_progress(m: &Msg) -> bool {
    let v = &m.rec.value;
    v.get("role").and_then(Value::as_str) == Some("assistant")
        && v.get("time")
            .and_then(|t| t.get("completed"))
            .is_none_or(Value::is_null)
        && v.get("error").is_none_or(Value::is_null)
}

struct Builder<'a> {
    file: &'a str,
    children: &'a HashMap<&'a str, Vec<&'a Sess>>,
    messages: Skeleton,
    /// Per message: whether it belongs to a child session.
    in_child: Vec<bool>,
    /// Per message: the opencode message it says (an index into `owners`).
    own: Vec<Option<usize>>,
    /// Every record's identity, once, in the order the messages carry them.
    recs: Vec<At>,
    /// Per message: the records it carries (a span of `recs`).
    carried: Vec<(u32, u32)>,
    /// The opencode messages said: each one's span of `recs` (the message,
    /// then its parts).
    owners: Vec<(u32, u32)>,
    /// The title of the first user message.
    title: Option<Option<String>>,
    warnings: Vec<String>,
}

impl<'a> Builder<'a> {
    /// Adds a session's messages after `anchor`; returns where the live
    /// conversation ends (before a pending revert).
    fn add(
        &mut self,
        s: &'a Sess,
        anchor: Option<usize>,
        child: bool,
        depth: usize,
    ) -> Option<usize> {
        let mut prev = anchor;
        let mut live = None;
        // The records not carried yet: `recs[carry..]`.
        let mut carry = self.recs.len() as u32;
        self.recs.extend(s.recs.iter().cloned());
        let mut tasks: HashMap<String, usize> = HashMap::new();
        // (message index, created) of this session's messages, for a child
        // whose task call is gone.
        let mut times: Vec<(usize, i64)> = Vec::new();
        let said = s.said.take();
        for m in s.msgs.take() {
            if m.pending {
                self.warnings.push(format!(
                    "{}: message {} of session {} is still being written; left for the next import",
                    self.file,
                    m.at.id(),
                    s.id
                ));
                continue;
            }
            if live.is_none() && s.revert.as_deref() == Some(m.at.id().as_str()) {
                live = Some(prev);
            }
            let start = self.recs.len() as u32;
            self.recs.push(m.at);
            self.recs.extend(m.parts);
            let end = self.recs.len() as u32;
            if m.count == 0 {
                continue;
            }
            let owner = self.owners.len();
            self.owners.push((start, end));
            for k in 0..m.count as usize {
                let mut msg = said.message(m.first as usize + k);
                msg.parent = prev;
                self.carried.push((carry, end));
                if k == 0 {
                    carry = end;
                }
                if let Some(Value::String(sid)) = msg.extra.get("session") {
                    tasks.insert(sid.clone(), self.messages.len());
                }
                if let Some(t) = msg.time {
                    times.push((self.messages.len(), t));
                }
                if msg.role == Role::User && self.title.is_none() {
                    self.title = Some(m.title.clone());
                }
                self.messages.push(&msg);
                self.own.push(Some(owner));
                self.in_child.push(child);
                prev = Some(self.messages.len() - 1);
            }
        }
        let end = self.recs.len() as u32;
        if carry < end {
            match prev.filter(|p| Some(*p) != anchor) {
                // Its span ends where the records not carried start.
                Some(last) => self.carried[last].1 = end,
                None => {
                    let mut m = Message::new(Role::System, "opencode", "");
                    m.time = s.created;
                    m.parent = anchor;
                    m.key = Some(format!("{}#records", s.id));
                    m.extra.insert("holder".into(), json!(true));
                    self.messages.push(&m);
                    self.own.push(None);
                    self.carried.push((carry, end));
                    self.in_child.push(child);
                    prev = Some(self.messages.len() - 1);
                }
            }
        }
        if depth < 16 {
            let kids = self
                .children
                .get(s.id.as_str())
                .cloned()
                .unwrap_or_default();
            for k in kids {
                let at = tasks.get(&k.id).copied().or_else(|| {
                    let t = k.created?;
                    times.iter().rev().find(|(_, c)| *c <= t).map(|(i, _)| *i)
                });
                self.add(k, at.or(anchor), true, depth + 1);
            }
        }
        live.unwrap_or(prev)
    }
}

impl Opened {
    /// Each session (a root session with its subagents' child sessions as
    /// timelines) in turn: its skeleton (every message's parent, role,
    /// speaker, key, time; no text, no records) and the [`Rows`] that
    /// read its messages again one at a time. Stops at the first error of
    /// `f`. Once: the index is moved into the skeletons as they are built.
    pub fn each<E>(
        &mut self,
        mut f: impl FnMut(&Conversation, &mut Rows<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let all: HashMap<&str, &Sess> = self.sessions.iter().map(|s| (s.id.as_str(), s)).collect();
        let mut children: HashMap<&str, Vec<&Sess>> = HashMap::new();
        for s in &self.sessions {
            if let Some(p) = s.parent.as_deref().filter(|p| all.contains_key(p)) {
                children.entry(p).or_default().push(s);
            }
        }
        for v in children.values_mut() {
            v.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        }
        for s in &self.sessions {
            if s.parent.as_deref().is_some_and(|p| all.contains_key(p)) {
                continue;
            }
            let mut b = Builder {
                file: &self.name,
                children: &children,
                messages: Skeleton::default(),
                in_child: Vec::new(),
                own: Vec::new(),
                recs: Vec::new(),
                carried: Vec::new(),
                owners: Vec::new(),
                title: None,
                warnings: Vec::new(),
            };
            let live = b.add(s, None, false, 0);
            self.warnings.append(&mut b.warnings);
            let Builder {
                mut messages,
                in_child,
                own,
                mut recs,
                carried,
                owners,
                title: first_title,
                ..
            } = b;
            recs.shrink_to_fit();
            if messages.is_empty() {
                continue;
            }
            messages.shrink_to_fit();
            messages.mark_intermediate();
            let timelines = messages.timelines(live, |i| in_child[i]);
            let rows = Rows {
                name: &self.name,
                src: &self.src,
                recs,
                owners,
                own,
                carried,
                cache: None,
                failed: None,
                defer: true,
                deferred: Vec::new(),
                tree: None,
            };
            let title = s.title.clone().or(first_title.flatten());
            let mut meta = s.meta.clone();
            meta.insert("sessionID".into(), json!(s.id));
            let conv = Conversation {
                id: Some(s.id.clone()),
                title,
                agent: Some("opencode".into()),
                created_at: s
                    .created
                    .or_else(|| (0..messages.len()).find_map(|i| messages.time(i))),
                meta,
                timelines,
                messages: Vec::new(),
            };
            let mut rows = rows;
            rows.tree = Some(messages);
            f(&conv, &mut rows)?;
        }
        Ok(())
    }
}

/// Reads the messages of one opencode session again, one at a time, for
/// an import's second pass ([`crate::loader::Loader`]): the messages of
/// the opencode message last read are kept until the next is needed.
#[derive(Debug)]
pub struct Rows<'a> {
    name: &'a str,
    src: &'a Src,
    /// Every record's identity, once; `owners` and `carried` are spans of it.
    recs: Vec<At>,
    /// Per opencode message: the span of the message and its parts.
    owners: Vec<(u32, u32)>,
    own: Vec<Option<usize>>,
    /// Per message: the span of the records it carries.
    carried: Vec<(u32, u32)>,
    cache: Option<(usize, Vec<Message>)>,
    /// The error of the last load that failed (a row changed meanwhile),
    /// kept whole: the store sees only its message.
    pub failed: Option<Error>,
    /// Whether a huge row is stored after its node (named by hash in
    /// `extra.records`, see [`Src::record`]); off for a load whose records
    /// are changed after (`--redact-secrets`).
    pub defer: bool,
    /// The rows left to store so.
    deferred: Vec<At>,
    /// The session's skeleton (the conversation's `messages` are left
    /// empty), lent to the ledger ([`crate::loader::Loader::take_tree`]).
    tree: Option<Skeleton>,
}

impl Rows<'_> {
    /// Message `i` whole: its skeleton filled from its opencode message,
    /// with its records in `extra.records`.
    pub fn message(&mut self, i: usize, skeleton: &Message) -> Result<Message> {
        let mut m = skeleton.clone();
        if let Some(o) = self.own[i] {
            if self.cache.as_ref().map(|c| c.0) != Some(o) {
                self.cache = None;
                let (a, b) = self.owners[o];
                let (at, parts) = (
                    &self.recs[a as usize],
                    &self.recs[a as usize + 1..b as usize],
                );
                let rec = self.src.read(self.name, at, false)?;
                let mut ps = Vec::with_capacity(parts.len());
                for p in parts {
                    ps.push(Part {
                        id: p.id(),
                        rec: self.src.read(self.name, p, false)?,
                    });
                }
                let mut msg = Msg {
                    id: at.id(),
                    rec,
                    parts: ps,
                };
                self.cache = Some((o, messages_of(&mut msg)));
            }
            if let Some((_, said)) = &mut self.cache
                && let Some(got) = said.iter_mut().find(|x| x.key == m.key)
            {
                m.text = std::mem::take(&mut got.text);
                m.model.clone_from(&got.model);
                m.extra.extend(std::mem::take(&mut got.extra));
            }
        }
        let (a, b) = self.carried[i];
        let mut recs = Vec::with_capacity((b - a) as usize);
        for at in &self.recs[a as usize..b as usize] {
            let (rec, deferred) = self.src.record(self.name, at, self.defer)?;
            if deferred {
                self.deferred.push(at.clone());
            }
            recs.push(rec);
        }
        m.extra.insert("records".into(), Value::Array(recs));
        Ok(m)
    }
}

impl crate::loader::Loader for Rows<'_> {
    fn load(&mut self, i: usize, skeleton: &Message) -> Result<Message> {
        self.message(i, skeleton)
            .map_err(|e| crate::records::failed_load(&mut self.failed, e))
    }

    fn take_tree(&mut self) -> Option<Skeleton> {
        self.tree.take()
    }

    fn put_tree(&mut self, tree: Skeleton) {
        self.tree = Some(tree);
    }

    fn record_ids(&self, i: usize) -> Vec<(String, u64)> {
        let (a, b) = self.carried[i];
        self.recs[a as usize..b as usize]
            .iter()
            .map(|at| (at.file.to_string(), at.version))
            .collect()
    }

    fn next_deferred(&mut self) -> Option<Result<String>> {
        if self.deferred.is_empty() {
            return None;
        }
        let at = self.deferred.remove(0);
        Some(
            self.src
                .read(self.name, &at, true)
                .map(|rec| rec.raw)
                .map_err(|e| crate::records::failed_load(&mut self.failed, e)),
        )
    }
}

/// Quotes a JSON value as an SQL literal.
fn sql_literal(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Bool(b) => if *b { "1" } else { "0" }.into(),
        Value::Number(n) => n.to_string(),
        Value::String(t) => format!("'{}'", t.replace('\'', "''")),
        other => format!("'{}'", other.to_string().replace('\'', "''")),
    }
}

/// A JSON value as the SQLite value [`sql_literal`] writes.
fn sql_value(v: &Value) -> Sql {
    match v {
        Value::Null => Sql::Null,
        Value::Bool(b) => Sql::Integer(i64::from(*b)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Sql::Integer(i),
            None => Sql::Real(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(t) => Sql::Text(t.clone()),
        other => Sql::Text(other.to_string()),
    }
}

/// The tables opencode's rows go into, in the order their foreign keys
/// need.
const TABLES: [&str; 4] = ["project", "session", "message", "part"];

/// Rows to write into opencode's database, each `(table, columns)`, in
/// the order the foreign keys need: what [`sql_script`] and [`Fork`]
/// write, as an SQL script ([`Rows::script`]) or into a database
/// ([`Rows::apply`]).
#[derive(Debug, Default)]
pub struct RowSet(Vec<(&'static str, Map<String, Value>)>);

impl RowSet {
    /// The rows as an SQL script: `INSERT OR IGNORE`s in one transaction.
    pub fn script(&self) -> Vec<u8> {
        let mut out = String::from("BEGIN;\n");
        for (table, row) in &self.0 {
            let cols: Vec<String> = row
                .keys()
                .map(|k| format!("\"{}\"", k.replace('"', "\"\"")))
                .collect();
            let vals: Vec<String> = row.values().map(sql_literal).collect();
            out.push_str(&format!(
                "INSERT OR IGNORE INTO \"{table}\" ({}) VALUES ({});\n",
                cols.join(", "),
                vals.join(", ")
            ));
        }
        out.push_str("COMMIT;\n");
        out.into_bytes()
    }

    /// Writes the rows into the opencode database at `path` (which must
    /// exist: opencode made it), all or nothing: one immediate
    /// transaction, waiting up to 10 s for opencode's own writes, foreign
    /// keys checked. Refused, nothing written, when the database's tables
    /// are not what this reader knows (a column a row has is missing, or a
    /// required column is one no row gives).
    pub fn apply(&self, path: &Path) -> Result<()> {
        let name = path.display().to_string();
        let sql = |e: rusqlite::Error| {
            Error::new(
                &name,
                "sqlite",
                format!("cannot write opencode's database: {e}"),
            )
        };
        if !path.is_file() {
            return Err(Error::new(
                &name,
                "not-found",
                "no opencode database here (run opencode once, or set XDG_DATA_HOME)",
            ));
        }
        let mut db = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        db.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sql)?;
        db.execute_batch("PRAGMA foreign_keys = ON").map_err(sql)?;
        let tx = db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        self.check_schema(&tx, &name)?;
        for (table, row) in &self.0 {
            let cols: Vec<String> = row
                .keys()
                .map(|k| format!("\"{}\"", k.replace('"', "\"\"")))
                .collect();
            let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
            let mut st = tx
                .prepare_cached(&format!(
                    "INSERT OR IGNORE INTO \"{table}\" ({}) VALUES ({})",
                    cols.join(", "),
                    marks.join(", ")
                ))
                .map_err(sql)?;
            let vals: Vec<Sql> = row.values().map(sql_value).collect();
            st.execute(rusqlite::params_from_iter(vals)).map_err(sql)?;
        }
        tx.commit().map_err(sql)
    }

    /// Refuses a database whose tables this reader does not know.
    fn check_schema(&self, db: &Connection, name: &str) -> Result<()> {
        let refuse = |why: String| {
            Error::new(
                name,
                "schema",
                format!(
                    "opencode's database is not laid out as this convo knows it (opencode 1.2 to 1.18): {why}; nothing was written"
                ),
            )
        };
        let mut known: HashMap<&str, Vec<(String, bool)>> = HashMap::new();
        for table in TABLES {
            let mut st = db
                .prepare(&format!("PRAGMA table_info(\"{table}\")"))
                .map_err(|e| refuse(e.to_string()))?;
            // (name, required: NOT NULL without a default, not the key)
            let cols = st
                .query_map([], |r| {
                    let name: String = r.get(1)?;
                    let notnull: bool = r.get(3)?;
                    let default: Option<String> = r.get(4)?;
                    let pk: i64 = r.get(5)?;
                    Ok((name, notnull && default.is_none() && pk == 0))
                })
                .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                .map_err(|e| refuse(e.to_string()))?;
            known.insert(table, cols);
        }
        for (table, want) in [
            (
                "session",
                &["id", "project_id", "title", "time_created"][..],
            ),
            ("message", &["id", "session_id", "time_created", "data"]),
            ("part", &["id", "message_id", "session_id", "data"]),
        ] {
            for c in want {
                if !known[table].iter().any(|(n, _)| n == c) {
                    return Err(refuse(format!("table {table} has no column {c}")));
                }
            }
        }
        for (table, row) in &self.0 {
            let cols = &known[table];
            if let Some(k) = row.keys().find(|k| !cols.iter().any(|(n, _)| n == *k)) {
                return Err(refuse(format!("table {table} has no column {k}")));
            }
            if let Some((n, _)) = cols.iter().find(|(n, req)| *req && !row.contains_key(n)) {
                return Err(refuse(format!(
                    "table {table} requires a column {n} the stored rows do not have"
                )));
            }
        }
        Ok(())
    }
}

/// The last version of each stored row (`table/id`), by file: the
/// records of `convo_llm::ledger::session_records` (ordered by file and
/// line), JSON-storage files left out.
fn latest_rows(records: &[(String, u64, String)]) -> HashMap<&str, &str> {
    let mut out = HashMap::new();
    for (file, _, raw) in records {
        if !file.ends_with(".json") && file.split_once('/').is_some() {
            out.insert(file.as_str(), raw.as_str());
        }
    }
    out
}

fn row_of(file: &str, raw: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(row)) => Ok(row),
        _ => Err(Error::new(
            file,
            "shape",
            "a stored row is not a JSON object",
        )),
    }
}

/// What an export of an imported opencode session writes: the rows of its
/// database as SQL (`INSERT OR IGNORE`, the last version of each row, in
/// the order the foreign keys need: project, session, message, part), to
/// be run against opencode's database (`sqlite3 opencode.db < s.sql`)
/// to put back what is missing. `records` are `(file, line, raw)` as
/// `convo_llm::ledger::session_records` gives them; rows only (a session
/// imported from the JSON storage is written with [`storage_files`]).
pub fn sql_script(records: &[(String, u64, String)]) -> Result<Vec<u8>> {
    let latest = latest_rows(records);
    let mut rows = RowSet::default();
    for table in TABLES {
        let prefix = format!("{table}/");
        let mut files: Vec<&&str> = latest.keys().filter(|f| f.starts_with(&prefix)).collect();
        files.sort();
        for f in files {
            rows.0.push((table, row_of(f, latest[*f])?));
        }
    }
    Ok(rows.script())
}

/// opencode's ids: a prefix, 12 hex digits of `time × 4096 + counter`
/// (its low 48 bits; inverted for a session, whose ids sort newest
/// first), 14 base-62 characters, as opencode's `Identifier.create`
/// makes them. Minted from one clock reading, each id one more than the
/// last (ascending, like opencode's ids minted in one millisecond), their
/// random part derived from `seed`.
struct Ids {
    next: u64,
    seed: String,
    n: u64,
}

impl Ids {
    fn new(now: i64, seed: &str) -> Self {
        Ids {
            next: (now.max(0) as u64).wrapping_mul(0x1000),
            seed: seed.to_owned(),
            n: 0,
        }
    }

    fn mint(&mut self, prefix: &str, descending: bool) -> String {
        const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        self.next += 1;
        self.n += 1;
        let v = if descending { !self.next } else { self.next } & 0xffff_ffff_ffff;
        let h = convo_core::sha256(format!("{}:{}", self.seed, self.n).as_bytes());
        let tail: String = h.0[..14]
            .iter()
            .map(|b| BASE62[usize::from(*b) % 62] as char)
            .collect();
        format!("{prefix}_{v:012x}{tail}")
    }
}

/// A new opencode session made from a branch ([`fork`]): its id (for
/// `opencode run --session ID`) and its rows.
#[derive(Debug)]
pub struct Fork {
    pub id: String,
    pub rows: RowSet,
}

/// A branch as a new opencode session, the way opencode's own fork
/// copies one: a new session row (the stored one's, under a new id,
/// titled `… (fork: BRANCH)`, no revert, no parent), then the last
/// version of each `message` and `part` row the branch carries, in its
/// order (`files`: the record files of its messages up to its last
/// imported one), under new ids (an assistant message's `parentID`
/// following its user message), then `turns` (made in convo after the
/// fork: `(role, text, time)`) as user and assistant messages with one
/// text part each, with the agent, model and path of the last ones
/// copied. Ids minted at `now` ([`Ids`]), so opencode's next message
/// sorts after them. Rows of the JSON storage are refused: opencode 1.2
/// and later read the database only.
pub fn fork(
    records: &[(String, u64, String)],
    files: &[String],
    branch: &str,
    turns: &[(Role, String, i64)],
    now: i64,
    seed: &str,
) -> Result<Fork> {
    if files.iter().any(|f| f.ends_with(".json")) {
        return Err(Error::new(
            "export",
            "unsupported",
            "this session was imported from opencode's JSON storage (opencode 1.1 or older): its branches are not written as new sessions",
        ));
    }
    let mut ids = Ids::new(now, seed);
    let id = ids.mint("ses", true);
    let mut copy = ForkRows::copy(records, files, &mut ids, &id)?;
    let Some(mut ses) = copy.session.take() else {
        return Err(Error::new(
            "export",
            "not-found",
            "no opencode session row is stored for this branch",
        ));
    };
    fork_session_row(&mut ses, &id, branch, now);
    let mut like = TurnShape::of(&copy.messages, &ses);
    for turn in turns {
        copy.add_turn(turn, &mut like, &ses, &mut ids, &id);
    }
    let mut rows = RowSet::default();
    if let Some(p) = copy.project {
        rows.0.push(("project", p));
    }
    rows.0.push(("session", ses));
    rows.0
        .extend(copy.messages.into_iter().map(|m| ("message", m)));
    rows.0.extend(copy.parts.into_iter().map(|p| ("part", p)));
    Ok(Fork { id, rows })
}

/// The rows of a fork ([`fork`]) being made.
struct ForkRows {
    project: Option<Map<String, Value>>,
    session: Option<Map<String, Value>>,
    messages: Vec<Map<String, Value>>,
    parts: Vec<Map<String, Value>>,
}

impl ForkRows {
    /// The last version of each row of `files` (once each, in order): the
    /// first project and session rows, and the message and part rows
    /// under new ids (from `ids`) in the new session `id`, an assistant
    /// message's `parentID` following its user message. A part of a
    /// message not copied is left out.
    fn copy(
        records: &[(String, u64, String)],
        files: &[String],
        ids: &mut Ids,
        id: &str,
    ) -> Result<ForkRows> {
        let latest = latest_rows(records);
        let mut seen = std::collections::HashSet::new();
        let mut out = ForkRows {
            project: None,
            session: None,
            messages: Vec::new(),
            parts: Vec::new(),
        };
        // opencode's message id → the new one.
        let mut renamed: HashMap<String, String> = HashMap::new();
        for f in files {
            if !seen.insert(f.as_str()) {
                continue;
            }
            let Some(raw) = latest.get(f.as_str()) else {
                continue;
            };
            let mut row = row_of(f, raw)?;
            match f.split_once('/').map(|x| x.0) {
                Some("project") if out.project.is_none() => out.project = Some(row),
                Some("session") if out.session.is_none() => out.session = Some(row),
                Some("message") => {
                    let new = ids.mint("msg", false);
                    if let Some(old) = s(&row, "id") {
                        renamed.insert(old, new.clone());
                    }
                    let mut data = data_of(&row, "data");
                    if let Some(p) = s(&data, "parentID").and_then(|p| renamed.get(&p)) {
                        data.insert("parentID".into(), json!(p));
                        row.insert("data".into(), json!(Value::Object(data).to_string()));
                    }
                    row.insert("id".into(), json!(new));
                    row.insert("session_id".into(), json!(id));
                    out.messages.push(row);
                }
                Some("part") => {
                    let Some(m) = s(&row, "message_id").and_then(|m| renamed.get(&m)).cloned()
                    else {
                        continue;
                    };
                    row.insert("id".into(), json!(ids.mint("prt", false)));
                    row.insert("message_id".into(), json!(m));
                    row.insert("session_id".into(), json!(id));
                    out.parts.push(row);
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Adds one turn made in convo (`(role, text, time)`) after the rows
    /// copied: a message shaped `like` the last ones copied and its text
    /// part, at its time or just after the last message's.
    fn add_turn(
        &mut self,
        (role, text, time): &(Role, String, i64),
        like: &mut TurnShape,
        ses: &Map<String, Value>,
        ids: &mut Ids,
        id: &str,
    ) {
        let t = (*time).max(like.last_time + 1);
        like.last_time = t;
        let mid = ids.mint("msg", false);
        let data = if *role == Role::User {
            like.last_user = Some(mid.clone());
            json!({"role": "user", "time": {"created": t}, "agent": like.agent, "model": like.model})
        } else {
            like.answer(ses, t)
        };
        let mut part = json!({"type": "text", "text": text});
        if *role != Role::User {
            part["time"] = json!({"start": t, "end": t});
        }
        let mut m = Map::new();
        m.insert("id".into(), json!(mid));
        m.insert("session_id".into(), json!(id));
        m.insert("time_created".into(), json!(t));
        m.insert("time_updated".into(), json!(t));
        m.insert("data".into(), json!(data.to_string()));
        self.messages.push(m);
        let mut p = Map::new();
        p.insert("id".into(), json!(ids.mint("prt", false)));
        p.insert("message_id".into(), json!(mid));
        p.insert("session_id".into(), json!(id));
        p.insert("time_created".into(), json!(t));
        p.insert("time_updated".into(), json!(t));
        p.insert("data".into(), json!(part.to_string()));
        self.parts.push(p);
    }
}

/// Makes the stored session row the fork's: under its new `id`, titled
/// `… (fork: BRANCH)`, no revert, no parent, created and updated `now`.
fn fork_session_row(ses: &mut Map<String, Value>, id: &str, branch: &str, now: i64) {
    let title = s(ses, "title").filter(|t| !t.is_empty());
    ses.insert("id".into(), json!(id));
    ses.insert(
        "title".into(),
        json!(match title {
            Some(t) => format!("{t} (fork: {branch})"),
            None => format!("fork: {branch}"),
        }),
    );
    for k in [
        "parent_id",
        "revert",
        "share_url",
        "time_compacting",
        "time_archived",
    ] {
        if ses.contains_key(k) {
            ses.insert(k.into(), Value::Null);
        }
    }
    for k in ["time_created", "time_updated"] {
        ses.insert(k.into(), json!(now));
    }
}

/// How the turns made in convo are shaped ([`ForkRows::add_turn`]): like
/// the last user and assistant messages copied, with their agent and
/// model; each after the last message and answering the last user one.
struct TurnShape {
    answer_like: Option<Map<String, Value>>,
    model: Option<Value>,
    agent: Value,
    last_time: i64,
    last_user: Option<String>,
}

impl TurnShape {
    fn of(messages: &[Map<String, Value>], ses: &Map<String, Value>) -> TurnShape {
        let last_of = |role: &str| {
            messages
                .iter()
                .rev()
                .map(|m| data_of(m, "data"))
                .find(|d| d.get("role").and_then(Value::as_str) == Some(role))
        };
        let user_like = last_of("user");
        let answer_like = last_of("assistant");
        let model = user_like
            .as_ref()
            .and_then(|u| u.get("model").cloned())
            .or_else(|| {
                let a = answer_like.as_ref()?;
                Some(json!({"providerID": a.get("providerID")?, "modelID": a.get("modelID")?}))
            })
            .or_else(|| match ses.get("model") {
                Some(Value::String(t)) => serde_json::from_str::<Value>(t)
                    .ok()
                    .map(|m| json!({"providerID": m.get("providerID"), "modelID": m.get("id")})),
                _ => None,
            });
        let agent = user_like
            .as_ref()
            .and_then(|u| u.get("agent").cloned())
            .or_else(|| ses.get("agent").cloned().filter(|a| a.is_string()))
            .unwrap_or(json!("build"));
        let last_time = messages
            .iter()
            .filter_map(|m| m.get("time_created").and_then(Value::as_i64))
            .max()
            .unwrap_or(0);
        let last_user = messages
            .iter()
            .rev()
            .find(|m| data_of(m, "data").get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|m| s(m, "id"));
        TurnShape {
            answer_like,
            model,
            agent,
            last_time,
            last_user,
        }
    }

    /// The data of an answer made in convo at `t`.
    fn answer(&self, ses: &Map<String, Value>, t: i64) -> Value {
        let mut d = self.answer_like.clone().unwrap_or_default();
        for k in ["error", "summary", "structured"] {
            d.remove(k);
        }
        if let Some(m) = self.model.as_ref().filter(|_| self.answer_like.is_none()) {
            d.insert(
                "modelID".into(),
                m.get("modelID").cloned().unwrap_or(Value::Null),
            );
            d.insert(
                "providerID".into(),
                m.get("providerID").cloned().unwrap_or(Value::Null),
            );
            d.insert("mode".into(), self.agent.clone());
            d.insert("agent".into(), self.agent.clone());
            if let Some(dir) = ses.get("directory") {
                d.insert("path".into(), json!({"cwd": dir, "root": dir}));
            }
        }
        d.insert("role".into(), json!("assistant"));
        d.insert("parentID".into(), json!(self.last_user));
        d.insert("cost".into(), json!(0));
        d.insert(
            "tokens".into(),
            json!({"total": 0, "input": 0, "output": 0, "reasoning": 0, "cache": {"write": 0, "read": 0}}),
        );
        d.insert("time".into(), json!({"created": t, "completed": t}));
        d.insert("finish".into(), json!("stop"));
        Value::Object(d)
    }
}

/// The files of an opencode session imported from the JSON storage, each
/// `(path under storage/, bytes)` as last read: written under a folder
/// they give back the files byte for byte.
pub fn storage_files(records: &[(String, u64, String)]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, (file, _, raw)) in records.iter().enumerate() {
        if !file.ends_with(".json") || records.get(i + 1).is_some_and(|(f, _, _)| f == file) {
            continue;
        }
        out.push((file.clone(), raw.as_bytes().to_vec()));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A row's text read a chunk at a time is the text of its columns
    /// read whole: long cells with characters cut at the chunks' ends,
    /// bytes that are not UTF-8 (one cut at the very end), a long blob.
    #[test]
    fn a_row_streamed_is_the_row_read_whole() {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE TABLE part (id TEXT PRIMARY KEY, time_updated INTEGER, cost REAL, data TEXT, bin BLOB, note TEXT)",
        )
        .unwrap();
        // 'é' (2 bytes) and '€' (3 bytes) land across every 64 KiB chunk
        // end; quotes, backslashes and control characters are escaped.
        let mut text = String::from("{\"type\":\"text\",\"text\":\"");
        while text.len() < 300_000 {
            text.push_str("a\"b\\c\u{1}é€\n");
        }
        let mut bad = text.clone().into_bytes();
        bad.splice(70_000..70_000, [0xff, 0xfe]);
        bad.extend_from_slice(&[0xe2, 0x82]);
        let bin: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for (id, data) in [("prt_a", text.as_bytes().to_vec()), ("prt_b", bad)] {
            db.execute(
                "INSERT INTO part VALUES (?1, 7, 0.5, CAST(?2 AS TEXT), ?3, 'short')",
                rusqlite::params![id, data, bin],
            )
            .unwrap();
        }
        for id in ["prt_a", "prt_b"] {
            let whole = {
                let mut st = db.prepare("SELECT * FROM part WHERE id = ?1").unwrap();
                let names: Vec<String> = st.column_names().map(str::to_owned).collect();
                // As the columns read whole were written (text not UTF-8
                // made lossy).
                st.query_row([id], |r| {
                    let mut m = Map::new();
                    for (i, n) in names.iter().enumerate() {
                        let v = match r.get_ref(i)? {
                            rusqlite::types::ValueRef::Text(t) => {
                                json!(String::from_utf8_lossy(t))
                            }
                            _ => sql_to_json(r.get::<_, Sql>(i)?),
                        };
                        m.insert(n.clone(), v);
                    }
                    Ok(Value::Object(m).to_string())
                })
                .unwrap()
            };
            let layout = Layout::of(&db, "part").unwrap();
            let (at, text) = row_text(&db, &layout, "part", id, None).unwrap().unwrap();
            assert_eq!(text.into_string(), whole, "{id}");
            assert_eq!(
                at,
                At {
                    file: format!("part/{id}").into(),
                    version: 7
                }
            );
            // Only hashed: the text's SHA-256 and length.
            let (_, hashed) = row_text(&db, &layout, "part", id, Some(1))
                .unwrap()
                .unwrap();
            let Text::Hashed(h, n) = hashed else {
                panic!("not hashed")
            };
            assert_eq!(n, whole.len());
            assert_eq!(
                hex::encode(sha2::Digest::finalize(h)),
                convo_core::sha256(whole.as_bytes()).to_hex()
            );
        }
        let layout = Layout::of(&db, "part").unwrap();
        assert!(
            row_text(&db, &layout, "part", "prt_none", None)
                .unwrap()
                .is_none()
        );
    }

    /// A long `data` parsed with its text made in place is the `data`
    /// parsed whole: a tool's output with escapes, a text, a huge key, a
    /// huge string that is not most of it.
    #[test]
    fn a_huge_data_parsed_in_place_is_the_data_parsed_whole() {
        let long = "line \"quoted\" é 😀 \\ \u{1}\n".repeat(60_000);
        let cases = [
            json!({"type": "tool", "state": {"status": "completed", "output": long, "input": {"command": "ls"}}}),
            json!({"type": "text", "text": long, "time": {"start": 1}}),
            json!({"type": "text", long.clone(): 1}),
            json!({"type": "text", "a": long, "b": long}),
        ];
        for want in cases {
            let raw = want.to_string();
            assert!(raw.len() > crate::records::DETACHED_FROM);
            assert_eq!(parse_huge(raw).as_ref(), Some(&want));
        }
        assert_eq!(
            parse_huge(format!("{{\"text\": \"{}\\x\"}}", "a".repeat(2 << 20))),
            None
        );
    }
}
