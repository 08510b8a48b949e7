use super::{CmdResult, Env, now};
use crate::output::print_json;
use convo_core::{BranchName, Diagnostics, HashPrefix, Kind};
use convo_store::{Draft, Store, StoreError};
use serde_json::json;
use std::process::ExitCode;

/// A message of the demo: kind, from, to, payload, diagnostics, and its
/// time in milliseconds after the session's start.
type Line = (
    Kind,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    i64,
);

/// The agent of the demo session.
const A: &str = "researcher";

/// The first turn: a question answered through an inference call.
const TOLD: [Line; 4] = [
    (Kind::Invoke, "cli", A, "Tell me about Paris", "{}", 1_000),
    (
        Kind::Request,
        A,
        "infer",
        r#"{"model":"small-1","prompt":"Tell me about Paris"}"#,
        r#"{"model":"small-1"}"#,
        1_100,
    ),
    (
        Kind::Response,
        "infer",
        A,
        "Paris is the capital of France, known for the Eiffel Tower.",
        r#"{"status":200,"duration_ms":840,"tokens":{"in":12,"out":14}}"#,
        1_950,
    ),
    (
        Kind::Complete,
        A,
        "cli",
        "Paris is the capital of France, known for the Eiffel Tower.",
        r#"{"duration_ms":1000}"#,
        2_000,
    ),
];

/// The second turn on main: a wrong answer.
const WRONG: [Line; 2] = [
    (
        Kind::Invoke,
        "cli",
        A,
        "What about its population?",
        "{}",
        10_000,
    ),
    (
        Kind::Complete,
        A,
        "cli",
        "Paris has about 20 million inhabitants.",
        r#"{"note":"wrong: that is the metro area of another city"}"#,
        11_000,
    ),
];

/// The second turn on the fork: the answer looked up in the kv service.
const FIXED: [Line; 4] = [
    (
        Kind::Invoke,
        "cli",
        A,
        "What about its population?",
        "{}",
        21_000,
    ),
    (
        Kind::Request,
        A,
        "kv",
        r#"{"get":"population/paris"}"#,
        "{}",
        21_100,
    ),
    (
        Kind::Response,
        "kv",
        A,
        "2102650",
        r#"{"status":200}"#,
        21_200,
    ),
    (
        Kind::Complete,
        A,
        "cli",
        "The city of Paris has about 2.1 million inhabitants.",
        "{}",
        22_000,
    ),
];

/// Appends `lines` to a timeline in one transaction: their hashes.
fn turn(
    store: &mut Store,
    s: &convo_core::SessionId,
    branch: &BranchName,
    lines: &[Line],
    t0: i64,
) -> Result<Vec<convo_core::NodeHash>, StoreError> {
    let drafts: Vec<Draft> = lines
        .iter()
        .map(|&(kind, from, to, payload, diag, dt)| Draft {
            kind,
            from: from.into(),
            to: to.into(),
            payload: payload.as_bytes().to_vec(),
            diagnostics: Diagnostics::parse(diag).unwrap_or_else(|_| Diagnostics::empty()),
            state: None,
            sequence: None,
            created_at: t0 + dt,
        })
        .collect();
    store.transaction(|l| l.append_many(s, branch, &drafts))
}

/// Records a small, realistic session: two turns with an inference call,
/// agent state, a fork from the first answer, a different second turn on
/// the fork, and a promote that makes it canonical.
pub fn build(
    store: &mut Store,
    t0: i64,
) -> Result<(convo_store::SessionRow, BranchName), StoreError> {
    let s = store.transaction(|l| l.new_session(A, Some("Paris trip (demo)"), t0))?;
    let main = BranchName::main();
    store.transaction(|l| l.state_put(&s.id, &main, "topic", b"Paris"))?;
    let told = turn(store, &s.id, &main, &TOLD, t0)?;
    store.transaction(|l| l.state_put(&s.id, &main, "facts_told", b"1"))?;
    turn(store, &s.id, &main, &WRONG, t0)?;
    let fix = BranchName::new("fix-population").expect("a valid branch name");
    let from = HashPrefix::parse(&told[3].to_hex()).expect("a hash is a prefix");
    store.transaction(|l| l.fork(&s.id, &from, &fix, t0 + 20_000))?;
    turn(store, &s.id, &fix, &FIXED, t0)?;
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
