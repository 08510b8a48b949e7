//! What kind of failure an error is, below every library.

/// What kind of failure an error is: the one fact every surface maps to
/// its own convention, in one place each (the CLI to an exit code and a
/// hint in `convo-cli`'s `commands::error`, the HTTP API to a status in
/// `convo_runtime::error::status`, Python to an exception class), so they
/// never disagree. It lives in the core so that every library's error —
/// the store's, git's, the harness's, the proxy's, the server's — can name
/// one without depending on another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The input is malformed or breaks a rule (bad name, bad value, a
    /// timeline rule). CLI exit 2, HTTP 422.
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
    /// Something outside the store failed: a file, a git repository and its
    /// lock (`convo_git::Error`). Exit 2, HTTP 500.
    Failed,
}

impl ErrorKind {
    /// The lowercase name used in JSON error documents (`not_found`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::Ambiguous => "ambiguous",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Refused => "refused",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Failed => "failed",
        }
    }
}
