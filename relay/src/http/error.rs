//! Every error the API returns: a status code plus `{ "error": code, "message": text }`.
//! Client errors say what was wrong; internal errors are logged and never leak details.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use simplysync::protocol::wire::ErrorBody;

use crate::store::StoreError;

/// An API error.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A parameter or field is missing or malformed (400 `bad_request`).
    #[error("{0}")]
    BadRequest(String),
    /// The body is not the JSON the endpoint takes (400 `invalid_json`).
    #[error("{0}")]
    InvalidJson(String),
    /// An envelope of a push is invalid; nothing was stored (400 `invalid_envelope`).
    #[error("events[{index}]: {reason}")]
    InvalidEnvelope {
        /// Position in the batch.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A blob's body does not hash to its path (400 `hash_mismatch`).
    #[error("the body's SHA-256 is {actual}, not the {expected} named in the path")]
    HashMismatch {
        /// From the path.
        expected: String,
        /// Computed.
        actual: String,
    },
    /// Missing, malformed or wrong bearer token (401 `unauthorized`).
    #[error("{0}")]
    Unauthorized(String),
    /// Not found (404 `not_found`).
    #[error("{0}")]
    NotFound(String),
    /// The owner has never pushed here (404 `unknown_owner`).
    #[error("unknown owner: nothing was ever pushed for this ownerId on this relay")]
    UnknownOwner,
    /// Method not allowed on this path (405 `method_not_allowed`).
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// The request took too long (408 `request_timeout`).
    #[error("request timed out after {0} ms")]
    Timeout(u64),
    /// The owner was closed (410 `owner_closed`).
    #[error("this owner was closed (POST /v1/owner/close); use a new recovery phrase")]
    Closed,
    /// Over a size or count limit; nothing was stored (413 `payload_too_large`).
    #[error("{0}")]
    TooLarge(String),
    /// Over a storage quota; nothing was stored (413 `quota_exceeded`).
    #[error("{0}")]
    Quota(String),
    /// Ops endpoints are disabled or the admin token is wrong (403 `forbidden`).
    #[error("{0}")]
    Forbidden(String),
    /// Something broke on the relay (500 `internal`); details are only logged.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_)
            | ApiError::InvalidJson(_)
            | ApiError::InvalidEnvelope { .. }
            | ApiError::HashMismatch { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::UnknownOwner => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Closed => StatusCode::GONE,
            ApiError::TooLarge(_) | ApiError::Quota(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable error code of the body.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::InvalidEnvelope { .. } => "invalid_envelope",
            ApiError::HashMismatch { .. } => "hash_mismatch",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::UnknownOwner => "unknown_owner",
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::Timeout(_) => "request_timeout",
            ApiError::Closed => "owner_closed",
            ApiError::TooLarge(_) => "payload_too_large",
            ApiError::Quota(_) => "quota_exceeded",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unauthorized => {
                ApiError::Unauthorized("the bearer token does not match this owner's registered token".into())
            }
            StoreError::UnknownOwner => ApiError::UnknownOwner,
            StoreError::Closed => ApiError::Closed,
            e @ (StoreError::OwnerQuota { .. } | StoreError::TotalQuota { .. }) => {
                ApiError::Quota(format!("{e}; nothing was stored"))
            }
            StoreError::Database(e) => ApiError::Internal(e.to_string()),
            StoreError::Setup(e) => ApiError::Internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let body = ErrorBody { error: self.code().to_owned(), message: self.to_string() };
        (self.status(), axum::Json(body)).into_response()
    }
}
