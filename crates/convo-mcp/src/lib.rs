//! MCP (the Model Context Protocol) on the timeline.
//!
//! - [`message`]: one JSON-RPC message read once (request, notification,
//!   response; its method and id).
//! - [`record`]: every relayed message as nodes on a session's timeline,
//!   written on a thread of its own.
//! - [`wrap`]: `convo mcp wrap -- CMD…`, a stdio server run as a child,
//!   its lines relayed both ways byte for byte and recorded.
//! - [`replay`]: answering a client from that recording, without the
//!   server, through the one replay matcher of [`convo_llm::replay`].
//! - [`serve`]: `convo mcp serve`, convo's history as an MCP server.
//! - [`http`]: the streamable HTTP transport of both (`convo mcp proxy`,
//!   `convo mcp serve --listen`).
//!
//! The relay is written by hand rather than with an MCP SDK (`rmcp`): an
//! SDK parses and re-serializes every message, while the relay must pass
//! each line through unchanged and only read a copy; MCP's stdio framing
//! is one JSON message per line, which needs no more than a line reader.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod http;
pub mod message;
pub mod record;
pub mod replay;
pub mod serve;
pub mod wrap;

use convo_store::{ErrorKind, StoreError};

/// Why an MCP command failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The server program could not be started.
    #[error("cannot start the MCP server `{program}`: {source}")]
    Spawn {
        /// The program as given.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing a stream failed.
    #[error("MCP relay: {0}")]
    Io(#[from] std::io::Error),
    /// The store refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Bad input (no command, a recording with no MCP calls).
    #[error("{0}")]
    Invalid(String),
}

impl McpError {
    /// The kind every surface maps to its convention.
    pub fn kind(&self) -> ErrorKind {
        match self {
            McpError::Store(e) => e.kind(),
            McpError::Invalid(_) => ErrorKind::Invalid,
            McpError::Spawn { .. } | McpError::Io(_) => ErrorKind::Failed,
        }
    }
}
