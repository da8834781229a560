//! Protocol functions exported to JavaScript that involve no key material leaving the module.

use wasm_bindgen::prelude::*;

use super::errors::ErrorCode;
use crate::protocol::entropy::OsEntropy;
use crate::protocol::{create_mnemonic, create_recovery_key, Secret};

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

/// Validates a secret; throws an `Error` whose `code` says what is wrong
/// (`SECRET_EMPTY`, `SECRET_WORD_COUNT`, `SECRET_UNKNOWN_WORD`, `SECRET_CHECKSUM`,
/// `SECRET_INVALID_KEY`). Returns `"mnemonic"` or `"sf1"`.
#[wasm_bindgen(js_name = validateSecret)]
pub fn validate_secret_js(secret: &str) -> Result<String, JsValue> {
    match Secret::parse(secret).map_err(|e| e.to_js())? {
        Secret::Mnemonic(_) => Ok("mnemonic".into()),
        Secret::RecoveryKey(_) => Ok("sf1".into()),
    }
}

/// The owner id a secret derives (public; safe to show).
#[wasm_bindgen(js_name = ownerIdOf)]
pub fn owner_id_of_js(secret: &str) -> Result<String, JsValue> {
    Ok(Secret::parse(secret).map_err(|e| e.to_js())?.identity().owner_id().to_owned())
}
