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
            let s = find_session(&mut store, &session)?;
            let branch = branch_name(&branch)?;
            let _turn = super::guard_timeline(env, &mut store, &s.id, &branch, wait)?;
            let op = [StateOp::Put(key.clone(), bytes)];
            let (root, _) = store.transaction(|l| {
                super::turn_guard(l, &s.id, &branch)?;
                state_write(l, &s.id, &branch, &op, now_ms())
            })?;
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
            let s = find_session(&mut store, &session)?;
            let branch = branch_name(&branch)?;
            let _turn = super::guard_timeline(env, &mut store, &s.id, &branch, wait)?;
            let op = [StateOp::Delete(key.clone())];
            let (root, existed) = store.transaction(|l| {
                super::turn_guard(l, &s.id, &branch)?;
                state_write(l, &s.id, &branch, &op, now_ms())
            })?;
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
            let s = find_session(&mut store, &session)?;
            let at = at
                .as_deref()
                .map(|r| super::node_ref(&mut store, &s.id, r))
                .transpose()?;
            let root = store.state_root(&s.id, &branch_name(&branch)?, at.as_ref())?;
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
            let s = find_session(&mut store, &session)?;
            let at = at
                .as_deref()
                .map(|r| super::node_ref(&mut store, &s.id, r))
                .transpose()?;
            let root = store.state_root(&s.id, &branch_name(&branch)?, at.as_ref())?;
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
