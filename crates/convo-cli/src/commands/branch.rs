use super::{CmdResult, Env, find_session};
use crate::cli::BranchCmd;
use crate::output::{branch_json, print_json, time};
use serde_json::json;
use std::process::ExitCode;

pub fn run(env: &Env, cmd: BranchCmd) -> CmdResult {
    let mut store = env.open()?;
    let BranchCmd::List { session, json } = cmd;
    let s = find_session(&mut store, &session)?;
    let branches = store.branches(&s.id)?;
    if json {
        print_json(&json!(branches.iter().map(branch_json).collect::<Vec<_>>()));
    } else {
        for b in &branches {
            println!(
                "{:<24} {}  {}{}",
                b.name.as_str(),
                b.head
                    .map(|h| h.short())
                    .unwrap_or_else(|| "(empty)     ".into()),
                time(b.created_at),
                if b.sealed { "  sealed" } else { "" }
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
