//! One JSON-RPC 2.0 message of MCP, read once: what it is (a request, a
//! notification, a response), its method and its id.
//!
//! MCP's stdio transport sends one message per line (UTF-8 JSON, no
//! embedded newline); the relay hands each line here as it passed, and
//! never re-serializes what it forwards.

use serde_json::Value;

/// Which way a message went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From the client (the agent) to the server.
    ToServer,
    /// From the server to the client.
    ToClient,
}

impl Dir {
    /// The other way.
    pub fn back(self) -> Dir {
        match self {
            Dir::ToServer => Dir::ToClient,
            Dir::ToClient => Dir::ToServer,
        }
    }
}

/// What a message is.
#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// A request: it has a method and an id, and awaits a response.
    Request {
        /// The id as JSON text (`7`, `"abc"`): how a response finds it.
        id: String,
        /// `tools/call`, `sampling/createMessage`, …
        method: String,
    },
    /// A notification: a method and no id (`notifications/progress`).
    Notification {
        /// `notifications/initialized`, …
        method: String,
    },
    /// A response: an id, and a `result` or an `error`.
    Response {
        /// The id of the request it answers, as JSON text.
        id: String,
        /// The JSON-RPC error, when it is one.
        error: Option<Value>,
    },
    /// A JSON array (JSON-RPC batching, which MCP 2025-06-18 removed):
    /// recorded as it is, not paired.
    Batch,
    /// Not a JSON-RPC message (not JSON, or no method and no id).
    Invalid(String),
}

/// A message as read: its JSON and its shape.
#[derive(Clone, Debug)]
pub struct Message {
    /// The parsed line (`Null` when it is not JSON).
    pub json: Value,
    /// What it is.
    pub shape: Shape,
}

/// The bytes of a line without its line ending (`\n` or `\r\n`).
pub fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// An id as the text responses are paired by.
pub fn id_key(id: &Value) -> String {
    id.to_string()
}

impl Message {
    /// Reads one line (its line ending ignored).
    pub fn read(line: &[u8]) -> Message {
        let json: Value = match serde_json::from_slice(trim_eol(line)) {
            Ok(v) => v,
            Err(e) => {
                return Message {
                    json: Value::Null,
                    shape: Shape::Invalid(format!("not JSON: {e}")),
                };
            }
        };
        let shape = Message::shape_of(&json);
        Message { json, shape }
    }

    fn shape_of(json: &Value) -> Shape {
        if json.is_array() {
            return Shape::Batch;
        }
        let method = json.get("method").and_then(Value::as_str);
        let id = json.get("id").filter(|v| !v.is_null());
        match (method, id) {
            (Some(m), Some(id)) => Shape::Request {
                id: id_key(id),
                method: m.to_owned(),
            },
            (Some(m), None) => Shape::Notification {
                method: m.to_owned(),
            },
            (None, Some(id)) => Shape::Response {
                id: id_key(id),
                error: json.get("error").cloned(),
            },
            (None, None) => Shape::Invalid("no method and no id".into()),
        }
    }

    /// The method, for requests and notifications.
    pub fn method(&self) -> Option<&str> {
        match &self.shape {
            Shape::Request { method, .. } | Shape::Notification { method } => Some(method),
            _ => None,
        }
    }

    /// What a request is about, besides its method: the tool called
    /// (`tools/call`), the resource read (`resources/read`), the prompt
    /// got (`prompts/get`).
    pub fn subject(&self) -> Option<&str> {
        let params = self.json.get("params")?;
        match self.method()? {
            "tools/call" | "prompts/get" => params.get("name")?.as_str(),
            "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                params.get("uri")?.as_str()
            }
            _ => None,
        }
    }

    /// A response's failure: its JSON-RPC error, or a tool result that
    /// says `isError` (its first text part as the message).
    pub fn failure(&self) -> Option<Value> {
        if let Shape::Response { error: Some(e), .. } = &self.shape {
            return Some(e.clone());
        }
        let result = self.json.get("result")?;
        if result.get("isError").and_then(Value::as_bool) != Some(true) {
            return None;
        }
        let text = result
            .get("content")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find_map(|p| p.get("text")?.as_str()))
            .unwrap_or("the tool reported an error");
        Some(serde_json::json!({"tool_error": text}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_read_from_method_and_id() {
        let m = Message::read(
            b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}\r\n",
        );
        assert_eq!(
            m.shape,
            Shape::Request {
                id: "3".into(),
                method: "tools/call".into()
            }
        );
        assert_eq!(m.subject(), Some("echo"));
        let n = Message::read(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(n.method(), Some("notifications/initialized"));
        let r =
            Message::read(br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"x"}}"#);
        assert!(matches!(&r.shape, Shape::Response { id, error: Some(_) } if id == "\"a\""));
        assert!(r.failure().is_some());
        let t = Message::read(
            br#"{"jsonrpc":"2.0","id":1,"result":{"isError":true,"content":[{"type":"text","text":"boom"}]}}"#,
        );
        assert_eq!(t.failure(), Some(serde_json::json!({"tool_error": "boom"})));
        assert!(matches!(Message::read(b"hello").shape, Shape::Invalid(_)));
        assert_eq!(Message::read(b"[1]").shape, Shape::Batch);
    }
}
