//! The projection's own bookkeeping, kept in `<repo>/convo/`:
//!
//! - `layout`: `dag` or `sessions`, fixed when the repository is created;
//! - `map`: append-only, 88-byte records `u64le seq || 32-byte node ||
//!   20-byte commit || 20-byte aux || u64le pos` (all-zero = none), telling
//!   which commit each projected node became (`aux` is the root tree for
//!   `dag`, the last user commit for `sessions`; `pos` the node's position
//!   in its timeline, which places its message directory);
//! - `state`: rewritten atomically (write + rename) after each batch: the
//!   follow cursor and each timeline's tip.
//!
//! A batch is written in this order: pack, refs, `map`, `state`. A crash at
//! any point leaves `state` at the previous batch, so the next sync redoes
//! the batch and, because every object is deterministic, writes the same
//! commits and refs as an uninterrupted run. Loading truncates `map` to the
//! records of saved batches (a torn last record, or records of a batch
//! whose `state` was never saved, would otherwise misalign later appends).

use crate::{Error, Result};
use convo_core::{NodeHash, SessionId};
use convo_store::Cause;
use gix::ObjectId;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// What a node became in the repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rec {
    pub commit: Option<ObjectId>,
    pub aux: Option<ObjectId>,
    /// 1-based position in the timeline (of the last commit for `sessions`).
    pub pos: u64,
}

/// A timeline's tip: the node at its head and its git branch name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tip {
    pub session: SessionId,
    pub branch: String,
    pub git_name: String,
    pub node: NodeHash,
}

pub struct Bookkeeping {
    dir: PathBuf,
    pub cursor: u64,
    pub map: HashMap<NodeHash, Rec>,
    /// Keyed by tip node.
    pub tips: HashMap<NodeHash, Tip>,
    unsaved: Vec<(u64, NodeHash, Rec)>,
}

const REC: usize = 88;

fn oid(b: &[u8]) -> Option<ObjectId> {
    if b.iter().all(|&x| x == 0) {
        None
    } else {
        Some(ObjectId::from_bytes_or_panic(b))
    }
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Io(Cause::with_context(format!("{}", path.display()), e))
}

impl Bookkeeping {
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_with(dir, true)
    }

    /// Loads without repairing `map` (for readers that hold no lock).
    pub fn load_readonly(dir: &Path) -> Result<Self> {
        Self::load_with(dir, false)
    }

    fn load_with(dir: &Path, repair: bool) -> Result<Self> {
        let mut me = Bookkeeping {
            dir: dir.to_owned(),
            cursor: 0,
            map: HashMap::new(),
            tips: HashMap::new(),
            unsaved: Vec::new(),
        };
        let state_path = dir.join("state");
        let mut cursor = 0;
        if state_path.exists() {
            let text = std::fs::read_to_string(&state_path).map_err(|e| io(&state_path, e))?;
            for (i, line) in text.lines().enumerate() {
                let bad =
                    || Error::corrupt(format!("{} line {}: `{line}`", state_path.display(), i + 1));
                let parts: Vec<&str> = line.split(' ').collect();
                match parts.as_slice() {
                    ["cursor", n] => cursor = n.parse().map_err(|_| bad())?,
                    ["tip", s, node, branch, git_name] => {
                        let tip = Tip {
                            session: SessionId::parse(s).map_err(|_| bad())?,
                            branch: (*branch).to_owned(),
                            git_name: (*git_name).to_owned(),
                            node: NodeHash::from_hex(node).map_err(|_| bad())?,
                        };
                        me.tips.insert(tip.node, tip);
                    }
                    _ => return Err(bad()),
                }
            }
        }
        me.cursor = cursor;
        let map_path = dir.join("map");
        if map_path.exists() {
            let bytes = std::fs::read(&map_path).map_err(|e| io(&map_path, e))?;
            // A torn last record (a crash mid-append) and records past the
            // cursor (a batch whose state was never saved) are cut off.
            let mut keep = 0;
            for r in bytes.chunks_exact(REC) {
                let seq = u64::from_le_bytes(r[..8].try_into().map_err(|_| Error::corrupt("map"))?);
                if seq > cursor {
                    break;
                }
                keep += REC;
                let node = NodeHash::from_slice(&r[8..40]).ok_or_else(|| Error::corrupt("map"))?;
                me.map.insert(
                    node,
                    Rec {
                        commit: oid(&r[40..60]),
                        aux: oid(&r[60..80]),
                        pos: u64::from_le_bytes(
                            r[80..88].try_into().map_err(|_| Error::corrupt("map"))?,
                        ),
                    },
                );
            }
            if repair && keep < bytes.len() {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&map_path)
                    .map_err(|e| io(&map_path, e))?;
                f.set_len(keep as u64).map_err(|e| io(&map_path, e))?;
            }
        }
        Ok(me)
    }

    pub fn record(&mut self, seq: u64, node: NodeHash, rec: Rec) {
        self.map.insert(node, rec);
        self.unsaved.push((seq, node, rec));
    }

    /// Makes the batch durable: appends map records, then replaces `state`.
    pub fn save(&mut self, cursor: u64) -> Result<()> {
        let map_path = self.dir.join("map");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&map_path)
            .map_err(|e| io(&map_path, e))?;
        let mut buf = Vec::with_capacity(self.unsaved.len() * REC);
        for (seq, node, rec) in self.unsaved.drain(..) {
            buf.extend_from_slice(&seq.to_le_bytes());
            buf.extend_from_slice(node.as_bytes());
            for o in [rec.commit, rec.aux] {
                match o {
                    Some(id) => buf.extend_from_slice(id.as_bytes()),
                    None => buf.extend_from_slice(&[0; 20]),
                }
            }
            buf.extend_from_slice(&rec.pos.to_le_bytes());
        }
        f.write_all(&buf).map_err(|e| io(&map_path, e))?;
        f.sync_data().map_err(|e| io(&map_path, e))?;
        crate::pause_point("map-saved");
        let mut text = format!("cursor {cursor}\n");
        let mut tips: Vec<&Tip> = self.tips.values().collect();
        tips.sort_by(|a, b| (a.session, &a.branch).cmp(&(b.session, &b.branch)));
        for t in tips {
            text.push_str(&format!(
                "tip {} {} {} {}\n",
                t.session, t.node, t.branch, t.git_name
            ));
        }
        let tmp = self.dir.join("state.tmp");
        std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, self.dir.join("state")).map_err(|e| io(&tmp, e))?;
        self.cursor = cursor;
        Ok(())
    }
}
