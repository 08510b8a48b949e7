//! The web view: server-rendered pages (maud templates, escaped by
//! construction) plus one small script and one stylesheet embedded in the
//! binary. Nothing is loaded from anywhere else, so it works offline, and
//! the Content-Security-Policy forbids inline script, so a payload cannot
//! run even if it slipped through escaping.
//!
//! Pages: `/` (sessions, with filters and pages), `/search` (full-text
//! search over every message, with filters; hits link to their node),
//! `/sessions/{id}` (the timelines as a graph, one timeline's turns as a
//! conversation, a page of it by `cursor`, `turn` or `node`, its state,
//! fork and promote), `/sessions/{id}/nodes/{hash}/rerun` (edit a recorded
//! model request and send it again on a new fork), `/sessions/{id}/nodes/{hash}` (one node in full, the
//! state as of it), `/sessions/{id}/diff?a=&b=` (two timelines side by side
//! from their fork point). Every page has a shareable URL.
//!
//! Every string from the store (titles, agents, names, keys, values,
//! payloads) sits in its own bidirectional isolate (`<bdi>`, or
//! `unicode-bidi: isolate` / U+2068…U+2069 where HTML elements cannot go),
//! so a right-to-left override in one cannot reverse the ids and dates
//! around it.

mod comfort;
mod diff;
mod graph;
mod index;
pub(crate) mod json;
mod jump;
mod kv;
mod llm;
mod mcp;
mod node;
mod rerun;
mod search;
mod session;
pub mod share;
mod subagent;
mod testruns;
mod waterfall;

use crate::AppState;
use crate::api::{self, SessionQuery};
use crate::api::{Path, Query};
use crate::markdown;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use convo_api::{NodeView, PayloadEncoding};
use convo_core::{BranchName, DigestMap, Kind, NodeHash};
use convo_store::{BranchRow, SessionRow, Store, StoreError};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Deserialize;

const APP_JS: &str = include_str!("../../assets/app.js");
const APP_CSS: &str = include_str!("../../assets/app.css");
const VIEWER_JS: &str = include_str!("../../assets/viewer.js");
const VIEWER_CSS: &str = include_str!("../../assets/viewer.css");

/// Loads the price table (`CONVO_PRICES` or the embedded one): an error
/// names the file and what is wrong with it.
pub fn check_prices() -> Result<(), String> {
    llm::prices().map(|_| ()).map_err(str::to_owned)
}
const FIND_JS: &str = include_str!("../../assets/find.js");
/// Sets the saved theme before the page paints (the one blocking script).
const THEME_JS: &str = include_str!("../../assets/theme.js");

/// The page routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index::index))
        .route("/sessions/{session}", get(session::session_page))
        .route("/sessions/{session}/nodes/{hash}", get(node::node_page))
        .route("/sessions/{session}/diff", get(diff::diff_page))
        .route("/sessions/{session}/share", get(share::share_page))
        .route("/search", get(search::search_page))
        .route("/tests", get(testruns::list_page))
        .route("/tests/{run}", get(testruns::run_page))
        .route(
            "/sessions/{session}/nodes/{hash}/rerun",
            get(rerun::rerun_page),
        )
        .route(
            "/sessions/{session}/rerun",
            axum::routing::post(rerun::rerun),
        )
        .route("/assets/app.js", get(js))
        .route("/assets/find.js", get(find_js))
        .route("/assets/app.css", get(css))
        .route("/assets/viewer.js", get(viewer_js))
        .route("/assets/viewer.css", get(viewer_css))
        .route("/assets/theme.js", get(theme_js))
        .layer(axum::middleware::from_fn(comfort::comfort))
}

async fn theme_js() -> Response {
    asset(THEME_JS, "text/javascript; charset=utf-8")
}

async fn js() -> Response {
    asset(APP_JS, "text/javascript; charset=utf-8")
}

async fn viewer_js() -> Response {
    asset(VIEWER_JS, "text/javascript; charset=utf-8")
}

async fn viewer_css() -> Response {
    asset(VIEWER_CSS, "text/css; charset=utf-8")
}

async fn find_js() -> Response {
    asset(FIND_JS, "text/javascript; charset=utf-8")
}

async fn css() -> Response {
    asset(APP_CSS, "text/css; charset=utf-8")
}

fn asset(body: &'static str, ct: &'static str) -> Response {
    let mut r = body.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// A rendered page as an HTML response.
fn html_response(m: Markup) -> Response {
    let mut r = m.into_string().into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    r
}

fn page(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // First-strong isolates: a right-to-left override in a
                // title cannot turn the tab's text around.
                title { "\u{2068}" (title) "\u{2069} · convo" }
                script src="/assets/theme.js" {}
                link rel="stylesheet" href="/assets/app.css";
                link rel="stylesheet" href="/assets/viewer.css";
                script src="/assets/app.js" defer {}
                script src="/assets/viewer.js" defer {}
                script src="/assets/find.js" defer {}
            }
            body {
                a.skip href="#main" { "Skip to the content" }
                header.top {
                    a.brand href="/" { "convo" }
                    a.toplink href="/tests" { "Test runs" }
                    form.search action="/search" method="get" role="search" {
                        input type="search" name="q" placeholder="Search messages  ( / )" id="q" aria-label="Search every message";
                    }
                    button #theme type="button" title="Dark or light theme (t)" aria-label="Dark or light theme" { "◐" }
                    button #help-open type="button" title="Keys and help (?)" aria-label="Keys and help" { "?" }
                }
                main #main tabindex="-1" { (body) }
                dialog #help aria-labelledby="help-title" {
                    h2 #help-title { "Keys" }
                    dl.keys {
                        dt { kbd { "j" } " / " kbd { "k" } } dd { "next / previous message" }
                        dt { kbd { "o" } " or " kbd { "Enter" } } dd { "open it" }
                        dt { kbd { "f" } } dd { "fork a timeline from it" }
                        dt { kbd { "g" } " / " kbd { "G" } } dd { "first / last message" }
                        dt { kbd { "/" } } dd { "search every message" }
                        dt { kbd { "t" } } dd { "dark or light theme" }
                        dt { kbd { "?" } } dd { "this help; " kbd { "Esc" } " closes it" }
                    }
                    form method="dialog" { button #help-close type="submit" { "Close" } }
                }
                footer { "keys: j/k move · o open · f fork here · / search · t theme · ? help" }
            }
        }
    }
}

fn error_page(e: StoreError) -> Response {
    let status = convo_runtime::error::status_of(&e);
    let body = page(
        "error",
        html! { section.error { h1 { "Error" } p { (e.to_string()) } p { a href="/" { "All sessions" } } } },
    );
    (status, html_response(body)).into_response()
}

async fn run<T: Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&mut Store) -> convo_store::Result<T> + Send + 'static,
) -> Result<T, Response> {
    st.pool.run(f).await.map_err(error_page)
}

/// Node `h` (a hash or unique prefix) of session `q` with its payload:
/// the session's row, the node, its bytes; a node of another session is
/// not found.
fn session_node(
    s: &mut Store,
    q: &str,
    h: &str,
) -> convo_store::Result<(SessionRow, convo_store::StoredNode, Vec<u8>)> {
    let p = convo_core::HashPrefix::parse(h).map_err(StoreError::invalid)?;
    let row = s.find_session(q)?;
    let (n, payload) = api::node_with_payload(s, &p)?;
    if n.node.session != row.id {
        return Err(StoreError::NoNode(h.to_owned()));
    }
    Ok((row, n, payload))
}

fn short(h: &str) -> &str {
    h.get(..12).unwrap_or(h)
}

fn session_url(id: &str, branch: Option<&str>) -> String {
    match branch {
        Some(b) if b != "main" => format!("/sessions/{id}?branch={}", query_escape(b)),
        _ => format!("/sessions/{id}"),
    }
}

/// Percent-encodes a query value (branch names are ref-safe, but `+`, `&`
/// and friends must not change a URL's meaning).
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
