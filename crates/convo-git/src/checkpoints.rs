//! Signed checkpoints published in the conversations repository.
//!
//! `convo checkpoint --git REPO` writes a checkpoint (the JSON document of
//! `convo_store::Checkpoint`, signed by its own Ed25519 key) as an annotated
//! tag `refs/tags/convo/checkpoint/{cursor:020}-{time}`: a tag object whose
//! message is a subject line and the checkpoint, pointing at a blob that
//! holds the checkpoint alone (what [`published`] reads). Tags are created,
//! never moved or deleted by convo: `convo git sync` leaves them alone,
//! and when it empties the repository (a `--rebuild`, or rewriting it after
//! a redaction) it writes them back, byte for byte, with the same ids.
//! `git gc` keeps them (they are refs); a clone or a push of `refs/tags/*`
//! carries them elsewhere, out of the store writer's reach.
//!
//! Publishing takes `convo/publishing` (see [`crate::lock::publish_lock`]),
//! not the sync lock, so it works while a `convo git sync --follow` runs.

use crate::lock::publish_lock;
use crate::odb::RefChange;
use crate::pack::Pending;
use crate::{Error, Result};
use convo_store::Cause;
use gix::ObjectId;
use gix::objs::Kind;
use std::path::Path;

/// Where the tags live.
pub const PREFIX: &str = "refs/tags/convo/checkpoint/";

/// The tag name (under [`PREFIX`]) of a checkpoint at `cursor` taken at
/// `time_ms`: sorts by cursor, then time.
pub fn tag_name(cursor: u64, time_ms: i64) -> String {
    format!("{cursor:020}-{}", time_ms.max(0))
}

/// A published checkpoint kept across a rebuild: the tag's and the blob's
/// raw data.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Saved {
    name: String,
    tag: Vec<u8>,
    blob: Vec<u8>,
}

fn git(what: &str, e: impl Into<convo_store::BoxError>) -> Error {
    Error::Git(Cause::with_context(what, e))
}

/// Publishes `checkpoint` (its JSON document) in the repository at `path`
/// as tag `name` (see [`tag_name`]), with `subject` as the message's first
/// line, tagged at `time_ms`. Returns the full ref name. Refuses to replace
/// an existing tag.
pub fn publish(
    path: &Path,
    name: &str,
    subject: &str,
    checkpoint: &[u8],
    time_ms: i64,
) -> Result<String> {
    if !path.join("convo").join("layout").exists() {
        return Err(Error::NotProjection(path.display().to_string()));
    }
    let _lock = publish_lock(path)?;
    let repo = crate::git_open(path)?;
    let full = format!("{PREFIX}{name}");
    if repo
        .try_find_reference(full.as_str())
        .map_err(|e| git(&full, e))?
        .is_some()
    {
        return Err(Error::git(format!("{full} exists already")));
    }
    let mut p = Pending::new();
    let blob = p.blob(checkpoint)?;
    let mut message = format!("{subject}\n\n").into_bytes();
    message.extend_from_slice(checkpoint);
    if !message.ends_with(b"\n") {
        message.push(b'\n');
    }
    let tag = gix::objs::Tag {
        target: blob,
        target_kind: Kind::Blob,
        name: format!("convo/checkpoint/{name}").into(),
        tagger: Some(crate::dag::signature("convo", time_ms)),
        message: message.into(),
        signature: None,
    };
    let id = p.write(&tag)?;
    p.flush(&repo)?;
    crate::odb::create_refs(&repo, &[(full.clone(), id)])?;
    Ok(full)
}

/// A published checkpoint: its ref, and its bytes or why they cannot be read.
pub type Published = (String, std::result::Result<Vec<u8>, String>);

/// Every checkpoint published in the repository at `path`, sorted by tag
/// name: the ref and the checkpoint's bytes, or why they cannot be read.
pub fn published(path: &Path) -> Result<Vec<Published>> {
    let repo = crate::git_open(path)?;
    let mut out = Vec::new();
    for (name, id) in refs(&repo)? {
        out.push((name, read(&repo, id).map(|(_, blob)| blob)));
    }
    Ok(out)
}

fn refs(repo: &gix::Repository) -> Result<Vec<(String, ObjectId)>> {
    let platform = repo.references().map_err(|e| git("listing refs", e))?;
    let mut out = Vec::new();
    for r in platform.all().map_err(|e| git("listing refs", e))? {
        let r = r.map_err(|e| git("listing refs", e))?;
        let name = r.name().as_bstr().to_string();
        if !name.starts_with(PREFIX) {
            continue;
        }
        if let Some(id) = r.target().try_id() {
            out.push((name, id.to_owned()));
        }
    }
    out.sort();
    Ok(out)
}

/// The tag's data and its blob's.
fn read(repo: &gix::Repository, id: ObjectId) -> std::result::Result<(Vec<u8>, Vec<u8>), String> {
    let obj = repo
        .find_object(id)
        .map_err(|e| format!("object {id}: {e}"))?;
    if obj.kind != Kind::Tag {
        return Err(format!("{id} is a {}, not a tag", obj.kind));
    }
    let tag_data = obj.data.clone();
    let tag = gix::objs::TagRef::from_bytes(&tag_data, gix::hash::Kind::Sha1)
        .map_err(|e| format!("tag {id}: {e}"))?;
    let target = tag.target();
    let blob = repo
        .find_object(target)
        .map_err(|e| format!("object {target}: {e}"))?;
    if blob.kind != Kind::Blob {
        return Err(format!("tag {id} points at a {}, not a blob", blob.kind));
    }
    Ok((tag_data, blob.data.clone()))
}

/// The file holding saved checkpoints while the repository is emptied, so
/// that a sync killed before writing them back restores them next time.
pub const SAVED_FILE: &str = "checkpoints-saved";

fn saved_file(path: &Path) -> std::path::PathBuf {
    path.join("convo").join(SAVED_FILE)
}

fn load_saved(path: &Path) -> Result<Vec<Saved>> {
    let f = saved_file(path);
    match std::fs::read(&f) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::Corrupt(Cause::with_context(format!("{}", f.display()), e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::Io(Cause::with_context(
            format!("{}", f.display()),
            e,
        ))),
    }
}

/// Reads every published checkpoint of the repository at `path` (if it
/// is one gix opens), to write them back after it is emptied, and keeps
/// them in `convo/checkpoints-saved` until [`restore`] has (with those a
/// killed sync left there).
pub fn save(path: &Path) -> Result<Vec<Saved>> {
    let mut out = load_saved(path)?;
    if let Ok(repo) = crate::git_open(path) {
        for (name, id) in refs(&repo)? {
            // One that cannot be read is not ours to keep (nor to fail on).
            if let Ok((tag, blob)) = read(&repo, id)
                && !out.iter().any(|s| s.name == name)
            {
                out.push(Saved { name, tag, blob });
            }
        }
    }
    if !out.is_empty() {
        let f = saved_file(path);
        let tmp = f.with_extension("tmp");
        let text = serde_json::to_vec(&out).map_err(|e| Error::Io(Cause::from_error(e)))?;
        std::fs::write(&tmp, text)
            .map_err(|e| Error::Io(Cause::with_context(format!("{}", tmp.display()), e)))?;
        std::fs::rename(&tmp, &f)
            .map_err(|e| Error::Io(Cause::with_context(format!("{}", f.display()), e)))?;
    }
    Ok(out)
}

/// Writes `saved` back into the repository at `path`: the same objects
/// (so the same ids) and refs; then forgets the saved copy.
pub fn restore(path: &Path, saved: &[Saved]) -> Result<()> {
    if !saved.is_empty() {
        let repo = crate::git_open(path)?;
        let mut p = Pending::new();
        let mut refs = Vec::new();
        for s in saved {
            p.add(Kind::Blob, s.blob.clone())?;
            let id = p.add(Kind::Tag, s.tag.clone())?;
            refs.push(RefChange::Set(s.name.clone(), id));
        }
        p.flush(&repo)?;
        crate::odb::apply_refs(&repo, refs)?;
    }
    let f = saved_file(path);
    match std::fs::remove_file(&f) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::Io(Cause::with_context(
            format!("{}", f.display()),
            e,
        ))),
    }
}

/// Writes back checkpoints a killed sync saved and did not restore.
pub fn recover(path: &Path) -> Result<()> {
    if !saved_file(path).exists() {
        return Ok(());
    }
    let _lock = publish_lock(path)?;
    let saved = load_saved(path)?;
    restore(path, &saved)
}
