//! Strict JSON reading: an object with the same key twice is an error.
//!
//! serde_json keeps the last of two equal keys without a word, so
//! `{"a":1,"a":2}` would be read as `{"a":2}` and the first value lost.
//! RFC 8785 (the canonical form convo hashes diagnostics in) assumes I-JSON
//! (RFC 7493), which forbids duplicate names; every JSON input convo reads
//! (imports, `--diagnostics`, `ingest` lines) is checked with
//! [`check_unique_keys`] first, or read with [`from_str_unique`].

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
}
