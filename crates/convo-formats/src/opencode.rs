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
use crate::model::{Conversation, Message, Read, Role, Timeline};
use crate::records;
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
        let sources = if path.is_dir() {
            sources(path)
        } else {
            vec![path.to_path_buf()]
        };
        if sources.is_empty() {
            return Err(Error::new(
                &path.display().to_string(),
                "unknown-format",
                "no opencode.db and no opencode storage folder (session/, message/, part/) here",
            ));
        }
        for s in sources {
            let mut warnings = Vec::new();
            let sessions = if s.is_dir() {
                read_storage(&s, &mut warnings)?
            } else {
                read_db(&s)?
            };
            out.conversations
                .extend(build_all(&s.display().to_string(), sessions, &mut warnings));
            out.warnings.extend(warnings);
        }
        Ok(out)
    }
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

/// One stored thing (a row or a file) with its exact text.
#[derive(Debug)]
struct Rec {
    file: String,
    version: u64,
    raw: String,
    value: Map<String, Value>,
}

impl Rec {
    fn to_value(&self) -> Value {
        json!({"file": self.file, "line": self.version, "raw": self.raw})
    }
}

#[derive(Debug)]
struct Part {
    id: String,
    rec: Rec,
}

#[derive(Debug)]
struct Msg {
    id: String,
    rec: Rec,
    parts: Vec<Part>,
}

#[derive(Debug)]
struct Sess {
    id: String,
    parent: Option<String>,
    title: Option<String>,
    created: Option<i64>,
    revert: Option<String>,
    meta: Map<String, Value>,
    recs: Vec<Rec>,
    msgs: Vec<Msg>,
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

/// Every row of `table` as `{column: value}`.
fn table(db: &Connection, table: &str) -> rusqlite::Result<Vec<Map<String, Value>>> {
    let mut st = db.prepare(&format!("SELECT * FROM \"{table}\""))?;
    let names: Vec<String> = st.column_names().map(|s| s.to_string()).collect();
    let rows = st.query_map([], |r| {
        let mut m = Map::new();
        for (i, n) in names.iter().enumerate() {
            m.insert(n.clone(), sql_to_json(r.get::<_, Sql>(i)?));
        }
        Ok(m)
    })?;
    rows.collect()
}

fn s(m: &Map<String, Value>, k: &str) -> Option<String> {
    m.get(k).and_then(Value::as_str).map(str::to_owned)
}

/// A row as a record: `table/id`, versioned by `time_updated`.
fn row_rec(table: &str, row: Map<String, Value>) -> Rec {
    let id = s(&row, "id").unwrap_or_default();
    let version = row.get("time_updated").and_then(Value::as_u64).unwrap_or(0);
    Rec {
        file: format!("{table}/{id}"),
        version,
        raw: Value::Object(row.clone()).to_string(),
        value: row,
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

fn read_db(path: &Path) -> Result<Vec<Sess>> {
    let file = path.display().to_string();
    let sql = |e: rusqlite::Error| {
        Error::new(
            &file,
            "sqlite",
            format!("cannot read opencode's database: {e}"),
        )
    };
    let db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql)?;
    let projects: HashMap<String, Map<String, Value>> = table(&db, "project")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| Some((s(&r, "id")?, r)))
        .collect();
    let mut sessions: Vec<Sess> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for row in table(&db, "session").map_err(sql)? {
        let id = s(&row, "id").unwrap_or_default();
        let revert = data_of(&row, "revert");
        let mut meta = Map::new();
        for k in ["project_id", "directory", "version", "slug"] {
            if let Some(v) = row.get(k).filter(|v| !v.is_null()) {
                meta.insert(k.into(), v.clone());
            }
        }
        let project = s(&row, "project_id")
            .and_then(|p| projects.get(&p))
            .cloned();
        let sess = Sess {
            id: id.clone(),
            parent: s(&row, "parent_id"),
            title: s(&row, "title").filter(|t| !t.is_empty()),
            created: row.get("time_created").and_then(Value::as_i64),
            revert: s(&revert, "messageID"),
            meta,
            recs: vec![row_rec("session", row)],
            msgs: Vec::new(),
        };
        let mut sess = sess;
        if let Some(p) = project {
            sess.recs.push(row_rec("project", p));
        }
        index.insert(id, sessions.len());
        sessions.push(sess);
    }
    let mut msg_at: HashMap<String, (usize, usize)> = HashMap::new();
    let mut messages = table(&db, "message").map_err(sql)?;
    messages.sort_by(|a, b| {
        let k = |r: &Map<String, Value>| {
            (
                r.get("time_created").and_then(Value::as_i64).unwrap_or(0),
                s(r, "id").unwrap_or_default(),
            )
        };
        k(a).cmp(&k(b))
    });
    for row in messages {
        let Some(&si) = s(&row, "session_id").and_then(|x| index.get(&x)) else {
            continue;
        };
        let id = s(&row, "id").unwrap_or_default();
        let mut rec = row_rec("message", row);
        rec.value = data_of(&rec.value, "data");
        msg_at.insert(id.clone(), (si, sessions[si].msgs.len()));
        sessions[si].msgs.push(Msg {
            id,
            rec,
            parts: Vec::new(),
        });
    }
    let mut parts = table(&db, "part").map_err(sql)?;
    parts.sort_by_key(|r| s(r, "id").unwrap_or_default());
    for row in parts {
        let Some(&(si, mi)) = s(&row, "message_id").and_then(|x| msg_at.get(&x)) else {
            continue;
        };
        let id = s(&row, "id").unwrap_or_default();
        let mut rec = row_rec("part", row);
        rec.value = data_of(&rec.value, "data");
        sessions[si].msgs[mi].parts.push(Part { id, rec });
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

fn file_rec(rel: &str, path: &Path, warnings: &mut Vec<String>) -> Result<Option<Rec>> {
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
    let bytes = std::fs::read(path).map_err(io)?;
    let raw = String::from_utf8(bytes)
        .map_err(|_| Error::new(&name, "encoding", "the file is not UTF-8"))?;
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
        file: rel.to_owned(),
        version,
        raw,
        value,
    }))
}

fn read_storage(root: &Path, warnings: &mut Vec<String>) -> Result<Vec<Sess>> {
    let mut projects: HashMap<String, Rec> = HashMap::new();
    for (rel, p) in json_files(root, "project", 1) {
        if let Some(r) = file_rec(&rel, &p, warnings)? {
            let id = Path::new(&rel)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            projects.insert(id, r);
        }
    }
    let mut sessions: Vec<Sess> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for (rel, p) in json_files(root, "session", 2) {
        let Some(rec) = file_rec(&rel, &p, warnings)? else {
            continue;
        };
        // Ids come from the paths, as opencode's own migration reads them.
        let id = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let project = p
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let v = &rec.value;
        let mut meta = Map::new();
        meta.insert("project_id".into(), json!(project));
        for (k, from) in [
            ("directory", "directory"),
            ("version", "version"),
            ("slug", "slug"),
        ] {
            if let Some(x) = v.get(from).filter(|x| !x.is_null()) {
                meta.insert(k.into(), x.clone());
            }
        }
        let mut recs = Vec::new();
        let sess_fields = (
            s(v, "parentID"),
            s(v, "title").filter(|t| !t.is_empty()),
            v.get("time")
                .and_then(|t| t.get("created"))
                .and_then(Value::as_i64),
            v.get("revert")
                .and_then(|r| r.get("messageID"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        );
        recs.push(rec);
        if let Some(pr) = projects.get(&project) {
            recs.push(Rec {
                file: pr.file.clone(),
                version: pr.version,
                raw: pr.raw.clone(),
                value: Map::new(),
            });
        }
        index.insert(id.clone(), sessions.len());
        sessions.push(Sess {
            id,
            parent: sess_fields.0,
            title: sess_fields.1,
            created: sess_fields.2,
            revert: sess_fields.3,
            meta,
            recs,
            msgs: Vec::new(),
        });
    }
    let mut msg_at: HashMap<String, (usize, usize)> = HashMap::new();
    let mut msgs = json_files(root, "message", 2);
    msgs.sort();
    for (rel, p) in msgs {
        let ses = p
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(&si) = index.get(&ses) else { continue };
        let Some(rec) = file_rec(&rel, &p, warnings)? else {
            continue;
        };
        let id = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        msg_at.insert(id.clone(), (si, sessions[si].msgs.len()));
        sessions[si].msgs.push(Msg {
            id,
            rec,
            parts: Vec::new(),
        });
    }
    let mut parts = json_files(root, "part", 2);
    parts.sort();
    for (rel, p) in parts {
        let msg = p
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(&(si, mi)) = msg_at.get(&msg) else {
            continue;
        };
        let Some(rec) = file_rec(&rel, &p, warnings)? else {
            continue;
        };
        let id = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        sessions[si].msgs[mi].parts.push(Part { id, rec });
    }
    for s in &mut sessions {
        s.msgs.sort_by(|a, b| {
            let t = |m: &Msg| {
                m.rec
                    .value
                    .get("time")
                    .and_then(|t| t.get("created"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            };
            (t(a), &a.id).cmp(&(t(b), &b.id))
        });
        for m in &mut s.msgs {
            m.parts.sort_by(|a, b| a.id.cmp(&b.id));
        }
    }
    Ok(sessions)
}

/// The messages one opencode message says.
fn messages_of(m: &Msg) -> Vec<Message> {
    let info = &m.rec.value;
    let time = info
        .get("time")
        .and_then(|t| t.get("created"))
        .and_then(Value::as_i64);
    let mut out = Vec::new();
    let part = |p: &Part, k: &str| {
        p.rec
            .value
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    match info.get("role").and_then(Value::as_str) {
        Some("user") => {
            let texts = |synthetic: bool| {
                m.parts
                    .iter()
                    .filter(|p| part(p, "type").as_deref() == Some("text"))
                    .filter(|p| {
                        p.rec.value.get("synthetic").and_then(Value::as_bool) == Some(true)
                            || p.rec.value.get("ignored").and_then(Value::as_bool) == Some(true)
                    } == synthetic)
                    .filter_map(|p| part(p, "text"))
                    .collect::<Vec<_>>()
                    .join("\n\n")
            };
            let mut text = texts(false);
            let mut extra = Map::new();
            for p in &m.parts {
                match part(p, "type").as_deref() {
                    Some("subtask") if text.is_empty() => {
                        text = part(p, "prompt").unwrap_or_default();
                        extra.insert("subtask".into(), json!(part(p, "agent")));
                    }
                    Some("compaction") if text.is_empty() => {
                        text = "What did we do so far?".into();
                        extra.insert("compaction".into(), json!(true));
                    }
                    Some("file") => {
                        let name = part(p, "filename")
                            .or_else(|| part(p, "url"))
                            .unwrap_or_default();
                        if text.is_empty() {
                            text = format!("[file {name}]");
                        }
                    }
                    _ => {}
                }
            }
            if text.is_empty() {
                text = texts(true);
            }
            let mut msg = Message::new(Role::User, "user", text).at(time);
            msg.extra = extra;
            if let Some(a) = info.get("agent").filter(|a| !a.is_null()) {
                msg.extra.insert("agent".into(), a.clone());
            }
            msg.key = Some(m.id.clone());
            out.push(msg);
        }
        Some("assistant") => {
            let model = info
                .get("modelID")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let mut reasoning = String::new();
            for p in &m.parts {
                let key = if out.is_empty() {
                    m.id.clone()
                } else {
                    format!("{}#{}", m.id, p.id)
                };
                let v = &p.rec.value;
                let ptime = v
                    .get("time")
                    .and_then(|t| t.get("start"))
                    .and_then(Value::as_i64)
                    .or(time);
                match part(p, "type").as_deref() {
                    Some("reasoning") => {
                        if let Some(t) = part(p, "text") {
                            reasoning.push_str(&t);
                        }
                    }
                    Some("text") => {
                        let t = part(p, "text").unwrap_or_default();
                        if t.trim().is_empty() {
                            continue;
                        }
                        let mut msg = Message::new(Role::Assistant, "opencode", t)
                            .with_model(model.clone())
                            .at(ptime);
                        if !reasoning.is_empty() {
                            msg.extra
                                .insert("reasoning".into(), json!(std::mem::take(&mut reasoning)));
                        }
                        msg.key = Some(key);
                        out.push(msg);
                    }
                    Some("tool") => {
                        let tool = part(p, "tool").unwrap_or_else(|| "tool".into());
                        let state = v.get("state").cloned().unwrap_or(Value::Null);
                        let st = |k: &str| state.get(k);
                        let input = st("input").cloned().unwrap_or(Value::Null);
                        let call_id = part(p, "callID").unwrap_or_default();
                        let stime = st("time")
                            .and_then(|t| t.get("start"))
                            .and_then(Value::as_i64);
                        let mut call = Message::new(
                            Role::ToolCall,
                            "opencode",
                            records::tool_call_text(&tool, &input),
                        )
                        .with_model(model.clone())
                        .with_extra("call_id", json!(call_id))
                        .at(stime.or(time));
                        call.to = Some(tool.clone());
                        if let Some(sid) = st("metadata")
                            .and_then(|x| x.get("sessionId"))
                            .filter(|x| x.is_string())
                        {
                            call.extra.insert("session".into(), sid.clone());
                        }
                        if !reasoning.is_empty() {
                            call.extra
                                .insert("reasoning".into(), json!(std::mem::take(&mut reasoning)));
                        }
                        call.key = Some(key);
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
                            r.key = Some(format!("{}#{}:result", m.id, p.id));
                            out.push(r);
                        }
                    }
                    _ => {}
                }
            }
            if out.is_empty()
                && let Some(e) = info.get("error").filter(|e| !e.is_null())
            {
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
                msg.key = Some(m.id.clone());
                out.push(msg);
            }
            if let Some(first) = out.first_mut() {
                for k in ["tokens", "cost", "finish", "providerID", "agent"] {
                    if let Some(v) = info.get(k).filter(|v| !v.is_null()) {
                        let name = if k == "tokens" { "usage" } else { k };
                        first.extra.insert(name.into(), v.clone());
                    }
                }
            }
        }
        _ => {}
    }
    out
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
    children: HashMap<&'a str, Vec<&'a Sess>>,
    messages: Vec<Message>,
    /// Per message: whether it belongs to a child session.
    in_child: Vec<bool>,
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
        let mut carry: Vec<Value> = s.recs.iter().map(Rec::to_value).collect();
        let mut tasks: HashMap<String, usize> = HashMap::new();
        // (message index, created) of this session's messages, for a child
        // whose task call is gone.
        let mut times: Vec<(usize, i64)> = Vec::new();
        for m in &s.msgs {
            if in_progress(m) {
                self.warnings.push(format!(
                    "{}: message {} of session {} is still being written; left for the next import",
                    self.file, m.id, s.id
                ));
                continue;
            }
            if s.revert.as_deref() == Some(m.id.as_str()) && live.is_none() {
                live = Some(prev);
            }
            carry.push(m.rec.to_value());
            carry.extend(m.parts.iter().map(|p| p.rec.to_value()));
            let ms = messages_of(m);
            if ms.is_empty() {
                continue;
            }
            for (k, mut msg) in ms.into_iter().enumerate() {
                msg.parent = prev;
                if k == 0 {
                    msg.extra
                        .insert("records".into(), Value::Array(std::mem::take(&mut carry)));
                }
                if let Some(Value::String(sid)) = msg.extra.get("session") {
                    tasks.insert(sid.clone(), self.messages.len());
                }
                if let Some(t) = msg.time {
                    times.push((self.messages.len(), t));
                }
                self.messages.push(msg);
                self.in_child.push(child);
                prev = Some(self.messages.len() - 1);
            }
        }
        if !carry.is_empty() {
            match prev.filter(|p| Some(*p) != anchor) {
                Some(last) => {
                    if let Some(Value::Array(r)) = self.messages[last].extra.get_mut("records") {
                        r.extend(carry);
                    }
                }
                None => {
                    let mut m = Message::new(Role::System, "opencode", "");
                    m.time = s.created;
                    m.parent = anchor;
                    m.key = Some(format!("{}#records", s.id));
                    m.extra.insert("records".into(), Value::Array(carry));
                    m.extra.insert("holder".into(), json!(true));
                    self.messages.push(m);
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

fn build_all(file: &str, sessions: Vec<Sess>, warnings: &mut Vec<String>) -> Vec<Conversation> {
    let all: HashMap<&str, &Sess> = sessions.iter().map(|s| (s.id.as_str(), s)).collect();
    let mut children: HashMap<&str, Vec<&Sess>> = HashMap::new();
    for s in &sessions {
        if let Some(p) = s.parent.as_deref().filter(|p| all.contains_key(p)) {
            children.entry(p).or_default().push(s);
        }
    }
    for v in children.values_mut() {
        v.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
    }
    let mut out = Vec::new();
    for s in &sessions {
        if s.parent.as_deref().is_some_and(|p| all.contains_key(p)) {
            continue;
        }
        let mut b = Builder {
            file,
            children: children.clone(),
            messages: Vec::new(),
            in_child: Vec::new(),
            warnings: Vec::new(),
        };
        let live = b.add(s, None, false, 0);
        warnings.append(&mut b.warnings);
        let mut messages = b.messages;
        if messages.is_empty() {
            continue;
        }
        records::mark_intermediate(&mut messages);
        let n = messages.len();
        let mut has_child = vec![false; n];
        for m in &messages {
            if let Some(p) = m.parent {
                has_child[p] = true;
            }
        }
        let mut timelines = vec![Timeline {
            name: "main".into(),
            leaf: live,
        }];
        let (mut alt, mut agent) = (0, 0);
        for (i, (&child, &in_child)) in has_child.iter().zip(&b.in_child).enumerate() {
            if child || Some(i) == live {
                continue;
            }
            let name = if in_child {
                agent += 1;
                format!("agent-{agent}")
            } else {
                alt += 1;
                format!("alt-{alt}")
            };
            timelines.push(Timeline {
                name,
                leaf: Some(i),
            });
        }
        let title = s.title.clone().or_else(|| {
            messages
                .iter()
                .find(|m| m.role == Role::User)
                .and_then(|m| records::title_of(&m.text))
        });
        let mut meta = s.meta.clone();
        meta.insert("sessionID".into(), json!(s.id));
        out.push(Conversation {
            id: Some(s.id.clone()),
            title,
            agent: Some("opencode".into()),
            created_at: s.created.or_else(|| messages.iter().find_map(|m| m.time)),
            meta,
            timelines,
            messages,
        });
    }
    out
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

/// What an export of an imported opencode session writes: the rows of its
/// database as SQL (`INSERT OR IGNORE`, the last version of each row, in
/// the order the foreign keys need: project, session, message, part), to
/// be run against opencode's database (`sqlite3 opencode.db < s.sql`)
/// to put back what is missing. `records` are `(file, line, raw)` as
/// [`crate::ledger::session_records`] gives them; rows only (a session
/// imported from the JSON storage is written with [`storage_files`]).
pub fn sql_script(records: &[(String, u64, String)]) -> Result<Vec<u8>> {
    let mut out = String::from("BEGIN;\n");
    for table in ["project", "session", "message", "part"] {
        let prefix = format!("{table}/");
        for (i, (file, _, raw)) in records.iter().enumerate() {
            if !file.starts_with(&prefix) || file.ends_with(".json") {
                continue;
            }
            // The last version of a row only.
            if records.get(i + 1).is_some_and(|(f, _, _)| f == file) {
                continue;
            }
            let Ok(Value::Object(row)) = serde_json::from_str::<Value>(raw) else {
                return Err(Error::new(
                    file,
                    "shape",
                    "a stored row is not a JSON object",
                ));
            };
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
    }
    out.push_str("COMMIT;\n");
    Ok(out.into_bytes())
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
