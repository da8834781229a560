//! Reading requests defensively: bearer tokens, owner ids, query strings and bodies, each
//! refused with a message that says what was wrong.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::Deserialize;
use simplysync_protocol::base64url;

use super::error::ApiError;

/// Longest bearer token accepted (the spec's are 22 or 43 characters).
const MAX_TOKEN_LEN: usize = 512;

/// The token of `Authorization: Bearer <token>`.
pub fn bearer(headers: &HeaderMap) -> Result<String, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::Unauthorized("missing Authorization: Bearer <relayAuth> header".into()))?;
    let text =
        value.to_str().map_err(|_| ApiError::Unauthorized("the Authorization header is not printable ASCII".into()))?;
    let (scheme, token) = text
        .split_once(' ')
        .ok_or_else(|| ApiError::Unauthorized("expected Authorization: Bearer <relayAuth>".into()))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(ApiError::Unauthorized(format!("unsupported authorization scheme {scheme:?}; use Bearer")));
    }
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_LEN || token.contains(' ') {
        return Err(ApiError::Unauthorized("malformed bearer token".into()));
    }
    Ok(token.to_owned())
}

/// Validates an owner id: base64url of 16 bytes (22 characters), as every identity derives.
pub fn owner_id(value: Option<&str>, field: &str) -> Result<String, ApiError> {
    let v = value.ok_or_else(|| ApiError::BadRequest(format!("missing {field}")))?;
    if v.len() != 22 || !base64url::is_encoded_len(v, 16) {
        return Err(ApiError::BadRequest(format!(
            "invalid {field}: expected 22 base64url characters (16 bytes), got {:?}",
            truncate(v)
        )));
    }
    Ok(v.to_owned())
}

/// Shortens external text for error messages.
pub fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// The query string's parameters (first value of each name).
pub fn query(raw: Option<&str>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        map.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    map
}

/// Reads a whole body, refusing more than `limit` bytes with 413 (early, from Content-Length,
/// when the client declares it). The body's chunks are joined once, not copied again.
pub async fn body_bytes(headers: &HeaderMap, body: Body, limit: usize, what: &str) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::TooLarge(format!("{what} is larger than the limit of {limit} bytes"));
    if let Some(len) = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()) {
        if len > limit as u64 {
            return Err(too_large());
        }
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) if super::pace::is_too_slow(e.as_ref()) => Err(ApiError::TooSlow(e.to_string())),
        Err(e) => Err(ApiError::BadRequest(format!("could not read the request body: {e}"))),
    }
}

/// Parses a JSON body into `T`, with serde's message (field, expected type, position).
pub fn json<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::InvalidJson("the request body is empty; expected a JSON object".into()));
    }
    serde_json::from_slice(bytes).map_err(|e| ApiError::InvalidJson(format!("invalid JSON body: {e}")))
}
