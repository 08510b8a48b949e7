use super::{CmdResult, CommandError, Env, branch_name, find_session, now};
use clap::Args;
use convo_core::{Diagnostics, Kind, StateRoot};
use convo_store::Draft;
use serde::Deserialize;
use std::io::{BufRead, Write};
use std::process::ExitCode;

/// Append messages read as JSON lines from stdin.
///
/// Each line is an object: `{"kind": "invoke", "payload": "text",
/// "from": …, "to": …, "diagnostics": {…}, "state": "<root>", "sequence": n}`
/// (only `kind` and `payload` are required). Every --batch lines are one
/// transaction (default 1); each node's hash is printed once its
/// transaction has committed, so a printed hash is always in the store.
#[derive(Args, Debug)]
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    kind: String,
    payload: String,
    from: Option<String>,
    to: Option<String>,
    diagnostics: Option<serde_json::Value>,
    state: Option<String>,
    sequence: Option<u32>,
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
        let l: Line = convo_core::json::from_str_unique(&line).map_err(|e| bad(e.to_string()))?;
        let kind: Kind = l.kind.parse().map_err(bad)?;
        let (from, to) = super::record::default_ends(kind, &s.agent);
        pending.push(Draft {
            kind,
            from: l.from.unwrap_or(from),
            to: l.to.unwrap_or(to),
            payload: l.payload.into_bytes(),
            diagnostics: match l.diagnostics {
                Some(d) => Diagnostics::from_value(&d).map_err(|e| bad(e.to_string()))?,
                None => Diagnostics::empty(),
            },
            state: l
                .state
                .map(|r| StateRoot::from_hex(&r).map_err(|e| bad(e.to_string())))
                .transpose()?,
            sequence: l.sequence,
            created_at: now(),
        });
        if pending.len() >= batch {
            flush(&mut pending, &mut store).map_err(|e| {
                CommandError::user(format!("stdin line {lineno}: {}", e.message_text()))
            })?;
        }
    }
    flush(&mut pending, &mut store)?;
    Ok(ExitCode::SUCCESS)
}
