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
    Sync(SyncArgs),
    /// Check the repository against the store; exit 1 on drift
    Verify(RepoArg),
}

#[derive(Args, Debug)]
pub struct RepoArg {
    /// The repository [default: $CONVO_HOME/conversations]
    #[arg(long, value_name = "PATH")]
    pub repo: Option<PathBuf>,
}

/// Project the store into a bare git repository: incremental, resumable,
/// deterministic.
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
    /// Delete the projection and regenerate it from the store
    #[arg(long)]
    pub rebuild: bool,
    /// Nodes per pack and ref transaction
    #[arg(long, default_value_t = 5000, hide = true)]
    pub batch: usize,
}

fn git_err(e: convo_git::Error) -> CommandError {
    let hint = match &e {
        convo_git::Error::NotProjection(_) => {
            Some("choose another --repo, or remove that directory")
        }
        convo_git::Error::LayoutMismatch { .. } => {
            Some("use another --repo for the other layout, or --rebuild")
        }
        convo_git::Error::Corrupt(_) => {
            Some("run `convo git sync --rebuild` to regenerate it from the store")
        }
        _ => None,
    };
    let c = CommandError::user(e.to_string());
    match hint {
        Some(h) => c.with_hint(h),
        None => c,
    }
}

fn repo_path(env: &Env, r: &RepoArg) -> PathBuf {
    r.repo
        .clone()
        .unwrap_or_else(|| env.home.join("conversations"))
}

pub fn run(env: &Env, cmd: GitCmd) -> CmdResult {
    let mut store = env.open()?;
    match cmd {
        GitCmd::Sync(a) => {
            let layout = a
                .layout
                .as_deref()
                .map(|l| {
                    Layout::parse(l).ok_or_else(|| {
                        CommandError::user(format!(
                            "unknown layout `{l}` (expected dag or sessions)"
                        ))
                    })
                })
                .transpose()?;
            let path = repo_path(env, &a.repo);
            let mut p = Projector::open(&path, layout, a.rebuild).map_err(git_err)?;
            p.batch = a.batch.max(1);
            let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
            let mut progress = |cursor: u64| {
                if interactive {
                    eprint!("\rprojected through node #{cursor}");
                    let _ = std::io::stderr().flush();
                }
            };
            let r = p.sync(&mut store, &mut progress).map_err(git_err)?;
            if interactive && r.nodes > 0 {
                eprintln!();
            }
            println!(
                "{} nodes, {} commits projected into {} (layout {}, cursor {})",
                r.nodes,
                r.commits,
                path.display(),
                p.layout().as_str(),
                r.cursor
            );
            if a.follow {
                loop {
                    std::thread::sleep(Duration::from_millis(200));
                    let r = p.sync(&mut store, &mut |_| {}).map_err(git_err)?;
                    if r.nodes > 0 {
                        println!(
                            "{} nodes, {} commits projected (cursor {})",
                            r.nodes, r.commits, r.cursor
                        );
                        let _ = std::io::stdout().flush();
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        GitCmd::Verify(r) => {
            let path = repo_path(env, &r);
            if !path.join("convo").join("layout").exists() {
                return Err(CommandError::user(format!(
                    "{} is not a convo projection",
                    path.display()
                ))
                .with_hint("create it with `convo git sync`"));
            }
            let mut p = Projector::open(&path, None, false).map_err(git_err)?;
            let problems = p.verify(&mut store).map_err(git_err)?;
            if problems.is_empty() {
                println!(
                    "ok: {} matches the store (layout {}, cursor {})",
                    path.display(),
                    p.layout().as_str(),
                    p.cursor()
                );
                Ok(ExitCode::SUCCESS)
            } else {
                for pr in &problems {
                    println!("{pr}");
                }
                eprintln!("git verify failed: {} problem(s)", problems.len());
                Ok(ExitCode::from(1))
            }
        }
    }
}
