//! Per-session JSON (seed 000): one conversation per file.
//!
//! # Wire format
//!
//! ```json
//! {
//!   "open": "What about its population?",
//!   "session": "ses-abc12345-6789-0abc-def0-123456789abc",
//!   "agent": "researcher",
//!   "history": [
//!     {"user": "Tell me about Paris", "submission": "a1b2…", "at": "2026-02-08T14:30:05Z"},
//!     {"agent": "Paris is the capital of France…", "at": "2026-02-08T14:30:47Z"},
//!     {"user": "What about its population?", "submission": "f6e5…", "at": "2026-02-08T14:31:02Z"}
//!   ]
//! }
//! ```
//!
//! * `open`: the current unanswered input, or `null` when the conversation
//!   is at rest. A reader adds it as a last user turn unless `history`
//!   already ends with it; a writer sets it to the last user turn when no
//!   answer follows.
//! * `session`: the session id (`ses-{uuid}`); it names the conversation
//!   (imports are idempotent on it). `agent`: the agent's name.
//! * `history`: untagged entries told apart by their key: `user` (with
//!   `submission`, the id of the user input, and `at`, UTC ISO 8601) or
//!   `agent` (with `at`). Unknown keys of an entry are kept.
//!
//! Only user and agent turns exist in this format: a writer drops system
//! prompts and tool traffic.

use crate::error::{Error, Result};
use crate::json::{Ordered, iso_to_millis, millis_to_iso, parse};
use crate::model::{Conversation, Message, Read, Role};
use crate::{Reader, Writer};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The session JSON format.
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionJson;

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    open: Option<String>,
    session: String,
    agent: String,
    history: Vec<Map<String, Value>>,
}

impl Reader for SessionJson {
    fn name(&self) -> &'static str {
        "session-json"
    }
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read> {
        let f: File = parse(file, bytes)?;
        let mut messages = Vec::with_capacity(f.history.len() + 1);
        for (i, mut e) in f.history.into_iter().enumerate() {
            let path = format!("$.history[{i}]");
            let at = match e.remove("at") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(iso_to_millis(&s).ok_or_else(|| {
                    Error::new(
                        file,
                        "wrong-type",
                        format!("`at` is not an ISO 8601 time: {s:?}"),
                    )
                    .with_path(format!("{path}.at"))
                })?),
                Some(_) => {
                    return Err(Error::new(file, "wrong-type", "`at` must be a string")
                        .with_path(format!("{path}.at")));
                }
            };
            let (role, key) = if e.contains_key("user") {
                (Role::User, "user")
            } else if e.contains_key("agent") {
                (Role::Assistant, "agent")
            } else {
                return Err(Error::new(
                    file,
                    "history-entry",
                    "a history entry needs a `user` or an `agent` key",
                )
                .with_path(path));
            };
            let text = match e.remove(key) {
                Some(Value::String(s)) => s,
                _ => {
                    return Err(Error::new(
                        file,
                        "wrong-type",
                        format!("`{key}` must be a string"),
                    )
                    .with_path(format!("{path}.{key}")));
                }
            };
            let speaker = if role == Role::User {
                "user"
            } else {
                f.agent.as_str()
            };
            let mut m = Message::new(role, speaker, text).at(at);
            m.extra = e;
            messages.push(m);
        }
        if let Some(open) = f.open {
            let answered_last = messages
                .last()
                .is_some_and(|m| m.role == Role::User && m.text == open);
            if !answered_last {
                messages.push(Message::new(Role::User, "user", open));
            }
        }
        let mut c = Conversation::linear(messages);
        c.id = Some(f.session.clone());
        c.agent = Some(f.agent);
        c.meta.insert("session".into(), json!(f.session));
        Ok(Read::of(vec![c]))
    }
}

impl Writer for SessionJson {
    fn name(&self) -> &'static str {
        "session-json"
    }
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>> {
        let turns = conv.turns();
        let mut history = Vec::new();
        for m in &turns {
            let at = m.time.or(conv.created_at).map(millis_to_iso);
            let mut e: Vec<(String, Ordered)> = Vec::new();
            match m.role {
                Role::User => {
                    e.push(("user".into(), Ordered::V(json!(m.text))));
                    let sub =
                        m.extra.get("submission").cloned().unwrap_or_else(|| {
                            json!(convo_core::sha256(m.text.as_bytes()).to_hex())
                        });
                    e.push(("submission".into(), Ordered::V(sub)));
                }
                Role::Assistant => e.push(("agent".into(), Ordered::V(json!(m.text)))),
                _ => continue,
            }
            e.push(("at".into(), Ordered::V(json!(at))));
            for (k, v) in &m.extra {
                if !e.iter().any(|(x, _)| x == k) {
                    e.push((k.clone(), Ordered::V(v.clone())));
                }
            }
            history.push(Ordered::Obj(e));
        }
        let open = match turns
            .iter()
            .rev()
            .find(|m| matches!(m.role, Role::User | Role::Assistant))
        {
            Some(m) if m.role == Role::User => json!(m.text),
            _ => Value::Null,
        };
        let session = conv
            .meta
            .get("session")
            .cloned()
            .or_else(|| conv.id.clone().map(Value::String))
            .unwrap_or(Value::Null);
        let v = Ordered::obj([
            ("open", Ordered::V(open)),
            ("session", Ordered::V(session)),
            (
                "agent",
                Ordered::V(json!(conv.agent.clone().unwrap_or_else(|| "agent".into()))),
            ),
            ("history", Ordered::Arr(history)),
        ]);
        let mut out = v.pretty().into_bytes();
        out.push(b'\n');
        Ok(out)
    }
}
