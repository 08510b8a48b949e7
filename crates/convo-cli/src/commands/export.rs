use super::import::format_error;
use super::{CmdResult, CommandError, Env, branch_name, find_session};
use clap::Args;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Write one timeline of a session as a conversation file.
///
/// Without -o the file goes to standard output (for clog, its chat.jsonl).
/// With -o the file is written whole or not at all (a temporary file
/// renamed into place); for clog, -o names the folder that receives the
/// conversation-{time}-{thread}/ folder with notes.jsonl and chat.jsonl.
/// With --all-branches, every timeline of the session goes into the folder
/// -o names, one file per timeline named after it ({branch}.convo, .json,
/// .jsonl, .md, .html; a folder {branch}/ for clog).
///
/// Examples:
///   convo export Paris --format markdown | less
///   convo export Paris --branch retry --format convo -o retry.convo
///   convo export Paris --format html --all-branches -o paris/
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ExportArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// The timeline to export
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// The format to write
    #[arg(long, value_parser = ["convo", "clog", "session-json", "openai", "markdown", "html"])]
    pub format: String,
    /// Write here instead of standard output
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// Export every timeline of the session into the folder -o names
    #[arg(long, requires = "output", conflicts_with = "branch")]
    pub all_branches: bool,
}

pub fn run(env: &Env, a: ExportArgs) -> CmdResult {
    let branch = branch_name(&a.branch)?;
    let writer = convo_formats::writer(&a.format)
        .ok_or_else(|| CommandError::user(format!("`{}` cannot be exported", a.format)))?;
    let mut store = env.open()?;
    let s = find_session(&mut store, &a.session)?;
    if a.all_branches {
        let dir = a
            .output
            .as_deref()
            .ok_or_else(|| CommandError::user("--all-branches needs -o FOLDER"))?;
        std::fs::create_dir_all(dir)
            .map_err(|e| CommandError::user(format!("cannot create {}: {e}", dir.display())))?;
        let ext = match a.format.as_str() {
            "convo" => "convo",
            "session-json" => "json",
            "openai" => "jsonl",
            "markdown" => "md",
            "html" => "html",
            _ => "",
        };
        let branches = store.branches(&s.id)?;
        let mut bar = crate::ui::Progress::new(branches.len() as u64, "timelines");
        for (i, b) in branches.into_iter().enumerate() {
            bar.set("exporting", i as u64);
            let conv = convo_formats::ledger::export(&mut store, &s, &b.name)?;
            let name = convo_core::text::component(b.name.as_str());
            if a.format == "clog" {
                let sub = dir.join(&name);
                let path = convo_formats::clog::write_folder(&conv, &sub).map_err(format_error)?;
                eprintln!("wrote {}", path.display());
            } else {
                let path = dir.join(format!("{name}.{ext}"));
                let bytes = writer.write(&conv).map_err(format_error)?;
                write_atomically(&path, &bytes)?;
                eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
            }
        }
        bar.finish();
        return Ok(ExitCode::SUCCESS);
    }
    let conv = convo_formats::ledger::export(&mut store, &s, &branch)?;
    match (&a.output, a.format.as_str()) {
        (Some(dir), "clog") => {
            let path = convo_formats::clog::write_folder(&conv, dir).map_err(format_error)?;
            eprintln!("wrote {}", path.display());
        }
        (Some(path), _) => {
            let bytes = writer.write(&conv).map_err(format_error)?;
            write_atomically(path, &bytes)?;
            eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
        }
        (None, _) => {
            let bytes = writer.write(&conv).map_err(format_error)?;
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to a temporary file beside `path` and renames it over
/// `path`, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> CmdResult<()> {
    let fail =
        |e: std::io::Error| CommandError::user(format!("cannot write {}: {e}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| CommandError::user(format!("{} is not a file path", path.display())))?;
    let tmp = dir.join(format!(".{name}.convo-tmp-{}", std::process::id()));
    let res = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}
