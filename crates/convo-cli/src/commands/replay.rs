use super::run::{AgentArgs, check_branch, lock_waiting, runtime};
use super::{CmdResult, CommandError, Env, branch_name, prefix};
use clap::Args;
use convo_core::text::{Newlines, visible};
use convo_harness::{Harness, ReplayOptions};
use convo_runtime::StorePool;
use std::process::ExitCode;

/// Re-run a recorded timeline against an agent and report the first divergence.
///
/// Every recorded input is sent again, in order. The agent's inference
/// calls are answered from the recording (nothing goes upstream) and its
/// kv state is the recorded state as of each turn; each request it makes,
/// its output, its failure and its final state are compared with the
/// recording. The replay is recorded as a new session titled
/// `replay of SESSION BRANCH` (--into TITLE to choose). Exit 0 when everything matched; exit 1 with the first
/// divergence (turn, sequence, what, a diff). With --live-after NODE, the
/// turns after that node go live (inference to --upstream) and are not
/// compared.
///
/// An inference call that differs only in volatile values (ids, durations,
/// timestamps, temporary paths, found by rules per known agent and by what
/// the recording shows to vary) still matches; each tolerated difference
/// is reported with its JSON pointer. --strict matches exactly;
/// --match-ignore POINTER leaves a field out of the comparison.
///
/// Examples:
///   convo replay todo -- python3 examples/todo-agent/agent.py
///   convo replay todo --branch fix --live-after 3fa9c1 --upstream http://127.0.0.1:11434 -- ./agent
#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// The recorded timeline to replay
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Go live for the turns after this node (HASH, BRANCH@TURN, BRANCH~N)
    #[arg(long, value_name = "NODE")]
    pub live_after: Option<String>,
    /// Title of the session the replay is recorded in [default: replay of SESSION BRANCH]
    #[arg(long, value_name = "NAME")]
    pub into: Option<String>,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
    /// Leave this JSON pointer out when comparing inference calls (/body/temperature, /body/input/*/id); repeatable
    #[arg(long, value_name = "POINTER")]
    pub match_ignore: Vec<String>,
    /// Compare inference calls exactly (no volatile difference tolerated)
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub fn run(env: &Env, a: ReplayArgs) -> CmdResult {
    let branch = branch_name(&a.branch)?;
    let spec = a.agent.spec()?;
    let mut opts = a.agent.options()?;
    opts.lock_dir = Some(super::run::lock_dir(env));
    opts.holder = "convo replay".to_owned();
    let mut matcher =
        convo_proxy::replay::Matcher::new(&a.match_ignore).map_err(CommandError::user)?;
    matcher.strict = a.strict;
    let mut ropts = ReplayOptions {
        live_after: None,
        name: a.into.as_deref().map(branch_name).transpose()?,
        matcher,
    };
    let pool = StorePool::open(&env.store_url, 4)?;
    let session = pool
        .run_blocking(|st| st.find_session(&a.session))
        .map_err(CommandError::from)?
        .id;
    check_branch(&pool, &session, &branch)?;
    if let Some(r) = a.live_after.clone() {
        // Any reference: a hash, `main@3`, `main~2`.
        let shown = r.clone();
        let n = pool
            .run_blocking(move |st| st.resolve_ref(&session, &r))
            .map_err(|e| CommandError::from(e).prefixed(&format!("--live-after {shown}: ")))?;
        ropts.live_after = Some(prefix(&n.hash.to_hex())?);
    }
    let _lock = lock_waiting(env, &session, &branch, "convo replay")?;
    let rt = runtime()?;
    let json = a.json;
    let report = rt.block_on(async {
        let mut h = Harness::start(pool, &spec, opts).await?;
        let r = h
            .replay(&session, &branch, &ropts, |t| {
                if !json {
                    let mark = if t.live {
                        "live"
                    } else if t.matched {
                        "same"
                    } else {
                        "DIFFERS"
                    };
                    eprintln!(
                        "turn {:>4}  {mark:<7}  {}",
                        t.turn,
                        visible(&t.input, Newlines::Escape)
                    );
                }
            })
            .await;
        h.stop().await;
        r.map_err(CommandError::from)
    })?;
    if json {
        crate::output::print_json(
            &serde_json::to_value(&report).unwrap_or(serde_json::Value::Null),
        );
    } else {
        for t in &report.tolerated {
            let at: Vec<&str> = t.tolerated.iter().map(|x| x.pointer.as_str()).collect();
            eprintln!(
                "turn {:>4}  call #{} matched tolerating {}",
                t.turn,
                t.sequence,
                at.join(", ")
            );
        }
        match &report.divergence {
            None => println!(
                "replayed {} of {} turns (recorded as session {}): no divergence",
                report.turns.len(),
                report.recorded_turns,
                report.session
            ),
            Some(d) => {
                let at = match d.sequence {
                    Some(s) => format!("turn {}, call #{s}", d.turn),
                    None => format!("turn {}", d.turn),
                };
                println!(
                    "divergence at {at}: {} differs (replay recorded as session {})",
                    d.what, report.session
                );
                println!("{}", visible(&d.diff, Newlines::Keep));
            }
        }
    }
    Ok(if report.divergence.is_some() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
