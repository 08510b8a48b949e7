use super::{CmdResult, CommandError};
use clap::Args;
use convo_store::Store;
use std::process::ExitCode;

/// Copy a whole store to another (e.g. SQLite to PostgreSQL), losslessly.
///
/// The target must be empty. The copy is one transaction on the target: it
/// gets everything or nothing. Node hashes and follow numbers are kept, and
/// the target is verified afterwards.
///
/// Examples:
///   convo migrate --from sqlite://$HOME/.convo/convo.db --to postgres://me@localhost/convo
///   convo migrate --from postgres://me@db/convo --to sqlite:///backup/convo.db
///   convo migrate --from sqlite:///a.db --to sqlite:///b.db --json
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct MigrateArgs {
    /// Source store URL
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// Target store URL (must be empty)
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Print one JSON document: what was copied ({sessions, nodes,
    /// branches, blobs, state_nodes, verified})
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: MigrateArgs) -> CmdResult {
    let mut from = Store::open_as(&a.from, convo_store::Access::Read)?;
    let mut to = Store::open(&a.to)?;
    let mut bar = crate::ui::Progress::new(from.end_cursor()?, "nodes");
    let m = convo_store::migrate(&mut from, &mut to, &mut |n| bar.set("copying", n))?;
    bar.finish();
    let report = to.verify()?;
    if !report.is_clean() {
        for p in &report.problems {
            eprintln!("{}: {}", p.object, p.reason);
        }
        return Err(CommandError::user("the migrated store does not verify"));
    }
    if a.json {
        crate::output::print_json(&serde_json::json!({
            "sessions": m.sessions,
            "nodes": m.nodes,
            "branches": m.branches,
            "blobs": m.blobs,
            "state_nodes": m.state_nodes,
            "import_rows": m.import_rows,
            "verified": true,
        }));
    } else {
        println!(
            "migrated {} sessions, {} nodes, {} branches, {} blobs, {} state nodes; the target verifies",
            m.sessions, m.nodes, m.branches, m.blobs, m.state_nodes
        );
    }
    Ok(ExitCode::SUCCESS)
}
