use super::run::{AgentArgs, check_branch, find_or_create, lock_dir, runtime};
use super::{CmdResult, CommandError, Env, branch_name, now, prefix};
use clap::Args;
use convo_core::text::{Newlines, visible};
use convo_core::{BranchName, HashPrefix, Kind, SessionId};
use convo_harness::{Harness, TimelineLock, TurnReport};
use convo_runtime::StorePool;
use rustyline::error::ReadlineError;
use std::io::Write;
use std::process::ExitCode;

/// Talk to an agent interactively; every turn is recorded.
///
/// Each line you type is one turn (see `convo run` and docs/AGENTS.md).
/// Ctrl-C during a turn ends it (recorded as interrupted); Ctrl-D or /quit
/// leaves. Commands:
///   /last               show the last turn's nodes
///   /fork @N NAME       fork a timeline after turn N (or a node hash prefix) and switch to it
///   /switch NAME        continue on another timeline
///   /promote            make the current timeline `main` (old main sealed)
///   /state              list the timeline's working state
///   /quit               leave
/// Without SESSION a new session is started. A timeline is used by one
/// chat at a time: a second one is refused.
///
/// Examples:
///   convo chat todo -- python3 examples/todo-agent/agent.py
///   convo chat todo --branch fix --agent-url http://127.0.0.1:8000/invoke
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ChatArgs {
    /// Session id, unique id prefix or title (created when none matches; new when omitted)
    pub session: Option<String>,
    /// Timeline to start on
    #[arg(long, default_value = "main")]
    pub branch: String,
    #[command(flatten)]
    pub agent: AgentArgs,
}

const HELP: &str = "commands: /last  /fork @N NAME  /switch NAME  /promote  /state  /quit";

struct Chat {
    pool: StorePool,
    session: SessionId,
    branch: BranchName,
    lock: TimelineLock,
    lock_dir: std::path::PathBuf,
    last: Option<TurnReport>,
}

pub fn run(env: &Env, a: ChatArgs) -> CmdResult {
    let branch = branch_name(&a.branch)?;
    let spec = a.agent.spec()?;
    let mut opts = a.agent.options()?;
    opts.lock_dir = Some(super::run::lock_dir(env));
    opts.holder = "convo chat".to_owned();
    let pool = StorePool::open(&env.store_url, 4)?;
    let session = match &a.session {
        Some(q) => find_or_create(&pool, q, &opts.agent_name)?.0,
        None => {
            let agent = opts.agent_name.clone();
            pool.run_blocking(|st| st.transaction(|l| l.new_session(&agent, None, now())))?
                .id
        }
    };
    check_branch(&pool, &session, &branch)?;
    let dir = lock_dir(env);
    let lock = TimelineLock::acquire(&dir, &session, &branch, false, "convo chat")?;
    let rt = runtime()?;
    let mut h = rt.block_on(Harness::start(pool.clone(), &spec, opts))?;
    let mut chat = Chat {
        pool,
        session,
        branch,
        lock,
        lock_dir: dir,
        last: None,
    };
    eprintln!("session {} · branch {} · {HELP}", chat.session, chat.branch);
    let mut rl = rustyline::DefaultEditor::new()
        .map_err(|e| CommandError::user(format!("cannot start line editing: {e}")))?;
    let history = env.home.join("chat_history");
    let _ = rl.load_history(&history);
    loop {
        let prompt = format!("{}> ", chat.branch);
        let line = match rl.readline(&prompt) {
            Ok(l) => l,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("error: {e}");
                break;
            }
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let _ = rl.add_history_entry(text);
        if let Some(cmd) = text.strip_prefix('/') {
            match chat.command(cmd) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => e.report(),
            }
            continue;
        }
        // A streamed answer is shown as it arrives; a whole one at the end.
        let mut streamed = String::new();
        let r = rt.block_on(h.turn_streaming(
            &chat.session,
            &chat.branch,
            text,
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
            &mut |piece| {
                print!("{}", visible(piece, Newlines::Keep));
                let _ = std::io::stdout().flush();
                streamed.push_str(piece);
            },
        ));
        if !streamed.is_empty() && !streamed.ends_with('\n') {
            println!();
        }
        match r {
            Ok(r) => {
                match &r.failure {
                    None if !streamed.is_empty() => {}
                    None => println!("{}", visible(&r.output_text(), Newlines::Keep)),
                    Some(f) => eprintln!(
                        "turn failed ({}): {}",
                        f.kind(),
                        visible(&f.message(), Newlines::Escape)
                    ),
                }
                chat.last = Some(r);
            }
            Err(e) => CommandError::from(e).report(),
        }
    }
    let _ = rl.save_history(&history);
    rt.block_on(h.stop());
    Ok(ExitCode::SUCCESS)
}

impl Chat {
    /// Runs a slash command; `Ok(true)` to quit.
    fn command(&mut self, cmd: &str) -> CmdResult<bool> {
        let mut words = cmd.split_whitespace();
        match words.next().unwrap_or("") {
            "quit" | "exit" | "q" => return Ok(true),
            "help" => eprintln!("{HELP}"),
            "last" => match &self.last {
                None => eprintln!("no turn yet in this chat"),
                Some(r) => {
                    for n in &r.nodes {
                        println!("{}", crate::output::node_line(&n.stored, &n.payload));
                    }
                }
            },
            "state" => {
                let (s, b) = (self.session, self.branch.clone());
                let entries = self.pool.run_blocking(|st| {
                    let root = st.state_root(&s, &b, None)?;
                    st.state_list(&root)
                })?;
                if entries.is_empty() {
                    println!("(empty)");
                }
                for (k, v) in entries {
                    println!(
                        "{} = {}",
                        visible(&k, Newlines::Escape),
                        visible(&String::from_utf8_lossy(&v), Newlines::Escape)
                    );
                }
            }
            "fork" => {
                let (Some(from), Some(name)) = (words.next(), words.next()) else {
                    return Err(CommandError::user(
                        "usage: /fork @N NAME  (or /fork HASH NAME)",
                    ));
                };
                let name = branch_name(name)?;
                let point = self.fork_point(from)?;
                let (s, n) = (self.session, name.clone());
                self.pool
                    .run_blocking(|st| st.transaction(|l| l.fork(&s, &point, &n, now())))?;
                self.switch(name)?;
            }
            "switch" => {
                let Some(name) = words.next() else {
                    return Err(CommandError::user("usage: /switch NAME"));
                };
                let name = branch_name(name)?;
                check_branch(&self.pool, &self.session, &name)?;
                self.switch(name)?;
            }
            "promote" => {
                let (s, b) = (self.session, self.branch.clone());
                let p = self
                    .pool
                    .run_blocking(|st| st.transaction(|l| l.promote(&s, &b, now())))?;
                eprintln!(
                    "promoted `{b}` to main; the old main is sealed as `{}`",
                    p.sealed_as
                );
                self.switch(BranchName::main())?;
            }
            other => {
                return Err(CommandError::user(format!(
                    "unknown command /{}",
                    visible(other, Newlines::Escape)
                ))
                .with_hint(HELP));
            }
        }
        Ok(false)
    }

    fn switch(&mut self, name: BranchName) -> CmdResult<()> {
        let lock =
            TimelineLock::acquire(&self.lock_dir, &self.session, &name, false, "convo chat")?;
        self.lock = lock;
        self.branch = name;
        self.last = None;
        eprintln!("now on `{}`", self.branch);
        Ok(())
    }

    /// `@N`: the last node of turn N on the current timeline; else a hash prefix.
    fn fork_point(&self, from: &str) -> CmdResult<HashPrefix> {
        let Some(n) = from.strip_prefix('@') else {
            return prefix(from);
        };
        let n: u64 = n
            .parse()
            .map_err(|_| CommandError::user(format!("`{from}` is not @N with N a turn number")))?;
        let (s, b) = (self.session, self.branch.clone());
        let nodes = self.pool.run_blocking(|st| st.timeline(&s, &b))?;
        let mut turn = 0u64;
        let mut last = None;
        for node in &nodes {
            if node.stored.node.kind == Kind::Invoke {
                turn += 1;
            }
            if turn == n {
                last = Some(node.stored.hash);
            }
        }
        let h = last.ok_or_else(|| {
            CommandError::user(format!("`{}` has no turn {n} (it has {turn})", self.branch))
        })?;
        prefix(&h.to_hex())
    }
}
