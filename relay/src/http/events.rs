//! `POST /v1/events` (push) and `GET /v1/events` (pull).

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use simplysync_protocol::base64url;
use simplysync_protocol::envelope::{NONCE_LEN, TAG_LEN};
use simplysync_protocol::identity::{is_stream_id, relay_token_hash};
use simplysync_protocol::wire::borrowed::{PushRequest, SyncEnvelope};
use simplysync_protocol::wire::PushResponse;

use super::error::ApiError;
use super::request::{bearer, body_bytes, json, owner_id, query, truncate};
use super::{blocking, deadline_of, now_iso, owner_tag, store_failure, AppState, ClientIp, Owner};
use crate::store::{MayRegister, NewEvent, OwnerState, PushOutcome, Refusal};

/// Longest accepted `eventId`, `deviceId` and `createdAt`.
const MAX_ID_LEN: usize = 256;

fn short_text(index: usize, field: &str, v: &str) -> Result<(), ApiError> {
    if v.is_empty() || v.len() > MAX_ID_LEN || v.chars().any(char::is_control) {
        return Err(ApiError::InvalidEnvelope {
            index,
            reason: format!("{field} must be 1–{MAX_ID_LEN} bytes of printable text, got {:?}", truncate(v)),
        });
    }
    Ok(())
}

/// The 6-bit value of each base64url character, or 0xFF.
const B64URL: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 64 {
        let c = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[i];
        t[c as usize] = i as u8;
        i += 1;
    }
    t
};

/// Length in bytes that strict, unpadded base64url text decodes to, without allocating.
/// (A table lookup per byte: the per-character range checks this replaced were ~10% of the
/// relay's CPU under push load.)
fn base64url_decoded_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    if b.len() % 4 == 1 || b.iter().any(|&c| B64URL[c as usize] == 0xFF) {
        return None;
    }
    // The last character of a partial group must carry no stray bits.
    let last = b.last().map_or(0, |&c| B64URL[c as usize]);
    match b.len() % 4 {
        2 if last & 0x0F != 0 => None,
        3 if last & 0x03 != 0 => None,
        _ => Some(b.len() * 3 / 4),
    }
}

/// Checks one envelope the way the spec's relays do (version, owner, required fields) plus
/// the sealed forms of nonce, ciphertext and stream id.
fn validate_envelope(index: usize, e: &SyncEnvelope<'_>, owner: &str) -> Result<(), ApiError> {
    let bad = |reason: String| ApiError::InvalidEnvelope { index, reason };
    if e.version != 1 {
        return Err(bad(format!("version must be 1, got {}", e.version)));
    }
    if e.owner_id != owner {
        return Err(bad("ownerId does not match the request's ownerId".into()));
    }
    short_text(index, "eventId", &e.event_id)?;
    short_text(index, "deviceId", &e.device_id)?;
    short_text(index, "createdAt", &e.created_at)?;
    if let Some(s) = &e.stream_id {
        if !is_stream_id(s) {
            return Err(bad(format!("streamId must be 22 base64url characters, got {:?}", truncate(s))));
        }
    }
    if !base64url::is_encoded_len(&e.nonce, NONCE_LEN) {
        return Err(bad("nonce must be base64url of 12 bytes".into()));
    }
    match base64url_decoded_len(&e.ciphertext) {
        Some(n) if n >= TAG_LEN => Ok(()),
        Some(_) => Err(bad("ciphertext is shorter than the 16-byte GCM tag".into())),
        None => Err(bad("ciphertext must be unpadded base64url".into())),
    }
}

/// The envelope as the relay stores and serves it: exactly `serde_json::to_string(e)` (the
/// form every stored row has), written faster — a validated envelope's owner id, stream id,
/// nonce and ciphertext are base64url, which JSON never escapes, so ~97% of its bytes are
/// copied as they are instead of scanned one by one (that scan was ~10% of the relay's CPU in
/// a push). The three free-text fields still go through serde_json's escaping.
fn stored_json(e: &SyncEnvelope<'_>) -> String {
    fn text(out: &mut String, s: &str) {
        // A &str always serializes.
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
    fn raw(out: &mut String, s: &str) {
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
    let len = e.owner_id.len() + e.event_id.len() + e.device_id.len() + e.created_at.len();
    let mut out = String::with_capacity(len + e.nonce.len() + e.ciphertext.len() + 160);
    out.push_str("{\"version\":");
    out.push_str(&e.version.to_string());
    out.push_str(",\"ownerId\":");
    raw(&mut out, &e.owner_id);
    out.push_str(",\"eventId\":");
    text(&mut out, &e.event_id);
    out.push_str(",\"deviceId\":");
    text(&mut out, &e.device_id);
    out.push_str(",\"createdAt\":");
    text(&mut out, &e.created_at);
    if let Some(stream) = &e.stream_id {
        out.push_str(",\"streamId\":");
        raw(&mut out, stream);
    }
    out.push_str(",\"nonce\":");
    raw(&mut out, &e.nonce);
    out.push_str(",\"ciphertext\":");
    raw(&mut out, &e.ciphertext);
    out.push('}');
    out
}

/// Whether `client` may register `owner`, which the store does not know (`unknown`): with
/// `REGISTRATION=token`, its `token` (the `X-SimplySync-Registration` header) must be
/// accepted; then within its registration rate, whose token is reserved now, in one step with
/// the check (concurrent attempts cannot all pass it), spent if the write registers the owner,
/// returned otherwise. (Refusals are decided by the store: an owner registered meanwhile
/// still writes.)
pub(super) fn may_register(
    st: &AppState,
    client: ClientIp,
    unknown: bool,
    owner: &str,
    token: Option<&str>,
) -> (MayRegister, Option<crate::ratelimit::Reservation>) {
    if !unknown {
        return (MayRegister::Yes, None);
    }
    if let Some(keys) = &st.registration_keys {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if let Err(problem) = keys.check(token, owner, now) {
            return (MayRegister::Refused(Refusal::Token(problem)), None);
        }
    }
    match client.0 {
        Some(ip) => match st.registrations.reserve(ip) {
            Some(reserved) => (MayRegister::Yes, Some(reserved)),
            None => (MayRegister::Refused(Refusal::RateLimited), None),
        },
        None => (MayRegister::Yes, None),
    }
}

/// The `X-SimplySync-Registration` header, if it is text.
pub(super) fn registration_token(headers: &axum::http::HeaderMap) -> Option<String> {
    headers.get(crate::registration::HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Settles a reservation: spent when the write registered the owner.
pub(super) fn registered(reservation: Option<crate::ratelimit::Reservation>, registered: bool) {
    if let (Some(r), true) = (reservation, registered) {
        r.commit();
    }
}

/// The parsed, validated batch.
struct Batch {
    owner: String,
    events: Vec<NewEvent>,
}

/// Parses a push body (on the blocking pool: a body may be megabytes). The order of judgement
/// in `push`: the body's JSON and owner id, then who is asking (401/410 before the envelopes
/// are judged, so a closed owner's device hears 410 even for a bad batch), then the batch.
fn parse_batch<'a>(
    bytes: &'a [u8],
    limits: &crate::config::Limits,
) -> Result<(String, Vec<SyncEnvelope<'a>>), ApiError> {
    let req: PushRequest<'a> = json(bytes)?;
    let owner = owner_id(Some(&req.owner_id), "ownerId")?;
    if req.events.len() > limits.max_events_per_push {
        return Err(ApiError::TooLarge(format!(
            "{} events in one push; MAX_EVENTS_PER_PUSH is {}",
            req.events.len(),
            limits.max_events_per_push
        )));
    }
    Ok((owner, req.events))
}

fn validate_batch(
    owner: String,
    events: Vec<SyncEnvelope<'_>>,
    limits: &crate::config::Limits,
) -> Result<Batch, ApiError> {
    let mut prepared = Vec::with_capacity(events.len());
    for (index, e) in events.into_iter().enumerate() {
        validate_envelope(index, &e, &owner)?;
        let json = stored_json(&e);
        if json.len() > limits.max_event_bytes {
            return Err(ApiError::TooLarge(format!(
                "events[{index}] is {} bytes; MAX_EVENT_BYTES is {}",
                json.len(),
                limits.max_event_bytes
            )));
        }
        prepared.push(NewEvent {
            event_id: e.event_id.into_owned(),
            stream_id: e.stream_id.map(|s| s.into_owned()),
            json,
        });
    }
    Ok(Batch { owner, events: prepared })
}

/// `POST /v1/events`: validates the whole batch, then stores it in one transaction.
pub async fn push(
    State(st): State<AppState>,
    Extension(client): Extension<ClientIp>,
    req: axum::extract::Request,
) -> Result<Response, ApiError> {
    let deadline = deadline_of(&req);
    let (parts, body) = req.into_parts();
    let token = bearer(&parts.headers)?;
    let bytes = body_bytes(&parts.headers, body, st.limits.max_request_bytes, "the push body").await?;
    let reg_token = registration_token(&parts.headers);
    super::admission::charge_bytes(&st, client, bytes.len());
    let (now, task_state) = (now_iso(), st.clone());
    // Parse, authenticate, validate and store on one blocking thread: a push's thousands of
    // strings are allocated and freed where they are used, with one hand-off instead of four.
    // What a commit implies (metrics, waking waiting devices, spending a registration) is done
    // in the same task, so it happens even if the client has gone and the handler was dropped.
    let stored = move || -> Result<(String, PushOutcome), ApiError> {
        let st = task_state;
        let (owner, events) = parse_batch(&bytes, &st.limits)?;
        let token_hash = relay_token_hash(&token);
        let known = st.store.authenticate(&owner, &token_hash).map_err(|e| store_failure(&st, e))?;
        let batch = validate_batch(owner, events, &st.limits)?;
        let unknown = known == OwnerState::Unknown;
        if unknown && batch.events.is_empty() {
            // Nothing to keep: an empty push registers no one (no owner row, no rate spent).
            return Ok((batch.owner, PushOutcome::default()));
        }
        let (register, reservation) = may_register(&st, client, unknown, &batch.owner, reg_token.as_deref());
        let outcome = st
            .store
            .push(&batch.owner, &token_hash, batch.events, &now, register, Some(deadline))
            .map_err(|e| store_failure(&st, e))?;
        // The address is charged first: once the metrics show the registration, it counts.
        registered(reservation, outcome.registered);
        st.metrics.record_push(&outcome);
        if outcome.accepted > 0 {
            st.live.publish(&batch.owner, outcome.head_seq);
        }
        if outcome.forged > 0 {
            tracing::warn!(owner = %owner_tag(&batch.owner), forged = outcome.forged, "forged duplicates: same eventId, different envelope; stored envelopes kept");
        }
        Ok((batch.owner, outcome))
    };
    let (owner, outcome) = tokio::task::spawn_blocking(stored)
        .await
        .map_err(|e| ApiError::Internal(format!("push task failed: {e}")))??;
    let body = PushResponse { accepted: outcome.accepted, duplicate: outcome.duplicate, forged: outcome.forged };
    Ok((Owner(owner), axum::Json(body)).into_response())
}

/// `after`: empty or non-numeric (a legacy cursor) starts from zero; a numeric cursor beyond
/// the counter's range is past every event.
fn parse_after(v: Option<&String>) -> u64 {
    match v.map(|s| s.as_str()) {
        Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().unwrap_or(u64::MAX),
        _ => 0,
    }
}

/// `limit`: clamped to [1, max]; missing or non-numeric is the default.
fn parse_limit(v: Option<&String>, default: u32, max: u32) -> u32 {
    let Some(s) = v.map(|s| s.trim()).filter(|s| !s.is_empty()) else { return default.min(max) };
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return default.min(max);
    }
    if s.starts_with('-') {
        return 1;
    }
    s.parse::<u64>().unwrap_or(u64::MAX).clamp(1, u64::from(max)) as u32
}

/// `GET /v1/events?ownerId&after&limit`: keyset pagination on the relay's seq.
pub async fn pull(
    State(st): State<AppState>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let token = bearer(&headers)?;
    let q = query(raw.as_deref());
    let owner = owner_id(q.get("ownerId").map(String::as_str), "ownerId query parameter")?;
    let after = parse_after(q.get("after"));
    let limit = parse_limit(q.get("limit"), st.limits.default_events_per_pull, st.limits.max_events_per_pull);
    let token_hash = relay_token_hash(&token);
    let o = owner.clone();
    let max_bytes = st.limits.max_pull_bytes;
    let page = blocking(&st, move |s| s.pull(&o, &token_hash, after, limit, max_bytes)).await?;
    st.metrics.record_pull(page.events.len());
    // The stored envelopes are already JSON: splice them in rather than re-serializing.
    let size: usize = page.events.iter().map(|e| e.len() + 1).sum();
    let mut out = String::with_capacity(size + 128);
    out.push_str("{\"events\":[");
    for (i, e) in page.events.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(e);
    }
    let next = page.last_seq.unwrap_or(after);
    out.push_str(&format!(
        "],\"nextCursor\":\"{next}\",\"epoch\":{},\"headSeq\":{}}}",
        serde_json::Value::from(st.store.epoch()),
        page.head_seq
    ));
    Ok((Owner(owner), [(header::CONTENT_TYPE, "application/json")], out).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_parses_like_the_spec_says() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(parse_after(None), 0);
        assert_eq!(parse_after(s("").as_ref()), 0);
        assert_eq!(parse_after(s("abc").as_ref()), 0);
        assert_eq!(parse_after(s("-5").as_ref()), 0);
        assert_eq!(parse_after(s("42").as_ref()), 42);
        assert_eq!(parse_after(s("99999999999999999999999").as_ref()), u64::MAX);
    }

    #[test]
    fn limit_is_clamped_and_defaults() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(parse_limit(None, 500, 1000), 500);
        assert_eq!(parse_limit(s("x").as_ref(), 500, 1000), 500);
        assert_eq!(parse_limit(s("0").as_ref(), 500, 1000), 1);
        assert_eq!(parse_limit(s("-3").as_ref(), 500, 1000), 1);
        assert_eq!(parse_limit(s("5000").as_ref(), 500, 1000), 1000);
        assert_eq!(parse_limit(s("99999999999999999999999").as_ref(), 500, 1000), 1000);
        assert_eq!(parse_limit(s("7").as_ref(), 500, 1000), 7);
    }

    #[test]
    fn base64url_length_check_matches_strict_decoding() {
        for n in 0..40usize {
            let text = base64url::encode(&vec![0xA5; n]);
            assert_eq!(base64url_decoded_len(&text), Some(n));
        }
        assert_eq!(base64url_decoded_len("AB"), None); // stray bits
        assert_eq!(base64url_decoded_len("A"), None);
        assert_eq!(base64url_decoded_len("AA=="), None);
    }

    #[test]
    fn the_stored_form_of_an_envelope_is_exactly_serde_jsons() {
        let base = simplysync_protocol::SyncEnvelope {
            version: 1,
            owner_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            event_id: "000001764504000001-000000-devA".into(),
            device_id: "devA".into(),
            created_at: "2026-12-01T00:00:00.000Z".into(),
            stream_id: Some("BBBBBBBBBBBBBBBBBBBBBB".into()),
            nonce: base64url::encode(&[7; 12]),
            ciphertext: base64url::encode(&[9; 40]),
        };
        let texts = ["plain", "quote \" and \\ slash", "tab\tnew\nline\u{1}", "ünïcödé ✓ \u{1F600}", "</script>"];
        for t in texts {
            for stream in [None, base.stream_id.clone()] {
                let e = simplysync_protocol::SyncEnvelope {
                    event_id: t.into(),
                    device_id: format!("{t}-d"),
                    created_at: format!("{t}-c"),
                    stream_id: stream,
                    ..base.clone()
                };
                let wire = serde_json::to_string(&e).unwrap();
                let read: SyncEnvelope<'_> = serde_json::from_str(&wire).unwrap();
                assert_eq!(stored_json(&read), wire, "for {t:?}");
            }
        }
    }
}
