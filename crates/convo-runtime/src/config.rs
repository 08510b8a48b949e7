//! How a server listens: what `convo serve`, `convo proxy` and embedded
//! servers configure alike.

use crate::security::Guard;
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
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("store_url", &crate::redact_url(&self.store_url))
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("body_limit", &self.body_limit)
            .field("log_requests", &self.log_requests)
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
        }
    }

    /// The request guards this config asks for ([`crate::security`]).
    pub fn guard(&self) -> Guard {
        Guard {
            token: self.token.as_deref().map(Arc::from),
            log: self.log_requests,
        }
    }
}

/// Whether an address is loopback only.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}
