//! Compression and cache validators for every page and asset of the web
//! view: a strong `ETag` (SHA-256 of the bytes, per encoding), `304 Not
//! Modified` when `If-None-Match` names it, and gzip when the client
//! accepts it (a 487 KB session page is ~26 KB on the wire).
//!
//! Pages are rendered whole before they are sent, so buffering them costs
//! nothing; only `text/html`, `text/css` and `text/javascript` answers to
//! `GET`/`HEAD` with status 200 are touched.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::io::Write as _;

/// Bodies smaller than this are sent as they are (gzip's header and the
/// work would not pay).
const MIN_GZIP: usize = 1024;

fn accepts_gzip(h: &HeaderMap) -> bool {
    h.get_all(header::ACCEPT_ENCODING).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|part| {
                let mut it = part.split(';');
                let name = it.next().unwrap_or("").trim();
                let q_zero = it.any(|p| {
                    let p = p.trim();
                    p.strip_prefix("q=")
                        .is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
                });
                (name.eq_ignore_ascii_case("gzip") || name == "*") && !q_zero
            })
        })
    })
}

/// Whether `If-None-Match` names `tag` (or `*`), weak or strong.
fn matches(h: &HeaderMap, tag: &str) -> bool {
    h.get_all(header::IF_NONE_MATCH).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',').any(|t| {
                let t = t.trim();
                t == "*" || t.strip_prefix("W/").unwrap_or(t) == tag
            })
        })
    })
}

fn compressible(res: &Response) -> bool {
    res.status() == StatusCode::OK
        && !res.headers().contains_key(header::CONTENT_ENCODING)
        && res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| {
                ct.starts_with("text/html")
                    || ct.starts_with("text/css")
                    || ct.starts_with("text/javascript")
            })
}

fn gzip(bytes: &[u8]) -> Option<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::new(6),
    );
    e.write_all(bytes).ok()?;
    e.finish().ok()
}

/// The middleware (see the module's documentation).
pub(super) async fn comfort(req: Request, next: Next) -> Response {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return next.run(req).await;
    }
    let asked = req.headers().clone();
    let res = next.run(req).await;
    if !compressible(&res) {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let digest = convo_core::sha256(&bytes).to_hex();
    let zipped = (accepts_gzip(&asked) && bytes.len() >= MIN_GZIP)
        .then(|| gzip(&bytes))
        .flatten();
    // One tag per representation: the gzipped bytes are another one.
    let tag = format!(
        "\"{}{}\"",
        &digest[..32],
        if zipped.is_some() { "-gz" } else { "" }
    );
    let h = &mut parts.headers;
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if let Ok(v) = HeaderValue::from_str(&tag) {
        h.insert(header::ETAG, v);
    }
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    h.remove(header::CONTENT_LENGTH);
    if matches(&asked, &tag) {
        parts.status = StatusCode::NOT_MODIFIED;
        h.remove(header::CONTENT_TYPE);
        return Response::from_parts(parts, Body::empty());
    }
    match zipped {
        Some(z) => {
            h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            Response::from_parts(parts, Body::from(z))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn accept_encoding_and_if_none_match_are_read_as_http_says() {
        assert!(accepts_gzip(&headers(
            header::ACCEPT_ENCODING,
            "br, gzip;q=0.8"
        )));
        assert!(!accepts_gzip(&headers(header::ACCEPT_ENCODING, "gzip;q=0")));
        assert!(!accepts_gzip(&headers(header::ACCEPT_ENCODING, "br")));
        assert!(accepts_gzip(&headers(header::ACCEPT_ENCODING, "*")));
        let h = headers(header::IF_NONE_MATCH, "\"a\", W/\"b-gz\"");
        assert!(matches(&h, "\"a\""));
        assert!(matches(&h, "\"b-gz\""));
        assert!(!matches(&h, "\"b\""));
    }
}
