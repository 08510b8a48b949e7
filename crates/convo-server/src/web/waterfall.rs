//! A turn's shape: each model call (and MCP tool call) of the turn as a bar on one time axis
//! (as a browser's network waterfall draws requests), so a slow call, the
//! calls that ran in parallel and where the tokens went read at a glance.
//!
//! A call runs from its response's time less the recorded latency (the
//! proxy writes request and response when the answer is in) to the
//! response's time; without a latency, from its request's time. Failed
//! calls and cut streams are marked, and a request sent again with the same
//! bytes in the same turn is marked as a retry. A subagent's calls are
//! drawn nested under the call that started it (the last call at or before
//! the node its timeline forks at, as the store's one subagent reader says:
//! [`super::subagent`]), on the same axis, each linking to its node on the
//! subagent's timeline. Drawn as SVG (geometry in
//! attributes: the page's policy allows no inline style); each bar links to
//! its response node. (SVG elements are written open and closed: in HTML
//! a `<rect>` without its end tag would swallow what follows.)

use super::llm::{self, Call};
use super::*;

/// One call's bar.
#[derive(Debug)]
struct Bar {
    hash: String,
    label: String,
    start: i64,
    end: i64,
    failed: bool,
    cut: bool,
    retry: bool,
    /// An MCP tool call, not a model call.
    tool: bool,
    /// Where its response is among the turn's nodes.
    at: usize,
}

/// A subagent's calls to draw under the call that started it.
struct Nested<'a> {
    /// The session.
    sid: &'a str,
    /// The subagent's timeline.
    branch: &'a str,
    /// The node its timeline forks at.
    started_by: &'a str,
    /// Its nodes after the fork.
    nodes: &'a [NodeView],
}

/// One row of the waterfall: a bar, nested under the row above it (a
/// subagent's, on this timeline) and where it links.
struct Row<'a> {
    bar: Bar,
    sub: Option<&'a str>,
    href: String,
}

fn millis(t: &str) -> Option<i64> {
    t.parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// The calls among one turn's nodes (in timeline order).
fn bars(nodes: &[&NodeView]) -> Vec<Bar> {
    let mut out = Vec::new();
    let mut sent: Vec<&str> = Vec::new();
    let mut requests: Vec<(&NodeView, bool)> = Vec::new();
    for (at, n) in nodes.iter().enumerate() {
        match n.kind.as_str() {
            "request" => {
                let retry = sent.contains(&n.payload_sha256.as_str());
                sent.push(&n.payload_sha256);
                requests.push((n, retry));
            }
            "response" => {
                let Some((tin, tout, cost, _)) = llm::figures(n) else {
                    out.extend(tool_bar(n, at));
                    continue;
                };
                let Some(end) = millis(&n.created_at) else {
                    continue;
                };
                let c = Call::of(&n.diagnostics, None);
                let req = requests
                    .iter()
                    .rev()
                    .find(|(r, _)| r.sequence == n.sequence)
                    .or(requests.last());
                let start = match (c.latency_ms, req) {
                    (Some(l), _) => end - l as i64,
                    (None, Some((r, _))) => millis(&r.created_at).unwrap_or(end),
                    (None, None) => end,
                };
                let mut label = format!(
                    "#{} {}",
                    n.sequence.unwrap_or(0),
                    c.model.as_deref().unwrap_or("call")
                );
                label = label.chars().take(28).collect();
                label.push_str(&format!(" · {tin}/{tout} tok"));
                if cost > 0.0 {
                    label.push_str(&format!(" · {}", llm::usd(cost)));
                }
                out.push(Bar {
                    hash: n.hash.clone(),
                    label,
                    start: start.min(end),
                    end,
                    failed: c.failed,
                    cut: c.cut.is_some(),
                    retry: req.is_some_and(|(_, r)| *r),
                    tool: false,
                    at,
                });
            }
            _ => {}
        }
    }
    out
}

/// An MCP tool call's bar: it ran for its latency up to its answer.
fn tool_bar(n: &NodeView, at: usize) -> Option<Bar> {
    let (label, latency, failed) = super::mcp::tool_call(n)?;
    let end = millis(&n.created_at)?;
    Some(Bar {
        hash: n.hash.clone(),
        label: label.chars().take(40).collect(),
        start: end - latency.round() as i64,
        end,
        failed,
        cut: false,
        retry: false,
        tool: true,
        at,
    })
}

/// The turn's bars, each subagent's under the call that started it.
fn rows<'a>(nodes: &[&NodeView], subs: &[Nested<'a>]) -> Vec<Row<'a>> {
    let mut out: Vec<Row<'a>> = bars(nodes)
        .into_iter()
        .map(|bar| Row {
            href: format!("#n-{}", bar.hash),
            bar,
            sub: None,
        })
        .collect();
    for s in subs {
        let Some(fork) = nodes.iter().position(|n| n.hash == s.started_by) else {
            continue;
        };
        let Some(parent) = out
            .iter()
            .rposition(|r| r.sub.is_none() && r.bar.at <= fork)
        else {
            continue;
        };
        // After the parent's row and the subagents already under it.
        let mut at = parent + 1;
        while out.get(at).is_some_and(|r| r.sub.is_some()) {
            at += 1;
        }
        let theirs: Vec<&NodeView> = s.nodes.iter().collect();
        let nested = bars(&theirs).into_iter().map(|bar| Row {
            href: super::jump::node_url(s.sid, s.branch, &bar.hash),
            bar,
            sub: Some(s.branch),
        });
        out.splice(at..at, nested.collect::<Vec<_>>());
    }
    out
}

const WIDTH: i64 = 1000;
const LABELS: i64 = 330;
const ROW: i64 = 22;

/// The waterfall of each turn of a page's nodes, by turn number, the
/// calls of the subagents started in it nested under theirs.
pub(super) fn of_turns(
    sid: &str,
    nodes: &[NodeView],
    calls: &[super::subagent::Calls],
) -> std::collections::HashMap<u64, Markup> {
    let mut of_turn: std::collections::BTreeMap<u64, Vec<&NodeView>> = Default::default();
    for n in nodes {
        of_turn.entry(n.turn.unwrap_or(0)).or_default().push(n);
    }
    let nested: Vec<Nested> = calls
        .iter()
        .map(|c| Nested {
            sid,
            branch: &c.branch,
            started_by: &c.started_by,
            nodes: &c.nodes,
        })
        .collect();
    of_turn
        .iter()
        .filter_map(|(t, ns)| waterfall(ns, &nested).map(|w| (*t, w)))
        .collect()
}

/// The waterfall of one turn's nodes (with the calls of the subagents
/// started in it), or nothing when it made no call.
fn waterfall(nodes: &[&NodeView], subs: &[Nested<'_>]) -> Option<Markup> {
    let rows = rows(nodes, subs);
    if rows.is_empty() {
        return None;
    }
    let t0 = rows.iter().map(|r| r.bar.start).min().unwrap_or(0);
    let t1 = rows.iter().map(|r| r.bar.end).max().unwrap_or(t0);
    let span = (t1 - t0).max(1);
    let x = |t: i64| LABELS + (t - t0) * (WIDTH - LABELS - 10) / span;
    let height = ROW * (rows.len() as i64 + 1);
    let top: Vec<&Bar> = rows
        .iter()
        .filter(|r| r.sub.is_none())
        .map(|r| &r.bar)
        .collect();
    let nested = rows.len() - top.len();
    let failed = top.iter().filter(|b| b.failed || b.cut).count();
    Some(html! {
        figure.waterfall data-calls=(top.len()) data-nested=(nested) {
            svg viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
                aria-label=(format!("{} calls over {}", top.len(), llm::ms(span))) {
                line.axis x1=(LABELS) y1=(height - ROW + 4) x2=(WIDTH - 10) y2=(height - ROW + 4) {}
                text.tick.first x=(LABELS) y=(height - 4) { "0" }
                text.tick.end x=(WIDTH - 10) y=(height - 4) { (llm::ms(span)) }
                @for (i, r) in rows.iter().enumerate() {
                    @let (b, y) = (&r.bar, i as i64 * ROW);
                    @let class = if b.failed { "bar bad" } else if b.cut { "bar cut" } else if b.tool { "bar tool" } else if r.sub.is_some() { "bar sub" } else { "bar" };
                    a href=(r.href) class=(if r.sub.is_some() { "nested" } else { "call" }) data-branch=[r.sub] {
                        title { @if let Some(s) = r.sub { "subagent " (s) " · " } (b.label) " · " (llm::ms(b.end - b.start))
                            @if b.failed { " · failed" } @if b.cut { " · stream cut" } @if b.retry { " · retry" } }
                        text.wlabel x=(if r.sub.is_some() { 18 } else { 4 }) y=(y + 15) { @if r.sub.is_some() { "↳ " } (b.label) @if b.retry { " ↻" } }
                        rect class=(class) x=(x(b.start)) y=(y + 4) width=((x(b.end) - x(b.start)).max(2)) height="14" rx="2"
                            data-start=(b.start - t0) data-end=(b.end - t0) {}
                    }
                }
            }
            figcaption {
                @let tools = top.iter().filter(|b| b.tool).count();
                @let models = top.len() - tools;
                @if models > 0 { (models) " model calls" }
                @if models > 0 && tools > 0 { " and " }
                @if tools == 1 { "1 tool call" } @else if tools > 1 { (tools) " tool calls" }
                @if nested > 0 { " (and " (nested) " of subagents, ↳)" }
                " over " (llm::ms(span))
                @if failed > 0 { " · " span.bad { (failed) " failed or cut" } }
                @if top.iter().any(|b| b.retry) { " · ↻ retry" }
            }
        }
    })
}
