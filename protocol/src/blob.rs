//! Encrypted binary blobs: content-addressed encrypted chunks plus a small manifest that travels
//! through the ordinary event log (as a row of table `blob`).
//!
//! Chunk `i` is AES-256-GCM(dataKey, fresh nonce, plaintext chunk, AAD = canonicalJson
//! `{"blobId":…,"index":i,"ownerId":…,"v":1}`), stored as `nonce ‖ ciphertext` under the key
//! base64url(SHA-256(stored bytes)). Readers verify that hash before decrypting, and the AAD
//! binds each chunk to its owner, blob and position, so swapped, reordered or foreign chunks fail.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::base64url;
use super::canonical::write_str_literal;
use super::entropy::{random_bytes, Entropy, EntropyError};
use super::envelope::{NONCE_LEN, TAG_LEN};
use super::identity::{sha256_base64url, Identity};
use super::json::Json;
use super::json_fields::{FieldError, Fields, FromJson};

/// Default plaintext chunk size: 256 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 262_144;
/// Largest chunk size accepted (a stored chunk must fit a relay's `MAX_BLOB_BYTES`).
pub const MAX_CHUNK_SIZE: usize = 16 * 1024 * 1024;
/// The manifest format version.
pub const MANIFEST_VERSION: u32 = 1;
/// Bytes a stored chunk adds to its plaintext: the 12-byte nonce and the 16-byte GCM tag.
pub const CHUNK_OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// One chunk as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlobChunkRef {
    /// base64url(SHA-256(stored bytes)) — the relay key.
    pub hash: String,
    /// Stored size: 12 + plaintext + 16.
    pub size: u64,
    /// Plaintext bytes in this chunk.
    pub plaintext_size: u64,
}

/// The manifest of one blob; emitted as a row of table `blob`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlobManifest {
    /// Always 1.
    pub version: u32,
    /// The owner.
    pub owner_id: String,
    /// base64url of 16 random bytes.
    pub blob_id: String,
    /// The MIME type given by the app.
    pub mime_type: String,
    /// Total plaintext size.
    pub byte_size: u64,
    /// Plaintext bytes per chunk (the last may be shorter).
    pub chunk_size: u64,
    /// The chunks in order. An empty blob has none.
    pub chunks: Vec<BlobChunkRef>,
    /// base64url(SHA-256(whole plaintext)).
    pub sha256: String,
    /// ISO-8601 creation time.
    pub created_at: String,
}

impl FromJson for BlobChunkRef {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(BlobChunkRef { hash: f.string("hash")?, size: f.u64("size")?, plaintext_size: f.u64("plaintextSize")? })
    }
}

impl FromJson for BlobManifest {
    fn from_json(value: &Json, path: &str) -> Result<Self, FieldError> {
        let f = Fields::of(value, path)?;
        Ok(BlobManifest {
            version: f.u32("version")?,
            owner_id: f.string("ownerId")?,
            blob_id: f.string("blobId")?,
            mime_type: f.string("mimeType")?,
            byte_size: f.u64("byteSize")?,
            chunk_size: f.u64("chunkSize")?,
            chunks: f.items("chunks")?,
            sha256: f.string("sha256")?,
            created_at: f.string("createdAt")?,
        })
    }
}

/// One encrypted chunk ready for `PUT /v1/blobs/:hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredChunk {
    /// The content address.
    pub hash: String,
    /// nonce ‖ ciphertext.
    pub bytes: Vec<u8>,
}

/// The output of [`encrypt_blob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncryptedBlob {
    /// The manifest.
    pub manifest: BlobManifest,
    /// The chunks, in manifest order.
    pub chunks: Vec<StoredChunk>,
}

/// Options of [`encrypt_blob`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// MIME type, e.g. `image/png`.
    pub mime_type: String,
    /// Plaintext chunk size; [`DEFAULT_CHUNK_SIZE`] when `None`.
    pub chunk_size: Option<usize>,
}

/// Why a blob could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlobError {
    /// Options out of range.
    #[error("invalid blob options: {0}")]
    InvalidOptions(String),
    /// The manifest is inconsistent or not version 1.
    #[error("invalid blob manifest: {0}")]
    InvalidManifest(String),
    /// The manifest belongs to another owner.
    #[error("blob manifest belongs to owner {found:?}, not {expected:?}")]
    ForeignOwner {
        /// This identity's owner.
        expected: String,
        /// The manifest's owner.
        found: String,
    },
    /// There is no chunk with this index.
    #[error("chunk index {index} out of range (the blob has {count} chunks)")]
    ChunkIndex {
        /// Requested index.
        index: usize,
        /// Chunks in the manifest.
        count: usize,
    },
    /// The stored bytes do not hash to the manifest's hash: corrupted or swapped.
    #[error("chunk {index} does not match its hash in the manifest (corrupted or swapped)")]
    HashMismatch {
        /// Chunk index.
        index: usize,
    },
    /// GCM authentication failed (a chunk of another blob, position or owner).
    #[error("chunk {index} failed authentication (moved from another blob, position or owner)")]
    AuthenticationFailed {
        /// Chunk index.
        index: usize,
    },
    /// The reassembled plaintext does not match the manifest's size or SHA-256.
    #[error("reassembled blob does not match the manifest: {0}")]
    WholeBlobMismatch(String),
    /// No random nonce could be drawn.
    #[error(transparent)]
    Entropy(#[from] EntropyError),
}

fn chunk_aad(owner_id: &str, blob_id: &str, index: usize) -> String {
    let mut out = String::with_capacity(96);
    out.push_str("{\"blobId\":");
    write_str_literal(blob_id, &mut out);
    out.push_str(",\"index\":");
    out.push_str(&index.to_string());
    out.push_str(",\"ownerId\":");
    write_str_literal(owner_id, &mut out);
    out.push_str(",\"v\":1}");
    out
}

/// Splits `data` into chunks, encrypts each, and builds the manifest (new random blob id).
pub fn encrypt_blob(
    identity: &Identity,
    data: &[u8],
    options: &BlobOptions,
    created_at: &str,
    rng: &mut dyn Entropy,
) -> Result<EncryptedBlob, BlobError> {
    encrypt_blob_reporting(identity, data, options, created_at, rng, &mut |_, _| {})
}

/// [`encrypt_blob`] that tells `progress(bytes_sealed, byte_size)` after each chunk.
pub fn encrypt_blob_reporting(
    identity: &Identity,
    data: &[u8],
    options: &BlobOptions,
    created_at: &str,
    rng: &mut dyn Entropy,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<EncryptedBlob, BlobError> {
    let blob_id = base64url::encode(&random_bytes::<16>(rng)?);
    seal_chunks(identity, data, options, &blob_id, created_at, rng, progress)
}

/// Like [`encrypt_blob`] but under a given blob id (a re-key re-seals blobs in place, so rows
/// referring to them stay valid).
pub fn encrypt_blob_with_id(
    identity: &Identity,
    data: &[u8],
    options: &BlobOptions,
    blob_id: &str,
    created_at: &str,
    rng: &mut dyn Entropy,
) -> Result<EncryptedBlob, BlobError> {
    seal_chunks(identity, data, options, blob_id, created_at, rng, &mut |_, _| {})
}

fn seal_chunks(
    identity: &Identity,
    data: &[u8],
    options: &BlobOptions,
    blob_id: &str,
    created_at: &str,
    rng: &mut dyn Entropy,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<EncryptedBlob, BlobError> {
    let chunk_size = options.chunk_size.unwrap_or(DEFAULT_CHUNK_SIZE);
    if chunk_size == 0 || chunk_size > MAX_CHUNK_SIZE {
        return Err(BlobError::InvalidOptions(format!("chunkSize must be 1..={MAX_CHUNK_SIZE}, got {chunk_size}")));
    }
    let blob_id = blob_id.to_owned();
    let mut chunks = Vec::with_capacity(data.len().div_ceil(chunk_size));
    let mut refs = Vec::with_capacity(chunks.capacity());
    for (index, plain) in data.chunks(chunk_size).enumerate() {
        let nonce: [u8; NONCE_LEN] = random_bytes(rng)?;
        let aad = chunk_aad(identity.owner_id(), &blob_id, index);
        let mut bytes = Vec::with_capacity(NONCE_LEN + plain.len() + TAG_LEN);
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&identity.cipher().seal(&nonce, plain, aad.as_bytes()));
        let hash = sha256_base64url(&bytes);
        refs.push(BlobChunkRef { hash: hash.clone(), size: bytes.len() as u64, plaintext_size: plain.len() as u64 });
        chunks.push(StoredChunk { hash, bytes });
        progress((index * chunk_size + plain.len()) as u64, data.len() as u64);
    }
    let manifest = BlobManifest {
        version: MANIFEST_VERSION,
        owner_id: identity.owner_id().to_owned(),
        blob_id,
        mime_type: options.mime_type.clone(),
        byte_size: data.len() as u64,
        chunk_size: chunk_size as u64,
        chunks: refs,
        sha256: sha256_base64url(data),
        created_at: created_at.to_owned(),
    };
    Ok(EncryptedBlob { manifest, chunks })
}

fn check_manifest(identity: &Identity, manifest: &BlobManifest) -> Result<(), BlobError> {
    if manifest.owner_id != identity.owner_id() {
        return Err(BlobError::ForeignOwner {
            expected: identity.owner_id().to_owned(),
            found: manifest.owner_id.clone(),
        });
    }
    if manifest.version != MANIFEST_VERSION {
        return Err(BlobError::InvalidManifest(format!("unsupported version {}", manifest.version)));
    }
    let total: u64 = manifest.chunks.iter().map(|c| c.plaintext_size).sum();
    if total != manifest.byte_size {
        return Err(BlobError::InvalidManifest(format!(
            "chunk sizes add up to {total} bytes but byteSize is {}",
            manifest.byte_size
        )));
    }
    Ok(())
}

/// Verifies one stored chunk against the manifest's hash, then decrypts it.
pub fn decrypt_blob_chunk(
    identity: &Identity,
    manifest: &BlobManifest,
    index: usize,
    stored: &[u8],
) -> Result<Vec<u8>, BlobError> {
    check_manifest(identity, manifest)?;
    let chunk = manifest.chunks.get(index).ok_or(BlobError::ChunkIndex { index, count: manifest.chunks.len() })?;
    if sha256_base64url(stored) != chunk.hash {
        return Err(BlobError::HashMismatch { index });
    }
    if stored.len() < NONCE_LEN + TAG_LEN {
        return Err(BlobError::AuthenticationFailed { index });
    }
    let nonce: [u8; NONCE_LEN] = stored[..NONCE_LEN].try_into().expect("length checked");
    let aad = chunk_aad(&manifest.owner_id, &manifest.blob_id, index);
    let plain = identity
        .cipher()
        .open(&nonce, &stored[NONCE_LEN..], aad.as_bytes())
        .ok_or(BlobError::AuthenticationFailed { index })?;
    if plain.len() as u64 != chunk.plaintext_size {
        return Err(BlobError::InvalidManifest(format!(
            "chunk {index} holds {} bytes, the manifest says {}",
            plain.len(),
            chunk.plaintext_size
        )));
    }
    Ok(plain)
}

/// Decrypts every chunk (in manifest order), reassembles, and verifies the whole-blob SHA-256.
pub fn decrypt_blob<C: AsRef<[u8]>>(
    identity: &Identity,
    manifest: &BlobManifest,
    chunks: &[C],
) -> Result<Vec<u8>, BlobError> {
    check_manifest(identity, manifest)?;
    if chunks.len() != manifest.chunks.len() {
        return Err(BlobError::WholeBlobMismatch(format!(
            "got {} chunks, the manifest lists {}",
            chunks.len(),
            manifest.chunks.len()
        )));
    }
    let mut out = Vec::with_capacity(manifest.byte_size.min(1 << 30) as usize);
    let mut hasher = Sha256::new();
    for (index, stored) in chunks.iter().enumerate() {
        let plain = decrypt_blob_chunk(identity, manifest, index, stored.as_ref())?;
        hasher.update(&plain);
        out.extend_from_slice(&plain);
    }
    if base64url::encode(&hasher.finalize()) != manifest.sha256 {
        return Err(BlobError::WholeBlobMismatch("SHA-256 of the plaintext differs".into()));
    }
    Ok(out)
}
