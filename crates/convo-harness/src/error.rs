//! The harness's errors. An agent that fails is not an error: its turn ends
//! with a `complete` recording the failure ([`crate::Failure`]). These are
//! the failures of the harness itself.

use convo_store::{ErrorKind, StoreError};

/// Why the harness could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A store operation failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The agent command could not be started.
    #[error("cannot start the agent `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The agent command exited before it listened on its port.
    #[error("the agent `{cmd}` exited ({status}) before it answered on port {port}")]
    AgentExited {
        /// The command line.
        cmd: String,
        /// Its port.
        port: u16,
        /// How it exited.
        status: String,
    },
    /// The agent command did not listen on its port in time.
    #[error("the agent `{cmd}` did not answer on port {port} within {secs} s")]
    AgentStartTimeout {
        /// The command line.
        cmd: String,
        /// Its port.
        port: u16,
        /// How long the harness waited.
        secs: u64,
    },
    /// A URL the harness cannot use.
    #[error("{what} `{url}`: {why}")]
    BadUrl {
        /// Which URL (agent, upstream).
        what: &'static str,
        /// The URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// No agent was given, or both kinds were.
    #[error("{0}")]
    Usage(String),
    /// Another convo process holds the timeline.
    #[error(
        "branch `{branch}` of session {session} is in use by another convo run/chat/replay ({holder})"
    )]
    Busy {
        /// The session.
        session: String,
        /// The timeline.
        branch: String,
        /// Who holds it, as far as known.
        holder: String,
    },
    /// A harness turn is open on the timeline: a write now would land inside it.
    #[error(
        "branch `{branch}` of session {session} is inside turn {turn}, open by {holder}: a write now would land inside that turn"
    )]
    TurnOpen {
        /// The session.
        session: String,
        /// The timeline.
        branch: String,
        /// The turn, as `BRANCH@TURN`.
        turn: String,
        /// Who holds it.
        holder: String,
    },
    /// A local I/O failure (the services server, a lock file).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl HarnessError {
    /// What kind of failure this is ([`ErrorKind`]): each surface maps it
    /// in its one place (exit code, HTTP status). A timeline held by
    /// another process is refused, as a store write into an open turn is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            HarnessError::Store(e) => e.kind(),
            HarnessError::Busy { .. } | HarnessError::TurnOpen { .. } => ErrorKind::Refused,
            HarnessError::BadUrl { .. } | HarnessError::Usage(_) => ErrorKind::Invalid,
            HarnessError::Spawn { .. }
            | HarnessError::AgentExited { .. }
            | HarnessError::AgentStartTimeout { .. }
            | HarnessError::Io { .. } => ErrorKind::Failed,
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        HarnessError::Io {
            what: what.into(),
            source,
        }
    }
}
