use convo_core::timeline::RuleError;

/// Everything a store operation can fail with. Each message says what went
/// wrong and with which object; [`StoreError::hint`] says what to do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No session has that id, id prefix or title.
    #[error("no session matches `{0}`")]
    NoSession(String),
    /// A prefix or title shared by several sessions.
    #[error("`{query}` matches {count} sessions")]
    AmbiguousSession {
        /// What was asked for.
        query: String,
        /// How many matched.
        count: usize,
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
    /// A store URL this build cannot open.
    #[error("cannot open store `{0}`: {1}")]
    Url(String, String),
    /// The database engine failed.
    #[error("database error: {0}")]
    Backend(String),
}

impl StoreError {
    /// What the user can do about it, when there is something to say.
    pub fn hint(&self) -> Option<&'static str> {
        Some(match self {
            StoreError::NoSession(_) => "list sessions with `convo session list`",
            StoreError::AmbiguousSession { .. } => "give more digits of the session id",
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
            _ => return None,
        })
    }

    /// Whether a write that failed with this error may simply be run again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Busy(_) | StoreError::Conflict(_))
    }
}

/// `Result` with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
