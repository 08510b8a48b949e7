//! The timelines of a session laid out as lanes and drawn as SVG.

use super::*;

/// One timeline's place in the graph.
#[derive(Debug, Clone)]
pub(super) struct Lane {
    pub(super) branch: BranchRow,
    /// Depth of the first node of this lane's own segment.
    pub(super) start: u64,
    /// Depth of its head.
    pub(super) end: u64,
    /// The lane it forked from and the depth of the fork point.
    pub(super) parent: Option<(usize, u64)>,
    /// Depths of promote nodes on the lane's own segment.
    pub(super) promotes: Vec<u64>,
}

/// Lays the session's timelines out: `main` first, then by creation time;
/// each lane owns the nodes no earlier lane has. One pass over the
/// session's node rows (no payloads).
pub(super) fn lanes(s: &mut Store, row: &SessionRow) -> convo_store::Result<Vec<Lane>> {
    let mut branches = s.branches(&row.id)?;
    branches.sort_by_key(|b| (b.name.as_str() != "main", b.created_at));
    branches.truncate(64);
    let id = row.id;
    // Links only (hash, parent, kind): no row is decoded whole. A parent
    // comes before its children in follow order, so depths take one pass.
    let nodes = s.read(move |tx| tx.session_links(&id))?;
    let index: DigestMap<NodeHash, usize> =
        nodes.iter().enumerate().map(|(i, l)| (l.hash, i)).collect();
    let mut depths = Vec::with_capacity(nodes.len());
    for l in &nodes {
        let d = l
            .parent
            .and_then(|p| index.get(&p))
            .and_then(|&i| depths.get(i).copied())
            .unwrap_or(0u64)
            + 1;
        depths.push(d);
    }
    let mut owner: DigestMap<NodeHash, usize> = DigestMap::default();
    let mut out = Vec::new();
    for b in branches {
        let lane = out.len();
        let Some(head) = b.head else {
            out.push(Lane {
                branch: b,
                start: 0,
                end: 0,
                parent: None,
                promotes: Vec::new(),
            });
            continue;
        };
        let mut cur = Some(head);
        let mut start = 0;
        let mut parent = None;
        let mut promotes = Vec::new();
        let mut end = None;
        let mut steps = 0;
        while let Some(h) = cur {
            steps += 1;
            if steps > nodes.len() + 1 {
                break;
            }
            if let Some(&l) = owner.get(&h) {
                let depth = index.get(&h).map(|&i| depths[i]).unwrap_or(0);
                parent = Some((l, depth));
                break;
            }
            let Some(&i) = index.get(&h) else { break };
            let n = &nodes[i];
            end.get_or_insert(depths[i]);
            start = depths[i];
            if n.kind == Kind::Promote {
                promotes.push(depths[i]);
            }
            owner.insert(h, lane);
            cur = n.parent;
        }
        out.push(Lane {
            branch: b,
            start,
            end: end.unwrap_or(start),
            parent,
            promotes,
        });
    }
    Ok(out)
}

pub(super) fn graph(sid: &str, lanes: &[Lane], current: &str) -> Markup {
    let max = lanes.iter().map(|l| l.end).max().unwrap_or(0).max(1) as f64;
    let w = 640.0;
    let x = |d: u64| 12.0 + (d as f64 / max) * (w - 24.0);
    let row_h = 34.0;
    let h = 16.0 + row_h * lanes.len() as f64;
    let y = |l: usize| 22.0 + row_h * l as f64;
    html! {
        figure.graph {
            svg viewBox=(format!("0 0 {} {h}", w + 200.0)) role="img" aria-label="Timelines of this session" {
                @for (i, l) in lanes.iter().enumerate() {
                    @if let Some((p, at)) = l.parent {
                        path.forkline d=(format!("M {:.1} {:.1} C {:.1} {:.1}, {:.1} {:.1}, {:.1} {:.1}",
                            x(at), y(p), x(at), y(i), x(at), y(i), x(l.start.max(at)), y(i))) {}
                        circle.forkpoint cx=(format!("{:.1}", x(at))) cy=(format!("{:.1}", y(p))) r="4" {}
                    }
                    line class=(if l.branch.sealed { "lane sealed" } else if l.branch.name.as_str() == "main" { "lane main" } else { "lane" })
                        x1=(format!("{:.1}", x(l.start))) y1=(format!("{:.1}", y(i)))
                        x2=(format!("{:.1}", x(l.end))) y2=(format!("{:.1}", y(i))) {}
                    @for d in &l.promotes {
                        text.promote x=(format!("{:.1}", x(*d))) y=(format!("{:.1}", y(i) + 5.0)) { "★" }
                    }
                    @if l.branch.head.is_some() {
                        circle.head cx=(format!("{:.1}", x(l.end))) cy=(format!("{:.1}", y(i))) r="5" {}
                    }
                    a href=(session_url(sid, Some(l.branch.name.as_str()))) {
                        text class=(if l.branch.name.as_str() == current { "label current" } else { "label" })
                            x=(format!("{:.1}", w + 4.0)) y=(format!("{:.1}", y(i) + 4.0)) {
                            tspan.u { (l.branch.name.as_str()) }
                            @if l.branch.sealed { " (sealed)" }
                        }
                    }
                }
            }
            figcaption {
                "Each line is a timeline from its fork point (●) to its head; ★ marks a promote; "
                "sealed timelines are dashed. Click a name to read it."
            }
        }
    }
}
