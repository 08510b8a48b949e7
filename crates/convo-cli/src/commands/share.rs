use super::export::write_atomically;
use super::{CmdResult, Env, branch_name};
use clap::Args;
use convo_server::web::share::{ShareOptions, share};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Write a session as one HTML file anyone can open and check
///
/// The file is self-contained (no external URL; it works from file://,
/// offline) and shows the session's timeline as the web view does. Its
/// script recomputes in the browser (WebCrypto SHA-256) every node hash
/// and parent link from the bytes the file carries, as docs/HASHING.md
/// lays them out, and shows a badge (and `data-verified="true"|"false"` on
/// <body>): a byte changed anywhere in the data names the node that fails.
///
/// By default the file holds metadata only: every node's hashes, ends,
/// diagnostics and times, each payload's SHA-256 and length, no message
/// text; it still verifies. --content adds the payloads' bytes;
/// --redact-secrets replaces credentials found in them (gitleaks' rules)
/// and marks that text as not covered by the hashes.
///
/// Examples:
///   convo share Paris -o paris.html
///   convo share Paris --content --redact-secrets -o paris.html
///   convo share Paris --all-branches --content > paris.html
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ShareArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// The timeline to share [default: main]
    #[arg(long, conflicts_with = "all_branches")]
    pub branch: Option<String>,
    /// Every timeline of the session
    #[arg(long)]
    pub all_branches: bool,
    /// Write here instead of standard output
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Carry the payloads' bytes (the message text)
    #[arg(long, conflicts_with = "metadata_only")]
    pub content: bool,
    /// Hashes and shape only, no message text (the default)
    #[arg(long)]
    pub metadata_only: bool,
    /// Replace credentials found in payloads (gitleaks' rules)
    #[arg(long)]
    pub redact_secrets: bool,
}

pub fn run(env: &Env, a: ShareArgs) -> CmdResult {
    let branch = match (&a.branch, a.all_branches) {
        (_, true) => None,
        (b, false) => Some(branch_name(b.as_deref().unwrap_or("main"))?),
    };
    let o = ShareOptions {
        branch,
        content: a.content,
        redact_secrets: a.redact_secrets,
    };
    let mut store = env.open()?;
    let shared = share(&mut store, &a.session, &o)?;
    let mut err = std::io::stderr().lock();
    if !a.content {
        let _ = writeln!(
            err,
            "metadata only: hashes and shape, no message text (--content to include it)"
        );
    }
    for n in &shared.secrets_in_metadata {
        let _ = writeln!(
            err,
            "warning: node {n} holds what looks like a credential in its diagnostics or ends; it stays in the file, since its hash needs it"
        );
    }
    match &a.output {
        Some(path) => {
            write_atomically(path, shared.html.as_bytes())?;
            let _ = writeln!(
                err,
                "wrote {} ({} bytes; the session's distinct bytes {}): {} nodes, {} payloads{}",
                path.display(),
                shared.html.len(),
                shared.distinct_bytes,
                shared.nodes,
                shared.payloads,
                if shared.secrets > 0 {
                    format!(", {} with credentials replaced", shared.secrets)
                } else {
                    String::new()
                }
            );
        }
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(shared.html.as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| super::CommandError::user(format!("cannot write: {e}")))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
