//! One sync at a time per repository, and recovery from a killed one.
//!
//! `convo/lock` is held with an OS file lock (`flock`) for as long as a
//! sync runs; the kernel releases it when the process dies, however it
//! dies, so a lock left by a dead convo is never mistaken for a live one.
//! A second sync finds it held and stops with [`Error::Busy`], naming the
//! process that holds it; it never touches the repository.
//!
//! `convo/dirty` exists while a batch writes packs and moves refs (and
//! while packs are consolidated, then listing the packs being removed).
//! When a sync starts, takes the lock and finds `dirty`, the previous sync
//! died in the middle: the ref lock files (`*.lock` under `refs/`, and
//! `HEAD.lock`, `packed-refs.lock`) made since `dirty` was written are that
//! dead process's and are removed, as are the packs it was removing. A git
//! lock older than `dirty` is left alone: it is not convo's. Temporary pack
//! files (`tmp-convo-*`) are always convo's and are removed.

use crate::pack::TMP_PREFIX;
use crate::{Error, Result};
use convo_store::Cause;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(Cause::with_context(format!("{}", path.display()), e))
}

/// The held sync lock of one repository.
#[derive(Debug)]
pub struct SyncLock {
    _file: std::fs::File,
    repo: PathBuf,
}

impl SyncLock {
    /// Takes the lock of `repo` (whose `convo/` directory exists), then
    /// cleans up after a sync that died.
    pub fn acquire(repo: &Path) -> Result<SyncLock> {
        let path = repo.join("convo").join("lock");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path)
                    .ok()
                    .and_then(|t| t.trim().parse::<u32>().ok());
                return Err(Error::Busy {
                    repo: repo.display().to_string(),
                    pid: holder,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path, e)),
        }
        file.set_len(0).map_err(|e| io(&path, e))?;
        writeln!(file, "{}", std::process::id()).map_err(|e| io(&path, e))?;
        let me = SyncLock {
            _file: file,
            repo: repo.to_owned(),
        };
        // A checkpoint being published writes a temporary pack and a ref
        // lock: let it finish before cleaning up after a dead sync.
        let _publishing = publish_lock(repo)?;
        me.recover()?;
        Ok(me)
    }

    fn marker(&self) -> PathBuf {
        self.repo.join("convo").join("dirty")
    }

    /// Marks the start of writes that a kill could leave half done;
    /// `packs` are the pack files about to be removed.
    pub fn begin(&self, packs: &[PathBuf]) -> Result<()> {
        let mut text = String::new();
        for p in packs {
            if let Some(n) = p.file_name().and_then(|n| n.to_str()) {
                text.push_str(&format!("remove {n}\n"));
            }
        }
        let m = self.marker();
        std::fs::write(&m, text).map_err(|e| io(&m, e))
    }

    /// Marks the end of those writes.
    pub fn end(&self) -> Result<()> {
        let m = self.marker();
        match std::fs::remove_file(&m) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&m, e)),
        }
    }

    fn recover(&self) -> Result<()> {
        let pack_dir = self.repo.join("objects").join("pack");
        if let Ok(rd) = std::fs::read_dir(&pack_dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                    let p = e.path();
                    std::fs::remove_file(&p).map_err(|e| io(&p, e))?;
                }
            }
        }
        let m = self.marker();
        let since = match std::fs::metadata(&m).and_then(|md| md.modified()) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(&m, e)),
        };
        let text = std::fs::read_to_string(&m).map_err(|e| io(&m, e))?;
        for line in text.lines() {
            let Some(name) = line.strip_prefix("remove ") else {
                continue;
            };
            if name.contains('/') || !name.starts_with("pack-") {
                continue;
            }
            let stem = name.trim_end_matches(".pack");
            for ext in ["idx", "pack", "rev", "bitmap", "mtimes"] {
                remove_if_exists(&pack_dir.join(format!("{stem}.{ext}")))?;
            }
        }
        let mut locks = Vec::new();
        find_locks(&self.repo.join("refs"), &mut locks);
        for top in ["HEAD.lock", "packed-refs.lock"] {
            locks.push(self.repo.join(top));
        }
        for l in locks {
            let modified = std::fs::metadata(&l).and_then(|m| m.modified());
            if let Ok(t) = modified
                && is_since(t, since)
            {
                remove_if_exists(&l)?;
            }
        }
        self.end()
    }
}

/// Takes `convo/publishing` of `repo`, waiting for it: held while a
/// checkpoint is published (`crate::checkpoints`) and by a sync while it
/// cleans up after a dead one or empties the repository, which keeps the
/// published checkpoints. Short waits only: neither holds it for long.
pub fn publish_lock(repo: &Path) -> Result<std::fs::File> {
    let path = repo.join("convo").join("publishing");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io(&path, e))?;
    file.lock().map_err(|e| io(&path, e))?;
    Ok(file)
}

fn is_since(t: SystemTime, since: SystemTime) -> bool {
    t >= since
}

fn remove_if_exists(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(p, e)),
    }
}

fn find_locks(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => find_locks(&p, out),
            Ok(_) if p.extension().is_some_and(|x| x == "lock") => out.push(p),
            _ => {}
        }
    }
}
