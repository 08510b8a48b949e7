//! `convo completions` and `convo man`: generated from the same clap
//! definitions as the parser, so they cannot drift from it.

use super::{CmdResult, CommandError};
use crate::cli::Cli;
use clap::{Args, CommandFactory, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Print a shell completion script for convo.
///
/// Writes the script to standard output; load it from your shell's startup
/// file. It completes commands, options and their fixed values.
///
/// Examples:
///   convo completions bash > ~/.local/share/bash-completion/completions/convo
///   convo completions zsh > "${fpath[1]}/_convo"
///   convo completions fish > ~/.config/fish/completions/convo.fish
///   convo completions powershell >> $PROFILE
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: Shell,
}

/// A shell clap_complete writes for.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
    Elvish,
}

/// Print convo's manual page, or write one page per command.
///
/// Without --output, prints the roff source of the page of COMMAND (the
/// top page without one) to standard output; view it with `man -l -`.
/// With --output DIR, writes convo.1 and one page per command and
/// subcommand (convo-session-list.1, …) into DIR, creating it.
///
/// Examples:
///   convo man | man -l -
///   convo man session list | man -l -
///   convo man -o /usr/local/share/man/man1
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ManArgs {
    /// The command whose page to print, e.g. `session list`
    pub command: Vec<String>,
    /// Write every page into this directory instead
    #[arg(long, short = 'o', value_name = "DIR", conflicts_with = "command")]
    pub output: Option<PathBuf>,
}

pub fn completions(a: CompletionsArgs) -> CmdResult {
    use clap_complete::Shell as S;
    let shell = match a.shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
        Shell::Powershell => S::PowerShell,
        Shell::Elvish => S::Elvish,
    };
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "convo", &mut buf);
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

pub fn man(a: ManArgs) -> CmdResult {
    let mut cmd = Cli::command();
    cmd.build();
    if let Some(dir) = &a.output {
        std::fs::create_dir_all(dir)
            .map_err(|e| CommandError::user(format!("cannot create {}: {e}", dir.display())))?;
        let mut n = 0;
        write_pages(&cmd, dir, &mut n)?;
        eprintln!("wrote {n} manual pages to {}", dir.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut page = cmd;
    let mut path = vec!["convo".to_owned()];
    for name in &a.command {
        let sub = page.find_subcommand(name).cloned().ok_or_else(|| {
            CommandError::user(format!(
                "`{}` has no command `{}`",
                path.join(" "),
                convo_core::text::visible(name, convo_core::text::Newlines::Escape)
            ))
            .with_hint("see `convo help` for the commands")
        })?;
        path.push(sub.get_name().to_owned());
        page = sub;
    }
    let page = page.name(path.join("-"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(page).render(&mut buf)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `cmd`'s page and its subcommands' pages (named `convo-a-b.1`).
fn write_pages(cmd: &clap::Command, dir: &std::path::Path, n: &mut usize) -> CmdResult<()> {
    let name = cmd.get_name().to_owned();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    let file = dir.join(format!("{name}.1"));
    std::fs::write(&file, buf)
        .map_err(|e| CommandError::user(format!("cannot write {}: {e}", file.display())))?;
    *n += 1;
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let sub = sub.clone().name(format!("{name}-{}", sub.get_name()));
        write_pages(&sub, dir, n)?;
    }
    Ok(())
}
