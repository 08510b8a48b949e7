use super::{CmdResult, CommandError, Env, branch_name, find_session, now};
use clap::Args;
use convo_store::Draft;
use std::io::{BufRead, Write};
use std::process::ExitCode;

/// Append messages read as JSON lines from stdin.
///
/// Every --batch lines are one transaction (default 1); each node's hash
/// is printed once its transaction has committed, so a printed hash is
/// always in the store.
///
/// Each line is one JSON object; only `kind` and `payload` are required:
///   {"kind": "invoke", "payload": "Tell me about Paris"}
///   {"kind": "request", "payload": "{\"prompt\": \"…\"}", "to": "infer"}
///   {"kind": "response", "payload": "…", "from": "infer", "diagnostics": {"status": 200}, "sequence": 1}
///   {"kind": "complete", "payload": "Paris is…", "state": "<64 hex digits>"}
/// Fields: kind (invoke, request, response, complete), payload (text, or
/// base64 with "payload_encoding": "base64" for bytes that are not UTF-8),
/// from / to (default by kind), diagnostics (a JSON object), state
/// (complete only: the state root it carries), sequence (response only:
/// the request it answers). The same shape as the HTTP API's appends.
///
/// Examples:
///   convo ingest Paris < turns.jsonl
///   jq -c '.[]' export.json | convo ingest Paris --branch import --batch 10000
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct IngestArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// Timeline to append to
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Lines per transaction
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
}

pub fn run(env: &Env, a: IngestArgs) -> CmdResult {
    let branch = branch_name(&a.branch)?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let batch = a.batch.max(1);
    let mut pending: Vec<Draft> = Vec::with_capacity(batch);
    let stdout = std::io::stdout();
    let flush = |pending: &mut Vec<Draft>, store: &mut convo_store::Store| -> CmdResult<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let hashes = store.append_many(&s.id, &branch, pending)?;
        let mut out = stdout.lock();
        for h in hashes {
            writeln!(out, "{h}")?;
        }
        out.flush()?;
        pending.clear();
        Ok(())
    };
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let lineno = i + 1;
        let line = line.map_err(|e| CommandError::user(format!("stdin line {lineno}: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| CommandError::user(format!("stdin line {lineno}: {why}"));
        let l: convo_api::AppendLine =
            convo_core::json::from_str_unique(&line).map_err(|e| bad(e.to_string()))?;
        pending.push(l.to_draft(&s.agent, now()).map_err(bad)?);
        if pending.len() >= batch {
            flush(&mut pending, &mut store).map_err(|e| {
                CommandError::user(format!("stdin line {lineno}: {}", e.message_text()))
            })?;
        }
    }
    flush(&mut pending, &mut store)?;
    Ok(ExitCode::SUCCESS)
}
