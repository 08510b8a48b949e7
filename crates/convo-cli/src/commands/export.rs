use super::import::format_error;
use super::{CmdResult, CommandError, Env, branch_name, find_session};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Write one timeline of a session as a conversation file.
///
/// Without -o the file goes to standard output (for clog, its chat.jsonl).
/// With -o the file is written whole or not at all (a temporary file
/// renamed into place); for clog, -o names the folder that receives the
/// conversation-{time}-{thread}/ folder with notes.jsonl and chat.jsonl.
/// With --all-branches, every timeline of the session goes into the folder
/// -o names, one file per timeline named after it ({branch}.convo, .json,
/// .jsonl, .md, .html; a folder {branch}/ for clog).
///
/// A Claude Code or Codex session (--format claude-code|codex) comes back
/// as the transcript it was imported from, byte for byte. With --branch it
/// becomes a new session file instead (a new session id, the branch's
/// history up to its last turn, leaving out what a rewind abandoned, and
/// the turns the branch got in convo): with --place it is written where the
/// agent looks (~/.claude/projects/<project>/, $CODEX_HOME/sessions/…) and
/// its id printed, ready for `claude --resume ID` / `codex resume ID`.
/// A Gemini CLI session (--format gemini-cli) comes back byte for byte;
/// with --branch it becomes a new chat file (--place: under
/// ~/.gemini/tmp/<project>/chats/, the project named as projects.json
/// names it, for `gemini --resume ID`).
/// An opencode session (--format opencode) comes back as its database
/// rows, an SQL script to run against opencode's database (`| sqlite3
/// ~/.local/share/opencode/opencode.db` puts back what is missing), or,
/// imported from the older JSON storage, as its files under the folder
/// -o names (`-o ~/.local/share/opencode/storage`), byte for byte; with
/// --branch it becomes a new session's rows (--place: written into
/// $XDG_DATA_HOME/opencode/opencode.db, for `opencode run --session ID`).
///
/// A session received over OTLP (`convo serve`, `convo otel`) comes back
/// as the export bodies it was sent (--format otlp -o FOLDER): one file
/// per export request, in the order received, named
/// {number}-{traces|logs}.{pb|json}, byte for byte as the exporter sent it
/// (after gunzipping), ready to POST to any OTLP/HTTP receiver.
///
/// A recording (--format recording) holds the whole session: every
/// timeline, one JSON line per node with its hash, payloads as text where
/// they are text; `convo import` reads it back hash-exact (the pytest
/// plugin's recordings; see docs/FORMATS.md).
///
/// Examples:
///   convo export Paris --format markdown | less
///   convo export Paris --format recording -o paris.jsonl
///   convo export Paris --branch retry --format convo -o retry.convo
///   convo export Paris --format html --all-branches -o paris/
///   convo export fix-migration --format claude-code > session.jsonl
///   convo export fix-migration --branch alt-1 --format claude-code --place
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ExportArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// The timeline to export [default: main]
    #[arg(long)]
    pub branch: Option<String>,
    /// The format to write
    #[arg(long, value_parser = ["convo", "clog", "session-json", "openai", "markdown", "html", "claude-code", "codex", "gemini-cli", "opencode", "otlp", "recording"])]
    pub format: String,
    /// (claude-code, codex, gemini-cli, opencode) write the branch as a new
    /// session where the agent finds it, and print its id
    #[arg(long, conflicts_with = "output")]
    pub place: bool,
    /// Write here instead of standard output
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Export every timeline of the session into the folder -o names
    #[arg(long, requires = "output", conflicts_with = "branch")]
    pub all_branches: bool,
}

pub fn run(env: &Env, a: ExportArgs) -> CmdResult {
    if a.format == "otlp" {
        return otlp_export(env, &a);
    }
    if a.format == "recording" {
        return recording_export(env, &a);
    }
    let branch = branch_name(a.branch.as_deref().unwrap_or("main"))?;
    if convo_formats::AGENT_FORMATS.contains(&a.format.as_str()) {
        return agent_export(env, &a, &branch);
    }
    if a.place {
        return Err(CommandError::user(
            "--place writes Claude Code, Codex, Gemini CLI and opencode sessions only",
        ));
    }
    let writer = convo_formats::writer(&a.format)
        .ok_or_else(|| CommandError::user(format!("`{}` cannot be exported", a.format)))?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    if a.all_branches {
        let dir = a
            .output
            .as_deref()
            .ok_or_else(|| CommandError::user("--all-branches needs -o FOLDER"))?;
        std::fs::create_dir_all(dir)
            .map_err(|e| CommandError::user(format!("cannot create {}: {e}", dir.display())))?;
        let ext = match a.format.as_str() {
            "convo" => "convo",
            "session-json" => "json",
            "openai" => "jsonl",
            "markdown" => "md",
            "html" => "html",
            _ => "",
        };
        let branches = store.branches(&s.id)?;
        let mut bar = crate::ui::Progress::new(branches.len() as u64, "timelines");
        for (i, b) in branches.into_iter().enumerate() {
            bar.set("exporting", i as u64);
            let conv = convo_llm::ledger::export(&mut store, &s, &b.name)?;
            let name = convo_core::text::component(b.name.as_str());
            if a.format == "clog" {
                let sub = dir.join(&name);
                let path = convo_formats::clog::write_folder(&conv, &sub).map_err(format_error)?;
                eprintln!("wrote {}", path.display());
            } else {
                let path = dir.join(format!("{name}.{ext}"));
                let bytes = writer.write(&conv).map_err(format_error)?;
                write_atomically(&path, &bytes)?;
                eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
            }
        }
        bar.finish();
        return Ok(ExitCode::SUCCESS);
    }
    let conv = convo_llm::ledger::export(&mut store, &s, &branch)?;
    match (&a.output, a.format.as_str()) {
        (Some(dir), "clog") => {
            let path = convo_formats::clog::write_folder(&conv, dir).map_err(format_error)?;
            eprintln!("wrote {}", path.display());
        }
        (Some(path), _) => {
            let bytes = writer.write(&conv).map_err(format_error)?;
            write_atomically(path, &bytes)?;
            eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
        }
        (None, _) => {
            let bytes = writer.write(&conv).map_err(format_error)?;
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--format recording`: the whole session, every timeline, node for node
/// with its hash (see `convo_llm::recording`).
fn recording_export(env: &Env, a: &ExportArgs) -> CmdResult {
    if a.branch.is_some() || a.all_branches || a.place {
        return Err(CommandError::user(
            "a recording holds every timeline of the session: --branch, --all-branches and --place do not apply",
        ));
    }
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let bytes = convo_llm::recording::write(&mut store, &s)?;
    match &a.output {
        Some(path) => write_atomically(path, &bytes)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Export as a coding agent's session file.
fn agent_export(env: &Env, a: &ExportArgs, branch: &convo_core::BranchName) -> CmdResult {
    if a.all_branches {
        return Err(CommandError::user(
            "--all-branches does not apply to coding agents' formats; export one --branch at a time",
        ));
    }
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let records = convo_llm::ledger::session_records(&mut store, &s.id)?;
    if records.is_empty() {
        return Err(CommandError::user(format!(
            "session {} was not imported from a {} transcript: it has no source lines to write",
            s.id, a.format
        )));
    }
    if a.branch.is_none() && !a.place {
        if a.format == "opencode" {
            return opencode_export(a, &records);
        }
        return write_out(a, &as_imported(&a.format, &records));
    }
    let conv = convo_llm::ledger::export(&mut store, &s, branch)?;
    let resumed = resumed(a, branch, &conv, &records)?;
    if a.place {
        return place(a, &resumed, &conv.meta);
    }
    eprintln!("new session id {}", resumed.id);
    write_out(a, &resumed.bytes)
}

type Records = [(String, u64, String)];

/// The transcript as it was imported: its source lines, in order.
fn as_imported(format: &str, records: &Records) -> Vec<u8> {
    if format == "gemini-cli" {
        return convo_formats::gemini_cli::file_bytes(records);
    }
    let mut out = Vec::new();
    for (file, _, raw) in records {
        if file.is_empty() {
            out.extend_from_slice(raw.as_bytes());
            out.push(b'\n');
        }
    }
    out
}

/// A timeline as a new session of the agent, resuming where the
/// transcript's last imported message leaves off.
struct Resumed {
    id: String,
    bytes: Vec<u8>,
    /// An opencode session is rows of its database, not a file.
    opencode: Option<convo_formats::opencode::Fork>,
}

fn resumed(
    a: &ExportArgs,
    branch: &convo_core::BranchName,
    conv: &convo_formats::Conversation,
    records: &Records,
) -> Result<Resumed, CommandError> {
    use convo_formats::{Role, claude_code, codex, gemini_cli};
    let msgs = conv.turns();
    let Some(leaf) = msgs.iter().rposition(|m| m.key.is_some()) else {
        return Err(CommandError::user(format!(
            "timeline {branch} holds no message imported from the transcript"
        )));
    };
    let turns: Vec<(Role, String, i64)> = msgs[leaf + 1..]
        .iter()
        .filter(|m| matches!(m.role, Role::User | Role::Assistant))
        .map(|m| (m.role, m.text.clone(), m.time.unwrap_or_else(super::now)))
        .collect();
    let mut out = Resumed {
        id: random_uuid(),
        bytes: Vec::new(),
        opencode: None,
    };
    let leaf_msg = msgs[leaf];
    let id = &out.id;
    out.bytes = match a.format.as_str() {
        "opencode" => {
            // The rows the branch's messages carry, in its order.
            let files: Vec<String> = msgs[..=leaf]
                .iter()
                .filter_map(|m| m.extra.get("records")?.as_array())
                .flatten()
                .filter_map(|r| Some(r.get("file")?.as_str()?.to_owned()))
                .collect();
            let fork = convo_formats::opencode::fork(
                records,
                &files,
                branch.as_str(),
                &turns,
                super::now(),
                id,
            )
            .map_err(format_error)?;
            out.id.clone_from(&fork.id);
            let bytes = fork.rows.script();
            out.opencode = Some(fork);
            bytes
        }
        "gemini-cli" => {
            let ids = gemini_ids(&msgs[..=leaf], records);
            let model = msgs.iter().rev().find_map(|m| m.model.clone());
            let extra = gemini_cli::turn_records(&turns, id, model.as_deref());
            gemini_cli::resume_file(records, &ids, id, super::now(), &extra)
                .map_err(format_error)?
        }
        "claude-code" => {
            let key = leaf_msg.key.clone().unwrap_or_default();
            let extra = claude_code::turn_records(&key, &turns, id, &conv.meta);
            claude_code::resume_file(records, &key, id, &extra).map_err(format_error)?
        }
        _ => {
            let upto = leaf_msg
                .extra
                .get("records")
                .and_then(|r| r.as_array())
                .and_then(|r| r.iter().filter_map(|x| x.get("line")?.as_u64()).max())
                .unwrap_or(0);
            codex::resume_file(records, upto, id, &codex::turn_records(&turns))
                .map_err(format_error)?
        }
    };
    Ok(out)
}

/// Each Gemini CLI message's id once, in the timeline's order: those its
/// messages' records hold (what rode with them included: the session's
/// context, tool results written as `user` messages; a `$set` of the
/// messages is the conversation up to there, in its order), then each
/// message's own (`id#call:…` keys are parts of the message `id`).
fn gemini_ids(msgs: &[&convo_formats::Message], records: &Records) -> Vec<String> {
    fn add(ids: &mut Vec<String>, id: String) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    // A record's bytes by line (a huge one is named, not held, in the
    // message: its bytes are in `records`).
    let by_line: std::collections::HashMap<u64, &str> = records
        .iter()
        .filter(|(f, _, _)| f.is_empty())
        .map(|(_, line, raw)| (*line, raw.as_str()))
        .collect();
    let mut ids: Vec<String> = Vec::new();
    for m in msgs {
        let recs = m.extra.get("records").and_then(|r| r.as_array());
        for r in recs.into_iter().flatten() {
            if r.get("file").is_some() {
                continue;
            }
            let line = r.get("line").and_then(|l| l.as_u64());
            if let Some(raw) = line.and_then(|l| by_line.get(&l)) {
                let (listed, whole) = convo_formats::gemini_cli::message_ids(raw);
                if whole {
                    ids.clear();
                }
                listed.into_iter().for_each(|id| add(&mut ids, id));
            }
        }
        if let Some(k) = &m.key {
            add(&mut ids, k.split('#').next().unwrap_or(k).to_owned());
        }
    }
    ids
}

/// `--place`: writes the resumed session where the agent looks for its
/// sessions, and prints its id.
fn place(
    a: &ExportArgs,
    r: &Resumed,
    meta: &serde_json::Map<String, serde_json::Value>,
) -> CmdResult {
    use convo_formats::{claude_code, codex, gemini_cli};
    let id = &r.id;
    if let Some(fork) = &r.opencode {
        let path = super::agents::agent_home("XDG_DATA_HOME", ".local/share")?
            .join("opencode")
            .join("opencode.db");
        fork.rows.apply(&path).map_err(format_error)?;
        eprintln!("wrote session {id} into {}", path.display());
    } else {
        let path = match a.format.as_str() {
            "gemini-cli" => {
                let hash = meta
                    .get("projectHash")
                    .and_then(|v| v.as_str())
                    .unwrap_or("unknown");
                let dir = super::agents::agent_home("GEMINI_CLI_HOME", "")?.join(".gemini");
                gemini_cli::chat_path(&dir, hash, super::now(), id)
            }
            "claude-code" => {
                let cwd = meta.get("cwd").and_then(|v| v.as_str()).unwrap_or("/");
                super::agents::agent_home("CLAUDE_CONFIG_DIR", ".claude")?
                    .join("projects")
                    .join(claude_code::project_folder(cwd))
                    .join(format!("{id}.jsonl"))
            }
            _ => super::agents::agent_home("CODEX_HOME", ".codex")?
                .join(codex::rollout_path(super::now(), id)),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| CommandError::user(format!("cannot create {}: {e}", dir.display())))?;
        }
        write_atomically(&path, &r.bytes)?;
        eprintln!("wrote {} ({} bytes)", path.display(), r.bytes.len());
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "{id}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to `--output` (atomically) or to stdout.
fn write_out(a: &ExportArgs, bytes: &[u8]) -> CmdResult {
    match &a.output {
        Some(path) => {
            write_atomically(path, bytes)?;
            eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An opencode session back: its rows as SQL, or its storage files.
fn opencode_export(a: &ExportArgs, records: &[(String, u64, String)]) -> CmdResult {
    let files = convo_formats::opencode::storage_files(records);
    if files.is_empty() {
        let bytes = convo_formats::opencode::sql_script(records).map_err(format_error)?;
        match &a.output {
            Some(path) => {
                write_atomically(path, &bytes)?;
                eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
            }
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)?;
                out.flush()?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let Some(dir) = &a.output else {
        return Err(CommandError::user(
            "this opencode session was imported from its JSON storage: its files need a folder",
        )
        .with_hint("convo export SESSION --format opencode -o FOLDER"));
    };
    for (rel, bytes) in &files {
        // Each part of the stored path is one safe component.
        let mut path = dir.clone();
        for c in rel.split('/') {
            path.push(convo_core::text::component(c));
        }
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)
                .map_err(|e| CommandError::user(format!("cannot create {}: {e}", d.display())))?;
        }
        write_atomically(&path, bytes)?;
    }
    eprintln!("wrote {} files under {}", files.len(), dir.display());
    Ok(ExitCode::SUCCESS)
}

/// A random version-4 UUID, as Claude Code and Codex name sessions.
fn random_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// Writes `bytes` to a temporary file beside `path` and renames it over
/// `path`, so a reader never sees half a file.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> CmdResult<()> {
    let fail =
        |e: std::io::Error| CommandError::user(format!("cannot write {}: {e}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CommandError::user(format!("{} is not a file path", path.display())))?;
    let tmp = dir.join(format!(".{name}.convo-tmp-{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

/// The OTLP export bodies a session was recorded from, one file each.
fn otlp_export(env: &Env, a: &ExportArgs) -> CmdResult {
    if a.branch.is_some() || a.all_branches || a.place {
        return Err(CommandError::user(
            "--format otlp writes the bodies a session was sent, whatever the timeline: leave out --branch, --all-branches and --place",
        ));
    }
    let dir = a.output.as_deref().ok_or_else(|| {
        CommandError::user("--format otlp writes one file per export: give -o FOLDER")
    })?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let bodies = store.otlp_exports(Some(&s.id))?;
    if bodies.is_empty() {
        return Err(CommandError::user(format!(
            "session {} has no OTLP export bodies: it was not received over OTLP (or before convo kept them)",
            s.id
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| CommandError::user(format!("cannot create {}: {e}", dir.display())))?;
    for b in &bodies {
        let (signal, enc) = b.media.split_once('/').unwrap_or((&b.media, "pb"));
        let ext = if enc == "json" { "json" } else { "pb" };
        let path = dir.join(format!("{:06}-{signal}.{ext}", b.seq));
        write_atomically(&path, &b.body)?;
    }
    eprintln!(
        "wrote {} export bodies ({} bytes) to {}",
        bodies.len(),
        bodies.iter().map(|b| b.body.len()).sum::<usize>(),
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
