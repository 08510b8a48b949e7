//! The OTLP export bodies the receiver keeps (`otlp_exports`): the
//! residual format, and the bodies rebuilt from it.
//!
//! A body is kept as a *residual*: a delta (copies and literal bytes,
//! [`encode`]) against a dictionary ([`dictionary`]) made of an earlier
//! body (the row's `base`) and the payloads of the nodes the export wrote
//! (follow numbers `nodes`), each as it is, JSON-escaped, JSON-escaped
//! twice (a message inside an attribute of an OTLP/JSON body) and with
//! `\uXXXX` for every non-ASCII character (Python's `json.dumps`). What
//! is stored is what neither holds. Which body is the base and why is
//! `convo_llm::otel::raw`'s business; this module only rebuilds.
//!
//! **Residual format.** One byte: `0` the body follows as is, `1` a delta
//! follows. A delta is a list of ops over the dictionary followed by the
//! body as decoded so far (so a body repeating itself copies itself, as
//! LZ77 does): a byte `t < 0x80` is `t + 1` literal bytes that follow; a
//! byte `t ≥ 0x80` is a copy of `(t & 0x7f) + MIN_COPY` bytes (`0xff`: a
//! LEB128 length follows, added to `0x7f + MIN_COPY`), then the copy's
//! start as a zigzag LEB128 difference from where the previous copy
//! ended.
//!
//! **Encoding.** Greedy: at each position the copy that saves the most
//! bytes once its op is paid for, among the continuation of the last copy
//! and up to [`CHAIN`] earlier positions sharing the next 8 bytes' hash
//! (newest first; the first of [`NICE`] bytes or more is taken at once), so a fragment that recurs (`{"resource…`, a message's
//! JSON around its text) is copied from where the longest run follows.
//!
//! **Redaction.** [`crate::Store::redact`] drops every kept body that
//! holds the redacted bytes (in any of the forms above), and every body
//! rebuilt from one it drops: the text leaves the store with its payload.

use crate::backend::{OtlpExportRow, Tx};
use crate::redact::payload_in;
use crate::{Result, StoreError};
use std::collections::HashMap;
use std::sync::Arc;

/// The shortest copy an op encodes (shorter matches go as literals).
const MIN_COPY: usize = 6;
/// The bytes hashed to find a match.
const WINDOW: usize = 8;
/// The most earlier positions with the same hash a match is looked for
/// at (newest first).
const CHAIN: usize = 16;
/// A copy this long is taken without looking further (comparing the
/// candidates of a body that repeats a long history would cost each one's
/// whole length; a better one would save a byte or two).
const NICE: usize = 1024;
/// The match table: 2^BITS slots.
const BITS: u32 = 16;

/// Residual tag: the body as is.
pub const WHOLE: u8 = 0;
/// Residual tag: a delta.
const DELTA: u8 = 1;

fn hash(b: &[u8]) -> usize {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..WINDOW]);
    (u64::from_le_bytes(w).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - BITS)) as usize
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &[u8], at: &mut usize) -> std::result::Result<u64, String> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let x = *b.get(*at).ok_or("the residual ends inside a number")?;
        *at += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x < 0x80 {
            return Ok(v);
        }
    }
    Err("a number in the residual is too long".into())
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// The bytes of the op copying `len` bytes from `from`, the last copy
/// having ended at `expected`.
fn op_bytes(from: usize, len: usize, expected: usize) -> usize {
    let l = len - MIN_COPY;
    let head = if l < 0x7f {
        1
    } else {
        1 + varint_len((l - 0x7f) as u64)
    };
    let delta = from as i64 - expected as i64;
    head + varint_len(((delta << 1) ^ (delta >> 63)) as u64)
}

fn flush_literals(out: &mut Vec<u8>, lit: &[u8]) {
    for c in lit.chunks(128) {
        out.push((c.len() - 1) as u8);
        out.extend_from_slice(c);
    }
}

/// `body` as a residual against `dict` (see the module docs).
pub fn encode(dict: &[u8], body: &[u8]) -> Vec<u8> {
    // The source: the dictionary, then the body (copies may reach into
    // what was already encoded).
    let mut src = Vec::with_capacity(dict.len() + body.len());
    src.extend_from_slice(dict);
    src.extend_from_slice(body);
    let d = dict.len();
    if src.len() >= u32::MAX as usize {
        return whole(body);
    }
    let n = src.len();
    let mut m = Matcher::new(&src);
    for p in 0..d {
        m.index(p);
    }
    let mut out = vec![DELTA];
    let mut lit_from = d;
    let mut expected = 0usize;
    let mut i = d;
    while i < n {
        let best = m.best(i, i - lit_from, expected);
        if best.len < MIN_COPY {
            m.index(i);
            i += 1;
            continue;
        }
        let (from, len) = (best.from, best.len);
        flush_literals(&mut out, &src[lit_from..i]);
        put_copy(&mut out, from, len, expected);
        for p in i..(i + len).min(n) {
            // Every position of a long copy would cost; a few suffice.
            if len < 64 || (p - i).is_multiple_of(16) {
                m.index(p);
            }
        }
        expected = from + len;
        i += len;
        lit_from = i;
    }
    flush_literals(&mut out, &src[lit_from..n]);
    if out.len() > body.len() + 1 {
        return whole(body);
    }
    out
}

/// The residual holding `body` as is.
fn whole(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 1);
    out.push(WHOLE);
    out.extend_from_slice(body);
    out
}

/// The op copying `len` bytes from `from`, the last copy having ended at
/// `expected` (see the module docs).
fn put_copy(out: &mut Vec<u8>, from: usize, len: usize, expected: usize) {
    let l = len - MIN_COPY;
    if l < 0x7f {
        out.push(0x80 | l as u8);
    } else {
        out.push(0xff);
        put_varint(out, (l - 0x7f) as u64);
    }
    let delta = from as i64 - expected as i64;
    put_varint(out, ((delta << 1) ^ (delta >> 63)) as u64);
}

/// A copy [`encode`] could make: where from, how long, and the bytes it
/// saves once its op is paid for.
#[derive(Default)]
struct Candidate {
    from: usize,
    len: usize,
    gain: i64,
}

/// Where [`encode`] finds copies: the source (the dictionary, then the
/// body) and its hash chains: the newest position with each hash, and
/// before each position the one before it with the same hash.
struct Matcher<'s> {
    src: &'s [u8],
    head: Vec<u32>,
    prev: Vec<u32>,
}

impl<'s> Matcher<'s> {
    fn new(src: &'s [u8]) -> Self {
        Matcher {
            src,
            head: vec![u32::MAX; 1 << BITS],
            prev: vec![u32::MAX; src.len()],
        }
    }

    /// Adds position `p` to its hash chain.
    fn index(&mut self, p: usize) {
        if p + WINDOW <= self.src.len() {
            let h = hash(&self.src[p..]);
            self.prev[p] = self.head[h];
            self.head[h] = p as u32;
        }
    }

    /// How many bytes from source position `a` match those from body
    /// position `b` (`a < b`): eight bytes at a time, then byte by byte.
    fn match_len(&self, a: usize, b: usize) -> usize {
        let (src, n) = (self.src, self.src.len());
        let word = |p: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&src[p..p + 8]);
            u64::from_le_bytes(w)
        };
        let mut k = 0;
        while b + k + 8 <= n {
            let x = word(a + k) ^ word(b + k);
            if x != 0 {
                return k + (x.trailing_zeros() / 8) as usize;
            }
            k += 8;
        }
        while b + k < n && src[a + k] == src[b + k] {
            k += 1;
        }
        k
    }

    /// The copy at position `i` that saves the most bytes once its op is
    /// paid for, of the continuation of the last copy (which ended at
    /// `expected`, `skip` literal bytes ago: an edit that changed a few
    /// bytes) and the positions with the same hash.
    fn best(&self, i: usize, skip: usize, expected: usize) -> Candidate {
        let mut best = Candidate::default();
        let consider = |from: usize, best: &mut Candidate| {
            let k = self.match_len(from, i);
            if k >= MIN_COPY {
                let g = k as i64 - op_bytes(from, k, expected) as i64;
                if g > best.gain {
                    *best = Candidate {
                        from,
                        len: k,
                        gain: g,
                    };
                }
            }
        };
        if skip > 0 {
            // Bytes replaced, or bytes inserted.
            for cont in [expected + skip, expected] {
                if cont < i && best.len < NICE {
                    consider(cont, &mut best);
                }
            }
        }
        if i + WINDOW <= self.src.len() && best.len < NICE {
            let mut c = self.head[hash(&self.src[i..])];
            for _ in 0..CHAIN {
                if c == u32::MAX || best.len >= NICE {
                    break;
                }
                let from = c as usize;
                if from < i {
                    consider(from, &mut best);
                }
                c = self.prev[from];
            }
        }
        best
    }
}

/// The body a residual of `len` bytes encodes against `dict`.
pub fn decode(dict: &[u8], residual: &[u8], len: usize) -> std::result::Result<Vec<u8>, String> {
    match residual.first() {
        Some(&WHOLE) => {
            let body = &residual[1..];
            if body.len() != len {
                return Err(format!("{} bytes kept, {len} expected", body.len()));
            }
            return Ok(body.to_vec());
        }
        Some(&DELTA) => {}
        Some(t) => return Err(format!("unknown residual format {t}")),
        None => return Err("the residual is empty".into()),
    }
    let d = dict.len();
    let mut src = Vec::with_capacity(d + len);
    src.extend_from_slice(dict);
    let mut at = 1;
    let mut expected = 0usize;
    while at < residual.len() {
        let t = residual[at];
        at += 1;
        if t < 0x80 {
            let k = usize::from(t) + 1;
            let lit = residual
                .get(at..at + k)
                .ok_or("the residual ends inside literal bytes")?;
            src.extend_from_slice(lit);
            at += k;
        } else {
            let mut k = usize::from(t & 0x7f) + MIN_COPY;
            if t == 0xff {
                k = usize::try_from(get_varint(residual, &mut at)?)
                    .ok()
                    .and_then(|x| x.checked_add(k))
                    .ok_or("a copy is too long")?;
            }
            let z = get_varint(residual, &mut at)?;
            let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
            let from = i64::try_from(expected)
                .ok()
                .and_then(|e| e.checked_add(delta))
                .and_then(|f| usize::try_from(f).ok())
                .ok_or("a copy starts before the dictionary")?;
            if from >= src.len() || k > len || src.len() - d > len - k {
                return Err("a copy reaches past what is decoded".into());
            }
            // Byte by byte: a copy may overlap what it writes.
            for p in from..from + k {
                let b = src[p];
                src.push(b);
            }
            expected = from + k;
        }
        if src.len() - d > len {
            return Err(format!("the residual decodes to more than {len} bytes"));
        }
    }
    if src.len() - d != len {
        return Err(format!(
            "the residual decodes to {} bytes, {len} expected",
            src.len() - d
        ));
    }
    Ok(src.split_off(d))
}

/// A string JSON-escaped as serde_json writes it (no quotes), or with
/// `\uXXXX` for every non-ASCII character as well.
fn escaped(s: &str, ascii: bool) -> String {
    let q = serde_json::to_string(s).unwrap_or_default();
    let inner = q.get(1..q.len().saturating_sub(1)).unwrap_or("").to_owned();
    if !ascii {
        return inner;
    }
    let mut out = String::with_capacity(inner.len());
    for c in inner.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for u in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// The dictionary for a body: the base body, then each payload in its
/// forms (see the module docs).
pub fn dictionary<'a>(base: &[u8], payloads: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut d = base.to_vec();
    for p in payloads {
        for f in dictionary_forms(p) {
            d.extend_from_slice(&f);
        }
    }
    d
}

/// A payload's forms in the dictionary: itself, then (text only, where
/// they differ) JSON-escaped once and twice, and with `\uXXXX` escapes.
fn dictionary_forms(p: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![p.to_vec()];
    if let Ok(s) = std::str::from_utf8(p) {
        let once = escaped(s, false);
        if once.as_bytes() != p {
            let twice = escaped(&once, false);
            out.push(once.into_bytes());
            out.push(twice.into_bytes());
        }
        if !s.is_ascii() {
            out.push(escaped(s, true).into_bytes());
        }
    }
    out
}

/// Rebuilds `row`'s body inside a transaction, and its bases' (kept in
/// `bodies`, by number).
pub(crate) fn body_in(
    tx: &mut dyn Tx,
    row: &OtlpExportRow,
    bodies: &mut HashMap<u64, Arc<Vec<u8>>>,
) -> Result<Arc<Vec<u8>>> {
    if let Some(b) = bodies.get(&row.seq) {
        return Ok(b.clone());
    }
    // The chain of bases not yet rebuilt, newest first.
    let mut chain = vec![row.clone()];
    while let Some(b) = chain.last().and_then(|r| r.base) {
        if bodies.contains_key(&b) {
            break;
        }
        let last = chain.last().map_or(0, |r| r.seq);
        let base = tx.otlp_export(b)?.ok_or_else(|| {
            StoreError::corrupt(format!(
                "OTLP export {last} is a delta against export {b}, which is missing"
            ))
        })?;
        if base.seq >= last {
            return Err(StoreError::corrupt(format!(
                "OTLP export {last} names a later export as its base"
            )));
        }
        chain.push(base);
    }
    let mut out = None;
    while let Some(r) = chain.pop() {
        let base = match r.base {
            Some(b) => bodies.get(&b).cloned().unwrap_or_default(),
            None => Arc::default(),
        };
        let mut payloads = Vec::new();
        // A body kept whole needs no dictionary.
        if let Some((from, to)) = r.nodes.filter(|_| r.residual.first() != Some(&WHOLE))
            && to >= from
            && from > 0
        {
            let n = usize::try_from(to - from + 1)
                .map_err(|_| StoreError::corrupt("too many nodes"))?;
            for node in tx.nodes_since(from - 1, n)? {
                payloads.push(payload_in(tx, &node.node.payload)?.unwrap_or_default());
            }
        }
        let dict = dictionary(&base, payloads.iter().map(Vec::as_slice));
        let len = usize::try_from(r.body_len).map_err(|_| StoreError::corrupt("too long"))?;
        let body = decode(&dict, &r.residual, len).map_err(|e| {
            StoreError::corrupt(format!("OTLP export {} cannot be rebuilt: {e}", r.seq))
        })?;
        let body = Arc::new(body);
        bodies.insert(r.seq, body.clone());
        out = Some(body);
    }
    out.ok_or_else(|| StoreError::corrupt("nothing to rebuild"))
}

/// One export body the receiver kept, rebuilt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpExport {
    /// Its number, in the order received.
    pub seq: u64,
    /// When it was received.
    pub received_at: convo_core::Millis,
    /// `traces` or `logs`, `/`, `protobuf` or `json`.
    pub media: String,
    /// The sessions its calls belong to.
    pub sessions: Vec<convo_core::SessionId>,
    /// The nodes it wrote (follow numbers, first and last), if any.
    pub nodes: Option<(u64, u64)>,
    /// The body as received (gunzipped).
    pub body: Vec<u8>,
}

impl crate::Store {
    /// The bodies of the OTLP exports with a call in `session` (every
    /// export when `None`), in the order received, each rebuilt from its
    /// residual, its base and the payloads of its nodes, in one read.
    pub fn otlp_exports(
        &mut self,
        session: Option<&convo_core::SessionId>,
    ) -> Result<Vec<OtlpExport>> {
        let mut out = Vec::new();
        self.each_otlp_export(session, &mut |e| {
            out.push(e);
            Ok(())
        })?;
        Ok(out)
    }

    /// [`Store::otlp_exports`], one body at a time: memory holds the
    /// bodies later ones are rebuilt from, not the session's (an agent
    /// resends its history with every export, so those grow with the
    /// square of the conversation).
    pub fn each_otlp_export(
        &mut self,
        session: Option<&convo_core::SessionId>,
        f: &mut dyn FnMut(OtlpExport) -> Result<()>,
    ) -> Result<()> {
        self.read(|tx| {
            let rows = tx.otlp_exports(session)?;
            // How many rows still to come name each export as their base.
            let mut needed: HashMap<u64, usize> = HashMap::new();
            for r in &rows {
                if let Some(b) = r.base {
                    *needed.entry(b).or_default() += 1;
                }
            }
            let mut bodies = HashMap::new();
            for row in rows {
                let body = body_in(tx, &row, &mut bodies)?;
                if let Some(b) = row.base
                    && let Some(n) = needed.get_mut(&b)
                {
                    *n = n.saturating_sub(1);
                }
                bodies.retain(|seq, _| needed.get(seq).is_some_and(|n| *n > 0));
                f(OtlpExport {
                    seq: row.seq,
                    received_at: row.received_at,
                    media: row.media,
                    sessions: row.sessions,
                    nodes: row.nodes,
                    body: Arc::unwrap_or_clone(body),
                })?;
            }
            Ok(())
        })
    }
}

/// Drops the kept bodies that hold `bytes` (the payload `h`) in any of
/// the dictionary's forms or refer to a node carrying it, and those
/// rebuilt from a dropped one (before the payload goes): how many.
pub(crate) fn drop_holding(
    tx: &mut dyn Tx,
    h: &convo_core::ContentHash,
    bytes: &[u8],
) -> Result<usize> {
    let rows = tx.otlp_exports(None)?;
    if rows.is_empty() {
        return Ok(0);
    }
    let forms = dictionary_forms(bytes);
    let mut bodies = HashMap::new();
    let mut gone: std::collections::HashSet<u64> = Default::default();
    for row in &rows {
        let body = body_in(tx, row, &mut bodies)?;
        let mut holds = forms
            .iter()
            .any(|f| !f.is_empty() && body.windows(f.len()).any(|w| w == f.as_slice()));
        if let Some((from, to)) = row.nodes
            && !holds
            && to >= from
            && from > 0
        {
            let n = usize::try_from(to - from + 1).unwrap_or(usize::MAX);
            holds = tx
                .nodes_since(from - 1, n)?
                .iter()
                .any(|x| x.node.payload == *h);
        }
        if holds || row.base.is_some_and(|b| gone.contains(&b)) {
            gone.insert(row.seq);
        }
    }
    for seq in &gone {
        tx.delete_otlp_export(*seq)?;
    }
    Ok(gone.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_decodes_from_its_residual_against_any_dictionary() {
        let cases: [(&[u8], &[u8]); 5] = [
            (b"", b""),
            (b"", b"abcabcabcabcabcabcabcabc hello"),
            (
                b"the quick brown fox jumps",
                b"a quick brown fox jumps over the quick brown fox",
            ),
            (b"0123456789", b"xyz"),
            (&[0u8; 300], &[0u8; 1000]),
        ];
        for (dict, body) in cases {
            let r = encode(dict, body);
            assert_eq!(decode(dict, &r, body.len()).unwrap(), body);
        }
    }

    #[test]
    fn a_body_that_repeats_its_base_costs_what_changed() {
        let base = format!(
            "{{\"span\":\"0001\",\"history\":\"{}\"}}",
            "lorem ipsum ".repeat(200)
        );
        let msg = "a new message that the export wrote as a node";
        let body = format!(
            "{{\"span\":\"0002\",\"history\":\"{}{msg}\"}}",
            "lorem ipsum ".repeat(200)
        );
        let dict = dictionary(base.as_bytes(), [msg.as_bytes()].into_iter());
        let r = encode(&dict, body.as_bytes());
        assert!(r.len() < 24, "{} bytes", r.len());
        assert_eq!(decode(&dict, &r, body.len()).unwrap(), body.as_bytes());
    }

    #[test]
    fn a_copy_is_taken_where_it_copies_most_not_where_its_hash_was_seen_last() {
        // `{"resource` starts the dictionary and again 18 bytes in; only
        // the first goes on as the body does.
        let rest = "[{\"resource\":{\"attributes\":[]},\"spans\":[1,2,3,4,5,6,7,8,9]}]}";
        let dict = format!("{{\"resourceSpans\":{rest}");
        let body = format!("{{\"resourceSpans\":{rest} ");
        let r = encode(dict.as_bytes(), body.as_bytes());
        assert_eq!(
            decode(dict.as_bytes(), &r, body.len()).unwrap(),
            body.as_bytes()
        );
        // The tag, one copy from 0, the space.
        assert!(r.len() <= 6, "{} bytes: {r:?}", r.len());
    }

    #[test]
    fn a_message_escaped_inside_a_json_string_is_found_in_the_dictionary() {
        let msg = "line one\nline \"two\" — é";
        let inner = serde_json::to_string(&serde_json::json!([{ "content": msg }])).unwrap();
        let body = serde_json::to_string(&serde_json::json!({ "stringValue": inner })).unwrap();
        let dict = dictionary(b"", [msg.as_bytes()].into_iter());
        let r = encode(&dict, body.as_bytes());
        assert_eq!(decode(&dict, &r, body.len()).unwrap(), body.as_bytes());
        assert!(r.len() < body.len() - msg.len(), "{} bytes", r.len());
    }

    #[test]
    fn a_damaged_residual_is_an_error_not_a_panic() {
        let dict = b"some dictionary bytes";
        let r = encode(dict, b"some dictionary bytes again and again and again");
        for cut in 0..r.len() {
            let _ = decode(dict, &r[..cut], 47);
        }
        for i in 1..r.len() {
            let mut bad = r.clone();
            bad[i] ^= 0xa5;
            let _ = decode(dict, &bad, 47);
        }
        assert!(decode(dict, &[9], 0).is_err());
        assert!(decode(dict, &[DELTA, 0xff, 0xff, 0xff, 0x7f, 0], 10).is_err());
        let huge = [
            DELTA, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02,
        ];
        assert!(decode(dict, &huge, 10).is_err());
        let far = [
            DELTA, 0x80, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert!(decode(dict, &far, 10).is_err());
    }
}
