//! Two JSON objects compared part by part: what a reader of two requests
//! wants to see is the message that changed, the parameter that moved and
//! the tool that was added, not a word diff of the whole pretty-printed
//! body.
//!
//! Every top-level field present on both sides with the same value is
//! folded into one [`Part::Same`]. A list on both sides (`messages`,
//! `tools`, `input`, `contents`…) is aligned element by element with the
//! one alignment of this module ([`super::lcs`] over each element's JSON):
//! runs of equal elements fold into a [`Part::Same`] count, and the
//! elements left between two equal runs pair up in order as changed
//! ([`Part::Item`] with a word diff of the two), the rest added or
//! removed. Any other field that differs is a [`Part::Field`]: its two
//! values, or a word diff when both are long strings.

use super::{Change, intern, lcs, word_diff};
use serde_json::{Map, Value};

/// Strings longer than this are word-diffed rather than shown whole.
const LONG: usize = 80;

/// One part of [`parts`], in the order of A's fields (B's new ones last).
#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    /// Parts the same on both sides: top-level fields (`names`, with
    /// `count` 0) or `count` elements of the list `names[0]`.
    Same {
        /// The fields, or the list's name.
        names: Vec<String>,
        /// Elements of the list (0 for fields).
        count: usize,
    },
    /// A field that differs: its compact JSON on each side (`None` where
    /// it is absent), or the word diff of two long strings.
    Field {
        /// The field.
        name: String,
        /// A's value.
        a: Option<String>,
        /// B's value.
        b: Option<String>,
        /// The word diff, when both are long strings.
        words: Vec<(Change, String)>,
    },
    /// An element of a list changed, added (only `b`) or removed (only `a`).
    Item {
        /// The list.
        list: String,
        /// Its position on A (from 0).
        a: Option<usize>,
        /// Its position on B (from 0).
        b: Option<usize>,
        /// What it is: a role or type, and a name (`user`, `tool get_weather`).
        label: String,
        /// A's element against B's as text, word by word (all added or all
        /// removed for an element on one side).
        words: Vec<(Change, String)>,
    },
}

/// The parts of two JSON objects, or `None` when either is not one.
pub fn parts(a: &[u8], b: &[u8]) -> Option<Vec<Part>> {
    let va: Map<String, Value> = serde_json::from_slice(a).ok()?;
    let vb: Map<String, Value> = serde_json::from_slice(b).ok()?;
    let mut out = Vec::new();
    let mut same = Vec::new();
    let names = va.keys().chain(vb.keys().filter(|k| !va.contains_key(*k)));
    for name in names {
        match (va.get(name), vb.get(name)) {
            (Some(x), Some(y)) if x == y => same.push(name.clone()),
            (Some(Value::Array(x)), Some(Value::Array(y))) => list(name, x, y, &mut out),
            (x, y) => out.push(field(name, x, y)),
        }
    }
    if !same.is_empty() {
        out.insert(
            0,
            Part::Same {
                names: same,
                count: 0,
            },
        );
    }
    Some(out)
}

fn field(name: &str, x: Option<&Value>, y: Option<&Value>) -> Part {
    let words = match (x, y) {
        (Some(Value::String(s)), Some(Value::String(t))) if s.len() > LONG || t.len() > LONG => {
            word_diff(s, t)
        }
        _ => Vec::new(),
    };
    let compact = |v: Option<&Value>| v.map(|v| v.to_string());
    Part::Field {
        name: name.to_owned(),
        a: compact(x),
        b: compact(y),
        words,
    }
}

/// A list's elements aligned: equal runs folded, the rest paired in order.
fn list(name: &str, x: &[Value], y: &[Value], out: &mut Vec<Part>) {
    let (ka, kb) = intern(
        x.iter().map(Value::to_string),
        y.iter().map(Value::to_string),
    );
    let anchors = lcs(&ka, &kb);
    let (mut i, mut j) = (0, 0);
    let mut run = 0;
    let fold = |run: &mut usize, out: &mut Vec<Part>| {
        if *run > 0 {
            out.push(Part::Same {
                names: vec![name.to_owned()],
                count: *run,
            });
            *run = 0;
        }
    };
    for (ai, bj) in anchors.into_iter().chain([(x.len(), y.len())]) {
        if ai > i || bj > j {
            fold(&mut run, out);
        }
        let (gx, gy) = (&x[i..ai], &y[j..bj]);
        for k in 0..gx.len().max(gy.len()) {
            let (ex, ey) = (gx.get(k), gy.get(k));
            out.push(Part::Item {
                list: name.to_owned(),
                a: ex.map(|_| i + k),
                b: ey.map(|_| j + k),
                label: label(ey.or(ex).unwrap_or(&Value::Null)),
                words: item_words(ex, ey),
            });
        }
        if ai < x.len() {
            run += 1;
        }
        (i, j) = (ai + 1, bj + 1);
    }
    fold(&mut run, out);
}

fn item_words(x: Option<&Value>, y: Option<&Value>) -> Vec<(Change, String)> {
    match (x, y) {
        (Some(x), Some(y)) => word_diff(&text(x), &text(y)),
        (Some(x), None) => vec![(Change::Removed, text(x))],
        (None, Some(y)) => vec![(Change::Added, text(y))],
        (None, None) => Vec::new(),
    }
}

/// An element as a reader reads it: an object as `key: value` lines,
/// strings as their text (line breaks kept), other values as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}: {s}"),
                other => format!("{k}: {other}"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// `user`, `assistant`, `tool get_weather`, `function_call lookup`: an
/// element's role or type and its name, when it has them.
fn label(v: &Value) -> String {
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let kind = s(v.get("role")).or_else(|| s(v.get("type")));
    let name = s(v.get("name"))
        .or_else(|| s(v.get("function").and_then(|f| f.get("name"))))
        .or_else(|| s(v.get("tool_use_id")));
    match (kind, name) {
        (Some(k), Some(n)) => format!("{k} {n}"),
        (Some(k), None) => k,
        (None, Some(n)) => n,
        (None, None) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changed(words: &[(Change, String)]) -> Vec<(Change, &str)> {
        words
            .iter()
            .filter(|(c, _)| *c != Change::Same)
            .map(|(c, t)| (*c, t.trim()))
            .collect()
    }

    #[test]
    fn one_changed_message_is_one_small_item() {
        let msgs = |third: &str| {
            serde_json::json!({
                "model": "m", "temperature": 0.2,
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"},
                    {"role": "user", "content": third},
                    {"role": "assistant", "content": "Sure"},
                ],
                "tools": [{"type": "function", "function": {"name": "a"}}],
            })
            .to_string()
        };
        let mut b: Value = serde_json::from_str(&msgs("Say it in French")).unwrap();
        b["temperature"] = 0.7.into();
        b["tools"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"type": "function", "function": {"name": "lookup"}}));
        b["seed"] = 7.into();
        let p = parts(
            msgs("Say it in German").as_bytes(),
            b.to_string().as_bytes(),
        )
        .unwrap();
        assert!(p.contains(&Part::Same {
            names: vec!["model".into()],
            count: 0
        }));
        assert!(p.contains(&Part::Same {
            names: vec!["messages".into()],
            count: 3
        }));
        let item = p
            .iter()
            .find_map(|x| match x {
                Part::Item {
                    list,
                    a,
                    b,
                    label,
                    words,
                } if list == "messages" => Some((*a, *b, label.as_str(), changed(words))),
                _ => None,
            })
            .unwrap();
        assert_eq!(
            item,
            (
                Some(3),
                Some(3),
                "user",
                vec![(Change::Removed, "German"), (Change::Added, "French")]
            )
        );
        let tool = p
            .iter()
            .find_map(|x| match x {
                Part::Item {
                    list, a, b, label, ..
                } if list == "tools" => Some((*a, *b, label.as_str())),
                _ => None,
            })
            .unwrap();
        assert_eq!(tool, (None, Some(1), "function lookup"));
        let fields: Vec<(&str, Option<&str>, Option<&str>)> = p
            .iter()
            .filter_map(|x| match x {
                Part::Field { name, a, b, .. } => Some((name.as_str(), a.as_deref(), b.as_deref())),
                _ => None,
            })
            .collect();
        assert!(
            fields.contains(&("temperature", Some("0.2"), Some("0.7"))),
            "{fields:?}"
        );
        assert!(fields.contains(&("seed", None, Some("7"))), "{fields:?}");
        assert!(parts(b"[1]", b"{}").is_none());
        assert!(parts(b"{}", b"not json").is_none());
    }
}
