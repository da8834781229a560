//! `PUT / GET / HEAD /v1/blobs/:hash?ownerId=` — content-addressed encrypted chunks.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use simplysync_protocol::base64url;
use simplysync_protocol::identity::{relay_token_hash, sha256_base64url};
use simplysync_protocol::wire::BlobPutResponse;

use super::error::ApiError;
use super::request::{bearer, body_bytes, owner_id, query, truncate};
use super::{blocking, deadline_of, now_iso, AppState, ClientIp, Owner};
use crate::store::{BlobData, BlobPresence, MayRegister, StoreError};

struct Target {
    owner: String,
    hash: String,
    token_hash: String,
}

fn target(
    headers: &HeaderMap,
    path: Result<Path<String>, PathRejection>,
    raw: Option<&str>,
) -> Result<Target, ApiError> {
    let token = bearer(headers)?;
    let Path(hash) = path.map_err(|e| ApiError::BadRequest(format!("invalid blob path: {e}")))?;
    if hash.len() != 43 || !base64url::is_encoded_len(&hash, 32) {
        return Err(ApiError::BadRequest(format!(
            "the blob hash must be base64url(SHA-256) — 43 characters — got {:?}",
            truncate(&hash)
        )));
    }
    let q = query(raw);
    let owner = owner_id(q.get("ownerId").map(String::as_str), "ownerId query parameter")?;
    Ok(Target { owner, hash, token_hash: relay_token_hash(&token) })
}

/// `PUT`: stores a chunk whose SHA-256 equals the path. A chunk the owner already has is
/// acknowledged before the body is read (a declared length over `MAX_BLOB_BYTES` was already
/// answered 413 by admission control).
pub async fn put(
    State(st): State<AppState>,
    Extension(client): Extension<ClientIp>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let deadline = deadline_of(&req);
    let body = req.into_body();
    let t = target(&headers, path, raw.as_deref())?;
    let (o, h, th) = (t.owner.clone(), t.hash.clone(), t.token_hash.clone());
    let presence = blocking(&st, move |s| s.blob_presence(&o, &th, &h)).await?;
    if presence == BlobPresence::Present {
        st.metrics.record_blob_put(true);
        return Ok((Owner(t.owner), axum::Json(BlobPutResponse { stored: true, duplicate: true })).into_response());
    }
    // Whether this upload may register its owner is known before its body: a refusal (no
    // token, over the rate) costs the relay no read.
    let reg_token = super::events::registration_token(&headers);
    let (register, reservation) = super::events::may_register(
        &st,
        client,
        presence == BlobPresence::UnknownOwner,
        &t.owner,
        reg_token.as_deref(),
    );
    if let MayRegister::Refused(why) = register {
        // The body (admitted, at most MAX_BLOB_BYTES) is read and dropped, so the client gets
        // this answer rather than a reset of a connection closed with its upload unread.
        let _ = body_bytes(&headers, body, st.limits.max_blob_bytes, "the blob chunk").await;
        return Err(super::store_failure(&st, StoreError::RegistrationRefused(why)));
    }
    let bytes = body_bytes(&headers, body, st.limits.max_blob_bytes, "the blob chunk").await?;
    super::admission::charge_bytes(&st, client, bytes.len());
    if bytes.is_empty() {
        return Err(ApiError::BadRequest("the blob chunk is empty".into()));
    }
    let actual = sha256_base64url(&bytes);
    if actual != t.hash {
        return Err(ApiError::HashMismatch { expected: t.hash, actual });
    }
    let (o, now) = (t.owner.clone(), now_iso());
    // What a stored chunk implies is done with the write, even if the client has gone.
    let task_state = st.clone();
    let out = blocking(&st, move |s| {
        let out = s.put_blob(&o, &t.token_hash, &t.hash, BlobData::Inline(&bytes), &now, register, Some(deadline))?;
        super::events::registered(reservation, out.registered);
        if out.registered {
            task_state.metrics.record_registration();
        }
        task_state.metrics.record_blob_put(out.duplicate);
        Ok(out)
    })
    .await?;
    Ok((Owner(t.owner), axum::Json(BlobPutResponse { stored: true, duplicate: out.duplicate })).into_response())
}

/// `GET`: the stored bytes — cacheable forever by the client (they are encrypted and
/// content-addressed), never by a shared cache (the request was authenticated).
pub async fn get(
    State(st): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let t = target(&headers, path, raw.as_deref())?;
    let o = t.owner.clone();
    let found = blocking(&st, move |s| s.get_blob(&o, &t.token_hash, &t.hash)).await?;
    let bytes = found.ok_or_else(|| ApiError::NotFound("no blob chunk with this hash for this owner".into()))?;
    if bytes.is_empty() {
        // Stored in object storage, but this relay runs without BLOB_STORE_URL.
        return Err(ApiError::Internal("a chunk lives in object storage but BLOB_STORE_URL is not set".into()));
    }
    Ok((
        Owner(t.owner),
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::CACHE_CONTROL, "private, max-age=31536000, immutable"),
        ],
        bytes,
    )
        .into_response())
}

/// `HEAD`: 200 if the owner has the chunk, 404 if not.
pub async fn head(
    State(st): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let t = target(&headers, path, raw.as_deref())?;
    let (o, h) = (t.owner.clone(), t.hash.clone());
    match blocking(&st, move |s| s.blob_presence(&o, &t.token_hash, &h)).await? {
        BlobPresence::Present => Ok((Owner(t.owner), StatusCode::OK).into_response()),
        BlobPresence::Absent => Err(ApiError::NotFound("no blob chunk with this hash for this owner".into())),
        BlobPresence::UnknownOwner => Err(ApiError::UnknownOwner),
    }
}
