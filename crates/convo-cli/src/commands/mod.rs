//! One module per command. `run` opens the store and dispatches.

pub mod agents;
pub mod branch;
pub mod chat;
pub mod check;
pub mod checkpoint;
pub mod completions;
pub mod demo;
pub mod diff;
pub mod error;
pub mod export;
pub mod git;
pub mod graph;
pub mod import;
pub mod ingest;
pub mod log;
pub mod mcp;
pub mod migrate;
pub mod otel;
pub mod proxy;
pub mod record;
pub mod redact;
pub mod replay;
pub mod run;
pub mod say;
pub mod search;
pub mod select;
pub mod serve;
pub mod session;
pub mod share;
pub mod show;
pub mod state;
pub mod test;
pub mod test_agent;
pub mod test_judge;
pub mod test_mcp;
pub mod test_report;
pub mod turn;
pub mod verify;
pub mod watch;

use crate::cli::{Cli, Command, SessionCmd, StateCmd};
use convo_core::{BranchName, HashPrefix, Millis};
pub use error::{CmdResult, CommandError};

use convo_store::{Access, SessionRow, Store};
use std::path::PathBuf;
use std::process::ExitCode;

/// Where the store lives, from flags and environment, and how the command
/// opens it.
pub struct Env {
    pub home: PathBuf,
    pub store_url: String,
    /// Reads open the store read-only and never create it; writes create it.
    pub access: Access,
    /// A short write (one node, one state change): SQLite's log is left
    /// for a later checkpoint instead of being folded in at exit.
    pub short_write: bool,
}

impl Env {
    /// The home and store, most explicit first: `--store`, then `--home`
    /// (its `convo.db`: an explicit home beats `CONVO_STORE`), then
    /// `CONVO_STORE`, then `CONVO_HOME`'s or `~/.convo`'s `convo.db`.
    fn from_cli(cli: &Cli) -> CmdResult<Env> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        let home = match (&cli.home, var("CONVO_HOME")) {
            (Some(h), _) => h.clone(),
            (None, Some(h)) => PathBuf::from(h),
            (None, None) => var("HOME")
                .map(|h| PathBuf::from(h).join(".convo"))
                .ok_or_else(|| {
                    CommandError::user("cannot find the home directory")
                        .with_hint("set CONVO_HOME or pass --home DIR")
                })?,
        };
        let env_store = || {
            var("CONVO_STORE").map(|s| {
                s.into_string().map_err(|s| {
                    CommandError::user(format!(
                        "CONVO_STORE is not valid UTF-8: {}",
                        s.to_string_lossy()
                    ))
                })
            })
        };
        let home_store = || format!("sqlite://{}", home.join("convo.db").display());
        let store_url = match (&cli.store, &cli.home) {
            (Some(s), _) => s.clone(),
            (None, Some(_)) => home_store(),
            (None, None) => match env_store() {
                Some(s) => s?,
                None => home_store(),
            },
        };
        Ok(Env {
            home,
            store_url,
            access: access(&cli.command),
            short_write: short_write(&cli.command),
        })
    }

    /// Opens the store as the command needs it: see [`access`] and
    /// [`short_write`].
    pub fn open(&self) -> CmdResult<Store> {
        let mut store = Store::open_as(&self.store_url, self.access)?;
        if self.short_write {
            store.keep_log_on_close()?;
        }
        Ok(store)
    }
}

/// Whether a command writes the store (and so may create it) or only
/// reads it (read-only, never created: "no store at PATH"). Every command
/// is listed, so a new one has to choose.
pub fn access(cmd: &Command) -> Access {
    match cmd {
        Command::Init(_)
        | Command::Record(_)
        | Command::Say(_)
        | Command::Ingest(_)
        | Command::Demo(_)
        | Command::Import(_)
        | Command::Migrate(_)
        | Command::Serve(_)
        | Command::Run(_)
        | Command::Chat(_)
        | Command::Replay(_)
        | Command::Redact(_)
        | Command::Proxy(_)
        | Command::Test(_)
        | Command::Otel(_) => Access::Write,
        Command::Mcp(m) => mcp::access(m),
        Command::Session(c) => match c {
            SessionCmd::New { .. }
            | SessionCmd::Fork { .. }
            | SessionCmd::Promote { .. }
            | SessionCmd::Retitle { .. } => Access::Write,
            SessionCmd::List(_) | SessionCmd::Get(_) => Access::Read,
        },
        Command::State(c) => match c {
            StateCmd::Put { .. } | StateCmd::Delete { .. } => Access::Write,
            StateCmd::Get { .. } | StateCmd::List { .. } => Access::Read,
        },
        Command::Branch(_)
        | Command::Log(_)
        | Command::Show(_)
        | Command::Turn(_)
        | Command::Diff(_)
        | Command::Search(_)
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Verify(_)
        | Command::Checkpoint(_)
        | Command::Export(_)
        | Command::Share(_)
        | Command::Check(_)
        | Command::Git(_)
        | Command::Watch(_) => Access::Read,
    }
}

/// Whether a command is a short write that should cost no fsync at exit
/// (issue: a `say` used to pay four, checkpointing and deleting SQLite's
/// write-ahead log): one node or one state change. Bulk writers, `init`
/// and the servers still fold the log into the database file when they
/// close, so a store at rest after them is one file.
pub fn short_write(cmd: &Command) -> bool {
    match cmd {
        Command::Record(_) | Command::Say(_) => true,
        Command::Session(c) => matches!(
            c,
            SessionCmd::New { .. }
                | SessionCmd::Fork { .. }
                | SessionCmd::Promote { .. }
                | SessionCmd::Retitle { .. }
        ),
        Command::State(c) => matches!(c, StateCmd::Put { .. } | StateCmd::Delete { .. }),
        _ => false,
    }
}

pub fn now() -> Millis {
    jiff::Timestamp::now().as_millisecond()
}

pub fn branch_name(s: &str) -> CmdResult<BranchName> {
    BranchName::new(s).map_err(|e| {
        CommandError::user(e.to_string())
            .with_hint("branch names follow git's rules for one ref component")
    })
}

pub fn prefix(s: &str) -> CmdResult<HashPrefix> {
    HashPrefix::parse(s).map_err(|e| CommandError::user(e.to_string()))
}

/// The node a reference names in `session` (see `convo_store::refs`), as
/// a full-hash prefix for the store calls that take one.
pub fn node_ref(
    store: &mut Store,
    session: &convo_core::SessionId,
    r: &str,
) -> CmdResult<HashPrefix> {
    let n = store.resolve_ref(session, r)?;
    prefix(&n.hash.to_hex())
}

/// Holds `branch`'s turn lock while a command writes it, so nothing lands
/// inside a turn `convo run`/`chat` has open: waits for the turn with
/// `wait`, else refused (exit 4, naming the turn). A turn a killed harness
/// left open is closed first, recorded as interrupted.
pub fn guard_timeline(
    env: &Env,
    store: &mut Store,
    session: &convo_core::SessionId,
    branch: &BranchName,
    wait: bool,
) -> CmdResult<Option<convo_harness::TurnLock>> {
    Ok(convo_harness::guard_timeline(
        &run::lock_dir(env),
        store,
        session,
        branch,
        wait,
    )?)
}

/// Inside a write's transaction, under [`guard_timeline`]'s lock: a turn
/// opened meanwhile by a harness on another machine sharing the store (a
/// row the file lock does not cover) refuses the write (exit 4).
pub fn turn_guard(
    l: &mut convo_store::Ledger<'_>,
    session: &convo_core::SessionId,
    branch: &BranchName,
) -> convo_store::Result<()> {
    convo_runtime::turns::guard(l, session, branch, convo_runtime::now_ms())
}

pub fn find_session(store: &mut Store, q: &str) -> CmdResult<SessionRow> {
    Ok(store.find_session(q)?)
}

pub fn run(cli: Cli) -> CmdResult {
    let env = Env::from_cli(&cli)?;
    match cli.command {
        Command::Init(j) => {
            std::fs::create_dir_all(&env.home).map_err(|e| {
                CommandError::user(format!("cannot create {}: {e}", env.home.display()))
            })?;
            let existed = Store::open_as(&env.store_url, Access::Read).is_ok();
            let store = Store::open_as(&env.store_url, Access::Write)?;
            let shown = convo_store::postgres::redact(&env.store_url);
            if j.json {
                crate::output::print_json(&serde_json::json!({
                    "home": env.home.display().to_string(),
                    "store": shown,
                    "backend": store.kind(),
                    "created": !existed,
                }));
            } else if existed {
                println!(
                    "convo home {}: the store {shown} already exists (left as it is)",
                    env.home.display()
                );
            } else {
                println!(
                    "initialized convo home {} with store {shown}",
                    env.home.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Session(c) => session::run(&env, c),
        Command::Branch(c) => branch::run(&env, c),
        Command::Record(a) => record::run(&env, a),
        Command::Say(a) => say::run(&env, a),
        Command::Log(a) => log::run(&env, a),
        Command::Show(a) => show::run(&env, a),
        Command::Turn(a) => turn::run(&env, a),
        Command::Diff(a) => diff::run(&env, a),
        Command::Search(a) => search::run(&env, a),
        Command::Completions(a) => completions::completions(a),
        Command::Man(a) => completions::man(a),
        Command::State(c) => state::run(&env, c),
        Command::Verify(a) => verify::run(&env, a),
        Command::Checkpoint(a) => checkpoint::run(&env, a),
        Command::Redact(a) => redact::run(&env, a),
        Command::Ingest(a) => ingest::run(&env, a),
        Command::Demo(a) => demo::run(&env, a.json),
        Command::Import(a) => import::run(&env, a),
        Command::Export(a) => export::run(&env, a),
        Command::Share(a) => share::run(&env, a),
        Command::Check(a) => check::run(a),
        Command::Git(c) => git::run(&env, c),
        Command::Watch(a) => watch::run(&env, a),
        Command::Migrate(a) => migrate::run(a),
        Command::Serve(a) => serve::run(&env, a),
        Command::Run(a) => run::run(&env, a),
        Command::Chat(a) => chat::run(&env, a),
        Command::Replay(a) => replay::run(&env, a),
        Command::Proxy(a) => proxy::run(&env, a),
        Command::Mcp(a) => mcp::run(&env, a),
        Command::Test(a) => test::run(&env, a),
        Command::Otel(a) => otel::run(&env, a),
    }
}
