//! `GET /openapi.json`: the OpenAPI 3.1 document, generated from the
//! handlers' `#[utoipa::path]` annotations and the wire types' schemas, so
//! it cannot drift from the code (a test checks every route is in it), then
//! completed with what the annotations cannot say: the rules of branch
//! names and hash prefixes as patterns, every error status with its
//! [`ErrorDoc`](convo_api::ErrorDoc), and the content types of the raw
//! routes. The tests validate it with openapi-spec-validator, fuzz a live
//! server against it with schemathesis, and generate a Python client from
//! it.

use crate::{api, otlp};
use axum::Json;
use serde_json::json;
use utoipa::OpenApi;

/// The API description.
#[derive(OpenApi, Debug)]
#[openapi(
    info(
        title = "convo",
        description = "The HTTP API of convo, the flight recorder and time machine for AI-agent conversations. \
Every error is an ErrorDoc whose `kind` maps to the status: invalid 400 (a request that does not parse: \
JSON syntax, a JSON value of the wrong shape, a query value of the wrong type) or 422 (a well-formed request \
that breaks a rule), ambiguous 400, not_found 404, method_not_allowed 405, refused 409, unavailable 503, \
corrupt 500, unauthorized 401, forbidden 403 (a Host this server does not answer to, another origin, a \
cross-site form), too_large 413."
    ),
    paths(
        api::list_sessions,
        api::create_session,
        api::get_session,
        api::retitle,
        api::list_branches,
        api::timeline,
        api::append,
        api::state_list,
        api::state_get,
        api::state_put,
        api::state_delete,
        api::fork,
        api::promote,
        api::diff,
        api::export,
        api::get_node,
        api::node_payload,
        api::verify,
        api::search,
        api::import,
        api::events,
        api::health,
        otlp::traces,
        otlp::logs,
    ),
    components(schemas(
        convo_api::Session,
        convo_api::Branch,
        convo_api::NodeView,
        convo_api::AppendLine,
        convo_api::PayloadEncoding,
        convo_api::ErrorDoc,
        convo_api::ErrorBody,
        api::SessionList,
        api::NewSession,
        api::Retitle,
        api::SessionDetail,
        api::TimelinePageView,
        api::AppendBody,
        api::Appended,
        api::ForkRequest,
        api::Forked,
        api::PromoteRequest,
        api::PromotedView,
        api::StateEntry,
        api::StateView,
        api::StateWritten,
        api::VerifyView,
        api::VerifyProblem,
        api::SearchHit,
        api::SearchResults,
        api::ImportedSession,
        api::ImportSummary,
        api::Health,
        convo_api::DiffView,
        convo_api::DiffSide,
        convo_api::DiffTurn,
        convo_api::DiffNode,
        convo_api::DiffLine,
    ))
)]
pub struct ApiDoc;

/// The rules of [`convo_core::BranchName`] a pattern can say (the rest:
/// no `..`, no `@{`, not starting with `-` or `.`, not ending with `.` or
/// `.lock`, are in the description).
pub const BRANCH_PATTERN: &str = r"^[^/\s~^:?*\[\\\x00-\x1f\x7f]+$";
/// A node hash or a prefix of one ([`convo_core::HashPrefix`]).
pub const HASH_PATTERN: &str = "^[0-9a-fA-F]{1,64}$";

const BRANCH_RULES: &str = "A timeline (branch) name: 1 to 200 bytes, no `/`, space, control character, \
`~ ^ : ? * [ \\`, `..` or `@{`; not starting with `-` or `.`, not ending with `.` or `.lock`.";

/// The document as JSON (built once).
pub fn document_json() -> &'static serde_json::Value {
    static DOC: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        let mut v = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
        complete(&mut v);
        v
    })
}

/// `GET /openapi.json`.
pub async fn document() -> Json<serde_json::Value> {
    Json(document_json().clone())
}

fn error_response(description: &str) -> serde_json::Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDoc"}}}
    })
}

/// Adds what the annotations cannot express (see the module docs).
/// OTLP's error answer: a `google.rpc.Status` in the request's encoding.
fn otlp_status() -> serde_json::Value {
    json!({
        "description": "A google.rpc.Status (OTLP/HTTP), in the request's encoding: 400 a body that does not decode, 413 too large, 415 another content type, 503 the store unavailable.",
        "content": {
            "application/json": {"schema": {
                "type": "object",
                "properties": {
                    "code": {"type": "integer"},
                    "message": {"type": "string"},
                    "details": {"type": "array"}
                }
            }},
            "application/x-protobuf": {"schema": {}}
        }
    })
}

fn complete(doc: &mut serde_json::Value) {
    let Some(paths) = doc.get_mut("paths").and_then(|p| p.as_object_mut()) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            let writes = matches!(method.as_str(), "post" | "put" | "patch" | "delete");
            if let Some(params) = op.get_mut("parameters").and_then(|p| p.as_array_mut()) {
                for p in params {
                    let name = p["name"].as_str().unwrap_or_default().to_owned();
                    let place = p["in"].as_str().unwrap_or_default().to_owned();
                    let branchy = name == "branch";
                    if branchy {
                        p["schema"] = json!({
                            "type": "string", "minLength": 1, "maxLength": 200,
                            "pattern": BRANCH_PATTERN,
                        });
                        let d = p["description"].as_str().unwrap_or_default().to_owned();
                        p["description"] = json!(format!("{d} {BRANCH_RULES}").trim().to_owned());
                    } else if (name.as_str(), place.as_str()) == ("hash", "path") {
                        p["schema"] = json!({"type": "string", "pattern": HASH_PATTERN});
                    } else if place == "query" && matches!(name.as_str(), "at" | "a" | "b") {
                        // A node reference (`convo_store::refs`).
                        p["schema"] = json!({"type": "string", "minLength": 1, "maxLength": 300});
                    }
                }
            }
            let Some(responses) = op.get_mut("responses").and_then(|r| r.as_object_mut()) else {
                continue;
            };
            if !path.starts_with("/api/") && path != "/openapi.json" {
                // The OTLP receiver (`/v1/traces`, `/v1/logs`): the guards
                // answer with the error document, the receiver itself with
                // OTLP's `google.rpc.Status`, as exporters expect.
                responses.insert(
                    "401".into(),
                    error_response("This server needs a token (`unauthorized`)."),
                );
                responses.insert(
                    "403".into(),
                    error_response("Another Host or origin (`forbidden`)."),
                );
                responses.insert("default".into(), otlp_status());
                continue;
            }
            let mut errors = vec![
                (
                    "400",
                    "The request does not parse (`invalid`), or names more than one thing (`ambiguous`).",
                ),
                ("401", "This server needs a token (`unauthorized`)."),
                (
                    "403",
                    "Another Host or origin, or a cross-site form (`forbidden`).",
                ),
                (
                    "404",
                    "No such session, timeline, node or key (`not_found`).",
                ),
                ("422", "The request breaks a rule (`invalid`)."),
                ("503", "The store is unavailable for now (`unavailable`)."),
            ];
            if writes {
                errors.push((
                    "409",
                    "The store refused (`refused`): a sealed timeline, a taken name.",
                ));
                errors.push(("413", "The body is over the server's limit (`too_large`)."));
            }
            for (status, what) in errors {
                responses
                    .entry(status)
                    .or_insert_with(|| error_response(what));
            }
            responses.insert(
                "default".into(),
                error_response("Any other error (`corrupt` 500, …)."),
            );
            // The raw routes answer in the content type of what they hold.
            let raw = |types: &[&str]| {
                let content: serde_json::Map<String, serde_json::Value> = types
                    .iter()
                    .map(|t| ((*t).to_owned(), json!({"schema": {}})))
                    .collect();
                json!(content)
            };
            if let Some(ok) = responses.get_mut("200") {
                if path.ends_with("/payload") {
                    ok["content"] =
                        raw(&["application/json", "text/plain", "application/octet-stream"]);
                } else if path.ends_with("/export") {
                    ok["content"] = raw(&["text/markdown", "text/html", "application/json"]);
                }
            }
        }
    }
}
