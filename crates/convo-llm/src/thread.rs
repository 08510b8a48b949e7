//! Threading by conversation: where a call lands when no session is named.
//!
//! Every recorded conversation turn's `complete` carries `thread` in its
//! diagnostics: the SHA-256 of the conversation so far, request messages
//! plus the answer, each message in its canonical form
//! ([`normalize`](crate::api::normalize): JSON tool arguments parsed, so
//! whitespace and key order do not count; text parts and plain strings
//! alike; `null`s and provider-added fields dropped) and the list in
//! RFC 8785 canonical form. System and developer messages are left out:
//! they instruct the model, and an agent handing the conversation to
//! another (another system prompt, the same messages) continues it. A new request's key is the same hash over its
//! messages up to and including the last assistant message (what it
//! continues). A Responses API answer also names its timeline by its id
//! (`response:ID`, which `previous_response_id` continues) and a
//! `conversation` by its id (`conversation:ID`): in `thread_response` and
//! `thread_conversation`. A chat answer that calls tools is also known by
//! itself (`answer:HASH`, in `thread_response`): a request that sends it
//! back continues its turn even when the history before it was rewritten
//! (openai-agents hands a conversation to another agent with the history
//! summarized in one message).
//! Then, for a conversation call (chat completions, messages, responses):
//!
//! - a key names the head of a timeline: the call continues it;
//! - it names an earlier `complete` (the client edited or regenerated a
//!   later message, as in ChatGPT's tree of edits, or chained from an
//!   earlier response): the call goes on a new timeline `edit-N` forked
//!   at that `complete`;
//! - it names nothing, or the request has no assistant message yet: a new
//!   session (agent `proxy`, titled by the first human text,
//!   [`human_text`](crate::api::human_text): Claude Code's
//!   `<system-reminder>` and Codex's `<environment_context>` blocks are
//!   not a title).
//!
//! A call that fails with a status an SDK retries (408, 409, 429, 5xx)
//! leaves its turn open (`invoke`, `request`, `response` marked
//! `awaiting_retry`); the same messages again (a retry, or a router's
//! fallback to another model: [`crate::record::Exchange::retry_key`]) are
//! recorded as the next attempt in that turn, and the attempt that
//! succeeds (or fails for good) closes it with the `complete`. A
//! different call on that timeline closes the open turn first.
//!
//! Calls that are not a conversation (embeddings, models, moderations,
//! `count_tokens`, …) with no session named go to one session per proxy
//! run, titled `calls (proxy run …)`, never one session per call.
//!
//! What this process records is remembered in memory; anything else is
//! looked up in the store, where the three fields are indexed (SQLite
//! migration 0009, PostgreSQL 0007): one index probe per call, whatever
//! the number of sessions, so the first call after a restart costs no
//! more than the next (sessions whose agent is `proxy` only).

use crate::api::{self, Api};
use convo_core::BranchName;
mod land;
use convo_store::{Result, ThreadField, Tx};
pub use land::{Spot, continue_at, fork_at, free_branch, free_edit_branch, start_subagent};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// The agent name of sessions the proxy creates.
pub const PROXY_AGENT: &str = "proxy";

/// The key of what a request continues: its messages up to the last
/// assistant message; `None` for a conversation's first request (the
/// proxy reads it with the rest of the request: [`crate::body::Facts`]).
pub fn key_before(api: Api, req: Option<&Value>) -> Option<String> {
    crate::body::Facts::of_value(api, req?).messages?.before
}

/// The keys a request continues, most specific first: the Responses
/// API's `previous_response_id`, its `conversation`, then [`key_before`].
pub fn lookup_keys(api: Api, req: Option<&Value>) -> Vec<String> {
    req.map(|r| crate::body::Facts::of_value(api, r).lookup_keys())
        .unwrap_or_default()
}

/// The other keys a recorded turn can be continued by, each with the
/// diagnostics field its `complete` holds it in: its Responses API
/// answer's id (`thread_response`), the request's `conversation`
/// (`thread_conversation`), else the client's conversation identity there
/// ([`crate::body::client_key`]: found only to fork an edited first
/// message, never continued).
pub fn keys_also(
    api: Api,
    conversation: Option<&str>,
    client: Option<&str>,
    resp: Option<&Value>,
) -> Vec<(ThreadField, String)> {
    let mut out = Vec::new();
    if api == Api::Responses
        && let Some(id) = resp
            .filter(|r| r.get("object").and_then(Value::as_str) == Some("response"))
            .and_then(|r| r.get("id"))
            .and_then(Value::as_str)
    {
        out.push((ThreadField::Response, format!("response:{id}")));
    }
    if let Some(c) = conversation {
        out.push((ThreadField::Conversation, format!("conversation:{c}")));
    } else if let Some(c) = client {
        out.push((ThreadField::Conversation, c.to_owned()));
    }
    out
}

/// [`keys_also`] with the answer's own key ([`crate::body::answer_key`],
/// a tool-calling chat answer; in `thread_response`, which only the
/// Responses API uses otherwise).
pub fn keys_of_answer(
    api: Api,
    conversation: Option<&str>,
    client: Option<&str>,
    resp: Option<&Value>,
    answer: Option<&Value>,
) -> Vec<(ThreadField, String)> {
    let mut out = keys_also(api, conversation, client, resp);
    if api == Api::Chat
        && !out.iter().any(|(f, _)| *f == ThreadField::Response)
        && let Some(k) = answer.and_then(crate::body::answer_key)
    {
        out.push((ThreadField::Response, k));
    }
    out
}

/// A subagent's link to the call that started it: a recorded answer's
/// tool call (Claude Code's `Task`/`Agent`, an agent used as a tool)
/// whose string argument is the first human text of a new conversation.
/// Keys are `spawn:` + the SHA-256 of the trimmed text (kept in memory:
/// a subagent starts while the call that started it runs).
#[derive(Clone, Debug, PartialEq)]
pub struct Spawn {
    /// The key ([`spawn_key`]).
    pub key: String,
    /// The tool call's id (`toolu_…`, `call_…`), when it has one.
    pub tool_call_id: Option<String>,
    /// The tool's name.
    pub tool: Option<String>,
}

/// The key a text that could start a subagent is known by.
pub fn spawn_key(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty()).then(|| format!("spawn:{}", hex::encode(Sha256::digest(t.as_bytes()))))
}

/// The tool calls of an answer ([`api::reply`]) as subagents they could
/// start: one [`Spawn`] per string argument at the top of its arguments.
pub fn spawns_of_answer(api: Api, answer: Option<&Value>) -> Vec<Spawn> {
    let Some(a) = answer else {
        return Vec::new();
    };
    // (id, name, arguments) of each tool call.
    let calls: Vec<(Option<&str>, Option<&str>, Value)> = match api {
        Api::Messages => a
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .map(|b| {
                let input = b.get("input").cloned().unwrap_or(Value::Null);
                (str_at(b, "id"), str_at(b, "name"), input)
            })
            .collect(),
        Api::Chat => a
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let f = c.get("function").unwrap_or(&Value::Null);
                let args = f.get("arguments").map(api::parsed_arguments);
                (
                    str_at(c, "id"),
                    str_at(f, "name"),
                    args.unwrap_or(Value::Null),
                )
            })
            .collect(),
        Api::Responses => a
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
            .map(|i| {
                let args = i.get("arguments").map(api::parsed_arguments);
                (
                    str_at(i, "call_id"),
                    str_at(i, "name"),
                    args.unwrap_or(Value::Null),
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    calls
        .into_iter()
        .flat_map(|(id, name, args)| spawns_of_call(id, name, &args))
        .collect()
}

/// One tool call (its id, the tool's name, its parsed arguments) as the
/// subagents it could start: one [`Spawn`] per string argument at the top
/// of its arguments. What every way in reads (the proxy from an answer,
/// OTLP from a tool-call message).
pub fn spawns_of_call(id: Option<&str>, name: Option<&str>, args: &Value) -> Vec<Spawn> {
    args.as_object()
        .into_iter()
        .flat_map(|o| o.values())
        .filter_map(|v| v.as_str().and_then(spawn_key))
        .map(|key| Spawn {
            key,
            tool_call_id: id.map(str::to_owned),
            tool: name.map(str::to_owned),
        })
        .collect()
}

fn str_at<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// The key a conversation's first request is looked up by as a subagent
/// ([`spawn_key`] of its first human text); `None` for a request that
/// continues an answer.
pub fn spawned_by(api: Api, req: Option<&Value>) -> Option<String> {
    let msgs = api::messages(api, req)?;
    if msgs.iter().any(|m| api::role(m) == Some("assistant")) {
        return None;
    }
    spawn_key(&api::human_text(&msgs)?)
}

/// The diagnostics field a key is looked up in (`None`: kept in memory only).
pub fn field_of(key: &str) -> Option<ThreadField> {
    if key.starts_with("response:") || key.starts_with("answer:") {
        Some(ThreadField::Response)
    } else if key.starts_with("conversation:") || key.starts_with("client:") {
        Some(ThreadField::Conversation)
    } else if key.starts_with("retry:") {
        None
    } else {
        Some(ThreadField::Thread)
    }
}

/// Whether an SDK retries an answer with this status (the openai and
/// anthropic SDKs: 408, 409, 429 and every 5xx).
pub fn is_retried(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// The key of one request as a retry sends it again: the SHA-256 of its
/// canonical form (see [`crate::replay::Matcher`]; headers such as
/// `x-stainless-retry-count` do not count).
pub fn retry_key(method: &str, path: &str, body: &[u8]) -> String {
    let canon = crate::replay::canonical(method, path, &serde_json::Map::new(), body);
    let text = convo_core::json::canonical(&canon).unwrap_or_default();
    format!("retry:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// The key of the conversation after a call: its messages plus the answer.
pub fn key_after(api: Api, req: Option<&Value>, answer: Option<&Value>) -> Option<String> {
    let c = crate::body::Facts::of_value(api, req?).messages?;
    Some(c.after.key_with(answer?))
}

/// Conversation key → the turn that ended it: what this process
/// recorded, in memory; anything older is looked up in the store by its
/// indexed diagnostics field ([`ThreadIndex::find`]).
#[derive(Debug, Default)]
pub struct ThreadIndex {
    map: HashMap<String, Spot>,
    /// How many of the keys are retry keys (computing a request's retry
    /// key reads it whole, so it is done only when one awaits).
    retries: usize,
    /// Subagents that recorded answers could start ([`Spawn`]): the turn
    /// whose answer made the tool call, and the call.
    spawns: HashMap<String, (Spot, Spawn)>,
}

impl ThreadIndex {
    /// The turn a key names, from memory.
    pub fn get(&self, key: &str) -> Option<&Spot> {
        self.map.get(key)
    }

    /// Remembers a turn (the newest wins).
    pub fn insert(&mut self, key: String, spot: Spot) {
        let retry = key.starts_with("retry:");
        if self.map.insert(key, spot).is_none() && retry {
            self.retries += 1;
        }
    }

    /// Forgets a key.
    pub fn remove(&mut self, key: &str) {
        if self.map.remove(key).is_some() && key.starts_with("retry:") {
            self.retries -= 1;
        }
    }

    /// The call a subagent's first request was started by, from memory.
    pub fn spawn(&self, key: &str) -> Option<&(Spot, Spawn)> {
        self.spawns.get(key)
    }

    /// Whether any tool call could start a subagent.
    pub fn has_spawns(&self) -> bool {
        !self.spawns.is_empty()
    }

    /// Remembers a tool call that could start a subagent (the newest wins).
    pub fn insert_spawn(&mut self, spot: Spot, spawn: Spawn) {
        self.spawns.insert(spawn.key.clone(), (spot, spawn));
    }

    /// Whether a failed attempt may await its retry.
    pub fn awaits_retry(&self) -> bool {
        self.retries > 0
    }

    /// The turn a key names in the store (one index probe): the newest
    /// `complete` of a `proxy` session holding it, on the timeline whose
    /// head it is (else on `main`, so a call continuing it forks there).
    pub fn find(tx: &mut dyn Tx, key: &str) -> Result<Option<Spot>> {
        let Some(field) = field_of(key) else {
            return Ok(None);
        };
        let Some(hash) = tx.complete_by_thread(field, key)? else {
            return Ok(None);
        };
        let Some(node) = tx.node(&hash)? else {
            return Ok(None);
        };
        let session = node.node.session;
        match tx.session(&session)? {
            Some(s) if s.agent == PROXY_AGENT => {}
            _ => return Ok(None),
        }
        let branch = tx
            .branches(Some(&session))?
            .into_iter()
            .find(|b| b.head == Some(hash))
            .map_or_else(BranchName::main, |b| b.name);
        Ok(Some(Spot {
            session,
            branch,
            node: hash,
        }))
    }
}

/// A new conversation's session title: its first human text
/// ([`api::human_text`]), else its new input, else the call.
pub fn title_of(api: Api, req: Option<&Value>, method: &str, path: &str) -> String {
    match api::messages(api, req) {
        Some(m) => match api::human_text(&m) {
            Some(t) => title_from(t.as_bytes()),
            None => title_from(&api::new_input(&m)),
        },
        None => format!("{method} {path}"),
    }
}

/// A session title from a first input: its first line, at most 60 characters.
pub fn title_from(input: &[u8]) -> String {
    let text = String::from_utf8_lossy(input);
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut t: String = line.trim().chars().take(60).collect();
    if t.is_empty() {
        t = "proxy call".into();
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_next_request_continues_the_recorded_answer() {
        let req = json!({"messages":[{"role":"user","content":"hi"}]});
        let answer = json!({"role":"assistant","content":"hello","refusal":null});
        let after = key_after(Api::Chat, Some(&req), Some(&answer)).unwrap();
        let next = json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":"hello"},
            {"role":"user","content":"more"}]});
        assert_eq!(key_before(Api::Chat, Some(&next)), Some(after));
        assert_eq!(key_before(Api::Chat, Some(&req)), None);
    }

    #[test]
    fn a_tool_loop_with_re_serialized_arguments_continues_its_conversation() {
        let req = json!({"messages":[{"role":"user","content":"weather in Paris?"}]});
        let answer = json!({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
            "function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]});
        let after = key_after(Api::Chat, Some(&req), Some(&answer)).unwrap();
        // LangChain sends the arguments back re-serialized, content "" and
        // the text as parts.
        let next = json!({"messages":[
            {"role":"user","content":[{"type":"text","text":"weather in Paris?"}]},
            {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function",
                "function":{"name":"weather","arguments":"{\"city\": \"Paris\"}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"sunny"}]});
        assert_eq!(key_before(Api::Chat, Some(&next)), Some(after));
    }

    #[test]
    fn a_tool_calls_text_argument_is_what_a_subagent_it_starts_is_found_by() {
        // Claude Code's Task/Agent tool (Messages), an agent as a tool
        // (Chat, Responses): each string argument could start a subagent.
        let claude = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
            "name": "Agent", "input": {"description": "look", "prompt": " list the files ", "n": 2}}]});
        let spawns = spawns_of_answer(Api::Messages, Some(&claude));
        assert_eq!(spawns.len(), 2, "{spawns:?}");
        let sub = json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>context</system-reminder>"},
            {"type": "text", "text": "list the files"}]}]});
        let key = spawned_by(Api::Messages, Some(&sub)).unwrap();
        let hit = spawns.iter().find(|s| s.key == key).unwrap();
        assert_eq!(hit.tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(hit.tool.as_deref(), Some("Agent"));
        let chat = json!({"role": "assistant", "tool_calls": [{"id": "call_9", "type": "function",
            "function": {"name": "researcher", "arguments": "{\"input\": \"find papers\"}"}}]});
        let spawns = spawns_of_answer(Api::Chat, Some(&chat));
        let req = json!({"messages": [{"role": "system", "content": "you research"},
            {"role": "user", "content": "find papers"}]});
        assert_eq!(spawns[0].key, spawned_by(Api::Chat, Some(&req)).unwrap());
        let resp = json!([{"type": "function_call", "call_id": "call_3", "name": "writer",
            "arguments": "{\"input\": \"a poem\"}"}]);
        assert_eq!(
            spawns_of_answer(Api::Responses, Some(&resp))[0]
                .tool_call_id
                .as_deref(),
            Some("call_3")
        );
        // A request that continues an answer is no subagent's first.
        let later = json!({"messages": [{"role": "user", "content": "find papers"},
            {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]});
        assert_eq!(spawned_by(Api::Chat, Some(&later)), None);
    }

    #[test]
    fn responses_chains_are_continued_by_id() {
        let req =
            json!({"input":"hi","previous_response_id":"resp_1","conversation":{"id":"conv_9"}});
        assert_eq!(
            lookup_keys(Api::Responses, Some(&req)),
            vec![
                "response:resp_1".to_owned(),
                "conversation:conv_9".to_owned()
            ]
        );
        let resp = json!({"id":"resp_2","object":"response","output":[]});
        assert_eq!(
            keys_also(
                Api::Responses,
                Some("conv_9"),
                Some("client:x"),
                Some(&resp)
            ),
            vec![
                (ThreadField::Response, "response:resp_2".to_owned()),
                (ThreadField::Conversation, "conversation:conv_9".to_owned())
            ]
        );
        assert_eq!(field_of("retry:ab"), None);
        assert_eq!(field_of("0a1b"), Some(ThreadField::Thread));
        assert!(is_retried(429) && is_retried(503) && !is_retried(400));
        assert_eq!(
            retry_key("POST", "/v1/x", br#"{"a":1,"user":"x"}"#),
            retry_key("POST", "/v1/x", br#"{ "a": 1 }"#)
        );
    }
}
