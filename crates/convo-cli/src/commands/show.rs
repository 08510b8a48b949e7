use super::{CmdResult, Env, prefix};
use crate::output::{node_json, print_json, time};
use clap::Args;
use std::io::Write;
use std::process::ExitCode;

/// Show one node: its fields and its payload.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// Node hash or unique prefix
    pub hash: String,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: ShowArgs) -> CmdResult {
    let mut store = env.open()?;
    let n = store.node(&prefix(&a.hash)?)?;
    let payload = store.blob(&n.node.payload)?.unwrap_or_default();
    if a.json {
        print_json(&node_json(&n, Some(&payload)));
        return Ok(ExitCode::SUCCESS);
    }
    let node = &n.node;
    let mut out = std::io::stdout().lock();
    writeln!(out, "node       {}", n.hash)?;
    writeln!(out, "kind       {}", node.kind)?;
    writeln!(out, "session    {}", node.session)?;
    writeln!(
        out,
        "parent     {}",
        node.parent
            .map(|p| p.to_hex())
            .unwrap_or_else(|| "-".into())
    )?;
    writeln!(out, "from → to  {} → {}", node.from, node.to)?;
    writeln!(
        out,
        "submission {}",
        node.submission
            .map(|p| p.to_hex())
            .unwrap_or_else(|| "-".into())
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
    if node.diagnostics.as_str() != "{}" {
        writeln!(out, "diagnostics {}", node.diagnostics.as_str())?;
    }
    writeln!(out)?;
    match std::str::from_utf8(&payload) {
        Ok(t) => writeln!(out, "{t}")?,
        Err(_) => writeln!(out, "<{} bytes of binary payload>", payload.len())?,
    }
    Ok(ExitCode::SUCCESS)
}
