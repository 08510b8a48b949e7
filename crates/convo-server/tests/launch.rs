//! `convo_server::launch`, the one assembly of `convo serve`, `convo
//! proxy` and `convo otel`, in process on both backends: the surfaces it
//! mounts, the proxy recording through it, the queue of records written
//! before it returns (or given up when told), the token rule, and the
//! write-ahead log folded at the stop. A scripted upstream inside the test
//! plays OpenAI.

use convo_server::{Config, Shutdown, Stopped, Surface, Surfaces, launch};
use convo_testutil::{Backend, for_each_backend, when_available};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// A scripted OpenAI: every chat completion answers `echo: {last text}`.
async fn upstream() -> String {
    use axum::routing::post;
    async fn chat(axum::Json(req): axum::Json<Value>) -> axum::Json<Value> {
        let said = req["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_owned();
        axum::Json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": format!("echo: {said}")}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        }))
    }
    let app = axum::Router::new().route("/v1/chat/completions", post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(convo_server::serve_router(
        listener,
        app,
        std::future::pending(),
    ));
    url
}

struct Launched {
    base: String,
    stop: oneshot::Sender<()>,
    give_up: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<Stopped, convo_server::ServeError>>,
}

impl Launched {
    async fn start(store_url: &str, surface: Surface, upstream: Option<&str>) -> Launched {
        let mut config = Config::new(store_url.to_owned());
        config.log_requests = false;
        let mut surfaces = Surfaces::new(config, surface);
        surfaces.proxy = upstream.map(|u| convo_proxy::ProxyConfig::new(Some(u.to_owned())));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let (give_up, given_up) = oneshot::channel::<()>();
        let shutdown = Shutdown {
            stop: Box::pin(async move {
                let _ = stopped.await;
            }),
            give_up: Box::pin(async move {
                let _ = given_up.await;
            }),
        };
        let task = tokio::spawn(launch(listener, surfaces, shutdown));
        Launched {
            base,
            stop,
            give_up,
            task,
        }
    }

    async fn stop(self) -> Stopped {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap()
    }
}

async fn chat(base: &str, text: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The titles of the store's sessions, read once the server is gone.
fn titles(store_url: &str) -> Vec<String> {
    let mut s = convo_store::Store::open(store_url).unwrap();
    let mut t: Vec<String> = s
        .sessions()
        .unwrap()
        .into_iter()
        .filter_map(|r| r.title)
        .collect();
    t.sort();
    t
}

/// `convo serve --upstream`: the API and the proxy on one listener; a
/// proxied call is answered, and once launch has returned the store holds
/// its record and (SQLite) no write-ahead log is left.
fn serve_records_proxied_calls_and_stops_clean(backend: Backend) {
    let fresh = backend.fresh().unwrap();
    let stopped = runtime().block_on(async {
        let up = upstream().await;
        let srv = Launched::start(&fresh.url, Surface::Serve, Some(&up)).await;
        let res = chat(&srv.base, "hello launch").await;
        assert_eq!(res.status(), 200);
        let answer: Value = res.json().await.unwrap();
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            "echo: hello launch"
        );
        let api = reqwest::get(format!("{}/api/v1/sessions", srv.base))
            .await
            .unwrap();
        assert_eq!(api.status(), 200);
        srv.stop().await
    });
    assert_eq!(stopped.unrecorded, 0);
    assert!(stopped.replay_report.is_none());
    assert_eq!(titles(&fresh.url), ["hello launch"]);
    if let Some(dir) = fresh.dir() {
        let wal = dir.join("convo.db-wal");
        let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        assert_eq!(len, 0, "{} left after a graceful stop", wal.display());
    }
}

/// `convo proxy` serves the proxy alone and `convo otel` the receiver
/// alone: the API is not there, each surface's own routes are.
fn each_surface_mounts_its_own_routes(backend: Backend) {
    let fresh = backend.fresh().unwrap();
    runtime().block_on(async {
        let up = upstream().await;
        let proxy = Launched::start(&fresh.url, Surface::Proxy, Some(&up)).await;
        assert_eq!(chat(&proxy.base, "via the proxy").await.status(), 200);
        let api = reqwest::get(format!("{}/api/v1/sessions", proxy.base))
            .await
            .unwrap();
        assert_eq!(api.status(), 404);
        proxy.stop().await;

        let otel = Launched::start(&fresh.url, Surface::Otel, None).await;
        let traces = reqwest::Client::new()
            .post(format!("{}/v1/traces", otel.base))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(traces.status(), 200, "{}", traces.text().await.unwrap());
        let api = reqwest::get(format!("{}/api/v1/sessions", otel.base))
            .await
            .unwrap();
        assert_eq!(api.status(), 404);
        assert_eq!(chat(&otel.base, "no proxy here").await.status(), 404);
        otel.stop().await;
    });
    assert_eq!(titles(&fresh.url), ["via the proxy"]);
}

for_each_backend!(when_available;
    serve_records_proxied_calls_and_stops_clean,
    each_surface_mounts_its_own_routes,
);

/// A process holding a SQLite write transaction open until its stdin
/// closes (python3's sqlite3 module: the lock another program takes).
struct HeldLock(std::process::Child);

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
        HeldLock(child)
    }

    fn release(mut self) {
        drop(self.0.stdin.take());
        assert!(self.0.wait().unwrap().success());
    }
}

/// Calls answered while another process locks the store are queued; at
/// the stop, launch writes them before it returns once the lock goes (so
/// the store holds them when it has returned), or, told to give up,
/// returns with the lock still held and counts them.
#[test]
fn queued_records_are_written_before_launch_returns_or_given_up() {
    let fresh = Backend::Sqlite.fresh().unwrap();
    let db = fresh.dir().unwrap().join("convo.db");
    let rt = runtime();
    let up = rt.block_on(upstream());
    for give_up in [false, true] {
        let text = format!("while locked, give up: {give_up}");
        let (srv, lock) = rt.block_on(async {
            let srv = Launched::start(&fresh.url, Surface::Proxy, Some(&up)).await;
            // The store exists (and is migrated) once a call went through.
            assert_eq!(chat(&srv.base, "before the lock").await.status(), 200);
            let lock = {
                let db = db.clone();
                tokio::task::spawn_blocking(move || HeldLock::take(&db))
                    .await
                    .unwrap()
            };
            let res = chat(&srv.base, &text).await;
            assert_eq!(res.status(), 200);
            assert_eq!(res.headers()["x-convo-recording"], "queued");
            (srv, lock)
        });
        let Launched {
            stop,
            give_up: giving_up,
            task,
            base,
        } = srv;
        let stopped = if give_up {
            giving_up.send(()).unwrap();
            stop.send(()).unwrap();
            let stopped = rt.block_on(task).unwrap().unwrap();
            lock.release();
            stopped
        } else {
            stop.send(()).unwrap();
            // The server stops accepting; launch waits for the record.
            rt.block_on(async {
                while reqwest::get(format!("{base}/v1/models")).await.is_ok() {
                    tokio::task::yield_now().await;
                }
            });
            assert!(!task.is_finished(), "launch returned with a record queued");
            lock.release();
            rt.block_on(task).unwrap().unwrap()
        };
        assert_eq!(stopped.unrecorded, usize::from(give_up));
        if !give_up {
            let titles = titles(&fresh.url);
            assert!(titles.contains(&text), "{titles:?}");
        }
    }
}

/// Off loopback without a token, launch refuses before it opens the store
/// (the one check `convo serve`, `proxy` and `otel` go through).
#[test]
fn a_listener_off_loopback_without_a_token_is_refused() {
    let fresh = Backend::Sqlite.fresh().unwrap();
    let err = runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let surfaces = Surfaces::new(Config::new(fresh.url.clone()), Surface::Serve);
        launch(listener, surfaces, Shutdown::on(async {}))
            .await
            .unwrap_err()
    });
    assert!(
        matches!(err, convo_server::ServeError::NeedToken(_)),
        "{err}"
    );
    assert_eq!(err.kind(), convo_store::ErrorKind::Invalid);
    assert!(!fresh.dir().unwrap().join("convo.db").exists());
}
