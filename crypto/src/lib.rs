//! The symmetric primitives on SimplySync's hot paths: AES-256-GCM (every event sealed and
//! opened) and HMAC-SHA256 (every written row's stream id).
//!
//! They are a crate of their own for one reason: a generic is compiled in the crate that
//! instantiates it, at that crate's optimization level. The npm package builds the protocol
//! crate for size (`opt-level = "z"`), and at that level the generic AES-CTR and GHASH loops of
//! `aes-gcm` are compiled into a chain of small calls at half their speed. Instantiated here,
//! in non-generic functions of a crate the package builds for speed (`Cargo.toml`,
//! `[profile.wasm-release.package.simplysync-crypto]`), they stay one tight loop while the rest
//! of the protocol is built small. Nothing here is specific to SimplySync's formats.

#![forbid(unsafe_code)]

use aes_gcm::aead::{Aead, AeadInOut, Payload};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// AES-GCM nonce length.
pub const NONCE_LEN: usize = 12;
/// AES-GCM tag length: every ciphertext is at least this long.
pub const TAG_LEN: usize = 16;

/// An AES-256-GCM key, expanded once.
#[derive(Clone)]
pub struct AesKey(Aes256Gcm);

impl std::fmt::Debug for AesKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AesKey(..)")
    }
}

impl AesKey {
    /// Expands a 256-bit key.
    #[inline(never)]
    pub fn new(key: &[u8; 32]) -> AesKey {
        AesKey(Aes256Gcm::new(key.into()))
    }

    /// The ciphertext of `plaintext` with its 16-byte tag appended.
    #[inline(never)]
    pub fn seal(&self, nonce: &[u8; NONCE_LEN], plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        self.0
            .encrypt(&Nonce::from(*nonce), Payload { msg: plaintext, aad })
            .expect("AES-GCM encryption only fails for inputs beyond 64 GiB")
    }

    /// The plaintext of `ciphertext` (tag appended), `None` when the tag does not match.
    #[inline(never)]
    pub fn open(&self, nonce: &[u8; NONCE_LEN], ciphertext: &[u8], aad: &[u8]) -> Option<Vec<u8>> {
        self.0.decrypt(&Nonce::from(*nonce), Payload { msg: ciphertext, aad }).ok()
    }

    /// [`AesKey::open`] in the ciphertext's own buffer, which is dropped unread when the tag
    /// does not match: a received event's ciphertext is not copied into a second allocation.
    #[inline(never)]
    pub fn open_in_place(&self, nonce: &[u8; NONCE_LEN], mut ciphertext: Vec<u8>, aad: &[u8]) -> Option<Vec<u8>> {
        self.0.decrypt_in_place(&Nonce::from(*nonce), aad, &mut ciphertext).ok()?;
        Some(ciphertext)
    }
}

/// HMAC-SHA256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    HmacKey::new(key).mac(message)
}

/// An HMAC-SHA256 key with its padded inner and outer blocks hashed once: a MAC of a short
/// message then costs two SHA-256 compressions instead of four (every sealed event's stream id).
#[derive(Clone)]
pub struct HmacKey(Hmac<Sha256>);

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacKey(..)")
    }
}

impl HmacKey {
    /// Keys an HMAC-SHA256 with `key` (any length).
    #[inline(never)]
    pub fn new(key: &[u8]) -> HmacKey {
        HmacKey(<Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length"))
    }

    /// HMAC-SHA256 of `message`.
    #[inline(never)]
    pub fn mac(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.0.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn aes_256_gcm_matches_the_gcm_specifications_vector_and_refuses_a_changed_byte() {
        // Test case 16 of McGrew and Viega's GCM specification (the one NIST's validation
        // vectors start from): AES-256, 96-bit IV, 60-byte plaintext, 20-byte AAD.
        let key: [u8; 32] = hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308").try_into().unwrap();
        let nonce: [u8; 12] = hex("cafebabefacedbaddecaf888").try_into().unwrap();
        let plain = hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
        let aad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let expected = hex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662\
             76fc6ece0f4e1768cddf8853bb2d551b");
        let key = AesKey::new(&key);
        let sealed = key.seal(&nonce, &plain, &aad);
        assert_eq!(sealed, expected);
        assert_eq!(key.open(&nonce, &sealed, &aad), Some(plain.clone()));
        assert_eq!(key.open_in_place(&nonce, sealed.clone(), &aad), Some(plain));
        for i in [0, sealed.len() - 1] {
            let mut changed = sealed.clone();
            changed[i] ^= 1;
            assert_eq!(key.open(&nonce, &changed, &aad), None, "byte {i}");
            assert_eq!(key.open_in_place(&nonce, changed, &aad), None, "byte {i}");
        }
        assert_eq!(key.open(&nonce, &sealed, b"other aad"), None);
        assert_eq!(key.open(&nonce, &sealed[..TAG_LEN - 1], &aad), None, "shorter than a tag");
    }

    #[test]
    fn a_keyed_hmac_gives_the_same_mac_every_time_as_a_fresh_one() {
        let key = HmacKey::new(b"Jefe");
        for _ in 0..2 {
            assert_eq!(
                key.mac(b"what do ya want for nothing?").to_vec(),
                hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
            );
        }
        assert_eq!(key.mac(b"other"), hmac_sha256(b"Jefe", b"other"));
        assert_ne!(key.mac(b"other"), key.mac(b"what do ya want for nothing?"));
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // RFC 4231 test cases 1 and 2.
        assert_eq!(
            hmac_sha256(&[0x0b; 20], b"Hi There").to_vec(),
            hex("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7")
        );
        assert_eq!(
            hmac_sha256(b"Jefe", b"what do ya want for nothing?").to_vec(),
            hex("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        );
    }
}
