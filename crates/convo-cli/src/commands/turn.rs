use super::{CmdResult, CommandError, Env, find_session, prefix};
use crate::output::{clean, human_time, node_json, write_json};
use crate::ui::{Out, Style, paint};
use clap::Args;
use convo_core::Kind;
use convo_store::TimelineNode;
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

/// Print a whole turn: the input, each request and response folded under
/// it with status, model, tokens and latency, the answer and the state root.
///
/// A turn is an invoke and everything up to and including its complete.
/// REF is any node of the turn or a turn reference: HASH (4+ hex digits),
/// BRANCH (its last turn), BRANCH~N, BRANCH@TURN (1-based, -1 = last).
/// With a hash alone the session is the node's own.
///
/// Examples:
///   convo turn Paris main@-1        # the last turn of main
///   convo turn Paris retry@2        # turn 2 of the timeline retry
///   convo turn 3fa9c1d2             # the turn holding that node
///   convo turn Paris main --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct TurnArgs {
    /// Session id, unique id prefix or title; or, alone, a node hash
    pub session: String,
    /// The node or turn reference [default: the last turn of main]
    #[arg(value_name = "REF")]
    pub at: Option<String>,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: TurnArgs) -> CmdResult {
    let mut store = env.open()?;
    let (s, r) = match &a.at {
        Some(r) => (find_session(&mut store, &a.session)?, r.clone()),
        None => {
            // One argument: a node hash, else a session (its main's last turn).
            let by_hash = (a.session.len() >= 4)
                .then(|| prefix(&a.session).ok())
                .flatten()
                .and_then(|p| store.node(&p).ok());
            match by_hash {
                Some(n) => {
                    let s = find_session(&mut store, &n.node.session.to_string())?;
                    (s, n.hash.to_hex())
                }
                None => (find_session(&mut store, &a.session)?, "main@-1".into()),
            }
        }
    };
    let t = store.turn(&s.id, &r)?;
    if a.json {
        let v = turn_json(t.number, t.complete, &t.nodes);
        write_json(&mut Out::stdout(), &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = Out::paged();
    print_turn(&mut out, t.number, &t.nodes)?;
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// A turn in JSON: `{"turn": N, "complete": bool, "nodes": [node…]}`.
pub fn turn_json(number: usize, complete: bool, nodes: &[TimelineNode]) -> serde_json::Value {
    json!({
        "turn": number,
        "complete": complete,
        "nodes": nodes.iter().map(|n| {
            let mut v = node_json(&n.stored, Some(&n.payload));
            v["turn"] = json!(number);
            v
        }).collect::<Vec<_>>(),
    })
}

/// Prints one turn for reading: the invoke's payload, each request and
/// response indented under it with its diagnostics, then the complete.
pub fn print_turn(out: &mut impl Write, number: usize, nodes: &[TimelineNode]) -> CmdResult<()> {
    let Some(first) = nodes.first() else {
        return Err(CommandError::user("the turn has no nodes"));
    };
    writeln!(
        out,
        "{}  {}",
        paint(Style::Bold, &format!("turn {number}")),
        paint(Style::Dim, &human_time(first.stored.node.created_at)),
    )?;
    for n in nodes {
        let node = &n.stored.node;
        let nested = matches!(node.kind, Kind::Request | Kind::Response);
        let indent = if nested { "    " } else { "  " };
        let mut head = vec![
            paint(
                if nested { Style::Cyan } else { Style::Bold },
                &match node.sequence {
                    Some(q) => format!("{} #{q}", node.kind),
                    None => node.kind.to_string(),
                },
            ),
            format!("{} → {}", clean(&node.from), clean(&node.to)),
            paint(Style::Hash, &n.stored.hash.short()),
        ];
        head.extend(diagnostics_summary(&node.diagnostics.to_value()));
        if let Some(st) = node.state {
            head.push(format!("state {}", paint(Style::Hash, &st.short())));
        }
        if let Some(e) = &node.event {
            head.push(format!("branch {}", clean(e.branch.as_str())));
        }
        writeln!(out, "{}{}", &indent[2..], head.join("  "))?;
        for line in payload_text(&n.payload).lines() {
            writeln!(out, "{indent}{}", clean(line))?;
        }
    }
    Ok(())
}

/// The payload as people read it: JSON objects and arrays pretty-printed,
/// other text as is (Markdown stays Markdown), bytes that are not UTF-8 as
/// a note with their size (`convo show --json` carries them in base64).
pub fn payload_text(p: &[u8]) -> String {
    match std::str::from_utf8(p) {
        Ok(_) => convo_store::diff::payload_lines(p),
        Err(_) => format!(
            "<{} bytes, not UTF-8; see `convo show HASH --json`>",
            p.len()
        ),
    }
}

/// `status 200  model gpt-4o  cost $0.0012  tokens 12→40  latency 350 ms`
/// and any other top-level diagnostics as `key=value`. Tokens and cost
/// are read as the web view reads them ([`convo_llm::usage`]).
pub fn diagnostics_summary(d: &serde_json::Value) -> Vec<String> {
    let Some(obj) = d.as_object() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let scalar = short;
    let cost = convo_llm::usage::Call::of(d, None).cost;
    for (k, v) in obj {
        let text = match k.as_str() {
            "status" => format!("status {}", scalar(v)),
            "model" => match cost {
                Some(x) => format!("model {}  cost {}", scalar(v), convo_llm::usage::usd(x)),
                None => format!("model {}", scalar(v)),
            },
            "latency_ms" | "duration_ms" | "latency" | "duration" => {
                format!("{} {} ms", k.trim_end_matches("_ms"), scalar(v))
            }
            "tokens" | "usage" => format!("tokens {}", tokens(v).unwrap_or_else(|| short(v))),
            // An MCP message: what was called, and why it failed.
            "mcp" => match convo_mcp::record::describe(v, d.get("error")) {
                Some(t) => t,
                None => continue,
            },
            "error" if obj.contains_key("mcp") => continue,
            // What a format kept for its export: the usage, how many
            // source records ride with the node (`convo show` has them
            // whole), the other scalars; nested objects left to `show`.
            "extra" if v.is_object() => {
                for (k, v) in v.as_object().into_iter().flatten() {
                    let text = match (k.as_str(), v) {
                        ("records", serde_json::Value::Array(r)) => {
                            format!("records {}", r.len())
                        }
                        ("usage", v) => match tokens(v) {
                            Some(t) => format!("tokens {t}"),
                            None => continue,
                        },
                        (_, serde_json::Value::Object(_) | serde_json::Value::Array(_)) => {
                            continue;
                        }
                        (k, v) => format!("{}={}", clean(k), short(v)),
                    };
                    out.push(paint(Style::Dim, &text));
                }
                continue;
            }
            _ => format!("{}={}", clean(k), short(v)),
        };
        out.push(paint(Style::Dim, &text));
    }
    out
}

/// `in→out` from a usage object of any vendor
/// ([`convo_llm::usage::Usage::of`], what the web view shows too), or the
/// number itself.
fn tokens(v: &serde_json::Value) -> Option<String> {
    if let Some(n) = v.as_u64() {
        return Some(n.to_string());
    }
    let u = convo_llm::usage::Usage::of(v)?;
    Some(format!("{}→{}", u.input, u.output))
}

/// A diagnostic value on one line, cut at 80 characters.
fn short(v: &serde_json::Value) -> String {
    let text = match v {
        serde_json::Value::String(s) => clean(s),
        other => clean(&other.to_string()),
    };
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
