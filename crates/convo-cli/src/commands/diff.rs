use super::{CmdResult, Env, find_session};
use crate::output::{clean, node_json, write_json};
use crate::ui::{Out, Style, paint};
use clap::Args;
use convo_store::diff::{Change, Line, NodeDiff, Side, TimelineDiff, diff};
use serde_json::json;
use std::io::Write;
use std::process::ExitCode;

/// Compare two timelines of a session.
///
/// Prints the fork point (the last node both share), then each turn the two
/// sides added after it, paired in order (A's first new turn against B's),
/// and inside each turn a line diff of each node's payload: `-` lines are
/// A's, `+` lines B's. JSON payloads are compared pretty-printed. A and B
/// are branches or any references (HASH, BRANCH~N, BRANCH@TURN).
/// Exit status 0 whether or not they differ.
///
/// Examples:
///   convo diff Paris main retry
///   convo diff Paris broken-2026-11-23 main --stat
///   convo diff Paris main@2 main@3 --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DiffArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// The old side: a branch or reference
    #[arg(value_name = "A")]
    pub a: String,
    /// The new side: a branch or reference
    #[arg(value_name = "B")]
    pub b: String,
    /// Only a summary: nodes and lines added and removed per turn
    #[arg(long)]
    pub stat: bool,
    /// Unchanged lines shown around each change
    #[arg(long, short = 'U', default_value_t = 3, value_name = "N")]
    pub context: usize,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, a: DiffArgs) -> CmdResult {
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    let d = diff(&mut store, &s.id, &a.a, &a.b)?;
    if a.json {
        write_json(&mut Out::stdout(), &diff_json(&d))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = Out::paged();
    match &d.fork_point {
        Some(fp) => writeln!(
            out,
            "fork point {}  ({} shared node{})",
            paint(Style::Hash, &fp.stored.hash.short()),
            d.common,
            if d.common == 1 { "" } else { "s" }
        )?,
        None => writeln!(out, "no shared history")?,
    }
    for (sign, side, style) in [("---", &d.a, Style::Red), ("+++", &d.b, Style::Green)] {
        writeln!(
            out,
            "{}",
            paint(
                style,
                &format!("{sign} {}  {}", clean(&side.label), side_summary(side))
            )
        )?;
    }
    for t in &d.turns {
        let (plus, minus) = counts(t.nodes.iter());
        let title = format!(
            "turn {} ↔ {}",
            t.a.map_or("-".into(), |n| n.to_string()),
            t.b.map_or("-".into(), |n| n.to_string())
        );
        if a.stat {
            let changed = t.nodes.iter().filter(|n| n.changed()).count();
            writeln!(
                out,
                "{title:<16} {changed} of {} node{} differ  {} {}",
                t.nodes.len(),
                if t.nodes.len() == 1 { "" } else { "s" },
                paint(Style::Green, &format!("+{plus}")),
                paint(Style::Red, &format!("-{minus}"))
            )?;
            continue;
        }
        writeln!(out)?;
        writeln!(out, "{}", paint(Style::Bold, &title))?;
        for n in &t.nodes {
            writeln!(out, "  {}", node_title(&d, n))?;
            if !n.changed() {
                writeln!(out, "    {}", paint(Style::Dim, "(same payload)"))?;
                continue;
            }
            for l in with_context(&n.lines, a.context) {
                match l {
                    None => writeln!(out, "    {}", paint(Style::Dim, "…"))?,
                    Some(l) => {
                        let text = format!("{}{}", l.change.sign(), clean(&l.text));
                        let style = match l.change {
                            Change::Same => None,
                            Change::Removed => Some(Style::Red),
                            Change::Added => Some(Style::Green),
                        };
                        let shown = style.map_or(text.clone(), |st| paint(st, &text));
                        writeln!(out, "    {shown}")?;
                    }
                }
            }
        }
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

fn side_summary(s: &Side) -> String {
    let turns = {
        let mut v: Vec<usize> = s.turn_numbers.iter().flatten().copied().collect();
        v.dedup();
        v.len()
    };
    format!(
        "+{} node{} in {} turn{}",
        s.added.len(),
        if s.added.len() == 1 { "" } else { "s" },
        turns,
        if turns == 1 { "" } else { "s" }
    )
}

fn node_title(d: &TimelineDiff, n: &NodeDiff) -> String {
    let na = n.a.and_then(|i| d.a.added.get(i));
    let nb = n.b.and_then(|i| d.b.added.get(i));
    let any = na.or(nb).map(|x| &x.stored.node);
    let kind = any
        .map(|x| match x.sequence {
            Some(q) => format!("{} #{q}", x.kind),
            None => x.kind.to_string(),
        })
        .unwrap_or_default();
    let h = |x: Option<&convo_store::TimelineNode>| {
        x.map_or_else(
            || "-".to_owned(),
            |x| paint(Style::Hash, &x.stored.hash.short()),
        )
    };
    format!("{}  {} → {}", paint(Style::Bold, &kind), h(na), h(nb))
}

fn counts<'a>(nodes: impl Iterator<Item = &'a NodeDiff>) -> (usize, usize) {
    let mut plus = 0;
    let mut minus = 0;
    for n in nodes {
        for l in &n.lines {
            match l.change {
                Change::Added => plus += 1,
                Change::Removed => minus += 1,
                Change::Same => {}
            }
        }
    }
    (plus, minus)
}

/// The lines to show: every change with `context` unchanged lines around
/// it; `None` stands for a run of unchanged lines left out.
fn with_context(lines: &[Line], context: usize) -> Vec<Option<&Line>> {
    let keep: Vec<bool> = (0..lines.len())
        .map(|i| {
            let lo = i.saturating_sub(context);
            let hi = (i + context + 1).min(lines.len());
            lines[lo..hi].iter().any(|l| l.change != Change::Same)
        })
        .collect();
    let mut out = Vec::new();
    let mut skipped = false;
    for (l, k) in lines.iter().zip(keep) {
        if k {
            out.push(Some(l));
            skipped = false;
        } else if !skipped {
            out.push(None);
            skipped = true;
        }
    }
    out
}

/// The diff in JSON: `fork_point` (a node or null), `shared`, `a` and `b`
/// (`ref`, `added`: nodes with their `turn`), and `turns`: `[{a, b, nodes:
/// [{a, b, kind, changed, lines: [{op, text}]}]}]` where `a`/`b` are turn
/// numbers or node hashes (null when only one side has one) and `op` is
/// `" "`, `"-"` or `"+"`.
pub fn diff_json(d: &TimelineDiff) -> serde_json::Value {
    let side = |s: &Side| {
        json!({
            "ref": s.label,
            "added": s.added.iter().zip(&s.turn_numbers).map(|(n, t)| {
                let mut v = node_json(&n.stored, Some(&n.payload));
                v["turn"] = json!(t);
                v
            }).collect::<Vec<_>>(),
        })
    };
    let hash = |s: &Side, i: Option<usize>| {
        i.and_then(|i| s.added.get(i))
            .map(|n| n.stored.hash.to_hex())
    };
    json!({
        "fork_point": d.fork_point.as_ref().map(|n| node_json(&n.stored, Some(&n.payload))),
        "shared": d.common,
        "a": side(&d.a),
        "b": side(&d.b),
        "turns": d.turns.iter().map(|t| json!({
            "a": t.a,
            "b": t.b,
            "nodes": t.nodes.iter().map(|n| {
                let kind = n.a.and_then(|i| d.a.added.get(i))
                    .or_else(|| n.b.and_then(|i| d.b.added.get(i)))
                    .map(|x| x.stored.node.kind.as_str());
                json!({
                    "a": hash(&d.a, n.a),
                    "b": hash(&d.b, n.b),
                    "kind": kind,
                    "changed": n.changed(),
                    "lines": n.lines.iter().map(|l| json!({"op": l.change.sign(), "text": l.text})).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}
