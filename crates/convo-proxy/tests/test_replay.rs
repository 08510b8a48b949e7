//! Replay: the recording answers with the upstream stopped, byte for byte.

use crate::common::{Server, off_rt};
use crate::upstream::Upstream;
use convo_core::BranchName;
use convo_proxy::ProxyConfig;
use convo_proxy::replay::{OnMiss, ReplaySpec};
use serde_json::{Value, json};

type Call = (&'static str, Value, Vec<(&'static str, &'static str)>);

fn calls() -> Vec<Call> {
    vec![
        (
            "v1/chat/completions",
            json!({"model": "m", "user": "u1", "messages": [{"role": "user", "content": "one"}]}),
            vec![],
        ),
        (
            "v1/chat/completions",
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "two"}]}),
            vec![],
        ),
        (
            "v1/chat/completions",
            json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {}}}],
            "messages": [{"role": "user", "content": "three"}]}),
            vec![],
        ),
        (
            "v1/messages",
            json!({"model": "claude", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "four"}]}),
            vec![("anthropic-version", "2023-06-01")],
        ),
        (
            "v1/chat/completions",
            json!({"model": "rate-limited", "messages": [{"role": "user", "content": "five"}]}),
            vec![],
        ),
    ]
}

async fn send(
    base: &str,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Option<String>, Vec<u8>) {
    let mut r = reqwest::Client::new()
        .post(format!("{base}/{path}"))
        .json(body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let res = r.send().await.unwrap();
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, ct, res.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_session_replays_byte_for_byte_with_the_upstream_stopped() {
    let up = Upstream::start().await;
    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    cfg.anthropic_upstream = Some(up.url.clone());
    let srv = Server::start(cfg).await;
    let base = format!("{}/s/rec/main", srv.url);
    let mut live = Vec::new();
    for (path, body, h) in calls() {
        live.push(send(&base, path, &body, &h).await);
    }
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    up.stop().await;

    // No upstream at all now.
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(ReplaySpec::parse("rec:main").unwrap());
    let srv = Server::start_on(cfg, dir, store_url.clone()).await;
    // Replayed under any base path; `user` is volatile.
    let base = srv.url.clone();
    for (i, (path, mut body, h)) in calls().into_iter().enumerate() {
        if i == 0 {
            body["user"] = json!("someone else");
        }
        let got = send(&base, path, &body, &h).await;
        assert_eq!(got, live[i], "call {i} replayed byte for byte");
    }
    // Exhausted: a 400 (no SDK retries it) that says so.
    let (status, _, body) = send(&base, "v1/chat/completions", &json!({"model": "m"}), &[]).await;
    assert_eq!(status, 400);
    let e: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(e["error"]["code"], "replay_exhausted");
    let dir = srv.stop().await;

    // A call the recording does not have: 400 naming the closest
    // recorded call and what differs.
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(ReplaySpec::parse("rec").unwrap());
    let srv = Server::start_on(cfg, dir, store_url).await;
    let changed = json!({"model": "other", "messages": [{"role": "user", "content": "one"}]});
    let (status, _, body) = send(&srv.url, "v1/chat/completions", &changed, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["error"]["code"],
        "replay_miss"
    );
    let e: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(e["error"]["differences"], json!(["/body/model"]));
    assert_eq!(e["error"]["recorded"]["body"]["model"], "m");
    assert_eq!(e["error"]["received"]["body"]["model"], "other");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_miss_live_forks_before_the_missed_call_and_records_there() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/s/trip/main", srv.url);
    let one = json!({"model": "m", "messages": [{"role": "user", "content": "one"}]});
    let two = json!({"model": "m", "messages": [{"role": "user", "content": "two"}]});
    let first = send(&base, "v1/chat/completions", &one, &[]).await;
    send(&base, "v1/chat/completions", &two, &[]).await;
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;

    let mut cfg = ProxyConfig::new(Some(up.url.clone()));
    let mut spec = ReplaySpec::parse("trip").unwrap();
    spec.on_miss = OnMiss::Live;
    cfg.replay = Some(spec);
    let srv = Server::start_on(cfg, dir, store_url).await;
    assert_eq!(
        send(&srv.url, "v1/chat/completions", &one, &[]).await,
        first
    );
    let other = json!({"model": "m", "messages": [{"role": "user", "content": "changed"}]});
    let (status, _, body) = send(&srv.url, "v1/chat/completions", &other, &[]).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "echo: changed");
    // Everything after goes live on the fork too.
    send(&srv.url, "v1/chat/completions", &two, &[]).await;
    let (main, live) = off_rt(|| {
        let mut s = srv.store();
        let id = s.find_session("trip").unwrap().id;
        (
            s.timeline(&id, &BranchName::main()).unwrap(),
            s.timeline(&id, &BranchName::new("live-1").unwrap())
                .unwrap(),
        )
    });
    assert_eq!(main.len(), 8, "the recording is untouched");
    assert_eq!(
        live.len(),
        4 + 1 + 8,
        "first turn shared, fork, two live turns"
    );
    assert_eq!(live[3].stored.hash, main[3].stored.hash);
    assert_eq!(live[5].payload, b"changed");
    // The call that went live after the fork and the one after it count
    // as live, not as misses.
    let summary = srv.proxy.replay_summary().unwrap();
    assert!(
        summary.contains("1 of 3 calls matched") && summary.contains("2 went live, 0 missed"),
        "{summary}"
    );
    srv.stop().await;
    up.stop().await;
}

/// Reads check what they serve: a recorded answer edited behind convo's
/// back is never replayed; the replay does not start, naming the payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_edited_behind_convos_back_is_not_replayed() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let one = json!({"model": "m", "messages": [{"role": "user", "content": "one"}]});
    let (status, _, answer) = send(
        &format!("{}/s/edited/main", srv.url),
        "v1/chat/completions",
        &one,
        &[],
    )
    .await;
    assert_eq!(status, 200);
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    up.stop().await;
    let db = rusqlite::Connection::open(dir.path().join("convo.db")).unwrap();
    let mut edited = answer.clone();
    let at = edited.windows(4).position(|w| w == b"echo").unwrap();
    edited[at] = b'E';
    let n = db
        .execute(
            "UPDATE blobs SET data = ?1 WHERE data = ?2",
            rusqlite::params![edited, answer],
        )
        .unwrap();
    assert_eq!(n, 1, "the recorded answer is one payload");
    drop(db);
    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(ReplaySpec::parse("edited").unwrap());
    let pool = off_rt(|| convo_runtime::StorePool::open(&store_url, 2).unwrap());
    let Err(e) = convo_proxy::Proxy::start(cfg, pool, None).await else {
        panic!("an edited recording is refused");
    };
    let text = e.to_string();
    assert!(text.contains("does not hash"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_is_a_lookup_in_any_order_and_a_miss_poisons_nothing() {
    let up = Upstream::start().await;
    let srv = Server::start(ProxyConfig::new(Some(up.url.clone()))).await;
    let base = format!("{}/s/gather/main", srv.url);
    let q = |text: &str, stream: bool| json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]});
    let asked: Vec<Value> = (0..4)
        .map(|i| q(&format!("part {i}"), i % 2 == 0))
        .collect();
    let mut live = Vec::new();
    for body in &asked {
        live.push(send(&base, "v1/chat/completions", body, &[]).await);
    }
    // A stream the upstream cut, and the same question asked twice.
    let cut =
        json!({"model": "cut", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let live_cut = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&cut)
        .send()
        .await
        .unwrap();
    assert!(live_cut.bytes().await.is_err());
    let again = q("twice", false);
    let first = send(&base, "v1/chat/completions", &again, &[]).await;
    let second = send(&base, "v1/chat/completions", &again, &[]).await;
    // The recording of the cut lands just after the cut.
    for _ in 0..200 {
        let n = off_rt(|| {
            let mut s = srv.store();
            let id = s.find_session("gather").unwrap().id;
            s.timeline(&id, &BranchName::main()).unwrap().len()
        });
        if n == 28 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let store_url = srv.store_url.clone();
    let dir = srv.stop().await;
    up.stop().await;

    let mut cfg = ProxyConfig::new(None);
    cfg.replay = Some(ReplaySpec::parse("gather").unwrap());
    let srv = Server::start_on(cfg, dir, store_url.clone()).await;
    let url = srv.url.clone();
    // A miss first: it moves nothing.
    let (status, _, body) = send(&url, "v1/chat/completions", &q("part 9", false), &[]).await;
    assert_eq!(status, 400);
    let e: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(e["error"]["code"], "replay_miss");
    assert_eq!(
        e["error"]["differences"],
        json!(["/body/messages/0/content"])
    );
    // Four calls at once, in reverse order: each gets its own answer.
    let got = futures_util::future::join_all(
        asked
            .iter()
            .rev()
            .map(|b| send(&url, "v1/chat/completions", b, &[])),
    )
    .await;
    for (i, g) in got.into_iter().rev().enumerate() {
        assert_eq!(g, live[i], "call {i} replayed byte for byte");
    }
    // The cut stream is cut again, after the same bytes.
    let res = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .json(&cut)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(res.bytes().await.is_err(), "the replayed stream is cut too");
    // The repeated question: the first then the second answer, then a
    // repeat of a call already answered (not "not in the recording").
    assert_eq!(send(&url, "v1/chat/completions", &again, &[]).await, first);
    assert_eq!(send(&url, "v1/chat/completions", &again, &[]).await, second);
    let (status, _, body) = send(&url, "v1/chat/completions", &again, &[]).await;
    assert_eq!(status, 400);
    let e: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(e["error"]["code"], "replay_repeat");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already answered; pass --replay-repeats"),
        "{e}"
    );
    let dir = srv.stop().await;

    // With repeats allowed, the last match answers again.
    let mut cfg = ProxyConfig::new(None);
    let mut spec = ReplaySpec::with_branch("gather", "main").unwrap();
    spec.repeats = true;
    cfg.replay = Some(spec);
    let srv = Server::start_on(cfg, dir, store_url).await;
    for _ in 0..3 {
        let (status, _, _) = send(&srv.url, "v1/chat/completions", &asked[1], &[]).await;
        assert_eq!(status, 200);
    }
    srv.stop().await;
}
