//! The encrypted envelope: AES-256-GCM over the canonical JSON of a payload, with the canonical
//! JSON of the envelope header as additional data, so a relay can neither read a payload nor
//! rebind it to another owner, event, device, time or stream.

use serde::{Deserialize, Serialize};

use super::base64url;
use super::canonical::{to_canonical_json, write_str_literal};
use super::entropy::{random_bytes, Entropy, EntropyError};
use super::identity::Identity;
use super::json::Json;
use super::json_parse::{parse_json_bytes, JsonParseError};

/// The only envelope version.
pub const ENVELOPE_VERSION: u32 = 1;
pub use simplysync_crypto::{NONCE_LEN, TAG_LEN};

/// An encrypted event as it travels to and from relays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncEnvelope {
    /// Always 1.
    pub version: u32,
    /// The owner (routing; part of the AAD).
    pub owner_id: String,
    /// Unique per owner; the engine uses the payload's HLC.
    pub event_id: String,
    /// The device that produced it.
    pub device_id: String,
    /// Wall-clock ISO time, advisory only.
    pub created_at: String,
    /// The row's pseudonymous stream id, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_id: Option<String>,
    /// base64url of the 12-byte nonce.
    pub nonce: String,
    /// base64url of the AES-256-GCM output (ciphertext ‖ 16-byte tag).
    pub ciphertext: String,
}

/// The plaintext header fields of an envelope the caller chooses (the owner comes from the
/// identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMeta {
    /// Unique per owner (the HLC string).
    pub event_id: String,
    /// The producing device.
    pub device_id: String,
    /// ISO-8601 wall time.
    pub created_at: String,
    /// Optional stream id.
    pub stream_id: Option<String>,
}

/// Why an envelope could not be produced or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The envelope belongs to another owner; nothing was decrypted.
    #[error("envelope belongs to owner {found:?}, not to this identity's owner {expected:?}")]
    ForeignOwner {
        /// This identity's owner id.
        expected: String,
        /// The envelope's owner id.
        found: String,
    },
    /// An envelope version this build does not know.
    #[error("unsupported envelope version {0} (this build reads version 1)")]
    UnsupportedVersion(u32),
    /// A field is not in its sealed form (bad base64url, wrong nonce length, short ciphertext).
    #[error("malformed envelope field {field}: {reason}")]
    MalformedField {
        /// The field's wire name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// GCM authentication failed: the ciphertext or a header field was altered, or the key is
    /// wrong.
    #[error("envelope failed authentication: ciphertext or header was tampered with, or the key is wrong")]
    AuthenticationFailed,
    /// The decrypted plaintext is not the canonical JSON of a value.
    #[error("decrypted payload is not valid JSON: {0}")]
    PayloadNotJson(JsonParseError),
    /// No random nonce could be drawn.
    #[error(transparent)]
    Entropy(#[from] EntropyError),
}

/// The AAD: canonical JSON of `{version, ownerId, eventId, deviceId, createdAt, streamId?}`.
pub fn header_aad(
    version: u32,
    owner_id: &str,
    event_id: &str,
    device_id: &str,
    created_at: &str,
    stream_id: Option<&str>,
) -> String {
    // Keys in canonical (sorted) order: createdAt, deviceId, eventId, ownerId, streamId, version.
    // Sized for the fields' text without escapes (a fixed 160 was regrown for most real
    // headers; only a field with characters to escape regrows it now), the version written
    // without the formatting machinery.
    let len = r#"{"createdAt":"","deviceId":"","eventId":"","ownerId":"","version":}"#.len()
        + created_at.len()
        + device_id.len()
        + event_id.len()
        + owner_id.len()
        + stream_id.map_or(0, |s| r#","streamId":"""#.len() + s.len())
        + 10;
    let mut out = String::with_capacity(len);
    out.push_str("{\"createdAt\":");
    write_str_literal(created_at, &mut out);
    out.push_str(",\"deviceId\":");
    write_str_literal(device_id, &mut out);
    out.push_str(",\"eventId\":");
    write_str_literal(event_id, &mut out);
    out.push_str(",\"ownerId\":");
    write_str_literal(owner_id, &mut out);
    if let Some(s) = stream_id {
        out.push_str(",\"streamId\":");
        write_str_literal(s, &mut out);
    }
    out.push_str(",\"version\":");
    out.push_str(crate::hlc::zero_padded(&mut [0u8; 20], u64::from(version), 1));
    out.push('}');
    out
}

/// The length of the base64url (unpadded) text of `n` bytes.
pub const fn base64url_len(n: usize) -> usize {
    (n * 4).div_ceil(3)
}

/// The length of `s` as a JSON string written by serde_json (quotes included): `"` and `\`
/// and the control characters U+0000–U+001F are escaped — `\b \t \n \f \r` in two
/// characters, the others as `\u00XX` — and nothing else. Counted without allocating: every
/// local mutation checks its event's size with it (BENCHMARKS.md, issue 17 round four). Only
/// the bytes that need escaping are looked up, found eight at a time (`scan`).
pub fn json_text_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let (mut len, mut at) = (bytes.len() + 2, 0);
    while let Some(n) = simplysync_json::scan::first_special(&bytes[at..]) {
        len += usize::from(JSON_TEXT_LEN[usize::from(bytes[at + n])]) - 1;
        at += n + 1;
    }
    len
}

/// What each byte of a string becomes in serde_json's output, in characters.
const JSON_TEXT_LEN: [u8; 256] = {
    const SHORT: [u8; 7] = [0x08, 0x09, 0x0a, 0x0c, 0x0d, b'"', b'\\'];
    let mut len = [1u8; 256];
    let mut b = 0;
    while b < 0x20 {
        len[b] = 6;
        b += 1;
    }
    let mut i = 0;
    while i < SHORT.len() {
        len[SHORT[i] as usize] = 2;
        i += 1;
    }
    len
};

/// The exact length of an envelope's JSON as the engine and relays store it (fields in the
/// order `version, ownerId, eventId, deviceId, createdAt, streamId?, nonce, ciphertext`) for a
/// plaintext of `plaintext_len` bytes — what a relay compares with `MAX_EVENT_BYTES`. Header
/// fields are taken as they are written, escapes included.
pub fn sealed_len(
    owner_id: &str,
    event_id: &str,
    device_id: &str,
    created_at: &str,
    stream_id: Option<&str>,
    plaintext_len: usize,
) -> usize {
    const FIXED: usize =
        r#"{"version":1,"ownerId":,"eventId":,"deviceId":,"createdAt":,"nonce":"","ciphertext":""}"#.len();
    FIXED
        + json_text_len(owner_id)
        + json_text_len(event_id)
        + json_text_len(device_id)
        + json_text_len(created_at)
        + stream_id.map_or(0, |s| r#","streamId":"#.len() + json_text_len(s))
        + base64url_len(NONCE_LEN)
        + base64url_len(plaintext_len + TAG_LEN)
}

impl SyncEnvelope {
    /// This envelope's AAD.
    pub fn aad(&self) -> String {
        header_aad(
            self.version,
            &self.owner_id,
            &self.event_id,
            &self.device_id,
            &self.created_at,
            self.stream_id.as_deref(),
        )
    }
}

/// Seals `payload` for `identity` with a fresh random nonce.
pub fn encrypt_payload(
    identity: &Identity,
    meta: &EventMeta,
    payload: &Json,
    rng: &mut dyn Entropy,
) -> Result<SyncEnvelope, CryptoError> {
    encrypt_plaintext(identity, meta, to_canonical_json(payload).as_bytes(), rng)
}

/// Seals an already-canonical plaintext. The caller guarantees `plaintext` is canonical JSON.
pub fn encrypt_plaintext(
    identity: &Identity,
    meta: &EventMeta,
    plaintext: &[u8],
    rng: &mut dyn Entropy,
) -> Result<SyncEnvelope, CryptoError> {
    let nonce: [u8; NONCE_LEN] = random_bytes(rng)?;
    let aad = header_aad(
        ENVELOPE_VERSION,
        identity.owner_id(),
        &meta.event_id,
        &meta.device_id,
        &meta.created_at,
        meta.stream_id.as_deref(),
    );
    let ciphertext = identity.cipher().seal(&nonce, plaintext, aad.as_bytes());
    Ok(SyncEnvelope {
        version: ENVELOPE_VERSION,
        owner_id: identity.owner_id().to_owned(),
        event_id: meta.event_id.clone(),
        device_id: meta.device_id.clone(),
        created_at: meta.created_at.clone(),
        stream_id: meta.stream_id.clone(),
        nonce: base64url::encode(&nonce),
        ciphertext: base64url::encode(&ciphertext),
    })
}

/// Opens an envelope and parses its payload.
pub fn decrypt_envelope(identity: &Identity, envelope: &SyncEnvelope) -> Result<Json, CryptoError> {
    let plaintext = decrypt_envelope_bytes(identity, envelope)?;
    parse_json_bytes(&plaintext).map_err(CryptoError::PayloadNotJson)
}

/// Opens an envelope and returns the plaintext bytes. Refuses a foreign owner before any
/// decryption is attempted.
pub fn decrypt_envelope_bytes(identity: &Identity, envelope: &SyncEnvelope) -> Result<Vec<u8>, CryptoError> {
    if envelope.owner_id != identity.owner_id() {
        return Err(CryptoError::ForeignOwner {
            expected: identity.owner_id().to_owned(),
            found: envelope.owner_id.clone(),
        });
    }
    if envelope.version != ENVELOPE_VERSION {
        return Err(CryptoError::UnsupportedVersion(envelope.version));
    }
    let nonce = base64url::decode_array::<NONCE_LEN>(&envelope.nonce)
        .map_err(|e| CryptoError::MalformedField { field: "nonce", reason: e.to_string() })?;
    let ciphertext = base64url::decode(&envelope.ciphertext)
        .map_err(|e| CryptoError::MalformedField { field: "ciphertext", reason: e.to_string() })?;
    if ciphertext.len() < TAG_LEN {
        return Err(CryptoError::MalformedField {
            field: "ciphertext",
            reason: format!("{} bytes is shorter than the 16-byte GCM tag", ciphertext.len()),
        });
    }
    identity
        .cipher()
        .open_in_place(&nonce, ciphertext, envelope.aad().as_bytes())
        .ok_or(CryptoError::AuthenticationFailed)
}
