//! Following the store's append cursor: the one loop behind `convo watch`,
//! `convo git sync --follow` and the server's event stream.
//!
//! The follow cursor is store-wide, gap-free and in commit order (see
//! [`crate::Store::follow`]), so a follower that remembers the last number it
//! saw can stop and resume anywhere without missing or repeating a node. It
//! never trusts a notification's content: a wake-up only means "read again".

use crate::{Result, Store, StoredNode, TimelineNode};
use std::time::Duration;

/// A position in the store's append order and the way to move it.
#[derive(Clone, Debug)]
pub struct Follower {
    cursor: u64,
    page: usize,
}

impl Follower {
    /// Starts after follow number `after` (0: from the first node).
    pub fn after(after: u64) -> Self {
        Follower {
            cursor: after,
            page: 1000,
        }
    }

    /// Starts at the current end of the store: only nodes appended from now on.
    pub fn at_end(store: &mut Store) -> Result<Self> {
        Ok(Follower::after(store.end_cursor()?))
    }

    /// At most this many nodes per [`Follower::next`] (default 1000).
    pub fn page_size(mut self, n: usize) -> Self {
        self.page = n.max(1);
        self
    }

    /// The same follower moved back to just after `after` (to read
    /// nodes again, with their payloads).
    pub fn rewound(mut self, after: u64) -> Self {
        self.cursor = after;
        self
    }

    /// The follow number of the last node returned (or the start).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next nodes after the cursor, with payloads, in append order.
    /// When there are none yet, waits up to `wait` for another process to
    /// append (LISTEN/NOTIFY on PostgreSQL, a short sleep on SQLite) and
    /// reads once more; an empty result means nothing arrived in time.
    pub fn next(&mut self, store: &mut Store, wait: Duration) -> Result<Vec<TimelineNode>> {
        let mut page = store.follow_with_payloads(self.cursor, self.page)?;
        if page.is_empty() && !wait.is_zero() {
            store.wait_for_append(wait)?;
            page = store.follow_with_payloads(self.cursor, self.page)?;
        }
        if let Some(last) = page.last() {
            self.cursor = last.stored.seq;
        }
        Ok(page)
    }

    /// Like [`Follower::next`], without the payloads: for followers that
    /// only count or place nodes (the automatic checkpointer).
    pub fn next_nodes(&mut self, store: &mut Store, wait: Duration) -> Result<Vec<StoredNode>> {
        let mut page = store.follow(self.cursor, self.page)?;
        if page.is_empty() && !wait.is_zero() {
            store.wait_for_append(wait)?;
            page = store.follow(self.cursor, self.page)?;
        }
        if let Some(last) = page.last() {
            self.cursor = last.seq;
        }
        Ok(page)
    }
}
