//! Server-Sent Events: split a byte stream into events without changing
//! a byte, and parse them (the proxy forwards and records streams with
//! these; the web view assembles recorded streams).

use bytes::{Bytes, BytesMut};

/// Splits bytes into whole SSE events (each ending in a blank line),
/// keeping every byte: the concatenation of what [`EventSplitter::push`]
/// and [`EventSplitter::finish`] return is exactly what was pushed.
#[derive(Debug, Default)]
pub struct EventSplitter {
    buf: BytesMut,
    /// How far `buf` is known to hold no event end (no rescans).
    scanned: usize,
}

impl EventSplitter {
    /// Adds bytes; returns the events now complete, each with its
    /// terminating blank line.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Bytes> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            // An end may straddle the previous scan's last two bytes.
            let from = self.scanned.saturating_sub(2);
            match event_end(&self.buf[from..]) {
                Some(end) => {
                    out.push(self.buf.split_to(from + end).freeze());
                    self.scanned = 0;
                }
                None => {
                    self.scanned = self.buf.len();
                    break;
                }
            }
        }
        out
    }

    /// Whatever is left (an event the stream did not finish).
    pub fn finish(&mut self) -> Option<Bytes> {
        self.scanned = 0;
        (!self.buf.is_empty()).then(|| self.buf.split().freeze())
    }

    /// Bytes held back waiting for the end of an event.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// The index just past the first blank line (`\n\n`, `\r\n\r\n` or `\r\r`).
fn event_end(b: &[u8]) -> Option<usize> {
    (0..b.len()).find_map(|i| {
        let next = |k: usize| b.get(i + k).copied();
        match (b[i], next(1), next(2)) {
            (b'\n', Some(b'\n'), _) => Some(i + 2),
            (b'\n', Some(b'\r'), Some(b'\n')) => Some(i + 3),
            (b'\r', Some(b'\r'), _) => Some(i + 2),
            _ => None,
        }
    })
}

/// One parsed event: its `event:` name and its `data:` lines joined.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field, when present.
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Parses one event's text (comments and unknown fields ignored).
pub fn parse_event(raw: &[u8]) -> Event {
    let text = String::from_utf8_lossy(raw);
    let mut ev = Event::default();
    let mut data: Vec<&str> = Vec::new();
    for line in text.split(['\n']) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => ev.event = Some(value.to_owned()),
            "data" => data.push(value),
            _ => {}
        }
    }
    ev.data = data.join("\n");
    ev
}

/// Every event of a whole stream, parsed.
pub fn events(stream: &[u8]) -> Vec<Event> {
    let mut s = EventSplitter::default();
    let mut out: Vec<Event> = s.push(stream).iter().map(|e| parse_event(e)).collect();
    if let Some(rest) = s.finish() {
        out.push(parse_event(&rest));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting_keeps_every_byte_whatever_the_chunking() {
        let stream =
            b": PROCESSING\n\ndata: {\"a\":1}\n\nevent: x\r\ndata: y\r\n\r\ndata: [DONE]\n\ntail";
        for cut in 1..stream.len() {
            let mut s = EventSplitter::default();
            let mut got = Vec::new();
            for part in stream.chunks(cut) {
                for e in s.push(part) {
                    got.extend_from_slice(&e);
                }
            }
            if let Some(r) = s.finish() {
                got.extend_from_slice(&r);
            }
            assert_eq!(got, stream);
        }
        let evs = events(stream);
        assert_eq!(evs[1].data, "{\"a\":1}");
        assert_eq!(evs[2].event.as_deref(), Some("x"));
        assert_eq!(evs[3].data, "[DONE]");
    }
}
