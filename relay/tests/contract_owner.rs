//! Contract: close, stream compaction, status/usage/health, epoch/headSeq and CORS.

mod common;

use common::{Owner, Relay};
use reqwest::Method;
use serde_json::json;
use simplysync_protocol::identity::sha256_base64url;

fn stream(o: &Owner, row: &str) -> String {
    o.id.stream_id("todos", row)
}

#[tokio::test]
async fn closing_deletes_events_and_blobs_then_every_request_with_the_valid_token_is_410() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    let chunk = vec![7u8; 100];
    let hash = sha256_base64url(&chunk);
    relay.put_blob(&alice, &hash, chunk.clone()).await;
    let r = relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    assert_eq!(r.json(), json!({"closed": true, "deletedEvents": 2, "deletedBlobs": 1}));

    relay.push(&alice, &[alice.event("c", 3)]).await.assert_error(410, "owner_closed");
    relay.pull(&alice, "", None).await.assert_error(410, "owner_closed");
    relay.status_of(&alice).await.assert_error(410, "owner_closed");
    relay
        .get(&format!("/v1/usage?ownerId={}", alice.owner_id()), Some(alice.token()))
        .await
        .assert_error(410, "owner_closed");
    let compact = json!({"ownerId": alice.owner_id(), "streamIds": [stream(&alice, "a")]});
    relay.post_json("/v1/streams/compact", Some(alice.token()), compact).await.assert_error(410, "owner_closed");
    relay.put_blob(&alice, &hash, chunk).await.assert_error(410, "owner_closed");
    relay.blob(Method::GET, &alice, &hash).await.assert_error(410, "owner_closed");
    assert_eq!(relay.blob(Method::HEAD, &alice, &hash).await.status, 410);
}

#[tokio::test]
async fn after_close_a_wrong_token_is_still_401_so_a_closed_owner_looks_live() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    relay.push_as(alice.owner_id(), "not-the-token", &[alice.event("b", 2)]).await.assert_error(401, "unauthorized");
    let url = format!("/v1/events?ownerId={}", alice.owner_id());
    relay.get(&url, Some("not-the-token")).await.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn closing_twice_returns_200_with_zero_counts() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let body = json!({"ownerId": alice.owner_id()});
    relay.post_json("/v1/owner/close", Some(alice.token()), body.clone()).await;
    let r = relay.post_json("/v1/owner/close", Some(alice.token()), body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"closed": true, "deletedEvents": 0, "deletedBlobs": 0}));
}

#[tokio::test]
async fn closing_an_unknown_owner_is_404_and_registers_nothing() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let r = relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    r.assert_error(404, "unknown_owner");
    relay.pull(&alice, "", None).await.assert_error(404, "unknown_owner");
}

#[tokio::test]
async fn compacting_streams_of_an_unknown_owner_is_404_and_registers_nothing() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let body = json!({"ownerId": alice.owner_id(), "streamIds": [stream(&alice, "a")]});
    relay.post_json("/v1/streams/compact", Some(alice.token()), body).await.assert_error(404, "unknown_owner");
    relay.pull(&alice, "", None).await.assert_error(404, "unknown_owner");
}

#[tokio::test]
async fn compacting_streams_drops_all_their_events_and_credits_the_bytes_back() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("a", 2), alice.event("b", 3)]).await;
    let before = relay.status_of(&alice).await.json()["account"].clone();
    let body = json!({"ownerId": alice.owner_id(), "streamIds": [stream(&alice, "a")]});
    let r = relay.post_json("/v1/streams/compact", Some(alice.token()), body).await.json();
    assert_eq!(r["deletedEvents"], 2);
    let after = relay.status_of(&alice).await.json()["account"].clone();
    let reclaimed = r["reclaimedBytes"].as_u64().unwrap();
    assert!(reclaimed > 0);
    assert_eq!(after["usedBytes"].as_u64().unwrap(), before["usedBytes"].as_u64().unwrap() - reclaimed);
    assert_eq!(after["events"], 1);
    assert_eq!(after["headSeq"], 3, "headSeq is never lowered");
}

#[tokio::test]
async fn compacting_unknown_or_already_compacted_streams_is_a_no_op() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let body = json!({"ownerId": alice.owner_id(), "streamIds": [stream(&alice, "zzz"), "AAAAAAAAAAAAAAAAAAAAAA"]});
    let r = relay.post_json("/v1/streams/compact", Some(alice.token()), body).await;
    assert_eq!(r.json(), json!({"deletedEvents": 0, "reclaimedBytes": 0}));
}

#[tokio::test]
async fn a_stream_id_not_in_sealed_form_is_400() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    for bad in [
        "short",
        "../../../../etc/passwd",
        "AAAAAAAAAAAAAAAAAAAAAA==",
        "AAAAAAAAAAAAAAAAAAAAA+",
        "ÀAAAAAAAAAAAAAAAAAAAAA",
    ] {
        let body = json!({"ownerId": alice.owner_id(), "streamIds": [stream(&alice, "a"), bad]});
        let r = relay.post_json("/v1/streams/compact", Some(alice.token()), body).await;
        r.assert_error(400, "bad_request");
        assert!(r.json()["message"].as_str().unwrap().contains("streamIds[1]"));
    }
}

#[tokio::test]
async fn more_than_max_streams_per_compact_is_413() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let ids: Vec<String> = (0..6).map(|i| stream(&alice, &i.to_string())).collect();
    let body = json!({"ownerId": alice.owner_id(), "streamIds": ids});
    relay.post_json("/v1/streams/compact", Some(alice.token()), body).await.assert_error(413, "payload_too_large");
}

#[tokio::test]
async fn status_returns_server_and_account_figures() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("a", 2), alice.event("b", 3)]).await;
    let v = relay.status_of(&alice).await.json();
    assert_eq!(v["server"]["version"], "0.1.0");
    assert!(v["server"]["serverTime"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["server"]["epoch"].as_str().unwrap().len(), 22);
    let a = &v["account"];
    assert_eq!(a["ownerId"], alice.owner_id());
    assert_eq!(a["quotaBytes"], 200000);
    let used = a["usedBytes"].as_u64().unwrap();
    assert!(used > 0);
    assert_eq!(a["usedPct"].as_f64().unwrap(), ((used as f64 / 2000.0) * 100.0).round() / 100.0);
    assert_eq!((a["headSeq"].clone(), a["streams"].clone(), a["events"].clone()), (json!(3), json!(2), json!(3)));
    assert!(a["createdAt"].as_str().unwrap().ends_with('Z'));
}

#[tokio::test]
async fn status_of_an_unknown_owner_is_404() {
    let relay = Relay::start(&[]);
    relay.status_of(&Owner::new()).await.assert_error(404, "unknown_owner");
}

#[tokio::test]
async fn usage_returns_the_owners_stored_bytes() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let used = relay.status_of(&alice).await.json()["account"]["usedBytes"].clone();
    let v = relay.get(&format!("/v1/usage?ownerId={}", alice.owner_id()), Some(alice.token())).await.json();
    assert_eq!(v, json!({"ownerId": alice.owner_id(), "storedBytes": used}));
}

#[tokio::test]
async fn health_answers_without_auth_with_version_time_and_epoch() {
    let relay = Relay::start(&[]);
    let v = relay.get("/health", None).await.json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["service"], "simplysync-relay");
    assert!(v["serverTime"].is_string() && v["version"].is_string());
    assert_eq!(v["epoch"].as_str().unwrap().len(), 22);
}

#[tokio::test]
async fn pulls_report_the_epoch_and_the_owners_head_seq() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    let epoch = relay.get("/health", None).await.json()["epoch"].clone();
    let v = relay.pull(&alice, "", Some(1)).await.json();
    assert_eq!(v["epoch"], epoch);
    assert_eq!(v["headSeq"], 2);
}

#[tokio::test]
async fn the_epoch_survives_a_restart_but_a_new_database_gets_a_new_one() {
    let mut relay = Relay::start(&[]);
    let epoch = relay.get("/health", None).await.json()["epoch"].clone();
    relay.restart();
    assert_eq!(relay.get("/health", None).await.json()["epoch"], epoch);
    let other = Relay::start(&[]);
    assert_ne!(other.get("/health", None).await.json()["epoch"], epoch);
}

#[tokio::test]
async fn deleting_rows_keeps_the_seq_counter_climbing() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1), alice.event("b", 2)]).await;
    relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    relay.restart();
    let bob = Owner::new();
    relay.push(&bob, &[bob.event("x", 1)]).await;
    let v = relay.pull(&bob, "", None).await.json();
    assert_eq!(v["nextCursor"], "3", "seq 1 and 2 are never reused");
}

#[tokio::test]
async fn a_preflight_allows_any_origin_and_the_authorization_header() {
    let relay = Relay::start(&[]);
    let r = common::client()
        .request(Method::OPTIONS, format!("{}/v1/events", relay.url))
        .header("Origin", "https://app.example")
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "authorization,content-type")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let h = r.headers();
    assert_eq!(h["access-control-allow-origin"], "*");
    let allowed = h["access-control-allow-headers"].to_str().unwrap().to_ascii_lowercase();
    assert!(allowed.contains("authorization"), "a * would not cover Authorization: {allowed}");
    assert!(h["access-control-allow-methods"].to_str().unwrap().contains("POST"));
}

#[tokio::test]
async fn error_responses_carry_cors_headers_too() {
    let relay = Relay::start(&[]);
    let r = common::client()
        .get(format!("{}/v1/events?ownerId=x", relay.url))
        .header("Origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["access-control-allow-origin"], "*");
}

#[tokio::test]
async fn every_answer_reports_one_epoch_and_rotate_epoch_replaces_it_keeping_the_data() {
    let mut relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let epoch = relay.get("/health", None).await.json()["epoch"].clone();
    for _ in 0..6 {
        // With several processes, each answer may come from another one.
        assert_eq!(relay.get("/health", None).await.json()["epoch"], epoch);
        assert_eq!(relay.pull(&alice, "", None).await.json()["epoch"], epoch);
    }
    relay.send_sigterm();
    relay.wait_exit();
    let out = relay.command(&["rotate-epoch"]);
    assert_eq!(out["previousEpoch"], epoch);
    assert_ne!(out["epoch"], epoch);
    relay.restart();
    for _ in 0..6 {
        assert_eq!(relay.get("/health", None).await.json()["epoch"], out["epoch"]);
    }
    assert_eq!(relay.pull_all(&alice).await.0.len(), 1);
}
