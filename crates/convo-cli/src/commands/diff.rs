use super::{CmdResult, Env, find_session};
use crate::output::{clean, write_json};
use crate::ui::{Out, Style, paint};
use clap::Args;
use convo_store::diff::{Change, Line, NodeDiff, Side, TimelineDiff, diff, event_text, payloads};
use std::io::Write;
use std::process::ExitCode;

/// Compare two timelines of a session.
///
/// Prints the fork point (the last node both share), then the turns after
/// it that differ. The two sides are aligned by content, not position (a
/// node recorded the same way on both pairs with itself, so one extra fork
/// node shifts nothing); runs of unchanged turns are one line. Inside a
/// changed turn each node gets a line diff of its payload: `-` lines are
/// A's, `+` lines B's. JSON payloads are compared pretty-printed. A and B
/// are branches or any references (HASH, BRANCH~N, BRANCH@TURN). --json
/// prints the document the HTTP API's diff returns (docs/JSON.md).
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
        let view = convo_runtime::wire::diff(&mut store, &d, None)?;
        write_json(
            &mut Out::stdout(),
            &serde_json::to_value(&view).unwrap_or_default(),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let payloads = payloads(&mut store, &d, 0..d.turns.len(), false)?;
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
    let mut same = (0, 0);
    for t in d.turns.iter() {
        if !t.changed() {
            same = (same.0 + 1, same.1 + t.nodes.len());
            continue;
        }
        unchanged(&mut out, &mut same, a.stat)?;
        let lines: Vec<Vec<Line>> = t.nodes.iter().map(|n| d.lines(&payloads, n)).collect();
        let (plus, minus) = counts(lines.iter().flatten());
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
        for (n, lines) in t.nodes.iter().zip(&lines) {
            node_lines(&mut out, &d, n, lines, a.context)?;
        }
    }
    unchanged(&mut out, &mut same, a.stat)?;
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// One line for a run of unchanged turns (then none pending).
/// One node of a changed turn: its title, then what changed in it (its
/// event, its payload's lines with `context` unchanged lines around).
fn node_lines(
    out: &mut Out,
    d: &TimelineDiff,
    n: &NodeDiff,
    lines: &[Line],
    context: usize,
) -> std::io::Result<()> {
    writeln!(out, "  {}", node_title(d, n))?;
    if !n.changed() {
        return writeln!(out, "    {}", paint(Style::Dim, "(same payload)"));
    }
    for (x, sign, style) in [
        (d.node_a(n), "-", Style::Red),
        (d.node_b(n), "+", Style::Green),
    ] {
        if let Some(e) = x.and_then(event_text) {
            writeln!(
                out,
                "    {}",
                paint(style, &format!("{sign}({})", clean(&e)))
            )?;
        }
    }
    for l in with_context(lines, context) {
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
    Ok(())
}

fn unchanged(out: &mut Out, same: &mut (usize, usize), stat: bool) -> std::io::Result<()> {
    let (turns, nodes) = std::mem::take(same);
    if turns == 0 {
        return Ok(());
    }
    if !stat {
        writeln!(out)?;
    }
    let text = format!(
        "… {turns} unchanged turn{} ({nodes} node{}) …",
        if turns == 1 { "" } else { "s" },
        if nodes == 1 { "" } else { "s" }
    );
    writeln!(out, "{}", paint(Style::Dim, &text))
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
    let na = d.node_a(n);
    let nb = d.node_b(n);
    let any = na.or(nb).map(|x| &x.node);
    let kind = any
        .map(|x| match x.sequence {
            Some(q) => format!("{} #{q}", x.kind),
            None => x.kind.to_string(),
        })
        .unwrap_or_default();
    let h = |x: Option<&convo_store::StoredNode>| {
        x.map_or_else(|| "-".to_owned(), |x| paint(Style::Hash, &x.hash.short()))
    };
    format!("{}  {} → {}", paint(Style::Bold, &kind), h(na), h(nb))
}

fn counts<'a>(lines: impl Iterator<Item = &'a Line>) -> (usize, usize) {
    let mut plus = 0;
    let mut minus = 0;
    for l in lines {
        match l.change {
            Change::Added => plus += 1,
            Change::Removed => minus += 1,
            Change::Same => {}
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
