//! Secret → identity: the frozen derivations of the spec ("Secret → identity").
//!
//! Two secret forms, interchangeable as inputs but deriving **different** owners:
//! - a BIP39 mnemonic (12/15/18/21/24 English words) → SLIP-21 over the BIP39 *entropy*;
//! - a native key `sf1_` + base64url(32 bytes) → HKDF-SHA256.
//!
//! The labels and salts are part of the derivation: changing any of them locks every existing
//! user out of their data. `tests/vectors/` pins them; add vectors, never edit one.

use std::fmt;

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use simplysync_crypto::{AesKey, HmacKey};

use super::base64url;
use super::bip39_english::{self, PhraseError};
use super::canonical::write_str_literal;
use super::entropy::{random_bytes, Entropy, EntropyError};

/// The HKDF salt of every HKDF derivation in the protocol.
pub const HKDF_SALT: &[u8] = b"sbt-local-first-v1";
/// The prefix of a native recovery key.
pub const RECOVERY_KEY_PREFIX: &str = "sf1_";
const SLIP21_SEED_KEY: &[u8] = b"Symmetric key seed";
const SLIP21_ROOT: &str = "SimplySync";

/// Why a secret was refused. Each variant says which rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// Nothing but whitespace was given.
    #[error("the secret is empty: expected a 12–24 word recovery phrase or an sf1_ key")]
    Empty,
    /// The phrase has a word count BIP39 does not allow.
    #[error("a recovery phrase has 12, 15, 18, 21 or 24 words, this one has {count}")]
    WrongWordCount {
        /// Words found after normalization.
        count: usize,
    },
    /// A word is not in the BIP39 English word list.
    #[error("word {position} of the recovery phrase ({word:?}) is not a BIP39 English word")]
    UnknownWord {
        /// 1-based position of the word.
        position: usize,
        /// The word as normalized.
        word: String,
    },
    /// All words are valid but the phrase's checksum does not match (a typo or swapped words).
    #[error("the recovery phrase's checksum does not match: a word is mistyped or out of order")]
    BadChecksum,
    /// A phrase refused for a reason none of the variants above names. The English decoder
    /// never gives it now; the variant (and its code, `SECRET_INVALID_PHRASE`) stays stable.
    #[error("the recovery phrase is not valid BIP39: {reason}")]
    InvalidPhrase {
        /// The decoder's reason.
        reason: String,
    },
    /// An `sf1_` key that is not `sf1_` + base64url of exactly 32 bytes.
    #[error("invalid sf1_ recovery key: {reason}")]
    InvalidRecoveryKey {
        /// What is wrong with it.
        reason: String,
    },
}

/// A validated secret in one of its two forms. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// A BIP39 phrase, normalized: NFKD, lower-case, single spaces.
    Mnemonic(String),
    /// A native `sf1_` key.
    RecoveryKey(String),
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Mnemonic(_) => f.write_str("Secret::Mnemonic(<redacted>)"),
            Secret::RecoveryKey(_) => f.write_str("Secret::RecoveryKey(<redacted>)"),
        }
    }
}

impl Secret {
    /// Validates a secret. Input starting with `sf1_` (after trimming) is a native key;
    /// anything else is a mnemonic, normalized (NFKD, lower-case, whitespace collapsed) first.
    pub fn parse(input: &str) -> Result<Secret, IdentityError> {
        let trimmed = input.trim();
        if trimmed.is_empty() {
            return Err(IdentityError::Empty);
        }
        if let Some(rest) = trimmed.strip_prefix(RECOVERY_KEY_PREFIX) {
            decode_recovery_key(rest)?;
            return Ok(Secret::RecoveryKey(trimmed.to_owned()));
        }
        let normalized = normalize_mnemonic(trimmed);
        mnemonic_entropy(&normalized)?;
        Ok(Secret::Mnemonic(normalized))
    }

    /// The secret's text (the phrase or the key). Only for showing it to its owner.
    pub fn expose(&self) -> &str {
        match self {
            Secret::Mnemonic(s) | Secret::RecoveryKey(s) => s,
        }
    }

    /// Derives the identity.
    pub fn identity(&self) -> Identity {
        match self {
            Secret::RecoveryKey(key) => {
                let ikm = decode_recovery_key(&key[RECOVERY_KEY_PREFIX.len()..]).expect("validated by parse");
                Identity::from_recovery_key_bytes(&ikm)
            }
            Secret::Mnemonic(phrase) => {
                let entropy = mnemonic_entropy(phrase).expect("validated by parse");
                Identity::from_mnemonic_entropy(&entropy)
            }
        }
    }
}

/// Mints a new 12-word (128-bit) BIP39 mnemonic.
pub fn create_mnemonic(rng: &mut dyn Entropy) -> Result<String, EntropyError> {
    let entropy: [u8; 16] = random_bytes(rng)?;
    Ok(bip39_english::phrase_of(&entropy))
}

/// Mints a new native recovery key: `sf1_` + base64url(32 random bytes).
pub fn create_recovery_key(rng: &mut dyn Entropy) -> Result<String, EntropyError> {
    let bytes: [u8; 32] = random_bytes(rng)?;
    Ok(format!("{RECOVERY_KEY_PREFIX}{}", base64url::encode(&bytes)))
}

fn normalize_mnemonic(input: &str) -> String {
    let nfkd = lowercase(&nfkd(input));
    nfkd.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Unicode lower-casing (full mappings, final sigma). In the browser the platform's
/// `String.prototype.toLowerCase` does it, as for [`nfkd`]: Rust's `str::to_lowercase` links
/// the Unicode case tables (~12 KB) into the npm package. Both implement the same Unicode
/// algorithm; ASCII, all a valid English phrase holds, never leaves the module.
#[cfg(target_arch = "wasm32")]
fn lowercase(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    String::from(js_sys::JsString::from(s).to_lower_case())
}

#[cfg(not(target_arch = "wasm32"))]
fn lowercase(s: &str) -> String {
    s.to_lowercase()
}

/// Unicode NFKD. In the browser the platform's `String.prototype.normalize` does it, which
/// keeps the normalization tables (tens of KB) out of the npm package; natively the
/// `unicode-normalization` crate does. Both implement the same Unicode algorithm.
#[cfg(target_arch = "wasm32")]
fn nfkd(s: &str) -> String {
    if s.is_ascii() {
        return s.to_owned();
    }
    String::from(js_sys::JsString::from(s).normalize("NFKD"))
}

#[cfg(not(target_arch = "wasm32"))]
fn nfkd(s: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    s.nfkd().collect()
}

fn decode_recovery_key(b64: &str) -> Result<[u8; 32], IdentityError> {
    base64url::decode_array::<32>(b64).map_err(|e| IdentityError::InvalidRecoveryKey {
        reason: format!("expected sf1_ followed by base64url of 32 bytes; {e}"),
    })
}

fn mnemonic_entropy(normalized: &str) -> Result<Vec<u8>, IdentityError> {
    // Judged in BIP39's order: the count, each word, then the checksum, so an unknown word
    // is named even when the checksum is also wrong.
    bip39_english::entropy_of(normalized).map_err(|e| match e {
        PhraseError::WordCount(count) => IdentityError::WrongWordCount { count },
        PhraseError::UnknownWord(i) => {
            IdentityError::UnknownWord { position: i + 1, word: normalized.split(' ').nth(i).unwrap_or("").to_owned() }
        }
        PhraseError::Checksum => IdentityError::BadChecksum,
    })
}

/// Everything derived from a secret. Holds key material: `Debug` shows only the owner id.
#[derive(Clone)]
pub struct Identity {
    owner_id: String,
    relay_auth: String,
    data_key: [u8; 32],
    stream_key: [u8; 32],
    /// `stream_key`, keyed once for every stream id.
    stream_mac: HmacKey,
    cipher: AesKey,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity").field("owner_id", &self.owner_id).finish_non_exhaustive()
    }
}

impl Identity {
    /// Parses and derives in one step.
    pub fn from_secret(input: &str) -> Result<Identity, IdentityError> {
        Ok(Secret::parse(input)?.identity())
    }

    /// HKDF-SHA256 derivation of a native key's 32 decoded bytes.
    pub fn from_recovery_key_bytes(ikm: &[u8; 32]) -> Identity {
        let hk = Hkdf::<Sha256>::new(Some(HKDF_SALT), ikm);
        let expand = |info: &str, out: &mut [u8]| hk.expand(info.as_bytes(), out).expect("length within HKDF bounds");
        let mut owner = [0u8; 16];
        let mut data_key = [0u8; 32];
        let mut auth = [0u8; 32];
        let mut stream_key = [0u8; 32];
        expand("owner-id", &mut owner);
        expand("data-key", &mut data_key);
        expand("relay-auth", &mut auth);
        expand("stream-key", &mut stream_key);
        Identity::assemble(base64url::encode(&owner), base64url::encode(&auth), data_key, stream_key)
    }

    /// SLIP-21 derivation over BIP39 entropy with SimplySync's fixed labels.
    pub fn from_mnemonic_entropy(entropy: &[u8]) -> Identity {
        let owner = slip21(entropy, &[SLIP21_ROOT, "OwnerIdBytes"]);
        let data_key = slip21(entropy, &[SLIP21_ROOT, "OwnerEncryptionKey"]);
        let auth = slip21(entropy, &[SLIP21_ROOT, "OwnerWriteKey"]);
        let stream_key = hkdf32(&data_key, "stream-key");
        Identity::assemble(base64url::encode(&owner[..16]), base64url::encode(&auth[..16]), data_key, stream_key)
    }

    fn assemble(owner_id: String, relay_auth: String, data_key: [u8; 32], stream_key: [u8; 32]) -> Identity {
        let cipher = AesKey::new(&data_key);
        let stream_mac = HmacKey::new(&stream_key);
        Identity { owner_id, relay_auth, data_key, stream_key, stream_mac, cipher }
    }

    /// The public, pseudonymous owner id (base64url of 16 bytes).
    pub fn owner_id(&self) -> &str {
        &self.owner_id
    }

    /// The bearer token for the relay. A capability: whoever holds it can push and pull.
    pub fn relay_auth(&self) -> &str {
        &self.relay_auth
    }

    /// What a relay stores for trust-on-first-use: base64url(SHA-256(relayAuth)).
    pub fn relay_token_hash(&self) -> String {
        relay_token_hash(&self.relay_auth)
    }

    /// The AES-256-GCM data key. Only for diagnostics (`--show-keys`).
    pub fn data_key(&self) -> &[u8; 32] {
        &self.data_key
    }

    /// The stream-id HMAC key. Only for diagnostics (`--show-keys`).
    pub fn stream_key(&self) -> &[u8; 32] {
        &self.stream_key
    }

    pub(crate) fn cipher(&self) -> &AesKey {
        &self.cipher
    }

    /// The pseudonymous stream id of a row: base64url(HMAC-SHA256(streamKey,
    /// canonicalJson([table, rowId]))[0..16]), 22 characters.
    pub fn stream_id(&self, table: &str, row_id: &str) -> String {
        let mut msg = String::with_capacity(table.len() + row_id.len() + 8);
        msg.push('[');
        write_str_literal(table, &mut msg);
        msg.push(',');
        write_str_literal(row_id, &mut msg);
        msg.push(']');
        base64url::encode(&self.stream_mac.mac(msg.as_bytes())[..16])
    }
}

/// base64url(SHA-256(UTF-8 of the token)) — the relay's stored form of a bearer token.
pub fn relay_token_hash(token: &str) -> String {
    sha256_base64url(token.as_bytes())
}

/// base64url(SHA-256(bytes)).
pub fn sha256_base64url(bytes: &[u8]) -> String {
    base64url::encode(&Sha256::digest(bytes))
}

/// True when `s` has the sealed form of a stream id: base64url of 16 bytes (22 characters).
pub fn is_stream_id(s: &str) -> bool {
    s.len() == 22 && base64url::is_encoded_len(s, 16)
}

fn hkdf32(ikm: &[u8], info: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    Hkdf::<Sha256>::new(Some(HKDF_SALT), ikm).expand(info.as_bytes(), &mut out).expect("32 bytes within HKDF bounds");
    out
}

/// SLIP-21: node0 = HMAC-SHA512(key "Symmetric key seed", seed);
/// node(label) = HMAC-SHA512(key parent[0..32], 0x00 ‖ label); the key is node[32..64].
fn slip21(seed: &[u8], path: &[&str]) -> [u8; 32] {
    let mut node = hmac_sha512(SLIP21_SEED_KEY, &[seed]);
    for label in path {
        node = hmac_sha512(&node[..32], &[&[0u8], label.as_bytes()]);
    }
    node[32..].try_into().expect("64-byte node")
}

fn hmac_sha512(key: &[u8], parts: &[&[u8]]) -> [u8; 64] {
    let mut mac = <Hmac<Sha512> as hmac::KeyInit>::new_from_slice(key).expect("any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}
