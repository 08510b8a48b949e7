//! Keeps the number of packs bounded: geometric consolidation.
//!
//! Every batch adds one pack, so a `--follow` that writes every few
//! seconds would add thousands; git and gix slow down with many packs and
//! gix stops at its index-slot limit. After a batch, when there are more
//! than [`MAX_LOOSE_PACKS`] packs, the smallest are merged so that, sorted
//! by size, each remaining pack is at least twice the size of all smaller
//! ones together (git's `repack --geometric=2`): a repository of `B` bytes
//! keeps `O(log B)` packs, and each object is copied `O(log B)` times over
//! its life.
//!
//! Merging copies each entry's compressed bytes as they are (rewriting only
//! the base offset of a delta), so it neither decompresses nor loses
//! deltas; duplicate objects are dropped. The new pack and its index are
//! written before the old ones are removed, and the names being removed
//! are recorded first (see [`crate::lock`]), so a kill at any point leaves
//! a valid repository. Packs git marks `.keep` or `.promisor` are left
//! alone; a pack `git gc` made is merged like any other.

use crate::lock::SyncLock;
use crate::pack::{IdxEntry, entry_header, ofs_encode, write_pack};
use crate::{Error, Result};
use convo_store::Cause;
use gix::ObjectId;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Packs tolerated before consolidating.
pub const MAX_LOOSE_PACKS: usize = 12;

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(Cause::with_context(format!("{}", path.display()), e))
}

/// The packs of `dir` that may be merged, with their sizes, and how many
/// packs there are in all.
fn packs(dir: &Path) -> Result<(Vec<(PathBuf, u64)>, usize)> {
    let mut out = Vec::new();
    let mut all = 0;
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((out, 0)),
        Err(e) => return Err(io(dir, e)),
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("pack-") && name.ends_with(".idx")) {
            continue;
        }
        let pack = p.with_extension("pack");
        let Ok(md) = std::fs::metadata(&pack) else {
            continue;
        };
        all += 1;
        if p.with_extension("keep").exists() || p.with_extension("promisor").exists() {
            continue;
        }
        out.push((pack, md.len()));
    }
    Ok((out, all))
}

/// The number of packs in `dir`.
pub fn count(dir: &Path) -> Result<usize> {
    Ok(packs(dir)?.1)
}

/// Which of `sizes` (ascending) to merge: a prefix, as git's geometric
/// repack chooses it with factor 2.
fn split(sizes: &[u64]) -> usize {
    let n = sizes.len();
    let mut cut = 0;
    for i in (1..n).rev() {
        if sizes[i] < 2 * sizes[i - 1] {
            cut = i;
            break;
        }
    }
    if cut == 0 {
        return 0;
    }
    let mut sum: u64 = sizes[..=cut].iter().sum();
    let mut end = cut + 1;
    while end < n && sizes[end] < 2 * sum {
        sum += sizes[end];
        end += 1;
    }
    end
}

/// Consolidates the packs of `dir` when there are too many; returns the
/// number of packs after.
pub fn maybe_consolidate(dir: &Path, lock: &SyncLock) -> Result<usize> {
    let (mut list, all) = packs(dir)?;
    if all <= MAX_LOOSE_PACKS {
        return Ok(all);
    }
    list.sort_by_key(|(_, s)| *s);
    let sizes: Vec<u64> = list.iter().map(|(_, s)| *s).collect();
    let end = split(&sizes);
    if end < 2 {
        return Ok(all);
    }
    let chosen: Vec<PathBuf> = list[..end].iter().map(|(p, _)| p.clone()).collect();
    merge(dir, &chosen)?;
    crate::pause_point("repack-written");
    lock.begin(&chosen)?;
    if dir.join("multi-pack-index").exists() {
        std::fs::remove_file(dir.join("multi-pack-index"))
            .map_err(|e| io(&dir.join("multi-pack-index"), e))?;
    }
    for p in &chosen {
        for ext in ["idx", "rev", "bitmap", "mtimes", "pack"] {
            let f = p.with_extension(ext);
            match std::fs::remove_file(&f) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&f, e)),
            }
            if ext == "idx" {
                crate::pause_point("repack-removing");
            }
        }
    }
    lock.end()?;
    Ok(all - end + 1)
}

fn corrupt(p: &Path, what: &str) -> Error {
    Error::corrupt(format!("{}: {what}", p.display()))
}

/// Writes one pack holding every object of `packs`, entries copied raw.
fn merge(dir: &Path, packs: &[PathBuf]) -> Result<PathBuf> {
    let mut body = Vec::new();
    let mut entries: Vec<IdxEntry> = Vec::new();
    let mut placed: HashMap<ObjectId, u64> = HashMap::new();
    for pack in packs {
        let idx_path = pack.with_extension("idx");
        let idx = gix_pack::index::File::at(&idx_path, gix::hash::Kind::Sha1)
            .map_err(|e| Error::Git(Cause::with_context(format!("{}", idx_path.display()), e)))?;
        let data = std::fs::read(pack).map_err(|e| io(pack, e))?;
        if data.len() < 32 {
            return Err(corrupt(pack, "truncated"));
        }
        let mut list: Vec<(u64, ObjectId)> = idx.iter().map(|e| (e.pack_offset, e.oid)).collect();
        list.sort_by_key(|(o, _)| *o);
        let by_offset: HashMap<u64, ObjectId> = list.iter().copied().collect();
        let trailer = (data.len() - 20) as u64;
        for (k, &(off, id)) in list.iter().enumerate() {
            let end = list.get(k + 1).map_or(trailer, |x| x.0);
            if placed.contains_key(&id) {
                continue;
            }
            let raw = data
                .get(off as usize..end as usize)
                .ok_or_else(|| corrupt(pack, "an entry lies outside the pack"))?;
            let new_off = 12 + body.len() as u64;
            let start = body.len();
            // Parse the header: type, size, and a delta's base offset.
            let bad = || corrupt(pack, "a malformed entry header");
            let mut i = 0;
            let mut c = *raw.first().ok_or_else(bad)?;
            i += 1;
            let code = (c >> 4) & 7;
            let mut size = u64::from(c & 0x0f);
            let mut shift = 4;
            while c & 0x80 != 0 {
                c = *raw.get(i).ok_or_else(bad)?;
                i += 1;
                size |= u64::from(c & 0x7f).checked_shl(shift).ok_or_else(bad)?;
                shift += 7;
            }
            if code == 6 {
                let mut c = *raw.get(i).ok_or_else(bad)?;
                i += 1;
                let mut ofs = u64::from(c & 0x7f);
                while c & 0x80 != 0 {
                    c = *raw.get(i).ok_or_else(bad)?;
                    i += 1;
                    ofs = ((ofs + 1) << 7) | u64::from(c & 0x7f);
                }
                let base_at = off.checked_sub(ofs).ok_or_else(bad)?;
                let base = by_offset.get(&base_at).ok_or_else(bad)?;
                let base_new = placed.get(base).ok_or_else(bad)?;
                entry_header(&mut body, 6, size);
                ofs_encode(&mut body, new_off - base_new);
                body.extend_from_slice(&raw[i..]);
            } else {
                body.extend_from_slice(raw);
            }
            entries.push(IdxEntry {
                id,
                offset: new_off,
                crc32: crc32fast::hash(&body[start..]),
            });
            placed.insert(id, new_off);
        }
    }
    let n =
        u32::try_from(entries.len()).map_err(|_| Error::git("too many objects for one pack"))?;
    let mut head = Vec::with_capacity(12);
    head.extend_from_slice(b"PACK");
    head.extend_from_slice(&2u32.to_be_bytes());
    head.extend_from_slice(&n.to_be_bytes());
    write_pack(dir, &[&head, &body], entries)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn geometric_split_merges_the_small_tail() {
        assert_eq!(split(&[1, 1, 1, 1]), 4);
        assert_eq!(split(&[1, 2, 4, 8]), 0);
        assert_eq!(split(&[1, 1, 4, 100]), 2);
        assert_eq!(split(&[5, 100, 100]), 3);
        assert_eq!(split(&[]), 0);
    }
}
