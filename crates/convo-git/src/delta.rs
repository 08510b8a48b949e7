//! git's delta encoding (the `OFS_DELTA` payload of a pack entry): a new
//! version of an object as copies from its previous version plus inserted
//! bytes.
//!
//! The projection knows how its objects change from one commit to the
//! next: a tree gains or replaces one entry, a session file changes its
//! `open` field near the top and gains history entries near the end. So
//! [`make`] looks for the common prefix and suffix, and in between for one
//! anchored common stretch, in time linear in the object's size; it is not
//! a general diff and does not need to be.

/// Largest copy one instruction can express (24-bit size).
const MAX_COPY: usize = 0xff_ffff;

fn varint(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn insert(out: &mut Vec<u8>, mut data: &[u8]) {
    while !data.is_empty() {
        let n = data.len().min(127);
        out.push(n as u8);
        out.extend_from_slice(&data[..n]);
        data = &data[n..];
    }
}

fn copy(out: &mut Vec<u8>, mut offset: usize, mut len: usize) {
    while len > 0 {
        let n = len.min(MAX_COPY);
        let at = out.len();
        out.push(0x80);
        let mut op = 0x80u8;
        for i in 0..4 {
            let b = ((offset >> (8 * i)) & 0xff) as u8;
            if b != 0 {
                op |= 1 << i;
                out.push(b);
            }
        }
        for i in 0..3 {
            let b = ((n >> (8 * i)) & 0xff) as u8;
            if b != 0 {
                op |= 0x10 << i;
                out.push(b);
            }
        }
        out[at] = op;
        offset += n;
        len -= n;
    }
}

/// Bytes compared at a time (slice equality is a vectorized `memcmp`; a
/// byte loop made this a sixth of a long session's sync).
const BLOCK: usize = 256;

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + BLOCK <= n && a[n - i - BLOCK..n - i] == b[n - i - BLOCK..n - i] {
        i += BLOCK;
    }
    i + a[..n - i]
        .iter()
        .rev()
        .zip(b[..n - i].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// How far into the new middle an anchor is searched for.
const WINDOW: usize = 64 * 1024;
const PROBE: usize = 32;

/// Instructions that turn `base` into `new`, or `None` when they would not
/// be much smaller than `new` itself (or offsets exceed 32 bits).
pub fn make(base: &[u8], new: &[u8]) -> Option<Vec<u8>> {
    if base.len() > u32::MAX as usize || new.len() < 64 {
        return None;
    }
    let mut out = Vec::with_capacity(64);
    varint(&mut out, base.len());
    varint(&mut out, new.len());
    let pre = common_prefix(base, new);
    let suf = common_suffix(&base[pre..], &new[pre..]);
    copy(&mut out, 0, pre);
    let (bm, nm) = (&base[pre..base.len() - suf], &new[pre..new.len() - suf]);
    // One anchored stretch in the middle: a probe taken a little way into
    // the base's middle, searched near the start of the new middle.
    let mut done = false;
    for k in [0usize, 16, 64, 256, 1024, 4096] {
        if k + PROBE > bm.len() {
            break;
        }
        let probe = &bm[k..k + PROBE];
        let window = &nm[..nm.len().min(k + PROBE + WINDOW)];
        let Some(j) = window.windows(PROBE).position(|w| w == probe) else {
            continue;
        };
        // Extend backwards and forwards.
        let back = common_suffix(&bm[..k], &nm[..j]);
        let (bs, ns) = (k - back, j - back);
        let len = common_prefix(&bm[bs..], &nm[ns..]);
        if len < 2 * PROBE {
            continue;
        }
        insert(&mut out, &nm[..ns]);
        copy(&mut out, pre + bs, len);
        insert(&mut out, &nm[ns + len..]);
        done = true;
        break;
    }
    if !done {
        insert(&mut out, nm);
    }
    copy(&mut out, base.len() - suf, suf);
    (out.len() < new.len() / 2).then_some(out)
}

fn read_varint(d: &[u8], i: &mut usize) -> Option<usize> {
    let mut n = 0usize;
    let mut shift = 0;
    loop {
        let b = *d.get(*i)?;
        *i += 1;
        n |= usize::from(b & 0x7f).checked_shl(shift)?;
        shift += 7;
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
}

/// Applies `delta` to `base`; `None` when the delta is malformed.
pub fn apply(base: &[u8], delta: &[u8]) -> Option<Vec<u8>> {
    let mut i = 0;
    if read_varint(delta, &mut i)? != base.len() {
        return None;
    }
    let size = read_varint(delta, &mut i)?;
    let mut out = Vec::with_capacity(size);
    while i < delta.len() {
        let op = delta[i];
        i += 1;
        if op & 0x80 != 0 {
            let mut offset = 0usize;
            let mut len = 0usize;
            for k in 0..4 {
                if op & (1 << k) != 0 {
                    offset |= usize::from(*delta.get(i)?) << (8 * k);
                    i += 1;
                }
            }
            for k in 0..3 {
                if op & (0x10 << k) != 0 {
                    len |= usize::from(*delta.get(i)?) << (8 * k);
                    i += 1;
                }
            }
            if len == 0 {
                len = 0x10000;
            }
            out.extend_from_slice(base.get(offset..offset.checked_add(len)?)?);
        } else if op != 0 {
            let n = usize::from(op);
            out.extend_from_slice(delta.get(i..i + n)?);
            i += n;
        } else {
            return None;
        }
    }
    (out.len() == size).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(a: &[u8], b: &[u8]) {
        if let Some(d) = make(a, b) {
            assert_eq!(apply(a, &d).as_deref(), Some(b));
            assert!(d.len() < b.len() / 2);
        }
    }

    #[test]
    fn block_compares_agree_with_byte_loops() {
        let naive_pre = |a: &[u8], b: &[u8]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let naive_suf = |a: &[u8], b: &[u8]| {
            a.iter()
                .rev()
                .zip(b.iter().rev())
                .take_while(|(x, y)| x == y)
                .count()
        };
        let base: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        for len in [0, 1, 255, 256, 257, 511, 512, 1000, 3000] {
            for at in [0, 1, 255, 256, 257, 700, 2999] {
                let a = &base[..len];
                let mut b = a.to_vec();
                if at < b.len() {
                    b[at] ^= 0xff;
                }
                for (x, y) in [(a, &b[..]), (a, &b[..b.len().saturating_sub(3)])] {
                    assert_eq!(common_prefix(x, y), naive_pre(x, y), "len {len} at {at}");
                    assert_eq!(common_suffix(x, y), naive_suf(x, y), "len {len} at {at}");
                    assert_eq!(common_suffix(y, x), naive_suf(y, x), "len {len} at {at}");
                }
            }
        }
    }

    #[test]
    fn deltas_reproduce_the_new_version() {
        let base: Vec<u8> = (0..5000u32).flat_map(|i| i.to_le_bytes()).collect();
        let mut appended = base.clone();
        appended.extend_from_slice(b"one more entry, at the end of it all");
        let mut middle = base.clone();
        middle.splice(100..108, b"replaced by something longer".iter().copied());
        let mut both = b"{\"open\": null,".to_vec();
        both.extend_from_slice(&base);
        both.extend_from_slice(b"new history entry");
        let mut was = b"{\"open\": \"a question that was open\",".to_vec();
        was.extend_from_slice(&base);
        for new in [&appended, &middle, &base] {
            roundtrip(&base, new);
            assert!(make(&base, new).is_some());
        }
        roundtrip(&was, &both);
        assert!(make(&was, &both).is_some_and(|d| d.len() < 100));
        // Unrelated data makes no delta; nothing panics on short inputs.
        assert!(make(&base, &vec![7u8; 20_000]).is_none());
        roundtrip(b"", b"");
        roundtrip(b"abc", &[0u8; 300]);
        // Long copies are split at the 24-bit limit.
        let big = vec![1u8; MAX_COPY + 1000];
        let mut big2 = big.clone();
        big2.push(2);
        roundtrip(&big, &big2);
        assert_eq!(apply(b"xy", &[2, 1, 0]), None);
    }
}
