//! The server's tests, one binary: the server in process through its one
//! assembly (the flows a user types are the CLI's end-to-end tests).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod inproc;
mod launch;
