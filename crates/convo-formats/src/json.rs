//! JSON helpers shared by the JSON-based formats: typed parsing that
//! reports the JSON path and the line and column of a problem, and a
//! recursion limit (serde_json's, 128 levels) that turns hostile nesting
//! into an error instead of a stack overflow.

use crate::error::{Error, Result, json_error};
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Walks the document once and refuses an object that repeats a key
/// (`json-duplicate-key`, with the JSON path of the object): serde would
/// keep the last value silently.
fn check_unique_keys(file: &str, text: Option<&str>, bytes: &[u8]) -> Result<()> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    convo_core::json::UniqueKeys::deserialize(serde_path_to_error::Deserializer::new(
        &mut *de, &mut track,
    ))
    .map_err(|e| json_error(file, text, render_path(&track.path()), &e))?;
    de.end()
        .map_err(|e| json_error(file, text, String::new(), &e))
}

/// Parses a whole JSON document into `T`, with trailing garbage and
/// repeated keys refused.
pub fn parse<T: DeserializeOwned>(file: &str, bytes: &[u8]) -> Result<T> {
    let bytes = strip_bom(bytes);
    let text = std::str::from_utf8(bytes).ok();
    check_unique_keys(file, text, bytes)?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let value = T::deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
        .map_err(|e| json_error(file, text, render_path(&track.path()), &e))?;
    de.end()
        .map_err(|e| json_error(file, text, String::new(), &e))?;
    Ok(value)
}

/// Parses one line of a JSONL file (`line` is 1-based) into `T`, with
/// repeated keys refused.
pub fn parse_line<T: DeserializeOwned>(file: &str, line: usize, text: &str) -> Result<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut track = serde_path_to_error::Track::new();
    let fix = |mut e: Error| {
        let col = e.location.map(|l| l.column).unwrap_or(1);
        e.location = Some(crate::Location {
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: col,
        });
        e
    };
    check_unique_keys(file, Some(text), text.as_bytes()).map_err(fix)?;
    let value = T::deserialize(serde_path_to_error::Deserializer::new(&mut de, &mut track))
        .map_err(|e| fix(json_error(file, Some(text), render_path(&track.path()), &e)))?;
    de.end()
        .map_err(|e| fix(json_error(file, Some(text), String::new(), &e)))?;
    Ok(value)
}

fn strip_bom(b: &[u8]) -> &[u8] {
    b.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(b)
}

/// `$`, `$[3]`, `$[3].mapping.abc`, `$.x["odd key"]`.
pub fn render_path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut s = String::from("$");
    for seg in p.iter() {
        match seg {
            Segment::Seq { index } => s.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => push_key(&mut s, key),
            Segment::Unknown => s.push_str(".?"),
        }
    }
    s
}

/// Appends `.key`, or `["key"]` when the key is not a plain identifier.
pub fn push_key(s: &mut String, key: &str) {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
    {
        s.push('.');
        s.push_str(key);
    } else {
        s.push_str(&format!("[{}]", Value::String(key.to_owned())));
    }
}

/// Seconds since the epoch (float, as ChatGPT writes them) to milliseconds.
pub fn secs_to_millis(v: Option<f64>) -> Option<i64> {
    let v = v?;
    if !v.is_finite() || v.abs() > 1e13 {
        return None;
    }
    Some((v * 1000.0).round() as i64)
}

/// An RFC 3339 / ISO 8601 instant (`2026-02-08T14:30:05Z`, with offset, or
/// a bare `2024-01-01 10:00:00` taken as UTC) to milliseconds.
pub fn iso_to_millis(s: &str) -> Option<i64> {
    let t = s.trim();
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Some(ts.as_millisecond());
    }
    if let Ok(z) = t.parse::<jiff::Zoned>() {
        return Some(z.timestamp().as_millisecond());
    }
    let dt = t.replace(' ', "T");
    if let Ok(d) = dt.trim_end_matches('Z').parse::<jiff::civil::DateTime>() {
        return d
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()
            .map(|z| z.timestamp().as_millisecond());
    }
    None
}

/// Milliseconds to RFC 3339 UTC, to the second (`2026-02-08T14:30:05Z`)
/// or, when the time has them, milliseconds.
pub fn millis_to_iso(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) if ms % 1000 == 0 => t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => "1970-01-01T00:00:00Z".to_owned(),
    }
}

/// Removes `key` from `m` and returns it when it is a string.
pub fn take_str(m: &mut Map<String, Value>, key: &str) -> Option<String> {
    match m.remove(key) {
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            m.insert(key.to_owned(), other);
            None
        }
        None => None,
    }
}

/// Compact JSON of a value (never fails for a `Value`).
pub fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Pretty JSON of a value, two-space indented.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A JSON value whose objects keep the key order they were built in
/// (serde_json's `Map` sorts keys), for output meant to be read by people.
#[derive(Clone, Debug)]
pub enum Ordered {
    /// Any value, written as serde_json writes it.
    V(Value),
    /// An object with keys in this order.
    Obj(Vec<(String, Ordered)>),
    /// An array.
    Arr(Vec<Ordered>),
}

impl Ordered {
    /// An ordered object from pairs.
    pub fn obj<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Ordered)>) -> Self {
        Ordered::Obj(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// Pretty JSON, two-space indented.
    pub fn pretty(&self) -> String {
        let mut s = String::new();
        self.write_pretty(&mut s, 0);
        s
    }

    /// Compact JSON, one line.
    pub fn compact(&self) -> String {
        match self {
            Ordered::V(v) => compact(v),
            Ordered::Obj(kv) => {
                let parts: Vec<String> = kv
                    .iter()
                    .map(|(k, v)| format!("{}:{}", compact(&Value::String(k.clone())), v.compact()))
                    .collect();
                format!("{{{}}}", parts.join(","))
            }
            Ordered::Arr(a) => {
                let parts: Vec<String> = a.iter().map(Ordered::compact).collect();
                format!("[{}]", parts.join(","))
            }
        }
    }

    fn write_pretty(&self, s: &mut String, depth: usize) {
        let pad = "  ".repeat(depth + 1);
        let end = "  ".repeat(depth);
        match self {
            Ordered::V(v) => s.push_str(&pretty(v).replace('\n', &format!("\n{end}"))),
            Ordered::Obj(kv) if kv.is_empty() => s.push_str("{}"),
            Ordered::Arr(a) if a.is_empty() => s.push_str("[]"),
            Ordered::Obj(kv) => {
                s.push_str("{\n");
                for (i, (k, v)) in kv.iter().enumerate() {
                    s.push_str(&pad);
                    s.push_str(&compact(&Value::String(k.clone())));
                    s.push_str(": ");
                    v.write_pretty(s, depth + 1);
                    s.push_str(if i + 1 < kv.len() { ",\n" } else { "\n" });
                }
                s.push_str(&end);
                s.push('}');
            }
            Ordered::Arr(a) => {
                s.push_str("[\n");
                for (i, v) in a.iter().enumerate() {
                    s.push_str(&pad);
                    v.write_pretty(s, depth + 1);
                    s.push_str(if i + 1 < a.len() { ",\n" } else { "\n" });
                }
                s.push_str(&end);
                s.push(']');
            }
        }
    }
}
