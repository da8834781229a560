//! Protocol functions exported to JavaScript. Key material never crosses: `deriveIdentity`
//! returns an opaque `Identity` handle exposing only the public owner id.

use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;

use super::convert::{from_js, record_to_js, to_js, to_json};
use super::errors::{js_error, ErrorCode};
use crate::protocol::blob::{BlobManifest, BlobOptions};
use crate::protocol::entropy::OsEntropy;
use crate::protocol::json_fields::{FieldError, Fields, FromJson};
use crate::protocol::time::iso8601_from_ms;
use crate::protocol::{
    create_mnemonic, create_recovery_key, decrypt_blob, decrypt_envelope, encrypt_blob, encrypt_payload, EventMeta,
    Identity, Json, Secret, SyncEnvelope,
};

fn bad(code: &str, e: impl std::fmt::Display) -> JsValue {
    js_error(code, &e.to_string())
}

/// Mints a new 12-word recovery phrase.
#[wasm_bindgen(js_name = createMnemonic)]
pub fn create_mnemonic_js() -> Result<String, JsValue> {
    create_mnemonic(&mut OsEntropy).map_err(|e| e.to_js())
}

/// Mints a new `sf1_` recovery key.
#[wasm_bindgen(js_name = createRecoveryKey)]
pub fn create_recovery_key_js() -> Result<String, JsValue> {
    create_recovery_key(&mut OsEntropy).map_err(|e| e.to_js())
}

/// Validates a secret; throws an `Error` whose `code` says what is wrong (`SECRET_EMPTY`,
/// `SECRET_WORD_COUNT`, `SECRET_UNKNOWN_WORD`, `SECRET_CHECKSUM`, `SECRET_INVALID_KEY`,
/// `SECRET_INVALID_PHRASE`).
/// Returns `"mnemonic"` or `"sf1"`.
#[wasm_bindgen(js_name = validateSecret)]
pub fn validate_secret_js(secret: &str) -> Result<String, JsValue> {
    match Secret::parse(secret).map_err(|e| e.to_js())? {
        Secret::Mnemonic(_) => Ok("mnemonic".into()),
        Secret::RecoveryKey(_) => Ok("sf1".into()),
    }
}

/// An identity derived from a secret. Only the owner id is visible.
#[wasm_bindgen(js_name = Identity)]
#[derive(Debug)]
pub struct IdentityHandle(Identity);

#[wasm_bindgen(js_class = Identity)]
impl IdentityHandle {
    /// The public owner id.
    #[wasm_bindgen(getter, js_name = ownerId)]
    pub fn owner_id(&self) -> String {
        self.0.owner_id().to_owned()
    }

    /// The pseudonymous stream id of a row.
    #[wasm_bindgen(js_name = streamId)]
    pub fn stream_id(&self, table: &str, row_id: &str) -> String {
        self.0.stream_id(table, row_id)
    }
}

/// Derives the identity of a secret.
#[wasm_bindgen(js_name = deriveIdentity)]
pub fn derive_identity_js(secret: &str) -> Result<IdentityHandle, JsValue> {
    Ok(IdentityHandle(Identity::from_secret(secret).map_err(|e| e.to_js())?))
}

struct MetaIn {
    event_id: String,
    device_id: String,
    created_at: Option<String>,
    stream_id: Option<String>,
}

impl FromJson for MetaIn {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(MetaIn {
            event_id: f.string("eventId")?,
            device_id: f.string("deviceId")?,
            created_at: f.opt_string("createdAt")?,
            stream_id: f.opt_string("streamId")?,
        })
    }
}

/// Seals a payload: `meta` is `{eventId, deviceId, createdAt?, streamId?}`; returns the envelope.
#[wasm_bindgen(js_name = encryptPayload)]
pub fn encrypt_payload_js(identity: &IdentityHandle, meta: JsValue, payload: JsValue) -> Result<JsValue, JsValue> {
    let m: MetaIn = from_js(&meta, "meta").map_err(|e| bad("INVALID_ARGUMENT", e))?;
    let payload = to_json(&payload, "payload").map_err(|e| bad("INVALID_ARGUMENT", e))?;
    let meta = EventMeta {
        event_id: m.event_id,
        device_id: m.device_id,
        created_at: m.created_at.unwrap_or_else(|| iso8601_from_ms(js_sys::Date::now() as u64)),
        stream_id: m.stream_id,
    };
    let env = encrypt_payload(&identity.0, &meta, &payload, &mut OsEntropy).map_err(|e| bad("CRYPTO", e))?;
    Ok(record_to_js(&env))
}

/// Opens an envelope and returns its payload; throws `CRYPTO` on a foreign owner or tampering.
#[wasm_bindgen(js_name = decryptEnvelope)]
pub fn decrypt_envelope_js(identity: &IdentityHandle, envelope: JsValue) -> Result<JsValue, JsValue> {
    let env: SyncEnvelope = from_js(&envelope, "envelope").map_err(|e| bad("INVALID_ARGUMENT", e))?;
    Ok(to_js(&decrypt_envelope(&identity.0, &env).map_err(|e| bad("CRYPTO", e))?))
}

/// Seals bytes as a blob: returns `{manifest, chunks: [{hash, bytes}]}`.
#[wasm_bindgen(js_name = encryptBlob)]
pub fn encrypt_blob_js(
    identity: &IdentityHandle,
    bytes: Uint8Array,
    mime_type: String,
    chunk_size: Option<u32>,
) -> Result<JsValue, JsValue> {
    let opts = BlobOptions { mime_type, chunk_size: chunk_size.map(|c| c as usize) };
    let sealed =
        encrypt_blob(&identity.0, &bytes.to_vec(), &opts, &iso8601_from_ms(js_sys::Date::now() as u64), &mut OsEntropy)
            .map_err(|e| bad("BLOB_INVALID", e))?;
    let chunks = Array::new();
    for c in &sealed.chunks {
        let o = js_sys::Object::new();
        let _ = js_sys::Reflect::set(&o, &"hash".into(), &c.hash.clone().into());
        let _ = js_sys::Reflect::set(&o, &"bytes".into(), &Uint8Array::from(c.bytes.as_slice()));
        chunks.push(&o.into());
    }
    let out = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&out, &"manifest".into(), &record_to_js(&sealed.manifest));
    let _ = js_sys::Reflect::set(&out, &"chunks".into(), &chunks);
    Ok(out.into())
}

/// Verifies and decrypts a blob from its manifest and stored chunks (in order).
#[wasm_bindgen(js_name = decryptBlob)]
pub fn decrypt_blob_js(
    identity: &IdentityHandle,
    manifest: JsValue,
    chunks: Vec<Uint8Array>,
) -> Result<Uint8Array, JsValue> {
    let m: BlobManifest = from_js(&manifest, "manifest").map_err(|e| bad("INVALID_ARGUMENT", e))?;
    let stored: Vec<Vec<u8>> = chunks.iter().map(Uint8Array::to_vec).collect();
    let bytes = decrypt_blob(&identity.0, &m, &stored).map_err(|e| bad("BLOB_INVALID", e))?;
    Ok(Uint8Array::from(bytes.as_slice()))
}
