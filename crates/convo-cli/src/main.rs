//! `convo`: the command-line interface to the ledger.
//!
//! This crate is the only place that reads the environment, the home
//! directory, the clock and the terminal; `convo-core` and `convo-store`
//! take all of that as arguments. One file per command under `commands/`.

mod cli;
mod commands;
mod output;
mod ui;

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = <cli::Cli as clap::Parser>::parse();
    ui::init(&args.color, args.no_pager);
    // A last line of defence: a `println!` that meets a closed pipe panics
    // with this message; end as any closed pipe does, without a backtrace.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") {
            std::process::exit(i32::from(ui::closed_status()));
        }
        default_hook(info);
    }));
    match commands::run(args) {
        Ok(code) => code,
        Err(e) => {
            e.report();
            ExitCode::from(e.exit_code())
        }
    }
}
