//! Two timelines side by side from their fork point: the store's one diff
//! ([`convo_store::diff`]) aligned by content, runs of unchanged turns
//! collapsed into a line that links to them, each changed turn side by side
//! with the timeline's own rendering of each node ([`super::session`]), the
//! words that changed inside a changed message marked, fork and promote
//! nodes said in words, and the turns cut into pages of
//! [`PAGE_NODES`](convo_store::diff::PAGE_NODES) changed nodes. On a narrow
//! screen the two sides stack, each labelled.

use super::session::node_item;
use super::*;
use convo_store::StoredNode;
use convo_store::diff::{self as sdiff, Change, NodeDiff, Payloads, TimelineDiff, TurnDiff};

#[derive(Debug, Deserialize)]
pub(super) struct DiffPageQuery {
    a: Option<String>,
    b: Option<String>,
    page: Option<usize>,
}

/// Word diffs are marked only below this many bytes of text per side.
const WORDS_MAX: usize = 64 * 1024;

pub(super) async fn diff_page(
    State(st): State<AppState>,
    Path(q): Path<String>,
    Query(d): Query<DiffPageQuery>,
) -> Response {
    let a =
        d.a.filter(|s| !s.is_empty())
            .unwrap_or_else(|| "main".into());
    let b =
        d.b.filter(|s| !s.is_empty())
            .unwrap_or_else(|| "main".into());
    let page = d.page.unwrap_or(1);
    let (a2, b2) = (a.clone(), b.clone());
    let data = run(&st, move |s| {
        let row = s.find_session(&q)?;
        let diff = sdiff::diff(s, &row.id, &a2, &b2)?;
        let pages = diff.pages(sdiff::PAGE_NODES);
        let range = page
            .checked_sub(1)
            .and_then(|p| pages.get(p))
            .cloned()
            .ok_or_else(|| {
                StoreError::Invalid(
                    format!(
                        "page {page}: this diff has {} page{} (from 1)",
                        pages.len(),
                        if pages.len() == 1 { "" } else { "s" }
                    )
                    .into(),
                )
            })?;
        let payloads = sdiff::payloads(s, &diff, range.clone(), false)?;
        Ok((row, diff, pages.len(), range, payloads))
    })
    .await;
    let (row, dv, pages, range, payloads) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let sid = row.id.to_string();
    let url = |p: usize| {
        format!(
            "/sessions/{sid}/diff?a={}&b={}&page={p}",
            query_escape(&a),
            query_escape(&b)
        )
    };
    let pager = html! {
        @if pages > 1 {
            nav.pager aria-label="Pages of this diff" {
                @if page > 1 { a href=(url(1)) { "« first" } " " a rel="prev" href=(url(page - 1)) { "← previous" } " " }
                span { "page " (page) " of " (pages) }
                @if page < pages { " " a rel="next" href=(url(page + 1)) { "next →" } " " a href=(url(pages)) { "last »" } }
            }
        }
    };
    let view = View {
        sid: &sid,
        d: &dv,
        payloads: &payloads,
    };
    let any_change = dv.turns.iter().any(TurnDiff::changed);
    let body = html! {
        section.diffpage id="diff" data-session=(sid) data-pages=(pages) data-page=(page) {
            p { a href=(session_url(&sid, None)) { "← session" } }
            h1 { bdi { (a) } " ↔ " bdi { (b) } }
            p.sub {
                (dv.common) " nodes shared"
                @if let Some(f) = &dv.fork_point {
                    " · fork point " a.mono href=(format!("/sessions/{sid}/nodes/{}", f.stored.hash)) { (f.stored.hash.short()) }
                    @if let Some(t) = sdiff::turn_of(&f.stored) { " (turn " (t) ")" } @else { " (after turn " (f.stored.ctx.turn) ")" }
                }
                " · " span.side-a { "A " bdi { (a) } " +" (dv.a.added.len()) }
                " · " span.side-b { "B " bdi { (b) } " +" (dv.b.added.len()) }
                " · " (dv.unchanged()) " unchanged"
            }
            (pager)
            @if !any_change {
                p.notice { "No differences after the fork point: every node on one side was recorded the same way on the other." }
            }
            div.dturns {
                @for item in runs(&dv.turns[range.clone()], range.start) {
                    @match item {
                        Run::Same(turns) => (view.same(&turns, &b)),
                        Run::Changed(i) => (view.turn(&dv.turns[i], &a, &b)),
                    }
                }
            }
            (pager)
        }
    };
    html_response(super::page(&format!("diff {a} ↔ {b}"), body))
}

/// A changed turn, or a run of unchanged ones (indexes into the turns).
enum Run {
    Same(Vec<usize>),
    Changed(usize),
}

fn runs(turns: &[TurnDiff], first: usize) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let i = first + i;
        if t.changed() {
            out.push(Run::Changed(i));
        } else if let Some(Run::Same(v)) = out.last_mut() {
            v.push(i);
        } else {
            out.push(Run::Same(vec![i]));
        }
    }
    out
}

struct View<'a> {
    sid: &'a str,
    d: &'a TimelineDiff,
    payloads: &'a Payloads,
}

impl View<'_> {
    /// "… N unchanged nodes (turns x–y) …", linking to them on side B's
    /// timeline when B is a branch, else to their first node.
    fn same(&self, turns: &[usize], b: &str) -> Markup {
        let nodes: Vec<&StoredNode> = turns
            .iter()
            .flat_map(|&i| &self.d.turns[i].nodes)
            .filter_map(|n| self.d.node_b(n))
            .collect();
        let Some(first) = nodes.first() else {
            return html! {};
        };
        let numbers: Vec<usize> = turns.iter().filter_map(|&i| self.d.turns[i].b).collect();
        let href = match BranchName::new(b) {
            Ok(br) => format!(
                "{}{}cursor={}",
                session_url(self.sid, Some(br.as_str())),
                if br.is_main() { "?" } else { "&" },
                first.ctx.depth.saturating_sub(1)
            ),
            Err(_) => format!("/sessions/{}/nodes/{}", self.sid, first.hash),
        };
        html! {
            div.collapsed {
                a href=(href) {
                    "… " (nodes.len()) " unchanged node" @if nodes.len() != 1 { "s" }
                    @match (numbers.first(), numbers.last()) {
                        (Some(x), Some(y)) if x == y => { " (turn " (x) ")" }
                        (Some(x), Some(y)) => { " (turns " (x) "–" (y) ")" }
                        _ => {}
                    }
                    " …"
                }
            }
        }
    }

    /// A changed turn: its nodes aligned, side by side.
    fn turn(&self, t: &TurnDiff, a: &str, b: &str) -> Markup {
        let num = |n: Option<usize>| n.map_or("–".to_owned(), |n| n.to_string());
        let title = if t.a == t.b {
            format!("Turn {}", num(t.a))
        } else {
            format!("Turn {} ↔ {}", num(t.a), num(t.b))
        };
        let label_a = format!("A \u{2068}{a}\u{2069}");
        let label_b = format!("B \u{2068}{b}\u{2069}");
        html! {
            section.dturn {
                h2 { (title) }
                @for n in &t.nodes {
                    @let (na, nb) = (self.d.node_a(n), self.d.node_b(n));
                    @if n.same {
                        div.pair.same data-label="A and B" { (self.node(nb)) }
                    } @else if let (Some(x), Some(y)) = (na, nb) && let Some(parts) = self.parts(x, y) {
                        div.pair.changed.by-parts {
                            div.side.a data-label=(label_a) { (self.head(x)) }
                            div.side.b data-label=(label_b) { (self.head(y)) }
                            (parts)
                        }
                    } @else {
                        div class=(pair_class(n)) {
                            div.side.a data-label=(label_a) {
                                @match na { Some(_) => (self.node(na)), None => p.absent { "not on A" } }
                            }
                            div.side.b data-label=(label_b) {
                                @match nb { Some(_) => (self.node(nb)), None => p.absent { "not on B" } }
                            }
                            @if let (Some(x), Some(y)) = (na, nb) { (self.words(x, y)) }
                        }
                    }
                }
            }
        }
    }

    /// One node as the timeline shows it, with what a fork or promote means.
    fn node(&self, n: Option<&StoredNode>) -> Markup {
        let Some(n) = n else { return html! {} };
        let payload = self.payloads.get(&n.hash).map(|p| p.as_slice());
        let mut v = convo_runtime::wire::node(n, payload);
        if let Some(t) = sdiff::turn_of(n) {
            v = v.with_turn(t as u64);
        }
        html! {
            (node_item(self.sid, &v))
            @if let Some(e) = sdiff::event_text(n) { p.event-text { (e) } }
        }
    }

    /// A node's line without its payload: kind, ends, model, size, link.
    fn head(&self, n: &StoredNode) -> Markup {
        let kind = n.node.kind.as_str();
        let model = n
            .node
            .diagnostics
            .to_value()
            .get("model")
            .and_then(|v| v.as_str().map(str::to_owned));
        let len = self.payloads.get(&n.hash).map_or(0, Vec::len);
        html! {
            div.meta.head {
                span class=(format!("kind k-{kind}")) { (kind) }
                span.ends { bdi { (n.node.from) } " → " bdi { (n.node.to) } }
                @if let Some(m) = model { span.diag { "model: " bdi { (m) } } }
                span.size { (len) " bytes" }
                a.hash href=(format!("/sessions/{}/nodes/{}", self.sid, n.hash)) title="open this node" { (n.hash.short()) }
            }
        }
    }

    /// Two JSON objects part by part ([`sdiff::parts`]): the same fields
    /// and messages folded, the changed ones word by word, the added and
    /// removed ones listed; `None` when a payload is not a JSON object.
    fn parts(&self, x: &StoredNode, y: &StoredNode) -> Option<Markup> {
        let (px, py) = (self.payloads.get(&x.hash)?, self.payloads.get(&y.hash)?);
        if px.len() > PARTS_MAX || py.len() > PARTS_MAX {
            return None;
        }
        let parts = sdiff::parts(px, py)?;
        Some(html! {
            div.parts {
                span.words-label { "What changed, A → B, part by part" }
                @for p in &parts { (part(p)) }
            }
        })
    }

    /// The words that changed between two UTF-8 payloads.
    fn words(&self, x: &StoredNode, y: &StoredNode) -> Markup {
        let (Some(px), Some(py)) = (self.payloads.get(&x.hash), self.payloads.get(&y.hash)) else {
            return html! {};
        };
        let (Ok(tx), Ok(ty)) = (std::str::from_utf8(px), std::str::from_utf8(py)) else {
            return html! {};
        };
        if tx.len() > WORDS_MAX || ty.len() > WORDS_MAX {
            return html! { p.words-note { "Too long to mark word by word; compare the two sides." } };
        }
        if px == py {
            return html! { p.words-note { "Same payload; the nodes differ in their ends or kind." } };
        }
        let (ox, oy) = (sdiff::payload_lines(px), sdiff::payload_lines(py));
        html! {
            div.words {
                span.words-label { "What changed, A → B" }
                (diff_words(&sdiff::word_diff(&ox, &oy)))
            }
        }
    }
}

/// Payloads compared part by part up to this size (bytes, each side).
const PARTS_MAX: usize = 8 * 1024 * 1024;

/// Values of a changed field shown up to this many characters.
const VALUE_MAX: usize = 2000;

fn part(p: &sdiff::Part) -> Markup {
    let cut = |v: &Option<String>| match v {
        None => "(absent)".to_owned(),
        Some(v) if v.chars().count() > VALUE_MAX => {
            format!("{}…", v.chars().take(VALUE_MAX).collect::<String>())
        }
        Some(v) => v.clone(),
    };
    match p {
        sdiff::Part::Same { names, count: 0 } => html! {
            p.folded { "unchanged: " @for (i, n) in names.iter().enumerate() { @if i > 0 { ", " } bdi { (n) } } }
        },
        sdiff::Part::Same { names, count } => html! {
            p.folded { "… " (count) " unchanged in " bdi { (names.join(", ")) } " …" }
        },
        sdiff::Part::Field { name, a, b, words } => html! {
            div.part.field {
                span.pname { bdi { (name) } }
                @if words.is_empty() {
                    " " del { (cut(a)) } " → " ins { (cut(b)) }
                } @else {
                    (diff_words(words))
                }
            }
        },
        sdiff::Part::Item {
            list,
            a,
            b,
            label,
            words,
        } => {
            let what = match (a, b) {
                (Some(_), Some(_)) => "changed",
                (Some(_), None) => "only on A",
                _ => "only on B",
            };
            let at = |i: &Option<usize>| i.map_or("–".to_owned(), |i| (i + 1).to_string());
            html! {
                div class=(format!("part item {}", what.replace(' ', "-"))) {
                    span.pname { bdi { (list) } " " (at(a)) @if a != b { "→" (at(b)) } }
                    @if !label.is_empty() { " " span.diag { bdi { (label) } } }
                    " " span.what { (what) }
                    (diff_words(words))
                }
            }
        }
    }
}

fn diff_words(words: &[(Change, String)]) -> Markup {
    html! {
        pre.difftext {
            @for (c, text) in words {
                @match c {
                    Change::Same => span { (text) },
                    Change::Removed => del { (text) },
                    Change::Added => ins { (text) },
                }
            }
        }
    }
}

fn pair_class(n: &NodeDiff) -> &'static str {
    match (n.a, n.b) {
        (Some(_), Some(_)) => "pair changed",
        (Some(_), None) => "pair only-a",
        _ => "pair only-b",
    }
}
