use super::{CmdResult, Env, find_session};
use crate::output::{node_json, node_line};
use clap::Args;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Print every node as it is appended, by any process, in store order.
///
/// Starts after follow cursor --after (default: the current end, so only new
/// nodes; 0 replays everything) and never skips or repeats a node: each line
/// carries its cursor, so a restarted watch resumes with --after.
/// With --json, prints one JSON object per line.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Only this session (id, unique prefix or title)
    pub session: Option<String>,
    /// Resume after this follow cursor
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<u64>,
    /// Stop after printing this many nodes
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
    /// One JSON object per line
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: WatchArgs) -> CmdResult {
    let mut store = env.open()?;
    let only = a
        .session
        .as_deref()
        .map(|q| find_session(&mut store, q))
        .transpose()?
        .map(|s| s.id);
    let mut cursor = match a.after {
        Some(c) => c,
        None => {
            let mut end = 0;
            loop {
                let page = store.follow(end, 10_000)?;
                match page.last() {
                    Some(n) => end = n.seq,
                    None => break end,
                }
            }
        }
    };
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    loop {
        let page = store.follow_with_payloads(cursor, 1000)?;
        if page.is_empty() {
            store.wait_for_append(Duration::from_secs(1))?;
            continue;
        }
        let mut out = stdout.lock();
        for n in &page {
            cursor = n.stored.seq;
            if only.is_some_and(|s| s != n.stored.node.session) {
                continue;
            }
            let line = if a.json {
                let mut v = node_json(&n.stored, Some(&n.payload));
                v["cursor"] = serde_json::json!(n.stored.seq);
                serde_json::to_string(&v).unwrap_or_default()
            } else {
                format!("#{} {}", n.stored.seq, node_line(&n.stored, &n.payload))
            };
            // A closed pipe (`convo watch | head`) ends the watch quietly.
            if writeln!(out, "{line}").is_err() {
                return Ok(ExitCode::SUCCESS);
            }
            printed += 1;
            if a.limit.is_some_and(|l| printed >= l) {
                let _ = out.flush();
                return Ok(ExitCode::SUCCESS);
            }
        }
        if out.flush().is_err() {
            return Ok(ExitCode::SUCCESS);
        }
    }
}
