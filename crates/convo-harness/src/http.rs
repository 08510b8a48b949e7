//! The harness's HTTP calls to the agent, through the one forwarder
//! (`convo_runtime::forward::Forwarder::local`: pooled for the process,
//! so connections to the agent are kept between turns; no redirects, no
//! proxy from the environment, no read timeout: the harness times turns
//! itself). Plain `http://` only (the agent is local). Inference calls go
//! through the proxy's forwarder (http or https, streamed).

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, header};

/// Where requests go: host, port and a base path (no trailing `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Target {
    /// Parses `http://host[:port][/path]` (with the URL parser reqwest uses).
    pub fn parse(url: &str) -> Result<Target, String> {
        let u = reqwest::Url::parse(url)
            .map_err(|e| format!("not a URL ({e}): expected http://HOST:PORT[/PATH]"))?;
        match u.scheme() {
            "http" => {}
            "https" => {
                return Err(
                    "https is not supported here: give a plain http:// URL (a local server or an http proxy in front of the remote one)".into(),
                );
            }
            scheme => return Err(format!("unsupported scheme `{scheme}`; use http://")),
        }
        let host = match u.host_str() {
            Some(h) if !h.is_empty() => h.trim_start_matches('[').trim_end_matches(']'),
            _ => return Err("expected http://HOST:PORT[/PATH]".into()),
        };
        if !u.username().is_empty() || u.password().is_some() {
            return Err("expected http://HOST:PORT[/PATH] (no user or password)".into());
        }
        Ok(Target {
            host: host.to_owned(),
            port: u.port().unwrap_or(80),
            path: u.path().trim_end_matches('/').to_owned(),
        })
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// An HTTP answer, read whole.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn content_type(&self) -> Option<&str> {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }
}

/// Why a call got no HTTP answer: what was tried and why it failed (the
/// root cause's words: reqwest's own say only "error sending request"),
/// the client's error kept as the source.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("cannot connect to {0}: {why}", why = root_cause(.1))]
    Connect(String, #[source] reqwest::Error),
    #[error("{0}: {why}", why = root_cause(.1))]
    Protocol(String, #[source] reqwest::Error),
}

/// The innermost error's message (`Connection refused (os error 111)`).
fn root_cause(e: &reqwest::Error) -> String {
    let mut last: &dyn std::error::Error = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// A client for one target; connections are pooled between calls.
#[derive(Debug)]
pub(crate) struct Client {
    pub target: Target,
}

impl Client {
    pub fn new(target: Target) -> Self {
        Client { target }
    }

    /// After a failure or a timeout: nothing to forget, since a call given
    /// up on (its future dropped) closes its connection instead of returning
    /// it to the pool, so the other side's late answer never reaches another
    /// call.
    pub fn reset(&mut self) {}

    /// Sends one request to `path` (appended to the target's path).
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Result<Answer, CallError> {
        self.call_streaming(method, path, headers, body, &mut |_, _, _| {})
            .await
    }

    /// Like [`Client::call`], handing each piece of the answer's body to
    /// `sink` (with the answer's headers) as it arrives.
    pub async fn call_streaming(
        &mut self,
        method: Method,
        path: &str,
        headers: &HeaderMap,
        body: Bytes,
        sink: &mut (dyn FnMut(u16, &HeaderMap, &[u8]) + Send),
    ) -> Result<Answer, CallError> {
        let t = &self.target;
        let uri = format!("{}{}", t.path, path);
        let uri = if uri.is_empty() { "/".to_owned() } else { uri };
        let url = format!("http://{}{uri}", t.authority());
        let mut resp = convo_runtime::forward::Forwarder::local()
            .send(method.as_str(), &url, headers.clone(), body)
            .await
            .map_err(|e| {
                if e.is_connect() {
                    CallError::Connect(t.authority(), e)
                } else {
                    CallError::Protocol(format!("{} {uri}", t.authority()), e)
                }
            })?;
        let status = resp.status().as_u16();
        let mut all = Vec::new();
        while let Some(data) = resp
            .chunk()
            .await
            .map_err(|e| CallError::Protocol(format!("reading the answer of {uri}"), e))?
        {
            sink(status, resp.headers(), &data);
            all.extend_from_slice(&data);
        }
        Ok(Answer {
            status,
            headers: std::mem::take(resp.headers_mut()),
            body: Bytes::from(all),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_http_urls() {
        let t = Target::parse("http://127.0.0.1:8080/invoke").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8080, "/invoke")
        );
        let t = Target::parse("http://localhost").unwrap();
        assert_eq!((t.port, t.path.as_str()), (80, ""));
        let t = Target::parse("http://[::1]:9/v1/").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9, "/v1")
        );
        assert!(Target::parse("https://api.openai.com/v1").is_err());
        assert!(Target::parse("localhost:80").is_err());
        assert!(Target::parse("http://h:99999").is_err());
    }
}
