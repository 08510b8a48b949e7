use super::{CmdResult, CommandError, Env};
use clap::{Args, Subcommand};
use convo_git::{Layout, Projector};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Subcommand, Debug)]
pub enum GitCmd {
    /// Project new nodes into the conversations repository
    ///
    /// Reads the store and writes a bare git repository: incremental,
    /// resumable, deterministic (the same store always gives the same
    /// commits). Layout `dag`: one commit per node; `sessions`: one JSON
    /// file per session. Checkpoints published with `convo checkpoint --git`
    /// (tags `refs/tags/convo/checkpoint/*`) are never removed, not even
    /// by --rebuild.
    ///
    /// Examples:
    ///   convo git sync
    ///   convo git sync --layout sessions --repo ~/sessions.git
    ///   convo git sync --follow --json
    #[command(verbatim_doc_comment)]
    Sync(SyncArgs),
    /// Check the repository against the store; exit 1 on drift
    ///
    /// Reads the store and the repository, writes nothing. Reports the
    /// store's history rewritten when the repository holds nodes the store
    /// lost or a branch moved back, and proves the store still extends
    /// every checkpoint published in the repository (`convo checkpoint
    /// --git`, tags `refs/tags/convo/checkpoint/*`): a rollback, truncation
    /// or rewrite since one is named exactly as `convo verify --checkpoint`
    /// names it.
    ///
    /// Examples:
    ///   convo git verify
    ///   convo git verify --repo ~/sessions.git
    ///   convo git verify --json | jq '.problems[]'
    ///   convo git verify --trusted-key 3b6a27bc…   # the key you published
    #[command(verbatim_doc_comment)]
    Verify(VerifyArgs),
}

/// What `convo git verify` takes (its help is on `GitCmd::Verify`).
#[derive(Args, Debug)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// Print one JSON document: {repo, layout, cursor, ok, rewritten,
    /// published_checkpoints, checkpoints_extended, problems}
    #[arg(long)]
    pub json: bool,
    /// The public key published checkpoints must be signed with (64 hex) [default: that of $CONVO_HOME/checkpoint.key, if any]
    #[arg(long, value_name = "HEX")]
    pub trusted_key: Option<String>,
}

#[derive(Args, Debug)]
pub struct RepoArg {
    /// The repository [default: $CONVO_HOME/conversations]
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
}

/// What `convo git sync` takes (its help is on `GitCmd::Sync`).
#[derive(Args, Debug)]
pub struct SyncArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// `dag` (one commit per node) or `sessions` (one JSON file per session)
    #[arg(long, value_name = "LAYOUT")]
    pub layout: Option<String>,
    /// Keep running, projecting each new node as it is appended
    #[arg(long)]
    pub follow: bool,
    /// Delete the projection and regenerate it from the store (refused when
    /// the repository holds history the store lost, unless --force)
    #[arg(long)]
    pub rebuild: bool,
    /// With --rebuild: discard the repository even if it witnesses a
    /// rewritten store
    #[arg(long, requires = "rebuild")]
    pub force: bool,
    /// Print one JSON document summing up the sync (each round, with --follow)
    #[arg(long)]
    pub json: bool,
    /// Nodes per pack and ref transaction
    #[arg(long, default_value_t = 5000, hide = true)]
    pub batch: usize,
}

fn repo_path(env: &Env, r: &RepoArg) -> PathBuf {
    r.repo
        .clone()
        .unwrap_or_else(|| env.home.join("conversations"))
}

/// Nodes after `cursor` in the store, for the progress bar's length.
fn remaining(store: &mut convo_store::Store, cursor: u64) -> convo_store::Result<u64> {
    Ok(store.end_cursor()?.saturating_sub(cursor))
}

/// Why a sync stopped: the store (which `--follow` waits out when it was
/// only lost), or anything else.
enum SyncFail {
    Store(convo_store::StoreError),
    Other(CommandError),
}

impl From<SyncFail> for CommandError {
    fn from(f: SyncFail) -> Self {
        match f {
            SyncFail::Store(e) => e.into(),
            SyncFail::Other(e) => e,
        }
    }
}

fn summary(r: &convo_git::SyncReport, path: &std::path::Path, layout: Layout, secs: f64) -> String {
    serde_json::json!({
        "repo": path.display().to_string(),
        "layout": layout.as_str(),
        "nodes": r.nodes,
        "commits": r.commits,
        "refs": r.refs,
        "packs": r.packs,
        "cursor": r.cursor,
        "rewritten": r.rewritten,
        "seconds": (secs * 1000.0).round() / 1000.0,
    })
    .to_string()
}

/// One sync with a progress bar on a terminal (shown once it has taken a
/// second), then its summary on stdout.
fn sync_once(
    p: &mut Projector,
    store: &mut convo_store::Store,
    path: &std::path::Path,
    json: bool,
    quiet_when_empty: bool,
) -> Result<(), SyncFail> {
    let start = std::time::Instant::now();
    let mut bar = crate::ui::Progress::new(
        remaining(store, p.cursor()).map_err(SyncFail::Store)?,
        "nodes",
    );
    let mut progress = |pr: convo_git::Progress| {
        if !bar.on_terminal() {
            return;
        }
        let secs = start.elapsed().as_secs_f64().max(1e-3);
        bar.set(
            &format!("{:.0} commits/s", pr.commits as f64 / secs),
            pr.nodes,
        );
    };
    let r = p.sync(store, &mut progress).map_err(|e| match e {
        convo_git::Error::Store(e) => SyncFail::Store(e),
        e => SyncFail::Other(e.into()),
    })?;
    bar.finish();
    if !r.rewritten.is_empty() {
        eprintln!(
            "note: the store redacted payloads since the last sync; {} ref(s) rewritten: {}",
            r.rewritten.len(),
            convo_core::text::visible(&r.rewritten.join(", "), convo_core::text::Newlines::Escape)
        );
    }
    if quiet_when_empty && r.nodes == 0 && r.rewritten.is_empty() {
        return Ok(());
    }
    let secs = start.elapsed().as_secs_f64();
    if json {
        println!("{}", summary(&r, path, p.layout(), secs));
    } else {
        println!(
            "{} nodes, {} commits projected into {} (layout {}, cursor {}, {} refs moved, {} packs, {:.2} s)",
            r.nodes,
            r.commits,
            path.display(),
            p.layout().as_str(),
            r.cursor,
            r.refs,
            r.packs,
            secs
        );
    }
    let _ = std::io::stdout().flush();
    Ok(())
}

/// `git sync --follow`: a sync every 200 ms, until stopped. A lost store
/// (a PostgreSQL restart) is waited out on a new connection; the
/// projection is reopened from its own files (its cursor), so every node
/// is projected once.
fn follow(
    env: &Env,
    mut p: Projector,
    store: convo_store::Store,
    layout: Option<Layout>,
    path: &std::path::Path,
    json: bool,
) -> CmdResult<()> {
    let mut conn = convo_runtime::Reconnecting::from_store(&env.store_url, env.access, store);
    let mut first = true;
    loop {
        if !first {
            std::thread::sleep(Duration::from_millis(200));
        }
        let round = match conn.store() {
            Ok(store) => sync_once(&mut p, store, path, json, !first),
            Err(e) => Err(SyncFail::Store(e)),
        };
        match round {
            Ok(()) => first = false,
            Err(SyncFail::Store(e)) if convo_runtime::reconnect::is_lost(&e) => {
                eprintln!(
                    "git sync: lost the store ({}); reconnecting",
                    convo_core::text::visible(&e.to_string(), convo_core::text::Newlines::Escape)
                );
                conn.drop_connection();
                let batch = p.batch;
                drop(p);
                conn.retry(|s| s.end_cursor(), || false, |_| {})?;
                p = Projector::open(path, layout, false).map_err(CommandError::from)?;
                p.batch = batch;
                eprintln!(
                    "git sync: reconnected; resuming after cursor {}",
                    p.cursor()
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
}

pub fn run(env: &Env, cmd: GitCmd) -> CmdResult {
    let mut store = env.open()?;
    match cmd {
        GitCmd::Sync(a) => sync(env, store, &a),
        GitCmd::Verify(a) => verify(env, &mut store, &a),
    }
}

/// `convo git sync`.
fn sync(env: &Env, mut store: convo_store::Store, a: &SyncArgs) -> CmdResult {
    let layout = a
        .layout
        .as_deref()
        .map(|l| {
            Layout::parse(l).ok_or_else(|| {
                CommandError::user(format!("unknown layout `{l}` (expected dag or sessions)"))
            })
        })
        .transpose()?;
    let path = repo_path(env, &a.repo);
    if a.rebuild && !a.force && path.join("convo").join("layout").exists() {
        // The repository may be the only evidence of history the
        // store lost: look before wiping it.
        if let Ok(old) = Projector::open_readonly(&path) {
            let found = old.witness(&mut store).map_err(CommandError::from)?;
            if !found.is_empty() {
                return Err(CommandError::found_problem(format!(
                    "refusing to rebuild {} (add --force to discard it): {}",
                    path.display(),
                    convo_git::Error::Rewritten(found)
                ))
                .with_hint(super::error::REWRITTEN_HINT));
            }
        }
    }
    let mut p = Projector::open(&path, layout, a.rebuild).map_err(CommandError::from)?;
    if let Some(n) = &p.notice {
        eprintln!("note: {n}");
    }
    p.batch = a.batch.max(1);
    if a.follow {
        follow(env, p, store, layout, &path, a.json)?;
    } else {
        sync_once(&mut p, &mut store, &path, a.json, false)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `convo git verify`: the projection against the store, and the store
/// against the checkpoints published in the repository.
fn verify(env: &Env, store: &mut convo_store::Store, a: &VerifyArgs) -> CmdResult {
    let path = repo_path(env, &a.repo);
    if !path.join("convo").join("layout").exists() {
        return Err(
            CommandError::user(format!("{} is not a convo projection", path.display()))
                .with_hint("create it with `convo git sync`"),
        );
    }
    let mut p = Projector::open_readonly(&path).map_err(CommandError::from)?;
    let mut problems = p.verify(store).map_err(CommandError::from)?;
    // What the repository witnesses (not the checkpoints below).
    let rewritten = problems.iter().any(|p| {
        matches!(
            p.kind,
            convo_store::ProblemKind::Rewritten | convo_store::ProblemKind::Truncated
        )
    });
    let published: super::verify::Sources = convo_git::checkpoints::published(&path)
        .map_err(CommandError::from)?
        .into_iter()
        .map(|(name, bytes)| {
            let cp = bytes.and_then(|b| {
                serde_json::from_slice(&b).map_err(|e| format!("it is not a checkpoint: {e}"))
            });
            (name, cp)
        })
        .collect();
    let total = published.len();
    let mut found = Vec::new();
    let extended = super::verify::check_sources(
        super::verify::trusted_key(env, a.trusted_key.as_deref()).as_deref(),
        store,
        published,
        &mut found,
    );
    let against_checkpoints = !found.is_empty();
    problems.extend(found);
    if a.json {
        crate::output::print_json(&serde_json::json!({
            "repo": path.display().to_string(),
            "layout": p.layout().as_str(),
            "cursor": p.cursor(),
            "ok": problems.is_empty(),
            "rewritten": rewritten,
            "published_checkpoints": total,
            "checkpoints_extended": extended,
            "problems": problems,
        }));
        return Ok(ExitCode::from(u8::from(!problems.is_empty())));
    }
    if problems.is_empty() {
        println!(
            "ok: {} matches the store (layout {}, cursor {}){}",
            path.display(),
            p.layout().as_str(),
            p.cursor(),
            if total > 0 {
                format!("; the store extends {extended} published checkpoint(s)")
            } else {
                String::new()
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    for pr in &problems {
        println!("{pr}");
    }
    eprintln!("git verify failed: {} problem(s)", problems.len());
    if rewritten {
        eprintln!("hint: {}", super::error::REWRITTEN_HINT);
    } else if against_checkpoints {
        eprintln!(
            "hint: the store no longer extends a checkpoint published in the repository: \
             keep the repository (its tags are the evidence) and compare with older \
             copies of the store; `git --git-dir REPO show TAG` prints a checkpoint"
        );
    }
    Ok(ExitCode::from(1))
}
