use super::{CmdResult, CommandError, Env, branch_name};
use clap::Args;
use convo_core::text::{Newlines, visible};
use convo_core::{BranchName, SessionId};
use convo_harness::{AgentSpec, Dialect, Harness, HarnessError, Options, TimelineLock};
use convo_runtime::StorePool;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// How the agent is reached, shared by `run`, `chat` and `replay`.
#[derive(Args, Debug)]
pub struct AgentArgs {
    /// A running agent: each input is POSTed to this URL (`/invoke` when it has no path)
    #[arg(long, value_name = "URL")]
    pub agent_url: Option<String>,
    /// Inference upstream (OpenAI-compatible, http:// or https://), for the agent's model calls
    #[arg(long, env = "CONVO_UPSTREAM", value_name = "URL")]
    pub upstream: Option<String>,
    /// Upstream for Anthropic-style calls [default: --upstream]
    #[arg(long, env = "CONVO_ANTHROPIC_UPSTREAM", value_name = "URL")]
    pub anthropic_upstream: Option<String>,
    /// The agent's name on new sessions and nodes
    #[arg(long, default_value = "agent")]
    pub agent: String,
    /// Seconds one turn may take before it ends as a recorded timeout
    #[arg(long, default_value_t = 300.0, value_name = "SECS")]
    pub timeout: f64,
    /// Port of convo's services server on 127.0.0.1 [default: any free one] (for a running VlinderCLI agent's HTTP_PROXY)
    #[arg(long, value_name = "PORT")]
    pub services_port: Option<u16>,
    /// Seconds a child agent may take to become ready (to listen on PORT; for `vlinder`, GET /health answering 200)
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub start_timeout: f64,
    /// The agent's protocol: `convo` (docs/AGENTS.md) or `vlinder` (VlinderCLI's: raw-text /invoke, GET /health, *.vlinder.local services)
    #[arg(long, default_value = "convo", value_name = "NAME", value_parser = ["convo", "vlinder"])]
    pub dialect: String,
    /// The agent command to start as a child process (after `--`)
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

impl AgentArgs {
    pub fn spec(&self) -> CmdResult<AgentSpec> {
        match (&self.agent_url, self.command.is_empty()) {
            (Some(u), true) => Ok(AgentSpec::Url(u.clone())),
            (None, false) => Ok(AgentSpec::Command(self.command.clone())),
            (Some(_), false) => Err(CommandError::user(
                "give either --agent-url URL or `-- CMD…`, not both",
            )),
            (None, true) => Err(CommandError::user("no agent given")
                .with_hint("pass --agent-url http://HOST:PORT/invoke or `-- python3 my_agent.py`")),
        }
    }

    pub fn options(&self) -> CmdResult<Options> {
        if !(self.timeout.is_finite() && self.timeout > 0.0) {
            return Err(CommandError::user(format!(
                "--timeout {} must be a positive number of seconds",
                self.timeout
            )));
        }
        if !(self.start_timeout.is_finite() && self.start_timeout > 0.0) {
            return Err(CommandError::user(format!(
                "--start-timeout {} must be a positive number of seconds",
                self.start_timeout
            )));
        }
        let mut o = Options::new(self.agent.clone());
        o.start_timeout = Duration::from_secs_f64(self.start_timeout);
        o.services_port = self.services_port.unwrap_or(0);
        o.upstream = self.upstream.clone().filter(|u| !u.is_empty());
        o.anthropic_upstream = self.anthropic_upstream.clone().filter(|u| !u.is_empty());
        o.turn_timeout = Duration::from_secs_f64(self.timeout);
        o.dialect = match self.dialect.as_str() {
            "vlinder" => Dialect::Vlinder,
            _ => Dialect::Convo,
        };
        Ok(o)
    }
}

/// Run an agent on a timeline without a terminal: each input is one turn.
///
/// Every input is POSTed to the agent (see docs/AGENTS.md); the turn is
/// recorded as invoke → the agent's kv and inference calls → complete, and
/// the answer is printed on stdout, one per input (`--json`: one JSON line
/// per turn with its nodes). Inputs come from --input (repeatable), or one
/// per line from --inputs FILE (`-` for stdin), or from stdin when neither
/// is given. When SESSION matches no session, a new one is created, titled
/// SESSION (or with that id, when it is a full `ses-…` id). Another
/// run/chat/replay on the same timeline is waited for. Exit 1 when a turn
/// failed (it is recorded all the same).
///
/// Examples:
///   convo run todo --input "add milk" -- python3 examples/todo-agent/agent.py
///   convo run todo --branch fix --agent-url http://127.0.0.1:8000/invoke --input list
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Session id, unique id prefix or title (created when none matches)
    pub session: String,
    /// Timeline to run on
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// One input (repeat for several turns)
    #[arg(long = "input", value_name = "TEXT")]
    pub inputs: Vec<String>,
    /// Read inputs from FILE, one per line (`-`: stdin)
    #[arg(long = "inputs", value_name = "FILE", conflicts_with = "inputs")]
    pub inputs_file: Option<PathBuf>,
    /// Print one JSON line per turn with its nodes
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// The session named `q`, created when none matches.
pub fn find_or_create(pool: &StorePool, q: &str, agent: &str) -> CmdResult<(SessionId, bool)> {
    let q = q.to_owned();
    let agent = agent.to_owned();
    let r = pool.run_blocking(|store| match store.find_session(&q) {
        Ok(s) => Ok((s.id, false)),
        Err(convo_store::StoreError::NoSession(_)) => {
            let (id, title) = match SessionId::parse(&q) {
                Ok(id) => (id, None),
                Err(_) => (SessionId::new_random(), Some(q.as_str())),
            };
            let row = store.transaction(|l| l.create_session(id, &agent, title, super::now()))?;
            Ok((row.id, true))
        }
        Err(e) => Err(e),
    })?;
    Ok(r)
}

pub fn runtime() -> CmdResult<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CommandError::user(format!("cannot start the runtime: {e}")))
}

/// Takes the timeline's lock, saying on stderr when it has to wait.
pub fn lock_waiting(
    env: &Env,
    s: &SessionId,
    b: &BranchName,
    who: &str,
) -> CmdResult<TimelineLock> {
    match TimelineLock::acquire(&lock_dir(env), s, b, false, who) {
        Err(HarnessError::Busy { holder, .. }) => {
            eprintln!(
                "convo: waiting for `{b}` of session {s}, in use by {}",
                visible(&holder, Newlines::Escape)
            );
            Ok(TimelineLock::acquire(&lock_dir(env), s, b, true, who)?)
        }
        other => Ok(other?),
    }
}

pub fn lock_dir(env: &Env) -> PathBuf {
    env.home.join("locks")
}

/// The timeline must exist (a fork is made with `convo session fork`).
pub fn check_branch(pool: &StorePool, s: &SessionId, b: &BranchName) -> CmdResult<()> {
    let (s, b) = (*s, b.clone());
    pool.run_blocking(|st| st.branch(&s, &b)).map_err(|e| {
        let hint = matches!(e, convo_store::StoreError::NoBranch { .. })
            .then_some("create it with `convo session fork SESSION --from NODE --branch NAME`");
        let c = CommandError::from(e);
        match hint {
            Some(h) => c.with_hint(h),
            None => c,
        }
    })?;
    Ok(())
}

fn read_inputs(a: &RunArgs) -> CmdResult<Vec<String>> {
    if !a.inputs.is_empty() {
        return Ok(a.inputs.clone());
    }
    let text = match a.inputs_file.as_deref() {
        Some(p) if p != std::path::Path::new("-") => std::fs::read_to_string(p).map_err(|e| {
            CommandError::user(format!("cannot read inputs from {}: {e}", p.display()))
        })?,
        _ => {
            let mut s = String::new();
            for line in std::io::stdin().lock().lines() {
                s.push_str(&line.map_err(|e| {
                    CommandError::user(format!("cannot read inputs from stdin: {e}"))
                })?);
                s.push('\n');
            }
            s
        }
    };
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

pub fn run(env: &Env, a: RunArgs) -> CmdResult {
    let branch = branch_name(&a.branch)?;
    let spec = a.agent.spec()?;
    let mut opts = a.agent.options()?;
    opts.lock_dir = Some(lock_dir(env));
    opts.holder = "convo run".to_owned();
    let inputs = read_inputs(&a)?;
    let pool = StorePool::open(&env.store_url, 4)?;
    let (session, created) = find_or_create(&pool, &a.session, &opts.agent_name)?;
    if created {
        eprintln!(
            "convo: new session {session} (`{}`)",
            visible(&a.session, Newlines::Escape)
        );
    }
    check_branch(&pool, &session, &branch)?;
    let _lock = lock_waiting(env, &session, &branch, "convo run")?;
    let rt = runtime()?;
    let failed = rt.block_on(async {
        let mut h = Harness::start(pool, &spec, opts).await?;
        let mut failed = 0usize;
        for input in &inputs {
            let r = match h
                .turn(&session, &branch, input, std::future::pending())
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    h.stop().await;
                    return Err(CommandError::from(e));
                }
            };
            if let Some(f) = &r.failure {
                failed += 1;
                eprintln!(
                    "convo: turn failed ({}): {}",
                    f.kind(),
                    visible(&f.message(), Newlines::Escape)
                );
            }
            if a.json {
                let turn = h.turn_count(&session, &branch).await.unwrap_or(0);
                let nodes: Vec<_> = r
                    .nodes
                    .iter()
                    .map(|n| {
                        convo_runtime::wire::node(&n.stored, Some(&n.payload)).with_turn(turn)
                    })
                    .collect();
                let line = serde_json::json!({
                    "session": session.to_string(),
                    "branch": branch.as_str(),
                    "turn": turn,
                    "input": input,
                    "output": r.output_text(),
                    "failure": r.failure.as_ref().map(|f| serde_json::json!({"kind": f.kind(), "message": f.message()})),
                    "nodes": nodes,
                });
                println!("{line}");
            } else if r.failure.is_none() {
                println!("{}", visible(&r.output_text(), Newlines::Keep));
            }
        }
        h.stop().await;
        Ok::<_, CommandError>(failed)
    })?;
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
