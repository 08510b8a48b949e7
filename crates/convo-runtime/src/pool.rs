//! A store handle the async server shares: a pool of [`Store`]s (one
//! database connection each), every call run on tokio's blocking pool.
//!
//! The store API is synchronous (rusqlite, and `tokio-postgres` driven by
//! the backend's own runtime, which must never run on a runtime worker
//! thread: it blocks on it). So each request checks a `Store` out, runs its
//! closure in `spawn_blocking`, and checks it back in. Connections are
//! opened lazily and kept up to `max_idle`. A connection whose call failed
//! with an `unavailable` error is dropped rather than reused, and so is
//! every idle connection opened before that failure (after a PostgreSQL
//! restart they are all dead: the requests after the first one that saw it
//! get a new connection instead of the same error).

use convo_store::{ErrorKind, Result, Store, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A shareable pool of store connections.
#[derive(Clone)]
pub struct StorePool {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    /// Idle connections, each with the generation it was opened in.
    idle: Mutex<Vec<(u64, Store)>>,
    max_idle: usize,
    /// Bumped when a connection is found lost: older ones are not reused.
    generation: AtomicU64,
}

impl std::fmt::Debug for StorePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorePool")
            .field("url", &redact_url(&self.inner.url))
            .finish()
    }
}

/// A store URL with any password removed, for logs.
pub use convo_core::url::redact as redact_url;

impl StorePool {
    /// Opens one connection now (so a bad URL fails at start) and keeps it.
    pub fn open(url: &str, max_idle: usize) -> Result<Self> {
        let first = Store::open(url)?;
        Ok(StorePool {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                idle: Mutex::new(vec![(0, first)]),
                max_idle: max_idle.max(1),
                generation: AtomicU64::new(0),
            }),
        })
    }

    /// The store URL (for logs, redacted).
    pub fn url(&self) -> String {
        redact_url(&self.inner.url)
    }

    /// A connection of its own, not pooled: for a long-lived writer.
    pub fn open_one(&self) -> Result<Store> {
        Store::open(&self.inner.url)
    }

    /// The store URL itself (with its credentials: never to be shown).
    pub(crate) fn secret_url(&self) -> &str {
        &self.inner.url
    }

    /// Runs `f` with a store connection on a blocking thread.
    pub async fn run<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.with(f))
            .await
            .map_err(|e| StoreError::backend(format!("a store call did not finish: {e}")))?
    }

    /// Runs `f` with a store connection on the calling (blocking) thread.
    pub fn run_blocking<T>(&self, f: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        self.inner.with(f)
    }
}

impl Inner {
    fn with<T>(&self, f: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        let taken = self.idle.lock().map(|mut v| v.pop()).unwrap_or(None);
        let (generation, mut store) = match taken {
            Some(s) => s,
            None => (
                self.generation.load(Ordering::SeqCst),
                Store::open(&self.url)?,
            ),
        };
        let out = f(&mut store);
        if matches!(&out, Err(e) if e.kind() == ErrorKind::Unavailable) {
            // This connection is lost, and so, probably, is every idle one
            // opened before it: close them (off this thread's lock).
            self.generation.fetch_add(1, Ordering::SeqCst);
            let stale = self.idle.lock().map(|mut v| std::mem::take(&mut *v));
            drop(stale);
            return out;
        }
        if generation == self.generation.load(Ordering::SeqCst)
            && let Ok(mut idle) = self.idle.lock()
            && idle.len() < self.max_idle
        {
            idle.push((generation, store));
        }
        out
    }
}

impl Drop for Inner {
    /// Connections are closed on a plain thread: the PostgreSQL
    /// backend's drop shuts down its own runtime, which must not happen on a
    /// runtime thread (the pool is usually dropped by the server's task).
    fn drop(&mut self) {
        let stores = self.idle.get_mut().map(std::mem::take).unwrap_or_default();
        if !stores.is_empty() {
            let _ = std::thread::spawn(move || drop(stores)).join();
        }
    }
}
