//! What every convo server shares, written once: `convo serve`, `convo
//! proxy` and the agent harness's embedded servers sit side by side on top
//! of this crate, and none of them depends on another.
//!
//! - [`pool`]: the store pool (every store call on a blocking thread; a
//!   connection that lost its database is dropped, with every idle one
//!   opened before it).
//! - [`writer`]: the one group-commit writer (concurrent requests share a
//!   transaction; a failing batch is retried request by request; the
//!   connection is reopened after the database went away; WAL checkpoints
//!   off the commit path).
//! - [`reconnect`]: a store connection for long-lived followers that comes
//!   back after the database does.
//! - [`events`]: the hub that broadcasts new nodes, and the gap-free
//!   subscriber pump behind `/api/v1/events`.
//! - [`forward`]: the one upstream forwarder (HTTP client and header
//!   policy) of the model proxy and the harness's inference calls.
//! - [`security`]: the request guards (token, CSRF, hardening headers,
//!   request log, path check).
//! - [`error`]: the error document as an HTTP response (with `Retry-After`
//!   when the store is unavailable).
//! - [`wire`]: the store's rows in the wire format ([`convo_api`]).
//! - [`Config`]: how a server listens (store, token, body limit, logs).
//! - [`listen`]: a router served until a shutdown future resolves, with
//!   a header-read (and idle) timeout and a cap on connections.
//! - [`now_ms`]: the clock; [`redact_url`]: credentials out of URLs.
//!
//! The store API is synchronous (rusqlite; `tokio-postgres` driven by the
//! PostgreSQL backend's own runtime, which must never block a runtime
//! worker thread): everything here calls it from plain or blocking threads.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod error;
pub mod events;
pub mod forward;
pub mod listen;
pub mod pool;
pub mod reconnect;
pub mod security;
pub mod turns;
pub mod wire;
pub mod writer;

pub use config::{Config, guarded, is_loopback};
pub use convo_core::url::{public as public_url, redact as redact_url};
pub use events::Hub;
pub use pool::StorePool;
pub use reconnect::Reconnecting;
pub use writer::Writer;

/// Milliseconds since the Unix epoch, now: the one clock of every server
/// and command (the core never reads a clock; callers pass the time in).
pub fn now_ms() -> convo_core::Millis {
    jiff::Timestamp::now().as_millisecond()
}

pub use listen::{Limits, serve_router};

/// Headers that name a connection, not a message (RFC 9110 §7.6.1, plus
/// `host` and `content-length`, which the sending client sets again):
/// never passed on by a relay (the model proxy, the MCP proxy).
pub const HOP_BY_HOP: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
];
