//! The one assembly of a convo server: `convo serve`, `convo proxy` and
//! `convo otel` all run [`launch`], which
//!
//! 1. refuses a listener off loopback without a token ([`check_listen`],
//!    the one place that rule is decided) and makes the listen address an
//!    allowed `Host`;
//! 2. opens the store (pool, event hub, append writer) off the runtime's
//!    threads;
//! 3. starts the recording proxy when asked (an upstream or a replay),
//!    mounting it beside the API (`serve`), alone (`proxy`), or not at all
//!    (`otel`: the OTLP receiver alone);
//! 4. serves until [`Shutdown::stop`], finishing the requests in flight;
//! 5. writes the records still queued for the store, woken when the last
//!    one is written ([`convo_proxy::Proxy::recordings_written`]), unless
//!    [`Shutdown::give_up`] comes first;
//! 6. journals a replay's counts (`Proxy::note_replay`);
//! 7. folds the store's write-ahead log into the database, so a graceful
//!    stop leaves none behind (not after giving up on records: the store
//!    is held elsewhere, and folding would wait for it too).

use crate::{Config, Mount, ServeError, Server, Upstream};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

/// Which routes a launched server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// `convo serve`: the API, the web view, the OTLP receiver, and the
    /// recording proxy beside them when it has an upstream.
    Serve,
    /// `convo proxy`: the recording proxy's routes alone.
    Proxy,
    /// `convo otel`: the OTLP receiver alone.
    Otel,
}

impl Surface {
    /// The command's name, as the lines it prints say it.
    pub fn name(self) -> &'static str {
        match self {
            Surface::Serve => "serve",
            Surface::Proxy => "proxy",
            Surface::Otel => "otel",
        }
    }
}

/// What to serve, and on which store.
#[derive(Debug)]
pub struct Surfaces {
    /// The store, token, allowed hosts and body limit every route shares.
    pub config: Config,
    /// Which routes.
    pub surface: Surface,
    /// The recording proxy (`--upstream`, `--replay`): `None` serves none.
    pub proxy: Option<convo_proxy::ProxyConfig>,
    /// Print what a user of the command sees: the URL on stdout (its first
    /// line, for scripts), the store and the replay on stderr.
    pub announce: bool,
    /// Where `convo test` keeps its runs (the web view's `/tests`).
    pub test_runs: Option<std::path::PathBuf>,
}

impl Surfaces {
    /// `surface` on `config`'s store, with no proxy, printing nothing.
    pub fn new(config: Config, surface: Surface) -> Surfaces {
        Surfaces {
            config,
            surface,
            proxy: None,
            announce: false,
            test_runs: None,
        }
    }
}

type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// When a launched server stops.
pub struct Shutdown {
    /// Stops accepting connections; the requests in flight finish.
    pub stop: Signal,
    /// Once stopped, gives up on the records still waiting for the store
    /// (they are counted in [`Stopped::unrecorded`]).
    pub give_up: Signal,
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown").finish_non_exhaustive()
    }
}

impl Shutdown {
    /// Stops when `stop` resolves, and waits for every queued record.
    pub fn on(stop: impl Future<Output = ()> + Send + 'static) -> Shutdown {
        Shutdown {
            stop: Box::pin(stop),
            give_up: Box::pin(std::future::pending()),
        }
    }

    /// What a command does: stops on Ctrl-C or SIGTERM (saying so as
    /// `convo NAME`), and gives up on the queued records on a second Ctrl-C.
    pub fn signals(name: &'static str) -> Shutdown {
        let stop = async move {
            let ctrl_c = tokio::signal::ctrl_c();
            #[cfg(unix)]
            {
                use tokio::signal::unix::{SignalKind, signal};
                let mut term = signal(SignalKind::terminate()).ok();
                let term = async {
                    match term.as_mut() {
                        Some(t) => {
                            t.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                tokio::select! {
                    _ = ctrl_c => {}
                    () = term => {}
                }
            }
            #[cfg(not(unix))]
            let _ = ctrl_c.await;
            eprintln!("convo {name}: shutting down; finishing requests in flight");
        };
        let give_up = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        Shutdown {
            stop: Box::pin(stop),
            give_up: Box::pin(give_up),
        }
    }
}

/// What a server that stopped leaves to say.
#[derive(Debug, Default)]
pub struct Stopped {
    /// The replay's fidelity line, when it replayed.
    pub replay_summary: Option<String>,
    /// The replay report (`docs/JSON.md`), when it replayed.
    pub replay_report: Option<serde_json::Value>,
    /// Calls answered whose records were given up at shutdown.
    pub unrecorded: usize,
    /// What went wrong after the stop and is worth saying (the replay's
    /// counts not journaled).
    pub warnings: Vec<String>,
}

/// Refuses to listen on `addr` off loopback without a token: anyone who
/// can reach it could read and write the store. The one check every
/// surface goes through.
pub fn check_listen(addr: &SocketAddr, config: &Config) -> Result<(), ServeError> {
    if !crate::is_loopback(addr) && config.token.as_deref().is_none_or(str::is_empty) {
        return Err(ServeError::NeedToken(*addr));
    }
    Ok(())
}

/// Serves `surfaces` on `listener` until `shutdown` says stop (see the
/// module's documentation for the steps).
pub async fn launch(
    listener: tokio::net::TcpListener,
    surfaces: Surfaces,
    shutdown: Shutdown,
) -> Result<Stopped, ServeError> {
    let Surfaces {
        mut config,
        surface,
        proxy,
        announce,
        test_runs,
    } = surfaces;
    let name = surface.name();
    let bound = listener.local_addr()?;
    check_listen(&bound, &config)?;
    config.token = config.token.filter(|t| !t.is_empty());
    config.listen = Some(bound);
    let opening = config.clone();
    let mut server = off_runtime(move || Server::open(opening)).await??;
    server.state.test_runs = test_runs;
    let proxy = match proxy {
        Some(pc) => Some(start_proxy(&server, pc, &config).await?),
        None => None,
    };
    if let Some((p, describe)) = &proxy {
        if announce && p.replay_len() > 0 {
            eprintln!("convo {name}: replaying {} recorded calls", p.replay_len());
        }
        if surface == Surface::Serve {
            // The web view's re-run sends calls through the same proxy.
            server.state.upstream = Some(Upstream {
                routes: convo_proxy::router(p.clone()),
                describe: describe.clone(),
            });
        }
    }
    let proxy = proxy.map(|(p, _)| p);
    let mount = match (&proxy, surface) {
        (_, Surface::Otel) => Mount::Alone(crate::otlp::standalone(server.state.clone(), &config)),
        (Some(p), Surface::Proxy) => Mount::Alone(convo_proxy::standalone(p.clone(), &config)),
        (Some(p), Surface::Serve) => Mount::Beside(convo_proxy::router(p.clone())),
        (None, _) => Mount::None,
    };
    if announce {
        let store = convo_runtime::redact_url(&config.store_url);
        eprintln!("convo {name}: store {store}");
        // The first stdout line is the URL, for scripts and tests.
        println!("http://{bound}/");
    }
    let served = server.serve(listener, mount, shutdown.stop).await;
    let mut stopped = Stopped::default();
    if let Some(p) = &proxy {
        stopped.unrecorded = write_queued(p, name, announce, shutdown.give_up).await;
        let noted = match stopped.unrecorded {
            0 => p.note_replay().await.map_err(|e| e.to_string()),
            // The store is held elsewhere: journaling would wait for it.
            _ => Err("the store is held by another process".to_owned()),
        };
        if let (Err(e), Some(_)) = (noted, p.replay_summary()) {
            let e = format!("the replay's counts could not be journaled: {e}");
            stopped.warnings.push(e);
        }
        stopped.replay_summary = p.replay_summary();
        stopped.replay_report = p.replay_report();
    }
    drop(proxy);
    // Records given up on mean the store is held elsewhere: folding
    // would wait for it too.
    if stopped.unrecorded == 0 {
        fold_log(config.store_url).await;
    }
    served.map(|()| stopped)
}

/// Starts the recording proxy on the server's store, and says where its
/// calls go (for the web view's re-run).
async fn start_proxy(
    server: &Server,
    mut pc: convo_proxy::ProxyConfig,
    config: &Config,
) -> Result<(convo_proxy::Proxy, String), ServeError> {
    // Virtual keys: a client's API key is convo's token, checked by the
    // guard and never sent upstream.
    pc.virtual_keys = config.token.is_some();
    let mut parts: Vec<String> = Vec::new();
    for url in [&pc.upstream, &pc.anthropic_upstream].into_iter().flatten() {
        parts.push(convo_runtime::redact_url(url));
    }
    if let Some(r) = &pc.replay {
        parts.push(format!(
            "the replay of {}",
            r.whole.as_deref().unwrap_or(&r.session)
        ));
    }
    let state = &server.state;
    let p = convo_proxy::Proxy::start(pc, state.pool.clone(), Some(state.hub.clone())).await?;
    Ok((p, parts.join(" and ")))
}

/// Waits for the records still queued for the store (a locked or slow
/// store), woken when the last is written, unless `give_up` comes first;
/// how many were given up.
async fn write_queued(
    p: &convo_proxy::Proxy,
    name: &str,
    announce: bool,
    give_up: Signal,
) -> usize {
    let queued = p.recordings_queued();
    if queued == 0 {
        return 0;
    }
    if announce {
        eprintln!(
            "convo {name}: writing {queued} queued record(s); Ctrl-C again to give up on them"
        );
    }
    tokio::select! {
        () = p.recordings_written() => 0,
        () = give_up => {
            let left = p.recordings_queued();
            if announce {
                eprintln!("convo {name}: {left} answered call(s) not recorded");
            }
            left
        }
    }
}

/// A graceful stop leaves no write-ahead log behind (best effort: a store
/// another process reads keeps it until that one is done).
async fn fold_log(store_url: String) {
    let _ = off_runtime(move || {
        if let Ok(mut store) = convo_store::Store::open(&store_url) {
            let _ = store.fold_log();
        }
    })
    .await;
}

/// Runs `f` on a thread of its own, outside any runtime (the store's
/// blocking clients must never run on a runtime's threads).
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ServeError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("convo-open".into())
        .spawn(move || {
            let _ = tx.send(f());
        })?;
    rx.await
        .map_err(|_| ServeError::Io(std::io::Error::other("the store thread failed")))
}
