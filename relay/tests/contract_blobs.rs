//! Contract: `PUT / GET / HEAD /v1/blobs/:hash`.

mod common;

use std::time::Duration;

use common::{Owner, Relay};
use reqwest::Method;
use serde_json::json;
use simplysync_protocol::identity::sha256_base64url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn chunk(fill: u8, len: usize) -> (String, Vec<u8>) {
    let bytes = vec![fill; len];
    (sha256_base64url(&bytes), bytes)
}

#[tokio::test]
async fn a_stored_chunk_comes_back_byte_for_byte_with_immutable_caching() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(1, 1000);
    let r = relay.put_blob(&alice, &hash, bytes.clone()).await;
    assert_eq!(r.json(), json!({"stored": true, "duplicate": false}));
    let got = relay.blob(Method::GET, &alice, &hash).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.bytes, bytes);
    assert_eq!(got.headers["content-type"], "application/octet-stream");
    assert!(got.headers["cache-control"].to_str().unwrap().contains("immutable"));
}

#[tokio::test]
async fn uploading_a_chunk_twice_is_a_duplicate() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(2, 10);
    relay.put_blob(&alice, &hash, bytes.clone()).await;
    assert_eq!(relay.put_blob(&alice, &hash, bytes).await.json(), json!({"stored": true, "duplicate": true}));
}

#[tokio::test]
async fn a_body_that_does_not_hash_to_the_path_is_400() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, _) = chunk(3, 10);
    relay.put_blob(&alice, &hash, vec![4; 10]).await.assert_error(400, "hash_mismatch");
    assert_eq!(relay.blob(Method::HEAD, &alice, &hash).await.status, 404);
}

#[tokio::test]
async fn an_existing_chunk_is_acknowledged_without_reading_the_body() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(5, 10);
    relay.put_blob(&alice, &hash, bytes).await;
    // Declare a body (within the limit) and never send it: the answer comes anyway.
    let addr = relay.url.strip_prefix("http://").unwrap();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /v1/blobs/{hash}?ownerId={} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 2000\r\n\r\n",
        alice.owner_id(),
        alice.token()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await.expect("answered").unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(r#""duplicate":true"#), "{text}");
}

#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_before_anything_else_even_for_a_chunk_it_has() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(7, 10);
    relay.put_blob(&alice, &hash, bytes).await;
    let addr = relay.url.strip_prefix("http://").unwrap();
    for (auth, what) in
        [(format!("Authorization: Bearer {}\r\n", alice.token()), "its owner"), (String::new(), "no token")]
    {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "PUT /v1/blobs/{hash}?ownerId={} HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 1000000000000\r\n\r\n",
            alice.owner_id()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await.expect("answered").unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(text.starts_with("HTTP/1.1 413"), "{what}: {text}");
        assert!(text.contains("payload_too_large") && text.contains("1000000000000"), "{text}");
    }
}

#[tokio::test]
async fn a_chunk_over_max_blob_bytes_is_413() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(6, 2049);
    relay.put_blob(&alice, &hash, bytes).await.assert_error(413, "payload_too_large");
}

#[tokio::test]
async fn an_empty_chunk_is_400() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.put_blob(&alice, &sha256_base64url(&[]), vec![]).await.assert_error(400, "bad_request");
}

#[tokio::test]
async fn the_first_upload_registers_the_owner_like_a_push() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(7, 10);
    relay.put_blob(&alice, &hash, bytes).await;
    assert_eq!(relay.status_of(&alice).await.status, 200);
    relay.push_as(alice.owner_id(), "other-token", &[alice.event("a", 1)]).await.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn head_is_200_for_a_stored_chunk_and_404_otherwise() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(8, 10);
    let (missing, _) = chunk(9, 10);
    relay.put_blob(&alice, &hash, bytes).await;
    let r = relay.blob(Method::HEAD, &alice, &hash).await;
    assert_eq!(r.status, 200);
    assert!(r.bytes.is_empty());
    assert_eq!(relay.blob(Method::HEAD, &alice, &missing).await.status, 404);
    relay.blob(Method::GET, &alice, &missing).await.assert_error(404, "not_found");
}

#[tokio::test]
async fn reading_chunks_of_an_unknown_owner_is_404() {
    let relay = Relay::start(&[]);
    let (hash, _) = chunk(1, 10);
    let stranger = Owner::new();
    relay.blob(Method::GET, &stranger, &hash).await.assert_error(404, "unknown_owner");
    assert_eq!(relay.blob(Method::HEAD, &stranger, &hash).await.status, 404);
}

#[tokio::test]
async fn one_owners_chunks_are_invisible_to_another_owner() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let bob = Owner::new();
    let (hash, bytes) = chunk(10, 10);
    relay.put_blob(&alice, &hash, bytes.clone()).await;
    relay.push(&bob, &[bob.event("a", 1)]).await;
    assert_eq!(relay.blob(Method::HEAD, &bob, &hash).await.status, 404);
    assert_eq!(relay.put_blob(&bob, &hash, bytes).await.json()["duplicate"], false);
}

#[tokio::test]
async fn reading_with_a_wrong_token_is_401() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let (hash, bytes) = chunk(11, 10);
    relay.put_blob(&alice, &hash, bytes).await;
    let url = format!("/v1/blobs/{hash}?ownerId={}", alice.owner_id());
    relay.get(&url, Some("wrong")).await.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn chunks_count_toward_usage_and_the_quota() {
    let relay = Relay::start(&[("MAX_OWNER_BYTES", "3000")]);
    let alice = Owner::new();
    let (h1, b1) = chunk(12, 2000);
    relay.put_blob(&alice, &h1, b1).await;
    assert_eq!(relay.status_of(&alice).await.json()["account"]["usedBytes"], 2000);
    let (h2, b2) = chunk(13, 1500);
    relay.put_blob(&alice, &h2, b2).await.assert_error(413, "quota_exceeded");
}

#[tokio::test]
async fn a_malformed_hash_or_owner_id_is_400() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    for hash in ["abc", "..%2F..%2Fetc%2Fpasswd", &"A".repeat(44), "%00"] {
        let url = format!("/v1/blobs/{hash}?ownerId={}", alice.owner_id());
        relay.get(&url, Some(alice.token())).await.assert_error(400, "bad_request");
    }
    let (hash, _) = chunk(1, 1);
    relay
        .get(&format!("/v1/blobs/{hash}?ownerId=x'%20OR%201=1"), Some(alice.token()))
        .await
        .assert_error(400, "bad_request");
}
