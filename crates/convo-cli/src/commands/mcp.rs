use super::{CmdResult, CommandError, Env};
use clap::{Args, Subcommand};
use convo_mcp::McpError;
use convo_mcp::message::{Message, Shape};
use convo_mcp::record::{self, Recorder};
use convo_mcp::replay::{Answer, McpReplay};
use convo_mcp::wrap::{self, Live, Out};
use std::process::ExitCode;

/// Record and replay the tool calls of MCP servers, and serve convo's
/// history over MCP
///
/// Examples:
///   convo mcp wrap --session my-run -- npx -y @modelcontextprotocol/server-everything
///   convo mcp wrap --session my-run --replay -- npx -y @modelcontextprotocol/server-everything
///   convo mcp serve --allow-writes
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct McpArgs {
    #[command(subcommand)]
    pub cmd: McpCmd,
}

#[derive(Subcommand, Debug)]
pub enum McpCmd {
    Wrap(WrapArgs),
    Proxy(ProxyArgs),
    Serve(ServeArgs),
}

/// Where an HTTP surface listens, and who may use it.
#[derive(Args, Debug)]
pub struct ListenArgs {
    /// Token clients must send (Authorization: Bearer TOKEN); required to
    /// listen beyond loopback
    #[arg(long, env = "CONVO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Another name clients may reach the server by (Host header), repeatable
    #[arg(long = "allow-host", value_name = "NAME", value_delimiter = ',',
          value_parser = super::serve::allow_host)]
    pub allow_host: Vec<String>,
}

/// Relay a streamable HTTP MCP server and record every message
///
/// Point the client at http://ADDR/ instead of the server's URL. POSTs,
/// their JSON or SSE answers, the GET stream, Mcp-Session-Id and
/// resumption (Last-Event-ID) pass through unchanged; each message is
/// recorded as `convo mcp wrap` records it. With --replay, requests are
/// answered from the recording as `convo mcp wrap --replay` answers them,
/// and no upstream is called. Listens on loopback unless
/// --token is given; the Host header is checked. The first stdout line is
/// the URL.
///
/// Examples:
///   convo mcp proxy --upstream http://127.0.0.1:3001/mcp --session my-run
///   convo mcp proxy --upstream https://mcp.example.com/mcp --listen 127.0.0.1:7790
///   convo mcp proxy --replay --session my-run
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ProxyArgs {
    /// The MCP server's endpoint URL
    #[arg(long, value_name = "URL", required_unless_present = "replay")]
    pub upstream: Option<String>,
    /// Answer from the recording of --session instead (no upstream)
    #[arg(long, requires = "session")]
    pub replay: bool,
    /// With --replay, the recorded server to answer as [default: the only one]
    #[arg(long, value_name = "NAME", requires = "replay")]
    pub server: Option<String>,
    /// With --replay, a JSON pointer left out when matching (/body/params/…), repeatable
    #[arg(long, value_name = "POINTER", requires = "replay")]
    pub match_ignore: Vec<String>,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:7790", value_name = "ADDR")]
    pub listen: String,
    /// Session to record into (id, unique prefix or title; a new title
    /// creates it) [default: a new session "mcp HOST"]
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Timeline to record on
    #[arg(long, value_name = "BRANCH", default_value = "main")]
    pub branch: String,
    #[command(flatten)]
    pub access: ListenArgs,
}

/// Serve convo's history to an agent as an MCP server (stdio)
///
/// Tools: list_sessions, search, read_turn, diff (two timelines) and
/// verify; with --allow-writes also fork and promote. Results are paged
/// and payloads cut, to fit a context window.
///
/// Examples:
///   convo mcp serve
///   claude --mcp-config '{"mcpServers":{"convo":{"command":"convo","args":["mcp","serve"]}}}'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// Offer the fork and promote tools, which write the store
    #[arg(long)]
    pub allow_writes: bool,
    /// Serve streamable HTTP on this address instead of stdio
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub access: ListenArgs,
}

/// Run a stdio MCP server and record every message it exchanges
///
/// Put `convo mcp wrap --session RUN --` in front of the server's command
/// in the client's MCP configuration. Each line is relayed unchanged both
/// ways; each message (initialize, tools, resources, prompts, completion,
/// the server's sampling and elicitation requests, notifications) becomes
/// a node on the session's timeline, requests answered by their
/// responses, the server named mcp:NAME. Send the run's model calls
/// through `convo proxy` under the same session (/s/RUN/main/v1) and both
/// interleave on one timeline. The server's environment is never recorded.
///
/// With --replay, requests are answered from the recording of SESSION
/// (any order) and the server is not started; a request that differs is
/// answered with a JSON-RPC error naming each JSON pointer that differs,
/// with the recorded and received values. --on-miss live starts the
/// server for those instead, recording them on a new timeline live-N.
///
/// Examples:
///   convo mcp wrap --session my-run -- npx -y @modelcontextprotocol/server-filesystem /tmp
///   convo mcp wrap --session my-run --replay -- npx -y @modelcontextprotocol/server-filesystem /tmp
///   convo mcp wrap --session my-run --replay --on-miss live -- ./my-server
///   claude --mcp-config '{"mcpServers":{"fs":{"command":"convo","args":["mcp","wrap","--session","my-run","--","mcp-server-filesystem","/tmp"]}}}'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct WrapArgs {
    /// Session to record into, or to replay (id, unique prefix or title; a
    /// new title creates it) [default: a new session "mcp PROGRAM"]
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// Timeline to record on, or to replay
    #[arg(long, value_name = "BRANCH", default_value = "main")]
    pub branch: String,
    /// Answer from the recording instead of starting the server
    #[arg(long)]
    pub replay: bool,
    /// With --replay, what a request the recording does not answer gets
    #[arg(long, value_name = "WHAT", default_value = "error", value_parser = ["error", "live"], requires = "replay")]
    pub on_miss: String,
    /// With --replay, the recorded server to answer as (its name from
    /// initialize) [default: the one started by the same command, else the
    /// only one]
    #[arg(long, value_name = "NAME", requires = "replay")]
    pub server: Option<String>,
    /// With --replay, a JSON pointer left out when matching (/body/params/…), repeatable
    #[arg(long, value_name = "POINTER", requires = "replay")]
    pub match_ignore: Vec<String>,
    /// The server's program and arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// `serve` only reads, unless it may fork and promote.
pub fn access(a: &McpArgs) -> convo_store::Access {
    match &a.cmd {
        McpCmd::Serve(s) if !s.allow_writes => convo_store::Access::Read,
        _ => convo_store::Access::Write,
    }
}

pub fn run(env: &Env, a: McpArgs) -> CmdResult {
    match a.cmd {
        McpCmd::Wrap(w) if w.replay => replay(env, w),
        McpCmd::Wrap(w) => wrap(env, w),
        McpCmd::Serve(a) => serve(env, a),
        McpCmd::Proxy(a) => proxy(env, a),
    }
}

/// Serves `routes` (given the server's config) on `addr` behind the
/// guards every convo listener has (Host check, token), until Ctrl-C or
/// SIGTERM.
fn listen(
    env: &Env,
    addr: &str,
    access: &ListenArgs,
    routes: impl FnOnce(&convo_runtime::Config) -> Result<convo_mcp::http::Router, McpError>,
) -> CmdResult<()> {
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| {
        CommandError::user(format!("--listen `{addr}` is not an address: {e}"))
            .with_hint("give IP:PORT, e.g. 127.0.0.1:7790")
    })?;
    let mut config = convo_runtime::Config::new(env.store_url.clone());
    config.token = access.token.clone().filter(|t| !t.is_empty());
    // The one check every listener goes through (off loopback: a token).
    convo_server::check_listen(&addr, &config)?;
    config.log_requests = false;
    config.allow_hosts = access.allow_host.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CommandError::user(format!("cannot start the server runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| CommandError::user(format!("cannot listen on {addr}: {e}")))?;
        let bound = listener.local_addr()?;
        config.listen = Some(bound);
        let app = convo_runtime::guarded(routes(&config)?, &config, true);
        println!("http://{bound}/");
        std::io::Write::flush(&mut std::io::stdout())?;
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
        };
        convo_runtime::serve_router(listener, app, shutdown).await?;
        Ok(())
    })
}

fn proxy_replay(env: &Env, a: &ProxyArgs) -> CmdResult {
    let branch = super::branch_name(&a.branch)?;
    let mut store = env.open()?;
    let command: Vec<String> = a
        .upstream
        .iter()
        .map(|u| convo_runtime::redact_url(u))
        .collect();
    let rp = McpReplay::load(
        &mut store,
        a.session.as_deref().unwrap_or_default(),
        &branch,
        a.server.as_deref(),
        &command,
        &a.match_ignore,
    )?;
    drop(store);
    eprintln!(
        "convo mcp proxy: replaying {} recorded requests of `{}`",
        rp.len(),
        rp.server
    );
    listen(env, &a.listen, &a.access, move |_| {
        Ok(convo_mcp::http::replay_router(rp))
    })?;
    Ok(ExitCode::SUCCESS)
}

fn proxy(env: &Env, a: ProxyArgs) -> CmdResult {
    if a.replay {
        return proxy_replay(env, &a);
    }
    let upstream = a.upstream.clone().unwrap_or_default();
    let branch = super::branch_name(&a.branch)?;
    let public = convo_runtime::redact_url(&upstream);
    let host = public
        .split("://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or("server")
        .to_owned();
    let mut store = env.open()?;
    let target = record::resolve(
        &mut store,
        a.session.as_deref(),
        &branch,
        &format!("mcp {host}"),
        super::now(),
    )?;
    eprintln!(
        "convo mcp proxy: recording {public} in session {} ({})",
        target.session, target.branch
    );
    let rec = Recorder::start(store, target, &host, false, vec![public]);
    let noter = rec.noter();
    let served = listen(env, &a.listen, &a.access, |config| {
        let relay = convo_mcp::http::HttpRelay::new(
            &upstream,
            noter,
            config.body_limit,
            config.token.is_some(),
        )?;
        Ok(convo_mcp::http::relay_router(relay))
    });
    report(rec.finish(None));
    served.map(|()| ExitCode::SUCCESS)
}

fn serve(env: &Env, a: ServeArgs) -> CmdResult {
    let store = env.open()?;
    let cfg = convo_mcp::serve::ServeConfig {
        allow_writes: a.allow_writes,
    };
    let mut server = convo_mcp::serve::Server::new(store, cfg);
    if let Some(addr) = &a.listen {
        listen(env, addr, &a.access, move |_| {
            Ok(convo_mcp::http::serve_router(server))
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let stdin = std::io::stdin();
    convo_mcp::serve::serve_stdio(&mut server, stdin.lock(), std::io::stdout())?;
    Ok(ExitCode::SUCCESS)
}

impl From<McpError> for CommandError {
    fn from(e: McpError) -> Self {
        match e {
            McpError::Store(s) => CommandError::from(s),
            other => CommandError::of_kind(other.kind(), other.to_string()),
        }
    }
}

fn program_name(argv: &[String]) -> String {
    argv.first()
        .map(|p| {
            std::path::Path::new(p)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.clone())
        })
        .unwrap_or_else(|| "server".into())
}

fn exit(code: Option<i32>) -> ExitCode {
    ExitCode::from(code.map(|c| c.clamp(0, 255) as u8).unwrap_or(1))
}

fn wrap(env: &Env, a: WrapArgs) -> CmdResult {
    let branch = super::branch_name(&a.branch)?;
    let mut store = env.open()?;
    let program = program_name(&a.command);
    let target = record::resolve(
        &mut store,
        a.session.as_deref(),
        &branch,
        &format!("mcp {program}"),
        super::now(),
    )?;
    let child = wrap::spawn(&a.command)?;
    eprintln!(
        "convo: recording MCP server `{program}` in session {} ({})",
        target.session, target.branch
    );
    let command = record::public_command(&a.command);
    let rec = Recorder::start(store, target, &program, false, command);
    // Stopped by a signal (a client shutting its servers down), the
    // server is stopped and the recording closed before the wrapper exits.
    let code = wrap::relay(
        child,
        std::io::stdin(),
        wrap::stdout_out(),
        Some(rec.noter()),
        |stopper| super::checkpoint::on_signal(move || stopper.stop()),
    )?;
    report(rec.finish(code));
    Ok(exit(code))
}

fn report(o: record::Outcome) {
    if o.failures > 0 {
        eprintln!(
            "convo: {} MCP message(s) relayed but not recorded: {}",
            o.failures,
            o.last_error.unwrap_or_default()
        );
    }
}

/// The replay loop's state: the recording, and the live server once a
/// miss started one.
struct Replaying<'a> {
    env: &'a Env,
    args: &'a WrapArgs,
    replay: McpReplay,
    out: Out,
    initialize: Option<serde_json::Value>,
    live: Option<(Live, Recorder)>,
}

impl Replaying<'_> {
    fn line(&mut self, line: &[u8]) -> Result<(), McpError> {
        let msg = Message::read(line);
        let request = matches!(msg.shape, Shape::Request { .. });
        if !request && let Some((live, _)) = &mut self.live {
            return Ok(live.forward(line)?);
        }
        if msg.method() == Some("initialize") {
            self.initialize = Some(msg.json.clone());
        }
        match self.replay.answer(&msg) {
            Answer::Miss(b) if self.args.on_miss != "live" => Ok(wrap::send(&self.out, &b)?),
            Answer::Hit(b) => {
                for note in &self.replay.notes {
                    wrap::send(&self.out, note)?;
                }
                Ok(wrap::send(&self.out, &b)?)
            }
            Answer::Miss(_) => self.go_live(line),
            Answer::Nothing => Ok(()),
        }
    }

    fn go_live(&mut self, line: &[u8]) -> Result<(), McpError> {
        if self.live.is_none() {
            let init = self.initialize.clone().ok_or_else(|| {
                McpError::Invalid("a request before `initialize` cannot go live".into())
            })?;
            let session = self.args.session.as_deref().unwrap_or_default();
            let from = super::branch_name(&self.args.branch)
                .map_err(|e| McpError::Invalid(e.message_text().to_owned()))?;
            let mut store = self
                .env
                .open()
                .map_err(|e| McpError::Invalid(e.message_text().to_owned()))?;
            let target = record::live_branch(&mut store, session, &from, super::now())?;
            eprintln!(
                "convo: replay miss: MCP server started, recording on `{}`",
                target.branch
            );
            let command = record::public_command(&self.args.command);
            let rec = Recorder::start(store, target, &self.replay.server, true, command);
            let live = Live::start(
                &self.args.command,
                &init,
                self.out.clone(),
                Some(rec.noter()),
            )?;
            self.live = Some((live, rec));
        }
        match &mut self.live {
            Some((live, _)) => Ok(live.forward(line)?),
            None => Ok(()),
        }
    }
}

fn replay(env: &Env, a: WrapArgs) -> CmdResult {
    let session = a
        .session
        .clone()
        .ok_or_else(|| CommandError::user("--replay needs --session SESSION (the recording)"))?;
    let branch = super::branch_name(&a.branch)?;
    let mut store = env.open()?;
    let rp = McpReplay::load(
        &mut store,
        &session,
        &branch,
        a.server.as_deref(),
        &a.command,
        &a.match_ignore,
    )?;
    drop(store);
    let mut r = Replaying {
        env,
        args: &a,
        replay: rp,
        out: wrap::stdout_out(),
        initialize: None,
        live: None,
    };
    let mut failed = None;
    wrap::pump(
        std::io::stdin(),
        None,
        convo_mcp::message::Dir::ToServer,
        |_| true,
        |l| match r.line(l) {
            Ok(()) => Ok(()),
            Err(e) => {
                failed = Some(e);
                Err(std::io::Error::other("stopped"))
            }
        },
    )
    .or_else(|e| if failed.is_some() { Ok(()) } else { Err(e) })?;
    eprintln!("convo: {}", r.replay.summary());
    if let Some((live, rec)) = r.live.take() {
        let code = live.stop();
        report(rec.finish(code));
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}
