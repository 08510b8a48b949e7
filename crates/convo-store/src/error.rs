use convo_core::timeline::RuleError;

/// Everything a store operation can fail with. Each message says what went
/// wrong and with which object; [`StoreError::hint`] says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No session has that id, id prefix or title.
    #[error("no session matches `{0}`")]
    NoSession(String),
    /// A prefix or title shared by several sessions.
    #[error("`{query}` matches {count} sessions:{}", list_candidates(candidates, *count))]
    AmbiguousSession {
        /// What was asked for.
        query: String,
        /// How many matched.
        count: usize,
        /// Some of them (`ses-… "title"`), for the message.
        candidates: Vec<String>,
    },
    /// The session has no such timeline.
    #[error("session {session} has no branch `{branch}`")]
    NoBranch {
        /// The session.
        session: String,
        /// The missing branch.
        branch: String,
    },
    /// Fork or rename onto a name already used.
    #[error("session {session} already has a branch `{branch}`")]
    BranchExists {
        /// The session.
        session: String,
        /// The taken name.
        branch: String,
    },
    /// An append, state write or promote on a sealed timeline.
    #[error("branch `{branch}` of session {session} is sealed and refuses new nodes")]
    Sealed {
        /// The session.
        session: String,
        /// The sealed branch.
        branch: String,
    },
    /// `promote main`.
    #[error("`main` is already the canonical timeline")]
    PromoteMain,
    /// No node has that hash or prefix.
    #[error("no node matches `{0}`")]
    NoNode(String),
    /// A prefix shared by several nodes.
    #[error("`{prefix}` matches {count} nodes")]
    AmbiguousNode {
        /// The prefix given.
        prefix: String,
        /// How many matched (at least 2).
        count: usize,
    },
    /// Fork from a node of another session.
    #[error("node {node} belongs to session {owner}, not {session}")]
    WrongSession {
        /// The node.
        node: String,
        /// Its session.
        owner: String,
        /// The session asked for.
        session: String,
    },
    /// A timeline rule (no open submission, bad sequence…).
    #[error(transparent)]
    Rule(#[from] RuleError),
    /// A state key, value or root problem.
    #[error("state: {0}")]
    State(String),
    /// Invalid input (a bad id, name, or value).
    #[error("{0}")]
    Invalid(String),
    /// Another writer held the store for too long.
    #[error("the store stayed locked by another writer for {0} s")]
    Busy(u64),
    /// Lost the compare-and-swap race on a branch head more often than the retry bound.
    #[error("branch head kept moving under concurrent writers ({0} attempts)")]
    Conflict(u32),
    /// Stored data that does not decode (edited behind convo's back).
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database itself is damaged (SQLite reports corruption, fails its
    /// integrity check, or its schema is not the one its version names).
    #[error("the store is damaged: {0}")]
    Damaged(String),
    /// The store's schema is newer than this convo.
    #[error("the store has schema version {found}, newer than this convo knows ({known})")]
    SchemaTooNew {
        /// Version in the store.
        found: i64,
        /// Latest version this build knows.
        known: i64,
    },
    /// A read found no store where one was expected (reads never create one).
    #[error("no store at {0}")]
    NoStore(String),
    /// An existing file or database that is not a convo store; left untouched.
    #[error("{path} is not a convo store: {reason}; it was left untouched")]
    NotAStore {
        /// The file.
        path: String,
        /// What it is instead.
        reason: String,
    },
    /// A store URL whose scheme no backend handles.
    #[error(
        "unknown store URL scheme `{scheme}` in `{url}`: supported are sqlite:///path/convo.db, sqlite::memory:, postgres://user@host/db (or postgresql://) and a plain file path"
    )]
    UnknownScheme {
        /// The scheme given.
        scheme: String,
        /// The whole URL (password removed).
        url: String,
    },
    /// A store URL this build cannot open.
    #[error("cannot open store `{0}`: {1}")]
    Url(String, String),
    /// The database engine failed.
    #[error("database error: {0}")]
    Backend(String),
}

/// What kind of failure a [`StoreError`] is: the one fact every surface
/// maps to its own convention (the CLI to an exit code, the HTTP API to a
/// status), so the two never disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The input is malformed or breaks a rule (bad name, bad value, a
    /// timeline rule). CLI exit 2, HTTP 400 / 422.
    Invalid,
    /// Nothing matches the session, branch or node asked for. Exit 3, HTTP 404.
    NotFound,
    /// More than one thing matches; the request must be more precise.
    /// Exit 2, HTTP 400.
    Ambiguous,
    /// The store refused: a sealed timeline, a name already taken, promoting
    /// `main`, a compare-and-swap lost too often. Exit 4, HTTP 409.
    Refused,
    /// The store could not be reached or stayed locked. Exit 5, HTTP 503.
    Unavailable,
    /// Stored data does not decode, or the schema is newer. Exit 5, HTTP 500.
    Corrupt,
}

impl ErrorKind {
    /// The process exit code the CLI uses for this kind.
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Invalid | ErrorKind::Ambiguous => 2,
            ErrorKind::NotFound => 3,
            ErrorKind::Refused => 4,
            ErrorKind::Unavailable | ErrorKind::Corrupt => 5,
        }
    }

    /// The HTTP status the API answers with for this kind.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::Invalid => 422,
            ErrorKind::Ambiguous => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Refused => 409,
            ErrorKind::Unavailable => 503,
            ErrorKind::Corrupt => 500,
        }
    }

    /// The lowercase name used in JSON error documents (`not_found`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::Ambiguous => "ambiguous",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Refused => "refused",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
        }
    }
}

impl StoreError {
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
            | StoreError::Conflict(_) => ErrorKind::Refused,
            StoreError::WrongSession { .. }
            | StoreError::Rule(_)
            | StoreError::State(_)
            | StoreError::Invalid(_) => ErrorKind::Invalid,
            StoreError::UnknownScheme { .. } => ErrorKind::Invalid,
            StoreError::NotAStore { .. } => ErrorKind::Refused,
            StoreError::Busy(_) | StoreError::Url(..) | StoreError::Backend(_) => {
                ErrorKind::Unavailable
            }
            StoreError::Corrupt(_) | StoreError::Damaged(_) | StoreError::SchemaTooNew { .. } => {
                ErrorKind::Corrupt
            }
        }
    }

    /// What the user can do about it, when there is something to say.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            StoreError::NoSession(_) => "list sessions with `convo session list`",
            StoreError::AmbiguousSession { .. } => {
                "name the session by its full id (or more digits of it)"
            }
            StoreError::NoBranch { .. } => "list branches with `convo branch list SESSION`",
            StoreError::BranchExists { .. } => "pick another branch name",
            StoreError::Sealed { .. } => {
                "sealed timelines are read-only; fork from one of its nodes to continue it"
            }
            StoreError::NoNode(_) => "see node hashes with `convo log SESSION`",
            StoreError::AmbiguousNode { .. } => "give more digits of the hash",
            StoreError::Busy(_) | StoreError::Conflict(_) => "retry the command",
            StoreError::Corrupt(_) => "run `convo verify` for a full report",
            StoreError::Damaged(_) => {
                "run `convo verify` for a full report; restore the store from a backup, or copy what is readable with `convo migrate`"
            }
            StoreError::SchemaTooNew { .. } => "upgrade convo",
            StoreError::NoStore(_) => {
                "check --home / --store (or CONVO_HOME / CONVO_STORE); `convo init` creates a store"
            }
            StoreError::NotAStore { .. } => "point --store at a convo store or at a new file",
            _ => return None,
        })
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
