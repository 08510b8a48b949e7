//! Conversation files in and out of convo, read and written without the
//! store.
//!
//! Every format is one module behind two small traits: a [`Reader`] turns a
//! file (or a folder, or an SQLite database) into [`Conversation`]s, the
//! neutral model of [`model`]; a [`Writer`] turns one linear conversation
//! back into bytes. Each module's documentation describes its wire format.
//!
//! ```
//! use convo_formats::reader;
//!
//! let line = br#"{"messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "18 C and sunny."}]}"#;
//! let read = reader("openai").unwrap().read_bytes("chat.jsonl", line)?;
//! let conv = &read.conversations[0];
//! assert_eq!(conv.messages.len(), 2);
//! # Ok::<(), convo_formats::Error>(())
//! ```
//!
//! Importing what a file holds into the store (what `convo import` does)
//! is `convo_llm::ledger`'s: it maps conversations into sessions and
//! timelines back out, driving a [`loader::Loader`] for the agent
//! transcripts read one message at a time.
//!
//! | format | read | write | module |
//! |---|---|---|---|
//! | CONVO (CONVO-FILE-SPEC v0.1.1 + `title`) | yes | yes | [`convo`] |
//! | clog folders (`notes.jsonl` + `chat.jsonl`) | yes | yes | [`clog`] |
//! | per-session JSON (`open`, `session`, `agent`, `history`) | yes | yes | [`session_json`] |
//! | ChatGPT data export (`conversations.json`) | yes | | [`chatgpt`] |
//! | Claude.ai export (`conversations.json`) | yes | | [`claude`] |
//! | ShareGPT JSON | yes | | [`sharegpt`] |
//! | OpenAI chat JSONL | yes | yes | [`openai`] |
//! | `llm`'s SQLite log (both schemas) | yes | | [`llm`] |
//! | Claude Code transcripts (`~/.claude/projects`) | yes | byte-identical, and a branch as a session to resume | [`claude_code`] |
//! | Codex rollouts (`~/.codex/sessions`) | yes | byte-identical, and a branch as a session to resume | [`codex`] |
//! | Gemini CLI sessions (`~/.gemini/tmp`) | yes | byte-identical (`.jsonl` and the legacy `.json`), and a branch as a chat to resume | [`gemini_cli`] |
//! | opencode sessions (`opencode.db`, `storage/`) | yes | its rows as SQL, its files byte for byte | [`opencode`] |
//! | Markdown | | yes | [`markdown`] |
//! | one self-contained HTML page | | yes | [`html`] |
//!
//! Nothing here reads the environment or the clock; the caller passes the
//! current time. Bad input is an [`Error`] naming the file, the rule, the
//! line and column or JSON path, never a panic.

pub mod chatgpt;
pub mod claude;
pub mod claude_code;
pub mod clog;
pub mod codex;
pub mod convo;
mod error;
pub mod gemini_cli;
pub mod html;
mod json;
pub mod llm;
pub mod loader;
pub mod markdown;
pub mod model;
pub mod openai;
pub mod opencode;
pub mod records;
pub mod session_json;
pub mod sharegpt;
mod tree;

pub use error::{Error, Location, Result, locate};
pub use model::{Conversation, Message, Read, Role, Timeline};

use std::path::Path;

/// Files larger than this are refused before they are read, so memory stays
/// bounded whatever is thrown at an import.
pub const MAX_INPUT_BYTES: u64 = 512 * 1024 * 1024;

/// Reads one format.
pub trait Reader {
    /// The format's name, as `--format` spells it.
    fn name(&self) -> &'static str;

    /// Reads the contents of one file. `file` names it in errors.
    fn read_bytes(&self, file: &str, bytes: &[u8]) -> Result<Read>;

    /// Reads a path. The default reads the file (refusing one larger than
    /// [`MAX_INPUT_BYTES`]) and calls [`Reader::read_bytes`]; folder and
    /// database formats override it.
    fn read_path(&self, path: &Path) -> Result<Read> {
        let bytes = read_file(path, MAX_INPUT_BYTES)?;
        self.read_bytes(&path.display().to_string(), &bytes)
    }
}

/// Writes one format.
pub trait Writer {
    /// The format's name, as `--format` spells it.
    fn name(&self) -> &'static str;

    /// Writes the main timeline of `conv` (exports pass a linear one).
    fn write(&self, conv: &Conversation) -> Result<Vec<u8>>;
}

/// What a path is when it is not a regular file (a symbolic link is
/// followed): `Some("a FIFO")`, a device, a socket, a folder; `None` for a
/// regular file or a path that cannot be looked at (opening it says why).
pub fn not_regular(path: &Path) -> Option<&'static str> {
    let meta = std::fs::metadata(path).ok()?;
    kind_of(&meta.file_type())
}

fn kind_of(t: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a folder")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else {
        Some("not a regular file")
    }
}

/// Opens a file to import from: the one place this crate opens what it
/// reads. Whatever is not a regular file (a FIFO named `*.jsonl`, a link to
/// `/dev/zero`, a socket, a device) is refused (rule `not-a-file`) before
/// it is opened, so reading never blocks on a pipe nor runs forever.
pub fn open_file(path: &Path) -> Result<std::fs::File> {
    let name = path.display().to_string();
    let io = |e: std::io::Error| Error::new(&name, "io", format!("cannot read the file: {e}"));
    let refuse = |what: &str| {
        Error::new(
            &name,
            "not-a-file",
            format!("{what}, not a regular file; skipped"),
        )
    };
    if let Some(what) = not_regular(path) {
        return Err(refuse(what));
    }
    let f = std::fs::File::open(path).map_err(io)?;
    // Swapped for something else since it was looked at.
    if let Some(what) = kind_of(&f.metadata().map_err(io)?.file_type()) {
        return Err(refuse(what));
    }
    Ok(f)
}

/// Reads a whole file, refusing one over `limit` bytes with a clear error.
pub fn read_file(path: &Path, limit: u64) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let name = path.display().to_string();
    let io = |e: std::io::Error| Error::new(&name, "io", format!("cannot read the file: {e}"));
    let f = open_file(path)?;
    let len = f.metadata().map_err(io)?.len();
    if len > limit {
        return Err(Error::new(
            &name,
            "too-large",
            format!(
                "the file is {} MiB; convo reads files of at most {} MiB",
                len / (1024 * 1024),
                limit / (1024 * 1024)
            ),
        ));
    }
    let mut buf = Vec::with_capacity(len as usize);
    f.take(limit + 1).read_to_end(&mut buf).map_err(io)?;
    if buf.len() as u64 > limit {
        return Err(Error::new(
            &name,
            "too-large",
            format!(
                "the file grew past {} MiB while being read",
                limit / (1024 * 1024)
            ),
        ));
    }
    Ok(buf)
}

/// The names `--format` accepts for import, in the order `auto` tries them.
pub const IMPORT_FORMATS: &[&str] = &[
    "convo",
    "clog",
    "session-json",
    "chatgpt",
    "claude",
    "sharegpt",
    "openai",
    "llm",
    "claude-code",
    "codex",
    "gemini-cli",
    "opencode",
];

/// The formats whose sessions keep every source line (`extra.records`):
/// re-importing a longer file adds what is new, and an export gives the
/// file back byte for byte.
pub const AGENT_FORMATS: &[&str] = &["claude-code", "codex", "gemini-cli", "opencode"];

/// The names `--format` accepts for export.
pub const EXPORT_FORMATS: &[&str] = &[
    "convo",
    "clog",
    "session-json",
    "openai",
    "markdown",
    "html",
];

/// The reader for a format name.
pub fn reader(name: &str) -> Option<Box<dyn Reader>> {
    Some(match name {
        "convo" => Box::new(convo::Convo),
        "clog" => Box::new(clog::Clog),
        "session-json" => Box::new(session_json::SessionJson),
        "chatgpt" => Box::new(chatgpt::ChatGpt),
        "claude" => Box::new(claude::Claude),
        "sharegpt" => Box::new(sharegpt::ShareGpt),
        "openai" => Box::new(openai::OpenAi),
        "llm" => Box::new(llm::Llm),
        "claude-code" => Box::new(claude_code::ClaudeCode),
        "codex" => Box::new(codex::Codex),
        "gemini-cli" => Box::new(gemini_cli::GeminiCli),
        "opencode" => Box::new(opencode::OpenCode),
        _ => return None,
    })
}

/// Indexes a session file of an agent transcript format (Claude Code,
/// Codex, Gemini CLI) for an import that reads its messages one at a
/// time (`convo_llm::ledger::import_lazy`); `None` for a format read whole.
pub fn open_lazy(name: &str, path: &Path) -> Option<Result<Option<records::Session<'static>>>> {
    match name {
        "claude-code" => Some(claude_code::open_session(path)),
        "codex" => Some(codex::open_rollout(path)),
        "gemini-cli" => Some(gemini_cli::open_session(path)),
        _ => None,
    }
}

/// The session id a coding agent's transcript names, read from its first
/// lines (Claude Code, Codex); `None` when they do not say, or for another
/// format.
pub fn session_identity(name: &str, path: &Path) -> Option<String> {
    match name {
        "claude-code" => claude_code::session_identity(path),
        "codex" => codex::session_identity(path),
        _ => None,
    }
}

/// The lines of a transcript written after those an earlier import stored
/// (`claude_code::open_tail`, `codex::open_tail`); `None` for a format
/// without such a reader.
pub fn open_tail(
    name: &str,
    path: &Path,
    tail: &records::Tail,
    stored: &mut dyn FnMut(&str) -> bool,
) -> Option<Result<Option<records::Session<'static>>>> {
    match name {
        "claude-code" => Some(claude_code::open_tail(path, tail, stored)),
        "codex" => Some(codex::open_tail(path, tail, stored)),
        _ => None,
    }
}

/// The writer for a format name.
pub fn writer(name: &str) -> Option<Box<dyn Writer>> {
    Some(match name {
        "convo" => Box::new(convo::Convo),
        "clog" => Box::new(clog::Clog),
        "session-json" => Box::new(session_json::SessionJson),
        "openai" => Box::new(openai::OpenAi),
        "markdown" => Box::new(markdown::Markdown),
        "html" => Box::new(html::Html),
        _ => return None,
    })
}

/// Where each coding agent keeps its sessions, under a home folder.
pub const AGENT_HOMES: &[(&str, &str)] = &[
    ("claude-code", ".claude/projects"),
    ("codex", ".codex/sessions"),
    ("gemini-cli", ".gemini/tmp"),
    ("opencode", ".local/share/opencode"),
];

/// The coding agents' folders a home folder holds (`convo import ~`), each
/// with its format; empty when `path` is not such a home.
pub fn agent_homes(path: &Path) -> Vec<(&'static str, std::path::PathBuf)> {
    AGENT_HOMES
        .iter()
        .map(|(format, sub)| (*format, path.join(sub)))
        .filter(|(_, p)| p.is_dir())
        .collect()
}

/// Guesses the format of a path from its shape and first bytes, or says
/// why it cannot.
pub fn detect(path: &Path) -> Result<&'static str> {
    let name = path.display().to_string();
    if path.is_dir() {
        if clog::is_clog_dir(path) {
            return Ok("clog");
        }
        if let Some(f) = codex::rollout_files(path)
            .iter()
            .find(|f| not_regular(f).is_none())
            && detect(f) == Ok("codex")
        {
            return Ok("codex");
        }
        if let Some(f) = claude_code::session_files(path)
            .iter()
            .find(|f| not_regular(f).is_none())
            && detect(f) == Ok("claude-code")
        {
            return Ok("claude-code");
        }
        if let Some(f) = gemini_cli::session_files(path)
            .iter()
            .find(|f| not_regular(f).is_none())
            && detect(f) == Ok("gemini-cli")
        {
            return Ok("gemini-cli");
        }
        if !opencode::sources(path).is_empty() {
            return Ok("opencode");
        }
        return Err(Error::new(
            &name,
            "unknown-format",
            "a folder must be a clog conversation (holding chat.jsonl) or a folder of them, Claude Code projects, Codex sessions, Gemini CLI chats or opencode's data",
        ));
    }
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if file_name == "chat.jsonl" || file_name == "notes.jsonl" {
        return Ok("clog");
    }
    let head = read_head(path, 64 * 1024)?;
    if head.starts_with(b"SQLite format 3\0") {
        if opencode::is_db(path) {
            return Ok("opencode");
        }
        return Ok("llm");
    }
    let text = String::from_utf8_lossy(&head);
    if codex::looks_like(&text) {
        return Ok("codex");
    }
    if claude_code::looks_like(&text) {
        return Ok("claude-code");
    }
    if gemini_cli::looks_like(&text) {
        return Ok("gemini-cli");
    }
    let t = text.trim_start_matches('\u{feff}').trim_start();
    let has = |k: &str| text.contains(&format!("\"{k}\""));
    if t.starts_with('[') || t.starts_with('{') {
        if has("mapping") {
            return Ok("chatgpt");
        }
        if has("chat_messages") {
            return Ok("claude");
        }
        if has("history") && has("session") {
            return Ok("session-json");
        }
        if has("conversations") {
            return Ok("sharegpt");
        }
        if has("messages") {
            return Ok("openai");
        }
        if t.starts_with('{') && has("type") && has("conversation-header") {
            return Ok("clog");
        }
    }
    if text.contains("### @") || text.contains("\n----") {
        return Ok("convo");
    }
    Err(Error::new(
        &name,
        "unknown-format",
        "cannot tell which format this is; pass --format convo|clog|session-json|chatgpt|claude|sharegpt|openai|llm|claude-code|codex|gemini-cli|opencode",
    ))
}

fn read_head(path: &Path, n: u64) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let mut buf = Vec::new();
    open_file(path)?
        .take(n)
        .read_to_end(&mut buf)
        .map_err(|e| {
            Error::new(
                &path.display().to_string(),
                "io",
                format!("cannot read the file: {e}"),
            )
        })?;
    Ok(buf)
}
