//! Layout `dag`: one commit per node, an accumulated tree of message
//! directories, timelines as `refs/heads/{session}/{branch}`.
//!
//! Each commit's tree holds every message directory of its timeline so far
//! plus the new one, `{YYYYMMDD-HHMMSS.mmm}-{sender}-{kind}` (`-2`, `-3`… on
//! a collision within its group), and `agent.toml`. Message directories are
//! grouped by their position in the timeline (1-based): the n-th message
//! lives in `{group of 10,000}/{group of 100}/`, e.g.
//! `000001-010000/000101-000200/20261123-101500.250-cli-invoke/`, so a new
//! commit writes one new group of 100 and one new group of 10,000 (at most
//! ~100 entries each) and a root of one entry per 10,000 messages, instead
//! of a root that lists every earlier message. Names are zero-padded to six
//! digits (wider past 999,999 messages), so a checkout lists the groups,
//! and the messages in each, in timeline order. A message directory
//! holds one file per field: `kind`, `from`, `to`, `session`, `node`,
//! `created_at` and, when present, `parent`, `submission`, `sequence`,
//! `state`, `branch`, `sealed_as` as text with a final newline; `payload` as
//! the raw bytes; `diagnostics.toml` when the diagnostics are not empty.
//! The commit subject is `{kind}: {from} → {to}`, followed by the trailers
//! `Session:`, `Submission:`, `State:` (complete nodes that carry one) and
//! `Node:`. Author and committer are the sender at the node's time, so the
//! same store always gives the same commit ids.

use crate::names;
use crate::pack::{Pending, read, serialize};
use crate::{Error, Result};
use convo_core::{Kind, Node, NodeHash};
use convo_store::Cause;
use convo_store::SessionRow;
use gix::ObjectId;
use gix::bstr::BString;
use gix::objs::tree::{Entry, EntryKind};
use std::sync::Arc;

/// Messages per innermost group.
pub const LEAF: u64 = 100;
/// Messages per outer group.
pub const GROUP: u64 = 10_000;
/// The latest commit time git accepts everywhere: 9999-12-31T23:59:59Z.
pub const MAX_GIT_SECONDS: i64 = 253_402_300_799;

pub fn stamp(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y%m%d-%H%M%S%.3f").to_string(),
        Err(_) => format!("{ms}"),
    }
}

pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => format!("{ms}"),
    }
}

/// Diagnostics as TOML. TOML has no null: nulls become the string "null".
pub fn diagnostics_toml(json: &serde_json::Value) -> String {
    fn strip(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Null => serde_json::Value::String("null".into()),
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(strip).collect()),
            serde_json::Value::Object(o) => {
                serde_json::Value::Object(o.iter().map(|(k, v)| (k.clone(), strip(v))).collect())
            }
            other => other.clone(),
        }
    }
    toml::to_string(&strip(json)).unwrap_or_else(|e| format!("# not representable as TOML: {e}\n"))
}

/// git's tree order: names compared bytewise, a tree as if it ended in `/`.
pub fn sort_entries(entries: &mut [Entry]) {
    entries.sort_by(|a, b| {
        let key = |e: &Entry| {
            let mut k = e.filename.to_vec();
            if e.mode.is_tree() {
                k.push(b'/');
            }
            k
        };
        key(a).cmp(&key(b))
    });
}

fn file(p: &mut Pending, name: &str, data: &[u8]) -> Result<Entry> {
    Ok(Entry {
        mode: EntryKind::Blob.into(),
        filename: name.into(),
        oid: p.blob(data)?,
    })
}

/// The message directory of one node.
pub fn message_tree(
    p: &mut Pending,
    hash: &NodeHash,
    n: &Node,
    payload: &[u8],
) -> Result<ObjectId> {
    let line = |s: String| format!("{s}\n").into_bytes();
    let mut e = vec![
        file(p, "kind", &line(n.kind.to_string()))?,
        file(p, "from", &line(n.from.clone()))?,
        file(p, "to", &line(n.to.clone()))?,
        file(p, "session", &line(n.session.to_string()))?,
        file(p, "node", &line(hash.to_hex()))?,
        file(p, "created_at", &line(rfc3339(n.created_at)))?,
        file(p, "payload", payload)?,
    ];
    if let Some(x) = n.parent {
        e.push(file(p, "parent", &line(x.to_hex()))?);
    }
    if let Some(x) = n.submission {
        e.push(file(p, "submission", &line(x.to_hex()))?);
    }
    if let Some(x) = n.sequence {
        e.push(file(p, "sequence", &line(x.to_string()))?);
    }
    if let Some(x) = n.state {
        e.push(file(p, "state", &line(x.to_hex()))?);
    }
    if let Some(ev) = &n.event {
        e.push(file(p, "branch", &line(ev.branch.to_string()))?);
        if let Some(s) = &ev.sealed_as {
            e.push(file(p, "sealed_as", &line(s.to_string()))?);
        }
    }
    if n.diagnostics.as_str() != "{}" {
        e.push(file(
            p,
            "diagnostics.toml",
            diagnostics_toml(&n.diagnostics.to_value()).as_bytes(),
        )?);
    }
    sort_entries(&mut e);
    p.write(&gix::objs::Tree { entries: e })
}

fn agent_toml(s: &SessionRow) -> String {
    let mut t = toml::Table::new();
    t.insert("name".into(), toml::Value::String(s.agent.clone()));
    t.insert("session".into(), toml::Value::String(s.id.to_string()));
    if let Some(title) = &s.title {
        t.insert("title".into(), toml::Value::String(title.clone()));
    }
    toml::to_string(&t).unwrap_or_default()
}

/// The subject and trailers of a node's commit.
pub fn message(hash: &NodeHash, n: &Node) -> String {
    let mut m = format!(
        "{}: {} → {}\n\nSession: {}\n",
        n.kind,
        names::one_line(&n.from),
        names::one_line(&n.to),
        n.session
    );
    if let Some(s) = n.submission {
        m.push_str(&format!("Submission: {s}\n"));
    }
    if let (Kind::Complete, Some(st)) = (n.kind, n.state) {
        m.push_str(&format!("State: {st}\n"));
    }
    m.push_str(&time_trailer(n.created_at));
    m.push_str(&format!("Node: {hash}\n"));
    m
}

/// The commit time git is given for a node's time: seconds, clamped to
/// 1970..=9999 (git rejects negative dates; `fsck` flags `badDate`).
pub fn git_seconds(ms: i64) -> i64 {
    ms.div_euclid(1000).clamp(0, MAX_GIT_SECONDS)
}

/// `Time: {exact}\n` when the commit date had to be clamped, else nothing.
pub fn time_trailer(ms: i64) -> String {
    if git_seconds(ms) == ms.div_euclid(1000) {
        String::new()
    } else {
        format!("Time: {}\n", rfc3339(ms))
    }
}

/// The node's time from a commit: its `Time:` trailer, else its author date.
pub fn commit_ms(c: &gix::objs::CommitRef<'_>) -> Option<i64> {
    use gix::bstr::ByteSlice;
    for line in c.message.lines() {
        if let Some(t) = line.strip_prefix(b"Time: ") {
            let t = std::str::from_utf8(t).ok()?;
            return match t.parse::<jiff::Timestamp>() {
                Ok(ts) => Some(ts.as_millisecond()),
                Err(_) => t.parse().ok(),
            };
        }
    }
    Some(c.author().ok()?.time().ok()?.seconds * 1000)
}

pub fn signature(who: &str, ms: i64) -> gix::actor::Signature {
    gix::actor::Signature {
        name: names::ident_name(who).into(),
        email: format!("{}@convo.invalid", names::component(who)).into(),
        time: gix::date::Time {
            seconds: git_seconds(ms),
            offset: 0,
        },
    }
}

/// The groups of the `pos`-th message (1-based): (outer, inner).
pub fn groups(pos: u64) -> (String, String) {
    let i = pos.saturating_sub(1);
    let g = i / GROUP * GROUP;
    let l = i / LEAF * LEAF;
    (
        format!("{:06}-{:06}", g + 1, g + GROUP),
        format!("{:06}-{:06}", l + 1, l + LEAF),
    )
}

/// A tree object: its id, its data and its entries.
struct TreeData {
    id: ObjectId,
    data: Arc<[u8]>,
    entries: Vec<Entry>,
}

fn parse_tree(id: ObjectId, data: Arc<[u8]>) -> Result<TreeData> {
    let entries = gix::objs::TreeRef::from_bytes(&data, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(Cause::with_context(format!("tree {id}"), e)))?
        .entries
        .into_iter()
        .map(|e| Entry {
            mode: e.mode,
            filename: e.filename.to_owned(),
            oid: e.oid.to_owned(),
        })
        .collect();
    Ok(TreeData { id, data, entries })
}

fn load(p: &mut Pending, repo: &gix::Repository, id: ObjectId) -> Result<TreeData> {
    parse_tree(id, read(p, repo, &id)?)
}

/// The subtree `name` of `parent`, if any.
fn subtree(
    p: &mut Pending,
    repo: &gix::Repository,
    parent: Option<&TreeData>,
    name: &str,
) -> Result<Option<TreeData>> {
    let Some(t) = parent else { return Ok(None) };
    match t.entries.iter().find(|e| e.filename == name.as_bytes()) {
        Some(e) if e.mode.is_tree() => Ok(Some(load(p, repo, e.oid)?)),
        Some(_) => Err(Error::corrupt(format!(
            "{name} in tree {} is not a tree",
            t.id
        ))),
        None => Ok(None),
    }
}

fn upsert(entries: &mut Vec<Entry>, e: Entry) {
    match entries.iter_mut().find(|x| x.filename == e.filename) {
        Some(x) => *x = e,
        None => entries.push(e),
    }
}

/// Writes `entries` as a tree, as a delta against `old` when it pays.
fn write_tree(
    p: &mut Pending,
    mut entries: Vec<Entry>,
    old: Option<&TreeData>,
) -> Result<ObjectId> {
    sort_entries(&mut entries);
    let data = serialize(&gix::objs::Tree { entries })?;
    p.add_based(
        gix::objs::Kind::Tree,
        data,
        old.map(|o| (&o.id, &o.data[..])),
    )
}

/// Builds the commit for `n`, the `pos`-th message of its timeline, on top
/// of `parent` (commit and root tree). Returns (commit, root tree).
#[allow(clippy::too_many_arguments)]
pub fn commit(
    p: &mut Pending,
    repo: &gix::Repository,
    parent: Option<(ObjectId, ObjectId)>,
    pos: u64,
    session: &SessionRow,
    hash: &NodeHash,
    n: &Node,
    payload: &[u8],
) -> Result<(ObjectId, ObjectId)> {
    let root = match parent {
        Some((_, t)) => Some(load(p, repo, t)?),
        None => None,
    };
    let (outer, inner) = groups(pos);
    let group = subtree(p, repo, root.as_ref(), &outer)?;
    let leaf = subtree(p, repo, group.as_ref(), &inner)?;
    let mut entries = leaf.as_ref().map(|t| t.entries.clone()).unwrap_or_default();
    let base = format!(
        "{}-{}-{}",
        stamp(n.created_at),
        names::component(&n.from),
        n.kind
    );
    let mut name = base.clone();
    let mut k = 2;
    while entries.iter().any(|e| e.filename == name.as_bytes()) {
        name = format!("{base}-{k}");
        k += 1;
    }
    let dir = message_tree(p, hash, n, payload)?;
    entries.push(Entry {
        mode: EntryKind::Tree.into(),
        filename: name.into(),
        oid: dir,
    });
    let leaf_id = write_tree(p, entries, leaf.as_ref())?;
    let mut entries = group
        .as_ref()
        .map(|t| t.entries.clone())
        .unwrap_or_default();
    upsert(
        &mut entries,
        Entry {
            mode: EntryKind::Tree.into(),
            filename: inner.into(),
            oid: leaf_id,
        },
    );
    let group_id = write_tree(p, entries, group.as_ref())?;
    let mut entries = root.as_ref().map(|t| t.entries.clone()).unwrap_or_default();
    upsert(
        &mut entries,
        Entry {
            mode: EntryKind::Tree.into(),
            filename: outer.into(),
            oid: group_id,
        },
    );
    upsert(
        &mut entries,
        file(p, "agent.toml", agent_toml(session).as_bytes())?,
    );
    let tree = write_tree(p, entries, root.as_ref())?;
    let sig = signature(&n.from, n.created_at);
    let c = gix::objs::Commit {
        tree,
        parents: parent.map(|(c, _)| c).into_iter().collect(),
        author: sig.clone(),
        committer: sig,
        encoding: None,
        message: BString::from(message(hash, n)),
        extra_headers: Vec::new(),
    };
    Ok((p.write(&c)?, tree))
}

/// Whether the root tree `root` holds message directory `dir` at the
/// place of the `pos`-th message.
pub fn holds(
    p: &mut Pending,
    repo: &gix::Repository,
    root: ObjectId,
    pos: u64,
    dir: ObjectId,
) -> Result<bool> {
    let (outer, inner) = groups(pos);
    let root = load(p, repo, root)?;
    let group = subtree(p, repo, Some(&root), &outer)?;
    let leaf = subtree(p, repo, group.as_ref(), &inner)?;
    Ok(leaf.is_some_and(|l| l.entries.iter().any(|e| e.oid == dir)))
}
