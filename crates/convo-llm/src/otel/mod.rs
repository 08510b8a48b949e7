//! OpenTelemetry GenAI telemetry in: OTLP trace and log exports become
//! sessions.
//!
//! Three steps, one module each, so the receiver (`convo serve`'s
//! `/v1/traces` and `/v1/logs`) and the tests share all of it:
//!
//! 1. **Decode** (here): an OTLP/HTTP body (protobuf or JSON, gzip or not)
//!    into the `opentelemetry-proto` types ([`decode_traces`],
//!    [`decode_logs`]), bounded; [`check_traces`] / [`check_logs`] drop
//!    the items OTLP says a receiver must reject (no valid trace or span
//!    id) and count them for the partial-success answer.
//! 2. **Read** ([`dialect`]): spans and log records of every GenAI dialect
//!    into [`Call`]s: one LLM call each, its input (the whole history) and
//!    output as neutral [`convo_formats::Message`]s.
//! 3. **Thread** ([`ingest`]): calls into sessions through the ledger
//!    mapping imports use ([`crate::ledger::message_drafts`]): one session
//!    per conversation, each message stored once however many calls
//!    resend it, in one transaction per export request.

pub mod dialect;
pub mod ingest;
pub mod raw;
pub mod rebuild;

pub use dialect::{Call, calls_from_logs, calls_from_spans};
pub use ingest::{
    Ingested, Prepared, ThreadCache, ingest, ingest_cached, ingest_prepared, prepare,
};

use convo_formats::Error;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, Span};
use serde_json::{Map, Value};
use std::io::Read as _;

/// Most spans (or log records) one export request may carry: a bigger one
/// is refused whole, so memory stays bounded whatever the body limit.
pub const MAX_ITEMS: usize = 100_000;

/// How a body is encoded (its `Content-Type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Encoding {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl Encoding {
    /// The encoding a `Content-Type` names (parameters ignored), if OTLP
    /// has one for it.
    pub fn from_content_type(ct: &str) -> Option<Encoding> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base.to_ascii_lowercase().as_str() {
            "application/x-protobuf" | "application/protobuf" => Some(Encoding::Protobuf),
            "application/json" => Some(Encoding::Json),
            _ => None,
        }
    }
}

/// `body`, gunzipped when `gzip`, at most `limit` bytes after that (what
/// [`raw`] keeps).
pub fn inflate<'a>(
    body: &'a [u8],
    gzip: bool,
    limit: usize,
) -> Result<std::borrow::Cow<'a, [u8]>, Error> {
    if !gzip {
        return Ok(std::borrow::Cow::Borrowed(body));
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(body)
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| {
            Error::new(
                "otlp",
                "gzip",
                format!("the gzip body does not inflate: {e}"),
            )
        })?;
    if out.len() > limit {
        return Err(Error::new(
            "otlp",
            "too-large",
            format!("the body inflates to more than {limit} bytes"),
        ));
    }
    Ok(std::borrow::Cow::Owned(out))
}

fn decode<T: prost::Message + Default + serde::de::DeserializeOwned>(
    body: &[u8],
    enc: Encoding,
    gzip: bool,
    limit: usize,
) -> Result<T, Error> {
    let bytes = inflate(body, gzip, limit)?;
    match enc {
        Encoding::Protobuf => T::decode(&bytes[..]).map_err(|e| {
            Error::new(
                "otlp",
                "protobuf",
                format!("the body is not an OTLP protobuf message: {e}"),
            )
        }),
        Encoding::Json => serde_json::from_slice(&bytes).map_err(|e| {
            Error::new("otlp", "json", format!("the body is not OTLP/JSON: {e}"))
                .at_line(e.line(), e.column())
        }),
    }
}

/// An OTLP/HTTP `/v1/traces` body, decoded.
pub fn decode_traces(
    body: &[u8],
    enc: Encoding,
    gzip: bool,
    limit: usize,
) -> Result<ExportTraceServiceRequest, Error> {
    let req: ExportTraceServiceRequest = decode(body, enc, gzip, limit)?;
    let n: usize = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum();
    if n > MAX_ITEMS {
        return Err(Error::new(
            "otlp",
            "too-many",
            format!("{n} spans in one request; send at most {MAX_ITEMS} per request"),
        ));
    }
    Ok(req)
}

/// An OTLP/HTTP `/v1/logs` body, decoded.
pub fn decode_logs(
    body: &[u8],
    enc: Encoding,
    gzip: bool,
    limit: usize,
) -> Result<ExportLogsServiceRequest, Error> {
    let req: ExportLogsServiceRequest = decode(body, enc, gzip, limit)?;
    let n: usize = req
        .resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .map(|s| s.log_records.len())
        .sum();
    if n > MAX_ITEMS {
        return Err(Error::new(
            "otlp",
            "too-many",
            format!("{n} log records in one request; send at most {MAX_ITEMS} per request"),
        ));
    }
    Ok(req)
}

/// The calls of an export body (gunzipped) as the receiver reads them,
/// and the items it rejects: `media` is the kept body's (`traces` or
/// `logs`, `/`, `protobuf` or `json`). The receiver and [`ingest::resolve_kept`]
/// both read through here, so a call's place among the calls
/// (`extra.otel.call.n`) is the same for both.
pub fn read_body(media: &str, body: &[u8], limit: usize) -> Result<(Vec<Call>, Rejected), Error> {
    let (signal, enc) = media.split_once('/').unwrap_or((media, ""));
    let enc = match enc {
        "protobuf" => Encoding::Protobuf,
        "json" => Encoding::Json,
        other => {
            return Err(Error::new(
                "otlp",
                "media",
                format!("unknown encoding `{other}` of a kept export body"),
            ));
        }
    };
    match signal {
        "traces" => {
            let mut req = decode_traces(body, enc, false, limit)?;
            let rejected = check_traces(&mut req);
            Ok((calls_from_spans(&Batch::traces(&req)), rejected))
        }
        "logs" => {
            let mut req = decode_logs(body, enc, false, limit)?;
            let rejected = check_logs(&mut req);
            Ok((calls_from_logs(&Batch::logs(&req)), rejected))
        }
        other => Err(Error::new(
            "otlp",
            "media",
            format!("unknown signal `{other}` of a kept export body"),
        )),
    }
}

/// Items a receiver rejected, for the partial-success answer.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Rejected {
    /// How many.
    pub count: i64,
    /// Why (the first reason), empty when none was rejected.
    pub message: String,
}

impl Rejected {
    fn add(&mut self, why: &str) {
        self.count += 1;
        if self.message.is_empty() {
            self.message = why.to_owned();
        }
    }
}

fn valid_id(b: &[u8], len: usize) -> bool {
    b.len() == len && b.iter().any(|&x| x != 0)
}

/// Drops the spans without a valid trace id (16 bytes, not all zero) or
/// span id (8 bytes, not all zero), counting them.
pub fn check_traces(req: &mut ExportTraceServiceRequest) -> Rejected {
    let mut r = Rejected::default();
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            ss.spans.retain(|s| {
                if !valid_id(&s.trace_id, 16) {
                    r.add("a span without a valid trace id (16 bytes, not all zero) was rejected");
                    false
                } else if !valid_id(&s.span_id, 8) {
                    r.add("a span without a valid span id (8 bytes, not all zero) was rejected");
                    false
                } else {
                    true
                }
            });
        }
    }
    r
}

/// Drops the log records whose trace or span id is present but malformed
/// (a record outside any trace is fine), counting them.
pub fn check_logs(req: &mut ExportLogsServiceRequest) -> Rejected {
    let mut r = Rejected::default();
    for rl in &mut req.resource_logs {
        for sl in &mut rl.scope_logs {
            sl.log_records.retain(|l| {
                let ok = (l.trace_id.is_empty() || l.trace_id.len() == 16)
                    && (l.span_id.is_empty() || l.span_id.len() == 8);
                if !ok {
                    r.add("a log record with a malformed trace or span id was rejected");
                }
                ok
            });
        }
    }
    r
}

/// What the dialect readers walk: the spans or log records of one export
/// request, each with its resource's attributes and its scope's name.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    resource_spans: &'a [ResourceSpans],
    resource_logs: &'a [ResourceLogs],
}

impl<'a> Batch<'a> {
    /// The spans of a trace export.
    pub fn traces(req: &'a ExportTraceServiceRequest) -> Self {
        Batch {
            resource_spans: &req.resource_spans,
            resource_logs: &[],
        }
    }

    /// The records of a log export.
    pub fn logs(req: &'a ExportLogsServiceRequest) -> Self {
        Batch {
            resource_spans: &[],
            resource_logs: &req.resource_logs,
        }
    }

    fn spans(&self) -> Vec<(&'a [KeyValue], &'a str, &'a Span)> {
        let mut out = Vec::new();
        for rs in self.resource_spans {
            let res = rs.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
            for ss in &rs.scope_spans {
                let scope = ss.scope.as_ref().map_or("", |s| s.name.as_str());
                for sp in &ss.spans {
                    out.push((res, scope, sp));
                }
            }
        }
        out
    }

    fn records(&self) -> Vec<(&'a [KeyValue], &'a str, &'a LogRecord)> {
        let mut out = Vec::new();
        for rl in self.resource_logs {
            let res = rl.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
            for sl in &rl.scope_logs {
                let scope = sl.scope.as_ref().map_or("", |s| s.name.as_str());
                for l in &sl.log_records {
                    out.push((res, scope, l));
                }
            }
        }
        out
    }
}

/// An attribute's value, by key (the first, if a sender repeated it).
pub(crate) fn attr<'a>(attrs: &[&'a KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
}

/// An attribute's value as text: a string as itself, a number or boolean
/// written out; `None` for arrays and maps.
pub(crate) fn attr_str(attrs: &[&KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)?.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        Any::DoubleValue(d) => Some(d.to_string()),
        Any::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An OTLP value as JSON (bytes as lowercase hex; a non-finite double as
/// its name).
pub(crate) fn any_json(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(Any::StringValue(s)) => Value::String(s.clone()),
        Some(Any::BoolValue(b)) => Value::Bool(*b),
        Some(Any::IntValue(i)) => Value::from(*i),
        Some(Any::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map_or_else(|| Value::String(d.to_string()), Value::Number),
        Some(Any::ArrayValue(a)) => Value::Array(a.values.iter().map(any_json).collect()),
        Some(Any::KvlistValue(kv)) => {
            let mut o = Map::new();
            for e in &kv.values {
                o.insert(
                    e.key.clone(),
                    e.value.as_ref().map_or(Value::Null, any_json),
                );
            }
            Value::Object(o)
        }
        Some(Any::BytesValue(b)) => Value::String(hex(b)),
        // A reference into a dictionary OTLP/HTTP exports do not send.
        Some(Any::StringValueStrindex(_)) => Value::Null,
    }
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// A trace or span id as lowercase hex; empty for none (absent or all zero).
pub(crate) fn hex_id(b: &[u8]) -> String {
    if b.iter().all(|&x| x == 0) {
        String::new()
    } else {
        hex(b)
    }
}

/// OTLP's nanoseconds as convo's milliseconds.
pub(crate) fn nanos_to_millis(n: u64) -> convo_core::Millis {
    (n / 1_000_000).min(i64::MAX as u64) as i64
}
