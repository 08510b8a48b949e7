//! The guards every request passes: bearer-token auth, a CSRF defence for
//! state-changing requests, hardening headers, and one structured log line.
//!
//! - **Auth.** When a token is configured (required off loopback), every
//!   route wants `Authorization: Bearer TOKEN` or the `convo_token` cookie.
//!   A browser gets the cookie (HttpOnly, SameSite=Strict) by opening any
//!   page once with `?token=TOKEN`. Tokens are compared in constant time.
//! - **CSRF.** A state-changing request (anything but GET/HEAD/OPTIONS) is
//!   refused when the browser says it comes from another site
//!   (`Sec-Fetch-Site: cross-site|same-site`, or an `Origin` whose host is
//!   not this `Host`), and when its body has one of the three content types
//!   a cross-site HTML form can send without a CORS preflight
//!   (`application/x-www-form-urlencoded`, `multipart/form-data`,
//!   `text/plain`). No CORS headers are ever sent, so a preflight fails.
//! - **Headers.** Every response gets a strict Content-Security-Policy
//!   (scripts only from this server, no inline script), `nosniff`,
//!   `frame-ancestors 'none'` and `Referrer-Policy: no-referrer`.
//! - **Logs.** One JSON line per request on stderr: method, path (no query
//!   string: it may carry a token), status, milliseconds. Headers are never
//!   logged.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Instant;

/// What the guards need.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    /// The bearer token, when one is required.
    pub token: Option<Arc<str>>,
    /// Whether to print request log lines.
    pub log: bool,
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    crate::error::error_response(status, kind, message)
}

/// Constant-time equality of two byte strings.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == "convo_token")
        .map(|(_, v)| v.to_owned())
}

fn query_token(req: &Request) -> Option<String> {
    req.uri().query().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| v.to_owned())
    })
}

/// The middleware: auth, CSRF, headers, log.
pub async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut set_cookie = None;
    let res = 'res: {
        if let Some(token) = &g.token {
            let headers = req.headers();
            let bearer = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_owned);
            let from_query = query_token(&req);
            let given = bearer
                .or_else(|| cookie_token(headers))
                .or(from_query.clone());
            match given {
                Some(t) if same(t.as_bytes(), token.as_bytes()) => {
                    if from_query.is_some() {
                        set_cookie = Some(format!(
                            "convo_token={t}; HttpOnly; SameSite=Strict; Path=/"
                        ));
                    }
                }
                _ => {
                    break 'res error(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "this server needs a token: send `Authorization: Bearer TOKEN`",
                    );
                }
            }
        }
        if !matches!(method, Method::GET | Method::HEAD | Method::OPTIONS)
            && let Err(why) = csrf_check(req.headers())
        {
            break 'res error(StatusCode::FORBIDDEN, "forbidden", &why);
        }
        next.run(req).await
    };
    let mut res = res;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Some(c) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, c);
    }
    if g.log {
        let line = serde_json::json!({
            "time": jiff::Timestamp::now().to_string(),
            "method": method.as_str(),
            "path": path,
            "status": res.status().as_u16(),
            "ms": (start.elapsed().as_secs_f64() * 1000.0 * 1000.0).round() / 1000.0,
        });
        eprintln!("{line}");
    }
    res
}

fn csrf_check(h: &HeaderMap) -> Result<(), String> {
    if let Some(site) = h.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(format!(
            "refusing a state-changing request from another site (Sec-Fetch-Site: {site})"
        ));
    }
    if let Some(origin) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        let host = h
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let origin_host = origin
            .split_once("://")
            .map(|(_, rest)| rest)
            .unwrap_or(origin);
        if origin == "null" || origin_host != host {
            return Err("refusing a state-changing request from another origin".into());
        }
    }
    if let Some(ct) = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        let essence = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if matches!(
            essence.as_str(),
            "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain"
        ) {
            return Err(format!(
                "refusing a state-changing request with Content-Type {essence} (send application/json, or application/octet-stream for uploads)"
            ));
        }
    }
    Ok(())
}

/// Refuses request paths that try to climb out (`..`, encoded slashes,
/// NUL): no route maps a path to a file, but nothing odd gets that far.
pub async fn paths(req: Request<Body>, next: Next) -> Response {
    let raw = req.uri().path();
    let lower = raw.to_ascii_lowercase();
    if raw.split('/').any(|seg| seg == ".." || seg == ".")
        || lower.contains("%2e%2e")
        || lower.contains("%2f")
        || lower.contains("%5c")
        || lower.contains("%00")
        || raw.contains('\\')
    {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "the request path holds `..`, an encoded slash or a NUL",
        )
        .into_response();
    }
    next.run(req).await
}
