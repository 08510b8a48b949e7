use super::{CmdResult, CommandError, Env};
use clap::Args;
use std::net::SocketAddr;
use std::process::ExitCode;

/// Serve the HTTP API, the OpenAPI document, live events and the web view.
///
/// Reads and writes the store chosen by --store / --home. Listens on
/// 127.0.0.1:7777 by default; any address that is not loopback needs
/// --token (or CONVO_TOKEN), which every request must then carry as
/// `Authorization: Bearer TOKEN` (a browser: open any page once with
/// `?token=TOKEN`, or type it into the login page). Only requests whose
/// Host is a loopback name or the listen address are answered (a web page
/// cannot reach the server by rebinding its own name to 127.0.0.1); behind
/// a reverse proxy, name it with --allow-host (docs/THREAT-MODEL.md has a
/// recipe with TLS). Ctrl-C stops accepting requests and finishes the ones
/// in flight. With --checkpoint-dir, a thread writes signed checkpoints
/// as `convo checkpoint --every-appends N --dir DIR` would, and a last one
/// when the server stops.
///
/// Examples:
///   convo serve                          # http://127.0.0.1:7777/
///   convo serve --listen 127.0.0.1:0     # any free port (printed)
///   CONVO_TOKEN=s3cret convo serve --listen 0.0.0.0:7777
///   convo serve --token s3cret --allow-host convo.example.com   # behind Caddy
///   convo serve --checkpoint-dir /mnt/offsite/convo --checkpoint-every 500
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:7777", value_name = "ADDR")]
    pub listen: String,
    /// Bearer token required on every request (needed off loopback)
    #[arg(long, env = "CONVO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Also answer to this Host name (a reverse proxy's public name; `*.example.com` for its subdomains). Repeatable
    #[arg(long = "allow-host", value_name = "NAME", env = "CONVO_ALLOW_HOST", value_delimiter = ',',
          value_parser = allow_host)]
    pub allow_host: Vec<String>,
    /// Largest request body accepted, in MiB
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub max_body_mib: usize,
    /// Do not print a JSON log line per request on stderr
    #[arg(long)]
    pub quiet: bool,
    /// Write a signed checkpoint into DIR as the store grows (see `convo checkpoint --help`)
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// With --checkpoint-dir: after every N appends
    #[arg(long, value_name = "N", default_value_t = 1000, requires = "checkpoint_dir",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every: u64,
    /// With --checkpoint-dir: also every M minutes when anything changed
    #[arg(long, value_name = "M", requires = "checkpoint_dir")]
    pub checkpoint_minutes: Option<f64>,
    #[command(flatten)]
    pub upstream: UpstreamArgs,
}

pub(crate) fn allow_host(s: &str) -> Result<String, String> {
    convo_runtime::security::Hosts::check_name(s).map(|()| s.trim().to_owned())
}

/// The recording proxy's upstreams (see `convo proxy --help`).
#[derive(Args, Debug)]
pub struct UpstreamArgs {
    /// Mount the recording proxy under /v1 and /s/SESSION/BRANCH/v1, forwarding to this OpenAI-compatible URL
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// Forward Anthropic calls (/v1/messages, or an anthropic-version header) to this URL
    #[arg(long, value_name = "URL")]
    pub anthropic_upstream: Option<String>,
    /// Send the key in this environment variable to --upstream: on every call with --token
    /// (clients then use the token as their API key), else when a client sends none
    #[arg(long, value_name = "VAR")]
    pub upstream_key_env: Option<String>,
    /// Send the key in this environment variable to --anthropic-upstream: on every call with
    /// --token, else when a client sends none
    #[arg(long, value_name = "VAR")]
    pub anthropic_key_env: Option<String>,
    /// Seconds to wait for an upstream to connect or send its next byte
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub upstream_timeout: u64,
    /// Keep at most this many MiB of one answer in the record (the client still gets all of it)
    #[arg(long, default_value_t = 32, value_name = "MIB")]
    pub record_limit_mib: usize,
    /// Answer calls from this recorded timeline (SESSION[:BRANCH]) instead of an upstream
    #[arg(long, value_name = "SESSION[:BRANCH]")]
    pub replay: Option<String>,
    /// With --replay: the timeline to replay, --replay then being the session whatever its title holds (colons included)
    #[arg(long, value_name = "BRANCH", requires = "replay")]
    pub replay_branch: Option<String>,
    /// With --replay: leave this JSON pointer out when matching calls (/body/temperature, /headers/openai-beta, /body/input/*/id: `*` is every element); repeatable
    #[arg(long, value_name = "POINTER", requires = "replay")]
    pub match_ignore: Vec<String>,
    /// With --replay: answer a call again when every recorded call matching it was already answered
    #[arg(long, requires = "replay")]
    pub replay_repeats: bool,
    /// With --replay: match calls exactly (no volatile difference tolerated: ids, durations, temp paths)
    #[arg(long, requires = "replay")]
    pub strict: bool,
    /// With --replay: write the replay report (JSON: counts, every call's outcome) to FILE at shutdown
    #[arg(long, value_name = "FILE", requires = "replay")]
    pub report: Option<std::path::PathBuf>,
    /// With --replay: exit 1 at shutdown when a call missed or went live
    #[arg(long, requires = "replay")]
    pub fail_on_miss: bool,
    /// Replay streams at once (fast) or at their recorded pace (recorded)
    #[arg(long, default_value = "fast", value_parser = ["fast", "recorded"], requires = "replay")]
    pub pace: String,
    /// A replayed call that does not match: fail with a JSON error, or go live on a forked timeline
    #[arg(long, default_value = "error", value_parser = ["error", "live"], requires = "replay")]
    pub on_miss: String,
}

impl UpstreamArgs {
    fn any(&self) -> bool {
        self.upstream.is_some() || self.anthropic_upstream.is_some() || self.replay.is_some()
    }

    fn config(&self) -> CmdResult<convo_proxy::ProxyConfig> {
        let key = |var: &Option<String>| -> CmdResult<Option<String>> {
            match var {
                None => Ok(None),
                Some(v) => std::env::var(v).map(Some).map_err(|_| {
                    CommandError::user(format!("environment variable `{v}` is not set"))
                        .with_hint("export it, or let clients send their own key")
                }),
            }
        };
        let mut c = convo_proxy::ProxyConfig::new(self.upstream.clone());
        c.anthropic_upstream = self.anthropic_upstream.clone();
        c.upstream_key = key(&self.upstream_key_env)?;
        c.anthropic_key = key(&self.anthropic_key_env)?;
        c.timeout = std::time::Duration::from_secs(self.upstream_timeout.max(1));
        c.record_limit = Some(self.record_limit_mib.saturating_mul(1 << 20));
        if let Some(r) = &self.replay {
            let mut spec = match &self.replay_branch {
                Some(b) => convo_proxy::replay::ReplaySpec::with_branch(r, b),
                None => convo_proxy::replay::ReplaySpec::parse(r),
            }
            .map_err(|e| {
                CommandError::user(e).with_hint(
                    "give SESSION or SESSION:BRANCH, or SESSION and --replay-branch BRANCH",
                )
            })?;
            spec.matcher = convo_proxy::replay::Matcher::new(&self.match_ignore)
                .map_err(CommandError::user)?;
            spec.repeats = self.replay_repeats;
            spec.matcher.strict = self.strict;
            if self.pace == "recorded" {
                spec.pace = convo_proxy::replay::Pace::Recorded;
            }
            if self.on_miss == "live" {
                if self.upstream.is_none() && self.anthropic_upstream.is_none() {
                    return Err(CommandError::user(
                        "--on-miss live needs an upstream to go live to",
                    )
                    .with_hint("add --upstream URL"));
                }
                spec.on_miss = convo_proxy::replay::OnMiss::Live;
            }
            c.replay = Some(spec);
        }
        Ok(c)
    }
}

pub fn run(env: &Env, a: ServeArgs) -> CmdResult {
    run_server(env, a, Surface::Serve)
}

pub use convo_server::Surface;

/// `convo serve`, `convo proxy` or `convo otel`: the arguments made into
/// [`convo_server::Surfaces`], served by [`convo_server::launch`] (the one
/// server assembly) until Ctrl-C or SIGTERM, with the checkpointer beside.
pub fn run_server(env: &Env, a: ServeArgs, surface: Surface) -> CmdResult {
    if surface == Surface::Proxy && !a.upstream.any() {
        return Err(CommandError::user("convo proxy needs an upstream")
            .with_hint("pass --upstream URL (OpenAI-compatible) and/or --anthropic-upstream URL, or --replay SESSION"));
    }
    let proxy = if a.upstream.any() {
        Some(a.upstream.config()?)
    } else {
        None
    };
    let addr: SocketAddr = a.listen.parse().map_err(|e| {
        CommandError::user(format!("--listen `{}` is not an address: {e}", a.listen))
            .with_hint("give IP:PORT, e.g. 127.0.0.1:7777")
    })?;
    let mut config = convo_runtime::Config::new(env.store_url.clone());
    config.token = a.token.filter(|t| !t.is_empty());
    config.body_limit = a.max_body_mib.max(1) * 1024 * 1024;
    config.log_requests = !a.quiet;
    config.allow_hosts = a.allow_host;
    // Refused before anything is started (launch checks the bound address
    // again, the same way).
    convo_server::check_listen(&addr, &config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CommandError::user(format!("cannot start the server runtime: {e}")))?;
    let checkpointer = match &a.checkpoint_dir {
        None => None,
        Some(dir) => Some(start_checkpointer(
            env,
            dir,
            a.checkpoint_every,
            a.checkpoint_minutes,
        )?),
    };
    let surfaces = convo_server::Surfaces {
        config,
        surface,
        proxy,
        announce: true,
        // The web view lists the runs `convo test` kept in the same home.
        test_runs: Some(env.home.join("test-runs")),
    };
    let stopped = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| CommandError::user(format!("cannot listen on {addr}: {e}")))?;
        let shutdown = convo_server::Shutdown::signals(surface.name());
        convo_server::launch(listener, surfaces, shutdown)
            .await
            .map_err(CommandError::from)
    });
    if let Some((stop, thread)) = checkpointer {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        match thread.join() {
            Ok(Ok(n)) => eprintln!("convo {}: {n} checkpoint(s) written", surface.name()),
            // Said when it happened.
            Ok(Err(_)) => {}
            Err(_) => eprintln!("convo {}: the checkpoint thread failed", surface.name()),
        }
    }
    let stopped = stopped?;
    for line in &stopped.warnings {
        eprintln!("convo {}: {line}", surface.name());
    }
    if let Some(line) = &stopped.replay_summary {
        eprintln!("{line}");
    }
    replay_verdict(&a.upstream, stopped.replay_report.as_ref())
}

/// `--report FILE` written, and with `--fail-on-miss` exit 1 when a call
/// missed or went live.
fn replay_verdict(u: &UpstreamArgs, report: Option<&serde_json::Value>) -> CmdResult {
    let Some(report) = report else {
        return Ok(ExitCode::SUCCESS);
    };
    if let Some(path) = &u.report {
        let text = serde_json::to_string_pretty(report).unwrap_or_default() + "\n";
        std::fs::write(path, text).map_err(|e| {
            CommandError::user(format!("--report {}: cannot write: {e}", path.display()))
        })?;
    }
    let passed = report["passed"].as_bool().unwrap_or(false);
    Ok(if u.fail_on_miss && !passed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

type Checkpointer = (
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<CmdResult<u64>>,
);

/// Starts the automatic checkpointer on its own connection to the store:
/// the loop of `convo checkpoint --every-appends`, until the flag is set.
fn start_checkpointer(
    env: &Env,
    dir: &std::path::Path,
    every: u64,
    minutes: Option<f64>,
) -> CmdResult<Checkpointer> {
    use super::checkpoint::{Every, Sinks, default_key, follow_loop, load_or_make_key};
    let period = match minutes {
        Some(m) if !(m.is_finite() && m > 0.0) => {
            return Err(CommandError::user(format!(
                "--checkpoint-minutes {m}: give a number of minutes above 0"
            )));
        }
        m => m.map(|m| std::time::Duration::from_secs_f64(m * 60.0)),
    };
    let key = load_or_make_key(&default_key(env))?;
    // The store the server is about to serve, made (and migrated) first:
    // the checkpointer only reads it.
    drop(convo_store::Store::open(&env.store_url)?);
    let mut conn = convo_runtime::Reconnecting::open(&env.store_url, convo_store::Access::Read)?;
    let sinks = Sinks {
        dir: Some(dir.to_owned()),
        lines: true,
        ..Sinks::default()
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("convo-checkpoints".into())
        .spawn(move || {
            let r = follow_loop(
                &mut conn,
                &key,
                &sinks,
                Every {
                    appends: Some(every),
                    period,
                },
                &flag,
            );
            if let Err(e) = &r {
                eprintln!("convo: checkpoints stopped: {}", e.message_text());
            }
            r
        })
        .map_err(|e| CommandError::user(format!("cannot start the checkpoint thread: {e}")))?;
    Ok((stop, thread))
}
