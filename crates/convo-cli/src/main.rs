//! `convo`: the command-line interface to the ledger.
//!
//! This crate is the only place that reads the environment, the home
//! directory, the clock and the terminal; `convo-core` and `convo-store`
//! take all of that as arguments. One file per command under `commands/`.

mod cli;
mod commands;
mod output;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = <cli::Cli as clap::Parser>::parse();
    match commands::run(args) {
        Ok(code) => code,
        Err(e) => {
            e.report();
            ExitCode::from(e.exit_code())
        }
    }
}
