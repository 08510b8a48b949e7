//! The git projection, checked with the real `git`.

use crate::common::TestEnv;
use convo_testutil::git;
use std::path::Path;
use std::process::Command;

fn refs(repo: &Path) -> String {
    git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"])
        + &git(repo, &["symbolic-ref", "HEAD"])
}

/// A session with turns, a service call, state, a fork with its own turns, and a second session.
fn populate(t: &TestEnv) -> (String, String) {
    let s = t.session("researcher");
    t.run(&["state", "put", &s, "k", "v"]).ok();
    t.run(&["say", &s, "--user", "hello", "--agent", "hi"]).ok();
    let fork_point = t.run(&["log", &s, "-n", "1", "--json"]).json()[0]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&["record", &s, "invoke", "--payload", "weather?"])
        .ok();
    t.run(&[
        "record",
        &s,
        "request",
        "--to",
        "infer",
        "--payload",
        "{\"q\":\"weather\"}",
    ])
    .ok();
    t.run(&[
        "record",
        &s,
        "response",
        "--from",
        "infer",
        "--payload",
        "sunny",
        "--diagnostics",
        "{\"status\":200,\"x\":null}",
    ])
    .ok();
    t.run(&["record", &s, "complete", "--payload", "It is sunny."])
        .ok();
    t.run(&[
        "session",
        "fork",
        &s,
        "--from",
        &fork_point,
        "--branch",
        "retry",
    ])
    .ok();
    t.run(&[
        "say",
        &s,
        "--branch",
        "retry",
        "--user",
        "weather, briefly?",
        "--agent",
        "Sunny.",
    ])
    .ok();
    let other = t.session("other");
    t.run(&["say", &other, "--user", "x", "--agent", "y"]).ok();
    (s, other)
}

#[test]
fn dag_layout_is_fsck_clean_and_readable_with_git_tools() {
    let t = TestEnv::new();
    let (s, _) = populate(&t);
    let out = t.run(&["git", "sync"]).ok();
    assert!(out.starts_with("11 nodes, 11 commits"), "{out}");
    let repo = t.home().join("conversations");
    git(&repo, &["fsck", "--strict"]);
    // Subjects and trailers.
    let subjects = git(
        &repo,
        &["log", "--reverse", "--format=%s", &format!("{s}/main")],
    );
    let subjects: Vec<&str> = subjects.lines().collect();
    assert_eq!(subjects.len(), 6);
    assert_eq!(subjects[0], "invoke: cli → researcher");
    assert_eq!(subjects[3], "request: researcher → infer");
    assert_eq!(subjects[4], "response: infer → researcher");
    let body = git(&repo, &["log", "-1", "--format=%B", &format!("{s}/main")]);
    let parsed = Command::new("git")
        .args(["interpret-trailers", "--parse"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            std::io::Write::write_all(c.stdin.as_mut().unwrap(), body.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let trailers = String::from_utf8_lossy(&parsed.stdout);
    let head = t.run(&["log", &s, "-n", "1", "--json"]).json()[0].clone();
    assert!(trailers.contains(&format!("Session: {s}")), "{trailers}");
    assert!(
        trailers.contains(&format!("Node: {}", head["hash"].as_str().unwrap())),
        "{trailers}"
    );
    assert!(
        trailers.contains(&format!(
            "Submission: {}",
            head["submission"].as_str().unwrap()
        )),
        "{trailers}"
    );
    assert!(
        trailers.contains(&format!("State: {}", head["state"].as_str().unwrap())),
        "{trailers}"
    );
    // git diff main...retry shows exactly the fork's messages.
    let diff = git(
        &repo,
        &["diff", "--name-only", &format!("{s}/main...{s}/retry")],
    );
    // Paths are {group of 10,000}/{group of 100}/{message}/{field}.
    let dirs: std::collections::BTreeSet<&str> =
        diff.lines().map(|l| l.split('/').nth(2).unwrap()).collect();
    assert_eq!(dirs.len(), 3, "{diff}");
    assert!(
        dirs.iter().any(|d| d.ends_with("-platform-fork")),
        "{dirs:?}"
    );
    assert!(
        dirs.iter().any(|d| d.ends_with("-cli-invoke"))
            && dirs.iter().any(|d| d.ends_with("-researcher-complete"))
    );
    // A checkout gives the files the layout promises.
    let wt = t.home().join("checkout");
    let out = Command::new("git")
        .args(["clone", "-q", "-b", &format!("{s}/main")])
        .arg(&repo)
        .arg(&wt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(wt.join("agent.toml").exists());
    let group = wt.join("000001-010000").join("000001-000100");
    let mut names: Vec<String> = std::fs::read_dir(&group)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names.len(),
        subjects.len(),
        "every message of main, in one group: {names:?}"
    );
    assert!(names[0].ends_with("-cli-invoke"), "{names:?}");
    let response = names
        .iter()
        .find(|n| n.ends_with("-infer-response"))
        .unwrap();
    let d = group.join(response);
    assert_eq!(std::fs::read(d.join("payload")).unwrap(), b"sunny");
    assert_eq!(
        std::fs::read_to_string(d.join("kind")).unwrap(),
        "response\n"
    );
    assert_eq!(std::fs::read_to_string(d.join("sequence")).unwrap(), "1\n");
    let toml = std::fs::read_to_string(d.join("diagnostics.toml")).unwrap();
    assert!(toml.contains("status = 200"), "{toml}");
    assert!(t.run(&["git", "verify"]).ok().starts_with("ok:"));
}

#[test]
fn sync_is_incremental_and_equals_a_rebuild() {
    let t = TestEnv::new();
    let (s, _) = populate(&t);
    let repo = t.home().join("conversations");
    t.run(&["git", "sync"]).ok();
    let packs_before = std::fs::read_dir(repo.join("objects/pack"))
        .unwrap()
        .count();
    t.run(&["say", &s, "--user", "more", "--agent", "sure"])
        .ok();
    t.run(&["session", "promote", &s, "--branch", "retry"]).ok();
    let out = t.run(&["git", "sync"]).ok();
    assert!(out.starts_with("3 nodes, 3 commits"), "{out}");
    assert!(
        t.run(&["git", "sync"]).ok().starts_with("0 nodes"),
        "nothing is written twice"
    );
    assert!(
        std::fs::read_dir(repo.join("objects/pack"))
            .unwrap()
            .count()
            > packs_before
    );
    let loose = std::fs::read_dir(repo.join("objects"))
        .unwrap()
        .filter(|e| {
            let n = e.as_ref().unwrap().file_name();
            n.len() == 2
        });
    assert_eq!(loose.count(), 0, "no loose objects");
    let incremental = refs(&repo);
    assert!(incremental.contains("/broken-"), "{incremental}");
    assert!(
        !incremental.contains("/retry "),
        "the promoted branch was renamed: {incremental}"
    );
    let rebuilt = t.home().join("rebuilt");
    t.run(&["git", "sync", "--repo", rebuilt.to_str().unwrap()])
        .ok();
    assert_eq!(refs(&rebuilt), incremental);
    t.run(&["git", "sync", "--rebuild"]).ok();
    assert_eq!(
        refs(&repo),
        incremental,
        "--rebuild yields the same commit ids"
    );
    assert!(t.run(&["git", "verify"]).ok().starts_with("ok:"));
}

#[test]
fn sessions_layout_matches_the_seed_schema() {
    let t = TestEnv::new();
    let (s, _) = populate(&t);
    let repo = t.home().join("sess");
    t.run(&[
        "git",
        "sync",
        "--layout",
        "sessions",
        "--repo",
        repo.to_str().unwrap(),
    ])
    .ok();
    git(&repo, &["fsck", "--strict"]);
    let files = git(&repo, &["ls-tree", "--name-only", &format!("{s}/main")]);
    let file = files.trim();
    let short = &s[4..12];
    assert!(
        file.ends_with(&format!("_researcher_{short}.json")),
        "{file}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&git(&repo, &["show", &format!("{s}/main:{file}")])).unwrap();
    assert_eq!(json["open"], serde_json::Value::Null);
    assert_eq!(json["session"], s.as_str());
    assert_eq!(json["agent"], "researcher");
    let history = json["history"].as_array().unwrap();
    assert_eq!(history.len(), 4);
    assert_eq!(history[2]["user"], "weather?");
    assert_eq!(history[3]["agent"], "It is sunny.");
    let sub = history[2]["submission"].as_str().unwrap();
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", sub]).trim(),
        "user"
    );
    let agent_msg = git(&repo, &["log", "-1", "--format=%B", &format!("{s}/main")]);
    assert!(
        agent_msg.starts_with("agent\n\nIt is sunny."),
        "{agent_msg}"
    );
    assert!(
        agent_msg.contains(&format!("Submission: {sub}")),
        "{agent_msg}"
    );
    let branches = git(
        &repo,
        &[
            "for-each-ref",
            "--format=%(refname:short)",
            &format!("refs/heads/{s}/"),
        ],
    );
    assert!(
        branches
            .lines()
            .any(|b| b.starts_with(&format!("{s}/fork-"))),
        "{branches}"
    );
    assert!(
        t.run(&["git", "verify", "--repo", repo.to_str().unwrap()])
            .ok()
            .starts_with("ok:")
    );
    let wrong = t.run(&[
        "git",
        "sync",
        "--layout",
        "dag",
        "--repo",
        repo.to_str().unwrap(),
    ]);
    assert_eq!(wrong.code(), 2);
    assert!(wrong.stderr().contains("sessions"), "{}", wrong.stderr());
}

#[test]
fn hostile_names_never_escape_or_break_refs() {
    let t = TestEnv::new();
    let s = t
        .run(&[
            "session",
            "new",
            "--agent",
            "../../etc/passwd",
            "--title",
            "a/b\n..",
        ])
        .ok();
    for from in [
        "a/b",
        "..",
        "-rf",
        ".git",
        "ünïcødé",
        "x y\tz",
        "a\u{1}b",
        "<evil@x>",
    ] {
        t.run(&[
            "record",
            &s,
            "invoke",
            &format!("--from={from}"),
            "--payload",
            "p",
        ])
        .ok();
        t.run(&[
            "record",
            &s,
            "complete",
            &format!("--to={from}"),
            "--payload",
            "q",
        ])
        .ok();
    }
    let head = t.run(&["log", &s, "-n", "1", "--json"]).json()[0]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&[
        "session",
        "fork",
        &s,
        "--from",
        &head,
        "--branch",
        "ünï.x-1",
    ])
    .ok();
    t.run(&[
        "say",
        &s,
        "--branch",
        "ünï.x-1",
        "--user",
        "u",
        "--agent",
        "a",
    ])
    .ok();
    for layout in ["dag", "sessions"] {
        let repo = t.home().join(format!("repo-{layout}"));
        t.run(&[
            "git",
            "sync",
            "--layout",
            layout,
            "--repo",
            repo.to_str().unwrap(),
        ])
        .ok();
        git(&repo, &["fsck", "--strict"]);
        let tree = git(
            &repo,
            &["ls-tree", "-r", "--name-only", &format!("{s}/main")],
        );
        for path in tree.lines() {
            assert!(
                !path
                    .split('/')
                    .any(|c| c == ".." || c == "." || c == ".git" || c.is_empty()),
                "{path}"
            );
            assert!(!path.starts_with('-'), "{path}");
        }
        let refs = git(&repo, &["for-each-ref", "--format=%(refname)"]);
        let fork = if layout == "dag" {
            "/ünï.x-1"
        } else {
            "/fork-"
        };
        assert!(refs.lines().any(|r| r.contains(fork)), "{refs}");
    }
    // 8 different senders at possibly the same millisecond never collide silently.
    let repo = t.home().join("repo-dag");
    let tree = git(
        &repo,
        &[
            "ls-tree",
            "--name-only",
            &format!("{s}/main:000001-010000/000001-000100"),
        ],
    );
    assert_eq!(
        tree.lines().filter(|l| l.ends_with("-invoke")).count(),
        8,
        "{tree}"
    );
}

/// Six sessions of 60 nodes, one with a fork that is promoted (refs are
/// deleted and renamed), so a sync in batches of 17 writes 22 packs and
/// consolidates them.
fn populate_many(t: &TestEnv) {
    let sessions: Vec<String> = (0..6).map(|i| t.session(&format!("agent{i}"))).collect();
    for s in &sessions {
        let input: String = (0..30)
            .map(|i| format!("{{\"kind\":\"invoke\",\"payload\":\"q{i}\"}}\n{{\"kind\":\"complete\",\"payload\":\"a{i}\"}}\n"))
            .collect();
        t.run_stdin(&["ingest", s, "--batch", "60"], input.as_bytes())
            .ok();
    }
    let s = &sessions[2];
    let head = t.run(&["log", s, "-n", "3", "--json"]).json()[2]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&["session", "fork", s, "--from", &head, "--branch", "b"])
        .ok();
    t.run(&["say", s, "--branch", "b", "--user", "u", "--agent", "a"])
        .ok();
    t.run(&["session", "promote", s, "--branch", "b"]).ok();
}

fn any_lock(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        let p = e.path();
        if p.is_dir() {
            any_lock(&p)
        } else {
            p.extension().is_some_and(|x| x == "lock") && !p.ends_with("convo/lock")
        }
    })
}

#[test]
fn sigkill_at_any_point_then_resume_equals_a_clean_rebuild() {
    use std::io::BufRead;
    let t = TestEnv::new();
    populate_many(&t);
    for layout in ["dag", "sessions"] {
        let clean = t.home().join(format!("clean-{layout}"));
        let clean_s = clean.to_str().unwrap();
        t.run(&["git", "sync", "--layout", layout, "--repo", clean_s])
            .ok();
        let want = refs(&clean);
        let repo = t.home().join(format!("killed-{layout}"));
        let repo_s = repo.to_str().unwrap();
        // Killed exactly at each step of a batch, and of a consolidation.
        for (point, n) in [
            ("pack-written", 2),
            ("refs-locked", 1),
            ("refs-locked", 5),
            ("refs-moved", 3),
            ("map-saved", 4),
            ("repack-written", 1),
            ("repack-removing", 1),
        ] {
            let _ = std::fs::remove_dir_all(&repo);
            let mut child = t
                .cmd()
                .args(["git", "sync", "--layout", layout, "--batch", "17"])
                .args(["--repo", repo_s])
                .env("CONVO_GIT_PAUSE_AT", format!("{point}:{n}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let err = child.stderr.take().unwrap();
            let paused = std::io::BufReader::new(err)
                .lines()
                .map_while(Result::ok)
                .any(|l| l.contains("paused at"));
            let _ = child.kill(); // SIGKILL
            child.wait().unwrap();
            assert!(paused, "{layout}: the sync never reached {point} #{n}");
            if point == "refs-locked" {
                assert!(any_lock(&repo), "{layout}: no ref lock left at {point}");
            }
            // A second sync while nothing runs is not refused, and resumes.
            let out = t
                .run(&["git", "sync", "--batch", "17", "--repo", repo_s])
                .ok();
            assert!(!out.starts_with("0 nodes"), "{out}");
            git(&repo, &["fsck", "--strict"]);
            assert_eq!(refs(&repo), want, "{layout}, killed at {point} #{n}");
            assert!(!any_lock(&repo), "{layout}: a lock survived {point}");
            assert!(
                t.run(&["git", "verify", "--repo", repo_s])
                    .ok()
                    .starts_with("ok:")
            );
        }
        // And at arbitrary moments of syncs that continue each other.
        let _ = std::fs::remove_dir_all(&repo);
        for delay in [20u64, 60, 150, 300] {
            let mut child = t
                .cmd()
                .args(["git", "sync", "--layout", layout, "--batch", "7"])
                .args(["--repo", repo_s])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(delay));
            let _ = child.kill();
            child.wait().unwrap();
        }
        t.run(&["git", "sync", "--repo", repo_s]).ok();
        git(&repo, &["fsck", "--strict"]);
        assert_eq!(refs(&repo), want, "{layout}, after timed kills");
    }
}

#[test]
fn a_second_sync_is_refused_clearly_while_one_runs() {
    use std::io::BufRead;
    let t = TestEnv::new();
    let s = t.session("a");
    t.run(&["say", &s, "--user", "ping", "--agent", "pong"])
        .ok();
    let mut follower = t
        .cmd()
        .args(["git", "sync", "--follow"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let first = std::io::BufReader::new(out).lines().next();
    assert!(first.is_some_and(|l| l.unwrap().starts_with("2 nodes")));
    let second = t.run(&["git", "sync"]);
    assert_eq!(second.code(), 2);
    assert!(
        second.stderr().contains(&format!(
            "another `convo git sync` (process {}) is updating",
            follower.id()
        )),
        "{}",
        second.stderr()
    );
    // A reader is not refused.
    assert!(t.run(&["git", "verify"]).ok().starts_with("ok:"));
    let _ = follower.kill();
    follower.wait().unwrap();
    // The dead follower's lock is recognised as such.
    assert!(t.run(&["git", "sync"]).ok().starts_with("0 nodes"));
}

#[test]
fn times_before_1970_become_dates_git_accepts_and_stay_exact() {
    let t = TestEnv::new();
    let file = t.home().join("old.convo");
    std::fs::create_dir_all(t.home()).unwrap();
    std::fs::write(
        &file,
        "### @ada\nHello.\n\n### @bot\nHi.\n\n----\n{\"type\":\"dialog\",\"time\":\"1969-12-31T23:59:59Z\",\"participants\":[\"ada\",{\"name\":\"bot\",\"generative\":true}]}\n",
    )
    .unwrap();
    t.run(&["import", file.to_str().unwrap()]).ok();
    for layout in ["dag", "sessions"] {
        let repo = t.home().join(format!("r-{layout}"));
        let r = repo.to_str().unwrap();
        t.run(&["git", "sync", "--layout", layout, "--repo", r])
            .ok();
        git(&repo, &["fsck", "--strict"]);
        let log = git(&repo, &["log", "--all", "--format=%at %B"]);
        assert!(log.starts_with("0 "), "{log}");
        assert!(log.contains("Time: 1969-12-31T23:59:59"), "{log}");
        assert!(
            t.run(&["git", "verify", "--repo", r])
                .ok()
                .starts_with("ok:")
        );
    }
    let repo = t.home().join("r-dag");
    let files = git(&repo, &["ls-tree", "-r", "--name-only", "HEAD"]);
    let created = files.lines().find(|l| l.ends_with("/created_at")).unwrap();
    assert_eq!(
        git(&repo, &["show", &format!("HEAD:{created}")]),
        "1969-12-31T23:59:59.000Z\n"
    );
}

#[test]
fn a_projection_in_the_old_layout_is_detected_and_rebuilt() {
    let t = TestEnv::new();
    populate(&t);
    t.run(&["git", "sync"]).ok();
    let repo = t.home().join("conversations");
    let want = refs(&repo);
    // What convo 0.1 wrote: the layout's name alone.
    std::fs::write(repo.join("convo/layout"), "dag\n").unwrap();
    git(&repo, &["config", "remote.backup.url", "/nowhere"]);
    let v = t.run(&["git", "verify"]);
    assert_eq!(v.code(), 2);
    assert!(v.stderr().contains("version 1"), "{}", v.stderr());
    assert!(v.stderr().contains("convo git sync"), "{}", v.stderr());
    let r = t.run(&["git", "sync"]);
    assert!(r.stderr().starts_with("note: "), "{}", r.stderr());
    assert!(r.stderr().contains("rebuilt"), "{}", r.stderr());
    assert!(r.ok().starts_with("11 nodes, 11 commits"));
    assert_eq!(refs(&repo), want);
    assert_eq!(
        git(&repo, &["config", "remote.backup.url"]).trim(),
        "/nowhere",
        "the user's config is kept"
    );
    assert!(t.run(&["git", "verify"]).ok().starts_with("ok:"));
}

#[test]
fn follow_projects_new_nodes_within_a_second_and_verify_finds_drift() {
    let t = TestEnv::new();
    let s = t.session("a");
    let mut child = t
        .cmd()
        .args(["git", "sync", "--follow"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let repo = t.home().join("conversations");
    std::thread::sleep(std::time::Duration::from_millis(400));
    t.run(&["say", &s, "--user", "ping", "--agent", "pong"])
        .ok();
    let appended = std::time::Instant::now();
    let name = format!("refs/heads/{s}/main");
    let mut seen = false;
    while appended.elapsed() < std::time::Duration::from_secs(5) {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&repo)
            .args(["rev-parse", "--verify", "-q", &name])
            .output()
            .unwrap();
        if out.status.success() {
            seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let took = appended.elapsed();
    let _ = child.kill();
    child.wait().unwrap();
    assert!(
        seen,
        "the follower did not project the new node within {took:?}"
    );
    // The kill may land between moving refs and saving the cursor; the next
    // sync redoes that batch, then the repository matches the store.
    t.run(&["git", "sync"]).ok();
    assert!(t.run(&["git", "verify"]).ok().starts_with("ok:"));
    // Drift: move the branch to another commit behind convo's back.
    let first = git(&repo, &["rev-list", "--max-parents=0", &name]);
    git(&repo, &["update-ref", &name, first.trim()]);
    let r = t.run(&["git", "verify"]);
    assert_eq!(r.code(), 1, "{}", r.stdout());
    assert!(r.stdout().contains(&name), "{}", r.stdout());
    // Each problem typed, as `verify --json` types the store's: the moved
    // ref is a mismatch; a node not projected yet is the repository behind.
    let problems = |t: &TestEnv| {
        let v = t.run(&["git", "verify", "--json"]);
        assert_eq!(v.code(), 1);
        let v: serde_json::Value = serde_json::from_str(&v.stdout()).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["rewritten"], false);
        v["problems"].as_array().unwrap().clone()
    };
    let found = problems(&t);
    let moved = found.iter().find(|p| p["kind"] == "mismatch");
    let moved = moved.unwrap_or_else(|| panic!("{found:?}"));
    assert!(
        moved["object"].as_str().unwrap().starts_with("branch "),
        "{moved}"
    );
    assert!(moved["reason"].as_str().unwrap().contains(&name), "{moved}");
    t.run(&["say", &s, "--user", "again", "--agent", "pong"])
        .ok();
    let found = problems(&t);
    assert!(found.iter().any(|p| p["kind"] == "behind"), "{found:?}");
}

/// Every object of the repository, decompressed (packs are zlib-compressed,
/// so a secret would not show up in their raw bytes).
fn all_objects(repo: &Path) -> String {
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["cat-file", "--batch-all-objects", "--batch", "--unordered"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `convo redact` end to end: the chain verifies, every reader shows the
/// tombstone, and the projection rewrites only the refs whose history held
/// the secret, after which no object of the repository holds it.
fn redaction_is_a_tombstone_everywhere(layout: &str) {
    let t = TestEnv::new();
    let (s, other) = populate(&t);
    let secret = "sk-live-7f3a9c1e0b-redact-me";
    t.run(&[
        "say",
        &s,
        "--user",
        &format!("my key is {secret}"),
        "--agent",
        "noted",
    ])
    .ok();
    t.run(&["say", &s, "--user", "thanks", "--agent", "welcome"])
        .ok();
    let repo = t.home().join("repo");
    let r = repo.to_str().unwrap();
    t.run(&["git", "sync", "--repo", r, "--layout", layout])
        .ok();
    let before = refs(&repo);
    assert!(all_objects(&repo).contains(secret));
    let log = t.run(&["log", &s, "-n", "4", "--json"]).json();
    let invoke = log[3]["hash"].as_str().unwrap().to_owned();

    let out = t
        .run(&[
            "redact",
            &invoke[..12],
            "--reason",
            "a leaked API key",
            "--by",
            "alice",
        ])
        .ok();
    assert!(out.starts_with("redacted payload"), "{out}");
    assert!(out.contains("by alice: a leaked API key]"), "{out}");
    let again = t.run(&["redact", &invoke, "--reason", "twice"]);
    assert_eq!(again.code(), 2);
    assert!(
        again.stderr().contains("already redacted"),
        "{}",
        again.stderr()
    );

    let v = t.run(&["verify"]).ok();
    assert!(v.contains("1 payload(s) redacted"), "{v}");
    let shown = t.run(&["show", &invoke]).ok();
    assert!(shown.contains("a leaked API key"), "{shown}");
    assert!(shown.contains("redacted "), "{shown}");
    let json = t.run(&["show", &invoke, "--json"]).json();
    assert_eq!(
        json["hash"].as_str(),
        Some(invoke.as_str()),
        "the hash stays"
    );
    let turn = t.run(&["turn", &s, &invoke]).ok();
    let md = t.run(&["export", &s, "--format", "markdown"]).ok();
    let convo = t.run(&["export", &s, "--format", "convo"]).ok();
    let session = t.run(&["session", "get", &s]).ok();
    for text in [&shown, &turn, &md, &convo, &session, &json.to_string()] {
        assert!(!text.contains(secret), "the secret leaked: {text}");
        assert!(text.contains("[redacted "), "no tombstone: {text}");
    }
    let srv = crate::serve_util::Server::start(&t, &[]);
    let page = srv.get(&format!("/sessions/{s}"));
    let html = String::from_utf8_lossy(&page.body).into_owned();
    assert_eq!(page.status, 200);
    assert!(
        html.contains("a leaked API key") && !html.contains(secret),
        "{html}"
    );
    let raw = srv.get(&format!("/api/v1/nodes/{invoke}/payload"));
    assert!(String::from_utf8_lossy(&raw.body).starts_with("[redacted "));
    srv.stop();

    // The projection bears the old bytes until its next sync says so.
    let gv = t.run(&["git", "verify", "--repo", r]);
    assert_eq!(gv.code(), 1, "{}", gv.stdout());
    assert!(gv.stdout().contains("redacted"), "{}", gv.stdout());
    let sync = t.run(&["git", "sync", "--repo", r]);
    sync.ok();
    let main_ref = format!("refs/heads/{s}/main");
    assert!(
        sync.stderr().contains("1 ref(s) rewritten") && sync.stderr().contains(&main_ref),
        "{}",
        sync.stderr()
    );
    let after = refs(&repo);
    let changed: Vec<&str> = after
        .lines()
        .filter(|l| !before.lines().any(|b| b == *l))
        .collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with(&main_ref), "{changed:?}");
    assert!(after.contains(&format!("refs/heads/{other}/main")));
    assert!(
        t.run(&["git", "verify", "--repo", r])
            .ok()
            .starts_with("ok:")
    );
    git(&repo, &["fsck", "--strict"]);
    git(&repo, &["gc", "--prune=now", "--quiet"]);
    let objects = all_objects(&repo);
    assert!(
        !objects.contains(secret),
        "the repository still holds the secret"
    );
    assert!(
        objects.contains("a leaked API key"),
        "the tombstone is projected"
    );
    // Nothing further to rewrite.
    let quiet = t.run(&["git", "sync", "--repo", r]);
    assert!(quiet.ok().starts_with("0 nodes"));
    assert!(!quiet.stderr().contains("rewritten"));
}

#[test]
fn redaction_is_a_tombstone_everywhere_dag() {
    redaction_is_a_tombstone_everywhere("dag");
}

#[test]
fn redaction_is_a_tombstone_everywhere_sessions() {
    redaction_is_a_tombstone_everywhere("sessions");
}

/// A store rolled back behind convo's back (its last node deleted, the
/// head moved to the node before): the projection says so, names the
/// node, exits 1, never hints at `--rebuild`, and refuses `--rebuild`
/// without `--force`, keeping the evidence.
#[test]
fn the_projection_witnesses_a_rolled_back_store() {
    let t = TestEnv::new();
    let (_, other) = populate(&t);
    let repo = t.home().join("conversations");
    t.run(&["git", "sync"]).ok();
    let want = refs(&repo);
    let log = t.run(&["log", &other, "--json"]).json();
    let (tip, prev) = (
        log[0]["hash"].as_str().unwrap().to_owned(),
        log[1]["hash"].as_str().unwrap().to_owned(),
    );
    let c = rusqlite::Connection::open(t.db()).unwrap();
    let hex = |h: &str| format!("x'{h}'");
    c.execute_batch(&format!(
        "DELETE FROM nodes WHERE hash = {}; \
         UPDATE branches SET head = {} WHERE session = '{other}'; \
         UPDATE session_runs SET last = last - 1 WHERE session = '{other}';",
        hex(&tip),
        hex(&prev)
    ))
    .unwrap();
    drop(c);
    for args in [&["git", "verify"][..], &["git", "sync"][..]] {
        let r = t.run(args);
        assert_eq!(r.code(), 1, "{args:?}: {}{}", r.stdout(), r.stderr());
        let said = r.stdout() + &r.stderr();
        assert!(said.contains("history was rewritten"), "{said}");
        assert!(said.contains(&tip), "the node is named: {said}");
        assert!(!said.contains("--rebuild"), "{said}");
    }
    let r = t.run(&["git", "sync", "--rebuild"]);
    assert_eq!(r.code(), 1, "{}", r.stderr());
    assert!(r.stderr().contains("refusing to rebuild"), "{}", r.stderr());
    assert_eq!(refs(&repo), want, "the evidence is kept");
    assert!(
        git(
            &repo,
            &[
                "cat-file",
                "-t",
                want.lines()
                    .find(|l| l.contains(&other))
                    .unwrap()
                    .split(' ')
                    .nth(1)
                    .unwrap()
            ]
        )
        .contains("commit")
    );
    t.run(&["git", "sync", "--rebuild", "--force"]).ok();
    assert_ne!(refs(&repo), want);
    assert!(t.run(&["git", "verify"]).ok().starts_with("ok:"));
}

fn checkpoint_tags(repo: &Path) -> String {
    git(
        repo,
        &[
            "for-each-ref",
            "--format=%(refname) %(objectname) %(objecttype)",
            "refs/tags/convo/checkpoint/",
        ],
    )
}

/// `convo checkpoint --git` publishes signed checkpoints as annotated tags
/// in the conversations repository: fsck-clean, kept by `git gc`, by a
/// further `git sync`, by the rewrite after a redaction and by `--rebuild`
/// (same ids); `git verify` checks the store against every one of them and
/// names a rollback of history the projection never saw.
#[test]
fn published_checkpoints_survive_gc_and_sync_and_witness_a_rollback() {
    let t = TestEnv::new();
    let (s, other) = populate(&t);
    let repo = t.home().join("conversations");
    let r = repo.to_str().unwrap();
    let no_repo = t.run(&["checkpoint", "--git"]);
    assert_eq!(no_repo.code(), 2, "{}", no_repo.stderr());
    assert!(
        no_repo.stderr().contains("convo git sync"),
        "{}",
        no_repo.stderr()
    );
    t.run(&["git", "sync"]).ok();
    let said = t.run(&["checkpoint", "--git"]);
    said.ok();
    assert!(
        said.stderr()
            .contains("published as refs/tags/convo/checkpoint/"),
        "{}",
        said.stderr()
    );
    let tags = checkpoint_tags(&repo);
    assert_eq!(tags.lines().count(), 1, "{tags}");
    assert!(tags.trim_end().ends_with(" tag"), "annotated: {tags}");
    let name = tags.split(' ').next().unwrap().to_owned();
    // Its message is the signed checkpoint, readable with git alone.
    let shown = git(&repo, &["cat-file", "-p", &name]);
    assert!(
        shown.contains("\"format\": \"convo.checkpoint.v1\""),
        "{shown}"
    );
    assert!(shown.contains("\"signature\""), "{shown}");
    git(&repo, &["fsck", "--strict"]);
    git(&repo, &["gc", "--prune=now", "--quiet"]);
    assert_eq!(checkpoint_tags(&repo), tags, "git gc keeps it");
    t.run(&["say", &s, "--user", "more", "--agent", "yes"]).ok();
    t.run(&["git", "sync", "--repo", r]).ok();
    assert_eq!(checkpoint_tags(&repo), tags, "git sync keeps it");
    // A redaction makes the next sync rewrite the projection: kept.
    let log = t.run(&["log", &other, "--json"]).json();
    let first = log[1]["hash"].as_str().unwrap().to_owned();
    t.run(&["redact", &first, "--reason", "test"]).ok();
    t.run(&["git", "sync"]).ok();
    assert_eq!(checkpoint_tags(&repo), tags, "a redaction rewrite keeps it");
    // A sync killed while the repository is empty for a redaction
    // rewrite: the next one writes the checkpoint back.
    let log = t.run(&["log", &s, "--json"]).json();
    let n = log.as_array().unwrap().len();
    let oldest = log[n - 1]["hash"].as_str().unwrap().to_owned();
    t.run(&["redact", &oldest, "--reason", "test 2"]).ok();
    let mut child = t
        .cmd()
        .args(["git", "sync"])
        .env("CONVO_GIT_PAUSE_AT", "cleared:1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let paused = std::io::BufRead::lines(std::io::BufReader::new(child.stderr.take().unwrap()))
        .map_while(Result::ok)
        .any(|l| l.contains("paused at cleared"));
    let _ = child.kill();
    child.wait().unwrap();
    assert!(paused);
    assert!(!repo.join("refs").exists(), "the repository was emptied");
    assert!(repo.join("convo/checkpoints-saved").exists());
    t.run(&["git", "sync"]).ok();
    assert_eq!(checkpoint_tags(&repo), tags, "a killed rewrite keeps it");
    t.run(&["git", "sync", "--rebuild"]).ok();
    assert_eq!(checkpoint_tags(&repo), tags, "--rebuild keeps it");
    git(&repo, &["fsck", "--strict"]);
    let ok = t.run(&["git", "verify"]).ok();
    assert!(ok.contains("extends 1 published checkpoint(s)"), "{ok}");

    // Two turns the projection never sees, a checkpoint published, then
    // both turns removed consistently behind convo's back.
    t.run(&["say", &other, "--user", "p", "--agent", "q"]).ok();
    let log = t.run(&["log", &other, "-n", "3", "--json"]).json();
    let tip = log[0]["hash"].as_str().unwrap().to_owned();
    let back = log[2]["hash"].as_str().unwrap().to_owned();
    t.run(&["checkpoint", "--git", r]).ok();
    assert_eq!(checkpoint_tags(&repo).lines().count(), 2);
    let c = rusqlite::Connection::open(t.db()).unwrap();
    let end: i64 = c
        .query_row("SELECT max(seq) FROM nodes", [], |r| r.get(0))
        .unwrap();
    c.execute_batch(&format!(
        "DELETE FROM nodes WHERE seq > {cut}; \
         DELETE FROM session_runs WHERE first > {cut}; \
         UPDATE branches SET head = x'{back}' WHERE session = '{other}' AND name = 'main';",
        cut = end - 2
    ))
    .unwrap();
    drop(c);
    let alone = t.run(&["verify"]);
    assert!(
        alone.out.status.success(),
        "verify alone is blind: {}",
        alone.stdout()
    );
    let v = t.run(&["git", "verify"]);
    assert_eq!(v.code(), 1, "{}{}", v.stdout(), v.stderr());
    let out = v.stdout();
    assert!(
        out.contains("(against refs/tags/convo/checkpoint/"),
        "{out}"
    );
    assert!(out.contains("truncated"), "{out}");
    assert!(out.contains(&format!("branch {other}/main")), "{out}");
    assert!(out.contains(&tip), "the lost head is named: {out}");
    assert!(!out.contains("--rebuild") && !v.stderr().contains("--rebuild"));
    // And the same from the files: `verify --checkpoint` agrees.
    let dir = t.home().join("cps");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, line) in checkpoint_tags(&repo).lines().enumerate() {
        let name = line.split(' ').next().unwrap();
        let blob = git(&repo, &["cat-file", "blob", &format!("{name}^{{blob}}")]);
        std::fs::write(dir.join(format!("{i}.checkpoint")), blob).unwrap();
    }
    let f = t.run(&["verify", "--checkpoint", dir.to_str().unwrap()]);
    assert_eq!(f.code(), 1);
    assert!(f.stdout().contains("truncated"), "{}", f.stdout());
}

/// A sync killed after it made `convo/` (and its lock) but before it wrote
/// the layout marker left a skeleton the next sync refused to open ("convo/
/// layout: No such file"); it now creates the projection anew, in the
/// layout asked for then.
#[test]
fn a_skeleton_left_by_a_kill_before_the_layout_marker_is_created_anew() {
    let t = TestEnv::new();
    populate_many(&t);
    let clean = t.home().join("clean");
    t.run(&[
        "git",
        "sync",
        "--layout",
        "sessions",
        "--repo",
        clean.to_str().unwrap(),
    ])
    .ok();
    let repo = t.home().join("skeleton");
    std::fs::create_dir_all(repo.join("convo")).unwrap();
    std::fs::write(repo.join("convo").join("lock"), b"").unwrap();
    let repo_s = repo.to_str().unwrap();
    t.run(&["git", "sync", "--layout", "sessions", "--repo", repo_s])
        .ok();
    git(&repo, &["fsck", "--strict"]);
    assert_eq!(refs(&repo), refs(&clean));
    assert!(
        t.run(&["git", "verify", "--repo", repo_s])
            .ok()
            .starts_with("ok:")
    );
}
