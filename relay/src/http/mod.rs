//! The HTTP API: one router per area, wrapped (outermost first) in: request ids, logging,
//! metrics and the per-request deadline ([`observe`]); admission control — the in-flight
//! budget, the per-route body limit checked on the declared length before any other work, and
//! the per-address limit on failed authentications ([`admission`]); and permissive CORS.

pub mod admission;
pub mod blobs;
pub mod error;
pub mod events;
pub mod observe;
pub mod ops;
pub mod pace;
pub mod request;
pub mod status;
pub mod streams;
pub mod wait;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::middleware::{from_fn, from_fn_with_state};
use axum::response::{IntoResponseParts, ResponseParts};
use axum::routing::{get, post, put};
use axum::Router;
use simplysync_protocol::identity::sha256_base64url;
use tower_http::cors::{AllowHeaders, AllowMethods, Any, CorsLayer};

pub use crate::clock::now_iso;
use crate::config::{Admission, Limits};
use crate::metrics::Metrics;
use crate::ratelimit::RateLimit;
use crate::store::{RelayStore, StoreError};
use error::ApiError;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The storage backend.
    pub store: Arc<dyn RelayStore>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Size and batch limits.
    pub limits: Arc<Limits>,
    /// Admission control settings.
    pub admission: Arc<Admission>,
    /// Requests and body bytes in flight.
    pub budget: Arc<admission::Budget>,
    /// Per-address limit on new owners.
    pub registrations: Arc<RateLimit>,
    /// Per-address limit on failed authentications.
    pub auth_failures: Arc<RateLimit>,
    /// `REGISTRATION=token`: the keys whose tokens register owners (None: no token needed).
    pub registration_keys: Option<Arc<crate::registration::RegistrationKeys>>,
    /// Per-address budget of bytes written (`CLIENT_BYTES_PER_HOUR`; None: no budget).
    pub client_bytes: Option<Arc<RateLimit>>,
    /// Ops bearer token (None: ops disabled).
    pub admin_token: Option<Arc<str>>,
    /// Bearer token `/metrics` requires (None: open).
    pub metrics_token: Option<Arc<str>>,
    /// Scheduled compaction period (shown on the ops page).
    pub compaction_interval_ms: u64,
    /// Per-request time limit.
    pub request_timeout_ms: u64,
    /// Set on shutdown: stops a running compaction at a safe point.
    pub cancel: Arc<AtomicBool>,
    /// Long-polls waiting for owners' heads to move.
    pub live: Arc<crate::live::Live>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("limits", &self.limits).finish_non_exhaustive()
    }
}

/// The owner a response concerns; the request log shows a hash prefix of it, never the id.
#[derive(Debug, Clone)]
pub struct Owner(pub String);

impl IntoResponseParts for Owner {
    type Error = Infallible;
    fn into_response_parts(self, mut res: ResponseParts) -> Result<ResponseParts, Infallible> {
        res.extensions_mut().insert(self);
        Ok(res)
    }
}

/// The peer's socket address, set by the server for every connection (absent in-process).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// When this request's time is up: writes not started by then are skipped.
#[derive(Debug, Clone, Copy)]
pub struct RequestDeadline(pub Instant);

/// The client's address: from `CLIENT_IP_HEADER` behind a trusted proxy (its last entry),
/// else the peer's. `None` in-process.
#[derive(Debug, Clone, Copy)]
pub struct ClientIp(pub Option<IpAddr>);

/// A short pseudonymous tag of an owner id for logs: 8 characters of base64url(SHA-256(id)).
pub fn owner_tag(owner_id: &str) -> String {
    sha256_base64url(owner_id.as_bytes())[..8].to_owned()
}

/// The deadline of the request `req` carries (far ahead in tests without the middleware).
pub fn deadline_of(req: &Request) -> Instant {
    req.extensions().get::<RequestDeadline>().map_or_else(|| Instant::now() + Duration::from_secs(3600), |d| d.0)
}

/// Runs a store call on the blocking pool; a database error is counted by kind.
pub async fn blocking<T, F>(st: &AppState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&dyn RelayStore) -> Result<T, StoreError> + Send + 'static,
{
    let store = st.store.clone();
    let out = tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| ApiError::Internal(format!("store task failed: {e}")))?;
    out.map_err(|e| store_failure(st, e))
}

/// A store error as the client hears it, counted in the metrics.
pub fn store_failure(st: &AppState, e: StoreError) -> ApiError {
    match &e {
        StoreError::OwnerQuota { .. } => st.metrics.record_quota_rejection("owner"),
        StoreError::TotalQuota { .. } => st.metrics.record_quota_rejection("total"),
        StoreError::StorageFull(_) | StoreError::Busy(_) | StoreError::Backend(_) | StoreError::Setup(_) => {
            st.metrics.record_db_error(e.kind())
        }
        StoreError::RegistrationRefused(_) => st.metrics.record_rejection("registration"),
        _ => {}
    }
    ApiError::from(e)
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such endpoint".into())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// The whole API as a router (tests drive it in-process with `oneshot`).
pub fn app(state: AppState) -> Router {
    // Mirror the preflight's requested headers: a `*` in Access-Control-Allow-Headers does not
    // cover `Authorization` (Fetch standard), and every authenticated call sends it.
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods(AllowMethods::mirror_request())
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(Any)
        .max_age(Duration::from_secs(86_400));
    api_routes()
        .route("/metrics", get(ops::metrics))
        .layer(from_fn_with_state(state.clone(), admission::admit))
        .layer(from_fn_with_state(state.clone(), observe::observe))
        .layer(from_fn(observe::request_id))
        .layer(cors)
        .with_state(state)
}

/// The API without `/metrics` (served on `METRICS_ADDR` instead).
pub fn app_without_metrics(state: AppState) -> Router {
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods(AllowMethods::mirror_request())
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(Any)
        .max_age(Duration::from_secs(86_400));
    api_routes()
        .layer(from_fn_with_state(state.clone(), admission::admit))
        .layer(from_fn_with_state(state.clone(), observe::observe))
        .layer(from_fn(observe::request_id))
        .layer(cors)
        .with_state(state)
}

/// `/metrics` alone, for its own listener.
pub fn metrics_app(state: AppState) -> Router {
    Router::new().route("/metrics", get(ops::metrics)).fallback(not_found).with_state(state)
}

fn api_routes() -> Router<AppState> {
    Router::new()
        .route("/health", get(status::health))
        .route("/ready", get(status::ready))
        .route("/v1/events", post(events::push).get(events::pull))
        .route("/v1/events/wait", get(wait::wait))
        .route("/v1/streams/compact", post(streams::compact))
        .route("/v1/owner/close", post(streams::close))
        .route("/v1/blobs/{hash}", put(blobs::put).get(blobs::get).head(blobs::head))
        .route("/v1/status", get(status::status))
        .route("/v1/usage", get(status::usage))
        .route("/ops", get(ops::page))
        .route("/ops/stats", get(ops::stats))
        .route("/ops/compact", post(ops::compact))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
}
