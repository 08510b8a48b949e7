use super::{CmdResult, Env, prefix};
use crate::output::{node_json, time, write_json};
use crate::ui::Out;
use clap::Args;
use std::io::Write;
use std::process::ExitCode;

/// Show one node: its fields and its payload.
///
/// With --json: the node object, plus `redacted` ({at, by, reason, fact}
/// when the payload was erased and `payload` is its tombstone; else null).
///
/// Examples:
///   convo show 3fa9c1d2               # a node by hash prefix (4+ hex digits)
///   convo show Paris main~1           # in a session: any reference
///   convo show Paris retry@2 --json   # the invoke of turn 2 of retry
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ShowArgs {
    /// Node hash or unique prefix; or a session, followed by REF
    pub hash: String,
    /// With a session first: HASH, BRANCH, BRANCH~N or BRANCH@TURN
    #[arg(value_name = "REF")]
    pub at: Option<String>,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: ShowArgs) -> CmdResult {
    let mut store = env.open()?;
    let n = match &a.at {
        Some(r) => {
            let s = super::find_session(&mut store, &a.hash)?;
            store.resolve_ref(&s.id, r)?
        }
        None => store.node(&prefix(&a.hash)?)?,
    };
    let payload = store.blob(&n.node.payload)?.unwrap_or_default();
    // A call received as telemetry leaves its details (span and trace
    // ids, latency, the attributes as received) to the kept export body.
    let otel = if n
        .node
        .diagnostics
        .to_value()
        .pointer("/extra/otel")
        .is_some_and(convo_llm::otel::ingest::left_to_body)
    {
        convo_llm::otel::ingest::resolve_kept(&mut store, &[(&n, payload.as_slice())])?
            .pop()
            .flatten()
    } else {
        None
    };
    if a.json {
        let mut v = node_json(&n, Some(&payload));
        if let Some(o) = &otel {
            v["otel"] = o.clone();
        }
        // A redacted payload is its tombstone: say so, with the redaction.
        v["redacted"] = match store.redaction(&n.node.payload)? {
            Some(r) => serde_json::json!({
                "at": time(r.at),
                "by": r.by,
                "reason": r.reason,
                "fact": r.fact,
            }),
            None => serde_json::Value::Null,
        };
        write_json(&mut Out::stdout(), &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let redacted = store.redaction(&n.node.payload)?;
    let mut out = Out::paged();
    fields(&mut out, &n, redacted.as_ref(), otel.as_ref())?;
    writeln!(out)?;
    match std::str::from_utf8(&payload) {
        Ok(t) => writeln!(out, "{}", crate::output::clean_multiline(t))?,
        Err(_) => writeln!(
            out,
            "<{} bytes, not UTF-8; `convo show {} --json` carries them in base64>",
            payload.len(),
            n.hash.short()
        )?,
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// The node's fields, one a line, above its payload.
fn fields(
    out: &mut Out,
    n: &convo_store::StoredNode,
    redacted: Option<&convo_store::Redaction>,
    otel: Option<&serde_json::Value>,
) -> std::io::Result<()> {
    let node = &n.node;
    let hex = |h: Option<String>| h.unwrap_or_else(|| "-".into());
    writeln!(out, "node       {}", n.hash)?;
    writeln!(out, "kind       {}", node.kind)?;
    writeln!(out, "session    {}", node.session)?;
    writeln!(out, "parent     {}", hex(node.parent.map(|p| p.to_hex())))?;
    writeln!(
        out,
        "from → to  {} → {}",
        crate::output::clean(&node.from),
        crate::output::clean(&node.to)
    )?;
    writeln!(
        out,
        "submission {}",
        hex(node.submission.map(|p| p.to_hex()))
    )?;
    if let Some(s) = node.sequence {
        writeln!(out, "sequence   {s}")?;
    }
    if let Some(s) = node.state {
        writeln!(out, "state      {s}")?;
    }
    if let Some(e) = &node.event {
        writeln!(out, "branch     {}", e.branch)?;
        if let Some(s) = &e.sealed_as {
            writeln!(out, "sealed as  {s}")?;
        }
    }
    writeln!(out, "created    {}", time(node.created_at))?;
    writeln!(out, "seq        {}  depth {}", n.seq, n.ctx.depth)?;
    writeln!(
        out,
        "payload    {} bytes, sha256 {}",
        node.payload_len, node.payload
    )?;
    if let Some(r) = redacted {
        writeln!(
            out,
            "redacted   {} (fact {})",
            crate::output::clean(&r.tombstone()),
            r.fact
        )?;
    }
    if node.diagnostics.as_str() != "{}" {
        writeln!(
            out,
            "diagnostics {}",
            crate::output::clean(node.diagnostics.as_str())
        )?;
    }
    if let Some(o) = otel {
        writeln!(out, "telemetry  {}", crate::output::clean(&o.to_string()))?;
    }
    Ok(())
}
