//! Admission control, before any work: a request whose declared body is larger than its route
//! takes is answered 413 at once (a blob upload declaring a terabyte never reaches the
//! database); a client over its failed-authentication rate, its byte budget or its
//! `MAX_IN_FLIGHT_PER_CLIENT` gets 429; and when the relay already handles
//! `MAX_IN_FLIGHT_REQUESTS` requests or holds `MAX_IN_FLIGHT_BYTES` of bodies and responses,
//! 503 with `Retry-After` — rather than queueing without end. Bodies and responses must move
//! at `MIN_BYTES_PER_SEC` (pace.rs); a response's bytes stay in the budget until it is sent.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;
use super::pace::{Held, Pace, Paced, GRACE};
use super::{AppState, ClientIp};
use axum::body::Body;

/// Requests, and bytes of bodies and responses, in flight.
#[derive(Debug)]
pub struct Budget {
    requests: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    /// Bytes one permit stands for (semaphores count in u32 permits).
    unit: u64,
    /// Permits of `bytes` in all.
    byte_units: u32,
    per_client: Arc<ClientSlots>,
}

impl Budget {
    /// A budget of `requests` requests (`per_client` of them from one client address; 0: no
    /// cap) and `bytes` bytes.
    pub fn new(requests: usize, bytes: u64, per_client: usize) -> Budget {
        let unit = 1024;
        let permits = (bytes / unit).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u64) as u32;
        Budget {
            requests: Arc::new(Semaphore::new(requests)),
            bytes: Arc::new(Semaphore::new(permits as usize)),
            unit,
            byte_units: permits,
            per_client: Arc::new(ClientSlots { cap: per_client, held: Mutex::new(HashMap::new()) }),
        }
    }

    /// A response's `size` bytes, held until it is sent (at most the whole budget, so any
    /// response can be sent once the relay is idle); None when they do not fit now.
    fn take_response(&self, size: u64) -> Option<OwnedSemaphorePermit> {
        let units = size.div_ceil(self.unit).clamp(1, u64::from(self.byte_units)) as u32;
        self.bytes.clone().try_acquire_many_owned(units).ok()
    }

    fn take(&self, body: u64) -> Option<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>)> {
        let r = self.requests.clone().try_acquire_owned().ok()?;
        if body == 0 {
            return Some((r, None));
        }
        let units = body.div_ceil(self.unit).min(u32::MAX as u64) as u32;
        let b = self.bytes.clone().try_acquire_many_owned(units).ok()?;
        Some((r, Some(b)))
    }
}

/// Requests in flight per client address (an IPv6 client by its /64): one client cannot take
/// every place in the budget. Entries exist only while a request is in flight.
#[derive(Debug)]
struct ClientSlots {
    cap: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// A place of one client's, given back when dropped.
struct ClientSlot {
    slots: Arc<ClientSlots>,
    key: IpAddr,
}

impl ClientSlots {
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let key = crate::ratelimit::client_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(key).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot { slots: self.clone(), key })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// The largest body a route takes.
fn body_limit(st: &AppState, method: &Method, route: &str) -> u64 {
    let l = &st.limits;
    match (method, route) {
        (&Method::POST, "/v1/events") => l.max_request_bytes as u64,
        (&Method::PUT, "/v1/blobs/{hash}") => l.max_blob_bytes as u64,
        (&Method::POST, "/v1/streams/compact" | "/v1/owner/close") => l.max_control_bytes as u64,
        _ => l.max_control_bytes as u64,
    }
}

/// Routes behind the admin or metrics token.
pub(crate) fn is_token_route(route: &str) -> bool {
    route == "/metrics" || route == "/ops" || route.starts_with("/ops/")
}

/// The routes whose bodies are stored: a push and a blob chunk (`CLIENT_BYTES_PER_HOUR`).
fn is_write_route(method: &Method, route: &str) -> bool {
    matches!((method, route), (&Method::POST, "/v1/events") | (&Method::PUT, "/v1/blobs/{hash}"))
}

/// Charges `bytes` of a write's body to `client`'s byte budget, if there is one.
pub(super) fn charge_bytes(st: &AppState, client: ClientIp, bytes: usize) {
    if let (Some(limit), Some(ip)) = (&st.client_bytes, client.0) {
        limit.spend_n(ip, bytes as u64);
    }
}

/// Checks the declared size, the client's failed authentications and byte budget, and the
/// in-flight budget.
pub async fn admit(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let limit = body_limit(&st, req.method(), &route);
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        st.metrics.record_rejection("too_large");
        let n = declared.unwrap_or_default();
        return ApiError::TooLarge(format!("the body declares {n} bytes; {route} takes at most {limit}"))
            .into_response();
    }
    // Owners' tokens, and the admin and metrics tokens: an address that guesses too often waits.
    if route.starts_with("/v1/") || is_token_route(&route) {
        if let Some(ClientIp(Some(ip))) = req.extensions().get::<ClientIp>().copied() {
            if let Some(wait) = st.auth_failures.check(ip) {
                st.metrics.record_rejection("rate_limited_auth");
                return ApiError::RateLimited {
                    message: "too many failed authentications from this client; try again later".into(),
                    retry_after: wait.as_secs().max(1),
                }
                .into_response();
            }
        }
    }
    // Writes: an address that has sent its hour's bytes waits (checked before the body is read;
    // the handler charges what it read).
    if is_write_route(req.method(), &route) {
        if let (Some(limit), Some(ClientIp(Some(ip)))) = (&st.client_bytes, req.extensions().get::<ClientIp>().copied())
        {
            if let Some(wait) = limit.check(ip) {
                st.metrics.record_rejection("rate_limited_bytes");
                return ApiError::RateLimited {
                    message: format!(
                        "this client sent its CLIENT_BYTES_PER_HOUR ({} bytes) of writes; try again later",
                        st.admission.client_bytes_per_hour
                    ),
                    retry_after: wait.as_secs().max(1),
                }
                .into_response();
            }
        }
    }
    // Long-polls hold no place in the budget: they wait, idle, under limits of their own. Probes
    // neither: a busy relay is still alive and ready (a load balancer must not drain every
    // replica at once because they are all busy).
    if route == "/v1/events/wait" || route == "/health" || route == "/ready" {
        return next.run(req).await;
    }
    // One client's requests in flight.
    let client = req.extensions().get::<ClientIp>().and_then(|c| c.0);
    let slot = match client {
        Some(ip) if st.budget.per_client.cap > 0 => match st.budget.per_client.take(ip) {
            Some(slot) => Some(slot),
            None => {
                st.metrics.record_rejection("client_in_flight");
                return ApiError::RateLimited {
                    message: format!(
                        "this client has {} requests in flight (MAX_IN_FLIGHT_PER_CLIENT); try again when one has finished",
                        st.budget.per_client.cap
                    ),
                    retry_after: 1,
                }
                .into_response();
            }
        },
        _ => None,
    };
    // A body of unknown length counts as the route's limit (it is read no further than that).
    let Some(permits) =
        st.budget.take(declared.unwrap_or(if matches!(*req.method(), Method::GET | Method::HEAD) { 0 } else { limit }))
    else {
        st.metrics.record_rejection("overloaded");
        return ApiError::Overloaded("the relay is handling as many requests as it takes; try again shortly".into())
            .into_response();
    };
    let pace = Pace { min_bytes_per_sec: st.admission.min_bytes_per_sec, grace: GRACE };
    let req = if pace.min_bytes_per_sec > 0 { req.map(|b| Body::new(Paced::request(b, pace))) } else { req };
    let resp = next.run(req).await;
    drop(permits);
    drop(slot);
    // The response's bytes stay in the budget until it is sent (a slow reader holds them for
    // no longer than MIN_BYTES_PER_SEC allows: net.rs disconnects it).
    let hint = http_body::Body::size_hint(resp.body());
    let size = hint.exact().unwrap_or_else(|| hint.lower());
    if size == 0 {
        return resp;
    }
    let Some(hold) = st.budget.take_response(size) else {
        st.metrics.record_rejection("overloaded");
        return ApiError::Overloaded("the relay is sending as many bytes as it holds; try again shortly".into())
            .into_response();
    };
    resp.map(|b| Body::new(Held::new(b, hold)))
}
