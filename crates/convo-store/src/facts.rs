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
