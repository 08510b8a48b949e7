//! `convo test` of a harness agent (docs/AGENTS.md; `harness = true`, or
//! `--harness`): as `convo replay` does, the recording's inputs are sent
//! to the agent again, its inference and kv calls are answered from the
//! recording, and each request, output and final state is compared. The
//! replay is recorded as a session of its own (`replay of SESSION
//! BRANCH`); the agent's answers are the output the assertions read.

use super::test::TestSpec;
use super::test_report::Ran;
use super::{CmdResult, CommandError};
use convo_harness::{AgentSpec, Harness, Options, ReplayOptions, ReplayReport};
use convo_proxy::replay::{Matcher, ReplaySpec};
use convo_runtime::StorePool;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Runs `t` as a harness agent: what it printed (its answers, one a turn)
/// and a replay report in the proxy's shape (counted per turn).
pub async fn run(
    pool: &StorePool,
    t: &TestSpec,
    ignore: &[String],
    strict: bool,
    dir: Option<&Path>,
    timeout: Duration,
) -> CmdResult<(Ran, Value)> {
    let spec = ReplaySpec::parse(&t.recording).map_err(|e| {
        CommandError::user(format!("test `{}`: {e}", t.name))
            .with_hint("give the recording as SESSION or SESSION:BRANCH")
    })?;
    let mut matcher = Matcher::new(ignore).map_err(CommandError::user)?;
    matcher.strict = strict;
    let q = spec.session.clone();
    let recorded = match pool.run(move |s| s.find_session(&q)).await {
        Ok(s) => s,
        Err(e) => {
            return Ok((
                Ran::failed(CommandError::from(e).message_text()),
                Value::Null,
            ));
        }
    };
    let mut opts = Options::new(recorded.agent.clone());
    opts.turn_timeout = timeout;
    opts.holder = "convo test".to_owned();
    opts.env = t.env.clone().into_iter().collect();
    opts.dir = dir.map(Path::to_path_buf);
    let ropts = ReplayOptions {
        live_after: None,
        name: None,
        matcher,
    };
    let agent = AgentSpec::Command(t.command.argv());
    let mut h = match Harness::start(pool.clone(), &agent, opts).await {
        Ok(h) => h,
        Err(e) => return Ok((Ran::failed(&e.to_string()), Value::Null)),
    };
    let report = h.replay(&recorded.id, &spec.branch, &ropts, |_| {}).await;
    h.stop().await;
    match report {
        Ok(r) => {
            let out: Vec<&str> = r.turns.iter().map(|t| t.output.as_str()).collect();
            Ok((Ran::finished(out.join("\n")), report_of(&r)))
        }
        Err(e) => Ok((Ran::failed(&e.to_string()), Value::Null)),
    }
}

/// A harness replay as the proxy's replay report: counts per turn, the
/// first divergence as the one call that did not match.
fn report_of(r: &ReplayReport) -> Value {
    let tolerated: std::collections::BTreeSet<u64> = r.tolerated.iter().map(|c| c.turn).collect();
    let (mut exact, mut tol, mut missed) = (0u64, 0u64, 0u64);
    for t in &r.turns {
        match (t.matched, tolerated.contains(&t.turn)) {
            (false, _) => missed += 1,
            (true, true) => tol += 1,
            (true, false) => exact += 1,
        }
    }
    let mut calls = Vec::new();
    if let Some(d) = &r.divergence {
        calls.push(json!({
            "call": d.turn, "turn": d.turn, "recorded_call": d.sequence,
            "code": "changed", "what": d.what, "differences": [d.what],
            "recorded": d.recorded, "received": d.replayed, "diff": d.diff,
        }));
    }
    json!({
        "harness": true,
        "recorded_calls": r.recorded_turns,
        "counts": {"exact": exact, "tolerated": tol, "live": 0, "missed": missed},
        "calls": calls,
        "tolerated": r.tolerated,
        "replay_session": r.session,
        "passed": r.divergence.is_none(),
    })
}
