use super::{CmdResult, Env, branch_name, find_session};
use crate::output::{node_json, node_line, print_json};
use clap::Args;
use serde_json::json;
use std::process::ExitCode;

/// Show a timeline, newest message first.
#[derive(Args, Debug)]
pub struct LogArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// Timeline
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Show at most this many messages
    #[arg(long, short = 'n')]
    pub limit: Option<usize>,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: LogArgs) -> CmdResult {
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let b = branch_name(&a.branch)?;
    let tl = store.timeline(&s.id, &b)?;
    let shown = tl.iter().rev().take(a.limit.unwrap_or(usize::MAX));
    if a.json {
        print_json(&json!(
            shown
                .map(|n| node_json(&n.stored, Some(&n.payload)))
                .collect::<Vec<_>>()
        ));
    } else {
        for n in shown {
            println!("{}", node_line(&n.stored, &n.payload));
        }
    }
    Ok(ExitCode::SUCCESS)
}
