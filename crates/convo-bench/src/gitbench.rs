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
            .create_session(&format!("{tag}{}", s % 7), None, 1_770_000_000_000)?
            .id;
        store.append_many(&ses, &main, &drafts(s * per, per))?;
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
