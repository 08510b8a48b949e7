//! Layout `sessions` (seed 000): one JSON file per session,
//! `{YYYY-MM-DDTHH-MM-SSZ}_{agent}_{short_id}.json`, holding
//! `{open, session, agent, history}`; one `user` commit per input (trailer
//! `Session:`) and one `agent` commit per answer (trailers `Session:`,
//! `Submission:` = the user commit's SHA, `State:` when the answer carries
//! one). Requests and responses make no commit. Forks are branches
//! `fork-{short_sha}` of the fork point's commit (`-2`, `-3`… when several
//! forks share it); promote renames refs as the store did.

use crate::dag::{signature, sort_entries};
use crate::names;
use crate::odb::{Pending, read};
use crate::state::Rec;
use crate::{Error, Result};
use convo_core::{Kind, Node};
use convo_store::SessionRow;
use gix::ObjectId;
use gix::objs::tree::{Entry, EntryKind};
use serde::{Deserialize, Serialize};

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

/// The session file in the tree of `commit`.
fn read_file(
    p: &Pending,
    repo: &gix::Repository,
    commit: ObjectId,
    name: &str,
) -> Result<SessionFile> {
    let c = read(p, repo, &commit)?;
    let c = gix::objs::CommitRef::from_bytes(&c, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(format!("commit {commit}: {e}")))?;
    let tree = read(p, repo, &c.tree())?;
    let tree = gix::objs::TreeRef::from_bytes(&tree, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    let entry = tree
        .entries
        .iter()
        .find(|e| e.filename == name.as_bytes())
        .ok_or_else(|| Error::Corrupt(format!("commit {commit} has no {name}")))?;
    let blob = read(p, repo, &entry.oid.to_owned())?;
    serde_json::from_slice(&blob).map_err(|e| Error::Corrupt(format!("{name} in {commit}: {e}")))
}

fn commit_time(p: &Pending, repo: &gix::Repository, commit: ObjectId) -> Result<i64> {
    let c = read(p, repo, &commit)?;
    let c = gix::objs::CommitRef::from_bytes(&c, gix::hash::Kind::Sha1)
        .map_err(|e| Error::Corrupt(format!("commit {commit}: {e}")))?;
    let a = c
        .author()
        .map_err(|e| Error::Corrupt(format!("commit {commit}: {e}")))?;
    let t = a
        .time()
        .map_err(|e| Error::Corrupt(format!("commit {commit}: {e}")))?;
    Ok(t.seconds * 1000)
}

/// Projects one node. Returns the record for the node: the timeline's
/// latest commit and latest user commit after it.
pub fn project(
    p: &mut Pending,
    repo: &gix::Repository,
    parent: Rec,
    session: &SessionRow,
    n: &Node,
    payload: &[u8],
) -> Result<Rec> {
    let name = file_name(session);
    let mut file = match parent.commit {
        Some(c) => read_file(p, repo, c, &name)?,
        None => SessionFile {
            open: None,
            session: session.id.to_string(),
            agent: session.agent.clone(),
            history: Vec::new(),
        },
    };
    let body = text(payload);
    let (message, user_commit) = match n.kind {
        Kind::Invoke => {
            file.open = Some(body.clone());
            (format!("user\n\n{body}\n\nSession: {}\n", session.id), None)
        }
        Kind::Complete => {
            let user = parent.aux.ok_or_else(|| {
                Error::Corrupt(format!(
                    "a complete in {} has no user commit before it",
                    session.id
                ))
            })?;
            let user_at = commit_time(p, repo, user)?;
            file.history.push(HistoryEntry::User {
                user: file.open.take().unwrap_or_default(),
                submission: user.to_string(),
                at: at(user_at),
            });
            file.history.push(HistoryEntry::Agent {
                agent: body.clone(),
                at: at(n.created_at),
            });
            let mut m = format!(
                "agent\n\n{body}\n\nSession: {}\nSubmission: {user}\n",
                session.id
            );
            if let Some(st) = n.state {
                m.push_str(&format!("State: {st}\n"));
            }
            (m, Some(user))
        }
        _ => return Ok(parent),
    };
    let json =
        serde_json::to_string_pretty(&file).map_err(|e| Error::Corrupt(e.to_string()))? + "\n";
    let mut entries = vec![Entry {
        mode: EntryKind::Blob.into(),
        filename: name.into(),
        oid: p.blob(json.as_bytes())?,
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
    Ok(Rec {
        commit: Some(id),
        aux: Some(user_commit.unwrap_or(id)),
    })
}
