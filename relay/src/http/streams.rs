//! `POST /v1/streams/compact` (client-driven tombstone GC) and `POST /v1/owner/close`.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use simplysync_protocol::identity::{is_stream_id, relay_token_hash};
use simplysync_protocol::wire::{CloseRequest, CompactRequest};

use super::error::ApiError;
use super::request::{bearer, body_bytes, json, owner_id, truncate};
use super::{blocking, deadline_of, now_iso, AppState, Owner};

/// `POST /v1/streams/compact`: drops every event of the named streams. Never registers an owner.
pub async fn compact(State(st): State<AppState>, req: axum::extract::Request) -> Result<Response, ApiError> {
    let deadline = deadline_of(&req);
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let token = bearer(&headers)?;
    let req: CompactRequest = json(&body_bytes(&headers, body, st.limits.max_control_bytes, "the body").await?)?;
    let owner = owner_id(Some(&req.owner_id), "ownerId")?;
    if req.stream_ids.len() > st.limits.max_streams_per_compact {
        return Err(ApiError::TooLarge(format!(
            "{} streamIds in one request; MAX_STREAMS_PER_COMPACT is {}",
            req.stream_ids.len(),
            st.limits.max_streams_per_compact
        )));
    }
    if let Some((i, bad)) = req.stream_ids.iter().enumerate().find(|(_, s)| !is_stream_id(s)) {
        return Err(ApiError::BadRequest(format!(
            "streamIds[{i}] must be 22 base64url characters (a sealed stream id), got {:?}",
            truncate(bad)
        )));
    }
    let token_hash = relay_token_hash(&token);
    let o = owner.clone();
    let out = blocking(&st, move |s| s.compact_streams(&o, &token_hash, &req.stream_ids, Some(deadline))).await?;
    st.metrics.record_stream_compaction(out.deleted_events);
    Ok((Owner(owner), axum::Json(out)).into_response())
}

/// `POST /v1/owner/close`: deletes the owner's data and refuses its token from then on.
pub async fn close(State(st): State<AppState>, req: axum::extract::Request) -> Result<Response, ApiError> {
    let deadline = deadline_of(&req);
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let token = bearer(&headers)?;
    let req: CloseRequest = json(&body_bytes(&headers, body, st.limits.max_control_bytes, "the body").await?)?;
    let owner = owner_id(Some(&req.owner_id), "ownerId")?;
    let token_hash = relay_token_hash(&token);
    let (o, now) = (owner.clone(), now_iso());
    let out = blocking(&st, move |s| s.close_owner(&o, &token_hash, &now, Some(deadline))).await?;
    if out.deleted_events > 0 || out.deleted_blobs > 0 {
        tracing::info!(owner = %super::owner_tag(&owner), events = out.deleted_events, blobs = out.deleted_blobs, "owner closed");
    }
    Ok((Owner(owner), axum::Json(out)).into_response())
}
