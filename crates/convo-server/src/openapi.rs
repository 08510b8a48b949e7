//! `GET /openapi.json`: the OpenAPI 3.1 document, generated from the
//! handlers' `#[utoipa::path]` annotations and the wire types' schemas, so
//! it cannot drift from the code (a test checks every route is in it).

use crate::{api, diff, otlp};
use axum::Json;
use utoipa::OpenApi;

/// The API description.
#[derive(OpenApi, Debug)]
#[openapi(
    info(
        title = "convo",
        description = "The HTTP API of convo, the flight recorder and time machine for AI-agent conversations. \
Every error is an ErrorDoc whose `kind` maps to the status: invalid 422, ambiguous 400, not_found 404, \
refused 409, unavailable 503, corrupt 500, unauthorized 401, forbidden 403, too_large 413."
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
        api::SearchHit,
        api::SearchResults,
        api::ImportedSession,
        api::ImportSummary,
        api::Health,
        diff::DiffView,
        diff::DiffSide,
    ))
)]
pub struct ApiDoc;

/// The document as JSON.
pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
