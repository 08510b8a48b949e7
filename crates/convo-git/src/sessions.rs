//! Layout `sessions` (seed 000): one JSON file per session,
//! `{YYYY-MM-DDTHH-MM-SSZ}_{agent}_{short_id}.json`, holding
//! `{open, session, agent, history}`; one `user` commit per input (trailer
//! `Session:`) and one `agent` commit per answer (trailers `Session:`,
//! `Submission:` = the user commit's SHA, `State:` when the answer carries
//! one). Requests and responses make no commit. Forks are branches
//! `fork-{short_sha}` of the fork point's commit (`-2`, `-3`… when several
//! forks share it); promote renames refs as the store did.
//!
//! The file is the whole history, so each commit's blob is as long as its
//! session so far: hashing it is inherent to the schema. Everything else is
//! kept proportional to the one new entry: the file of each timeline's tip
//! is kept in memory already serialized (entries are appended, never
//! re-rendered or re-parsed), and the blob is stored as a delta against the
//! previous version (see [`crate::pack`]).

use crate::dag::{commit_ms, signature, sort_entries, time_trailer};
use crate::names;
use crate::pack::{Pending, read};
use crate::state::Rec;
use crate::{Error, Result};
use convo_core::{Kind, Node};
use convo_store::Cause;
use convo_store::SessionRow;
use gix::ObjectId;
use gix::objs::tree::{Entry, EntryKind};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct SessionFile {
    pub open: Option<String>,
    pub session: String,
    pub agent: String,
    pub history: Vec<HistoryEntry>,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub enum HistoryEntry {
    User {
        user: String,
        submission: String,
        at: String,
    },
    Agent {
        agent: String,
        at: String,
    },
}

pub fn file_name(s: &SessionRow) -> String {
    let dt = jiff::Timestamp::from_millisecond(s.created_at)
        .map(|t| t.strftime("%Y-%m-%dT%H-%M-%SZ").to_string())
        .unwrap_or_else(|_| "0000-00-00T00-00-00Z".into());
    format!("{dt}_{}_{}.json", names::component(&s.agent), s.id.short())
}

fn at(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn text(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload).replace('\0', "\u{FFFD}")
}

fn json(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A session file as of one commit, ready to be extended.
#[derive(Clone, Debug, Default)]
pub struct FileState {
    open: Option<String>,
    /// The history entries, rendered as in the file, joined by `,\n`.
    history: Vec<u8>,
    /// The time of the pending user commit (`open` is its text).
    user_ms: Option<i64>,
    /// Earlier versions of the file kept as delta bases: (version number,
    /// blob, bytes). See [`FileState::base`].
    versions: Vec<(u64, ObjectId, Arc<[u8]>)>,
    /// The number of the latest version (0: the file as loaded, or none).
    n: u64,
}

impl FileState {
    fn bytes(&self) -> usize {
        self.history.len() + self.versions.iter().map(|v| v.2.len()).sum::<usize>() + 64
    }

    /// The delta base of version `n`: version `n & (n - 1)` (`n` with its
    /// lowest set bit cleared). Every version then has at most log2(n)
    /// deltas to resolve (git stops chains at 50, and a chain through each
    /// previous version stored the file whole every 50 versions: a
    /// repository quadratic in the session's length), and the deltas add
    /// up to O(n log n) history entries.
    fn base(&self, n: u64) -> Option<(&ObjectId, &[u8])> {
        let want = n & n.wrapping_sub(1);
        self.versions
            .iter()
            .find(|v| v.0 == want)
            .or_else(|| self.versions.last())
            .map(|v| (&v.1, &v.2[..]))
    }

    /// Records version `n`, keeping only the versions later ones use as
    /// bases: `n` with its lowest set bits cleared one by one.
    fn keep(&mut self, n: u64, id: ObjectId, data: Arc<[u8]>) {
        self.versions.push((n, id, data));
        let mut needed = vec![n];
        let mut k = n;
        while k != 0 {
            k &= k - 1;
            needed.push(k);
        }
        self.versions.retain(|v| needed.contains(&v.0));
        self.n = n;
    }

    fn push(&mut self, e: &HistoryEntry) -> Result<()> {
        let one =
            serde_json::to_string_pretty(e).map_err(|e| Error::Corrupt(Cause::from_error(e)))?;
        if !self.history.is_empty() {
            self.history.extend_from_slice(b",\n");
        }
        for (i, line) in one.lines().enumerate() {
            if i > 0 {
                self.history.push(b'\n');
            }
            self.history.extend_from_slice(b"    ");
            self.history.extend_from_slice(line.as_bytes());
        }
        Ok(())
    }

    /// The file, byte for byte what `serde_json::to_string_pretty` of a
    /// [`SessionFile`] gives, plus a final newline.
    fn render(&self, session: &SessionRow) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.history.len() + 256);
        out.extend_from_slice(b"{\n  \"open\": ");
        match &self.open {
            Some(o) => out.extend_from_slice(json(o).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\n  \"session\": ");
        out.extend_from_slice(json(&session.id.to_string()).as_bytes());
        out.extend_from_slice(b",\n  \"agent\": ");
        out.extend_from_slice(json(&session.agent).as_bytes());
        out.extend_from_slice(b",\n  \"history\": ");
        if self.history.is_empty() {
            out.extend_from_slice(b"[]");
        } else {
            out.extend_from_slice(b"[\n");
            out.extend_from_slice(&self.history);
            out.extend_from_slice(b"\n  ]");
        }
        out.extend_from_slice(b"\n}\n");
        out
    }
}

/// The files of recent commits (timeline tips, mostly), by commit id.
#[derive(Debug, Default)]
pub struct Cache {
    files: HashMap<ObjectId, FileState>,
    order: VecDeque<ObjectId>,
    bytes: usize,
}

const CACHE_BYTES: usize = 256 << 20;

impl Cache {
    fn take(&mut self, c: &ObjectId) -> Option<FileState> {
        let f = self.files.remove(c)?;
        self.bytes -= f.bytes();
        Some(f)
    }

    fn put(&mut self, c: ObjectId, f: FileState) {
        self.bytes += f.bytes();
        if let Some(old) = self.files.insert(c, f) {
            self.bytes -= old.bytes();
        } else {
            self.order.push_back(c);
        }
        while self.bytes > CACHE_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(f) = self.files.remove(&old) {
                self.bytes -= f.bytes();
            }
        }
        if self.order.len() > 4 * self.files.len() + 64 {
            self.order.retain(|c| self.files.contains_key(c));
        }
    }
}

/// The session file in the tree of `commit`, parsed (a cache miss: a fork
/// from an earlier commit, or the first node of a sync).
fn load(
    p: &mut Pending,
    repo: &gix::Repository,
    commit: ObjectId,
    name: &str,
) -> Result<FileState> {
    let c = read(p, repo, &commit)?;
    let c = gix::objs::CommitRef::from_bytes(&c, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(Cause::with_context(format!("commit {commit}"), e)))?;
    let tree = read(p, repo, &c.tree())?;
    let tree = gix::objs::TreeRef::from_bytes(&tree, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(Cause::from_error(e)))?;
    let entry = tree
        .entries
        .iter()
        .find(|e| e.filename == name.as_bytes())
        .ok_or_else(|| Error::corrupt(format!("commit {commit} has no {name}")))?;
    let id = entry.oid.to_owned();
    let blob = read(p, repo, &id)?;
    let file: SessionFile = serde_json::from_slice(&blob)
        .map_err(|e| Error::Corrupt(Cause::with_context(format!("{name} in {commit}"), e)))?;
    let mut st = FileState {
        open: file.open,
        history: Vec::new(),
        user_ms: None,
        versions: vec![(0, id, blob)],
        n: 0,
    };
    for e in &file.history {
        st.push(e)?;
    }
    Ok(st)
}

fn commit_time(p: &mut Pending, repo: &gix::Repository, commit: ObjectId) -> Result<i64> {
    let c = read(p, repo, &commit)?;
    let c = gix::objs::CommitRef::from_bytes(&c, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(Cause::with_context(format!("commit {commit}"), e)))?;
    commit_ms(&c).ok_or_else(|| Error::corrupt(format!("commit {commit} has no readable date")))
}

/// Projects one node. Returns the record for the node: the timeline's
/// latest commit and latest user commit after it.
pub fn project(
    p: &mut Pending,
    repo: &gix::Repository,
    cache: &mut Cache,
    parent: Rec,
    session: &SessionRow,
    n: &Node,
    payload: &[u8],
) -> Result<Rec> {
    if !matches!(n.kind, Kind::Invoke | Kind::Complete) {
        return Ok(parent);
    }
    let name = file_name(session);
    let mut st = match parent.commit {
        Some(c) => match cache.take(&c) {
            Some(st) => st,
            None => load(p, repo, c, &name)?,
        },
        None => FileState::default(),
    };
    let body = text(payload);
    let (message, user_commit) = if n.kind == Kind::Invoke {
        st.open = Some(body.clone());
        st.user_ms = Some(n.created_at);
        (
            format!(
                "user\n\n{body}\n\nSession: {}\n{}",
                session.id,
                time_trailer(n.created_at)
            ),
            None,
        )
    } else {
        let user = parent.aux.ok_or_else(|| {
            Error::corrupt(format!(
                "a complete in {} has no user commit before it",
                session.id
            ))
        })?;
        let user_at = match st.user_ms {
            Some(t) => t,
            None => commit_time(p, repo, user)?,
        };
        let open = st.open.take().unwrap_or_default();
        st.user_ms = None;
        st.push(&HistoryEntry::User {
            user: open,
            submission: user.to_string(),
            at: at(user_at),
        })?;
        st.push(&HistoryEntry::Agent {
            agent: body.clone(),
            at: at(n.created_at),
        })?;
        let mut m = format!(
            "agent\n\n{body}\n\nSession: {}\nSubmission: {user}\n",
            session.id
        );
        if let Some(s) = n.state {
            m.push_str(&format!("State: {s}\n"));
        }
        m.push_str(&time_trailer(n.created_at));
        (m, Some(user))
    };
    let data: Arc<[u8]> = st.render(session).into();
    let version = st.n + 1;
    let blob = p.add_based(gix::objs::Kind::Blob, data.clone(), st.base(version))?;
    st.keep(version, blob, data);
    let mut entries = vec![Entry {
        mode: EntryKind::Blob.into(),
        filename: name.into(),
        oid: blob,
    }];
    sort_entries(&mut entries);
    let tree = p.write(&gix::objs::Tree { entries })?;
    let sig = signature(&n.from, n.created_at);
    let c = gix::objs::Commit {
        tree,
        parents: parent.commit.into_iter().collect(),
        author: sig.clone(),
        committer: sig,
        encoding: None,
        message: message.into(),
        extra_headers: Vec::new(),
    };
    let id = p.write(&c)?;
    cache.put(id, st);
    Ok(Rec {
        commit: Some(id),
        aux: Some(user_commit.unwrap_or(id)),
        pos: parent.pos + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_incremental_file_is_what_serde_writes() {
        let row = SessionRow {
            id: convo_core::SessionId::derived(b"x"),
            agent: "a \"quoted\"\nagent".into(),
            title: None,
            created_at: 0,
        };
        let mut st = FileState::default();
        let mut file = SessionFile {
            open: None,
            session: row.id.to_string(),
            agent: row.agent.clone(),
            history: Vec::new(),
        };
        let want = |f: &SessionFile| serde_json::to_string_pretty(f).unwrap() + "\n";
        assert_eq!(String::from_utf8(st.render(&row)).unwrap(), want(&file));
        st.open = Some("q\n\"1\"".into());
        file.open = st.open.clone();
        assert_eq!(String::from_utf8(st.render(&row)).unwrap(), want(&file));
        for e in [
            HistoryEntry::User {
                user: "u".into(),
                submission: "s".into(),
                at: "t".into(),
            },
            HistoryEntry::Agent {
                agent: "multi\nline {\n}".into(),
                at: "t".into(),
            },
        ] {
            st.push(&e).unwrap();
            file.history.push(e);
            assert_eq!(String::from_utf8(st.render(&row)).unwrap(), want(&file));
        }
    }
}
