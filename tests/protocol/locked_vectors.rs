//! The locked vectors of `tests/vectors/v1.json`, computed by the WebCrypto reference
//! (`scripts/node/reference.mjs`). The Rust core must reproduce every byte.
//! `tests/reference_crosscheck.rs` re-runs the reference on the same inputs.

use crate::test;
use serde::Deserialize;
use simplysync::protocol::blob::BlobOptions;
use simplysync::protocol::entropy::FixedEntropy;
use simplysync::protocol::{
    decrypt_blob, decrypt_envelope, encrypt_blob, encrypt_payload, parse_json, to_canonical_json, BlobManifest,
    EventMeta, Identity, Secret, SyncEnvelope,
};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Vectors {
    identities: Vec<IdentityVector>,
    envelopes: Vec<EnvelopeVector>,
    blobs: Vec<BlobVector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentityVector {
    name: String,
    secret: String,
    kind: String,
    owner_id: String,
    relay_auth: String,
    relay_token_hash: String,
    data_key: String,
    stream_key: String,
    stream_ids: Vec<StreamIdVector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StreamIdVector {
    table: String,
    row_id: String,
    stream_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaVector {
    event_id: String,
    device_id: String,
    created_at: String,
    stream_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeVector {
    name: String,
    identity: String,
    meta: MetaVector,
    nonce: String,
    payload_json: String,
    aad: String,
    plaintext: String,
    envelope: SyncEnvelope,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChunkVector {
    hash: String,
    bytes: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlobVector {
    name: String,
    identity: String,
    data: String,
    mime_type: String,
    chunk_size: usize,
    created_at: String,
    blob_id_bytes: String,
    nonces: Vec<String>,
    manifest: BlobManifest,
    chunks: Vec<ChunkVector>,
}

pub(crate) const V1: &str = include_str!("../vectors/v1.json");

fn vectors() -> Vectors {
    serde_json::from_str(V1).expect("v1.json parses")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn identity_named(v: &Vectors, name: &str) -> Identity {
    let secret = &v.identities.iter().find(|i| i.name == name).unwrap().secret;
    Identity::from_secret(secret).unwrap()
}

#[test]
fn every_locked_identity_derives_byte_identically() {
    let v = vectors();
    assert!(v.identities.len() >= 8);
    for iv in &v.identities {
        let secret = Secret::parse(&iv.secret).unwrap_or_else(|e| panic!("{}: {e}", iv.name));
        let kind = match secret {
            Secret::Mnemonic(_) => "mnemonic",
            Secret::RecoveryKey(_) => "sf1",
        };
        assert_eq!(kind, iv.kind, "{}", iv.name);
        let id = secret.identity();
        assert_eq!(id.owner_id(), iv.owner_id, "{} ownerId", iv.name);
        assert_eq!(id.relay_auth(), iv.relay_auth, "{} relayAuth", iv.name);
        assert_eq!(id.relay_token_hash(), iv.relay_token_hash, "{} token hash", iv.name);
        assert_eq!(hex(id.data_key()), iv.data_key, "{} dataKey", iv.name);
        assert_eq!(hex(id.stream_key()), iv.stream_key, "{} streamKey", iv.name);
        for s in &iv.stream_ids {
            assert_eq!(id.stream_id(&s.table, &s.row_id), s.stream_id, "{} streamId {:?}", iv.name, s.row_id);
        }
    }
}

#[test]
fn every_locked_envelope_seals_byte_identically_and_opens() {
    let v = vectors();
    for ev in &v.envelopes {
        let id = identity_named(&v, &ev.identity);
        let payload = parse_json(&ev.payload_json).unwrap();
        assert_eq!(to_canonical_json(&payload), ev.plaintext, "{} plaintext", ev.name);
        let meta = EventMeta {
            event_id: ev.meta.event_id.clone(),
            device_id: ev.meta.device_id.clone(),
            created_at: ev.meta.created_at.clone(),
            stream_id: ev.meta.stream_id.clone(),
        };
        let sealed = encrypt_payload(&id, &meta, &payload, &mut FixedEntropy::new(unhex(&ev.nonce))).unwrap();
        assert_eq!(sealed.aad(), ev.aad, "{} aad", ev.name);
        assert_eq!(sealed, ev.envelope, "{} envelope", ev.name);
        assert_eq!(decrypt_envelope(&id, &ev.envelope).unwrap(), payload, "{} decrypts", ev.name);
    }
}

#[test]
fn the_locked_blob_seals_byte_identically_and_reassembles() {
    let v = vectors();
    for bv in &v.blobs {
        let id = identity_named(&v, &bv.identity);
        let mut entropy = unhex(&bv.blob_id_bytes);
        for n in &bv.nonces {
            entropy.extend(unhex(n));
        }
        let opts = BlobOptions { mime_type: bv.mime_type.clone(), chunk_size: Some(bv.chunk_size) };
        let data = unhex(&bv.data);
        let sealed = encrypt_blob(&id, &data, &opts, &bv.created_at, &mut FixedEntropy::new(entropy)).unwrap();
        assert_eq!(sealed.manifest, bv.manifest, "{} manifest", bv.name);
        assert_eq!(sealed.chunks.len(), bv.chunks.len());
        for (got, want) in sealed.chunks.iter().zip(&bv.chunks) {
            assert_eq!(got.hash, want.hash);
            assert_eq!(simplysync::protocol::base64url::encode(&got.bytes), want.bytes);
        }
        let stored: Vec<Vec<u8>> =
            bv.chunks.iter().map(|c| simplysync::protocol::base64url::decode(&c.bytes).unwrap()).collect();
        assert_eq!(decrypt_blob(&id, &bv.manifest, &stored).unwrap(), data);
    }
}
