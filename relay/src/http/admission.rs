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
use super::pace::{Held, Pace, Paced};
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
    per_client: Arc<ClientShares>,
}

impl Budget {
    /// A budget of `requests` requests and `bytes` bytes; one client address may hold
    /// `per_client` of those requests (0: no per-client caps) and an eighth of the bytes, or
    /// `largest` (the largest body or answer a route has) if that is more.
    pub fn new(requests: usize, bytes: u64, per_client: usize, largest: u64) -> Budget {
        let unit = 1024;
        let permits = (bytes / unit).clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize) as u64) as u32;
        Budget {
            requests: Arc::new(Semaphore::new(requests)),
            bytes: Arc::new(Semaphore::new(permits as usize)),
            unit,
            byte_units: permits,
            per_client: Arc::new(ClientShares {
                max_requests: per_client,
                max_bytes: (bytes / 8).max(largest),
                held: Mutex::new(HashMap::new()),
            }),
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

/// What each client address (an IPv6 client by its /64) holds of the in-flight budget:
/// requests, and bytes of bodies and answers, each capped, so one client cannot take the
/// budget from everyone else. Entries exist only while a client holds something.
#[derive(Debug)]
struct ClientShares {
    /// Requests one client may have in flight (0: no caps at all).
    max_requests: usize,
    /// Bytes one client may hold: an eighth of the budget, or the largest body a route takes.
    max_bytes: u64,
    held: Mutex<HashMap<IpAddr, (usize, u64)>>,
}

/// One request's share of its client's: given back when dropped (with its answer, once sent).
#[derive(Debug)]
struct ClientShare {
    shares: Arc<ClientShares>,
    key: IpAddr,
    bytes: u64,
}

/// Which of a client's caps a request would pass.
enum OverShare {
    Requests,
    Bytes,
}

impl ClientShares {
    fn take(self: &Arc<Self>, ip: IpAddr, bytes: u64) -> Result<ClientShare, OverShare> {
        let key = crate::ratelimit::client_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (n, b) = held.get(&key).copied().unwrap_or((0, 0));
        if n >= self.max_requests {
            return Err(OverShare::Requests);
        }
        if b + bytes > self.max_bytes {
            return Err(OverShare::Bytes);
        }
        held.insert(key, (n + 1, b + bytes));
        Ok(ClientShare { shares: self.clone(), key, bytes })
    }
}

impl ClientShare {
    /// Holds `bytes` (the answer's) in place of the body's; false, holding nothing more, if
    /// that passes the client's byte cap.
    fn hold(&mut self, bytes: u64) -> bool {
        let mut held = self.shares.held.lock().unwrap_or_else(|p| p.into_inner());
        let Some((_, b)) = held.get_mut(&self.key) else { return false };
        let others = *b - self.bytes;
        // A lone answer always fits (as in the whole budget): a client reading nothing else
        // can always be sent the largest page.
        if bytes > self.bytes && others > 0 && others + bytes > self.shares.max_bytes {
            return false;
        }
        *b = others + bytes;
        self.bytes = bytes;
        true
    }
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut held = self.shares.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((n, b)) = held.get_mut(&self.key) {
            *n -= 1;
            *b -= self.bytes;
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
    // A body of unknown length counts as the route's limit (it is read no further than that).
    let is_read = matches!(*req.method(), Method::GET | Method::HEAD);
    let body = declared.unwrap_or(if is_read { 0 } else { limit });
    // One client's share: its requests and bytes in flight.
    let client = req.extensions().get::<ClientIp>().and_then(|c| c.0);
    let mut share = match client {
        Some(ip) if st.budget.per_client.max_requests > 0 => match st.budget.per_client.take(ip, body) {
            Ok(share) => Some(share),
            Err(over) => {
                st.metrics.record_rejection("client_in_flight");
                let message = match over {
                    OverShare::Requests => format!(
                        "this client has {} requests in flight (MAX_IN_FLIGHT_PER_CLIENT); try again when one has finished",
                        st.budget.per_client.max_requests
                    ),
                    OverShare::Bytes => format!(
                        "this client holds its share of {} bytes of requests and answers in flight (MAX_IN_FLIGHT_BYTES / 8); try again when one has finished",
                        st.budget.per_client.max_bytes
                    ),
                };
                return ApiError::RateLimited { message, retry_after: 1 }.into_response();
            }
        },
        _ => None,
    };
    let Some(permits) = st.budget.take(body) else {
        st.metrics.record_rejection("overloaded");
        return ApiError::Overloaded("the relay is handling as many requests as it takes; try again shortly".into())
            .into_response();
    };
    let pace = Pace { min_bytes_per_sec: st.admission.min_bytes_per_sec, grace: st.admission.pace_grace() };
    let req = if pace.min_bytes_per_sec > 0 { req.map(|b| Body::new(Paced::request(b, pace))) } else { req };
    let method = req.method().clone();
    let resp = next.run(req).await;
    drop(permits);
    // The answer's bytes stay in the budget, and in its client's share, until it is sent (a
    // slow reader holds them for no longer than MIN_BYTES_PER_SEC allows: net.rs disconnects
    // it). A HEAD sends none, and the operator's pages are never held back.
    let hint = http_body::Body::size_hint(resp.body());
    let size = hint.exact().unwrap_or_else(|| hint.lower());
    if size == 0 || method == Method::HEAD || is_token_route(&route) {
        return resp;
    }
    let hold = st.budget.take_response(size);
    let shared = share.as_mut().is_none_or(|s| s.hold(size));
    // A read can be asked again; a write's answer is sent whatever the budget (what it did is
    // done, and its answer is small).
    if method == Method::GET && !shared {
        st.metrics.record_rejection("client_bytes");
        let message = format!(
            "this client holds its share of {} bytes of answers not yet taken (MAX_IN_FLIGHT_BYTES / 8); try again when it has read them",
            st.budget.per_client.max_bytes
        );
        return ApiError::RateLimited { message, retry_after: 1 }.into_response();
    }
    if method == Method::GET && hold.is_none() {
        st.metrics.record_rejection("overloaded");
        return ApiError::Overloaded("the relay is sending as many bytes as it holds; try again shortly".into())
            .into_response();
    }
    resp.map(|b| Body::new(Held::new(b, (hold, share))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shares(max_requests: usize, max_bytes: u64) -> Arc<ClientShares> {
        Arc::new(ClientShares { max_requests, max_bytes, held: Mutex::new(HashMap::new()) })
    }

    fn held(s: &ClientShares) -> Option<(usize, u64)> {
        s.held.lock().unwrap().get(&"10.0.0.1".parse::<IpAddr>().unwrap()).copied()
    }

    #[test]
    fn a_share_counts_requests_and_bytes_until_dropped_and_refuses_past_either_cap() {
        let s = shares(2, 1000);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let a = s.take(ip, 600).ok().unwrap();
        assert!(matches!(s.take(ip, 600), Err(OverShare::Bytes)));
        let b = s.take(ip, 100).ok().unwrap();
        assert!(matches!(s.take(ip, 0), Err(OverShare::Requests)));
        assert!(s.take("10.0.0.2".parse().unwrap(), 1000).is_ok(), "another address has its own share");
        assert_eq!(held(&s), Some((2, 700)));
        drop((a, b));
        assert_eq!(held(&s), None, "nothing held, no entry");
    }

    #[test]
    fn an_answer_takes_the_place_of_its_body_and_a_lone_answer_always_fits() {
        let s = shares(8, 1000);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let mut lone = s.take(ip, 900).ok().unwrap();
        assert!(lone.hold(5000), "nothing else held: the largest answer is sent");
        assert_eq!(held(&s), Some((1, 5000)));
        assert!(lone.hold(10), "shrinking always fits");
        let mut other = s.take(ip, 0).ok().unwrap();
        assert!(!other.hold(995), "with another answer held, past the cap");
        assert_eq!(held(&s), Some((2, 10)), "a refused hold changes nothing");
        assert!(other.hold(990));
        drop(lone);
        drop(other);
        assert_eq!(held(&s), None);
    }
}
