//! The conversations repository: the store projected into git.
//!
//! A [`Projector`] follows the store's gap-free append cursor and turns each
//! new node into git objects, in one of two layouts ([`Layout`]): `dag`, one
//! commit per node with an accumulated tree (see [`dag`]), or `sessions`, one
//! JSON file per session with `user` / `agent` commits (see [`sessions`]).
//! Each session's timelines are refs `refs/heads/{session}/{branch}`.
//!
//! Objects of a batch are built in memory and written as one pack with its
//! index (see [`pack`]: new versions of trees and session files are deltas
//! against the previous ones), never as loose objects; refs move in one gix
//! transaction per batch; packs are consolidated geometrically (see
//! [`repack`]). Every object is a function of the store alone (authors and
//! times come from the nodes), so a rebuild gives the same commit ids, and
//! a sync killed at any point and run again ends where an uninterrupted one
//! would (see [`state`] and [`lock`]). The repository is bare: clone it, or
//! use `git --git-dir`, to look at it.
//!
//! The cost of a commit does not grow with the number of sessions (tips,
//! the node→commit map and refs are all keyed), nor, in layout `dag`, with
//! its timeline's length beyond the groups of [`dag`]: a commit writes
//! three trees of at most ~100 entries and one message directory.
//!
//! Projecting a store and checking the projection against it (what
//! `convo git sync` and `convo git verify` do):
//!
//! ```
//! use convo_core::{BranchName, Kind};
//! use convo_git::{Layout, Projector};
//! use convo_store::Store;
//! use convo_testutil::draft;
//!
//! let mut store = Store::open("sqlite::memory:")?;
//! let main = BranchName::main();
//! store.transaction(|l| {
//!     let s = l.new_session("agent", Some("trip"), 0)?;
//!     l.append(&s.id, &main, &draft(Kind::Invoke, "Plan a trip", 1))?;
//!     l.append(&s.id, &main, &draft(Kind::Complete, "Paris?", 2))
//! })?;
//! let repo = tempfile::tempdir()?;
//! let mut git = Projector::open(repo.path(), Some(Layout::Dag), false)?;
//! let done = git.sync(&mut store, &mut |_| {})?;
//! assert_eq!((done.nodes, done.commits), (2, 2));
//! assert!(git.verify(&mut store)?.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod checkpoints;
pub mod dag;
mod delta;
pub mod lock;
mod names;
mod odb;
pub mod pack;
pub mod repack;
pub mod sessions;
mod state;

use convo_core::{BranchName, Kind, NodeHash, SessionId, TimelineEvent};
use convo_store::{Cause, ErrorKind, Problem, ProblemKind, SessionRow, Store, StoreError};
use lock::SyncLock;
use odb::RefChange;
use pack::Pending;
use state::{Bookkeeping, Rec, Tip};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The version of the layouts written by this convo, recorded next to the
/// layout's name in `convo/layout` (`dag 2`). Version 1 (written as `dag`
/// or `sessions` alone) kept every message directory in the root tree.
pub const FORMAT: u32 = 2;

pub use names::component as safe_component;

/// Everything that can go wrong projecting. The errors of gix, the file
/// system and the store are kept as [`std::error::Error::source`] (the
/// message already includes their text); [`Error::kind`] classifies it like
/// a store error, so the CLI gives it its exit code in one place.
#[derive(Debug)]
pub enum Error {
    /// The store failed.
    Store(StoreError),
    /// git object or ref handling failed.
    Git(Cause),
    /// A file could not be read or written.
    Io(Cause),
    /// The repository or its bookkeeping is not what convo wrote.
    Corrupt(Cause),
    /// A directory convo did not create.
    NotProjection(String),
    /// Another sync holds the repository's lock.
    Busy {
        /// The repository.
        repo: String,
        /// The process holding the lock, when it wrote its id.
        pid: Option<u32>,
    },
    /// The repository was written by an older convo in a layout this one
    /// no longer writes; `convo git sync` rebuilds it.
    OldFormat {
        /// The repository.
        path: String,
        /// Its layout.
        layout: String,
        /// Its version.
        version: u32,
    },
    /// The repository holds history the store no longer has: the store was
    /// rolled back, truncated or rewritten after it was projected. The
    /// repository is the evidence; it is left as it is.
    Rewritten(Vec<Problem>),
    /// `--layout` differs from the repository's.
    LayoutMismatch {
        /// The repository.
        path: String,
        /// Its layout.
        found: String,
        /// The layout asked for.
        asked: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Store(e) => std::fmt::Display::fmt(e, f),
            Error::Git(c) => write!(f, "git: {c}"),
            Error::Io(c) => write!(f, "{c}"),
            Error::Corrupt(c) => write!(f, "the projection is inconsistent: {c}"),
            Error::NotProjection(p) => write!(f, "{p} exists and is not a convo projection"),
            Error::Busy { repo, pid } => write!(
                f,
                "another `convo git sync`{} is updating {repo}",
                pid.map(|p| format!(" (process {p})")).unwrap_or_default()
            ),
            Error::OldFormat {
                path,
                layout,
                version,
            } => write!(
                f,
                "{path} holds layout `{layout}` version {version}; this convo writes version {FORMAT}"
            ),
            Error::Rewritten(lines) => write!(
                f,
                "the store's history was rewritten after it was projected:\n{}",
                lines
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
            Error::LayoutMismatch { path, found, asked } => {
                write!(f, "{path} holds the `{found}` layout, not `{asked}`")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Store(e) => std::error::Error::source(e),
            Error::Git(c) | Error::Io(c) | Error::Corrupt(c) => c.source(),
            _ => None,
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

impl Error {
    /// A git failure with no underlying error.
    pub fn git(message: impl Into<String>) -> Self {
        Error::Git(Cause::new(message))
    }
    /// A file failure with no underlying error.
    pub fn io(message: impl Into<String>) -> Self {
        Error::Io(Cause::new(message))
    }
    /// An inconsistent projection.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Error::Corrupt(Cause::new(message))
    }

    /// What kind of failure this is: a store error's own kind; `Corrupt`
    /// for history the store no longer has (the repository witnesses a
    /// rewritten store); `Invalid` for a layout that is not the
    /// repository's; [`ErrorKind::Failed`] for the repository, its files
    /// and its lock.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Store(e) => e.kind(),
            Error::Rewritten(_) => ErrorKind::Corrupt,
            Error::LayoutMismatch { .. } => ErrorKind::Invalid,
            Error::Git(_)
            | Error::Io(_)
            | Error::Corrupt(_)
            | Error::NotProjection(_)
            | Error::Busy { .. }
            | Error::OldFormat { .. } => ErrorKind::Failed,
        }
    }
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
    /// Ref updates (sets and deletes).
    pub refs: u64,
    /// Packs in the repository after the sync.
    pub packs: u64,
    /// The follow cursor after the sync.
    pub cursor: u64,
    /// Refs whose commit changed because the store redacted a payload
    /// since the last sync (the projection was rewritten from the store;
    /// every other ref keeps its commit, objects being deterministic).
    pub rewritten: Vec<String>,
}

/// Progress within one sync, given after each batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Nodes projected so far in this sync.
    pub nodes: u64,
    /// Commits written so far in this sync.
    pub commits: u64,
    /// The follow cursor after the batch.
    pub cursor: u64,
}

/// A projection of the store into one repository.
pub struct Projector {
    repo: gix::Repository,
    path: PathBuf,
    layout: Layout,
    book: Bookkeeping,
    sessions: HashMap<SessionId, SessionRow>,
    files: sessions::Cache,
    lock: Option<SyncLock>,
    /// Why the repository was rebuilt when it was opened, if it was.
    pub notice: Option<String>,
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

/// A test hook for kill tests: with `CONVO_GIT_PAUSE_AT=point:n` in the
/// environment, the `n`-th time a sync reaches `point` it prints
/// `convo-git: paused at point` to stderr and waits forever, so that a test
/// can SIGKILL it exactly there. Points: `pack-written`, `refs-locked`
/// (inside the ref transaction, every ref lock held), `refs-moved`,
/// `map-saved`, `repack-written`, `repack-removing`, `cleared` (the
/// repository emptied for a redaction rewrite, published checkpoints saved
/// aside).
pub(crate) fn pause_point(name: &str) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SPEC: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    let spec = SPEC.get_or_init(|| {
        let v = std::env::var("CONVO_GIT_PAUSE_AT").ok()?;
        let (p, n) = v.split_once(':')?;
        Some((p.to_owned(), n.parse().ok()?))
    });
    let Some((point, n)) = spec else { return };
    if point != name || HITS.fetch_add(1, Ordering::SeqCst) + 1 != *n {
        return;
    }
    eprintln!("convo-git: paused at {name}");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

fn refname(s: &SessionId, branch: &str) -> String {
    format!("refs/heads/{s}/{branch}")
}

/// The problem of a store rewritten after it was projected: `lost`, the
/// projected nodes it no longer holds (sorted).
fn rewritten(lost: &[&NodeHash]) -> Problem {
    Problem::new(
        ProblemKind::Rewritten,
        "store",
        format!(
            "the store's history was rewritten after it was projected: {} projected node(s) \
             are no longer in the store{}; this repository is the evidence, keep it \
             (compare with `convo verify --checkpoint`)",
            lost.len(),
            if lost.is_empty() {
                String::new()
            } else {
                format!(
                    " ({}{})",
                    lost.iter()
                        .take(20)
                        .map(|h| h.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if lost.len() > 20 { ", …" } else { "" }
                )
            }
        ),
    )
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(Cause::with_context(format!("{}", path.display()), e))
}

/// Reads `convo/layout`: the layout and its format version.
fn read_marker(marker: &Path) -> Result<(Layout, u32)> {
    let text = std::fs::read_to_string(marker).map_err(|e| io(marker, e))?;
    let mut words = text.split_whitespace();
    let bad = || Error::corrupt(format!("{} says `{}`", marker.display(), text.trim()));
    let layout = words.next().and_then(Layout::parse).ok_or_else(bad)?;
    let version = match words.next() {
        None => 1,
        Some(v) => v.parse().map_err(|_| bad())?,
    };
    Ok((layout, version))
}

/// Whether `path` holds nothing but `convo/`, itself empty or holding only
/// its lock: what a kill leaves of a projection being created.
fn only_skeleton(path: &Path) -> bool {
    let names = |p: &Path| -> Vec<std::ffi::OsString> {
        std::fs::read_dir(p)
            .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_else(|_| vec!["?".into()])
    };
    names(path) == ["convo"]
        && names(&path.join("convo")).iter().all(|n| {
            n == "lock" || n == "publishing" || n == "layout.tmp" || n == checkpoints::SAVED_FILE
        })
}

/// Empties a projection for a rebuild, keeping `config` (the user's remotes),
/// `convo/lock` and `convo/publishing` (held by this process) and
/// `convo/layout` (so that a kill in the middle leaves a projection the next
/// sync recognises). Published checkpoints are not kept by this: the caller
/// saves and restores them (see [`checkpoints`]). The
/// bookkeeping goes first: a kill then leaves a cursor of 0, and the next
/// sync writes everything again.
fn clear(path: &Path) -> Result<()> {
    for f in ["state", "map"] {
        let p = path.join("convo").join(f);
        if p.exists() {
            remove(&p)?;
        }
    }
    for e in std::fs::read_dir(path).map_err(|e| io(path, e))? {
        let e = e.map_err(|e| io(path, e))?;
        let p = e.path();
        let name = e.file_name();
        if name == "config" {
            continue;
        }
        if name == "convo" {
            for c in std::fs::read_dir(&p).map_err(|e| io(&p, e))? {
                let c = c.map_err(|e| io(&p, e))?;
                let keep = ["lock", "publishing", "layout", checkpoints::SAVED_FILE];
                if !keep.iter().any(|k| c.file_name() == *k) {
                    remove(&c.path())?;
                }
            }
            continue;
        }
        remove(&p)?;
    }
    Ok(())
}

fn remove(p: &Path) -> Result<()> {
    let r = if p.is_dir() && !p.is_symlink() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    r.map_err(|e| io(p, e))
}

/// Writes an empty bare repository into `path` (which may hold `config`
/// and `convo/`).
fn init_bare(path: &Path) -> Result<()> {
    for d in ["objects/pack", "objects/info", "refs/heads", "refs/tags"] {
        let p = path.join(d);
        std::fs::create_dir_all(&p).map_err(|e| io(&p, e))?;
    }
    let head = path.join("HEAD");
    if !head.exists() {
        std::fs::write(&head, "ref: refs/heads/main\n").map_err(|e| io(&head, e))?;
    }
    let config = path.join("config");
    if !config.exists() {
        std::fs::write(
            &config,
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
        )
        .map_err(|e| io(&config, e))?;
    }
    Ok(())
}

/// Bytes of decoded delta bases gix keeps while reading packs. Every
/// projected tree is stored as a delta against its previous version (chains
/// up to [`pack::MAX_DEPTH`]), so without this cache reading node *n*'s trees
/// re-inflates the whole chain each time, which made `git verify` of a
/// 10,000-turn session cost seconds.
const DELTA_BASE_CACHE: usize = 32 << 20;

fn git_open(path: &Path) -> Result<gix::Repository> {
    let mut repo = gix::open(path).map_err(|e| {
        Error::Git(Cause::with_context(
            format!("opening {}", path.display()),
            e,
        ))
    })?;
    repo.objects.set_pack_cache(|| {
        Box::new(gix_pack::cache::lru::MemoryCappedHashmap::new(
            DELTA_BASE_CACHE,
        ))
    });
    Ok(repo)
}

impl Projector {
    /// Opens the projection at `path` for a sync, creating a bare
    /// repository if it does not exist, and takes its lock for as long as
    /// the projector lives. With `rebuild`, an existing projection is
    /// emptied first (never a directory convo did not create); one written
    /// by an older convo's layout is rebuilt too, and [`Projector::notice`]
    /// says so.
    pub fn open(path: &Path, layout: Option<Layout>, rebuild: bool) -> Result<Projector> {
        let marker = path.join("convo").join("layout");
        let exists = path.exists()
            && std::fs::read_dir(path)
                .map_err(|e| io(path, e))?
                .next()
                .is_some();
        // A projection whose creation was killed before `convo/layout` was
        // written holds `convo/` (and its lock) alone.
        if exists && !marker.exists() && !only_skeleton(path) {
            return Err(Error::NotProjection(path.display().to_string()));
        }
        // Such a skeleton is created anew (with the layout asked for now).
        let exists = exists && marker.exists();
        let convo_dir = path.join("convo");
        std::fs::create_dir_all(&convo_dir).map_err(|e| io(&convo_dir, e))?;
        let lock = SyncLock::acquire(path)?;
        let mut notice = None;
        let mut wanted = layout;
        let mut kept = None;
        if exists {
            let (found, version) = read_marker(&marker)?;
            if let Some(asked) = layout
                && asked != found
                && !rebuild
            {
                return Err(Error::LayoutMismatch {
                    path: path.display().to_string(),
                    found: found.as_str().into(),
                    asked: asked.as_str().into(),
                });
            }
            wanted = Some(layout.unwrap_or(found));
            if version != FORMAT && !rebuild {
                notice = Some(format!(
                    "{} held layout `{}` version {version}, written by an older convo; it was \
                     rebuilt from the store in version {FORMAT} (message directories grouped by \
                     position, so a commit no longer rewrites every earlier one); commit ids changed",
                    path.display(),
                    found.as_str()
                ));
            }
            if rebuild || version != FORMAT {
                // Published checkpoints are not the projection's: keep them.
                let publishing = lock::publish_lock(path)?;
                let saved = checkpoints::save(path)?;
                clear(path)?;
                std::fs::remove_file(&marker).map_err(|e| io(&marker, e))?;
                kept = Some((publishing, saved));
            }
        }
        if !marker.exists() {
            // Written aside, then renamed: a kill never leaves it empty.
            let tmp = marker.with_extension("tmp");
            std::fs::write(
                &tmp,
                format!("{} {FORMAT}\n", wanted.unwrap_or(Layout::Dag).as_str()),
            )
            .map_err(|e| io(&tmp, e))?;
            std::fs::rename(&tmp, &marker).map_err(|e| io(&marker, e))?;
        }
        // Also completes a creation or a rebuild that was killed.
        init_bare(path)?;
        match kept {
            Some((_publishing, saved)) => checkpoints::restore(path, &saved)?,
            // A rebuild killed before it wrote them back.
            None => checkpoints::recover(path)?,
        }
        let repo = git_open(path)?;
        let (found, _) = read_marker(&marker)?;
        let book = Bookkeeping::load(&convo_dir)?;
        Ok(Projector {
            repo,
            path: path.to_owned(),
            layout: found,
            book,
            sessions: HashMap::new(),
            files: sessions::Cache::default(),
            lock: Some(lock),
            notice,
            batch: 5000,
        })
    }

    /// Opens an existing projection to read it (`verify`), without its
    /// lock. A projection of an older format is [`Error::OldFormat`].
    pub fn open_readonly(path: &Path) -> Result<Projector> {
        let marker = path.join("convo").join("layout");
        if !marker.exists() {
            return Err(Error::NotProjection(path.display().to_string()));
        }
        let (layout, version) = read_marker(&marker)?;
        if version != FORMAT {
            return Err(Error::OldFormat {
                path: path.display().to_string(),
                layout: layout.as_str().into(),
                version,
            });
        }
        Ok(Projector {
            repo: git_open(path)?,
            path: path.to_owned(),
            layout,
            book: Bookkeeping::load_readonly(&path.join("convo"))?,
            sessions: HashMap::new(),
            files: sessions::Cache::default(),
            lock: None,
            notice: None,
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
            Error::corrupt(format!("session {id} of a stored node is not in the store"))
        })
    }

    /// Projects every node appended since the last sync, in batches;
    /// `progress` is called after each batch.
    pub fn sync(
        &mut self,
        store: &mut Store,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<SyncReport> {
        let Some(lock) = self.lock.take() else {
            return Err(Error::corrupt("the projection was opened read-only"));
        };
        let r = self.sync_locked(store, progress, &lock);
        self.lock = Some(lock);
        r
    }

    /// The store's redacted payloads, and whether this projection was
    /// written before some of them (so it still holds their bytes).
    fn redactions_pending(&self, store: &mut Store) -> Result<(Vec<String>, bool)> {
        let mut want: Vec<String> = store
            .redactions()?
            .into_iter()
            .map(|r| r.payload.to_hex())
            .collect();
        want.sort();
        let file = self.path.join("convo").join("redactions");
        let stale = match std::fs::read_to_string(&file) {
            Ok(text) => text.lines().map(str::to_owned).collect::<Vec<_>>() != want,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.book.cursor > 0 && !want.is_empty()
            }
            Err(e) => return Err(io(&file, e)),
        };
        Ok((want, stale))
    }

    /// Every ref under `refs/` and its target.
    fn all_refs(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let g = |e: &dyn std::fmt::Display| Error::git(format!("listing refs: {e}"));
        let platform = self.repo.references().map_err(|e| g(&e))?;
        let mut out = std::collections::BTreeMap::new();
        for r in platform.all().map_err(|e| g(&e))? {
            let r = r.map_err(|e| g(&e))?;
            let target = r
                .target()
                .try_id()
                .map(|id| id.to_string())
                .unwrap_or_default();
            out.insert(r.name().as_bstr().to_string(), target);
        }
        Ok(out)
    }

    /// What the repository witnesses that the store no longer holds: a
    /// cursor past the store's end (truncation), a projected tip the store
    /// lacks, a branch whose store head is an earlier projected node
    /// (rolled back). Cheap: one lookup per timeline. Empty when the store
    /// only moved forward since the last sync.
    pub fn witness(&self, store: &mut Store) -> Result<Vec<Problem>> {
        let mut found = Vec::new();
        let end = store.end_cursor()?;
        if end < self.book.cursor {
            found.push(Problem::new(
                ProblemKind::Truncated,
                "store",
                format!(
                    "the store ends at node {end}, but {} nodes were projected from it: it was truncated",
                    self.book.cursor
                ),
            ));
        }
        let mut tips: Vec<&Tip> = self.book.tips.values().collect();
        tips.sort_by(|a, b| (a.session, &a.branch).cmp(&(b.session, &b.branch)));
        for t in tips {
            let object = format!("branch {}/{}", t.session, t.branch);
            let gone = match convo_core::HashPrefix::parse(&t.node.to_hex()) {
                Ok(p) => matches!(store.node(&p), Err(StoreError::NoNode(_))),
                Err(_) => false,
            };
            if gone {
                found.push(Problem::new(
                    ProblemKind::Rewritten,
                    object,
                    format!(
                        "node {} (its projected tip, commit {}) is no longer in the store",
                        t.node,
                        self.book
                            .map
                            .get(&t.node)
                            .and_then(|r| r.commit)
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| "-".into())
                    ),
                ));
                continue;
            }
            let Ok(name) = convo_core::BranchName::new(&t.branch) else {
                continue;
            };
            let head = match store.branch(&t.session, &name) {
                Ok(b) => b.head,
                Err(StoreError::NoBranch { .. } | StoreError::NoSession(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            // Moved back: to a node projected before (its follow number at
            // or below the cursor); a newer head is only not projected yet.
            let mut older = |h: &NodeHash| -> Result<bool> {
                let Ok(p) = convo_core::HashPrefix::parse(&h.to_hex()) else {
                    return Ok(false);
                };
                Ok(store.node(&p).is_ok_and(|n| n.seq <= self.book.cursor))
            };
            if let Some(h) = head
                && h != t.node
                && self.book.map.contains_key(&h)
                && older(&h)?
            {
                found.push(Problem::new(
                    ProblemKind::Truncated,
                    object,
                    format!(
                        "its head moved back from {} to {h}, an earlier projected node",
                        t.node
                    ),
                ));
            }
        }
        Ok(found)
    }

    fn sync_locked(
        &mut self,
        store: &mut Store,
        progress: &mut dyn FnMut(Progress),
        lock: &SyncLock,
    ) -> Result<SyncReport> {
        let rewritten = self.witness(store)?;
        if !rewritten.is_empty() {
            return Err(Error::Rewritten(rewritten));
        }
        let (redacted, stale) = self.redactions_pending(store)?;
        let before = if stale {
            // The store erased payloads this repository still holds:
            // project it again from the store. Objects are deterministic,
            // so only refs whose history holds a redacted payload change;
            // the old objects (and packs) are deleted with the rest.
            let before = self.all_refs()?;
            let _publishing = lock::publish_lock(&self.path)?;
            let saved = checkpoints::save(&self.path)?;
            clear(&self.path)?;
            pause_point("cleared");
            init_bare(&self.path)?;
            checkpoints::restore(&self.path, &saved)?;
            self.repo = git_open(&self.path)?;
            self.book = Bookkeeping::load(&self.path.join("convo"))?;
            self.files = sessions::Cache::default();
            self.sessions.clear();
            Some(before)
        } else {
            None
        };
        let mut report = self.sync_nodes(store, progress, lock)?;
        if let Some(before) = before {
            let after = self.all_refs()?;
            report.rewritten = after
                .iter()
                .filter(|(name, id)| before.get(*name) != Some(id))
                .map(|(name, _)| name.clone())
                .chain(before.keys().filter(|n| !after.contains_key(*n)).cloned())
                .collect();
            report.rewritten.sort();
            report.rewritten.dedup();
        }
        let file = self.path.join("convo").join("redactions");
        let tmp = file.with_extension("tmp");
        let text: String = redacted.iter().map(|h| format!("{h}\n")).collect();
        std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &file).map_err(|e| io(&file, e))?;
        Ok(report)
    }

    fn sync_nodes(
        &mut self,
        store: &mut Store,
        progress: &mut dyn FnMut(Progress),
        lock: &SyncLock,
    ) -> Result<SyncReport> {
        let mut report = SyncReport {
            cursor: self.book.cursor,
            ..SyncReport::default()
        };
        let pack_dir = self.path.join("objects").join("pack");
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
            drop(page);
            if let Some(s) = head_session {
                refs.push(RefChange::Head(refname(&s, "main")));
            }
            lock.begin(&[])?;
            pending.flush(&self.repo)?;
            pause_point("pack-written");
            report.refs += odb::apply_refs(&self.repo, refs)?;
            pause_point("refs-moved");
            self.book.save(last)?;
            lock.end()?;
            let before = repack::count(&pack_dir)?;
            let after = repack::maybe_consolidate(&pack_dir, lock)?;
            if after != before {
                // Packs were removed: let gix forget what it had mapped.
                self.repo = git_open(&self.path)?;
            }
            report.cursor = last;
            progress(Progress {
                nodes: report.nodes,
                commits: report.commits,
                cursor: last,
            });
        }
        report.packs = repack::count(&pack_dir)? as u64;
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
                pos: 0,
            },
            Some(ph) => *self.book.map.get(&ph).ok_or_else(|| {
                Error::corrupt(format!(
                    "parent {ph} of node {} was never projected",
                    s.hash
                ))
            })?,
        };
        let rec = match self.layout {
            Layout::Dag => {
                let pc = parent.commit.zip(parent.aux);
                let pos = parent.pos + 1;
                let (c, t) =
                    dag::commit(p, &self.repo, pc, pos, &session, &s.hash, node, &n.payload)?;
                Rec {
                    commit: Some(c),
                    aux: Some(t),
                    pos,
                }
            }
            Layout::Sessions => sessions::project(
                p,
                &self.repo,
                &mut self.files,
                parent,
                &session,
                node,
                &n.payload,
            )?,
        };
        let wrote = u64::from(rec.commit != parent.commit);
        let sid = node.session;
        let (branch, git_name) = self.timeline_of(refs, s, rec.commit)?;
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

    /// The timeline node `s` (projected as `commit`) is on, and the name
    /// of its ref: a fork's new one, `main` for a first node or a promote
    /// (which seals the old `main` under its new name), else its parent's,
    /// whose tip it takes.
    fn timeline_of(
        &mut self,
        refs: &mut Vec<RefChange>,
        s: &convo_store::StoredNode,
        commit: Option<gix::ObjectId>,
    ) -> Result<(String, String)> {
        let node = &s.node;
        let sid = node.session;
        match (node.kind, &node.event, node.parent) {
            (Kind::Fork, Some(ev), _) => {
                let git_name = match self.layout {
                    Layout::Dag => ev.branch.to_string(),
                    Layout::Sessions => self.fork_name(&sid, commit, &s.hash),
                };
                Ok((ev.branch.to_string(), git_name))
            }
            (_, _, None) => Ok(("main".to_owned(), "main".to_owned())),
            (kind, ev, Some(ph)) => {
                let tip = self.book.tips.remove(&ph).ok_or_else(|| {
                    Error::corrupt(format!(
                        "node {} extends {ph}, which is no timeline's tip",
                        s.hash
                    ))
                })?;
                if let (Kind::Promote, Some(ev)) = (kind, ev) {
                    self.seal_main(refs, &sid, ev);
                    refs.push(RefChange::Delete(refname(&sid, &tip.git_name)));
                    Ok(("main".to_owned(), "main".to_owned()))
                } else {
                    Ok((tip.branch, tip.git_name))
                }
            }
        }
    }

    /// A promote `ev` in session `sid`: the old `main`'s tip and ref take
    /// the name it was sealed as.
    fn seal_main(&mut self, refs: &mut Vec<RefChange>, sid: &SessionId, ev: &TimelineEvent) {
        let sealed = ev
            .sealed_as
            .as_ref()
            .map(|b| b.to_string())
            .unwrap_or_default();
        let old_main = self
            .book
            .tips
            .values()
            .find(|t| t.session == *sid && t.branch == "main")
            .map(|t| t.node);
        if let Some(m) = old_main
            && let Some(mut t) = self.book.tips.remove(&m)
        {
            refs.push(RefChange::Delete(refname(sid, &t.git_name)));
            t.branch = sealed.clone();
            t.git_name = sealed.clone();
            if let Some(c) = self.book.map.get(&t.node).and_then(|r| r.commit) {
                refs.push(RefChange::Set(refname(sid, &sealed), c));
            }
            self.book.tips.insert(t.node, t);
        }
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
    pub fn verify(&mut self, store: &mut Store) -> Result<Vec<Problem>> {
        let mut problems = Vec::new();
        let witnessed = self.witness(store)?;
        let (cursor, stored) = self.verify_nodes(store, &mut problems)?;
        let mut lost: Vec<&NodeHash> = self
            .book
            .map
            .keys()
            .filter(|h| !stored.contains(*h))
            .collect();
        if !witnessed.is_empty() || !lost.is_empty() {
            lost.sort();
            problems.push(rewritten(&lost));
            problems.extend(witnessed);
            return Ok(problems);
        }
        if cursor > self.book.cursor {
            problems.push(Problem::new(
                ProblemKind::Behind,
                "repository",
                format!(
                    "{} node(s) appended after cursor {} are not projected yet (run `convo git sync`)",
                    cursor - self.book.cursor,
                    self.book.cursor
                ),
            ));
        }
        if self.redactions_pending(store)?.1 {
            problems.push(Problem::new(
                ProblemKind::Behind,
                "repository",
                "the store redacted payloads this repository still holds (run `convo git sync`, \
                 which rewrites the refs whose history holds them)",
            ));
        }
        for session in store.sessions()? {
            for b in store.branches(&session.id)? {
                if let Some(head) = b.head {
                    self.verify_branch(&session.id, &b.name, head, &mut problems);
                }
            }
        }
        Ok(problems)
    }

    /// Every node of the store against its commit, a page at a time; the
    /// store's follow cursor and the nodes it holds.
    fn verify_nodes(
        &mut self,
        store: &mut Store,
        problems: &mut Vec<Problem>,
    ) -> Result<(u64, convo_core::DigestSet<NodeHash>)> {
        let mut cursor = 0;
        let mut p = Pending::new();
        let mut stored = convo_core::DigestSet::<NodeHash>::default();
        loop {
            let page = store.follow_with_payloads(cursor, 2000)?;
            let Some(last) = page.last().map(|n| n.stored.seq) else {
                break;
            };
            for n in &page {
                stored.insert(n.stored.hash);
                if let Err(why) = self.verify_node(store, &mut p, n) {
                    problems.push(Problem::new(
                        ProblemKind::Mismatch,
                        format!("node {}", n.stored.hash),
                        why,
                    ));
                }
            }
            cursor = last;
        }
        Ok((cursor, stored))
    }

    /// A branch of the store (its `head`) against its projected tip and
    /// ref.
    fn verify_branch(
        &self,
        sid: &SessionId,
        branch: &BranchName,
        head: NodeHash,
        problems: &mut Vec<Problem>,
    ) {
        let object = format!("branch {sid}/{branch}");
        let Some(tip) = self.book.tips.get(&head) else {
            problems.push(Problem::new(
                ProblemKind::Missing,
                object,
                format!("its head {head} is not a projected tip"),
            ));
            return;
        };
        if tip.branch != branch.as_str() {
            problems.push(Problem::new(
                ProblemKind::Mismatch,
                object.clone(),
                format!("projected as `{}`", tip.branch),
            ));
        }
        let Some(commit) = self.book.map.get(&head).and_then(|r| r.commit) else {
            return;
        };
        let name = refname(sid, &tip.git_name);
        let (kind, why) = match self.repo.try_find_reference(name.as_str()) {
            Ok(Some(mut r)) => match r.peel_to_id() {
                Ok(id) if id.detach() == commit => return,
                Ok(id) => (
                    ProblemKind::Mismatch,
                    format!("{name} points at {id}, not {commit}"),
                ),
                Err(e) => (ProblemKind::Database, format!("{name}: {e}")),
            },
            Ok(None) => (ProblemKind::Missing, format!("ref {name} is missing")),
            Err(e) => (ProblemKind::Database, format!("{name}: {e}")),
        };
        problems.push(Problem::new(kind, object, why));
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
                if !dag::holds(p, &self.repo, c.tree(), rec.pos, dir).map_err(|e| e.to_string())? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use convo_core::BranchName;
    use convo_testutil::{draft, git};

    fn packs(repo: &Path) -> u64 {
        let out = git(repo, &["count-objects", "-v"]);
        out.lines()
            .find_map(|l| l.strip_prefix("packs: "))
            .unwrap()
            .parse()
            .unwrap()
    }

    /// 2,000 rounds that each write one node, as `--follow` does, with a
    /// user's `git gc` in the middle: never more than 50 packs, and the
    /// repository stays valid for git and for convo.
    #[test]
    fn follow_rounds_keep_packs_bounded_and_survive_git_gc() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("c.db").display());
        let mut store = Store::open(&url).unwrap();
        let ses = store
            .transaction(|l| l.new_session("a", None, 1_770_000_000_000))
            .unwrap()
            .id;
        let main = BranchName::main();
        let repo = dir.path().join("repo");
        let mut p = Projector::open(&repo, None, false).unwrap();
        let mut most = 0;
        for i in 0..2000u64 {
            let kind = if i % 2 == 0 {
                Kind::Invoke
            } else {
                Kind::Complete
            };
            let d = draft(kind, &format!("message {i}"), 1_770_000_000_000 + i as i64);
            store.transaction(|l| l.append(&ses, &main, &d)).unwrap();
            let r = p.sync(&mut store, &mut |_| {}).unwrap();
            assert_eq!((r.nodes, r.commits), (1, 1));
            most = most.max(r.packs);
            if i == 1000 {
                git(&repo, &["gc", "--quiet"]);
            }
        }
        assert!(most <= 50, "{most} packs at the worst");
        assert!(packs(&repo) <= 50);
        git(&repo, &["fsck", "--strict"]);
        assert!(p.verify(&mut store).unwrap().is_empty());
        git(&repo, &["gc", "--quiet", "--aggressive"]);
        store
            .transaction(|l| {
                l.append(
                    &ses,
                    &main,
                    &draft(Kind::Invoke, "after gc", 1_770_000_100_000),
                )
            })
            .unwrap();
        assert_eq!(p.sync(&mut store, &mut |_| {}).unwrap().commits, 1);
        git(&repo, &["fsck", "--strict"]);
        let log = git(&repo, &["rev-list", "--count", "HEAD"]);
        assert_eq!(log.trim(), "2001");
        drop(p);
        let mut v = Projector::open_readonly(&repo).unwrap();
        assert!(v.verify(&mut store).unwrap().is_empty());
    }

    #[test]
    fn dates_git_rejects_are_clamped_and_kept_exact_in_a_trailer() {
        assert_eq!(dag::git_seconds(-1), 0);
        assert_eq!(dag::git_seconds(-86_400_000_000), 0);
        assert_eq!(dag::git_seconds(i64::MAX), dag::MAX_GIT_SECONDS);
        assert_eq!(dag::git_seconds(1_000_999), 1000);
        assert_eq!(dag::time_trailer(1_000), "");
        assert_eq!(
            dag::time_trailer(-1_000),
            "Time: 1969-12-31T23:59:59.000Z\n"
        );
        assert!(dag::time_trailer(i64::MAX).starts_with("Time: "));
        let c = gix::objs::Commit {
            tree: gix::ObjectId::empty_tree(gix::hash::Kind::Sha1),
            parents: Default::default(),
            author: dag::signature("a", -1_000),
            committer: dag::signature("a", -1_000),
            encoding: None,
            message: "x\n\nTime: 1969-12-31T23:59:59.000Z\n".into(),
            extra_headers: Vec::new(),
        };
        let data = pack::serialize(&c).unwrap();
        let parsed = gix::objs::CommitRef::from_bytes(&data, gix::hash::Kind::Sha1).unwrap();
        assert_eq!(dag::commit_ms(&parsed), Some(-1_000));
    }
}
