//! The LLM protocols without HTTP: what `convo proxy` and the harness
//! share. Which API a call is ([`api`]), what a request body says
//! ([`body`]: the conversation, its threading keys, read once), filtering
//! a stream for the client ([`sse`]), recording an exchange as nodes
//! ([`record`]), threading calls into conversations ([`thread`]) and the
//! one replay matcher ([`replay`]). The HTTP around them is the proxy's.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod api;
pub mod body;
pub mod ledger;
pub mod otel;
pub mod record;
pub mod recording;
pub mod replay;
pub mod sse;
pub mod thread;
pub mod wire;
