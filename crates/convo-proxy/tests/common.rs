//! Starting the proxy in a server on port 0 over a throwaway store.

use convo_proxy::{Proxy, ProxyConfig};
use convo_store::Store;

#[derive(Debug)]
pub struct Server {
    pub url: String,
    pub store_url: String,
    pub dir: tempfile::TempDir,
    /// The proxy serving (its replay summary, its counters).
    pub proxy: Proxy,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// A proxy recording into a fresh store on `backend` (the tests' one
    /// backend selector): SQLite in the server's own directory (so checks of
    /// `srv.dir` see the database file), or a fresh PostgreSQL database,
    /// returned because it must outlive the server; `None` when the backend
    /// cannot run here (PostgreSQL without `CONVO_TEST_PG`).
    pub async fn on(
        cfg: ProxyConfig,
        backend: convo_testutil::Backend,
    ) -> Option<(Server, Option<convo_testutil::Fresh>)> {
        if backend != convo_testutil::Backend::Postgres {
            return Some((Self::start(cfg).await, None));
        }
        let fresh = off_rt(move || backend.fresh())?;
        let srv = Self::start_on(cfg, tempfile::tempdir().unwrap(), fresh.url.clone()).await;
        Some((srv, Some(fresh)))
    }

    /// The store URL for the backend under test: SQLite in a temp dir,
    /// or a fresh PostgreSQL database when CONVO_TEST_PG is set and `pg`.
    pub async fn start(cfg: ProxyConfig) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store_url = format!("sqlite://{}/convo.db", dir.path().display());
        Self::start_on(cfg, dir, store_url).await
    }

    pub async fn start_on(cfg: ProxyConfig, dir: tempfile::TempDir, store_url: String) -> Server {
        Self::start_as(cfg, dir, store_url, None, false, None).await
    }

    /// With `token` (virtual keys: clients send it as their API key), and
    /// `standalone` (the routes `convo proxy` serves) or mounted as
    /// `convo serve --upstream` mounts them (the same guards for API
    /// clients, beside routes these tests do not call); `body_limit` in
    /// bytes (`--max-body-mib`).
    pub async fn start_as(
        mut cfg: ProxyConfig,
        dir: tempfile::TempDir,
        store_url: String,
        token: Option<&str>,
        standalone: bool,
        body_limit: Option<usize>,
    ) -> Server {
        let mut config = convo_runtime::Config::new(store_url.clone());
        if let Some(limit) = body_limit {
            config.body_limit = limit;
        }
        config.log_requests = false;
        config.token = token.map(str::to_owned);
        cfg.virtual_keys = token.is_some();
        let (pool, hub) = crate::common::off_rt(|| {
            let pool = convo_runtime::StorePool::open(&store_url, 16)?;
            let hub = convo_runtime::Hub::start(&store_url)?;
            Ok::<_, convo_store::StoreError>((pool, hub))
        })
        .unwrap();
        let proxy = Proxy::start(cfg, pool, Some(hub)).await.unwrap();
        let app = if standalone {
            convo_proxy::standalone(proxy.clone(), &config)
        } else {
            convo_runtime::guarded(convo_proxy::router(proxy.clone()), &config, true)
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            convo_runtime::serve_router(listener, app, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        Server {
            url,
            store_url,
            dir,
            proxy,
            stop: Some(tx),
            handle: Some(handle),
        }
    }

    /// A store handle; call it off the runtime (`block_in_place`).
    pub fn store(&self) -> Store {
        Store::open(&self.store_url).unwrap()
    }

    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.handle.take() {
            let _ = h.await;
        }
        self.dir
    }
}

/// Every byte of every file under `dir` (the SQLite file, its WAL…).
pub fn all_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            out.extend(std::fs::read(&p).unwrap());
        } else if p.is_dir() {
            out.extend(all_bytes(&p));
        }
    }
    out
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Runs `f` on a plain thread: the sync store (PostgreSQL's client builds
/// its own runtime) must not run inside the test's runtime.
pub fn off_rt<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("store call panicked"))
}

/// Every object of the store's git projection, uncompressed (both layouts
/// projected under `dir`, read back with `git cat-file`).
pub fn git_projection_bytes(store_url: &str, dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for layout in [convo_git::Layout::Dag, convo_git::Layout::Sessions] {
        let repo = dir.join(format!("git-{}", layout.as_str()));
        off_rt(|| {
            let mut store = Store::open(store_url).unwrap();
            let mut p = convo_git::Projector::open(&repo, Some(layout), false).unwrap();
            let r = p.sync(&mut store, &mut |_| {}).unwrap();
            assert!(r.commits > 0, "the projection holds the calls");
        });
        let cat = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args(["cat-file", "--batch-all-objects", "--batch"])
            .output()
            .unwrap();
        assert!(
            cat.status.success(),
            "{}",
            String::from_utf8_lossy(&cat.stderr)
        );
        assert!(!cat.stdout.is_empty());
        out.extend(cat.stdout);
        // Refs and bookkeeping files too.
        out.extend(all_bytes(&repo));
    }
    out
}
