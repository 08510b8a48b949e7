//! Objects of a batch, written as one pack (`.pack` + version-2 `.idx`),
//! never as loose objects.
//!
//! Each object is compressed as it is added. A new version of a tree or a
//! session file is stored as a delta (`OFS_DELTA`) against its previous
//! version when that version is in the same batch, so a commit that adds
//! one entry to a tree of 100 costs a few dozen bytes, not the whole tree.
//! Delta chains are cut at [`MAX_DEPTH`], as `git repack` does, so reading
//! any object applies at most that many deltas.
//!
//! A pack is written to a temporary file and renamed, then its index the
//! same way: git and gix ignore a pack until its index exists, so a kill
//! leaves either the whole pack or nothing usable (a stray file that the
//! next sync removes, see [`crate::lock`]).

use crate::delta;
use crate::{Error, Result};
use convo_store::Cause;
use gix::ObjectId;
use gix::objs::{Kind, WriteTo};
use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Longest delta chain written.
pub const MAX_DEPTH: u8 = 50;
/// Bytes of whole objects kept in memory for reads and delta bases.
const CACHE_BYTES: usize = 64 << 20;
/// Prefix of the temporary files a sync writes into `objects/pack`.
pub const TMP_PREFIX: &str = "tmp-convo-";

const OFS_DELTA: u8 = 6;

fn type_code(kind: Kind) -> u8 {
    match kind {
        Kind::Commit => 1,
        Kind::Tree => 2,
        Kind::Blob => 3,
        Kind::Tag => 4,
    }
}

/// The type-and-size header of a pack entry.
pub fn entry_header(out: &mut Vec<u8>, code: u8, size: u64) {
    let mut c = (code << 4) | (size & 0x0f) as u8;
    let mut s = size >> 4;
    while s != 0 {
        out.push(c | 0x80);
        c = (s & 0x7f) as u8;
        s >>= 7;
    }
    out.push(c);
}

/// The negative offset of an `OFS_DELTA` base, git's encoding.
pub fn ofs_encode(out: &mut Vec<u8>, mut ofs: u64) {
    let mut buf = [0u8; 10];
    let mut pos = buf.len() - 1;
    buf[pos] = (ofs & 0x7f) as u8;
    ofs >>= 7;
    while ofs != 0 {
        ofs -= 1;
        pos -= 1;
        buf[pos] = 0x80 | (ofs & 0x7f) as u8;
        ofs >>= 7;
    }
    out.extend_from_slice(&buf[pos..]);
}

thread_local! {
    /// One compressor, reset for each object: a new one per object costs an
    /// allocation of its window and tables each time, which glibc's heap
    /// does not give back (hundreds of MB of resident memory per batch).
    static DEFLATE: std::cell::RefCell<gix::zlib::stream::deflate::Compress> =
        std::cell::RefCell::new(gix::zlib::stream::deflate::Compress::new(
            gix::zlib::Compression::BEST_SPEED,
        ));
}

pub fn deflate(data: &[u8]) -> Result<Vec<u8>> {
    use gix::zlib::Status;
    use gix::zlib::stream::deflate::FlushCompress;
    DEFLATE.with(|c| {
        let mut c = c.borrow_mut();
        c.reset();
        let mut out = vec![0u8; data.len() + data.len() / 8 + 64];
        loop {
            let (i, o) = (c.total_in() as usize, c.total_out() as usize);
            let st = c
                .compress(&data[i..], &mut out[o..], FlushCompress::Finish)
                .map_err(|e| Error::Git(Cause::with_context("compressing", e)))?;
            if st == Status::StreamEnd {
                break;
            }
            if c.total_out() as usize == out.len() {
                let n = out.len() * 2;
                out.resize(n, 0);
            } else if c.total_in() as usize == i && c.total_out() as usize == o {
                return Err(Error::git("compressing: no progress"));
            }
        }
        out.truncate(c.total_out() as usize);
        Ok(out)
    })
}

fn inflate(data: &[u8], size: usize) -> Result<Vec<u8>> {
    let mut out = vec![0u8; size];
    let mut z = gix::zlib::Inflate::default();
    let (_, _, written) = z
        .once(data, &mut out)
        .map_err(|e| Error::Git(Cause::with_context("decompressing", e)))?;
    if written != size {
        return Err(Error::git("a pending object decompressed short"));
    }
    Ok(out)
}

#[derive(Debug)]
struct Obj {
    id: ObjectId,
    kind: Kind,
    /// Offset in the pack (the 12-byte header included).
    offset: u64,
    end: u64,
    /// Uncompressed size of what is stored (the delta, for a delta).
    stored_size: usize,
    base: Option<usize>,
    depth: u8,
}

/// Objects made in this batch, not yet in the repository.
#[derive(Debug)]
pub struct Pending {
    body: Vec<u8>,
    objects: Vec<Obj>,
    index: HashMap<ObjectId, usize>,
    cache: HashMap<ObjectId, Arc<[u8]>>,
    fifo: VecDeque<ObjectId>,
    cached: usize,
}

impl Default for Pending {
    fn default() -> Self {
        Self::new()
    }
}

/// The id git gives `data` as an object of `kind`.
pub fn object_id(kind: Kind, data: &[u8]) -> Result<ObjectId> {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, data)
        .map_err(|e| Error::Git(Cause::from_error(e)))
}

impl Pending {
    pub fn new() -> Self {
        Pending {
            body: Vec::new(),
            objects: Vec::new(),
            index: HashMap::new(),
            cache: HashMap::new(),
            fifo: VecDeque::new(),
            cached: 0,
        }
    }

    fn remember(&mut self, id: ObjectId, data: Arc<[u8]>) {
        self.cached += data.len();
        match self.cache.insert(id, data) {
            Some(old) => self.cached -= old.len(),
            None => self.fifo.push_back(id),
        }
        while self.cached > CACHE_BYTES {
            let Some(old) = self.fifo.pop_front() else {
                break;
            };
            if let Some(d) = self.cache.remove(&old) {
                self.cached -= d.len();
            }
        }
    }

    /// Adds raw object data, as a delta against `base` when `base` is an
    /// object of this batch (given with its data) and that pays; returns
    /// the object's id.
    pub fn add_based(
        &mut self,
        kind: Kind,
        data: impl Into<Arc<[u8]>>,
        base: Option<(&ObjectId, &[u8])>,
    ) -> Result<ObjectId> {
        let data: Arc<[u8]> = data.into();
        let id = object_id(kind, &data)?;
        if self.index.contains_key(&id) {
            return Ok(id);
        }
        let offset = 12 + self.body.len() as u64;
        let mut stored = None;
        if let Some((bid, bdata)) = base
            && let Some(&bi) = self.index.get(bid)
            && self.objects[bi].depth < MAX_DEPTH
            && self.objects[bi].kind == kind
            && let Some(d) = delta::make(bdata, &data)
        {
            stored = Some((bi, d));
        }
        let obj = match stored {
            Some((bi, d)) => {
                let b = &self.objects[bi];
                entry_header(&mut self.body, OFS_DELTA, d.len() as u64);
                ofs_encode(&mut self.body, offset - b.offset);
                let depth = b.depth + 1;
                self.body.extend_from_slice(&deflate(&d)?);
                Obj {
                    id,
                    kind,
                    offset,
                    end: 12 + self.body.len() as u64,
                    stored_size: d.len(),
                    base: Some(bi),
                    depth,
                }
            }
            None => {
                entry_header(&mut self.body, type_code(kind), data.len() as u64);
                self.body.extend_from_slice(&deflate(&data)?);
                Obj {
                    id,
                    kind,
                    offset,
                    end: 12 + self.body.len() as u64,
                    stored_size: data.len(),
                    base: None,
                    depth: 0,
                }
            }
        };
        self.index.insert(id, self.objects.len());
        self.objects.push(obj);
        if kind != Kind::Blob || data.len() > 256 {
            self.remember(id, data);
        }
        Ok(id)
    }

    pub fn add(&mut self, kind: Kind, data: Vec<u8>) -> Result<ObjectId> {
        self.add_based(kind, data, None)
    }

    pub fn blob(&mut self, data: &[u8]) -> Result<ObjectId> {
        self.add(Kind::Blob, data.to_vec())
    }

    pub fn write(&mut self, obj: &impl WriteTo) -> Result<ObjectId> {
        self.add(obj.kind(), serialize(obj)?)
    }

    /// The data of an object made in this batch.
    pub fn get(&mut self, id: &ObjectId) -> Result<Option<Arc<[u8]>>> {
        if let Some(d) = self.cache.get(id) {
            return Ok(Some(d.clone()));
        }
        let Some(&i) = self.index.get(id) else {
            return Ok(None);
        };
        let data = self.rebuild(i)?;
        let data: Arc<[u8]> = data.into();
        self.remember(*id, data.clone());
        Ok(Some(data))
    }

    fn rebuild(&mut self, i: usize) -> Result<Vec<u8>> {
        let o = &self.objects[i];
        let mut at = (o.offset - 12) as usize;
        // Skip the entry header (and a delta's base offset).
        while self.body[at] & 0x80 != 0 {
            at += 1;
        }
        at += 1;
        if o.base.is_some() {
            while self.body[at] & 0x80 != 0 {
                at += 1;
            }
            at += 1;
        }
        let stored = inflate(&self.body[at..(o.end - 12) as usize], o.stored_size)?;
        match o.base {
            None => Ok(stored),
            Some(b) => {
                let bid = self.objects[b].id;
                let base = match self.cache.get(&bid) {
                    Some(d) => d.to_vec(),
                    None => self.rebuild(b)?,
                };
                delta::apply(&base, &stored)
                    .ok_or_else(|| Error::git("a pending delta does not apply"))
            }
        }
    }

    /// Writes every pending object into one new pack with its index in
    /// `repo`; returns the pack's path, or `None` when there was nothing.
    pub fn flush(&mut self, repo: &gix::Repository) -> Result<Option<PathBuf>> {
        if self.objects.is_empty() {
            return Ok(None);
        }
        let dir = repo.objects.store_ref().path().join("pack");
        let n = u32::try_from(self.objects.len())
            .map_err(|_| Error::git("too many objects for one pack"))?;
        let mut head = Vec::with_capacity(12);
        head.extend_from_slice(b"PACK");
        head.extend_from_slice(&2u32.to_be_bytes());
        head.extend_from_slice(&n.to_be_bytes());
        let mut entries = Vec::with_capacity(self.objects.len());
        for o in &self.objects {
            let raw = &self.body[(o.offset - 12) as usize..(o.end - 12) as usize];
            entries.push(IdxEntry {
                id: o.id,
                offset: o.offset,
                crc32: crc32fast::hash(raw),
            });
        }
        let path = write_pack(&dir, &[&head, &self.body], entries)?;
        *self = Pending::new();
        Ok(Some(path))
    }
}

pub fn serialize(obj: &impl WriteTo) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(obj.size() as usize);
    obj.write_to(&mut buf)
        .map_err(|e| Error::Git(Cause::from_error(e)))?;
    Ok(buf)
}

/// One object of a pack, as its index lists it.
#[derive(Clone, Copy, Debug)]
pub struct IdxEntry {
    pub id: ObjectId,
    pub offset: u64,
    pub crc32: u32,
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(Cause::with_context(format!("{}", path.display()), e))
}

/// Writes `parts` (a pack without its trailer) and its index into `dir`
/// atomically, pack first; returns the pack's path.
pub fn write_pack(dir: &Path, parts: &[&[u8]], mut entries: Vec<IdxEntry>) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let mut h = gix::hash::hasher(gix::hash::Kind::Sha1);
    for p in parts {
        h.update(p);
    }
    let sum = h
        .try_finalize()
        .map_err(|e| Error::Git(Cause::with_context("pack checksum", e)))?;
    let name = format!("pack-{}", sum.to_hex());
    let pid = std::process::id();
    let tmp = dir.join(format!("{TMP_PREFIX}{pid}-{name}.pack"));
    let pack = dir.join(format!("{name}.pack"));
    {
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        for p in parts {
            f.write_all(p).map_err(|e| io(&tmp, e))?;
        }
        f.write_all(sum.as_bytes()).map_err(|e| io(&tmp, e))?;
    }
    std::fs::rename(&tmp, &pack).map_err(|e| io(&pack, e))?;
    entries.sort_by_key(|a| a.id);
    entries.dedup_by(|a, b| a.id == b.id);
    let idx = build_index(&entries, &sum)?;
    let tmp = dir.join(format!("{TMP_PREFIX}{pid}-{name}.idx"));
    let idx_path = dir.join(format!("{name}.idx"));
    std::fs::write(&tmp, idx).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, &idx_path).map_err(|e| io(&idx_path, e))?;
    Ok(pack)
}

/// A version-2 pack index of `entries` (sorted by id, unique).
fn build_index(entries: &[IdxEntry], pack_sum: &ObjectId) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(8 + 1024 + entries.len() * 28 + 40);
    out.extend_from_slice(&[0xff, b't', b'O', b'c']);
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut fan = [0u32; 256];
    for e in entries {
        fan[usize::from(e.id.as_bytes()[0])] += 1;
    }
    let mut total = 0u32;
    for f in fan {
        total += f;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for e in entries {
        out.extend_from_slice(e.id.as_bytes());
    }
    for e in entries {
        out.extend_from_slice(&e.crc32.to_be_bytes());
    }
    let mut large = Vec::new();
    for e in entries {
        if e.offset < 0x8000_0000 {
            out.extend_from_slice(&(e.offset as u32).to_be_bytes());
        } else {
            let i = u32::try_from(large.len()).map_err(|_| Error::git("pack too large"))?;
            out.extend_from_slice(&(0x8000_0000 | i).to_be_bytes());
            large.push(e.offset);
        }
    }
    for o in large {
        out.extend_from_slice(&o.to_be_bytes());
    }
    out.extend_from_slice(pack_sum.as_bytes());
    let mut h = gix::hash::hasher(gix::hash::Kind::Sha1);
    h.update(&out);
    let sum = h
        .try_finalize()
        .map_err(|e| Error::Git(Cause::with_context("index checksum", e)))?;
    out.extend_from_slice(sum.as_bytes());
    Ok(out)
}

/// Reads an object's data from the batch or the repository.
pub fn read(pending: &mut Pending, repo: &gix::Repository, id: &ObjectId) -> Result<Arc<[u8]>> {
    if let Some(d) = pending.get(id)? {
        return Ok(d);
    }
    let obj = repo
        .find_object(*id)
        .map_err(|e| Error::Git(Cause::with_context(format!("object {id}"), e)))?;
    Ok(obj.data.as_slice().into())
}
