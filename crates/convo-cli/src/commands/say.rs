use super::{CmdResult, Env, branch_name, find_session, now};
use clap::Args;
use convo_core::{Diagnostics, Kind};
use convo_store::Draft;
use std::process::ExitCode;

/// Record a user input and the agent's answer in one go (one transaction),
/// printing both hashes.
///
/// Examples:
///   convo say Paris --user "And its population?" --agent "About 2.1 million."
///   convo say Paris --branch retry --user "…" --agent "…" --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct SayArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// What the user said
    #[arg(long)]
    pub user: String,
    /// What the agent answered
    #[arg(long)]
    pub agent: String,
    /// Timeline to append to
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Print both nodes as one JSON array (node objects as `show --json`)
    #[arg(long)]
    pub json: bool,
    /// Wait for a turn `convo run`/`chat` has open on the timeline to end (without it: refused, exit 4)
    #[arg(long)]
    pub wait: bool,
}

pub fn run(env: &Env, a: SayArgs) -> CmdResult {
    let branch = branch_name(&a.branch)?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let _turn = super::guard_timeline(env, &mut store, &s.id, &branch, a.wait)?;
    let t = now();
    let mk = |kind, payload: &str, t| {
        let (from, to) = super::record::default_ends(kind, &s.agent);
        Draft {
            kind,
            from,
            to,
            payload: payload.as_bytes().to_vec(),
            diagnostics: Diagnostics::empty(),
            state: None,
            sequence: None,
            created_at: t,
        }
    };
    let drafts = [
        mk(Kind::Invoke, &a.user, t),
        mk(Kind::Complete, &a.agent, t),
    ];
    let nodes = store.transaction(|l| {
        super::turn_guard(l, &s.id, &branch)?;
        drafts
            .iter()
            .map(|d| l.append(&s.id, &branch, d))
            .collect::<convo_store::Result<Vec<_>>>()
    })?;
    if a.json {
        let v: Vec<_> = nodes
            .iter()
            .zip(&drafts)
            .map(|(n, d)| crate::output::node_json(n, Some(&d.payload)))
            .collect();
        crate::output::print_json(&serde_json::Value::Array(v));
    } else {
        for n in &nodes {
            println!("{}", n.hash);
        }
    }
    Ok(ExitCode::SUCCESS)
}
