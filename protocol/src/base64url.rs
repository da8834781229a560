//! base64url (RFC 4648 §5) **without padding** — the only base64 form on the wire.
//!
//! Decoding is strict: padding characters, characters outside the URL-safe alphabet and
//! non-zero trailing bits are all rejected, so every byte string has exactly one textual form.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// Why a base64url text could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid base64url (RFC 4648 §5, no padding): {0}")]
pub struct Base64UrlError(String);

/// Encodes bytes as unpadded base64url.
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes unpadded base64url strictly (no `=`, no stray bits, URL-safe alphabet only).
pub fn decode(text: &str) -> Result<Vec<u8>, Base64UrlError> {
    // The engine's default decode mode already rejects padding and non-canonical trailing bits.
    URL_SAFE_NO_PAD.decode(text).map_err(|e| Base64UrlError(e.to_string()))
}

/// Decodes into a fixed-size array, failing when the decoded length differs.
pub fn decode_array<const N: usize>(text: &str) -> Result<[u8; N], Base64UrlError> {
    let bytes = decode(text)?;
    let len = bytes.len();
    bytes.try_into().map_err(|_| Base64UrlError(format!("expected {N} bytes, got {len}")))
}

/// True when `text` is the unpadded base64url form of exactly `n` bytes.
pub fn is_encoded_len(text: &str, n: usize) -> bool {
    decode(text).map(|b| b.len() == n).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_length_without_padding() {
        for n in 0..40u8 {
            let bytes: Vec<u8> = (0..n).collect();
            let text = encode(&bytes);
            assert!(!text.contains('='));
            assert_eq!(decode(&text).unwrap(), bytes);
        }
    }

    #[test]
    fn rejects_padding_stray_bits_and_the_standard_alphabet() {
        assert!(decode("AA==").is_err());
        assert!(decode("AB").is_err(), "non-zero trailing bits");
        assert!(decode("a+b/").is_err());
        assert_eq!(decode("AA").unwrap(), vec![0]);
    }
}
