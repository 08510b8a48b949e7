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

use crate::{HarnessError, Result};
use convo_core::{BranchName, SessionId};
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
        std::fs::create_dir_all(dir)
            .map_err(|e| HarnessError::io(format!("cannot create {}", dir.display()), e))?;
        let path = Self::path(dir, session, branch);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| HarnessError::io(format!("cannot open {}", path.display()), e))?;
        let got = if wait {
            file.lock().map(|_| true)
        } else {
            match file.try_lock() {
                Ok(()) => Ok(true),
                Err(std::fs::TryLockError::WouldBlock) => Ok(false),
                Err(std::fs::TryLockError::Error(e)) => Err(e),
            }
        }
        .map_err(|e| HarnessError::io(format!("cannot lock {}", path.display()), e))?;
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

impl Drop for TimelineLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
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
}
