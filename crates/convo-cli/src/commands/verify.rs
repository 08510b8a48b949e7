use super::{CmdResult, CommandError, Env};
use crate::output::print_json;
use clap::Args;
use convo_store::{Checkpoint, Problem, ProblemKind, Store, StoreError, VerifyReport};
use serde_json::json;
use std::process::ExitCode;

/// Recompute every hash and check every link and row; exit 1 if anything is wrong
///
/// Checks the database itself (SQLite's integrity check, the schema
/// version), every payload and state value, the fact journal, every node
/// and every session and branch row against what the nodes and the journal
/// say. Bad data is reported, never stops the check. With `--checkpoint`,
/// also proves that the store still extends each signed checkpoint (a
/// directory stands for every checkpoint file in it); `convo git verify`
/// does the same for the checkpoints published in the repository.
///
/// Examples:
///   convo verify
///   convo verify --json | jq '.problems'
///   convo verify --checkpoint convo-2026-11-23.checkpoint
///   convo verify --checkpoint /mnt/offsite/convo   # every checkpoint in it
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct VerifyArgs {
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
    /// Also prove the store extends these signed checkpoints (`convo checkpoint`): files, or directories of them
    #[arg(long, value_name = "FILE|DIR", num_args = 1..)]
    pub checkpoint: Vec<std::path::PathBuf>,
    /// The public key checkpoints must be signed with (64 hex) [default: that of $CONVO_HOME/checkpoint.key, if any]
    #[arg(long, value_name = "HEX")]
    pub trusted_key: Option<String>,
}

/// The public key checkpoints must be signed with: `--trusted-key`, else
/// that of this home's key, if there is one.
pub fn trusted_key(env: &Env, given: Option<&str>) -> Option<String> {
    given.map(str::to_owned).or_else(|| {
        let p = super::checkpoint::default_key(env);
        std::fs::read_to_string(p).ok().and_then(|t| {
            let seed: [u8; 32] = hex::decode(t.trim()).ok()?.try_into().ok()?;
            Some(hex::encode(
                convo_store::checkpoint::signing_key(&seed)
                    .verifying_key()
                    .to_bytes(),
            ))
        })
    })
}

/// Checkpoints to check: where each came from (for messages), and the
/// checkpoint or why it could not be read.
pub type Sources = Vec<(String, Result<Checkpoint, String>)>;

/// Reads `--checkpoint` arguments: files, and directories (each checkpoint
/// file in them, in name order).
fn sources(paths: &[std::path::PathBuf]) -> Sources {
    let mut out = Sources::new();
    for path in paths {
        if path.is_dir() {
            match super::checkpoint::checkpoint_files(path) {
                Ok(files) if files.is_empty() => out.push((
                    path.display().to_string(),
                    Err("the directory holds no checkpoint (*.checkpoint, *.json)".into()),
                )),
                Ok(files) => out.extend(files.into_iter().map(|f| {
                    (
                        f.display().to_string(),
                        super::checkpoint::read_checkpoint(&f),
                    )
                })),
                Err(e) => out.push((
                    path.display().to_string(),
                    Err(format!("cannot read the directory: {e}")),
                )),
            }
        } else {
            out.push((
                path.display().to_string(),
                super::checkpoint::read_checkpoint(path),
            ));
        }
    }
    out
}

/// Checks each checkpoint against the store (signatures one by one, then
/// all in one pass over the store); problems go into `problems`. Returns
/// how many checkpoints the store extends.
pub fn check_sources(
    trusted: Option<&str>,
    store: &mut Store,
    sources: Sources,
    problems: &mut Vec<Problem>,
) -> usize {
    let mut good: Vec<(String, Checkpoint)> = Vec::new();
    for (label, cp) in sources {
        let object = format!("checkpoint {label}");
        let mut bad = |reason: String| {
            problems.push(Problem::new(
                ProblemKind::Checkpoint,
                object.clone(),
                reason,
            ))
        };
        let cp = match cp {
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
        if let Some(t) = trusted
            && !t.eq_ignore_ascii_case(&cp.key)
        {
            bad(format!(
                "it is signed by key {}, not the trusted key {t}",
                cp.key
            ));
            continue;
        }
        good.push((label, cp));
    }
    let cps: Vec<Checkpoint> = good.iter().map(|(_, c)| c.clone()).collect();
    match store.check_checkpoints(&cps) {
        Ok(found) => {
            let mut extended = 0;
            for ((label, _), found) in good.iter().zip(found) {
                if found.is_empty() {
                    extended += 1;
                }
                problems.extend(found.into_iter().map(|p| Problem {
                    reason: format!("{} (against {label})", p.reason),
                    ..p
                }));
            }
            extended
        }
        Err(e) => {
            problems.push(Problem::new(
                ProblemKind::Checkpoint,
                "checkpoints",
                format!("cannot check them: {e}"),
            ));
            0
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
        if !args.checkpoint.is_empty() {
            let trusted = trusted_key(env, args.trusted_key.as_deref());
            let mut found = Vec::new();
            let n = check_sources(
                trusted.as_deref(),
                &mut s,
                sources(&args.checkpoint),
                &mut found,
            );
            r.checkpoints += n as u64;
            r.problems.extend(found);
        }
        Ok(r)
    });
    let r = match result {
        Ok(r) => r,
        Err(e) if is_bad_data(&e) => {
            let mut r = VerifyReport::default();
            r.problems.push(Problem::new(
                ProblemKind::Database,
                "database",
                e.to_string(),
            ));
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
        use convo_runtime::wire::FromStore as _;
        let view = convo_api::VerifyView::from_store(&r);
        print_json(&serde_json::to_value(&view).unwrap_or_default());
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
