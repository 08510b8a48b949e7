//! The CLI's one error type and the one place that decides an error's exit
//! code and hint.
//!
//! Every library error carries an [`ErrorKind`] (`StoreError::kind`,
//! `convo_git::Error::kind`); the exit code is the kind's
//! ([`ErrorKind::exit_code`], one table with the HTTP statuses in
//! convo-core, docs/JSON.md), and the hints, which name CLI commands, are
//! here rather than in the libraries.

use convo_store::{ErrorKind, StoreError};
use std::process::ExitCode;

/// Exit code of a command that ran and found a problem (`verify`, `git
/// verify`, `check`, a diverging `replay`, a failed `run` turn, `git sync`
/// refusing to rebuild over rewritten history, `search` without hits).
pub const FOUND_PROBLEM: u8 = 1;

/// The exit code of each kind of error ([`ErrorKind::exit_code`]: the one
/// table, with the HTTP statuses).
pub fn exit_code(kind: ErrorKind) -> u8 {
    kind.exit_code()
}

/// The one error type of the CLI: a message, an optional hint, an exit code.
/// A closed standard output is one too, reported by nothing but its status.
#[derive(Debug)]
pub struct CommandError {
    message: String,
    hint: Option<String>,
    code: u8,
    closed: bool,
}

impl CommandError {
    /// Bad input or a usage error: exit 2.
    pub fn user(message: impl Into<String>) -> Self {
        CommandError::of_kind(ErrorKind::Invalid, message)
    }
    /// An error of `kind`, with that kind's exit code.
    pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Self {
        CommandError {
            message: message.into(),
            hint: None,
            code: exit_code(kind),
            closed: false,
        }
    }
    /// The command ran and found a problem: exit 1 ([`FOUND_PROBLEM`]).
    pub fn found_problem(message: impl Into<String>) -> Self {
        CommandError {
            code: FOUND_PROBLEM,
            ..CommandError::user(message)
        }
    }
    /// Standard output was closed (`convo log S | head`): end quietly.
    pub fn closed() -> Self {
        CommandError {
            message: String::new(),
            hint: None,
            code: crate::ui::CLOSED_PIPE,
            closed: true,
        }
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
    /// The same error, its message after `prefix` (`stdin line 3: …`).
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.message = format!("{prefix}{}", self.message);
        self
    }
    pub fn report(&self) {
        if self.closed {
            return;
        }
        // Messages quote user input (names, titles, file contents): shown,
        // never sent raw to the terminal.
        use convo_core::text::{Newlines, visible};
        eprintln!("error: {}", visible(&self.message, Newlines::Keep));
        if let Some(h) = &self.hint {
            eprintln!("hint: {}", visible(h, Newlines::Keep));
        }
    }
    pub fn message_text(&self) -> &str {
        &self.message
    }
    pub fn exit_code(&self) -> u8 {
        if self.closed {
            crate::ui::closed_status()
        } else {
            self.code
        }
    }
}

/// What the user can do about a store error, when there is something to say.
pub fn store_hint(e: &StoreError) -> Option<&'static str> {
    Some(match e {
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

/// What to say when the repository witnesses a rewritten store: never
/// `--rebuild`, which would erase the evidence.
pub const REWRITTEN_HINT: &str = "the repository still holds the earlier history: keep it as evidence \
     (`git --git-dir REPO log`), and check the store against a checkpoint with `convo verify \
     --checkpoint FILE`";

/// What the user can do about a projection error.
pub fn git_hint(e: &convo_git::Error) -> Option<&'static str> {
    match e {
        convo_git::Error::Store(e) => store_hint(e),
        convo_git::Error::Rewritten(_) => Some(REWRITTEN_HINT),
        convo_git::Error::NotProjection(_) => {
            Some("choose another --repo, or remove that directory")
        }
        convo_git::Error::LayoutMismatch { .. } => {
            Some("use another --repo for the other layout, or --rebuild")
        }
        convo_git::Error::Corrupt(_) => {
            Some("run `convo git sync --rebuild` to regenerate it from the store")
        }
        convo_git::Error::Busy { .. } => Some(
            "wait for that sync to finish (a `--follow` runs until stopped), or stop it; \
             a sync that was killed releases the lock by itself",
        ),
        convo_git::Error::OldFormat { .. } => {
            Some("run `convo git sync` to rebuild it in the current layout")
        }
        convo_git::Error::Git(_) | convo_git::Error::Io(_) => None,
    }
}

fn with_hint(c: CommandError, hint: Option<&str>) -> CommandError {
    match hint {
        Some(h) => c.with_hint(h),
        None => c,
    }
}

impl From<StoreError> for CommandError {
    /// The exit code follows the error's kind ([`exit_code`]): 2 bad
    /// input or ambiguous, 3 not found, 4 refused (sealed, taken, conflict),
    /// 5 store unavailable or corrupt.
    fn from(e: StoreError) -> Self {
        with_hint(
            CommandError::of_kind(e.kind(), e.to_string()),
            store_hint(&e),
        )
    }
}

impl From<convo_git::Error> for CommandError {
    /// A store error inside a projection exits as the store error would; a
    /// rewritten history is a finding (exit 1), the rest by kind.
    fn from(e: convo_git::Error) -> Self {
        let c = match &e {
            convo_git::Error::Rewritten(_) => CommandError::found_problem(e.to_string()),
            _ => CommandError::of_kind(e.kind(), e.to_string()),
        };
        with_hint(c, git_hint(&e))
    }
}

impl From<convo_harness::HarnessError> for CommandError {
    /// By kind, as every library error: a timeline held by another process
    /// or inside an open turn is refused (exit 4), like a store refusal.
    fn from(e: convo_harness::HarnessError) -> Self {
        use convo_harness::HarnessError;
        let c = CommandError::of_kind(e.kind(), e.to_string());
        match e {
            HarnessError::Store(s) => CommandError::from(s),
            HarnessError::Busy { .. } => c.with_hint(
                "wait for the other process, or fork a timeline of your own (convo session fork)",
            ),
            HarnessError::TurnOpen { .. } => c.with_hint(
                "pass --wait to wait for the turn to end, or fork a timeline of your own (convo session fork)",
            ),
            _ => c,
        }
    }
}

impl From<convo_server::ServeError> for CommandError {
    fn from(e: convo_server::ServeError) -> Self {
        match e {
            convo_server::ServeError::Store(e) => CommandError::from(e),
            convo_server::ServeError::Proxy(e) => CommandError::from(e),
            e @ convo_server::ServeError::NeedToken(_) => {
                CommandError::of_kind(e.kind(), e.to_string())
                    .with_hint("pass --token TOKEN (or set CONVO_TOKEN), or listen on 127.0.0.1")
            }
            other => CommandError::of_kind(other.kind(), other.to_string()),
        }
    }
}

impl From<convo_proxy::ProxyError> for CommandError {
    fn from(e: convo_proxy::ProxyError) -> Self {
        match e {
            convo_proxy::ProxyError::Replay(e) => CommandError::from(e),
            convo_proxy::ProxyError::Writer(s) => {
                let prefix = "cannot start recording: ";
                CommandError::from(s).prefixed(prefix)
            }
            other => CommandError::of_kind(other.kind(), other.to_string()),
        }
    }
}

impl From<std::io::Error> for CommandError {
    fn from(e: std::io::Error) -> Self {
        if crate::ui::is_closed(&e) {
            return CommandError::closed();
        }
        CommandError::user(e.to_string())
    }
}

pub type CmdResult<T = ExitCode> = Result<T, CommandError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_inside_git_sync_exits_like_the_store_error() {
        let store = StoreError::Busy(5);
        let direct = CommandError::from(StoreError::Busy(5));
        let via_git = CommandError::from(convo_git::Error::Store(store));
        assert_eq!(direct.exit_code(), 5);
        assert_eq!(via_git.exit_code(), direct.exit_code());
        assert_eq!(via_git.hint, direct.hint);
        let proxy = CommandError::from(convo_proxy::ProxyError::Writer(StoreError::NoStore(
            "/x".into(),
        )));
        assert_eq!(proxy.exit_code(), 3);
        assert!(
            proxy
                .message_text()
                .starts_with("cannot start recording: no store at /x")
        );
    }

    #[test]
    fn projection_errors_keep_their_exit_codes() {
        let busy = convo_git::Error::Busy {
            repo: "r".into(),
            pid: None,
        };
        assert_eq!(CommandError::from(busy).exit_code(), 2);
        let rewritten = convo_git::Error::Rewritten(vec![convo_store::Problem::new(
            convo_store::ProblemKind::Rewritten,
            "store",
            "a",
        )]);
        let c = CommandError::from(rewritten);
        assert_eq!(c.exit_code(), FOUND_PROBLEM);
        assert_eq!(c.hint.as_deref(), Some(REWRITTEN_HINT));
    }

    #[test]
    fn every_kind_has_its_documented_code() {
        let table = [
            (ErrorKind::Invalid, 2),
            (ErrorKind::Ambiguous, 2),
            (ErrorKind::Failed, 2),
            (ErrorKind::NotFound, 3),
            (ErrorKind::Refused, 4),
            (ErrorKind::Unavailable, 5),
            (ErrorKind::Corrupt, 5),
        ];
        for (kind, code) in table {
            assert_eq!(exit_code(kind), code, "{kind:?}");
        }
    }
}
