//! The versioned state store: a persistent, content-addressed hash-array
//! mapped trie (HAMT) with 16-way branching.
//!
//! A key lives at the path given by the nibbles of SHA-256(key). Each trie
//! node is stored under the SHA-256 of its encoding, so a root hash names one
//! whole version of the state, and versions share every node they have in
//! common: a `put` or `delete` rewrites only the nodes on one root-to-leaf
//! path (depth ≈ log16 of the number of keys), never the whole map.
//!
//! The trie is *canonical*: the same set of key/value pairs always gives the
//! same root, whatever order they were written in. A non-root node always
//! holds at least two keys; a subtree left with one key after a delete
//! collapses into a leaf in its parent.
//!
//! Values are not stored in the trie: a leaf holds the [`ContentHash`] of the
//! value, whose bytes live in the content store next to payloads.
//!
//! Encoding of one node (hashed as `"convo.state.v1" || body`):
//!
//! ```text
//! body  = u16le bitmap || entry*          one entry per set bit, ascending
//! entry = 0x00 || lp(key) || h32 value    a leaf
//!       | 0x01 || h32 child               a child node
//! ```
//!
//! The algorithms are generic over [`StateNodes`], so this module does no
//! I/O: a backend supplies `load` and `save`.

use crate::{ContentHash, Digest, StateRoot, sha256};
use std::collections::HashSet;

/// Domain tag prefixed to a node body before hashing.
pub const STATE_TAG_V1: &[u8] = b"convo.state.v1";
/// Longest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 4096;
const FANOUT: usize = 16;
const MAX_DEPTH: usize = 64;

/// Where trie nodes are read from and written to.
pub trait StateNodes {
    /// The backend's error.
    type Error;
    /// The body stored under `hash`, if any.
    fn load(&mut self, hash: &Digest) -> Result<Option<Vec<u8>>, Self::Error>;
    /// Stores `body` under `hash` (a no-op if it is already there).
    fn save(&mut self, hash: &Digest, body: &[u8]) -> Result<(), Self::Error>;
}

/// Why a state operation failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError<E> {
    /// The backend failed.
    #[error(transparent)]
    Backend(E),
    /// A node the trie points to is not stored.
    #[error("state node {0} is missing")]
    Missing(Digest),
    /// A node whose bytes do not decode, or do not hash to its address.
    #[error("state node {hash} is corrupt: {why}")]
    Corrupt {
        /// The node's address.
        hash: Digest,
        /// What is wrong with it.
        why: String,
    },
    /// An empty key or a key over [`MAX_KEY_LEN`] bytes.
    #[error("state keys must be 1 to {MAX_KEY_LEN} bytes long")]
    BadKey,
}

/// One slot of a trie node.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Entry {
    /// A key and the hash of its value.
    Leaf(Vec<u8>, ContentHash),
    /// A subtree holding at least two keys.
    Child(Digest),
}

/// A decoded trie node: 16 slots.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct MapNode {
    /// Slot `i` holds the keys whose hash has nibble `i` at this depth.
    pub slots: [Option<Entry>; FANOUT],
}

impl MapNode {
    /// The node's encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut bitmap = 0u16;
        let mut out = vec![0, 0];
        for (i, slot) in self.slots.iter().enumerate() {
            let Some(e) = slot else { continue };
            bitmap |= 1 << i;
            match e {
                Entry::Leaf(k, v) => {
                    out.push(0);
                    out.extend_from_slice(&(k.len() as u64).to_le_bytes());
                    out.extend_from_slice(k);
                    out.extend_from_slice(v.as_bytes());
                }
                Entry::Child(h) => {
                    out.push(1);
                    out.extend_from_slice(&h.0);
                }
            }
        }
        out[..2].copy_from_slice(&bitmap.to_le_bytes());
        out
    }

    /// Decodes a body; `None` when it is malformed.
    pub fn decode(body: &[u8]) -> Option<MapNode> {
        let mut n = MapNode::default();
        let bitmap = u16::from_le_bytes(body.get(..2)?.try_into().ok()?);
        let mut rest = &body[2..];
        let mut take = |len: usize| -> Option<&[u8]> {
            let (a, b) = rest.split_at_checked(len)?;
            rest = b;
            Some(a)
        };
        for i in 0..FANOUT {
            if bitmap & (1 << i) == 0 {
                continue;
            }
            n.slots[i] = Some(match take(1)?[0] {
                0 => {
                    let len = u64::from_le_bytes(take(8)?.try_into().ok()?);
                    let key = take(usize::try_from(len).ok()?)?.to_vec();
                    Entry::Leaf(key, ContentHash(Digest::from_slice(take(32)?)?))
                }
                1 => Entry::Child(Digest::from_slice(take(32)?)?),
                _ => return None,
            });
        }
        take(0)?;
        rest.is_empty().then_some(n)
    }

    /// The node's address.
    pub fn hash(&self) -> Digest {
        hash_body(&self.encode())
    }

    fn count(&self) -> usize {
        self.slots.iter().flatten().count()
    }
}

fn hash_body(body: &[u8]) -> Digest {
    let mut b = Vec::with_capacity(STATE_TAG_V1.len() + body.len());
    b.extend_from_slice(STATE_TAG_V1);
    b.extend_from_slice(body);
    sha256(&b)
}

/// The root of the empty state.
pub fn empty_root() -> StateRoot {
    StateRoot(MapNode::default().hash())
}

fn nibble(kh: &[u8; 32], depth: usize) -> usize {
    let b = kh[depth / 2];
    usize::from(if depth.is_multiple_of(2) {
        b >> 4
    } else {
        b & 0x0f
    })
}

fn key_hash(key: &[u8]) -> [u8; 32] {
    sha256(key).0
}

fn check_key<E>(key: &[u8]) -> Result<(), StateError<E>> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(StateError::BadKey);
    }
    Ok(())
}

fn load<S: StateNodes>(store: &mut S, hash: &Digest) -> Result<MapNode, StateError<S::Error>> {
    if *hash == empty_root().0 {
        return Ok(MapNode::default());
    }
    let body = store
        .load(hash)
        .map_err(StateError::Backend)?
        .ok_or(StateError::Missing(*hash))?;
    MapNode::decode(&body).ok_or_else(|| StateError::Corrupt {
        hash: *hash,
        why: "its bytes do not decode as a trie node".into(),
    })
}

fn save<S: StateNodes>(store: &mut S, node: &MapNode) -> Result<Digest, StateError<S::Error>> {
    let body = node.encode();
    let h = hash_body(&body);
    store.save(&h, &body).map_err(StateError::Backend)?;
    Ok(h)
}

/// The value hash stored under `key` in the version `root`.
pub fn get<S: StateNodes>(
    store: &mut S,
    root: &StateRoot,
    key: &[u8],
) -> Result<Option<ContentHash>, StateError<S::Error>> {
    check_key(key)?;
    let kh = key_hash(key);
    let mut node = load(store, &root.0)?;
    for depth in 0..MAX_DEPTH {
        match node.slots[nibble(&kh, depth)].take() {
            None => return Ok(None),
            Some(Entry::Leaf(k, v)) => return Ok((k == key).then_some(v)),
            Some(Entry::Child(h)) => node = load(store, &h)?,
        }
    }
    Ok(None)
}

/// The version of `root` with `key` set to `value`.
pub fn put<S: StateNodes>(
    store: &mut S,
    root: &StateRoot,
    key: &[u8],
    value: ContentHash,
) -> Result<StateRoot, StateError<S::Error>> {
    check_key(key)?;
    let kh = key_hash(key);
    put_at(store, &root.0, 0, &kh, key, value).map(StateRoot)
}

fn put_at<S: StateNodes>(
    store: &mut S,
    hash: &Digest,
    depth: usize,
    kh: &[u8; 32],
    key: &[u8],
    value: ContentHash,
) -> Result<Digest, StateError<S::Error>> {
    let mut node = load(store, hash)?;
    let slot = nibble(kh, depth);
    let new = match node.slots[slot].take() {
        None => Entry::Leaf(key.to_vec(), value),
        Some(Entry::Leaf(k, v)) if k == key => {
            if v == value {
                return Ok(*hash);
            }
            Entry::Leaf(k, value)
        }
        Some(Entry::Leaf(k, v)) => {
            let other = key_hash(&k);
            Entry::Child(pair(
                store,
                depth + 1,
                (&other, k, v),
                (kh, key.to_vec(), value),
            )?)
        }
        Some(Entry::Child(h)) => Entry::Child(put_at(store, &h, depth + 1, kh, key, value)?),
    };
    node.slots[slot] = Some(new);
    save(store, &node)
}

type Item<'a> = (&'a [u8; 32], Vec<u8>, ContentHash);

/// A node at `depth` holding exactly the two keys `a` and `b`.
fn pair<S: StateNodes>(
    store: &mut S,
    depth: usize,
    a: Item<'_>,
    b: Item<'_>,
) -> Result<Digest, StateError<S::Error>> {
    if depth >= MAX_DEPTH {
        // Two different keys with equal SHA-256: not expected in this universe.
        return Err(StateError::Corrupt {
            hash: Digest(*a.0),
            why: "two keys share a SHA-256".into(),
        });
    }
    let (na, nb) = (nibble(a.0, depth), nibble(b.0, depth));
    let mut node = MapNode::default();
    if na == nb {
        node.slots[na] = Some(Entry::Child(pair(store, depth + 1, a, b)?));
    } else {
        node.slots[na] = Some(Entry::Leaf(a.1, a.2));
        node.slots[nb] = Some(Entry::Leaf(b.1, b.2));
    }
    save(store, &node)
}

enum Removed {
    Unchanged,
    Empty,
    Leaf(Vec<u8>, ContentHash),
    Node(Digest),
}

/// The version of `root` without `key` (the same root if it was absent).
pub fn delete<S: StateNodes>(
    store: &mut S,
    root: &StateRoot,
    key: &[u8],
) -> Result<StateRoot, StateError<S::Error>> {
    check_key(key)?;
    let kh = key_hash(key);
    Ok(match delete_at(store, &root.0, 0, &kh, key)? {
        Removed::Unchanged => *root,
        Removed::Node(h) => StateRoot(h),
        // The root is never collapsed: delete_at saves it at depth 0.
        Removed::Empty | Removed::Leaf(..) => empty_root(),
    })
}

fn delete_at<S: StateNodes>(
    store: &mut S,
    hash: &Digest,
    depth: usize,
    kh: &[u8; 32],
    key: &[u8],
) -> Result<Removed, StateError<S::Error>> {
    let mut node = load(store, hash)?;
    let slot = nibble(kh, depth);
    match node.slots[slot].take() {
        None => return Ok(Removed::Unchanged),
        Some(Entry::Leaf(k, v)) if k != key => {
            let _ = (k, v);
            return Ok(Removed::Unchanged);
        }
        Some(Entry::Leaf(..)) => {}
        Some(Entry::Child(h)) => match delete_at(store, &h, depth + 1, kh, key)? {
            Removed::Unchanged => return Ok(Removed::Unchanged),
            Removed::Empty => {}
            Removed::Leaf(k, v) => node.slots[slot] = Some(Entry::Leaf(k, v)),
            Removed::Node(h) => node.slots[slot] = Some(Entry::Child(h)),
        },
    }
    if depth > 0 {
        match node.count() {
            0 => return Ok(Removed::Empty),
            1 => {
                if let Some(Entry::Leaf(k, v)) = node.slots.iter_mut().flatten().next() {
                    return Ok(Removed::Leaf(std::mem::take(k), *v));
                }
            }
            _ => {}
        }
    }
    Ok(Removed::Node(save(store, &node)?))
}

/// Keys and value hashes, sorted by key.
pub type Entries = Vec<(Vec<u8>, ContentHash)>;

/// Every key and value hash in the version `root`, sorted by key.
pub fn list<S: StateNodes>(
    store: &mut S,
    root: &StateRoot,
) -> Result<Entries, StateError<S::Error>> {
    let mut out = Vec::new();
    let mut stack = vec![root.0];
    while let Some(h) = stack.pop() {
        for e in load(store, &h)?.slots.into_iter().flatten() {
            match e {
                Entry::Leaf(k, v) => out.push((k, v)),
                Entry::Child(c) => stack.push(c),
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Checks the whole version `root`: every node is present, hashes to its
/// address, decodes, is canonical, and holds each key at the path its hash
/// gives. Nodes already in `seen` are skipped (versions share nodes), and
/// each value hash found is passed to `value`.
pub fn verify<S: StateNodes>(
    store: &mut S,
    root: &StateRoot,
    seen: &mut HashSet<Digest>,
    value: &mut dyn FnMut(&ContentHash),
) -> Result<(), StateError<S::Error>> {
    let mut stack: Vec<(Digest, Vec<u8>)> = vec![(root.0, Vec::new())];
    while let Some((h, path)) = stack.pop() {
        if !seen.insert(h) {
            continue;
        }
        let body = if h == empty_root().0 {
            MapNode::default().encode()
        } else {
            store
                .load(&h)
                .map_err(StateError::Backend)?
                .ok_or(StateError::Missing(h))?
        };
        let corrupt = |why: &str| StateError::Corrupt {
            hash: h,
            why: why.to_owned(),
        };
        if hash_body(&body) != h {
            return Err(corrupt("its bytes do not hash to its address"));
        }
        let node = MapNode::decode(&body).ok_or_else(|| corrupt("it does not decode"))?;
        let depth = path.len();
        if depth > 0 {
            let only_leaf = node.count() == 1
                && matches!(node.slots.iter().flatten().next(), Some(Entry::Leaf(..)));
            if node.count() == 0 || only_leaf {
                return Err(corrupt("an inner node holds fewer than two keys"));
            }
        }
        for (slot, e) in node.slots.iter().enumerate() {
            match e {
                None => {}
                Some(Entry::Leaf(k, v)) => {
                    let kh = key_hash(k);
                    let on_path = path
                        .iter()
                        .chain(std::iter::once(&(slot as u8)))
                        .enumerate()
                        .all(|(d, &n)| nibble(&kh, d) == usize::from(n));
                    if !on_path {
                        return Err(corrupt("a key sits where its hash does not lead"));
                    }
                    value(v);
                }
                Some(Entry::Child(c)) => {
                    if depth + 1 >= MAX_DEPTH {
                        return Err(corrupt("the trie is deeper than a hash is long"));
                    }
                    let mut p = path.clone();
                    p.push(slot as u8);
                    stack.push((*c, p));
                }
            }
        }
    }
    Ok(())
}

/// An in-memory [`StateNodes`], for tests and for computing roots offline.
#[derive(Default, Debug, Clone)]
pub struct MemNodes {
    /// Every node saved, by address.
    pub nodes: std::collections::HashMap<Digest, Vec<u8>>,
    /// How many `save` calls were made.
    pub saves: usize,
}

impl StateNodes for MemNodes {
    type Error = std::convert::Infallible;
    fn load(&mut self, hash: &Digest) -> Result<Option<Vec<u8>>, Self::Error> {
        Ok(self.nodes.get(hash).cloned())
    }
    fn save(&mut self, hash: &Digest, body: &[u8]) -> Result<(), Self::Error> {
        self.saves += 1;
        self.nodes.entry(*hash).or_insert_with(|| body.to_vec());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::content_hash;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn v(s: &str) -> ContentHash {
        content_hash(s.as_bytes())
    }

    #[test]
    fn put_get_delete() {
        let mut m = MemNodes::default();
        let r0 = empty_root();
        let r1 = put(&mut m, &r0, b"a", v("1")).expect("put");
        let r2 = put(&mut m, &r1, b"b", v("2")).expect("put");
        assert_eq!(get(&mut m, &r2, b"a").expect("get"), Some(v("1")));
        assert_eq!(
            get(&mut m, &r1, b"b").expect("get"),
            None,
            "old version unchanged"
        );
        let r3 = delete(&mut m, &r2, b"b").expect("delete");
        assert_eq!(r3, r1, "delete returns to the canonical earlier root");
        assert_eq!(delete(&mut m, &r3, b"zzz").expect("delete"), r3);
        assert_eq!(delete(&mut m, &r1, b"a").expect("delete"), r0);
        assert_eq!(get(&mut m, &r0, b"").unwrap_err(), StateError::BadKey);
    }

    #[test]
    fn a_write_touches_a_logarithmic_number_of_nodes() {
        let mut m = MemNodes::default();
        let mut r = empty_root();
        for i in 0..20_000 {
            r = put(&mut m, &r, format!("key-{i}").as_bytes(), v("x")).expect("put");
        }
        m.saves = 0;
        put(&mut m, &r, b"one-more", v("y")).expect("put");
        assert!(m.saves <= 8, "a put saved {} nodes", m.saves);
    }

    #[test]
    fn verify_catches_a_misplaced_key() {
        let mut m = MemNodes::default();
        let mut node = MapNode::default();
        // "a" hashes to some nibble; put it in a slot it does not belong to.
        let right = nibble(&key_hash(b"a"), 0);
        node.slots[(right + 1) % 16] = Some(Entry::Leaf(b"a".to_vec(), v("1")));
        let h = save(&mut m, &node).expect("save");
        let err = verify(&mut m, &StateRoot(h), &mut HashSet::new(), &mut |_| {});
        assert!(matches!(err, Err(StateError::Corrupt { .. })));
    }

    proptest! {
        #[test]
        fn matches_a_btreemap_and_is_canonical(ops in prop::collection::vec((0u8..40, any::<bool>(), 0u8..4), 0..200)) {
            let mut m = MemNodes::default();
            let mut r = empty_root();
            let mut model = BTreeMap::new();
            for (k, is_put, val) in ops {
                let key = format!("k{k}").into_bytes();
                if is_put {
                    r = put(&mut m, &r, &key, v(&val.to_string())).expect("put");
                    model.insert(key, v(&val.to_string()));
                } else {
                    r = delete(&mut m, &r, &key).expect("delete");
                    model.remove(&key);
                }
            }
            let listed: BTreeMap<_, _> = list(&mut m, &r).expect("list").into_iter().collect();
            prop_assert_eq!(&listed, &model);
            // Canonical: building the same set from scratch, in another order, gives the same root.
            let mut fresh = empty_root();
            for (k, val) in model.iter().rev() {
                fresh = put(&mut m, &fresh, k, *val).expect("put");
            }
            prop_assert_eq!(fresh, r);
            let checked = verify(&mut m, &r, &mut HashSet::new(), &mut |_| ());
            prop_assert!(checked.is_ok());
        }
    }
}
