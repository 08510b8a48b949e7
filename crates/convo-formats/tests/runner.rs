//! Integration tests of convo-formats: one binary, modules inside.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod test_convo;
mod test_hostile;
mod test_imports;
mod test_props;
