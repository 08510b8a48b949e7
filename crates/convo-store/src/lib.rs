//! convo's store: the single source of truth.
//!
//! [`Store`] is the API every other part of convo uses. It holds a
//! [`Backend`] (SQLite today, selected by URL) and implements, once for all
//! backends, the ledger: appends that move branch heads by compare-and-swap,
//! forks and promotes, the versioned state store, the follow cursor and
//! verification. Backends only move rows (see [`backend`]).
//!
//! Every public operation is one transaction: it happens whole or not at all.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod checkpoint;
pub mod chunk;
pub mod diff;
mod error;
pub mod filter;
mod follow;
mod ledger;
mod migrate;
pub mod postgres;
mod redact;
pub mod refs;
pub mod search;
pub mod sqlite;
pub mod topology;
pub mod turns;
mod verify;

pub use backend::{
    Backend, Background, BranchRow, FactRow, SessionRow, StoredNode, ThreadField, Tx,
};
pub use checkpoint::Checkpoint;
pub use error::{BoxError, Cause, ErrorKind, Result, StoreError};
pub use follow::Follower;
pub use ledger::{
    Access, Draft, Ledger, PreviewNode, Promoted, Store, TimelineNode, TimelinePage, TurnView,
};
pub use migrate::{Migrated, migrate};
pub use redact::{Redacted, Redaction};
pub use turns::OpenTurn;
pub use verify::{Problem, ProblemKind, VerifyProgress, VerifyReport};
