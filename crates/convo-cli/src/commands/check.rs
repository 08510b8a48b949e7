use super::CmdResult;
use crate::output::print_json;
use clap::Args;
use convo_formats::{MAX_INPUT_BYTES, Reader, convo::Convo};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;

/// Validate CONVO files without importing them.
///
/// Prints `FILE: ok` with the turn and participant counts for each valid
/// file; for each invalid one, its errors with the rule's name, line,
/// column and an excerpt. Exits 0 when every file is valid, 1 otherwise.
/// Reads the files only; the store is not opened.
///
/// Examples:
///   convo check chat.convo
///   convo check ~/chats/*.convo --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CheckArgs {
    /// CONVO files to validate
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CheckArgs) -> CmdResult {
    let mut bad = 0;
    let mut report = Vec::new();
    for path in &a.files {
        let name = path.display().to_string();
        let result = convo_formats::read_file(path, MAX_INPUT_BYTES)
            .and_then(|bytes| Convo.read_bytes(&name, &bytes));
        match result {
            Ok(read) => {
                for w in &read.warnings {
                    eprintln!("warning: {w}");
                }
                let (turns, participants) = read
                    .conversations
                    .first()
                    .map(|c| {
                        let n = c
                            .meta
                            .get("participants")
                            .and_then(|p| p.as_array())
                            .map_or(0, Vec::len);
                        (c.turns().len(), n)
                    })
                    .unwrap_or((0, 0));
                if a.json {
                    report.push(json!({"file": name, "valid": true, "turns": turns, "participants": participants, "warnings": read.warnings}));
                } else {
                    println!("{name}: ok ({turns} turns, {participants} participants)");
                }
            }
            Err(e) => {
                bad += 1;
                if a.json {
                    report.push(json!({
                        "file": name,
                        "valid": false,
                        "rule": e.rule,
                        "message": e.message,
                        "line": e.location.map(|l| l.line),
                        "column": e.location.map(|l| l.column),
                    }));
                } else {
                    eprintln!("{}", e.render());
                }
            }
        }
    }
    if a.json {
        print_json(&json!(report));
    } else if bad > 0 {
        eprintln!(
            "{bad} of {} file{} invalid",
            a.files.len(),
            if a.files.len() == 1 { "" } else { "s" }
        );
    }
    if bad > 0 {
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
