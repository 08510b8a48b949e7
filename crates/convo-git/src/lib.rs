//! The conversations repository: the store projected into git.
//!
//! A [`Projector`] follows the store's gap-free append cursor and turns each
//! new node into git objects, in one of two layouts ([`Layout`]): `dag`, one
//! commit per node with an accumulated tree (see [`dag`]), or `sessions`, one
//! JSON file per session with `user` / `agent` commits (see [`sessions`]).
//! Each session's timelines are refs `refs/heads/{session}/{branch}`.
//!
//! Objects of a batch are built in memory and written as one pack with its
//! index (gix-pack), never as loose objects; refs move in one gix
//! transaction per batch. Every object is a function of the store alone
//! (authors and times come from the nodes), so a rebuild gives the same
//! commit ids, and a sync killed at any point and run again ends where an
//! uninterrupted one would (see [`state`]). The repository is bare: clone
//! it, or use `git --git-dir`, to look at it.
//!
//! The cost of a commit depends on its own timeline's length, never on the
//! number of sessions: tips, the node→commit map and refs are all keyed.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod dag;
mod names;
mod odb;
pub mod sessions;
mod state;

use convo_core::{Kind, NodeHash, SessionId};
use convo_store::{SessionRow, Store, StoreError};
use odb::{Pending, RefChange};
use state::{Bookkeeping, Rec, Tip};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use names::component as safe_component;

/// Everything that can go wrong projecting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// git object or ref handling failed.
    #[error("git: {0}")]
    Git(String),
    /// A file could not be read or written.
    #[error("{0}")]
    Io(String),
    /// The repository or its bookkeeping is not what convo wrote.
    #[error("the projection is inconsistent: {0}")]
    Corrupt(String),
    /// A directory convo did not create.
    #[error("{0} exists and is not a convo projection")]
    NotProjection(String),
    /// `--layout` differs from the repository's.
    #[error("{path} holds the `{found}` layout, not `{asked}`")]
    LayoutMismatch {
        /// The repository.
        path: String,
        /// Its layout.
        found: String,
        /// The layout asked for.
        asked: String,
    },
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the store is laid out in git.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One commit per node, accumulated message directories.
    Dag,
    /// One JSON file per session, `user` / `agent` commits.
    Sessions,
}

impl Layout {
    /// `dag` or `sessions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Dag => "dag",
            Layout::Sessions => "sessions",
        }
    }
    /// Parses `dag` or `sessions`.
    pub fn parse(s: &str) -> Option<Layout> {
        match s.trim() {
            "dag" => Some(Layout::Dag),
            "sessions" => Some(Layout::Sessions),
            _ => None,
        }
    }
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Nodes projected.
    pub nodes: u64,
    /// Commits written.
    pub commits: u64,
    /// The follow cursor after the sync.
    pub cursor: u64,
}

/// A projection of the store into one repository.
pub struct Projector {
    repo: gix::Repository,
    path: PathBuf,
    layout: Layout,
    book: Bookkeeping,
    sessions: HashMap<SessionId, SessionRow>,
    /// Nodes per batch (one pack, one ref transaction, one bookkeeping save).
    pub batch: usize,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Projector({}, {})",
            self.path.display(),
            self.layout.as_str()
        )
    }
}

fn refname(s: &SessionId, branch: &str) -> String {
    format!("refs/heads/{s}/{branch}")
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(format!("{}: {e}", path.display()))
}

impl Projector {
    /// Opens the projection at `path`, creating a bare repository if it
    /// does not exist. With `rebuild`, an existing projection is removed
    /// first (never a directory convo did not create).
    pub fn open(path: &Path, layout: Option<Layout>, rebuild: bool) -> Result<Projector> {
        let marker = path.join("convo").join("layout");
        let exists = path.exists()
            && std::fs::read_dir(path)
                .map_err(|e| io(path, e))?
                .next()
                .is_some();
        if exists && !marker.exists() {
            return Err(Error::NotProjection(path.display().to_string()));
        }
        if exists && rebuild {
            std::fs::remove_dir_all(path).map_err(|e| io(path, e))?;
        }
        let repo = if marker.exists() {
            gix::open(path).map_err(|e| Error::Git(format!("opening {}: {e}", path.display())))?
        } else {
            let repo = gix::init_bare(path)
                .map_err(|e| Error::Git(format!("creating {}: {e}", path.display())))?;
            std::fs::create_dir_all(path.join("convo")).map_err(|e| io(path, e))?;
            std::fs::write(
                &marker,
                format!("{}\n", layout.unwrap_or(Layout::Dag).as_str()),
            )
            .map_err(|e| io(&marker, e))?;
            repo
        };
        let text = std::fs::read_to_string(&marker).map_err(|e| io(&marker, e))?;
        let found = Layout::parse(&text).ok_or_else(|| {
            Error::Corrupt(format!("{} says `{}`", marker.display(), text.trim()))
        })?;
        if let Some(asked) = layout
            && asked != found
        {
            return Err(Error::LayoutMismatch {
                path: path.display().to_string(),
                found: found.as_str().into(),
                asked: asked.as_str().into(),
            });
        }
        let book = Bookkeeping::load(&path.join("convo"))?;
        Ok(Projector {
            repo,
            path: path.to_owned(),
            layout: found,
            book,
            sessions: HashMap::new(),
            batch: 5000,
        })
    }

    /// The layout of this repository.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The store cursor projected so far.
    pub fn cursor(&self) -> u64 {
        self.book.cursor
    }

    fn session(&mut self, store: &mut Store, id: &SessionId) -> Result<SessionRow> {
        if !self.sessions.contains_key(id) {
            for s in store.sessions()? {
                self.sessions.insert(s.id, s);
            }
        }
        self.sessions.get(id).cloned().ok_or_else(|| {
            Error::Corrupt(format!("session {id} of a stored node is not in the store"))
        })
    }

    /// Projects every node appended since the last sync, in batches;
    /// `progress` is called with the cursor after each batch.
    pub fn sync(&mut self, store: &mut Store, progress: &mut dyn FnMut(u64)) -> Result<SyncReport> {
        let mut report = SyncReport {
            cursor: self.book.cursor,
            ..SyncReport::default()
        };
        loop {
            let page = store.follow_with_payloads(self.book.cursor, self.batch)?;
            let Some(last) = page.last().map(|n| n.stored.seq) else {
                break;
            };
            let mut pending = Pending::new();
            let mut refs = Vec::new();
            let mut head_session = None;
            for n in &page {
                report.commits += self.project(store, &mut pending, &mut refs, n)?;
                head_session = Some(n.stored.node.session);
                report.nodes += 1;
            }
            if let Some(s) = head_session {
                refs.push(RefChange::Head(refname(&s, "main")));
            }
            pending.flush(&self.repo)?;
            odb::apply_refs(&self.repo, refs)?;
            self.book.save(last)?;
            report.cursor = last;
            progress(last);
        }
        Ok(report)
    }

    fn project(
        &mut self,
        store: &mut Store,
        p: &mut Pending,
        refs: &mut Vec<RefChange>,
        n: &convo_store::TimelineNode,
    ) -> Result<u64> {
        let s = &n.stored;
        let node = &s.node;
        let session = self.session(store, &node.session)?;
        let parent = match node.parent {
            None => Rec {
                commit: None,
                aux: None,
            },
            Some(ph) => *self.book.map.get(&ph).ok_or_else(|| {
                Error::Corrupt(format!(
                    "parent {ph} of node {} was never projected",
                    s.hash
                ))
            })?,
        };
        let rec = match self.layout {
            Layout::Dag => {
                let parent_tree = match parent.aux {
                    Some(t) => Some(odb::read(p, &self.repo, &t)?),
                    None => None,
                };
                let pc = parent.commit.zip(parent.aux);
                let (c, t) = dag::commit(
                    p,
                    pc,
                    parent_tree.as_deref(),
                    &session,
                    &s.hash,
                    node,
                    &n.payload,
                )?;
                Rec {
                    commit: Some(c),
                    aux: Some(t),
                }
            }
            Layout::Sessions => {
                sessions::project(p, &self.repo, parent, &session, node, &n.payload)?
            }
        };
        let wrote = u64::from(rec.commit != parent.commit);
        let sid = node.session;
        let (branch, git_name) = match (node.kind, &node.event, node.parent) {
            (Kind::Fork, Some(ev), _) => {
                let git_name = match self.layout {
                    Layout::Dag => ev.branch.to_string(),
                    Layout::Sessions => self.fork_name(&sid, rec.commit, &s.hash),
                };
                (ev.branch.to_string(), git_name)
            }
            (_, _, None) => ("main".to_owned(), "main".to_owned()),
            (kind, ev, Some(ph)) => {
                let tip = self.book.tips.remove(&ph).ok_or_else(|| {
                    Error::Corrupt(format!(
                        "node {} extends {ph}, which is no timeline's tip",
                        s.hash
                    ))
                })?;
                if let (Kind::Promote, Some(ev)) = (kind, ev) {
                    let sealed = ev
                        .sealed_as
                        .as_ref()
                        .map(|b| b.to_string())
                        .unwrap_or_default();
                    let old_main = self
                        .book
                        .tips
                        .values()
                        .find(|t| t.session == sid && t.branch == "main")
                        .map(|t| t.node);
                    if let Some(m) = old_main
                        && let Some(mut t) = self.book.tips.remove(&m)
                    {
                        refs.push(RefChange::Delete(refname(&sid, &t.git_name)));
                        t.branch = sealed.clone();
                        t.git_name = sealed.clone();
                        if let Some(c) = self.book.map.get(&t.node).and_then(|r| r.commit) {
                            refs.push(RefChange::Set(refname(&sid, &sealed), c));
                        }
                        self.book.tips.insert(t.node, t);
                    }
                    refs.push(RefChange::Delete(refname(&sid, &tip.git_name)));
                    ("main".to_owned(), "main".to_owned())
                } else {
                    (tip.branch, tip.git_name)
                }
            }
        };
        if let Some(c) = rec.commit {
            refs.push(RefChange::Set(refname(&sid, &git_name), c));
        }
        self.book.tips.insert(
            s.hash,
            Tip {
                session: sid,
                branch,
                git_name,
                node: s.hash,
            },
        );
        self.book.record(s.seq, s.hash, rec);
        Ok(wrote)
    }

    fn fork_name(&self, sid: &SessionId, commit: Option<gix::ObjectId>, node: &NodeHash) -> String {
        let short = match commit {
            Some(c) => c.to_string()[..7].to_owned(),
            None => node.to_hex()[..7].to_owned(),
        };
        let base = format!("fork-{short}");
        let taken = |n: &str| {
            self.book
                .tips
                .values()
                .any(|t| t.session == *sid && t.git_name == n)
        };
        let mut name = base.clone();
        let mut k = 2;
        while taken(&name) {
            name = format!("{base}-{k}");
            k += 1;
        }
        name
    }

    /// Compares the repository with the store; returns every drift found.
    pub fn verify(&mut self, store: &mut Store) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let mut cursor = 0;
        let mut p = Pending::new();
        loop {
            let page = store.follow_with_payloads(cursor, 2000)?;
            let Some(last) = page.last().map(|n| n.stored.seq) else {
                break;
            };
            for n in &page {
                if let Err(why) = self.verify_node(store, &mut p, n) {
                    problems.push(format!("node {}: {why}", n.stored.hash));
                }
            }
            cursor = last;
        }
        if cursor > self.book.cursor {
            problems.push(format!(
                "{} node(s) appended after cursor {} are not projected yet (run `convo git sync`)",
                cursor - self.book.cursor,
                self.book.cursor
            ));
        }
        for session in store.sessions()? {
            for b in store.branches(&session.id)? {
                let Some(head) = b.head else { continue };
                let object = format!("branch {}/{}", session.id, b.name);
                let Some(tip) = self.book.tips.get(&head) else {
                    problems.push(format!("{object}: its head {head} is not a projected tip"));
                    continue;
                };
                if tip.branch != b.name.as_str() {
                    problems.push(format!("{object}: projected as `{}`", tip.branch));
                }
                let Some(commit) = self.book.map.get(&head).and_then(|r| r.commit) else {
                    continue;
                };
                let name = refname(&session.id, &tip.git_name);
                match self.repo.try_find_reference(name.as_str()) {
                    Ok(Some(mut r)) => match r.peel_to_id() {
                        Ok(id) if id.detach() == commit => {}
                        Ok(id) => {
                            problems.push(format!("{object}: {name} points at {id}, not {commit}"))
                        }
                        Err(e) => problems.push(format!("{object}: {name}: {e}")),
                    },
                    Ok(None) => problems.push(format!("{object}: ref {name} is missing")),
                    Err(e) => problems.push(format!("{object}: {name}: {e}")),
                }
            }
        }
        Ok(problems)
    }

    fn verify_node(
        &mut self,
        store: &mut Store,
        p: &mut Pending,
        n: &convo_store::TimelineNode,
    ) -> std::result::Result<(), String> {
        let s = &n.stored;
        if s.seq > self.book.cursor {
            return Ok(());
        }
        let rec = *self.book.map.get(&s.hash).ok_or("it was never projected")?;
        let Some(commit) = rec.commit else {
            return Ok(());
        };
        let data = self
            .repo
            .find_object(commit)
            .map_err(|e| format!("commit {commit}: {e}"))?
            .data
            .clone();
        let c = gix::objs::CommitRef::from_bytes(&data, gix::hash::Kind::Sha1)
            .map_err(|e| format!("commit {commit}: {e}"))?;
        let message = c.message.to_string();
        match self.layout {
            Layout::Dag => {
                let want = dag::message(&s.hash, &s.node);
                if message != want {
                    return Err(format!(
                        "commit {commit}'s message (subject or trailers) does not match the node"
                    ));
                }
                if Some(c.tree()) != rec.aux {
                    return Err(format!("commit {commit}'s tree is not the one projected"));
                }
                let dir = dag::message_tree(p, &s.hash, &s.node, &n.payload)
                    .map_err(|e| e.to_string())?;
                let tree = self
                    .repo
                    .find_object(c.tree())
                    .map_err(|e| format!("tree {}: {e}", c.tree()))?
                    .data
                    .clone();
                let tree = gix::objs::TreeRef::from_bytes(&tree, gix::hash::Kind::Sha1)
                    .map_err(|e| e.to_string())?;
                if !tree.entries.iter().any(|e| e.oid == dir.as_ref()) {
                    return Err(format!(
                        "commit {commit} lacks the node's message directory (a field or the payload differs)"
                    ));
                }
            }
            Layout::Sessions => {
                if !matches!(s.node.kind, Kind::Invoke | Kind::Complete) {
                    return Ok(());
                }
                let trailer = format!("Session: {}\n", s.node.session);
                let text = String::from_utf8_lossy(&n.payload).replace('\0', "\u{FFFD}");
                if !message.contains(&trailer) || !message.contains(&text) {
                    return Err(format!("commit {commit}'s message does not match the node"));
                }
            }
        }
        let _ = store;
        Ok(())
    }
}
