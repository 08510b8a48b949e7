use super::{CmdResult, CommandError, Env, branch_name, find_session};
use crate::cli::StateCmd;
use crate::output::print_json;
use serde_json::json;
use std::process::ExitCode;

pub fn run(env: &Env, cmd: StateCmd) -> CmdResult {
    let mut store = env.open()?;
    match cmd {
        StateCmd::Put {
            session,
            key,
            value,
            branch,
            json,
        } => {
            let s = find_session(&mut store, &session)?;
            let root = store.state_put(&s.id, &branch_name(&branch)?, &key, value.as_bytes())?;
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
        } => {
            let s = find_session(&mut store, &session)?;
            let (root, existed) = store.state_delete(&s.id, &branch_name(&branch)?, &key)?;
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
                Some(v) => println!("{}", String::from_utf8_lossy(&v)),
                None => {
                    return Err(CommandError::user(format!(
                        "state key `{key}` is not set (state {})",
                        root.short()
                    ))
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
                let map: serde_json::Map<String, serde_json::Value> = entries
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(String::from_utf8_lossy(v))))
                    .collect();
                print_json(&json!({ "root": root.to_hex(), "entries": map }));
            } else {
                for (k, v) in entries {
                    println!("{k}\t{}", String::from_utf8_lossy(&v));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
