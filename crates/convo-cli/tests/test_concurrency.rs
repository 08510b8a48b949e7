//! Several processes appending to one store: no lost node, no accidental
//! fork, no `database is locked` reaching the user.

use crate::common::{TestEnv, is_hash};
use std::collections::HashSet;

#[test]
fn eight_processes_append_to_one_branch_and_another() {
    let t = TestEnv::new();
    let s = t.session("a");
    t.run(&["say", &s, "--user", "seed", "--agent", "ok"]).ok();
    let head = t.run(&["log", &s, "-n", "1", "--json"]).json()[0]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&["session", "fork", &s, "--from", &head, "--branch", "side"])
        .ok();
    let turns = 15;
    let input: String = (0..turns)
        .map(|i| format!("{{\"kind\":\"invoke\",\"payload\":\"q{i}\"}}\n{{\"kind\":\"complete\",\"payload\":\"a{i}\"}}\n"))
        .collect();
    let children: Vec<_> = (0..8)
        .map(|i| {
            let branch = if i % 2 == 0 { "main" } else { "side" };
            let mut c = t
                .cmd()
                .args(["ingest", &s, "--branch", branch, "--batch", "2"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = c.stdin.take().unwrap();
            let data = input.clone();
            std::thread::spawn(move || std::io::Write::write_all(&mut stdin, data.as_bytes()));
            (branch, c)
        })
        .collect();
    let mut printed: Vec<(String, String)> = Vec::new();
    for (branch, c) in children {
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a writer failed: {err}");
        assert!(!err.contains("locked"), "{err}");
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            assert!(is_hash(l));
            printed.push((branch.to_owned(), l.to_owned()));
        }
    }
    assert_eq!(printed.len(), 8 * turns * 2);
    for branch in ["main", "side"] {
        let v = t
            .run(&["session", "get", &s, "--branch", branch, "--json"])
            .json();
        let nodes = v["nodes"].as_array().unwrap();
        let on_timeline: HashSet<&str> =
            nodes.iter().map(|n| n["hash"].as_str().unwrap()).collect();
        let extra = if branch == "main" { 2 } else { 3 };
        assert_eq!(
            nodes.len(),
            4 * turns * 2 + extra,
            "{branch}: every append is on the timeline once"
        );
        for w in nodes.windows(2) {
            assert_eq!(w[1]["parent"], w[0]["hash"], "{branch} is a single chain");
        }
        for (b, h) in &printed {
            if b == branch {
                assert!(on_timeline.contains(h.as_str()), "{h} lost from {branch}");
            }
        }
        // Each transaction was a whole turn: every invoke is directly followed by its complete.
        for w in nodes.windows(2) {
            if w[0]["kind"] == "invoke" {
                assert_eq!(w[1]["kind"], "complete");
                assert_eq!(w[0]["submission"], w[1]["submission"]);
            }
        }
    }
    assert!(t.run(&["verify"]).ok().starts_with("ok:"));
}
