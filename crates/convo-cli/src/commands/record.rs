use super::{CmdResult, CommandError, Env, branch_name, find_session, now};
use clap::Args;
use convo_core::{Diagnostics, Kind, StateRoot};
use convo_store::Draft;
use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::process::ExitCode;

/// Append one message to a timeline and print its hash.
///
/// An invoke starts a new submission; request, response and complete join
/// the timeline's open submission. Requests are numbered 1, 2, 3…; a
/// response answers the latest request unless --sequence says otherwise.
/// The payload comes from --payload, --payload-file, or stdin.
#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// invoke, request, response or complete
    pub kind: String,
    /// Sender [default: cli for invoke, the agent for request/complete]
    #[arg(long)]
    pub from: Option<String>,
    /// Recipient [default: the agent for invoke/response, cli for complete]
    #[arg(long)]
    pub to: Option<String>,
    /// Timeline to append to
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// The payload as text
    #[arg(long, conflicts_with = "payload_file")]
    pub payload: Option<String>,
    /// Read the payload from a file
    #[arg(long, value_name = "FILE")]
    pub payload_file: Option<PathBuf>,
    /// Diagnostics as a JSON object (durations, tokens, model, status…)
    #[arg(long, value_name = "JSON")]
    pub diagnostics: Option<String>,
    /// For a complete: the state root to carry instead of the timeline's
    #[arg(long, value_name = "ROOT")]
    pub state: Option<String>,
    /// For a response: the request sequence it answers
    #[arg(long)]
    pub sequence: Option<u32>,
}

pub fn run(env: &Env, a: RecordArgs) -> CmdResult {
    let kind: Kind = a.kind.parse().map_err(CommandError::user)?;
    let diagnostics = match &a.diagnostics {
        Some(d) => {
            Diagnostics::parse(d).map_err(|e| CommandError::user(format!("--diagnostics: {e}")))?
        }
        None => Diagnostics::empty(),
    };
    let state = a
        .state
        .as_deref()
        .map(|s| StateRoot::from_hex(s).map_err(|e| CommandError::user(format!("--state: {e}"))))
        .transpose()?;
    let payload = match (&a.payload, &a.payload_file) {
        (Some(p), _) => p.clone().into_bytes(),
        (None, Some(f)) => std::fs::read(f).map_err(|e| {
            CommandError::user(format!("cannot read payload file {}: {e}", f.display()))
        })?,
        (None, None) => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(CommandError::user("no payload given").with_hint(
                    "pass --payload TEXT, --payload-file FILE, or pipe the payload on stdin",
                ));
            }
            let mut buf = Vec::new();
            stdin.lock().read_to_end(&mut buf)?;
            buf
        }
    };
    let branch = branch_name(&a.branch)?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let (from, to) = default_ends(kind, &s.agent);
    let draft = Draft {
        kind,
        from: a.from.unwrap_or(from),
        to: a.to.unwrap_or(to),
        payload,
        diagnostics,
        state,
        sequence: a.sequence,
        created_at: now(),
    };
    let node = store.append(&s.id, &branch, &draft)?;
    println!("{}", node.hash);
    Ok(ExitCode::SUCCESS)
}

/// Who sends a message of `kind` to whom when the user does not say.
pub fn default_ends(kind: Kind, agent: &str) -> (String, String) {
    let (f, t) = match kind {
        Kind::Invoke => ("cli", agent),
        Kind::Request => (agent, "infer"),
        Kind::Response => ("infer", agent),
        Kind::Complete => (agent, "cli"),
        Kind::Fork | Kind::Promote => ("platform", agent),
    };
    (f.to_owned(), t.to_owned())
}
