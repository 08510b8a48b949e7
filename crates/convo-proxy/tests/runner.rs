//! The proxy's tests, one binary: a scripted upstream (upstream.rs) and
//! the proxy mounted in a real `convo serve` router on port 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod test_conversations;
mod test_live;
mod test_replay;
mod test_robust;
mod test_sdk;
mod test_thread;
mod upstream;
