//! Re-run from here: edit a recorded model request and send it again.
//!
//! `GET /sessions/{id}/nodes/{hash}/rerun` shows the request's exact bytes
//! in a text box. `POST /sessions/{id}/rerun` (JSON `{"node", "body",
//! "branch"?}`, the page's script after a confirmation; the guards' CSRF
//! rules apply as to every POST) forks a new timeline from the request's
//! parent (where the request was made) and sends the edited body through
//! the recording proxy that `convo serve --upstream URL` mounts, as a
//! client of `/s/{session}/{branch}/v1/…` would: the proxy records the
//! call on the fork (into the open turn), and the page, on the new
//! timeline, shows it as it arrives. Without an upstream the page says how
//! to start one.
//!
//! An `invoke` (an agent's input, e.g. a harness session's) is re-run from
//! the command line: the page shows the `convo session fork` and `convo run`
//! commands, with a copy button.

use super::*;
use axum::http::{Request, StatusCode};
use convo_core::HashPrefix;

/// A re-run asked for by the page.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RerunRequest {
    /// The request node (hash or unique prefix).
    node: String,
    /// The request body to send (the edited JSON).
    body: String,
    /// The new timeline's name (default `rerun-N`).
    #[serde(default)]
    branch: Option<String>,
}

/// What a re-run started.
#[derive(Debug, serde::Serialize)]
struct Rerun {
    /// The new timeline.
    branch: String,
    /// Its `fork` node.
    fork: String,
    /// The page that shows it.
    url: String,
    /// Where the call was sent (the proxy's path).
    sent_to: String,
}

/// The proxy path a recorded request was made on: its diagnostics' `path`
/// (the proxy records it), else the API its body is shaped for.
fn api_path(diag: &serde_json::Value, body: &serde_json::Value) -> String {
    // Without the query (the proxy records it with keys redacted).
    if let Some(p) = diag.get("path").and_then(|p| p.as_str())
        && let Some(p) = p.split('?').next()
        && p.starts_with("/v1/")
        && !p.contains("..")
    {
        return p.to_owned();
    }
    if body.get("input").is_some() && body.get("messages").is_none() {
        "/v1/responses".into()
    } else if body.get("anthropic_version").is_some() || body.get("system").is_some() {
        "/v1/messages".into()
    } else {
        "/v1/chat/completions".into()
    }
}

/// The request headers a re-run passes on (the API's version and beta
/// switches; keys are never recorded, the proxy adds its own).
const PASSED_HEADERS: [&str; 3] = ["anthropic-version", "anthropic-beta", "openai-beta"];

/// The next free `rerun-N` name of a session.
fn free_name(branches: &[BranchRow]) -> String {
    (1..)
        .map(|n| format!("rerun-{n}"))
        .find(|name| branches.iter().all(|b| b.name.as_str() != name))
        .unwrap_or_else(|| "rerun".into())
}

/// A word for a POSIX shell: single-quoted unless plainly safe.
fn shell_word(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:@=+,".contains(&b))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

pub(super) async fn rerun_page(
    State(st): State<AppState>,
    Path((q, h)): Path<(String, String)>,
) -> Response {
    let data = run(&st, move |s| {
        let (row, n, payload) = session_node(s, &q, &h)?;
        let branches = s.branches(&row.id)?;
        Ok((row, n, payload, branches))
    })
    .await;
    let (row, n, payload, branches) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let sid = row.id.to_string();
    let hash = n.hash.to_hex();
    let r = Start {
        back: format!("/sessions/{sid}/nodes/{hash}"),
        sid,
        hash,
        title: row.title.as_deref().unwrap_or("(untitled)"),
        name: free_name(&branches),
    };
    let parent = n.node.parent.map(|p| p.to_hex());
    let text = std::str::from_utf8(&payload).ok();
    let body = match (n.node.kind, text, &parent) {
        (Kind::Request, Some(text), Some(parent)) if n.node.to != super::kv::KV => {
            let diag: serde_json::Value =
                serde_json::from_str(n.node.diagnostics.as_str()).unwrap_or_default();
            let path = serde_json::from_str(text)
                .map(|b| api_path(&diag, &b))
                .unwrap_or_else(|_| "/v1/chat/completions".into());
            model_call(&st, &r, text, parent, &path)
        }
        (Kind::Invoke, Some(text), parent) => {
            input_again(&r, text, parent.as_deref(), row.title.as_deref())
        }
        _ => html! {
            section.error {
                h1 { "Nothing to re-run here" }
                p { "Re-run works from a model request (a " code { "request" } " node recorded by the proxy) and from an agent's input (an " code { "invoke" } "); this node is a " (n.node.kind.as_str())
                    @if n.node.to == super::kv::KV || n.node.from == super::kv::KV { " of the agent's state (kv)" } "." }
                p { a href=(r.back) { "Back to the node" } }
            }
        },
    };
    html_response(page("Re-run", body))
}

/// The node a re-run starts from, and the new timeline's name.
struct Start<'a> {
    sid: String,
    hash: String,
    title: &'a str,
    back: String,
    name: String,
}

/// A model request, editable and sent again on a new fork through the
/// recording proxy.
fn model_call(st: &AppState, r: &Start<'_>, text: &str, parent: &str, path: &str) -> Markup {
    let (sid, hash, back) = (&r.sid, &r.hash, &r.back);
    html! {
        section #rerun data-session=(sid) data-node=(hash) data-path=(path) {
            h1 { "Re-run this model call" }
            p.sub {
                "Request " a.mono href=(back) { (short(hash)) } " of " a href=(session_url(sid, None)) { bdi { (r.title) } }
                " · sent on " span.mono { (path) }
            }
            p { "Edit the request below (messages, model, temperature, tools…) and send it again. A new timeline is forked from where this request was made ("
                span.mono { (short(parent)) } "), the call is recorded on it through the recording proxy, and you are taken there to watch the answer arrive." }
            label.block for="rerun-body" { "Request (the recorded bytes, exactly)" }
            textarea #rerun-body spellcheck="false" rows="18" { (text) }
            p.rerun-error #rerun-error hidden {}
            div.actions {
                label { "New timeline " input #rerun-branch type="text" value=(r.name) size="14" aria-label="New timeline's name"; }
                @match &st.upstream {
                    Some(u) => {
                        button #rerun-send type="button" { "Re-run on a new fork" }
                        span.sub { "through " bdi { (u.describe) } }
                    }
                    None => {
                        button #rerun-send type="button" disabled { "Re-run on a new fork" }
                    }
                }
                a href=(back) { "cancel" }
            }
            @if st.upstream.is_none() {
                p.notice #no-upstream {
                    "This server has no upstream to send calls to. Start it with one, e.g. "
                    code { "convo serve --upstream https://api.openai.com --upstream-key-env OPENAI_API_KEY" }
                    " (or " code { "--anthropic-upstream https://api.anthropic.com" } "), then reload this page."
                }
            }
        }
    }
}

/// An agent's input: the commands that fork a timeline from where it was
/// given and run the agent on it again (the session's first input starts
/// a new session).
fn input_again(r: &Start<'_>, text: &str, parent: Option<&str>, title: Option<&str>) -> Markup {
    let (sid, hash, back, name) = (&r.sid, &r.hash, &r.back, &r.name);
    let (fork, target) = match parent {
        Some(parent) => (
            Some(format!(
                "convo session fork {} --from {} --branch {}",
                shell_word(sid),
                short(parent),
                shell_word(name)
            )),
            format!("{} --branch {}", shell_word(sid), shell_word(name)),
        ),
        None => (
            None,
            shell_word(&format!("{} (re-run)", title.unwrap_or("untitled"))),
        ),
    };
    let run = format!(
        "convo run {target} --input {} -- AGENT-COMMAND",
        shell_word(text)
    );
    let both = match fork {
        Some(f) => format!("{f} && \\\n  {run}"),
        None => run,
    };
    html! {
        section #rerun-cli {
            h1 { "Run this input again" }
            p.sub { "Input " a.mono href=(back) { (short(hash)) } " of " a href=(session_url(sid, None)) { bdi { (r.title) } } }
            p { "An agent's turn is run by " code { "convo run" } ": fork a timeline from where this input was given and run the agent on it with the input (edit it in the command). Replace "
                code { "AGENT-COMMAND" } " with the agent's command (or use " code { "--agent-url URL" } " for a running agent); the turns appear here as they are recorded." }
            pre.copyable #rerun-command { (both) }
            button.copy type="button" data-copy="rerun-command" { "Copy" }
        }
    }
}

pub(super) async fn rerun(
    State(st): State<AppState>,
    Path(q): Path<String>,
    api::Body(raw): api::Body,
) -> Result<(StatusCode, axum::Json<serde_json::Value>), api::ApiError> {
    let r: RerunRequest = api::parse_json(&raw)?;
    let Some(upstream) = st.upstream.clone() else {
        return Err(api::ApiError::invalid(
            "this server has no upstream: start it with `convo serve --upstream URL` to re-run calls",
        ));
    };
    let body: serde_json::Value = serde_json::from_str(&r.body)
        .map_err(|e| api::ApiError::invalid(format!("the request is not JSON: {e}")))?;
    let p = api::prefix(&r.node)?;
    let wanted = r
        .branch
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(api::branch_name)
        .transpose()?;
    let (row, node, branch, fork) = st
        .pool
        .run(move |s| {
            let row = s.find_session(&q)?;
            let node = s.node(&p)?;
            if node.node.session != row.id {
                return Err(StoreError::NoNode(r.node.clone()));
            }
            if node.node.kind != Kind::Request {
                return Err(StoreError::Invalid(
                    format!(
                        "node {} is a {}, not a model request",
                        node.hash.short(),
                        node.node.kind
                    )
                    .into(),
                ));
            }
            let parent = node.node.parent.ok_or_else(|| {
                StoreError::Invalid("the request has no parent to fork from".into())
            })?;
            let branch = match wanted {
                Some(b) => b,
                None => BranchName::new(&free_name(&s.branches(&row.id)?))
                    .map_err(StoreError::invalid)?,
            };
            let from = HashPrefix::parse(&parent.to_hex()).map_err(StoreError::invalid)?;
            let fork = s.transaction(|l| l.fork(&row.id, &from, &branch, api::now()))?;
            Ok((row, node, branch, fork))
        })
        .await?;
    st.hub.poke();
    let diag: serde_json::Value =
        serde_json::from_str(node.node.diagnostics.as_str()).unwrap_or_default();
    let sid = row.id.to_string();
    let path = api_path(&diag, &body);
    let sent_to = format!("/s/{sid}/{}{path}", query_escape(branch.as_str()));
    let mut req = Request::post(&sent_to).header(header::CONTENT_TYPE, "application/json");
    for h in PASSED_HEADERS {
        if let Some(v) = diag
            .get("headers")
            .and_then(|hs| hs.get(h))
            .and_then(|v| v.as_str())
        {
            req = req.header(h, v);
        }
    }
    let req = req
        .body(axum::body::Body::from(r.body))
        .map_err(|e| api::ApiError::invalid(format!("the request cannot be sent: {e}")))?;
    // The call runs on: the page goes to the new timeline at once and sees
    // the call recorded there (a stream, when it ends).
    let mut routes = upstream.routes;
    tokio::spawn(async move {
        use tower_service::Service;
        match routes.call(req).await {
            Ok(res) => {
                // Read to the end: the proxy records a stream when it ends.
                let _ = axum::body::to_bytes(res.into_body(), usize::MAX).await;
            }
            Err(e) => match e {},
        }
    });
    let out = Rerun {
        url: session_url(&sid, Some(branch.as_str())),
        branch: branch.as_str().to_owned(),
        fork: fork.hash.to_hex(),
        sent_to,
    };
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::to_value(out).unwrap_or_default()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_when_needed() {
        assert_eq!(shell_word("ses-1a2b"), "ses-1a2b");
        assert_eq!(shell_word("it's $HOME"), r#"'it'\''s $HOME'"#);
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("a\nb"), "'a\nb'");
    }

    #[test]
    fn the_path_comes_from_the_record_or_the_body() {
        let body = serde_json::json!({"model": "m", "input": "hi"});
        assert_eq!(
            api_path(&serde_json::json!({"path": "/v1/chat/completions"}), &body),
            "/v1/chat/completions"
        );
        assert_eq!(api_path(&serde_json::json!({}), &body), "/v1/responses");
        assert_eq!(
            api_path(
                &serde_json::json!({"path": "../x"}),
                &serde_json::json!({"messages": []})
            ),
            "/v1/chat/completions"
        );
    }
}
