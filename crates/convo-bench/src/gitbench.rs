//! The git projection: commits per second against `git fast-import` of the
//! same commits, and the cost of a commit with 1 session against 10,000
//! sessions in the repository.

use crate::util::{Result, Row, Scratch, Verdict, drafts, note, rate, thousands};
use convo_core::BranchName;
use convo_git::{Layout, Projector};
use convo_store::Store;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Appends `per` nodes (alternating invoke/complete) to each of `sessions`
/// new sessions, one transaction per session.
fn fill(store: &mut Store, sessions: u64, per: u64, tag: &str) -> Result<()> {
    let main = BranchName::main();
    for s in 0..sessions {
        let ses = store
            .transaction(|l| l.new_session(&format!("{tag}{}", s % 7), None, 1_770_000_000_000))?
            .id;
        store.transaction(|l| l.append_many(&ses, &main, &drafts(s * per, per)))?;
    }
    Ok(())
}

fn sync(store: &mut Store, repo: &Path) -> Result<(u64, Duration)> {
    let mut p = Projector::open(repo, Some(Layout::Dag), false)?;
    let t = Instant::now();
    let r = p.sync(store, &mut |_| {})?;
    Ok((r.commits, t.elapsed()))
}

fn git(args: &[&str], dir: &Path) -> Result<std::process::Output> {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(dir)
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(out)
}

fn du(dir: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.flatten()
            .map(|e| match e.metadata() {
                Ok(m) if m.is_dir() => walk(&e.path()),
                Ok(m) => m.len(),
                Err(_) => 0,
            })
            .sum()
    }
    walk(dir)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// 100,000 nodes over 1,000 sessions, projected from scratch, against
/// `git fast-import` importing the very same commits (exported from the
/// projection with `git fast-export`), in the same run.
pub fn projection() -> Result<Vec<Row>> {
    let dir = Scratch::new("git")?;
    let mut store = dir.store("")?;
    note("filling 1,000 sessions × 100 nodes");
    fill(&mut store, 1000, 100, "agent")?;
    let repo = dir.db().with_file_name("conversations");
    note("projecting (layout dag)");
    let (commits, took) = sync(&mut store, &repo)?;
    let ours = rate(commits, took);
    let size = du(&repo.join("objects"));
    note("git fast-export | git fast-import of the same commits");
    let stream = dir.db().with_file_name("stream.fi");
    let out = git(
        &[
            "fast-export",
            "--all",
            "--reencode=no",
            "--signed-tags=strip",
        ],
        &repo,
    )?;
    std::fs::write(&stream, &out.stdout)?;
    let fi = dir.db().with_file_name("fi.git");
    let init = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&fi)
        .status()?;
    if !init.success() {
        return Err("git init failed".into());
    }
    let t = Instant::now();
    let status = Command::new("git")
        .arg("--git-dir")
        .arg(&fi)
        .args(["fast-import", "--quiet"])
        .stdin(std::fs::File::open(&stream)?)
        .stdout(Stdio::null())
        .status()?;
    let fi_took = t.elapsed();
    if !status.success() {
        return Err("git fast-import failed".into());
    }
    let theirs = rate(commits, fi_took);
    let same = git(
        &["for-each-ref", "--format=%(objectname) %(refname)"],
        &repo,
    )?
    .stdout
        == git(&["for-each-ref", "--format=%(objectname) %(refname)"], &fi)?.stdout;
    if !same {
        return Err("fast-import produced different commits".into());
    }
    let fi_size = du(&fi.join("objects"));
    Ok(vec![
        Row::new(
            "git sync: 100,000 nodes / 1,000 sessions (dag)",
            format!("{} commits/s", thousands(ours)),
            format!("fast-import {} commits/s", thousands(theirs)),
            format!("{:.2}× slower", theirs / ours),
            "≤ 2×",
            Verdict::of(theirs / ours <= 2.0),
        ),
        Row::new(
            "repository size (objects/)",
            mib(size),
            format!("fast-import {}", mib(fi_size)),
            format!("{:.2}×", size as f64 / fi_size.max(1) as f64),
            "—",
            Verdict::Info,
        ),
    ])
}

/// Time per commit of the same 2,000 new nodes (200 new sessions × 10)
/// projected into a repository holding 1 session, and one holding 10,000.
pub fn scaling() -> Result<Vec<Row>> {
    let mut per_commit = Vec::new();
    for existing in [1u64, 10_000] {
        let dir = Scratch::new("gitscale")?;
        let mut store = dir.store("")?;
        note(format!("{existing} session(s) already projected"));
        fill(&mut store, existing, 4, "old")?;
        let repo = dir.db().with_file_name("conversations");
        sync(&mut store, &repo)?;
        fill(&mut store, 200, 10, "new")?;
        let (commits, took) = sync(&mut store, &repo)?;
        per_commit.push(took.as_secs_f64() / commits.max(1) as f64);
    }
    let ratio = per_commit[1] / per_commit[0];
    Ok(vec![Row::new(
        "git sync: cost per commit, 10,000 sessions vs 1",
        format!("{:.1} µs", per_commit[1] * 1e6),
        format!("{:.1} µs", per_commit[0] * 1e6),
        format!("{ratio:.2}×"),
        "≤ 1.5×",
        Verdict::of(ratio <= 1.5),
    )])
}

/// Resets the peak resident set size of this process (Linux).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident set size since the last [`reset_peak`], in bytes.
fn peak() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Imports the commits of `repo` with `git fast-import` into a new
/// repository; returns (time, size of its objects), after checking that it
/// holds the same refs at the same commit ids.
fn fast_import(dir: &Path, repo: &Path, tag: &str) -> Result<(Duration, u64)> {
    let stream = dir.join(format!("{tag}.fi"));
    let out = git(
        &[
            "fast-export",
            "--all",
            "--reencode=no",
            "--signed-tags=strip",
        ],
        repo,
    )?;
    std::fs::write(&stream, &out.stdout)?;
    drop(out);
    let fi = dir.join(format!("{tag}-fi.git"));
    let init = Command::new("git")
        .args(["init", "-q", "--bare"])
        .arg(&fi)
        .status()?;
    if !init.success() {
        return Err("git init failed".into());
    }
    let t = Instant::now();
    let status = Command::new("git")
        .arg("--git-dir")
        .arg(&fi)
        .args(["fast-import", "--quiet"])
        .stdin(std::fs::File::open(&stream)?)
        .stdout(Stdio::null())
        .status()?;
    let took = t.elapsed();
    if !status.success() {
        return Err("git fast-import failed".into());
    }
    let refs = |r: &Path| git(&["for-each-ref", "--format=%(objectname) %(refname)"], r);
    if refs(repo)?.stdout != refs(&fi)?.stdout {
        return Err("fast-import produced different commits".into());
    }
    Ok((took, du(&fi.join("objects"))))
}

/// One session of 10,000 turns (20,000 nodes, one timeline), projected from
/// scratch in batches of 1,000: against `git fast-import` of the same
/// commits, the cost per commit of the last 1,000 nodes against the first
/// 1,000, the repository's size against the store's, peak memory, and
/// `git verify`.
pub fn long_session() -> Result<Vec<Row>> {
    let dir = Scratch::new("gitlong")?;
    let mut store = dir.store("")?;
    note("filling one session of 10,000 turns");
    let ses = store
        .transaction(|l| l.new_session("agent", None, 1_770_000_000_000))?
        .id;
    crate::util::ingest(&mut store, &ses, 0, 20_000, 10_000)?;
    let store_bytes = du(dir.db().parent().ok_or("no scratch dir")?);
    let repo = dir.db().with_file_name("conversations");
    note("projecting (layout dag), batches of 1,000 nodes");
    reset_peak();
    note(format!("resident before the sync: {}", mib(peak())));
    let mut p = Projector::open(&repo, Some(Layout::Dag), false)?;
    p.batch = std::env::var("CONVO_BENCH_BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(1000);
    let mut marks = Vec::new();
    let t = Instant::now();
    let r = p.sync(&mut store, &mut |_| {
        marks.push(t.elapsed());
        if std::env::var_os("CONVO_BENCH_TRACE").is_some() {
            note(format!("{} batches, peak {}", marks.len(), mib(peak())));
        }
    })?;
    let took = t.elapsed();
    let mem = peak();
    drop(p);
    let first = marks.first().copied().unwrap_or_default();
    let last = match marks.as_slice() {
        [.., a, b] => *b - *a,
        _ => first,
    };
    let size = du(&repo.join("objects"));
    note("git fast-export | git fast-import of the same commits");
    let (fi_took, fi_size) = fast_import(dir.db().parent().ok_or("no dir")?, &repo, "long")?;
    note("git verify");
    let t = Instant::now();
    let mut v = Projector::open_readonly(&repo)?;
    let problems = v.verify(&mut store)?;
    let verify_took = t.elapsed();
    if !problems.is_empty() {
        return Err(format!("verify found {} problem(s)", problems.len()).into());
    }
    let ratio = took.as_secs_f64() / fi_took.as_secs_f64().max(1e-9);
    let growth = last.as_secs_f64() / first.as_secs_f64().max(1e-9);
    let size_ratio = size as f64 / store_bytes.max(1) as f64;
    Ok(vec![
        Row::new(
            "git sync: one session of 10,000 turns (dag)",
            format!(
                "{:.2} s ({} commits/s)",
                took.as_secs_f64(),
                thousands(rate(r.commits, took))
            ),
            format!("fast-import {:.2} s", fi_took.as_secs_f64()),
            format!("{ratio:.2}×"),
            "≤ 2×",
            Verdict::of(ratio <= 2.0),
        ),
        Row::new(
            "git sync: cost per commit, last 1,000 nodes vs first 1,000",
            format!("{:.1} µs", last.as_secs_f64() * 1e3),
            format!("{:.1} µs", first.as_secs_f64() * 1e3),
            format!("{growth:.2}×"),
            "≤ 2×",
            Verdict::of(growth <= 2.0),
        ),
        Row::new(
            "repository size (objects/) vs the store's files",
            mib(size),
            format!("store {}, fast-import {}", mib(store_bytes), mib(fi_size)),
            format!("{size_ratio:.2}×"),
            "≤ 4×",
            Verdict::of(size_ratio <= 4.0),
        ),
        Row::new(
            "git sync: peak memory (whole process)",
            mib(mem),
            "—".to_owned(),
            "—".to_owned(),
            "< 500 MiB",
            Verdict::of(mem < 500 << 20),
        ),
        Row::new(
            "git verify: one session of 10,000 turns",
            format!("{:.2} s", verify_took.as_secs_f64()),
            format!("sync {:.2} s", took.as_secs_f64()),
            format!("{:.2}×", verify_took.as_secs_f64() / took.as_secs_f64()),
            "< 5 s",
            Verdict::of(verify_took.as_secs_f64() < 5.0),
        ),
    ])
}

/// One timeline of 100,000 nodes, projected from scratch.
pub fn long_timeline() -> Result<Vec<Row>> {
    let dir = Scratch::new("gitchain")?;
    let mut store = dir.store("")?;
    note("filling one timeline of 100,000 nodes");
    let ses = store
        .transaction(|l| l.new_session("agent", None, 1_770_000_000_000))?
        .id;
    crate::util::ingest(&mut store, &ses, 0, 100_000, 10_000)?;
    let repo = dir.db().with_file_name("conversations");
    note("projecting (layout dag)");
    reset_peak();
    let (commits, took) = sync(&mut store, &repo)?;
    let mem = peak();
    let secs = took.as_secs_f64();
    Ok(vec![
        Row::new(
            "git sync: one timeline of 100,000 nodes (dag)",
            format!("{secs:.1} s ({} commits/s)", thousands(rate(commits, took))),
            "—".to_owned(),
            "—".to_owned(),
            "< 120 s",
            Verdict::of(secs < 120.0),
        ),
        Row::new(
            "git sync: peak memory, 100,000-node timeline",
            mib(mem),
            "—".to_owned(),
            "—".to_owned(),
            "< 1 GiB",
            Verdict::of(mem < 1 << 30),
        ),
    ])
}

/// One session of 10,000 turns in layout `sessions`: each commit's file is
/// the whole history so far, so hashing it grows with the session (see
/// docs/PERFORMANCE.md); measured against layout `dag` in the same run.
pub fn long_session_files() -> Result<Vec<Row>> {
    let dir = Scratch::new("gitfiles")?;
    let mut store = dir.store("")?;
    note("filling one session of 10,000 turns");
    let ses = store
        .transaction(|l| l.new_session("agent", None, 1_770_000_000_000))?
        .id;
    crate::util::ingest(&mut store, &ses, 0, 20_000, 10_000)?;
    let mut took = Vec::new();
    for layout in [Layout::Dag, Layout::Sessions] {
        note(format!("projecting (layout {})", layout.as_str()));
        let repo = dir.db().with_file_name(layout.as_str());
        let mut p = Projector::open(&repo, Some(layout), false)?;
        p.batch = 1000;
        let mut marks = Vec::new();
        let t = Instant::now();
        let r = p.sync(&mut store, &mut |_| marks.push(t.elapsed()))?;
        let all = t.elapsed();
        let first = marks.first().copied().unwrap_or_default();
        let last = match marks.as_slice() {
            [.., a, b] => *b - *a,
            _ => first,
        };
        took.push((all, r.commits, first, last, du(&repo.join("objects"))));
    }
    let (dag, _, _, _, _) = took[0];
    let (all, commits, first, last, size) = took[1];
    Ok(vec![Row::new(
        "git sync: one session of 10,000 turns, layout sessions",
        format!(
            "{:.1} s ({} commits/s), {}; last 1,000 nodes {:.1}× the first",
            all.as_secs_f64(),
            thousands(rate(commits, all)),
            mib(size),
            last.as_secs_f64() / first.as_secs_f64().max(1e-9)
        ),
        format!("dag {:.1} s", dag.as_secs_f64()),
        format!("{:.1}×", all.as_secs_f64() / dag.as_secs_f64().max(1e-9)),
        "—",
        Verdict::Info,
    )])
}
