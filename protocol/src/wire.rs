//! Request and response bodies of the relay's HTTP API, shared by the engine and the relay so
//! they cannot drift. Field names are the wire's (camelCase). Fields marked *additive* are
//! SimplySync extensions: a client that ignores them still speaks the spec's protocol.

use serde::{Deserialize, Serialize};

use super::envelope::SyncEnvelope;

/// `POST /v1/events` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushRequest {
    /// The owner pushing.
    pub owner_id: String,
    /// The envelopes, at most `MAX_EVENTS_PER_PUSH`.
    pub events: Vec<SyncEnvelope>,
}

/// The push body borrowing its text from the request bytes (the relay's parse).
pub mod borrowed {
    use std::borrow::Cow;

    use serde::Deserialize;

    /// `POST /v1/events` body as the relay reads it: the same fields and parse errors (the same
    /// type names) as [`super::PushRequest`], with text borrowed from the request bytes wherever
    /// it has no JSON escapes (an envelope's base64url fields never do), so a push's ciphertexts
    /// are not copied one by one before they are stored. (`streamId`, being optional, is always
    /// its own copy: serde borrows only a bare `Cow`.)
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct PushRequest<'a> {
        /// The owner pushing.
        #[serde(borrow)]
        pub owner_id: Cow<'a, str>,
        /// The envelopes, at most `MAX_EVENTS_PER_PUSH`.
        #[serde(borrow)]
        pub events: Vec<SyncEnvelope<'a>>,
    }

    /// A [`super::SyncEnvelope`] whose text borrows from the bytes it was parsed from where it can.
    #[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct SyncEnvelope<'a> {
        /// Always 1.
        pub version: u32,
        /// The owner (routing; part of the AAD).
        #[serde(borrow)]
        pub owner_id: Cow<'a, str>,
        /// Unique per owner.
        #[serde(borrow)]
        pub event_id: Cow<'a, str>,
        /// The device that produced it.
        #[serde(borrow)]
        pub device_id: Cow<'a, str>,
        /// Wall-clock ISO time, advisory only.
        #[serde(borrow)]
        pub created_at: Cow<'a, str>,
        /// The row's pseudonymous stream id, when set.
        #[serde(borrow, default)]
        pub stream_id: Option<Cow<'a, str>>,
        /// base64url of the 12-byte nonce.
        #[serde(borrow)]
        pub nonce: Cow<'a, str>,
        /// base64url of the AES-256-GCM output (ciphertext ‖ 16-byte tag).
        #[serde(borrow)]
        pub ciphertext: Cow<'a, str>,
    }
}

/// `POST /v1/events` response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushResponse {
    /// Events newly stored.
    pub accepted: u64,
    /// Events the relay already had (same owner and event id), forged ones included.
    pub duplicate: u64,
    /// *Additive*: duplicates whose envelope differed from the stored one ("forged"); the
    /// stored envelope was kept. Omitted when zero; `null` reads as zero (a field the spec's
    /// answer lacks never fails a push whose events the relay stored).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "null_is_zero")]
    pub forged: u64,
}

fn null_is_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    Ok(Option::<u64>::deserialize(d)?.unwrap_or(0))
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `GET /v1/events` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PullResponse {
    /// Envelopes in server-seq order.
    pub events: Vec<SyncEnvelope>,
    /// The last seq returned (or the `after` given, when the page is empty). Opaque to clients.
    pub next_cursor: String,
    /// *Additive*: the relay database's epoch id; it changes only when the database is new.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// *Additive*: the last seq ever assigned to this owner (never lowered by compaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_seq: Option<u64>,
}

/// `POST /v1/streams/compact` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactRequest {
    /// The owner.
    pub owner_id: String,
    /// Stream ids to drop entirely (22-char base64url each).
    pub stream_ids: Vec<String>,
}

/// `POST /v1/streams/compact` response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactResponse {
    /// Events removed.
    pub deleted_events: u64,
    /// Bytes credited back to the owner.
    pub reclaimed_bytes: u64,
}

/// `POST /v1/owner/close` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseRequest {
    /// The owner to close.
    pub owner_id: String,
}

/// `POST /v1/owner/close` response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseResponse {
    /// Always true.
    pub closed: bool,
    /// Events deleted by this call (0 on a repeated close).
    pub deleted_events: u64,
    /// Blob chunks deleted by this call.
    pub deleted_blobs: u64,
}

/// `PUT /v1/blobs/:hash` response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobPutResponse {
    /// True when the chunk is now stored (new or already there).
    pub stored: bool,
    /// True when the relay already had it.
    pub duplicate: bool,
}

/// `server` of `/v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    /// Relay version.
    pub version: String,
    /// Relay wall time, ISO-8601.
    pub server_time: String,
    /// *Additive*: the database epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
}

/// `account` of `/v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountInfo {
    /// The owner.
    pub owner_id: String,
    /// `MAX_OWNER_BYTES` of this relay.
    pub quota_bytes: u64,
    /// This owner's stored bytes (events + blobs).
    pub used_bytes: u64,
    /// `usedBytes / quotaBytes × 100`, two decimals.
    pub used_pct: f64,
    /// Last seq assigned to this owner.
    pub head_seq: u64,
    /// Distinct streams stored.
    pub streams: u64,
    /// Events stored.
    pub events: u64,
    /// When the owner registered, ISO-8601.
    pub created_at: String,
}

/// `GET /v1/status` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusResponse {
    /// Relay facts.
    pub server: ServerInfo,
    /// The owner's account.
    pub account: AccountInfo,
}

/// `GET /v1/usage` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageResponse {
    /// The owner.
    pub owner_id: String,
    /// Stored bytes (events + blobs).
    pub stored_bytes: u64,
}

/// `GET /health` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthResponse {
    /// Always true.
    pub ok: bool,
    /// Service name.
    pub service: String,
    /// Relay version.
    pub version: String,
    /// Relay wall time, ISO-8601.
    pub server_time: String,
    /// *Additive*: the database epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// The path of the relay's long-poll for head changes (`GET …?ownerId&after&timeoutMs`),
    /// when it has one (a SimplySync extension; absent: devices poll).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// `GET /v1/events/wait` answer when the owner's head moved past `after` (a SimplySync
/// extension; on timeout the relay answers 204 with no body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitResponse {
    /// The owner's head seq now.
    pub head_seq: u64,
    /// The relay database's epoch.
    #[serde(default)]
    pub epoch: Option<String>,
}

/// Every error response: `{ "error": "<code>", "message": "<text>" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A stable machine-readable code (see PROTOCOL.md).
    pub error: String,
    /// What was wrong, for humans.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn envelope(event_id: &str, stream_id: Option<&str>) -> SyncEnvelope {
        SyncEnvelope {
            version: 1,
            owner_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            event_id: event_id.into(),
            device_id: "dev \"A\"".into(),
            created_at: "2026-12-01T00:00:00.000Z".into(),
            stream_id: stream_id.map(Into::into),
            nonce: "BBBBBBBBBBBBBBBB".into(),
            ciphertext: "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC".into(),
        }
    }

    #[test]
    fn the_borrowed_push_body_reads_the_same_fields_and_copies_no_unescaped_text() {
        let owned = PushRequest {
            owner_id: "AAAAAAAAAAAAAAAAAAAAAA".into(),
            events: vec![envelope("e1 \\ ü\n", Some("DDDDDDDDDDDDDDDDDDDDDD")), envelope("e2", None)],
        };
        let bytes = serde_json::to_vec(&owned).unwrap();
        let read: borrowed::PushRequest<'_> = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(read.owner_id, owned.owner_id);
        assert_eq!(read.events.len(), 2);
        for (r, o) in read.events.iter().zip(&owned.events) {
            assert_eq!(r.version, o.version);
            assert_eq!((&*r.owner_id, &*r.event_id, &*r.device_id), (&*o.owner_id, &*o.event_id, &*o.device_id));
            assert_eq!((&*r.created_at, r.stream_id.as_deref()), (&*o.created_at, o.stream_id.as_deref()));
            assert_eq!((&*r.nonce, &*r.ciphertext), (&*o.nonce, &*o.ciphertext));
            assert!(matches!(r.ciphertext, Cow::Borrowed(_)) && matches!(r.nonce, Cow::Borrowed(_)));
        }
        assert!(matches!(read.events[0].event_id, Cow::Owned(_)), "escaped text is unescaped into its own string");
    }

    #[test]
    fn the_borrowed_push_body_refuses_what_the_owned_one_refuses() {
        let bad = [
            r#"{"ownerId":"A","events":[{"version":1}]}"#,
            r#"{"ownerId":"A","events":[{"version":"1","ownerId":"A","eventId":"e","deviceId":"d","createdAt":"c","nonce":"n","ciphertext":"x"}]}"#,
            r#"{"events":[]}"#,
            r#"{"ownerId":7,"events":[]}"#,
            r#"[]"#,
            r#"{"ownerId":"A","events":[[]]}"#,
        ];
        for body in bad {
            let owned = serde_json::from_str::<PushRequest>(body).unwrap_err().to_string();
            let borrowed = serde_json::from_str::<borrowed::PushRequest<'_>>(body).unwrap_err().to_string();
            assert_eq!(borrowed, owned, "for {body}");
        }
    }
}
