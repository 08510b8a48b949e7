//! Messages read on demand: the second pass of an import that did not
//! keep its messages (`convo_llm::ledger::import_lazy`). The conversation
//! given beside a loader is a skeleton: every message's parent, role,
//! speaker, `to`, time and key, its text and extra left empty.
//!
//! The readers of the agent transcripts implement it
//! ([`crate::records::Stored`], [`crate::opencode::Rows`]); the ledger
//! drives it. Nothing here knows the store: a load that fails is this
//! crate's [`Error`], which the ledger turns into its own.

use crate::Result;
use crate::model::Message;
use crate::records::Skeleton;

/// Reads a conversation's messages one at a time, for an import.
pub trait Loader {
    /// Message `i` whole (its text, model and extra, records included),
    /// from its skeleton.
    fn load(&mut self, i: usize, skeleton: &Message) -> Result<Message>;
    /// The `(file, line)` of the records message `i` carries, without
    /// reading them.
    fn record_ids(&self, i: usize) -> Vec<(String, u64)>;
    /// The next of the records the loads since the last call left to be
    /// stored after their nodes (see [`crate::records::Stored::defer`]),
    /// read again, one at a time; `None` when none is left.
    fn next_deferred(&mut self) -> Option<Result<String>> {
        None
    }
    /// Ids of records that are not messages, each with the message it
    /// leads to (kept in the import index beside the messages' keys).
    fn aliases(&self) -> Vec<(String, usize)> {
        Vec::new()
    }
    /// Where the files read end and the reader's state there
    /// ([`crate::records::Tail`], as JSON), kept once every line is stored.
    fn tail(&self) -> Option<String> {
        None
    }
    /// The messages' compact skeleton, when the loader holds it instead of
    /// the conversation's `messages` (lent to the ledger for an import,
    /// given back with [`Loader::put_tree`]).
    fn take_tree(&mut self) -> Option<Skeleton> {
        None
    }
    /// Gives back what [`Loader::take_tree`] lent.
    fn put_tree(&mut self, _tree: Skeleton) {}
}
