use super::{CmdResult, CommandError, Env, now, prefix};
use crate::output::print_json;
use clap::Args;
use convo_core::ContentHash;
use serde_json::json;
use std::process::ExitCode;

/// Erase a payload's bytes from the store, keeping every hash verifiable
///
/// A node hashes its payload's SHA-256, not the stored bytes, so the bytes
/// can go while the chain still verifies. The redaction is recorded in the
/// hashed fact journal (which digest, when, by whom, why); `show`, `turn`,
/// exports, the web view and the git projection then show a tombstone, and
/// `verify` reports the payload as redacted, not as tampering. Every node
/// with the same payload shares it; a secret copied into another payload
/// needs its own redaction. Afterwards the database's files are rewritten
/// so no copy of the bytes is left in them, the search index's words
/// included (SQLite: WAL checkpoint, the index's segments merged, VACUUM;
/// PostgreSQL: VACUUM FULL of blobs, the search index and pg_statistic).
/// PostgreSQL's write-ahead log (and any archive, replica or backup of the
/// database) keeps the bytes until the server recycles it: that is out of
/// convo's reach. Run `convo git sync` to rewrite the projection.
///
/// Examples:
///   convo redact 3fa9c1d2 --reason "a leaked API key"
///   convo redact --content 128e9003…082d --reason "personal data"
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct RedactArgs {
    /// The node (hash or unique prefix) whose payload to erase
    #[arg(required_unless_present = "content", conflicts_with = "content")]
    pub node: Option<String>,
    /// Erase the bytes with this SHA-256 (64 hex digits): a payload or a state value
    #[arg(long, value_name = "SHA256")]
    pub content: Option<String>,
    /// Why (recorded with the redaction and shown in its tombstone)
    #[arg(long)]
    pub reason: String,
    /// Who redacts [default: $USER]
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Skip rewriting the database's files (faster; the bytes may stay in
    /// free pages until a later redaction rewrites them)
    #[arg(long)]
    pub no_vacuum: bool,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: RedactArgs) -> CmdResult {
    let mut store = env.open()?;
    let digest = match (&a.node, &a.content) {
        (_, Some(c)) => hex::decode(c.trim())
            .ok()
            .and_then(|b| ContentHash::from_slice(&b))
            .ok_or_else(|| CommandError::user(format!("`{c}` is not a SHA-256 (64 hex digits)")))?,
        (Some(n), None) => store.node(&prefix(n)?)?.node.payload,
        (None, None) => return Err(CommandError::user("name a node or give --content SHA256")),
    };
    let by =
        a.by.clone()
            .or_else(|| std::env::var("USER").ok())
            .or_else(|| std::env::var("LOGNAME").ok())
            .unwrap_or_default();
    let done = store.redact(&digest, by.trim(), a.reason.trim(), now(), a.no_vacuum)?;
    if a.json {
        print_json(&json!({
            "payload": done.redaction.payload.to_hex(),
            "fact": done.redaction.fact,
            "at": done.redaction.at,
            "by": done.redaction.by,
            "reason": done.redaction.reason,
            "bytes": done.bytes,
            "files_rewritten": done.erased,
            "warning": done.warning,
        }));
    } else {
        println!(
            "redacted payload {} ({} bytes), fact {}: {}",
            done.redaction.payload,
            done.bytes,
            done.redaction.fact,
            crate::output::clean(&done.redaction.tombstone())
        );
        if !done.erased {
            eprintln!(
                "note: the database's files were not rewritten (--no-vacuum); the bytes may remain in free pages"
            );
        }
    }
    if let Some(w) = &done.warning {
        eprintln!("warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
