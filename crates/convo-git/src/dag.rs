//! Layout `dag`: one commit per node, an accumulated tree of message
//! directories, timelines as `refs/heads/{session}/{branch}`.
//!
//! Each commit's tree holds every message directory of its timeline so far
//! plus the new one, `{YYYYMMDD-HHMMSS.mmm}-{sender}-{kind}` (`-2`, `-3`… on
//! a collision within the timeline), and `agent.toml`. A message directory
//! holds one file per field: `kind`, `from`, `to`, `session`, `node`,
//! `created_at` and, when present, `parent`, `submission`, `sequence`,
//! `state`, `branch`, `sealed_as` as text with a final newline; `payload` as
//! the raw bytes; `diagnostics.toml` when the diagnostics are not empty.
//! The commit subject is `{kind}: {from} → {to}`, followed by the trailers
//! `Session:`, `Submission:`, `State:` (complete nodes that carry one) and
//! `Node:`. Author and committer are the sender at the node's time, so the
//! same store always gives the same commit ids.

use crate::names;
use crate::odb::Pending;
use crate::{Error, Result};
use convo_core::{Kind, Node, NodeHash};
use convo_store::SessionRow;
use gix::ObjectId;
use gix::bstr::BString;
use gix::objs::tree::{Entry, EntryKind};

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
    m.push_str(&format!("Node: {hash}\n"));
    m
}

pub fn signature(who: &str, ms: i64) -> gix::actor::Signature {
    gix::actor::Signature {
        name: names::ident_name(who).into(),
        email: format!("{}@convo.invalid", names::component(who)).into(),
        time: gix::date::Time {
            seconds: ms.div_euclid(1000),
            offset: 0,
        },
    }
}

/// Builds the commit for `n` on top of `parent` (commit and root tree).
/// Returns (commit, root tree).
pub fn commit(
    p: &mut Pending,
    parent: Option<(ObjectId, ObjectId)>,
    parent_tree: Option<&[u8]>,
    session: &SessionRow,
    hash: &NodeHash,
    n: &Node,
    payload: &[u8],
) -> Result<(ObjectId, ObjectId)> {
    let mut entries: Vec<Entry> = match parent_tree {
        None => Vec::new(),
        Some(data) => gix::objs::TreeRef::from_bytes(data, gix::hash::Kind::Sha1)
            .map_err(|e| Error::Corrupt(format!("tree of the parent commit: {e}")))?
            .entries
            .into_iter()
            .filter(|e| e.filename != "agent.toml")
            .map(|e| Entry {
                mode: e.mode,
                filename: e.filename.to_owned(),
                oid: e.oid.to_owned(),
            })
            .collect(),
    };
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
    entries.push(file(p, "agent.toml", agent_toml(session).as_bytes())?);
    sort_entries(&mut entries);
    let tree = p.write(&gix::objs::Tree { entries })?;
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
