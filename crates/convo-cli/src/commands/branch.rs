use super::{CmdResult, Env, find_session};
use crate::cli::BranchCmd;
use crate::output::{clean, header, human_time, write_json};
use crate::ui::{Out, Style, columns, paint};
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

pub fn run(env: &Env, cmd: BranchCmd) -> CmdResult {
    let mut store = env.open()?;
    let BranchCmd::List {
        session,
        graph,
        json,
    } = cmd;
    let s = find_session(&mut store, &session)?;
    if graph {
        return super::graph::run(&mut store, &s, json);
    }
    let tree = convo_store::topology::topology(&mut store, &s.id)?;
    let mut branches: Vec<_> = tree.iter().collect();
    branches.sort_by(|a, b| a.branch.name.cmp(&b.branch.name));
    if json {
        let v = json!(
            branches
                .iter()
                .map(|b| super::graph::branch_node_json(b))
                .collect::<Vec<_>>()
        );
        write_json(&mut Out::stdout(), &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![header(&[
        "branch",
        "head",
        "nodes",
        "turns",
        "updated (UTC)",
        "",
        "",
    ])];
    rows.extend(branches.iter().map(|b| {
        vec![
            paint(
                if b.branch.sealed {
                    Style::Red
                } else {
                    Style::Cyan
                },
                &clean(b.branch.name.as_str()),
            ),
            b.head
                .as_ref()
                .map(|h| paint(Style::Hash, &h.hash.short()))
                .unwrap_or_else(|| "-".into()),
            b.len.to_string(),
            b.turns.to_string(),
            paint(Style::Dim, &human_time(b.updated_at)),
            if b.branch.sealed {
                "sealed".into()
            } else {
                String::new()
            },
            b.parent
                .as_ref()
                .map(|p| format!("from {}", clean(p.as_str())))
                .unwrap_or_default(),
        ]
    }));
    let mut out = Out::paged();
    for line in columns(&rows) {
        writeln!(out, "{}", line.trim_end())?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
