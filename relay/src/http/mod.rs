//! The HTTP API: one router per area, one middleware that times out, counts and logs every
//! request, and permissive CORS around everything (preflight included).

pub mod blobs;
pub mod error;
pub mod events;
pub mod ops;
pub mod request;
pub mod status;
pub mod streams;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, IntoResponseParts, Response, ResponseParts};
use axum::routing::{get, post, put};
use axum::Router;
use simplysync::protocol::identity::sha256_base64url;
use simplysync::protocol::time::iso8601_from_ms;
use tower_http::cors::{AllowHeaders, AllowMethods, Any, CorsLayer};

use crate::config::Limits;
use crate::metrics::Metrics;
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
    /// Ops bearer token (None: ops disabled).
    pub admin_token: Option<Arc<str>>,
    /// Scheduled compaction period (shown on the ops page).
    pub compaction_interval_ms: u64,
    /// Per-request time limit.
    pub request_timeout_ms: u64,
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

/// A short pseudonymous tag of an owner id for logs: 8 characters of base64url(SHA-256(id)).
pub fn owner_tag(owner_id: &str) -> String {
    sha256_base64url(owner_id.as_bytes())[..8].to_owned()
}

/// The relay's wall clock as ISO-8601.
pub fn now_iso() -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0);
    iso8601_from_ms(ms)
}

/// Runs a store call on the blocking pool.
pub async fn blocking<T, F>(st: &AppState, f: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce(&dyn RelayStore) -> Result<T, StoreError> + Send + 'static,
{
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || f(store.as_ref()))
        .await
        .map_err(|e| ApiError::Internal(format!("store task failed: {e}")))?
        .map_err(ApiError::from)
}

async fn observe(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let method = req.method().clone();
    let started = Instant::now();
    let limit = Duration::from_millis(st.request_timeout_ms);
    let mut resp = match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::Timeout(st.request_timeout_ms).into_response(),
    };
    let status = resp.status().as_u16();
    if status == 408 || status == 413 {
        // The body may be unread: tell the client this connection cannot be reused.
        resp.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    st.metrics.record_request(&route, status);
    let owner = resp.extensions().get::<Owner>().map(|o| owner_tag(&o.0));
    tracing::info!(
        %method,
        route,
        status,
        owner = owner.as_deref().unwrap_or("-"),
        ms = (started.elapsed().as_secs_f64() * 1000.0 * 10.0).round() / 10.0,
        "request"
    );
    resp
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
    Router::new()
        .route("/health", get(status::health))
        .route("/v1/events", post(events::push).get(events::pull))
        .route("/v1/streams/compact", post(streams::compact))
        .route("/v1/owner/close", post(streams::close))
        .route("/v1/blobs/{hash}", put(blobs::put).get(blobs::get).head(blobs::head))
        .route("/v1/status", get(status::status))
        .route("/v1/usage", get(status::usage))
        .route("/metrics", get(ops::metrics))
        .route("/ops", get(ops::page))
        .route("/ops/stats", get(ops::stats))
        .route("/ops/compact", post(ops::compact))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), observe))
        .layer(cors)
        .with_state(state)
}
