//! The export bodies as received, kept so nothing the mapping drops is
//! lost: every span and log record (LLM calls or not), every attribute,
//! resource and scope, byte for byte.
//!
//! **What is kept.** Each export request that gave at least one call, its
//! body as received after gunzipping (protobuf or OTLP/JSON, whichever the
//! exporter sent: the exact bytes, so nothing depends on re-encoding),
//! one row of the store's `otlp_exports` ([`convo_store::OtlpExportRow`]),
//! listed under the sessions its calls belong to. The gzip framing is not
//! kept (it says nothing about the telemetry). An export whose body is the
//! one kept last for its session (an exporter's retry) is not kept again.
//!
//! **Why it costs little.** Each call resends its whole history, so the
//! body of a conversation's n-th export repeats the one before it and the
//! new messages, which are already the payloads of the nodes the export
//! wrote. A body is therefore kept as a *residual*: a delta (copies and
//! literal bytes, [`encode`]) against a dictionary made of
//!
//! 1. the body of the last export kept for its session (`base`, when the
//!    receiver still holds it: [`super::ThreadCache`] keeps the newest
//!    body of each session it holds), and
//! 2. the payloads of the nodes the export wrote (`nodes`, follow numbers
//!    `from..=to`), each as it is, JSON-escaped, JSON-escaped twice (a
//!    message in an attribute of an OTLP/JSON body) and JSON-escaped with
//!    `\uXXXX` for every non-ASCII character (Python's `json.dumps`),
//!
//! so what is stored is what neither holds: the ids, times, attributes and
//! the JSON around each message. The receiver decodes the residual again
//! before keeping it ([`keep`]); were it not the body, the body is kept
//! whole.
//!
//! The residual format and the rebuilding are the store's
//! ([`convo_store::otlp`]); [`convo_store::Store::otlp_exports`] gives
//! the bodies back, and a redaction drops the bodies that hold the
//! redacted bytes.

use convo_core::{Millis, SessionId};
use convo_store::otlp::{WHOLE, decode, dictionary, encode};
use convo_store::{OtlpExportRow, StoreError};

use std::sync::Arc;

/// What the receiver needs to keep one export body.
#[derive(Clone, Debug)]
pub struct Body {
    /// `traces` or `logs`, `/`, `protobuf` or `json`.
    pub media: &'static str,
    /// The body as received, gunzipped.
    pub bytes: Arc<Vec<u8>>,
}

/// Keeps `body` inside the export's transaction: a residual against
/// `base` (the number and body of the export kept last for the session,
/// if the receiver holds it and its row is in the store) and the payloads
/// of the nodes the export wrote (`nodes`: follow numbers and payloads, in
/// order). Decoded again before it is kept; the body whole when that does
/// not give it back. `None` when the body is `base`'s (a retry).
pub fn keep(
    l: &mut convo_store::Ledger<'_>,
    body: &Body,
    sessions: Vec<SessionId>,
    received_at: Millis,
    base: Option<(u64, Arc<Vec<u8>>)>,
    nodes: &[(u64, Vec<u8>)],
) -> Result<Option<u64>, StoreError> {
    let base = match base {
        Some((seq, b)) => match l.tx().otlp_export(seq)? {
            Some(row) if row.body_len == b.len() as u64 => Some((seq, b)),
            _ => None,
        },
        None => None,
    };
    if let Some((_, b)) = &base
        && nodes.is_empty()
        && b.as_slice() == body.bytes.as_slice()
    {
        return Ok(None);
    }
    let dict = dictionary(
        base.as_ref().map_or(&[][..], |(_, b)| b.as_slice()),
        nodes.iter().map(|(_, p)| p.as_slice()),
    );
    let mut residual = encode(&dict, &body.bytes);
    if decode(&dict, &residual, body.bytes.len()).as_deref() != Ok(body.bytes.as_slice()) {
        residual = Vec::with_capacity(body.bytes.len() + 1);
        residual.push(WHOLE);
        residual.extend_from_slice(&body.bytes);
    }
    let whole = residual.first() == Some(&WHOLE);
    let row = OtlpExportRow {
        seq: 0,
        sessions,
        received_at,
        media: body.media.to_owned(),
        base: if whole {
            None
        } else {
            base.as_ref().map(|(s, _)| *s)
        },
        // Whole or not: the nodes' diagnostics are read back from it
        // (`ingest::resolve_kept`).
        nodes: match (nodes.first(), nodes.last()) {
            (Some(a), Some(b)) => Some((a.0, b.0)),
            _ => None,
        },
        body_len: body.bytes.len() as u64,
        residual,
    };
    Ok(Some(l.tx().insert_otlp_export(&row)?))
}
