//! Every error the API returns: a status code plus `{ "error": code, "message": text }`.
//! Client errors say what was wrong; internal errors are logged and never leak details.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use simplysync_protocol::wire::ErrorBody;

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
    /// The request body arrived slower than `MIN_BYTES_PER_SEC` (408 `request_timeout`).
    #[error("the request body arrived too slowly: {0}")]
    TooSlow(String),
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
    /// No new owners here (403 `registration_closed`).
    #[error("{0}")]
    RegistrationClosed(String),
    /// `REGISTRATION=token`: a new owner needs a token the app's operator signed, and the
    /// write's was missing or not accepted (403 `registration_token`).
    #[error("{0}")]
    RegistrationToken(String),
    /// This client is over a rate limit (429 `rate_limited`, with `Retry-After`).
    #[error("{message}")]
    RateLimited {
        /// What was limited.
        message: String,
        /// Seconds until it may try again.
        retry_after: u64,
    },
    /// The relay is at its in-flight limit (503 `overloaded`, with `Retry-After`).
    #[error("{0}")]
    Overloaded(String),
    /// The database is busy (503 `busy`, with `Retry-After`).
    #[error("{0}")]
    Busy(String),
    /// The relay's storage is full; nothing was stored (507 `storage_full`).
    #[error("{0}")]
    StorageFull(String),
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
            ApiError::Timeout(_) | ApiError::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Closed => StatusCode::GONE,
            ApiError::TooLarge(_) | ApiError::Quota(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RegistrationClosed(_) | ApiError::RegistrationToken(_) => StatusCode::FORBIDDEN,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Overloaded(_) | ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::StorageFull(_) => StatusCode::INSUFFICIENT_STORAGE,
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
            ApiError::Timeout(_) | ApiError::TooSlow(_) => "request_timeout",
            ApiError::Closed => "owner_closed",
            ApiError::TooLarge(_) => "payload_too_large",
            ApiError::Quota(_) => "quota_exceeded",
            ApiError::RegistrationClosed(_) => "registration_closed",
            ApiError::RegistrationToken(_) => "registration_token",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Overloaded(_) => "overloaded",
            ApiError::Busy(_) => "busy",
            ApiError::StorageFull(_) => "storage_full",
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
            StoreError::RegistrationRefused(r @ crate::store::Refusal::RateLimited) => {
                ApiError::RateLimited { message: r.to_string(), retry_after: 60 }
            }
            StoreError::RegistrationRefused(r @ crate::store::Refusal::Token(_)) => {
                ApiError::RegistrationToken(r.to_string())
            }
            StoreError::RegistrationRefused(r) => ApiError::RegistrationClosed(r.to_string()),
            e @ StoreError::StorageFull(_) => ApiError::StorageFull(e.to_string()),
            e @ StoreError::Busy(_) => ApiError::Busy(e.to_string()),
            StoreError::DeadlinePassed => ApiError::Timeout(0),
            StoreError::Backend(e) => ApiError::Internal(e.to_string()),
            StoreError::Setup(e) => ApiError::Internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let retry_after = match &self {
            ApiError::RateLimited { retry_after, .. } => Some(*retry_after),
            ApiError::Overloaded(_) | ApiError::Busy(_) => Some(1),
            _ => None,
        };
        let body = ErrorBody { error: self.code().to_owned(), message: self.to_string() };
        let mut resp = (self.status(), axum::Json(body)).into_response();
        if let Some(secs) = retry_after {
            resp.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
        }
        resp
    }
}
