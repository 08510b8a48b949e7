//! Turns nobody can break: what every writer of a timeline checks.
//!
//! A harness (`convo run`, `chat`, `replay`) keeps the turn it has open in
//! the store ([`OpenTurn`], written in the invoke's transaction, removed in
//! the complete's) and holds an OS file lock for it in its lock directory
//! (`$CONVO_HOME/locks`, [`turn_lock_path`]) from invoke to complete.
//! Every other writer ([`guard`], inside its own write transaction) reads
//! the open turn of the timeline it writes:
//!
//! - none: it writes;
//! - one whose holder is gone (on this machine, and its lock file is
//!   free: the kernel released it when the process died): the turn is
//!   closed as interrupted ([`convo_store::Ledger::close_interrupted`]),
//!   then it writes;
//! - otherwise (the holder lives, or runs on another machine sharing a
//!   PostgreSQL store, where its liveness cannot be seen): refused,
//!   [`StoreError::TurnOpen`] naming `BRANCH@TURN` (HTTP 409, exit 4).
//!
//! The row makes the lock visible to every writer of the store; the file
//! lock only tells a live holder from a killed one.

use convo_core::{BranchName, SessionId};
use convo_store::{Ledger, OpenTurn, Result, StoreError};
use std::path::{Path, PathBuf};

/// This machine's name (as an open turn records its holder's).
pub fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The file a harness locks while a turn of `branch` is open, inside the
/// lock directory: the session id and the branch name in hex (whatever a
/// name holds, the file name is safe).
pub fn turn_lock_path(dir: &Path, session: &SessionId, branch: &BranchName) -> PathBuf {
    let hexname: String = branch
        .as_str()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    dir.join(format!("{session}.{hexname}.turn"))
}

/// Whether the holder of an open turn is gone: it ran on this machine and
/// its lock file in `dir` is not locked (or not there). Unknown (no lock
/// directory, another machine): not gone.
pub fn holder_gone(
    dir: Option<&Path>,
    session: &SessionId,
    branch: &BranchName,
    turn: &OpenTurn,
) -> bool {
    let Some(dir) = dir else {
        return false;
    };
    if turn.host != this_host() {
        return false;
    }
    let file = match std::fs::File::open(turn_lock_path(dir, session, branch)) {
        Ok(f) => f,
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    match file.try_lock_shared() {
        Ok(()) => true,
        Err(std::fs::TryLockError::WouldBlock) => false,
        Err(std::fs::TryLockError::Error(_)) => false,
    }
}

/// The check every writer of a timeline makes inside its write
/// transaction (see the module docs): `Ok` to write (after closing a
/// killed holder's turn as interrupted), else [`StoreError::TurnOpen`].
pub fn guard(
    l: &mut Ledger<'_>,
    session: &SessionId,
    branch: &BranchName,
    lock_dir: Option<&Path>,
    now: convo_core::Millis,
) -> Result<()> {
    let Some(turn) = l.open_turn(session, branch)? else {
        return Ok(());
    };
    if holder_gone(lock_dir, session, branch, &turn) {
        l.close_interrupted(session, branch, &turn, now)?;
        return Ok(());
    }
    Err(turn_open(session, branch, &turn))
}

/// The refusal naming an open turn.
pub fn turn_open(session: &SessionId, branch: &BranchName, turn: &OpenTurn) -> StoreError {
    StoreError::TurnOpen {
        session: session.to_string(),
        branch: branch.to_string(),
        turn: format!("{branch}@{}", turn.turn),
        holder: if turn.host.is_empty() || turn.host == this_host() {
            turn.holder.clone()
        } else {
            format!("{} on {}", turn.holder, turn.host)
        },
    }
}
