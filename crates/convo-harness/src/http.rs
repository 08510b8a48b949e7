//! A minimal HTTP/1.1 client (hyper's connection API) for the two things
//! the harness calls: the agent and the inference upstream. Plain `http://`
//! only; connections to the agent are kept between turns.

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

/// Where requests go: host, port and a base path (no trailing `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl Target {
    /// Parses `http://host[:port][/path]`.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(
                    "https is not supported here: give a plain http:// URL (a local server or an http proxy in front of the remote one)".into(),
                );
            }
            Some((scheme, _)) => return Err(format!("unsupported scheme `{scheme}`; use http://")),
            None => return Err("not a URL: expected http://HOST:PORT[/PATH]".into()),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err("expected http://HOST:PORT[/PATH] (no user or password)".into());
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| format!("port `{p}` is not a number from 0 to 65535"))?;
                (h, port)
            }
            _ => (authority, 80),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        Ok(Target {
            host: host.to_owned(),
            port,
            path: path.trim_end_matches('/').to_owned(),
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

/// Why a call got no HTTP answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("cannot connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("{0}")]
    Protocol(String),
}

/// A client for one target that keeps its connection between calls.
#[derive(Debug)]
pub(crate) struct Client {
    pub target: Target,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    pub fn new(target: Target) -> Self {
        Client { target, conn: None }
    }

    /// Forgets the kept connection (after a failure or a timeout, when the
    /// other side may still answer the old request on it).
    pub fn reset(&mut self) {
        self.conn = None;
    }

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
        let mut sender = match self.conn.take() {
            Some(s) if !s.is_closed() => s,
            _ => connect(&self.target).await?,
        };
        let ans = send(&mut sender, &self.target, method, path, headers, body, sink).await;
        if ans.is_ok() && !sender.is_closed() {
            self.conn = Some(sender);
        }
        ans
    }
}

async fn connect(t: &Target) -> Result<SendRequest<Full<Bytes>>, CallError> {
    let stream = tokio::net::TcpStream::connect((t.host.as_str(), t.port))
        .await
        .map_err(|e| CallError::Connect(t.authority(), e))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| CallError::Protocol(format!("HTTP handshake with {}: {e}", t.authority())))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

async fn send(
    sender: &mut SendRequest<Full<Bytes>>,
    t: &Target,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: Bytes,
    sink: &mut (dyn FnMut(u16, &HeaderMap, &[u8]) + Send),
) -> Result<Answer, CallError> {
    sender
        .ready()
        .await
        .map_err(|e| CallError::Protocol(format!("connection to {}: {e}", t.authority())))?;
    let uri = format!("{}{}", t.path, path);
    let uri = if uri.is_empty() { "/".to_owned() } else { uri };
    let mut req = Request::builder()
        .method(method)
        .uri(&uri)
        .body(Full::new(body))
        .map_err(|e| CallError::Protocol(format!("bad request to {uri}: {e}")))?;
    for (k, v) in headers {
        req.headers_mut().append(k.clone(), v.clone());
    }
    if let Ok(host) = t.authority().parse() {
        req.headers_mut().insert(header::HOST, host);
    }
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| CallError::Protocol(format!("{} {uri}: {e}", t.authority())))?;
    let (parts, mut body) = resp.into_parts();
    let mut all = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| CallError::Protocol(format!("reading the answer of {uri}: {e}")))?;
        if let Ok(data) = frame.into_data() {
            sink(parts.status.as_u16(), &parts.headers, &data);
            all.extend_from_slice(&data);
        }
    }
    let body = Bytes::from(all);
    Ok(Answer {
        status: parts.status.as_u16(),
        headers: parts.headers,
        body,
    })
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
