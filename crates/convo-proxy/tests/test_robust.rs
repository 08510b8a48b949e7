//! Failures and load: upstream errors and timeouts, clients that leave,
//! a 100 MiB stream, a 2 MiB answer that is not streamed (whole and cut),
//! concurrent calls on one timeline, replay of a fork.

use crate::common::{Server, off_rt};
use crate::upstream::Upstream;
use convo_core::{BranchName, HashPrefix, Kind};
use convo_proxy::ProxyConfig;
use convo_proxy::replay::{OnMiss, ReplaySpec};
use convo_store::TimelineNode;
use convo_testutil::Backend;
use serde_json::{Value, json};
use sha2::Digest as _;
use std::time::Duration;

fn chat(model: &str, text: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": text}]})
}

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn diag(n: &TimelineNode) -> Value {
    n.stored.node.diagnostics.to_value()
}

/// The timeline once it holds `len` nodes (a stream is recorded just
/// after its last byte reached the client).
async fn timeline_of(srv: &Server, session: &str, branch: &str, len: usize) -> Vec<TimelineNode> {
    let mut last = Vec::new();
    for _ in 0..500 {
        let (session, branch) = (session.to_owned(), branch.to_owned());
        last = off_rt(|| {
            let mut store = srv.store();
            let Ok(s) = store.find_session(&session) else {
                return Vec::new();
            };
            store
                .timeline(&s.id, &BranchName::new(&branch).unwrap())
                .unwrap_or_default()
        });
        if last.len() >= len {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_timeouts_and_clients_that_leave_are_recorded_with_status() {
    let up = Upstream::start().await;
    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    cfg.timeout = Duration::from_millis(500);
    let srv = Server::start(cfg).await;
    let url = format!("{}/s/errors/main/v1/chat/completions", srv.url);

    // A 5xx reaches the client as the upstream sent it.
    let res = post(&url, &chat("server-error", "a", false)).await;
    assert_eq!(res.status(), 503);
    assert_eq!(res.headers()["x-request-id"], "req_503");
    let sent = res.bytes().await.unwrap();
    assert_eq!(
        &sent[..],
        b"{\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}"
    );

    // An upstream that does not answer in time: a clear 504.
    let res = post(&url, &chat("slow", "b", false)).await;
    assert_eq!(res.status(), 504);
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["error"]["code"], "upstream_timeout");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out"),
        "{e}"
    );

    // A client that leaves mid-stream: the proxy stops reading the
    // upstream and records what passed, marked partial.
    let mut res = post(&url, &chat("dribble", "c", true)).await;
    assert_eq!(res.status(), 200);
    let first = res.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    drop(res);

    let t = timeline_of(&srv, "errors", "main", 12).await;
    assert_eq!(t.len(), 12);
    let (e503, e504, left) = (diag(&t[2]), diag(&t[6]), diag(&t[10]));
    assert_eq!(e503["status"], 503);
    assert_eq!(e503["upstream_request_id"], "req_503");
    assert_eq!(&t[2].payload[..], &sent[..]);
    assert_eq!(diag(&t[3])["status"], 503);
    assert_eq!(e504["status"], 504);
    assert!(e504["error"].as_str().unwrap().contains("timed out"));
    assert_eq!(left["partial"], "the client disconnected");
    assert_eq!(left["streamed"], true);
    let passed = left["chunks"].as_array().unwrap().len();
    assert!(
        (1..100).contains(&passed),
        "the upstream was not read to its end: {passed} chunks"
    );
    assert_eq!(t[11].stored.node.kind, Kind::Complete);
    assert_eq!(diag(&t[11])["error"], "the client disconnected");
    srv.stop().await;
    up.stop().await;
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mib_stream_passes_with_bounded_memory_and_a_bounded_record() {
    let up = Upstream::start().await;
    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    cfg.record_limit = Some(1 << 20);
    let srv = Server::start(cfg).await;
    let url = format!("{}/s/big/main/v1/chat/completions", srv.url);
    let before = rss_kib();
    let mut peak = before;
    let mut res = post(&url, &chat("big-100", "d", true)).await;
    assert_eq!(res.status(), 200);
    let (mut total, mut hash, mut tail) = (0u64, sha2::Sha256::new(), Vec::new());
    while let Some(chunk) = res.chunk().await.unwrap() {
        total += chunk.len() as u64;
        hash.update(&chunk);
        tail = chunk.to_vec();
        peak = peak.max(rss_kib());
    }
    assert!(total >= 100 << 20, "{total} bytes");
    assert!(tail.ends_with(b"data: [DONE]\n\n"));
    // Buffering the stream (in the proxy or its record) would hold
    // 100 MiB at once; chunks in flight and a 1 MiB record do not. (The
    // bound is generous, under the 100 MiB a buffered stream takes: this
    // is the whole test process, and other tests run beside this one —
    // SDK uploads and Node clients among them, which took it to 60 MiB.)
    let grew_mib = peak.saturating_sub(before) / 1024;
    assert!(grew_mib < 90, "memory grew by {grew_mib} MiB");

    let t = timeline_of(&srv, "big", "main", 4).await;
    let d = diag(&t[2]);
    assert_eq!(t[2].payload.len(), 1 << 20);
    assert_eq!(d["truncated"]["total_bytes"], total);
    assert_eq!(d["truncated"]["recorded_bytes"], 1 << 20);
    assert_eq!(d["truncated"]["sha256"], hex::encode(hash.finalize()));
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;

    // Such a call cannot be replayed exactly, and says so.
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(ReplaySpec::parse("big").unwrap());
    let srv = Server::start_on(cfg, dir, store_url).await;
    let res = post(
        &format!("{}/v1/chat/completions", srv.url),
        &chat("big-100", "d", true),
    )
    .await;
    assert_eq!(res.status(), 502);
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["error"]["code"], "replay_truncated");
    srv.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_that_is_not_streamed_passes_through_and_is_recorded() {
    use crate::upstream::{BIG_JSON_HEAD, BIG_JSON_TAIL};
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let url = format!("{}/s/large/main/v1/chat/completions", srv.url);

    // 2 MiB, past what is read whole: passed on before it was recorded
    // (so no `x-convo-node`), recorded whole all the same.
    let res = post(&url, &chat("json-2", "e", false)).await;
    assert_eq!(res.status(), 200);
    assert!(!res.headers().contains_key("x-convo-node"));
    let body = res.bytes().await.unwrap();
    assert_eq!(
        body.len(),
        BIG_JSON_HEAD.len() + (2 << 20) + BIG_JSON_TAIL.len()
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["usage"]["total_tokens"], 3);
    let t = timeline_of(&srv, "large", "main", 4).await;
    assert_eq!(&t[2].payload[..], &body[..]);
    let d = diag(&t[2]);
    assert_eq!(d["streamed"], false);
    assert!(d["usage"].is_object(), "{}", d["usage"]);
    assert!(d.get("truncated").is_none());
    assert_eq!(t[3].stored.node.kind, Kind::Complete);
    assert_eq!(t[3].payload, vec![b'y'; 2 << 20]);

    // The same cut by the upstream: cut for the client too, and recorded
    // as partial with what arrived.
    let res = post(&url, &chat("json-2-cut", "f", false)).await;
    assert_eq!(res.status(), 200);
    assert!(res.bytes().await.is_err(), "the cut reached the client");
    let t = timeline_of(&srv, "large", "main", 8).await;
    let d = diag(&t[6]);
    let why = d["partial"].as_str().unwrap();
    assert!(why.contains("cut the answer"), "{why}");
    assert!(t[6].payload.starts_with(BIG_JSON_HEAD.as_bytes()));
    assert!(t[6].payload.len() > 1 << 20);
    assert_eq!(diag(&t[7])["error"], why);
    srv.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_timeline_lose_nothing_and_stay_paired() {
    concurrent_case(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_timeline_on_postgresql() {
    concurrent_case(Backend::Postgres).await;
}

async fn concurrent_case(backend: Backend) {
    let up = Upstream::start().await;
    let cfg = ProxyConfig::new(Some(up.url.clone()));
    let Some((srv, store)) = Server::on(cfg, backend).await else {
        return;
    };
    let url = format!("{}/s/together/main/v1/chat/completions", srv.url);
    const N: usize = 48;
    let mut tasks = Vec::new();
    for i in 0..N {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let res = post(&url, &chat("m", &format!("call {i}"), i % 2 == 0)).await;
            assert_eq!(res.status(), 200);
            res.bytes().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let t = timeline_of(&srv, "together", "main", 4 * N).await;
    assert_eq!(t.len(), 4 * N, "no lost node");
    let mut seen = std::collections::BTreeSet::new();
    for turn in t.chunks(4) {
        let kinds: Vec<Kind> = turn.iter().map(|n| n.stored.node.kind).collect();
        assert_eq!(
            kinds,
            [Kind::Invoke, Kind::Request, Kind::Response, Kind::Complete]
        );
        let input = String::from_utf8(turn[0].payload.clone()).unwrap();
        let req: Value = serde_json::from_slice(&turn[1].payload).unwrap();
        assert_eq!(req["messages"][0]["content"], input.as_str());
        assert_eq!(
            turn[2].stored.node.sequence, turn[1].stored.node.sequence,
            "the response answers its own request"
        );
        assert_eq!(turn[3].payload, format!("echo: {input}").into_bytes());
        seen.insert(input);
    }
    assert_eq!(seen.len(), N, "every call recorded once");
    srv.stop().await;
    up.stop().await;
    crate::common::off_rt(move || drop(store));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_timeline_forked_at_node_n_serves_the_record_then_goes_live() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/s/forked/main/v1/chat/completions", srv.url);
    let one = chat("m", "one", false);
    let two = chat("m", "two", true);
    let first = post(&base, &one).await.bytes().await.unwrap();
    post(&base, &two).await.bytes().await.unwrap();
    post(&base, &chat("m", "three", false))
        .await
        .bytes()
        .await
        .unwrap();
    let main = timeline_of(&srv, "forked", "main", 12).await;
    // Fork `alt` at the end of the first turn (node N).
    let n = main[3].stored.hash;
    off_rt(|| {
        let mut s = srv.store();
        let id = s.find_session("forked").unwrap().id;
        s.transaction(|l| {
            l.fork(
                &id,
                &HashPrefix::parse(&n.to_hex()).unwrap(),
                &BranchName::new("alt").unwrap(),
                1,
            )
        })
        .unwrap();
    });
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    let upstream_calls = up.seen.calls.lock().unwrap().len();

    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    let mut spec = ReplaySpec::parse("forked:alt").unwrap();
    spec.on_miss = OnMiss::Live;
    cfg.replay = Some(spec);
    let srv = Server::start_on(cfg, dir, store_url).await;
    let url = format!("{}/v1/chat/completions", srv.url);
    // Up to N: from the record, the upstream untouched.
    let res = post(&url, &one).await;
    assert_eq!(res.headers()["x-convo-replayed"], "true");
    assert_eq!(res.bytes().await.unwrap(), first);
    assert_eq!(up.seen.calls.lock().unwrap().len(), upstream_calls);
    // After N: live, recorded on `alt` itself.
    let res = post(&url, &two).await;
    assert!(res.headers().get("x-convo-replayed").is_none());
    let text = res.text().await.unwrap();
    assert!(text.contains("data: [DONE]"));
    assert_eq!(up.seen.calls.lock().unwrap().len(), upstream_calls + 1);
    let alt = timeline_of(&srv, "forked", "alt", 4 + 1 + 4).await;
    assert_eq!(alt.len(), 9, "first turn, fork, the live turn");
    assert_eq!(alt[3].stored.hash, n);
    assert_eq!(alt[4].stored.node.kind, Kind::Fork);
    assert_eq!(alt[5].payload, b"two");
    assert_eq!(diag(&alt[7])["streamed"], true);
    let main_after = timeline_of(&srv, "forked", "main", 12).await;
    assert_eq!(main_after.len(), 12, "the recording is untouched");
    srv.stop().await;
    up.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_key_goes_upstream_is_noted_and_never_recorded() {
    const CONFIGURED: &str = "sk-configured-9a8b7c6d5e4f30211203";
    let up = Upstream::start().await;
    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    cfg.upstream_key = Some(CONFIGURED.into());
    let srv = Server::start(cfg).await;
    let url = format!("{}/s/keyed/main/v1/chat/completions", srv.url);
    let res = post(&url, &chat("m", "k", true)).await;
    assert_eq!(res.status(), 200);
    let text = res.text().await.unwrap();
    assert!(
        !text.contains("total_tokens"),
        "the client did not ask for usage"
    );
    let (h, sent) = up.seen.last();
    assert_eq!(h["authorization"], format!("Bearer {CONFIGURED}").as_str());
    let t = timeline_of(&srv, "keyed", "main", 4).await;
    // What the client sent is the payload; what went upstream differently
    // is named (the key without its value, the usage option).
    let req: Value = serde_json::from_slice(&t[1].payload).unwrap();
    assert!(req.get("stream_options").is_none());
    assert_eq!(sent["stream_options"]["include_usage"], true);
    let changes = &diag(&t[1])["upstream_changes"];
    assert_eq!(changes["stream_options.include_usage"], true);
    assert_eq!(
        changes["headers.authorization"],
        "added: the proxy's configured key"
    );
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    let all = crate::common::all_bytes(dir.path());
    assert!(!crate::common::contains(&all, CONFIGURED.as_bytes()));
    assert!(!crate::common::contains(&all, b"9a8b7c6d5e4f"));

    // Replayed, the stream is what the client got live (usage removed).
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(ReplaySpec::parse("keyed").unwrap());
    let srv = Server::start_on(cfg, dir, store_url).await;
    let again = post(
        &format!("{}/v1/chat/completions", srv.url),
        &chat("m", "k", true),
    )
    .await
    .text()
    .await
    .unwrap();
    assert_eq!(again, text);
    srv.stop().await;
    up.stop().await;
}

/// Under `convo serve --upstream` as in `convo proxy`: a body over the
/// server's limit is refused with 413 and a JSON error, never forwarded
/// nor recorded; one under it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_refused_on_the_serve_mount() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store_url = format!("sqlite://{}/convo.db", dir.path().display());
    let cfg = ProxyConfig::new(Some(up.url.clone()));
    let srv = Server::start_as(cfg, dir, store_url, None, false, Some(1 << 20)).await;
    let url = format!("{}/s/limited/main/v1/chat/completions", srv.url);
    let res = post(&url, &chat("m", &"z".repeat(3 << 20), false)).await;
    assert_eq!(res.status(), 413);
    let e: Value = res.json().await.unwrap();
    assert_eq!(e["error"]["code"], "too_large", "{e}");
    assert!(
        up.seen.calls.lock().unwrap().is_empty(),
        "nothing went upstream"
    );
    let res = post(&url, &chat("m", "small", false)).await;
    assert_eq!(res.status(), 200);
    let t = timeline_of(&srv, "limited", "main", 4).await;
    assert_eq!(t.len(), 4, "only the call under the limit is recorded");
    srv.stop().await;
    up.stop().await;
}

/// A process holding a SQLite write transaction open until its stdin
/// closes (python3's sqlite3 module: the lock another program takes).
struct HeldLock {
    child: std::process::Child,
}

impl HeldLock {
    fn take(db: &std::path::Path) -> HeldLock {
        use std::io::BufRead as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys\n\
                 c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
                 c.execute('BEGIN IMMEDIATE')\n\
                 print('locked', flush=True)\n\
                 sys.stdin.read()\n\
                 c.execute('ROLLBACK')\n",
            ])
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        HeldLock { child }
    }

    fn release(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// Recording never holds the answer: with the store locked by another
/// process, calls (whole and streamed) are answered, their records wait in
/// the queue (`x-convo-recording: queued`), nothing is counted lost, and
/// the records land, in order, once the lock is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_store_never_holds_the_answer_and_the_records_land_after() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let url = format!("{}/s/locked/main/v1/chat/completions", srv.url);
    let res = post(&url, &chat("m", "before", false)).await;
    assert_eq!(res.status(), 200);
    assert!(res.headers().contains_key("x-convo-node"));

    let db = srv.dir.path().join("convo.db");
    let lock = off_rt(|| HeldLock::take(&db));
    let res = post(&url, &chat("m", "during", false)).await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["x-convo-recording"], "queued");
    assert!(!res.headers().contains_key(convo_proxy::FAILURES_HEADER));
    let answer: Value = res.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "echo: during");
    let res = post(&url, &chat("m", "during, streamed", true)).await;
    assert_eq!(res.status(), 200);
    assert!(!res.headers().contains_key(convo_proxy::FAILURES_HEADER));
    let body = res.bytes().await.unwrap();
    assert!(
        String::from_utf8_lossy(&body).contains("data: [DONE]"),
        "the whole stream arrived"
    );
    // Still locked: nothing of either call is in the store yet, and the
    // proxy says so (counted, never silent).
    let t = timeline_of(&srv, "locked", "main", 0).await;
    assert_eq!(t.len(), 4);
    let status = |srv_url: String| async move {
        reqwest::get(format!("{srv_url}/convo/recording"))
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let st = status(srv.url.clone()).await;
    assert_eq!(st["queued"], 2, "{st}");
    assert_eq!(st["answered_before_recorded"], 2, "{st}");
    assert_eq!(st["not_recorded"], 0, "{st}");
    assert_eq!(st["store_locked"], true, "{st}");

    off_rt(|| lock.release());
    let t = timeline_of(&srv, "locked", "main", 12).await;
    assert_eq!(t.len(), 12, "both queued calls were recorded");
    // The records' tasks end just after their commit.
    let mut st = status(srv.url.clone()).await;
    while st["queued"] != 0 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        st = status(srv.url.clone()).await;
    }
    assert_eq!(st["store_locked"], false, "{st}");
    assert_eq!(st["not_recorded"], 0, "{st}");
    assert_eq!(diag(&t[2])["status"], 200);
    assert!(String::from_utf8_lossy(&t[4].payload).contains("during"));
    assert!(String::from_utf8_lossy(&t[8].payload).contains("during, streamed"));
    assert_eq!(diag(&t[10])["streamed"], true);
    srv.stop().await;
    up.stop().await;
}

/// The proxy's recording status (`GET /convo/recording`).
async fn recording_status(srv: &Server) -> Value {
    reqwest::get(format!("{}/convo/recording", srv.url))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap()
}

/// Calls answered while the store refuses the record: each goes out at
/// once marked queued, none counted lost, and the writer says the store
/// refuses (it found so at once: a proxy that waited for its record
/// instead would have answered after [`convo_proxy::RECORD_WAIT`] with
/// the store still not known to refuse).
async fn answered_while_refused(srv: &Server, url: &str, texts: &[&str], queued: usize) {
    for text in texts {
        let res = post(url, &chat("m", text, false)).await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["x-convo-recording"], "queued", "{text}");
        assert!(!res.headers().contains_key(convo_proxy::FAILURES_HEADER));
        let answer: Value = res.json().await.unwrap();
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            format!("echo: {text}")
        );
    }
    let st = recording_status(srv).await;
    assert_eq!(st["queued"], queued, "{st}");
    assert_eq!(st["not_recorded"], 0, "{st}");
    assert_eq!(st["store_locked"], true, "{st}");
}

/// On PostgreSQL too, recording never holds the answer: with the writers'
/// advisory lock held by another session, with a table lock that keeps
/// inserts out, and with the database refusing connections (its sessions
/// cut, as in a restart), calls are answered at once and queued, and
/// every record lands, in order, once the store takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_or_restarting_postgresql_store_never_holds_the_answer() {
    let up = Upstream::start().await;
    let cfg = ProxyConfig::new(Some(up.url.clone()));
    let Some((srv, Some(fresh))) = Server::on(cfg, Backend::Postgres).await else {
        return;
    };
    let url = format!("{}/s/locked/main/v1/chat/completions", srv.url);
    let res = post(&url, &chat("m", "before", false)).await;
    assert!(res.headers().contains_key("x-convo-node"));
    let connect =
        |u: String| off_rt(move || postgres::Client::connect(&u, postgres::NoTls).unwrap());

    // Another session holds the lock every convo writer takes.
    let mut other = connect(srv.store_url.clone());
    let lock = format!(
        "SELECT pg_advisory_lock({})",
        convo_store::postgres::WRITE_LOCK
    );
    let mut other = off_rt(move || {
        other.batch_execute(&lock).unwrap();
        other
    });
    answered_while_refused(&srv, &url, &["advisory 1", "advisory 2"], 2).await;
    let mut other = off_rt(move || {
        other
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .unwrap();
        other
    });
    srv.proxy.recordings_written().await;

    // A table lock that lets readers in but no insert.
    let mut other = off_rt(move || {
        other
            .batch_execute("BEGIN; LOCK TABLE nodes IN EXCLUSIVE MODE")
            .unwrap();
        other
    });
    answered_while_refused(&srv, &url, &["table"], 1).await;
    off_rt(move || other.batch_execute("ROLLBACK").unwrap());
    srv.proxy.recordings_written().await;

    // The database away: its sessions cut, new ones refused.
    let admin = std::env::var("CONVO_TEST_PG").unwrap();
    let name = srv.store_url.rsplit('/').next().unwrap().to_owned();
    let mut admin = connect(admin);
    let mut admin = off_rt(move || {
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} ALLOW_CONNECTIONS false;                  SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            ))
            .unwrap();
        (admin, name)
    });
    answered_while_refused(&srv, &url, &["away 1", "away 2"], 2).await;
    off_rt(move || {
        let (admin, name) = &mut admin;
        admin
            .batch_execute(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
            .unwrap();
    });
    srv.proxy.recordings_written().await;

    let st = recording_status(&srv).await;
    assert_eq!(st["store_locked"], false, "{st}");
    assert_eq!(st["not_recorded"], 0, "{st}");
    assert_eq!(st["answered_before_recorded"], 5, "{st}");
    let t = timeline_of(&srv, "locked", "main", 24).await;
    assert_eq!(t.len(), 24, "every call recorded");
    let asked: Vec<String> = t
        .chunks(4)
        .map(|turn| {
            let req: Value = serde_json::from_slice(&turn[1].payload).unwrap();
            req["messages"][0]["content"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        asked,
        [
            "before",
            "advisory 1",
            "advisory 2",
            "table",
            "away 1",
            "away 2"
        ]
    );
    srv.stop().await;
    off_rt(move || drop(fresh));
    up.stop().await;
}

/// A stream the upstream cuts half way through an event reaches the
/// client exactly as the upstream left it, every byte before the cut and
/// then the error, as it is recorded (the client asked for the usage
/// chunks, so nothing is filtered); twenty times over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_mid_event_reaches_the_client_as_it_is_recorded() {
    use futures_util::StreamExt as _;
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let url = format!("{}/s/cut/main/v1/chat/completions", srv.url);
    for i in 0..20 {
        let mut body = chat("cut-mid", &format!("question {i}"), true);
        body["stream_options"] = json!({"include_usage": true});
        let res = post(&url, &body).await;
        assert_eq!(res.status(), 200);
        let mut got = Vec::new();
        let mut failed = false;
        let mut stream = res.bytes_stream();
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(b) => got.extend_from_slice(&b),
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        assert!(failed, "try {i}: the cut reaches the client as an error");
        let t = timeline_of(&srv, "cut", "main", 4 * (i + 1)).await;
        let resp = t
            .iter()
            .rev()
            .find(|n| n.stored.node.kind == Kind::Response)
            .unwrap();
        assert!(diag(resp)["partial"].is_string(), "{}", diag(resp));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&resp.payload),
            "try {i}: the client got what was recorded"
        );
    }
    srv.stop().await;
    up.stop().await;
}
