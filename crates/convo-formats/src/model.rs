//! The neutral in-memory model every format reads into and writes from.
//!
//! A [`Conversation`] is a tree of [`Message`]s (a parent index per
//! message) plus named [`Timeline`]s, each a path from a root to one
//! message. Linear formats produce one chain and one timeline, `main`; a
//! ChatGPT export's edits and regenerations produce a real tree. Writers are
//! given a linear conversation: the timeline being exported.

use convo_core::Millis;
use serde_json::{Map, Value};

/// Who a message comes from, as far as the store mapping is concerned.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Role {
    /// Instructions to the model (a system prompt, custom instructions).
    System,
    /// A human's turn.
    User,
    /// A generative participant's answer.
    Assistant,
    /// The assistant calling a tool or service (`to` names it).
    ToolCall,
    /// A tool's or service's answer to a call.
    Tool,
}

impl Role {
    /// The lowercase name used in diagnostics (`system`, `user`, `assistant`,
    /// `tool_call`, `tool`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolCall => "tool_call",
            Role::Tool => "tool",
        }
    }

    /// The inverse of [`Role::as_str`].
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "system" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool_call" => Role::ToolCall,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// One message: one node of the conversation tree.
#[derive(Clone, PartialEq, Debug)]
pub struct Message {
    /// The message this one answers or continues; `None` for a root.
    pub parent: Option<usize>,
    /// What kind of turn it is.
    pub role: Role,
    /// Who sent it: a participant's name, `user`, `assistant`, a tool name.
    pub speaker: String,
    /// For a [`Role::ToolCall`]: the tool or service called.
    pub to: Option<String>,
    /// The text, exactly as in the source.
    pub text: String,
    /// When it was written, if the source says.
    pub time: Option<Millis>,
    /// The model that generated it, if known.
    pub model: Option<String>,
    /// Format-specific fields kept for a faithful export (ids, reasoning,
    /// content types, attachments, tool call ids…). A message read from a
    /// line-based agent transcript keeps its source lines under
    /// `records` (see [`crate::records`]).
    pub extra: Map<String, Value>,
    /// The source's stable id for this message (a Claude Code record
    /// `uuid`, a Codex line): a re-import of a longer version of the same
    /// file skips the messages whose key is already stored.
    pub key: Option<String>,
}

impl Message {
    /// A message with no parent, time, model or extra fields.
    pub fn new(role: Role, speaker: impl Into<String>, text: impl Into<String>) -> Self {
        Message {
            parent: None,
            role,
            speaker: speaker.into(),
            to: None,
            text: text.into(),
            time: None,
            model: None,
            extra: Map::new(),
            key: None,
        }
    }

    /// Sets the time.
    pub fn at(mut self, time: Option<Millis>) -> Self {
        self.time = time;
        self
    }

    /// Sets the model.
    pub fn with_model(mut self, model: Option<String>) -> Self {
        self.model = model;
        self
    }

    /// Adds an extra field (ignored when `value` is null).
    pub fn with_extra(mut self, key: &str, value: Value) -> Self {
        if !value.is_null() {
            self.extra.insert(key.to_owned(), value);
        }
        self
    }
}

/// A named path through the tree: from a root to `leaf`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Timeline {
    /// The branch name (`main` first).
    pub name: String,
    /// The last message of the timeline; `None` for an empty one.
    pub leaf: Option<usize>,
}

/// A conversation as read from a file, or to be written to one.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Conversation {
    /// The source's own identity for it (a conversation id, a thread id),
    /// used to name the session so importing twice creates nothing new.
    pub id: Option<String>,
    /// A title.
    pub title: Option<String>,
    /// The agent the conversation was held with (`chatgpt`, an agent name).
    pub agent: Option<String>,
    /// When it started.
    pub created_at: Option<Millis>,
    /// Conversation-level metadata kept for export: CONVO's `type`, `time`,
    /// `participants`, `languages` and unknown keys; clog's header fields…
    pub meta: Map<String, Value>,
    /// Every message of the tree, parents before children.
    pub messages: Vec<Message>,
    /// The timelines; the first is `main`.
    pub timelines: Vec<Timeline>,
}

impl Conversation {
    /// A linear conversation: each message answers the one before, one
    /// timeline `main`.
    pub fn linear(mut messages: Vec<Message>) -> Self {
        for (i, m) in messages.iter_mut().enumerate() {
            m.parent = i.checked_sub(1);
        }
        let leaf = messages.len().checked_sub(1);
        Conversation {
            messages,
            timelines: vec![Timeline {
                name: "main".into(),
                leaf,
            }],
            ..Conversation::default()
        }
    }

    /// The indices of the messages from a root to `leaf`, in order.
    /// Stops (rather than looping) on a malformed parent chain.
    pub fn path_to(&self, leaf: Option<usize>) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = leaf;
        while let Some(i) = cur {
            if i >= self.messages.len() || out.len() > self.messages.len() {
                break;
            }
            out.push(i);
            cur = self.messages[i].parent;
        }
        out.reverse();
        out
    }

    /// The messages of timeline `t` (0 is `main`), in order.
    pub fn timeline_messages(&self, t: usize) -> Vec<&Message> {
        let leaf = self.timelines.get(t).and_then(|t| t.leaf);
        self.path_to(leaf)
            .into_iter()
            .map(|i| &self.messages[i])
            .collect()
    }

    /// The main timeline as its own linear conversation (what writers take).
    pub fn main_only(&self) -> Conversation {
        let msgs = self.timeline_messages(0).into_iter().cloned().collect();
        let mut c = Conversation::linear(msgs);
        c.id = self.id.clone();
        c.title = self.title.clone();
        c.agent = self.agent.clone();
        c.created_at = self.created_at;
        c.meta = self.meta.clone();
        c
    }

    /// The messages of a linear conversation (its `main`).
    pub fn turns(&self) -> Vec<&Message> {
        self.timeline_messages(0)
    }

    /// The first time known: the conversation's, else its first message's.
    pub fn first_time(&self) -> Option<Millis> {
        self.created_at
            .or_else(|| self.messages.iter().find_map(|m| m.time))
    }
}

/// The timelines of a tree of messages: `main` ends at `main` (else at
/// the last leaf), every other leaf is `alt-N`, in message order.
pub fn leaf_timelines(messages: &[Message], main: Option<usize>) -> Vec<Timeline> {
    let mut has_child = vec![false; messages.len()];
    for m in messages {
        if let Some(p) = m.parent {
            has_child[p] = true;
        }
    }
    let leaves: Vec<usize> = (0..messages.len()).filter(|&i| !has_child[i]).collect();
    let main = main.or_else(|| leaves.last().copied());
    let mut timelines = vec![Timeline {
        name: "main".into(),
        leaf: main,
    }];
    for (n, leaf) in leaves.iter().filter(|l| Some(**l) != main).enumerate() {
        timelines.push(Timeline {
            name: format!("alt-{}", n + 1),
            leaf: Some(*leaf),
        });
    }
    timelines
}

/// What reading a file gave: conversations plus warnings worth showing.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Read {
    /// The conversations, in file order.
    pub conversations: Vec<Conversation>,
    /// Things that are allowed but suspicious (a CONVO file over 10 MiB…).
    pub warnings: Vec<String>,
}

impl Read {
    /// Conversations without warnings.
    pub fn of(conversations: Vec<Conversation>) -> Self {
        Read {
            conversations,
            warnings: Vec::new(),
        }
    }
}

/// A title for a conversation that has none: the first line of its first
/// user message, at most 60 characters (cut at a word when it can be).
pub fn derived_title(conv: &Conversation) -> Option<String> {
    let first = conv.messages.iter().find(|m| m.role == Role::User)?;
    title_of_text(&first.text)
}

/// [`derived_title`] of a first user message's text.
pub fn title_of_text(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let line: String = line.chars().filter(|c| !c.is_control()).collect();
    if line.chars().count() <= 60 {
        return Some(line);
    }
    let cut: String = line.chars().take(59).collect();
    let cut = match cut.rfind(' ') {
        Some(i) if i > 30 => cut[..i].to_owned(),
        _ => cut,
    };
    Some(format!("{}…", cut.trim_end()))
}
