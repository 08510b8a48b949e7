//! Strict JSON reading: an object with the same key twice is an error.
//!
//! serde_json keeps the last of two equal keys without a word, so
//! `{"a":1,"a":2}` would be read as `{"a":2}` and the first value lost.
//! RFC 8785 (the canonical form convo hashes diagnostics in) assumes I-JSON
//! (RFC 7493), which forbids duplicate names; every JSON input convo reads
//! (imports, `--diagnostics`, `ingest` lines) is checked with
//! [`check_unique_keys`] first, or read with [`from_str_unique`].
//!
//! Canonical writing: [`canonical`] is the one RFC 8785 (JCS) writer
//! every crate uses (node diagnostics, import records, replay keys).

use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A JSON value that is only checked, not kept: deserializing it walks the
/// whole document and fails on the first object with a repeated key
/// (`duplicate key "a"`). Run it through `serde_path_to_error` to learn
/// where.
#[derive(Clone, Copy, Debug)]
pub struct UniqueKeys;

impl<'de> Deserialize<'de> for UniqueKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(AnyVisitor)
    }
}

struct AnyVisitor;

impl<'de> Visitor<'de> for AnyVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i128<E>(self, _: i128) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u128<E>(self, _: u128) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_none<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<UniqueKeys, D::Error> {
        UniqueKeys::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        // Most objects are small: a linear scan beats hashing up to a dozen keys.
        let mut small: Vec<Cow<'de, str>> = Vec::new();
        let mut large: std::collections::HashSet<Cow<'de, str>> = Default::default();
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            let dup = if large.is_empty() && small.len() < 12 {
                let dup = small.contains(&k);
                if !dup {
                    small.push(k.clone());
                }
                dup
            } else {
                large.extend(small.drain(..));
                !large.insert(k.clone())
            };
            if dup {
                return Err(de::Error::custom(format_args!(
                    "duplicate key {} in an object (I-JSON: each key once)",
                    serde_json::Value::String(k.into_owned())
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}

struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Checks that `text` is one JSON document in which no object repeats a
/// key. The error says which key, with serde_json's line and column.
pub fn check_unique_keys(text: &str) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    UniqueKeys::deserialize(&mut de)?;
    de.end()
}

/// `serde_json::from_str`, refusing duplicate keys (see [`check_unique_keys`]).
pub fn from_str_unique<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
    check_unique_keys(text)?;
    serde_json::from_str(text)
}

/// `v` as RFC 8785 canonical JSON text: exactly what `serde_jcs` writes
/// (keys in UTF-16 order, minimal string escapes, numbers as JavaScript
/// prints them). Written in one pass with no buffer per level; a number
/// that is not an integer a double holds exactly (a fraction, beyond
/// 2^53) is the one case left to `serde_jcs`, which then writes the whole
/// value.
pub fn canonical(v: &serde_json::Value) -> Result<String, serde_json::Error> {
    let mut out = String::new();
    if write_canonical(v, &mut out) {
        Ok(out)
    } else {
        serde_jcs::to_string(v)
    }
}

/// The fast path of [`canonical`]; `false` (stopping) at a number whose
/// formatting is left to `serde_jcs`.
fn write_canonical(v: &serde_json::Value, out: &mut String) -> bool {
    use serde_json::Value;
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            // Integers a double holds exactly print the same; the rest
            // (fractions, beyond 2^53) are formatted as JavaScript does.
            const EXACT: u64 = 1 << 53;
            match (n.as_i64(), n.as_u64()) {
                (Some(i), _) if i.unsigned_abs() <= EXACT => out.push_str(&i.to_string()),
                (_, Some(u)) if u <= EXACT => out.push_str(&u.to_string()),
                _ => return false,
            }
        }
        Value::String(s) => canonical_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !write_canonical(x, out) {
                    return false;
                }
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_str(k, out);
                out.push(':');
                if !write_canonical(&o[k], out) {
                    return false;
                }
            }
            out.push('}');
        }
    }
    true
}

fn canonical_str(s: &str, out: &mut String) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match esc {
            Some(e) => out.push_str(e),
            None => out.push_str(&format!("\\u{b:04x}")),
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_errors_at_any_depth() {
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"[{"x":{"b":true,"b":true}}]"#,
            r#"{"\u0061":1,"a":2}"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k5":5}"#,
        ] {
            let e = check_unique_keys(bad).unwrap_err().to_string();
            assert!(e.contains("duplicate key"), "{bad}: {e}");
        }
        for good in [
            r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#,
            "[]",
            "null",
            r#""a""#,
            "1.5e300",
        ] {
            check_unique_keys(good).unwrap();
        }
        assert!(check_unique_keys("{} x").is_err(), "trailing garbage");
        let v: serde_json::Value = from_str_unique(r#"{"a":[1]}"#).unwrap();
        assert_eq!(v["a"][0], 1);
    }

    #[test]
    fn canonical_text_is_serde_jcs_text() {
        use serde_json::json;
        let samples = [
            json!({"b": 1, "a": [true, null, -3, 9007199254740992u64, -9007199254740992i64], "é": "x", "\u{1F600}": "y", "\u{FF21}": 0}),
            json!({"raw": "{\"k\":\"v\\\\n\"}\u{0}\u{1f}\u{7f}\u{8}\u{c}\n\r\t</script>\u{2028}😀", "line": 3}),
            json!({}),
            json!({"nested": {"z": {"y": {"x": []}}}, "Z": "upper first", "aa": "", "a": ""}),
            // Fractions and integers beyond 2^53: serde_jcs's formatting.
            json!({"cost": 0.1, "n": 18446744073709551615u64, "e": 1e300, "m": -9007199254740993i64}),
        ];
        for v in samples {
            assert_eq!(
                canonical(&v).unwrap(),
                serde_jcs::to_string(&v).unwrap(),
                "{v}"
            );
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x1f\"\\\\a-z\\u{80}-\\u{10ffff}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn canonical_is_serde_jcs_for_any_value(v in any_json()) {
            proptest::prop_assert_eq!(canonical(&v).unwrap(), serde_jcs::to_string(&v).unwrap());
        }
    }
}
