//! The compact skeleton an import's first pass keeps of a transcript's
//! messages: per message 56 bytes (its parent, role, time, key and names
//! of strings kept once), where a skeleton [`Message`] costs ~190 bytes
//! and an allocation per string and per extra field.
//!
//! A key that is a UUID in its canonical text (lowercase, hyphenated) is
//! kept as its 128 bits, a decimal number (a Codex line) as a number, any
//! other text once in the skeleton's [`Names`]: [`Id`]. Speakers, tools, models and
//! the few extra fields a skeleton carries (`sidechain`, `linked`,
//! `intermediate`, `holder`, a Codex answer's `usage`) are [`Names`] too,
//! the extra fields as their JSON text. [`Skeleton::message`] gives the
//! skeleton [`Message`] back, exactly as it was pushed.

use crate::model::{Message, Role, Timeline};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Strings kept once, each named by its index.
#[derive(Debug, Default, Clone)]
pub struct Names {
    list: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
}

/// No name.
const NONE: u32 = u32::MAX;

impl Names {
    /// The index of `s`, adding it when new.
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let a: Arc<str> = Arc::from(s);
        let i = self.list.len() as u32;
        self.list.push(a.clone());
        self.index.insert(a, i);
        i
    }

    /// The string at `i`.
    pub fn get(&self, i: u32) -> &str {
        self.list.get(i as usize).map_or("", |s| s)
    }

    /// The text of an [`Id`] of these names (`""` for none).
    pub fn text_of(&self, id: Id) -> Cow<'_, str> {
        id.text(self).unwrap_or_default()
    }

    /// The index of `s`, if it is kept.
    pub fn find(&self, s: &str) -> Option<u32> {
        self.index.get(s).copied()
    }
}

/// A record's or message's id (a `uuid`, a Codex line number, any text),
/// in 24 bytes and at most one shared string.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct Id {
    kind: u8,
    hi: u64,
    lo: u64,
}

const ID_NONE: u8 = 0;
const ID_UUID: u8 = 1;
const ID_NUMBER: u8 = 2;
const ID_NAME: u8 = 3;

impl Id {
    /// No id.
    pub const NONE: Id = Id {
        kind: ID_NONE,
        hi: 0,
        lo: 0,
    };

    /// The id of `s`: its bits when it is a canonical UUID or decimal
    /// number (they give the same text back), else its name in `names`.
    pub fn of(s: &str, names: &mut Names) -> Id {
        Id::parse(s).unwrap_or_else(|| Id {
            kind: ID_NAME,
            hi: 0,
            lo: u64::from(names.intern(s)),
        })
    }

    /// The id of `s` if it is already known: a UUID, a number, or a name
    /// kept in `names` (`None` otherwise: no record has it).
    pub fn find(s: &str, names: &Names) -> Option<Id> {
        Id::parse(s).or_else(|| {
            names.find(s).map(|i| Id {
                kind: ID_NAME,
                hi: 0,
                lo: u64::from(i),
            })
        })
    }

    /// Of an optional text.
    pub fn of_opt(s: Option<&str>, names: &mut Names) -> Id {
        s.map_or(Id::NONE, |s| Id::of(s, names))
    }

    /// A UUID or number in canonical text.
    fn parse(s: &str) -> Option<Id> {
        let b = s.as_bytes();
        if b.len() == 36 {
            let mut v: u128 = 0;
            for (i, &c) in b.iter().enumerate() {
                if matches!(i, 8 | 13 | 18 | 23) {
                    if c != b'-' {
                        return None;
                    }
                    continue;
                }
                let d = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    _ => return None,
                };
                v = (v << 4) | u128::from(d);
            }
            return Some(Id {
                kind: ID_UUID,
                hi: (v >> 64) as u64,
                lo: v as u64,
            });
        }
        let canonical = !b.is_empty()
            && b.len() <= 19
            && b.iter().all(u8::is_ascii_digit)
            && (b[0] != b'0' || b.len() == 1);
        if canonical {
            return s.parse::<u64>().ok().map(|n| Id {
                kind: ID_NUMBER,
                hi: 0,
                lo: n,
            });
        }
        None
    }

    /// Whether it names nothing.
    pub fn is_none(&self) -> bool {
        self.kind == ID_NONE
    }

    /// Its text (`None` for [`Id::NONE`]).
    pub fn text<'a>(&self, names: &'a Names) -> Option<Cow<'a, str>> {
        match self.kind {
            ID_UUID => {
                let v = (u128::from(self.hi) << 64) | u128::from(self.lo);
                Some(Cow::Owned(
                    uuid::Uuid::from_u128(v).hyphenated().to_string(),
                ))
            }
            ID_NUMBER => Some(Cow::Owned(self.lo.to_string())),
            ID_NAME => Some(Cow::Borrowed(names.get(self.lo as u32))),
            _ => None,
        }
    }

    /// Compares two ids as their texts compare, without making them (a
    /// UUID's hex digits compare as its bits; a number's digits as text).
    pub fn cmp_text(&self, other: &Id, names: &Names) -> std::cmp::Ordering {
        if self.kind == other.kind && self.kind == ID_UUID {
            return (self.hi, self.lo).cmp(&(other.hi, other.lo));
        }
        let mut a = [0u8; 20];
        let mut b = [0u8; 20];
        let (x, y) = (self.bytes(names, &mut a), other.bytes(names, &mut b));
        match (x, y) {
            (Some(x), Some(y)) => x.cmp(y),
            _ => self.text(names).cmp(&other.text(names)),
        }
    }

    /// Its text's bytes when that needs no allocation (a number, a name).
    fn bytes<'a>(&self, names: &'a Names, buf: &'a mut [u8; 20]) -> Option<&'a [u8]> {
        match self.kind {
            ID_NUMBER => {
                let mut n = self.lo;
                let mut i = buf.len();
                loop {
                    i -= 1;
                    buf[i] = b'0' + (n % 10) as u8;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                Some(&buf[i..])
            }
            ID_NAME => Some(names.get(self.lo as u32).as_bytes()),
            ID_NONE => Some(&[]),
            _ => None,
        }
    }
}

/// One message of a [`Skeleton`].
#[derive(Clone, Copy, Debug)]
struct Entry {
    parent: u32,
    speaker: u32,
    to: u32,
    extra: u32,
    model: u32,
    time: i64,
    key: Id,
    role: Role,
}

/// The messages of a transcript without their text: what the ledger
/// places before it reads each message again (`convo_llm::ledger::Tree`).
#[derive(Debug, Default, Clone)]
pub struct Skeleton {
    entries: Vec<Entry>,
    /// Speakers, tools, keys that are neither UUIDs nor numbers, extra
    /// fields as JSON.
    pub names: Names,
}

fn opt(i: u32) -> Option<u32> {
    (i != NONE).then_some(i)
}

impl Skeleton {
    /// A skeleton using `names` (a first pass's, whose ids it keeps).
    pub fn with_names(names: Names) -> Self {
        Skeleton {
            entries: Vec::new(),
            names,
        }
    }

    /// Makes room for `n` more messages.
    pub fn reserve_exact(&mut self, n: usize) {
        self.entries.reserve_exact(n);
    }

    /// Adds a skeleton message (its text is not kept); returns its index.
    pub fn push(&mut self, m: &Message) -> usize {
        let key = Id::of_opt(m.key.as_deref(), &mut self.names);
        let e = Entry {
            parent: m.parent.map_or(NONE, |p| p as u32),
            speaker: self.names.intern(&m.speaker),
            to: m.to.as_deref().map_or(NONE, |t| self.names.intern(t)),
            extra: NONE,
            model: m.model.as_deref().map_or(NONE, |t| self.names.intern(t)),
            time: m.time.unwrap_or(i64::MIN),
            key,
            role: m.role,
        };
        self.entries.push(e);
        let i = self.entries.len() - 1;
        self.set_extra(i, &m.extra);
        i
    }

    /// Adds a message from its parts (`key` an [`Id`] of these names).
    #[allow(clippy::too_many_arguments)]
    pub fn push_parts(
        &mut self,
        parent: Option<usize>,
        role: Role,
        speaker: u32,
        to: Option<u32>,
        time: Option<i64>,
        key: Id,
    ) -> usize {
        self.entries.push(Entry {
            parent: parent.map_or(NONE, |p| p as u32),
            speaker,
            to: to.unwrap_or(NONE),
            extra: NONE,
            model: NONE,
            time: time.unwrap_or(i64::MIN),
            key,
            role,
        });
        self.entries.len() - 1
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Message `i`'s parent.
    pub fn parent(&self, i: usize) -> Option<usize> {
        opt(self.entries[i].parent).map(|p| p as usize)
    }

    /// Sets message `i`'s parent.
    pub fn set_parent(&mut self, i: usize, p: Option<usize>) {
        self.entries[i].parent = p.map_or(NONE, |p| p as u32);
    }

    /// Message `i`'s role.
    pub fn role(&self, i: usize) -> Role {
        self.entries[i].role
    }

    /// Makes message `i` a call to `to` of role `role`.
    pub fn set_role(&mut self, i: usize, role: Role, to: Option<&str>) {
        let to = to.map_or(NONE, |t| self.names.intern(t));
        let e = &mut self.entries[i];
        e.role = role;
        e.to = to;
    }

    /// Message `i`'s time.
    pub fn time(&self, i: usize) -> Option<i64> {
        let t = self.entries[i].time;
        (t != i64::MIN).then_some(t)
    }

    /// Message `i`'s key.
    pub fn key(&self, i: usize) -> Option<Cow<'_, str>> {
        self.entries[i].key.text(&self.names)
    }

    /// Message `i`'s key as an [`Id`].
    pub fn id(&self, i: usize) -> Id {
        self.entries[i].key
    }

    /// Message `i`'s extra fields.
    pub fn extra(&self, i: usize) -> Map<String, Value> {
        opt(self.entries[i].extra)
            .and_then(|x| serde_json::from_str(self.names.get(x)).ok())
            .unwrap_or_default()
    }

    /// Whether message `i` has the extra field `k` (without parsing the
    /// others when it has none).
    pub fn has_extra(&self, i: usize, k: &str) -> bool {
        opt(self.entries[i].extra).is_some() && self.extra(i).contains_key(k)
    }

    /// Sets message `i`'s extra fields.
    pub fn set_extra(&mut self, i: usize, extra: &Map<String, Value>) {
        self.entries[i].extra = if extra.is_empty() {
            NONE
        } else {
            let text = serde_json::to_string(extra).unwrap_or_default();
            self.names.intern(&text)
        };
    }

    /// Adds (or replaces) an extra field of message `i`.
    pub fn insert_extra(&mut self, i: usize, k: &str, v: Value) {
        let mut x = self.extra(i);
        x.insert(k.to_owned(), v);
        self.set_extra(i, &x);
    }

    /// The skeleton message `i`: its parent, role, speaker, `to`, time,
    /// key and extra fields; no text.
    pub fn message(&self, i: usize) -> Message {
        let e = &self.entries[i];
        let mut m = Message::new(e.role, self.names.get(e.speaker), String::new());
        m.parent = self.parent(i);
        m.to = opt(e.to).map(|t| self.names.get(t).to_owned());
        m.model = opt(e.model).map(|t| self.names.get(t).to_owned());
        m.time = self.time(i);
        m.key = self.key(i).map(Cow::into_owned);
        m.extra = self.extra(i);
        m
    }

    /// Puts the messages in `order` (old indices, each once), renumbering
    /// parents.
    pub fn reorder(&mut self, order: &[usize]) {
        let mut new_of = vec![NONE; self.entries.len()];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new as u32;
        }
        let entries = order
            .iter()
            .map(|&old| {
                let mut e = self.entries[old];
                if let Some(p) = opt(e.parent) {
                    e.parent = new_of[p as usize];
                }
                e
            })
            .collect();
        self.entries = entries;
    }

    /// Keeps the first `n` messages (a first pass's messages said again:
    /// the last ones replaced).
    pub fn truncate(&mut self, n: usize) {
        self.entries.truncate(n);
    }

    /// Marks an answer that tools or answers (not a human) follow as a
    /// call to `user` in the middle of a turn (`intermediate`): only the
    /// answer that ends a turn is a `complete`.
    pub fn mark_intermediate(&mut self) {
        let mut continued = vec![false; self.len()];
        for i in 0..self.len() {
            if let Some(p) = self.parent(i)
                && self.role(i) != Role::User
            {
                continued[p] = true;
            }
        }
        for (i, &go_on) in continued.iter().enumerate() {
            if go_on && self.role(i) == Role::Assistant {
                self.set_role(i, Role::ToolCall, Some("user"));
                self.insert_extra(i, "intermediate", Value::Bool(true));
            }
        }
    }

    /// Which messages are leaves (no message follows them).
    pub fn leaves(&self) -> Vec<bool> {
        let mut leaf = vec![true; self.len()];
        for i in 0..self.len() {
            if let Some(p) = self.parent(i) {
                leaf[p] = false;
            }
        }
        leaf
    }

    /// The tree's timelines: `main` to `main`, then every other leaf in
    /// order, `agent-N` when `agent(i)` says it is a subagent's, else
    /// `alt-N` (a branch rewound away).
    pub fn timelines(&self, main: Option<usize>, agent: impl Fn(usize) -> bool) -> Vec<Timeline> {
        let mut out = vec![Timeline {
            name: "main".into(),
            leaf: main,
        }];
        let (mut alt, mut agents) = (0, 0);
        for (i, leaf) in self.leaves().into_iter().enumerate() {
            if !leaf || Some(i) == main {
                continue;
            }
            let name = if agent(i) {
                agents += 1;
                format!("agent-{agents}")
            } else {
                alt += 1;
                format!("alt-{alt}")
            };
            out.push(Timeline {
                name,
                leaf: Some(i),
            });
        }
        out
    }

    /// Gives back the room a growing vector left unused.
    pub fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_give_their_text_back_and_compare_as_it_does() {
        let mut names = Names::default();
        let texts = [
            "0e20a6c4-9b1f-4c3e-8a2d-5f6e7d8c9b0a",
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            // Not canonical: kept as names, exactly.
            "0E20A6C4-9B1F-4C3E-8A2D-5F6E7D8C9B0A",
            "0e20a6c49b1f4c3e8a2d5f6e7d8c9b0a",
            "0e20a6c4-9b1f-4c3e-8a2d-5f6e7d8c9b0g",
            "records:1",
            "7",
            "0",
            "10",
            "007",
            "18446744073709551615",
            "99999999999999999999",
            "",
            "msg_01",
        ];
        let ids: Vec<Id> = texts.iter().map(|t| Id::of(t, &mut names)).collect();
        for (t, id) in texts.iter().zip(&ids) {
            assert_eq!(id.text(&names).as_deref(), Some(*t), "{t}");
            assert_eq!(Id::find(t, &names), Some(*id), "{t}");
        }
        assert_eq!(ids[0].kind, ID_UUID);
        assert_eq!(ids[7].kind, ID_NUMBER);
        assert_eq!(ids[3].kind, ID_NAME, "uppercase is not canonical");
        assert_eq!(ids[10].kind, ID_NAME, "a leading zero is not canonical");
        assert_eq!(
            Id::of("0e20a6c4-9b1f-4c3e-8a2d-5f6e7d8c9b0a", &mut names),
            ids[0]
        );
        assert_eq!(Id::find("never-seen", &names), None);
        for a in &ids {
            for b in &ids {
                assert_eq!(
                    a.cmp_text(b, &names),
                    a.text(&names).cmp(&b.text(&names)),
                    "{a:?} {b:?}"
                );
            }
        }
        assert_eq!(Id::NONE.text(&names), None);
    }

    #[test]
    fn a_skeleton_gives_its_messages_back() {
        let mut s = Skeleton::default();
        let mut a = Message::new(Role::User, "user", "");
        a.key = Some("0e20a6c4-9b1f-4c3e-8a2d-5f6e7d8c9b0a".into());
        a.time = Some(1_700_000_000_000);
        let mut b = Message::new(Role::ToolCall, "claude-code", "");
        b.parent = Some(0);
        b.to = Some("Bash".into());
        b.key = Some("records:3".into());
        b.extra.insert("sidechain".into(), json!(true));
        b.extra
            .insert("usage".into(), json!({"input_tokens": 3, "x": [1, "y"]}));
        let mut c = Message::new(Role::Assistant, "codex", "");
        c.model = Some("gpt-5".into());
        c.parent = Some(1);
        c.key = Some("12".into());
        for m in [&a, &b, &c] {
            s.push(m);
        }
        assert_eq!(s.message(0), a);
        assert_eq!(s.message(1), b);
        assert_eq!(s.message(2), c);
        s.insert_extra(2, "intermediate", json!(true));
        s.set_role(2, Role::ToolCall, Some("user"));
        let got = s.message(2);
        assert_eq!(got.role, Role::ToolCall);
        assert_eq!(got.to.as_deref(), Some("user"));
        assert!(s.has_extra(2, "intermediate") && !s.has_extra(0, "intermediate"));
        s.reorder(&[0, 2, 1]);
        assert_eq!(s.parent(1), Some(2));
        assert_eq!(s.parent(2), Some(0));
        assert_eq!(s.key(1).as_deref(), Some("12"));
        assert!(std::mem::size_of::<Entry>() <= 56, "compact");
        s.truncate(2);
        assert_eq!(s.len(), 2);
        assert_eq!(s.message(0), a);
    }

    #[test]
    fn an_answer_a_turn_goes_on_after_is_intermediate() {
        let mut s = Skeleton::default();
        let roles = [
            (Role::User, None),
            (Role::Assistant, Some(0)),
            (Role::ToolCall, Some(1)),
            (Role::Assistant, Some(2)),
            (Role::User, Some(3)),
            (Role::Assistant, Some(4)),
        ];
        for (role, parent) in roles {
            let mut m = Message::new(role, "x", "");
            m.parent = parent;
            s.push(&m);
        }
        s.mark_intermediate();
        let got: Vec<(Role, Option<String>, bool)> = (0..s.len())
            .map(|i| {
                let m = s.message(i);
                (m.role, m.to, m.extra.contains_key("intermediate"))
            })
            .collect();
        assert_eq!(
            got,
            [
                (Role::User, None, false),
                (Role::ToolCall, Some("user".into()), true),
                (Role::ToolCall, None, false),
                (Role::Assistant, None, false),
                (Role::User, None, false),
                (Role::Assistant, None, false),
            ],
            "only an answer a tool or answer follows; a prompt ends a turn"
        );
    }
}
