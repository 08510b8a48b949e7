//! Group commit: concurrent requests' writes share one store transaction.
//! One implementation behind `convo serve`'s appends and `convo proxy`'s
//! recordings (each surface says *what* a batch writes with a [`Work`]).
//!
//! Every write transaction pays a fixed price — SQLite's write lock and
//! commit, PostgreSQL's advisory lock, `BEGIN`/`COMMIT` round trips and the
//! follow-number read — whatever it holds, and connections that contend
//! for SQLite's write lock wait in its busy handler. Under load (64 agents
//! appending at once) most of that price is shared by batching: one writer
//! thread takes the first waiting request and every other one already
//! queued (up to the work's batch limit), writes them all in one
//! transaction, in arrival order, and answers each with its own result.
//! A client that waits for its answer before sending the next request sees
//! its writes in order, as without batching.
//!
//! - **Each request stays atomic.** If anything in a batch fails (a sealed
//!   branch, a timeline rule), the batch is rolled back and its requests
//!   are run again one transaction each, so only the request at fault gets
//!   the error. What a batch learns (caches) is kept only once it has
//!   committed ([`Work::committed`], on the writer thread, before the next
//!   batch).
//! - **The database may go away and come back.** When a batch fails because
//!   the connection was lost (a PostgreSQL restart), every request of the
//!   batch gets that `unavailable` error (HTTP 503: nothing of it was
//!   kept; a cut `COMMIT` was asked about first), unless its work waits
//!   the store out (below); only a request answered with success counts
//!   as written. The next
//!   batch opens a new connection ([`Reconnecting`]). So an acknowledged
//!   write is in the store exactly once, and the server needs no restart.
//! - **A locked store can be waited out.** A [`Work`] that says so
//!   ([`Work::waits_while_busy`], the proxy's recordings) has a batch the
//!   store refused as busy written again until the store takes it; the
//!   requests queued meanwhile wait in the channel behind it. Its
//!   connection does not wait for a lock at all ([`Store::busy_wait`]
//!   zero: SQLite's busy timeout, PostgreSQL's `lock_timeout`): the writer
//!   knows at once that the store is locked, and says so
//!   ([`Writer::stalled`]) until a batch commits again, so its callers
//!   need not wait for their writes meanwhile. A database that is away
//!   ([`StoreError::Unreachable`]: a PostgreSQL server restarting, before
//!   any `COMMIT` was sent, or a `COMMIT` the server says it never kept)
//!   is waited out the same way. A connection lost at `COMMIT` is asked
//!   about on a new one (`pg_xact_status`): kept is success; unknown (the
//!   server stayed away) is an error its requests get.
//! - **Checkpoints off the commit path.** The writer has a connection of
//!   its own, and on SQLite its WAL checkpoints run on another thread
//!   ([`Store::defer_checkpoints`]): left to SQLite, one commit in a few
//!   hundred would also copy the WAL into the database and sync it, and the
//!   request waiting for that commit would wait for the copy. A request is
//!   still answered only once its commit is done.

use crate::reconnect::{Reconnecting, is_lost};
use crate::{Hub, StorePool};
use convo_store::{Access, Result, Store, StoreError};
use std::sync::mpsc;

/// What a writer writes.
pub trait Work: Send + 'static {
    /// One request's write.
    type Job: Send + 'static;
    /// What the request gets back once its batch has committed.
    type Done: Send + 'static;

    /// At most this much [`Work::weight`] goes into one batch.
    const MAX_BATCH: usize;

    /// How much of a batch `job` takes (1 by default; messages for appends).
    fn weight(_job: &Self::Job) -> usize {
        1
    }

    /// Writes `jobs` in one transaction (reads that must happen outside
    /// it first) and returns each job's result, in order. All or nothing.
    fn write(&mut self, store: &mut Store, jobs: &[Self::Job]) -> Result<Vec<Self::Done>>;

    /// Called on the writer thread for each job once its batch committed,
    /// before the next batch is written (to keep what it taught a cache).
    fn committed(&mut self, _done: &mut Self::Done) {}

    /// Whether a batch the store refuses as busy (locked by another
    /// process past the busy timeout) is written again until the store
    /// takes it, rather than answered with the error. The proxy's
    /// recordings wait (their callers have their answers already); the
    /// API's appends do not (their callers wait for the answer).
    fn waits_while_busy(&self) -> bool {
        false
    }
}

struct Entry<W: Work> {
    job: W::Job,
    reply: tokio::sync::oneshot::Sender<Result<W::Done>>,
}

/// The handle request handlers send writes to.
pub struct Writer<W: Work> {
    tx: mpsc::Sender<Entry<W>>,
    name: &'static str,
    stalled: tokio::sync::watch::Receiver<bool>,
}

impl<W: Work> Clone for Writer<W> {
    fn clone(&self) -> Self {
        Writer {
            tx: self.tx.clone(),
            name: self.name,
            stalled: self.stalled.clone(),
        }
    }
}

impl<W: Work> std::fmt::Debug for Writer<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("name", &self.name).finish()
    }
}

impl<W: Work> Writer<W> {
    /// Starts the writer thread `name` on a connection of its own to the
    /// pool's store (opened by the thread at the first batch, never on a
    /// runtime's, and again after a loss), waking `hub` after each batch.
    pub fn start(name: &'static str, pool: &StorePool, work: W, hub: Option<Hub>) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Entry<W>>();
        let (stall, stalled) = tokio::sync::watch::channel(false);
        let no_wait = work.waits_while_busy();
        let conn = Reconnecting::lazy(pool.secret_url(), Access::Write).on_connect(move |s| {
            if no_wait {
                s.busy_wait(std::time::Duration::ZERO)?;
            }
            if let Some(bg) = s.defer_checkpoints()? {
                std::thread::Builder::new()
                    .name(format!("{name}-checkpoint"))
                    .spawn(move || bg.run())
                    .map_err(|e| StoreError::backend(format!("cannot start a thread: {e}")))?;
            }
            Ok(())
        });
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || run(work, conn, hub, &rx, &stall))
            .map_err(|e| StoreError::backend(format!("cannot start a thread: {e}")))?;
        Ok(Writer { tx, name, stalled })
    }

    /// `true` while the store refuses the writer's batch as locked (a
    /// [`Work::waits_while_busy`] writer waits it out), `false` again once
    /// a batch commits.
    pub fn stalled(&self) -> tokio::sync::watch::Receiver<bool> {
        self.stalled.clone()
    }

    /// Writes `job` (in a transaction shared with other requests') and
    /// returns its result once committed.
    pub async fn submit(&self, job: W::Job) -> Result<W::Done> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx.send(Entry { job, reply }).map_err(|_| {
            StoreError::backend(format!("the writer thread {} has stopped", self.name))
        })?;
        answer.await.map_err(|_| {
            StoreError::backend(format!("the writer thread {} dropped a write", self.name))
        })?
    }
}

/// The same error for each request of a batch (errors are not `Clone`).
fn copy(e: &StoreError) -> StoreError {
    StoreError::backend(e.to_string())
}

fn run<W: Work>(
    mut work: W,
    mut conn: Reconnecting,
    hub: Option<Hub>,
    rx: &mpsc::Receiver<Entry<W>>,
    stall: &tokio::sync::watch::Sender<bool>,
) {
    while let Ok(first) = rx.recv() {
        let mut weight = W::weight(&first.job);
        let mut batch = vec![first];
        while weight < W::MAX_BATCH {
            match rx.try_recv() {
                Ok(e) => {
                    weight += W::weight(&e.job);
                    batch.push(e);
                }
                Err(_) => break,
            }
        }
        let (jobs, replies): (Vec<_>, Vec<_>) = batch.into_iter().map(|e| (e.job, e.reply)).unzip();
        let mut first = conn.run(|s| work.write(s, &jobs));
        let mut pause = std::time::Duration::from_millis(50);
        while matches!(first, Err(StoreError::Busy(_) | StoreError::Unreachable(_)))
            && work.waits_while_busy()
        {
            // Nothing was written (the lock was never taken, or the
            // database was away before any COMMIT): the same batch again
            // once the store lets go or is back.
            stall.send_if_modified(|s| !std::mem::replace(s, true));
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_secs(1));
            first = conn.run(|s| work.write(s, &jobs));
        }
        if first.is_ok() {
            stall.send_if_modified(|s| std::mem::replace(s, false));
        }
        match first {
            Ok(done) => {
                for (reply, mut d) in replies.into_iter().zip(done) {
                    work.committed(&mut d);
                    let _ = reply.send(Ok(d));
                }
            }
            Err(e) if replies.len() == 1 || is_lost(&e) => {
                // Nothing to isolate, or the connection is gone: not
                // retried (a cut COMMIT may have been kept).
                let mut e = Some(e);
                let n = replies.len();
                for (i, reply) in replies.into_iter().enumerate() {
                    let err = if i + 1 == n {
                        e.take().unwrap_or_else(|| StoreError::backend("lost"))
                    } else {
                        e.as_ref()
                            .map(copy)
                            .unwrap_or_else(|| StoreError::backend("lost"))
                    };
                    let _ = reply.send(Err(err));
                }
            }
            Err(_) => {
                // Isolate the request at fault: one transaction each.
                for (job, reply) in jobs.into_iter().zip(replies) {
                    let out = conn.run(|s| work.write(s, std::slice::from_ref(&job)));
                    let out = out.and_then(|mut v| {
                        v.pop()
                            .ok_or_else(|| StoreError::backend("nothing written"))
                    });
                    let _ = reply.send(out.map(|mut d| {
                        work.committed(&mut d);
                        d
                    }));
                }
            }
        }
        if let Some(h) = &hub {
            h.poke();
        }
    }
}
