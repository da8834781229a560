//! The protocol core: pure, deterministic, and the same on every target.
//!
//! Contains no I/O, no clock reads and no hidden randomness: time is passed in (`wall_ms`,
//! ISO strings) and random bytes come through [`entropy::Entropy`]. Everything here is part of
//! the wire/storage contract pinned in `PROTOCOL.md`; the locked vectors in `tests/vectors/`
//! prove it byte-identical to the spec's WebCrypto implementation.
//!
//! Order of use: [`identity`] (secret → keys) → [`payload`] + [`hlc`] (what a row version is)
//! → [`canonical`] (its bytes) → [`envelope`] (sealed) → [`wire`] (what relays exchange).
//! [`blob`] seals large binaries outside the log.

pub mod base64url;
pub use simplysync_json::{canonical, json, json_parse, sort};
mod bip39_english;
pub mod blob;
pub mod entropy;
pub mod envelope;
pub mod hlc;
pub mod identity;
pub mod json_fields;
pub mod json_write;
pub mod payload;
pub mod sealed_box;
pub mod time;
pub mod wire;
mod wire_read;
mod wire_write;

pub use blob::{
    decrypt_blob, decrypt_blob_chunk, encrypt_blob, encrypt_blob_reporting, encrypt_blob_with_id, BlobError,
    BlobManifest, BlobOptions, EncryptedBlob,
};
pub use canonical::to_canonical_json;
pub use envelope::{decrypt_envelope, encrypt_payload, CryptoError, EventMeta, SyncEnvelope};
pub use hlc::{compare_hlc, Hlc, HlcClock, HlcError};
pub use identity::{create_mnemonic, create_recovery_key, Identity, IdentityError, Secret};
pub use json::{Json, JsonString};
pub use json_parse::{parse_json, JsonParseError};
pub use payload::{PayloadError, PayloadHead, SyncPayload};
