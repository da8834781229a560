//! Blob chunks in S3-compatible storage (`BLOB_STORE_URL`), on the test server at
//! `SIMPLYSYNC_TEST_S3` (`scripts/test.sh` starts a throwaway moto server): the object is
//! written before its metadata, read back through the relay, and deleted when the owner closes
//! — also when the object store was unreachable at that moment (the scheduled pass finishes it).

mod common;

use common::{bucket_keys, fresh_bucket_settings, Owner, Relay};
use reqwest::Method;
use serde_json::json;
use simplysync_protocol::identity::sha256_base64url;

fn relay_with_bucket(extra: &[(&str, &str)]) -> (Relay, String) {
    let settings = fresh_bucket_settings();
    let mut all: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.extend_from_slice(extra);
    let relay = Relay::start(&all);
    let bucket =
        relay.setting("BLOB_STORE_URL").unwrap().trim_start_matches("s3://").split('/').next().unwrap().to_owned();
    (relay, bucket)
}

#[tokio::test]
async fn a_chunk_is_stored_as_an_object_keyed_by_owner_and_hash_and_served_back() {
    let (relay, bucket) = relay_with_bucket(&[]);
    let alice = Owner::new();
    let bytes = b"sealed chunk bytes".to_vec();
    let hash = sha256_base64url(&bytes);
    assert_eq!(relay.put_blob(&alice, &hash, bytes.clone()).await.json(), json!({"stored": true, "duplicate": false}));
    assert_eq!(bucket_keys(&bucket, "chunks/"), vec![format!("chunks/{}/{hash}", alice.owner_id())]);
    let got = relay.blob(Method::GET, &alice, &hash).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.bytes, bytes);
    assert_eq!(relay.blob(Method::HEAD, &alice, &hash).await.status, 200);
    assert_eq!(relay.status_of(&alice).await.json()["account"]["usedBytes"], bytes.len());
    // The database keeps the metadata only (checked in the SQLite file).
    if relay.database_url().is_none() {
        let c = rusqlite::Connection::open(&relay.db).unwrap();
        let (len, size): (i64, i64) =
            c.query_row("SELECT length(data), bytes FROM blobs", [], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        assert_eq!((len, size), (0, bytes.len() as i64));
    }
}

#[tokio::test]
async fn an_upload_refused_by_the_quota_stores_no_metadata_and_charges_nothing() {
    let (relay, _bucket) = relay_with_bucket(&[("MAX_OWNER_BYTES", "1000")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let used = relay.status_of(&alice).await.json()["account"]["usedBytes"].clone();
    let bytes = vec![7u8; 1500];
    let hash = sha256_base64url(&bytes);
    relay.put_blob(&alice, &hash, bytes).await.assert_error(413, "quota_exceeded");
    // The object may stay (another upload of the chunk could point at it); no row does.
    assert_eq!(relay.blob(Method::HEAD, &alice, &hash).await.status, 404);
    assert_eq!(relay.status_of(&alice).await.json()["account"]["usedBytes"], used);
}

#[tokio::test]
async fn closing_an_owner_deletes_its_objects_and_no_other_owners() {
    let (relay, bucket) = relay_with_bucket(&[]);
    let (alice, bob) = (Owner::new(), Owner::new());
    for (owner, fill) in [(&alice, 1u8), (&alice, 2), (&bob, 3)] {
        let bytes = vec![fill; 100];
        relay.put_blob(owner, &sha256_base64url(&bytes), bytes).await;
    }
    assert_eq!(bucket_keys(&bucket, "chunks/").len(), 3);
    let r = relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    assert_eq!(r.json()["deletedBlobs"], 2);
    assert_eq!(
        bucket_keys(&bucket, "chunks/"),
        vec![format!("chunks/{}/{}", bob.owner_id(), sha256_base64url(&[3u8; 100]))]
    );
}

#[tokio::test]
async fn objects_a_close_could_not_delete_are_deleted_by_the_next_scheduled_pass() {
    let (mut relay, bucket) = relay_with_bucket(&[("ADMIN_TOKEN", "ops")]);
    let alice = Owner::new();
    let bytes = vec![9u8; 100];
    relay.put_blob(&alice, &sha256_base64url(&bytes), bytes).await;
    // The object store is unreachable while the owner closes.
    let endpoint = relay.setting("AWS_ENDPOINT_URL").unwrap().to_owned();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    relay.set_env("AWS_ENDPOINT_URL", &format!("http://{dead}"));
    relay.restart();
    let r = relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    assert_eq!(r.status, 200, "the close itself succeeds: {}", String::from_utf8_lossy(&r.bytes));
    assert_eq!(bucket_keys(&bucket, "chunks/").len(), 1, "still there");
    relay.set_env("AWS_ENDPOINT_URL", &endpoint);
    relay.restart();
    assert_eq!(relay.post_json("/ops/compact", Some("ops"), json!({})).await.status, 200);
    assert!(bucket_keys(&bucket, "chunks/").is_empty(), "the pass deleted the closed owner's objects");
}

#[tokio::test]
async fn an_object_left_by_a_refused_upload_is_swept_once_past_its_grace_and_held_chunks_stay() {
    let (relay, bucket) =
        relay_with_bucket(&[("MAX_OWNER_BYTES", "1000"), ("BLOB_ORPHAN_GRACE_SECS", "0"), ("ADMIN_TOKEN", "ops")]);
    let alice = Owner::new();
    let held = vec![1u8; 200];
    relay.put_blob(&alice, &sha256_base64url(&held), held.clone()).await;
    let refused = vec![2u8; 1500];
    relay.put_blob(&alice, &sha256_base64url(&refused), refused).await.assert_error(413, "quota_exceeded");
    assert_eq!(bucket_keys(&bucket, "chunks/").len(), 2, "the refused upload's object is left in place");
    assert_eq!(relay.post_json("/ops/compact", Some("ops"), json!({})).await.status, 200);
    assert_eq!(
        bucket_keys(&bucket, "chunks/"),
        vec![format!("chunks/{}/{}", alice.owner_id(), sha256_base64url(&held))]
    );
    let got = relay.blob(Method::GET, &alice, &sha256_base64url(&held)).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.bytes, held);
}

#[tokio::test]
async fn ready_names_the_object_store_when_it_does_not_answer() {
    let (mut relay, _bucket) = relay_with_bucket(&[]);
    let r = relay.get("/ready", None).await;
    assert_eq!((r.status.as_u16(), r.json()), (200, json!({"ready": true})));
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    relay.set_env("AWS_ENDPOINT_URL", &format!("http://{dead}"));
    relay.restart();
    let r = relay.get("/ready", None).await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (503, json!({"ready": false, "reason": "the object store did not answer"}))
    );
}
