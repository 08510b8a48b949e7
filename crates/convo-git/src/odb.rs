//! Objects are built in memory and written as one pack per batch (never as
//! loose objects); refs are updated in one gix transaction per batch.

use crate::{Error, Result};
use gix::ObjectId;
use gix::objs::{Kind, WriteTo};
use std::collections::HashMap;

/// Objects made in this batch, not yet in the repository.
#[derive(Debug)]
pub struct Pending {
    objects: Vec<(ObjectId, Kind, Vec<u8>)>,
    index: HashMap<ObjectId, usize>,
    bytes: usize,
}

impl Pending {
    pub fn new() -> Self {
        Pending {
            objects: Vec::new(),
            index: HashMap::new(),
            bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds raw object data; returns its id.
    pub fn add(&mut self, kind: Kind, data: Vec<u8>) -> Result<ObjectId> {
        let id = gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, &data)
            .map_err(|e| Error::Git(e.to_string()))?;
        if !self.index.contains_key(&id) {
            self.bytes += data.len();
            self.index.insert(id, self.objects.len());
            self.objects.push((id, kind, data));
        }
        Ok(id)
    }

    pub fn blob(&mut self, data: &[u8]) -> Result<ObjectId> {
        self.add(Kind::Blob, data.to_vec())
    }

    pub fn write(&mut self, obj: &impl WriteTo) -> Result<ObjectId> {
        let mut buf = Vec::with_capacity(obj.size() as usize);
        obj.write_to(&mut buf)
            .map_err(|e| Error::Git(e.to_string()))?;
        self.add(obj.kind(), buf)
    }

    /// The data of an object made in this batch.
    pub fn get(&self, id: &ObjectId) -> Option<&[u8]> {
        self.index.get(id).map(|&i| self.objects[i].2.as_slice())
    }

    /// Writes every pending object into one new pack (with its index) in
    /// `repo`, atomically: a crash leaves either the whole pack or none.
    pub fn flush(&mut self, repo: &gix::Repository) -> Result<()> {
        use gix_pack::data::output;
        if self.objects.is_empty() {
            return Ok(());
        }
        let git = |e: &dyn std::fmt::Display| Error::Git(e.to_string());
        let mut entries = Vec::with_capacity(self.objects.len());
        for (id, kind, data) in &self.objects {
            let count = output::Count {
                id: *id,
                entry_pack_location: output::count::PackLocation::NotLookedUp,
            };
            let obj = gix::objs::Data {
                kind: *kind,
                object_hash: gix::hash::Kind::Sha1,
                data,
            };
            entries.push(
                output::Entry::from_data(&count, &obj, gix::zlib::Compression::BEST_SPEED)
                    .map_err(|e| git(&e))?,
            );
        }
        let n = u32::try_from(entries.len()).map_err(|e| git(&e))?;
        let mut pack = Vec::with_capacity(self.bytes / 2 + 1024);
        {
            let mut writer = output::bytes::FromEntriesIter::new(
                std::iter::once(Ok(entries)),
                &mut pack,
                n,
                gix_pack::data::Version::V2,
                gix::hash::Kind::Sha1,
            );
            for step in writer.by_ref() {
                step.map_err(|e| git(&e))?;
            }
        }
        let dir = repo.objects.store_ref().path().join("pack");
        std::fs::create_dir_all(&dir).map_err(|e| git(&e))?;
        let outcome = gix_pack::Bundle::write_to_directory(
            &mut pack.as_slice(),
            Some(&dir),
            &mut gix::progress::Discard,
            &std::sync::atomic::AtomicBool::new(false),
            None::<gix::objs::find::Never>,
            gix::hash::Kind::Sha1,
            gix_pack::bundle::write::Options::default(),
        )
        .map_err(|e| git(&e))?;
        // The `.keep` guards a fetched pack until its refs exist; ours are
        // written next, and a kept pack would never be repacked by `git gc`.
        if let Some(keep) = outcome.keep_path {
            std::fs::remove_file(&keep).map_err(|e| git(&e))?;
        }
        self.objects.clear();
        self.index.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// Reads an object's data from the batch or the repository.
pub fn read(pending: &Pending, repo: &gix::Repository, id: &ObjectId) -> Result<Vec<u8>> {
    if let Some(d) = pending.get(id) {
        return Ok(d.to_vec());
    }
    let obj = repo
        .find_object(*id)
        .map_err(|e| Error::Git(format!("object {id}: {e}")))?;
    Ok(obj.data.clone())
}

/// A ref change to apply at the end of a batch.
#[derive(Debug, Clone)]
pub enum RefChange {
    Set(String, ObjectId),
    Delete(String),
    Head(String),
}

/// Applies ref changes in one transaction.
pub fn apply_refs(repo: &gix::Repository, changes: Vec<RefChange>) -> Result<()> {
    use gix::refs::Target;
    use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};
    if changes.is_empty() {
        return Ok(());
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
            .map_err(|e| Error::Git(format!("ref {name}: {e}")))?;
        let change = match c {
            RefChange::Set(_, id) => Change::Update {
                log: log(),
                expected: PreviousValue::Any,
                new: Target::Object(id),
            },
            RefChange::Delete(_) => {
                if repo
                    .try_find_reference(name.as_str())
                    .map_err(|e| Error::Git(e.to_string()))?
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
                    .map_err(|e| Error::Git(format!("ref {target}: {e}")))?;
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
    repo.edit_references_as(edits, Some(me))
        .map_err(|e| Error::Git(format!("updating refs: {e}")))?;
    Ok(())
}
