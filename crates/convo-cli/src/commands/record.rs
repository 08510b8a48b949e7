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
///
/// Examples:
///   convo record Paris invoke --payload "Tell me about Paris"
///   convo record Paris request --to infer --payload '{"prompt":"…"}'
///   convo record Paris response --from infer --diagnostics '{"status":200}' < reply.json
///   convo record Paris complete --payload "Paris is…" --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
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
    /// Print the node as one JSON document (the node object of `show --json`)
    #[arg(long)]
    pub json: bool,
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
    /// Refuse a payload larger than this many bytes, before reading it
    /// [env: CONVO_MAX_PAYLOAD] [default: 67108864, 64 MiB]
    #[arg(long, value_name = "BYTES")]
    pub max_payload: Option<u64>,
    /// Wait for a turn `convo run`/`chat` has open on the timeline to end (without it: refused, exit 4)
    #[arg(long)]
    pub wait: bool,
}

/// The default largest payload `record` accepts: 64 MiB.
pub const DEFAULT_MAX_PAYLOAD: u64 = 64 * 1024 * 1024;

/// The payload limit: `--max-payload`, else `CONVO_MAX_PAYLOAD`, else 64 MiB.
pub(crate) fn max_payload(flag: Option<u64>) -> CmdResult<u64> {
    if let Some(m) = flag {
        return Ok(m);
    }
    match std::env::var("CONVO_MAX_PAYLOAD") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
            CommandError::user(format!(
                "CONVO_MAX_PAYLOAD must be a number of bytes, not {:?}",
                convo_core::text::visible(&v, convo_core::text::Newlines::Escape)
            ))
        }),
        _ => Ok(DEFAULT_MAX_PAYLOAD),
    }
}

pub(crate) fn too_large(what: &str, size: Option<u64>, max: u64) -> CommandError {
    let size = size.map_or_else(
        || "more than".to_owned(),
        |s| format!("{s} bytes, more than"),
    );
    CommandError::user(format!("{what} is {size} the payload limit of {max} bytes"))
        .with_hint("raise it with --max-payload BYTES or CONVO_MAX_PAYLOAD, or store a reference to the data instead")
}

/// Reads `r` whole, refusing it as soon as it passes `max` bytes (so a
/// huge stream is never held in memory).
/// The bytes of file `f` (named `what FILE` in errors), refused from its
/// size before any is read when over `max`.
pub(crate) fn read_file(f: &std::path::Path, what: &str, max: u64) -> CmdResult<Vec<u8>> {
    let what = format!("{what} {}", f.display());
    let cannot = |e: std::io::Error| CommandError::user(format!("cannot read {what}: {e}"));
    let file = std::fs::File::open(f).map_err(cannot)?;
    let len = file.metadata().map_err(cannot)?.len();
    if len > max {
        return Err(too_large(&what, Some(len), max));
    }
    // The size can change under us: the read is bounded too.
    read_limited(file, &what, max, usize::try_from(len).unwrap_or(0))
}

pub(crate) fn read_limited(
    r: impl Read,
    what: &str,
    max: u64,
    size_hint: usize,
) -> CmdResult<Vec<u8>> {
    let mut buf = Vec::with_capacity(size_hint);
    r.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(too_large(what, None, max));
    }
    Ok(buf)
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
    let max = max_payload(a.max_payload)?;
    let payload = match (a.payload, &a.payload_file) {
        (Some(p), _) => {
            if p.len() as u64 > max {
                return Err(too_large("--payload", Some(p.len() as u64), max));
            }
            p.into_bytes()
        }
        (None, Some(f)) => read_file(f, "payload file", max)?,
        (None, None) => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(CommandError::user("no payload given").with_hint(
                    "pass --payload TEXT, --payload-file FILE, or pipe the payload on stdin",
                ));
            }
            read_limited(stdin.lock(), "the payload on stdin", max, 0)?
        }
    };
    let branch = branch_name(&a.branch)?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let _turn = super::guard_timeline(env, &mut store, &s.id, &branch, a.wait)?;
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
    let node = store.transaction(|l| {
        super::turn_guard(l, &s.id, &branch)?;
        l.append(&s.id, &branch, &draft)
    })?;
    if a.json {
        crate::output::print_json(&crate::output::node_json(&node, Some(&draft.payload)));
    } else {
        println!("{}", node.hash);
    }
    Ok(ExitCode::SUCCESS)
}

pub use convo_api::default_ends;
