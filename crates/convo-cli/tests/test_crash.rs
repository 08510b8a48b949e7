//! A writer killed with SIGKILL mid-stream leaves a store that verifies and
//! holds every node whose hash it printed; so does the recording proxy
//! killed in the middle of a streamed answer, for every call it answered.
//! And the proxy passes a 100 MiB answer through with bounded memory.

use crate::common::{TestEnv, is_hash};
use convo_testutil::Backend;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

fn sigkill_mid_stream(backend: Backend) {
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

/// A scripted OpenAI-compatible upstream for the proxy crash test (plain
/// threads, one per connection): a chat completion answers
/// `echo: {last message}`; streamed, that answer comes as one SSE event
/// and `[DONE]`, or, for the model `endless`, as an event every 20 ms
/// until the connection closes.
pub fn crash_upstream() -> String {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut len = 0usize;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let said = req["messages"][0]["content"].as_str().unwrap_or("");
                let text = format!("echo: {said}");
                if let Some(mib) = req["model"].as_str().and_then(|m| m.strip_prefix("big-")) {
                    let n = mib.parse::<usize>().unwrap_or(1) << 20;
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{BIG_HEAD}",
                        big_len(n)
                    );
                    let filler = [b'x'; 64 * 1024];
                    let mut left = n;
                    while left > 0 {
                        let k = left.min(filler.len());
                        if conn.write_all(&filler[..k]).is_err() {
                            return;
                        }
                        left -= k;
                    }
                    let _ = conn.write_all(BIG_TAIL.as_bytes());
                    return;
                }
                if req["stream"] != true {
                    let out =
                        serde_json::json!({"id": "chatcmpl-crash", "object": "chat.completion",
                        "model": "scripted", "choices": [{"index": 0, "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text}}]})
                        .to_string();
                    let _ = write!(
                        conn,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{out}",
                        out.len()
                    );
                    return;
                }
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                );
                let event = |content: &str| {
                    format!(
                        "data: {}\n\n",
                        serde_json::json!({"id": "chatcmpl-crash", "object": "chat.completion.chunk",
                            "choices": [{"index": 0, "delta": {"content": content}}]})
                    )
                };
                if req["model"] == "endless" {
                    for i in 0..3000 {
                        std::thread::sleep(Duration::from_millis(20));
                        if conn.write_all(event(&format!("{i} ")).as_bytes()).is_err() {
                            return;
                        }
                    }
                }
                let _ = conn.write_all(format!("{}data: [DONE]\n\n", event(&text)).as_bytes());
            });
        }
    });
    url
}

/// The big answer: this head, `n` bytes of `x`, this tail.
const BIG_HEAD: &str = r#"{"id":"chatcmpl-big","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""#;
const BIG_TAIL: &str = r#""},"finish_reason":"stop"}]}"#;

fn big_len(n: usize) -> usize {
    BIG_HEAD.len() + n + BIG_TAIL.len()
}

/// The byte at `i` of the big answer with `n` bytes of filler.
fn big_byte(i: usize, n: usize) -> u8 {
    if i < BIG_HEAD.len() {
        BIG_HEAD.as_bytes()[i]
    } else if i < BIG_HEAD.len() + n {
        b'x'
    } else {
        BIG_TAIL.as_bytes()[i - BIG_HEAD.len() - n]
    }
}

/// `convo proxy` on port 0 in `t`'s home (killed when dropped).
pub fn start_proxy(t: &TestEnv, upstream: &str, extra: &[&str]) -> crate::serve_util::Server {
    let mut args = vec![
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--quiet",
        "--upstream",
        upstream,
    ];
    args.extend_from_slice(extra);
    crate::serve_util::Server::launch(t, &args)
}

/// The proxy answers a call (the end of a stream included) only once it is
/// recorded, so SIGKILL in the middle of a stream loses only that stream:
/// the store verifies, and holds every call answered before, each request
/// paired with its response, and the proxy starts again on it.
fn proxy_killed_mid_stream(backend: Backend) {
    use crate::serve_util::http;
    use std::io::Read;
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let upstream = crash_upstream();
    let mut proxy = start_proxy(&t, &upstream, &[]);
    let addr = proxy.addr.clone();
    let path = "/s/crash/main/v1/chat/completions";
    let call = |addr: &str, model: &str, said: &str, stream: bool| {
        let body = serde_json::json!({"model": model, "stream": stream,
            "messages": [{"role": "user", "content": said}]});
        http(
            addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        )
    };
    // Answered calls, streamed and not.
    let mut answered = Vec::new();
    for i in 0..6 {
        let said = format!("call {i}");
        let r = call(&addr, "scripted", &said, i % 2 == 1);
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.text().contains(&format!("echo: {said}")), "{}", r.text());
        answered.push((said, r.text()));
    }
    // A stream under way: read two events, then SIGKILL the proxy.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body =
        r#"{"model":"endless","stream":true,"messages":[{"role":"user","content":"cut short"}]}"#;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.windows(6).filter(|w| w == b"data: ").count() < 2 {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    proxy.child.kill().unwrap(); // SIGKILL
    proxy.child.wait().unwrap();
    // The client sees the stream end without its `[DONE]`.
    let _ = s.read_to_end(&mut seen);
    assert!(!String::from_utf8_lossy(&seen).contains("[DONE]"));

    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
    let log = t.run(&["log", "crash", "--json"]).json();
    let mut nodes = log.as_array().unwrap().clone();
    nodes.reverse(); // oldest first
    let kinds: Vec<&str> = nodes.iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["invoke", "request", "response", "complete"].repeat(answered.len()),
        "every answered call is a whole turn, and the cut stream is not one"
    );
    for (turn, (said, sent)) in nodes.chunks(4).zip(&answered) {
        let payload = |n: &serde_json::Value| n["payload"].as_str().unwrap().to_owned();
        assert_eq!(payload(&turn[0]), *said);
        let req: serde_json::Value = serde_json::from_str(&payload(&turn[1])).unwrap();
        assert_eq!(req["messages"][0]["content"], said.as_str());
        // The response recorded is the one this request got, byte for byte.
        assert_eq!(payload(&turn[2]), *sent);
        assert_eq!(payload(&turn[3]), format!("echo: {said}"));
        assert_eq!(turn[1]["sequence"], turn[2]["sequence"]);
        assert_eq!(turn[1]["submission"], turn[2]["submission"]);
    }

    // The proxy starts again on that store and continues the timeline.
    let mut proxy = start_proxy(&t, &upstream, &[]);
    let addr = proxy.addr.clone();
    let r = call(&addr, "scripted", "after the crash", false);
    assert_eq!(r.status, 200, "{}", r.text());
    let _ = proxy.child.kill();
    let _ = proxy.child.wait();
    let log = t.run(&["log", "crash", "--json"]).json();
    assert_eq!(log.as_array().unwrap().len(), 4 * answered.len() + 4);
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
}

/// A process's peak resident memory (`VmHWM`), in KiB.
fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_100_mib_answer_that_is_not_streamed_passes_through_with_bounded_memory() {
    use std::io::Read;
    if !std::path::Path::new("/proc/self/status").exists() {
        return; // VmHWM is Linux's
    }
    let t = TestEnv::new();
    let upstream = crash_upstream();
    let mut proxy = start_proxy(&t, &upstream, &["--record-limit-mib", "1"]);
    let addr = proxy.addr.clone();
    let path = "/s/big/main/v1/chat/completions";
    let send = |model: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let body =
            format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"big"}}]}}"#);
        // HTTP/1.0: the body comes as sent, up to the close.
        write!(
            s,
            "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        s
    };
    // A small answer first, so the baseline holds what any call needs.
    let mut s = send("big-0");
    let mut small = Vec::new();
    s.read_to_end(&mut small).unwrap();
    assert!(
        small.starts_with(b"HTTP/1.0 200"),
        "{}",
        String::from_utf8_lossy(&small)
    );
    let base = peak_kib(proxy.child.id());

    let n = 100 << 20;
    let mut s = send("big-100");
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut at = 0usize; // bytes of the body checked
    loop {
        let k = s.read(&mut buf).unwrap();
        if k == 0 {
            break;
        }
        let mut got = &buf[..k];
        if head.len() < 4 || !head.ends_with(b"\r\n\r\n") {
            // Still in the response head.
            let mut used = 0;
            while used < got.len() && !head.ends_with(b"\r\n\r\n") {
                head.push(got[used]);
                used += 1;
            }
            got = &got[used..];
        }
        for &b in got {
            assert_eq!(b, big_byte(at, n), "byte {at} of the answer");
            at += 1;
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}");
    assert_eq!(at, big_len(n), "the whole answer passed");
    let grew_mib = peak_kib(proxy.child.id()).saturating_sub(base) / 1024;
    eprintln!("the proxy's peak memory grew by {grew_mib} MiB");
    // Reading the answer whole would hold 100 MiB at once; passing it on
    // holds the chunks in flight and the 1 MiB the record keeps.
    assert!(
        grew_mib < 60,
        "the proxy's peak memory grew by {grew_mib} MiB"
    );
    let _ = proxy.child.kill();
    let _ = proxy.child.wait();

    let log = t.run(&["log", "big", "--json"]).json();
    let resp = &log.as_array().unwrap()[1]; // newest first: complete, response…
    assert_eq!(resp["kind"], "response");
    let d = &resp["diagnostics"];
    assert_eq!(d["status"], 200);
    assert_eq!(d["streamed"], false);
    assert_eq!(d["truncated"]["total_bytes"], big_len(n));
    assert_eq!(d["truncated"]["recorded_bytes"], 1 << 20);
    let kept = resp["payload"].as_str().unwrap().as_bytes();
    assert_eq!(kept.len(), 1 << 20);
    assert!(kept.iter().enumerate().all(|(i, &b)| b == big_byte(i, n)));
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
}

/// Sends `POST path` with a body of `len` bytes of `x` (with a
/// Content-Length, or chunked) from another thread, and reads the answer
/// as it comes: a server may answer before it has read the body.
fn post_big(addr: &str, path: &str, len: usize, chunked: bool) -> crate::serve_util::Resp {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {len}")
    };
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nConnection: close\r\n{framing}\r\n\r\n"
    )
    .unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let block = vec![b'x'; 64 * 1024];
        let mut left = len;
        while left > 0 {
            let k = left.min(block.len());
            let sent = if chunked {
                write!(w, "{k:x}\r\n")
                    .and_then(|_| w.write_all(&block[..k]))
                    .and_then(|_| w.write_all(b"\r\n"))
            } else {
                w.write_all(&block[..k])
            };
            if sent.is_err() {
                return; // the server answered and closed
            }
            left -= k;
        }
        if chunked {
            let _ = w.write_all(b"0\r\n\r\n");
        }
    });
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(k) => raw.extend_from_slice(&buf[..k]),
        }
        // The answer is complete once its head and Content-Length are in.
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let want = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if want.is_some_and(|n| raw.len() >= end + 4 + n) {
                break;
            }
        }
    }
    drop(s);
    let _ = writer.join();
    crate::serve_util::parse(&raw)
}

/// `convo proxy --max-body-mib 1`: a 70 MB body is refused with 413 and a
/// JSON error while it streams in (the proxy's peak memory stays far below
/// the body), chunked or not; a body under the limit passes, multipart
/// included (the CSRF content-type rule is the web view's and the API's,
/// not the proxy's), while a request a browser marks cross-site and a
/// path that climbs out are refused.
#[test]
fn the_proxy_refuses_a_body_over_the_limit_as_it_streams_in() {
    if !std::path::Path::new("/proc/self/status").exists() {
        return; // VmHWM is Linux's
    }
    let t = TestEnv::new();
    let upstream = crash_upstream();
    let proxy = start_proxy(&t, &upstream, &["--max-body-mib", "1"]);
    let addr = proxy.addr.clone();
    let path = "/s/limits/main/v1/chat/completions";
    // A call under the limit first, so the baseline holds what any call needs.
    let text = "y".repeat(600 * 1024);
    let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let r = proxy.post_json(path, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    let base = peak_kib(proxy.child.id());

    let r = post_big(&addr, path, 70_000_000, false);
    assert_eq!(r.status, 413, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["code"], "too_large", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-body-mib")
    );
    let r = post_big(&addr, path, 5 << 20, true);
    assert_eq!(r.status, 413, "{}", r.text());
    let grew_mib = peak_kib(proxy.child.id()).saturating_sub(base) / 1024;
    eprintln!("the proxy's peak memory grew by {grew_mib} MiB for a 70 MB body");
    // Reading the body whole would hold 70 MB (the proxy held ~770 MB
    // before the limit was enforced); refusing it holds at most the limit.
    assert!(
        grew_mib < 16,
        "the proxy's peak memory grew by {grew_mib} MiB"
    );

    // Any content type passes through: an SDK uploads multipart.
    let multipart =
        "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--b--\r\n";
    let r = proxy.req(
        "POST",
        "/s/limits/main/v1/files",
        &[("Content-Type", "multipart/form-data; boundary=b")],
        multipart.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // A browser's cross-site request is refused before it goes upstream.
    let r = proxy.req(
        "POST",
        path,
        &[
            ("Content-Type", "text/plain"),
            ("Origin", "https://attacker.example"),
        ],
        br#"{"model":"m","messages":[]}"#,
    );
    assert_eq!(r.status, 403, "{}", r.text());
    // The path guard `convo serve --upstream` has.
    for p in [
        "/v1/../api/v1/sessions",
        "/s/limits/main/v1/chat%2Fcompletions",
        "/v1/%2e%2e/%2e%2e/etc/passwd",
    ] {
        let r = proxy.req("GET", p, &[], b"");
        assert_eq!(r.status, 400, "{p}: {}", r.text());
    }
    let log = t.run(&["log", "limits", "--json"]).json();
    let nodes = log.as_array().unwrap();
    assert_eq!(nodes.len(), 8, "two calls recorded, nothing refused");
    let r = t.run(&["verify"]);
    assert_eq!(r.code(), 0, "{}{}", r.stdout(), r.stderr());
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    sigkill_mid_stream,
    proxy_killed_mid_stream,
);

/// Bytes of every file in `dir` (what `du` counts, apparent sizes).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        total += if m.is_dir() {
            dir_bytes(&e.path())
        } else {
            m.len()
        };
    }
    total
}

/// A 1,000-call conversation through `convo proxy`, each call resending
/// the whole history (as chat clients do), then a graceful stop (SIGTERM):
/// no write-ahead log is left beside the database (it used to stay at
/// 15 MB), and the store's whole directory holds at most twice the
/// conversation's distinct bytes plus 4 KB a call.
#[test]
fn a_stopped_proxy_leaves_no_log_and_a_long_conversation_stays_small() {
    let t = TestEnv::new();
    let upstream = crash_upstream();
    let srv = start_proxy(&t, &upstream, &[]);
    let calls = 1000;
    let mut messages: Vec<serde_json::Value> = Vec::new();
    let mut distinct = 0usize;
    let mut last_request = 0usize;
    for i in 0..calls {
        let said = format!("turn {i}: tell me one more thing about the tides");
        messages.push(serde_json::json!({"role": "user", "content": said}));
        let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
        last_request = body.len();
        let r = srv.req(
            "POST",
            "/s/tides/main/v1/chat/completions",
            &[("Content-Type", "application/json")],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        distinct += r.body.len();
        let answer = r.json()["choices"][0]["message"].clone();
        messages.push(answer);
    }
    distinct += last_request;
    let status = srv.stop();
    assert!(status.success(), "{status:?}");
    let wal = std::fs::metadata(t.home().join("convo.db-wal")).map_or(0, |m| m.len());
    let total = dir_bytes(t.home());
    eprintln!(
        "{calls} calls: {distinct} distinct bytes, {total} bytes on disk ({} a call), WAL {wal} after the stop",
        total / calls as u64
    );
    assert!(
        wal <= 1 << 20,
        "a {wal}-byte WAL left after a graceful stop"
    );
    let budget = 2 * distinct as u64 + 4096 * calls as u64;
    assert!(total <= budget, "{total} bytes on disk, over {budget}");
    assert_eq!(
        t.run(&["session", "list", "--json"])
            .json()
            .as_array()
            .map(Vec::len),
        Some(1),
        "one conversation"
    );
}
