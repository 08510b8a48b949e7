//! Payloads stored in content-defined chunks, each chunk once.
//!
//! An agent resends its whole conversation with every call, so the n-th
//! request of a session repeats the n−1 before it. A payload of at least
//! [`CHUNKED_FROM`] bytes is therefore cut with FastCDC (the `fastcdc`
//! crate, 2020 variant: cut points chosen by the content, so bytes that
//! repeat are cut the same way wherever they sit) into chunks of 128 B to
//! 2 KiB (512 B on average), each stored once in `chunks` under its
//! SHA-256. The payload's own row in `blobs` keeps its address (the
//! payload's SHA-256, which the node commits to: node hashes do not
//! change) and, instead of the bytes, a *manifest*.
//!
//! A flat list of chunk hashes would itself grow with the conversation
//! (quadratic again, a thirtieth of the bytes), so the list is a tree, cut
//! by content too (as bup does): the list of level-0 entries is grouped,
//! a group ending after an entry whose hash ends with three zero bits (8
//! entries on average, at least 2, at most [`MAX_FANOUT`]); each group is
//! an *index node* stored as a chunk, and the list of groups is grouped
//! the same way until at most [`ROOT_FANOUT`] entries are left: that list
//! is the manifest. Two payloads that share a prefix share its chunks and
//! its index nodes, so a request that adds one message to the previous
//! one costs the chunk around the change, one index node per level and
//! the manifest: a constant, whatever the history's length.
//!
//! An index node or manifest is `[VERSION, level, entries…]`, an entry
//! the 32-byte SHA-256 of what it names followed by the number of payload
//! bytes below it (LEB128). Level 0 entries name data chunks, level n
//! entries index nodes of level n − 1. Every read checks each level
//! against the one above (levels, lengths, the total), so a missing or
//! truncated chunk is an error, never short bytes. Content is checked by
//! the payload's own address: every read that serves a whole payload and
//! `verify` hash the assembled bytes once (not each chunk, then the whole
//! again); only where they do not hash are the chunks hashed, to name the
//! one edited.

use crate::{Result, StoreError};
use convo_core::{ContentHash, Digest};
use std::collections::HashSet;

/// Payloads at least this long are stored in chunks; shorter ones whole
/// (one row, as before: bulk ingest of small payloads is unchanged).
pub const CHUNKED_FROM: usize = 4 * 1024;
/// FastCDC's smallest, average and largest chunk.
const MIN_CHUNK: usize = 128;
const AVG_CHUNK: usize = 512;
const MAX_CHUNK: usize = 2048;
/// An index node holds at most this many entries.
pub const MAX_FANOUT: usize = 64;
/// A manifest holds at most this many entries.
pub const ROOT_FANOUT: usize = 8;
/// The format of index nodes and manifests.
const VERSION: u8 = 1;
/// How many chunks one fetch asks for (one statement on PostgreSQL); a
/// payload is assembled batch by batch, so it is held once.
const BATCH: usize = 512;

/// A payload stored whole (before chunking): its row id, its address and
/// its bytes ([`Chunks::whole_payloads`]).
pub type WholePayload = (i64, Vec<u8>, Vec<u8>);

/// What a backend provides to store and read chunks inside a transaction.
pub(crate) trait Chunks {
    /// Stores each piece under its hash unless one is stored there.
    fn put_chunks(&mut self, pieces: &[(Digest, &[u8])]) -> Result<()>;
    /// The bytes stored under each hash, in order (`None` where nothing is).
    fn get_chunks(&mut self, hashes: &[Digest]) -> Result<Vec<Option<Vec<u8>>>>;
    /// Calls `f` with the bytes stored under each hash, in order, borrowed
    /// where the backend can (SQLite: no copy but the caller's).
    fn read_chunks(&mut self, hashes: &[Digest], f: &mut ChunkVisitor<'_>) -> Result<()> {
        for (h, b) in hashes.iter().zip(self.get_chunks(hashes)?) {
            f(h, b.as_deref())?;
        }
        Ok(())
    }
    /// Removes the chunks with these hashes.
    fn delete_chunks(&mut self, hashes: &[Digest]) -> Result<()>;
    /// Calls `f` with the address and manifest of every chunked payload.
    fn manifests(&mut self, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()>;
    /// Up to `max` payloads of [`CHUNKED_FROM`] bytes or more stored whole
    /// (before chunking), with a row id above `after`, in id order.
    fn whole_payloads(&mut self, after: i64, max: usize) -> Result<Vec<WholePayload>>;
    /// Makes row `id` the chunked payload `manifest` describes.
    fn set_manifest(&mut self, id: i64, manifest: &[u8]) -> Result<()>;
    /// Whether payloads stored whole are left to chunk ([`rechunk`]).
    fn rechunk_pending(&mut self) -> Result<bool>;
    /// Records that none is.
    fn rechunk_done(&mut self) -> Result<()>;
}

/// What [`Chunks::read_chunks`] calls with each chunk.
pub(crate) type ChunkVisitor<'a> = dyn FnMut(&Digest, Option<&[u8]>) -> Result<()> + 'a;

fn sha(bytes: &[u8]) -> Digest {
    convo_core::hash::content_hash(bytes).0
}

/// One entry: what it names and how many payload bytes are below it.
type Entry = (Digest, u64);

fn encode(level: u8, entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + entries.len() * 35);
    out.push(VERSION);
    out.push(level);
    for (h, len) in entries {
        out.extend_from_slice(&h.0);
        let mut v = *len;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
    }
    out
}

fn corrupt(why: String) -> StoreError {
    StoreError::corrupt(why)
}

/// Decodes an index node or manifest: its level and entries.
fn decode(bytes: &[u8]) -> Result<(u8, Vec<Entry>)> {
    let bad = |why: &str| corrupt(format!("a payload manifest or index chunk {why}"));
    let [version, level, rest @ ..] = bytes else {
        return Err(bad("is truncated"));
    };
    if *version != VERSION {
        return Err(bad(&format!("has unknown version {version}")));
    }
    let mut entries = Vec::with_capacity(rest.len() / 34);
    let mut i = 0;
    while i < rest.len() {
        let h = rest
            .get(i..i + 32)
            .and_then(Digest::from_slice)
            .ok_or_else(|| bad("is truncated"))?;
        i += 32;
        let mut len = 0u64;
        let mut shift = 0;
        loop {
            let b = *rest.get(i).ok_or_else(|| bad("is truncated"))?;
            i += 1;
            if shift > 63 {
                return Err(bad("has a length that overflows"));
            }
            len |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        entries.push((h, len));
    }
    if entries.is_empty() {
        return Err(bad("names no chunk"));
    }
    Ok((*level, entries))
}

/// A payload cut into chunks: its manifest (stored in its `blobs` row)
/// and every chunk it needs (data chunks borrowed from the payload, index
/// nodes owned), first occurrence only.
pub(crate) struct Split<'a> {
    pub manifest: Vec<u8>,
    pub pieces: Vec<(Digest, std::borrow::Cow<'a, [u8]>)>,
    /// Its level-0 entries (data chunks, in order, repeats included).
    leaves: Vec<Entry>,
}

impl Split<'_> {
    /// The pieces as `put_chunks` takes them.
    pub fn refs(&self) -> Vec<(Digest, &[u8])> {
        self.pieces.iter().map(|(h, b)| (*h, b.as_ref())).collect()
    }
}

/// Whether an entry ends its group (about one in 8, by content).
fn ends_group(h: &Digest) -> bool {
    h.0[31] & 0x07 == 0
}

/// Cuts `bytes` into chunks and builds its index: see the module docs.
/// (The backends cut through [`Recent::split`], which gives the same.)
#[cfg(test)]
pub(crate) fn split(bytes: &[u8]) -> Split<'_> {
    split_after(bytes, &[], &mut 0)
}

/// [`split`], with the first chunks already known: `known` are the
/// level-0 entries of a prefix of `bytes` that FastCDC cut by content
/// (see [`Recent`]), so only the bytes after them are cut and hashed
/// (their count added to `cut`). The result is the same as `split`'s.
fn split_after<'a>(bytes: &'a [u8], known: &[Entry], cut: &mut u64) -> Split<'a> {
    let mut seen: HashSet<Digest> = HashSet::new();
    let mut pieces = Vec::new();
    let mut entries: Vec<Entry> = Vec::with_capacity(known.len() + 8);
    let mut at = 0usize;
    for &(h, len) in known {
        let data = &bytes[at..at + len as usize];
        if seen.insert(h) {
            pieces.push((h, std::borrow::Cow::Borrowed(data)));
        }
        entries.push((h, len));
        at += len as usize;
    }
    // FastCDC cuts each chunk from its own start, whatever came before:
    // cutting the rest alone gives the cuts the whole would get there.
    let rest = &bytes[at..];
    *cut += rest.len() as u64;
    entries.extend(
        fastcdc::v2020::FastCDC::new(rest, MIN_CHUNK, AVG_CHUNK, MAX_CHUNK).map(|c| {
            let data = &rest[c.offset..c.offset + c.length];
            let h = sha(data);
            if seen.insert(h) {
                pieces.push((h, std::borrow::Cow::Borrowed(data)));
            }
            (h, c.length as u64)
        }),
    );
    let leaves = entries.clone();
    let mut level = 0u8;
    while entries.len() > ROOT_FANOUT {
        let mut next = Vec::with_capacity(entries.len() / 8 + 1);
        let mut start = 0;
        for i in 0..entries.len() {
            let n = i + 1 - start;
            if (n >= 2 && ends_group(&entries[i].0)) || n == MAX_FANOUT || i + 1 == entries.len() {
                let group = &entries[start..=i];
                let body = encode(level, group);
                let h = sha(&body);
                next.push((h, group.iter().map(|e| e.1).sum()));
                if seen.insert(h) {
                    pieces.push((h, std::borrow::Cow::Owned(body)));
                }
                start = i + 1;
            }
        }
        entries = next;
        level += 1;
    }
    Split {
        manifest: encode(level, &entries),
        pieces,
        leaves,
    }
}

/// How often the SHA-256 state of a remembered payload is kept, in bytes
/// (a multiple of SHA-256's 64-byte block).
const STATE_EVERY: usize = 4096;
/// Remembered payloads at most: their bytes in all, and their number.
const RECENT_BYTES: usize = 64 << 20;
const RECENT_COUNT: usize = 512;
/// A payload larger than this is hashed and cut from scratch and not
/// remembered: remembering copies it, and is for conversations that grow
/// call by call, not for one huge message (an import's 50 MB record would
/// be held twice while it is written, and once more after).
pub const RECENT_ONE: usize = 16 << 20;

/// One payload [`Recent`] remembers.
struct Remembered {
    bytes: Vec<u8>,
    hash: ContentHash,
    /// The SHA-256 state after each [`STATE_EVERY`] bytes.
    states: Vec<sha2::Sha256>,
    /// Its level-0 entries once it was cut (`cut`; the last one was cut
    /// by the end of the bytes, not by their content); until then those
    /// of the payload it extends that end within their shared prefix (cut
    /// by content, so cut the same here).
    leaves: Vec<Entry>,
    cut: bool,
}

/// The large payloads a connection hashed and cut lately, so that the
/// next one that starts with the same bytes (the next call of a
/// conversation: its history, resent) is hashed and cut from where they
/// differ. Both are pure functions of the bytes: SHA-256 resumes from the
/// state kept at the last [`STATE_EVERY`] boundary before the first
/// difference, and FastCDC cuts each chunk from its own start, so the
/// chunks that end before the difference (except the last one, cut by the
/// end of the data) are cut the same way again. What is reused is found
/// by comparing the bytes (memcmp), never by trusting a key: the result
/// is the same digest and the same manifest as computed from scratch (a
/// test checks it). Bounded ([`RECENT_BYTES`], [`RECENT_COUNT`]); a
/// payload extended by the next one is replaced by it.
#[derive(Default)]
pub struct Recent {
    seen: std::collections::VecDeque<Remembered>,
    held: usize,
    /// Bytes run through SHA-256 for payload digests, and through FastCDC
    /// (and each new chunk's SHA-256): what recording a payload costs.
    pub hashed: u64,
    pub cut: u64,
}

impl std::fmt::Debug for Recent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recent")
            .field("payloads", &self.seen.len())
            .field("bytes", &self.held)
            .finish()
    }
}

/// How many leading bytes `a` and `b` share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    // Whole blocks by memcmp first, then the block that differs.
    while i + 1024 <= n && a[i..i + 1024] == b[i..i + 1024] {
        i += 1024;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

impl Recent {
    /// The remembered payload sharing the longest prefix with `bytes`,
    /// and that prefix's length.
    fn best(&self, bytes: &[u8]) -> Option<(usize, usize)> {
        self.seen
            .iter()
            .enumerate()
            .map(|(i, r)| (i, common_prefix(&r.bytes, bytes)))
            .filter(|(_, n)| *n > 0)
            .max_by_key(|(_, n)| *n)
    }

    /// The SHA-256 of `bytes` (a payload of [`CHUNKED_FROM`] bytes or
    /// more), resumed from a remembered payload's state where they share
    /// a prefix; `bytes` is remembered (unless larger than [`RECENT_ONE`]).
    pub fn hash(&mut self, bytes: &[u8]) -> ContentHash {
        use sha2::Digest as _;
        if bytes.len() > RECENT_ONE {
            self.hashed += bytes.len() as u64;
            return ContentHash(Digest(sha2::Sha256::digest(bytes).into()));
        }
        let best = self.best(bytes);
        if let Some((i, n)) = best
            && n == bytes.len()
            && n == self.seen[i].bytes.len()
        {
            // The same payload again.
            return self.seen[i].hash;
        }
        // The payload this one extends (most of it repeated) is not needed
        // any more: it is updated in place (its buffers reused, only the
        // bytes after the difference copied); another is remembered beside.
        let n = best.map_or(0, |(_, n)| n);
        let i = match best {
            Some((i, n)) if n * 2 >= self.seen[i].bytes.len() => {
                let mut r = self.seen.remove(i).expect("found above");
                let k = (n / STATE_EVERY).min(r.states.len());
                r.states.truncate(k);
                let keep = r.leaves_within(n).len();
                r.leaves.truncate(keep);
                r.cut = false;
                self.held -= r.bytes.len();
                r.bytes.truncate(n);
                if r.bytes.capacity() < bytes.len() {
                    // Room to grow: the next call adds a little.
                    r.bytes.reserve(bytes.len() - n + bytes.len() / 8);
                }
                r.bytes.extend_from_slice(&bytes[n..]);
                self.seen.push_back(r);
                self.seen.len() - 1
            }
            _ => {
                let (states, leaves) = match best {
                    Some((j, n)) => {
                        let r = &self.seen[j];
                        let k = (n / STATE_EVERY).min(r.states.len());
                        (r.states[..k].to_vec(), r.leaves_within(n).to_vec())
                    }
                    None => (Vec::new(), Vec::new()),
                };
                self.seen.push_back(Remembered {
                    bytes: bytes.to_vec(),
                    hash: ContentHash(Digest([0; 32])),
                    states,
                    leaves,
                    cut: false,
                });
                self.seen.len() - 1
            }
        };
        self.held += bytes.len();
        let r = &mut self.seen[i];
        debug_assert!(r.states.len() * STATE_EVERY <= n);
        let k = r.states.len();
        let mut h = match k {
            0 => sha2::Sha256::new(),
            k => r.states[k - 1].clone(),
        };
        let from = k * STATE_EVERY;
        let mut at = from;
        while at + STATE_EVERY <= bytes.len() {
            h.update(&bytes[at..at + STATE_EVERY]);
            r.states.push(h.clone());
            at += STATE_EVERY;
        }
        h.update(&bytes[at..]);
        self.hashed += (bytes.len() - from) as u64;
        let hash = ContentHash(Digest(h.finalize().into()));
        r.hash = hash;
        while self.held > RECENT_BYTES || self.seen.len() > RECENT_COUNT {
            let Some(r) = self.seen.pop_front() else {
                break;
            };
            self.held -= r.bytes.len();
        }
        hash
    }

    /// [`split`] of `bytes` (whose SHA-256 is `h`), cutting only what
    /// follows the chunks it shares with a remembered payload.
    pub(crate) fn split<'a>(&mut self, h: &ContentHash, bytes: &'a [u8]) -> Split<'a> {
        let mine = self
            .seen
            .iter()
            .rposition(|r| r.hash == *h && r.bytes.len() == bytes.len());
        let known = match mine {
            Some(i) if !self.seen[i].cut => std::mem::take(&mut self.seen[i].leaves),
            _ => match self.best(bytes) {
                Some((i, n)) => self.seen[i].leaves_within(n).to_vec(),
                None => Vec::new(),
            },
        };
        let mut split = split_after(bytes, &known, &mut self.cut);
        if let Some(i) = mine {
            self.seen[i].leaves = std::mem::take(&mut split.leaves);
            self.seen[i].cut = true;
        }
        split
    }
}

/// Chunks known to be stored, so a payload that shares them with the one
/// before does not look each one up again (SQLite). Only what committed
/// counts: chunks put by a transaction are `pending` until it commits
/// ([`Stored::begin`] forgets them, [`Stored::committed`] keeps them).
/// Whatever another connection commits (a redaction that deletes chunks,
/// an edit behind convo's back) changes SQLite's `data_version`: the set
/// is dropped when it is not the one seen at the last commit; chunks this
/// connection deletes drop it too.
#[derive(Debug, Default)]
pub(crate) struct Stored {
    known: HashSet<Digest>,
    pending: HashSet<Digest>,
    /// The store's version (`PRAGMA data_version`) at the last commit
    /// that kept chunks.
    epoch: Option<i64>,
    /// This transaction's version, once checked.
    checked: Option<i64>,
}

/// Chunk digests [`Stored`] holds at most (~50 bytes each).
const STORED_MAX: usize = 1 << 20;

impl Stored {
    /// A transaction starts: nothing of a previous one that did not
    /// commit is believed.
    pub fn begin(&mut self) {
        self.pending.clear();
        self.checked = None;
    }

    /// Whether the transaction checked the epoch yet.
    pub fn checked(&self) -> bool {
        self.checked.is_some()
    }

    /// The transaction's first chunked put: `version` is the store's
    /// `data_version` now (this connection's write lock is held).
    pub fn check(&mut self, version: i64) {
        if self.epoch != Some(version) {
            self.known.clear();
        }
        self.checked = Some(version);
    }

    /// Whether `h` is stored (committed, or put by this transaction).
    pub fn has(&self, h: &Digest) -> bool {
        self.checked.is_some() && (self.known.contains(h) || self.pending.contains(h))
    }

    /// `h` is stored by this transaction (or found stored).
    pub fn put(&mut self, h: Digest) {
        self.pending.insert(h);
    }

    /// The transaction committed.
    pub fn committed(&mut self) {
        if let Some(epoch) = self.checked.take() {
            if self.known.len() + self.pending.len() > STORED_MAX {
                self.known.clear();
            }
            self.known.extend(self.pending.drain());
            self.epoch = Some(epoch);
        }
    }

    /// Chunks were deleted: nothing is believed any more.
    pub fn forget(&mut self) {
        self.known.clear();
        self.pending.clear();
        self.epoch = None;
    }
}

impl Remembered {
    /// Its level-0 entries that end within its first `n` bytes, but for
    /// the last one (cut by the end of its bytes); none before it is cut.
    fn leaves_within(&self, n: usize) -> &[Entry] {
        // Not cut yet: its leaves are a prefix's, all cut by content.
        let whole = if self.cut {
            &self.leaves[..self.leaves.len().saturating_sub(1)]
        } else {
            &self.leaves[..]
        };
        let mut end = 0u64;
        let keep = whole
            .iter()
            .take_while(|e| {
                end += e.1;
                end <= n as u64
            })
            .count();
        &self.leaves[..keep]
    }
}

/// Fetches `hashes`, each required; `check` hashes each piece not in
/// `checked` yet (and then adds it).
fn fetch(
    c: &mut dyn Chunks,
    hashes: &[Digest],
    checked: Option<&mut HashSet<Digest>>,
) -> Result<Vec<Vec<u8>>> {
    // Read through `read_chunks`: a payload's index nodes of one level
    // were written one after another, so the backend reads on in row
    // order instead of looking each up by key.
    let mut checked = checked;
    let mut out = Vec::with_capacity(hashes.len());
    c.read_chunks(hashes, &mut |h, b| {
        let b = b.ok_or_else(|| corrupt(format!("payload chunk {} is missing", h.to_hex())))?;
        if let Some(set) = checked.as_deref_mut()
            && !set.contains(h)
        {
            if sha(b) != *h {
                return Err(corrupt(format!(
                    "payload chunk {} does not hash to its address",
                    h.to_hex()
                )));
            }
            set.insert(*h);
        }
        out.push(b.to_vec());
        Ok(())
    })?;
    Ok(out)
}

/// An index node that does not fit the entry naming it: its level and
/// length against the entry's.
fn misfit(h: &Digest, level: u8, sum: u64, named: u8, len: u64) -> StoreError {
    corrupt(format!(
        "payload index chunk {} does not fit where it is named (level {level}, {sum} bytes; \
         expected level {}, {len} bytes)",
        h.to_hex(),
        named.saturating_sub(1)
    ))
}

/// Replaces each entry of `level` (index nodes) by the entries it holds,
/// checking each node's level and length against its entry.
fn descend(
    c: &mut dyn Chunks,
    level: u8,
    entries: &[Entry],
    mut checked: Option<&mut HashSet<Digest>>,
) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for part in entries.chunks(BATCH) {
        let hashes: Vec<Digest> = part.iter().map(|e| e.0).collect();
        for ((h, len), body) in part.iter().zip(fetch(c, &hashes, checked.as_deref_mut())?) {
            let (l, inner) = decode(&body)?;
            let sum: u64 = inner.iter().map(|e| e.1).sum();
            if l + 1 != level || sum != *len {
                return Err(misfit(h, l, sum, level, *len));
            }
            out.extend(inner);
        }
    }
    Ok(out)
}

/// The level-0 entries (data chunks and their lengths) of a manifest.
fn leaves(
    c: &mut dyn Chunks,
    manifest: &[u8],
    mut checked: Option<&mut HashSet<Digest>>,
) -> Result<Vec<Entry>> {
    let (mut level, mut entries) = decode(manifest)?;
    while level > 0 {
        entries = descend(c, level, &entries, checked.as_deref_mut())?;
        level -= 1;
    }
    Ok(entries)
}

/// Calls `f` with each data chunk of the payload a manifest describes,
/// in order, and returns its length. Structure is checked (levels,
/// lengths, the total: a missing or truncated chunk is an error, never
/// short bytes); content is checked by the payload's digest ([`payload`],
/// [`scan_chunked`]).
fn each_chunk(c: &mut dyn Chunks, manifest: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<u64> {
    let leaves = leaves(c, manifest, None)?;
    for part in leaves.chunks(BATCH) {
        let hashes: Vec<Digest> = part.iter().map(|e| e.0).collect();
        let mut at = 0;
        c.read_chunks(&hashes, &mut |h, b| {
            let b = b.ok_or_else(|| corrupt(format!("payload chunk {} is missing", h.to_hex())))?;
            let want = part[at].1;
            at += 1;
            if b.len() as u64 != want {
                return Err(corrupt(format!(
                    "payload chunk {} holds {} bytes where its index says {want}",
                    h.to_hex(),
                    b.len()
                )));
            }
            f(b);
            Ok(())
        })?;
    }
    Ok(leaves.iter().map(|e| e.1).sum())
}

/// The payload a manifest describes, each chunk copied once, straight
/// into it ([`each_chunk`]).
pub(crate) fn assemble(c: &mut dyn Chunks, manifest: &[u8]) -> Result<Vec<u8>> {
    // Its length is the manifest's (each entry says the bytes below it):
    // the payload is allocated once, not grown (a 50 MB one held twice).
    let total: u64 = decode(manifest)?.1.iter().map(|e| e.1).sum();
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    each_chunk(c, manifest, &mut |b| out.extend_from_slice(b))?;
    Ok(out)
}

/// A payload as its `blobs` row holds it (the bytes of a whole one, the
/// chunks its manifest names for a chunked one), checked against its
/// address: bytes changed behind convo's back are an error, never served.
/// Every read that serves a whole payload goes through here on both
/// backends (listings read previews, which cannot be checked).
pub(crate) fn payload(
    c: &mut dyn Chunks,
    h: &ContentHash,
    chunked: bool,
    data: Vec<u8>,
) -> Result<Vec<u8>> {
    let bytes = if chunked { assemble(c, &data)? } else { data };
    if sha(&bytes) != h.0 {
        return Err(corrupt(format!(
            "payload {h} does not hash to its address: its bytes were changed behind convo's back"
        )));
    }
    Ok(bytes)
}

/// The chunked payloads of a blob scan (`scan_blobs`: address and manifest
/// each), read one by one and hashed once against their address, so
/// verify reads each payload's bytes once and hashes them once. With
/// `keep`, each is assembled and handed over ([`Scanned::Checked`]);
/// without, its chunks are hashed as they are read, straight from the
/// backend's rows, and only its length is handed over
/// ([`Scanned::Hashed`]: no copy, no allocation of the payload). Where
/// they do not hash to it, the payload's chunks are hashed to name the one
/// that does not (or, when every chunk is right, the manifest names other
/// bytes): a problem for `f`, never an error that stops the scan.
pub(crate) fn scan_chunked(
    c: &mut dyn Chunks,
    chunked: Vec<(Vec<u8>, Vec<u8>)>,
    keep: bool,
    f: &mut crate::backend::PayloadVisitor<'_>,
) -> Result<()> {
    let mut digests = Digests::default();
    for (h, manifest) in chunked {
        let read = if keep {
            assemble(c, &manifest).map(|b| (sha(&b).0[..] == h[..], Some(b), 0))
        } else {
            digests
                .check(c, &h, &manifest)
                .map(|(right, len)| (right, None, len))
        };
        match read {
            Ok((true, Some(bytes), _)) => {
                f(&h, Ok(crate::backend::Scanned::Checked(&bytes)))?;
                continue;
            }
            Ok((true, None, len)) => {
                f(&h, Ok(crate::backend::Scanned::Hashed(len)))?;
                continue;
            }
            Ok((false, ..)) => {}
            Err(StoreError::Corrupt(why)) => {
                f(&h, Err(why.into_message()))?;
                continue;
            }
            Err(e) => return Err(e),
        }
        // Which chunk: hash each one (index nodes included) until one does
        // not hash to its address.
        let named = match leaves(c, &manifest, Some(&mut HashSet::new())).and_then(|l| {
            let hashes: Vec<Digest> = l.iter().map(|e| e.0).collect();
            let mut checked = HashSet::new();
            hashes
                .chunks(BATCH)
                .try_for_each(|part| fetch(c, part, Some(&mut checked)).map(drop))
        }) {
            Err(StoreError::Corrupt(why)) => why.into_message(),
            Err(e) => return Err(e),
            // Every chunk is what its address says: the bytes are not the
            // ones the payload's address commits to (a manifest swapped).
            Ok(()) => "its chunks assemble into bytes that do not hash to its address".to_owned(),
        };
        f(&h, Err(named))?;
    }
    Ok(())
}

/// How often (in data chunks) [`Digests`] keeps the SHA-256 state of a
/// payload it hashes.
const STATE_EVERY_LEAVES: usize = 8;
/// Payloads [`Digests`] remembers at most, and index nodes it keeps.
const DIGESTS_KEPT: usize = 256;
const NODES_KEPT: usize = 4096;

/// A payload [`Digests`] hashed and found right: its manifest and the
/// SHA-256 state at every [`STATE_EVERY_LEAVES`]-th chunk boundary (by
/// byte offset; 0 is the empty state).
struct Checked {
    manifest: Vec<u8>,
    states: std::collections::BTreeMap<u64, sha2::Sha256>,
}

/// Checks chunked payloads against their addresses, each chunk's bytes
/// hashed once however many payloads share it (verify): an agent resends
/// its conversation with every call, so hashing each payload whole costs
/// the square of the conversation (a 1,000-call one: 50× its distinct
/// bytes, growing with every call). A payload that starts with the same
/// chunks as one already found right (the same first chunk names the
/// candidate: the previous call of its conversation) resumes SHA-256 from
/// that one's state where their trees part — found top down, a shared
/// subtree skipped whole by its hash, so neither its chunks nor its index
/// nodes are read — and hashes only what follows. Sound for the same
/// reason chunks are shared at all: a subtree's hash names its bytes, and
/// the payload that read them hashed right in this same read transaction.
#[derive(Default)]
struct Digests {
    by_first: std::collections::HashMap<Digest, Checked>,
    nodes: std::collections::HashMap<Digest, std::rc::Rc<(u8, Vec<Entry>)>>,
}

impl Digests {
    /// An index node, read once while it is kept.
    fn node(&mut self, c: &mut dyn Chunks, h: &Digest) -> Result<std::rc::Rc<(u8, Vec<Entry>)>> {
        if let Some(n) = self.nodes.get(h) {
            return Ok(n.clone());
        }
        let body = fetch(c, std::slice::from_ref(h), None)?.remove(0);
        let n = std::rc::Rc::new(decode(&body)?);
        if self.nodes.len() >= NODES_KEPT {
            self.nodes.clear();
        }
        self.nodes.insert(*h, n.clone());
        Ok(n)
    }

    /// Replaces the entry on top of `stack` (level, entry; the first
    /// entry last) by the entries of the index node it names, checked
    /// against it.
    fn expand(&mut self, c: &mut dyn Chunks, stack: &mut Vec<(u8, Entry)>) -> Result<()> {
        let (level, (h, len)) = stack.pop().expect("an entry to expand");
        let n = self.node(c, &h)?;
        let sum: u64 = n.1.iter().map(|e| e.1).sum();
        if n.0 + 1 != level || sum != len {
            return Err(misfit(&h, n.0, sum, level, len));
        }
        stack.extend(n.1.iter().rev().map(|e| (level - 1, *e)));
        Ok(())
    }

    /// A manifest as a stack of entries, the first on top.
    fn stack(manifest: &[u8]) -> Result<Vec<(u8, Entry)>> {
        let (level, entries) = decode(manifest)?;
        Ok(entries.into_iter().rev().map(|e| (level, e)).collect())
    }

    /// The first data chunk of a manifest.
    fn first_leaf(&mut self, c: &mut dyn Chunks, manifest: &[u8]) -> Result<Option<Digest>> {
        let (mut level, entries) = decode(manifest)?;
        let mut first = entries.first().map(|e| e.0);
        while level > 0
            && let Some(h) = first
        {
            first = self.node(c, &h)?.1.first().map(|e| e.0);
            level -= 1;
        }
        Ok(first)
    }

    /// How many leading bytes two manifests' payloads share by their
    /// trees: identical subtrees are skipped whole, the first differing
    /// entries opened, down to the first differing data chunk.
    fn shared(&mut self, c: &mut dyn Chunks, a: &[u8], b: &[u8]) -> Result<u64> {
        let (mut a, mut b) = (Self::stack(a)?, Self::stack(b)?);
        let mut at = 0;
        while let (Some(&x), Some(&y)) = (a.last(), b.last()) {
            if x == y {
                a.pop();
                b.pop();
                at += x.1.1;
                continue;
            }
            if x.0 == 0 && y.0 == 0 {
                break;
            }
            if x.0 >= y.0 {
                self.expand(c, &mut a)?;
            }
            if y.0 >= x.0 {
                self.expand(c, &mut b)?;
            }
        }
        Ok(at)
    }

    /// The data chunks of a manifest from byte `from` on (a chunk
    /// boundary; `None` if it is not one), reading only the index nodes
    /// that hold them.
    fn leaves_from(
        &mut self,
        c: &mut dyn Chunks,
        manifest: &[u8],
        from: u64,
    ) -> Result<Option<Vec<Entry>>> {
        let mut stack = Self::stack(manifest)?;
        let mut at = 0;
        while let Some(&(level, (_, len))) = stack.last() {
            if at + len <= from && from > 0 {
                stack.pop();
                at += len;
            } else if level > 0 {
                self.expand(c, &mut stack)?;
            } else {
                break;
            }
        }
        if at != from {
            return Ok(None);
        }
        // What follows, opened a level at a time, the index nodes of a
        // level fetched together (they were written one after another).
        let mut items: Vec<(u8, Entry)> = stack.into_iter().rev().collect();
        while let Some(top) = items.iter().map(|x| x.0).max().filter(|l| *l > 0) {
            let hashes: Vec<Digest> = items.iter().filter(|x| x.0 == top).map(|x| x.1.0).collect();
            let mut bodies = Vec::with_capacity(hashes.len());
            for part in hashes.chunks(BATCH) {
                bodies.extend(fetch(c, part, None)?);
            }
            let mut bodies = bodies.into_iter();
            let mut next = Vec::with_capacity(items.len() * 8);
            for (level, (h, len)) in items {
                if level != top {
                    next.push((level, (h, len)));
                    continue;
                }
                let body = bodies.next().expect("a body per index node");
                let (l, inner) = decode(&body)?;
                let sum: u64 = inner.iter().map(|e| e.1).sum();
                if l + 1 != level || sum != len {
                    return Err(misfit(&h, l, sum, level, len));
                }
                next.extend(inner.into_iter().map(|e| (l, e)));
            }
            items = next;
        }
        Ok(Some(items.into_iter().map(|x| x.1).collect()))
    }

    /// Whether the payload `manifest` describes hashes to `h`, and its
    /// length. Structure errors are `Corrupt`, as for [`assemble`].
    fn check(&mut self, c: &mut dyn Chunks, h: &[u8], manifest: &[u8]) -> Result<(bool, u64)> {
        use sha2::Digest as _;
        let first = self.first_leaf(c, manifest)?;
        let known = match first.and_then(|f| self.by_first.remove(&f)) {
            Some(k) => {
                let s = self.shared(c, &k.manifest, manifest)?;
                let mut states = k.states;
                // States past the shared bytes are the other payload's.
                states.split_off(&(s + 1));
                states
            }
            None => Default::default(),
        };
        let (mut from, mut leaves, mut states) = (0, None, known);
        // The last kept state at a boundary of this payload's chunks.
        while let Some((&at, _)) = states.last_key_value() {
            leaves = self.leaves_from(c, manifest, at)?;
            if leaves.is_some() {
                from = at;
                break;
            }
            states.pop_last();
        }
        let leaves = match leaves {
            Some(l) => l,
            None => self.leaves_from(c, manifest, 0)?.unwrap_or_default(),
        };
        let mut hasher = states.get(&from).cloned().unwrap_or_default();
        states.entry(0).or_default();
        let mut at = from;
        for (i, part) in leaves.chunks(BATCH).enumerate() {
            let hashes: Vec<Digest> = part.iter().map(|e| e.0).collect();
            let mut n = 0;
            c.read_chunks(&hashes, &mut |ch, b| {
                let b =
                    b.ok_or_else(|| corrupt(format!("payload chunk {} is missing", ch.to_hex())))?;
                let want = part[n].1;
                if b.len() as u64 != want {
                    return Err(corrupt(format!(
                        "payload chunk {} holds {} bytes where its index says {want}",
                        ch.to_hex(),
                        b.len()
                    )));
                }
                hasher.update(b);
                at += want;
                n += 1;
                if (i * BATCH + n).is_multiple_of(STATE_EVERY_LEAVES) {
                    states.insert(at, hasher.clone());
                }
                Ok(())
            })?;
        }
        let right = hasher.finalize()[..] == h[..];
        if right && let Some(first) = first {
            if self.by_first.len() >= DIGESTS_KEPT {
                self.by_first.clear();
            }
            self.by_first.insert(
                first,
                Checked {
                    manifest: manifest.to_vec(),
                    states,
                },
            );
        }
        Ok((right, at))
    }
}

/// Re-stores in chunks up to `max` payloads stored whole before chunking
/// (the rows after id `after`, oldest first), each row keeping its id and
/// address: one batch of a store's migration in place (`Store::open`).
/// A payload whose bytes do not hash to its address is left whole, for
/// verify to report. Returns the last row id looked at, `None` when no row
/// is left.
pub(crate) fn rechunk(c: &mut dyn Chunks, after: i64, max: usize) -> Result<Option<i64>> {
    let rows = c.whole_payloads(after, max)?;
    let Some(last) = rows.last().map(|r| r.0) else {
        c.rechunk_done()?;
        return Ok(None);
    };
    for (id, h, bytes) in rows {
        if sha(&bytes).0[..] != h[..] {
            continue;
        }
        let s = split_after(&bytes, &[], &mut 0);
        c.put_chunks(&s.refs())?;
        c.set_manifest(id, &s.manifest)?;
    }
    Ok(Some(last))
}

/// The first `max` bytes of a chunked payload and its length, reading
/// only the chunks (and index nodes) that hold them.
pub(crate) fn prefix(c: &mut dyn Chunks, manifest: &[u8], max: usize) -> Result<(Vec<u8>, u64)> {
    let (mut level, mut entries) = decode(manifest)?;
    let total: u64 = entries.iter().map(|e| e.1).sum();
    let want = (max as u64).min(total);
    // Keeps the entries up to the one that reaches `want` bytes.
    let covering = |entries: &mut Vec<Entry>| {
        let mut sum = 0;
        let keep = entries
            .iter()
            .position(|e| {
                sum += e.1;
                sum >= want
            })
            .map_or(entries.len(), |i| i + 1);
        entries.truncate(keep.max(1));
    };
    covering(&mut entries);
    while level > 0 {
        entries = descend(c, level, &entries, None)?;
        covering(&mut entries);
        level -= 1;
    }
    let hashes: Vec<Digest> = entries.iter().map(|e| e.0).collect();
    let mut out = Vec::with_capacity(want as usize);
    for b in fetch(c, &hashes, None)? {
        let room = want as usize - out.len();
        out.extend_from_slice(&b[..b.len().min(room)]);
    }
    Ok((out, total))
}

/// Every chunk a manifest names, index nodes included.
fn reachable(
    c: &mut dyn Chunks,
    manifest: &[u8],
    into: &mut HashSet<Digest>,
    walked: &mut HashSet<Digest>,
) -> Result<()> {
    let (mut level, mut entries) = decode(manifest)?;
    while level > 0 {
        into.extend(entries.iter().map(|e| e.0));
        // An index node already walked from another manifest adds nothing.
        entries.retain(|e| walked.insert(e.0));
        entries = descend(c, level, &entries, None)?;
        level -= 1;
    }
    into.extend(entries.iter().map(|e| e.0));
    Ok(())
}

/// After the manifest of one payload was removed (redaction): deletes the
/// chunks it named that no other payload names, and returns how many
/// bytes they held and how many chunks were kept for other payloads.
pub(crate) fn release(c: &mut dyn Chunks, manifest: &[u8]) -> Result<(u64, usize)> {
    let mut mine = HashSet::new();
    reachable(c, manifest, &mut mine, &mut HashSet::new())?;
    let mut others = Vec::new();
    c.manifests(&mut |_, m| {
        others.push(m.to_vec());
        Ok(())
    })?;
    let mut used = HashSet::new();
    let mut walked = HashSet::new();
    for m in others {
        reachable(c, &m, &mut used, &mut walked)?;
    }
    let gone: Vec<Digest> = mine
        .iter()
        .filter(|h| !used.contains(*h))
        .copied()
        .collect();
    let mut bytes = 0u64;
    for part in gone.chunks(BATCH) {
        bytes += c
            .get_chunks(part)?
            .iter()
            .flatten()
            .map(|b| b.len() as u64)
            .sum::<u64>();
        c.delete_chunks(part)?;
    }
    Ok((bytes, mine.len() - gone.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    /// Chunks by hash, manifests, and the bytes read so far.
    struct Mem(HashMap<Digest, Vec<u8>>, Vec<Vec<u8>>, u64);

    impl Chunks for Mem {
        fn put_chunks(&mut self, pieces: &[(Digest, &[u8])]) -> Result<()> {
            for (h, b) in pieces {
                self.0.entry(*h).or_insert_with(|| b.to_vec());
            }
            Ok(())
        }
        fn get_chunks(&mut self, hashes: &[Digest]) -> Result<Vec<Option<Vec<u8>>>> {
            let got: Vec<_> = hashes.iter().map(|h| self.0.get(h).cloned()).collect();
            self.2 += got.iter().flatten().map(|b| b.len() as u64).sum::<u64>();
            Ok(got)
        }
        fn delete_chunks(&mut self, hashes: &[Digest]) -> Result<()> {
            for h in hashes {
                self.0.remove(h);
            }
            Ok(())
        }
        fn manifests(&mut self, f: &mut crate::backend::BlobVisitor<'_>) -> Result<()> {
            for m in &self.1 {
                f(b"", m)?;
            }
            Ok(())
        }
        fn whole_payloads(&mut self, _after: i64, _max: usize) -> Result<Vec<WholePayload>> {
            Ok(Vec::new())
        }
        fn set_manifest(&mut self, _id: i64, _manifest: &[u8]) -> Result<()> {
            Ok(())
        }
        fn rechunk_pending(&mut self) -> Result<bool> {
            Ok(false)
        }
        fn rechunk_done(&mut self) -> Result<()> {
            Ok(())
        }
    }

    /// A conversation's n-th request: the messages so far.
    fn request(n: usize) -> Vec<u8> {
        let mut s = String::from("{\"model\":\"m\",\"messages\":[");
        for i in 0..n {
            s.push_str(&format!(
                "{{\"role\":\"user\",\"content\":\"question {i}: {}\"}},",
                "why ".repeat(20 + i % 13)
            ));
        }
        s.push_str("{\"role\":\"user\",\"content\":\"last\"}],\"stream\":true}");
        s.into_bytes()
    }

    #[test]
    fn a_payload_reads_back_byte_identical_and_prefixes_are_its_start() {
        let mut m = Mem::default();
        for n in [0, 1, 50, 300, 3000] {
            let p = request(n);
            let s = split(&p);
            m.put_chunks(&s.refs()).unwrap();
            assert_eq!(assemble(&mut m, &s.manifest).unwrap(), p);
            for max in [0, 1, 100, 5000, p.len(), p.len() + 7] {
                let (head, len) = prefix(&mut m, &s.manifest, max).unwrap();
                assert_eq!(len, p.len() as u64);
                assert_eq!(head, p[..max.min(p.len())]);
            }
        }
    }

    #[test]
    fn a_growing_conversation_adds_a_bounded_number_of_bytes_per_request() {
        let mut m = Mem::default();
        let mut last = 0;
        for n in (1..=1500).step_by(1) {
            let p = request(n);
            let s = split(&p);
            m.put_chunks(&s.refs()).unwrap();
            let stored: usize = m.0.values().map(Vec::len).sum();
            if n > 1000 {
                // Each request adds ~130 bytes of message; what it costs
                // stays bounded while the request itself is ~200 KB.
                assert!(stored - last < 24 * 1024, "request {n}: {}", stored - last);
                assert!(s.manifest.len() <= 2 + ROOT_FANOUT * 36);
            }
            last = stored;
        }
    }

    /// What `Recent` gives for `p`, checked against a computation from
    /// scratch; the bytes it hashed and cut for it.
    fn through(r: &mut Recent, m: &mut Mem, p: &[u8]) -> u64 {
        let before = r.hashed + r.cut;
        let h = r.hash(p);
        assert_eq!(h, convo_core::hash::content_hash(p));
        let got = r.split(&h, p);
        let fresh = split(p);
        assert_eq!(got.manifest, fresh.manifest);
        assert_eq!(got.pieces, fresh.pieces);
        m.put_chunks(&got.refs()).unwrap();
        assert_eq!(assemble(m, &got.manifest).unwrap(), p);
        r.hashed + r.cut - before
    }

    #[test]
    fn recent_payloads_give_the_digest_and_chunks_of_a_computation_from_scratch() {
        let mut r = Recent::default();
        let mut m = Mem::default();
        for n in 1..=120 {
            through(&mut r, &mut m, &request(n));
        }
        // An edit in the middle, an older and shorter one, the same one
        // again, one cut short inside a chunk, an unrelated one, one that
        // grows past `MAX_CHUNK` runs of the same byte.
        let mut edited = request(90);
        edited[4321] ^= 0x20;
        let mut short = request(120);
        short.truncate(9_001);
        let mut runs = request(60);
        runs.extend(std::iter::repeat_n(b'a', 9_000));
        let mut more_runs = runs.clone();
        more_runs.extend(std::iter::repeat_n(b'a', 3_000));
        for p in [
            edited,
            request(40),
            request(120),
            request(120),
            short,
            b"{\"other\":1}".repeat(700),
            runs,
            more_runs,
            request(121),
        ] {
            through(&mut r, &mut m, &p);
        }
    }

    #[test]
    fn a_growing_conversation_is_hashed_and_cut_only_where_it_grew() {
        let mut r = Recent::default();
        let mut m = Mem::default();
        for n in 1..=1200 {
            let p = request(n);
            let work = through(&mut r, &mut m, &p);
            if n > 100 {
                // The request is 30–160 KB; what is hashed and cut for it
                // is the message it adds, the last chunk before it and up
                // to one SHA-256 state interval: the same at 100 and 1,200.
                assert!(
                    work < 2 * STATE_EVERY as u64 + 2 * MAX_CHUNK as u64,
                    "request {n} ({} bytes): {work} bytes hashed and cut",
                    p.len()
                );
            }
        }
    }

    #[test]
    fn chunks_are_believed_stored_only_once_their_transaction_committed() {
        let d = |b: u8| Digest([b; 32]);
        let mut s = Stored::default();
        s.begin();
        assert!(!s.has(&d(1)), "nothing before the version is checked");
        s.check(7);
        s.put(d(1));
        assert!(s.has(&d(1)));
        // Rolled back: forgotten.
        s.begin();
        s.check(7);
        assert!(!s.has(&d(1)));
        s.put(d(2));
        s.committed();
        s.begin();
        s.check(7);
        assert!(s.has(&d(2)));
        s.committed();
        // Another connection committed meanwhile: nothing is believed.
        s.begin();
        s.check(8);
        assert!(!s.has(&d(2)));
        s.put(d(3));
        s.committed();
        s.begin();
        s.check(8);
        assert!(s.has(&d(3)));
        s.forget();
        assert!(!s.has(&d(3)));
    }

    #[test]
    fn a_tampered_or_missing_chunk_is_an_error_never_short_bytes() {
        let mut m = Mem::default();
        let p = request(800);
        let s = split(&p);
        m.put_chunks(&s.refs()).unwrap();
        let victim = s.pieces[3].0;
        let mut bad = m.0[&victim].clone();
        bad[0] ^= 1;
        m.0.insert(victim, bad);
        let h = ContentHash(sha(&p));
        let e = payload(&mut m, &h, true, s.manifest.clone()).unwrap_err();
        assert!(e.to_string().contains("does not hash"), "{e}");
        for keep in [true, false] {
            let mut named = Vec::new();
            scan_chunked(
                &mut m,
                vec![(h.as_bytes().to_vec(), s.manifest.clone())],
                keep,
                &mut |_, r| {
                    named.push(r.map(|s| s.size()));
                    Ok(())
                },
            )
            .unwrap();
            let why = named.pop().unwrap().unwrap_err();
            assert!(why.contains(&victim.to_hex()), "{why}");
        }
        m.0.remove(&victim);
        let e = assemble(&mut m, &s.manifest).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }

    /// A conversation's requests, each the history plus one question,
    /// chunked; their addresses and manifests as a blob scan gives them.
    fn conversation(m: &mut Mem, calls: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        (1..=calls)
            .map(|n| {
                let p = request(n * 10);
                let s = split(&p);
                m.put_chunks(&s.refs()).unwrap();
                (sha(&p).0.to_vec(), s.manifest.clone())
            })
            .collect()
    }

    fn scan_digests(m: &mut Mem, rows: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<Result<u64, String>> {
        let mut out = Vec::new();
        scan_chunked(m, rows, false, &mut |_, r| {
            out.push(r.map(|s| s.size()));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn verify_reads_a_conversation_once_not_once_per_call() {
        let mut per_call = Vec::new();
        for calls in [30, 120] {
            let mut m = Mem::default();
            let rows = conversation(&mut m, calls);
            let resent: u64 = (1..=calls).map(|n| request(n * 10).len() as u64).sum();
            let distinct: u64 = m.0.values().map(|b| b.len() as u64).sum();
            m.2 = 0;
            let got = scan_digests(&mut m, rows);
            assert!(got.iter().all(|r| r.is_ok()), "{got:?}");
            assert_eq!(
                got.iter().map(|r| *r.as_ref().unwrap()).sum::<u64>(),
                resent
            );
            // Each call rereads at most the chunks since the last kept
            // state (8 chunks) and the index nodes on its path: a
            // constant per call, not the history.
            assert!(
                m.2 < distinct + calls as u64 * 12 * 1024,
                "{calls} calls: read {} bytes for {distinct} distinct ({resent} resent)",
                m.2
            );
            per_call.push(m.2 as f64 / calls as f64);
            if calls == 120 {
                assert!(m.2 * 10 < resent, "{calls} calls: read {} of {resent}", m.2);
            }
        }
        // Four times the calls, each with four times the history on
        // average: about the same read per call.
        assert!(per_call[1] < per_call[0] * 1.5, "{per_call:?}");
    }

    #[test]
    fn a_chunk_shared_by_later_calls_fails_each_payload_that_holds_it() {
        let mut m = Mem::default();
        let rows = conversation(&mut m, 30);
        // A chunk of call 3's questions as the last call holds it (cut
        // by content), resent by the calls after call 3.
        let tail = request(300);
        let at = tail.windows(12).position(|w| w == b"question 28:").unwrap();
        let s = split(&tail);
        let mut end = 0u64;
        let victim = s
            .leaves
            .iter()
            .find(|e| {
                end += e.1;
                end > at as u64
            })
            .unwrap()
            .0;
        let mut bad = m.0[&victim].clone();
        bad[0] ^= 1;
        m.0.insert(victim, bad);
        let holds: Vec<bool> = (1..=30)
            .map(|n| split(&request(n * 10)).leaves.iter().any(|e| e.0 == victim))
            .collect();
        assert!(holds.iter().filter(|h| **h).count() >= 10, "{holds:?}");
        let got = scan_digests(&mut m, rows);
        for (n, (r, held)) in got.iter().zip(&holds).enumerate() {
            match r {
                Ok(_) => assert!(!held, "call {} holds the edited chunk but passed", n + 1),
                Err(why) => {
                    assert!(held, "call {} failed: {why}", n + 1);
                    assert!(why.contains(&victim.to_hex()), "{why}");
                }
            }
        }
    }

    #[test]
    fn release_keeps_the_chunks_another_payload_names() {
        let mut m = Mem::default();
        let a = request(400);
        let b = request(401);
        let (sa, sb) = (split(&a), split(&b));
        m.put_chunks(&sa.refs()).unwrap();
        m.put_chunks(&sb.refs()).unwrap();
        m.1.push(sa.manifest.clone());
        let (freed, kept) = release(&mut m, &sb.manifest).unwrap();
        assert!(kept > 0 && freed > 0);
        assert_eq!(assemble(&mut m, &sa.manifest).unwrap(), a);
        assert!(assemble(&mut m, &sb.manifest).is_err());
        m.1.clear();
        release(&mut m, &sa.manifest).unwrap();
        assert!(m.0.is_empty());
    }

    #[test]
    fn a_payload_over_recent_one_is_hashed_and_cut_the_same_but_not_remembered() {
        // One huge message (an imported 50 MB record) is not copied into
        // the memory of recent payloads; its digest and manifest are those
        // computed from scratch all the same.
        let big: Vec<u8> = (0..RECENT_ONE + 4096)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut r = Recent::default();
        let small = request(300);
        r.hash(&small);
        let h = r.hash(&big);
        assert_eq!(h, convo_core::hash::content_hash(&big));
        assert_eq!(r.seen.len(), 1, "only the small payload is remembered");
        assert_eq!(r.held, small.len());
        assert_eq!(r.split(&h, &big).manifest, split(&big).manifest);
    }
}
