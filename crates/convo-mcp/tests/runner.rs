//! convo-mcp's library tests: one binary, one module per subject.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod test_record;
