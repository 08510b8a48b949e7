use super::{CmdResult, CommandError, Env, branch_name, find_session, now};
use clap::Args;
use convo_store::Draft;
use std::io::{BufRead, Read, Write};
use std::process::ExitCode;

/// Append messages read as JSON lines from stdin.
///
/// Every --batch lines are one transaction (default 1); each node's hash
/// is printed once its transaction has committed, so a printed hash is
/// always in the store. With --json, each node is printed instead as one
/// line of JSON: the node object of `show --json`, payload included
/// (JSON Lines).
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
///   convo ingest Paris --json < turns.jsonl | jq -r '.seq'
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
    /// Refuse a payload larger than this many bytes (default 64 MiB, or
    /// CONVO_MAX_PAYLOAD), as `record` does; a line is read only up to what
    /// such a payload can take once JSON-escaped
    #[arg(long, value_name = "BYTES")]
    pub max_payload: Option<u64>,
    /// Print each committed node as one line of JSON (its node object)
    #[arg(long)]
    pub json: bool,
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
        let mut out = stdout.lock();
        if a.json {
            let nodes = store.transaction(|l| l.append_many_nodes(&s.id, &branch, pending))?;
            for (n, d) in nodes.iter().zip(pending.iter()) {
                let v = crate::output::node_json(n, Some(&d.payload));
                writeln!(out, "{}", serde_json::to_string(&v).unwrap_or_default())?;
            }
        } else {
            for h in store.transaction(|l| l.append_many(&s.id, &branch, pending))? {
                writeln!(out, "{h}")?;
            }
        }
        out.flush()?;
        pending.clear();
        Ok(())
    };
    let max = super::record::max_payload(a.max_payload)?;
    // The longest line a payload of `max` bytes can need: every byte
    // escaped as \u00XX, plus the other fields.
    let max_line = max.saturating_mul(6).saturating_add(1 << 16);
    let mut input = std::io::stdin().lock();
    let mut buf = Vec::new();
    for lineno in 1.. {
        buf.clear();
        let n = (&mut input)
            .take(max_line.saturating_add(1))
            .read_until(b'\n', &mut buf)
            .map_err(|e| CommandError::user(format!("stdin line {lineno}: {e}")))?;
        if n == 0 {
            break;
        }
        if buf.len() as u64 > max_line && buf.last() != Some(&b'\n') {
            return Err(super::record::too_large(
                &format!("stdin line {lineno}"),
                None,
                max,
            ));
        }
        let line = std::str::from_utf8(&buf)
            .map_err(|e| CommandError::user(format!("stdin line {lineno}: not UTF-8 ({e})")))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| CommandError::user(format!("stdin line {lineno}: {why}"));
        let l: convo_api::AppendLine =
            convo_core::json::from_str_unique(line).map_err(|e| bad(e.to_string()))?;
        let draft = convo_runtime::wire::draft(&l, &s.agent, now()).map_err(bad)?;
        if draft.payload.len() as u64 > max {
            return Err(super::record::too_large(
                &format!("the payload on stdin line {lineno}"),
                Some(draft.payload.len() as u64),
                max,
            ));
        }
        pending.push(draft);
        if pending.len() >= batch {
            flush(&mut pending, &mut store)
                .map_err(|e| e.prefixed(&format!("stdin line {lineno}: ")))?;
        }
    }
    flush(&mut pending, &mut store)?;
    Ok(ExitCode::SUCCESS)
}
