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
///
/// Examples:
///   convo verify
///   convo verify --json | jq '.problems'
///   convo verify --checkpoint convo-2026-11-23.checkpoint
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct VerifyArgs {
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
    /// Also prove the store extends these signed checkpoints (`convo checkpoint`)
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub checkpoint: Vec<std::path::PathBuf>,
    /// The public key checkpoints must be signed with (64 hex) [default: that of $CONVO_HOME/checkpoint.key, if any]
    #[arg(long, value_name = "HEX")]
    pub trusted_key: Option<String>,
}

/// Checks each checkpoint file against the store; problems go into `r`.
fn check_checkpoints(env: &Env, args: &VerifyArgs, store: &mut Store, r: &mut VerifyReport) {
    let trusted = args.trusted_key.clone().or_else(|| {
        let p = super::checkpoint::default_key(env);
        std::fs::read_to_string(p).ok().and_then(|t| {
            let seed: [u8; 32] = hex::decode(t.trim()).ok()?.try_into().ok()?;
            Some(hex::encode(
                convo_store::checkpoint::signing_key(&seed)
                    .verifying_key()
                    .to_bytes(),
            ))
        })
    });
    for path in &args.checkpoint {
        let object = format!("checkpoint {}", path.display());
        let mut bad = |reason: String| {
            r.problems.push(Problem {
                object: object.clone(),
                reason,
            })
        };
        let cp = match super::checkpoint::read_checkpoint(path) {
            Ok(cp) => cp,
            Err(why) => {
                bad(why);
                continue;
            }
        };
        if let Err(why) = cp.check_signature() {
            bad(why);
            continue;
        }
        if let Some(t) = &trusted
            && !t.eq_ignore_ascii_case(&cp.key)
        {
            bad(format!(
                "it is signed by key {}, not the trusted key {t}",
                cp.key
            ));
            continue;
        }
        match store.check_checkpoint(&cp) {
            Ok(found) => {
                r.checkpoints += 1;
                r.problems.extend(found.into_iter().map(|p| Problem {
                    object: p.object,
                    reason: format!("{} (against {})", p.reason, path.display()),
                }));
            }
            Err(e) => bad(format!("cannot check it: {e}")),
        }
    }
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
    let result = Store::open_as(&env.store_url, env.access).and_then(|mut s| {
        let total = s.end_cursor().unwrap_or(0);
        let mut bar = crate::ui::Progress::new(total, "nodes");
        let mut r = s.verify_with_progress(&mut |p| match p {
            convo_store::VerifyProgress::Database => bar.set("database", 0),
            convo_store::VerifyProgress::Blobs(n) => bar.set(&format!("blobs {n}"), 0),
            convo_store::VerifyProgress::Nodes(n) => bar.set("nodes", n),
        })?;
        bar.finish();
        check_checkpoints(env, &args, &mut s, &mut r);
        Ok(r)
    });
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
            "checkpoints": r.checkpoints,
            "redacted": r.redacted,
            "problems": r.problems,
        }));
    } else if r.is_clean() {
        println!(
            "ok: {} nodes, {} blobs ({} bytes), {} branches, {} state roots, {} facts verified{}",
            r.nodes,
            r.blobs,
            r.blob_bytes,
            r.branches,
            r.state_roots,
            r.facts,
            if r.checkpoints > 0 {
                format!("; the store extends {} checkpoint(s)", r.checkpoints)
            } else {
                String::new()
            }
        );
        if r.redacted > 0 {
            println!(
                "{} payload(s) redacted, each by a recorded redaction (not tampering)",
                r.redacted
            );
        }
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
