use crate::test;
use simplysync::protocol::blob::{BlobError, BlobOptions};
use simplysync::protocol::entropy::OsEntropy;
use simplysync::protocol::{
    decrypt_blob, decrypt_blob_chunk, encrypt_blob, encrypt_blob_reporting, EncryptedBlob, Identity,
};

fn alice() -> Identity {
    Identity::from_secret("sf1_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8").unwrap()
}

fn seal(id: &Identity, data: &[u8], chunk: usize) -> EncryptedBlob {
    let opts = BlobOptions { mime_type: "image/png".into(), chunk_size: Some(chunk) };
    encrypt_blob(id, data, &opts, "2025-11-30T12:00:00.000Z", &mut OsEntropy).unwrap()
}

fn bytes_of(b: &EncryptedBlob) -> Vec<Vec<u8>> {
    b.chunks.iter().map(|c| c.bytes.clone()).collect()
}

#[test]
fn a_blob_splits_into_chunks_and_reassembles() {
    let id = alice();
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let b = seal(&id, &data, 300);
    assert_eq!(b.manifest.chunks.len(), 4);
    assert_eq!(b.manifest.byte_size, 1000);
    assert_eq!(b.manifest.chunks[3].plaintext_size, 100);
    assert_eq!(b.manifest.chunks[0].size, 12 + 300 + 16);
    assert_eq!(decrypt_blob(&id, &b.manifest, &bytes_of(&b)).unwrap(), data);
    assert_eq!(decrypt_blob_chunk(&id, &b.manifest, 2, &b.chunks[2].bytes).unwrap(), data[600..900].to_vec());
}

#[test]
fn sealing_a_blob_tells_the_bytes_sealed_after_each_chunk() {
    let id = alice();
    let data = vec![7u8; 1000];
    let opts = BlobOptions { mime_type: "image/png".into(), chunk_size: Some(300) };
    let mut told = Vec::new();
    let b = encrypt_blob_reporting(&id, &data, &opts, "t", &mut OsEntropy, &mut |done, total| told.push((done, total)))
        .unwrap();
    assert_eq!(told, [(300, 1000), (600, 1000), (900, 1000), (1000, 1000)]);
    assert_eq!(decrypt_blob(&id, &b.manifest, &bytes_of(&b)).unwrap(), data);
}

#[test]
fn the_default_chunk_size_is_256_kib_and_an_empty_blob_has_no_chunks() {
    let id = alice();
    let opts = BlobOptions { mime_type: "application/octet-stream".into(), chunk_size: None };
    let b = encrypt_blob(&id, &[], &opts, "t", &mut OsEntropy).unwrap();
    assert_eq!(b.manifest.chunk_size, 262_144);
    assert!(b.chunks.is_empty());
    assert_eq!(decrypt_blob::<Vec<u8>>(&id, &b.manifest, &[]).unwrap(), Vec::<u8>::new());
}

#[test]
fn swapped_chunks_fail_the_hash_check() {
    let id = alice();
    let b = seal(&id, &[9u8; 100], 40);
    let mut chunks = bytes_of(&b);
    chunks.swap(0, 1);
    assert_eq!(decrypt_blob(&id, &b.manifest, &chunks), Err(BlobError::HashMismatch { index: 0 }));
}

#[test]
fn a_reordered_manifest_fails_authentication() {
    let id = alice();
    let b = seal(&id, &[9u8; 80], 40);
    let mut manifest = b.manifest.clone();
    manifest.chunks.swap(0, 1);
    let mut chunks = bytes_of(&b);
    chunks.swap(0, 1);
    // Hashes now match positions, but each chunk's AAD names its original index.
    assert_eq!(decrypt_blob(&id, &manifest, &chunks), Err(BlobError::AuthenticationFailed { index: 0 }));
}

#[test]
fn a_chunk_from_another_blob_fails_authentication() {
    let id = alice();
    let a = seal(&id, &[1u8; 40], 40);
    let b = seal(&id, &[2u8; 40], 40);
    let mut forged = a.manifest.clone();
    forged.chunks[0] = b.manifest.chunks[0].clone();
    assert_eq!(
        decrypt_blob_chunk(&id, &forged, 0, &b.chunks[0].bytes),
        Err(BlobError::AuthenticationFailed { index: 0 })
    );
}

#[test]
fn a_foreign_owner_manifest_is_refused() {
    let a = seal(&alice(), &[1u8; 10], 40);
    let bob = Identity::from_secret("sf1_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE").unwrap();
    assert!(matches!(decrypt_blob(&bob, &a.manifest, &bytes_of(&a)), Err(BlobError::ForeignOwner { .. })));
}

#[test]
fn a_corrupted_chunk_or_wrong_index_is_an_error() {
    let id = alice();
    let b = seal(&id, &[3u8; 50], 40);
    let mut bad = b.chunks[1].bytes.clone();
    bad[20] ^= 1;
    assert_eq!(decrypt_blob_chunk(&id, &b.manifest, 1, &bad), Err(BlobError::HashMismatch { index: 1 }));
    assert_eq!(decrypt_blob_chunk(&id, &b.manifest, 5, &bad), Err(BlobError::ChunkIndex { index: 5, count: 2 }));
    let mut lying = b.manifest.clone();
    lying.byte_size = 51;
    assert!(matches!(decrypt_blob(&id, &lying, &bytes_of(&b)), Err(BlobError::InvalidManifest(_))));
    let mut wrong_sum = b.manifest.clone();
    wrong_sum.sha256 = b.manifest.chunks[0].hash.clone();
    assert!(matches!(decrypt_blob(&id, &wrong_sum, &bytes_of(&b)), Err(BlobError::WholeBlobMismatch(_))));
}

#[test]
fn a_zero_chunk_size_is_refused() {
    let opts = BlobOptions { mime_type: "x/y".into(), chunk_size: Some(0) };
    assert!(matches!(encrypt_blob(&alice(), &[1], &opts, "t", &mut OsEntropy), Err(BlobError::InvalidOptions(_))));
}

#[test]
fn a_manifest_reads_back_from_the_json_it_is_stored_and_shown_as() {
    use simplysync::protocol::blob::BlobManifest;
    use simplysync::protocol::json_fields::read_json;
    let b = seal(&alice(), &[7u8; 700], 300);
    let text = serde_json::to_string(&b.manifest).unwrap();
    assert_eq!(read_json::<BlobManifest>(text.as_bytes(), "manifest").unwrap(), b.manifest);
    // A row's own members (id, updatedAt, deleted) are not manifest fields and are skipped.
    let row = text.replacen('{', r#"{"id":"x","updatedAt":"h","deleted":false,"#, 1);
    assert_eq!(read_json::<BlobManifest>(row.as_bytes(), "manifest").unwrap(), b.manifest);
    let no_chunks = text.replace("\"chunks\":", "\"parts\":");
    assert_eq!(read_json::<BlobManifest>(no_chunks.as_bytes(), "m").unwrap_err().0, "m: missing field `chunks`");
    let bad_size = text.replacen("\"size\":328", "\"size\":\"328\"", 1);
    assert_eq!(
        read_json::<BlobManifest>(bad_size.as_bytes(), "m").unwrap_err().0,
        "m.chunks[0].size: expected a whole number of at least 0, got a string"
    );
}
