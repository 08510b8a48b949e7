//! convo's data model, with no I/O.
//!
//! This crate defines what a conversation *is*, independent of where it is
//! stored: typed ids ([`NodeHash`], [`SessionId`], [`SubmissionId`],
//! [`StateRoot`], [`BranchName`]), the [`Node`] and its hash encoding
//! ([`hash`]), the timeline rules that decide what may be appended where
//! ([`timeline`]), and the persistent Merkle map that versions an agent's
//! state ([`state`]). [`text`] holds the two functions every user-supplied
//! string goes through before it becomes a name or is shown to a human;
//! [`credential`] the one detector of credentials (names and values),
//! [`url`] the one redactor of credentials in URLs.
//!
//! Store backends, projections, formats and the CLI depend on this crate;
//! it depends on none of them. Nothing here touches the file system, the
//! clock, the environment or a terminal: the current time is always passed
//! in by the caller.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod credential;
mod error;
pub mod fact;
pub mod hash;
mod ids;
pub mod json;
mod node;
pub mod secrets;
pub mod state;
pub mod text;
pub mod timeline;
pub mod url;

pub use error::ErrorKind;
pub use ids::{
    BranchName, ContentHash, Digest, DigestHasher, DigestMap, DigestSet, HashPrefix, IdError,
    NodeHash, SessionId, StateRoot, SubmissionId,
};
pub use node::{Diagnostics, Kind, Millis, Node, NodeError, TimelineEvent};

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Digest {
    use sha2::Digest as _;
    Digest(sha2::Sha256::digest(bytes).into())
}
