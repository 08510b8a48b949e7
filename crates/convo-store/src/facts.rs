//! The fact journal's writes: each fact chained to the newest one.

use crate::Result;
use crate::backend::Tx;
use convo_core::fact::{Fact, FactRecord};

/// Appends `fact` to the store's fact journal, chained to the newest fact.
pub(crate) fn append_fact(tx: &mut dyn Tx, fact: Fact) -> Result<()> {
    let last = tx.last_fact()?;
    let rec = FactRecord {
        prev: last.map(|(_, h)| h),
        after: tx.last_seq()?,
        fact,
    };
    let body = rec.encode();
    tx.insert_fact(
        last.map_or(1, |(seq, _)| seq + 1),
        &convo_core::sha256(&body),
        &body,
    )
}

/// Journals what a store from before the fact journal already holds: each
/// session's metadata and each branch's working state, as of now. Rows that
/// do not decode are left for verify to report.
pub(crate) fn journal_existing(tx: &mut dyn Tx) -> Result<()> {
    for s in tx.session_rows()?.into_iter().flatten() {
        append_fact(
            tx,
            Fact::Session {
                id: s.id,
                agent: s.agent,
                title: s.title,
                created_at: s.created_at,
            },
        )?;
    }
    for b in tx.branch_rows()?.into_iter().flatten() {
        if b.state.is_some() {
            append_fact(
                tx,
                Fact::State {
                    session: b.session,
                    branch: b.name,
                    root: b.state,
                },
            )?;
        }
    }
    Ok(())
}

/// How a replay of a timeline answered its calls (a replay fact).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReplayNote {
    /// The session replayed.
    #[serde(serialize_with = "as_text")]
    pub session: convo_core::SessionId,
    /// Its timeline.
    #[serde(serialize_with = "as_text")]
    pub branch: convo_core::BranchName,
    /// When the replay ended.
    pub at: convo_core::Millis,
    /// Answered by a byte-exact recorded call.
    pub exact: u64,
    /// Answered by a recorded call differing only in volatile values.
    pub tolerated: u64,
    /// Sent upstream (`--on-miss live`).
    pub live: u64,
    /// Found no recorded call.
    pub missed: u64,
}

fn as_text<T: std::fmt::Display, S: serde::Serializer>(
    v: &T,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_str(v)
}

impl crate::Store {
    /// Journals a replay's counts (the session must exist; nothing
    /// recorded changes).
    pub fn note_replay(&mut self, n: &ReplayNote) -> Result<()> {
        self.write(|tx| {
            tx.session(&n.session)?
                .ok_or_else(|| crate::StoreError::NoSession(n.session.to_string()))?;
            append_fact(
                tx,
                Fact::Replay {
                    session: n.session,
                    branch: n.branch.clone(),
                    at: n.at,
                    exact: n.exact,
                    tolerated: n.tolerated,
                    live: n.live,
                    missed: n.missed,
                },
            )
        })
    }

    /// The replays of `session`, oldest first (read from the fact journal).
    pub fn replays(&mut self, session: &convo_core::SessionId) -> Result<Vec<ReplayNote>> {
        self.read(|tx| {
            let mut out = Vec::new();
            for f in tx.facts()?.into_iter().flatten() {
                let Ok(rec) = FactRecord::decode(&f.body) else {
                    continue;
                };
                if let Fact::Replay {
                    session: s,
                    branch,
                    at,
                    exact,
                    tolerated,
                    live,
                    missed,
                } = rec.fact
                    && s == *session
                {
                    out.push(ReplayNote {
                        session: s,
                        branch,
                        at,
                        exact,
                        tolerated,
                        live,
                        missed,
                    });
                }
            }
            Ok(out)
        })
    }
}
