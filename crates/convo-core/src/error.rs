//! What kind of failure an error is, below every library.

/// What kind of failure an error is: the one fact every surface maps to
/// its own convention. The exit code and the HTTP status are decided
/// together in one table ([`ErrorKind::exit_code`],
/// [`ErrorKind::http_status`]); the CLI adds a hint in `convo-cli`'s
/// `commands::error`, Python maps the kind to an exception class; so they
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
    /// Every kind, in the order of the table below.
    pub const ALL: [ErrorKind; 7] = [
        ErrorKind::Invalid,
        ErrorKind::NotFound,
        ErrorKind::Ambiguous,
        ErrorKind::Refused,
        ErrorKind::Unavailable,
        ErrorKind::Corrupt,
        ErrorKind::Failed,
    ];

    /// The one table: each kind's CLI exit code and HTTP status
    /// (docs/JSON.md).
    const fn codes(self) -> (u8, u16) {
        match self {
            ErrorKind::Invalid => (2, 422),
            ErrorKind::NotFound => (3, 404),
            ErrorKind::Ambiguous => (2, 400),
            ErrorKind::Refused => (4, 409),
            ErrorKind::Unavailable => (5, 503),
            ErrorKind::Corrupt => (5, 500),
            ErrorKind::Failed => (2, 500),
        }
    }

    /// The CLI's exit code for this kind.
    pub const fn exit_code(self) -> u8 {
        self.codes().0
    }

    /// The HTTP status for this kind.
    pub const fn http_status(self) -> u16 {
        self.codes().1
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
            ErrorKind::Failed => "failed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table as docs/JSON.md states it.
    #[test]
    fn each_kind_has_one_exit_code_and_one_status() {
        let table: Vec<(&str, u8, u16)> = ErrorKind::ALL
            .iter()
            .map(|k| (k.as_str(), k.exit_code(), k.http_status()))
            .collect();
        assert_eq!(
            table,
            [
                ("invalid", 2, 422),
                ("not_found", 3, 404),
                ("ambiguous", 2, 400),
                ("refused", 4, 409),
                ("unavailable", 5, 503),
                ("corrupt", 5, 500),
                ("failed", 2, 500),
            ]
        );
    }
}
