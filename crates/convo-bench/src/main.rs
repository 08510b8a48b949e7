//! `convo-bench`: measures the convo store against baselines taken in the
//! same run (bare SQLite inserts and scans, SHA-256 in memory) and prints a
//! table of figure, value, baseline, ratio, target and PASS/FAIL.
//!
//! ```text
//! convo-bench                  # every benchmark
//! convo-bench ingest verify    # a subset, by name
//! convo-bench --list           # the names
//! ```
//!
//! Each benchmark works in fresh directories under the system temp dir and
//! removes them afterwards. docs/PERFORMANCE.md records a run and explains
//! every figure.

mod agentsbench;
mod benches;
mod dedupbench;
mod diffbench;
mod floor;
mod formatsbench;
mod gitbench;
mod harnessbench;
mod otelbench;
mod pgbench;
mod proxybench;
mod replaybench;
mod searchbench;
mod servebench;
mod testbench;
mod util;

use std::process::ExitCode;
use util::{Result, Row, Verdict};

type Bench = fn() -> Result<Vec<Row>>;

/// In run order: the fork benchmark writes a 1M-node store, which leaves the
/// disk busy for a while, so it runs last. The table is sorted by figure.
const BENCHES: &[(&str, &str, Bench)] = &[
    (
        "ingest",
        "bulk ingest with append_many vs a bare insert",
        benches::bulk_ingest,
    ),
    (
        "floor",
        "where bulk ingest's time goes: the store's writes in raw SQL, rung by rung",
        floor::ingest_floor,
    ),
    (
        "append",
        "one append per transaction (sync=normal and sync=full)",
        benches::single_appends,
    ),
    (
        "timeline",
        "Store::timeline of a 10,000-turn timeline",
        benches::timeline,
    ),
    (
        "verify",
        "Store::verify on small nodes and on 1 MiB payloads",
        benches::verify,
    ),
    (
        "checkpoint",
        "checkpoint and verify --checkpoint on 1,000,000 nodes vs plain verify",
        benches::checkpoints,
    ),
    (
        "state",
        "state_put with 100,000 keys vs 10 keys",
        benches::state_put,
    ),
    (
        "storage",
        "bytes on disk per node at 250, 500 and 1000 turns",
        benches::storage,
    ),
    (
        "writers",
        "8 concurrent writers on SQLite, one append per transaction",
        pgbench::concurrent_sqlite,
    ),
    (
        "postgres",
        "PostgreSQL ingest, appends and 8 writers (needs CONVO_BENCH_PG)",
        pgbench::postgres,
    ),
    (
        "git",
        "git sync of 100,000 nodes / 1,000 sessions vs git fast-import",
        gitbench::projection,
    ),
    (
        "gitlong",
        "git sync of one 10,000-turn session vs git fast-import; git verify",
        gitbench::long_session,
    ),
    (
        "gitfiles",
        "git sync of one 10,000-turn session, layout sessions vs dag",
        gitbench::long_session_files,
    ),
    (
        "gitchain",
        "git sync of one timeline of 100,000 nodes",
        gitbench::long_timeline,
    ),
    (
        "gitscale",
        "git sync cost per commit with 10,000 sessions vs 1",
        gitbench::scaling,
    ),
    (
        "formats",
        "CONVO parse vs pulldown-cmark; import 10,000 conversations",
        formatsbench::formats,
    ),
    (
        "harness",
        "agent harness: added time per turn and per kv call, replay of 1,000 turns, vs the agent called directly",
        harnessbench::harness,
    ),
    (
        "proxy",
        "recording proxy vs the upstream called directly; 64 clients; replay",
        proxybench::proxy,
    ),
    (
        "dedup",
        "one conversation through the proxy at 250/1,000/4,000 calls: bytes stored, added latency; chunked reads",
        dedupbench::dedup,
    ),
    (
        "serve",
        "convo serve: 64 HTTP clients appending; a page of a 10,000-turn timeline; 1,000 SSE subscribers",
        servebench::serve,
    ),
    (
        "webdiff",
        "the web view's diff page of a 625/2,500/10,000-turn session forked at turn 1: bytes, server time",
        diffbench::diff_page,
    ),
    (
        "webdiff-requests",
        "the web view's request diff of two 50/200/800-call timelines, one message changed in every request: bytes, server time, first paint in Chromium",
        diffbench::request_diff,
    ),
    (
        "serve-pg",
        "convo serve on PostgreSQL: round trips per append; 2 servers, 64 HTTP clients (CONVO_BENCH_PG)",
        servebench::serve_pg,
    ),
    (
        "search",
        "full-text search: ingest with the index, index catch-up, search vs a LIKE scan on 100,000 nodes",
        searchbench::search_figures,
    ),
    (
        "otel",
        "OTLP ingest: one more call at 1×/4×/16× session length, cached vs reading the session; spans/s; bytes stored",
        otelbench::otel,
    ),
    (
        "otel-serve",
        "OTLP over HTTP: 16 concurrent exporters vs convo ingest; bytes per call; flush to SSE p50/p99",
        otelbench::otel_serve,
    ),
    (
        "three-ways",
        "one conversation through convo proxy, imported from a Claude Code transcript, and as OTLP spans: bytes on disk",
        otelbench::three_ways,
    ),
    (
        "search-page",
        "the web view's search page over 1,000,000 nodes in 1,000 sessions: server time",
        searchbench::search_page,
    ),
    (
        "replay",
        "replay decision at the 200th call of a conversation: exact and tolerating volatile differences",
        replaybench::replay_decision,
    ),
    (
        "convo-test",
        "convo test of 100 recordings of 10 calls each, beyond the programs' own time",
        testbench::convo_test,
    ),
    ("fork", "fork at depth 10 vs depth 1,000,000", benches::fork),
    (
        "agents",
        "import 1,000 Claude Code transcripts (1 GB) vs reading them; peak memory; unchanged re-import",
        agentsbench::agents,
    ),
];

fn usage() -> String {
    let mut s = String::from("usage: convo-bench [--list] [NAME…]\n\nbenchmarks:\n");
    for (name, what, _) in BENCHES {
        s.push_str(&format!("  {name:<9} {what}\n"));
    }
    s
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "--list") {
        for (name, _, _) in BENCHES {
            println!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    if let Some(bad) = args
        .iter()
        .find(|a| !BENCHES.iter().any(|(n, _, _)| n == a))
    {
        eprintln!("convo-bench: unknown benchmark `{bad}`\n\n{}", usage());
        return ExitCode::from(2);
    }
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    let mut failed = false;
    for (name, what, run) in BENCHES {
        if !args.is_empty() && !args.iter().any(|a| a == name) {
            continue;
        }
        eprintln!("{name}: {what}…");
        let t = std::time::Instant::now();
        match run() {
            Ok(r) => {
                eprintln!("  · done in {:.1} s", t.elapsed().as_secs_f64());
                rows.extend(r);
            }
            Err(e) => {
                eprintln!("convo-bench: {name} failed: {e}");
                failed = true;
            }
        }
    }
    println!();
    rows.sort_by_key(|r| {
        let n: String = r.figure.chars().take_while(char::is_ascii_digit).collect();
        n.parse::<u32>().unwrap_or(u32::MAX)
    });
    util::print_table(&rows);
    println!(
        "\n{} figures, {} PASS, {} FAIL, total {:.0} s",
        rows.len(),
        rows.iter().filter(|r| r.verdict == Verdict::Pass).count(),
        rows.iter().filter(|r| r.verdict == Verdict::Fail).count(),
        started.elapsed().as_secs_f64()
    );
    if failed || rows.iter().any(|r| r.verdict == Verdict::Fail) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
