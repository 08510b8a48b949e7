//! `convo test`'s parts that are not the run: the program's process, the
//! assertions, and the reports (JSON, JUnit XML, Markdown, the comparison
//! with a baseline). The JSON document is described in docs/JSON.md.

use super::test::TestSpec;
use super::{CmdResult, CommandError};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// What the program did.
#[derive(Debug, Default)]
pub struct Ran {
    exit_code: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
    error: Option<String>,
}

impl Ran {
    /// A program that ran to its end, exit 0, printing `stdout`.
    pub fn finished(stdout: String) -> Ran {
        Ran {
            exit_code: Some(0),
            stdout,
            ..Ran::default()
        }
    }

    /// A program that could not run, and why.
    pub fn failed(why: &str) -> Ran {
        Ran {
            error: Some(why.to_owned()),
            ..Ran::default()
        }
    }

    /// What the program printed, when it ran to its end (a judge is asked
    /// about nothing else).
    pub fn finished_output(&self) -> Option<&str> {
        (self.error.is_none() && !self.timed_out).then_some(self.stdout.as_str())
    }
}

/// The most bytes of a program's output kept in a report.
const KEPT_OUTPUT: usize = 64 * 1024;

/// Runs `argv` with the base URLs pointing at `url`, stopping it after
/// `timeout`.
pub fn run_program(
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&Path>,
    url: &str,
    timeout: Duration,
) -> Ran {
    let Some((prog, args)) = argv.split_first() else {
        return Ran {
            error: Some("empty command".into()),
            ..Ran::default()
        };
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(args)
        .env("OPENAI_BASE_URL", format!("{url}/v1"))
        .env("OPENAI_API_BASE", format!("{url}/v1"))
        .env("ANTHROPIC_BASE_URL", url)
        .env("CONVO_TEST_PROXY", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SDKs refuse to start without a key; the replay needs none.
    for k in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"] {
        if std::env::var_os(k).is_none() {
            cmd.env(k, "convo-test");
        }
    }
    cmd.envs(env);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran {
                error: Some(format!("cannot start `{prog}`: {e}")),
                ..Ran::default()
            };
        }
    };
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let mut ran = Ran::default();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                ran.exit_code = status.code();
                break;
            }
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                ran.timed_out = true;
                break;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                ran.error = Some(format!("cannot wait for `{prog}`: {e}"));
                break;
            }
        }
    }
    ran.stdout = out.join().unwrap_or_default();
    ran.stderr = err.join().unwrap_or_default();
    ran
}

fn tail(s: &str) -> String {
    if s.len() <= KEPT_OUTPUT {
        return s.to_owned();
    }
    let mut at = s.len() - KEPT_OUTPUT;
    while !s.is_char_boundary(at) {
        at += 1;
    }
    s[at..].to_owned()
}

/// One assertion on what a program produced: `equals`, `contains`,
/// `regex`, `json_schema` (a file or an inline schema), `tool` (with
/// `args`, which the call's arguments must contain), `command` (a shell
/// command reading the test's result as JSON on stdin; exit 0 passes).
#[derive(Clone, Debug, Deserialize)]
#[serde(try_from = "RawAssertion")]
pub struct Assertion {
    kind: String,
    value: Value,
    args: Option<Value>,
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAssertion {
    equals: Option<String>,
    contains: Option<String>,
    regex: Option<String>,
    json_schema: Option<Value>,
    tool: Option<String>,
    args: Option<Value>,
    command: Option<String>,
    judge: Option<String>,
    model: Option<String>,
}

impl TryFrom<RawAssertion> for Assertion {
    type Error = String;
    fn try_from(r: RawAssertion) -> Result<Self, String> {
        let s = |v: Option<String>| v.map(Value::String);
        let all = [
            ("equals", s(r.equals)),
            ("contains", s(r.contains)),
            ("regex", s(r.regex)),
            ("json_schema", r.json_schema),
            ("tool", s(r.tool)),
            ("command", s(r.command)),
            ("judge", s(r.judge)),
        ];
        let mut given = all.into_iter().filter_map(|(k, v)| v.map(|v| (k, v)));
        let (kind, value) = given.next().ok_or(
            "an expectation needs one of equals, contains, regex, json_schema, tool, command, judge",
        )?;
        if let Some((other, _)) = given.next() {
            return Err(format!(
                "an expectation has one check: `{kind}` and `{other}` given (write two [[test.expect]])"
            ));
        }
        if r.args.is_some() && kind != "tool" {
            return Err("`args` goes with `tool`".into());
        }
        if r.model.is_some() && kind != "judge" {
            return Err("`model` goes with `judge`".into());
        }
        Ok(Assertion {
            kind: kind.to_owned(),
            value,
            args: r.args,
            model: r.model,
        })
    }
}

impl Assertion {
    /// An assertion of `kind` with `value`.
    pub fn of(kind: &'static str, value: Value) -> Assertion {
        Assertion {
            kind: kind.to_owned(),
            value,
            args: None,
            model: None,
        }
    }

    /// An LLM judge's question: what the output must meet.
    pub fn judged(&self) -> Option<(&str, Option<&str>)> {
        (self.kind == "judge").then(|| (self.text(), self.model.as_deref()))
    }

    /// `--expect-tool NAME[=JSON]`.
    pub fn tool(s: &str) -> CmdResult<Assertion> {
        let (name, args) = match s.split_once('=') {
            Some((n, a)) => (
                n,
                Some(serde_json::from_str(a).map_err(|e| {
                    CommandError::user(format!(
                        "--expect-tool {s}: the arguments are not JSON: {e}"
                    ))
                })?),
            ),
            None => (s, None),
        };
        Ok(Assertion {
            kind: "tool".into(),
            value: Value::String(name.to_owned()),
            args,
            model: None,
        })
    }

    fn text(&self) -> &str {
        self.value.as_str().unwrap_or("")
    }

    /// Refuses what can never pass: a bad regular expression, a schema
    /// file that cannot be read.
    pub fn check_usage(&self, base: &Path) -> CmdResult<()> {
        match self.kind.as_str() {
            "regex" => regex::Regex::new(self.text())
                .map(|_| ())
                .map_err(|e| CommandError::user(format!("regex `{}`: {e}", self.text()))),
            "json_schema" => self.schema(base).map(|_| ()),
            _ => Ok(()),
        }
    }

    fn schema(&self, base: &Path) -> CmdResult<Value> {
        let Value::String(file) = &self.value else {
            return Ok(self.value.clone());
        };
        let path = base.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            CommandError::user(format!("json_schema {}: cannot read: {e}", path.display()))
        })?;
        serde_json::from_str(&text).map_err(|e| {
            CommandError::user(format!("json_schema {}: not JSON: {e}", path.display()))
        })
    }

    /// Whether it holds, and what was found when it does not (a judge's
    /// verdict was had before, `judged`).
    fn check(
        &self,
        out: &str,
        result: &Value,
        base: &Path,
        judged: Option<&Judged>,
    ) -> (bool, String) {
        match self.kind.as_str() {
            "judge" => match judged {
                Some(Ok(v)) => (v.pass, format!("the judge: {}", v.reason)),
                Some(Err(why)) => (false, why.clone()),
                None => (false, "the judge was not asked".into()),
            },
            "equals" => (
                out.trim_end() == self.text().trim_end(),
                format!("the output is {:?}", out.trim_end()),
            ),
            "contains" => (
                out.contains(self.text()),
                format!("the output does not contain {:?}", self.text()),
            ),
            "regex" => match regex::Regex::new(self.text()) {
                Ok(re) => (
                    re.is_match(out),
                    format!("the output does not match /{}/", self.text()),
                ),
                Err(e) => (false, e.to_string()),
            },
            "json_schema" => {
                let doc = serde_json::from_str::<Value>(out.trim()).or_else(|e| {
                    out.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty())
                        .map(|l| serde_json::from_str::<Value>(l.trim()))
                        .unwrap_or(Err(e))
                });
                match (doc, self.schema(base)) {
                    (Err(e), _) => (false, format!("the output is not JSON: {e}")),
                    (_, Err(e)) => (false, e.message_text().to_owned()),
                    (Ok(d), Ok(s)) => {
                        let mut errors = Vec::new();
                        schema_errors(&s, &d, "", &mut errors);
                        (errors.is_empty(), errors.join("; "))
                    }
                }
            }
            "tool" => {
                let calls = result["tool_calls"].as_array().cloned().unwrap_or_default();
                let hit = calls.iter().any(|c| {
                    c["name"].as_str() == Some(self.text())
                        && self
                            .args
                            .as_ref()
                            .is_none_or(|a| contains(&c["arguments"], a))
                });
                let names: Vec<&str> = calls.iter().filter_map(|c| c["name"].as_str()).collect();
                (
                    hit,
                    format!(
                        "no call of `{}` with these arguments; calls: {}",
                        self.text(),
                        names.join(", ")
                    ),
                )
            }
            "command" => run_check(self.text(), result, base),
            _ => (false, "unknown expectation".into()),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({"kind": self.kind, "expected": self.value});
        if let Some(a) = &self.args {
            v["args"] = a.clone();
        }
        if let Some(m) = &self.model {
            v["model"] = json!(m);
        }
        v
    }
}

/// Whether `have` holds `want`: every member of an object (recursively),
/// anything else equal.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|x| contains(x, v))),
        _ => have == want,
    }
}

/// `sh -c CMD` with the result on stdin.
fn run_check(cmd: &str, result: &Value, base: &Path) -> (bool, String) {
    use std::io::Write;
    let child = std::process::Command::new("sh")
        .args(["-c", cmd])
        .current_dir(base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return (false, format!("cannot start sh: {e}")),
    };
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(result.to_string().as_bytes());
    }
    match child.wait_with_output() {
        Ok(o) => (
            o.status.success(),
            format!(
                "`{cmd}` exited {}: {}{}",
                o.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            ),
        ),
        Err(e) => (false, format!("`{cmd}`: {e}")),
    }
}

/// Where `v` breaks `schema`: the JSON Schema keywords `type`, `enum`,
/// `const`, `properties`, `required`, `additionalProperties`, `items`,
/// `minItems`, `maxItems`, `minimum`, `maximum`, `minLength`,
/// `maxLength`, `pattern`, `allOf`, `anyOf`, `oneOf`, `not` (others are
/// not checked).
pub fn schema_errors(schema: &Value, v: &Value, at: &str, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        if schema == &json!(false) {
            out.push(format!("{at}: not allowed"));
        }
        return;
    };
    let here = if at.is_empty() { "/" } else { at };
    if let Some(t) = s.get("type")
        && !of_type(t, v)
    {
        out.push(format!("{here}: {v} is not of type {t}"));
        return;
    }
    if let Some(Value::Array(e)) = s.get("enum")
        && !e.contains(v)
    {
        out.push(format!(
            "{here}: {v} is not one of {}",
            Value::Array(e.clone())
        ));
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        out.push(format!("{here}: {v} is not {c}"));
    }
    scalar_errors(s, v, here, out);
    if let Some(o) = v.as_object() {
        object_errors(s, o, at, out);
    }
    if let Some(a) = v.as_array() {
        let n = a.len() as f64;
        let num = |k: &str| s.get(k).and_then(Value::as_f64);
        if num("minItems").is_some_and(|m| n < m) || num("maxItems").is_some_and(|m| n > m) {
            out.push(format!("{here}: {n} items is out of range"));
        }
        if let Some(items) = s.get("items") {
            for (i, x) in a.iter().enumerate() {
                schema_errors(items, x, &format!("{at}/{i}"), out);
            }
        }
    }
    combined_errors(s, v, at, out);
}

type Schema = serde_json::Map<String, Value>;

/// Whether `v` is of the type (or one of the types) `t` names.
fn of_type(t: &Value, v: &Value) -> bool {
    let types: Vec<&str> = match t {
        Value::String(x) => vec![x.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    types.iter().any(|ty| match *ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    })
}

/// A number's range, a string's length and pattern.
fn scalar_errors(s: &Schema, v: &Value, here: &str, out: &mut Vec<String>) {
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    if let Some(x) = v.as_f64()
        && (num("minimum").is_some_and(|m| x < m) || num("maximum").is_some_and(|m| x > m))
    {
        out.push(format!("{here}: {x} is out of range"));
    }
    if let Some(text) = v.as_str() {
        let n = text.chars().count() as f64;
        if num("minLength").is_some_and(|m| n < m) || num("maxLength").is_some_and(|m| n > m) {
            out.push(format!("{here}: the length {n} is out of range"));
        }
        if let Some(p) = s.get("pattern").and_then(Value::as_str)
            && regex::Regex::new(p).is_ok_and(|re| !re.is_match(text))
        {
            out.push(format!("{here}: {text:?} does not match /{p}/"));
        }
    }
}

/// An object's required members, and each member against its schema.
fn object_errors(s: &Schema, o: &Schema, at: &str, out: &mut Vec<String>) {
    let here = if at.is_empty() { "/" } else { at };
    let required = s.get("required").and_then(Value::as_array);
    for k in required.into_iter().flatten().filter_map(Value::as_str) {
        if !o.contains_key(k) {
            out.push(format!("{here}: `{k}` is required"));
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    for (k, x) in o {
        let child = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
        match props.and_then(|p| p.get(k)) {
            Some(ps) => schema_errors(ps, x, &child, out),
            None => {
                if let Some(extra) = s.get("additionalProperties") {
                    schema_errors(extra, x, &child, out);
                }
            }
        }
    }
}

/// `allOf`, `anyOf`, `oneOf` and `not`.
fn combined_errors(s: &Schema, v: &Value, at: &str, out: &mut Vec<String>) {
    let here = if at.is_empty() { "/" } else { at };
    let passes = |sub: &Value| {
        let mut e = Vec::new();
        schema_errors(sub, v, at, &mut e);
        e.is_empty()
    };
    let list = |k: &str| s.get(k).and_then(Value::as_array);
    for sub in list("allOf").into_iter().flatten() {
        schema_errors(sub, v, at, out);
    }
    if let Some(any) = list("anyOf")
        && !any.iter().any(passes)
    {
        out.push(format!("{here}: matches none of anyOf"));
    }
    if let Some(one) = list("oneOf")
        && one.iter().filter(|x| passes(x)).count() != 1
    {
        out.push(format!("{here}: does not match exactly one of oneOf"));
    }
    if let Some(not) = s.get("not")
        && passes(not)
    {
        out.push(format!("{here}: matches `not`"));
    }
}

/// A judge's verdict, or why there is none.
pub type Judged = Result<super::test_judge::Verdict, String>;

/// One test's outcome.
#[derive(Debug)]
pub struct TestResult(Value);

impl TestResult {
    /// A test that could not run (its recording cannot be read).
    pub fn error(t: &TestSpec, why: &str) -> TestResult {
        TestResult(json!({
            "name": t.name, "recording": t.recording, "status": "error",
            "passed": false, "error": why, "duration_ms": 0.0,
        }))
    }

    /// The result of a run: the replay's verdict first (the first call
    /// that missed), then the program's exit, then the assertions.
    pub fn finish(
        t: &TestSpec,
        ran: Ran,
        replay: Value,
        base: &Path,
        judged: &[Option<Judged>],
        took: Duration,
    ) -> TestResult {
        let first = replay["calls"]
            .as_array()
            .and_then(|c| c.iter().find(|o| o.get("code").is_some()).cloned());
        let mut result = json!({
            "name": t.name,
            "recording": t.recording,
            "exit_code": ran.exit_code,
            "timed_out": ran.timed_out,
            "stdout": tail(&ran.stdout),
            "stderr": tail(&ran.stderr),
            "counts": replay["counts"],
            "tool_calls": replay["tool_calls"],
            "live_timeline": replay["live_timeline"],
            "duration_ms": took.as_secs_f64() * 1000.0,
        });
        let checks: Vec<Value> = t
            .expect
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let judged = judged.get(i).and_then(Option::as_ref);
                let (ok, why) = a.check(&ran.stdout, &result, base, judged);
                let mut v = a.to_json();
                v["passed"] = json!(ok);
                if !ok {
                    v["message"] = json!(why);
                }
                if let Some(Ok(j)) = judged {
                    v["verdict"] = json!({"pass": j.pass, "reason": j.reason,
                        "session": j.session, "replayed": j.replayed});
                }
                v
            })
            .collect();
        let failed_check = checks.iter().find(|c| c["passed"] == json!(false));
        let status = match (
            &ran.error,
            &first,
            ran.timed_out,
            ran.exit_code,
            failed_check,
        ) {
            (Some(_), ..) => "error",
            (_, Some(f), ..) if f["code"] == "replay_exhausted" => "missed",
            (_, Some(_), ..) => "changed",
            (_, _, true, ..) => "failed",
            (_, _, _, Some(c), _) if c != 0 => "failed",
            (.., Some(_)) => "failed",
            _ => "passed",
        };
        result["status"] = json!(status);
        result["passed"] = json!(status == "passed");
        result["assertions"] = json!(checks);
        result["divergence"] = first.unwrap_or(Value::Null);
        if let Some(e) = ran.error {
            result["error"] = json!(e);
        }
        result["replay"] = replay;
        TestResult(result)
    }
}

/// One line per test for the terminal.
pub fn line(r: &TestResult) -> String {
    let v = &r.0;
    format!(
        "{:<7} {}  ({})",
        v["status"].as_str().unwrap_or("?").to_uppercase(),
        v["name"].as_str().unwrap_or(""),
        why(v)
    )
}

fn counts(v: &Value) -> String {
    let c = &v["counts"];
    let n = |k: &str| c[k].as_u64().unwrap_or(0);
    format!(
        "{} exact, {} tolerated, {} live, {} missed",
        n("exact"),
        n("tolerated"),
        n("live"),
        n("missed")
    )
}

/// What a test's verdict rests on, in a line.
fn why(v: &Value) -> String {
    if let Some(e) = v["error"].as_str() {
        return e.to_owned();
    }
    let d = &v["divergence"];
    if !d.is_null() {
        let diffs: Vec<&str> = d["differences"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).take(5).collect())
            .unwrap_or_default();
        return format!(
            "{}; first divergence: call {} (recorded turn {}, call #{}) {}{}",
            counts(v),
            d["call"],
            d["turn"],
            d["recorded_call"],
            d["code"].as_str().unwrap_or(""),
            if diffs.is_empty() {
                String::new()
            } else {
                format!(" at {}", diffs.join(", "))
            }
        );
    }
    if v["timed_out"] == json!(true) {
        return format!("{}; the program timed out", counts(v));
    }
    if let Some(c) = v["exit_code"].as_i64().filter(|c| *c != 0) {
        return format!("{}; the program exited {c}", counts(v));
    }
    let failed: Vec<String> = v["assertions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["passed"] == json!(false))
        .map(|a| {
            format!(
                "{}: {}",
                a["kind"].as_str().unwrap_or(""),
                a["message"].as_str().unwrap_or("")
            )
        })
        .collect();
    if failed.is_empty() {
        counts(v)
    } else {
        format!("{}; {}", counts(v), failed.join("; "))
    }
}

/// The one JSON document of a run.
pub fn document(results: &[TestResult], took: Duration) -> Value {
    let passed = results
        .iter()
        .filter(|r| r.0["passed"] == json!(true))
        .count();
    json!({
        "tests": results.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        "passed": passed,
        "failed": results.len() - passed,
        "duration_ms": took.as_secs_f64() * 1000.0,
    })
}

/// Runs kept in `$CONVO_HOME/test-runs` (the oldest removed past it).
const KEPT_RUNS: usize = 200;

/// Keeps the run's report as `HOME/test-runs/MS-PID.json` (MS the run's
/// start), where `convo serve`'s `/tests` page finds it, and removes the
/// oldest past [`KEPT_RUNS`]. A home that cannot be written only warns.
pub fn keep(home: &Path, started_ms: i64, doc: &Value) {
    let dir = home.join("test-runs");
    let file = dir.join(format!("{started_ms}-{}.json", std::process::id()));
    let wrote = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, doc.to_string()));
    if let Err(e) = wrote {
        eprintln!(
            "note: the run's report was not kept in {}: {e}",
            convo_core::text::visible(
                &dir.display().to_string(),
                convo_core::text::Newlines::Escape
            )
        );
        return;
    }
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut runs: Vec<std::path::PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    runs.sort();
    for old in runs.iter().take(runs.len().saturating_sub(KEPT_RUNS)) {
        let _ = std::fs::remove_file(old);
    }
}

/// `N passed, M failed (T s)`.
pub fn totals(doc: &Value) -> String {
    let mut s = format!(
        "convo test: {} passed, {} failed ({:.1} s)",
        doc["passed"],
        doc["failed"],
        doc["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0
    );
    if let Some(c) = doc.get("comparison") {
        s += &format!(
            "; against the baseline: {} unchanged, {} improved, {} regressed",
            c["unchanged"], c["improved"], c["regressed"]
        );
    }
    s
}

/// Reads a previous `--json` report.
pub fn read_baseline(path: &Path) -> CmdResult<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CommandError::user(format!("--compare {}: cannot read: {e}", path.display()))
    })?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| CommandError::user(format!("--compare {}: not JSON: {e}", path.display())))?;
    if !v["tests"].is_array() {
        return Err(CommandError::user(format!(
            "--compare {}: not a `convo test --json` report (no `tests`)",
            path.display()
        )));
    }
    Ok(v)
}

/// Per test: `unchanged`, `improved`, `regressed` (or `new`), against
/// the baseline's test of the same name; a failing test improves or
/// regresses by its missed and changed calls.
pub fn compare(doc: &mut Value, baseline: &Value) {
    let old: BTreeMap<String, Value> = baseline["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["name"].as_str()?.to_owned(), t.clone())))
        .collect();
    let bad = |t: &Value| {
        let c = &t["counts"];
        c["missed"].as_u64().unwrap_or(0) + c["live"].as_u64().unwrap_or(0)
    };
    let mut tally: BTreeMap<&str, u64> = [
        ("unchanged", 0),
        ("improved", 0),
        ("regressed", 0),
        ("new", 0),
    ]
    .into();
    for t in doc["tests"].as_array_mut().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or("").to_owned();
        let now = t["passed"] == json!(true);
        let verdict = match old.get(&name) {
            None if now => "new",
            None => "regressed",
            Some(o) => match (o["passed"] == json!(true), now) {
                (true, true) => "unchanged",
                (false, true) => "improved",
                (true, false) => "regressed",
                (false, false) => match bad(t).cmp(&bad(o)) {
                    std::cmp::Ordering::Less => "improved",
                    std::cmp::Ordering::Greater => "regressed",
                    std::cmp::Ordering::Equal => "unchanged",
                },
            },
        };
        *tally.entry(verdict).or_default() += 1;
        t["comparison"] = json!(verdict);
    }
    doc["comparison"] = json!(tally);
}

/// Text for JUnit XML: the one HTML escaper ([`convo_formats::html::escape`],
/// whose entities XML reads too), after the characters XML 1.0 cannot
/// carry at all are replaced.
fn xml(s: &str) -> String {
    let valid: String = s
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' => c,
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => '\u{FFFD}',
            c => c,
        })
        .collect();
    convo_formats::html::escape(&valid)
}

/// What a failing test's report body says: the first divergence's diff,
/// or the failed assertions, or the program's exit.
fn failure_body(v: &Value) -> String {
    let d = &v["divergence"];
    if let Some(diff) = d["diff"].as_str() {
        return diff.to_owned();
    }
    let mut s = why(v);
    if let Some(err) = v["stderr"].as_str().filter(|e| !e.is_empty()) {
        s += "\n--- stderr ---\n";
        s += err;
    }
    s
}

/// The JUnit XML report: one `testsuite`, one `testcase` per test, a
/// `failure` naming the first divergence (its diff in the body), an
/// `error` for a test that could not run.
pub fn junit(doc: &Value) -> String {
    let tests = doc["tests"].as_array().cloned().unwrap_or_default();
    let secs = |v: &Value| v["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    let errors = tests.iter().filter(|t| t["status"] == "error").count();
    let failures = tests
        .iter()
        .filter(|t| t["passed"] == json!(false) && t["status"] != "error")
        .count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out += &format!(
        "<testsuites name=\"convo test\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{:.3}\">\n",
        tests.len(),
        secs(doc)
    );
    out += &format!(
        "  <testsuite name=\"convo test\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\" time=\"{:.3}\">\n",
        tests.len(),
        secs(doc)
    );
    for t in &tests {
        let name = xml(t["name"].as_str().unwrap_or(""));
        let class = xml(&format!("convo.{}", t["recording"].as_str().unwrap_or("")));
        out += &format!(
            "    <testcase name=\"{name}\" classname=\"{class}\" time=\"{:.3}\"",
            secs(t)
        );
        let status = t["status"].as_str().unwrap_or("");
        if status == "passed" {
            out += "/>\n";
            continue;
        }
        out += ">\n";
        let tag = if status == "error" {
            "error"
        } else {
            "failure"
        };
        out += &format!(
            "      <{tag} type=\"{}\" message=\"{}\">{}</{tag}>\n",
            xml(status),
            xml(&why(t)),
            xml(&failure_body(t))
        );
        if let Some(s) = t["stdout"].as_str().filter(|s| !s.is_empty()) {
            out += &format!("      <system-out>{}</system-out>\n", xml(s));
        }
        out += "    </testcase>\n";
    }
    out += "  </testsuite>\n</testsuites>\n";
    out
}

fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The Markdown summary: a table of the tests, then each failure's first
/// divergence as a diff.
pub fn markdown(doc: &Value) -> String {
    let tests = doc["tests"].as_array().cloned().unwrap_or_default();
    let mut out = format!(
        "## convo test: {} passed, {} failed\n\n",
        doc["passed"], doc["failed"]
    );
    let compared = doc.get("comparison").is_some();
    out += if compared {
        "| | test | result | calls | vs baseline |\n|---|---|---|---|---|\n"
    } else {
        "| | test | result | calls |\n|---|---|---|---|\n"
    };
    for t in &tests {
        let mark = if t["passed"] == json!(true) {
            "✅"
        } else {
            "❌"
        };
        out += &format!(
            "| {mark} | {} | {} | {} |",
            md(t["name"].as_str().unwrap_or("")),
            t["status"].as_str().unwrap_or(""),
            counts(t)
        );
        if compared {
            out += &format!(" {} |", t["comparison"].as_str().unwrap_or(""));
        }
        out += "\n";
    }
    for t in tests.iter().filter(|t| t["passed"] != json!(true)) {
        out += &format!(
            "\n<details><summary>{}: {}</summary>\n\n```diff\n{}\n```\n</details>\n",
            md(t["name"].as_str().unwrap_or("")),
            md(&why(t)),
            failure_body(t).replace("```", "'''")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_subset_finds_what_breaks_it() {
        let s = json!({"type": "object", "required": ["city", "temp"],
            "properties": {"city": {"type": "string", "minLength": 2},
                           "temp": {"type": "number", "maximum": 60},
                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}}},
            "additionalProperties": false});
        let mut e = Vec::new();
        schema_errors(
            &s,
            &json!({"city": "Paris", "temp": 21.5, "tags": ["a"]}),
            "",
            &mut e,
        );
        assert!(e.is_empty(), "{e:?}");
        schema_errors(&s, &json!({"city": "P", "tags": ["c"], "x": 1}), "", &mut e);
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e.iter().any(|m| m.contains("`temp` is required")));
        assert!(e.iter().any(|m| m.starts_with("/x")));
    }

    #[test]
    fn xml_escapes_markup_and_control_characters() {
        assert_eq!(xml("a<b>&\"'\u{1}"), "a&lt;b&gt;&amp;&quot;&#39;\u{FFFD}");
        assert!(contains(
            &json!({"a": 1, "b": {"c": 2, "d": 3}}),
            &json!({"b": {"c": 2}})
        ));
        assert!(!contains(&json!({"a": 1}), &json!({"a": 2})));
    }
}
