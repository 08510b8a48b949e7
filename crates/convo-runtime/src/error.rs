//! The error document ([`convo_api::ErrorDoc`]) as an HTTP response: one
//! shape for every error a server answers.
//!
//! A `503` (the store is unavailable: a PostgreSQL server restarting, a
//! lost connection) carries `Retry-After`: the pool and the writer reopen
//! their connections by themselves, so the same request succeeds once the
//! database is back.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use convo_api::ErrorDoc;
use convo_store::{ErrorKind, StoreError};

/// Seconds a client should wait before retrying a `503`.
pub const RETRY_AFTER_SECS: u32 = 1;

/// An error document with `status`.
pub fn doc_response(status: StatusCode, doc: ErrorDoc) -> Response {
    let mut res = (status, Json(doc)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    res
}

/// An error response with the given status, kind and message.
pub fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    doc_response(status, ErrorDoc::new(kind, message))
}

/// The HTTP status of each kind of error ([`ErrorKind::http_status`]:
/// the one table, with the CLI's exit codes). Besides these, only HTTP
/// has `unauthorized` (401), `forbidden` (403) and `too_large` (413).
pub fn status(kind: ErrorKind) -> StatusCode {
    StatusCode::from_u16(kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The HTTP status of a store error (from its kind).
pub fn status_of(e: &StoreError) -> StatusCode {
    status(e.kind())
}

/// The error document of a store error.
pub fn store_doc(e: &StoreError) -> ErrorDoc {
    use crate::wire::FromStore as _;
    ErrorDoc::from_store(e)
}

/// A store error as a response: its kind's status and document.
pub fn store_error_response(e: &StoreError) -> Response {
    doc_response(status_of(e), store_doc(e))
}
