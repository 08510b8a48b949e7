use super::serve::{ServeArgs, Surface, UpstreamArgs, run_server};
use super::{CmdResult, CommandError, Env};
use clap::Args;

/// Receive OpenTelemetry GenAI telemetry: a standalone OTLP/HTTP receiver.
///
/// Serves only `POST /v1/traces` and `POST /v1/logs` (protobuf or JSON,
/// gzip), the routes `convo serve` also has, behind the same guards (Host
/// allow-list, --token off loopback, body limit). Point any OTLP exporter
/// at it unchanged; each conversation becomes a session (docs/OTEL.md).
/// Listens on 127.0.0.1:4318, OTLP/HTTP's usual port.
///
/// Examples:
///   convo otel                                   # http://127.0.0.1:4318
///   OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python my_agent.py
///   convo otel --listen 127.0.0.1:0              # any free port (printed)
///   CONVO_TOKEN=s3cret convo otel --listen 0.0.0.0:4318
///   OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20s3cret python my_agent.py
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct OtelArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1:4318", value_name = "ADDR")]
    pub listen: String,
    /// Bearer token required on every request (needed off loopback)
    #[arg(long, env = "CONVO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Also answer to this Host name (a reverse proxy's public name). Repeatable
    #[arg(long = "allow-host", value_name = "NAME", env = "CONVO_ALLOW_HOST", value_delimiter = ',',
          value_parser = super::serve::allow_host)]
    pub allow_host: Vec<String>,
    /// Largest export request accepted, in MiB (compressed, and again inflated)
    #[arg(long, default_value_t = 64, value_name = "MIB")]
    pub max_body_mib: usize,
    /// Do not print a JSON log line per request on stderr
    #[arg(long)]
    pub quiet: bool,
}

pub fn run(env: &Env, a: OtelArgs) -> CmdResult {
    // No upstream: the proxy's options at their defaults (clap's, so they
    // are said once).
    let upstream = {
        use clap::FromArgMatches;
        let cmd = <UpstreamArgs as Args>::augment_args(clap::Command::new("otel"));
        let m = cmd
            .try_get_matches_from(["otel"])
            .map_err(|e| CommandError::user(e.to_string()))?;
        UpstreamArgs::from_arg_matches(&m).map_err(|e| CommandError::user(e.to_string()))?
    };
    let serve = ServeArgs {
        listen: a.listen,
        token: a.token,
        allow_host: a.allow_host,
        max_body_mib: a.max_body_mib,
        quiet: a.quiet,
        checkpoint_dir: None,
        checkpoint_every: 1000,
        checkpoint_minutes: None,
        upstream,
    };
    run_server(env, serve, Surface::Otel)
}
