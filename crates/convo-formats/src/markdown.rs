//! Markdown export: a conversation to read, not to read back.
//!
//! # Wire format
//!
//! ```text
//! # Title
//!
//! *agent* · 2026-02-08 14:30:05 UTC · 4 messages
//!
//! ### user · 2026-02-08 14:30:05 UTC
//!
//! Tell me about Paris
//!
//! ### assistant (gpt-4o) · 2026-02-08 14:30:47 UTC
//!
//! Paris is the capital of France…
//! ```
//!
//! Each turn is a level-3 heading (speaker, model, time) followed by the
//! text as it is. Tool calls and tool answers are fenced code blocks (the
//! fence longer than any backtick run inside); system prompts, reasoning and
//! thinking are block quotes; attachments' extracted text follows its turn.
//! For a file convo reads back, export `convo`.

use crate::Writer;
use crate::error::Result;
use crate::model::{Conversation, Message, Role};
use serde_json::Value;

/// The Markdown writer.
#[derive(Clone, Copy, Debug, Default)]
pub struct Markdown;

/// `2026-02-08 14:30:05 UTC`.
pub fn human_time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        Err(_) => String::new(),
    }
}

fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn quote(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                ">".to_owned()
            } else {
                format!("> {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A one-line label for a turn: speaker, model or tool, time.
pub fn label(m: &Message) -> String {
    let mut s = m.speaker.clone();
    match m.role {
        Role::ToolCall => s.push_str(&format!(" → {}", m.to.as_deref().unwrap_or("tool"))),
        Role::Tool => s.push_str(" (tool)"),
        Role::System => s.push_str(" (system)"),
        _ => {}
    }
    if let Some(model) = &m.model {
        s.push_str(&format!(" ({model})"));
    }
    if let Some(t) = m.time {
        s.push_str(&format!(" · {}", human_time(t)));
    }
    s
}

/// Attachments' names and extracted text, and reasoning kept in extras.
pub fn side_texts(m: &Message) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for key in ["reasoning", "thoughts", "thinking"] {
        if let Some(t) = m
            .extra
            .get(key)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push((key.to_owned(), t.to_owned()));
        }
    }
    if let Some(Value::Array(a)) = m.extra.get("attachments") {
        for at in a {
            let name = at
                .get("file_name")
                .and_then(Value::as_str)
                .unwrap_or("attachment");
            let text = at
                .get("extracted_content")
                .and_then(Value::as_str)
                .unwrap_or("");
            out.push((format!("attachment {name}"), text.to_owned()));
        }
    }
    out
}

impl Writer for Markdown {
    fn name(&self) -> &'static str {
        "markdown"
    }
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>> {
        let turns = conv.turns();
        let mut s = format!("# {}\n\n", conv.title.as_deref().unwrap_or("Conversation"));
        let mut info = Vec::new();
        if let Some(a) = &conv.agent {
            info.push(format!("*{a}*"));
        }
        if let Some(t) = conv.first_time() {
            info.push(human_time(t));
        }
        info.push(format!("{} messages", turns.len()));
        s.push_str(&info.join(" · "));
        s.push_str("\n\n");
        for m in turns {
            s.push_str(&format!("### {}\n\n", label(m)));
            match m.role {
                Role::ToolCall | Role::Tool => {
                    let f = fence(&m.text);
                    s.push_str(&format!("{f}\n{}\n{f}\n\n", m.text));
                }
                Role::System => s.push_str(&format!("{}\n\n", quote(&m.text))),
                _ => s.push_str(&format!("{}\n\n", m.text.trim_end())),
            }
            for (what, text) in side_texts(m) {
                let f = fence(&text);
                s.push_str(&format!("*{what}:*\n\n{f}\n{text}\n{f}\n\n"));
            }
        }
        Ok(s.into_bytes())
    }
}
