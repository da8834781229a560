//! Contract: log compaction (scheduled, ops endpoint, command), ops auth, metrics, logs,
//! graceful shutdown, timeouts, routing errors and configuration.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{versions_of_three_rows, Owner, Relay};
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ADMIN: &[(&str, &str)] = &[("ADMIN_TOKEN", "ops-secret")];

#[tokio::test]
async fn compaction_keeps_only_the_newest_event_of_each_stream_and_never_reuses_a_seq() {
    let relay = Relay::start(ADMIN);
    let alice = Owner::new();
    let events = versions_of_three_rows(&relay, &alice).await;
    let used_before = relay.status_of(&alice).await.json()["account"]["usedBytes"].as_u64().unwrap();
    let r = relay.post_json("/ops/compact", Some("ops-secret"), json!({})).await.json();
    assert_eq!(r["deletedEvents"], 3);
    let (kept, _) = relay.pull_all(&alice).await;
    let mut kept_ids: Vec<&str> = kept.iter().map(|e| e.event_id.as_str()).collect();
    kept_ids.sort();
    let mut want = vec![events[0].event_id.as_str(), events[2].event_id.as_str(), events[5].event_id.as_str()];
    want.sort();
    assert_eq!(kept_ids, want, "the max eventId (HLC) of each stream survives");
    let account = relay.status_of(&alice).await.json()["account"].clone();
    assert_eq!(account["usedBytes"].as_u64().unwrap(), used_before - r["reclaimedBytes"].as_u64().unwrap());
    assert_eq!(account["headSeq"], 6);
    relay.push(&alice, &[alice.event("d", 9)]).await;
    assert_eq!(relay.pull(&alice, "6", None).await.json()["nextCursor"], "7");
}

#[tokio::test]
async fn scheduled_compaction_runs_every_interval() {
    let relay = Relay::start(&[("COMPACTION_INTERVAL_MS", "150")]);
    let alice = Owner::new();
    versions_of_three_rows(&relay, &alice).await;
    let mut metrics = String::new();
    for _ in 0..100 {
        // The run's metrics are recorded just after its transaction commits: a pull can see the
        // compacted log a moment before the counter moves, so wait for both.
        if relay.pull_all(&alice).await.0.len() == 3 {
            metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
            if metrics.contains("simplysync_compaction_runs_total")
                && !metrics.contains("simplysync_compaction_runs_total 0")
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("scheduled compaction did not run (or was not counted): {metrics}");
}

#[tokio::test]
async fn ops_endpoints_need_the_admin_token_and_are_off_without_one() {
    let relay = Relay::start(ADMIN);
    relay.get("/ops/stats", None).await.assert_error(401, "unauthorized");
    relay.get("/ops/stats", Some("wrong")).await.assert_error(403, "forbidden");
    relay.post_json("/ops/compact", Some("wrong"), json!({})).await.assert_error(403, "forbidden");
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let stats = relay.get("/ops/stats", Some("ops-secret")).await.json();
    assert_eq!((stats["owners"].clone(), stats["events"].clone()), (json!(1), json!(1)));
    assert!(stats["storedBytes"].as_u64().unwrap() > 0);
    let off = Relay::start(&[]);
    off.get("/ops/stats", Some("anything")).await.assert_error(403, "forbidden");
}

#[tokio::test]
async fn the_ops_page_is_served_as_html() {
    let relay = Relay::start(ADMIN);
    let r = relay.get("/ops", None).await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(String::from_utf8(r.bytes).unwrap().contains("/ops/stats"));
}

#[tokio::test]
async fn metrics_count_requests_events_duplicates_blobs_and_compactions() {
    let relay = Relay::start(ADMIN);
    let alice = Owner::new();
    let e = alice.event("a", 1);
    relay.push(&alice, &[e.clone(), alice.event("a", 2)]).await;
    relay.push(&alice, &[e]).await;
    relay.pull(&alice, "", None).await;
    relay.post_json("/ops/compact", Some("ops-secret"), json!({})).await;
    let text = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    for line in [
        "simplysync_http_requests_total{method=\"POST\",route=\"/v1/events\",status=\"200\"} 2",
        "simplysync_http_requests_total{method=\"GET\",route=\"/v1/events\",status=\"200\"} 1",
        "simplysync_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/events\"} 2",
        "# TYPE simplysync_http_request_duration_seconds histogram",
        "simplysync_build_info{version=",
        "simplysync_owners_closed 0",
        "# TYPE simplysync_compaction_last_run_timestamp_seconds gauge",
        "# TYPE simplysync_database_bytes gauge",
        "# TYPE simplysync_wal_bytes gauge",
        "simplysync_events_accepted_total 2",
        "simplysync_events_duplicate_total 1",
        "simplysync_events_pulled_total 2",
        "simplysync_compaction_runs_total 1",
        "simplysync_compaction_deleted_events_total 1",
        "simplysync_stored_events 1",
        "simplysync_owners 1",
        "# TYPE simplysync_stored_bytes gauge",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[tokio::test]
async fn logs_have_one_line_per_request_with_an_owner_tag_and_never_tokens_or_bodies() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let e = alice.event("a", 1);
    relay.push(&alice, std::slice::from_ref(&e)).await;
    relay.pull(&alice, "", None).await;
    // The log line is written after the answer: wait for both lines, not for a fixed time.
    let mut log = relay.log_text();
    for _ in 0..400 {
        if log.lines().filter(|l| l.contains(" request ")).count() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        log = relay.log_text();
    }
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(" request ")).collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].contains("route=\"/v1/events\"") && lines[0].contains("status=200") && lines[0].contains("ms="));
    let tag = simplysync_relay::http::owner_tag(alice.owner_id());
    assert!(lines.iter().all(|l| l.contains(&tag)), "{log}");
    for secret in [alice.token(), alice.owner_id(), e.ciphertext.as_str(), e.nonce.as_str()] {
        assert!(!log.contains(secret), "the log leaks {secret:?}");
    }
}

#[tokio::test]
async fn a_request_whose_body_never_finishes_gets_408_and_the_relay_keeps_serving() {
    let relay = Relay::start(&[("REQUEST_TIMEOUT_MS", "300")]);
    let alice = Owner::new();
    let addr = relay.url.strip_prefix("http://").unwrap();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 5000\r\n\r\n{{\"ownerId\":",
        alice.token()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await.expect("answered").unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"));
    assert_eq!(relay.get("/health", None).await.status, 200);
}

#[tokio::test]
async fn unknown_routes_are_404_and_wrong_methods_405_both_as_json() {
    let relay = Relay::start(&[]);
    relay.get("/v2/events", None).await.assert_error(404, "not_found");
    common::send(Method::DELETE, &format!("{}/v1/events", relay.url), None, None)
        .await
        .assert_error(405, "method_not_allowed");
}

#[test]
fn an_invalid_setting_stops_startup_with_a_message_naming_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_simplysync-relay")).env("MAX_EVENTS_PER_PUSH", "lots").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("MAX_EVENTS_PER_PUSH"));
}

#[test]
fn help_lists_every_environment_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_simplysync-relay")).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for (name, _, _) in simplysync_relay::config::SETTINGS {
        assert!(text.contains(name), "--help misses {name}");
    }
}

#[tokio::test]
async fn ready_says_the_storage_answers_without_authentication() {
    let relay = Relay::start(&[]);
    let r = relay.get("/ready", None).await;
    assert_eq!((r.status.as_u16(), r.json()), (200, json!({"ready": true})));
}
