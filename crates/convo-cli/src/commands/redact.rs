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
/// `--session` erases a whole session's content at once (a user's thread
/// deleted): every payload of its nodes that no other session shares, what
/// its nodes' diagnostics hold beyond how calls went, and its title.
///
/// Examples:
///   convo redact 3fa9c1d2 --reason "a leaked API key"
///   convo redact --content 128e9003…082d --reason "personal data"
///   convo redact --session ses-5c1f… --reason "the user deleted it"
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct RedactArgs {
    /// The node (hash or unique prefix) whose payload to erase
    #[arg(
        required_unless_present_any = ["content", "session"],
        conflicts_with_all = ["content", "session"]
    )]
    pub node: Option<String>,
    /// Erase the bytes with this SHA-256 (64 hex digits): a payload or a state value
    #[arg(long, value_name = "SHA256", conflicts_with = "session")]
    pub content: Option<String>,
    /// Erase the content of a whole session (id, unique prefix or title)
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
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
    if let Some(s) = &a.session {
        return run_session(env, s, &a);
    }
    let mut store = env.open()?;
    let node = match &a.node {
        Some(n) if a.content.is_none() => Some(store.node(&prefix(n)?)?),
        _ => None,
    };
    let digest = match (&node, &a.content) {
        (_, Some(c)) => hex::decode(c.trim())
            .ok()
            .and_then(|b| ContentHash::from_slice(&b))
            .ok_or_else(|| CommandError::user(format!("`{c}` is not a SHA-256 (64 hex digits)")))?,
        (Some(n), None) => n.node.payload,
        (None, None) => return Err(CommandError::user("name a node or give --content SHA256")),
    };
    let by = by_of(&a);
    let (by, reason) = (by.trim(), a.reason.trim());
    // The payload's bytes, for the copies of them elsewhere (a title).
    let bytes = store.blob(&digest)?;
    let again = node.is_some() && store.redaction(&digest)?.is_some();
    let done = if again {
        None
    } else {
        Some(store.redact(&digest, by, reason, now(), true)?)
    };
    let mut extras = Vec::new();
    if let Some(n) = &node {
        if store.redact_diagnostics(&n.hash, &content_free, by, reason, now())? {
            extras.push("diagnostics");
        }
        let title = store.find_session(&n.node.session.to_string())?.title;
        if let (Some(t), Some(b)) = (title, bytes.as_deref())
            && !again
            && title_from(&t, b)
            && store.redact_title(&n.node.session, &t, by, reason, now())? > 0
        {
            extras.push("title");
        }
    }
    let warning = if a.no_vacuum || (done.is_none() && extras.is_empty()) {
        None
    } else if extras.is_empty() {
        store.erase_freed()?
    } else {
        store.erase_rewritten()?
    };
    let Some(done) = done else {
        if extras.is_empty() {
            return Err(CommandError::user(format!(
                "payload {digest} is already redacted, and so are the node's diagnostics and its session's title"
            )));
        }
        println!("redacted the {} of node {}", extras.join(" and "), digest);
        return Ok(ExitCode::SUCCESS);
    };
    if a.json {
        print_json(&json!({
            "payload": done.redaction.payload.to_hex(),
            "fact": done.redaction.fact,
            "at": done.redaction.at,
            "by": done.redaction.by,
            "reason": done.redaction.reason,
            "bytes": done.bytes,
            "also": extras,
            "files_rewritten": !a.no_vacuum,
            "warning": warning,
        }));
    } else {
        println!(
            "redacted payload {} ({} bytes){}, fact {}: {}",
            done.redaction.payload,
            done.bytes,
            if extras.is_empty() {
                String::new()
            } else {
                format!(" and the node's {}", extras.join(" and "))
            },
            done.redaction.fact,
            crate::output::clean(&done.redaction.tombstone())
        );
        if a.no_vacuum {
            eprintln!(
                "note: the database's files were not rewritten (--no-vacuum); the bytes may remain in free pages"
            );
        }
    }
    if let Some(w) = &warning {
        eprintln!("warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}

fn by_of(a: &RedactArgs) -> String {
    a.by.clone()
        .or_else(|| std::env::var("USER").ok())
        .or_else(|| std::env::var("LOGNAME").ok())
        .unwrap_or_default()
}

/// `--session`: the whole session's content in one transaction.
fn run_session(env: &Env, session: &str, a: &RedactArgs) -> CmdResult {
    let mut store = env.open()?;
    let id = store.find_session(session)?.id;
    let by = by_of(a);
    let (done, warning) =
        store.redact_session(&id, &content_free, by.trim(), a.reason.trim(), now())?;
    if a.json {
        print_json(&json!({
            "session": id.to_string(),
            "payloads": done.payloads,
            "bytes": done.bytes,
            "shared": done.shared,
            "diagnostics": done.diagnostics,
            "title_facts": done.title_facts,
            "warning": warning,
        }));
    } else {
        println!(
            "redacted session {id}: {} payloads ({} bytes), the diagnostics of {} nodes, its title{}",
            done.payloads,
            done.bytes,
            done.diagnostics,
            if done.shared > 0 {
                format!(
                    "; {} payloads kept, another session has them too",
                    done.shared
                )
            } else {
                String::new()
            }
        );
    }
    if let Some(w) = &warning {
        eprintln!("warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The diagnostics fields that copy no content (a redacted node keeps
/// them): how a call went, never what it said. Anything else (an answer
/// assembled from a stream, an error quoting the input, what an
/// instrumentation attached) is erased with the payload.
fn content_free(key: &str) -> bool {
    matches!(
        key,
        "api"
            | "method"
            | "path"
            | "headers"
            | "model"
            | "stream"
            | "streamed"
            | "upstream"
            | "upstream_changes"
            | "upstream_request_id"
            | "status"
            | "usage"
            | "tokens"
            | "latency_ms"
            | "duration_ms"
            | "ttft_ms"
            | "chunks"
            | "partial"
            | "truncated"
            | "failure"
            | "state_write"
            | "op"
            | "key"
            | "redacted"
    ) || key.starts_with("thread")
}

/// Whether a session's title was made from these payload bytes (its text,
/// as written or as escaped in a JSON request, without the `…` a long
/// first message's title ends with).
fn title_from(title: &str, payload: &[u8]) -> bool {
    let t = title.trim().trim_end_matches('…').trim_end();
    if t.is_empty() || t == convo_store::REDACTED_TITLE {
        return false;
    }
    let escaped = serde_json::to_string(t).unwrap_or_default();
    let escaped = escaped.trim_matches('"');
    let has = |needle: &[u8]| payload.windows(needle.len()).any(|w| w == needle);
    has(t.as_bytes()) || has(escaped.as_bytes())
}
