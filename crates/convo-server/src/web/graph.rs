//! The timelines of a session laid out as lanes and drawn as SVG.
//!
//! A lane is a timeline's own stretch: from the node after its fork point
//! to its head. Lanes are ordered so that a timeline comes after the one it
//! forked from: roots (timelines with no fork node on their chain: the
//! session's first `main`, or a `main` sealed by a promote) first, then by
//! the depth of the last fork node on their chain. So after a promote the
//! sealed old main is the root and the new `main` hangs under it at its
//! real fork point, with its old name kept ("was retry"), as the store's
//! topology ([`convo_store::topology`]) says; but only the session's links
//! (hash, parent, kind, depth, turn) are read, plus the few promote rows.
//!
//! The x axis is the turn; text keeps its size on any screen (x in
//! percent, y in pixels, no scaling viewBox). Past [`MAX_LANES`] lanes the
//! rest are counted and listed under the drawing, never dropped.

use super::*;

/// Lanes drawn; the rest are listed (the current timeline is always drawn).
pub(super) const MAX_LANES: usize = 24;

/// A promote on a lane: where, and the names it changed.
#[derive(Debug, Clone)]
pub(super) struct Promote {
    /// Turn position of the promote node.
    pub(super) at: u64,
    /// The branch promoted (its name before it became `main`).
    pub(super) was: String,
    /// The name the old `main` was sealed under.
    pub(super) sealed_as: Option<String>,
}

/// One timeline's place in the graph.
#[derive(Debug, Clone)]
pub(super) struct Lane {
    pub(super) branch: BranchRow,
    /// Turn position of the first node of this lane's own stretch.
    pub(super) start: u64,
    /// Turn position of its head.
    pub(super) end: u64,
    /// Nodes on the whole timeline (its head's depth).
    pub(super) nodes: u64,
    /// The lane it forked from and the turn position of the fork point.
    pub(super) parent: Option<(usize, u64)>,
    /// Promote nodes on the lane's own stretch.
    pub(super) promotes: Vec<Promote>,
    /// For a timeline sealed by a promote: the branch that replaced it.
    pub(super) replaced_by: Option<String>,
}

/// Lays the session's timelines out (see the module docs). One pass over
/// the session's links, no payloads; the promote rows read whole.
pub(super) fn lanes(s: &mut Store, row: &SessionRow) -> convo_store::Result<Vec<Lane>> {
    let branches = s.branches(&row.id)?;
    let id = row.id;
    s.read(move |tx| {
        let nodes = tx.session_links(&id)?;
        let index: DigestMap<NodeHash, usize> =
            nodes.iter().enumerate().map(|(i, l)| (l.hash, i)).collect();
        let pos = turn_positions(&nodes, &index);
        let mut owner: DigestMap<NodeHash, usize> = DigestMap::default();
        let mut out: Vec<Lane> = Vec::new();
        for b in in_lane_order(&branches, &nodes, &index) {
            let lane = out.len();
            let mut l = Lane {
                start: 0,
                end: 0,
                nodes: 0,
                parent: None,
                promotes: Vec::new(),
                replaced_by: None,
                branch: b,
            };
            let mut cur = l.branch.head;
            let mut first = true;
            let mut steps = 0;
            while let Some(h) = cur {
                steps += 1;
                if steps > nodes.len() + 1 {
                    break;
                }
                let Some(&i) = index.get(&h) else { break };
                if let Some(&o) = owner.get(&h) {
                    l.parent = Some((o, pos[i]));
                    break;
                }
                let n = &nodes[i];
                if first {
                    (l.end, l.nodes, first) = (pos[i], n.depth, false);
                }
                l.start = pos[i];
                if n.kind == Kind::Promote {
                    l.promotes.push(promote_at(tx, &h, pos[i])?);
                }
                owner.insert(h, lane);
                cur = n.parent;
            }
            out.push(l);
        }
        // The names a promote sealed: which timeline replaced which.
        let sealed: Vec<(String, String)> = out
            .iter()
            .flat_map(|l| &l.promotes)
            .filter_map(|p| Some((p.sealed_as.clone()?, p.was.clone())))
            .collect();
        for l in &mut out {
            l.replaced_by = sealed
                .iter()
                .find(|(s, _)| s == l.branch.name.as_str())
                .map(|(_, was)| was.clone());
        }
        Ok(out)
    })
}

/// Each node's turn position: a parent comes before its children in
/// follow order, so one pass does (a node between turns takes its
/// parent's).
fn turn_positions(nodes: &[convo_store::Link], index: &DigestMap<NodeHash, usize>) -> Vec<u64> {
    let mut pos: Vec<u64> = Vec::with_capacity(nodes.len());
    for l in nodes {
        let p = l
            .parent
            .and_then(|p| index.get(&p))
            .and_then(|&i| pos.get(i).copied())
            .unwrap_or(0);
        pos.push(l.turn.unwrap_or(p));
    }
    pos
}

/// The timelines in lane order: roots first, then by the depth of the last
/// fork node on the chain (a timeline after the one it forked from).
fn in_lane_order(
    branches: &[BranchRow],
    nodes: &[convo_store::Link],
    index: &DigestMap<NodeHash, usize>,
) -> Vec<BranchRow> {
    let mut keyed: Vec<(u64, BranchRow)> = branches
        .iter()
        .cloned()
        .map(|b| {
            let mut cur = b.head;
            let mut fork_depth = 0;
            let mut steps = 0;
            while let Some(h) = cur {
                steps += 1;
                let Some(&i) = index.get(&h) else { break };
                if nodes[i].kind == Kind::Fork || steps > nodes.len() {
                    fork_depth = nodes[i].depth;
                    break;
                }
                cur = nodes[i].parent;
            }
            (fork_depth, b)
        })
        .collect();
    keyed.sort_by_key(|(d, b)| (*d, b.name.as_str() != "main", b.created_at));
    keyed.into_iter().map(|(_, b)| b).collect()
}

/// The promote node `h` at turn position `at`: the names it changed.
fn promote_at(tx: &mut dyn convo_store::Tx, h: &NodeHash, at: u64) -> convo_store::Result<Promote> {
    let event = tx.node(h)?.and_then(|s| s.node.event);
    Ok(Promote {
        at,
        was: event
            .as_ref()
            .map(|e| e.branch.as_str().to_owned())
            .unwrap_or_default(),
        sealed_as: event.and_then(|e| e.sealed_as.map(|s| s.as_str().to_owned())),
    })
}

/// A round step for about five ticks up to `max`.
fn tick_step(max: u64) -> u64 {
    let raw = (max / 5).max(1);
    let mag = 10u64.pow(raw.ilog10());
    [1, 2, 5, 10]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10 * mag)
}

/// What the lane's label says after the name.
fn label_note(l: &Lane) -> String {
    let mut parts = Vec::new();
    if l.branch.name.is_main()
        && let Some(p) = l.promotes.last()
        && !p.was.is_empty()
    {
        parts.push(format!("was \u{2068}{}\u{2069}", p.was));
    }
    if l.branch.sealed {
        parts.push("sealed".to_owned());
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

/// The tooltip: name, head turn, nodes, created, sealed, fork point, promotes.
fn tooltip(l: &Lane, lanes: &[Lane]) -> String {
    let mut t = format!(
        "\u{2068}{}\u{2069}{} — head at turn {}, {} nodes, created {}",
        l.branch.name.as_str(),
        label_note(l),
        l.end,
        l.nodes,
        convo_api::time(l.branch.created_at)
    );
    if let Some((p, at)) = l.parent {
        t.push_str(&format!(
            "; forked from \u{2068}{}\u{2069} at turn {at}",
            lanes[p].branch.name.as_str()
        ));
    }
    if l.branch.sealed {
        match &l.replaced_by {
            Some(w) => t.push_str(&format!(
                "; sealed: it was main until \u{2068}{w}\u{2069} was promoted"
            )),
            None => t.push_str("; sealed"),
        }
    }
    for p in &l.promotes {
        t.push_str(&format!("; {}", promote_text(p)));
    }
    t
}

fn promote_text(p: &Promote) -> String {
    match &p.sealed_as {
        Some(s) => format!(
            "\u{2068}{}\u{2069} became main at turn {}, the old main sealed as \u{2068}{s}\u{2069}",
            p.was, p.at
        ),
        None => format!("\u{2068}{}\u{2069} became main at turn {}", p.was, p.at),
    }
}

pub(super) fn graph(sid: &str, lanes: &[Lane], current: &str) -> Markup {
    let (drawn, row) = drawn(lanes, current);
    let hidden: Vec<&Lane> = (0..lanes.len())
        .filter(|i| row[*i].is_none())
        .map(|i| &lanes[i])
        .collect();
    // The turns drawn: from the first lane's start to the last head.
    let lo = lanes.iter().map(|l| l.start).min().unwrap_or(0);
    let max = lanes.iter().map(|l| l.end).max().unwrap_or(0).max(lo + 1);
    // x in percent of the width (2%..97%), y in pixels.
    let x = |t: u64| {
        format!(
            "{:.2}%",
            2.0 + ((t - lo.min(t)) as f64 / (max - lo) as f64) * 95.0
        )
    };
    let row_h = 46.0;
    let top = 8.0;
    let y = |k: usize| top + 26.0 + row_h * k as f64;
    let axis_y = top + row_h * drawn.len() as f64 + 8.0;
    let h = axis_y + 22.0;
    let step = tick_step(max - lo);
    let ticks: Vec<u64> = std::iter::once(lo)
        .chain((lo / step + 1..=max / step).map(|i| i * step))
        .filter(|t| *t == lo || (t - lo) * 10 >= (max - lo))
        .collect();
    let promotes: Vec<&Promote> = lanes.iter().flat_map(|l| &l.promotes).collect();
    html! {
        figure.graph {
            svg width="100%" height=(format!("{h:.0}")) role="img" aria-label="Timelines of this session, by turn" {
                @for &i in &drawn {
                    @let l = &lanes[i];
                    @let k = row[i].unwrap_or(0);
                    @let name = l.branch.name.as_str();
                    @let yy = y(k);
                    a.lanelink href=(session_url(sid, Some(name))) {
                        title { (tooltip(l, lanes)) }
                        rect.lanehit x="0" y=(format!("{:.1}", yy - 24.0)) width="100%" height=(format!("{row_h:.0}")) {}
                        @if let Some((p, at)) = l.parent && let Some(pk) = row[p] {
                            line.forkline x1=(x(at)) y1=(format!("{:.1}", y(pk))) x2=(x(at)) y2=(format!("{yy:.1}")) {}
                            line.forkline x1=(x(at)) y1=(format!("{yy:.1}")) x2=(x(l.start.max(at))) y2=(format!("{yy:.1}")) {}
                            circle.forkpoint cx=(x(at)) cy=(format!("{:.1}", y(pk))) r="5" {}
                        }
                        line class=(if l.branch.sealed { "lane sealed" } else if l.branch.name.is_main() { "lane main" } else { "lane" })
                            x1=(x(l.start)) y1=(format!("{yy:.1}")) x2=(x(l.end)) y2=(format!("{yy:.1}")) {}
                        @if l.branch.head.is_some() {
                            circle.head cx=(x(l.end)) cy=(format!("{yy:.1}")) r="5" {}
                        }
                        @for p in &l.promotes {
                            text.promote x=(x(p.at)) y=(format!("{:.1}", yy + 23.0)) { title { (promote_text(p)) } "★" }
                        }
                        @let left = (l.start - lo.min(l.start)) * 2 <= max - lo;
                        text class=(if name == current { "label current" } else { "label" })
                            x=(if left { x(l.start) } else { x(l.end) }) y=(format!("{:.1}", yy - 9.0))
                            text-anchor=(if left { "start" } else { "end" }) {
                            tspan.u { (name) }
                            (label_note(l))
                        }
                    }
                }
                line.axis x1=(x(0)) y1=(format!("{axis_y:.1}")) x2=(x(max)) y2=(format!("{axis_y:.1}")) {}
                @for t in &ticks {
                    @if *t == lo {
                        text.tick.first x=(x(*t)) y=(format!("{:.1}", axis_y + 16.0)) { "turn " (t) }
                    } @else {
                        text.tick x=(x(*t)) y=(format!("{:.1}", axis_y + 16.0)) { (t) }
                    }
                }
            }
            (caption(sid, lanes, &promotes, &hidden))
        }
    }
}

/// Which lanes are drawn: the first [`MAX_LANES`], plus the current one and
/// the lanes it descends from, in order; and each lane's row (`None`: not
/// drawn).
fn drawn(lanes: &[Lane], current: &str) -> (Vec<usize>, Vec<Option<usize>>) {
    let mut drawn: Vec<usize> = (0..lanes.len().min(MAX_LANES)).collect();
    if let Some(mut c) = lanes.iter().position(|l| l.branch.name.as_str() == current) {
        while !drawn.contains(&c) {
            drawn.push(c);
            match lanes[c].parent {
                Some((p, _)) => c = p,
                None => break,
            }
        }
    }
    drawn.sort_unstable();
    let mut row = vec![None; lanes.len()];
    for (k, &i) in drawn.iter().enumerate() {
        row[i] = Some(k);
    }
    (drawn, row)
}

/// The drawing's legend, its promotes, and the timelines not drawn.
fn caption(sid: &str, lanes: &[Lane], promotes: &[&Promote], hidden: &[&Lane]) -> Markup {
    html! {
        figcaption {
            "Each line is a timeline by turn, from its fork point (○, on the timeline it came from) to its head (●); "
            "★ marks a promote; sealed timelines are dashed. Hover for details, click a timeline to read it."
            @if !promotes.is_empty() {
                ul.promotes { @for p in promotes { li { "★ " (promote_text(p)) } } }
            }
        }
        @if !hidden.is_empty() {
            details.more-lanes {
                summary { "… and " (hidden.len()) " more timeline" @if hidden.len() != 1 { "s" } " not drawn" }
                ul.lanes-all {
                    @for l in hidden {
                        li { a href=(session_url(sid, Some(l.branch.name.as_str()))) title=(tooltip(l, lanes)) { bdi { (l.branch.name.as_str()) } } (label_note(l)) " · turn " (l.end) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::tick_step;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1), 1);
        assert_eq!(tick_step(10), 2);
        assert_eq!(tick_step(37), 10);
        assert_eq!(tick_step(10_000), 2000);
    }
}
