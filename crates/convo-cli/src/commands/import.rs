use super::{CmdResult, CommandError, Env, now};
use clap::Args;
use convo_formats::{Conversation, IMPORT_FORMATS};
use convo_llm::ledger::Outcome;
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
/// ~/.codex/sessions: a file, a project folder or the whole folder;
/// Gemini CLI's ~/.gemini/tmp; opencode's ~/.local/share/opencode) are
/// imported by groups of files, a transaction each: a file that fails is
/// reported alone and the others go in. Every line is kept, so a re-import of a session that
/// grew adds only its new lines (same session), and an unchanged file is
/// skipped after a look at its size and time (kept in the store, `import_files`).
/// --watch keeps importing them as the agents write.
///
/// Examples:
///   convo import conversations.json          # a ChatGPT or Claude export
///   convo import ~/chats/*.convo -v          # and print the new session ids
///   convo import history.jsonl --format openai --agent support-bot --json
///   convo import ~/.claude/projects ~/.codex/sessions ~/.gemini/tmp
///   convo import ~                 # every agent's sessions under a home
///   convo import ~/.local/share/opencode          # opencode.db (or storage/)
///   convo import --watch ~/.claude/projects ~/.codex/sessions
///   convo import --redact-secrets ~/.claude/projects
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ImportArgs {
    /// Files or folders to import; a clog `storage/conversations/` folder imports every conversation in it
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The files' format
    #[arg(long, default_value = "auto", value_parser = [
        "auto", "convo", "clog", "session-json", "chatgpt", "claude", "sharegpt", "openai", "llm",
        "claude-code", "codex", "gemini-cli", "opencode", "recording"
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
    /// Replace credentials (API keys, bearer tokens, private keys,
    /// key-like `name=value` pairs) by REDACTED before storing; the report
    /// says how many. Export then gives the redacted lines
    #[arg(long)]
    pub redact_secrets: bool,
}

pub fn run(env: &Env, a: ImportArgs) -> CmdResult {
    if let Some(agent) = &a.agent
        && agent.trim().is_empty()
    {
        return Err(CommandError::user("--agent must not be empty"));
    }
    if a.format == "recording"
        || (a.format == "auto" && a.paths.iter().all(|p| convo_llm::recording::sniff(p)))
    {
        return import_recordings(env, &a);
    }
    let (mut read, agent_paths) = read_paths(&a)?;
    let mut redacted = Redacted::default();
    if a.redact_secrets {
        for (_, c) in &mut read {
            redacted.merge(&redact_conversation(c));
        }
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
    let outcomes = convo_llm::ledger::import_all_with_progress(
        &mut store,
        &refs,
        a.agent.as_deref(),
        now(),
        &mut |n| bar.set("importing", n as u64),
    )?;
    bar.finish();
    report(&a, &outcomes, &redacted)?;
    Ok(ExitCode::SUCCESS)
}

/// The conversations read from the given paths (each with its format),
/// and the coding agents' paths (imported apart, [`super::agents::run`]).
type ReadPaths = (
    Vec<(&'static str, Conversation)>,
    Vec<(&'static str, PathBuf)>,
);

/// Reads the given paths ([`ReadPaths`]).
fn read_paths(a: &ImportArgs) -> CmdResult<ReadPaths> {
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
        // A home folder: every coding agent's sessions in it.
        let homes = if a.format == "auto" && path.is_dir() {
            convo_formats::agent_homes(path)
        } else {
            Vec::new()
        };
        if !homes.is_empty() {
            agent_paths.extend(homes);
            continue;
        }
        let format = if a.format == "auto" {
            detect(path, a.watch)?
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
                "{}: --watch follows coding agents' sessions (Claude Code, Codex, Gemini CLI, opencode); this is {format}",
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
    Ok((read, agent_paths))
}

/// Reports an import: the sessions created and those already present
/// (with --json one document; with -v their ids), and what was redacted.
fn report(a: &ImportArgs, outcomes: &[Outcome], redacted: &Redacted) -> CmdResult<()> {
    let (mut nodes, mut created, mut existing) = (0, Vec::new(), Vec::new());
    for o in outcomes {
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
            "redacted": {"secrets": redacted.secrets, "messages": redacted.messages,
                         "rules": redacted.rules},
        });
        crate::output::write_json(&mut crate::ui::Out::stdout(), &v)?;
        return Ok(());
    }
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
    if a.redact_secrets {
        eprintln!(
            "redacted {} secret{} in {} message{}{}",
            redacted.secrets,
            if redacted.secrets == 1 { "" } else { "s" },
            redacted.messages,
            if redacted.messages == 1 { "" } else { "s" },
            if redacted.rules.is_empty() {
                String::new()
            } else {
                format!(" ({})", redacted.rules_text())
            },
        );
    }
    Ok(())
}

/// `--format recording`: each file read and checked hash by hash, then
/// written hash-exact, all in one transaction per file.
fn import_recordings(env: &Env, a: &ImportArgs) -> CmdResult {
    if a.watch || a.redact_secrets || a.agent.is_some() {
        return Err(CommandError::user(
            "a recording is imported as recorded: --watch, --redact-secrets and --agent do not apply",
        ));
    }
    let mut read = Vec::with_capacity(a.paths.len());
    for path in &a.paths {
        let bytes = std::fs::read(path)
            .map_err(|e| CommandError::user(format!("cannot read {}: {e}", path.display())))?;
        let name = path.display().to_string();
        read.push(convo_llm::recording::read(&name, &bytes).map_err(format_error)?);
    }
    let mut store = env.open()?;
    let (mut nodes, mut created, mut existing) = (0, Vec::new(), Vec::new());
    for rec in &read {
        let id = rec.session.id.to_string();
        match convo_llm::recording::load(&mut store, rec)? {
            convo_llm::recording::Loaded::Created { nodes: n, branches } => {
                nodes += n;
                created.push(
                    json!({"id": id, "title": rec.session.title, "nodes": n, "branches": branches}),
                );
            }
            convo_llm::recording::Loaded::Existing => existing.push(id),
        }
    }
    if a.json {
        let v = json!({
            "created": created, "existing": existing, "sessions": created.len(),
            "nodes": nodes, "skipped": existing.len(),
        });
        crate::output::write_json(&mut crate::ui::Out::stdout(), &v)?;
    } else {
        if a.verbose {
            for c in &created {
                println!("{}", c["id"].as_str().unwrap_or_default());
            }
        }
        eprintln!(
            "imported {} recording(s) ({nodes} nodes, every hash checked); {} already present",
            created.len(),
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

/// What `--redact-secrets` replaced: how many secrets, in how many
/// messages, and which rule found each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redacted {
    /// Credentials replaced (message texts, extra fields and source lines).
    pub secrets: usize,
    /// Messages touched.
    pub messages: usize,
    /// Secrets by the rule that found them: a gitleaks rule id or one of
    /// convo's (`convo-…`), [`convo_core::secrets`].
    pub rules: Kinds,
}

/// Secrets by the rule that found them.
pub type Kinds = std::collections::BTreeMap<&'static str, usize>;

/// `--redact-secrets`: replaces credentials in a conversation before it is
/// stored, each by `REDACTED`, as [`convo_core::secrets`] finds them:
/// gitleaks' vendored rule set (providers' keys and tokens, key-like
/// assignments with enough entropy, private keys, JWTs) and convo's own
/// (`.env`-style assignments to credential-named variables, `Bearer` and
/// `Basic` credentials, provider key prefixes, PEM blocks). It reads every
/// string of a message: its text, its extra fields, and each source line
/// it keeps (`extra.records[].raw`, parsed as JSON so only string values
/// change; numbers and keys never do). A string that is one identifier as
/// a whole (a UUID, a hex digest, an API object id such as `toolu_…`) is
/// left: those thread the transcript. A source line that changed is
/// written back as JSON (so export gives the redacted line, not the
/// original bytes) and keeps `original_sha256`, the SHA-256 of the line as
/// it was on disk, so the original can be matched but not recovered.
pub fn redact_conversation(c: &mut Conversation) -> Redacted {
    let mut out = Redacted::default();
    for m in &mut c.messages {
        out.add(redact_message(m));
    }
    out
}

impl Redacted {
    /// Counts a message in which the secrets `found` were replaced.
    pub fn add(&mut self, found: Kinds) {
        let n: usize = found.values().sum();
        if n > 0 {
            self.secrets += n;
            self.messages += 1;
            for (k, v) in found {
                *self.rules.entry(k).or_default() += v;
            }
        }
    }

    /// Adds what another file or conversation had.
    pub fn merge(&mut self, other: &Redacted) {
        self.secrets += other.secrets;
        self.messages += other.messages;
        for (k, v) in &other.rules {
            *self.rules.entry(k).or_default() += v;
        }
    }

    /// `github-pat 2, generic-api-key 1`: the rules, most found first.
    pub fn rules_text(&self) -> String {
        let mut r: Vec<(&&str, &usize)> = self.rules.iter().collect();
        r.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        r.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// [`redact_conversation`] of one message: the secrets replaced, by rule.
pub fn redact_message(m: &mut convo_formats::Message) -> Kinds {
    let mut found = Kinds::new();
    redact_text(&mut m.text, &mut found);
    for (k, v) in m.extra.iter_mut() {
        if k == "records" {
            redact_records(v, &mut found);
        } else {
            redact_value(v, &mut found);
        }
    }
    found
}

fn redact_records(v: &mut serde_json::Value, found: &mut Kinds) -> usize {
    let Some(records) = v.as_array_mut() else {
        return 0;
    };
    let mut n = 0;
    for r in records {
        let Some(raw) = r.get("raw").and_then(serde_json::Value::as_str) else {
            continue;
        };
        let Ok(mut line) = serde_json::from_str::<serde_json::Value>(raw) else {
            // Not JSON (a cut line): redact it as text.
            let mut text = raw.to_owned();
            let k = redact_text(&mut text, found);
            if k > 0 {
                r["original_sha256"] = json!(convo_core::sha256(raw.as_bytes()).to_hex());
                r["raw"] = json!(text);
                n += k;
            }
            continue;
        };
        let k = redact_value(&mut line, found);
        if k > 0 {
            r["original_sha256"] = json!(convo_core::sha256(raw.as_bytes()).to_hex());
            r["raw"] = json!(line.to_string());
            n += k;
        }
    }
    n
}

fn redact_value(v: &mut serde_json::Value, found: &mut Kinds) -> usize {
    use serde_json::Value;
    match v {
        // JSON inside a string (an opencode row's `data` column) is
        // redacted as JSON, so it stays JSON: its keys are not text.
        Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
            match serde_json::from_str::<Value>(s) {
                Ok(mut inner @ (Value::Object(_) | Value::Array(_))) => {
                    let n = redact_value(&mut inner, found);
                    if n > 0 {
                        *s = inner.to_string();
                    }
                    n
                }
                _ => redact_text(s, found),
            }
        }
        Value::String(s) => redact_text(s, found),
        Value::Array(a) => a.iter_mut().map(|v| redact_value(v, found)).sum(),
        Value::Object(o) => o.values_mut().map(|v| redact_value(v, found)).sum(),
        _ => 0,
    }
}

/// A whole string that is an identifier, not a secret: a UUID, a hex
/// digest, an API object id (`toolu_…`, `msg_…`, `call_…`, `resp_…`,
/// `req_…`, `rs_…`, `fc_…`).
fn is_identifier(s: &str) -> bool {
    let hex = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split('-').collect();
    let uuid = parts.len() == 5
        && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts.iter().all(|p| hex(p));
    let digest = matches!(s.len(), 32 | 40 | 64) && hex(s);
    let object = [
        "toolu_",
        "msg_",
        "call_",
        "resp_",
        "req_",
        "rs_",
        "fc_",
        "srvtoolu_",
    ]
    .iter()
    .any(|p| s.starts_with(p))
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    uuid || digest || object
}

/// Redacts one string in place; the number of credentials replaced, each
/// counted in `found` under the rule that found it.
fn redact_text(s: &mut String, found: &mut Kinds) -> usize {
    if s.is_empty() || is_identifier(s) {
        return 0;
    }
    let (text, rules) = convo_core::secrets::Rules::get().redact(s, "REDACTED");
    if rules.is_empty() {
        return 0;
    }
    for r in &rules {
        *found.entry(r).or_default() += 1;
    }
    *s = text;
    rules.len()
}

/// The format of `path`. With `--watch`, a folder that holds no transcript
/// yet (`~/.claude/projects` before the first session) is waited on, the
/// wait said once on stderr, instead of refused: the agent has not written
/// anything to recognise.
fn detect(path: &std::path::Path, watch: bool) -> CmdResult<&'static str> {
    let mut said = false;
    loop {
        match convo_formats::detect(path) {
            Ok(f) => return Ok(f),
            Err(e) if watch && path.is_dir() => {
                if !said {
                    eprintln!(
                        "{}: nothing to recognise yet ({e}); waiting for transcripts",
                        path.display()
                    );
                    said = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            Err(e) => return Err(format_error(e)),
        }
    }
}
