//! The one accept loop of every convo listener (`convo serve`, `convo
//! proxy`, `convo otel`): HTTP/1.1 over hyper with the limits a public
//! server needs, as hyper and nginx set them.
//!
//! - A request head must arrive whole within the header-read timeout
//!   (default 30 s, `CONVO_HEADER_TIMEOUT_SECS`): a client that sends half
//!   a head, or nothing, is closed. The same timer bounds a keep-alive
//!   connection's wait for its next request (hyper starts it when the
//!   connection turns idle), so idle connections go too.
//! - At most `CONVO_MAX_CONNECTIONS` connections are served at once
//!   (default 1024, lowered to fit the process's open-file limit): past it
//!   new connections wait in the kernel's backlog, unaccepted, so no file
//!   descriptor is spent on them, until one closes.
//! - Neither limit touches a request being answered: a long streamed
//!   response (SSE, a proxied stream) runs as long as it runs.
//! - On shutdown the listener stops accepting, every connection finishes
//!   the request in flight and closes, and the loop returns once they have.

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};

/// The limits of a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a request head may take to arrive (and a kept-alive
    /// connection may wait for its next one).
    pub header_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

impl Limits {
    /// The defaults, or `CONVO_HEADER_TIMEOUT_SECS` (seconds, decimals
    /// allowed) and `CONVO_MAX_CONNECTIONS` when set; the cap lowered to
    /// leave room within the open-file limit.
    pub fn from_env() -> Limits {
        let mut l = Limits::default();
        if let Some(secs) = env_number("CONVO_HEADER_TIMEOUT_SECS").filter(|s| *s > 0.0) {
            l.header_timeout = Duration::from_secs_f64(secs);
        }
        if let Some(n) = env_number("CONVO_MAX_CONNECTIONS").filter(|n| *n >= 1.0) {
            l.max_connections = n as usize;
        }
        if let Some(files) = open_file_limit() {
            // Room for the store, its WAL, the upstream connections, logs.
            l.max_connections = l.max_connections.min(files.saturating_sub(64).max(16));
        }
        l
    }
}

fn env_number(name: &str) -> Option<f64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// The soft limit on open files (`Max open files` of /proc/self/limits).
fn open_file_limit() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Serves `app` on `listener` until `shutdown` resolves, then finishes the
/// requests in flight; with [`Limits::from_env`].
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, shutdown, Limits::from_env()).await
}

/// [`serve_router`] with the given limits.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    limits: Limits,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    // Connections watch `stop` (graceful shutdown) and hold `open` (the
    // loop waits for every clone to go).
    let (stop, stopped) = watch::channel(false);
    let (open, all_closed) = watch::channel(());
    let mut shutdown = pin!(shutdown);
    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => match s {
                Ok(s) => s,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let tcp = tokio::select! {
            r = listener.accept() => match r {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(&e).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // No Nagle: a streamed chunk (SSE, the proxy) goes out when
        // written, not after the peer's delayed ACK (~40 ms).
        let _ = tcp.set_nodelay(true);
        let conn = http
            .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app.clone()))
            .with_upgrades();
        let mut stopped = stopped.clone();
        let open = open.subscribe();
        tokio::spawn(async move {
            let _slot = slot;
            let _open = open;
            let mut conn = pin!(conn);
            let stop = tokio::select! {
                _ = conn.as_mut() => None,
                r = stopped.wait_for(|s| *s) => Some(r.is_ok()),
            };
            if let Some(stop) = stop {
                // Finish the request in flight, then close.
                if stop {
                    conn.as_mut().graceful_shutdown();
                }
                let _ = conn.as_mut().await;
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    drop(all_closed);
    open.closed().await;
    Ok(())
}

/// After a failed accept: a connection that went away is nothing; out of
/// file descriptors (or another resource) waits a moment before the next
/// accept, as axum and hyper do.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
}
