//! Integration tests of convo-llm: one binary, modules inside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod test_agents;
mod test_llm_format;
mod test_otel;
mod test_recording;
mod test_replay;
mod test_store;
