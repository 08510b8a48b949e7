//! The export bodies as received, kept so nothing the mapping drops is
//! lost: every span and log record (LLM calls or not), every attribute,
//! resource and scope, byte for byte.
//!
//! **What is kept.** Each export request that gave at least one call, its
//! body as received after gunzipping (protobuf or OTLP/JSON, whichever the
//! exporter sent: the exact bytes, so nothing depends on re-encoding),
//! one row of the store's `otlp_exports` ([`convo_store::OtlpExportRow`]),
//! listed under the sessions its calls belong to. The gzip framing is not
//! kept (it says nothing about the telemetry). An export whose body is the
//! one kept last for its session (an exporter's retry) is not kept again.
//!
//! **Why it costs little.** Each call resends its whole history, so the
//! body of a conversation's n-th export repeats the one before it and the
//! new messages, which are already the payloads of the nodes the export
//! wrote. A body is therefore kept as a *residual*: a delta (copies and
//! literal bytes, [`encode`]) against a dictionary made of
//!
//! 1. the body of the last export kept for its session (`base`, when the
//!    receiver still holds it: [`super::ThreadCache`] keeps the newest
//!    body of each session it holds), and
//! 2. the payloads of the nodes the export wrote (`nodes`, follow numbers
//!    `from..=to`), each as it is, JSON-escaped, JSON-escaped twice (a
//!    message in an attribute of an OTLP/JSON body) and JSON-escaped with
//!    `\uXXXX` for every non-ASCII character (Python's `json.dumps`),
//!
//! so what is stored is what neither holds: the ids, times, attributes and
//! the JSON around each message. The receiver decodes the residual again
//! before keeping it ([`keep`]); were it not the body, the body is kept
//! whole. [`exports`] gives the bodies back, byte for byte.
//!
//! **Residual format.** One byte: `0` the body follows as is, `1` a delta
//! follows. A delta is a list of ops over the dictionary followed by the
//! body as decoded so far (so a body repeating itself copies itself, as
//! LZ77 does): a byte `t < 0x80` is `t + 1` literal bytes that follow; a
//! byte `t ≥ 0x80` is a copy of `(t & 0x7f) + MIN_COPY` bytes (`0x7f`: a
//! LEB128 length follows, plus `0x7f + MIN_COPY`), then the copy's start
//! as a zigzag LEB128 difference from where the previous copy ended.

use convo_core::{Millis, SessionId};
use convo_store::{OtlpExportRow, Store, StoreError};
use std::collections::HashMap;
use std::sync::Arc;

/// The shortest copy an op encodes (shorter matches go as literals).
const MIN_COPY: usize = 6;
/// The bytes hashed to find a match.
const WINDOW: usize = 8;
/// The match table: 2^BITS slots.
const BITS: u32 = 16;

/// Residual tag: the body as is.
const WHOLE: u8 = 0;
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

fn get_varint(b: &[u8], at: &mut usize) -> Result<u64, String> {
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
    let mut table = vec![u32::MAX; 1 << BITS];
    let index = |table: &mut Vec<u32>, p: usize| {
        if p + WINDOW <= src.len() {
            table[hash(&src[p..])] = p as u32;
        }
    };
    if src.len() >= u32::MAX as usize {
        let mut out = vec![WHOLE];
        out.extend_from_slice(body);
        return out;
    }
    for p in 0..d {
        index(&mut table, p);
    }
    let mut out = vec![DELTA];
    let mut lit_from = d;
    let mut expected = 0usize;
    let mut i = d;
    let n = src.len();
    let match_len = |a: usize, b: usize| {
        // a < b: a source position before the body position b.
        let mut k = 0;
        while b + k < n && src[a + k] == src[b + k] {
            k += 1;
        }
        k
    };
    while i < n {
        // The continuation of the last copy, skipping what was inserted
        // since (an edit that changed a few bytes), else the table.
        let skip = i - lit_from;
        let mut best = (0usize, 0usize);
        if skip > 0 {
            // Bytes replaced, or bytes inserted.
            for cont in [expected + skip, expected] {
                if cont < i {
                    let k = match_len(cont, i);
                    if k >= MIN_COPY && k > best.1 {
                        best = (cont, k);
                    }
                }
            }
        }
        if best.1 < MIN_COPY && i + WINDOW <= n {
            let c = table[hash(&src[i..])];
            if c != u32::MAX && (c as usize) < i {
                let k = match_len(c as usize, i);
                if k >= MIN_COPY {
                    best = (c as usize, k);
                }
            }
        }
        if best.1 < MIN_COPY {
            index(&mut table, i);
            i += 1;
            continue;
        }
        let (from, len) = best;
        flush_literals(&mut out, &src[lit_from..i]);
        let l = len - MIN_COPY;
        if l < 0x7f {
            out.push(0x80 | l as u8);
        } else {
            out.push(0xff);
            put_varint(&mut out, (l - 0x7f) as u64);
        }
        let delta = from as i64 - expected as i64;
        put_varint(&mut out, ((delta << 1) ^ (delta >> 63)) as u64);
        for p in i..(i + len).min(n) {
            // Every position of a long copy would cost; a few suffice.
            if len < 64 || (p - i) % 16 == 0 {
                index(&mut table, p);
            }
        }
        expected = from + len;
        i += len;
        lit_from = i;
    }
    flush_literals(&mut out, &src[lit_from..n]);
    if out.len() > body.len() + 1 {
        let mut whole = vec![WHOLE];
        whole.extend_from_slice(body);
        return whole;
    }
    out
}

/// The body a residual of `len` bytes encodes against `dict`.
pub fn decode(dict: &[u8], residual: &[u8], len: usize) -> Result<Vec<u8>, String> {
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
        d.extend_from_slice(p);
        if let Ok(s) = std::str::from_utf8(p) {
            let once = escaped(s, false);
            if once.as_bytes() != p {
                d.extend_from_slice(once.as_bytes());
                let twice = escaped(&once, false);
                d.extend_from_slice(twice.as_bytes());
            }
            if !s.is_ascii() {
                d.extend_from_slice(escaped(s, true).as_bytes());
            }
        }
    }
    d
}

/// One export body the receiver kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawExport {
    /// Its number, in the order received.
    pub seq: u64,
    /// When it was received.
    pub received_at: Millis,
    /// `traces` or `logs`, `/`, `protobuf` or `json`.
    pub media: String,
    /// The sessions its calls belong to.
    pub sessions: Vec<SessionId>,
    /// The body as received (gunzipped).
    pub body: Vec<u8>,
}

/// The bodies of the exports with a call in `session` (every export when
/// `None`), in the order received, each rebuilt from its residual, its
/// base and the payloads of its nodes. An export that cannot be rebuilt
/// (a payload it refers to was redacted) is an error naming it.
pub fn exports(
    store: &mut Store,
    session: Option<&SessionId>,
) -> Result<Vec<RawExport>, StoreError> {
    let rows = store.read(|tx| tx.otlp_exports(session))?;
    let mut bodies: HashMap<u64, Arc<Vec<u8>>> = HashMap::new();
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let body = body_of(store, &row, &mut bodies)?;
        out.push(RawExport {
            seq: row.seq,
            received_at: row.received_at,
            media: row.media,
            sessions: row.sessions,
            body: body.to_vec(),
        });
    }
    Ok(out)
}

/// Rebuilds `row`'s body, and its bases' (kept in `bodies`).
fn body_of(
    store: &mut Store,
    row: &OtlpExportRow,
    bodies: &mut HashMap<u64, Arc<Vec<u8>>>,
) -> Result<Arc<Vec<u8>>, StoreError> {
    // The chain of bases not yet rebuilt, newest first.
    let mut chain = vec![row.clone()];
    while let Some(b) = chain.last().and_then(|r| r.base) {
        if bodies.contains_key(&b) {
            break;
        }
        let base = store.read(|tx| tx.otlp_export(b))?.ok_or_else(|| {
            StoreError::corrupt(format!(
                "OTLP export {} is a delta against export {b}, which is missing",
                chain.last().map_or(0, |r| r.seq)
            ))
        })?;
        if base.seq >= chain.last().map_or(0, |r| r.seq) {
            return Err(StoreError::corrupt(format!(
                "OTLP export {} names a later export as its base",
                base.seq
            )));
        }
        chain.push(base);
    }
    let mut last = None;
    while let Some(r) = chain.pop() {
        let base = match r.base {
            Some(b) => bodies.get(&b).cloned().unwrap_or_default(),
            None => Arc::default(),
        };
        let payloads = match r.nodes {
            Some((from, to)) if to >= from => {
                let n = usize::try_from(to - from + 1)
                    .map_err(|_| StoreError::corrupt("too many nodes"))?;
                store.follow_with_payloads(from - 1, n)?
            }
            _ => Vec::new(),
        };
        let dict = dictionary(&base, payloads.iter().map(|n| n.payload.as_slice()));
        let len = usize::try_from(r.body_len).map_err(|_| StoreError::corrupt("too long"))?;
        let body = decode(&dict, &r.residual, len).map_err(|e| {
            StoreError::corrupt(format!(
                "OTLP export {} cannot be rebuilt ({e}): a payload it refers to may have been redacted",
                r.seq
            ))
        })?;
        let body = Arc::new(body);
        bodies.insert(r.seq, body.clone());
        last = Some(body);
    }
    last.ok_or_else(|| StoreError::corrupt("nothing to rebuild"))
}

/// What the receiver needs to keep one export body.
#[derive(Clone, Debug)]
pub struct Body {
    /// `traces` or `logs`, `/`, `protobuf` or `json`.
    pub media: &'static str,
    /// The body as received, gunzipped.
    pub bytes: Arc<Vec<u8>>,
}

/// Keeps `body` inside the export's transaction: a residual against
/// `base` (the number and body of the export kept last for the session,
/// if the receiver holds it and its row is in the store) and the payloads
/// of the nodes the export wrote (`nodes`: follow numbers and payloads, in
/// order). Decoded again before it is kept; the body whole when that does
/// not give it back. `None` when the body is `base`'s (a retry).
pub fn keep(
    l: &mut convo_store::Ledger<'_>,
    body: &Body,
    sessions: Vec<SessionId>,
    received_at: Millis,
    base: Option<(u64, Arc<Vec<u8>>)>,
    nodes: &[(u64, Vec<u8>)],
) -> Result<Option<u64>, StoreError> {
    let base = match base {
        Some((seq, b)) => match l.tx().otlp_export(seq)? {
            Some(row) if row.body_len == b.len() as u64 => Some((seq, b)),
            _ => None,
        },
        None => None,
    };
    if let Some((_, b)) = &base
        && b.as_slice() == body.bytes.as_slice()
    {
        return Ok(None);
    }
    let dict = dictionary(
        base.as_ref().map_or(&[][..], |(_, b)| b.as_slice()),
        nodes.iter().map(|(_, p)| p.as_slice()),
    );
    let mut residual = encode(&dict, &body.bytes);
    if decode(&dict, &residual, body.bytes.len()).as_deref() != Ok(body.bytes.as_slice()) {
        residual = Vec::with_capacity(body.bytes.len() + 1);
        residual.push(WHOLE);
        residual.extend_from_slice(&body.bytes);
    }
    let whole = residual.first() == Some(&WHOLE);
    let row = OtlpExportRow {
        seq: 0,
        sessions,
        received_at,
        media: body.media.to_owned(),
        base: if whole {
            None
        } else {
            base.as_ref().map(|(s, _)| *s)
        },
        nodes: match (whole, nodes.first(), nodes.last()) {
            (false, Some(a), Some(b)) => Some((a.0, b.0)),
            _ => None,
        },
        body_len: body.bytes.len() as u64,
        residual,
    };
    Ok(Some(l.tx().insert_otlp_export(&row)?))
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
