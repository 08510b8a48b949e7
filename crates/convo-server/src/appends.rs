//! The server's one group-commit writer ([`convo_runtime::writer`]):
//! concurrent requests' writes share one store transaction, each request
//! atomic, in arrival order. Two kinds of request go through it:
//!
//! - `POST …/nodes` appends. A request whose timeline has a harness turn
//!   open is refused ([`convo_runtime::turns::guard`]; the batch is then
//!   redone request by request, so only it fails).
//! - OTLP exports (`/v1/traces`, `/v1/logs`), decoded and prepared
//!   ([`otel::prepare`]) by the request outside the writer, threaded into
//!   sessions here ([`otel::ingest_prepared`]) with the writer's
//!   [`ThreadCache`]. Exports that arrive together share a transaction,
//!   so sixteen exporters pay for one commit, not sixteen that wait on
//!   SQLite's write lock; an export is answered once its batch has
//!   committed.

use convo_core::BranchName;
use convo_llm::otel::{self, Ingested, Prepared, ThreadCache};
use convo_runtime::writer::{self, Work};
use convo_runtime::{Hub, StorePool};
use convo_store::{Draft, Result, SessionRow, Store, StoredNode};

/// Messages one batch holds at most.
pub const MAX_DRAFTS: usize = 4096;

/// One request's write.
#[derive(Debug)]
pub enum Job {
    /// Drafts appended to a branch.
    Append {
        /// The session.
        session: SessionRow,
        /// Its branch.
        branch: BranchName,
        /// What is appended.
        drafts: Vec<Draft>,
    },
    /// An OTLP export's calls.
    Otel {
        /// The calls, prepared.
        calls: Prepared,
        /// The time of receipt.
        now: convo_core::Millis,
    },
}

/// What a request gets back.
#[derive(Debug)]
pub enum Done {
    /// The nodes an append wrote.
    Appended(Vec<StoredNode>),
    /// What an export wrote.
    Ingested(Ingested),
}

/// What the writer does with appends and exports.
#[derive(Debug, Default)]
pub struct Writing {
    /// OTLP threading state kept between exports.
    cache: ThreadCache,
}

impl Work for Writing {
    type Job = Job;
    type Done = Done;
    const MAX_BATCH: usize = MAX_DRAFTS;

    fn weight(job: &Job) -> usize {
        match job {
            Job::Append { drafts, .. } => drafts.len(),
            Job::Otel { calls, .. } => calls.messages().max(1),
        }
    }

    fn write(&mut self, store: &mut Store, jobs: &[Job]) -> Result<Vec<Done>> {
        let cache = &self.cache;
        let done = store.transaction(|l| {
            let mut out = Vec::with_capacity(jobs.len());
            // Runs of consecutive appends go in one append_batch.
            let mut i = 0;
            while i < jobs.len() {
                if let Job::Otel { calls, now } = &jobs[i] {
                    out.push(Done::Ingested(otel::ingest_prepared(
                        l, calls, *now, cache,
                    )?));
                    i += 1;
                    continue;
                }
                let mut batch = Vec::new();
                while let Some(Job::Append {
                    session,
                    branch,
                    drafts,
                }) = jobs.get(i)
                {
                    batch.push((session.id, branch.clone(), drafts.as_slice()));
                    i += 1;
                }
                // One read of the (few) open turns per run.
                let open = l.open_turns()?;
                for (s, b, _) in &batch {
                    if open.iter().any(|(os, ob, _)| os == s && ob == b) {
                        convo_runtime::turns::guard(l, s, b, convo_runtime::now_ms())?;
                    }
                }
                out.extend(l.append_batch(&batch)?.into_iter().map(Done::Appended));
            }
            Ok(out)
        });
        if done.is_err() {
            // The bodies noted as kept were rolled back with the batch.
            cache.forget_raws();
        }
        done
    }
}

/// The handle request handlers send writes to.
#[derive(Clone, Debug)]
pub struct Writer {
    inner: writer::Writer<Writing>,
    /// OTLP exports held before they are written (see
    /// [`crate::otlp::HOLD`]), by number.
    held: std::sync::Arc<std::sync::Mutex<(u64, std::collections::BTreeMap<u64, Prepared>)>>,
}

impl Writer {
    /// Starts the writer thread on its own connection to the pool's store.
    pub fn start(pool: &StorePool, hub: Option<Hub>) -> Result<Writer> {
        Ok(Writer {
            inner: writer::Writer::start("convo-writer", pool, Writing::default(), hub)?,
            held: Default::default(),
        })
    }

    /// Holds an export's calls to write later; their number.
    pub fn hold(&self, calls: Prepared) -> u64 {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        h.0 += 1;
        let id = h.0;
        h.1.insert(id, calls);
        id
    }

    /// Takes back the held export `id` (`None`: every one, oldest first).
    pub fn take_held(&self, id: Option<u64>) -> Vec<Prepared> {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        match id {
            Some(id) => h.1.remove(&id).into_iter().collect(),
            None => std::mem::take(&mut h.1).into_values().collect(),
        }
    }

    /// Appends `drafts` to `branch` of `session` in one transaction (shared
    /// with other requests' writes) and returns the nodes.
    pub async fn append(
        &self,
        session: SessionRow,
        branch: BranchName,
        drafts: Vec<Draft>,
    ) -> Result<Vec<StoredNode>> {
        match self
            .inner
            .submit(Job::Append {
                session,
                branch,
                drafts,
            })
            .await?
        {
            Done::Appended(n) => Ok(n),
            Done::Ingested(_) => Err(convo_store::StoreError::backend(
                "the writer answered an append with an export",
            )),
        }
    }

    /// Threads an OTLP export's prepared calls into sessions in one
    /// transaction (shared with other requests' writes).
    pub async fn otel(&self, calls: Prepared, now: convo_core::Millis) -> Result<Ingested> {
        match self.inner.submit(Job::Otel { calls, now }).await? {
            Done::Ingested(w) => Ok(w),
            Done::Appended(_) => Err(convo_store::StoreError::backend(
                "the writer answered an export with an append",
            )),
        }
    }
}
