//! The agent harness: what `convo run`, `convo chat` and `convo replay` do.
//!
//! An agent is any HTTP server that follows the contract in
//! `docs/AGENTS.md`: each user input is one `POST` (`/invoke` on a child
//! process's port) with the input, the session, the branch, the submission
//! and the URLs of its services; it answers `{"output": TEXT}` or plain
//! text. The harness records that exchange as one turn of the timeline:
//!
//! ```text
//! invoke (user → agent)                      the input
//!   request (agent → kv|infer) #1            each service call the agent makes…
//!   response (kv|infer → agent) #1           …and its answer, numbered by sequence
//!   …
//! complete (agent → user)                    the output (or the failure), carrying the state root
//! ```
//!
//! The services live on a loopback server the harness starts
//! ([`services`]): key-value state backed by the store's versioned state
//! (writes move the timeline's working state root, so the `complete`
//! carries it and a fork starts from it), and inference forwarded to an
//! upstream model server (or, in a replay, answered from the recording).
//! Every URL carries a random token for the turn (or for the child
//! process, whose environment cannot change between turns), so concurrent
//! sessions never mix and a call after the turn ended is refused.
//!
//! Nothing here reads the environment or the terminal: the CLI passes the
//! store, the agent and the options in.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod agent;
mod error;
mod harness;
mod http;
mod lock;
mod replay;
pub mod services;

pub use agent::{AgentSpec, Dialect};
pub use error::HarnessError;
pub use harness::{Failure, Harness, Options, TurnReport};
pub use lock::{OpenTurn, TimelineLock, TurnLock, guard_timeline, settle_interrupted};
pub use replay::{Divergence, ReplayOptions, ReplayReport, ReplayTurn, ToleratedCall};

/// The harness's result type.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

pub(crate) use convo_runtime::now_ms;
