//! Which nodes a listing shows: by kind, sender, recipient, time and what
//! their diagnostics say (model, status, failure).

use crate::backend::StoredNode;
use convo_core::{Kind, Millis};

/// A conjunction of conditions; the default matches every node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFilter {
    /// Any of these kinds (empty: any kind).
    pub kinds: Vec<Kind>,
    /// Sent by exactly this sender.
    pub from: Option<String>,
    /// Sent to exactly this recipient.
    pub to: Option<String>,
    /// Recorded at or after this time.
    pub since: Option<Millis>,
    /// Recorded before this time.
    pub until: Option<Millis>,
    /// Its diagnostics' `model` is exactly this.
    pub model: Option<String>,
    /// Its diagnostics' `status`, as text (`200`, `429`), is exactly this.
    pub status: Option<String>,
    /// Only nodes that record a failure ([`failed`]).
    pub failed: bool,
}

/// The diagnostics fields a filter reads.
pub(crate) const MODEL: &str = "model";
pub(crate) const STATUS: &str = "status";
pub(crate) const ERROR: &str = "error";
pub(crate) const FAILURE: &str = "failure";

/// Whether diagnostics record a failure: an `error` or `failure` that is
/// not `null` (the proxy's upstream and stream errors, the harness's
/// failed turns), or a `status` whose text is a 4xx or 5xx code. Both
/// backends test the same in SQL ([`crate::search::conditions`]).
pub fn failed(diagnostics: &str) -> bool {
    let field = |k| diag_field(diagnostics, k);
    field(ERROR).is_some()
        || field(FAILURE).is_some()
        || field(STATUS).is_some_and(|s| is_error_status(&s))
}

/// `4xx` or `5xx`, as text.
fn is_error_status(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 3 && matches!(b[0], b'4' | b'5') && b[1..].iter().all(u8::is_ascii_digit)
}

/// A top-level field of diagnostics as text, as SQL reads it: a string
/// as itself, any other value but `null` as its JSON; `None` when absent,
/// `null`, or the diagnostics are not a JSON object.
pub fn diag_field(diagnostics: &str, key: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(diagnostics).ok()?;
    match v.get(key)? {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

impl NodeFilter {
    /// Whether `n` passes every condition.
    pub fn matches(&self, n: &StoredNode) -> bool {
        let node = &n.node;
        let d = node.diagnostics.as_str();
        (self.kinds.is_empty() || self.kinds.contains(&node.kind))
            && self.from.as_ref().is_none_or(|f| *f == node.from)
            && self.to.as_ref().is_none_or(|t| *t == node.to)
            && self.since.is_none_or(|s| node.created_at >= s)
            && self.until.is_none_or(|u| node.created_at < u)
            && self
                .model
                .as_ref()
                .is_none_or(|m| diag_field(d, MODEL).as_ref() == Some(m))
            && self
                .status
                .as_ref()
                .is_none_or(|s| diag_field(d, STATUS).as_ref() == Some(s))
            && (!self.failed || failed(d))
    }

    /// Whether it matches every node.
    pub fn is_empty(&self) -> bool {
        *self == NodeFilter::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_errors_and_error_statuses() {
        assert!(failed(r#"{"error":"upstream cut the stream"}"#));
        assert!(failed(r#"{"failure":"timeout","error":"x"}"#));
        assert!(failed(r#"{"status":503}"#));
        assert!(failed(r#"{"status":"429"}"#));
        assert!(!failed(r#"{"status":200,"error":null}"#));
        assert!(!failed(r#"{"status":4000}"#));
        assert!(!failed("not json"));
        assert_eq!(
            diag_field(r#"{"model":"m","n":[1]}"#, "n").as_deref(),
            Some("[1]")
        );
    }
}
