//! Server-Sent Events, as much as a proxy needs: split a byte stream into
//! events without changing a byte, and drop the usage-only chunk the proxy
//! asked an OpenAI upstream for when the client did not.

use bytes::{Bytes, BytesMut};
mod split;
pub use split::{Event, EventSplitter, events, parse_event};

/// An event longer than this is passed on unfiltered (a usage chunk is a
/// few hundred bytes), so a stream with no blank lines is never held.
pub const MAX_HELD: usize = 1 << 20;

/// Whether an OpenAI chat-completions event is the usage-only chunk that
/// `stream_options.include_usage` adds (`"choices": []` and a `usage`).
pub fn is_usage_only_chunk(raw: &[u8]) -> bool {
    // A usage chunk is small and names `usage`: skip parsing the rest.
    if raw.len() > 16 * 1024 || !raw.windows(7).any(|w| w == b"\"usage\"") {
        return false;
    }
    let ev = parse_event(raw);
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&ev.data) else {
        return false;
    };
    v.get("choices")
        .and_then(|c| c.as_array())
        .is_some_and(|c| c.is_empty())
        && v.get("usage").is_some_and(|u| !u.is_null())
}

/// An event without the `"usage":null` member an OpenAI upstream adds to
/// every chunk once `include_usage` is asked for; `None` when it has none.
/// The member is cut out of the bytes with the comma that joined it and
/// the spacing around that comma (`,"usage":null`, `, "usage": null`,
/// `"usage" : null,` …: however the upstream spaces its JSON), nothing
/// else changes, and only when the result parses to the same JSON minus
/// that member.
pub fn without_null_usage(raw: &[u8]) -> Option<Bytes> {
    const KEY: &[u8] = b"\"usage\"";
    if !raw.windows(KEY.len()).any(|w| w == KEY) {
        return None;
    }
    let data = |b: &[u8]| serde_json::from_str::<serde_json::Value>(&parse_event(b).data).ok();
    let mut before = data(raw)?;
    let obj = before.as_object_mut()?;
    if !obj.get("usage")?.is_null() {
        return None;
    }
    obj.remove("usage");
    let space = |b: u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let mut at = raw.len();
    while let Some(k) = raw[..at].windows(KEY.len()).rposition(|w| w == KEY) {
        at = k;
        // `"usage"`, spacing, `:`, spacing, `null`.
        let mut end = k + KEY.len();
        while end < raw.len() && space(raw[end]) {
            end += 1;
        }
        if raw.get(end) != Some(&b':') {
            continue;
        }
        end += 1;
        while end < raw.len() && space(raw[end]) {
            end += 1;
        }
        if !raw[end..].starts_with(b"null") {
            continue;
        }
        end += 4;
        // The comma before it (a later member) or after it (the first).
        let mut start = k;
        while start > 0 && space(raw[start - 1]) {
            start -= 1;
        }
        if start > 0 && raw[start - 1] == b',' {
            start -= 1;
            while start > 0 && space(raw[start - 1]) {
                start -= 1;
            }
        } else {
            start = k;
            while end < raw.len() && space(raw[end]) {
                end += 1;
            }
            if raw.get(end) != Some(&b',') {
                continue;
            }
            end += 1;
        }
        let mut out = BytesMut::with_capacity(raw.len());
        out.extend_from_slice(&raw[..start]);
        out.extend_from_slice(&raw[end..]);
        if data(&out).as_ref() == Some(&before) {
            return Some(out.freeze());
        }
    }
    None
}

/// What the client gets from an upstream stream: the same bytes, minus
/// what the proxy's `include_usage` made the upstream add when the client
/// did not ask for it (the usage-only chunk, `"usage":null` in every other
/// chunk), so the client's bytes are those of a direct call. Chunks pass
/// through unchanged (and unbuffered) when the proxy asked for nothing.
#[derive(Debug)]
pub struct ClientFilter {
    strip_usage: bool,
    split: EventSplitter,
}

impl ClientFilter {
    /// A filter; `strip_usage` when the proxy added `include_usage`.
    pub fn new(strip_usage: bool) -> Self {
        ClientFilter {
            strip_usage,
            split: EventSplitter::default(),
        }
    }

    /// The bytes to send the client for one upstream chunk (maybe none).
    pub fn push(&mut self, chunk: Bytes) -> Option<Bytes> {
        if !self.strip_usage {
            return Some(chunk);
        }
        let mut out = BytesMut::new();
        for ev in self.split.push(&chunk) {
            if !is_usage_only_chunk(&ev) {
                match without_null_usage(&ev) {
                    Some(trimmed) => out.extend_from_slice(&trimmed),
                    None => out.extend_from_slice(&ev),
                }
            }
        }
        if self.split.pending() > MAX_HELD
            && let Some(long) = self.split.finish()
        {
            out.extend_from_slice(&long);
        }
        (!out.is_empty()).then(|| out.freeze())
    }

    /// The bytes left at the end of the stream.
    pub fn finish(&mut self) -> Option<Bytes> {
        if !self.strip_usage {
            return None;
        }
        self.split
            .finish()
            .filter(|rest| !is_usage_only_chunk(rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_usage_is_cut_out_and_nothing_else() {
        let ev = b"data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\",\\\"usage\\\":null\"}}],\"usage\":null}\n\n";
        let got = without_null_usage(ev).unwrap();
        assert_eq!(
            &got[..],
            &b"data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\",\\\"usage\\\":null\"}}]}\n\n"[..]
        );
        let first = b"data: {\"usage\": null, \"choices\":[]}\n\n";
        assert_eq!(
            &without_null_usage(first).unwrap()[..],
            &b"data: { \"choices\":[]}\n\n"[..]
        );
        // Python's `json.dumps` spacing: `, "usage": null`, all of it.
        let spaced = b"data: {\"id\": \"c\", \"choices\": [], \"usage\": null}\n\n";
        assert_eq!(
            &without_null_usage(spaced).unwrap()[..],
            &b"data: {\"id\": \"c\", \"choices\": []}\n\n"[..]
        );
        let around = b"data: {\"id\": 1 , \"usage\" : null }\n\n";
        assert_eq!(
            &without_null_usage(around).unwrap()[..],
            &b"data: {\"id\": 1 }\n\n"[..]
        );
        assert!(without_null_usage(b"data: {\"usage\":{\"t\":1}}\n\n").is_none());
        assert!(without_null_usage(b"data: [DONE]\n\n").is_none());
    }

    #[test]
    fn the_usage_chunk_is_dropped_only_when_asked() {
        let usage = b"data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\n\n";
        let text = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}],\"usage\":null}\n\n";
        let mut f = ClientFilter::new(true);
        let mut all = text.to_vec();
        all.extend_from_slice(usage);
        all.extend_from_slice(b"data: [DONE]\n\n");
        let mut got = Vec::new();
        for part in all.chunks(7) {
            if let Some(b) = f.push(Bytes::copy_from_slice(part)) {
                got.extend_from_slice(&b);
            }
        }
        let mut want = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n".to_vec();
        want.extend_from_slice(b"data: [DONE]\n\n");
        assert_eq!(got, want);
        let mut keep = ClientFilter::new(false);
        assert_eq!(
            keep.push(Bytes::from_static(usage)).as_deref(),
            Some(&usage[..])
        );
    }
}
