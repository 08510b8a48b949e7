//! The store's integration tests: the backend contract run against every
//! backend, SQLite tamper tests, and property tests of timelines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract;
mod props;
mod tamper;
