//! `convo serve` under load: appends over HTTP/1.1 keep-alive from 64
//! concurrent clients against the same appends in-process (SQLite; and
//! PostgreSQL with two servers on one database), one page of a
//! 10,000-turn timeline, 1,000 SSE subscribers, and the first paint of a
//! 10,000-turn session page in Chromium.

use crate::util::{Result, Row, Scratch, Verdict, median, ms, note, rate, thousands};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;
const PER_CLIENT: usize = 100;

/// One keep-alive request; returns status and body.
pub(crate) fn request(
    r: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, Vec<u8>)> {
    // The server's own address as Host: the guard refuses other names.
    let host = r.get_ref().peer_addr()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let s = r.get_mut();
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status: u16 = line.split(' ').nth(1).unwrap_or("0").parse()?;
    let mut len = 0usize;
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse()?;
        }
    }
    let mut buf = vec![0; len];
    r.read_exact(&mut buf)?;
    Ok((status, buf))
}

pub(crate) fn start(url: &str) -> Result<(String, tokio::runtime::Runtime)> {
    let mut config = convo_server::Config::new(url);
    config.log_requests = false;
    let st = convo_server::state(&config)?;
    let app = convo_server::router(st, &config, None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?.to_string();
    rt.spawn(convo_server::serve_router(
        listener,
        app,
        std::future::pending::<()>(),
    ));
    Ok((addr, rt))
}

/// Creates `n` sessions through the API; returns their ids.
fn create_sessions(addr: &str, n: usize) -> Result<Vec<String>> {
    let mut c = BufReader::new(TcpStream::connect(addr)?);
    let mut ids = Vec::new();
    for i in 0..n {
        let (st, body) = request(
            &mut c,
            "POST",
            "/api/v1/sessions",
            &format!("{{\"agent\":\"a{i}\"}}"),
        )?;
        if st != 201 {
            return Err(format!("create session: {st}").into());
        }
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        ids.push(v["id"].as_str().unwrap_or_default().to_owned());
    }
    Ok(ids)
}

/// One keep-alive client per session, client `i` on server `addrs[i % n]`,
/// each appending `PER_CLIENT` nodes one per request; returns the time.
fn run_clients(addrs: &[String], ids: Vec<String>) -> Result<Duration> {
    let t = Instant::now();
    let handles: Vec<_> = ids
        .into_iter()
        .enumerate()
        .map(|(k, id)| {
            let addr = addrs[k % addrs.len()].clone();
            std::thread::spawn(move || -> std::result::Result<(), String> {
                let s = TcpStream::connect(&addr).map_err(|e| e.to_string())?;
                s.set_nodelay(true).map_err(|e| e.to_string())?;
                let mut c = BufReader::new(s);
                let path = format!("/api/v1/sessions/{id}/branches/main/nodes");
                for i in 0..PER_CLIENT {
                    let kind = if i % 2 == 0 { "invoke" } else { "complete" };
                    let body = format!("{{\"kind\":\"{kind}\",\"payload\":\"m{i}\"}}");
                    let (st, _) =
                        request(&mut c, "POST", &path, &body).map_err(|e| e.to_string())?;
                    if st != 201 {
                        return Err(format!("append: {st}"));
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a client panicked")??;
    }
    Ok(t.elapsed())
}

/// The same appends in-process, one transaction each; `trips` (when
/// given) is read before and after the appends only.
fn in_process(
    store: &mut Store,
    trips: Option<&std::sync::atomic::AtomicU64>,
) -> Result<(Duration, u64)> {
    let count = || trips.map_or(0, |t| t.load(std::sync::atomic::Ordering::SeqCst));
    let main = convo_core::BranchName::main();
    let sessions: Vec<_> = (0..CLIENTS)
        .map(|i| {
            store
                .transaction(|l| l.new_session(&format!("a{i}"), None, 0))
                .map(|s| s.id)
        })
        .collect::<std::result::Result<_, _>>()?;
    let before = count();
    let t = Instant::now();
    for i in 0..PER_CLIENT {
        for s in &sessions {
            let kind = if i % 2 == 0 {
                convo_core::Kind::Invoke
            } else {
                convo_core::Kind::Complete
            };
            let d = convo_testutil::draft(kind, &format!("m{i}"), 0);
            store.transaction(|l| l.append(s, &main, &d))?;
        }
    }
    Ok((t.elapsed(), count() - before))
}

/// The median round trip of the last page (200 nodes) of `session`'s main.
fn page_time(addr: &str, session: &str) -> Result<Duration> {
    let mut c = BufReader::new(TcpStream::connect(addr)?);
    let path = format!("/api/v1/sessions/{session}/branches/main/timeline?cursor=-200&limit=200");
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (st, body) = request(&mut c, "GET", &path, "")?;
        if st != 200 {
            return Err(format!("timeline page: {st}").into());
        }
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        if v["nodes"].as_array().map_or(0, Vec::len) != 200 {
            return Err("a timeline page without its 200 nodes".into());
        }
        times.push(t.elapsed());
    }
    Ok(median(times))
}

/// The figures on SQLite.
pub fn serve() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // In-process baseline: the same appends, one transaction each.
    let base_dir = Scratch::new("serve-base")?;
    let (base, _) = in_process(&mut base_dir.store("")?, None)?;
    let n = (CLIENTS * PER_CLIENT) as u64;

    // Over HTTP.
    let dir = Scratch::new("serve")?;
    let url = dir.url("");
    drop(dir.store("")?);
    let (addr, rt) = start(&url)?;
    let ids = create_sessions(&addr, CLIENTS)?;
    let before = Store::open(&url)?.end_cursor()?;
    let http = run_clients(std::slice::from_ref(&addr), ids)?;
    let stored = Store::open(&url)?.end_cursor()? - before;
    let lost = n.saturating_sub(stored);
    let http_rate = rate(n, http);
    rows.push(Row::new(
        format!("20. serve: appends over HTTP, {CLIENTS} keep-alive clients, 1 node per request ({lost} lost)"),
        format!("{} nodes/s", thousands(http_rate)),
        format!("{} nodes/s in-process, 1 tx each", thousands(rate(n, base))),
        format!("{:.2}x", http_rate / rate(n, base)),
        "≥ 5,000 nodes/s, 0 lost",
        Verdict::of(http_rate >= 5000.0 && lost == 0),
    ));

    // One page of a 10,000-turn timeline, against the same page of a
    // 100-turn one (the same 200 nodes, without the long history).
    let (big, small) = {
        let mut st = Store::open(&url)?;
        let big = st.transaction(|l| l.new_session("big", Some("big"), 0))?.id;
        crate::util::ingest(&mut st, &big, 0, 20_000, 10_000)?;
        let small = st
            .transaction(|l| l.new_session("small", Some("small"), 0))?
            .id;
        crate::util::ingest(&mut st, &small, 0, 200, 200)?;
        (big, small)
    };
    let page = page_time(&addr, &big.to_string())?;
    let short = page_time(&addr, &small.to_string())?;
    rows.push(Row::new(
        "21. serve: last page (200 nodes) of a 10,000-turn timeline, round trip",
        ms(page),
        format!("{} for a 100-turn timeline", ms(short)),
        format!("{:.2}x", page.as_secs_f64() / short.as_secs_f64().max(1e-9)),
        "< 20 ms",
        Verdict::of(page < Duration::from_millis(20)),
    ));

    // Before the SSE figure: its 1,000 subscribers' connections may still
    // be closing, and a page load waited behind them.
    rows.extend(paint(&addr, &big.to_string(), &small.to_string())?);
    rows.push(sse(&addr, 1000, 10)?);
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(rows)
}

/// The figures on PostgreSQL (`CONVO_BENCH_PG`): the same 64 clients
/// against two servers (separate pools, writers and event hubs, as two
/// `convo serve` processes) sharing one database.
pub fn serve_pg() -> Result<Vec<Row>> {
    let Some(db) = crate::pgbench::database()? else {
        return Ok(Vec::new());
    };
    let mut rows = Vec::new();
    let n = (CLIENTS * PER_CLIENT) as u64;
    let pg = convo_store::postgres::Postgres::connect(&db.url)?;
    let trips = pg.round_trips();
    let mut store = Store::new(Box::new(pg));
    // Warm the connection's prepared statements, then count.
    in_process_counted(&mut store, 2)?;
    let (base, used) = in_process(&mut store, Some(&trips))?;
    let per_append = used as f64 / n as f64;
    drop(store);
    rows.push(Row::new(
        "22. serve: PostgreSQL round trips per single append (1 tx each, counted by the backend)",
        format!("{per_append:.2}"),
        "about 10 before pipelining",
        format!("{:.2}x", per_append / 10.0),
        "≤ 2",
        Verdict::of(per_append <= 2.0),
    ));

    let (a, rt_a) = start(&db.url)?;
    let (b, rt_b) = start(&db.url)?;
    let ids = create_sessions(&a, CLIENTS)?;
    let before = Store::open(&db.url)?.end_cursor()?;
    let http = run_clients(&[a, b], ids)?;
    let stored = Store::open(&db.url)?.end_cursor()? - before;
    let lost = n.saturating_sub(stored);
    let http_rate = rate(n, http);
    rows.push(Row::new(
        format!(
            "23. serve: PostgreSQL, 2 servers on one database, {CLIENTS} keep-alive clients, 1 node per request ({lost} lost)"
        ),
        format!("{} nodes/s", thousands(http_rate)),
        format!("{} nodes/s in-process, 1 tx each", thousands(rate(n, base))),
        format!("{:.2}x", http_rate / rate(n, base)),
        "≥ 2,000 nodes/s, 0 lost",
        Verdict::of(http_rate >= 2000.0 && lost == 0),
    ));
    rt_a.shutdown_timeout(Duration::from_secs(1));
    rt_b.shutdown_timeout(Duration::from_secs(1));
    drop(db);
    Ok(rows)
}

/// `k` appends to one fresh session, one transaction each.
fn in_process_counted(store: &mut Store, k: usize) -> Result<()> {
    let main = convo_core::BranchName::main();
    let s = store.transaction(|l| l.new_session("warm", None, 0))?.id;
    for i in 0..k {
        let kind = if i % 2 == 0 {
            convo_core::Kind::Invoke
        } else {
            convo_core::Kind::Complete
        };
        store.transaction(|l| l.append(&s, &main, &convo_testutil::draft(kind, "warm", 0)))?;
    }
    Ok(())
}

/// `subs` SSE subscribers on `/api/v1/events`; `rounds` appends, one at a
/// time; the delay from sending each append to each subscriber reading it.
/// Baseline: the same with 10 subscribers.
fn sse(addr: &str, subs: usize, rounds: usize) -> Result<Row> {
    let base = sse_p99(addr, 10, rounds)?;
    let p99 = sse_p99(addr, subs, rounds)?;
    Ok(Row::new(
        format!("24. serve: {subs} SSE subscribers, each receiving a new node, p99 delivery"),
        ms(p99),
        format!("{} with 10 subscribers", ms(base)),
        format!("{:.2}x", p99.as_secs_f64() / base.as_secs_f64().max(1e-9)),
        "< 100 ms",
        Verdict::of(p99 < Duration::from_millis(100)),
    ))
}

fn sse_p99(addr: &str, subs: usize, rounds: usize) -> Result<Duration> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    // Each receipt: (follow number, when).
    let seen: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::new(Mutex::new(Vec::new()));
    let ready = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(AtomicUsize::new(0));
    for _ in 0..subs {
        let (addr, seen, ready, got) = (addr.to_owned(), seen.clone(), ready.clone(), got.clone());
        rt.spawn(async move {
            let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await else {
                return;
            };
            let _ = s.set_nodelay(true);
            // HTTP/1.0: the stream is not chunked, so its lines are the events'.
            let req = format!(
                "GET /api/v1/events HTTP/1.0\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).await.is_err() {
                return;
            }
            let mut r = tokio::io::BufReader::new(s);
            let mut line = String::new();
            let mut counted = false;
            loop {
                line.clear();
                match r.read_line(&mut line).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if !counted && line.trim().is_empty() {
                    // The end of the response head: subscribed.
                    counted = true;
                    ready.fetch_add(1, Ordering::SeqCst);
                }
                if let Some(id) = line.strip_prefix("id:") {
                    let now = Instant::now();
                    if let Ok(id) = id.trim().parse::<u64>()
                        && let Ok(mut v) = seen.lock()
                    {
                        v.push((id, now));
                    }
                    got.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let wait_for = |what: &AtomicUsize, n: usize| -> Result<()> {
        let t = Instant::now();
        while what.load(Ordering::SeqCst) < n {
            if t.elapsed() > Duration::from_secs(60) {
                return Err(
                    format!("SSE: {} of {n} after 60 s", what.load(Ordering::SeqCst)).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    };
    wait_for(&ready, subs)?;
    let ses = create_sessions(addr, 1)?.remove(0);
    let path = format!("/api/v1/sessions/{ses}/branches/main/nodes");
    let mut c = BufReader::new(TcpStream::connect(addr)?);
    // A first node every subscriber must see before timing starts.
    let mut sent = Vec::new();
    for i in 0..=rounds {
        let kind = if i % 2 == 0 { "invoke" } else { "complete" };
        let body = format!("{{\"kind\":\"{kind}\",\"payload\":\"sse {i}\"}}");
        let t = Instant::now();
        let (st, resp) = request(&mut c, "POST", &path, &body)?;
        if st != 201 {
            return Err(format!("append: {st}").into());
        }
        let v: serde_json::Value = serde_json::from_slice(&resp)?;
        let seq = v["nodes"][0]["seq"]
            .as_u64()
            .ok_or("no seq in the answer")?;
        wait_for(&got, subs * (i + 1))?;
        if i > 0 {
            sent.push((seq, t));
        }
    }
    let seen = seen.lock().map_err(|_| "poisoned")?.clone();
    let mut lat = Vec::new();
    for (seq, t) in &sent {
        lat.extend(
            seen.iter()
                .filter(|(s, _)| s == seq)
                .map(|(_, at)| at.duration_since(*t)),
        );
    }
    if lat.len() != subs * rounds {
        return Err(format!("SSE: {} receipts, expected {}", lat.len(), subs * rounds).into());
    }
    lat.sort();
    let p99 = lat[(lat.len() * 99).div_ceil(100).saturating_sub(1)];
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(p99)
}

/// paint.py's medians for two pages (`big`, `small`, `big_tti`,
/// `small_tti`, in ms) holding `selector`, in headless Chromium
/// (`CONVO_TEST_CHROMIUM` and `CONVO_TEST_PYTHON`, from scripts/test-env);
/// `None` (said loudly) without them.
pub(crate) fn paint_times(
    addr: &str,
    big: &str,
    small: &str,
    selector: &str,
) -> Result<Option<serde_json::Value>> {
    let (Ok(py), Ok(chromium)) = (
        std::env::var("CONVO_TEST_PYTHON"),
        std::env::var("CONVO_TEST_CHROMIUM"),
    ) else {
        note(
            "SKIPPED the first paint: set CONVO_TEST_PYTHON and CONVO_TEST_CHROMIUM (eval \"$(scripts/test-env)\")",
        );
        return Ok(None);
    };
    let script = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("../convo-cli/tests/browser/paint.py");
    let work = Scratch::new("paint")?;
    let out = std::process::Command::new(py)
        .arg(script)
        .arg(chromium)
        .arg(work.db().with_file_name("browser"))
        .arg(format!("http://{addr}{big}"))
        .arg(format!("http://{addr}{small}"))
        .arg(selector)
        .output()?;
    if !out.status.success() {
        return Err(format!("paint.py failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(Some(serde_json::from_slice(&out.stdout)?))
}

/// The first paint of the session page of `big` in headless Chromium,
/// against `small`'s, and its time to interactive; nothing (said loudly)
/// without Chromium.
fn paint(addr: &str, big: &str, small: &str) -> Result<Vec<Row>> {
    let big = format!("/sessions/{big}");
    let small = format!("/sessions/{small}");
    let Some(v) = paint_times(addr, &big, &small, "#session")? else {
        return Ok(Vec::new());
    };
    let ms_of = |k: &str| -> Result<f64> {
        v[k].as_f64()
            .ok_or_else(|| format!("paint.py said nothing about {k}").into())
    };
    let (big_ms, small_ms) = (ms_of("big")?, ms_of("small")?);
    let (big_tti, small_tti) = (ms_of("big_tti")?, ms_of("small_tti")?);
    Ok(vec![
        Row::new(
            "25. serve: first paint of a 10,000-turn session page in Chromium",
            format!("{big_ms:.0} ms"),
            format!("{small_ms:.0} ms for a 100-turn session"),
            format!("{:.2}x", big_ms / small_ms.max(1e-9)),
            "≤ 500 ms warm",
            Verdict::of(big_ms <= 500.0),
        ),
        Row::new(
            "25b. serve: time to interactive of a 10,000-turn session page in Chromium",
            format!("{big_tti:.0} ms"),
            format!("{small_tti:.0} ms for a 100-turn session"),
            format!("{:.2}x", big_tti / small_tti.max(1e-9)),
            "≤ 500 ms warm",
            Verdict::of(big_tti <= 500.0),
        ),
    ])
}

use convo_store::Store;
