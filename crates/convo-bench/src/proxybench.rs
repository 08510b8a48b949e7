//! The recording proxy against the same client talking to the same local
//! upstream directly: added latency per non-streamed call (p50/p99), added
//! time to first byte of a stream, recorded calls per second with 64
//! concurrent clients (SQLite, every node checked afterwards), replay
//! throughput and fidelity.
//!
//! Then 16 clients, each its own conversation threaded by content, on an
//! empty store and on one of 100,000 sessions: the clients, the scripted
//! upstream and the proxy run on runtimes of their own, so the CPU each
//! spends per call is counted apart (`CONVO_BENCH_PROXY=16` runs these
//! rows alone).
//!
//! Side by side, when `CONVO_BENCH_LITELLM` names LiteLLM's `litellm`
//! command (`pip install 'litellm[proxy]'`): LiteLLM's proxy on the same
//! work against the same upstream (it forwards; with no database
//! configured it records nothing), started from a generated config.

use crate::util::{Result, Row, Scratch, Verdict, thousands};
use axum::body::{Body, Bytes};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use std::time::Instant;

const CALLS: usize = 2_000;
const CLIENTS: usize = 64;
const PER_CLIENT: usize = 50;

pub(crate) async fn upstream_chat(body: Bytes) -> axum::response::Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    if req["stream"] == true {
        let chunks: Vec<Result<Bytes, std::io::Error>> = (0..8)
            .map(|i| Ok(Bytes::from(format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"w{i} \"}}}}]}}\n\n"))))
            .chain([Ok(Bytes::from_static(b"data: [DONE]\n\n"))])
            .collect();
        return axum::response::Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from_stream(futures_util::stream::iter(chunks)))
            .unwrap_or_default();
    }
    axum::Json(json!({"id": "c", "object": "chat.completion", "model": "bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}))
    .into_response()
}

pub(crate) async fn serve(app: axum::Router) -> Result<String> {
    use axum::serve::ListenerExt as _;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", l.local_addr()?);
    let l = l.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok(url)
}

/// A proxy replaying `spec` (SESSION:BRANCH) with no upstream, served
/// the way `convo serve` serves it: the proxy and its base URL.
async fn replaying(
    st: &convo_server::AppState,
    config: &convo_server::Config,
    spec: &str,
) -> Result<(convo_proxy::Proxy, String)> {
    let mut rc = convo_proxy::ProxyConfig::new(None);
    rc.replay = Some(convo_proxy::replay::ReplaySpec::parse(spec).map_err(|e| e.to_string())?);
    let replayer = convo_proxy::Proxy::start(rc, st.pool.clone(), None).await?;
    let url = serve_convo(convo_server::router(
        st.clone(),
        config,
        Some(convo_proxy::router(replayer.clone())),
    ))
    .await?;
    Ok((replayer, url))
}

/// `convo serve` with the recording proxy mounted in front of `up`,
/// recording into `store_url`: its URL, the server's state (drop it to
/// close the store's connections before measuring the files) and config.
pub(crate) async fn recording_proxy(
    store_url: String,
    up: &str,
) -> Result<(String, convo_server::AppState, convo_server::Config)> {
    let mut config = convo_server::Config::new(store_url);
    config.log_requests = false;
    let st = convo_server::state(&config)?;
    let proxy = convo_proxy::Proxy::start(
        convo_proxy::ProxyConfig::new(Some(format!("{up}/v1"))),
        st.pool.clone(),
        Some(st.hub.clone()),
    )
    .await?;
    let app = convo_server::router(st.clone(), &config, Some(convo_proxy::router(proxy)));
    Ok((serve_convo(app).await?, st, config))
}

/// The proxy served the way `convo serve` serves it.
pub(crate) async fn serve_convo(app: axum::Router) -> Result<String> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", l.local_addr()?);
    tokio::spawn(async move {
        let _ = convo_server::serve_router(l, app, std::future::pending()).await;
    });
    Ok(url)
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn body(i: usize, stream: bool) -> Value {
    json!({"model": "bench", "stream": stream,
        "messages": [{"role": "user", "content": format!("call {i}")}]})
}

async fn one(c: &reqwest::Client, url: &str, b: &Value) -> Result<(f64, f64)> {
    let t = Instant::now();
    let mut res = c.post(url).json(b).send().await?;
    let mut first = None;
    while let Some(chunk) = res.chunk().await? {
        if first.is_none() && !chunk.is_empty() {
            first = Some(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let total = t.elapsed().as_secs_f64() * 1000.0;
    Ok((total, first.unwrap_or(total)))
}

async fn sequential(c: &reqwest::Client, url: &str, stream: bool) -> Result<(Vec<f64>, Vec<f64>)> {
    let (mut tot, mut ttfb) = (Vec::new(), Vec::new());
    for i in 0..CALLS {
        let (a, b) = one(c, url, &body(i, stream)).await?;
        tot.push(a);
        ttfb.push(b);
    }
    Ok((tot, ttfb))
}

async fn concurrent(url: &str) -> Result<f64> {
    let c = reqwest::Client::new();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..CLIENTS {
        let (c, url) = (c.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_CLIENT {
                let r = c.post(&url).json(&body(k * 1000 + i, false)).send().await;
                if let Ok(r) = r {
                    let _ = r.bytes().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok((CLIENTS * PER_CLIENT) as f64 / t.elapsed().as_secs_f64())
}

async fn run() -> Result<Vec<Row>> {
    let up = serve(axum::Router::new().route("/v1/chat/completions", post(upstream_chat))).await?;
    let scratch = Scratch::new("proxy")?;
    let store_url = scratch.url("");
    let (px, st, config) = recording_proxy(store_url.clone(), &up).await?;
    let c = reqwest::Client::new();
    let direct = format!("{up}/v1/chat/completions");
    let via = format!("{px}/s/bench/main/v1/chat/completions");
    // Warm both paths.
    sequential(&c, &direct, false).await?;
    let (d_tot, _) = sequential(&c, &direct, false).await?;
    let (p_tot, _) = sequential(&c, &via, false).await?;
    let (_, d_ttfb) = sequential(&c, &direct, true).await?;
    let (_, p_ttfb) = sequential(&c, &via, true).await?;
    let direct_rate = concurrent(&direct).await?;
    let via_conc = format!("{px}/s/bench-64/main/v1/chat/completions");
    let rate = concurrent(&via_conc).await?;
    let nodes = st
        .pool
        .run(|s| {
            let id = s.find_session("bench-64")?.id;
            Ok(s.timeline(&id, &convo_core::BranchName::main())?.len())
        })
        .await?;
    let want = CLIENTS * PER_CLIENT * 4;

    // Replay the 64-client session with no upstream, 64 clients again.
    let (replayer, rx) = replaying(&st, &config, "bench:main").await?;
    let t = Instant::now();
    for i in 0..CALLS {
        let r = c
            .post(format!("{rx}/v1/chat/completions"))
            .json(&body(i, false))
            .send()
            .await?;
        let _ = r.bytes().await?;
    }
    let replay_rate = CALLS as f64 / t.elapsed().as_secs_f64();
    let fidelity = replayer.replay_summary().unwrap_or_default();
    let litellm = match std::env::var("CONVO_BENCH_LITELLM") {
        Ok(cmd) => Some(litellm(&cmd, &up, &scratch).await),
        Err(_) => None,
    };
    let dir = scratch;
    drop(dir);

    let row = |f: &str, v: f64, b: f64, target: &str, ok: Option<bool>| {
        Row::new(
            f,
            format!("{:.3} ms", v - b),
            format!("direct {b:.3} ms, via proxy {v:.3} ms"),
            format!("{:.2}×", v / b),
            target,
            ok.map_or(Verdict::Info, Verdict::of),
        )
    };
    let (p50, d50) = (pct(p_tot.clone(), 0.5), pct(d_tot.clone(), 0.5));
    let (p99, d99) = (pct(p_tot, 0.99), pct(d_tot, 0.99));
    let (t50, dt50) = (pct(p_ttfb, 0.5), pct(d_ttfb, 0.5));
    let mut rows = vec![
        row(
            "proxy: added latency p50, non-streamed, recorded",
            p50,
            d50,
            "≤ 1 ms",
            Some(p50 - d50 <= 1.0),
        ),
        row(
            "proxy: added latency p99, non-streamed, recorded",
            p99,
            d99,
            "≤ 5 ms",
            Some(p99 - d99 <= 5.0),
        ),
        row(
            "proxy: added time to first byte p50, streamed",
            t50,
            dt50,
            "≤ 1 ms",
            Some(t50 - dt50 <= 1.0),
        ),
        Row::new(
            "proxy: recorded calls/s, 64 clients, SQLite",
            format!("{} calls/s", thousands(rate)),
            format!("direct: {} calls/s", thousands(direct_rate)),
            format!("{:.0}%", 100.0 * rate / direct_rate),
            "≥ 2,000/s, no lost node",
            Verdict::of(rate >= 2000.0 && nodes == want),
        ),
        Row::new(
            "proxy: nodes recorded by the 64 clients",
            thousands(nodes as f64),
            format!("expected {}", thousands(want as f64)),
            "—",
            "all",
            Verdict::of(nodes == want),
        ),
        Row::new(
            "proxy: replay, sequential calls/s",
            format!("{} calls/s", thousands(replay_rate)),
            fidelity,
            "—",
            "—",
            Verdict::Info,
        ),
    ];
    match litellm {
        None => rows.push(Row::new(
            "LiteLLM proxy: not measured",
            "—",
            "set CONVO_BENCH_LITELLM to its `litellm` command",
            "—",
            "—",
            Verdict::Info,
        )),
        Some(Err(e)) => rows.push(Row::new(
            "LiteLLM proxy: could not be run",
            "—",
            e.to_string(),
            "—",
            "—",
            Verdict::Info,
        )),
        Some(Ok(l)) => {
            let (l50, l99, lt50) = (pct(l.tot.clone(), 0.5), pct(l.tot, 0.99), pct(l.ttfb, 0.5));
            rows.push(row(
                "LiteLLM proxy: added latency p50, non-streamed",
                l50,
                d50,
                "—",
                None,
            ));
            rows.push(row(
                "LiteLLM proxy: added latency p99, non-streamed",
                l99,
                d99,
                "—",
                None,
            ));
            rows.push(row(
                "LiteLLM proxy: added time to first byte p50, streamed",
                lt50,
                dt50,
                "—",
                None,
            ));
            rows.push(Row::new(
                "LiteLLM proxy: calls/s, 64 clients (not recording)",
                format!("{} calls/s", thousands(l.rate)),
                format!(
                    "direct: {} calls/s; convo recording: {} calls/s",
                    thousands(direct_rate),
                    thousands(rate)
                ),
                format!("{:.0}%", 100.0 * l.rate / direct_rate),
                "—",
                Verdict::Info,
            ));
        }
    }
    Ok(rows)
}

struct LiteLlm {
    tot: Vec<f64>,
    ttfb: Vec<f64>,
    rate: f64,
}

/// Kills the child process when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// LiteLLM's proxy in front of the same upstream, on the same work.
async fn litellm(cmd: &str, up: &str, scratch: &Scratch) -> Result<LiteLlm> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let config = scratch.db().with_file_name("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench\n      api_base: {up}/v1\n      api_key: bench-upstream\n"
        ),
    )?;
    let log = std::fs::File::create(scratch.db().with_file_name("litellm.log"))?;
    let child = Child(
        std::process::Command::new(cmd)
            .arg("--config")
            .arg(&config)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--num_workers",
                "1",
            ])
            .env("LITELLM_LOG", "ERROR")
            .env("LITELLM_TELEMETRY", "False")
            // No remote price list; no master key (loopback only, as convo's).
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env(
                "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY",
                "true",
            )
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start `{cmd}`: {e}"))?,
    );
    let base = format!("http://127.0.0.1:{port}");
    let c = reqwest::Client::new();
    let mut ready = false;
    for _ in 0..1500 {
        if let Ok(r) = c.get(format!("{base}/health/liveliness")).send().await
            && r.status().is_success()
        {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    if !ready {
        let log =
            std::fs::read_to_string(scratch.db().with_file_name("litellm.log")).unwrap_or_default();
        let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
        return Err(format!("LiteLLM did not answer on {base} within 300 s: {tail}").into());
    }
    let url = format!("{base}/v1/chat/completions");
    // Warm, then the same sequences as for convo.
    for i in 0..200 {
        one(&c, &url, &body(i, false)).await?;
    }
    let (tot, _) = sequential(&c, &url, false).await?;
    let (_, ttfb) = sequential(&c, &url, true).await?;
    let rate = concurrent(&url).await?;
    drop(child);
    Ok(LiteLlm { tot, ttfb, rate })
}

/// Clients of the store-size comparison.
const CLIENTS16: usize = 16;
/// Calls each of them makes (its own conversation, threaded by content).
const PER_CLIENT16: usize = 60;
/// Sessions in the big store (`CONVO_BENCH_SESSIONS` to change).
const BIG_STORE: usize = 100_000;

/// One client's conversation: call `i` resends the history so far.
fn convo_body(k: usize, i: usize) -> Value {
    let mut messages = vec![json!({"role": "user", "content": format!("client {k} starts")})];
    for j in 0..i {
        messages.push(json!({"role": "assistant", "content": "ok"}));
        messages.push(json!({"role": "user", "content": format!("client {k} step {j}")}));
    }
    json!({"model": "bench", "stream": false, "messages": messages})
}

/// 16 clients, each its own conversation: every call's latency (ms).
async fn sixteen(url: &str) -> Result<Vec<f64>> {
    let c = reqwest::Client::new();
    let mut tasks = Vec::new();
    for k in 0..CLIENTS16 {
        let (c, url) = (c.clone(), url.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            for i in 0..PER_CLIENT16 {
                if let Ok((t, _)) = one(&c, &url, &convo_body(k, i)).await {
                    lat.push(t);
                }
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await?);
    }
    Ok(all)
}

/// Fills a store with `n` proxy sessions, each a recorded turn whose
/// `complete` carries a thread key (what threading lookups probe).
fn fill(store_url: &str, n: usize) -> convo_store::Result<()> {
    let mut store = convo_store::Store::open(store_url)?;
    let main = convo_core::BranchName::main();
    for chunk in 0..n.div_ceil(5_000) {
        store.transaction(|l| {
            for i in chunk * 5_000..((chunk + 1) * 5_000).min(n) {
                let id = convo_core::SessionId::new_random();
                l.create_session(id, "proxy", Some(&format!("conversation {i}")), 0)?;
                for (kind, payload, diag) in [
                    (convo_core::Kind::Invoke, format!("question {i}"), json!({})),
                    (
                        convo_core::Kind::Complete,
                        "ok".to_owned(),
                        json!({"thread": format!("{:064x}", i)}),
                    ),
                ] {
                    l.append(
                        &id,
                        &main,
                        &convo_store::Draft {
                            kind,
                            from: "user".into(),
                            to: "proxy".into(),
                            payload: payload.into_bytes(),
                            diagnostics: convo_core::Diagnostics::from_value(&diag)
                                .map_err(convo_store::StoreError::invalid)?,
                            state: None,
                            sequence: None,
                            created_at: 0,
                        },
                    )?;
                }
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// CPU time (ns) of each of this process's threads, summed by name
/// (`/proc/self/task/*/schedstat`; empty elsewhere).
fn thread_cpu() -> std::collections::HashMap<String, u64> {
    let mut out = std::collections::HashMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let p = t.path();
        let (Ok(comm), Ok(sched)) = (
            std::fs::read_to_string(p.join("comm")),
            std::fs::read_to_string(p.join("schedstat")),
        ) else {
            continue;
        };
        let ns: u64 = sched
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *out.entry(comm.trim().to_owned()).or_default() += ns;
    }
    out
}

/// Bytes this process has written with write(2) and friends so far
/// (`/proc/self/io`'s `wchar`: sockets included, so against a baseline).
fn written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("wchar: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Where the CPU of a run of calls went, µs per call: the clients, the
/// scripted upstream, the proxy's handlers (its runtime), its writer
/// thread, everything else (hub, checkpoints, the store's pool).
#[derive(Clone, Copy, Debug, Default)]
struct Cpu {
    clients: f64,
    upstream: f64,
    proxy: f64,
    writer: f64,
    other: f64,
}

impl Cpu {
    fn between(
        a: &std::collections::HashMap<String, u64>,
        b: &std::collections::HashMap<String, u64>,
        calls: usize,
    ) -> Cpu {
        let mut c = Cpu::default();
        for (name, after) in b {
            let us = after.saturating_sub(a.get(name).copied().unwrap_or(0)) as f64
                / 1000.0
                / calls.max(1) as f64;
            match name.as_str() {
                "bench-clients" => c.clients += us,
                "bench-upstream" => c.upstream += us,
                "convo-px" => c.proxy += us,
                "convo-proxy-wri" => c.writer += us,
                _ => c.other += us,
            }
        }
        c
    }

    fn of_proxy(&self) -> f64 {
        self.proxy + self.writer + self.other
    }
}

/// A runtime of its own for one side of the benchmark, its threads named
/// (so `thread_cpu` tells them apart).
fn side(name: &str, workers: usize) -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()?)
}

/// What [`store_size`] measured.
struct Sized {
    added50: f64,
    added99: f64,
    direct50: f64,
    replay_rate: f64,
    fidelity: f64,
    served: f64,
    direct_cpu: Cpu,
    proxy_cpu: Cpu,
    /// Sessions the 16 clients' calls were recorded in.
    recorded: usize,
    /// Bytes written per call more than a direct call.
    wrote: f64,
}

/// Added latency (p50, p99) with 16 clients threaded by content on a store
/// of `sessions` sessions, against the upstream called directly under the
/// same load; then 16 clients replaying one recorded session: calls/s.
/// The clients, the upstream and the proxy each run on a runtime of their
/// own (as three processes would), so the CPU each spends per call is
/// counted apart.
async fn store_size(sessions: usize) -> Result<Sized> {
    let up_rt = side("bench-upstream", 1)?;
    let px_rt = side("convo-px", 2)?;
    let up = up_rt
        .spawn(async {
            serve(axum::Router::new().route("/v1/chat/completions", post(upstream_chat)))
                .await
                .map_err(|e| e.to_string())
        })
        .await??;
    let scratch = Scratch::new("proxy16")?;
    let store_url = scratch.url("");
    {
        let url = store_url.clone();
        tokio::task::spawn_blocking(move || fill(&url, sessions)).await??;
    }
    let mut config = convo_server::Config::new(store_url.clone());
    config.log_requests = false;
    let (st, px) = {
        let (config, up) = (config.clone(), up.clone());
        px_rt
            .spawn(async move {
                let st = convo_server::state(&config).map_err(|e| e.to_string())?;
                let proxy = convo_proxy::Proxy::start(
                    convo_proxy::ProxyConfig::new(Some(format!("{up}/v1"))),
                    st.pool.clone(),
                    Some(st.hub.clone()),
                )
                .await
                .map_err(|e| e.to_string())?;
                let px = serve_convo(convo_server::router(
                    st.clone(),
                    &config,
                    Some(convo_proxy::router(proxy)),
                ))
                .await
                .map_err(|e| e.to_string())?;
                Ok::<_, String>((st, px))
            })
            .await??
    };
    let direct = format!("{up}/v1/chat/completions");
    sixteen(&direct).await?;
    let (c0, w0) = (thread_cpu(), written());
    let d = sixteen(&direct).await?;
    let (c1, w1) = (thread_cpu(), written());
    let p = sixteen(&format!("{px}/v1/chat/completions")).await?;
    let (c2, w2) = (thread_cpu(), written());
    // What the proxy wrote per call beyond the direct calls' sockets: the
    // store's log (WAL frames) and the extra hop.
    let wrote = ((w2 - w1) as f64 / p.len().max(1) as f64
        - (w1 - w0) as f64 / d.len().max(1) as f64)
        .max(0.0);
    let (direct_cpu, proxy_cpu) = (
        Cpu::between(&c0, &c1, d.len()),
        Cpu::between(&c1, &c2, p.len()),
    );
    // Each client's calls are one conversation: one session each.
    let recorded = st
        .pool
        .run(move |s| Ok(s.sessions()?.len().saturating_sub(sessions)))
        .await?;
    let direct50 = pct(d.clone(), 0.5);
    let (added50, added99) = (pct(p.clone(), 0.5) - direct50, pct(p, 0.99) - pct(d, 0.99));
    // One session of 16 × PER_CLIENT16 calls, replayed by 16 clients at once.
    let named = format!("{px}/s/replay-16/main/v1/chat/completions");
    sixteen(&named).await?;
    let (replayer, rx) = {
        let (st, config) = (st.clone(), config.clone());
        px_rt
            .spawn(async move {
                replaying(&st, &config, "replay-16:main")
                    .await
                    .map_err(|e| e.to_string())
            })
            .await??
    };
    let t = Instant::now();
    let served = sixteen(&format!("{rx}/v1/chat/completions")).await?.len();
    let replay_rate = served as f64 / t.elapsed().as_secs_f64();
    let fidelity = replayer
        .replay_summary()
        .map(|s| if s.contains("100") { 1.0 } else { 0.0 })
        .unwrap_or(0.0);
    px_rt.shutdown_background();
    up_rt.shutdown_background();
    drop(scratch);
    Ok(Sized {
        added50,
        added99,
        direct50,
        replay_rate,
        fidelity,
        served: served as f64,
        direct_cpu,
        proxy_cpu,
        recorded,
        wrote,
    })
}

async fn run_sizes() -> Result<Vec<Row>> {
    let big = std::env::var("CONVO_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(BIG_STORE);
    let e = store_size(0).await?;
    let b = store_size(big).await?;
    let (e50, e99, b50, b99) = (e.added50, e.added99, b.added50, b.added99);
    let grows = b50 > e50 * 1.5 + 0.2 || b99 > e99 * 1.5 + 0.5;
    let cpu = |c: &Cpu, d: &Cpu| {
        format!(
            "proxy {:.0} µs (handlers {:.0}, writer {:.0}, other {:.0}); clients {:.0} (direct {:.0}); upstream {:.0} (direct {:.0})",
            c.of_proxy(),
            c.proxy,
            c.writer,
            c.other,
            c.clients,
            d.clients,
            c.upstream,
            d.upstream
        )
    };
    // 16 clients in a closed loop on 2 cores, all busy: each call waits
    // for the CPU of 16 calls shared by 2 cores, so what the proxy adds
    // to a call is at least 16 × its CPU per call / 2.
    let floor = |c: &Cpu| c.of_proxy() * CLIENTS16 as f64 / 2.0 / 1000.0;
    Ok(vec![
        Row::new(
            "proxy: added latency p50, 16 clients, each its own conversation (threaded)",
            format!("{b50:.3} ms ({} sessions)", thousands(big as f64)),
            format!(
                "empty store: {e50:.3} ms; direct p50 {:.3} / {:.3} ms",
                b.direct50, e.direct50
            ),
            format!("{:+.3} ms", b50 - e50),
            "≤ 1 ms, no growth",
            Verdict::of(b50 <= 1.0 && !grows),
        ),
        Row::new(
            "proxy: added latency p99, 16 clients (threaded)",
            format!("{b99:.3} ms ({} sessions)", thousands(big as f64)),
            format!("empty store: {e99:.3} ms"),
            format!("{:+.3} ms", b99 - e99),
            "≤ 3 ms, no growth",
            Verdict::of(b99 <= 3.0 && !grows),
        ),
        Row::new(
            "proxy: CPU per call, 16 clients (threaded), store of 100,000 sessions",
            format!(
                "{:.0} µs in the proxy; {:.1} KB written",
                b.proxy_cpu.of_proxy(),
                b.wrote / 1000.0
            ),
            cpu(&b.proxy_cpu, &b.direct_cpu),
            format!(
                "floor of the added p50 on 2 cores: {:.2} ms",
                floor(&b.proxy_cpu)
            ),
            "—",
            Verdict::Info,
        ),
        Row::new(
            "proxy: CPU per call, 16 clients (threaded), empty store",
            format!(
                "{:.0} µs in the proxy; {:.1} KB written",
                e.proxy_cpu.of_proxy(),
                e.wrote / 1000.0
            ),
            cpu(&e.proxy_cpu, &e.direct_cpu),
            format!(
                "floor of the added p50 on 2 cores: {:.2} ms",
                floor(&e.proxy_cpu)
            ),
            "—",
            Verdict::Info,
        ),
        Row::new(
            "proxy: sessions the 16 clients' conversations were recorded in",
            format!("{} ({} sessions)", b.recorded, thousands(big as f64)),
            format!("empty store: {}", e.recorded),
            "—",
            "16",
            Verdict::of(b.recorded == CLIENTS16 && e.recorded == CLIENTS16),
        ),
        Row::new(
            "proxy: replay, 16 clients at once, any order",
            format!(
                "{} calls/s ({} sessions)",
                thousands(b.replay_rate),
                thousands(big as f64)
            ),
            format!(
                "empty store: {} calls/s; {} of {} calls answered{}",
                thousands(e.replay_rate),
                b.served,
                CLIENTS16 * PER_CLIENT16,
                if b.fidelity > 0.0 {
                    ", fidelity 100%"
                } else {
                    ""
                }
            ),
            "—",
            "—",
            Verdict::Info,
        ),
    ])
}

/// The benchmark (its own runtime).
pub fn proxy() -> Result<Vec<Row>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-clients")
        .enable_all()
        .build()?;
    // `CONVO_BENCH_PROXY=16`: the 16-client rows only.
    let mut rows = match std::env::var("CONVO_BENCH_PROXY").as_deref() {
        Ok("16") => Vec::new(),
        _ => rt.block_on(run())?,
    };
    rows.extend(rt.block_on(run_sizes())?);
    Ok(rows)
}
