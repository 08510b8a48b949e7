use super::{CmdResult, Env, now};
use crate::output::print_json;
use convo_core::{BranchName, Diagnostics, HashPrefix, Kind};
use convo_store::{Draft, Store, StoreError};
use serde_json::json;
use std::process::ExitCode;

fn msg(kind: Kind, from: &str, to: &str, payload: &str, diag: &str, t: i64) -> Draft {
    Draft {
        kind,
        from: from.into(),
        to: to.into(),
        payload: payload.as_bytes().to_vec(),
        diagnostics: Diagnostics::parse(diag).unwrap_or_else(|_| Diagnostics::empty()),
        state: None,
        sequence: None,
        created_at: t,
    }
}

/// Records a small, realistic session: two turns with an inference call,
/// agent state, a fork from the first answer, a different second turn on
/// the fork, and a promote that makes it canonical.
pub fn build(
    store: &mut Store,
    t0: i64,
) -> Result<(convo_store::SessionRow, BranchName), StoreError> {
    let s = store.transaction(|l| l.new_session("researcher", Some("Paris trip (demo)"), t0))?;
    let main = BranchName::main();
    let a = "researcher";
    store.transaction(|l| l.state_put(&s.id, &main, "topic", b"Paris"))?;
    let turn1 = store.transaction(|l| {
        l.append_many(
            &s.id,
            &main,
            &[
                msg(
                    Kind::Invoke,
                    "cli",
                    a,
                    "Tell me about Paris",
                    "{}",
                    t0 + 1_000,
                ),
                msg(
                    Kind::Request,
                    a,
                    "infer",
                    r#"{"model":"small-1","prompt":"Tell me about Paris"}"#,
                    r#"{"model":"small-1"}"#,
                    t0 + 1_100,
                ),
                msg(
                    Kind::Response,
                    "infer",
                    a,
                    "Paris is the capital of France, known for the Eiffel Tower.",
                    r#"{"status":200,"duration_ms":840,"tokens":{"in":12,"out":14}}"#,
                    t0 + 1_950,
                ),
                msg(
                    Kind::Complete,
                    a,
                    "cli",
                    "Paris is the capital of France, known for the Eiffel Tower.",
                    r#"{"duration_ms":1000}"#,
                    t0 + 2_000,
                ),
            ],
        )
    })?;
    store.transaction(|l| l.state_put(&s.id, &main, "facts_told", b"1"))?;
    store.transaction(|l| {
        l.append_many(
            &s.id,
            &main,
            &[
                msg(
                    Kind::Invoke,
                    "cli",
                    a,
                    "What about its population?",
                    "{}",
                    t0 + 10_000,
                ),
                msg(
                    Kind::Complete,
                    a,
                    "cli",
                    "Paris has about 20 million inhabitants.",
                    r#"{"note":"wrong: that is the metro area of another city"}"#,
                    t0 + 11_000,
                ),
            ],
        )
    })?;
    let fix = BranchName::new("fix-population").expect("a valid branch name");
    let from = HashPrefix::parse(&turn1[3].to_hex()).expect("a hash is a prefix");
    store.transaction(|l| l.fork(&s.id, &from, &fix, t0 + 20_000))?;
    store.transaction(|l| {
        l.append_many(
            &s.id,
            &fix,
            &[
                msg(
                    Kind::Invoke,
                    "cli",
                    a,
                    "What about its population?",
                    "{}",
                    t0 + 21_000,
                ),
                msg(
                    Kind::Request,
                    a,
                    "kv",
                    r#"{"get":"population/paris"}"#,
                    "{}",
                    t0 + 21_100,
                ),
                msg(
                    Kind::Response,
                    "kv",
                    a,
                    "2102650",
                    r#"{"status":200}"#,
                    t0 + 21_200,
                ),
                msg(
                    Kind::Complete,
                    a,
                    "cli",
                    "The city of Paris has about 2.1 million inhabitants.",
                    "{}",
                    t0 + 22_000,
                ),
            ],
        )
    })?;
    store.transaction(|l| l.promote(&s.id, &fix, t0 + 30_000))?;
    Ok((s, main))
}

pub fn run(env: &Env, as_json: bool) -> CmdResult {
    let mut store = env.open()?;
    let (s, _) = build(&mut store, now() - 60_000)?;
    let branches = store.branches(&s.id)?;
    if as_json {
        print_json(&json!({
            "session": s.id.to_string(),
            "branches": branches.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}", s.id);
    eprintln!("recorded a demo session in {}", env.store_url);
    eprintln!(
        "  timelines: {}",
        branches
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    eprintln!("look at it with:");
    eprintln!(
        "  convo session get {}          # main, after the promote",
        s.id.short()
    );
    eprintln!(
        "  convo log {} --branch {}",
        s.id.short(),
        branches
            .iter()
            .find(|b| b.sealed)
            .map(|b| b.name.as_str())
            .unwrap_or("main")
    );
    eprintln!("  convo state list {}", s.id.short());
    eprintln!("  convo verify");
    Ok(ExitCode::SUCCESS)
}
