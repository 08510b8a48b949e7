//! Coding agents' transcripts: importing a folder of Claude Code sessions
//! (1,000 files, 1 GB by default) against reading the same files, peak
//! memory, and a second import of the unchanged folder.
//!
//! `CONVO_BENCH_AGENT_FILES` (default 1000) and `CONVO_BENCH_AGENT_MB`
//! (per file, default 1) size it; `CONVO_BENCH_AGENT_GROUP` (default 16:
//! what `convo import` does, `GROUP_FILES`) imports that many files per
//! transaction.

use crate::util::{Result, Row, Verdict, thousands};
use convo_formats::claude_code;
use convo_llm::ledger::{Outcome, import_lazy};
use std::io::Write;
use std::time::Instant;

fn env_num(k: &str, default: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One transcript of about `bytes`: turns of a prompt, attachments, an
/// API request record, a Bash call, its output, an answer, a cost record,
/// chained by uuid as Claude Code writes them.
fn transcript(file: u64, bytes: usize) -> Vec<u8> {
    let sid = format!("00000000-0000-4000-8000-{file:012}");
    let mut out = Vec::with_capacity(bytes + 4096);
    let mut parent = String::from("null");
    let mut n = 0u64;
    let mut uuid = || {
        n += 1;
        format!("\"{file:08x}-{n:04x}-4000-8000-{:012x}\"", n)
    };
    let output = "drwxr-xr-x  5 user  staff   160 Nov 24 15:53 src\n".repeat(40);
    let mut turn = 0;
    while out.len() < bytes {
        turn += 1;
        let ts = format!(
            "2026-11-24T15:{:02}:{:02}.000Z",
            (turn / 60) % 60,
            turn % 60
        );
        let mut line = |l: String| {
            out.extend_from_slice(l.as_bytes());
            out.push(b'\n');
        };
        line(format!(
            r#"{{"type":"queue-operation","operation":"enqueue","timestamp":"{ts}","sessionId":"{sid}","content":"step {turn}"}}"#
        ));
        let u = uuid();
        line(format!(
            r#"{{"parentUuid":{parent},"isSidechain":false,"type":"user","message":{{"role":"user","content":"Please run the migration step {turn} and tell me whether it failed"}},"uuid":{u},"timestamp":"{ts}","cwd":"/home/me/proj","sessionId":"{sid}","version":"2.1.331","gitBranch":"main"}}"#
        ));
        let at = uuid();
        line(format!(
            r#"{{"parentUuid":{u},"isSidechain":false,"attachment":{{"type":"date","date":"2026-11-24"}},"type":"attachment","uuid":{at},"timestamp":"{ts}","rendered":[{{"content":"<system-reminder>\nToday's date is 2026-11-24.\n</system-reminder>"}}],"sessionId":"{sid}"}}"#
        ));
        line(format!(
            r#"{{"type":"api-request","sessionId":"{sid}","id":"req-{turn}","timestamp":"{ts}","params":{{"model":"claude-opus-5-5","max_tokens":128000}}}}"#
        ));
        let call = uuid();
        line(format!(
            r#"{{"parentUuid":{at},"isSidechain":false,"message":{{"id":"msg_{turn}a","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{{"type":"text","text":"Running it."}},{{"type":"tool_use","id":"toolu_{turn}","name":"Bash","input":{{"command":"ls -la && ./migrate --step {turn}","description":"run step"}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":1200,"output_tokens":40}}}},"type":"assistant","uuid":{call},"timestamp":"{ts}","sessionId":"{sid}"}}"#
        ));
        let res = uuid();
        line(format!(
            r#"{{"parentUuid":{call},"isSidechain":false,"type":"user","message":{{"role":"user","content":[{{"tool_use_id":"toolu_{turn}","type":"tool_result","content":{},"is_error":false}}]}},"uuid":{res},"timestamp":"{ts}","sessionId":"{sid}"}}"#,
            serde_json::json!(output)
        ));
        let ans = uuid();
        line(format!(
            r#"{{"parentUuid":{res},"isSidechain":false,"message":{{"id":"msg_{turn}b","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{{"type":"text","text":"Step {turn} ran; the migration did not fail. The listing shows the source folder and nothing else changed."}}],"stop_reason":"end_turn","usage":{{"input_tokens":2400,"output_tokens":60}}}},"type":"assistant","uuid":{ans},"timestamp":"{ts}","sessionId":"{sid}"}}"#
        ));
        line(format!(
            r#"{{"type":"cost-state","sessionId":"{sid}","totalCostUSD":0.01,"totalDuration":675}}"#
        ));
        parent = ans;
    }
    out
}

/// The process's peak resident memory (VmHWM), in MiB, where /proc says.
fn peak_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// Bytes this process has written through `write` calls so far
/// (`/proc/self/io` `wchar`: SQLite's log frames and checkpoints).
fn written() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    let line = s.lines().find(|l| l.starts_with("wchar:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Imports one session file as `convo import` does ([`import_lazy`]).
fn import_file(store: &mut convo_store::Store, p: &std::path::Path) -> Result<Outcome> {
    Ok(import_group(store, std::slice::from_ref(&p.to_path_buf()))?.remove(0))
}

/// Imports session files in one transaction (`convo import` groups up to
/// 16 files or 16 MiB; `CONVO_BENCH_AGENT_GROUP=1` measures a transaction
/// per file).
fn import_group(
    store: &mut convo_store::Store,
    paths: &[std::path::PathBuf],
) -> Result<Vec<Outcome>> {
    let mut sessions = Vec::with_capacity(paths.len());
    for p in paths {
        sessions.push(claude_code::open_session(p)?.ok_or("an empty transcript")?);
    }
    Ok(store.transaction(|l| {
        sessions
            .iter_mut()
            .map(|s| import_lazy(l, "claude-code", &s.conv, &mut s.records, None, 0))
            .collect::<std::result::Result<Vec<_>, _>>()
    })?)
}

pub fn agents() -> Result<Vec<Row>> {
    let files = env_num("CONVO_BENCH_AGENT_FILES", 1000);
    let per = env_num("CONVO_BENCH_AGENT_MB", 1) as usize * 1024 * 1024;
    let dir = crate::util::Scratch::new("agents")?;
    let root = dir.db().with_file_name("projects").join("-home-me-proj");
    std::fs::create_dir_all(&root)?;
    let mut total = 0u64;
    for f in 0..files {
        let bytes = transcript(f, per);
        total += bytes.len() as u64;
        let mut w = std::fs::File::create(root.join(format!("{f:08}.jsonl")))?;
        w.write_all(&bytes)?;
    }
    let mb = total as f64 / 1e6;
    let paths = claude_code::session_files(&root);
    let base_peak = peak_mib().unwrap_or(0.0);

    // Baseline: reading every file whole (what `cat` does).
    let t = Instant::now();
    let mut read = 0u64;
    for p in &paths {
        read += std::fs::read(p)?.len() as u64;
    }
    let cat = t.elapsed();
    if read != total {
        return Err("the files changed under the benchmark".into());
    }

    let mut store = dir.store("")?;
    let t = Instant::now();
    let mut nodes = 0usize;
    let mut each = Vec::with_capacity(paths.len());
    let mut wrote = Vec::with_capacity(paths.len());
    let group = env_num("CONVO_BENCH_AGENT_GROUP", 16).max(1) as usize;
    for g in paths.chunks(group) {
        // What `convo import` does: an index per record, then each message
        // read again and written in bounded batches.
        let one = Instant::now();
        let w0 = written().unwrap_or(0);
        for o in import_group(&mut store, g)? {
            if let Outcome::Created { nodes: n, .. } = o {
                nodes += n;
            }
        }
        let k = g.len() as f64;
        let (t, w) = (
            one.elapsed().as_secs_f64(),
            written().unwrap_or(0).saturating_sub(w0),
        );
        each.extend(std::iter::repeat_n(t / k, g.len()));
        wrote.extend(std::iter::repeat_n(w as f64 / k, g.len()));
    }
    let import = t.elapsed();
    // Whether a file costs more as the store grows: the first tenth of the
    // files against the last.
    let tenth = (each.len() / 10).max(1);
    let first_ms = each[..tenth].iter().sum::<f64>() / tenth as f64 * 1e3;
    let last_ms = each[each.len() - tenth..].iter().sum::<f64>() / tenth as f64 * 1e3;
    // What a file writes (log frames, checkpoints), first tenth and last:
    // random-key index pages dirtied per transaction.
    let first_w = wrote[..tenth].iter().sum::<f64>() / tenth as f64 / 1e6;
    let last_w = wrote[wrote.len() - tenth..].iter().sum::<f64>() / tenth as f64 / 1e6;
    let peak = peak_mib().unwrap_or(0.0);

    // The unchanged folder again: what `convo import` does (a stat per
    // file against its import state) and, without the state, reading each
    // file and finding every message stored.
    let t = Instant::now();
    let mut looked = 0u64;
    for p in claude_code::session_files(&root) {
        looked += std::fs::metadata(&p)?.len();
    }
    let scan = t.elapsed();
    if looked != total {
        return Err("the files changed under the benchmark".into());
    }
    let t = Instant::now();
    for p in paths.iter().take(100) {
        let o = import_file(&mut store, p)?;
        if !matches!(o, Outcome::Existing { .. }) {
            return Err(format!("an unchanged file added something: {o:?}").into());
        }
    }
    let full_again = t.elapsed().as_secs_f64() / paths.len().min(100) as f64 * paths.len() as f64;

    let rate = mb / import.as_secs_f64();
    let cat_rate = mb / cat.as_secs_f64();
    Ok(vec![
        Row::new(
            format!(
                "import {files} Claude Code transcripts, {mb:.0} MB ({} nodes)",
                thousands(nodes as f64)
            ),
            format!("{rate:.1} MB/s ({:.1} s)", import.as_secs_f64()),
            format!("reading the files {cat_rate:.0} MB/s"),
            format!("{:.3}×", rate / cat_rate),
            "—",
            Verdict::Info,
        ),
        Row::new(
            "one file's import, the last tenth of the files vs the first (the store growing)",
            format!("{last_ms:.0} ms"),
            format!("the first tenth: {first_ms:.0} ms"),
            format!("{:.2}×", last_ms / first_ms),
            "—",
            Verdict::Info,
        ),
        Row::new(
            "bytes written per file (log and checkpoints, /proc/self/io wchar), the last tenth vs the first",
            format!("{last_w:.1} MB"),
            format!("the first tenth: {first_w:.1} MB"),
            format!("{:.2}×", last_w / first_w.max(1e-9)),
            "—",
            Verdict::Info,
        ),
        Row::new(
            "peak memory of that import (VmHWM)",
            format!("{peak:.0} MiB"),
            format!(
                "{base_peak:.0} MiB before; one file {:.1} MiB",
                per as f64 / 1048576.0
            ),
            "—",
            "≤ 2× the largest record",
            Verdict::Info,
        ),
        Row::new(
            "re-import of the unchanged folder: stat per file (convo import's path)",
            format!("{:.1} ms", scan.as_secs_f64() * 1e3),
            format!("reading and matching every file: {full_again:.1} s (extrapolated from 100)"),
            "—",
            "a directory scan",
            Verdict::Info,
        ),
    ])
}
