use super::{CmdResult, Env, branch_name, find_session, now, prefix};
use crate::cli::SessionCmd;
use crate::output::{node_json, node_line, print_json, session_json, time};
use clap::Args;
use serde_json::json;
use std::process::ExitCode;

/// Show a timeline's turns from the first message to the head.
#[derive(Args, Debug)]
pub struct GetArgs {
    /// Session id, unique id prefix or title
    pub session: String,
    /// Timeline
    #[arg(long, default_value = "main")]
    pub branch: String,
    /// Print one JSON document
    #[arg(long)]
    pub json: bool,
}

pub fn run(env: &Env, cmd: SessionCmd) -> CmdResult {
    let mut store = env.open()?;
    match cmd {
        SessionCmd::New { agent, title, json } => {
            let s = store.create_session(&agent, title.as_deref(), now())?;
            if json {
                print_json(&session_json(&s));
            } else {
                println!("{}", s.id);
            }
        }
        SessionCmd::List(f) => {
            let sessions = store.sessions()?;
            if f.json {
                print_json(&json!(
                    sessions.iter().map(session_json).collect::<Vec<_>>()
                ));
            } else {
                for s in &sessions {
                    println!(
                        "{}  {}  {:<16} {}",
                        s.id,
                        time(s.created_at),
                        s.agent,
                        s.title.as_deref().unwrap_or("")
                    );
                }
            }
        }
        SessionCmd::Get(a) => {
            let s = find_session(&mut store, &a.session)?;
            let b = branch_name(&a.branch)?;
            let row = store.branch(&s.id, &b)?;
            let tl = store.timeline(&s.id, &b)?;
            if a.json {
                let mut v = session_json(&s);
                v["branch"] = crate::output::branch_json(&row);
                v["nodes"] = json!(
                    tl.iter()
                        .map(|n| node_json(&n.stored, Some(&n.payload)))
                        .collect::<Vec<_>>()
                );
                print_json(&v);
            } else {
                println!(
                    "session {}  agent {}{}",
                    s.id,
                    s.agent,
                    s.title.map(|t| format!("  \"{t}\"")).unwrap_or_default()
                );
                println!(
                    "branch  {}{}  {} nodes  state {}",
                    b,
                    if row.sealed { " (sealed)" } else { "" },
                    tl.len(),
                    row.state.map(|r| r.short()).unwrap_or_else(|| "-".into())
                );
                for n in &tl {
                    println!("{}", node_line(&n.stored, &n.payload));
                }
            }
        }
        SessionCmd::Fork {
            session,
            from,
            branch,
            json,
        } => {
            let s = find_session(&mut store, &session)?;
            let name = branch_name(&branch)?;
            let node = store.fork(&s.id, &prefix(&from)?, &name, now())?;
            if json {
                print_json(&node_json(&node, None));
            } else {
                println!("{}", node.hash);
                eprintln!(
                    "created branch `{name}` at {}",
                    node.node.parent.map(|p| p.short()).unwrap_or_default()
                );
            }
        }
        SessionCmd::Promote {
            session,
            branch,
            json,
        } => {
            let s = find_session(&mut store, &session)?;
            let name = branch_name(&branch)?;
            let p = store.promote(&s.id, &name, now())?;
            if json {
                let mut v = node_json(&p.node, None);
                v["sealed_as"] = json!(p.sealed_as.as_str());
                print_json(&v);
            } else {
                println!("{}", p.node.hash);
                eprintln!(
                    "`{name}` is now main; the old main is sealed as `{}`",
                    p.sealed_as
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
