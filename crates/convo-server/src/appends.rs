//! `POST …/nodes` through the group-commit writer
//! ([`convo_runtime::writer`]): concurrent requests' appends share one
//! store transaction, each request atomic, in arrival order. A request
//! whose timeline has a harness turn open is refused
//! ([`convo_runtime::turns::guard`]; the batch is then redone request by
//! request, so only it fails).

use convo_core::BranchName;
use convo_runtime::writer::{self, Work};
use convo_runtime::{Hub, StorePool};
use convo_store::{Draft, Result, SessionRow, Store, StoredNode};

/// Messages one batch holds at most.
pub const MAX_DRAFTS: usize = 4096;

/// One request's append.
#[derive(Debug)]
pub struct Append {
    session: SessionRow,
    branch: BranchName,
    drafts: Vec<Draft>,
}

/// What the writer does with appends.
#[derive(Debug, Default)]
pub struct Appending;

impl Work for Appending {
    type Job = Append;
    type Done = Vec<StoredNode>;
    const MAX_BATCH: usize = MAX_DRAFTS;

    fn weight(job: &Append) -> usize {
        job.drafts.len()
    }

    fn write(&mut self, store: &mut Store, jobs: &[Append]) -> Result<Vec<Vec<StoredNode>>> {
        let batch: Vec<_> = jobs
            .iter()
            .map(|j| (j.session.id, j.branch.clone(), j.drafts.as_slice()))
            .collect();
        store.transaction(|l| {
            // One read of the (few) open turns per batch.
            let open = l.open_turns()?;
            for (s, b, _) in &batch {
                if open.iter().any(|(os, ob, _)| os == s && ob == b) {
                    convo_runtime::turns::guard(l, s, b, convo_runtime::now_ms())?;
                }
            }
            l.append_batch(&batch)
        })
    }
}

/// The handle request handlers send appends to.
#[derive(Clone, Debug)]
pub struct Writer {
    inner: writer::Writer<Appending>,
}

impl Writer {
    /// Starts the writer thread on its own connection to the pool's store.
    pub fn start(pool: &StorePool, hub: Option<Hub>) -> Result<Writer> {
        Ok(Writer {
            inner: writer::Writer::start("convo-writer", pool, Appending, hub)?,
        })
    }

    /// Appends `drafts` to `branch` of `session` in one transaction (shared
    /// with other requests' appends) and returns the nodes.
    pub async fn append(
        &self,
        session: SessionRow,
        branch: BranchName,
        drafts: Vec<Draft>,
    ) -> Result<Vec<StoredNode>> {
        self.inner
            .submit(Append {
                session,
                branch,
                drafts,
            })
            .await
    }
}
