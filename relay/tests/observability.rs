//! What an operator sees and what the counters say: metrics behind a token or on their own
//! address, request ids in responses and logs, maintained counters that match the stored rows
//! (also after an upgrade from a database without them), private caching of blobs, the order
//! of validation, and quotas and compaction under concurrent pushes.

mod common;

use std::collections::HashMap;

use common::{client, send, Owner, Relay};
use reqwest::Method;
use serde_json::json;
use simplysync_protocol::identity::sha256_base64url;
use simplysync_protocol::SyncEnvelope;

#[tokio::test]
async fn metrics_behind_a_token_follow_prometheus_conventions() {
    let relay = Relay::start(&[("METRICS_TOKEN", "m-secret")]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    relay.get("/metrics", None).await.assert_error(401, "unauthorized");
    relay.get("/metrics", Some("wrong")).await.assert_error(403, "forbidden");
    let r = relay.get("/metrics", Some("m-secret")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
    let text = String::from_utf8(r.bytes).unwrap();
    for needle in [
        "simplysync_http_requests_total{method=\"POST\",route=\"/v1/events\",status=\"200\"} 1",
        "simplysync_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/events\",le=\"+Inf\"} 1",
        "simplysync_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/events\"} 1",
        "simplysync_http_requests_in_flight",
        "simplysync_build_info{version=\"",
        "simplysync_database_bytes",
        "simplysync_wal_bytes",
        "simplysync_owners_closed 0",
        "simplysync_compaction_last_run_timestamp_seconds",
        "# TYPE simplysync_http_request_duration_seconds histogram",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[tokio::test]
async fn metrics_on_their_own_address_are_not_served_on_the_api() {
    let relay = Relay::start(&[("METRICS_ADDR", "127.0.0.1:0")]);
    let metrics_url = relay.metrics_url.clone().expect("the metrics address is printed");
    assert_ne!(metrics_url, relay.url);
    relay.get("/metrics", None).await.assert_error(404, "not_found");
    let r = send(Method::GET, &format!("{metrics_url}/metrics"), None, None).await;
    assert_eq!(r.status, 200);
    assert!(String::from_utf8(r.bytes).unwrap().contains("simplysync_build_info"));
    let api_on_metrics = send(Method::GET, &format!("{metrics_url}/health"), None, None).await;
    assert_eq!(api_on_metrics.status, 404);
}

#[tokio::test]
async fn every_response_carries_a_request_id_that_its_log_line_shares_with_the_peer() {
    let relay = Relay::start(&[]);
    let r = client().get(format!("{}/health", relay.url)).header("x-request-id", "trace-abc-123").send().await.unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-abc-123", "a sane client id is kept");
    let a = relay.get("/health", None).await.headers["x-request-id"].to_str().unwrap().to_owned();
    let b = relay.get("/health", None).await.headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(!a.is_empty() && a != b, "fresh ids: {a:?} {b:?}");
    let r =
        client().get(format!("{}/health", relay.url)).header("x-request-id", "bad id\twith junk").send().await.unwrap();
    assert_ne!(r.headers()["x-request-id"], "bad id\twith junk");
    assert!(relay.log_shows("trace-abc-123") && relay.log_shows(&a), "{}", relay.log_text());
    let log = relay.log_text();
    let line = log.lines().find(|l| l.contains("trace-abc-123")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("127.0.0.1:"), "the peer address is on the line: {line}");
    assert!(log.lines().any(|l| l.contains(&a)), "{log}");
}

/// The stored rows, counted directly in the relay's database (SQLite file or PostgreSQL).
fn truth(relay: &Relay, owner: &Owner) -> (u64, u64, u64) {
    // PostgreSQL stores events under the owner id, the SQLite file under the owner's key.
    let events = match relay.database_url() {
        Some(_) => "events WHERE owner_id = '{o}'",
        None => "events WHERE owner_key = (SELECT owner_key FROM owners WHERE owner_id = '{o}')",
    };
    let queries = [
        format!("SELECT count(*) FROM {events}"),
        format!("SELECT count(DISTINCT stream_id) FROM {events}"),
        format!("SELECT coalesce(sum(bytes), 0) FROM {events}"),
        "SELECT coalesce(sum(bytes), 0) FROM blobs WHERE owner_id = '{o}'".to_owned(),
    ]
    .map(|q| q.replace("{o}", owner.owner_id()));
    let n: Vec<u64> = match relay.database_url() {
        Some(url) => queries
            .iter()
            .map(|q| {
                let out = std::process::Command::new("psql").arg(url).args(["-Atc", q]).output().unwrap();
                String::from_utf8(out.stdout).unwrap().trim().parse().unwrap()
            })
            .collect(),
        None => {
            let c = rusqlite::Connection::open(&relay.db).unwrap();
            queries.iter().map(|q| c.query_row(q, [], |r| r.get::<_, i64>(0)).unwrap() as u64).collect()
        }
    };
    (n[0], n[1], n[2] + n[3])
}

async fn assert_counters_match(relay: &Relay, owner: &Owner, when: &str) {
    let account = relay.status_of(owner).await.json()["account"].clone();
    let (events, streams, bytes) = truth(relay, owner);
    assert_eq!(account["events"], events, "{when}: {account}");
    assert_eq!(account["streams"], streams, "{when}: {account}");
    assert_eq!(account["usedBytes"], bytes, "{when}: {account}");
    let usage = relay.get(&format!("/v1/usage?ownerId={}", owner.owner_id()), Some(owner.token())).await.json();
    assert_eq!(usage["storedBytes"], bytes, "{when}: {usage}");
}

#[tokio::test]
async fn status_counters_match_the_stored_rows_through_pushes_compaction_blobs_and_close() {
    let relay = Relay::start(&[("ADMIN_TOKEN", "admin")]);
    let (alice, bob) = (Owner::new(), Owner::new());
    let v: Vec<SyncEnvelope> = (1..=6).map(|n| alice.event(["x", "y", "z"][n as usize % 3], n)).collect();
    relay.push(&alice, &v).await;
    relay.push(&bob, &[bob.event("b", 1)]).await;
    assert_counters_match(&relay, &alice, "after a push").await;
    relay.push(&alice, &v[..3]).await;
    assert_counters_match(&relay, &alice, "after a duplicate push").await;
    let bytes = b"chunk bytes".to_vec();
    relay.put_blob(&alice, &sha256_base64url(&bytes), bytes).await;
    assert_counters_match(&relay, &alice, "after a blob").await;
    assert_eq!(relay.post_json("/ops/compact", Some("admin"), json!({})).await.status, 200);
    assert_counters_match(&relay, &alice, "after compaction").await;
    let stream = v[0].stream_id.clone().unwrap();
    assert_eq!(relay.compact_streams(&alice, &[stream]).await.status, 200);
    assert_counters_match(&relay, &alice, "after compacting a stream").await;
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    let (a, b) = (truth(&relay, &alice).0, truth(&relay, &bob).0);
    assert!(metrics.contains(&format!("simplysync_stored_events {}\n", a + b)), "{metrics}");
    assert!(metrics.contains("simplysync_owners 2\n"), "{metrics}");
    relay.post_json("/v1/owner/close", Some(bob.token()), json!({"ownerId": bob.owner_id()})).await;
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    assert!(metrics.contains(&format!("simplysync_stored_events {a}\n")), "{metrics}");
    assert!(metrics.contains("simplysync_owners_closed 1\n"), "{metrics}");
    assert!(metrics.contains("simplysync_stored_blobs 1\n"), "{metrics}");
}

#[tokio::test]
async fn who_is_asking_is_judged_before_the_envelopes() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    relay.push(&alice, &[alice.event("a", 1)]).await;
    let mut bad = alice.event("b", 2);
    bad.nonce = "not base64!".into();
    // A wrong token on a batch with an invalid envelope: 401, not 400.
    let r = relay.push_as(alice.owner_id(), &"w".repeat(43), std::slice::from_ref(&bad)).await;
    r.assert_error(401, "unauthorized");
    // The right token: the envelope is judged.
    relay.push(&alice, std::slice::from_ref(&bad)).await.assert_error(400, "invalid_envelope");
    // A closed owner's device hears 410 even for an invalid batch.
    relay.post_json("/v1/owner/close", Some(alice.token()), json!({"ownerId": alice.owner_id()})).await;
    relay.push(&alice, &[bad]).await.assert_error(410, "owner_closed");
    // Body that is not JSON at all: nothing names an owner, so 400 comes first.
    let r = send(Method::POST, &format!("{}/v1/events", relay.url), Some("w"), Some(b"{".to_vec())).await;
    r.assert_error(400, "invalid_json");
}

#[tokio::test]
async fn blob_chunks_may_only_be_cached_privately() {
    let relay = Relay::start(&[]);
    let alice = Owner::new();
    let bytes = b"private chunk".to_vec();
    let hash = sha256_base64url(&bytes);
    relay.put_blob(&alice, &hash, bytes).await;
    let r = relay.blob(Method::GET, &alice, &hash).await;
    assert_eq!(r.headers["cache-control"], "private, max-age=31536000, immutable");
}

#[tokio::test]
async fn compaction_running_during_pushes_keeps_every_rows_newest_version() {
    let relay =
        Relay::start(&[("ADMIN_TOKEN", "admin"), ("MAX_OWNER_BYTES", "100000000"), ("MAX_TOTAL_BYTES", "100000000")]);
    let alice = Owner::new();
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let (url, alice) = (relay.url.clone(), alice.clone());
            tokio::spawn(async move {
                for round in 0..15u64 {
                    let events: Vec<SyncEnvelope> =
                        (0..10).map(|row| alice.event(&format!("w{w}-r{row}"), round * 100 + w * 10 + row)).collect();
                    let body = json!({"ownerId": alice.owner_id(), "events": events}).to_string().into_bytes();
                    let r = send(Method::POST, &format!("{url}/v1/events"), Some(alice.token()), Some(body)).await;
                    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.bytes));
                }
            })
        })
        .collect();
    let mut compactions = 0;
    while writers.iter().any(|w| !w.is_finished()) {
        assert_eq!(relay.post_json("/ops/compact", Some("admin"), json!({})).await.status, 200);
        compactions += 1;
    }
    for w in writers {
        w.await.unwrap();
    }
    assert!(compactions > 1);
    relay.post_json("/ops/compact", Some("admin"), json!({})).await;
    let (events, _) = relay.pull_all(&alice).await;
    let mut newest: HashMap<Option<String>, String> = HashMap::new();
    for e in &events {
        let slot = newest.entry(e.stream_id.clone()).or_default();
        if e.event_id > *slot {
            *slot = e.event_id.clone();
        }
    }
    assert_eq!(events.len(), 40, "one event per row after a final compaction");
    for w in 0..4u64 {
        for row in 0..10u64 {
            let want = alice.event(&format!("w{w}-r{row}"), 1400 + w * 10 + row);
            assert_eq!(newest.get(&want.stream_id), Some(&want.event_id), "row w{w}-r{row} kept its newest version");
        }
    }
    assert_counters_match(&relay, &alice, "after compaction during pushes").await;
}

#[tokio::test]
async fn writes_refused_by_a_quota_are_counted_by_quota() {
    // Two owners' records count 2 × 4 KiB of MAX_TOTAL_BYTES besides their events.
    let relay = Relay::start(&[("MAX_OWNER_BYTES", "4000"), ("MAX_TOTAL_BYTES", "13192")]);
    let (alice, bob) = (Owner::new(), Owner::new());
    assert_eq!(relay.push(&alice, &[alice.event_sized("a", 1, 1000)]).await.status, 200);
    let over_the_owner_quota: Vec<SyncEnvelope> =
        (2..4).map(|i| alice.event_sized(&format!("r{i}"), i, 1000)).collect();
    relay.push(&alice, &over_the_owner_quota).await.assert_error(413, "quota_exceeded");
    assert_eq!(relay.push(&bob, &[bob.event_sized("b", 1, 1000)]).await.status, 200);
    relay.push(&bob, &[bob.event_sized("c", 2, 1000)]).await.assert_error(413, "quota_exceeded");
    let metrics = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    assert!(metrics.contains("simplysync_quota_rejections_total{quota=\"owner\"} 1\n"), "{metrics}");
    assert!(metrics.contains("simplysync_quota_rejections_total{quota=\"total\"} 1\n"), "{metrics}");
}

#[tokio::test]
async fn methods_a_client_invents_are_counted_as_other_and_never_grow_the_metrics() {
    let relay = Relay::start(&[]);
    let c = client();
    let metrics_lines =
        || async { String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap().lines().count() };
    let invent = |i: u32| Method::from_bytes(format!("X{i}").as_bytes()).unwrap();
    c.request(invent(0), format!("{}/health", relay.url)).send().await.unwrap();
    metrics_lines().await; // a scrape's own series exist from the second on
    let before = metrics_lines().await;
    for i in 1..=10_000u32 {
        c.request(invent(i), format!("{}/health", relay.url)).send().await.unwrap();
    }
    assert_eq!(metrics_lines().await, before, "10,000 invented methods add no series");
    let text = String::from_utf8(relay.get("/metrics", None).await.bytes).unwrap();
    assert!(text.contains("method=\"other\""), "{text}");
    assert!(!text.contains("method=\"X1\""), "{text}");
}
