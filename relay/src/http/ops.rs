//! Operations: `GET /metrics` (open), the ops page `GET /ops`, and the admin endpoints
//! `GET /ops/stats` and `POST /ops/compact` (bearer `ADMIN_TOKEN`; disabled when unset).

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{Html, IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use super::request::bearer;
use super::{blocking, AppState};

fn admin(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = &st.admin_token else {
        return Err(ApiError::Forbidden("ops endpoints are disabled: set ADMIN_TOKEN to enable them".into()));
    };
    let token = bearer(headers)?;
    if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::Forbidden("wrong admin token".into()))
    }
}

/// `GET /metrics` (bearer `METRICS_TOKEN`, when set).
pub async fn metrics(State(st): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if let Some(expected) = &st.metrics_token {
        let token = bearer(&headers)?;
        if !bool::from(token.as_bytes().ct_eq(expected.as_bytes())) {
            return Err(ApiError::Forbidden("wrong metrics token".into()));
        }
    }
    let stats = blocking(&st, |s| s.stats()).await?;
    let mut text = st.metrics.render(&stats);
    text.push_str(&crate::metrics::live_gauge(st.live.waiting()));
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

/// `GET /ops/stats`: relay-wide figures.
pub async fn stats(State(st): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    admin(&st, &headers)?;
    let stats = blocking(&st, |s| s.stats()).await?;
    Ok(axum::Json(serde_json::json!({
        "owners": stats.owners,
        "closedOwners": stats.closed_owners,
        "events": stats.events,
        "blobs": stats.blobs,
        "storedBytes": stats.total_bytes,
        "headSeq": stats.head_seq,
        "lastCompactionAt": stats.last_compaction_at,
        "lastCompactionDeletedEvents": stats.last_compaction_deleted,
        "lastCompactionMs": stats.last_compaction_ms,
        "databaseBytes": stats.database_bytes,
        "walBytes": stats.wal_bytes,
        "epoch": st.store.epoch(),
        "compactionIntervalMs": st.compaction_interval_ms,
    }))
    .into_response())
}

/// `POST /ops/compact`: runs log compaction now.
pub async fn compact(State(st): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    admin(&st, &headers)?;
    let report = crate::compaction::run_once(&st.store, &st.metrics, &st.cancel).await?;
    Ok(axum::Json(serde_json::json!({
        "owners": report.owners,
        "deletedEvents": report.deleted_events,
        "reclaimedBytes": report.reclaimed_bytes,
        "durationMs": report.duration_ms,
    }))
    .into_response())
}

/// `GET /ops`: a page that asks for the admin token and shows `/ops/stats`.
pub async fn page() -> Html<&'static str> {
    Html(include_str!("ops.html"))
}
