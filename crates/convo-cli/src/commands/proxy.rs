use super::serve::{ServeArgs, Surface, run_server};
use super::{CmdResult, Env};
use clap::Args;

/// Record every LLM call a program makes: serve an OpenAI- and
/// Anthropic-compatible proxy that forwards to --upstream and records each
/// call on a timeline.
///
/// Point the program's base URL at it. Calls under /v1 are threaded by
/// content (a request that continues a recorded conversation continues its
/// timeline; an edited or regenerated message forks it; anything else
/// starts a session); /s/SESSION/BRANCH/v1 (or the X-Convo-Session and
/// X-Convo-Branch headers) names where they land, SESSION being an id, a
/// unique prefix or a title (a new title creates the session). Any body
/// passes (JSON, file and audio uploads) up to --max-body-mib.
///
/// Keys are never recorded. Without --token, client keys are passed
/// through. With --token (virtual keys), clients send the token as their
/// API key, the proxy never forwards it, and the upstream gets the key in
/// --upstream-key-env / --anthropic-key-env.
///
/// Examples:
///   convo proxy --upstream https://api.openai.com/v1
///   OPENAI_BASE_URL=http://127.0.0.1:7777/s/my-run/main/v1 python my_agent.py
///   CONVO_TOKEN=t0k convo proxy --upstream https://api.openai.com/v1 --upstream-key-env OPENAI_API_KEY
///   OPENAI_API_KEY=t0k OPENAI_BASE_URL=http://127.0.0.1:7777/v1 python my_agent.py
///   convo proxy --upstream http://localhost:11434/v1 --anthropic-upstream https://api.anthropic.com
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub server: ServeArgs,
}

pub fn run(env: &Env, a: ProxyArgs) -> CmdResult {
    run_server(env, a.server, Surface::Proxy)
}
