//! A turn's shape: each model call (and MCP tool call) of the turn as a bar on one time axis
//! (as a browser's network waterfall draws requests), so a slow call, the
//! calls that ran in parallel and where the tokens went read at a glance.
//!
//! A call runs from its response's time less the recorded latency (the
//! proxy writes request and response when the answer is in) to the
//! response's time; without a latency, from its request's time. Failed
//! calls and cut streams are marked, and a request sent again with the same
//! bytes in the same turn is marked as a retry. Drawn as SVG (geometry in
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
    for n in nodes {
        match n.kind.as_str() {
            "request" => {
                let retry = sent.contains(&n.payload_sha256.as_str());
                sent.push(&n.payload_sha256);
                requests.push((n, retry));
            }
            "response" => {
                let Some((tin, tout, cost, _)) = llm::figures(n) else {
                    out.extend(tool_bar(n));
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
                });
            }
            _ => {}
        }
    }
    out
}

/// An MCP tool call's bar: it ran for its latency up to its answer.
fn tool_bar(n: &NodeView) -> Option<Bar> {
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
    })
}

const WIDTH: i64 = 1000;
const LABELS: i64 = 330;
const ROW: i64 = 22;

/// The waterfall of one turn's nodes, or nothing when it made no call.
pub(super) fn waterfall(nodes: &[&NodeView]) -> Option<Markup> {
    let bars = bars(nodes);
    if bars.is_empty() {
        return None;
    }
    let t0 = bars.iter().map(|b| b.start).min().unwrap_or(0);
    let t1 = bars.iter().map(|b| b.end).max().unwrap_or(t0);
    let span = (t1 - t0).max(1);
    let x = |t: i64| LABELS + (t - t0) * (WIDTH - LABELS - 10) / span;
    let height = ROW * (bars.len() as i64 + 1);
    let failed = bars.iter().filter(|b| b.failed || b.cut).count();
    Some(html! {
        figure.waterfall data-calls=(bars.len()) {
            svg viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
                aria-label=(format!("{} calls over {}", bars.len(), llm::ms(span))) {
                line.axis x1=(LABELS) y1=(height - ROW + 4) x2=(WIDTH - 10) y2=(height - ROW + 4) {}
                text.tick.first x=(LABELS) y=(height - 4) { "0" }
                text.tick.end x=(WIDTH - 10) y=(height - 4) { (llm::ms(span)) }
                @for (i, b) in bars.iter().enumerate() {
                    @let y = i as i64 * ROW;
                    @let class = if b.failed { "bar bad" } else if b.cut { "bar cut" } else if b.tool { "bar tool" } else { "bar" };
                    a href=(format!("#n-{}", b.hash)) {
                        title { (b.label) " · " (llm::ms(b.end - b.start))
                            @if b.failed { " · failed" } @if b.cut { " · stream cut" } @if b.retry { " · retry" } }
                        text.wlabel x="4" y=(y + 15) { (b.label) @if b.retry { " ↻" } }
                        rect class=(class) x=(x(b.start)) y=(y + 4) width=((x(b.end) - x(b.start)).max(2)) height="14" rx="2"
                            data-start=(b.start - t0) data-end=(b.end - t0) {}
                    }
                }
            }
            figcaption {
                @let tools = bars.iter().filter(|b| b.tool).count();
                @let models = bars.len() - tools;
                @if models > 0 { (models) " model calls" }
                @if models > 0 && tools > 0 { " and " }
                @if tools == 1 { "1 tool call" } @else if tools > 1 { (tools) " tool calls" }
                " over " (llm::ms(span))
                @if failed > 0 { " · " span.bad { (failed) " failed or cut" } }
                @if bars.iter().any(|b| b.retry) { " · ↻ retry" }
            }
        }
    })
}
