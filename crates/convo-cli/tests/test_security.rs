//! The servers against a hostile web page and malformed requests: the Host
//! allow-list and Origin check on every route of every listener, one error
//! document for every error, cursors that cannot wrap, the token flow of a
//! browser, bidirectional-text isolation, the OpenAPI document checked by
//! today's validator, fuzzed by schemathesis and turned into a client.
//! (docs/THREAT-MODEL.md names these tests.)

use crate::common::TestEnv;
use crate::serve_util::{Resp, Server, Sse, http_host};
use serde_json::{Value, json};

/// A session with one turn, a fork `f`, a state key: something for every
/// route to act on. Returns (session id, the first node's hash).
fn seed(srv: &Server) -> (String, String) {
    let s = srv
        .post_json(
            "/api/v1/sessions",
            &json!({"agent": "a", "title": "seeded"}),
        )
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let nodes = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &json!([{"kind": "invoke", "payload": "hello"}, {"kind": "complete", "payload": "hi"}]),
        )
        .expect(201);
    let h = nodes["nodes"][0]["hash"].as_str().unwrap().to_owned();
    srv.post_json(
        &format!("/api/v1/sessions/{s}/fork"),
        &json!({"from": h, "branch": "f"}),
    )
    .expect(201);
    srv.req(
        "PUT",
        &format!("/api/v1/sessions/{s}/branches/main/state/k"),
        &[("Content-Type", "application/octet-stream")],
        b"v1",
    )
    .expect(200);
    (s, h)
}

/// One concrete request for every documented operation (a route added to
/// the document without one here fails the test).
fn requests(doc: &Value, s: &str, h: &str) -> Vec<(String, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            let concrete = path
                .replace("{session}", s)
                .replace("{branch}", "main")
                .replace("{key}", "k")
                .replace("{hash}", h);
            let (query, body): (&str, Value) = match (method.as_str(), path.as_str()) {
                ("post", "/api/v1/sessions") => ("", json!({"agent": "evil"})),
                ("patch", _) => ("", json!({"title": "pwned"})),
                ("post", p) if p.ends_with("/nodes") => {
                    ("", json!({"kind": "invoke", "payload": "pwned"}))
                }
                ("post", p) if p.ends_with("/fork") => ("", json!({"from": h, "branch": "evil"})),
                ("post", p) if p.ends_with("/promote") => ("", json!({"branch": "f"})),
                ("post", "/api/v1/import") => ("?format=convo", Value::Null),
                ("put", _) => ("", json!("pwned")),
                ("get", p) if p.ends_with("/diff") => ("?b=f", Value::Null),
                ("get", "/api/v1/search") => ("?q=hello", Value::Null),
                ("get", "/api/v1/events") => ("?after=0", Value::Null),
                ("post", "/v1/traces") => ("", json!({"resourceSpans": []})),
                ("post", "/v1/logs") => ("", json!({"resourceLogs": []})),
                ("get" | "delete", _) => ("", Value::Null),
                other => panic!("no request for {other:?}: add one here"),
            };
            let body = match body {
                Value::Null => Vec::new(),
                b => b.to_string().into_bytes(),
            };
            out.push((method.to_uppercase(), format!("{concrete}{query}"), body));
        }
    }
    out
}

/// What an attacker must not have changed: every node, session and state.
fn snapshot(srv: &Server, s: &str) -> (Value, Value, Vec<u8>) {
    let health = srv.get("/api/v1/health").expect(200);
    let sessions = srv.get("/api/v1/sessions").expect(200);
    let state = srv
        .get(&format!("/api/v1/sessions/{s}/branches/main/state/k"))
        .body;
    (
        json!([
            health["cursor"],
            sessions["total"],
            sessions["sessions"][0]["title"]
        ]),
        srv.get(&format!("/api/v1/sessions/{s}/branches"))
            .expect(200),
        state,
    )
}

fn assert_forbidden(r: &Resp, what: &str) {
    assert_eq!(r.status, 403, "{what}: {}", r.text());
    assert_eq!(r.kind(), "forbidden", "{what}: {}", r.text());
}

/// DNS rebinding and cross-origin requests, on every route of `convo
/// serve` (API, pages, assets, SSE, /openapi.json, the proxy's /v1, an
/// unknown path): a foreign Host, or a foreign Origin, is refused with the
/// error document before any handler runs, and nothing is written; the
/// server's own names (loopback, the listen address, --allow-host) work.
#[test]
fn foreign_hosts_and_origins_are_refused_on_every_route() {
    let t = TestEnv::new();
    // The proxy is mounted (its upstream is a closed port: a request that
    // got through would be a 502, not a 403).
    let srv = Server::start(
        &t,
        &[
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--allow-host",
            "convo.example.com",
            "--allow-host",
            "*.convo.test",
        ],
    );
    let (s, h) = seed(&srv);
    let port = srv.addr.rsplit_once(':').unwrap().1.to_owned();
    let doc = srv.get("/openapi.json").expect(200);
    let mut reqs = requests(&doc, &s, &h);
    assert_eq!(reqs.len(), 24, "every documented operation");
    for extra in [
        "/".to_owned(),
        format!("/sessions/{s}"),
        format!("/sessions/{s}/nodes/{h}"),
        format!("/sessions/{s}/diff?a=main&b=f"),
        format!("/sessions/{s}/nodes/{h}/rerun"),
        "/search?q=hello".to_owned(),
        "/assets/app.js".to_owned(),
        "/assets/find.js".to_owned(),
        "/openapi.json".to_owned(),
        "/no/such/route".to_owned(),
    ] {
        reqs.push(("GET".into(), extra, Vec::new()));
    }
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
        .into_bytes();
    reqs.push((
        "POST".into(),
        format!("/sessions/{s}/rerun"),
        json!({"node": h, "body": "{}"}).to_string().into_bytes(),
    ));
    reqs.push(("POST".into(), "/v1/chat/completions".into(), chat.clone()));
    reqs.push((
        "POST".into(),
        format!("/s/{s}/main/v1/chat/completions"),
        chat.clone(),
    ));
    let before = snapshot(&srv, &s);
    let evil_hosts = [
        "attacker.example".to_owned(),
        format!("attacker.example:{port}"),
        format!("127.0.0.1.attacker.example:{port}"),
        format!("localhost.attacker.example:{port}"),
        "convo.example.com.attacker.example".to_owned(),
        "convo.test".to_owned(),
        String::new(),
    ];
    for (method, path, body) in &reqs {
        let ct = if method == "PUT" {
            "application/octet-stream"
        } else {
            "application/json"
        };
        for host in &evil_hosts {
            let r = http_host(&srv.addr, host, method, path, &[("Content-Type", ct)], body);
            assert_forbidden(&r, &format!("{method} {path} with Host `{host}`"));
            assert!(r.text().contains("--allow-host"), "{}", r.text());
        }
        // The right Host, another origin (a page on another site, or on
        // another port of this machine, or a sandboxed frame).
        for origin in [
            format!("http://attacker.example:{port}"),
            "http://127.0.0.1:1".to_owned(),
            "null".to_owned(),
        ] {
            let r = srv.req(
                method,
                path,
                &[("Content-Type", ct), ("Origin", &origin)],
                body,
            );
            assert_forbidden(&r, &format!("{method} {path} from {origin}"));
        }
    }
    assert_eq!(snapshot(&srv, &s), before, "a refused request wrote");

    // The event stream never opens for a foreign Host.
    let r = http_host(
        &srv.addr,
        "attacker.example",
        "GET",
        "/api/v1/events?after=0",
        &[("Accept", "text/event-stream")],
        b"",
    );
    assert_forbidden(&r, "events");

    // The server's own names, with any port, and --allow-host names.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "LOCALHOST".to_owned(),
        format!("[::1]:{port}"),
        "127.0.0.2".to_owned(),
        "app.localhost:8080".to_owned(),
        "convo.example.com".to_owned(),
        "Convo.Example.Com.:443".to_owned(),
        "a.convo.test".to_owned(),
    ] {
        let r = http_host(&srv.addr, &host, "GET", "/api/v1/health", &[], b"");
        assert_eq!(r.status, 200, "Host {host}: {}", r.text());
    }
    // A same-origin write works (the browser's own page).
    let r = srv.req(
        "POST",
        "/api/v1/sessions",
        &[
            ("Content-Type", "application/json"),
            ("Origin", &format!("http://{}", srv.addr)),
        ],
        br#"{"agent":"mine"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    let r = http_host(
        &srv.addr,
        "convo.example.com",
        "POST",
        "/api/v1/sessions",
        &[
            ("Content-Type", "application/json"),
            ("Origin", "https://convo.example.com"),
        ],
        br#"{"agent":"proxied"}"#,
    );
    assert_eq!(r.status, 201, "{}", r.text());
    drop(srv);

    // The names come from the environment too; a bad name is refused.
    let mut c = t.cmd();
    c.env("CONVO_ALLOW_HOST", "one.example,two.example");
    let srv = {
        use std::io::BufRead;
        let mut child = c
            .args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Server {
            child,
            addr: line
                .trim()
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned(),
        }
    };
    for (host, status) in [
        ("two.example", 200),
        ("one.example:7777", 200),
        ("three.example", 403),
    ] {
        let r = http_host(&srv.addr, host, "GET", "/api/v1/health", &[], b"");
        assert_eq!(r.status, status, "{host}: {}", r.text());
    }
    drop(srv);
    let r = t.run(&["serve", "--allow-host", "bad host/x"]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(r.stderr().contains("not a host name"), "{}", r.stderr());

    // Off loopback (with a token): the listen address's IP literals are
    // the server's own; names are not unless allowed.
    let srv = Server::launch(
        &t,
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--quiet",
            "--token",
            "tok",
        ],
    );
    let port = srv.addr.rsplit_once(':').unwrap().1.to_owned();
    let local = format!("127.0.0.1:{port}");
    let auth = [("Authorization", "Bearer tok")];
    for (host, status) in [
        (format!("10.1.2.3:{port}"), 200),
        (format!("attacker.example:{port}"), 403),
    ] {
        let r = http_host(&local, &host, "GET", "/api/v1/health", &auth, b"");
        assert_eq!(r.status, status, "{host}: {}", r.text());
    }
}

/// `convo proxy` alone has the same allow-list: a rebinding page cannot
/// spend the operator's upstream key.
#[test]
fn the_standalone_proxy_refuses_foreign_hosts() {
    let t = TestEnv::new();
    let srv = Server::launch(
        &t,
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--upstream",
            "http://127.0.0.1:9/v1",
        ],
    );
    let port = srv.addr.rsplit_once(':').unwrap().1.to_owned();
    let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    for path in [
        "/v1/chat/completions",
        "/s/x/main/v1/chat/completions",
        "/nope",
    ] {
        let r = http_host(
            &srv.addr,
            &format!("attacker.example:{port}"),
            "POST",
            path,
            &[("Content-Type", "application/json")],
            chat,
        );
        assert_forbidden(&r, path);
    }
    // Its own name gets through to the (closed) upstream: a 502, not a 403.
    let r = srv.req(
        "POST",
        "/v1/chat/completions",
        &[("Content-Type", "application/json")],
        chat,
    );
    assert_ne!(r.status, 403, "{}", r.text());
}

/// Everything the framework refuses answers with the error document: bad
/// JSON, wrong shapes and types, bodies over the limit, bad query values,
/// a path that is not UTF-8, an unknown route, a method a route does not
/// serve. An array where an object is documented changes nothing.
#[test]
fn every_error_is_the_error_document() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &["--max-body-mib", "1"]);
    let (s, _) = seed(&srv);
    let nodes = format!("/api/v1/sessions/{s}/branches/main/nodes");
    let session = format!("/api/v1/sessions/{s}");
    let json_ct = [("Content-Type", "application/json")];
    let big = vec![b'x'; 2 * 1024 * 1024];
    let cases: Vec<(&str, String, Vec<u8>, u16, &str)> = vec![
        (
            "POST",
            "/api/v1/sessions".into(),
            b"{\"agent\":".to_vec(),
            400,
            "invalid",
        ),
        (
            "POST",
            "/api/v1/sessions".into(),
            b"".to_vec(),
            400,
            "invalid",
        ),
        (
            "POST",
            "/api/v1/sessions".into(),
            b"[]".to_vec(),
            400,
            "invalid",
        ),
        (
            "POST",
            "/api/v1/sessions".into(),
            br#"{"agent": 5}"#.to_vec(),
            422,
            "invalid",
        ),
        (
            "POST",
            "/api/v1/sessions".into(),
            br#"{"agent": "a", "x": 1}"#.to_vec(),
            422,
            "invalid",
        ),
        ("PATCH", session.clone(), b"[null]".to_vec(), 400, "invalid"),
        ("PATCH", session.clone(), b"null".to_vec(), 400, "invalid"),
        ("PATCH", session.clone(), b"\"t\"".to_vec(), 400, "invalid"),
        (
            "POST",
            nodes.clone(),
            b"[[\"invoke\", \"x\"]]".to_vec(),
            400,
            "invalid",
        ),
        ("POST", nodes.clone(), b"[1, 2]".to_vec(), 400, "invalid"),
        (
            "POST",
            nodes.clone(),
            b"{\"kind\": [1]}".to_vec(),
            422,
            "invalid",
        ),
        (
            "POST",
            format!("/api/v1/sessions/{s}/fork"),
            b"[\"a\", \"b\"]".to_vec(),
            400,
            "invalid",
        ),
        (
            "POST",
            format!("/api/v1/sessions/{s}/promote"),
            b"[\"f\"]".to_vec(),
            400,
            "invalid",
        ),
        ("POST", nodes.clone(), big.clone(), 413, "too_large"),
        (
            "PUT",
            format!("/api/v1/sessions/{s}/branches/main/state/k"),
            big.clone(),
            413,
            "too_large",
        ),
        (
            "POST",
            "/api/v1/import?format=convo".into(),
            big,
            413,
            "too_large",
        ),
        (
            "GET",
            format!("/api/v1/sessions/{s}/branches/main/timeline?cursor=abc"),
            vec![],
            400,
            "invalid",
        ),
        (
            "GET",
            "/api/v1/sessions?limit=-1".into(),
            vec![],
            400,
            "invalid",
        ),
        (
            "GET",
            "/api/v1/events?after=abc".into(),
            vec![],
            400,
            "invalid",
        ),
        (
            "GET",
            "/api/v1/events?after=18446744073709551616".into(),
            vec![],
            400,
            "invalid",
        ),
        (
            "GET",
            format!("/api/v1/sessions/{s}/diff"),
            vec![],
            400,
            "invalid",
        ),
        (
            "GET",
            "/api/v1/import".into(),
            vec![],
            405,
            "method_not_allowed",
        ),
        (
            "DELETE",
            "/api/v1/sessions".into(),
            vec![],
            405,
            "method_not_allowed",
        ),
        (
            "POST",
            "/".into(),
            b"{}".to_vec(),
            405,
            "method_not_allowed",
        ),
        (
            "GET",
            "/api/v1/sessions/%FF%FE".into(),
            vec![],
            400,
            "invalid",
        ),
        ("GET", "/sessions/%C3%28".into(), vec![], 400, "invalid"),
        ("GET", "/api/v1/nope".into(), vec![], 404, "not_found"),
        ("GET", "/sessions?page=x".into(), vec![], 404, "not_found"),
        ("GET", "/?limit=many".into(), vec![], 400, "invalid"),
    ];
    for (method, path, body, status, kind) in &cases {
        let r = srv.req(method, path, &json_ct, body);
        let what = format!("{method} {path}");
        assert_eq!(r.status, *status, "{what}: {}", r.text());
        assert!(
            r.header("content-type")
                .is_some_and(|c| c.starts_with("application/json")),
            "{what}: {:?}",
            r.headers
        );
        let doc = r.json();
        assert_eq!(doc["error"]["kind"], *kind, "{what}: {doc}");
        assert!(
            doc["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: {doc}"
        );
        assert_eq!(doc.as_object().unwrap().len(), 1, "{what}: {doc}");
    }
    // `PATCH [null]` did not clear the title.
    assert_eq!(srv.get(&session).expect(200)["session"]["title"], "seeded");
    // Nothing was appended by the refused bodies.
    let tl = srv
        .get(&format!("/api/v1/sessions/{s}/branches/main/timeline"))
        .expect(200);
    assert_eq!(tl["total"], 2);
}

/// A cursor past the end means "nothing yet", never a replay of the store:
/// `Last-Event-ID` and `?after=` at u64::MAX (or any number past the end)
/// start the stream at the end, and `convo watch --after` likewise.
#[test]
fn cursors_past_the_end_never_wrap_into_a_replay() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let (s, _) = seed(&srv);
    let end = srv.get("/api/v1/health").expect(200)["cursor"]
        .as_u64()
        .unwrap();
    assert!(end >= 3);
    let max = u64::MAX.to_string();
    let mut by_header = Sse::open(&srv.addr, "/api/v1/events", Some(u64::MAX));
    let mut by_query = Sse::open(&srv.addr, &format!("/api/v1/events?after={max}"), None);
    let mut by_big = Sse::open(&srv.addr, "/api/v1/events?after=9223372036854775808", None);
    let watch = t
        .cmd()
        .args(["watch", "--after", &max, "--limit", "1", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Give the watcher its start (it reads the end before following): a
    // node appended before it looked would be missed, not replayed, so
    // append until it has printed one.
    srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/main/nodes"),
        &json!({"kind": "invoke", "payload": "after the end"}),
    )
    .expect(201);
    for sse in [&mut by_header, &mut by_query, &mut by_big] {
        let m = sse.next();
        assert_eq!(m.id, Some(end + 1), "{}", m.data);
        assert!(m.data.contains("after the end"), "{}", m.data);
    }
    let mut watch = watch;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut n = 0;
    while watch.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "watch printed nothing"
        );
        srv.post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &json!({"kind": "invoke", "payload": format!("more {n}")}),
        )
        .expect(201);
        n += 1;
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out = watch.wait_with_output().unwrap();
    let line: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
    });
    assert!(line["seq"].as_u64().unwrap() > end, "{line}");
}

/// The browser side: `?token=` (percent-decoded) is exchanged for the
/// cookie with a redirect that drops it from the URL; a browser without the
/// cookie gets a login page; raw payloads and exports keep their `sandbox`
/// policy; a name with a right-to-left override sits in its own isolate.
#[test]
fn token_redirect_login_page_sandbox_and_bidi() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &["--token", "s3cret/tok+en"]);
    let auth = [("Authorization", "Bearer s3cret/tok+en")];
    // The redirect keeps the rest of the query, drops the token.
    let r = srv.get("/sessions/x?branch=f&token=s3cret%2Ftok%2Ben&cursor=0");
    assert_eq!(r.status, 303, "{}", r.text());
    assert_eq!(r.header("location"), Some("/sessions/x?branch=f&cursor=0"));
    let cookie = r.header("set-cookie").unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "{cookie}");
    let value = cookie
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("convo_token=");
    let c = format!("convo_token={value}");
    srv.req("GET", "/api/v1/sessions", &[("Cookie", &c)], b"")
        .expect(200);
    let r = srv.get("/?token=s3cret%2Ftok%2Ben");
    assert_eq!(r.header("location"), Some("/"));
    // Behind an HTTPS reverse proxy the cookie is Secure.
    let r = srv.req(
        "GET",
        "/?token=s3cret%2Ftok%2Ben",
        &[("X-Forwarded-Proto", "https")],
        b"",
    );
    assert!(r.header("set-cookie").unwrap().contains("; Secure"));
    // A wrong token in the URL: no cookie, no redirect.
    let r = srv.get("/?token=nope");
    assert_eq!(r.status, 401);
    assert!(r.header("set-cookie").is_none());
    // A browser without the cookie gets a page with a token field; an API
    // client the JSON document.
    let r = srv.req("GET", "/sessions/x", &[("Accept", "text/html,*/*")], b"");
    assert_eq!(r.status, 401);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    let page = r.text();
    assert!(page.contains(r#"name="token""#), "{page}");
    assert!(page.contains(r#"type="password""#), "{page}");
    assert!(!page.contains("<script"), "{page}");
    assert_eq!(srv.get("/api/v1/sessions").kind(), "unauthorized");
    // Its stylesheet is served without the token (it holds nothing of the store).
    assert_eq!(srv.get("/assets/app.css").status, 200);
    assert_eq!(srv.get("/assets/nope.css").status, 401);

    // The sandbox policy survives the global headers.
    let s = srv
        .req(
            "POST",
            "/api/v1/sessions",
            &[auth[0], ("Content-Type", "application/json")],
            "{\"agent\":\"a\",\"title\":\"\u{202e}evil\u{202c} title\"}".as_bytes(),
        )
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let n = srv
        .req(
            "POST",
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &[auth[0], ("Content-Type", "application/json")],
            json!({"kind": "invoke", "payload": "<html><script>alert(1)</script>", "from": "\u{202e}resu"})
                .to_string()
                .as_bytes(),
        )
        .expect(201);
    let h = n["nodes"][0]["hash"].as_str().unwrap();
    for path in [
        format!("/api/v1/nodes/{h}/payload"),
        format!("/api/v1/sessions/{s}/export?format=html"),
        format!("/api/v1/sessions/{s}/export?format=markdown"),
    ] {
        let r = srv.req("GET", &path, &auth, b"");
        assert_eq!(r.status, 200, "{path}");
        let csp = r.header("content-security-policy").unwrap();
        assert!(csp.starts_with("sandbox"), "{path}: {csp}");
        assert_eq!(
            r.headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case("content-security-policy"))
                .count(),
            1
        );
    }
    // Bidirectional isolation around names on the pages.
    let list = srv.req("GET", "/", &auth, b"").text();
    assert!(
        list.contains("<bdi>\u{202e}evil\u{202c} title</bdi>"),
        "{list}"
    );
    let page = srv.req("GET", &format!("/sessions/{s}"), &auth, b"").text();
    assert!(
        page.contains("<bdi>\u{202e}evil\u{202c} title</bdi>"),
        "{page}"
    );
    assert!(page.contains("<bdi>\u{202e}resu</bdi>"), "{page}");
    let css = srv.req("GET", "/assets/app.css", &auth, b"").text();
    assert!(css.contains("unicode-bidi: isolate"), "{css}");
}

/// The tools a test needs from scripts/test-env, or `None` outside CI.
fn tools(need_chromium: bool) -> Option<(String, Option<String>)> {
    let py = std::env::var("CONVO_TEST_PYTHON").ok();
    let chromium = std::env::var("CONVO_TEST_CHROMIUM").ok();
    match (py, chromium) {
        (Some(py), c) if !need_chromium || c.is_some() => Some((py, c)),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CONVO_TEST_PYTHON and CONVO_TEST_CHROMIUM (scripts/test-env)"
            );
            eprintln!("skipping: run scripts/test (it sets up Python and Chromium)");
            None
        }
    }
}

/// DNS rebinding in a real browser: a page on attacker.example, whose
/// name then resolves to convo's port, cannot read or write anything
/// (tests/browser/rebind.py drives Chromium through the DevTools protocol).
#[test]
fn browser_dns_rebinding_is_refused() {
    let Some((py, Some(chromium))) = tools(true) else {
        return;
    };
    let t = TestEnv::new();
    let out = std::process::Command::new(py)
        .arg(
            convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR")).join("tests/browser/rebind.py"),
        )
        .arg(env!("CARGO_BIN_EXE_convo"))
        .arg(chromium)
        .arg(t.home())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("rebind: ok"), "{stdout}");
}

/// The OpenAPI document as today's tools see it: openapi-spec-validator
/// accepts it; schemathesis (examples, coverage, fuzzing and stateful
/// phases, bounded in time) finds no 5xx and no response that breaks the
/// document; openapi-python-client makes a client from it that lists the
/// sessions and reads a timeline of a live `convo serve`.
#[test]
fn openapi_document_is_valid_fuzzed_and_makes_a_client() {
    let Some((py, _)) = tools(false) else {
        return;
    };
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let (s, _) = seed(&srv);
    let base = format!("http://{}", srv.addr);
    let doc = srv.get("/openapi.json").expect(200);
    let file = t.home().join("openapi.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&py).args(args).output().unwrap();
        (
            out.status.success(),
            format!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (ok, out) = run(&[
        "-c",
        "import sys, json; from openapi_spec_validator import validate; validate(json.load(open(sys.argv[1]))); print('valid')",
        file.to_str().unwrap(),
    ]);
    assert!(ok, "openapi-spec-validator: {out}");

    // The generated client first (schemathesis then writes whatever it likes).
    let client = convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients/openapi_client.py");
    let (ok, out) = run(&[
        client.to_str().unwrap(),
        file.to_str().unwrap(),
        &base,
        t.home().to_str().unwrap(),
        &s,
    ]);
    assert!(ok && out.contains("openapi_client: ok"), "{out}");

    let st = std::path::Path::new(&py).with_file_name("st");
    let report = t.home().join("schemathesis");
    let out = std::process::Command::new(st)
        .args([
            "run",
            &format!("{base}/openapi.json"),
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--max-examples",
            "40",
            "--max-time",
            "120",
            // One worker: CPython 3.11's parser is not thread-safe, and
            // hypothesis parses lambdas while describing strategies.
            "--workers",
            "1",
            "--seed",
            "20",
            "--request-timeout",
            "20",
            // An endless stream: its one answer is checked above.
            "--exclude-path",
            "/api/v1/events",
            "--suppress-health-check",
            "all",
            "--report-dir",
            report.to_str().unwrap(),
        ])
        .env("NO_COLOR", "1")
        // Its cache (.schemathesis/) goes into the test's home.
        .current_dir(t.home())
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis: {text}");
    // The server is still whole.
    srv.get("/api/v1/verify").expect(200);
}
