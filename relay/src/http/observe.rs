//! Every request gets an id (`x-request-id`: the client's, if it sent a sane one, else a new
//! one), a deadline (`REQUEST_TIMEOUT_MS`; past it, 408), one log line — method, route, status,
//! owner tag, peer address, client address, request id, duration — and its metrics.

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use simplysync_protocol::base64url;
use simplysync_protocol::entropy::{random_bytes, OsEntropy};

use super::error::ApiError;
use super::{owner_tag, AppState, ClientIp, Owner, Peer, RequestDeadline};

/// The request's id, for its log line.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn sane(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b))
}

/// Gives the request an id and returns it as `x-request-id`.
pub async fn request_id(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| sane(v))
        .map(str::to_owned)
        .unwrap_or_else(|| base64url::encode(&random_bytes::<9>(&mut OsEntropy).unwrap_or([0; 9])));
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(X_REQUEST_ID, v);
    }
    resp
}

/// The client's address: the last entry of `CLIENT_IP_HEADER` (the one the trusted proxy in
/// front appended; earlier entries are whatever the client claimed) — across every line of that
/// header, the last line's last entry — else the peer.
fn client_ip(st: &AppState, req: &Request) -> ClientIp {
    if let Some(name) = &st.admission.client_ip_header {
        let from_header = req
            .headers()
            .get_all(name.as_str())
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse().ok());
        if from_header.is_some() {
            return ClientIp(from_header);
        }
    }
    ClientIp(req.extensions().get::<Peer>().map(|p| p.0.ip()))
}

/// Deadline, timeout, logging and metrics.
pub async fn observe(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let method = req.method().clone();
    let started = Instant::now();
    let limit = Duration::from_millis(st.request_timeout_ms);
    req.extensions_mut().insert(RequestDeadline(started + limit));
    let client = client_ip(&st, &req);
    req.extensions_mut().insert(client);
    let peer = req.extensions().get::<Peer>().map(|p| p.0.to_string());
    let id = req.extensions().get::<RequestId>().map(|r| r.0.clone()).unwrap_or_default();
    st.metrics.request_started();
    let mut resp = match tokio::time::timeout(limit, next.run(req)).await {
        Ok(resp) => resp,
        Err(_) => ApiError::Timeout(st.request_timeout_ms).into_response(),
    };
    let status = resp.status().as_u16();
    if status == 408 || status == 413 {
        // The body may be unread: tell the client this connection cannot be reused.
        resp.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    // A failed authentication: an owner's (401), or a wrong admin or metrics token (401 without
    // one, 403 with the wrong one) — each spends the address's budget of failures.
    if status == 401 || (status == 403 && super::admission::is_token_route(&route)) {
        if let Some(ip) = client.0 {
            st.auth_failures.spend(ip);
        }
    }
    let elapsed = started.elapsed();
    st.metrics.record_request(method_label(&method), &route, status, elapsed.as_secs_f64());
    let owner = resp.extensions().get::<Owner>().map(|o| owner_tag(&o.0));
    tracing::info!(
        %method,
        route,
        status,
        owner = owner.as_deref().unwrap_or("-"),
        peer = peer.as_deref().unwrap_or("-"),
        client = %client.0.map_or_else(|| "-".to_owned(), |ip| ip.to_string()),
        request_id = %id,
        ms = (elapsed.as_secs_f64() * 1000.0 * 10.0).round() / 10.0,
        "request"
    );
    resp
}

/// A request's method as the metrics count it: the standard ones by name, anything a client
/// invents as `other` (each invented name would otherwise be a series of its own, for good).
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method as M;
    match *method {
        M::GET => "GET",
        M::POST => "POST",
        M::PUT => "PUT",
        M::DELETE => "DELETE",
        M::HEAD => "HEAD",
        M::OPTIONS => "OPTIONS",
        M::PATCH => "PATCH",
        M::TRACE => "TRACE",
        M::CONNECT => "CONNECT",
        _ => "other",
    }
}
