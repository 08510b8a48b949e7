use super::{CmdResult, CommandError, Env, now};
use clap::Args;
use convo_formats::ledger::Outcome;
use convo_formats::{Conversation, IMPORT_FORMATS};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Import conversation files, all in one transaction.
///
/// Every path is read and checked before anything is written; a file that
/// does not parse stops the import with its error and nothing is stored.
/// Each conversation becomes a session whose id is derived from the format
/// and the conversation's own id (or content), so importing the same file
/// again creates nothing: those sessions are reported as already imported.
/// Prints a summary on standard error (sessions created, nodes, already
/// present); with -v also the id of each session created on standard
/// output, one per line, and with --json one document listing them.
///
/// Coding agents' transcripts (Claude Code's ~/.claude/projects, Codex's
/// ~/.codex/sessions: a file, a project folder or the whole folder) are
/// imported one session per transaction: a file that fails is reported and
/// the others go in. Every line is kept, so a re-import of a session that
/// grew adds only its new lines (same session), and an unchanged file is
/// skipped after a look at its size and time (kept in $CONVO_HOME/import-state/).
/// --watch keeps importing them as the agents write.
///
/// Examples:
///   convo import conversations.json          # a ChatGPT or Claude export
///   convo import ~/chats/*.convo -v          # and print the new session ids
///   convo import history.jsonl --format openai --agent support-bot --json
///   convo import ~/.claude/projects ~/.codex/sessions
///   convo import --watch ~/.claude/projects ~/.codex/sessions
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ImportArgs {
    /// Files or folders to import; a clog `storage/conversations/` folder imports every conversation in it
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The files' format
    #[arg(long, default_value = "auto", value_parser = [
        "auto", "convo", "clog", "session-json", "chatgpt", "claude", "sharegpt", "openai", "llm",
        "claude-code", "codex"
    ])]
    pub format: String,
    /// Agent name for the new sessions [default: from the file, else the format name]
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Also print the id of each session created, and each already present
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
    /// Keep importing coding agents' sessions as they are written (checks
    /// the folders every second; a file is imported once it has stopped
    /// growing); stop with Ctrl-C
    #[arg(long)]
    pub watch: bool,
}

pub fn run(env: &Env, a: ImportArgs) -> CmdResult {
    if let Some(agent) = &a.agent
        && agent.trim().is_empty()
    {
        return Err(CommandError::user("--agent must not be empty"));
    }
    let mut read: Vec<(&'static str, Conversation)> = Vec::new();
    let mut agent_paths: Vec<(&'static str, PathBuf)> = Vec::new();
    for given in &a.paths {
        // An unzipped ChatGPT or Claude export: the folder holding conversations.json.
        let export = given.join("conversations.json");
        let path = if given.is_dir() && !convo_formats::clog::is_clog_dir(given) && export.is_file()
        {
            &export
        } else {
            given
        };
        if !path.exists() {
            return Err(CommandError::user(format!(
                "{}: no such file or folder",
                path.display()
            )));
        }
        let format = if a.format == "auto" {
            convo_formats::detect(path).map_err(format_error)?
        } else {
            IMPORT_FORMATS
                .iter()
                .copied()
                .find(|f| *f == a.format)
                .ok_or_else(|| CommandError::user(format!("unknown format `{}`", a.format)))?
        };
        if convo_formats::AGENT_FORMATS.contains(&format) {
            agent_paths.push((format, path.clone()));
            continue;
        }
        if a.watch {
            return Err(CommandError::user(format!(
                "{}: --watch follows Claude Code and Codex sessions; this is {format}",
                path.display()
            )));
        }
        let reader = convo_formats::reader(format)
            .ok_or_else(|| CommandError::user(format!("`{format}` cannot be imported")))?;
        let got = reader.read_path(path).map_err(format_error)?;
        for w in &got.warnings {
            eprintln!("warning: {w}");
        }
        read.extend(got.conversations.into_iter().map(|c| (format, c)));
    }
    if !agent_paths.is_empty() {
        if !read.is_empty() {
            return Err(CommandError::user(
                "import coding agents' sessions apart from other files",
            ));
        }
        return super::agents::run(env, &agent_paths, &a);
    }
    let mut store = env.open()?;
    let refs: Vec<(&str, &Conversation)> = read.iter().map(|(f, c)| (*f, c)).collect();
    let mut bar = crate::ui::Progress::new(refs.len() as u64, "conversations");
    let outcomes = convo_formats::ledger::import_all_with_progress(
        &mut store,
        &refs,
        a.agent.as_deref(),
        now(),
        &mut |n| bar.set("importing", n as u64),
    )?;
    bar.finish();
    let (mut nodes, mut created, mut existing) = (0, Vec::new(), Vec::new());
    for o in &outcomes {
        match o {
            Outcome::Created {
                id,
                title,
                nodes: n,
                branches,
            } => {
                nodes += n;
                created.push(
                    json!({"id": id.to_string(), "title": title, "nodes": n, "branches": branches}),
                );
            }
            Outcome::Existing { id } | Outcome::Updated { id, .. } => existing.push(id.to_string()),
        }
    }
    if a.json {
        let v = json!({
            "created": created,
            "existing": existing,
            "sessions": created.len(),
            "nodes": nodes,
            "skipped": existing.len(),
        });
        crate::output::write_json(&mut crate::ui::Out::stdout(), &v)?;
    } else {
        if a.verbose {
            let mut out = crate::ui::Out::stdout();
            for c in &created {
                writeln!(out, "{}", c["id"].as_str().unwrap_or_default())?;
            }
            out.flush()?;
            for id in &existing {
                eprintln!("{id}: already imported, skipped");
            }
        }
        eprintln!(
            "imported {} session{} ({nodes} nodes) from {} path{}; {} already present, skipped",
            created.len(),
            if created.len() == 1 { "" } else { "s" },
            a.paths.len(),
            if a.paths.len() == 1 { "" } else { "s" },
            existing.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A format error as a CLI error; the message already names file, rule and place.
pub fn format_error(e: convo_formats::Error) -> CommandError {
    let hint = match e.rule {
        "unknown-format" => Some("pass --format"),
        "too-large" => Some("split the file, or import the conversations you need"),
        _ => None,
    };
    let mut err = CommandError::user(e.render());
    if let Some(h) = hint {
        err = err.with_hint(h);
    }
    err
}
