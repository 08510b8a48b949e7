use super::{CmdResult, CommandError, Env};
use crate::output::print_json;
use clap::Args;
use convo_store::{Problem, Store, StoreError, VerifyReport};
use serde_json::json;
use std::process::ExitCode;

/// Recompute every hash and check every link and row; exit 1 if anything is wrong
///
/// Checks the database itself (SQLite's integrity check, the schema
/// version), every payload and state value, the fact journal, every node
/// and every session and branch row against what the nodes and the journal
/// say. Bad data is reported, never stops the check. With `--checkpoint`,
/// also proves that the store still extends each signed checkpoint.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

/// Whether an error opening or reading the store means the data is bad
/// (a report entry) rather than that convo cannot look (an error).
fn is_bad_data(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Damaged(_)
            | StoreError::Corrupt(_)
            | StoreError::Backend(_)
            | StoreError::NotAStore { .. }
    )
}

pub fn run(env: &Env, args: VerifyArgs) -> CmdResult {
    let result = Store::open_as(&env.store_url, env.access).and_then(|mut s| s.verify());
    let r = match result {
        Ok(r) => r,
        Err(e) if is_bad_data(&e) => {
            let mut r = VerifyReport::default();
            r.problems.push(Problem {
                object: "database".into(),
                reason: e.to_string(),
            });
            r
        }
        Err(e) => {
            let err = CommandError::from(e);
            if args.json {
                print_json(&json!({ "ok": false, "error": err.message_text() }));
            }
            return Err(err);
        }
    };
    if args.json {
        print_json(&json!({
            "ok": r.is_clean(),
            "nodes": r.nodes,
            "blobs": r.blobs,
            "blob_bytes": r.blob_bytes,
            "branches": r.branches,
            "state_roots": r.state_roots,
            "facts": r.facts,
            "problems": r.problems,
        }));
    } else if r.is_clean() {
        println!(
            "ok: {} nodes, {} blobs ({} bytes), {} branches, {} state roots, {} facts verified",
            r.nodes, r.blobs, r.blob_bytes, r.branches, r.state_roots, r.facts
        );
    } else {
        for p in &r.problems {
            println!("{}: {}", p.object, p.reason);
        }
        eprintln!(
            "verify failed: {} problem(s) in {} nodes",
            r.problems.len(),
            r.nodes
        );
    }
    Ok(if r.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
