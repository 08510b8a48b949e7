use convo_core::timeline::RuleError;

/// A boxed error kept as the source of a [`StoreError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The detail of a [`StoreError`] that can come from another error (the
/// engine's, the operating system's): the message shown, and the error it
/// came from when there was one, kept for [`std::error::Error::source`].
///
/// It reads as the message (`Deref<Target = str>`, `Display`), and converts
/// from a `String` or `&str`, so `StoreError::Corrupt("…".into())` and a
/// `StoreError::Corrupt(m) if m.contains(…)` pattern both work.
///
/// ```
/// use convo_store::{Cause, ErrorKind, StoreError};
/// let io = std::io::Error::other("disk on fire");
/// let e = StoreError::backend("cannot start a thread").because(io);
/// assert_eq!(e.to_string(), "database error: cannot start a thread: disk on fire");
/// assert_eq!(e.kind(), ErrorKind::Unavailable);
/// assert!(std::error::Error::source(&e).is_some());
/// let plain: Cause = "a blob has a negative length".into();
/// assert!(plain.contains("negative"));
/// ```
#[derive(Debug)]
pub struct Cause {
    message: String,
    source: Option<BoxError>,
}

impl Cause {
    /// A message alone (the failure has no underlying error).
    pub fn new(message: impl Into<String>) -> Self {
        Cause {
            message: message.into(),
            source: None,
        }
    }
    /// The message of `e`, keeping `e` as the source.
    pub fn from_error(e: impl Into<BoxError>) -> Self {
        let source = e.into();
        Cause {
            message: source.to_string(),
            source: Some(source),
        }
    }
    /// `context: e`, keeping `e` as the source.
    pub fn with_context(context: impl std::fmt::Display, e: impl Into<BoxError>) -> Self {
        let source = e.into();
        Cause {
            message: format!("{context}: {source}"),
            source: Some(source),
        }
    }
    /// Keeps `e` as the source, the message unchanged (it already says
    /// what `e` says).
    pub fn with_source(mut self, e: impl Into<BoxError>) -> Self {
        self.source = Some(e.into());
        self
    }
    /// The message shown.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The message, owned.
    pub fn into_message(self) -> String {
        self.message
    }
    /// The error this came from, if any.
    pub fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::ops::Deref for Cause {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Self {
        Cause::new(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Self {
        Cause::new(message)
    }
}

/// Everything a store operation can fail with. Each message says what went
/// wrong and with which object; [`StoreError::kind`] says what kind of
/// failure it is (each surface turns that into its exit code or status, and
/// the CLI adds a hint). The engine's and the system's errors are kept as
/// [`std::error::Error::source`]; the message already includes their text,
/// so a report prints the message alone.
#[derive(Debug)]
pub enum StoreError {
    /// No session has that id, id prefix or title.
    NoSession(String),
    /// A prefix or title shared by several sessions.
    AmbiguousSession {
        /// What was asked for.
        query: String,
        /// How many matched.
        count: usize,
        /// Some of them (`ses-… "title"`), for the message.
        candidates: Vec<String>,
    },
    /// The session has no such timeline.
    NoBranch {
        /// The session.
        session: String,
        /// The missing branch.
        branch: String,
    },
    /// Fork or rename onto a name already used.
    BranchExists {
        /// The session.
        session: String,
        /// The taken name.
        branch: String,
    },
    /// An append, state write or promote on a sealed timeline.
    Sealed {
        /// The session.
        session: String,
        /// The sealed branch.
        branch: String,
    },
    /// `promote main`.
    PromoteMain,
    /// A harness turn is open on the timeline (its row in the store, see
    /// [`crate::OpenTurn`]): a write now would land inside it.
    TurnOpen {
        /// The session.
        session: String,
        /// The timeline.
        branch: String,
        /// The turn, as `BRANCH@TURN`.
        turn: String,
        /// Who holds it (`convo run, pid 12 on host`).
        holder: String,
    },
    /// No node has that hash or prefix.
    NoNode(String),
    /// A prefix shared by several nodes.
    AmbiguousNode {
        /// The prefix given.
        prefix: String,
        /// How many matched (at least 2).
        count: usize,
    },
    /// Fork from a node of another session.
    WrongSession {
        /// The node.
        node: String,
        /// Its session.
        owner: String,
        /// The session asked for.
        session: String,
    },
    /// A timeline rule (no open submission, bad sequence…).
    Rule(RuleError),
    /// A state key, value or root problem (and the error behind it, if any).
    State(Cause),
    /// Invalid input (a bad id, name, or value), and the parse error behind
    /// it, if any.
    Invalid(Cause),
    /// Another writer held the store for too long.
    Busy(u64),
    /// Lost the compare-and-swap race on a branch head more often than the retry bound.
    Conflict(u32),
    /// Stored data that does not decode (edited behind convo's back).
    Corrupt(Cause),
    /// The database itself is damaged (SQLite reports corruption, fails its
    /// integrity check, or its schema is not the one its version names).
    Damaged(Cause),
    /// The store's schema is newer than this convo.
    SchemaTooNew {
        /// Version in the store.
        found: i64,
        /// Latest version this build knows.
        known: i64,
    },
    /// A read found no store where one was expected (reads never create one).
    NoStore(String),
    /// An existing file or database that is not a convo store; left untouched.
    NotAStore {
        /// The file.
        path: String,
        /// What it is instead.
        reason: String,
    },
    /// A store URL whose scheme no backend handles.
    UnknownScheme {
        /// The scheme given.
        scheme: String,
        /// The whole URL (password removed).
        url: String,
    },
    /// A store URL this build cannot open: the URL (password removed) and why.
    Url(String, Cause),
    /// The database engine failed.
    Backend(Cause),
    /// The database could not be reached, or the connection broke before
    /// the transaction's `COMMIT` was sent (a PostgreSQL server restarting,
    /// a cut network): nothing of the transaction was kept, so it may be
    /// written again once the database is back. A connection lost at
    /// `COMMIT` is a [`Backend`](StoreError::Backend) error instead: whether
    /// that transaction was kept is unknown.
    Unreachable(Cause),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::NoSession(q) => write!(f, "no session matches `{q}`"),
            StoreError::AmbiguousSession {
                query,
                count,
                candidates,
            } => write!(
                f,
                "`{query}` matches {count} sessions:{}",
                list_candidates(candidates, *count)
            ),
            StoreError::NoBranch { session, branch } => {
                write!(f, "session {session} has no branch `{branch}`")
            }
            StoreError::BranchExists { session, branch } => {
                write!(f, "session {session} already has a branch `{branch}`")
            }
            StoreError::Sealed { session, branch } => write!(
                f,
                "branch `{branch}` of session {session} is sealed and refuses new nodes"
            ),
            StoreError::PromoteMain => f.write_str("`main` is already the canonical timeline"),
            StoreError::TurnOpen {
                session,
                branch,
                turn,
                holder,
            } => write!(
                f,
                "branch `{branch}` of session {session} is inside turn {turn}, open by {holder}: a write now would land inside that turn"
            ),
            StoreError::NoNode(p) => write!(f, "no node matches `{p}`"),
            StoreError::AmbiguousNode { prefix, count } => {
                write!(f, "`{prefix}` matches {count} nodes")
            }
            StoreError::WrongSession {
                node,
                owner,
                session,
            } => write!(f, "node {node} belongs to session {owner}, not {session}"),
            StoreError::Rule(r) => std::fmt::Display::fmt(r, f),
            StoreError::State(m) => write!(f, "state: {m}"),
            StoreError::Invalid(m) => f.write_str(m.message()),
            StoreError::Busy(s) => {
                write!(f, "the store stayed locked by another writer for {s} s")
            }
            StoreError::Conflict(n) => write!(
                f,
                "branch head kept moving under concurrent writers ({n} attempts)"
            ),
            StoreError::Corrupt(c) => write!(f, "stored data is corrupt: {c}"),
            StoreError::Damaged(c) => write!(f, "the store is damaged: {c}"),
            StoreError::SchemaTooNew { found, known } => write!(
                f,
                "the store has schema version {found}, newer than this convo knows ({known})"
            ),
            StoreError::NoStore(p) => write!(f, "no store at {p}"),
            StoreError::NotAStore { path, reason } => {
                write!(
                    f,
                    "{path} is not a convo store: {reason}; it was left untouched"
                )
            }
            StoreError::UnknownScheme { scheme, url } => write!(
                f,
                "unknown store URL scheme `{scheme}` in `{url}`: supported are sqlite:///path/convo.db, sqlite::memory:, postgres://user@host/db (or postgresql://) and a plain file path"
            ),
            StoreError::Url(url, c) => write!(f, "cannot open store `{url}`: {c}"),
            StoreError::Backend(c) => write!(f, "database error: {c}"),
            StoreError::Unreachable(c) => write!(f, "database unreachable: {c}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Rule(r) => std::error::Error::source(r),
            StoreError::Corrupt(c)
            | StoreError::State(c)
            | StoreError::Invalid(c)
            | StoreError::Damaged(c)
            | StoreError::Url(_, c)
            | StoreError::Backend(c)
            | StoreError::Unreachable(c) => c.source(),
            _ => None,
        }
    }
}

impl From<RuleError> for StoreError {
    fn from(e: RuleError) -> Self {
        StoreError::Rule(e)
    }
}

pub use convo_core::ErrorKind;

impl StoreError {
    /// Invalid input because of `e` (a name or hash that does not parse),
    /// keeping `e` as the source.
    pub fn invalid(e: impl Into<BoxError>) -> Self {
        StoreError::Invalid(Cause::from_error(e))
    }
    /// The database engine failed: `message`, no underlying error (add one
    /// with [`StoreError::because`]).
    pub fn backend(message: impl Into<String>) -> Self {
        StoreError::Backend(Cause::new(message))
    }
    /// The database engine failed with `e`, kept as the source.
    pub fn backend_from(e: impl Into<BoxError>) -> Self {
        StoreError::Backend(Cause::from_error(e))
    }
    /// Stored data does not decode: `message`.
    pub fn corrupt(message: impl Into<String>) -> Self {
        StoreError::Corrupt(Cause::new(message))
    }
    /// The database itself is damaged: `message`.
    pub fn damaged(message: impl Into<String>) -> Self {
        StoreError::Damaged(Cause::new(message))
    }
    /// Adds `e` as the source of a [`Backend`](StoreError::Backend),
    /// [`Corrupt`](StoreError::Corrupt), [`Damaged`](StoreError::Damaged)
    /// or [`Url`](StoreError::Url) error, its text after the message
    /// (`message: e`). Other variants have no source and are returned as
    /// they are.
    pub fn because(mut self, e: impl Into<BoxError>) -> Self {
        if let StoreError::Backend(c)
        | StoreError::Corrupt(c)
        | StoreError::Damaged(c)
        | StoreError::Url(_, c) = &mut self
        {
            *c = Cause::with_context(std::mem::take(&mut c.message), e);
        }
        self
    }

    /// What kind of failure this is (see [`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NoSession(_)
            | StoreError::NoBranch { .. }
            | StoreError::NoNode(_)
            | StoreError::NoStore(_) => ErrorKind::NotFound,
            StoreError::AmbiguousSession { .. } | StoreError::AmbiguousNode { .. } => {
                ErrorKind::Ambiguous
            }
            StoreError::BranchExists { .. }
            | StoreError::Sealed { .. }
            | StoreError::PromoteMain
            | StoreError::TurnOpen { .. }
            | StoreError::Conflict(_) => ErrorKind::Refused,
            StoreError::WrongSession { .. }
            | StoreError::Rule(_)
            | StoreError::State(_)
            | StoreError::Invalid(_) => ErrorKind::Invalid,
            StoreError::UnknownScheme { .. } => ErrorKind::Invalid,
            StoreError::NotAStore { .. } => ErrorKind::Refused,
            StoreError::Busy(_)
            | StoreError::Url(..)
            | StoreError::Backend(_)
            | StoreError::Unreachable(_) => ErrorKind::Unavailable,
            StoreError::Corrupt(_) | StoreError::Damaged(_) | StoreError::SchemaTooNew { .. } => {
                ErrorKind::Corrupt
            }
        }
    }

    /// Whether a write that failed with this error may simply be run again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Conflict(_))
    }
}

fn list_candidates(c: &[String], count: usize) -> String {
    let mut s: String = c.iter().map(|c| format!("\n  {c}")).collect();
    if count > c.len() {
        s.push_str(&format!("\n  … and {} more", count - c.len()));
    }
    s
}

/// `Result` with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn invalid_input_keeps_the_parse_error_as_its_source() {
        let parse = convo_core::BranchName::new("a b").unwrap_err();
        let e = StoreError::invalid(parse);
        assert_eq!(e.kind(), ErrorKind::Invalid);
        let source = e.source().expect("the parse error is kept");
        assert_eq!(source.to_string(), e.to_string());
        // A message alone has no source, and reads as the message.
        let plain = StoreError::Invalid("an agent name must not be empty".into());
        assert!(plain.source().is_none());
        assert_eq!(plain.to_string(), "an agent name must not be empty");
        assert!(matches!(&plain, StoreError::Invalid(m) if m.contains("agent name")));
    }
}
