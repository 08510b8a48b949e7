//! The server in process, through its one assembly
//! (`convo_server::launch(listener, surfaces, shutdown)`, what `convo
//! serve` runs): the API's main flow, the guards, a clean shutdown. The flows a
//! user types stay in the CLI's end-to-end tests.

use serde_json::{Value, json};

struct Running {
    base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<convo_server::Stopped, convo_server::ServeError>>,
    dir: tempfile::TempDir,
}

async fn start(token: Option<&str>) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let mut config =
        convo_server::Config::new(format!("sqlite://{}", dir.path().join("c.db").display()));
    config.log_requests = false;
    config.token = token.map(str::to_owned);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let surfaces = convo_server::Surfaces::new(config, convo_server::Surface::Serve);
    let task = tokio::spawn(convo_server::launch(
        listener,
        surfaces,
        convo_server::Shutdown::on(async move {
            let _ = rx.await;
        }),
    ));
    Running {
        base,
        stop: Some(tx),
        task,
        dir,
    }
}

impl Running {
    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

/// POSTs `body` as JSON to `path` and returns the JSON answer.
async fn post(c: &reqwest::Client, base: &str, path: &str, body: Value) -> Value {
    c.post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A JSON array, bare or under `key`.
fn list<'a>(v: &'a Value, key: &str) -> &'a Vec<Value> {
    v.as_array()
        .or_else(|| v[key].as_array())
        .unwrap_or_else(|| panic!("no list in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_created_appended_forked_and_read_back() {
    let srv = start(None).await;
    let c = reqwest::Client::new();
    let s = post(
        &c,
        &srv.base,
        "/api/v1/sessions",
        json!({"agent": "inproc", "title": "in process"}),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let res = c
        .post(format!(
            "{}/api/v1/sessions/{id}/branches/main/nodes",
            srv.base
        ))
        .json(&json!([
            {"kind": "invoke", "payload": "hello"},
            {"kind": "complete", "payload": "hi there"}
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let tl: Value = c
        .get(format!(
            "{}/api/v1/sessions/{id}/branches/main/timeline",
            srv.base
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let nodes = list(&tl, "nodes");
    assert_eq!(nodes.len(), 2, "{tl}");
    assert_eq!(nodes[1]["payload"], "hi there");
    let first = nodes[0]["hash"].as_str().unwrap();
    let res = c
        .post(format!("{}/api/v1/sessions/{id}/fork", srv.base))
        .json(&json!({"from": first, "branch": "retry"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let branches: Value = c
        .get(format!("{}/api/v1/sessions/{id}/branches", srv.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = list(&branches, "branches")
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"main") && names.contains(&"retry"),
        "{branches}"
    );
    srv.stop().await;
}

/// `payloads=false` lists the same nodes without their payloads (a saver
/// indexing a thread of long checkpoints reads only the nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeline_without_payloads_lists_the_same_nodes() {
    let srv = start(None).await;
    let c = reqwest::Client::new();
    let s = post(&c, &srv.base, "/api/v1/sessions", json!({"agent": "a"})).await;
    let id = s["id"].as_str().unwrap().to_owned();
    let long = "x".repeat(10_000);
    post(
        &c,
        &srv.base,
        &format!("/api/v1/sessions/{id}/branches/main/nodes"),
        json!([
            {"kind": "invoke", "payload": long, "diagnostics": {"k": 1}},
            {"kind": "complete", "payload": "done"},
            {"kind": "invoke", "payload": "again"}
        ]),
    )
    .await;
    let get = |q: &'static str| {
        let url = format!(
            "{}/api/v1/sessions/{id}/branches/main/timeline{q}",
            srv.base
        );
        let c = c.clone();
        async move {
            c.get(url)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    };
    let full = get("").await;
    let bare = get("?payloads=false").await;
    let (f, b) = (list(&full, "nodes"), list(&bare, "nodes"));
    assert_eq!(f.len(), 3);
    assert_eq!(b.len(), 3);
    for (f, b) in f.iter().zip(b) {
        assert_eq!(f["hash"], b["hash"]);
        assert_eq!(f["diagnostics"], b["diagnostics"]);
        assert_eq!(f["turn"], b["turn"]);
        assert!(f["payload"].is_string(), "{f}");
        assert!(b["payload"].is_null(), "{b}");
    }
    assert_eq!(b[0]["payload_len"], 10_000);
    let page = get("?payloads=false&cursor=1&limit=1").await;
    assert_eq!(list(&page, "nodes")[0]["hash"], f[1]["hash"]);
    assert_eq!(page["next_cursor"], 2);
    let tail = get("?payloads=false&cursor=-1").await;
    assert_eq!(list(&tail, "nodes")[0]["hash"], f[2]["hash"]);
    srv.stop().await;
}

/// Reads check what they serve: a payload edited behind convo's back is
/// refused by the API (the store's "corrupt" status), never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_payload_is_refused_not_served() {
    let srv = start(None).await;
    let c = reqwest::Client::new();
    let s = post(
        &c,
        &srv.base,
        "/api/v1/sessions",
        json!({"agent": "inproc"}),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let added = post(
        &c,
        &srv.base,
        &format!("/api/v1/sessions/{id}/branches/main/nodes"),
        json!([{"kind": "invoke", "payload": "the original words"}]),
    )
    .await;
    let hash = list(&added, "nodes")[0]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    let db = rusqlite::Connection::open(srv.dir.path().join("c.db")).unwrap();
    let n = db
        .execute(
            "UPDATE blobs SET data = CAST('the EDITED words' AS BLOB) \
             WHERE data = CAST('the original words' AS BLOB)",
            [],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(db);
    for path in [
        format!("/api/v1/nodes/{hash}"),
        format!("/api/v1/nodes/{hash}/payload"),
        format!("/api/v1/sessions/{id}/branches/main/timeline"),
    ] {
        let res = c.get(format!("{}{path}", srv.base)).send().await.unwrap();
        let status = res.status();
        let body = res.text().await.unwrap();
        assert!(status.is_server_error(), "{path}: {status} {body}");
        assert!(!body.contains("EDITED"), "{path}: {body}");
        assert!(body.contains("does not hash"), "{path}: {body}");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guards_refuse_foreign_hosts_origins_and_missing_tokens() {
    let srv = start(Some("sekret")).await;
    let c = reqwest::Client::new();
    let url = format!("{}/api/v1/sessions", srv.base);
    let res = c.get(&url).send().await.unwrap();
    assert_eq!(res.status(), 401);
    let res = c
        .get(&url)
        .bearer_auth("sekret")
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let res = c.get(&url).bearer_auth("sekret").send().await.unwrap();
    assert_eq!(res.status(), 200);
    // A write from a page of another origin is refused before any handler.
    let res = c
        .post(&url)
        .bearer_auth("sekret")
        .header("origin", "http://attacker.example")
        .json(&json!({"agent": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403);
    let all: Value = c
        .get(&url)
        .bearer_auth("sekret")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list(&all, "sessions").is_empty(), "nothing written: {all}");
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_ends_when_the_server_shuts_down() {
    let srv = start(None).await;
    let c = reqwest::Client::new();
    let mut res = c
        .get(format!("{}/api/v1/events", srv.base))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let reader = tokio::spawn(async move {
        // Reads until the server ends the stream.
        while let Ok(Some(_)) = res.chunk().await {}
    });
    srv.stop().await;
    reader.await.unwrap();
}
