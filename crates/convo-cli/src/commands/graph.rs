//! `log --graph` and `branch list --graph`: a session's timelines as a tree.

use super::CmdResult;
use crate::output::{clean, human_time, time, write_json};
use crate::ui::{Out, Style, paint};
use convo_store::topology::{BranchNode, topology};
use convo_store::{SessionRow, Store};
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

/// Prints the tree (or, with `json`, the branches with their parents and
/// fork points).
pub fn run(store: &mut Store, s: &SessionRow, as_json: bool) -> CmdResult {
    let tree = topology(store, &s.id)?;
    if as_json {
        let mut v = json!(tree.iter().map(branch_node_json).collect::<Vec<_>>());
        add_subagents(&tree, &mut v);
        write_json(&mut Out::stdout(), &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = Out::paged();
    for line in render(&tree) {
        writeln!(out, "{line}")?;
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// Links each timeline to the subagents' timelines it started
/// (`subagents`: their branch, the call that started them), the way back
/// of each one's `subagent`.
fn add_subagents(tree: &[BranchNode], v: &mut serde_json::Value) {
    for (i, b) in tree.iter().enumerate() {
        let started: Vec<_> = tree
            .iter()
            .filter_map(|c| {
                let link = c.subagent.as_ref()?;
                (c.parent.as_ref() == Some(&b.branch.name)).then(|| {
                    let mut l = link.clone();
                    l["subagent_branch"] = json!(c.branch.name.as_str());
                    l
                })
            })
            .collect();
        v[i]["subagents"] = json!(started);
    }
}

/// One branch of the tree in JSON.
pub fn branch_node_json(b: &BranchNode) -> serde_json::Value {
    let mut v = crate::output::branch_json(&b.branch);
    v["parent"] = json!(b.parent.as_ref().map(|p| p.as_str()));
    v["fork_point"] = json!(b.fork_point.map(|h| h.to_hex()));
    v["shared"] = json!(b.shared);
    v["level"] = json!(b.level);
    v["nodes"] = json!(b.len);
    v["turns"] = json!(b.turns);
    v["promoted"] = json!(b.promotes > 0);
    v["subagent"] = json!(b.subagent);
    v["updated_at"] = json!(time(b.updated_at));
    v
}

/// The tree as lines: `●` an open timeline, `✗` a sealed one, each child
/// under its parent with the fork point and what it added since.
pub fn render(tree: &[BranchNode]) -> Vec<String> {
    // Whether entry i is the last child of its parent.
    let last: Vec<bool> = (0..tree.len())
        .map(|i| {
            let l = tree[i].level;
            tree[i + 1..]
                .iter()
                .take_while(|n| n.level >= l)
                .all(|n| n.level != l)
        })
        .collect();
    // last_at[k]: whether the latest entry at level k was its parent's last child.
    let mut last_at: Vec<bool> = Vec::new();
    let mut lines = Vec::new();
    for (i, b) in tree.iter().enumerate() {
        last_at.truncate(b.level);
        let mut prefix = String::new();
        for k in 1..b.level {
            prefix.push_str(if last_at.get(k).copied().unwrap_or(true) {
                "   "
            } else {
                "│  "
            });
        }
        if b.level > 0 {
            prefix.push_str(if last[i] { "└─ " } else { "├─ " });
        }
        last_at.resize(b.level, true);
        last_at.push(last[i]);
        let mark = if b.branch.sealed {
            paint(Style::Red, "✗")
        } else {
            paint(Style::Green, "●")
        };
        let name = paint(
            if b.branch.sealed {
                Style::Red
            } else {
                Style::Cyan
            },
            &clean(b.branch.name.as_str()),
        );
        let head = b
            .head
            .as_ref()
            .map(|h| format!("head {}", paint(Style::Hash, &h.hash.short())))
            .unwrap_or_else(|| "no nodes".into());
        let mut facts = vec![
            format!("{mark} {name}"),
            head,
            format!(
                "{} node{}, {} turn{}",
                b.len,
                plural(b.len),
                b.turns,
                plural(b.turns)
            ),
        ];
        if let Some(fp) = b.fork_point {
            facts.push(format!(
                "forked at {} (after turn {}), +{}",
                paint(Style::Hash, &fp.short()),
                b.fork_turn,
                b.len - b.shared
            ));
        }
        if let Some(link) = &b.subagent {
            facts.push(paint(Style::Magenta, &subagent_text(link)));
        }
        if b.branch.sealed {
            facts.push(paint(Style::Red, "sealed"));
        }
        if b.promotes > 0 {
            facts.push(paint(Style::Magenta, "promoted"));
        }
        facts.push(paint(Style::Dim, &human_time(b.updated_at)));
        lines.push(format!("{prefix}{}", facts.join("  ")));
    }
    lines
}

/// `subagent started by Agent call toolu_1 on main`: how the tree shows
/// a subagent's timeline.
fn subagent_text(link: &serde_json::Value) -> String {
    let s = |k: &str| link.get(k).and_then(serde_json::Value::as_str);
    let mut t = String::from("subagent started by");
    if let Some(tool) = s("tool") {
        t.push_str(&format!(" {}", clean(tool)));
    }
    t.push_str(" call");
    if let Some(id) = s("tool_call_id") {
        t.push_str(&format!(" {}", clean(id)));
    }
    if let Some(b) = s("branch") {
        t.push_str(&format!(" on {}", clean(b)));
    }
    t
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
