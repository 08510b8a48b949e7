use super::test_judge::{self as judge, JudgeConfig};
use super::test_report::{self as report, Assertion, TestResult};
use super::{CmdResult, CommandError, Env};
use clap::Args;
use convo_proxy::replay::{Matcher, OnMiss, ReplaySpec};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Test a program against a recording: replay its LLM calls, check every call.
///
/// Starts a proxy replaying SESSION[:BRANCH] (nothing goes upstream), runs
/// the command after -- with OPENAI_BASE_URL and ANTHROPIC_BASE_URL
/// pointing at it (and OPENAI_API_KEY / ANTHROPIC_API_KEY set when unset),
/// and checks every call it makes against the recording: exact, tolerated
/// (only volatile values differ: ids, durations, timestamps, temp paths;
/// each named by its JSON pointer), or changed. Then the assertions on
/// what the program printed. Exit 0 when every test passed, 1 when a call
/// changed or missed or an assertion failed, 2 on a usage error.
///
/// Without SESSION, runs the tests of --file (convo.toml by default):
///
///   [[test]]
///   name = "weather agent"
///   recording = "weather:main"
///   command = ["python3", "agent.py"]      # or one string, run by sh -c
///   env = { CITY = "Paris" }
///   match_ignore = ["/body/temperature"]
///   [[test.expect]]
///   contains = "sunny"                      # or equals, regex, json_schema,
///                                           # tool (+ args), command
///   [[test.expect]]
///   judge = "says the weather in Paris"     # an LLM judge (+ model)
///   [test.mcp]                              # MCP servers the program starts
///   fs = ["npx", "@modelcontextprotocol/server-filesystem", "/tmp"]
///
///   [judge]                                 # where judges are asked
///   upstream = "https://api.openai.com/v1"  # (--judge-upstream)
///   model = "gpt-4o-mini"                   # (--judge-model)
///
/// A judge's verdict is recorded through convo's proxy (a session titled
/// convo-judge:HASH per question) and replayed on the next run: the judge
/// is asked only when the output changed, and never without an upstream.
///
/// MCP servers (`mcp`, or --mcp NAME=CMD) are answered from the recording
/// (`convo mcp wrap --replay`), never started: the program finds their
/// configuration, `{"mcpServers": {NAME: {"command": …}}}` as Claude Code,
/// Cursor and the SDKs read it, in the file $CONVO_MCP_CONFIG
/// (`claude -p … --mcp-config "$CONVO_MCP_CONFIG"`).
///
/// With --on-change live, the first call that differs goes to --upstream
/// on a fork of the recording (`live-N`), and so does every call after it:
/// the changed program runs to the end and its new run is kept for review.
/// --compare BASELINE (a previous --json report) says per test whether it
/// is unchanged, improved or regressed; the exit code is then 1 only when
/// a test regressed.
///
/// Examples:
///   convo test weather -- python3 agent.py
///   convo test weather:main --junit report.xml --summary "$GITHUB_STEP_SUMMARY" -- ./agent
///   convo test --file ci/convo.toml --json > now.json
///   convo test --compare baseline.json
///   convo test weather --on-change live --upstream https://api.openai.com/v1 -- ./agent
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct TestArgs {
    /// The recording: SESSION[:BRANCH] (id, unique prefix or title); without it, the tests of --file
    pub recording: Option<String>,
    /// The program and its arguments
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
    /// Read the tests from this TOML file [default: convo.toml]
    #[arg(long, short = 'f', value_name = "FILE", conflicts_with = "recording")]
    pub file: Option<PathBuf>,
    /// With a file: run only the tests whose name contains TEXT
    #[arg(long, value_name = "TEXT")]
    pub only: Option<String>,
    /// The test's name in reports [default: the recording]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Write a JUnit XML report to FILE
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Print one JSON document (the report)
    #[arg(long)]
    pub json: bool,
    /// Write a Markdown summary to FILE (a CI step summary, a pull-request comment)
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Match calls exactly (no volatile difference tolerated)
    #[arg(long)]
    pub strict: bool,
    /// Leave this JSON pointer out when matching calls (/body/temperature); repeatable
    #[arg(long, value_name = "POINTER")]
    pub match_ignore: Vec<String>,
    /// After the first changed call: fail it (error), or go live on a fork of the recording (live)
    #[arg(long, default_value = "error", value_parser = ["error", "live"])]
    pub on_change: String,
    /// With --on-change live: the OpenAI-compatible upstream
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// With --on-change live: the Anthropic upstream
    #[arg(long, value_name = "URL")]
    pub anthropic_upstream: Option<String>,
    /// Compare with a previous --json report: unchanged, improved, regressed per test
    #[arg(long, value_name = "BASELINE")]
    pub compare: Option<PathBuf>,
    /// The program is a harness agent (docs/AGENTS.md) recorded by `convo run`:
    /// replay its inputs, answer its inference and kv calls from the recording
    #[arg(long)]
    pub harness: bool,
    /// Seconds a program may run before it is stopped and its test fails
    #[arg(long, default_value_t = 600.0, value_name = "SECS")]
    pub timeout: f64,
    /// Expect the program's output to be exactly TEXT (trailing whitespace aside)
    #[arg(long, value_name = "TEXT")]
    pub expect_output: Option<String>,
    /// Expect the output to contain TEXT; repeatable
    #[arg(long, value_name = "TEXT")]
    pub expect_contains: Vec<String>,
    /// Expect the output to match this regular expression; repeatable
    #[arg(long, value_name = "REGEX")]
    pub expect_regex: Vec<String>,
    /// Expect the output to be JSON valid against the JSON schema in FILE
    #[arg(long, value_name = "FILE")]
    pub expect_schema: Vec<PathBuf>,
    /// Expect a tool call: NAME, or NAME=JSON (the arguments must contain JSON); repeatable
    #[arg(long, value_name = "NAME[=JSON]")]
    pub expect_tool: Vec<String>,
    /// Expect this shell command to exit 0 reading the test's result (JSON) on stdin
    #[arg(long, value_name = "SHELL")]
    pub expect_command: Vec<String>,
    /// An MCP server the program starts, answered from the recording
    /// (its configuration in $CONVO_MCP_CONFIG); repeatable
    #[arg(long, value_name = "NAME=CMD")]
    pub mcp: Vec<String>,
    /// Expect an LLM judge to find that the output meets CRITERION; repeatable
    #[arg(long, value_name = "CRITERION")]
    pub expect_judge: Vec<String>,
    /// Where a judge is asked when its verdict is not recorded (OpenAI-compatible;
    /// its key from CONVO_JUDGE_API_KEY or OPENAI_API_KEY)
    #[arg(long, value_name = "URL", env = "CONVO_JUDGE_UPSTREAM")]
    pub judge_upstream: Option<String>,
    /// The judge's model [default: the file's [judge] model, or gpt-4o-mini]
    #[arg(long, value_name = "MODEL", env = "CONVO_JUDGE_MODEL")]
    pub judge_model: Option<String>,
}

/// One test, from the command line or a file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    /// Its name in reports.
    #[serde(default)]
    pub name: String,
    /// SESSION[:BRANCH].
    pub recording: String,
    /// The program: argv, or one string run by `sh -c`.
    pub command: Command,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The working directory (relative to the file's folder).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// Pointers left out of matching.
    #[serde(default)]
    pub match_ignore: Vec<String>,
    /// Exact matching only.
    #[serde(default)]
    pub strict: bool,
    /// The program is a harness agent (docs/AGENTS.md), recorded by
    /// `convo run`: its inputs are sent again, its inference and kv calls
    /// answered from the recording.
    #[serde(default)]
    pub harness: bool,
    /// The assertions on what the program produced.
    #[serde(default)]
    pub expect: Vec<Assertion>,
    /// MCP servers the program starts, by name: answered from the
    /// recording (a command given as one string is split at spaces).
    #[serde(default)]
    pub mcp: BTreeMap<String, Command>,
}

/// A command: argv, or a shell line.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Command {
    /// Run as given.
    Argv(Vec<String>),
    /// Run by `sh -c`.
    Shell(String),
}

impl Command {
    pub fn argv(&self) -> Vec<String> {
        match self {
            Command::Argv(a) => a.clone(),
            Command::Shell(s) => vec!["sh".into(), "-c".into(), s.clone()],
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestFile {
    #[serde(default)]
    test: Vec<TestSpec>,
    #[serde(default)]
    judge: FileJudge,
}

/// A file's `[judge]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileJudge {
    upstream: Option<String>,
    model: Option<String>,
}

/// How every test of a run replays.
struct Shared {
    strict: bool,
    match_ignore: Vec<String>,
    live: bool,
    upstream: Option<String>,
    anthropic_upstream: Option<String>,
    timeout: Duration,
    /// The store the MCP replays read.
    store_url: String,
    judge: JudgeConfig,
}

pub fn run(env: &Env, a: TestArgs) -> CmdResult {
    let (tests, base, file_judge) = specs(&a)?;
    let live = a.on_change == "live";
    if live && a.upstream.is_none() && a.anthropic_upstream.is_none() {
        return Err(
            CommandError::user("--on-change live needs an upstream to go live to")
                .with_hint("add --upstream URL and/or --anthropic-upstream URL"),
        );
    }
    if !(a.timeout.is_finite() && a.timeout > 0.0) {
        return Err(CommandError::user(format!(
            "--timeout {}: give a number of seconds above 0",
            a.timeout
        )));
    }
    let shared = Shared {
        strict: a.strict,
        match_ignore: a.match_ignore.clone(),
        live,
        upstream: a.upstream.clone(),
        anthropic_upstream: a.anthropic_upstream.clone(),
        timeout: Duration::from_secs_f64(a.timeout),
        store_url: env.store_url.clone(),
        judge: JudgeConfig {
            upstream: a.judge_upstream.clone().or(file_judge.upstream),
            model: a.judge_model.clone().or(file_judge.model),
            key: std::env::var("CONVO_JUDGE_API_KEY")
                .or_else(|_| std::env::var("OPENAI_API_KEY"))
                .ok(),
        },
    };
    if let Some(u) = &shared.judge.upstream {
        judge::check_upstream(u)?;
    }
    let baseline = a
        .compare
        .as_deref()
        .map(report::read_baseline)
        .transpose()?;
    let pool = convo_runtime::StorePool::open(&env.store_url, 4)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CommandError::user(format!("cannot start the runtime: {e}")))?;
    let started = Instant::now();
    let mut results = Vec::new();
    for t in &tests {
        let r = rt.block_on(run_one(&pool, t, &shared, &base))?;
        if !a.json {
            eprintln!("{}", report::line(&r));
        }
        results.push(r);
    }
    let mut doc = report::document(&results, started.elapsed());
    if let Some(b) = &baseline {
        report::compare(&mut doc, b);
    }
    if let Some(path) = &a.junit {
        write(path, &report::junit(&doc))?;
    }
    if let Some(path) = &a.summary {
        append(path, &report::markdown(&doc))?;
    }
    if a.json {
        crate::output::print_json(&doc);
    } else {
        eprintln!("{}", report::totals(&doc));
    }
    let failed = match &baseline {
        Some(_) => doc["comparison"]["regressed"].as_u64().unwrap_or(0) > 0,
        None => doc["failed"].as_u64().unwrap_or(0) > 0,
    };
    Ok(if failed {
        ExitCode::from(super::error::FOUND_PROBLEM)
    } else {
        ExitCode::SUCCESS
    })
}

fn write(path: &Path, text: &str) -> CmdResult<()> {
    std::fs::write(path, text)
        .map_err(|e| CommandError::user(format!("cannot write {}: {e}", path.display())))
}

/// Appends (a CI step summary file collects several steps).
fn append(path: &Path, text: &str) -> CmdResult<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| CommandError::user(format!("cannot write {}: {e}", path.display())))
}

/// The tests to run, the folder relative paths are read from, and the
/// file's `[judge]`.
fn specs(a: &TestArgs) -> CmdResult<(Vec<TestSpec>, PathBuf, FileJudge)> {
    let here = PathBuf::from(".");
    if let Some(rec) = &a.recording {
        if a.command.is_empty() {
            return Err(
                CommandError::user("convo test SESSION needs a command to run")
                    .with_hint("add -- CMD ARGS…, e.g. convo test my-run -- python3 agent.py"),
            );
        }
        let mut expect = Vec::new();
        if let Some(t) = &a.expect_output {
            expect.push(Assertion::of("equals", Value::String(t.clone())));
        }
        for t in &a.expect_contains {
            expect.push(Assertion::of("contains", Value::String(t.clone())));
        }
        for t in &a.expect_regex {
            expect.push(Assertion::of("regex", Value::String(t.clone())));
        }
        for f in &a.expect_schema {
            expect.push(Assertion::of(
                "json_schema",
                Value::String(f.display().to_string()),
            ));
        }
        for t in &a.expect_tool {
            expect.push(Assertion::tool(t)?);
        }
        for t in &a.expect_command {
            expect.push(Assertion::of("command", Value::String(t.clone())));
        }
        for t in &a.expect_judge {
            expect.push(Assertion::of("judge", Value::String(t.clone())));
        }
        for e in &expect {
            e.check_usage(&here)?;
        }
        let spec = TestSpec {
            name: a.name.clone().unwrap_or_else(|| rec.clone()),
            recording: rec.clone(),
            command: Command::Argv(a.command.clone()),
            env: BTreeMap::new(),
            cwd: None,
            match_ignore: Vec::new(),
            strict: false,
            harness: a.harness,
            expect,
            mcp: mcp_flags(&a.mcp)?,
        };
        return Ok((vec![spec], here, FileJudge::default()));
    }
    if !a.command.is_empty() {
        return Err(CommandError::user(
            "a command after -- needs the recording to test it against",
        )
        .with_hint("convo test SESSION[:BRANCH] -- CMD ARGS…"));
    }
    let path = a
        .file
        .clone()
        .unwrap_or_else(|| PathBuf::from("convo.toml"));
    let text = std::fs::read_to_string(&path).map_err(|e| {
        CommandError::user(format!("cannot read {}: {e}", path.display()))
            .with_hint("name a recording (convo test SESSION -- CMD) or a test file (--file FILE)")
    })?;
    let file: TestFile = toml::from_str(&text)
        .map_err(|e| CommandError::user(format!("{}: {e}", path.display())))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or(here);
    let mut tests = Vec::new();
    for (i, mut t) in file.test.into_iter().enumerate() {
        if t.name.is_empty() {
            t.name = format!("{} #{}", t.recording, i + 1);
        }
        if t.command.argv().is_empty() {
            return Err(CommandError::user(format!(
                "{}: test `{}` has an empty command",
                path.display(),
                t.name
            )));
        }
        for e in &t.expect {
            e.check_usage(&base)
                .map_err(|e| e.prefixed(&format!("{}: test `{}`: ", path.display(), t.name)))?;
        }
        if a.only.as_deref().is_none_or(|o| t.name.contains(o)) {
            tests.push(t);
        }
    }
    if tests.is_empty() {
        return Err(
            CommandError::user(format!("{}: no test to run", path.display()))
                .with_hint("add [[test]] tables with name, recording and command"),
        );
    }
    Ok((tests, base, file.judge))
}

/// `--mcp NAME=CMD` flags as the `mcp` table of a test.
fn mcp_flags(flags: &[String]) -> CmdResult<BTreeMap<String, Command>> {
    let mut out = BTreeMap::new();
    for f in flags {
        let (name, cmd) = f
            .split_once('=')
            .filter(|(n, c)| !n.is_empty() && !c.trim().is_empty())
            .ok_or_else(|| {
                CommandError::user(format!("--mcp `{f}`: give NAME=COMMAND"))
                    .with_hint("e.g. --mcp 'fs=npx @modelcontextprotocol/server-filesystem /tmp'")
            })?;
        out.insert(name.to_owned(), Command::Shell(cmd.to_owned()));
    }
    Ok(out)
}

/// The replay a test runs against.
fn replay_config(t: &TestSpec, shared: &Shared) -> CmdResult<convo_proxy::ProxyConfig> {
    let mut spec = ReplaySpec::parse(&t.recording).map_err(|e| {
        CommandError::user(format!("test `{}`: {e}", t.name))
            .with_hint("give the recording as SESSION or SESSION:BRANCH")
    })?;
    let mut ignore = shared.match_ignore.clone();
    ignore.extend(t.match_ignore.iter().cloned());
    spec.matcher = Matcher::new(&ignore).map_err(CommandError::user)?;
    spec.matcher.strict = shared.strict || t.strict;
    spec.collect_tools = true;
    let mut c = convo_proxy::ProxyConfig::new(shared.upstream.clone());
    c.anthropic_upstream = shared.anthropic_upstream.clone();
    if shared.live {
        spec.on_miss = OnMiss::Live;
    }
    c.replay = Some(spec);
    Ok(c)
}

/// Runs one test: the replaying proxy on a free port, the program, the
/// assertions.
async fn run_one(
    pool: &convo_runtime::StorePool,
    t: &TestSpec,
    shared: &Shared,
    base: &Path,
) -> CmdResult<TestResult> {
    let started = Instant::now();
    if t.harness {
        if shared.live {
            return Ok(TestResult::error(
                t,
                "--on-change live is for programs calling a model through the proxy; \
                 a harness agent goes live with convo replay --live-after NODE",
            ));
        }
        let mut ignore = shared.match_ignore.clone();
        ignore.extend(t.match_ignore.iter().cloned());
        let dir = base.join(t.cwd.as_deref().unwrap_or(Path::new(".")));
        let (ran, replay) = super::test_agent::run(
            pool,
            t,
            &ignore,
            shared.strict || t.strict,
            Some(&dir),
            shared.timeout,
        )
        .await?;
        let judged = judge_all(pool, t, &ran, &shared.judge).await;
        let took = started.elapsed();
        return Ok(TestResult::finish(t, ran, replay, base, &judged, took));
    }
    let cfg = replay_config(t, shared)?;
    let proxy = match convo_proxy::Proxy::start(cfg, pool.clone(), None).await {
        Ok(p) => p,
        Err(e) => return Ok(TestResult::error(t, CommandError::from(e).message_text())),
    };
    let mut config = convo_runtime::Config::new(String::new());
    config.log_requests = false;
    let app = convo_proxy::standalone(proxy.clone(), &config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CommandError::user(format!("cannot listen on 127.0.0.1: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| CommandError::user(format!("cannot listen on 127.0.0.1: {e}")))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(convo_runtime::serve_router(listener, app, async {
        let _ = stopped.await;
    }));
    let argv = t.command.argv();
    let mut env = t.env.clone();
    let mcp = super::test_mcp::config(t, &shared.store_url)?;
    if let Some(m) = &mcp {
        env.insert(super::test_mcp::ENV.into(), m.path().display().to_string());
    }
    let cwd = t.cwd.as_ref().map(|c| base.join(c));
    let timeout = shared.timeout;
    let url = format!("http://{addr}");
    let ran = tokio::task::spawn_blocking(move || {
        report::run_program(&argv, &env, cwd.as_deref(), &url, timeout)
    })
    .await
    .map_err(|e| CommandError::user(format!("the program's runner failed: {e}")))?;
    drop(mcp);
    let _ = stop.send(());
    let _ = server.await;
    let replay = proxy.replay_report().unwrap_or(Value::Null);
    if let Err(e) = proxy.note_replay().await {
        eprintln!("convo test: the replay's counts could not be journaled: {e}");
    }
    let judged = judge_all(pool, t, &ran, &shared.judge).await;
    Ok(TestResult::finish(
        t,
        ran,
        replay,
        base,
        &judged,
        started.elapsed(),
    ))
}

/// The verdict of each judge among `t`'s assertions (None for the others).
async fn judge_all(
    pool: &convo_runtime::StorePool,
    t: &TestSpec,
    ran: &report::Ran,
    cfg: &JudgeConfig,
) -> Vec<Option<report::Judged>> {
    let mut out = Vec::with_capacity(t.expect.len());
    for a in &t.expect {
        let Some((criterion, model)) = a.judged() else {
            out.push(None);
            continue;
        };
        out.push(Some(match ran.finished_output() {
            Some(output) => judge::judge(pool, cfg, model, criterion, output).await,
            None => Err("the program did not run to its end: the judge was not asked".into()),
        }));
    }
    out
}
