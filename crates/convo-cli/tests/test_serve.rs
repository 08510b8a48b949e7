//! `convo serve`: the API contract on both backends, the event stream,
//! the guards (token, CSRF, paths, escaping), the OpenAPI document.

use crate::common::TestEnv;
use crate::serve_util::{Server, Sse, http};
use convo_testutil::Backend;
use serde_json::{Value, json};
use std::collections::HashSet;

fn sess(srv: &Server, agent: &str, title: &str) -> String {
    srv.post_json("/api/v1/sessions", &json!({"agent": agent, "title": title}))
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn turn(q: &str, a: &str) -> Value {
    json!([{"kind": "invoke", "payload": q}, {"kind": "complete", "payload": a}])
}

fn api_contract(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let srv = Server::start(&t, &[]);
    let s = sess(&srv, "researcher", "Paris");

    // Append: one line, a batch (one transaction), binary payload in base64.
    let one = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &json!({"kind": "invoke", "payload": "Tell me about Paris"}),
        )
        .expect(201);
    assert_eq!(one["nodes"][0]["kind"], "invoke");
    let batch = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &json!([
                {"kind": "request", "payload": "{\"prompt\":\"paris\"}", "to": "infer"},
                {"kind": "response", "payload": "AP8=", "payload_encoding": "base64",
                 "from": "infer", "diagnostics": {"status": 200, "model": "m1"}},
                {"kind": "complete", "payload": "Paris is the capital of France."}
            ]),
        )
        .expect(201);
    assert_eq!(batch["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(batch["nodes"][1]["sequence"], 1);
    let resp_hash = batch["nodes"][1]["hash"].as_str().unwrap().to_owned();

    // A batch with one bad line writes nothing.
    let bad = srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/main/nodes"),
        &json!([{"kind": "invoke", "payload": "x"}, {"kind": "bogus", "payload": "y"}]),
    );
    assert_eq!(bad.status, 422, "{}", bad.text());
    assert_eq!(bad.kind(), "invalid");
    assert!(bad.text().contains("line 2"), "{}", bad.text());
    let unknown = srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/main/nodes"),
        &json!({"kind": "invoke", "payload": "x", "colour": 1}),
    );
    assert_eq!(unknown.status, 422);

    // Timeline: turn numbers, pagination by cursor, the binary payload lossless.
    srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/main/nodes"),
        &turn("And its population?", "About 2.1 million."),
    )
    .expect(201);
    let tl = srv
        .get(&format!("/api/v1/sessions/{s}/branches/main/timeline"))
        .expect(200);
    assert_eq!(tl["total"], 6);
    assert_eq!(tl["turns"], 2);
    let nodes = tl["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["turn"], 1);
    assert_eq!(nodes[5]["turn"], 2);
    assert_eq!(nodes[2]["payload_encoding"], "base64");
    assert_eq!(nodes[2]["payload"], "AP8=");
    let p1 = srv
        .get(&format!(
            "/api/v1/sessions/{s}/branches/main/timeline?cursor=0&limit=3"
        ))
        .expect(200);
    assert_eq!(p1["nodes"].as_array().unwrap().len(), 3);
    assert_eq!(p1["next_cursor"], 3);
    let p3 = srv
        .get(&format!(
            "/api/v1/sessions/{s}/branches/main/timeline?cursor=5&limit=3"
        ))
        .expect(200);
    assert_eq!(p3["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(p3["next_cursor"], Value::Null);
    let last2 = srv
        .get(&format!(
            "/api/v1/sessions/{s}/branches/main/timeline?cursor=-2"
        ))
        .expect(200);
    assert_eq!(last2["cursor"], 4);

    // Nodes by prefix; the raw payload with a content type that never renders.
    let n = srv
        .get(&format!("/api/v1/nodes/{}", &resp_hash[..10]))
        .expect(200);
    assert_eq!(n["hash"], resp_hash.as_str());
    assert_eq!(n["diagnostics"]["model"], "m1");
    let raw = srv.get(&format!("/api/v1/nodes/{resp_hash}/payload"));
    assert_eq!(raw.status, 200);
    assert_eq!(raw.body, vec![0u8, 0xff]);
    assert_eq!(raw.header("content-type"), Some("application/octet-stream"));
    assert_eq!(srv.get("/api/v1/nodes/ffffffffff").kind(), "not_found");
    assert_eq!(srv.get("/api/v1/nodes/zz").status, 422);

    // Sessions: get by title, list with a filter, 404 with the kind.
    let got = srv.get("/api/v1/sessions/Paris").expect(200);
    assert_eq!(got["session"]["title"], "Paris");
    assert_eq!(got["session"]["id"], s.as_str());
    assert_eq!(got["branches"][0]["name"], "main");
    sess(&srv, "other-agent", "Rome");
    let list = srv.get("/api/v1/sessions?agent=researcher").expect(200);
    assert_eq!(list["total"], 1);
    let list = srv.get("/api/v1/sessions?q=rom").expect(200);
    assert_eq!(list["sessions"][0]["title"], "Rome");
    let re = srv.req(
        "PATCH",
        &format!("/api/v1/sessions/{s}"),
        &[("Content-Type", "application/json")],
        br#"{"title":"Paris, France"}"#,
    );
    assert_eq!(re.expect(200)["title"], "Paris, France");
    assert_eq!(
        srv.get("/api/v1/sessions/Paris%2C%20France").status,
        200,
        "reachable by its new title"
    );
    let missing = srv.get("/api/v1/sessions/nope");
    assert_eq!(
        (missing.status, missing.kind().as_str()),
        (404, "not_found")
    );

    // State: put, get, list, as of a node, delete.
    let put = srv
        .req(
            "PUT",
            &format!("/api/v1/sessions/{s}/branches/main/state/topic"),
            &[("Content-Type", "application/octet-stream")],
            b"Paris",
        )
        .expect(200);
    assert_eq!(put["root"].as_str().unwrap().len(), 64);
    let v = srv.get(&format!("/api/v1/sessions/{s}/branches/main/state/topic"));
    assert_eq!((v.status, v.body.as_slice()), (200, &b"Paris"[..]));
    let done = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &turn("Remember that.", "Noted."),
        )
        .expect(201);
    let complete = done["nodes"][1]["hash"].as_str().unwrap().to_owned();
    let del = srv
        .req(
            "DELETE",
            &format!("/api/v1/sessions/{s}/branches/main/state/topic"),
            &[],
            b"",
        )
        .expect(200);
    assert_eq!(del["existed"], true);
    assert_eq!(
        srv.get(&format!("/api/v1/sessions/{s}/branches/main/state/topic"))
            .status,
        404
    );
    let at = srv
        .get(&format!(
            "/api/v1/sessions/{s}/branches/main/state?at={complete}"
        ))
        .expect(200);
    assert_eq!(at["entries"][0]["key"], "topic");
    assert_eq!(at["entries"][0]["value"], "Paris");
    // `at` is any reference: `main@-1` is the last turn's complete.
    let by_ref = srv
        .get(&format!(
            "/api/v1/sessions/{s}/branches/main/state?at=main@-1"
        ))
        .expect(200);
    assert_eq!(by_ref, at);
    let past = srv.get(&format!(
        "/api/v1/sessions/{s}/branches/main/state?at=main@99"
    ));
    assert_eq!(past.status, 404);

    // Fork from the first turn's answer, add to it, diff, promote, sealed.
    let fork_point = nodes[3]["hash"].as_str().unwrap();
    let f = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/fork"),
            &json!({"from": &fork_point[..12], "branch": "retry"}),
        )
        .expect(201);
    assert_eq!(f["branch"]["name"], "retry");
    assert_eq!(f["node"]["kind"], "fork");
    let again = srv.post_json(
        &format!("/api/v1/sessions/{s}/fork"),
        &json!({"from": fork_point, "branch": "retry"}),
    );
    assert_eq!((again.status, again.kind().as_str()), (409, "refused"));
    srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/retry/nodes"),
        &turn("What about Lyon?", "Lyon is lovely."),
    )
    .expect(201);
    let d = srv
        .get(&format!("/api/v1/sessions/{s}/diff?a=main&b=retry"))
        .expect(200);
    assert_eq!(d["fork_point"]["hash"], fork_point);
    assert_eq!(d["common"], 4);
    assert_eq!(d["b"]["added"][0]["kind"], "fork");
    assert_eq!(d["b"]["added"][1]["payload"], "What about Lyon?");
    assert_eq!(d["a"]["added"].as_array().unwrap().len(), 4);
    // Fork `from` and diff `a`/`b` take references too.
    let f2 = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/fork"),
            &json!({"from": "main@1", "branch": "retry2"}),
        )
        .expect(201);
    assert_eq!(f2["node"]["parent"], fork_point);
    let d2 = srv
        .get(&format!("/api/v1/sessions/{s}/diff?a=main@1&b=retry~1"))
        .expect(200);
    assert_eq!(d2["common"], 4, "{d2}");
    assert_eq!(d2["a"]["added"].as_array().unwrap().len(), 0);
    assert_eq!(d2["b"]["added"].as_array().unwrap().len(), 2);
    let pr = srv
        .post_json(
            &format!("/api/v1/sessions/{s}/promote"),
            &json!({"branch": "retry"}),
        )
        .expect(200);
    let sealed = pr["sealed_as"].as_str().unwrap().to_owned();
    assert!(sealed.starts_with("broken-"), "{sealed}");
    let refused = srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/{sealed}/nodes"),
        &turn("x", "y"),
    );
    assert_eq!((refused.status, refused.kind().as_str()), (409, "refused"));
    let branches = srv
        .get(&format!("/api/v1/sessions/{s}/branches"))
        .expect(200);
    let names: HashSet<&str> = branches
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, HashSet::from(["main", sealed.as_str(), "retry2"]));

    // Search, export, import, verify.
    let hits = srv.get("/api/v1/search?q=lyon%20lovely").expect(200);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1);
    assert_eq!(hits["hits"][0]["node"]["kind"], "complete");
    let md = srv.get(&format!("/api/v1/sessions/{s}/export?format=markdown"));
    assert_eq!(md.status, 200);
    assert!(md.text().contains("Lyon is lovely."), "{}", md.text());
    assert_eq!(
        srv.get(&format!("/api/v1/sessions/{s}/export?format=nope"))
            .status,
        422
    );
    let jsonl =
        br#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#;
    let imp = srv
        .req(
            "POST",
            "/api/v1/import?format=openai",
            &[("Content-Type", "application/octet-stream")],
            jsonl,
        )
        .expect(201);
    assert_eq!(imp["sessions"][0]["created"], true);
    let ver = srv.get("/api/v1/verify").expect(200);
    assert_eq!(ver["ok"], true, "{ver}");
    assert_eq!(ver["nodes"], 15, "with the fork node of retry2");
    assert_eq!(
        srv.get("/api/v1/health").expect(200)["store"],
        backend.name()
    );

    // Graceful stop: SIGTERM ends the process cleanly and the store verifies.
    assert!(srv.stop().success());
    t.run(&["verify"]).ok();
}

/// Every node in append order with no gap and no duplicate, resumable with
/// Last-Event-ID, including nodes written by another process (`convo say`)
/// and, on PostgreSQL, by another server.
fn events(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let a = Server::start(&t, &[]);
    let b = Server::start(&t, &[]);
    let s = sess(&a, "agent", "live");
    let start = a.get("/api/v1/health").expect(200)["cursor"]
        .as_u64()
        .unwrap();
    let mut sse = Sse::open(&b.addr, "/api/v1/events", Some(start));
    let mut sse_only = Sse::open(&b.addr, &format!("/api/v1/events?session={s}"), None);
    let other = sess(&a, "agent", "other");
    for i in 0..10 {
        a.post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &turn(&format!("q{i}"), &format!("a{i}")),
        )
        .expect(201);
        if i == 4 {
            t.run(&["say", &other, "--user", "cli-q", "--agent", "cli-a"])
                .ok();
        }
    }
    let mut seen = Vec::new();
    for _ in 0..22 {
        let m = sse.next();
        assert_eq!(m.event.as_deref(), Some("node"));
        let v: Value = serde_json::from_str(&m.data).unwrap();
        assert_eq!(v["seq"].as_u64(), m.id);
        seen.push(m.id.unwrap());
    }
    let expect: Vec<u64> = (start + 1..=start + 22).collect();
    assert_eq!(seen, expect, "gap-free, in order, no duplicate");
    for i in 0..20 {
        let v: Value = serde_json::from_str(&sse_only.next().data).unwrap();
        assert_eq!(v["session"], s.as_str(), "filtered stream, message {i}");
    }
    // Resume from the middle: exactly what came after.
    let mut resumed = Sse::open(&a.addr, "/api/v1/events", Some(start + 10));
    for want in start + 11..=start + 22 {
        assert_eq!(resumed.next().id, Some(want));
    }
    let bad = http(
        &a.addr,
        "GET",
        "/api/v1/events",
        &[("Last-Event-ID", "yesterday")],
        b"",
    );
    assert_eq!(bad.status, 422);
}

#[test]
fn token_csrf_paths_and_escaping() {
    let t = TestEnv::new();
    // Off loopback without a token: refused before listening.
    let r = t.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("without a token"), "{}", r.stderr());

    let srv = Server::start(&t, &["--token", "s3cret-token"]);
    let no = srv.get("/api/v1/sessions");
    assert_eq!((no.status, no.kind().as_str()), (401, "unauthorized"));
    assert_eq!(srv.get("/").status, 401);
    let wrong = srv.req(
        "GET",
        "/api/v1/sessions",
        &[("Authorization", "Bearer s3cret-tokex")],
        b"",
    );
    assert_eq!(wrong.status, 401);
    let auth = [("Authorization", "Bearer s3cret-token")];
    srv.req("GET", "/api/v1/sessions", &auth, b"").expect(200);
    // A browser gets an HttpOnly SameSite=Strict cookie from ?token=, and
    // a redirect to the URL without it.
    let page = srv.get("/?token=s3cret-token");
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), Some("/"));
    let cookie = page.header("set-cookie").unwrap();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let c = [("Cookie", "convo_token=s3cret-token")];
    srv.req("GET", "/api/v1/sessions", &c, b"").expect(200);

    // CSRF: the content types a cross-site form can send, and foreign origins.
    let json_auth = [
        ("Authorization", "Bearer s3cret-token"),
        ("Content-Type", "application/json"),
    ];
    let body = br#"{"agent":"a","title":"<script>alert(1)</script><img src=x onerror=alert(2)>"}"#;
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let r = srv.req(
            "POST",
            "/api/v1/sessions",
            &[("Cookie", "convo_token=s3cret-token"), ("Content-Type", ct)],
            body,
        );
        assert_eq!((r.status, r.kind().as_str()), (403, "forbidden"), "{ct}");
    }
    for (k, v) in [
        ("Origin", "https://evil.example"),
        ("Origin", "null"),
        ("Sec-Fetch-Site", "cross-site"),
    ] {
        let mut h = json_auth.to_vec();
        h.push((k, v));
        assert_eq!(srv.req("POST", "/api/v1/sessions", &h, body).status, 403);
    }
    let s = srv
        .req("POST", "/api/v1/sessions", &json_auth, body)
        .expect(201)["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Hostile payloads never become markup, handlers or script URLs.
    let hostile = json!([
        {"kind": "invoke", "payload": "<script>alert('x')</script> [click](javascript:alert(1)) \u{1b}[31mred"},
        {"kind": "complete", "payload": "<img src=x onerror=alert(3)><svg onload=alert(4)>",
         "diagnostics": {"model": "<b onmouseover=alert(5)>m</b>"}}
    ]);
    let written = srv
        .req(
            "POST",
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &json_auth,
            hostile.to_string().as_bytes(),
        )
        .expect(201);
    let invoke = written["nodes"][0]["hash"].as_str().unwrap().to_owned();
    for path in [
        "/".to_owned(),
        format!("/sessions/{s}"),
        format!("/sessions/{s}/diff?a=main&b=main"),
        "/search?q=alert+script&agent=%3Cb%3E".to_owned(),
        format!("/sessions/{s}/nodes/{invoke}/rerun"),
    ] {
        let page = srv.req("GET", &path, &auth, b"");
        assert_eq!(page.status, 200, "{path}");
        let html = page.text();
        let lower = html.to_ascii_lowercase();
        // The only script elements are the page's own (theme.js, app.js,
        // viewer.js and find.js), from this server; no payload became an
        // element, a handler or a script URL.
        assert_eq!(
            lower.matches("<script").count(),
            lower.matches("<script src=\"/assets/").count(),
            "{path}: {html}"
        );
        assert_eq!(lower.matches("<script").count(), 4, "{path}: {html}");
        assert!(!lower.contains("<img"), "{path}: {html}");
        assert!(lower.matches("<svg").count() <= 1, "{path}: {html}");
        assert!(!lower.contains("<b onmouseover"), "{path}: {html}");
        for tag in tags(&lower) {
            for bad in ["onerror", "onload", "onmouseover", "javascript:"] {
                assert!(!tag.contains(bad), "{path}: a tag holds {bad}: {tag}");
            }
        }
        let csp = page.header("content-security-policy").unwrap();
        assert!(csp.contains("script-src 'self'"), "{csp}");
    }

    // The share file of the same payloads: its one inline script, allowed
    // by its hash; no payload became an element or a handler.
    for q in ["", "?content=1", "?content=1&all=1&redact=1"] {
        let path = format!("/sessions/{s}/share{q}");
        let page = srv.req("GET", &path, &auth, b"");
        assert_eq!(page.status, 200, "{path}");
        let lower = page.text().to_ascii_lowercase();
        assert_eq!(lower.matches("<script").count(), 1, "{path}");
        assert!(!lower.contains("<img") && !lower.contains("<svg"), "{path}");
        for tag in tags(&lower) {
            for bad in ["onerror", "onload", "onmouseover", "javascript:"] {
                assert!(!tag.contains(bad), "{path}: a tag holds {bad}: {tag}");
            }
        }
        let csp = page.header("content-security-policy").unwrap();
        assert!(csp.contains("script-src 'sha256-"), "{csp}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
    }

    // Paths that climb out are refused wherever they point.
    for p in [
        "/api/v1/sessions/..%2f..%2fetc%2fpasswd",
        "/assets/../../etc/passwd",
        "/api/v1/nodes/%2e%2e",
    ] {
        let r = srv.req("GET", p, &auth, b"");
        assert!(
            r.status == 400 || r.status == 404,
            "{p}: {} {}",
            r.status,
            r.text()
        );
        assert!(!r.text().contains("root:"), "{p}");
    }
    drop(srv);
    // Body limit.
    let srv = Server::start(&t, &["--token", "s3cret-token", "--max-body-mib", "1"]);
    let big = vec![b'x'; 2 * 1024 * 1024];
    let r = srv.req(
        "PUT",
        &format!("/api/v1/sessions/{s}/branches/main/state/k"),
        &[
            ("Authorization", "Bearer s3cret-token"),
            ("Content-Type", "application/octet-stream"),
        ],
        &big,
    );
    assert_eq!(r.status, 413);
}

/// The markup of every tag in a page (`<a href=…>`), outside text.
fn tags(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find('<') {
        let after = &rest[i..];
        let end = after.find('>').unwrap_or(after.len());
        out.push(&after[..end]);
        rest = &after[end..];
    }
    out
}

#[test]
fn openapi_covers_every_route() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let doc = srv.get("/openapi.json").expect(200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    let paths = doc["paths"].as_object().unwrap();
    let routes = [
        ("get", "/api/v1/sessions"),
        ("post", "/api/v1/sessions"),
        ("get", "/api/v1/sessions/{session}"),
        ("patch", "/api/v1/sessions/{session}"),
        ("get", "/api/v1/sessions/{session}/branches"),
        (
            "get",
            "/api/v1/sessions/{session}/branches/{branch}/timeline",
        ),
        ("post", "/api/v1/sessions/{session}/branches/{branch}/nodes"),
        ("get", "/api/v1/sessions/{session}/branches/{branch}/state"),
        (
            "get",
            "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
        ),
        (
            "put",
            "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
        ),
        (
            "delete",
            "/api/v1/sessions/{session}/branches/{branch}/state/{key}",
        ),
        ("post", "/api/v1/sessions/{session}/fork"),
        ("post", "/api/v1/sessions/{session}/promote"),
        ("get", "/api/v1/sessions/{session}/diff"),
        ("get", "/api/v1/sessions/{session}/export"),
        ("get", "/api/v1/nodes/{hash}"),
        ("get", "/api/v1/nodes/{hash}/payload"),
        ("get", "/api/v1/verify"),
        ("get", "/api/v1/search"),
        ("post", "/api/v1/import"),
        ("get", "/api/v1/events"),
        ("get", "/api/v1/health"),
        ("post", "/v1/traces"),
        ("post", "/v1/logs"),
    ];
    for (method, path) in routes {
        let op = &paths[path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        assert!(
            op["responses"]["default"].is_object(),
            "{method} {path} documents no error"
        );
        // The OTLP receiver answers its own errors as OTLP's
        // google.rpc.Status; the guards in front of it, as everywhere.
        let statuses: &[&str] = if path.starts_with("/v1/") {
            &["401", "403"]
        } else {
            &["400", "401", "403", "404", "422", "503"]
        };
        for &status in statuses {
            assert_eq!(
                op["responses"][status]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ErrorDoc",
                "{method} {path} does not document {status}"
            );
        }
        // A parameter is in the path only when the path has it.
        for p in op["parameters"].as_array().into_iter().flatten() {
            let name = p["name"].as_str().unwrap();
            let in_path = path.contains(&format!("{{{name}}}"));
            assert_eq!(
                p["in"],
                if in_path { "path" } else { "query" },
                "{method} {path}: parameter {name}"
            );
        }
    }
    // The real constraints.
    let timeline = &paths["/api/v1/sessions/{session}/branches/{branch}/timeline"]["get"];
    let param = |op: &serde_json::Value, name: &str| {
        op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(param(timeline, "limit")["schema"]["maximum"], 2000);
    assert_eq!(param(timeline, "branch")["schema"]["maxLength"], 200);
    assert!(param(timeline, "branch")["schema"]["pattern"].is_string());
    let node = &paths["/api/v1/nodes/{hash}"]["get"];
    assert_eq!(
        param(node, "hash")["schema"]["pattern"],
        "^[0-9a-fA-F]{1,64}$"
    );
    assert_eq!(
        paths.len(),
        20,
        "a route in the document is not tested here"
    );
    // Every documented route answers (not the fallback's "no route").
    for (method, path) in routes {
        let concrete = path
            .replace("{session}", "nope")
            .replace("{branch}", "main")
            .replace("{key}", "k")
            .replace("{hash}", "abcd");
        if method == "get" && !concrete.ends_with("/events") {
            let r = srv.get(&concrete);
            assert!(
                !r.text().contains("no route for"),
                "{method} {path}: {}",
                r.text()
            );
        }
    }
    // An independent validator, when CI's venv provides it.
    let py = std::env::var("CONVO_TEST_PYTHON").ok();
    match py {
        Some(py) => {
            let file = t.home().join("openapi.json");
            std::fs::write(&file, doc.to_string()).unwrap();
            let out = std::process::Command::new(py)
                .args([
                    "-c",
                    "import sys, json; from openapi_spec_validator import validate; validate(json.load(open(sys.argv[1]))); print('valid')",
                ])
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "openapi-spec-validator: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must set CONVO_TEST_PYTHON (scripts/test makes a venv)"
            );
            eprintln!("skipping the OpenAPI validator: CONVO_TEST_PYTHON not set");
        }
    }
}

/// `convo diff --json` and the API's diff are one document: the same JSON
/// for the same two references, aligned by content (a fork that recorded a
/// turn again the same way differs only by its fork node), on both backends.
fn diff_cli_and_api_agree(backend: Backend) {
    let Some((t, _db)) = TestEnv::on(backend) else {
        return;
    };
    let srv = Server::start(&t, &[]);
    let s = sess(&srv, "bot", "diffs");
    let nodes = |b: &str, v: Value| {
        srv.post_json(&format!("/api/v1/sessions/{s}/branches/{b}/nodes"), &v)
            .expect(201)["nodes"]
            .clone()
    };
    let first = nodes("main", turn("Tell me about Paris", "Paris is big."));
    nodes("main", turn("How many people?", "About 2 million."));
    nodes("main", turn("And Lyon?", "About half a million."));
    srv.post_json(
        &format!("/api/v1/sessions/{s}/fork"),
        &json!({"from": first[1]["hash"], "branch": "retry"}),
    )
    .expect(201);
    nodes("retry", turn("How many people?", "About 2 million."));
    nodes(
        "retry",
        json!([{"kind": "invoke", "payload": "And Lyon?"},
               {"kind": "request", "payload": "{\"q\":\"lyon\"}", "to": "search"},
               {"kind": "response", "payload": "522,000", "from": "search"},
               {"kind": "complete", "payload": "About 522,000."}]),
    );
    for (a, b) in [
        ("main", "retry"),
        ("retry", "main"),
        ("main@2", "retry"),
        ("main", "main"),
    ] {
        let cli = t.run(&["diff", &s, a, b, "--json"]).json();
        let api = srv
            .get(&format!(
                "/api/v1/sessions/{s}/diff?a={}&b={b}",
                a.replace('@', "%40")
            ))
            .expect(200);
        assert_eq!(cli, api, "diff {a} {b}: the CLI and the API differ");
    }
    let d = t.run(&["diff", &s, "main", "retry", "--json"]).json();
    assert_eq!(d["shared"], 2);
    assert_eq!(
        d["unchanged"], 3,
        "turn 2 and turn 3's invoke: the same on both"
    );
    let turns = d["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    let changed = |t: &Value| -> Vec<(String, bool, bool)> {
        t["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["changed"] == true)
            .map(|n| {
                (
                    n["kind"].as_str().unwrap().to_owned(),
                    n["a"].is_null(),
                    n["b"].is_null(),
                )
            })
            .collect()
    };
    assert_eq!(changed(&turns[0]), [("fork".to_owned(), true, false)]);
    assert_eq!(
        changed(&turns[1]),
        [
            ("request".to_owned(), true, false),
            ("response".to_owned(), true, false),
            ("complete".to_owned(), false, false)
        ]
    );
    assert_eq!(
        (turns[1]["a"].clone(), turns[1]["b"].clone()),
        (json!(3), json!(3))
    );
    // A page is the same document with `page` set; past the end, an error.
    let mut paged = srv
        .get(&format!("/api/v1/sessions/{s}/diff?a=main&b=retry&page=1"))
        .expect(200);
    assert_eq!(paged["page"], 1);
    paged["page"] = Value::Null;
    assert_eq!(paged, d);
    let past = srv.get(&format!("/api/v1/sessions/{s}/diff?a=main&b=retry&page=2"));
    assert_eq!(past.status, 422, "{}", past.text());
    assert!(past.text().contains("1 page"), "{}", past.text());
    let nowhere = srv.get(&format!("/api/v1/sessions/{s}/diff?a=main&b=nope"));
    assert_eq!(nowhere.status, 404, "{}", nowhere.text());
}

/// The diff and the graph in headless Chromium (tests/browser/webdiff.py,
/// which imports the DevTools driver of webview.py): a one-node fork, a
/// changed answer word by word, a paged long diff, promotes and tooltips in
/// the graph, more timelines than it draws, a phone; screenshots kept with
/// the web view's.
#[test]
fn browser_diff_and_graph() {
    browser(
        "webdiff.py",
        &[
            "webdiff-desktop.png",
            "webdiff-phone.png",
            "webdiff-graph.png",
            "webdiff-graph-phone.png",
        ],
    );
}

/// `convo share` in headless Chromium (tests/browser/share.py): the file
/// verifies from file://, a one-byte edit in a node, a payload or a hash is
/// refused naming the node, metadata only and --redact-secrets carry no
/// text or credential, no injected script runs, the web view's Share serves
/// the same file, and a 1,000-call session verifies.
#[test]
fn browser_share() {
    browser("share.py", &["share-verified.png", "share-refused.png"]);
}

/// Every page and asset of the web view (the share file too) is sent
/// gzipped to a client that accepts it, with a strong ETag per encoding,
/// and answers `If-None-Match` with that tag by 304 and no body; a client
/// that does not ask for gzip gets the bytes as they are, under another tag.
#[test]
fn pages_and_assets_are_compressed_and_revalidated() {
    use std::io::Read;
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let sid = sess(&srv, "bot", "compressed");
    let mut lines = Vec::new();
    for i in 0..300 {
        lines.push(json!({"kind": "invoke", "payload": format!("Question {i} about Paris and its museums?")}));
        lines.push(json!({"kind": "complete", "payload": format!("Answer {i}: the Louvre, the Orsay and the Pompidou.")}));
    }
    srv.post_json(
        &format!("/api/v1/sessions/{sid}/branches/main/nodes"),
        &Value::Array(lines),
    )
    .expect(201);
    let paths = [
        "/".to_owned(),
        format!("/sessions/{sid}"),
        format!("/sessions/{sid}/share?content=1"),
        "/search?q=Louvre".to_owned(),
        "/assets/app.css".to_owned(),
        "/assets/app.js".to_owned(),
        "/assets/viewer.js".to_owned(),
    ];
    for p in &paths {
        let plain = srv.get(p);
        assert_eq!(plain.status, 200, "{p}: {}", plain.text());
        assert_eq!(plain.header("content-encoding"), None, "{p}");
        let tag = plain
            .header("etag")
            .unwrap_or_else(|| panic!("{p}: no ETag"));
        let zipped = srv.req("GET", p, &[("Accept-Encoding", "gzip, br")], b"");
        assert_eq!(zipped.header("content-encoding"), Some("gzip"), "{p}");
        let ztag = zipped.header("etag").unwrap().to_owned();
        assert_ne!(ztag, tag, "{p}: one tag for two representations");
        let mut unzipped = Vec::new();
        flate2::read::GzDecoder::new(&zipped.body[..])
            .read_to_end(&mut unzipped)
            .unwrap();
        assert_eq!(unzipped, plain.body, "{p}: gzip changed the bytes");
        assert!(zipped.body.len() < plain.body.len(), "{p}");
        for (tag, enc) in [(tag, ""), (ztag.as_str(), "gzip")] {
            let again = srv.req(
                "GET",
                p,
                &[("If-None-Match", tag), ("Accept-Encoding", enc)],
                b"",
            );
            assert_eq!(again.status, 304, "{p} {enc}: {}", again.text());
            assert!(again.body.is_empty(), "{p}");
            assert_eq!(again.header("etag"), Some(tag), "{p}");
        }
        let stale = srv.req("GET", p, &[("If-None-Match", "\"nope\"")], b"");
        assert_eq!(stale.status, 200, "{p}");
        eprintln!(
            "{p}: {} bytes, {} gzipped",
            plain.body.len(),
            zipped.body.len()
        );
    }
}

/// A stream the upstream cut and a failed call are marked in the session
/// list, the turn's heading, the session's totals and the call; a response
/// holding a number outside f64 (`1e400`) keeps its chat view and tokens,
/// the number shown as the text it is.
#[test]
fn cut_streams_failed_calls_and_huge_numbers_read_as_they_are() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let sid = sess(&srv, "bot", "trust");
    let req =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Say a huge number"}]});
    let huge = r#"{"id":"c1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Here it is."},"finish_reason":"stop","score":1e400}],"usage":{"prompt_tokens":11,"completion_tokens":7}}"#;
    let lines = json!([
        {"kind": "invoke", "payload": "go"},
        {"kind": "request", "payload": req.to_string()},
        {"kind": "response", "payload": huge, "sequence": 1,
         "diagnostics": {"status": 200, "model": "gpt-4o", "partial": "the upstream closed the stream before its end"}},
        {"kind": "complete", "payload": "Here it is."},
        {"kind": "invoke", "payload": "again"},
        {"kind": "request", "payload": req.to_string()},
        {"kind": "response", "payload": r#"{"error":{"message":"overloaded"}}"#, "sequence": 1,
         "diagnostics": {"status": 529}},
        {"kind": "complete", "payload": "failed"},
    ]);
    srv.post_json(
        &format!("/api/v1/sessions/{sid}/branches/main/nodes"),
        &lines,
    )
    .expect(201);
    let page = srv.get(&format!("/sessions/{sid}")).text();
    assert!(page.contains("stream cut: partial answer"), "{page}");
    assert!(page.contains("streams cut"), "no cut in the totals");
    assert!(
        page.contains("Here it is."),
        "the 1e400 response lost its chat view"
    );
    assert!(
        page.contains("tokens 11 in · 7 out"),
        "the 1e400 response lost its tokens"
    );
    assert!(
        page.contains("1e400"),
        "the number is not shown as its text"
    );
    // One answer shown once: the complete that repeats it says so.
    assert!(
        page.contains("<p class=\"same\">The answer above, as the agent returned it"),
        "the answer is shown twice"
    );
    assert_eq!(
        page.matches("<p>Here it is.</p>").count(),
        1,
        "the answer is shown twice"
    );
    assert_eq!(
        page.matches("a call failed or was cut").count(),
        2,
        "both turns are marked"
    );
    let list = srv.get("/").text();
    assert!(
        list.contains("row failed"),
        "the list does not mark the session"
    );
    assert!(
        list.contains("1 cut"),
        "the list does not count the cut stream"
    );
}

/// Dark mode (the system's preference and the toggle, kept over a reload,
/// the share page too), the skip link as the first tab stop, `?` opening
/// the help panel in the page, pages gzipped to the browser
/// (tests/browser/theme.py).
#[test]
fn browser_theme_skip_link_and_help() {
    browser("theme.py", &["theme-dark.png", "theme-help.png"]);
}

/// The session list at 2,000 sessions (tests/browser/sessions.py): page
/// numbers to the last page, sorting by tokens, title and created both
/// ways, the order kept across pages, a long title not crushing the id
/// and date columns, hostile titles inert.
#[test]
fn browser_session_list_sorts_and_pages() {
    browser("sessions.py", &["sessions-sorted.png"]);
}

/// A turn's waterfall (tests/browser/waterfall.py): one bar per call, two
/// parallel calls overlapping on the time axis, a failed retry marked,
/// tokens on each bar, a hostile model name inert, a bar linking to its call;
/// a subagent's calls nested right under the call that started it.
#[test]
fn browser_waterfall() {
    browser("waterfall.py", &["waterfall.png", "waterfall-subagent.png"]);
}

/// Runs `tests/browser/SCRIPT` (Python driving headless Chromium through
/// the DevTools protocol: `SCRIPT CONVO CHROMIUM HOME SHOTS`) against the
/// real binary, and checks that it passed and left these screenshots.
fn browser(script: &str, screenshots: &[&str]) {
    let (Some(py), Some(chromium)) = (
        std::env::var_os("CONVO_TEST_PYTHON"),
        std::env::var_os("CONVO_TEST_CHROMIUM"),
    ) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must set CONVO_TEST_PYTHON and CONVO_TEST_CHROMIUM (scripts/test-env)"
        );
        eprintln!("skipping the browser test: run scripts/test (it sets up Chromium)");
        return;
    };
    let t = TestEnv::new();
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("webview");
    std::fs::create_dir_all(&shots).unwrap();
    let out = std::process::Command::new(py)
        .arg(
            convo_testutil::package_dir(env!("CARGO_MANIFEST_DIR"))
                .join("tests/browser")
                .join(script),
        )
        .arg(env!("CARGO_BIN_EXE_convo"))
        .arg(chromium)
        .arg(t.home())
        .arg(&shots)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for shot in screenshots {
        assert!(shots.join(shot).exists(), "{script}: no {shot}");
    }
}

/// The web view in headless Chromium, as a person uses it: the demo
/// session's graph, a turn, fork from a node, a turn arriving live, promote,
/// the sealed timeline, hostile payloads, keyboard, a phone-sized screen
/// (tests/browser/webview.py drives it through the DevTools protocol).
#[test]
fn browser_webview() {
    browser("webview.py", &["webview-session.png"]);
}

/// `CONVO_PRICES` replaces the embedded price table: a call of a model it
/// prices costs what it says on the session page and in the list; a file
/// that is missing or not a table stops `convo serve` with its name.
#[test]
fn prices_from_a_file_or_a_clear_error() {
    use std::io::BufRead;
    let t = TestEnv::new();
    let bad = t.home().join("nope.json");
    let out = t
        .cmd()
        .env("CONVO_PRICES", &bad)
        .args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope.json"), "{err}");
    std::fs::write(&bad, "[1, 2]").unwrap();
    let out = t
        .cmd()
        .env("CONVO_PRICES", &bad)
        .args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a JSON object"));

    let table = t.home().join("prices.json");
    std::fs::write(
        &table,
        r#"{"source": "test table", "date": "2026-01-01", "models": {"m-test": {"input_cost_per_token": 1.5, "output_cost_per_token": 2}}}"#,
    )
    .unwrap();
    let mut child = t
        .cmd()
        .env("CONVO_PRICES", &table)
        .args(["serve", "--listen", "127.0.0.1:0", "--quiet"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let srv = Server {
        child,
        addr: line
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned(),
    };
    let id = sess(&srv, "a", "priced");
    srv.post_json(
        &format!("/api/v1/sessions/{id}/branches/main/nodes"),
        &json!([
            {"kind": "invoke", "payload": "q"},
            {"kind": "request", "payload": "{\"model\":\"m-test\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}", "diagnostics": {"api": "openai.chat"}},
            {"kind": "response", "payload": "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"a\"}}]}",
             "diagnostics": {"model": "m-test", "status": 200, "usage": {"prompt_tokens": 4, "completion_tokens": 3}}},
            {"kind": "complete", "payload": "a"}
        ]),
    )
    .expect(201);
    let page = srv.get(&format!("/sessions/{id}")).text();
    // 4 × 1.5 + 3 × 2 = 12 dollars, with the table's name beside it.
    assert!(page.contains("$12.00"), "{page}");
    assert!(page.contains("test table (2026-01-01)"));
    let list = srv.get("/").text();
    assert!(list.contains("$12.00") && list.contains("4 / 3"), "{list}");
}

/// What the model saw, in headless Chromium: real calls recorded through
/// `convo proxy` from a scripted upstream (OpenAI chat with a tool call and
/// a stream, the Responses API, an Anthropic stream with thinking and tool
/// use, a 429) read as conversations; exact numbers, duplicate keys, a
/// 47 KB JSON collapsed; totals and list columns; live updates at the tail
/// only, rendered by the server; ten navigations in one tab
/// (tests/browser/llmview.py, screenshots beside webview.py's).
#[test]
fn browser_llm_calls() {
    browser("llmview.py", &["llmview-session.png", "llmview-phone.png"]);
}

/// SIGTERM with an event stream open and appends in flight: the streams
/// end, every append the server acknowledged is stored (and at most the
/// one each client had in flight besides), the process exits 0, and each
/// request left one JSON log line.
#[test]
fn shutdown_ends_streams_finishes_writes_and_logs_each_request() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let t = TestEnv::new();
    let mut child = t
        .cmd()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let addr = line
        .trim()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut stderr = child.stderr.take().unwrap();
    let logs = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let srv = Server { child, addr };
    let _stream = Sse::open(&srv.addr, "/api/v1/events", None);
    let acked = Arc::new(AtomicU64::new(0));
    const CLIENTS: u64 = 4;
    let writers: Vec<_> = (0..CLIENTS)
        .map(|w| {
            let (addr, acked) = (srv.addr.clone(), acked.clone());
            let s = sess(&srv, "agent", &format!("writer {w}"));
            let path = format!("/api/v1/sessions/{s}/branches/main/nodes");
            std::thread::spawn(move || {
                for i in 0.. {
                    use std::io::{Read, Write};
                    let Ok(mut c) = std::net::TcpStream::connect(&addr) else {
                        return;
                    };
                    let kind = if i % 2 == 0 { "invoke" } else { "complete" };
                    let body = format!("{{\"kind\":\"{kind}\",\"payload\":\"w{w} {i}\"}}");
                    let req = format!(
                        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    let mut raw = Vec::new();
                    if c.write_all(req.as_bytes()).is_err() || c.read_to_end(&mut raw).is_err() {
                        return;
                    }
                    if !raw.starts_with(b"HTTP/1.1 201") {
                        return;
                    }
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    while acked.load(Ordering::SeqCst) < 20 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = srv.child.id();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let mut srv = srv;
    let mut waited = 0;
    let status = loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            break st;
        }
        waited += 1;
        assert!(
            waited < 1200,
            "convo serve did not stop: an event stream holds the shutdown"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    for w in writers {
        w.join().unwrap();
    }
    assert!(status.success(), "{status:?}");
    let acked = acked.load(Ordering::SeqCst);
    let all = t.run(&["log", "--all", "--json"]).json();
    let stored = all.as_array().unwrap().len() as u64;
    assert!(
        stored >= acked && stored <= acked + CLIENTS,
        "{stored} stored, {acked} acknowledged"
    );
    assert!(t.run(&["verify"]).out.status.success());
    let logs = logs.join().unwrap();
    let posts: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["method"] == "POST" && v["path"].as_str().is_some_and(|p| p.ends_with("/nodes"))
        })
        .collect();
    let created = posts.iter().filter(|v| v["status"] == 201).count() as u64;
    assert_eq!(created, stored, "one log line per append written: {logs}");
    assert!(
        posts
            .iter()
            .all(|v| v["time"].is_string() && v["ms"].is_number())
    );
    assert!(logs.contains("finishing requests in flight"), "{logs}");
}

/// `convo serve --checkpoint-dir DIR --checkpoint-every N`: the server's
/// appends are checkpointed every N, and a last one is written on
/// shutdown; `verify --checkpoint DIR` proves the store extends them all.
#[test]
fn serve_writes_checkpoints_every_n_appends_and_on_shutdown() {
    let t = TestEnv::new();
    let dir = t.home().join("cps");
    let d = dir.to_str().unwrap();
    let srv = Server::start(&t, &["--checkpoint-dir", d, "--checkpoint-every", "4"]);
    let s = sess(&srv, "a", "checkpointed");
    let files = || -> Vec<u64> {
        let mut v: Vec<u64> = std::fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".checkpoint"))
                    .map(|e| {
                        let v: Value =
                            serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
                        v["cursor"].as_u64().unwrap()
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    for (q, a) in [("a", "b"), ("c", "d")] {
        srv.post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &turn(q, a),
        )
        .expect(201);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !files().contains(&4) {
        assert!(std::time::Instant::now() < deadline, "{:?}", files());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    srv.post_json(
        &format!("/api/v1/sessions/{s}/branches/main/nodes"),
        &turn("e", "f"),
    )
    .expect(201);
    assert!(srv.stop().success());
    let got = files();
    assert_eq!(got.last(), Some(&6), "a last one on shutdown: {got:?}");
    assert!(got.contains(&4), "{got:?}");
    let ok = t.run(&["verify", "--checkpoint", d]).ok();
    assert!(
        ok.contains(&format!("extends {} checkpoint(s)", got.len())),
        "{ok}"
    );
}

/// The count line of the session list (`N sessions · a–b`).
fn listed(html: &str) -> usize {
    let at = html
        .find("class=\"count\">")
        .unwrap_or_else(|| panic!("no count in {html}"))
        + "class=\"count\">".len();
    html[at..].split(' ').next().unwrap().parse().unwrap()
}

/// The web view's paging, blank filters, search page and jumps: blank form
/// fields filter nothing (the list's Filter form and its "Next page" link
/// used to show 0 sessions), the search page finds message text through the
/// store's index with the filters, `?turn=` and `?node=` open the page of a
/// long timeline holding that node (marked for the script to bring into
/// view), and a re-run without an upstream says how to start one.
#[test]
fn web_search_paging_jumps_and_rerun_without_upstream() {
    let t = TestEnv::new();
    let srv = Server::start(&t, &[]);
    let mut ids = Vec::new();
    for i in 0..60 {
        let agent = if i % 2 == 0 { "alpha" } else { "beta" };
        ids.push(sess(&srv, agent, &format!("s{i}")));
    }
    // The list: blank filters are no filters; the next page has the rest.
    let all = srv.get("/?q=&agent=").text();
    assert_eq!(listed(&all), 60, "blank q and agent filter nothing");
    assert_eq!(all.matches("<tr class=\"row\"").count(), 50);
    assert!(
        all.contains("href=\"/?offset=50\""),
        "the next page link carries no blank filter"
    );
    let next = srv.get("/?offset=50").text();
    assert_eq!(next.matches("<tr class=\"row\"").count(), 10);
    assert!(next.contains("href=\"/\""), "a link back to the first page");
    assert_eq!(listed(&srv.get("/?q=&agent=beta&offset=").text()), 30);
    assert_eq!(srv.get("/api/v1/sessions?agent=").expect(200)["total"], 60);

    // Messages to find: a failed call in a beta session, good ones in alpha.
    let line = |kind: &str, text: &str, diag: Value| json!({"kind": kind, "payload": text, "diagnostics": diag});
    for (i, s) in ids.iter().take(4).enumerate() {
        let failed = i == 1;
        let status = if failed { 503 } else { 200 };
        srv.post_json(
            &format!("/api/v1/sessions/{s}/branches/main/nodes"),
            &json!([
                line("invoke", "Where do zebras sleep?", json!({})),
                line(
                    "request",
                    "{\"q\": \"zebra habits\"}",
                    json!({"model": format!("m{}", i % 2)})
                ),
                line(
                    "response",
                    "zebras sleep standing",
                    json!({"status": status, "model": format!("m{}", i % 2)})
                ),
                line("complete", "Standing up, mostly.", json!({})),
            ]),
        )
        .expect(201);
    }
    let hits = |q: &str| {
        let page = srv.get(&format!("/search?{q}")).text();
        let n = page.matches("<li class=\"hit\"").count();
        (n, page)
    };
    let (n, page) = hits("q=zebras&agent=&model=&status=&failed=&since=&until=&kind=");
    assert_eq!(n, 8, "every message with the word, blank filters ignored");
    assert!(page.contains("<mark>zebras</mark>") || page.contains("<mark>Zebras</mark>"));
    assert_eq!(hits("q=zebras&agent=beta").0, 4);
    assert_eq!(
        hits("q=zebra*&model=m1").0,
        4,
        "the request and the answer of two calls"
    );
    assert_eq!(hits("q=zebras&failed=on").0, 1);
    assert_eq!(hits("q=zebras&status=200&kind=response").0, 3);
    assert_eq!(
        hits("q=zebras&since=2000-01-01&until=2999-12-31T00:00").0,
        8
    );
    assert_eq!(hits("q=zebras&until=2000-01-01").0, 0);
    let (_, bad) = hits("q=zebras&since=yesterday-ish");
    assert!(
        bad.contains("class=\"notice\""),
        "a bad time is said on the page"
    );
    // The same search through the API gives the same nodes.
    let api = srv
        .get("/api/v1/search?q=zebras&failed=true&agent=")
        .expect(200);
    assert_eq!(api["hits"].as_array().unwrap().len(), 1);
    let failed_hash = api["hits"][0]["node"]["hash"].as_str().unwrap().to_owned();
    assert!(
        hits("q=zebras&failed=on")
            .1
            .contains(&format!("?node={failed_hash}#n-{failed_hash}")),
        "a hit links to its node's place in its timeline"
    );
    // Titles, agents and ids are still found, above the messages.
    assert!(hits("q=s17").1.contains("Sessions named like this"));

    // A long timeline: 20,000 turns (40,000 nodes).
    let long = sess(&srv, "alpha", "long");
    for start in (1..=20_000).step_by(1000) {
        let lines: Vec<Value> = (start..start + 1000)
            .flat_map(|k| {
                [
                    json!({"kind": "invoke", "payload": format!("question {k}")}),
                    json!({"kind": "complete", "payload": format!("answer {k}")}),
                ]
            })
            .collect();
        srv.post_json(
            &format!("/api/v1/sessions/{long}/branches/main/nodes"),
            &Value::Array(lines),
        )
        .expect(201);
    }
    let turn = srv.get(&format!("/sessions/{long}?turn=12000")).text();
    let focus = |page: &str| -> String {
        let at = page
            .find("id=\"focus\" hidden data-hash=\"")
            .expect("a focus")
            + 29;
        page[at..at + 64].to_owned()
    };
    let f = focus(&turn);
    assert!(
        turn.contains(&format!("id=\"n-{f}\"")),
        "the turn is on the page"
    );
    let node = srv.get(&format!("/api/v1/nodes/{f}")).expect(200);
    assert_eq!(node["payload"], "question 12000");
    assert!(
        turn.contains("aria-current=\"page\">120<"),
        "page 120 of 200 is current"
    );
    assert!(
        turn.contains(">200</a>") && turn.contains("first"),
        "first and last pages are a click away"
    );
    assert!(
        turn.matches("class=\"page\"").count() <= 16,
        "a few page numbers, not 200"
    );
    // Centred on a node by hash prefix, with blank other fields.
    let answer = srv
        .get(&format!("/sessions/{long}?node={}&turn=&cursor=", &f[..10]))
        .text();
    assert_eq!(focus(&answer), f);
    assert!(
        answer.contains("nodes 23899–24098 of 40000"),
        "centred: 100 nodes before it"
    );
    // A turn past the end says so and shows the tail.
    let past = srv.get(&format!("/sessions/{long}?turn=50000")).text();
    assert!(past.contains("no turn 50000 here"));
    assert!(past.contains("nodes 39801–40000 of 40000"));
    // A node of another session is not shown as this one's.
    let elsewhere = srv
        .get(&format!("/sessions/{long}?node={failed_hash}"))
        .text();
    assert!(elsewhere.contains("is not in this session"));

    // Re-run without an upstream: the page says how to start one, the POST
    // is refused with that reason, and a cross-site form post never gets in.
    // The failed hit is the response; its parent the request.
    let req_hash = api["hits"][0]["node"]["parent"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        srv.get(&format!("/api/v1/nodes/{req_hash}")).expect(200)["kind"],
        "request"
    );
    let s1 = &ids[1];
    let page = srv
        .get(&format!("/sessions/{s1}/nodes/{req_hash}/rerun"))
        .text();
    assert!(page.contains("convo serve --upstream"), "{page}");
    assert!(
        page.contains("{&quot;q&quot;: &quot;zebra habits&quot;}"),
        "the exact bytes"
    );
    let refused = srv.post_json(
        &format!("/sessions/{s1}/rerun"),
        &json!({"node": req_hash, "body": "{}"}),
    );
    assert_eq!(refused.status, 422);
    assert!(refused.text().contains("no upstream"));
    let csrf = srv.req(
        "POST",
        &format!("/sessions/{s1}/rerun"),
        &[
            ("Content-Type", "text/plain"),
            ("Sec-Fetch-Site", "cross-site"),
        ],
        json!({"node": req_hash, "body": "{}"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(csrf.status, 403, "{}", csrf.text());
    // An input: the commands that run it again, ready to copy.
    let first = srv
        .get(&format!(
            "/api/v1/sessions/{s1}/branches/main/timeline?cursor=0&limit=1"
        ))
        .expect(200);
    let inv = first["nodes"][0]["hash"].as_str().unwrap();
    let cli = srv.get(&format!("/sessions/{s1}/nodes/{inv}/rerun")).text();
    assert!(
        cli.contains("convo run 's1 (re-run)' --input 'Where do zebras sleep?' -- AGENT-COMMAND"),
        "the session's first input starts a new session: {cli}"
    );
    let later = srv.get(&format!("/sessions/{long}/nodes/{f}/rerun")).text();
    let parent = node["parent"].as_str().unwrap();
    assert!(
        later.contains(&format!(
            "convo session fork {long} --from {} --branch rerun-1",
            &parent[..12]
        )),
        "{later}"
    );
    assert!(
        later.contains("convo run") && later.contains("--branch rerun-1 --input 'question 12000'"),
        "{later}"
    );
}

/// Finding and re-running in headless Chromium (tests/browser/find.py): a
/// word said once in a 1,000-turn session, searched from the header's box,
/// lands on that message centred and marked; the jump box, the last page
/// and page 1; a recorded model call re-run with an edited request through
/// a scripted upstream, confirmed, seen on the new fork with the new
/// answer. Screenshots at desktop and phone sizes.
#[test]
fn browser_find_jump_rerun() {
    browser(
        "find.py",
        &[
            "webview-search.png",
            "webview-jump.png",
            "webview-rerun-fork.png",
            "webview-search-phone.png",
        ],
    );
}

convo_testutil::for_each_backend!(
    convo_testutil::when_available;
    api_contract,
    events,
    diff_cli_and_api_agree,
);

/// The session page of an older timeline (a fork made early, while `main`
/// went on for 60 more nodes) starts its live stream where the store was
/// when the page was rendered: the first event it gets is the node written
/// after that, not a replay of every later node of the session (it used to
/// start at the fork's own last node: 34.7 MB of "new" events for a 5-node
/// fork of a 40,000-node main).
#[test]
fn an_older_timelines_page_streams_only_what_comes_after_it() {
    let t = TestEnv::new();
    let s = t.session("a");
    t.run(&["say", &s, "--user", "q0", "--agent", "a0"]).ok();
    let head = t.run(&["log", &s, "-n", "1", "--json"]).json()[0]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    t.run(&["session", "fork", &s, "--from", &head, "--branch", "side"])
        .ok();
    t.run(&["say", &s, "--branch", "side", "--user", "s", "--agent", "s"])
        .ok();
    let input: String = (0..30)
        .map(|i| format!("{{\"kind\":\"invoke\",\"payload\":\"q{i}\"}}\n{{\"kind\":\"complete\",\"payload\":\"a{i}\"}}\n"))
        .collect();
    t.run_stdin(&["ingest", &s], input.as_bytes()).ok();
    let srv = Server::start(&t, &[]);
    let page = srv.get(&format!("/sessions/{s}?branch=side"));
    assert_eq!(page.status, 200);
    let html = page.text();
    let after: u64 = html
        .split("data-after=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no data-after in the page"));
    let mut sse = Sse::open(
        &srv.addr,
        &format!("/api/v1/events?session={s}&after={after}"),
        None,
    );
    t.run(&[
        "say", &s, "--branch", "side", "--user", "new", "--agent", "new",
    ])
    .ok();
    let first: Value = serde_json::from_str(&sse.next().data).unwrap();
    assert_eq!(
        first["payload"].as_str(),
        Some("new"),
        "the first event is the node written after the page: {first}"
    );
}
