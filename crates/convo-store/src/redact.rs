//! Redaction: erase a payload's bytes, keep the chain.
//!
//! A node hashes its payload's SHA-256 and length, never the stored bytes
//! (docs/HASHING.md), so the bytes can leave the store while every node
//! hash still verifies. [`Store::redact`] journals a redaction fact (type 4:
//! the digest, when, by whom, why), indexes it in `redactions` and deletes
//! the `blobs` row in one transaction, then has the backend rewrite its
//! files so the bytes are gone from disk too ([`crate::Backend::erase_freed`]).
//! Every read of a payload or state value goes through [`payload_in`],
//! which gives the tombstone ([`convo_core::fact::tombstone`]) in place of
//! redacted bytes; verify accepts a missing blob only when the journal
//! redacted it. The OTLP export bodies kept beside the nodes
//! ([`crate::otlp`]) that hold the bytes are deleted in the same
//! transaction.

use crate::backend::Tx;
use crate::facts::append_fact;
use crate::{Result, Store, StoreError};
use convo_core::fact::{Fact, FactRecord, tombstone};
use convo_core::hash::content_hash;
use convo_core::{ContentHash, Millis, NodeHash, SessionId};

/// One redaction, as its fact records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redaction {
    /// The SHA-256 of the erased bytes.
    pub payload: ContentHash,
    /// When.
    pub at: Millis,
    /// Who.
    pub by: String,
    /// Why.
    pub reason: String,
    /// Its number in the fact journal.
    pub fact: u64,
}

impl Redaction {
    /// What readers show instead of the bytes.
    pub fn tombstone(&self) -> String {
        tombstone(self.at, &self.by, &self.reason)
    }

    fn from_fact(seq: u64, body: &[u8]) -> Option<Redaction> {
        match FactRecord::decode(body).ok()?.fact {
            Fact::Redaction {
                payload,
                at,
                by,
                reason,
            } => Some(Redaction {
                payload,
                at,
                by,
                reason,
                fact: seq,
            }),
            _ => None,
        }
    }
}

/// What one [`Store::redact`] did.
#[derive(Clone, Debug)]
pub struct Redacted {
    /// The redaction recorded.
    pub redaction: Redaction,
    /// How many bytes were erased.
    pub bytes: u64,
    /// Whether the database files were rewritten afterwards.
    pub erased: bool,
    /// What the rewrite could not do, if anything.
    pub warning: Option<String>,
}

/// What a redacted title reads.
pub const REDACTED_TITLE: &str = "[redacted]";

/// Journals the erasure of what stands under `digest` (a node's
/// diagnostics, a fact's title: the node's or fact's hash) and indexes it.
fn journal_erasure(
    tx: &mut dyn Tx,
    digest: &ContentHash,
    by: &str,
    reason: &str,
    now: Millis,
) -> Result<()> {
    if tx.redaction(digest)?.is_some() {
        return Ok(());
    }
    journal(tx, digest, by, reason, now).map(|_| ())
}

/// Journals a redaction of `digest` (a fact) and indexes it: the fact's
/// number.
fn journal(
    tx: &mut dyn Tx,
    digest: &ContentHash,
    by: &str,
    reason: &str,
    now: Millis,
) -> Result<u64> {
    append_fact(
        tx,
        Fact::Redaction {
            payload: *digest,
            at: now,
            by: by.to_owned(),
            reason: reason.to_owned(),
        },
    )?;
    let (seq, _) = tx
        .last_fact()?
        .ok_or_else(|| StoreError::backend("the redaction fact was not written"))?;
    tx.insert_redaction(digest, seq)?;
    Ok(seq)
}

/// The bytes stored under `h`, or the tombstone of their redaction; `None`
/// when neither exists.
pub(crate) fn payload_in(tx: &mut dyn Tx, h: &ContentHash) -> Result<Option<Vec<u8>>> {
    if let Some(b) = tx.blob(h)? {
        return Ok(Some(b));
    }
    Ok(tx.redaction(h)?.map(|(_, body)| {
        match FactRecord::decode(&body).ok().map(|r| r.fact) {
            Some(Fact::Redaction { at, by, reason, .. }) => tombstone(at, &by, &reason),
            _ => "[redacted]".to_owned(),
        }
        .into_bytes()
    }))
}

/// Erases the bytes stored under `payload` and journals why (refusing a
/// digest with nothing stored, or one already redacted): the blob, the
/// chunks only it names, its words in the search index and the OTLP
/// bodies that hold it go.
fn erase_payload(
    tx: &mut dyn Tx,
    payload: &ContentHash,
    by: &str,
    reason: &str,
    now: Millis,
) -> Result<(Redaction, u64)> {
    let Some(data) = tx.blob(payload)? else {
        return Err(match tx.redaction(payload)? {
            Some((seq, body)) => StoreError::Invalid(
                format!(
                    "payload {payload} is already redacted: {}",
                    Redaction::from_fact(seq, &body)
                        .map(|r| r.tombstone())
                        .unwrap_or_else(|| format!("fact {seq}"))
                )
                .into(),
            ),
            None => StoreError::NoNode(format!("a stored payload with SHA-256 {payload}")),
        });
    };
    let seq = journal(tx, payload, by, reason, now)?;
    // The OTLP bodies that hold the bytes go too (rebuilt while the
    // payload is still there).
    crate::otlp::drop_holding(tx, payload, &data)?;
    tx.delete_blob(payload)?;
    tx.search_forget(payload)?;
    Ok((
        Redaction {
            payload: *payload,
            at: now,
            by: by.to_owned(),
            reason: reason.to_owned(),
            fact: seq,
        },
        data.len() as u64,
    ))
}

/// Erases what node `node`'s diagnostics hold besides `keep` (see
/// [`Store::redact_diagnostics`]); `false` when nothing else was there.
fn erase_diagnostics(
    tx: &mut dyn Tx,
    node: &NodeHash,
    keep: &dyn Fn(&str) -> bool,
    by: &str,
    reason: &str,
    now: Millis,
) -> Result<bool> {
    let stored = tx
        .node(node)?
        .ok_or_else(|| StoreError::NoNode(node.to_string()))?;
    let serde_json::Value::Object(all) = stored.node.diagnostics.to_value() else {
        return Ok(false);
    };
    let mut left: serde_json::Map<String, serde_json::Value> = all
        .iter()
        .filter(|(k, _)| keep(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if left.len() == all.len() {
        return Ok(false);
    }
    left.insert(
        "redacted".into(),
        serde_json::Value::String(tombstone(now, by, reason)),
    );
    let diag = convo_core::Diagnostics::from_value(&serde_json::Value::Object(left))
        .map_err(StoreError::invalid)?;
    journal_erasure(tx, &ContentHash(node.0), by, reason, now)?;
    tx.set_node_diagnostics(node, diag.as_str())?;
    Ok(true)
}

/// Erases session `session`'s title `title` (see [`Store::redact_title`]);
/// returns how many facts were rewritten.
fn erase_title(
    tx: &mut dyn Tx,
    session: &SessionId,
    title: &str,
    by: &str,
    reason: &str,
    now: Millis,
) -> Result<usize> {
    let mut rewritten = 0;
    for row in tx.facts()?.into_iter().flatten() {
        let Ok(mut rec) = FactRecord::decode(&row.body) else {
            continue;
        };
        let Fact::Session {
            id, title: Some(t), ..
        } = &mut rec.fact
        else {
            continue;
        };
        if id != session || t != title {
            continue;
        }
        *t = REDACTED_TITLE.to_owned();
        let Some(hash) = ContentHash::from_slice(&row.hash) else {
            continue;
        };
        journal_erasure(tx, &hash, by, reason, now)?;
        tx.set_fact_body(row.seq, &rec.encode())?;
        rewritten += 1;
    }
    if tx
        .session(session)?
        .is_some_and(|s| s.title.as_deref() == Some(title))
    {
        tx.set_session_title(session, Some(REDACTED_TITLE))?;
    }
    Ok(rewritten)
}

/// What one [`Store::redact_session`] erased.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionRedacted {
    /// Payloads erased.
    pub payloads: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Payloads left because a node of another session has them too.
    pub shared: usize,
    /// Nodes whose diagnostics were erased.
    pub diagnostics: usize,
    /// Facts rewritten to erase the title.
    pub title_facts: usize,
}

impl Store {
    /// Erases the bytes stored under `payload` (a node's payload or a state
    /// value) and journals why; then, unless `keep_files`, rewrites the
    /// database's files so no copy of the bytes is left in them. Refuses the
    /// empty payload, a digest with nothing stored and one already redacted.
    pub fn redact(
        &mut self,
        payload: &ContentHash,
        by: &str,
        reason: &str,
        now: Millis,
        keep_files: bool,
    ) -> Result<Redacted> {
        if reason.trim().is_empty() {
            return Err(StoreError::Invalid(
                "a redaction needs a reason (it is recorded with it)".into(),
            ));
        }
        if *payload == content_hash(b"") {
            return Err(StoreError::Invalid(
                "that is the empty payload's digest: there are no bytes to erase".into(),
            ));
        }
        let (redaction, bytes) = self.write(|tx| erase_payload(tx, payload, by, reason, now))?;
        let warning = if keep_files {
            None
        } else {
            self.backend_mut().erase_freed()?
        };
        Ok(Redacted {
            redaction,
            bytes,
            erased: !keep_files,
            warning,
        })
    }

    /// Erases what node `node`'s diagnostics hold besides `keep` (their
    /// fields that copy no content: model, usage, timings, status…),
    /// journaling a redaction fact that names the node's hash: the node
    /// keeps its hash (its parent link, its children and every checkpoint
    /// commit to it), and verify accepts it unrecomputed because the
    /// journal says why. The diagnostics left read `{..kept, "redacted":
    /// TOMBSTONE}`. Returns `false` (nothing written) when nothing but
    /// `keep` was there.
    pub fn redact_diagnostics(
        &mut self,
        node: &NodeHash,
        keep: &dyn Fn(&str) -> bool,
        by: &str,
        reason: &str,
        now: Millis,
    ) -> Result<bool> {
        self.write(|tx| erase_diagnostics(tx, node, keep, by, reason, now))
    }

    /// Erases session `session`'s title when it is `title` (a title made
    /// from a message being redacted): the session reads `[redacted]`, and
    /// every fact of the journal that carries the title is rewritten with
    /// `[redacted]` in its place, each keeping its hash (the next fact
    /// commits to it) under a redaction fact that names that hash. Returns
    /// how many facts were rewritten.
    pub fn redact_title(
        &mut self,
        session: &SessionId,
        title: &str,
        by: &str,
        reason: &str,
        now: Millis,
    ) -> Result<usize> {
        self.write(|tx| erase_title(tx, session, title, by, reason, now))
    }

    /// Erases a whole session's content in one transaction: every payload
    /// of its nodes that no node of another session shares (a copy keeps
    /// its bytes; a node erased itself, its diagnostics redacted, does
    /// not), what its nodes' diagnostics hold besides `keep`, and
    /// its title; the nodes, their hashes and links stay, so the store
    /// still verifies. The database's files are rewritten afterwards
    /// (like [`Store::redact`]); returns what was erased and the rewrite's
    /// warning, if any.
    pub fn redact_session(
        &mut self,
        session: &SessionId,
        keep: &dyn Fn(&str) -> bool,
        by: &str,
        reason: &str,
        now: Millis,
    ) -> Result<(SessionRedacted, Option<String>)> {
        if reason.trim().is_empty() {
            return Err(StoreError::Invalid(
                "a redaction needs a reason (it is recorded with it)".into(),
            ));
        }
        let done = self.write(|tx| {
            let row = tx
                .session(session)?
                .ok_or_else(|| StoreError::NoNode(format!("session {session}")))?;
            let nodes = tx.session_nodes(session, false)?;
            let mut mine: std::collections::BTreeSet<ContentHash> =
                nodes.iter().map(|(n, _)| n.node.payload).collect();
            mine.remove(&content_hash(b""));
            // Nodes of other sessions with the same payload, but for those
            // erased themselves (their diagnostics redacted: a session
            // erased before this one, which kept the bytes for this one).
            let mut others = Vec::new();
            tx.scan_nodes(&mut |n| {
                if let Ok(n) = n
                    && n.node.session != *session
                    && mine.contains(&n.node.payload)
                {
                    others.push((n.hash, n.node.payload));
                }
                Ok(())
            })?;
            let mut shared = std::collections::BTreeSet::new();
            for (node, payload) in others {
                if tx.redaction(&ContentHash(node.0))?.is_none() {
                    shared.insert(payload);
                }
            }
            let mut out = SessionRedacted {
                shared: shared.len(),
                ..SessionRedacted::default()
            };
            for digest in mine.difference(&shared) {
                if tx.blob(digest)?.is_some() {
                    out.bytes += erase_payload(tx, digest, by, reason, now)?.1;
                    out.payloads += 1;
                }
            }
            for (n, _) in &nodes {
                if erase_diagnostics(tx, &n.hash, keep, by, reason, now)? {
                    out.diagnostics += 1;
                }
            }
            // Every title it had (each retitle is a fact of its own).
            let mut titles: std::collections::BTreeSet<String> = row.title.into_iter().collect();
            for f in tx.facts()?.into_iter().flatten() {
                if let Ok(FactRecord {
                    fact:
                        Fact::Session {
                            id, title: Some(t), ..
                        },
                    ..
                }) = FactRecord::decode(&f.body)
                    && id == *session
                {
                    titles.insert(t);
                }
            }
            titles.remove(REDACTED_TITLE);
            for t in &titles {
                out.title_facts += erase_title(tx, session, t, by, reason, now)?;
            }
            Ok(out)
        })?;
        let warning = self.backend_mut().erase_rewritten()?;
        Ok((done, warning))
    }

    /// Rewrites the database's files so that bytes freed by redactions are
    /// gone from disk (what [`Store::redact`] does unless `keep_files`).
    /// On PostgreSQL a transaction that was running during the rewrite can
    /// keep an old row version alive; run this again once it has ended.
    /// Returns a warning when something may remain.
    pub fn erase_freed(&mut self) -> Result<Option<String>> {
        self.backend_mut().erase_freed()
    }

    /// [`Store::erase_freed`] after [`Store::redact_diagnostics`] or
    /// [`Store::redact_title`] rewrote rows in place (PostgreSQL rewrites
    /// those tables too).
    pub fn erase_rewritten(&mut self) -> Result<Option<String>> {
        self.backend_mut().erase_rewritten()
    }

    /// Every redaction, oldest first (from the index; verify checks it
    /// against the journal).
    pub fn redactions(&mut self) -> Result<Vec<Redaction>> {
        self.read(|tx| {
            let mut out = Vec::new();
            for (h, _) in tx.redaction_rows()?.into_iter().flatten() {
                let Some(h) = ContentHash::from_slice(&h) else {
                    continue;
                };
                if let Some((seq, body)) = tx.redaction(&h)?
                    && let Some(r) = Redaction::from_fact(seq, &body)
                {
                    out.push(r);
                }
            }
            Ok(out)
        })
    }

    /// The redaction of `payload`, if it was redacted.
    pub fn redaction(&mut self, payload: &ContentHash) -> Result<Option<Redaction>> {
        self.read(|tx| {
            Ok(tx
                .redaction(payload)?
                .and_then(|(seq, body)| Redaction::from_fact(seq, &body)))
        })
    }
}
