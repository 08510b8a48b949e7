//! `convo test` runs: `GET /tests` lists them, newest first, and `GET
//! /tests/{run}` shows one: each test passed, changed, missed or failed
//! (and, against a baseline, unchanged, improved or regressed), its first
//! divergence (the call, what differs, the diff of the two requests) and
//! links to the recorded timeline, the live one and the diff of the two.
//!
//! Where runs are: `convo test` keeps each run's JSON report (docs/JSON.md,
//! "Test report") as `$CONVO_HOME/test-runs/RUN.json` (RUN the run's start
//! in milliseconds since the epoch); `convo serve` reads that directory of
//! the same home ([`AppState::test_runs`]). Nothing in a report is trusted:
//! a run's name is digits and dashes only, every string is escaped by the
//! page's one escaper (maud), no payload runs.

use super::*;
use serde_json::Value;

/// Runs listed at most on `/tests`.
const LISTED: usize = 200;

/// Whether `name` can name a run file (no path can be made of it).
fn run_name_ok(name: &str) -> bool {
    !name.is_empty() && name.len() <= 40 && name.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

/// The runs kept in `dir`, newest first (names without `.json`).
fn runs(dir: &std::path::Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_owned)
        })
        .filter(|n| run_name_ok(n))
        .collect();
    names.sort_by(|a, b| b.cmp(a));
    names.truncate(LISTED);
    names
}

/// A run's report, or why not (404).
fn read_run(dir: &std::path::Path, name: &str) -> Result<Value, String> {
    let text = run_name_ok(name)
        .then(|| std::fs::read_to_string(dir.join(format!("{name}.json"))).ok())
        .flatten()
        .ok_or_else(|| format!("no test run `{name}`"))?;
    serde_json::from_str(&text).map_err(|e| format!("test run `{name}` is not JSON: {e}"))
}

/// A 404 page saying why.
fn missing(why: &str) -> Response {
    let body = page(
        "no such test run",
        html! { section.error { h1 { "Not found" } p { (why) } p { a href="/tests" { "All test runs" } } } },
    );
    (axum::http::StatusCode::NOT_FOUND, html_response(body)).into_response()
}

/// When a run started, from its name (milliseconds since the epoch).
fn started(name: &str) -> String {
    name.split('-')
        .next()
        .and_then(|ms| ms.parse::<i64>().ok())
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || name.to_owned(),
            |t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        )
}

fn count(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

pub(super) async fn list_page(State(st): State<AppState>) -> Response {
    let dir = st.test_runs.clone();
    let names = match &dir {
        Some(d) => {
            let d = d.clone();
            tokio::task::spawn_blocking(move || {
                runs(&d)
                    .into_iter()
                    .map(|n| {
                        let doc = read_run(&d, &n).ok();
                        (n, doc)
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default()
        }
        None => Vec::new(),
    };
    let body = html! {
        h1 { "Test runs" }
        @if names.is_empty() {
            p.notice #no-runs {
                "No " code { "convo test" } " run yet. Each run keeps its report in "
                code { "$CONVO_HOME/test-runs/" } " and this page lists them: run "
                code { "convo test SESSION -- CMD" } " (or " code { "convo test --file convo.toml" } ") with the same home as this server."
            }
        } @else {
            table.runs {
                thead { tr { th { "Run" } th { "Passed" } th { "Failed" } th { "Against the baseline" } th { "Tests" } } }
                tbody {
                    @for (name, doc) in &names {
                        tr data-run=(name) {
                            td { a href=(format!("/tests/{name}")) { (started(name)) } }
                            @match doc {
                                Some(d) => {
                                    td.num { (count(d, "passed")) }
                                    td.num { @if count(d, "failed") > 0 { strong.failed { (count(d, "failed")) } } @else { "0" } }
                                    td { @if let Some(c) = d.get("comparison") { (count(c, "unchanged")) " unchanged · " (count(c, "improved")) " improved · " (count(c, "regressed")) " regressed" } }
                                    td { @for (i, t) in d["tests"].as_array().into_iter().flatten().take(5).enumerate() { @if i > 0 { ", " } bdi { (t["name"].as_str().unwrap_or("?")) } } }
                                }
                                None => { td colspan="4" { "(unreadable report)" } }
                            }
                        }
                    }
                }
            }
        }
    };
    html_response(page("Test runs", body))
}

pub(super) async fn run_page(State(st): State<AppState>, Path(name): Path<String>) -> Response {
    let Some(dir) = st.test_runs.clone() else {
        return missing("this server reads no test runs (`convo serve` reads those of its home)");
    };
    let n2 = name.clone();
    let doc = match tokio::task::spawn_blocking(move || read_run(&dir, &n2)).await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return missing(&e),
        Err(e) => return missing(&e.to_string()),
    };
    let tests: Vec<&Value> = doc["tests"].as_array().into_iter().flatten().collect();
    let body = html! {
        section #testrun data-run=(name) {
            p { a href="/tests" { "← all test runs" } }
            h1 { "Test run " (started(&name)) }
            p.sub #run-counts {
                (count(&doc, "passed")) " passed · " (count(&doc, "failed")) " failed"
                @if let Some(c) = doc.get("comparison") {
                    " · against the baseline: " (count(c, "unchanged")) " unchanged, " (count(c, "improved")) " improved, " (count(c, "regressed")) " regressed"
                }
                @if let Some(ms) = doc["duration_ms"].as_f64() { " · " (format!("{:.1}", ms / 1000.0)) " s" }
            }
            @for t in &tests { (test(t)) }
        }
    };
    html_response(page(&format!("test run {name}"), body))
}

/// `SESSION[:BRANCH]` as `convo test` takes it.
fn recording(t: &Value) -> (String, String) {
    let r = t["recording"].as_str().unwrap_or("");
    match r.rsplit_once(':') {
        Some((s, b)) if !b.is_empty() => (s.to_owned(), b.to_owned()),
        _ => (r.to_owned(), "main".to_owned()),
    }
}

/// One test: its verdict, its first divergence, its timelines.
fn test(t: &Value) -> Markup {
    let status = t["status"].as_str().unwrap_or("?");
    let comparison = t["comparison"].as_str();
    let (session, branch) = recording(t);
    // `{branch, …}` (the replay report's), or a name.
    let lt = &t["live_timeline"];
    let live = lt["branch"].as_str().or(lt.as_str());
    let sq = query_escape(&session);
    let d = &t["divergence"];
    html! {
        article class=(format!("test status-{status}")) data-status=(status) data-comparison=[comparison] {
            h2 {
                span class=(format!("verdict v-{status}")) { (status) }
                @if let Some(c) = comparison { " " span class=(format!("verdict c-{c}")) { (c) } }
                " " bdi { (t["name"].as_str().unwrap_or("?")) }
            }
            p.links {
                "recording " a.recorded href=(format!("/sessions/{sq}?branch={}", query_escape(&branch))) { bdi { (session) } ":" bdi { (branch) } }
                @if let Some(l) = live {
                    " · this run " a.live href=(format!("/sessions/{sq}?branch={}", query_escape(l))) { bdi { (l) } }
                    " · " a.difflink href=(format!("/sessions/{sq}/diff?a={}&b={}", query_escape(&branch), query_escape(l))) { "the two side by side" }
                }
            }
            @if let Some(e) = t["error"].as_str() { p.notice { (e) } }
            @if d.is_object() {
                div.divergence {
                    h3 { "First divergence" }
                    p {
                        "call " (d["call"].as_u64().unwrap_or(0))
                        @if let Some(turn) = d["turn"].as_u64() {
                            " (recorded " a.turnlink href=(format!("/sessions/{sq}?branch={}&turn={turn}", query_escape(&branch))) { "turn " (turn) } ")"
                        }
                        @if let Some(c) = d["code"].as_str() { ": " code { (c) } }
                        @if let Some(o) = d["outcome"].as_str() { " · " (o) }
                    }
                    @if let Some(ps) = d["differences"].as_array() {
                        p { "differs at " @for (i, p) in ps.iter().take(20).enumerate() { @if i > 0 { ", " } code { (p.as_str().unwrap_or("")) } } }
                    }
                    @if let Some(diff) = d["diff"].as_str() { pre.difftext { (diff) } }
                }
            }
            @let failed: Vec<&Value> = t["assertions"].as_array().into_iter().flatten().filter(|a| a["passed"] == Value::Bool(false)).collect();
            @if !failed.is_empty() {
                ul.assertions {
                    @for a in failed { li { code { (a["kind"].as_str().unwrap_or("?")) } ": " (a["message"].as_str().unwrap_or("")) } }
                }
            }
        }
    }
}
