//! A writer killed with SIGKILL mid-stream leaves a store that verifies and
//! holds every node whose hash it printed.

use crate::common::{TestEnv, is_hash};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn sigkill_mid_stream_loses_nothing_that_was_acknowledged_sqlite() {
    sigkill_mid_stream("sqlite");
}

#[test]
fn sigkill_mid_stream_loses_nothing_that_was_acknowledged_postgres() {
    sigkill_mid_stream("postgres");
}

fn sigkill_mid_stream(backend: &str) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let s = t.session("a");
    let mut acknowledged = Vec::new();
    for round in 0..4u32 {
        let mut child = t
            .cmd()
            .args(["ingest", &s, "--batch", &(1 + round * 3).to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let big = "x".repeat(20_000 * (round as usize + 1));
        let writer = std::thread::spawn(move || {
            for i in 0.. {
                let kind = if i % 2 == 0 { "invoke" } else { "complete" };
                let line = format!("{{\"kind\":\"{kind}\",\"payload\":\"{i} {big}\"}}\n");
                if stdin.write_all(line.as_bytes()).is_err() {
                    break;
                }
            }
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let want = 20 + round as usize * 7;
        let mut line = String::new();
        let mut got = 0;
        while got < want {
            line.clear();
            if out.read_line(&mut line).unwrap() == 0 {
                break;
            }
            let h = line.trim();
            assert!(is_hash(h), "{h:?}");
            acknowledged.push(h.to_owned());
            got += 1;
        }
        std::thread::sleep(Duration::from_millis(u64::from(round) * 3));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Whatever was printed between our last read and the kill also counts.
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut rest);
        acknowledged.extend(rest.lines().filter(|l| is_hash(l)).map(str::to_owned));
        let _ = writer.join();
        assert!(
            got == want,
            "round {round}: the writer printed only {got} hashes"
        );
    }
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    let v = t.run(&["session", "get", &s, "--json"]).json();
    let stored: std::collections::HashSet<&str> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["hash"].as_str().unwrap())
        .collect();
    for h in &acknowledged {
        assert!(
            stored.contains(h.as_str()),
            "acknowledged node {h} is missing"
        );
    }
    assert!(stored.len() >= acknowledged.len());
}
