//! `convo serve`: the HTTP JSON API over the store (`/api/v1`), its OpenAPI
//! document (`/openapi.json`), the Server-Sent Events stream of new nodes
//! (`/api/v1/events`), the web view (`/`) and the OTLP/HTTP receiver
//! (`/v1/traces`, `/v1/logs`: [`otlp`]).
//!
//! [`launch`] is the one assembly of `convo serve`, `convo proxy` and
//! `convo otel`: it is started from a listener the caller binds and a
//! [`Shutdown`] (as atuin's server is), so tests bind port 0 and stop it
//! when they like; shutdown is graceful: the listener closes, in-flight
//! requests (and the store writes they started on blocking threads)
//! finish, the records still queued are written.
//!
//! Other surfaces (the recording proxy, the agent harness) mount on the
//! same server by merging their own [`axum::Router`] into [`router`]'s.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod appends;
mod launch;
mod markdown;
pub mod openapi;
pub mod otlp;
pub mod web;

use convo_runtime::events;

use axum::Router;
use axum::routing::get;
use std::future::Future;
use std::net::SocketAddr;

pub use convo_runtime::StorePool;
pub use launch::{Shutdown, Stopped, Surface, Surfaces, check_listen, launch};

/// What the server shares between requests.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Store connections.
    pub pool: StorePool,
    /// The new-node broadcaster.
    pub hub: events::Hub,
    /// Group commit for appends.
    pub writer: appends::Writer,
    /// The recording proxy mounted beside the API (`convo serve
    /// --upstream`), which the web view's re-run sends calls through.
    pub upstream: Option<Upstream>,
    /// Where `convo test` keeps its runs' reports (`$CONVO_HOME/test-runs`),
    /// which the web view lists at `/tests`; `None`: no such page.
    pub test_runs: Option<std::path::PathBuf>,
}

/// The recording proxy's routes, for calls the server makes itself (the
/// web view's re-run: [`web`]), and what they reach.
#[derive(Clone)]
pub struct Upstream {
    /// The proxy's routes (`/s/{session}/{branch}/v1/…`), called in
    /// process: the call is recorded as any client's is.
    pub routes: Router,
    /// Where calls go, for the page (`https://api.openai.com`, a replay).
    pub describe: String,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("describe", &self.describe)
            .finish_non_exhaustive()
    }
}

pub use convo_runtime::{Config, guarded, is_loopback};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store did not open.
    #[error(transparent)]
    Store(#[from] convo_store::StoreError),
    /// The listener failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    /// Listening off loopback without a token.
    #[error(
        "refusing to listen on {0} without a token: anyone who can reach it could read and write the store"
    )]
    NeedToken(SocketAddr),
    /// The price table `CONVO_PRICES` names did not load.
    #[error("{0}")]
    Prices(String),
    /// The recording proxy did not start.
    #[error(transparent)]
    Proxy(#[from] convo_proxy::ProxyError),
}

impl ServeError {
    /// What kind of failure this is ([`convo_store::ErrorKind`]).
    pub fn kind(&self) -> convo_store::ErrorKind {
        use convo_store::ErrorKind;
        match self {
            ServeError::Store(e) => e.kind(),
            ServeError::NeedToken(_) => ErrorKind::Invalid,
            ServeError::Prices(_) => ErrorKind::Invalid,
            ServeError::Io(_) => ErrorKind::Failed,
            ServeError::Proxy(e) => e.kind(),
        }
    }
}

/// Store connections the pool keeps open: more than the requests a busy
/// server runs at once (64 keep-alive clients over two servers measured
/// ~100 connection opens, each a new PostgreSQL backend, with 16).
const POOL_IDLE: usize = 48;

/// The shared state for a config: a store pool, the event hub and the
/// append writer. Opens connections: call it from a plain thread (or
/// `spawn_blocking`), never from a runtime worker.
pub fn state(config: &Config) -> Result<AppState, ServeError> {
    web::check_prices().map_err(ServeError::Prices)?;
    let pool = StorePool::open(&config.store_url, POOL_IDLE)?;
    let hub = events::Hub::start(&config.store_url)?;
    let writer = appends::Writer::start(&pool, Some(hub.clone()))?;
    Ok(AppState {
        pool,
        hub,
        writer,
        upstream: None,
        test_runs: None,
    })
}

/// The API, the OpenAPI document and the web view, with the guards.
/// `extra` (the proxy's routes, for API clients) gets the same guards as
/// routes for API clients ([`security::Guard::api_clients`]): any content
/// type, the token also as `x-api-key`.
pub fn router(state: AppState, config: &Config, extra: Option<Router>) -> Router {
    let app = api_routes()
        .merge(web::routes())
        .merge(otlp::routes(config.body_limit))
        .route("/openapi.json", get(openapi::document))
        .method_not_allowed_fallback(api::method_not_allowed)
        .with_state(state)
        .fallback(api::fallback);
    let app = guarded(app, config, false);
    match extra {
        // Layers wrap the routes they are given: `extra` is merged after,
        // with its own.
        Some(extra) => app.merge(guarded(extra, config, true)),
        None => app,
    }
}

/// Every `/api/v1` route (the OpenAPI document lists the same set; a test
/// checks that they agree).
pub fn api_routes() -> Router<AppState> {
    use axum::routing::post;
    Router::new()
        .route(
            "/api/v1/sessions",
            get(api::list_sessions).post(api::create_session),
        )
        .route(
            "/api/v1/sessions/{session}",
            get(api::get_session).patch(api::retitle),
        )
        .route(
            "/api/v1/sessions/{session}/branches",
            get(api::list_branches),
        )
        .route(
            "/api/v1/sessions/{session}/branches/{branch}/timeline",
            get(api::timeline),
        )
        .route(
            "/api/v1/sessions/{session}/branches/{branch}/nodes",
            post(api::append),
        )
        .route(
            "/api/v1/sessions/{session}/branches/{branch}/state",
            get(api::state_list),
        )
        .route(
            "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
            get(api::state_get)
                .put(api::state_put)
                .delete(api::state_delete),
        )
        .route("/api/v1/sessions/{session}/fork", post(api::fork))
        .route("/api/v1/sessions/{session}/promote", post(api::promote))
        .route("/api/v1/sessions/{session}/diff", get(api::diff))
        .route("/api/v1/sessions/{session}/export", get(api::export))
        .route("/api/v1/nodes/{hash}", get(api::get_node))
        .route("/api/v1/nodes/{hash}/payload", get(api::node_payload))
        .route("/api/v1/verify", get(api::verify))
        .route("/api/v1/search", get(api::search))
        .route("/api/v1/import", post(api::import))
        .route("/api/v1/events", get(api::events))
        .route("/api/v1/health", get(api::health))
}

pub use convo_runtime::serve_router;

/// What else a server serves.
#[derive(Debug, Default)]
pub enum Mount {
    /// The API, the OpenAPI document and the web view only.
    #[default]
    None,
    /// Those, and these routes (the proxy's, the harness's) behind the same
    /// guards.
    Beside(Router),
    /// These routes instead (already guarded: `convo proxy`).
    Alone(Router),
}

/// A server whose store connections are open, ready to serve.
#[derive(Debug)]
pub struct Server {
    /// What its requests share.
    pub state: AppState,
    config: Config,
}

impl Server {
    /// Opens the store pool, the event hub and the writer for `config`.
    /// Blocking: call it from a plain thread (or `spawn_blocking`).
    pub fn open(config: Config) -> Result<Server, ServeError> {
        let state = state(&config)?;
        Ok(Server { state, config })
    }

    /// Serves on `listener` until `shutdown` resolves, then ends the event
    /// streams and finishes the requests in flight. Refuses a listener off
    /// loopback without a token.
    pub async fn serve(
        mut self,
        listener: tokio::net::TcpListener,
        mount: Mount,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let addr = listener.local_addr()?;
        check_listen(&addr, &self.config)?;
        // The listen address is an allowed Host (besides loopback names).
        self.config.listen.get_or_insert(addr);
        let hub = self.state.hub.clone();
        let held = self.state.clone();
        let app = match mount {
            Mount::None => router(self.state, &self.config, None),
            Mount::Beside(extra) => router(self.state, &self.config, Some(extra)),
            Mount::Alone(app) => app,
        };
        let closing = hub.clone();
        let shutdown = async move {
            shutdown.await;
            // Event streams never end on their own: end them, so the
            // connections they hold let the graceful shutdown finish.
            closing.stop();
        };
        let res = serve_router(listener, app, shutdown).await;
        // OTLP exports held for their messages are written before the end.
        otlp::flush_held(&held).await;
        hub.stop();
        Ok(res?)
    }
}
