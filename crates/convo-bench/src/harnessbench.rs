//! The agent harness: added time per turn with a trivial agent, per `kv`
//! call, and the replay of a 1,000-turn timeline, each against the same
//! agent called directly in the same run.

use crate::util::{Result, Row, Scratch, Verdict, median};
use axum::Json;
use axum::routing::{post, put};
use convo_core::BranchName;
use convo_harness::{AgentSpec, Harness, Options, ReplayOptions};
use convo_server::StorePool;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const KV_CALLS: usize = 10;

/// The trivial agent: answers `ok`; for an input `kv`, first makes
/// [`KV_CALLS`] `PUT`s to the kv URL it was given.
async fn invoke(Json(v): Json<Value>) -> Json<Value> {
    if v["input"] == "kv" {
        let kv = v["services"]["kv_url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let client = reqwest::Client::new();
        for i in 0..KV_CALLS {
            let _ = client.put(format!("{kv}/k{i}")).body("v").send().await;
        }
    }
    Json(json!({"output": "ok"}))
}

async fn start_agent() -> Result<String> {
    let app = axum::Router::new()
        .route("/invoke", post(invoke))
        .route("/echo/{k}", put(|| async { "" }));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", l.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok(url)
}

async fn direct(client: &reqwest::Client, url: &str, n: usize) -> Result<Vec<Duration>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client
            .post(format!("{url}/invoke"))
            .json(&json!({"input": "hi", "services": {}}))
            .send()
            .await?
            .bytes()
            .await?;
        v.push(t.elapsed());
    }
    Ok(v)
}

/// The three harness figures.
pub fn harness() -> Result<Vec<Row>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn run() -> Result<Vec<Row>> {
    let dir = Scratch::new("harness")?;
    let pool = StorePool::open(&dir.url(""), 4)?;
    let url = start_agent().await?;
    let client = reqwest::Client::new();
    let spec = AgentSpec::Url(format!("{url}/invoke"));
    let mut h = Harness::start(pool.clone(), &spec, Options::new("bench")).await?;
    let s = pool
        .run(|st| st.transaction(|l| l.new_session("bench", Some("bench"), 0)))
        .await?
        .id;
    let main = BranchName::main();
    let n = 300;
    direct(&client, &url, 20).await?;
    let base = median(direct(&client, &url, n).await?);
    let mut via = Vec::with_capacity(n);
    let mut via_kv = Vec::with_capacity(n / 3);
    for i in 0..n {
        let t = Instant::now();
        h.turn(&s, &main, "hi", std::future::pending()).await?;
        via.push(t.elapsed());
        if i % 3 == 0 {
            let t = Instant::now();
            h.turn(&s, &main, "kv", std::future::pending()).await?;
            via_kv.push(t.elapsed());
        }
    }
    let via = median(via);
    let via_kv = median(via_kv);
    let mut echo = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client
            .put(format!("{url}/echo/k"))
            .body("v")
            .send()
            .await?
            .bytes()
            .await?;
        echo.push(t.elapsed());
    }
    let echo = median(echo);
    let added = via.saturating_sub(base);
    let per_kv = via_kv.saturating_sub(via) / KV_CALLS as u32;
    // Replay of a 1,000-turn timeline.
    let r = pool
        .run(|st| st.transaction(|l| l.new_session("bench", Some("replay"), 0)))
        .await?
        .id;
    for _ in 0..1000 {
        h.turn(&r, &main, "hi", std::future::pending()).await?;
    }
    let t = Instant::now();
    let rep = h
        .replay(&r, &main, &ReplayOptions::default(), |_| {})
        .await?;
    let replay = t.elapsed();
    if rep.divergence.is_some() || rep.turns.len() != 1000 {
        return Err(format!("replay of 1,000 turns diverged: {:?}", rep.divergence).into());
    }
    let base_1000: Duration = direct(&client, &url, 1000).await?.into_iter().sum();
    h.stop().await;
    let ms = |d: Duration| format!("{:.3} ms", d.as_secs_f64() * 1000.0);
    Ok(vec![
        Row::new(
            "30 harness: added time per turn, trivial agent",
            ms(added),
            format!("direct POST {}", ms(base)),
            format!("turn {}", ms(via)),
            "≤ 2 ms",
            Verdict::of(added <= Duration::from_millis(2)),
        ),
        Row::new(
            "31 harness: per kv PUT (request, state_put, response: one transaction)",
            ms(per_kv),
            format!("plain HTTP PUT {}", ms(echo)),
            format!(
                "{:.1}x",
                per_kv.as_secs_f64() / echo.as_secs_f64().max(1e-9)
            ),
            "≤ 0.5 ms",
            Verdict::of(per_kv <= Duration::from_micros(500)),
        ),
        Row::new(
            "32 harness: replay of a 1,000-turn timeline",
            format!("{:.2} s", replay.as_secs_f64()),
            format!("1,000 direct POSTs {:.2} s", base_1000.as_secs_f64()),
            format!(
                "{:.1}x",
                replay.as_secs_f64() / base_1000.as_secs_f64().max(1e-9)
            ),
            "≤ 5 s",
            Verdict::of(replay <= Duration::from_secs(5)),
        ),
    ])
}
