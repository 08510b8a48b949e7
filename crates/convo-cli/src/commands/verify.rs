use super::{CmdResult, Env};
use crate::output::print_json;
use serde_json::json;
use std::process::ExitCode;

/// Recompute every hash and check every link; exit 1 if anything is wrong.
pub fn run(env: &Env, as_json: bool) -> CmdResult {
    let mut store = env.open()?;
    let r = store.verify()?;
    if as_json {
        print_json(&json!({
            "ok": r.is_clean(),
            "nodes": r.nodes,
            "blobs": r.blobs,
            "blob_bytes": r.blob_bytes,
            "branches": r.branches,
            "state_roots": r.state_roots,
            "problems": r.problems,
        }));
    } else if r.is_clean() {
        println!(
            "ok: {} nodes, {} blobs ({} bytes), {} branches, {} state roots verified",
            r.nodes, r.blobs, r.blob_bytes, r.branches, r.state_roots
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
