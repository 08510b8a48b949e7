//! `convo serve` under load: appends over HTTP/1.1 keep-alive from 64
//! concurrent clients against the same appends in-process, and one page of
//! a 10,000-turn timeline.

use crate::util::{Result, Row, Scratch, Verdict, ms, rate, thousands};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;
const PER_CLIENT: usize = 100;

/// One keep-alive request; returns status and body.
fn request(
    r: &mut BufReader<TcpStream>,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, Vec<u8>)> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
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

fn start(url: &str) -> Result<(String, tokio::runtime::Runtime)> {
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

/// The figures.
pub fn serve() -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // In-process baseline: the same appends, one transaction each.
    let base_dir = Scratch::new("serve-base")?;
    let mut store = base_dir.store("")?;
    let main = convo_core::BranchName::main();
    let sessions: Vec<_> = (0..CLIENTS)
        .map(|i| {
            store
                .create_session(&format!("a{i}"), None, 0)
                .map(|s| s.id)
        })
        .collect::<std::result::Result<_, _>>()?;
    let t = Instant::now();
    for i in 0..PER_CLIENT {
        for s in &sessions {
            let kind = if i % 2 == 0 {
                convo_core::Kind::Invoke
            } else {
                convo_core::Kind::Complete
            };
            let d = convo_store::testing::draft(kind, &format!("m{i}"), 0);
            store.append(s, &main, &d)?;
        }
    }
    let base = t.elapsed();
    let n = (CLIENTS * PER_CLIENT) as u64;

    // Over HTTP.
    let dir = Scratch::new("serve")?;
    let url = dir.url("");
    drop(dir.store("")?);
    let (addr, rt) = start(&url)?;
    let mut ids = Vec::new();
    {
        let mut c = BufReader::new(TcpStream::connect(&addr)?);
        for i in 0..CLIENTS {
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
    }
    let t = Instant::now();
    let handles: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let addr = addr.clone();
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
    let http = t.elapsed();
    let stored = Store::open(&url)?.end_cursor()?;
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

    // One page of a 10,000-turn timeline.
    let big = {
        let mut st = Store::open(&url)?;
        let s = st.create_session("big", Some("big"), 0)?.id;
        crate::util::ingest(&mut st, &s, 0, 20_000, 10_000)?;
        s
    };
    let mut c = BufReader::new(TcpStream::connect(&addr)?);
    let path = format!("/api/v1/sessions/{big}/branches/main/timeline?cursor=-200&limit=200");
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let (st, _) = request(&mut c, "GET", &path, "")?;
        if st != 200 {
            return Err(format!("timeline page: {st}").into());
        }
        times.push(t.elapsed());
    }
    let page = crate::util::median(times);
    rows.push(Row::new(
        "21. serve: last page (200 nodes) of a 10,000-turn timeline, round trip",
        ms(page),
        "—",
        "—",
        "< 20 ms",
        Verdict::of(page < Duration::from_millis(20)),
    ));
    rt.shutdown_timeout(Duration::from_secs(1));
    Ok(rows)
}

use convo_store::Store;
