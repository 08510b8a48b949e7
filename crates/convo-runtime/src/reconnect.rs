//! A store connection that comes back after the database does.
//!
//! Long-lived writers and followers (the group-commit writer, the event
//! hub, `convo watch`, `convo git sync --follow`, the checkpoint thread of
//! `convo serve --checkpoint-dir`) hold one connection for hours. When a
//! call fails with an `unavailable` error (a PostgreSQL server restarted,
//! the connection was cut), the connection is dropped and the next call
//! opens a new one, as PostgreSQL's own reconnecting clients do. A follower
//! keeps its cursor outside the connection, so it resumes where it was:
//! nothing is skipped and nothing is read twice.
//!
//! A call that failed is never repeated here: only its caller (which did
//! not acknowledge it) may decide to send it again. (A write whose
//! connection broke at `COMMIT` has already asked the server whether it
//! was kept: `unavailable` means it was not.)

use convo_store::{Access, ErrorKind, Result, Store, StoreError};
use std::time::Duration;

/// What to do with each new connection before it is used (e.g. moving
/// its WAL checkpoints to another thread).
type Setup = Box<dyn FnMut(&mut Store) -> Result<()> + Send>;

/// A connection to one store URL, reopened after it was lost.
pub struct Reconnecting {
    url: String,
    access: Access,
    store: Option<Store>,
    setup: Option<Setup>,
    /// Connections opened so far.
    opened: u64,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("url", &crate::redact_url(&self.url))
            .field("connected", &self.store.is_some())
            .field("opened", &self.opened)
            .finish()
    }
}

/// Whether an error means the connection (or the database) went away.
pub fn is_lost(e: &StoreError) -> bool {
    e.kind() == ErrorKind::Unavailable
}

impl Reconnecting {
    /// Not connected yet: the first call opens the connection.
    pub fn lazy(url: &str, access: Access) -> Self {
        Reconnecting {
            url: url.to_owned(),
            access,
            store: None,
            setup: None,
            opened: 0,
        }
    }

    /// Connected now (so a bad URL fails at once).
    pub fn open(url: &str, access: Access) -> Result<Self> {
        let mut r = Reconnecting::lazy(url, access);
        r.connect()?;
        Ok(r)
    }

    /// An already open connection to `url`.
    pub fn from_store(url: &str, access: Access, store: Store) -> Self {
        let mut r = Reconnecting::lazy(url, access);
        r.store = Some(store);
        r.opened = 1;
        r
    }

    /// Runs `setup` on every connection opened from now on.
    pub fn on_connect(
        mut self,
        setup: impl FnMut(&mut Store) -> Result<()> + Send + 'static,
    ) -> Self {
        self.setup = Some(Box::new(setup));
        self
    }

    /// How many connections have been opened (1 until the first loss).
    pub fn opened(&self) -> u64 {
        self.opened
    }

    /// The connection, opened now when there is none. A caller that uses
    /// it directly says when it was lost ([`Reconnecting::drop_connection`]).
    pub fn store(&mut self) -> Result<&mut Store> {
        self.connect()
    }

    fn connect(&mut self) -> Result<&mut Store> {
        if self.store.is_none() {
            let mut s = Store::open_as(&self.url, self.access).map_err(|e| match e {
                // The URL opened before: the database is away (restarting,
                // refusing connections), not the URL wrong.
                e if self.opened > 0 && is_lost(&e) => {
                    StoreError::Unreachable(convo_store::Cause::new(e.to_string()).with_source(e))
                }
                e => e,
            })?;
            if let Some(setup) = &mut self.setup {
                setup(&mut s)?;
            }
            self.opened += 1;
            self.store = Some(s);
        }
        self.store
            .as_mut()
            .ok_or_else(|| StoreError::backend("no store connection"))
    }

    /// Runs `f` on the connection (opening it when there is none); drops
    /// the connection when `f` fails because it was lost.
    pub fn run<T>(&mut self, f: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        let out = f(self.connect()?);
        // A locked store (`Busy`) keeps its connection.
        if matches!(&out, Err(e) if is_lost(e) && !matches!(e, StoreError::Busy(_))) {
            self.drop_connection();
        }
        out
    }

    /// Forgets the connection (closing it); the next call opens another.
    pub fn drop_connection(&mut self) {
        self.store = None;
    }

    /// Runs `f` until it succeeds, fails for another reason than a lost
    /// database, or `give_up` says so: after each loss, `lost` is told
    /// (to say so once) and the next attempt waits 0.1 s, 0.2 s … up to
    /// 5 s. For readers only: `f` runs again after a failure.
    pub fn retry<T>(
        &mut self,
        mut f: impl FnMut(&mut Store) -> Result<T>,
        give_up: impl Fn() -> bool,
        mut lost: impl FnMut(&StoreError),
    ) -> Result<T> {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.run(&mut f) {
                Err(e) if is_lost(&e) && !give_up() => {
                    lost(&e);
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                other => return other,
            }
        }
    }
}
