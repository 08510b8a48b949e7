//! Helpers for driving a real `convo serve`: start it on port 0, and a
//! minimal HTTP/1.1 client over `TcpStream` (so the tests depend on no
//! HTTP library of ours and see exactly what goes over the wire).

use crate::common::TestEnv;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running `convo serve`.
pub struct Server {
    pub child: Child,
    /// `127.0.0.1:PORT`
    pub addr: String,
}

impl Server {
    pub fn start(t: &TestEnv, extra: &[&str]) -> Server {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--quiet"];
        args.extend_from_slice(extra);
        Server::launch(t, &args)
    }

    /// Runs `convo ARGS` (a server that prints its URL first: `serve`,
    /// `proxy`) and waits for that URL.
    pub fn launch(t: &TestEnv, args: &[&str]) -> Server {
        Server::launch_with(t, args, &[])
    }

    /// [`Server::launch`] with these environment variables.
    pub fn launch_with(t: &TestEnv, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = t
            .cmd()
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        assert!(!addr.is_empty(), "convo {} printed no URL", args[0]);
        Server { child, addr }
    }

    pub fn req(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        http(&self.addr, method, path, headers, body)
    }
    pub fn get(&self, path: &str) -> Resp {
        self.req("GET", path, &[], b"")
    }
    pub fn post_json(&self, path: &str, v: &serde_json::Value) -> Resp {
        self.req(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            v.to_string().as_bytes(),
        )
    }

    /// SIGTERM, then wait; returns the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    /// Asserts the status and returns the JSON body.
    pub fn expect(&self, status: u16) -> serde_json::Value {
        assert_eq!(self.status, status, "{}", self.text());
        if self.body.is_empty() {
            serde_json::Value::Null
        } else {
            self.json()
        }
    }
    /// The error kind of an error document.
    pub fn kind(&self) -> String {
        self.json()["error"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    http_host(addr, addr, method, path, headers, body)
}

/// [`http`] with this `Host` header (a DNS-rebinding page sends its own name).
pub fn http_host(
    addr: &str,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    // A server may answer (413, 401) before reading the whole body and
    // close: the answer is what counts, not the write.
    let _ = s.write_all(req.as_bytes()).and_then(|_| s.write_all(body));
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse(&raw)
}

pub fn parse(raw: &[u8]) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(nl) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..nl])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            return out;
        }
        let start = nl + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
}

/// A Server-Sent Events reader (HTTP/1.0, so the body is not chunked).
pub struct Sse {
    r: BufReader<TcpStream>,
}

/// One SSE message: its id and data.
#[derive(Debug)]
pub struct SseMsg {
    pub id: Option<u64>,
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn open(addr: &str, path: &str, last_event_id: Option<u64>) -> Sse {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req =
            format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/event-stream\r\n");
        if let Some(id) = last_event_id {
            req.push_str(&format!("Last-Event-ID: {id}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        assert!(status.contains(" 200"), "events: {status}");
        loop {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            if l == "\r\n" || l == "\n" || l.is_empty() {
                break;
            }
        }
        Sse { r }
    }

    /// The next message with data (keep-alive comments skipped).
    pub fn next(&mut self) -> SseMsg {
        let mut m = SseMsg {
            id: None,
            event: None,
            data: String::new(),
        };
        loop {
            let mut l = String::new();
            let n = self.r.read_line(&mut l).unwrap();
            assert!(n > 0, "event stream closed");
            let l = l.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                if !m.data.is_empty() {
                    return m;
                }
                continue;
            }
            if let Some(v) = l.strip_prefix("id:") {
                m.id = v.trim().parse().ok();
            } else if let Some(v) = l.strip_prefix("event:") {
                m.event = Some(v.trim().to_owned());
            } else if let Some(v) = l.strip_prefix("data:") {
                m.data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
    }
}
