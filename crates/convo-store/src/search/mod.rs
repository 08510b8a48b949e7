//! Full-text search over payloads: one tokenizer, one query language and
//! one index cursor for every backend.
//!
//! **Words.** A payload that is valid UTF-8 is cut into words: maximal
//! runs of alphanumeric characters (Unicode), lowercased. Everything else
//! separates words, so `foo-bar`, `foo_bar` and `foo.bar` are two words
//! each and JSON keys and values are words like any other. Only the first
//! [`MAX_INDEXED_BYTES`] of a payload are indexed, and words longer than
//! [`MAX_WORD_BYTES`] are skipped; binary payloads are not indexed.
//! The backends never tokenize themselves: they receive the words (SQLite
//! FTS5 with the `ascii` tokenizer over the words joined by spaces;
//! PostgreSQL a `tsvector` literal with the words' positions), so both find
//! exactly the same nodes.
//!
//! **Queries** ([`Query::parse`]): every term must appear. A term is a word
//! (`paris`), a prefix (`capit*`), or a phrase (`"capital of france"`, or
//! any term that holds several words, such as `foo-bar`). `OR` between two
//! terms makes either do (`paris OR rome`); `-term` excludes the nodes
//! holding it (`paris -weather`). Case never matters.
//!
//! **A message counted once**: a message resent with every later request
//! is one hit, the node where it first appeared in its session (see
//! `once.rs`); the results say how many copies were left out.
//!
//! **The index** is kept off the append path, so bulk ingest keeps its
//! speed: it remembers a cursor (the follow number of the last node it
//! holds) and [`crate::Store::search_update`] adds the nodes appended since,
//! a batch per transaction, whoever appended them. [`crate::Store::search`]
//! reads the index and scans the nodes past its cursor (a store opened
//! read-only cannot update it), so results are always complete; callers
//! that can write update first (`convo search` and the server do).
//! [`crate::Store::search_reindex`] rebuilds it from scratch.
//!
//! Ranking: SQLite's BM25 and PostgreSQL's `ts_rank_cd`, as a score where
//! higher is better; the scanned tail is ranked by how often the terms
//! occur and listed after the indexed hits. Ties go to the newer node.

use crate::backend::{StoredNode, Tx};
use crate::filter::NodeFilter;
use crate::{Result, StoreError};
use convo_core::{BranchName, NodeHash, SessionId};
use std::collections::{HashMap, HashSet};

mod once;

/// How much of a payload is indexed (bytes, from its start).
pub const MAX_INDEXED_BYTES: usize = 256 * 1024;
/// Longer words are not indexed (PostgreSQL refuses lexemes over 2 KB).
pub const MAX_WORD_BYTES: usize = 200;
/// Nodes indexed per write transaction by [`crate::Store::search_update`].
pub const BATCH: usize = 2000;

/// A word of a text: its byte range in the text and its lowercase form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// Byte offset of its first character.
    pub start: usize,
    /// Byte offset just past it.
    pub end: usize,
    /// Lowercased.
    pub text: String,
}

/// The words of `text`, in order (see the module docs).
pub fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(word(text, s, i));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(word(text, s, text.len()));
    }
    out
}

fn word(text: &str, start: usize, end: usize) -> Word {
    Word {
        start,
        end,
        text: text[start..end].to_lowercase(),
    }
}

/// The words a payload is indexed under, or `None` when it is binary or
/// holds none.
pub fn document(payload: &[u8]) -> Option<Vec<String>> {
    let text = match std::str::from_utf8(payload) {
        Ok(t) => t,
        Err(e) if e.valid_up_to() >= MAX_INDEXED_BYTES => {
            // Valid as far as it is indexed.
            std::str::from_utf8(&payload[..e.valid_up_to()]).ok()?
        }
        Err(_) => return None,
    };
    let mut cut = text.len().min(MAX_INDEXED_BYTES);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let w: Vec<String> = words(&text[..cut])
        .into_iter()
        .map(|w| w.text)
        .filter(|w| w.len() <= MAX_WORD_BYTES)
        .collect();
    (!w.is_empty()).then_some(w)
}

/// One term of a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Term {
    /// This word.
    Word(String),
    /// A word starting with this.
    Prefix(String),
    /// These words, adjacent and in order.
    Phrase(Vec<String>),
}

impl Term {
    /// How often it occurs in `words`.
    fn count(&self, words: &[String]) -> usize {
        match self {
            Term::Word(w) => words.iter().filter(|x| *x == w).count(),
            Term::Prefix(p) => words.iter().filter(|x| x.starts_with(p.as_str())).count(),
            Term::Phrase(p) => words
                .windows(p.len())
                .filter(|win| win.iter().zip(p).all(|(a, b)| a == b))
                .count(),
        }
    }
}

/// A parsed query: see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Query {
    /// Every group must match; a group matches when one of its terms
    /// does (`a OR b` is one group of two terms).
    pub groups: Vec<Vec<Term>>,
    /// Terms none of which may appear (`-word`).
    pub excluded: Vec<Term>,
}

impl Query {
    /// Parses `text`: words, `prefix*`, `"quoted phrases"`, `OR` between
    /// two terms and `-term` to exclude one. Fails when it holds no word
    /// to find.
    pub fn parse(text: &str) -> Result<Query> {
        let mut groups: Vec<Vec<Term>> = Vec::new();
        let mut excluded = Vec::new();
        let mut or = false;
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if c.is_whitespace() {
                rest = &rest[c.len_utf8()..];
                continue;
            }
            let negated = c == '-' && rest[1..].chars().next().is_some_and(|n| !n.is_whitespace());
            if negated {
                rest = &rest[1..];
            }
            let (chunk, quoted, next) = if let Some(body) = rest.strip_prefix('"') {
                match body.find('"') {
                    Some(end) => (&body[..end], true, &body[end + 1..]),
                    None => (body, true, ""),
                }
            } else {
                let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                (&rest[..end], false, &rest[end..])
            };
            rest = next;
            if !quoted && !negated && chunk == "OR" {
                or = !groups.is_empty();
                continue;
            }
            let Some(term) = term_of(chunk, quoted) else {
                continue;
            };
            if negated {
                excluded.push(term);
            } else if or && let Some(last) = groups.last_mut() {
                last.push(term);
            } else {
                groups.push(vec![term]);
            }
            or = false;
        }
        if groups.is_empty() {
            let why = if excluded.is_empty() {
                "holds no word (words are letters and digits)"
            } else {
                "only excludes words (`-word`); add a word to find"
            };
            return Err(StoreError::Invalid(
                format!(
                    "the search `{}` {why}",
                    convo_core::text::visible(text, convo_core::text::Newlines::Escape)
                )
                .into(),
            ));
        }
        Ok(Query { groups, excluded })
    }

    /// Every term to find, in every group.
    pub fn terms(&self) -> impl Iterator<Item = &Term> {
        self.groups.iter().flatten()
    }

    /// How often the terms occur in `words`, or `None` when a group is
    /// missing or an excluded term is there.
    pub fn score(&self, words: &[String]) -> Option<u64> {
        if self.excluded.iter().any(|t| t.count(words) > 0) {
            return None;
        }
        let mut total = 0;
        for g in &self.groups {
            let n: usize = g.iter().map(|t| t.count(words)).sum();
            if n == 0 {
                return None;
            }
            total += n as u64;
        }
        Some(total)
    }

    /// Whether one of the terms to find occurs in `words`.
    pub fn touches(&self, words: &[String]) -> bool {
        self.terms().any(|t| t.count(words) > 0)
    }

    /// Which of `words` the terms to find match (for highlighting).
    fn marks(&self, words: &[Word]) -> Vec<bool> {
        let mut hit = vec![false; words.len()];
        for t in self.terms() {
            match t {
                Term::Word(w) => {
                    for (i, x) in words.iter().enumerate() {
                        hit[i] |= x.text == *w;
                    }
                }
                Term::Prefix(p) => {
                    for (i, x) in words.iter().enumerate() {
                        hit[i] |= x.text.starts_with(p.as_str());
                    }
                }
                Term::Phrase(p) => {
                    for i in 0..words.len().saturating_sub(p.len() - 1) {
                        if p.iter().enumerate().all(|(j, w)| words[i + j].text == *w) {
                            hit[i..i + p.len()].iter_mut().for_each(|h| *h = true);
                        }
                    }
                }
            }
        }
        hit
    }
}

/// The term a chunk of a query stands for: a word, a prefix (`capit*`) or
/// a phrase (quoted, or several words such as `foo-bar`).
fn term_of(chunk: &str, quoted: bool) -> Option<Term> {
    let mut w: Vec<String> = words(chunk).into_iter().map(|w| w.text).collect();
    match w.len() {
        0 => None,
        1 if !quoted && chunk.ends_with('*') => w.pop().map(Term::Prefix),
        1 => w.pop().map(Term::Word),
        _ => Some(Term::Phrase(w)),
    }
}

/// A window of a payload around its first match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snippet {
    /// The text, on one line (line breaks and tabs shown as spaces), with
    /// `…` where it was cut. Other control characters are kept: escape them
    /// before printing.
    pub text: String,
    /// Byte ranges of `text` that matched, in order.
    pub marks: Vec<(usize, usize)>,
}

/// How many characters of context a snippet shows before its first match.
const BEFORE: usize = 60;
/// How long a snippet is at most, in characters.
const WIDTH: usize = 200;

/// The snippet of `payload` for `q`. For a binary payload, a note saying so.
pub fn snippet(payload: &[u8], q: &Query) -> Snippet {
    let Ok(text) = std::str::from_utf8(payload) else {
        return Snippet {
            text: format!("<{} bytes of binary>", payload.len()),
            marks: Vec::new(),
        };
    };
    let ws = words(text);
    let hit = q.marks(&ws);
    let first = ws
        .iter()
        .zip(&hit)
        .find(|(_, h)| **h)
        .map_or(0, |(w, _)| w.start);
    // Start BEFORE characters earlier, at a word's start when there is one.
    let mut start = text[..first]
        .char_indices()
        .rev()
        .nth(BEFORE.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    if start > 0
        && let Some(w) = ws.iter().find(|w| w.start >= start && w.start <= first)
    {
        start = w.start;
    }
    let end = text[start..]
        .char_indices()
        .nth(WIDTH)
        .map_or(text.len(), |(i, _)| start + i);
    let mut out = String::new();
    let mut marks = Vec::new();
    if start > 0 {
        out.push('…');
    }
    let mut at = start;
    let flat = |s: &str| s.replace(['\n', '\r', '\t'], " ");
    for (w, h) in ws.iter().zip(&hit) {
        if !*h || w.start < start || w.end > end {
            continue;
        }
        out.push_str(&flat(&text[at..w.start]));
        let m = out.len();
        out.push_str(&flat(&text[w.start..w.end]));
        marks.push((m, out.len()));
        at = w.end;
    }
    out.push_str(&flat(&text[at..end]));
    if end < text.len() {
        out.push('…');
    }
    Snippet { text: out, marks }
}

/// What a backend matches in its index: the terms and the conditions it
/// can check in SQL.
#[derive(Clone, Copy, Debug)]
pub struct IndexQuery<'a> {
    /// What to find.
    pub query: &'a Query,
    /// Only nodes of this session.
    pub session: Option<&'a SessionId>,
    /// Only nodes of sessions recorded by this agent.
    pub agent: Option<&'a str>,
    /// Only nodes that pass this.
    pub filter: &'a NodeFilter,
    /// At most this many, best first; all when `None`.
    pub limit: Option<usize>,
}

/// A search: the query and where to look.
#[derive(Clone, Debug)]
pub struct SearchRequest {
    /// What to find.
    pub query: Query,
    /// Only this session.
    pub session: Option<SessionId>,
    /// Only nodes on this timeline (needs `session`).
    pub branch: Option<BranchName>,
    /// Only nodes of sessions recorded by this agent.
    pub agent: Option<String>,
    /// Only nodes that pass this.
    pub filter: NodeFilter,
    /// At most this many hits.
    pub limit: usize,
    /// Skip this many hits first (the pages before).
    pub offset: usize,
}

/// One node that matched.
#[derive(Clone, Debug)]
pub struct SearchHit {
    /// The node.
    pub node: StoredNode,
    /// Its payload.
    pub payload: Vec<u8>,
    /// Higher is better; comparable within one result list.
    pub score: f64,
    /// Where it matched.
    pub snippet: Snippet,
    /// The timelines whose history holds it, `main` first.
    pub branches: Vec<BranchName>,
    /// Its turn number on the first of those timelines.
    pub turn: Option<usize>,
}

/// The hits, best first, and how they were found.
#[derive(Clone, Debug)]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<SearchHit>,
    /// The index's cursor: nodes up to this follow number came from the index.
    pub indexed: u64,
    /// Nodes past the cursor that were scanned instead.
    pub scanned: u64,
    /// How many hits there are in all, resent copies folded (at least
    /// this many when `exact` is false).
    pub total: usize,
    /// Whether `total` counts every match: false past [`MAX_MATCHES`].
    pub exact: bool,
    /// The hits skipped before these (the request's `offset`).
    pub offset: usize,
    /// Matches left out as resent copies of a message found earlier in
    /// its session (a message counted once, where it first appeared).
    pub resent: usize,
}

/// How far the index is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexStatus {
    /// The follow number of the last node indexed.
    pub cursor: u64,
    /// The follow number of the newest node.
    pub end: u64,
}

impl IndexStatus {
    /// Nodes appended since the index's cursor.
    pub fn behind(&self) -> u64 {
        self.end.saturating_sub(self.cursor)
    }
}

/// Indexes up to [`BATCH`] nodes past the cursor, in the caller's write
/// transaction; returns the new cursor and how many nodes it read.
pub(crate) fn index_batch(tx: &mut dyn Tx) -> Result<(u64, usize)> {
    let cursor = tx.search_cursor()?;
    let nodes = tx.nodes_since(cursor, BATCH)?;
    let Some(last) = nodes.last().map(|n| n.seq) else {
        return Ok((cursor, 0));
    };
    let mut docs = Vec::new();
    for n in &nodes {
        // A payload removed from the store has nothing left to index.
        if let Some(p) = tx.blob(&n.node.payload)?
            && let Some(d) = document(&p)
        {
            docs.push((n.seq, d));
        }
    }
    tx.search_add(&docs, last)?;
    Ok((last, nodes.len()))
}

/// How many matches, best first, a search reads to fold resent copies
/// and count its hits; past it, the count is a lower bound.
pub const MAX_MATCHES: usize = 1000;

/// The search itself, in one read transaction.
pub(crate) fn search_in(tx: &mut dyn Tx, req: &SearchRequest) -> Result<SearchResults> {
    if req.branch.is_some() && req.session.is_none() {
        return Err(StoreError::Invalid(
            "a search on a branch needs its session".into(),
        ));
    }
    // Chains of the sessions involved, so hits get their timelines and
    // turn numbers and --branch can be checked.
    let mut timelines = Timelines::default();
    let on_branch: Option<HashSet<u64>> = match (&req.session, &req.branch) {
        (Some(s), Some(b)) => {
            let row = tx.branch(s, b)?.ok_or_else(|| StoreError::NoBranch {
                session: s.to_string(),
                branch: b.as_str().to_owned(),
            })?;
            let chain = match row.head {
                Some(h) => crate::chain::chain_in(tx, s, h, false)?,
                None => Vec::new(),
            };
            Some(chain.iter().map(|n| n.stored.seq).collect())
        }
        _ => None,
    };
    let cursor = tx.search_cursor()?;
    let wanted = |seq: u64| on_branch.as_ref().is_none_or(|set| set.contains(&seq));
    let mut found: Vec<(u64, f64)> = tx
        .search_match(&IndexQuery {
            query: &req.query,
            session: req.session.as_ref(),
            agent: req.agent.as_deref(),
            filter: &req.filter,
            limit: on_branch.is_none().then_some(MAX_MATCHES + 1),
        })?
        .into_iter()
        .filter(|(seq, _)| wanted(*seq))
        .take(MAX_MATCHES + 1)
        .collect();
    // The tail the index does not hold yet, listed after the indexed hits.
    let (tail, scanned) = scan_tail(tx, req, cursor, &wanted)?;
    found.extend(tail.into_iter().map(|(seq, score)| (seq, score as f64)));
    let exact = found.len() <= MAX_MATCHES;
    found.truncate(MAX_MATCHES);
    let (kept, resent) = once::fold(tx, &req.query, found)?;
    let total = kept.len();
    let mut hits = Vec::new();
    for k in kept.into_iter().skip(req.offset).take(req.limit) {
        // A payload removed since it was indexed no longer matches.
        let Some(payload) = tx.blob(&k.node.node.payload)? else {
            continue;
        };
        let (branches, turn) = timelines.place(tx, &k.node)?;
        hits.push(SearchHit {
            snippet: snippet(&payload, &req.query),
            node: k.node,
            payload,
            score: k.score,
            branches,
            turn,
        });
    }
    Ok(SearchResults {
        hits,
        indexed: cursor,
        scanned,
        total,
        exact,
        offset: req.offset,
        resent,
    })
}

/// The nodes past the index's cursor that match, best first, and how many
/// were read.
fn scan_tail(
    tx: &mut dyn Tx,
    req: &SearchRequest,
    cursor: u64,
    wanted: &dyn Fn(u64) -> bool,
) -> Result<(Vec<(u64, u64)>, u64)> {
    let mut scanned = 0;
    let mut tail = Vec::new();
    let mut agents: HashMap<SessionId, bool> = HashMap::new();
    let mut after = cursor;
    loop {
        let page = tx.nodes_since(after, 1000)?;
        let Some(last) = page.last().map(|n| n.seq) else {
            break;
        };
        after = last;
        for n in page {
            scanned += 1;
            if req.session.as_ref().is_some_and(|s| *s != n.node.session)
                || !req.filter.matches(&n)
                || !wanted(n.seq)
            {
                continue;
            }
            if let Some(a) = &req.agent {
                let s = n.node.session;
                let ok = match agents.get(&s) {
                    Some(ok) => *ok,
                    None => {
                        let ok = tx.session(&s)?.is_some_and(|r| r.agent == *a);
                        agents.insert(s, ok);
                        ok
                    }
                };
                if !ok {
                    continue;
                }
            }
            let Some(p) = tx.blob(&n.node.payload)? else {
                continue;
            };
            if let Some(score) = document(&p).and_then(|d| req.query.score(&d)) {
                tail.push((n.seq, score));
            }
        }
    }
    tail.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    Ok((tail, scanned))
}

/// Per session: for each node on a timeline, the timelines holding it and
/// its turn number on the first of them.
#[derive(Debug, Default)]
struct Timelines {
    sessions: HashMap<SessionId, Placed>,
}

/// How one session's nodes are placed.
#[derive(Debug)]
enum Placed {
    /// The session has one timeline, so every node of it is on it: a
    /// node's turn is its stored one, and nothing needs walking.
    One(BranchName),
    /// Several: each node on a timeline, with the timelines holding it.
    Many(HashMap<NodeHash, Place>),
}

/// The timelines holding a node and its turn number on the first.
type Place = (Vec<BranchName>, Option<usize>);

impl Timelines {
    fn place(&mut self, tx: &mut dyn Tx, n: &StoredNode) -> Result<Place> {
        let s = &n.node.session;
        if !self.sessions.contains_key(s) {
            let mut branches = tx.branches(Some(s))?;
            // `main` first, then open timelines, then sealed ones, by name.
            branches.sort_by(|a, b| {
                (a.name.as_str() != "main", a.sealed, a.name.as_str()).cmp(&(
                    b.name.as_str() != "main",
                    b.sealed,
                    b.name.as_str(),
                ))
            });
            if let [only] = &branches[..]
                && only.head.is_some()
            {
                // Nodes are only ever appended at a timeline's head, and a
                // fork or a promote makes a second timeline: with one
                // timeline, the session's nodes are its chain.
                self.sessions.insert(*s, Placed::One(only.name.clone()));
                return Ok(self.placed(n));
            }
            // Walk each timeline over the session's links (hash, parent,
            // kind): no node row is decoded whole.
            let links = tx.session_links(s)?;
            let mut at: HashMap<NodeHash, Place> = HashMap::new();
            for b in branches {
                let Some(h) = b.head else { continue };
                let chain = crate::chain::walk_chain(s, h, links.len(), |i| {
                    (links[i].hash, links[i].parent)
                })?;
                // Turn numbers are stored with each node (its context).
                for &i in &chain {
                    let t = links[i].turn.and_then(|t| usize::try_from(t).ok());
                    let e = at.entry(links[i].hash).or_insert((Vec::new(), t));
                    e.0.push(b.name.clone());
                }
            }
            self.sessions.insert(*s, Placed::Many(at));
        }
        Ok(self.placed(n))
    }

    fn placed(&self, n: &StoredNode) -> Place {
        match self.sessions.get(&n.node.session) {
            Some(Placed::One(b)) => {
                let link = crate::backend::Link::of(
                    n.hash,
                    n.node.parent,
                    n.node.kind,
                    n.ctx.depth,
                    n.ctx.turn,
                    n.ctx.open,
                );
                (
                    vec![b.clone()],
                    link.turn.and_then(|t| usize::try_from(t).ok()),
                )
            }
            Some(Placed::Many(m)) => m.get(&n.hash).cloned().unwrap_or_default(),
            None => Place::default(),
        }
    }
}

/// A value bound to a placeholder of [`conditions`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Param {
    Text(String),
    Int(i64),
}

/// SQL conditions on the `nodes` row aliased `n` for `q`'s session,
/// agent and filter (each starting with ` AND `), with placeholders
/// `{mark}N` numbered from `first`, and their values. `diag(key)` is the
/// backend's expression for a top-level diagnostics field as text (NULL
/// when absent, `null`, or the diagnostics are not JSON), so the
/// conditions on diagnostics are those of [`NodeFilter::matches`].
pub(crate) fn conditions(
    q: &IndexQuery<'_>,
    mark: char,
    first: usize,
    diag: &dyn Fn(&str) -> String,
) -> (String, Vec<Param>) {
    use crate::filter::{ERROR, FAILURE, MODEL, STATUS};
    let mut sql = String::new();
    let mut params = Vec::new();
    let mut add = |cond: &str, p: Param| {
        params.push(p);
        let n = first + params.len() - 1;
        sql.push_str(&format!(
            " AND {}",
            cond.replace('#', &format!("{mark}{n}"))
        ));
    };
    if let Some(s) = q.session {
        add("n.session = #", Param::Text(s.to_string()));
    }
    if let Some(a) = q.agent {
        add(
            "n.session IN (SELECT id FROM sessions WHERE agent = #)",
            Param::Text(a.to_owned()),
        );
    }
    let f = q.filter;
    if let Some(v) = &f.from {
        add("n.sender = #", Param::Text(v.clone()));
    }
    if let Some(v) = &f.to {
        add("n.recipient = #", Param::Text(v.clone()));
    }
    if let Some(v) = f.since {
        add("n.created_at >= #", Param::Int(v));
    }
    if let Some(v) = f.until {
        add("n.created_at < #", Param::Int(v));
    }
    if let Some(v) = &f.model {
        add(&format!("{} = #", diag(MODEL)), Param::Text(v.clone()));
    }
    if let Some(v) = &f.status {
        add(&format!("{} = #", diag(STATUS)), Param::Text(v.clone()));
    }
    if f.failed {
        // The status's text is three characters, 4 or 5 then two digits.
        let st = diag(STATUS);
        sql.push_str(&format!(
            " AND ({} IS NOT NULL OR {} IS NOT NULL OR (length({st}) = 3 \
             AND substr({st}, 1, 1) IN ('4', '5') \
             AND substr({st}, 2, 1) BETWEEN '0' AND '9' \
             AND substr({st}, 3, 1) BETWEEN '0' AND '9'))",
            diag(ERROR),
            diag(FAILURE),
        ));
    }
    if !f.kinds.is_empty() {
        let codes: Vec<String> = f.kinds.iter().map(|k| k.code().to_string()).collect();
        sql.push_str(&format!(" AND n.kind IN ({})", codes.join(", ")));
    }
    (sql, params)
}

/// The FTS5 query for `q`: each word or phrase quoted, prefixes with
/// `*`, each group in parentheses joined by `OR`, the groups by `AND`, the
/// excluded terms after `NOT`. Words hold only letters and digits, so
/// nothing in them needs escaping.
pub(crate) fn fts5_query(q: &Query) -> String {
    let term = |t: &Term| match t {
        Term::Word(w) => format!("\"{w}\""),
        Term::Prefix(p) => format!("\"{p}\"*"),
        Term::Phrase(p) => format!("\"{}\"", p.join(" ")),
    };
    let any = |ts: &[Term]| {
        let parts: Vec<String> = ts.iter().map(term).collect();
        format!("({})", parts.join(" OR "))
    };
    let all: Vec<String> = q.groups.iter().map(|g| any(g)).collect();
    let mut out = format!("({})", all.join(" AND "));
    if !q.excluded.is_empty() {
        out = format!("{out} NOT {}", any(&q.excluded));
    }
    out
}

/// The PostgreSQL `tsquery` literal for `q`.
pub(crate) fn tsquery(q: &Query) -> String {
    let term = |t: &Term| match t {
        Term::Word(w) => format!("'{w}'"),
        Term::Prefix(p) => format!("'{p}':*"),
        Term::Phrase(p) => format!(
            "({})",
            p.iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" <-> ")
        ),
    };
    let any = |ts: &[Term]| {
        let parts: Vec<String> = ts.iter().map(term).collect();
        format!("({})", parts.join(" | "))
    };
    let mut all: Vec<String> = q.groups.iter().map(|g| any(g)).collect();
    if !q.excluded.is_empty() {
        all.push(format!("!{}", any(&q.excluded)));
    }
    all.join(" & ")
}

/// The PostgreSQL `tsvector` literal for a document's words: each
/// distinct word with its positions (1-based; PostgreSQL keeps at most 256
/// per word and none past 16,383, so neither do we).
pub(crate) fn tsvector(words: &[String]) -> String {
    let mut at: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, w) in words.iter().enumerate().take(16_383) {
        let slot = *index.entry(w.as_str()).or_insert_with(|| {
            at.push((w.as_str(), Vec::new()));
            at.len() - 1
        });
        if at[slot].1.len() < 256 {
            at[slot].1.push(i + 1);
        }
    }
    // Words past position 16,383 are still found, without a position.
    for w in words.iter().skip(16_383) {
        if !index.contains_key(w.as_str()) {
            index.insert(w.as_str(), at.len());
            at.push((w.as_str(), Vec::new()));
        }
    }
    let mut out = String::new();
    for (w, pos) in at {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push('\'');
        out.push_str(w);
        out.push('\'');
        if !pos.is_empty() {
            out.push(':');
            let p: Vec<String> = pos.iter().map(usize::to_string).collect();
            out.push_str(&p.join(","));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(s).unwrap()
    }

    #[test]
    fn words_split_on_anything_but_letters_and_digits() {
        let w: Vec<_> = words("Foo-bar_baz {\"Ünïcode\": 42}")
            .into_iter()
            .map(|w| w.text)
            .collect();
        assert_eq!(w, ["foo", "bar", "baz", "ünïcode", "42"]);
    }

    #[test]
    fn queries_parse_words_prefixes_and_phrases() {
        let terms = |s: &str| q(s).terms().cloned().collect::<Vec<_>>();
        assert_eq!(
            terms(r#"Paris capit* "of France" foo-bar"#),
            vec![
                Term::Word("paris".into()),
                Term::Prefix("capit".into()),
                Term::Phrase(vec!["of".into(), "france".into()]),
                Term::Phrase(vec!["foo".into(), "bar".into()]),
            ]
        );
        assert!(Query::parse("  -- ** \"\" ").is_err());
        assert_eq!(
            terms("\"unterminated"),
            vec![Term::Word("unterminated".into())]
        );
    }

    #[test]
    fn or_joins_terms_and_a_dash_excludes_one() {
        let w = |s: &str| Term::Word(s.into());
        let x = q(r#"paris OR rome capital -weather -"of france" OR"#);
        assert_eq!(
            x.groups,
            vec![vec![w("paris"), w("rome")], vec![w("capital")]]
        );
        assert_eq!(
            x.excluded,
            vec![
                w("weather"),
                Term::Phrase(vec!["of".into(), "france".into()])
            ]
        );
        // `or` in lowercase is a word; a leading OR joins nothing.
        assert_eq!(
            q("OR a or b").groups,
            vec![vec![w("a")], vec![w("or")], vec![w("b")]]
        );
        let only = Query::parse("-paris").unwrap_err().to_string();
        assert!(only.contains("only excludes"), "{only}");
        let d = document(b"rome is the capital").unwrap();
        assert_eq!(x.score(&d), Some(2));
        assert_eq!(q("paris OR london").score(&d), None);
        assert_eq!(q("capital -rome").score(&d), None);
    }

    #[test]
    fn score_needs_every_term() {
        let d = document(b"the capital of France is Paris, capital city").unwrap();
        assert_eq!(q("capital paris").score(&d), Some(3));
        assert_eq!(q("capital london").score(&d), None);
        assert_eq!(q("\"of france\" capit*").score(&d), Some(3));
        assert_eq!(q("\"france of\"").score(&d), None);
    }

    #[test]
    fn backend_queries_quote_every_word() {
        let t = q(r#"paris capit* "of france""#);
        assert_eq!(
            fts5_query(&t),
            r#"(("paris") AND ("capit"*) AND ("of france"))"#
        );
        assert_eq!(
            tsquery(&t),
            "('paris') & ('capit':*) & (('of' <-> 'france'))"
        );
        let t = q("a OR b c -d -e");
        assert_eq!(
            fts5_query(&t),
            r#"(("a" OR "b") AND ("c")) NOT ("d" OR "e")"#
        );
        assert_eq!(tsquery(&t), "('a' | 'b') & ('c') & !('d' | 'e')");
        let d = document(b"a b a").unwrap();
        assert_eq!(tsvector(&d), "'a':1,3 'b':2");
    }

    #[test]
    fn binary_and_wordless_payloads_are_not_documents() {
        assert_eq!(document(&[0xff, 0xfe, b'a']), None);
        assert_eq!(document(b"  --  "), None);
        let long = "x".repeat(MAX_WORD_BYTES + 1);
        assert_eq!(document(format!("{long} ok").as_bytes()).unwrap(), ["ok"]);
    }

    #[test]
    fn snippet_marks_matches_around_the_first_one() {
        let text = format!(
            "{} The capital\nof France is Paris. {}",
            "a ".repeat(100),
            "b ".repeat(200)
        );
        let s = snippet(text.as_bytes(), &q("paris capital"));
        assert!(
            s.text.starts_with('…') && s.text.ends_with('…'),
            "{}",
            s.text
        );
        let marked: Vec<_> = s.marks.iter().map(|&(a, b)| &s.text[a..b]).collect();
        assert_eq!(marked, ["capital", "Paris"]);
        assert!(
            s.text.contains("capital of France"),
            "line breaks become spaces"
        );
        assert!(snippet(&[0xff], &q("x")).text.contains("binary"));
    }
}
