//! Facts: the hashed journal of what a store knows besides its nodes.
//!
//! Node hashes bind every message, and fork and promote nodes bind which
//! timelines exist, which are sealed and under what name. Two facts a
//! reader relies on change without a node: a session's metadata (agent,
//! title, created time) and a branch's working state (`state put` moves it;
//! the next `complete` carries it into history). Each such change is a
//! *fact*, appended to one store-wide hash chain, so verify can replay the
//! journal and the nodes and derive every session row and branch row, and
//! a checkpoint can sign the chain's head.
//!
//! ```text
//! fact_v1 =
//!     "convo.fact.v1"                  13 ASCII bytes, domain tag
//!     opt(h32 previous fact hash)      absent only for the first fact
//!     u64le after                      the follow cursor when it was written:
//!                                      it applies after node `after`, before `after + 1`
//!     u8 type
//!     body
//! body (type 1, session) = 16 bytes session UUID || lp(utf8 agent)
//!                          || opt(lp(utf8 title)) || i64le created_at
//! body (type 2, state)   = 16 bytes session UUID || lp(utf8 branch)
//!                          || opt(h32 working state root)
//! body (type 3, branch)  = 16 bytes session UUID || lp(utf8 branch)   an empty timeline
//! body (type 4, redaction) = h32 payload_sha256 || i64le at || lp(utf8 by)
//!                          || lp(utf8 reason)                 the payload's bytes were erased
//! fact_hash = SHA-256(fact_v1)
//! ```
//!
//! The stored row is the encoding itself, so one decoder ([`FactRecord::decode`])
//! serves every backend and verify hashes exactly the bytes it decodes.

use crate::{BranchName, ContentHash, Digest, Millis, SessionId, StateRoot, sha256};

/// Domain tag that starts every v1 fact encoding.
pub const FACT_TAG_V1: &[u8] = b"convo.fact.v1";

/// One change that no node records.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Fact {
    /// A session was created with this metadata.
    Session {
        /// The session.
        id: SessionId,
        /// Its agent.
        agent: String,
        /// Its title.
        title: Option<String>,
        /// Its creation time.
        created_at: Millis,
    },
    /// A branch's working state root was set (`state put` / `state delete`).
    State {
        /// The session.
        session: SessionId,
        /// The branch, under its name at the time.
        branch: BranchName,
        /// The new working root.
        root: Option<StateRoot>,
    },
    /// An empty timeline was created without a fork node (a replay's).
    Branch {
        /// The session.
        session: SessionId,
        /// Its name.
        branch: BranchName,
    },
    /// The bytes of a payload were erased (`convo redact`). Every node that
    /// carries it still hashes, since a node commits to the payload's
    /// SHA-256; readers show [`tombstone`] instead of the bytes.
    Redaction {
        /// The SHA-256 of the erased bytes.
        payload: ContentHash,
        /// When.
        at: Millis,
        /// Who (as the redacting user gave it).
        by: String,
        /// Why.
        reason: String,
    },
    /// A timeline was replayed (`convo proxy --replay`, `convo test`):
    /// how its calls were answered. It changes nothing recorded.
    Replay {
        /// The session replayed.
        session: SessionId,
        /// Its timeline.
        branch: BranchName,
        /// When the replay ended.
        at: Millis,
        /// Calls answered by a byte-exact recorded call.
        exact: u64,
        /// Calls answered by a recorded call that differs only in volatile values.
        tolerated: u64,
        /// Calls sent upstream (`--on-miss live`).
        live: u64,
        /// Calls that found no recorded call.
        missed: u64,
    },
}

/// What readers show instead of a redacted payload:
/// `[redacted 2026-02-13T14:30:05Z by alice: a leaked API key]`.
pub fn tombstone(at: Millis, by: &str, reason: &str) -> String {
    let when = jiff::Timestamp::from_millisecond(at)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| format!("{at} ms"));
    let by = if by.trim().is_empty() {
        String::new()
    } else {
        format!(" by {by}")
    };
    format!("[redacted {when}{by}: {reason}]")
}

/// A fact with its place in the journal.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct FactRecord {
    /// The hash of the fact before it; `None` for the first.
    pub prev: Option<Digest>,
    /// The follow cursor when it was written.
    pub after: u64,
    /// What changed.
    pub fact: Fact,
}

fn lp(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u64).to_le_bytes());
    out.extend_from_slice(b);
}

impl FactRecord {
    /// The v1 encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(FACT_TAG_V1);
        match &self.prev {
            None => out.push(0),
            Some(p) => {
                out.push(1);
                out.extend_from_slice(&p.0);
            }
        }
        out.extend_from_slice(&self.after.to_le_bytes());
        match &self.fact {
            Fact::Session {
                id,
                agent,
                title,
                created_at,
            } => {
                out.push(1);
                out.extend_from_slice(id.as_bytes());
                lp(&mut out, agent.as_bytes());
                match title {
                    None => out.push(0),
                    Some(t) => {
                        out.push(1);
                        lp(&mut out, t.as_bytes());
                    }
                }
                out.extend_from_slice(&created_at.to_le_bytes());
            }
            Fact::State {
                session,
                branch,
                root,
            } => {
                out.push(2);
                out.extend_from_slice(session.as_bytes());
                lp(&mut out, branch.as_str().as_bytes());
                match root {
                    None => out.push(0),
                    Some(r) => {
                        out.push(1);
                        out.extend_from_slice(r.as_bytes());
                    }
                }
            }
            Fact::Branch { session, branch } => {
                out.push(3);
                out.extend_from_slice(session.as_bytes());
                lp(&mut out, branch.as_str().as_bytes());
            }
            Fact::Redaction {
                payload,
                at,
                by,
                reason,
            } => {
                out.push(4);
                out.extend_from_slice(payload.as_bytes());
                out.extend_from_slice(&at.to_le_bytes());
                lp(&mut out, by.as_bytes());
                lp(&mut out, reason.as_bytes());
            }
            Fact::Replay {
                session,
                branch,
                at,
                exact,
                tolerated,
                live,
                missed,
            } => {
                out.push(5);
                out.extend_from_slice(session.as_bytes());
                lp(&mut out, branch.as_str().as_bytes());
                out.extend_from_slice(&at.to_le_bytes());
                for n in [exact, tolerated, live, missed] {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
        out
    }

    /// SHA-256 of [`FactRecord::encode`].
    pub fn hash(&self) -> Digest {
        sha256(&self.encode())
    }

    /// Parses a v1 encoding back, or says why it is not one.
    pub fn decode(b: &[u8]) -> Result<FactRecord, String> {
        let mut r = Reader { b, at: 0 };
        if r.take(FACT_TAG_V1.len())? != FACT_TAG_V1 {
            return Err("it does not start with the fact tag `convo.fact.v1`".into());
        }
        let prev = r.opt(|r| r.digest())?;
        let after = r.u64()?;
        let fact = match r.u8()? {
            1 => {
                let id = r.session()?;
                let agent = r.text()?;
                let title = r.opt(|r| r.text())?;
                let created_at = r.u64()? as i64;
                Fact::Session {
                    id,
                    agent,
                    title,
                    created_at,
                }
            }
            2 => {
                let session = r.session()?;
                let name = r.text()?;
                let branch = BranchName::new(&name)
                    .map_err(|_| format!("its branch name `{name}` is invalid"))?;
                let root = r.opt(|r| r.digest())?.map(StateRoot);
                Fact::State {
                    session,
                    branch,
                    root,
                }
            }
            3 => {
                let session = r.session()?;
                let name = r.text()?;
                let branch = BranchName::new(&name)
                    .map_err(|_| format!("its branch name `{name}` is invalid"))?;
                Fact::Branch { session, branch }
            }
            4 => Fact::Redaction {
                payload: ContentHash(r.digest()?),
                at: r.u64()? as i64,
                by: r.text()?,
                reason: r.text()?,
            },
            5 => {
                let session = r.session()?;
                let name = r.text()?;
                let branch = BranchName::new(&name)
                    .map_err(|_| format!("its branch name `{name}` is invalid"))?;
                Fact::Replay {
                    session,
                    branch,
                    at: r.u64()? as i64,
                    exact: r.u64()?,
                    tolerated: r.u64()?,
                    live: r.u64()?,
                    missed: r.u64()?,
                }
            }
            t => return Err(format!("its type {t} is unknown")),
        };
        if r.at != b.len() {
            return Err(format!("{} bytes follow its end", b.len() - r.at));
        }
        Ok(FactRecord { prev, after, fact })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let end =
            end.ok_or_else(|| format!("it ends early (byte {} of {})", self.at, self.b.len()))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn digest(&mut self) -> Result<Digest, String> {
        Digest::from_slice(self.take(32)?).ok_or_else(|| "a hash is not 32 bytes".to_owned())
    }
    fn session(&mut self) -> Result<SessionId, String> {
        let b = self.take(16)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(SessionId(uuid::Uuid::from_bytes(a)))
    }
    fn text(&mut self) -> Result<String, String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "a length is too large".to_owned())?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a text is not UTF-8".to_owned())
    }
    fn opt<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        match self.u8()? {
            0 => Ok(None),
            1 => f(self).map(Some),
            t => Err(format!("an option tag is {t}, not 0 or 1")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionId {
        SessionId::parse("ses-00000000-0000-4000-8000-000000000001").unwrap()
    }

    /// The golden vectors of docs/HASHING.md (facts).
    #[test]
    fn golden_vectors() {
        let s = FactRecord {
            prev: None,
            after: 0,
            fact: Fact::Session {
                id: session(),
                agent: "researcher".into(),
                title: Some("Paris".into()),
                created_at: 1_770_993_005_000,
            },
        };
        assert_eq!(
            s.hash().to_hex(),
            "edfa7bc8c75ea92710b63b2a55a0e3049edb0b8bbe612375934cb3c1195c963e"
        );
        let st = FactRecord {
            prev: Some(s.hash()),
            after: 1,
            fact: Fact::State {
                session: session(),
                branch: BranchName::main(),
                root: Some(StateRoot(sha256(b"state"))),
            },
        };
        assert_eq!(
            st.hash().to_hex(),
            "4d6bbf8262b4f59300700f9eb965a8379f5dd1ad4de707bdb44af86a2b207141"
        );
        let rd = FactRecord {
            prev: Some(st.hash()),
            after: 2,
            fact: Fact::Redaction {
                payload: crate::hash::content_hash(b"Tell me about Paris"),
                at: 1_770_993_200_000,
                by: "alice".into(),
                reason: "personal data".into(),
            },
        };
        assert_eq!(
            rd.hash().to_hex(),
            "a74f13eefba2ea2fe54373f71ec32b2c5b8fdc4c7f1d1dfc06bd8506f95b39ec"
        );
        let rp = FactRecord {
            prev: Some(rd.hash()),
            after: 2,
            fact: Fact::Replay {
                session: session(),
                branch: BranchName::main(),
                at: 1_770_993_300_000,
                exact: 9,
                tolerated: 2,
                live: 0,
                missed: 1,
            },
        };
        assert_eq!(
            rp.hash().to_hex(),
            "463f474c288572f4551ae81d4fdb42663cced2f30256d350046ac754e6ebcefa"
        );
        for r in [s, st, rd, rp] {
            assert_eq!(FactRecord::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn a_tombstone_says_when_who_and_why() {
        assert_eq!(
            tombstone(1_770_993_200_000, "alice", "personal data"),
            "[redacted 2026-02-13T14:33:20Z by alice: personal data]"
        );
        assert_eq!(tombstone(0, " ", "x"), "[redacted 1970-01-01T00:00:00Z: x]");
    }

    #[test]
    fn decode_rejects_every_truncation_and_trailing_bytes() {
        let r = FactRecord {
            prev: Some(sha256(b"p")),
            after: 7,
            fact: Fact::Session {
                id: session(),
                agent: "a".into(),
                title: None,
                created_at: -1,
            },
        };
        let e = r.encode();
        for n in 0..e.len() {
            assert!(FactRecord::decode(&e[..n]).is_err(), "{n}");
        }
        let mut longer = e.clone();
        longer.push(0);
        assert!(FactRecord::decode(&longer).is_err());
        assert_eq!(FactRecord::decode(&e).unwrap(), r);
    }
}
