//! End-to-end tests: the real `convo` binary in a temporary home.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod serve_util;
mod test_agents;
mod test_backends;
mod test_cli;
mod test_concurrency;
mod test_convo_test;
mod test_crash;
mod test_credentials;
mod test_debugger;
mod test_formats;
mod test_git;
mod test_harness;
mod test_history;
mod test_hostile;
mod test_mcp;
mod test_otel;
mod test_outage;
mod test_search;
mod test_security;
mod test_serve;
mod test_workspace;
