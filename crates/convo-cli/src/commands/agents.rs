//! `convo import` of coding agents' sessions (Claude Code, Codex, Gemini
//! CLI, opencode): one transaction per session file (per database or
//! storage folder for opencode), re-imports that add only new lines, a
//! size-and-time look that skips unchanged files, and `--watch`.

use super::import::{ImportArgs, format_error};
use super::{CmdResult, CommandError, Env, now};
use convo_llm::ledger::Outcome;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

/// What a file looked like when it was imported: its size and time, and
/// its subagents' (Claude Code's `<session>/subagents/`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
struct Look {
    len: u64,
    mtime: u128,
}

fn look(path: &Path) -> Option<Look> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = |m: &std::fs::Metadata| {
        m.modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos())
    };
    let mut l = Look {
        len: m.len(),
        mtime: mtime(&m),
    };
    let mut add = |m: &std::fs::Metadata| {
        l.len += m.len();
        l.mtime = l.mtime.max(mtime(m));
    };
    if m.is_dir() {
        // opencode's JSON storage: every file under it (a directory scan).
        let mut stack = vec![path.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                match e.metadata() {
                    Ok(m) if m.is_dir() => stack.push(e.path()),
                    Ok(m) => add(&m),
                    Err(_) => {}
                }
            }
        }
        return Some(l);
    }
    // An SQLite database (opencode.db) writes to its `-wal` first.
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(m) = std::fs::metadata(&wal) {
        add(&m);
    }
    let subs = path.with_extension("").join("subagents");
    if let Ok(rd) = std::fs::read_dir(subs) {
        for e in rd.flatten() {
            if let Ok(m) = e.metadata() {
                add(&m);
            }
        }
    }
    Some(l)
}

/// The import state kept between runs, in the store it describes
/// (`import_files`): file → how it looked when its import committed. Only a
/// shortcut (the store's keys decide what is new), so a new or restored
/// store, which has its own rows, reads every file again.
struct State {
    files: BTreeMap<String, Look>,
    /// Looks set since the last save.
    changed: Vec<(String, String)>,
}

impl State {
    fn load(store: &mut convo_store::Store) -> CmdResult<State> {
        let rows = store.read(|tx| tx.import_files())?;
        let files = rows
            .into_iter()
            .filter_map(|(path, text)| {
                let v: Value = serde_json::from_str(&text).ok()?;
                let len = v.get("len")?.as_u64()?;
                let mtime = v.get("mtime")?.as_str()?.parse().ok()?;
                Some((path, Look { len, mtime }))
            })
            .collect();
        Ok(State {
            files,
            changed: Vec::new(),
        })
    }

    fn set(&mut self, path: String, l: Look) {
        let text = json!({"len": l.len, "mtime": l.mtime.to_string()}).to_string();
        self.changed.push((path.clone(), text));
        self.files.insert(path, l);
    }

    /// Writes the looks set since the last save (after the imports they
    /// describe committed: a crash in between reads those files again).
    fn save(&mut self, store: &mut convo_store::Store) -> CmdResult<()> {
        if self.changed.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.changed);
        store.write(|tx| tx.put_import_files(&rows))?;
        Ok(())
    }
}

#[derive(Default)]
struct Report {
    created: Vec<Value>,
    updated: Vec<Value>,
    existing: Vec<String>,
    failed: Vec<Value>,
    unchanged: usize,
    nodes: usize,
    /// `--redact-secrets`: per file, what was replaced.
    redacted: Vec<Value>,
    secrets: super::import::Redacted,
}

impl Report {
    /// What `--redact-secrets` replaced in `file`, if anything.
    fn note_secrets(&mut self, file: &Path, found: &super::import::Redacted) {
        if found.secrets > 0 {
            self.secrets.merge(found);
            self.redacted
                .push(json!({"file": file.display().to_string(),
                "secrets": found.secrets, "messages": found.messages, "rules": found.rules}));
        }
    }
}

/// The session files under a path given to `import`, without what is not
/// a regular file (a FIFO, a link to a device, a socket: reading it would
/// block or never end), which `say` names on stderr.
fn files_of(format: &str, path: &Path, say: bool) -> Vec<PathBuf> {
    let files = if !path.is_dir() {
        vec![path.to_path_buf()]
    } else {
        match format {
            "opencode" => convo_formats::opencode::sources(path),
            "codex" => convo_formats::codex::rollout_files(path),
            "gemini-cli" => convo_formats::gemini_cli::session_files(path),
            _ => convo_formats::claude_code::session_files(path),
        }
    };
    files
        .into_iter()
        .filter(|f| {
            // opencode's storage folder is read as a folder.
            let what = convo_formats::not_regular(f).filter(|_| !f.is_dir());
            if let (Some(what), true) = (what, say) {
                eprintln!(
                    "warning: {}: {what}, not a regular file; skipped",
                    f.display()
                );
            }
            what.is_none()
        })
        .collect()
}

/// Imports one session file in its own transaction.
fn import_file(
    store: &mut convo_store::Store,
    format: &'static str,
    file: &Path,
    agent: Option<&str>,
    redact: bool,
    report: &mut Report,
) -> Result<(), String> {
    if import_tail(store, format, file, redact, report)? {
        return Ok(());
    }
    if let Some(opened) = convo_formats::open_lazy(format, file) {
        let session = opened.map_err(|e| format_error(e).message_text().to_owned())?;
        let Some(session) = session else {
            return Ok(());
        };
        return import_lazy(store, format, file, session, agent, redact, report);
    }
    if format == "opencode" {
        return import_opencode(store, file, agent, redact, report);
    }
    let reader = convo_formats::reader(format).ok_or("unknown format")?;
    let mut got = reader
        .read_path(file)
        .map_err(|e| format_error(e).message_text().to_owned())?;
    for w in &got.warnings {
        eprintln!("warning: {w}");
    }
    if redact {
        let mut found = super::import::Redacted::default();
        for c in &mut got.conversations {
            found.merge(&super::import::redact_conversation(c));
        }
        report.note_secrets(file, &found);
    }
    let refs: Vec<(&str, &convo_formats::Conversation)> =
        got.conversations.iter().map(|c| (format, c)).collect();
    if refs.is_empty() {
        return Ok(());
    }
    let outcomes = convo_llm::ledger::import_all(store, &refs, agent, now())
        .map_err(|e| format!("{}: {e}", file.display()))?;
    for o in outcomes {
        count(o, file, report);
    }
    Ok(())
}

/// A redacting loader: `--redact-secrets` on each message as it is read.
struct Redacting<'a> {
    inner: &'a mut dyn convo_formats::loader::Loader,
    found: super::import::Redacted,
}

impl convo_formats::loader::Loader for Redacting<'_> {
    fn load(
        &mut self,
        i: usize,
        skeleton: &convo_formats::Message,
    ) -> convo_formats::Result<convo_formats::Message> {
        let mut m = self.inner.load(i, skeleton)?;
        self.found.add(super::import::redact_message(&mut m));
        Ok(m)
    }

    fn record_ids(&self, i: usize) -> Vec<(String, u64)> {
        self.inner.record_ids(i)
    }

    fn aliases(&self) -> Vec<(String, usize)> {
        self.inner.aliases()
    }

    fn next_deferred(&mut self) -> Option<convo_formats::Result<String>> {
        self.inner.next_deferred()
    }

    fn tail(&self) -> Option<String> {
        convo_formats::loader::Loader::tail(self.inner)
    }

    fn take_tree(&mut self) -> Option<convo_formats::records::Skeleton> {
        self.inner.take_tree()
    }

    fn put_tree(&mut self, tree: convo_formats::records::Skeleton) {
        self.inner.put_tree(tree)
    }
}

/// What importing one file inside a transaction left beside its outcome:
/// the reader's error (a file rewritten meanwhile), whole; the secrets
/// `--redact-secrets` replaced; the reader's warnings, printed once the
/// transaction commits.
#[derive(Default)]
struct Side {
    failed: Option<convo_formats::Error>,
    found: super::import::Redacted,
    warnings: Vec<String>,
}

impl Side {
    /// The error of a file whose import failed with `e`.
    fn error(&mut self, file: &Path, e: &convo_store::StoreError) -> String {
        match self.failed.take() {
            Some(f) => format_error(f).message_text().to_owned(),
            None => format!("{}: {e}", file.display()),
        }
    }

    /// Adds what a committed import did to the report.
    fn report(self, o: Outcome, file: &Path, report: &mut Report) {
        for w in &self.warnings {
            eprintln!("warning: {w}");
        }
        report.note_secrets(file, &self.found);
        count(o, file, report);
    }
}

/// Imports only the lines of a session's files written after those an
/// earlier import stored (`convo_formats::open_tail`), inside `l`: what a
/// `--watch` tick does, at a cost that follows the new lines. `None` when
/// the files must be read whole (the session is not stored with its tail,
/// or a file was rewritten…): nothing was written.
fn tail_in(
    l: &mut convo_store::Ledger<'_>,
    format: &'static str,
    file: &Path,
    redact: bool,
    side: &mut Side,
) -> Result<Option<Outcome>, convo_store::StoreError> {
    let Some(convo_llm::ledger::StoredTail {
        identity: ident,
        session: id,
        tail,
    }) = convo_llm::ledger::stored_tail(l.tx(), format, file)?
    else {
        return Ok(None);
    };
    let mut lookup: Option<convo_store::StoreError> = None;
    let opened = convo_formats::open_tail(format, file, &tail, &mut |k| match l
        .tx()
        .import_key(&id, k)
    {
        Ok(h) => h.is_some(),
        Err(e) => {
            lookup = Some(e);
            false
        }
    });
    if let Some(e) = lookup {
        return Err(e);
    }
    let mut session = match opened {
        Some(Ok(Some(s))) => s,
        None | Some(Ok(None)) => return Ok(None),
        Some(Err(e)) => {
            let msg = e.render().lines().next().unwrap_or_default().to_owned();
            side.failed = Some(e);
            return Err(convo_store::StoreError::Invalid(msg.into()));
        }
    };
    session.conv.id = Some(ident);
    lazy_in(l, format, &mut session, None, redact, side, true).map(Some)
}

/// Imports one session indexed by its first pass (or a tail's, with
/// `tail`), its messages read again one at a time, inside `l`.
fn lazy_in(
    l: &mut convo_store::Ledger<'_>,
    format: &'static str,
    session: &mut convo_formats::records::Session<'static>,
    agent: Option<&str>,
    redact: bool,
    side: &mut Side,
    tail: bool,
) -> Result<Outcome, convo_store::StoreError> {
    side.warnings.append(&mut session.warnings);
    // Redaction reads every record's bytes.
    session.records.defer = !redact;
    let conv = &session.conv;
    let mut loader = Redacting {
        inner: &mut session.records,
        found: Default::default(),
    };
    let o = match (tail, redact) {
        (true, true) => convo_llm::ledger::import_tail(l, format, conv, &mut loader, now()),
        (true, false) => convo_llm::ledger::import_tail(l, format, conv, loader.inner, now()),
        (false, true) => convo_llm::ledger::import_lazy(l, format, conv, &mut loader, agent, now()),
        (false, false) => {
            convo_llm::ledger::import_lazy(l, format, conv, loader.inner, agent, now())
        }
    };
    side.found = loader.found;
    if o.is_err() {
        side.failed = session.records.failed.take();
    }
    o
}

/// [`tail_in`] in a transaction of its own; `false` when the file must be
/// read whole.
fn import_tail(
    store: &mut convo_store::Store,
    format: &'static str,
    file: &Path,
    redact: bool,
    report: &mut Report,
) -> Result<bool, String> {
    let mut side = Side::default();
    match store.transaction(|l| tail_in(l, format, file, redact, &mut side)) {
        Ok(Some(o)) => {
            side.report(o, file, report);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => Err(side.error(file, &e)),
    }
}

/// [`lazy_in`] in a transaction of its own.
fn import_lazy(
    store: &mut convo_store::Store,
    format: &'static str,
    file: &Path,
    mut session: convo_formats::records::Session<'static>,
    agent: Option<&str>,
    redact: bool,
    report: &mut Report,
) -> Result<(), String> {
    let mut side = Side::default();
    let got =
        store.transaction(|l| lazy_in(l, format, &mut session, agent, redact, &mut side, false));
    match got {
        Ok(o) => {
            side.report(o, file, report);
            Ok(())
        }
        Err(e) => Err(side.error(file, &e)),
    }
}

/// At most this many files, or bytes of them, are imported in one
/// transaction by a `convo import` of many Claude Code or Codex files:
/// they then share the index pages their inserts dirty (the random keys
/// of nodes and payloads), so what a file writes does not grow with the
/// store (docs/PERFORMANCE.md). A group that fails is imported again file
/// by file, so a bad file still fails alone.
pub const GROUP_FILES: usize = 16;
/// See [`GROUP_FILES`].
pub const GROUP_BYTES: u64 = 16 << 20;

/// Imports Claude Code or Codex files in one transaction (each as
/// [`import_file`] would: its tail, else read whole); `false`, nothing
/// written and nothing reported, when one of them fails.
fn import_together(
    store: &mut convo_store::Store,
    files: &[(&'static str, PathBuf)],
    agent: Option<&str>,
    redact: bool,
    report: &mut Report,
) -> bool {
    let mut done: Vec<(Side, Outcome)> = Vec::with_capacity(files.len());
    let got = store.transaction(|l| {
        done.clear();
        for (format, file) in files {
            let mut side = Side::default();
            let o = match tail_in(l, format, file, redact, &mut side)? {
                Some(o) => o,
                None => {
                    let mut session = match convo_formats::open_lazy(format, file) {
                        Some(Ok(Some(s))) => s,
                        // Failed or not a session: imported alone.
                        _ => return Err(convo_store::StoreError::Invalid("apart".into())),
                    };
                    lazy_in(l, format, &mut session, agent, redact, &mut side, false)?
                }
            };
            done.push((side, o));
        }
        Ok(())
    });
    if got.is_err() {
        return false;
    }
    for ((side, o), (_, file)) in done.into_iter().zip(files) {
        side.report(o, file, report);
    }
    true
}

/// Imports an opencode database or storage folder in one transaction, one
/// session at a time, its messages read again one at a time.
fn import_opencode(
    store: &mut convo_store::Store,
    file: &Path,
    agent: Option<&str>,
    redact: bool,
    report: &mut Report,
) -> Result<(), String> {
    let mut opened = convo_formats::opencode::open(file)
        .map_err(|e| format_error(e).message_text().to_owned())?;
    let mut outcomes = Vec::new();
    let mut found = super::import::Redacted::default();
    let mut failed = None;
    let got = store.transaction(|l| {
        opened.each(|conv, rows| {
            // Redaction reads every record's bytes.
            rows.defer = !redact;
            let mut loader = Redacting {
                inner: &mut *rows,
                found: Default::default(),
            };
            let o = if redact {
                convo_llm::ledger::import_lazy(l, "opencode", conv, &mut loader, agent, now())
            } else {
                convo_llm::ledger::import_lazy(l, "opencode", conv, loader.inner, agent, now())
            };
            found.merge(&loader.found);
            if o.is_err() {
                failed = rows.failed.take();
            }
            outcomes.push(o?);
            Ok::<_, convo_store::StoreError>(())
        })
    });
    for w in &opened.warnings {
        eprintln!("warning: {w}");
    }
    if let Err(e) = got {
        return Err(match failed {
            Some(f) => format_error(f).message_text().to_owned(),
            None => format!("{}: {e}", file.display()),
        });
    }
    report.note_secrets(file, &found);
    for o in outcomes {
        count(o, file, report);
    }
    Ok(())
}

/// Adds what importing one session did to the report.
fn count(o: Outcome, file: &Path, report: &mut Report) {
    {
        match o {
            Outcome::Created {
                id,
                title,
                nodes,
                branches,
            } => {
                report.nodes += nodes;
                report
                    .created
                    .push(json!({"id": id.to_string(), "title": title,
                    "nodes": nodes, "branches": branches, "file": file.display().to_string()}));
            }
            Outcome::Updated {
                id,
                nodes,
                branches,
                pending,
            } => {
                report.nodes += nodes;
                report
                    .updated
                    .push(json!({"id": id.to_string(), "nodes": nodes,
                    "branches": branches, "pending": pending, "file": file.display().to_string()}));
            }
            Outcome::Existing { id } => report.existing.push(id.to_string()),
        }
    }
}

pub fn run(env: &Env, paths: &[(&'static str, PathBuf)], a: &ImportArgs) -> CmdResult {
    let mut store = env.open()?;
    let mut state = State::load(&mut store)?;
    let mut report = Report::default();
    let mut seen: BTreeMap<String, Look> = BTreeMap::new();
    // Claude Code and Codex files go in by groups (GROUP_FILES).
    let mut group: Vec<(&'static str, PathBuf, Look)> = Vec::new();
    for (format, path) in paths {
        for f in files_of(format, path, true) {
            let key = f.display().to_string();
            let Some(now_look) = look(&f) else { continue };
            seen.insert(key.clone(), now_look);
            if state.files.get(&key) == Some(&now_look) {
                report.unchanged += 1;
                continue;
            }
            group.push((format, f, now_look));
            let bytes: u64 = group.iter().map(|(_, _, l)| l.len).sum();
            let together = matches!(*format, "claude-code" | "codex");
            if !together || group.len() >= GROUP_FILES || bytes >= GROUP_BYTES {
                import_group(&mut store, &mut group, a, &mut state, &mut report);
            }
        }
        import_group(&mut store, &mut group, a, &mut state, &mut report);
    }
    state.save(&mut store)?;
    print_report(&report, a)?;
    if !a.watch {
        return Ok(if report.failed.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    eprintln!("watching {} path(s); Ctrl-C to stop", paths.len());
    // A file is imported once it looks the same at two polls in a row
    // (the agent finished writing that burst), so the records written just
    // after a message go in with it.
    let mut last: BTreeMap<String, Look> = seen;
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        for (format, path) in paths {
            for f in files_of(format, path, false) {
                let key = f.display().to_string();
                let Some(now_look) = look(&f) else { continue };
                let steady = last.get(&key) == Some(&now_look);
                last.insert(key.clone(), now_look);
                if !steady || state.files.get(&key) == Some(&now_look) {
                    continue;
                }
                let mut r = Report::default();
                match import_file(
                    &mut store,
                    format,
                    &f,
                    a.agent.as_deref(),
                    a.redact_secrets,
                    &mut r,
                ) {
                    Ok(()) => {
                        state.set(key.clone(), now_look);
                        for c in r.created.iter().chain(&r.updated) {
                            eprintln!(
                                "{}: {} ({} nodes)",
                                key,
                                c["id"].as_str().unwrap_or_default(),
                                c["nodes"]
                            );
                        }
                    }
                    Err(e) => eprintln!("error: {e}"),
                }
            }
        }
        state.save(&mut store)?;
    }
}

/// Imports `group` (emptied): in one transaction when it holds several
/// files ([`import_together`]), else, or when that fails, file by file,
/// each failure reported on its own.
fn import_group(
    store: &mut convo_store::Store,
    group: &mut Vec<(&'static str, PathBuf, Look)>,
    a: &ImportArgs,
    state: &mut State,
    report: &mut Report,
) {
    let files: Vec<(&'static str, PathBuf)> =
        group.iter().map(|(f, p, _)| (*f, p.clone())).collect();
    if files.len() > 1
        && import_together(store, &files, a.agent.as_deref(), a.redact_secrets, report)
    {
        for (_, f, l) in group.drain(..) {
            state.set(f.display().to_string(), l);
        }
        return;
    }
    for (format, f, now_look) in group.drain(..) {
        let key = f.display().to_string();
        match import_file(
            store,
            format,
            &f,
            a.agent.as_deref(),
            a.redact_secrets,
            report,
        ) {
            Ok(()) => state.set(key, now_look),
            Err(e) => {
                eprintln!("error: {e}");
                report.failed.push(json!({"file": key, "error": e}));
            }
        }
    }
}

fn print_report(r: &Report, a: &ImportArgs) -> CmdResult<()> {
    if a.json {
        let v = json!({
            "created": r.created,
            "updated": r.updated,
            "existing": r.existing,
            "failed": r.failed,
            "sessions": r.created.len(),
            "nodes": r.nodes,
            "skipped": r.existing.len() + r.unchanged,
            "unchanged": r.unchanged,
            "redacted": r.redacted,
            "secrets": r.secrets.secrets,
            "secret_rules": r.secrets.rules,
        });
        crate::output::write_json(&mut crate::ui::Out::stdout(), &v)?;
        return Ok(());
    }
    if a.verbose {
        let mut out = crate::ui::Out::stdout();
        for c in r.created.iter().chain(&r.updated) {
            writeln!(out, "{}", c["id"].as_str().unwrap_or_default())?;
        }
        out.flush()?;
    }
    eprintln!(
        "imported {} new session{} and added to {} ({} nodes); {} unchanged{}",
        r.created.len(),
        if r.created.len() == 1 { "" } else { "s" },
        r.updated.len(),
        r.nodes,
        r.existing.len() + r.unchanged,
        if r.failed.is_empty() {
            String::new()
        } else {
            format!("; {} failed", r.failed.len())
        }
    );
    if a.redact_secrets {
        eprintln!(
            "redacted {} secret{} in {} file{}{}",
            r.secrets.secrets,
            if r.secrets.secrets == 1 { "" } else { "s" },
            r.redacted.len(),
            if r.redacted.len() == 1 { "" } else { "s" },
            if r.secrets.rules.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.secrets.rules_text())
            }
        );
        for f in &r.redacted {
            eprintln!(
                "  {}: {} in {} message(s)",
                f["file"].as_str().unwrap_or_default(),
                f["secrets"],
                f["messages"]
            );
        }
    }
    Ok(())
}

/// Used by export: an agent's folder, `$var` when set, else `~/default`.
pub fn agent_home(var: &str, default: &str) -> CmdResult<PathBuf> {
    if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(v));
    }
    std::env::var_os("HOME")
        .filter(|v| !v.is_empty())
        .map(|h| PathBuf::from(h).join(default))
        .ok_or_else(|| CommandError::user("cannot find the home directory; set HOME"))
}
