//! `GET /v1/status`, `GET /v1/usage`, `GET /health` and `GET /ready`.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use simplysync_protocol::identity::relay_token_hash;
use simplysync_protocol::wire::{HealthResponse, ServerInfo, StatusResponse, UsageResponse};

use super::error::ApiError;
use super::request::{bearer, owner_id, query};
use super::{blocking, now_iso, AppState, Owner};

/// Service name in `/health`.
pub const SERVICE: &str = "simplysync-relay";

fn server_info(st: &AppState) -> ServerInfo {
    ServerInfo { version: env!("CARGO_PKG_VERSION").into(), server_time: now_iso(), epoch: Some(st.store.epoch()) }
}

async fn account(st: &AppState, headers: &HeaderMap, raw: Option<&str>) -> Result<(String, StatusResponse), ApiError> {
    let token = bearer(headers)?;
    let owner = owner_id(query(raw).get("ownerId").map(String::as_str), "ownerId query parameter")?;
    let token_hash = relay_token_hash(&token);
    let (o, quota) = (owner.clone(), st.limits.max_owner_bytes);
    let account = blocking(st, move |s| s.account(&o, &token_hash, quota)).await?;
    Ok((owner, StatusResponse { server: server_info(st), account }))
}

/// `GET /v1/status?ownerId=`: health and storage in one call (404 for an unknown owner).
pub async fn status(
    State(st): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (owner, body) = account(&st, &headers, raw.as_deref()).await?;
    Ok((Owner(owner), axum::Json(body)).into_response())
}

/// `GET /v1/usage?ownerId=`: the owner's stored bytes.
pub async fn usage(
    State(st): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let (owner, body) = account(&st, &headers, raw.as_deref()).await?;
    let usage = UsageResponse { owner_id: owner.clone(), stored_bytes: body.account.used_bytes };
    Ok((Owner(owner), axum::Json(usage)).into_response())
}

/// `GET /health`: liveness, version, time and the database epoch. No auth.
pub async fn health(State(st): State<AppState>) -> axum::Json<HealthResponse> {
    let info = server_info(&st);
    axum::Json(HealthResponse {
        ok: true,
        service: SERVICE.into(),
        version: info.version,
        server_time: info.server_time,
        epoch: info.epoch,
        wait: st.live.enabled().then(|| "/v1/events/wait".into()),
    })
}

/// `GET /ready`: whether this process can serve — its database answers, and its object store
/// if chunks live in one (a load balancer's readiness probe; `/health` is liveness only). 200
/// `{"ready":true}`, or 503 `{"ready":false,"reason":…}` naming the part that did not answer
/// (details go to the log). No auth.
pub async fn ready(State(st): State<AppState>) -> Response {
    let store = st.store.clone();
    let answer = tokio::task::spawn_blocking(move || store.ready()).await;
    match answer {
        Ok(Ok(())) => axum::Json(serde_json::json!({ "ready": true })).into_response(),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "not ready: the storage did not answer");
            let part = if e.to_string().contains("object store") { "the object store" } else { "the database" };
            let body = serde_json::json!({ "ready": false, "reason": format!("{part} did not answer") });
            (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
        Err(_) => {
            let body = serde_json::json!({ "ready": false, "reason": "the readiness check failed" });
            (axum::http::StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}
