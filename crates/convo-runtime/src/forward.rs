//! The one upstream forwarder: the HTTP client and the header policy of
//! every call convo passes on to a model upstream, the recording proxy's
//! (`convo proxy`, `convo serve --upstream`) and the agent harness's
//! inference calls (`convo run`) alike. `http://` and `https://`
//! upstreams; answers read as they arrive ([`body`]), so a stream reaches
//! the client chunk by chunk.
//!
//! The policy:
//! - **request headers** ([`request_headers`]): the client's, less the
//!   hop-by-hop ones ([`crate::HOP_BY_HOP`]), `Accept-Encoding` (the
//!   answer is read to be recorded, so the client's own encoding is asked
//!   for by the client library, not passed on) and `X-Convo-*`; the
//!   client's key ([`convo_core::credential::is_key_header`]) dropped when
//!   it is convo's own token; a configured key added only when the client
//!   sent none;
//! - **answer headers** ([`answer_headers`]): the upstream's, less the
//!   hop-by-hop ones;
//! - **no redirects** followed, a connect timeout (at most 30 s) and a
//!   read timeout between two pieces of an answer, `TCP_NODELAY`;
//! - **errors** told without the URL ([`error_text`]): a query string may
//!   carry a key.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use futures_util::{Stream, StreamExt};
use std::time::Duration;

/// The longest wait for a connection to an upstream.
const MAX_CONNECT: Duration = Duration::from_secs(30);

/// The client every upstream call goes through (cheap to clone: its
/// connections are pooled and shared).
#[derive(Clone, Debug)]
pub struct Forwarder {
    client: reqwest::Client,
}

impl Forwarder {
    /// A forwarder that waits at most `timeout` for a connection (and
    /// never more than 30 s) and between two reads of an answer.
    pub fn new(timeout: Duration) -> Result<Forwarder, reqwest::Error> {
        Forwarder::build(timeout, Some(timeout), true)
    }

    /// A forwarder that waits at most `connect` (and never more than
    /// 30 s) for a connection and, with `read`, at most that between two
    /// reads of an answer (none for a relay whose streams may idle: an MCP
    /// server's GET stream, an agent's turn the harness times itself).
    /// `env_proxy`: whether `HTTPS_PROXY` and the like apply (an upstream
    /// model, not a local agent named exactly).
    pub fn build(
        connect: Duration,
        read: Option<Duration>,
        env_proxy: bool,
    ) -> Result<Forwarder, reqwest::Error> {
        let mut b = reqwest::Client::builder()
            .connect_timeout(connect.min(MAX_CONNECT))
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true);
        if let Some(read) = read {
            b = b.read_timeout(read);
        }
        if !env_proxy {
            b = b.no_proxy();
        }
        Ok(Forwarder { client: b.build()? })
    }

    /// The one forwarder of the process for local relays: no read
    /// timeout, no proxy from the environment (the harness's calls to its
    /// agent). Its connections are pooled between calls.
    pub fn local() -> &'static Forwarder {
        static LOCAL: std::sync::OnceLock<Forwarder> = std::sync::OnceLock::new();
        LOCAL.get_or_init(|| {
            Forwarder::build(MAX_CONNECT, None, false).unwrap_or_else(|_| Forwarder {
                client: reqwest::Client::new(),
            })
        })
    }

    /// Sends one call: `method` (an unknown one is sent as `GET`) to `url`
    /// with `headers` (as [`request_headers`] made them) and `body`. The
    /// answer's body is read later, as it arrives ([`body`]).
    pub async fn send(
        &self,
        method: &str,
        url: &str,
        headers: HeaderMap,
        body: impl Into<reqwest::Body>,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap_or(reqwest::Method::GET);
        self.client
            .request(method, url)
            .headers(headers)
            .body(body)
            .send()
            .await
    }
}

/// Whether a header is not passed on, either way: the hop-by-hop ones
/// every relay drops, and `accept-encoding`.
pub fn hop_by_hop(name: &str) -> bool {
    crate::HOP_BY_HOP.contains(&name) || name == "accept-encoding"
}

/// The client's headers as they go upstream: without hop-by-hop ones,
/// `Accept-Encoding` and `X-Convo-*`; without the client's key when
/// `drop_keys` (it is convo's token, not the upstream's); plus `key` (a
/// configured key: header name and value) when the client sent none.
/// Also the name of the key header added, if one was.
pub fn request_headers(
    client: &HeaderMap,
    drop_keys: bool,
    key: Option<&(&'static str, String)>,
) -> (HeaderMap, Option<&'static str>) {
    let mut headers = HeaderMap::with_capacity(client.len() + 1);
    let mut has_key = false;
    for (k, v) in client {
        let name = k.as_str();
        if hop_by_hop(name) || name.starts_with("x-convo-") {
            continue;
        }
        if convo_core::credential::is_key_header(name) {
            if drop_keys {
                continue;
            }
            has_key = true;
        }
        headers.append(k.clone(), v.clone());
    }
    let mut added = None;
    if !has_key
        && let Some((name, value)) = key
        && let Ok(v) = HeaderValue::from_str(value)
    {
        headers.insert(HeaderName::from_static(name), v);
        added = Some(*name);
    }
    (headers, added)
}

/// The upstream's answer headers as they go to the client (without
/// hop-by-hop ones).
pub fn answer_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(upstream.len());
    for (k, v) in upstream {
        if !hop_by_hop(k.as_str()) {
            out.append(k.clone(), v.clone());
        }
    }
    out
}

/// Whether an answer is a stream (`text/event-stream`).
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("text/event-stream"))
}

/// An answer's body as it arrives, an error as its text ([`error_text`]).
pub fn body(
    resp: reqwest::Response,
) -> impl Stream<Item = Result<Bytes, String>> + Send + Unpin + 'static {
    resp.bytes_stream().map(|r| r.map_err(error_text))
}

/// A client error and its sources on one line, without the URL (a query
/// string may carry a key).
pub fn error_text(e: reqwest::Error) -> String {
    error_chain(&e.without_url())
}

/// An error and its sources, one line (a source already said is not
/// repeated).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        let t = x.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = x.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn request_headers_drop_hop_by_hop_and_convo_headers_and_add_a_key_only_when_none_was_sent() {
        let client = headers(&[
            ("host", "127.0.0.1"),
            ("connection", "keep-alive"),
            ("accept-encoding", "gzip"),
            ("x-convo-session", "s"),
            ("content-type", "application/json"),
            ("authorization", "Bearer client"),
        ]);
        let key = ("authorization", "Bearer configured".to_owned());
        let (h, added) = request_headers(&client, false, Some(&key));
        assert_eq!(added, None);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["content-type", "authorization"]);
        assert_eq!(h["authorization"], "Bearer client");
        // The client's key is convo's token: never sent on.
        let (h, added) = request_headers(&client, true, Some(&key));
        assert_eq!(added, Some("authorization"));
        assert_eq!(h["authorization"], "Bearer configured");
        let (h, added) = request_headers(&client, true, None);
        assert_eq!(added, None);
        assert!(!h.contains_key("authorization"));
        let anthropic = ("x-api-key", "an-key".to_owned());
        let (h, added) = request_headers(&headers(&[]), false, Some(&anthropic));
        assert_eq!(added, Some("x-api-key"));
        assert_eq!(h["x-api-key"], "an-key");
    }

    #[test]
    fn answer_headers_drop_hop_by_hop_ones_and_streams_are_told_by_their_type() {
        let up = headers(&[
            ("content-type", "text/event-stream; charset=utf-8"),
            ("transfer-encoding", "chunked"),
            ("x-request-id", "r1"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ]);
        let out = answer_headers(&up);
        assert!(!out.contains_key("transfer-encoding"));
        assert_eq!(out.get_all("set-cookie").iter().count(), 2);
        assert_eq!(out["x-request-id"], "r1");
        assert!(is_event_stream(&up));
        assert!(!is_event_stream(&headers(&[(
            "content-type",
            "application/json"
        )])));
        assert!(!is_event_stream(&HeaderMap::new()));
    }
}
