//! Small values the engine keeps at rest sealed under an identity's data key, so that nothing
//! secret sits in the database in plaintext: a relay token it must still use later (closing an
//! old owner after a re-key) and, during a re-key hand-over, each secret sealed under the other
//! one's key. Not a wire format — nothing here leaves the device.
//!
//! Text form: base64url(nonce ‖ AES-256-GCM(dataKey, nonce, plaintext, AAD = UTF-8 of `aad`)),
//! with a fresh random 12-byte nonce. The `aad` names the purpose (and owners), so a sealed
//! value cannot be moved to another slot.

use super::base64url;
use super::entropy::{random_bytes, Entropy};
use super::envelope::{CryptoError, NONCE_LEN, TAG_LEN};
use super::identity::Identity;

/// Seals `plaintext` under `identity`'s data key, bound to `aad`.
pub fn seal_value(
    identity: &Identity,
    aad: &str,
    plaintext: &[u8],
    rng: &mut dyn Entropy,
) -> Result<String, CryptoError> {
    let nonce: [u8; NONCE_LEN] = random_bytes(rng)?;
    let mut out = nonce.to_vec();
    out.extend(identity.cipher().seal(&nonce, plaintext, aad.as_bytes()));
    Ok(base64url::encode(&out))
}

/// Opens a value sealed by [`seal_value`] with the same identity and `aad`.
pub fn open_value(identity: &Identity, aad: &str, text: &str) -> Result<Vec<u8>, CryptoError> {
    let bytes = base64url::decode(text)
        .map_err(|e| CryptoError::MalformedField { field: "sealed value", reason: e.to_string() })?;
    if bytes.len() < NONCE_LEN + TAG_LEN {
        return Err(CryptoError::MalformedField {
            field: "sealed value",
            reason: format!("{} bytes is shorter than a nonce and a tag", bytes.len()),
        });
    }
    let (nonce, ciphertext) = bytes.split_at(NONCE_LEN);
    let nonce: [u8; NONCE_LEN] = nonce.try_into().expect("split at NONCE_LEN");
    identity.cipher().open(&nonce, ciphertext, aad.as_bytes()).ok_or(CryptoError::AuthenticationFailed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::OsEntropy;

    fn identity(byte: u8) -> Identity {
        Identity::from_recovery_key_bytes(&[byte; 32])
    }

    #[test]
    fn a_sealed_value_opens_only_with_its_identity_and_purpose() {
        let (a, b) = (identity(1), identity(2));
        let text = seal_value(&a, "purpose:x", b"token", &mut OsEntropy).unwrap();
        assert_eq!(open_value(&a, "purpose:x", &text).unwrap(), b"token");
        assert_eq!(open_value(&b, "purpose:x", &text), Err(CryptoError::AuthenticationFailed));
        assert_eq!(open_value(&a, "purpose:y", &text), Err(CryptoError::AuthenticationFailed));
        assert!(matches!(open_value(&a, "purpose:x", "AAAA"), Err(CryptoError::MalformedField { .. })));
        assert!(!text.contains("token"));
    }
}
