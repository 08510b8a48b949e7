use super::{CmdResult, CommandError, Env, branch_name, find_session};
use crate::cli::StateCmd;
use crate::output::{clean, print_json};
use convo_runtime::now_ms;
use convo_runtime::turns::{StateOp, state_write};
use serde_json::json;
use std::process::ExitCode;

pub fn run(env: &Env, cmd: StateCmd) -> CmdResult {
    let mut store = env.open()?;
    match cmd {
        StateCmd::Put {
            session,
            key,
            value,
            value_file,
            branch,
            json,
            wait,
        } => {
            let bytes = match (value, value_file) {
                (Some(v), _) => v.into_bytes(),
                (None, Some(f)) => read_value(&f)?,
                (None, None) => return Err(CommandError::user("no value given")),
            };
            let op = StateOp::Put(key.clone(), bytes);
            let (root, _) = write(env, &mut store, &session, &branch, op, wait)?;
            if json {
                print_json(&json!({ "key": key, "root": root.to_hex() }));
            } else {
                println!("{root}");
            }
        }
        StateCmd::Delete {
            session,
            key,
            branch,
            json,
            wait,
        } => {
            let op = StateOp::Delete(key.clone());
            let (root, existed) = write(env, &mut store, &session, &branch, op, wait)?;
            if json {
                print_json(&json!({ "key": key, "root": root.to_hex(), "existed": existed }));
            } else {
                if !existed {
                    eprintln!("note: `{key}` was not set");
                }
                println!("{root}");
            }
        }
        StateCmd::Get {
            session,
            key,
            branch,
            at,
            json,
        } => {
            let root = root_at(&mut store, &session, &branch, at.as_deref())?;
            match store.state_get(&root, &key)? {
                Some(v) if json => {
                    let (value, enc) = convo_api::encode_payload(&v);
                    print_json(&json!({
                        "key": key,
                        "root": root.to_hex(),
                        "value": value,
                        "value_encoding": enc,
                    }));
                }
                Some(v) => println!("{}", shown_value(&v, true)),
                None => {
                    return Err(CommandError::of_kind(
                        convo_store::ErrorKind::NotFound,
                        format!("state key `{key}` is not set (state {})", root.short()),
                    )
                    .with_hint("list keys with `convo state list SESSION`"));
                }
            }
        }
        StateCmd::List {
            session,
            branch,
            at,
            json,
        } => {
            let root = root_at(&mut store, &session, &branch, at.as_deref())?;
            let entries = store.state_list(&root)?;
            if json {
                let v = convo_api::StateView::new(&root, entries);
                print_json(&serde_json::to_value(v).unwrap_or_default());
            } else {
                for (k, v) in entries {
                    println!("{}\t{}", clean(&k), shown_value(&v, false));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `op` to a timeline's state, outside any open turn: the new
/// root, and whether the key was set before.
fn write(
    env: &Env,
    store: &mut convo_store::Store,
    session: &str,
    branch: &str,
    op: StateOp,
    wait: bool,
) -> Result<(convo_core::StateRoot, bool), CommandError> {
    let s = find_session(store, session)?;
    let branch = branch_name(branch)?;
    let _turn = super::guard_timeline(env, store, &s.id, &branch, wait)?;
    let op = [op];
    Ok(store.transaction(|l| {
        super::turn_guard(l, &s.id, &branch)?;
        state_write(l, &s.id, &branch, &op, now_ms())
    })?)
}

/// The state root of a timeline, at its head or at node `at`.
fn root_at(
    store: &mut convo_store::Store,
    session: &str,
    branch: &str,
    at: Option<&str>,
) -> Result<convo_core::StateRoot, CommandError> {
    let s = find_session(store, session)?;
    let at = at.map(|r| super::node_ref(store, &s.id, r)).transpose()?;
    Ok(store.state_root(&s.id, &branch_name(branch)?, at.as_ref())?)
}

/// A state value for a terminal: text with control characters made
/// visible, or a note for bytes that are not UTF-8 (`--json` carries them).
fn shown_value(v: &[u8], multiline: bool) -> String {
    match std::str::from_utf8(v) {
        Ok(t) if multiline => crate::output::clean_multiline(t),
        Ok(t) => clean(t),
        Err(_) => format!(
            "<{} bytes, not UTF-8; --json carries them in base64>",
            v.len()
        ),
    }
}

/// A value's bytes from a file or stdin (`-`), bounded like a payload.
fn read_value(f: &std::path::Path) -> CmdResult<Vec<u8>> {
    let max = super::record::max_payload(None)?;
    if f.as_os_str() == "-" {
        return super::record::read_limited(std::io::stdin().lock(), "the value on stdin", max, 0);
    }
    super::record::read_file(f, "value file", max)
}
