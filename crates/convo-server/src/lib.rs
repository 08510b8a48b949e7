//! `convo serve`: the HTTP JSON API over the store (`/api/v1`), its OpenAPI
//! document (`/openapi.json`), the Server-Sent Events stream of new nodes
//! (`/api/v1/events`), the web view (`/`) and the OTLP/HTTP receiver
//! (`/v1/traces`, `/v1/logs`: [`otlp`]).
//!
//! The server is started from a listener the caller binds and a shutdown
//! future (as atuin's server is), so tests bind port 0 and stop it when
//! they like; shutdown is graceful: the listener closes, in-flight requests
//! (and the store writes they started on blocking threads) finish.
//!
//! Other surfaces (the recording proxy, the agent harness) mount on the
//! same server by merging their own [`axum::Router`] into [`router`]'s.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod diff;
pub mod events;
mod markdown;
pub mod openapi;
pub mod otlp;
pub mod pool;
pub mod security;
pub mod web;
pub mod writer;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

pub use pool::StorePool;

/// What the server shares between requests.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Store connections.
    pub pool: StorePool,
    /// The new-node broadcaster.
    pub hub: events::Hub,
    /// Group commit for appends.
    pub writer: writer::Writer,
}

/// How to run the server.
#[derive(Clone, Debug)]
pub struct Config {
    /// The store URL (`sqlite:///…`, `postgres://…`).
    pub store_url: String,
    /// Bearer token required on every route, when set.
    pub token: Option<String>,
    /// Largest request body accepted, in bytes.
    pub body_limit: usize,
    /// Print one JSON log line per request on stderr.
    pub log_requests: bool,
    /// The address the listener is bound to: its IP is an allowed `Host`
    /// (besides loopback names).
    pub listen: Option<SocketAddr>,
    /// More `Host` names to answer to (`--allow-host`: a reverse proxy's).
    pub allow_hosts: Vec<String>,
}

impl Config {
    /// Defaults for a store URL: no token, 64 MiB bodies, request logs on.
    pub fn new(store_url: impl Into<String>) -> Self {
        Config {
            store_url: store_url.into(),
            token: None,
            body_limit: 64 * 1024 * 1024,
            log_requests: true,
            listen: None,
            allow_hosts: Vec::new(),
        }
    }

    /// The guards' settings for this config.
    pub fn guard(&self) -> security::Guard {
        security::Guard {
            token: self.token.as_deref().map(Arc::from),
            log: self.log_requests,
            hosts: security::Hosts::new(self.listen, &self.allow_hosts),
            api_clients: false,
        }
    }
}

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
}

/// Whether an address is loopback only.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Store connections the pool keeps open: more than the requests a busy
/// server runs at once (64 keep-alive clients over two servers measured
/// ~100 connection opens, each a new PostgreSQL backend, with 16).
const POOL_IDLE: usize = 48;

/// The shared state for a config: a store pool and the event hub.
pub fn state(config: &Config) -> Result<AppState, ServeError> {
    let pool = StorePool::open(&config.store_url, POOL_IDLE)?;
    let hub = events::Hub::start(&config.store_url)?;
    let writer = writer::Writer::start(&config.store_url)?;
    Ok(AppState { pool, hub, writer })
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

/// `routes` behind the guards (innermost first): the body limit, the path
/// check, then Host, Origin, token, CSRF, headers and the request log
/// ([`security::guard`]); `api_clients` for routes SDKs call.
pub fn guarded(routes: Router, config: &Config, api_clients: bool) -> Router {
    let guard = security::Guard {
        api_clients,
        ..config.guard()
    };
    routes
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(axum::middleware::from_fn(security::paths))
        .layer(axum::middleware::from_fn_with_state(guard, security::guard))
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

/// Serves `app` on `listener` until `shutdown` resolves, then finishes the
/// requests in flight.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    // No Nagle: a streamed chunk (SSE, the proxy) goes out when written,
    // not after the peer's delayed ACK (~40 ms).
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// Starts the whole server on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = listener.local_addr()?;
    if !is_loopback(&addr) && config.token.is_none() {
        return Err(ServeError::NeedToken(addr));
    }
    let mut config = config;
    config.listen = Some(addr);
    let c2 = config.clone();
    let st = tokio::task::spawn_blocking(move || state(&c2))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    let hub = st.hub.clone();
    let app = router(st, &config, None);
    let closing = hub.clone();
    let shutdown = async move {
        shutdown.await;
        // Event streams never end on their own: end them, so the
        // connections they hold let the graceful shutdown finish.
        closing.stop();
    };
    let res = serve_router(listener, app, shutdown).await;
    hub.stop();
    Ok(res?)
}
