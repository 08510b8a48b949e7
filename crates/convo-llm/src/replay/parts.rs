//! A received request read in parts: its conversation's messages apart,
//! each known from the requests before it.
//!
//! A conversation's 200th request repeats the 199 before it, so reading
//! it whole (parse, canonical form, key, shape) costs the whole
//! conversation at every call. Read in parts, the body is only scanned
//! ([`RawValue`]): each message is looked up by the digest of its bytes
//! in a memo of the messages already read, and only a message never seen
//! is parsed and put in canonical form. The key and the shape of the
//! request are then made from the messages' own ([`matching::key`] and
//! [`matching::shape`] count a conversation message by message for
//! this), and [`Index::find_parts`](super::Index::find_parts) compares
//! only the messages that differ.
//!
//! The parts are the canonical form [`super::Matcher::canonical`] gives,
//! cut at the conversation: the same request read whole or in parts has
//! the same key and shape, and matches the same recorded call.

use super::matching::{self, Key};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A received request in parts.
#[derive(Debug)]
pub struct Parted {
    /// The canonical request less its conversation.
    pub head: Value,
    /// The body member holding the conversation ([`matching::CONVERSATION`]).
    pub conv: Option<&'static str>,
    /// Its messages.
    pub messages: Vec<Arc<Message>>,
    /// The request's [`matching::key`].
    pub key: Key,
    /// The request's [`matching::shape`].
    pub shape: Key,
}

/// One message of a conversation, in canonical form.
#[derive(Debug)]
pub struct Message {
    /// Its [`matching::message_key`].
    pub key: Key,
    /// What [`matching::shape`] takes from it.
    pub shape: Key,
    /// The message.
    pub value: Value,
}

/// The messages read so far, by the digest of their bytes (and by their
/// key, so that a message read twice is kept once).
#[derive(Debug, Default)]
pub struct Memo {
    by_bytes: HashMap<Key, Arc<Message>>,
    /// Every message by its [`matching::message_key`].
    pub by_key: HashMap<Key, Arc<Message>>,
}

impl Memo {
    /// `body` (with `method`, `path` and the recorded `headers`) in parts,
    /// under `pointers` (the volatile and ignored ones the canonical form
    /// drops), `fix` done to the request less its conversation last (as
    /// the replay maps `previous_response_id`). `None` when the body is
    /// not a JSON object, or a pointer reaches into the conversation other
    /// than through every message alike: read it whole then.
    pub fn read(
        &mut self,
        (method, path, headers, body): (&str, &str, &Map<String, Value>, &[u8]),
        pointers: &[&str],
        fix: impl FnOnce(&mut Value),
    ) -> Option<Parted> {
        let raw: BTreeMap<String, &RawValue> = serde_json::from_slice(body).ok()?;
        let (conv, items) = matching::CONVERSATION
            .iter()
            .find_map(|c| {
                let items = serde_json::from_str::<Vec<&RawValue>>(raw.get(*c)?.get()).ok()?;
                Some((*c, items))
            })
            .map_or((None, Vec::new()), |(c, items)| (Some(c), items));
        let (whole, each) = split(pointers, conv)?;
        let mut messages = Vec::with_capacity(items.len());
        for item in items {
            messages.push(self.message(item, &each)?);
        }
        let mut b = Map::new();
        for (k, v) in raw.iter().filter(|(k, _)| Some(k.as_str()) != conv) {
            b.insert(k.clone(), serde_json::from_str(v.get()).ok()?);
        }
        let mut b = Value::Object(b);
        crate::api::canonicalize(&mut b);
        let headers: Map<String, Value> = headers
            .iter()
            .filter(|(k, _)| crate::record::BEHAVIOUR_HEADERS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut head = json!({"method": method, "path": path, "headers": headers, "body": b});
        for p in whole {
            super::remove_pointer(&mut head, p);
        }
        fix(&mut head);
        Some(Parted::new(head, conv, messages))
    }

    /// One message: from the memo, or read and put in canonical form.
    fn message(&mut self, item: &RawValue, each: &[Vec<String>]) -> Option<Arc<Message>> {
        let bytes: Key = Sha256::digest(item.get().as_bytes()).into();
        if let Some(m) = self.by_bytes.get(&bytes) {
            return Some(m.clone());
        }
        let mut value: Value = serde_json::from_str(item.get()).ok()?;
        crate::api::canonicalize(&mut value);
        for segments in each {
            super::remove_at(&mut value, segments);
        }
        let m = shared(&mut self.by_key, value);
        self.by_bytes.insert(bytes, m.clone());
        Some(m)
    }
}

/// The message `value` (in canonical form), kept once in `by_key`.
fn shared(by_key: &mut HashMap<Key, Arc<Message>>, value: Value) -> Arc<Message> {
    let key = matching::message_key(&value);
    by_key
        .entry(key)
        .or_insert_with(|| {
            Arc::new(Message {
                key,
                shape: matching::message_shape(&value),
                value,
            })
        })
        .clone()
}

/// `pointers` split into those applying to the request less its
/// conversation and those applying to each message (as segments under
/// it); `None` when one reaches the conversation otherwise.
fn split<'a>(pointers: &[&'a str], conv: Option<&str>) -> Option<(Vec<&'a str>, Vec<Vec<String>>)> {
    let (mut whole, mut each) = (Vec::new(), Vec::new());
    for p in pointers {
        let segments = matching::segments(p);
        let reaches = |n: usize, name: &str| segments.get(n).is_none_or(|s| s == "*" || s == name);
        let Some(conv) = conv.filter(|c| reaches(0, "body") && reaches(1, c)) else {
            whole.push(*p);
            continue;
        };
        match segments.as_slice() {
            [body, c, star, rest @ ..]
                if body == "body" && c == conv && star == "*" && !rest.is_empty() =>
            {
                each.push(rest.to_vec());
            }
            _ => return None,
        }
    }
    Some((whole, each))
}

impl Parted {
    /// A canonical request (read whole) cut at its conversation, its
    /// messages shared through `shared` with every request cut before.
    pub fn split(mut canon: Value, shared: &mut HashMap<Key, Arc<Message>>) -> Parted {
        let conv = matching::conversation(&canon).map(|c| c.0);
        let items = conv
            .and_then(|c| canon.get_mut("body")?.as_object_mut()?.remove(c))
            .and_then(|v| match v {
                Value::Array(a) => Some(a),
                _ => None,
            })
            .unwrap_or_default();
        let messages = items
            .into_iter()
            .map(|value| self::shared(shared, value))
            .collect();
        Parted::new(canon, conv, messages)
    }

    /// The whole canonical request.
    pub fn whole(&self) -> Value {
        let mut v = self.head.clone();
        if let (Some(conv), Some(body)) =
            (self.conv, v.get_mut("body").and_then(Value::as_object_mut))
        {
            let items = self.messages.iter().map(|m| m.value.clone()).collect();
            body.insert(conv.to_owned(), Value::Array(items));
        }
        v
    }

    fn new(head: Value, conv: Option<&'static str>, messages: Vec<Arc<Message>>) -> Parted {
        let mut h = Sha256::new();
        matching::feed(&mut h, &head);
        if let Some(name) = conv {
            let keys: Vec<Key> = messages.iter().map(|m| m.key).collect();
            matching::finish_key(&mut h, name, &keys);
        }
        let key = h.finalize().into();
        let mut h = Sha256::new();
        matching::shape_head(&mut h, &head);
        for m in &messages {
            h.update(m.shape);
        }
        Parted {
            head,
            conv,
            messages,
            key,
            shape: h.finalize().into(),
        }
    }
}
