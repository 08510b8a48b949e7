//! One harness process per timeline at a time.
//!
//! Two processes driving turns on one timeline would interleave their nodes
//! (the store keeps the chain valid, but a `request` of one turn would land
//! in the other's submission). So `run`, `chat` and `replay` hold an
//! exclusive lock file per (session, branch) for as long as they use the
//! timeline: `chat` is refused at once with the holder's pid, `run` waits.
//! The lock is an OS file lock (released by the kernel if the process
//! dies), in a directory the caller chooses (the CLI: `$CONVO_HOME/locks`),
//! so it covers processes on one machine that share that home.
//!
//! A second lock per timeline, the *turn lock* ([`TurnLock`]), is held
//! exclusively by the harness only while a turn is open (invoke → complete)
//! and shared by every other writer of the timeline (`say`, `record`,
//! `state put/delete`, a fork from it, a promote) for its write. So no
//! write lands inside a turn: a writer either waits for the turn to end or
//! is refused ([`HarnessError::TurnOpen`], naming the turn), while writers
//! between turns never stand in each other's way (the store serializes
//! their transactions). The file holds the open
//! turn (submission, number, agent, holder) while it is open and is emptied
//! when the turn ends; a killed harness leaves it filled, and the next
//! taker closes that turn as interrupted ([`settle_interrupted`]).
//!
//! The open turn is also a row of the store (written with the invoke,
//! removed with the complete: [`convo_runtime::turns`]), which is what
//! writers that do not share this lock directory check: `convo serve`'s
//! API, and writers on other machines sharing a PostgreSQL store. A
//! writer here that finds a row whose holder runs on another machine is
//! refused; one whose holder ran here and is gone (its lock is free)
//! closes the turn as interrupted.

use crate::{HarnessError, Result, now_ms};
use convo_core::{BranchName, SessionId};
use convo_store::{Store, StoredNode};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// A held timeline lock; released when dropped.
#[derive(Debug)]
pub struct TimelineLock {
    file: File,
    path: PathBuf,
}

impl TimelineLock {
    /// The lock file of a timeline inside `dir`: the session id and the
    /// branch name in hex (whatever a name holds, the file name is safe).
    pub fn path(dir: &Path, session: &SessionId, branch: &BranchName) -> PathBuf {
        let hexname: String = branch
            .as_str()
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        dir.join(format!("{session}.{hexname}.lock"))
    }

    /// Takes the lock; with `wait`, blocks until the holder lets go,
    /// otherwise fails with [`HarnessError::Busy`]. `who` is written into
    /// the file for the next one's message.
    pub fn acquire(
        dir: &Path,
        session: &SessionId,
        branch: &BranchName,
        wait: bool,
        who: &str,
    ) -> Result<TimelineLock> {
        let path = Self::path(dir, session, branch);
        let (mut file, got) = open_locked(dir, &path, wait, Mode::Exclusive)?;
        if !got {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(HarnessError::Busy {
                session: session.to_string(),
                branch: branch.to_string(),
                holder: if holder.is_empty() {
                    "unknown process".to_owned()
                } else {
                    holder.to_owned()
                },
            });
        }
        let _ = file.set_len(0);
        let _ = file.rewind();
        let _ = write!(file, "{who}, pid {}", std::process::id());
        let _ = file.flush();
        Ok(TimelineLock { file, path })
    }

    /// Where the lock file is.
    pub fn file_path(&self) -> &Path {
        &self.path
    }
}

/// The turn a harness has open on a timeline (in the store, and in its
/// turn lock file for the next taker on this machine).
pub use convo_store::OpenTurn;

/// A held turn lock; released when dropped.
#[derive(Debug)]
pub struct TurnLock {
    file: File,
}

impl TurnLock {
    /// The turn lock file of a timeline inside `dir`.
    pub fn path(dir: &Path, session: &SessionId, branch: &BranchName) -> PathBuf {
        convo_runtime::turns::turn_lock_path(dir, session, branch)
    }

    /// Takes the turn lock of a timeline for a harness turn (exclusive:
    /// waits for the writes in progress). With `wait`, blocks while a turn
    /// is open; otherwise a held lock is [`HarnessError::TurnOpen`] naming
    /// the turn. Also returns the turn a dead holder left open, if any
    /// (close it with [`settle_interrupted`], then [`TurnLock::clear`]).
    pub fn acquire(
        dir: &Path,
        session: &SessionId,
        branch: &BranchName,
        wait: bool,
    ) -> Result<(TurnLock, Option<OpenTurn>)> {
        Self::take(dir, session, branch, wait, Mode::Exclusive)
    }

    /// Takes the turn lock of a timeline for a write between turns
    /// (shared: any number of writers hold it at once, only an open turn
    /// excludes them); waits or is refused as [`TurnLock::acquire`].
    pub fn acquire_shared(
        dir: &Path,
        session: &SessionId,
        branch: &BranchName,
        wait: bool,
    ) -> Result<(TurnLock, Option<OpenTurn>)> {
        Self::take(dir, session, branch, wait, Mode::Shared)
    }

    fn take(
        dir: &Path,
        session: &SessionId,
        branch: &BranchName,
        wait: bool,
        mode: Mode,
    ) -> Result<(TurnLock, Option<OpenTurn>)> {
        let path = Self::path(dir, session, branch);
        let (mut file, got) = open_locked(dir, &path, wait, mode)?;
        let left = read_turn(&mut file);
        if !got {
            // A writer between turns is only held off by a harness (the one
            // exclusive taker): its turn is written in the file, or about to
            // be (the turn is being opened).
            let (turn, holder) = match left {
                Some(t) => (format!("{branch}@{}", t.turn), t.holder),
                None => (format!("{branch}@next"), "a convo harness".to_owned()),
            };
            return Err(HarnessError::TurnOpen {
                session: session.to_string(),
                branch: branch.to_string(),
                turn,
                holder,
            });
        }
        Ok((TurnLock { file }, left))
    }

    /// Records the open turn in the file (for the next taker, should this
    /// process die before the turn ends).
    pub fn opened(&mut self, turn: &OpenTurn) {
        let _ = self.file.set_len(0);
        let _ = self.file.rewind();
        let _ = serde_json::to_writer(&mut self.file, turn);
        let _ = self.file.flush();
    }

    /// Forgets the open turn (it ended, or was settled).
    pub fn clear(&mut self) {
        let _ = self.file.set_len(0);
    }
}

impl Drop for TurnLock {
    /// Unlocks; the file keeps an open turn that was not cleared (the
    /// harness failed before its complete), for the next taker to settle.
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

fn read_turn(file: &mut File) -> Option<OpenTurn> {
    let mut text = String::new();
    let _ = file.rewind();
    file.read_to_string(&mut text).ok()?;
    serde_json::from_str(text.trim()).ok()
}

/// Closes the turn a dead harness left open on `branch`, as the store's
/// row or else its lock file (`left`) says, called holding the turn lock
/// file `held`: a row whose holder may live (its own lock file, on another
/// machine or under another home, still locked) refuses
/// ([`HarnessError::TurnOpen`]); otherwise the turn is closed as interrupted ([`convo_store::Ledger::close_interrupted`]: a
/// `complete` recording `{"failure": "interrupted"}`, carrying the
/// branch's working state, so the turn's kv writes are kept and
/// accounted). Returns it; `None` when no turn was left open. Call it
/// holding the turn lock.
pub fn settle_interrupted(
    store: &mut Store,
    session: &SessionId,
    branch: &BranchName,
    left: Option<&OpenTurn>,
    held: &Path,
) -> Result<Option<StoredNode>> {
    let held = std::path::absolute(held).unwrap_or_else(|_| held.to_path_buf());
    let rows = store.read(|tx| tx.open_turns())?;
    if left.is_none() && !rows.iter().any(|(s, b, _)| s == session && b == branch) {
        return Ok(None);
    }
    let out = store.transaction(|l| match l.open_turn(session, branch)? {
        Some(t)
            if std::path::Path::new(&t.lock) != held && !convo_runtime::turns::holder_gone(&t) =>
        {
            Err(convo_runtime::turns::turn_open(session, branch, &t))
        }
        Some(t) => l.close_interrupted(session, branch, &t, now_ms()),
        None => match left {
            Some(t) => l.close_interrupted(session, branch, t, now_ms()),
            None => Ok(None),
        },
    });
    match out {
        Err(convo_store::StoreError::TurnOpen {
            session,
            branch,
            turn,
            holder,
        }) => Err(HarnessError::TurnOpen {
            session,
            branch,
            turn,
            holder,
        }),
        other => Ok(other?),
    }
}

/// What a writer of a timeline holds while it writes: the turn lock, taken
/// (waiting for an open turn with `wait`, else refused), after closing a
/// turn a dead harness left open. `None` when the lock directory cannot be
/// used (a read-only home): no harness can hold a turn there either.
pub fn guard_timeline(
    dir: &Path,
    store: &mut Store,
    session: &SessionId,
    branch: &BranchName,
    wait: bool,
) -> Result<Option<TurnLock>> {
    let (mut lock, left) = match TurnLock::acquire_shared(dir, session, branch, wait) {
        Err(HarnessError::Io { .. }) => return Ok(None),
        other => other?,
    };
    if store.branch(session, branch).is_ok() {
        let held = TurnLock::path(dir, session, branch);
        settle_interrupted(store, session, branch, left.as_ref(), &held)?;
    }
    if left.is_some() {
        lock.clear();
    }
    Ok(Some(lock))
}

impl Drop for TimelineLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// How a lock file is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// One holder at a time.
    Exclusive,
    /// Any number of holders, none while an exclusive one holds it.
    Shared,
}

/// Opens (creating) the lock file at `path` in `dir` and takes its OS
/// lock: waiting for it when `wait`, else `false` when another process
/// holds it (exclusively, for a shared taker).
fn open_locked(dir: &Path, path: &Path, wait: bool, mode: Mode) -> Result<(std::fs::File, bool)> {
    std::fs::create_dir_all(dir)
        .map_err(|e| HarnessError::io(format!("cannot create {}", dir.display()), e))?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| HarnessError::io(format!("cannot open {}", path.display()), e))?;
    let got = match (wait, mode) {
        (true, Mode::Exclusive) => file.lock().map(|_| true),
        (true, Mode::Shared) => file.lock_shared().map(|_| true),
        (false, Mode::Exclusive) => try_taken(file.try_lock()),
        (false, Mode::Shared) => try_taken(file.try_lock_shared()),
    }
    .map_err(|e| HarnessError::io(format!("cannot lock {}", path.display()), e))?;
    Ok((file, got))
}

/// A `try_lock`'s answer: taken, or held by another (`false`).
fn try_taken(r: std::result::Result<(), std::fs::TryLockError>) -> std::io::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_with_the_first_ones_name() {
        let dir = tempfile::tempdir().unwrap();
        let s = SessionId::new_random();
        let b = BranchName::new("fix.one").unwrap();
        let first = TimelineLock::acquire(dir.path(), &s, &b, false, "convo chat").unwrap();
        assert!(!first.file_path().to_string_lossy().contains("fix.one"));
        match TimelineLock::acquire(dir.path(), &s, &b, false, "convo chat") {
            Err(HarnessError::Busy { holder, .. }) => assert!(holder.contains("convo chat")),
            other => panic!("expected Busy, got {other:?}"),
        }
        // Another timeline of the same session is free.
        TimelineLock::acquire(dir.path(), &s, &BranchName::main(), false, "x").unwrap();
        drop(first);
        TimelineLock::acquire(dir.path(), &s, &b, false, "convo chat").unwrap();
    }

    #[test]
    fn an_open_turn_refuses_a_second_taker_naming_the_turn_and_a_dead_one_leaves_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = SessionId::new_random();
        let b = BranchName::main();
        let (mut first, left) = TurnLock::acquire(dir.path(), &s, &b, false).unwrap();
        assert!(left.is_none());
        let t = OpenTurn {
            submission: "ab".repeat(32),
            turn: 3,
            agent: "bot".into(),
            holder: "convo run, pid 1".into(),
            host: "here".into(),
            lock: String::new(),
        };
        first.opened(&t);
        match TurnLock::acquire(dir.path(), &s, &b, false) {
            Err(HarnessError::TurnOpen { turn, holder, .. }) => {
                assert_eq!(turn, "main@3");
                assert!(holder.contains("convo run"));
            }
            other => panic!("expected TurnOpen, got {other:?}"),
        }
        drop(first);
        // A holder that dies keeps the file filled: the next taker reads the turn.
        let p = TurnLock::path(dir.path(), &s, &b);
        std::fs::write(&p, serde_json::to_vec(&t).unwrap()).unwrap();
        let (_, left) = TurnLock::acquire(dir.path(), &s, &b, false).unwrap();
        assert_eq!(left, Some(t));
    }
}
