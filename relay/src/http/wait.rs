//! `GET /v1/events/wait?ownerId&after&timeoutMs`: a long-poll that answers as soon as the
//! owner's log moves past `after` (200 `{headSeq, epoch}`), or 204 when `timeoutMs` passes
//! first. Authenticated like a pull. Waiting requests are bounded by their own limits
//! (`LIVE_MAX_WAITERS`, `LIVE_MAX_WAITERS_PER_OWNER`), not by the in-flight budget.

use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use simplysync_protocol::identity::relay_token_hash;
use simplysync_protocol::wire::WaitResponse;

use super::error::ApiError;
use super::request::{bearer, owner_id, query};
use super::{blocking, AppState, Owner};
use crate::live::{WaitRefused, Woken};

/// `timeoutMs` when none is given.
pub const DEFAULT_WAIT_MS: u64 = 25_000;
/// The longest wait anyone gets.
pub const MAX_WAIT_MS: u64 = 60_000;

/// The wait a request gets: asked for (default 25 s), at most 60 s, and short enough to answer
/// well within the request and idle timeouts.
fn wait_ms(asked: Option<&String>, request_timeout_ms: u64, idle_timeout_ms: u64) -> u64 {
    let asked = asked.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(DEFAULT_WAIT_MS);
    let ceiling = (request_timeout_ms.min(idle_timeout_ms) * 9 / 10).min(MAX_WAIT_MS);
    asked.min(ceiling)
}

/// `GET /v1/events/wait`.
pub async fn wait(
    State(st): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    if !st.live.enabled() {
        return Err(ApiError::NotFound("no such endpoint (live notices are off on this relay: poll)".into()));
    }
    let token = bearer(&headers)?;
    let q = query(raw.as_deref());
    let owner = owner_id(q.get("ownerId").map(String::as_str), "ownerId query parameter")?;
    let after = match q.get("after").map(|s| s.trim()).filter(|s| !s.is_empty()) {
        None => 0,
        Some(s) => {
            s.parse::<u64>().map_err(|_| ApiError::BadRequest(format!("after must be a seq (digits), not {s:?}")))?
        }
    };
    let timeout =
        Duration::from_millis(wait_ms(q.get("timeoutMs"), st.request_timeout_ms, st.admission.idle_timeout_ms));
    // Authenticated before it takes a waiter slot (a client with a wrong token holds none, and
    // hears 401, not 503); an owner already past `after` is answered at once.
    let (o, th) = (owner.clone(), relay_token_hash(&token));
    let account = blocking(&st, move |s| s.account(&o, &th, 0)).await?;
    if account.head_seq > after {
        let body = WaitResponse { head_seq: account.head_seq, epoch: Some(st.store.epoch()) };
        return Ok((Owner(owner), axum::Json(body)).into_response());
    }
    // Registered before the head is read again: a push committed in between still wakes it.
    let waiter = st.live.subscribe(&owner).map_err(|e| match e {
        WaitRefused::Full => {
            ApiError::Overloaded("this relay holds as many waiting requests as it takes; poll instead".into())
        }
        WaitRefused::OwnerFull => ApiError::RateLimited {
            message: "this owner has as many waiting requests as it may; poll instead".into(),
            retry_after: 5,
        },
    })?;
    let (o, th) = (owner.clone(), relay_token_hash(&token));
    let account = blocking(&st, move |s| s.account(&o, &th, 0)).await?;
    let woken =
        if account.head_seq > after { Woken::Moved(account.head_seq) } else { waiter.wait(after, timeout).await };
    match woken {
        Woken::Moved(head) => {
            let body = WaitResponse { head_seq: head, epoch: Some(st.store.epoch()) };
            Ok((Owner(owner), axum::Json(body)).into_response())
        }
        Woken::TimedOut | Woken::Closing => Ok((Owner(owner), StatusCode::NO_CONTENT).into_response()),
    }
}

#[cfg(test)]
mod tests {
    use super::wait_ms;

    #[test]
    fn a_wait_is_what_was_asked_within_60_s_and_nine_tenths_of_the_tighter_timeout() {
        let asked = |v: &str| Some(v.to_owned());
        assert_eq!(wait_ms(asked("100").as_ref(), 30_000, 60_000), 100);
        assert_eq!(wait_ms(None, 30_000, 60_000), 25_000, "the default");
        assert_eq!(wait_ms(asked("5000").as_ref(), 1_000, 60_000), 900, "the request timeout bounds it");
        assert_eq!(wait_ms(asked("5000").as_ref(), 30_000, 2_000), 1_800, "so does the idle timeout");
        assert_eq!(wait_ms(asked("999999").as_ref(), 600_000, 600_000), 60_000, "never past a minute");
        assert_eq!(wait_ms(asked("soon").as_ref(), 30_000, 60_000), 25_000, "unparsable: the default");
    }
}
