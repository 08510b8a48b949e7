//! The guards every request passes, on every listener (`convo serve`,
//! `convo proxy`, the harness's services server): a Host allow-list, an
//! Origin check, bearer-token auth, a CSRF defence for state-changing
//! requests, hardening headers, and one structured log line.
//!
//! - **Hosts.** Before anything else, the request's `Host` (and the
//!   authority of an absolute request URI) must name this server: a
//!   loopback name (`localhost`, `*.localhost`, `127.0.0.0/8`, `[::1]`), the
//!   listen address (any IP literal when listening on `0.0.0.0`/`[::]`), or
//!   a name given with `--allow-host` (a reverse proxy's public name;
//!   `*.example.com` allows its subdomains), with any port. Anything else is
//!   403 `forbidden`, as Jupyter does: a web page whose name was rebound to
//!   127.0.0.1 (DNS rebinding) sends its own name and never reaches a handler.
//! - **Origin.** A request carrying an `Origin` (what browsers send on
//!   cross-origin and state-changing requests) must come from this very
//!   origin (`scheme://` + this `Host`), else 403.
//! - **Auth.** When a token is configured (required off loopback), every
//!   route wants `Authorization: Bearer TOKEN` or the `convo_token` cookie.
//!   A browser exchanges `?token=TOKEN` (percent-decoded) for the cookie
//!   (HttpOnly, SameSite=Strict, `Secure` behind an HTTPS reverse proxy
//!   that says `X-Forwarded-Proto: https`) with a 303 redirect to the same
//!   URL without the token, so it leaves the address bar and history. A
//!   browser without the cookie (`Accept: text/html`) gets a small login
//!   page instead of the JSON 401 (its stylesheet, like the page script,
//!   is served without the token). Tokens are compared in constant time.
//! - **CSRF.** A state-changing request (anything but GET/HEAD/OPTIONS) is
//!   refused when the browser says it comes from another site
//!   (`Sec-Fetch-Site: cross-site|same-site`), and when its body has one of
//!   the three content types a cross-site HTML form can send without a CORS
//!   preflight (`application/x-www-form-urlencoded`, `multipart/form-data`,
//!   `text/plain`). No CORS headers are ever sent, so a preflight fails.
//!   Routes for API clients ([`Guard::api_clients`]: the proxy's `/v1`)
//!   take any content type (SDKs upload files and audio as
//!   `multipart/form-data`) and the token as `x-api-key` too (the Anthropic
//!   SDK's key header); a request a browser marks as cross-site is still
//!   refused there.
//! - **Headers.** Every response gets a strict Content-Security-Policy
//!   (scripts only from this server, no inline script) unless the handler
//!   set a stricter one (raw payloads and exports keep their `sandbox`),
//!   `nosniff`, `frame-ancestors 'none'` and `Referrer-Policy: no-referrer`.
//! - **Logs.** One JSON line per request on stderr: method, path (no query
//!   string: it may carry a token), status, milliseconds. Headers are never
//!   logged.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

/// What the guards need.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    /// The bearer token, when one is required.
    pub token: Option<Arc<str>>,
    /// Whether to print request log lines.
    pub log: bool,
    /// The names this server answers to.
    pub hosts: Hosts,
    /// The routes serve API clients (SDKs), not a browser: the token is
    /// also taken from `x-api-key`, and a state-changing request may have
    /// any content type (the Host, Origin and cross-site checks still apply).
    pub api_clients: bool,
}

/// The `Host` names a listener answers to (see the module docs). The
/// default allows loopback names only.
#[derive(Clone, Debug, Default)]
pub struct Hosts {
    /// The listen address, when known.
    listen: Option<IpAddr>,
    /// Exact names (lowercase, no port) and `*.suffix` patterns.
    names: Arc<Vec<String>>,
}

impl Hosts {
    /// Loopback names, `listen`'s address, and `extra` (names or
    /// `*.domain` patterns; a port given with one is ignored).
    pub fn new(listen: Option<SocketAddr>, extra: &[String]) -> Hosts {
        let names = extra
            .iter()
            .map(|n| host_name(n.trim()))
            .filter(|n| !n.is_empty())
            .collect::<Vec<_>>();
        Hosts {
            listen: listen.map(|a| a.ip()),
            names: Arc::new(names),
        }
    }

    /// Checks an allow-host value given on the command line.
    pub fn check_name(name: &str) -> Result<(), String> {
        let n = host_name(name.trim());
        let body = n.strip_prefix("*.").unwrap_or(&n);
        let ok = !body.is_empty()
            && body.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b':' | b'[' | b']')
            });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "`{}` is not a host name (give a name like convo.example.com, *.example.com or an IP address)",
                name.escape_debug()
            ))
        }
    }

    /// Whether `authority` (a `Host` header value: name or IP, maybe a
    /// port) names this server.
    pub fn allows(&self, authority: &str) -> bool {
        let name = host_name(authority);
        if name.is_empty() {
            return false;
        }
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            if ip.is_loopback() {
                return true;
            }
            match self.listen {
                Some(l) if l.is_unspecified() => return true,
                Some(l) if l == ip => return true,
                _ => {}
            }
        }
        self.names.iter().any(|n| match n.strip_prefix("*.") {
            Some(domain) => name
                .strip_suffix(domain)
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            None => *n == name,
        })
    }
}

/// The host part of an authority, lowercase, without port, userinfo or a
/// trailing dot (`[::1]` keeps its brackets).
fn host_name(authority: &str) -> String {
    let a = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if a.starts_with('[') {
        a.find(']').map_or(a, |i| &a[..=i])
    } else {
        match a.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => a,
        }
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// The Host and Origin checks alone, as one middleware, for a listener
/// with no token or CSRF rules of its own (the harness's services server).
pub async fn hosts_only(State(h): State<Hosts>, req: Request, next: Next) -> Response {
    match refuse_host_origin(&h, &req) {
        None => next.run(req).await,
        Some(res) => res,
    }
}

/// The refusal of a request whose `Host` (or absolute URI) is not
/// allowed, or whose `Origin` is another origin; `None` when it may pass.
fn refuse_host_origin(hosts: &Hosts, req: &Request) -> Option<Response> {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned());
    let authority = req.uri().authority().map(|a| a.as_str().to_owned());
    if host.is_none() && authority.is_none() {
        return Some(error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "the request has no Host header",
        ));
    }
    for h in host.iter().chain(authority.iter()) {
        if !hosts.allows(h) {
            return Some(error(
                StatusCode::FORBIDDEN,
                "forbidden",
                &format!(
                    "this server does not answer to the host `{}`: pass --allow-host NAME to allow it (a reverse proxy's name)",
                    convo_core::text::visible(h, convo_core::text::Newlines::Escape)
                ),
            ));
        }
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let here = host.or(authority).unwrap_or_default();
        let same = origin.split_once("://").is_some_and(|(scheme, rest)| {
            matches!(scheme, "http" | "https") && rest.eq_ignore_ascii_case(&here)
        });
        if !same {
            return Some(error(
                StatusCode::FORBIDDEN,
                "forbidden",
                "refusing a request from another origin",
            ));
        }
    }
    None
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
        .map(|(_, v)| percent_decode(v, false))
}

fn query_token(req: &Request) -> Option<String> {
    req.uri().query().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "token")
            .map(|(_, v)| percent_decode(v, true))
    })
}

/// The middleware: hosts, origin, auth, CSRF, headers, log.
pub async fn guard(State(g): State<Guard>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let mut set_cookie = None;
    let refused = refuse_host_origin(&g.hosts, &req)
        .or_else(|| authenticate(&g, &req, &mut set_cookie))
        .or_else(|| {
            if matches!(method, Method::GET | Method::HEAD | Method::OPTIONS) {
                return None;
            }
            let why = csrf_check(req.headers(), g.api_clients).err()?;
            Some(error(StatusCode::FORBIDDEN, "forbidden", &why))
        });
    let mut res = match refused {
        Some(res) => res,
        None => next.run(req).await,
    };
    harden(res.headers_mut(), set_cookie);
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

/// The token check, when the server has a token (and the path is not one
/// of the public assets): `None` lets the request through, noting in
/// `set_cookie` the cookie a token given in the URL is exchanged for;
/// else the answer (the exchange's redirect, the login page, a 401).
fn authenticate(g: &Guard, req: &Request, set_cookie: &mut Option<String>) -> Option<Response> {
    let method = req.method();
    // The embedded stylesheet and script hold nothing of the store:
    // the login page can use them before the browser has the cookie.
    let public =
        method == Method::GET && matches!(req.uri().path(), "/assets/app.css" | "/assets/app.js");
    let token = g.token.as_ref().filter(|_| !public)?;
    let headers = req.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let from_query = query_token(req);
    let api_key = || {
        g.api_clients
            .then(|| headers.get("x-api-key")?.to_str().ok().map(str::to_owned))
            .flatten()
    };
    let given = bearer
        .or_else(api_key)
        .or_else(|| cookie_token(headers))
        .or(from_query.clone());
    match given {
        Some(t) if same(t.as_bytes(), token.as_bytes()) => {
            from_query.as_ref()?;
            let secure = headers
                .get("x-forwarded-proto")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
            *set_cookie = Some(format!(
                "convo_token={}; HttpOnly; SameSite=Strict; Path=/{}",
                cookie_escape(&t),
                if secure { "; Secure" } else { "" }
            ));
            if !matches!(*method, Method::GET | Method::HEAD) {
                return None;
            }
            // Exchange the token in the URL for the cookie, and drop it
            // from the address bar.
            let mut res = Response::new(Body::empty());
            *res.status_mut() = StatusCode::SEE_OTHER;
            if let Ok(v) = HeaderValue::from_str(&without_token(req.uri())) {
                res.headers_mut().insert(header::LOCATION, v);
            }
            Some(res)
        }
        _ => {
            if method == Method::GET && wants_html(headers) {
                return Some(login_page(from_query.is_some()));
            }
            Some(error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "this server needs a token: send `Authorization: Bearer TOKEN`",
            ))
        }
    }
}

/// The headers every answer carries (a content security policy unless it
/// has its own, no sniffing, no referrer, no framing), and the cookie a
/// token was exchanged for.
fn harden(h: &mut HeaderMap, set_cookie: Option<String>) {
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                 connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
            ),
        );
    }
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
}

/// Whether the client is a browser asking for a page.
fn wants_html(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

/// The login page a browser without the cookie gets (a 401): one token
/// field, sent as `?token=` to the same URL, which the guard exchanges for
/// the cookie.
fn login_page(wrong: bool) -> Response {
    let note = if wrong {
        "<p class=\"error\">That token is not this server's.</p>"
    } else {
        ""
    };
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>convo: sign in</title><link rel=\"stylesheet\" href=\"/assets/app.css\"></head>\
<body><main><h1>convo</h1>{note}<p>This server needs its token (the one given to \
<code>convo serve --token</code> or <code>CONVO_TOKEN</code>).</p>\
<form method=\"get\"><label>Token <input type=\"password\" name=\"token\" \
autocomplete=\"current-password\" required autofocus></label> <button type=\"submit\">Open</button></form>\
</main></body></html>\n"
    );
    let mut res = (StatusCode::UNAUTHORIZED, html).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    res
}

/// The request's path and query without its `token` parameter.
fn without_token(uri: &axum::http::Uri) -> String {
    let rest: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && kv.split('=').next() != Some("token"))
        .collect();
    if rest.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), rest.join("&"))
    }
}

/// A token as a cookie value: bytes a cookie cannot hold are
/// percent-encoded (and decoded again when read).
fn cookie_escape(t: &str) -> String {
    let mut out = String::new();
    for b in t.bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\' | b'%') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (and `+` as a space, as forms send it).
fn percent_decode(s: &str, plus: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                match u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
                {
                    Ok(v) => {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' if plus => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `any_type`: the content-type rule is off (routes for API clients).
fn csrf_check(h: &HeaderMap, any_type: bool) -> Result<(), String> {
    if let Some(site) = h.get("sec-fetch-site").and_then(|v| v.to_str().ok())
        && !matches!(site, "same-origin" | "none")
    {
        return Err(format!(
            "refusing a state-changing request from another site (Sec-Fetch-Site: {site})"
        ));
    }
    if !any_type && let Some(ct) = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
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
