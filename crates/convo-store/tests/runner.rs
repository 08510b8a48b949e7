//! The store's integration tests: the backend contract run against every
//! backend, tamper tests and property tests of timelines, each on SQLite and
//! on PostgreSQL (skipped loudly without `CONVO_TEST_PG`, required in CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod commit;
mod contract;
mod open;
mod pipeline;
mod props;
mod tamper;
