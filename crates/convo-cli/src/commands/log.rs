use super::select::FilterArgs;
use super::{CmdResult, CommandError, Env, branch_name, find_session, now};
use crate::output::{node_cells, node_cells_of, node_header, node_json, write_json};
use crate::ui::{Out, columns};
use clap::Args;
use convo_store::{Store, turns};
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

/// Show a timeline, newest message first, with turn numbers.
///
/// Reads the timeline ending at the branch head (or at REF) and prints one
/// row per node: its turn, short hash, time, kind, sender → recipient and a
/// payload preview. With --all, lists every node of the store in append
/// order (oldest first) and ends. With --graph, draws the session's
/// timelines as a tree (see `convo branch list --graph`).
///
/// Examples:
///   convo log Paris                      # main, newest first
///   convo log Paris retry~2 -n 5         # five nodes from two before retry's head
///   convo log Paris --kind invoke,complete --since 2h
///   convo log --all --json | jq length   # the whole store, one JSON array
///   convo log Paris --graph
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct LogArgs {
    /// Session id, unique id prefix or title (not with --all)
    #[arg(required_unless_present = "all")]
    pub session: Option<String>,
    /// Start from this node or turn reference instead (HASH, BRANCH, BRANCH~N, BRANCH@TURN)
    #[arg(value_name = "REF")]
    pub at: Option<String>,
    /// Timeline
    #[arg(long, default_value = "main", conflicts_with = "at")]
    pub branch: String,
    /// Show at most this many messages
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// Every node of every session, in append order (oldest first)
    #[arg(long, conflicts_with_all = ["session", "graph"])]
    pub all: bool,
    /// Draw the session's timelines as a tree
    #[arg(long)]
    pub graph: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Print one JSON document (an array of nodes)
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: LogArgs) -> CmdResult {
    let filter = a.filter.to_filter(now())?;
    let mut store = env.open()?;
    if a.all {
        return all(&mut store, &a, &filter);
    }
    let q = a
        .session
        .as_deref()
        .ok_or_else(|| CommandError::user("give a session, or --all"))?;
    let s = find_session(&mut store, q)?;
    if a.graph {
        return super::graph::run(&mut store, &s, a.json);
    }
    let branch = branch_name(&a.branch)?;
    let at = match &a.at {
        Some(r) => Some(store.resolve_ref(&s.id, r)?.hash),
        None => None,
    };
    // The table shows previews: read only the start of each payload.
    let (tl, lens) =
        super::session::read_timeline(&mut store, &s.id, &branch, at.as_ref(), a.json)?;
    let kinds: Vec<_> = tl.iter().map(|n| n.stored.node.kind).collect();
    let numbers = turns::numbers(&turns::group(&kinds), kinds.len());
    // (position in `tl`, turn number) of the nodes shown, newest first.
    let shown: Vec<_> = numbers
        .into_iter()
        .enumerate()
        .rev()
        .filter(|&(i, _)| filter.matches(&tl[i].stored))
        .take(a.limit.unwrap_or(usize::MAX))
        .collect();
    if a.json {
        let v = json!(
            shown
                .iter()
                .map(|&(i, t)| {
                    let mut v = node_json(&tl[i].stored, Some(&tl[i].payload));
                    v["turn"] = json!(t);
                    v
                })
                .collect::<Vec<_>>()
        );
        let mut out = Out::stdout();
        write_json(&mut out, &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![node_header()];
    rows.extend(
        shown
            .iter()
            .map(|&(i, t)| node_cells_of(&tl[i].stored, &tl[i].payload, lens[i], t)),
    );
    let mut out = Out::paged();
    for line in columns(&rows) {
        writeln!(out, "{}", line.trim_end())?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// `log --all`: the whole store in append order, a page at a time.
fn all(store: &mut Store, a: &LogArgs, filter: &convo_store::filter::NodeFilter) -> CmdResult {
    let limit = a.limit.unwrap_or(usize::MAX);
    let mut out = if a.json { Out::stdout() } else { Out::paged() };
    let mut cursor = 0;
    let mut printed = 0;
    if a.json {
        write!(out, "[")?;
    }
    'pages: loop {
        let page = store.follow_with_payloads(cursor, 1000)?;
        let Some(last) = page.last() else { break };
        cursor = last.stored.seq;
        for n in page.iter().filter(|n| filter.matches(&n.stored)) {
            if printed >= limit {
                break 'pages;
            }
            if a.json {
                let mut v = node_json(&n.stored, Some(&n.payload));
                v["cursor"] = json!(n.stored.seq);
                let text = serde_json::to_string(&v).unwrap_or_default();
                write!(out, "{}\n{text}", if printed == 0 { "" } else { "," })?;
            } else {
                let mut cells = node_cells(&n.stored, &n.payload, None);
                cells[0] = format!("#{}", n.stored.seq);
                cells.insert(1, n.stored.node.session.short());
                writeln!(out, "{}", cells.join("  ").trim_end())?;
            }
            printed += 1;
        }
    }
    if a.json {
        writeln!(out, "{}]", if printed == 0 { "" } else { "\n" })?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
