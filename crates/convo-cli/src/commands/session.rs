use super::select::FilterArgs;
use super::{CmdResult, Env, branch_name, find_session, now};
use crate::cli::SessionCmd;
use crate::output::{
    clean, header, human_time, node_cells_of, node_header, node_json, session_json, write_json,
};
use crate::ui::{Out, Style, columns, paint};
use clap::Args;
use convo_core::BranchName;
use convo_store::turns;
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

/// List sessions, oldest first.
///
/// Examples:
///   convo session list
///   convo session list --agent researcher --limit 20
///   convo session list --title paris --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ListArgs {
    /// Only sessions with this agent
    #[arg(long)]
    pub agent: Option<String>,
    /// Only sessions whose title contains this text (case-insensitive)
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// Only the N most recent sessions (still printed oldest first)
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

/// Show a timeline's turns from the first message to the head.
///
/// Each row is one node with its turn number (see `convo turn` to read a
/// turn whole); --full prints every turn whole instead.
///
/// Examples:
///   convo session get Paris
///   convo session get Paris --branch retry --full
///   convo session get Paris --kind invoke,complete --limit 10
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct GetArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// Timeline
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Print each turn whole: payloads in full, service calls folded under their turn
    #[arg(long)]
    pub full: bool,
    /// Show at most this many nodes (the first ones)
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, cmd: SessionCmd) -> CmdResult {
    let mut store = env.open()?;
    match cmd {
        SessionCmd::New { agent, title, json } => {
            let s = store.transaction(|l| l.new_session(&agent, title.as_deref(), now()))?;
            let mut out = Out::stdout();
            if json {
                write_json(&mut out, &session_json(&s))?;
            } else {
                writeln!(out, "{}", s.id)?;
            }
        }
        SessionCmd::List(a) => list(&mut store, &a)?,
        SessionCmd::Get(a) => return get(&mut store, a),
        SessionCmd::Retitle {
            session,
            title,
            clear,
            json,
        } => retitle(&mut store, &session, if clear { None } else { title }, json)?,
        SessionCmd::Fork {
            session,
            from,
            branch,
            json,
            wait,
        } => fork(env, &mut store, &session, &from, &branch, json, wait)?,
        SessionCmd::Promote {
            session,
            branch,
            json,
            wait,
        } => promote(env, &mut store, &session, &branch, json, wait)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `convo session list`.
fn list(store: &mut convo_store::Store, a: &ListArgs) -> Result<(), super::CommandError> {
    let mut sessions = store.sessions()?;
    let needle = a.title.as_deref().map(str::to_lowercase);
    sessions.retain(|s| {
        a.agent.as_ref().is_none_or(|g| *g == s.agent)
            && needle.as_ref().is_none_or(|n| {
                s.title
                    .as_deref()
                    .is_some_and(|t| t.to_lowercase().contains(n))
            })
    });
    if let Some(n) = a.limit {
        let skip = sessions.len().saturating_sub(n);
        sessions.drain(..skip);
    }
    if a.json {
        let v = json!(sessions.iter().map(session_json).collect::<Vec<_>>());
        write_json(&mut Out::stdout(), &v)?;
        return Ok(());
    }
    let mut rows = vec![header(&["session", "created (UTC)", "agent", "title"])];
    rows.extend(sessions.iter().map(|s| {
        vec![
            s.id.to_string(),
            paint(Style::Dim, &human_time(s.created_at)),
            clean(&s.agent),
            clean(s.title.as_deref().unwrap_or("")),
        ]
    }));
    let mut out = Out::paged();
    for line in columns(&rows) {
        writeln!(out, "{}", line.trim_end())?;
    }
    out.finish()?;
    Ok(())
}

/// `convo session retitle` (`title` none: `--clear`).
fn retitle(
    store: &mut convo_store::Store,
    session: &str,
    title: Option<String>,
    json: bool,
) -> Result<(), super::CommandError> {
    let s = find_session(store, session)?;
    if let Some(t) = &title
        && t.trim().is_empty()
    {
        return Err(super::CommandError::user("a title must not be empty")
            .with_hint("remove a title with --clear"));
    }
    let row = store.transaction(|l| l.retitle(&s.id, title.as_deref()))?;
    if json {
        write_json(&mut Out::stdout(), &session_json(&row))?;
        return Ok(());
    }
    match &row.title {
        Some(t) => eprintln!("{} is now titled {:?}", row.id, clean(t)),
        None => eprintln!("{} has no title now", row.id),
    }
    Ok(())
}

/// `convo session fork`.
fn fork(
    env: &Env,
    store: &mut convo_store::Store,
    session: &str,
    from: &str,
    branch: &str,
    json: bool,
    wait: bool,
) -> Result<(), super::CommandError> {
    let s = find_session(store, session)?;
    let name = branch_name(branch)?;
    // A fork from a timeline with an open turn would start inside it.
    let source = fork_source(store, &s.id, from);
    let _turn = match &source {
        Some(b) => super::guard_timeline(env, store, &s.id, b, wait)?,
        None => None,
    };
    let at = store.resolve_ref(&s.id, from)?;
    let full = convo_core::HashPrefix::parse(&at.hash.to_hex())
        .map_err(|e| super::CommandError::user(e.to_string()))?;
    let node = store.transaction(|l| {
        if let Some(b) = &source {
            super::turn_guard(l, &s.id, b)?;
        }
        l.fork(&s.id, &full, &name, now())
    })?;
    let mut out = Out::stdout();
    if json {
        write_json(&mut out, &node_json(&node, None))?;
    } else {
        writeln!(out, "{}", node.hash)?;
        eprintln!(
            "created branch `{}` at {}",
            clean(name.as_str()),
            at.hash.short()
        );
    }
    Ok(())
}

/// `convo session promote`.
fn promote(
    env: &Env,
    store: &mut convo_store::Store,
    session: &str,
    branch: &str,
    json: bool,
    wait: bool,
) -> Result<(), super::CommandError> {
    let s = find_session(store, session)?;
    let name = branch_name(branch)?;
    // Both timelines change: neither may be inside a turn.
    let main = BranchName::main();
    let mut _turns = vec![super::guard_timeline(env, store, &s.id, &main, wait)?];
    if name != main {
        _turns.push(super::guard_timeline(env, store, &s.id, &name, wait)?);
    }
    let p = store.transaction(|l| {
        super::turn_guard(l, &s.id, &main)?;
        super::turn_guard(l, &s.id, &name)?;
        l.promote(&s.id, &name, now())
    })?;
    let mut out = Out::stdout();
    if json {
        let mut v = node_json(&p.node, None);
        v["sealed_as"] = json!(p.sealed_as.as_str());
        write_json(&mut out, &v)?;
    } else {
        writeln!(out, "{}", p.node.hash)?;
        eprintln!(
            "`{}` is now main; the old main is sealed as `{}`",
            clean(name.as_str()),
            p.sealed_as
        );
    }
    Ok(())
}

/// The branch a fork's `--from` reference starts from, when it names one
/// (`main`, `main@3`, `retry~2`); a hash names none.
fn fork_source(
    store: &mut convo_store::Store,
    session: &convo_core::SessionId,
    from: &str,
) -> Option<BranchName> {
    store
        .read(|tx| convo_store::refs::source_branch(tx, session, from))
        .ok()
        .flatten()
}

/// A node of `session get --json`: its turn, and the subagents' timelines
/// it started.
fn shown_json(
    n: &convo_store::TimelineNode,
    turn: Option<usize>,
    tree: &[convo_store::topology::BranchNode],
) -> serde_json::Value {
    let mut v = node_json(&n.stored, Some(&n.payload));
    v["turn"] = json!(turn);
    let started: Vec<&str> = tree
        .iter()
        .filter(|t| t.subagent.is_some() && t.fork_point == Some(n.stored.hash))
        .map(|t| t.branch.name.as_str())
        .collect();
    if !started.is_empty() {
        v["subagents"] = json!(started);
    }
    v
}

/// The lines above `session get`'s table: the session, the timeline and
/// the last replay of it.
fn heading(
    out: &mut Out,
    s: &convo_store::SessionRow,
    row: &convo_store::BranchRow,
    nodes: usize,
    turns: usize,
    replays: &[convo_store::ReplayNote],
) -> std::io::Result<()> {
    writeln!(
        out,
        "session {}  agent {}{}",
        s.id,
        clean(&s.agent),
        s.title
            .as_deref()
            .map(|t| format!("  {:?}", clean(t)))
            .unwrap_or_default()
    )?;
    writeln!(
        out,
        "branch  {}{}  {} node{}, {} turn{}  state {}",
        paint(Style::Cyan, &clean(row.name.as_str())),
        if row.sealed { " (sealed)" } else { "" },
        nodes,
        if nodes == 1 { "" } else { "s" },
        turns,
        if turns == 1 { "" } else { "s" },
        row.state.map(|r| r.short()).unwrap_or_else(|| "-".into())
    )?;
    if let Some(last) = replays.last() {
        writeln!(
            out,
            "replays {}, the last {} of {}: {} exact, {} tolerated, {} live, {} missed",
            replays.len(),
            crate::output::human_time(last.at),
            clean(last.branch.as_str()),
            last.exact,
            last.tolerated,
            last.live,
            last.missed
        )?;
    }
    Ok(())
}

fn get(store: &mut convo_store::Store, a: GetArgs) -> CmdResult {
    let filter = a.filter.to_filter(now())?;
    let s = find_session(store, &a.session)?;
    let b = branch_name(&a.branch)?;
    let row = store.branch(&s.id, &b)?;
    // The table shows previews: read only the start of each payload.
    let (tl, lens) = read_timeline(store, &s.id, &b, None, a.json || a.full)?;
    let kinds: Vec<_> = tl.iter().map(|n| n.stored.node.kind).collect();
    let groups = turns::group(&kinds);
    let numbers = turns::numbers(&groups, kinds.len());
    // (position in `tl`, turn number) of the nodes shown.
    let shown: Vec<_> = numbers
        .iter()
        .copied()
        .enumerate()
        .filter(|&(i, _)| filter.matches(&tl[i].stored))
        .take(a.limit.unwrap_or(usize::MAX))
        .collect();
    let replays = store.replays(&s.id)?;
    if a.json {
        let tree = convo_store::topology::topology(store, &s.id)?;
        let mut v = session_json(&s);
        v["branch"] = crate::output::branch_json(&row);
        // A subagent's timeline: the call that started it; and, on each
        // call that started subagents, their timelines.
        v["branch"]["subagent"] = json!(
            tree.iter()
                .find(|n| n.branch.name == b)
                .and_then(|n| n.subagent.clone())
        );
        v["turns"] = json!(groups.len());
        v["replays"] = json!(replays);
        v["nodes"] = json!(
            shown
                .iter()
                .map(|&(i, t)| shown_json(&tl[i], t, &tree))
                .collect::<Vec<_>>()
        );
        write_json(&mut Out::stdout(), &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = Out::paged();
    heading(&mut out, &s, &row, tl.len(), groups.len(), &replays)?;
    if a.full {
        let limit = a.limit.unwrap_or(usize::MAX);
        for t in groups.iter().take(limit) {
            let nodes: Vec<_> = tl[t.start..t.end]
                .iter()
                .filter(|n| filter.matches(&n.stored))
                .cloned()
                .collect();
            if nodes.is_empty() {
                continue;
            }
            writeln!(out)?;
            super::turn::print_turn(&mut out, t.number, &nodes)?;
        }
    } else {
        writeln!(out)?;
        let mut rows = vec![node_header()];
        rows.extend(
            shown
                .iter()
                .map(|&(i, t)| node_cells_of(&tl[i].stored, &tl[i].payload, lens[i], t)),
        );
        for line in columns(&rows) {
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// A timeline (to `head`, or to the branch's head) with whole payloads when
/// `whole`, else with only the start of each (a preview), and each payload's
/// full length.
pub fn read_timeline(
    store: &mut convo_store::Store,
    session: &convo_core::SessionId,
    branch: &convo_core::BranchName,
    head: Option<&convo_core::NodeHash>,
    whole: bool,
) -> CmdResult<(Vec<convo_store::TimelineNode>, Vec<u64>)> {
    if whole {
        let tl = match head {
            Some(h) => store.chain(session, h)?,
            None => store.timeline(session, branch)?,
        };
        let lens = tl.iter().map(|n| n.payload.len() as u64).collect();
        return Ok((tl, lens));
    }
    let previews = store.timeline_previews(session, branch, head, crate::output::PREVIEW_BYTES)?;
    let lens = previews.iter().map(|n| n.len).collect();
    let tl = previews
        .into_iter()
        .map(|n| convo_store::TimelineNode {
            stored: n.stored,
            payload: n.head,
        })
        .collect();
    Ok((tl, lens))
}
