//! The SQLite log database of Simon Willison's `llm` CLI (`logs.db`).
//!
//! # Wire format
//!
//! Two generations of tables, both read (a database upgraded to 0.32
//! holds both):
//!
//! **Before 0.32** — `conversations(id, name, model)` and
//! `responses(id, model, prompt, system, response, conversation_id,
//! datetime_utc, duration_ms, input_tokens, output_tokens, …)`, one row per
//! prompt and its answer, plus `tool_calls(response_id, name, arguments,
//! tool_call_id)` and `tool_results(response_id, name, output,
//! tool_call_id)` from 0.26 on. Each conversation becomes one: per
//! response, the tool results it carried, its system prompt (when it
//! changed), the prompt, the answer (model, tokens and duration kept) and
//! the tool calls the model made.
//!
//! **0.32 and later** — a content-addressed message store:
//! `messages(hash, parent_hash, role, provider_metadata)` form a tree,
//! `parts(message_hash, position, type, tool_name, text, payload)` hold
//! each message's content (`text`, `reasoning`, `tool_call`, `tool_result`,
//! `attachment`; text may be a `text_ref` of literals and `fragments`),
//! `threads(id, name, tip_message_hash, forked_from, datetime_utc)` are
//! named pointers at a tip (a fork is a thread pointing into another's
//! history), and `turns(id, thread_id, parent_message_hash,
//! tip_message_hash, model, resolved_model, datetime_utc, …)` record each
//! model call. A thread and the threads forked from it become one
//! conversation: the first thread is `main`, the forks are timelines named
//! after their threads. Models and times come from the turns. Responses
//! also logged as turns (the dual-write era) are read once.
//!
//! The database is opened read-only; nothing in it is changed.

use crate::Reader;
use crate::error::{Error, Result};
use crate::json::{compact, iso_to_millis};
use crate::model::{Conversation, Message, Read, Role, Timeline};
use rusqlite::{Connection, OpenFlags, types::Value as Sql};
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The `llm` log database format.
#[derive(Clone, Copy, Debug, Default)]
pub struct Llm;

impl Reader for Llm {
    fn name(&self) -> &'static str {
        "llm"
    }
    fn read_bytes(&self, file: &str, _bytes: &[u8]) -> Result<Read> {
        Err(Error::new(
            file,
            "llm-path",
            "an llm log is an SQLite database: import it by path",
        ))
    }
    fn read_path(&self, path: &Path) -> Result<Read> {
        let file = path.display().to_string();
        let sql = |e: rusqlite::Error| {
            Error::new(
                &file,
                "sqlite",
                format!("cannot read it as an llm log database: {e}"),
            )
        };
        let db = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        let tables: HashSet<String> = {
            let mut st = db
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
                .map_err(sql)?;
            st.query_map([], |r| r.get::<_, String>(0))
                .map_err(sql)?
                .collect::<rusqlite::Result<_>>()
                .map_err(sql)?
        };
        let new = ["threads", "messages", "parts"]
            .iter()
            .all(|t| tables.contains(*t));
        let old = tables.contains("responses");
        if !new && !old {
            return Err(Error::new(
                &file,
                "llm-schema",
                "not an llm log database: it has neither a `responses` table nor `threads`/`messages`/`parts`",
            ));
        }
        let mut out = Vec::new();
        let mut turn_ids = HashSet::new();
        if new {
            out.extend(read_threads(&db, &file, &tables, &mut turn_ids).map_err(sql)?);
        }
        if old {
            out.extend(read_responses(&db, &tables, &turn_ids).map_err(sql)?);
        }
        Ok(Read::of(out))
    }
}

/// The columns of a table.
fn columns(db: &Connection, table: &str) -> rusqlite::Result<HashSet<String>> {
    let mut st = db.prepare(&format!("PRAGMA table_info(\"{table}\")"))?;
    st.query_map([], |r| r.get::<_, String>(1))?.collect()
}

/// `col` if the table has it, else `NULL`, for a SELECT list.
fn col(cols: &HashSet<String>, c: &str) -> String {
    if cols.contains(c) {
        format!("\"{c}\"")
    } else {
        "NULL".into()
    }
}

fn text(v: &Sql) -> Option<String> {
    match v {
        Sql::Text(s) => Some(s.clone()),
        Sql::Integer(i) => Some(i.to_string()),
        Sql::Real(f) => Some(f.to_string()),
        Sql::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Sql::Null => None,
    }
}

fn int(v: &Sql) -> Option<i64> {
    match v {
        Sql::Integer(i) => Some(*i),
        Sql::Real(f) => Some(*f as i64),
        Sql::Text(s) => s.parse().ok(),
        _ => None,
    }
}

fn rows(
    db: &Connection,
    q: &str,
    params: &[&dyn rusqlite::ToSql],
) -> rusqlite::Result<Vec<Vec<Sql>>> {
    let mut st = db.prepare(q)?;
    let n = st.column_count();
    st.query_map(params, |r| (0..n).map(|i| r.get::<_, Sql>(i)).collect())?
        .collect()
}

// ----- before 0.32 --------------------------------------------------------------

fn read_responses(
    db: &Connection,
    tables: &HashSet<String>,
    skip: &HashSet<String>,
) -> rusqlite::Result<Vec<Conversation>> {
    let rc = columns(db, "responses")?;
    let q = format!(
        "SELECT id, {}, {}, {}, {}, {}, {}, {}, {}, {}, {} FROM responses ORDER BY {}, rowid",
        col(&rc, "model"),
        col(&rc, "prompt"),
        col(&rc, "system"),
        col(&rc, "response"),
        col(&rc, "conversation_id"),
        col(&rc, "datetime_utc"),
        col(&rc, "duration_ms"),
        col(&rc, "input_tokens"),
        col(&rc, "output_tokens"),
        col(&rc, "resolved_model"),
        col(&rc, "datetime_utc"),
    );
    let all = rows(db, &q, &[])?;
    let names = conversation_names(db, tables)?;
    let tools = ResponseTools {
        calls: tool_rows(
            db,
            tables,
            "tool_calls",
            &["name", "arguments", "tool_call_id"],
        )?,
        results: tool_rows(
            db,
            tables,
            "tool_results",
            &["name", "output", "tool_call_id"],
        )?,
    };
    let (order, mut groups) = group_responses(all, skip);
    let mut out = Vec::new();
    for cid in order {
        let Some(rs) = groups.remove(&cid) else {
            continue;
        };
        let mut messages = Vec::new();
        let mut system: Option<String> = None;
        for r in &rs {
            tools.add_response(r, &mut system, &mut messages);
        }
        let (name, model) = names.get(&cid).cloned().unwrap_or((None, None));
        let mut c = Conversation::linear(messages);
        c.id = Some(format!("conversation:{cid}"));
        c.title = name.filter(|n| !n.is_empty());
        c.agent = Some("llm".into());
        c.created_at = c.messages.iter().find_map(|m| m.time);
        if let Some(m) = model {
            c.meta.insert("model".into(), json!(m));
        }
        out.push(c);
    }
    Ok(out)
}

/// A conversation's name and model.
type NameAndModel = (Option<String>, Option<String>);

/// Each conversation's name and model (by id), from `conversations`.
fn conversation_names(
    db: &Connection,
    tables: &HashSet<String>,
) -> rusqlite::Result<HashMap<String, NameAndModel>> {
    if !tables.contains("conversations") {
        return Ok(HashMap::new());
    }
    let cc = columns(db, "conversations")?;
    Ok(rows(
        db,
        &format!(
            "SELECT id, {}, {} FROM conversations",
            col(&cc, "name"),
            col(&cc, "model")
        ),
        &[],
    )?
    .into_iter()
    .filter_map(|r| Some((text(&r[0])?, (text(&r[1]), text(&r[2])))))
    .collect())
}

/// The rows of a tool table (`cols` of it) by response id, in row order;
/// none when the database has no such table.
fn tool_rows(
    db: &Connection,
    tables: &HashSet<String>,
    table: &str,
    cols: &[&str],
) -> rusqlite::Result<HashMap<String, Vec<Vec<Sql>>>> {
    let mut m: HashMap<String, Vec<Vec<Sql>>> = HashMap::new();
    if !tables.contains(table) {
        return Ok(m);
    }
    let tc = columns(db, table)?;
    let list: Vec<String> = cols.iter().map(|c| col(&tc, c)).collect();
    for r in rows(
        db,
        &format!(
            "SELECT response_id, {} FROM \"{table}\" ORDER BY rowid",
            list.join(", ")
        ),
        &[],
    )? {
        if let Some(id) = text(&r[0]) {
            m.entry(id).or_default().push(r[1..].to_vec());
        }
    }
    Ok(m)
}

/// Responses by conversation (a response without one is its own), with
/// the conversations in the order of their first response; those in
/// `skip` (read as turns) left out.
fn group_responses(
    all: Vec<Vec<Sql>>,
    skip: &HashSet<String>,
) -> (Vec<String>, HashMap<String, Vec<Vec<Sql>>>) {
    let mut order: Vec<String> = Vec::new();
    let mut groups: HashMap<String, Vec<Vec<Sql>>> = HashMap::new();
    for r in all {
        let Some(id) = text(&r[0]) else { continue };
        if skip.contains(&id) {
            continue;
        }
        let conv = text(&r[5]).unwrap_or_else(|| format!("response:{id}"));
        if !groups.contains_key(&conv) {
            order.push(conv.clone());
        }
        groups.entry(conv).or_default().push(r);
    }
    (order, groups)
}

/// The tool calls and results of responses, by response id (columns:
/// name, arguments or output, tool_call_id).
struct ResponseTools {
    calls: HashMap<String, Vec<Vec<Sql>>>,
    results: HashMap<String, Vec<Vec<Sql>>>,
}

impl ResponseTools {
    /// Adds one response's messages: the tool results it carried, its
    /// system prompt (when it changed from `system`), the prompt, the
    /// answer, the tool calls the model made.
    fn add_response(&self, r: &[Sql], system: &mut Option<String>, messages: &mut Vec<Message>) {
        let id = text(&r[0]).unwrap_or_default();
        let at = text(&r[6]).as_deref().and_then(iso_to_millis);
        for t in self.results.get(&id).into_iter().flatten() {
            let name = text(&t[0]).unwrap_or_else(|| "tool".into());
            messages.push(tool_result(name, text(&t[1]).unwrap_or_default(), text(&t[2])).at(at));
        }
        if let Some(s) = text(&r[3]).filter(|s| !s.is_empty())
            && system.as_ref() != Some(&s)
        {
            messages.push(Message::new(Role::System, "system", s.clone()).at(at));
            *system = Some(s);
        }
        if let Some(p) = text(&r[2]).filter(|p| !p.is_empty()) {
            messages.push(Message::new(Role::User, "user", p).at(at));
        }
        let model = text(&r[10]).or_else(|| text(&r[1]));
        let answer = text(&r[4]).unwrap_or_default();
        let rcalls = self.calls.get(&id);
        if !answer.is_empty() || rcalls.is_none() {
            let mut m = Message::new(Role::Assistant, "assistant", answer)
                .at(at.map(|t| t + int(&r[7]).unwrap_or(0)))
                .with_model(model.clone())
                .with_extra("id", json!(id));
            for (k, i) in [
                ("duration_ms", 7),
                ("input_tokens", 8),
                ("output_tokens", 9),
            ] {
                if let Some(v) = int(&r[i]) {
                    m = m.with_extra(k, json!(v));
                }
            }
            messages.push(m);
        }
        for c in rcalls.into_iter().flatten() {
            let name = text(&c[0]).unwrap_or_else(|| "tool".into());
            let args = text(&c[1]).map(arguments).unwrap_or(Value::Null);
            messages.push(
                tool_call(name, args, text(&c[2]))
                    .at(at)
                    .with_model(model.clone()),
            );
        }
    }
}

/// A tool call's arguments as logged: their JSON, else the string.
fn arguments(a: String) -> Value {
    convo_core::json::from_str_unique(&a).unwrap_or(Value::String(a))
}

/// The message of a tool call: its name, arguments and id as JSON.
fn tool_call(name: String, args: Value, call_id: Option<String>) -> Message {
    let mut m = Message::new(
        Role::ToolCall,
        "assistant",
        compact(&json!({"name": name, "arguments": args, "tool_call_id": call_id})),
    );
    m.to = Some(name);
    m
}

/// The message of a tool's result.
fn tool_result(name: String, output: String, call_id: Option<String>) -> Message {
    Message::new(Role::Tool, name, output).with_extra("tool_call_id", json!(call_id))
}

// ----- 0.32 and later ---------------------------------------------------------

struct DbMsg {
    parent: Option<String>,
    role: String,
}

/// What the 0.32 tables say of the stored messages.
struct Store {
    /// By hash: its parent and role.
    msgs: HashMap<String, DbMsg>,
    /// By message hash, in position order: type, text, payload,
    /// tool_name, arguments, output, tool_call_id, content.
    parts: HashMap<String, Vec<Vec<Sql>>>,
    fragments: HashMap<i64, String>,
    /// From the turns: the model and time of each message.
    model_of: HashMap<String, String>,
    time_of: HashMap<String, i64>,
}

fn read_threads(
    db: &Connection,
    file: &str,
    tables: &HashSet<String>,
    turn_ids: &mut HashSet<String>,
) -> rusqlite::Result<Vec<Conversation>> {
    let tc = columns(db, "threads")?;
    let threads = rows(
        db,
        &format!(
            "SELECT id, {}, {}, {}, {} FROM threads ORDER BY {}, rowid",
            col(&tc, "name"),
            col(&tc, "tip_message_hash"),
            col(&tc, "forked_from"),
            col(&tc, "datetime_utc"),
            col(&tc, "datetime_utc"),
        ),
        &[],
    )?;
    let mut store = Store {
        msgs: db_messages(db)?,
        parts: db_parts(db)?,
        fragments: if tables.contains("fragments") {
            rows(db, "SELECT id, content FROM fragments", &[])?
                .into_iter()
                .filter_map(|r| Some((int(&r[0])?, text(&r[1])?)))
                .collect()
        } else {
            HashMap::new()
        },
        model_of: HashMap::new(),
        time_of: HashMap::new(),
    };
    if tables.contains("turns") {
        store.read_turns(db, turn_ids)?;
    }
    let _ = file;
    Ok(group_threads(&threads)
        .into_iter()
        .map(|(root, ts)| store.thread_group(&root, ts))
        .collect())
}

/// The stored messages' parents and roles, by hash.
fn db_messages(db: &Connection) -> rusqlite::Result<HashMap<String, DbMsg>> {
    Ok(
        rows(db, "SELECT hash, parent_hash, role FROM messages", &[])?
            .into_iter()
            .filter_map(|r| {
                Some((
                    text(&r[0])?,
                    DbMsg {
                        parent: text(&r[1]),
                        role: text(&r[2]).unwrap_or_else(|| "user".into()),
                    },
                ))
            })
            .collect(),
    )
}

/// The stored messages' parts ([`Store::parts`]), by message hash.
fn db_parts(db: &Connection) -> rusqlite::Result<HashMap<String, Vec<Vec<Sql>>>> {
    let pc = columns(db, "parts")?;
    let mut parts: HashMap<String, Vec<Vec<Sql>>> = HashMap::new();
    for r in rows(
        db,
        &format!(
            "SELECT message_hash, {}, {}, {}, {}, {}, {}, {}, {} FROM parts ORDER BY message_hash, {}",
            col(&pc, "type"),
            col(&pc, "text"),
            col(&pc, "payload"),
            if pc.contains("tool_name") {
                col(&pc, "tool_name")
            } else {
                col(&pc, "name")
            },
            col(&pc, "arguments"),
            col(&pc, "output"),
            col(&pc, "tool_call_id"),
            col(&pc, "content"),
            if pc.contains("position") {
                col(&pc, "position")
            } else {
                col(&pc, "order")
            },
        ),
        &[],
    )? {
        if let Some(h) = text(&r[0]) {
            parts.entry(h).or_default().push(r[1..].to_vec());
        }
    }
    Ok(parts)
}

/// Groups threads: each with the threads forked from it, transitively
/// (by its root's id, in the order of the first thread of each).
fn group_threads(threads: &[Vec<Sql>]) -> Vec<(String, Vec<&Vec<Sql>>)> {
    let ids: Vec<String> = threads.iter().filter_map(|t| text(&t[0])).collect();
    let by_id: HashMap<&str, &Vec<Sql>> = threads
        .iter()
        .filter_map(|t| {
            Some((
                ids.iter()
                    .find(|i| Some(i.as_str()) == text(&t[0]).as_deref())?
                    .as_str(),
                t,
            ))
        })
        .collect();
    let root_of = |id: &str| -> String {
        let mut cur = id.to_owned();
        for _ in 0..=ids.len() {
            match by_id.get(cur.as_str()).and_then(|t| text(&t[3])) {
                Some(p) if by_id.contains_key(p.as_str()) && p != cur => cur = p,
                _ => break,
            }
        }
        cur
    };
    let mut groups: Vec<(String, Vec<&Vec<Sql>>)> = Vec::new();
    for t in threads {
        let Some(id) = text(&t[0]) else { continue };
        let root = root_of(&id);
        match groups.iter_mut().find(|(r, _)| *r == root) {
            Some((_, v)) => v.push(t),
            None => groups.push((root, vec![t])),
        }
    }
    groups
}

impl Store {
    /// Models and times from the turns (each turn's ids noted in
    /// `turn_ids`): a turn's model and time go to the messages from its
    /// tip up to its parent message, its time to that parent too.
    fn read_turns(
        &mut self,
        db: &Connection,
        turn_ids: &mut HashSet<String>,
    ) -> rusqlite::Result<()> {
        let uc = columns(db, "turns")?;
        for r in rows(
            db,
            &format!(
                "SELECT id, {}, {}, {}, {}, {} FROM turns ORDER BY {}, rowid",
                col(&uc, "parent_message_hash"),
                col(&uc, "tip_message_hash"),
                col(&uc, "model"),
                col(&uc, "resolved_model"),
                col(&uc, "datetime_utc"),
                col(&uc, "datetime_utc"),
            ),
            &[],
        )? {
            if let Some(id) = text(&r[0]) {
                turn_ids.insert(id);
            }
            let stop = text(&r[1]);
            let model = text(&r[4]).or_else(|| text(&r[3]));
            let at = text(&r[5]).as_deref().and_then(iso_to_millis);
            if let (Some(p), Some(t)) = (&stop, at) {
                self.time_of.entry(p.clone()).or_insert(t);
            }
            let mut cur = text(&r[2]);
            let mut steps = 0;
            while let Some(h) = cur {
                if Some(&h) == stop.as_ref() || steps > self.msgs.len() {
                    break;
                }
                steps += 1;
                if let Some(m) = &model {
                    self.model_of.entry(h.clone()).or_insert_with(|| m.clone());
                }
                if let Some(t) = at {
                    self.time_of.entry(h.clone()).or_insert(t);
                }
                cur = self.msgs.get(&h).and_then(|m| m.parent.clone());
            }
        }
        Ok(())
    }

    /// One conversation from a thread `root` and the threads forked from
    /// it (`ts`): the root thread is `main`, the forks are timelines
    /// named after their threads.
    fn thread_group(&self, root: &str, mut ts: Vec<&Vec<Sql>>) -> Conversation {
        // The root thread first.
        ts.sort_by_key(|t| text(&t[0]).as_deref() != Some(root));
        let mut conv = Conversation::default();
        let mut last_of: HashMap<String, usize> = HashMap::new();
        for (k, t) in ts.iter().enumerate() {
            let tip = text(&t[2]);
            self.add_chain(&mut conv, &mut last_of, tip.clone());
            let name = if k == 0 {
                "main".to_owned()
            } else {
                text(&t[1])
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| format!("thread-{}", text(&t[0]).unwrap_or_default()))
            };
            conv.timelines.push(Timeline {
                name,
                leaf: tip.and_then(|h| last_of.get(&h).copied()),
            });
        }
        let first = ts.first();
        conv.id = Some(format!("thread:{root}"));
        conv.title = first.and_then(|t| text(&t[1])).filter(|n| !n.is_empty());
        conv.agent = Some("llm".into());
        conv.created_at = first
            .and_then(|t| text(&t[4]))
            .as_deref()
            .and_then(iso_to_millis)
            .or_else(|| conv.messages.iter().find_map(|m| m.time));
        conv
    }

    /// Adds the messages from the root to `tip` not added yet (`last_of`:
    /// the last message each stored message became), each under the one
    /// before it.
    fn add_chain(
        &self,
        conv: &mut Conversation,
        last_of: &mut HashMap<String, usize>,
        tip: Option<String>,
    ) {
        // The chain of message hashes from the root to the tip.
        let mut chain = Vec::new();
        let mut cur = tip;
        while let Some(h) = cur {
            if chain.len() > self.msgs.len() || last_of.contains_key(&h) {
                chain.push(h);
                break;
            }
            cur = self.msgs.get(&h).and_then(|m| m.parent.clone());
            chain.push(h);
        }
        chain.reverse();
        let mut up: Option<usize> = None;
        for h in chain {
            if let Some(&i) = last_of.get(&h) {
                up = Some(i);
                continue;
            }
            let role = self.msgs.get(&h).map(|m| m.role.as_str()).unwrap_or("user");
            for mut m in messages_of(
                role,
                self.parts.get(&h).map(Vec::as_slice).unwrap_or(&[]),
                &self.fragments,
            ) {
                m.parent = up;
                m.time = self.time_of.get(&h).copied();
                if matches!(m.role, Role::Assistant | Role::ToolCall) {
                    m.model = self.model_of.get(&h).cloned();
                }
                m = m.with_extra("hash", json!(h));
                conv.messages.push(m);
                up = Some(conv.messages.len() - 1);
            }
            if let Some(u) = up {
                last_of.insert(h, u);
            }
        }
    }
}

/// The messages one stored message becomes: its text (with reasoning kept
/// beside it), then one tool call or tool result per such part.
fn messages_of(role: &str, parts: &[Vec<Sql>], fragments: &HashMap<i64, String>) -> Vec<Message> {
    // part columns: type, text, payload, tool_name, arguments, output, tool_call_id, content
    let mut texts = Vec::new();
    let mut reasoning = Vec::new();
    let mut attachments = Vec::new();
    let mut tools = Vec::new();
    for p in parts {
        let ty = text(&p[0]).unwrap_or_else(|| "text".into());
        let payload: Value = text(&p[2])
            .and_then(|s| convo_core::json::from_str_unique(&s).ok())
            .unwrap_or(Value::Null);
        let body = part_body(p, &payload, fragments);
        let pstr = |k: &str| payload.get(k).and_then(Value::as_str).map(str::to_owned);
        let name = text(&p[3])
            .or_else(|| pstr("name"))
            .unwrap_or_else(|| "tool".into());
        let call_id = text(&p[6]).or_else(|| pstr("tool_call_id"));
        match ty.as_str() {
            "text" => texts.push(body.unwrap_or_default()),
            "reasoning" => reasoning.push(body.unwrap_or_default()),
            "tool_call" => {
                let args = text(&p[4])
                    .map(arguments)
                    .or_else(|| payload.get("arguments").cloned())
                    .unwrap_or(Value::Null);
                tools.push(tool_call(name, args, call_id));
            }
            "tool_result" => {
                let output = text(&p[5])
                    .or_else(|| pstr("output"))
                    .or(body)
                    .unwrap_or_default();
                tools.push(tool_result(name, output, call_id));
            }
            _ => attachments.push(if payload.is_null() {
                json!({"type": ty})
            } else {
                payload
            }),
        }
    }
    let mut out = Vec::new();
    let has_text =
        texts.iter().any(|t| !t.is_empty()) || !reasoning.is_empty() || !attachments.is_empty();
    if has_text || tools.is_empty() {
        out.push(text_message(role, &texts, &reasoning, attachments));
    }
    out.extend(tools);
    out
}

/// A part's text: its `text` or `content` column, else its payload's
/// `text`, else its `text_ref` (literals and `fragments`) joined.
fn part_body(p: &[Sql], payload: &Value, fragments: &HashMap<i64, String>) -> Option<String> {
    text(&p[1])
        .or_else(|| text(&p[7]))
        .or_else(|| {
            payload
                .get("text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .or_else(|| {
            payload
                .get("text_ref")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .map(|r| {
                            r.get("literal")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                                .or_else(|| {
                                    r.get("fragment")
                                        .and_then(Value::as_i64)
                                        .and_then(|id| fragments.get(&id).cloned())
                                })
                                .unwrap_or_default()
                        })
                        .collect::<String>()
                })
        })
}

/// The message of a stored message's text parts (of its `role`), with
/// its reasoning and attachments.
fn text_message(
    role: &str,
    texts: &[String],
    reasoning: &[String],
    attachments: Vec<Value>,
) -> Message {
    let (role, speaker) = match role {
        "assistant" => (Role::Assistant, "assistant"),
        "system" => (Role::System, "system"),
        "tool" => (Role::Tool, "tool"),
        _ => (Role::User, "user"),
    };
    let mut m = Message::new(role, speaker, texts.join(""));
    if !reasoning.is_empty() {
        m = m.with_extra("reasoning", json!(reasoning.join("\n\n")));
    }
    if !attachments.is_empty() {
        m = m.with_extra("attachments", Value::Array(attachments));
    }
    m
}
