use super::{CmdResult, Env, find_session};
use crate::output::{node_json, node_line};
use clap::Args;
use convo_runtime::Reconnecting;
use convo_store::{Access, ErrorKind, StoreError};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Print every node as it is appended, by any process, in store order.
///
/// Starts after follow cursor --after (default: the current end, so only new
/// nodes; 0 replays everything) and never skips or repeats a node: each line
/// carries its cursor, so a restarted watch resumes with --after.
/// With --json, prints one JSON object per line.
///
/// On PostgreSQL, a lost connection (a server restart) is retried with
/// backoff (0.1 s doubling to 5 s, a note on stderr) and the watch resumes
/// after the last node it printed: no gap, no repeat.
///
/// Examples:
///   convo watch                          # new nodes from now on
///   convo watch --after 0 --json | jq .  # everything, then new nodes
///   convo watch --session Paris --count 10
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
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
    // A cursor past the end means "nothing yet" (watch from the end),
    // never a replay of the store.
    let end = store.end_cursor()?;
    let mut cursor = a.after.map_or(end, |c| c.min(end));
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    let reconnects =
        env.store_url.starts_with("postgres://") || env.store_url.starts_with("postgresql://");
    let mut conn = Reconnecting::from_store(&env.store_url, Access::Read, store);
    loop {
        let fetched = conn.run(|store| {
            store.follow_with_payloads(cursor, 1000).and_then(|page| {
                if page.is_empty() {
                    store.wait_for_append(Duration::from_secs(1))?;
                }
                Ok(page)
            })
        });
        let page = match fetched {
            Ok(p) => p,
            Err(e) if reconnects && e.kind() == ErrorKind::Unavailable => {
                reconnect(&mut conn, &e, cursor)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if page.is_empty() {
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

/// Waits for the store to come back after `lost` (a new connection every
/// 0.1 s, 0.2 s … up to 5 s, for as long as the server is unreachable);
/// any other error ends the watch.
fn reconnect(conn: &mut Reconnecting, lost: &StoreError, cursor: u64) -> CmdResult<()> {
    use convo_core::text::{Newlines, visible};
    eprintln!(
        "watch: lost the store ({}); reconnecting",
        visible(&lost.to_string(), Newlines::Escape)
    );
    conn.retry(|s| s.end_cursor(), || false, |_| {})?;
    eprintln!("watch: reconnected; resuming after cursor {cursor}");
    Ok(())
}
