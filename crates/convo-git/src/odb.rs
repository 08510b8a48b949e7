//! Refs are updated in one gix transaction per batch.

use crate::{Error, Result};
use convo_store::Cause;
use gix::ObjectId;

/// A ref change to apply at the end of a batch.
#[derive(Debug, Clone)]
pub enum RefChange {
    Set(String, ObjectId),
    Delete(String),
    Head(String),
}

/// Applies ref changes in one transaction; returns how many refs changed.
pub fn apply_refs(repo: &gix::Repository, changes: Vec<RefChange>) -> Result<u64> {
    use gix::refs::Target;
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    if changes.is_empty() {
        return Ok(0);
    }
    // Later changes to the same ref win; a transaction takes each ref once.
    let mut last: Vec<(String, RefChange)> = Vec::new();
    for c in changes {
        let name = match &c {
            RefChange::Set(n, _) | RefChange::Delete(n) => n.clone(),
            RefChange::Head(_) => "HEAD".to_owned(),
        };
        last.retain(|(n, _)| *n != name);
        last.push((name, c));
    }
    let log = || LogChange {
        mode: RefLog::AndReference,
        force_create_reflog: false,
        message: "convo git sync".into(),
    };
    let mut edits = Vec::new();
    for (name, c) in last {
        let fullname: gix::refs::FullName = name
            .as_str()
            .try_into()
            .map_err(|e| Error::Git(Cause::with_context(format!("ref {name}"), e)))?;
        let change = match c {
            RefChange::Set(_, id) => Change::Update {
                log: log(),
                expected: PreviousValue::Any,
                new: Target::Object(id),
            },
            RefChange::Delete(_) => {
                if repo
                    .try_find_reference(name.as_str())
                    .map_err(|e| Error::Git(Cause::from_error(e)))?
                    .is_none()
                {
                    continue;
                }
                Change::Delete {
                    expected: PreviousValue::Any,
                    log: RefLog::AndReference,
                }
            }
            RefChange::Head(target) => {
                let t: gix::refs::FullName = target
                    .as_str()
                    .try_into()
                    .map_err(|e| Error::Git(Cause::with_context(format!("ref {target}"), e)))?;
                Change::Update {
                    log: log(),
                    expected: PreviousValue::Any,
                    new: Target::Symbolic(t),
                }
            }
        };
        edits.push(RefEdit {
            change,
            name: fullname,
            deref: false,
        });
    }
    let me = gix::actor::SignatureRef {
        name: "convo".into(),
        email: "convo@localhost".into(),
        time: "0 +0000",
    };
    let n = edits.len() as u64;
    // convo holds its own lock (see `lock`), so a ref lock that exists is a
    // concurrent git's: fail at once rather than wait.
    let fail = gix::lock::acquire::Fail::Immediately;
    let t = repo
        .refs
        .transaction()
        .prepare(edits, fail, fail)
        .map_err(|e| Error::Git(Cause::with_context("updating refs", e)))?;
    crate::pause_point("refs-locked");
    t.commit(Some(me))
        .map_err(|e| Error::Git(Cause::with_context("updating refs", e)))?;
    Ok(n)
}

/// Creates refs that must not exist yet (published checkpoints), in one
/// transaction.
pub fn create_refs(repo: &gix::Repository, refs: &[(String, ObjectId)]) -> Result<()> {
    use gix::refs::Target;
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    let mut edits = Vec::new();
    for (name, id) in refs {
        let fullname: gix::refs::FullName = name
            .as_str()
            .try_into()
            .map_err(|e| Error::Git(Cause::with_context(format!("ref {name}"), e)))?;
        edits.push(RefEdit {
            change: Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "convo checkpoint".into(),
                },
                expected: PreviousValue::MustNotExist,
                new: Target::Object(*id),
            },
            name: fullname,
            deref: false,
        });
    }
    let me = gix::actor::SignatureRef {
        name: "convo".into(),
        email: "convo@localhost".into(),
        time: "0 +0000",
    };
    let wait =
        gix::lock::acquire::Fail::AfterDurationWithBackoff(std::time::Duration::from_secs(2));
    repo.refs
        .transaction()
        .prepare(edits, wait, wait)
        .map_err(|e| Error::Git(Cause::with_context("creating refs", e)))?
        .commit(Some(me))
        .map_err(|e| Error::Git(Cause::with_context("creating refs", e)))?;
    Ok(())
}
