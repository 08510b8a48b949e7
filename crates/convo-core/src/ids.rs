//! Typed identifiers. Every id is a newtype: a [`NodeHash`] can never be
//! passed where a [`StateRoot`] is expected.

use std::fmt;
use std::str::FromStr;

/// Errors raised when text does not parse as an id or name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdError {
    /// Not 64 hexadecimal digits.
    #[error("`{0}` is not a 64-digit hexadecimal hash")]
    BadHash(String),
    /// Not a hexadecimal prefix of 1 to 64 digits.
    #[error("`{0}` is not a hash prefix (1 to 64 hexadecimal digits)")]
    BadPrefix(String),
    /// Not `ses-` followed by a UUID.
    #[error("`{0}` is not a session id (expected ses-{{uuid}})")]
    BadSession(String),
    /// Not a valid git ref component.
    #[error("`{name}` is not a valid branch name: {why}")]
    BadBranch {
        /// The rejected name.
        name: String,
        /// Which rule it broke.
        why: &'static str,
    },
}

/// A `Hasher` for keys that are already SHA-256 digests: it takes 8 bytes
/// of the digest instead of hashing it again (SipHash over 32 bytes costs
/// more than the map operation it serves). Only for digest-keyed maps: any
/// other key type would hash poorly.
#[derive(Default, Clone, Copy, Debug)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        self.0 = self.0.rotate_left(5) ^ u64::from_le_bytes(b);
    }
    // The length prefix of a slice carries no information here.
    fn write_usize(&mut self, _: usize) {}
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` keyed by digests (or typed ids wrapping one).
pub type DigestMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<DigestHasher>>;
/// A `HashSet` of digests (or typed ids wrapping one).
pub type DigestSet<K> = std::collections::HashSet<K, std::hash::BuildHasherDefault<DigestHasher>>;

/// A raw SHA-256 digest. Prefer the typed wrappers below.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest as lowercase hex.
    pub fn to_hex(&self) -> String {
        // Two pushes a byte into a sized string: `hex::encode` collects an
        // iterator of chars, and every node read names three or four
        // digests.
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(64);
        for b in self.0 {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        out
    }

    /// Parses 64 hex digits (either case).
    pub fn from_hex(s: &str) -> Result<Self, IdError> {
        let mut out = [0u8; 32];
        if s.len() != 64 || hex::decode_to_slice(s, &mut out).is_err() {
            return Err(IdError::BadHash(s.to_owned()));
        }
        Ok(Digest(out))
    }

    /// Builds a digest from a 32-byte slice, as read back from a store.
    pub fn from_slice(b: &[u8]) -> Option<Self> {
        Some(Digest(b.try_into().ok()?))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

macro_rules! digest_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub Digest);

        impl $name {
            /// The raw 32 bytes.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0 .0
            }
            /// Lowercase hex, 64 digits.
            pub fn to_hex(&self) -> String {
                self.0.to_hex()
            }
            /// The first 12 hex digits, for display.
            pub fn short(&self) -> String {
                let mut s = self.0.to_hex();
                s.truncate(12);
                s
            }
            /// Parses 64 hex digits.
            pub fn from_hex(s: &str) -> Result<Self, IdError> {
                Digest::from_hex(s).map(Self)
            }
            /// From 32 stored bytes.
            pub fn from_slice(b: &[u8]) -> Option<Self> {
                Digest::from_slice(b).map(Self)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.short())
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0.to_hex())
            }
        }
        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::from_hex(s)
            }
        }
    };
}

digest_id!(
    /// The hash of a [`crate::Node`]: SHA-256 of its v1 encoding (see [`crate::hash`]).
    NodeHash
);
digest_id!(
    /// Identifies a submission: a user input and everything it causes.
    SubmissionId
);
digest_id!(
    /// The root of a version of an agent's state (see [`crate::state`]).
    StateRoot
);
digest_id!(
    /// SHA-256 of a payload or state value: the address it is stored under.
    ContentHash
);

/// A prefix of a hash, as typed by a user (`3fa9`, or all 64 digits).
///
/// Prefix lookups go through this type so that "is this unique?" is asked
/// explicitly rather than by accident.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct HashPrefix {
    hex: String,
}

impl HashPrefix {
    /// Parses 1 to 64 hex digits, lowercasing them.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let t = s.trim();
        if t.is_empty() || t.len() > 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(IdError::BadPrefix(s.to_owned()));
        }
        Ok(HashPrefix {
            hex: t.to_ascii_lowercase(),
        })
    }

    /// The prefix as lowercase hex.
    pub fn as_str(&self) -> &str {
        &self.hex
    }

    /// The full hash, when all 64 digits were given.
    pub fn full(&self) -> Option<NodeHash> {
        NodeHash::from_hex(&self.hex).ok()
    }

    /// The smallest and largest 32-byte values that start with this prefix,
    /// for a range scan over an index of hashes.
    pub fn bounds(&self) -> ([u8; 32], [u8; 32]) {
        let mut lo = [0u8; 32];
        let mut hi = [0xffu8; 32];
        for (i, c) in self.hex.bytes().enumerate() {
            let v = (c as char).to_digit(16).unwrap_or(0) as u8;
            let byte = i / 2;
            if i % 2 == 0 {
                lo[byte] = v << 4;
                hi[byte] = (v << 4) | 0x0f;
            } else {
                lo[byte] |= v;
                hi[byte] = (hi[byte] & 0xf0) | v;
            }
        }
        (lo, hi)
    }

    /// Whether `h` starts with this prefix.
    pub fn matches(&self, h: &NodeHash) -> bool {
        h.to_hex().starts_with(&self.hex)
    }
}

/// A session id, shown as `ses-{uuid}`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub uuid::Uuid);

impl SessionId {
    /// A fresh random (v4) session id.
    pub fn new_random() -> Self {
        SessionId(uuid::Uuid::new_v4())
    }
    /// A session id derived from `seed` (SHA-256, formatted as a v4 UUID), so
    /// importing the same conversation twice names the same session.
    pub fn derived(seed: &[u8]) -> Self {
        let d = crate::sha256(seed);
        let mut b = [0u8; 16];
        b.copy_from_slice(&d.0[..16]);
        SessionId(uuid::Builder::from_random_bytes(b).into_uuid())
    }
    /// The 16 bytes of the UUID, as hashed.
    pub fn as_bytes(&self) -> &[u8; 16] {
        self.0.as_bytes()
    }
    /// Parses `ses-{uuid}`.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        s.strip_prefix("ses-")
            .and_then(|u| uuid::Uuid::try_parse(u).ok())
            .map(SessionId)
            .ok_or_else(|| IdError::BadSession(s.to_owned()))
    }
    /// The first 8 hex digits of the UUID, for display and file names.
    pub fn short(&self) -> String {
        let mut s = self.0.simple().to_string();
        s.truncate(8);
        s
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ses-{}", self.0.hyphenated())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId(ses-{})", self.0.hyphenated())
    }
}

impl FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

/// A timeline's name, valid as a single git ref component.
///
/// Rules (from `git check-ref-format`, applied to one component): not empty,
/// at most 200 bytes, no `/`, no ASCII control character or space, none of
/// `~ ^ : ? * [ \`, no `..`, no `@{`, not `@`, does not start with `-` or
/// `.`, does not end with `.` or `.lock`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct BranchName(String);

impl BranchName {
    /// The name of every session's canonical timeline.
    pub fn main() -> Self {
        BranchName("main".to_owned())
    }

    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self, IdError> {
        let bad = |why| {
            Err(IdError::BadBranch {
                name: name.to_owned(),
                why,
            })
        };
        if name.is_empty() {
            return bad("it is empty");
        }
        if name.len() > 200 {
            return bad("it is longer than 200 bytes");
        }
        if name.contains('/') {
            return bad("it contains `/`");
        }
        if name
            .chars()
            .any(|c| c.is_control() || c == ' ' || c == '\u{7f}')
        {
            return bad("it contains a space or a control character");
        }
        if name.chars().any(|c| "~^:?*[\\".contains(c)) {
            return bad("it contains one of ~ ^ : ? * [ \\");
        }
        if name.contains("..") {
            return bad("it contains `..`");
        }
        if name.contains("@{") || name == "@" {
            return bad("it is `@` or contains `@{`");
        }
        if name.starts_with('-') || name.starts_with('.') {
            return bad("it starts with `-` or `.`");
        }
        if name.ends_with('.') || name.ends_with(".lock") {
            return bad("it ends with `.` or `.lock`");
        }
        Ok(BranchName(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is `main`.
    pub fn is_main(&self) -> bool {
        self.0 == "main"
    }
}

impl fmt::Display for BranchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for BranchName {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_a_byte_and_reads_back() {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(0x0f);
        }
        let d = Digest(bytes);
        let hex = d.to_hex();
        assert_eq!(&hex[..8], "0f34597e");
        assert_eq!(hex.len(), 64);
        assert_eq!(hex, hex.to_lowercase());
        assert_eq!(Digest::from_hex(&hex).unwrap(), d);
        assert_eq!(Digest([0xff; 32]).to_hex(), "f".repeat(64));
    }

    #[test]
    fn prefix_bounds_cover_exactly_the_prefix() {
        let p = HashPrefix::parse("ab3").expect("valid");
        let (lo, hi) = p.bounds();
        assert_eq!(lo[0], 0xab);
        assert_eq!(lo[1], 0x30);
        assert_eq!(hi[1], 0x3f);
        assert_eq!(hi[31], 0xff);
        assert!(HashPrefix::parse("xyz").is_err());
        assert!(HashPrefix::parse("").is_err());
    }

    #[test]
    fn branch_names_follow_git_rules() {
        for ok in [
            "main",
            "fix-2026-02-13",
            "broken-2026-01-01-2",
            "ünïcode",
            "a.b",
        ] {
            assert!(BranchName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "a/b", "a b", "a..b", "-x", ".x", "x.", "x.lock", "@", "a@{b", "a~b", "a\tb",
            "a:b", "a\\b",
        ] {
            assert!(BranchName::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn session_ids_round_trip() {
        let s = SessionId::new_random();
        assert_eq!(SessionId::parse(&s.to_string()), Ok(s));
        assert!(SessionId::parse("ses-nope").is_err());
        assert!(SessionId::parse(&s.0.to_string()).is_err());
        let d = SessionId::derived(b"chatgpt:conv-1");
        assert_eq!(d, SessionId::derived(b"chatgpt:conv-1"));
        assert_ne!(d, SessionId::derived(b"chatgpt:conv-2"));
        assert_eq!(d.0.get_version_num(), 4);
    }
}
