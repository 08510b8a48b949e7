//! Group commit for appends: concurrent `POST …/nodes` requests share one
//! store transaction.
//!
//! Every write transaction pays a fixed price — SQLite's write lock and
//! commit, PostgreSQL's advisory lock, `BEGIN`/`COMMIT` round trips and the
//! follow-number read — whatever it holds. Under load (64 agents appending
//! at once) most of that price is shared by batching: one writer thread
//! takes the first waiting request and every other one already queued (up
//! to [`MAX_DRAFTS`] messages), appends them all in one transaction, in
//! arrival order, and answers each request with its own nodes.
//!
//! Each request stays atomic: if anything in a batch fails (a sealed
//! branch, a timeline rule), the batch is rolled back and its requests are
//! run again one transaction each, so only the request at fault gets the
//! error. A client that waits for its answer before sending the next
//! request sees its appends in order, as without batching.

use convo_core::BranchName;
use convo_store::{Draft, Result, SessionRow, Store, StoreError, StoredNode};
use std::sync::mpsc;

/// Messages one batch holds at most.
pub const MAX_DRAFTS: usize = 4096;

struct Job {
    session: SessionRow,
    branch: BranchName,
    drafts: Vec<Draft>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<StoredNode>>>,
}

/// The handle request handlers send appends to.
#[derive(Clone, Debug)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("drafts", &self.drafts.len())
            .finish()
    }
}

impl Writer {
    /// Starts the writer thread on its own connection to `url`.
    pub fn start(url: &str) -> Result<Writer> {
        let store = Store::open(url)?;
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("convo-writer".into())
            .spawn(move || run(store, rx))
            .map_err(|e| StoreError::Backend(format!("cannot start a thread: {e}")))?;
        Ok(Writer { tx })
    }

    /// Appends `drafts` to `branch` of `session` in one transaction (shared
    /// with other requests' appends) and returns the nodes.
    pub async fn append(
        &self,
        session: SessionRow,
        branch: BranchName,
        drafts: Vec<Draft>,
    ) -> Result<Vec<StoredNode>> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx
            .send(Job {
                session,
                branch,
                drafts,
                reply,
            })
            .map_err(|_| StoreError::Backend("the writer thread has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Backend("the writer thread dropped an append".into()))?
    }
}

fn run(mut store: Store, rx: mpsc::Receiver<Job>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        let mut drafts = batch[0].drafts.len();
        while drafts < MAX_DRAFTS {
            match rx.try_recv() {
                Ok(j) => {
                    drafts += j.drafts.len();
                    batch.push(j);
                }
                Err(_) => break,
            }
        }
        if batch.len() == 1 {
            let j = batch.pop().expect("one job");
            let out = append_jobs(&mut store, std::slice::from_ref(&j));
            let _ = j.reply.send(out.map(|mut v| v.pop().unwrap_or_default()));
            continue;
        }
        match append_jobs(&mut store, &batch) {
            Ok(results) => {
                for (j, nodes) in batch.into_iter().zip(results) {
                    let _ = j.reply.send(Ok(nodes));
                }
            }
            Err(_) => {
                // Isolate the request at fault: one transaction each.
                for j in batch {
                    let out = append_jobs(&mut store, std::slice::from_ref(&j));
                    let _ = j.reply.send(out.map(|mut v| v.pop().unwrap_or_default()));
                }
            }
        }
    }
}

fn append_jobs(store: &mut Store, jobs: &[Job]) -> Result<Vec<Vec<StoredNode>>> {
    let batch: Vec<_> = jobs
        .iter()
        .map(|j| (j.session.id, j.branch.clone(), j.drafts.as_slice()))
        .collect();
    store.transaction(|l| l.append_batch(&batch))
}
