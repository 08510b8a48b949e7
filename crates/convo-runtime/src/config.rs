//! How a server listens: what `convo serve`, `convo proxy` and embedded
//! servers configure alike.

use crate::security::{self, Guard};
use axum::Router;
use axum::extract::DefaultBodyLimit;
use std::net::SocketAddr;
use std::sync::Arc;

/// How to run a server.
#[derive(Clone)]
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

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("store_url", &crate::redact_url(&self.store_url))
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("body_limit", &self.body_limit)
            .field("log_requests", &self.log_requests)
            .field("listen", &self.listen)
            .field("allow_hosts", &self.allow_hosts)
            .finish()
    }
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

    /// The request guards this config asks for ([`crate::security`]).
    pub fn guard(&self) -> Guard {
        Guard {
            token: self.token.as_deref().map(Arc::from),
            log: self.log_requests,
            hosts: security::Hosts::new(self.listen, &self.allow_hosts),
            api_clients: false,
        }
    }
}

/// `routes` behind the guards (innermost first): the body limit, the path
/// check, then Host, Origin, token, CSRF, headers and the request log
/// ([`security::guard`]); `api_clients` for routes SDKs call
/// ([`Guard::api_clients`]: any content type, the token also as
/// `x-api-key`).
pub fn guarded(routes: Router, config: &Config, api_clients: bool) -> Router {
    let guard = Guard {
        api_clients,
        ..config.guard()
    };
    routes
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(axum::middleware::from_fn(security::paths))
        .layer(axum::middleware::from_fn_with_state(guard, security::guard))
}

/// Whether an address is loopback only.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}
