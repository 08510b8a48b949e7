//! Copying a whole store to another backend, losslessly.

use crate::{Result, Store, StoreError, Tx};

/// What `migrate` copied.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Sessions copied.
    pub sessions: u64,
    /// Payloads and state values copied.
    pub blobs: u64,
    /// State trie nodes copied.
    pub state_nodes: u64,
    /// Nodes copied, with their follow sequence numbers.
    pub nodes: u64,
    /// Branches copied.
    pub branches: u64,
    /// Rows of the import index copied (keys, tails, file looks).
    pub import_rows: u64,
}

/// Copies everything in `from` into the empty store `to`, in one write
/// transaction on `to` reading one snapshot of `from`: the target gets all
/// of it or nothing. Nodes keep their hashes and follow sequence numbers.
/// `progress` is called with the number of nodes copied so far.
pub fn migrate(
    from: &mut Store,
    to: &mut Store,
    progress: &mut dyn FnMut(u64),
) -> Result<Migrated> {
    to.write(|ttx| {
        if !ttx.sessions()?.is_empty() || !ttx.nodes_since(0, 1)?.is_empty() {
            return Err(StoreError::Invalid("the target store is not empty".into()));
        }
        let mut m = Migrated::default();
        from.read(|stx| {
            for s in stx.sessions()? {
                ttx.insert_session(&s)?;
                m.sessions += 1;
            }
            copy_payloads(stx, ttx, &mut m)?;
            copy_nodes(stx, ttx, &mut m, progress)?;
            for b in stx.branches(None)? {
                ttx.insert_branch(&b)?;
                m.branches += 1;
            }
            copy_journal(stx, ttx)?;
            copy_import_index(stx, ttx, &mut m)
        })?;
        progress(m.nodes);
        Ok(m)
    })
}

/// Every payload (blob) and state node, under its address.
fn copy_payloads(stx: &mut dyn Tx, ttx: &mut dyn Tx, m: &mut Migrated) -> Result<()> {
    stx.scan_blobs(true, &mut |h, data| {
        let h = convo_core::ContentHash::from_slice(h)
            .ok_or_else(|| StoreError::corrupt("a blob address is not 32 bytes"))?;
        let data =
            data.map_err(|why| StoreError::corrupt(format!("payload {}: {why}", h.to_hex())))?;
        let bytes = data.bytes().ok_or_else(|| {
            StoreError::backend(format!("payload {}: the scan kept no bytes", h.to_hex()))
        })?;
        ttx.put_blob(&h, bytes)?;
        m.blobs += 1;
        Ok(())
    })?;
    stx.scan_state_nodes(&mut |h, body| {
        let h = convo_core::Digest::from_slice(h)
            .ok_or_else(|| StoreError::corrupt("a state node address is not 32 bytes"))?;
        ttx.put_state_node(&h, body)?;
        m.state_nodes += 1;
        Ok(())
    })
}

/// Every node, under the same follow number (a gap in the source is
/// refused: the target would number them otherwise).
fn copy_nodes(
    stx: &mut dyn Tx,
    ttx: &mut dyn Tx,
    m: &mut Migrated,
    progress: &mut dyn FnMut(u64),
) -> Result<()> {
    stx.scan_nodes(&mut |row| {
        let n = row.map_err(StoreError::corrupt)?;
        let seq = ttx.insert_node(&n.hash, &n.node, &n.ctx)?;
        if seq != n.seq {
            return Err(StoreError::corrupt(format!(
                "node {} has follow number {} in the source but {seq} in the target (the source has a gap)",
                n.hash, n.seq
            )));
        }
        m.nodes += 1;
        if m.nodes.is_multiple_of(1000) {
            progress(m.nodes);
        }
        Ok(())
    })
}

/// The fact journal (replacing the target's, byte for byte), the OTLP
/// export bodies the receiver kept under their numbers (their deltas name
/// each other and nodes by number), and the redacted payloads' index
/// (pointing at facts just copied).
fn copy_journal(stx: &mut dyn Tx, ttx: &mut dyn Tx) -> Result<()> {
    for f in stx.facts()? {
        let f = f.map_err(StoreError::corrupt)?;
        let h = convo_core::Digest::from_slice(&f.hash)
            .ok_or_else(|| StoreError::corrupt("a fact hash is not 32 bytes"))?;
        ttx.insert_fact(f.seq, &h, &f.body)?;
    }
    for row in stx.otlp_exports(None)? {
        ttx.put_otlp_export(&row)?;
    }
    for row in stx.redaction_rows()? {
        let (digest, fact) = row.map_err(StoreError::corrupt)?;
        let h = convo_core::ContentHash::from_slice(&digest)
            .ok_or_else(|| StoreError::corrupt("a redacted digest is not 32 bytes"))?;
        ttx.insert_redaction(&h, fact)?;
    }
    Ok(())
}

/// The import index, so the next re-import of a coding agent's transcript
/// reads only its new lines. Keys go in by batches of a session's rows (at
/// most `KEY_BATCH`).
fn copy_import_index(stx: &mut dyn Tx, ttx: &mut dyn Tx, m: &mut Migrated) -> Result<()> {
    const KEY_BATCH: usize = 1024;
    type Batch = Option<(convo_core::SessionId, Vec<(String, convo_core::NodeHash)>)>;
    let mut batch: Batch = None;
    let flush = |ttx: &mut dyn Tx, b: &mut Batch| match b.take() {
        Some((s, keys)) if !keys.is_empty() => ttx.put_import_keys(&s, &keys),
        _ => Ok(()),
    };
    stx.scan_import_index(&mut |row| {
        m.import_rows += 1;
        match row {
            crate::ImportRow::Key(s, key, node) => {
                if batch
                    .as_ref()
                    .is_some_and(|(b, keys)| *b != s || keys.len() >= KEY_BATCH)
                {
                    flush(ttx, &mut batch)?;
                }
                batch
                    .get_or_insert_with(|| (s, Vec::new()))
                    .1
                    .push((key, node));
                Ok(())
            }
            crate::ImportRow::Tail(s, tail) => {
                flush(ttx, &mut batch)?;
                ttx.set_import_tail(&s, &tail)
            }
            crate::ImportRow::File(path, look) => {
                flush(ttx, &mut batch)?;
                ttx.put_import_files(&[(path, look)])
            }
        }
    })?;
    flush(ttx, &mut batch)
}
