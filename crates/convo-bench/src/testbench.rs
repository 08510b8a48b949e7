//! `convo test` of 100 recordings of 10 calls each: the whole run of the
//! `convo` binary next to this one (`--file convo.toml`, 100 tests) against
//! the same 100 programs (a shell loop of 10 `curl` calls, each resending
//! the conversation so far) run one after another straight against the
//! upstream. What `convo test` adds is the difference.

use crate::proxybench::{recording_proxy, serve};
use crate::util::{Result, Row, Scratch, Verdict};
use axum::routing::post;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const RECORDINGS: usize = 100;
const CALLS: usize = 10;

/// Call `i` of conversation `k`: the history so far, resent.
fn body(k: usize, i: usize) -> Vec<u8> {
    let mut messages = vec![json!({"role": "user", "content": format!("test {k} starts")})];
    for j in 0..i {
        messages.push(json!({"role": "assistant", "content": "ok"}));
        messages.push(json!({"role": "user", "content": format!("test {k} step {j}")}));
    }
    json!({"model": "bench", "messages": messages})
        .to_string()
        .into_bytes()
}

const PROGRAM: &str = r#"for i in 0 1 2 3 4 5 6 7 8 9; do
  curl -sf -o /dev/null -H 'content-type: application/json' \
    --data-binary @"$DIR/b${K}_$i.json" "$OPENAI_BASE_URL/chat/completions" || exit 1
done
"#;

/// Records the 100 conversations through the proxy, each in session `tK`.
async fn record(store_url: String, up: &str, dir: &Path) -> Result<()> {
    let (url, st, _config) = recording_proxy(store_url.clone(), up).await?;
    let c = reqwest::Client::new();
    for k in 0..RECORDINGS {
        for i in 0..CALLS {
            let b = body(k, i);
            std::fs::write(dir.join(format!("b{k}_{i}.json")), &b)?;
            let r = c
                .post(format!("{url}/v1/chat/completions"))
                .header("content-type", "application/json")
                .header("x-convo-session", format!("t{k}"))
                .body(b)
                .send()
                .await?;
            if !r.status().is_success() {
                return Err(format!("recording call {i} of t{k}: HTTP {}", r.status()).into());
            }
        }
    }
    // Every record written before the store is handed to `convo test`.
    let deadline = Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let mut s = convo_store::Store::open(&store_url)?;
        let last = s.find_session(&format!("t{}", RECORDINGS - 1));
        let full = match last {
            Ok(row) => s.timeline(&row.id, &convo_core::BranchName::main())?.len() >= 2 * CALLS,
            Err(_) => false,
        };
        if full {
            break;
        }
        if Instant::now() > deadline {
            return Err("the recordings were not all written within 60 s".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    drop(st);
    Ok(())
}

pub fn convo_test() -> Result<Vec<Row>> {
    let convo = std::env::current_exe()?.with_file_name("convo");
    if !convo.exists() {
        return Err(format!(
            "{} is missing: build it first (cargo build --release -p convo-cli)",
            convo.display()
        )
        .into());
    }
    let scratch = Scratch::new("convotest")?;
    let dir = scratch.db().with_file_name("work");
    std::fs::create_dir_all(&dir)?;
    let rt = tokio::runtime::Runtime::new()?;
    let up = rt.block_on(serve(axum::Router::new().route(
        "/v1/chat/completions",
        post(crate::proxybench::upstream_chat),
    )))?;
    rt.block_on(record(scratch.url(""), &up, &dir))?;
    let prog = dir.join("program.sh");
    std::fs::write(&prog, PROGRAM)?;

    // The programs alone, straight against the upstream.
    let t = Instant::now();
    for k in 0..RECORDINGS {
        let ok = Command::new("sh")
            .arg(&prog)
            .env("K", k.to_string())
            .env("DIR", &dir)
            .env("OPENAI_BASE_URL", format!("{up}/v1"))
            .status()?
            .success();
        if !ok {
            return Err(format!("program {k} failed against the upstream").into());
        }
    }
    let alone = t.elapsed().as_secs_f64();

    let mut toml = String::new();
    for k in 0..RECORDINGS {
        toml.push_str(&format!(
            "[[test]]\nname = \"t{k}\"\nrecording = \"t{k}\"\ncommand = [\"sh\", {:?}]\nenv = {{ K = \"{k}\", DIR = {:?} }}\n\n",
            prog.display().to_string(),
            dir.display().to_string()
        ));
    }
    let file = dir.join("convo.toml");
    std::fs::write(&file, toml)?;
    let t = Instant::now();
    let o = Command::new(&convo)
        .args(["--store", &scratch.url(""), "test", "--json", "--file"])
        .arg(&file)
        .output()?;
    let whole = t.elapsed().as_secs_f64();
    let doc: Value = serde_json::from_slice(&o.stdout).map_err(|e| {
        format!(
            "convo test printed no report ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    })?;
    if doc["passed"] != json!(RECORDINGS) {
        return Err(format!("convo test: {} of {RECORDINGS} passed", doc["passed"]).into());
    }
    let added = whole - alone;
    Ok(vec![Row::new(
        format!(
            "convo test of {RECORDINGS} recordings × {CALLS} calls, beyond the programs' own time"
        ),
        format!("{added:.2} s ({whole:.2} s in all)"),
        format!("{alone:.2} s (the programs against the upstream)"),
        format!("{:.0} ms a test", added * 1000.0 / RECORDINGS as f64),
        "≤ 10 s",
        Verdict::of(added <= 10.0),
    )])
}
