//! convo's store: the single source of truth.
//!
//! [`Store`] is the API every other part of convo uses. It holds a
//! [`Backend`] (SQLite or PostgreSQL, chosen by URL scheme through
//! [`Backends`]) and implements, once for all backends, the reads (timelines,
//! pages, the follow cursor, search, verification) and, through [`Ledger`],
//! the writes: appends that move branch heads by compare-and-swap, forks and
//! promotes, the versioned state store. Backends only move rows (see
//! [`backend`]).
//!
//! Every read is one transaction; every write is a [`Ledger`] call inside
//! [`Store::transaction`], which commits whole or not at all.
//!
//! ```
//! use convo_core::{BranchName, Diagnostics, HashPrefix, Kind};
//! use convo_store::{Draft, Store};
//!
//! let mut store = Store::open("sqlite::memory:")?;
//! let s = store.transaction(|l| l.new_session("my-agent", Some("trip"), 0))?;
//! let say = |kind, text: &str| Draft {
//!     kind,
//!     from: "user".into(),
//!     to: "agent".into(),
//!     payload: text.as_bytes().to_vec(),
//!     diagnostics: Diagnostics::empty(),
//!     state: None,
//!     sequence: None,
//!     created_at: 1,
//! };
//! let main = BranchName::main();
//! // One transaction: both nodes are written, or neither.
//! let first = store.transaction(|l| {
//!     let first = l.append(&s.id, &main, &say(Kind::Invoke, "Plan a trip"))?;
//!     l.append(&s.id, &main, &say(Kind::Complete, "Paris?"))?;
//!     Ok(first)
//! })?;
//! // A fork from the first message keeps it and nothing after.
//! let at = HashPrefix::parse(&first.hash.to_hex()).unwrap();
//! let retry = BranchName::new("retry").unwrap();
//! store.transaction(|l| {
//!     l.fork(&s.id, &at, &retry, 2)?;
//!     l.append(&s.id, &retry, &say(Kind::Complete, "Rome?"))
//! })?;
//! assert_eq!(store.timeline(&s.id, &main)?.len(), 2);
//! assert!(store.verify()?.problems.is_empty());
//! # Ok::<(), convo_store::StoreError>(())
//! ```
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
mod chain;
pub mod checkpoint;
pub mod chunk;
pub mod diff;
mod error;
mod facts;
pub mod filter;
mod follow;
mod ledger;
mod migrate;
pub mod otlp;
pub mod postgres;
mod redact;
pub mod refs;
mod registry;
pub mod search;
pub mod sqlite;
pub mod topology;
pub mod turns;
mod verify;

pub use backend::{
    Backend, Background, BranchRow, FactRow, ImportRow, Link, Maintenance, OtlpExportRow,
    SessionRow, StoredNode, ThreadField, Tx,
};
/// The transaction's traits, one per concern: a backend implements each;
/// [`Tx`] is all of them (a `&mut dyn Tx` calls any of their methods).
pub mod tx {
    pub use crate::backend::{
        BlobTx, BranchTx, CheckTx, FactTx, ImportTx, NodeTx, RedactionTx, SearchTx, SessionTx,
        StateTx, TelemetryTx, Tx,
    };
}
pub use chain::TimelineNode;
pub use checkpoint::Checkpoint;
pub use error::{BoxError, Cause, ErrorKind, Result, StoreError};
pub use facts::ReplayNote;
pub use follow::Follower;
pub use ledger::{Access, Draft, Ledger, PreviewNode, Promoted, Store, TimelinePage, TurnView};
pub use migrate::{Migrated, migrate};
pub use otlp::OtlpExport;
pub use redact::{REDACTED_TITLE, Redacted, Redaction, SessionRedacted};
pub use registry::{Backends, Opener};
pub use turns::OpenTurn;
pub use verify::{Problem, ProblemKind, VerifyProgress, VerifyReport};
